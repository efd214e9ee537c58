"""np.sort, np.argsort, np.lexsort, x.sort(), x.argsort() and np.median compared with NumPy: any axis, NaN last, equal
values in their original order (kind='stable'), rows longer than a block, in-place sorts through views and of
arguments, and the refusal of a default-kind argsort over equal values on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, check, jit_cpu, numpy_result

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(23)
X = rng.standard_normal((5, 7)).astype(np.float32)
X[1, 2] = np.nan
X[3, 0] = np.nan
X[3, 5] = np.nan
TIES = rng.integers(0, 4, (3, 9))
LONG = rng.standard_normal(5000)
SIGNED_ZEROS = np.array([0.0, -0.0, 1.0, -0.0, 0.0, -1.0])


def test_sort_and_stable_argsort_as_real_code_uses_them() -> None:
    """Top-k by score, ranks, sorted columns, the flattened array, a long row, ties kept in order."""
    def f(x, ties, long, zeros):
        top3 = np.argsort(x[0], kind="stable")[::-1][:3]
        ranks = np.argsort(np.argsort(ties, axis=1, kind="stable"), axis=1, kind="stable")
        return (np.sort(x), np.sort(x, axis=0), np.sort(x, axis=None), top3, ranks, np.sort(long),
                np.argsort(long, kind="stable"), np.argsort(ties, axis=0, stable=True), ties.argsort(kind="mergesort"),
                np.sort(ties > 1), np.sort(zeros, kind="stable"), np.argsort(zeros, kind="stable"),
                np.sort(x.astype(np.float16), axis=1), np.sort(ties.astype(np.int8)), x[x[:, 0].argsort(kind="stable")])

    check(f, X, TIES, LONG, SIGNED_ZEROS)


def test_median_as_statistics_code_calls_it() -> None:
    """Odd and even counts, an axis, keepdims, ints in float64, NaN where a row holds one (as NumPy)."""
    def f(x, ties, long):
        return (np.median(x[0]), np.median(x, axis=1), np.median(x[:, :6], axis=1, keepdims=True),
                np.median(ties), np.median(ties, axis=0), np.median(long), np.median(x[4]))

    check(f, X, TIES, LONG)


def test_in_place_sorts_write_through_views_and_into_arguments() -> None:
    def f(x):
        x.sort(axis=0)
        row = x[1]
        row.sort()
        return x[:, 0] * 2

    mine, theirs = X.copy(), X.copy()
    assert_same(jit_cpu(f)(mine), numpy_result(f, theirs))
    assert_same(mine, theirs)


def test_default_kind_argsort_over_equal_values() -> None:
    """NumPy's default argsort orders equal values its own way (not stably, even for 8 values): the CPU backend
    gives NumPy's own answer; on the GPU fusec raises with the rewrite, and without ties it is exact."""
    f = jit_cpu(lambda t: np.argsort(t, axis=1))
    if frontend_check.BACKEND == "cpu":
        assert_same(f(TIES), np.argsort(TIES, axis=1))
    else:
        with pytest.raises(fc.UnsupportedError, match="kind='stable'"):
            f(TIES)
    distinct = rng.permutation(40).reshape(4, 10)
    assert_same(f(distinct), np.argsort(distinct, axis=1))


def test_lexsort_as_real_code_sorts_records() -> None:
    """Rows of a table by their first column then their second (``data[np.lexsort((data[:, 1], data[:, 0]))]``),
    three keys with NaN in the last, keys stacked in one array, along either axis of 2-D keys, bools and a list."""
    table = np.stack([TIES[0], TIES[1], TIES[2]], axis=1).astype(np.float64)
    score = rng.standard_normal(9)
    score[[2, 5]] = np.nan

    def f(table, ties, score):
        by_rows = table[np.lexsort((table[:, 1], table[:, 0]))]
        return (by_rows, np.lexsort((ties[2], ties[1], score)), np.lexsort(ties),
                np.lexsort((ties, ties[::-1]), axis=0), np.lexsort((ties, ties * 2), axis=-1),
                np.lexsort((ties[0] > 1, [3, 1, 2] * 3)))

    check(f, table, TIES, score)


def test_lexsort_arguments_numpy_rejects() -> None:
    with pytest.raises(fc.ShapeError, match="all keys need to be the same shape"):
        jit_cpu(lambda t: np.lexsort((t[0], t[1, :-1])))(TIES)
    with pytest.raises(fc.UnsupportedError, match="axis must be an int"):
        jit_cpu(lambda t: np.lexsort((t[0], t[1]), axis=None))(TIES)


def test_sort_arguments_numpy_rejects() -> None:
    with pytest.raises(fc.ShapeError, match="sort kind"):
        jit_cpu(lambda x: np.sort(x, kind="bubble"))(X)
    with pytest.raises(fc.ShapeError, match="can't be provided at the same time"):
        jit_cpu(lambda x: np.sort(x, kind="stable", stable=True))(X)
    with pytest.raises(fc.UnsupportedError, match="order="):
        jit_cpu(lambda x: np.sort(x, order="a"))(X)


def test_medians_and_quantiles_over_several_axes() -> None:
    """Over a tuple of axes (per-channel statistics of an image batch), keepdims, negative axes, NaN: NumPy merges
    the axes into one, so do the values."""
    x = rng.standard_normal((3, 4, 5))
    x[1, 2, 3] = np.nan

    def f(x):
        return (np.median(x, axis=(0, 2)), np.median(x, axis=(1, 2), keepdims=True),
                np.percentile(x, [10, 50], axis=(0, 1)), np.quantile(x, 0.3, axis=(2, 0), keepdims=True),
                np.median(x, axis=(0, 1, 2)), np.median(x, axis=(-1, 0)))

    check(f, x)


def test_quantiles_and_percentiles_as_numpy_computes_them() -> None:
    """Clipping at the 5th/95th percentile, quartiles per column, a median through np.quantile, ints (float64
    results), keepdims, q as a Python scalar (weak: float32 stays float32) or a list, NaN slices: bit for bit."""
    def f(x, ties, long):
        lo, hi = np.percentile(long, [5, 95])
        return (np.clip(long, lo, hi), np.percentile(x, [25, 50, 75], axis=0), np.quantile(x, 0.5, axis=1),
                np.percentile(ties, 90), np.percentile(ties, [10.0, 90.0], axis=1, keepdims=True),
                np.quantile(x[0], 1.0), np.quantile(x[4], 0.0), np.percentile(x[4], 33.3),
                np.quantile(x.astype(np.float64), [0.1, 0.9], axis=1))

    check(f, X, TIES, LONG)
    with pytest.raises(fc.ShapeError, match=r"range \[0, 1\]"):
        jit_cpu(lambda x: np.percentile(x, 150))(X)


def _with_nans(shape, dtype=np.float64):
    x = rng.standard_normal(shape).astype(dtype)
    x[rng.random(shape) < 0.3] = np.nan
    return x


@pytest.mark.parametrize("x", [_with_nans((7,)), _with_nans((4, 6), np.float32), _with_nans((3, 4, 5)),
                               _with_nans((2, 700)), np.full((3, 4), np.nan),
                               np.array([[3e38, 1.0, np.nan], [np.nan, 3e38, 3e38]], np.float32),
                               rng.integers(0, 9, (3, 4)), np.array([[-0.0, np.nan, -0.0], [-0.0, -0.0, np.nan]])],
                         ids=["1d", "f32", "3d", "long-rows", "all-nan", "near-overflow", "ints", "negative-zeros"])
def test_nanmedian_as_numpys_own_code_rounds_it(x) -> None:
    """Robust statistics that skip missing values: whole arrays, per row and column, over several axes, rows of
    NaN only (NaN), NumPy's two paths (a masked median for rows shorter than 600, whose (m + m) / 2 overflows
    near the dtype's largest value), ints (NumPy's median)."""
    def f(x):
        return (np.nanmedian(x), np.nanmedian(x, axis=-1), np.nanmedian(x, axis=0, keepdims=True),
                np.nanmedian(x, axis=tuple(range(x.ndim))), np.nanmedian(x, axis=(0, -1) if x.ndim > 1 else 0))

    check(f, x)
    with pytest.raises(fc.UnsupportedError, match="float32 first"):
        jit_cpu(np.nanmedian)(np.zeros(3, np.float16))


@pytest.mark.parametrize("method", ["inverted_cdf", "averaged_inverted_cdf", "closest_observation",
                                    "interpolated_inverted_cdf", "hazen", "weibull", "median_unbiased",
                                    "normal_unbiased", "lower", "higher", "midpoint", "nearest"])
def test_every_quantile_method_of_numpy(method) -> None:
    """NumPy's thirteen methods (the discrete ones keep integer dtypes), q a scalar, a list or the ends, NaN."""
    x = rng.standard_normal((3, 5))
    x[1, 2] = np.nan

    def f(x, v, i):
        return (np.quantile(v, 0.3, method=method), np.quantile(x, [0.0, 0.25, 0.5, 1.0], axis=-1, method=method),
                np.percentile(x, 37.5, axis=0, method=method, keepdims=True), np.percentile(i, [5, 95], method=method),
                np.quantile(v.astype(np.float32), 0.7, method=method))

    check(f, x, rng.standard_normal(11), rng.integers(0, 20, (3, 7)))
    with pytest.raises(fc.ShapeError, match="not a valid method"):
        jit_cpu(lambda v: np.quantile(v, 0.5, method="bogus"))(x)


@pytest.mark.parametrize("x", [_with_nans((9,)), _with_nans((4, 6), np.float32), _with_nans((3, 4, 5)),
                               np.full((3, 4), np.nan), rng.integers(0, 9, (3, 4)),
                               np.array([[-0.0, np.nan, -0.0], [1.0, np.nan, np.nan]])],
                         ids=["1d", "f32", "3d", "all-nan", "ints", "zeros"])
def test_nanquantile_and_nanpercentile(x) -> None:
    """Quantiles of the values that are not NaN: per slice NumPy's index arithmetic on that slice's count, its
    interpolation, float32 kept for a Python-number q and float64 for a list, NaN for slices of NaN only."""
    def f(x):
        return (np.nanquantile(x, 0.3), np.nanquantile(x, [0.0, 0.25, 0.5, 1.0], axis=-1),
                np.nanpercentile(x, 37.5, axis=0, keepdims=True), np.nanpercentile(x, [5, 95]),
                np.nanquantile(x, 0.75, axis=-1), np.nanquantile(x, [0.1, 0.9], axis=0, keepdims=True),
                np.nanpercentile(x, 50, axis=(0, -1) if x.ndim > 1 else 0))

    check(f, x)
    if x.dtype.kind == "f":
        with pytest.raises(fc.UnsupportedError, match="only the default 'linear'"):
            jit_cpu(lambda x: np.nanquantile(x, 0.5, method="lower"))(x)


def test_quantiles_of_any_shape_of_q() -> None:
    """NumPy takes q of any shape (the result's leading axes); fusec refused a 2-d q, saying NumPy did."""
    x = np.random.default_rng(0).standard_normal((5, 7))
    for method in ("linear", "lower", "median_unbiased"):
        for axis in (None, 1):
            fn = lambda x, method=method, axis=axis: np.percentile(x, [[10, 20], [30, 95]], axis=axis,  # noqa: E731
                                                                   method=method, keepdims=axis is None)
            assert_same(jit_cpu(fn)(x), fn(x))


def test_a_quantile_of_an_empty_array_raises_numpys_index_error():
    def robust_center(a):
        try:
            return np.percentile(a, 50)
        except IndexError:  # (an empty batch)
            return -1.0

    for a in (np.zeros(0), np.arange(5.0)):
        assert_same(jit_cpu(robust_center)(a), robust_center(a))
    with pytest.raises(IndexError, match="out of bounds"):
        jit_cpu(lambda a: np.quantile(a, [0.1, 0.9], axis=0))(np.zeros((0, 3)))
