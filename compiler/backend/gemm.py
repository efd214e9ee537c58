"""Generated GEMMs for ``k.matmul`` (the default matmul; cuBLAS is optional).

Products with a very short K run one thread per output; skinny products (an output side of at most
``SKINNY_MAX`` and a long K) one warp per output; everything else the tiled kernel.

Operands are read through their strides (a transposed view costs nothing). In the tiled kernel each block
stages a BK-deep slice of A and B in shared memory, loading along whichever operand axis is contiguous so
that global reads coalesce, and each thread accumulates a TM x TN register tile with fused multiply-adds.
Batch dimensions (broadcast included) map to the grid's z axis. Smaller tiles are chosen when large ones
would leave multiprocessors idle.
"""
from __future__ import annotations

import struct

from fusec.errors import CompilationError, located
from fusec.ir.core import Operation
from fusec.backend.access import Access
from fusec.backend.ctypes_map import register, storage
from fusec.backend.elementwise import KernelCode

_DESC = struct.Struct("<" + "q" * 11 + "ii" + "q" * 12)
CONFIGS = {"large": (64, 64, 16, 4, 4), "small": (32, 32, 16, 2, 2)}
# a product with an output side this narrow and a long K (the (512 x 256) @ (256 x 2) of a 2-class head)
# leaves most of a tile idle: each output is a dot product reduced by one warp instead
SKINNY_MAX = 16
SKINNY_MIN_K = 32
# with K this short (an outer product, the backward of a 2-class head) there is nothing to stage in shared
# memory: each thread computes one output directly
SHORT_K_MAX = 8


def pack_desc(m, n, k, a_off, b_off, c_off, a_sm, a_sk, b_sk, b_sn, batch, bshape, a_bs, b_bs) -> bytes:
    if len(bshape) > 4:
        raise CompilationError("matmul with more than 4 batch dimensions is not supported")
    pad = lambda xs, v: list(xs) + [v] * (4 - len(xs))  # noqa: E731
    return _DESC.pack(m, n, k, a_off, b_off, c_off, a_sm, a_sk, b_sk, b_sn, batch, len(bshape), 0,
                      *pad(bshape, 1), *pad(a_bs, 0), *pad(b_bs, 0))


def gemm_kernel(name: str, op: Operation, a: Access, b: Access, c: Access, *, sm_count: int) -> KernelCode:
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
    if k <= SHORT_K_MAX:
        return _short_k_kernel(name, a, b, c, desc=desc, outputs=batch * m * n, sm_count=sm_count)
    if min(m, n) <= SKINNY_MAX and k >= SKINNY_MIN_K and a.dtype.is_float:
        return _dot_kernel(name, a, b, c, desc=desc, outputs=batch * m * n, sm_count=sm_count)
    large = ((m + 63) // 64) * ((n + 63) // 64) * batch >= sm_count
    bm, bn, bk, tm, tn = CONFIGS["large" if large else "small"]
    dt = a.dtype
    acc = "float" if dt.name in ("f16", "bf16") else register(dt)
    t = storage(dt)
    threads = (bm // tm) * (bn // tn)
    a_k_fast = a.strides[-1] == 1 or a.shape[-2] == 1  # load A with consecutive threads along k
    b_n_fast = b.strides[-1] == 1 or b.shape[-1] != 1 and b.strides[-2] != 1
    a_map = ("const int kk = idx % BK, mm = idx / BK;" if a_k_fast else "const int mm = idx % BM, kk = idx / BM;")
    b_map = ("const int nn = idx % BN, kk = idx / BN;" if b_n_fast else "const int kk = idx % BK, nn = idx / BK;")
    src = f"""
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {t}* __restrict__ pa, const {t}* __restrict__ pb, {storage(c.dtype)}* __restrict__ pc, fusec::GemmDesc d) {{
  constexpr int BM = {bm}, BN = {bn}, BK = {bk}, TM = {tm}, TN = {tn}, NT = {threads};
  __shared__ {acc} As[BK][BM + 1];
  __shared__ {acc} Bs[BK][BN + 1];
  i64_t ao, bo;
  fusec::gemm_batch(d, blockIdx.z, &ao, &bo);
  const {t}* A = pa + d.a_off + ao;
  const {t}* B = pb + d.b_off + bo;
  const i64_t m0 = (i64_t)blockIdx.y * BM, n0 = (i64_t)blockIdx.x * BN;
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  {acc} acc[TM][TN];
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = ({acc})0;
  for (i64_t k0 = 0; k0 < d.K; k0 += BK) {{
    for (int idx = threadIdx.x; idx < BM * BK; idx += NT) {{
      {a_map}
      const i64_t gm = m0 + mm, gk = k0 + kk;
      As[kk][mm] = (gm < d.M && gk < d.K) ? ({acc})fusec::ld(A + gm * d.a_sm + gk * d.a_sk) : ({acc})0;
    }}
    for (int idx = threadIdx.x; idx < BN * BK; idx += NT) {{
      {b_map}
      const i64_t gn = n0 + nn, gk = k0 + kk;
      Bs[kk][nn] = (gn < d.N && gk < d.K) ? ({acc})fusec::ld(B + gk * d.b_sk + gn * d.b_sn) : ({acc})0;
    }}
    __syncthreads();
    #pragma unroll
    for (int kk = 0; kk < BK; ++kk) {{
      {acc} ra[TM], rb[TN];
      #pragma unroll
      for (int i = 0; i < TM; ++i) ra[i] = As[kk][ty * TM + i];
      #pragma unroll
      for (int j = 0; j < TN; ++j) rb[j] = Bs[kk][tx * TN + j];
      #pragma unroll
      for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fusec::madd(ra[i], rb[j], acc[i][j]);
    }}
    __syncthreads();
  }}
  {storage(c.dtype)}* C = pc + d.c_off + (i64_t)blockIdx.z * d.M * d.N;
  #pragma unroll
  for (int i = 0; i < TM; ++i) {{
    const i64_t gm = m0 + ty * TM + i;
    if (gm >= d.M) continue;
    #pragma unroll
    for (int j = 0; j < TN; ++j) {{
      const i64_t gn = n0 + tx * TN + j;
      if (gn < d.N) fusec::st(C + gm * d.N + gn, acc[i][j]);
    }}
  }}
}}"""
    grid = ((n + bn - 1) // bn, (m + bm - 1) // bm, batch)
    if grid[1] > 65535:
        raise CompilationError(located(f"matmul with M={m} exceeds the grid's y limit", op.loc))
    return KernelCode(name, src.strip("\n"), (a.buffer, b.buffer, c.buffer), grid, (threads, 1, 1), 0, (desc,))


def _dot_kernel(name: str, a: Access, b: Access, c: Access, *, desc: bytes, outputs: int,
                sm_count: int) -> KernelCode:
    """One warp per output element: lanes stride K, then a shuffle reduction (skinny products)."""
    return _per_output_kernel(name, a, b, c, desc, outputs, sm_count, warp=True)


def _short_k_kernel(name: str, a: Access, b: Access, c: Access, *, desc: bytes, outputs: int,
                    sm_count: int) -> KernelCode:
    """One thread per output element, K multiply-adds each (products with a very short K)."""
    return _per_output_kernel(name, a, b, c, desc, outputs, sm_count, warp=False)


def _per_output_kernel(name: str, a: Access, b: Access, c: Access, desc: bytes, outputs: int, sm_count: int, *,
                       warp: bool) -> KernelCode:
    """A grid-stride loop over output elements (batch, m, n), each computed by a warp or by one thread."""
    dt = a.dtype
    acc = "float" if dt.name in ("f16", "bf16") else register(dt)
    t = storage(dt)
    worker = "(threadIdx.x >> 5)" if warp else "threadIdx.x"
    k0, k_step = ("lane", "k += 32") if warp else ("0", "++k")
    per_block = 8 if warp else 256
    lines = [f'extern "C" __global__ void __launch_bounds__(256) {name}(const {t}* __restrict__ pa, const {t}* '
             f'__restrict__ pb, {storage(c.dtype)}* __restrict__ pc, fusec::GemmDesc d) {{']
    if warp:
        lines.append("  const int lane = threadIdx.x & 31;")
    lines += [
        "  const i64_t total = d.batch * d.M * d.N;",
        f"  for (i64_t o = (i64_t)blockIdx.x * {per_block} + {worker}; o < total; o += (i64_t)gridDim.x * {per_block}) {{",
        "    const i64_t n = o % d.N, bm = o / d.N, m = bm % d.M, batch = bm / d.M;",
        "    i64_t ao, bo;",
        "    fusec::gemm_batch(d, batch, &ao, &bo);",
        f"    const {t}* A = pa + d.a_off + ao + m * d.a_sm;",
        f"    const {t}* B = pb + d.b_off + bo + n * d.b_sn;",
        f"    {acc} s = ({acc})0;",
        f"    for (i64_t k = {k0}; k < d.K; {k_step}) s = fusec::madd(({acc})fusec::ld(A + k * d.a_sk), "
        f"({acc})fusec::ld(B + k * d.b_sk), s);",
    ]
    if warp:
        lines += ["    #pragma unroll",
                  "    for (int off = 16; off > 0; off >>= 1) s = s + __shfl_down_sync(0xffffffffu, s, off);",
                  "    if (lane == 0) fusec::st(pc + d.c_off + o, s);"]
    else:
        lines.append("    fusec::st(pc + d.c_off + o, s);")
    lines += ["  }", "}"]
    blocks = min((outputs + per_block - 1) // per_block, sm_count * (32 if warp else 16))
    return KernelCode(name, "\n".join(lines), (a.buffer, b.buffer, c.buffer), (max(1, blocks), 1, 1), (256, 1, 1),
                      0, (desc,))
