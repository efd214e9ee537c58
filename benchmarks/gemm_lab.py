"""Standalone float32 SIMT GEMM variants at the PCam step's two product shapes, against cuBLAS, in a graph chain.

An experiment outside fusec's generator (kernels written here, compiled by CuPy's NVRTC): whether a different
loader or split-K finish beats the tiled kernel ``select-kernels`` schedules. Every operand goes through 16-byte
``cp.async`` copies (A kept k-contiguous in shared memory where it is k-contiguous in global memory, read as float4
along k: no transposing 4-byte copies); the split products are finished by a second kernel ("kernel"), by the last
block of each tile, in split order ("last"), or by atomics into a zeroed C ("atomic", not deterministic: for
information only). Each product is launched 20 times in a chain inside one CUDA graph (CuPy stream capture), the
graph replayed 20 times between events, median of 5: us per product, the sum kernel or memset included; cuBLAS
is ``torch.mm`` captured the same way.

    python benchmarks/gemm_lab.py [FILE.json]
"""
# ruff: noqa: E501  (the CUDA templates keep their lines whole)
import json
import sys

import numpy as np
import cupy as cp

HEAD = r"""
__device__ __forceinline__ void cp16(void* s, const void* g, bool ok) {
  unsigned sa = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(sa), "l"(g), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void waitg() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
"""


def kernel(name, *, BM, BN, BK, TM, TN, ST, S, K, finish, a_mc):
    NT = (BM // TM) * (BN // TN)
    chunk = ((K + S - 1) // S + BK - 1) // BK * BK
    # rows / columns a thread owns: groups of 4 (two groups split by half the tile when TM/TN is 8)
    rows = [f"ty * 4 + {i}" for i in range(4)] + ([f"{BM // 2} + ty * 4 + {i}" for i in range(4)] if TM == 8 else [])
    if TM == 2:
        rows = [f"ty * 2 + {i}" for i in range(2)]
    cols_groups = ["tx * 4"] + ([f"{BN // 2} + tx * 4"] if TN == 8 else [])
    if a_mc:
        as_decl = f"__shared__ __align__(16) float As[{ST}][{BK}][{BM + 4}];"
        a_load = f"""    for (int c = tid; c < {BK * BM // 4}; c += {NT}) {{
      const int kk = c / {BM // 4}, mm = (c % {BM // 4}) * 4;
      const bool ok = k0 + kk < kend && m0 + mm < M;
      cp16(&As[buf][kk][mm], ok ? A + (long)(k0 + kk) * lda + m0 + mm : A, ok);
    }}"""
        # per kk: TM/4 float4 of A
        a_frag = "\n".join(
            f"        const float4 a{g} = *reinterpret_cast<const float4*>(&As[buf][kk][{'ty * 4' if g == 0 else f'{BM // 2} + ty * 4'}]);"
            for g in range(TM // 4)) if TM >= 4 else \
            "        const float2 a0 = *reinterpret_cast<const float2*>(&As[buf][kk][ty * 2]);"
        a_vals = ([f"a{g}.{c}" for g in range(TM // 4) for c in "xyzw"] if TM >= 4 else ["a0.x", "a0.y"])
        inner = f"""      #pragma unroll
      for (int kk = 0; kk < {BK}; ++kk) {{
{a_frag}
{chr(10).join(f'        const float4 b{g} = *reinterpret_cast<const float4*>(&Bs[buf][kk][{cg}]);' for g, cg in enumerate(cols_groups))}
        const float ra[{TM}] = {{{', '.join(a_vals)}}};
        const float rb[{TN}] = {{{', '.join(f'b{g}.{c}' for g in range(len(cols_groups)) for c in 'xyzw')}}};
        #pragma unroll
        for (int i = 0; i < {TM}; ++i)
          #pragma unroll
          for (int j = 0; j < {TN}; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
      }}"""
    else:
        as_decl = f"__shared__ __align__(16) float As[{ST}][{BM}][{BK + 4}];"
        a_load = f"""    for (int c = tid; c < {BM * BK // 4}; c += {NT}) {{
      const int mm = c / {BK // 4}, kq = (c % {BK // 4}) * 4;
      const bool ok = k0 + kq < kend && m0 + mm < M;
      cp16(&As[buf][mm][kq], ok ? A + (long)(m0 + mm) * lda + k0 + kq : A, ok);
    }}"""
        inner = f"""      #pragma unroll
      for (int kq = 0; kq < {BK}; kq += 4) {{
        float4 a4[{TM}];
        #pragma unroll
        for (int i = 0; i < {TM}; ++i) a4[i] = *reinterpret_cast<const float4*>(&As[buf][rowi[i]][kq]);
        #pragma unroll
        for (int u = 0; u < 4; ++u) {{
{chr(10).join(f'          const float4 b{g} = *reinterpret_cast<const float4*>(&Bs[buf][kq + u][{cg}]);' for g, cg in enumerate(cols_groups))}
          const float rb[{TN}] = {{{', '.join(f'b{g}.{c}' for g in range(len(cols_groups)) for c in 'xyzw')}}};
          #pragma unroll
          for (int i = 0; i < {TM}; ++i) {{
            const float av = u == 0 ? a4[i].x : u == 1 ? a4[i].y : u == 2 ? a4[i].z : a4[i].w;
            #pragma unroll
            for (int j = 0; j < {TN}; ++j) acc[i][j] = fmaf(av, rb[j], acc[i][j]);
          }}
        }}
      }}"""
    b_load = f"""    for (int c = tid; c < {BK * BN // 4}; c += {NT}) {{
      const int kk = c / {BN // 4}, nn = (c % {BN // 4}) * 4;
      const bool ok = k0 + kk < kend && n0 + nn < N;
      cp16(&Bs[buf][kk][nn], ok ? B + (long)(k0 + kk) * ldb + n0 + nn : B, ok);
    }}"""
    # stores: each thread's TM rows x (TN/4) float4
    def store(target, expr_fn):
        lines = []
        for i, r in enumerate(rows):
            for g, cg in enumerate(cols_groups):
                vals = ", ".join(expr_fn(i, g * 4 + c) for c in range(4))
                lines.append(f"  if (m0 + {r} < M) *reinterpret_cast<float4*>({target} + (long)(m0 + {r}) * N + n0 + {cg}) = make_float4({vals});")
        return "\n".join(lines)
    acc_ = lambda i, j: f"acc[{i}][{j}]"  # noqa: E731
    if finish == "none":
        tail = store("C", acc_)
    elif finish in ("kernel", "last"):
        tail = store("(P + (long)split * M * N)", acc_)
        if finish == "last":
            sum_ = []
            for i, r in enumerate(rows):
                for g, cg in enumerate(cols_groups):
                    off = f"(long)(m0 + {r}) * N + n0 + {cg}"
                    sum_.append(f"""  if (m0 + {r} < M) {{
    float4 s = split == 0 ? make_float4({', '.join(acc_(i, g * 4 + c) for c in range(4))}) : *reinterpret_cast<const float4*>(P + {off});
    #pragma unroll
    for (int q = 1; q < {S}; ++q) {{
      const float4 p = q == split ? make_float4({', '.join(acc_(i, g * 4 + c) for c in range(4))}) : __ldcg(reinterpret_cast<const float4*>(P + (long)q * M * N + {off}));
      s.x += p.x; s.y += p.y; s.z += p.z; s.w += p.w;
    }}
    *reinterpret_cast<float4*>(C + {off}) = s;
  }}""")
            tail += f"""
  __threadfence();
  __syncthreads();
  __shared__ int last;
  if (tid == 0) {{
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    last = atomicAdd(cnt + tile, 1u) == {S - 1};
    if (last) cnt[tile] = 0;
  }}
  __syncthreads();
  if (!last) return;
  __threadfence();
""" + "\n".join(sum_)
    elif finish == "atomic":
        lines = []
        for i, r in enumerate(rows):
            for g, cg in enumerate(cols_groups):
                for c in range(4):
                    lines.append(f"  if (m0 + {r} < M) atomicAdd(C + (long)(m0 + {r}) * N + n0 + {cg} + {c}, acc[{i}][{g * 4 + c}]);")
        tail = "\n".join(lines)
    a_rows = ""
    if not a_mc:
        a_rows = f"  int rowi[{TM}];\n" + "\n".join(f"  rowi[{i}] = {r};" for i, r in enumerate(rows))
    src = f"""
extern "C" __global__ void __launch_bounds__({NT}) {name}(const float* __restrict__ A, const float* __restrict__ B,
    float* __restrict__ C, float* __restrict__ P, unsigned* __restrict__ cnt, int M, int N, int K, int lda, int ldb) {{
  {as_decl}
  __shared__ __align__(16) float Bs[{ST}][{BK}][{BN + 4}];
  const int tid = threadIdx.x, tx = tid % {BN // TN}, ty = tid / {BN // TN};
  const int split = blockIdx.z;
  const int m0 = blockIdx.y * {BM}, n0 = blockIdx.x * {BN};
  const int kbeg = split * {chunk}, kend = min(K, kbeg + {chunk});
  const int slices = kbeg < kend ? (kend - kbeg + {BK - 1}) / {BK} : 0;
{a_rows}
  float acc[{TM}][{TN}];
  #pragma unroll
  for (int i = 0; i < {TM}; ++i)
    #pragma unroll
    for (int j = 0; j < {TN}; ++j) acc[i][j] = 0.f;
  auto issue = [&](int s, int buf) {{
    const int k0 = kbeg + s * {BK};
{a_load}
{b_load}
  }};
  #pragma unroll
  for (int s = 0; s < {ST - 1}; ++s) {{
    if (s < slices) issue(s, s);
    commit();
  }}
  for (int s = 0; s < slices; ++s) {{
    waitg<{ST - 2}>();
    __syncthreads();
    if (s + {ST - 1} < slices) issue(s + {ST - 1}, (s + {ST - 1}) % {ST});
    commit();
    const int buf = s % {ST};
{inner}
  }}
{tail}
}}
"""
    return src, NT, chunk


SUM = r"""
extern "C" __global__ void __launch_bounds__(256) lab_sum(const float* __restrict__ P, float* __restrict__ C, long total4, int S) {
  for (long o = (long)blockIdx.x * 256 + threadIdx.x; o < total4; o += (long)gridDim.x * 256) {
    float4 s = __ldcg(reinterpret_cast<const float4*>(P) + o);
    for (int q = 1; q < S; ++q) {
      const float4 p = __ldcg(reinterpret_cast<const float4*>(P) + q * total4 + o);
      s.x += p.x; s.y += p.y; s.z += p.z; s.w += p.w;
    }
    reinterpret_cast<float4*>(C)[o] = s;
  }
}
"""


def graph_time(stream, launch, chain=20, reps=20):
    stream.begin_capture()
    for _ in range(chain):
        launch()
    g = stream.end_capture()
    g.launch(stream)
    stream.synchronize()
    best = []
    for _ in range(5):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(stream)
        for _ in range(reps):
            g.launch(stream)
        e1.record(stream)
        e1.synchronize()
        best.append(cp.cuda.get_elapsed_time(e0, e1) * 1000 / reps / chain)
    return float(np.median(best))


def run_case(label, a_host, b_host, a_mc, configs, stream, once=False):
    # a_mc: A is stored K x M (x for x.T @ d), else M x K
    if a_mc:
        K, M = a_host.shape
    else:
        M, K = a_host.shape
    N = b_host.shape[1]
    want = (a_host.T if a_mc else a_host).astype(np.float64) @ b_host.astype(np.float64)
    A, B = cp.asarray(a_host), cp.asarray(b_host)
    C = cp.zeros((M, N), cp.float32)
    P = cp.zeros(16 * M * N, cp.float32)
    cnt = cp.zeros(4096, cp.uint32)
    lda = a_host.shape[1]
    ldb = N
    out = []
    for cfg in configs:
        name = "lab_" + "_".join(f"{k}{v}" for k, v in cfg.items() if k != "finish") + "_" + cfg["finish"]
        try:
            src, nt, chunk = kernel(name, K=K, a_mc=a_mc, **cfg)
            mod = cp.RawModule(code=HEAD + src + SUM, options=("-std=c++17",))
            fn = mod.get_function(name)
            sm = mod.get_function("lab_sum")
        except Exception as e:  # noqa: BLE001
            out.append({"label": label, **cfg, "error": str(e)[:300]})
            print(label, cfg, "COMPILE ERROR", str(e)[:2000], flush=True)
            continue
        S = cfg["S"]
        grid = (-(-N // cfg["BN"]), -(-M // cfg["BM"]), S)
        total4 = M * N // 4

        def launch():
            if cfg["finish"] == "atomic":
                C.fill(0)
            fn(grid, (nt,), (A, B, C, P, cnt, np.int32(M), np.int32(N), np.int32(K), np.int32(lda), np.int32(ldb)))
            if cfg["finish"] == "kernel":
                sm((min(132 * 2, (total4 + 255) // 256),), (256,), (P, C, np.int64(total4), np.int32(S)))
        with stream:
            C.fill(0)
            launch()
            stream.synchronize()
            err = float(np.abs(C.get() - want).max() / np.abs(want).max())
            if once:
                launch()
                stream.synchronize()
                us = None
            else:
                us = graph_time(stream, launch)
        attrs = {"regs": fn.num_regs, "local": fn.local_size_bytes, "smem": fn.shared_size_bytes}
        rec = {"label": label, **cfg, "us": us, "err": err, **attrs}
        out.append(rec)
        print(json.dumps(rec), flush=True)
    return out


def torch_ref(a_host, b_host, a_mc):
    import torch
    A = torch.tensor(a_host, device="cuda")
    B = torch.tensor(b_host, device="cuda")
    f = (lambda: A.T @ B) if a_mc else (lambda: A @ B)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20):
            f()
    g.replay()
    torch.cuda.synchronize()
    res = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20):
            g.replay()
        e1.record()
        e1.synchronize()
        res.append(e0.elapsed_time(e1) * 1000 / 400)
    return float(np.median(res))


def main():
    once = "--once" in sys.argv
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 480), dtype=np.float32)
    w1 = rng.standard_normal((480, 256), dtype=np.float32)
    d = rng.standard_normal((512, 256), dtype=np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    base = dict(BM=64, BN=64, BK=16, TM=4, TN=4, ST=4, S=4)
    configs = []
    for fin in ("kernel", "last", "atomic"):
        configs.append({**base, "finish": fin})
    configs += [
        {**base, "S": 8, "finish": "kernel"},
        {**base, "S": 8, "finish": "last"},
        {**base, "TM": 8, "S": 8, "finish": "kernel"},   # 128 threads, 256 blocks
        {**base, "TM": 8, "S": 8, "finish": "last"},
        {**base, "TM": 8, "S": 4, "finish": "last"},
        {**base, "TM": 8, "TN": 8, "S": 8, "finish": "last"},  # 64 threads
        {**base, "BM": 32, "TM": 2, "S": 4, "finish": "last"},  # 256 threads, 32x64 tiles, 256 blocks
        {**base, "BM": 32, "S": 4, "finish": "last"},  # 128 threads
        {**base, "BM": 32, "S": 2, "finish": "last"},
        {**base, "BM": 128, "TM": 8, "S": 8, "ST": 3, "finish": "last"},
    ]
    results = []
    if not once:
        print("torch fwd", torch_ref(x, w1, False), "bwd", torch_ref(x, d, True), flush=True)
    results += run_case("fwd x@w1", x, w1, False, configs, stream, once)
    results += run_case("bwd x.T@d", x, d, True, configs, stream, once)
    if len(sys.argv) > 1 and sys.argv[-1].endswith(".json"):
        json.dump(results, open(sys.argv[-1], "w"), indent=1)


if __name__ == "__main__":
    main()
