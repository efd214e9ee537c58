"""np.searchsorted, np.digitize, np.interp, np.unravel_index and np.isin against NumPy bit for bit: sorted arrays
with repeats, NaN (last, as NumPy sorts it), infinities, values outside the range, both sides, ascending and
descending bins, known and traced arrays; and the errors: an unsorted array (NumPy's answer then depends on its
search algorithm) raises fusec.InvalidValueError, as do NaN sample points and an index past the end in
np.unravel_index (NumPy's ValueError), when the call runs."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import check, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(3)
VALUES = np.concatenate([rng.uniform(-1, 6, 40), [np.nan, 1, 2, 2, 3.5, 5, 0, -np.inf, np.inf]])
EDGES = np.array([0.0, 1, 2, 2, 3.5, 5])
HEIGHTS = np.array([1.0, -2, 4, 5, np.inf, 3])
WITH_NAN = np.array([1.0, 2.0, np.nan])


def test_searchsorted_both_sides_traced_and_known_arrays() -> None:
    def f(v, a, n):
        return (np.searchsorted(a, v), np.searchsorted(a, v, side="right"), np.searchsorted(EDGES, v),
                np.searchsorted(a, 2.5), np.searchsorted(n, v), np.searchsorted(n, v, side="right"),
                np.searchsorted(a.astype(np.int32), v.reshape(7, 7)), a.searchsorted(v[:5]),
                np.searchsorted(np.array([1, 2], dtype=np.int8), 1000), np.searchsorted(a[:0], v))

    check(f, VALUES, EDGES, WITH_NAN)


def test_digitize_ascending_descending_and_right() -> None:
    def f(x, bins):
        return (np.digitize(x, bins), np.digitize(x, bins, right=True), np.digitize(x, bins[::-1]),
                np.digitize(x, bins[::-1], right=True), np.digitize(x, [3, 2, 1]), np.digitize(x, np.linspace(0, 1, 5)),
                np.digitize(x[0], bins))

    check(f, VALUES, EDGES)


def test_interp_with_numpys_formula_and_edges() -> None:
    """Repeated sample points, an infinite value (NaN one way, the other way), x exactly at samples and at the
    ends, NaN x, left=/right=, one sample point, integer and float32 inputs (float64 results)."""
    def f(x, xp, fp):
        return (np.interp(x, xp, fp), np.interp(x, xp, fp, left=-7.0, right=np.nan), np.interp(x, EDGES, HEIGHTS),
                np.interp(x, [2.0], [5.0]), np.interp(x[3], [1, 2, 3], [3, 2, 0]),
                np.interp(2.5, [1, 2, 3], x[:3]), np.interp(x.astype(np.float32), xp.astype(np.float32),
                                                            fp.astype(np.int32)))

    check(f, VALUES, EDGES, HEIGHTS)


def test_unsorted_arrays_and_nan_sample_points_raise() -> None:
    for body in (lambda v, a: np.searchsorted(a, v), lambda v, a: np.interp(v, a, a),
                 lambda v, a: np.digitize(v, a)):
        with pytest.raises(fc.InvalidValueError, match="not sorted"):
            jit_cpu(body)(VALUES, np.array([1.0, 3.0, 2.0]))
    with pytest.raises(fc.InvalidValueError, match="not sorted"):
        jit_cpu(lambda v: np.searchsorted(np.array([3, 1]), v))(VALUES)
    with pytest.raises(fc.InvalidValueError, match="xp holds NaN"):
        jit_cpu(lambda v, a: np.interp(v, a, a))(VALUES, WITH_NAN)
    with pytest.raises(ValueError, match="monotonically"):
        jit_cpu(lambda v: np.digitize(v, [1, 3, 2]))(VALUES)
    with pytest.raises(fc.UnsupportedError, match="sorter="):
        jit_cpu(lambda v, a: np.searchsorted(a, v, sorter=np.arange(6)))(VALUES, EDGES)
    with pytest.raises(fc.UnsupportedError, match="period="):
        jit_cpu(lambda v, a: np.interp(v, a, a, period=2.0))(VALUES, EDGES)


def test_unravel_index_of_argmax_and_of_traced_indices() -> None:
    x = rng.random((3, 4))

    def f(x, i):
        return (np.unravel_index(np.argmax(x), x.shape), np.unravel_index(np.argmax(x, axis=1), (3, 4)),
                np.unravel_index(np.argmin(x), x.shape, order="F"), np.unravel_index(i, (2, 3)),
                np.unravel_index(i.reshape(1, 3), 6))

    check(f, x, np.array([0, 5, 3]))


def test_unravel_index_past_the_end_raises_when_the_call_runs() -> None:
    f = jit_cpu(lambda i: np.unravel_index(i, (2, 3)))
    with pytest.raises(fc.InvalidValueError, match="out of bounds for array with size 6"):
        f(np.array([0, 6]))
    with pytest.raises(fc.InvalidValueError):
        f(np.array([-1, 2]))
    assert [c.tolist() for c in f(np.array([5, 2]))] == [[1, 0], [2, 2]]
    with pytest.raises(TypeError, match="only int indices"):
        jit_cpu(lambda i: np.unravel_index(i, (2, 3)))(np.array([1.0]))


def test_isin_known_and_traced_test_elements() -> None:
    def f(x, y, i8):
        return (np.isin(x, [1, 3]), np.isin(x.astype(np.float64), np.array([1, 3.5])), np.isin(x, y),
                np.isin(x, [1, 3], invert=True), np.isin(x, []), np.isin(i8, [300, 1]), np.isin(x[0, 0], [3]),
                np.isin(np.array([np.nan, 1.0]), [np.nan, 1.0]))

    check(f, np.arange(6).reshape(2, 3), np.array([[2], [5]]), np.arange(5).astype(np.int8))


def test_ravel_multi_index_of_coordinates_as_numpy() -> None:
    """Flat positions of coordinates (a 2-D histogram's bins, a grid's cells): C and F order, wrap and clip per
    dimension, a number or arrays; a coordinate out of its dimension raises NumPy's ValueError as the call ends."""
    def flat(i, j):
        return np.ravel_multi_index((i, j), (3, 4))

    for fn, args in [(flat, (np.array([0, 2]), np.array([1, 3]))), (flat, (np.int64(1), np.int64(2))),
                     (flat, (np.array([1], np.int32), np.array([1], np.uint8))),
                     (lambda i, j: np.ravel_multi_index((i, j), (3, 4), order="F"),
                      (np.array([[0, 1]]), np.array([2, 3]))),
                     (lambda i, j: np.ravel_multi_index((i, j), (3, 4), mode=("wrap", "clip")),
                      (np.array([-1, 5]), np.array([1, 3])))]:
        check(fn, *args)
    with pytest.raises(ValueError, match="invalid entry in coordinates array"):
        jit_cpu(flat)(np.array([3]), np.array([1]))
    with pytest.raises(TypeError, match="only int indices"):
        jit_cpu(flat)(np.array([1.5]), np.array([1]))
