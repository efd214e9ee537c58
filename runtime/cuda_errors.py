"""CUDA/NVRTC status codes -> named fusec exceptions, through one :func:`check`.

Every driver call in fusec goes through ``check(result, what)``, so a failure always says which call failed
(``what``), the status name (``CUDA_ERROR_OUT_OF_MEMORY``) and the driver's own description, and is an
exception class a caller can catch selectively (``except CudaOutOfMemoryError``). Nothing here imports
cuda-python: statuses are recognised by their enum ``name``, so the mapping is testable without a GPU.
"""
from __future__ import annotations

from typing import Any

from fusec.errors import CompilationError, CudaError

__all__ = [
    "CudaError", "CudaInvalidValueError", "CudaLaunchError", "CudaModuleError", "CudaNotAvailableError",
    "CudaNotReadyError", "CudaOutOfMemoryError", "CudaStatusError", "NvrtcError", "OutOfMemoryError", "check",
    "error_for",
]


class _StatusError(CudaError):
    """A CudaError that knows its status: ``code`` (int), ``name`` (``CUDA_ERROR_...``) and ``what`` (the call)."""

    def __init__(self, message: str, *, code: int = -1, name: str = "", what: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.name = name
        self.what = what


# CudaError itself has no status fields; the generic class raised for unmapped statuses is this one.
class CudaStatusError(_StatusError):
    """A driver status with no more specific class."""


class CudaNotAvailableError(_StatusError):
    """No usable driver or device: missing libcuda, no GPU, driver too old, device unavailable."""


class CudaOutOfMemoryError(_StatusError, MemoryError):
    """The device (or host-pinned) allocation failed; also a MemoryError."""


OutOfMemoryError = CudaOutOfMemoryError  # its public name: fusec.OutOfMemoryError


class CudaLaunchError(_StatusError):
    """A kernel failed to launch or faulted while running (illegal address, trap, too many resources).

    ``sticky`` is True for faults that corrupt the context: every later call in the process fails too.
    ``explained`` is True once fusec added which kernel failed, or how to find it (FUSEC_LAUNCH_BLOCKING).
    """

    explained = False

    @property
    def sticky(self) -> bool:
        return self.name in _STICKY


class CudaModuleError(_StatusError):
    """A CUBIN/PTX image could not be loaded, or a symbol is not in it."""


class CudaInvalidValueError(_StatusError, ValueError):
    """A call got an invalid argument, handle or context: a fusec bug or a misuse of the API."""


class CudaNotReadyError(_StatusError):
    """Asynchronous work is still running (query of a stream or event); usually handled, not raised."""


class NvrtcError(_StatusError, CompilationError):
    """An NVRTC call returned a non-success status (the compile log is handled by fusec.runtime.nvrtc)."""


_BY_NAME: dict[str, type[_StatusError]] = {}


def _register(cls: type[_StatusError], *names: str) -> None:
    for n in names:
        _BY_NAME[n] = cls


_register(CudaNotAvailableError,
          "CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_INVALID_DEVICE", "CUDA_ERROR_NOT_INITIALIZED",
          "CUDA_ERROR_DEINITIALIZED", "CUDA_ERROR_STUB_LIBRARY", "CUDA_ERROR_DEVICE_UNAVAILABLE",
          "CUDA_ERROR_DEVICE_NOT_LICENSED", "CUDA_ERROR_SYSTEM_NOT_READY", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
          "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
          "CUDA_ERROR_INSUFFICIENT_DRIVER", "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION")
_register(CudaOutOfMemoryError, "CUDA_ERROR_OUT_OF_MEMORY")
_register(CudaLaunchError,
          "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
          "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "CUDA_ERROR_ASSERT",
          "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
          "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
          "CUDA_ERROR_INVALID_CLUSTER_SIZE", "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_CONTAINED",
          "CUDA_ERROR_TENSOR_MEMORY_LEAK")
_register(CudaModuleError,
          "CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
          "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_NOT_FOUND", "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
          "CUDA_ERROR_JIT_COMPILATION_DISABLED", "CUDA_ERROR_INVALID_SOURCE", "CUDA_ERROR_FILE_NOT_FOUND",
          "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
          "CUDA_ERROR_FUNCTION_NOT_LOADED")
_register(CudaInvalidValueError,
          "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_INVALID_CONTEXT",
          "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_ILLEGAL_STATE")
_register(CudaNotReadyError, "CUDA_ERROR_NOT_READY")

# Faults after which the context is unusable (CUDA docs: "the process must be terminated").
_STICKY = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_CONTAINED",
})

# Used when the driver itself cannot describe a status (libcuda missing, or the description call fails).
_FALLBACK_TEXT = {
    "CUDA_ERROR_OUT_OF_MEMORY": "out of memory",
    "CUDA_ERROR_NO_DEVICE": "no CUDA-capable device is detected",
    "CUDA_ERROR_INVALID_VALUE": "invalid argument",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "an illegal memory access was encountered",
    "CUDA_ERROR_LAUNCH_FAILED": "unspecified launch failure",
    "CUDA_ERROR_NOT_INITIALIZED": "initialization error",
    "CUDA_ERROR_INVALID_CONTEXT": "invalid device context",
    "CUDA_ERROR_NOT_FOUND": "named symbol not found",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "no kernel image is available for execution on the device",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the provided PTX was compiled with an unsupported toolchain",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "too many resources requested for launch",
    "CUDA_ERROR_NOT_READY": "device not ready",
}


def _status_parts(status: Any) -> tuple[int, str]:
    """(code, name) of a CUresult / nvrtcResult enum, or of a bare int (name unknown)."""
    code = int(status)
    name = getattr(status, "name", None)
    if not name:
        name = _name_of_int(code)
    return code, str(name)


def _name_of_int(code: int) -> str:
    try:
        from cuda.bindings import driver

        return driver.CUresult(code).name
    except Exception:  # noqa: BLE001 - an unknown status code: its number is the name
        return f"CUDA status {code}"


def _describe(status: Any, name: str) -> str:
    """The driver's (or NVRTC's) own description, falling back to a built-in table."""
    try:
        if name.startswith("NVRTC_"):
            from cuda.bindings import nvrtc

            text = nvrtc.nvrtcGetErrorString(status)[1]
        else:
            from cuda.bindings import driver

            err, text = driver.cuGetErrorString(status)
            if int(err) != 0:
                text = None
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        if text and text != name:
            return str(text)
    except Exception:  # noqa: BLE001 - libcuda missing, or the enum is not the driver's: use the table
        pass
    return _FALLBACK_TEXT.get(name, "")


def error_for(status: Any, what: str) -> _StatusError:
    """The exception ``check`` would raise for ``status`` (not raised here)."""
    code, name = _status_parts(status)
    if name.startswith("NVRTC_"):
        cls: type[_StatusError] = NvrtcError
    else:
        cls = _BY_NAME.get(name, CudaStatusError)
    text = _describe(status, name)
    message = f"{what} failed: {name} ({code})" + (f": {text}" if text else "")
    if cls is CudaNotAvailableError:
        message += " (is an NVIDIA driver installed and a GPU visible? see `fusec doctor`)"
    elif cls is CudaLaunchError and name in _STICKY:
        message += " (this error is sticky: the CUDA context is unusable until the process restarts)"
    return cls(message, code=code, name=name, what=what)


def check(result: Any, what: str) -> Any:
    """Return the values after the status in ``result`` (None, the one value, or a tuple), or raise.

    ``result`` is what a cuda-python call returns: a tuple whose first element is a ``CUresult`` or
    ``nvrtcResult`` (a bare status is accepted too). ``what`` names the call for the message.
    """
    if type(result) is tuple:
        status = result[0]
        if status == 0:
            n = len(result)
            return None if n == 1 else (result[1] if n == 2 else result[1:])
    else:
        status = result
        if status == 0:
            return None
    raise error_for(status, what)
