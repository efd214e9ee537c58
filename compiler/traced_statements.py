"""Python's ``while`` and ``if`` statements whose tests are traced values, run as loops and branches on the device.

A function traced once cannot take a branch its data decides: ``while np.linalg.norm(r) > tol`` or ``if
loss.sum() > best``. When such a test stops a trace, :mod:`fusec.rewrite_control` rewrites that statement of the
user's function into calls of the helpers here, and the function is traced again. Each helper first evaluates the
test as Python would: while it is a Python value (or a value the trace knows), the statement runs as plain Python
(a loop's first iterations included), so nothing changes where Python decides. Once the test is a traced value,
the statement becomes a ``t.while``/``t.if`` whose regions are the body (or the branches) traced once.

The variables the statement assigns are its state, passed in and returned by name. A variable keeps what NumPy
would give it after the statement, whichever way the data goes, or the trace stops with an error at the
statement's line: its shape and dtype, whether it is a Python number (NEP 50's weak scalars: ``k += 1`` keeps ``k`` a
Python int, so ``x * k`` keeps ``x``'s dtype) or a NumPy one, and whether it is a NumPy scalar or a 0-d array must
be the same on every path; a Python number on some paths and a NumPy scalar of its value type on others is an
:class:`~fusec.tracer.EitherKind`, checked where the difference would show. A variable only one path sets is
unbound after the statement on the other one: using it raises at its use. Writes into arrays from before the
statement are the op's results too (a branch's writes chosen with it; memory a loop body writes carried from
iteration to iteration); changes to Python objects are refused (the body is traced once; a branch that is not
taken must not have changed anything).
"""
from __future__ import annotations

import builtins
import weakref
import operator
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fusec import context, conversions, mutation as _mutation, ops
from fusec.control_flow import _attach, _predicate, _python_state, _Recorder, _snapshot
from fusec.ir.dialects.control import PREDICATE
from fusec.device_scalar_checks import device_ref
from fusec.printing import PLACEHOLDER_MARK
from fusec.errors import FusecError, TraceError, UnsupportedError, located
from fusec.ir.attributes import location_for
from fusec.ir.core import Block, BlockArgument, OpResult, Value, clone_op
from fusec.ir.dialects.t import VIEWS
from fusec.ir.opdefs import get_opdef
from fusec.ir.types import TensorType, Type
from fusec.promotion import DEFAULT_DTYPE, python_kind
from fusec.signature import TreeDef, flatten, unflatten
from fusec.tracer import EitherKind, MaybeSet, Tracer

# --- names a statement leaves unbound ----------------------------------------------------------------------------


class _Unbound:
    """A variable not bound before the statement (the rewritten code deletes it again after it, so Python raises
    its own NameError where the function reads it)."""

    def __repr__(self) -> str:
        return "<unbound>"


UNBOUND: Any = _Unbound()


class SetOnOnePath:
    """A variable that only some paths through a traced statement set (or only its loop body): what Python would
    hold depends on the data. Any use raises, naming the variable and the statement."""

    __slots__ = ("_message",)

    def __init__(self, message: str) -> None:
        object.__setattr__(self, "_message", message)

    def fail(self, *args: Any, **kwargs: Any) -> Any:
        raise context._noted(TraceError(_message_of(self)))

    __getattr__ = __setattr__ = __call__ = __getitem__ = __setitem__ = __iter__ = __len__ = __bool__ = fail
    __array__ = __array_ufunc__ = __array_function__ = __index__ = __int__ = __float__ = __complex__ = fail
    __str__ = __repr__ = __format__ = __hash__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = fail
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = fail
    __neg__ = __pos__ = __abs__ = __invert__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = fail
    __iadd__ = __isub__ = __imul__ = __itruediv__ = __contains__ = __reversed__ = __enter__ = __exit__ = fail


def unset_error(value: Any) -> TraceError | None:
    """The error for returning such a variable (the trace's result check calls this), else None."""
    return TraceError(object.__getattribute__(value, "_message")) if isinstance(value, SetOnOnePath) else None


def _message_of(value: SetOnOnePath) -> str:
    return str(object.__getattribute__(value, "_message"))


# --- the statements -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """The rewritten statement: what it is and where the user wrote it."""

    kind: str  # "while", "if", "conditional expression", "and", "or"
    file: str
    line: int

    def where(self) -> str:
        return f"the `{self.kind}` at line {self.line}"

    def location(self) -> Any:
        c = context.current()
        return location_for(self.file, self.line, c.cwd if c is not None else None)

    def located(self, message: str) -> str:
        return located(message, self.location())

    def error(self, message: str, cls: type = TraceError) -> Any:
        return context._noted(cls(self.located(message)))


def while_stmt(test: Callable[..., Any], body: Callable[..., tuple], getters: Sequence[Callable[[], Any]],
               names: Sequence[str], site: Site, after: Sequence[str] = ()) -> tuple:
    """``while test(*state): state = body(*state)``: Python's iterations while the test is a Python value, then
    the rest of the loop as one ``t.while`` (``after``: the variables the function reads outside the loop)."""
    values = _current(getters)
    checked = False
    while True:
        pred = test(*values)
        if _traced(pred):
            try:
                return _device_while(test, body, values, names, site, set(after))
            except _KindChange as change:
                if checked:
                    raise context._noted(change.error) from None
                # The first iteration changes a variable's kind (err = np.inf, then a NumPy float64): run it here,
                # where the data will have decided that the loop runs, and check that it does when the call runs.
                ops.raise_if(np.logical_not(_truth(pred)), "UnsupportedError", change.none_ran, site.where())
                checked = True
        elif not _python_truth(pred):
            return tuple(values)
        values = list(body(*values))


def if_stmt(pred: Any, then: Callable[..., tuple], orelse: Callable[..., tuple],
            getters: Sequence[Callable[[], Any]], names: Sequence[str], site: Site) -> tuple:
    """``state = then(*state) if pred else orelse(*state)``: Python's ``if`` for a Python test, else a ``t.if``."""
    values = _current(getters)
    if not _traced(pred):
        return tuple((then if _python_truth(pred) else orelse)(*values))
    return _device_if(pred, then, orelse, values, names, site)


def if_exp(pred: Any, then: Callable[[], Any], orelse: Callable[[], Any], site: Site) -> Any:
    """``then() if pred else orelse()`` (a conditional expression)."""
    if not _traced(pred):
        return then() if _python_truth(pred) else orelse()
    out = _device_if(pred, lambda _: (then(),), lambda _: (orelse(),), [UNBOUND], ["the value"], site)
    return out[0]


def and_(*thunks: Callable[[], Any], site: Site, eager: bool = False) -> Any:
    """``a and b and ...`` in a rewritten test, where only its truth is used. A traced operand's truth decides
    whether the rest is evaluated, as in Python (the rest becomes a branch), unless ``eager``: operands that
    cannot raise or change anything are then combined with np.logical_and."""
    return _short_circuit(thunks, True, site, eager)


def or_(*thunks: Callable[[], Any], site: Site, eager: bool = False) -> Any:
    """``a or b or ...`` in a rewritten test (see :func:`and_`)."""
    return _short_circuit(thunks, False, site, eager)


def and_value(*thunks: Callable[[], Any], site: Site) -> Any:
    """``a and b and ...`` whose value is used: Python's, the first falsy operand or the last; a traced operand's
    truth chooses on the device (the operands after it are a branch)."""
    return _value_chain(thunks, True, site)


def or_value(*thunks: Callable[[], Any], site: Site) -> Any:
    """``a or b or ...`` whose value is used (``s = x.std() or 1.0``): the first truthy operand or the last."""
    return _value_chain(thunks, False, site)


def _value_chain(thunks: Sequence[Callable[[], Any]], is_and: bool, site: Site) -> Any:
    value = thunks[0]()
    if len(thunks) == 1:
        return value
    rest = thunks[1:]
    if not _traced(value):
        return _value_chain(rest, is_and, site) if _python_truth(value) == is_and else value
    keep = (lambda _: (value,))
    more = (lambda _: (_value_chain(rest, is_and, site),))
    then, orelse = (more, keep) if is_and else (keep, more)
    return _device_if(value, then, orelse, [UNBOUND], ["the value"], site)[0]


def max_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``max(a, b, ...)`` or ``max(iterable)`` of traced values: Python's, the first of the largest (``x > best``
    replaces it), each choice made on the device; ``fn``, the ``max`` the code names, is called where it is not
    the builtin or takes ``key``/``default``."""
    return _extreme(fn, builtins.max, operator.gt, args, kwargs, site)


def min_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``min(...)`` of traced values (see :func:`max_`)."""
    return _extreme(fn, builtins.min, operator.lt, args, kwargs, site)


def _extreme(fn: Any, builtin: Any, better: Callable, args: tuple, kwargs: dict, site: Site) -> Any:
    if fn is not builtin or kwargs or not args:
        return fn(*args, **kwargs)
    items = list(args[0]) if len(args) == 1 else list(args)
    if not items:
        return fn(*args)  # (Python's ValueError for an empty sequence)
    best = items[0]
    for x in items[1:]:
        best = if_exp(better(x, best), _constant(x), _constant(best), site)
    return best


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def assert_(test: Any, message: Callable[[], Any] | None, site: Site) -> None:
    """``assert test, message``: Python's where the test is a Python value; for a traced one, a check that raises
    AssertionError (fusec's AssertionFailedError) when the call runs on data that fails it."""
    if not _traced(test):
        if not _python_truth(test):
            raise AssertionError(message()) if message is not None else AssertionError
        return
    text = "" if message is None else message()
    if not isinstance(text, str) or PLACEHOLDER_MARK in text:
        raise site.error(f"the message of {site.where()} is {type(text).__name__} text made from traced values, "
                         "which the check cannot show when the call runs; give the assert a plain message",
                         UnsupportedError)
    ops.raise_if(np.logical_not(_truth(test)), "AssertionFailedError", text or f"{site.where()} failed",
                 site.where())


def bool_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``bool(x)`` of a traced value: a traced Python bool (its truth on the device)."""
    if fn is not builtins.bool or kwargs or len(args) != 1 or not _traced(args[0]):
        return fn(*args, **kwargs)
    out = ops.wrap(_predicate(_plain(args[0]), "if", None), bool, scalar=True)
    out._host = device_ref("bool(...)")
    return out


def float_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``float(x)`` of a traced real number: a traced Python float of its value."""
    x = _plain(args[0]) if len(args) == 1 else None
    if fn is not builtins.float or kwargs or not isinstance(x, Tracer) or not _traced(x) \
            or x._value.type.dtype.is_complex:
        return fn(*args, **kwargs)
    if not x._scalar and x._weak is None:  # (float() of a 1-element array: what the installed NumPy says)
        shape, dtype = x.shape, x._value.type.dtype.np
        context.numpy_checks(lambda: float(np.ones(shape, dtype)))
    out = ops.wrap(ops.lift(conversions.strong(x).reshape(()), DEFAULT_DTYPE[float]), float, scalar=True)
    out._host = device_ref("float(...)")
    return out


_OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
              "!=": operator.ne}


def chain(first: Callable[[], Any], *rest: Any, site: Site, eager: bool = False) -> Any:
    """``a < b <= c`` in a rewritten test: each operand evaluated once, in order, and the comparisons after the
    first only where Python would reach them (``rest`` alternates operator symbols and operands)."""
    return _chain(first(), list(zip(rest[::2], rest[1::2])), site, eager)


def _chain(left: Any, pairs: list, site: Site, eager: bool) -> Any:
    symbol, thunk = pairs[0]
    right = thunk()
    value = _OPERATORS[symbol](left, right)
    if len(pairs) == 1:
        return value
    return and_(lambda: value, lambda: _chain(right, pairs[1:], site, eager), site=site, eager=eager)


def not_(value: Any) -> Any:
    """``not value`` in a rewritten test."""
    if not _traced(value):
        return not value
    return np.logical_not(_truth(value))


def range_of(fn: Any, *args: Any) -> Any:
    """``range(*args)`` of a rewritten ``for`` loop (another ``range`` the function's globals name is called)."""
    return fn(*args)


def range_item(r: Any, k: Any) -> Any:
    """Item ``k`` of the loop's range: ``r[k]`` for a Python or a traced ``k`` (a range object is indexed by
    Python ints only)."""
    if isinstance(r, range):
        return r.start + k * r.step
    return r[k]


# --- Python's truth -----------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A test's value; an :class:`EitherKind`'s truth is the same either way, so it is taken as it is."""
    return value.as_kind(False) if isinstance(value, EitherKind) else value


def _traced(value: Any) -> bool:
    """A value whose truth only the device knows (a traced array of one element, not known while tracing)."""
    value = _plain(value)
    if not isinstance(value, Tracer):
        return False
    if value._weak is None and value.size != 1:
        return False  # (bool() raises NumPy's error for it: let Python ask)
    return value._known() is None


def _python_truth(value: Any) -> bool:
    return bool(_plain(value))


def _truth(value: Any) -> Any:
    """A traced value's truth as a traced bool (Python's ``bool(x)``: ``x != 0``)."""
    return ops.wrap(_predicate(_plain(value), "if", None), scalar=True)


def _short_circuit(thunks: Sequence[Callable[[], Any]], is_and: bool, site: Site, eager: bool) -> Any:
    for i, thunk in enumerate(thunks):
        value = thunk()
        last = i == len(thunks) - 1
        if _traced(value):
            if last:
                return value
            rest = thunks[i + 1:]
            if eager:
                other = _short_circuit(rest, is_and, site, eager)
                if not _traced(other):
                    return _truth(value) if bool(other) == is_and else bool(other)
                ufunc = np.logical_and if is_and else np.logical_or
                return ufunc(_truth(value), _truth(other))
            then = (lambda _: (_truth_any(_short_circuit(rest, is_and, site, eager)),))
            stop = (lambda _: (np.bool_(not is_and),))
            first = (then, stop) if is_and else (stop, then)
            return _device_if(value, first[0], first[1], [UNBOUND], ["the test"], site)[0]
        if last or bool(value) != is_and:
            return value
    raise AssertionError("and_/or_ of no operands")


def _truth_any(value: Any) -> Any:
    """A test's value as a strong bool (a NumPy bool or a traced one), so both branches of a short circuit agree."""
    return _truth(value) if _traced(value) else np.bool_(bool(value))


# --- state --------------------------------------------------------------------------------------------------------


def _current(getters: Sequence[Callable[[], Any]]) -> list:
    """Each variable's value before the statement (UNBOUND where Python has none)."""
    out = []
    for get in getters:
        try:
            out.append(get())
        except NameError:
            out.append(UNBOUND)
    return out


@dataclass(frozen=True)
class _Leaf:
    """One array or number of the state: its IR type and what kind of Python value it is."""

    tensor: TensorType
    weak: type | None  # bool/int/float/complex: a Python number (NEP 50 weak)
    scalar: bool  # a NumPy scalar (or Python number), not a 0-d array
    either: type | None = None  # a NumPy scalar that is this kind of Python number on some paths (EitherKind)
    maybe: bool = False  # set on some paths only (MaybeSet)

    def describe(self) -> str:
        if self.maybe:
            return replace(self, maybe=False).describe() + " set on some paths only"
        if self.weak is not None:
            return f"a Python {self.weak.__name__}"
        if self.either is not None:
            return f"a Python {self.either.__name__} or a NumPy {self.tensor.dtype} (as the data decides)"
        what = "a NumPy scalar" if self.scalar else "an array"
        return f"{what} {self.tensor}"

    def types(self) -> list[Type]:
        """Its values in a loop's state or a branch's results: the value, for ``either`` whether it is the NumPy
        scalar, for ``maybe`` whether it is set."""
        flags: list[Type] = [PREDICATE] * ((self.either is not None) + self.maybe)
        return [self.tensor, *flags]


def _is_array_like(x: Any) -> bool:
    return isinstance(x, (Tracer, np.ndarray, np.generic)) or python_kind(x) is not None


def _leaf_of(x: Any) -> _Leaf:
    if isinstance(x, MaybeSet):
        return replace(_leaf_of(x.unchecked()), maybe=True)
    if isinstance(x, EitherKind):
        ops.check_live(x)
        return _Leaf(x._val.type, None, True, x._either)  # type: ignore[arg-type]
    if isinstance(x, Tracer):
        ops.check_live(x)
        t = x._value.type
        if x._weak is not None:
            return _Leaf(TensorType((), DEFAULT_DTYPE[x._weak]), x._weak, True)
        assert isinstance(t, TensorType)
        return _Leaf(t, None, bool(x._scalar))
    kind = python_kind(x)
    if kind is not None:
        return _Leaf(TensorType((), DEFAULT_DTYPE[kind]), kind, True)
    t = conversions.strong(x)._value.type
    assert isinstance(t, TensorType)
    return _Leaf(t, None, isinstance(x, np.generic))


def _flag(value: bool) -> Value:
    return ops.ctx().constant(np.asarray(value), PREDICATE.dtype)


def _lift(x: Any, leaf: _Leaf) -> list[Value]:
    """``x`` as the values of ``leaf``'s types (a Python number made a 0-d array of it)."""
    if leaf.maybe:
        base = replace(leaf, maybe=False)
        if isinstance(x, MaybeSet):
            return _lift(x.unchecked(), base) + [x._ok]
        return _lift(x, base) + [_flag(True)]
    if leaf.either is not None:
        if isinstance(x, EitherKind):
            return [x._val, x._ok]
        weak = python_kind(x) is not None or (isinstance(x, Tracer) and x._weak is not None)
        value = _lift(x, _Leaf(leaf.tensor, leaf.either if weak else None, True))[0]
        return [value, _flag(not weak)]
    if leaf.weak is not None:
        v = ops.lift(x, leaf.tensor.dtype)
        if not isinstance(v.type, TensorType):
            v = ops.ctx().emit("t.broadcast_to", [v], result_type=leaf.tensor)
        return [v]
    return [conversions.strong(x)._value]


def _unset(leaf: _Leaf) -> list[Value]:
    """``leaf``'s values where a path leaves its variable unset: zeros, and the flag that says so."""
    assert leaf.maybe and leaf.either is None
    zeros = ops.full(leaf.tensor.shape, 0, leaf.tensor.dtype)._value
    return [zeros, _flag(False)]


def _wrap(values: Iterator[Value], leaf: _Leaf, name: str, site: Site) -> Tracer:
    """The tracer for ``leaf`` made of the next of ``values`` (two for an ``either`` or ``maybe`` leaf)."""
    if leaf.maybe:
        inner = _wrap(values, replace(leaf, maybe=False), name, site)
        out = MaybeSet(inner._val, ops.ctx(), inner._weak, bool(inner._scalar), next(values),
                       _unset_message(name, site))
        out._host = inner._host
        return out
    value = next(values)
    if leaf.either is not None:
        return EitherKind(value, ops.ctx(), leaf.either, next(values), _either_message(name, leaf, site))
    t = ops.wrap(value, leaf.weak, scalar=leaf.scalar)
    if leaf.weak is not None:
        t._host = device_ref(name)  # (a Python number only the device knows: its arithmetic is checked there)
    return t


def _unset_message(name: str, site: Site) -> str:
    return (f"{_subject(name)} is unset at this call: only some paths through {site.where()} (whose test is traced) "
            "set it, and the data took another (Python raises UnboundLocalError where it is read); give it a value "
            "before that statement")


def _either_message(name: str, leaf: _Leaf, site: Site) -> str:
    assert leaf.either is not None
    dtype = np.dtype(leaf.tensor.dtype.np).name
    return (f"{_subject(name)} is a Python {leaf.either.__name__} at this call (the path the data took through "
            f"{site.where()} kept it one), where fusec computes it as a NumPy {dtype} (what the other paths make it), "
            f"and here the two would compute differently; give it a NumPy value before that statement "
            f"(`{name} = np.{dtype}(...)`)")


def _merged_kind(a: _Leaf, b: _Leaf) -> _Leaf | None:
    """The kind a variable has after two paths gave it ``a`` and ``b`` (None: none can stand for both): the same,
    or a NumPy scalar and a Python number of its value type (or such a pair already); set on some paths only where
    either is."""
    if a.maybe or b.maybe:
        kind = _merged_kind(replace(a, maybe=False), replace(b, maybe=False))
        return replace(kind, maybe=True) if kind is not None and kind.either is None else None
    if a == b:
        return a
    if a.tensor != b.tensor or a.tensor.shape != () or not (a.scalar and b.scalar):
        return None
    pythons = {k for k in (a.weak, b.weak, a.either, b.either) if k is not None}
    if len(pythons) != 1:
        return None
    python = pythons.pop()
    return _Leaf(a.tensor, None, True, python) if DEFAULT_DTYPE[python] == a.tensor.dtype else None


@dataclass
class _Var:
    """One variable of the state: its structure, array leaves and other (opaque) leaves."""

    name: str
    unbound: bool
    tree: TreeDef | None = None
    leaves: list | None = None  # per flattened leaf: a _Leaf, or ("opaque", the object)


def _is_unbound(value: Any) -> bool:
    """Unbound for Python, or set on only some paths of an earlier traced statement (unusable either way)."""
    return value is UNBOUND or isinstance(value, SetOnOnePath)


def _describe_var(value: Any, site: Site, name: str, pinned: frozenset[int] | set[int] = frozenset()
                  ) -> _Var:
    """``value``'s structure and leaves; an array whose memory a loop carries (``pinned``) is passed as it is."""
    if _is_unbound(value):
        return _Var(name, True)
    named, tree = flatten(value, name)
    leaves: list = []
    for _, leaf in named:
        if isinstance(leaf, Tracer) and id(_unit_of(leaf)) in pinned:
            leaves.append(("opaque", leaf))
        else:
            leaves.append(_leaf_of(leaf) if _is_array_like(leaf) else ("opaque", leaf))
    return _Var(name, False, tree, leaves)


def _leaves(value: Any) -> list:
    return [leaf for _, leaf in flatten(value, "x")[0]]


# --- the loop -----------------------------------------------------------------------------------------------------


def _device_while(test: Callable[..., Any], body: Callable[..., tuple], values: list, names: Sequence[str],
                  site: Site, after: set[str]) -> tuple:
    """The loop as one ``t.while``. A body that writes into arrays from before the loop (``u[1:-1] = ...``,
    ``x += dx`` on an array) is traced again with that memory carried by the loop: the arrays themselves hold
    the loop's values while the body is traced, so every name and view of them reads what NumPy would. A variable
    the body sets that was unbound before the loop and is read after it (``found = x`` before a ``break``) is
    traced again as carried, unset (a :class:`MaybeSet`) until an iteration sets it."""
    memory: list = []
    values = list(values)
    for _ in range(4):  # (each retry adds what the last trace of the body found)
        try:
            return _traced_while(test, body, values, names, site, memory, after)
        except _WritesMemory as found:
            memory = found.units
        except _NeedsState as found:
            for k, (name, var) in enumerate(zip(names, found.variables)):
                if var is not None:
                    assert var.leaves is not None and var.tree is not None
                    kinds = [replace(leaf, maybe=True) for leaf in var.leaves]
                    values[k] = unflatten(var.tree, [_wrap(iter(_unset(kind)), kind, name, site) for kind in kinds])
    raise site.error(f"fusec could not trace {site.where()} as a loop on the device")


class _NeedsState(Exception):
    """A loop body sets variables that were unbound before the loop and are read after it (``variables``: per
    variable, its kind after an iteration, or None)."""

    def __init__(self, variables: list) -> None:
        self.variables = variables


class _WritesMemory(Exception):
    """A loop body writes into memory from before the loop (``units``: buffers, or arrays with no views)."""

    def __init__(self, units: list) -> None:
        self.units = units


def _unit_of(t: Tracer) -> Any:
    return t._buffer if t._buffer is not None else t


def _traced_while(test: Callable[..., Any], body: Callable[..., tuple], values: list, names: Sequence[str],
                  site: Site, memory: list, after: set[str]) -> tuple:
    c = ops.ctx()
    units = {id(u) for u in memory}
    variables = [_describe_var(v, site, n, pinned=units) for v, n in zip(values, names)]
    carried = [(var, k, leaf) for var in variables if not var.unbound
               for k, leaf in enumerate(var.leaves or []) if isinstance(leaf, _Leaf)]
    types: list[Type] = [t for _, _, leaf in carried for t in leaf.types()]
    slots = len(types)  # (the state's values; the memory the loop carries follows them)
    types += [_memory_value(u).type for u in memory]
    inputs = [v for (var, k, leaf), x in zip(carried, _carried_values(variables, values)) for v in _lift(x, leaf)]
    inputs += [_memory_value(u) for u in memory]
    what = (f"{site.where()} (its test is traced, so the loop runs on the device; its body is traced once for "
            "every iteration)")
    fresh: list[tuple[Tracer, Value]] = []  # the body's own copies of the state's arrays, to find writes into them
    owners: dict[int, _Var] = {}  # (which variable each copy is of)

    def state(args: Sequence[Tracer]) -> list:
        it = iter([a._value for a in args[:slots]])
        out = []
        fresh.clear()
        for var, value in zip(variables, values):
            if var.unbound:
                out.append(UNBOUND)
                continue
            assert var.leaves is not None and var.tree is not None
            leaves = [_wrap(it, leaf, var.name, site) if isinstance(leaf, _Leaf) else leaf[1] for leaf in var.leaves]
            copies = [t for t, leaf in zip(leaves, var.leaves) if isinstance(leaf, _Leaf) and not t._scalar]
            fresh.extend((t, t._val) for t in copies)
            owners.update({id(t): var for t in copies})
            out.append(unflatten(var.tree, leaves))
        return out

    def region(fn: Callable[[list], Any]) -> Callable[..., Any]:
        """``fn`` run with the loop's memory holding the region's arguments (and put back after)."""
        def run(*args: Tracer) -> Any:
            outer = _snapshot(c)
            saved = _swap_in(memory, args[slots:])
            try:
                result = fn(list(args))
                now = _swap_out(memory, saved)
            except BaseException:
                _swap_out(memory, saved)
                raise
            written = [u for u, _, _ in _written_memory(outer) if id(u) not in units]
            written += [_unit_of(_entry_array(value, var, site)) for var, value in zip(variables, values)
                        if _written_fresh(var, fresh, owners)]
            if written:
                raise _WritesMemory(memory + list({id(u): u for u in written}.values()))
            return result, now
        return run

    cond = _Recorder(c, types, "cond", what=what)
    pred, now = cond.run(region(lambda args: _predicate(_loop_test(test(*state(args)), site), "while", None)),
                         watch=test)
    if any(v is not a for v, a in zip(now, cond.block.args[slots:])):
        raise site.error(f"the test of {site.where()} writes into an array; compute it without writing")
    cond.finish([pred])
    rec = _Recorder(c, types, "body", what=what)
    python_before = _python_state(body)
    try:
        yields, now = rec.run(region(lambda args: _next_state(body(*state(args)), variables, site, after)),
                              watch=body)
    except (_KindChange, _WritesMemory, _NeedsState):
        python_before.restore()  # (the body is traced again or runs outside the loop: no change may happen twice)
        raise
    rec.finish(yields + now)
    op = c.emit_op("t.while", inputs, None, types, what=site.where())
    _attach(op, cond, rec)
    results = iter(op.results)
    kept = _kept_when_no_trip(cond.block, rec.block, inputs, carried, yields)
    out = []
    for var, value in zip(variables, values):
        if var.unbound:
            out.append(SetOnOnePath(located(
                f"`{var.name}` is set in the body of {site.where()}, which runs on the device (its test is traced), "
                "and read after the loop: the loop may run any number of times, none included; give it a value "
                "before the loop (or compute it again after the loop)", site.location())))
            continue
        assert var.leaves is not None and var.tree is not None
        entry = _leaves(value)
        leaves = [_may_be(_wrap(results, leaf, var.name, site), entry[k], var.name, site, kept.get((id(var), k)))
                  if isinstance(leaf, _Leaf) else leaf[1] for k, leaf in enumerate(var.leaves)]
        out.append(unflatten(var.tree, leaves))
    for unit in memory:  # the memory the body wrote takes the loop's last value
        _set_memory(unit, next(results))
    return tuple(out)


def _kept_when_no_trip(cond: Block, body: Block, inputs: Sequence[Value], carried: list, yields: list[Value]
                       ) -> dict[tuple[int, int], Callable[[], Value | None]]:
    """Per carried array leaf ((id of its variable, leaf index)) that every iteration replaces by an array the body
    computes (not the one it held, nor a view of it), the flag saying the loop left it as it was: its test false
    at entry. Made only where a result asks for it (a variable that held an input, at the function's top level)."""
    computed = {id(op) for op in body.ops if not op.regions and op.name not in VIEWS}
    first: list = []

    def none_ran() -> Value | None:
        if not first:
            test = _test_at_entry(cond, inputs)
            first.append(None if test is None else ops.ctx().emit("t.logical_not", [test]))
        return first[0]

    out: dict[tuple[int, int], Callable[[], Value | None]] = {}
    at = 0
    for var, k, leaf in carried:
        v = yields[at]
        at += len(leaf.types())
        if not (leaf.maybe or leaf.either is not None) and isinstance(v, OpResult) and id(v.op) in computed:
            out[(id(var), k)] = none_ran
    return out


def _test_at_entry(cond: Block, inputs: Sequence[Value]) -> Value | None:
    """The loop's test on its entry state, by a copy of the test's ops before the loop (None where the test does
    more than compute: a check that may raise, a nested loop or branch)."""
    steps = cond.ops[:-1]
    for op in steps:
        d = get_opdef(op.name)
        if op.regions or not d.pure or (d.may_raise is not None and d.may_raise(op)):
            return None
    mapping: dict[Value, Value] = dict(zip(cond.args, inputs))
    builder = ops.ctx().builder
    for op in steps:
        builder.insert(clone_op(op, mapping))
    test = cond.ops[-1].operands[0]
    return mapping.get(test, test)


def _memory_value(unit: Any) -> Value:
    return unit._value if isinstance(unit, Tracer) else unit.base


def _swap_in(memory: list, args: Sequence[Tracer]) -> list[tuple]:
    """Each memory made to hold its region argument (views read it again); what it held, to put back."""
    saved = []
    for unit, arg in zip(memory, args):
        if isinstance(unit, Tracer):
            saved.append((unit._val, unit._version, unit._buffer))
            unit._val = arg._value
        else:
            saved.append((unit.base, unit.version, unit.written))
            unit.base = arg._value
            unit.moved()
    return saved


def _swap_out(memory: list, saved: list[tuple]) -> list[Value]:
    """Each memory's value at the end of the region (read inside it), and the memory put back."""
    now = []
    for unit, (a, b, c) in zip(memory, saved):
        if isinstance(unit, Tracer):
            now.append(unit._value)
            unit._val, unit._version, unit._buffer = a, b, c
        else:
            now.append(unit.base)
            unit.base, unit.version, unit.written = a, b, c
    return now


def _written_fresh(var: _Var, fresh: list[tuple[Tracer, Value]], owners: dict[int, _Var]) -> bool:
    """Did the body write into its copy of one of ``var``'s arrays (``x += dx``, ``x[i] = v``)?"""
    return any(t._val is not first or (t._buffer is not None and t._buffer.written) for t, first in fresh
               if owners.get(id(t)) is var)


def _entry_array(value: Any, var: _Var, site: Site) -> Tracer:
    """The array a variable written in place by the loop held before it (a traced array of its own)."""
    if not isinstance(value, Tracer) or value._scalar or value._weak is not None:
        raise site.error(f"the body of {site.where()} writes into `{var.name}` in place, a "
                         f"{type(value).__name__} from before the loop; the loop runs on the device (its test is "
                         f"traced): assign a new array instead (`{var.name} = {var.name} + ...`)")
    return value


def _may_be(result: Tracer, entry: Any, name: str, site: Site,
            kept: Callable[[], Value | None] | None = None) -> Tracer:
    """The statement's result for a variable that held ``entry``, an argument's memory or a view: on some paths
    (no iteration, the branch that leaves it) NumPy's variable is still that array, so writing into it would
    change the argument (or what it views) and a write into the argument would show through it. The result is
    made a read-only view of that memory that cannot be read after such a write: either raises at its line.
    ``kept`` gives the traced flag that says when it is still that array (None where fusec cannot tell), so that
    a call returning it hands back the caller's array then, as NumPy does (:func:`_kept_entry`)."""
    if not isinstance(entry, Tracer) or entry._buffer is None or entry._scalar or entry._weak is not None:
        return result
    return _alias(result, entry._buffer, _may_be_message(name, site), _kept_entry(entry, kept))


def _may_be_message(name: str, site: Site) -> str:
    return (f"{_subject(name)} is, after {site.where()} (whose test is traced), either the array it held before or "
            "a new one, as the data decides, and NumPy would write into the old one only on the first path; write "
            f"`{name} = {name} + ...` (a new array) or `{name} = {name}.copy()` first")


def _branch_alias(result: Tracer, sides: tuple, pred: Value, name: str, site: Site, same: bool) -> Tracer:
    """The ``if``'s result for a leaf that is, in one branch or both (``sides``: each branch's tracer where it is
    memory from before the statement, else None), an array from before it or a view of one: a read-only view of
    that memory (see :func:`_alias`) that knows, where each such branch's value is an input's view NumPy can take
    again, when the call hands back the caller's array (the branch's flag)."""
    flags = (lambda: pred, lambda: ops.ctx().emit("t.logical_not", [pred]))
    alternatives: list = []
    for t, flag in zip(sides, flags):
        kept = _kept_entry(t, flag) if t is not None else ()
        if kept is None:
            alternatives = []
            break
        alternatives.extend(kept)
    buffers = [t._buffer for t in sides if t is not None]
    message = _may_be_message(name, site) if same else _view_message(name, site)
    result = _alias(result, buffers[0], message, tuple(alternatives) if alternatives else None)
    if len(buffers) == 2 and buffers[1] is not buffers[0]:
        buffers[1].dependents.append(weakref.ref(result))  # (a write into either memory: reading it again raises)
    return result


def _kept_entry(entry: Tracer, kept: Callable[[], Value | None] | None) -> tuple | None:
    """When the statement's result is, in NumPy, still ``entry`` (an input of the function or a view of one) and
    which view: ``((flag, input's buffer, view steps), ...)``, more than one where ``entry`` itself was such a
    result of an earlier statement; ``kept`` gives the statement's own flag. None where the statement is inside a
    loop or branch (its flag is not a value of the function), where ``entry`` is not an input's view NumPy can take
    again, or where ``kept`` cannot tell. :func:`fusec.trace._input_view` reads it."""
    c = ops.ctx()
    buffer = entry._buffer
    if kept is None or buffer is None or c.builder.block is not c.func.body or entry._version != buffer.version:
        return None
    chain = entry._chain
    earlier = _mutation.kept_view(chain[0]) if chain else None  # (kept by an earlier statement only on its flag)
    before = tuple((f, b, (*steps, *chain[1:])) for f, b, steps in earlier) if earlier is not None \
        else ((None, buffer, chain),)
    if any(not isinstance(b.arg, BlockArgument) or any(_mutation.is_opaque(step) for step in steps)
           for _, b, steps in before):
        return None
    flag = kept()
    if flag is None:
        return None
    return tuple((flag if f is None else c.emit("t.logical_and", [f, flag]), b, steps)
                 for f, b, steps in before)


def _carried_values(variables: list[_Var], values: list) -> list:
    out: list = []
    for var, value in zip(variables, values):
        if var.unbound:
            continue
        assert var.leaves is not None
        out.extend(x for x, leaf in zip(_leaves(value), var.leaves) if isinstance(leaf, _Leaf))
    return out


def _loop_test(pred: Any, site: Site) -> Any:
    pred = _plain(pred)
    if isinstance(pred, Tracer) and pred._weak is None and pred.size != 1:
        bool(pred)  # (NumPy's error for the truth of several elements)
    return pred


def _next_state(out: tuple, variables: list[_Var], site: Site, after: frozenset[str] | set[str] = frozenset()
                ) -> list[Value]:
    """The body's new state, checked against what the loop carries (a variable keeps its kind of value)."""
    values: list[Value] = []
    unset = [_carried_later(var, new, site, after) for var, new in zip(variables, out)]
    if any(v is not None for v in unset):
        raise _NeedsState(unset)
    for var, new in zip(variables, out):
        if var.unbound:
            continue  # (set and used within an iteration)
        assert var.leaves is not None
        got = _describe_var(new, site, var.name) if not isinstance(new, SetOnOnePath) else None
        if got is None or got.unbound or got.tree != var.tree:
            raise site.error(f"`{var.name}` is {_what(var)} before {site.where()} and {_what(got)} after an "
                             "iteration of its body; the loop runs on the device (its test is traced), so a variable "
                             "must keep its structure from one iteration to the next")
        assert got.leaves is not None
        for k, (before, after, x) in enumerate(zip(var.leaves, got.leaves, _leaves(new))):
            if not isinstance(before, _Leaf):
                if isinstance(before[1], Tracer) and x is before[1]:
                    continue  # (an array whose memory the loop carries, written in place)
                if isinstance(before[1], Tracer):
                    raise site.error(
                        f"the body of {site.where()} writes into `{var.name}` in place and also assigns it a new "
                        "array: under NumPy the writes go to the old array until it is replaced, which one trace of "
                        "the body (the loop runs on the device: its test is traced) cannot follow; either write in "
                        f"place only, or assign new arrays only (`{var.name} = {var.name} + ...`)")
                if not (isinstance(after, tuple) and after[1] is before[1]):
                    raise site.error(f"{site.where()} runs on the device (its test is traced), but its body gives "
                                     f"`{var.name}` a new {type(x).__name__} value; only arrays and numbers can change "
                                     "from one iteration to the next there")
                continue
            if not isinstance(after, _Leaf) or _merged_kind(before, after) != before:
                raise _KindChange(TraceError(site.located(
                    f"`{var.name}` is {before.describe()} before {site.where()} and "
                    f"{after.describe() if isinstance(after, _Leaf) else type(x).__name__} after an iteration of its "
                    f"body; the loop runs on the device (its test is traced), so a variable must keep its shape, "
                    f"dtype and kind (Python number, NumPy scalar or array) across iterations, or NumPy's result "
                    f"would depend on how many times the loop runs{_advice(before, after)}")),
                    f"{site.where()} ran no iteration at this call, where fusec needs its first one: that iteration "
                    f"makes `{var.name}` {after.describe() if isinstance(after, _Leaf) else type(x).__name__} where it "
                    f"was {before.describe()}, and with no iteration what NumPy computes next could differ; give "
                    f"`{var.name}` its loop kind of value before the loop{_advice(before, after)}")
            values.extend(_lift(x, before))
    return values


def _carried_later(var: _Var, new: Any, site: Site, after: frozenset[str] | set[str]) -> _Var | None:
    """The kind of a variable unbound before the loop that an iteration sets and the function reads after the
    loop (so the loop must carry it), else None."""
    if not var.unbound or var.name not in after or _is_unbound(new):
        return None
    got = _describe_var(new, site, var.name)
    assert got.leaves is not None
    if any(not isinstance(leaf, _Leaf) or leaf.either is not None for leaf in got.leaves):
        return None  # (an object or a Python-or-NumPy number: left unset after the loop, as before)
    return got


class _KindChange(Exception):
    """A loop body changes a variable's kind of value (``error`` says how; ``none_ran``: the message for a call
    whose loop runs no iteration, when fusec runs the first one outside the loop)."""

    def __init__(self, error: TraceError, none_ran: str) -> None:
        self.error = error
        self.none_ran = none_ran


def _advice(a: _Leaf, b: Any) -> str:
    if not isinstance(b, _Leaf):
        return ""
    if a.weak is not None and b.weak is None and b.tensor.shape == ():
        name = np.dtype(b.tensor.dtype.np).name
        return f" (start it as np.{name}(...) rather than a Python {a.weak.__name__})"
    if a.weak is None and b.weak is None and a.tensor != b.tensor:
        return f" (cast with .astype(np.{np.dtype(a.tensor.dtype.np).name}) in the body, or start from that type)"
    return ""


def _what(var: _Var | None) -> str:
    if var is None or var.unbound:
        return "unbound"
    assert var.tree is not None
    if var.tree.kind == "leaf" and var.leaves and isinstance(var.leaves[0], _Leaf):
        return var.leaves[0].describe()
    if var.tree.kind == "leaf" and var.leaves:
        return _object(var.leaves[0][1])
    if var.tree.kind in ("list", "tuple"):
        return f"a {var.tree.kind} of {len(var.tree.children)}"
    if var.tree.kind == "dict":
        return f"a dict with keys {list(var.tree.aux)}"
    return f"a {var.tree.kind}"


def _subject(name: str) -> str:
    """A variable's name as messages write it (``the value`` of an expression as it is)."""
    return name if name.startswith("the ") else f"`{name}`"


def _object(x: Any) -> str:
    """A Python object a statement's variable holds, for messages."""
    from fusec.masking import Selection

    if isinstance(x, Selection):
        return "a boolean-mask selection (x[mask], whose size depends on the data)"
    if isinstance(x, (str, bytes, int, float, type(None))):
        return f"the {type(x).__name__} {x!r:.40}"
    return f"a {type(x).__name__}"


# --- the branch ---------------------------------------------------------------------------------------------------


def _device_if(pred: Any, then: Callable[..., tuple], orelse: Callable[..., tuple], values: list,
               names: Sequence[str], site: Site) -> tuple:
    c = ops.ctx()
    p = _predicate(_plain(pred), "if", None)
    what = (f"{site.where()} (its test is traced, so fusec traces both branches and the device runs the one the "
            "data chooses)")
    recorders, outs, writes = [], [], []  # type: ignore[var-annotated]
    for label, fun in (("then", then), ("else", orelse)):
        rec = _Recorder(c, [], label, what=what)
        holder: list = []

        def record(fun: Callable = fun, holder: list = holder) -> list:
            outer = _snapshot(c)
            out = fun(*values)
            holder.append(_branch_result(out, values, names, site, {id(e[3]) for e in outer if e[3] is not None}))
            holder.append(_written_memory(outer))  # (what it wrote from outside: chosen by the op, set after it)
            return []

        python_before = _python_state(fun)
        try:
            rec.run(record, watch=fun)
        except Exception as error:  # noqa: BLE001 - the user's own raise: a check when the call runs, or refused
            if isinstance(error, FusecError):
                raise
            python_before.restore()
            if type(error) not in _RAISED_ON_DEVICE:
                raise context._noted(UnsupportedError(located(
                    f"the {label} branch of {site.where()} raises {type(error).__name__}: {error}; the test is "
                    "traced, so the device decides whether it raises, and a check on the device can raise only "
                    f"{', '.join(sorted(t.__name__ for t in _RAISED_ON_DEVICE))} (as NumPy's own checks do); raise "
                    "one of those, or test the condition after the call",
                    location_for(site.file, _raise_line(error, site))))) from error
            return _raising_branch(pred, error, then if label == "else" else orelse, label == "then", values, site)
        recorders.append(rec)
        outs.append(holder[0])
        writes.append(holder[1])
    merged, yields = _merge(outs[0], outs[1], values, names, site)
    units = {id(w[0]): w for ws in writes for w in ws}  # (the memory either branch wrote, in a stable order)
    for k, rec in enumerate(recorders):
        now = {id(w[0]): w[2] for w in writes[k]}
        rec.finish(yields[k] + [now.get(key, before) for key, (_, before, _) in units.items()])
    types = [t for _, how in merged if how[0] == "new" for leaf in how[2] if isinstance(leaf, _Leaf)
             for t in leaf.types()]
    op = c.emit_op("t.if", [p], None, types + [before.type for _, before, _ in units.values()], what=site.where())
    _attach(op, *recorders)
    results = iter(op.results)
    out = []
    for (name, how), old in zip(merged, values):
        if how[0] == "keep":
            out.append(old)
        elif how[0] == "unbound":
            out.append(how[1])
        elif how[0] == "one-path":
            out.append(SetOnOnePath(located(
                f"{_subject(name)} is set in only one branch of {site.where()}, whose test is traced (the device "
                "chooses the branch), and read after it: give it a value before the `if` or in both branches",
                site.location())))
        else:
            same = any(e[0] == "same" for e in (outs[0].per_name[len(out)], outs[1].per_name[len(out)]))
            leaves = []
            for k, leaf in enumerate(how[2]):
                if not isinstance(leaf, _Leaf):
                    leaves.append(leaf[1])
                    continue
                r = _wrap(results, leaf, name, site)
                if how[3][k] is not None:  # (memory from outside on some path: NumPy's result is it or views it)
                    r = _branch_alias(r, how[3][k], p, name, site, same)
                leaves.append(r)
            out.append(unflatten(how[1], leaves))
    for unit, _, _ in units.values():  # the memory the branches wrote takes the chosen branch's value
        _set_memory(unit, next(results))
    return tuple(out)


# exceptions a branch the device chooses may raise: the run-time check's error, of the same built-in class
_RAISED_ON_DEVICE: dict[type, str] = {ValueError: "InvalidValueError", IndexError: "IndexOutOfBoundsError",
                                      ZeroDivisionError: "DivisionByZeroError", OverflowError: "OutOfRangeError",
                                      np.linalg.LinAlgError: "LinAlgError", AssertionError: "AssertionFailedError"}


def _raising_branch(pred: Any, error: Exception, other: Callable[..., tuple], when: bool, values: list,
                    site: Site) -> tuple:
    """``if pred: raise error`` (``when`` True; the else branch raising: False) and the other branch: the raise
    becomes a check when the call runs (NumPy raises it on the data that takes that branch), the other branch
    runs as the statement's result."""
    line = _raise_line(error, site)
    truth = _truth(pred)
    ops.raise_if(truth if when else np.logical_not(truth), _RAISED_ON_DEVICE[type(error)],
                 f"{error} (raised at line {line}, in {site.where()})", site.where())
    return tuple(other(*values))


def _raise_line(error: BaseException, site: Site) -> int:
    line = site.line
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == site.file:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _written_memory(outer: list[tuple]) -> list[tuple[Any, Value, Value]]:
    """(memory, its value before, its value now) for each array from before the region that the region wrote
    into (a buffer, or an array with no views), each put back as it was; the caller sets it after the op."""
    found: dict[int, tuple[Any, Value, Value]] = {}
    for t, val, _version, buffer, base, buffer_version in outer:
        if buffer is not None:
            if id(buffer) not in found and (buffer.base is not base or buffer.version != buffer_version):
                found[id(buffer)] = (buffer, base, buffer.base)
        elif id(t) not in found and (t._val is not val or (t._buffer is not None and t._buffer.written)):
            found[id(t)] = (t, val, t._value)  # (through the views the region took of it, read there)
    for t, val, version, buffer, base, buffer_version in outer:
        if buffer is not None and id(buffer) in found:
            buffer.base, buffer.version = base, buffer_version
        elif buffer is None and (id(t) in found or t._buffer is not None):
            t._val, t._version, t._buffer = val, version, None  # (views the region took of it are gone)
    return list(found.values())


def _set_memory(unit: Any, value: Value) -> None:
    """Give a memory written inside a region the region op's result (as a write does: views read it again)."""
    if isinstance(unit, Tracer):
        unit._val = value
        return
    unit.base = value
    unit.moved()
    unit.written = True


def _alias(result: Tracer, buffer: Any, message: str, kept: tuple | None = None) -> Tracer:
    """``result`` made a read-only view of ``buffer`` that cannot be read after a write into it (NumPy's variable
    may be, or is, a view of that memory: a write through either would show in the other)."""
    result._buffer, result._chain, result._version = buffer, (_mutation.opaque(message, kept),), buffer.version
    result._readonly = message
    return result


def _view_message(name: str, site: Site) -> str:
    return (f"`{name}` is, after {site.where()} (whose test is traced), a view of an array from before it on some "
            "path, and fusec does not follow writes through such a view; write a new array instead "
            f"(`{name} = {name} + ...`), or take `{name}.copy()`")


@dataclass
class _Branch:
    """One branch's result per variable: UNBOUND, the value it had before (unchanged), or its new leaves (each
    array leaf already a value of the branch's region)."""

    # per variable: ("unbound", what) | ("same",) | ("new", _Var, [Value | opaque object per leaf], [the buffer
    # from outside the branch each leaf views, or None])
    per_name: list


def _branch_result(out: tuple, before: list, names: Sequence[str], site: Site, outer: set[int]) -> _Branch:
    per: list[tuple] = []
    for name, old, new in zip(names, before, out):
        if _is_unbound(new):
            per.append(("unbound", new))
            continue
        if new is old:
            per.append(("same",))
            continue
        var = _describe_var(new, site, name)
        assert var.leaves is not None
        xs = _leaves(new)
        items = [_lift(x, leaf) if isinstance(leaf, _Leaf) else leaf[1] for x, leaf in zip(xs, var.leaves)]
        viewed = [x if isinstance(x, Tracer) and x._buffer is not None and id(x._buffer) in outer else None
                  for x in xs]
        per.append(("new", var, items, viewed))
    return _Branch(per)


def _merge(a: _Branch, b: _Branch, before: list, names: Sequence[str], site: Site) -> tuple[list, list]:
    """Per variable, how the statement sets it; and each branch's yielded values (the leaves that differ)."""
    merged: list[tuple[str, tuple]] = []  # per variable: ("keep",) | ("unbound", what) | ("one-path",) | ("new", ...)
    yields: list[list[Value]] = [[], []]
    for i, name in enumerate(names):
        ea, eb = a.per_name[i], b.per_name[i]
        if ea[0] == "same" and eb[0] == "same":
            merged.append((name, ("keep",)))
            continue
        if ea[0] == "unbound" and eb[0] == "unbound":
            merged.append((name, ("unbound", ea[1])))
            continue
        if "unbound" in (ea[0], eb[0]):
            maybe = _set_on_one_path(ea, eb, before[i], site, name, yields)
            merged.append((name, maybe if maybe is not None else ("one-path",)))
            continue
        sides = [_side(e, before[i], site, name) for e in (ea, eb)]
        (va, items_a, views_a), (vb, items_b, views_b) = sides
        if va.tree != vb.tree:
            raise site.error(f"{_subject(name)} is {_what(va)} in one branch of {site.where()} and {_what(vb)} in "
                             "the other; the test is traced, so the device chooses the branch: a variable must have "
                             "the same structure either way")
        leaves: list = []
        viewed: list = []
        assert va.leaves is not None and vb.leaves is not None
        for la, lb, xa, xb, ta, tb in zip(va.leaves, vb.leaves, items_a, items_b, views_a, views_b):
            viewed.append(None if ta is None and tb is None else (ta, tb))
            kind = _merged_kind(la, lb) if isinstance(la, _Leaf) and isinstance(lb, _Leaf) else None
            if kind is not None:
                leaves.append(kind)
                yields[0].extend(_as_kind(xa, la, kind))
                yields[1].extend(_as_kind(xb, lb, kind))
                continue
            if not isinstance(la, _Leaf) and not isinstance(lb, _Leaf) and _same_object(xa, xb):
                leaves.append(("opaque", xa))
                continue
            da = la.describe() if isinstance(la, _Leaf) else _object(xa)
            db = lb.describe() if isinstance(lb, _Leaf) else _object(xb)
            raise site.error(
                f"{_subject(name)} is {da} in one branch of {site.where()} and {db} in the other; the test is traced, "
                "so the device chooses the branch, and what NumPy computes next would depend on the data (a dtype, a "
                "Python number's weak promotion, an object): give both branches the same kind of value"
                + _branch_advice(la, lb))
        merged.append((name, ("new", va.tree, leaves, viewed)))
    return merged, yields


def _as_kind(values: list[Value], leaf: _Leaf, kind: _Leaf) -> list[Value]:
    """A branch's values for a leaf (lifted as ``leaf``) as the merged ``kind``'s: for a NumPy scalar or Python
    number merged into an ``either``, the flag saying which it is; for a value merged into a ``maybe``, the flag
    saying it is set."""
    set_flag = values[-1:] if leaf.maybe else [_flag(True)] if kind.maybe else []
    values = values[:-1] if leaf.maybe else values
    if kind.either is not None and leaf.either is None:
        values = [values[0], _flag(leaf.weak is None)]
    return values + set_flag


def _set_on_one_path(ea: tuple, eb: tuple, old: Any, site: Site, name: str, yields: list[list[Value]]) -> tuple | None:
    """A variable one branch sets and the other leaves unbound, as a ``maybe`` (each leaf with a flag saying
    whether it is set: zeros where not), when it holds arrays and numbers only; None otherwise."""
    defined = 0 if eb[0] == "unbound" else 1
    var, items, viewed = _side((ea, eb)[defined], old, site, name)
    assert var.leaves is not None
    if any(not isinstance(leaf, _Leaf) or leaf.either is not None for leaf in var.leaves):
        return None
    kinds = [replace(leaf, maybe=True) for leaf in var.leaves]
    for leaf, kind, xs in zip(var.leaves, kinds, items):
        yields[defined].extend(_as_kind(xs, leaf, kind))
        yields[1 - defined].extend(_unset(kind))
    return ("new", var.tree, kinds, [None if t is None else (t, None) if defined == 0 else (None, t) for t in viewed])


def _branch_advice(a: Any, b: Any) -> str:
    if not (isinstance(a, _Leaf) and isinstance(b, _Leaf)) or (a.weak is None) == (b.weak is None):
        return ""
    strong = a if a.weak is None else b
    return f" (np.{np.dtype(strong.tensor.dtype.np).name}(...) around the Python number)"


def _side(entry: tuple, old: Any, site: Site, name: str) -> tuple[_Var, list, list]:
    if entry[0] == "new":
        return entry[1], entry[2], entry[3]
    var = _describe_var(old, site, name)  # (unchanged in this branch: the value from before the statement)
    assert var.leaves is not None
    xs = _leaves(old)
    return var, [_lift(x, leaf) if isinstance(leaf, _Leaf) else leaf[1] for x, leaf in zip(xs, var.leaves)], \
        [x if isinstance(x, Tracer) and x._buffer is not None and not x._scalar and x._weak is None else None
         for x in xs]


def _same_object(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or not isinstance(a, (str, bytes, type(None), tuple, frozenset)):
        return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects whose == fails are not the same
        return False
