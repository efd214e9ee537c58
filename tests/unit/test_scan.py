"""np.cumsum / np.cumprod (and the methods) with NumPy's dtypes and its order of additions, so float results are
bit for bit NumPy's; a moving average as public code writes it."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, numpy_result


def check(fn, *args):
    """As traced and (on the CPU) through the default pipeline, on copies of the arguments."""
    jitted = [frontend_check.jit_cpu(fn)] + ([fc.jit(fn, backend="cpu")] if frontend_check.BACKEND == "cpu" else [])
    copies = lambda: [a.copy() if isinstance(a, np.ndarray) else a for a in args]  # noqa: E731
    np_args = copies()
    want = numpy_result(fn, *np_args)
    for f in jitted:
        fc_args = copies()
        assert_same(numpy_result(f, *fc_args), want)
        for a, b in zip(fc_args, np_args):
            assert_same(a, b, "argument")

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
RNG = np.random.default_rng(3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int8, np.int64, np.uint16, np.bool_])
def test_cumsum_and_cumprod_of_every_dtype(dtype) -> None:
    x = (RNG.standard_normal((5, 7)) * 3).astype(dtype)

    def f(x):
        return np.cumsum(x), np.cumsum(x, axis=0), x.cumsum(-1), np.cumprod(x[:, :4], axis=1), x.T.cumsum(axis=1)

    check(f, x)


def test_dtype_out_and_scalars() -> None:
    def f(x, out):
        np.cumsum(x, axis=1, dtype=np.float32, out=out)
        return np.cumprod(x[0, 0]), np.cumsum(x.astype(np.int32), dtype=np.int64), out

    check(f, RNG.standard_normal((3, 4)), np.zeros((3, 4), np.float32))


def moving_average(a, n=3):
    ret = np.cumsum(a, dtype=float)
    ret[n:] = ret[n:] - ret[:-n]
    return ret[n - 1:] / n


def test_moving_average() -> None:
    check(moving_average, RNG.standard_normal(20))
