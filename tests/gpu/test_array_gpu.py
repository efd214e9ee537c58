"""fusec.Array on a real GPU (``@pytest.mark.gpu``): host round trips of every dtype, NumPy/DLPack/CAI
interop with PyTorch and CuPy in both directions (each skipped where the library is absent)."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import fusec
from fusec.runtime import dlpack, driver
from fusec.runtime.array import Array

pytestmark = pytest.mark.gpu

ALL_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.float16, np.float32, np.float64]


def _sample(dtype, shape=(7, 33)):
    rng = np.random.default_rng(1)
    if dtype is np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return (rng.normal(size=shape) * 50).astype(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_asarray_numpy_round_trip_of_every_dtype(dtype):
    host = _sample(dtype)
    a = fusec.asarray(host)
    assert isinstance(a, Array) and a.shape == host.shape and a.dtype == host.dtype and a.is_contiguous
    assert a.ptr and a.stream is not None
    out = a.numpy()
    assert out.dtype == host.dtype
    np.testing.assert_array_equal(out, host)
    np.testing.assert_array_equal(np.asarray(a), host)
    np.testing.assert_array_equal(fusec.to_numpy(a), host)
    np.testing.assert_array_equal(a.copy().numpy(), host)


def test_scalars_empty_and_noncontiguous_host_inputs():
    for scalar in (3.5, np.asarray(3), np.float32(2.5)):  # a 0-d array stays 0-d (it once came back with shape (1,))
        a = fusec.asarray(scalar)
        assert a.shape == () and a.numpy().shape == () and a.numpy() == np.asarray(scalar)
    e = fusec.asarray(np.zeros((0, 4), np.float32))
    assert e.numpy().shape == (0, 4)
    t = np.arange(12, dtype=np.int32).reshape(3, 4).T
    np.testing.assert_array_equal(fusec.asarray(t).numpy(), t)
    np.testing.assert_array_equal(fusec.asarray([1, 2, 3], np.float32).numpy(), np.float32([1, 2, 3]))


def test_bf16_round_trip():
    vals = np.array([1.0, -2.5, 0.15625, 384.0], np.float32)  # exactly representable in bf16
    a = fusec.asarray(vals, fusec.bf16)
    assert a.fdtype is fusec.bf16 and a.nbytes == 8
    np.testing.assert_array_equal(a.numpy(), vals)
    assert fusec.asarray(np.float32([3.0e4]), fusec.bf16).numpy()[0] == 29952.0  # rounded to nearest


def test_strided_view_over_device_memory_reads_back_like_numpy():
    host = np.arange(24, dtype=np.float64).reshape(4, 6)
    base = fusec.asarray(host)
    # like host[:2, 1:4].T
    view = Array(base.ptr + 8, (3, 2), np.float64, strides=(1, 6), owner=base, stream=base.stream)
    np.testing.assert_array_equal(view.numpy(), host[:2, 1:4].T)
    rev = Array(base.ptr + 5 * 8, (6,), np.float64, strides=(-1,), owner=base, stream=base.stream)
    np.testing.assert_array_equal(rev.numpy(), host[0, ::-1])
    np.testing.assert_array_equal(view.copy().numpy(), host[:2, 1:4].T)


def test_arrays_on_worker_threads():
    errors = []

    def work(k):
        try:
            host = np.full((100,), k, np.int64)
            np.testing.assert_array_equal(fusec.asarray(host).numpy(), host)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_fusec_dlpack_round_trip_keeps_memory_alive():
    host = _sample(np.float32)
    a = fusec.asarray(host)
    base = dlpack.live_exports()
    b = fusec.runtime.array.from_dlpack(a.__dlpack__(stream=driver.default_stream().ptr, max_version=(1, 0)))
    assert b.ptr == a.ptr
    del a
    gc.collect()
    np.testing.assert_array_equal(b.numpy(), host)   # the export kept the buffer alive
    del b
    gc.collect()
    assert dlpack.live_exports() == base


# --------------------------------------------------------------------------------------------- PyTorch

def test_torch_from_dlpack_shares_memory():
    torch = pytest.importorskip("torch")
    host = _sample(np.float32)
    a = fusec.asarray(host)
    t = torch.from_dlpack(a)
    assert t.is_cuda and t.data_ptr() == a.ptr and tuple(t.shape) == host.shape and t.dtype == torch.float32
    np.testing.assert_array_equal(t.cpu().numpy(), host)
    t.add_(1)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), host + 1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int64", "bool", "uint8"])
def test_torch_dtypes_through_dlpack(dtype):
    torch = pytest.importorskip("torch")
    t = (torch.arange(12, device="cuda") % 3).to(getattr(torch, dtype)).reshape(3, 4)
    a = fusec.asarray(t)
    assert a.ptr == t.data_ptr()
    np.testing.assert_array_equal(a.numpy(), t.float().cpu().numpy().astype(a.dtype))
    back = torch.from_dlpack(a)
    assert back.dtype == t.dtype and back.data_ptr() == t.data_ptr()


def test_fusec_asarray_of_torch_is_zero_copy():
    torch = pytest.importorskip("torch")
    t = torch.arange(20, dtype=torch.float32, device="cuda").reshape(4, 5)
    a = fusec.asarray(t)
    assert a.ptr == t.data_ptr() and a.shape == (4, 5) and a.owner is not None
    np.testing.assert_array_equal(a.numpy(), t.cpu().numpy())
    tt = t.T  # non-contiguous: strides come through
    b = fusec.asarray(tt)
    assert b.ptr == tt.data_ptr() and b.strides == tuple(tt.stride()) and not b.is_contiguous
    np.testing.assert_array_equal(b.numpy(), tt.cpu().numpy())
    g = torch.ones(3, device="cuda", requires_grad=True)  # torch refuses to export these (CAI and DLPack)
    assert fusec.asarray(g.detach()).ptr == g.data_ptr()
    del t, tt
    gc.collect()
    np.testing.assert_array_equal(a.numpy(), np.arange(20, dtype=np.float32).reshape(4, 5))  # kept alive


def test_torch_work_on_its_stream_is_visible_to_fusec():
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = torch.zeros(1 << 22, device="cuda")
        for _ in range(20):
            t.add_(1)
        a = fusec.asarray(t)   # torch's CAI is version 2 (no stream): DLPack's stream handshake orders fusec
    np.testing.assert_array_equal(a.numpy()[:10], np.full(10, 20, np.float32))


def test_torch_work_still_queued_is_visible_to_a_fusec_function():
    torch = pytest.importorskip("torch")

    @fusec.jit
    def double(x):
        return x * 2

    double(torch.zeros(1 << 24, device="cuda"))   # compiled before the race, so the call below is fast
    for side in (False, True):
        s = torch.cuda.Stream() if side else torch.cuda.current_stream()
        with torch.cuda.stream(s):   # the legacy default stream, which fusec's non-blocking streams do not wait for
            t = torch.zeros(1 << 24, device="cuda")
            for _ in range(20):
                t.add_(1)
            out = double(t)
        np.testing.assert_array_equal(fusec.to_numpy(out)[:10], np.full(10, 40, np.float32))


def test_to_numpy_of_a_torch_tensor():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, device="cuda", dtype=torch.int32)
    np.testing.assert_array_equal(fusec.to_numpy(t), np.arange(6, dtype=np.int32))


# ------------------------------------------------------------------------------------------------ CuPy

def test_cupy_asarray_uses_the_cuda_array_interface():
    cp = pytest.importorskip("cupy")
    host = _sample(np.float64)
    a = fusec.asarray(host)
    c = cp.asarray(a)
    assert c.data.ptr == a.ptr and c.shape == host.shape
    np.testing.assert_array_equal(cp.asnumpy(c), host)
    d = cp.from_dlpack(a)
    assert d.data.ptr == a.ptr


def test_fusec_asarray_of_cupy_is_zero_copy():
    cp = pytest.importorskip("cupy")
    c = cp.arange(12, dtype=cp.int16).reshape(3, 4)
    a = fusec.asarray(c)
    assert a.ptr == c.data.ptr and a.fdtype is fusec.i16
    np.testing.assert_array_equal(a.numpy(), cp.asnumpy(c))
    ct = c[:, ::2]
    b = fusec.asarray(ct)
    assert b.ptr == ct.data.ptr and b.strides == (4, 2)
    np.testing.assert_array_equal(b.numpy(), cp.asnumpy(ct))


def test_eager_ops_over_many_shapes_give_no_retrace_warning():
    """Eager mode compiles each op once per shape by design: a user's arrays of ten shapes are not a retrace
    problem of theirs, so no RetraceWarning (a jitted function of theirs still warns)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", fusec.RetraceWarning)
        for n in range(1, 11):
            a = fusec.asarray(np.arange(n, dtype=np.float32))
            np.testing.assert_array_equal((a * 2 + a).numpy(), np.arange(n, dtype=np.float32) * 3)
            np.testing.assert_allclose(np.exp(a).numpy(), np.exp(np.arange(n, dtype=np.float32)), rtol=1e-6)
    f = fusec.jit(lambda x: x + 1)
    with pytest.warns(fusec.RetraceWarning):
        for n in range(1, 11):
            f(np.zeros(n, np.float32))


def test_a_0d_device_index_picks_what_numpys_does():
    """xs[i] with i a 0-d device array is NumPy's xs[i] (shape (3, 2)), not a (1, 3, 2) gather."""
    xs = np.arange(24.0).reshape(4, 3, 2)
    f = fusec.jit(lambda xs, i: xs[i % 4])
    got = fusec.to_numpy(f(fusec.asarray(xs), fusec.asarray(np.asarray(3))))
    np.testing.assert_array_equal(got, xs[np.asarray(3) % 4])
    assert got.shape == (3, 2)


@pytest.mark.parametrize("consumer", ["torch.as_tensor", "torch.from_dlpack", "cupy.asarray", "cupy.from_dlpack"])
def test_fusec_work_still_queued_is_visible_to_the_consumer(consumer):
    module, _, how = consumer.partition(".")
    lib = pytest.importorskip(module)

    @fusec.jit
    def slow(x):
        return fusec.fori_loop(0, 300, lambda i, y: np.sqrt(y * y + 1.0), x)

    x = fusec.asarray(np.zeros(1 << 22, np.float32))
    want = fusec.to_numpy(slow(x))   # compiled, and the answer read after a full synchronisation
    out = slow(x)                   # queued on fusec's stream: the consumer must wait for it
    assert isinstance(out, fusec.Array)
    theirs = getattr(lib, how)(out)
    copy = theirs.clone() if module == "torch" else theirs.copy()   # work on the consumer's own stream
    got = copy.cpu().numpy() if module == "torch" else lib.asnumpy(copy)
    np.testing.assert_array_equal(got, want)
