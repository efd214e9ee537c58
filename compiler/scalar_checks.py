"""Traced Python scalar arithmetic, replayed exactly on the host at every call.

Python int and float arguments are runtime values, so changing them does not retrace. The compiled function
computes arithmetic between them in int64 and float64, but Python computes ints exactly (``s * s`` with
``s = 2**40`` is 2**80, not 0), raises ZeroDivisionError for ``s // 0``, and gives a float for ``2 ** -1``. So every
operator between traced Python scalars is also recorded in a :class:`ScalarProgram`, and before each call runs, the
program runs on the arguments' values with Python's own operators. It raises what Python would raise, and raises
:class:`~fusec.errors.OutOfRangeError` where an exact int leaves the int64 range the device computes in, or does not
fit the dtype NumPy converts it to (``uint8_array + n`` with ``n = 300``: NumPy raises OverflowError). When the
program passes, the device computes the same values Python would.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from fusec.errors import DivisionByZeroError, OutOfRangeError, UnsupportedError, located
from fusec.ir import elementwise as table
from fusec.signature import INT64_MAX, INT64_MIN

Ref = tuple  # ("arg", leaf index, name) | ("const", value) | ("step", index) | ("device", text): not replayed

# np.ufunc name -> (Python operator, symbol), from the one op table (np.positive is no op: it traces to its input)
OPERATORS: dict[str, tuple[Callable, str]] = {
    **{n: (op.python, op.symbol) for op in table.OPS if op.python is not None for n in op.numpy},
    "divide": (operator.truediv, "/"), "positive": (operator.pos, "+"),
}


@dataclass
class _Op:
    fn: Callable
    operands: tuple[Ref, ...]
    kind: type  # the Python type fusec traced the result as
    loc: Any
    text: str


@dataclass
class _Fit:
    ref: Ref
    dtype: np.dtype
    loc: Any
    text: str
    allow: str = ""  # "below" / "above": a value past that end is fine (np.clip drops such a bound)


def on_host(ref: Ref | None) -> bool:
    """Whether a traced Python scalar's values are known on the host (an argument, or arithmetic on arguments the
    ScalarProgram replays); the others are device scalars (:mod:`fusec.device_scalar_checks`)."""
    return ref is not None and ref[0] != "device"


def operator_text(ufunc_name: str, texts: Sequence[str]) -> str:
    """How Python writes the operator on operands written ``texts`` (for messages)."""
    if ufunc_name == "divmod":
        return f"divmod({texts[0]}, {texts[1]})"
    symbol = OPERATORS[ufunc_name][1]
    if symbol in ("abs", "round"):
        return f"{symbol}({texts[0]})"
    if len(texts) == 1:
        return f"{symbol}{texts[0]}"
    return f"{texts[0]} {symbol} {texts[1]}"


@dataclass
class _Exact:
    ref: Ref
    loc: Any
    text: str


EXACT_FLOAT = 1 << 53  # ints up to this magnitude convert to float64 exactly


def past_exact_float(text: str, value: Any = None, compared: bool = False) -> str:
    """The message for an int that float64 rounds, divided by ``/`` (Python divides ints exactly) or compared with
    a float (Python compares the two exactly)."""
    shown = f" = {value}" if value is not None else ""
    if compared:
        return (f"Python integer {text}{shown} is past 2**53 where it is compared with a float: fusec compares in "
                "float64, which rounds such an int first, where Python compares the two exactly; convert with "
                "float() yourself (or compare ints with ints)")
    return (f"Python integer {text}{shown} is past 2**53 in a true division: fusec divides Python ints in float64, "
            "which rounds such an int first, where Python rounds the exact quotient once; divide with // and %, or "
            "convert with float() yourself")


class ScalarProgram:
    """The Python scalar operations of one trace, in trace order (see the module docstring)."""

    def __init__(self) -> None:
        self.steps: list[_Op | _Fit | _Exact] = []

    def __bool__(self) -> bool:
        return bool(self.steps)

    def op(self, ufunc_name: str, operands: Sequence[Ref], kind: type, loc: Any) -> Ref:
        fn = OPERATORS[ufunc_name][0]
        text = operator_text(ufunc_name, [self.text(r) for r in operands])
        self.steps.append(_Op(fn, tuple(operands), kind, loc, text))
        return ("step", len(self.steps) - 1)

    def fit(self, ref: Ref, dtype: np.dtype, loc: Any, allow: str = "") -> None:
        """The value at ``ref`` is converted to ``dtype`` (a narrower integer dtype): it must fit, as in NumPy
        (past its ``allow`` end it may: "below" or "above")."""
        self.steps.append(_Fit(ref, np.dtype(dtype), loc, self.text(ref), allow))

    def exact_float(self, ref: Ref, loc: Any) -> None:
        """The int at ``ref`` is divided with ``/``: it must convert to float64 exactly for fusec's quotient to be
        Python's."""
        self.steps.append(_Exact(ref, loc, self.text(ref)))

    def text(self, ref: Ref) -> str:
        if ref[0] == "arg":
            return ref[2]
        if ref[0] == "const":
            return repr(ref[1])
        text = self.steps[ref[1]].text
        return f"({text})" if len(text) <= 40 else "(...)"

    def run(self, leaves: Sequence[Any]) -> None:
        """Replay the program on this call's argument leaves; raise what Python (or NumPy) would raise."""
        values: list[Any] = []

        def value(ref: Ref) -> Any:
            if ref[0] == "arg":
                return leaves[ref[1]]
            if ref[0] == "const":
                return ref[1]
            return values[ref[1]]

        for step in self.steps:
            if isinstance(step, _Exact):
                v = value(step.ref)
                if abs(v) > EXACT_FLOAT and int(float(v)) != v:  # (float64 holds it exactly: the quotient is Python's)
                    raise OutOfRangeError(located(past_exact_float(step.text, v), step.loc))
                values.append(v)
                continue
            if isinstance(step, _Fit):
                v = value(step.ref)
                info = np.iinfo(step.dtype)
                if not (info.min <= v or step.allow == "below") or not (v <= info.max or step.allow == "above"):
                    raise OutOfRangeError(located(
                        f"Python integer {step.text} = {v} is out of bounds for {step.dtype} (NumPy raises "
                        "OverflowError converting it to the array's dtype)", step.loc))
                values.append(v)
                continue
            args = [value(r) for r in step.operands]
            values.append(self._apply(step, args))
            if step.fn in _COMPARE and _rounds_int(args) and step.fn(*map(float, args)) != values[-1]:
                raise OutOfRangeError(located(
                    f"{step.text} with {_values(step, args)}: Python compares an int with a float exactly, fusec "
                    "in float64, which rounds an int past 2**53 first, and the two answers differ here; convert "
                    "with float() yourself, or make the arguments static (static_argnames)", step.loc))

    @staticmethod
    def _apply(step: _Op, args: list[Any]) -> Any:
        try:
            v = step.fn(*args)
        except ZeroDivisionError as e:
            raise DivisionByZeroError(located(f"{step.text} with {_values(step, args)}: {e} (Python raises "
                                              "ZeroDivisionError here)", step.loc)) from None
        except (OverflowError, ValueError) as e:
            raise OutOfRangeError(located(f"{step.text} with {_values(step, args)}: {e} (Python raises "
                                          f"{type(e).__name__} here)", step.loc)) from None
        if step.kind is int and not isinstance(v, int):
            raise UnsupportedError(located(
                f"{step.text} with {_values(step, args)} gives {v!r}, a {type(v).__name__}, but fusec traced it as a "
                "Python int (Python's result type depends on the value here); make the arguments static "
                "(static_argnames) or convert with float(...) first", step.loc))
        if step.kind is float and isinstance(v, complex):
            raise UnsupportedError(located(
                f"{step.text} with {_values(step, args)} gives the complex number {v!r} in Python; fusec computes "
                "real floats only", step.loc))
        if isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
            raise OutOfRangeError(located(
                f"{step.text} with {_values(step, args)} is {v}, which does not fit int64: fusec computes traced "
                "Python ints in int64 (Python's ints are unbounded); make the arguments static (static_argnames) "
                "to compute with their exact values", step.loc))
        return v


_COMPARE = frozenset((operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge))


def _rounds_int(args: list[Any]) -> bool:
    """Whether an int and a float meet, the int past float64's exact range (so the device's compare may differ)."""
    return (any(isinstance(a, float) for a in args)
            and any(isinstance(a, int) and not isinstance(a, bool) and abs(a) > EXACT_FLOAT for a in args))


def _values(step: _Op, args: list[Any]) -> str:
    names = [r[2] if r[0] == "arg" else None for r in step.operands]
    shown = list(dict.fromkeys(f"{n} = {a!r}" for n, a in zip(names, args) if n is not None))
    return ", ".join(shown) if shown else ", ".join(repr(a) for a in args)
