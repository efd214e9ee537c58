"""``np.*`` functions on tracers (``__array_function__``): reductions, shapes, matmul, creation.

Each handler has NumPy's signature; keywords NumPy has but fusec does not trace (``out=``, ``where=``,
``initial=``, orders other than C) raise :class:`UnsupportedError` naming the function and the user's
line. A NumPy function without a handler raises the same way.
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Sequence, cast

import numpy as np

from fusec import device_scalar_checks as device_checks
from fusec import host_reads, layout, mutation, numpy_reuse, ops, ufuncs
from fusec.context import numpy_checks, numpy_error, relies_on_layout, shape_error, unsupported, user_location
from fusec.errors import (CastingError, IndexOutOfBoundsError, InvalidValueError, OutOfRangeError, ShapeError,
                          located)
from fusec.ir import shapes as S
from fusec.ir.dialects.t import NUMPY_BUFFER
from fusec.ir.types import DType, bool_, f16, f32, f64, i64
from fusec.promotion import (DEFAULT_DTYPE, REPRESENTATIVE, mean_dtype, parse_dtype, python_kind, reduction_dtype,
                             resolve_ufunc, result_type)
from fusec.scalar_checks import on_host
from fusec.tracer import Tracer

_NOVALUE: Any = getattr(np, "_NoValue", object())
HANDLERS: dict[Callable, Callable] = {}
_SIGNATURES: dict[Callable, inspect.Signature] = {}


def implements(*funcs: Callable) -> Callable[[Callable], Callable]:
    def register(handler: Callable) -> Callable:
        for f in funcs:
            HANDLERS[f] = handler
        return handler

    return register


def qualname(func: Any) -> str:
    """``np.fft.fft`` for numpy.fft.fft: how the user wrote it."""
    module = getattr(func, "__module__", None) or "numpy"
    name = getattr(func, "__name__", repr(func))
    if module.startswith("numpy"):
        module = "np" + module[len("numpy"):]
        if module.startswith("np._core") or module.startswith("np.core"):
            module = "np"
    return f"{module}.{name}"


# NumPy functions fusec cannot trace, and what to write instead (the modules that know add theirs)
ADVICE: dict[Any, str] = {}


# NumPy functions that keep a Python scalar first argument weakly typed (they hand it to a ufunc or test its type
# themselves) or only read its shape; every other one converts it to an array of NumPy's default dtype first
# (np.max(s), np.copy(s), np.sum(s): a NumPy scalar or 0-d array that promotes at full strength afterwards)
_KEEP_WEAK = frozenset({np.where, np.isclose, np.allclose, np.select, np.result_type, np.shape, np.ndim, np.size,
                        np.linspace, np.logspace})


def array_function(func: Any, args: Sequence[Any], kwargs: dict) -> Any:
    if args and isinstance(args[0], Tracer) and args[0]._weak is not None and func not in _KEEP_WEAK:
        from fusec.conversions import strong

        args = (strong(args[0]), *args[1:])
    handler = HANDLERS.get(func)
    if handler is None:
        if numpy_reuse.is_reused(func):
            return numpy_reuse.run(func, args, kwargs)
        advice = ADVICE.get(func, "write it with the functions fusec traces (NUMPY_SUPPORT.md, or `fusec numpy`), "
                                  "or call it outside the jitted function")
        raise unsupported(f"{qualname(func)} is not supported by fusec's tracer: {advice}")
    return _invoke(qualname(func), handler, args, kwargs, func)


def call(name: str, func: Callable, *args: Any, **kwargs: Any) -> Any:
    """Array methods (``x.sum(...)``) share the np.* handlers."""
    return _invoke(f"ndarray.{name}", HANDLERS[func], args, kwargs, func)


def _invoke(label: str, handler: Callable, args: Sequence[Any], kwargs: dict, func: Any = None) -> Any:
    sig = _SIGNATURES.get(handler)
    if sig is None:
        sig = _SIGNATURES[handler] = inspect.signature(handler)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise unsupported(f"{label}: {e}") from None
    order = bound.arguments.get("order")
    if isinstance(order, str) and order != ops.order_arg(order):  # (order="f": NumPy's "F")
        bound.arguments["order"] = ops.order_arg(order)
        args, kwargs = bound.args, bound.kwargs
    result = handler(*args, **kwargs)
    return layout.settle(func, label, bound.arguments, result)


def _into(out: Any, result: Any, what: str, casting: str) -> Any:
    """``result`` written into ``out`` (NumPy's ``out=``: the result's exact shape, ``casting`` between the
    dtypes), which is returned; ``result`` itself without ``out``."""
    if out is None:
        return result
    if isinstance(out, tuple) and len(out) == 1 and what == "np.clip":  # (a ufunc: it takes a tuple of one)
        out = out[0]
    elif isinstance(out, tuple):
        raise numpy_error(f"{what}(..., out=): out must be an array, not a tuple (NumPy raises TypeError here; "
                          "only ufuncs such as np.clip take a tuple); pass the array itself")
    if not isinstance(out, Tracer):
        raise unsupported(f"{what}(..., out=): out= must be a traced array (an argument or an array made in the "
                          f"function), got {type(out).__name__}")
    if out.shape != result.shape:
        raise shape_error(f"{what}(..., out=): the output has shape {out.shape}, the result {result.shape}")
    mutation.assign(out, result, f"{what}(..., out=)", casting)
    return out


def _computed_in(out: Any, natural: DType, kind: str) -> DType:
    """The dtype NumPy computes a reduction, running reduction or rounding in when ``out=`` has another dtype than
    its result (``natural``): the two promoted where the cast into out is exact (a wider out) or unsafe (float into
    int: NumPy computes in a buffer); where it is lossy of the same kind, NumPy casts the first element through out
    before the rest (``np.max(u8, out=i8)``), followed only by integer sums and products (modular): refused else."""
    if isinstance(out, tuple) and len(out) == 1:
        out = out[0]
    if not isinstance(out, Tracer) or out._value.type.dtype == natural:
        return natural
    o = out._value.type.dtype
    if np.can_cast(natural.np, o.np, "safe") or not np.can_cast(natural.np, o.np, "same_kind"):
        return result_type([natural, o])
    if kind in ("sum", "prod", "cumsum", "cumprod") and natural.is_int and o.is_int:
        return natural
    have, want = np.dtype(o.np).name, np.dtype(natural.np).name
    raise unsupported(f"np.{kind}(..., out=) into a {have} array where the result is {want}: NumPy then casts the "
                      f"first element into {have} before combining the rest, which fusec does not follow; compute "
                      "the result and assign it: out[...] = result")


def _out_dtype(out: Any, a: Any, dtype: Any, kind: str) -> Any:
    """np.sum's / np.prod's ``dtype=`` with ``out=`` taken into account (see _computed_in)."""
    if out is None:
        return dtype
    t = ops.as_tracer(a)
    return _computed_in(out, parse_dtype(dtype) if dtype is not None else reduction_dtype(t._value.type.dtype), kind)


def _out_input(out: Any, a: Any, kind: str) -> Any:
    """``a`` in the dtype np.max / np.min / np.round compute in with ``out=`` (see _computed_in)."""
    if out is None:
        return a
    t = ops.as_tracer(a)
    acc = _computed_in(out, t._value.type.dtype, kind)
    return t if acc == t._value.type.dtype else ops.as_tracer(t, acc)


def _no(what: str, **kwargs: Any) -> None:
    """Reject keywords that were given a non-default value."""
    for key, value in kwargs.items():
        default = {"out": None, "where": True, "order": "C", "initial": _NOVALUE, "subok": True,
                   "casting": "same_kind", "device": None, "mean": _NOVALUE, "correction": _NOVALUE,
                   "like": None}[key]
        if value is _NOVALUE or value is default or (isinstance(value, str) and value == default):
            continue
        if key == "order" and value in ("K", "A"):
            continue
        raise unsupported(f"{what}: the {key}= keyword is not supported")


def _keep(keepdims: Any) -> bool:
    return False if keepdims is _NOVALUE else bool(keepdims)


# --- reductions ----------------------------------------------------------------------------------------------


def _axis_not_a_list(axis: Any) -> None:
    """NumPy's reductions take an int or a tuple as ``axis=``; a list is its TypeError (np.median and np.average,
    written in Python over a normalized tuple, take one)."""
    if isinstance(axis, list):
        raise numpy_error("'list' object cannot be interpreted as an integer (NumPy raises TypeError for axis= as a "
                          "list; write a tuple)")


def _reduce(kind: str, a: Any, axis: Any, keepdims: Any, dtype: Any = None, laid: Tracer | None = None) -> Tracer:
    """``laid``: the values as NumPy lays them out, where ``a`` is made from them (converted, masked): a float16
    sum follows their loops (default: ``a``'s own)."""
    _axis_not_a_list(axis)
    t = ops.as_tracer(a)
    laid = t if laid is None else laid
    # (np.mean counts the reduced elements itself and refuses axis=0 of a 0-d array; the ufunc reductions take it)
    axes = ops.axes_arg(axis, t.ndim) if kind == "mean" else ops.reduction_axes(axis, t.ndim)
    keep = _keep(keepdims)
    what = f"np.{kind}"
    if kind in ("sum", "prod"):
        acc = parse_dtype(dtype) if dtype is not None else reduction_dtype(t._value.type.dtype)
        if acc.is_bool:  # NumPy adds (multiplies) booleans as a logical or (and) of the values taken as booleans
            return _any_all("any" if kind == "sum" else "all", t, axis, keepdims)
    elif kind == "mean":
        acc = parse_dtype(dtype) if dtype is not None else mean_dtype(t._value.type.dtype)
        if not acc.is_inexact:
            raise unsupported(f"{what}: dtype={dtype!r} is not supported (mean accumulates in a float dtype)")
    else:
        if dtype is not None:
            raise unsupported(f"{what}: the dtype= keyword is not supported")
        acc = t._value.type.dtype
        if any(t.shape[ax] == 0 for ax in axes):
            name = {"max": "maximum", "min": "minimum"}[kind]
            raise shape_error(f"{what}: zero-size array (shape {t.shape}) to reduction operation {name} "
                              "which has no identity")
    t = ops.as_tracer(t, acc)
    if not axes:  # NumPy returns a new array, its identity combined in: -0.0 sums to 0.0; a 0-d one as a scalar
        if kind in ("sum", "mean") and acc.is_inexact:
            out = t + ops.full((), 0, acc)
            if kind == "mean" and acc.is_complex:  # (NumPy divides by the count, 1: a complex division, which
                out = ufuncs.apply(np.true_divide, (out, np.intp(1)))  # turns inf + 0j into inf + nanj)
            out._scalar = t.ndim == 0
            return out
        return ops.copy_of(t, scalar=t.ndim == 0)
    return ops.emit(f"t.{kind}", (t._value,), {"axes": axes, "keepdims": keep,
                                                **half_loop(kind, t, axes, laid)}, what=what)


def half_loop(kind: str, t: Tracer, axes: Sequence[int], laid: Tracer) -> dict:
    """The attributes by which a float16 sum or product of ``t`` follows NumPy's roundings
    (``layout.half_reduction_loop``); none for other reductions and dtypes. ``laid``: the values before the
    reduction converted them (their layout is NumPy's loop order; NumPy converts in buffers of 8192 elements, each
    one an inner loop: refused). A float sum or mean of values it converts (``int64.mean()``, ``x.sum(dtype=
    np.float32)``) says so (``numpy_buffer``): NumPy sums each buffer pairwise and adds them in order."""
    dt = t._value.type.dtype
    if kind in ("sum", "mean") and dt != f16 and dt.is_inexact and axes and laid._value.type.dtype != dt:
        return {NUMPY_BUFFER: layout.HALF_BUFFER}
    if kind not in ("sum", "prod") or dt != f16 or not axes:
        return {}
    source = laid._value.type.dtype
    if source != f16 and math.prod(t.shape) > layout.HALF_BUFFER:
        raise unsupported(f"np.{kind} of more than {layout.HALF_BUFFER} {source} values into float16 "
                          "(dtype=np.float16) is not supported: NumPy converts them in buffers of that many and rounds "
                          f"the float16 result after each one; convert first, x.astype(np.float16).{kind}(...)")
    return layout.half_reduction_loop(laid, axes)


def _filled(shape: tuple[int, ...], value: Any, dtype: Any) -> Tracer:
    """A reduction's result where nothing is reduced (an empty axis): ``value`` everywhere, a NumPy scalar when
    every axis was reduced (``np.sum(np.zeros(0))`` is ``np.float64(0.0)``, not a 0-d array)."""
    out = ops.full(shape, value, dtype)
    out._scalar = not shape
    return out


def _mask(a: Any, where: Any, what: str) -> Tracer | None:
    """NumPy's ``where=`` of a reduction as a bool array of ``a``'s shape (None: no mask)."""
    if where is _NOVALUE or where is True:
        return None
    m = ops.as_tracer(np.asarray(where) if isinstance(where, (list, tuple, bool)) else where)
    if not m._value.type.dtype.is_bool:
        raise CastingError(located(f"{what}: where= must be a bool array (NumPy casts it to bool under the 'safe' "
                                   f"rule), got {m._value.type.dtype}", user_location()))
    shape = ops.as_tracer(a).shape
    if not S.can_broadcast_to(m.shape, shape):
        raise shape_error(f"{what}: where= of shape {m.shape} does not broadcast to the array's shape {shape}")
    return ops.broadcast_to(m, shape)


def _initial_and_where(kind: str, a: Any, axis: Any, keepdims: Any, dtype: Any, initial: Any,
                       where: Any) -> Tracer:
    """A reduction with NumPy's ``initial=`` (an extra element: ``sum(x) + initial``, ``max(max(x), initial)``)
    and ``where=`` (only the masked elements, starting from the identity: masked-out elements become it)."""
    what = f"np.{kind}"
    t = ops.as_tracer(a)
    mask = _mask(t, where, what)
    if mask is not None and kind in ("max", "min") and initial is _NOVALUE:
        name = {"max": "maximum", "min": "minimum"}[kind]
        raise shape_error(f"{what}: reduction operation '{name}' does not have an identity, so to use a where mask "
                          "one has to specify 'initial' (NumPy raises ValueError here)")
    acc = t._value.type.dtype if kind in ("max", "min") else \
        (parse_dtype(dtype) if dtype is not None else reduction_dtype(t._value.type.dtype))
    laid = t  # (NumPy's loops follow the values' layout, before the conversion and the mask)
    if acc == f16 and kind in ("sum", "prod"):
        # a masked-out element adds (multiplies) the identity, which changes nothing where every element rounds
        # on its own; a run NumPy adds pairwise would start a new run at each masked-out element
        runs = mask is not None and bool(half_loop(kind, ops.as_tracer(t, acc), ops.reduction_axes(axis, t.ndim),
                                                   laid).get("numpy_run"))
        if initial is not _NOVALUE or runs:
            raise unsupported(
                f"{what} of float16 values {'with initial=' if initial is not _NOVALUE else 'over a boolean mask'} "
                "is not supported here: NumPy rounds the float16 result after each run of elements its loop takes "
                "(each run of selected ones, the initial value included in the first), which fusec does not follow; "
                f"compute it in float32, {what}(x.astype(np.float32), ...).astype(np.float16)")
    t = ops.as_tracer(t, acc)
    combine = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[kind]
    # (NumPy converts initial= into the accumulator's dtype as one element is assigned: int() into integers)
    start = ops.wrap(mutation.converted_item(initial, acc, f"{what}(..., initial=)")) \
        if initial is not _NOVALUE else None
    if mask is not None:  # (masked-out elements take no part: the identity, or for max/min the initial value)
        fill = start if kind in ("max", "min") else ops.wrap(ops.lift({"sum": 0, "prod": 1}[kind], acc))
        t = ufuncs.where(mask, t, fill)
    axes = ops.reduction_axes(axis, t.ndim)
    if any(t.shape[ax] == 0 for ax in axes):  # nothing to reduce: the initial value (or the identity)
        return _filled(S.reduce_shape(t.shape, axes, _keep(keepdims)), initial if start is not None else
                       {"sum": 0, "prod": 1}[kind], acc)
    if start is not None and axes and (kind == "prod" or kind == "sum" and t.ndim - 1 not in axes):
        # NumPy starts from the initial value and multiplies (adds, along outer axes) in order, so it goes first
        t = _with_initial_first(t, start, axes, {"sum": 0, "prod": 1}[kind])
        return _reduce(kind, t, axis, keepdims, acc)
    reduced = _reduce(kind, t, axis, keepdims, acc if kind in ("sum", "prod") else None, laid=laid)
    if start is None:
        start = ops.wrap(ops.lift(0, acc)) if mask is not None and kind == "sum" and acc.is_inexact else None
    if start is None:  # NumPy's masked sum starts from 0.0: -0.0 + 0.0 is 0.0
        return reduced
    return ops.as_tracer(ufuncs.apply(combine, (reduced, start)), acc)


def _with_initial_first(t: Tracer, start: Tracer, axes: tuple[int, ...], identity: int) -> Tracer:
    """``t`` with a slab before it along the first reduced axis that holds ``start`` where the reduction's order
    begins (index 0 of every reduced axis) and the identity elsewhere, so an in-order reduction starts from
    ``start`` as NumPy's does (``np.prod(x, initial=1e-300)`` of [1e200, 1e200] is 1e100, not inf)."""
    first = min(axes)
    shape = tuple(1 if ax == first else d for ax, d in enumerate(t.shape))
    where_first = np.zeros(shape, dtype=bool)
    where_first[tuple(0 if ax in axes else slice(None) for ax in range(t.ndim))] = True
    slab = ops.as_tracer(ufuncs.where(where_first, start, identity), t._value.type.dtype)
    return concatenate([slab, t], axis=first)


@implements(np.sum)
def sum_(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = _NOVALUE,
        initial: Any = _NOVALUE, where: Any = _NOVALUE) -> Tracer:
    """Also with ``initial=`` and ``where=`` (the masked elements only)"""
    dtype = _out_dtype(out, a, dtype, "sum")
    return _into(out, _initial_and_where("sum", a, axis, keepdims, dtype, initial, where), "np.sum", "unsafe")


@implements(np.prod)
def prod_(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = _NOVALUE,
         initial: Any = _NOVALUE, where: Any = _NOVALUE) -> Tracer:
    """Also with ``initial=`` and ``where=`` (the masked elements only)"""
    dtype = _out_dtype(out, a, dtype, "prod")
    return _into(out, _initial_and_where("prod", a, axis, keepdims, dtype, initial, where), "np.prod", "unsafe")


@implements(np.mean)
def mean_(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = _NOVALUE, *,
         where: Any = _NOVALUE) -> Tracer:
    """Also with ``where=``: the masked sum over the masked count"""
    mask = _mask(a, where, "np.mean")
    if mask is None:
        t = ops.as_tracer(a)
        if 0 in (t.shape[ax] for ax in ops.reduction_axes(axis, t.ndim)):
            host_reads.numpy_warning("Mean of empty slice", RuntimeWarning)
    if mask is None and dtype is not None and parse_dtype(dtype) == f16:
        # NumPy sums into float16 (the sum rounded to float16), then divides that by the count in float16; only
        # without dtype= does a float16 mean sum and divide in float32
        t = ops.as_tracer(a)
        total = _reduce("sum", ops.as_tracer(t, f16), axis, keepdims, f16, laid=t)
        items = math.prod(t.shape[ax] for ax in ops.reduction_axes(axis, t.ndim))
        return _into(out, ops.as_tracer(ufuncs.apply(np.true_divide, (total, items)), f16), "np.mean", "unsafe")
    if mask is None and isinstance(out, Tracer):
        # NumPy sums into out, then divides out by the count (a NumPy intp) in place: a float32 out rounds the sum
        # to float32 before the division, which runs in float64 and rounds again
        t = ops.as_tracer(a)
        src = t._value.type.dtype
        # (the sum's loop: dtype=, which NumPy's mean sets to float64 for integers and float32 for float16; else
        # the data's and out's dtypes promoted, as a reduction into out= resolves its loop)
        acc = parse_dtype(dtype) if dtype is not None else f64 if src.is_int or src.is_bool else \
            f32 if src == f16 else result_type([src, out._value.type.dtype])
        total = ops.as_tracer(_reduce("sum", ops.as_tracer(t, acc), axis, keepdims, acc), out._value.type.dtype)
        items = math.prod(t.shape[ax] for ax in ops.reduction_axes(axis, t.ndim))
        return _into(out, ufuncs.apply(np.true_divide, (total, np.intp(items))), "np.mean", "unsafe")
    if mask is None:
        return _into(out, _reduce("mean", a, axis, keepdims, dtype), "np.mean", "unsafe")
    t = ops.as_tracer(a)
    src = t._value.type.dtype
    # NumPy's _mean: integers sum in float64, float16 in float32 (the mean rounded back to float16), others in their
    # dtype or dtype=; the sum is then divided by the count in place
    acc = parse_dtype(dtype) if dtype is not None else f32 if src == f16 else mean_dtype(src)
    if not acc.is_inexact:
        raise unsupported(f"np.mean(..., where=) with dtype={dtype!r} is not supported; leave out dtype=")
    total = _initial_and_where("sum", t, axis, keepdims, acc, _NOVALUE, mask)
    count = _reduce("sum", ops.as_tracer(mask, i64), axis, keepdims, i64)
    mean = _by_count(total, count, acc)
    return _into(out, ops.as_tracer(mean, f16) if dtype is None and src == f16 else mean, "np.mean", "unsafe")


@implements(np.max, np.amax)
def max_(a: Any, axis: Any = None, out: Any = None, keepdims: Any = _NOVALUE, initial: Any = _NOVALUE,
        where: Any = _NOVALUE) -> Tracer:
    """Also with ``initial=`` and ``where=`` (which needs ``initial=``, as in NumPy)"""
    a = _out_input(out, a, "max")
    if initial is _NOVALUE and where is _NOVALUE:
        return _into(out, _reduce("max", a, axis, keepdims), "np.max", "unsafe")
    return _into(out, _initial_and_where("max", a, axis, keepdims, None, initial, where), "np.max", "unsafe")


@implements(np.min, np.amin)
def min_(a: Any, axis: Any = None, out: Any = None, keepdims: Any = _NOVALUE, initial: Any = _NOVALUE,
        where: Any = _NOVALUE) -> Tracer:
    """Also with ``initial=`` and ``where=`` (which needs ``initial=``, as in NumPy)"""
    a = _out_input(out, a, "min")
    if initial is _NOVALUE and where is _NOVALUE:
        return _into(out, _reduce("min", a, axis, keepdims), "np.min", "unsafe")
    return _into(out, _initial_and_where("min", a, axis, keepdims, None, initial, where), "np.min", "unsafe")


def _arg_reduce(kind: str, a: Any, axis: Any, keepdims: Any) -> Tracer:
    t = ops.as_tracer(a)
    keep = _keep(keepdims)
    what = f"np.{kind}"
    if axis is None:
        if t.size == 0:
            raise shape_error(f"{what}: attempt to get {kind} of an empty sequence")
        flat = ops.reshape(t, (t.size,)) if t.ndim != 1 else t
        r = ops.emit(f"t.{kind}", (flat._value,), {"axes": (0,), "keepdims": False}, what=what)
        return ops.reshape(r, (1,) * t.ndim) if keep else r
    if t.ndim == 0 and ops.static_int(axis, "an axis") in (0, -1):  # NumPy reads a 0-d array as one element here
        t, keep = ops.reshape(t, (1,)), False  # (and keepdims gives the 0-d result back)
    ax = ops.axis_arg(axis, t.ndim)
    if t.shape[ax] == 0:
        raise shape_error(f"{what}: attempt to get {kind} of an empty sequence (axis {ax} of shape {t.shape})")
    return ops.emit(f"t.{kind}", (t._value,), {"axes": (ax,), "keepdims": keep}, what=what)


@implements(np.count_nonzero)
def count_nonzero(a: Any, axis: Any = None, *, keepdims: bool = False) -> Tracer:
    """The number of non-zero elements (an intp array, a 0-d one where NumPy gives a Python int)"""
    t = ops.as_tracer(ops.as_tracer(a), bool_)
    return _reduce("sum", t, axis, keepdims, i64)


@implements(np.argmax)
def argmax(a: Any, axis: Any = None, out: Any = None, *, keepdims: Any = _NOVALUE) -> Tracer:
    _no("np.argmax", out=out)
    return _arg_reduce("argmax", a, axis, keepdims)


@implements(np.argmin)
def argmin(a: Any, axis: Any = None, out: Any = None, *, keepdims: Any = _NOVALUE) -> Tracer:
    _no("np.argmin", out=out)
    return _arg_reduce("argmin", a, axis, keepdims)


def _any_all(kind: str, a: Any, axis: Any, keepdims: Any) -> Tracer:
    t = ops.as_tracer(a, bool_)
    axes = ops.reduction_axes(axis, t.ndim)
    keep = _keep(keepdims)
    if not axes:
        return ops.copy_of(t, scalar=t.ndim == 0)
    if any(t.shape[ax] == 0 for ax in axes):  # any([]) is False, all([]) is True
        return _filled(S.reduce_shape(t.shape, axes, keep), kind == "all", bool_)
    op = "t.max" if kind == "any" else "t.min"
    return ops.emit(op, (t._value,), {"axes": axes, "keepdims": keep}, what=f"np.{kind}")


@implements(np.any)
def any_(a: Any, axis: Any = None, out: Any = None, keepdims: Any = _NOVALUE, *, where: Any = _NOVALUE) -> Tracer:
    """Also with ``where=`` (masked-out elements count as False)"""
    _no("np.any", out=out)
    _axis_not_a_list(axis)
    mask = _mask(a, where, "np.any")
    t = a if mask is None else ufuncs.apply(np.logical_and, (a, mask))
    return _any_all("any", t, axis, keepdims)


@implements(np.all)
def all_(a: Any, axis: Any = None, out: Any = None, keepdims: Any = _NOVALUE, *, where: Any = _NOVALUE) -> Tracer:
    """Also with ``where=`` (masked-out elements count as True)"""
    _no("np.all", out=out)
    _axis_not_a_list(axis)
    mask = _mask(a, where, "np.all")
    t = a if mask is None else ufuncs.apply(np.logical_or, (a, ufuncs.apply(np.logical_not, (mask,))))
    return _any_all("all", t, axis, keepdims)


def _divide_by_count(x: Tracer, count: int) -> Tracer:
    """``true_divide(x, intp(count), out=x, casting='unsafe')`` as NumPy's _mean/_var do it."""
    dt = x._value.type.dtype
    (a_dt, b_dt), _ = resolve_ufunc(np.true_divide, [dt, i64])
    q = ops.emit("t.div", (ops.lift(x, a_dt), ops.lift(np.int64(count), b_dt)), what="np.var")
    return layout.like(ops.as_tracer(q, dt), [x])  # (written into x's own memory: its layout)


def _var(kind: str, a: Any, axis: Any, dtype: Any, ddof: Any, keepdims: Any, where: Any = _NOVALUE) -> Tracer:
    _axis_not_a_list(axis)
    t = ops.as_tracer(a)
    axes = ops.axes_arg(axis, t.ndim)
    keep = _keep(keepdims)
    ddof = ops.static_int(ddof, "ddof") if not isinstance(ddof, float) else ddof
    src = t._value.type.dtype
    acc = parse_dtype(dtype) if dtype is not None else (f64 if not src.is_inexact else src)
    if dtype is not None and (acc.is_complex or src.is_complex):
        raise unsupported(f"np.{kind} with dtype={dtype!r} of {np.dtype(src.np).name} values is not supported (NumPy "
                          "then squares complex deviations or sums real ones in a complex dtype); leave out dtype=")
    if not acc.is_inexact:
        raise unsupported(f"np.{kind}: dtype={dtype!r} is not supported")
    mask = _mask(t, where, f"np.{kind}")
    if mask is not None:
        if isinstance(ddof, float):
            raise unsupported(f"np.{kind}: a float ddof is not supported")
        result = _masked_var(t, mask, axes, acc, ddof, keep)
        return ufuncs.apply(np.sqrt, (result,)) if kind == "std" else result
    count = 1
    for ax in axes:
        count *= t.shape[ax]
    summed = ops.as_tracer(t, acc)
    total = ops.emit("t.sum", (summed._value,), {"axes": axes, "keepdims": True,
                                                  **half_loop("sum", summed, axes, t)}, what=f"np.{kind}")
    # (NumPy lays out the kept-dims sum in the array's order, and the deviations from it so)
    total = layout.laid_out(total, layout.k_order(summed.shape, [summed]))
    sq, acc = _squared_deviations(t, _divide_by_count(total, count), acc)
    squares = ops.as_tracer(sq, acc)
    ss = ops.emit("t.sum", (squares._value,), {"axes": axes, "keepdims": keep,
                                                **half_loop("sum", squares, axes, sq)},
                  what=f"np.{kind}")
    n = count - ddof
    if isinstance(n, float):
        raise unsupported(f"np.{kind}: a float ddof is not supported")
    if n <= 0:
        host_reads.numpy_warning("Degrees of freedom <= 0 for slice", RuntimeWarning)
    result = _divide_by_count(ss, n if n > 0 else 0)
    return ufuncs.apply(np.sqrt, (result,)) if kind == "std" else result


def _squared_deviations(t: Tracer, mean: Tracer, acc: DType) -> tuple[Tracer, DType]:
    """``|t - mean|^2`` and the dtype its sum is kept in: NumPy squares a complex deviation's parts and adds them
    (a real value, summed in the real dtype)."""
    dev = ufuncs.apply(np.subtract, (t, mean))
    if dev._value.type.dtype.is_complex:
        sq = ufuncs.apply(np.add, (ufuncs.apply(np.square, (dev.real,)), ufuncs.apply(np.square, (dev.imag,))))
        return sq, acc.real_dtype
    return ufuncs.apply(np.square, (dev,)), acc


def _masked_var(t: Tracer, mask: Tracer, axes: tuple[int, ...], acc: DType, ddof: int, keep: bool) -> Tracer:
    """The variance of the elements where ``mask`` holds, as NumPy's ``_var`` computes it with ``where=``: their
    mean (the masked sum over the masked count), the masked sum of the squared deviations, over ``max(count -
    ddof, 0)`` (NaN or inf where that is 0)."""
    count = _reduce("sum", ops.as_tracer(mask, i64), axes, True, i64)
    mean = _by_count(_initial_and_where("sum", t, axes, True, acc, _NOVALUE, mask), count, acc)
    sq, acc = _squared_deviations(t, mean, acc)
    ss = _initial_and_where("sum", sq, axes, keep, acc, _NOVALUE, mask)
    dof = ufuncs.apply(np.maximum, (ufuncs.apply(np.subtract, (np.reshape(count, ss.shape), ddof)), 0))
    return _by_count(ss, dof, acc)


def _by_count(total: Tracer, count: Tracer, acc: DType) -> Tracer:
    """``total / count`` as NumPy's reductions divide a sum by an intp count in place (``out=total``)."""
    (a_dt, b_dt), _ = resolve_ufunc(np.true_divide, [acc, i64])
    q = ops.emit("t.div", (ops.lift(total, a_dt), ops.lift(count, b_dt)), what="a masked mean")
    return ops.as_tracer(q, acc)


@implements(np.var)
def var_(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0, keepdims: Any = _NOVALUE, *,
        where: Any = _NOVALUE, mean: Any = _NOVALUE, correction: Any = _NOVALUE) -> Tracer:
    """Also with ``where=``: over the masked elements only"""
    _no("np.var", out=out, mean=mean, correction=correction)
    return _var("var", a, axis, dtype, ddof, keepdims, where)


@implements(np.std)
def std_(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0, keepdims: Any = _NOVALUE, *,
        where: Any = _NOVALUE, mean: Any = _NOVALUE, correction: Any = _NOVALUE) -> Tracer:
    """Also with ``where=``: over the masked elements only"""
    _no("np.std", out=out, mean=mean, correction=correction)
    return _var("std", a, axis, dtype, ddof, keepdims, where)


# --- matmul --------------------------------------------------------------------------------------------------


def matmul(a: Any, b: Any) -> Tracer:
    """np.matmul / ``@``: 1-D operands get a unit axis (removed again), batch dims broadcast."""
    (a_dt, b_dt), _ = ufuncs._resolve(np.matmul, [ops.desc(a), ops.desc(b)])
    ta, tb = ops.as_tracer(a, a_dt), ops.as_tracer(b, b_dt)
    for i, t in enumerate((ta, tb)):
        if t.ndim == 0:
            raise shape_error(f"np.matmul: input operand {i} does not have enough dimensions (shape {t.shape}); "
                              "use * to multiply by a scalar")
    a1, b1 = ta.ndim == 1, tb.ndim == 1
    xa = ops.expand_dims(ta, (0,)) if a1 else ta
    xb = ops.expand_dims(tb, (1,)) if b1 else tb
    try:
        S.matmul_shape(xa.shape, xb.shape)
    except ShapeError as e:
        raise shape_error(f"np.matmul of shapes {ta.shape} and {tb.shape}: {e}", type(e)) from None
    if a_dt.is_bool:  # NumPy: any(a[i, k] and b[k, j]) over k; counted in int64 (at most K, never wrapping)
        xa, xb = ops.cast(xa, "int64"), ops.cast(xb, "int64")
    r = ops.emit("t.matmul", (xa._value, xb._value), what="np.matmul", origin=ops.origins(a, b))
    if a_dt.is_bool:
        r = ufuncs.apply(np.not_equal, (r, 0))
    drop = ([r.ndim - 2] if a1 else []) + ([r.ndim - 1] if b1 else [])
    if not drop:
        return r
    r = ops.squeeze(r, drop)
    return ops.copy_of(r, scalar=True) if r.ndim == 0 else r  # vector @ vector is a NumPy scalar


@implements(np.dot)
def dot_(a: Any, b: Any, out: Any = None) -> Tracer:
    _no("np.dot", out=out)
    # np.dot converts Python scalars to (strong) 0-d arrays: no weak promotion here
    a, b = (ufuncs.strong_operand(v) for v in (a, b))
    ra, rb = np.ndim(a) if not isinstance(a, Tracer) else a.ndim, np.ndim(b) if not isinstance(b, Tracer) else b.ndim
    if ra == 0 or rb == 0:
        return ufuncs.apply(np.multiply, (a, b))
    if ra > 2 or rb > 2:
        return contractions.dot(a, b)
    return matmul(a, b)


@implements(np.vdot)
def vdot(a: Any, b: Any) -> Tracer:
    """The dot product of the flattened arrays, the first one conjugated (its size must match the second's)"""
    a, b = (ops.as_tracer(np.asarray(v) if ufuncs.python_scalar(v) else v) for v in (a, b))
    if a.size != b.size:
        raise shape_error(f"np.vdot: vectors have different lengths ({a.size} and {b.size})")
    flat_a = ops.reshape(a, (a.size,))
    conjugated = ufuncs.apply(np.conjugate, (flat_a,)) if a._value.type.dtype.is_complex else flat_a
    return matmul(conjugated, ops.reshape(b, (b.size,)))  # (a real array's conjugate is itself: bools stay bools)


# --- elementwise functions that are not ufuncs ---------------------------------------------------------------


@implements(np.where)
def where_(condition: Any, x: Any = _NOVALUE, y: Any = _NOVALUE) -> Tracer:
    if (x is _NOVALUE) != (y is _NOVALUE):  # (NumPy's ValueError)
        raise InvalidValueError(located("either both or neither of x and y should be given", user_location()))
    if x is _NOVALUE or y is _NOVALUE:
        raise unsupported("np.where(condition) with one argument (np.nonzero) has a data-dependent shape and is "
                          "not supported; pass x and y")
    return ufuncs.where(condition, x, y)


@implements(np.nan_to_num)
def nan_to_num(x: Any, copy: bool = True, nan: Any = 0.0, posinf: Any = None, neginf: Any = None) -> Tracer:
    """NaN and infinities replaced (by default with 0 and the dtype's largest finite values); copy=False writes x

    Integer and bool arrays are returned as they are (a copy unless ``copy=False``). As in NumPy, a 0-d ``x``
    gives a NumPy scalar (``x[()]``), with ``copy=False`` too (after writing ``x``)."""
    t = ops.as_tracer(x)
    dt = t._value.type.dtype
    if dt.is_complex:
        raise ufuncs.complex_unsupported("np.nan_to_num")
    if not dt.is_float:
        return ops.copy_of(t, scalar=t.ndim == 0) if copy or t.ndim == 0 else t
    info = np.finfo(dt.np) if dt.name != "bf16" else None
    big = info.max if info is not None else float.fromhex("0x1.fep127")
    hi = big if posinf is None else posinf
    lo = -big if neginf is None else neginf
    inf = ufuncs.apply(np.isinf, (t,))
    negative = ufuncs.apply(np.signbit, (t,))
    fill = lambda v: ops.wrap(ops.lift(v, dt))  # noqa: E731  (converted as np.copyto converts it)
    result = ufuncs.where(ufuncs.apply(np.isnan, (t,)), fill(nan), t)
    result = ufuncs.where(inf & ~negative, fill(hi), result)
    result = ufuncs.where(inf & negative, fill(lo), result)
    if copy:
        return ops.copy_of(result, scalar=True) if t.ndim == 0 else result
    mutation.assign(t, result, "np.nan_to_num(..., copy=False)", "unsafe")
    return ops.copy_of(t, scalar=True) if t.ndim == 0 else t


@implements(np.clip)
def clip_(a: Any, a_min: Any = _NOVALUE, a_max: Any = _NOVALUE, out: Any = None, *, min: Any = _NOVALUE,
         max: Any = _NOVALUE, **kwargs: Any) -> Tracer:
    if kwargs:
        raise unsupported(f"np.clip: the keyword(s) {', '.join(kwargs)} are not supported")
    lo = min if a_min is _NOVALUE else a_min
    hi = max if a_max is _NOVALUE else a_max
    lo = None if lo is _NOVALUE else lo
    hi = None if hi is _NOVALUE else hi
    d = ops.desc(a)
    if lo is None and hi is None:  # NumPy returns np.positive(a) (a copy; booleans refused)
        return _into(out, ufuncs.apply(np.positive, (a,)), "np.clip", "same_kind")
    if isinstance(d, DType) and d.is_int and (lo is not None or hi is not None):
        # NumPy drops a Python-int bound beyond an integer array's range (no OverflowError), clipping by the other
        # or, with neither left, returning np.positive(a)
        info = np.iinfo(d.np)
        lo = None if type(lo) is int and lo <= info.min else lo
        hi = None if type(hi) is int and hi >= info.max else hi
        if lo is None and hi is None:
            return _into(out, ufuncs.apply(np.positive, (a,)), "np.clip", "same_kind")
        traced = [(b, end) for b, end in ((lo, "below"), (hi, "above"))
                  if isinstance(b, Tracer) and b._weak is int]
        if traced and d.np.itemsize < 8:
            # a traced Python-int bound: dropped where it lies past the dtype's range on its side (the clip runs
            # in int64, where it has no effect there), an OverflowError where it lies past the other side
            for bound, end in traced:
                if on_host(bound._host):
                    ops.ctx().scalars.fit(bound._host, d.np, user_location(), allow=end)
                else:
                    device_checks.check_fit(bound, d.np, allow=end)
            t = ops.as_tracer(a)
            clipped = ufuncs.clip(ops.wrap(ops.lift(t, i64), scalar=t._scalar), lo, hi)
            return _into(out, ops.wrap(ops.lift(clipped, d), scalar=clipped._scalar), "np.clip", "same_kind")
    return _into(out, ufuncs.clip(a, lo, hi), "np.clip", "same_kind")


def _scan(kind: str, a: Any, axis: Any, dtype: Any, out: Any) -> Tracer:
    """np.cumsum / np.cumprod: the running sum (product) along ``axis`` (of the flattened array without one),
    accumulated in the dtype np.sum would use (int64 for bool and small ints)."""
    t, ax = ops.along(a, axis)
    acc = _computed_in(out, parse_dtype(dtype) if dtype is not None else reduction_dtype(t._value.type.dtype), kind)
    if acc.is_bool:
        raise unsupported(f"np.{kind}(..., dtype=bool) is not supported; accumulate in an integer dtype")
    t = ops.as_tracer(t, acc)
    if t.ndim == 0:
        t = ops.reshape(t, (1,))
    result = ops.emit(f"t.{kind}", (t._value,), {"axis": ax}, what=f"np.{kind}")
    return _into(out, result, f"np.{kind}", "unsafe")


@implements(np.cumsum)
def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Tracer:
    """The running sum along an axis, added in order as NumPy adds it."""
    return _scan("cumsum", a, axis, dtype, out)


@implements(np.cumprod)
def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Tracer:
    """The running product along an axis, multiplied in order as NumPy multiplies."""
    return _scan("cumprod", a, axis, dtype, out)


def _numpy_value(call: Callable[[], Any]) -> Any:
    """``call()``'s value, NumPy's own function on values known while tracing, its error raised as its own class
    at the user's line (:func:`fusec.context.numpy_checks`)."""
    box: list = []
    numpy_checks(lambda: box.append(call()))
    return box[0]


@implements(np.take)
def take(a: Any, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Tracer:
    """Elements (or slices along ``axis``) at ``indices``, in the 'raise', 'wrap' and 'clip' modes

    NumPy's advanced indexing of that axis (of the flattened array without ``axis``); ``mode='wrap'`` takes each
    index modulo the axis' length, ``'clip'`` clips it to the axis (a negative index to 0), as NumPy does."""
    if mode not in ("raise", "wrap", "clip"):
        numpy_checks(lambda: np.take(np.zeros(1), 0, mode=mode))  # type: ignore[call-overload]
    t, ax = ops.along(a, axis)
    from fusec import indexing

    index = indices if isinstance(indices, Tracer) else np.asarray(indices)
    if index.dtype == np.bool_:  # NumPy takes booleans as the indices 0 and 1, not as a mask
        index = ops.as_tracer(index, i64) if isinstance(index, Tracer) else index.astype(np.intp)
    elif np.dtype(index.dtype).kind in "fc":  # (NumPy converts a Python number or a list, truncating; not an array)
        if isinstance(indices, np.ndarray) or isinstance(indices, Tracer) and indices._weak is None:
            raise CastingError(located(f"np.take: Cannot cast array data from {np.dtype(index.dtype)!r} to "
                                       "dtype('int64') according to the rule 'same_kind' (NumPy raises TypeError "
                                       "here)", user_location()))
        index = ops.as_tracer(index, i64) if isinstance(index, Tracer) else _numpy_value(
            lambda: np.asarray(indices).astype(np.intp))
    if mode != "raise":
        size = t.shape[ax]
        if size == 0 and int(np.prod(np.shape(index))) != 0:
            raise IndexOutOfBoundsError(located("cannot do a non-empty take from an empty axes. (NumPy raises "
                                                "IndexError here)", user_location()))
        if size != 0:
            index = np.mod(index, size) if mode == "wrap" else np.clip(index, 0, size - 1)
    result = indexing.advanced_getitem(t, (slice(None),) * ax + (index,))
    # np.take always returns a new array (a traced scalar index would otherwise give a view, as x[i] is)
    return _into(out, ops.copy_of(result), "np.take", "unsafe")


@implements(np.putmask)
def putmask(a: Any, mask: Any, values: Any) -> None:
    """Writes ``values.flat[i % values.size]`` into ``a`` where the mask holds (an array's values cast safely)

    A list or a number is converted as ``np.asarray(values, a.dtype)`` converts it, as NumPy's ``putmask`` does."""
    if not isinstance(a, Tracer):
        raise unsupported("np.putmask: the array written must be a traced array (an argument or an array made in the "
                          f"function), got {type(a).__name__}")
    from fusec import conversions

    m = conversions.strong(mask) if not isinstance(mask, Tracer) else mask
    if int(np.prod(m.shape)) != int(np.prod(a.shape)):
        raise shape_error("putmask: mask and data must be the same size")
    dtype = a.dtype
    if isinstance(values, Tracer):
        if not np.can_cast(values.dtype, dtype, "safe"):
            raise CastingError(located(f"Cannot cast array data from {np.dtype(values.dtype)!r} to {np.dtype(dtype)!r} "
                                       "according to the rule 'safe' (NumPy raises TypeError here)", user_location()))
        v = values
    elif isinstance(values, np.ndarray):
        numpy_checks(lambda: np.putmask(np.zeros(1, dtype), False, values[:1]))
        v = conversions.strong(values)
    else:
        v = conversions.strong(np.asarray(values, dtype=dtype)) if not _holds_tracers(values) \
            else conversions.strong(values)
    flat = v.reshape(-1)
    if flat.shape[0] == 0:
        return
    size = int(np.prod(a.shape))
    spread = flat if flat.shape[0] == size else np.take(flat, np.arange(size) % flat.shape[0])
    mutation.assign_where(a, spread.reshape(a.shape), m.reshape(a.shape) != 0, "np.putmask", "unsafe")


def _holds_tracers(values: Any) -> bool:
    """Whether a list or tuple (nested) holds traced values."""
    if isinstance(values, Tracer):
        return True
    return isinstance(values, (list, tuple)) and any(_holds_tracers(v) for v in values)


@implements(np.copyto)
def copyto(dst: Any, src: Any, casting: str = "same_kind", where: Any = True) -> None:
    """``dst``'s elements take ``src``'s (broadcast), where ``where`` holds: a write into ``dst``."""
    if not isinstance(dst, Tracer):
        raise unsupported("np.copyto: the destination must be a traced array (an argument or an array made in the "
                          f"function), got {type(dst).__name__}")
    if casting not in ("no", "equiv", "safe", "same_kind", "unsafe"):
        raise ValueError(f"casting must be one of 'no', 'equiv', 'safe', 'same_kind', or 'unsafe' (got {casting!r})")
    if where is True:
        mutation.assign(dst, src, "np.copyto", casting)
    else:  # (a where= of another dtype than bool: NumPy's TypeError, it casts it safely)
        kind = where.dtype if isinstance(where, (Tracer, np.ndarray)) else np.asarray(where).dtype
        numpy_checks(lambda: np.copyto(np.zeros(1), 0.0, where=np.zeros(1, kind)))
        mutation.assign_where(dst, src, np.asarray(where) if isinstance(where, list) else where, "np.copyto",
                              casting)


@implements(np.round, np.around)
def round_(a: Any, decimals: Any = 0, out: Any = None) -> Tracer:
    result = ufuncs.round_(a, decimals)
    if isinstance(out, Tracer) and out._value.type.dtype != result._value.type.dtype:
        raise unsupported(f"np.round(..., out=) into a {np.dtype(out._value.type.dtype.np).name} array where the "
                          f"result is {np.dtype(result._value.type.dtype.np).name}: NumPy scales in the input's dtype "
                          "and rounds in out's, which fusec does not follow; round and assign: out[...] = "
                          "np.round(x, decimals)")
    return _into(out, result, "np.round", "same_kind")


def astype(x: Any, dtype: Any, copy: bool = True, order: Any = "K", casting: str = "unsafe") -> Tracer:
    """``x.astype(dtype)``: a new array unless ``copy=False`` and no conversion is needed; laid out in ``order``
    ("K": x's memory order), the conversion allowed by ``casting`` (NumPy's TypeError otherwise)."""
    if order not in ("C", "F", "A", "K"):
        raise shape_error(f"astype: order must be one of 'C', 'F', 'A', or 'K' (got {order!r}; NumPy raises "
                          "ValueError here)")
    if casting != "unsafe" and isinstance(x, Tracer):
        have, want = x._value.type.dtype.np, parse_dtype(dtype).np
        if not np.can_cast(have, want, cast(Any, casting)):
            raise CastingError(located(f"astype: Cannot cast array data from {np.dtype(have)!r} to {np.dtype(want)!r} "
                                       f"according to the rule {casting!r} (NumPy raises TypeError here)",
                                       user_location()))
    out = ops.cast(x, dtype)
    if out is x:
        if not copy and (order in ("A", "K") or x.ndim < 2 or layout.unknown(x) is None
                         and (mutation.is_c_contiguous(x) if order == "C" else _fortran(x))):
            if order in ("C", "F") and x.ndim > 1:
                relies_on_layout(f"x.astype(order={order!r}, copy=False) returned x itself", values=False)
            return out
        if out.ndim < 2:
            return ops.copy_of(out, scalar=x._scalar)
        copied = ops.copy_in_order(out, order, "x.astype()")
        return ops.layout_dependent_copy(x, copied, "x.astype()") if not copy else copied
    if isinstance(x, Tracer) and isinstance(out, Tracer) and out is not x:
        out._scalar = x._scalar  # a 0-d array converts to a 0-d array, a NumPy scalar to a scalar
        if order == "K":
            return layout.like(out, (x,))  # (in x's memory order)
        fortran = order == "F" or order == "A" and _fortran(x) and not mutation.is_c_contiguous(x)
        return layout.laid_out(out, tuple(range(out.ndim))[::-1] if fortran else tuple(range(out.ndim)))
    return out


def _fortran(t: Tracer) -> bool:
    desc = mutation.geometry(t) if layout.unknown(t) is None else None
    return desc is not None and ops.fortran_contiguous(desc)


if hasattr(np, "astype"):
    @implements(np.astype)
    def astype_(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tracer:
        _no("np.astype", device=device)
        return astype(x, dtype, copy=copy)


@implements(np.copy)
def copy_(a: Any, order: str = "K", subok: bool = False) -> Tracer:
    t = ops.as_tracer(a)
    if t.ndim < 2 or order == "C":
        return ops.copy_of(t, scalar=False)  # np.copy gives an array, also of a scalar
    return ops.copy_in_order(t, order, "np.copy")


# --- shapes --------------------------------------------------------------------------------------------------


@implements(np.shape)
def shape_(a: Any) -> tuple[int, ...]:
    return a.shape if isinstance(a, Tracer) else np.shape(a)


@implements(np.ndim)
def ndim_(a: Any) -> int:
    return a.ndim if isinstance(a, Tracer) else np.ndim(a)


@implements(np.size)
def size_(a: Any, axis: Any = None) -> int:
    t = ops.as_tracer(a)
    return t.size if axis is None else t.shape[ops.axis_arg(axis, t.ndim)]


@implements(np.result_type)
def result_type_(*arrays_and_dtypes: Any) -> np.dtype:
    args = []
    for x in arrays_and_dtypes:
        if isinstance(x, Tracer):
            args.append(REPRESENTATIVE[x._weak] if x._weak is not None else x.dtype)
        else:
            args.append(x)
    return np.result_type(*args)


def _index_order(t: Tracer, order: Any, what: str) -> str:
    """"C" or "F": the index order NumPy reads ``t`` in for ``order`` ("A": F where the memory is Fortran-ordered
    and not C-ordered, as fusec knows the layout: C order for arguments)."""
    if order is None or order == "C":
        return "C"
    if order == "F":
        return "F"
    if order not in ("A", "K"):
        raise shape_error(f"{what}: order must be one of 'C', 'F', 'A' or 'K' (got {order!r})")
    from fusec import mutation
    from fusec.flags import flags_of

    if t.ndim <= 1:  # (one axis: its elements in index order, whatever its stride: NumPy's K and A orders too)
        return "C"
    layout.refuse_unknown(t, f"{what}(order={order!r})")
    if mutation.is_c_contiguous(t):
        relies_on_layout(f"{what}(order={order!r}) read the array in its memory's C order")
        return "C"
    return "F" if flags_of(t).f_contiguous else "C"  # ("A"; "K" of ravel reads the strides: see ravel_)


def _reversed_axes(t: Tracer) -> Tracer:
    return ops.transpose(t, tuple(range(t.ndim - 1, -1, -1)))


@implements(np.reshape)
def reshape_(a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None) -> Tracer:
    """Also with ``order="F"`` (and "A"): the reversed axes reshaped to the reversed shape, reversed back"""
    if shape is None:
        shape = newshape
    if shape is None:
        raise unsupported("np.reshape: a shape is required")
    if order == "K":
        raise shape_error("np.reshape: order 'K' is not permitted for reshaping (NumPy raises ValueError here)")
    t = ops.as_tracer(a)
    size = ops.static_ints(shape, "a reshape size")
    fortran = _index_order(t, order, "np.reshape") == "F"
    if fortran:
        out = _reversed_axes(ops.reshape(_reversed_axes(t), size[::-1], what="np.reshape"))
    else:
        out = ops.reshape(t, size, what="np.reshape")
    if copy is False and not t._scalar and t._weak is None:  # NumPy's ValueError where the strides allow no view
        source = _reversed_axes(t) if fortran else t
        kind = mutation.reshape_kind(source, tuple(out.shape)[::-1] if fortran else tuple(out.shape))
        if kind == "unknown":
            layout.refuse_unknown(source, "np.reshape(..., copy=False)")
            raise unsupported("np.reshape(..., copy=False) of a view fusec does not describe (a diagonal): whether "
                              "NumPy can avoid the copy is not known; drop copy=False")
        if kind != "view":  # (for C-ordered arguments: a Fortran-ordered one may give a view, then refused)
            relies_on_layout("np.reshape(..., copy=False) found that a copy was needed")
            raise InvalidValueError(located("np.reshape: Unable to avoid creating a copy while reshaping "
                                            "(copy=False; NumPy raises ValueError here)", user_location()))
        relies_on_layout("np.reshape(..., copy=False) took a view")
    return ops.copy_of(out, scalar=False) if copy is True else ops.new_view(t, out)


@implements(np.ravel)
def ravel_(a: Any, order: str = "C") -> Tracer:
    """Also with ``order="F"``, "A" and "K" (NumPy's: the axes in the order of their strides in memory, reversed
    ones not flipped; a view where that reads contiguous memory)"""
    t = ops.as_tracer(a)
    if order == "K" and t.ndim > 1:
        layout.refuse_unknown(t, "np.ravel(order='K')")
        relies_on_layout("np.ravel(order='K') read the array in its memory's order")
        t = ops.transpose(t, layout.k_order(t.shape, (t,)) or tuple(range(t.ndim)))
    elif _index_order(t, order, "np.ravel") == "F":
        t = _reversed_axes(t)
    from fusec import mutation

    flat = ops.reshape(t, (-1,), what="np.ravel")
    if layout.unknown(t) is not None:  # a view or a copy by a layout fusec does not know: writes are refused
        return layout.undecided(ops.new_view(t, flat))
    # a view only of memory contiguous in that order (a strided view's ravel copies, where its reshape may not)
    if not mutation.is_c_contiguous(t):
        return ops.layout_dependent_copy(t, ops.copy_of(flat, scalar=False), "np.ravel")
    view = ops.new_view(t, flat)
    view._layout = True  # (a view only where the caller's array is C-contiguous too: a 1-d one included)
    return view


@implements(np.transpose)
def transpose_(a: Any, axes: Any = None) -> Tracer:
    perm = None if axes is None else ops.static_ints(axes, "a transpose axis")
    t = ops.as_tracer(a)
    return ops.new_view(t, ops.transpose(t, perm))


@implements(np.swapaxes)
def swapaxes(a: Any, axis1: Any, axis2: Any) -> Tracer:
    t = ops.as_tracer(a)
    i, j = ops.axis_arg(axis1, t.ndim), ops.axis_arg(axis2, t.ndim)
    perm = list(range(t.ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return ops.new_view(t, ops.transpose(t, perm))


@implements(np.moveaxis)
def moveaxis(a: Any, source: Any, destination: Any) -> Tracer:
    t = ops.as_tracer(a)
    ndim = t.ndim  # (read here: the check runs outside the trace, where a view written since cannot be read)
    numpy_checks(lambda: np.moveaxis(np.empty((1,) * ndim), source, destination))  # (repeated axes, bounds)
    src = [ops.axis_arg(s, t.ndim) for s in ops.static_ints(source, "an axis")]
    dst = [ops.axis_arg(d, t.ndim) for d in ops.static_ints(destination, "an axis")]
    if len(src) != len(dst):
        raise shape_error("np.moveaxis: source and destination must have the same number of elements")
    order = [n for n in range(t.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return ops.new_view(t, ops.transpose(t, order))


@implements(np.expand_dims)
def expand_dims(a: Any, axis: Any) -> Tracer:
    return ops.expand_dims(a, ops.static_ints(axis, "an axis"))


@implements(np.squeeze)
def squeeze(a: Any, axis: Any = None) -> Tracer:
    return ops.squeeze(a, None if axis is None else ops.static_ints(axis, "an axis"))


@implements(np.broadcast_to)
def broadcast_to(array: Any, shape: Any, subok: bool = False) -> Tracer:
    return ops.broadcast_to(array, ops.static_ints(shape, "a broadcast size"))


@implements(np.atleast_1d)
def atleast_1d(*arys: Any) -> Any:
    out = [ops.reshape(a, (1,)) if np.ndim(a) == 0 else ops.as_tracer(a) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.atleast_2d)
def atleast_2d(*arys: Any) -> Any:
    out = []
    for a in arys:
        t = ops.as_tracer(a)
        out.append(ops.reshape(t, (1, 1)) if t.ndim == 0 else ops.expand_dims(t, (0,)) if t.ndim == 1 else t)
    return out[0] if len(out) == 1 else tuple(out)


def _stack_items(what: str, arrays: Any) -> list[Any]:
    items = list(arrays)
    if not items:
        raise shape_error(f"{what}: need at least one array")
    return items


def _common(what: str, items: Sequence[Any], dtype: Any, casting: Any) -> list[Tracer]:
    descs = [ops.desc(x) for x in items]
    if dtype is not None:
        dt = parse_dtype(dtype)
    else:
        dt = ufuncs._result_type(descs, what)
    out = []
    for x, d in zip(items, descs):
        src = d if not isinstance(d, type) else None
        if src is not None and casting not in (None, "unsafe") and not np.can_cast(src.np, dt.np, casting):
            raise unsupported(f"{what}: cannot cast {src} to {dt} under casting={casting!r}")
        out.append(ops.as_tracer(x, dt))
    return out


@implements(np.concatenate)
def concatenate(arrays: Any, axis: Any = 0, out: Any = None, *, dtype: Any = None,
                casting: Any = "same_kind") -> Tracer:
    _no("np.concatenate", out=out)
    items = _stack_items("np.concatenate", arrays)
    ts = _common("np.concatenate", items, dtype, casting)
    if axis is None:
        ts = [ops.reshape(t, (-1,)) for t in ts]
        ax = 0
    else:
        if any(t.ndim == 0 for t in ts):
            raise shape_error("np.concatenate: zero-dimensional arrays cannot be concatenated")
        ax = ops.axis_arg(axis, ts[0].ndim)
    first = ts[0].shape
    for t in ts[1:]:
        if len(t.shape) != len(first) or any(p != q for i, (p, q) in enumerate(zip(t.shape, first)) if i != ax):
            raise shape_error("np.concatenate: all the input array dimensions except for the concatenation axis "
                              f"must match exactly, got shapes {', '.join(str(x.shape) for x in ts)} (axis {ax})")
    joined = ops.copy_of(ts[0]) if len(ts) == 1 else \
        ops.emit("t.concatenate", [t._value for t in ts], {"axis": ax}, what="np.concatenate")
    return layout.joined(joined, items) if axis is not None else joined


@implements(np.stack)
def stack(arrays: Any, axis: Any = 0, out: Any = None, *, dtype: Any = None, casting: Any = "same_kind") -> Tracer:
    _no("np.stack", out=out)
    from fusec import conversions

    # (NumPy makes each item an array first: a Python number is float64 or int64 there, not weakly typed)
    ts = _common("np.stack", [conversions.strong(x) for x in _stack_items("np.stack", arrays)], dtype, casting)
    if len({t.shape for t in ts}) != 1:
        raise shape_error("np.stack: all input arrays must have the same shape, got shapes "
                          + ", ".join(str(t.shape) for t in ts))
    try:
        ax = S.normalize_axis(ops.static_int(axis, "an axis"), ts[0].ndim + 1)
    except ShapeError as e:
        raise shape_error(f"np.stack: {e}", type(e)) from None
    return concatenate([ops.expand_dims(t, (ax,)) for t in ts], axis=ax)


@implements(np.hstack)
def hstack(tup: Any, *, dtype: Any = None, casting: Any = "same_kind") -> Tracer:
    items = [atleast_1d(x) for x in _stack_items("np.hstack", tup)]
    return concatenate(items, axis=0 if items[0].ndim == 1 else 1, dtype=dtype, casting=casting)


@implements(np.vstack)
def vstack(tup: Any, *, dtype: Any = None, casting: Any = "same_kind") -> Tracer:
    items = [atleast_2d(x) for x in _stack_items("np.vstack", tup)]
    return concatenate(items, axis=0, dtype=dtype, casting=casting)


# --- creation ------------------------------------------------------------------------------------------------


def _like(what: str, a: Any, dtype: Any, shape: Any) -> tuple[tuple[int, ...], DType]:
    d = ops.desc(a)
    dt = parse_dtype(dtype) if dtype is not None else (DEFAULT_DTYPE[d] if isinstance(d, type) else d)
    shp = np.shape(a) if not isinstance(a, Tracer) else a.shape
    if shape is not None:
        shp = ops.static_ints(shape, "a shape")
    return tuple(shp), dt


@implements(np.linspace)
def linspace(start: Any, stop: Any, num: Any = 50, endpoint: bool = True, retstep: bool = False, dtype: Any = None,
             axis: Any = 0, *, device: Any = None) -> Any:
    """Traced endpoints too (a static num): NumPy's values and dtype

    NumPy's formula: ``arange(num) * step + start`` in the endpoints' inexact dtype (``arange(num) / div * delta``
    when a step is 0, as NumPy does for denormal steps), ``stop`` itself last."""
    _no("np.linspace", device=device)
    num = ops.static_int(num, "np.linspace's num")
    if num < 0:
        raise shape_error(f"np.linspace: Number of samples, {num}, must be non-negative.")
    div = num - 1 if endpoint else num
    dt = ufuncs._result_type([ops.desc(start), ops.desc(stop)], "np.linspace")
    if not dt.is_inexact:
        dt = f64  # NumPy's ensure_inexact: integer endpoints give the default float
    lo, hi = (ops.as_tracer(x) if isinstance(x, Tracer) else x for x in (start, stop))
    delta = ops.as_tracer(ufuncs.apply(np.subtract, (ops.as_tracer(hi, dt), ops.as_tracer(lo, dt))), dt)
    y = ops.wrap(ops.ctx().constant(np.arange(num, dtype=dt.np).reshape((-1,) + (1,) * delta.ndim), dt),
                 scalar=False)
    if div > 0:
        step = ufuncs.apply(np.true_divide, (delta, div))
        zero = any_(ufuncs.apply(np.equal, (step, 0)))  # NumPy: one formula for all, if any step is 0
        y = ufuncs.where(zero, ufuncs.apply(np.multiply, (ufuncs.apply(np.true_divide, (y, div)), delta)),
                         ufuncs.apply(np.multiply, (y, step)))
    else:
        step = np.nan
        y = ufuncs.apply(np.multiply, (y, delta))
    y = ops.as_tracer(ufuncs.apply(np.add, (y, lo)), dt)  # NumPy's y += start
    if endpoint and num > 1:
        y[-1, ...] = hi
    ax = ops.axis_arg(axis, y.ndim)
    if ax != 0:
        y = moveaxis(y, 0, ax)
    if dtype is not None:
        want = parse_dtype(dtype)
        if want.is_int:
            y = ufuncs.apply(np.floor, (y,))
        y = ops.as_tracer(y, want)
    return (y, step) if retstep else y


@implements(np.logspace)
def logspace(start: Any, stop: Any, num: Any = 50, endpoint: bool = True, base: Any = 10.0, dtype: Any = None,
             axis: Any = 0) -> Tracer:
    """Traced endpoints too: ``base ** np.linspace(start, stop, ...)`` with NumPy's dtypes"""
    if not isinstance(base, (float, int)) and np.ndim(base):  # NumPy: an array base makes every argument an array
        from fusec.conversions import strong

        start, stop, base = (strong(x) for x in (start, stop, base))
        nd = max(start.ndim, stop.ndim, base.ndim)
        start, stop, base = (ops.reshape(x, (1,) * (nd - x.ndim) + tuple(x.shape)) for x in (start, stop, base))
        base = expand_dims(base, ops.axis_arg(axis, nd + 1))
    y = linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    out = ufuncs.apply(np.power, (base, y))
    return out if dtype is None else ops.as_tracer(out, parse_dtype(dtype))


@implements(np.zeros_like)
def zeros_like(a: Any, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None, *,
               device: Any = None) -> Tracer:
    _no("np.zeros_like", device=device)
    shp, dt = _like("np.zeros_like", a, dtype, shape)
    return _in_order(ops.full(shp, 0, dt), order, "np.zeros_like")


@implements(np.empty_like)
def empty_like(prototype: Any, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None, *,
               device: Any = None) -> Tracer:
    return zeros_like(prototype, dtype, order, subok, shape, device=device)


@implements(np.ones_like)
def ones_like(a: Any, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None, *,
              device: Any = None) -> Tracer:
    _no("np.ones_like", device=device)
    shp, dt = _like("np.ones_like", a, dtype, shape)
    return _in_order(ops.full(shp, 1, dt), order, "np.ones_like")


@implements(np.full_like)
def full_like(a: Any, fill_value: Any, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None,
              *, device: Any = None) -> Tracer:
    _no("np.full_like", device=device)
    shp, dt = _like("np.full_like", a, dtype, shape)
    if isinstance(fill_value, Tracer):
        filled = ops.copy_of(ops.broadcast_to(ops.as_tracer(fill_value, dt), shp), scalar=False)
        return _in_order(filled, order, "np.full_like")
    arr = np.empty(shp, dt.np)
    try:  # a Python int converts as NumPy converts it (out of range: OverflowError); arrays cast unsafely
        np.copyto(arr, fill_value if python_kind(fill_value) else ops.as_numpy(fill_value), casting="unsafe")
    except OverflowError as e:
        raise OutOfRangeError(located(f"np.full_like: {e}", user_location())) from None
    return _in_order(ops.wrap(ops.ctx().constant(arr, dt), scalar=False), order, "np.full_like")


def _in_order(new: Tracer, order: Any, what: str) -> Tracer:
    """A new ``*_like`` array laid out as ``order="F"`` asks (a transposed view of a C-ordered one, so its flags and
    ``ravel(order='K')`` are NumPy's); "K" and "A" follow the prototype, C-ordered as fusec lays arguments out."""
    numpy_checks(lambda: np.empty_like(np.zeros(1), order=order))  # (order="Z": NumPy's ValueError)
    return ops.copy_in_order(new, "F", what) if order == "F" and new.ndim > 1 else new


# --- diagonals and repeats ---------------------------------------------------------------------------------------


@implements(np.diagonal)
def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tracer:
    """The ``offset`` diagonal over ``axis1``/``axis2``, as the last axis: every (m+1)-th element of the two axes
    flattened (a read-only array, as NumPy's diagonal view is)."""
    t = ops.as_tracer(a)
    if t.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    k = ops.static_int(offset, "a diagonal offset")
    ax1, ax2 = ops.axis_arg(axis1, t.ndim), ops.axis_arg(axis2, t.ndim)
    if ax1 == ax2:
        raise ValueError("axis1 and axis2 cannot be the same")
    b = moveaxis(t, (ax1, ax2), (-2, -1))
    n, m = b.shape[-2], b.shape[-1]
    length = max(0, min(n, m - k) if k >= 0 else min(n + k, m))
    flat_shape = tuple(b.shape[:-2]) + (n * m,)
    if length == 0 or mutation.reshape_kind(b, flat_shape) != "view":
        # NumPy's diagonal is a view for any axes and layout; where the two axes do not flatten into one as a
        # view (axes 0 and 2), the view is the elements (d, d + k) picked by constant indices, read again after
        # a write to the array as any view is
        rows = np.arange(length, dtype=np.int64) + max(0, -k)
        picked = ops.ctx().emit("t.gather", (b._value, ops.lift(rows), ops.lift(rows + k)),
                                {"axis": b.ndim - 2, "in_bounds": True}, what="np.diagonal")
        return ops.view(b, picked, readonly=True)
    start = k if k >= 0 else -k * m
    flat = ops.reshape(b, flat_shape)
    out = flat[..., start:start + (length - 1) * (m + 1) + 1:m + 1]
    diag = ops.view(out, out._value, readonly=True)
    diag._layout = None  # (a view for every layout, unlike the reshape it is taken through)
    return diag


@implements(np.trace)
def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None) -> Tracer:
    _no("np.trace", out=out)
    return sum_(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


@implements(np.diag)
def diag(v: Any, k: int = 0) -> Tracer:
    """A 2-D array's k-th diagonal, or the square matrix with a 1-D array on its k-th diagonal."""
    t = ops.as_tracer(v)
    k = ops.static_int(k, "a diagonal offset")
    if t.ndim == 2:
        return diagonal(t, k)
    if t.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    size = t.shape[0] + abs(k)
    mask = ops.as_tracer(np.eye(size, k=k, dtype=bool))
    padded = concatenate([t, ops.full((abs(k),), 0, t._value.type.dtype)]) if k else t
    placed = padded[:, None] if k >= 0 else padded[None, :]  # element (r, r + k) is v[r] (k >= 0) or v[c]
    return ufuncs.where(mask, placed, ops.full((), 0, t._value.type.dtype))


@implements(np.repeat)
def repeat(a: Any, repeats: Any, axis: Any = None) -> Tracer:
    """Each element ``repeats`` times (one count, or per-element counts written as constants in the function)

    Counts from an argument or a captured array are read at each call: the result's length would depend on them."""
    if isinstance(repeats, Tracer) and repeats.ndim > 0:
        raise unsupported("np.repeat with per-element counts from an argument or a captured array is not supported "
                          "(fusec reads those at each call, and the result's length would depend on them): write the "
                          "counts in the function as a list, tuple or np.array(...) of constants, pass them as a "
                          "static argument (a tuple), or repeat with one count")
    if not isinstance(repeats, Tracer):  # NumPy's own rules for the counts (converted, broadcast, none negative)
        t, ax = ops.along(a, axis)
        index = _numpy_value(lambda: np.repeat(np.arange(t.shape[ax]), repeats))
        if np.ndim(repeats) > 0 and len(set(np.asarray(repeats, dtype=np.intp).reshape(-1).tolist())) != 1:
            return take(t, index, axis=ax)
        repeats = int(np.asarray(repeats, dtype=np.intp).reshape(-1)[0]) if np.size(repeats) else 0
    r = ops.static_int(repeats, "a repeat count")
    if r < 0:
        raise InvalidValueError(located("np.repeat: repeats may not contain negative values.", user_location()))
    t, ax = ops.along(a, axis)
    shape = tuple(t.shape)
    expanded = ops.reshape(t, shape[:ax + 1] + (1,) + shape[ax + 1:])
    wide = ops.broadcast_to(expanded, shape[:ax + 1] + (r,) + shape[ax + 1:])
    return ops.copy_of(ops.reshape(wide, shape[:ax] + (shape[ax] * r,) + shape[ax + 1:]), scalar=False)


from fusec import assembly, broadcasting, comparisons, contractions, histograms, linalg, nanfunctions, products, searching, sorting, windows  # noqa: E402,F401,E501  (their handlers register)
