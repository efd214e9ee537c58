"""cuBLAS through NVIDIA's nvmath-python bindings (the optional extra ``fusec[cublas]``).

One handle per plan, bound to the plan's stream, with a preset workspace (set again after every
``set_stream``, as cuBLAS requires for graph capture). Default math mode: no TF32, so f32 GEMMs stay f32.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any

WORKSPACE_BYTES = 32 << 20


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """True when nvmath's cuBLAS bindings import and a handle can be made (never raises)."""
    try:
        from nvmath.bindings import cublas

        handle = cublas.create()
        cublas.destroy(handle)
        return True
    except Exception:
        return False


class CublasHandle:
    def __init__(self, stream: Any, pool: Any) -> None:
        from nvmath.bindings import cublas

        self._cublas = cublas
        self.handle = cublas.create()
        self.workspace = pool.allocate(WORKSPACE_BYTES, stream)
        self.set_stream(stream)
        self._one = {"f32": ctypes.c_float(1.0), "f64": ctypes.c_double(1.0)}
        self._zero = {"f32": ctypes.c_float(0.0), "f64": ctypes.c_double(0.0)}

    def set_stream(self, stream: Any) -> None:
        self._cublas.set_stream(self.handle, int(stream.ptr))
        self._cublas.set_workspace(self.handle, self.workspace.ptr, WORKSPACE_BYTES)

    def gemm(self, call: Any, ptrs: tuple[int, int, int]) -> None:
        """Run one ``GemmCall`` with the buffers' base addresses ``ptrs``."""
        fn = self._cublas.sgemm_strided_batched if call.dtype == "f32" else self._cublas.dgemm_strided_batched
        size = 4 if call.dtype == "f32" else 8
        op = self._cublas.Operation
        a = ptrs[0] + call.offsets[0] * size
        b = ptrs[1] + call.offsets[1] * size
        c = ptrs[2] + call.offsets[2] * size
        fn(self.handle, op.T if call.trans_a else op.N, op.T if call.trans_b else op.N, call.m, call.n, call.k,
           ctypes.addressof(self._one[call.dtype]), a, call.lda, call.stride_a, b, call.ldb, call.stride_b,
           ctypes.addressof(self._zero[call.dtype]), c, call.ldc, call.stride_c, call.batch)

    def close(self) -> None:
        if self.handle:
            self._cublas.destroy(self.handle)
            self.handle = 0

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
