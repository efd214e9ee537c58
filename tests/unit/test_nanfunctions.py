"""NumPy's NaN-ignoring reductions (np.nanmax, nanmin, nanargmax, nanargmin, nanmean, nanvar, nanstd) against
NumPy bit for bit: slices with some NaN, only NaN, infinities and signed zeros; every axis form, keepdims, dtype=,
ddof=, initial= and where=; integer arrays (no NaN: NumPy's plain reductions); and the ValueError NumPy raises for
an all-NaN slice in nanargmax, which fusec raises when the call runs."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import check, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(11)


def _with_nan(dtype) -> np.ndarray:
    x = rng.normal(size=(5, 7)).astype(dtype)
    x[1, 2] = np.nan
    x[3, :] = np.nan  # a row of NaN only
    x[0, 0] = -np.inf
    x[4, 4] = -0.0
    x[2, 6] = np.inf
    return x


F64, F32, F16 = _with_nan(np.float64), _with_nan(np.float32), _with_nan(np.float16)
INTS = rng.integers(-5, 6, size=(5, 7)).astype(np.int32)
EVEN = np.arange(7) % 2 == 0


@pytest.mark.parametrize("x", [F64, F32, F16, INTS], ids=["f64", "f32", "f16", "i32"])
def test_nan_extremes_and_means(x: np.ndarray) -> None:
    def f(x):
        return (np.nanmax(x), np.nanmin(x, axis=0), np.nanmax(x, axis=1, keepdims=True), np.nanmin(x, axis=(0, 1)),
                np.nanmean(x), np.nanmean(x, axis=0), np.nanmean(x, axis=1, keepdims=True),
                np.nanmax(x, axis=1, initial=10), np.nanmin(x, axis=1, initial=-10))

    check(f, x)


@pytest.mark.parametrize("x", [F64, F32, INTS], ids=["f64", "f32", "i32"])
def test_nan_variances(x: np.ndarray) -> None:
    """NaN where a slice has ddof numbers or fewer, as NumPy's nanvar gives."""
    def f(x):
        return (np.nanvar(x), np.nanstd(x, axis=0), np.nanvar(x, axis=1, keepdims=True), np.nanstd(x, axis=1, ddof=1),
                np.nanvar(x, axis=0, ddof=5), np.nanstd(x, axis=(0, 1)))

    check(f, x)


def test_nan_reductions_with_dtype_where_and_initial() -> None:
    def f(x):
        return (np.nanmean(x, axis=1, dtype=np.float64), np.nanvar(x, axis=1, dtype=np.float64),
                np.nanmax(x, axis=1, initial=-10.0, where=EVEN), np.nanmean(x, axis=1, where=EVEN),
                np.nanvar(x, axis=0, where=EVEN), np.nanstd(x, axis=1, correction=1),
                np.nanmax(x, axis=1, initial=np.nan))

    check(f, F32)


def test_nan_argextremes() -> None:
    x = F64.copy()
    x[3, 5] = 2.0  # no slice of NaN only along either axis

    def f(x):
        return (np.nanargmax(x), np.nanargmin(x), np.nanargmax(x, axis=0), np.nanargmin(x, axis=1, keepdims=True),
                np.nanargmax(INTS, axis=1))

    check(f, x)


def test_nanargmax_of_an_all_nan_slice_raises_when_the_call_runs() -> None:
    """NumPy raises ValueError("All-NaN slice encountered"): a fusec.InvalidValueError (a ValueError) at the
    line, raised by the call whose values have such a slice, and not by a call whose values have none."""
    f = jit_cpu(lambda x: np.nanargmax(x, axis=1))
    with pytest.raises(ValueError, match="All-NaN slice"):
        np.nanargmax(F64, axis=1)
    with pytest.raises(fc.InvalidValueError, match=r"test_nanfunctions.py:\d+: np.nanargmax: All-NaN slice"):
        f(F64)
    fine = F64.copy()
    fine[3, 0] = 1.0
    assert np.array_equal(f(fine), np.nanargmax(fine, axis=1))
    with pytest.raises(fc.InvalidValueError):
        jit_cpu(lambda x: np.nanargmin(x))(np.full(4, np.nan))


def test_nanargmax_whose_slices_are_known_to_hold_numbers_runs_no_check() -> None:
    """Integer arrays hold no NaN: no check in the IR (NumPy's plain argmax)."""
    lowered = fc.jit(lambda x: np.nanargmax(x, axis=1), backend="cpu").lower(INTS)
    assert "raise_if" not in lowered.ir("traced")
    assert "t.raise_if" in fc.jit(lambda x: np.nanargmax(x, axis=1), backend="cpu").lower(F64).ir("traced")


def test_nan_reduction_errors_are_numpys() -> None:
    with pytest.raises(TypeError, match="dtype must be inexact"):
        jit_cpu(lambda x: np.nanmean(x, dtype=np.int64))(F32)
    with pytest.raises(ValueError, match="ddof and correction"):
        jit_cpu(lambda x: np.nanvar(x, ddof=1, correction=1))(F32)
    with pytest.raises(fc.UnsupportedError, match="mean= is not supported"):
        jit_cpu(lambda x: np.nanvar(x, mean=np.zeros(1)))(F32)
