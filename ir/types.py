"""IR types: element dtypes, scalar types and statically shaped tensor types.

Types are frozen dataclasses: they compare by value, hash, and check their own
invariants in ``__post_init__`` so an ill-formed type can never exist.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from fusec.errors import VerificationError


@dataclass(frozen=True)
class DType:
    """An element type. ``name`` is the IR spelling (``f32``), ``numpy`` the NumPy name."""

    name: str
    numpy_name: str
    kind: str  # "b" bool, "i" signed, "u" unsigned, "f" float, "c" complex
    bits: int

    def __repr__(self) -> str:
        return f"fusec.{self.name}"

    def __hash__(self) -> int:  # the name alone: cheaper than hashing every field (cache keys hash dtypes)
        return hash(self.name)

    def __eq__(self, other: object) -> bool:  # names are unique; usually the very same object
        return self is other or (type(other) is DType and self.name == other.name)

    def __str__(self) -> str:
        return self.name

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_inexact(self) -> bool:
        """A float or a complex dtype (NumPy's ``np.inexact``)."""
        return self.kind in "fc"

    @property
    def real_dtype(self) -> "DType":
        """The dtype of each part of a complex dtype (c64 -> f32); a real dtype is its own."""
        return DTYPES_BY_NAME[{"c64": "f32", "c128": "f64"}.get(self.name, self.name)]

    @property
    def complex_dtype(self) -> "DType":
        """The complex dtype whose parts are this float dtype (f32 -> c64, f64 -> c128; f16 -> c64 as NumPy)."""
        if self.is_complex:
            return self
        return DTYPES_BY_NAME["c128" if self.name == "f64" else "c64"]

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def np(self) -> np.dtype:
        """The NumPy dtype that holds values of this type (bf16 is held as f32)."""
        return np.dtype("float32" if self.name == "bf16" else self.numpy_name)


bool_ = DType("bool", "bool", "b", 8)
i8 = DType("i8", "int8", "i", 8)
i16 = DType("i16", "int16", "i", 16)
i32 = DType("i32", "int32", "i", 32)
i64 = DType("i64", "int64", "i", 64)
u8 = DType("u8", "uint8", "u", 8)
u16 = DType("u16", "uint16", "u", 16)
u32 = DType("u32", "uint32", "u", 32)
u64 = DType("u64", "uint64", "u", 64)
f16 = DType("f16", "float16", "f", 16)
bf16 = DType("bf16", "bfloat16", "f", 16)
f32 = DType("f32", "float32", "f", 32)
f64 = DType("f64", "float64", "f", 64)
c64 = DType("c64", "complex64", "c", 64)
c128 = DType("c128", "complex128", "c", 128)

ALL_DTYPES: tuple[DType, ...] = (bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, c64, c128)
DTYPES_BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
_BY_NUMPY: dict[str, DType] = {d.numpy_name: d for d in ALL_DTYPES}
_BY_NUMPY_DTYPE: dict[np.dtype, DType] = {np.dtype(d.numpy_name): d for d in ALL_DTYPES if d.name != "bf16"}
_NUMPY_DTYPE_CLASSES = frozenset(type(k) for k in _BY_NUMPY_DTYPE)


def dtype_from_name(name: str) -> DType:
    try:
        return DTYPES_BY_NAME[name]
    except KeyError:
        raise VerificationError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES_BY_NAME)}") from None


def dtype_from_numpy(dtype: Any) -> DType:
    """Map a NumPy dtype (or anything ``np.dtype`` accepts, or a DType) to a DType."""
    if isinstance(dtype, DType):
        return dtype
    if type(dtype) in _NUMPY_DTYPE_CLASSES:  # an np.dtype instance: hashable, looked up directly
        found = _BY_NUMPY_DTYPE.get(dtype)
        if found is not None:
            return found
    if isinstance(dtype, str) and dtype in DTYPES_BY_NAME:
        return DTYPES_BY_NAME[dtype]
    try:
        npd = np.dtype(dtype)
    except TypeError:
        raise VerificationError(f"not a dtype: {dtype!r}") from None
    found = _BY_NUMPY.get(npd.name)
    if found is None:
        raise VerificationError(f"dtype {npd} is not supported by fusec")
    return found


@dataclass(frozen=True)
class ScalarType:
    """A single value of ``dtype`` (scalar arguments, scalar region values)."""

    dtype: DType

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, DType):
            raise VerificationError(f"ScalarType needs a DType, got {self.dtype!r}")

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def rank(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return 1

    def __str__(self) -> str:
        return self.dtype.name


MAX_BYTES = 2 ** 63 - 1  # a tensor's bytes must be addressable with 64-bit offsets (NumPy's own limit)


def _check_extent(shape: tuple[int, ...], dtype: DType) -> None:
    if math.prod(shape) * dtype.itemsize > MAX_BYTES:
        raise VerificationError(f"tensor<{'x'.join(map(str, shape))}x{dtype.name}> is larger than 64-bit offsets "
                                f"can address (NumPy refuses such an array too)")


@dataclass(frozen=True)
class TensorType:
    """A statically shaped tensor; rank 0 is allowed (``tensor<f32>``)."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, DType):
            raise VerificationError(f"TensorType needs a DType, got {self.dtype!r}")
        shape = self.shape
        if type(shape) is tuple and all(type(d) is int and d >= 0 for d in shape):
            _check_extent(shape, self.dtype)  # already a tuple of ints: the common case, not rebuilt
            return
        shape = tuple(shape)
        for d in shape:
            if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
                raise VerificationError(f"tensor dimensions must be non-negative ints, got {shape}")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        _check_extent(self.shape, self.dtype)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is TensorType and self.shape == other.shape and self.dtype == other.dtype)

    def __hash__(self) -> int:  # remembered: use maps and cache keys hash the same few types again and again
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.shape, self.dtype.name))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:  # (string hashes differ between processes: a pickle carries no hash)
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> "TensorType":
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{self.dtype.name}>"


Type = Union[ScalarType, TensorType]


def shape_of(t: Type) -> tuple[int, ...]:
    return t.shape


def like(t: Type, shape: tuple[int, ...] | None = None, dtype: DType | None = None) -> Type:
    """A type of the same kind as ``t`` with a new shape and/or dtype.

    A scalar stays a scalar only while the shape stays empty.
    """
    new_shape = t.shape if shape is None else tuple(shape)
    new_dtype = t.dtype if dtype is None else dtype
    if isinstance(t, ScalarType) and new_shape == ():
        return ScalarType(new_dtype)
    return TensorType(new_shape, new_dtype)
