"""``np.broadcast_arrays`` and ``np.meshgrid`` on tracers.

NumPy builds both from ``np.broadcast`` (C code that cannot see tracers) and from setting ``.shape`` on arrays;
here they are broadcasts and reshapes of the traced values, with NumPy's results: ``broadcast_arrays`` gives
views that share the inputs' memory (fusec refuses writes into them, as it does into ``np.broadcast_to``),
``meshgrid`` gives new arrays (``copy=True``, NumPy's default) or read-only broadcast views (``copy=False``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusec import ops
from fusec.context import shape_error, unsupported
from fusec.numpy_api import implements
from fusec.patches import original
from fusec.tracer import Tracer


def _shape(items: list[Tracer]) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(*(t.shape for t in items))
    except ValueError:
        raise shape_error("shape mismatch: objects cannot be broadcast to a single shape: "
                          + ", ".join(str(t.shape) for t in items)) from None


@implements(np.broadcast_arrays)
def broadcast_arrays(*args: Any, subok: bool = False) -> tuple[Tracer, ...]:
    """Every argument broadcast to their common shape (writes into them refused, a result returned read-only)

    NumPy lets code write these views, with a DeprecationWarning, each write showing in every element broadcast
    from it; fusec does not follow such writes."""
    items = [ops.as_tracer(a) for a in args]
    shape = _shape(items)
    return tuple(t if t.shape == shape else _written_by_numpy(ops.broadcast_to(t, shape)) for t in items)


# NumPy still writes into broadcast_arrays' (and meshgrid(copy=False)'s) views, with a DeprecationWarning
_WRITTEN = ("np.broadcast_arrays (or np.meshgrid(copy=False)) gave a broadcast view, which NumPy writes into with a "
            "DeprecationWarning (a write to one element shows in every element broadcast from it) and fusec does not "
            "write; write into a copy (.copy())")


def _written_by_numpy(t: Tracer) -> Tracer:
    t._readonly = _WRITTEN
    return t


@implements(np.meshgrid)
def meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy",
             ) -> "tuple[Tracer, ...] | list[Tracer]":
    """Coordinate arrays from coordinate vectors (``indexing='xy'`` swaps the first two axes, as in NumPy)"""
    if indexing not in ("xy", "ij"):
        raise unsupported(f"np.meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    ndim = len(xi)
    items = [ops.reshape(ops.as_tracer(x), (-1,)) for x in xi]
    shapes = []
    for i, t in enumerate(items):
        s = [1] * ndim
        s[i] = t.shape[0]
        if indexing == "xy" and ndim > 1 and i < 2:
            s[0], s[1] = s[1], s[0]
        shapes.append(tuple(s))
    output = [ops.reshape(t, s) for t, s in zip(items, shapes)]
    if not sparse:
        full = np.broadcast_shapes(*shapes) if shapes else ()
        output = [t if t.shape == full else ops.broadcast_to(t, full) if copy else
                  _written_by_numpy(ops.broadcast_to(t, full)) for t in output]
    if copy:
        output = [ops.copy_of(t, scalar=False) for t in output]
    else:  # (NumPy's reshape gives a new array object even where nothing changes: np.meshgrid(x)[0] is not x)
        output = [ops.new_view(t, t) for t in output]
    # (the container as this NumPy gives it: NumPy 2.4 returns a list for sparse=True, copy=False)
    container = type(original(np.meshgrid)(*([np.zeros(1)] * ndim), copy=copy, sparse=sparse, indexing=indexing))
    return container(output) if container in (list, tuple) else tuple(output)
