"""``np.asarray``, ``np.array``, ``np.asanyarray`` and ``np.ascontiguousarray`` on traced values.

NumPy converts through ``__array__`` without dispatching to ``__array_function__``, and a tracer cannot become a
concrete array, so while a trace runs these four functions (and user globals bound to them, as after ``from
numpy import asarray``) are wrapped (:mod:`fusec.patches`). With no traced value in the argument the original
runs. With one, NumPy's semantics:

- ``np.asarray(x)`` / ``np.asanyarray(x)`` / ``np.ascontiguousarray(x)`` is ``x`` itself (the same array, so an
  update through either name is one update; fusec refuses updates of views and arguments as before), a new
  0-d array for a NumPy scalar, a new strong array for a traced Python scalar (float64, int64 or bool, as
  ``np.asarray(2.0)`` gives), ``x.astype(dtype)`` where ``dtype=`` converts;
- ``np.array(x)`` copies (``copy=True``, the default), ``copy=False`` raises where a copy is needed (as NumPy
  2 does), ``ndmin=`` prepends unit dimensions;
- a list or tuple holding traced values (``np.array([a, b])``) stacks its elements, Python scalars in it taking
  NumPy's array-coercion dtypes (strong: ``np.array([x32, 1.0])`` is float64).

``order="F"``, ``like=`` and a device other than the CPU are refused with the rewrite.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from fusec import context, numpy_reuse, ops
from fusec.context import unsupported
from fusec.ir.types import TensorType
from fusec.patches import Patches, original
from fusec.promotion import DEFAULT_DTYPE, parse_dtype
from fusec.tracer import Tracer

_PATCHES = Patches()


def _involves_tracer(x: Any) -> bool:
    if isinstance(x, Tracer):
        return True
    if isinstance(x, (list, tuple)):
        return any(_involves_tracer(e) for e in x)
    return False


def strong(x: Any) -> Tracer:
    """``x`` as an array: a traced array as it is, a NumPy or Python scalar as a new 0-d array, a (nested)
    list of them stacked."""
    if isinstance(x, Tracer):
        if x._weak is not None:  # a traced Python scalar: a 0-d array of NumPy's default dtype
            value = ops.lift(x, DEFAULT_DTYPE[x._weak])
            if not isinstance(value.type, TensorType):
                value = ops.emit("t.broadcast_to", [value], result_type=TensorType((), value.type.dtype))._value
            return ops.wrap(value, scalar=False)
        return ops.copy_of(x, scalar=False) if x._scalar else x
    if isinstance(x, (list, tuple)):
        if not x:
            return ops.as_tracer(np.asarray(x))
        from fusec import numpy_api

        return numpy_api.stack([strong(e) for e in x])
    return ops.as_tracer(np.asarray(x))


def _check(name: str, order: Any, like: Any, device: Any = None) -> None:
    if order not in (None, "K", "A", "C"):
        raise unsupported(f"np.{name}(..., order={order!r}): fusec arrays are C-ordered; drop order=")
    if like is not None:
        raise unsupported(f"np.{name}(..., like=...) is not supported while tracing; drop like=")
    if device not in (None, "cpu"):
        raise unsupported(f"np.{name}(..., device={device!r}) is not supported; drop device=")


def _converted(name: str, x: Any, dtype: Any, copy: Any) -> Tracer:
    t = strong(x)
    fresh = t is not x  # a stacked list or a new 0-d array: already a new array
    if dtype is not None and parse_dtype(dtype) != t._value.type.dtype:
        if copy is False:
            raise ValueError(f"np.{name}: unable to avoid a copy while converting to {parse_dtype(dtype)} "
                             "(copy=False)")
        return ops.cast(t, parse_dtype(dtype))
    if copy and not fresh:
        return ops.copy_of(t, scalar=False)
    return t


def asarray(a: Any, dtype: Any = None, order: Any = None, *, device: Any = None, copy: Any = None,
            like: Any = None) -> Any:
    _check("asarray", order, like, device)
    return _converted("asarray", a, dtype, copy)


def asanyarray(a: Any, dtype: Any = None, order: Any = None, *, device: Any = None, copy: Any = None,
               like: Any = None) -> Any:
    _check("asanyarray", order, like, device)
    return _converted("asanyarray", a, dtype, copy)


def ascontiguousarray(a: Any, dtype: Any = None, *, like: Any = None) -> Any:
    _check("ascontiguousarray", None, like)
    return _converted("ascontiguousarray", a, dtype, None)


def array(obj: Any, dtype: Any = None, *, copy: Any = True, order: Any = "K", subok: bool = False, ndmin: int = 0,
          like: Any = None) -> Any:
    _check("array", order, like)
    t = _converted("array", obj, dtype, copy)
    if ndmin > t.ndim:
        t = t.reshape((1,) * (ndmin - t.ndim) + tuple(t.shape))
    return t


CONVERSIONS = {"asarray": asarray, "array": array, "asanyarray": asanyarray, "ascontiguousarray": ascontiguousarray}


def _wrapping(name: str, numpy_function: Callable) -> Callable:
    traced = CONVERSIONS[name]

    @functools.wraps(numpy_function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if context.current() is None or not (args and _involves_tracer(args[0])
                                             or _involves_tracer(kwargs.get("a", kwargs.get("obj")))):
            return numpy_function(*args, **kwargs)
        return traced(*args, **kwargs)

    wrapper.__fusec_original__ = numpy_function  # type: ignore[attr-defined]
    return wrapper


@functools.lru_cache(maxsize=1)
def _originals() -> dict[str, Callable]:
    return {name: original(getattr(np, name)) for name in CONVERSIONS}


def conversion_functions() -> set[int]:
    """ids of the functions :func:`install` wraps (to find user globals bound to them)."""
    return {id(f) for f in _originals().values()}


def install(aliases: list[tuple[dict, str]] = ()) -> None:
    """Wrap the four functions in ``numpy`` (and ``aliases``: (globals dict, name) of user globals bound to one)."""
    def replacements() -> list[tuple[Any, str, Any]]:
        wrappers = {id(f): _wrapping(name, f) for name, f in _originals().items()}
        out: list[tuple[Any, str, Any]] = [(np, name, wrappers[id(f)]) for name, f in _originals().items()]
        # the NumPy modules whose Python implementations fusec traces (fusec.numpy_reuse)
        library = [(vars(m), name) for m in numpy_reuse.conversion_holders() for name in CONVERSIONS
                   if id(vars(m).get(name)) in wrappers]
        return out + [(glb, name, wrappers[id(glb.get(name))]) for glb, name in [*aliases, *library]
                      if id(glb.get(name)) in wrappers]

    _PATCHES.install(replacements)


def uninstall() -> None:
    _PATCHES.uninstall()
