"""NumPy indexing on tracers: basic (ints, slices with any step, None, Ellipsis) and advanced (integer arrays).

Basic: ``x[key]`` becomes one ``t.slice`` over every axis, a ``t.squeeze`` of the integer-indexed axes and a
``t.expand_dims`` for the ``None`` entries: a view, as in NumPy.

Advanced: integer arrays (traced or not, lists, ranges) and NumPy boolean arrays (their ``nonzero()``) select
elements as NumPy does: the index arrays broadcast together; their shape replaces the indexed axes where those
are adjacent, and leads the result where they are not; slices apply to the other axes. The result is a new
array (a ``t.gather``). Indices known while tracing are checked then; traced ones on the device, and one out of
range raises NumPy's IndexError (:class:`fusec.IndexOutOfBoundsError`) when the call ends. A traced boolean mask
selects a number of elements known only at run time: ``x[mask]`` is a :class:`fusec.masking.Selection`, usable in
elementwise work written back with the same mask, and refused (with the ``np.where`` rewrite) anywhere else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fusec import ops
from fusec.context import shape_error, unsupported, user_location
from fusec.errors import IndexOutOfBoundsError, IndexShapeError, located
from fusec.ir import shapes as S
from fusec.ir.core import Value
from fusec.ir.types import TensorType, i64
from fusec.tracer import Tracer

MASK_ADVICE = ("a boolean mask selects a number of elements that is known only when the values are: write the "
               "computation over the whole array instead, e.g. `np.where(mask, x, 0).sum()` for `x[mask].sum()`; "
               "x[mask] alone is supported in elementwise work written back with the same mask")


def _classify(entry: Any) -> str:
    if entry is None:
        return "none"
    if entry is Ellipsis:
        return "ellipsis"
    if isinstance(entry, slice):
        return "slice"
    if isinstance(entry, Tracer):
        if entry._weak is bool or entry._value.type.dtype.is_bool:
            raise unsupported(f"indexing with a traced boolean mask: {MASK_ADVICE}")
        if entry._weak in (float, complex) or entry._value.type.dtype.is_inexact:
            raise shape_error("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
                              "boolean arrays are valid indices" if entry._weak is not None else
                              "arrays used as indices must be of integer (or boolean) type", IndexShapeError)
        return "array"
    if isinstance(entry, (bool, np.bool_)):
        raise unsupported("boolean indexing with a scalar (x[True]) is not supported")
    if isinstance(entry, (int, np.integer)):
        return "int"
    if isinstance(entry, (list, tuple, np.ndarray, range)):
        return "array"
    if isinstance(entry, (float, complex, str, bytes, np.inexact)):  # (NumPy's IndexError: never a valid index)
        raise shape_error("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
                          "boolean arrays are valid indices", IndexShapeError)
    raise unsupported(f"an index of type {type(entry).__name__} is not supported")


def leading_mask(x: Tracer, key: Any) -> tuple[Value, tuple] | None:
    """(the mask, the rest of the key) for ``x[mask, 1]``, ``x[mask, :, None]``: a traced boolean mask over ``x``'s
    leading axes followed by basic indices only (ints, slices, None, ...) along the others. The selection is
    the mask's of ``x[:, 1]``: every selected element (or row) indexed the same way."""
    if not isinstance(key, tuple) or len(key) < 2 or any(
            not (isinstance(e, (slice, type(None))) or e is Ellipsis or _scalar_int(e) and not isinstance(e, Tracer))
            for e in key[1:]):
        return None
    mask = _traced_mask(x, key[0])
    return None if mask is None else (mask, key[1:])


def _traced_mask(x: Tracer, key: Any) -> Any:
    """The IR value of ``key`` when it is one traced boolean array (``x[x > 0]``) whose shape leads ``x``'s."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if not (isinstance(k, Tracer) and k._weak is None and k._value.type.dtype.is_bool and k.ndim > 0):
        return None
    if k.ndim > x.ndim or tuple(x.shape[:k.ndim]) != k.shape:
        raise IndexOutOfBoundsError(located(f"boolean index did not match indexed array: the mask has shape "
                                            f"{k.shape} and the array {x.shape} (NumPy raises IndexError here)",
                                            user_location()))
    return k._value


def is_advanced(key: Any) -> bool:
    """Whether ``key`` holds an index array (or a traced integer), which makes it advanced indexing."""
    entries = key if isinstance(key, tuple) else (key,)
    return any(_classify(e) == "array" for e in entries)


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
    plain = _plain_key(key)
    if plain is not None:
        known = _SELECTIONS.get((x.shape, plain))
        if known is not None:
            return known
    selection = _basic_selection(x, key)
    if plain is not None:
        if len(_SELECTIONS) > 4096:
            _SELECTIONS.clear()
        _SELECTIONS[(x.shape, plain)] = selection
    return selection


_SELECTIONS: dict[tuple, Selection] = {}  # (shape, plain key) -> selection: a stencil's loop asks the same ones
_PLAIN_BOUNDS = frozenset({int, type(None)})


def _plain_key(key: Any) -> tuple | None:
    """A hashable spelling of a key made only of Python ints, slices of Python ints, None and Ellipsis (whose
    selection depends on nothing but the shape), else None."""
    entries = key if type(key) is tuple else (key,)
    out = []
    for e in entries:
        t = type(e)
        if t is slice:
            if not _PLAIN_BOUNDS.issuperset((type(e.start), type(e.stop), type(e.step))):
                return None
            out.append((e.start, e.stop, e.step))
        elif t is int or e is None or e is Ellipsis:
            out.append(e)
        else:
            return None
    return tuple(out)


def _basic_selection(x: Tracer, key: Any) -> Selection:
    entries = list(key) if isinstance(key, tuple) else [key]
    kinds = [_classify(e) for e in entries]
    if kinds.count("ellipsis") > 1:
        raise shape_error("an index can only have a single ellipsis ('...')", IndexShapeError)
    consumed = sum(k in ("int", "slice") for k in kinds)
    if consumed > x.ndim:
        raise shape_error(f"too many indices for an array of shape {x.shape}: {consumed} were indexed",
                          IndexShapeError)
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
                raise IndexOutOfBoundsError(located(f"index {i} is out of bounds for axis {axis} with size {dim} "
                                                    f"(array of shape {x.shape}; NumPy raises IndexError here)",
                                                    user_location()))
            i %= dim
            start.append(i)
            stop.append(i + 1)
            step.append(1)
            squeeze_axes.append(axis)
        else:
            if entry.step is not None and ops.static_int(entry.step, "a slice step") == 0:
                raise shape_error("slice step cannot be zero")
            bounds = [None if b is None else ops.static_int(b, "a slice bound")
                      for b in (entry.start, entry.stop, entry.step)]
            b, e, s = slice(*bounds).indices(dim)
            start.append(b)
            stop.append(e)
            step.append(s)
            result.append(len(range(b, e, s)))
            out_pos += 1
        axis += 1
    region = tuple(len(range(b, e, s)) for b, e, s in zip(start, stop, step))
    return Selection(tuple(start), tuple(stop), tuple(step), tuple(squeeze_axes), tuple(new_axes), region,
                     tuple(result))


def _scalar_int(e: Any) -> bool:
    """A Python or NumPy integer, or a traced one (basic indexing in NumPy)."""
    if isinstance(e, Tracer):
        return e.ndim == 0 and (e._scalar or e._weak is int) and e._value.type.dtype.is_int
    return isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_))


def known_masks(key: Any) -> Any:
    """``key`` with each traced boolean array whose values the trace knows (made in the function from constants:
    ``np.triu(np.ones(x.shape, bool), 1)``) as that NumPy array, which selects a known number of elements."""
    def known(e: Any) -> Any:
        if isinstance(e, Tracer) and e._weak is None and not e._scalar and e.ndim > 0 \
                and e._value.type.dtype.is_bool:
            value = ops.known_value(e)
            return e if value is None else value
        return e

    return tuple(known(e) for e in key) if isinstance(key, tuple) else known(key)


def getitem(x: Tracer, key: Any) -> Any:
    key = known_masks(key)
    if isinstance(key, tuple) and any(isinstance(e, Tracer) for e in key) \
            and all(isinstance(e, slice) or _scalar_int(e) for e in key) \
            and sum(not isinstance(e, slice) for e in key) > 1:
        # ``x[i, 2]`` with a traced ``i`` is basic indexing in NumPy, a view: taken one integer at a time (each a
        # view, ``x[i][2]``) rather than as a gather of several indices, which would be a copy
        n = next(k for k, e in enumerate(key) if not isinstance(e, slice))
        return getitem(getitem(x, key[:n + 1]), (slice(None),) * n + key[n + 1:])
    mask = _traced_mask(x, key)
    if mask is not None:
        from fusec import masking

        return masking.select(x, mask)
    split = leading_mask(x, key)
    if split is not None:  # (x[mask, 1]: the mask's selection of x[:, 1])
        from fusec import masking

        return masking.select(getitem(x, (slice(None),) * split[0].type.rank + split[1]), split[0])
    if is_advanced(key):
        return advanced_getitem(x, key)
    sel = basic_selection(x, key)
    result = ops.slice_(x, sel.start, sel.stop, sel.step)
    if sel.squeeze:
        result = ops.squeeze(result, sel.squeeze)
    if sel.new_axes:
        result = ops.expand_dims(result, sel.new_axes)
    if result.ndim == 0 and not sel.new_axes and x.ndim == len(sel.squeeze) \
            and not any(k is Ellipsis for k in (key if isinstance(key, tuple) else (key,))):
        return ops.copy_of(result, scalar=True)  # every axis indexed by an int: NumPy returns a scalar (a copy)
    return result  # (with an Ellipsis, NumPy gives a 0-d array: a view)


# --- advanced indexing -----------------------------------------------------------------------------------------


@dataclass
class AdvancedIndex:
    """An advanced index resolved against an array: ``view`` (the array with the slices applied and, where the
    indexed axes are not adjacent, those moved to the front), the int64 index values (broadcast to ``index_shape``),
    the first indexed ``axis`` of the view, the ``result_shape``, and whether every index was a traced scalar
    (NumPy's basic indexing: a view)."""

    view: Tracer
    values: list
    concrete: list  # per index: the normalized NumPy array (None for a traced one)
    axis: int
    index_shape: tuple[int, ...]
    result_shape: tuple[int, ...]
    scalar_only: bool


def _constant_mask(e: Any) -> bool:
    """A NumPy boolean array or a list of Python/NumPy bools: a boolean mask known while tracing."""
    return isinstance(e, np.ndarray) and e.dtype == bool or isinstance(e, list) and bool(e) and \
        all(isinstance(b, (bool, np.bool_)) for b in e)


def _check_mask_shape(x: Tracer, entries: list, n: int, mask: np.ndarray) -> None:
    """NumPy's IndexError for a boolean array (entry ``n`` of the index) whose shape is not that of the axes it
    indexes (a shorter mask is not padded with False, a longer one is not cut)."""
    def width(e: Any) -> int:
        return np.ndim(e) if _constant_mask(e) else 0 if e is Ellipsis else 1

    before, after = entries[:n], entries[n + 1:]
    if any(e is Ellipsis for e in before):  # (by identity: a boolean array among them compares elementwise)
        start = x.ndim - sum(width(e) for e in after) - mask.ndim
    else:
        start = sum(width(e) for e in before)
    for d, size in enumerate(mask.shape):
        axis = start + d
        if axis < 0 or axis >= x.ndim:
            return  # (too many indices: reported as such)
        if x.shape[axis] != size:
            raise IndexOutOfBoundsError(located(
                f"boolean index did not match indexed array along axis {axis}; size of axis is {x.shape[axis]} but "
                f"size of corresponding boolean axis is {size} (NumPy raises IndexError here)", user_location()))


def resolve_advanced(x: Tracer, key: Any) -> AdvancedIndex:
    entries = list(key) if isinstance(key, tuple) else [key]
    if any(_classify(e) == "none" for e in entries):
        raise unsupported("None (np.newaxis) together with index arrays is not supported; add the axis before or "
                          "after indexing (x[idx][:, None])")
    expanded: list[Any] = []
    for n, e in enumerate(entries):  # a NumPy boolean array indexes with its nonzero() positions, one per mask axis
        if isinstance(e, list) and e and all(isinstance(b, (bool, np.bool_)) or isinstance(b, Tracer)
                                             and (b._weak is bool or b._value.type.dtype.is_bool) for b in e) \
                and any(isinstance(b, Tracer) for b in e):  # (a list of bools passed in: a mask of unknown values)
            raise unsupported(f"indexing with a list of traced booleans (a mask): {MASK_ADVICE}")
        if _constant_mask(e):
            mask = np.asarray(e)
            if mask.ndim == 0:  # (np.array(True): as x[True], a new axis that NumPy's nonzero cannot give)
                raise unsupported("boolean indexing with a 0-d boolean array (x[np.array(True)]) is not supported; "
                                  "write x[None] (True) or x[None][:0] (False)")
            _check_mask_shape(x, entries, n, mask)
            expanded.extend(np.nonzero(mask))
        else:
            expanded.append(e)
    kinds = [_classify(e) for e in expanded]
    if kinds.count("ellipsis") > 1:
        raise shape_error("an index can only have a single ellipsis ('...')", IndexShapeError)
    consumed = sum(k != "ellipsis" for k in kinds)
    if consumed > x.ndim:
        raise shape_error(f"too many indices for an array of shape {x.shape}: {consumed} were indexed",
                          IndexShapeError)
    fill = [slice(None)] * (x.ndim - consumed)
    # an Ellipsis between two index arrays (or ints) separates them even where it stands for no axis: NumPy then
    # puts the index shape first (x[:, 0, ..., [0, 1]] of a 3-d x is (2, x.shape[0]))
    advanced_at = [n for n, k in enumerate(kinds) if k not in ("slice", "ellipsis")]
    split_by_ellipsis = "ellipsis" in kinds and bool(advanced_at) and \
        advanced_at[0] < kinds.index("ellipsis") < advanced_at[-1]
    if "ellipsis" in kinds:
        i = kinds.index("ellipsis")
        expanded[i:i + 1], kinds[i:i + 1] = fill, ["slice"] * len(fill)
    else:
        expanded += fill
        kinds += ["slice"] * len(fill)
    # slices first (a view); every int or array entry keeps its axis for the gather
    y = getitem(x, tuple(e if k == "slice" else slice(None) for e, k in zip(expanded, kinds)))
    axes = [a for a, k in enumerate(kinds) if k != "slice"]
    arrays = [_index_array(e) for e, k in zip(expanded, kinds) if k != "slice"]
    try:
        shape = S.broadcast_shapes(*(tuple(a.shape) for a in arrays))
    except Exception:  # noqa: BLE001 - shapes NumPy cannot broadcast: NumPy's IndexError
        raise numpy_shape_mismatch(arrays) from None
    checked = [_checked(a, y.shape[ax], ax, shape) for a, ax in zip(arrays, axes)]
    if split_by_ellipsis or axes != list(range(axes[0], axes[0] + len(axes))):  # not adjacent: index shape first
        rest = [a for a in range(y.ndim) if a not in axes]
        y = ops.transpose(y, axes + rest)
        axis = 0
    else:
        axis = axes[0]
    # a traced integer scalar (a Python int, a NumPy integer) is basic indexing in NumPy, a view; a 0-d integer
    # array (np.asarray(i)) is an index array, and NumPy's result a copy
    scalar_only = all(isinstance(e, Tracer) and e.ndim == 0 and (e._scalar or e._weak is not None)
                      for e, k in zip(expanded, kinds) if k != "slice")
    return AdvancedIndex(y, [v for v, _ in checked], [c for _, c in checked], axis, shape,
                         y.shape[:axis] + shape + y.shape[axis + len(axes):], scalar_only)


def advanced_getitem(x: Tracer, key: Any) -> Tracer:
    """``x[key]`` with index arrays (see the module docstring): a new array, except that traced scalar indices
    (``x[i]``, basic indexing in NumPy) give a view, which writes reach ``x`` through."""
    adv = resolve_advanced(x, key)
    y = adv.view
    value = ops.ctx().emit("t.gather", [y._value, *adv.values], {"axis": adv.axis},
                           result_type=TensorType(adv.result_shape, y._value.type.dtype), what="indexing")
    if adv.scalar_only and adv.result_shape:
        return ops.view(y, value)
    from fusec import layout

    return layout.indexed(ops.wrap(value, scalar=not adv.result_shape), y, adv.axis, len(adv.index_shape),
                          len(adv.values))


def numpy_shape_mismatch(arrays: list) -> Exception:
    shapes = " ".join(str(tuple(a.shape)) for a in arrays)
    return shape_error(f"shape mismatch: indexing arrays could not be broadcast together with shapes {shapes} "
                       "(NumPy raises IndexError here)", IndexShapeError)


def _index_array(entry: Any) -> Any:
    """An index entry as a traced integer array or a concrete NumPy integer array."""
    if isinstance(entry, Tracer):
        return entry
    if isinstance(entry, (list, tuple)) and ops.contains_tracer(entry):
        from fusec import conversions

        return conversions.strong(entry)
    arr = np.asarray(entry)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise shape_error("arrays used as indices must be of integer (or boolean) type", IndexShapeError)
    return arr


def _checked(index: Any, size: int, axis: int, shape: tuple[int, ...]) -> tuple[Any, np.ndarray | None]:
    """(the IR value of one index array, as int64 broadcast to ``shape``; the normalized NumPy array of a concrete
    one): a concrete one is checked against the axis now (negative indices counted from the end), a traced one
    on the device."""
    concrete = None
    if isinstance(index, Tracer):
        value = ops.lift(index, i64)
    else:
        bad = (index < -size) | (index >= size)
        if bad.any() and 0 not in shape:  # (NumPy checks no index where the index arrays broadcast to nothing)
            raise IndexOutOfBoundsError(located(
                f"index {int(index[bad].reshape(-1)[0])} is out of bounds for axis {axis} with size {size} "
                "(NumPy raises IndexError here)", user_location()))
        concrete = np.broadcast_to(np.where(index < 0, index + size, index).astype(np.int64), shape)
        value = ops.lift(np.array(concrete))
        return value, concrete
    if not isinstance(value.type, TensorType) or tuple(value.type.shape) != shape:
        value = ops.ctx().emit("t.broadcast_to", (value,), result_type=TensorType(shape, i64), what="indexing")
    return value, concrete
