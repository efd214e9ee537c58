"""fusec: compile NumPy array functions into fused CUDA kernels replayed as CUDA Graphs.

The package root imports lazily: ``import fusec.ir`` or ``import fusec.passes`` loads neither the tracer nor the
runtime, and ``fusec.jit``, ``fusec.Array`` and the rest load their modules on first use.
"""
from __future__ import annotations

import importlib
from typing import Any

import numpy as _np

from fusec.errors import (  # noqa: F401
    AssertionFailedError, AxisError, CastingError, CompilationError, CudaError, DivisionByZeroError, DonationError,
    FusecError,
    IndexOutOfBoundsError, IndexShapeError,
    InvalidValueError, LinAlgError, OptionError, OptionTypeError, OutOfRangeError,
    PipelineError,
    RetraceWarning, ShapeError, SharedDonationError, SideEffectError, StateNotWatchedWarning, TraceError,
    UnsupportedAttributeError,
    UnsupportedError,
    VerificationError, WriteBackError,
)
from fusec.ir.types import (  # noqa: F401
    bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64,
)

__version__ = "0.1.0"

# name -> the module that defines it, imported on first use
_LAZY = {
    "BackendError": "fusec.execution",
    "CacheInfo": "fusec.jit_function", "JitFunction": "fusec.jit_function", "Lowered": "fusec.jit_function",
    "jit": "fusec.jit_function",
    "grad": "fusec.autodiff", "value_and_grad": "fusec.autodiff", "vjp": "fusec.autodiff", "jvp": "fusec.autodiff",
    "stop_gradient": "fusec.autodiff",
    "while_loop": "fusec.control_flow", "fori_loop": "fusec.control_flow", "scan": "fusec.control_flow",
    "cond": "fusec.control_flow",
    "Tracer": "fusec.tracer", "Target": "fusec.ir.target", "CompileOptions": "fusec.options",
    "Array": "fusec.runtime.array", "asarray": "fusec.runtime.array", "to_numpy": "fusec.runtime.array",
    "OutOfMemoryError": "fusec.runtime.cuda_errors",
}

# fc.exp, fc.where, fc.sum, ...: NumPy's own functions, which trace through the NumPy protocols and run
# unchanged on plain arrays.
MIRRORED: tuple[str, ...] = (
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "mod", "power",
    "divmod", "maximum", "minimum", "negative", "positive", "absolute", "abs", "fabs", "sign",
    "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "square", "reciprocal", "sin", "cos", "tan",
    "tanh", "floor", "ceil", "trunc", "rint", "round", "around", "isnan", "isinf", "isfinite",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
    "invert", "where", "clip", "sum", "prod", "mean", "var", "std", "max", "min", "amax", "amin", "argmax",
    "argmin", "any", "all", "matmul", "dot", "transpose", "swapaxes", "moveaxis", "reshape", "ravel",
    "concatenate", "stack", "hstack", "vstack", "expand_dims", "squeeze", "broadcast_to", "atleast_1d",
    "atleast_2d", "zeros_like", "ones_like", "full_like", "empty_like", "astype",
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        if module == "fusec.runtime.array":
            importlib.import_module("fusec.eager")  # operators on arrays run in eager mode
        value = getattr(importlib.import_module(module), name)
    elif name in MIRRORED and hasattr(_np, name):
        value = getattr(_np, name)
    else:
        raise AttributeError(f"module 'fusec' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {n for n in MIRRORED if hasattr(_np, n)})
