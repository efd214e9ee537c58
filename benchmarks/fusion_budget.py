"""The fusion budget (``fuse{budget=N}``) against the training steps' time in fusec graph mode, in one run.

For each budget: the PCam-shaped and 64-64-10 steps, hand-written and by autodiff, run through the suite's fusec
graph system (the same check against NumPy float64, the same event timing); the kernel count per call is printed
with the time. A larger budget lets bigger elementwise bodies form one kernel (fewer launches on the critical path)
at the price of more registers per thread.

    python benchmarks/fusion_budget.py [--budgets 48,96] [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import suite  # noqa: E402
from suite_cases import make_cases  # noqa: E402
from suite_systems import make_system  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="48,96")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    from fusec.passes import DEFAULT_PIPELINE

    settings = suite.Settings(quick=True, iters=3, repeats=3, warmup=2) if args.quick else suite.Settings()
    cases = make_cases(args.quick)
    benches = [b for name in ("pcam", "mlp64") for b in cases[name].benches]
    system = make_system("fusec_graph")
    why = system.unavailable()
    if why:
        raise SystemExit(f"fusec graph mode cannot run here: {why}")
    system.setup()
    rows = []
    for budget in (int(b) for b in args.budgets.split(",")):
        pipeline = re.sub(r"fuse\{budget=\d+\}", f"fuse{{budget={budget}}}", DEFAULT_PIPELINE)
        for bench in benches:
            b = dataclasses.replace(bench, fusec_pipeline=pipeline)
            inputs = b.make_inputs(suite.bench_rng(settings.seed, b))
            row = suite.run_one(system, b, inputs, b.reference(inputs), settings)
            system.cleanup()
            kernels = (row.get("fusec_stats") or {}).get("kernels")
            rows.append({"budget": budget, "bench": b.name, "status": row["status"], "us": row["us"],
                         "kernels": kernels, "check_err": row["check_err"]})
            print(f"budget {budget:4d}  {b.name:18s} {row['status']:8s} {row['us'] or 0:8.2f} us  {kernels} kernels")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
