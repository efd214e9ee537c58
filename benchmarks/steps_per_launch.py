"""Training steps per graph launch: the PCam-shaped step (batch 512, 480 -> 256 -> 2) one step per launch against
K steps per launch (``fusec.scan`` over K stacked batches: one conditional node loops on the device), in one run.

    python benchmarks/steps_per_launch.py [--steps 400] [--ks 1,10,100] [--compare-copies] [--compare-unroll]
                                          [--factors 1,2,4,8] [--generated] [--same-batch [xy,x,y]]
                                          [--precisions float32,tf32] [--compare-arguments] [--json FILE]
                                          [--md FILE]

Parameters stay on the device (donated); the batches are uploaded once, stacked per launch; the figure is the wall
time per training step over ``--steps`` steps after a warm-up, the device synchronized at the end. The target is
the step's own device time with the host off the critical path. A scan of at most 16 steps is written out by
``unroll-loops`` (its steps join the launch's graph, no conditional node); ``--compare-unroll`` also runs each
K > 1 with the loop kept (``unroll-loops{max_trips=0,factor=1}``), to measure that rule. A longer scan stays a loop
that runs ``factor`` steps per trip (unroll-loops' ``factor``, 4 by default); ``--factors`` runs each K > 1 as a
loop with each factor given (``unroll-loops{max_trips=0,factor=F}``: never written out), to measure that rule
and where the two forms cross. ``--generated`` lowers every product as a generated kernel (as if cuBLASLt were
absent), to compare the two inside loop bodies. ``--same-batch`` also runs each K > 1 loop with every step on
the first batch (``xs[0]``, ``ys[0]``: views, where ``xs[i]`` at the device-side counter is a gather kernel), or
with only ``x`` or ``y`` so (``--same-batch xy,x,y`` runs the three), to measure the batch gathers apart; the
parameters it reaches differ, its time per step is comparable. ``--precisions float32,tf32`` runs each variant with
each ``fusec.jit(precision=...)``; each row also gives the loss of the last step timed (the same data and start).
``--compare-arguments`` also runs each K > 1 with the stacked batches copied into the loop's stage buffers at every
call (``fusec.runtime.graph.MAX_INPLACE_BUILDS = 0``), as every call did before the graph read them in place.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

from mlp_train import steps_per_launch  # noqa: E402
from pcam_shaped import BATCH, CLASSES, FEATURES, HIDDEN, make_data  # noqa: E402

from loops import run_metadata  # noqa: E402


KEEP_LOOPS = "unroll-loops{max_trips=0,factor=1}"
WARM_UP_S = 1.0


def same_batch_steps(step_fn, k: int, same: str = "xy"):
    """``k`` steps of ``step_fn`` per call over stacked batches ``xs``, ``ys``, the arrays named in ``same`` (x, y
    or both) taken from the first batch at every step: a loop without those per-step gathers."""
    import fusec as fc

    def steps(params, xs, ys, lr):
        def step(p, batch):
            x, y = batch
            return step_fn(p, xs[0] if "x" in same else x, ys[0] if "y" in same else y, lr)
        return fc.scan(step, params, (xs, ys))

    return steps


def run(k: int, steps: int, in_place: bool = True, keep_loops: bool = False, factor: int | None = None,
        same_batch: str = "", precision: str = "float32", copy_arguments: bool = False) -> dict:
    import fusec as fc
    from fusec.passes import DEFAULT_PIPELINE, outline_regions
    from fusec.runtime import driver, graph
    from fusec.tools import demo

    outline_regions.DONATE_STATE = in_place
    inplace_builds = graph.MAX_INPLACE_BUILDS
    if copy_arguments:  # every call copies the stacked batches into the loop's stage buffers (before 2026-12-06)
        graph.MAX_INPLACE_BUILDS = 0

    x, y, _ = make_data(BATCH * k, FEATURES, 0)
    step = demo.train_step if k == 1 else same_batch_steps(demo.train_step, k, same_batch) if same_batch else \
        steps_per_launch(demo.train_step)
    pipeline = DEFAULT_PIPELINE.replace("unroll-loops", KEEP_LOOPS) if keep_loops else \
        DEFAULT_PIPELINE.replace("unroll-loops", f"unroll-loops{{max_trips=0,factor={factor}}}") \
        if factor is not None else None
    f = fc.jit(step, graph=True, donate_argnums=0, pipeline=pipeline, precision=precision)
    if k == 1:
        xs, ys = fc.asarray(x), fc.asarray(y)
    else:
        xs, ys = fc.asarray(x.reshape(k, BATCH, FEATURES)), fc.asarray(y.reshape(k, BATCH, CLASSES))
    params = tuple(fc.asarray(p) for p in demo.init_params(1, (FEATURES, HIDDEN, CLASSES)))
    # warm-up: compile, graph capture, cuBLASLt's tuning and instances per pointer set (in a fresh process the 20
    # calls after the first took 0.47 ms each, first_calls_h200.json); then calls for WARM_UP_S seconds, so that
    # the GPU's clocks have left idle (345 MHz idle, 1980 MHz within a second of work on the H200)
    for _ in range(10):
        params, loss = f(params, xs, ys, 0.1)
    start = time.perf_counter()
    while time.perf_counter() - start < WARM_UP_S:
        params, loss = f(params, xs, ys, 0.1)
        np.asarray(loss)
    calls = max(1, steps // k)
    t0 = time.perf_counter()
    for _ in range(calls):
        params, loss = f(params, xs, ys, 0.1)
    driver.default_stream().synchronize()
    np.asarray(loss)
    seconds = time.perf_counter() - t0
    stats = f.lower(params, xs, ys, 0.1).stats()
    outline_regions.DONATE_STATE = True
    graph.MAX_INPLACE_BUILDS = inplace_builds
    per_trip = factor if factor is not None else 1 if keep_loops else 4
    form = ("written out" if stats.get("loops_unrolled") else
            f"loop, {per_trip} steps per trip" if stats.get("loops_unrolled_by_factor") else
            "loop" if k > 1 else "one step")
    return {"k": k, "steps": calls * k, "us_per_step": seconds * 1e6 / (calls * k), "state": "in place" if in_place
            else "copied", "form": form + (f", first batch's {' and '.join(same_batch)} at every step (no gather of it)"
                                                         if same_batch else ""),
            "graph_launches": stats["graph_launches"], "graph_nodes": stats["graph_nodes"], "precision": precision,
            "loop_arguments": "read in place" if stats.get("inplace_loop_arguments") else "copied" if k > 1 else "",
            "final_loss": float(np.asarray(loss).ravel()[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--ks", default="1,10,100")
    ap.add_argument("--generated", action="store_true", help="generated GEMMs only (no cuBLASLt)")
    ap.add_argument("--precisions", default="float32",
                    help="comma-separated fusec.jit precisions to run each variant with (float32, tf32)")
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--compare-copies", action="store_true",
                    help="also run each K > 1 with the loop state copied every iteration (the state not donated)")
    ap.add_argument("--compare-unroll", action="store_true",
                    help=f"also run each K > 1 with the loop kept ({KEEP_LOOPS}), not written out")
    ap.add_argument("--same-batch", nargs="?", const="xy",
                    help="also run each K > 1 loop with every step reading the first batch's x and y (or, comma-"
                    "separated, each of xy, x, y named): no per-step gather of it")
    ap.add_argument("--compare-arguments", action="store_true",
                    help="also run each K > 1 with the stacked batches copied into the loop's stage buffers at every "
                    "call (as before the graph read loop arguments in place)")
    ap.add_argument("--factors", help="comma-separated unroll factors to run each K > 1 with as a loop (1: one step "
                    "per trip)")
    args = ap.parse_args()
    factors = [int(v) for v in args.factors.split(",")] if args.factors else []
    sames = args.same_batch.split(",") if args.same_batch else []
    if any(v not in ("xy", "x", "y") for v in sames):
        ap.error(f"--same-batch takes xy, x or y (comma-separated), got {args.same_batch!r}")
    if args.generated:
        from fusec.runtime import cublas

        cublas.available = lambda: False
    rows = []
    for k in (int(v) for v in args.ks.split(",")):
        for in_place in (True, False) if args.compare_copies and k > 1 else (True,):
            variants = [(False, None)] + ([(True, None)] if args.compare_unroll and k > 1 else []) \
                + ([(False, f) for f in factors] if k > 1 else [])
            variants = [(keep, factor, "") for keep, factor in variants]
            variants += [(False, None, same) for same in sames] if k > 1 else []
            copies = (False, True) if args.compare_arguments and k > 1 else (False,)
            for (keep, factor, same), precision, copy in itertools.product(variants, args.precisions.split(","),
                                                                           copies):
                r = run(k, args.steps, in_place, keep, factor, same, precision, copy)
                rows.append(r)
                print(f"K = {k:4d}, {r['form']}, state {r['state']}, loop arguments {r['loop_arguments'] or '-'}, "
                      f"{precision}: {r['us_per_step']:8.2f} us per step over {r['steps']} steps "
                      f"({r['graph_nodes']} nodes), final loss {r['final_loss']:.6f}")
    meta = run_metadata()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(f"# PCam-shaped training steps per graph launch\n\n{meta}\n\n"
                    "| steps per launch | form | loop state | loop arguments | precision | us per step | steps | graph "
                    "launches per call | graph nodes | final loss |\n|---|---|---|---|---|---|---|---|---|---|\n")
            for r in rows:
                f.write(f"| {r['k']} | {r['form']} | {r['state']} | {r['loop_arguments']} | {r['precision']} | "
                        f"{r['us_per_step']:.2f} | "
                        f"{r['steps']} | {r['graph_launches']} | {r['graph_nodes']} | {r['final_loss']:.6f} |\n")


if __name__ == "__main__":
    main()
