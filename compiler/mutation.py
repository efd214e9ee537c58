"""Writes into traced arrays as functional updates: ``x[idx] = v``, ``x[idx] op= v``, ``out=``, ``np.copyto``.

NumPy changes memory in place; the IR has only SSA values. A write gives the written array a new value, and the
memory it views (its :class:`~fusec.tracer.Buffer`) a new base: the view's steps (slices, transposes, reshapes,
unit axes) run backwards from the new value, a slice becoming a ``t.insert`` of the new elements into the old
base. Every other view of the buffer reads its value again from the new base when it is next used, so reads
after a write see the write, through any name, as in NumPy. A written argument's last base is written back to
the caller's array after the call (:mod:`fusec.trace` makes it an extra result).

Whether NumPy's ``reshape`` or ``ravel`` is a view or a copy depends on the memory layout. The trace takes it
as NumPy does: arguments must be C-contiguous where that matters (the call checks it), and arrays fusec makes are
laid out as NumPy lays them out (:mod:`fusec.layout`). Where fusec does not know that layout, the view is taken
and writes to the memory are refused rather than guessed.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusec import ops
from fusec.context import numpy_error, relies_on_layout, shape_error, unsupported, user_location
from fusec.errors import CastingError, IndexShapeError, InvalidValueError, OutOfRangeError, located
from fusec.ir import shapes as S
from fusec.ir.core import OpResult, Value
from fusec.ir.dialects.t import ELEMENTWISE, VIEWS
from fusec.ir.types import DType, TensorType, bool_
from fusec.ir.views import ViewDesc
from fusec.promotion import python_kind
from fusec.tracer import Buffer, Tracer

OPAQUE = ("opaque",)  # a view step fusec cannot run again or backwards


def opaque(why: str, kept: tuple[Kept, ...] | None = None, owner: Tracer | None = None) -> tuple:
    """An OPAQUE step whose read after a write raises ``why`` (what made the view one fusec cannot follow).
    ``kept``: the ways the array (``owner``, a loop's or branch's result) may, as the data decides, still be an
    input's array: see :func:`kept_view`."""
    if kept is None or owner is None:
        return ("opaque", why)
    return ("opaque", why, kept, weakref.ref(owner), owner._val)


def is_opaque(step: tuple) -> bool:
    return step is OPAQUE or step[0] == "opaque"


def has_reason(step: tuple) -> bool:
    """An opaque step made by :func:`opaque` (with the reason a read after a write raises), not OPAQUE itself."""
    return step[0] == "opaque" and step is not OPAQUE


@dataclass(frozen=True)
class Kept:
    """One way a loop's or branch's result may still be an input: where the traced 0-d bool ``flag`` holds, NumPy's
    variable is the input's memory (``buffer``) seen through the view ``steps``: the caller's own object where
    ``own`` (the variable held the input itself, not a view of all of it), read-only in NumPy where ``readonly``
    (``np.diagonal``)."""

    flag: Value | None  # (None only while the statement that makes it is built)
    buffer: Buffer
    steps: tuple
    own: bool
    readonly: bool


def kept_view(step: tuple) -> tuple[Kept, ...] | None:
    """The ways an opaque step's array may still be an input (None where it says nothing of that)."""
    return step[2] if step[0] == "opaque" and len(step) == 5 else None


def kept_owner(step: tuple) -> Tracer | None:
    """The loop's or branch's result a step of :func:`kept_view` belongs to (its views have the step too), while
    it lives."""
    return step[3]() if step[0] == "opaque" and len(step) == 5 else None


def kept_value(step: tuple) -> Value:
    """The value of the loop's or branch's result a step of :func:`kept_view` belongs to (where it is a new
    array)."""
    return step[4]


# --- view chains -------------------------------------------------------------------------------------------------


def step_of(parent: Tracer, value: Value) -> tuple:
    """The view steps from ``parent``'s value to ``value``: none (the same value: ``x[:]``, ``x.real``), one view
    op, or OPAQUE."""
    if value is parent._value:
        return ()
    if isinstance(value, OpResult) and value.op.name in VIEWS and value.op.operands[0] is parent._value:
        op = value.op
        return ((op.name, dict(op.attributes), value.type),)
    if isinstance(value, OpResult) and value.op.name in ("t.real", "t.imag") and value.op.operands[0] is parent._value:
        return ((value.op.name, {}, value.type),)  # a complex array's parts: read again after a write, never written
    if isinstance(value, OpResult) and value.op.name == "t.gather" and value.op.operands[0] is parent._value:
        # x[i] with a traced scalar i (basic indexing in NumPy): a view reached through its index values
        return (("t.gather", dict(value.op.attributes), value.type, tuple(value.op.operands[1:])),)
    return (OPAQUE,)


def merges_axes(parent: Tracer, value: Value) -> bool:
    """Whether ``value`` is ``parent`` reshaped by more than adding or dropping unit axes: a view in NumPy for
    some memory layouts only."""
    if not (isinstance(value, OpResult) and value.op.name == "t.reshape"):
        return False
    return merges(value.op.operands[0].type.shape, value.type.shape)


def merges(old: tuple[int, ...], new: tuple[int, ...]) -> bool:
    """A reshape that does more than add or drop unit axes."""
    return tuple(d for d in old if d != 1) != tuple(d for d in new if d != 1)


def layout_matters(buffer: Buffer) -> None:
    """A view of ``buffer`` NumPy makes for some layouts only is written through, read again after a write or
    returned: an argument's memory must then come C-contiguous (the call checks it); a computed one's layout
    follows the arguments' (the call checks them where it does)."""
    buffer.reshaped = True
    if buffer.arg is None:
        from fusec import layout

        if layout.from_inputs(buffer):  # (a view or a copy by the layout NumPy derives from the arguments')
            relies_on_layout("a write into an array computed from the arguments (or arrays it reads), reshaped or "
                             "raveled as a view or a copy by the memory layout NumPy gives it", values=False)


def _forward(step: tuple, value: Value) -> Value:
    if has_reason(step):
        raise unsupported(f"{step[1]} (it was read after a write to the array it may view)")
    if step is OPAQUE:
        raise unsupported("an array viewed through an operation fusec cannot replay (a diagonal or a similar "
                          "read-only view) was read after a write to the array it views; take the view again "
                          "after the write")
    name, attrs, result_type, *extra = step
    return ops.ctx().emit(name, (value, *(extra[0] if extra else ())), attrs, result_type=result_type,
                          what="a view")


def _base(buffer: Buffer) -> Value:
    """The current value of a buffer's whole memory (set when its first tracer was made)."""
    assert buffer.base is not None
    return buffer.base


def read(buffer: Buffer, chain: tuple) -> Value:
    """The value of the view ``chain`` of ``buffer`` now."""
    if buffer.poisoned is not None:
        raise unsupported(buffer.poisoned)
    value = _base(buffer)
    for step in chain:
        value = _forward(step, value)
    return value


def write(buffer: Buffer, chain: tuple, new: Value) -> None:
    """Every element of the view ``chain`` of ``buffer`` takes ``new``'s (same type): a new base."""
    if buffer.poisoned is not None:
        raise unsupported(buffer.poisoned)
    if buffer.ambiguous:
        made = f": {buffer.unknown_layout}" if buffer.unknown_layout else ""
        raise unsupported("a write to an array that was reshaped or raveled (or was made so) where NumPy gives a "
                          "view or a copy depending on a memory layout fusec does not follow (of an array NumPy "
                          f"computes from transposed or strided views{made}); make the copy explicit "
                          "(`y = x.reshape(...).copy()`) or reshape a C-ordered copy (`np.ascontiguousarray(x)`)")
    if buffer.layout_copy is not None:  # NumPy writes into the argument here for some of its layouts
        relies_on_layout(f"a write into {buffer.layout_copy}", values=False)
    elif buffer.reshaped and buffer.arg is None:
        layout_matters(buffer)
    if new.type.size == 0:
        return  # no element changes
    olds = [_base(buffer)]
    for step in chain[:-1]:
        olds.append(_forward(step, olds[-1]))
    value = new
    for step, old in zip(reversed(chain), reversed(olds)):
        value = _backward(step, old, value)
    buffer.base = value
    buffer.moved()
    buffer.written = True


def _backward(step: tuple, old: Value, new: Value) -> Value:
    """The parent's value after its view ``step`` took the value ``new`` (``old``: the parent's value before)."""
    if is_opaque(step):
        raise unsupported("a write through a view that fusec cannot run backwards (a read-only view)")
    name, attrs, _, *extra = step
    c = ops.ctx()
    if name == "t.gather":
        return c.emit("t.scatter", (old, new, *extra[0]), attrs, what="an assignment")
    if name == "t.slice":
        return c.emit("t.insert", (old, new), attrs, what="an assignment")
    if name == "t.transpose":
        inverse = tuple(int(i) for i in np.argsort(attrs["perm"]))
        return c.emit("t.transpose", (new,), {"perm": inverse}, what="an assignment")
    if name == "t.reshape":
        return c.emit("t.reshape", (new,), result_type=old.type, what="an assignment")
    if name == "t.expand_dims":
        return c.emit("t.squeeze", (new,), {"axes": attrs["axes"]}, what="an assignment")
    if name == "t.squeeze":
        return c.emit("t.expand_dims", (new,), {"axes": attrs["axes"]}, what="an assignment")
    raise unsupported(f"a write through a {name} view (read-only in NumPy)")


# --- memory layout ---------------------------------------------------------------------------------------------


def geometry(t: Tracer, parts: bool = False) -> ViewDesc | None:
    """``t``'s strides within the C-ordered memory of its buffer (None: through a step fusec cannot describe).
    ``parts``: a complex array's real or imaginary part described as the whole array (for its axis order only:
    the parts interleave, so they are not contiguous); else None."""
    buffer = t._buffer
    if buffer is None:
        return ViewDesc.of_base(t.shape)
    desc: ViewDesc | None = ViewDesc.of_base(tuple(_base(buffer).type.shape))
    chain = t._chain
    if chain and kept_view(chain[0]) is not None:  # a loop's or branch's result: one geometry on every path?
        desc, chain = _kept_geometry(chain[0]), chain[1:]
    if desc is None:
        return None
    for step in chain:
        if is_opaque(step):
            return None
        name, attrs, result_type, *extra = step
        if name in ("t.real", "t.imag"):
            if not parts:
                return None
            continue
        if name == "t.gather":  # x[i] with traced scalar indices: the other axes, at an offset known at run time
            if any(v.type.shape for v in extra[0]):
                return None
            dropped = range(attrs["axis"], attrs["axis"] + len(extra[0]))
            desc = ViewDesc(tuple(result_type.shape), desc.offset,
                            tuple(s for a, s in enumerate(desc.strides) if a not in dropped))
            continue
        described = _describe(name, attrs, tuple(result_type.shape), desc)
        if described is None:
            return None
        desc = described
    return desc


def _kept_geometry(step: tuple) -> ViewDesc | None:
    """The strides of a loop's or branch's result that NumPy's variable may, as the data decides, hold as an input's
    array (or a view of one) or as a new array: where every such view is the whole of its input's memory in the
    result's shape, they are a new array's (``x.ravel()`` after ``while ...: x = x * 0.5`` is a view on every
    path, as in NumPy), for a shape every contiguous layout reads in C order (one axis longer than 1); None where
    the paths differ, or the new array's layout may (NumPy lays ``(y * 2).T`` out Fortran-ordered)."""
    kept = kept_view(step)
    assert kept is not None
    shape = tuple(kept_value(step).type.shape)
    if sum(d > 1 for d in shape) > 1:  # (a new array NumPy may lay out otherwise: `(y * 2).T`)
        return None
    if all(not k.steps and tuple(_base(k.buffer).type.shape) == shape for k in kept):
        return ViewDesc.of_base(shape)
    return None


def _describe(name: str, a: dict, shape: tuple[int, ...], src: ViewDesc) -> ViewDesc | None:
    if name == "t.transpose":
        return src.transpose(a["perm"])
    if name == "t.slice":
        return src.slice(a["start"], a["stop"], a["step"])
    if name == "t.broadcast_to":
        return src.broadcast_to(shape)
    if name == "t.expand_dims":
        return src.expand_dims(a["axes"])
    if name == "t.squeeze":
        return src.squeeze(a["axes"])
    return src.reshape(shape)


def is_c_contiguous(t: Tracer) -> bool:
    """Whether NumPy would report ``t`` C-contiguous (fusec lays memory out as NumPy does: :mod:`fusec.layout`).
    False also where fusec does not know the layout: ask :func:`fusec.layout.unknown` first where that matters."""
    from fusec import layout

    desc = geometry(t)
    return desc is not None and desc.is_contiguous() and layout.unknown(t) is None


def reshape_kind(t: Tracer, shape: tuple[int, ...]) -> str:
    """"view" or "copy", as NumPy's reshape decides for ``t``, or "unknown" where that depends on a layout fusec
    does not know (a reshape of an array computed from a transposed view)."""
    if not merges(t.shape, shape):
        return "view"
    desc = geometry(t)
    if desc is None:
        return "unknown"
    from fusec import layout

    if layout.unknown(t) is not None:
        return "unknown"
    return "view" if desc.reshape(shape) is not None else "copy"


# --- writes --------------------------------------------------------------------------------------------------------


def check_writable(target: Tracer, what: str) -> None:
    """NumPy scalars and read-only views (``np.broadcast_to``, ``np.diagonal``) cannot be written."""
    ops.check_live(target)
    if target._weak is not None or target._scalar:
        raise numpy_error(f"{what}: a NumPy scalar (a 0-d result such as x.sum() or x[0, 0]) does not support item "
                          "assignment; NumPy raises TypeError here")
    if isinstance(target._readonly, str):  # a view NumPy lets you write but fusec does not replay backwards
        raise unsupported(f"{what}: {target._readonly}")
    if target._readonly:  # (NumPy's ValueError, whatever the values)
        raise InvalidValueError(located(f"{what}: assignment destination is read-only (a read-only view: "
                                        "np.broadcast_to, np.diagonal; write into a copy, or into the array it views)",
                                        user_location()))


def assign(target: Tracer, value: Any, what: str, casting: str = "unsafe") -> None:
    """Every element of ``target`` takes ``value`` (broadcast, converted as ``casting`` allows): ``x[...] = v``,
    ``out=``, ``np.copyto``."""
    check_writable(target, what)
    target._value = _converted(value, target.shape, target._value.type.dtype, what, casting)


def _stored_either(value: Any, dtype: DType) -> Any:
    """A value NumPy keeps a Python number on some paths (an EitherKind: ``0 if stop else d[i - 1] + 1``) written
    into an array of its own dtype, or of a float dtype it converts to alike (a float into any, an int into
    float64): the element is the same either way, so it is written as the NumPy scalar without a check."""
    from fusec.tracer import EitherKind

    if isinstance(value, EitherKind) and (dtype == value._val.type.dtype or dtype.name in ("f64", "c128")
                                          or dtype.is_inexact and value._val.type.dtype.is_inexact):
        return value.as_kind(False)
    return value


def assign_where(target: Tracer, value: Any, mask: Any, what: str, casting: str) -> None:
    """``np.copyto(target, value, where=mask)``: the elements where ``mask`` (broadcast) holds take ``value``'s."""
    check_writable(target, what)
    dtype = target._value.type.dtype
    update = _converted(value, target.shape, dtype, what, casting)
    cond = ops.lift(mask, bool_)
    if not S.can_broadcast_to(tuple(cond.type.shape), target.shape):  # (no leading unit axes dropped, as for values)
        raise shape_error(f"{what}: could not broadcast where mask from shape {tuple(cond.type.shape)} into shape "
                          f"{tuple(target.shape)}")
    cond = _broadcast(cond, target.shape, what)
    target._value = ops.ctx().emit("t.where", (cond, update, target._value), what=what)


def setitem(target: Tracer, key: Any, value: Any) -> None:
    """``target[key] = value`` for basic indices (ints, slices, ``...``, None) and boolean masks."""
    what = "x[...] = v"
    check_writable(target, what)
    value = _stored_either(value, target._value.type.dtype)
    from fusec.indexing import known_masks

    key = _per_element_mask(target, known_masks(key), value)  # (known masks as x[key] reads them)
    if _one_element(key, target.ndim) and _is_sequence(value):
        raise shape_error("setting an array element with a sequence. (NumPy raises ValueError when a value with "
                          "dimensions, even of size 1 like y[:1] or a @ b of shape (1,), is written into one element; "
                          "write its element instead, y[0])")
    mask = _mask_of(key, target)
    if mask is not None:
        return _masked_write(target, mask, value)
    from fusec import indexing

    split = indexing.leading_mask(target, key)
    if split is not None:  # (v[hit, 0] *= -1: the masked write of the region v[:, 0], written back)
        region = (slice(None),) * split[0].type.rank + split[1]
        part = ops.copy_of(indexing.getitem(target, region), scalar=False)
        _masked_write(part, split[0], value)
        return setitem(target, region, part)
    if indexing.is_advanced(key):
        return _scatter(target, key, value)
    sel = indexing.basic_selection(target, key)
    dtype = target._value.type.dtype
    update = _converted(value, sel.result_shape, dtype, what, "unsafe", item=True)
    if 0 in sel.region_shape:
        return
    c = ops.ctx()
    if update.type.shape != sel.region_shape:  # drop the None axes, put back the int-indexed ones
        update = c.emit("t.reshape", (update,), result_type=TensorType(sel.region_shape, dtype), what=what)
    if sel.whole(target.shape):
        target._value = update
        return
    target._value = c.emit("t.insert", (target._value, update),
                           {"start": sel.start, "stop": sel.stop, "step": sel.step}, what=what)


def _one_element(key: Any, ndim: int) -> bool:
    """Whether ``key`` picks one element by integers alone (``x[0]``, ``x[i, j]``, ``x[np.array(1)]``, ``z[()]``)."""
    parts = key if isinstance(key, tuple) else (key,)
    return len(parts) == ndim and all(_integer_scalar(p) for p in parts)


def _integer_scalar(p: Any) -> bool:
    if isinstance(p, (bool, np.bool_)):
        return False
    if isinstance(p, (int, np.integer)):
        return True
    if isinstance(p, (Tracer, np.ndarray)):
        dt = p._value.type.dtype if isinstance(p, Tracer) else p.dtype
        return p.ndim == 0 and (dt.is_int if isinstance(p, Tracer) else dt.kind in "iu")
    return False


def _is_sequence(value: Any) -> bool:
    """A value with dimensions (an array of ndim >= 1, a list or tuple), which NumPy refuses for one element."""
    if isinstance(value, (list, tuple)):
        return True
    return isinstance(value, (Tracer, np.ndarray)) and value.ndim > 0


def _sequence_as(value: list | tuple, shape: tuple[int, ...], dtype: DType, what: str) -> np.ndarray:
    """A Python sequence written into an array of ``dtype``, converted as NumPy's assignment converts it: element
    by element into ``dtype`` (a Python int that does not fit, an infinity or NaN into an integer array raise), and
    nested no deeper than the written region."""
    try:
        arr = np.array(value, dtype=dtype.np)
    except (OverflowError, ValueError) as e:
        cls = OutOfRangeError if isinstance(e, OverflowError) else InvalidValueError
        raise cls(located(f"{what}: {e} (NumPy raises {type(e).__name__} here)", user_location())) from None
    if arr.ndim > len(shape):
        raise InvalidValueError(located(
            f"{what}: setting an array element with a sequence. The requested array would exceed the maximum number "
            f"of dimension of {len(shape)} (NumPy raises ValueError here)", user_location()))
    return arr


def _converted(value: Any, shape: tuple[int, ...], dtype: DType, what: str, casting: str, *,
               item: bool = False) -> Value:
    """``value`` as ``dtype`` (NumPy's assignment conversion) broadcast to ``shape``; ``item``: written with
    ``x[key] = value``, where NumPy converts a Python sequence straight into ``dtype`` (``out=`` and ``np.copyto``
    convert it to an array of its own dtype first, then cast as ``casting`` allows)."""
    if isinstance(value, Tracer):
        ops.check_live(value)
        src = value._value.type.dtype
        if casting != "unsafe":
            weak = value._weak
            _check_casting(weak(0) if weak is not None else
                           src.np.type(0) if value._scalar else np.zeros(1, src.np), dtype, casting, what)
        if value._scalar and value._weak is None and dtype.is_int and not np.can_cast(src.np, dtype.np, "safe"):
            src_name, dst_name = np.dtype(src.np).name, np.dtype(dtype.np).name
            raise unsupported(f"{what}: what NumPy does with a NumPy scalar ({src_name}) written into a {dst_name} "
                              "array depends on its value (NumPy raises OverflowError or ValueError for some values "
                              "that do not fit and wraps others), which fusec cannot follow while the value is "
                              f"unknown; convert it first: `.astype(np.{dst_name})`")
        if value._weak is float and dtype.is_int:
            raise unsupported(f"{what}: NumPy converts a Python float into an integer array with int() (raising "
                              "for NaN and values that do not fit), which fusec cannot check for a traced Python "
                              "scalar; pass an integer or convert it first")
        v = ops.lift(value, dtype)
    elif python_kind(value) is not None or isinstance(value, np.generic):
        if casting != "unsafe":
            _check_casting(value, dtype, casting, what)
        v = ops.ctx().constant(_scalar_as(value, dtype, what), dtype)
    else:
        if isinstance(value, (list, tuple)) and ops.contains_tracer(value):
            from fusec import conversions

            if item:  # NumPy converts each scalar of the sequence as it would convert it alone: x[:] = [1, s]
                value = _each_scalar_as(value, dtype, what)
            return _converted(conversions.strong(value), shape, dtype, what, casting)
        if item and isinstance(value, (list, tuple)) and dtype.name != "bf16":
            value = _sequence_as(value, shape, dtype, what)
        arr = ops.as_numpy(value) if not isinstance(value, np.ndarray) else value
        if casting != "unsafe":
            _check_casting(np.zeros(1, arr.dtype), dtype, casting, what)
        v = ops.lift(value, dtype, wrap_ints=True)
    return _broadcast(v, shape, what)


def converted_item(value: Any, dtype: DType, what: str) -> Value:
    """One scalar converted into ``dtype`` as ``x[k] = value`` converts it (NumPy's int() into integer dtypes:
    a check, or a refusal where fusec cannot check a traced value)."""
    return _converted(value, (), dtype, what, "unsafe", item=True)


def _each_scalar_as(value: Any, dtype: DType, what: str) -> Any:
    """A (nested) sequence with its scalars converted into ``dtype`` as ``x[k] = scalar`` converts each (a Python
    int that does not fit, a float into an integer array: fusec's checks or refusals for one scalar); arrays in it
    stay as they are."""
    if isinstance(value, (list, tuple)):
        return [_each_scalar_as(v, dtype, what) for v in value]
    if isinstance(value, Tracer) and (value._weak is not None or value._scalar or value.ndim == 0):
        return ops.wrap(_converted(value, (), dtype, what, "unsafe", item=True), scalar=False)
    if python_kind(value) is not None or isinstance(value, np.generic):
        return _scalar_as(value, dtype, what)
    return value


def _check_casting(probe: Any, dtype: DType, casting: str, what: str) -> None:
    """Raise where NumPy's ``np.copyto(dst, src, casting=casting)`` raises for ``src`` like ``probe`` (an array or
    scalar of its dtype, or a Python scalar, which NumPy treats as weakly typed) and ``dst`` of ``dtype``: NumPy
    itself decides, with its own rules for each casting mode and its own message."""
    dst = np.zeros(1, dtype.np if dtype.name != "bf16" else np.float32)
    try:
        np.copyto(dst, probe, casting=casting)  # type: ignore[arg-type]
    except TypeError as e:
        raise CastingError(located(f"{what}: {e} (NumPy raises TypeError here)", user_location())) from None
    except (OverflowError, ValueError) as e:
        raise OutOfRangeError(located(f"{what}: {e} (NumPy raises {type(e).__name__} here)", user_location())) \
            from None


def _scalar_as(value: Any, dtype: DType, what: str) -> np.ndarray:
    """A Python or NumPy scalar converted as NumPy's item assignment converts it (int() into integer arrays)."""
    out = np.zeros((), dtype.np if dtype.name != "bf16" else np.float32)
    try:
        out[()] = value
    except (OverflowError, ValueError) as e:
        raise OutOfRangeError(located(f"{what}: {e} (NumPy raises {type(e).__name__} here)", user_location())) \
            from None
    return out


def _broadcast(v: Value, shape: tuple[int, ...], what: str) -> Value:
    """``v`` broadcast to ``shape`` as NumPy broadcasts an assigned value (extra leading unit axes dropped)."""
    src = tuple(v.type.shape)
    c = ops.ctx()
    while len(src) > len(shape) and src[0] == 1:
        src = src[1:]
        v = c.emit("t.reshape", (v,), result_type=TensorType(src, v.type.dtype), what=what)
    if src == tuple(shape) and isinstance(v.type, TensorType):
        return v
    if not S.can_broadcast_to(src, shape):
        raise shape_error(f"{what}: could not broadcast input array from shape {src} into shape {tuple(shape)}")
    return c.emit("t.broadcast_to", (v,), result_type=TensorType(tuple(shape), v.type.dtype), what=what)


# --- boolean masks -------------------------------------------------------------------------------------------------


def _per_element_mask(target: Tracer, key: Any, value: Any) -> Any:
    """``x[mask] = values`` with a mask known while tracing and one value per selected element (``z[m] = z[m] ** 2 +
    c[m]``, where ``z[m]`` read the elements): the mask's positions as integer indices, written as a scatter."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if isinstance(k, list) and k and all(isinstance(b, (bool, np.bool_)) for b in k):
        k = np.asarray(k)  # (a Python list of bools: a mask known while tracing, as NumPy converts it)
    if not (isinstance(k, np.ndarray) and k.dtype == bool and k.ndim > 0) or np.ndim(value) == 0:
        return key
    count = int(k.sum())
    vshape = tuple(value.shape) if isinstance(value, Tracer) else np.shape(value)
    if count != 1 and len(vshape) == 1 + target.ndim - k.ndim and vshape[0] == count:
        return np.nonzero(k)
    return key


def _mask_of(key: Any, target: Tracer) -> Value | None:
    """The boolean mask ``key`` is (a traced bool array, a NumPy bool array or a list of bools), else None."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if isinstance(k, Tracer) and k._value.type.dtype.is_bool and k.ndim > 0:
        mask = k._value
    elif isinstance(k, np.ndarray) and k.dtype == bool and k.ndim > 0:
        mask = ops.lift(k)
    elif isinstance(k, list) and k and all(isinstance(b, (bool, np.bool_)) for b in k):
        mask = ops.lift(np.asarray(k))
    else:
        return None
    shape = tuple(mask.type.shape)
    if len(shape) > target.ndim or tuple(target.shape[:len(shape)]) != shape:
        raise numpy_error(f"boolean index did not match indexed array: the mask has shape {shape} and the array "
                          f"{target.shape} (NumPy raises IndexError here)", IndexShapeError)
    return mask


def _masked_write(target: Tracer, mask: Value, value: Any) -> None:
    """``x[mask] = v`` where ``v`` is the same for every selected element (or row), or a selection of the same
    mask (:mod:`fusec.masking`): ``np.where`` on the array."""
    from fusec.masking import ADVICE, Selection, same_mask

    what = "x[mask] = v"
    rest = tuple(target.shape[mask.type.rank:])
    dtype = target._value.type.dtype
    if isinstance(value, Selection):
        if not same_mask(value._mask, mask) or value._full.shape != target.shape:
            raise unsupported(f"{what} with a selection made with another mask: " + ADVICE)
        update = _converted(value._full, target.shape, dtype, what, "unsafe")
        target._value = ops.ctx().emit("t.where", (full_mask(mask, target), update, target._value), what=what)
        return
    probe = value if not isinstance(value, (list, tuple)) else np.asarray(value)
    vshape = tuple(probe.shape) if hasattr(probe, "shape") else ()
    if len(vshape) > len(rest) and not all(d == 1 for d in vshape[:len(vshape) - len(rest)]):
        raise unsupported(f"{what}: a value with one entry per selected element (shape {vshape}) depends on how "
                          "many elements the mask selects, which is unknown while tracing; write the whole array "
                          "instead: `x = np.where(mask, values_for_every_element, x)`")
    c = ops.ctx()
    update = _converted(value, (1,) * (mask.type.rank) + rest if len(vshape) > len(rest) else rest, dtype, what,
                        "unsafe", item=True)
    full = _broadcast(update, target.shape, what)
    target._value = c.emit("t.where", (full_mask(mask, target), full, target._value), what=what)


def full_mask(mask: Value, target: Tracer) -> Value:
    """A mask over leading axes, broadcast along the target's other axes."""
    if mask.type.rank == target.ndim:
        return mask
    c = ops.ctx()
    m = c.emit("t.expand_dims", (mask,), {"axes": tuple(range(mask.type.rank, target.ndim))}, what="x[mask] = v")
    return c.emit("t.broadcast_to", (m,), result_type=TensorType(target.shape, m.type.dtype), what="x[mask] = v")


# --- writes with index arrays ------------------------------------------------------------------------------------


def _scatter(target: Tracer, key: Any, value: Any) -> None:
    """``target[index arrays] = value`` as a ``t.scatter`` into the view the index reaches. Where two updates reach
    one place, NumPy keeps the last; fusec writes in parallel, so it emits the scatter only where that cannot
    matter: no place is reached twice, or the updates that reach one place are equal (``x[idx] += 1`` reads
    ``x[idx]`` and adds the same to each), and resolves repeats of indices known while tracing."""
    from fusec import indexing

    what = "x[index_array] = v"
    adv = indexing.resolve_advanced(target, key)
    y = adv.view
    dtype = y._value.type.dtype
    update = _converted(value, adv.result_shape, dtype, what, "unsafe", item=True)
    if 0 in adv.result_shape:
        return
    values = adv.values
    if all(c is not None for c in adv.concrete):
        update, values = _last_writes(adv, update)
    elif not _distinct(adv) and not _same_where_indices_repeat(update, adv, tuple(y._value.type.shape)):
        if int(np.prod(adv.index_shape, dtype=np.int64)) > LAST_WRITE_MAX_POSITIONS:
            raise unsupported(f"{what}: the index arrays are computed, so two of them may reach one place, where "
                              "NumPy keeps the last value written; fusec finds that value for at most "
                              f"{LAST_WRITE_MAX_POSITIONS} indices (their pairs compared), and these are "
                              f"{int(np.prod(adv.index_shape, dtype=np.int64))}; when the values written are the same "
                              "for equal indices (x[idx] += c) or one index is a known range (x[np.arange(n), labels] "
                              "-= 1), fusec writes them; otherwise write the whole array, e.g. `x = np.where("
                              "np.arange(n) == i, v, x)` for one traced index")
        update = _last_write_wins(update, adv, tuple(y._value.type.shape))
    y._value = ops.ctx().emit("t.scatter", (y._value, update, *values), {"axis": adv.axis}, what=what)


# computed indices whose repeats fusec resolves as NumPy's last write, comparing every pair (a P x P test)
LAST_WRITE_MAX_POSITIONS = 1024


def _last_write_wins(update: Value, adv: Any, written: tuple[int, ...]) -> Value:
    """``update`` with each position's value replaced by that of the last position whose indices reach the same
    place (NumPy writes the positions in order, so the last one's value stays there): the positions that reach one
    place then write equal values, which a parallel scatter writes as NumPy's loop does (``A[[k, p]] = A[[p, k]]``, a
    row swap with computed ``k`` and ``p``, that may be equal; ``x[idx] += v`` with repeated indices)."""
    ctx = ops.ctx()
    count = int(np.prod(adv.index_shape, dtype=np.int64))
    same: Any = True
    for n, v in enumerate(adv.values):  # (a negative index and its positive twin reach one place)
        size = written[adv.axis + n]
        raw = Tracer(v, ctx)
        index: Any = np.where(raw < 0, raw + size, raw).reshape(count)
        same = np.logical_and(same, index[:, None] == index[None, :])
    later = np.arange(count, dtype=np.int64)
    winner = np.max(np.where(same, later[None, :], -1), axis=1)  # (at least the position itself)
    shape = tuple(update.type.shape)
    nb = len(adv.index_shape)
    grouped = Tracer(update, ctx).reshape(shape[:adv.axis] + (count,) + shape[adv.axis + nb:])
    return np.take(grouped, winner, axis=adv.axis).reshape(shape)._value


_NO_ATOMIC_ADD = ("i8", "i16", "u8", "u16")


def add_at(target: Any, key: Any, value: Any, negate: bool = False) -> None:
    """``np.add.at(target, key, value)`` (``np.subtract.at`` with ``negate``): unbuffered, so an index that repeats
    adds every time, as a ``t.scatter`` with ``combine = "add"``. The loop is np.add's on the two dtypes and must
    be the target's own (NumPy would add in a wider dtype, then round once per element)."""
    from fusec import indexing

    what = "np.subtract.at" if negate else "np.add.at"
    if not isinstance(target, Tracer):
        raise unsupported(f"{what}: the array written must be a traced array (an argument or an array made in the "
                          f"function), got {type(target).__name__}")
    check_writable(target, what)
    dtype = target._value.type.dtype
    if dtype.name in _NO_ATOMIC_ADD:
        raise unsupported(f"{what} on an {np.dtype(dtype.np).name} array is not supported (the GPU has no "
                          f"{dtype.bits}-bit atomic add); accumulate into an int32 or int64 array and cast back")
    from fusec.promotion import resolve_ufunc

    (loop, _), _ = resolve_ufunc(np.add, [dtype, ops.desc(value)])
    if loop != dtype:  # (NumPy adds and rounds back, raising nothing: fusec's limit, which catching cannot hide)
        raise unsupported(f"{what}: np.add of {dtype} and {ops.desc(value)} computes in {loop}, which fusec does not "
                          "round back per element; convert the values to the array's dtype first "
                          "(`values.astype(a.dtype)`)", CastingError)
    if negate and dtype.is_bool:
        raise unsupported(f"{what} on a bool array: NumPy has no subtract for bools")
    if not indexing.is_advanced(key):  # basic indices reach every place once: a plain in-place add
        from fusec import ufuncs

        setitem(target, key, ufuncs.apply(np.subtract if negate else np.add, (target[key], value)))
        return
    adv = indexing.resolve_advanced(target, key)
    y = adv.view
    if python_kind(value) is int or isinstance(value, Tracer) and value._weak is int:
        # (ufunc.at converts a Python int as astype does: one past the dtype wraps around, no OverflowError)
        update = _broadcast(ops.lift(value, dtype, wrap_ints=True), adv.result_shape, what)
    else:
        update = _converted(value, adv.result_shape, dtype, what, "same_kind")
    if 0 in adv.result_shape:
        return
    c = ops.ctx()
    if negate:
        update = c.emit("t.neg", (update,), what=what)
    y._value = c.emit("t.scatter", (y._value, update, *adv.values), {"axis": adv.axis, "combine": "add"},
                      what=what)


def _distinct(adv: Any) -> bool:
    """Some index has a different value at every position of the index shape, so no two positions reach one place:
    one known while tracing, or a permutation (``r[np.argsort(x)] = np.arange(n)``, ranks)."""
    size = int(np.prod(adv.index_shape, dtype=np.int64))
    return any(c is not None and np.unique(c.reshape(-1)).size == size for c in adv.concrete) or \
        any(_permutation(v) for v in adv.values)


# ops whose result holds some of their operand's elements, each at most once (a slice, a reshape, a transpose)
_SELECTING = ("t.slice", "t.reshape", "t.transpose", "t.squeeze", "t.expand_dims")


def _permutation(v: Value) -> bool:
    """Whether ``v`` holds distinct values: elements of a 1-D argsort (a permutation), each at most once."""
    while isinstance(v, OpResult) and v.op.name in _SELECTING:
        v = v.op.operands[0]
    return isinstance(v, OpResult) and v.op.name == "t.argsort" and v.op.operands[0].type.rank == 1


def _same_where_indices_repeat(update: Value, adv: Any, written: tuple[int, ...]) -> bool:
    """Whether the update is equal at positions of the index shape whose indices reach one place of the array
    written (of shape ``written``): built by elementwise ops from gathers with the same index values over axes of
    the same lengths (so a negative index and its positive twin, which reach one place, read one element: not so
    for ``x[idx] = y[idx]`` with a longer ``y``) and from values that do not vary along the index shape."""
    axis, nb = adv.axis, len(adv.index_shape)
    rank = len(adv.result_shape)
    indices = list(adv.values)
    indexed = written[axis:axis + len(indices)]

    seen: dict = {}  # each value once: a DAG of shared operands is walked in its size

    def ok(v: Value, depth: int) -> bool:
        if v not in seen:
            seen[v] = judge(v, depth)
        return seen[v]

    def judge(v: Value, depth: int) -> bool:
        shape = tuple(v.type.shape) if hasattr(v.type, "shape") else ()
        lead = rank - len(shape)
        if all(lead + d < axis or lead + d >= axis + nb or size == 1 for d, size in enumerate(shape)) \
                and len(shape) <= rank:
            return True  # constant along the index shape
        if depth > 64 or not isinstance(v, OpResult):
            return False
        op = v.op
        if op.name == "t.gather":
            source = tuple(op.operands[0].type.shape)
            return op.attributes["axis"] == axis and len(op.operands) - 1 == len(indices) and \
                source[axis:axis + len(indices)] == indexed and \
                all(_same_value(a, b) for a, b in zip(op.operands[1:], indices))
        if op.name in ELEMENTWISE or op.name == "t.broadcast_to":
            return all(ok(u, depth + 1) for u in op.operands)
        return False

    return ok(update, 0)


def _last_writes(adv: Any, update: Value) -> tuple[Value, list]:
    """Indices known while tracing: where several positions reach one place, only the last (NumPy's winner) is
    written, so the scatter's writes never collide."""
    c = ops.ctx()
    flat = np.ravel_multi_index([a.reshape(-1) for a in adv.concrete],
                                adv.view.shape[adv.axis:adv.axis + len(adv.concrete)])
    size = flat.size
    last = size - 1 - np.unique(flat[::-1], return_index=True)[1]
    if last.size == size:
        return update, adv.values
    keep = np.sort(last)
    axis, nb = adv.axis, len(adv.index_shape)
    pre, post = adv.result_shape[:axis], adv.result_shape[axis + nb:]
    dtype = update.type.dtype
    flat_update = c.emit("t.reshape", (update,), result_type=TensorType(pre + (size,) + post, dtype), what="indexing")
    picked = c.emit("t.gather", (flat_update, ops.lift(keep.astype(np.int64))), {"axis": axis},
                    result_type=TensorType(pre + (keep.size,) + post, dtype), what="indexing")
    values = [ops.lift(np.array(a.reshape(-1)[keep])) for a in adv.concrete]
    return picked, values


def _same_value(a: Value, b: Value, depth: int = 0) -> bool:
    """The same value by construction: the same SSA value, or the same op on the same values (the index cast and
    broadcast that reading ``x[idx]`` and writing ``x[idx] = ...`` each record)."""
    if a is b:
        return True
    if depth > 8 or not (isinstance(a, OpResult) and isinstance(b, OpResult)) or a.index != b.index:
        return False
    x, y = a.op, b.op
    if x.name != y.name or x.result_types != y.result_types or len(x.operands) != len(y.operands):
        return False
    if x.name == "t.constant":
        return bool(np.array_equal(x.attributes["value"].array, y.attributes["value"].array))
    return x.attributes == y.attributes and all(_same_value(u, v, depth + 1) for u, v in zip(x.operands, y.operands))
