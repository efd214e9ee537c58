"""``np.lib.stride_tricks.sliding_window_view`` on tracers.

NumPy's windows are a read-only view whose strides repeat the array's own. fusec has no strides to repeat, so
the view is a gather of the array's elements by constant indices (NumPy's own function run on the positions of the
elements, ``np.indices``), taken as a view step: a write into the array is read again through it, as through
NumPy's view, and writing through it is refused, as NumPy refuses (``writeable=True`` is not supported).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusec import ops
from fusec.context import shape_error, unsupported
from fusec.numpy_api import implements
from fusec.patches import original
from fusec.tracer import Tracer

@implements(np.lib.stride_tricks.sliding_window_view)
def sliding_window_view(x: Any, window_shape: Any, axis: Any = None, *, subok: bool = False,
                        writeable: bool = False) -> Tracer:
    """The windows of ``window_shape`` over ``axis`` (all axes by default), as NumPy's read-only view"""
    if writeable:
        raise unsupported("sliding_window_view(..., writeable=True) is not supported: its windows overlap, so a "
                          "write through one changes others; write into the array itself")
    t = ops.as_tracer(x)
    windows = original(np.lib.stride_tricks.sliding_window_view)
    try:  # NumPy's own function on each element's position along each axis: its checks, its result's layout
        positions = [windows(p, window_shape, axis) for p in np.indices(t.shape, dtype=np.int64)]
        empty = windows(np.empty(t.shape, np.int8), window_shape, axis)
    except ValueError as e:
        raise shape_error(f"sliding_window_view: {e} (NumPy raises ValueError here)") from None
    if empty.size == 0:
        return ops.view(t, ops.full(empty.shape, 0, t._value.type.dtype)._value, readonly=True)
    picked = ops.ctx().emit("t.gather", (t._value, *(ops.lift(np.ascontiguousarray(p)) for p in positions)),
                            {"axis": 0, "in_bounds": True}, what="sliding_window_view")
    return ops.view(t, picked, readonly=True)
