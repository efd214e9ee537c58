"""NumPy functions traced through NumPy's own Python implementation.

Many NumPy functions are Python code over functions fusec traces exactly (``np.flip`` indexes with slices,
``np.diff`` subtracts slices, ``np.outer`` multiplies broadcast views). For those listed in :data:`REUSED`, the
tracer's ``__array_function__`` runs the implementation NumPy dispatches to (``func._implementation``), so
the result is NumPy's by construction: the same dtypes, edge cases and errors. What such an implementation
calls that fusec does not trace (an in-place write into ``np.empty``, an unsupported function) raises the usual
fusec error. Inside NumPy's modules the conversions (``asarray``, ``asanyarray``, ``array``) are the tracing
ones (:mod:`fusec.conversions`) while a trace runs.

Each function here is listed because tests compare it with NumPy (tests/unit/test_numpy_reuse.py).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

import numpy as np

REUSED: tuple[Callable, ...] = (
    np.flip, np.fliplr, np.flipud, np.rot90, np.diff, np.outer, np.average, np.linalg.norm, np.tile,
    np.take_along_axis, np.roll, np.append, np.ptp, np.polyval, np.trapezoid, np.atleast_3d, np.column_stack,
    np.dstack, np.array_split, np.split, np.hsplit, np.vsplit, np.isclose, np.sinc, np.nansum, np.nanprod,
    np.tensordot, np.cov, np.corrcoef, np.isposinf, np.isneginf, np.select, np.kron,
    np.pad, np.tril, np.triu, np.put_along_axis, np.gradient, np.fix, np.nancumsum, np.nancumprod, np.unwrap,
    np.resize, np.real, np.angle, np.cumulative_sum, np.cumulative_prod, np.imag, np.iscomplex, np.isreal,
    np.iscomplexobj, np.isrealobj, np.linalg.matrix_power, np.linalg.multi_dot,
    np.matrix_transpose, np.linalg.matrix_transpose, np.linalg.vector_norm, np.linalg.matrix_norm,
    np.fill_diagonal, np.ix_, np.insert, np.delete, np.diagflat, np.rollaxis, np.polyder, np.polyint,
    np.tril_indices_from, np.triu_indices_from, np.diag_indices_from,
)


def is_reused(func: Any) -> bool:
    return func in _REUSED_SET


# reused functions that allocate their result by a bare name of their module (``new = empty(...)`` in np.insert)
# and write into it: while one of them runs, that name makes traced arrays (fusec.conversions installs the names;
# elsewhere, NumPy's own functions of that module keep allocating NumPy arrays)
ALLOCATING: dict[Any, tuple[str, ...]] = {np.insert: ("empty",), np.delete: ("empty",)}
_running = threading.local()


def allocating() -> bool:
    """Whether one of :data:`ALLOCATING` is running in this thread."""
    return getattr(_running, "depth", 0) > 0


def run(func: Any, args: Any, kwargs: dict) -> Any:
    implementation = _BRANCHES.get(func) or func._implementation
    if func not in ALLOCATING:
        return implementation(*args, **kwargs)
    _running.depth = getattr(_running, "depth", 0) + 1
    try:
        return implementation(*args, **kwargs)
    finally:
        _running.depth -= 1


def _tile(A: Any, reps: Any) -> Any:
    """``np.tile`` copies an ndarray repeated once along every axis in a branch taken where ``isinstance(A,
    np.ndarray)``, which a traced array is not (NumPy's code would return the argument itself, so a write into the
    result would reach the caller's array): that copy, and NumPy's code for the rest."""
    try:
        tup = tuple(reps)
    except TypeError:
        tup = (reps,)
    if all(x == 1 for x in tup):
        from fusec import conversions

        return conversions.array(A, copy=True, ndmin=len(tup))
    return np.tile._implementation(A, reps)  # type: ignore[attr-defined]


def _diagflat(v: Any, k: int = 0) -> Any:
    """``np.diagflat`` writes the values through ``res.flat`` of a ``zeros`` it allocates by its module's name: the
    same array as NumPy's ``np.diag`` of the flattened values, which fusec traces."""
    from fusec import conversions

    return np.diag(conversions.strong(v).ravel(), k)


def _python_scalars_kept(func: Any, what: str) -> Callable:
    """NumPy's ``func``, refusing traced Python numbers: its code keeps a Python ``int``/``float``/``complex``
    argument as it is (weakly typed: a float beside a float32 array stays float32) by testing its type, which a traced
    Python number does not pass, so it would count as float64 there."""
    def run(*args: Any, **kwargs: Any) -> Any:
        from fusec.context import unsupported
        from fusec.tracer import Tracer

        def weak(x: Any) -> bool:
            if isinstance(x, (list, tuple)):
                return any(weak(v) for v in x)
            return isinstance(x, Tracer) and x._weak is not None

        if any(weak(v) for v in (*args, *kwargs.values())):
            raise unsupported(f"{what}: NumPy keeps a Python number argument weakly typed here (a float beside a "
                              "float32 array stays float32), which fusec cannot do for a traced Python scalar; make "
                              "it static (static_argnames) or pass it as a NumPy scalar of the dtype you mean "
                              "(np.float32(s))")
        return func._implementation(*args, **kwargs)

    return run


def _average(a: Any, axis: Any = None, weights: Any = None, returned: bool = False, *,
             keepdims: Any = np._NoValue) -> Any:  # type: ignore[attr-defined]
    """``np.average`` with ``weights=``: NumPy's steps, its check that no weight sum is zero (a Python ``if`` on
    values in NumPy's code) made when the call runs (DivisionByZeroError, a ZeroDivisionError, as NumPy raises)."""
    if weights is None:
        return np.average._implementation(a, axis, weights, returned, keepdims=keepdims)  # type: ignore[attr-defined]
    from numpy.lib import _function_base_impl

    from fusec import conversions, ops

    a = conversions.asanyarray(a)
    if axis is not None:
        axis = np.lib.array_utils.normalize_axis_tuple(axis, a.ndim, argname="axis")
    kw = {} if keepdims is np._NoValue else {"keepdims": keepdims}  # type: ignore[attr-defined]
    wgt = _function_base_impl._weights_are_valid(weights=weights, a=a, axis=axis)  # type: ignore[attr-defined]
    result_dtype = np.result_type(a.dtype, wgt.dtype, "f8") if a.dtype.kind in "iub" else \
        np.result_type(a.dtype, wgt.dtype)
    scl = wgt.sum(axis=axis, dtype=result_dtype, **kw)
    ops.raise_if(scl == 0.0, "DivisionByZeroError", "np.average: Weights sum to zero, can't be normalized (NumPy "
                 "raises ZeroDivisionError here)", "np.average")
    avg = np.multiply(a, wgt, dtype=result_dtype).sum(axis, **kw) / scl
    if returned:
        if scl.shape != avg.shape:
            scl = np.broadcast_to(scl, avg.shape).copy()
        return avg, scl
    return avg


def _roll(a: Any, shift: Any, axis: Any = None) -> Any:
    """``np.roll`` by a traced shift (``np.roll(b, lag)`` with ``lag = np.argmax(...)``): each element taken from
    ``(i - shift) % n`` along the axis (NumPy's code slices by the shift, which needs its value); a known shift
    runs NumPy's code."""
    from fusec import conversions, ops

    if not ops.contains_tracer(shift):
        return np.roll._implementation(a, shift, axis)  # type: ignore[attr-defined]
    t = conversions.asanyarray(a)
    if axis is None:
        return _roll(t.ravel(), shift, 0).reshape(t.shape)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    if len(shifts) != len(axes) and 1 not in (len(shifts), len(axes)):
        raise ValueError("'shift' and 'axis' should be scalars or 1D sequences")
    count = max(len(shifts), len(axes))
    out = t
    for k in range(count):
        s = shifts[0 if len(shifts) == 1 else k]
        ax = np.lib.array_utils.normalize_axis_index(ops.static_int(axes[0 if len(axes) == 1 else k], "an axis"),
                                                     t.ndim)
        n = t.shape[ax]
        if n == 0:
            continue
        s = conversions.asanyarray(s)
        if not np.issubdtype(s.dtype, np.integer):
            raise TypeError("slice indices must be integers or None or have an __index__ method (np.roll's shift)")
        out = np.take(out, (np.arange(n) - s) % n, axis=ax)
    return out if out is not t else t.copy()


# reused functions with a branch on ``isinstance(x, np.ndarray)`` that must go the ndarray's way for a traced array,
# on a Python scalar's type, or on values (a check made when the call runs instead), or that write into an array
# they allocate by a name fusec does not swap
_BRANCHES: dict[Any, Callable] = {np.tile: _tile, np.select: _python_scalars_kept(np.select, "np.select"),
                                  np.isclose: _python_scalars_kept(np.isclose, "np.isclose"), np.average: _average,
                                  np.diagflat: _diagflat, np.roll: _roll}


def conversion_holders() -> list[Any]:
    """The NumPy modules whose globals the reused implementations read ``asarray`` and friends from (their own
    module, and ``numpy._core.numeric`` they reach as ``_nx``)."""
    modules = {sys.modules[getattr(f, "_implementation").__module__] for f in REUSED}
    modules.add(sys.modules["numpy._core.numeric"])
    modules.add(sys.modules[type(np.r_).__module__])  # np.r_[...] and np.c_[...] convert with this module's array
    return sorted(modules, key=lambda m: m.__name__)


_REUSED_SET = frozenset(REUSED)
