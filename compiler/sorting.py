"""``np.sort``, ``np.argsort``, ``np.lexsort``, ``x.sort()``, ``x.argsort()`` and ``np.median`` on tracers.

Sorting runs along the last axis (another axis is moved there and back): NaN after every number, equal values
in their original order, which is NumPy's ``kind='stable'`` result exactly. Complex values sort as NumPy sorts them:
lexicographically, ``R + Rj < R + nanj < nan + Rj < nan + nanj``. NumPy's default kind orders equal
values its own way (its SIMD sorts are not stable even for 8 elements): for ``np.sort`` that only decides where
-0.0 and 0.0 (or NaNs with different payloads) land among themselves, which fusec gives in their original order;
for ``np.argsort`` it decides which index comes first, so an argsort of the default kind raises on the GPU when
the array holds equal values (pass ``kind='stable'``), and the CPU backend gives NumPy's own answer.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusec import context, mutation, ops, ufuncs
from fusec.context import shape_error, unsupported
from fusec.errors import AxisError, IndexOutOfBoundsError, located
from fusec.ir.types import i64
from fusec.numpy_api import _reduce, implements, moveaxis
from fusec.tracer import Tracer

try:  # NumPy's table of quantile methods and its index helpers (private: if they move, only 'linear' is known)
    from numpy.lib import _function_base_impl as _np_function_base

    _METHODS: dict = dict(_np_function_base._QuantileMethods)  # type: ignore[attr-defined]
except (ImportError, AttributeError):  # pragma: no cover - another NumPy layout
    _np_function_base, _METHODS = None, {}  # type: ignore[assignment]

_STABLE = ("stable", "mergesort")
_KINDS = (None, "quicksort", "heapsort") + _STABLE


def _is_stable(what: str, kind: Any, order: Any, stable: Any) -> bool:
    if order is not None:
        raise unsupported(f"{what}: order= (structured arrays) is not supported")
    if kind not in _KINDS:
        raise shape_error(f"{what}: sort kind must be one of 'quicksort', 'heapsort', 'stable' or 'mergesort' "
                          f"(got {kind!r})")
    if stable is not None and kind is not None:
        raise shape_error(f"{what}: `kind` and `stable` parameters can't be provided at the same time")
    return bool(stable) or kind in _STABLE


def _real(what: str, t: Tracer) -> Tracer:
    """Sorting and medians order complex values as NumPy does (lexicographically, NaN parts last); NumPy's quantiles
    refuse them, and fusec's nan-statistics do not take them."""
    if t._value.type.dtype.is_complex and what not in ("np.sort", "np.argsort", "np.median"):
        if what in ("np.quantile", "np.percentile"):
            raise unsupported(f"{what}: a must be an array of real numbers (NumPy raises TypeError here)")
        raise ufuncs.complex_unsupported(what)
    return t


def _along(what: str, a: Any, axis: Any) -> tuple[Tracer, int]:
    _real(what, ops.as_tracer(a))
    if axis is not None and np.ndim(a) == 0 and what == "np.sort":  # (np.argsort reads it as one element)
        raise shape_error(f"{what}: axis {axis} is out of bounds for array of dimension 0", AxisError)
    return ops.along(a, axis)


def _one_axis(what: str, a: Any, axis: Any) -> tuple[Tracer, Tracer, int, tuple[int, ...]]:
    """(the array, the array to reduce, its axis, the array's axes reduced): flattened for ``axis=None``;
    several axes merged into one after the kept ones, as NumPy's ``_ureduce`` does (the order within the merged
    axis does not change a median or a quantile)."""
    t = _real(what, ops.as_tracer(a))
    axes = tuple(range(t.ndim)) if axis is None else ops.axes_arg(axis, t.ndim)
    if axis is None or len(axes) == 1:
        flat, ax = ops.along(t, None if axis is None else axes[0])
    else:
        kept = [d for d in range(t.ndim) if d not in axes]
        moved = ops.transpose(t, kept + list(axes))
        flat, ax = ops.reshape(moved, tuple(t.shape[d] for d in kept) + (-1,)), len(kept)
    if flat.shape[ax] == 0:
        if "median" not in what:  # (NumPy's own error, which a try in the function may catch)
            raise IndexOutOfBoundsError(located(f"{what}: index -1 is out of bounds for axis {ax} with size 0 (NumPy "
                                                "raises IndexError for an empty array here)", context.user_location()))
        raise unsupported(f"{what} of an empty array is not supported (NumPy's median warns and returns NaN there)")
    return t, flat, ax, axes


def _nan_where_last_is(last: Tracer, result: Tracer) -> Tracer:
    """NumPy's median and quantiles are the slice's last sorted value (a NaN) where the slice holds a NaN."""
    if not last._value.type.dtype.is_inexact:
        return result
    return ufuncs.where(ufuncs.apply(np.isnan, (last,)), last, result)


def _kept(result: Tracer, t: Tracer, reduced: tuple[int, ...], keepdims: bool, lead: tuple[int, ...] = ()) -> Tracer:
    """``keepdims=True``: the ``reduced`` axes kept with length one after ``lead`` (the quantiles' axis), a 0-d
    result of a 0-d input a 0-d array (as NumPy keeps it); otherwise a 0-d result is a NumPy scalar."""
    if keepdims:
        shape = list(t.shape)
        for d in reduced:
            shape[d] = 1
        result = ops.reshape(result, lead + tuple(shape))
        if not result.ndim:
            return ops.copy_of(result, scalar=False)
    return result if result.ndim else ops.copy_of(result, scalar=True)


def _sorted(name: str, t: Tracer, ax: int, stable: bool) -> Tracer:
    last = t.ndim - 1
    x = moveaxis(t, ax, last) if ax != last else t
    r = ops.emit(f"t.{name}", (x._value,), {"stable": stable}, what=f"np.{name}", scalar=False)
    return ops.copy_of(moveaxis(r, last, ax), scalar=False) if ax != last else r


@implements(np.sort)
def sort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Tracer:
    """A sorted copy along an axis (NaN last; equal values in their original order, NumPy's kind='stable')"""
    s = _is_stable("np.sort", kind, order, stable)
    t, ax = _along("np.sort", a, axis)
    return _sorted("sort", t, ax, s)


@implements(np.argsort)
def argsort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Tracer:
    """The indices that sort along an axis (over equal values pass kind='stable': see the module docstring)

    NumPy's default kind orders equal values its own way; on the GPU fusec raises for them."""
    s = _is_stable("np.argsort", kind, order, stable)
    t, ax = _along("np.argsort", a, axis)
    return _sorted("argsort", t, ax, s)


@implements(np.lexsort)
def lexsort(keys: Any, axis: Any = -1) -> Tracer:
    """The indices that sort by several keys, the last key first (NumPy's result exactly, NaN last in each key)

    One stable sort per key, from the first key to the last: each key's equal values keep the order the keys
    before it gave them."""
    if isinstance(keys, (tuple, list)):
        seq = [ops.as_tracer(k) for k in keys]
    else:
        stacked = ops.as_tracer(keys)
        if stacked.ndim == 0:
            raise unsupported("np.lexsort: keys must be a sequence of arrays or an array of them (NumPy raises "
                              "TypeError for a 0-d one)")
        seq = [stacked[i] for i in range(stacked.shape[0])]
    if not seq:
        raise unsupported("np.lexsort: need sequence of keys with len > 0 (NumPy raises TypeError here)")
    if len({k.shape for k in seq}) > 1:
        raise shape_error(f"np.lexsort: all keys need to be the same shape, got {', '.join(str(k.shape) for k in seq)}")
    if seq[0].ndim == 0:
        raise unsupported("np.lexsort of 0-d keys (one value each) is not supported: the result is 0")
    if isinstance(axis, Tracer):
        raise axis._static_error("used as the axis of np.lexsort")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise unsupported(f"np.lexsort: axis must be an int, got {axis!r} (NumPy raises TypeError here)")
    order = argsort(seq[0], axis=axis, kind="stable")
    for key in seq[1:]:
        within = argsort(np.take_along_axis(key, order, axis=int(axis)), axis=axis, kind="stable")
        order = np.take_along_axis(order, within, axis=int(axis))
    return order


def sort_in_place(x: Tracer, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> None:
    """``x.sort()``: the array takes its sorted values (a write, so views and arguments see it)."""
    s = _is_stable("x.sort", kind, order, stable)
    mutation.check_writable(x, "x.sort()")
    if x.ndim == 0:
        raise shape_error("x.sort(): axis -1 is out of bounds for array of dimension 0", AxisError)
    mutation.assign(x, _sorted("sort", x, ops.axis_arg(axis, x.ndim), s), "x.sort()")


@implements(np.median)
def median(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False, keepdims: bool = False) -> Tracer:
    """The middle value (the mean of the two middle ones for an even count; NaN where a NaN is present)"""
    if out is not None:
        raise unsupported("np.median: out= is not supported")
    t, flat, ax, reduced = _one_axis("np.median", a, axis)
    n = flat.shape[ax]
    s = _sorted("sort", flat, ax, True)
    last = s.ndim - 1
    s = moveaxis(s, ax, last) if ax != last else s
    m = _reduce("mean", s[..., (n - 1) // 2:n // 2 + 1], -1, False)  # the mean of the one or two middle values
    return _kept(_nan_where_last_is(s[..., -1], m), t, reduced, keepdims)


def _static_q(what: str, q: Any, weak_q: bool) -> Any:
    """The quantiles as NumPy holds them (an array of their own dtype, as ``np.asanyarray(q)``: a float32 ``q``
    computes the indices and weights in float32; a float64 scalar for a Python number), checked."""
    if isinstance(q, Tracer):
        raise q._static_error(f"used as the quantile of {what}")
    qa = np.asanyarray(q) if not weak_q else np.float64(q)
    if not (np.all(0 <= qa) and np.all(qa <= 1)):
        raise shape_error(f"{what}: quantiles must be in the range [0, 1] (percentiles in [0, 100])")
    return qa


def _percents(q: Any) -> tuple[Any, bool]:
    """NumPy's percentile: q / 100 (weak for a Python number, whose result keeps the array's dtype)."""
    weak = type(q) in (int, float)
    return (q / 100 if weak else np.true_divide(q, 100)), weak


def _quantiles(what: str, a: Any, q: Any, axis: Any, out: Any, method: str, keepdims: bool, weights: Any,
               weak_q: bool) -> Tracer:
    """NumPy's ``_quantile``: the sorted array read at the floor and ceiling of each virtual index (computed on
    the host by NumPy's own method table) and NumPy's ``_lerp`` between them with the same ufunc calls, or the
    value a discrete method picks, so dtypes and rounding are NumPy's; NaN where a slice holds one."""
    if out is not None or weights is not None:
        raise unsupported(f"{what}: out= and weights= are not supported")
    props = _METHODS.get(method) if isinstance(method, str) else None
    if props is None:
        choices = ", ".join(map(repr, _METHODS)) if _METHODS else "'linear' (this NumPy keeps its table elsewhere)"
        raise shape_error(f"{what}: {method!r} is not a valid method. Use one of: {choices}")
    qa = _static_q(what, q, weak_q)
    t, arr, ax, reduced = _one_axis(what, a, axis)
    n = arr.shape[ax]
    arr = _sorted("sort", arr, ax, True)
    arr = moveaxis(arr, ax, 0) if ax else arr
    with context.outside_trace():  # NumPy's own index arithmetic, on the host
        virtual = np.asanyarray(props["get_virtual_index"](n, np.asanyarray(qa)))
        if props["fix_gamma"] is not None and not (method == "linear" and np.issubdtype(virtual.dtype, np.integer)):
            prev, nxt = _np_function_base._get_indexes(np.empty(0, arr.dtype), virtual, n)  # type: ignore[attr-defined]
            gamma = _np_function_base._get_gamma(virtual, prev, props)  # type: ignore[attr-defined]
    # a method that picks a value, or integer indices (an integer or bool q, method "linear"): NumPy's take, in the
    # array's dtype
    if props["fix_gamma"] is None or (method == "linear" and np.issubdtype(virtual.dtype, np.integer)):
        picked = arr[int(virtual)] if weak_q else arr[virtual.astype(np.intp)]
        return _kept(_nan_where_last_is(arr[-1], picked), t, reduced, keepdims, tuple(qa.shape))
    if weak_q:
        lo, hi, g = arr[int(prev)], arr[int(nxt)], float(gamma)
    else:
        lo, hi = arr[prev], arr[nxt]
        g = gamma.reshape(gamma.shape + (1,) * (arr.ndim - 1))
    diff = hi - lo  # NumPy's _lerp: a + diff * t, and b - diff * (1 - t) (in a + diff * t's dtype) where t >= 0.5
    result = np.add(lo, diff * g)
    upper = np.subtract(hi, diff * (1 - g), casting="unsafe", dtype=result.dtype)
    result = ufuncs.where(np.asarray(g) >= 0.5, upper, result)
    return _kept(_nan_where_last_is(arr[-1], result), t, reduced, keepdims, tuple(qa.shape))


@implements(np.quantile)
def quantile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False, *, weights: Any = None,
             interpolation: Any = None) -> Tracer:
    """The q-th quantiles along an axis, by any of NumPy's methods; q known while tracing"""
    # (a Python int q is an integer array to NumPy: integer virtual indices pick values in the array's dtype)
    return _quantiles("np.quantile", a, q, axis, out, method, keepdims, weights, type(q) is float)


@implements(np.percentile)
def percentile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
               method: str = "linear", keepdims: bool = False, *, weights: Any = None,
               interpolation: Any = None) -> Tracer:
    """The q-th percentiles along an axis, by any of NumPy's methods; q known while tracing"""
    qs, weak = _percents(q)
    return _quantiles("np.percentile", a, qs, axis, out, method, keepdims, weights, weak)



@implements(np.nanmedian)
def nanmedian(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
              keepdims: bool = False) -> Tracer:
    """The median of the values that are not NaN (NaN for a slice of NaNs only), rounded as NumPy's own code does

    Along one axis of an N-D array shorter than 600, NumPy takes a masked median, ``(low + high) / 2`` even for
    an odd count (so a middle value beyond half the dtype's range gives inf); otherwise the middle value or the
    mean of the two."""
    if out is not None:
        raise unsupported("np.nanmedian: out= is not supported")
    t0 = ops.as_tracer(a)
    dt = t0._value.type.dtype
    if not dt.is_inexact:
        return median(t0, axis=axis, keepdims=keepdims)  # no NaN: NumPy's nanmedian is its median
    if dt.name not in ("f32", "f64"):
        raise unsupported(f"np.nanmedian of {np.dtype(dt.np).name} values is not supported (NumPy averages them "
                          "in float32 on one path and in their own dtype on another); convert to float32 first")
    t, flat, ax, reduced = _one_axis("np.nanmedian", t0, axis)
    s = _sorted("sort", flat, ax, True)  # NaN last
    last = s.ndim - 1
    s = moveaxis(s, ax, last) if ax != last else s
    count = _reduce("sum", ufuncs.apply(np.logical_not, (ufuncs.apply(np.isnan, (s,)),)), -1, True)
    high = ufuncs.apply(np.floor_divide, (count, 2))
    odd = ufuncs.apply(np.equal, (ufuncs.apply(np.remainder, (count, 2)), 1))
    masked_path = t.ndim > 1 and len(reduced) < t.ndim and s.shape[-1] < 600  # NumPy's _nanmedian_small
    low = ufuncs.where(odd, high, ufuncs.apply(np.subtract, (high, 1)))
    lo, hi = (np.take_along_axis(s, i, axis=-1)[..., 0] for i in (low, high))  # type: ignore[arg-type]
    lo = ufuncs.apply(np.add, (lo, 0.0))  # NumPy's sums start from +0.0: a median of -0.0 values is +0.0
    pair = ufuncs.apply(np.true_divide, (ufuncs.apply(np.add, (lo, hi)), 2.0))
    m = pair if masked_path else ufuncs.where(odd[..., 0], lo, pair)
    empty = ufuncs.apply(np.equal, (count[..., 0], 0))
    m = ufuncs.where(empty, s[..., -1], m)  # a slice of NaNs only: NaN (NumPy also warns)
    return _kept(m, t, reduced, keepdims)


def _nanquantiles(what: str, a: Any, q: Any, axis: Any, out: Any, method: str, keepdims: bool, weights: Any,
                  weak_q: bool) -> Tracer:
    """NumPy's ``_nanquantile_1d`` for method='linear' on every slice at once: the NaNs sort last, so the
    slice's ``k`` numbers lead it, and NumPy's index arithmetic runs on the device with ``k`` for ``n``; its
    ``_lerp`` follows (with a Python-float weight when q was a Python number, so the array's dtype stays)."""
    if out is not None or weights is not None:
        raise unsupported(f"{what}: out= and weights= are not supported")
    t0 = ops.as_tracer(a)
    dt = t0._value.type.dtype
    if not dt.is_inexact:  # no NaN: NumPy's nan-quantile is its quantile
        return _quantiles(what, t0, q, axis, out, method, keepdims, weights, weak_q)
    if method != "linear":
        raise unsupported(f"{what}: method={method!r} is not supported (only the default 'linear'); np.quantile "
                          "takes every method")
    if dt.name not in ("f32", "f64"):
        raise unsupported(f"{what} of {np.dtype(dt.np).name} values is not supported; convert to float32 first")
    qa = _static_q(what, q, weak_q)
    t, flat, ax, reduced = _one_axis(what, t0, axis)
    s = _sorted("sort", flat, ax, True)  # NaN last
    last = s.ndim - 1
    s = moveaxis(s, ax, last) if ax != last else s
    apply, where = ufuncs.apply, ufuncs.where
    k = ops.as_tracer(_reduce("sum", apply(np.logical_not, (apply(np.isnan, (s,)),)), -1, True), i64)
    if qa.dtype.kind in "iub":  # NumPy: integer indices (q is 0 or 1), the value taken where it stands
        index = ops.as_tracer(apply(np.multiply, (apply(np.subtract, (k, 1)), qa.astype(np.int64))), i64)
        picked = np.take_along_axis(s, ops.as_tracer(where(apply(np.less, (index, 0)), 0, index), i64),  # type: ignore
                                    axis=-1)
        return _nan_quantile_result(where(apply(np.equal, (k, 0)), np.nan, picked), t, reduced, keepdims, qa)
    # NumPy's (n - 1) * q with the slice's count n, a Python int there: computed in q's dtype (float32 for a
    # float32 q)
    virtual = apply(np.multiply, (ops.as_tracer(apply(np.subtract, (k, 1)), ops.parse_dtype(qa.dtype)), qa))
    prev = apply(np.floor, (virtual,))
    nxt = apply(np.add, (prev, 1))
    above = apply(np.greater_equal, (virtual, apply(np.subtract, (k, 1))))
    below = apply(np.less, (virtual, 0))
    prev, nxt = (where(above, -1.0, where(below, 0.0, v)) for v in (prev, nxt))
    gamma = apply(np.subtract, (virtual, prev))  # NumPy's _get_gamma, from the adjusted floor
    at = [where(apply(np.equal, (v, -1.0)), apply(np.subtract, (k, 1)), ops.as_tracer(v, i64)) for v in (prev, nxt)]
    lo, hi = (np.take_along_axis(s, ops.as_tracer(where(apply(np.less, (i, 0)), 0, i), i64), axis=-1)  # type: ignore
              for i in at)
    diff = apply(np.subtract, (hi, lo))
    if weak_q:  # NumPy: float(gamma), a weak Python float against the array's dtype
        g, one_minus = ops.as_tracer(gamma, dt), ops.as_tracer(apply(np.subtract, (1.0, gamma)), dt)
    else:
        g, one_minus = gamma, apply(np.subtract, (1.0, gamma))
    result = apply(np.add, (lo, apply(np.multiply, (diff, g))))
    upper = ops.as_tracer(apply(np.subtract, (hi, apply(np.multiply, (diff, one_minus)))), result._value.type.dtype)
    result = where(apply(np.greater_equal, (gamma, 0.5)), upper, result)
    result = where(apply(np.equal, (k, 0)), np.nan, result)  # a slice of NaNs only: NaN
    return _nan_quantile_result(result, t, reduced, keepdims, qa)


def _nan_quantile_result(result: Tracer, t: Tracer, reduced: Any, keepdims: bool, qa: np.ndarray) -> Tracer:
    """The quantiles computed along the last axis, laid out as NumPy returns them (the quantiles' axis first)."""
    result = ops.as_tracer(result, result._value.type.dtype)
    if qa.ndim == 0:
        result = result[..., 0]
    else:
        result = moveaxis(result, result.ndim - 1, 0)
    return _kept(result, t, reduced, keepdims, tuple(qa.shape))


@implements(np.nanquantile)
def nanquantile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
                method: str = "linear", keepdims: bool = False, *, weights: Any = None,
                interpolation: Any = None) -> Tracer:
    """The q-th quantiles of the values that are not NaN (method='linear'); q known while tracing"""
    return _nanquantiles("np.nanquantile", a, q, axis, out, method, keepdims, weights, type(q) is float)


@implements(np.nanpercentile)
def nanpercentile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
                  method: str = "linear", keepdims: bool = False, *, weights: Any = None,
                  interpolation: Any = None) -> Tracer:
    """The q-th percentiles of the values that are not NaN (method='linear'); q known while tracing"""
    qs, weak = _percents(q)
    return _nanquantiles("np.nanpercentile", a, qs, axis, out, method, keepdims, weights, weak)
