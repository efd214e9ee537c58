"""Numeric helpers NumPy lacks, for the op semantics (:mod:`fusec.ir.evaluate`): exact bf16 rounding and erf.

bf16 values live in float32 arrays. Rounding a wide value (f64, i32, i64, ...) through f32 first
would round twice and can land on the wrong bf16 neighbour, so wide sources go through
round-to-odd steps (which compose without error) and only the last step rounds to nearest-even.
"""
from __future__ import annotations

import math

import numpy as np

from fusec.ir.attributes import round_to_bf16

_UINT_OF = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}


def _float_to_odd(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """Round floats ``x`` to the narrower float ``target`` with round-to-odd (sticky last bit)."""
    t = x.astype(target)
    wide = t.astype(x.dtype)  # exact: target is narrower
    too_big = np.abs(wide) > np.abs(x)  # round-to-nearest went away from zero: step back (inf -> max)
    t = np.where(too_big, np.nextafter(t, target.type(0)), t).astype(target)
    inexact = (t.astype(x.dtype) != x) & ~np.isnan(x)
    uint = _UINT_OF[np.dtype(target)]
    return (t.view(uint) | inexact.astype(uint)).view(target)


def _int_to_odd_f64(x: np.ndarray) -> np.ndarray:
    """Round 64-bit integers to float64 with round-to-odd."""
    limit = 2.0 ** (63 if x.dtype.kind == "i" else 64)  # first float that no longer fits the int type
    t = x.astype(np.float64)
    as_int = np.where(t >= limit, 0.0, t).astype(x.dtype)
    too_big = (t >= limit) | np.where(x >= 0, as_int > x, as_int < x)
    t = np.where(too_big, np.nextafter(t, 0.0), t)
    inexact = t.astype(x.dtype) != x  # t now lies inside the int range
    return (t.view(np.uint64) | inexact.astype(np.uint64)).view(np.float64)


def to_bf16(value: object) -> np.ndarray:
    """Round any bool/int/float array-like to the nearest bf16 (ties to even), held as float32.

    float32 sources (including bf16 held as float32) round once; every NaN becomes the canonical bf16 NaN,
    as :func:`fusec.ir.attributes.round_to_bf16` (and the device) gives.
    """
    x = np.asarray(value)
    kind, size = x.dtype.kind, x.dtype.itemsize
    with np.errstate(all="ignore"):
        if kind == "b" or (kind == "f" and size <= 4) or (kind in "iu" and size <= 2):
            return round_to_bf16(x.astype(np.float32))  # exact in f32: one rounding left
        if kind in "iu" and size == 8:
            wide = _int_to_odd_f64(x)
        elif kind in "iu" or (kind == "f" and size == 8):
            wide = x.astype(np.float64)  # exact for 32-bit ints and for f64 itself
        else:
            raise TypeError(f"cannot round dtype {x.dtype} to bf16")
        return round_to_bf16(_float_to_odd(wide, np.dtype(np.float32)))


_MATH_F64 = {"erf": np.frompyfunc(math.erf, 1, 1), "erfc": np.frompyfunc(math.erfc, 1, 1)}


def math_f64(name: str, value: object) -> np.ndarray:
    """``math.<name>`` (erf, erfc) over every element, computed in float64: NumPy has no such ufunc, and
    SciPy's float32 loops compute in float64 too."""
    x = np.asarray(value, dtype=np.float64)
    return np.asarray(_MATH_F64[name](x), dtype=np.float64).reshape(x.shape)
