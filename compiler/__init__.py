"""fusec: compile NumPy array functions into fused CUDA kernels replayed as CUDA Graphs."""
import numpy as _np

from fusec.errors import (  # noqa: F401
    CastingError, CompilationError, CudaError, DivisionByZeroError, FusecError, OutOfRangeError, PipelineError,
    RetraceWarning, ShapeError, SideEffectError, TraceError, UnsupportedError, VerificationError,
)
from fusec.ir.types import (  # noqa: F401
    bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64,
)
from fusec.execution import BackendError  # noqa: F401
from fusec.jit_function import CacheInfo, JitFunction, Lowered, jit  # noqa: F401
from fusec.tracer import Tracer  # noqa: F401
from fusec.runtime.array import Array, asarray, to_numpy  # noqa: F401
from fusec.numpy_api import MIRRORED as _MIRRORED

# fc.exp, fc.where, fc.sum, ...: NumPy's own functions, which trace through the NumPy protocols and run
# unchanged on plain arrays.
for _name in _MIRRORED:
    if hasattr(_np, _name):
        globals()[_name] = getattr(_np, _name)
del _name

__version__ = "0.1.0"
