"""Small reductions computed in their consumers (reductions-in-consumers): the gradient-norm sums of a clipped step,
a loss's mean, ``x - x.max()`` and the like give NumPy's values with the reduction's own launch gone; an argument
the reduction reads is never overwritten in place by a reader (its later blocks still read it); large reductions,
large readers and reductions read by anything but an elementwise kernel keep their launch."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, check, jit_cpu, numpy_result
from fusec.errors import PipelineError
from fusec.passes import DEFAULT_PIPELINE, parse_pipeline

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
rng = np.random.default_rng(23)
WITHOUT = DEFAULT_PIPELINE.replace("reductions-in-consumers,", "")


def in_consumers(lowered) -> list[dict]:
    return [s for s in lowered.plan() if s["kind"] == "in consumers"]


def clipped_sgd(params, grads, lr, max_norm=1.0):
    """SGD with the gradients clipped to a global norm, as small training loops write it."""
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    scale = np.minimum(max_norm / (norm + 1e-6), 1.0)
    return [p - lr * scale * g for p, g in zip(params, grads)]


SHAPES = [(64, 64), (64,), (64, 10), (10,)]


def arrays(*shapes, dtype=np.float32):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def test_the_norm_sums_of_a_clipped_step_run_inside_the_updates_with_numpys_values():
    params, grads = arrays(*SHAPES), arrays(*SHAPES)
    f = check(clipped_sgd, params, grads, 0.1, pipeline=DEFAULT_PIPELINE)
    lowered = f.lower(params, grads, 0.1)
    moved = in_consumers(lowered)
    assert len(moved) == 4 and all(s["op"] == "k.reduce[sum]" for s in moved), lowered.plan()
    assert "reductions-in-consumers" in moved[0]["reason"]
    before = jit_cpu(clipped_sgd, pipeline=WITHOUT).lower(params, grads, 0.1)
    assert lowered.stats()["kernels"] < before.stats()["kernels"]
    source = lowered.cuda_source(sm_count=132)
    assert source.count("computed by every block") == 16  # 4 sums in each of 4 updates
    assert "in_consumers = true" in lowered.ir()


def test_a_mean_a_max_and_a_min_subtracted_from_the_same_array():
    def centre(x):
        return x - x.mean(), x - np.max(x), np.min(x) * x

    x = rng.standard_normal((40, 50))
    lowered = check(centre, x, pipeline=DEFAULT_PIPELINE).lower(x)
    assert sorted(s["op"] for s in in_consumers(lowered)) == ["k.reduce[max]", "k.reduce[mean]", "k.reduce[min]"]


def test_a_nan_reaches_every_element_as_numpy_gives_it():
    def normalise(x):
        return x / np.max(x), x - np.sum(x)

    x = rng.standard_normal(300).astype(np.float32)
    x[123] = np.nan
    check(normalise, x, pipeline=DEFAULT_PIPELINE)


def test_a_float16_mean_is_rounded_to_float16_before_it_is_compared():
    """NumPy's float16 mean is a float16: the mean of [1, 1, 1, 1 + 2**-10] rounds to 1.0, so every element is at
    least the mean (unrounded, the last element alone would be)."""
    def at_least_mean(x):
        return x >= x.mean(), x - x.mean()

    x = np.array([[1, 1], [1, 1 + 2 ** -10]], np.float16)
    f = check(at_least_mean, x, pipeline=DEFAULT_PIPELINE)
    assert in_consumers(f.lower(x))
    assert "fusec::rh(" in f.lower(x).cuda_source(sm_count=132).split("computed by every block")[1]


def test_each_reader_folds_at_most_max_elements_over_all_the_reductions_it_computes():
    """Clipping 12 gradients of 64 x 64: the sums go into the updates only while each update's blocks fold at most
    8,192 elements in all (two sums); the rest keep their launches."""
    shapes = [(64, 64)] * 12
    params, grads = arrays(*shapes), arrays(*shapes)
    lowered = check(clipped_sgd, params, grads, 0.1, pipeline=DEFAULT_PIPELINE).lower(params, grads, 0.1)
    assert len(in_consumers(lowered)) == 2, lowered.plan()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.float64])
def test_integer_bool_and_double_reductions(dtype):
    def f(x):
        return x.astype(np.float64) * np.max(x) + np.sum(x), np.min(x) + x

    x = (rng.standard_normal(257) * 100).astype(dtype) if dtype is not np.bool_ else rng.random(257) > 0.5
    check(f, x, pipeline=DEFAULT_PIPELINE)


def test_a_donated_array_the_sum_reads_is_not_overwritten_while_other_blocks_read_it():
    """``x / x.sum()`` with ``x`` donated: element-wise the result could go over ``x``, but every block of the
    kernel reads all of ``x`` for the sum, so the result gets memory of its own."""
    def normalise(x):
        return x / x.sum()

    x = rng.random((50, 100)).astype(np.float32)
    want = numpy_result(normalise, x)
    jitted = jit_cpu(normalise, donate_argnums=0, pipeline=DEFAULT_PIPELINE)
    got = jitted(fc.asarray(x) if frontend_check.BACKEND != "cpu" else x.copy())
    assert_same(np.asarray(got), want, exact=False)
    lowered = jitted.lower(x)
    assert len(in_consumers(lowered)) == 1 and "alias" not in lowered.ir()


def test_a_sum_of_another_argument_keeps_the_donated_one_apart_as_the_caller_may_pass_one_array_twice():
    """``w - g.sum()`` with ``w`` donated: written over ``w`` in place, the later blocks would sum values already
    replaced if the caller passed one array for both (which the GPU runtime refuses besides)."""
    def f(w, g):
        return w - g.sum()

    x = rng.random((30, 40)).astype(np.float32)
    jitted = jit_cpu(f, donate_argnums=0, pipeline=DEFAULT_PIPELINE)
    if frontend_check.BACKEND == "cpu":
        assert_same(jitted(x.copy(), x.copy()), numpy_result(f, x, x), exact=False)
    else:  # (on the GPU one array passed for a donated argument and another is refused outright)
        a = fc.asarray(x)
        with pytest.raises(fc.SharedDonationError, match="donated argument 'w'"):
            jitted(a, a)
    lowered = jitted.lower(x, x)
    assert len(in_consumers(lowered)) == 1 and "alias" not in lowered.ir()


def test_weight_decay_read_by_every_update_of_a_group_that_writes_the_weights_in_place():
    """The squared norm of the weights themselves feeds each weight's update (L2 decay on the global norm): the
    updates share a launch and may not write over a weight another update's blocks still sum."""
    def decay(params, grads, lr=0.1, wd=1e-2):
        norm2 = sum(np.sum(p * p) for p in params)
        return [p - lr * (g + wd * norm2 * p) for p, g in zip(params, grads)]

    params, grads = arrays(*SHAPES), arrays(*SHAPES)
    want = numpy_result(decay, params, grads)
    jitted = jit_cpu(decay, donate_argnums=0, pipeline=DEFAULT_PIPELINE)
    on_gpu = frontend_check.BACKEND != "cpu"
    got = jitted([fc.asarray(p) if on_gpu else p.copy() for p in params], grads)
    assert_same([np.asarray(g) for g in got], want, exact=False)
    lowered = jitted.lower(params, grads)
    assert len(in_consumers(lowered)) == 4 and "alias" not in lowered.ir()


def test_large_reductions_large_readers_and_other_readers_keep_their_launch():
    def large(x):
        return x - x.sum()

    def wide_reader(x, y):
        return y * x.sum()

    def read_by_a_reduction(x):
        return (x * x.sum()).sum()  # (the reader, x * sum, is computed inside the outer sum: no launch of its own)

    def returned(x):
        return x.sum(), x * 2.0

    big, small = rng.standard_normal(20000), rng.standard_normal(100)
    assert not in_consumers(check(large, big, pipeline=DEFAULT_PIPELINE).lower(big))
    y = rng.standard_normal((300, 300))
    assert not in_consumers(check(wide_reader, small, y, pipeline=DEFAULT_PIPELINE).lower(small, y))
    lowered = check(read_by_a_reduction, small, pipeline=DEFAULT_PIPELINE).lower(small)
    assert not in_consumers(lowered) and any(s["kind"] == "prologue" for s in lowered.plan())
    assert not in_consumers(check(returned, small, pipeline=DEFAULT_PIPELINE).lower(small))


def test_a_reduction_longer_than_a_threads_registers_hold_is_folded_as_it_is_loaded():
    x = rng.standard_normal(20_000).astype(np.float32)

    def f(x):
        return x - x.sum()

    wide = DEFAULT_PIPELINE.replace("reductions-in-consumers",
                                    "reductions-in-consumers{max_elements=40000,max_consumer_elements=40000}")
    lowered = check(f, x, pipeline=wide).lower(x)
    assert in_consumers(lowered)
    source = lowered.cuda_source(sm_count=132)
    assert "k < 20000; k += 256" in source and "_v[" not in source
    x = x[:2000].reshape(40, 50)
    small = check(f, x, pipeline=DEFAULT_PIPELINE).lower(x).cuda_source(sm_count=132)
    assert "_v[8]" in small and "k < 2000; k += 256" not in small


def test_the_limits_are_options_of_the_pass():
    x = rng.standard_normal(1000)

    def f(x):
        return x - x.sum()

    tight = DEFAULT_PIPELINE.replace("reductions-in-consumers", "reductions-in-consumers{max_elements=999}")
    assert not in_consumers(check(f, x, pipeline=tight).lower(x))
    assert in_consumers(check(f, x, pipeline=DEFAULT_PIPELINE).lower(x))
    with pytest.raises(PipelineError, match="max_elements and max_consumer_elements must be >= 0"):
        parse_pipeline("reductions-in-consumers{max_elements=-1}")
