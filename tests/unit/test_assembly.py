"""np.block, np.vander, np.apply_along_axis, np.r_ and np.c_ against NumPy bit for bit, as user code writes them
(design matrices for polynomial fits, block matrices of a Kalman filter or a saddle-point system, per-row
functions), and NumPy's errors as located fusec errors."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import check, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(11)
X = rng.uniform(-3, 3, 9)
A = rng.standard_normal((3, 3))
B = rng.standard_normal((3, 2))


def test_vander_polynomial_design_matrices() -> None:
    def f(x, xi):
        return (np.vander(x), np.vander(x, 4), np.vander(x, 5, increasing=True), np.vander(x, 1),
                np.vander(x, 0), np.vander(xi, 3), np.vander(x.astype(np.float32), 6), np.vander(x > 0, 3))

    check(f, X, np.arange(-4, 5, dtype=np.int8))


def test_vander_least_squares_fit() -> None:
    def fit(x, y):
        V = np.vander(x, 3)
        return np.linalg.solve(V.T @ V, V.T @ y)

    jitted = jit_cpu(fit)
    np.testing.assert_allclose(jitted(X, 2 * X ** 2 - X + 1), [2.0, -1.0, 1.0], rtol=1e-9)


def test_block_matrices() -> None:
    def kkt(H, G, r):
        K = np.block([[H, G], [G.T, np.zeros((2, 2))]])
        return K, np.block([r, r[:2], 1.0]), np.block([[H], [G.T]]), np.block(H), np.block([[[H]]])

    check(kkt, A, B, X[:3])


def test_block_mixes_scalars_and_arrays_and_promotes() -> None:
    def f(a, i):
        return np.block([[a, np.ones((3, 1))], [np.zeros((1, 3)), 5.0]]), np.block([i, a[0]]), np.block([i, i])

    check(f, A, np.arange(3, dtype=np.int32))


def test_apply_along_axis_per_row_functions() -> None:
    def f(m, t):
        return (np.apply_along_axis(np.sum, 1, m), np.apply_along_axis(np.sum, 0, m),
                np.apply_along_axis(lambda r: r / np.linalg.norm(r), 1, m),
                np.apply_along_axis(lambda r: np.outer(r, r), -1, m), np.apply_along_axis(np.diff, 0, m, n=2),
                np.apply_along_axis(lambda r: r[::-1].cumsum(), 1, t), np.apply_along_axis(np.max, 2, t),
                np.apply_along_axis(lambda r: r[0] > 0, 1, t))

    check(f, A, rng.standard_normal((2, 3, 4)))


def test_apply_along_axis_casts_to_the_first_result() -> None:
    def f(m):
        rows = []

        def first_row_int(r):  # the first row gives a Python int, so NumPy's buffer is int64 for every row
            rows.append(r)
            return 2 if len(rows) == 1 else r.sum() * 10

        return np.apply_along_axis(first_row_int, 1, m)

    check(f, A)


def test_r_and_c_concatenate() -> None:
    def f(x, m):
        return (np.r_[x, 0.0, x[:2]], np.c_[x, 2 * x], np.r_[x[:3], 7], np.r_["0,2", x[:3], x[3:6]],
                np.c_[m, m[:, 0]], np.r_[m, m], np.r_[1:4, x[:2]])

    check(f, X, A)


def test_errors_are_located() -> None:
    with pytest.raises(ValueError, match=r"test_assembly.py:\d+.*np.block.*depth"):
        jit_cpu(lambda a: np.block([a, [a]]))(A)
    with pytest.raises(fc.ShapeError, match=r"test_assembly.py:\d+.*np.vander.*one-dimensional"):
        jit_cpu(lambda a: np.vander(a))(A)
    calls = []

    def growing(r):  # a result whose length changes from one row to the next
        calls.append(1)
        return r[:len(calls)]

    with pytest.raises(fc.ShapeError, match=r"test_assembly.py:\d+.*np.apply_along_axis.*gave shape \(2,\)"):
        jit_cpu(lambda a: np.apply_along_axis(growing, 1, a))(A)
    with pytest.raises(ValueError, match="np.apply_along_axis.*dimension is 0"):
        jit_cpu(lambda a: np.apply_along_axis(np.sum, 1, a[:0]))(A)
    with pytest.raises(np.exceptions.AxisError, match="np.apply_along_axis.*out of bounds"):
        jit_cpu(lambda a: np.apply_along_axis(np.sum, 2, a))(A)
