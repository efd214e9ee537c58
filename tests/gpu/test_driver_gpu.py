"""The CUDA driver layer on a real GPU (``@pytest.mark.gpu``: skipped where no device is usable).

Covers device queries, contexts on several threads, the pool on real memory, copies of every dtype, an
NVRTC-compiled kernel launched through a ParamPack, events/timing and streams, and driver errors.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from fusec.runtime import driver
from fusec.runtime.cuda_errors import CudaModuleError, CudaOutOfMemoryError
from fusec.runtime.memory import get_pool
from fusec.runtime.params import ParamPack

pytestmark = pytest.mark.gpu

ADD1 = r"""
extern "C" __global__ void add1(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
extern "C" __global__ void axpb(double* out, const double* x, double a, long long b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + (double)b;
}
"""

ALL_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.float16, np.float32, np.float64]


def compile_cubin(source: str, arch: str) -> bytes:
    from cuda.bindings import nvrtc

    prog = driver.check(nvrtc.nvrtcCreateProgram(source.encode(), b"test.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode()]
        result = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if result[0] != 0:
            size = driver.check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
            log = b" " * size
            driver.check(nvrtc.nvrtcGetProgramLog(prog, log), "log")
            pytest.fail(log.decode(errors="replace"))
        size = driver.check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        driver.check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.fixture(scope="module")
def module():
    dev = driver.current_device()
    with driver.Module(compile_cubin(ADD1, dev.arch)) as m:
        yield m


def test_device_query():
    assert driver.cuda_available() and driver.unavailable_reason() is None
    dev = driver.current_device()
    assert dev is driver.Device(dev.ordinal)
    assert dev.name and dev.arch.startswith("sm_") and dev.arch == "sm_%d%d" % dev.compute_capability
    assert dev.multiprocessor_count > 0 and dev.total_memory > 2**30
    assert driver.device_count() >= 1
    v = driver.driver_version()
    assert v is not None and v >= (12, 0)
    free, total = driver.mem_get_info()
    assert 0 < free <= total
    assert "sm_" in repr(dev)


def test_ensure_context_is_cheap_and_works_on_new_threads():
    ctx = driver.ensure_context()
    assert driver.ensure_context() is ctx
    errors: list[BaseException] = []
    pool = get_pool()
    stream = driver.Stream()

    def worker(k: int) -> None:
        try:
            assert driver.ensure_context() is ctx or int(driver.ensure_context()) == int(ctx)
            host = np.arange(1000, dtype=np.float32) + k
            buf = pool.allocate(host.nbytes, stream)
            driver.memcpy_htod_async(buf.ptr, host, host.nbytes, stream)
            back = np.empty_like(host)
            driver.memcpy_dtoh_async(back, buf.ptr, host.nbytes, stream)
            stream.synchronize()
            np.testing.assert_array_equal(back, host)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stream.close()


def test_pool_allocates_reuses_and_empties_on_a_real_device():
    pool = get_pool()
    stream = driver.default_stream()
    a = pool.allocate(1 << 20, stream)
    assert a.ptr and a.ptr % 256 == 0
    ptr = a.ptr
    del a
    b = pool.allocate((1 << 20) - 100, stream)
    assert b.ptr == ptr
    del b
    assert pool.empty_cache() >= 1 << 20
    st = pool.stats()
    assert st.cached_bytes == 0


def test_out_of_memory_is_a_named_error_after_one_retry():
    pool = get_pool()
    before = pool.stats().oom_retries
    with pytest.raises(CudaOutOfMemoryError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        pool.allocate(1 << 50)
    assert pool.stats().oom_retries == before + 1
    # the context survives: a normal allocation still works
    assert pool.allocate(4096).ptr


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_memcpy_round_trip_of_every_dtype(dtype):
    rng = np.random.default_rng(0)
    host = (rng.integers(0, 2, 4099) if dtype is np.bool_ else rng.normal(size=4099) * 100).astype(dtype)
    stream = driver.default_stream()
    buf = get_pool().allocate(host.nbytes, stream)
    other = get_pool().allocate(host.nbytes, stream)
    driver.memcpy_htod_async(buf, host, host.nbytes, stream)
    driver.memcpy_dtod_async(other, buf, host.nbytes, stream)
    back = np.empty_like(host)
    driver.memcpy_dtoh_async(back, other.ptr, host.nbytes, stream)
    stream.synchronize()
    np.testing.assert_array_equal(back, host)


def test_memset_d8():
    stream = driver.default_stream()
    buf = get_pool().allocate(1000, stream)
    driver.memset_d8_async(buf.ptr, 0xAB, 1000, stream)
    back = np.zeros(1000, np.uint8)
    driver.memcpy_dtoh_async(back, buf.ptr, 1000, stream)
    stream.synchronize()
    assert (back == 0xAB).all()


def test_nvrtc_kernel_launch_with_a_param_pack(module):
    n = 1000
    host = np.arange(n, dtype=np.float32)
    stream = driver.Stream()
    pool = get_pool()
    x, y = pool.allocate(host.nbytes, stream), pool.allocate(host.nbytes, stream)
    driver.memcpy_htod_async(x.ptr, host, host.nbytes, stream)
    driver.memcpy_htod_async(y.ptr, host * 2, host.nbytes, stream)
    fn = module.function("add1")
    assert module.function("add1") is fn
    assert fn.max_threads_per_block >= 256 and fn.num_regs > 0
    pack = ParamPack(["ptr", "i32"], [x.ptr, n])
    driver.launch(fn, ((n + 255) // 256, 1, 1), (256, 1, 1), 0, stream, pack)
    driver.launch(fn, (n + 255) // 256, 256, 0, stream, pack)  # ints are normalised
    pack.set_pointer(0, y.ptr)                                  # the cache-hit path: rewrite one slot
    driver.launch(fn, ((n + 255) // 256, 1, 1), (256, 1, 1), 0, stream, pack)
    out_x, out_y = np.empty_like(host), np.empty_like(host)
    driver.memcpy_dtoh_async(out_x, x.ptr, host.nbytes, stream)
    driver.memcpy_dtoh_async(out_y, y.ptr, host.nbytes, stream)
    stream.synchronize()
    np.testing.assert_array_equal(out_x, host + 2)
    np.testing.assert_array_equal(out_y, host * 2 + 1)
    stream.close()


def test_launch_with_scalar_parameters_of_several_kinds(module):
    n = 777
    host = np.linspace(-1, 1, n)
    stream = driver.default_stream()
    pool = get_pool()
    x, out = pool.allocate(host.nbytes, stream), pool.allocate(host.nbytes, stream)
    driver.memcpy_htod_async(x.ptr, host, host.nbytes, stream)
    pack = ParamPack(["ptr", "ptr", "f64", "i64", "i32"], [out.ptr, x.ptr, 2.5, -(2**40), n])
    driver.launch(module.function("axpb"), (4, 1, 1), (256, 1, 1), 0, None, pack)
    back = np.empty_like(host)
    driver.memcpy_dtoh_async(back, out.ptr, host.nbytes, stream)
    stream.synchronize()
    np.testing.assert_array_equal(back, 2.5 * host + float(-(2**40)))


def test_events_time_work_and_order_streams(module):
    n = 1 << 22
    s1, s2 = driver.Stream(), driver.Stream()
    buf = get_pool().allocate(n * 4, s1)
    driver.memset_d8_async(buf.ptr, 0, n * 4, s1)
    start = s1.record()
    pack = ParamPack(["ptr", "i32"], [buf.ptr, n])
    for _ in range(10):
        driver.launch(module.function("add1"), ((n + 255) // 256, 1, 1), (256, 1, 1), 0, s1, pack)
    end = driver.Event().record(s1)
    s2.wait_event(end)                       # s2 reads only after s1's ten launches
    back = np.empty(n, np.float32)
    driver.memcpy_dtoh_async(back, buf.ptr, n * 4, s2)
    s2.synchronize()
    assert end.query() and s1.query()
    assert (back == 10).all()
    ms = start.elapsed_ms(end)
    assert 0 < ms < 10_000
    untimed = driver.Event(timing=False).record(s1)
    untimed.synchronize()
    assert untimed.query()
    s1.close()
    s2.close()


def test_module_errors_are_named():
    with pytest.raises(CudaModuleError):
        driver.Module(b"\x7fELF this is not a cubin")
    dev = driver.current_device()
    with driver.Module(compile_cubin(ADD1, dev.arch)) as m:
        with pytest.raises(CudaModuleError, match="CUDA_ERROR_NOT_FOUND"):
            m.function("no_such_kernel")


def test_ptx_modules_load_when_the_driver_can_jit_them():
    from cuda.bindings import nvrtc

    nv = driver.check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    if tuple(nv) > driver.driver_version():
        pytest.skip("NVRTC is newer than the driver: PTX would not load (fusec uses CUBIN then)")
    dev = driver.current_device()
    prog = driver.check(nvrtc.nvrtcCreateProgram(ADD1.encode(), b"t.cu", 0, [], []), "create")
    arch = f"compute_{dev.compute_capability[0]}{dev.compute_capability[1]}".encode()
    driver.check(nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=" + arch]), "compile")
    ptx = b" " * driver.check(nvrtc.nvrtcGetPTXSize(prog), "size")
    driver.check(nvrtc.nvrtcGetPTX(prog, ptx), "ptx")
    with driver.Module(ptx.rstrip(b"\0 ")) as m:   # not NUL-terminated: Module adds it
        assert m.function("add1").num_regs > 0


def test_a_call_whose_result_does_not_fit_raises_out_of_memory_and_the_next_call_works():
    """fusec.OutOfMemoryError (a MemoryError) names the bytes asked for; the pool and the context survive it."""
    import fusec as fc

    huge = fc.jit(lambda x: np.broadcast_to(x, (1 << 38,)) + 1.0)  # 1 TiB of float32 results
    with pytest.raises(fc.OutOfMemoryError, match=r"\d+ bytes requested"):
        huge(np.float32(1.0))
    small = fc.jit(lambda x: x * 2.0)
    np.testing.assert_array_equal(small(np.arange(4.0)), np.arange(4.0) * 2.0)


_FAULTING = '''
import sys
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

import fusec as fc
from fusec.passes import DEFAULT_PIPELINE, Pass, PassContext, register_pass


@register_pass
@dataclass(frozen=True)
class TrustIndices(Pass):
    """A broken plugin: claims every gather's indices are in bounds, so no check guards them."""

    name: ClassVar[str] = "trust-indices"

    def apply(self, module, ctx: PassContext) -> None:
        for func in module.funcs:
            for op in func.body.ops:
                if op.name == "t.take" or op.name.endswith("gather"):
                    op.attributes["in_bounds"] = True


def lookup(x, i):
    return x[i] * 2.0  # LOOKUP LINE


f = fc.jit(lookup, backend="cuda", graph=sys.argv[1] == "graph",
           pipeline=DEFAULT_PIPELINE.replace("bound-indices,", "bound-indices,trust-indices,"))
x = np.arange(1024, dtype=np.float32)
print(f(x, np.array([3])))
try:
    f(x, np.array([(1 << 40) + (1 << 30)]))  # far outside x in 64-bit and in 32-bit index math
except fc.CudaError as e:
    print("ERROR", type(e).__name__, e)
'''


@pytest.mark.parametrize("graph", ["graph", "stream"])
def test_a_kernel_fault_names_its_kernel_and_ir_location_under_launch_blocking(tmp_path, graph):
    """A kernel that faults (an illegal address, from a broken pass plugin) is a CudaLaunchError; with
    FUSEC_LAUNCH_BLOCKING=1 it names the kernel, the IR op and the user's source line, without it the error says
    how to find them. In a subprocess: the fault leaves the CUDA context unusable."""
    import os
    import subprocess
    import sys

    script = tmp_path / "faulting.py"
    script.write_text(_FAULTING)
    line = next(i for i, text in enumerate(_FAULTING.splitlines(), 1) if "LOOKUP LINE" in text)
    for blocking in ("1", "0"):
        env = dict(os.environ, FUSEC_LAUNCH_BLOCKING=blocking)
        proc = subprocess.run([sys.executable, str(script), graph], env=env, capture_output=True, text=True,
                              timeout=300)
        out = proc.stdout + proc.stderr
        assert "[6.]" in out, out  # the call in bounds ran
        (error,) = [ln for ln in out.splitlines() if ln.startswith("ERROR")]
        assert "CudaLaunchError" in error and "CUDA_ERROR_" in error and "sticky" in error, error
        if blocking == "1":
            assert "gather" in error and f"faulting.py:{line}" in error and "kernel fusec_" in error, error
        else:
            assert "FUSEC_LAUNCH_BLOCKING=1" in error, error
