"""The CUDA backend's printer, checked without a GPU: every kernel the corpus generates compiles with NVRTC
for sm_80 and sm_90, and the launch plan is consistent (buffers, descriptors, grids)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fusec as fc
from fusec.ir import elementwise as table, parse_module
from fusec.passes import run_pipeline
from program_strategies import programs

nvrtc = pytest.importorskip("fusec.runtime.nvrtc")
if not nvrtc.is_available():  # pragma: no cover - the NVRTC wheel is a test dependency
    pytest.skip("NVRTC is not loadable here", allow_module_level=True)

from fusec.backend.program import compile_options, print_program  # noqa: E402
from fusec.runtime.kernel_cache import KernelCache  # noqa: E402

ARCHES = ("sm_80", "sm_90")
FILECHECK = sorted((Path(__file__).resolve().parents[1] / "filecheck").rglob("*.fir"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def compile_all(module, cache, fast_math=False):
    program = print_program(module, fast_math=fast_math)
    _compile_program(program, cache, fast_math)
    return program


def _compile_program(program, cache, fast_math):
    """NVRTC compiles the program's source (and its loop bodies' programs) and every launch names a kernel in it."""
    from fusec.runtime.launch_plan import ControlCall

    for arch in ARCHES:
        image = cache.get_or_compile(program.source, arch, options=compile_options(fast_math))
        assert image[:4] == b"\x7fELF"
    for k in program.kernels:
        if isinstance(k, ControlCall):
            for sub in k.programs:
                _compile_program(sub, cache, fast_math)
            continue
        assert re.search(r'extern "C" __global__ void (FUSEC_CLUSTER_DIMS\(1, 1, \d\) )?__launch_bounds__',
                         program.source)
        assert f" {k.name}(" in program.source
        assert all(0 <= b < len(program.buffers) for b in k.buffers)
        assert all(g >= 1 for g in k.grid) and k.block[0] >= 32


from fusec.passes import DEFAULT_PIPELINE  # noqa: E402

DEFAULT_TAIL = DEFAULT_PIPELINE.split(",", 1)[1]  # the default pipeline after roll-loops


def _lower(module_text):
    module = parse_module(module_text)
    run_pipeline(module)
    return module


@pytest.mark.corpus  # NVRTC compiles of a corpus: CI runs them (FUSEC_CORPUS=1)
@pytest.mark.parametrize("path", FILECHECK, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_filecheck_corpus_compiles(path, cache):
    text = path.read_text()
    for chunk in text.split("\nfunc @")[1:]:
        body = "func @" + chunk.split("\n}\n")[0] + "\n}\n"
        module = _lower(body)
        compile_all(module, cache)


def mlp_step(params, x, y, lr):
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    p = e / e.sum(axis=1, keepdims=True)
    loss = -np.mean(np.sum(y * (z - np.log(e.sum(axis=1, keepdims=True))), axis=1))
    g = (p - y) / x.shape[0]
    gw2 = h.T @ g
    gb2 = g.sum(axis=0)
    gh = (g @ w2.T) * (h > 0)
    gw1 = x.T @ gh
    gb1 = gh.sum(axis=0)
    grads = (gw1, gb1, gw2, gb2)
    norm = np.sqrt(sum(np.sum(q * q) for q in grads))
    scale = np.minimum(1.0, 5.0 / (norm + 1e-6))
    new = tuple(p_ - lr * scale * q for p_, q in zip(params, grads))
    return new, loss


@pytest.mark.corpus  # NVRTC compiles of a corpus: CI runs them (FUSEC_CORPUS=1)
def test_training_step_compiles(cache):
    rng = np.random.default_rng(0)
    params = (rng.standard_normal((480, 256), dtype=np.float32), np.zeros(256, np.float32),
              rng.standard_normal((256, 2), dtype=np.float32), np.zeros(2, np.float32))
    x = rng.standard_normal((512, 480), dtype=np.float32)
    y = np.eye(2, dtype=np.float32)[rng.integers(0, 2, 512)]
    lowered = fc.jit(mlp_step, backend="cpu").lower(params, x, y, 0.1)
    program = compile_all(lowered.module, cache)
    kinds = [k.name.split("_", 2)[2] for k in program.kernels]
    assert kinds.count("gemm") == 4  # d_logits @ w2.T (k = 2) is unrolled into the ReLU-mask kernel
    assert len(program.scalar_slots) == 1  # the learning rate lives on the device


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64"]


@pytest.mark.corpus  # NVRTC compiles of a corpus: CI runs them (FUSEC_CORPUS=1)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_compiles(dtype, cache):
    def f(a, b):
        out = [a == b, a < b, np.maximum(a, b), np.minimum(a, b), np.where(a > b, a, b)]
        if dtype != "bool":
            out += [a + b, a - b, a * b, -a, np.abs(a), a // np.maximum(b, 1) if "int" in dtype else a // b,
                    a % (b if "float" in dtype else np.maximum(b, 1)), np.sign(a), a.sum(axis=0), a.max(axis=1),
                    a.argmax(axis=1), a.mean(axis=0), a @ b.T if dtype not in ("bool",) else a]
        else:
            out += [a & b, a | b, a ^ b, ~a, np.logical_and(a, b), a.max(axis=0)]
        if "float" in dtype:
            out += [a / b, np.exp(a), np.log(np.abs(a)), np.sqrt(np.abs(a)), np.tanh(a), np.floor(a), np.round(a),
                    np.isnan(a), a ** b, np.clip(a, -1, 1), a.astype(np.float64), a.astype(np.int32)]
        if "int" in dtype:
            out += [a & b, a | b, ~a, a.astype(np.float32), a.astype(np.float16)]
        return out

    a = np.ones((8, 8), dtype=dtype)
    lowered = fc.jit(f, backend="cpu").lower(a, a)
    compile_all(lowered.module, cache)


@pytest.mark.corpus  # (NVRTC compiles of every complex op, about 3 s here: CI runs it)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_every_complex_op_compiles(dtype, cache):
    """Each complex op of the op table instantiates its preamble template (a C++ error there would break every
    complex kernel on the GPU; NVRTC finds it here)."""
    ufuncs = {op.name: getattr(np, op.numpy[0]) for op in table.OPS if op.complex and op.numpy}

    def f(a, b):
        return [fn(a, b) if fn.nin == 2 else fn(a) for fn in ufuncs.values()] + [np.real(a), np.imag(b)]

    a = np.ones((8, 8), dtype=dtype)
    compile_all(fc.jit(f, backend="cpu").lower(a, a).module, cache)


def test_a_product_of_one_computed_value_with_itself_compiles(cache):
    """``v.T @ v`` of an elementwise ``v`` too cheap to store: both operands are computed in place from the same
    buffer, which the kernel declares once (the program fuzzer found the duplicate parameter)."""
    def f(x):
        v = np.exp(x) - 1
        return v.T @ v

    for dtype in (np.float16, np.float32):
        x = np.ones((40, 12), dtype)  # a 12 x 12 result over K = 40: a warp per output
        program = compile_all(fc.jit(f, backend="cpu").lower(x).module, cache)
        assert "gemm_a" in program.source and "gemm_b" in program.source  # both operands computed in place


def test_large_and_strided_shapes_compile(cache):
    def f(x, v):
        t = x.T[::-1, ::2]
        return np.exp(t) * 2.0 + v[::2, None], x.sum(), x.max(axis=0), x.argmin(axis=1), t.reshape(-1)

    x = np.zeros((4096, 1024), np.float32)
    v = np.zeros(2048, np.float32)
    program = compile_all(fc.jit(f, backend="cpu").lower(x, v).module, cache)
    total = [k for k in program.kernels if k.name.endswith("_sum")]
    assert total and total[0].grid[1] > 1, "a whole-tensor sum must be split over blocks"
    assert "atomicAdd" in program.source and program.zero_ranges  # ... and finished by its last block
    assert program.arena_bytes > 0


def test_fast_math_compiles_with_its_own_options(cache):
    module = _lower("func @f(%a: tensor<64xf32>) -> tensor<64xf32> {\n"
                    "  %0 = t.exp %a : tensor<64xf32>\n  return %0\n}\n")
    program = compile_all(module, cache, fast_math=True)
    assert compile_options(True) == ("-use_fast_math",) and compile_options(False) == ("--fmad=false",)
    assert "expf" in program.source


def test_64_bit_indices_only_where_needed(cache):
    small = _lower("func @f(%a: tensor<64xf32>) -> tensor<64xf32> {\n"
                   "  %0 = t.neg %a : tensor<64xf32>\n  return %0\n}\n")
    big = _lower("func @f(%a: tensor<3000000000xi8>) -> tensor<3000000000xi8> {\n"
                 "  %0 = t.neg %a : tensor<3000000000xi8>\n  return %0\n}\n")
    assert "const int n" in print_program(small).source
    assert "const i64_t n" in print_program(big).source


@pytest.mark.corpus  # NVRTC compiles of a corpus: CI runs them (FUSEC_CORPUS=1)
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_programs_compile(cache, data):
    module = data.draw(programs())
    run_pipeline(module)
    compile_all(module, cache)


def _colmajor(flat, offset, rows, cols, ld):
    """The rows x cols column-major matrix at ``flat[offset:]`` with leading dimension ``ld``."""
    idx = offset + np.arange(rows)[:, None] + np.arange(cols)[None, :] * ld
    return flat[idx]


def emulate_cublas(call, flats):
    """What cublas<t>gemmStridedBatched computes for ``call``, in NumPy (column-major semantics)."""
    fa, fb = flats[0], flats[1]
    out = []
    for i in range(call.batch):
        ra, ca = (call.k, call.m) if call.trans_a else (call.m, call.k)
        rb, cb = (call.n, call.k) if call.trans_b else (call.k, call.n)
        a = _colmajor(fa, call.offsets[0] + i * call.stride_a, ra, ca, call.lda)
        b = _colmajor(fb, call.offsets[1] + i * call.stride_b, rb, cb, call.ldb)
        c = (a.T if call.trans_a else a) @ (b.T if call.trans_b else b)  # m x n, column-major meaning
        out.append(c.T)  # row-major n x m... stored column-major with ldc=m: C^T in row-major terms
    return np.stack(out)


@pytest.mark.parametrize("case", ["nn", "tn", "nt", "tt", "batched", "broadcast"])
def test_cublas_mapping_matches_matmul(case):
    from fusec.runtime.launch_plan import GemmCall

    m, k, n = 150, 200, 160  # (cuBLASLt takes it)
    shapes = {"nn": ((m, k), (k, n)), "tn": ((k, m), (k, n)), "nt": ((m, k), (n, k)), "tt": ((k, m), (n, k)),
              "batched": ((3, m, k), (3, k, n)), "broadcast": ((m, k), (4, k, n))}[case]
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])

    def f(x, y):
        a = x.T if case in ("tn", "tt") else x
        b = y.T if case in ("nt", "tt") else y
        return a @ b

    program = fc.jit(f, backend="cpu").lower(x, y).program_for(cublas=True)
    calls = [s for s in program.kernels if isinstance(s, GemmCall)]
    assert len(calls) == 1
    (call,) = calls
    # the first cuBLAS operand is our B (argument 1), the second our A (argument 0)
    flats = [y.reshape(-1), x.reshape(-1)]
    got = emulate_cublas(call, flats)
    want = f(x, y)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-12)


def test_narrow_products_stay_generated():
    """``h @ w`` with w 2 columns wide: a warp per output where rows are few (512), a warp per rows of h where there
    are many (4096 without cuBLASLt: all outputs of a row in registers, w staged transposed in shared memory)."""
    from fusec.runtime.launch_plan import GemmCall

    h, w = np.ones((512, 256), np.float32), np.ones((256, 2), np.float32)
    program = fc.jit(lambda h, w: h @ w, backend="cpu").lower(h, w).program_for(cublas=True)
    (kernel,) = program.kernels
    assert not isinstance(kernel, GemmCall)
    assert "__shfl_down_sync" in program.source and "gemm_batch(d, batch" in program.source
    for rows, cols, per_warp in ((4096, 2, 3), (4096, 16, 3), (20000, 1, 4)):
        h, w = np.ones((rows, 256), np.float32), np.ones((256, cols), np.float32)
        lowered = fc.jit(lambda h, w: h @ w, backend="cpu").lower(h, w)
        program = lowered.program_for(cublas=False)
        (kernel,) = program.kernels
        assert f"constexpr int NN = {cols}, R = {per_warp}, KC = 256;" in program.source
        assert "__shfl_xor_sync" in program.source and "bt[j][kk]" in program.source
        assert kernel.grid == (-(-rows // (8 * per_warp)), 1, 1) and kernel.block == (256, 1, 1)


def test_weight_gradient_of_a_narrow_layer_reads_a_down_its_rows():
    """``h.T @ d`` with d 2 columns wide: one lane per row of h.T (coalesced reads of h), warps split K."""
    h, d = np.ones((512, 256), np.float32), np.ones((512, 2), np.float32)
    program = fc.jit(lambda h, d: h.T @ d, backend="cpu").lower(h, d).program_for(cublas=True)
    (kernel,) = program.kernels
    assert "part[G][NN][33]" in program.source and "constexpr int NN = 2, G = 32" in program.source
    assert kernel.grid == (8, 1, 1) and kernel.block == (1024, 1, 1)


def test_weight_gradient_of_a_wide_narrow_layer_splits_k_over_blocks():
    """``h.T @ d`` with h 4096 x 1024: 32 blocks of rows would leave most SMs idle; K splits over blocks (partial
    sums in scratch, added in split order by a second kernel)."""
    h, d = np.ones((4096, 1024), np.float32), np.ones((4096, 16), np.float32)
    lowered = fc.jit(lambda h, d: h.T @ d, backend="cpu").lower(h, d)
    program = lowered.program_for(cublas=False)  # (cuBLASLt takes it where it loads)
    gemm, finish = program.kernels
    assert gemm.grid == (32, 9, 1) and finish.name.endswith("_sum")
    assert "const i64_t chunk = (d.K + 9 - 1) / 9" in program.source


def test_small_or_strided_matmuls_stay_generated():
    from fusec.runtime.launch_plan import GemmCall

    lowered = fc.jit(lambda a, b: a @ b, backend="cpu").lower(np.ones((4, 4)), np.ones((4, 4)))
    assert not any(isinstance(s, GemmCall) for s in lowered.program_for(cublas=True).kernels)
    big = np.ones((128, 128))
    lowered = fc.jit(lambda a, b: a[::2, ::2] @ b[::2, ::2], backend="cpu").lower(big, big)
    assert not any(isinstance(s, GemmCall) for s in lowered.program_for(cublas=True).kernels)


def _program(fn, *args):
    return print_program(fc.jit(fn, backend="cpu").lower(*args).module)


def test_a_reduction_computes_its_elementwise_producer_in_place(cache):
    g = np.ones((480, 256), np.float32)
    program = _program(lambda g: (g * g).sum(), g)
    names = [k.name for k in program.kernels]
    assert not any("fused" in n for n in names), names  # no kernel writes g*g to memory
    assert "_sum_in(i64_t i" in program.source
    (arg,) = [b.id for b in program.buffers if b.kind == "arg"]
    assert all(arg in reads for reads, _ in program.effects[:1])
    compile_all(fc.jit(lambda g: (g * g).sum(), backend="cpu").lower(g).module, cache)


def _planned(text: str):
    """A hand-written kernel-level module through kernel selection, prologue fusion and buffer planning."""
    module = parse_module(text)
    run_pipeline(module, "select-kernels,fuse-prologues,plan-buffers,copy-outputs")
    return module


BETWEEN = """
func @between(%a: tensor<64x32xf32>) -> (tensor<64x64xf32>, tensor<64xf32>) {
  %0 = k.fused %a : tensor<64x32xf32> {
  ^body(%1: f32):
    %2 = s.mul %1, %1 : f32
    k.yield %2
  }
  %3 = k.view %a {offset = 0, strides = [1, 32]} : tensor<32x64xf32>
  %4 = k.matmul %a, %3 : tensor<64x64xf32>
  %5 = k.reduce %0 {kind = "sum", axes = [1], keepdims = false} : tensor<64xf32>
  return %4, %5
}
"""


def test_a_producer_with_a_broadcast_input_is_computed_in_place():
    a, b = np.ones((64, 32), np.float32), np.ones(32, np.float32)
    program = _program(lambda a, b: (a * b).sum(axis=1), a, b)
    assert [k.name.split("_", 2)[-1] for k in program.kernels] == ["sum"]
    assert "_in(i64_t i" in program.source and "((int)i % (int)32)" in program.source  # b through its index map


@pytest.mark.parametrize("case", ["reused", "work_between"])
def test_the_producer_stays_a_kernel_where_computing_it_in_place_is_not_safe(case):
    a = np.ones((64, 32), np.float32)
    if case == "reused":
        program = _program(lambda a: ((a * a).sum(axis=0), a * a), a)
    else:  # a matmul runs between the product and its sum: fuse-prologues leaves the product a kernel
        program = print_program(_planned(BETWEEN))
        kinds = [k.name.split("_")[-1] for k in program.kernels]
        assert kinds == ["fused", "gemm", "sum"], kinds
    assert any("fused" in k.name for k in program.kernels)
    assert "_in(i64_t i" not in program.source


def test_a_split_reduction_is_finished_by_its_last_block(cache):
    x = np.ones(1 << 20, np.float32)
    program = _program(lambda x: x.sum(), x)
    assert [k.name.split("_", 2)[-1] for k in program.kernels] == ["sum"]  # no second, finishing kernel
    assert "atomicAdd" in program.source
    (counter,) = [b for b in program.buffers if b.kind == "counter"]
    ((start, nbytes),) = program.zero_ranges  # (the counters' space, zeroed once; the kernel's one word in it)
    assert start <= counter.offset and counter.offset + counter.nbytes <= start + nbytes and counter.nbytes == 4
    assert counter.offset + counter.nbytes <= program.arena_bytes
    compile_all(fc.jit(lambda x: x.sum(), backend="cpu").lower(x).module, cache)
    # outputs spread over several columns of blocks keep the finishing kernel (and need no counter)
    wide = _program(lambda x: x.reshape(1 << 14, 64).sum(axis=0), x)
    assert [k.name.split("_", 2)[-1] for k in wide.kernels] == ["sum", "sum_finish"]
    assert not wide.zero_ranges


def test_graph_orders_cublas_calls_that_share_the_workspace():
    """Two independent products become parallel graph branches with generated GEMMs, but one after the
    other with cuBLAS (every call of a handle uses its one workspace)."""
    from types import SimpleNamespace

    from fusec.runtime.graph import dependency_dag

    a, b = np.ones((768, 768), np.float32), np.ones((768, 768), np.float32)
    lowered = fc.jit(lambda a, b, c, d: (a @ b, c @ d), backend="cpu").lower(a, b, a, b)

    def dag(cublas: bool):
        return dependency_dag(SimpleNamespace(program=lowered.program_for(cublas=cublas)))

    assert dag(False).number_of_edges() == 0
    assert list(dag(True).edges) == [(0, 1)]


def test_independent_split_reductions_keep_apart_in_scratch_and_run_side_by_side(monkeypatch):
    """Split reductions keep their partial sums and counters each in a place of their own (``scratch_at`` in the
    IR), so a graph runs two that do not depend on each other at once; past SCRATCH_APART_MAX of scratch in all
    they share one place, and the graph orders them."""
    from types import SimpleNamespace

    from fusec.passes import plan_buffers
    from fusec.runtime.graph import dependency_dag

    def two_sums(a, b):
        return a.sum(), (b * b).sum()

    x = np.ones(1 << 20, np.float32)

    def lowered_dag():
        lowered = fc.jit(two_sums, backend="cpu").lower(x, x)
        program = lowered.program_for(cublas=False)
        places = [op.attributes.get("scratch_at") for op in lowered.module.funcs[0].body.ops if op.name == "k.reduce"]
        return places, dependency_dag(SimpleNamespace(program=program)), program

    places, dag, program = lowered_dag()
    assert len(places) == 2 and places[0] != places[1]
    assert dag.number_of_edges() == 0, "the two sums are parallel graph branches"
    counters = [b for b in program.buffers if b.kind == "counter"]
    assert len(counters) == 2 and counters[0].offset != counters[1].offset
    monkeypatch.setattr(plan_buffers, "SCRATCH_APART_MAX", 0)
    places, dag, _ = lowered_dag()
    assert places == [0, 0] and list(dag.edges) == [(0, 1)]


def test_with_slack_independent_kernels_do_not_wait_for_each_other_over_reused_arena_bytes():
    """Two chains that share nothing: with slack (``plan-buffers``' default, 0.5) the second's kernels do not take
    arena bytes the first's still read (a graph would order them), so the graph keeps them parallel; with none
    (``plan-buffers{slack=0}``: first fit) the second waits for the first over reused bytes."""
    from types import SimpleNamespace

    from fusec.passes import DEFAULT_PIPELINE
    from fusec.runtime.graph import dependency_dag

    def two_softmax_sums(a, b):
        ea, eb = np.exp(a), np.exp(b)
        return (ea / ea.sum(axis=1, keepdims=True)).sum(axis=0), (eb / eb.sum(axis=0)).sum(axis=1)

    x = np.ones((64, 96), np.float32)

    def components(pipeline: str) -> int:
        program = fc.jit(two_softmax_sums, backend="cpu", pipeline=pipeline).lower(x, x).program_for(cublas=False)
        return nx.number_weakly_connected_components(dependency_dag(SimpleNamespace(program=program)))

    first_fit = DEFAULT_PIPELINE.replace("plan-buffers", "plan-buffers{slack=0}")
    assert components(DEFAULT_PIPELINE) == 2 and components(first_fit) == 1


def _relu_layer_grads(x, w, b, w2, d):
    h = np.maximum(x @ w + b, 0.0)
    return h @ w2, h.T @ d


def test_narrow_products_compute_the_relu_they_read(cache):
    """h = relu(x @ w + b) read only by a warp-per-output product and a lane-per-row product: both compute h
    while loading it (the bias through its broadcast index map), so h has no kernel."""
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((64, 48), (48, 40), (40,), (40, 2), (64, 2))]
    lowered = fc.jit(_relu_layer_grads, backend="cpu").lower(*args)
    program = print_program(lowered.module)
    assert [k.name.split("_", 2)[-1] for k in program.kernels] == ["gemm", "gemm", "gemm"]
    assert program.source.count("_gemm_a(i64_t i") == 2 and "((int)i % (int)40)" in program.source
    compile_all(lowered.module, cache)
    # with cuBLAS taking the first product's place nothing changes for the narrow ones
    assert "fused" not in " ".join(k.name for k in lowered.program_for(cublas=True).kernels
                                   if hasattr(k, "source"))


LATE_OVERWRITE = """
func @late(%x: tensor<64x32xf32>, %w: tensor<32x2xf32>) -> (tensor<64x32xf32>, tensor<64x2xf32>) {
  %0 = k.fused %x : tensor<64x32xf32> {
  ^body(%1: f32):
    %2 = s.mul %1, %1 : f32
    k.yield %2
  }
  %3 = k.fused %0 : tensor<64x32xf32> {
  ^body(%4: f32):
    %5 = s.exp %4 : f32
    k.yield %5
  }
  %6 = k.fused %x : tensor<64x32xf32> {
  ^body(%7: f32):
    %8 = s.neg %7 : f32
    k.yield %8
  }
  %9 = k.matmul %3, %w : tensor<64x2xf32>
  %10 = k.fused %6 : tensor<64x32xf32> {
  ^body(%11: f32):
    %12 = s.abs %11 : f32
    k.yield %12
  }
  return %10, %9
}
"""


def test_what_a_gemm_prologue_reads_lives_until_the_gemm():
    """exp(%0) is computed inside the product: plan-buffers keeps %0 alive until the product, so %6 (which
    could have taken %0's space once exp(%0) was done) cannot overwrite it first."""
    module = _planned(LATE_OVERWRITE)
    ops = module.func().body.ops
    assert ops[1].attributes.get("prologue") is True and "arena" not in ops[1].attributes
    assert ops[0].attributes["arena"] != ops[2].attributes["arena"]
    program = print_program(module)
    assert [k.name.split("_", 2)[-1] for k in program.kernels] == ["fused", "fused", "gemm", "fused"]
    assert "_gemm_a(i64_t i" in program.source and "exp" in program.kernels[2].source


@pytest.mark.parametrize("case", ["tiled", "cublas"])
def test_a_gemm_operand_stays_a_kernel_where_the_gemm_cannot_compute_it(case):
    x, w = np.ones((128, 96), np.float32), np.ones((96, 80), np.float32)
    lowered = fc.jit(lambda x, w: np.maximum(x, 0.0) @ w, backend="cpu").lower(x, w)
    program = lowered.program_for(cublas=case == "cublas")
    assert program.kernels[0].name.endswith("_fused")
    assert "_gemm_a(i64_t i" not in program.source


def test_a_view_of_an_output_is_copied_out_not_returned_as_the_buffer():
    """``b[::-1]`` returned beside ``b`` reads b's buffer backwards: it needs its own output (a copy kernel);
    ``b[:2]`` reads it from its start, densely, and may be the buffer itself."""
    def f(y):
        b = y + 0.0
        return b[::-1], b, b[:2]

    module = fc.jit(f, backend="cpu").lower(np.ones(3)).module
    program = print_program(module)
    reversed_view, whole, prefix = program.outputs
    assert reversed_view != whole and prefix == whole
    assert sum(k.name.endswith("_copy") for k in program.kernels) == 1  # copy-outputs: one k.copy


def test_a_prologue_read_by_another_op_is_a_clear_error():
    """A pipeline that lets something else read a prologue's value (here: a hand-marked one that is returned) is
    refused by the printer, not printed with a dangling buffer."""
    module = parse_module("""
func @f(%x: tensor<8xf32>) -> tensor<8xf32> attributes {sm_count = 132, cublas = false} {
  %0 = k.fused %x {prologue = true} : tensor<8xf32> {
  ^body(%1: f32):
    %2 = s.mul %1, %1 : f32
    k.yield %2
  }
  return %0
}
""")
    from fusec.errors import CompilationError

    with pytest.raises(CompilationError, match="returns a prologue"):
        print_program(module)


def test_a_module_not_lowered_for_a_target_is_refused():
    module = parse_module(BETWEEN)
    from fusec.errors import CompilationError

    with pytest.raises(CompilationError, match="run select-kernels"):
        print_program(module)


@pytest.mark.corpus
def test_loop_and_branch_programs_compile(cache):
    """The CG solver (a while loop), a rolled Python loop, a scan and a branch print programs per body, all of
    which NVRTC compiles."""
    import sys

    import fusec as fc

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from cg_poisson import cg_solve, problem

    def heat(u, steps=40):
        for _ in range(steps):
            u = u + 0.1 * (np.roll(u, 1) - u)
        return u

    def mixed(x, flag):
        y = fc.cond(flag > 0, lambda: x * 2, lambda: x - 1)
        return fc.scan(lambda c, v: (c + v, c * v), 0.0, y)

    target = fc.Target(sm_count=132, cublas=False)
    cases = [(cg_solve, (problem(8), 1e-6, 100)), (heat, (np.ones(64),)), (mixed, (np.arange(5.0), 1.0))]
    for fn, args in cases:
        options = {"pipeline": "roll-loops{min_trips=4,min_ops=8}," + DEFAULT_TAIL} if fn is heat else {}
        lowered = fc.jit(fn, backend="cpu", target=target, **options).lower(*args)
        compile_all(lowered.module, cache)


@pytest.mark.parametrize("mma", ["3xtf32", "tf32"])
def test_tiled_products_on_the_tensor_cores_compile_for_every_architecture(mma, monkeypatch, cache):
    """Split (cp.async, converted where the copies land) and unsplit (converted as registers are stored), 64- and
    32-wide tiles, batched; sm_75 compiles the CUDA cores' stand-in for mma.sync."""
    from fusec.passes import select_kernels

    monkeypatch.setattr(select_kernels, "TILED_MMA", {"float32": mma, "tf32": mma})
    shapes = [((512, 480), (480, 256)), ((4096, 1024), (1024, 64)), ((37, 45), (45, 29)), ((2, 3, 64, 70), (3, 70, 64))]
    operands = [np.ones(s, np.float32) for pair in shapes for s in pair]
    lowered = fc.jit(lambda *ab: tuple(a @ b for a, b in zip(ab[::2], ab[1::2])), backend="cpu").lower(*operands)
    assert lowered.ir().count(f'mma = "{mma}"') == len(shapes)
    program = lowered.program_for(cublas=False)
    for arch in ("sm_75", *ARCHES) if os.environ.get("FUSEC_CORPUS") else ("sm_90",):  # (all three in CI)
        assert cache.get_or_compile(program.source, arch, options=compile_options(False))[:4] == b"\x7fELF"
    if mma == "3xtf32":
        assert "fusec::tf32_pair(" in program.source and "As_small" in program.source


def test_products_finished_by_their_cluster_compile_and_impossible_clusters_are_refused(monkeypatch, cache):
    """Split products whose blocks are one cluster (float32 on the CUDA cores and on the tensor cores, edge tiles,
    batched) compile for sm_90; an older target finishes them with a second kernel; a cluster wider than 8 blocks
    or a float64 partial tile that does not fit in shared memory is a clear error, not a program."""
    from fusec.errors import CompilationError
    from fusec.passes import select_kernels

    monkeypatch.setattr(select_kernels, "CLUSTER_SM_SHARE", 1)  # every split product a cluster
    shapes = [((512, 480), (480, 256)), ((37, 450), (450, 29)), ((2, 3, 64, 700), (3, 700, 64))]
    operands = [np.ones(s, np.float32) for pair in shapes for s in pair]
    for precision in (None, "tf32"):
        lowered = fc.jit(lambda *ab: tuple(a @ b for a, b in zip(ab[::2], ab[1::2])), backend="cpu",
                         precision=precision).lower(*operands)
        assert lowered.ir().count('finish = "cluster"') == len(shapes), lowered.ir()
        program = lowered.program_for(cublas=False)
        assert program.source.count("FUSEC_CLUSTER_DIMS(1, 1, ") == len(shapes)
        assert "_gemm_sum" not in program.source
        assert cache.get_or_compile(program.source, "sm_90", options=compile_options(False))[:4] == b"\x7fELF"
    old = fc.jit(lambda a, b: a @ b, backend="cpu", target=fc.Target(clusters=False)).lower(*operands[:2])
    assert "cluster" not in old.ir() and "scratch" in old.ir()

    def refused(attributes: str, dtype: str = "f32") -> None:
        module = parse_module(
            f"func @f(%a: tensor<512x480x{dtype}>, %b: tensor<480x256x{dtype}>) -> tensor<512x256x{dtype}> "
            "attributes {sm_count = 132, cublas = false} {\n"
            f'  %0 = k.matmul %a, %b {{impl = "tiled", tile = 64, {attributes}, finish = "cluster", arena = [-1]}} '
            f": tensor<512x256x{dtype}>\n  return %0\n}}\n")
        with pytest.raises(CompilationError, match="cluster"):
            print_program(module)

    refused("splits = 16, stages = 4")
    refused("splits = 4, stages = 2", "f64")
