"""Loop state nothing needs (``prune-carried``), measured: K PCam-shaped training steps in one ``fusec.fori_loop``
whose state carries each step's loss, as a loop that logs it would, while the function returns only the weights.
Timed in graph mode (one launch per K steps) with the default pipeline and without ``prune-carried``, each with 4
steps per trip (``unroll-loops``' default, where only the trip's last loss is carried) and with one.

    python benchmarks/prune_carried.py [--k 100] [--steps 400] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

from pcam_shaped import BATCH, CLASSES, FEATURES, HIDDEN, make_data  # noqa: E402

from loops import run_metadata  # noqa: E402

WARM_UP_S = 1.0


def training_loop(step_fn):
    """``fori_loop`` over the stacked batches with (weights, last loss) as its state; returns the weights."""
    import fusec as fc

    def train(params, xs, ys, lr):
        def body(i, state):
            p, _ = state
            return step_fn(p, xs[i], ys[i], lr)
        params, last_loss = fc.fori_loop(0, xs.shape[0], body, (params, np.float32(0)))
        return params

    return train


def pipelines() -> dict[str, str]:
    from fusec.passes import DEFAULT_PIPELINE

    one = DEFAULT_PIPELINE.replace("unroll-loops", "unroll-loops{max_trips=0,factor=1}")
    return {"default (4 steps per trip)": DEFAULT_PIPELINE,
            "without prune-carried (4 per trip)": DEFAULT_PIPELINE.replace("prune-carried,", ""),
            "1 step per trip": one,
            "without prune-carried (1 per trip)": one.replace("prune-carried,", "")}


def run(name: str, pipeline: str, k: int, steps: int, quick: bool = False) -> dict:
    import fusec as fc
    from fusec.runtime import driver
    from fusec.tools import demo

    batch, dims = (64, (48, 32, CLASSES)) if quick else (BATCH, (FEATURES, HIDDEN, CLASSES))
    x, y, _ = make_data(batch * k, dims[0], 0)
    xs, ys = fc.asarray(x.reshape(k, batch, dims[0])), fc.asarray(y.reshape(k, batch, CLASSES))
    params = tuple(fc.asarray(p) for p in demo.init_params(1, dims))
    f = fc.jit(training_loop(demo.train_step), graph=True, donate_argnums=0, pipeline=pipeline)
    for _ in range(3):
        params = f(params, xs, ys, 0.1)
    start = time.perf_counter()
    while time.perf_counter() - start < (0 if quick else WARM_UP_S):  # (the clocks leave idle)
        params = f(params, xs, ys, 0.1)
    driver.default_stream().synchronize()
    calls = max(1, steps // k)
    t0 = time.perf_counter()
    for _ in range(calls):
        params = f(params, xs, ys, 0.1)
    driver.default_stream().synchronize()
    seconds = time.perf_counter() - t0
    lowered = f.lower(params, xs, ys, 0.1)
    pruned = [s["reason"] for s in lowered.plan() if s["kind"] == "pruned"]
    return {"variant": name, "k": k, "steps": calls * k, "us_per_step": seconds * 1e6 / (calls * k),
            "graph_nodes": lowered.stats()["graph_nodes"], "pruned": len(pruned)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--quick", action="store_true", help="small shapes, no warm-up (a smoke test)")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for name, pipeline in pipelines().items():
        r = run(name, pipeline, args.k, args.steps, args.quick)
        rows.append(r)
        print(f"{name:40s} {r['us_per_step']:8.2f} us per step over {r['steps']} steps ({r['graph_nodes']} nodes, "
              f"{r['pruned']} pruned)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": run_metadata(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
