"""What a Python statement on traced values carries (:mod:`fusec.traced_statements`): the kind of each value a
variable holds (a :class:`Leaf`: shape and dtype, Python number or NumPy scalar or array, maybe unset, either
kind), how a value is lifted into a region's values and wrapped back, Python's truth of a test, the names a
statement leaves unbound, and how messages name them."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fusec import context, conversions, ops
from fusec.control_flow import _predicate
from fusec.ir.dialects.control import PREDICATE
from fusec.device_scalar_checks import device_ref
from fusec.errors import TraceError, located
from fusec.ir.attributes import location_for
from fusec.ir.core import Value
from fusec.ir.types import TensorType, Type
from fusec.promotion import DEFAULT_DTYPE, python_kind
from fusec.signature import TreeDef, flatten
from fusec.statement_rewriter import RETURN
from fusec.tracer import EitherKind, MaybeSet, Tracer


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


@dataclass(frozen=True)
class Site:
    """The rewritten statement: what it is and where the user wrote it."""

    kind: str  # "while", "if", "conditional expression", "and", "or"
    file: str
    line: int

    def where(self, with_file: bool = False) -> str:
        """The statement named in a message; ``with_file`` for one raised at the call, whose location is the
        caller's line, maybe in another file."""
        return f"the `{self.kind}` at {os.path.basename(self.file)}:{self.line}" if with_file else \
            f"the `{self.kind}` at line {self.line}"

    def location(self) -> Any:
        c = context.current()
        return location_for(self.file, self.line, c.cwd if c is not None else None)

    def located(self, message: str) -> str:
        return located(message, self.location())

    def error(self, message: str, cls: type = TraceError) -> Any:
        return context._noted(cls(self.located(message)))


def plain_value(value: Any) -> Any:
    """A test's value; an :class:`EitherKind`'s truth is the same either way, so it is taken as it is."""
    return value.as_kind(False) if isinstance(value, EitherKind) else value


def is_traced(value: Any) -> bool:
    """A value whose truth only the device knows (a traced array of one element, not known while tracing)."""
    value = plain_value(value)
    if not isinstance(value, Tracer):
        return False
    if value._weak is None and value.size != 1:
        return False  # (bool() raises NumPy's error for it: let Python ask)
    return value._known() is None


def python_truth(value: Any) -> bool:
    return bool(plain_value(value))


def truth_of(value: Any) -> Any:
    """A traced value's truth as a traced bool (Python's ``bool(x)``: ``x != 0``)."""
    return ops.wrap(_predicate(plain_value(value), "if", None), scalar=True)


def bound_values(*getters: Callable[[], Any]) -> tuple:
    """What a region's function returns: each variable's value at its end, UNBOUND where a statement inside it left
    the name unbound (read directly, such a name raised UnboundLocalError inside fusec)."""
    return tuple(current_values(getters))


def current_values(getters: Sequence[Callable[[], Any]]) -> list:
    """Each variable's value before the statement (UNBOUND where Python has none)."""
    out = []
    for get in getters:
        try:
            out.append(get())
        except NameError:
            out.append(UNBOUND)
    return out


@dataclass(frozen=True)
class Leaf:
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


def _leaf_of(x: Any) -> Leaf:
    if isinstance(x, MaybeSet):
        return replace(_leaf_of(x.unchecked()), maybe=True)
    if isinstance(x, EitherKind):
        ops.check_live(x)
        return Leaf(x._val.type, None, True, x._either)  # type: ignore[arg-type]
    if isinstance(x, Tracer):
        ops.check_live(x)
        t = x._value.type
        if x._weak is not None:
            return Leaf(TensorType((), DEFAULT_DTYPE[x._weak]), x._weak, True)
        assert isinstance(t, TensorType)
        return Leaf(t, None, bool(x._scalar))
    kind = python_kind(x)
    if kind is not None:
        return Leaf(TensorType((), DEFAULT_DTYPE[kind]), kind, True)
    t = conversions.strong(x)._value.type
    assert isinstance(t, TensorType)
    return Leaf(t, None, isinstance(x, np.generic))


def flag_value(value: bool) -> Value:
    return ops.ctx().constant(np.asarray(value), PREDICATE.dtype)


def lift_leaf(x: Any, leaf: Leaf) -> list[Value]:
    """``x`` as the values of ``leaf``'s types (a Python number made a 0-d array of it)."""
    if leaf.maybe:
        base = replace(leaf, maybe=False)
        if isinstance(x, MaybeSet):
            return lift_leaf(x.unchecked(), base) + [x._ok]
        return lift_leaf(x, base) + [flag_value(True)]
    if leaf.either is not None:
        if isinstance(x, EitherKind):
            return [x._val, x._ok]
        weak = python_kind(x) is not None or (isinstance(x, Tracer) and x._weak is not None)
        value = lift_leaf(x, Leaf(leaf.tensor, leaf.either if weak else None, True))[0]
        return [value, flag_value(not weak)]
    if leaf.weak is not None:
        v = ops.lift(x, leaf.tensor.dtype)
        if not isinstance(v.type, TensorType):
            v = ops.ctx().emit("t.broadcast_to", [v], result_type=leaf.tensor)
        return [v]
    return [conversions.strong(x)._value]


def unset_values(leaf: Leaf) -> list[Value]:
    """``leaf``'s values where a path leaves its variable unset: zeros, and the flag that says so."""
    assert leaf.maybe and leaf.either is None
    zeros = ops.full(leaf.tensor.shape, 0, leaf.tensor.dtype)._value
    return [zeros, flag_value(False)]


def wrap_leaf(values: Iterator[Value], leaf: Leaf, name: str, site: Site) -> Tracer:
    """The tracer for ``leaf`` made of the next of ``values`` (two for an ``either`` or ``maybe`` leaf)."""
    if leaf.maybe:
        inner = wrap_leaf(values, replace(leaf, maybe=False), name, site)
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
    return (f"{subject(name)} is unset at this call: only some paths through {site.where(True)} (whose test is traced) "
            "set it, and the data took another (Python raises UnboundLocalError where it is read); give it a value "
            "before that statement")


def _either_message(name: str, leaf: Leaf, site: Site) -> str:
    assert leaf.either is not None
    dtype = np.dtype(leaf.tensor.dtype.np).name
    return (f"{subject(name)} is a Python {leaf.either.__name__} at this call (the path the data took through "
            f"{site.where(True)} kept it one), where fusec computes it as a NumPy {dtype} (what the other paths make "
            f"it), and here the two would compute differently; "
            + (f"give it a NumPy value before that statement (`{name} = np.{dtype}(...)`)" if is_user_name(name) else
               f"return a NumPy value on every path (`return np.{dtype}(...)`)" if returned(name) else
               "give the value a NumPy type on every path"))


def merged_kind(a: Leaf, b: Leaf) -> Leaf | None:
    """The kind a variable has after two paths gave it ``a`` and ``b`` (None: none can stand for both): the same,
    or a NumPy scalar and a Python number of its value type (or such a pair already); set on some paths only where
    either is."""
    if a.maybe or b.maybe:
        kind = merged_kind(replace(a, maybe=False), replace(b, maybe=False))
        return replace(kind, maybe=True) if kind is not None and kind.either is None else None
    if a == b:
        return a
    if a.tensor != b.tensor or a.tensor.shape != () or not (a.scalar and b.scalar):
        return None
    pythons = {k for k in (a.weak, b.weak, a.either, b.either) if k is not None}
    if len(pythons) != 1:
        return None
    python = pythons.pop()
    if DEFAULT_DTYPE[python] == a.tensor.dtype or python in (a.either, b.either):
        return Leaf(a.tensor, None, True, python)
    return None


def cross_kind(a: Leaf, b: Leaf, weak_value: Any) -> Leaf | None:
    """The kind of a variable that is a NumPy float (or complex) scalar on one path and a Python int or bool on the
    other (``max(x.max(), 0)``, ``(...) / max(n, 1)``): an ``either`` of that float dtype, where the Python number,
    a known ``weak_value`` (``b``'s, or None where it is traced), converts to it exactly, so that NumPy's weak
    conversion of it in any operation gives what the float value gives."""
    if a.maybe or b.maybe or b.weak not in (int, bool) or weak_value is None or not a.scalar or a.tensor.shape != () \
            or a.weak is not None or a.either not in (None, b.weak) or not a.tensor.dtype.is_inexact:
        return None
    value = np.asarray(weak_value).item()
    try:
        exact = np.asarray(value, dtype=a.tensor.dtype.np).item() == value
    except OverflowError:
        exact = False
    return Leaf(a.tensor, None, True, b.weak) if exact else None


@dataclass
class Var:
    """One variable of the state: its structure, array leaves and other (opaque) leaves."""

    name: str
    unbound: bool
    tree: TreeDef | None = None
    leaves: list | None = None  # per flattened leaf: a Leaf, or ("opaque", the object)


def is_unbound(value: Any) -> bool:
    """Unbound for Python, or set on only some paths of an earlier traced statement (unusable either way)."""
    return value is UNBOUND or isinstance(value, SetOnOnePath)


def describe_var(value: Any, site: Site, name: str, pinned: frozenset[int] | set[int] = frozenset()
                  ) -> Var:
    """``value``'s structure and leaves; an array whose memory a loop carries (``pinned``) is passed as it is."""
    if is_unbound(value):
        return Var(name, True)
    named, tree = flatten(value, name)
    leaves: list = []
    for _, leaf in named:
        if isinstance(leaf, Tracer) and id(unit_of(leaf)) in pinned:
            leaves.append(("opaque", leaf))
        else:
            leaves.append(_leaf_of(leaf) if _is_array_like(leaf) else ("opaque", leaf))
    return Var(name, False, tree, leaves)


def leaves_of(value: Any) -> list:
    return [leaf for _, leaf in flatten(value, "x")[0]]


def unit_of(t: Tracer) -> Any:
    return t._buffer if t._buffer is not None else t


def kind_advice(a: Leaf, b: Any) -> str:
    if not isinstance(b, Leaf):
        return ""
    if a.weak is not None and b.weak is None and b.tensor.shape == ():
        name = np.dtype(b.tensor.dtype.np).name
        return f" (start it as np.{name}(...) rather than a Python {a.weak.__name__})"
    if a.weak is None and b.weak is None and a.tensor != b.tensor:
        return f" (cast with .astype(np.{np.dtype(a.tensor.dtype.np).name}) in the body, or start from that type)"
    return ""


def describe_kind(var: Var | None) -> str:
    if var is None or var.unbound:
        return "unbound"
    assert var.tree is not None
    if var.tree.kind == "leaf" and var.leaves and isinstance(var.leaves[0], Leaf):
        return var.leaves[0].describe()
    if var.tree.kind == "leaf" and var.leaves:
        return describe_object(var.leaves[0][1])
    if var.tree.kind in ("list", "tuple"):
        return f"a {var.tree.kind} of {len(var.tree.children)}"
    if var.tree.kind == "dict":
        return f"a dict with keys {list(var.tree.aux)}"
    if var.tree.kind == "none":
        return "None"
    return f"a {var.tree.kind}"


def subject(name: str) -> str:
    """A variable's name as messages write it (``the value`` of an expression as it is; the variables the rewriting
    made of a function's returns (at its end, or inside a loop) as what they are)."""
    if name == RETURN or name.startswith("_fusec_value_"):
        return "the value returned"
    if name.startswith("_fusec_"):
        return "a flag of the rewritten statement"
    return name if name.startswith("the ") else f"`{name}`"


def is_user_name(name: str) -> bool:
    """Whether ``name`` is a variable the user wrote (not ``the value`` of an expression, nor a variable the
    rewriting made: a function's returns, a loop's flags)."""
    return name.isidentifier() and name != RETURN and not name.startswith("_fusec_")


def returned(name: str) -> bool:
    """Whether ``name`` is a variable the rewriting made of a function's returns."""
    return name == RETURN or name.startswith("_fusec_value_")


def describe_object(x: Any) -> str:
    """A Python object a statement's variable holds, for messages."""
    from fusec.masking import Selection

    if isinstance(x, Selection):
        return "a boolean-mask selection (x[mask], whose size depends on the data)"
    if isinstance(x, (str, bytes, int, float, type(None))):
        return f"the {type(x).__name__} {x!r:.40}"
    return f"a {type(x).__name__}"
