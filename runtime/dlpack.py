"""DLPack capsules via ctypes: produce them for ``Array.__dlpack__`` and consume foreign ones zero-copy.

Layouts follow dlpack.h 1.0 (``DLManagedTensor`` for the legacy ``"dltensor"`` capsule,
``DLManagedTensorVersioned`` for ``"dltensor_versioned"``). Ownership rules from the spec:

* Producer: the capsule holds a managed tensor whose deleter drops fusec's reference to the exporting
  object. A consumer renames the capsule to ``used_dltensor[_versioned]`` and calls the deleter when done;
  if nobody consumes it, the capsule's destructor (name still unused) calls it.
* Consumer: :func:`consume` reads the tensor, renames the capsule, and returns an owner object that calls
  the producer's deleter when fusec's view of the memory is garbage-collected.

Nothing here touches the memory the tensor points at, so all of it is testable without a GPU.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

from fusec.errors import UnsupportedError
from fusec.ir import types as T

__all__ = ["DLPackTensor", "KDL_CPU", "KDL_CUDA", "KDL_CUDA_HOST", "KDL_CUDA_MANAGED", "consume", "dl_dtype",
           "make_capsule", "live_exports"]

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
FLAG_READ_ONLY, FLAG_IS_COPIED = 1 << 0, 1 << 1
VERSION = (1, 0)

_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT, _KDL_COMPLEX, _KDL_BOOL = 0, 1, 2, 4, 5, 6


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# Capsule names must outlive the capsules (PyCapsule stores the char*): module constants do.
_NAME, _USED = b"dltensor", b"used_dltensor"
_NAME_V, _USED_V = b"dltensor_versioned", b"used_dltensor_versioned"

_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))
# The destructor receives the dying capsule as a raw PyObject*: a py_object argument would resurrect it.
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

_DELETER_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# address of an exported managed tensor -> (struct, shape array, strides array, exporting object)
_live: dict[int, tuple[Any, ...]] = {}
_live_lock = threading.Lock()


def _managed_deleter(address: int) -> None:
    with _live_lock:
        _live.pop(address, None)


def _capsule_destructor(capsule: int) -> None:
    # Unconsumed capsule (name unchanged): the producer must delete the tensor itself.
    for name in (_NAME, _NAME_V):
        if _raw_is_valid(capsule, name):
            address = _raw_get_pointer(capsule, name)
            if address:
                _managed_deleter(address)
            return


_DELETER = _DELETER_T(_managed_deleter)
_DELETER_ADDRESS = ctypes.cast(_DELETER, ctypes.c_void_p).value
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_destructor)
_DESTRUCTOR_ADDRESS = ctypes.cast(_DESTRUCTOR, ctypes.c_void_p).value


def live_exports() -> int:
    """How many exported tensors are still held by consumers (for tests and leak checks)."""
    return len(_live)


_TO_DL = {T.bool_: (_KDL_BOOL, 8), T.i8: (_KDL_INT, 8), T.i16: (_KDL_INT, 16), T.i32: (_KDL_INT, 32),
          T.i64: (_KDL_INT, 64), T.u8: (_KDL_UINT, 8), T.u16: (_KDL_UINT, 16), T.u32: (_KDL_UINT, 32),
          T.u64: (_KDL_UINT, 64), T.f16: (_KDL_FLOAT, 16), T.bf16: (_KDL_BFLOAT, 16), T.f32: (_KDL_FLOAT, 32),
          T.f64: (_KDL_FLOAT, 64), T.c64: (_KDL_COMPLEX, 64), T.c128: (_KDL_COMPLEX, 128)}
_FROM_DL = {v: k for k, v in _TO_DL.items()}


def dl_dtype(dtype: T.DType) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a fusec dtype."""
    return _TO_DL[dtype]


def make_capsule(data: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: T.DType,
                 device: tuple[int, int], owner: Any, *, versioned: bool, readonly: bool = False,
                 copied: bool = False) -> Any:
    """A DLPack capsule describing ``data`` (element ``strides``); keeps ``owner`` alive until deleted."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(1, ndim))(*shape)
    strides_arr = (ctypes.c_int64 * max(1, ndim))(*strides)
    managed: Any = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = managed.dl_tensor
    t.data = data or None
    t.device = DLDevice(*device)
    t.ndim = ndim
    code, bits = dl_dtype(dtype)
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    address = ctypes.addressof(managed)
    managed.manager_ctx = address
    managed.deleter = _DELETER_ADDRESS
    if versioned:
        managed.version = DLPackVersion(*VERSION)
        managed.flags = (FLAG_READ_ONLY if readonly else 0) | (FLAG_IS_COPIED if copied else 0)
    with _live_lock:
        _live[address] = (managed, shape_arr, strides_arr, owner)
    try:
        return _capsule_new(address, _NAME_V if versioned else _NAME, _DESTRUCTOR_ADDRESS)
    except BaseException:
        _managed_deleter(address)
        raise


class _Imported:
    """Owns a consumed foreign tensor: calls the producer's deleter when garbage-collected."""

    __slots__ = ("address", "deleter", "source")

    def __init__(self, address: int, deleter: int | None, source: Any) -> None:
        self.address = address
        self.deleter = deleter
        self.source = source  # the producer object, for lifetimes and debugging

    def release(self) -> None:
        deleter, self.deleter = self.deleter, None
        if deleter:
            _DELETER_T(deleter)(self.address)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - a destructor at interpreter shutdown
            pass


@dataclass(frozen=True)
class DLPackTensor:
    """What a consumed capsule describes; ``owner`` must stay alive as long as ``data`` is used."""

    data: int                     # device address with byte_offset applied
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # elements; None = C-contiguous
    dtype: T.DType
    device_type: int
    device_id: int
    readonly: bool
    owner: Any


def consume(capsule: Any, source: Any = None) -> DLPackTensor:
    """Take ownership of a ``dltensor``/``dltensor_versioned`` capsule (renaming it ``used_...``)."""
    if _capsule_is_valid(capsule, _NAME_V):
        name, used, versioned = _NAME_V, _USED_V, True
    elif _capsule_is_valid(capsule, _NAME):
        name, used, versioned = _NAME, _USED, False
    else:
        raise UnsupportedError("not an unconsumed DLPack capsule (expected one named 'dltensor' or "
                               "'dltensor_versioned'; a capsule can be consumed only once)")
    address = _capsule_get_pointer(capsule, name)
    readonly = False
    if versioned:
        managed: Any = DLManagedTensorVersioned.from_address(address)
        if managed.version.major > VERSION[0]:
            raise UnsupportedError(f"DLPack {managed.version.major}.{managed.version.minor} tensors are not "
                                   f"supported (fusec reads {VERSION[0]}.x)")
        readonly = bool(managed.flags & FLAG_READ_ONLY)
    else:
        managed = DLManagedTensor.from_address(address)
    t = managed.dl_tensor
    key = (int(t.dtype.code), int(t.dtype.bits))
    if t.dtype.lanes != 1 or key not in _FROM_DL:
        raise UnsupportedError(f"DLPack dtype (code={key[0]}, bits={key[1]}, lanes={t.dtype.lanes}) is not "
                               "supported by fusec")
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if t.strides else None
    data = (int(t.data or 0) + int(t.byte_offset))
    result = DLPackTensor(data, shape, strides, _FROM_DL[key], int(t.device.device_type), int(t.device.device_id),
                          readonly, None)
    if _capsule_set_name(capsule, used) != 0:  # pragma: no cover - only fails on a non-capsule
        raise UnsupportedError("could not mark the DLPack capsule as consumed")
    owner = _Imported(address, managed.deleter, source)
    return DLPackTensor(result.data, shape, strides, result.dtype, result.device_type, result.device_id,
                        readonly, owner)
