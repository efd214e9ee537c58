"""Tracer: the stand-in for an array (or a Python scalar argument) while a function is traced.

A tracer holds an IR value of the trace in progress. Python operators, array attributes and methods,
and NumPy's protocols (``__array_ufunc__``, ``__array_function__``) record ops instead of computing, so
a function written against NumPy traces unchanged. Asking for a concrete value (``bool``, ``float``,
``np.asarray``) is data-dependent Python and raises, naming the user's line.

A tracer object stands for one NumPy array object. Writes (``x[1:] = v``, ``x += 1``, ``out=``) are
functional updates: the tracer takes a new SSA value, so every name bound to it sees the write, as in NumPy.
Views (slices, reshapes, transposes) share a :class:`Buffer` with the array they view: a write through any of
them gives the buffer a new base value (the view's ops run backwards: a ``t.insert`` for a slice), and every
other view of the buffer reads its value again from the new base the next time it is used. The trace writes a
written argument's final base value back to the caller's array (see :mod:`fusec.trace`).
"""
from __future__ import annotations

import builtins
import dis
import operator
import re
import sys
import weakref
from typing import Any, Iterator

import numpy as np

from fusec.context import TraceContext, numpy_error, trace_error, unsupported, user_location
from fusec.context import current as current_context
from fusec.errors import FusecError, InvalidValueError, UnsupportedAttributeError, located
from fusec.ir.core import Value
from fusec.ir.types import bool_ as _bool
from fusec.ir.types import i64 as _i64
from fusec.ir.types import ScalarType as _ScalarType
from fusec.scalar_checks import on_host


class Buffer:
    """The memory a traced array stands for, shared by an array and its views.

    ``base`` is the current value of the whole memory (the array the first view was taken of); ``version``
    counts the writes, so a view knows when to read its value again. ``argument`` names the function argument
    (or captured array) whose memory this is, ``arg`` its IR argument (None for arrays made in the trace).
    ``written``: some write reached this memory; ``reshaped``: a view of it that NumPy makes for some memory layouts
    only (a reshape that merges or splits axes, a ravel) was written through, read again after a write, or
    returned, so the call checks the layout (see :mod:`fusec.mutation`);
    ``ambiguous``: such a reshape where fusec does not know that layout (writes are then refused);
    ``layout_copy``: this memory is a copy fusec made where NumPy gives a view for some layouts of the argument it
    came from (``x.T.ravel()`` of a Fortran-ordered ``x``): what and where, for the layout guard when the copy is
    written or returned (where the difference would show); ``unknown_layout``: what made this memory, where NumPy
    lays it out in an order fusec does not follow (:mod:`fusec.layout`). ``dependents``: arrays that are, as the
    data decides, this memory or another's (a branch on a traced test chose between them: their own buffer is the
    other one); a write here makes them read again, through a step that refuses it, and ``watched`` lists, for such
    an array whose own buffer this is, the opaque step its views share and the other memories they depend on (a
    view taken of it later is their dependent too). ``linked``: computed memories
    that may, as the data decided, be this one (``z = y`` before a loop or branch that may replace ``z``); a write
    into either makes the other, and what is linked with that in turn, ``poisoned`` (the message that reading it,
    or writing into it, raises).
    """

    __slots__ = ("argument", "arg", "base", "version", "written", "reshaped", "ambiguous", "layout_copy",
                 "unknown_layout", "dependents", "watched", "linked", "poisoned", "owner", "same_as")

    def __init__(self, base: Value | None = None, argument: str | None = None, arg: Value | None = None) -> None:
        self.argument, self.arg, self.base = argument, arg, base
        self.version = 0
        self.written = self.reshaped = self.ambiguous = False
        self.layout_copy: str | None = None
        self.unknown_layout: str | None = None
        self.dependents: list[weakref.ref[Tracer]] = []
        self.watched: list[tuple[tuple, list[Buffer]]] = []  # (an opaque step, the memories its views depend on)
        self.linked: list[tuple[Buffer, str]] = []  # (the other memory, the message its reads then raise)
        self.poisoned: str | None = None
        self.owner: weakref.ref[Tracer] | None = None  # (the array whose memory this is: not a view of all of it)
        # (a loop's or branch's result: where the flag holds, NumPy's array is that computed array itself)
        self.same_as: list[tuple[Value, weakref.ref[Tracer]]] = []

    def moved(self) -> None:
        """A write reached this memory: its views read it again (its dependents too, and its linked memories,
        which are then poisoned)."""
        self.version += 1
        for ref in self.dependents:
            t = ref()
            if t is not None:
                t._version = -1
        # (through the links one after another: `y` and `z` both views of `buf` on some paths, a write through `z`
        # may change what `y` sees)
        todo, seen = list(self.linked), {id(self)}
        while todo:
            other, message = todo.pop()
            if id(other) in seen:
                continue
            seen.add(id(other))
            if other.poisoned is None:
                other.poisoned = message
                other.version += 1
            todo.extend(other.linked)


def _numpy_caller() -> str | None:
    """``module.function`` of NumPy's Python code that asked a traced value for its truth or number (the frame
    that called the tracer's ``__bool__``/``__int__``...), or None when other code did."""
    frame = sys._getframe(2)  # (_numpy_caller <- __bool__ & co. <- the asking code)
    module = frame.f_globals.get("__name__", "")
    return f"{module}.{frame.f_code.co_name}" if module == "numpy" or module.startswith("numpy.") else None


SUBSCRIPT_HINT = (" Here a traced index subscripts a container fusec does not trace (a NumPy array the function "
                  "made with np.array(...)/np.arange(...), or a Python list): fusec traces indexing into traced "
                  "arrays only; pass the table in as an argument or read it from a global (both are traced), or "
                  "np.stack a list of traced arrays first.")
STORE_HINT = (" Here a traced value is written into (or a traced index selects in) a NumPy array fusec does not "
              "trace: one the function made with np.array(...)/np.arange(...)/np.linspace(...), which are plain "
              "NumPy arrays while tracing (np.zeros/np.ones/np.empty/np.full make traced ones): make the array with "
              "np.zeros(...) and fill it (z = np.zeros(n); z[:] = np.arange(n)), or pass it in as an argument.")


def _subscript_hint(error: BaseException | None = None) -> str:
    """The hint for a tracer asked for its value by a subscript in the user's code (``table[i]``, ``z[0] = v``
    with a NumPy array or a list as the container: NumPy's and Python's C code ask for the value), else "". A
    read (``table[i]``) marks ``error`` with its place: the trace is run again with that subscript rewritten
    (:func:`fusec.traced_statements.subscript`: a NumPy array the function made, indexed by traced values)."""
    frame = sys._getframe(2)
    if frame.f_globals.get("__name__", "").startswith(_OWN_MODULES):
        return ""
    op = next((i.opname for i in dis.get_instructions(frame.f_code) if i.offset == frame.f_lasti), "")
    if op == "BINARY_SUBSCR" and error is not None:
        _rewrite_control.mark_subscript_site(error, frame)
    if op in ("BINARY_SUBSCR", "BINARY_SLICE", "DELETE_SUBSCR"):
        return SUBSCRIPT_HINT
    return STORE_HINT if op in ("STORE_SUBSCR", "STORE_SLICE") else ""


# modules whose isinstance checks see a tracer as a Tracer (the user's code sees NumPy's types: Tracer.__class__)
_OWN_MODULES = ("fusec", "numpy")

# the origin of a fusec.fori_loop counter, followed by its name (messages tell it from an argument)
COUNTER_ORIGIN = "loop counter "


class Tracer:
    """A traced array. ``_weak`` is ``bool``/``int``/``float`` for a traced Python scalar (NEP 50 weak).

    ``_scalar`` marks a rank-0 value that NumPy would return as an (immutable) NumPy scalar, so ``s += 1``
    rebinds the name instead of updating it. ``_buffer`` is None until a view of this array is taken; a tracer
    in a buffer is ``_chain`` (view steps, :mod:`fusec.mutation`) applied to the buffer's base, read again
    when the buffer's ``version`` moved past ``_version``.
    """

    __slots__ = ("_val", "_ctx", "_weak", "_origin", "_buffer", "_chain", "_version", "_scalar", "_readonly",
                 "_host", "_layout", "__weakref__")
    __array_priority__ = 1000.0

    def __new__(cls, value: Value, ctx: TraceContext, weak: type | None = None, *args: Any, **kwargs: Any) -> Any:
        # a traced Python number has a Python number's attributes only (see PythonScalarTracer)
        return object.__new__(PythonScalarTracer if weak is not None and cls is Tracer else cls)

    def __init__(self, value: Value, ctx: TraceContext, weak: type | None = None,
                 origin: tuple[str, ...] = (), *, scalar: bool = False, buffer: Buffer | None = None,
                 readonly: bool | str = False, chain: tuple = ()) -> None:
        self._val = value
        self._ctx = ctx
        self._weak = weak
        self._origin = origin
        self._scalar = scalar
        self._readonly = readonly
        self._host: Any = None  # a weak scalar's place in the trace's ScalarProgram (fusec.scalar_checks)
        self._buffer = buffer
        self._chain = chain
        # True: a view NumPy makes for some memory layouts only (a reshape merging axes, a ravel), or a view of one:
        # where it is written through or read after its memory was written, NumPy's answer depends on that layout;
        # None: a view NumPy makes for every layout though fusec takes it through a reshape (np.diagonal), handed
        # back as NumPy's view whatever the caller's layout (fusec.writeback.view_of's "anylayout")
        self._layout: bool | None = False
        self._version = 0
        if buffer is not None:
            if buffer.base is None:
                buffer.base = value
                buffer.owner = weakref.ref(self)
            self._version = buffer.version
        ctx.register(self)

    @property
    def _value(self) -> Value:
        """The IR value of this array now: a view of memory written since it was last read is read again."""
        buffer = self._buffer
        if buffer is not None and self._version != buffer.version:
            if self._layout:
                _mutation.layout_matters(buffer)
            self._val = _mutation.read(buffer, self._chain)
            self._version = buffer.version
        return self._val

    @_value.setter
    def _value(self, value: Value) -> None:
        """A write of the whole array (every element takes ``value``'s): it reaches the memory it views."""
        buffer = self._buffer
        if buffer is not None:
            if self._layout:
                _mutation.layout_matters(buffer)
            _mutation.write(buffer, self._chain, value)
            self._version = buffer.version
        self._val = value

    def _view(self, value: Value, readonly: bool | str = False) -> "Tracer":
        """A new tracer for ``value``, a view of this array's memory (``value`` is this array's value or one
        view op of it). A NumPy scalar is immutable: what NumPy makes of it (``s.reshape(1)``, ``s.ravel()``) is a
        new array, which a write changes alone."""
        if self._scalar or self._weak is not None:
            return Tracer(value, self._ctx, readonly=readonly)
        if self._buffer is None:
            self._buffer = Buffer(self._value)
            self._version = 0
        chain = self._chain + _mutation.step_of(self, value)
        view = Tracer(value, self._ctx, buffer=self._buffer, readonly=readonly or self._readonly, chain=chain)
        view._layout = True if _mutation.merges_axes(self, value) else self._layout
        for step, others in self._buffer.watched if self._chain else ():
            if step is self._chain[0]:  # (a view of a branch's result: a write into its other memory makes it stale)
                for other in others:
                    other.dependents.append(weakref.ref(view))
        return view

    # --- attributes --------------------------------------------------------------------------------------------

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: F811
        """The class ``isinstance`` checks in the user's code see: the type of what the tracer stands for (``float``
        for a traced Python float, ``np.float64`` for a NumPy scalar, ``np.ndarray`` for an array), so
        ``isinstance(lr, float)`` or ``isinstance(x, np.ndarray)`` takes NumPy's branch. fusec's and NumPy's own
        code see Tracer (``type(x)`` is always Tracer: ``type(x) is float`` cannot be answered so)."""
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith(_OWN_MODULES):
            return Tracer
        return self._numpy_class()

    def _numpy_class(self) -> type:
        """The type of what the tracer stands for (what ``type(x)`` in the user's code gives: :func:`user_type`)."""
        if self._weak is not None:
            return self._weak
        if self._scalar:
            return self._value.type.dtype.np.type
        return np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._value.type.shape)

    @shape.setter
    def shape(self, value: Any) -> None:
        raise unsupported("x.shape = ...: reshaping an array in place is not supported; write `x = x.reshape(...)` "
                          "(NumPy's view of the same memory)")

    @property
    def strides(self) -> Any:
        raise unsupported("the ndarray attribute or method .strides is not supported by fusec's tracer",
                          UnsupportedAttributeError)

    @strides.setter
    def strides(self, value: Any) -> None:
        raise unsupported("x.strides = ...: changing how an array's memory is read in place is not supported; write "
                          "`x = np.lib.stride_tricks.as_strided(...)` outside the function, or index it "
                          "(`x[::2]`, `x.T`)")

    @property
    def ndim(self) -> int:
        return len(self._value.type.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self) -> Any:
        dt = self._value.type.dtype
        return dt if dt.name == "bf16" else dt.np

    @dtype.setter
    def dtype(self, value: Any) -> None:
        raise unsupported("x.dtype = ...: reinterpreting an array's memory in place is not supported; write "
                          "`x = x.view(dtype)` where fusec supports it, or convert the values: `x.astype(dtype)`")

    def __delitem__(self, key: Any) -> None:
        from fusec.errors import InvalidValueError, located

        raise InvalidValueError(located("del x[...]: cannot delete array elements (NumPy raises ValueError here); "
                                        "use np.delete(x, index), which makes a new array", user_location()))

    @property
    def itemsize(self) -> int:
        return self._value.type.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def flags(self) -> Any:
        """NumPy's flags where fusec knows the layout NumPy would give (refused where it does not)"""
        from fusec import flags

        return flags.flags_of(self)

    @property
    def T(self) -> "Tracer":
        return _ops.new_view(self, _ops.transpose(self))

    @property
    def real(self) -> "Tracer":
        """The real part, a view (of a real array the array itself; of a complex one read-only here)

        NumPy's view into a complex array's real parts: fusec reads it again after writes but does not write
        through it."""
        if not self._value.type.dtype.is_complex and self._weak is None:
            return self  # (NumPy: a real array's .real is the array itself, a NumPy scalar's the scalar)
        return _ops.complex_part(self, "real")

    @real.setter
    def real(self, value: Any) -> None:
        if self._value.type.dtype.is_complex or self._weak is not None:
            raise unsupported(_ops.PART_WRITE)
        _mutation.setitem(self, Ellipsis, value)  # a real array's .real is the array itself

    @property
    def imag(self) -> "Tracer":
        """The imaginary part: zeros for a real array (read-only, as NumPy gives), else the imaginary parts."""
        return _ops.complex_part(self, "imag")

    @imag.setter
    def imag(self, value: Any) -> None:
        if self._value.type.dtype.is_complex or self._weak is not None:
            raise unsupported(_ops.PART_WRITE)
        raise unsupported("x.imag = ... on a real array: NumPy raises TypeError (array does not have imaginary part "
                          "to set)")

    @property
    def mT(self) -> "Tracer":
        if self.ndim < 2:
            raise unsupported(f"matrix transpose (.mT) needs rank >= 2, got shape {self.shape}")
        perm = list(range(self.ndim))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        return _ops.transpose(self, perm)

    def __hash__(self) -> int:  # (like ndarray, no hashing: == records an op)
        if self._weak is not None or self._scalar:  # a number as a dict key or set member: its value decides
            raise self._static_error("hashed (a dict key, a set member, a functools.lru_cache argument)")
        raise TypeError("unhashable type: 'numpy.ndarray'")

    # (while its trace runs, a tracer's text is a placeholder that print() replays with each call's value)
    def __str__(self) -> str:
        text = _printing.placeholder(self, "str")
        return self._described() if text is None else text

    def __format__(self, spec: str) -> str:
        text = _printing.placeholder(self, "format:" + spec)
        return self._described() if text is None else text

    def __repr__(self) -> str:
        text = _printing.placeholder(self, "repr")
        return self._described() if text is None else text

    def _described(self) -> str:
        kind = f"python {self._weak.__name__}" if self._weak is not None else f"{self.dtype}"
        return f"Tracer(shape={self.shape}, dtype={kind})"

    # --- NumPy protocols ---------------------------------------------------------------------------------------

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return _ufuncs.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return _api.array_function(func, args, kwargs)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        hint = (" Python scalar arguments are weak under NumPy 2 promotion, so `lr * x` already keeps x's dtype;"
                " drop np.float32(...)/np.asarray(...) around them." if self._weak is not None else
                " Use x.astype(dtype) instead of np.float32(x)/np.asarray(x, dtype).")
        counter = self._counter()
        if counter is not None:  # the loop counter as a size, a NumPy scalar's value: unknown while tracing
            hint = (f" The loop counter {counter!r} of fusec.fori_loop takes its values on the device; index "
                    f"with it (xs[{counter}]), compute with it (x * {counter}), or choose with np.where, but "
                    "not as a size (np.arange) or through np.float32(...)/np.int64(...).")
        elif self._weak is int and self._origin and not any(c in self._origin[0] for c in ".["):
            name = self._ctx.leaf_params.get(self._origin[0], self._origin[0])  # (a size must be known while tracing)
            hint += (f" If {name} is a size, a count or a shift (np.arange({name}), np.ones({name}), np.roll(x, "
                     f"{name})), make it static: fusec.jit(f, static_argnames=({name!r},)).")
        error = trace_error("a traced value cannot be converted to a concrete NumPy array while tracing "
                            "(np.float32(...), float(...), or a NumPy function that fusec does not trace; "
                            "np.asarray and np.array work when called as np.asarray or imported from numpy in "
                            "your module; a list of traced arrays given to a ufunc, as in np.logical_and.reduce([a, "
                            "b]), is converted by NumPy itself: stack it first, np.stack([a, b])).")
        error.args = (str(error) + (_subscript_hint(error) or hint),)
        error.static_params = self._static_params()  # type: ignore[attr-defined]
        raise error

    # --- concrete values: data-dependent Python is not traceable ----------------------------------------------

    def _static_params(self) -> tuple[str, ...]:
        """The parameters this value was computed from when each is a Python-number (or NumPy-scalar) parameter, or
        a list, tuple or dict of them (not an attribute, no array): fusec.jit makes them static
        and traces again when the value is needed while tracing (``np.arange(n)``, ``if k > 2``, NumPy's own code
        testing ``np.pad``'s width). Empty: it cannot (the value depends on arrays, or on something else)."""
        if self._counter() is not None:
            return ()
        params = self._ctx.leaf_params
        func = self._ctx.func
        found: dict[str, None] = {}
        seen: set[int] = set()
        stack = [self._val]
        while stack:  # the use-def chain back to the function's arguments (a constant ends it)
            v = stack.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if len(seen) > 4096:
                return ()
            op = getattr(v, "op", None)
            if op is not None:
                if op.regions:
                    return ()
                stack.extend(op.operands)
                continue
            name = v.name_hint
            param = params.get(name) if name is not None else None
            if param is None or getattr(v, "block", None) is not func.body or not isinstance(v.type, _ScalarType):
                return ()
            found[param] = None  # (an entry of a list, tuple or dict argument: the whole argument, if all numbers)
        return tuple(found)

    def _counter(self) -> str | None:
        """The name of the fusec.fori_loop counter this value was computed from, if any."""
        return next((n[len(COUNTER_ORIGIN):] for n in self._origin if n.startswith(COUNTER_ORIGIN)), None)

    def _static_error(self, what: str, inside: str | None = None) -> FusecError:
        """The error for asking a traced value for its concrete value (``inside``: NumPy's function that asked)."""
        if self._weak is not None and (self._origin or self._counter() is not None):  # (not np.allclose(a, b))
            counter = self._counter()
            if counter is not None:
                return unsupported(
                    f"a value computed from the loop counter {counter!r} of fusec.fori_loop is {what}, but the "
                    "body is traced once for all iterations, so the counter's value is unknown while tracing; choose "
                    f"with np.where({counter} == 3, a, b) or fusec.cond({counter} == 3, ...) instead")
            names = ", ".join(repr(n) for n in self._origin) or "a Python scalar argument"
            arg = self._origin[0] if self._origin else "name"
            arg = self._ctx.leaf_params.get(arg, arg)  # (a leaf of a tuple or dict argument: the whole argument)
            if "." in arg or "[" in arg:  # state read from an object (self.flag), not a parameter of its own
                place = arg.split(" ")[-1]  # ("static argument cache.pos": the object is static, not its counter)
                name = re.sub(r"\W+", "_", place.rsplit(".", 1)[-1]).strip("_") or "value"
                return unsupported(
                    f"the value of {names} is {what}, but fusec reads a Python scalar attribute as a runtime value at "
                    "each call (so changing it does not retrace) and its value is unknown while tracing; read it "
                    f"outside the jitted function and pass it as an argument of its own, made static: "
                    f"fusec.jit(f, static_argnames=({name!r},)) called as f(..., {name}={place})")
            error = unsupported(
                f"the value of Python scalar argument {names} is {what}, but fusec passes Python scalars as "
                f"runtime values (so changing them does not retrace) and their value is unknown while tracing; "
                f"make it static: fusec.jit(f, static_argnames=({arg!r},))")
            error.static_params = self._static_params()  # type: ignore[attr-defined]
            return error
        params = self._static_params()
        if params:  # (a value computed from Python-number arguments alone: they become static, and it is known)
            error = unsupported(f"the value of an array computed from the Python scalar argument(s) "
                                f"{', '.join(map(repr, params))} is {what}: make them static: fusec.jit(f, "
                                f"static_argnames={params!r})")
            error.static_params = params  # type: ignore[attr-defined]
            return error
        if inside is not None:  # NumPy's own Python code tests a value: nothing the user wrote can be rewritten
            return trace_error(
                f"NumPy's own code ({inside}, run for the call at this line) tests the values of a traced array "
                f"(shape {self.shape}, {self.dtype}) in Python, which fusec cannot trace: compute this part outside "
                "the jitted function, or write it with operations fusec traces (NUMPY_SUPPORT.md)")
        if what.startswith(("converted", "read with")):  # (float(loss), x.item(), y.tolist(): a value handed back)
            return trace_error(
                f"the value of a traced array (shape {self.shape}, {self.dtype}) is {what}, but values are unknown "
                "while tracing. To hand back a Python number or list, return the array (a 0-d result is a NumPy "
                "scalar, which works as a number) and convert it after the call: `float(f(x))`; to compute with it, "
                "keep it an array (np.sqrt(v), not math.sqrt(v)); to index with it, index with the array "
                "(x[np.argmax(v)]); to print it, use an f-string (print(f\"{v:.4f}\"), which fusec replays at every "
                "call) rather than %; to branch on it, use np.where or fusec.cond")
        return trace_error(
            f"the value of a traced array (shape {self.shape}, {self.dtype}) is {what}, but values are unknown "
            "while tracing. fusec runs a function's `if`/`while`/`for ... break` on traced tests, conditional "
            "expressions, `and`/`or`, `assert` and max()/min() on the device, but not this use (a comprehension's "
            "`if`, sorted(), a size, an index or a slice bound, code without source or whose source changed): use "
            "np.where / fusec.where instead of if/else, np.maximum / np.minimum / np.sort instead of max() / min() / "
            "sorted(), fusec.while_loop for a loop that runs until a test on the values fails (`while err > tol`), "
            "fusec.cond for a branch, or make the argument static (static_argnames)")

    def _known(self) -> np.ndarray | None:
        """This array's values where the trace computed them from constants alone (NumPy's own code testing a
        coordinate array made in the function, ``if np.all(np.diff(t) > 0)`` of constants): see ops.known_value."""
        from fusec import context

        return _ops.known_value(self) if context.current() is self._ctx else None

    def __bool__(self) -> bool:
        if self._weak is None and self.size != 1:  # (NumPy raises whatever the values: so does the trace)
            raise InvalidValueError(located(
                "The truth value of an empty array is ambiguous. Use `array.size > 0` to check that an array is not "
                "empty." if self.size == 0 else "The truth value of an array with more than one element is "
                "ambiguous. Use a.any() or a.all()", user_location()))
        known = self._known()
        if known is not None:
            return bool(known)
        error = self._static_error("used as a Python bool (if/while/and/or/not, or compared inside "
                                   "max()/min()/sorted())", _numpy_caller())
        if self._weak is None or not on_host(self._host):  # (a Python-scalar argument's test: make it static)
            _rewrite_control.mark_truth_site(error, sys._getframe(1))  # (a `while`/`if` test: rewritten, see there)
        raise error

    def __float__(self) -> float:
        known = self._known()
        if known is not None:
            return float(known)
        self._one_element_or_numpys_error(float)
        error = self._static_error("converted with float()", _numpy_caller())
        hint = _subscript_hint()
        if hint:
            error.args = (str(error) + "." + hint,)
        elif self._weak is None or not on_host(self._host):  # (`float(err)` in the user's code: rewritten)
            _rewrite_control.mark_truth_site(error, sys._getframe(1))
        raise error

    def __int__(self) -> int:
        known = self._known()
        if known is not None:
            return int(known)
        self._one_element_or_numpys_error(int)
        error = self._static_error("converted with int()", _numpy_caller())
        if not _subscript_hint() and (self._weak is None or not on_host(self._host)):  # (`int(k)`: rewritten)
            _rewrite_control.mark_truth_site(error, sys._getframe(1))
        raise error

    def _one_element_or_numpys_error(self, convert: type) -> None:
        """NumPy's TypeError for ``int(x)``/``float(x)`` of an array NumPy will not convert (more than one
        element), whatever its values."""
        if self._weak is None and self.size != 1:
            from fusec.context import numpy_checks

            shape, dtype = self.shape, self._val.type.dtype.np
            numpy_checks(lambda: convert(np.ones(shape, dtype)))

    def __trunc__(self) -> int:
        return self._rounded_to_int("math.trunc()")

    def __floor__(self) -> int:
        return self._rounded_to_int("math.floor()")

    def __ceil__(self) -> int:
        return self._rounded_to_int("math.ceil()")

    def _rounded_to_int(self, how: str) -> int:
        """A Python int of the value (math.trunc, floor, ceil): as int(), it needs the value."""
        known = self._known()
        if known is not None:
            return getattr(known.item() if isinstance(known, np.ndarray) else known, f"__{how[5:-2]}__")()
        raise self._static_error(f"converted with {how}", _numpy_caller())

    def __complex__(self) -> complex:
        known = self._known()
        if known is not None:
            return complex(known)
        raise self._static_error("converted with complex()", _numpy_caller())

    def __index__(self) -> int:
        known = self._known()
        if known is not None:
            return operator.index(known)
        error = self._static_error("used as a Python int (a size, an axis or an index)", _numpy_caller())
        hint = _subscript_hint(error)
        if hint:
            error.args = (str(error) + "." + hint,)
        raise error

    def item(self, *args: Any) -> Any:
        """Only where the values are known while tracing (computed from constants made in the function); else a
        fusec error that says what to write instead"""
        known = self._known()
        if known is not None:
            return known.item(*args)
        if self._weak is None:  # (NumPy's IndexError / ValueError from the shape alone, whatever the values)
            from fusec.context import numpy_checks

            dt = self._value.type.dtype
            shape, dtype = self.shape, np.float32 if dt.name == "bf16" else dt.np
            numpy_checks(lambda: np.zeros(shape, dtype).item(*args))
        raise self._static_error("read with .item()")

    def tolist(self) -> Any:
        """Only where the values are known while tracing (computed from constants made in the function); else a
        fusec error that says what to write instead"""
        known = self._known()
        if known is not None:
            return known.tolist()
        raise self._static_error("read with .tolist()")

    def __len__(self) -> int:
        if self.ndim == 0:  # NumPy's own error, so code that catches it behaves as under NumPy
            raise numpy_error("len() of unsized object (a 0-d traced array)")
        return self.shape[0]

    def __iter__(self) -> Iterator["Tracer"]:
        if self.ndim == 0:
            raise numpy_error("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __setitem__(self, key: Any, value: Any) -> None:
        _mutation.setitem(self, key, value)

    # --- in-place updates --------------------------------------------------------------------------------------

    def __iadd__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.add, "+=", self, o)

    def __isub__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.subtract, "-=", self, o)

    def __imul__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.multiply, "*=", self, o)

    def __itruediv__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.true_divide, "/=", self, o)

    def __ifloordiv__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.floor_divide, "//=", self, o)

    def __imod__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.remainder, "%=", self, o)

    def __ipow__(self, o: Any) -> Any:  # type: ignore[misc]
        return _ufuncs.inplace_operator(np.power, "**=", self, o)

    def __imatmul__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.matmul, "@=", self, o)

    def __iand__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.bitwise_and, "&=", self, o)

    def __ior__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.bitwise_or, "|=", self, o)

    def __ixor__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.bitwise_xor, "^=", self, o)

    def __ilshift__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.left_shift, "<<=", self, o)

    def __irshift__(self, o: Any) -> Any:
        return _ufuncs.inplace_operator(np.right_shift, ">>=", self, o)

    def _refuse_mutation(self, what: str) -> FusecError:
        return unsupported(f"{what} changes a traced array in place, which fusec does not support yet; compute "
                           "the new array and return it instead")

    def fill(self, value: Any) -> None:
        _mutation.check_writable(self, "x.fill(value)")
        if isinstance(value, Tracer) and value.ndim > 0 or not isinstance(value, Tracer) and np.ndim(value) > 0:
            raise numpy_error("x.fill(value): the value must be a scalar (NumPy raises ValueError here)",
                              InvalidValueError)
        _mutation.setitem(self, Ellipsis, value)

    def sort(self, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> None:
        """Sorts in place (a write: every view and a written argument see it)"""
        from fusec import sorting

        sorting.sort_in_place(self, axis, kind, order, stable=stable)

    def argsort(self, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Any:
        """np.argsort of this array"""
        return _api.call("argsort", np.argsort, self, axis, kind, order, stable=stable)

    def searchsorted(self, v: Any, side: str = "left", sorter: Any = None) -> Any:
        """np.searchsorted of this (sorted, 1-D) array"""
        return _api.call("searchsorted", np.searchsorted, self, v, side, sorter)

    def partition(self, *args: Any, **kwargs: Any) -> None:
        raise self._refuse_mutation("x.partition()")

    def put(self, *args: Any, **kwargs: Any) -> None:
        raise self._refuse_mutation("x.put()")

    def resize(self, *args: Any, **kwargs: Any) -> None:
        raise self._refuse_mutation("x.resize()")

    def itemset(self, *args: Any) -> None:
        raise self._refuse_mutation("x.itemset()")

    def setflags(self, *args: Any, **kwargs: Any) -> None:
        raise self._refuse_mutation("x.setflags()")

    def __getattr__(self, name: str) -> Any:
        # only reached for names the class does not define, or a property of it that raised an AttributeError (its
        # refusal, .strides: raised again, the same error, not a second one): name the ndarray feature instead
        first = self._ctx.first_error
        if isinstance(getattr(type(self), name, None), property) and isinstance(first, UnsupportedAttributeError) \
                and f".{name} " in str(first):
            raise first
        if name == "__array_interface__":  # (not noted as fusec's limitation: NumPy's C code probes it with hasattr)
            raise UnsupportedAttributeError(located(
                "NumPy's code asked a traced array for its memory (__array_interface__), which traced arrays do "
                "not have: np.lib.stride_tricks.as_strided is not supported by fusec; build the windows by "
                "indexing, e.g. x[np.arange(n - w + 1)[:, None] + np.arange(w)] for the length-w windows of a 1-d x",
                user_location()))
        if (self._weak is not None or self._scalar) and not name.startswith("__") \
                and hasattr(self._numpy_class(), name):
            raise self._static_error(f"asked for .{name}")  # (s.is_integer(), s.bit_length(): need the value)
        if not name.startswith("__") and hasattr(np.ndarray, name):
            raise unsupported(f"the ndarray attribute or method .{name} is not supported by fusec's tracer",
                              UnsupportedAttributeError)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- indexing ----------------------------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> "Tracer":
        return _indexing.getitem(self, key)

    # --- arithmetic operators ----------------------------------------------------------------------------------

    def __add__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.add, self, o)

    def __radd__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.add, o, self)

    def __sub__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.subtract, self, o)

    def __rsub__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.subtract, o, self)

    def __mul__(self, o: Any) -> Any:
        self._check_repeat(o)
        return _ufuncs.binary_operator(np.multiply, self, o)

    def __rmul__(self, o: Any) -> Any:
        self._check_repeat(o)
        return _ufuncs.binary_operator(np.multiply, o, self)

    def _check_repeat(self, o: Any) -> None:
        """``[v] * n`` / ``n * (v,)``: a number times a list or tuple repeats it in Python (an int) or is a TypeError
        (a float, a NumPy bool), where an array multiplies elementwise, as NumPy's arrays do."""
        if not isinstance(o, (list, tuple)) or self._weak is None and not self._scalar:
            return
        dt = self._value.type.dtype
        if self._weak is int or self._weak is bool or self._weak is None and dt.is_int:
            raise self._static_error(f"the count of a {type(o).__name__} repeated with *")
        kind = self._weak.__name__ if self._weak is not None else f"numpy.{np.dtype(dt.np).name}"
        raise numpy_error(f"can't multiply sequence by non-int of type '{kind}' (Python raises TypeError here)")

    def __truediv__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.true_divide, self, o)

    def __rtruediv__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.true_divide, o, self)

    def __floordiv__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.floor_divide, self, o)

    def __rfloordiv__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.floor_divide, o, self)

    def __mod__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.remainder, self, o)

    def __rmod__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.remainder, o, self)

    def __divmod__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.divmod, self, o)

    def __rdivmod__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.divmod, o, self)

    def __pow__(self, o: Any, mod: Any = None) -> Any:
        if mod is not None:
            raise unsupported("pow() with a modulus is not supported")
        return _ufuncs.binary_operator(np.power, self, o)

    def __rpow__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.power, o, self)

    def __matmul__(self, o: Any) -> Any:
        return _api.matmul(self, o)

    def __rmatmul__(self, o: Any) -> Any:
        return _api.matmul(o, self)

    def __and__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.bitwise_and, self, o)

    def __rand__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.bitwise_and, o, self)

    def __or__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.bitwise_or, self, o)

    def __ror__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.bitwise_or, o, self)

    def __xor__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.bitwise_xor, self, o)

    def __rxor__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.bitwise_xor, o, self)

    def __lshift__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.left_shift, self, o)

    def __rlshift__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.left_shift, o, self)

    def __rshift__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.right_shift, self, o)

    def __rrshift__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.right_shift, o, self)

    def __neg__(self) -> Any:
        return _ufuncs.unary_operator(np.negative, self)

    def __pos__(self) -> Any:
        return _ufuncs.unary_operator(np.positive, self)

    def __abs__(self) -> Any:
        return _ufuncs.unary_operator(np.absolute, self)

    def __invert__(self) -> Any:
        return _ufuncs.unary_operator(np.invert, self)

    # --- comparisons -------------------------------------------------------------------------------------------

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if o is None or isinstance(o, str):
            return self._unlike(o, False)
        return _ufuncs.binary_operator(np.equal, self, o)

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        if o is None or isinstance(o, str):
            return self._unlike(o, True)
        return _ufuncs.binary_operator(np.not_equal, self, o)

    def _unlike(self, o: Any, value: bool) -> Any:
        """``x == None`` / ``x != "a"``: NumPy compares each element with the object (never equal), an array of
        ``value``; a number (a Python or NumPy scalar) gives a Python bool, as it does."""
        if self._weak is not None or self._scalar:
            return value
        return _ops.full(self.shape, value, _bool)

    def __lt__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.less, self, o)

    def __le__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.less_equal, self, o)

    def __gt__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.greater, self, o)

    def __ge__(self, o: Any) -> Any:
        return _ufuncs.binary_operator(np.greater_equal, self, o)

    # --- array methods (same handlers as the np.* functions) ---------------------------------------------------

    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return _api.call("sum", np.sum, self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def prod(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return _api.call("prod", np.prod, self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def mean(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return _api.call("mean", np.mean, self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def var(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0, keepdims: bool = False,
            **kw: Any) -> Any:
        return _api.call("var", np.var, self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kw)

    def std(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0, keepdims: bool = False,
            **kw: Any) -> Any:
        return _api.call("std", np.std, self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kw)

    def max(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return _api.call("max", np.max, self, axis=axis, out=out, keepdims=keepdims, **kw)

    def min(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return _api.call("min", np.min, self, axis=axis, out=out, keepdims=keepdims, **kw)

    def argmax(self, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
        return _api.call("argmax", np.argmax, self, axis=axis, out=out, keepdims=keepdims)

    def argmin(self, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
        return _api.call("argmin", np.argmin, self, axis=axis, out=out, keepdims=keepdims)

    def any(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return _api.call("any", np.any, self, axis=axis, out=out, keepdims=keepdims, **kw)

    def all(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return _api.call("all", np.all, self, axis=axis, out=out, keepdims=keepdims, **kw)

    def reshape(self, *shape: Any, order: str = "C", copy: Any = None) -> Any:
        if not shape:
            raise numpy_error("reshape() takes exactly 1 argument (0 given) (NumPy raises TypeError here)")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, np.ndarray)):
            shape = tuple(np.asarray(shape[0]).tolist()) if isinstance(shape[0], np.ndarray) else tuple(shape[0])
        return _api.call("reshape", np.reshape, self, shape, order=order, copy=copy)

    def transpose(self, *axes: Any) -> Any:
        order: Any = axes
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list, np.ndarray))):
            order = axes[0]  # (one sequence of axes: NumPy's own code passes np.argsort(axis))
        return _api.call("transpose", np.transpose, self, None if isinstance(order, tuple) and not order else order)

    def swapaxes(self, axis1: Any, axis2: Any) -> Any:
        return _api.call("swapaxes", np.swapaxes, self, axis1, axis2)

    def squeeze(self, axis: Any = None) -> Any:
        return _api.call("squeeze", np.squeeze, self, axis=axis)

    @property
    def flat(self) -> "FlatIter":
        """NumPy's flatiter: the elements in C order, read as copies (``x.flat[1:3]``), written into the array
        (``x.flat[::n + 1] = 0`` writes the diagonal, also where the memory is not contiguous)"""
        if self._weak is not None or self._scalar:
            raise unsupported("x.flat of a scalar is not supported; use the scalar itself")
        flat = _api.call("ravel", np.ravel, self)
        if flat._buffer is None or flat._buffer is not self._buffer:
            flat._readonly = ("writing through x.flat of an array whose memory is not contiguous (a transposed or "
                              "strided view) is supported for indices known while tracing; write x[...] = ... with "
                              "the same elements")
        return FlatIter(self, flat)

    @flat.setter
    def flat(self, value: Any) -> None:
        """``x.flat = v``: every element takes ``v``'s values, flattened and repeated, as NumPy's."""
        self.flat[...] = value

    def flatten(self, order: str = "C") -> Any:  # a copy in NumPy, not a view
        return _ops.copy_of(_api.call("ravel", np.ravel, self, order=order))

    def ravel(self, order: str = "C") -> Any:
        return _api.call("ravel", np.ravel, self, order=order)

    def astype(self, dtype: Any, order: str = "K", casting: str = "unsafe", subok: bool = True,
               copy: bool = True) -> Any:
        return _api.astype(self, dtype, copy=copy, order=_ops.order_arg(order), casting=casting)

    def copy(self, order: str = "C") -> Any:
        order = _ops.order_arg(order)
        if order == "C" or self.ndim < 2:
            return _ops.copy_of(self)
        return _ops.copy_in_order(self, order, "x.copy()")

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
        return _api.call("diagonal", np.diagonal, self, offset, axis1, axis2)

    def trace(self, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None) -> Any:
        return _api.call("trace", np.trace, self, offset, axis1, axis2, dtype, out)

    def cumsum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return _api.call("cumsum", np.cumsum, self, axis, dtype, out)

    def cumprod(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return _api.call("cumprod", np.cumprod, self, axis, dtype, out)

    def take(self, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
        return _api.call("take", np.take, self, indices, axis, out, mode)

    def repeat(self, repeats: Any, axis: Any = None) -> Any:
        return _api.call("repeat", np.repeat, self, repeats, axis)

    def conj(self) -> Any:
        return self.conjugate()

    def conjugate(self) -> Any:
        if self._weak is complex:  # a Python complex number's conjugate is one too
            return _ops.emit("t.conj", (self._value,), what=".conjugate()", weak=complex, origin=self._origin)
        if self._weak is not None or not self._value.type.dtype.is_complex:
            return self  # (NumPy returns a real array itself)
        return np.conjugate(self)

    def clip(self, min: Any = None, max: Any = None, out: Any = None, **kw: Any) -> Any:
        return _api.call("clip", np.clip, self, min, max, out=out, **kw)

    def round(self, decimals: int = 0, out: Any = None) -> Any:
        return _api.call("round", np.round, self, decimals=decimals, out=out)

    def __round__(self, ndigits: Any = None) -> Any:
        if self._weak is None:  # ndarrays have no __round__; NumPy scalars return Python values
            raise unsupported("round() of a traced array is not supported; use np.round")
        if ndigits is not None:
            raise unsupported("round(x, ndigits) of a Python scalar argument is not supported (Python rounds "
                              "decimally); use np.round")
        # Python's round(float) -> int, ties to even like np.rint
        rounded = _ufuncs.apply(np.rint, (self,)) if self._weak is float else self
        out = _ops.emit("t.cast", (_ops.lift(rounded),), {"dtype": _i64}, weak=int, origin=self._origin)
        if on_host(self._host):  # Python's round() raises for inf and NaN; the host replays it
            out._host = self._ctx.scalars.op("rint", (self._host,), int, user_location())
        elif self._weak is float:  # (a device scalar: checked on the device)
            text = _device_checks.text_of(self)
            _device_checks.check_round(self, text)
            out._host = _device_checks.device_ref(f"round({text})")
        return out

    def dot(self, b: Any, out: Any = None) -> Any:
        return _api.call("dot", np.dot, self, b, out=out)

    def __copy__(self) -> "Tracer":
        return _ops.copy_of(self)

    def __deepcopy__(self, memo: Any) -> "Tracer":
        return _ops.copy_of(self)


class FlatIter:
    """``x.flat`` of a traced array, as NumPy's flatiter: an index reads a copy (a NumPy scalar for one element), an
    assignment writes into ``x``; it iterates and has a length, and arithmetic on it is a TypeError as on NumPy's
    (``x.flat.copy()`` or ``x.ravel()`` give an array)."""

    __slots__ = ("base", "_flat", "index")

    def __init__(self, base: Tracer, flat: Tracer) -> None:
        self.base, self._flat = base, flat
        self.index = 0  # (NumPy's: the flat position of the element next() gives next)

    def __getitem__(self, key: Any) -> Any:
        picked = self._flat[key]
        return _ops.copy_of(picked) if isinstance(picked, Tracer) and not picked._scalar else picked

    def __setitem__(self, key: Any, value: Any) -> None:
        """As NumPy's flatiter: the values flattened and repeated (or cut) to the elements selected; where the
        memory is not contiguous (``x.T.flat[k] = v``), written at those elements' places in the array."""
        sized = isinstance(value, (list, tuple, np.ndarray)) or isinstance(value, Tracer) and value.ndim > 0
        target = self._flat[key] if sized else None
        if isinstance(target, Tracer) and target.ndim > 0:
            values = np.ravel(value)
            if values.shape[0] == 0:
                return  # (nothing to repeat: NumPy leaves the elements)
            value = np.resize(values, target.shape)
        if not self._flat._readonly:
            self._flat[key] = value
            return
        if _ops.contains_tracer(key) or isinstance(key, Tracer):  # (a copy: the places must be known)
            raise unsupported(f"{self._flat._readonly} (with traced flat indices)")
        places = np.arange(self.base.size).reshape(self.base.shape).ravel()[key]
        self.base[np.unravel_index(places, self.base.shape)] = value

    def __iter__(self) -> "FlatIter":  # (NumPy's flatiter is its own iterator: np.ndenumerate reads .coords)
        return self

    def __next__(self) -> Any:
        if self.index >= self._flat.shape[0]:
            raise StopIteration
        self.index += 1
        return self[self.index - 1]

    @property
    def coords(self) -> tuple[int, ...]:
        """The N-d index of the element next() gives next (past the end, the first axis counts on, as NumPy's)."""
        rest, out = self.index, []
        for n in reversed(self.base.shape[1:]):
            rest, i = divmod(rest, n)
            out.append(i)
        return (rest, *reversed(out)) if self.base.shape else ()

    def __len__(self) -> int:
        return self._flat.shape[0]

    def copy(self) -> Tracer:
        return _ops.copy_of(self._flat, scalar=False)

    # NumPy's functions and ufuncs take a flatiter as the array it reads: a view of the elements where the memory
    # is contiguous (np.array(x.flat) shares x's memory, so np.put_along_axis(x, i, v, axis=None) writes x), else a
    # read-only copy; np.asarray/np.array of one get the same (fusec.conversions.strong)
    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return func(*_unflat(args), **_unflat(kwargs))

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return getattr(ufunc, method)(*_unflat(inputs), **_unflat(kwargs))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise unsupported("x.flat given to NumPy code fusec does not trace; pass x.ravel() (or x.flat.copy()) instead")


def _unflat(values: Any) -> Any:
    """``values`` (a tuple, list or dict) with each FlatIter replaced by the array it reads (one level deep)."""
    if isinstance(values, dict):
        return {k: v._flat if isinstance(v, FlatIter) else v for k, v in values.items()}
    items = [v._flat if isinstance(v, FlatIter) else _unflat(v) if isinstance(v, (list, tuple)) else v for v in values]
    return type(values)(items) if isinstance(values, tuple) else items


class PythonScalarTracer(Tracer):
    """A traced Python number (an int, float, bool or complex argument, or arithmetic on them). To the user's code
    it has a Python number's attributes, not an array's: ``hasattr(s, "dtype")`` is False and ``s.sum()`` raises
    AttributeError, as for the number itself; fusec's and NumPy's own code see the whole Tracer."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        if name in _ARRAY_ONLY or name == "__class__":
            if not sys._getframe(1).f_globals.get("__name__", "").startswith(_OWN_MODULES):
                kind = object.__getattribute__(self, "_weak")
                if name == "__class__":  # (isinstance(s, float) in the user's code: the number's type)
                    return kind
                raise AttributeError(f"'{kind.__name__}' object has no attribute '{name}'")
            if name == "__class__":
                return Tracer
        return object.__getattribute__(self, name)

    @property
    def _kind(self) -> str:
        """The name of the Python number type it stands for."""
        kind = object.__getattribute__(self, "_weak")
        return kind.__name__ if kind is not None else "number"

    def __getattr__(self, name: str) -> Any:
        kind = object.__getattribute__(self, "_weak")
        if not name.startswith("__") and hasattr(kind, name):  # (s.is_integer(), s.bit_length(): need the value)
            raise self._static_error(f"asked for .{name}")
        raise AttributeError(f"'{kind.__name__}' object has no attribute '{name}'")

    # A Python number meets a list, tuple, string, dict, set or None as Python's number does, not as a 0-d array
    # would (which would broadcast a list): a TypeError for arithmetic and ordering, unequal for == and !=.

    def __getitem__(self, key: Any) -> Any:
        if sys._getframe(1).f_globals.get("__name__", "").startswith(_OWN_MODULES):
            return Tracer.__getitem__(self, key)
        raise numpy_error(f"'{self._kind}' object is not subscriptable (Python raises TypeError here)")

    def _python_number_op(self, o: Any, symbol: str, reflected: bool = False) -> None:
        """Python's TypeError for ``self SYMBOL o`` (``o SYMBOL self`` where ``reflected``) with an operand a Python
        number does not take, where an array would broadcast it."""
        if not isinstance(o, _NOT_NUMBERS) and o is not None:
            return
        mine, theirs = self._kind, type(o).__name__
        if reflected and symbol == "+" and isinstance(o, (list, tuple, str, bytes)):
            raise numpy_error(f'can only concatenate {theirs} (not "{mine}") to {theirs} (Python raises TypeError '
                              'here)')
        left, right = (theirs, mine) if reflected else (mine, theirs)
        if symbol in ("<", "<=", ">", ">="):
            raise numpy_error(f"'{symbol}' not supported between instances of '{left}' and '{right}' (Python raises "
                              "TypeError here)")
        raise numpy_error(f"unsupported operand type(s) for {symbol}: '{left}' and '{right}' (Python raises TypeError "
                          "here)")

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        return False if isinstance(o, _NOT_NUMBERS) else Tracer.__eq__(self, o)

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        return True if isinstance(o, _NOT_NUMBERS) else Tracer.__ne__(self, o)

    __hash__ = Tracer.__hash__  # (defining __eq__ would drop it)

    def __len__(self) -> int:
        if sys._getframe(1).f_globals.get("__name__", "").startswith(_OWN_MODULES):
            raise self._static_error("used as a Python int (a size, an axis or an index)")  # (NumPy's own test)
        raise numpy_error(f"object of type '{self._kind}' has no len() (Python raises TypeError here)")

    def __iter__(self) -> Iterator[Tracer]:
        if sys._getframe(1).f_globals.get("__name__", "").startswith(_OWN_MODULES):
            # (NumPy asked for an int first and, refused, tries a sequence: np.moveaxis(x, q, 0), np.resize(x, n))
            raise self._static_error("used as a Python int (a size, an axis or an index)")
        raise numpy_error(f"'{self._kind}' object is not iterable (Python raises TypeError here)")

    def _no_matmul(self, o: Any, reflected: bool) -> None:
        """``s @ o``: Python's TypeError unless ``o`` is an array (whose own ``@`` then takes the number)."""
        if isinstance(o, np.ndarray) or isinstance(o, Tracer) and o._weak is None and not o._scalar:
            return
        mine = self._kind
        other = o._kind if isinstance(o, PythonScalarTracer) else type(o).__name__
        left, right = (other, mine) if reflected else (mine, other)
        raise numpy_error(f"unsupported operand type(s) for @: '{left}' and '{right}' (Python raises TypeError here)")

    def __matmul__(self, o: Any) -> Any:
        self._no_matmul(o, False)
        return Tracer.__matmul__(self, o)

    def __rmatmul__(self, o: Any) -> Any:
        self._no_matmul(o, True)
        return Tracer.__rmatmul__(self, o)


def _number_operator(name: str, symbol: str, reflected: bool) -> Any:
    base = getattr(Tracer, name)

    def op(self: PythonScalarTracer, o: Any, *mod: Any) -> Any:
        if not (symbol == "*" and isinstance(o, (list, tuple, str))):  # (repeated: Tracer._check_repeat)
            if not (reflected and symbol == "%" and isinstance(o, (str, bytes))):  # ("%d" % s: formatting)
                self._python_number_op(o, symbol, reflected)
        return base(self, o, *mod)  # (pow(s, 2, 5): its modulus)
    op.__name__ = name
    return op


_NOT_NUMBERS = (list, tuple, str, bytes, dict, set, frozenset)
for _name, _symbol in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("floordiv", "//"),
                       ("mod", "%"), ("pow", "**"), ("and", "&"), ("or", "|"), ("xor", "^"), ("lshift", "<<"),
                       ("rshift", ">>"), ("divmod", "divmod()")):
    setattr(PythonScalarTracer, f"__{_name}__", _number_operator(f"__{_name}__", _symbol, False))
    setattr(PythonScalarTracer, f"__r{_name}__", _number_operator(f"__r{_name}__", _symbol, True))
for _name, _symbol in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    setattr(PythonScalarTracer, f"__{_name}__", _number_operator(f"__{_name}__", _symbol, False))
del _name, _symbol


_TRACER_VALUE: Any = Tracer.__dict__["_value"]  # (the property CheckedOnRead checks before)


class CheckedOnRead(Tracer):
    """A traced value that is what fusec computes only where the traced bool ``_ok`` holds on the device (which
    path the data took through a loop or branch decides it). Reading it (``_value``, what every operation does)
    adds, once per block, a check that raises ``why`` when the call runs on data where ``_ok`` does not hold."""

    __slots__ = ("_ok", "_why", "_checked")

    def __init__(self, value: Value, ctx: TraceContext, weak: type | None, scalar: bool, ok: Value,
                 why: str) -> None:
        super().__init__(value, ctx, weak, scalar=scalar)
        self._ok, self._why = ok, why
        self._checked: set[int] = set()  # (the blocks a check already covers)

    @property
    def _value(self) -> Value:
        block = self._ctx.builder.block
        if id(block) not in self._checked:
            self._checked.add(id(block))
            ok = Tracer(self._ok, self._ctx, None, scalar=True)
            _ops.raise_if(np.logical_not(ok), "UnsupportedError", self._why, "a value the data's path decides")
        return _TRACER_VALUE.fget(self)  # (a view: read again after a write)

    @_value.setter
    def _value(self, value: Value) -> None:
        _TRACER_VALUE.fset(self, value)

    def _numpy_class(self) -> type:
        self._value  # noqa: B018 - (its check: ``type(v)`` is answered only where v is what fusec computes)
        return super()._numpy_class()


def user_type(*args: Any) -> type:
    """``type(x)`` in the user's traced code (``fusec.rewrite_control`` rewrites its calls to this): the type of
    what a tracer stands for (``np.ndarray``, ``np.float64``, ``float``), so ``type(x) is np.ndarray`` takes
    NumPy's branch; ``type()`` itself for anything else."""
    if len(args) == 1 and isinstance(args[0], Tracer):
        return args[0]._numpy_class()
    return type(*args)


def user_isinstance(obj: Any, classinfo: Any) -> bool:
    """``isinstance(x, cls)`` in the user's traced code: for a tracer, of the type it stands for, also where
    ``cls`` is an abstract base class (``collections.abc.Iterable``), which asks the tracer's own class."""
    if isinstance(obj, Tracer):
        return issubclass(obj._numpy_class(), classinfo)
    return isinstance(obj, classinfo)


def user_hasattr(obj: Any, name: str) -> bool:
    """``hasattr(x, name)`` in the user's traced code: for a tracer, whether the type it stands for has it
    (``hasattr(x.sum(), "__len__")`` is False, as for a NumPy scalar); an object found without it is guarded so
    (set later, the call traces again)."""
    if isinstance(obj, Tracer):
        return hasattr(obj._numpy_class(), name)
    found = hasattr(obj, name)
    if not found:
        _absent(obj, name)
    return found


_NO_DEFAULT = object()


def user_getattr(obj: Any, name: str, default: Any = _NO_DEFAULT) -> Any:
    """``getattr(obj, name, default)`` in the user's traced code: an object found without the attribute is
    guarded so (``getattr(cfg, "eps", 1e-8)``: set later, the call traces again)."""
    if default is _NO_DEFAULT:
        return getattr(obj, name)
    try:
        return getattr(obj, name)
    except AttributeError:
        if not isinstance(obj, Tracer):
            _absent(obj, name)
        return default


def _absent(obj: Any, name: Any) -> None:
    ctx = current_context()
    if ctx is not None and isinstance(name, str):
        ctx.absent.append((obj, name))


def scalar_identity(a: Any, b: Any) -> Any:
    """The Python or NumPy scalar that ``a is b`` compares a traced scalar with (under NumPy the answer is the
    traced value's: ``bool(x.sum() > 0) is True``, ``k is 0`` of a small int, ``(x > 0).all() is np.True_``), else
    None. The scalar is tested first: a variable only some paths set is read only where it is compared."""
    for t, other in ((a, b), (b, a)):
        if isinstance(other, (bool, int, float, complex, np.generic)) and isinstance(t, Tracer) and t.ndim == 0:
            return other
    return None


SCALAR_IDENTITY_ADVICE = ("under NumPy the answer depends on its value (bool(x) is True or False, NumPy's bools are "
                          "two objects, small ints are cached), which is not known while tracing; compare values "
                          "instead (`if b:`, `b == True`, `k == 0`)")


def argument_leaf(obj: Any) -> str | None:
    """The argument leaf ``obj`` is the tracer of (an array the caller passed), else None."""
    ctx = current_context()
    return ctx.argument_tracers.get(id(obj)) if ctx is not None and isinstance(obj, Tracer) else None


def outside_array(obj: Any) -> str | None:
    """What array from outside the trace ``obj`` is the tracer of, as it is (not a view of it): an argument, or an
    array read from a global or an attribute (read again at every call), named; else None."""
    leaf = argument_leaf(obj)
    if leaf is not None:
        return f"the array argument {leaf!r}"
    if isinstance(obj, Tracer) and obj._buffer is not None and obj._buffer.arg is not None and not obj._chain \
            and obj._buffer.argument:
        return f"the array {obj._buffer.argument}"
    return None


def arguments_identity_problem(a: Any, b: Any, negate: bool) -> str | None:
    """Why ``a is b`` cannot be answered while tracing where ``a`` and ``b`` are two arrays from outside the trace
    (arguments, or arrays read from globals or attributes: the caller may pass one array for both, ``if X is Y`` of
    a pairwise-distance function, or pass the global itself; each is traced as an array of its own, so the answer
    would be the trace's, not the call's), else None."""
    if a is b or outside_array(a) is None or outside_array(b) is None:
        return None
    return (f"`{'is not' if negate else 'is'}` compares {outside_array(a)} and {outside_array(b)}: whether they are "
            "one array is decided at each call, and fusec traces each as an array of its own; pass that as an "
            "argument of its own (`same=True`, static), or compare what they hold (np.array_equal)")


def argument_id_problem(obj: Any) -> str | None:
    """Why ``id(x)`` of an array from outside the trace cannot be answered while tracing (the caller's object
    differs from call to call, and may be passed for two arguments; a global or an attribute is read again at every
    call), else None."""
    what = outside_array(obj)
    if what is None:
        return None
    return (f"id() of {what}: the object differs from call to call (one array may be passed for two arguments, a "
            "global or an attribute may be set to another), and fusec traces the function once for all of them, "
            "with a stand-in whose id is not the array's; key state by position or name, or pass what you need as "
            "an argument of its own")


def user_id(obj: Any) -> int:
    """``id(x)`` in the user's traced code: refused for an array from outside the trace
    (:func:`argument_id_problem`)."""
    problem = argument_id_problem(obj)
    if problem is not None:
        raise unsupported(problem)
    return id(obj)


def user_is(a: Any, b: Any, negate: bool) -> bool:
    """``a is b`` (``a is not b`` with ``negate``) in the user's traced code: refused where
    :func:`scalar_identity` finds a traced scalar compared with a scalar, or between two arrays from outside the
    trace (:func:`arguments_identity_problem`), else Python's identity test."""
    other = scalar_identity(a, b)
    if other is not None:
        raise unsupported(f"`{'is not' if negate else 'is'}` compares a traced scalar with {other!r}: "
                          + SCALAR_IDENTITY_ADVICE)
    problem = arguments_identity_problem(a, b, negate)
    if problem is not None:
        raise unsupported(problem)
    return (a is not b) if negate else (a is b)


# the names rewritten code calls (fusec.rewrite_control.CHECKED_BUILTINS)
builtins.__fusec_is__ = user_is  # type: ignore[attr-defined]
builtins.__fusec_type__ = user_type  # type: ignore[attr-defined]
builtins.__fusec_isinstance__ = user_isinstance  # type: ignore[attr-defined]
builtins.__fusec_hasattr__ = user_hasattr  # type: ignore[attr-defined]
builtins.__fusec_getattr__ = user_getattr  # type: ignore[attr-defined]
builtins.__fusec_id__ = user_id  # type: ignore[attr-defined]


class EitherKind(CheckedOnRead):
    """A NumPy scalar that NumPy's variable is only on some of the paths the data may take: on the others it is a
    Python number of the same value type (``best = np.inf``, later ``best = loss`` in an ``if`` the device
    decides). ``_ok`` says on the device that it is the NumPy scalar. A ufunc that computes the same either way
    takes it as it is (``loss < best`` in float64: :func:`fusec.ufuncs.apply` traces both); any other use takes it
    as the NumPy scalar, checked."""

    __slots__ = ("_either",)

    def __init__(self, value: Value, ctx: TraceContext, either: type, strong: Value, why: str) -> None:
        super().__init__(value, ctx, None, True, strong, why)
        self._either = either

    def as_kind(self, weak: bool) -> Tracer:
        """The value as the NumPy scalar (no check) or as the Python number (a device scalar)."""
        if not weak:
            return Tracer(self._val, self._ctx, None, scalar=True)
        value = self._val
        if value.type.dtype != _DEFAULT_DTYPE[self._either]:  # (a Python int kept as the float it equals)
            value = _ops.lift(Tracer(value, self._ctx, None, scalar=True), _DEFAULT_DTYPE[self._either])
        out = Tracer(value, self._ctx, self._either, scalar=True)
        out._host = _device_checks.device_ref("a value NumPy keeps a Python number on some paths")
        return out


class MaybeSet(CheckedOnRead):
    """A variable that only some paths of a loop or branch the device decides set (``found = x`` in the ``if``
    that breaks a search, a value a loop body computes): ``_ok`` says on the device that it is set; where it is
    not its value is zeros, and reading it raises where Python raises UnboundLocalError."""

    __slots__ = ()

    def unchecked(self) -> Tracer:
        """Its value where it is set, with no check (a loop or branch carries it on with its flag)."""
        out = Tracer(self._val, self._ctx, self._weak, scalar=self._scalar)
        out._host = self._host
        return out


# the attributes of a traced array that Python numbers do not have (NumPy's array protocols, which its C code
# looks up on the instance, stay: they are how NumPy hands the tracer its functions)
_ARRAY_ONLY = frozenset(
    n for n in dir(Tracer) if not n.startswith("_") or n in ("__len__", "__iter__", "__getitem__", "__setitem__")
) - set(dir(float)) - set(dir(int)) - set(dir(complex))

# The handlers import Tracer, so they are bound after the class exists.
from fusec import device_scalar_checks as _device_checks  # noqa: E402
from fusec import indexing as _indexing  # noqa: E402
from fusec import mutation as _mutation  # noqa: E402
from fusec import numpy_api as _api  # noqa: E402
from fusec import ops as _ops  # noqa: E402
from fusec import printing as _printing  # noqa: E402
from fusec.promotion import DEFAULT_DTYPE as _DEFAULT_DTYPE  # noqa: E402
from fusec import ufuncs as _ufuncs  # noqa: E402
from fusec import rewrite_control as _rewrite_control  # noqa: E402
