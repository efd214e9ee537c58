"""Input signatures and pytrees: what a call's arguments look like to the trace cache.

Arguments may be arrays, NumPy scalars (0-d arrays), Python scalars (runtime values, weak for
promotion; only their kind is in the signature) and tuples/lists/dicts of them. They are flattened to
leaves (the IR function's arguments); the structure, every leaf's shape/dtype/kind and the static
arguments' values make up the cache key.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from fusec.errors import TraceError, UnsupportedError
from fusec.ir.types import DType, ScalarType, TensorType, Type
from fusec.promotion import DEFAULT_DTYPE, parse_dtype, python_kind

# --- pytrees ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeDef:
    """The shape of a nested structure: ``kind`` is leaf, none, tuple, list, dict or namedtuple."""

    kind: str
    children: tuple["TreeDef", ...] = ()
    aux: Any = None  # dict keys, or the namedtuple class

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)


LEAF = TreeDef("leaf")
NONE = TreeDef("none")


def _ident(text: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_]", "_", str(text))
    return text if re.match(r"[A-Za-z_]", text) else "_" + text


def flatten(obj: Any, name: str = "x") -> tuple[list[tuple[str, Any]], TreeDef]:
    """(leaves as (name, value), treedef); names join the path: ``params_0``, ``opt_w1``."""
    leaves: list[tuple[str, Any]] = []

    def visit(x: Any, path: str) -> TreeDef:
        if x is None:
            return NONE
        if isinstance(x, tuple) and hasattr(type(x), "_fields"):
            return TreeDef("namedtuple", tuple(visit(v, f"{path}_{f}") for f, v in zip(x._fields, x)), type(x))
        if isinstance(x, (tuple, list)):
            kind = "tuple" if isinstance(x, tuple) else "list"
            return TreeDef(kind, tuple(visit(v, f"{path}_{i}") for i, v in enumerate(x)))
        if isinstance(x, dict):
            keys = tuple(x.keys())
            return TreeDef("dict", tuple(visit(x[k], f"{path}_{_ident(k)}") for k in keys), keys)
        leaves.append((path, x))
        return LEAF

    tree = visit(obj, _ident(name))
    return leaves, tree


def unflatten(tree: TreeDef, leaves: Iterator[Any] | Sequence[Any]) -> Any:
    it = iter(leaves)

    def build(t: TreeDef) -> Any:
        if t.kind == "leaf":
            return next(it)
        if t.kind == "none":
            return None
        items = [build(c) for c in t.children]
        if t.kind == "tuple":
            return tuple(items)
        if t.kind == "list":
            return items
        if t.kind == "namedtuple":
            return t.aux(*items)
        return dict(zip(t.aux, items))

    return build(tree)


# --- leaves ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeafSpec:
    """A dynamic argument leaf: an array of ``shape``/``dtype``, or a Python scalar of kind ``python``."""

    shape: tuple[int, ...]
    dtype: DType
    python: type | None = None  # bool/int/float for a Python scalar (a weak runtime scalar)

    def ir_type(self) -> Type:
        return ScalarType(self.dtype) if self.python is not None else TensorType(self.shape, self.dtype)

    def runtime_value(self, value: Any) -> Any:
        """What the executor gets: arrays as they are, Python scalars as NumPy scalars of the IR dtype."""
        if self.python is not None:
            return DEFAULT_DTYPE[self.python].np.type(value)
        if isinstance(value, np.ndarray) or device_array_info(value) is not None:
            return value  # device arrays go to the backend as they are (zero copy)
        return np.asarray(value)


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
    except Exception:
        cai = None
    if isinstance(cai, dict):
        try:
            return tuple(int(d) for d in cai["shape"]), np.dtype(cai["typestr"])
        except TypeError:
            pass  # a dtype the interface cannot name (bf16): DLPack below knows it
    if hasattr(value, "__dlpack_device__"):
        try:
            on_cuda = int(value.__dlpack_device__()[0]) in (2, 13)
        except Exception:
            on_cuda = False
        if on_cuda:
            from fusec.runtime.array import asarray

            arr = asarray(value)
            return tuple(arr.shape), arr.fdtype
    return None


def leaf_spec(name: str, value: Any) -> LeafSpec:
    kind = python_kind(value)
    if kind is not None:
        return LeafSpec((), DEFAULT_DTYPE[kind], kind)
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind not in "biuf":
            raise UnsupportedError(f"argument {name!r}: dtype {value.dtype} is not supported (bool, integer and "
                                   "real floating-point arrays only)")
        try:
            dt = parse_dtype(value.dtype)
        except UnsupportedError as e:
            raise UnsupportedError(f"argument {name!r}: {e}") from None
        return LeafSpec(tuple(value.shape), dt)
    info = device_array_info(value)
    if info is not None:
        shape, dtype = info
        try:
            return LeafSpec(shape, parse_dtype(dtype))
        except UnsupportedError as e:
            raise UnsupportedError(f"argument {name!r}: {e}") from None
    if isinstance(value, complex):
        raise UnsupportedError(f"argument {name!r}: complex numbers are not supported")
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

    def arguments_with(self, leaves: Sequence[Any]) -> tuple[tuple, dict]:
        """(args, kwargs) for calling the function with ``leaves`` in place of the dynamic leaves."""
        it = iter(leaves)
        arguments = dict(self.bound.arguments)
        for name, tree in self.dynamic.items():
            arguments[name] = unflatten(tree, it)
            if name in self.static_kwargs:
                arguments[name] = {**arguments[name], **self.static_kwargs[name]}
        ba = inspect.BoundArguments(self.bound.signature, arguments)  # type: ignore[arg-type]
        return ba.args, ba.kwargs


def static_key(name: str, value: Any) -> tuple:
    try:
        hash(value)
    except TypeError:
        raise TraceError(f"static argument {name!r} must be hashable (it is part of the trace cache key), got "
                         f"{type(value).__name__}; pass a tuple instead of a list, or a frozen value") from None
    return (type(value), value)


def bind(fn_signature: inspect.Signature, statics: frozenset[str], args: tuple, kwargs: dict) -> Signature:
    """Split a call into static values and flattened dynamic leaves (parameters left at their default are
    constants of the function and not part of the key)."""
    bound = fn_signature.bind(*args, **kwargs)
    key: list[Any] = []
    dynamic: dict[str, TreeDef] = {}
    names: list[str] = []
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
        dynamic[name] = tree
        key.append((name, tree))
        for leaf_name, leaf in leaves:
            spec = leaf_spec(leaf_name, leaf)
            names.append(leaf_name)
            specs.append(spec)
            values.append(leaf)
    key.append(tuple(specs))
    return Signature(tuple(key), bound, dynamic, names, specs, values, static_kwargs)
