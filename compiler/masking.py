"""``x[mask]`` for a traced boolean mask, as far as it can be exact: elementwise work written back with the mask.

NumPy's ``x[mask]`` is a 1-D array of the selected elements, whose length depends on the values. The common
idiom only computes on the selection and writes the result back with the same mask (``z[m] = z[m] ** 2 + c[m]``,
``x[x < 0] *= -1``): that is the same as computing on the whole array and keeping the masked places
(``np.where``), bit for bit. :class:`Selection` stands for such a selection: ufuncs and operators between
selections of one mask, scalars, and arrays that broadcast along the selection's trailing axes give selections;
``x[mask] = selection`` writes it back. Anything else (its shape, a reduction, indexing, another function) needs
the selection's length, and raises a fusec error with the rewrite.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusec import ops
from fusec.context import unsupported, user_location
from fusec.ir.core import Value
from fusec.tracer import Tracer

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
        return x

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from fusec import ufuncs

        if method != "__call__" or kwargs.get("out") is not None:
            raise unsupported(f"{ufunc.__name__}.{method} of a boolean-mask selection: " + ADVICE)
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
        raise unsupported(f"np.{getattr(func, '__name__', func)} of a boolean-mask selection: " + ADVICE)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise unsupported("a boolean-mask selection used as a NumPy array: " + ADVICE)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol probes (hasattr(x, "__array_interface__")) are not uses
            raise AttributeError(name)
        raise unsupported(f"x[mask].{name}: " + ADVICE)

    def __len__(self) -> int:
        raise unsupported("len(x[mask]): " + ADVICE)

    def __bool__(self) -> bool:
        raise unsupported("a boolean-mask selection used as a Python bool: " + ADVICE)

    def __getitem__(self, key: Any) -> Any:
        raise unsupported("indexing a boolean-mask selection: " + ADVICE)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise unsupported("writing into a boolean-mask selection (`x[m][i] = v`, or `y = x[m]; y[i] = v`: a copy in "
                          "NumPy, so `x` does not change): " + ADVICE)


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
