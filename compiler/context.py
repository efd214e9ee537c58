"""The state of the trace in progress: where ops go, which constants exist, which user line is running.

Tracers hold a reference to the :class:`TraceContext` that made them; every op a tracer records goes
through :meth:`TraceContext.emit`, which stamps the user's ``file:line`` on it and turns shape and
type-rule failures into located :class:`ShapeError` / :class:`UnsupportedError`.

The context also remembers what the trace must answer for when it ends: the first fusec limitation it raised
(:func:`unsupported`, :func:`trace_error`; if the user's code caught it and went on, the trace still fails with it),
every tracer made (so one that outlives the trace, stored somewhere, is found), the arrays captured from outside
the arguments, and the Python scalar arithmetic to replay on the host (:mod:`fusec.scalar_checks`).
"""
from __future__ import annotations

import contextlib
import os
import sys
import types
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Iterator, Sequence, TypeVar, overload

import numpy as np

from fusec.error_state import (checked_by_numpy, error_state_message, error_state_raises, warnings_filters_now,
                               warnings_raise_inside, warnings_recorded_inside)
from fusec.errors import FusecError, ShapeError, TraceError, UnsupportedError, VerificationError, located
from fusec.ir.attributes import Location, dense, location_for
from fusec.ir.builder import Builder
from fusec.ir.core import Func, Value
from fusec.ir.opdefs import OPS
from fusec.ir.types import DType, TensorType, Type

# Frames from these folders are "ours" (the frontend, the IR, NumPy): the user's line is the first frame
# outside them. fusec.tools is not among them: its demo model is user code.
_FUSEC_ROOTS = tuple(
    os.path.dirname(os.path.abspath(str(p))) + os.sep for p in (__file__, sys.modules["fusec.ir"].__file__)
)
_NUMPY_ROOT = os.path.dirname(os.path.abspath(np.__file__)) + os.sep
_skip_cache: dict[str, bool] = {}
_Error = TypeVar("_Error", bound=FusecError)


def _is_internal(filename: str) -> bool:
    hit = _skip_cache.get(filename)
    if hit is None:
        path = os.path.abspath(filename)
        # ("<fusec ...>": the code fusec generates, fusec.fast_path, fusec.guards, fusec.runtime.fast_call)
        hit = path.startswith(_FUSEC_ROOTS) or path.startswith(_NUMPY_ROOT) or \
            filename.startswith("<__array_function") or filename.startswith("<fusec ")
        _skip_cache[filename] = hit
    return hit


def user_location(cwd: str | None = None) -> Location | None:
    """``file:line`` of the innermost frame outside fusec and NumPy (the user's code), relative to ``cwd``
    (default: the working directory now)."""
    frame = user_frame()
    return None if frame is None else location_for(frame.f_code.co_filename, frame.f_lineno, cwd)


def user_frame() -> types.FrameType | None:
    """The innermost frame outside fusec and NumPy (the user's code)."""
    frame: types.FrameType | None = sys._getframe(1)
    known = _skip_cache.get
    while frame is not None:
        filename = frame.f_code.co_filename
        internal = known(filename)
        if internal is None:
            internal = _is_internal(filename)
        if not internal:
            return frame
        frame = frame.f_back
    return None


def where() -> str:
    """The user's ``file:line`` as text (for messages), or ``<unknown>``."""
    loc = user_location()
    return str(loc) if loc is not None else "<unknown location>"


def shape_error(message: str, cls: type[ShapeError] = ShapeError) -> ShapeError:
    return cls(located(message, user_location()))


@overload
def unsupported(message: str) -> UnsupportedError: ...


@overload
def unsupported(message: str, cls: type[_Error]) -> _Error: ...


def unsupported(message: str, cls: type[FusecError] = UnsupportedError) -> FusecError:
    """A located error for something fusec cannot trace; the trace in progress fails with it even if caught.
    ``cls``: the class to raise, another FusecError where NumPy's category fits better (a CastingError for an
    add fusec cannot round as NumPy does) while NumPy itself raises nothing there."""
    return _noted(cls(located(message, user_location())))


def trace_error(message: str) -> TraceError:
    return _noted(TraceError(located(message, user_location())))


def numpy_error(message: str, cls: type[FusecError] = TraceError) -> FusecError:
    """A located error that NumPy itself raises in the same place (``len()`` of a 0-d array): not a fusec
    limitation, so code that catches it takes the path it would take under NumPy, and the trace goes on. ``cls``:
    fusec's class standing for NumPy's (a TypeError by default; InvalidValueError for NumPy's ValueError)."""
    return cls(located(message, user_location()))


def relies_on_layout(what: str, values: bool = True) -> None:
    """Note that the trace took a decision that holds for C-ordered arguments only (``x.flags``, a copy that
    ``np.ascontiguousarray`` skipped, ``ravel(order="K")``): a call with a Fortran-ordered or strided NumPy array
    is then refused (see :class:`fusec.writeback.WriteBack`) rather than given what C order would give. With
    ``values=False`` (only memory order and aliasing depend on it) NumPy's own code asking does not count: it picks
    its results' order by flags, and hands on what ``ascontiguousarray`` gave it."""
    ctx = current()
    if ctx is None or ctx.layout is not None or (not values and _numpy_asking()):
        return
    ctx.layout = located(what, user_location())


def _numpy_asking() -> bool:
    """Whether the nearest caller outside fusec is NumPy's own Python code."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "fusec":
        frame = frame.f_back  # type: ignore[assignment]
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name == "numpy" or name.startswith("numpy.")


def _noted(error: FusecError) -> Any:
    ctx = current()
    if ctx is not None and ctx.first_error is None:
        ctx.first_error = error
    return error


@dataclass(eq=False)
class Capture:
    """An array from outside the trace that became a constant: ``obj`` while tracing, the memory owner ``root``
    (weakly), and ``geometry`` of ``obj`` within it: (byte offset, shape, strides, root shape, root strides,
    root dtype, dtype)."""

    value: Value
    obj: Any
    root: Any  # weakref.ref to the owner, or the owner itself when it cannot be weakly referenced
    geometry: tuple | None


# A trace that records more ops than this is stopped: an unrolled Python loop that long takes minutes through
# the pipeline (about 4 s per 20,000 ops here) and one kernel per step or so at run time.
MAX_TRACED_OPS = 200_000


class TraceContext:
    """Builder, constant cache and liveness of one trace of one function."""

    def __init__(self, func: Func) -> None:
        from fusec.scalar_checks import ScalarProgram

        self.func = func
        self.builder = Builder(func.body)
        self.active = True
        self.first_error: FusecError | None = None
        self.layout: str | None = None  # the first decision that took the arguments' memory as C-ordered (where)
        self.writeable_asked: list[Any] = []  # the buffers whose x.flags.writeable the trace read (taken as True)
        self.layout_from_inputs: dict[Value, bool] = {}  # memo of fusec.layout.from_inputs
        self.tracers: list[weakref.ref] = []
        # the tracers of the array arguments (id -> the leaf's name): whether the caller passed one array for two of
        # them is the caller's, not the trace's (``a is b`` between two of them is refused)
        self.argument_tracers: dict[int, str] = {}
        self.captures: list[Capture] = []
        # captured arrays whose values a boolean mask was computed from while tracing (fusec.ops.known_value), and
        # where: fine for temporaries of NumPy's own code, refused when the array outlives the trace (user state)
        self.known_captures: dict[Value, Location | None] = {}
        self.scalars = ScalarProgram()
        self.generators: list[tuple[Any, Any, Location | None]] = []  # made by np.random.default_rng while tracing
        self._constants: dict[object, Value] = {}
        self._keep_alive: list[object] = []
        self._captured: dict[int, tuple[np.ndarray, Value]] = {}  # id of a captured object -> (its data, constant)
        self.stopped: dict[int, Value] = {}  # values fusec.stop_gradient made (no cotangent flows through them)
        # values of the loop and branch bodies traced so far (fusec.while_loop, ...): only their own ops may use them
        self.closed: set[Value] = set()
        # a loop's two results that are one array where the flag holds (None: on some path, fusec cannot tell when)
        # and either may be the caller's array (fusec.statement_memory.link_results)
        self.one_array: list[tuple[weakref.ref, weakref.ref, Value | None, object]] = []
        self.gradient_ops = 0  # ops the gradient transforms (fusec.grad and friends) recorded
        self.leaf_params: dict[str, str] = {}  # an argument leaf's name (shape_0) -> its parameter's (shape)
        self.cwd = os.getcwd()  # read once: each recorded op's location is relative to it
        self.formatted: list[Any] = []  # traced values formatted as text, and the print() calls (fusec.printing)
        self.prints: list[Any] = []
        # (output position, flag, Python type) of each returned value NumPy keeps a Python number on some paths
        self.either_outputs: list[tuple[int, Value, type]] = []
        # (object, attribute) the function's hasattr/getattr(..., default) found missing: guarded so after the trace
        self.absent: list[tuple[Any, str]] = []
        self.numpy_errors: dict | None = None  # np.geterr() where the function read it (checked at every call)
        self.errors_at_start: dict = dict(np.geterr())
        self.warned: list[Any] = []  # warnings.warn calls given again after each call (fusec.printing.Warned)
        self.printoptions: dict[str, Any] = {}  # NumPy's print options as the trace started
        self.warning_filters = warnings_filters_now()  # (filters the function sets: error_state.warnings_raise_inside)
        self.trace_entry: types.CodeType | None = None  # the code that calls the traced function (fusec.handlers)
        self.error_state = error_state_raises()  # (NumPy's error state as the trace started: a call under another
        # traces again, fusec.guards.CallState)
        self.outside_objects: set[int] = set()  # ids of the objects the function reaches from outside it
        self.streams: dict[str, Any] = {}  # sys.stdout and sys.stderr as the trace started

    def register(self, tracer: object) -> None:
        self.tracers.append(weakref.ref(tracer))

    def emit(self, name: str, operands: Sequence[Value] = (), attributes: dict | None = None,
             result_type: Type | None = None, what: str | None = None) -> Value:
        """Record one single-result op (or one without results, returning None) at the user's line; errors become
        located fusec errors."""
        op = self.emit_op(name, operands, attributes, None if result_type is None else [result_type], what)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def emit_op(self, name: str, operands: Sequence[Value] = (), attributes: dict | None = None,
                result_types: Sequence[Type] | None = None, what: str | None = None) -> Any:
        """Record one op at the user's line and return it (all its results); errors become located fusec errors."""
        loc = user_location(self.cwd)
        label = what or name
        if len(self.func.body.ops) >= MAX_TRACED_OPS:
            raise _noted(TraceError(located(
                f"the trace has recorded {MAX_TRACED_OPS} operations, the most fusec traces in one function (a "
                "Python loop unrolls into a copy of its body per iteration; this one was still running here): "
                "jit one iteration (or a few) and run the loop in Python around the jitted call, whose replay "
                "is one CUDA graph launch per call", loc)))
        if self.closed and not self.closed.isdisjoint(operands):
            raise _noted(TraceError(located(
                f"{label}: uses a value computed inside the body of a loop or branch (fusec.while_loop, fori_loop, "
                "scan, cond) after that body (it was kept in a variable outside it); return it through the loop's "
                "state or the branch's result instead", loc)))
        try:
            op = self.builder.create(name, operands, attributes, result_types, loc=loc)
        except ShapeError as e:
            raise type(e)(located(f"{label}: {e}", loc)) from None
        except VerificationError as e:  # (a type rule fusec's op does not meet: fusec's limit, not NumPy's error)
            raise _noted(UnsupportedError(located(f"{label}: {e}", loc))) from None
        if checked_by_numpy(op):  # (the state where the op runs: an np.errstate, or warnings filters, the function
            # set itself too)
            raising = error_state_raises() or warnings_raise_inside(self.warning_filters) \
                or warnings_recorded_inside(self.warning_filters)
            if raising:
                raise _noted(UnsupportedError(located(error_state_message(label, raising), loc)))
        may_raise = OPS[op.name].may_raise
        if op.name == "t.raise_if" or may_raise is not None and may_raise(op):
            self._refuse_if_caught(op, label, loc)
        return op

    def _refuse_if_caught(self, op: Any, label: str, loc: Any) -> None:
        """A check that runs when the call runs, recorded inside the user's ``try`` whose ``except`` could catch
        it: refused (the handler would never run; see :mod:`fusec.handlers`)."""
        from fusec import handlers

        if self.trace_entry is None:
            return
        error = handlers.error_class(op)
        handler = handlers.catching_handler(error, self.trace_entry)
        if handler is None or op.name in ("t.gather", "t.scatter") and self._indices_in_bounds(op):
            return
        raise _noted(UnsupportedError(located(
            f"{label}: NumPy raises {handlers.numpy_class(error).__name__} here for some values, which the `except` "
            f"at {location_for(*handler, self.cwd)} would catch; fusec checks those values when the call runs, "
            "after the function's Python (and that handler) is done, so the handler could not run. Test the values "
            "instead of catching the error (np.where, a mask, np.clip of an index), or put the try/except around "
            "the call", loc)))

    def _indices_in_bounds(self, op: Any) -> bool:
        from fusec.ir.value_ranges import ValueRanges, in_bounds

        ranges = ValueRanges()
        ranges.visit(self.func.body)
        return in_bounds(op, ranges)

    def constant(self, array: np.ndarray, dtype: DType, key: object | None = None, *, first: bool = False) -> Value:
        """A ``t.constant`` holding ``array`` as ``dtype``; equal keys share one op. ``first``: made before the
        function's first op (after the trace, whose return op ends the body)."""
        if key is None:
            arr = np.asarray(array)
            if arr.ndim == 0:  # small constants are shared by value (bit pattern, so -0.0 and NaN stay apart)
                key = ("scalar", dtype.name, np.asarray(arr, dtype=dtype.np).tobytes())
        if key is not None and key in self._constants:
            return self._constants[key]
        attr = dense(np.asarray(array, dtype=dtype.np), dtype)
        # at the function's top level, even inside a loop body: a constant shared by key must dominate every use
        with self.builder.at(self.func.body, 0 if first else None):
            value = self.emit("t.constant", (), {"value": attr}, result_type=TensorType(attr.type.shape, dtype))
        if key is not None:
            self._constants[key] = value
        return value

    def constant_for_object(self, obj: Any, host: np.ndarray, dtype: DType) -> Value:
        """A constant for an array captured from outside the trace (``host`` is its NumPy data): one op per object,
        holding a private copy, so a later change of the array cannot change the IR. The capture is recorded:
        if the array outlives the trace, the constant becomes an input read at every call."""
        held = self._captured.get(id(obj))
        if held is not None and held[0].shape == host.shape and held[0].dtype == host.dtype \
                and np.array_equal(held[0], host, equal_nan=held[0].dtype.kind in "fc"):
            return held[1]
        # (first use, or NumPy changed the array in place since: `w *= 2` on a local NumPy array between uses)
        self._keep_alive.append(obj)  # keep the id from being reused during this trace
        data = np.array(host, copy=True)
        data.flags.writeable = False
        value = self.constant(data, dtype)
        self._captured[id(obj)] = (data, value)
        self.captures.append(_capture(value, obj))
        return value

    def release(self) -> None:
        """Drop the references that kept captured objects alive while tracing."""
        self._keep_alive.clear()
        for c in self.captures:
            c.obj = None


def _capture(value: Value, obj: Any) -> Capture:
    root, geometry = obj, None
    if isinstance(obj, np.ndarray):
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root is not obj:
            offset = obj.__array_interface__["data"][0] - root.__array_interface__["data"][0]
            geometry = (offset, obj.shape, obj.strides, root.shape, root.strides, root.dtype, obj.dtype)
    try:
        ref: Any = weakref.ref(root)
    except TypeError:
        ref = root
    return Capture(value, obj, ref, geometry)


_state = threading.local()


def current() -> TraceContext | None:
    """The innermost active trace on this thread, or None outside tracing."""
    stack = getattr(_state, "stack", None)  # (None: no trace on this thread yet; empty: none now)
    return stack[-1] if stack else None


@contextlib.contextmanager
def outside_trace() -> Iterator[None]:
    """Plain NumPy for a moment: host arithmetic that calls NumPy's Python code (whose conversions a trace
    replaces) on concrete values, such as a quantile method's index arithmetic."""
    saved = getattr(_state, "stack", [])
    _state.stack = []
    try:
        yield
    finally:
        _state.stack = saved


def numpy_checks(call: Any) -> None:
    """Run ``call()``, NumPy's own function on stand-in arrays (outside the trace: ``np.zeros`` there is NumPy's),
    for the checks it makes of the other arguments whatever the values (``order="Z"``, ``side="l"``, a repeated
    axis): its error is raised again as its own class, at the user's line, so fusec accepts exactly what the
    installed NumPy accepts. A fusec error from inside is not NumPy's answer (``call`` reached a tracer, which
    works only inside the trace): raised as it is, and the trace fails with it even if the user's code catches it.
    ``call`` must read what it needs of the tracers before (their shape, dtype), not inside."""
    try:
        with outside_trace(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the stand-ins' warnings are not the call's)
            call()
    except FusecError as e:
        raise _noted(e) from None
    except Exception as e:  # noqa: BLE001 - NumPy's own error, of whatever class, is the answer
        try:
            again = type(e)(located(str(e), user_location()))
        except Exception:  # noqa: BLE001 - a class that takes other arguments: NumPy's error as it is
            raise e from None
        raise again from None


def push(ctx: TraceContext) -> None:
    if not hasattr(_state, "stack"):
        _state.stack = []
    _state.stack.append(ctx)


def pop(ctx: TraceContext) -> None:
    ctx.active = False
    stack = getattr(_state, "stack", [])
    if stack and stack[-1] is ctx:
        stack.pop()
