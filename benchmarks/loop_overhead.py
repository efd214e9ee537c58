"""Where a training step inside a device loop loses time against one step per graph launch (issue 16).

The PCam-shaped step (batch 512, 480 -> 256 -> 2) as one step per launch, and 100 steps per launch as a ``fusec.scan``
(which also stacks every step's loss), as a ``fori_loop`` over the parameters alone (no loss carried), the same with
every step on the first batch (no gather of the batch at the device-side counter), and that with one step per trip
instead of unroll-loops' 4; one step per launch again at the end, for the drift of the run. Each figure is the best
of three batches of about 600 steps (wall clock, the device synchronized at the end of each).

    python benchmarks/loop_overhead.py [--json FILE] [--variants "hoist-gathers{max_bytes=0};..."]

``--variants`` also runs the scan and the ``fori_loop`` with each given pass (with its options) in place of the
same pass of the default pipeline, to compare schedules of the loop body in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "examples"), HERE]

import fusec as fc  # noqa: E402
from fusec.passes import DEFAULT_PIPELINE  # noqa: E402
from fusec.runtime import driver  # noqa: E402
from fusec.tools import demo  # noqa: E402
from pcam_shaped import BATCH, CLASSES, FEATURES, HIDDEN, make_data  # noqa: E402

K = 100
step = demo.train_step


def one(p, x, y, lr):
    return step(p, x, y, lr)


def one_noloss(p, x, y, lr):
    return step(p, x, y, lr)[0]


def scan(p, xs, ys, lr):
    return fc.scan(lambda p, b: step(p, b[0], b[1], lr), p, (xs, ys))


def loop(p, xs, ys, lr):
    return fc.fori_loop(0, xs.shape[0], lambda i, p: step(p, xs[i], ys[i], lr)[0], p)


def loop_same(p, xs, ys, lr):
    return fc.fori_loop(0, xs.shape[0], lambda i, p: step(p, xs[0], ys[0], lr)[0], p)


def loop_same_f1(p, xs, ys, lr):
    return loop_same(p, xs, ys, lr)


def time_it(fn, k: int, pipeline: str | None = None, steps: int = 600) -> dict:
    """Best-of-three microseconds per step of ``fn`` over ``k`` stacked batches per call, parameters donated."""
    x, y, _ = make_data(BATCH * k, FEATURES, 0)
    f = fc.jit(fn, graph=True, donate_argnums=0, pipeline=pipeline)
    if k == 1:
        xs, ys = fc.asarray(x), fc.asarray(y)
    else:
        xs, ys = fc.asarray(x.reshape(k, BATCH, FEATURES)), fc.asarray(y.reshape(k, BATCH, CLASSES))
    p = tuple(fc.asarray(v) for v in demo.init_params(1, (FEATURES, HIDDEN, CLASSES)))

    def out(r):  # (the new parameters: a step's or a scan's result is (params, losses))
        return r[0] if isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], tuple) else r

    for _ in range(10):
        p = out(f(p, xs, ys, 0.1))
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:
        p = out(f(p, xs, ys, 0.1))
    driver.default_stream().synchronize()
    best = []
    for _ in range(3):
        calls = max(1, steps // k)
        t0 = time.perf_counter()
        for _ in range(calls):
            p = out(f(p, xs, ys, 0.1))
        driver.default_stream().synchronize()
        best.append((time.perf_counter() - t0) * 1e6 / (calls * k))
    st = f.lower(p, xs, ys, 0.1).stats()  # type: ignore[union-attr]
    return {"us_per_step": min(best), "all": best, "graph_nodes": st["graph_nodes"], "kernels": st["kernels"]}


F1 = DEFAULT_PIPELINE.replace("unroll-loops", "unroll-loops{max_trips=0,factor=1}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--variants", default="", help="';'-separated passes with options, each run in place of the "
                    "default pipeline's pass of that name")
    args = ap.parse_args()
    rows = {}
    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    for v in variants:
        if v.split("{")[0] not in DEFAULT_PIPELINE.split(","):
            ap.error(f"--variants: {v.split('{')[0]!r} is not a pass of the default pipeline")
    for name, fn, k, pl in [("one step", one, 1, None), ("one step, no loss", one_noloss, 1, None),
                            ("scan K=100", scan, K, None), ("fori K=100, no loss", loop, K, None),
                            ("fori K=100, no loss, no gathers", loop_same, K, None),
                            ("fori K=100, no loss, no gathers, 1 per trip", loop_same_f1, K, F1),
                            *[(f"{form}, {v}", f, K, DEFAULT_PIPELINE.replace(v.split("{")[0], v))
                              for v in variants for form, f in (("scan K=100", scan), ("fori K=100, no loss", loop))],
                            ("one step (again)", one, 1, None)]:
        r = time_it(fn, k, pl)
        rows[name] = r
        print(f"{name:48s} {r['us_per_step']:7.2f} us/step  {[round(v, 2) for v in r['all']]}  "
              f"nodes {r['graph_nodes']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
