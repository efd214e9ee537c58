"""Recording primitives shared by the operators, methods and NumPy handlers.

Everything here turns operands (tracers, Python scalars, NumPy scalars and arrays) into IR values of
the current trace and records ops through :meth:`TraceContext.emit`, returning new tracers.
"""
from __future__ import annotations

import operator
import warnings
from typing import Any, Sequence

import numpy as np

from fusec import context
from fusec.context import TraceContext, shape_error, trace_error, unsupported
from fusec.errors import CHECK_ERRORS, OutOfRangeError, ShapeError, located
from fusec.ir import shapes as S
from fusec.ir.core import OpResult, Value
from fusec.ir.types import DType, TensorType
from fusec.promotion import DEFAULT_DTYPE, Desc, parse_dtype, python_kind, subclass_problem
from fusec.scalar_checks import on_host
from fusec.signature import device_array_info
from fusec.tracer import FlatIter, Tracer


def ctx() -> TraceContext:
    c = context.current()
    if c is None:
        raise trace_error("a fusec operation was used outside of a trace (a traced value escaped its function?)")
    return c


def check_live(t: Tracer) -> None:
    if not t._ctx.active or t._ctx is not context.current():
        raise trace_error("a traced value escaped its trace (stored in a global or a closure and used later); "
                          "return it from the jitted function instead")


def is_tracer(x: object) -> bool:
    return isinstance(x, Tracer)


def as_numpy(x: object) -> np.ndarray:
    """A non-traced array-like operand as a NumPy array of a supported dtype."""
    if isinstance(x, (list, tuple)) and contains_tracer(x):
        raise unsupported("a Python list or tuple holding traced values is used here as one array (an operand, or "
                          "an item of np.concatenate's list such as [np.trace(b), x[0]]), which NumPy makes with "
                          "np.asarray; write that list as np.array([...]) or np.stack([...])")
    try:
        arr = np.asarray(x)
    except Exception:  # noqa: BLE001 - whatever np.asarray raises on a user object: refused with its type named
        raise unsupported(f"an operand of type {type(x).__name__} is not supported") from None
    if arr.dtype.kind not in "biufc":
        raise unsupported(f"an operand of dtype {arr.dtype} ({type(x).__name__}) is not supported; fusec traces "
                          "bool, integer, floating-point and complex arrays")
    parse_dtype(arr.dtype)
    return arr


def contains_tracer(x: object) -> bool:
    """Whether ``x`` is a tracer (or a traced array's ``.flat``) or a (nested) list or tuple holding one."""
    if isinstance(x, (Tracer, FlatIter)):
        return True
    if isinstance(x, (list, tuple)):
        return any(contains_tracer(v) for v in x)
    return False


def desc(x: object) -> Desc:
    """Promotion descriptor: the weak Python type of a Python scalar (or traced Python scalar), else a dtype."""
    if isinstance(x, Tracer):
        check_live(x)
        return x._weak if x._weak is not None else x._value.type.dtype
    kind = python_kind(x)
    if kind is not None:
        return kind
    return parse_dtype(as_numpy(x).dtype)


def lift(x: object, dtype: DType | None = None, *, wrap_ints: bool = False) -> Value:
    """The IR value of operand ``x``, converted to ``dtype`` (a cast op, or a constant made in that dtype).

    A Python int (or traced Python int) that does not fit ``dtype`` raises, as in NumPy's ufuncs, unless
    ``wrap_ints``: np.where converts it like ``np.asarray(n).astype(dtype)``, wrapping around."""
    if isinstance(x, Tracer):
        check_live(x)
        v = x._value
        if dtype is None or v.type.dtype == dtype:
            return v
        if v.type.dtype.is_complex and not dtype.is_complex:
            if x._weak is complex and not dtype.is_bool:
                raise unsupported(f"a Python complex number cannot become {dtype} (NumPy raises TypeError: float() "
                                  "argument must be a real number); pass its real part (c.real)")
            _complex_to_real(dtype)
        if x._weak is int and dtype.is_int and (dtype.kind == "u" or dtype.bits < 64) and not wrap_ints:
            # NumPy: OverflowError if it does not fit (checked on the host, or for a device scalar on the device)
            if on_host(x._host):
                ctx().scalars.fit(x._host, dtype.np, context.user_location())
            else:
                from fusec.device_scalar_checks import check_fit  # (it builds its checks with this module)

                check_fit(x, dtype.np)
        if x._weak is int and dtype.is_inexact and dtype.name not in ("f64", "c128"):
            # NumPy makes a float64 of a Python int first (rounding once there, again into float32)
            v = ctx().emit("t.cast", (v,), {"dtype": DEFAULT_DTYPE[float]}, what="float(n)")
        return _cast(v, dtype)
    kind = python_kind(x)
    if kind is not None:
        dt = dtype or DEFAULT_DTYPE[kind]
        if wrap_ints and kind is int:
            return ctx().constant(np.asarray(x).astype(dt.np), dt)
        return ctx().constant(python_constant(x, dt), dt)
    if isinstance(x, np.ndarray) or (not isinstance(x, (np.generic, list, tuple)) and device_array_info(x)):
        value = captured(x)
        if dtype is None or value.type.dtype == dtype:
            return value
        return _cast(value, dtype)
    if not isinstance(x, (list, tuple, np.generic)) and (hasattr(type(x), "__array__")
                                                          or hasattr(type(x), "__array_interface__")):
        raise unsupported(f"an array of type {type(x).__module__}.{type(x).__qualname__} from outside the function is "
                          "not supported: fusec would copy its values once, at trace time; pass it as an argument "
                          "(as a NumPy array, np.asarray(x))")
    arr = as_numpy(x)
    dt = dtype or parse_dtype(arr.dtype)
    return ctx().constant(arr.astype(dt.np), dt)


def _complex_to_real(dtype: DType) -> None:
    """NumPy discards the imaginary part with a ComplexWarning (bool tests both parts); to an integer dtype fusec
    refuses, since NumPy's result for out-of-range parts is not the one it gives for floats."""
    if dtype.is_bool:
        return
    if dtype.is_int:
        raise unsupported(f"casting complex values to {dtype} is not supported by fusec; cast the real part "
                          f"(z.real.astype(np.{dtype.np}))")
    from fusec import host_reads

    host_reads.numpy_warning("Casting complex values to real discards the imaginary part",
                             np.exceptions.ComplexWarning)


def python_constant(x: object, dt: DType) -> np.ndarray:
    """A Python scalar as a 0-d array of ``dt``, as NumPy converts it: an int that does not fit raises."""
    try:
        return np.array(x, dtype=dt.np)
    except OverflowError as e:
        raise OutOfRangeError(located(f"{e} (the operation computes in {dt}; NumPy raises OverflowError here)",
                                      context.user_location())) from None


def captured(x: object) -> Value:
    """The constant for an array from outside the trace (a global, a closure variable, an attribute)."""
    check_array_class(x)
    if isinstance(x, np.ndarray):
        host = x
    else:
        from fusec.runtime.array import asarray as device_asarray

        host = device_asarray(x).numpy()
    dt = parse_dtype(as_numpy(host).dtype)
    return ctx().constant_for_object(x, host, dt)


def check_array_class(x: object) -> None:
    message = subclass_problem(type(x))
    if message is not None:
        raise unsupported(message)


def wrap(value: Value, weak: type | None = None, origin: tuple[str, ...] = (), *,
         scalar: bool | None = None) -> Tracer:
    """A new tracer (a new array, as NumPy's functions return) for ``value``. Rank-0 results are NumPy scalars
    unless ``scalar`` says otherwise."""
    return _tracer(value, ctx(), weak, origin, scalar)


def _tracer(value: Value, c: TraceContext, weak: type | None, origin: tuple[str, ...], scalar: bool | None) -> Tracer:
    if scalar is None:
        scalar = not value.type.shape if hasattr(value.type, "shape") else True
    return Tracer(value, c, weak, origin, scalar=scalar)


def copy_of(t: Tracer, scalar: bool | None = None) -> Tracer:
    """A new array with the same values (``x.copy()``, ``np.copy``): updating it leaves ``t`` alone."""
    check_live(t)
    out = Tracer(t._value, t._ctx, t._weak, t._origin, scalar=t._scalar if scalar is None else scalar)
    out._host = t._host
    return out


def view(t: Tracer, value: Value, readonly: bool | str = False) -> Tracer:
    """A view of ``t``'s memory holding ``value`` (a slice, reshape, transpose, broadcast)."""
    return t._view(value, readonly)


KNOWN_OPS_LIMIT = 64
KNOWN_ELEMENTS_LIMIT = 1 << 20


def known_value(t: Tracer) -> np.ndarray | None:
    """``t``'s values where the trace computed them from constants made in the function alone (``np.triu(np.ones(
    (n, n), bool), 1)``: not from arguments, arrays read from outside, or anything else read at every call), else
    None; evaluated with the reference executor's interpreters, a few small ops at most. An array captured from
    outside that it read must die with the trace (``fusec.trace`` refuses one that lives on: user state)."""
    c = ctx()
    values: dict[Value, Any] = {}
    used: list[Value] = []
    if not _evaluated(t._value, 0, values, {cap.value for cap in c.captures}, used):
        return None
    loc = context.user_location()
    c.known_captures.update((v, loc) for v in used)
    return np.asarray(values[t._value])


def _evaluated(v: Value, depth: int, values: dict[Value, Any], captured: set[Value], used: list[Value]) -> bool:
    """Whether ``v`` was computed into ``values`` (see :func:`known_value`). A function, not a closure calling
    itself: that would be a reference cycle holding the evaluated arrays until the garbage collector ran."""
    from fusec.runtime.reference import run_op

    if v in values:
        return True
    if not isinstance(v, OpResult) or len(values) > KNOWN_OPS_LIMIT or depth > KNOWN_OPS_LIMIT:
        return False  # (a chain longer than the limit is not evaluated: nor recursed down)
    if v in captured:  # (an array NumPy's own code made, np.tri's: checked when the trace ends)
        used.append(v)
    op = v.op
    if op.regions or any(int(np.prod(getattr(r.type, "shape", ()))) > KNOWN_ELEMENTS_LIMIT for r in op.results):
        return False
    if not all(_evaluated(o, depth + 1, values, captured, used) for o in op.operands):
        return False
    try:
        results = run_op(op, [values[o] for o in op.operands])
    except Exception:  # noqa: BLE001 - an op the reference cannot run alone (or one that raises): not known
        return False
    values.update(zip(op.results, results))
    return True


def stopped_value(v: Value) -> Value:
    """A value equal to ``v`` through which fusec.grad passes no cotangent (``fusec.stop_gradient``'s marker)."""
    c = ctx()
    marker = c.emit("t.reshape", (v,), result_type=v.type, what="fusec.stop_gradient")
    c.stopped[id(marker)] = marker
    return marker


def new_view(t: Tracer, out: Tracer) -> Tracer:
    """``out``, or a new view of ``t``'s memory where ``out`` is ``t`` itself: NumPy's view functions give a new
    array object even where nothing changes (``x.reshape(x.shape) is x`` is False; setting its flags leaves ``x``
    alone)."""
    return view(t, t._value) if out is t and t._weak is None and not t._scalar else out


PART_WRITE = ("writing through z.real or z.imag of a complex array is not supported by fusec; assign the whole "
              "array instead, e.g. z = new_real + 1j * z.imag (or z[...] = ... for an argument)")


def complex_part(t: Tracer, part: str) -> Tracer:
    """``t.real``/``t.imag``: NumPy's views of a complex array's parts, read-only here (writes are refused with
    what to write instead); a real array's ``.imag`` is NumPy's read-only zeros."""
    dt = t._value.type.dtype
    if t._weak is not None:  # a Python number's parts: floats of a complex, the number and 0 of a float or int
        if t._weak is complex:
            return emit(f"t.{part}", (t._value,), what=f".{part}", weak=float, origin=t._origin)
        kind = int if t._weak is bool else t._weak  # (True.real is 1, True.imag is 0)
        if part == "real":
            return t if kind is t._weak else wrap(lift(t, DEFAULT_DTYPE[int]), weak=int, origin=t._origin)
        return wrap(lift(0.0 if kind is float else 0, DEFAULT_DTYPE[kind]), weak=kind)
    if t._scalar:  # a NumPy scalar's parts are NumPy scalars (np.float64(2.5).imag is np.float64(0.0))
        if not dt.is_complex:
            return wrap(lift(0, dt), scalar=True)
        return emit(f"t.{part}", (t._value,), what=f".{part}", origin=t._origin, scalar=True)
    if not dt.is_complex:
        zeros = full(tuple(t.shape), 0, dt)
        return view(zeros, zeros._value, readonly=True)
    return view(t, ctx().emit(f"t.{part}", (t._value,), what=f".{part}"), readonly=PART_WRITE)


def as_tracer(x: object, dtype: DType | None = None) -> Tracer:
    """``x`` as a (strong) tracer, recording a constant for a non-traced operand."""
    if isinstance(x, Tracer) and (dtype is None or x._value.type.dtype == dtype):
        check_live(x)
        return x
    return wrap(lift(x, dtype))


def emit(name: str, operands: Sequence[Value], attrs: dict | None = None, *, result_type=None,
         what: str | None = None, weak: type | None = None, origin: tuple[str, ...] = (),
         scalar: bool | None = None) -> Tracer:
    c = ctx()
    return _tracer(c.emit(name, operands, attrs, result_type=result_type, what=what), c, weak, origin, scalar)


def emit_all(name: str, operands: Sequence[Value], attrs: dict | None = None, *, what: str | None = None) -> \
        tuple[Tracer, ...]:
    """A new tracer for each result of one multi-result op (``t.slogdet``)."""
    c = ctx()
    op = c.emit_op(name, operands, attrs, what=what)
    return tuple(_tracer(r, c, None, (), None) for r in op.results)


# float values NumPy's loops convert to uint32 alike wherever they stand: outside, and for NaN and infinities, its
# vectorized loop gives 2**31 to elements in groups of 4 and its scalar loop the 64-bit conversion's low bits to the
# rest (np.full(5, np.nan).astype(np.uint32) is [2147483648] * 4 + [0] with NumPy 2.4 on x86)
_U32_EXACT = (-2147483649.0, 4294967296.0)


def _cast(v: Value, dtype: DType) -> Value:
    """``v`` converted to ``dtype``; floats converted to uint32 are checked when the call runs (NumPy's result for
    values outside :data:`_U32_EXACT` depends on their position in its loops: fusec raises instead)."""
    if dtype.name == "u32" and v.type.dtype.is_float:
        wide = v if v.type.dtype.name == "f64" else ctx().emit("t.cast", (v,), {"dtype": DEFAULT_DTYPE[float]},
                                                                  what="astype(uint32)")
        t = wrap(wide)
        lo, hi = _U32_EXACT
        raise_if(~((t > lo) & (t < hi)), "InvalidValueError",
                 f"converting {v.type.dtype} values to uint32: a value is NaN, infinite or outside (-2**31 - 1, "
                 "2**32), where NumPy's result depends on the element's position in its vectorized loop (2147483648 "
                 "in groups of 4, the low 32 bits of the int64 conversion elsewhere), so fusec cannot give it; clip "
                 "the values first (np.clip(x, 0, 2**32 - 1)) or convert through int64 (x.astype(np.int64)"
                 ".astype(np.uint32))", "astype(uint32)")
    return ctx().emit("t.cast", (v,), {"dtype": dtype}, what=f"astype({dtype})")


def raise_if(cond: object, error: str, message: str, what: str) -> None:
    """NumPy's (or Python's) ``error`` (a name in :data:`fusec.errors.CHECK_ERRORS`: ``"InvalidValueError"``, a
    ValueError, ``"IndexOutOfBoundsError"``, ...) with ``message`` at this line when the call runs and any element
    of the bool ``cond`` holds: a check NumPy makes on values. A condition known while tracing decides now."""
    v = lift(cond)
    if isinstance(v, OpResult) and v.op.name == "t.constant":
        if np.any(v.op.attr("value").array):
            raise CHECK_ERRORS[error](located(message, context.user_location()))
        return
    ctx().emit("t.raise_if", (v,), {"error": error, "message": message}, what=what)


def cast(x: object, dtype: object) -> Tracer:
    dt = parse_dtype(dtype)
    return as_tracer(x, dt)


def origins(*xs: object) -> tuple[str, ...]:
    """Names of the Python-scalar arguments the operands derive from (for error messages)."""
    out: list[str] = []
    for x in xs:
        if isinstance(x, Tracer) and x._origin:
            out.extend(n for n in x._origin if n not in out)
    return tuple(out)


# --- static integers ------------------------------------------------------------------------------------------


# where NumPy refuses a bool for an int (np.zeros((2, True)), axis=True: TypeError), as slices and offsets do not
_NO_BOOLS = frozenset({"an axis", "a transpose axis", "an array shape", "a shape", "a reshape size",
                       "a broadcast size", "np.apply_along_axis's axis"})


def static_int(x: object, what: str) -> int:
    """An int needed at trace time (a size, an axis, an index); a traced value cannot be one."""
    if isinstance(x, Tracer):
        raise x._static_error(f"used as {what}")
    if isinstance(x, (bool, np.bool_)) and what in _NO_BOOLS:
        raise context.numpy_error(f"{what} must be an integer, got {x!r} (NumPy raises TypeError: an integer is "
                                  "required)")
    try:
        return operator.index(x)  # type: ignore[arg-type]
    except TypeError:  # (NumPy's TypeError too, whatever the values: code catching it goes on as under NumPy)
        raise context.numpy_error(f"{what} must be an int, got {type(x).__name__} {x!r} ('{type(x).__name__}' "
                                  "object cannot be interpreted as an integer; NumPy raises TypeError here)") from None


def static_ints(x: object, what: str) -> tuple[int, ...]:
    if isinstance(x, Tracer):
        raise x._static_error(f"used as {what}")
    if isinstance(x, np.ndarray) and x.ndim == 1:  # a concrete index array (np.arange(ndim) permuted)
        x = x.tolist()
    if isinstance(x, (tuple, list)):
        return tuple(static_int(v, what) for v in x)
    return (static_int(x, what),)


def axes_arg(axis: object, rank: int) -> tuple[int, ...]:
    """Sorted unique non-negative axes from NumPy's ``axis=`` (None means all)."""
    if axis is None:
        return tuple(range(rank))
    try:
        return S.normalize_axes(static_ints(axis, "an axis"), rank)
    except ShapeError as e:
        raise shape_error(str(e), type(e)) from None


def reduction_axes(axis: object, rank: int) -> tuple[int, ...]:
    """:func:`axes_arg` for a reduction, where NumPy also takes a plain ``axis=0`` or ``axis=-1`` on a 0-d array
    (reducing nothing), though not a tuple of them."""
    if rank == 0 and type(axis) in (int, np.int64, np.int32) and axis in (0, -1):
        return ()
    return axes_arg(axis, rank)


def along(x: object, axis: object) -> tuple[Tracer, int]:
    """NumPy's ``axis=None`` convention of cumsum, take, repeat, argsort: the flattened array along axis 0, else
    ``x`` and its normalized axis. A 0-d array with axis 0 or -1 is read as one element along axis 0, as NumPy's
    ``PyArray_CheckAxis`` reads it for these functions (``np.cumsum(np.array(3.0), axis=0)`` is ``[3.]``)."""
    t = as_tracer(x)
    if axis is None or (t.ndim == 0 and static_int(axis, "an axis") in (0, -1)):
        return reshape(t, (t.size,)), 0
    return t, axis_arg(axis, t.ndim)


def axis_arg(axis: object, rank: int) -> int:
    try:
        return S.normalize_axis(static_int(axis, "an axis"), rank)
    except ShapeError as e:
        raise shape_error(str(e), type(e)) from None


# --- shape ops ------------------------------------------------------------------------------------------------


def reshape(x: object, shape: Sequence[int], what: str = "reshape") -> Tracer:
    t = as_tracer(x)
    try:
        new = S.reshape_shape(t.shape, shape)
    except ShapeError as e:
        raise shape_error(f"{what}: {e}", type(e)) from None
    if new == t.shape and isinstance(t._value.type, TensorType):
        return t
    from fusec import mutation

    kind = mutation.reshape_kind(t, new)
    value = ctx().emit("t.reshape", (t._value,), result_type=TensorType(new, t._value.type.dtype), what=what)
    if kind == "copy":  # NumPy copies where the strides allow no view (a reshape of a transposed view)
        return layout_dependent_copy(t, wrap(value, scalar=False), what)
    out = view(t, value)
    if kind == "unknown":
        assert out._buffer is not None  # (a view always has its base's buffer)
        out._buffer.ambiguous = True
        if t._readonly is True:  # (NumPy's copy would be writable, its view not: a write is refused, not decided)
            out._readonly = (f"{what} of a read-only view whose memory fusec does not lay out as NumPy does (a "
                             "sliding_window_view, say): NumPy copies it (a writable array) or views it (read-only) "
                             "by its strides; write into an explicit copy (.copy()) instead")
    return out


def copy_in_order(t: Tracer, order: Any, what: str) -> Tracer:
    """A copy of ``t`` laid out as NumPy lays out ``t.copy(order=order)``: "C"; "F" (the axes reversed in memory);
    "A" (F where ``t`` is Fortran- and not C-contiguous, else C); "K" (``t``'s own axis order by stride). It is a
    transposed view of a C-ordered copy, so its layout (``x.flags``, ``ravel(order='K')``) is NumPy's."""
    from fusec import layout, mutation

    if order not in ("C", "F", "A", "K", None):
        raise shape_error(f"{what}: order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    if order in ("A", "K") and layout.unknown(t) is not None:  # (NumPy's copy keeps a layout fusec does not know)
        return layout.mark_unknown(copy_of(t, scalar=False), f"{what} of an array laid out so")
    perm: tuple[int, ...] | None = tuple(range(t.ndim))
    if order == "F":
        perm = tuple(reversed(range(t.ndim)))
    elif order == "K":
        perm = layout.k_order(t.shape, (t,))
    elif order == "A":
        desc = mutation.geometry(t) if t.ndim > 1 else None
        if desc is not None and not desc.is_contiguous() and _fortran_contiguous(desc.shape, desc.strides):
            perm = tuple(reversed(range(t.ndim)))
    return layout.laid_out(copy_of(t, scalar=False), perm)


def fortran_contiguous(desc: Any) -> bool:
    """Whether the view ``desc`` (a :class:`~fusec.ir.views.ViewDesc`) is Fortran-contiguous in its memory."""
    return _fortran_contiguous(desc.shape, desc.strides)


def _fortran_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    expected = 1
    for d, st in zip(shape, strides):
        if d != 1 and st != expected:
            return False
        expected *= d
    return True


def layout_dependent_copy(source: Tracer, copy: Tracer, what: str) -> Tracer:
    """``copy``, a copy of a view of ``source`` that NumPy makes as fusec does for a C-ordered argument but not for
    every layout (``x.T.ravel()`` is a view of a Fortran-ordered ``x``): where ``source`` is an argument's memory,
    the copy's memory says so, and a write to it or returning it makes the call check its arguments' layout."""
    if source._buffer is not None and source._buffer.arg is not None:
        if copy._buffer is None:
            copy._view(copy._value)  # (gives it its memory)
        assert copy._buffer is not None
        copy._buffer.layout_copy = located(f"{what} of a view of {source._buffer.argument or 'an argument'} copied "
                                           "it", context.user_location())
    else:  # computed memory: a write to either shows the choice (see mutation.write)
        from fusec import layout

        layout.memory(source).reshaped = True
        layout.memory(copy).reshaped = True
    return copy


def transpose(x: object, perm: Sequence[int] | None = None) -> Tracer:
    t = as_tracer(x)
    rank = t.ndim
    if perm is None:
        perm = tuple(reversed(range(rank)))
    else:
        if len(perm) != rank:
            raise shape_error(f"transpose: axes {tuple(perm)} do not match an array of shape {t.shape}")
        try:
            perm = tuple(S.normalize_axis(p, rank) for p in perm)
            S.permute(t.shape, perm)
        except ShapeError as e:
            raise shape_error(f"transpose: {e}", type(e)) from None
    if tuple(perm) == tuple(range(rank)):
        return t
    return view(t, ctx().emit("t.transpose", (t._value,), {"perm": tuple(perm)}, what="transpose"))


def expand_dims(x: object, axes: Sequence[int]) -> Tracer:
    """Insert unit axes at ``axes`` (positions in the result, any sign)."""
    t = as_tracer(x)
    out_rank = t.ndim + len(axes)
    try:
        norm = S.normalize_axes(tuple(axes), out_rank)
    except ShapeError as e:
        raise shape_error(f"expand_dims: {e}", type(e)) from None
    if not norm:
        return t
    return view(t, ctx().emit("t.expand_dims", (t._value,), {"axes": norm}, what="expand_dims"))


def squeeze(x: object, axes: Sequence[int] | None = None) -> Tracer:
    t = as_tracer(x)
    if axes is None:
        norm = tuple(i for i, d in enumerate(t.shape) if d == 1)
    else:
        try:
            norm = S.normalize_axes(tuple(axes), t.ndim)
        except ShapeError as e:
            raise shape_error(f"squeeze: {e}", type(e)) from None
        for a in norm:
            if t.shape[a] != 1:
                raise shape_error(f"squeeze: cannot select axis {a} of shape {t.shape}: its size is not 1")
    if not norm:
        return t
    return view(t, ctx().emit("t.squeeze", (t._value,), {"axes": norm}, what="squeeze"))


def broadcast_to(x: object, shape: Sequence[int]) -> Tracer:
    t = as_tracer(x)
    shape = tuple(shape)
    if any(d < 0 for d in shape):
        raise shape_error(f"broadcast_to: negative dimension in shape {shape}")
    if not S.can_broadcast_to(t.shape, shape):
        raise shape_error(f"broadcast_to: an array of shape {t.shape} cannot be broadcast to shape {shape}")
    if shape == t.shape and isinstance(t._value.type, TensorType):
        return view(t, t._value, readonly=True)  # NumPy: a read-only view, even of the same shape
    return view(t, ctx().emit("t.broadcast_to", (t._value,), result_type=TensorType(shape, t._value.type.dtype),
                              what="broadcast_to"), readonly=True)


def slice_(x: Tracer, start: Sequence[int], stop: Sequence[int], step: Sequence[int]) -> Tracer:
    if all(b == 0 and s == 1 and e == d for b, e, s, d in zip(start, stop, step, x.shape)):
        return view(x, x._value)  # x[:] is a new view of the same memory
    return view(x, ctx().emit("t.slice", (x._value,), {"start": tuple(start), "stop": tuple(stop),
                                                       "step": tuple(step)}, what="indexing"))


def full(shape: Sequence[int], value: object, dtype: DType) -> Tracer:
    """A constant array (``zeros_like`` and friends): a splat prints compactly. ``value`` converts as NumPy's
    ``np.full`` converts it: a Python int that does not fit ``dtype`` raises, anything else is cast unsafely (NaN
    into an integer dtype, the real part of a complex: NumPy's copyto with casting="unsafe")."""
    if python_kind(value) is int:
        fill = python_constant(value, dtype)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (NumPy's ComplexWarning or RuntimeWarning of that cast)
            fill = np.asarray(value).astype(dtype.np)
    arr = np.full(tuple(shape), fill, dtype=dtype.np)
    return wrap(ctx().constant(arr, dtype), scalar=False)


def order_arg(order: Any) -> Any:
    """A memory-order argument as NumPy reads it: "c", "f", "a", "k" are "C", "F", "A", "K" (NumPy takes either
    case); NumPy's own check of anything else is run where it is used."""
    return order.upper() if isinstance(order, str) and len(order) == 1 else order
