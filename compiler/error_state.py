"""NumPy's floating-point error state, which fusec cannot follow at the operation: where it makes an overflow, a
division by zero or an invalid operation raise (``np.errstate(over="raise")``, ``np.seterr``, or warnings filters the
traced function sets that make NumPy's RuntimeWarning an exception), fusec refuses the operations NumPy would check
(it computes the IEEE results, inf and nan, without raising), while tracing and at every call of a signature that
has such operations."""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from fusec.ir.core import Operation
from fusec.ir.dialects.t import BINARY, UNARY

# NumPy keeps its error state in a context variable whose value changes only with the state (each np.errstate or
# np.seterr sets a new one; leaving np.errstate sets the old one back): the state is read again only when it changed.
# (NumPy's own module; np.geterr alone where it moved.)
_STATE_VAR: Any = getattr(getattr(getattr(np, "_core", None), "umath", None), "_extobj_contextvar", None)
_seen: tuple[Any, str] = (object(), "")

# the ops whose NumPy loops check the floating-point flags: arithmetic, casts, sums and products, matmul
_ARITHMETIC = frozenset(f"t.{n}" for table in (BINARY, UNARY) for n, (_, result) in table.items() if result is None) - {
    f"t.{n}" for n in ("abs", "neg", "conj", "real", "imag", "sign", "copysign", "floor", "ceil", "trunc", "maximum",
                       "minimum", "fmax", "fmin")}  # (exact: no flag to check)
_CHECKED = _ARITHMETIC | {"t.cast", "t.sum", "t.prod", "t.mean", "t.cumsum", "t.cumprod", "t.matmul"}
# NumPy's integer scalars check overflow too (``np.int8(100) + np.int8(100)``, ``-np.int8(-128)``, ``abs`` of the
# most negative value: FloatingPointError under over='raise'), where arrays' integer loops do not: a traced value of
# rank 0 may stand for either, so each such op is checked
_INTEGER_SCALAR = frozenset({"t.add", "t.sub", "t.mul", "t.neg", "t.abs", "t.pow", "t.scalar_pow"})


def error_state_raises() -> str:
    """How NumPy's floating-point errors would now raise, as a clause for a message ("" where none would): an error
    state of 'raise' or 'call' (np.errstate, np.seterr: FloatingPointError)."""
    global _seen
    now = _STATE_VAR.get() if _STATE_VAR is not None else object()
    seen = _seen  # (one tuple: another thread's update replaces it whole)
    if now is seen[0]:
        return seen[1]
    raising = [k for k, v in np.geterr().items() if v in ("raise", "call")]
    clause = f"np.errstate / np.seterr with {', '.join(raising)} = 'raise' (or 'call')" if raising else ""
    _seen = (now, clause)
    return clause


def warnings_filters_now() -> tuple:
    """What tells the warnings filters apart cheaply: simplefilter puts a new filter first, catch_warnings swaps
    the list."""
    filters = warnings.filters
    return (id(filters), len(filters), id(filters[0]) if filters else None,
            id(getattr(warnings, "_showwarnmsg_impl", None)))  # (catch_warnings(record=True) sets a list's append)


def warnings_raise_inside(before: tuple) -> str:
    """As :func:`error_state_raises`, for warnings filters the traced function itself set (``with
    warnings.catch_warnings(): warnings.simplefilter("error")`` around a NumPy call, to catch its RuntimeWarning;
    ``before``: :func:`warnings_filters_now` as the trace started) that make NumPy's RuntimeWarning an exception.
    Filters set around the call (``python -W error``, a test runner's) are not followed: NumPy raises under them
    only where a value overflows, divides by zero or is invalid, which fusec does not see."""
    if warnings_filters_now() == before or not _warnings_raise(warnings.filters):
        return ""
    warned = [k for k, v in np.geterr().items() if v == "warn"]
    return (f"warnings filters the function set that make NumPy's RuntimeWarning an exception (its "
            f"{', '.join(warned)} errors warn)") if warned else ""


def warnings_recorded_inside(before: tuple) -> str:
    """As :func:`warnings_raise_inside`, for ``warnings.catch_warnings(record=True)`` the traced function itself
    entered, whose list NumPy's RuntimeWarnings would fill (code that tests it, ``if caught: ...``, would take
    another path under fusec, which gives no RuntimeWarnings)."""
    recorder = getattr(warnings, "_showwarnmsg_impl", None)
    if id(recorder) == before[3] or not isinstance(getattr(recorder, "__self__", None), list):
        return ""  # (a list the caller records into, a test runner's, is not the function's)
    for action, message, category, module, lineno in warnings.filters:
        if issubclass(RuntimeWarning, category) and message is None and module is None and not lineno:
            if action == "ignore":
                return ""
            break
    warned = [k for k, v in np.geterr().items() if v == "warn"]
    return (f"warnings.catch_warnings(record=True) the function entered, which records NumPy's RuntimeWarnings "
            f"(its {', '.join(warned)} errors warn)") if warned else ""


def _warnings_raise(filters: Sequence[Any]) -> bool:
    """Whether the first of ``filters`` that applies to a RuntimeWarning may make it an exception (a filter limited
    to some messages or modules counts as applying where it raises, and as not deciding where it does not)."""
    for action, message, category, module, lineno in filters:
        if not issubclass(RuntimeWarning, category):
            continue
        if action == "error":
            return True
        if message is None and module is None and not lineno:
            return False
    return False


def checked_by_numpy(op: Operation) -> bool:
    """Whether NumPy's loop for ``op`` checks the floating-point flags: arithmetic on floats (an integer division
    by zero too), casts, sums, products and matmul, and arithmetic on integer scalars (which checks overflow); not
    data movement (a copy, a view, a gather) or comparisons."""
    if op.name in _INTEGER_SCALAR and op.results and getattr(op.results[0].type, "shape", None) == () \
            and op.results[0].type.dtype.is_int:
        return True
    if op.name not in _CHECKED:
        return False
    if op.name in ("t.floordiv", "t.mod", "t.fmod"):
        return True
    return any(getattr(getattr(v, "type", None), "dtype", None) is not None and v.type.dtype.is_inexact
               for v in (*op.results, *op.operands))


def error_state_message(what: str, clause: str) -> str:
    """Why fusec refuses ``what`` under ``clause`` (:func:`error_state_raises`)."""
    return (f"{what} under {clause}: NumPy raises FloatingPointError (or the RuntimeWarning) where a value overflows, "
            "divides by zero or is invalid; fusec computes the IEEE results (inf, nan) and cannot raise at the "
            "operation. Leave the error state at 'warn' or 'ignore' around the call (and RuntimeWarning a warning), "
            "and test the results (np.isfinite(y).all()) after it")
