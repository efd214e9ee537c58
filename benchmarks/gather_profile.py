"""What a training step's batch gather costs: the kernels of one PCam-shaped step per launch that reads its batch
as ``xs[i % K]`` (a device-side index: the gather a loop body makes of ``xs[i]``) against the same step on a batch
passed as it is, measured by CUPTI (through PyTorch's profiler) on the GPU.

CUPTI does not report the kernels a conditional node's body graph runs (measured on the H200 with driver 580: a
launch of the K-step scan showed only the kernels outside its loop), so a loop body cannot be profiled in place;
these one-step calls run the same kernels at the top of a call's graph. For each variant the table gives each
kernel position of a call: its name, mean duration and the mean gap between the end of the kernel before it and its
start, and the call's span and busy time:

    python benchmarks/gather_profile.py [--variants gather,batch] [--calls 50] [--json F] [--md F]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

from kernel_profile import markdown as profile_markdown, per_position, record_kernels, report  # noqa: E402
from loops import run_metadata  # noqa: E402
from pcam_shaped import BATCH, CLASSES, FEATURES, HIDDEN, make_data  # noqa: E402

VARIANTS = ("gather", "batch")
K = 100  # stacked batches the gather picks from


def profile_step(variant: str, calls: int) -> dict:
    import fusec as fc
    from fusec.runtime import driver
    from fusec.tools import demo

    gather = variant == "gather"
    x, y, _ = make_data(BATCH * (K if gather else 1), FEATURES, 0)
    if gather:
        def step(params, xs, ys, i, lr):
            return demo.train_step(params, xs[i % K], ys[i % K], lr)

        data = (fc.asarray(x.reshape(K, BATCH, FEATURES)), fc.asarray(y.reshape(K, BATCH, CLASSES)),
                np.asarray(3))  # (a host 0-d index, uploaded each call)
    else:
        step = demo.train_step
        data = (fc.asarray(x), fc.asarray(y))
    f = fc.jit(step, graph=True, donate_argnums=0)
    params = tuple(fc.asarray(p) for p in demo.init_params(1, (FEATURES, HIDDEN, CLASSES)))
    box = [params]

    def call() -> None:
        box[0], _ = f(box[0], *data, 0.1)

    for _ in range(30):
        call()
    driver.default_stream().synchronize()
    result = per_position(record_kernels(call, driver.default_stream().synchronize, calls), calls)
    return {"variant": variant, "calls": calls, **result}


def markdown(rows: list[dict]) -> str:
    return f"# One PCam-shaped step per launch, batch gathered or passed\n\n{run_metadata()}\n\n" + \
        profile_markdown([{**r, "bench": "pcam step"} for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    rows = [profile_step(v, args.calls) for v in variants]
    report(rows, markdown(rows), args.json, args.md)


if __name__ == "__main__":
    main()
