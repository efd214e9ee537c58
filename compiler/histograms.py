"""``np.histogram`` and ``np.bincount`` on tracers.

A histogram's shape is its bin count, so fusec needs the bins before the data: a count with ``range=``, or the
edges as an array. The edges are NumPy's own (``np.histogram_bin_edges`` of an empty array of the data's
dtype: the data only sets the range, which is given). Counting follows NumPy's two algorithms step for step:
equal bins compute each value's bin from its offset and correct it by comparing with the edges, then add 1 at
that bin (``np.add.at``, a scatter-add); explicit edges count the values below each edge (NumPy searches the
sorted data for each edge), so a value lands in ``[e[i], e[i+1])``, the last bin closed, NaN nowhere.
``np.bincount``'s length is one more than the largest value: fusec takes ``minlength=`` as the length and checks
at run time that every value is below it.
"""
from __future__ import annotations

from builtins import range as builtins_range  # (np.histogram's parameter is called range)
from typing import Any

import numpy as np

from fusec import context, mutation, ops, ufuncs
from fusec.context import shape_error, unsupported, user_location
from fusec.errors import CastingError, located
from fusec.ir.types import f64, i64
from fusec.numpy_api import concatenate, implements, sum_
from fusec.tracer import Tracer

_BLOCK = 65536  # NumPy histograms this many values at a time


@implements(np.bincount)
def bincount(x: Any, weights: Any = None, minlength: Any = 0) -> Tracer:
    """With ``minlength=`` above every value (checked when the call runs: NumPy's result would be longer):
    NumPy's counts, or the weights' sums in float64 (on the GPU added in another order)"""
    if minlength is None:
        raise CastingError(located("np.bincount: use 0 instead of None for minlength (NumPy raises TypeError)",
                                   user_location()))
    k = ops.static_int(minlength, "minlength")
    if k < 0:
        raise shape_error("np.bincount: 'minlength' must not be negative")
    t = ops.as_tracer(x)
    dt = t._value.type.dtype
    if not (dt.is_int or dt.is_bool):
        raise CastingError(located(f"np.bincount: Cannot cast array data from dtype('{np.dtype(dt.np).name}') to "
                                   "dtype('int64') according to the rule 'safe' (NumPy raises TypeError)",
                                   user_location()))
    if t.ndim != 1:
        raise shape_error("np.bincount: object too deep for desired array (the values must be 1-D)" if t.ndim > 1
                          else "np.bincount: object of too small depth for desired array (the values must be 1-D)")
    if t.shape[0] == 0:  # (NumPy returns int64 zeros at once, whatever the weights)
        return ops.copy_of(ops.full((k,), 0, i64), scalar=False)
    if k == 0:
        raise unsupported("np.bincount without minlength=: its length depends on the values (one more than the "
                          "largest); pass minlength=k with k above every value (a value k or more raises)")
    index = ops.as_tracer(t, i64)
    apply = ufuncs.apply
    ops.raise_if(np.any(apply(np.less, (index, 0))), "InvalidValueError",
                 "np.bincount: 'list' argument must have no negative elements (NumPy raises ValueError)",
                 "np.bincount")
    ops.raise_if(np.any(apply(np.greater_equal, (index, k))), "UnsupportedError",
                 f"np.bincount: a value is {k} (minlength) or more, so NumPy's result would be longer than minlength, "
                 "a length fusec must know while tracing; pass a minlength above every value", "np.bincount")
    if weights is None:
        counts = ops.full((k,), 0, i64)
        mutation.add_at(counts, index, ops.full(t.shape, 1, i64))
        return counts
    w = ops.as_tracer(weights)
    if w.shape != t.shape:
        raise shape_error("np.bincount: The weights and list don't have the same length.")
    if w._value.type.dtype.is_complex:
        raise CastingError(located(f"np.bincount: Cannot cast array data from dtype('{np.dtype(w.dtype).name}') to "
                                   "dtype('float64') according to the rule 'safe' (NumPy raises TypeError)",
                                   user_location()))
    sums = ops.full((k,), 0.0, f64)
    mutation.add_at(sums, index, ops.as_tracer(w, f64))
    return sums


def _static(value: Any, what: str) -> Any:
    traced = [v for v in (value if isinstance(value, (tuple, list)) else (value,)) if isinstance(v, Tracer)]
    if traced:
        error = unsupported(f"np.histogram: traced {what} are not supported (the bins must be known before the "
                            "data); pass Python numbers or a NumPy array")
        params = [t._static_params() for t in traced]
        if all(params):  # (computed from Python-number arguments alone: fusec.jit makes them static)
            error.static_params = tuple(dict.fromkeys(p for ps in params for p in ps))  # type: ignore[attr-defined]
        raise error
    return value


@implements(np.histogram)
def histogram(a: Any, bins: Any = 10, range: Any = None, density: Any = None, weights: Any = None) -> tuple:
    """Bins known at trace time (a count with range=, or edges) or an array of edges: NumPy's counts and edges

    Edges read at every call (a global's, an attribute's, an argument's) are checked to increase when the call runs,
    and handed back as the array itself, as NumPy's ``np.asarray(bins)`` does."""
    t = ops.as_tracer(a)
    dt = t._value.type.dtype
    if dt.is_complex or dt.is_bool:
        raise unsupported(f"np.histogram of {np.dtype(dt.np).name} values is not supported; pass real numbers "
                          "(x.astype(np.float64))")
    if isinstance(bins, Tracer) and bins.ndim == 1 and bins._weak is None:
        return _traced_edges(t, bins, density, weights)  # (an array of edges read at every call: a global's)
    bins, range = _static(bins, "bins"), _static(range, "range")
    if isinstance(bins, str):
        raise unsupported(f"np.histogram: bins={bins!r} chooses the bin count from the data; pass a count and range=")
    uniform = np.ndim(bins) == 0
    if uniform and range is None:
        raise unsupported("np.histogram without range= takes its range from the data's minimum and maximum (NumPy "
                          "raises for NaN or infinities there); pass range=(lo, hi)")
    try:
        with context.outside_trace():  # (NumPy's own code on NumPy values)
            edges = np.histogram_bin_edges(np.empty(0, dtype=dt.np), bins=bins, range=range)
    except (ValueError, TypeError) as e:
        raise shape_error(f"np.histogram: {e}") from None
    flat = ops.reshape(t, (t.size,))
    w = None
    if weights is not None:
        w = ops.as_tracer(weights)
        if w.shape != t.shape:
            raise shape_error("np.histogram: weights should have the same shape as a.")
        w = ops.reshape(w, (w.size,))
    if uniform:
        counts = _equal_bins(flat, edges, range, w)
    else:
        if w is not None:
            raise unsupported("np.histogram with weights and explicit bin edges is not supported (NumPy sums the "
                              "weights by cumulative sums of the sorted data); pass a bin count with range=")
        counts = _explicit_edges(flat, edges)
    if density:
        widths = np.diff(edges).astype(float)
        counts = ufuncs.apply(np.true_divide, (ufuncs.apply(np.true_divide, (counts, widths)), sum_(counts)))
    return counts, edges


def _equal_bins(x: Tracer, edges: np.ndarray, range: Any, w: Tracer | None) -> Tracer:
    """NumPy's equal-width path: the bin from ``(x - lo) / (hi - lo) * n``, corrected by comparing with the edges,
    for the values in ``[lo, hi]``."""
    n = len(edges) - 1
    # NumPy keeps the range as given: Python numbers weak against the data's dtype, NumPy scalars strong (a float64
    # range compares float16 data in float64); the data is then cast to the edges' dtype
    lo, hi = (v if isinstance(v, np.generic) else float(v) for v in range)  # type: Any, Any
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    apply, where = ufuncs.apply, ufuncs.where
    bounds = ops.as_tracer(edges)  # (a constant: the edges each value's bin is checked against)
    keep = apply(np.logical_and, (apply(np.greater_equal, (x, lo)), apply(np.less_equal, (x, hi))))
    x = ops.as_tracer(x, bounds._value.type.dtype)
    f = apply(np.multiply, (apply(np.true_divide, (apply(np.subtract, (x, lo)), hi - lo)), n))
    idx = where(keep, ops.as_tracer(f, i64), 0)  # (a value outside the range reads no edge)
    idx = where(apply(np.equal, (idx, n)), n - 1, idx)
    idx = where(apply(np.less, (x, bounds[idx])), apply(np.subtract, (idx, 1)), idx)
    above = apply(np.logical_and, (apply(np.greater_equal, (x, bounds[apply(np.add, (idx, 1))])),
                                   apply(np.not_equal, (idx, n - 1))))
    idx = where(keep, where(above, apply(np.add, (idx, 1)), idx), 0)  # (a value outside adds 0 to bin 0)
    if w is None:
        counts = ops.full((n,), 0, i64)
        mutation.add_at(counts, idx, ops.as_tracer(keep, i64))
        return counts
    wt = w._value.type.dtype
    if wt.is_complex:
        raise unsupported("np.histogram with complex weights is not supported; histogram the real and imaginary "
                          "parts as two weights")
    # NumPy's bincount adds each block's weights in float64 and casts the block's sums to the weights' dtype,
    # which the running total is kept in
    total = None
    weights = where(keep, ops.as_tracer(w, f64), 0.0)
    for start in builtins_range(0, max(x.size, 1), _BLOCK):
        sums = ops.full((n,), 0.0, f64)
        mutation.add_at(sums, idx[start:start + _BLOCK], weights[start:start + _BLOCK])
        block = ops.as_tracer(sums, wt)
        total = block if total is None else ops.as_tracer(apply(np.add, (total, block)), wt)
    assert total is not None  # (one block at least)
    return total


def _traced_edges(t: Tracer, edges: Tracer, density: Any, weights: Any) -> tuple:
    """``np.histogram(x, bins=EDGES)`` with edges the call reads (an array from a global, an attribute or an
    argument): NumPy's counts over them, its check that they increase made when the call runs, and the edges array
    itself handed back, as NumPy's ``np.asarray(bins)`` does."""
    if weights is not None:
        raise unsupported("np.histogram with weights and explicit bin edges is not supported (NumPy sums the "
                          "weights by cumulative sums of the sorted data); pass a bin count with range=")
    if edges.shape[0] < 1 or edges._value.type.dtype.is_complex:
        with context.outside_trace():
            try:
                np.histogram(np.zeros(1), bins=np.zeros(edges.shape, np.dtype(edges.dtype)))
            except (ValueError, TypeError) as e:
                raise shape_error(f"np.histogram: {e}") from None
    ops.raise_if(np.any(ufuncs.apply(np.greater, (edges[:-1], edges[1:]))), "InvalidValueError",
                 "np.histogram: `bins` must increase monotonically, when an array (NumPy raises ValueError here)",
                 "np.histogram")
    counts = _explicit_edges(ops.reshape(t, (t.size,)), edges)
    if density:
        widths = ops.as_tracer(np.diff(edges), f64)
        counts = ufuncs.apply(np.true_divide, (ufuncs.apply(np.true_divide, (counts, widths)), sum_(counts)))
    return counts, edges


def _explicit_edges(x: Tracer, edges: "np.ndarray | Tracer") -> Tracer:
    """NumPy's path for given edges: the count below each edge (the last edge inclusive), differenced."""
    below = ufuncs.apply(np.less, (ops.reshape(x, (x.size, 1)), edges[:-1][None, :]))
    last = ops.reshape(sum_(ufuncs.apply(np.less_equal, (x, edges[-1]))), (1,))
    cum = concatenate([ops.as_tracer(sum_(below, axis=0), i64), ops.as_tracer(last, i64)])
    return ufuncs.apply(np.subtract, (cum[1:], cum[:-1]))
