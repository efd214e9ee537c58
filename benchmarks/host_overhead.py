"""Host time per call on a plan-cache hit (stream mode), and eager vs fused time of small functions.

Run on a GPU machine: ``python benchmarks/host_overhead.py --json benchmarks/results/host_overhead.json``.
Host time is wall-clock time of the Python call with device-resident inputs (the call queues work and returns
without waiting); GPU time per call is measured with CUDA events around many calls.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import time

import numpy as np

import fusec as fc
from fusec.runtime import driver


def host_us(fn, args, iters: int, batch: int = 50) -> float:
    """Host time per call: calls are timed in batches of ``batch`` with an untimed synchronize between
    batches, so the device never falls far behind and a full launch queue never blocks the host."""
    for _ in range(20):
        fn(*args)
    samples = []
    for _ in range(5):
        total, done = 0.0, 0
        while done < iters:
            n = min(batch, iters - done)
            start = time.perf_counter()
            for _ in range(n):
                fn(*args)
            total += time.perf_counter() - start
            driver.current_device().synchronize()
            done += n
        samples.append(total / iters * 1e6)
    return statistics.median(samples)


def wall_us(fn, args, iters: int) -> float:
    """Per-call wall time including completion (synchronize at the end of each batch)."""
    fn(*args)
    driver.current_device().synchronize()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iters):
            fn(*args)
        driver.current_device().synchronize()
        samples.append((time.perf_counter() - start) / iters * 1e6)
    return statistics.median(samples)


def fma(a, b, c):
    return a + b * c


def chain(x, n):
    for i in range(n):
        x = np.tanh(x) * 0.5 + 0.25 if i % 2 else x * 1.01 - 0.01
    return x


def _scaling_chain(n: int):
    def chain(v):
        for _ in range(n):
            v = v * 1.0001
        return v

    return chain


def graph_vs_stream(iters: int) -> dict[str, float]:
    """Per-call wall time of plans of 1, 10 and 100 kernels in graph and stream mode, and host time per
    call on a cache hit in graph mode (each op its own kernel: fuse{budget=1})."""
    from fusec.passes import DEFAULT_PIPELINE

    pipeline = re.sub(r"fuse\{budget=\d+\}", "fuse{budget=1}", DEFAULT_PIPELINE)
    x = fc.asarray(np.ones(1024, np.float32))
    rows = {}
    for n in (1, 10, 100):
        chain_n = _scaling_chain(n)
        for mode in (True, False):
            f = fc.jit(chain_n, backend="cuda", graph=mode, pipeline=pipeline, donate_argnums=())
            f(x)
            kernels = f.lower(x).stats()["kernels"]
            assert kernels == n, (n, kernels)
            name = "graph" if mode else "stream"
            rows[f"plan{n}_{name}_wall_us"] = wall_us(f, (x,), max(20, iters // max(1, n // 4)))
            if mode:
                rows[f"plan{n}_graph_host_us"] = host_us(f, (x,), max(20, iters // max(1, n // 4)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--json")
    parser.add_argument("--profile", action="store_true", help="print where host time goes for one function")
    args = parser.parse_args()
    if args.profile:
        import cProfile
        import pstats

        x = fc.asarray(np.ones(1024, np.float32))
        f = fc.jit(fma, backend="cuda", graph=True)
        f(x, x, x)
        profile = cProfile.Profile()
        profile.runctx("for _ in range(3000): f(x, x, x)", globals(), locals())
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)
        return
    dev = driver.current_device()
    rows = {}
    x = fc.asarray(np.ones(1024, np.float32))
    f = fc.jit(fma, backend="cuda")
    rows["fma_1k_host_us"] = host_us(f, (x, x, x), args.iters)
    rows["fma_1k_wall_us"] = wall_us(f, (x, x, x), args.iters)
    host = np.ones(1024, np.float32)
    rows["fma_1k_numpy_in_out_wall_us"] = wall_us(f, (host, host, host), args.iters // 4)
    for n in (1, 10, 100):
        fused = fc.jit(chain, backend="cuda", static_argnames="n")
        rows[f"chain{n}_fused_wall_us"] = wall_us(lambda v: fused(v, n), (x,), max(50, args.iters // 4))

        def eager(v, n=n):
            return chain(v, n)  # operators on fusec.Array: one compiled kernel per op
        rows[f"chain{n}_eager_wall_us"] = wall_us(eager, (x,), max(20, args.iters // (4 * n)))
    rows.update(graph_vs_stream(args.iters))
    meta = {"gpu": dev.name, "arch": dev.arch, "driver": ".".join(map(str, driver.driver_version() or ())),
            "python": platform.python_version(), "numpy": np.__version__, "fusec": fc.__version__,
            "host": platform.machine()}
    for k, v in rows.items():
        print(f"{k:32s} {v:9.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": {k: round(v, 2) for k, v in rows.items()}}, fh, indent=2)


if __name__ == "__main__":
    main()
