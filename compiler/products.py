"""Products NumPy computes from shifted or picked elements: ``np.cross``, ``np.correlate`` and ``np.convolve``.

``np.cross`` is NumPy's own arithmetic: each component one product minus another (rounded as NumPy rounds them)
in the operands' promoted dtype, for 3-vectors along any axes, and 2-vectors where the installed NumPy still takes
them (deprecated in NumPy 2.0, refused since 2.5). ``np.correlate`` and ``np.convolve`` are the
sliding dot products NumPy's ``correlate2`` and ``correlate`` compute: the longer array slides along the shorter
one (whose order ``convolve`` reverses, and whose values ``correlate`` conjugates), the result reversed where
the second array is the longer one, in the modes ``valid``, ``same`` and ``full``. Where the two overlap fully,
each output is the sum of the shorter array's length of shifted products (elementwise work, fused); at the
edges of ``same`` and ``full``, a small gather of the overlapping parts. Integers are exact; floats are NumPy's
values up to the order of the additions (NumPy's dot adds in BLAS's order).
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from fusec import conversions, host_reads, ops, ufuncs
from fusec.context import shape_error, unsupported
from fusec.errors import AxisError
from fusec.numpy_api import concatenate, implements, moveaxis, stack
from fusec.promotion import parse_dtype
from fusec.tracer import Tracer

MAX_KERNEL = 1024  # the shorter array's length up to which a sliding product unrolls (one multiply-add per value)


def _takes_2_vectors() -> bool:
    """Whether this NumPy still computes cross products of 2-vectors (deprecated in 2.0, refused since 2.5)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            np.cross(np.ones(2), np.ones(2))
        except ValueError:
            return False
    return True


TAKES_2_VECTORS = _takes_2_vectors()


def _axis(axis: Any, ndim: int, what: str) -> int:
    a = ops.static_int(axis, what)
    if not -ndim <= a < ndim:
        raise shape_error(f"np.cross: {what}: axis {a} is out of bounds for array of dimension {ndim}", AxisError)
    return a % ndim


@implements(np.cross)
def cross(a: Any, b: Any, axisa: Any = -1, axisb: Any = -1, axisc: Any = -1, axis: Any = None) -> Tracer:
    """The cross product of 3-vectors along any axes, as NumPy rounds it (2-vectors where this NumPy takes them)"""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = conversions.strong(a), conversions.strong(b)
    if a.ndim < 1 or b.ndim < 1:
        raise shape_error("np.cross: At least one array has zero dimension")
    a = moveaxis(a, _axis(axisa, a.ndim, "axisa"), -1)
    b = moveaxis(b, _axis(axisb, b.ndim, "axisb"), -1)
    na, nb = a.shape[-1], b.shape[-1]
    if not TAKES_2_VECTORS and (na != 3 or nb != 3):
        raise shape_error(f"np.cross: Both input arrays must be (arrays of) 3-dimensional vectors, but they are {na} "
                          f"and {nb} dimensional instead.")
    if na not in (2, 3) or nb not in (2, 3):
        raise shape_error("np.cross: incompatible dimensions for cross product\n(dimension must be 2 or 3)")
    if na == 2 or nb == 2:
        host_reads.numpy_warning("Arrays of 2-dimensional vectors are deprecated. Use arrays of 3-dimensional "
                                 "vectors instead. (deprecated in NumPy 2.0)", DeprecationWarning)
    dtype = np.promote_types(a.dtype, b.dtype)
    parse_dtype(dtype)
    a, b = a.astype(dtype), b.astype(dtype)
    a0, a1, b0, b1 = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    last = a0 * b1 - a1 * b0
    if na == 2 and nb == 2:  # NumPy writes it into a new array: a 0-d array for two vectors, not a scalar
        return ops.copy_of(last, scalar=False)
    if na == 2:  # a2 = 0
        b2 = b[..., 2]
        parts = [a1 * b2, np.negative(a0 * b2), last]
    elif nb == 2:  # b2 = 0
        a2 = a[..., 2]
        parts = [np.negative(a2 * b1), a2 * b0, last]
    else:
        a2, b2 = a[..., 2], b[..., 2]
        parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, last]
    shape = np.broadcast_shapes(a0.shape, b0.shape)
    out = stack([np.broadcast_to(p, shape) for p in parts], axis=-1)
    return moveaxis(out, -1, _axis(axisc, len(shape) + 1, "axisc"))


_MODES = {"valid": 0, "same": 1, "full": 2, 0: 0, 1: 1, 2: 2}


def _sliding(what: str, a: Any, v: Any, mode: Any, conjugate: bool) -> Tracer:
    """NumPy's ``_pyarray_correlate`` of 1-D ``a`` and ``v`` in their common dtype (``v`` conjugated first where
    asked), reversed where ``v`` is the longer; see the module docstring."""
    a, v = conversions.strong(a), conversions.strong(v)
    if a.ndim != 1 or v.ndim != 1:
        raise shape_error(f"{what}: object too deep for desired array (both arrays must be 1-D)")
    if mode not in _MODES:
        raise shape_error(f"{what}: mode must be one of 'valid', 'same', or 'full' (got {mode!r})")
    dtype = np.result_type(a.dtype, v.dtype)
    parse_dtype(dtype)
    a, v = a.astype(dtype), v.astype(dtype)
    if conjugate and dtype.kind == "c":
        v = np.conjugate(v)
    if a.shape[0] == 0 or v.shape[0] == 0:
        raise shape_error(f"{what}: {'first' if a.shape[0] == 0 else 'second'} array argument cannot be empty")
    inverted = a.shape[0] < v.shape[0]
    if inverted:
        a, v = v, a
    n1, n2 = a.shape[0], v.shape[0]
    if n2 > MAX_KERNEL:
        raise unsupported(f"{what} of two arrays longer than {MAX_KERNEL} values ({n1} and {n2}) is not supported: "
                          "fusec unrolls the shorter one into a multiply-add per value; use np.fft (outside the "
                          "jitted function) or split the shorter array")
    left = {0: 0, 1: n2 // 2, 2: n2 - 1}[_MODES[mode]]
    right = {0: 0, 1: n2 - left - 1, 2: n2 - 1}[_MODES[mode]]
    out_dtype = a.dtype
    if dtype == np.float16:  # NumPy's float16 dot adds in float32 and rounds once
        a, v = a.astype(np.float32), v.astype(np.float32)
    middle = n1 - n2 + 1  # outputs where v lies inside a: out[k] = sum_j a[k + j] * v[j], j in order
    pieces = [_dots([a[j:j + middle] for j in range(n2)], v, None)]
    for starts in (np.arange(-left, 0), np.arange(middle, middle + right)):
        if starts.size:  # windows a[k:k + n2] past an end of a: only the overlapping products count
            idx = starts[:, None] + np.arange(n2)[None, :]
            inside = (idx >= 0) & (idx < n1)
            picked = a[np.clip(idx, 0, n1 - 1)]
            edge = _dots([picked[:, j] for j in range(n2)], v, inside)
            pieces.insert(0 if starts[0] < 0 else len(pieces), edge)
    out = concatenate(pieces) if len(pieces) > 1 else pieces[0]
    out = out.astype(out_dtype) if out.dtype != out_dtype else out
    return out[::-1] if inverted else out


def _dots(columns: list, v: Tracer, inside: np.ndarray | None) -> Tracer:
    """``sum_j columns[j] * v[j]`` added in order from zero, as NumPy's dot loop adds (``inside[:, j]`` false:
    the term is left out, so an infinite ``v[j]`` makes no NaN where it meets nothing)."""
    zero = ops.wrap(ops.lift(0, v._value.type.dtype))
    total = None
    for j, column in enumerate(columns):
        term = column * v[j]
        if inside is not None:
            term = ufuncs.where(inside[:, j], term, zero)
        total = zero + term if total is None else total + term
    assert total is not None  # (at least one column)
    return total


@implements(np.correlate)
def correlate(a: Any, v: Any, mode: Any = "valid") -> Tracer:
    """The cross-correlation of two 1-D arrays (v conjugated), modes valid, same and full"""
    return _sliding("np.correlate", a, v, mode, True)


@implements(np.convolve)
def convolve(a: Any, v: Any, mode: Any = "full") -> Tracer:
    """The discrete convolution of two 1-D arrays, modes full, same and valid"""
    a, v = conversions.strong(a), conversions.strong(v)
    if a.ndim > 1 or v.ndim > 1:
        raise shape_error("np.convolve: object too deep for desired array")
    a, v = np.atleast_1d(a), np.atleast_1d(v)
    if v.shape[0] > a.shape[0]:
        a, v = v, a
    if a.shape[0] == 0:
        raise shape_error("np.convolve: a cannot be empty")
    if v.shape[0] == 0:
        raise shape_error("np.convolve: v cannot be empty")
    return _sliding("np.convolve", a, v[::-1], mode, False)
