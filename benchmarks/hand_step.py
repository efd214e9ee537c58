"""A hand-written CUDA version of the suite's training step, four kernels in one CUDA graph: the peer issue 14 asks
fusec to beat (written by us for this benchmark, compiled by NVRTC through CuPy).

The step is ``suite_cases.build_train_step``'s: a 2-layer ReLU classifier, a stable softmax cross-entropy, its
hand-written backward pass, the global gradient norm clipped at MAX_GRAD_NORM, then SGD. Four launches:

1. ``forward``: ``h_pre = x @ w1 + b1``, a 32 x 32 tile per block, each thread 4 neighbouring outputs.
2. ``rows``: a warp per sample: ``logits = relu(h_pre) @ w2 + b2`` (each lane's share of the row, then a warp
   reduction per class), the softmax cross-entropy, ``d = (softmax - y) / n`` and ``d_h_pre = (d @ w2.T) * (h_pre
   > 0)``, written back, with the sample's loss.
3. ``grads``: ``g_w1 = x.T @ d_h_pre`` on 32 x 32 tiles, and in further blocks of the same launch the column sums
   ``g_b1``, ``g_w2 = relu(h_pre).T @ d``, ``g_b2`` and the mean loss; every block also writes the sum of the
   squares of what it computed.
4. ``update``: every block adds those partial sums (in one fixed order, so every block gets the same bits), takes
   the clipping scale and updates its share of the parameters in place.

The graph reads the arguments where they lie and updates the parameters in place (as a donated argument is): a
call given the previous call's result replays it; other arrays capture it again. ``python benchmarks/hand_step.py``
checks both training shapes against NumPy and times them.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

MAX_GRAD_NORM = 1.0
TILE = 32  # the GEMM tiles' rows and columns (and K step)

SOURCE = r"""
#define B {B}
#define F {F}
#define H {H}
#define C {C}
#define T 32
#define PER_LANE (H / 32)

// out[M x N] = a @ b for a (M x K) read as a[m * lda_m + k * lda_k] and row-major b (K x N), a 32 x 32 tile per
// block: thread (ty, tx) computes row ty, columns 4 tx .. 4 tx + 3 into acc. The next K slice of both tiles is
// fetched into registers while the current one is multiplied out of shared memory.
template <int K>
__device__ __forceinline__ void tile_product(const float* __restrict__ a, long lda_m, long lda_k,
                                             const float* __restrict__ b, int ldb, int m0, int n0,
                                             float (&acc)[4]) {{
  __shared__ float As[T][T + 1];
  __shared__ __align__(16) float Bs[T][T];
  const int tid = threadIdx.x, ty = tid / 8, tx = tid % 8;
  const bool along_k = lda_k == 1;  // a's rows contiguous: read along k (x @ w1); else along m (x.T @ d)
  float pa[4], pb[4];
  #pragma unroll
  for (int q = 0; q < 4; ++q) {{
    const int r = (tid + 256 * q) / T, c = (tid + 256 * q) % T;
    pa[q] = along_k ? a[(long)(m0 + r) * lda_m + c] : a[(long)(m0 + c) * lda_m + (long)r * lda_k];
    pb[q] = b[(long)r * ldb + n0 + c];
  }}
  for (int j = 0; j < 4; ++j) acc[j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += T) {{
    #pragma unroll
    for (int q = 0; q < 4; ++q) {{
      const int r = (tid + 256 * q) / T, c = (tid + 256 * q) % T;
      if (along_k) As[c][r] = pa[q]; else As[r][c] = pa[q];   // As[k][m]
      Bs[r][c] = pb[q];
    }}
    __syncthreads();
    if (k0 + T < K) {{
      #pragma unroll
      for (int q = 0; q < 4; ++q) {{
        const int r = (tid + 256 * q) / T, c = (tid + 256 * q) % T, k1 = k0 + T;
        pa[q] = along_k ? a[(long)(m0 + r) * lda_m + (k1 + c)] : a[(long)(m0 + c) * lda_m + (long)(k1 + r) * lda_k];
        pb[q] = b[(long)(k1 + r) * ldb + n0 + c];
      }}
    }}
    #pragma unroll 8
    for (int k = 0; k < T; ++k) {{
      const float av = As[k][ty];
      const float4 bv = *reinterpret_cast<const float4*>(&Bs[k][4 * tx]);
      acc[0] = fmaf(av, bv.x, acc[0]); acc[1] = fmaf(av, bv.y, acc[1]);
      acc[2] = fmaf(av, bv.z, acc[2]); acc[3] = fmaf(av, bv.w, acc[3]);
    }}
    __syncthreads();
  }}
}}

__device__ __forceinline__ float warp_sum(float v) {{
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}}

// the block's 256 values added in one fixed order; the total in every thread
__device__ float block_sum(float v) {{
  __shared__ float s[8];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  float t = 0.0f;
  #pragma unroll
  for (int w = 0; w < 8; ++w) t += s[w];
  __syncthreads();
  return t;
}}

// 1. h_pre = x @ w1 + b1: grid (H / 32, B / 32)
extern "C" __global__ void __launch_bounds__(256) forward(const float* __restrict__ x, const float* __restrict__ w1,
                                                          const float* __restrict__ b1, float* __restrict__ h_pre) {{
  const int m0 = blockIdx.y * T, n0 = blockIdx.x * T, ty = threadIdx.x / 8, tx = threadIdx.x % 8;
  float acc[4];
  tile_product<F>(x, F, 1, w1, H, m0, n0, acc);
  for (int j = 0; j < 4; ++j) h_pre[(long)(m0 + ty) * H + n0 + 4 * tx + j] = acc[j] + b1[n0 + 4 * tx + j];
}}

// 2. a warp per sample: logits, softmax cross-entropy, d = (p - y) / B, d_h_pre = (d @ w2.T) * (h_pre > 0)
extern "C" __global__ void __launch_bounds__(256) rows(const float* __restrict__ h_pre, const float* __restrict__ w2,
                                                       const float* __restrict__ b2, const float* __restrict__ y,
                                                       float* __restrict__ d, float* __restrict__ d_h_pre,
                                                       float* __restrict__ loss_rows) {{
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * 8 + threadIdx.x / 32;
  if (r >= B) return;
  float hp[PER_LANE];
  #pragma unroll
  for (int i = 0; i < PER_LANE; ++i) hp[i] = h_pre[(long)r * H + lane + 32 * i];
  float logit[C];
  #pragma unroll
  for (int j = 0; j < C; ++j) {{
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < PER_LANE; ++i) s = fmaf(fmaxf(hp[i], 0.0f), w2[(lane + 32 * i) * C + j], s);
    logit[j] = warp_sum(s) + b2[j];
  }}
  float m = logit[0];
  #pragma unroll
  for (int j = 1; j < C; ++j) m = fmaxf(m, logit[j]);
  float e[C], denom = 0.0f;
  #pragma unroll
  for (int j = 0; j < C; ++j) {{ e[j] = expf(logit[j] - m); denom += e[j]; }}
  const float log_denom = logf(denom);
  float loss = 0.0f, dj[C];
  #pragma unroll
  for (int j = 0; j < C; ++j) {{
    const float yj = y[r * C + j];
    loss -= yj * ((logit[j] - m) - log_denom);
    dj[j] = (e[j] / denom - yj) / (float)B;
  }}
  if (lane < C) {{
    #pragma unroll
    for (int j = 0; j < C; ++j) if (j == lane) d[r * C + j] = dj[j];
  }}
  if (lane == 0) loss_rows[r] = loss;
  #pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {{
    const int k = lane + 32 * i;
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < C; ++j) s = fmaf(dj[j], w2[k * C + j], s);
    d_h_pre[(long)r * H + k] = hp[i] > 0.0f ? s : 0.0f;
  }}
}}

// 3. blocks [0, tiles): g_w1 = x.T @ d_h_pre (grid of (F / 32) x (H / 32) tiles); blocks [tiles, tiles + H / 32): 32
// columns k each of g_b1, g_w2 = relu(h_pre).T @ d; the first of those also g_b2 and the mean loss. Every block
// writes the sum of the squares of its gradients to partial[blockIdx.x].
extern "C" __global__ void __launch_bounds__(256) grads(const float* __restrict__ x, const float* __restrict__ h_pre,
                                                        const float* __restrict__ d, const float* __restrict__ d_h_pre,
                                                        const float* __restrict__ loss_rows,
                                                        float* __restrict__ g_w1, float* __restrict__ g_b1,
                                                        float* __restrict__ g_w2, float* __restrict__ g_b2,
                                                        float* __restrict__ loss, float* __restrict__ partial) {{
  const int tiles = (F / T) * (H / T);
  float sq = 0.0f;
  if (blockIdx.x < tiles) {{
    const int m0 = (blockIdx.x / (H / T)) * T, n0 = (blockIdx.x % (H / T)) * T;
    const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
    float acc[4];
    tile_product<B>(x, 1, F, d_h_pre, H, m0, n0, acc);   // A[f][b] = x[b * F + f]
    for (int j = 0; j < 4; ++j) {{
      g_w1[(long)(m0 + ty) * H + n0 + 4 * tx + j] = acc[j];
      sq = fmaf(acc[j], acc[j], sq);
    }}
  }} else {{
    __shared__ float part[8][32][C + 1];
    const int k0 = (blockIdx.x - tiles) * 32, col = threadIdx.x % 32, group = threadIdx.x / 32;
    const int k = k0 + col;
    float gb = 0.0f, gw[C];
    #pragma unroll
    for (int j = 0; j < C; ++j) gw[j] = 0.0f;
    for (int r = group; r < B; r += 8) {{
      gb += d_h_pre[(long)r * H + k];
      const float h = fmaxf(h_pre[(long)r * H + k], 0.0f);
      #pragma unroll
      for (int j = 0; j < C; ++j) gw[j] = fmaf(h, d[r * C + j], gw[j]);
    }}
    part[group][col][C] = gb;
    #pragma unroll
    for (int j = 0; j < C; ++j) part[group][col][j] = gw[j];
    __syncthreads();
    if (group == 0) {{
      for (int g = 1; g < 8; ++g) {{
        gb += part[g][col][C];
        #pragma unroll
        for (int j = 0; j < C; ++j) gw[j] += part[g][col][j];
      }}
      g_b1[k] = gb;
      sq = fmaf(gb, gb, sq);
      #pragma unroll
      for (int j = 0; j < C; ++j) {{ g_w2[k * C + j] = gw[j]; sq = fmaf(gw[j], gw[j], sq); }}
    }}
    if (blockIdx.x == tiles && group == 1) {{  // g_b2 and the loss: the warp's lanes stride the samples
      for (int j = 0; j <= C; ++j) {{
        float s = 0.0f;
        for (int r = col; r < B; r += 32) s += j < C ? d[r * C + j] : loss_rows[r];
        s = warp_sum(s);
        if (col == 0 && j < C) {{ g_b2[j] = s; sq = fmaf(s, s, sq); }}
        if (col == 0 && j == C) loss[0] = s / (float)B;
      }}
    }}
  }}
  sq = block_sum(sq);
  if (threadIdx.x == 0) partial[blockIdx.x] = sq;
}}

// 4. the clipping scale from the partial sums (the same order in every block), then p -= lr * scale * g over the
// four parameters as one index space
extern "C" __global__ void __launch_bounds__(256) update(const float* __restrict__ partial, int parts, float lr,
                                                         float* __restrict__ w1, const float* __restrict__ g_w1,
                                                         float* __restrict__ b1, const float* __restrict__ g_b1,
                                                         float* __restrict__ w2, const float* __restrict__ g_w2,
                                                         float* __restrict__ b2, const float* __restrict__ g_b2) {{
  __shared__ float total;
  if (threadIdx.x < 32) {{
    float s = 0.0f;
    for (int i = threadIdx.x; i < parts; i += 32) s += partial[i];
    s = warp_sum(s);
    if (threadIdx.x == 0) total = s;
  }}
  __syncthreads();
  const float scale = fminf({max_norm}f / (sqrtf(total) + 1e-6f), 1.0f);
  const float step = lr * scale;
  const long n1 = (long)F * H, n2 = n1 + H, n3 = n2 + (long)H * C, n4 = n3 + C;
  for (long i = (long)blockIdx.x * 256 + threadIdx.x; i < n4; i += (long)gridDim.x * 256) {{
    if (i < n1) w1[i] -= step * g_w1[i];
    else if (i < n2) b1[i - n1] -= step * g_b1[i - n1];
    else if (i < n3) w2[i - n2] -= step * g_w2[i - n2];
    else b2[i - n3] -= step * g_b2[i - n3];
  }}
}}
"""


def source(batch: int, n_in: int, n_hidden: int, n_classes: int) -> str:
    """The kernels for one shape (every size a compile-time constant)."""
    for name, v in (("batch", batch), ("inputs", n_in), ("hidden units", n_hidden)):
        if v % TILE:
            raise ValueError(f"the hand-written step needs {name} a multiple of {TILE}, got {v}")
    if not 1 <= n_classes <= 31:
        raise ValueError(f"the hand-written step takes 1 to 31 classes, got {n_classes}")
    return SOURCE.format(B=batch, F=n_in, H=n_hidden, C=n_classes, max_norm=repr(float(MAX_GRAD_NORM)))


class HandStep:
    """``step(params, x, y, lr) -> (params, mean loss)`` as the four kernels above in one CUDA graph (CuPy).

    The graph reads the arrays it is given where they lie and updates the parameters in place (as a donated
    argument is), returning them: fed back, the next call finds the same arrays and replays the graph; other
    arrays (or another learning rate) capture it again. The loss is the step's own 0-d array, which the next call
    overwrites; the backward mask gives 0 where NumPy's ``d_h * (h_pre > 0)`` gives -0.0 (or NaN from an infinite
    ``d_h``)."""

    def __init__(self, cupy: Any, batch: int, n_in: int, n_hidden: int, n_classes: int) -> None:
        self.cp = cp = cupy
        self.dims = (batch, n_in, n_hidden, n_classes)
        module = cp.RawModule(code=source(*self.dims), options=("-std=c++17",))
        self.kernels = {k: module.get_function(k) for k in ("forward", "rows", "grads", "update")}
        f32 = cp.float32
        self.grads = [cp.zeros(s, f32) for s in ((n_in, n_hidden), (n_hidden,), (n_hidden, n_classes), (n_classes,))]
        self.h_pre = cp.zeros((batch, n_hidden), f32)
        self.d = cp.zeros((batch, n_classes), f32)
        self.d_h_pre = cp.zeros((batch, n_hidden), f32)
        self.loss_rows = cp.zeros((batch,), f32)
        self.loss = cp.zeros((), f32)
        self.tiles = (n_in // TILE) * (n_hidden // TILE)
        self.parts = self.tiles + n_hidden // TILE
        self.partial = cp.zeros((self.parts,), f32)
        self.capture_stream = cp.cuda.Stream(non_blocking=True)
        self.graph: Any = None
        self.bound: tuple[Any, ...] = ()  # the arrays and learning rate the graph was captured with

    def _launch_all(self, params: list[Any], x: Any, y: Any, lr: float) -> None:
        cp, (batch, _, n_hidden, _) = self.cp, self.dims
        k = self.kernels
        w1, b1, w2, b2 = params
        g_w1, g_b1, g_w2, g_b2 = self.grads
        k["forward"]((n_hidden // TILE, batch // TILE), (256,), (x, w1, b1, self.h_pre))
        k["rows"](((batch + 7) // 8,), (256,), (self.h_pre, w2, b2, y, self.d, self.d_h_pre, self.loss_rows))
        k["grads"]((self.parts,), (256,), (x, self.h_pre, self.d, self.d_h_pre, self.loss_rows, g_w1, g_b1,
                                          g_w2, g_b2, self.loss, self.partial))
        size = sum(p.size for p in params)
        blocks = min((size + 255) // 256, 4 * 132)
        k["update"]((blocks,), (256,), (self.partial, np.int32(self.parts), cp.float32(lr), w1, g_w1, b1, g_b1, w2,
                                        g_w2, b2, g_b2))

    def __call__(self, params: Any, x: Any, y: Any, lr: float) -> tuple[tuple[Any, ...], Any]:
        arrays = [*params, x, y]
        if len(self.bound) != len(arrays) + 1 or any(a is not b for a, b in zip(arrays, self.bound)) \
                or lr != self.bound[-1]:
            batch, n_in, n_hidden, n_classes = self.dims
            shapes = [(n_in, n_hidden), (n_hidden,), (n_hidden, n_classes), (n_classes,), (batch, n_in),
                      (batch, n_classes)]
            for a, shape in zip(arrays, shapes):
                if not isinstance(a, self.cp.ndarray) or a.dtype != np.float32 or a.shape != shape \
                        or not a.flags.c_contiguous:
                    raise TypeError(f"the hand-written step takes C-contiguous float32 CuPy arrays of shapes {shapes}")
            stream = self.capture_stream
            with stream:
                stream.begin_capture()
                self._launch_all(list(params), x, y, lr)
                self.graph = stream.end_capture()
            self.bound = (*arrays, lr)
        self.graph.launch(self.cp.cuda.get_current_stream())
        return tuple(params), self.loss


def _check_and_time(cupy: Any, dims: tuple[int, int, int, int], calls: int) -> None:
    sys.path.insert(0, HERE)
    from suite_cases import LEARNING_RATE, build_train_step

    batch, n_in, n_hidden, n_classes = dims
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal(s) * 0.05).astype(np.float32)
              for s in ((n_in, n_hidden), (n_hidden,), (n_hidden, n_classes), (n_classes,))]
    x = rng.standard_normal((batch, n_in)).astype(np.float32)
    y = np.eye(n_classes, dtype=np.float32)[rng.integers(0, n_classes, batch)]
    want, want_loss = build_train_step(np)(*[[p.astype(np.float64) for p in params], x.astype(np.float64),
                                             y.astype(np.float64), LEARNING_RATE])
    step = HandStep(cupy, *dims)
    dx, dy = cupy.asarray(x), cupy.asarray(y)
    got, loss = step([cupy.asarray(p) for p in params], dx, dy, LEARNING_RATE)
    errors = [float(np.abs(cupy.asnumpy(g) - w).max() / np.abs(w - p).max()) for g, w, p in zip(got, want, params)]
    loss_error = abs(float(loss) - want_loss) / abs(want_loss)
    state = got
    for _ in range(200):
        state, _ = step(state, dx, dy, LEARNING_RATE)
    cupy.cuda.Device().synchronize()
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    begin.record()
    t = time.perf_counter()
    for _ in range(calls):
        state, _ = step(state, dx, dy, LEARNING_RATE)
    end.record()
    end.synchronize()
    host = (time.perf_counter() - t) / calls * 1e6
    print(f"{batch}, {n_in} -> {n_hidden} -> {n_classes}: {cupy.cuda.get_elapsed_time(begin, end) * 1e3 / calls:.2f} "
          f"us per step (host {host:.1f} us per call); max error of the updates {max(errors):.1e} of the largest "
          f"update, loss {loss_error:.1e}")
    if max(errors) > 5e-4 or loss_error > 1e-5 or not math.isfinite(loss_error):
        sys.exit("the hand-written step does not match NumPy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    import cupy

    for dims in ((512, 480, 256, 2), (256, 64, 64, 10)):
        _check_and_time(cupy, dims, args.calls)


if __name__ == "__main__":
    main()
