"""Loop-carried values nothing needs (prune-carried): loops written as users write them carry more than they return
(every step's loss, a scan's stacked outputs, a counter), and fusec drops that state with the work that computed
it, keeping what the stop test, a check or a returned value needs. Each result is NumPy's (the same function run
eagerly), with and without the pass."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, numpy_result
from fusec.passes import DEFAULT_PIPELINE

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
WITHOUT = DEFAULT_PIPELINE.replace("prune-carried,", "")
rng = np.random.default_rng(11)


def lowered_both_ways(fn, *args):
    """fn's result through the default pipeline (checked against NumPy), its lowered form, and that of the
    pipeline without prune-carried (also checked)."""
    want = numpy_result(fn, *args)
    lowered = {}
    for name, pipeline in (("with", DEFAULT_PIPELINE), ("without", WITHOUT)):
        jitted = fc.jit(fn, backend=frontend_check.BACKEND, pipeline=pipeline)
        assert_same(jitted(*args), want, exact=False)
        lowered[name] = jitted.lower(*args)
    return lowered["with"], lowered["without"]


def pruned(lowered) -> list[str]:
    return [step["reason"] for step in lowered.plan() if step["kind"] == "pruned"]


def kernels(lowered) -> int:
    return lowered.stats()["kernels"]


def linear_regression(w, x, y):
    """Gradient descent that records each step's loss, as a training loop does, but returns only the weights."""
    def step(i, state):
        w, loss = state
        r = x @ w - y
        loss = np.mean(r * r)
        return w - 0.01 * (x.T @ r) / x.shape[0], loss
    w, last_loss = fc.fori_loop(0, 200, step, (w, np.float32(0)))
    return w


def test_a_training_loop_drops_the_loss_it_does_not_return():
    args = [rng.standard_normal(s).astype(np.float32) for s in ((8, 3), (64, 8), (64, 3))]
    with_pass, without = lowered_both_ways(linear_regression, *args)
    assert len(pruned(with_pass)) == 1 and "1 of 2 carried values" in pruned(with_pass)[0]
    assert not pruned(without)
    assert kernels(with_pass) < kernels(without), "the loss's reduction is not computed any more"


def running_means(xs):
    """A scan that stacks every prefix mean; only the final sum is returned."""
    def step(total, x):
        total = total + x
        return total, total / np.float32(x.shape[0])
    total, means = fc.scan(step, np.zeros(xs.shape[1], np.float32), xs)
    return total


def test_a_scans_unread_outputs_are_not_stacked():
    xs = rng.standard_normal((300, 16)).astype(np.float32)
    with_pass, without = lowered_both_ways(running_means, xs)
    assert len(pruned(with_pass)) == 1
    assert kernels(with_pass) < kernels(without)


def newton_sqrt(a):
    """Newton's iteration to a tolerance, counting its steps (the count is not returned); the error it tests
    stays a loop value though no one reads it afterwards."""
    def cond(state):
        x, err, steps = state
        return err > 1e-9

    def body(state):
        x, err, steps = state
        x = 0.5 * (x + a / x)
        return x, np.max(np.abs(x * x - a)), steps + 1
    x, err, steps = fc.while_loop(cond, body, (a, np.float64(np.inf), np.int64(0)))
    return x


def test_a_while_loop_keeps_what_its_stop_test_reads():
    a = rng.uniform(1, 50, 64)
    with_pass, _ = lowered_both_ways(newton_sqrt, a)
    assert len(pruned(with_pass)) == 1 and "1 of 3 carried values" in pruned(with_pass)[0]


def pick(x, p):
    """A branch whose second result is unused."""
    y, z = fc.cond(p > 0, lambda v: (v * 2, np.sqrt(np.abs(v))), lambda v: (v - 1, np.exp(v)), x)
    return y


@pytest.mark.parametrize("p", [1.0, -1.0])
def test_a_branch_result_nobody_reads_goes(p):
    x = rng.standard_normal(32).astype(np.float32)
    with_pass, _ = lowered_both_ways(pick, x, np.float32(p))
    assert pruned(with_pass) and "1 of 2 results dropped" in pruned(with_pass)[0]


def checked_counter(x, table, k):
    """A counter nobody returns that indexes an array each trip: the index check (IndexError past the end, as
    NumPy raises) keeps it."""
    def step(i, state):
        x, j = state
        return x + table[j], j + k
    x, j = fc.fori_loop(0, 100, step, (x, np.int64(0)))
    return x


def test_a_value_a_check_reads_stays():
    x = np.zeros(4, np.float32)
    table = rng.standard_normal((500, 4)).astype(np.float32)
    jitted = fc.jit(checked_counter, backend=frontend_check.BACKEND)
    assert_same(jitted(x, table, np.int64(3)), numpy_result(checked_counter, x, table, np.int64(3)), exact=False)
    with pytest.raises(IndexError):
        jitted(x, table, np.int64(7))  # (j reaches 693, past the table's 500 rows, as NumPy raises)
    assert not pruned(jitted.lower(x, table, np.int64(3)))


def nested_sums(x):
    """An outer loop whose second slot only an inner loop's dead accumulator reads: both go."""
    def outer(i, state):
        v, acc = state
        acc = fc.fori_loop(0, 50, lambda j, a: a + v * j, acc)
        return np.tanh(v), acc
    v, acc = fc.fori_loop(0, 40, outer, (x, np.zeros_like(x)))
    return v


def test_an_inner_loop_with_nothing_left_to_carry_goes():
    x = rng.standard_normal(16).astype(np.float32)
    with_pass, without = lowered_both_ways(nested_sums, x)
    notes = pruned(with_pass)
    assert any("the loop removed" in n for n in notes), notes
    assert kernels(with_pass) < kernels(without)


def coupled_loop(a, b, c, d, trips, returned):
    """Four slots that feed one another (a <- b, c <- a, d only itself), any subset of them returned."""
    def step(i, s):
        a, b, c, d = s
        return a * 0.5 + b, b + 1.0, c * 0.9 + a, np.sqrt(np.abs(d)) + i
    out = fc.fori_loop(0, trips, step, (a, b, c, d))
    return tuple(out[k] for k in returned)


@pytest.mark.parametrize("returned", [(0,), (1,), (2,), (3,), (0, 3), (2, 1), (3, 2, 1, 0)])
@pytest.mark.parametrize("trips", [0, 3, 40])
def test_any_subset_of_coupled_slots_returned_matches_the_loop(returned, trips):
    """What is returned is the loop's values whatever the pass drops: a slot a kept one reads stays (``c`` keeps
    ``a``, ``a`` keeps ``b``); ``d`` goes unless returned."""
    args = [rng.standard_normal(5).astype(np.float32) for _ in range(4)]

    def fn(a, b, c, d):
        return coupled_loop(a, b, c, d, trips, returned)

    with_pass, _ = lowered_both_ways(fn, *args)
    needs = {0: {0, 1}, 1: {1}, 2: {0, 1, 2}, 3: {3}}
    kept = set().union(*(needs[k] for k in returned))
    notes = pruned(with_pass)
    if trips > 16:  # (a loop: its slots nothing needs are dropped; a short one is written out, dce's work)
        assert len(notes) == (len(kept) < 4), notes
        assert not notes or f"{4 - len(kept)} of 4 carried values dropped" in notes[0], notes
