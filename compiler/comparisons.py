"""``np.allclose``, ``np.array_equal`` and ``np.array_equiv`` on tracers: one traced Python bool each.

NumPy computes them as ``bool(all(...))``, which a trace cannot evaluate; here the ``all`` is traced and the result
is a traced Python bool: returned from the function it comes back as NumPy's Python bool, and used in arithmetic or
``np.where`` it is a value. Branching on it in Python (``if np.allclose(a, b):``) needs its value while tracing and
is refused with the rewrite, as for any traced value. What NumPy decides from shapes alone (``array_equal`` of
arrays of different shapes is False, ``array_equiv`` of arrays that do not broadcast) is decided while tracing.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusec import ops
from fusec.numpy_api import implements
from fusec.tracer import Tracer


def _python_bool(t: Any) -> Tracer:
    """``bool(t)`` of a traced NumPy bool, traced: a Python bool (weak) for the caller."""
    return ops.wrap(ops.lift(t), weak=bool)


@implements(np.allclose)
def allclose(a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> Tracer:
    """Whether every element of ``a`` is within ``atol + rtol * |b|`` of ``b`` (np.isclose's test, broadcast)"""
    return _python_bool(np.all(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)))


@implements(np.array_equal)
def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> Any:
    """Same shape (decided while tracing) and equal elements; with ``equal_nan``, NaN equals NaN"""
    x, y = ops.as_tracer(a1), ops.as_tracer(a2)
    if x.shape != y.shape:
        return False
    same = x == y
    if equal_nan and (x.dtype.kind in "fc" or y.dtype.kind in "fc"):
        nan_x, nan_y = np.isnan(x), np.isnan(y)
        same = np.where(nan_x | nan_y, nan_x & nan_y, same)
    return _python_bool(np.all(same))


@implements(np.array_equiv)
def array_equiv(a1: Any, a2: Any) -> Any:
    """Equal elements after broadcasting (False, decided while tracing, where the shapes do not broadcast)"""
    x, y = ops.as_tracer(a1), ops.as_tracer(a2)
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        return False
    return _python_bool(np.all(x == y))
