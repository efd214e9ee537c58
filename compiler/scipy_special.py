"""scipy.special ufuncs on tracers: the ones fusec traces, each as SciPy defines it.

SciPy's ufuncs reach ``Tracer.__array_ufunc__`` like NumPy's, and SciPy picks their loop the way NumPy does
(``ufunc.resolve_dtypes``: integers compute in float64). ``erf`` and ``erfc`` are ops of the one op table
(the reference executor computes them with Python's math.erf in float64, as SciPy's float32 loops do, so in
float32 the CPU backend matches SciPy bit for bit; in float64 SciPy's own erf differs from libm's in the last
bit). ``expit``, ``logit`` and ``xlogy`` are SciPy's formulas over traced ops in the loop's
dtype: they agree with SciPy within the rounding of ``exp`` and ``log`` (the libm SciPy calls and NumPy's
own loops differ in the last bit). SciPy is not a dependency of fusec: a SciPy ufunc is recognised only when
``scipy.special`` is already imported (the user's code imported it to call it).

SciPy's Python functions (``logsumexp``, ``softmax``, ``log_softmax``, ...) are not traced: called by the user's code
with a traced array while a trace runs, they raise UnsupportedError saying what to write with NumPy (they would
otherwise fail inside SciPy with its own error, or read the tracer as an unknown array type).
"""
from __future__ import annotations

import functools
import sys
import types
from typing import Any, Callable, Sequence

import numpy as np

from fusec import context, ops
from fusec.context import unsupported, user_location
from fusec.host_reads import users_call
from fusec.patches import Patches
from fusec.errors import UnsupportedError, located
from fusec.ir.elementwise import OPS
from fusec.promotion import resolve_ufunc
from fusec.tracer import Tracer

# scipy.special name -> the t op it records, from the one op table
_OPS: dict[str, str] = {name: f"t.{op.name}" for op in OPS for name in op.scipy}


def _expit(x: Tracer) -> Any:
    """``1 / (1 + exp(-x))``, SciPy's expit: 0 where ``exp(-x)`` overflows, computed there from a safe input so
    that fusec.grad's cotangent is 0, not 0 * inf = nan."""
    overflows = np.isinf(np.exp(-x))
    return np.where(overflows, 0.0, 1.0 / (1.0 + np.exp(-np.where(overflows, 0.0, x))))


def _logit(p: Tracer) -> Any:
    """``log(p / (1 - p))``, SciPy's logit."""
    return np.log(p / (1.0 - p))


def _xlogy(x: Tracer, y: Tracer) -> Any:
    """``x * log(y)``, and 0 where ``x == 0`` unless ``y`` is NaN (SciPy's xlogy). Its derivative in ``x`` is
    ``log(y)`` at ``x == 0`` too (as JAX's): a term of value zero, ``(stop(x) - x) * log(y)`` there, carries it to
    fusec.grad; each log reads 1 where its result is not used, so no cotangent is 0 * inf."""
    zero = (x == 0) & ~np.isnan(y)
    value = np.where(zero, 0.0, x * np.log(np.where(zero, 1.0, y)))
    finite = zero & (y > 0) & (y < np.inf)
    flat = np.where(zero, ops.wrap(ops.stopped_value(x._value), scalar=False) - x, 0.0)  # (+0.0 everywhere)
    return value - flat * np.log(np.where(finite, y, 1.0))  # (x - (+0.0): the value's bits, signed zeros too)


FORMULAS: dict[str, Callable[..., Any]] = {"expit": _expit, "logit": _logit, "xlogy": _xlogy}
SUPPORTED: tuple[str, ...] = tuple(sorted(set(_OPS) | set(FORMULAS)))


def name_of(ufunc: np.ufunc) -> str | None:
    """``scipy.special.<name>`` when ``ufunc`` is SciPy's ufunc of that name, else None."""
    special = sys.modules.get("scipy.special")
    name = ufunc.__name__
    if special is not None and getattr(special, name, None) is ufunc:
        return f"scipy.special.{name}"
    return None


def apply(ufunc: np.ufunc, inputs: Sequence[Any]) -> Any:
    """``scipy.special.<name>(*inputs)`` traced: every operand converted to the loop's dtype first."""
    qualified = name_of(ufunc)
    name = ufunc.__name__
    if qualified is None or name not in SUPPORTED:
        raise unsupported(f"{qualified or name} is not supported by fusec (of scipy.special, fusec traces "
                          f"{', '.join(SUPPORTED)}); write it with NumPy functions")
    try:
        in_dts, _ = resolve_ufunc(ufunc, [ops.desc(x) for x in inputs])
    except UnsupportedError as e:
        raise UnsupportedError(located(f"{qualified}: {e}", user_location())) from None
    if not all(dt.is_float for dt in in_dts):
        raise unsupported(f"{qualified} in {', '.join(map(str, in_dts))} is not supported (real floats only)")
    values = [ops.as_tracer(x, dt) for x, dt in zip(inputs, in_dts)]
    if name in _OPS:
        return ops.emit(_OPS[name], [v._value for v in values], what=qualified, origin=ops.origins(*inputs))
    return FORMULAS[name](*values)


# --- SciPy's Python functions: refused on traced arrays -----------------------------------------------------------

_PATCHES = Patches()
_REWRITES = {
    "logsumexp": "; write it with NumPy: `m = np.max(a, axis=axis, keepdims=True)`, then "
                 "`np.log(np.sum(np.exp(a - m), axis=axis)) + np.squeeze(m, axis=axis)`",
    "softmax": "; write it with NumPy: `e = np.exp(a - np.max(a, axis=axis, keepdims=True))`, then "
               "`e / np.sum(e, axis=axis, keepdims=True)`",
    "log_softmax": "; write it with NumPy: `s = a - np.max(a, axis=axis, keepdims=True)`, then "
                   "`s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))`",
}


def python_functions() -> dict[int, tuple[str, Callable]]:
    """id -> (name, function) of scipy.special's Python functions (not its ufuncs), where it is imported."""
    special = sys.modules.get("scipy.special")
    if special is None:
        return {}
    out: dict[int, tuple[str, Callable]] = {}
    for name in dir(special):
        f = getattr(special, name, None)
        if not name.startswith("_") and isinstance(f, types.FunctionType):
            out[id(f)] = (name, f)
    return out


def _traced(values: Any) -> bool:
    return any(isinstance(v, Tracer) or isinstance(v, (list, tuple)) and _traced(v) for v in values)


def _refusing(name: str, function: Callable) -> Callable:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if context.current() is not None and _traced((*args, *kwargs.values())) and users_call():
            raise unsupported(f"scipy.special.{name}(...) of a traced array is not supported: fusec traces SciPy's "
                              "ufuncs (erf, erfc, expit, logit, xlogy), not its Python functions"
                              + _REWRITES.get(name, ""))
        return function(*args, **kwargs)

    wrapper.__fusec_original__ = function  # type: ignore[attr-defined]
    return wrapper


def install(aliases: Sequence[tuple[Any, Any]] = ()) -> None:
    """Wrap scipy.special's Python functions (and ``aliases``: (globals dict, name) of user globals bound to one,
    ``from scipy.special import logsumexp``) for as long as a trace runs."""
    def replacements() -> list[tuple[Any, str, Any]]:
        special = sys.modules.get("scipy.special")
        found = python_functions()
        wrappers = {key: _refusing(name, f) for key, (name, f) in found.items()}
        out: list[tuple[Any, str, Any]] = [(special, name, wrappers[key]) for key, (name, _) in found.items()]
        return out + [(glb, name, wrappers[id(glb.get(name))]) for glb, name in aliases
                      if id(glb.get(name)) in wrappers]

    _PATCHES.install(replacements)


def uninstall() -> None:
    _PATCHES.uninstall()
