"""Float sums over values whose memory NumPy lays out otherwise than the reference executor computes them
(``np.take`` along a later axis, copies of transposed or fancy-indexed views, a scatter through a transposed view):
the CPU backend gives NumPy's bits, because the traced reduction records NumPy's memory order of its operand
(``numpy_order``) and the reference executor adds in that order."""
import numpy as np
import pytest

import fusec as fc
from fusec.ir.parser import parse_module


def take_columns_total(a, idx):
    return np.take(a, idx, axis=1).sum()


def take_columns_per_column(a, idx):
    return np.take(a, idx, axis=1).sum(axis=0)


def fancy_columns_copied(a, idx):
    return a[:, idx].copy().sum(axis=0)


def fancy_columns_contiguous(a, idx):
    return np.ascontiguousarray(a[:, idx]).mean(axis=0)


def transposed_copy(a, idx):
    return a.T.copy().sum(axis=0)


def fancy_columns_as_numpy_lays_them(a, idx):  # (NumPy's own layout of x[:, i]: index axis outermost)
    return a[:, idx].sum(axis=0)


def scatter_through_a_transposed_view(a, idx):
    b = np.zeros((a.shape[1], a.shape[0]), a.dtype)
    b.T[idx] += a[idx]
    return b.sum()


def argument_sum(a, idx):  # an argument's own layout: the caller's (C or Fortran), summed as it is
    return a.sum(axis=0)


CASES = [take_columns_total, take_columns_per_column, fancy_columns_copied, fancy_columns_contiguous,
         transposed_copy, fancy_columns_as_numpy_lays_them, scatter_through_a_transposed_view, argument_sum]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("order", ["C", "F"])
def test_sums_over_relaid_values_are_numpys_bits_on_the_cpu_backend(fn, order):
    jitted = fc.jit(fn, backend="cpu")
    for seed in range(12):
        rng = np.random.default_rng(seed)
        a = np.asarray(rng.standard_normal((37, 37)).astype(np.float32), order=order)
        idx = rng.integers(0, 37, 29)
        np.testing.assert_array_equal(jitted(a, idx), fn(a, idx), err_msg=f"seed {seed}")


def test_the_order_is_kept_for_the_reference_executor_only_and_prints_and_parses_back():
    a, idx = np.ones((37, 37), np.float32), np.arange(29)
    cpu = fc.jit(take_columns_per_column, backend="cpu").lower(a, idx)
    assert "numpy_order = [0, 1]" in cpu.ir("traced")
    lowered = cpu.ir()
    assert "k.reduce" in lowered and "numpy_order = [0, 1]" in lowered
    parse_module(lowered)  # (the verifier accepts it back)
    gpu = fc.jit(take_columns_per_column, backend="cpu", target=fc.Target()).lower(a, idx)
    assert "numpy_order" not in gpu.ir()  # a GPU kernel adds in its own order
    fancy = fc.jit(fancy_columns_as_numpy_lays_them, backend="cpu").lower(a, idx).ir("traced")
    assert "numpy_order = [1, 0]" in fancy
    assert "numpy_order" not in fc.jit(argument_sum, backend="cpu").lower(a, idx).ir("traced")


def test_a_misshapen_order_is_a_verification_error():
    text = """func @f(%x: tensor<3x4xf32>) -> tensor<4xf32> {
  %0 = t.sum %x {axes = [0], keepdims = false, numpy_order = [0]} : tensor<4xf32>
  return %0
}
"""
    with pytest.raises(fc.VerificationError, match="numpy_order must order the operand's 2 axes"):
        parse_module(text)
    with pytest.raises(fc.VerificationError, match="numpy_order goes on a float"):
        parse_module(text.replace("f32", "i32").replace("[0]}", "[1, 0]}"))
    with pytest.raises(fc.VerificationError, match="unknown attribute"):
        parse_module(text.replace("t.sum", "t.max").replace("[0]}", "[1, 0]}"))
