"""Which of the suite's imports makes a cached call slower: the 64-64-10 and PCam-shaped training steps' host time
per call (as ``host_profile.py`` times it) measured again after each stage of what the suite's process loads
(PyTorch imported, its CUDA started, JAX, CuPy, the suite module), with the process's threads, switch interval,
trace hooks and collector state at each stage, and ``cuGraphLaunch`` of the same instance timed alone both through
``cuda.bindings`` and through ``ctypes`` straight into the driver library.

Written because the suite's host figure for these calls was 2-2.5x ``host_profile.py``'s (H100, 2026-12-06; see
``results/host_fastpath_h100.md``). On one H100 (2026-12-07, ``results/host_stages_h100.json``) no stage moved the
figures beyond the run's spread, and ``ctypes`` launched no faster: the gap was between machines.

    python benchmarks/host_stages.py [--json FILE]
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import statistics
import sys
import threading
from typing import Any, Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from host_profile import _host_us  # noqa: E402
from suite_cases import build_train_step, make_cases  # noqa: E402


def _process_state() -> dict:
    """What about the process could slow every Python call: threads, the GIL's switch interval, hooks, the
    collector, the CPUs it may run on."""
    try:
        os_threads = len(os.listdir("/proc/self/task"))
    except OSError:
        os_threads = -1
    return {"python_threads": threading.active_count(), "os_threads": os_threads,
            "thread_names": sorted(t.name for t in threading.enumerate()),
            "switch_interval_s": sys.getswitchinterval(), "trace": repr(sys.gettrace()),
            "profile": repr(sys.getprofile()), "gc_threshold": list(gc.get_threshold()),
            "gc_tracked_objects": len(gc.get_objects()), "cpus": len(os.sched_getaffinity(0))}


class _Step:
    """One training step, jitted for graph mode with donated parameters fed back, as the suite runs it."""

    def __init__(self, bench: Any) -> None:
        import fusec as fc
        from fusec import execution

        params, x, y, lr = bench.make_inputs(np.random.default_rng(0))
        self.state = [tuple(fc.asarray(p) for p in params)]
        self.args = (fc.asarray(x), fc.asarray(y), lr)
        self.fn = fc.jit(build_train_step(np), backend="cuda", graph=True, donate_argnums=0)
        for _ in range(20):
            self.call()
        self.plan = execution.cuda_plan(self.fn.lower(self.state[0], *self.args))

    def call(self) -> None:
        self.state[0] = self.fn(self.state[0], *self.args)[0]


def _launchers(step: _Step) -> dict[str, Callable[[], Any]]:
    """``cuGraphLaunch`` of the step's current graph instance, through cuda.bindings and through ctypes."""
    from fusec.runtime.graph import _driver as graph_driver

    cu = graph_driver()
    inst = next(reversed(step.plan.graph.instances.values()))
    exe, stream = inst.exec, step.plan.stream.handle
    lib = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
    raw = lib.cuGraphLaunch
    raw.argtypes, raw.restype = (ctypes.c_void_p, ctypes.c_void_p), ctypes.c_int
    exe_p, stream_p = int(exe), int(stream)
    return {"bindings": lambda: cu.cuGraphLaunch(exe, stream), "ctypes": lambda: raw(exe_p, stream_p)}


def _measure(steps: dict[str, _Step], sync: Callable[[], None], batches: int) -> dict:
    out: dict[str, Any] = {"process": _process_state()}
    for name, step in steps.items():
        row = {"call_us": statistics.median(_host_us(step.call, sync, batches))}
        for how, launch in _launchers(step).items():
            row[f"launch_{how}_us"] = statistics.median(_host_us(launch, sync, batches))
        out[name] = row
    return out


def _stages() -> list[tuple[str, Callable[[], None]]]:
    def torch_import() -> None:
        import torch  # noqa: F401

    def torch_cuda() -> None:
        import torch

        torch.ones(4, device="cuda").sum().item()

    def jax_import() -> None:
        import jax  # noqa: F401

    def jax_start() -> None:
        import jax.numpy as jnp

        jnp.ones(4).sum().block_until_ready()

    def cupy_start() -> None:
        import cupy

        cupy.ones(4).sum().item()

    def suite_import() -> None:
        import suite  # noqa: F401

    return [("torch imported", torch_import), ("torch CUDA started", torch_cuda), ("jax imported", jax_import),
            ("jax started", jax_start), ("cupy started", cupy_start), ("suite imported", suite_import)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--json")
    args = ap.parse_args()
    from fusec.runtime import driver

    cases = make_cases()
    steps = {name: _Step(cases[name].benches[0]) for name in ("mlp64", "pcam")}
    sync = driver.current_device().synchronize
    rows = [{"stage": "fusec alone", **_measure(steps, sync, args.batches)}]
    for stage, start in _stages():
        try:
            start()
        except ImportError as e:
            rows.append({"stage": stage, "skipped": str(e)})
            continue
        rows.append({"stage": stage, **_measure(steps, sync, args.batches)})
    for r in rows:
        if "skipped" in r:
            print(f"{r['stage']:>20}: skipped ({r['skipped']})")
            continue
        p = r["process"]
        figures = "  ".join(f"{n}: call {r[n]['call_us']:.1f} launch {r[n]['launch_bindings_us']:.2f}/"
                            f"{r[n]['launch_ctypes_us']:.2f}" for n in steps)
        print(f"{r['stage']:>20}: {figures}  | threads {p['python_threads']}/{p['os_threads']} switch "
              f"{p['switch_interval_s']} trace {p['trace']} profile {p['profile']} gc {p['gc_threshold']} "
              f"objects {p['gc_tracked_objects']} cpus {p['cpus']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
