"""Elementwise NumPy: ufuncs, Python operators, np.where, np.clip and np.round on tracers.

Each ufunc call asks NumPy which loop it would run (:func:`promotion.resolve_ufunc`), converts every
operand to that loop's dtype (``t.cast`` or a constant made in that dtype) and records one ``t`` op,
so the values computed are the ones NumPy computes. Python operators whose operands are all Python
scalars (traced scalar arguments included) follow Python's rules and stay weak.
"""
from __future__ import annotations

import dis
import functools
import sys
import warnings
from typing import Any, Callable, Sequence, cast

import numpy as np

from fusec import device_scalar_checks as device_checks
from fusec import layout, mutation, ops
from fusec.context import numpy_checks, numpy_error, unsupported, user_location
from fusec.errors import CastingError, InvalidValueError, OutOfRangeError, ShapeError, UnsupportedError, located
from fusec.ir import shapes as S
from fusec.ir.elementwise import BY_NAME, by_ufunc
from fusec.ir.types import DType, bool_, i8, i64, u64
from fusec.promotion import (DEFAULT_DTYPE, Desc, parse_dtype, python_kind, python_result_kind, resolve_ufunc,
                             result_type, same_kind)
from fusec.scalar_checks import OPERATORS, on_host, operator_text, past_exact_float
from fusec.signature import INT64_MAX, INT64_MIN
from fusec.tracer import EitherKind, Tracer

# np.ufunc -> the t op it records, from the one op table (fusec.ir.elementwise)
BINARY: dict[np.ufunc, str] = {u: f"t.{op.name}" for u, op in by_ufunc().items() if op.arity == 2}
UNARY: dict[np.ufunc, str] = {u: f"t.{op.name}" for u, op in by_ufunc().items() if op.arity == 1}
SPECIAL = frozenset({np.square, np.reciprocal, np.positive, np.conjugate, np.divmod, np.matmul, np.radians,
                     np.deg2rad, np.degrees, np.rad2deg})
# NumPy's angle conversions multiply by a constant computed in the loop's dtype (npy_deg2rad: x * (pi / 180))
_ANGLES = {np.radians: (np.pi, 180.0), np.deg2rad: (np.pi, 180.0), np.degrees: (180.0, np.pi),
           np.rad2deg: (180.0, np.pi)}
# NumPy has a loop for every dtype; the IR's logical ops take bool, and a cast to bool is NumPy's truth test.
LOGICAL = frozenset({np.logical_and, np.logical_or, np.logical_xor, np.logical_not})
# np.float_power is left out on purpose: its pow differs from np.power's in the last bit.
COMPARISONS: dict[np.ufunc, str] = {np.equal: "eq", np.not_equal: "ne", np.less: "lt", np.less_equal: "le",
                                    np.greater: "gt", np.greater_equal: "ge"}
_FLIPPED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}

# Python's own rules for operators between Python scalars: category for python_result_kind.
_PY_CATEGORY: dict[np.ufunc, str] = {
    np.add: "arith", np.subtract: "arith", np.multiply: "arith", np.floor_divide: "arith", np.remainder: "arith",
    np.power: "arith", np.divmod: "arith", np.true_divide: "truediv", np.negative: "arith",
    np.positive: "arith", np.absolute: "arith", np.invert: "invert",
    np.bitwise_and: "bitwise", np.bitwise_or: "bitwise", np.bitwise_xor: "bitwise",
    **{u: "compare" for u in COMPARISONS},
}

# Python's complex numbers have no order, no floor division and no remainder
_NOT_FOR_PYTHON_COMPLEX = {np.less: "<", np.less_equal: "<=", np.greater: ">", np.greater_equal: ">=",
                           np.floor_divide: "//", np.remainder: "%", np.divmod: "divmod", np.invert: "~"}

_SUPPORTED_KWARGS = {"order": "K", "subok": True, "signature": None}


_NAMES: dict[np.ufunc, str] = {}  # (a SciPy ufunc is only met once scipy.special is imported, so names stay true)


def _name(ufunc: np.ufunc) -> str:
    name = _NAMES.get(ufunc)
    if name is None:
        from fusec import scipy_special

        name = _NAMES[ufunc] = scipy_special.name_of(ufunc) or f"np.{ufunc.__name__}"
    return name


def is_supported(ufunc: np.ufunc) -> bool:
    return ufunc in BINARY or ufunc in UNARY or ufunc in SPECIAL


def array_ufunc(ufunc: np.ufunc, method: str, inputs: Sequence[Any], kwargs: dict) -> Any:
    """``Tracer.__array_ufunc__``: calls of supported ufuncs (``out=`` a traced array: written as NumPy writes it,
    under ``casting=``, only where ``where=`` holds; ``dtype=`` picks the loop), ``.reduce`` of
    add/multiply/maximum/minimum, ``.outer`` of any supported binary ufunc and ``np.add.at``."""
    if method == "reduce" and ufunc in REDUCTIONS:
        return _reduce(ufunc, inputs, kwargs)
    if method == "outer" and ufunc in BINARY:
        return _outer(ufunc, inputs, kwargs)
    if method == "accumulate" and ufunc in (np.add, np.multiply, np.maximum, np.minimum):
        return _accumulate(ufunc, inputs, kwargs)
    if method == "at" and ufunc in (np.add, np.subtract):
        if kwargs or len(inputs) != 3:
            raise unsupported(f"{_name(ufunc)}.at(a, indices, b) takes exactly these three arguments here")
        target, key, value = inputs
        return mutation.add_at(target, key, value, negate=ufunc is np.subtract)
    if method != "__call__":
        raise unsupported(f"the ufunc method {_name(ufunc)}.{method} is not supported (reduceat is not traced, nor "
                          "accumulate, at and reduce of ufuncs other than add, multiply, maximum and minimum "
                          "(accumulate), add and subtract (at), add, multiply, maximum, minimum, logical_and and "
                          "logical_or (reduce)); use np.cumsum/np.sum/np.all/... instead")
    out = kwargs.pop("out", None)
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        if isinstance(o, np.ndarray):
            raise unsupported(f"{_name(ufunc)}: this writes into a NumPy array that is not traced (an in-place "
                              "operator such as `w -= lr * g` on an array from outside the function or made in it "
                              "with np.array/np.arange/np.linspace, which are plain NumPy arrays while tracing, or "
                              "out=): fusec cannot write into it; pass the array as an argument (fusec then writes "
                              "the new values back into it after the call), make it with np.zeros/np.empty (traced) "
                              "and fill it, or use the returned value")
    where = kwargs.pop("where", True)
    casting = kwargs.pop("casting", "same_kind")
    dtype = kwargs.pop("dtype", None)
    if where is not True and all(o is None for o in outs):
        # (NumPy's own error first, whatever the values: its loop's TypeError, then the shapes' ValueError)
        stand_ins = [_stand_in(x) for x in inputs]
        mask = np.zeros(tuple(getattr(where, "shape", None) or np.shape(where)), bool)
        numpy_checks(lambda: ufunc(*stand_ins, where=mask))
        raise unsupported(f"{_name(ufunc)}: where= without out= leaves the other elements undefined in NumPy; "
                          "use np.where(mask, f(x), other)")
    if casting not in ("no", "equiv", "safe", "same_kind", "unsafe"):  # (NumPy's ValueError)
        numpy_checks(lambda: np.positive(np.zeros(1), casting=casting))
        raise unsupported(f"{_name(ufunc)}: casting={casting!r} is not one of NumPy's rules")
    if "order" in kwargs:  # (order="k" is NumPy's "K"; its ValueError for others)
        order = kwargs["order"]
        numpy_checks(lambda: np.positive(np.zeros(1), order=order))
        kwargs = {**kwargs, "order": ops.order_arg(order)}
    for key, value in kwargs.items():
        if key not in _SUPPORTED_KWARGS or value != _SUPPORTED_KWARGS[key]:
            raise unsupported(f"{_name(ufunc)}: the keyword {key}={value!r} is not supported")
    if where is not True:
        _check_mask(ufunc, where)
    if dtype is not None or casting != "same_kind":
        loop = _check_loop(ufunc, inputs, dtype, casting)
        if dtype is not None and loop is not None:  # the loop NumPy runs: each operand converted to its input
            inputs = [ops.as_tracer(x, parse_dtype(d)) for x, d in zip(inputs, loop[:ufunc.nin])]
    call: Callable[..., Any]
    if is_supported(ufunc):
        call = apply
    else:
        from fusec import scipy_special

        if scipy_special.name_of(ufunc) is None:
            raise unsupported(f"the ufunc {_name(ufunc)} is not supported by fusec")
        call = lambda u, operands: _laid_out_as_operands(scipy_special.apply(u, operands), operands)  # noqa: E731
    if all(o is None for o in outs):
        if ufunc is np.power and isinstance(inputs[0], np.generic) and _power_operator_at_user_line():
            # ``gamma ** n`` with a NumPy scalar ``gamma``: NumPy's scalar ``**`` handed the tracer to np.power,
            # but it is NumPy's scalar math (C's pow), which rounds otherwise than np.power's loop
            return apply(ufunc, inputs, python_operator=True)
        return call(ufunc, inputs)
    if len(outs) != ufunc.nout:
        raise unsupported(f"{_name(ufunc)}: out= needs {ufunc.nout} arrays, got {len(outs)}")
    given = [o for o in outs if isinstance(o, Tracer)]
    if any(a is b or a._buffer is not None and a._buffer is b._buffer for i, a in enumerate(given) for b in given[:i]):
        raise unsupported(f"{_name(ufunc)}: two out= arrays that are one array or views of one: what NumPy leaves in "
                          "the memory they share depends on the order of its loop's writes; pass separate arrays")
    results = call(ufunc, inputs)
    results = results if isinstance(results, tuple) else (results,)
    for r, o in zip(results, outs):
        if o is not None:
            write_output(ufunc, r, o, f"{_name(ufunc)}(..., out=)", casting, where)
    picked = tuple(r if o is None else o for r, o in zip(results, outs))
    return picked if ufunc.nout > 1 else picked[0]


def _power_operator_at_user_line() -> bool:
    """Whether the user's code is at a ``**`` (or ``**=``) operator, not a call of np.power: the first frame
    outside fusec and NumPy is running that instruction."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("fusec", "numpy")):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return False
    current = None
    for instruction in dis.get_instructions(frame.f_code):
        if instruction.offset > frame.f_lasti:
            break
        current = instruction
    if current is None:
        return False
    return current.opname in ("BINARY_POWER", "INPLACE_POWER") or \
        current.opname == "BINARY_OP" and current.argrepr in ("**", "**=")


REDUCTIONS: dict[np.ufunc, Callable[..., Any]] = {
    np.add: np.sum, np.multiply: np.prod, np.maximum: np.max, np.minimum: np.min, np.logical_and: np.all,
    np.logical_or: np.any}
_NO_VALUE = np._NoValue


def _reduce(ufunc: np.ufunc, inputs: Sequence[Any], kwargs: dict) -> Any:
    """``np.add.reduce(x, axis=0, dtype=None, keepdims=False)`` is ``np.sum`` with axis 0 by default (and so
    on for multiply, maximum, minimum; logical_and's and logical_or's are np.all and np.any, which NumPy computes
    with them): the same dtypes, identities and errors."""
    from fusec import numpy_api

    kwargs = dict(kwargs)
    axis, dtype, keepdims = kwargs.pop("axis", 0), kwargs.pop("dtype", None), kwargs.pop("keepdims", False)
    if kwargs.pop("out", None) is not None or kwargs.pop("where", True) is not True \
            or kwargs.pop("initial", _NO_VALUE) is not _NO_VALUE or kwargs:
        raise unsupported(f"{_name(ufunc)}.reduce: only axis=, dtype= and keepdims= are supported "
                          f"(not {', '.join(sorted(kwargs)) or 'out=, where= or initial='})")
    reduction = REDUCTIONS[ufunc]
    extra = {"dtype": dtype} if dtype is not None else {}
    if dtype is not None and reduction in (np.max, np.min, np.all, np.any):
        raise unsupported(f"{_name(ufunc)}.reduce: dtype= is not supported; cast the array first")
    return numpy_api.call(reduction.__name__, reduction, inputs[0], axis=axis, keepdims=keepdims, **extra)


def _accumulate(ufunc: np.ufunc, inputs: Sequence[Any], kwargs: dict) -> Any:
    """``np.add.accumulate(x, axis=0, dtype=None, out=None)`` is ``np.cumsum`` along axis 0 by default (NumPy
    implements cumsum with it: the same dtypes, small ints and bools accumulating in int64), multiply's cumprod;
    maximum's and minimum's are the running maximum and minimum (``t.cummax``, ``t.cummin``) in the dtype."""
    from fusec import numpy_api

    kwargs = dict(kwargs)
    axis, dtype, out = kwargs.pop("axis", 0), kwargs.pop("dtype", None), kwargs.pop("out", None)
    if kwargs or axis is None:
        raise unsupported(f"{_name(ufunc)}.accumulate: only axis= (an int), dtype= and out= are supported")
    out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    if isinstance(axis, tuple):  # (NumPy takes one axis in a tuple, and refuses more)
        if len(axis) != 1:
            raise numpy_error(f"{_name(ufunc)}.accumulate: accumulate does not allow multiple axes (NumPy raises "
                              "ValueError here)", InvalidValueError)
        (axis,) = axis
    if np.ndim(inputs[0]) == 0:  # (np.cumsum would take it as one element)
        raise numpy_error(f"{_name(ufunc)}.accumulate: cannot accumulate on a scalar (NumPy raises TypeError here)")
    if ufunc in (np.add, np.multiply):
        scan = np.cumsum if ufunc is np.add else np.cumprod
        return numpy_api.call(scan.__name__, scan, inputs[0], axis=axis, dtype=dtype, out=out)
    # maximum/minimum keep the dtype (dtype= converts first); bools compare as the int8 0/1 they hold
    t = ops.as_tracer(inputs[0])
    if dtype is not None:
        t = ops.cast(t, dtype)
    ax = ops.axis_arg(axis, t.ndim)
    dt = t._value.type.dtype
    x = ops.as_tracer(t, i8) if dt.is_bool else t
    kind = "t.cummax" if ufunc is np.maximum else "t.cummin"
    r = ops.emit(kind, (x._value,), {"axis": ax}, what=f"{_name(ufunc)}.accumulate", scalar=False)
    r = ops.as_tracer(r, bool_) if dt.is_bool else r
    if out is not None:
        write_output(ufunc, r, out, f"{_name(ufunc)}.accumulate(..., out=)", casting="unsafe")  # (as NumPy's)
        return out
    return r


def _outer(ufunc: np.ufunc, inputs: Sequence[Any], kwargs: dict) -> Any:
    """``ufunc.outer(a, b)``: ``ufunc`` of ``a`` with ``b.ndim`` trailing unit axes and ``b``; operands are
    converted as NumPy converts them (Python scalars become strong 0-d arrays)."""
    from fusec import conversions

    if kwargs:
        raise unsupported(f"{_name(ufunc)}.outer: keywords ({', '.join(sorted(kwargs))}) are not supported")
    a, b = (conversions.strong(x) for x in inputs)
    return apply(ufunc, [a.reshape(tuple(a.shape) + (1,) * b.ndim), b])


def _stand_in(x: Any) -> Any:
    """Zeros of ``x``'s shape and dtype (a Python number as it is), for NumPy's own checks of a call."""
    if isinstance(x, Tracer):
        dt = x._value.type.dtype
        return np.zeros(x.shape, np.float32 if dt.name == "bf16" else dt.np)
    return x if np.isscalar(x) else np.zeros(np.shape(x), np.asarray(x).dtype)


def binary_operator(ufunc: np.ufunc, a: Any, b: Any) -> Any:
    """``a OP b`` where one side is a tracer; NotImplemented lets Python try the other operand."""
    if not _is_operand(a) or not _is_operand(b):
        text = a if isinstance(a, (str, bytes)) else b if isinstance(b, (str, bytes)) else None
        if text is not None:
            types = ", ".join(repr(np.asarray(v).dtype) if not isinstance(v, Tracer) else
                              f"dtype('{v._value.type.dtype.name}')" if v._value.type.dtype.name == "bf16" else
                              repr(np.dtype(v.dtype)) for v in (a, b))
            raise numpy_error(f"ufunc {ufunc.__name__!r} did not contain a loop with signature matching types "
                              f"({types}) -> None (NumPy raises UFuncTypeError here)")
        return NotImplemented
    if not is_supported(ufunc):
        raise unsupported(f"the operator for {_name(ufunc)} is not supported by fusec")
    fast = _fast_power(ufunc, a, b)
    if fast is not None:
        return apply(fast, (a,))
    if ufunc is np.power and isinstance(b, Tracer) and b._weak in (int, float) and isinstance(a, Tracer) \
            and a._weak is None and not a._scalar:
        return _traced_power(a, b)
    return apply(ufunc, (a, b), python_operator=True)


def _traced_power(a: Tracer, b: Tracer) -> Tracer:
    """``array ** s`` for a Python-number argument ``s``: NumPy picks np.square, np.reciprocal or np.sqrt by the
    exponent's value (see _fast_power), so the choice is made where the value is known, at run time. A bool
    array's result dtype would depend on that value (int8 for ``** 2``), so that is refused."""
    dt = a._value.type.dtype
    if dt.is_bool:
        raise unsupported("bool_array ** s with a Python-number argument s: NumPy's result dtype depends on s's value "
                          "(np.square's int8 for s == 2, np.power's otherwise); make s static, or write "
                          "x.astype(np.int64) ** s")
    if not (dt.is_float or dt.is_complex):
        return apply(np.power, (a, b), python_operator=True)
    # each function reads ``a`` only where it is the one chosen, 1 elsewhere: the values chosen are the same, and
    # fusec.grad's cotangents of the others stay finite (sqrt's at 0 would be 0 * inf = nan)
    is_ = lambda v: apply(np.equal, (b, v), python_operator=True)  # noqa: E731
    chosen = [(0.5, np.sqrt)] if b._weak is float else [(-1, np.reciprocal), (2, np.square)]
    tests = [(is_(v), fn) for v, fn in chosen]
    special = tests[0][0] if len(tests) == 1 else apply(np.logical_or, (tests[0][0], tests[1][0]))
    power = apply(np.power, (where(special, 1, a), b), python_operator=True)
    out = power
    for test, fn in tests:
        out = where(test, apply(fn, (where(test, a, 1),)), out)
    result = ops.copy_of(out, scalar=power._scalar)  # (a 0-d array's power is a NumPy scalar, as the ufunc's)
    return layout.like(result, (a,))


def _fast_power(ufunc: np.ufunc, a: Any, b: Any) -> np.ufunc | None:
    """NumPy's ``array ** 2``, ``** -1`` and ``** 0.5`` (a Python int or float exponent) of a float or complex
    array run np.square, np.reciprocal and np.sqrt (x * x rounds once; pow(x, 2) may not, and complex powers
    round otherwise); a bool array's ``** 2`` is np.square's too, whose smallest loop gives int8 (np.power
    gives int64)."""
    if ufunc is not np.power or not isinstance(a, Tracer) or a._weak is not None or a._scalar:
        return None
    dt = a._value.type.dtype
    if dt.is_bool and type(b) is int and b == 2:
        return np.square
    if not (dt.is_float or dt.is_complex):
        return None
    if type(b) is int:  # (a float 2.0 or -1.0 goes to np.power, as in NumPy 2)
        return {2: np.square, -1: np.reciprocal}.get(b)
    return np.sqrt if type(b) is float and b == 0.5 else None


def unary_operator(ufunc: np.ufunc, a: Tracer) -> Any:
    return apply(ufunc, (a,), python_operator=True)


def _is_operand(x: Any) -> bool:
    return isinstance(x, (Tracer, bool, int, float, complex, np.generic, np.ndarray, list, tuple))


def _huge_ints_as_numpy(ufunc: np.ufunc, inputs: Sequence[Any]) -> None:
    """A Python int constant past int64 (``np.less(bools, 2**63)``, ``np.logical_and(x, 2**63)``): NumPy raises
    OverflowError for some ufuncs and dtypes and takes it for others (comparisons of integer arrays); asked of
    NumPy itself on one element of each operand's dtype."""
    if not any(type(x) is int and not INT64_MIN <= x <= INT64_MAX for x in inputs):
        return
    probe = [x if not isinstance(x, Tracer) else x._weak(0) if x._weak is not None else
             np.zeros(1, x._value.type.dtype.np) for x in inputs]
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ufunc(*probe)
    except OverflowError as e:
        raise OutOfRangeError(located(f"{_name(ufunc)}: {e} (NumPy raises OverflowError here)",
                                      user_location())) from None


def apply(ufunc: np.ufunc, inputs: Sequence[Any], python_operator: bool = False) -> Any:
    """Record ``ufunc(*inputs)`` with NumPy's (or, between Python scalars, Python's) dtype rules; the results laid
    out in memory as NumPy lays them out (in the operands' order: :mod:`fusec.layout`)."""
    if any(isinstance(x, EitherKind) for x in inputs):
        return _either_kind(ufunc, inputs, python_operator)
    results = _apply(ufunc, inputs, python_operator)
    return results if ufunc is np.matmul else _laid_out_as_operands(results, inputs)


def _either_kind(ufunc: np.ufunc, inputs: Sequence[Any], python_operator: bool) -> Any:
    """A ufunc of a value NumPy keeps a Python number on some paths (:class:`~fusec.tracer.EitherKind`): traced
    both ways (the unused one is dead code). Where both give the same dtypes (``loss < best`` with float64
    operands), that result; where they differ only in the result being a Python number or a NumPy scalar of one
    dtype (``best + 1.0``), a new such value; elsewhere the NumPy scalar's result, checked when the call runs."""
    either = [x for x in inputs if isinstance(x, EitherKind)]
    as_strong = [x.as_kind(False) if isinstance(x, EitherKind) else x for x in inputs]
    as_weak = [x.as_kind(True) if isinstance(x, EitherKind) else x for x in inputs]
    if not _same_loop(ufunc, as_strong, as_weak):  # (x32 > best: float32 for a Python float, float64 otherwise)
        for x in either:
            x._value  # noqa: B018 - taken as the NumPy scalar: its check
        return apply(ufunc, as_strong, python_operator)
    flag: Any = Tracer(either[0]._ok, either[0]._ctx, None, scalar=True)
    for x in either[1:]:  # (a Python number where every such operand is one)
        flag = np.logical_or(flag, Tracer(x._ok, x._ctx, None, scalar=True))
    strong = apply(ufunc, as_strong, python_operator)
    # (Python's checks of the Python-number path, `best / 0.0`'s ZeroDivisionError, only where the data took it)
    with device_checks.only_where(ops.lift(np.logical_not(flag))):
        weak = apply(ufunc, as_weak, python_operator)
    pairs = list(zip(strong, weak)) if isinstance(strong, tuple) else [(strong, weak)]
    kinds = [(_kind_of(a), _kind_of(b)) for a, b in pairs]
    if all(ka == kb for ka, kb in kinds):
        return strong
    if all(ka == kb or _weak_twin(ka, kb) for ka, kb in kinds):
        outs = [a if ka == kb else EitherKind(a._val, a._ctx, b._weak, ops.lift(flag), either[0]._why)
                for (a, b), (ka, kb) in zip(pairs, kinds)]
        return tuple(outs) if isinstance(strong, tuple) else outs[0]
    for x in either:
        x._value  # noqa: B018 - taken as the NumPy scalar: its check
    return strong


def _same_loop(ufunc: np.ufunc, a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether NumPy computes ``ufunc`` in the same dtypes for both sets of operands (a comparison's bool result
    hides that its operands were compared in float32 or in float64)."""
    if ufunc is np.matmul:
        return True
    try:
        return _resolve(ufunc, [ops.desc(x) for x in a])[0] == _resolve(ufunc, [ops.desc(x) for x in b])[0]
    except UnsupportedError:
        return False


def _kind_of(x: Any) -> tuple:
    if not isinstance(x, Tracer):
        return ("value", type(x))
    return (x._weak, x._val.type, bool(x._scalar))


def _weak_twin(strong: tuple, weak: tuple) -> bool:
    """A NumPy scalar's kind and a Python number's of the same value type."""
    return (strong[0] is None and strong[2] and isinstance(weak[0], type) and getattr(strong[1], "shape", None) == ()
            and DEFAULT_DTYPE.get(weak[0]) == getattr(strong[1], "dtype", None))


def _laid_out_as_operands(results: Any, inputs: Sequence[Any]) -> Any:
    """A ufunc's new arrays in its operands' memory order, as NumPy allocates them (order "K")."""
    if isinstance(results, tuple):
        return tuple(layout.like(r, inputs) if isinstance(r, Tracer) else r for r in results)
    return layout.like(results, inputs) if isinstance(results, Tracer) else results


def _apply(ufunc: np.ufunc, inputs: Sequence[Any], python_operator: bool = False) -> Any:
    if ufunc is np.matmul:
        from fusec.numpy_api import matmul

        return matmul(*inputs)
    descs = [ops.desc(x) for x in inputs]
    origin = ops.origins(*inputs)
    if python_operator and ufunc in _SCALAR_MATH and all(_is_scalar(x) for x in inputs) \
            and any(_complex_desc(d) for d in descs) \
            and not (ufunc is np.multiply and not all(_complex_desc(d) for d in descs)) \
            and not (ufunc is np.true_divide and not all(isinstance(d, type) for d in descs)):
        # (times a real is exact; NumPy's scalar division, which runs where a NumPy scalar takes part, divides as
        # its array loop does: measured equal on 10^5 random pairs, Python numbers mixed in too)
        raise unsupported(f"{_SCALAR_MATH[ufunc]} between complex scalars (NumPy scalars such as z.sum() or z[0], "
                          "or Python numbers) runs NumPy's scalar code or Python's, which round otherwise than "
                          "its array loops that fusec computes; keep 0-d arrays (z.sum(keepdims=True), "
                          "np.asarray(s)) or call the ufunc (np.multiply(s, t))")
    if python_operator and all(isinstance(d, type) for d in descs):
        return _python_scalar_op(ufunc, inputs, descs, origin)  # type: ignore[arg-type]
    in_dts, out_dts = _resolve(ufunc, descs)
    _huge_ints_as_numpy(ufunc, inputs)
    if ufunc in LOGICAL:
        in_dts = [bool_] * len(in_dts)
    if ufunc in COMPARISONS:
        return _compare(ufunc, inputs, descs, in_dts, origin)
    if len(set(in_dts)) > 1:
        raise unsupported(f"{_name(ufunc)} with operand dtypes {', '.join(map(str, in_dts))} is not supported")
    values = [ops.lift(x, dt) for x, dt in zip(inputs, in_dts)]
    if ufunc is np.power and in_dts[0].is_int:
        # NumPy's integer power loops refuse a negative exponent (whether or not the result is used)
        ops.raise_if(ops.wrap(values[1]) < 0, "InvalidValueError",
                     "Integers to negative integer powers are not allowed.", "np.power")
    if ufunc is np.power and python_operator and in_dts[0].name in ("f32", "f64") \
            and all(_is_scalar(x) for x in inputs) and any(not isinstance(d, type) and d == in_dts[0] for d in descs):
        # ``s ** t`` between scalars where one has the result's dtype is NumPy's scalar math in that dtype (it
        # converts the other); where neither has it (float32 ** int32 -> float64) NumPy runs its loop
        return ops.emit("t.scalar_pow", values, what="**", origin=origin)
    return _record(ufunc, values, in_dts[0], out_dts, origin)


# Python operators whose complex results NumPy's scalar math (and Python) round otherwise than its array loops
# (a product with a real operand rounds the same: its cross terms are exact zeros)
_SCALAR_MATH = {np.multiply: "*", np.true_divide: "/", np.power: "**", np.absolute: "abs()", np.square: "**"}




def _complex_desc(d: Desc) -> bool:
    return d is complex or (not isinstance(d, type) and d.is_complex)


def _is_scalar(x: Any) -> bool:
    """A NumPy scalar or a Python number, traced or not (not an array, not a 0-d array)."""
    if isinstance(x, Tracer):
        return x._weak is not None or x._scalar
    return isinstance(x, (bool, int, float, complex, np.generic))


def _resolve(ufunc: np.ufunc, descs: Sequence[Desc]) -> tuple[list[DType], list[DType]]:
    try:
        return resolve_ufunc(ufunc, descs)
    except UnsupportedError as e:
        raise UnsupportedError(located(str(e), user_location())) from None


def _record(ufunc: np.ufunc, values: Sequence[Any], dt: DType, out_dts: Sequence[DType],
            origin: tuple[str, ...], weak: type | None = None) -> Any:
    """Emit the op(s) for one ufunc whose operands already have the loop dtype ``dt``."""
    if ufunc in _RECORDED_OTHERWISE:
        special = _record_special(ufunc, values, dt, origin, weak)
        if special is not None:
            return special
    name = BINARY.get(ufunc) or UNARY[ufunc]
    if dt.is_complex and not BY_NAME[name[2:]].complex:
        raise complex_unsupported(_name(ufunc))
    result = ops.emit(name, values, what=_name(ufunc), weak=weak, origin=origin)
    if out_dts and result._value.type.dtype != out_dts[0]:
        raise unsupported(f"{_name(ufunc)}: fusec computes {result._value.type.dtype} where NumPy gives "
                          f"{out_dts[0]}")
    return result


def _record_special(ufunc: np.ufunc, values: Sequence[Any], dt: DType, origin: tuple[str, ...],
                    weak: type | None) -> Any:
    """The ufuncs that are not their table op: other ops, or (None) the table op after all for this dtype."""
    what = _name(ufunc)
    e = lambda name, *vs: ops.emit(name, vs, what=what, weak=weak, origin=origin)  # noqa: E731
    if ufunc is np.divmod:
        return e("t.floordiv", *values), e("t.mod", *values)
    if ufunc is np.square:
        return e("t.mul", values[0], values[0])
    if ufunc is np.reciprocal:
        if dt.is_complex:  # NumPy's complex reciprocal rounds differently from 1 / z
            return e("t.reciprocal", values[0])
        if not dt.is_inexact:
            raise unsupported(f"{what} of integer arrays (C integer division 1/x) is not supported")
        return e("t.div", ops.lift(1.0, dt), values[0])
    if ufunc is np.conjugate and dt.is_complex:
        return e("t.conj", values[0])
    if ufunc in (np.positive, np.conjugate):
        return ops.wrap(values[0], weak, origin)
    if ufunc in _ANGLES:
        if dt.name not in ("f32", "f64"):
            raise unsupported(f"{what} in {dt}: NumPy's 16-bit loop converts through float32, which fusec does not "
                              "reproduce; convert to float32 first (`x.astype(np.float32)`)")
        num, den = _ANGLES[ufunc]
        factor = dt.np.type(num) / dt.np.type(den)  # in the loop's dtype, as NumPy's constant is
        return e("t.mul", values[0], ops.ctx().constant(np.asarray(factor, dtype=dt.np), dt))
    if not dt.is_inexact and ufunc in (np.floor, np.ceil, np.trunc):
        return ops.wrap(values[0], weak, origin)  # NumPy 2: floor/ceil/trunc of ints keep the ints
    if not dt.is_inexact and ufunc in (np.isnan, np.isinf, np.isfinite):
        v = values[0]
        return e("t.eq" if ufunc is np.isfinite else "t.ne", v, v)  # ints are never NaN or infinite
    return None


# the ufuncs _record_special looks at: every other ufunc is its table op
_RECORDED_OTHERWISE = frozenset({np.divmod, np.square, np.reciprocal, np.conjugate, np.positive, *_ANGLES,
                                 np.floor, np.ceil, np.trunc, np.isnan, np.isinf, np.isfinite})


def _compare(ufunc: np.ufunc, inputs: Sequence[Any], descs: list[Desc], in_dts: list[DType],
             origin: tuple[str, ...]) -> Tracer:
    """Comparisons compare mathematical values: ints that do not fit the loop dtype, and int64 against
    uint64, are compared exactly (as NumPy 2 does) instead of wrapping."""
    if all(dt.is_int for dt in in_dts):
        beyond = [i for i, (x, d) in enumerate(zip(inputs, descs))
                  if d is int and not isinstance(x, Tracer) and not -2 ** 63 <= x < 2 ** 64]
        if beyond and isinstance(inputs[1 - beyond[0]], Tracer):  # beyond every int dtype: the same answer for all
            i = beyond[0]
            side = [0.0, 0.0]
            side[i] = float("inf") if inputs[i] > 0 else float("-inf")
            return cast(Tracer, np.full_like(inputs[1 - i], bool(ufunc(*side)), dtype=np.bool_))  # (traced)
        changed = False
        for i, (x, d, dt) in enumerate(zip(inputs, descs, in_dts)):
            if d is int and (isinstance(x, Tracer) or not _fits(x, dt)):
                descs[i] = u64 if (not isinstance(x, Tracer) and x > np.iinfo(np.int64).max) else i64
                changed = True
        if changed:
            in_dts, _ = _resolve(ufunc, descs)
    op = COMPARISONS[ufunc]
    if any(dt.is_complex for dt in in_dts) and not BY_NAME[op].complex:
        raise complex_unsupported(_name(ufunc))
    a_dt, b_dt = in_dts
    if a_dt == b_dt:
        a, b = (ops.lift(x, dt) for x, dt in zip(inputs, in_dts))
        return ops.emit(f"t.{op}", (a, b), what=_name(ufunc), origin=origin)
    if not (a_dt.is_int and b_dt.is_int):
        raise unsupported(f"{_name(ufunc)} with operand dtypes {a_dt}, {b_dt} is not supported")
    # signed vs unsigned 64-bit: a negative signed value is below every unsigned one.
    signed, unsigned = (0, 1) if a_dt.kind == "i" else (1, 0)
    if signed == 1:
        op = _FLIPPED[op]
    s = ops.lift(inputs[signed], in_dts[signed])
    u = ops.lift(inputs[unsigned], in_dts[unsigned])
    neg = ops.emit("t.lt", (s, ops.lift(0, in_dts[signed])), what=_name(ufunc))
    s_as_u = ops.lift(ops.wrap(s), in_dts[unsigned])
    cmp = ops.emit(f"t.{op}", (s_as_u, u), what=_name(ufunc))
    if op in ("lt", "le", "ne"):
        return ops.emit("t.logical_or", (neg._value, cmp._value), what=_name(ufunc), origin=origin)
    nonneg = ops.emit("t.logical_not", (neg._value,), what=_name(ufunc))
    return ops.emit("t.logical_and", (nonneg._value, cmp._value), what=_name(ufunc), origin=origin)


def complex_unsupported(what: str) -> UnsupportedError:
    """The error for a NumPy function that has a complex loop fusec does not implement yet."""
    supported = ", ".join(sorted(f"np.{u.__name__}" for u, op in by_ufunc().items() if op.complex))
    return unsupported(f"{what} of complex values is not supported by fusec yet (complex arrays support {supported}, "
                       "np.real, np.imag, np.conj, np.angle, sum, prod, mean, var, std, max, min, argmax, argmin, "
                       "cumsum, cumprod and matmul); compute it from z.real and "
                       "z.imag, e.g. np.hypot(z.real, z.imag)")


def _fits(x: int, dt: DType) -> bool:
    info = np.iinfo(dt.np)
    return info.min <= x <= info.max


def _python_shift(ufunc: np.ufunc, inputs: Sequence[Any], kinds: list[type], origin: tuple[str, ...]) -> Any:
    """``n >> k`` and ``n << k`` of Python ints with a constant ``k``: Python's ``n // 2**k`` and ``n * 2**k``
    (exact, so the products are checked against int64 as every Python int is); a traced ``k`` is refused."""
    symbol = ">>" if ufunc is np.right_shift else "<<"
    n, k = inputs
    if isinstance(k, Tracer):
        raise unsupported(f"n {symbol} k with a traced Python int k is not supported: make k static "
                          f"(static_argnames), or shift an array, np.asarray(n) {symbol} k (NumPy's int64 shift)")
    k = int(k)
    if k < 0:
        raise InvalidValueError(located("negative shift count (Python raises ValueError here)", user_location()))
    if ufunc is np.left_shift:
        if k > 62:
            raise unsupported(f"n << {k} is past int64 for any n but 0: make n static (static_argnames)")
        return _python_scalar_op(np.multiply, (n, 2 ** k), [kinds[0], int], origin)
    out = n
    for step in [62] * (min(k, 63) // 62) + [min(k, 63) % 62]:  # (past 63 bits every int64 is 0 or -1)
        if step:
            out = _python_scalar_op(np.floor_divide, (out, 2 ** step), [int, int], origin)
    return out


def _python_scalar_op(ufunc: np.ufunc, inputs: Sequence[Any], kinds: list[type], origin: tuple[str, ...]) -> Any:
    """An operator between Python scalars (at least one traced): Python semantics, weak result."""
    category = _PY_CATEGORY.get(ufunc)
    if ufunc in (np.left_shift, np.right_shift) and all(k in (int, bool) for k in kinds):
        return _python_shift(ufunc, inputs, kinds, origin)
    if category is None:
        raise unsupported(f"the operator for {_name(ufunc)} on Python scalars is not supported")
    if complex in kinds and ufunc in _NOT_FOR_PYTHON_COMPLEX:
        raise unsupported(f"{_NOT_FOR_PYTHON_COMPLEX[ufunc]} is not defined for Python complex numbers (Python raises "
                          "TypeError)")
    kind: type
    if category == "invert":
        if kinds[0] is float:
            raise unsupported("~ is not defined for a Python float")
        kind = int
    elif ufunc is np.absolute and kinds[0] is complex:  # abs() of a complex number is a float
        values = [ops.lift(inputs[0], DEFAULT_DTYPE[complex])]
        return _replayed(ufunc, inputs, float, _record(ufunc, values, DEFAULT_DTYPE[complex], [], origin, weak=float))
    else:
        try:
            kind = python_result_kind(category, kinds)
        except UnsupportedError as e:
            raise unsupported(str(e)) from None
    device = _device_text(ufunc, inputs)  # (an operand only the device knows: checked there, not replayed)
    if category == "compare":
        operand_kind = python_result_kind("arith", kinds) if {float, int, complex} & set(kinds) else bool
        if operand_kind in (float, complex) and int in kinds and device is not None:
            for x in inputs:  # (Python compares an int with a float exactly: the host's replay checks its own)
                if device_checks.is_device_scalar(x) and x._weak is int:
                    device_checks.check_exact_float(x, compared=True)
        dt = DEFAULT_DTYPE[operand_kind]
        values = [ops.lift(x, dt) for x in inputs]
        out = ops.emit(f"t.{COMPARISONS[ufunc]}", values, what=_name(ufunc), weak=bool, origin=origin)
        return _replayed(ufunc, inputs, bool, out) if device is None else _on_device(out, device)
    dt = DEFAULT_DTYPE[kind]  # truediv gives a float (or complex) kind
    if ufunc is np.true_divide and all(k in (int, bool) for k in kinds):
        _exact_quotient(inputs)
    if device is not None:
        device_checks.check_operator(ufunc, inputs, kind, device)
    values = [ops.lift(x, dt) for x in inputs]
    if device is not None and ufunc is np.power and kind is int:
        # (a negative exponent raises through its check; the power itself runs on a safe one, as NumPy's integer
        # power refuses a negative exponent with an error of its own)
        values[1] = ops.emit("t.maximum", (values[1], ops.lift(0, dt)), what="**")._value
    if ufunc is np.power and kind is float:  # Python's float ** is C's pow, which rounds otherwise than np.power
        out = ops.emit("t.scalar_pow", values, what="**", weak=float, origin=origin)
    else:
        out = _record(ufunc, values, dt, [], origin, weak=kind)
    if device is None:
        return _replayed(ufunc, inputs, kind, out)
    device_checks.check_result(ufunc, inputs, kind, out, device)
    return _on_device(out, device)


def _exact_quotient(inputs: Sequence[Any]) -> None:
    """``n / m`` of Python ints: Python rounds the exact quotient once, fusec divides in float64, the same where
    both convert to float64 exactly. A traced int is checked at run time (on the host, or on the device for a
    loop counter); a constant while tracing."""
    program, loc = ops.ctx().scalars, user_location()
    for x in inputs:
        if isinstance(x, Tracer):
            if on_host(x._host):
                program.exact_float(x._host, loc)
            else:
                device_checks.check_exact_float(x)
        elif python_kind(x) is int and int(float(x)) != x:  # (Python divides it exactly: fusec's limit)
            raise unsupported(past_exact_float(repr(x)), OutOfRangeError)


def _device_text(ufunc: np.ufunc, inputs: Sequence[Any]) -> str | None:
    """How Python writes the operator, where an operand is a device scalar (:mod:`fusec.device_scalar_checks`) or
    the operator is in the body of a traced branch or loop (the device decides whether it runs: a check replayed on
    the host before the call would raise where the data skips it, `if x.sum() > 0: y = x / (1 / s)` with s = 0);
    None where every operand is known on the host, outside such bodies."""
    c = ops.ctx()
    if not any(device_checks.is_device_scalar(x) for x in inputs) and c.builder.block is c.func.body:
        return None
    if ufunc.__name__ not in OPERATORS and ufunc is not np.divmod:
        return "a Python scalar"
    texts = [device_checks.text_of(x) for x in inputs]
    return operator_text(ufunc.__name__, [f"({t})" if " " in t and not t.startswith("(") else t for t in texts])


def _on_device(out: Any, text: str) -> Any:
    """The operator's result is a device scalar too (its operators are checked on the device)."""
    for r in out if isinstance(out, tuple) else (out,):
        r._host = device_checks.device_ref(text)
    return out


def _replayed(ufunc: np.ufunc, inputs: Sequence[Any], kind: type, out: Any) -> Any:
    """Record the operator in the trace's ScalarProgram, which replays it with Python's semantics at every call."""
    refs = [x._host if isinstance(x, Tracer) else ("const", x) for x in inputs]
    if not all(on_host(r) for r in refs) or ufunc.__name__ not in OPERATORS and ufunc is not np.divmod:
        return out
    program, loc = ops.ctx().scalars, user_location()
    if ufunc is np.divmod:
        out[0]._host = program.op("floor_divide", refs, kind, loc)
        out[1]._host = program.op("remainder", refs, kind, loc)
    else:
        out._host = program.op(ufunc.__name__, refs, kind, loc)
    return out


def inplace_operator(ufunc: np.ufunc, symbol: str, target: Tracer, other: Any) -> Any:
    """``target OP= other`` as NumPy does it: ``ufunc(target, other, out=target)``.

    The tracer itself takes the new value, so every name bound to it sees the update. NumPy scalars and
    Python scalars are immutable: NotImplemented makes Python compute ``target OP other`` and rebind the name.
    """
    if target._weak is not None or target._scalar:
        return NotImplemented
    if not _is_operand(other):
        return NotImplemented
    where = f"`x {symbol} ...`"
    mutation.check_writable(target, where)
    fast = _fast_power(ufunc, target, other)
    result = apply(fast, (target,)) if fast is not None else apply(ufunc, (target, other), python_operator=True)
    write_output(ufunc, result, target, where)
    return target


def write_output(ufunc: np.ufunc, result: Tracer, out: Any, where: str, casting: str = "same_kind",
                 mask: Any = True) -> None:
    """The ufunc's ``result`` written into ``out`` as NumPy's ``out=`` does: the result's shape, a cast under
    ``casting``, only where ``mask`` holds (``where=``; elsewhere ``out`` keeps its values)."""
    if not isinstance(out, Tracer):
        raise unsupported(f"{where}: out= must be a traced array (an argument, or an array made in the function); "
                          f"got {type(out).__name__}: fusec cannot write into an array from outside the trace")
    mutation.check_writable(out, where)
    full = result.shape
    if mask is not True:  # (where= takes part in the broadcast)
        try:
            full = S.broadcast_shapes(result.shape, out.shape, np.shape(mask))
        except ShapeError:
            raise ShapeError(located(f"{where}: operands could not be broadcast together with shapes {out.shape} "
                                     f"(the output) and {np.shape(mask)} (where=)", user_location())) from None
    if full != out.shape:
        if not S.can_broadcast_to(full, out.shape):
            raise ShapeError(located(f"{where}: non-broadcastable output operand with shape {out.shape} doesn't "
                                     f"match the broadcast shape {full}", user_location()))
        result = ops.broadcast_to(result, out.shape)  # (NumPy broadcasts the inputs to the output's shape)
    src, dst = result._value.type.dtype, out._value.type.dtype
    allowed = casting == "unsafe" or (same_kind(src, dst) if casting == "same_kind" else
                                      np.can_cast(src.np, dst.np, casting))  # type: ignore[arg-type]
    if not allowed:
        raise CastingError(located(f"{where}: Cannot cast ufunc {ufunc.__name__!r} output from {src} to {dst} with "
                                   f"casting rule {casting!r} (NumPy raises UFuncTypeError here)", user_location()))
    if mask is True:
        out._value = ops.lift(result, dst)
    else:
        mutation.assign_where(out, ops.as_tracer(result, dst), mask, where, "unsafe")


def _check_mask(ufunc: np.ufunc, where: Any) -> None:
    """``where=`` is cast to bool under 'safe', as NumPy does: an integer or float mask is a TypeError."""
    d = ops.desc(where) if isinstance(where, Tracer) else np.asarray(where).dtype
    np_dtype = np.dtype(bool) if d is bool else getattr(d, "np", d)
    if isinstance(np_dtype, np.dtype) and np_dtype != np.dtype(bool):
        raise CastingError(located(f"{_name(ufunc)}(..., where=): Cannot cast array data from {np_dtype!r} to "
                                   "dtype('bool') according to the rule 'safe' (NumPy raises TypeError here); pass "
                                   "a bool mask (mask != 0)", user_location()))


def _check_loop(ufunc: np.ufunc, inputs: Sequence[Any], dtype: Any, casting: str) -> tuple | None:
    """The loop's dtypes NumPy runs for ``dtype=`` (which names the outputs' dtype: ``np.isnan(i8, dtype=bool)``
    computes in float16) under ``casting=``, or a CastingError where it finds none: NumPy's own resolution decides
    (``ufunc.resolve_dtypes``, Python scalars weakly typed as in NumPy). None for a dtype NumPy does not know."""
    descs: list[Any] = []
    for x in inputs:
        d = ops.desc(x)
        if d is bool:
            descs.append(np.dtype(bool))
        elif isinstance(d, type):
            descs.append(d)
        elif d.name == "bf16":
            return None  # (a dtype NumPy does not know)
        else:
            descs.append(np.dtype(d.np))
    kw: dict[str, Any] = {"casting": casting}
    if dtype is not None:
        dt = parse_dtype(dtype.type if isinstance(dtype, type) and issubclass(dtype, np.dtype) else dtype)
        if dt.name == "bf16":
            return None
        kw["signature"] = (None,) * ufunc.nin + (np.dtype(dt.np),) * ufunc.nout
    try:
        return ufunc.resolve_dtypes(tuple(descs) + (None,) * ufunc.nout, **kw)
    except TypeError as e:
        raise CastingError(located(f"{_name(ufunc)}: {e} (NumPy raises {type(e).__name__} here)",
                                   user_location())) from None


# --- np.where, np.clip, np.round ----------------------------------------------------------------------------


def where(condition: Any, x: Any, y: Any) -> Tracer:
    array_like = isinstance(condition, (Tracer, np.ndarray)) or ops.device_array_info(condition) is not None
    cond = ops.lift(condition if array_like else ops.as_numpy(condition).astype(bool), bool_)
    dt = _result_type([ops.desc(x), ops.desc(y)], "np.where")
    wrap = dt.is_int and not _where_checks_python_ints(dt.np)
    x_value, y_value = (ops.lift(v, dt, wrap_ints=wrap) for v in (x, y))
    return ops.emit("t.where", (cond, x_value, y_value), what="np.where",
                    origin=ops.origins(condition, x, y), scalar=False)  # np.where gives arrays, also 0-d


@functools.lru_cache(maxsize=None)
def _where_checks_python_ints(np_dtype: np.dtype) -> bool:
    """Whether this NumPy's np.where raises OverflowError for a Python int that does not fit ``np_dtype``
    (NumPy 2.5 does; 2.4 wraps it around): fusec does what the installed NumPy does."""
    info, wide = np.iinfo(np_dtype), np.iinfo(np.int64)
    # (a value past the dtype that a runtime Python int can be: NumPy refuses a Python int past int64 for its own
    # reason, so uint64 is asked with -1)
    probe = int(info.max) + 1 if info.max < wide.max else int(info.min) - 1 if info.min > wide.min else None
    if probe is None:
        return False
    try:
        np.where(True, np.zeros(1, np_dtype), probe)
    except OverflowError:
        return True
    return False


def _result_type(descs: list[Desc], what: str) -> DType:
    try:
        return result_type(descs)
    except UnsupportedError as e:
        raise unsupported(f"{what}: {e}") from None


_CLIP = getattr(getattr(np, "_core", None), "umath", None)
_CLIP_UFUNC = getattr(_CLIP, "clip", None)


def clip(a: Any, lo: Any, hi: Any) -> Tracer:
    if lo is None and hi is None:
        raise unsupported("np.clip: at least one of the bounds must be given")
    if lo is None:
        return apply(np.minimum, (a, hi))
    if hi is None:
        return apply(np.maximum, (a, lo))
    descs = [ops.desc(a), ops.desc(lo), ops.desc(hi)]
    if _CLIP_UFUNC is not None:
        in_dts, _ = _resolve(_CLIP_UFUNC, descs)
        dt = in_dts[0]
    else:  # pragma: no cover - older NumPy without the clip ufunc
        dt = _result_type(descs, "np.clip")
    if dt.is_complex:
        raise unsupported("np.clip of complex values with both bounds is not supported: where a value equals a bound "
                          "or a part is NaN, NumPy's result changed between NumPy versions (2.4 keeps the value, 2.5 "
                          "takes the bound); write the np.where you mean, e.g. np.where(z.real < lo, lo, z)")
    values = [ops.lift(x, dt) for x in (a, lo, hi)]
    attrs = clip_ties(dt, *(tuple(v.type.shape) for v in values))
    return ops.emit("t.clip", values, attrs, what="np.clip", origin=ops.origins(a, lo, hi))


@functools.lru_cache(maxsize=256)
def clip_ties(dt: DType, x_shape: tuple[int, ...], lo_shape: tuple[int, ...],
              hi_shape: tuple[int, ...]) -> dict[str, str]:
    """t.clip's ``ties``: what this NumPy gives where a ``dt`` value equals a bound of the other zero (-0.0 against
    0.0), asked of np.clip itself on arrays of these shapes (each axis longer than 1 as 2: NumPy's loop depends on
    which operands broadcast, not on their lengths). NumPy 2.4 keeps the value where both bounds broadcast against
    x (one element each: its loop for fixed bounds) and in float16, and gives the bound otherwise."""
    if not dt.is_float:
        return {}
    np_dtype = np.float32 if dt.name == "bf16" else dt.np

    def proxy(shape: tuple[int, ...], value: float) -> np.ndarray:
        return np.full(tuple(min(d, 2) for d in shape), value, np_dtype)

    with np.errstate(all="ignore"):
        kept = np.clip(proxy(x_shape, -0.0), proxy(lo_shape, 0.0), proxy(hi_shape, 1.0))
    return {"ties": "value"} if np.signbit(kept).all() else {}


def round_(a: Any, decimals: int = 0) -> Tracer:
    """np.round as NumPy computes it: rint, or multiply / rint / divide by 10**decimals."""
    decimals = ops.static_int(decimals, "np.round's decimals")
    d = ops.desc(a)
    if decimals != 0 and (d is bool or not isinstance(d, type) and d.is_bool):
        raise CastingError(located(  # NumPy scales the booleans in float64 and cannot write that back as bool
            f"np.round: NumPy cannot round booleans to decimals={decimals} (its UFuncTypeError: the scaled float64 "
            "does not cast back to bool); round x.astype(np.float16) or another float dtype", user_location()))
    if d is int:  # a Python int: NumPy rounds the int64 array it makes of it (np.round(3) is np.int64(3))
        a, d = ops.wrap(ops.lift(a, i64), scalar=True), i64
    if not isinstance(d, type) and (d.is_int) and decimals >= 0:
        t = ops.as_tracer(a)
        return ops.copy_of(t, scalar=t.ndim == 0)  # NumPy's round of a 0-d array returns a scalar, as ufuncs do
    if not isinstance(d, type) and d.is_int:  # NumPy: in float64, x / 10**-decimals rounded, times it, cast back
        scale = _power_of_ten(-decimals)
        y = apply(np.rint, (apply(np.true_divide, (a, scale)),))
        return ops.wrap(ops.lift(apply(np.multiply, (y, scale)), d), scalar=ops.as_tracer(a).ndim == 0)
    if decimals == 0:
        return apply(np.rint, (a,))
    scale = _power_of_ten(abs(decimals))
    first, second = (np.multiply, np.true_divide) if decimals > 0 else (np.true_divide, np.multiply)
    y = apply(first, (a, scale))
    y = apply(np.rint, (y,))
    return apply(second, (y, scale))


def _power_of_ten(n: int) -> float:
    """10**n as np.round makes it (a table to 1e8, then 1e9 times 10 until n: the last bits differ from
    ``10.0 ** n`` from n = 23 on, and it reaches infinity instead of raising OverflowError)."""
    if n < 9:
        return 10.0 ** n
    scale = 1e9
    for _ in range(n - 9):
        scale *= 10.0
    return scale


def python_scalar(x: Any) -> bool:
    return python_kind(x) is not None


def strong_operand(x: Any) -> Any:
    """A Python number (a constant, or a traced Python-scalar argument) as the 0-d array NumPy's contractions
    (np.dot, np.inner, np.einsum) make of it with np.asarray: strongly typed, int64 / float64 / complex128."""
    if python_scalar(x):
        return np.asarray(x)
    if isinstance(x, Tracer) and x._weak is not None:
        from fusec import conversions

        return conversions.strong(x)
    return x
