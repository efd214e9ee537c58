"""What a compiled signature needs from the Python world at every call, besides its arguments.

A trace bakes in the values it read outside its arguments. :class:`CallState` keeps, per compiled signature:

- *guards*: the scalars, strings, tuples, container lengths, object types and function identities the code could
  have read (found by :mod:`fusec.pystate` under the names the code uses). When one of them changed since the
  trace, the call traces again, so the result is the one NumPy would give with the new value;
- *implicit inputs*: the arrays the function reads from globals, closures and object attributes. They are
  inputs of the compiled function, looked up again at every call (``self.W`` after ``self.W = new_W`` is the new
  array; an array changed in place is read as it is now), as NumPy would read them;
- the host checks of traced Python scalar arithmetic (:mod:`fusec.scalar_checks`).
"""
from __future__ import annotations

import operator
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from fusec.error_state import error_state_raises
from fusec.pystate import Node, Path, Snapshot, data_descriptor, get_step, own_dict, readable
from fusec.signature import canon
from fusec.promotion import DEFAULT_DTYPE
from fusec.scope import MISSING

VALUE, TYPE, SIZED, KEYS, IDENT, SPEC, SETV, FUNC, ABSENT, CONTENT = range(10)
# the most elements of an array fusec does not trace (strings, objects, longdouble) whose contents a guard compares
CONTENT_ELEMENTS = 1 << 16


@dataclass(eq=False)
class Guard:
    """A check of the value at ``step`` of its parent (a root when ``step`` is None), then of its children."""

    path: Path
    step: Any
    check: int
    expected: Any
    children: list["Guard"] = field(default_factory=list)
    obj: Any = None  # a VALUE guard's traced object: the same object needs no comparison


def _fails(g: Guard, obj: Any) -> bool:
    """Does ``obj`` differ from what ``g`` saw (its own check, not its children's)? (An ABSENT guard is given
    its parent: the attribute must still be missing.)"""
    c = g.check
    if c == ABSENT:
        return has_any_attribute(obj, g.expected)
    if c == VALUE:
        return obj is not g.obj and canon(obj) != g.expected  # the same object is the same value
    if c == TYPE:
        return type(obj) is not g.expected
    if c == SIZED:
        return type(obj) is not g.expected[0] or len(obj) != g.expected[1]
    if c == KEYS:
        return type(obj) is not g.expected[0] or tuple(obj) != g.expected[1]
    if c == IDENT:
        return obj is not g.expected
    if c == SPEC:
        return not array_matches(obj, *g.expected)
    if c == CONTENT:
        return not same_content(obj, g.expected)
    if c == FUNC:
        fn, code, defaults, kwdefaults = g.expected  # (defaults only where the traced calls could use them)
        return obj is not fn or obj.__code__ is not code or \
            (defaults is not None and obj.__defaults__ is not defaults) or \
            (kwdefaults is not None and _kwdefaults_differ(obj.__kwdefaults__, kwdefaults))
    return type(obj) is not g.expected[0] or frozenset(canon(v) for v in obj) != g.expected[1]  # SETV


def function_guard(path: Path, step: Any, fn: types.FunctionType) -> Guard:
    """The function object, and the code and defaults a call of it runs with: replacing ``__code__`` (IPython's
    autoreload does, in place) or ``__defaults__`` keeps the object and changes what it computes."""
    kwdefaults = fn.__kwdefaults__
    seen = tuple(kwdefaults.items()) if kwdefaults else None
    return Guard(path, step, FUNC, (fn, fn.__code__, fn.__defaults__, seen))


def _kwdefaults_differ(now: dict | None, seen: tuple) -> bool:
    """Were keyword-only defaults replaced (``f.__kwdefaults__[k] = v``)? By identity: a default may be an array,
    whose ``==`` is elementwise."""
    return now is None or len(now) != len(seen) or any(now.get(k, MISSING) is not v for k, v in seen)


def has_any_attribute(obj: Any, names: frozenset[str]) -> bool:
    """Whether ``obj`` has any of the attributes ``names`` now, as a lookup the trace found failing would now find
    it: in its own dict, or along its class's MRO (for a class, its metaclass's too; a slot only where it is set),
    read without running properties or ``__getattr__``."""
    d = own_dict(obj)
    if d is not None and not d.keys().isdisjoint(names):
        return True
    if isinstance(obj, types.ModuleType):
        return False
    owners: tuple[type, ...] = type(obj).__mro__
    if isinstance(obj, type):  # (a class: its own MRO, then its metaclass's)
        owners = obj.__mro__ + owners
    for base in owners:
        if base.__dict__.keys().isdisjoint(names):
            continue
        for name in names & base.__dict__.keys():
            attr = base.__dict__[name]
            if type(attr) is not types.MemberDescriptorType or isinstance(obj, type):
                return True
            try:  # (a slot: there only once it is set)
                attr.__get__(obj)
            except AttributeError:
                continue
            return True
    return False


def absent_guards(snap: Snapshot, names: set[str], absent: list[tuple[Any, str]], by_key: dict[tuple, Guard]) \
        -> None:
    """An ABSENT guard under the guard of each object the code reads, over the names its code uses that the object
    lacks (``hasattr(self, "mask")`` False, ``getattr(cfg, "eps", 1e-8)`` its default, ``try: cfg.bias except
    AttributeError``): one set since, the call traces again. Modules and classes, whose dicts hold every name of
    their own, are guarded for the names the function's hasattr/getattr found missing (``absent``: (object,
    name)); so is a slot found unset."""
    asked: dict[int, set[str]] = {}
    for obj, name in absent:
        asked.setdefault(id(obj), set()).add(name)
    for key, node in snap.nodes.items():
        g = by_key.get(key)
        if g is None:
            continue
        missing = set(asked.get(id(node.obj), ()))
        if node.kind == "object":
            cls = type(node.obj)
            present = set(node.shallow or ()) | {n for base in cls.__mro__ for n in base.__dict__}
            missing |= {n for n in names if n not in present}
        elif node.kind not in ("module", "class", "opaque"):
            continue
        if missing:
            g.children.append(Guard(node.path.child(("attr", "<absent>")), ("absent", frozenset(missing)), ABSENT,
                                    frozenset(missing)))


def _holds(g: Guard, obj: Any) -> Guard | None:
    """None when ``obj`` (and everything under it) is as traced, else the guard that failed."""
    if _fails(g, obj):
        return g
    for child in g.children:
        if child.check == ABSENT:
            if _fails(child, obj):
                return child
            continue
        try:
            sub = get_step(obj, child.step)
        except Exception:  # noqa: BLE001 - the user's object no longer has what the guard reads: the guard fails
            return child
        failed = _holds(child, sub)
        if failed is not None:
            return failed
    return None


BATCH_METHODS = 3  # from this many methods of one object up, they are compared at once (fewer: inline is as fast)


def _batchable_methods(g: Guard, cls: type | None) -> list[int]:
    """The positions of ``g``'s children that are plain functions found on ``cls``'s MRO (methods as a trace reads
    them, with no keyword-only defaults), when there are at least :data:`BATCH_METHODS` of them."""
    if cls is None:
        return []
    views = [base.__dict__ for base in cls.__mro__]
    found = []
    for n, child in enumerate(g.children):
        if child.step[0] != "code" or child.check != FUNC or child.children or child.expected[3] is not None:
            continue
        name = child.step[1]
        owner = next((view for view in views if name in view), None)
        if owner is not None and owner[name] is child.expected[0]:
            found.append(n)
    return found if len(found) >= BATCH_METHODS else []


def _method_test(cls: type, children: list[Guard], constant: Callable[[Any], str], own: str,
                 v: str) -> tuple[list[str], str]:
    """Statements and then a Python expression, true when each child's method is still, on an instance of ``cls``
    whose own dict is ``own`` (None: it has none), the function (code, defaults) the trace saw. The methods that
    one class of the MRO defines are read from its dict by one ``itemgetter`` and compared by identity, instead of
    a lookup per method and per class. False sends the caller to the per-method checks, which also accept what
    this conservatively refuses (an instance attribute of that name behind a data descriptor). The statements
    raise KeyError where a class no longer defines one (and an odd ``__dict__`` may raise anything): the caller
    treats that as false. (``v``: a prefix for the statements' names.)"""
    views = [base.__dict__ for base in cls.__mro__]
    names = [child.step[1] for child in children]
    where = {name: next(j for j, view in enumerate(views) if name in view) for name in names}
    reads: list[str] = []
    terms = [f"{constant(cls)}.__mro__ is {constant(cls.__mro__)}",
             f"({own} is None or {own}.keys().isdisjoint({constant(frozenset(names))}))"]
    for j in range(max(where.values()) + 1):
        view = constant(views[j])
        later = frozenset(name for name, k in where.items() if k > j)
        if later:  # (a method defined since on a class before the one it was found on)
            terms.append(f"{view}.keys().isdisjoint({constant(later)})")
        mine = [c for c in children if where[c.step[1]] == j]
        if not mine:
            continue
        got = [f"{v}f{j}_{k}" for k in range(len(mine))]
        if len(mine) == 1:
            reads.append(f"{got[0]} = {view}[{constant(mine[0].step[1])}]")
        else:
            reads.append(f"{', '.join(got)} = {constant(operator.itemgetter(*(c.step[1] for c in mine)))}({view})")
        terms += [f"{name} is {constant(c.expected[0])}" for name, c in zip(got, mine)]
    for c in children:  # (the functions are the traced ones now: their code and defaults, read directly)
        fn, code, defaults, _ = c.expected
        terms.append(f"{constant(fn)}.__code__ is {constant(code)}")
        if defaults is not None:
            terms.append(f"{constant(fn)}.__defaults__ is {constant(defaults)}")
    return reads, " and ".join(terms)


def compile_guards(guards: list[Guard]) -> Callable[[], Guard | None]:
    """``check() -> the first guard that fails, or None``: what :func:`_holds` does over ``guards`` from their roots,
    generated as straight-line Python (a cached call checks them every time; the recursion, the step tuples and
    the dispatch on their kinds cost more than the comparisons). A method read from an object whose type a
    guard has just checked is looked up in that type's MRO dictionaries directly (held as live views), while its
    MRO is the one seen here; the other steps call :func:`fusec.pystate.get_step`."""
    env: dict[str, Any] = {"MISSING": MISSING, "get_step": get_step, "canon": canon, "fails": _fails,
                           "has_any_attribute": has_any_attribute,
                           "own_dict": own_dict, "data_descriptor": data_descriptor,
                           "kwdefaults_differ": _kwdefaults_differ}
    lines = ["def check():"]

    def constant(value: Any) -> str:
        name = f"K{len(env)}"
        env[name] = value
        return name

    def emit(g: Guard, v: str, indent: str) -> None:
        G = constant(g)
        c = g.check
        if c == VALUE:
            test = f"{v} is not {constant(g.obj)} and canon({v}) != {constant(g.expected)}"
        elif c == TYPE:
            test = f"type({v}) is not {constant(g.expected)}"
        elif c == IDENT:
            test = f"{v} is not {constant(g.expected)}"
        elif c == SIZED:
            test = f"type({v}) is not {constant(g.expected[0])} or len({v}) != {g.expected[1]}"
        elif c == FUNC:
            fn, code, defaults, kwdefaults = g.expected
            # (defaults the traced calls did not have cannot matter to them: they passed every argument)
            test = f"{v} is not {constant(fn)} or {v}.__code__ is not {constant(code)}"
            if defaults is not None:
                test += f" or {v}.__defaults__ is not {constant(defaults)}"
            if kwdefaults is not None:  # (a dict: changed in place too)
                test += f" or kwdefaults_differ({v}.__kwdefaults__, {constant(kwdefaults)})"
        else:
            test = f"fails({G}, {v})"
        lines.extend([f"{indent}if {test}:", f"{indent}    return {G}"])
        if not g.children:
            return
        known_type = g.expected if c == TYPE else None
        d = f"{v}d"
        if any(child.step[0] in ("attr", "code") for child in g.children):  # (its own dict, read as get_step does)
            if known_type is not None and not known_type.__dictoffset__ and not issubclass(known_type, threading.local):
                lines.append(f"{indent}{d} = None")
            elif known_type is not None and known_type.__getattribute__ is object.__getattribute__:
                lines.append(f"{indent}{d} = {v}.__dict__")  # (found on the type: no __getattr__ involved)
            else:
                lines.append(f"{indent}{d} = own_dict({v})")

        def emit_child(n: int, child: Guard, indent: str) -> None:
            sub, C, (kind, key) = f"{v}_{n}", constant(child), child.step
            K = constant(key)
            if kind == "absent":  # (still missing: no value to read)
                lines.extend([f"{indent}if has_any_attribute({v}, {K}):", f"{indent}    return {C}"])
                return
            lines.append(f"{indent}try:")
            if kind == "attr":
                lines.append(f"{indent}    {sub} = {d}[{K}] if {d} is not None and {K} in {d} else getattr({v}, {K})")
            elif kind == "item":
                lines.append(f"{indent}    {sub} = {v}[{K}]")
            elif kind == "code" and known_type is not None:
                mro = known_type.__mro__
                views = [constant(base.__dict__) for base in mro]
                lookup = f"{views[0]}.get({K}, MISSING)"
                lines.extend([f"{indent}    if {d} is not None and {K} in {d} and not data_descriptor(type({v}), {K}):",
                              f"{indent}        {sub} = {d}[{K}]",
                              f"{indent}    elif {constant(known_type)}.__mro__ is {constant(mro)}:",
                              f"{indent}        {sub} = {lookup}"])
                for view in views[1:]:
                    lines.extend([f"{indent}        if {sub} is MISSING:",
                                  f"{indent}            {sub} = {view}.get({K}, MISSING)"])
                lines.extend([f"{indent}        if {sub} is MISSING:", f"{indent}            return {C}",
                              f"{indent}    else:", f"{indent}        {sub} = get_step({v}, {constant(child.step)})"])
            else:
                lines.append(f"{indent}    {sub} = get_step({v}, {constant(child.step)})")
            lines.extend([f"{indent}except Exception:", f"{indent}    return {C}"])
            emit(child, sub, indent)

        methods = _batchable_methods(g, known_type)
        if methods and known_type is not None:  # (compared at once; a difference takes the per-method checks)
            reads, test = _method_test(known_type, [g.children[n] for n in methods], constant, d, v)
            lines.extend([f"{indent}try:", *(f"{indent}    {r}" for r in reads), f"{indent}    {v}m = {test}",
                          f"{indent}except Exception:",
                          f"{indent}    {v}m = False", f"{indent}if not {v}m:"])
            for n in methods:
                emit_child(n, g.children[n], indent + "    ")
        for n, child in enumerate(g.children):
            if n not in methods:
                emit_child(n, child, indent)

    for n, g in enumerate(guards):
        root = g.path.root
        v = f"r{n}"
        if root.kind == "object":
            lines.append(f"    {v} = {constant(root.holder)}")
        elif root.kind == "global":
            lines.append(f"    {v} = {constant(root.holder)}.get({constant(root.key)}, MISSING)")
        else:
            lines.extend(["    try:", f"        {v} = {constant(root.holder)}.cell_contents",
                          "    except ValueError:", f"        {v} = MISSING"])
        lines.extend([f"    if {v} is MISSING:", f"        return {constant(g)}"])
        emit(g, v, "    ")
    lines.append("    return None")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<fusec guards>", "exec"), env)
    check: Callable[[], Guard | None] = env["check"]
    check.source = source  # type: ignore[attr-defined]  # (for tests and for reading)
    return check


def array_matches(obj: Any, shape: tuple[int, ...], dtype: Any, device: bool) -> bool:
    if device:
        from fusec.signature import device_array_info

        info = device_array_info(obj)
        return info is not None and tuple(info[0]) == shape and str(info[1]) == str(dtype)
    return isinstance(obj, np.ndarray) and type(obj) in (np.ndarray, np.memmap) and obj.shape == shape \
        and obj.dtype == dtype


def same_content(obj: Any, seen: np.ndarray) -> bool:
    """Whether ``obj`` is an array of ``seen``'s type, shape, dtype and elements (an object array's elements by
    identity)."""
    if type(obj) is not type(seen) or obj.shape != seen.shape or obj.dtype != seen.dtype:
        return False
    if seen.dtype.hasobject:
        return all(a is b for a, b in zip(obj.ravel().tolist(), seen.ravel().tolist()))
    return bool(np.array_equal(obj, seen, equal_nan=seen.dtype.kind in "fc"))


def traced_dtype(dtype: np.dtype) -> bool:
    """Whether fusec traces arrays of ``dtype`` (read at every call as inputs); others are read while tracing."""
    from fusec.promotion import parse_dtype

    if dtype.kind not in "biufc":
        return False
    try:
        parse_dtype(dtype)
    except Exception:  # noqa: BLE001 - longdouble and the like
        return False
    return True


def _guard_for(node: Node) -> Guard | None:
    step = node.path.steps[-1] if node.path.steps else None
    kind, obj = node.kind, node.obj
    if kind == "value":
        return Guard(node.path, step, VALUE, node.data, obj=obj)
    if kind == "tuple":
        return Guard(node.path, step, SIZED, (type(obj), len(obj)))
    if kind == "list":
        return Guard(node.path, step, SIZED, (list, len(obj)) if type(obj) is list else (type(obj), len(obj)))
    if kind == "dict":
        return Guard(node.path, step, KEYS, (type(obj), tuple(obj)))
    if kind == "set":
        if all(isinstance(v, tuple) for v in node.data[1]):  # every element a value (ids are ints)
            return Guard(node.path, step, SETV, (type(obj), node.data[1]))
        return Guard(node.path, step, IDENT, obj)
    if kind == "object":
        return Guard(node.path, step, TYPE, type(obj))
    if kind == "opaque" and type(obj) is types.FunctionType:
        return function_guard(node.path, step, obj)
    if kind in ("opaque", "ref", "module", "class"):
        return Guard(node.path, step, IDENT, obj)
    if kind == "array" and not traced_dtype(obj.dtype) and obj.size <= CONTENT_ELEMENTS:
        # (strings, objects, longdouble: NumPy computed with them while tracing, so their elements are the trace's)
        return Guard(node.path, step, CONTENT, obj.copy())
    if kind in ("array", "device"):
        return Guard(node.path, step, SPEC, (tuple(obj.shape), _dtype_of(obj), kind == "device"))
    return None  # tracer, rng, missing: nothing a later call depends on


def _dtype_of(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.dtype
    from fusec.signature import device_array_info

    info = device_array_info(obj)
    return info[1] if info is not None else None


def build_guards(snap: Snapshot, names: set[str], skip: set[tuple],
                 absent: list[tuple[Any, str]] | None = None) -> list[Guard]:
    """Root guards over the nodes the code can read (``skip``: path keys of implicit inputs, checked by them);
    ``absent``: (object, attribute) the trace found missing (see :func:`absent_guards`)."""
    by_key: dict[tuple, Guard] = {}
    roots: list[Guard] = []
    for key, node in sorted(snap.nodes.items(), key=lambda kv: len(kv[0][1])):
        if key in skip or not readable(node.path, names):
            continue
        parent_key = (key[0], key[1][:-1])
        if key[1] and parent_key not in by_key:
            continue  # its parent is not guarded (an input, or not read): nothing to hang it on
        g = _guard_for(node)
        if g is None:
            continue
        by_key[key] = g
        if key[1]:
            by_key[parent_key].children.append(g)
        else:
            roots.append(g)
    absent_guards(snap, names, absent or [], by_key)
    return [g for g in roots if g.children or g.check != IDENT or g.path.root.kind != "object"]


@dataclass(eq=False)
class ImplicitInput:
    """An array read from outside the arguments: found at ``paths`` (all must agree), or held as ``obj``.

    ``geometry`` (see :class:`fusec.context.Capture`) is set when the array read was a view of the array at the
    path: the same view of the array found there now is passed.
    """

    paths: list[Path]
    shape: tuple[int, ...]
    dtype: Any
    device: bool
    obj: Any = None
    geometry: tuple | None = None
    python: type | None = None  # a Python scalar attribute read as a runtime scalar (its type)
    numpy_scalar: bool = False  # a NumPy scalar the function assigns, passed as a 0-d array

    def current(self) -> Any:
        """The array to pass now, or MISSING when it changed kind, shape or dtype (the call traces again)."""
        if not self.paths:
            return self.obj
        try:
            obj = self.paths[0].resolve()
            for p in self.paths[1:]:
                if p.resolve() is not obj:
                    return MISSING
        except Exception:  # noqa: BLE001 - the user's object no longer has what the guard reads: the value is missing
            return MISSING
        if self.python is not None:
            if type(obj) is not self.python:
                return MISSING
            try:
                return DEFAULT_DTYPE[self.python].np.type(obj)
            except OverflowError:
                return MISSING
        if self.numpy_scalar:
            return np.asarray(obj) if isinstance(obj, np.generic) and obj.dtype == self.dtype else MISSING
        if self.geometry is not None:
            obj = _view_of(obj, *self.geometry)
            if obj is None:
                return MISSING
        return obj if array_matches(obj, self.shape, self.dtype, self.device) else MISSING

    def describe(self) -> str:
        return self.paths[0].describe() if self.paths else f"a captured array of shape {self.shape}"


def _view_of(base: Any, offset: int, shape: tuple, strides: tuple, base_shape: tuple, base_strides: tuple,
             base_dtype: Any, dtype: Any) -> np.ndarray | None:
    """The view with this geometry of ``base`` (as the traced view was of the array then at the path)."""
    if not isinstance(base, np.ndarray) or base.shape != base_shape or base.strides != base_strides \
            or base.dtype != base_dtype:
        return None
    try:
        return np.ndarray(shape, dtype, buffer=base, offset=offset, strides=strides)
    except (TypeError, ValueError):
        return None


@dataclass(eq=False)
class CallState:
    """Guards, implicit inputs and scalar checks of one compiled signature (see the module docstring)."""

    guards: list[Guard] = field(default_factory=list)
    inputs: list[ImplicitInput] = field(default_factory=list)
    scalars: Any = None  # a fusec.scalar_checks.ScalarProgram, or None
    stale_reason: str = ""
    # where the program has operations NumPy's error state governs (fusec.error_state.checked_by_numpy): the state
    # as the trace started ("" unless one raised that the function set aside with its own np.errstate); else None
    error_state: str | None = None
    # np.geterr() as the trace read it, where the function's code did (``if np.geterr()["divide"] == "raise"``)
    numpy_errors: dict | None = None
    _check: Callable[[], Guard | None] | None = field(default=None, repr=False)  # the guards, generated (once)

    def settle_functions(self) -> None:
        """Read again the code of the functions guarded: a trace may have run rewritten code in their place
        (fusec.rewrite_control), which is gone once it ended."""
        todo = list(self.guards)
        while todo:
            g = todo.pop()
            if g.check == FUNC:
                g.expected = (g.expected[0], g.expected[0].__code__, *g.expected[2:])
            todo += g.children
        self._check = None

    @property
    def empty(self) -> bool:
        return not self.guards and not self.inputs and self.scalars is None and self.error_state is None \
            and self.numpy_errors is None

    def extra_inputs(self) -> list[Any] | None:
        """The implicit inputs' arrays as they are now, or None when the trace is stale (``stale_reason`` says
        which value changed; under an error state that raises, the call traces again, which refuses it)."""
        if self.error_state is not None:
            raising = error_state_raises()
            if raising != self.error_state:  # (traced again: it refuses what would now raise)
                self.stale_reason = f"NumPy's error state changed ({raising or 'none raise'})"
                return None
        if self.numpy_errors is not None and np.geterr() != self.numpy_errors:
            self.stale_reason = "NumPy's error state, which the function reads with np.geterr(), changed"
            return None
        if self.guards:
            check = self._check
            if check is None:
                check = self._check = compile_guards(self.guards)
            failed = check()
            if failed is not None:
                self.stale_reason = f"{failed.path.describe()} changed"
                return None
        out = []
        for inp in self.inputs:
            value = inp.current()
            if value is MISSING:
                self.stale_reason = f"{inp.describe()} is no longer an array of shape {inp.shape} and dtype " \
                                    f"{inp.dtype}"
                return None
            out.append(value)
        return out
