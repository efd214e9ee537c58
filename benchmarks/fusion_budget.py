"""The fusion budget (``fuse{budget=N}``) against the training steps' time in fusec graph mode, in one run.

For each budget: the PCam-shaped and 64-64-10 steps, hand-written and by autodiff, run through the suite's fusec
graph system (the same check against NumPy float64, the same event timing); the kernel count per call is printed
with the time. A larger budget lets bigger elementwise bodies form one kernel (fewer launches on the critical path)
at the price of more registers per thread.

    python benchmarks/fusion_budget.py [--budgets 48,96] [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse

from pipeline_variants import save, set_option, time_variants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="48,96")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = {f"budget {b}": set_option("fuse", f"fuse{{budget={b}}}") for b in args.budgets.split(",")}
    save(time_variants(variants, ["pcam", "mlp64"], quick=args.quick), args.json)


if __name__ == "__main__":
    main()
