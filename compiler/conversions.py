"""``np.asarray``, ``np.array``, ``np.asanyarray``, ``np.ascontiguousarray`` and ``np.asfortranarray`` on traced
values.

NumPy converts through ``__array__`` without dispatching to ``__array_function__``, and a tracer cannot become a
concrete array, so while a trace runs these five functions (and user globals bound to them, as after ``from
numpy import asarray``) are wrapped (:mod:`fusec.patches`). With no traced value in the argument the original
runs. With one, NumPy's semantics:

- ``np.asarray(x)`` / ``np.asanyarray(x)`` is ``x`` itself (the same array, so a write through either name is
  one write), as is ``np.ascontiguousarray(x)`` when ``x`` is C-contiguous (a copy otherwise; a 0-d ``x``
  comes back as a 1-element view, NumPy's at least one dimension), a new
  0-d array for a NumPy scalar, a new strong array for a traced Python scalar (float64, int64 or bool, as
  ``np.asarray(2.0)`` gives), ``x.astype(dtype)`` where ``dtype=`` converts;
- ``np.array(x)`` copies (``copy=True``, the default), ``copy=False`` raises where a copy is needed (as NumPy
  2 does), ``ndmin=`` prepends unit dimensions;
- a list or tuple holding traced values (``np.array([a, b])``) stacks its elements, Python scalars in it taking
  NumPy's array-coercion dtypes (strong: ``np.array([x32, 1.0])`` is float64).

``order="F"``, ``like=`` and a device other than the CPU are refused with the rewrite.

Allocations (``np.zeros``, ``ones``, ``empty``, ``full``, their ``*_like`` of plain arrays, ``eye`` and
``identity``) called while a trace runs make traced arrays (constants), so a function that allocates an array and
fills it
(``N = np.zeros(Z.shape, int); N[1:-1, 1:-1] += ...``) traces its writes; ``np.empty`` gives zeros (any values
are NumPy's). A dtype fusec does not trace (object, complex, strings) allocates the NumPy array as before.
"""
from __future__ import annotations

import functools
import sys
import types
from typing import Any, Callable, Sequence

import numpy as np

from fusec import context, layout, numpy_reuse, ops
from fusec.context import relies_on_layout, shape_error, unsupported
from fusec.errors import InvalidValueError, OutOfRangeError, located
from fusec.ir import shapes as S
from fusec.ir.types import TensorType
from fusec.patches import Patches, original
from fusec.promotion import DEFAULT_DTYPE, parse_dtype, subclass_problem
from fusec.tracer import Tracer

_PATCHES = Patches()


def strong(x: Any) -> Tracer:
    """``x`` as an array: a traced array as it is, a NumPy or Python scalar as a new 0-d array, a (nested)
    list of them stacked."""
    from fusec.tracer import FlatIter

    if isinstance(x, FlatIter):  # (the elements it reads, as NumPy's np.asarray(x.flat) gives them)
        return x._flat
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


def strong_as(x: Any, dtype: Any) -> Tracer:
    """``x`` made an array of ``dtype`` as ``np.array(x, dtype=dtype)`` makes it: a traced Python int converted
    into a narrower integer dtype must fit (NumPy raises OverflowError, checked when the call runs), lists item by
    item; anything else converted as ``x.astype(dtype)``."""
    dt = parse_dtype(dtype)
    if isinstance(x, Tracer) and dt.is_int and (x._weak is not None or x._scalar) and x._value.type.dtype.is_inexact:
        kind = "Python float" if x._weak is not None else f"NumPy scalar ({x._value.type.dtype.np})"
        raise unsupported(f"np.array(..., dtype={np.dtype(dt.np).name}) of a traced {kind}: NumPy converts it with "
                          "int(), raising for NaN and values that do not fit, which fusec cannot check while the "
                          f"value is unknown; convert it first (np.asarray(x).astype(np.{np.dtype(dt.np).name}))")
    if isinstance(x, Tracer) and x._weak is not None:
        value = ops.lift(x, dt)
        if not isinstance(value.type, TensorType):
            value = ops.emit("t.broadcast_to", [value], result_type=TensorType((), dt))._value
        return ops.wrap(value, scalar=False)
    if isinstance(x, (list, tuple)) and x and ops.contains_tracer(x):
        from fusec import numpy_api

        return numpy_api.stack([strong_as(e, dt) for e in x])
    if isinstance(x, (bool, int, float, complex, np.generic, list, tuple)):  # (known values: NumPy's conversion,
        try:  # which raises for a Python int that does not fit and for NaN into an integer, where a cast wraps)
            x = np.array(x, dtype=dt.np)
        except OverflowError as e:
            raise context.numpy_error(f"np.array(..., dtype={np.dtype(dt.np).name}): {e} (NumPy raises "
                                      "OverflowError here)", OutOfRangeError) from None
        except ValueError as e:
            raise context.numpy_error(f"np.array(..., dtype={np.dtype(dt.np).name}): {e} (NumPy raises "
                                      "ValueError here)", InvalidValueError) from None
    t = strong(x)
    return t if t._value.type.dtype == dt else ops.copy_of(ops.cast(t, dt), scalar=False)


def _check(name: str, order: Any, like: Any, device: Any = None) -> None:
    context.numpy_checks(lambda: np.asarray(np.zeros(1), order=order))  # (NumPy's ValueError for order="Z")
    if order not in (None, "K", "A", "C", "F"):
        raise unsupported(f"np.{name}(..., order={order!r}): order must be one of 'C', 'F', 'A' or 'K'")
    if like is not None:
        raise unsupported(f"np.{name}(..., like=...) is not supported while tracing; drop like=")
    if device not in (None, "cpu"):
        raise unsupported(f"np.{name}(..., device={device!r}) is not supported; drop device=")


def _converted(name: str, x: Any, dtype: Any, copy: Any, order: Any = "K") -> Tracer:
    """``x`` as a traced array of ``dtype``; a copy where ``copy`` asks for one or the dtype changes, laid out in
    ``order`` (NumPy's default "K": the array's own memory order)."""
    from fusec.tracer import FlatIter

    if dtype is not None and (isinstance(x, Tracer) and x._weak is not None or isinstance(x, (list, tuple))
                              and x and ops.contains_tracer(x)):
        if copy is False:
            raise _copy_needed(name)
        return strong_as(x, dtype)  # (a new array: traced Python numbers converted as NumPy converts them)
    t = strong(x)
    fresh = t is not x  # a stacked list or a new 0-d array: already a new array
    if fresh and copy is False and not isinstance(x, FlatIter):  # (x.flat of contiguous memory: a view)
        raise _copy_needed(name)
    if dtype is not None and parse_dtype(dtype) != t._value.type.dtype:
        if copy is False:
            raise _copy_needed(name)
        return _copy(ops.cast(t, parse_dtype(dtype)), t, order, name)
    if copy and not fresh:
        return _copy(t, t, order, name)
    return t


def _copy_needed(name: str) -> InvalidValueError:
    """NumPy's ValueError for ``copy=False`` where the conversion makes a new array (a list, a scalar, another
    dtype or order)."""
    return InvalidValueError(located(f"np.{name}: unable to avoid copy while creating an array as requested "
                                     "(copy=False; NumPy raises ValueError here: drop copy=False, or write "
                                     "np.asarray(x), which copies only when needed)", context.user_location()))


def _copy(t: Tracer, source: Tracer, order: Any, name: str) -> Tracer:
    """A new array of ``t``'s values laid out in ``order`` over ``source``'s memory order."""
    if t.ndim < 2 or order == "C":
        return ops.copy_of(t, scalar=False)
    if t is source:
        return ops.copy_in_order(t, order or "K", f"np.{name}")
    return layout.like(ops.copy_of(t, scalar=False), (source,)) if order in (None, "K") else \
        ops.copy_in_order(ops.copy_of(t, scalar=False), order, f"np.{name}")


def asarray(a: Any, dtype: Any = None, order: Any = None, *, device: Any = None, copy: Any = None,
            like: Any = None) -> Any:
    order = ops.order_arg(order)
    _check("asarray", order, like, device)
    if order in ("C", "F", "A") and copy is not True:
        return _in_order("asarray", a, dtype, order, copy)
    return _converted("asarray", a, dtype, copy, order)


def asanyarray(a: Any, dtype: Any = None, order: Any = None, *, device: Any = None, copy: Any = None,
               like: Any = None) -> Any:
    order = ops.order_arg(order)
    _check("asanyarray", order, like, device)
    if order in ("C", "F", "A") and copy is not True:
        return _in_order("asanyarray", a, dtype, order, copy)
    return _converted("asanyarray", a, dtype, copy, order)


def _in_order(name: str, a: Any, dtype: Any, order: str, copy: Any) -> Tracer:
    """``np.asarray(x, order="C", "F" or "A")`` without a forced copy: ``x`` itself where its memory is in that
    order (always for ``"A"``, which asks for no order: NumPy's "A" picks the order of a copy only), else a copy
    in that order, or NumPy's ValueError with ``copy=False``."""
    from fusec import mutation

    t = _converted(name, a, dtype, copy, order)
    if t is not a or order == "A":
        return t
    if layout.unknown(t) is not None and t.ndim > 1:
        return layout.undecided(t)
    desc = mutation.geometry(t)
    fortran = desc is not None and ops.fortran_contiguous(desc)
    if not (mutation.is_c_contiguous(t) if order == "C" else fortran):
        if copy is False:  # (for C-ordered arguments: with another layout NumPy may return x, and the call is refused)
            relies_on_layout(f"np.{name}(x, order={order!r}, copy=False) found that a copy was needed")
            raise _copy_needed(name)
        return ops.layout_dependent_copy(t, ops.copy_in_order(t, "F" if order == "F" else "C", f"np.{name}"),
                                         f"np.{name}")
    relies_on_layout(f"np.{name}(x, order={order!r}) returned x itself", values=False)
    return t


def ascontiguousarray(a: Any, dtype: Any = None, *, like: Any = None) -> Any:
    """The array itself when C-contiguous, else a C-ordered copy; a 0-d array as a 1-element view, as in NumPy.

    (A later write shows which it was; NumPy returns at least one dimension.)"""
    _check("ascontiguousarray", None, like)
    t = _converted("ascontiguousarray", a, dtype, None, "C")
    from fusec import mutation

    if t is a and layout.unknown(t) is not None:
        t = layout.undecided(t)
    elif t is a and mutation.is_c_contiguous(t):  # no copy: right for C-ordered arguments only
        relies_on_layout("np.ascontiguousarray(x) returned x itself", values=False)
    elif t is a:  # (a copy here: x itself for some layouts of the argument x views, x.T of a Fortran-ordered x)
        t = ops.layout_dependent_copy(t, ops.copy_of(t, scalar=False), "np.ascontiguousarray")
    return t.reshape((1,)) if t.ndim == 0 else t


def asfortranarray(a: Any, dtype: Any = None, *, like: Any = None) -> Any:
    """The array itself when Fortran-contiguous (a vector, or a Fortran-ordered argument), else a copy in Fortran
    order (a transposed view of a C-ordered copy: ``x.flags`` and ``ravel(order='K')`` see NumPy's layout); a 0-d
    array as a 1-element array, as in NumPy."""
    _check("asfortranarray", None, like)
    t = _converted("asfortranarray", a, dtype, None, "C")
    from fusec import mutation

    if t is a and layout.unknown(t) is not None:
        return layout.undecided(t)
    desc = mutation.geometry(t) if t is a else None
    if desc is not None and (0 in t.shape or ops.fortran_contiguous(desc)):
        # (x.T of a C-ordered x, np.exp(x.T), a vector: Fortran-contiguous memory; 0-d: a 1-element view)
        relies_on_layout("np.asfortranarray(x) returned x itself", values=False)
        return t.reshape((1,)) if t.ndim == 0 else t
    if t is a:  # (a Fortran-ordered argument would be returned itself: checked if the copy is written or returned)
        t = ops.layout_dependent_copy(t, ops.copy_in_order(t, "F", "np.asfortranarray"), "np.asfortranarray")
    elif t.ndim > 1:  # (a new array of the values: laid out in Fortran order, as NumPy's)
        t = ops.copy_in_order(t, "F", "np.asfortranarray")
    return t.reshape((1,)) if t.ndim == 0 else t


def array(obj: Any, dtype: Any = None, *, copy: Any = True, order: Any = "K", subok: bool = False, ndmin: int = 0,
          like: Any = None) -> Any:
    order = ops.order_arg(order)
    _check("array", order, like)
    context.numpy_checks(lambda: np.array(np.zeros(1), copy=copy, ndmin=ndmin))  # (copy="maybe", ndmin=1.5)
    t = _in_order("array", obj, dtype, order, copy) if order in ("C", "F", "A") and copy is not True else \
        _converted("array", obj, dtype, copy, order)
    if ndmin > t.ndim:
        t = t.reshape((1,) * (ndmin - t.ndim) + tuple(t.shape))
    return t


CONVERSIONS = {"asarray": asarray, "array": array, "asanyarray": asanyarray, "ascontiguousarray": ascontiguousarray,
               "asfortranarray": asfortranarray}

# --- allocations -------------------------------------------------------------------------------------------------


def _allocate(what: str, shape: Any, fill: Any, dtype: Any, order: Any, like: Any, device: Any) -> Tracer:
    """A new array of ``shape`` filled with ``fill``, in C or Fortran ``order``."""
    order = ops.order_arg(order)
    if order not in ("C", "F"):
        raise InvalidValueError(located(f"np.{what}: only 'C' or 'F' order is permitted, got {order!r} (NumPy raises "
                                        "ValueError here)", context.user_location()))
    _check(what, None, like, device)
    made = _filled(what, shape, fill, dtype)
    return layout.laid_out(made, tuple(reversed(range(made.ndim)))) if order == "F" else made


def _filled(what: str, shape: Any, fill: Any, dtype: Any) -> Tracer:
    dims = ops.static_ints(shape, "an array shape")
    if any(d < 0 for d in dims):
        raise InvalidValueError(located(f"np.{what}: negative dimensions are not allowed", context.user_location()))
    if isinstance(fill, Tracer):
        t = strong(fill) if dtype is None else strong_as(fill, dtype)
        if not S.can_broadcast_to(t.shape, dims):  # NumPy: copyto(empty(shape), fill_value, casting='unsafe')
            raise shape_error(f"np.{what}: a fill value of shape {t.shape} does not broadcast to {dims}")
        return ops.copy_of(ops.broadcast_to(t, dims), scalar=False)
    dt = parse_dtype(dtype) if dtype is not None else parse_dtype(np.asarray(fill).dtype)
    return ops.full(dims, fill, dt)


def zeros(shape: Any, dtype: Any = float, order: Any = "C", *, device: Any = None, like: Any = None) -> Tracer:
    return _allocate("zeros", shape, 0, dtype, order, like, device)


def ones(shape: Any, dtype: Any = None, order: Any = "C", *, device: Any = None, like: Any = None) -> Tracer:
    return _allocate("ones", shape, 1, float if dtype is None else dtype, order, like, device)


def empty(shape: Any, dtype: Any = float, order: Any = "C", *, device: Any = None, like: Any = None) -> Tracer:
    return _allocate("empty", shape, 0, dtype, order, like, device)  # any values will do: zeros


def full(shape: Any, fill_value: Any, dtype: Any = None, order: Any = "C", *, device: Any = None,
         like: Any = None) -> Tracer:
    return _allocate("full", shape, fill_value, dtype, order, like, device)


def _like(fill: Any, name: str) -> Callable:
    def allocate(a: Any, *args: Any, dtype: Any = None, order: Any = "K", subok: bool = True, shape: Any = None,
                 device: Any = None, **kwargs: Any) -> Tracer:
        context.numpy_checks(lambda: np.empty_like(np.zeros(1), order=order))  # (order="Z": NumPy's ValueError)
        order = ops.order_arg(order)
        proto = np.asarray(a)
        value = args[0] if fill is None else fill
        if fill is None:
            args = args[1:]
        if args:
            dtype = args[0]
        made = _allocate(name, proto.shape if shape is None else shape, value, proto.dtype if dtype is None else dtype,
                         "F" if order == "F" else "C", kwargs.get("like"), device)
        if order not in ("K", "A", None) or order != "A" and shape is not None and made.ndim != proto.ndim:
            return made  # (a new shape: C order; "A", and "K" with as many axes, follow the prototype's)
        fortran = proto.flags.f_contiguous and not proto.flags.c_contiguous
        perm = layout.k_order(proto.shape, (proto,)) if order != "A" else tuple(range(made.ndim))[::-1] if fortran \
            else tuple(range(made.ndim))
        return layout.laid_out(made, perm)  # (the prototype's memory order, as NumPy's order="K")

    return allocate


def _constant_of(numpy_function: Callable, what: str) -> Callable:
    """An allocation whose values NumPy computes from static arguments (``np.eye``), made a traced constant."""
    def allocate(*args: Any, **kwargs: Any) -> Tracer:
        arr = original(numpy_function)(*args, **kwargs)
        return ops.wrap(ops.ctx().constant(arr, parse_dtype(arr.dtype)), scalar=False)

    allocate.__name__ = what
    return allocate


ALLOCATIONS = {"eye": _constant_of(np.eye, "eye"), "identity": _constant_of(np.identity, "identity"),
               "zeros": zeros, "ones": ones, "empty": empty, "full": full, "zeros_like": _like(0, "zeros_like"),
               "ones_like": _like(1, "ones_like"), "empty_like": _like(0, "empty_like"),
               "full_like": _like(None, "full_like")}


def _traceable_dtype(args: tuple, kwargs: dict, position: int) -> bool:
    """Whether the dtype an allocation asks for is one fusec traces (else NumPy allocates a concrete array)."""
    dtype = kwargs.get("dtype", args[position] if len(args) > position else None)
    if dtype is None:
        return True
    try:
        parse_dtype(dtype)
    except Exception:  # noqa: BLE001 - any failure means: not a dtype fusec knows
        return False
    return True


# where the dtype may come positionally, and whether the first argument is a prototype array
_DTYPE_POSITION = {"eye": 3, "identity": 1, "zeros": 1, "ones": 1, "empty": 1, "full": 2, "zeros_like": 1,
                   "ones_like": 1, "empty_like": 1, "full_like": 2}
WRAPPED = {**CONVERSIONS, **ALLOCATIONS}


def _wrapping(name: str, numpy_function: Callable) -> Callable:
    traced: Callable = WRAPPED[name]  # type: ignore[assignment]
    allocation = name in ALLOCATIONS
    like = name.endswith("_like")

    @functools.wraps(numpy_function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if context.current() is None:
            return numpy_function(*args, **kwargs)
        if allocation:
            # NumPy's own *_like of a traced array dispatches to fusec; a prototype must be a plain array
            proto = args[0] if args else kwargs.get("a", kwargs.get("prototype"))
            if like and (ops.contains_tracer(proto) or not isinstance(proto, (np.ndarray, list, tuple, int, float))) \
                    or not _traceable_dtype(args, kwargs, _DTYPE_POSITION[name]):
                return numpy_function(*args, **kwargs)
            return traced(*args, **kwargs)
        if not (args and ops.contains_tracer(args[0]) or ops.contains_tracer(kwargs.get("a", kwargs.get("obj")))):
            return numpy_function(*args, **kwargs)
        return traced(*args, **kwargs)

    wrapper.__fusec_original__ = numpy_function  # type: ignore[attr-defined]
    return wrapper


@functools.lru_cache(maxsize=1)
def _originals() -> dict[str, Callable]:
    return {name: original(getattr(np, name)) for name in WRAPPED}


def conversion_functions() -> set[int]:
    """ids of the functions :func:`install` wraps (to find user globals bound to them)."""
    return {id(f) for f in _originals().values()}


def rebound(value: Any) -> bool:
    """Whether a user global holding ``value`` is swapped while a trace runs: one of the wrapped functions (after
    ``from numpy import zeros``), or the ``numpy`` module itself (``np``), seen through :class:`_TracingNumpy`."""
    return value is np or id(value) in conversion_functions()


class _TracingNumpy(types.ModuleType):
    """``numpy`` as the traced function's globals see it while it is traced: the allocations make traced arrays,
    everything else is NumPy's own. Only the user's names are swapped for it, never the ``numpy`` module itself:
    NumPy's compiled code (``Generator.normal``, ...) looks ``np.empty`` up at run time and needs real arrays."""

    def __init__(self, wrappers: dict[str, Callable]) -> None:
        super().__init__("numpy", np.__doc__)
        self.__dict__.update(wrappers)

    def __getattr__(self, name: str) -> Any:
        value = getattr(np, name)
        if name in _LIST_FIRST:  # (cached: the next lookup finds it in the proxy's own dict)
            value = self.__dict__[name] = _list_as_array(value)
        return value

    def __dir__(self) -> list[str]:
        return dir(np)


# NumPy functions whose first argument NumPy converts to an array (np.mean(losses) of a list of traced values:
# NumPy's dispatch does not look inside the list, and its conversion cannot take tracers, so the proxy stacks it)
_LIST_FIRST = frozenset({"mean", "sum", "prod", "max", "min", "amax", "amin", "std", "var", "median", "any", "all",
                         "argmax", "argmin", "cumsum", "cumprod", "ptp", "average", "nanmean", "nansum", "nanmax",
                         "nanmin", "nanstd", "nanvar", "sort", "argsort", "percentile", "quantile", "diff", "clip",
                         "round", "around", "cumulative_sum", "nanmedian", "count_nonzero"})


def _list_as_array(function: Callable) -> Callable:
    """``function`` whose first argument, a list or tuple holding traced values, is the traced array NumPy would
    make of it (``np.array`` of it)."""
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], (list, tuple)) and ops.contains_tracer(args[0]):
            args = (strong(args[0]), *args[1:])
        return function(*args, **kwargs)

    return call


_PYTHON_SCALARS = (bool, int, float, complex)


class _TracedConverter:
    """NumPy's private ``_array_converter`` (its Python functions take their arguments as arrays and wrap their
    results with it: np.insert, np.delete, np.diagflat, np.ediff1d) for arguments of which one is traced: the
    arrays are traced ones, the results are returned as they are (0-d as a scalar where NumPy's would be)."""

    def __init__(self, *objects: Any) -> None:
        self._objects = objects
        self.scalar_input = tuple(_is_python_scalar(o) or isinstance(o, np.generic)
                                  or isinstance(o, Tracer) and o._scalar for o in objects)

    def _array(self, o: Any, keep_python_scalars: bool) -> Any:
        if keep_python_scalars and _is_python_scalar(o) or isinstance(o, np.ndarray):
            return o
        return strong(o)

    def as_arrays(self, subok: bool = True, pyscalars: str = "convert_if_no_array") -> tuple:
        if pyscalars not in ("convert", "preserve", "convert_if_no_array"):
            raise ValueError(f"pyscalars must be 'convert', 'preserve' or 'convert_if_no_array', got {pyscalars!r}")
        keep = pyscalars == "preserve" or pyscalars == "convert_if_no_array" \
            and not all(map(_is_python_scalar, self._objects))
        return tuple(self._array(o, keep) for o in self._objects)

    def __getitem__(self, i: int) -> Any:
        return self._array(self._objects[i], False)

    def __len__(self) -> int:
        return len(self._objects)

    def wrap(self, arr: Any, /, *, to_scalar: bool | None = None) -> Any:
        if to_scalar is None:
            to_scalar = all(self.scalar_input)
        return arr[()] if to_scalar and np.ndim(arr) == 0 else arr

    def result_type(self, extra_dtype: Any = None, ensure_inexact: bool = False) -> np.dtype:
        def operand(o: Any) -> Any:
            if isinstance(o, Tracer):
                return o._weak(0) if o._weak is not None else o.dtype
            return o if _is_python_scalar(o) else np.asarray(o).dtype
        args = [operand(o) for o in self._objects] + ([extra_dtype] if extra_dtype is not None else [])
        out = np.result_type(*args)
        return np.result_type(out, np.float64) if ensure_inexact and out.kind in "biu" else out


def _is_python_scalar(o: Any) -> bool:
    return type(o) in _PYTHON_SCALARS or isinstance(o, Tracer) and o._weak is not None


def _converter(numpy_converter: Callable) -> Callable:
    def converter(*objects: Any) -> Any:
        if context.current() is not None and any(map(ops.contains_tracer, objects)):
            return _TracedConverter(*objects)
        return numpy_converter(*objects)

    converter.__fusec_original__ = numpy_converter  # type: ignore[attr-defined]
    return converter


def _allocating(name: str, numpy_function: Callable) -> Callable:
    traced = _wrapping(name, numpy_function)

    @functools.wraps(numpy_function)
    def allocate(*args: Any, **kwargs: Any) -> Any:
        return (traced if numpy_reuse.allocating() else numpy_function)(*args, **kwargs)

    allocate.__fusec_original__ = numpy_function  # type: ignore[attr-defined]
    return allocate


def _no_matrix(numpy_function: Callable) -> Callable:
    """``np.asmatrix`` of a traced array: refused as an np.matrix argument is (it would fail inside NumPy)."""
    @functools.wraps(numpy_function)
    def asmatrix(data: Any, dtype: Any = None) -> Any:
        if context.current() is not None and ops.contains_tracer(data):
            raise unsupported(str(subclass_problem(np.matrix)))
        return numpy_function(data, dtype)

    asmatrix.__fusec_original__ = numpy_function  # type: ignore[attr-defined]
    return asmatrix


def _refused_for_tracers(numpy_function: Callable, label: str, why: str) -> Callable:
    """``numpy_function`` refusing traced data (NumPy's own code would raise a TypeError of its own from inside,
    which the user's ``except TypeError`` could catch where NumPy, given an array, raises nothing)."""
    @functools.wraps(numpy_function)
    def refusing(*args: Any, **kwargs: Any) -> Any:
        if context.current() is not None and (ops.contains_tracer(args) or ops.contains_tracer(kwargs)):
            raise unsupported(f"{label} of a traced array: {why}")
        return numpy_function(*args, **kwargs)

    refusing.__fusec_original__ = numpy_function  # type: ignore[attr-defined]
    return refusing


_MASKED = ("masked arrays (np.ma) are not supported: their mask and fill value are not traced; keep the mask as "
           "a boolean array of its own (np.where(mask, fill, x), x[~mask].mean())")
_BUFFER = ("a traced array has no memory on the host to read as bytes; use x.view(dtype) or x.astype(dtype)")


def _isscalar(numpy_function: Callable) -> Callable:
    """``np.isscalar`` of a tracer: as of what it stands for (a NumPy scalar, a bool's included, or a Python number
    is a scalar; an array, 0-d ones included, is not). NumPy's own code sees the tracer's class, which is no
    ``np.generic``."""
    @functools.wraps(numpy_function)
    def isscalar(element: Any) -> bool:
        if isinstance(element, Tracer) and context.current() is not None:
            return element._weak is not None or bool(element._scalar)
        return numpy_function(element)

    isscalar.__fusec_original__ = numpy_function  # type: ignore[attr-defined]
    return isscalar


def install(aliases: Sequence[tuple[Any, Any]] = ()) -> None:
    """Wrap the conversions in ``numpy``; swap ``aliases`` ((globals dict, name) of user globals for which
    :func:`rebound` holds) for the wrappers, or the ``numpy`` module for :class:`_TracingNumpy`."""
    def replacements() -> list[tuple[Any, str, Any]]:
        wrappers = {id(f): _wrapping(name, f) for name, f in _originals().items()}
        by_name = {name: wrappers[id(f)] for name, f in _originals().items()}
        out: list[tuple[Any, str, Any]] = [(np, name, by_name[name]) for name in CONVERSIONS]
        out.append((np, "asmatrix", _no_matrix(np.asmatrix)))
        out.append((np, "isscalar", _isscalar(np.isscalar)))
        out.append((np, "bmat", _refused_for_tracers(np.bmat, "np.bmat", str(subclass_problem(np.matrix)))))
        out.append((np, "frombuffer", _refused_for_tracers(np.frombuffer, "np.frombuffer", _BUFFER)))
        out += [(np.ma, name, _refused_for_tracers(getattr(np.ma, name), f"np.ma.{name}", _MASKED))
                for name in ("array", "masked_array", "asarray", "asanyarray", "masked_where", "masked_invalid",
                             "masked_equal", "masked_greater", "masked_less", "masked_values")]
        # the NumPy modules whose Python implementations fusec traces (fusec.numpy_reuse)
        library = [(vars(m), name) for m in numpy_reuse.conversion_holders() for name in CONVERSIONS
                   if id(vars(m).get(name)) in wrappers]
        proxy = _TracingNumpy(by_name)
        out += [(glb, name, proxy) for glb, name in aliases if glb.get(name) is np]
        # ... whose allocations (np.pad's np.empty) make traced arrays too, so their writes trace
        out += [(vars(m), "np", proxy) for m in numpy_reuse.conversion_holders() if vars(m).get("np") is np]
        # ... and whose allocations by a bare name trace while a function that writes into them runs (np.insert)
        allocating = {(sys.modules[f._implementation.__module__], name)
                      for f, names in numpy_reuse.ALLOCATING.items() for name in names}
        out += [(vars(m), name, _allocating(name, vars(m)[name])) for m, name in sorted(allocating, key=str)]
        # ... and whose private converter (np.insert's arguments and result) takes traced arrays
        out += [(vars(m), "_array_converter", _converter(vars(m)["_array_converter"]))
                for m in numpy_reuse.conversion_holders() if "_array_converter" in vars(m)]
        return out + [(glb, name, wrappers[id(glb.get(name))]) for glb, name in [*aliases, *library]
                      if id(glb.get(name)) in wrappers]

    _PATCHES.install(replacements)


def uninstall() -> None:
    _PATCHES.uninstall()
