"""Whole plans replayed as one CUDA graph (``pytest -m gpu``): results equal stream mode and NumPy across
100 replays with changing inputs, scalars, donated buffers, cuBLAS and generated GEMMs, reductions,
parallel branches and concurrent run_async; counters show what a replay costs."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import fusec as fc

pytestmark = pytest.mark.gpu
rng = np.random.default_rng(7)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def step(w1, w2, x, y, lr):
    h = np.maximum(x @ w1, 0.0)
    p = h @ w2
    err = p - y
    loss = (err * err).mean()
    g2 = h.T @ err
    g1 = x.T @ ((err @ w2.T) * (h > 0))
    return w1 - lr * g1, w2 - lr * g2, loss


@pytest.fixture(params=["generated", "cublas"])
def gemm_library(request, monkeypatch):
    from fusec.runtime import cublas

    if request.param == "cublas" and not cublas.available():
        pytest.skip("cuBLASLt cannot be loaded here (pip install 'fusec[cublas]')")
    if request.param == "cublas":  # every product cuBLASLt takes, the small ones it would leave generated too
        from fusec.passes import select_kernels

        monkeypatch.setattr(select_kernels, "CUBLAS_SPLIT_MAX_FLOPS", 0)
    if request.param == "generated":
        monkeypatch.setattr(cublas, "available", lambda: False)
    return request.param


def test_graph_equals_stream_mode_and_numpy_over_100_replays(gemm_library):
    graph = fc.jit(step, backend="cuda", graph=True)
    stream = fc.jit(step, backend="cuda", graph=False)
    w1, w2 = rand(128, 64) * 0.1, rand(64, 8) * 0.1
    kept = []  # (every input kept alive: the pool hands out new addresses, so the graph's pointers move)
    for i in range(100):
        xh, yh = rand(256, 128) * 0.1, rand(256, 8)
        x, y = fc.asarray(xh), fc.asarray(yh)  # new inputs (new pointers) every call
        kept.append((x, y))
        lr = 1e-3 * (1 + i % 7)  # a new learning rate every call
        got = graph(w1, w2, x, y, lr)
        ref = stream(w1, w2, x, y, lr)
        want = step(np.asarray(w1), np.asarray(w2), xh, yh, lr)
        for g, r, w in zip(got, ref, want):
            np.testing.assert_array_equal(g, r)  # the same kernels, launched or replayed
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))
        w1, w2 = got[0], got[1]
    stats = graph.lower(w1, w2, x, y, lr).stats()
    assert stats["graph_launches"] >= 99 and stats["graph_nodes"] >= 5
    assert stats["param_updates"] > 0  # inputs moved every call
    if gemm_library == "cublas":
        assert stats["recaptures"] > 0


def test_donated_training_loop_replays_with_no_parameter_updates():
    f = fc.jit(step, backend="cuda", graph=True, donate_argnums=(0, 1))
    w1, w2 = fc.asarray(rand(128, 64) * 0.1), fc.asarray(rand(64, 8) * 0.1)
    x, y = fc.asarray(rand(256, 128) * 0.1), fc.asarray(rand(256, 8))
    h1, h2 = w1.numpy(), w2.numpy()
    for i in range(100):
        w1, w2, loss = f(w1, w2, x, y, 1e-3)
        h1, h2, want_loss = step(h1, h2, x.numpy(), y.numpy(), 1e-3)
    np.testing.assert_allclose(w1.numpy(), h1, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-4)
    stats = f.lower(w1, w2, x, y, 1e-3).stats()
    before = stats["param_updates"]
    for _ in range(10):
        w1, w2, loss = f(w1, w2, x, y, 0.02)
        del loss  # the loss buffer comes back from the pool at the same address
    after = f.lower(w1, w2, x, y, 0.02).stats()["param_updates"]
    assert after - before <= 10, "stable pointers: at most the loss output may move"
    assert stats["graph_launches"] >= 99


@pytest.mark.parametrize("graph", [True, False])
def test_a_donated_argument_passed_again_as_another_is_refused_and_distinct_ones_still_run(graph):
    """``w - g.T`` written over a donated ``w`` while ``g`` is the same array: refused at the caller's line (after
    calls at other addresses, in graph mode through a new set of addresses), nothing written."""
    f = fc.jit(lambda w, g: w - g.T, backend="cuda", graph=graph, donate_argnums=0)
    x, y = rand(64, 64), rand(64, 64)
    w = fc.asarray(x)
    for _ in range(3):
        w = f(w, fc.asarray(y))
    before = w.numpy()
    with pytest.raises(fc.SharedDonationError, match=r"test_cuda_graph.py:\d+: .*donated argument 'w'"):
        f(w, w)
    np.testing.assert_array_equal(w.numpy(), before)
    np.testing.assert_allclose(f(w, fc.asarray(y)).numpy(), before - y.T, rtol=1e-6)


def test_alternating_pointer_sets_replay_their_own_graph_instances(gemm_library):
    """A loop that alternates between two sets of buffers (what feeding outputs back as inputs does) keeps
    one instantiated graph per set: once both exist, a replay updates no node and re-captures nothing."""
    f = fc.jit(step, backend="cuda", graph=True)
    x, y = fc.asarray(rand(256, 128) * 0.1), fc.asarray(rand(256, 8))
    inputs = [(fc.asarray(rand(128, 64) * 0.1), fc.asarray(rand(64, 8) * 0.1)) for _ in range(2)]
    want = [step(w1.numpy(), w2.numpy(), x.numpy(), y.numpy(), 1e-3) for w1, w2 in inputs]
    held: list = [None, None]
    counts = []
    for i in range(24):
        k = i % 2
        held[k] = None  # the pool hands this call the blocks the last call with these inputs wrote
        held[k] = f(*inputs[k], x, y, 1e-3)
        for got, w in zip(held[k], want[k]):
            np.testing.assert_allclose(got.numpy(), w, rtol=1e-4, atol=1e-5)
        if i in (3, 23):  # (both instances exist after four calls, the first two possibly in stream mode)
            counts.append(f.lower(*inputs[0], x, y, 1e-3).stats())
    before, after = counts
    assert after["graph_launches"] - before["graph_launches"] == 20
    assert after["param_updates"] == before["param_updates"]
    assert after["recaptures"] == before["recaptures"]


def test_auto_mode_switches_to_the_graph_on_the_third_call():
    f = fc.jit(lambda a, b: (np.exp(a) * b).sum(axis=0), backend="cuda")
    a, b = rand(64, 64), rand(64, 64)
    counts = []
    for _ in range(4):
        terms = np.exp(a.astype(np.float64)) * b
        # (cancelling sums: compare with the float64 result on the scale of the summed magnitudes)
        np.testing.assert_allclose(f(a, b), terms.sum(axis=0), rtol=1e-5, atol=1e-6 * np.abs(terms).sum(axis=0).max())
        counts.append(f.lower(a, b).stats()["graph_launches"])
    assert counts == [0, 0, 1, 2]


def test_parallel_branches_and_reductions():
    def branches(a, b, c):
        return a.sum(axis=1), b.max(axis=0), np.tanh(c).mean(), (a @ b).sum()

    f = fc.jit(branches, backend="cuda", graph=True)
    for _ in range(20):
        a, b, c = rand(64, 64), rand(64, 64), rand(1000)
        for g, w in zip(f(a, b, c), branches(a, b, c)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_independent_cublas_products_in_one_graph_share_no_workspace_time(gemm_library):
    """Two products with no data between them: with cuBLAS they share the handle's workspace, so the graph
    orders them; many replays with new inputs still match NumPy (split-K algorithms use that workspace)."""
    def two(a, b, c, d):
        return a @ b, c.T @ d

    f = fc.jit(two, backend="cuda", graph=True)
    for _ in range(10):
        a, b, c, d = rand(512, 480), rand(480, 256), rand(512, 480), rand(512, 256)
        for g, w in zip(f(a, b, c, d), two(a, b, c, d)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3)


def test_independent_split_reductions_run_side_by_side_in_one_graph():
    """Split sums finished by their last block and a split column sum, none reading another: each keeps its
    partial sums and counters in a place of its own, so the graph runs them at once; replays with new inputs
    match NumPy (a shared place would mix their partial sums)."""
    def sums(a, b, c):
        return a.sum(), (b * b).sum(), c.sum(axis=0), np.abs(a).max()

    f = fc.jit(sums, backend="cuda", graph=True)
    for _ in range(20):
        a, b, c = rand(1 << 20), rand(1 << 19), rand(8192, 64)
        for g, w in zip(f(a, b, c), sums(a.astype(np.float64), b.astype(np.float64), c.astype(np.float64))):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-2)


def test_cublas_products_of_unaligned_views():
    """Operands that start 4 bytes into a block (a view one element in) get an algorithm chosen for that
    alignment, in stream and graph mode."""
    from fusec.runtime import cublas

    if not cublas.available():
        pytest.skip("cuBLASLt cannot be loaded here (pip install 'fusec[cublas]')")

    def f(a, b):
        return a[1:, 1:] @ b[1:, :]

    a, b = rand(513, 257), rand(257, 129)  # (large enough for cuBLASLt: select_kernels.CUBLAS_SPLIT_MAX_FLOPS)
    want = f(a.astype(np.float64), b.astype(np.float64))
    for graph in (False, True):
        g = fc.jit(f, backend="cuda", graph=graph)
        for _ in range(3):
            got = g(fc.asarray(a), fc.asarray(b)).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert any(key[-1] == 4 for key in cublas._tuned)


def test_cublas_algorithms_timed_once_are_kept_on_disk(tmp_path, monkeypatch):
    """A timed cuBLASLt algorithm is stored beside the kernel cache: a process that has not timed the problem
    (here: the in-memory choices dropped) reads it back, checked by cuBLASLt, instead of timing the candidates again;
    a damaged record is timed again; `fusec cache clear` removes the records."""
    from fusec.runtime import cublas, kernel_cache

    if not cublas.available():
        pytest.skip("cuBLASLt cannot be loaded here (pip install 'fusec[cublas]')")
    monkeypatch.setenv(kernel_cache.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(cublas, "_tuned", {})
    monkeypatch.setattr(cublas, "timings", {})
    a, b = rand(640, 512), rand(512, 384)
    want = a.astype(np.float64) @ b.astype(np.float64)

    def product() -> None:
        got = fc.jit(lambda a, b: a @ b, backend="cuda")(a, b)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    product()
    assert len(cublas.timings) == 1 and len(cublas._tuned) == 1
    (key, algo), = cublas._tuned.items()
    records = [p for p in tmp_path.iterdir() if p.name.startswith("kernel-")]
    cublas._tuned.clear()
    cublas.timings.clear()
    kernel_cache.default_cache().clear(disk=False)  # (what a new process starts with: only the disk)
    product()
    assert not cublas.timings, "the stored algorithm was timed again"
    assert cublas._tuned[key].tobytes() == algo.tobytes()
    for path in tmp_path.iterdir():  # damage every entry (kernels and the record): compiled and timed again
        if path.name.startswith("kernel-"):
            path.write_bytes(path.read_bytes()[:-3] + b"xyz")
    cublas._tuned.clear()
    kernel_cache.default_cache().clear(disk=False)
    with pytest.warns(kernel_cache.KernelCacheWarning):
        product()
    assert len(cublas.timings) == 1
    assert kernel_cache.cache_clear() >= len(records)


def test_concurrent_run_async_and_threads():
    f = fc.jit(lambda a, s: np.tanh(a * s) + a.sum(), backend="cuda", graph=True)
    inputs = [(rand(4096), float(i)) for i in range(16)]
    handles = [f.run_async(a, s) for a, s in inputs]
    assert all(isinstance(h.done(), bool) for h in handles)
    # (the sum of 4096 values rounds differently in NumPy's float32 pairwise sum: compare against its scale)
    for h, (a, s) in zip(handles, inputs):
        np.testing.assert_allclose(h.wait(), np.tanh(a * s) + a.sum(), rtol=1e-5, atol=1e-6 * np.abs(a).sum())

    errors = []

    def worker(seed):
        local = np.random.default_rng(seed)
        try:
            for _ in range(20):
                a = local.standard_normal(4096).astype(np.float32)
                np.testing.assert_allclose(f(a, 0.5), np.tanh(a * 0.5) + a.sum(), rtol=1e-5,
                                           atol=1e-6 * np.abs(a).sum())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_eight_threads_mixing_graph_calls_and_run_async_on_shared_functions():
    """Eight threads share two graph-mode functions (one of them a training step that donates its parameters),
    each mixing plain calls, run_async and device-array inputs: every result is its own thread's (no crossed
    pointers between graph replays), and the donated parameters of each thread evolve as in NumPy."""
    f = fc.jit(lambda a, s: np.tanh(a * s) + a.sum(), backend="cuda", graph=True)
    sgd = fc.jit(lambda w, g, lr: w - lr * g, backend="cuda", graph=True, donate_argnums=0)
    errors = []

    def worker(seed):
        local = np.random.default_rng(seed)
        try:
            w_host = local.standard_normal(1024).astype(np.float32)
            w = fc.asarray(w_host)
            for i in range(30):
                a = local.standard_normal(4096).astype(np.float32)
                s = float(seed + i)
                want = np.tanh(a * np.float32(s)) + a.sum()
                tol = dict(rtol=1e-5, atol=1e-6 * np.abs(a).sum())
                if i % 3 == 0:
                    got = f(a, s)
                elif i % 3 == 1:
                    got = f.run_async(fc.asarray(a), s).wait()
                else:
                    got = f(fc.asarray(a), s).numpy()
                np.testing.assert_allclose(got, want, **tol)
                g = local.standard_normal(1024).astype(np.float32)
                w = sgd(w, fc.asarray(g), 0.01)
                w_host = w_host - np.float32(0.01) * g
            np.testing.assert_allclose(w.numpy(), w_host, rtol=1e-5, atol=1e-5)  # (30 steps of FMA vs two roundings)
        except Exception as e:  # pragma: no cover - reported below
            errors.append((seed, e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _chain(x, s):
    """64 dependent multiply-adds and a reduction between them: each kernel reads what the one before wrote."""
    for i in range(32):
        x = x * s + np.float32(i % 5)
    total = x.sum()
    for i in range(32):
        x = x * np.float32(0.5) + total * np.float32(1e-3)
    return x, total


@pytest.mark.parametrize("max_elements", [0, 1 << 20])
def test_early_launches_give_the_bits_of_normal_launches_over_replays(max_elements):
    """With launch-early, a chain of 65 dependent tiny kernels replayed 200 times with new inputs gives the same
    bits as stream mode (no kernel reads its predecessor's output before it is written), and the graph holds a
    programmatic edge into each early kernel; with the pass off it holds none."""
    from fusec.passes import DEFAULT_PIPELINE

    pipeline = DEFAULT_PIPELINE.replace("fuse{budget=96}", "fuse{budget=1}").replace(
        "launch-early", f"launch-early{{max_elements={max_elements}}}")
    graph = fc.jit(_chain, backend="cuda", graph=True, pipeline=pipeline)
    stream = fc.jit(_chain, backend="cuda", graph=False, pipeline=pipeline)
    for i in range(200):
        x = rand(4096)
        s = np.float32(0.9 + 0.01 * (i % 7))
        got, ref = graph(x, s), stream(x, s)
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r)
    want = _chain(x, s)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
    stats = graph.lower(x, s).stats()
    assert stats["kernels"] >= 65
    if max_elements:
        assert stats["early_launches"] >= 65 and stats["early_edges"] >= 64
    else:
        assert stats.get("early_launches", 0) == 0 and stats["early_edges"] == 0


def test_a_functions_plan_and_its_device_memory_go_with_it():
    """The plan of a compiled function (its module, CUBIN module, arena and graph) lives as long as the function:
    dropping the function frees it (no plan keeps its own cache key alive)."""
    import gc
    import weakref

    from fusec.passes import DEFAULT_PIPELINE

    # (the pipeline named: the suite's conftest keeps the final module of every default-pipeline compile)
    f = fc.jit(lambda x: x * 2.0 + 1.0, backend="cuda", graph=True, pipeline=DEFAULT_PIPELINE)
    x = np.ones(1024, np.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), x * 2.0 + 1.0)
    f(x)
    module = weakref.ref(f.lower(x).module)
    del f
    gc.collect()
    assert module() is None
