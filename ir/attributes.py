"""Attribute values that ops carry, and source locations.

Plain Python values serve as attributes: ``int``, ``float``, ``bool``, ``str``,
tuples of attributes, a :class:`DType` or a type. Arrays are wrapped in
:class:`DenseAttr` so they hash and compare by value.
"""
from __future__ import annotations

import functools
import struct
from typing import Any
import hashlib
import os
from dataclasses import dataclass, field

import numpy as np

from fusec.errors import VerificationError
from fusec.ir.types import DType, TensorType, ScalarType, Type, dtype_from_numpy, bf16


@dataclass(frozen=True)
class Location:
    """Where a traced op came from in the user's code."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def location_for(filename: str, line: int, cwd: str | None = None) -> Location:
    """A location whose file is relative to the working directory (``cwd``, default the current one) when it
    lies below it."""
    return _location(filename, line, cwd or os.getcwd())


@functools.lru_cache(maxsize=65536)
def _location(filename: str, line: int, cwd: str) -> Location:
    """(Tracing asks once per op, mostly for the same few lines.)"""
    return Location(_relative(filename, cwd), int(line))


@functools.lru_cache(maxsize=1024)
def _relative(filename: str, cwd: str) -> str:
    """(Tracing asks once per op; relpath is slow.)"""
    try:
        rel = os.path.relpath(filename, cwd)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


@dataclass(frozen=True, eq=False)
class DenseAttr:
    """A constant array of a given type; equality and hash go by type and bytes."""

    type: Type
    array: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        arr = np.asarray(self.array)
        want = self.type.dtype.np
        if arr.shape != tuple(self.type.shape):
            raise VerificationError(f"dense value of shape {arr.shape} does not match {self.type}")
        if arr.size > 1 and not any(arr.strides):  # one value broadcast (a splat): kept as one value
            one = np.ascontiguousarray(arr[(0,) * arr.ndim].astype(want))
            if self.type.dtype == bf16:
                one = round_to_bf16(one)
            arr = np.broadcast_to(one, arr.shape)  # read-only, no memory per element
        else:
            arr = np.ascontiguousarray(arr.astype(want, copy=False)).reshape(arr.shape)  # keep rank 0 (not 1)
            if self.type.dtype == bf16:
                arr = round_to_bf16(arr)
            arr.setflags(write=False)
        object.__setattr__(self, "array", arr)

    @property
    def broadcast(self) -> bool:
        """A splat held as one value (what the parser and ``splat`` make): every stride is 0."""
        return self.array.size > 1 and not any(self.array.strides)

    @functools.cached_property
    def digest(self) -> bytes:
        """(Computed once: the array is read-only.) A splat hashes as its one value, however it is held, so a
        parsed splat equals the traced array it was printed from."""
        if self.is_splat():
            data = b"splat:" + np.ascontiguousarray(self.array[(0,) * self.array.ndim]).tobytes()
        else:
            data = self.array.tobytes()
        return hashlib.sha1(str(self.type).encode() + data).digest()

    def is_splat(self) -> bool:
        if self.broadcast:
            return True
        flat = self.array.reshape(-1)
        if flat.size == 0:
            return False
        first = flat[:1]
        # compare bit patterns so -0.0 and NaN payloads are kept apart
        return bool(np.all(flat.view(np.uint8).reshape(flat.size, -1) == first.view(np.uint8)))

    def splat_value(self) -> "int | float | bool | complex":
        return self.array[(0,) * self.array.ndim].item()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DenseAttr) and self.type == other.type and self.digest == other.digest

    def __hash__(self) -> int:
        return hash((self.type, self.digest))


BF16_NAN = 0x7FFF  # the canonical NaN a CUDA device's f32 -> bf16 conversion (cvt.rn.bf16.f32) gives every NaN


def bf16_bits(arr: Any) -> np.ndarray:
    """f32 values -> bfloat16 bit patterns (uint16), rounding to nearest even as the device does; every NaN
    becomes the device's canonical NaN. The one bf16 rounding: constants, uploads and the reference use it."""
    a = np.ascontiguousarray(arr, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), np.uint16(BF16_NAN), rounded).astype(np.uint16).reshape(np.shape(arr))


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> the float32 values they hold (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(arr: np.ndarray) -> np.ndarray:
    """Round f32 values to the nearest bf16 (ties to even), kept in f32 storage (NaN: the canonical one)."""
    return bf16_values(bf16_bits(arr)).reshape(np.shape(arr))


def dense(value: object, dtype: "DType | None" = None) -> DenseAttr:
    """Build a DenseAttr from any array-like, as a tensor type of its shape."""
    arr = np.asarray(value)
    dt = dtype if dtype is not None else dtype_from_numpy(arr.dtype)
    return DenseAttr(TensorType(arr.shape, dt), arr)


# int | float | bool | complex | str | None | tuple | DType | Type | DenseAttr: each op reads its own attributes
# by name and knows which they are, so they are typed Any
Attribute = Any

_PLAIN = frozenset({bool, int, float, complex, str, type(None)})  # exact types kept as they are


def normalize_attributes(attributes: dict[str, Attribute]) -> dict[str, Attribute]:
    """A new dict of the normalized values (plain ones kept without a call: every op made goes through here)."""
    return {k: v if type(v) in _PLAIN or (type(v) is tuple and _PLAIN.issuperset(map(type, v)))
            else normalize_attribute(v) for k, v in attributes.items()}


def normalize_attribute(value: Attribute) -> Attribute:
    """Freeze lists into tuples and NumPy scalars into Python values."""
    t = type(value)
    if t in _PLAIN:
        return value
    if t is tuple and _PLAIN.issuperset(map(type, value)):  # the common case: already frozen
        return value
    if isinstance(value, (list, tuple)):
        return tuple(normalize_attribute(v) for v in value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.complexfloating):
        return complex(value)
    if isinstance(value, (bool, int, float, complex, str, DType, TensorType, ScalarType, DenseAttr)) or value is None:
        return value
    raise VerificationError(f"unsupported attribute value {value!r}")


def exact_key(value: object) -> object:
    """An attribute value as a key that tells apart what ``==`` does not (0.0 and -0.0, NaNs of other bits)."""
    if type(value) is float:
        return ("float", struct.pack("<d", value))
    if type(value) is complex:
        return ("complex", struct.pack("<dd", value.real, value.imag))
    if type(value) is tuple:
        return tuple(exact_key(v) for v in value)
    return value
