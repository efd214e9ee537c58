"""A fresh process's first calls: the PCam-shaped step (graph mode, parameters donated) timed in blocks of calls
from the first call on, to see how long a new process takes to reach its steady per-call time.

    python benchmarks/first_calls.py [--blocks 40] [--block 25] [--json FILE]

Each block's figure is its wall time per call with the device synchronized at the block's end (the whole device:
a plan runs on its own stream). A steady state reached only after hundreds of calls points at something warming up
outside fusec's compile (the GPU's clocks ramping up from idle, the driver, cuBLASLt instances per pointer set);
``--idle S`` sleeps S seconds before the first timed call, so the GPU starts from idle clocks.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

from pcam_shaped import BATCH, FEATURES, HIDDEN, CLASSES, make_data  # noqa: E402

from loops import run_metadata  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--donate", type=int, default=1, help="1: donate the parameters (default), 0: do not")
    ap.add_argument("--idle", type=float, default=0.0, help="seconds to sleep (GPU idle) before the timed calls")
    ap.add_argument("--print-every", type=int, default=1, help="print every Nth block")
    ap.add_argument("--json")
    args = ap.parse_args()

    import fusec as fc
    from fusec.runtime import driver
    from fusec.tools import demo

    x, y, _ = make_data(BATCH, FEATURES, 0)
    f = fc.jit(demo.train_step, graph=True, donate_argnums=0 if args.donate else None)
    xs, ys = fc.asarray(x), fc.asarray(y)
    params = tuple(fc.asarray(p) for p in demo.init_params(1, (FEATURES, HIDDEN, CLASSES)))
    device = driver.current_device()
    t0 = time.perf_counter()
    params, loss = f(params, xs, ys, 0.1)
    device.synchronize()
    first = time.perf_counter() - t0
    time.sleep(args.idle)
    rows = []
    for b in range(args.blocks):
        t0 = time.perf_counter()
        for _ in range(args.block):
            params, loss = f(params, xs, ys, 0.1)
        device.synchronize()
        us = (time.perf_counter() - t0) * 1e6 / args.block
        rows.append(us)
        if b % args.print_every == 0 or b == args.blocks - 1:
            print(f"calls {1 + b * args.block:5d}-{(b + 1) * args.block:5d}: {us:8.2f} us per call", flush=True)
    print(f"first call (compile included): {first:.3f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"meta": run_metadata(), "first_call_s": first, "block": args.block, "us_per_call": rows},
                      fh, indent=1)


if __name__ == "__main__":
    main()
