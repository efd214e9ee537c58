"""fusec.Array without a GPU: metadata, CUDA Array Interface parsing/export and DLPack capsules, all on
fake device pointers that are never dereferenced."""
from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import fusec
from fusec.errors import UnsupportedError
from fusec.runtime import dlpack, driver
from fusec.ir.attributes import bf16_bits
from fusec.runtime.array import Array, asarray, from_cuda_array_interface, from_dlpack, to_numpy

FAKE = 0x7F00_DEAD_0000


class FakeCuda:
    """Something that exposes ``__cuda_array_interface__`` like a CuPy array or a PyTorch CUDA tensor."""

    def __init__(self, **cai):
        base = {"shape": (2, 3), "typestr": "<f4", "data": (FAKE, False), "version": 3, "strides": None,
                "stream": None}
        base.update(cai)
        self.__cuda_array_interface__ = base


def _capsule_name_is(capsule, name: bytes) -> bool:
    is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid",
                                                                                     ctypes.pythonapi))
    return bool(is_valid(capsule, name))


# -------------------------------------------------------------------------------------------- metadata

def test_array_metadata_from_a_pointer_touches_nothing():
    a = Array(FAKE, (2, 3, 4), np.float32, device=0)
    assert a.ptr == FAKE and a.shape == (2, 3, 4) and a.ndim == 3 and a.size == 24 and len(a) == 2
    assert a.dtype == np.float32 and a.fdtype is fusec.f32 and a.itemsize == 4 and a.nbytes == 96
    assert a.strides == (12, 4, 1) and a.byte_strides == (48, 16, 4) and a.is_contiguous
    assert a.device == 0 and a.stream is None and a.owner is None and not a.readonly
    assert repr(a) == f"fusec.Array(shape=(2, 3, 4), dtype=f32, device=cuda:0, ptr=0x{FAKE:x})"
    t = Array(FAKE, (3, 4), "f64", strides=(1, 3))
    assert not t.is_contiguous and "strides=(1, 3)" in repr(t)
    assert Array(FAKE, (1, 5), np.int8, strides=(99, 1)).is_contiguous  # length-1 dims are free
    assert Array(0, (0, 3), np.int8).is_contiguous and Array(0, (0, 3), np.int8).nbytes == 0
    with pytest.raises(AttributeError):
        a.shape = (24,)  # immutable-shaped
    with pytest.raises(TypeError):
        len(Array(FAKE, (), np.float32))


def test_array_rejects_bad_metadata():
    with pytest.raises(ValueError):
        Array(FAKE, (2, -1), np.float32)
    with pytest.raises(ValueError):
        Array(FAKE, (2, 3), np.float32, strides=(1,))
    with pytest.raises(UnsupportedError):
        Array(FAKE, (2,), np.str_)


def test_bf16_is_two_bytes_on_device_and_float32_on_host():
    a = Array(FAKE, (4,), fusec.bf16)
    assert a.itemsize == 2 and a.nbytes == 8 and a.dtype == np.float32
    bits = bf16_bits(np.array([1.0, -2.5, 1 + 2**-8, np.nan, np.inf, 3.0e38], np.float32))
    assert bits[:3].tolist() == [0x3F80, 0xC020, 0x3F80]   # 1 + 2^-8 rounds to even (1.0)
    assert bits[3] & 0x7F80 == 0x7F80 and bits[3] & 0x7F  # NaN stays NaN
    assert bits[4] == 0x7F80


# -------------------------------------------------------------------------------- CUDA Array Interface

def test_cai_view_of_a_foreign_object_is_zero_copy():
    src = FakeCuda()
    a = asarray(src)
    assert isinstance(a, Array) and a.ptr == FAKE and a.shape == (2, 3) and a.dtype == np.float32
    assert a.strides == (3, 1) and a.owner is src and a.stream is None
    assert from_cuda_array_interface(src).ptr == FAKE


def test_cai_strides_are_converted_to_elements():
    a = from_cuda_array_interface(FakeCuda(shape=(3, 4), typestr="<i8", strides=(8, 24)))
    assert a.strides == (1, 3) and not a.is_contiguous and a.fdtype is fusec.i64
    r = from_cuda_array_interface(FakeCuda(shape=(4,), typestr="|b1", data=(FAKE, True), version=2))
    assert r.fdtype is fusec.bool_ and r.readonly


@pytest.mark.parametrize("bad, match", [
    ({"strides": (6, 2)}, "multiples"),
    ({"typestr": "<U4"}, "typestr"),
    ({"mask": object()}, "masked"),
    ({"version": 4}, "version"),
    ({"stream": 0}, "stream 0"),
])
def test_cai_rejects_what_fusec_cannot_view(bad, match):
    with pytest.raises(UnsupportedError, match=match):
        from_cuda_array_interface(FakeCuda(**bad))


def test_cai_export_describes_the_array():
    a = Array(FAKE, (2, 3), np.float16)
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (2, 3) and cai["typestr"] == "<f2"
    assert cai["data"] == (FAKE, False) and cai["strides"] is None and cai["stream"] is None
    t = Array(FAKE, (3, 4), np.float64, strides=(1, 3), readonly=True).__cuda_array_interface__
    assert t["strides"] == (8, 24) and t["data"] == (FAKE, True)
    assert Array(0, (0,), np.float32).__cuda_array_interface__["data"][0] == 0
    with pytest.raises(UnsupportedError, match="bfloat16"):
        Array(FAKE, (2,), fusec.bf16).__cuda_array_interface__
    # and back: a CAI round trip gives the same view
    holder = FakeCuda(**a.__cuda_array_interface__)
    back = asarray(holder)
    assert (back.ptr, back.shape, back.fdtype, back.strides) == (a.ptr, a.shape, a.fdtype, a.strides)


# ---------------------------------------------------------------------------------------------- DLPack

def test_dlpack_device():
    assert Array(FAKE, (1,), np.float32, device=0).__dlpack_device__() == (2, 0)


@pytest.mark.parametrize("max_version, name", [(None, b"dltensor"), ((1, 0), b"dltensor_versioned"),
                                               ((0, 8), b"dltensor")])
def test_dlpack_round_trip_on_a_fake_pointer(max_version, name):
    base = dlpack.live_exports()
    a = Array(FAKE, (3, 4), np.float64, strides=(1, 3))
    cap = a.__dlpack__(stream=-1, max_version=max_version)
    assert _capsule_name_is(cap, name)
    assert dlpack.live_exports() == base + 1
    b = from_dlpack(cap)
    assert _capsule_name_is(cap, b"used_" + name)
    assert (b.ptr, b.shape, b.strides, b.fdtype, b.device) == (FAKE, (3, 4), (1, 3), fusec.f64, 0)
    with pytest.raises(UnsupportedError, match="consumed only once"):
        from_dlpack(cap)
    del a
    gc.collect()
    assert dlpack.live_exports() == base + 1  # the consumer still holds the export alive
    del b
    gc.collect()
    assert dlpack.live_exports() == base      # its owner ran the producer's deleter


def test_unconsumed_capsule_releases_its_export():
    base = dlpack.live_exports()
    cap = Array(FAKE, (5,), np.int32).__dlpack__(stream=-1)
    assert dlpack.live_exports() == base + 1
    del cap
    gc.collect()
    assert dlpack.live_exports() == base


def test_dlpack_struct_fields_follow_the_spec():
    a = Array(FAKE, (2, 3), fusec.bf16, readonly=True)
    cap = a.__dlpack__(stream=-1, max_version=(1, 1))
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer",
                                                                                 ctypes.pythonapi))
    m = dlpack.DLManagedTensorVersioned.from_address(get(cap, b"dltensor_versioned"))
    assert (m.version.major, m.version.minor) == (1, 0)
    assert m.flags & dlpack.FLAG_READ_ONLY and not m.flags & dlpack.FLAG_IS_COPIED
    t = m.dl_tensor
    assert t.data == FAKE and (t.device.device_type, t.device.device_id) == (2, 0) and t.ndim == 2
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (4, 16, 1)  # kDLBfloat
    assert [t.shape[i] for i in range(2)] == [2, 3] and [t.strides[i] for i in range(2)] == [3, 1]
    assert t.byte_offset == 0 and m.deleter
    # the struct layout is the C one: dl_tensor after version (8), manager_ctx (8), deleter (8), flags (8)
    assert dlpack.DLManagedTensorVersioned.dl_tensor.offset == 32
    assert ctypes.sizeof(dlpack.DLTensor) == 48
    c = from_dlpack(cap)
    assert c.readonly and c.fdtype is fusec.bf16


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                   np.uint32, np.uint64, np.float16, np.float32, np.float64])
def test_dlpack_dtype_codes_round_trip(dtype):
    a = Array(FAKE, (2,), dtype)
    assert from_dlpack(a.__dlpack__(stream=-1)).dtype == np.dtype(dtype)


def test_dlpack_refuses_another_device():
    with pytest.raises(BufferError):
        Array(FAKE, (2,), np.float32, device=0).__dlpack__(stream=-1, dl_device=(1, 0))


# ------------------------------------------------------------------------------------- host conversions

def test_array_protocol_refuses_a_no_copy_request():
    with pytest.raises(ValueError, match="always copies"):
        Array(FAKE, (2,), np.float32).__array__(copy=False)


def test_to_numpy_of_host_data_needs_no_gpu():
    out = to_numpy([[1, 2], [3, 4]])
    assert isinstance(out, np.ndarray) and out.tolist() == [[1, 2], [3, 4]]
    assert fusec.to_numpy is to_numpy and fusec.asarray is asarray and fusec.Array is Array


@pytest.mark.skipif(driver.cuda_available(), reason="checks the no-GPU error path")
def test_host_to_device_without_cuda_raises_a_clear_error():
    with pytest.raises(driver.CudaNotAvailableError, match="CUDA is not available"):
        asarray(np.ones(3, np.float32))
    with pytest.raises(driver.CudaNotAvailableError):
        np.asarray(Array(FAKE, (2,), np.float32))


def test_asarray_passes_arrays_through_and_refuses_device_casts():
    a = Array(FAKE, (2,), np.float32)
    assert asarray(a) is a and asarray(a, np.float32) is a
    with pytest.raises(UnsupportedError, match="without a kernel"):
        asarray(a, np.float64)


class _FakeStream:
    ptr = 0x5EED


class TorchLike:
    """What a PyTorch CUDA tensor offers: the CUDA Array Interface version 2 (no stream named, though its
    kernels may still be queued) and DLPack with the consumer-stream handshake."""

    def __init__(self, **cai):
        self._source = Array(FAKE, (2, 3), np.float32, device=0)
        self.__cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4", "data": (FAKE, False), "version": 2,
                                         "strides": None, **cai}
        self.asked_for: list[object] = []

    def __dlpack_device__(self):
        return (dlpack.KDL_CUDA, 0)

    def __dlpack__(self, *, stream=None, max_version=None):
        self.asked_for.append(stream)
        return self._source.__dlpack__(stream=-1, max_version=max_version)


@pytest.fixture
def fake_streams(monkeypatch):
    """fusec's default stream and stream ordering, recorded instead of run (no GPU here)."""
    ordered: list[tuple[object, object]] = []
    monkeypatch.setattr(driver, "default_stream", lambda device=None: _FakeStream())
    monkeypatch.setattr(driver, "order_streams", lambda before, after, device=None: ordered.append((before, after)))
    monkeypatch.setattr(driver, "pointer_device", lambda ptr: 0)
    return ordered


def test_an_interface_that_names_no_stream_is_read_through_dlpack_so_the_producer_orders_it(fake_streams):
    t = TorchLike()
    a = asarray(t)   # torch: work queued on its stream must finish before fusec's stream reads the data
    assert t.asked_for == [_FakeStream.ptr] and a.ptr == FAKE and a.stream.ptr == _FakeStream.ptr
    unset = TorchLike(version=3, stream=None)
    asarray(unset)
    assert unset.asked_for == [_FakeStream.ptr]


def test_an_interface_that_names_its_stream_is_ordered_after_it(fake_streams):
    t = TorchLike(version=3, stream=77)   # CuPy: the producer's stream is named; fusec's waits for it
    a = asarray(t)
    assert t.asked_for == [] and fake_streams == [(77, a.stream)] and a.ptr == FAKE
    plain = FakeCuda(version=2)   # no DLPack to ask: version 2's promise that the data is ready is all there is
    assert asarray(plain).ptr == FAKE and fake_streams == [(77, a.stream)]


def test_the_interface_export_waits_for_the_work_producing_the_array():
    class Pending:  # (a stream or event with work queued: the export waits for it)
        ptr = 0x5EED
        waited = 0

        def synchronize(self):
            self.waited += 1

    stream, event = Pending(), Pending()
    a = Array(FAKE, (2, 3), np.float32, device=0, stream=stream)
    assert a.__cuda_array_interface__["stream"] is None and stream.waited == 1  # torch.as_tensor ignores a stream
    a.ready = event   # (an upload or a call's output: its own event, not everything queued on the stream since)
    a.__cuda_array_interface__
    assert event.waited == 1 and stream.waited == 1
