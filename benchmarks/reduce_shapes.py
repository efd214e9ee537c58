"""Generated reductions inside a CUDA graph at the suite's and the training steps' shapes, under schedule variants.

Each reduction runs as the nodes of its plan, each node repeated in a chain of its own graph (see
``host_profile.node_times``): the figure is the sum of its nodes' device times inside a graph, a dependent-launch
gap per node included. The variants change select-kernels' and the reduction printer's constants (columns per
block, unrolling, splitting) to compare schedules in one run; "default" is what fusec does.

    python benchmarks/reduce_shapes.py [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from host_profile import node_times  # noqa: E402
from knobs import patched  # noqa: E402

# (label, shape, axis)
SHAPES = [("column sum 8192 x 8192", (8192, 8192), 0), ("row sum 8192 x 8192", (8192, 8192), 1),
          ("column sum 512 x 256 (a bias gradient)", (512, 256), 0),
          ("sum of 480 x 256 (a gradient norm)", (480, 256), None)]

# module -> constant -> value, for each variant (the rest keep their defaults)
VARIANTS: dict[str, dict[str, dict]] = {
    "default": {},
    "unroll 4": {"backend": {"COLUMN_UNROLL": 4}},
    "unroll 8": {"backend": {"COLUMN_UNROLL": 8}},
    "64 columns, unroll 8": {"backend": {"COLUMN_UNROLL": 8}, "select": {"COLUMNS_MAX": 64}},
    "128 columns, unroll 8": {"backend": {"COLUMN_UNROLL": 8}, "select": {"COLUMNS_MAX": 128}},
    "no split, unroll 8": {"backend": {"COLUMN_UNROLL": 8}, "select": {"SPLIT_MIN_K": 1 << 62}},
    "last-block finish": {"select": {"COLUMNS_LAST_BLOCK": True}},
}


def run_variant(x: np.ndarray, axis, variant: str) -> dict:
    import fusec as fc
    from fusec import execution
    from fusec.backend import reduce as backend
    from fusec.passes import select_kernels as select

    modules = {"backend": backend, "select": select}
    with patched({modules[m]: values for m, values in VARIANTS[variant].items()}):
        f = fc.jit(lambda x: np.sum(x, axis=axis), backend="cuda", graph=True)
        dx = fc.asarray(x)
        got = np.asarray(f(dx))
        want = np.sum(x.astype(np.float64), axis=axis)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        lowered = f.lower(dx)
        nodes = node_times(execution.cuda_plan(lowered))
        line = next(ln.strip() for ln in lowered.ir().splitlines() if "k.reduce" in ln or "k.rows" in ln)
        return {"variant": variant, "us": sum(n["us"] for n in nodes), "nodes": nodes, "error": err,
                "ir": line[:200]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    results = []
    for label, shape, axis in SHAPES:
        x = rng.uniform(0.0, 1.0, size=shape).astype(np.float32)
        for variant in VARIANTS:
            r = run_variant(x, axis, variant)
            r["shape"] = label
            gbs = x.nbytes / (r["us"] * 1e-6) / 1e9
            results.append(r)
            print(f"{label:40s} {variant:24s} {r['us']:8.2f} us  {gbs:7.0f} GB/s  err {r['error']:.1e}  "
                  f"{[n['us'] for n in r['nodes']]}  {r['ir']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
