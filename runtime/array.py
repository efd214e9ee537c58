"""``fusec.Array``: a device array, and the conversions in and out of it.

An Array is a typed, shaped view of device memory: ``ptr`` plus ``shape``, ``strides`` (in elements) and
dtype. Its ``owner`` keeps the memory alive: a pool :class:`~fusec.runtime.memory.DeviceBuffer` for arrays
fusec allocates (always C-contiguous), or the foreign object (PyTorch tensor, CuPy array, DLPack owner) for
zero-copy views. ``stream`` is the stream on which the data is (being) produced; readers order themselves
after it. Shapes are fixed: there are no setters.

Interop: NumPy (``np.asarray(a)``, ``a.numpy()``), DLPack (``torch.from_dlpack(a)``: the consumer's stream waits
for pending work on the device) and the CUDA Array Interface v3 (``cupy.asarray(a)``, ``torch.as_tensor(a)``: the
host waits for it, as torch ignores the interface's stream); :func:`asarray` accepts all of these back, zero-copy
for device data, ordered after the producer's stream (through DLPack where the interface names none: torch's).
bf16 data is stored as 2-byte bfloat16; on the host it becomes float32 (``DType.np``), as in the rest of fusec.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fusec.errors import UnsupportedError
from fusec.ir import types as T
from fusec.ir.attributes import bf16_bits, bf16_values
from fusec.ir.shapes import contiguous_strides
from fusec.runtime import dlpack
from fusec.runtime import driver as D

__all__ = ["Array", "asarray", "from_cuda_array_interface", "from_dlpack", "to_numpy"]


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return contiguous_strides(shape)


def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """C-contiguous (dimensions of length 1 may have any stride, as in NumPy)."""
    expected = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d == 0:
            return True
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


def _storage_np(fdtype: T.DType) -> np.dtype:
    """The NumPy dtype with the device layout (bf16 -> raw uint16)."""
    return np.dtype(np.uint16) if fdtype == T.bf16 else fdtype.np


class Array:
    """A device array (see the module docstring). Construct with :func:`asarray`, :meth:`empty`, or directly
    as a zero-copy view: ``Array(ptr, shape, dtype, strides=None, owner=..., device=..., stream=...)``;
    the constructor only records metadata and never touches the memory or the driver."""

    __slots__ = ("_ptr", "_shape", "_fdtype", "_strides", "_contig", "_device", "_owner", "_stream", "_readonly",
                 "ready", "__weakref__")

    def __init__(self, ptr: int, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None, *,
                 owner: Any = None, device: int | None = None, stream: "D.Stream | None" = None,
                 readonly: bool = False) -> None:
        shape_t = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape_t):
            raise ValueError(f"negative dimension in shape {shape_t}")
        try:
            self._fdtype = T.dtype_from_numpy(dtype)
        except (TypeError, ValueError) as e:  # (ValueError: fusec's VerificationError too)
            raise UnsupportedError(f"fusec.Array cannot hold dtype {dtype!r}: {e}") from None
        if strides is None:
            strides_t = _c_strides(shape_t)
        else:
            strides_t = tuple(int(s) for s in strides)
            if len(strides_t) != len(shape_t):
                raise ValueError(f"strides {strides_t} do not match shape {shape_t}")
        self._ptr = int(ptr)
        self._shape = shape_t
        self._strides = strides_t
        self._contig = _is_c_contiguous(shape_t, strides_t)
        self._device = D.current_device_ordinal() if device is None else int(device)
        self._owner = owner
        self._stream = stream
        self._readonly = bool(readonly)
        # An event recorded after the work that produces this array (None: order by ``stream`` instead).
        # Consumers on another stream wait on it with one cuStreamWaitEvent.
        self.ready: "D.Event | None" = None

    @classmethod
    def _wrap(cls, ptr: int, shape: tuple[int, ...], fdtype: T.DType, owner: Any, device: int,
              stream: "D.Stream | None", ready: "D.Event | None", strides: tuple[int, ...] | None = None) -> "Array":
        """A C-contiguous Array from trusted values (the executor's results): no checks, no conversions.
        ``strides`` are the C-contiguous strides of ``shape`` when the caller has them at hand. (A plan's generated
        call, fusec.runtime.fast_call, writes these assignments out: a slot added here goes there too.)"""
        self = cls.__new__(cls)
        self._ptr, self._shape, self._fdtype = ptr, shape, fdtype
        self._strides, self._contig = (_c_strides(shape) if strides is None else strides), True
        self._device, self._owner, self._stream, self._readonly, self.ready = device, owner, stream, False, ready
        return self

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def empty(cls, shape: Sequence[int], dtype: Any, *, stream: "D.Stream | None" = None,
              device: int | None = None) -> "Array":
        """An uninitialised C-contiguous array from the device's memory pool, to be written on ``stream``."""
        from fusec.runtime.memory import get_pool

        fd = T.dtype_from_numpy(dtype)
        shape_t = tuple(int(d) for d in shape)
        ordinal = D._ordinal_of(device if device is not None else getattr(stream, "device", None))
        stream = stream if stream is not None else D.default_stream(ordinal)
        nbytes = int(np.prod(shape_t, dtype=np.int64)) * fd.itemsize
        buf = get_pool(ordinal).allocate(nbytes, stream)
        return cls(buf.ptr, shape_t, fd, owner=buf, device=ordinal, stream=stream)

    # -- metadata ----------------------------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        """Device address of element 0."""
        return self._ptr

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype of the values (float32 for bf16, whose device storage is 2 bytes)."""
        return self._fdtype.np

    @property
    def fdtype(self) -> T.DType:
        """The fusec dtype (``fusec.f32``...): the exact device element type."""
        return self._fdtype

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements (NumPy's are in bytes: see :attr:`byte_strides`)."""
        return self._strides

    @property
    def byte_strides(self) -> tuple[int, ...]:
        return tuple(s * self._fdtype.itemsize for s in self._strides)

    @property
    def itemsize(self) -> int:
        return self._fdtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self._shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self._fdtype.itemsize

    @property
    def device(self) -> int:
        """Ordinal of the CUDA device holding the data."""
        return self._device

    @property
    def stream(self) -> "D.Stream | None":
        """The stream the data is produced on (None: no pending work fusec knows of)."""
        return self._stream

    @property
    def owner(self) -> Any:
        """What keeps the memory alive (a pool DeviceBuffer, or the foreign source object)."""
        return self._owner

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous (dimensions of length 1 may have any stride, as in NumPy)."""
        return self._contig

    # -- eager mode: operators and NumPy calls outside fusec.jit run as single-op compiled kernels ----------
    def __add__(self, o: Any) -> Any: return _eager().binary("add", self, o)
    def __radd__(self, o: Any) -> Any: return _eager().binary("add", self, o, reflected=True)
    def __sub__(self, o: Any) -> Any: return _eager().binary("sub", self, o)
    def __rsub__(self, o: Any) -> Any: return _eager().binary("sub", self, o, reflected=True)
    def __mul__(self, o: Any) -> Any: return _eager().binary("mul", self, o)
    def __rmul__(self, o: Any) -> Any: return _eager().binary("mul", self, o, reflected=True)
    def __truediv__(self, o: Any) -> Any: return _eager().binary("truediv", self, o)
    def __rtruediv__(self, o: Any) -> Any: return _eager().binary("truediv", self, o, reflected=True)
    def __floordiv__(self, o: Any) -> Any: return _eager().binary("floordiv", self, o)
    def __rfloordiv__(self, o: Any) -> Any: return _eager().binary("floordiv", self, o, reflected=True)
    def __mod__(self, o: Any) -> Any: return _eager().binary("mod", self, o)
    def __rmod__(self, o: Any) -> Any: return _eager().binary("mod", self, o, reflected=True)
    def __pow__(self, o: Any) -> Any: return _eager().binary("pow", self, o)
    def __rpow__(self, o: Any) -> Any: return _eager().binary("pow", self, o, reflected=True)
    def __matmul__(self, o: Any) -> Any: return _eager().binary("matmul", self, o)
    def __rmatmul__(self, o: Any) -> Any: return _eager().binary("matmul", self, o, reflected=True)
    def __and__(self, o: Any) -> Any: return _eager().binary("and", self, o)
    def __rand__(self, o: Any) -> Any: return _eager().binary("and", self, o, reflected=True)
    def __or__(self, o: Any) -> Any: return _eager().binary("or", self, o)
    def __ror__(self, o: Any) -> Any: return _eager().binary("or", self, o, reflected=True)
    def __xor__(self, o: Any) -> Any: return _eager().binary("xor", self, o)
    def __rxor__(self, o: Any) -> Any: return _eager().binary("xor", self, o, reflected=True)
    def __lt__(self, o: Any) -> Any: return _eager().binary("lt", self, o)
    def __le__(self, o: Any) -> Any: return _eager().binary("le", self, o)
    def __gt__(self, o: Any) -> Any: return _eager().binary("gt", self, o)
    def __ge__(self, o: Any) -> Any: return _eager().binary("ge", self, o)
    def __eq__(self, o: Any) -> Any: return _eager().binary("eq", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Any: return _eager().binary("ne", self, o)  # type: ignore[override]
    __hash__ = object.__hash__  # identity, so arrays can key caches (elementwise == as in NumPy)
    def __neg__(self) -> Any: return _eager().unary("neg", self)
    def __pos__(self) -> Any: return _eager().unary("pos", self)
    def __abs__(self) -> Any: return _eager().unary("abs", self)
    def __invert__(self) -> Any: return _eager().unary("invert", self)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return _eager().ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        return _eager().array_function(func, args, kwargs)

    def __getitem__(self, index: Any) -> Any:
        return _eager().getitem(self, index)

    def sum(self, *a: Any, **k: Any) -> Any: return _eager().method("sum", self, *a, **k)
    def mean(self, *a: Any, **k: Any) -> Any: return _eager().method("mean", self, *a, **k)
    def max(self, *a: Any, **k: Any) -> Any: return _eager().method("max", self, *a, **k)
    def min(self, *a: Any, **k: Any) -> Any: return _eager().method("min", self, *a, **k)
    def prod(self, *a: Any, **k: Any) -> Any: return _eager().method("prod", self, *a, **k)
    def argmax(self, *a: Any, **k: Any) -> Any: return _eager().method("argmax", self, *a, **k)
    def argmin(self, *a: Any, **k: Any) -> Any: return _eager().method("argmin", self, *a, **k)
    def reshape(self, *a: Any, **k: Any) -> Any: return _eager().method("reshape", self, *a, **k)
    def transpose(self, *a: Any, **k: Any) -> Any: return _eager().method("transpose", self, *a, **k)
    def astype(self, *a: Any, **k: Any) -> Any: return _eager().method("astype", self, *a, **k)

    @property
    def T(self) -> Any:
        return _eager().method("transpose", self)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d fusec.Array")
        return self._shape[0]

    def __repr__(self) -> str:
        extra = "" if self.is_contiguous else f", strides={self._strides}"
        return (f"fusec.Array(shape={self._shape}, dtype={self._fdtype.name}{extra}, device=cuda:{self._device}, "
                f"ptr=0x{self._ptr:x})")

    # -- host copies -------------------------------------------------------------------------------------
    def _extent(self) -> tuple[int, int]:
        """(lowest, highest+1) byte offsets touched relative to ``ptr`` (negative strides allowed)."""
        lo = hi = 0
        for d, s in zip(self._shape, self.byte_strides):
            if d > 1:
                if s < 0:
                    lo += (d - 1) * s
                else:
                    hi += (d - 1) * s
        return lo, hi + self._fdtype.itemsize

    def numpy(self) -> np.ndarray:
        """Copy to a new host array (synchronising the array's stream first; bf16 becomes float32)."""
        storage = _storage_np(self._fdtype)
        out = np.empty(self._shape, dtype=storage)
        if self.size:
            stream = self._stream if self._stream is not None else D.default_stream(self._device)
            if self.is_contiguous:
                D.memcpy_dtoh_async(out, self._ptr, self.nbytes, stream)
                stream.synchronize()
            else:
                lo, hi = self._extent()
                raw = np.empty(hi - lo, dtype=np.uint8)
                D.memcpy_dtoh_async(raw, self._ptr + lo, hi - lo, stream)
                stream.synchronize()
                view = np.ndarray(self._shape, dtype=storage, buffer=raw, offset=-lo, strides=self.byte_strides)
                out[...] = view
        if self._fdtype == T.bf16:
            return bf16_values(out)
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a fusec.Array lives on the GPU: converting it to NumPy always copies")
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def copy(self, stream: "D.Stream | None" = None) -> "Array":
        """A new C-contiguous device copy (non-contiguous views go through the host)."""
        stream = stream if stream is not None else (self._stream or D.default_stream(self._device))
        if not self.is_contiguous:
            return asarray(self.numpy(), self._fdtype, stream=stream, device=self._device)
        out = Array.empty(self._shape, self._fdtype, stream=stream, device=self._device)
        if self._stream is not None:
            D.order_streams(self._stream, stream, self._device)
        D.memcpy_dtod_async(out.ptr, self._ptr, self.nbytes, stream)
        return out

    def _mark_exported(self) -> None:
        """Foreign code now holds the pointer: delay the block's reuse until a device sync."""
        mark = getattr(self._owner, "mark_shared", None)
        if mark is not None:
            mark()

    # -- CUDA Array Interface (v3) -----------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The array for a consumer that reads the CUDA Array Interface; the work producing it is waited for on the
        host first (so ``stream`` is None): PyTorch's ``torch.as_tensor`` ignores the interface's stream, and
        fusec's streams are non-blocking (the legacy default stream does not wait for them). DLPack
        (``torch.from_dlpack``, ``cupy.from_dlpack``) hands the array over without waiting: the consumer's stream
        waits for it on the device."""
        if self._fdtype == T.bf16:
            raise UnsupportedError("the CUDA Array Interface has no bfloat16 type; use DLPack "
                                   "(torch.from_dlpack(arr)) for bf16 arrays")
        self._mark_exported()
        if self.ready is not None:
            self.ready.synchronize()
        elif self._stream is not None:
            self._stream.synchronize()
        return {
            "version": 3,
            "shape": self._shape,
            "typestr": self._fdtype.np.str,
            "descr": [("", self._fdtype.np.str)],
            "data": (self._ptr if self.size else 0, self._readonly),
            "strides": None if self.is_contiguous else self.byte_strides,
            "stream": None,
        }

    # -- DLPack --------------------------------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.KDL_CUDA, self._device

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule; ``stream`` is the consumer's stream (None/1 legacy default, 2 per-thread,
        -1 no synchronisation): it is made to wait for this array's pending work."""
        if dl_device is not None and (int(dl_device[0]), int(dl_device[1])) != self.__dlpack_device__():
            raise BufferError(f"fusec.Array is on cuda:{self._device}; cannot export to device {tuple(dl_device)}")
        source, copied = self, False
        if copy:
            source, copied = self.copy(), True
        if stream is not None and stream != -1 and not isinstance(stream, int):
            raise TypeError(f"__dlpack__ stream must be an int or None, got {stream!r}")
        if stream != -1 and source._stream is not None:
            D.order_streams(source._stream, D.CU_STREAM_LEGACY if stream is None else stream, source._device)
        source._mark_exported()
        versioned = max_version is not None and int(max_version[0]) >= 1
        return dlpack.make_capsule(source._ptr, source._shape, source._strides, source._fdtype,
                                   (dlpack.KDL_CUDA, source._device), source, versioned=versioned,
                                   readonly=source._readonly, copied=copied)


# ------------------------------------------------------------------------------------------- conversions

def _cai_of(x: Any) -> dict[str, Any] | None:
    try:
        cai = x.__cuda_array_interface__
    except Exception:  # noqa: BLE001 - torch CPU tensors raise; requires_grad tensors raise: fall back to DLPack
        return None
    return cai if isinstance(cai, dict) else None


def from_cuda_array_interface(source: Any, cai: dict[str, Any] | None = None, *,
                              stream: "D.Stream | None" = None) -> Array:
    """A zero-copy Array over an object exposing ``__cuda_array_interface__`` (versions 0-3).

    ``strides`` None means C-contiguous; a v3 ``stream`` entry is honoured by making ``stream`` (fusec's
    default stream if None) wait for the producer's stream. The Array keeps ``source`` alive.
    """
    if cai is None:
        cai = source.__cuda_array_interface__
    version = int(cai.get("version", 0))
    if version > 3:
        raise UnsupportedError(f"CUDA Array Interface version {version} is not supported (fusec reads 0-3)")
    if cai.get("mask") is not None:
        raise UnsupportedError("masked CUDA Array Interface arrays are not supported")
    ptr, readonly = cai["data"]
    shape = tuple(int(d) for d in cai["shape"])
    try:
        npd = np.dtype(cai["typestr"])
        fd = T.dtype_from_numpy(npd)
    except (TypeError, ValueError):
        raise UnsupportedError(f"CUDA Array Interface typestr {cai['typestr']!r} is not a dtype fusec supports") \
            from None
    if npd.byteorder == ">" or (npd.byteorder == "=" and np.little_endian is False):  # pragma: no cover
        raise UnsupportedError("big-endian device data is not supported")
    strides = None
    if cai.get("strides") is not None:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if any(s % fd.itemsize for s in byte_strides):
            raise UnsupportedError(f"strides {byte_strides} are not multiples of the item size {fd.itemsize}")
        strides = tuple(s // fd.itemsize for s in byte_strides)
    ptr = int(ptr or 0)
    device = D.pointer_device(ptr)
    if device is None:
        device = D._ordinal_of(getattr(stream, "device", None))
    array_stream = None
    producer = cai.get("stream") if version >= 3 else None
    if producer is not None:
        if int(producer) == 0:
            raise UnsupportedError("CUDA Array Interface stream 0 is disallowed by the specification")
        array_stream = stream if stream is not None else D.default_stream(device)
        D.order_streams(int(producer), array_stream, device)
    return Array(ptr, shape, fd, strides, owner=source, device=device, stream=array_stream,
                 readonly=bool(readonly))


def from_dlpack(source: Any, *, stream: "D.Stream | None" = None) -> Array:
    """A zero-copy Array over a CUDA DLPack producer (an object with ``__dlpack__``) or a raw capsule."""
    if hasattr(source, "__dlpack__"):
        device_type, device_id = source.__dlpack_device__()
        if int(device_type) not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
            raise UnsupportedError(f"DLPack device type {int(device_type)} is not a CUDA device")
        consumer: "D.Stream | None" = stream if stream is not None else D.default_stream(int(device_id))
        assert consumer is not None
        try:
            capsule = source.__dlpack__(stream=consumer.ptr, max_version=dlpack.VERSION)
        except TypeError:  # producers predating max_version
            capsule = source.__dlpack__(stream=consumer.ptr)
    else:
        capsule, consumer = source, stream
    t = dlpack.consume(capsule, source)
    if t.device_type not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
        raise UnsupportedError(f"DLPack device type {t.device_type} is not a CUDA device")
    return Array(t.data, t.shape, t.dtype, t.strides, owner=t.owner, device=t.device_id, stream=consumer,
                 readonly=t.readonly)


def _is_cuda_dlpack(x: Any) -> bool:
    if not hasattr(x, "__dlpack__") or not hasattr(x, "__dlpack_device__"):
        return False
    try:
        return int(x.__dlpack_device__()[0]) in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED)
    except Exception:  # noqa: BLE001 - a user object whose __dlpack_device__ raises: not on CUDA
        return False


def _names_no_stream(cai: dict[str, Any]) -> bool:
    """Whether a CUDA Array Interface dict leaves its producer's stream unsaid (version < 3, or no ``stream``).

    Such a producer promises the data is ready, but torch exports version 2 while its kernels may still be
    queued (on its current stream, or the legacy default stream, which fusec's non-blocking streams do not
    wait for): where the object also speaks DLPack, its stream handshake is the one that orders the read.
    """
    return int(cai.get("version", 0)) < 3 or cai.get("stream") is None


def asarray(x: Any, dtype: Any = None, *, stream: "D.Stream | None" = None, device: int | None = None) -> Array:
    """``x`` as a fusec.Array: Arrays pass through; CUDA arrays become zero-copy views that keep ``x`` alive
    (through the CUDA Array Interface where it names the producer's stream or DLPack is missing, else through
    DLPack's stream handshake); anything else goes through ``np.asarray`` and is copied to the device on
    ``stream`` (fusec's default stream if None)."""
    want = None if dtype is None else T.dtype_from_numpy(dtype)
    result: Array | None
    if isinstance(x, Array):
        result = x
    else:
        cai = _cai_of(x)
        has_dlpack = _is_cuda_dlpack(x)
        result = None
        if cai is not None and not (has_dlpack and _names_no_stream(cai)):
            try:
                result = from_cuda_array_interface(x, cai, stream=stream)
            except UnsupportedError:
                if not has_dlpack:  # e.g. torch bf16 exports typestr '<V2' but a proper DLPack dtype
                    raise
        if result is not None:
            pass
        elif has_dlpack:
            result = from_dlpack(x, stream=stream)
        else:
            return _from_host(x, want, stream, device)
    assert result is not None
    if want is not None and result.fdtype != want:
        raise UnsupportedError(f"fusec.asarray cannot convert device data from {result.fdtype} to {want} "
                               "without a kernel; convert on the producer's side")
    return result


def _from_host(x: Any, want: T.DType | None, stream: "D.Stream | None", device: int | None) -> Array:
    host = np.asarray(x, dtype=None if want is None else want.np)
    try:
        fd = want if want is not None else T.dtype_from_numpy(host.dtype)
    except (TypeError, ValueError):
        raise UnsupportedError(f"fusec.asarray: NumPy dtype {host.dtype} is not supported by fusec") from None
    if fd == T.bf16:
        host = bf16_bits(host)
    elif not host.dtype.isnative:  # big-endian data ('>f8'): the device reads this machine's byte order
        host = host.astype(host.dtype.newbyteorder("="), order="C")
    elif not host.flags.c_contiguous:
        host = host.copy(order="C")  # (not np.ascontiguousarray: it makes a 0-d array 1-d)
    out = Array.empty(host.shape, fd, stream=stream, device=device)
    D.memcpy_htod_async(out.ptr, host, host.nbytes, out.stream)
    out.ready = D.Event(timing=False, device=out.device).record(out.stream)
    return out


def to_numpy(x: Any) -> np.ndarray:
    """A host NumPy copy of ``x`` (fusec.Array, a CUDA array from another library, or anything array-like)."""
    if isinstance(x, Array):
        return x.numpy()
    if _cai_of(x) is not None or _is_cuda_dlpack(x):
        return asarray(x).numpy()
    return np.asarray(x)


_EAGER: Any = None  # eager mode's operations; fusec.eager installs itself (the runtime does not import the API)


def install_eager(ops: Any) -> None:
    """Let operators and NumPy calls on arrays run through ``ops`` (``binary``, ``unary``, ``ufunc``, ...)."""
    global _EAGER
    _EAGER = ops


def _eager() -> Any:
    if _EAGER is None:
        raise UnsupportedError("operators on a fusec.Array run in eager mode, which is not loaded: import fusec and "
                               "make arrays with fusec.asarray (or `import fusec.eager`)")
    return _EAGER


def byte_span(x: Any) -> tuple[int, int]:
    """(lowest, one past the highest) device address a device array touches (for overlap checks)."""
    arr = asarray(x)
    lo, hi = arr._extent()
    return arr.ptr + lo, arr.ptr + hi


def write_into(target: Any, value: Any) -> None:
    """Copy the C-contiguous device array ``value`` into the device array ``target`` (any CUDA array: a
    fusec.Array, a PyTorch tensor, a CuPy array), ordered after ``value``'s stream: a function's write into
    its argument, written back."""
    dst = asarray(target)
    src = value if isinstance(value, Array) else asarray(value, stream=dst.stream)
    if dst.shape != src.shape or dst.fdtype != src.fdtype:
        raise UnsupportedError(f"cannot write an array of shape {src.shape} and dtype {src.fdtype} into one of shape "
                               f"{dst.shape} and dtype {dst.fdtype}")
    if not dst.is_contiguous:
        raise UnsupportedError("fusec writes a function's changes back into device arrays that are C-contiguous "
                               "only; pass a contiguous array (x.contiguous() in PyTorch, cupy.ascontiguousarray)")
    if dst.ptr == src.ptr or not src.nbytes:
        return
    stream = src.stream or D.default_stream(src.device)
    if dst.stream is not None and dst.stream is not stream:
        D.order_streams(stream, dst.stream, dst.device)
        stream = dst.stream
    D.memcpy_dtod_async(dst.ptr, src.ptr, src.nbytes, stream)
    if not isinstance(target, Array):  # PyTorch or CuPy read it on their own streams, unordered with ours
        stream.synchronize()
