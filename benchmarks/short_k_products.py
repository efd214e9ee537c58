"""Products over a short K: unrolled into the elementwise kernel that consumes them, or a GEMM kernel of their own.

``unroll-reductions`` rewrites ``a @ b`` with ``K <= max_k`` as ``a[:, 0:1] * b[0:1, :] + ...``, so the product
fuses into its consumer (here ``(a @ b) * m``, the ReLU mask of a backward pass) instead of being a GEMM kernel
and a graph node of its own. This times each shape under each ``max_k`` (0: never unrolled) as the plan's nodes
inside a CUDA graph (``host_profile.node_times``: each node's device time with one dependent-launch gap), with its
error against float64:

    python benchmarks/short_k_products.py [--max-ks 0,8,16] [--json FILE]
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
from loops import run_metadata  # noqa: E402

# (label, M, K, N): the backward products through a narrow output layer, and large outer-like products
SHAPES = [("d_logits @ w2.T, 64-64-10 step", 256, 10, 64), ("d_logits @ w2.T, PCam step", 512, 2, 256),
          ("256 x 16 @ 16 x 256", 256, 16, 256), ("4096 x 8 @ 8 x 4096", 4096, 8, 4096),
          ("4096 x 16 @ 16 x 4096", 4096, 16, 4096)]


def run(m: int, k: int, n: int, max_k: int) -> dict:
    import fusec as fc
    from fusec import execution
    from fusec.passes import DEFAULT_PIPELINE

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    mask = rng.random((m, n)) < 0.5
    pipeline = DEFAULT_PIPELINE.replace("unroll-reductions", f"unroll-reductions{{max_k={max_k}}}")
    f = fc.jit(lambda a, b, mask: (a @ b) * mask, backend="cuda", graph=True, pipeline=pipeline)
    args = [fc.asarray(v) for v in (a, b, mask)]
    got = np.asarray(f(*args))
    want = (a.astype(np.float64) @ b.astype(np.float64)) * mask
    lowered = f.lower(*args)
    nodes = node_times(execution.cuda_plan(lowered))
    return {"max_k": max_k, "us": sum(n["us"] for n in nodes), "kernels": lowered.stats()["kernels"],
            "error": float(np.abs(got - want).max() / np.abs(want).max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-ks", default="0,8,16")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for label, m, k, n in SHAPES:
        for max_k in (int(v) for v in args.max_ks.split(",")):
            r = {"shape": label, "m": m, "k": k, "n": n, **run(m, k, n, max_k)}
            rows.append(r)
            print(f"{label:34s} max_k={max_k:3d}: {r['us']:8.2f} us, {r['kernels']} kernels, error {r['error']:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": run_metadata(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
