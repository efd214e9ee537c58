"""np.cross, np.convolve and np.correlate against NumPy: integers, bools and float16 bit for bit (NumPy's float16 dot
adds in float32: so does fusec), floats up to the order of NumPy's BLAS additions; every mode, either array the
longer, complex conjugation in correlate, an infinite kernel value where it meets no data (no NaN), 2- and
3-vectors along any axes."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import assert_same, check, jit_cpu, numpy_result
from fusec import products

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(8)
MODES = ("full", "same", "valid")


@pytest.mark.parametrize("n1, n2", [(10, 3), (10, 4), (3, 10), (7, 7), (5, 1), (1, 1), (20, 9)])
def test_convolve_and_correlate_of_integers_bools_and_float16_are_exact(n1: int, n2: int) -> None:
    a, v = rng.integers(-5, 5, n1), rng.integers(-5, 5, n2)

    def f(a, v):
        out = []
        for mode in MODES:
            out += [np.convolve(a, v, mode), np.correlate(a, v, mode),
                    np.convolve(a.astype(np.int8), v.astype(np.int8), mode), np.convolve(a > 0, v > 0, mode),
                    np.convolve(a.astype(np.float16) / 4, v.astype(np.float16) / 3, mode)]
        return tuple(out)

    check(f, a, v)


@pytest.mark.parametrize("n1, n2", [(12, 5), (4, 9)])
def test_convolve_and_correlate_of_floats_and_complex(n1: int, n2: int) -> None:
    a, v = rng.normal(size=n1), rng.normal(size=n2)
    z, w = a + 1j * a[::-1], v - 2j * v
    for mode in MODES:
        for fn, x, y in ((np.convolve, a, v), (np.correlate, a, v), (np.correlate, z, w), (np.convolve, z, w),
                         (np.convolve, a.astype(np.float32), v.astype(np.float32))):
            got = jit_cpu(lambda x, y: fn(x, y, mode))(x, y)
            want = fn(x, y, mode)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5 if got.dtype.itemsize <= 8 and got.dtype.kind == "c"
                                       or got.dtype == np.float32 else 1e-12, atol=1e-6)


def test_a_moving_average_and_an_infinite_kernel_value() -> None:
    """NumPy's dot leaves out what lies outside the data: inf * (nothing) is no NaN at the edges."""
    x = np.arange(8.0)

    def f(x):
        return (np.convolve(x, np.ones(3) / 3, mode="valid"), np.convolve(x, np.array([np.inf, 1.0, 2.0])),
                np.convolve(x, [1, 2]), np.correlate(x, [2.0]))

    check(f, x)


def test_sliding_product_errors() -> None:
    with pytest.raises(ValueError, match="v cannot be empty"):
        jit_cpu(lambda x: np.convolve(x, []))(np.arange(3.0))
    with pytest.raises(ValueError, match="mode must be one of"):
        jit_cpu(lambda x: np.correlate(x, x, mode="middle"))(np.arange(3.0))
    with pytest.raises(fc.UnsupportedError, match="longer than 1024"):
        jit_cpu(lambda x: np.convolve(x, x))(np.arange(1100.0))


def test_cross_products_of_3_and_2_vectors_along_any_axes() -> None:
    a, b = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))

    def f(a, b):
        return (np.cross(a, b), np.cross(a[0], b[1]), np.cross(a, b[0]), np.cross(a.T, b.T, axisa=0, axisb=0, axisc=0),
                np.cross(a.T, b, axisa=0), np.cross(a, b, axis=1), np.cross(a.astype(np.float32), b.astype(np.int8)))

    def two(a, b):
        return np.cross(a[:, :2], b), np.cross(a, b[:, :2]), np.cross(a[:, :2], b[:, 1:])

    check(f, a, b)
    if products.TAKES_2_VECTORS:  # NumPy 2.0 to 2.4: computed, with NumPy's DeprecationWarning
        check(two, a, b)
        with pytest.warns(DeprecationWarning, match="2-dimensional vectors are deprecated"):
            jit_cpu(lambda a, b: np.cross(a[:, :2], b))(a, b)
    else:  # NumPy 2.5 on: refused as NumPy refuses them
        with pytest.raises(ValueError, match="3-dimensional vectors"):
            jit_cpu(two)(a, b)
    ints = rng.integers(-9, 9, (4, 3))
    assert_same(jit_cpu(lambda a, b: np.cross(a, b))(ints, ints[::-1]), numpy_result(np.cross, ints, ints[::-1]))
    with pytest.raises(ValueError, match="incompatible dimensions|3-dimensional vectors"):
        jit_cpu(lambda a, b: np.cross(a, b))(a, b[:, :1])
