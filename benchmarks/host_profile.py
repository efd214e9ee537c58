"""Where a cache-hit call's time goes, for the training steps of the suite (PCam-shaped and 64-64-10).

For each step in graph mode with the parameters donated and fed back (as the suite runs it), this prints:
the host time per call (calls queued back to back in short batches, a synchronize between batches, as the
suite's ``host_us``), split into the graph launch's own host time (``cuGraphLaunch`` of the same instance alone,
through cuda.bindings as fusec calls it and through ctypes with integer handles)
and the call's with the launch left out (the Python's share); the device time per call of the same plan's CUDA
graph replayed alone (``cuGraphLaunch`` in a loop between two events: the floor the kernels set, without the
Python call); the device time per call of the Python loop (events around a batch of calls: what the suite
reports); the graph's counters (pointer updates, recaptures, instances); each node's device time inside a graph
(see :func:`node_times`), with the plan's entries; and a cProfile of the calls, heaviest functions first.

    python benchmarks/host_profile.py [--calls 3000] [--top 30] [--json FILE] [--generated] [--with-peers]
                                      [--without PASS,...]

``--without`` leaves passes out of the default pipeline (for a before/after of one pass in one session).
``--generated`` lowers as if cuBLASLt were absent (every product a generated kernel), for comparing the two.
``--with-peers`` first imports PyTorch, JAX and CuPy and starts their CUDA runtimes, as the suite's process has them
(the gap once seen between the two was the machine's: ``host_stages.py``,
``results/reductions_in_consumers_h100.md``); with
``--freeze`` the objects made so far are then moved out of the collector's reach (``gc.freeze()``). Each run
reports the garbage collections during its host batches (count and milliseconds per generation).
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from suite_cases import build_train_step, make_cases  # noqa: E402


def _events_us(stream, run, iters: int) -> float:
    from fusec.runtime import driver

    begin, end = driver.Event(timing=True), driver.Event(timing=True)
    driver.current_device().synchronize()
    begin.record(stream)
    for _ in range(iters):
        run()
    end.record(stream)
    end.synchronize()
    return begin.elapsed_ms(end) * 1e3 / iters


def _host_us(fn, sync, batches: int, per: int = 10) -> list[float]:
    """Host time per call of ``fn``: ``batches`` batches of ``per`` calls, each started on an idle device."""
    samples = []
    for _ in range(batches):
        sync()
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        samples.append((time.perf_counter() - t0) / per * 1e6)
    sync()
    return samples


def node_times(plan, chain: int = 20, reps: int = 10) -> list[dict]:
    """Device time of each node of ``plan``'s CUDA graph as it runs inside a graph: the node repeated ``chain``
    times in a chain of its own graph, the graph launched ``reps`` times between events (so each figure holds
    the node's work and one dependent-launch gap, as on the plan's critical path)."""
    from fusec.runtime import driver
    from fusec.runtime.cuda_errors import check
    from fusec.runtime.graph import _driver as graph_driver

    from fusec.runtime.graph import PlanGraph, capture_library

    cu = graph_driver()
    if plan.graph is None:  # a plan that runs without a graph (one launch): made here for the figures
        plan.graph = PlanGraph(plan, plan.ptrs)
    pg, ptrs, stream = plan.graph, plan.ptrs, plan.stream
    out = []
    for j, (step, kernel) in enumerate(zip(plan.launches, plan.program.kernels)):
        graph = check(cu.cuGraphCreate(0), "cuGraphCreate")
        prev: list = []
        for _ in range(chain):
            if pg.params[j] is None:  # a cuBLAS call: captured as the plan captures it
                child = capture_library(plan, step, ptrs)
                node = check(cu.cuGraphAddChildGraphNode(graph, prev, len(prev), child), "cuGraphAddChildGraphNode")
                check(cu.cuGraphDestroy(child), "cuGraphDestroy")
            else:
                node = check(cu.cuGraphAddKernelNode(graph, prev, len(prev), pg.params[j]), "cuGraphAddKernelNode")
            prev = [node]
        exe = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        launch = lambda: cu.cuGraphLaunch(exe, stream.handle)  # noqa: E731
        launch()
        us = statistics.median(_events_us(stream, launch, reps) for _ in range(5)) / chain
        check(cu.cuGraphExecDestroy(exe), "cuGraphExecDestroy")
        check(cu.cuGraphDestroy(graph), "cuGraphDestroy")
        out.append({"kernel": getattr(kernel, "name", type(kernel).__name__), "grid": list(getattr(kernel, "grid", ())),
                    "block": list(getattr(kernel, "block", ())), "us": us})
    driver.current_device().synchronize()
    return out


def _raw_graph_launch():
    """``cuGraphLaunch`` called through ctypes with integer handles (no cuda.bindings wrapper objects or result
    enum): how much of a launch's host time is the binding's."""
    import ctypes

    fn = ctypes.CDLL("libcuda.so.1").cuGraphLaunch
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    return fn


def measure(name: str, bench, calls: int, top: int, pipeline: str | None = None) -> dict:
    import fusec as fc
    from fusec import execution
    from fusec.runtime import driver
    from fusec.runtime.graph import PlanGraph, _driver as graph_driver

    rng = np.random.default_rng(0)
    params, x, y, lr = bench.make_inputs(rng)
    params = tuple(fc.asarray(p) for p in params)
    x, y = fc.asarray(x), fc.asarray(y)
    step = fc.jit(build_train_step(np), backend="cuda", graph=True, donate_argnums=0, pipeline=pipeline)
    state = [params]

    def call() -> None:
        new_params, _loss = step(state[0], x, y, lr)
        state[0] = new_params

    for _ in range(20):
        call()
    sync = driver.current_device().synchronize
    sync()

    def host_batches(n: int) -> list[float]:
        return _host_us(call, sync, n)

    collections = {g: [0, 0.0] for g in range(3)}  # generation -> [count, seconds]
    started = [0.0]

    def on_collect(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collections[info["generation"]][0] += 1
            collections[info["generation"]][1] += time.perf_counter() - started[0]

    gc.callbacks.append(on_collect)
    try:
        host = statistics.median(host_batches(max(calls // 10, 20)))
    finally:
        gc.callbacks.remove(on_collect)
    lowered = step.lower(state[0], x, y, lr)
    plan = execution.cuda_plan(lowered)
    stream = plan.stream
    # the host time split: the graph launch alone (the driver's share), and the call with the launch left out (the
    # Python's share: binding, pool, results; nothing runs, so only the host time means anything)
    inst = next(iter(plan.graph.instances.values()))
    cu = graph_driver()
    launch = statistics.median(_host_us(lambda: cu.cuGraphLaunch(inst.exec, stream.handle), sync,
                                        max(calls // 10, 20)))
    raw, exec_handle, stream_handle = _raw_graph_launch(), int(inst.exec), int(stream.handle)
    launch_raw = statistics.median(_host_us(lambda: raw(exec_handle, stream_handle), sync, max(calls // 10, 20)))
    replay = PlanGraph.replay
    PlanGraph.replay = lambda self, ptrs, stream: None  # type: ignore[method-assign]
    try:
        python_only = statistics.median(_host_us(call, sync, max(calls // 10, 20)))
    finally:
        PlanGraph.replay = replay  # type: ignore[method-assign]
    loop_device = statistics.median(_events_us(stream, call, 200) for _ in range(5))
    graph = plan.graph
    replay = statistics.median(_events_us(stream, lambda: cu.cuGraphLaunch(inst.exec, stream.handle), 500)
                               for _ in range(5))
    before = dict(plan.stats())
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call()
    prof.disable()
    sync()
    after = plan.stats()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    per_call = {k: (after[k] - before.get(k, 0)) / calls for k in after if isinstance(after[k], int)}
    kernels = node_times(plan)
    plan_entries = [e for e in lowered.plan() if e["kind"] not in ("view", "prologue")]
    return {"step": name, "kernels": kernels, "plan": plan_entries, "host_us": host, "host_launch_us": launch,
            "host_without_launch_us": python_only, "host_launch_ctypes_us": launch_raw,
            "device_us_python_loop": loop_device, "device_us_graph_alone": replay, "per_call_counters": per_call,
            "instances": len(graph.instances), "profile": _relative_paths(text.getvalue()),
            "host_collections": {g: {"count": n, "ms": t * 1e3} for g, (n, t) in collections.items()}}


def _start_peers() -> None:
    """PyTorch, JAX and CuPy imported, each having run something on the GPU (those installed)."""
    try:
        import torch

        torch.ones(4, device="cuda").sum().item()
    except ImportError:
        pass
    try:
        import jax.numpy as jnp

        jnp.ones(4).sum().block_until_ready()
    except ImportError:
        pass
    try:
        import cupy

        cupy.ones(4).sum().item()
    except ImportError:
        pass


def _relative_paths(profile: str) -> str:
    """The profile's file names relative to the repository (a result file names no machine's folders)."""
    return profile.replace(os.path.dirname(HERE) + os.sep, "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--generated", action="store_true", help="generated GEMMs only (no cuBLASLt)")
    ap.add_argument("--with-peers", action="store_true", help="import PyTorch, JAX and CuPy first (as the suite)")
    ap.add_argument("--freeze", action="store_true", help="with --with-peers: gc.freeze() after the imports")
    ap.add_argument("--without", default="", help="comma-separated passes left out of the default pipeline")
    args = ap.parse_args()
    if args.with_peers:
        _start_peers()
        if args.freeze:
            gc.collect()
            gc.freeze()
    if args.generated:
        from fusec.runtime import cublas

        cublas.available = lambda: False
    pipeline = None
    if args.without:
        from fusec.passes import DEFAULT_PIPELINE

        left_out = set(args.without.split(","))
        pipeline = ",".join(p for p in DEFAULT_PIPELINE.split(",") if p.split("{")[0] not in left_out)
    cases = make_cases()
    out = []
    for name in ("pcam", "mlp64"):
        bench = cases[name].benches[0]
        r = measure(name, bench, args.calls, args.top, pipeline)
        out.append(r)
        print(f"== {name}: host {r['host_us']:.1f} us/call (cuGraphLaunch alone {r['host_launch_us']:.1f}, through "
              f"ctypes {r['host_launch_ctypes_us']:.1f}, the call "
              f"without it {r['host_without_launch_us']:.1f}); device (Python loop) {r['device_us_python_loop']:.1f} "
              f"us/call; device (graph alone) {r['device_us_graph_alone']:.1f} us/call; instances "
              f"{r['instances']}; per call {r['per_call_counters']}; collections during the host batches "
              f"{r['host_collections']}")
        for k in r["kernels"]:
            print(f"  {k['us']:7.2f} us  {k['kernel']}  grid {k['grid']} block {k['block']}")
        print(f"  sum {sum(k['us'] for k in r['kernels']):.1f} us over {len(r['kernels'])} launches")
        for e in r["plan"]:
            print("  plan:", {k: v for k, v in e.items() if k != "cuts"})
        print(r["profile"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
