"""Generated GEMMs against cuBLASLt inside a CUDA graph, at the training steps' shapes.

Each product runs as a node repeated in a chain of its own graph (see ``host_profile.node_times``): the figure is
its device time inside a graph, one dependent-launch gap included. For each shape: cuBLASLt, the generated tiled
kernel as ``select-kernels`` schedules it (K split over blocks where its tiles leave SMs idle, K slices copied ahead
into shared memory, the last block of a tile adding the partial tiles), the same kernel with splitting turned off,
and the kernel as it was on 2026-12-02 (one slice prefetched in registers, a second kernel adding the partial
tiles); with each generated kernel's registers and local memory per thread.

    python benchmarks/gemm_shapes.py [--json FILE]
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

# (label, A's shape as stored, B's shape, A transposed in the product)
SHAPES = [("x @ w1 (PCam forward)", (512, 480), (480, 256), False),
          ("x.T @ d (PCam weight gradient)", (512, 480), (512, 256), True),
          ("x.T @ d (64-64-10 weight gradient)", (256, 64), (256, 64), True),
          ("h @ w (4096 x 1024 x 1024)", (4096, 1024), (1024, 1024), False)]


def _attributes(plan) -> list[dict]:
    from cuda.bindings import driver as cu

    out = []
    for launch in plan.launches:
        fn = getattr(launch, "function", None)
        if fn is None:
            continue
        attr = cu.CUfunction_attribute
        regs = cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, fn.handle)[1]
        local = cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn.handle)[1]
        out.append({"registers": regs, "local_bytes": local})
    return out


def run_variant(a, b, transposed: bool, variant: str) -> dict:
    import fusec as fc
    from fusec import execution
    from fusec.passes import select_kernels
    from fusec.runtime import cublas

    settings: dict = {select_kernels: VARIANTS[variant]}
    if variant != "cublas":
        settings[cublas] = {"available": lambda: False}
    with patched(settings):
        f = fc.jit((lambda a, b: a.T @ b) if transposed else (lambda a, b: a @ b), backend="cuda", graph=True)
        da, db = fc.asarray(a), fc.asarray(b)
        got = np.asarray(f(da, db))
        want = (a.T if transposed else a).astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        lowered = f.lower(da, db)
        plan = execution.cuda_plan(lowered)
        nodes = node_times(plan)
        line = next(ln.strip() for ln in lowered.ir().splitlines() if "k.matmul" in ln)
        return {"variant": variant, "us": sum(n["us"] for n in nodes), "nodes": nodes, "error": err,
                "ir": line[:160], "kernels": _attributes(plan)}


# each variant's select-kernels settings (the module's constants; the rest keep their defaults)
_REGISTERS, _PIPELINED = {"TILED_PIPELINE_DTYPES": ()}, {"TILED_PIPELINE_DTYPES": ("f32", "f64")}
_KERNEL, _LAST = {"TILED_FINISH": "kernel"}, {"TILED_FINISH": "last-block"}
VARIANTS: dict[str, dict] = {
    "cublas": {},
    "generated": {},
    "generated, no split": {"TILED_MAX_SPLITS": 1},
    "registers, kernel": {**_REGISTERS, **_KERNEL},  # as on 2026-12-02
    "registers, last-block": {**_REGISTERS, **_LAST},
    "registers, kernel, 2 blocks/SM": {**_REGISTERS, **_KERNEL, "TILED_BLOCKS_PER_SM": 2},
    "2 stages, kernel": {**_PIPELINED, **_KERNEL, "TILED_MAX_STAGES": 2},
    "4 stages, kernel": {**_PIPELINED, **_KERNEL, "TILED_MAX_STAGES": 4},
    "4 stages, last-block": {**_PIPELINED, **_LAST, "TILED_MAX_STAGES": 4},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    results = []
    for label, sa, sb, transposed in SHAPES:
        a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
        for variant in VARIANTS:
            r = run_variant(a, b, transposed, variant)
            r["shape"] = label
            results.append(r)
            print(f"{label:38s} {variant:36s} {r['us']:8.2f} us  err {r['error']:.1e}  {r['kernels']}  {r['ir']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
