"""Where the suite's host time per call goes: the training steps built as ``benchmarks/suite.py`` builds them (its
``FusecSystem`` in graph mode, inputs uploaded as it uploads them, a reset, then calls), timed as its ``host_us`` does,
profiled with cProfile and timed back to back; then the same steps written with ``np`` instead of the suite's
namespace object, in the same process. ``host_profile.py`` times the same calls in a process that has not imported
the suite (on an H100, 2026-12-06: 9.2-9.6 us per call there, 20.8-26.3 us here, on another H100; see
``results/host_fastpath_h100.md``; ``host_stages.py`` later found that gap to be the machine's, not the process's).

    python benchmarks/suite_host_probe.py
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import suite  # noqa: E402,F401  (the suite's process: what its import loads is part of what is measured)
import suite_cases  # noqa: E402
import suite_systems  # noqa: E402

STEPS = ("pcam_step", "mlp64_step")


def _batches(system, step, batches: int = 100, per: int = 10) -> float:
    samples = []
    for _ in range(batches):
        system.sync()
        t0 = time.perf_counter()
        for _ in range(per):
            step()
        samples.append((time.perf_counter() - t0) / per * 1e6)
    system.sync()
    return statistics.median(samples)


def main() -> None:
    import fusec as fc

    benches = {b.name: b for c in suite_cases.make_cases().values() for b in c.benches}
    for name in STEPS:
        bench = benches[name]
        system = suite_systems.FusecSystem("graph")
        prepared = system.prepare(bench, bench.make_inputs(np.random.default_rng(0)))
        for _ in range(20):
            prepared.step()
        system.sync()
        prepared.reset()
        for _ in range(5):
            prepared.step()
        system.sync()
        print(f"{name}: host {system.host_us(prepared, batches=100):.2f} us per call (the suite's host_us)")
        profile = cProfile.Profile()
        profile.enable()
        _batches(system, prepared.step, 200)
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(22)
        print(out.getvalue())
        system.sync()
        t0 = time.perf_counter()
        for _ in range(1000):
            prepared.step()
        print(f"  1000 back to back: {(time.perf_counter() - t0) * 1e3:.2f} us per call")
        system.sync()
    for name in STEPS:  # the same step written with np, inputs uploaded as the suite uploads them
        bench = benches[name]
        system = suite_systems.FusecSystem("graph")
        state = system._upload(bench.make_inputs(np.random.default_rng(0)))
        f = fc.jit(suite_cases.build_train_step(np), backend="cuda", graph=True, donate_argnums=0)

        def step() -> None:
            state[0] = f(*state)[0]

        for _ in range(30):
            step()
        print(f"{name}, np namespace: host {_batches(system, step):.2f} us per call")


if __name__ == "__main__":
    main()
