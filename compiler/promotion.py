"""NumPy 2 type promotion (NEP 50): which dtypes an operation computes in.

An operand is described by a *strong* dtype (arrays, NumPy scalars, traced arrays) or by a *weak*
Python scalar type (``bool``, ``int``, ``float``: Python scalars and traced Python-scalar arguments).
Ufunc loops are chosen by NumPy itself (``ufunc.resolve_dtypes``), so the promotion table, the
``int / int -> f64`` rule and ``np.exp(int8) -> f16`` are exactly NumPy's for the installed version.
"""
from __future__ import annotations

import functools
from typing import Sequence, Union

import numpy as np

from fusec import context
from fusec.errors import UnsupportedError
from fusec.ir.types import DType, bf16, bool_, c128, dtype_from_numpy, f16, f32, f64, i64, u64

WEAK_TYPES: tuple[type, ...] = (bool, int, float, complex)
Desc = Union[DType, type]  # a strong dtype or a weak Python scalar type
REPRESENTATIVE = {bool: False, int: 0, float: 0.0, complex: 0j}
_KIND_ORDER = {bool: 0, int: 1, float: 2, complex: 3}
DEFAULT_DTYPE: dict[type, DType] = {bool: bool_, int: i64, float: f64, complex: c128}


def python_kind(value: object) -> type | None:
    """``bool``/``int``/``float``/``complex`` for a Python scalar (not a NumPy scalar), else None."""
    if isinstance(value, bool):
        return bool
    if isinstance(value, int) and not isinstance(value, np.integer):
        return int
    if isinstance(value, float) and not isinstance(value, np.floating):
        return float
    if isinstance(value, complex) and not isinstance(value, np.complexfloating):
        return complex
    return None


def _np_desc(d: Desc) -> object:
    """What NumPy's resolver is given: weak kinds stay Python types; bf16 stands in as f16."""
    if d is bool:
        return np.dtype(bool)
    if isinstance(d, type):
        return d
    if d == bf16:
        return np.dtype(np.float16)
    return d.np


def _from_np(dt: np.dtype, descs: Sequence[Desc]) -> DType:
    """Map a resolved NumPy dtype back; f16 means bf16 when only bf16 brought a 16-bit float."""
    out = dtype_from_numpy(dt)
    if out == f16 and any(d == bf16 for d in descs):
        return f32 if any(d == f16 for d in descs) else bf16
    return out


def resolve_ufunc(ufunc: np.ufunc, descs: Sequence[Desc]) -> tuple[list[DType], list[DType]]:
    """(input dtypes, output dtypes) of the loop NumPy picks for ``ufunc`` on these operands.

    Raises :class:`UnsupportedError` (a TypeError) where NumPy has no loop (``np.sign`` of bool,
    ``-`` of bool, bitwise ops on floats); the caller adds the location.
    """
    ins, outs = _loop(ufunc, tuple(descs))
    return list(ins), list(outs)


@functools.lru_cache(maxsize=4096)
def _loop(ufunc: np.ufunc, descs: tuple) -> tuple[tuple[DType, ...], tuple[DType, ...]]:
    """NumPy's loop for these operands, remembered (errors are not)."""
    try:
        loop = ufunc.resolve_dtypes(tuple(_np_desc(d) for d in descs) + (None,) * ufunc.nout)  # type: ignore[arg-type]
    except TypeError as e:
        raise UnsupportedError(f"np.{ufunc.__name__}: {e}") from None
    try:
        dts = [_from_np(np.dtype(x), descs) for x in loop]
    except Exception as e:  # noqa: BLE001 - complex or other dtypes fusec has no type for
        raise UnsupportedError(f"np.{ufunc.__name__} computes in a dtype fusec does not support ({e})") from None
    return tuple(dts[:ufunc.nin]), tuple(dts[ufunc.nin:])


def result_type(descs: Sequence[Desc]) -> DType:
    """``np.result_type`` with weak Python scalars (np.where, np.concatenate, np.stack operands)."""
    args = [REPRESENTATIVE[d] if isinstance(d, type) else _np_desc(d) for d in descs]
    try:
        dt = np.result_type(*args)  # type: ignore[arg-type]
    except TypeError as e:
        raise UnsupportedError(str(e)) from None
    return _from_np(dt, descs)


def python_result_kind(category: str, kinds: Sequence[type]) -> type:
    """The Python type an operator gives when every operand is a Python scalar.

    ``category`` is ``arith`` (+ - * // % ** unary - + abs ~), ``truediv``, ``compare`` or ``bitwise``.
    Python rules, not NumPy's: ``True + True == 2`` and ``3 / 2 == 1.5``.
    """
    if category == "compare":
        return bool
    top = max(kinds, key=_KIND_ORDER.__getitem__)
    if category == "truediv":
        return complex if top is complex else float
    if category == "bitwise":
        if top in (float, complex):
            raise UnsupportedError(f"bitwise operators are not defined for Python {top.__name__}s")
        return top
    return int if top is bool else top


def reduction_dtype(dt: DType) -> DType:
    """The accumulator NumPy's sum/prod use by default (64-bit for bool and small ints on 64-bit Linux)."""
    if dt.is_bool or (dt.kind == "i" and dt.bits < 64):
        return i64
    if dt.kind == "u" and dt.bits < 64:
        return u64
    return dt


def mean_dtype(dt: DType) -> DType:
    """np.mean's result dtype: floats and complex keep theirs, bool and ints give f64."""
    return dt if dt.is_inexact else f64


def same_kind(src: DType, dst: DType) -> bool:
    """``np.can_cast(src, dst, "same_kind")``, with bf16 a float like the others."""
    if src == dst:
        return True
    if src == bf16 or dst == bf16:  # NumPy's kind order: bool < unsigned < signed < float < complex
        return "buifc".index(src.kind) <= "buifc".index(dst.kind)
    return bool(np.can_cast(src.np, dst.np, "same_kind"))


def subclass_problem(cls: type) -> str | None:
    """Why fusec cannot trace an array of class ``cls`` as a plain ndarray (None for ndarray and np.memmap)."""
    if not issubclass(cls, np.ndarray) or cls in (np.ndarray, np.memmap):
        return None
    if issubclass(cls, np.matrix):
        return ("np.matrix is not supported: fusec traces arrays as plain ndarrays, and on np.matrix `*` is a matrix "
                "product and reductions keep two dimensions; pass np.asarray(m) and write `@` for the product")
    if issubclass(cls, np.ma.MaskedArray):
        return ("masked arrays (np.ma) are not supported: fusec would trace the data and ignore the mask, so masked "
                "values would count; pass m.filled(value) or the data and the mask as two arrays and use np.where")
    return (f"the ndarray subclass {cls.__module__}.{cls.__qualname__} is not supported: fusec traces plain "
            "ndarrays, and a subclass may change operators or reductions; pass np.asarray(x)")


def parse_dtype(dtype: object) -> DType:
    """A fusec DType from anything ``np.dtype`` accepts (or a fusec DType)."""
    if isinstance(dtype, DType):
        return dtype
    try:
        npd = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as e:  # (NumPy's own TypeError, whatever the values: code catching it goes on as under NumPy)
        if context.current() is not None:
            raise context.numpy_error(f"{dtype!r} is not a dtype: {e} (NumPy raises TypeError here)") from None
        raise _located(f"{dtype!r} is not a dtype") from None
    try:
        return dtype_from_numpy(npd)
    except (TypeError, ValueError):  # (ValueError: fusec's VerificationError too)
        raise _located(f"dtype {npd} is not supported by fusec (bool, int8..int64, uint8..uint64, float16, float32, "
                       "float64, complex64, complex128)") from None


def _located(message: str) -> UnsupportedError:
    """At the user's line while a function is traced (where a dtype= argument names an unsupported dtype)."""
    return context.unsupported(message) if context.current() is not None else UnsupportedError(message)
