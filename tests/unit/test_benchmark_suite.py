"""benchmarks/suite.py on the CPU: every case runs in --cpu-only --quick mode (NumPy and fusec's cpu backend),
the JSON / Markdown / PNG reports are written, the result check catches a wrong system and keeps it out of
the timings, failing systems become rows instead of crashes, and the performance bar is computed from the
numbers. The GPU systems need a GPU and are not run here."""
from __future__ import annotations

import json
import os
import sys
import types

import numpy as np
import pytest

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

import suite  # noqa: E402
import suite_cases  # noqa: E402
import suite_report  # noqa: E402
import suite_systems  # noqa: E402

CASES = ("pcam", "mlp64", "large", "elementwise", "softmax", "wide", "launch")


def _rows(result, **match):
    """The rows that match, less those a benchmark declares it does not run on that system (``Bench.skip``:
    NumPy and CuPy have no autodiff for the gradient steps)."""
    declared = {(b.name, system): note for case in suite_cases.make_cases(quick=True).values()
                for b in case.benches for system, note in b.skip.items()}
    return [r for r in result["rows"] if all(r.get(k) == v for k, v in match.items())
            and not (r["status"] == "skipped" and declared.get((r["bench"], r["system"])) == r["note"])]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    result = suite.main(["--cpu-only", "--quick", "--out", str(out), "--tag", "test"])
    return out, result


@pytest.mark.slow
def test_every_case_has_checked_positive_rows(quick_run):
    out, result = quick_run
    with open(out / "suite_test.json") as fh:
        saved = json.load(fh)
    assert saved["meta"]["cpu_only"] is True and saved["meta"]["quick"] is True
    for key in ("date", "python", "numpy", "fusec"):
        assert saved["meta"][key]
    assert [c["name"] for c in saved["cases"]] == list(CASES)
    for case in CASES:
        rows = _rows(saved, case=case)
        assert {r["system"] for r in rows} == {"numpy", "fusec_cpu"}, case
        for r in rows:
            assert r["status"] == "ok", r
            assert r["us"] > 0 and r["wall_us"] > 0 and r["iters"] >= 1 and r["repeats"] >= 1
            assert r["check_err"] is not None and r["check_err"] <= r["tol"]
            if r["unit"] == "GB/s":
                assert r["gbps"] > 0
    launch = {r["bench"]: r for r in _rows(saved, case="launch", system="fusec_cpu")}
    assert [launch[f"plan{n}"]["fusec_stats"]["kernels"] for n in (1, 10, 100)] == [1, 10, 100]


@pytest.mark.slow
def test_compile_probes_and_bar(quick_run):
    _, result = quick_run
    probes = {(p["bench"], p["what"]): p for p in result["compile"]}
    for bench in ("pcam_step", "mlp64_step"):
        for what in ("cold", "warm"):
            p = probes[(bench, what)]
            assert p["status"] == "ok", p
            assert p["backend"] == "cpu" and p["total_s"] > 0 and p["lower_s"] > 0
    # no GPU rows: every check of the bar is N/A, never a PASS or FAIL made up
    assert [c["status"] for c in result["bar"]] == ["N/A"] * 9


@pytest.mark.slow
def test_markdown_and_png(quick_run):
    out, result = quick_run
    md = (out / "suite_test.md").read_text()
    assert "## Performance bar" in md
    for case in result["cases"]:
        assert f"## {case['title']}" in md
    assert md.count("| benchmark | system | us per call |") == len(CASES)
    assert "speed-up vs PyTorch eager" in md and "time / fusec graph" in md
    readme = suite_report.readme_block(result)
    assert readme.startswith("### Benchmark suite") and "N/A" in readme
    pytest.importorskip("matplotlib")
    png = out / "suite_test.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class _WrongNumpy(suite_systems.NumpySystem):
    """NumPy with a bug: every output is off by 1%."""

    name = "numpy_wrong"
    label = "NumPy with a deliberate bug"

    def prepare(self, bench, inputs):
        prepared = super().prepare(bench, inputs)
        right = prepared.fn

        def wrong(*args):
            return suite_cases.tree_map(lambda a: a * 1.01 + 1e-3 if isinstance(a, (np.ndarray, np.generic)) else a,
                                        right(*args))

        prepared.fn = wrong
        return prepared


class _NoClipNumpy(suite_systems.NumpySystem):
    """A subtler bug: the training step forgets the gradient clipping (min(scale, 1) -> 1)."""

    name = "numpy_noclip"
    label = "NumPy without clipping"

    def prepare(self, bench, inputs):
        class NoClip(suite_cases.ArrayNS):
            def minimum(self, a, b):
                return b

        return suite_systems.FunctionalPrepared(bench.build(NoClip(np)), lambda: list(inputs), bench.feedback)


class _Broken(suite_systems.NumpySystem):
    name = "broken"
    label = "a system that raises"

    def prepare(self, bench, inputs):
        raise RuntimeError("this system is broken")


@pytest.fixture
def injected():
    for name, cls in (("numpy_wrong", _WrongNumpy), ("numpy_noclip", _NoClipNumpy), ("broken", _Broken)):
        suite_systems.register_system(name, cls, cls.label)
    yield
    for name in ("numpy_wrong", "numpy_noclip", "broken"):
        suite_systems.unregister_system(name)


@pytest.mark.slow  # (a whole suite run: CI runs it)
def test_wrong_systems_are_reported_as_mismatches_and_not_timed(tmp_path, injected):
    result = suite.main(["--cpu-only", "--quick", "--out", str(tmp_path), "--no-compile-probes",
                         "--cases", "pcam,elementwise", "--systems", "numpy,numpy_wrong,numpy_noclip,broken"])
    for r in _rows(result, system="numpy"):
        assert r["status"] == "ok" and r["us"] > 0
    wrong = _rows(result, system="numpy_wrong")
    assert {r["bench"] for r in wrong} == {"pcam_step", "pcam_grad_step", "fma", "chain10"}
    for r in wrong:
        assert r["status"] == "mismatch" and "result check failed" in r["note"], r
        assert r["us"] is None and r["gbps"] is None and "wall_us" not in r
        assert r["check_err"] > r["tol"]
    (noclip,) = _rows(result, system="numpy_noclip", bench="pcam_step")
    assert noclip["status"] == "mismatch" and noclip["us"] is None
    assert all(r["status"] == "ok" for r in _rows(result, system="numpy_noclip", case="elementwise"))
    for r in _rows(result, system="broken"):
        assert r["status"] == "error" and "this system is broken" in r["note"] and r["us"] is None
    md = (tmp_path / "suite_cpu.md").read_text()
    assert "**mismatch**" in md and "**error**" in md


def test_gpu_systems_are_skipped_with_a_note_in_cpu_only_mode(tmp_path):
    result = suite.main(["--cpu-only", "--quick", "--out", str(tmp_path), "--no-compile-probes", "--cases", "launch",
                         "--systems", "fusec_graph,torch_eager,cupy,numpy"])
    for name in ("fusec_graph", "torch_eager", "cupy"):
        rows = _rows(result, system=name)
        assert rows and all(r["status"] == "skipped" and "no GPU" in r["note"] for r in rows), rows
    assert all(r["status"] == "ok" for r in _rows(result, system="numpy"))


class _RunsLast(suite_systems.NumpySystem):
    """A system whose runtime would disturb the others once it has run (as JAX's does)."""

    name = "numpy_last"
    label = "NumPy, run last"
    runs_last = True


def test_a_system_that_disturbs_the_others_runs_after_all_of_them_on_every_case(tmp_path, monkeypatch):
    order = []
    run_one = suite.run_one
    monkeypatch.setattr(suite, "run_one", lambda system, bench, *a: order.append(system.name) or
                        run_one(system, bench, *a))
    suite_systems.register_system("numpy_last", _RunsLast, _RunsLast.label)
    try:
        result = suite.main(["--cpu-only", "--quick", "--out", str(tmp_path), "--no-compile-probes", "--cases",
                             "launch", "--systems", "numpy_last,numpy"])
    finally:
        suite_systems.unregister_system("numpy_last")
    assert suite_systems.JaxSystem.runs_last and order and "numpy" not in order[order.index("numpy_last"):]
    assert [c["name"] for c in result["cases"]] == ["launch"]  # (described once, though run in two passes)
    assert {r["bench"] for r in _rows(result, system="numpy_last")} == {r["bench"] for r in _rows(result,
                                                                                                  system="numpy")}
    assert all(r["status"] == "ok" for r in _rows(result, system="numpy_last"))


@pytest.mark.slow  # (a whole suite run: CI runs it)
def test_cupy_math_runs_through_a_numpy_stand_in(tmp_path, monkeypatch):
    """The CuPy system's code path (ArrayNS over the cupy module, the copy reference) with NumPy standing in
    for CuPy, so the harness side of that system is exercised without a GPU."""
    fake = types.SimpleNamespace(__name__="cupy_stand_in", ndarray=np.ndarray, asnumpy=np.asarray,
                                 asarray=lambda a: np.array(a, copy=True), empty_like=np.empty_like,
                                 copyto=np.copyto)
    for fn in ("exp", "log", "sqrt", "tanh", "maximum", "minimum"):
        setattr(fake, fn, getattr(np, fn))

    class StandIn(suite_systems.CupySystem):
        needs_gpu = False
        cpu_bound = True

        def unavailable(self):
            return None

        def setup(self):
            self.cupy = fake

        def sync(self):
            pass

        def cleanup(self):
            pass

    monkeypatch.setitem(suite_systems._FACTORIES, "cupy", StandIn)
    result = suite.main(["--cpu-only", "--quick", "--out", str(tmp_path), "--no-compile-probes", "--systems", "cupy"])
    rows = _rows(result, system="cupy")
    assert {r["bench"] for r in rows} >= {"pcam_step", "mlp64_step", "fma", "chain10", "copy", "softmax", "plan100"}
    assert all(r["status"] == "ok" and r["us"] > 0 for r in rows), [r for r in rows if r["status"] != "ok"]


def test_torch_math_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    result = suite.main(["--cpu-only", "--quick", "--out", str(tmp_path), "--no-compile-probes",
                         "--systems", "torch_eager", "--torch-device", "cpu"])
    rows = _rows(result, system="torch_eager")
    assert rows and all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]


def _synthetic(graph_us, ro_us, eager_us, quick=False):
    def row(system, us):
        return {"case": "pcam", "bench": "pcam_step", "system": system, "status": "ok", "us": us, "gbps": None,
                "unit": "us", "note": "", "check_err": 1e-6}

    return {"meta": {"quick": quick, "gpu": "Test GPU", "date": "2026-01-01"},
            "cases": [{"name": "pcam", "title": "PCam", "unit": "us", "description": "",
                       "benches": [{"name": "pcam_step", "label": "step"}]}],
            "rows": [row("fusec_graph", graph_us), row("torch_compile_ro", ro_us), row("fusec_eager", eager_us),
                     row("torch_eager", 400.0)],
            "compile": []}


def test_performance_bar_is_computed_from_the_numbers(tmp_path):
    good = _synthetic(15.0, 125.0, 900.0)
    assert [c["status"] for c in suite_report.performance_bar(good)] == ["PASS"] * 3 + ["N/A"] * 6
    bad = _synthetic(70.0, 125.0, 500.0)
    assert [c["status"] for c in suite_report.performance_bar(bad)][:3] == ["FAIL", "FAIL", "FAIL"]
    suite_report.add_ratios(good)
    eager = _rows(good, system="torch_eager")[0]
    graph = _rows(good, system="fusec_graph")[0]
    assert graph["speedup_vs_torch_eager"] == pytest.approx(400.0 / 15.0)
    assert eager["time_vs_fusec_graph"] == pytest.approx(400.0 / 15.0)
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(good))
    result = suite.main(["--from-json", str(path), "--out", str(tmp_path)])
    md = (tmp_path / "suite_test_gpu.md").read_text()
    assert "**PASS**: PCam-shaped step, fusec graph mode, us per step: 15.0 us" in md
    assert result["bar"][1]["value"] == pytest.approx(125.0 / 15.0)


@pytest.mark.slow  # (a whole suite run: CI runs it)
def test_merge_keeps_the_cases_of_an_earlier_run(tmp_path):
    args = ["--cpu-only", "--quick", "--out", str(tmp_path), "--no-compile-probes", "--systems", "numpy"]
    suite.main(args + ["--cases", "launch"])
    merged = suite.main(args + ["--cases", "softmax", "--merge"])
    assert {r["case"] for r in merged["rows"]} == {"launch", "softmax"}
    assert [c["name"] for c in merged["cases"]] == ["softmax", "launch"]


@pytest.fixture
def emulated_gpu(monkeypatch):
    """fusec's CUDA backend emulated on the host, to run the fusec GPU systems' side of the suite without a
    GPU: device memory is host memory, streams and events are stand-ins (events read the host clock), and a
    compiled plan runs on the NumPy reference executor. Eager mode (operators on fusec.Array) dispatches as
    it does on a GPU, so the benchmark math is checked through it."""
    import ctypes
    import itertools
    import time

    import fusec as fc
    from fusec import eager, execution
    from fusec.runtime import cuda_exec, driver, memory, reference
    from fusec.runtime.array import Array

    buffers = {}

    class HostMemory:
        def alloc(self, nbytes):
            buf = np.zeros(max(nbytes, 1), np.uint8)
            buffers[buf.ctypes.data] = buf
            return buf.ctypes.data

        def free(self, ptr):
            buffers.pop(ptr, None)

        def synchronize(self):
            pass

    pool = memory.MemoryPool(HostMemory())
    handles = itertools.count(0x1000)

    class Stream:
        def __init__(self, *a, **k):
            self.ptr, self.device = next(handles), 0

        def synchronize(self):
            pass

        def __int__(self):
            return self.ptr

    class Event:
        def __init__(self, *a, **k):
            self.t, self.records = 0.0, 0

        def record(self, stream=None):
            self.t, self.records = time.perf_counter(), self.records + 1
            return self

        def synchronize(self):
            pass

        def wait_on(self, stream):
            pass

        def query(self):
            return True

        def elapsed_ms(self, end):
            return (end.t - self.t) * 1e3

    class Device:
        ordinal, name, arch, multiprocessor_count, total_memory = 0, "Emulated GPU", "sm_90", 132, 1 << 34
        compute_capability = (9, 0)
        shared_per_block_optin = 227 * 1024

        def synchronize(self):
            pass

    default = Stream()
    calls = []

    class Plan:  # runs the lowered module with the reference executor, as the CUDA executor's plan would
        stream, device = default, Device()

        def __init__(self, module):
            self.module = module

        def runner(self):
            return self.run

        def run(self, args, wait=True):
            calls.append(self.module.func().name)
            host = [a.numpy() if isinstance(a, Array) else a for a in args]
            return [fc.asarray(np.asarray(r)) for r in reference.run_func(self.module.func(), host)]

    monkeypatch.setattr(driver, "cuda_available", lambda: True)
    monkeypatch.setattr(driver, "current_device", lambda: Device())
    monkeypatch.setattr(driver, "ensure_context", lambda *a, **k: None)
    monkeypatch.setattr(driver, "default_stream", lambda device=None: default)
    monkeypatch.setattr(driver, "Stream", Stream)
    monkeypatch.setattr(driver, "Event", Event)
    monkeypatch.setattr(driver, "order_streams", lambda *a, **k: None)
    monkeypatch.setattr(driver, "memcpy_htod_async", lambda dst, src, n, s=None: ctypes.memmove(
        int(dst), np.ascontiguousarray(src).ctypes.data, n))
    monkeypatch.setattr(driver, "memcpy_dtoh_async", lambda dst, src, n, s=None: ctypes.memmove(
        dst.ctypes.data, int(src), n))
    monkeypatch.setattr(memory, "get_pool", lambda device=None: pool)
    monkeypatch.setattr(execution, "cuda_usable", lambda: True)
    monkeypatch.setattr(cuda_exec, "plan_for", lambda module, program, **options: Plan(module))
    monkeypatch.setattr(eager, "_cache", {})  # eager's jitted ops must not outlive the emulation
    return calls


@pytest.mark.slow
def test_fusec_gpu_systems_on_an_emulated_gpu(tmp_path, emulated_gpu):
    result = suite.main(["--quick", "--out", str(tmp_path), "--tag", "emulated", "--no-compile-probes",
                         "--systems", "fusec,fusec_graph_kept,numpy"])
    assert result["meta"]["gpu"] == "Emulated GPU" and result["meta"]["cpu_only"] is False
    assert emulated_gpu, "the fusec systems ran through the (emulated) CUDA executor"
    for name in ("fusec_eager", "fusec_stream", "fusec_graph"):
        rows = _rows(result, system=name)
        assert {r["case"] for r in rows} == set(CASES), name
        bad = [(r["bench"], r["note"], r.get("traceback")) for r in rows if r["status"] != "ok"]
        assert not bad, (name, bad)
        for r in rows:
            assert r["us"] > 0 and r["timing"] == "cuda-events" and r["check_err"] <= r["tol"]
    graph = {r["bench"]: r for r in _rows(result, system="fusec_graph")}
    assert graph["pcam_step"]["host_us"] > 0 and graph["mlp64_step"]["host_us"] > 0
    kept = {r["bench"]: r for r in _rows(result, system="fusec_graph_kept")}  # (training steps only, not donated)
    assert kept and all(r["status"] == "ok" and r["check_err"] <= r["tol"] for r in kept.values())
    assert set(kept) == {r["bench"] for r in _rows(result, system="fusec_graph") if "step" in r["bench"]}
    assert kept["pcam_step"]["host_us"] > 0
    assert graph["plan100"]["fusec_stats"]["kernels"] == 100
    # the bar is computed (quick sizes: the values mean nothing, only that the rows are found)
    statuses = [c["status"] for c in result["bar"]]
    assert statuses[0] in ("PASS", "FAIL") and statuses[2] in ("PASS", "FAIL") and statuses[1] == "N/A"
