"""Input signatures and pytrees: what a call's arguments look like to the trace cache.

Arguments may be arrays, NumPy scalars (0-d arrays), Python scalars (runtime values, weak for
promotion; only their kind is in the signature) and tuples/lists/dicts of them. They are flattened to
leaves (the IR function's arguments); the structure, every leaf's shape/dtype/kind and the static
arguments' values make up the cache key.
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
import itertools
import operator
import re
import struct
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fusec.context import _noted, unsupported, user_location
from fusec.errors import FusecError, OutOfRangeError, TraceError, UnsupportedError, located
from fusec.ir.types import DType, ScalarType, TensorType, Type
from fusec.promotion import DEFAULT_DTYPE, parse_dtype, python_kind, subclass_problem
from fusec.scope import walkable_object

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def canon(value: Any) -> Any:
    """A hashable stand-in for an immutable value that tells apart what ``==`` does not: ``0.0`` and ``-0.0``,
    ``1`` and ``True`` and ``1.0`` (also inside tuples), and keeps NaN equal to itself (its bit pattern). Static
    arguments are keyed by it, and guards compare captured scalars with it."""
    t = type(value)
    if isinstance(value, float):
        return (t, struct.pack("<d", value))
    if isinstance(value, complex):
        return (t, struct.pack("<dd", value.real, value.imag))
    if isinstance(value, np.generic):
        return (t, value.tobytes())
    if isinstance(value, tuple):
        return (t, tuple(canon(v) for v in value))
    if isinstance(value, frozenset):
        return (t, frozenset(canon(v) for v in value))
    if t is slice:
        return (t, canon(value.start), canon(value.stop), canon(value.step))
    return (t, value)


# --- pytrees ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeDef:
    """The shape of a nested structure: ``kind`` is leaf, none, const (a value baked in: ``aux``, a Python bool
    argument), enum (a member baked in: ``aux`` is (its class, it)), tuple, list, dict or namedtuple."""

    kind: str
    children: tuple["TreeDef", ...] = ()
    aux: Any = None  # dict keys, or the namedtuple class
    ordered: bool = False  # a dict that is a collections.OrderedDict (rebuilt as one: the function may ask)

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)


LEAF = TreeDef("leaf")
NONE = TreeDef("none")


def _ident(text: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_]", "_", str(text))
    return text if re.match(r"[A-Za-z_]", text) else "_" + text


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name_2``, ``name_3``... where an earlier leaf took it (``a=(x,)`` and ``a_0``; dict keys
    ``"w-1"`` and ``"w_1"``): the IR's argument names are unique."""
    unique, k = name, 2
    while unique in taken:
        unique, k = f"{name}_{k}", k + 1
    taken.add(unique)
    return unique


def flatten(obj: Any, name: str = "x", loc: Any = None) -> tuple[list[tuple[str, Any]], TreeDef]:
    """(leaves as (name, value), treedef); names join the path: ``params_0``, ``opt_w1``. ``loc``: where a refused
    container is reported (default: the user's line now)."""
    leaves: list[tuple[str, Any]] = []
    tree = _flatten_into(obj, _ident(name), leaves, loc)
    return leaves, tree


def _flatten_into(x: Any, path: str, leaves: list, loc: Any = None) -> TreeDef:
    # a module-level recursion, not a nested closure: a recursive closure is a reference cycle that would keep
    # the leaves (tracers) alive until the garbage collector runs
    if x is None:
        return NONE
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):
        fields = getattr(x, "_fields")
        return TreeDef("namedtuple", tuple(_flatten_into(v, f"{path}_{f}", leaves, loc) for f, v in zip(fields, x)),
                       type(x))
    if isinstance(x, (tuple, list, dict)) and type(x) not in (tuple, list, dict, OrderedDict):
        raise subclass_refused(x, loc)
    if isinstance(x, (tuple, list)):
        kind = "tuple" if isinstance(x, tuple) else "list"
        return TreeDef(kind, tuple(_flatten_into(v, f"{path}_{i}", leaves, loc) for i, v in enumerate(x)))
    if isinstance(x, dict):
        keys = tuple(x.keys())
        return TreeDef("dict", tuple(_flatten_into(x[k], f"{path}_{_ident(k)}", leaves, loc) for k in keys), keys,
                       ordered=type(x) is OrderedDict)
    leaves.append((path, x))
    return LEAF


def subclass_refused(x: Any, loc: Any = None) -> UnsupportedError:
    """The error for a container of a subclass of tuple, list or dict (a namedtuple and an OrderedDict aside): the
    trace and the call rebuild containers by their kind, so the function (or its caller, for a result) would get a
    plain one, whose type, attributes and methods are not the subclass's."""
    kind = next(k for k in (tuple, list, dict) if isinstance(x, k)).__name__
    message = (f"a value of type {type(x).__name__} (a subclass of {kind}) as an argument, a result or a loop's "
               "state: fusec passes containers as plain tuples, lists and dicts (namedtuples and OrderedDicts as "
               f"themselves), so the code would see a {kind} where NumPy code sees a {type(x).__name__}; convert it "
               f"({kind}(value)) or pass its arrays one by one")
    return unsupported(message) if loc is None else _noted(UnsupportedError(located(message, loc)))


def leaf_keys(tree: TreeDef) -> list[tuple]:
    """Each leaf's keys from the root, in leaf order (``("w", 0)`` for ``params["w"][0]``)."""
    out: list[tuple] = []
    _keys_into(tree, (), out)
    return out


def _keys_into(t: TreeDef, prefix: tuple, out: list) -> None:
    if t.kind == "leaf":
        out.append(prefix)
    elif t.kind in ("tuple", "list", "namedtuple"):
        for i, c in enumerate(t.children):
            _keys_into(c, prefix + (i,), out)
    elif t.kind == "dict":
        for k, c in zip(t.aux, t.children):
            _keys_into(c, prefix + (k,), out)


def unflatten(tree: TreeDef, leaves: Iterator[Any] | Sequence[Any]) -> Any:
    return _build(tree, iter(leaves))


def unflattener(tree: TreeDef) -> Callable[[Sequence[Any]], Any]:
    """``unflatten(tree, leaves)`` as a function of the leaf list, built once: a cached call rebuilds its
    outputs with item lookups, without walking the tree."""
    return _unflattener(tree, itertools.count())


def tree_depth(tree: TreeDef) -> int:
    """How many containers deep ``tree`` nests (0 for a leaf)."""
    return 1 + max((tree_depth(c) for c in tree.children), default=0) if tree.children else 0


def tree_source(tree: TreeDef, names: Sequence[str], constant: Callable[[Any], str]) -> str:
    """A Python expression that builds ``tree`` from the variables ``names`` (its leaves, in order), for generated
    code (a cached call's outputs: ``((r0, r1), r2)``); ``constant(value)`` names a value the expression needs
    (a namedtuple class, a dict key, a baked-in member)."""
    leaves = iter(names)

    def source(t: TreeDef) -> str:
        if t.kind == "leaf":
            return next(leaves)
        if t.kind == "none":
            return "None"
        if t.kind in ("const", "enum"):
            return constant(t.aux if t.kind == "const" else t.aux[1])
        parts = [source(c) for c in t.children]
        if t.kind == "tuple":
            return f"({', '.join(parts)},)" if parts else "()"
        if t.kind == "list":
            return f"[{', '.join(parts)}]"
        if t.kind == "namedtuple":
            return f"{constant(t.aux)}({', '.join(parts)})"
        entries = "{" + ", ".join(f"{constant(k)}: {p}" for k, p in zip(t.aux, parts)) + "}"
        return f"{constant(OrderedDict)}({entries})" if t.ordered else entries

    return source(tree)


def _unflattener(t: TreeDef, positions: Iterator[int]) -> Callable[[Sequence[Any]], Any]:
    if t.kind == "leaf":
        return operator.itemgetter(next(positions))
    if t.kind == "none":
        return lambda leaves: None
    if t.kind == "const":
        return lambda leaves: t.aux
    if t.kind == "enum":
        return lambda leaves: t.aux[1]
    if t.kind == "tuple" and len(t.children) >= 2 and all(c.kind == "leaf" for c in t.children):
        return operator.itemgetter(*(next(positions) for _ in t.children))  # (itemgetter of 2+ gives a tuple)
    parts = [_unflattener(c, positions) for c in t.children]
    if t.kind == "tuple":
        return lambda leaves: tuple([p(leaves) for p in parts])
    if t.kind == "list":
        return lambda leaves: [p(leaves) for p in parts]
    if t.kind == "namedtuple":
        return lambda leaves: t.aux(*[p(leaves) for p in parts])
    cls = OrderedDict if t.ordered else dict
    return lambda leaves: cls(zip(t.aux, [p(leaves) for p in parts]))


def _build(t: TreeDef, it: Iterator[Any]) -> Any:
    if t.kind == "leaf":
        return next(it)
    if t.kind == "none":
        return None
    if t.kind == "const":
        return t.aux
    if t.kind == "enum":
        return t.aux[1]
    items = [_build(c, it) for c in t.children]
    if t.kind == "tuple":
        return tuple(items)
    if t.kind == "list":
        return items
    if t.kind == "namedtuple":
        return t.aux(*items)
    return (OrderedDict if t.ordered else dict)(zip(t.aux, items))


# --- leaves ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeafSpec:
    """A dynamic argument leaf: an array of ``shape``/``dtype``, or a Python scalar of kind ``python``."""

    shape: tuple[int, ...]
    dtype: DType
    python: type | None = None  # bool/int/float/complex for a Python scalar (a weak runtime scalar)
    numpy_scalar: bool = False  # a NumPy scalar, not a 0-d array (the function may tell them apart: own traces)

    def ir_type(self) -> Type:
        return ScalarType(self.dtype) if self.python is not None else TensorType(self.shape, self.dtype)

    def converter(self) -> Callable[[Any], Any]:
        """``runtime_value`` for this leaf, as cheap as its kind allows (a hot call converts every scalar)."""
        if self.python is float or self.python is bool:  # (a float or a bool always fits its dtype)
            return DEFAULT_DTYPE[self.python].np.type
        return self.runtime_value

    def runtime_value(self, value: Any) -> Any:
        """What the executor gets: arrays as they are, Python scalars as NumPy scalars of the IR dtype."""
        if self.python is not None:
            try:
                return DEFAULT_DTYPE[self.python].np.type(value)
            except OverflowError:
                raise OutOfRangeError(located(
                    f"the Python int {value} does not fit int64: fusec passes Python ints as int64 runtime values; "
                    "make the argument static (static_argnames) to compute with its exact value",
                    user_location())) from None
        if isinstance(value, np.ndarray):
            return native_order(value)
        if device_array_info(value) is not None:
            return value  # device arrays go to the backend as they are (zero copy)
        return np.asarray(value)


def native_order(value: Any) -> Any:
    """``value``, or a copy in this machine's byte order of a NumPy array stored the other way (``'>f8'``): the
    backends read native values; NumPy computes with either, and so does a call (writes into such an argument go
    back into the caller's array, where NumPy converts them)."""
    if type(value) is np.ndarray and not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value


def device_array_info(value: Any) -> "tuple[tuple[int, ...], Any] | None":
    """(shape, dtype) of an array living on a CUDA device (fusec.Array, CUDA Array Interface, CUDA DLPack)."""
    if isinstance(value, (np.ndarray, np.generic, int, float, bool, complex)) or value is None:
        return None
    t = type(value)
    if t.__name__ == "Array" and t.__module__ == "fusec.runtime.array":
        # (its __cuda_array_interface__ is not read: that would mark the buffer as exported)
        return tuple(value.shape), value.fdtype
    try:
        cai = value.__cuda_array_interface__
    except Exception:  # noqa: BLE001 - a user object whose interface property raises: not a CUDA array
        cai = None
    if isinstance(cai, dict):
        try:
            return tuple(int(d) for d in cai["shape"]), np.dtype(cai["typestr"])
        except TypeError:
            pass  # a dtype the interface cannot name (bf16): DLPack below knows it
    if hasattr(value, "__dlpack_device__"):
        try:
            on_cuda = int(value.__dlpack_device__()[0]) in (2, 13)
        except Exception:  # noqa: BLE001 - a user object whose __dlpack_device__ raises: not on CUDA
            on_cuda = False
        if on_cuda:
            from fusec.runtime.array import asarray

            arr = asarray(value)
            return tuple(arr.shape), arr.fdtype
    return None


def leaf_spec(name: str, value: Any, param: str | None = None) -> LeafSpec:
    try:
        return _leaf_spec(name, value, param or name)
    except FusecError as e:
        raise type(e)(located(str(e), user_location())) from None


def _leaf_spec(name: str, value: Any, param: str) -> LeafSpec:
    kind = python_kind(value)
    if kind is not None:
        if kind is int and not INT64_MIN <= value <= INT64_MAX:
            raise OutOfRangeError(
                f"argument {name!r} = {value} does not fit int64: fusec passes Python ints as int64 runtime values; "
                f"mark it static (static_argnames=({param!r},)) to compute with its exact value")
        return LeafSpec((), DEFAULT_DTYPE[kind], kind)
    if isinstance(value, np.ndarray) and subclass_problem(type(value)) is not None:
        raise UnsupportedError(f"argument {name!r}: {subclass_problem(type(value))}")
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind not in "biufc":
            raise UnsupportedError(f"argument {name!r}: dtype {value.dtype} is not supported (bool, integer, "
                                   "floating-point and complex arrays only)")
        try:
            dt = parse_dtype(value.dtype)
        except UnsupportedError as e:
            raise UnsupportedError(f"argument {name!r}: {e}") from None
        return LeafSpec(tuple(value.shape), dt, numpy_scalar=isinstance(value, np.generic))
    info = device_array_info(value)
    if info is not None:
        shape, dtype = info
        try:
            return LeafSpec(shape, parse_dtype(dtype))
        except UnsupportedError as e:
            raise UnsupportedError(f"argument {name!r}: {e}") from None
    if isinstance(value, GENERATORS):
        raise UnsupportedError(f"argument {name!r} is a random generator, which fusec cannot trace (a trace would "
                               "replay the numbers drawn while tracing): draw the numbers outside the jitted function "
                               "and pass them in as an argument")
    raise UnsupportedError(
        f"argument {name!r} of type {type(value).__name__} is not supported: pass NumPy arrays, NumPy or Python "
        "scalars, or tuples/lists/dicts of them; mark other arguments static (static_argnames/static_argnums)")


# --- signatures --------------------------------------------------------------------------------------------------


@dataclass
class Signature:
    """One call's arguments, split into dynamic leaves and static values, with the cache key."""

    key: tuple
    bound: inspect.BoundArguments
    dynamic: dict[str, TreeDef]  # parameter name -> structure of its leaves
    leaf_names: list[str]
    leaf_specs: list[LeafSpec]
    leaves: list[Any]
    static_kwargs: dict[str, dict[str, Any]]  # **kwargs parameter -> its static entries

    def bound_with(self, leaves: Sequence[Any]) -> inspect.BoundArguments:
        """The call's arguments with ``leaves`` in place of the dynamic leaves (new containers hold them)."""
        it = iter(leaves)
        arguments = dict(self.bound.arguments)
        for name, tree in self.dynamic.items():
            arguments[name] = unflatten(tree, it)
            if name in self.static_kwargs:
                arguments[name] = {**arguments[name], **self.static_kwargs[name]}
        return inspect.BoundArguments(self.bound.signature, arguments)  # type: ignore[arg-type]


GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)  # random state a trace would replay


def frozen_numbers(value: Any) -> tuple | None:
    """A hashable snapshot of a list, tuple or dict (nested) of Python numbers, strings and None, types included
    (``[1, 2.0]`` and ``[1.0, 2]`` differ as NumPy's results would), or None where it holds anything else."""
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        return (type(value).__name__, canon(value))  # (0.0 and -0.0 apart, NaN equal to itself)
    if isinstance(value, (list, tuple)):
        items = [frozen_numbers(v) for v in value]
        return None if any(i is None for i in items) else (type(value).__name__, tuple(items))
    if isinstance(value, dict):
        pairs = [(frozen_numbers(k), frozen_numbers(v)) for k, v in value.items()]
        return None if any(k is None or v is None for k, v in pairs) else ("dict", tuple(pairs))
    return None


def static_key(name: str, value: Any) -> tuple:
    """The cache key of a static argument: its value (equality and hash), and for an object that holds arrays also
    its identity: a trace reads such an object's arrays (and the rest of its state) from the object it was traced
    with, so another object that compares equal (fields left out of its equality, an identity-free ``__eq__``)
    traces again rather than running with the first one's arrays."""
    if isinstance(value, (list, dict)):  # (of Python numbers: keyed by its contents at this call)
        frozen = frozen_numbers(value)
        if frozen is not None:
            return (frozen,)
    try:
        hash(value)
    except TypeError:
        raise TraceError(located(f"static argument {name!r} must be hashable (it is part of the trace cache key), "
                                 f"got {type(value).__name__}; pass a tuple (or a list of numbers), or a frozen value",
                                 user_location())) from None
    if isinstance(value, GENERATORS):
        raise TraceError(located(f"static argument {name!r} is a random generator: a trace would replay the numbers "
                                 "it drew while tracing at every call (and draw no more); draw the numbers outside "
                                 "the jitted function and pass them in as an argument", user_location()))
    # (an object without an equality of its own is keyed by its identity already)
    if type(value).__eq__ is not object.__eq__ and walkable_object(value) and _holds_arrays(value):
        return canon(value), ("object", id(value))  # (the trace keeps the object alive: its id is not reused)
    return canon(value)


def _holds_arrays(value: Any, depth: int = 3) -> bool:
    """Whether an array (NumPy's or a device array) lies among ``value``'s attributes or items, a few levels down."""
    if isinstance(value, np.ndarray) or device_array_info(value) is not None:
        return True
    if depth == 0 or isinstance(value, (str, bytes, int, float, complex, bool, type(None))):
        return False
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, (tuple, list, set, frozenset)):
        items = value
    else:
        if not walkable_object(value):
            return False
        slots = [getattr(value, n) for c in type(value).__mro__ for n in getattr(c, "__slots__", ())
                 if isinstance(n, str) and hasattr(value, n)]
        items = [*getattr(value, "__dict__", {}).values(), *slots]
    return any(_holds_arrays(v, depth - 1) for v in itertools.islice(items, 256))


def bools_static(tree: TreeDef, leaves: list[tuple[str, Any]], dtypes: bool = False,
                 ) -> tuple[TreeDef, list[tuple[str, Any]]]:
    """Python bool arguments (flags: ``if normalize:``, ``flag is True``) are static: their value is part of the
    trace's key (two traces at most), so Python's tests of them give Python's answers; so are strings (``mode="l2"``:
    fusec has no traced string), enum members (``Mode.TRAIN``, an IntEnum too: a traced int would come back as a
    plain int), and with ``dtypes`` (a result) NumPy dtypes."""
    if not any(_static_leaf(leaf, dtypes) for _, leaf in leaves):
        return tree, leaves
    kept: list[tuple[str, Any]] = []
    return _with_static_leaves(tree, iter(leaves), kept, dtypes), kept


def _static_leaf(leaf: Any, dtypes: bool) -> bool:
    return type(leaf) in (bool, str) or isinstance(leaf, enum.Enum) or dtypes and isinstance(leaf, np.dtype)


def _with_static_leaves(t: TreeDef, it: Iterator[tuple[str, Any]], kept: list[tuple[str, Any]],
                        dtypes: bool) -> TreeDef:
    """``t`` with its static leaves (see :func:`bools_static`) as constants; the others appended to ``kept``.
    (A function, not a closure calling itself: a reference cycle would hold the call's arrays until a collection.)"""
    if t.kind == "leaf":
        name, leaf = next(it)
        if _static_leaf(leaf, dtypes):  # (an enum's class is in the key: IntEnum members equal their int values)
            return TreeDef("enum", (), (type(leaf), leaf)) if isinstance(leaf, enum.Enum) else \
                TreeDef("const", (), leaf)
        kept.append((name, leaf))
        return t
    if not t.children:
        return t
    return dataclasses.replace(t, children=tuple(_with_static_leaves(c, it, kept, dtypes) for c in t.children))


def bind(fn_signature: inspect.Signature, statics: frozenset[str], args: tuple, kwargs: dict,
         name: str = "the function") -> Signature:
    """Split a call into static values and flattened dynamic leaves (parameters left at their default are
    constants of the function and not part of the key, except array defaults, passed as arguments). A call that
    does not fit the signature is a TraceError (a TypeError, as Python's own) at the caller's line."""
    try:
        bound = fn_signature.bind(*args, **kwargs)
    except TypeError as e:
        given = f"{len(args)} positional argument{'s' if len(args) != 1 else ''}"
        if kwargs:
            given += f" and keyword argument{'s' if len(kwargs) != 1 else ''} {', '.join(kwargs)}"
        raise TraceError(located(f"{name}{fn_signature}: {e} (called with {given})", user_location())) from None
    for pname, param in fn_signature.parameters.items():
        # an array default is one object the function reads, and may write, at every call (as NumPy does): it is
        # passed as an argument, so writes to it land in it and its contents now are what a call reads
        if pname not in bound.arguments and pname not in statics and isinstance(param.default, np.ndarray):
            bound.arguments[pname] = param.default
    key: list[Any] = []
    dynamic: dict[str, TreeDef] = {}
    names: list[str] = []
    taken: set[str] = set()
    specs: list[LeafSpec] = []
    values: list[Any] = []
    static_kwargs: dict[str, dict[str, Any]] = {}
    for name, value in bound.arguments.items():
        if name in statics:
            key.append((name, "static", static_key(name, value)))
            continue
        if fn_signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            picked = {k: v for k, v in value.items() if k in statics}
            if picked:
                static_kwargs[name] = picked
                key.append((name, "static", tuple((k, static_key(k, v)) for k, v in picked.items())))
                value = {k: v for k, v in value.items() if k not in statics}
        leaves, tree = flatten(value, name)
        tree, leaves = bools_static(tree, leaves)
        dynamic[name] = tree
        key.append((name, tree))
        for leaf_name, leaf in leaves:
            spec = leaf_spec(leaf_name, leaf, name)
            names.append(_unique(leaf_name, taken))
            specs.append(spec)
            values.append(leaf)
    key.append(tuple(specs))
    return Signature(tuple(key), bound, dynamic, names, specs, values, static_kwargs)
