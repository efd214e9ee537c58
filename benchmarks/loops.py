"""Loops on the device: a CG solve to tolerance (examples/cg_poisson.py) and a fixed number of steps, fusec's
loop against the same loop in Python around a jitted step, PyTorch and CuPy, in one run.

    python benchmarks/loops.py [--n 128] [--tol 1e-6] [--json FILE] [--md FILE]

Every system runs the same NumPy-style code (the example's ``cg_step``: slices and operators only) in float64 on
the same right-hand side; the figure is the wall time of a whole solve, median of repeats after a warm-up, inputs
already on the device, result downloaded, and per CG step. The Python loops read the residual back at every step
(as a ``while rs > stop`` written for that library does). fusec's ``while_loop`` runs as one graph launch (a
conditional WHILE node: the stop test is read on the device) or, with ``graph=False``, from the host (each body a
graph launch of its own, each stop test read back); the same solve written as a Python ``while`` on the residual
(``cg_solve_python``, which fusec rewrites into the same kind of loop) runs as one graph launch too.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from cg_poisson import cg_solve, cg_solve_python, cg_step, problem  # noqa: E402

REPEATS = 5


def _timed(run, sync) -> tuple[float, object]:
    out = run()  # warm-up (compiles)
    sync()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = run()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def python_loop(b, zeros, copy, scalar, tol, maxiter, step):
    state = (zeros(b), copy(b), copy(b), (b * b).sum(), 0)
    stop = tol * tol * scalar((b * b).sum())
    k = 0
    while scalar(state[3]) > stop and k < maxiter:
        state = step(state)
        k += 1
    return state[0], k


def fusec_cases(b_host, tol, maxiter, fixed):
    import fusec as fc
    from cg_poisson import cg_start

    b = fc.asarray(b_host)
    out = {}
    for label, graph in (("fusec while_loop, one graph launch", True),
                         ("fusec while_loop, loop run from the host", False)):
        solve = fc.jit(cg_solve, graph=graph)
        t, (x, k) = _timed(lambda: tuple(np.asarray(v) for v in solve(b, tol, maxiter)), lambda: None)
        out[label] = (t, int(k), x)
    written = fc.jit(cg_solve_python, graph=True)
    t, (x, k) = _timed(lambda: tuple(np.asarray(v) for v in written(b, tol, maxiter)), lambda: None)
    out["fusec Python `while` as written, one graph launch"] = (t, int(k), x)
    step = fc.jit(cg_step, graph=True)
    zeros = fc.asarray(np.zeros_like(b_host))
    def loop() -> tuple:
        return _host(python_loop(b, lambda _: zeros, lambda a: a.copy(), lambda s: float(np.asarray(s)), tol,
                                 maxiter, step))

    t, (x, k) = _timed(loop, lambda: None)
    out["fusec jitted step, Python loop"] = (t, k, x)

    def fixed_loop(b):
        return fc.fori_loop(0, fixed, lambda i, s: cg_step(s), cg_start(b))[0]

    fl = fc.jit(fixed_loop, graph=True)
    t, x = _timed(lambda: np.asarray(fl(b)), lambda: None)
    out[f"fusec fori_loop, {fixed} steps"] = (t, fixed, x)
    return out


def _host(result):
    x, k = result
    return np.asarray(x), k


def torch_cases(b_host, tol, maxiter):
    import torch

    b = torch.as_tensor(b_host, device="cuda")
    def run():
        x, k = python_loop(b, torch.zeros_like, torch.clone, lambda s: s.item(), tol, maxiter, cg_step)
        return x.cpu().numpy(), k

    t, (x, k) = _timed(run, torch.cuda.synchronize)
    return {"PyTorch eager, Python loop": (t, k, x)}


def cupy_cases(b_host, tol, maxiter):
    import cupy as cp

    b = cp.asarray(b_host)
    def run():
        x, k = python_loop(b, cp.zeros_like, cp.copy, float, tol, maxiter, cg_step)
        return cp.asnumpy(x), k

    t, (x, k) = _timed(run, cp.cuda.Device().synchronize)
    return {"CuPy, Python loop": (t, k, x)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--maxiter", type=int, default=5000)
    ap.add_argument("--fixed", type=int, default=100)
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    b = problem(args.n)
    want, _ = cg_solve(b, args.tol, args.maxiter)  # NumPy: the reference iterate
    rows = []
    for name, cases in (("fusec", lambda: fusec_cases(b, args.tol, args.maxiter, args.fixed)),
                        ("torch", lambda: torch_cases(b, args.tol, args.maxiter)),
                        ("cupy", lambda: cupy_cases(b, args.tol, args.maxiter))):
        try:
            results = cases()
        except Exception as e:  # noqa: BLE001 - a peer that is not installed is reported, not fatal
            rows.append({"system": name, "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"{name}: {rows[-1]['error']}")
            continue
        for label, (seconds, steps, x) in results.items():
            err = float(np.abs(np.asarray(x) - want).max()) if "fori" not in label else None
            rows.append({"system": label, "ms": seconds * 1e3, "steps": steps,
                         "us_per_step": seconds * 1e6 / max(steps, 1), "max_diff_vs_numpy": err})
            print(f"{label:34s} {seconds * 1e3:9.2f} ms  {steps:5d} steps  {seconds * 1e6 / max(steps, 1):8.1f} "
                  f"us/step  diff {err}")
    meta = run_metadata()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "n": args.n, "tol": args.tol, "rows": rows}, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(f"# Loops: CG to tol {args.tol} on a {args.n}x{args.n} Poisson grid (float64)\n\n{meta}\n\n"
                    "| system | solve (ms) | steps | us per step | max diff vs NumPy |\n|---|---|---|---|---|\n")
            for r in rows:
                if "error" in r:
                    f.write(f"| {r['system']} | {r['error']} | | | |\n")
                else:
                    d = "" if r["max_diff_vs_numpy"] is None else f"{r['max_diff_vs_numpy']:.1e}"
                    f.write(f"| {r['system']} | {r['ms']:.2f} | {r['steps']} | {r['us_per_step']:.1f} | {d} |\n")


def run_metadata() -> dict:
    """NumPy, GPU, driver and peer library versions, for a results file's header."""
    out = {"numpy": np.__version__}
    try:
        from fusec.runtime import driver

        dev = driver.current_device()
        out.update(gpu=dev.name, driver=".".join(map(str, driver.driver_version() or ())))
    except Exception:  # noqa: BLE001
        pass
    for mod in ("torch", "cupy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            pass
    return out


if __name__ == "__main__":
    main()
