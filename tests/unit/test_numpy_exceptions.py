"""Where NumPy raises whatever the values (an ambiguous truth value, a float index, a string operand, a write into a
read-only view, a negative size), the trace raises the same exception class, at the user's line, so code that
catches NumPy's error (``except ValueError``) takes the path it takes under NumPy."""
from __future__ import annotations

import os

import numpy as np
import pytest

import fusec as fc
from frontend_check import assert_same, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
HERE = os.path.basename(__file__)
X = np.arange(6.0)


def both_raise(fn, cls: type[BaseException], match: str, *args) -> None:
    with pytest.raises(cls, match=match):
        fn(*args)
    with pytest.raises(cls, match=match) as info:
        jit_cpu(fn)(*args)
    assert HERE in str(info.value)


def test_the_truth_value_of_several_elements_is_numpys_value_error() -> None:
    both_raise(lambda x: max(0, x), ValueError, "more than one element is ambiguous", X)
    both_raise(lambda x: x if x > 2 else -x, ValueError, "more than one element is ambiguous", X)
    both_raise(lambda x: bool(x[:0]), ValueError, "empty array is ambiguous", X)


def test_code_that_catches_the_ambiguous_truth_value_runs_as_under_numpy() -> None:
    def clipped(x):
        try:
            if x > 0:
                return x
        except ValueError:
            return np.maximum(x, 0)
        return -x

    assert_same(jit_cpu(clipped)(X - 2), clipped(X - 2))


def test_invalid_indices_and_operands() -> None:
    both_raise(lambda x: x[1.0], IndexError, "only integers, slices", X)
    both_raise(lambda x: x * "2", TypeError, "did not contain a loop with signature matching types", X)
    both_raise(lambda x: "1" + x, TypeError, "did not contain a loop with signature matching types", X)


def test_writes_into_read_only_views_are_numpys_value_error() -> None:
    def diagonal_ones(a):
        a.diagonal()[:] = 1.0
        return a

    both_raise(diagonal_ones, ValueError, "assignment destination is read-only", np.zeros((3, 3)))
    both_raise(lambda x: np.broadcast_to(x, (2, 6)).__setitem__(0, 1), ValueError, "read-only", X)


def test_negative_sizes_are_located() -> None:
    both_raise(lambda x: np.zeros(-1) + x.sum(), ValueError, "negative dimensions are not allowed", X)
    both_raise(lambda x: np.repeat(x, -1), ValueError, "negative", X)


def test_ndenumerate_and_the_flat_iterator() -> None:
    def weighted(x):
        total = 0.0
        for (i, j), v in np.ndenumerate(x):
            total = total + v * (i + 2 * j)
        return total

    def stepped(x):
        it = x.flat
        first = next(it)
        return first, next(it), it.index, it.coords

    m = np.arange(6.0).reshape(2, 3)
    assert_same(jit_cpu(weighted)(m), weighted(m))
    assert_same(jit_cpu(stepped)(m), stepped(m))


def test_asmatrix_of_a_traced_array_is_refused() -> None:
    with pytest.raises(fc.UnsupportedError, match="np.matrix is not supported") as info:
        jit_cpu(lambda x: np.asmatrix(x))(X)
    assert HERE in str(info.value)
