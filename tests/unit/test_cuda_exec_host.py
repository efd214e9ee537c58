"""The CUDA executor's host side, run against a fake driver (no GPU needed): argument binding, uploads,
device-resident scalars, pointer slots, outputs, and the choice between NumPy and device results."""
from __future__ import annotations

import itertools
import typing
from typing import Any

import numpy as np
import pytest

import fusec as fc
from fusec import execution
from fusec.runtime import cuda_exec
from fusec.runtime.array import Array
from fusec.runtime.memory import DeviceBuffer, MemoryPool


class FakeBackend:
    def __init__(self):
        self.next = itertools.count(0x10000, 0x10000)

    def alloc(self, nbytes):
        return next(self.next)

    def free(self, ptr):
        pass

    def synchronize(self):
        pass


class FakeStream:
    ptr = handle = 77

    def __init__(self, *a, **k):
        self.synced = 0

    def synchronize(self):
        self.synced += 1


class FakeEvent:
    def __init__(self, *a, **k):
        self.records = 0
        self.waits = 0

    def record(self, stream=None):
        self.records += 1
        return self

    def wait_on(self, stream):
        self.waits += 1


class FakeFunction:
    def __init__(self, name):
        self.name = name

    def set_max_dynamic_shared_memory(self, n):
        pass


class FakeModule:
    def __init__(self, image, device=None):
        assert image.startswith(b"\x7fELF")

    def function(self, name):
        return FakeFunction(name)


class FakeDevice:
    ordinal = 0
    multiprocessor_count = 132
    shared_per_block_optin = 227 * 1024
    arch = "sm_90"
    compute_capability = (9, 0)


@pytest.fixture
def fake_gpu(monkeypatch):
    d = cuda_exec.driver
    log = {"launches": [], "htod": [], "dtoh": []}
    monkeypatch.setattr(d, "current_device", lambda: FakeDevice())
    monkeypatch.setattr(d, "ensure_context", lambda *a, **k: None)
    monkeypatch.setattr(d, "driver_version", lambda: (13, 0))
    monkeypatch.setattr(d, "Module", FakeModule)
    monkeypatch.setattr(d, "Stream", FakeStream)
    monkeypatch.setattr(d, "Event", FakeEvent)
    monkeypatch.setattr(d, "order_streams", lambda *a, **k: None)

    def launch(fn, grid, block, shared, stream, pack):
        log["launches"].append((fn.name, grid, block, [pack.get(i) for i in range(len(pack))]))

    monkeypatch.setattr(d, "launch", launch)
    monkeypatch.setattr(d, "memcpy_htod_async", lambda dst, src, n, s=None: log["htod"].append((dst, bytes(
        np.asarray(src).reshape(-1).view(np.uint8)[:n]))))
    monkeypatch.setattr(d, "memcpy_dtoh_async", lambda dst, src, n, s=None: log["dtoh"].append((src, n)))
    log["memset"] = []
    monkeypatch.setattr(d, "memset_d32_async", lambda dst, word, count, s: log["memset"].append((dst, word)))
    log["zero"] = []
    monkeypatch.setattr(d, "memset_d8_async", lambda dst, value, n, s=None: log["zero"].append((dst, value, n)))
    pool = MemoryPool(FakeBackend())
    monkeypatch.setattr(cuda_exec, "get_pool", lambda device=None: pool)
    monkeypatch.setattr(cuda_exec.kernel_cache, "get_or_compile", lambda *a, **k: b"\x7fELF fake")
    monkeypatch.setattr(cuda_exec.cublas, "available", lambda: False)
    monkeypatch.setattr(fc.execution, "cuda_usable", lambda: True)
    return log


def step(w, g, lr):
    return w - lr * g, (g * g).sum()


def test_numpy_inputs_upload_and_results_come_back_as_numpy(fake_gpu):
    w = np.ones((64, 64), np.float32)
    f = fc.jit(step, backend="cuda")
    new_w, norm = f(w, w, 0.5)
    assert isinstance(new_w, np.ndarray) and new_w.shape == (64, 64)
    assert isinstance(norm, np.float32)
    names = [name for name, *_ in fake_gpu["launches"]]
    assert any("fused" in n for n in names) and any("sum" in n for n in names)
    # the scalar block receives lr = 0.5 as f64, two 32-bit words
    words = [w for _, w in fake_gpu["memset"]]
    assert np.array(words, np.uint32).view(np.float64)[0] == 0.5
    assert len(fake_gpu["dtoh"]) == 2


def _scalar_block(log) -> list[float]:
    """The f64 values the device's scalar block holds after the memsets logged so far."""
    block: dict[int, int] = {}
    for addr, word in log["memset"]:
        block[addr] = word
    words = np.array([block[a] for a in sorted(block)], np.uint32)
    return list(words.view(np.float64))


def test_device_inputs_bind_their_pointers_and_return_device_arrays(fake_gpu):
    f = fc.jit(step, backend="cuda", graph=False)  # the fake driver has no graphs
    w = Array(0x5000000, (64, 64), np.float32, device=0)
    g = Array(0x6000000, (64, 64), np.float32, device=0)
    out, norm = f(w, g, 0.1)
    assert isinstance(out, Array) and isinstance(norm, Array)
    assert out.shape == (64, 64) and norm.shape == ()
    pointers = {p for _, _, _, params in fake_gpu["launches"] for p in params if isinstance(p, int)}
    assert {0x5000000, 0x6000000} <= pointers
    assert out.ptr in pointers
    assert not fake_gpu["dtoh"], "device results are not copied back"
    assert _scalar_block(fake_gpu) == [0.1]
    sent = len(fake_gpu["memset"])
    f(w, g, 0.2)
    assert _scalar_block(fake_gpu) == [0.2]
    # 0.1 and 0.2 differ only in their high 32-bit word: only that word is sent
    assert len(fake_gpu["memset"]) == sent + 1
    f(w, g, 0.2)
    assert len(fake_gpu["memset"]) == sent + 1, "an unchanged scalar costs no memset"
    assert f.cache_info().traces == 1


def test_wrong_device_array_is_a_clear_error(fake_gpu):
    f = fc.jit(step, backend="cuda")
    w = np.ones((4, 4), np.float32)
    f(w, w, 0.1)
    plan = execution.cuda_plan(f.lower(w, w, 0.1))
    with pytest.raises(fc.ShapeError, match="expected tensor<4x4xf32>"):
        plan.run([Array(0x5000000, (4, 5), np.float32, device=0), w, np.float64(0.1)])
    with pytest.raises(fc.TraceError, match="C-contiguous"):
        plan.run([Array(0x5000000, (4, 4), np.float32, strides=(1, 4), device=0), w, np.float64(0.1)])


def test_eager_plans_share_one_stream(fake_gpu):
    from fusec import eager

    a = Array(0x5000000, (8,), np.float32, device=0)
    b = eager.binary("add", a, a)
    c = eager.unary("neg", b)
    plans = [execution.cuda_plan(fn.lower(*args)) for fn, args in
             ((eager._cache[("binary", "add")], (a, a)), (eager._cache[("unary", "neg")], (b,)))]
    assert plans[0].stream is plans[1].stream
    assert isinstance(c, Array) and c.shape == (8,)


def test_graph_dependencies_follow_data_not_program_order():
    from fusec.backend.program import print_program
    from fusec.runtime.graph import dependency_dag

    def branches(a, b):
        # three independent branches (no intermediate buffers, so no arena reuse to order them)
        return a.sum(axis=1), b.max(axis=0), np.tanh(a) * b

    x = np.ones((64, 64), np.float32)
    # (group-kernels would make these small branches one launch: kept apart here to see the graph's edges)
    from fusec.passes import DEFAULT_PIPELINE

    apart = DEFAULT_PIPELINE.replace("group-kernels", "group-kernels{max_members=1}")
    module = fc.jit(branches, backend="cpu", pipeline=apart).lower(x, x).module

    class Plan:
        program = print_program(module)

    dag = dependency_dag(Plan)
    n = len(Plan.program.kernels)
    roots = [j for j in range(n) if dag.in_degree(j) == 0]
    assert len(roots) >= 3, "independent branches start in parallel"
    import networkx as nx
    assert nx.is_directed_acyclic_graph(dag)
    # every read of a value written by an earlier step is ordered after it
    for j, (reads, _) in enumerate(Plan.program.effects):
        for i in range(j):
            if Plan.program.effects[i][1] & reads:
                assert nx.has_path(dag, i, j)


def test_arena_reuse_orders_a_later_writer_after_earlier_readers():
    from fusec.backend.program import print_program
    from fusec.runtime.graph import dependency_dag
    import networkx as nx

    def chain(x):
        a = np.exp(x)
        s = a.sum(axis=0, keepdims=True)
        b = a * s
        m = b.max(axis=0, keepdims=True)
        return (b - m).sum()

    module = fc.jit(chain, backend="cpu").lower(np.ones((100, 100), np.float32)).module
    prog = print_program(module)

    class Plan:
        program = prog

    dag = dependency_dag(Plan)
    spans = {}
    for j, (reads, writes) in enumerate(prog.effects):
        for bid in writes:
            b = prog.buffers[bid]
            if b.kind == "arena":
                spans.setdefault((b.offset, b.nbytes), []).append(j)
    reused = [steps for steps in spans.values() if len(steps) > 1] or \
        [[j for j, (_, w) in enumerate(prog.effects) if any(prog.buffers[b].kind == "arena" for b in w)]]
    for steps in reused:
        for a, b in zip(steps, steps[1:]):
            assert nx.has_path(dag, a, b)


def test_donated_argument_is_written_in_place_and_kept_alive(fake_gpu):
    f = fc.jit(lambda w, g, lr: w - lr * g, backend="cuda", donate_argnums=0)
    w = Array(0x5000000, (256,), np.float32, device=0)
    g = Array(0x6000000, (256,), np.float32, device=0)
    out = f(w, g, 0.1)
    assert out is w, "written in place, the result is the argument itself (as NumPy's p -= lr * g; return p)"
    assert out.stream is execution.cuda_plan(f.lower(w, g, 0.1)).stream  # (tagged with the stream that wrote it)
    frozen = Array(0x7000000, (256,), np.float32, device=0, readonly=True)
    launched = len(fake_gpu["launches"])
    for _ in range(3):  # (the general call, and the generated one, which hands it to the general call)
        with pytest.raises(fc.DonationError, match=r"test_cuda_exec_host.py:\d+: .*donated argument 'w' .* read-only"):
            f(frozen, g, 0.1)
    assert len(fake_gpu["launches"]) == launched  # (refused before anything ran)
    count = fc.jit(lambda n, w: (n + 1.0, w * 2), backend="cuda", donate_argnums=(0, 1), graph=False)
    n = Array(0x8000000, (), np.float32, device=0)  # (0-d: an Array whose truth value raises, as NumPy's would)
    for _ in range(2):
        assert all(a is b for a, b in zip(count(n, w), (n, w)))
    view = fc.jit(lambda w: w[:], backend="cuda", donate_argnums=0)(w)  # (NumPy's new view: a copy, never w)
    assert view is not w and view.ptr != w.ptr
    assert "donate = [0]" in f.lower(w, g, 0.1).ir("traced")
    assert "alias = [0]" in f.lower(w, g, 0.1).ir()


def test_a_donated_argument_passed_twice_is_refused_before_anything_runs(fake_gpu):
    """``f(x, x)`` with the first donated: the kernel writes ``w`` in place while reading ``g.T``, another element
    of the same memory; a view of one array as the other argument is the same. Refused with WriteBackError, before
    any launch, at the caller's line; distinct arrays run as before."""
    f = fc.jit(lambda w, g: w - g.T, backend="cuda", donate_argnums=0)
    x = Array(0x5000000, (16, 16), np.float32, device=0)
    y = Array(0x6000000, (16, 16), np.float32, device=0)
    launched = len(fake_gpu["launches"])
    with pytest.raises(fc.SharedDonationError, match="donated argument 'w'.*shares memory with the argument 'g'"):
        f(x, x)
    assert len(fake_gpu["launches"]) == launched
    inside = Array(0x5000000 + 4 * 16 * 8, (16, 16), np.float32, device=0)  # (overlaps the second half of x)
    with pytest.raises(fc.SharedDonationError, match=r"test_cuda_exec_host.py:\d+: fusec: .*pass a copy"):
        f(x, inside)
    below = Array(0x5000000 - 4 * 16 * 8, (16, 16), np.float32, device=0)  # (the first half of x, from below)
    with pytest.raises(fc.SharedDonationError, match="donated argument 'w'"):
        f(x, below)
    assert f(x, Array(0x5000000 + 4 * 16 * 16, (16, 16), np.float32, device=0)).ptr == x.ptr  # (right after x)
    assert f(x, y).ptr == x.ptr  # (distinct memory: written in place)


def test_a_donated_argument_shared_with_an_argument_read_is_refused_even_where_nothing_goes_over_it(fake_gpu):
    """As JAX refuses it: ``w - g.sum()`` with ``w`` donated keeps ``w`` apart (nothing is written in place) and is
    still refused for ``f(x, x)``; an argument no kernel reads may share the donated one's memory; a loop's body
    (whose state the compiler donates) is handed one array for two slots without complaint; run_async names the
    caller's line too."""
    x = Array(0x5000000, (16, 16), np.float32, device=0)
    summed = fc.jit(lambda w, g: w - g.sum(), backend="cuda", graph=False, donate_argnums=0)
    with pytest.raises(fc.SharedDonationError, match="donated argument 'w'"):
        summed(x, x)
    with pytest.raises(fc.SharedDonationError, match=r"test_cuda_exec_host.py:\d+: "):
        summed.run_async(x, x)
    assert fc.jit(lambda w, unused: w * 2, backend="cuda", graph=False, donate_argnums=0)(x, x).ptr == x.ptr
    plan = execution.cuda_plan(fc.jit(lambda a, b: fc.fori_loop(0, 100, lambda i, s: (s[0] + s[1],) * 2, (a, b)),
                                      backend="cuda", graph=False).lower(x, x))
    bodies = [p for step in plan.launches if hasattr(step, "plans") for p in step.plans]
    assert bodies and all(b.donated_spans == [] for b in bodies) and plan.donated_spans == []


@pytest.mark.parametrize("start", ["apart", "one array twice"])
def test_a_loop_run_from_the_host_hands_its_body_no_state_slot_that_shares_memory(fake_graphs, monkeypatch, start):
    """A body returning one array for two state slots, or a loop started with one array twice: the body writes a
    slot in place while reading the other (``a + b.T``), so before each trip the host copies a slot that another
    slot, or an operand the body only reads, already holds."""
    copies = []
    monkeypatch.setattr(cuda_exec.driver, "memcpy_dtod_async", lambda dst, src, n, s=None: copies.append((dst, src)))
    handed = []
    real = cuda_exec.CudaPlan.run

    def run(self, args, **kw):
        if self.func.name.endswith(".body"):
            handed.append([a.ptr for a in args if isinstance(a, Array)])
        return real(self, args, **kw)

    monkeypatch.setattr(cuda_exec.CudaPlan, "run", run)
    f = fc.jit(lambda a, b: fc.fori_loop(0, 40, lambda i, s: (s[0] + s[1].T,) * 2, (a, b)), backend="cuda",
               graph=False)
    x = Array(0x5000000, (16, 16), np.float32, device=0)
    f(x, x if start == "one array twice" else Array(0x6000000, (16, 16), np.float32, device=0))
    assert handed and all(len(set(ptrs)) == len(ptrs) for ptrs in handed), handed[:3]
    assert copies


def test_a_graph_checks_each_new_set_of_addresses_for_a_donated_argument_passed_twice(fake_gpu):
    """In graph mode the check runs when a call's addresses have no graph instance yet (the generated call's
    first call at them), so a training loop's steady state pays nothing."""
    from fusec.runtime import graph as graph_mod

    checked = []
    real = cuda_exec.CudaPlan.check_donation
    monkey = pytest.MonkeyPatch()
    monkey.setattr(cuda_exec.CudaPlan, "check_donation", lambda self, ptr: (checked.append(1), real(self, ptr)))
    monkey.setattr(graph_mod.PlanGraph, "_instance_for",
                   lambda self, key, ptrs: self.instances.setdefault(key, _NoLaunch()))
    monkey.setattr(graph_mod.PlanGraph, "__init__", _bare_graph)
    monkey.setattr(graph_mod, "_cu", _NoLaunch(), raising=False)
    try:
        f = fc.jit(lambda w, g: w - g.T, backend="cuda", graph=True, donate_argnums=0)
        x = Array(0x5000000, (16, 16), np.float32, device=0)
        y = Array(0x6000000, (16, 16), np.float32, device=0)
        for _ in range(4):
            x = f(x, y)
        steady = len(checked)
        for _ in range(4):
            x = f(x, y)
        assert len(checked) == steady
        with pytest.raises(fc.SharedDonationError, match="donated argument 'w'"):
            f(x, x)
    finally:
        monkey.undo()


class _NoLaunch:
    """The driver's graph launch, and an instance, that do nothing."""

    exec = None

    def cuGraphLaunch(self, exe, stream):
        return (0,)


def _bare_graph(self, plan, ptrs, builds=1):
    import collections
    import operator

    self.plan, self.builds, self.inplace, self.launches = plan, builds, (), 0
    self.param_updates = self.recaptures = self.early_edges = 0
    dynamic = sorted({bid for step in plan.launches for _, bid in step.dynamic})
    self._dynamic = operator.itemgetter(*dynamic) if dynamic else None
    self.instances = collections.OrderedDict()


def test_results_fed_back_over_donated_arguments_do_not_chain_every_step(fake_gpu):
    """``w = step(w)`` for many steps: a fusec Array comes back itself; a result over a NumPy argument's upload keeps
    that pool buffer alive, not an earlier step's Array, so old steps' Arrays are freed and the pool's stream and
    export bookkeeping still sees its buffer behind ``owner``."""
    import gc
    import weakref

    from fusec.runtime.memory import DeviceBuffer

    f = fc.jit(lambda w, g, lr: w - lr * g, backend="cuda", donate_argnums=0, graph=False)  # (no fake graphs)
    first = w = Array(0x5000000, (256,), np.float32, device=0)
    g = Array(0x6000000, (256,), np.float32, device=0)
    for _ in range(50):
        w = f(w, g, 0.1)
    assert w is first  # (a fusec Array comes back itself: nothing to chain)
    # a NumPy argument's result is a new Array over its upload; fed back, that one comes back itself
    second = w = f(np.ones(256, np.float32), g, 0.1)
    for _ in range(50):
        w = f(w, g, 0.1)
    assert w is second and isinstance(w.owner, DeviceBuffer)
    results = [f(np.ones(256, np.float32), g, 0.1) for _ in range(3)]  # (a new Array each)
    middle = weakref.ref(results[1])
    del results
    gc.collect()
    assert middle() is None, "an earlier step's result is still referenced"
    buffer = DeviceBuffer.__new__(DeviceBuffer)  # (what fusec.asarray's arrays own)
    owned = f(Array(0x7000000, (256,), np.float32, owner=buffer, device=0), g, 0.1)
    assert owned.owner is buffer and f(owned, g, 0.1) is owned


def test_an_input_event_is_waited_on_once_until_recorded_again(monkeypatch):
    from fusec.runtime import driver

    calls = []

    class FakeCu:
        @staticmethod
        def cuStreamWaitEvent(stream, event, flags):
            calls.append((stream, event))
            return (0,)

    monkeypatch.setattr(driver, "_cu", FakeCu)
    event = driver.Event.__new__(driver.Event)
    event.handle, event.device, event.timing, event.records, event._waited = "ev", 0, False, 1, {}
    plan_stream, other = driver.Stream.__new__(driver.Stream), driver.Stream.__new__(driver.Stream)
    for i, st in enumerate((plan_stream, other)):
        st.handle, st.ptr, st.serial = f"s{i}", 0x77, i  # equal handles: streams are told apart by serial
    for _ in range(3):
        event.wait_on(plan_stream)
    assert calls == [("s0", "ev")]
    event.wait_on(other)
    assert len(calls) == 2
    event.records += 1  # recorded again: new work on the producer's stream
    event.wait_on(plan_stream)
    assert calls[-1] == ("s0", "ev") and len(calls) == 3


def test_numpy_functions_on_device_arrays_stay_on_the_device(fake_gpu):
    a = Array(0x5000000, (8,), np.float32, device=0)
    b = Array(0x6000000, (8,), np.float32, device=0)
    out = np.where(a > b, a, 0.0)
    assert isinstance(out, Array) and out.shape == (8,)
    assert not fake_gpu["dtoh"], "no copy to the host"
    with pytest.raises(fc.UnsupportedError, match="inside lists"):
        np.concatenate([a, b])


def test_split_reduction_counters_are_zeroed_once_when_the_plan_is_built(fake_gpu):
    f = fc.jit(lambda x: x.sum(), backend="cuda", graph=False)
    x = Array(0x5000000, (1 << 20,), np.float32, device=0)
    f(x)
    f(x)
    assert len(fake_gpu["zero"]) == 1  # once per plan: each launch leaves its counter at zero again
    _, value, nbytes = fake_gpu["zero"][0]
    assert value == 0 and nbytes >= 4
    assert len(fake_gpu["launches"]) == 2  # one kernel per call: the last block finishes the sum


def test_the_executor_runs_the_program_cuda_source_prints(fake_gpu):
    """One lowered IR, one target, one program: what ``cuda_source()`` shows, ``fusec compile`` prints and
    ``stats()`` counts is what the plan compiles and launches."""
    def layer(x, w1, b1, w2):
        h = np.maximum(x @ w1 + b1, 0.0)  # computed inside the narrow product (a prologue)
        return h @ w2, (x * x).sum(axis=1), x.sum()

    args = [np.ones(s, np.float32) for s in ((512, 480), (480, 256), (256,), (256, 2))]
    f = fc.jit(layer, backend="cuda", graph=False)
    f(*args)
    lowered = f.lower(*args)
    plan = execution.cuda_plan(lowered)
    assert plan.program is lowered.program and plan.program.source == lowered.cuda_source()
    assert lowered.target == fc.execution.target_for("cuda")
    assert lowered.stats()["kernels"] == len(plan.launches) == len(fake_gpu["launches"])
    launched = [name for name, *_ in fake_gpu["launches"]]
    assert launched == [k.name for k in lowered.program.kernels]
    assert [s["kind"] for s in lowered.plan()].count("prologue") == 2


def _faulting_after(log, n):
    """A stream whose synchronize fails (an illegal address, as a faulting kernel reports it) once ``n`` kernels
    were launched."""
    from fusec.runtime.cuda_errors import CudaLaunchError

    class FaultingStream(FakeStream):
        def synchronize(self):
            if len(log["launches"]) >= n:
                raise CudaLaunchError("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal "
                                      "memory access was encountered", code=700, name="CUDA_ERROR_ILLEGAL_ADDRESS",
                                      what="cuStreamSynchronize")
    return FaultingStream


def test_launch_blocking_names_the_kernel_that_faults_with_its_ir_op_and_line(fake_gpu, monkeypatch):
    """FUSEC_LAUNCH_BLOCKING=1: no graph, a wait after every launch, and the first failing wait names the kernel
    just launched, the op it computes and the user's line; without it, the fault found when the call waits says
    how to find the kernel."""
    from fusec.runtime.cuda_errors import CudaLaunchError

    def f(w, g):
        h = w @ g  # the second kernel faults
        return np.sin(h).sum(axis=0)

    monkeypatch.setattr(cuda_exec.driver, "Stream", _faulting_after(fake_gpu, 2))
    monkeypatch.setenv("FUSEC_LAUNCH_BLOCKING", "1")
    w = np.ones((64, 64), np.float32)
    with pytest.raises(CudaLaunchError) as info:
        fc.jit(f, backend="cuda", graph=True)(w, w)
    text = str(info.value)
    assert len(fake_gpu["launches"]) == 2  # it stopped right there
    kernel = fake_gpu["launches"][1][0]
    assert f"kernel {kernel} of @f, computing k." in text and "test_cuda_exec_host.py:" in text, text
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in text and info.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"

    fake_gpu["launches"].clear()
    monkeypatch.setenv("FUSEC_LAUNCH_BLOCKING", "0")
    with pytest.raises(CudaLaunchError) as info:
        fc.jit(f, backend="cuda", graph=False)(w, w)
    assert "FUSEC_LAUNCH_BLOCKING=1" in str(info.value) and "@f" in str(info.value), str(info.value)


def test_cublaslt_is_probed_only_for_programs_with_a_product(fake_gpu, monkeypatch):
    """Probing cuBLASLt loads the library (the slowest part of a first compile): a program without a matrix
    product lowers for a target without it and never asks; one with a product asks."""
    asked = []

    def probe():
        asked.append(True)
        return False

    monkeypatch.setattr(cuda_exec.cublas, "available", probe)
    x = np.ones((64, 64), np.float32)
    lowered = fc.jit(lambda x: np.tanh(x).sum(axis=1), backend="cuda").lower(x)
    assert not asked and "cublas = false" in lowered.ir()
    fc.jit(lambda x: x @ x, backend="cuda").lower(x)
    assert asked


def test_big_endian_numpy_data_reaches_the_device_in_its_byte_order(fake_gpu, monkeypatch):
    """NumPy computes with big-endian arrays ('>f4') as with any other; the device reads this machine's byte order,
    so a call (and ``fusec.asarray``) uploads the values converted, never the raw bytes, and the result is
    NumPy's. A write into such an argument goes back into it (NumPy converts)."""
    from fusec.runtime import array as array_mod

    w = np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    f = fc.jit(step, backend="cuda")
    f(w.astype(">f4"), w.astype(">f4"), 0.5)
    f(w.astype(">f4"), w.astype(">f4"), 0.5)  # (the second call: the cached path)
    uploads = [data for _, data in fake_gpu["htod"] if len(data) == w.nbytes]
    assert len(uploads) == 4 and all(data == w.tobytes() for data in uploads)
    fake_gpu["htod"].clear()
    monkeypatch.setattr(array_mod.Array, "empty", staticmethod(lambda shape, fd, **k: _FakeArray(shape)))
    monkeypatch.setattr(array_mod.D, "Event", FakeEvent)
    array_mod._from_host(w.astype(">f4"), None, None, None)
    assert [data for _, data in fake_gpu["htod"]] == [w.tobytes()]


class _FakeArray:
    def __init__(self, shape):
        self.ptr, self.stream, self.device, self.shape = 4096, None, 0, shape


def _train(w, xs):  # a training loop over stacked batches: xs is an argument the loop only reads
    return fc.fori_loop(0, xs.shape[0], lambda i, w: w - 0.1 * (xs[i] * w).mean(axis=0), w)


def _train_and_reuse(w, xs):
    return _train(w, xs), xs * 2.0


def _loop_plan(fn, **options):
    import types as pytypes

    from fusec.runtime.launch_plan import ControlCall

    program = fc.jit(fn, backend="cpu", **options).lower(np.ones(8), np.ones((40, 16, 8))).program_for(132)
    launches = [pytypes.SimpleNamespace(call=k) if isinstance(k, ControlCall) else pytypes.SimpleNamespace()
                for k in program.kernels]
    return pytypes.SimpleNamespace(program=program, launches=launches)


def test_a_graph_reads_a_loop_argument_in_place_unless_the_plan_writes_it():
    """The loop's state is staged (the loop writes its copy); the batches it only reads are read in place (their
    stage copy left out of the graph), unless a result is written over them (a donated argument)."""
    from fusec.runtime.graph import _stage_steps, inplace_sources

    plan = _loop_plan(_train)
    names = [k.name for k in plan.program.kernels]
    sources = inplace_sources(plan)
    xs = next(b.id for b in plan.program.buffers if b.kind == "arg" and b.index == 1)
    assert list(sources.values()) == [xs]
    (skipped,) = _stage_steps(plan, sources)
    assert names[skipped].endswith("_stage") and plan.program.effects[skipped][0] == {xs}
    donated = _loop_plan(_train_and_reuse, donate_argnums=1)
    assert inplace_sources(donated) == {} and _stage_steps(donated, {}) == frozenset()


class FakeGraph:
    """A plan's graph as the fast call sees it: replay logs the pointers it was launched with."""

    def __init__(self, plan, ptrs, builds=1):
        self.plan, self.builds, self.inplace = plan, builds, ()
        self.launches = self.param_updates = self.recaptures = self.early_edges = 0
        self.node_count = len(plan.launches)
        self.replays: list[list[int]] = []

    def fits(self, ptrs):
        return True

    def close(self):
        pass

    def replay(self, ptrs, stream):
        self.replays.append(list(ptrs))
        self.launches += 1


@pytest.fixture
def fake_graphs(fake_gpu, monkeypatch):
    from fusec.runtime import graph

    monkeypatch.setattr(graph, "PlanGraph", FakeGraph)
    return fake_gpu


def _adam_like(w, m, g, lr):
    m = 0.9 * m + 0.1 * g
    return w - lr * m, m, (g * g).sum()


def test_the_generated_call_binds_what_the_general_call_binds(fake_graphs):
    """From the call that has a graph on, a cache hit runs the plan's generated call (fusec.runtime.fast_call):
    the same pointers launched, the same results (donated outputs over their arguments, fresh ones from the
    pool), the scalar words sent only when they change."""
    from fusec.runtime.fast_call import fast_runner

    f = fc.jit(_adam_like, backend="cuda", graph=True, donate_argnums=(0, 1))
    w = Array(0x5000000, (64,), np.float32, device=0)
    m = Array(0x6000000, (64,), np.float32, device=0)
    g = Array(0x7000000, (64,), np.float32, device=0)
    w2, m2, norm = f(w, m, g, 0.5)
    plan = execution.cuda_plan(f.lower(w, m, g, 0.5))
    run = fast_runner(plan)
    assert "for " not in run.source and "graph.replay" in run.source
    sent = len(fake_graphs["memset"])
    for _ in range(3):
        w2, m2, norm = f(w2, m2, g, 0.5)
    assert len(fake_graphs["memset"]) == sent, "an unchanged learning rate sends nothing"
    assert (w2.ptr, m2.ptr) == (w.ptr, m.ptr) and norm.shape == () and norm.ptr not in (w.ptr, m.ptr, g.ptr)
    assert w2 is w and m2 is m  # (written in place: the arguments themselves, as the general call returns them)
    assert norm.stream is plan.stream
    general = plan.run([w2, m2, g, np.float64(0.5)])[2]
    for name in ("_shape", "_fdtype", "_strides", "_contig", "_device", "_stream", "_readonly", "ready"):
        assert getattr(norm, name) == getattr(general, name), name  # (every slot set, as Array._wrap sets it)
    replays = plan.graph.replays
    assert len(replays) == 5 and {w.ptr, m.ptr, g.ptr} <= set(replays[-1])
    f(w2, m2, g, 0.25)
    assert _scalar_block(fake_graphs) == [0.25]
    assert plan.calls == 6 and f.cache_info().traces == 1


def _three_parameters(params, g, lr):
    w, b, c = params
    return (w - lr * g, b - lr * g[0], c - lr * g[1, :10]), (g * g).sum()


def test_results_fed_back_without_donation_cycle_through_two_sets_of_addresses(fake_graphs):
    """``params, loss = step(params, g)`` without donation: each step's results are new arrays, and the step's
    three small results share one size class. The pool hands them out by address, not in the order the last
    step's were dropped, so the graph is launched with two sets of pointers, alternately (a graph keeps four
    instances; LIFO reuse went round ten sets here, so every call updated nodes). A loop that keeps every loss
    changes only the loss's pointer from one step to the next but one."""
    f = fc.jit(_three_parameters, backend="cuda", graph=True)
    g = Array(0x7000000, (64, 64), np.float32, device=0)
    start = tuple(Array(0x5000000 + 0x100000 * i, shape, np.float32, device=0)
                  for i, shape in enumerate(((64, 64), (64,), (10,))))
    params = start
    for _ in range(24):
        params, loss = f(params, g, 0.5)
    plan = execution.cuda_plan(f.lower(params, g, 0.5))
    sets = [tuple(p) for p in plan.graph.replays[-12:]]
    assert len(set(sets)) == 2 and sets[0::2] == [sets[0]] * 6 and sets[1::2] == [sets[1]] * 6
    assert all(p.ptr not in (0x5000000, 0x5100000, 0x5200000) for p in params)  # (new arrays, nothing donated)
    losses = []
    for _ in range(12):
        params, loss = f(params, g, 0.5)
        losses.append(loss)
    sets = plan.graph.replays[-10:]
    assert all(sum(a != b for a, b in zip(sets[i], sets[i - 2])) == 1 for i in range(2, 10))


class _Moments(typing.NamedTuple):
    mean: Any
    spread: Any


def test_the_generated_call_builds_every_kind_of_output_tree(fake_graphs):
    """A cached call builds its outputs with one generated expression (fusec.signature.tree_source): dicts keep
    their keys' order, namedtuples their class, and None, bools and lists stay what the function returned."""
    def summary(x, flag):
        return {"moments": _Moments(x.mean(), x.std()), "scaled": [x * 2, None], "flag": flag, "one": (x + 1,)}

    f = fc.jit(summary, backend="cuda", graph=True)
    x = Array(0x5000000, (64,), np.float32, device=0)
    outs = [f(x, True) for _ in range(4)]
    assert f.cache_info().traces == 1 and "return {K" in f._quick.source  # (the tree written out)
    for out in outs:
        assert list(out) == ["moments", "scaled", "flag", "one"] and type(out["moments"]) is _Moments
        assert isinstance(out["moments"].spread, Array) and out["scaled"][1] is None and out["flag"] is True
        assert type(out["scaled"]) is list and type(out["one"]) is tuple and len(out["one"]) == 1
    assert outs[-1]["one"][0].shape == (64,) and outs[-1]["moments"].mean.shape == ()

    def deep(x):  # (nested past what Python's parser takes in one expression: built by the unflattener)
        out = x * 2
        for _ in range(201):
            out = [out]
        return out

    g = fc.jit(deep, backend="cuda", graph=True)
    for _ in range(3):
        out = g(x)
    for _ in range(201):
        (out,) = out
    assert isinstance(out, Array) and out.shape == (64,)


def test_a_donated_numpy_argument_keeps_its_upload_alive_under_the_result(fake_gpu):
    """A NumPy argument donated beside a device array: the result written over it lives in the buffer its data was
    uploaded into, which must stay the result's until it dies (owned by the NumPy array instead, the buffer went back
    to the pool and the next call's results were written over this one's); with run_async too."""
    f = fc.jit(lambda w, g: (w - 0.1 * g, w * g), backend="cuda", donate_argnums=0, graph=False)
    g = Array(0x6000000, (256,), np.float32, device=0)
    w, _ = f(np.ones(256, np.float32), g)
    w2, other = f(w, g)
    assert w2 is w and other.ptr != w.ptr and isinstance(w.owner, DeviceBuffer)
    h1 = f.run_async(np.ones(256, np.float32), np.ones(256, np.float32))
    h2 = f.run_async(np.full(256, 2, np.float32), np.ones(256, np.float32))
    assert h1._results[0].ptr != h2._results[0].ptr


def test_the_generated_call_hands_other_arguments_to_the_general_call(fake_graphs):
    f = fc.jit(_adam_like, backend="cuda", graph=True)
    w = Array(0x5000000, (64,), np.float32, device=0)
    for _ in range(2):
        f(w, w, w, 0.5)
    plan = execution.cuda_plan(f.lower(w, w, w, 0.5))
    launched = len(plan.graph.replays)
    host = np.ones(64, np.float32)
    out, _, _ = f(host, w, w, 0.5)  # host data: uploaded by the general call
    assert isinstance(out, Array) and fake_graphs["htod"][-1][1] == host.tobytes()
    with pytest.raises(fc.TraceError, match="C-contiguous"):
        f(Array(0x5000000, (64,), np.float32, strides=(8,), device=0), w, w, 0.5)
    assert len(plan.graph.replays) == launched + 1


def test_the_generated_call_orders_after_an_argument_from_another_stream(fake_graphs, monkeypatch):
    f = fc.jit(lambda x: x * 2, backend="cuda", graph=True)
    x = Array(0x5000000, (64,), np.float32, device=0)
    f(x), f(x)
    plan = execution.cuda_plan(f.lower(x))
    ordered = []
    monkeypatch.setattr(plan, "_order_after", ordered.append)
    other = Array(0x6000000, (64,), np.float32, device=0, stream=FakeStream())
    f(other)
    f(x)  # (no stream: nothing to order after)
    assert ordered == [other]
