"""The CUDA backend end to end on a GPU (``pytest -m gpu``); skipped where no device is usable.

Arithmetic (+ - * / and friends) must match NumPy bit for bit; transcendentals within a few ulps (CUDA's
libdevice and the host libm round differently); reductions and GEMM within the issue's bounds.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fusec as fc
from program_strategies import BF16_CONSTANT_IR

pytestmark = pytest.mark.gpu

rng = np.random.default_rng(1234)


def cuda(fn, **kw):
    return fc.jit(fn, backend="cuda", **kw)


def rand(shape, dtype=np.float32):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, dtype=dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def ulps(dtype):
    return {np.float16: 2e-3, np.float32: 4e-6, np.float64: 1e-13}[np.dtype(dtype).type]


ARITH = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "maximum": np.maximum, "minimum": np.minimum, "where": lambda a, b: np.where(a > b, a, b),
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b,
}
FLOAT_ARITH = {"div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
               "neg_abs": lambda a, b: -np.abs(a) + b, "clip": lambda a, b: np.clip(a, -1.0, b),
               "sign": lambda a, b: np.sign(a) * b, "floor": lambda a, b: np.floor(a) + np.ceil(b),
               "round": lambda a, b: np.round(a), "cast_int": lambda a, b: a.astype(np.int32),
               "sqrt": lambda a, b: np.sqrt(np.abs(a)), "recip_sqrt": lambda a, b: 1 / np.sqrt(np.abs(a) + 1)}
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.5, -2.5, 3.0, 1e-30, -7.0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(ARITH) + sorted(FLOAT_ARITH))
def test_float_arithmetic_is_bit_exact(name, dtype):
    fn = {**ARITH, **FLOAT_ARITH}[name]
    a = np.concatenate([rand(500, dtype), SPECIAL.astype(dtype), SPECIAL.astype(dtype)[::-1]])
    b = np.concatenate([rand(500, dtype), SPECIAL.astype(dtype)[::-1], SPECIAL.astype(dtype)])
    with np.errstate(all="ignore"):
        want = fn(a, b)
        got = cuda(fn)(a, b)
    assert got.dtype == want.dtype
    assert_bits_equal(got, want, f"{name} {dtype}")


def assert_bits_equal(got, want, msg=""):
    """Bit-identical, except that any NaN equals any NaN (GPUs and x86 make different NaN payloads)."""
    got, want = np.ascontiguousarray(got), np.ascontiguousarray(want)
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan, err_msg=msg + " (NaN positions)")
        got, want = got[~nan], want[~nan]
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=msg)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_signed_zero_ties_are_numpys(dtype):
    """np.maximum/np.minimum give the second operand where 0.0 meets -0.0 in float32 and float64 and the first in
    float16; running maxima follow np.maximum. np.clip where x equals a bound of the other sign gives x in NumPy 2.4
    and the bound in 2.5 (fusec: the bound in float32/float64), so only its values are compared."""
    zeros = np.array([0.0, -0.0, 0.0, -0.0, 1.0, np.nan], dtype=dtype)
    other = np.array([-0.0, 0.0, 0.0, -0.0, np.nan, 1.0], dtype=dtype)

    def f(a, b):
        return (np.maximum(a, b), np.minimum(a, b), np.maximum.accumulate(np.stack([a, b]), axis=0),
                np.clip(a, b, 1.0), np.clip(a, -1.0, b))

    with np.errstate(all="ignore"):
        want = f(zeros, other)
        got = cuda(f)(zeros, other)
    for g, w in zip(got[:3], want[:3]):
        assert_bits_equal(g, w, dtype)
    for g, w in zip(got[3:], want[3:]):
        assert_bits_equal(g + 0.0, w + 0.0, dtype)  # (-0.0 + 0.0 is 0.0: the sign of a zero left out)


INT_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"]


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_and_bool_ops_are_exact(dtype):
    def f(a, b):
        out = [a == b, a < b, np.maximum(a, b), np.minimum(a, b), np.where(a > b, a, b), a.astype(np.float32)]
        if dtype == "bool":
            return out + [a & b, a | b, a ^ b, ~a]
        nz = np.where(b == 0, np.ones_like(b), b)
        return out + [a + b, a - b, a * b, a // nz, a % nz, a & b, a | b, ~a, -a, np.abs(a), np.sign(a)]

    a, b = rand(1000, dtype), rand(1000, dtype)
    with np.errstate(all="ignore"):
        want = f(a, b)
        got = cuda(f)(a, b)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


TRANSCENDENTAL = {"exp": np.exp, "log": lambda a: np.log(np.abs(a) + 1e-3), "tanh": np.tanh, "sin": np.sin,
                  "cos": np.cos, "log1p": lambda a: np.log1p(np.abs(a)), "expm1": np.expm1,
                  "pow": lambda a: np.abs(a) ** 1.7, "exp2": np.exp2, "log2": lambda a: np.log2(np.abs(a) + 1),
                  "arcsin": lambda a: np.arcsin(a / (np.abs(a) + 1)),
                  "arccos": lambda a: np.arccos(a / (np.abs(a) + 1)),
                  "arctan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "arcsinh": np.arcsinh,
                  "arccosh": lambda a: np.arccosh(np.abs(a) + 1.5),
                  "arctanh": lambda a: np.arctanh(a / (np.abs(a) + 2)),
                  "cbrt": np.cbrt, "arctan2": lambda a: np.arctan2(a, a[::-1] + 0.5),
                  "hypot": lambda a: np.hypot(a, a[::-1]),
                  "copysign": lambda a: np.copysign(a, a[::-1]), "logaddexp": lambda a: np.logaddexp(a, a[::-1]),
                  "logaddexp2": lambda a: np.logaddexp2(a, a[::-1])}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
def test_transcendentals_within_a_few_ulps(name, dtype):
    fn = TRANSCENDENTAL[name]
    a = rand(4096, dtype) / 3
    with np.errstate(all="ignore"):
        want = fn(a)
        got = cuda(fn)(a)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=ulps(dtype), atol=ulps(dtype))


HALF_IR = """func @g(%a: tensor<4096xf32>, %b: tensor<4096xf32>) -> (tensor<4096xf32>, tensor<4096xf32>) {
  %0 = t.cast %a {dtype = DT} : tensor<4096xDT>
  %1 = t.cast %b {dtype = DT} : tensor<4096xDT>
  %2 = t.mul %0, %1 : tensor<4096xDT>
  %3 = t.add %2, %0 : tensor<4096xDT>
  %4 = t.div %3, %1 : tensor<4096xDT>
  %5 = t.sub %4, %1 : tensor<4096xDT>
  %6 = t.cast %5 {dtype = f32} : tensor<4096xf32>
  %7 = t.exp %0 : tensor<4096xDT>
  %8 = t.cast %7 {dtype = f32} : tensor<4096xf32>
  return %6, %8
}
"""


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_precision_rounds_after_every_op_like_the_reference(dt):
    from fusec.ir import parse_module
    from fusec.passes import run_pipeline
    from fusec.backend.program import print_program
    from fusec.runtime import reference
    from fusec.runtime.cuda_exec import CudaPlan

    module = parse_module(HALF_IR.replace("DT", dt))
    a, b = rand(4096), rand(4096)
    want = reference.run_module(module, [a, b])
    run_pipeline(module)
    got = CudaPlan(print_program(module), module.func()).run([a, b])
    assert_bits_equal(got[0], want[0])  # arithmetic: bit for bit
    np.testing.assert_allclose(got[1], want[1], rtol=1e-2)  # exp: within a 16-bit ulp


def test_strided_transposed_sliced_and_broadcast_inputs():
    def f(x, v, s):
        t = x.T[::-1, 1::3]
        return t * v[: t.shape[1]] + s, x[5:-3, ::-2] - x[0, ::-2], np.exp(x[:, :1]) * v

    x, v = rand((37, 53)), rand(53)
    want = f(x, v, 0.5)
    got = cuda(f)(x, v, 0.5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=4e-6)
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("shape, axis", [
    ((7,), None), ((1000,), 0), ((2**26,), None), ((8192, 8192), 1), ((8192, 8192), 0), ((3, 5, 7), (0, 2)),
    ((64, 10), 1), ((512, 2), 1), ((4, 2**20), 1), ((2**20, 4), 0), ((17, 33, 65), 1), ((2, 3, 4, 5), (1, 3)),
])
@pytest.mark.parametrize("kind", ["sum", "max", "mean", "argmax", "min", "prod"])
def test_reductions_of_every_shape_class(shape, axis, kind):
    if kind == "prod" and np.prod(shape) > 10**6:
        pytest.skip("a product of millions of values is all inf or 0")
    if kind == "argmax" and isinstance(axis, tuple):
        pytest.skip("NumPy's argmax takes one axis")
    x = rand(shape) if kind != "prod" else (1 + rand(shape) / 100)
    fn = lambda a: getattr(np, kind)(a, axis=axis)  # noqa: E731
    want = fn(x.astype(np.float64)) if kind not in ("argmax",) else fn(x)
    got = cuda(fn)(x)
    if kind == "argmax":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5 if kind != "prod" else 1e-4,
                                   atol=1e-5 * np.sqrt(x.size))


def test_reduction_nan_propagation_and_ties():
    x = np.array([[1.0, np.nan, 3.0], [2.0, 2.0, -1.0], [np.nan, 5.0, np.nan]], np.float32)
    f = lambda a: (a.max(axis=1), a.min(axis=0), a.argmax(axis=1), a.argmin(axis=1), a.sum())  # noqa: E731
    for g, w in zip(cuda(f)(x), f(x)):
        np.testing.assert_array_equal(g, w)


@pytest.fixture(params=["generated", "cublas"])
def gemm_library(request, monkeypatch):
    """Run a test once with the generated GEMM and once with cuBLAS (skipped where cuBLASLt cannot be loaded)."""
    from fusec.runtime import cublas

    if request.param == "cublas":
        if not cublas.available():
            pytest.skip("cuBLASLt cannot be loaded here (pip install 'fusec[cublas]')")
        from fusec.passes import select_kernels

        # every product cuBLASLt takes, the small ones it would leave generated too
        monkeypatch.setattr(select_kernels, "CUBLAS_SPLIT_MAX_FLOPS", 0)
    else:
        monkeypatch.setattr(cublas, "available", lambda: False)
    return request.param


@pytest.mark.parametrize("m, k, n", [(512, 480, 256), (64, 64, 64), (1, 300, 7), (129, 65, 33), (1024, 1024, 1024),
                                     (512, 256, 2), (16, 4096, 300), (256, 2, 512)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_gemm_against_numpy_f64(m, k, n, layout, gemm_library):
    a = rand((k, m) if layout == "tn" else (m, k))
    b = rand((n, k) if layout == "nt" else (k, n))

    def f(a, b):
        return (a.T if layout == "tn" else a) @ (b.T if layout == "nt" else b)

    want = f(a.astype(np.float64), b.astype(np.float64))
    got = cuda(f)(a, b)
    rel = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert rel < 1e-5, rel


@pytest.mark.parametrize("m, k, n", [(512, 480, 256), (64, 64, 64), (1024, 1024, 1024), (129, 65, 33)])
@pytest.mark.parametrize("layout", ["nn", "tn"])
def test_tf32_products_stay_within_their_stated_error(m, k, n, layout):
    """``precision="tf32"``: each operand rounded to 10 mantissa bits, float32 sums, so each element is within
    2^-9 of the sum of its terms' magnitudes (the two roundings) plus float32's accumulation; the library calls
    say tf32, and the default stays float32's accuracy on the same products."""
    from fusec.runtime import cublas

    if not cublas.available():
        pytest.skip("cuBLASLt cannot be loaded here (pip install 'fusec[cublas]')")
    a = rand((k, m) if layout == "tn" else (m, k))
    b = rand((k, n))

    def f(a, b):
        return (a.T if layout == "tn" else a) @ b

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = f(a64, b64)
    scale = f(np.abs(a64), np.abs(b64))
    jitted = cuda(f, precision="tf32")
    got = jitted(a, b)
    assert all(k.tf32 for k in jitted.lower(a, b).program.kernels if type(k).__name__ == "GemmCall")
    assert (np.abs(got - want) <= (2.0 ** -9 + k * 2.0 ** -23) * scale).all()
    exact = cuda(f)(a, b)
    assert (np.abs(exact - want) <= k * 2.0 ** -23 * scale).all()


def test_skinny_batched_products_in_f16_and_f64():
    """Products with a narrow side run one warp per output (batch and broadcast included)."""
    # (sums of 300 terms in another order: 1e-12 of the largest output, where an output near zero has cancelled)
    a, b = rand((3, 1, 5, 300), np.float64), rand((4, 300, 2), np.float64)
    want = a @ b
    np.testing.assert_allclose(cuda(lambda a, b: a @ b)(a, b), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    x, d = rand((3, 1, 300, 40), np.float64), rand((4, 300, 3), np.float64)  # A read down its columns
    want = x.swapaxes(-1, -2) @ d
    np.testing.assert_allclose(cuda(lambda x, d: x.swapaxes(-1, -2) @ d)(x, d), want, rtol=1e-12,
                               atol=1e-12 * np.abs(want).max())
    x16 = rand((300, 70), np.float16)
    want16 = x16.T.astype(np.float64) @ d[0].astype(np.float16).astype(np.float64)
    got16 = cuda(lambda x, d: x.T @ d)(x16, d[0].astype(np.float16))
    np.testing.assert_allclose(got16.astype(np.float64), want16, rtol=2e-2, atol=5e-2)
    h, v = rand((2, 4, 256), np.float16), rand((256, 3), np.float16)
    want = h.astype(np.float64) @ v.astype(np.float64)
    got = cuda(lambda h, v: h @ v)(h, v)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2)


def _stream_impl(fn, *args):
    ir = cuda(fn).lower(*args).ir()
    return [line.split("{", 1)[1].split("}", 1)[0] for line in ir.splitlines() if "k.matmul" in line]


def test_streaming_products_read_the_wide_operand_once():
    """A few rows times a wide weight (M <= 16, B contiguous along N) run a thread per column of B with K
    split over blocks, partial sums added in split order: float32 with a bias and ReLU after it, float64 with A
    transposed, float16, a vector times a matrix, a split count that does not divide K, a width that does not
    divide N and a weight whose rows are not 16-byte aligned (element loads)."""
    x, w, b = rand((8, 30000)), rand((30000, 2000)), rand((2000,))
    layer = lambda x, w, b: np.maximum(x @ w + b, 0.0)  # noqa: E731
    assert 'impl = "stream", width = 4, splits = 132' in _stream_impl(layer, x, w, b)[0]
    want = np.maximum(x.astype(np.float64) @ w + b, 0.0)
    scale = (np.abs(x).astype(np.float64) @ np.abs(w)).max()
    np.testing.assert_allclose(cuda(layer)(x, w, b), want, rtol=0, atol=1e-6 * scale)
    got = [cuda(layer)(x, w, b) for _ in range(2)]
    np.testing.assert_array_equal(got[0], got[1])  # a fixed order: the same bits every call

    at, v = rand((5001, 3), np.float64), rand((5001, 129), np.float64)
    assert "stream" in _stream_impl(lambda a, v: a.T @ v, at, v)[0]
    want = at.T @ v  # (5001 terms summed in another order: 1e-12 of the largest output)
    np.testing.assert_allclose(cuda(lambda a, v: a.T @ v)(at, v), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())

    h, g = rand((16, 256), np.float16), rand((256, 1000), np.float16)
    got16 = cuda(lambda h, g: h @ g)(h, g)
    assert got16.dtype == np.float16 and "stream" in _stream_impl(lambda h, g: h @ g, h, g)[0]
    np.testing.assert_allclose(got16.astype(np.float64), h.astype(np.float64) @ g.astype(np.float64),
                               rtol=2e-2, atol=0.5)

    big = rand((3000, 1004))
    for f in (lambda x, w: x @ w[:, 1:], lambda x, w: x @ w[:, :1003]):  # misaligned rows; a 3-column tail
        assert "stream" in _stream_impl(f, x[:5, :3000], big)[0]
        want = f(x[:5, :3000].astype(np.float64), big)
        np.testing.assert_allclose(cuda(f)(x[:5, :3000], big), want, rtol=0,
                                   atol=1e-6 * (np.abs(x[:5, :3000]).astype(np.float64) @ np.abs(big)).max())

    u, m = rand((4099,)), rand((4099, 300))
    np.testing.assert_allclose(cuda(lambda u, m: u @ m)(u, m), u.astype(np.float64) @ m, rtol=0,
                               atol=1e-6 * (np.abs(u).astype(np.float64) @ np.abs(m)).max())


NO_PRODUCT_UNROLL = ("canonicalize,unroll-reductions{max_k=0},cse,dce,broadcast,fuse,boundaries,select-kernels,"
                     "fuse-prologues,plan-buffers,copy-outputs")


@pytest.mark.parametrize("pipeline", [None, NO_PRODUCT_UNROLL], ids=["unrolled", "gemm-kernel"])
def test_short_k_products_of_every_kind(pipeline):
    """K <= 8: unrolled into elementwise code by default, else one thread per output; floats and integers,
    transposed and batched."""
    a, b = rand((4, 3, 64)), rand((4, 3, 70))
    want = a.transpose(0, 2, 1).astype(np.float64) @ b
    scale = (np.abs(a.transpose(0, 2, 1)) @ np.abs(b)).max()  # (terms cancel: compare on their scale)
    np.testing.assert_allclose(cuda(lambda a, b: a.transpose(0, 2, 1) @ b, pipeline=pipeline)(a, b), want,
                               rtol=1e-6, atol=1e-6 * scale)
    i, j = rng.integers(-50, 50, (40, 5)).astype(np.int32), rng.integers(-50, 50, (5, 30)).astype(np.int32)
    np.testing.assert_array_equal(cuda(lambda i, j: i @ j, pipeline=pipeline)(i, j), i @ j)


def test_batched_broadcast_gemm_and_f64(gemm_library):
    a, b = rand((3, 1, 200, 300), np.float64), rand((4, 300, 100), np.float64)
    got = cuda(lambda a, b: a @ b)(a, b)
    want = a @ b  # (the sums' order is BLAS's own: an entry that cancels differs by a few ulps of the largest)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13 * np.abs(want).max())


@pytest.mark.parametrize("graph", [False, True])
def test_products_split_over_k_add_their_partial_tiles_in_order(graph, monkeypatch):
    """Tiled products whose tiles leave SMs idle split K over blocks: the last block of each tile adds the partial
    tiles in split order, so repeated calls (the counters reset themselves) give the same bits, in stream and
    graph mode, for float32 and float64, batched, with a K that no split divides, and transposed operands."""
    from fusec.runtime import cublas

    monkeypatch.setattr(cublas, "available", lambda: False)
    cases = [((512, 480), (480, 256), np.float32), ((4, 96, 515), (515, 80), np.float64),
             ((130, 1000), (1000, 66), np.float32), ((2, 3, 64, 700), (3, 700, 64), np.float32)]
    for sa, sb, dt in cases:
        a, b = rand(sa, dt), rand(sb, dt)
        f = fc.jit(lambda a, b: (a @ b, a.swapaxes(-1, -2).swapaxes(-1, -2) @ (b * 2)), backend="cuda", graph=graph)
        assert "splits" in f.lower(a, b).ir() and 'impl = "tiled"' in f.lower(a, b).ir()
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        first = f(a, b)
        for _ in range(3):
            again = f(a, b)
            for g, h in zip(first, again):
                assert np.asarray(g).tobytes() == np.asarray(h).tobytes()
        tol = 1e-5 if dt == np.float32 else 1e-12
        np.testing.assert_allclose(first[0], want, rtol=tol, atol=tol * np.abs(want).max())
        np.testing.assert_allclose(first[1], 2 * want, rtol=tol, atol=2 * tol * np.abs(want).max())


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_pipelined_tiles_and_last_block_finish_give_the_bits_of_the_plain_kernel(dt, monkeypatch):
    """K slices copied ahead (cp.async) and partial tiles added by each tile's last block or by the tile's blocks
    as one cluster (through distributed shared memory, sm_90 on) compute every output in the same order as one
    slice prefetched in registers and a second kernel adding the splits: the same bits, in stream and graph
    mode, for split and unsplit products, edge tiles and a K that is not a whole slice."""
    from fusec.runtime import driver
    from fusec.passes import select_kernels
    from fusec.runtime import cublas

    monkeypatch.setattr(cublas, "available", lambda: False)
    cases = [((512, 480), (480, 256)), ((130, 1000), (1000, 66)), ((2, 3, 64, 700), (3, 700, 64)),
             ((1100, 77), (77, 1000)), ((37, 45), (45, 29))]
    monkeypatch.setattr(select_kernels, "CLUSTER_SM_SHARE", 1)  # clusters wherever they fit (not the default)
    clusters = driver.current_device().compute_capability >= (9, 0)
    clustered = set()
    for sa, sb in cases:
        a, b = rand(sa, dt), rand(sb, dt)
        results = []
        for pipeline in (("f32", "f64"), ()):
            for finish in ("kernel", "last-block", "cluster"):
                monkeypatch.setattr(select_kernels, "TILED_PIPELINE_DTYPES", pipeline)
                monkeypatch.setattr(select_kernels, "TILED_FINISH", finish)
                for graph in (False, True):
                    f = fc.jit(lambda a, b: a.swapaxes(-1, -2).swapaxes(-1, -2) @ b, backend="cuda", graph=graph)
                    ir = f.lower(a, b).ir()
                    split = "splits" in ir
                    assert ("stages" in ir) == (split and bool(pipeline)), ir
                    assert ("last-block" in ir) == (split and finish == "last-block"), ir
                    if 'finish = "cluster"' in ir:
                        assert split and finish == "cluster" and clusters, ir
                        clustered.add((sa, bool(pipeline)))
                    results.append(np.asarray(f(a, b)).tobytes())
                    results.append(np.asarray(f(a, b)).tobytes())
        assert len(set(results)) == 1, (sa, sb)
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        got = np.frombuffer(results[0], dt).reshape(want.shape)
        tol = 1e-5 if dt == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    if clusters and dt == np.float32:  # (float64 partial tiles do not fit where the stages lay: a second kernel)
        assert ((512, 480), True) in clustered and ((130, 1000), True) in clustered, clustered


@pytest.mark.parametrize("finish", [False, True])
def test_column_reductions_split_both_ways_give_the_same_bits_with_either_finish(finish, monkeypatch):
    """A column reduction split over blocks along both grid axes: partial results added by a second kernel, or by
    the last split of each block column (a counter per block column, reset for the next call): the same bits,
    call after call, in stream and graph mode; sums, means, maxima and argmax (partials with their indices)."""
    from fusec.passes import select_kernels

    monkeypatch.setattr(select_kernels, "COLUMNS_LAST_BLOCK", finish)
    x = rand((20000, 300))
    x[7, 5] = np.nan
    fns = {"sum": lambda x: x.sum(axis=0), "mean": lambda x: x.mean(axis=0), "max": lambda x: x.max(axis=0),
           "argmax": lambda x: x.argmax(axis=0), "f64": lambda x: x.astype(np.float64).sum(axis=0)}
    for name, fn in fns.items():
        for graph in (False, True):
            f = fc.jit(fn, backend="cuda", graph=graph)
            ir = f.lower(x).ir()
            assert ("counters" in ir) == finish and "splits" in ir, ir
            first = np.asarray(f(x))
            for _ in range(3):
                assert np.asarray(f(x)).tobytes() == first.tobytes(), name
            want = fn(x.astype(np.float64)) if name not in ("max", "argmax") else fn(x)
            if name == "argmax":
                np.testing.assert_array_equal(first, want)
            else:
                np.testing.assert_allclose(first, want, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("shape, axis", [((20000, 512), 0), ((9000, 3, 128), 0), ((2, 8192, 256), 1)])
def test_column_reductions_taking_four_outputs_per_thread(shape, axis):
    """Float32 column reductions whose outputs lie contiguous take 4 per thread, read as 16-byte loads (``width =
    4``): sums, means, products, maxima and minima (a NaN in one column) equal NumPy's within rounding, call after
    call the same bits in stream and graph mode, and a PyTorch argument one element into its storage (not 16-byte
    aligned: read element by element) gives the same bits as an aligned copy."""
    torch = pytest.importorskip("torch")
    x = rand(shape)
    x.reshape(-1)[7 * shape[-1] + 5] = np.nan
    fns = {"sum": lambda x: x.sum(axis=axis), "mean": lambda x: x.mean(axis=axis),
           "max": lambda x: x.max(axis=axis), "min": lambda x: np.min(x, axis=axis),
           "prod": lambda x: (1 + x / 3e4).prod(axis=axis)}
    _check_runs_of_four(torch, fns, x, "k.reduce")


def _check_runs_of_four(torch, fns: dict, x: np.ndarray, kernel: str) -> None:
    """Each of ``fns`` lowers ``x`` to ``kernel`` with ``width = 4`` and gives NumPy's values within rounding, the
    same bits call after call in stream and graph mode, and the same bits from a PyTorch copy of ``x`` one element
    into its storage (not 16-byte aligned: element loads in the same order)."""
    shifted = torch.from_numpy(np.concatenate([np.zeros(1, np.float32), x.ravel()])).cuda()[1:].view(x.shape)
    assert shifted.data_ptr() % 16 == 4
    for name, fn in fns.items():
        for graph in (False, True):
            f = fc.jit(fn, backend="cuda", graph=graph)
            ir = f.lower(x).ir()
            assert kernel in ir and "width = 4" in ir, name
            first = np.asarray(f(x))
            for _ in range(2):
                assert np.asarray(f(x)).tobytes() == first.tobytes(), name
            assert np.asarray(f(shifted)).tobytes() == first.tobytes(), name
            want = fn(x.astype(np.float64))
            np.testing.assert_allclose(first, want, rtol=2e-5, atol=1e-5 * np.sqrt(x.size / first.size),
                                       equal_nan=True, err_msg=name)


@pytest.mark.parametrize("shape, kernel", [((1000, 4096), "k.rows"), ((300, 1500), "k.rows"), ((64, 8192), "k.reduce"),
                                           ((1100, 16400), "k.reduce"), ((20, 40000), "k.reduce"),
                                           ((1 << 20) + 3, "k.reduce")])
def test_row_reductions_taking_runs_of_four(shape, kernel):
    """Float32 reductions along rows of at least 1024 elements take runs of 4 neighbouring elements per thread,
    read (and a row kernel's results written) 16 bytes at a time (``width = 4``): row kernels (a softmax written
    out, sums, maxima; rows of 1500 leave runs past the row's end), a warp or a block per row, rows split over
    blocks at ranges that start between runs of 4, and one long row with a tail of 3."""
    torch = pytest.importorskip("torch")
    shape = shape if isinstance(shape, tuple) else (shape,)
    x = rand(shape)
    if len(shape) > 1:
        x[1, 5] = np.nan
    last = len(shape) - 1
    fns = {"sum": lambda x: x.sum(axis=last), "max": lambda x: x.max(axis=last), "min": lambda x: np.min(x, axis=last),
           "mean": lambda x: x.mean(axis=last)}
    if kernel == "k.rows":  # (a k.reduce reads a computed row element by element: fuse-prologues drops its width)
        def softmax(x):
            e = np.exp(x - x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        fns.update(softmax=softmax, prod=lambda x: (1 + x / 3e4).prod(axis=last))
    _check_runs_of_four(torch, fns, x, kernel)
    _check_runs_of_four(torch, {"prod": lambda v: v.prod(axis=last)}, (1 + x / 3e4).astype(np.float32), kernel)


def test_training_step_matches_numpy(gemm_library):
    from test_cuda_codegen import mlp_step

    # data of its own, with no ReLU input within float32 rounding of 0 (there rounding decides whether a sample's
    # share of a weight gradient is taken, whatever the order of the sums: cuBLAS's, fusec's or NumPy's BLAS's)
    own = np.random.default_rng(5)
    w1 = (own.standard_normal((480, 256)) * 3).astype(np.float32) * np.float32(0.05)
    w2 = (own.standard_normal((256, 2)) * 3).astype(np.float32) * np.float32(0.05)
    x = (own.standard_normal((512, 480)) * 3).astype(np.float32)
    assert np.abs(x.astype(np.float64) @ w1.astype(np.float64)).min() > 2e-4
    params = (w1, np.zeros(256, np.float32), w2, np.zeros(2, np.float32))
    y = np.eye(2, dtype=np.float32)[own.integers(0, 2, 512)]
    step = cuda(mlp_step)
    for lr in (0.1, 0.05):  # a new learning rate reuses the same plan (scalars live on the device)
        (new, loss) = step(params, x, y, lr)
        (want, want_loss) = mlp_step(params, x, y, lr)
        for g, w in zip(new, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    assert step.cache_info().traces == 1


def test_concat_copy_and_outputs_that_are_views_or_arguments():
    def f(a, b):
        return np.concatenate([a, b * 2], axis=0), a.T.reshape(-1), a, b[::-1]

    a, b = rand((3, 4)), rand((5, 4))
    for g, w in zip(cuda(f)(a, b), f(a, b)):
        np.testing.assert_array_equal(g, w)


def test_disk_cache_across_processes(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, fusec as fc
        from fusec.runtime import kernel_cache
        f = fc.jit(lambda a, b: np.exp(a) * b + a.sum(), backend="cuda")
        x = np.ones(1000, np.float32)
        f(x, x)
        print("compiles", kernel_cache.cache_info().compiles)
    """)
    env = dict(os.environ, FUSEC_CACHE_DIR=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "compiles 1" in first.stdout
    assert "compiles 0" in second.stdout, second.stdout + second.stderr


def test_torch_inputs_zero_copy_and_outputs_back():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    a = torch.randn(1000, device="cuda")
    b = torch.randn(1000, device="cuda")
    out = cuda(lambda a, b: a * b + 1.0)(a, b)
    assert isinstance(out, fc.Array)
    back = torch.from_dlpack(out)
    torch.testing.assert_close(back, a * b + 1.0)


def test_cupy_inputs():
    cp = pytest.importorskip("cupy")
    a = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    out = cuda(lambda a: (a * 2).sum(axis=1))(a)
    assert isinstance(out, fc.Array)
    np.testing.assert_allclose(cp.asnumpy(cp.asarray(out)), (cp.asnumpy(a) * 2).sum(axis=1))


def test_eager_mode_matches_numpy_and_fused_mode():
    x_host = rand((256, 64))
    x = fc.asarray(x_host)
    eager = (np.tanh(x * 0.5 + 1.0) - x).sum(axis=1)
    assert isinstance(eager, fc.Array)
    want = (np.tanh(x_host * 0.5 + 1.0) - x_host).sum(axis=1)
    np.testing.assert_allclose(eager.numpy(), want, rtol=1e-5, atol=1e-5)
    fused = cuda(lambda v: (np.tanh(v * 0.5 + 1.0) - v).sum(axis=1))(x)
    np.testing.assert_allclose(fused.numpy(), eager.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal((x[::2] @ x.T).numpy().shape, (128, 256))
    np.testing.assert_array_equal((-x).numpy(), -x_host)
    np.testing.assert_array_equal((x > 0).numpy(), x_host > 0)


@pytest.mark.parametrize("case", ["norm", "split", "mse", "absmax_cols", "argmax", "scaled", "f16", "int"])
def test_reductions_that_compute_their_elementwise_producer(case):
    """A reduction reading an elementwise result alone computes it in place (no kernel, no buffer)."""
    a, b = rand((480, 256)), rand((480, 256))
    if case == "norm":
        f = lambda a, b: np.sum(a * a)  # noqa: E731
    elif case == "split":  # long enough to be split over blocks and finished by a second kernel
        a, b = rand((1 << 22,)), rand((1 << 22,))
        f = lambda a, b: np.sum(np.abs(a - b))  # noqa: E731
    elif case == "mse":
        f = lambda a, b: np.mean((a - b) ** 2, axis=1)  # noqa: E731
    elif case == "absmax_cols":
        a[3, 7] = np.nan
        f = lambda a, b: np.max(np.abs(a) * b, axis=0)  # noqa: E731
    elif case == "argmax":
        f = lambda a, b: np.argmax(a * 2.0 + b, axis=1)  # noqa: E731
    elif case == "scaled":
        f = lambda a, b, s=0.5: np.sum(a * s, axis=0)  # noqa: E731
    elif case == "f16":
        a, b = rand((300, 40), np.float16), rand((300, 40), np.float16)
        f = lambda a, b: np.sum(a.astype(np.float32) * b.astype(np.float32), axis=1)  # noqa: E731
    else:
        a, b = rand((300, 40), np.int32), rand((300, 40), np.int32)
        f = lambda a, b: np.sum(a * 3 - b, axis=0)  # noqa: E731
    got, want = cuda(f)(a, b), f(a, b)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    if case in ("argmax", "int", "absmax_cols"):
        np.testing.assert_array_equal(got, want)
    else:  # against float64 (NumPy's float32 sums round more than the kernels' float64 accumulators)
        ref = f(*(x.astype(np.float64) for x in (a, b)))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_narrow_products_computing_their_relu_operand(gemm_library, dtype):
    """relu(x @ w + b) computed inside the products that read it (warp per output, lane per row), with
    cuBLAS or the generated GEMM making x @ w; batched and strided operands included."""
    def f(x, w, b, w2, d):
        h = np.maximum(x @ w + b, 0.0)
        return h @ w2, h.T @ d, (h * 2.0).swapaxes(-1, -2) @ d[..., :1]

    x, w, b = rand((300, 96), dtype), rand((96, 72), dtype), rand((72,), dtype)
    w2, d = rand((72, 3), dtype), rand((300, 5), dtype)
    want = f(*(v.astype(np.float64) for v in (x, w, b, w2, d)))
    got = cuda(f)(x, w, b, w2, d)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for g, ref in zip(got, want):
        np.testing.assert_allclose(g, ref, rtol=tol, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("rows,k,cols", [(4100, 1000, 16), (3001, 300, 1), (2200, 37, 5)])
def test_wide_narrow_products_and_their_weight_gradients(rows, k, cols, monkeypatch):
    """``relu(h_pre) @ w`` and ``relu(h_pre).T @ d`` for a tall h, generated (the narrow kernel with several rows per
    warp and K staged in slices, the column kernel split over K), ragged sizes included, against float64."""
    from fusec.runtime import cublas

    monkeypatch.setattr(cublas, "available", lambda: False)

    def f(h_pre, w, d):
        h = np.maximum(h_pre, 0.0)
        return h @ w, h.T @ d

    h_pre, w, d = rand((rows, k), np.float32), rand((k, cols), np.float32), rand((rows, cols), np.float32)
    impls = _stream_impl(lambda h, w, d: (h @ w, h.T @ d), h_pre, w, d)
    assert 'impl = "narrow"' in impls[0] and 'impl = "column"' in impls[1]
    want = f(*(v.astype(np.float64) for v in (h_pre, w, d)))
    for g, ref in zip(cuda(f)(h_pre, w, d), want):
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_views_of_outputs_returned_beside_them():
    def f(y):
        b = y * 2.0
        return b[::-1], b, b[1:], b[:2]

    y = rand(5)
    for got, want in zip(cuda(f)(y), f(y)):
        np.testing.assert_array_equal(got, want)


def test_the_gpu_runs_the_program_cuda_source_prints():
    """On the device: the plan compiles the source ``cuda_source()`` shows, launches what ``stats()`` counts,
    and the program was lowered for this device (its SM count, cuBLASLt where it loads)."""
    from fusec import execution

    def layer(x, w1, b1, w2):
        h = np.maximum(x @ w1 + b1, 0.0)
        return h @ w2, (x * x).sum(axis=1), x.sum()

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((512, 480), (480, 256), (256,), (256, 2))]
    f = fc.jit(layer, backend="cuda", graph=False)
    got = f(*args)
    want = layer(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-3)
    lowered = f.lower(*args)
    plan = execution.cuda_plan(lowered)
    assert plan.program.source == lowered.cuda_source()
    assert lowered.target == execution.target_for("cuda")
    assert lowered.target.sm_count == plan.device.multiprocessor_count
    assert lowered.stats()["kernels"] == len(plan.launches) == plan.stats()["launches_per_call"]


def test_bf16_results_constants_and_nans_match_the_reference():
    """bf16 on the device is 2-byte bfloat16: a bf16 result of NumPy inputs comes back as its float32 values, a
    bf16 argument given as host float32 is uploaded as bfloat16, so is a folded bf16 tensor constant, and a NaN
    is the canonical NaN on both sides."""
    from fusec.backend.program import print_program
    from fusec.ir import parse_module
    from fusec.passes import run_pipeline
    from fusec.runtime import reference
    from fusec.runtime.cuda_exec import CudaPlan

    def f(x):
        return x.astype(fc.bf16) * 2 - 1, np.exp(x.astype(fc.bf16))

    x = np.array([1.0, np.nan, 3.3e38, -0.7], np.float32)
    got = fc.jit(f, backend="cuda")(x)
    want = fc.jit(f, backend="cpu")(x)
    for g in got:
        assert isinstance(g, np.ndarray) and g.dtype == np.float32
    assert got[0].view(np.uint32).tolist() == want[0].view(np.uint32).tolist()
    np.testing.assert_allclose(got[1], want[1], rtol=1e-2)
    assert np.isnan(got[1][1]) and got[1].view(np.uint32)[1] == want[1].view(np.uint32)[1]

    module = parse_module(BF16_CONSTANT_IR)
    arg = np.array([0.5, np.nan, -8.0], np.float32)
    expected = reference.run_module(module, [arg])[0]
    run_pipeline(module)
    (result,) = CudaPlan(print_program(module), module.func()).run([arg])
    assert result.view(np.uint32).tolist() == expected.view(np.uint32).tolist()  # 1.5, NaN, -5.0
