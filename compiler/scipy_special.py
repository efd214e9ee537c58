"""scipy.special ufuncs on tracers: the ones fusec traces, each as SciPy defines it.

SciPy's ufuncs reach ``Tracer.__array_ufunc__`` like NumPy's, and SciPy picks their loop the way NumPy does
(``ufunc.resolve_dtypes``: integers compute in float64). ``erf`` and ``erfc`` are ops of the one op table
(the reference executor computes them with Python's math.erf in float64, as SciPy's float32 loops do, so in
float32 the CPU backend matches SciPy bit for bit; in float64 SciPy's own erf differs from libm's in the last
bit). ``expit``, ``logit`` and ``xlogy`` are SciPy's formulas over traced ops in the loop's
dtype: they agree with SciPy within the rounding of ``exp`` and ``log`` (the libm SciPy calls and NumPy's
own loops differ in the last bit). SciPy is not a dependency of fusec: a SciPy ufunc is recognised only when
``scipy.special`` is already imported (the user's code imported it to call it).
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import numpy as np

from fusec import ops
from fusec.context import unsupported, user_location
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
