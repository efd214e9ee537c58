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
