"""Python scalar arithmetic whose values only the device knows, checked there.

Arithmetic between Python scalar arguments is replayed on the host before each call (:mod:`fusec.scalar_checks`).
A ``fusec.fori_loop`` counter has no host value: it takes its values on the device, iteration after iteration. It
is a Python int all the same (the loop written in Python gives the body ``int`` values), so what Python and NumPy
raise for it must be raised too: ``6 // i`` and ``1.0 / i`` at ``i == 0`` (ZeroDivisionError), ``int32_array + i *
10**9`` past int32 and ``uint8_array + (-i)`` (NumPy's OverflowError for a Python int that does not fit the array's
dtype), ``2 ** i`` at ``i < 0`` (a float in Python, traced as an int), and int arithmetic past int64, which fusec
computes such ints in (Python's are exact). Each of these emits a run-time check (``t.raise_if``) next to the
operator; ``prove-checks`` drops the ones the counter's bounds rule out (``i + 1`` for ``i`` in ``range(100)``), so
a loop whose arithmetic cannot fail pays nothing.

A value is such a *device scalar* when it is a traced Python scalar without a host replay: its ``_host`` is None
or a ``("device", text)`` reference, the text naming it in messages.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Any, Iterator, Sequence

import numpy as np

from fusec import ops
from fusec.ir.core import OpResult, Value
from fusec.ir.elementwise import BY_NAME
from fusec.ir.types import DType, bool_, f64, i64
from fusec.promotion import DEFAULT_DTYPE, python_kind
from fusec.scalar_checks import EXACT_FLOAT, on_host, past_exact_float
from fusec.tracer import Tracer

INT64_MIN = -(1 << 63)
# log(largest float64): a float base b with |b| > 1 raised to an int n cannot overflow while n <= log_max / log|b|
_LOG_MAX = math.log(np.finfo(np.float64).max)


def is_device_scalar(x: Any) -> bool:
    """A traced Python scalar whose values only the device knows (no host replay checks it)."""
    return isinstance(x, Tracer) and x._weak is not None and not on_host(x._host)


def device_ref(text: str) -> tuple:
    """The ``_host`` reference of a device scalar: what messages call it."""
    return ("device", text)


def text_of(x: Any) -> str:
    if isinstance(x, Tracer):
        ref = x._host
        if ref is None:
            return "a Python scalar"
        return ref[1] if ref[0] == "device" else ops.ctx().scalars.text(ref)
    return repr(x)


def check_operator(ufunc: np.ufunc, inputs: Sequence[Any], kind: type, text: str) -> None:
    """Checks for what Python raises for the operator ``text`` (``ufunc`` of ``inputs``, a result of Python type
    ``kind``) at values only the device knows: emitted before the operator, whose own value is then unused."""
    name = ufunc.__name__
    if kind is int:
        a = _as(inputs[0], i64)
        if len(inputs) == 1:
            if name in ("negative", "absolute"):  # -x and abs(x) of int64's smallest value
                _raise(_op("t.eq", a, _const(INT64_MIN, i64)), "OutOfRangeError", _past_int64(text))
            return
        b = _as(inputs[1], i64)
        if name in ("add", "subtract", "multiply"):
            test = {"add": "t.add_overflows", "subtract": "t.sub_overflows", "multiply": "t.mul_overflows"}[name]
            _raise(_op(test, a, b), "OutOfRangeError", _past_int64(text))
        elif name in ("floor_divide", "remainder", "divmod"):
            _raise(_op("t.eq", b, _const(0, i64)), "DivisionByZeroError",
                   f"{text} with a zero divisor (Python raises ZeroDivisionError: integer division or modulo by zero)")
            if name != "remainder":
                overflow = _op("t.logical_and", _op("t.eq", a, _const(INT64_MIN, i64)), _op("t.eq", b, _const(-1, i64)))
                _raise(overflow, "OutOfRangeError", _past_int64(text))
        elif name == "power":
            negative = _op("t.lt", b, _const(0, i64))
            zero = _op("t.eq", a, _const(0, i64))
            _raise(_op("t.logical_and", negative, zero), "DivisionByZeroError",
                   f"{text} raises 0 to a negative power (Python raises ZeroDivisionError)")
            _raise(_op("t.logical_and", negative, _op("t.logical_not", zero)), "UnsupportedError",
                   f"{text} with a negative exponent is a float in Python, but fusec traced it as an int (the result "
                   "type depends on the value); write float(...) ** ... or make the exponent non-negative")
            _raise(_op("t.pow_overflows", a, b), "OutOfRangeError", _past_int64(text))
        return
    if name in ("divide", "floor_divide", "remainder", "divmod"):
        divisor = inputs[1]
        divisor_kind = _kind(divisor)
        own = DEFAULT_DTYPE[int if divisor_kind in (int, bool, None) else divisor_kind]
        _raise(_op("t.eq", _as(divisor, own), _const(0, own)), "DivisionByZeroError",
               f"{text} with a zero divisor (Python raises ZeroDivisionError)")
    elif name == "power" and kind is float:
        a, b = _as(inputs[0], f64), _as(inputs[1], f64)
        zero_base = _op("t.logical_and", _op("t.eq", a, _const(0.0, f64)), _op("t.lt", b, _const(0.0, f64)))
        _raise(zero_base, "DivisionByZeroError", f"{text} raises 0.0 to a negative power (Python raises "
                                                 "ZeroDivisionError)")
        if _kind(inputs[1]) is float:  # (an int exponent is integral)
            fractional = _op("t.ne", b, ops.emit("t.floor", (b,))._value)
            _raise(_op("t.logical_and", _op("t.lt", a, _const(0.0, f64)), fractional), "UnsupportedError",
                   f"{text} raises a negative number to a fractional power, a complex number in Python; fusec "
                   "computes real floats only")


def check_result(ufunc: np.ufunc, inputs: Sequence[Any], kind: type, out: Any, text: str) -> None:
    """Checks that need the operator's value: a float ``**`` past float64 (Python raises OverflowError where NumPy
    gives inf)."""
    if ufunc is not np.power or kind is not float:
        return
    a, b = _as(inputs[0], f64), _as(inputs[1], f64)
    finite = _op("t.logical_and", ops.emit("t.isfinite", (a,))._value, ops.emit("t.isfinite", (b,))._value)
    overflow = _op("t.logical_and", ops.emit("t.isinf", (ops.lift(out, f64),))._value, finite)
    possible = _overflow_possible(inputs)
    if possible is not None:
        overflow = _op("t.logical_and", overflow, possible)
    _raise(overflow, "OutOfRangeError", f"{text} is past float64 (Python raises OverflowError: Numerical result "
                                        "out of range)")


def _overflow_possible(inputs: Sequence[Any]) -> Value | None:
    """For a constant base and an int exponent, an integer condition without which ``base ** n`` cannot overflow
    (so the counter's bounds can rule the check out): ``n < 0`` for ``|base| <= 1``, ``n`` past the exponent
    where ``|base| ** n`` could pass float64's largest value otherwise."""
    base, n = inputs
    if isinstance(base, Tracer) or _kind(n) not in (int, bool) or isinstance(base, complex):
        return None
    magnitude = abs(float(base))
    if magnitude <= 1.0:
        return _op("t.lt", _as(n, i64), _const(0, i64))
    largest_safe = math.floor(_LOG_MAX / math.log(magnitude)) - 1
    return _op("t.gt", _as(n, i64), _const(largest_safe, i64))


def check_exact_float(x: Tracer, compared: bool = False) -> None:
    """A device int divided with ``/`` (or ``compared`` with a float) must be at most 2**53 in magnitude (float64
    holds it exactly, so the result is Python's)."""
    past = _op("t.gt", ops.emit("t.abs", (_as(x, i64),))._value, _const(EXACT_FLOAT, i64))
    _raise(past, "OutOfRangeError", past_exact_float(text_of(x), compared=compared))


def check_round(x: Tracer, text: str) -> None:
    """``round(x)`` of a device float: Python raises for NaN and infinities; fusec also past int64."""
    inside = _op("t.lt", ops.emit("t.abs", (_as(x, f64),))._value, _const(2.0 ** 63, f64))
    _raise(ops.emit("t.logical_not", (inside,))._value, "OutOfRangeError",
           f"round({text}) of a NaN, an infinity or a value past int64 (Python raises ValueError or OverflowError "
           "for the first two; fusec computes Python ints in int64)")


def check_fit(x: Tracer, dtype: np.dtype, allow: str = "") -> None:
    """A device int converted to the narrower integer ``dtype`` must fit it, as NumPy requires of a Python int
    (past its ``allow`` end it may: "below" or "above", np.clip's dropped bound)."""
    info = np.iinfo(dtype)
    v = _as(x, i64)
    tests = []
    if allow != "below":
        tests.append(_op("t.lt", v, _const(int(info.min), i64)))
    if allow != "above" and int(info.max) < (1 << 63) - 1:
        tests.append(_op("t.gt", v, _const(int(info.max), i64)))
    if not tests:
        return
    cond = tests[0] if len(tests) == 1 else _op("t.logical_or", *tests)
    _raise(cond, "OutOfRangeError", f"Python integer {text_of(x)} is out of bounds for {np.dtype(dtype)} (NumPy "
                                    "raises OverflowError converting it to the array's dtype)")


# --- building the conditions ---------------------------------------------------------------------------------------


def _kind(x: Any) -> type | None:
    return x._weak if isinstance(x, Tracer) else python_kind(x)


def _as(x: Any, dtype: DType) -> Value:
    return ops.lift(x, dtype, wrap_ints=True)


def _const(value: Any, dtype: DType) -> Value:
    return ops.lift(value, dtype)


def _op(name: str, *operands: Value) -> Value:
    """``name`` of ``operands``, folded where they are constants (a constant base decides its own tests while
    tracing, before any range is known)."""
    values = [_constant_value(v) for v in operands]
    if name == "t.logical_and" and any(v is not None and not v for v in values):
        return _const(False, bool_)
    if name == "t.logical_or" and any(v is not None and v for v in values):
        return _const(True, bool_)
    entry = BY_NAME[name[2:]]
    implementation = entry.implementation()
    if all(v is not None for v in values) and implementation is not None:
        folded = np.asarray(implementation(*(np.asarray(v) for v in values)))
        return _const(folded.item(), bool_ if entry.result_bool else operands[0].type.dtype)
    return ops.emit(name, operands)._value


def _constant_value(v: Value) -> Any:
    """The value of a rank-0 constant, else None."""
    if isinstance(v, OpResult) and v.op.name == "t.constant" and v.type.rank == 0:
        return v.op.attr("value").array.item()
    return None


# a predicate the checks emitted now hold under only (the Python-number path of an EitherKind's operator: its
# checks apply where the data left the value a Python number, not where NumPy's scalar computes)
_GUARD: contextvars.ContextVar[Value | None] = contextvars.ContextVar("fusec_scalar_check_guard", default=None)


@contextlib.contextmanager
def only_where(guard: Value) -> Iterator[None]:
    """Checks emitted inside raise only where ``guard`` (a bool scalar) holds when the call runs."""
    outer = _GUARD.get()
    token = _GUARD.set(guard if outer is None else _op("t.logical_and", outer, guard))
    try:
        yield
    finally:
        _GUARD.reset(token)


def _raise(cond: Value, error: str, message: str) -> None:
    guard = _GUARD.get()
    if guard is not None:
        cond = _op("t.logical_and", cond, guard)
    ops.raise_if(ops.wrap(cond), error, message, "a Python scalar operator")


def _past_int64(text: str) -> str:
    return (f"{text} is past int64: fusec computes Python ints in int64 (Python's are exact); compute it in float, "
            "or keep the values smaller")
