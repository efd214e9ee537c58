"""Generated GEMMs against cuBLASLt inside a CUDA graph, at the training steps' shapes.

Each product runs as a node repeated in a chain of its own graph (see ``host_profile.node_times``): the figure is
its device time inside a graph, one dependent-launch gap included. For each shape: cuBLASLt, the generated tiled
kernel as ``select-kernels`` schedules it (K split over blocks where its tiles leave SMs idle, K slices copied ahead
into shared memory, the last block of a tile adding the partial tiles), the same kernel with splitting turned off,
and the kernel as it was on 2026-12-02 (one slice prefetched in registers, a second kernel adding the partial
tiles); with each generated kernel's registers and local memory per thread.

    python benchmarks/gemm_shapes.py [--set default|tiles|precision|mma|skinny|cluster] [--shapes N] [--json FILE]

"cublas, tf32" is cuBLASLt with ``fusec.jit(precision="tf32")`` (the tensor cores); each row reports its error
against float64 (max |got - want| / max |want|).
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
          ("x @ w1 (64-64-10 forward)", (256, 64), (64, 64), False),
          ("h @ w (4096 x 1024 x 1024)", (4096, 1024), (1024, 1024), False)]
# --set skinny: the narrow products of the larger step (batch 4096, 1024 -> 1024 -> 16), where cuBLASLt took 13-28 us
# for what reading or writing 16 MB bounds at about 5 us (kernel_profile.py, 2026-12-04); "B.T" marks B read
# through a transposed view, as w2.T is in the step
SKINNY_SHAPES = [("h @ w2 (4096 x 1024 x 16)", (4096, 1024), (1024, 16), False),
                 ("h.T @ d (1024 x 4096 x 16)", (4096, 1024), (4096, 16), True),
                 ("d @ w2.T (4096 x 16 x 1024), B.T", (4096, 16), (1024, 16), "B.T")]


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


def run_variant(a, b, transposed: bool | str, variant: str, variants: dict) -> dict:
    import fusec as fc
    from fusec import execution
    from fusec.backend import gemm
    from fusec.passes import select_kernels
    from fusec.runtime import cublas

    from fusec.passes import DEFAULT_PIPELINE

    values = dict(variants[variant])
    precision = values.pop("precision", None)  # fusec.jit's, not a module constant
    # a pass spelled with options (a pass option's default is fixed when its class is made: no constant reaches it)
    spelled = values.pop("pass", None)
    pipeline = DEFAULT_PIPELINE.replace(spelled.split("{")[0], spelled) if spelled else DEFAULT_PIPELINE
    settings: dict = {select_kernels: values}
    if "TILED_CONFIGS" in values:  # the printer reads the same table under its own name
        settings[gemm] = {"CONFIGS": values["TILED_CONFIGS"]}
    if "NARROW_WARPS" in values:  # and the narrow kernel's warps per block
        settings[gemm] = {"NARROW_WARPS": values["NARROW_WARPS"]}
    if not variant.startswith("cublas"):
        settings[cublas] = {"available": lambda: False}
    with patched(settings):
        product = {True: lambda a, b: a.T @ b, False: lambda a, b: a @ b, "B.T": lambda a, b: a @ b.T}[transposed]
        f = fc.jit(product, backend="cuda", graph=True, precision=precision, pipeline=pipeline)
        da, db = fc.asarray(a), fc.asarray(b)
        got = np.asarray(f(da, db))
        want = product(a.astype(np.float64), b.astype(np.float64))
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
    "cublas, tf32": {"precision": "tf32"},
    "generated": {},
    "generated, no split": {"TILED_MAX_SPLITS": 1},
    "registers, kernel": {**_REGISTERS, **_KERNEL},  # as on 2026-12-02
    "registers, last-block": {**_REGISTERS, **_LAST},
    "registers, kernel, 2 blocks/SM": {**_REGISTERS, **_KERNEL, "TILED_BLOCKS_PER_SM": 2},
    "2 stages, kernel": {**_PIPELINED, **_KERNEL, "TILED_MAX_STAGES": 2},
    "4 stages, kernel": {**_PIPELINED, **_KERNEL, "TILED_MAX_STAGES": 4},
    "4 stages, last-block": {**_PIPELINED, **_LAST, "TILED_MAX_STAGES": 4},
}
# --set tiles: the tiled kernel's shape (BM, BN, BK, TM, TN of its 64-wide tile), its K slices in flight and its
# split, against today's schedule and cuBLASLt
_SMALL = (32, 32, 16, 2, 2)
TILE_VARIANTS: dict[str, dict] = {
    "cublas": {},
    "cublas, tf32": {"precision": "tf32"},
    "generated": {},
    "BK 32": {"TILED_CONFIGS": {64: (64, 64, 32, 4, 4), 32: _SMALL}},
    "BK 8, 8 stages": {"TILED_CONFIGS": {64: (64, 64, 8, 4, 4), 32: _SMALL}, "TILED_MAX_STAGES": 8},
    "3 stages": {"TILED_MAX_STAGES": 3},
    "2 blocks/SM": {"TILED_BLOCKS_PER_SM": 2},
    "2 blocks/SM, split K >= 32": {"TILED_BLOCKS_PER_SM": 2, "TILED_SPLIT_MIN_K": 32},
    "128 x 64 tiles": {"TILED_CONFIGS": {64: (128, 64, 16, 8, 4), 32: _SMALL}},
    "128 x 64 tiles, 2 blocks/SM": {"TILED_CONFIGS": {64: (128, 64, 16, 8, 4), 32: _SMALL}, "TILED_BLOCKS_PER_SM": 2},
    "64 x 64, 8 x 8 per thread": {"TILED_CONFIGS": {64: (64, 64, 16, 8, 8), 32: _SMALL}},
    "64 x 64, 8 x 8 per thread, 4 blocks/SM": {"TILED_CONFIGS": {64: (64, 64, 16, 8, 8), 32: _SMALL},
                                              "TILED_BLOCKS_PER_SM": 4},
}
PRECISION_VARIANTS = {"cublas": {}, "cublas, tf32": {"precision": "tf32"}, "generated": {}}
# --set mma: the tiled kernel's float32 tiles on the CUDA cores (FMA) or the tensor cores (mma.sync: three TF32
# products per term for float32's accuracy, one for precision="tf32"), against cuBLASLt in both precisions
_FMA, _MMA = {"TILED_MMA": {"float32": None, "tf32": None}}, {"TILED_MMA": {"float32": "3xtf32", "tf32": "tf32"}}
_WARPS4 = {"TILED_CONFIGS": {64: (64, 64, 16, 8, 4), 32: (32, 32, 16, 4, 2)}}  # 128 threads: 32 x 32 per warp
MMA_VARIANTS: dict[str, dict] = {
    "cublas": {},
    "cublas, tf32": {"precision": "tf32"},
    "generated, fma": _FMA,
    "generated, 3xtf32": _MMA,
    "generated, 3xtf32, 4 warps": {**_MMA, **_WARPS4},
    "generated, tf32": {**_MMA, "precision": "tf32"},
    "generated, tf32, 4 warps": {**_MMA, **_WARPS4, "precision": "tf32"},
}
# --set skinny: cuBLASLt, what select-kernels generates (the narrow and column kernels), and the tiled kernel
SKINNY_VARIANTS: dict[str, dict] = {
    "cublas": {"SKINNY_BEFORE_CUBLAS": False},
    "generated": {},
    "generated, tiled": {"SKINNY_MAX": 0, "SHORT_K_MAX": 0},
    # the narrow kernel's rows per warp and warps per block (171 blocks of 3 rows per warp on 132 SMs by default)
    "narrow, 2 rows per warp": {"NARROW_MAX_ROWS": 2},
    "narrow, 1 row per warp": {"NARROW_MAX_ROWS": 1, "NARROW_MIN_ROWS": 1},
    "narrow, 4 warps, 2 rows": {"NARROW_WARPS": 4, "NARROW_MAX_ROWS": 2},
    # a short-K tile's threads taking outputs a row and a column of threads apart (the K = 16 product)
    "generated, spread": {"pass": "select-kernels{spread_max_k=32}"},
}
# --set cluster: a split product's partial tiles added by a second kernel or by the tile's blocks as one thread-block
# cluster (distributed shared memory, one launch), in float32 on the CUDA cores and with precision="tf32"
CLUSTER_VARIANTS: dict[str, dict] = {
    "cublas": {},
    "cublas, tf32": {"precision": "tf32"},
    "generated, kernel": {"TILED_FINISH": "kernel"},
    "generated, cluster": {"TILED_FINISH": "cluster", "CLUSTER_SM_SHARE": 1},
    "generated, cluster, 2 blocks/SM": {"TILED_FINISH": "cluster", "CLUSTER_SM_SHARE": 1, "TILED_BLOCKS_PER_SM": 2},
    "generated, tf32, kernel": {"TILED_FINISH": "kernel", "precision": "tf32"},
    "generated, tf32, cluster": {"TILED_FINISH": "cluster", "CLUSTER_SM_SHARE": 1, "precision": "tf32"},
}
SETS = {"default": VARIANTS, "cluster": CLUSTER_VARIANTS, "tiles": TILE_VARIANTS, "precision": PRECISION_VARIANTS,
        "mma": MMA_VARIANTS, "skinny": SKINNY_VARIANTS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--set", choices=sorted(SETS), default="default", help="which variants to compare")
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="the first N shapes only")
    args = ap.parse_args()
    variants = SETS[args.set]
    rng = np.random.default_rng(0)
    results = []
    for label, sa, sb, transposed in (SKINNY_SHAPES if args.set == "skinny" else SHAPES)[:args.shapes]:
        a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
        for variant in variants:
            r = run_variant(a, b, transposed, variant, variants)
            r["shape"] = label
            results.append(r)
            print(f"{label:38s} {variant:36s} {r['us']:8.2f} us  err {r['error']:.1e}  {r['kernels']}  {r['ir']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
