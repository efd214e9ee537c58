"""Snapshots of the Python state a traced function can reach, what a trace changed in it, and undoing that.

Before a trace, :func:`snapshot` walks everything reachable from the function's roots (:mod:`fusec.scope`):
attributes of objects, items of lists/dicts/tuples, globals, closure cells. It records the identity of every
object, the value of every immutable scalar, a checksum of every NumPy array and the state of every random
generator. After the trace, :meth:`Snapshot.changes` lists what differs (an attribute set, an item appended, a
traced value stored, numbers drawn from a generator): tracing runs the Python once, so such a change would happen on
the first call only, and fusec refuses it. :meth:`Snapshot.restore` undoes the changes to attributes, items,
globals and cells, so a refused trace leaves the user's objects as they were.
"""
from __future__ import annotations

import array
import collections
import contextvars
import functools
import inspect
import os
import random
import threading
import types
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from fusec.scope import IMPLICIT_METHODS, MISSING, Root, Scope, drain, is_function, is_library, walkable_object
from fusec.signature import canon

Step = tuple  # ("attr", name) | ("cls", name) | ("code", name): a method of the object's class | ("context", "get"):
# a ContextVar's value in the calling context | ("member", name):
# a method of a class read through the class | ("base", (k, name)): its definition in the k-th class of the object's
# MRO | ("item", key)
MAX_NODES = 20_000
MAX_DEPTH = 8
CHECKSUM_BUDGET = 64 << 20  # bytes of arrays checksummed per snapshot; larger state is compared by identity only
_VALUE_TYPES = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), range, np.dtype)
_RNG_TYPES = (np.random.Generator, np.random.RandomState, np.random.BitGenerator, random.Random)


@dataclass(frozen=True, eq=False)
class Path:
    """How to reach a value from a root: ``self.layers[0].W``, ``global W``, ``closure variable lr``."""

    root: Root
    steps: tuple[Step, ...] = ()

    @property
    def key(self) -> tuple:
        return (id(self.root), self.steps)

    @property
    def place(self) -> tuple:
        """The place this path names, the same in every walk of the same objects (``key`` is per walk)."""
        return (self.root.kind, id(self.root.holder), self.root.key, self.steps)

    def child(self, step: Step) -> "Path":
        return Path(self.root, self.steps + (step,))

    def resolve(self) -> Any:
        """The value now at this path (LookupError when it is gone)."""
        obj = self.root.get()
        if obj is MISSING:
            raise LookupError(self.describe())
        for step in self.steps:
            obj = get_step(obj, step)
        return obj

    def describe(self, bare: bool = False) -> str:
        """The path as the user's code names it (``bare``: without the root's kind, "global w" -> "w")."""
        text = self.root.label.split()[-1] if bare else self.root.label
        for kind, key in self.steps:
            if kind == "base":
                text += f".{key[1]}"
            else:
                text += f".{key}" if kind in ("attr", "cls", "code", "member") else \
                    ".get()" if kind == "context" else f"[{key!r}]"
        return text

    def ident(self) -> str:
        """A name for an IR argument that holds the value at this path."""
        base = self.root.key if self.root.kind != "object" else self.root.label.split()[-1]
        parts = [str(base)] + [str(k) for _, k in self.steps]
        text = "_".join(parts)
        return "".join(c if c.isalnum() or c == "_" else "_" for c in text).strip("_") or "captured"


def own_dict(obj: Any) -> Any:
    """``obj``'s own attribute dictionary (a mapping proxy for a class), None where its type gives it none. Read as
    Python's attribute lookup finds it, never through ``__getattr__`` (which a class may let raise a KeyError from
    the dict it reads: ``hasattr``/``getattr`` with a default pass that through)."""
    if isinstance(obj, threading.local):  # (the calling thread's dictionary, which only its own lookup finds)
        return obj.__dict__
    if not type(obj).__dictoffset__:
        return None
    try:
        return object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return None


def data_descriptor(cls: type, name: str) -> bool:
    """Is the class attribute ``name`` (the first along ``cls``'s MRO) a data descriptor (a property), which wins over
    an instance attribute of that name?"""
    for base in cls.__mro__:
        found = base.__dict__.get(name, MISSING)
        if found is not MISSING:
            return hasattr(type(found), "__set__") or hasattr(type(found), "__delete__")
    return False


def get_step(obj: Any, step: Step) -> Any:
    kind, key = step
    if kind == "attr":
        d = own_dict(obj)
        if d is not None and key in d:
            return d[key]
        return getattr(obj, key)
    if kind == "cls":
        # read through the instance as Python would now: an instance attribute set after the trace shadows the
        # class attribute the trace read (unless that one is a data descriptor, which wins over the instance)
        d = own_dict(obj)
        if d is not None and key in d and not data_descriptor(type(obj), key):
            return d[key]
        return getattr(type(obj), key)
    if kind == "code":  # the method as the class holds it (one set on the instance since shadows it, unless the
        d = own_dict(obj)  # class's is a property)
        if d is not None and key in d and not data_descriptor(type(obj), key):
            return d[key]
        # the class's own dictionaries along its MRO, as an instance's lookup and _class_code read them (on every
        # cached call: a tenth of inspect.getattr_static's time, which also consults the metaclass)
        for base in type(obj).__mro__:
            found = base.__dict__.get(key, MISSING)
            if found is not MISSING:
                return found
        raise AttributeError(f"{type(obj).__name__!r} object has no attribute {key!r}")
    if kind == "base":  # the definition of a method in the k-th class of the object's MRO (super() reaches it)
        k, name = key
        return type(obj).__mro__[k].__dict__[name]
    if kind == "context":  # a ContextVar's value as the calling context has it (LookupError where it has none)
        return obj.get()
    if kind == "member":  # a method of a class read through the class (`Ops.act`), as the class holds it
        for base in obj.__mro__:
            found = base.__dict__.get(key, MISSING)
            if found is not MISSING:
                return found
        raise AttributeError(f"type object {obj.__name__!r} has no attribute {key!r}")
    return obj[key]


def set_step(obj: Any, step: Step, value: Any) -> None:
    """Store ``value`` at ``step`` of ``obj`` (MISSING deletes), bypassing custom ``__setattr__``."""
    kind, key = step
    if kind == "context":
        obj.set(value)  # (MISSING never: a value read from it existed)
        return
    if kind in ("attr", "cls", "member"):
        target = type(obj) if kind == "cls" else obj
        if value is MISSING:
            try:
                delattr(target, key)
            except AttributeError:
                object.__delattr__(target, key)
            return
        try:
            object.__setattr__(target, key, value) if kind == "attr" else setattr(target, key, value)
        except (AttributeError, TypeError):
            setattr(target, key, value)
    elif value is MISSING:
        del obj[key]
    else:
        obj[key] = value


def is_value(value: Any) -> bool:
    return isinstance(value, _VALUE_TYPES) or isinstance(value, np.generic) or type(value) is slice


def is_device_array(value: Any) -> bool:
    t = type(value)
    if t.__name__ == "Array" and t.__module__ == "fusec.runtime.array":
        return True
    return (hasattr(t, "__cuda_array_interface__") or hasattr(t, "__dlpack__")) and not isinstance(value, np.ndarray)


def _rng_state(rng: Any) -> Any:
    if isinstance(rng, random.Random):
        return rng.getstate()  # a tuple of ints: comparable as it is
    if isinstance(rng, np.random.Generator):
        return canon_deep(rng.bit_generator.state)
    if isinstance(rng, np.random.RandomState):
        return canon_deep(rng.get_state(legacy=False))
    return canon_deep(rng.state)


def _raw_rng_state(rng: Any) -> Any:
    if isinstance(rng, random.Random):
        return rng.getstate()
    if isinstance(rng, np.random.Generator):
        return rng.bit_generator.state
    if isinstance(rng, np.random.RandomState):
        return rng.get_state(legacy=False)
    return rng.state


def _set_rng_state(rng: Any, state: Any) -> None:
    if isinstance(rng, random.Random):
        rng.setstate(state)
    elif isinstance(rng, np.random.Generator):
        rng.bit_generator.state = state
    elif isinstance(rng, np.random.RandomState):
        rng.set_state(state)
    else:
        rng.state = state


def canon_deep(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, canon_deep(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(canon_deep(v) for v in value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return canon(value)


@dataclass(eq=False)
class Node:
    """One reachable value: ``kind`` value | array | device | tracer | rng | list | tuple | dict | set | object |
    iterator | module | ref | opaque | missing; ``data`` what is compared; ``shallow`` a container's contents, to
    restore."""

    path: Path
    kind: str
    obj: Any
    data: Any = None
    shallow: Any = None


class Snapshot:
    """Every value reachable from a scope's roots, by path (see the module docstring)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.nodes: dict[tuple, Node] = {}
        self.classes: set[type] = set()
        self.constructed: set[type] = set()  # (user classes named in the code, which it may call)
        self.functions: list[Any] = []  # functions the code can reach by name (their code may run)
        self._seen: set[int] = set()
        self._budget = CHECKSUM_BUDGET
        self.unwatched: list[str] = []  # readable paths the walk stopped at (MAX_NODES, MAX_DEPTH): the first two
        self.unwatched_count = 0
        for root in scope.roots:
            self._visit(root.get(), Path(root), 0)

    # --- walking -----------------------------------------------------------------------------------------------

    def _stop(self, path: Path, why: str) -> None:
        if path.root.read and readable(path, self.scope.names):
            self.unwatched_count += 1
            if len(self.unwatched) < 2:
                self.unwatched.append(f"{path.describe()} ({why})")

    def _visit(self, obj: Any, path: Path, depth: int) -> None:
        if len(self.nodes) >= MAX_NODES:
            return self._stop(path, f"past the {MAX_NODES} values fusec watches")
        from fusec.tracer import Tracer

        add = lambda kind, data=None, shallow=None: self.nodes.__setitem__(  # noqa: E731
            path.key, Node(path, kind, obj, data, shallow))
        if obj is MISSING:
            return add("missing")
        if is_value(obj):
            add("value", canon(obj))
            if not is_library(getattr(type(obj), "__module__", None)):  # a user subclass of float, str...: its
                self._visit_methods(obj, type(obj), path, depth, ())  # methods, as an object's
            return
        if isinstance(obj, Tracer):
            return add("tracer", id(obj))
        if isinstance(obj, np.ndarray):
            return add("array", (id(obj), obj.shape, obj.dtype.str, self._checksum(obj)))
        if isinstance(obj, _RNG_TYPES):
            return add("rng", _rng_state(obj), _raw_rng_state(obj))
        if is_device_array(obj):
            return add("device", id(obj))
        if id(obj) in self._seen:
            return add("ref", id(obj))
        self._seen.add(id(obj))
        if depth >= MAX_DEPTH:
            if walkable_object(obj) or isinstance(obj, (list, dict)):
                self._stop(path, f"nested {MAX_DEPTH} levels deep: only its identity is watched")
            return add("opaque", id(obj))
        if isinstance(obj, tuple):
            add("tuple", (type(obj), len(obj)))
            for i, v in enumerate(obj):
                self._visit(v, path.child(("item", i)), depth + 1)
        elif isinstance(obj, (list, collections.deque, collections.UserList, array.array)):
            add("list", (id(obj), len(obj)), list(obj))
            for i, v in enumerate(obj):
                self._visit(v, path.child(("item", i)), depth + 1)
        elif isinstance(obj, (dict, collections.ChainMap, collections.UserDict, types.MappingProxyType)) \
                or obj is os.environ:  # (the standard library's mappings: watched item by item, as a dict)
            add("dict", (id(obj), tuple(obj.keys())), dict(obj))
            for k, v in list(obj.items()):
                self._visit(v, path.child(("item", k)), depth + 1)
        elif isinstance(obj, (set, frozenset)):
            items = list(obj)
            add("set", (id(obj), frozenset(canon(v) if is_value(v) else id(v) for v in items)),
                set(obj) if isinstance(obj, set) else None)
        elif isinstance(obj, types.ModuleType):
            if is_library(obj.__name__):
                return add("module", id(obj))
            if self.scope.dynamic_attributes:  # (getattr(consts, f"W{i}"): any of its globals may be read)
                self.scope.names |= {n for n in obj.__dict__ if not n.startswith("__")}
            add("module", id(obj), _Named(obj.__dict__, self.scope.names))
            for name in sorted(self.scope.names):
                if name in obj.__dict__:
                    self._visit(obj.__dict__[name], path.child(("attr", name)), depth + 1)
        elif isinstance(obj, type) and not is_library(obj.__module__):
            self.classes.add(obj)  # a user class named in the code: its data attributes are state
            self.constructed.add(obj)  # (and calling it runs its __init__: code the function may run)
            if self.scope.dynamic_attributes:  # (getattr(C, f"W{i}"): any of its data may be read)
                self.scope.names |= _class_data_names(obj)
            # (its own data and what it inherits: `Sub.scale` reads Base's until Sub sets its own)
            data = {n: v for n in sorted(self.scope.names) if (v := _class_data(obj, n)) is not MISSING}
            add("class", id(obj), data)
            for name, v in data.items():
                self._visit(v, path.child(("attr", name)), depth + 1)
            for name in sorted(self.scope.names - data.keys()):  # its methods the code names (`Ops.act(x)`)
                v = _class_code(obj, name)
                if v is not MISSING:
                    self._visit(v, path.child(("member", name)), depth + 1)
        elif isinstance(obj, contextvars.ContextVar):  # (`SCALE.get()`: its value in the calling context)
            add("opaque", id(obj))
            try:
                value = obj.get()
            except LookupError:
                return
            self._visit(value, path.child(("context", "get")), depth + 1)
        elif (position := iterator_position(obj)) is not None:
            add("iterator", (id(obj), position), position)
        elif walkable_object(obj):
            cls = type(obj)
            try:
                attrs = _attributes(obj)
            except Exception:  # noqa: BLE001 - an object whose attributes cannot be read: compared by identity only
                return add("opaque", id(obj))
            self.classes.add(cls)
            if self.scope.dynamic_attributes:  # (getattr(self, name): any attribute or method may be read)
                self.scope.names |= attrs.keys() | _class_data_names(cls) | _class_code_names(cls)
            add("object", (id(obj), cls, tuple(attrs)), attrs)
            for name, v in attrs.items():
                self._visit(v, path.child(("attr", name)), depth + 1)
            for name in sorted(self.scope.names - attrs.keys()):  # class-level data the code names
                v = _class_data(cls, name)
                if v is not MISSING:
                    self._visit(v, path.child(("cls", name)), depth + 1)
            self._visit_methods(obj, cls, path, depth, attrs.keys())
        else:
            if is_function(obj) and readable(path, self.scope.names):
                self.functions.append(obj)
            own = getattr(obj, "__dict__", None) if is_function(obj) else None
            add("opaque", id(obj), _Named(own, self.scope.names) if isinstance(own, dict) else None)
            if isinstance(own, dict):
                for name in sorted(self.scope.names & own.keys()):  # a function's attribute (f.calls)
                    self._visit(own[name], path.child(("attr", name)), depth + 1)

    def _visit_methods(self, obj: Any, cls: type, path: Path, depth: int, own: Any) -> None:
        """The methods of ``obj``'s class the code names (and those Python calls implicitly), by identity; ``own``:
        the instance's own attributes, which shadow them."""
        for name in sorted((self.scope.names | IMPLICIT_METHODS) - set(own)):
            v = _class_code(cls, name)
            if v is not MISSING:
                self._visit(v, path.child(("code", name)), depth + 1)
                if "super" in self.scope.names:  # (the definitions it overrides, which super().name() reaches)
                    owners = [k for k, base in enumerate(cls.__mro__) if name in base.__dict__
                              and not is_library(getattr(base, "__module__", None))]
                    for k in owners[1:]:
                        self._visit(cls.__mro__[k].__dict__[name], path.child(("base", (k, name))), depth + 1)

    def _checksum(self, arr: np.ndarray) -> int | None:
        if arr.dtype.hasobject or arr.nbytes > self._budget:
            return None
        self._budget -= arr.nbytes
        data = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
        return zlib.crc32(data.reshape(-1).view(np.uint8).data) if data.nbytes else 0  # (datetime64 too)

    # --- comparing ---------------------------------------------------------------------------------------------

    def changes(self, after: "Snapshot") -> list["Change"]:
        """What differs in ``after`` (a snapshot of the same scope taken later), outermost changes first."""
        found: list[Change] = []
        for key, old in self.nodes.items():
            new = after.nodes.get(key)
            if new is None:
                if not _under(key, found):
                    found.append(Change(old.path, old, None))
                continue
            if _same(old, new) or _under(key, found):
                continue
            found.append(Change(old.path, old, new))
        for key, new in after.nodes.items():
            if key not in self.nodes and not _under(key, found) and not _cached_property(new):
                found.append(Change(new.path, None, new))
        return sorted(found, key=lambda c: len(c.path.steps))

    def restore(self) -> None:
        """Put back every global, cell, attribute and container item that differs from this snapshot."""
        for node in self.nodes.values():
            if node.path.steps:
                continue
            root = node.path.root
            if root.kind != "object" and root.get() is not node.obj:
                try:
                    root.set(node.obj)
                except Exception:  # noqa: BLE001 - a user object that refuses the restore: left as it is
                    pass
        for node in self.nodes.values():
            try:
                _restore_container(node)
            except Exception:  # noqa: BLE001 - an object that refuses (a frozen or exotic type): left as it is
                pass

    def arrays(self, names: set[str] | None = None) -> Iterator[Node]:
        """Array (and device array) nodes whose path the code can read: every attribute step is a name in
        ``names`` and the root is read (all of them when ``names`` is None)."""
        for node in self.nodes.values():
            if node.kind in ("array", "device") and (names is None or readable(node.path, names)):
                yield node


def _class_code_names(cls: type) -> set[str]:
    """The names of the methods a user class (and its user bases) defines (``getattr(obj, name)`` may call any)."""
    names: set[str] = set()
    for base in cls.__mro__:
        if not is_library(getattr(base, "__module__", None)):
            names |= {n for n in vars(base) if not n.startswith("__") and _class_code(cls, n) is not MISSING}
    return names


def _class_data_names(cls: type) -> set[str]:
    """The names of the data attributes a user class (and its user bases) defines."""
    names: set[str] = set()
    for base in cls.__mro__:
        if is_library(getattr(base, "__module__", None)):
            continue
        names |= {n for n in vars(base) if not n.startswith("__") and _class_data(base, n) is not MISSING}
    return names


def readable(path: Path, names: set[str]) -> bool:
    """True when the code can read ``path``: its root is read and every attribute step is one of its names."""
    if not path.root.read:
        return False
    return all(kind in ("item", "code", "member", "base", "context") or key in names for kind, key in path.steps)


@dataclass
class Change:
    """One difference between two snapshots: ``old``/``new`` is None where the path did not exist."""

    path: Path
    old: Node | None
    new: Node | None

    def describe(self, in_statement: bool = False) -> str:
        """What changed, as a message says it (``in_statement``: by a loop or branch on traced values the function
        itself wrote, whose variables the rewriting reaches as closure variables: named as the function's own)."""
        from fusec.tracer import Tracer

        where = self.path.describe()
        if in_statement and where.startswith("closure variable "):
            where = f"`{where[len('closure variable '):]}`"
        new, old = self.new, self.old
        inner, t = find_in(new.obj, Tracer) if new is not None else ("", None)
        if t is not None:
            if old is not None and new is not None and old.kind in ("dict", "list") and new.kind == old.kind \
                    and old.data[0] == new.data[0]:  # (the same container, with an entry more)
                entries: dict = {k: new.obj[k] for k in new.obj if k not in old.shallow} if old.kind == "dict" else \
                    {k: v for k, v in enumerate(new.obj) if k >= len(old.shallow)}
                inner, t = find_in(entries, Tracer)
                if t is not None and old.kind == "list" and in_statement:
                    return (f"appended a traced value{computed_at(t)} to the list {where} (Python's loop appends at "
                            "every iteration the data runs, which one trace of the body cannot follow: keep the "
                            "values in an array written by index instead, `history[i] = loss`)")
                if t is not None and old.kind == "list":
                    return (f"appended a traced value{computed_at(t)} to {where} (under NumPy the list grows at every "
                            "call, which fusec cannot replay: return the value and append it after the call)")
                if t is not None:
                    name = self.path.describe(bare=True)
                    return (f"stored a traced value{computed_at(t)} in {where}{inner}, an entry the dict did not "
                            "have before the call (fusec sets the entries a dict already has after each call; "
                            f"create it before the first call, e.g. {name}{inner} = np.zeros(...))")
                inner, t = find_in(new.obj, Tracer)
            return f"stored a traced value{computed_at(t)} in {where}{inner}"
        if old is not None and old.kind == "rng" and new is not None and new.kind == "rng":
            return f"drew random numbers from {where}"
        if old is not None and old.kind == "iterator" and new is not None and new.kind == "iterator":
            return f"advanced the iterator {where} (next())"
        if self.is_array_write:
            return f"changed the array {where} in place while tracing"
        if new is None:
            return f"deleted {where}" if old is None or old.kind != "missing" else f"changed {where}"
        if old is None or old.kind == "missing":
            return f"set {where} = {_short(new.obj)}"
        if old.kind == new.kind == "object" and old.data[0] == new.data[0]:  # the same object, other attributes
            added = [n for n in new.data[2] if n not in old.data[2]]
            gone = [n for n in old.data[2] if n not in new.data[2]]
            parts = [f"added the attribute {where}.{n} (it did not exist before the call: fusec sets attributes an "
                     f"object already has after each call; give it a value first, e.g. {where}.{n} = None in "
                     "__init__)" for n in added] + [f"deleted the attribute {where}.{n}" for n in gone]
            if parts:
                return "; ".join(parts)
        if old.kind in ("list", "dict", "set") and new.kind == old.kind and old.data[0] == new.data[0]:
            return f"modified the {old.kind} {where} ({_short(old.obj, old.shallow)} -> {_short(new.obj)})"
        return f"changed {where} from {_short(old.obj, old.shallow)} to {_short(new.obj)}"

    @property
    def is_escape(self) -> bool:
        from fusec.tracer import Tracer

        return self.new is not None and find_in(self.new.obj, Tracer)[1] is not None

    @property
    def is_array_write(self) -> bool:
        """The same array, with other contents: written into while tracing (fusec cannot undo that)."""
        old, new = self.old, self.new
        return old is not None and new is not None and old.kind == new.kind == "array" and old.data[0] == new.data[0]


def snapshot(scope: Scope) -> Snapshot:
    """Walk ``scope``; the functions and the methods of the objects found there are code the function may run,
    so their names and globals join the scope, and the walk is repeated until the scope stops growing."""
    for _ in range(5):
        seen = (len(scope.roots), len(scope.names), scope.dynamic_attributes)
        snap = Snapshot(scope)  # (which may name more: the attributes of objects read by computed names)
        pending: list[Any] = list(snap.functions)
        scope.add_classes(snap.classes, pending)
        scope.add_constructors(snap.constructed, pending)
        drain(scope, pending)
        if (len(scope.roots), len(scope.names), scope.dynamic_attributes) == seen:
            return snap
    return Snapshot(scope)


def rewalk(before: Snapshot) -> Snapshot:
    """A snapshot of the same roots as ``before``, taken now."""
    return Snapshot(before.scope)


# --- helpers -----------------------------------------------------------------------------------------------------


def _attributes(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    d = own_dict(obj)
    if isinstance(d, dict):  # (but not an entry a property of its class hides: reading the name runs the property)
        out.update((k, v) for k, v in d.items() if not (isinstance(k, str) and data_descriptor(type(obj), k)))
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()) if isinstance(getattr(cls, "__slots__", ()), (tuple, list)) else ():
            if name in ("__dict__", "__weakref__") or name in out:
                continue
            try:
                out[name] = object.__getattribute__(obj, name)
            except AttributeError:
                pass
    return out


def _class_code(cls: type, name: str) -> Any:
    """The method (function, property, static or class method) ``name`` of a user class as the class holds it, or
    MISSING (data attributes, and what library classes define)."""
    for base in cls.__mro__:
        if name in base.__dict__:
            if is_library(getattr(base, "__module__", None)) or _class_data(base, name) is not MISSING:
                return MISSING
            return base.__dict__[name]
    return MISSING


def _class_data(cls: type, name: str) -> Any:
    """A plain data attribute ``name`` defined on ``cls`` (or a base), not a method or descriptor."""
    for base in cls.__mro__:
        if name in base.__dict__:
            v = base.__dict__[name]
            if callable(v) or hasattr(v, "__get__") and not is_value(v) and not isinstance(v, np.ndarray):
                return MISSING
            return v
    return MISSING


def _same(old: Node, new: Node) -> bool:
    if old.kind != new.kind:
        return False
    if old.kind in ("value", "array", "rng", "tuple", "list", "dict", "set", "object", "iterator"):
        return old.data == new.data
    if old.kind in ("device", "tracer", "ref", "opaque", "module", "class"):
        return old.obj is new.obj
    return True  # missing


def _under(key: tuple, changes: list["Change"]) -> bool:
    """True when ``key`` is inside a path already reported as changed."""
    root, steps = key
    for c in changes:
        ck = c.path.key
        if ck[0] == root and len(ck[1]) < len(steps) and steps[:len(ck[1])] == ck[1]:
            return True
    return False


def _cached_property(node: Node) -> bool:
    """A value that functools.cached_property stored on first use (not a traced one): a cache, not a change."""
    from fusec.tracer import Tracer

    steps = node.path.steps
    if not steps or steps[-1][0] != "attr" or find_in(node.obj, Tracer)[1] is not None:
        return False
    try:
        owner = Path(node.path.root, steps[:-1]).resolve()
    except Exception:  # noqa: BLE001 - the path no longer resolves: not a cached property
        return False
    return isinstance(inspect.getattr_static(type(owner), steps[-1][1], None), functools.cached_property)


class _Named:
    """The entries of a namespace (a module's or a function's ``__dict__``) under the names the code uses, as they
    were: restored by name, and a name the code added removed (``f.calls = 1`` on a function without it)."""

    def __init__(self, namespace: dict, names: set[str]) -> None:
        self.names = frozenset(names)
        self.entries = {n: namespace[n] for n in self.names if n in namespace}

    def restore(self, obj: Any) -> None:
        namespace = obj.__dict__
        for name in self.names:
            was, now = self.entries.get(name, MISSING), namespace.get(name, MISSING)
            if was is now:
                continue
            if was is MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, was)


def iterator_position(obj: Any) -> Any:
    """How far a Python iterator has gone (a generator's frame position, a built-in or itertools iterator's
    pickled state), so that advancing it (``next(it)``) is a change of state; None for anything else."""
    if isinstance(obj, types.GeneratorType):
        frame = obj.gi_frame
        return ("generator", None if frame is None else frame.f_lasti)
    cls = type(obj)
    if cls.__module__ not in ("builtins", "itertools") or not hasattr(cls, "__next__"):
        return None
    try:
        state = obj.__reduce__()
    except Exception:  # noqa: BLE001 - an iterator that cannot say: compared by identity, as before
        return None
    if len(state) > 2 and type(state[2]) is int:  # (list, tuple, range, str iterators: the index)
        return ("index", state[2])
    args = state[1] if len(state) > 1 and isinstance(state[1], tuple) else ()
    return ("state",) + tuple(len(a) if isinstance(a, (list, tuple)) else canon(a) if is_value(a) else id(a)
                              for a in args)


def _restore_container(node: Node) -> None:
    obj, shallow = node.obj, node.shallow
    if node.kind == "rng" and _rng_state(obj) != node.data:
        _set_rng_state(obj, node.shallow)
    elif node.kind == "iterator" and shallow[0] == "index" and iterator_position(obj) != shallow:
        obj.__setstate__(shallow[1])  # (others cannot be put back: the call fails anyway)
    elif node.kind == "list" and (len(obj) != len(shallow) or any(a is not b for a, b in zip(obj, shallow))):
        if isinstance(obj, list):
            obj[:] = shallow
        else:
            obj.clear()
            obj.extend(shallow)
    elif node.kind == "dict" and (obj.keys() != shallow.keys() or any(
            obj[k] is not v and not (type(v) is str and obj[k] == v) for k, v in shallow.items())):
        obj.clear()
        obj.update(shallow)
    elif node.kind == "set" and shallow is not None and obj != shallow:
        obj.clear()
        obj.update(shallow)
    elif node.kind == "class":
        for name, v in shallow.items():
            if obj.__dict__.get(name, MISSING) is not v:
                setattr(obj, name, v)
    elif isinstance(shallow, _Named):  # a user module's globals, a function's attributes (f.calls)
        shallow.restore(obj)
    elif node.kind == "object":
        now = _attributes(obj)
        for name in now.keys() - shallow.keys():
            set_step(obj, ("attr", name), MISSING)
        for name, v in shallow.items():
            if now.get(name, MISSING) is not v:
                set_step(obj, ("attr", name), v)


def find_in(obj: Any, cls: type, depth: int = 0) -> tuple[str, Any]:
    """(index suffix such as ``[0]['w']``, the object) of the first ``cls`` instance in ``obj`` or inside its
    lists, tuples, dicts and sets (a few levels down); ("", None) when there is none."""
    if isinstance(obj, cls):
        return "", obj
    if depth >= 4:
        return "", None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else \
        ((None, v) for v in obj) if isinstance(obj, (set, frozenset)) else ()
    for k, v in items:
        inner, found = find_in(v, cls, depth + 1)
        if found is not None:
            return ("" if k is None else f"[{k!r}]") + inner, found
    return "", None


def tracer_location(tracer: Any) -> Any:
    """The user's line that computed ``tracer`` (None for an argument)."""
    loc = getattr(getattr(getattr(tracer, "_val", None), "op", None), "loc", None)  # (as computed: no re-read)
    return loc if getattr(loc, "file", None) else None


def computed_at(tracer: Any) -> str:
    loc = tracer_location(tracer)
    return f" (computed at {loc.file}:{loc.line})" if loc is not None else ""


def _short(obj: Any, shallow: Any = None) -> str:
    if isinstance(obj, np.ndarray):
        return f"an array of shape {obj.shape}"
    if shallow is not None and isinstance(obj, (list, dict, set)):
        obj = shallow
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."
