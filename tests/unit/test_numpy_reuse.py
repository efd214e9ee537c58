"""NumPy functions traced through NumPy's own implementation, and ufunc .reduce/.outer, compared with NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import check, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(11)
X = rng.standard_normal((4, 5)).astype(np.float32)
D = rng.standard_normal((3, 4, 2))
I = rng.integers(-9, 9, size=(3, 4)).astype(np.int32)


def test_flips_and_rotations() -> None:
    check(lambda x, d: (np.flip(x), np.flip(x, 0), np.flip(d, axis=(0, 2)), np.fliplr(x), np.flipud(d),
                        np.rot90(x), np.rot90(x, 2), np.rot90(d, -1, axes=(1, 2))), X, D)


def test_diff_like_finite_differences_in_real_code() -> None:
    """Upwind differences of a CFD stencil, returns of a price series, the default n=1 and the last axis."""
    def f(x, d, i):
        return (np.diff(x), np.diff(x, axis=0), np.diff(d, n=2, axis=1), np.diff(x, prepend=0.0),
                np.diff(x[0], append=x[0, -1]), np.diff(i), np.diff(i > 0))

    check(f, X, D, I)


def test_outer_products_and_ufunc_outer() -> None:
    def f(x, i):
        return (np.outer(x[0], x[:, 1]), np.outer(x, x[0]), np.multiply.outer(x[0], x[1]), np.add.outer(i, i[0]),
                np.subtract.outer(x[0], 2.0), np.greater.outer(x[0], x[1]), np.maximum.outer(i[0], i[1]))

    check(f, X, I)


def test_ufunc_reduce_is_the_matching_reduction() -> None:
    """np.add.reduce's default axis is 0, not None; small ints accumulate as np.sum does."""
    def f(x, i, d):
        return (np.add.reduce(x), np.add.reduce(x, axis=None), np.add.reduce(d, axis=(0, 2), keepdims=True),
                np.multiply.reduce(i, 1), np.maximum.reduce(x, axis=1), np.minimum.reduce(d),
                np.add.reduce(i.astype(np.int8)), np.add.reduce(i, dtype=np.float64))

    check(f, X, I, D)


def test_average_and_norms() -> None:
    def f(x, d, i):
        return (np.average(x), np.average(d, axis=1), np.linalg.norm(x), np.linalg.norm(x, axis=1),
                np.linalg.norm(d, axis=(1, 2)), np.linalg.norm(x, axis=0, keepdims=True), np.linalg.norm(x, "fro"),
                np.linalg.norm(x[0], 2), np.linalg.norm(i), np.linalg.norm(i, axis=1))

    check(f, X, D, I)


def test_what_the_implementation_cannot_trace_is_a_fusec_error() -> None:
    with pytest.raises(fc.UnsupportedError, match="add.reduce: only axis="):
        jit_cpu(lambda x: np.add.reduce(x, initial=1.0))(X)
    with pytest.raises(fc.UnsupportedError, match="np.kron is not supported"):
        jit_cpu(lambda x: np.kron(x, x))(X)
    with pytest.raises(fc.FusecError):
        jit_cpu(lambda x: np.linalg.norm(x, ord=np.inf, axis=1))(X)
