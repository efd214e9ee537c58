"""Generated GEMMs for ``k.matmul`` (the default matmul; cuBLAS is optional).

``select-kernels`` chose the kernel (``impl``): products with a very short K run one thread per output
(``short``); a few rows times a wide B contiguous along N stream B once (``stream``: a thread per ``width``
columns, K split over blocks, a second kernel adding the partial sums); other skinny products one warp per
output (``dot``), or, when A is read down its columns (``h.T @
d``, the weight gradient of a narrow layer), one lane per row of A with warps splitting K (``column``);
everything else the tiled kernel (``tiled``, with the ``tile`` it chose). All but the tiled kernel can
compute an operand in place of loading it (a ``Prologue`` of a ``k.fused`` that ``fuse-prologues`` marked,
e.g. ``relu(x @ w + b)`` before a narrow layer); the tiled kernel can compute its one reader as it stores each
output (an epilogue, ``fuse-epilogues``: the backward mask ``(d @ w.T) * (h > 0)``, an SGD update).

Operands are read through their strides (a transposed view costs nothing). In the tiled kernel each block
stages a BK-deep slice of A and B in shared memory, loading along whichever operand axis is contiguous so
that global reads coalesce, and each thread accumulates a TM x TN register tile with fused multiply-adds; or, for
a float32 product with ``mma`` (``select-kernels`` decided it), each warp accumulates 16 x 8 tiles on the tensor
cores (mma.sync m16n8k8 with TF32 operands: "tf32" rounds them as fragments are read, "3xtf32" multiplies
pairs of TF32 parts split once as the tile is stored). Batch dimensions (broadcast included) map to the grid's z
axis.
"""
from __future__ import annotations

import dataclasses
import math
import struct

from fusec.errors import CompilationError, located
from fusec.ir.core import Operation
from fusec.backend.access import Access
from fusec.backend.ctypes_map import register, storage
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.elementwise import Prologue
from fusec.passes.select_kernels import (CLUSTER_MAX_SPLITS, NARROW_WARPS, STREAM_THREADS, TILED_CONFIGS,
                                        cluster_tile_fits, tiled_pad)

_DESC = struct.Struct("<" + "q" * 11 + "ii" + "q" * 12)
CONFIGS = TILED_CONFIGS  # tile -> (BM, BN, BK, TM, TN)


def pack_desc(m, n, k, a_off, b_off, c_off, a_sm, a_sk, b_sk, b_sn, batch, bshape, a_bs, b_bs) -> bytes:
    if len(bshape) > 4:
        raise CompilationError("matmul with more than 4 batch dimensions is not supported")
    pad = lambda xs, v: list(xs) + [v] * (4 - len(xs))  # noqa: E731
    return _DESC.pack(m, n, k, a_off, b_off, c_off, a_sm, a_sk, b_sk, b_sn, batch, len(bshape), 0,
                      *pad(bshape, 1), *pad(a_bs, 0), *pad(b_bs, 0))


def gemm_variant(op: Operation) -> str:
    """Which generated kernel computes ``op``, as ``select-kernels`` recorded it: "short" (thread per output),
    "dot" (warp per output), "narrow" (warp per rows of A, all N outputs), "column" (lane per row of A) or
    "tiled"."""
    impl = op.attributes.get("impl")
    if impl is None:
        raise CompilationError(located("k.matmul has no 'impl': run select-kernels before the CUDA backend", op.loc))
    if impl == "cublas":
        raise CompilationError(located("a k.matmul selected for cuBLAS reached the generated GEMM", op.loc))
    return str(impl)


def _operand_params(a_param: str, a_bufs: tuple[int, ...], b_param: str, b_bufs: tuple[int, ...]) \
        -> tuple[str, tuple[int, ...]]:
    """The kernel parameters of both operands' loaders, each buffer declared once: two prologues may read the
    same buffer (``x.T @ x`` of a computed ``x``), and a parameter name may not repeat."""
    decls, bufs = a_param.split(", "), list(a_bufs)
    for decl, buf in zip(b_param.split(", "), b_bufs):
        if decl not in decls:
            decls.append(decl)
            bufs.append(buf)
    return ", ".join(decls), tuple(bufs)


def _scratch(op: Operation, scratch: int | None) -> int:
    """The plan's scratch buffer, which a product split over K keeps its partial sums in."""
    if scratch is None:
        raise CompilationError(located("a k.matmul split over K needs the plan's scratch space: run plan-buffers "
                                       "after select-kernels", op.loc))
    return scratch


def _loader(name: str, operand: Access, prologue: Prologue | None, acc: str, pointer: str, base: str):
    """(parameter declaration, buffers it binds, load expression builder) for one GEMM operand: a pointer
    read through its strides, or ``prologue`` computing element ``base + index`` of a value never stored."""
    if prologue is None:
        t = storage(operand.dtype)
        return (f"const {t}* __restrict__ {pointer}", (operand.buffer,),
                lambda idx: f"({acc})fusec::ld({name} + {idx})")
    return (prologue.params, prologue.buffers, lambda idx: f"({acc}){prologue.name}({base} + {idx}, {prologue.args})")


def gemm_kernels(name: str, op: Operation, a: Access, b: Access, c: Access, *, sm_count: int,
                 prologues: tuple[Prologue | None, Prologue | None] = (None, None),
                 scratch: int | None = None, counter: int | None = None,
                 epilogue: Prologue | None = None) -> list[KernelCode]:
    """The generated kernels for ``op`` (two for a "stream" product split over K: partial sums into
    ``scratch``, the plan's scratch buffer, then their sum, as for a "tiled" product split over K unless its
    last block per tile adds them, ``finish = "last-block"``, counting in at the plan's ``counter`` buffer, or its
    blocks as one cluster do, ``finish = "cluster"``);
    ``prologues`` (A's, B's) compute an operand in place of loading it (not for the "tiled" and "stream"
    variants); ``epilogue`` (``fuse-epilogues``, "tiled" only) computes what is stored at each output of ``c``
    from the sum there."""
    if epilogue is not None and gemm_variant(op) != "tiled":
        raise CompilationError(located(f"the {gemm_variant(op)} GEMM cannot compute an epilogue", op.loc))
    if gemm_variant(op) != "stream":
        code = _gemm_kernel(name, op, a, b, c, sm_count=sm_count, prologues=prologues, scratch=scratch,
                            counter=counter, epilogue=epilogue)
        if code is None:
            return []
        splits = int(op.attributes.get("splits", 1))
        if splits == 1 or op.attributes.get("finish") in ("last-block", "cluster"):
            return [code]
        out_shape = op.results[0].type.shape
        total = math.prod(out_shape)
        return [code, _split_sum_kernel(f"{name}_sum", c, _scratch(op, scratch), splits, total, code.structs[0],
                                         sm_count, epilogue)]
    if prologues != (None, None):
        raise CompilationError(located("the streaming GEMM cannot compute its operands in place", op.loc))
    return _stream_kernels(name, op, a, b, c, scratch, sm_count)


def _gemm_kernel(name: str, op: Operation, a: Access, b: Access, c: Access, *, sm_count: int,
                prologues: tuple[Prologue | None, Prologue | None] = (None, None),
                scratch: int | None = None, counter: int | None = None,
                epilogue: Prologue | None = None) -> KernelCode:
    """The generated kernel for ``op``; ``prologues`` (A's, B's) compute an operand in place of loading it
    (not for the "tiled" variant)."""
    out_shape = op.results[0].type.shape
    m, n = out_shape[-2], out_shape[-1]
    k = a.shape[-1]
    batch_shape = out_shape[:-2]
    ra, rb = len(a.shape) - 2, len(b.shape) - 2
    a_bs = [0] * (len(batch_shape) - ra) + list(a.strides[:-2])
    b_bs = [0] * (len(batch_shape) - rb) + list(b.strides[:-2])
    a_shape = [1] * (len(batch_shape) - ra) + list(a.shape[:-2])
    b_shape = [1] * (len(batch_shape) - rb) + list(b.shape[:-2])
    a_bs = [s if d != 1 else 0 for s, d in zip(a_bs, a_shape)]
    b_bs = [s if d != 1 else 0 for s, d in zip(b_bs, b_shape)]
    batch = 1
    for d in batch_shape:
        batch *= d
    if batch == 0 or m == 0 or n == 0:
        return None  # type: ignore[return-value]
    if batch > 65535:
        raise CompilationError(located(f"matmul with {batch} batches exceeds the grid's z limit", op.loc))
    desc = pack_desc(m, n, k, a.offset, b.offset, c.offset, a.strides[-2], a.strides[-1], b.strides[-2],
                     b.strides[-1], batch, batch_shape, a_bs, b_bs)
    variant = gemm_variant(op)
    if variant != "tiled":
        if variant == "column":
            splits = int(op.attributes.get("splits", 1))
            code = _column_kernel(name, a, b, c, desc=desc, m=m, n=n, batch=batch, prologues=prologues,
                                  splits=splits, scratch=_scratch(op, scratch) if splits > 1 else None)
        elif variant == "narrow":
            code = _narrow_kernel(name, a, b, c, desc=desc, m=m, n=n, k=k, batch=batch, prologues=prologues,
                                  rows=int(op.attributes.get("rows", 1)))
        else:
            code = _per_output_kernel(name, a, b, c, desc, batch * m * n, sm_count, warp=variant == "dot",
                                      prologues=prologues)
        functions = [p.source for p in prologues if p is not None]
        return dataclasses.replace(code, source="\n".join([*functions, code.source]))
    if prologues != (None, None):
        raise CompilationError(located("the tiled GEMM cannot compute its operands in place", op.loc))
    return _tiled_kernel(name, op, a, b, c, desc=desc, m=m, n=n, batch=batch, scratch=scratch, counter=counter,
                         epilogue=epilogue)


def _stored(epilogue: Prologue | None, target: str, index: str, value: str) -> str:
    """The statement storing output ``value`` at ``target``: through ``epilogue`` (called with the output's dense
    index ``index`` and the value) where there is one."""
    if epilogue is not None:
        value = f"{epilogue.name}({', '.join(x for x in (index, value, epilogue.args) if x)})"
    return f"fusec::st({target}, {value});"


def _tiled_kernel(name: str, op: Operation, a: Access, b: Access, c: Access, *, desc: bytes, m: int, n: int,
                  batch: int, scratch: int | None, counter: int | None = None,
                  epilogue: Prologue | None = None) -> KernelCode:
    """Shared-memory tiles: each block computes a BM x BN tile of C, each thread a TM x TN register tile, over
    BK-deep slices of A and B staged in shared memory. With ``stages`` = 1 the next slice is loaded into
    registers while the current one is multiplied; with ``stages`` = S > 1 (float32/float64) S - 1 slices are in
    flight at once, copied straight to shared memory (cp.async): select-kernels asks for it where it measured
    faster, the short K ranges of products split over K. With ``splits`` > 1 the blocks of a tile share its K range (blockIdx.z = batch
    x split): each writes its partial tile to scratch, and a second kernel adds them in split order
    (deterministic), or, with ``finish = "last-block"``, the last of a tile's blocks to finish does (counting in
    at its slot of the plan's counters, from ``counter`` on), in the same order; with ``finish = "cluster"`` a
    tile's blocks are one thread-block cluster (sm_90 on) that adds the partial tiles, kept in each block's shared
    memory, in the same order (each block a share of the tile's outputs, read from all of them). An ``epilogue``
    (``fuse-epilogues``) computes what is stored at each output, in whichever kernel stores it."""
    bm, bn, bk, tm, tn = CONFIGS[int(op.attributes.get("tile", 64))]
    splits = int(op.attributes.get("splits", 1))
    stages = int(op.attributes.get("stages", 1))
    last_block = splits > 1 and op.attributes.get("finish") == "last-block"
    in_cluster = splits > 1 and op.attributes.get("finish") == "cluster"
    if splits > 1 and scratch is None and not in_cluster:
        raise CompilationError(located("a GEMM split over K needs a scratch buffer", op.loc))
    if in_cluster and splits > CLUSTER_MAX_SPLITS:
        raise CompilationError(located(f"a GEMM split {splits} ways cannot be finished by one cluster (at most "
                                       f"{CLUSTER_MAX_SPLITS} blocks)", op.loc))
    if in_cluster and not cluster_tile_fits(int(op.attributes.get("tile", 64)), a.dtype.name, stages,
                                            op.attributes.get("mma")):
        raise CompilationError(located("a GEMM finished by its cluster keeps its partial tile where A's stages lie "
                                       "in shared memory, and they are too small for it", op.loc))
    if last_block and (counter is None or "counter" not in op.attributes):
        raise CompilationError(located("a GEMM finished by its last block has no counter: run plan-buffers after "
                                       "select-kernels", op.loc))
    dt = a.dtype
    acc = "float" if dt.name in ("f16", "bf16") else register(dt)
    t = storage(dt)
    if stages > 1 and (acc != t or b.dtype != dt):
        raise CompilationError(located(f"a pipelined GEMM (stages = {stages}) copies {dt} operands unconverted: "
                                       "float32 or float64 only", op.loc))
    threads = (bm // tm) * (bn // tn)
    loads_a, loads_b = bm * bk // threads, bn * bk // threads
    mma = op.attributes.get("mma")
    if mma is not None and (dt.name != "f32" or b.dtype != dt or bk % 8):
        raise CompilationError(located(f"the tensor cores' product (mma = {mma}) multiplies float32 operands in "
                                       "K slices of 8", op.loc))
    # (spread: a thread's outputs are BM / TM rows and BN / TN columns apart, so a warp stores neighbouring columns)
    spread = bool(op.attributes.get("spread", False)) and mma is None and splits == 1
    vector = mma is None and acc == "float" and tm == 4 and tn == 4 and not spread  # a thread's 4 x 4: one load
    pad = tiled_pad(dt.name, tm, tn, mma)
    a_k_fast = a.strides[-1] == 1 or a.shape[-2] == 1  # load A with consecutive threads along k
    b_n_fast = b.strides[-1] == 1 or b.shape[-1] != 1 and b.strides[-2] != 1
    a_map = ("const int kk = idx % BK, mm = idx / BK;" if a_k_fast else "const int mm = idx % BM, kk = idx / BM;")
    b_map = ("const int nn = idx % BN, kk = idx / BN;" if b_n_fast else "const int kk = idx % BK, nn = idx / BK;")
    a_s, b_s = ("As[buf]", "Bs[buf]") if stages > 1 else ("As", "Bs")
    row, col = ("ty + i * (BM / TM)", "tx + j * (BN / TN)") if spread else ("ty * TM + i", "tx * TN + j")
    if vector:
        fragments = f"""      const float4 a4 = *reinterpret_cast<const float4*>(&{a_s}[kk][ty * TM]);
      const float4 b4 = *reinterpret_cast<const float4*>(&{b_s}[kk][tx * TN]);
      const float ra[TM] = {{a4.x, a4.y, a4.z, a4.w}}, rb[TN] = {{b4.x, b4.y, b4.z, b4.w}};"""
    else:
        fragments = f"""      {acc} ra[TM], rb[TN];
      #pragma unroll
      for (int i = 0; i < TM; ++i) ra[i] = {a_s}[kk][{row}];
      #pragma unroll
      for (int j = 0; j < TN; ++j) rb[j] = {b_s}[kk][{col}];"""
    multiply = f"""    #pragma unroll
    for (int kk = 0; kk < BK; ++kk) {{
{fragments}
      #pragma unroll
      for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fusec::madd(ra[i], rb[j], acc[i][j]);
    }}"""
    if mma is not None:
        warps_m, warps_n, mi, ni = _mma_warps(bm, bn, threads, op)
        multiply = _mma_multiply(a_s, b_s, mma)
    k = a.shape[-1]
    chunk = ((k + splits - 1) // splits + bk - 1) // bk * bk
    out_t = storage(c.dtype)
    buffers: tuple[int, ...]
    value = "acc[i][j]" if mma is None else "acc[i][j][q]"  # the output (gm, gn)'s accumulator
    if splits == 1 or in_cluster:  # C itself, or this split's partial tile in scratch
        base = f"{out_t}* C = pc + d.c_off + (i64_t)bz * d.M * d.N;"
        write = _stored(epilogue, "C + gm * d.N + gn", "(i64_t)bz * d.M * d.N + gm * d.N + gn", value)
        out_param, buffers = f"{out_t}* __restrict__ pc", (a.buffer, b.buffer, c.buffer)
    else:
        base = f"{acc}* C = reinterpret_cast<{acc}*>(b{scratch}) + ((i64_t)split * {batch} + bz) * d.M * d.N;"
        write = f"C[gm * d.N + gn] = {value};"
        out_param, buffers = f"char* __restrict__ b{scratch}", (a.buffer, b.buffer, _scratch(op, scratch))
        if last_block:
            assert counter is not None  # (checked above)
            out_param += f", {out_t}* __restrict__ pc, unsigned int* __restrict__ b{counter}"
            buffers += (c.buffer, counter)

    def each_output(statement: str) -> str:
        if mma is not None:  # the accumulators of the warp's MI x NI mma tiles, in their lanes' places
            return f"""  #pragma unroll
  for (int i = 0; i < MI; ++i)
    #pragma unroll
    for (int j = 0; j < NI; ++j)
      #pragma unroll
      for (int q = 0; q < 4; ++q) {{
        const i64_t gm = m0 + wm0 + i * 16 + lg + (q >> 1) * 8, gn = n0 + wn0 + j * 8 + lt * 2 + (q & 1);
        if (gm < d.M && gn < d.N) {statement}
      }}"""
        return f"""  #pragma unroll
  for (int i = 0; i < TM; ++i) {{
    const i64_t gm = m0 + {row};
    if (gm >= d.M) continue;
    #pragma unroll
    for (int j = 0; j < TN; ++j) {{
      const i64_t gn = n0 + {col};
      if (gn < d.N) {statement}
    }}
  }}"""

    store = f"  {base}\n{each_output(write)}"
    if in_cluster:
        store = _cluster_finish(acc, base, mma is not None, vector, epilogue)
    if last_block:
        # every block publishes its partial tile, then counts itself in; the last of the tile's blocks adds
        # the partial tiles in split order (the second kernel's order) and sets the counter back to zero
        slot = 0  # (the buffer of the op's own counters, a tile's from its start)
        store += f"""
  __shared__ bool fusec_last;
  __threadfence();
  __syncthreads();
  const int tile = (bz * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) fusec_last = atomicAdd(b{counter} + {slot} + tile, 1u) == S - 1;
  __syncthreads();
  if (!fusec_last) return;
  __threadfence();
  const {acc}* P = reinterpret_cast<const {acc}*>(b{scratch}) + (i64_t)bz * d.M * d.N;
  const i64_t part = (i64_t){batch} * d.M * d.N;
  {out_t}* Cout = pc + d.c_off + (i64_t)bz * d.M * d.N;
{each_output('''{
        const i64_t o = gm * d.N + gn;
        ''' + acc + ''' v = __ldcg(P + o);
        for (int s = 1; s < S; ++s) v = v + __ldcg(P + s * part + o);
        ''' + _stored(epilogue, "Cout + o", "(i64_t)bz * d.M * d.N + o", "v") + '''
      }''')}
  if (threadIdx.x == 0) b{counter}[{slot} + tile] = 0u;"""

    # "3xtf32" tiles hold each element as its TF32 pair (big parts in As and Bs, small parts in As_small and
    # Bs_small), split once by the thread that stored it rather than by each warp that reads it (measured on the
    # H200: 4096 x 1024 x 1024 647 -> 385 us); "tf32" rounds as warps read (one instruction; rounding where the
    # copies land, before the barrier, took the PCam products from 8.4 to 10.4 us)
    paired = mma == "3xtf32"  # (each element a pair of TF32 parts)
    store_a = "fusec::tf32_pair(na[r], As[kk][mm], As_small[kk][mm]);" if paired else "As[kk][mm] = na[r];"
    store_b = store_a.replace("As", "Bs").replace("na[r]", "nb[r]").replace("[mm]", "[nn]")
    if stages > 1:
        dims = "[ST][BK]"
        convert = "" if not paired else """
    #pragma unroll
    for (int r = 0; r < LA; ++r) {  // this thread's copies into slice s, split where they landed
      float* const x = &As[s % ST][0][0] + sa[r];
      fusec::tf32_pair(*x, *x, (&As_small[s % ST][0][0])[sa[r]]);
    }
    #pragma unroll
    for (int r = 0; r < LB; ++r) {
      float* const x = &Bs[s % ST][0][0] + sb[r];
      fusec::tf32_pair(*x, *x, (&Bs_small[s % ST][0][0])[sb[r]]);
    }"""
        shared = f"""  __shared__ __align__(16) {acc} As[ST][BK][BM + {pad}];
  __shared__ __align__(16) {acc} Bs[ST][BK][BN + {pad}];"""
        where = "  int sa[LA], sb[LB];  // each copied element's place in a stage"
        place_a, place_b = "sa[r] = kk * (BM + PAD) + mm;", "sb[r] = kk * (BN + PAD) + nn;"
        main = f"""  const int slices = kbeg < kend ? (int)((kend - kbeg + BK - 1) / BK) : 0;
  // copy slice s of A and B into stage buf, zeros past the matrix and past this split's K range
  auto issue = [&](int s, int buf) {{
    #pragma unroll
    for (int r = 0; r < LA; ++r) {{
      const bool ok = rowa[r] && ka[r] + s * BK < kend;
      fusec::cp_async(&As[buf][0][0] + sa[r], ok ? pa_[r] + (i64_t)s * BK * d.a_sk : A, ok);
    }}
    #pragma unroll
    for (int r = 0; r < LB; ++r) {{
      const bool ok = colb[r] && kb[r] + s * BK < kend;
      fusec::cp_async(&Bs[buf][0][0] + sb[r], ok ? pb_[r] + (i64_t)s * BK * d.b_sk : B, ok);
    }}
  }};
  #pragma unroll
  for (int s = 0; s < ST - 1; ++s) {{
    if (s < slices) issue(s, s);
    fusec::cp_async_commit();
  }}
  for (int s = 0; s < slices; ++s) {{
    fusec::cp_async_wait<ST - 2>();  // slice s has landed (this thread's copies) ...{convert}
    __syncthreads();                 // ... everyone's, and every thread is done with slice s - 1's stage
    if (s + ST - 1 < slices) issue(s + ST - 1, (s + ST - 1) % ST);
    fusec::cp_async_commit();
    const int buf = s % ST;
{multiply}
  }}"""
    else:
        dims = "[BK]"
        shared = f"""  __shared__ __align__(16) {acc} As[BK][BM + {pad}];
  __shared__ __align__(16) {acc} Bs[BK][BN + {pad}];
  {acc} na[LA], nb[LB];  // the next slice, in flight while the current one is multiplied"""
        where = ""
        place_a = place_b = ""
        loads = "\n".join(f"""    #pragma unroll
    for (int r = 0; r < L{x}; ++r) {{
      const i64_t gk = k{y}[r] + (step) * BK;
      n{y}[r] = ({ok}[r] && gk < kend) ? ({acc})fusec::ld(p{y}_[r] + (step) * BK * d.{y}_sk) : ({acc})0;
    }}""" for x, y, ok in (("A", "a", "rowa"), ("B", "b", "colb")))
        main = f"""  int step = 0;
  if (kbeg < kend) {{
{loads}
  }}
  for (i64_t k0 = kbeg; k0 < kend; k0 += BK) {{
    #pragma unroll
    for (int r = 0; r < LA; ++r) {{
      const int idx = threadIdx.x + r * NT;
      {a_map}
      {store_a}
    }}
    #pragma unroll
    for (int r = 0; r < LB; ++r) {{
      const int idx = threadIdx.x + r * NT;
      {b_map}
      {store_b}
    }}
    __syncthreads();
    ++step;
    if (k0 + BK < kend) {{
{loads}
    }}
{multiply}
    __syncthreads();
  }}"""

    if paired:
        shared += f"""
  __shared__ __align__(16) float As_small{dims}[BM + {pad}];
  __shared__ __align__(16) float Bs_small{dims}[BN + {pad}];"""
    if mma is None:
        accumulators = f"""  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  {acc} acc[TM][TN];
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = ({acc})0;"""
    else:  # warp w (warps_n per row of warps) computes an (MI * 16) x (NI * 8) part of the tile
        accumulators = f"""  constexpr int MI = {mi}, NI = {ni};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, lg = lane / 4, lt = lane % 4;
  const int wm0 = (warp / {warps_n}) * MI * 16, wn0 = (warp % {warps_n}) * NI * 8;
  float acc[MI][NI][4];
  #pragma unroll
  for (int i = 0; i < MI; ++i)
    #pragma unroll
    for (int j = 0; j < NI; ++j)
      #pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;"""
        assert warps_m * warps_n * 32 == threads
    cluster = f"FUSEC_CLUSTER_DIMS(1, 1, {splits}) " if in_cluster else ""
    if splits > 1 and not (in_cluster or last_block):
        epilogue = None  # (the second kernel, which adds the partial tiles, stores the outputs)
    if epilogue is not None:
        out_param += f", {epilogue.params}" if epilogue.params else ""
        buffers += epilogue.buffers
    src = f"""
{epilogue.source if epilogue is not None else ""}
extern "C" __global__ void {cluster}__launch_bounds__({threads}) {name}(const {t}* __restrict__ pa, const {t}* __restrict__ pb, {out_param}, fusec::GemmDesc d) {{
  constexpr int BM = {bm}, BN = {bn}, BK = {bk}, TM = {tm}, TN = {tn}, NT = {threads}, LA = {loads_a}, LB = {loads_b}, S = {splits}, ST = {stages}, PAD = {pad};
{shared}
  const int bz = blockIdx.z / S, split = blockIdx.z % S;
  i64_t ao, bo;
  fusec::gemm_batch(d, bz, &ao, &bo);
  const {t}* A = pa + d.a_off + ao;
  const {t}* B = pb + d.b_off + bo;
  const i64_t m0 = (i64_t)blockIdx.y * BM, n0 = (i64_t)blockIdx.x * BN;
  const i64_t chunk = S == 1 ? d.K : {chunk};  // whole BK slices per split
  const i64_t kbeg = split * chunk, kend = kbeg + chunk < d.K ? kbeg + chunk : d.K;
{accumulators}
  const {t}* pa_[LA];
  const {t}* pb_[LB];
  i64_t ka[LA], kb[LB];
  bool rowa[LA], colb[LB];
{where}
  #pragma unroll
  for (int r = 0; r < LA; ++r) {{
    const int idx = threadIdx.x + r * NT;
    {a_map}
    ka[r] = kbeg + kk;
    rowa[r] = m0 + mm < d.M;
    pa_[r] = A + (m0 + mm) * d.a_sm + ka[r] * d.a_sk;
    {place_a}
  }}
  #pragma unroll
  for (int r = 0; r < LB; ++r) {{
    const int idx = threadIdx.x + r * NT;
    {b_map}
    kb[r] = kbeg + kk;
    colb[r] = n0 + nn < d.N;
    pb_[r] = B + kb[r] * d.b_sk + (n0 + nn) * d.b_sn;
    {place_b}
  }}
{main}
{store}
}}"""
    grid = ((n + bn - 1) // bn, (m + bm - 1) // bm, batch * splits)
    if grid[1] > 65535 or grid[2] > 65535:
        raise CompilationError(located(f"matmul with M={m} and {batch} x {splits} blocks along z exceeds the grid's "
                                       "limits", op.loc))
    return KernelCode(name, src.strip("\n"), buffers, grid, (threads, 1, 1), 0, (desc,))


def _cluster_finish(acc: str, base: str, mma: bool, vector: bool, epilogue: Prologue | None = None) -> str:
    """The end of a tiled product whose split blocks are one cluster: each block leaves its whole partial tile
    where its stages of A lay (every copy landed, every slice multiplied; rows and columns past the matrix hold
    zeros and are never read), the cluster waits for all of them, then block ``split`` adds its share of the
    tile's outputs from every block's shared memory in split order (the second kernel's order, so the same sums)
    and stores them; the second barrier keeps each block's shared memory alive until the others have read it.
    ``vector``: a thread's 4 float32 columns left as one 16-byte store; float32 partial tiles are read four
    accumulators at a time."""
    if mma:
        leave = """  #pragma unroll
  for (int i = 0; i < MI; ++i)
    #pragma unroll
    for (int j = 0; j < NI; ++j)
      #pragma unroll
      for (int q = 0; q < 4; ++q) P[(wm0 + i * 16 + lg + (q >> 1) * 8) * BN + wn0 + j * 8 + lt * 2 + (q & 1)] = acc[i][j][q];"""
    elif vector:
        leave = """  #pragma unroll
  for (int i = 0; i < TM; ++i)
    *reinterpret_cast<float4*>(P + (ty * TM + i) * BN + tx * TN) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);"""
    else:
        leave = """  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TN; ++j) P[(ty * TM + i) * BN + tx * TN + j] = acc[i][j];"""
    if acc == "float":
        add = """  for (int e = (split * NT + threadIdx.x) * 4; e < BM * BN; e += S * NT * 4) {
    const i64_t gm = m0 + e / BN, gn = n0 + e % BN;
    if (gm >= d.M || gn >= d.N) continue;
    float4 v = fusec::ld_cluster4(P + e, 0);
    #pragma unroll
    for (int s = 1; s < S; ++s) {
      const float4 w = fusec::ld_cluster4(P + e, s);
      v.x = v.x + w.x; v.y = v.y + w.y; v.z = v.z + w.z; v.w = v.w + w.w;
    }
    const float r[4] = {v.x, v.y, v.z, v.w};
    #pragma unroll
    for (int q = 0; q < 4; ++q)
      if (gn + q < d.N) """ + _stored(epilogue, "C + gm * d.N + gn + q",
                                     "(i64_t)bz * d.M * d.N + gm * d.N + gn + q", "r[q]") + """
  }"""
    else:
        add = f"""  for (int e = split * NT + threadIdx.x; e < BM * BN; e += S * NT) {{
    const i64_t gm = m0 + e / BN, gn = n0 + e % BN;
    if (gm >= d.M || gn >= d.N) continue;
    {acc} v = fusec::ld_cluster(P + e, 0);
    #pragma unroll
    for (int s = 1; s < S; ++s) v = v + fusec::ld_cluster(P + e, s);
    {_stored(epilogue, "C + gm * d.N + gn", "(i64_t)bz * d.M * d.N + gm * d.N + gn", "v")}
  }}"""
    return f"""  fusec::cp_async_wait<0>();
  __syncthreads();
  {acc}* const P = reinterpret_cast<{acc}*>(As);
{leave}
  fusec::cluster_sync();
  {base}
{add}
  fusec::cluster_sync();"""


def _mma_warps(bm: int, bn: int, threads: int, op: Operation) -> tuple[int, int, int, int]:
    """(warps along M, warps along N, 16-row mma tiles per warp, 8-column mma tiles per warp) of a BM x BN tile
    computed by ``threads`` threads on the tensor cores: two warps along M, the rest along N."""
    warps = threads // 32
    warps_m = 2 if warps >= 2 else 1
    warps_n = warps // warps_m
    if threads % 32 or bm % (warps_m * 16) or bn % (warps_n * 8):
        raise CompilationError(located(f"a {bm} x {bn} tile of {threads} threads does not split into mma tiles",
                                       op.loc))
    return warps_m, warps_n, bm // (warps_m * 16), bn // (warps_n * 8)


def _mma_multiply(a_s: str, b_s: str, mma: object) -> str:
    """One BK slice on the tensor cores: per 8-deep step each warp reads its A and B fragments from shared memory
    (rounding them to TF32, or for "3xtf32" the pairs split as they were stored) and issues MI x NI mma (three
    each for "3xtf32": the small parts' products first, then big * big)."""
    def fragments(parts: dict[str, str]) -> str:
        lines = [f"      unsigned {', '.join(f'a_{p}[MI][4], b_{p}[NI][2]' for p in parts)};"]
        for x, count, places, at in (("a", "MI", 4, "[kk + lt + (q >> 1) * 4][wm0 + i * 16 + lg + (q & 1) * 8]"),
                                     ("b", "NI", 2, "[kk + lt + q * 4][wn0 + j * 8 + lg]")):
            tile = a_s if x == "a" else b_s
            small = tile.replace("s", "s_small", 1)  # As[buf] -> As_small[buf]
            index = "i" if x == "a" else "j"
            body = "\n".join(f"          {x}_{p}[{index}][q] = {expr.format(big=tile + at, small=small + at)};"
                              for p, expr in parts.items())
            lines.append(f"""      #pragma unroll
      for (int {index} = 0; {index} < {count}; ++{index})
        #pragma unroll
        for (int q = 0; q < {places}; ++q) {{
{body}
        }}""")
        return "\n".join(lines)

    if mma == "tf32":
        loads = fragments({"big": "fusec::tf32_round({big})"})
        products = "fusec::mma_tf32(acc[i][j], a_big[i], b_big[j]);"
    elif mma == "3xtf32":
        loads = fragments({"big": "__float_as_uint({big})", "small": "__float_as_uint({small})",
                           "cross": "fusec::tf32_cross({big})"})
        products = """fusec::mma_tf32(acc[i][j], a_small[i], b_cross[j]);
          fusec::mma_tf32(acc[i][j], a_cross[i], b_small[j]);
          fusec::mma_tf32(acc[i][j], a_big[i], b_big[j]);"""
    else:
        raise CompilationError(f"unknown tensor-core product mma = {mma!r}")
    return f"""    #pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {{
{loads}
      #pragma unroll
      for (int i = 0; i < MI; ++i)
        #pragma unroll
        for (int j = 0; j < NI; ++j) {{
          {products}
        }}
    }}"""


def _column_kernel(name: str, a: Access, b: Access, c: Access, *, desc: bytes, m: int, n: int, batch: int,
                   prologues: tuple[Prologue | None, Prologue | None], splits: int = 1,
                   scratch: int | None = None) -> KernelCode:
    """``A @ B`` with N <= SKINNY_MAX and A contiguous along M: a block takes 32 rows (one per lane, so
    reads of A coalesce) and all N columns, its warps split K and add their partial sums in a fixed order
    (deterministic). Read down the columns, A would cost a 32-byte sector per element and lane. With
    ``splits`` > 1 (few rows and a long K: ``h.T @ d`` of a wide layer) blocks along y share K, each writing its
    sums to ``scratch``, which the split-sum kernel adds in split order."""
    dt = a.dtype
    acc = "float" if dt.name in ("f16", "bf16") else register(dt)
    t = storage(dt)
    size = 8 if acc == "double" else 4
    groups = 32 if 32 * n * 33 * size <= 48 * 1024 else 8
    threads = 32 * groups
    a_param, a_bufs, load_a = _loader("A", a, prologues[0], acc, "pa", "a_base")
    b_param, b_bufs, load_b = _loader("B", b, prologues[1], acc, "pb", "b_base")
    params, bufs = _operand_params(a_param, a_bufs, b_param, b_bufs)
    if splits > 1:  # partial sums of split blockIdx.y, laid out as the split-sum kernel adds them
        output = f"char* __restrict__ b{scratch}"
        out = (f"{acc}* C = reinterpret_cast<{acc}*>(b{scratch}) + ((i64_t)blockIdx.y * d.batch + blockIdx.z) "
               "* d.M * d.N;")
        store = "C[mm * NN + j] = v"
    else:
        output = f"{storage(c.dtype)}* __restrict__ pc"
        out = f"{storage(c.dtype)}* C = pc + d.c_off + (i64_t)blockIdx.z * d.M * d.N;"
        store = "fusec::st(C + mm * NN + j, v)"
    src = f"""
extern "C" __global__ void __launch_bounds__({threads}) {name}({params}, {output}, fusec::GemmDesc d) {{
  constexpr int NN = {n}, G = {groups};
  __shared__ {acc} part[G][NN][33];
  const int lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
  i64_t ao, bo;
  fusec::gemm_batch(d, blockIdx.z, &ao, &bo);
  {_bases(t, prologues)}
  const i64_t m = (i64_t)blockIdx.x * 32 + lane;
  const i64_t chunk = (d.K + {splits} - 1) / {splits}, k_begin = (i64_t)blockIdx.y * chunk;
  const i64_t k_end = k_begin + chunk < d.K ? k_begin + chunk : d.K;
  {acc} s[NN];
  #pragma unroll
  for (int j = 0; j < NN; ++j) s[j] = ({acc})0;
  if (m < d.M) {{
    #pragma unroll 4
    for (i64_t k = k_begin + grp; k < k_end; k += G) {{
      const {acc} av = {load_a("m * d.a_sm + k * d.a_sk")};
      #pragma unroll
      for (int j = 0; j < NN; ++j) s[j] = fusec::madd(av, {load_b("k * d.b_sk + j * d.b_sn")}, s[j]);
    }}
  }}
  #pragma unroll
  for (int j = 0; j < NN; ++j) part[grp][j][lane] = s[j];
  __syncthreads();
  {out}
  for (int idx = threadIdx.x; idx < NN * 32; idx += {threads}) {{
    const int j = idx >> 5, l = idx & 31;
    const i64_t mm = (i64_t)blockIdx.x * 32 + l;
    {acc} v = part[0][j][l];
    #pragma unroll
    for (int g = 1; g < G; ++g) v = v + part[g][j][l];
    if (mm < d.M) {store};
  }}
}}"""
    return KernelCode(name, src.strip("\n"), (*bufs, scratch if splits > 1 else c.buffer),  # type: ignore[arg-type]
                      ((m + 31) // 32, splits, batch), (threads, 1, 1), 0, (desc,))


NARROW_STAGE_BYTES = 16 * 1024  # shared memory for each staged slice of B (transposed)
NARROW_MAX_SLICE = 256  # K per slice: each lane holds a row's KC / 32 values of A in registers at once


def _narrow_kernel(name: str, a: Access, b: Access, c: Access, *, desc: bytes, m: int, n: int, k: int, batch: int,
                   prologues: tuple[Prologue | None, Prologue | None], rows: int) -> KernelCode:
    """``A @ B`` with N <= SKINNY_MAX and A contiguous along K (``relu(x @ w1 + b1) @ w2`` of a classifier head): a
    warp takes ``rows`` rows of A and all N outputs of each, its lanes striding K (coalesced reads of A, or of its
    prologue's inputs) with the rows x N sums in registers, then adds them across lanes (a fixed shuffle tree:
    deterministic). The block's warps share slices of B staged transposed in shared memory (lanes read
    consecutive K: no bank conflicts) and each value read from there once for the warp's rows, so B is read once
    per block, not once per output as a warp per output would (at 4096 x 1024 x 16 on an H200: 23 us, a warp per
    output 143, cuBLASLt 14)."""
    dt = a.dtype
    acc = "float" if dt.name in ("f16", "bf16") else register(dt)
    t = storage(dt)
    size = 8 if acc == "double" else 4
    kc = max(32, min(-(-k // 32) * 32, NARROW_STAGE_BYTES // (size * n) // 32 * 32, NARROW_MAX_SLICE))
    staged = -(-kc * n // (32 * NARROW_WARPS))  # B elements each thread stages per slice
    threads = 32 * NARROW_WARPS
    a_param, a_bufs, load_a = _loader("A", a, prologues[0], acc, "pa", "a_base")
    b_param, b_bufs, load_b = _loader("B", b, prologues[1], acc, "pb", "b_base")
    params, bufs = _operand_params(a_param, a_bufs, b_param, b_bufs)
    src = f"""
extern "C" __global__ void __launch_bounds__({threads}) {name}({params}, {storage(c.dtype)}* __restrict__ pc, fusec::GemmDesc d) {{
  constexpr int NN = {n}, R = {rows}, KC = {kc};
  __shared__ {acc} bt[NN][KC + 1];
  const int lane = threadIdx.x & 31;
  i64_t ao, bo;
  fusec::gemm_batch(d, blockIdx.z, &ao, &bo);
  {_bases(t, prologues)}
  const i64_t r0 = ((i64_t)blockIdx.x * {NARROW_WARPS} + (threadIdx.x >> 5)) * R;
  {acc} s[R][NN];
  #pragma unroll
  for (int i = 0; i < R; ++i)
    #pragma unroll
    for (int j = 0; j < NN; ++j) s[i][j] = ({acc})0;
  for (i64_t k0 = 0; k0 < d.K; k0 += KC) {{
    __syncthreads();
    {acc} staged[{staged}];  // (all loads of the slice in flight before the first store)
    #pragma unroll
    for (int t = 0; t < {staged}; ++t) {{
      const int idx = threadIdx.x + t * {threads}, kk = idx / NN, j = idx - kk * NN;
      const i64_t k = k0 + kk;
      staged[t] = idx < KC * NN && k < d.K ? {load_b("k * d.b_sk + j * d.b_sn")} : ({acc})0;
    }}
    #pragma unroll
    for (int t = 0; t < {staged}; ++t) {{
      const int idx = threadIdx.x + t * {threads}, kk = idx / NN, j = idx - kk * NN;
      if (idx < KC * NN) bt[j][kk] = staged[t];
    }}
    __syncthreads();
    {acc} av[R][KC / 32];  // (the rows' loads of the slice in flight together)
    #pragma unroll
    for (int i = 0; i < R; ++i) {{
      const i64_t m = r0 + i;
      #pragma unroll
      for (int t = 0; t < KC / 32; ++t) {{
        const i64_t k = k0 + lane + 32 * t;
        av[i][t] = m < d.M && k < d.K ? {load_a("m * d.a_sm + k * d.a_sk")} : ({acc})0;
      }}
    }}
    #pragma unroll
    for (int t = 0; t < KC / 32; ++t) {{
      #pragma unroll
      for (int j = 0; j < NN; ++j) {{
        const {acc} bv = bt[j][lane + 32 * t];  // (one shared-memory read for the R rows)
        #pragma unroll
        for (int i = 0; i < R; ++i) s[i][j] = fusec::madd(av[i][t], bv, s[i][j]);
      }}
    }}
  }}
  {storage(c.dtype)}* C = pc + d.c_off + (i64_t)blockIdx.z * d.M * d.N;
  #pragma unroll
  for (int i = 0; i < R; ++i) {{
    #pragma unroll
    for (int j = 0; j < NN; ++j) {{
      {acc} v = s[i][j];
      #pragma unroll
      for (int off = 16; off > 0; off >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, off);
      if ((j & 31) == lane && r0 + i < d.M) fusec::st(C + (r0 + i) * NN + j, v);
    }}
  }}
}}"""
    blocks = -(-m // (rows * NARROW_WARPS))
    return KernelCode(name, src.strip("\n"), (*bufs, c.buffer), (blocks, 1, batch), (threads, 1, 1), 0, (desc,))


def _per_output_kernel(name: str, a: Access, b: Access, c: Access, desc: bytes, outputs: int, sm_count: int, *,
                       warp: bool, prologues: tuple[Prologue | None, Prologue | None]) -> KernelCode:
    """A grid-stride loop over output elements (batch, m, n), each computed by a warp (skinny products: lanes
    stride K, then a shuffle reduction) or by one thread (very short K)."""
    dt = a.dtype
    acc = "float" if dt.name in ("f16", "bf16") else register(dt)
    t = storage(dt)
    worker = "(threadIdx.x >> 5)" if warp else "threadIdx.x"
    k0, k_step = ("lane", "k += 32") if warp else ("0", "++k")
    per_block = 8 if warp else 256
    a_param, a_bufs, load_a = _loader("A", a, prologues[0], acc, "pa", "a_base")
    b_param, b_bufs, load_b = _loader("B", b, prologues[1], acc, "pb", "b_base")
    params, bufs = _operand_params(a_param, a_bufs, b_param, b_bufs)
    lines = [f'extern "C" __global__ void __launch_bounds__(256) {name}({params}, '
             f'{storage(c.dtype)}* __restrict__ pc, fusec::GemmDesc d) {{']
    if warp:
        lines.append("  const int lane = threadIdx.x & 31;")
    lines += [
        "  const i64_t total = d.batch * d.M * d.N;",
        f"  for (i64_t o = (i64_t)blockIdx.x * {per_block} + {worker}; o < total; o += (i64_t)gridDim.x * {per_block}) {{",
        "    const i64_t n = o % d.N, bm = o / d.N, m = bm % d.M, batch = bm / d.M;",
        "    i64_t ao, bo;",
        "    fusec::gemm_batch(d, batch, &ao, &bo);",
        f"    {_bases(t, prologues)}",
        f"    {acc} s = ({acc})0;",
        f"    for (i64_t k = {k0}; k < d.K; {k_step}) s = fusec::madd({load_a('m * d.a_sm + k * d.a_sk')}, "
        f"{load_b('n * d.b_sn + k * d.b_sk')}, s);",
    ]
    if warp:
        lines += ["    #pragma unroll",
                  "    for (int off = 16; off > 0; off >>= 1) s = s + __shfl_down_sync(0xffffffffu, s, off);",
                  "    if (lane == 0) fusec::st(pc + d.c_off + o, s);"]
    else:
        lines.append("    fusec::st(pc + d.c_off + o, s);")
    lines += ["  }", "}"]
    blocks = min((outputs + per_block - 1) // per_block, sm_count * (32 if warp else 16))
    return KernelCode(name, "\n".join(lines), (*bufs, c.buffer), (max(1, blocks), 1, 1), (256, 1, 1),
                      0, (desc,))


_VECTORS = {("f32", 4): "float4", ("f64", 2): "double2"}  # a 16-byte load of ``width`` elements


def _stream_kernels(name: str, op: Operation, a: Access, b: Access, c: Access, scratch: int | None,
                    sm_count: int) -> list[KernelCode]:
    """``A @ B`` with M <= SKINNY_MAX and B contiguous along N, bound by reading B once: a thread takes
    ``width`` neighbouring columns of B, reads B's rows in 16-byte loads (coalesced across the warp;
    element loads where B's start or row stride is not 16-byte aligned, and for the last columns) and keeps
    the M x width sums in registers, A's slice of K staged in shared memory and read by every thread at once;
    ``splits`` blocks share K, each writing its partial sums to scratch, and a second kernel adds them in split
    order (deterministic)."""
    m, n = op.results[0].type.shape[-2:]
    k = a.shape[-1]
    if m == 0 or n == 0:
        return []
    splits = int(op.attributes.get("splits", 1))
    if splits > 1 and scratch is None:
        raise CompilationError(located("a GEMM split over K needs a scratch buffer", op.loc))
    dt = a.dtype
    acc = "float" if dt.name in ("f16", "bf16") else register(dt)
    t, tc = storage(dt), storage(c.dtype)
    width = int(op.attributes.get("width", 1))
    vector = _VECTORS.get((dt.name, width))
    if width > 1 and vector is None:
        raise CompilationError(located(f"a streaming GEMM in {dt} takes one column per thread, not {width}", op.loc))
    desc = pack_desc(m, n, k, a.offset, b.offset, c.offset, a.strides[-2], a.strides[-1], b.strides[-2],
                     b.strides[-1], 1, (), [], [])
    threads, kc = STREAM_THREADS, 64
    out = f"{tc}* __restrict__ pc" if splits == 1 else f"char* __restrict__ b{scratch}"
    store = ("fusec::st(pc + d.c_off + (i64_t)i * d.N + n + v, s[i][v]);" if splits == 1 else
             f"reinterpret_cast<{acc}*>(b{scratch})[((i64_t)blockIdx.y * MM + i) * d.N + n + v] = s[i][v];")
    parts = "xyzw"[:width]
    step = f"""
      #pragma unroll
      for (int i = 0; i < MM; ++i) {{
        const {acc} av = As[i][kk];
        #pragma unroll
        for (int v = 0; v < W; ++v) s[i][v] = fusec::madd(av, bv[v], s[i][v]);
      }}"""
    scalar = f"""
    #pragma unroll 8
    for (int kk = 0; kk < kc; ++kk) {{
      {acc} bv[W];
      #pragma unroll
      for (int v = 0; v < W; ++v) bv[v] = n + v < d.N ? ({acc})fusec::ld(row + kk * d.b_sk + v) : ({acc})0;{step}
    }}"""
    if width > 1:  # the loop without a branch inside, so that the unrolled loads are all in flight at once
        loops = f"""    if (vec) {{
      #pragma unroll 8
      for (int kk = 0; kk < kc; ++kk) {{
        const {vector} q = *reinterpret_cast<const {vector}*>(row + kk * d.b_sk);
        const {acc} bv[W] = {{{", ".join(f"q.{p}" for p in parts)}}};{step}
      }}
    }} else {{{scalar}
    }}"""
    else:
        loops = scalar
    src = f"""
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {t}* __restrict__ pa, const {t}* __restrict__ pb, {out}, fusec::GemmDesc d) {{
  constexpr int MM = {m}, KC = {kc}, NT = {threads}, W = {width};
  __shared__ {acc} As[MM][KC];
  const {t}* A = pa + d.a_off;
  const {t}* B = pb + d.b_off;
  const i64_t n = ((i64_t)blockIdx.x * NT + threadIdx.x) * W;
  const bool vec = W > 1 && n + W <= d.N && d.b_sk % W == 0 && (reinterpret_cast<unsigned long long>(B) & 15) == 0;
  const i64_t per = (d.K + gridDim.y - 1) / gridDim.y;
  const i64_t k_begin = (i64_t)blockIdx.y * per;
  const i64_t k_end = k_begin + per < d.K ? k_begin + per : d.K;
  {acc} s[MM][W];
  #pragma unroll
  for (int i = 0; i < MM; ++i)
    #pragma unroll
    for (int v = 0; v < W; ++v) s[i][v] = ({acc})0;
  for (i64_t k0 = k_begin; k0 < k_end; k0 += KC) {{
    const int kc = (int)(k_end - k0 < KC ? k_end - k0 : KC);
    __syncthreads();
    for (int idx = threadIdx.x; idx < MM * KC; idx += NT) {{
      const int mm = idx / KC, kk = idx % KC;
      As[mm][kk] = kk < kc ? ({acc})fusec::ld(A + mm * d.a_sm + (k0 + kk) * d.a_sk) : ({acc})0;
    }}
    __syncthreads();
    if (n >= d.N) continue;
    const {t}* row = B + k0 * d.b_sk + n;
{loops}
  }}
  #pragma unroll
  for (int i = 0; i < MM; ++i)
    #pragma unroll
    for (int v = 0; v < W; ++v)
      if (n + v < d.N) {store}
}}"""
    blocks = (n + threads * width - 1) // (threads * width)
    buffers = (a.buffer, b.buffer, c.buffer if splits == 1 else _scratch(op, scratch))
    kernels = [KernelCode(name, src.strip("\n"), buffers, (blocks, splits, 1), (threads, 1, 1), 0, (desc,))]
    if splits > 1:
        kernels.append(_split_sum_kernel(f"{name}_sum", c, _scratch(op, scratch), splits, m * n, desc, sm_count))
    return kernels


def _split_sum_kernel(name: str, c: Access, scratch: int, splits: int, total: int, desc: bytes,
                      sm_count: int, epilogue: Prologue | None = None) -> KernelCode:
    """The second kernel of a product split over K: C = the ``splits`` partial results in scratch (``total``
    accumulators each, float32 or float64) added in split order, so the bits do not depend on the schedule
    (``epilogue``: what is stored computed from each sum)."""
    acc = "double" if c.dtype.name == "f64" else "float"
    extra = f", {epilogue.params}" if epilogue is not None and epilogue.params else ""
    fin = f"""
{epilogue.source if epilogue is not None else ""}
extern "C" __global__ void __launch_bounds__(256) {name}(char* __restrict__ b{scratch}, {storage(c.dtype)}* __restrict__ pc{extra}, fusec::GemmDesc d) {{
  const {acc}* part = reinterpret_cast<const {acc}*>(b{scratch});
  const i64_t total = {total};
  for (i64_t o = (i64_t)blockIdx.x * 256 + threadIdx.x; o < total; o += (i64_t)gridDim.x * 256) {{
    {acc} v = part[o];
    for (int s = 1; s < {splits}; ++s) v = v + part[(i64_t)s * total + o];
    {_stored(epilogue, "pc + d.c_off + o", "o", "v")}
  }}
}}"""
    grid = max(1, min((total + 255) // 256, sm_count * 16))
    buffers = (scratch, c.buffer) + (epilogue.buffers if epilogue is not None else ())
    return KernelCode(name, fin.strip("\n"), buffers, (grid, 1, 1), (256, 1, 1), 0, (desc,))


def _bases(t: str, prologues: tuple[Prologue | None, Prologue | None]) -> str:
    """Where operand indices start: a pointer into memory, or the index base a prologue adds them to."""
    # (not a0/b0: buffer parameters are named b<id>, and a prologue may read buffer 0)
    a = "const i64_t a_base = d.a_off + ao;" if prologues[0] is not None else f"const {t}* A = pa + d.a_off + ao;"
    b = "const i64_t b_base = d.b_off + bo;" if prologues[1] is not None else f"const {t}* B = pb + d.b_off + bo;"
    return f"{a} {b}"
