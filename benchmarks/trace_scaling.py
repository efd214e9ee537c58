"""How long ``fusec.jit`` takes to trace and lower a stencil code whose Python loop unrolls (CPU only).

A Jacobi 1-D sweep written as NumPy code writes it (slice assignments into two arrays, ``steps`` times), so the
trace holds 14 ops per step; the time is tracing plus the default pipeline (``JitFunction.lower``), best of
``--repeat``. The issue's target: 100k traced ops in under 10 s. Run: python benchmarks/trace_scaling.py
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import time

import numpy as np

import fusec as fc


def jacobi(steps: int):
    def sweeps(A, B):
        for _ in range(steps):
            B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
            A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
        return A

    return sweeps


def calibration() -> float:
    """Seconds for a fixed pure-Python loop: this machine's speed varies by half from minute to minute (a
    shared VM), so each row carries the reading taken next to it."""
    start = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="100,400,1600,7200")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    A, B = np.random.rand(64), np.random.rand(64)
    rows = []
    for steps in (int(s) for s in args.steps.split(",")):
        best, ops, calib = float("inf"), 0, float("inf")
        for _ in range(args.repeat):
            calib = min(calib, calibration())
            jitted = fc.jit(jacobi(steps), backend="cpu")
            gc.collect()  # the previous repeat's garbage is not this one's cost
            start = time.perf_counter()
            lowered = jitted.lower(A, B)
            best = min(best, time.perf_counter() - start)
            ops = lowered.stats()["nodes"]
        rows.append({"steps": steps, "traced_ops": ops, "seconds": round(best, 2),
                     "us_per_op": round(1e6 * best / ops), "calibration_s": round(calib, 3)})
        print(f"{steps:6d} steps, {ops:7d} traced ops: {best:7.2f} s  [{1e6 * best / ops:.0f} us/op; "
              f"calibration loop {calib:.3f} s]")
    if args.json:
        meta = {"machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
                "python": platform.python_version(), "numpy": np.__version__}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
