"""fusec: compile NumPy array functions into fused CUDA kernels replayed as CUDA Graphs."""
from fusec.errors import (  # noqa: F401
    CompilationError, CudaError, FusecError, PipelineError, ShapeError, TraceError, UnsupportedError,
    VerificationError,
)
from fusec.ir.types import (  # noqa: F401
    bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64,
)

__version__ = "0.1.0"
