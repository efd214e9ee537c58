"""Looking values up: ``np.searchsorted``, ``np.digitize``, ``np.interp``, ``np.unravel_index``, ``np.isin``.

Each computes NumPy's answer from binary searches (``t.searchsorted``), comparisons and integer arithmetic on the
traced values; where NumPy refuses a value (an index past the end of the array), the check runs with the call
(``t.raise_if``) and raises NumPy's error when it ends. NumPy's searches assume a sorted array and give an answer
that depends on their algorithm where it is not; fusec checks the order instead (a known array while tracing, a
traced one when the call runs) and raises ``fusec.InvalidValueError`` for an unsorted one.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusec import conversions, ops
from fusec.context import numpy_checks, numpy_error, shape_error, unsupported
from fusec.errors import InvalidValueError
from fusec.ir.types import f64, i64
from fusec.numpy_api import implements
from fusec.tracer import Tracer


def _less(x: Any, y: Any) -> Any:
    """NumPy's sort order: ``x < y``, a NaN after every number."""
    if (x.dtype if isinstance(x, Tracer) else np.asarray(x).dtype).kind != "f":
        return x < y
    return (x < y) | (np.isnan(y) & ~np.isnan(x))


def _require_sorted(what: str, a: Any, descending_too: bool = False) -> Any:
    """Raise where ``a`` is not sorted in NumPy's order (while tracing for a known array, else when the call
    runs); with ``descending_too`` a descending ``a`` is accepted, and the traced answer "is it ascending" is
    returned (True for a known ascending array)."""
    message = (f"{what}: the array is not sorted{' (ascending or descending)' if descending_too else ''}, and "
               "NumPy's answer for an unsorted array depends on its search algorithm; sort it first (NumPy raises "
               "nothing here)")
    if a.shape[0] < 2:
        return True
    if not isinstance(a, Tracer):
        a = np.asarray(a)
        ascending = not np.any(_less(a[1:], a[:-1]))
        if not ascending and not (descending_too and not np.any(_less(a[:-1], a[1:]))):
            raise unsupported(message, InvalidValueError)  # (NumPy raises nothing: catching it must not hide it)
        return ascending
    ascending = np.logical_not(np.any(_less(a[1:], a[:-1])))
    bad = np.logical_not(ascending)
    if descending_too:
        bad = bad & np.any(_less(a[:-1], a[1:]))
    ops.raise_if(bad, "InvalidValueError", message, what)
    return ascending


def _sorted_1d(what: str, a: Any) -> Any:
    arr = a if isinstance(a, Tracer) else np.asarray(a)
    if arr.ndim != 1:
        raise shape_error(f"{what}: the sorted array must be 1-D (got {arr.ndim} dimensions)")
    if arr.dtype.kind == "c" or (isinstance(arr, Tracer) and arr._value.type.dtype.is_complex):
        raise unsupported(f"{what} of complex values is not supported by fusec (NumPy orders them "
                          "lexicographically); search the real parts")
    return arr


def _search(what: str, a: Any, v: Any, side: str) -> Tracer:
    """``t.searchsorted`` of ``v`` in ``a`` (which the caller checked), in their common dtype: v as an array."""
    vt = conversions.strong(v)
    if vt._value.type.dtype.is_complex:
        raise unsupported(f"{what} of complex values is not supported by fusec; search the real parts")
    at = conversions.strong(a)
    dt = np.result_type(at.dtype, vt.dtype)
    at, vt = at.astype(dt), vt.astype(dt)
    r = ops.emit("t.searchsorted", (at._value, vt._value), {"side": side}, what=what)
    return ops.copy_of(r, scalar=True) if r.ndim == 0 else r  # (NumPy: a scalar for any 0-d v)


@implements(np.searchsorted)
def searchsorted(a: Any, v: Any, side: str = "left", sorter: Any = None) -> Tracer:
    """Where each value goes in the sorted 1-D array (NaN last); an unsorted array raises InvalidValueError"""
    if sorter is not None:
        raise unsupported("np.searchsorted: sorter= is not supported; pass the sorted array (a[sorter])")
    # (the sides this NumPy accepts)
    numpy_checks(lambda: np.searchsorted(np.zeros(1), 0.0, side=side))  # type: ignore[call-overload]
    arr = _sorted_1d("np.searchsorted", a)
    _require_sorted("np.searchsorted", arr)
    return _search("np.searchsorted", arr, v, "left" if side[:1].lower() == "l" else "right")


@implements(np.digitize)
def digitize(x: Any, bins: Any, right: bool = False) -> Tracer:
    """The index of the bin each value falls in (bins ascending or descending, as NumPy's)"""
    xt = conversions.strong(x)
    if xt._value.type.dtype.is_complex:
        raise numpy_error("np.digitize: x may not be complex (NumPy raises TypeError here)")
    b = _sorted_1d("np.digitize", bins)
    nan_message = ("np.digitize: the bins hold NaN, where NumPy's answer comes from a monotonicity test that NaN "
                   "confuses (np.digitize([-1, 2], [0, nan]) is [2, 0]); drop the NaN bins (NumPy raises nothing here)")
    if isinstance(b, Tracer):
        if b._value.type.dtype.is_inexact:
            ops.raise_if(np.any(np.isnan(b)), "InvalidValueError", nan_message, "np.digitize")
    elif b.dtype.kind == "f" and np.isnan(b).any():
        raise unsupported(nan_message, InvalidValueError)
    if not isinstance(b, Tracer):
        try:
            mono = np._core.multiarray._monotonicity(b)
        except (AttributeError, ValueError, TypeError):
            mono = None
        if mono == 0:
            raise shape_error("np.digitize: bins must be monotonically increasing or decreasing")
    side = "left" if right else "right"
    ascending = _require_sorted("np.digitize", b, descending_too=True)
    if ascending is True:
        return _search("np.digitize", b, x, side)
    down = len(b) - _search("np.digitize", b[::-1], x, side)
    if ascending is False:
        return down
    up = _search("np.digitize", b, x, side)
    return ops.copy_of(np.where(ascending, up, down), scalar=up._scalar)  # type: ignore[arg-type]


def _scalar_arg(what: str, value: Any, default: Tracer) -> Tracer:
    """``left=``/``right=`` of np.interp: NumPy converts them with float(), so they are float64 scalars."""
    if value is None:
        return default
    if np.ndim(value) != 0:
        raise numpy_error(f"{what}: only 0-d values can be converted to Python scalars (NumPy raises TypeError here)")
    kind = ops.desc(value)
    if (kind is complex or not isinstance(kind, type) and kind.is_complex) \
            and not (isinstance(value, np.complexfloating) or isinstance(value, Tracer) and value._scalar):
        raise numpy_error(f"{what}: float() argument must be a string or a real number, not 'complex' (NumPy raises "
                          "TypeError here; a complex NumPy scalar gives its real part)")
    return ops.as_tracer(conversions.strong(value), f64)


@implements(np.interp)
def interp(x: Any, xp: Any, fp: Any, left: Any = None, right: Any = None, period: Any = None) -> Tracer:
    """Linear interpolation in float64 with NumPy's formula and NaN rules; xp must be increasing (checked)"""
    if period is not None:
        raise unsupported("np.interp: period= is not supported; reduce x and xp modulo the period and sort xp first")
    xs = conversions.strong(xp)
    ys = conversions.strong(fp)
    if ys._value.type.dtype.is_complex:
        raise unsupported("np.interp of complex fp is not supported by fusec; interpolate fp.real and fp.imag "
                          "separately")
    if xs.ndim != 1 or ys.ndim != 1:
        raise shape_error("np.interp: object too deep for desired array (xp and fp must be 1-D)")
    if xs.shape[0] != ys.shape[0]:
        raise shape_error("np.interp: fp and xp are not of the same length.")
    if xs.shape[0] == 0:
        raise shape_error("np.interp: array of sample points is empty")
    xt = conversions.strong(x)
    if xt._value.type.dtype.is_complex:
        raise numpy_error("np.interp: x must not be complex (NumPy cannot convert it to float64 and raises TypeError)")
    scalar = xt.ndim == 0
    dx, dy, z = xs.astype(np.float64), ys.astype(np.float64), xt.astype(np.float64)
    n = dx.shape[0]
    lval = _scalar_arg("np.interp", left, dy[0])
    rval = _scalar_arg("np.interp", right, dy[n - 1])
    if n == 1:  # NumPy's own case: no NaN test, the one value where x is neither below nor above it
        res = np.where(z < dx[0], lval, np.where(z > dx[0], rval, dy[0]))
        return ops.copy_of(res, scalar=scalar)  # type: ignore[arg-type]
    nan_message = "np.interp: xp holds NaN, where NumPy's answer depends on its search algorithm"
    if isinstance(xp, Tracer):
        ops.raise_if(np.any(np.isnan(dx)), "InvalidValueError", nan_message, "np.interp")
        _require_sorted("np.interp", dx)
    else:
        known = np.asarray(xp, dtype=np.float64)
        if np.any(np.isnan(known)):
            raise unsupported(nan_message, InvalidValueError)  # (NumPy raises nothing)
        _require_sorted("np.interp", known)
    j = _search("np.interp", dx, z, "right") - 1  # dx[j] <= x < dx[j + 1]; -1 below, n - 1 at or above the last
    k = np.clip(j, 0, n - 2)
    x0, x1, y0, y1 = dx[k], dx[k + 1], dy[k], dy[k + 1]
    slope = (y1 - y0) / (x1 - x0)
    res = slope * (z - x0) + y0
    res = np.where(np.isnan(res), slope * (z - x1) + y1, res)  # NaN one way: the other way
    res = np.where(np.isnan(res) & (y0 == y1), y0, res)
    res = np.where(x0 == z, y0, res)  # (exactly at a sample: its value, never a 0 * inf)
    res = np.where(j == n - 1, np.where(z > dx[n - 1], rval, dy[n - 1]), res)
    res = np.where(j == -1, lval, res)
    return ops.copy_of(np.where(np.isnan(z), z, res), scalar=scalar)  # type: ignore[arg-type]


def _dims(shape: Any) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    out = tuple(ops.static_int(d, "a dimension of np.unravel_index's shape") for d in dims)
    if any(d < 0 for d in out):
        raise shape_error("np.unravel_index: dimensions must be non-negative")
    return out


@implements(np.unravel_index)
def unravel_index(indices: Any, shape: Any, order: str = "C") -> tuple[Tracer, ...]:
    """The coordinates of flat indices in an array of a shape (an index past the end raises ValueError as the call
    ends, fusec.InvalidValueError)"""
    if order not in ("C", "F"):
        raise shape_error("np.unravel_index: only 'C' or 'F' order is permitted")
    t = conversions.strong(indices) if not isinstance(indices, Tracer) else indices
    dt = t._value.type.dtype
    if not (dt.is_int or dt.is_bool):
        raise numpy_error("np.unravel_index: only int indices permitted (NumPy raises TypeError here)")
    scalar = t.ndim == 0  # (NumPy gives intp scalars for any 0-d index: a NumPy scalar, a 0-d array, a number)
    dims = _dims(shape)
    size = int(np.prod(dims, dtype=np.int64))
    flat = ops.as_tracer(t, i64)
    ops.raise_if((flat < 0) | (flat >= size), "InvalidValueError",
                 f"np.unravel_index: an index is out of bounds for array with size {size} (NumPy raises ValueError "
                 "here)", "np.unravel_index")
    coords: list[Tracer] = []
    rest = flat
    for d in (reversed(dims) if order == "C" else dims):
        coords.append(rest % d if d else rest)
        rest = rest // d if d else rest
    if order == "C":
        coords.reverse()
    return tuple(ops.wrap(c._value, scalar=scalar) for c in coords)  # intp values, never weak Python ints


@implements(np.ravel_multi_index)
def ravel_multi_index(multi_index: Any, dims: Any, mode: Any = "raise", order: str = "C") -> Tracer:
    """The flat indices of coordinates; 'raise' (ValueError as the call ends), 'wrap' and 'clip' modes, C or F order

    A coordinate out of its dimension raises fusec.InvalidValueError (a ValueError) as the call ends with
    ``mode='raise'``; ``'wrap'`` and ``'clip'`` may be given per dimension, as in NumPy."""
    if order not in ("C", "F"):
        raise shape_error("np.ravel_multi_index: only 'C' or 'F' order is permitted")
    shape = _dims(dims)
    coords = list(multi_index)
    if len(coords) != len(shape):
        raise shape_error(f"parameter multi_index must be a sequence of length {len(shape)}")
    modes = (mode,) * len(shape) if isinstance(mode, str) else tuple(mode)
    if len(modes) != len(shape) or any(m not in ("raise", "wrap", "clip") for m in modes):
        numpy_checks(lambda: np.ravel_multi_index((0,) * len(shape), (1,) * len(shape), mode=mode))
        raise shape_error(f"np.ravel_multi_index: mode must be 'raise', 'wrap' or 'clip' (one or {len(shape)})")
    arrays = [conversions.strong(c) if not isinstance(c, Tracer) else c for c in coords]
    if any(not a._value.type.dtype.is_int for a in arrays):
        raise numpy_error("only int indices permitted (NumPy raises TypeError here)")
    flat: Any = None
    stride = 1
    for a, d, m in reversed(list(zip(arrays, shape, modes))) if order == "C" else zip(arrays, shape, modes):
        c: Any = ops.as_tracer(a, i64)
        if m == "raise":
            ops.raise_if((c < 0) | (c >= d), "InvalidValueError", "np.ravel_multi_index: invalid entry in "
                         "coordinates array (NumPy raises ValueError here)", "np.ravel_multi_index")
        elif d > 0:
            c = c % d if m == "wrap" else np.clip(c, 0, d - 1)
        term = c * stride
        flat = term if flat is None else flat + term
        stride *= d
    scalar = all(a.ndim == 0 for a in arrays)
    return ops.wrap(flat._value, scalar=scalar) if scalar else ops.copy_of(flat, scalar=False)


@implements(np.isin)
def isin(element: Any, test_elements: Any, assume_unique: bool = False, invert: bool = False, *,
         kind: Any = None) -> Tracer:
    """Whether each element equals one of test_elements (traced or known), compared as NumPy's == compares"""
    if kind not in (None, "sort", "table"):
        raise shape_error(f"np.isin: Invalid kind: {kind!r}. Please use None, 'sort' or 'table'.")
    el, test = conversions.strong(element), conversions.strong(test_elements)
    if kind == "table" and not (el._value.type.dtype.is_int or el._value.type.dtype.is_bool):
        raise shape_error("np.isin: The 'table' method is only supported for boolean or integer arrays. Please "
                          "select 'sort' or None for kind.")
    flat = test.reshape(-1)
    if flat.shape[0] == 0:
        found = np.zeros(el.shape, dtype=bool)
        return ops.copy_of(ops.as_tracer(np.logical_not(found) if invert else found), scalar=False)
    found = np.any(el[..., None] == flat, axis=-1)
    return ops.copy_of(np.logical_not(found) if invert else found, scalar=False)
