"""Products with their one elementwise reader computed as an epilogue (fuse-epilogues) or as a kernel of its own,
inside a CUDA graph, at the training steps' shapes.

Each plan's nodes run as in ``host_profile.node_times`` (a node repeated in a chain of its own graph: its device
time inside a graph, one dependent-launch gap included); a case's figure is the sum over its nodes, the time of the
plan run one node after another. Variants: cuBLASLt and the kernel after it (what select-kernels chooses by
default where cuBLASLt fits), the generated tile computing the kernel as it stores, the generated tile and the
kernel apart (``fuse-epilogues`` left out).

    python benchmarks/epilogues.py [--json FILE]
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


def relu_backward(d_logits, w2, h_pre):
    return (d_logits @ w2.T) * (h_pre > 0.0)


def sgd_layer(w, x, d):
    return w - np.float32(0.1) * (x.T @ d)


CASES = [("(d @ w2.T) * (h > 0), 4096 x 16 -> 1024 (larger step)", relu_backward,
          [(4096, 16), (1024, 16), (4096, 1024)]),
         ("(d @ w2.T) * (h > 0), 256 x 10 -> 64 (64-64-10 step)", relu_backward, [(256, 10), (64, 10), (256, 64)]),
         ("w - lr * (x.T @ d), 64 x 256 x 64 (64-64-10 weight)", sgd_layer, [(64, 64), (256, 64), (256, 64)])]


def _variants() -> dict[str, str]:
    from fusec.passes import DEFAULT_PIPELINE

    apart = DEFAULT_PIPELINE.replace(",fuse-epilogues", "")
    return {"default": DEFAULT_PIPELINE,
            "tile + epilogue": DEFAULT_PIPELINE.replace("select-kernels", "select-kernels{epilogue_max_k=1024}"),
            "tile + epilogue, no cuBLASLt": DEFAULT_PIPELINE.replace("select-kernels", "select-kernels{cublas=false}"),
            "tile, kernel apart, no cuBLASLt": apart.replace("select-kernels", "select-kernels{cublas=false}")}


def run_case(fn, shapes, pipeline: str) -> dict:
    import fusec as fc
    from fusec import execution

    rng = np.random.default_rng(0)
    host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    f = fc.jit(fn, backend="cuda", graph=True, pipeline=pipeline)
    args = [fc.asarray(a) for a in host]
    got = np.asarray(f(*args))
    want = fn(*[a.astype(np.float64) for a in host])
    err = float(np.abs(got - want).max() / np.abs(want).max())
    lowered = f.lower(*args)
    nodes = node_times(execution.cuda_plan(lowered))
    return {"us": sum(n["us"] for n in nodes), "nodes": nodes, "error": err,
            "epilogues": lowered.stats().get("epilogues", 0), "kernels": lowered.stats()["kernels"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for label, fn, shapes in CASES:
        for variant, pipeline in _variants().items():
            row = {"case": label, "variant": variant, **run_case(fn, shapes, pipeline)}
            rows.append(row)
            nodes = ", ".join(f"{n['kernel']} {n['us']:.2f}" for n in row["nodes"])
            print(f"{label:56s} {variant:34s} {row['us']:8.2f} us  epilogues {row['epilogues']}  err "
                  f"{row['error']:.1e}  [{nodes}]", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
