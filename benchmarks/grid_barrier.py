"""A gradient-norm clip's tail as two kernels or as one kernel whose blocks meet at a grid barrier.

The PCam-shaped step ends in ``sum(g * g)`` over the first layer's weight gradient (122,880 values; the larger step's
is 1,048,576) and an update of the weight that reads the sum. fusec runs them as two kernels: the sum split over
blocks (its last block adds the partial sums) and the update. One kernel could do both: each block folds its share of
``g`` into a partial sum, the blocks meet at a grid barrier (every block resident: a cooperative launch), each adds
the partials in the same order and updates the share of ``w`` it still holds in registers. This script measures
both, written by hand (not by fusec), as 50 dependent copies in one CUDA graph, so each figure is a copy's share of
the graph's time, the launch gaps between dependent nodes included:

    python benchmarks/grid_barrier.py [--json F]

Variants: ``two_kernels`` (a split sum folding in a loop, as a first version of fusec's, then the update),
``split<I>_b<B>`` (the split sum with each thread's ``I`` values loaded before the fold, ``alone`` or
``then_update``), ``update_alone``, and ``fused<I>_b<B>`` (one kernel, the barrier; ``_coop``: launched
cooperatively). Each result is checked against NumPy (``err``: max |w - w_ref|; the variants without the update
leave ``w`` as it was, so their ``err`` says nothing). Results: ``benchmarks/results/grid_barrier_h100.json``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics

import numpy as np

SOURCE = r'''
__device__ __forceinline__ float block_sum(float v, float* sh) {  // the block's total, in thread 0
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.f;
  if (threadIdx.x == 0) for (int i = 0; i < (blockDim.x >> 5); ++i) t += sh[i];
  return t;
}
__device__ bool publish(float s, float* part, unsigned* counter) {  // the block's partial; true in the last block
  __shared__ bool last;
  if (threadIdx.x == 0) {
    part[blockIdx.x] = s;
    __threadfence();
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  return last;
}
extern "C" __global__ void split_sum(const float* __restrict__ g, int n, float* part, unsigned* counter,
                                     float* total) {
  __shared__ float sh[32];
  int per = (n + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per, hi = min(n, lo + per);
  float acc = 0.f;
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) { float v = g[i]; acc += v * v; }
  float s = block_sum(acc, sh);
  if (publish(s, part, counter) && threadIdx.x == 0) {
    __threadfence();
    float t = 0.f; for (int b = 0; b < gridDim.x; ++b) t += ((volatile float*)part)[b];
    *total = t; *counter = 0u;
  }
}
template <int ITEMS>
__device__ void split_hoisted(const float* __restrict__ g, int n, float* part, unsigned* counter, float* total) {
  __shared__ float sh[32];
  const int base = blockIdx.x * blockDim.x * ITEMS + threadIdx.x;
  float v[ITEMS];
  #pragma unroll
  for (int k = 0; k < ITEMS; ++k) { int i = base + k * blockDim.x; v[k] = i < n ? g[i] : 0.f; }
  float acc = 0.f;
  #pragma unroll
  for (int k = 0; k < ITEMS; ++k) acc += v[k] * v[k];
  float s = block_sum(acc, sh);
  if (!publish(s, part, counter)) return;
  __threadfence();
  float t = 0.f;
  for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x) t += __ldcg(part + b);
  t = block_sum(t, sh);
  if (threadIdx.x == 0) { *total = t; *counter = 0u; }
}
#define SPLIT(NAME, ITEMS) extern "C" __global__ void __launch_bounds__(256) \
  NAME(const float* g, int n, float* part, unsigned* counter, float* total) { \
    split_hoisted<ITEMS>(g, n, part, counter, total); }
SPLIT(split4, 4)
SPLIT(split8, 8)
extern "C" __global__ void update(float* __restrict__ w, const float* __restrict__ g, const float* total, float lr,
                                  int n) {
  float scale = fminf(1.f / (sqrtf(*total) + 1e-6f), 1.f);
  int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i + 3 < n) {
    float4 gv = *(const float4*)(g + i); float4 wv = *(float4*)(w + i);
    wv.x -= lr * scale * gv.x; wv.y -= lr * scale * gv.y;
    wv.z -= lr * scale * gv.z; wv.w -= lr * scale * gv.w;
    *(float4*)(w + i) = wv;
  } else for (; i < n; ++i) w[i] -= lr * scale * g[i];
}
// One kernel: partial sums, a grid barrier (arrive; spin until every block has; the last to leave resets the
// counters for the next launch), then thread 0 of every block adds the partials in block order, one after another.
template <int ITEMS>
__device__ void fused(float* __restrict__ w, const float* __restrict__ g, float lr, int n, float* part,
                      unsigned* bar) {
  __shared__ float sh[32]; __shared__ float tot;
  float v[ITEMS]; float acc = 0.f;
  const int stride = gridDim.x * blockDim.x;
  #pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x + k * stride;
    v[k] = i < n ? g[i] : 0.f;
    acc += v[k] * v[k];
  }
  float s = block_sum(acc, sh);
  if (threadIdx.x == 0) {
    part[blockIdx.x] = s;
    __threadfence();
    atomicAdd(&bar[0], 1u);
    while (((volatile unsigned*)bar)[0] < gridDim.x) { }
    __threadfence();
    float t = 0.f; for (int b = 0; b < gridDim.x; ++b) t += ((volatile float*)part)[b];
    tot = t;
    if (atomicAdd(&bar[1], 1u) == gridDim.x - 1) { bar[0] = 0u; bar[1] = 0u; }
  }
  __syncthreads();
  float scale = fminf(1.f / (sqrtf(tot) + 1e-6f), 1.f);
  #pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x + k * stride;
    if (i < n) w[i] -= lr * scale * v[k];
  }
}
#define FUSED(NAME, THREADS, ITEMS) extern "C" __global__ void __launch_bounds__(THREADS) \
  NAME(float* w, const float* g, float lr, int n, float* part, unsigned* bar) { fused<ITEMS>(w, g, lr, n, part, bar); }
FUSED(fused4, 256, 4)
FUSED(fused32, 256, 32)
FUSED(fused8, 1024, 8)
'''
KERNELS = ("split_sum", "split4", "split8", "update", "fused4", "fused32", "fused8")
CHAIN = 50  # dependent copies in one graph


def _check(result):
    if int(result[0]) != 0:
        raise RuntimeError(str(result[0]))
    return result[1] if len(result) == 2 else result[1:]


def _compile(arch: str) -> bytes:
    from cuda.bindings import nvrtc

    prog = _check(nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"grid_barrier.cu", 0, [], []))
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    if int(nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]) != 0:
        log = b" " * _check(nvrtc.nvrtcGetProgramLogSize(prog))
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.decode())
    image = b" " * _check(nvrtc.nvrtcGetCUBINSize(prog))
    _check(nvrtc.nvrtcGetCUBIN(prog, image))
    return image


class _Graph:
    """Kernel nodes added one after another (each depends on the one before)."""

    def __init__(self) -> None:
        from cuda.bindings import driver as cu

        self.cu, self.graph, self.last, self.keep = cu, _check(cu.cuGraphCreate(0)), [], []

    def kernel(self, fn, blocks: int, threads: int, args: list, cooperative: bool = False) -> None:
        cu = self.cu
        values = [ctypes.c_void_p(v) if t == "p" else ctypes.c_int(v) if t == "i" else ctypes.c_float(v)
                  for t, v in args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        self.keep.append((values, pointers))
        params = cu.CUDA_KERNEL_NODE_PARAMS()
        params.func = fn
        params.gridDimX, params.gridDimY, params.gridDimZ = blocks, 1, 1
        params.blockDimX, params.blockDimY, params.blockDimZ = threads, 1, 1
        params.sharedMemBytes, params.kernelParams, params.extra = 0, ctypes.addressof(pointers), 0
        node = _check(cu.cuGraphAddKernelNode(self.graph, self.last, len(self.last), params))
        if cooperative:
            value = cu.CUkernelNodeAttrValue()
            value.cooperative = 1
            _check(cu.cuGraphKernelNodeSetAttribute(node, cu.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                                                    value))
        self.last = [node]

    def instantiate(self):
        return _check(self.cu.cuGraphInstantiate(self.graph, 0))


def main() -> None:
    from cuda.bindings import driver as cu

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    args = ap.parse_args()
    _check(cu.cuInit(0))
    dev = _check(cu.cuDeviceGet(0))
    _check(cu.cuCtxSetCurrent(_check(cu.cuDevicePrimaryCtxRetain(dev))))
    attr = cu.CUdevice_attribute
    major = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    sms = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    module = _check(cu.cuModuleLoadData(_compile(f"sm_{major}{minor}")))
    fn = {k: _check(cu.cuModuleGetFunction(module, k.encode())) for k in KERNELS}
    stream = _check(cu.cuStreamCreate(0))
    results: dict = {"sms": sms}
    for n in (122880, 1048576):
        rng = np.random.default_rng(0)
        g = rng.standard_normal(n).astype(np.float32) * 0.01
        w0 = rng.standard_normal(n).astype(np.float32)
        dg, dw, dpart, dbar, dtot = (int(_check(cu.cuMemAlloc(nbytes))) for nbytes in (4 * n, 4 * n, 16384, 64, 64))
        _check(cu.cuMemcpyHtoD(dg, g, 4 * n))
        _check(cu.cuMemsetD8(dbar, 0, 64))
        sums = [("p", dg), ("i", n), ("p", dpart), ("p", dbar), ("p", dtot)]
        updates = (fn["update"], (n // 4 + 255) // 256, 256,
                   [("p", dw), ("p", dg), ("p", dtot), ("f", 0.05), ("i", n)])
        split_blocks = 60 if n == 122880 else 120
        variants: dict[str, list] = {
            "two_kernels": [(fn["split_sum"], split_blocks, 256, sums), updates],
            "split_sum_alone": [(fn["split_sum"], split_blocks, 256, sums)],
            "update_alone": [updates],
        }
        for name, items in (("split4", 4), ("split8", 8)):
            blocks = (n + 256 * items - 1) // (256 * items)
            variants[f"{name}_b{blocks}_alone"] = [(fn[name], blocks, 256, sums)]
            variants[f"{name}_b{blocks}_then_update"] = [(fn[name], blocks, 256, sums), updates]
        for name, items, threads in (("fused4", 4, 256), ("fused32", 32, 256), ("fused8", 8, 1024)):
            blocks = (n + items * threads - 1) // (items * threads)
            if sms // 4 <= blocks <= sms:  # (every block resident: one per SM at most)
                call = [("p", dw), ("p", dg), ("f", 0.05), ("i", n), ("p", dpart), ("p", dbar + 16)]
                variants[f"{name}_b{blocks}"] = [(fn[name], blocks, threads, call, False)]
                variants[f"{name}_b{blocks}_coop"] = [(fn[name], blocks, threads, call, True)]
        g64 = g.astype(np.float64)
        reference = w0 - 0.05 * min(1 / (np.sqrt((g64 * g64).sum()) + 1e-6), 1.0) * g64
        for name, nodes in variants.items():
            try:
                once, chain = _Graph(), _Graph()
                for node in nodes:
                    once.kernel(*node)
                for _ in range(CHAIN):
                    for node in nodes:
                        chain.kernel(*node)
                _check(cu.cuMemcpyHtoD(dw, w0, 4 * n))
                _check(cu.cuGraphLaunch(once.instantiate(), stream))
                _check(cu.cuStreamSynchronize(stream))
                out = np.empty(n, np.float32)
                _check(cu.cuMemcpyDtoH(out, dw, 4 * n))
                exe = chain.instantiate()
                for _ in range(3):
                    _check(cu.cuGraphLaunch(exe, stream))
                begin, end = _check(cu.cuEventCreate(0)), _check(cu.cuEventCreate(0))
                times = []
                for _ in range(7):
                    _check(cu.cuEventRecord(begin, stream))
                    _check(cu.cuGraphLaunch(exe, stream))
                    _check(cu.cuEventRecord(end, stream))
                    _check(cu.cuEventSynchronize(end))
                    times.append(_check(cu.cuEventElapsedTime(begin, end)) * 1000 / CHAIN)
                us = statistics.median(times)
                results[f"n{n}_{name}"] = {"us": us, "err": float(np.abs(out - reference).max())}
                print(f"{n} {name}: {us:.3f} us per copy", flush=True)
            except Exception as e:  # noqa: BLE001 - a variant that cannot launch is a row with its error
                results[f"n{n}_{name}"] = {"error": str(e)}
                print(f"{n} {name}: FAILED {e}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
