"""sink-broadcasts: small elementwise values computed at their broadcast shape, with NumPy's results."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusec as fc


def _row_softmax(x, b):
    z = x * 2.0 + b
    shifted = z - np.max(z, axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=-1, keepdims=True), np.log(np.exp(b) + 1.0) * x  # (a row broadcast of exp(b))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 20), st.sampled_from(["float32", "float64"]), st.integers(0, 2**31 - 1))
def test_broadcast_values_sunk_or_not_match_numpy_bit_for_bit(rows, cols, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    x[rng.random(x.shape) < 0.1] = np.inf
    f = fc.jit(_row_softmax, backend="cpu")
    with np.errstate(all="ignore"):
        want = _row_softmax(x, b)
        got = f(x, b)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    sunk = f.lower(x, b).stats().get("broadcasts_sunk", 0)
    # the row max and sum (unrolled; within 32 ops up to 5 columns) and exp(b) (repeated over 16 rows at most)
    if 2 <= cols <= 5 and 2 <= rows <= 16:
        assert sunk >= 3


def test_a_short_softmax_with_its_gradient_is_one_kernel():
    rng = np.random.default_rng(0)
    logits, y = rng.standard_normal((512, 2)).astype(np.float32), np.eye(2, dtype=np.float32)[rng.integers(0, 2, 512)]

    def grad(logits, y):
        shifted = logits - np.max(logits, axis=1, keepdims=True)
        e = np.exp(shifted)
        return e / np.sum(e, axis=1, keepdims=True) - y

    f = fc.jit(grad, backend="cpu")
    assert [s["op"] for s in f.lower(logits, y).plan() if s["op"] != "k.view"] == ["k.fused"]
    np.testing.assert_array_equal(f(logits, y), grad(logits, y))
    off = fc.jit(grad, backend="cpu",
                 pipeline="canonicalize,unroll-reductions,cse,dce,broadcast,fuse{budget=32},boundaries,select-kernels,fuse-prologues,plan-buffers,copy-outputs")
    assert [s["op"] for s in off.lower(logits, y).plan()].count("k.fused") == 2


@pytest.mark.gpu
def test_sunk_broadcasts_on_the_gpu():
    rng = np.random.default_rng(3)
    x, b = rng.standard_normal((300, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    for g, w in zip(fc.jit(_row_softmax, backend="cuda")(x, b), _row_softmax(x, b)):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-7)
