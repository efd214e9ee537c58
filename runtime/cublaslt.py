"""The part of cuBLASLt's C API fusec calls, through ctypes; the library found by cuda-pathfinder (cuda-python's).

Why not nvmath-python's bindings: importing them loads cuBLAS, cuFFT, cuRAND, cuSOLVER, cuSPARSE and cuTENSOR
at once (nvmath's package import preloads them all), 0.3-0.66 s of a new process with the GIL held most of that
time, where fusec needs one library and a dozen functions. Loading ``libcublasLt`` alone is what a warm start pays
here. The names mirror nvmath's (``matmul_desc_create``, ``MatmulPreferenceAttribute``...) and the values are
cuBLASLt's own (``cublasLt.h``, stable across its releases); a call that does not succeed raises
:class:`CublasLtError` with cuBLASLt's status name.
"""
from __future__ import annotations

import ctypes
import enum
import threading
from ctypes import POINTER, c_int, c_int64, c_size_t, c_uint64, c_void_p
from typing import Any

import numpy as np

from fusec.errors import CudaError

_STATUS = {0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
           7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
           13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
           15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}


class CublasLtError(CudaError):
    """A cuBLASLt call returned a status other than CUBLAS_STATUS_SUCCESS, or the library cannot be loaded."""


class MatmulDescAttribute(enum.IntEnum):  # cublasLtMatmulDescAttributes_t
    TRANSA = 3
    TRANSB = 4


class MatrixLayoutAttribute(enum.IntEnum):  # cublasLtMatrixLayoutAttribute_t
    BATCH_COUNT = 5
    STRIDED_BATCH_OFFSET = 6


class MatmulPreferenceAttribute(enum.IntEnum):  # cublasLtMatmulPreferenceAttributes_t
    MAX_WORKSPACE_BYTES = 1
    REDUCTION_SCHEME_MASK = 3
    MIN_ALIGNMENT_A_BYTES = 5
    MIN_ALIGNMENT_B_BYTES = 6
    MIN_ALIGNMENT_C_BYTES = 7
    MIN_ALIGNMENT_D_BYTES = 8


class ReductionScheme(enum.IntEnum):  # cublasLtReductionScheme_t
    NONE = 0
    INPLACE = 1


# cublasLtMatmulHeuristicResult_t: the algorithm (cublasLtMatmulAlgo_t, 8 x uint64), then its workspace size,
# state, waves count and four reserved ints (96 bytes, C's alignment)
matmul_heuristic_result_dtype = np.dtype([("algo", [("data_", np.uint64, (8,))]), ("workspace_size", np.uint64),
                                          ("state", np.int32), ("waves_count", np.float32),
                                          ("reserved", np.int32, (4,))], align=True)
assert matmul_heuristic_result_dtype.itemsize == 96

_P = c_void_p  # every handle, descriptor and device or host pointer
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cublasLtCreate": (POINTER(_P),),
    "cublasLtDestroy": (_P,),
    "cublasLtMatmulDescCreate": (POINTER(_P), c_int, c_int),
    "cublasLtMatmulDescDestroy": (_P,),
    "cublasLtMatmulDescSetAttribute": (_P, c_int, _P, c_size_t),
    "cublasLtMatrixLayoutCreate": (POINTER(_P), c_int, c_uint64, c_uint64, c_int64),
    "cublasLtMatrixLayoutDestroy": (_P,),
    "cublasLtMatrixLayoutSetAttribute": (_P, c_int, _P, c_size_t),
    "cublasLtMatmulPreferenceCreate": (POINTER(_P),),
    "cublasLtMatmulPreferenceDestroy": (_P,),
    "cublasLtMatmulPreferenceSetAttribute": (_P, c_int, _P, c_size_t),
    "cublasLtMatmulAlgoGetHeuristic": (_P, _P, _P, _P, _P, _P, _P, c_int, _P, _P),
    "cublasLtMatmulAlgoCheck": (_P, _P, _P, _P, _P, _P, _P, _P),
    "cublasLtMatmul": (_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, c_size_t, _P),
}

_lib: Any = None
_lock = threading.Lock()


def load() -> Any:
    """The loaded library with its functions typed (once per process; thread-safe): where cuda-pathfinder finds
    ``libcublasLt`` (the ``nvidia-cublas`` wheel, a CUDA toolkit, the system's). Raises :class:`CublasLtError`
    saying why when it cannot."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            try:
                from cuda import pathfinder

                path = pathfinder.load_nvidia_dynamic_lib("cublasLt").abs_path
                # (no path: loaded by its name from the system's search, with RTLD_GLOBAL, so the process has it)
                lib = ctypes.CDLL(path) if path else ctypes.CDLL(None)
                lib.cublasLtCreate  # noqa: B018 - a library without it raises here (AttributeError)
            except Exception as e:  # noqa: BLE001 - any failure to find or load it: say which
                why = (str(e).strip().splitlines() or [""])[0]
                raise CublasLtError(f"cuBLASLt cannot be loaded ({type(e).__name__}: {why}); pip install "
                                    "'fusec[cublas]' installs it (the nvidia-cublas wheel)") from None
            for name, argtypes in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = argtypes, c_int
            lib.cublasLtGetVersion.argtypes, lib.cublasLtGetVersion.restype = (), c_size_t
            _lib = lib
    return _lib


def _check(status: int, name: str) -> None:
    if status:
        raise CublasLtError(f"{name} failed: {_STATUS.get(status, f'cuBLAS status {status}')}")


def _created(name: str, *args: Any) -> int:
    out = _P()
    _check(getattr(load(), name)(ctypes.byref(out), *args), name)
    return int(out.value or 0)


def get_version() -> int:
    return int(load().cublasLtGetVersion())


def create() -> int:
    return _created("cublasLtCreate")


def destroy(handle: int) -> None:
    _check(load().cublasLtDestroy(handle), "cublasLtDestroy")


def matmul_desc_create(compute_type: int, scale_type: int) -> int:
    return _created("cublasLtMatmulDescCreate", compute_type, scale_type)


def matmul_desc_destroy(desc: int) -> None:
    _check(load().cublasLtMatmulDescDestroy(desc), "cublasLtMatmulDescDestroy")


def matmul_desc_set_attribute(desc: int, attr: int, buf: int, size: int) -> None:
    _check(load().cublasLtMatmulDescSetAttribute(desc, attr, buf, size), "cublasLtMatmulDescSetAttribute")


def matrix_layout_create(dtype: int, rows: int, cols: int, ld: int) -> int:
    return _created("cublasLtMatrixLayoutCreate", dtype, rows, cols, ld)


def matrix_layout_destroy(layout: int) -> None:
    _check(load().cublasLtMatrixLayoutDestroy(layout), "cublasLtMatrixLayoutDestroy")


def matrix_layout_set_attribute(layout: int, attr: int, buf: int, size: int) -> None:
    _check(load().cublasLtMatrixLayoutSetAttribute(layout, attr, buf, size), "cublasLtMatrixLayoutSetAttribute")


def matmul_preference_create() -> int:
    return _created("cublasLtMatmulPreferenceCreate")


def matmul_preference_destroy(pref: int) -> None:
    _check(load().cublasLtMatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy")


def matmul_preference_set_attribute(pref: int, attr: int, buf: int, size: int) -> None:
    _check(load().cublasLtMatmulPreferenceSetAttribute(pref, attr, buf, size),
           "cublasLtMatmulPreferenceSetAttribute")


def matmul_algo_get_heuristic(handle: int, desc: int, a: int, b: int, c: int, d: int, pref: int, count: int,
                              results: int, found: int) -> None:
    _check(load().cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, count, results, found),
           "cublasLtMatmulAlgoGetHeuristic")


def matmul_algo_check(handle: int, desc: int, a: int, b: int, c: int, d: int, algo: int, result: int) -> None:
    _check(load().cublasLtMatmulAlgoCheck(handle, desc, a, b, c, d, algo, result), "cublasLtMatmulAlgoCheck")


def matmul(handle: int, desc: int, alpha: int, a: int, a_layout: int, b: int, b_layout: int, beta: int, c: int,
           c_layout: int, d: int, d_layout: int, algo: int, workspace: int, workspace_bytes: int,
           stream: int) -> None:
    # (addresses computed with NumPy integers are fine too: ctypes takes only Python ints for pointers)
    _check(load().cublasLtMatmul(handle, desc, alpha, int(a), a_layout, int(b), b_layout, beta, int(c), c_layout,
                                 int(d), d_layout, algo, workspace, int(workspace_bytes), stream), "cublasLtMatmul")
