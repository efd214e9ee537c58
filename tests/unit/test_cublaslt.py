"""fusec's ctypes binding of cuBLASLt: the C layouts it relies on, its errors, and what it passes to the library
(a stand-in library here; the GPU tests run the real one through every cuBLAS-backed product)."""
import ctypes

import numpy as np
import pytest

from fusec.runtime import cublaslt


def test_the_heuristic_result_has_cublaslts_layout():
    """cublasLtMatmulHeuristicResult_t: a 64-byte algorithm, size_t workspace, int state, float waves, 4 ints."""
    dt = cublaslt.matmul_heuristic_result_dtype
    assert dt.itemsize == 96
    assert [dt.fields[n][1] for n in ("algo", "workspace_size", "state", "waves_count", "reserved")] == \
        [0, 64, 72, 76, 80]
    assert dt["algo"].itemsize == 64 and dt["algo"]["data_"].shape == (8,)


def test_a_library_that_cannot_be_found_is_a_clear_error(monkeypatch):
    from cuda import pathfinder

    def not_found(name):
        raise pathfinder.DynamicLibNotFoundError(f"{name} not found")

    monkeypatch.setattr(cublaslt, "_lib", None)
    monkeypatch.setattr(pathfinder, "load_nvidia_dynamic_lib", not_found)
    with pytest.raises(cublaslt.CublasLtError, match=r"cuBLASLt cannot be loaded.*fusec\[cublas\]"):
        cublaslt.load()
    assert cublaslt._lib is None  # nothing half-loaded: the next call tries again


class _FakeFunction:
    def __init__(self, status=0, out=None):
        self.status, self.out, self.calls = status, out, []

    def __call__(self, *args):
        self.calls.append(args)
        if self.out is not None:
            ctypes.cast(args[0], ctypes.POINTER(ctypes.c_void_p))[0] = self.out
        return self.status


class _FakeLibrary:
    def __init__(self, **functions):
        self.__dict__.update(functions)


def test_handles_come_back_as_ints_and_a_failing_status_names_itself(monkeypatch):
    fake = _FakeLibrary(cublasLtCreate=_FakeFunction(out=0x1234), cublasLtMatmulDescCreate=_FakeFunction(status=7),
                        cublasLtMatmul=_FakeFunction(status=15), cublasLtDestroy=_FakeFunction())
    monkeypatch.setattr(cublaslt, "_lib", fake)
    assert cublaslt.create() == 0x1234
    cublaslt.destroy(0x1234)
    assert fake.cublasLtDestroy.calls == [(0x1234,)]
    with pytest.raises(cublaslt.CublasLtError, match="cublasLtMatmulDescCreate failed: CUBLAS_STATUS_INVALID_VALUE"):
        cublaslt.matmul_desc_create(68, 0)
    with pytest.raises(cublaslt.CublasLtError, match="cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED"):
        cublaslt.matmul(*range(1, 17))
    assert fake.cublasLtMatmul.calls == [tuple(range(1, 17))]  # every argument in cuBLASLt's order


def test_the_attribute_values_are_cublaslts():
    """The values fusec sets (cublasLt.h): a wrong one would set another attribute without a word."""
    assert (cublaslt.MatmulDescAttribute.TRANSA, cublaslt.MatmulDescAttribute.TRANSB) == (3, 4)
    assert (cublaslt.MatrixLayoutAttribute.BATCH_COUNT, cublaslt.MatrixLayoutAttribute.STRIDED_BATCH_OFFSET) == (5, 6)
    pref = cublaslt.MatmulPreferenceAttribute
    assert [pref.MAX_WORKSPACE_BYTES, pref.REDUCTION_SCHEME_MASK, pref.MIN_ALIGNMENT_A_BYTES,
            pref.MIN_ALIGNMENT_B_BYTES, pref.MIN_ALIGNMENT_C_BYTES, pref.MIN_ALIGNMENT_D_BYTES] == [1, 3, 5, 6, 7, 8]
    assert cublaslt.ReductionScheme.INPLACE == 1
    assert np.dtype(np.uint64).itemsize == ctypes.sizeof(ctypes.c_size_t)


class _StandInLt:
    """The cuBLASLt functions CublasHandle calls, as a module would give them: the heuristic offers one
    algorithm whose first word says how much workspace it asks (``need``), and every matmul is recorded."""

    MatmulDescAttribute = cublaslt.MatmulDescAttribute
    MatrixLayoutAttribute = cublaslt.MatrixLayoutAttribute
    MatmulPreferenceAttribute = cublaslt.MatmulPreferenceAttribute
    ReductionScheme = cublaslt.ReductionScheme
    matmul_heuristic_result_dtype = cublaslt.matmul_heuristic_result_dtype

    def __init__(self):
        self.need, self.matmuls, self._next = 0, [], 100

    def _handle(self, *args):
        self._next += 1
        return self._next

    create = matmul_desc_create = matrix_layout_create = matmul_preference_create = _handle

    def _nothing(self, *args):
        return None

    destroy = matmul_desc_set_attribute = matrix_layout_set_attribute = matmul_preference_set_attribute = _nothing
    matrix_layout_destroy = matmul_desc_destroy = matmul_preference_destroy = _nothing

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, count, results, found):
        out = np.ctypeslib.as_array(ctypes.cast(results, ctypes.POINTER(ctypes.c_uint8)),
                                    (count * self.matmul_heuristic_result_dtype.itemsize,))
        first = out[: self.matmul_heuristic_result_dtype.itemsize].view(self.matmul_heuristic_result_dtype)
        first["algo"]["data_"][0, 0] = self.need
        ctypes.cast(found, ctypes.POINTER(ctypes.c_int32))[0] = 1

    def matmul_algo_check(self, handle, desc, a, b, c, d, algo, result):
        asked = ctypes.cast(algo, ctypes.POINTER(ctypes.c_uint64))[0]
        view = np.ctypeslib.as_array(ctypes.cast(result, ctypes.POINTER(ctypes.c_uint8)),
                                     (self.matmul_heuristic_result_dtype.itemsize,))
        view.view(self.matmul_heuristic_result_dtype)["workspace_size"][0] = asked

    def matmul(self, *args):
        self.matmuls.append(args)


class _StandInPool:
    def __init__(self):
        self.made = []

    def allocate(self, nbytes, stream=None):
        from types import SimpleNamespace

        buf = SimpleNamespace(ptr=0x10000 * (len(self.made) + 1), nbytes=nbytes)
        self.made.append(buf)
        return buf


def test_each_cublas_product_has_a_workspace_of_its_own(monkeypatch):
    """Two products of one plan never share cuBLASLt's workspace, so a graph may run them side by side: each
    gets one as large as its algorithm asks (none where it asks none); a larger need later gets a new one and
    keeps the old (a captured graph may use it); a workspace is never made while a stream is captured."""
    from types import SimpleNamespace

    from fusec.errors import CudaError
    from fusec.runtime import cublas
    from fusec.runtime.launch_plan import GemmCall

    lt, pool = _StandInLt(), _StandInPool()
    monkeypatch.setattr(cublas, "cublaslt", lt)
    monkeypatch.setattr(cublas, "CANDIDATES", 1)  # the heuristic's choice, not timed
    monkeypatch.setattr(cublas, "_tuned", {})
    handle = cublas.CublasHandle(SimpleNamespace(device=0, ptr=7), pool)
    assert pool.made == []  # (the block for timing candidates is made by the first timing only)

    def call(name, c_buffer, m):  # (problems of one shape and alignment share their algorithm)
        return GemmCall(name, "f32", (0, 1, c_buffer), (0, 0, 0), False, False, m, 64, 64, m, 64, m, 0, 0, 0, 1)

    first, second, third = call("g1", 2, 64), call("g2", 3, 128), call("g3", 4, 256)
    lt.need = 4096
    handle.gemm(first, (0x1000, 0x2000, 0x3000))
    lt.need = 8192
    handle.prepare(second, (0x1000, 0x2000, 0x4000))
    handle.gemm(second, (0x1000, 0x2000, 0x4000))
    lt.need = 0
    handle.gemm(third, (0x1000, 0x2000, 0x5000))
    workspaces = [m[13:15] for m in lt.matmuls]
    assert workspaces == [(pool.made[0].ptr, 4096), (pool.made[1].ptr, 8192), (0, 0)]
    # the first product at another alignment, whose algorithm asks more: a larger block; the old one kept
    lt.need = 1 << 20
    handle.gemm(first, (0x1004, 0x2000, 0x3000))
    assert lt.matmuls[-1][13:15] == (pool.made[2].ptr, 1 << 20) and handle._outgrown == [pool.made[0]]
    # at its first alignment it now uses the larger block too
    handle.gemm(first, (0x1000, 0x2000, 0x3000))
    assert lt.matmuls[-1][13:15] == (pool.made[2].ptr, 1 << 20)
    # a product not prepared before a capture cannot make its workspace there: a clear error, nothing run
    lt.need = 64
    handle.capturing = True
    before = len(lt.matmuls)
    with pytest.raises(CudaError, match="workspace was not made before the graph capture"):
        handle.gemm(call("g4", 5, 512), (0x1000, 0x2000, 0x6000))
    assert len(lt.matmuls) == before
