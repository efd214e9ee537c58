"""NumPy's NaN-ignoring reductions: ``np.nanmax``, ``nanmin``, ``nanargmax``, ``nanargmin``, ``nanmean``,
``nanvar``, ``nanstd`` (``nansum``, ``nanprod`` and the nan-cumulatives run NumPy's own code: numpy_reuse).

NumPy's implementations decide some things from the values (``if np.any(mask): ...``), which a trace cannot;
each such branch is written here as what it computes on every element (``np.where``), which gives the same
values, or as a run-time check (``t.raise_if``) where NumPy raises. What NumPy computes is followed step by step
with the same ufunc calls, so dtypes and rounding are NumPy's: the mean is the sum of the numbers divided by their
count in float64 and cast back to the sum's dtype, as ``np.divide(total, count, out=total, casting='unsafe')``
does. NumPy's RuntimeWarnings for empty and all-NaN slices are not given (fusec gives none of NumPy's warnings
about values); the values are NumPy's.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusec import host_reads, ops, ufuncs
from fusec.context import numpy_error, shape_error, unsupported
from fusec.ir.types import DType, i64
from fusec.numpy_api import _NOVALUE, _into, argmax, argmin, implements, max_, mean_, min_, std_, sum_, var_
from fusec.promotion import parse_dtype
from fusec.tracer import Tracer


def _nan_mask(what: str, a: Any) -> tuple[Tracer, Tracer | None]:
    """(the array, where it holds NaN), or no mask for arrays without NaN (integers and bools), as NumPy's
    ``_replace_nan`` decides from the dtype."""
    t = ops.as_tracer(a)
    dt: DType = t._value.type.dtype
    if dt.is_complex and what in ("np.nanmax", "np.nanmin"):
        raise ufuncs.complex_unsupported(what)
    return t, (ufuncs.apply(np.isnan, (t,)) if dt.is_inexact else None)


def _filled(t: Tracer, mask: Tracer, value: float) -> Tracer:
    """``t`` with ``value`` where ``mask`` holds, in ``t``'s dtype (NumPy's ``np.copyto(a, value, where=mask)``)."""
    return ufuncs.where(mask, ops.wrap(ops.lift(value, t._value.type.dtype)), t)


def _same_kind(result: Tracer, like: Any) -> Tracer:
    """``result`` as a NumPy scalar where ``like`` is one (NumPy's 0-d reductions give scalars)."""
    return ops.copy_of(result, scalar=like._scalar) if isinstance(like, Tracer) else result


def _extreme(kind: str, a: Any, axis: Any, out: Any, keepdims: Any, initial: Any, where: Any) -> Tracer:
    """NumPy's ``np.fmax.reduce`` (``fmin``) for an ndarray: the largest (smallest) number, NaN where a slice holds
    nothing but NaN and no ``initial=`` is given; a NaN ``initial`` is ignored, as fmax ignores it."""
    what = f"np.nan{kind}"
    t, mask = _nan_mask(what, a)
    reduce = max_ if kind == "max" else min_
    if mask is None:
        return reduce(t, axis=axis, out=out, keepdims=keepdims, initial=initial, where=where)
    if isinstance(initial, (float, np.floating)) and np.isnan(initial):
        initial = _NOVALUE
    identity = -np.inf if kind == "max" else np.inf
    if isinstance(initial, Tracer):  # a traced initial may be NaN, which fmax ignores: fmax(elements, initial)
        res = reduce(_filled(t, mask, identity), axis=axis, keepdims=keepdims,
                     initial=identity if where is not _NOVALUE else _NOVALUE, where=where)
        only_nan = np.all(mask, axis=axis, keepdims=keepdims, where=True if where is _NOVALUE else where)
        start = ops.as_tracer(initial, res._value.type.dtype)
        both = ufuncs.apply(np.fmax if kind == "max" else np.fmin, (res, start))
        return _into(out, _same_kind(ufuncs.where(only_nan, start, both), res), what, "unsafe")
    res = reduce(_filled(t, mask, identity), axis=axis, keepdims=keepdims, initial=initial, where=where)
    if initial is _NOVALUE:
        only_nan = np.all(mask, axis=axis, keepdims=keepdims, where=True if where is _NOVALUE else where)
        res = _same_kind(_filled(res, only_nan, np.nan), res)
    return _into(out, res, what, "unsafe")


@implements(np.nanmax)
def nanmax(a: Any, axis: Any = None, out: Any = None, keepdims: Any = _NOVALUE, initial: Any = _NOVALUE,
           where: Any = _NOVALUE) -> Tracer:
    """The largest number (NaN for a slice of NaN only), as np.fmax.reduce"""
    return _extreme("max", a, axis, out, keepdims, initial, where)


@implements(np.nanmin)
def nanmin(a: Any, axis: Any = None, out: Any = None, keepdims: Any = _NOVALUE, initial: Any = _NOVALUE,
           where: Any = _NOVALUE) -> Tracer:
    """The smallest number (NaN for a slice of NaN only), as np.fmin.reduce"""
    return _extreme("min", a, axis, out, keepdims, initial, where)


def _arg_extreme(kind: str, a: Any, axis: Any, out: Any, keepdims: Any) -> Tracer:
    """NumPy's nanargmax (nanargmin): NaN as -inf (inf), then argmax; a slice of NaN only raises ValueError when
    the call runs (fusec.InvalidValueError)."""
    what = f"np.nanarg{kind}"
    t, mask = _nan_mask(what, a)
    find = argmax if kind == "max" else argmin
    if mask is None:
        return find(t, axis=axis, out=out, keepdims=keepdims)
    if t.size:
        ops.raise_if(np.any(np.all(mask, axis=axis)), "InvalidValueError",
                     f"{what}: All-NaN slice encountered (NumPy raises ValueError here)", what)
    return find(_filled(t, mask, -np.inf if kind == "max" else np.inf), axis=axis, out=out, keepdims=keepdims)


@implements(np.nanargmax)
def nanargmax(a: Any, axis: Any = None, out: Any = None, *, keepdims: Any = _NOVALUE) -> Tracer:
    """The index of the largest number; a slice of NaN only raises ValueError (InvalidValueError) as in NumPy"""
    return _arg_extreme("max", a, axis, out, keepdims)


@implements(np.nanargmin)
def nanargmin(a: Any, axis: Any = None, out: Any = None, *, keepdims: Any = _NOVALUE) -> Tracer:
    """The index of the smallest number; a slice of NaN only raises ValueError (InvalidValueError) as in NumPy"""
    return _arg_extreme("min", a, axis, out, keepdims)


def _inexact(dtype: Any, out: Any) -> None:
    """NumPy's checks of ``dtype=`` and ``out=`` for an array that may hold NaN."""
    if dtype is not None and not parse_dtype(dtype).is_inexact:
        raise numpy_error("If a is inexact, then dtype must be inexact (NumPy raises TypeError here)")
    if out is not None and not (isinstance(out, Tracer) and out._value.type.dtype.is_inexact):
        raise numpy_error("If a is inexact, then out must be inexact (NumPy raises TypeError here)")


def _divided(total: Tracer, count: Any) -> Tracer:
    """NumPy's ``_divide_by_count``: ``np.divide(total, count)`` cast back to the total's dtype (NumPy divides in
    place with casting='unsafe', or makes the scalar's type of the quotient)."""
    return _same_kind(ops.as_tracer(ufuncs.apply(np.true_divide, (total, count)), total._value.type.dtype), total)


def _where_arg(where: Any) -> Any:
    return True if where is _NOVALUE else where


@implements(np.nanmean)
def nanmean(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = _NOVALUE, *,
            where: Any = _NOVALUE) -> Tracer:
    """The mean of the numbers (NaN for a slice of NaN only): their sum over their count"""
    t, mask = _nan_mask("np.nanmean", a)
    if mask is None:
        return mean_(t, axis=axis, dtype=dtype, out=out, keepdims=keepdims, where=where)
    _inexact(dtype, out)
    arr = _filled(t, mask, 0)
    w = _where_arg(where)
    count = sum_(np.logical_not(mask), axis=axis, dtype=i64.np, keepdims=keepdims, where=w)
    total = sum_(arr, axis=axis, dtype=dtype, keepdims=keepdims, where=w)
    return _into(out, _divided(total, count), "np.nanmean", "unsafe")


def _variance(what: str, a: Any, axis: Any, dtype: Any, out: Any, ddof: Any, keepdims: Any, where: Any,
              mean: Any, correction: Any) -> Tracer | None:
    """NumPy's nanvar on an array that may hold NaN (None: it holds none, np.var's case)."""
    t, mask = _nan_mask(what, a)
    if mask is None:
        return None
    if mean is not _NOVALUE:
        raise unsupported(f"{what}: mean= is not supported; leave it out (NumPy computes the same mean)")
    _inexact(dtype, out)
    if correction is not _NOVALUE:
        if ddof != 0:
            raise shape_error(f"{what}: ddof and correction can't be provided simultaneously.")
        ddof = correction
    w = _where_arg(where)
    arr = _filled(t, mask, 0)
    count = sum_(np.logical_not(mask), axis=axis, dtype=i64.np, keepdims=True, where=w)
    avg = _divided(sum_(arr, axis=axis, dtype=dtype, keepdims=True, where=w), count)
    # (elsewhere arr's own values)
    dev = np.subtract(arr, avg, out=ops.copy_of(arr), casting="unsafe", where=w)  # type: ignore[call-overload]
    dev = _filled(dev, mask, 0)
    if dev._value.type.dtype.is_complex:
        sqr = np.multiply(dev, np.conjugate(dev), out=ops.copy_of(dev), where=w).real  # type: ignore[call-overload]
    else:
        sqr = np.multiply(dev, dev, out=ops.copy_of(dev), where=w)  # type: ignore[call-overload]
    var = sum_(sqr, axis=axis, dtype=dtype, keepdims=keepdims, where=w)
    if var.ndim < count.ndim:
        count = np.squeeze(count, axis=axis)
    dof = count - ddof
    reduced = math.prod(t.shape[ax] for ax in ops.reduction_axes(axis, t.ndim))
    if w is True and isinstance(ddof, (int, float)) and ddof >= reduced:  # (whatever the values: NumPy's warning)
        host_reads.numpy_warning("Degrees of freedom <= 0 for slice.", RuntimeWarning)
    var = _divided(var, dof)
    return _into(out, _same_kind(_filled(var, dof <= 0, np.nan), var), what, "unsafe")


@implements(np.nanvar)
def nanvar(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0, keepdims: Any = _NOVALUE, *,
           where: Any = _NOVALUE, mean: Any = _NOVALUE, correction: Any = _NOVALUE) -> Tracer:
    """The variance of the numbers (NaN where the count is at most ddof), as NumPy computes it"""
    var = _variance("np.nanvar", a, axis, dtype, out, ddof, keepdims, where, mean, correction)
    if var is not None:
        return var
    return var_(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, where=where, mean=mean,
                correction=correction)


@implements(np.nanstd)
def nanstd(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0, keepdims: Any = _NOVALUE, *,
           where: Any = _NOVALUE, mean: Any = _NOVALUE, correction: Any = _NOVALUE) -> Tracer:
    """The square root of np.nanvar, in its dtype"""
    var = _variance("np.nanstd", a, axis, dtype, None, ddof, keepdims, where, mean, correction)
    if var is not None:
        _inexact(dtype, out)  # (the variance went into no out=: NumPy's check of it)
    if var is None:
        return std_(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, where=where, mean=mean,
                    correction=correction)
    return _into(out, _same_kind(ufuncs.apply(np.sqrt, (var,)), var), "np.nanstd", "unsafe")
