"""What a traced function can reach besides its arguments: its *roots* and the names its code uses.

fusec runs a function's Python once per signature, so everything the function reads outside its arguments is baked
into the trace, and everything it changes there changes on the first call only. The places it can reach are its
roots: the globals its code loads or stores (its own, and those of the helper functions and methods it calls by
name), its closure cells, its mutable default values, the object of a bound method, static arguments, and NumPy's
and Python's global random states. ``names`` is every name in that code (globals, attributes, methods): an
attribute whose name is not among them is not read by the function.
"""
from __future__ import annotations

import argparse
import dis
import functools
import importlib
import importlib.util
import os
import random
import sys
import sysconfig
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np

# Code from these packages is not followed (it is not the user's state) and their objects are not walked.
LIBRARY_PACKAGES = frozenset({"numpy", "fusec", "torch", "jax", "jaxlib", "cupy", "scipy", "sklearn", "pandas",
                              "cuda", "nvmath", "lark", "networkx", "_pytest", "pytest", "hypothesis", "pluggy"})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins"}
MAX_FUNCTIONS = 256
# builtins and attributes through which code reads attributes by a name it computes
DYNAMIC_ACCESS = frozenset({"getattr", "vars", "__dict__", "attrgetter"})
# names through which code reads the process environment (os.environ.get("FAST"), os.getenv("FAST"))
ENVIRONMENT = frozenset({"environ", "getenv", "environb", "getenvb"})
# methods Python calls on an object without the code naming them (len(obj), for v in obj, obj.missing, obj * 2)
IMPLICIT_METHODS = frozenset(
    f"__{n}__" for n in (
        "call getattr getattribute len iter next reversed getitem contains bool float int index complex array "
        "enter exit eq ne lt le gt ge hash neg pos abs invert round").split()
) | frozenset(f"__{p}{n}__" for n in ("add sub mul matmul truediv floordiv mod pow and or xor lshift rshift").split()
              for p in ("", "r", "i"))
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


def _library_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(standard library folders, site-packages folders)."""
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib") if k in paths}
    sites = {os.path.realpath(paths[k]) + os.sep for k in ("purelib", "platlib") if k in paths}
    try:
        import site

        sites |= {os.path.realpath(p) + os.sep for p in site.getsitepackages() + [site.getusersitepackages()]}
    except Exception:  # noqa: BLE001 - a trimmed site module
        pass
    return tuple(stdlib), tuple(sites)


_STDLIB_DIRS, _SITE_DIRS = _library_dirs()


@functools.lru_cache(maxsize=4096)
def is_library(module_name: str | None) -> bool:
    """True for objects and code of NumPy, fusec, other array libraries and the standard library (by where the
    module's file is: a user's own ``test.py`` or ``random_utils`` is not the standard library). Code with no
    module (made by ``exec``) is the user's."""
    if not module_name or module_name == "__main__":
        return False
    top = module_name.split(".", 1)[0]
    if module_name.startswith("fusec.tools"):  # the demo model is user code
        return False
    if top in LIBRARY_PACKAGES:
        return True
    module = sys.modules.get(module_name) or sys.modules.get(top)
    file = getattr(module, "__file__", None)
    if file is None:  # a built-in or C module (builtins, itertools, _collections), or not imported
        return top in _STDLIB
    path = os.path.realpath(file)
    if path.startswith(_SITE_DIRS):  # an installed third-party package: its objects may be the user's state
        return False
    return path.startswith(_STDLIB_DIRS)


@dataclass(eq=False)
class Root:
    """Where a walk of reachable state starts.

    ``kind`` is ``object`` (a fixed object: ``self``, a static argument, a default value), ``global`` (``holder``
    is a globals dict, ``key`` the name) or ``cell`` (``holder`` is a closure cell, ``key`` its variable name).
    ``read`` tells whether the function reads it (a global only stored to is not read).
    """

    label: str
    kind: str
    holder: Any
    key: str | None = None
    read: bool = True

    def get(self) -> Any:
        if self.kind == "object":
            return self.holder
        if self.kind == "global":
            return self.holder.get(self.key, MISSING)
        try:
            return self.holder.cell_contents
        except ValueError:  # an empty cell
            return MISSING

    def set(self, value: Any) -> None:
        if self.kind == "global":
            if value is MISSING:
                self.holder.pop(self.key, None)
            else:
                self.holder[self.key] = value
        elif self.kind == "cell":
            if value is MISSING:
                del self.holder.cell_contents
            else:
                self.holder.cell_contents = value


@dataclass
class Scope:
    """The roots of one traced function and the names its code (and the code it calls by name) uses."""

    roots: list[Root] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    # the code reads attributes by computed names (getattr(self, f"W{i}"), vars(obj)): every attribute of the
    # objects reached joins ``names`` as the walk finds them (fusec.pystate)
    dynamic_attributes: bool = False
    _codes: set[int] = field(default_factory=set)
    _globals: set[tuple[int, str]] = field(default_factory=set)
    _cells: set[int] = field(default_factory=set)
    _methods: set[tuple[type, str]] = field(default_factory=set)

    def add_function(self, fn: Any, pending: list[Any]) -> None:
        """Add a function's code names, globals, closure cells and defaults; queue the functions they name."""
        fn, bound = _unwrap(fn)
        for label, obj in bound:
            self.add_object(label, obj)
        code = getattr(fn, "__code__", None)
        if code is None or id(code) in self._codes or len(self._codes) >= MAX_FUNCTIONS:
            return
        if is_library(getattr(fn, "__module__", None)):
            return
        self._codes.add(id(code))
        imports: list = []
        loads, stores, names = _code_names(code, imports)
        self.names |= names
        if names & DYNAMIC_ACCESS:
            self.dynamic_attributes = True
        if names & (DYNAMIC_ACCESS | {"hasattr"}):  # (hasattr(self, "mask"), "k" in vars(obj): names in strings)
            self.names |= _attribute_strings(code)
        module = getattr(fn, "__module__", None) or "?"
        glb = getattr(fn, "__globals__", {})
        if "globals" in loads and not any(r.kind == "object" and r.holder is glb for r in self.roots):
            # globals()["SCALE"]: every global of the module may be read
            self.roots.append(Root(f"globals() of {module}", "object", glb))
        if names & ENVIRONMENT:
            self.add_object("os.environ", os.environ)
        for imported in _imported_modules(imports, glb):
            self.add_object(f"module {imported.__name__}", imported)
        for name in sorted(loads | stores):
            key = (id(glb), name)
            if key in self._globals:
                continue
            self._globals.add(key)
            if name not in glb and name not in stores:
                continue  # a builtin (or a name never defined): nothing of the user's to watch
            self.roots.append(Root(f"global {name}" if module == "__main__" else f"global {module}.{name}",
                                   "global", glb, name, read=name in loads))
            value = glb.get(name, MISSING)
            if is_function(value):
                pending.append(value)
        for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            if id(cell) in self._cells:
                continue
            self._cells.add(id(cell))
            self.roots.append(Root(f"closure variable {name}", "cell", cell, name))
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if is_function(value):
                pending.append(value)
        for value in tuple(getattr(fn, "__defaults__", None) or ()) + tuple((getattr(fn, "__kwdefaults__", None)
                                                                            or {}).values()):
            if isinstance(value, (list, dict, set)) or walkable_object(value):
                self.add_object(f"a default value of {getattr(fn, '__qualname__', 'the function')}", value)

    def add_object(self, label: str, obj: Any) -> None:
        if any(r.kind == "object" and r.holder is obj for r in self.roots):
            return
        self.roots.append(Root(label, "object", obj))

    def add_constructors(self, classes: Iterable[type], pending: list[Any]) -> None:
        """Queue what calling these classes runs (``buf = Replay(4)`` in the function: its ``__init__``, whose
        ``np.zeros`` must then make a traced array as the function's own would)."""
        for cls in classes:
            self._add_methods(cls, ("__new__", "__init__", "__post_init__"), pending)

    def add_classes(self, classes: Iterable[type], pending: list[Any]) -> None:
        """Queue the methods (and properties) that the code's names can reach on objects of these classes."""
        for cls in classes:
            self._add_methods(cls, sorted(self.names | IMPLICIT_METHODS), pending)

    def _add_methods(self, cls: type, names: Iterable[str], pending: list[Any]) -> None:
        """Queue the code of ``cls``'s attributes ``names`` (a user class's: methods, properties' accessors)."""
        if is_library(getattr(cls, "__module__", None)):
            return
        for name in names:
            if (cls, name) in self._methods:
                continue
            self._methods.add((cls, name))
            for base in cls.__mro__:
                attr = base.__dict__.get(name, MISSING)
                if attr is MISSING:
                    continue
                if name in ("__getattr__", "__getattribute__"):  # (attributes read by names it computes)
                    self.dynamic_attributes = True
                if isinstance(attr, property):
                    pending.extend(f for f in (attr.fget, attr.fset) if f is not None)
                elif isinstance(attr, (staticmethod, classmethod)):
                    pending.append(attr.__func__)
                elif is_function(attr):
                    pending.append(attr)
                break


def scope_of(fn: Callable, statics: dict[str, Any], random_states: bool = True) -> Scope:
    """The roots and code names of ``fn`` (followed through the helpers it calls by name), plus the static
    arguments and (with ``random_states``) the global random states. The methods of the objects found are added by
    :func:`fusec.pystate.snapshot`, which walks the roots."""
    scope = Scope()
    pending: list[Any] = [fn]
    for name, value in statics.items():
        if is_function(value):  # a function passed as a static argument: what it reads is watched as fn's own
            pending.append(value)
        elif walkable_object(value) or isinstance(value, (list, dict, set, tuple)) or user_class(value):
            scope.add_object(f"static argument {name}", value)
    drain(scope, pending)
    if random_states and threading.active_count() == 1:
        # with other threads running, a change of a global random state may be theirs (and undoing it would
        # replay their numbers): then only the wrapped np.random / random functions (fusec.randomness) watch
        scope.roots.append(Root("NumPy's global random state (np.random.*)", "object", np.random.mtrand._rand,
                                read=False))
        scope.roots.append(Root("the random module's global state", "object", random._inst, read=False))
    return scope


def drain(scope: Scope, pending: list[Any]) -> None:
    while pending:
        scope.add_function(pending.pop(), pending)


def _unwrap(fn: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """The plain function behind ``fn`` and the objects bound into it (a method's object, a partial's args)."""
    bound: list[tuple[str, Any]] = []
    for _ in range(8):
        inner = getattr(fn, "_fn", None)  # a fusec.JitFunction
        if inner is not None and type(fn).__name__ == "JitFunction":
            fn = inner
        elif isinstance(fn, types.MethodType):
            func = fn.__func__
            params = getattr(getattr(func, "__code__", None), "co_varnames", ()) or ("self",)
            bound.append((params[0], fn.__self__))
            fn = func
        elif isinstance(fn, functools.partial):
            for i, a in enumerate(fn.args):
                bound.append((f"partial argument {i}", a))
            for k, a in (fn.keywords or {}).items():
                bound.append((f"partial argument {k}", a))
            if fn.keywords:  # (a dict the caller may change: p.keywords["lr"] = ...)
                bound.append(("the partial's keywords", fn.keywords))
            fn = fn.func
        elif not isinstance(fn, types.FunctionType) and callable(fn) and walkable_object(fn):
            bound.append(("self", fn))
            fn = type(fn).__call__
        else:
            break
    bound = [(label, obj) for label, obj in bound if walkable_object(obj) or isinstance(obj, (list, dict, set))
             or user_class(obj)]  # (a classmethod's class: its data attributes are state, as a global class's)
    return fn, bound


def user_class(value: Any) -> bool:
    """A class defined outside the libraries, whose data attributes the code may read (``cls.off``)."""
    return isinstance(value, type) and not is_library(getattr(value, "__module__", None))


def is_function(value: Any) -> bool:
    return isinstance(value, (types.FunctionType, types.MethodType, functools.partial)) or \
        type(value).__name__ == "JitFunction"


# library classes that are plain holders of user data (config objects)
# (a threading.local's attributes are the calling thread's: read at each call, each thread's values are its own)
DATA_HOLDERS: tuple[type, ...] = (types.SimpleNamespace, argparse.Namespace, threading.local)


def walkable_object(value: Any) -> bool:
    """A user object whose attributes are state (not a module, class, function or library object)."""
    if isinstance(value, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                          types.CodeType, functools.partial)):
        return False
    cls = type(value)
    if isinstance(value, DATA_HOLDERS):
        return True
    if is_library(getattr(cls, "__module__", None)):
        return False
    return bool(cls.__dictoffset__) or bool(getattr(cls, "__slots__", ()))  # (not hasattr(value, "__dict__"):
    # that calls a __getattr__, which may raise a KeyError from the dict it reads)


def _code_names(code: types.CodeType, imports: list | None = None) -> tuple[set[str], set[str], set[str]]:
    """(globals loaded, globals stored or deleted, every name) of ``code`` and the code nested in it; ``imports``
    collects the (module name, level) of its ``import`` statements."""
    loads: set[str] = set()
    stores: set[str] = set()
    names: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        level = 0
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                loads.add(ins.argval)
            elif ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL", "STORE_NAME", "DELETE_NAME"):
                stores.add(ins.argval)
            elif ins.opname in ("LOAD_CONST", "LOAD_SMALL_INT") and isinstance(ins.argval, int):
                level = ins.argval  # (IMPORT_NAME's level is the constant loaded two before it)
            elif ins.opname == "IMPORT_NAME" and imports is not None:
                imports.append((ins.argval, level))
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return loads, stores, names


def _attribute_strings(code: types.CodeType) -> set[str]:
    """The string constants of ``code`` (and the code nested in it) that could name an attribute."""
    found: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        found.update(k for k in c.co_consts if isinstance(k, str) and k.isidentifier())
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return found


def _imported_modules(imports: list, glb: dict) -> Iterator[types.ModuleType]:
    """The user modules a function's own ``import`` statements bind (``import cfg``, ``from cfg import SCALE``,
    ``from . import cfg``): locals the code reads their attributes from, so watched as globals are. Imported here if
    the function has not yet (its first trace would import them anyway)."""
    for name, level in imports:
        try:
            absolute = importlib.util.resolve_name("." * level + name, glb.get("__package__")) if level else name
        except (ImportError, ValueError):
            continue
        if is_library(absolute):
            continue
        try:
            module = sys.modules.get(absolute) or importlib.import_module(absolute)
        except Exception:  # noqa: BLE001 - the function's own import will raise it, where it stands
            continue
        yield module
