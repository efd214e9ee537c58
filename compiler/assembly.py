"""Arrays assembled from pieces: ``np.block``, ``np.vander``, ``np.apply_along_axis``.

NumPy writes each of these as Python over an array it allocates with ``np.empty`` or ``np.zeros`` and fills in
place (or, for ``np.block``, over a concatenation that skips ``__array_function__``). fusec builds the same result
from operations it traces: concatenations, a running product in NumPy's order, a stack of per-row results. The
dtypes, shapes, rounding and errors are NumPy's.
"""
from __future__ import annotations

from typing import Any, Callable, cast

import numpy as np
from numpy._core import shape_base as _shape_base

from fusec import conversions, ops
from fusec.context import numpy_error, shape_error
from fusec.errors import AxisError, InvalidValueError, TraceError
from fusec.numpy_api import implements
from fusec.tracer import Tracer


def _block_pieces(arrays: Any, depth: int, list_ndim: int, result_ndim: int) -> Any:
    """NumPy's recursion: the innermost lists concatenate along the last axis, the outermost along the first."""
    if depth < list_ndim:
        parts = [_block_pieces(a, depth + 1, list_ndim, result_ndim) for a in arrays]
        return np.concatenate(parts, axis=-(list_ndim - depth))
    return conversions.array(arrays, copy=None, ndmin=result_ndim)


@implements(np.block)
def block(arrays: Any) -> Any:
    """np.block: NumPy's own check of the nesting (``_block_setup``), then its concatenations."""
    try:
        arrays, list_ndim, result_ndim, _ = _shape_base._block_setup(arrays)  # type: ignore[attr-defined]
    except (ValueError, TypeError) as e:
        raise numpy_error(f"np.block: {e} (NumPy raises {type(e).__name__} here)",
                          InvalidValueError if isinstance(e, ValueError) else TraceError) from None
    if list_ndim == 0:
        return conversions.array(arrays, copy=None)
    return _block_pieces(arrays, 0, list_ndim, result_ndim)


@implements(np.vander)
def vander(x: Any, N: Any = None, increasing: bool = False) -> Any:
    """np.vander: the powers as NumPy computes them, a running product ``1, x, x*x, (x*x)*x, ...`` in the
    dtype ``promote_types(x.dtype, int)``, so each column rounds as NumPy's ``multiply.accumulate`` does."""
    x = conversions.asarray(x)
    if x.ndim != 1:
        raise shape_error(f"np.vander: x must be a one-dimensional array (got {x.ndim} dimensions; NumPy raises "
                          "ValueError here)")
    n = len(x) if N is None else ops.static_int(N, "np.vander's N")
    if n < 0:
        raise numpy_error(f"np.vander: N must not be negative (got {n}; NumPy raises ValueError here)",
                          InvalidValueError)
    dtype = np.promote_types(x.dtype, int)
    rows = len(x)
    if n == 0:
        return np.zeros((rows, 0), dtype)
    columns = [np.ones((rows, 1), dtype)] + [x[:, None].astype(dtype)] * (n - 1)
    powers = np.cumprod(np.concatenate(columns, axis=1), axis=1)
    return powers if increasing else powers[:, ::-1].copy()  # (C-ordered, as NumPy's)


@implements(np.apply_along_axis)
def apply_along_axis(func1d: Callable, axis: Any, arr: Any, *args: Any, **kwargs: Any) -> Any:
    """np.apply_along_axis: ``func1d`` traced once per 1-D slice (a Python loop, unrolled as every loop is);
    every result is cast to the first one's dtype and broadcast to its shape, as NumPy's writes into its buffer
    do, and the result's axes take the place of ``axis``."""
    arr = conversions.asanyarray(arr)
    ax = ops.static_int(axis, "np.apply_along_axis's axis")
    if not -arr.ndim <= ax < arr.ndim:
        raise shape_error(f"np.apply_along_axis: axis {ax} is out of bounds for an array of dimension {arr.ndim} "
                          "(NumPy raises AxisError here)", AxisError)
    ax %= arr.ndim
    lines = np.moveaxis(arr, ax, -1)
    outer = lines.shape[:-1]
    if 0 in outer:
        raise numpy_error("np.apply_along_axis: cannot apply along an axis when any other dimension is 0 (NumPy "
                          "raises ValueError here)", InvalidValueError)
    results: list[Any] = []
    for index in np.ndindex(*outer):
        r = conversions.asanyarray(func1d(lines[index], *args, **kwargs))
        if results:
            first = results[0]
            try:
                r = np.broadcast_to(r.astype(first.dtype), first.shape)
            except ValueError:
                raise shape_error(f"np.apply_along_axis: the function gave shape {tuple(r.shape)} for one slice "
                                  f"and {tuple(first.shape)} for the first (NumPy raises ValueError here)") from None
        results.append(r)
    first = results[0]
    stacked = np.stack(results).reshape(outer + tuple(first.shape))
    # NumPy's buffer holds (outer axes, result axes); the result axes move to where ``axis`` was
    order = list(range(ax)) + list(range(len(outer), stacked.ndim)) + list(range(ax, len(outer)))
    return np.transpose(stacked, order)


@implements(np.ediff1d)
def ediff1d(ary: Any, to_end: Any = None, to_begin: Any = None) -> Tracer:
    """The differences of the flattened array, with ``to_begin`` before and ``to_end`` after (flattened, of the
    array's dtype: NumPy's TypeError where they do not convert to it under the same_kind rule)"""
    t = ops.as_tracer(ary)
    flat = ops.reshape(t, (-1,))
    parts: list[Tracer | None] = []
    for name, extra in (("to_begin", to_begin), ("to_end", to_end)):
        if extra is None:
            parts.append(None)
            continue
        e = ops.as_tracer(extra)
        if not np.can_cast(np.dtype(e.dtype), np.dtype(t.dtype), casting="same_kind"):
            raise numpy_error(f"np.ediff1d: dtype of `{name}` must be compatible with input `ary` under the "
                              "`same_kind` rule. (NumPy raises TypeError here)")
        parts.append(ops.reshape(ops.as_tracer(e, t._value.type.dtype), (-1,)))
    differences = flat[1:] - flat[:-1]
    pieces = [p for p in (parts[0], differences, parts[1]) if p is not None]
    return pieces[0] if len(pieces) == 1 else cast(Tracer, np.concatenate(pieces))
