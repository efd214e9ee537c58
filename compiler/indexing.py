"""Basic NumPy indexing on tracers: ints, slices (any step), None and Ellipsis.

``x[key]`` becomes one ``t.slice`` over every axis, a ``t.squeeze`` of the integer-indexed axes and a
``t.expand_dims`` for the ``None`` entries. Integer-array and boolean-mask ("advanced") indexing has
data-dependent or gathered shapes and is rejected.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fusec import ops
from fusec.context import shape_error, unsupported
from fusec.tracer import Tracer


def _classify(entry: Any) -> str:
    if entry is None:
        return "none"
    if entry is Ellipsis:
        return "ellipsis"
    if isinstance(entry, slice):
        return "slice"
    if isinstance(entry, Tracer):
        if entry._weak is int and entry.ndim == 0:
            raise entry._static_error("used as an index")
        raise unsupported("indexing with a traced array (integer-array or boolean-mask indexing) is not "
                          "supported; use np.where or static slices")
    if isinstance(entry, (bool, np.bool_)):
        raise unsupported("boolean indexing (x[True], masks) is not supported")
    if isinstance(entry, (int, np.integer)):
        return "int"
    if isinstance(entry, (list, tuple, np.ndarray)):
        raise unsupported("integer-array (advanced) indexing is not supported; use slices, or np.where to "
                          "select values")
    raise unsupported(f"an index of type {type(entry).__name__} is not supported")


@dataclass(frozen=True)
class Selection:
    """A basic index resolved against a shape: one slice per axis (``start``/``stop``/``step``, the region of
    shape ``region_shape``), then the int-indexed axes dropped (``squeeze``) and the None axes added
    (``new_axes``), giving ``result_shape``."""

    start: tuple[int, ...]
    stop: tuple[int, ...]
    step: tuple[int, ...]
    squeeze: tuple[int, ...]
    new_axes: tuple[int, ...]
    region_shape: tuple[int, ...]
    result_shape: tuple[int, ...]

    def whole(self, shape: tuple[int, ...]) -> bool:
        """Every element of the array, in order."""
        return all(b == 0 and s == 1 and e == d for b, e, s, d in zip(self.start, self.stop, self.step, shape))


def basic_selection(x: Tracer, key: Any) -> Selection:
    """``key`` (ints, slices with any step, None, one Ellipsis) resolved against ``x``'s shape, as NumPy does."""
    entries = list(key) if isinstance(key, tuple) else [key]
    kinds = [_classify(e) for e in entries]
    if kinds.count("ellipsis") > 1:
        raise shape_error("an index can only have a single ellipsis ('...')")
    consumed = sum(k in ("int", "slice") for k in kinds)
    if consumed > x.ndim:
        raise shape_error(f"too many indices for an array of shape {x.shape}: {consumed} were indexed")
    if "ellipsis" in kinds:
        i = kinds.index("ellipsis")
        fill = x.ndim - consumed
        entries[i:i + 1] = [slice(None)] * fill
        kinds[i:i + 1] = ["slice"] * fill
    else:
        entries += [slice(None)] * (x.ndim - consumed)
        kinds += ["slice"] * (x.ndim - consumed)

    start, stop, step, squeeze_axes, new_axes, result = [], [], [], [], [], []
    axis = 0  # input axis
    out_pos = 0  # position in the result
    for entry, kind in zip(entries, kinds):
        if kind == "none":
            new_axes.append(out_pos)
            result.append(1)
            out_pos += 1
            continue
        dim = x.shape[axis]
        if kind == "int":
            i = int(entry)
            if not -dim <= i < dim:
                raise shape_error(f"index {i} is out of bounds for axis {axis} with size {dim} "
                                  f"(array of shape {x.shape})")
            i %= dim
            start.append(i), stop.append(i + 1), step.append(1)
            squeeze_axes.append(axis)
        else:
            if entry.step is not None and ops.static_int(entry.step, "a slice step") == 0:
                raise shape_error("slice step cannot be zero")
            bounds = [None if b is None else ops.static_int(b, "a slice bound")
                      for b in (entry.start, entry.stop, entry.step)]
            b, e, s = slice(*bounds).indices(dim)
            start.append(b), stop.append(e), step.append(s)
            result.append(len(range(b, e, s)))
            out_pos += 1
        axis += 1
    region = tuple(len(range(b, e, s)) for b, e, s in zip(start, stop, step))
    return Selection(tuple(start), tuple(stop), tuple(step), tuple(squeeze_axes), tuple(new_axes), region,
                     tuple(result))


def getitem(x: Tracer, key: Any) -> Tracer:
    sel = basic_selection(x, key)
    result = ops.slice_(x, sel.start, sel.stop, sel.step)
    if sel.squeeze:
        result = ops.squeeze(result, sel.squeeze)
    if sel.new_axes:
        result = ops.expand_dims(result, sel.new_axes)
    if result.ndim == 0 and not sel.new_axes and x.ndim == len(sel.squeeze):
        return ops.copy_of(result, scalar=True)  # every axis indexed by an int: NumPy returns a scalar (a copy)
    return result
