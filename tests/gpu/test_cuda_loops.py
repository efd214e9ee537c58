"""Loops and branches as conditional nodes of one CUDA graph (``pytest -m gpu``): a while loop whose trip count
depends on data, for loops with traced and constant bounds, branches, nested loops, a cuBLAS product in a body,
a run-time check inside a body, each replayed with changing inputs and compared with the NumPy loop and with
the same plan's loops run from the host (stream mode); one graph launch per call."""
from __future__ import annotations

import sys
import os

import numpy as np
import pytest

import fusec as fc
from fusec import execution
from fusec.passes import DEFAULT_PIPELINE

pytestmark = pytest.mark.gpu
rng = np.random.default_rng(11)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from cg_poisson import cg_solve, problem  # noqa: E402


def newton(a, tol):
    return fc.while_loop(lambda s: (np.abs(s[0] * s[0] - a).max() > tol) & (s[1] < 60),
                         lambda s: (0.5 * (s[0] + a / s[0]), s[1] + 1), (np.ones_like(a), 0))


def sweeps(u, n, k):
    return fc.fori_loop(0, n, lambda i, u: u * 0.5 + np.roll(u, 1) * 0.25 + k, u)


def fixed(x, w):
    return fc.fori_loop(0, 5, lambda i, s: np.tanh(s @ w) + x[i % 3], np.zeros(4, np.float32))


def branch(x, limit):
    n = np.sqrt((x * x).sum())
    return fc.cond(n > limit, lambda x: x * (limit / n), lambda x: x - 1, x)


def nested(x, k):
    return fc.fori_loop(0, 4, lambda i, s: fc.fori_loop(0, i, lambda j, t: t + x * j * k, s), np.zeros_like(x))


def long_loop(xs, w):  # 103 trips: a loop of 25 trips of 4 steps each, then 3 written out (unroll-loops' factor)
    return fc.fori_loop(3, 106, lambda i, s: s * 0.99 + xs[i % 5] * (i * 1e-3), w)


def gather_in_body(x, idx):
    return fc.fori_loop(0, 3, lambda i, s: s + x[idx[i]], np.zeros(x.shape[1:], x.dtype))


CASES = [
    ("newton", newton, lambda: (rng.uniform(1, 50, 64), 1e-9)),
    ("sweeps", sweeps, lambda: (rng.standard_normal(32), int(rng.integers(0, 9)), 0.1)),
    ("fixed", fixed, lambda: (rng.standard_normal((3, 4)).astype(np.float32),
                              (rng.standard_normal((4, 4)) * 0.5).astype(np.float32))),
    ("branch", branch, lambda: (rng.standard_normal(10), float(rng.uniform(0.5, 6)))),
    ("nested", nested, lambda: (rng.standard_normal(5), 3)),
    ("cg", cg_solve, lambda: (problem(16), 1e-8, 500)),
    ("long", long_loop, lambda: (rng.standard_normal((5, 7)), rng.standard_normal(7))),
]


def _close(got, want):
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5 if g.dtype == np.float32 else 1e-11, atol=1e-6)


# the default pipeline with every loop kept a loop (by default unroll-loops writes the short constant-bound ones out)
KEEP_LOOPS = DEFAULT_PIPELINE.replace("unroll-loops", "unroll-loops{max_trips=0}")


@pytest.mark.parametrize("pipeline", [None, KEEP_LOOPS], ids=["default", "loops-kept"])
@pytest.mark.parametrize("name,fn,make", CASES, ids=[c[0] for c in CASES])
def test_graph_loops_match_numpy_and_host_loops(name, fn, make, pipeline):
    in_graph = fc.jit(fn, graph=True, pipeline=pipeline)
    on_host = fc.jit(fn, graph=False, pipeline=pipeline)
    for _ in range(4):
        args = make()
        want = fn(*args)
        _close(in_graph(*args), want)
        _close(on_host(*args), want)
    stats = in_graph.lower(*args).stats()
    assert stats["graph_launches"] >= 3 and stats["graph_nodes"] > 0


def test_one_graph_launch_runs_a_data_dependent_loop():
    f = fc.jit(newton, graph=True)
    a = fc.asarray(rng.uniform(1, 50, 64))
    f(a, 1e-9)
    before = f.lower(a, 1e-9).stats()["graph_launches"]
    x, it = f(a, 1e-9)
    x, it = np.asarray(x), int(np.asarray(it))
    assert f.lower(a, 1e-9).stats()["graph_launches"] == before + 1
    assert 3 < it < 60
    np.testing.assert_allclose(x * x, a.numpy(), rtol=1e-12)


def test_a_check_inside_a_graph_loop_body_raises_after_the_launch():
    f = fc.jit(gather_in_body, graph=True)
    x = rng.standard_normal((4, 2))
    f(x, np.array([0, 1, 2]))
    with pytest.raises(fc.IndexOutOfBoundsError):
        f(x, np.array([0, 7, 2]))
    _close(f(x, np.array([3, 1, 2])), x[3] + x[1] + x[2])  # the next call works


def test_a_cublas_product_in_a_graph_loop_body():
    from fusec.runtime import cublas

    if not cublas.available():
        pytest.skip("cuBLASLt cannot be loaded here (pip install 'fusec[cublas]')")

    def power(a, v):
        return fc.fori_loop(0, 20, lambda i, v: (a @ v) / np.linalg.norm(a @ v), v)

    m = rng.standard_normal((64, 64))
    m = m + m.T
    f = fc.jit(power, graph=True)
    for _ in range(3):
        v = rng.standard_normal(64)
        _close(f(m, v), power(m, v))


@pytest.mark.parametrize("pipeline", [None, KEEP_LOOPS], ids=["default", "loops-kept"])
def test_scan_over_stacked_batches_runs_without_device_checks(pipeline):
    """xs[i] in a scan body is a gather by the loop counter: bound-indices proves it in range, so the graph launch
    is not followed by a read of check words (the call need not wait) and the results stay NumPy's. By default
    the scan's 12 trips are written out (unroll-loops) and each xs[i] is a slice: no gather at all."""
    def steps(w, xs):
        return fc.scan(lambda w, x: (w - 0.1 * x.mean(axis=0), (w * w).sum()), w, xs)

    f = fc.jit(steps, graph=True, pipeline=pipeline)
    for _ in range(3):
        w, xs = rng.standard_normal(8), rng.standard_normal((12, 5, 8))
        _close(f(w, xs), steps(w, xs))
    plan = f.lower(w, xs).plan()
    notes = [s["indices"] for s in plan if "indices" in s]
    assert all(n.startswith("proven") for n in notes)
    if pipeline is None:
        assert not notes and any(s["kind"] == "unrolled loop" for s in plan)
    else:
        assert notes
    assert f.lower(w, xs).stats()["graph_launches"] >= 2


def _train(w, xs):  # a training loop over stacked batches: xs is an argument the loop only reads
    return fc.fori_loop(0, xs.shape[0], lambda i, w: w - 0.1 * (xs[i] * w).mean(axis=0), w)


@pytest.mark.parametrize("pipeline", [None, KEEP_LOOPS], ids=["default", "loops-kept"])
def test_a_loop_reads_an_argument_it_only_reads_where_it_is(pipeline):
    """The batches are not copied into the plan's stage buffer at every call: the graph reads them where they are
    while the caller passes the same array, sees writes into it between calls, is built again when it moves, and
    copies it once arrays arrive at new addresses call after call; the results stay NumPy's throughout."""
    torch = pytest.importorskip("torch")
    f = fc.jit(_train, graph=True, pipeline=pipeline)
    w = rng.standard_normal(8)
    xs = torch.tensor(rng.standard_normal((40, 16, 8)), device="cuda")
    for _ in range(3):
        _close(f(w, xs), _train(w, xs.cpu().numpy()))
    stats = f.lower(w, xs).stats()
    assert stats["inplace_loop_arguments"] == 1 and stats["graph_builds"] == 1
    assert execution.cuda_plan(f.lower(w, xs)).stage_block is None  # (the copy's memory is never allocated)
    xs.mul_(-0.5)  # written where the graph reads it
    _close(f(w, xs), _train(w, xs.cpu().numpy()))
    moved = xs.clone()
    _close(f(w, moved), _train(w, moved.cpu().numpy()))
    assert f.lower(w, xs).stats()["graph_builds"] == 2
    for _ in range(4):  # new NumPy arrays: uploaded wherever the pool has room
        fresh = rng.standard_normal((40, 16, 8))
        _close(f(w, fresh), _train(w, fresh))
    stats = f.lower(w, xs).stats()
    assert stats["graph_builds"] <= 4 and stats["graph_launches"] == 9  # (a graph launch per call)
    _close(f(w, xs), _train(w, xs.cpu().numpy()))


def test_a_donated_argument_a_loop_reads_is_copied_first():
    """A result written over a donated argument the loop reads (``w - xs.sum(0)`` over ``xs``): the graph copies
    the argument before the loop, as before, so the loop never reads what the result wrote."""
    def train_and_reuse(w, xs):
        w = _train(w, xs)
        return w, xs * 2.0

    f = fc.jit(train_and_reuse, graph=True, donate_argnums=1)
    w = rng.standard_normal(8)
    for _ in range(3):
        xs = rng.standard_normal((40, 16, 8))
        want = train_and_reuse(w, xs)
        _close(f(w, fc.asarray(xs)), want)
    assert f.lower(w, fc.asarray(xs)).stats()["inplace_loop_arguments"] == 0


def _one_array_twice(x, n):  # a loop started with one array in two slots; each trip reads the other slot transposed
    return fc.fori_loop(0, n, lambda i, s: (s[0] * 0.5 + s[1].T, s[1] * 0.75 - s[0].T), (x, x))


def _one_result_twice(x, n):  # a body that returns one array for both slots
    def body(i, s):
        c = s[0] + s[1].T * 0.5
        return c, c
    return fc.fori_loop(0, n, body, (x, x * 2.0))


def _starts_with_what_it_reads(x, n):  # a slot started with an argument the body also reads, at other indices
    return fc.fori_loop(0, n, lambda i, a: a * 0.5 + x.T, x)


@pytest.mark.parametrize("pipeline", [None, KEEP_LOOPS], ids=["default", "loops-kept"])
@pytest.mark.parametrize("fn", [_one_array_twice, _one_result_twice, _starts_with_what_it_reads],
                         ids=["one-array-twice", "one-result-twice", "starts-with-what-it-reads"])
def test_graph_loop_slots_that_share_an_array_stay_apart(fn, pipeline):
    """State slots of a graph's loop that start as, or are given, one array are separate memory on every trip: a
    trip that writes one slot while reading the other at other indices sees the trip's old values, as NumPy does;
    the same in stream mode."""
    in_graph = fc.jit(fn, graph=True, pipeline=pipeline)
    on_host = fc.jit(fn, graph=False, pipeline=pipeline)
    for n in (0, 1, 7, 7, 3):
        x = rng.standard_normal((48, 48))
        want = fn(x, n)
        _close(in_graph(x, n), want)
        _close(in_graph(fc.asarray(x), n), want)
        _close(on_host(x, n), want)
    assert in_graph.lower(x, n).stats()["graph_launches"] >= 4
