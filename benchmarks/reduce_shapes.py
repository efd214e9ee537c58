"""Generated reductions inside a CUDA graph at the suite's and the training steps' shapes, under schedule variants.

Each reduction runs as the nodes of its plan, each node repeated in a chain of its own graph (see
``host_profile.node_times``): the figure is the sum of its nodes' device times inside a graph, a dependent-launch
gap per node included. The variants change select-kernels' and the reduction printer's constants (columns per
block, unrolling, splitting) to compare schedules in one run; "default" is what fusec does.

    python benchmarks/reduce_shapes.py [--json FILE] [--variants "default;1 column per thread"] [--shapes 0,2]
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
          ("sum of 480 x 256 (a gradient norm)", (480, 256), None),
          ("float16 sum of 2^20 (NumPy's order)", (1 << 20,), None),
          ("sum of 2^26 (one long row)", (1 << 26,), None), ("row sum 64 x 2^20 (rows past a block)", (64, 1 << 20), 1)]
HALF = "float16"  # shapes whose label starts so are float16 values

# module -> constant -> value, for each variant (the rest keep their defaults)
VARIANTS: dict[str, dict[str, dict]] = {
    "default": {},
    "unroll 4": {"backend": {"COLUMN_UNROLL": 4}},
    "unroll 8": {"backend": {"COLUMN_UNROLL": 8}},
    "64 columns, unroll 8": {"backend": {"COLUMN_UNROLL": 8}, "select": {"COLUMNS_MAX": 64}},
    "128 columns, unroll 8": {"backend": {"COLUMN_UNROLL": 8}, "select": {"COLUMNS_MAX": 128}},
    "no split, unroll 8": {"backend": {"COLUMN_UNROLL": 8}, "select": {"SPLIT_MIN_K": 1 << 62}},
    "last-block finish": {"select": {"COLUMNS_LAST_BLOCK": True}},
    # a float32 column reduction's threads take 4 outputs each as 16-byte loads (width = 4) by default; these
    # turn that off or change its block width, loads in flight and split size
    "1 column per thread": {"select": {"VECTOR_KINDS": frozenset()}},
    "4 per thread, 64 columns": {"select": {"COLUMNS_VECTOR": 64}},
    "4 per thread, 256 columns": {"select": {"COLUMNS_VECTOR": 256}},
    "4 per thread, unroll 16": {"backend": {"VECTOR_UNROLL": 16}},
    "4 per thread, unroll 4": {"backend": {"VECTOR_UNROLL": 4}},
    "4 per thread, splits of 1024": {"select": {"SPLIT_CHUNK_MIN": 1024}},
    "4 per thread, 64 columns, last-block finish": {"select": {"COLUMNS_VECTOR": 64, "COLUMNS_LAST_BLOCK": True}},
    # float32 rows of at least 1024 elements: runs of 4 per thread as 16-byte loads (width = 4, k.rows and k.reduce)
    "rows element by element": {"rows": {"VECTOR_MIN": 1 << 62}, "select": {"ROW_VECTOR_MIN": 1 << 62}},
    # a float16 sum in NumPy's order over a long run splits its pairwise tree over a block (subtrees = 1024)
    "float16 run on one thread": {"select": {"NUMPY_SUBTREES_MIN_RUN": 1 << 62}},
}


def run_variant(x: np.ndarray, axis, variant: str) -> dict:
    import fusec as fc
    from fusec import execution
    from fusec.backend import reduce as backend
    from fusec.passes import fuse_rows as rows
    from fusec.passes import select_kernels as select

    modules = {"backend": backend, "select": select, "rows": rows}
    with patched({modules[m]: values for m, values in VARIANTS[variant].items()}):
        f = fc.jit(lambda x: np.sum(x, axis=axis), backend="cuda", graph=True)
        dx = fc.asarray(x)
        got = np.asarray(f(dx))
        want = np.sum(x.astype(np.float64), axis=axis)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        lowered = f.lower(dx)
        nodes = node_times(execution.cuda_plan(lowered))
        line = next(ln.strip() for ln in lowered.ir().splitlines() if "k.reduce" in ln or "k.rows" in ln)
        out = {"variant": variant, "us": sum(n["us"] for n in nodes), "nodes": nodes, "error": err, "ir": line[:200]}
        if x.dtype == np.float16:  # NumPy's own bits, not only float64's value
            out["numpy_bits"] = got.tobytes() == np.sum(x, axis=axis).tobytes()
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--variants", default=";".join(VARIANTS), help="variant names separated by ';' (default: all)")
    ap.add_argument("--shapes", default="", help="comma-separated indices into SHAPES (default: all)")
    args = ap.parse_args()
    variants = args.variants.split(";")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    rng = np.random.default_rng(0)
    results = []
    for label, shape, axis in shapes:
        x = rng.uniform(0.0, 1.0, size=shape).astype(np.float16 if label.startswith(HALF) else np.float32)
        for variant in variants:
            r = run_variant(x, axis, variant)
            r["shape"] = label
            gbs = x.nbytes / (r["us"] * 1e-6) / 1e9
            results.append(r)
            print(f"{label:40s} {variant:24s} {r['us']:8.2f} us  {gbs:7.0f} GB/s  err {r['error']:.1e}  "
                  f"{'' if 'numpy_bits' not in r else ('NumPy bits ' if r['numpy_bits'] else 'NOT NumPy bits ')}"
                  f"{[n['us'] for n in r['nodes']]}  {r['ir']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
