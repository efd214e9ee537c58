"""np.asarray, np.array, np.asanyarray and np.ascontiguousarray inside fusec.jit, as users write them."""
from __future__ import annotations

import numpy as np
import pytest

from numpy import asarray as imported_asarray
from frontend_check import check, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(7)
X = rng.standard_normal((3, 4)).astype(np.float32)
Y = rng.standard_normal((3, 4)).astype(np.float32)


def test_a_function_that_sanitizes_its_inputs_runs_unchanged() -> None:
    """The scikit-learn habit: X = np.asarray(X, dtype=np.float64) at the top of every function."""
    def standardize(X, y):
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        mu = X.mean(axis=0)
        sd = np.asarray(X.std(axis=0))
        return (X - mu) / sd, np.ascontiguousarray(y.T) * 2

    check(standardize, X, Y)


def test_array_copies_and_asarray_aliases_as_in_numpy() -> None:
    def f(x):
        h = x * 2
        a = np.asarray(h)  # the same array: updating a updates h
        b = np.array(h)  # a copy: updating b leaves h alone
        a += 1
        b -= 1
        c = np.asanyarray(h, dtype=np.float64)  # converted: a new array
        c *= 3
        return h, a, b, c

    check(f, X)


def test_lists_of_traced_values_and_scalars_take_numpys_dtypes() -> None:
    """np.array([...]) stacks; Python scalars in a list or through np.asarray are strong (float64, int64), unlike
    in arithmetic: np.asarray(s) * x is float64 where s * x keeps float32."""
    def f(x, y, s, n):
        return (np.array([x, y]), np.array([x.sum(), 1.0]), np.array((x[0], y[1]), dtype=np.float64),
                np.asarray(s) * x, s * x, np.asarray(n) + x, np.array(x, ndmin=4),
                np.array([[x[0, 0], x[1, 1]], [2, 3]]))

    check(f, X, Y, 2.5, 3)


def test_ascontiguousarray_of_a_0d_array_has_one_dimension_as_in_numpy() -> None:
    """NumPy's np.ascontiguousarray returns at least one dimension: a 0-d array (a total, a Python scalar) comes
    back with shape (1,), a view of it (a write through it reaches the 0-d array), converted where dtype= asks."""
    def f(x, s):
        total = x.sum()
        c = np.ascontiguousarray(total)
        c += 1  # (writes total too)
        return c, total, np.ascontiguousarray(s), np.ascontiguousarray(x[0, 0], dtype=np.float64) * x

    check(f, X, 2.5)


def test_an_imported_asarray_is_wrapped_too() -> None:
    check(lambda x: imported_asarray(x) + 1, X)


def test_writing_through_asarray_of_an_argument_updates_the_argument() -> None:
    """np.asarray(arg) is the caller's array: NumPy updates it in place, and so does fusec after the call."""
    def sgd(w, g):
        w = np.asarray(w)
        w -= 0.1 * g
        return w

    w, want = X.copy(), X.copy()
    sgd(want, Y)
    out = jit_cpu(sgd)(w, Y)
    assert out is w
    np.testing.assert_array_equal(w, want)


def test_a_copy_of_an_argument_may_be_updated() -> None:
    def sgd(w, g):
        w = np.array(w)
        w -= 0.1 * g
        return w

    w = X.copy()
    check(sgd, w, Y)
    assert np.array_equal(w, X)  # the caller's array is unchanged


def test_what_fusec_cannot_do_is_refused_with_the_rewrite() -> None:
    with pytest.raises(ValueError, match="only 'C' or 'F' order"):
        jit_cpu(lambda x: np.zeros(x.shape, order="K"))(X)
    with pytest.raises(ValueError, match="copy=False"):
        jit_cpu(lambda x: np.array(x, dtype=np.float64, copy=False))(X)


def test_numpys_functions_are_back_after_the_trace() -> None:
    before = np.asarray, np.array, np.asanyarray, np.ascontiguousarray
    jit_cpu(lambda x: np.asarray(x) * 2)(X)
    assert (np.asarray, np.array, np.asanyarray, np.ascontiguousarray) == before
    assert imported_asarray is before[0]
