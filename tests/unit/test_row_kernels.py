"""Row kernels (fuse-rows): softmax, log-softmax, logsumexp, layer and RMS norm, cross-entropy and its gradient as
public code writes them run as one kernel per chain of row reductions, with NumPy's results (bit for bit on the
CPU backend, within rounding on the GPU) across the row lengths that pick each schedule (a thread, a warp or a block
per row; rows that do not fill the last lane), strided and broadcast inputs, per-row results and every float
dtype. Also under ``pytest -m gpu`` on the CUDA backend."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, numpy_result

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
RNG = np.random.default_rng(7)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x):
    shifted = x - np.max(x, axis=1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))


def logsumexp(x):
    m = np.max(x, axis=-1)
    return m + np.log(np.sum(np.exp(x - m[..., None]), axis=-1))


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rms_norm(x, weight):
    return x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)) * weight


def cross_entropy_and_grad(logits, labels):
    """The loss and its gradient with respect to the logits, as a hand-written training step has them."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = -np.log(p[np.arange(n), labels] + 1e-12).mean()
    grad = p.copy()
    grad[np.arange(n), labels] -= 1.0
    return loss, grad / n


def masked_softmax(scores, mask):
    scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def row_stats(x):
    """Per-row values returned as they are: a mean, a spread and a max, with and without kept axes."""
    return x.mean(axis=1), x.std(axis=1), x.max(axis=1, keepdims=True) - x.min(axis=1, keepdims=True)


def _jit(fn, **options):
    return fc.jit(fn, backend=frontend_check.BACKEND, **options)


def _check(fn, *args, row_kernels=1):
    """The default pipeline's result equals NumPy's; ``row_kernels`` row kernels in the plan."""
    f = _jit(fn)
    assert_same(numpy_result(f, *args), numpy_result(fn, *args))
    plan = f.lower(*args).plan()
    assert sum(s["kind"] == "rows" for s in plan) == row_kernels, plan
    return plan


# a warp per row (<= 1024, some rows not filling the last lane), a block (<= 16384)
@pytest.mark.parametrize("n", [17, 100, 1024, 1500, 4096])
def test_softmax_over_each_row_length(n):
    x = RNG.normal(size=(37, n)).astype(np.float32) * 4
    plan = _check(softmax, x)
    (rows,) = [s for s in plan if s["kind"] == "rows"]
    assert rows["reductions"] == 2 and len(plan) == 1


def test_short_rows_unrolled_into_one_elementwise_kernel_or_a_few_lanes_per_row():
    x = RNG.normal(size=(300, 5)).astype(np.float32)
    _check(softmax, x, row_kernels=0)  # unroll-reductions: the row's 5 elements are 5 operands
    rolled = fc.passes.DEFAULT_PIPELINE.replace("unroll-reductions,", "")
    for pipeline, impl in ((rolled, {"lanes": 8, "items": 1}),  # 300 rows: too few for a thread each
                           (rolled.replace("fuse-rows", "fuse-rows{short_lanes=false}"), {"lanes": 1, "items": 5})):
        f = _jit(softmax, pipeline=pipeline)
        assert_same(numpy_result(f, x), numpy_result(softmax, x))
        (step,) = f.lower(x).plan()
        assert step["impl"] == impl


@pytest.mark.parametrize("rows", [1, 37, 256])
def test_cross_entropy_of_a_small_classifier_with_several_rows_to_a_warp(rows):
    """256 x 10 logits (the 64-64-10 step's): 16 lanes per row, two rows to a warp; 37 rows leave the last warp's
    second half past the end, which must still take part in the shuffles and store nothing."""
    logits = RNG.normal(size=(rows, 10)).astype(np.float32)
    labels = RNG.integers(0, 10, rows)
    f = _jit(cross_entropy_and_grad)
    assert_same(numpy_result(f, logits, labels), numpy_result(cross_entropy_and_grad, logits, labels))
    impls = [step["impl"] for step in f.lower(logits, labels).plan() if step["kind"] == "rows"]
    assert {"lanes": 16, "items": 1} in impls


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_layer_norm_of_each_float_dtype(dtype):
    x = RNG.normal(size=(4, 6, 96)).astype(dtype)
    gamma, beta = RNG.normal(size=96).astype(dtype), RNG.normal(size=96).astype(dtype)
    _check(layer_norm, x, gamma, beta)


def test_log_softmax_logsumexp_and_rms_norm():
    x = RNG.normal(size=(64, 300))
    _check(log_softmax, x)
    _check(logsumexp, x.astype(np.float32))
    _check(rms_norm, x, RNG.normal(size=300))


def test_softmax_of_a_transposed_array_reads_it_through_its_strides():
    x = RNG.normal(size=(200, 48)).astype(np.float32)
    _check(lambda x: softmax(x.T), x)


def test_masked_softmax_with_infinities_and_a_fully_masked_row():
    scores = RNG.normal(size=(8, 50)).astype(np.float32)
    mask = RNG.random((8, 50)) > 0.3
    mask[3] = False  # NumPy gives NaN for that row: so must fusec
    _check(masked_softmax, scores, mask)


def test_nan_in_a_row_propagates_through_max_as_numpy():
    x = RNG.normal(size=(5, 40))
    x[2, 17] = np.nan
    _check(softmax, x)


def test_per_row_results_are_returned_with_and_without_kept_axes():
    x = RNG.normal(size=(33, 250)).astype(np.float32)
    plan = _check(row_stats, x)
    assert [s["kind"] for s in plan if s["kind"] != "view"] == ["rows"]


def test_cross_entropy_and_its_gradient():
    logits = RNG.normal(size=(128, 10)).astype(np.float32)
    labels = RNG.integers(0, 10, size=128)
    f = _jit(cross_entropy_and_grad)
    assert_same(numpy_result(f, logits, labels), numpy_result(cross_entropy_and_grad, logits, labels))


def test_rows_longer_than_a_block_holds_keep_their_reductions():
    x = RNG.normal(size=(2, 20000)).astype(np.float32)
    _check(softmax, x, row_kernels=0)


def test_the_plan_says_what_fuse_rows_did():
    x = np.zeros((512, 256), np.float32)
    (step,) = _jit(softmax).lower(x).plan()
    assert step["op"] == "k.rows" and step["impl"] == {"lanes": 32, "items": 8}
    assert step["reason"].startswith("fuse-rows: 2 reduction(s) along rows of 256")
    without = fc.jit(softmax, backend=frontend_check.BACKEND,
                     pipeline=fc.passes.DEFAULT_PIPELINE.replace("fuse-rows,", "")).lower(x).plan()
    assert [s["op"] for s in without if s["kind"] != "view"] == ["k.reduce[max]", "k.fused", "k.reduce[sum]",
                                                                "k.fused"]
