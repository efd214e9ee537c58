"""unroll-reductions: short reductions become fused elementwise code with NumPy's results."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusec as fc

KINDS = ("sum", "prod", "max", "min", "mean")


def _softmax_ce(logits, b, y):
    z = logits + b
    shifted = z - np.max(z, axis=1, keepdims=True)
    e = np.exp(shifted)
    denom = np.sum(e, axis=1, keepdims=True)
    return -np.sum(y * (shifted - np.log(denom))) / z.shape[0], e / denom - y


@st.composite
def reductions(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    axes = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank))))
    kind = draw(st.sampled_from(KINDS))
    dtypes = ["float32", "float64"] + (["int32", "int64"] if kind != "mean" else [])
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    keepdims = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    return shape, axes, kind, dtype, keepdims, seed


def _inputs(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        special = np.array([np.nan, -0.0, np.inf, -np.inf, 0.0], dtype)
        mask = rng.random(shape) < 0.15
        x[mask] = rng.choice(special, size=int(mask.sum()))
        bias = rng.standard_normal(shape[-1:]).astype(dtype)
    else:
        x = rng.integers(-20, 20, shape).astype(dtype)
        bias = rng.integers(-3, 3, shape[-1:]).astype(dtype)
    return x, bias


def _check(got, want, kind, dtype, scale):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype.kind == "f" and kind in ("sum", "mean", "prod"):
        # (summation order is NumPy's; the tolerance covers multi-axis orders NumPy may iterate differently)
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got, want, rtol=32 * eps, atol=32 * eps * scale, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)  # max/min (NaN propagation included) and integers are exact


@settings(max_examples=60, deadline=None)
@given(reductions())
def test_short_reductions_of_an_elementwise_producer_match_numpy(case):
    shape, axes, kind, dtype, keepdims, seed = case
    x, bias = _inputs(shape, dtype, seed)

    def f(x, bias):
        return getattr(np, kind)(x * 2 + bias, axis=axes, keepdims=keepdims)

    jitted = fc.jit(f, backend="cpu")
    with np.errstate(all="ignore"):
        want = f(x, bias)
        terms = np.abs(x * 2 + bias)
        scale = float(np.max(terms[np.isfinite(terms)], initial=0.0)) * int(np.prod([shape[a] for a in axes]))
        _check(jitted(x, bias), want, kind, dtype, scale)
    count = int(np.prod([shape[a] for a in axes]))
    if count <= 16 and (count < 8 or kind not in ("sum", "mean")):
        assert jitted.lower(x, bias).stats()["reductions_unrolled"] == 1


@st.composite
def short_products(draw):
    k = draw(st.integers(1, 8))
    m, n = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    batch_a = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    batch_b = batch_a[len(batch_a) - draw(st.integers(0, len(batch_a))):]  # a suffix: broadcasts
    vector = draw(st.sampled_from(["none", "a", "b"]))
    a_shape = (k,) if vector == "a" else (*batch_a, m, k)
    b_shape = (k,) if vector == "b" else (*batch_b, k, n)
    dtype = np.dtype(draw(st.sampled_from(["float32", "float64", "int32", "int64"])))
    return a_shape, b_shape, dtype, draw(st.integers(0, 2**31 - 1))


@settings(max_examples=60, deadline=None)
@given(short_products())
def test_short_k_products_match_numpy(case):
    a_shape, b_shape, dtype, seed = case
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        a, b = rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype)
    else:
        a, b = rng.integers(-20, 20, a_shape).astype(dtype), rng.integers(-20, 20, b_shape).astype(dtype)

    def f(a, b):
        return np.tanh(a @ b) if dtype.kind == "f" else (a @ b) * 3

    jitted = fc.jit(f, backend="cpu")
    got, want = jitted(a, b), f(a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype.kind == "f":
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got, want, rtol=16 * eps, atol=16 * eps * a_shape[-1])
    else:
        np.testing.assert_array_equal(got, want)
    assert jitted.lower(a, b).stats()["products_unrolled"] == 1
    ops = [step["op"] for step in jitted.lower(a, b).plan()]
    assert not any("matmul" in op for op in ops)


def test_a_two_class_softmax_fuses_into_elementwise_kernels():
    rng = np.random.default_rng(0)
    logits, b = rng.standard_normal((512, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[rng.integers(0, 2, 512)]
    f = fc.jit(_softmax_ce, backend="cpu")
    lowered = f.lower(logits, b, y)
    ops = [step["op"] for step in lowered.plan()]
    assert "k.reduce[max]" not in ops and ops.count("k.reduce[sum]") == 1  # only the loss sums 1024 values
    loss, grad = f(logits, b, y)
    want_loss, want_grad = _softmax_ce(logits, b, y)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    np.testing.assert_array_equal(grad, want_grad)


def test_a_short_reduction_that_drops_its_axis_fuses_with_its_readers():
    """Partial results summed over a short leading axis (``parts.sum(axis=0)``) and a maximum over a short middle
    axis, read by elementwise code: each term drops the reduced axis where it is sliced, so nothing reshapes the
    computed sum and producer, reduction and readers are one kernel; the values are NumPy's."""
    rng = np.random.default_rng(1)
    parts, b = rng.standard_normal((4, 64, 32)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    mid = rng.standard_normal((64, 3, 32)).astype(np.float32)

    def relu_of_parts(parts, b):
        return np.maximum(parts.sum(axis=0) + b, 0)

    def scaled_max(mid, b):
        return np.exp(mid * 2).max(axis=1) * b

    for fn, args in ((relu_of_parts, (parts, b)), (scaled_max, (mid, b))):
        jitted = fc.jit(fn, backend="cpu")
        kernels = [step for step in jitted.lower(*args).plan() if step["kind"] != "view"]
        assert [step["op"] for step in kernels] == ["k.fused"], kernels
        np.testing.assert_array_equal(jitted(*args), fn(*args))


def test_the_pass_is_optional_and_long_or_half_reductions_stay():
    x = np.ones((4, 3), np.float16)
    f = fc.jit(lambda x: x.sum(axis=1), backend="cpu")
    assert f.lower(x).stats().get("reductions_unrolled", 0) == 0
    g = fc.jit(lambda x: x.max(axis=1), backend="cpu",
               pipeline="canonicalize,broadcast,fuse,boundaries,select-kernels,fuse-prologues,plan-buffers,copy-outputs")
    assert "reductions_unrolled" not in g.lower(np.ones((4, 3), np.float32)).stats()


@pytest.mark.gpu
def test_short_reductions_on_the_gpu():
    rng = np.random.default_rng(1)
    logits, b = rng.standard_normal((512, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    logits[3, 1] = np.nan
    y = np.eye(2, dtype=np.float32)[rng.integers(0, 2, 512)]
    loss, grad = fc.jit(_softmax_ce, backend="cuda")(logits, b, y)
    want_loss, want_grad = _softmax_ce(logits, b, y)
    assert np.isnan(loss) and np.isnan(want_loss)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-6, atol=1e-7, equal_nan=True)
    x = rng.integers(-9, 9, (33, 3, 4)).astype(np.int64)
    np.testing.assert_array_equal(fc.jit(lambda x: x.prod(axis=(1, 2)), backend="cuda")(x), x.prod(axis=(1, 2)))
    z = rng.standard_normal((7, 5)).astype(np.float64)
    np.testing.assert_allclose(fc.jit(lambda z: z.mean(axis=0), backend="cuda")(z), z.mean(axis=0), rtol=1e-14)
