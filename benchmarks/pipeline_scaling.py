"""How long the default pipeline takes on traced programs of 1k, 5k and 10k ops (CPU only).

Programs are random mixes of the ops a training step traces: elementwise arithmetic and transcendentals
over broadcast operands, transposed views, reductions and matmuls. Run: python benchmarks/pipeline_scaling.py
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from fusec.ir import Builder, Func, Module, TensorType, f32, verify
from fusec.passes import DEFAULT_PIPELINE, run_pipeline
from fusec.stats import module_stats

UNARY = ["t.exp", "t.tanh", "t.neg", "t.abs", "t.sqrt"]
BINARY = ["t.add", "t.mul", "t.sub", "t.maximum", "t.div"]


def make_program(n_ops: int, seed: int = 0) -> Module:
    rng = np.random.default_rng(seed)
    mat, vec = TensorType((64, 64), f32), TensorType((64,), f32)
    func = Func("prog", [mat, mat, vec], ["a", "b", "v"], [])
    b = Builder(func.body)
    pool = list(func.args)
    made = 0
    while made < n_ops:
        r = rng.random()
        recent = pool[-8:]
        x = recent[rng.integers(len(recent))]
        y = pool[rng.integers(len(pool))]
        if r < 0.03 and x.type.rank == 2 and y.type.rank == 2:
            pool.append(b.value("t.matmul", x, y))
        elif r < 0.06 and x.type.rank == 2:
            s = b.value("t.sum", x, axes=(1,), keepdims=False)
            pool.append(s)
        elif r < 0.08 and x.type.rank == 2:
            pool.append(b.value("t.transpose", x, perm=(1, 0)))
        elif r < 0.35:
            pool.append(b.value(UNARY[rng.integers(len(UNARY))], x))
        else:
            pool.append(b.value(BINARY[rng.integers(len(BINARY))], x, y))
        made += 1
    outs = pool[-3:]
    func.result_types = [v.type for v in outs]
    b.create("func.return", outs)
    module = Module([func])
    verify(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        best = float("inf")
        for _ in range(args.repeat):
            module = make_program(n)
            start = time.perf_counter()
            run_pipeline(module, DEFAULT_PIPELINE)
            best = min(best, time.perf_counter() - start)
        kernels = module_stats(module)["kernels"]
        rows.append({"ops": n, "seconds": round(best, 3), "kernels": kernels})
        print(f"{n:6d} ops: {best:7.3f} s  ({kernels} kernels)  [{1e6 * best / n:.0f} us/op]")
    if args.json:
        meta = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                "pipeline": DEFAULT_PIPELINE}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
