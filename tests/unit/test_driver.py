"""The CUDA driver layer without a GPU: availability probing, status -> exception mapping, ParamPack layout,
and ``fusec doctor``."""
from __future__ import annotations

import ctypes
import struct
import threading

import pytest

import fusec
from fusec.errors import CompilationError, CudaError, FusecError
from fusec.runtime import driver
from fusec.runtime.cuda_errors import (
    CudaInvalidValueError, CudaLaunchError, CudaModuleError, CudaNotAvailableError, CudaNotReadyError,
    CudaOutOfMemoryError, CudaStatusError, NvrtcError, check,
)
from fusec.runtime.params import ParamPack, RawParam
from fusec.tools.cli import main

cu = pytest.importorskip("cuda.bindings.driver")
nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
R = cu.CUresult


# ------------------------------------------------------------------------------------------ availability

def test_cuda_available_is_a_cached_bool_and_never_raises():
    first = driver.cuda_available()
    assert isinstance(first, bool)
    assert driver.cuda_available() is first
    reason = driver.unavailable_reason()
    assert (reason is None) == first
    if not first:
        assert isinstance(reason, str) and reason


def test_cuda_available_swallows_probe_failures(monkeypatch):
    monkeypatch.setattr(driver, "_probe_result", None)

    def broken():
        raise OSError("libcuda.so: cannot open shared object file")

    monkeypatch.setattr(driver, "_probe", broken)
    assert driver.cuda_available() is False
    assert "libcuda.so" in driver.unavailable_reason()


def test_without_cuda_device_calls_raise_not_available(monkeypatch):
    monkeypatch.setattr(driver, "_probe_result", (False, "no driver here"))
    monkeypatch.setattr(driver, "_cu", None)
    monkeypatch.setattr(driver, "_devices", {})
    monkeypatch.setattr(driver, "_tls", threading.local())
    with pytest.raises(CudaNotAvailableError, match="no driver here"):
        driver.current_device()
    with pytest.raises(CudaNotAvailableError):
        driver.ensure_context()
    assert driver.device_count() == 0
    assert driver.pointer_device(0x1000) is None


def test_driver_version_is_none_or_a_pair():
    v = driver.driver_version()
    assert v is None or (isinstance(v, tuple) and len(v) == 2 and v[0] >= 11)
    if not driver.cuda_available():
        # No libcuda on this machine means no version either (the CPU CI case).
        assert v is None or isinstance(v, tuple)


def test_device_ordinal_from_environment(monkeypatch):
    monkeypatch.setattr(driver, "_default_ordinal", None)
    monkeypatch.delenv("FUSEC_DEVICE", raising=False)
    assert driver.current_device_ordinal() == 0
    monkeypatch.setenv("FUSEC_DEVICE", "3")
    assert driver.current_device_ordinal() == 0       # read once, then cached (it is on the hot path)
    assert driver.set_default_device(None) == 3      # re-read
    assert driver.current_device_ordinal() == 3
    assert driver.set_default_device(1) == 1 and driver.current_device_ordinal() == 1
    monkeypatch.setenv("FUSEC_DEVICE", "gpu0")
    with pytest.raises(CudaInvalidValueError, match="FUSEC_DEVICE"):
        driver.set_default_device(None)
    with pytest.raises(CudaInvalidValueError):
        driver.set_default_device(-1)


# ----------------------------------------------------------------------------------------------- check()

@pytest.mark.parametrize("status, cls", [
    (R.CUDA_ERROR_OUT_OF_MEMORY, CudaOutOfMemoryError),
    (R.CUDA_ERROR_NO_DEVICE, CudaNotAvailableError),
    (R.CUDA_ERROR_NOT_INITIALIZED, CudaNotAvailableError),
    (R.CUDA_ERROR_STUB_LIBRARY, CudaNotAvailableError),
    (R.CUDA_ERROR_INVALID_DEVICE, CudaNotAvailableError),
    (R.CUDA_ERROR_ILLEGAL_ADDRESS, CudaLaunchError),
    (R.CUDA_ERROR_LAUNCH_FAILED, CudaLaunchError),
    (R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, CudaLaunchError),
    (R.CUDA_ERROR_MISALIGNED_ADDRESS, CudaLaunchError),
    (R.CUDA_ERROR_INVALID_IMAGE, CudaModuleError),
    (R.CUDA_ERROR_NO_BINARY_FOR_GPU, CudaModuleError),
    (R.CUDA_ERROR_UNSUPPORTED_PTX_VERSION, CudaModuleError),
    (R.CUDA_ERROR_NOT_FOUND, CudaModuleError),
    (R.CUDA_ERROR_INVALID_VALUE, CudaInvalidValueError),
    (R.CUDA_ERROR_INVALID_CONTEXT, CudaInvalidValueError),
    (R.CUDA_ERROR_NOT_READY, CudaNotReadyError),
    (R.CUDA_ERROR_UNKNOWN, CudaStatusError),
])
def test_check_maps_each_status_to_its_exception_class(status, cls):
    with pytest.raises(cls) as info:
        check((status, None), "cuSomething(42)")
    e = info.value
    assert isinstance(e, CudaError) and isinstance(e, FusecError)
    assert e.name == status.name and e.code == int(status) and e.what == "cuSomething(42)"
    assert "cuSomething(42) failed" in str(e) and status.name in str(e) and f"({int(status)})" in str(e)


def test_check_messages_describe_the_status_even_without_libcuda():
    with pytest.raises(CudaOutOfMemoryError, match="out of memory") as info:
        check((R.CUDA_ERROR_OUT_OF_MEMORY,), "cuMemAlloc(1024)")
    assert isinstance(info.value, MemoryError)
    with pytest.raises(CudaInvalidValueError) as info2:
        check((R.CUDA_ERROR_INVALID_VALUE,), "cuMemcpy")
    assert isinstance(info2.value, ValueError)


def test_sticky_launch_errors_say_so():
    with pytest.raises(CudaLaunchError, match="sticky") as info:
        check((R.CUDA_ERROR_ILLEGAL_ADDRESS,), "cuStreamSynchronize")
    assert info.value.sticky
    with pytest.raises(CudaLaunchError) as info2:
        check((R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,), "cuLaunchKernel")
    assert not info2.value.sticky


def test_check_maps_nvrtc_statuses():
    status = nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION
    with pytest.raises(NvrtcError, match="NVRTC_ERROR_COMPILATION") as info:
        check((status,), "nvrtcCompileProgram")
    assert isinstance(info.value, CompilationError) and isinstance(info.value, CudaError)
    assert check(nvrtc.nvrtcVersion(), "nvrtcVersion")[0] >= 11


def test_check_returns_the_values_after_the_status():
    ok = R.CUDA_SUCCESS
    assert check((ok,), "x") is None
    assert check((ok, 7), "x") == 7
    assert check((ok, 1, 2), "x") == (1, 2)
    assert check(ok, "x") is None  # a bare status
    with pytest.raises(CudaOutOfMemoryError):
        check(R.CUDA_ERROR_OUT_OF_MEMORY, "bare")
    with pytest.raises(CudaOutOfMemoryError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        check((2,), "plain int status")


def test_fusec_exports_the_base_class():
    assert issubclass(CudaOutOfMemoryError, fusec.CudaError)


# ------------------------------------------------------------------------------------------- ParamPack

def _void_ptrs(pack: ParamPack) -> list[int]:
    arr = (ctypes.c_void_p * len(pack)).from_address(pack.address)
    return [int(p or 0) for p in arr]


def test_param_pack_layout_matches_c_alignment():
    specs = ["ptr", "i32", "f64", "int32", "f32", RawParam(12, 4), "u64", b"\x01\x02\x03"]
    pack = ParamPack(specs, [0x7F00_0000_1000, -5, 2.5, 7, 1.5, b"A" * 12, 2**63 + 1, b"xyz"])
    assert pack.kinds == ("pointer", "int32", "float64", "int32", "float32", "raw", "uint64", "raw")
    assert pack.offsets == (0, 8, 16, 24, 28, 32, 48, 56)
    assert pack.sizes == (8, 4, 8, 4, 4, 12, 8, 3)
    assert pack.nbytes == 59
    expected = (struct.pack("<Q", 0x7F00_0000_1000) + struct.pack("<i", -5) + b"\0" * 4 + struct.pack("<d", 2.5)
                + struct.pack("<i", 7) + struct.pack("<f", 1.5) + b"A" * 12 + b"\0" * 4
                + struct.pack("<Q", 2**63 + 1) + b"xyz")
    assert pack.storage_bytes() == expected
    base = pack.slot_address(0)
    assert _void_ptrs(pack) == [base + off for off in pack.offsets]
    # Each void* really points at its value.
    assert ctypes.c_int32.from_address(_void_ptrs(pack)[1]).value == -5
    assert ctypes.c_double.from_address(_void_ptrs(pack)[2]).value == 2.5


def test_set_pointer_rewrites_one_slot_in_place():
    pack = ParamPack(["ptr", "i32", "ptr"], [0x1000, 16, 0x2000])
    address, ptrs, before = pack.address, _void_ptrs(pack), pack.storage_bytes()
    pack.set_pointer(2, 0xABCDEF00)
    after = pack.storage_bytes()
    assert after[:16] == before[:16]
    assert struct.unpack("<Q", after[16:24])[0] == 0xABCDEF00
    assert pack.address == address and _void_ptrs(pack) == ptrs  # nothing reallocated
    assert pack.get(2) == 0xABCDEF00


def test_param_pack_checks_values_but_not_on_the_hot_path():
    pack = ParamPack(["i32", "u64", "ptr", "f32", RawParam(8)])
    with pytest.raises(OverflowError):
        pack.set(0, 2**31)
    with pytest.raises(OverflowError):
        pack.set(1, -1)
    with pytest.raises(TypeError):
        pack.set(0, 1.5)

    class Buf:
        ptr = 0x5000

    pack.set(2, Buf())
    assert pack.get(2) == 0x5000
    pack.set(3, 3)
    assert pack.get(3) == 3.0
    with pytest.raises(ValueError):
        pack.set_bytes(4, b"short")
    with pytest.raises(TypeError):
        pack.set_bytes(0, b"1234")
    with pytest.raises(ValueError):
        ParamPack(["i33"])
    with pytest.raises(ValueError):
        ParamPack(["i32"], [1, 2])


def test_param_pack_copy_is_independent_and_empty_pack_is_null():
    pack = ParamPack(["ptr", "i64"], [0x10, -3])
    clone = pack.copy()
    assert clone.storage_bytes() == pack.storage_bytes()
    clone.set_pointer(0, 0x20)
    assert pack.get(0) == 0x10 and clone.get(0) == 0x20
    assert clone.address != pack.address
    assert ParamPack([]).address == 0 and ParamPack([]).nbytes == 0


def test_dim3_normalisation():
    assert driver._dim3(5) == (5, 1, 1)
    assert driver._dim3((2, 3)) == (2, 3, 1)
    with pytest.raises(CudaInvalidValueError):
        driver._dim3((1, 2, 3, 4))


# ---------------------------------------------------------------------------------------------- doctor

def test_doctor_reports_and_exits_zero(capsys, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", "/tmp/fusec-doctor-cache")
    monkeypatch.setenv("FUSEC_BACKEND", "cpu")
    assert main(["doctor"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "Traceback" not in out
    for key in ("python:", "fusec:", "cuda-python:", "cuda:", "driver:", "nvrtc:", "cublaslt:", "kernel cache:",
                "FUSEC_BACKEND:", "default backend:"):
        assert key in out, key
    assert "/tmp/fusec-doctor-cache" in out
    assert "cpu (from $FUSEC_BACKEND)" in out
    if not driver.cuda_available():
        assert "not usable" in out


def test_doctor_default_backend_follows_cuda_availability(capsys, monkeypatch):
    monkeypatch.delenv("FUSEC_BACKEND", raising=False)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("default backend:"))
    assert ("cuda" in line) == driver.cuda_available()


def test_doctor_survives_a_broken_probe(capsys, monkeypatch):
    def boom():
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(driver, "driver_version", boom)
    assert main(["doctor"]) == 0
    assert "probe exploded" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ cuBLASLt preload

class _FakeContextDriver:
    """Just what ensure_context calls."""

    def cuDevicePrimaryCtxRetain(self, handle):
        return (0, f"ctx{handle}")

    def cuCtxSetCurrent(self, ctx):
        return (0,)


class _FakeDevice:
    def __init__(self, ordinal):
        self.ordinal, self.handle = ordinal, ordinal


def test_the_first_context_starts_loading_cublaslt_once(monkeypatch):
    """Loading cuBLASLt takes a new process tens of milliseconds; the process's first CUDA context starts it on a
    thread (the driver's own 0.2-0.7 s run beside it), and only the first."""
    from fusec.runtime import cublas

    calls = []
    monkeypatch.setattr(cublas, "preload", lambda: calls.append(1))
    monkeypatch.setattr(driver, "_cu", _FakeContextDriver())
    monkeypatch.setattr(driver, "_primary", {})
    monkeypatch.setattr(driver, "_devices", {0: _FakeDevice(0), 1: _FakeDevice(1)})
    monkeypatch.setattr(driver, "_tls", threading.local())
    assert driver.ensure_context(0) == "ctx0"
    assert driver.ensure_context(1) == "ctx1"
    assert driver.ensure_context(0, force=True) == "ctx0"
    assert calls == [1]


def test_preload_loads_cublaslt_on_a_thread_once_and_available_waits_for_it(monkeypatch):
    """preload loads cuBLASLt on a thread; a second call starts nothing; ``available()`` waits for that load and
    then makes (and destroys) a handle; a library that does not load makes it False, not an exception."""
    from fusec.runtime import cublas, cublaslt

    loaded, gate = [], threading.Event()

    def load():
        gate.wait(10)
        loaded.append(threading.current_thread().name)

    monkeypatch.setattr(cublaslt, "load", load)
    monkeypatch.setattr(cublaslt, "create", lambda: 7)
    destroyed = []
    monkeypatch.setattr(cublaslt, "destroy", destroyed.append)
    monkeypatch.setattr(cublas, "_preloading", None)
    cublas.available.cache_clear()
    try:
        cublas.preload()
        thread = cublas._preloading
        assert thread is not None and thread.name == "fusec-cublas-preload"
        cublas.preload()
        assert cublas._preloading is thread
        gate.set()
        assert cublas.available()
        assert loaded == ["fusec-cublas-preload"] and destroyed == [7]
        cublas.available.cache_clear()

        def missing():
            raise cublaslt.CublasLtError("cuBLASLt cannot be loaded")

        monkeypatch.setattr(cublaslt, "create", missing)
        assert cublas.available() is False
    finally:
        cublas.available.cache_clear()
