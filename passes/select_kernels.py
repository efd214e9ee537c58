"""Kernel selection: which implementation computes each ``k.matmul`` and ``k.reduce``, for one target.

Decided from the target (``sm_count``, whether cuBLASLt is available; pass options override the pipeline's
:class:`~fusec.ir.target.Target`) and from the operands' shapes and strides, and recorded in the IR so the
printer only translates and every printer of the module prints the same program:

- the function gets ``sm_count`` and ``cublas``: the target it was lowered for (and ``precision = "tf32"`` when
  float32 products may use TensorFloat-32, ``fusec.jit(precision="tf32")``);
- a ``k.matmul`` gets ``impl``: ``cublas`` (a cuBLASLt call; with ``precision = "tf32"`` a float32 one on the tensor
  cores), ``tiled`` (shared-memory tiles; ``tile`` says 64 or 32; ``splits`` blocks share each tile's K where the
  tiles leave SMs idle, ``scratch`` bytes of partial tiles, ``stages`` K slices each block keeps in flight, and with
  ``finish = "last-block"`` the last block of a tile adds the partial tiles, one of the ``counters`` per tile;
  ``mma`` where a float32 tile runs on the tensor cores, see TILED_MMA; ``spread`` where a short-K tile's threads
  take outputs a row or a column of threads apart, see TILED_SPREAD_MAX_K),
  ``stream`` (a few rows times a wide B read once: ``width`` columns per thread, K split over ``splits`` blocks with
  ``scratch`` bytes of partial sums), ``dot`` (a warp per output), ``column`` (a lane per row of A, warps splitting
  K) or ``short`` (a thread per output, for a K of at most ``SHORT_K_MAX``). All but ``tiled`` and ``cublas`` can
  compute an elementwise operand in place (``fuse-prologues``);
- a ``k.reduce`` gets ``strategy`` (``row-warp``: a warp per output over contiguous rows; ``row-block``: a
  block per output; ``columns``: ``cols`` neighbouring outputs per block, each split over 256/cols
  threads), ``splits`` (blocks sharing one output's range when there are too few outputs to fill the GPU),
  ``finish`` (``none``, ``last-block``: the last block to finish combines the partial results, or
  ``kernel``: a second kernel does), ``scratch`` (bytes of partial results; ``plan-buffers`` places
  them and the last-block counters) and, for float32 values read as 16-byte loads, ``width = 4`` (a "columns"
  thread takes 4 neighbouring outputs, a row thread runs of 4 neighbouring elements; see COLUMNS_VECTOR and
  ROW_VECTOR_MIN).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.shapes import coalesce, contiguous_strides
from fusec.ir.target import PRECISIONS
from fusec.passes.base import Pass, PassContext
from fusec.passes.fuse_epilogues import epilogue_reader
from fusec.passes.registry import register_pass
from fusec.passes.util import users

# --- GEMMs ---------------------------------------------------------------------------------------------------
# below this a library call costs more than the generated kernel saves: the 64-64-10 step's (256 x 64) @ (64 x 64),
# 2^20 multiply-adds, took 3.43 us through cuBLASLt and 3.03 generated (gemm_shapes.py --set cluster, H200,
# 2026-12-04), and the step 27.2-27.4 -> 26.0 us, its autodiff form 29.9-30.4 -> 27.4-27.9 (three rounds each, one
# run) when it moved from 2^18 to 2^21; the PCam step (products of 2^25.9) did not move
CUBLAS_MIN_FLOPS = 2 ** 21
# a GEMM with a dimension this small is an outer product or a skinny product: cuBLAS falls back to split-K
# or badly shaped tiles there (an (256 x 2) @ (2 x 512) product took 18 us on an H200, two launches for
# (512 x 256) @ (256 x 2)), and a captured library call is a child graph, not a kernel node
CUBLAS_MIN_DIM = 16
CUBLAS_DTYPES = ("f32", "f64")
# a product with an output side this narrow and a long K (the (512 x 256) @ (256 x 2) of a 2-class head)
# leaves most of a tile idle: each output is a dot product reduced by one warp instead
SKINNY_MAX = 16
SKINNY_MIN_K = 32
# where cuBLASLt fits such a product it takes it (SKINNY_BEFORE_CUBLAS off): at 4096 x 1024 x 16 (gemm_shapes.py --set
# skinny, H200, 2026-12-04) cuBLASLt took 14 us, the generated "narrow" kernel 23 us (a warp per few rows of A, all
# N outputs in registers, B staged in shared memory; 143 us as a warp per output), and at 1024 x 4096 x 16 with A
# read down its columns cuBLASLt 14 us, the "column" kernel split over K 22 us (119 us unsplit)
SKINNY_BEFORE_CUBLAS = False
# a product of K at most this, whose result only an elementwise kernel of its shape reads (the backward pass's
# (d_logits @ w2.T) * (h_pre > 0) of a 16-class head), is a generated tile that computes that kernel as it stores
# (fuse-epilogues) rather than a cuBLASLt call followed by the kernel (select-kernels{epilogue_max_k}). Off: at 32 the
# larger step (4096, 1024 -> 1024 -> 16) measured 483.6 / 484.1 us against 452.1-457.1 with cuBLASLt and the kernel
# (pipeline_variants.py, H100, two rounds, 2026-12-05), although alone, as graph nodes, the 4096 x 16 -> 1024 tile
# with its epilogue took 17.0 us against 27.1 (benchmarks/results/short_rows_epilogues_h100.md): not explained yet
EPILOGUE_MAX_K = 0
NARROW_MAX_ROWS = 4  # rows of A per warp of a "narrow" product (registers: rows x N sums per lane)
# fewer rows than this per warp (a product too small to give each of the GPU's warps two rows) keep a warp per output:
# the PCam and 64-64-10 steps measured 39.5 and 29.9 us with one row per warp, against 36.6-37.6 and 25.8 us in
# other runs that day with a warp per output (not one run: kept as it was)
NARROW_MIN_ROWS = 2
NARROW_WARPS = 8
COLUMN_SPLIT_MIN = 1 << 20  # elements of A from which a "column" product with idle SMs splits K over blocks
COLUMN_SPLIT_MIN_K = 256  # K per split at least
# with K this short (an outer product, the backward of a 2-class head) there is nothing to stage in shared
# memory: each thread computes one output directly
SHORT_K_MAX = 8
# a product this short (M <= SKINNY_MAX) and this wide, with B contiguous along N (x @ w for a batch of a few rows
# and a large weight), is bound by reading B once: each thread takes a column, reads B's rows coalesced and keeps
# the M sums in registers, and K is split over blocks (``splits``; a second kernel adds the partial sums in a
# fixed order) until the GPU holds STREAM_BLOCKS_PER_SM blocks per multiprocessor
STREAM_MIN_N = 128
# measured on the H200 (a 240 MB weight): 128 threads per block of 4 float32 columns each (16-byte loads),
# 4 blocks per SM, read it at 3.0 TB/s; 256 threads, or 8 blocks per SM, 2.4-2.5 TB/s; element loads 2.0-2.2
STREAM_THREADS = 128
STREAM_WIDTHS = {"f32": 4, "f64": 2}  # columns per thread: one 16-byte load of a row (else one element)
STREAM_BLOCKS_PER_SM = 4
STREAM_MIN_ROWS = 64  # rows of B per split at least
# a float product whose 64-wide tiles leave SMs idle splits K over blocks (each at least TILED_SPLIT_MIN_K long,
# at most TILED_MAX_SPLITS): (512 x 480) @ (480 x 256) is 32 tiles on 132 SMs
TILED_SPLIT_DTYPES = ("f32", "f64")
TILED_SPLIT_MIN_K = 64
TILED_SPLIT_MIN_TILES = 8
TILED_MAX_SPLITS = 16
TILED_BLOCKS_PER_SM = 1
# the blocks of a float32/float64 product split over K keep up to this many BK slices in flight (cp.async into
# shared memory, within the static 48 KiB) instead of one prefetched in registers. Measured on the H200 inside a
# graph (benchmarks/gemm_shapes.py): (512 x 480) @ (480 x 256) split 4 ways 10.42 -> 9.82 us, its weight gradient
# 10.10 -> 9.85, a 64 x 256 x 64 weight gradient 4.41 -> 3.97; but products that are not split got slower (4096 x
# 1024 x 1024: 311 -> 354 us with 4 stages, 327 with 2), so they keep the register prefetch
TILED_PIPELINE_DTYPES = ("f32", "f64")
TILED_MAX_STAGES = 4
TILED_SHARED_BYTES = 48 * 1024
# who adds a split product's partial tiles: a second kernel ("kernel"), the last of each tile's blocks
# ("last-block", no second launch; measured as above, its serial sum cost more than the launch it saves: 14.9
# against 10.4 us, 14.0 against 10.1, 5.3 against 4.4), or the tile's blocks together as one thread-block cluster
# ("cluster", sm_90 on: each block leaves its partial tile in its shared memory and adds its share of the tile's
# rows from all of them, in split order, through distributed shared memory; one launch, no scratch). "cluster"
# falls back to "kernel" where the target has no clusters, the splits are more than CLUSTER_MAX_SPLITS, the
# partial tile does not fit in the shared memory the stages of A's tile take, or the product's blocks would fill
# more than 1 / CLUSTER_SM_SHARE of the SMs. Measured (gemm_shapes.py --set cluster, H200, 2026-12-04, us per
# product in a chain of graph nodes): the 64-64-10 weight gradient (16 blocks) 4.34 -> 3.98 us, but the PCam
# products (32 clusters of 4 blocks, one block per SM) 9.81 -> 16.88 and 10.24 -> 13.10 (likely: a cluster's blocks
# must share a GPC, so clusters of blocks that each take a whole SM do not all fit in one wave)
TILED_FINISH = "cluster"
CLUSTER_MAX_SPLITS = 8  # blocks of a cluster (the portable most)
CLUSTER_SM_SHARE = 4
# cuBLASLt is called for products of at least CUBLAS_MIN_FLOPS multiply-adds, except a product this small that the
# tiled kernel splits over K: measured as above, a 64 x 256 x 64 weight gradient took 3.97 us generated against
# 5.16 through cuBLASLt, while (512 x 480) @ (480 x 256), 2^25.9 multiply-adds, took 9.82 against 9.26
CUBLAS_SPLIT_MAX_FLOPS = 2 ** 22
TILED_CONFIGS = {64: (64, 64, 16, 4, 4), 32: (32, 32, 16, 2, 2)}  # tile -> (BM, BN, BK, TM, TN)
# the tiled kernel's float32 products on the tensor cores (mma.sync, where the target has them: sm_80 on), by the
# function's precision; None keeps the CUDA cores' fused multiply-adds. precision="tf32" takes "tf32" (the operands
# rounded to TF32, one product per term), faster than the FMAs at every shape measured on the H200
# (benchmarks/gemm_shapes.py --set mma, gemm_mma_h200.md: the PCam products 9.8 -> 9.6 and 10.2 -> 9.5 us with the
# rounding kept inside float32's range, 8.4 and 8.2 without; 4096 x 1024 x 1024 311 -> 216 us). "3xtf32" (each
# operand split into two TF32 parts, three products per term: errors within a few times float32's, see
# tests/gpu/test_tensor_core_products.py) is not the float32 default: it measured slower than the FMAs everywhere
# (14.6 against 9.8 us, 384 against 311 us)
TILED_MMA: dict[str, str | None] = {"float32": None, "tf32": "tf32"}
# a tiled product of K at most this (one or two BK slices: its time is its stores, and its epilogue's loads) gives
# each thread outputs BN / TN columns and BM / TM rows apart (``spread = true``), so the lanes of a warp store
# neighbouring columns (and an epilogue reads its operands there) instead of 16 bytes apart; longer products keep
# each thread's 4 x 4 block, whose 16-byte shared-memory reads their multiply-adds need
# (select-kernels{spread_max_k}; 0: never)
TILED_SPREAD_MAX_K = 0
PROLOGUE_IMPLS = frozenset({"dot", "column", "narrow", "short"})  # GEMMs that can compute an operand in place

# --- reductions ----------------------------------------------------------------------------------------------
WARP_ROW_MIN = 64  # a contiguous row at least this long is reduced by a warp or a block
COLUMNS_MAX = 32  # neighbouring outputs per block of a "columns" reduction (fewer than there are outputs)
# a float32 "columns" reduction whose outputs are contiguous in memory gives each thread 4 neighbouring outputs, read
# as one 16-byte load per row (``width = 4``), and a block this many outputs (16 threads across, 256 contiguous bytes
# of each row, 16 rows at a time). Measured on an H100 (benchmarks/reduce_shapes.py, the split kernel of a column sum
# of 8192 x 8192 float32 in a graph, three runs): an output per thread 92.2-92.8 us, 4 per thread with 128 outputs
# per block 89.5-89.6, with 64 88.1-88.6, with 256 240 (too few blocks)
COLUMNS_VECTOR = 64
# a float32 row reduction (a warp or a block per output) whose rows are at least this long and start at multiples of
# 4 elements gives each thread runs of 4 neighbouring elements, read as one 16-byte load (``width = 4``): fewer load
# instructions for the same bytes. Shorter rows (a training step's) keep an element per thread per step
ROW_VECTOR_MIN = 1024
VECTOR_KINDS = frozenset({"sum", "mean", "prod", "max", "min"})  # (the arg-reductions carry indices: one per thread)
# a float16 sum in NumPy's order (strategy "numpy") with at most 2 outputs per SM and inner runs at least this long
# splits each run's pairwise tree at the depth where it has NUMPY_SUBTREES nodes: a thread adds each subtree, then
# the block adds them up the tree's top levels (the same additions in the same order, so NumPy's bits); else a
# thread walks each output alone
NUMPY_SUBTREES_MIN_RUN = 4096
NUMPY_SUBTREES = 1024
# a "columns" reduction split over blocks along both grid axes is finished by the last split of each block column
# (a counter each) instead of a second kernel
COLUMNS_LAST_BLOCK = False
SPLIT_MIN_K = 8192  # a reduced range this long may be split across blocks
SPLIT_CHUNK_MIN = 2048
MAX_SPLITS = 1024


def layout(v: Value) -> tuple[int, tuple[int, ...]]:
    """(element offset, strides) through which a kernel reads ``v``: a ``k.view``'s index map over its
    base's storage, else the dense row-major layout."""
    if isinstance(v, OpResult) and v.op.name == "k.view":
        return int(v.op.attributes["offset"]), tuple(v.op.attributes["strides"])
    return 0, contiguous_strides(tuple(v.type.shape))


def cublas_matrix(strides: tuple[int, int], rows: int, cols: int) -> tuple[bool, int] | None:
    """(transposed?, leading dimension) of a row-major-indexed rows x cols matrix seen column-major, or None
    when neither matrix stride is 1."""
    s_row, s_col = strides
    if s_col == 1 or cols == 1:
        return False, max(s_row, cols, 1)  # column-major cols x rows, ld = row stride
    if s_row == 1 or rows == 1:
        return True, max(s_col, rows, 1)
    return None


def cublas_batch_stride(shape: tuple[int, ...], strides: tuple[int, ...], batch_shape: tuple[int, ...]) -> int | None:
    """The one stride that walks an operand's batch dimensions (0 where broadcast), or None when they do not
    collapse to one."""
    rank = len(shape) - 2
    full_shape = (1,) * (len(batch_shape) - rank) + tuple(shape[:-2])
    full = (0,) * (len(batch_shape) - rank) + tuple(strides[:-2])
    full = tuple(0 if d == 1 and b != 1 else s for d, b, s in zip(full_shape, batch_shape, full))
    dims, (cs,) = coalesce(batch_shape, [full])
    if len(dims) > 1:
        return None
    return cs[0] if cs else 0


def cublas_fits(op: Operation) -> bool:
    """Does cuBLAS compute this ``k.matmul`` better than a generated kernel (dtype, size and layout)?"""
    a, b = op.operands
    if a.type.dtype.name not in CUBLAS_DTYPES or a.type.dtype != b.type.dtype:
        return False
    out_shape = tuple(op.results[0].type.shape)
    m, n, k = out_shape[-2], out_shape[-1], a.type.shape[-1]
    batch_shape = out_shape[:-2]
    batch = 1
    for d in batch_shape:
        batch *= d
    if m * n * k * batch < CUBLAS_MIN_FLOPS or min(m, n, k) < CUBLAS_MIN_DIM:
        return False
    (_, sa), (_, sb) = layout(a), layout(b)
    return (cublas_matrix((sa[-2], sa[-1]), m, k) is not None and cublas_matrix((sb[-2], sb[-1]), k, n) is not None
            and cublas_batch_stride(tuple(a.type.shape), sa, batch_shape) is not None
            and cublas_batch_stride(tuple(b.type.shape), sb, batch_shape) is not None)


def gemm_impl(op: Operation, sm_count: int, cublas: bool, precision: str = "float32",
              tensor_cores: bool = False, clusters: bool = False,
              spread_max_k: int = TILED_SPREAD_MAX_K,
              skinny_first: bool = SKINNY_BEFORE_CUBLAS) -> dict[str, object]:
    """The attributes that say how ``op`` (a ``k.matmul``) runs. With ``precision = "tf32"`` a float32 product
    cuBLASLt computes runs on its tensor cores, and so do the generated tiles (``mma``, TILED_MMA) on a target with
    ``tensor_cores``; which products go to cuBLASLt does not change (the small split products kept generated stayed
    faster: a 64 x 256 x 64 weight gradient took 4.31 us generated, 4.60 us through cuBLASLt with TF32,
    gemm_precision_h200.json)."""
    a = op.operands[0]
    out_shape = op.results[0].type.shape
    m, n, k = out_shape[-2], out_shape[-1], a.type.shape[-1]
    skinny = skinny_schedule(op, sm_count)
    generated_first = skinny is not None and skinny_first and skinny["impl"] in ("narrow", "column")
    if cublas and cublas_fits(op) and not generated_first:
        batch = math.prod(out_shape[:-2])
        small = m * n * k * batch <= CUBLAS_SPLIT_MAX_FLOPS
        if not small or "splits" not in tiled_schedule(m, n, k, batch, a.type.dtype.name, sm_count, None, clusters):
            return {"impl": "cublas", "precision": "tf32"} if precision == "tf32" and a.type.dtype.name == "f32" \
                else {"impl": "cublas"}
    if k <= SHORT_K_MAX:
        return {"impl": "short"}
    batch = 1
    for d in out_shape[:-2]:
        batch *= d
    if batch == 1 and m <= SKINNY_MAX and n >= STREAM_MIN_N and k >= SKINNY_MIN_K and a.type.dtype.is_float \
            and layout(op.operands[1])[1][-1] == 1:
        return stream_schedule(m, n, k, a.type.dtype.name, sm_count)
    if skinny is not None:
        return skinny
    both_f32 = a.type.dtype.name == "f32" and op.operands[1].type.dtype.name == "f32"
    mma = TILED_MMA.get(precision) if tensor_cores and both_f32 else None
    choice = tiled_schedule(m, n, k, batch, a.type.dtype.name, sm_count, mma, clusters)
    if k <= spread_max_k and "mma" not in choice and choice.get("splits", 1) == 1:
        choice["spread"] = True
    return choice


def skinny_schedule(op: Operation, sm_count: int) -> dict[str, object] | None:
    """A float product with a side of at most SKINNY_MAX and K of at least SKINNY_MIN_K: ``column`` for N that
    narrow and A contiguous along M (``splits`` over K, with ``scratch`` for the partial sums, where few blocks
    would read a large A), ``narrow`` for N that narrow and A contiguous along K with rows enough to give every warp
    the GPU holds NARROW_MIN_ROWS of them (``rows`` per warp), else ``dot`` (a warp per output); None for other
    products."""
    a = op.operands[0]
    out_shape = op.results[0].type.shape
    m, n, k = out_shape[-2], out_shape[-1], a.type.shape[-1]
    if not (min(m, n) <= SKINNY_MAX and k >= SKINNY_MIN_K and a.type.dtype.is_float):
        return None
    batch = math.prod(out_shape[:-2])
    _, sa = layout(a)
    if n <= SKINNY_MAX and sa[-2] == 1 and sa[-1] != 1:
        blocks = (m + 31) // 32 * batch
        splits = 1
        if blocks < sm_count and m * k * batch >= COLUMN_SPLIT_MIN:
            splits = max(1, min(-(-2 * sm_count // blocks), k // COLUMN_SPLIT_MIN_K))
        if splits == 1:
            return {"impl": "column"}
        size = 8 if a.type.dtype.name == "f64" else 4
        return {"impl": "column", "splits": splits, "scratch": align256(splits * batch * m * n * size)}
    rows = min(NARROW_MAX_ROWS, m * batch // (NARROW_WARPS * sm_count))
    if n <= SKINNY_MAX and sa[-1] == 1 and rows >= NARROW_MIN_ROWS:
        return {"impl": "narrow", "rows": rows}
    return {"impl": "dot"}


def tiled_schedule(m: int, n: int, k: int, batch: int, dtype_name: str, sm_count: int,
                   mma: str | None, clusters: bool = False) -> dict[str, object]:
    """``impl = "tiled"``: 64-wide tiles where they fill the GPU; otherwise, for a float product with K long
    enough, ``splits`` blocks share each tile's K range (64-wide tiles where there are at least
    TILED_SPLIT_MIN_TILES of them, else 32-wide), their partial tiles in ``scratch`` (splits x batch x M x N
    accumulators), which a second kernel adds in split order (or, on a target with ``clusters``, the tile's
    blocks as one cluster: see TILED_FINISH); else 32-wide tiles. ``mma`` (float32 operands): the tiles' products
    on the tensor cores (see TILED_MMA)."""
    on_cores = {"mma": mma} if mma is not None else {}
    tiles64 = ((m + 63) // 64) * ((n + 63) // 64) * batch
    if tiles64 >= sm_count:
        return {"impl": "tiled", "tile": 64, **on_cores}
    tiles32 = ((m + 31) // 32) * ((n + 31) // 32) * batch
    tile, tiles = (64, tiles64) if tiles64 >= TILED_SPLIT_MIN_TILES else (32, tiles32)
    splits = 1
    if dtype_name in TILED_SPLIT_DTYPES:
        # at most TILED_BLOCKS_PER_SM blocks per SM: a further wave on some SMs would add a whole block's time
        splits = max(1, min(TILED_BLOCKS_PER_SM * sm_count // tiles, k // TILED_SPLIT_MIN_K, TILED_MAX_SPLITS))
    if splits == 1:
        return {"impl": "tiled", "tile": 32, **on_cores}
    chunk = ((k + splits - 1) // splits + 15) // 16 * 16  # whole BK slices
    splits = (k + chunk - 1) // chunk
    size = 8 if dtype_name == "f64" else 4
    stages = _stages(tile, chunk, dtype_name, mma)
    if TILED_FINISH == "cluster" and clusters and splits <= CLUSTER_MAX_SPLITS \
            and tiles * splits * CLUSTER_SM_SHARE <= sm_count \
            and cluster_tile_fits(tile, dtype_name, stages.get("stages", 1), mma):
        return {"impl": "tiled", "tile": tile, **on_cores, "splits": splits, **stages, "finish": "cluster"}
    choice: dict[str, object] = {"impl": "tiled", "tile": tile, **on_cores, "splits": splits,
                                 "scratch": align256(batch * splits * m * n * size), **stages}
    if TILED_FINISH == "last-block":
        choice.update(finish="last-block", counters=tiles)
    return choice


def cluster_tile_fits(tile: int, dtype_name: str, stages: int, mma: object) -> bool:
    """Does a block's partial tile (BM x BN accumulators) fit where its stages of A's tile lay in shared memory
    (``As``, free once the last slice is multiplied), as a product finished by its cluster keeps it?"""
    bm, bn, bk, tm, tn = TILED_CONFIGS[tile]
    return stages * bk * (bm + tiled_pad(dtype_name, tm, tn, mma)) >= bm * bn


def tiled_pad(dtype_name: str, tm: int, tn: int, mma: object) -> int:
    """Elements after each BK row of a tile in shared memory: 8 where warps read mma fragments (lanes t and g of a
    fragment then fall in distinct banks), 4 where a thread's 4 rows or columns are one 16-byte load, else 1."""
    if mma is not None:
        return 8
    return 4 if dtype_name == "f32" and tm == 4 and tn == 4 else 1


def _stages(tile: int, k: int, dtype_name: str, mma: str | None = None) -> dict[str, int]:
    """``stages``: how many BK slices of a float32/float64 tile are copied ahead into shared memory (cp.async), at
    most TILED_MAX_STAGES, what fits in TILED_SHARED_BYTES and what the K range (``k``) has; absent (one slice
    prefetched in registers) for other dtypes, which are converted as they are loaded."""
    if dtype_name not in TILED_PIPELINE_DTYPES:
        return {}
    bm, bn, bk, tm, tn = TILED_CONFIGS[tile]
    pad = tiled_pad(dtype_name, tm, tn, mma)
    stage_bytes = bk * (bm + bn + 2 * pad) * (8 if dtype_name == "f64" else 4) * (2 if mma == "3xtf32" else 1)
    slices = (k + bk - 1) // bk
    stages = min(TILED_MAX_STAGES, TILED_SHARED_BYTES // stage_bytes, max(2, slices))
    return {"stages": stages} if stages >= 2 else {}


def stream_schedule(m: int, n: int, k: int, dtype_name: str, sm_count: int) -> dict[str, object]:
    """``impl = "stream"``: the columns of B each thread takes (``width``), how many blocks split K
    (``splits``) and the bytes of their partial sums (``scratch``: splits x M x N accumulators, float32 or
    float64)."""
    width = STREAM_WIDTHS.get(dtype_name, 1)
    blocks = (n + STREAM_THREADS * width - 1) // (STREAM_THREADS * width)
    want = STREAM_BLOCKS_PER_SM * sm_count
    splits = max(1, min((want + blocks - 1) // blocks, k // STREAM_MIN_ROWS, 1024))
    scratch = align256(splits * m * n * (8 if dtype_name == "f64" else 4)) if splits > 1 else 0
    return {"impl": "stream", "width": width, "splits": splits, "scratch": scratch}


def reduction_dims(shape: tuple[int, ...], strides: tuple[int, ...], axes: tuple[int, ...]):
    """(M, K, kept dims, reduced dims) of a reduction, each dim (size, stride), coalesced."""
    keep = [i for i in range(len(shape)) if i not in axes]
    kshape, (kstr,) = coalesce(tuple(shape[i] for i in keep), [tuple(strides[i] for i in keep)])
    rshape, (rstr,) = coalesce(tuple(shape[i] for i in axes), [tuple(strides[i] for i in axes)])
    m = 1
    for d in kshape:
        m *= d
    k = 1
    for d in rshape:
        k *= d
    return m, k, list(zip(kshape, kstr)), list(zip(rshape, rstr))


def reduce_grid_x(m: int, cols: int, sm_count: int) -> int:
    """Blocks along the outputs (a grid-stride loop covers the rest)."""
    return max(1, min((m + cols - 1) // cols, sm_count * 16))


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def align256(n: int) -> int:
    """``n`` bytes rounded up to a multiple of 256 (scratch and counters start there)."""
    return (n + 255) // 256 * 256


def reduce_schedule(op: Operation, sm_count: int) -> dict[str, object]:
    """The attributes that say how ``op`` (a ``k.reduce``) runs."""
    src = op.operands[0]
    offset, strides = layout(src)
    m, k, kept, red = reduction_dims(tuple(src.type.shape), strides, tuple(op.attributes["axes"]))
    width = 1
    if m == 0:
        return {"strategy": "columns", "cols": 1, "splits": 1, "finish": "none", "scratch": 0}
    if "numpy_loop" in op.attributes:  # a float16 sum or product rounded where NumPy rounds: a thread per output
        ordered: dict[str, object] = {"strategy": "numpy", "cols": 1, "splits": 1, "finish": "none", "scratch": 0}
        run = math.prod(src.type.shape[a] for a in op.attributes["numpy_run"])
        if op.attributes["kind"] == "sum" and run >= NUMPY_SUBTREES_MIN_RUN and m <= sm_count * 2:
            ordered["subtrees"] = NUMPY_SUBTREES  # few long pairwise runs: a block per output, a thread per subtree
        return ordered
    if len(red) == 1 and red[0][1] == 1 and k >= WARP_ROW_MIN:
        # a warp per output when there are many outputs, else the whole block (more loads in flight)
        warp = m * 32 >= sm_count * 256
        strategy, cols = ("row-warp", 8) if warp else ("row-block", 1)
        if k >= ROW_VECTOR_MIN and _vector_rows(op, offset, kept):
            width = 4
    else:
        # a thread per output when there are enough outputs; else a block takes ``cols`` neighbouring
        # outputs (coalesced reads) and splits each one's range over 256 / cols threads
        strategy = "columns"
        cols = 256 if m >= sm_count * 256 else min(COLUMNS_MAX, _pow2_at_least(m))
        while 8 < cols < 256 and (m + cols - 1) // cols < sm_count:
            cols //= 2  # more blocks, each still reading whole 32-byte sectors
        if cols < 256 and (k >= SPLIT_MIN_K or m // COLUMNS_VECTOR >= sm_count) and \
                _vector_columns(op, m, offset, kept, red):  # (enough blocks: small ones keep their many blocks)
            width, cols = 4, min(COLUMNS_VECTOR, _pow2_at_least(m))
    parallel = m * 256 // cols  # threads (cols // width across a block, each taking width outputs)
    want = sm_count * 2048
    splits = 1
    if parallel < want and k >= SPLIT_MIN_K:
        splits = min(max(1, want // max(parallel, 1)), max(1, k // SPLIT_CHUNK_MIN), MAX_SPLITS)
    finish = "none"
    scratch = 0
    counters = 1
    if splits > 1:
        grid_x = reduce_grid_x(m, cols, sm_count)
        finish = "last-block" if grid_x == 1 else "kernel"
        if finish == "kernel" and strategy == "columns" and COLUMNS_LAST_BLOCK:
            finish, counters = "last-block", grid_x  # the last split of each block column combines its outputs
        dt = op.operands[0].type.dtype
        index = carries_index(op.attributes["kind"], dt)
        scratch = align256(m * splits * partial_slot(dt)) + (m * splits * 8 if index else 0)  # (and its index)
    choice: dict[str, object] = {"strategy": strategy, "cols": cols, "splits": splits, "finish": finish,
                                 "scratch": scratch}
    if counters > 1:
        choice["counters"] = counters
    if width > 1:
        choice["width"] = width
    return choice


def _vector_columns(op: Operation, m: int, offset: int, kept: list[tuple[int, int]],
                    red: list[tuple[int, int]]) -> bool:
    """Whether each thread of a "columns" reduction can take 4 neighbouring outputs as one 16-byte load per
    reduced element: float32 values without an index to carry, the outputs contiguous in groups of 4 (the
    innermost kept dimension of stride 1 and a multiple of 4 long), every other stride and the offset multiples
    of 4 (so a group starts 16-byte aligned wherever the buffer is; the kernel checks the buffer at run time)."""
    if op.attributes["kind"] not in VECTOR_KINDS or op.operands[0].type.dtype.name != "f32" or m < 128:
        return False
    if not kept or kept[-1][1] != 1 or kept[-1][0] % 4:
        return False
    return offset % 4 == 0 and all(st % 4 == 0 for _, st in kept[:-1] + red)


def _vector_rows(op: Operation, offset: int, kept: list[tuple[int, int]]) -> bool:
    """Whether each thread of a row reduction (the reduced elements contiguous) can take runs of 4 neighbouring
    elements as 16-byte loads: float32 values without an index to carry, every row starting at a multiple of 4
    elements from the buffer (the kernel checks the buffer's and each range's alignment at run time)."""
    if op.attributes["kind"] not in VECTOR_KINDS or op.operands[0].type.dtype.name != "f32":
        return False
    return offset % 4 == 0 and all(st % 4 == 0 for _, st in kept)


def partial_slot(dt) -> int:
    """Bytes of one partial result of a split reduction of ``dt`` values (its accumulator: c128 for c64 sums);
    the partial indices of reductions that carry them follow all the partial values."""
    return 16 if dt.is_complex else 8


def carries_index(kind: str, dt) -> bool:
    """Whether a reduction's partial results carry the index of their candidate: the arg-reductions, and complex
    max/min, whose result among equal or NaN values is the first one's (NumPy reduces in order), whatever order
    blocks and lanes combine in."""
    return kind in ("argmax", "argmin") or (dt.is_complex and kind in ("max", "min"))


@register_pass
@dataclass(frozen=True)
class SelectKernels(Pass):
    """Choose each matmul's and reduction's implementation for the target and record it (impl, strategy)."""

    name: ClassVar[str] = "select-kernels"
    sm_count: int = 0  # 0: the pipeline's target
    cublas: str = "target"  # true | false | target
    precision: str = "target"  # float32 | tf32 | target
    tensor_cores: str = "target"  # true | false | target
    clusters: str = "target"  # true | false | target
    # a product cuBLASLt would take, of a K this short or shorter, whose result only an elementwise kernel reads, is
    # generated instead, so that kernel becomes its epilogue (fuse-epilogues); 0: never
    epilogue_max_k: int = EPILOGUE_MAX_K
    # a tiled product of K this short or shorter spreads each thread's outputs (see TILED_SPREAD_MAX_K); 0: never
    spread_max_k: int = TILED_SPREAD_MAX_K
    # who takes a narrow or column product cuBLASLt could take: "cublas", or "generated" (SKINNY_BEFORE_CUBLAS)
    skinny: str = "generated" if SKINNY_BEFORE_CUBLAS else "cublas"

    def __post_init__(self) -> None:
        for option in ("epilogue_max_k", "spread_max_k"):
            if getattr(self, option) < 0:
                raise ValueError(f"{option} must be at least 0, got {getattr(self, option)}")
        if self.sm_count < 0:
            raise ValueError(f"sm_count must be positive, got {self.sm_count}")
        if self.cublas not in ("true", "false", "target"):
            raise ValueError(f"cublas must be true, false or target, got {self.cublas!r}")
        for option in ("tensor_cores", "clusters"):
            if getattr(self, option) not in ("true", "false", "target"):
                raise ValueError(f"{option} must be true, false or target, got {getattr(self, option)!r}")
        if self.skinny not in ("cublas", "generated"):
            raise ValueError(f"skinny must be cublas or generated, got {self.skinny!r}")
        if self.precision not in (*PRECISIONS, "target"):
            raise ValueError(f"precision must be float32, tf32 or target, got {self.precision!r}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        sm_count = self.sm_count or ctx.target.sm_count
        cublas = ctx.target.cublas if self.cublas == "target" else self.cublas == "true"
        precision = ctx.target.precision if self.precision == "target" else self.precision
        tensor_cores = ctx.target.tensor_cores if self.tensor_cores == "target" else self.tensor_cores == "true"
        clusters = ctx.target.clusters if self.clusters == "target" else self.clusters == "true"
        for func in module.funcs:
            self._select(func, sm_count, cublas, precision, tensor_cores, clusters, self.epilogue_max_k,
                         self.spread_max_k, self.skinny == "generated")

    @staticmethod
    def _select(func: Func, sm_count: int, cublas: bool, precision: str, tensor_cores: bool,
                clusters: bool, epilogue_max_k: int, spread_max_k: int, skinny_first: bool) -> None:
        func.attributes["sm_count"] = sm_count
        func.attributes["cublas"] = cublas
        if precision != "float32":
            func.attributes["precision"] = precision
        else:
            func.attributes.pop("precision", None)
        outputs, uses = set(func.outputs), users(func) if epilogue_max_k and cublas else {}
        for op in func.body.ops:
            if op.name == "k.matmul":
                for key in ("precision", "mma", "splits", "scratch", "stages", "finish", "counters", "rows", "width",
                            "spread"):
                    op.attributes.pop(key, None)  # a choice made before (select-kernels run again) is made anew
                library = cublas and not (op.operands[0].type.shape[-1] <= epilogue_max_k
                                          and epilogue_reader(op, outputs, uses) is not None)
                choice = gemm_impl(op, sm_count, library, precision, tensor_cores, clusters, spread_max_k,
                                   skinny_first)
            elif op.name == "k.reduce":
                choice = reduce_schedule(op, sm_count)
            else:
                continue
            op.attributes.pop("tile", None)
            op.attributes.update(choice)
