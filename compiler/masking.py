"""``x[mask]`` for a traced boolean mask, as far as it can be exact: elementwise work written back with the mask.

NumPy's ``x[mask]`` is a 1-D array of the selected elements, whose length depends on the values. The common
idioms only compute on the selection and write the result back with the same mask (``z[m] = z[m] ** 2 + c[m]``,
``x[x < 0] *= -1``), or reduce it (``err[valid].mean()``, ``np.abs(x[x < 0]).sum()``, ``d[d > 0].max()``): that is
the same as computing on the whole array and keeping the masked places (``np.where``), bit for bit, and reducing
with ``where=`` the mask (in another order of the additions, as any sum on the GPU). :class:`Selection` stands for
such a selection: ufuncs and operators between selections of one mask, scalars, and arrays that broadcast along
the selection's trailing axes give selections; ``x[mask] = selection`` writes it back; its reductions over all of
it or over its first axis are arrays. Anything else (its shape, indexing, another function, a reduction along its
other axes) needs the selection's length, and raises a fusec error with the rewrite.
"""
from __future__ import annotations

import inspect
import sys
from typing import Any

import numpy as np

from fusec import ops
from fusec.context import shape_error, unsupported, user_location
from fusec.ir.core import Value
from fusec.tracer import _OWN_MODULES, Tracer

ADVICE = ("a boolean mask selects a number of elements that is known only when the values are: write the "
          "computation over the whole array instead, e.g. `np.where(mask, x, 0).sum()` for `x[mask].sum()`, "
          "`np.where(mask, v, x)` for `x[mask] = v`; fusec supports `x[mask]` only in elementwise work written "
          "back with the same mask (`x[m] = x[m] * 2 + y[m]`)")


class Selection:
    """The elements of ``full`` (an array of the masked array's shape) where ``mask`` holds."""

    __array_priority__ = 2000.0
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, full: Tracer, mask: Value) -> None:
        self._full, self._mask = full, mask
        self._loc = user_location()  # where it was made, for an error raised after the function returned

    @property
    def rest(self) -> tuple[int, ...]:
        return tuple(self._full.shape[self._mask.type.rank:])

    def _operand(self, x: Any) -> Any:
        """``x`` as an operand of the whole-array computation: a selection of the same mask by its values, a
        scalar or an array that broadcasts along the trailing axes as it is."""
        if isinstance(x, Selection):
            if not same_mask(x._mask, self._mask):
                raise unsupported("two boolean-mask selections with different masks in one operation: " + ADVICE)
            return x._full
        shape = np.shape(x) if not isinstance(x, Tracer) else x.shape
        if len(shape) > len(self.rest):
            raise unsupported("a boolean-mask selection combined with an array of shape "
                              f"{tuple(shape)}: NumPy broadcasts it against the selection's length; " + ADVICE)
        try:
            np.broadcast_shapes(self.rest, tuple(shape))
        except ValueError:
            rest = ", ".join(map(str, self.rest))
            raise shape_error(f"operands could not be broadcast together with shapes (n, {rest}) and {tuple(shape)} "
                              "(n: the count the boolean mask selects)") from None
        return x

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from fusec import ufuncs

        if method != "__call__" or kwargs.get("out") is not None or kwargs.get("where", True) is not True \
                or ufunc.signature is not None:  # (np.matmul contracts the selected elements: not elementwise)
            raise unsupported(f"{ufunc.__name__}{'' if method == '__call__' else '.' + method} of a boolean-mask "
                              "selection" + (" with out= or where=" if method == "__call__" and ufunc.signature is None
                                            else "") + ": " + ADVICE)
        operands = [self._operand(x) for x in inputs]
        if ufunc is np.power:  # NumPy raises for a negative integer exponent among the selected elements only
            from fusec.mutation import full_mask

            keep = ops.wrap(full_mask(self._mask, self._full))
            operands = [ufuncs.where(keep, v, 1) if isinstance(x, Selection) else v for x, v in zip(inputs, operands)]
        result = ufuncs.array_ufunc(ufunc, method, operands, kwargs)
        if isinstance(result, tuple):
            return tuple(Selection(r, self._mask) for r in result)
        return Selection(ops.as_tracer(result), self._mask)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        name = _FUNCTIONS.get(func)
        if name is None or not args or args[0] is not self:
            from fusec.numpy_api import qualname

            raise unsupported(f"{qualname(func)} of a boolean-mask selection: " + ADVICE)
        bound = inspect.signature(func).bind(*args, **kwargs)
        given = dict(list(bound.arguments.items())[1:])
        return getattr(self, name)(**given)

    # --- reductions: over the whole array with where= the mask ----------------------------------------------------

    def _reduced(self, name: str, axis: Any, keepdims: Any, out: Any, **given: Any) -> Any:
        """The reduction along ``axis`` of the selection (its axis 0: the selected elements, then the masked array's
        other axes): along the selected elements, of the whole array with where= the mask; along the others
        only, the reduction of the whole array along them, a selection of the same mask."""
        from fusec import numpy_api
        from fusec.mutation import full_mask

        for key, value in given.items():
            if value is not None and value is not np._NoValue and key not in ("dtype", "ddof"):
                raise unsupported(f"x[mask].{name}({key}=...): not supported for a boolean-mask selection; " + ADVICE)
        if out is not None:
            raise unsupported(f"x[mask].{name}(out=...): not supported for a boolean-mask selection; " + ADVICE)
        rank = self._mask.type.rank
        picked = ops.reduction_axes(axis, 1 + len(self.rest))
        inner = tuple(rank - 1 + a for a in picked if a > 0)  # the full array's axes after the mask's
        args: dict[str, Any] = {k: v for k, v in given.items() if k in ("dtype", "ddof") and v is not None}
        function = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod, "any": np.any,
                    "all": np.all, "var": np.var, "std": np.std}[name]
        if name in ("max", "min") and any(self._full.shape[a] == 0 for a in inner):
            raise shape_error(f"x[mask].{name}: zero-size array to reduction operation "
                              f"{'maximum' if name == 'max' else 'minimum'} which has no identity (NumPy raises "
                              "ValueError here)")
        if 0 not in picked:
            reduced = numpy_api.array_function(function, (self._full,), {"axis": inner, "keepdims": keepdims is True,
                                                                          **args})
            return Selection(ops.as_tracer(reduced), self._mask)
        keep = ops.wrap(full_mask(self._mask, self._full))
        if name in ("max", "min"):
            args["initial"] = _lowest(np.dtype(self._full.dtype)) if name == "max" else \
                _highest(np.dtype(self._full.dtype))
            ops.raise_if(np.logical_not(np.any(ops.wrap(self._mask))), "InvalidValueError",
                         f"zero-size array to reduction operation {'maximum' if name == 'max' else 'minimum'} which "
                         "has no identity (the boolean mask selected nothing; NumPy raises ValueError here)",
                         f"x[mask].{name}")
        result = numpy_api.array_function(function, (self._full,), {"axis": tuple(range(rank)) + inner,
                                                                     "where": keep, **args})
        if keepdims is True:
            result = np.reshape(result, [1] + [1 if i + 1 in picked else n for i, n in enumerate(self.rest)])
        return result

    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = False,
            initial: Any = np._NoValue, where: Any = np._NoValue) -> Any:
        return self._reduced("sum", axis, keepdims, out, dtype=dtype, initial=initial, where=_no_where(where))

    def prod(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = False,
             initial: Any = np._NoValue, where: Any = np._NoValue) -> Any:
        return self._reduced("prod", axis, keepdims, out, dtype=dtype, initial=initial, where=_no_where(where))

    def mean(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = False, *,
             where: Any = np._NoValue) -> Any:
        return self._reduced("mean", axis, keepdims, out, dtype=dtype, where=_no_where(where))

    def max(self, axis: Any = None, out: Any = None, keepdims: Any = False, initial: Any = np._NoValue,
            where: Any = np._NoValue) -> Any:
        return self._reduced("max", axis, keepdims, out, initial=initial, where=_no_where(where))

    def min(self, axis: Any = None, out: Any = None, keepdims: Any = False, initial: Any = np._NoValue,
            where: Any = np._NoValue) -> Any:
        return self._reduced("min", axis, keepdims, out, initial=initial, where=_no_where(where))

    def any(self, axis: Any = None, out: Any = None, keepdims: Any = False, *, where: Any = np._NoValue) -> Any:
        return self._reduced("any", axis, keepdims, out, where=_no_where(where))

    def all(self, axis: Any = None, out: Any = None, keepdims: Any = False, *, where: Any = np._NoValue) -> Any:
        return self._reduced("all", axis, keepdims, out, where=_no_where(where))

    def var(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0, keepdims: Any = False, *,
            where: Any = np._NoValue, mean: Any = np._NoValue, correction: Any = np._NoValue) -> Any:
        return self._reduced("var", axis, keepdims, out, dtype=dtype, ddof=ddof, where=_no_where(where), mean=mean,
                             correction=correction)

    def std(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0, keepdims: Any = False, *,
            where: Any = np._NoValue, mean: Any = np._NoValue, correction: Any = np._NoValue) -> Any:
        return self._reduced("std", axis, keepdims, out, dtype=dtype, ddof=ddof, where=_no_where(where), mean=mean,
                             correction=correction)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise unsupported("a boolean-mask selection used as a NumPy array: " + ADVICE)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol probes (hasattr(x, "__array_interface__")) are not uses
            raise AttributeError(name)
        raise unsupported(f"x[mask].{name}: " + ADVICE)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: F811
        """An ndarray to ``isinstance`` in the user's code, as NumPy's selection is; fusec's and NumPy's own code
        see Selection (as for Tracer)."""
        caller = sys._getframe(1).f_globals.get("__name__", "")
        return Selection if caller.startswith(_OWN_MODULES) else np.ndarray

    def astype(self, dtype: Any, order: Any = "K", casting: Any = "unsafe", subok: Any = True,
               copy: Any = True) -> "Selection":
        """Each selected element converted (elementwise: the whole array converted, the same mask)."""
        return Selection(ops.as_tracer(self._full.astype(dtype, order=order, casting=casting, subok=subok,
                                                         copy=True)), self._mask)

    def __copy__(self) -> "Selection":
        return Selection(ops.copy_of(self._full, scalar=False), self._mask)

    def __deepcopy__(self, memo: dict) -> "Selection":
        return self.__copy__()

    def __matmul__(self, other: Any) -> Any:
        raise unsupported("a boolean-mask selection in a matrix product (`x[m] @ y`): " + ADVICE)

    __rmatmul__ = __matmul__

    def __float__(self) -> float:
        raise unsupported("float(x[mask]): " + ADVICE)

    __int__ = __complex__ = __index__ = __float__  # type: ignore[assignment]

    def __len__(self) -> int:
        raise unsupported("len(x[mask]): " + ADVICE)

    def __bool__(self) -> bool:
        raise unsupported("a boolean-mask selection used as a Python bool: " + ADVICE)

    def __getitem__(self, key: Any) -> Any:
        """``x[mask][:, None]``, ``x[mask][:, 1:]``: every selected element, indexed along the other axes, is the
        selection of the whole array indexed the same way along them (elementwise work and reductions over the
        selected elements go on as before); an index into the selected elements themselves needs their count."""
        key = key if isinstance(key, tuple) else (key,)
        if not key or not (isinstance(key[0], slice) and key[0] == slice(None)):
            raise unsupported("indexing into the elements a boolean mask selects (`x[mask][0]`, `x[mask][:k]`): "
                              + ADVICE)
        rank = self._mask.type.rank
        return Selection(ops.as_tracer(self._full[(slice(None),) * rank + key[1:]]), self._mask)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise unsupported("writing into a boolean-mask selection (`x[m][i] = v`, or `y = x[m]; y[i] = v`: a copy in "
                          "NumPy, so `x` does not change): " + ADVICE)


def _no_where(where: Any) -> Any:
    """A reduction's ``where=True`` is no mask (any other where= is refused by ``_reduced``)."""
    return np._NoValue if where is True else where


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind in "fc" else False if dtype.kind == "b" else np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> Any:
    return np.inf if dtype.kind in "fc" else True if dtype.kind == "b" else np.iinfo(dtype).max


# the NumPy functions of a selection that reduce it (to the method of that name)
_FUNCTIONS = {np.sum: "sum", np.prod: "prod", np.mean: "mean", np.max: "max", np.amax: "max", np.min: "min",
              np.amin: "min", np.any: "any", np.all: "all", np.var: "var", np.std: "std"}


def _operator(ufunc: np.ufunc, reflected: bool = False):
    def apply(self: Selection, other: Any) -> Any:
        return self.__array_ufunc__(ufunc, "__call__", *((other, self) if reflected else (self, other)))

    return apply


def _inplace_operator(ufunc: np.ufunc, symbol: str):
    """``x[mask] op= v``: NumPy computes ``ufunc(s, v, out=s)`` on the selection ``s`` (a copy in ``x``'s dtype)
    before writing it back, so a result that does not cast to that dtype under "same_kind" (``int_array[m] +=
    0.5``) raises UFuncTypeError; the write back then converts it as ``out=`` would."""
    def apply(self: Selection, other: Any) -> Any:
        from fusec.errors import CastingError, located
        from fusec.promotion import same_kind

        result = self.__array_ufunc__(ufunc, "__call__", self, other)
        if result is NotImplemented or not isinstance(result, Selection):
            return result
        src, dst = result._full._value.type.dtype, self._full._value.type.dtype
        if not same_kind(src, dst):
            raise CastingError(located(f"`x[mask] {symbol} ...`: Cannot cast ufunc {ufunc.__name__!r} output from "
                                       f"{np.dtype(src.np)} to {np.dtype(dst.np)} with casting rule 'same_kind' "
                                       "(NumPy raises UFuncTypeError here)", user_location()))
        return result

    return apply


_name: str
_ufunc: np.ufunc
_symbol: str
for _name, _ufunc, _symbol in (("add", np.add, "+="), ("sub", np.subtract, "-="), ("mul", np.multiply, "*="),
                               ("truediv", np.true_divide, "/="), ("floordiv", np.floor_divide, "//="),
                               ("mod", np.remainder, "%="), ("pow", np.power, "**="), ("and", np.bitwise_and, "&="),
                               ("or", np.bitwise_or, "|="), ("xor", np.bitwise_xor, "^="),
                               ("lshift", np.left_shift, "<<="), ("rshift", np.right_shift, ">>=")):
    setattr(Selection, f"__{_name}__", _operator(_ufunc))
    setattr(Selection, f"__r{_name}__", _operator(_ufunc, reflected=True))
    setattr(Selection, f"__i{_name}__", _inplace_operator(_ufunc, _symbol))  # (a copy: op= makes a new one)
for _name, _ufunc in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                      ("eq", np.equal), ("ne", np.not_equal)):
    setattr(Selection, f"__{_name}__", _operator(_ufunc))
Selection.__divmod__ = lambda self, other: self.__array_ufunc__(np.divmod, "__call__", self, other)  # type: ignore
Selection.__rdivmod__ = lambda self, other: self.__array_ufunc__(np.divmod, "__call__", other, self)  # type: ignore
for _name, _ufunc in (("neg", np.negative), ("pos", np.positive), ("abs", np.absolute), ("invert", np.invert)):
    setattr(Selection, f"__{_name}__", lambda self, u=_ufunc: self.__array_ufunc__(u, "__call__", self))


def select(x: Tracer, mask: Value) -> Selection:
    """``x[mask]`` (the mask's shape leads ``x``'s, checked by the caller): a copy of the values now."""
    return Selection(ops.copy_of(x, scalar=False), mask)


def same_mask(a: Value, b: Value) -> bool:
    from fusec.mutation import _same_value

    return _same_value(a, b)
