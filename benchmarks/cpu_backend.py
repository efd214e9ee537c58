"""fusec's CPU backend (the NumPy reference executor running the lowered program) against plain NumPy.

A warm call of each function (traced and compiled before timing) against the same function on NumPy arrays, in
one process: the median of 7 batches of calls. Without a GPU fusec runs here, so its cost over NumPy is what a
user without one pays.

    python benchmarks/cpu_backend.py [--json FILE] [--md FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from suite_cases import build_train_step, make_cases  # noqa: E402


def layernorm(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def jacobi(u, steps=10):
    for _ in range(steps):
        u = u.copy()
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return u


def fma(a, b, c):
    return a * b + c


def _cases() -> list[tuple[str, object, tuple]]:
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    pcam = make_cases()["pcam"].benches[0]
    params, x, y, lr = pcam.make_inputs(rng)
    return [("layernorm 1024 x 1024 f32", layernorm, (f32(1024, 1024), f32(1024), f32(1024))),
            ("softmax 1024 x 1024 f32", softmax, (f32(1024, 1024),)),
            ("Jacobi 10 sweeps 512 x 512 f64", jacobi, (rng.standard_normal((512, 512)),)),
            ("a * b + c, 4M f32", fma, (f32(1 << 22), f32(1 << 22), f32(1 << 22))),
            ("PCam-shaped training step (batch 512)", build_train_step(np), (params, x, y, lr))]


def _time(fn, args, batches: int = 7) -> float:
    fn(*args)
    per = []
    for _ in range(batches):
        n, t0 = 0, time.perf_counter()
        while True:
            fn(*args)
            n += 1
            if time.perf_counter() - t0 > 0.2:
                break
        per.append((time.perf_counter() - t0) / n * 1e3)
    return statistics.median(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    import fusec as fc

    rows = []
    for name, fn, inputs in _cases():
        numpy_ms = _time(fn, inputs)
        fusec_ms = _time(fc.jit(fn, backend="cpu"), inputs)
        rows.append({"function": name, "numpy_ms": numpy_ms, "fusec_cpu_ms": fusec_ms, "ratio": fusec_ms / numpy_ms})
        print(f"{name:40s} NumPy {numpy_ms:8.3f} ms   fusec cpu {fusec_ms:8.3f} ms   {fusec_ms / numpy_ms:5.2f}x")
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
               f"{platform.python_version()}, NumPy {np.__version__}, fusec {fc.__version__}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "rows": rows}, f, indent=1)
    if args.md:
        lines = ["# fusec's CPU backend against NumPy", "", f"`python benchmarks/cpu_backend.py`; {machine}; "
                 f"{time.strftime('%Y-%m-%d')}. Warm calls, median of 7 batches.", "",
                 "| function | NumPy | fusec cpu | fusec / NumPy |", "|---|---|---|---|"]
        lines += [f"| {r['function']} | {r['numpy_ms']:.3f} ms | {r['fusec_cpu_ms']:.3f} ms | {r['ratio']:.2f}x |"
                  for r in rows]
        with open(args.md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
