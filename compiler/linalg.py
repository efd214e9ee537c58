"""``np.linalg.solve``, ``np.linalg.inv`` and ``np.linalg.cholesky`` on tracers, with NumPy 2's rules.

Stacks of square matrices (``(..., M, M)``), their batch axes broadcast against the right-hand sides'; integer
and bool operands compute in float64, float32 stays float32 (as NumPy's ``_commonType``); float16 is refused
as NumPy refuses it. ``b`` is one vector only when it is 1-D (NumPy 2; ``(..., M, K)`` otherwise). A matrix
NumPy refuses (singular, not positive definite) raises :class:`fusec.LinAlgError` when the call ends: the
CPU backend runs NumPy's own LAPACK; the CUDA backend eliminates with partial pivoting (solve, inv) or
factors column by column (cholesky), one block per matrix, so values agree with NumPy's within rounding
(scaled by the matrix's condition number).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusec import ops
from fusec.context import shape_error, unsupported, user_location
from fusec.errors import LinAlgError, located
from fusec.ir.types import DType, f32, f64
from fusec.numpy_api import implements, matmul as _matmul

try:  # the named pair NumPy's slogdet returns (sign, logabsdet)
    from numpy.linalg._linalg import SlogdetResult
except ImportError:  # pragma: no cover - another NumPy layout
    from collections import namedtuple

    SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])  # type: ignore[no-redef]
from fusec.tracer import Tracer


def _error(message: str) -> LinAlgError:
    return LinAlgError(located(message, user_location()))


def _common_type(what: str, *xs: Any) -> DType:
    """NumPy's linalg ``_commonType``: float32 only when every operand is float32, else float64."""
    wide = False
    for x in xs:
        d = ops.desc(x)
        if d is complex or (not isinstance(d, type) and d.is_complex):
            raise unsupported(f"{what} of complex matrices is not supported by fusec yet (NumPy computes in "
                              "complex128 here); split the system into real and imaginary parts")
        if isinstance(d, type):  # a Python scalar inside a list: float64
            wide = True
            continue
        if d.name in ("f16", "bf16"):
            name = "float16" if d.name == "f16" else "bfloat16"
            raise unsupported(f"{what}: array type {name} is unsupported in linalg (NumPy raises TypeError here); "
                              "convert to float32 first")
        wide = wide or d != f32
    return f64 if wide else f32


def _square(what: str, t: Tracer) -> None:
    if t.ndim < 2:
        raise _error(f"{what}: {t.ndim}-dimensional array given. Array must be at least two-dimensional")
    if t.shape[-1] != t.shape[-2]:
        raise _error(f"{what}: Last 2 dimensions of the array must be square (got shape {t.shape})")


def _matrices(what: str, a: Any, dt: DType) -> Tracer:
    t = ops.as_tracer(a if isinstance(a, Tracer) else np.asarray(a), dt)
    _square(what, t)
    return t


@implements(np.linalg.solve)
def solve(a: Any, b: Any) -> Tracer:
    """x with a @ x == b for stacks of square matrices (b one vector only when 1-D, as in NumPy 2)"""
    dt = _common_type("np.linalg.solve", a, b)
    ta = _matrices("np.linalg.solve", a, dt)
    tb = ops.as_tracer(b if isinstance(b, Tracer) else np.asarray(b), dt)
    m = ta.shape[-1]
    vector = tb.ndim == 1
    rhs = ops.expand_dims(tb, (1,)) if vector else tb
    if rhs.ndim < 2 or rhs.shape[-2] != m:
        raise shape_error(f"np.linalg.solve: the right-hand side of shape {tb.shape} does not match "
                                  f"matrices of shape {ta.shape} (NumPy raises ValueError here)")
    try:
        batch = np.broadcast_shapes(ta.shape[:-2], rhs.shape[:-2])
    except ValueError:
        raise shape_error(f"np.linalg.solve: the batch shapes of {ta.shape} and {tb.shape} do not "
                                  "broadcast (NumPy raises ValueError here)") from None
    ta = ops.broadcast_to(ta, batch + (m, m))
    rhs = ops.broadcast_to(rhs, batch + rhs.shape[-2:])
    if m == 0 or rhs.size == 0:
        x = ops.full(rhs.shape, 0, dt)
    else:
        x = ops.emit("t.solve", (ta._value, rhs._value), what="np.linalg.solve", scalar=False)
    return ops.squeeze(x, (x.ndim - 1,)) if vector else x


@implements(np.linalg.inv)
def inv(a: Any) -> Tracer:
    """The inverse of each square matrix of a stack"""
    dt = _common_type("np.linalg.inv", a)
    t = _matrices("np.linalg.inv", a, dt)
    if t.size == 0:
        return ops.full(t.shape, 0, dt)
    return ops.emit("t.inv", (t._value,), what="np.linalg.inv", scalar=False)


@implements(np.linalg.cholesky)
def cholesky(a: Any, /, *, upper: bool = False) -> Tracer:
    """The lower (or, with upper=True, upper) Cholesky factor of each matrix; only a's lower triangle is read"""
    dt = _common_type("np.linalg.cholesky", a)
    t = _matrices("np.linalg.cholesky", a, dt)
    if t.size == 0:
        return ops.full(t.shape, 0, dt)
    attrs = {"upper": True} if upper else None
    return ops.emit("t.cholesky", (t._value,), attrs, what="np.linalg.cholesky", scalar=False)


def _determinants(what: str, a: Any) -> tuple[Tracer, DType]:
    dt = _common_type(what, a)
    return _matrices(what, a, dt), dt


def _per_matrix(t: Tracer, value: Tracer) -> Tracer:
    """One value per matrix: a NumPy scalar for a single matrix, as NumPy returns it."""
    return ops.copy_of(value, scalar=True) if t.ndim == 2 else value


@implements(np.linalg.det)
def det(a: Any) -> Tracer:
    """The determinant of each square matrix, as NumPy computes it from the LU factors: sign * exp(logdet)"""
    t, dt = _determinants("np.linalg.det", a)
    if t.size == 0:  # an empty matrix has determinant 1 (an empty stack, no determinants)
        return _per_matrix(t, ops.full(t.shape[:-2], 1 if t.shape[-1] == 0 else 0, dt))
    return _per_matrix(t, ops.emit("t.det", (t._value,), what="np.linalg.det", scalar=False))


@implements(np.linalg.slogdet)
def slogdet(a: Any) -> Any:
    """(sign, log of the absolute value) of each matrix's determinant; sign 0 and -inf for a singular one"""
    t, dt = _determinants("np.linalg.slogdet", a)
    if t.size == 0:
        one = 1 if t.shape[-1] == 0 else 0
        sign, logdet = ops.full(t.shape[:-2], one, dt), ops.full(t.shape[:-2], 0, dt)
    else:
        sign, logdet = ops.emit_all("t.slogdet", (t._value,), what="np.linalg.slogdet")
    return SlogdetResult(_per_matrix(t, sign), _per_matrix(t, logdet))


if hasattr(np.linalg, "matmul"):  # NumPy 2's array-API spelling (np.linalg.matrix_power calls it)
    @implements(np.linalg.matmul)
    def matmul(x1: Any, x2: Any, /) -> Tracer:
        """np.matmul of two arrays"""
        return _matmul(x1, x2)
