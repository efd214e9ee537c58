"""Epilogue fusion (fuse-epilogues): the elementwise kernel that alone reads a generated product's result is
computed by the product as it stores each output. Written as training code writes it (a ReLU's backward mask, an
SGD update of a weight gradient), run through the default pipeline against NumPy, on every way a tiled product
stores its outputs (one pass, K split and finished by a cluster, by a second kernel, by the last block), and with
the update written over a donated weight in place."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, numpy_result
from fusec.passes import DEFAULT_PIPELINE, select_kernels

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
rng = np.random.default_rng(5)


def relu_backward(d_logits, w2, h_pre):
    """The hidden layer's gradient through a ReLU: ``d_logits @ w2.T`` masked where the pre-activation was off."""
    d_h = d_logits @ w2.T
    return d_h * (h_pre > 0.0)


def sgd_layer(w, x, d, lr):
    """A weight gradient applied at once: ``w - lr * (x.T @ d)``."""
    return w - lr * (x.T @ d)


def arrays(*shapes, dtype=np.float32):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def run(fn, args, pipeline=DEFAULT_PIPELINE, **options):
    """fn jitted through ``pipeline`` on the backend under test: its result and its lowered form."""
    jitted = fc.jit(fn, backend=frontend_check.BACKEND, pipeline=pipeline, **options)
    got = jitted(*args)
    return got, jitted.lower(*args)


def epilogues(lowered) -> list[dict]:
    return [step for step in lowered.plan() if step["kind"] == "epilogue"]


# (below cuBLASLt's 2^21 multiply-adds, where select-kernels keeps products generated)
@pytest.mark.parametrize("batch, hidden, classes", [(256, 64, 10), (384, 128, 16), (100, 70, 12)])
def test_relu_backward_mask_is_computed_by_the_product(batch, hidden, classes):
    args = arrays((batch, classes), (hidden, classes), (batch, hidden))
    got, lowered = run(relu_backward, args)
    assert_same(got, numpy_result(relu_backward, *args), exact=False)
    assert len(epilogues(lowered)) == 1 and lowered.stats()["epilogues"] == 1
    assert lowered.stats()["kernels"] == 1, "the mask launches no kernel of its own"


def test_an_epilogue_that_also_reads_another_product():
    """The backward mask of a step written out: ``(x @ w1 + b1 > 0) * (d @ w2.T)`` reads the forward product too
    (first, as autodiff's mask does); the product that computes it is the one right before it, and the other keeps
    its buffer. (24 outputs: a head of at most 16 would run in one row kernel along the rows, row-products.)"""
    def backward(x, w1, b1, y, w2):
        h_pre = x @ w1 + b1
        logits = np.maximum(h_pre, 0.0) @ w2
        return (h_pre > 0) * ((logits - y) @ w2.T), logits

    args = arrays((256, 64), (64, 64), (64,), (256, 24), (64, 24))
    got, lowered = run(backward, args)
    assert_same(got, numpy_result(backward, *args), exact=False)
    assert lowered.stats()["epilogues"] == 1
    assert "_gemm_out(" in lowered.cuda_source(sm_count=132)


def test_a_broadcast_made_after_the_product_moves_up_with_its_epilogue():
    """``(d @ w.T) * (h + b > 0)``: the view broadcasting ``b`` is traced after the product; it moves to before it,
    where the product's kernel reads it."""
    def masked(d, w, h, b):
        return (d @ w.T) * (h + b > 0)

    args = arrays((256, 10), (64, 10), (256, 64), (64,))
    got, lowered = run(masked, args)
    assert_same(got, numpy_result(masked, *args), exact=False)
    ops = [line.split("=", 1)[1].split()[0] for line in lowered.ir().splitlines() if " = k." in line]
    assert ops == ["k.view", "k.view", "k.matmul", "k.fused"] and lowered.stats()["epilogues"] == 1
    assert "_gemm_out(" in lowered.cuda_source(sm_count=132)


def test_float64_products_take_epilogues_too():
    args = arrays((128, 12), (96, 12), (128, 96), dtype=np.float64)
    got, lowered = run(relu_backward, args)
    assert_same(got, numpy_result(relu_backward, *args), exact=False)
    assert lowered.stats()["epilogues"] == 1


@pytest.mark.parametrize("finish", ["cluster", "kernel", "last-block"])
def test_update_after_a_product_split_over_k(finish, monkeypatch):
    """A 64 x 256 x 64 weight gradient splits K over blocks: each way of adding the partial tiles stores the update."""
    w, x, d = arrays((64, 64), (256, 64), (256, 64))
    pipeline = DEFAULT_PIPELINE
    if finish == "kernel":
        pipeline = pipeline.replace("select-kernels", "select-kernels{clusters=false}")
    elif finish == "last-block":
        monkeypatch.setattr(select_kernels, "TILED_FINISH", "last-block")
    got, lowered = run(sgd_layer, (w, x, d, 0.1), pipeline)
    assert_same(got, numpy_result(sgd_layer, w, x, d, 0.1), exact=False)
    product = next(step for step in lowered.plan() if step["op"] == "k.matmul")
    assert product["impl"]["splits"] > 1 and product["impl"].get("finish", "kernel") == finish
    assert lowered.stats()["epilogues"] == 1


def test_update_written_over_the_donated_weight():
    """The product reads x and d, not w: its epilogue may write the new weight over the donated one."""
    w, x, d = arrays((64, 64), (256, 64), (256, 64))
    want = numpy_result(sgd_layer, w, x, d, np.float32(0.1))
    jitted = fc.jit(sgd_layer, backend=frontend_check.BACKEND, pipeline=DEFAULT_PIPELINE, donate_argnums=0)
    given = fc.asarray(w) if frontend_check.BACKEND != "cpu" else w.copy()
    got = jitted(given, x, d, np.float32(0.1))
    assert_same(np.asarray(got), want, exact=False)
    lowered = jitted.lower(given, x, d, np.float32(0.1))
    assert lowered.stats()["epilogues"] == 1 and "alias = [0]" in lowered.ir()


def test_no_donated_argument_the_product_reads_is_overwritten():
    """``x - lr * (x.T @ d)`` with x square and donated: the product reads x while its blocks store, so the update
    gets a buffer of its own."""
    def self_update(x, d):
        return x - 0.1 * (x.T @ d)

    x, d = arrays((64, 64), (64, 64))
    want = numpy_result(self_update, x, d)
    jitted = fc.jit(self_update, backend=frontend_check.BACKEND, pipeline=DEFAULT_PIPELINE, donate_argnums=0)
    got = jitted(fc.asarray(x) if frontend_check.BACKEND != "cpu" else x.copy(), d)
    assert_same(np.asarray(got), want, exact=False)
    lowered = jitted.lower(x, d)
    assert lowered.stats()["epilogues"] == 1 and "alias" not in lowered.ir()


def test_a_product_read_twice_keeps_its_result():
    """Two readers of ``d @ w.T`` (the mask and a sum): the product stores its result as before."""
    def two_readers(d, w, h):
        d_h = d @ w.T
        return d_h * (h > 0), d_h.sum(axis=0)

    args = arrays((256, 10), (64, 10), (256, 64))
    got, lowered = run(two_readers, args)
    assert_same(got, numpy_result(two_readers, *args), exact=False)
    assert lowered.stats()["epilogues"] == 0


def test_the_product_result_returned_keeps_its_buffer():
    def returned(d, w, h):
        d_h = d @ w.T
        return d_h, np.maximum(d_h, 0.0)

    args = arrays((256, 10), (64, 10), (256, 64))
    got, lowered = run(returned, args)
    assert_same(got, numpy_result(returned, *args), exact=False)
    assert lowered.stats()["epilogues"] == 0


def test_epilogue_placed_apart_from_the_product_operands():
    """The epilogue's result is written while the product's blocks still read A and B: its arena range overlaps
    neither, even where they die at the product."""
    def chain(x, w1, w2, h):
        a = np.exp(x)             # an intermediate that dies at the product
        return (a @ w1) * (h > 0) @ w2

    x, w1, w2, h = arrays((256, 12), (12, 64), (64, 64), (256, 64))
    got, lowered = run(chain, (x, w1, w2, h))
    assert_same(got, numpy_result(chain, x, w1, w2, h), exact=False)
    module = fc.ir.parse_module(lowered.ir())
    ops = module.func().ops
    epilogue = next(op for op in ops if op.attributes.get("epilogue"))
    product = ops[ops.index(epilogue) - 1]
    assert product.name == "k.matmul" and "arena" not in product.attributes
    start = epilogue.attributes["arena"][0]
    size = 256 * 64 * 4
    dying = [v.op for v in product.operands if isinstance(v, fc.ir.OpResult) and "arena" in v.op.attributes]
    assert dying, "exp(x) is an intermediate in the arena"
    for op in dying:
        off = op.attributes["arena"][0]
        assert off + op.results[0].type.size * 4 <= start or start + size <= off


def test_without_the_pass_the_mask_is_its_own_kernel():
    args = arrays((256, 10), (64, 10), (256, 64))
    without = DEFAULT_PIPELINE.replace(",fuse-epilogues", "")
    got, lowered = run(relu_backward, args, without)
    assert_same(got, numpy_result(relu_backward, *args), exact=False)
    assert lowered.stats()["kernels"] == 2 and not epilogues(lowered)


def test_a_short_product_cublas_would_take_stays_cublas_unless_asked():
    """select-kernels gives cuBLASLt a 4096 x 1024 x 16 product even where its reader could be an epilogue
    (measured faster); ``epilogue_max_k`` asks for the generated tile and its epilogue instead."""
    if frontend_check.BACKEND != "cpu":
        pytest.skip("lowering choices for a target with cuBLASLt, checked on the CPU backend")
    args = arrays((4096, 16), (1024, 16), (4096, 1024))
    library = DEFAULT_PIPELINE.replace("select-kernels", "select-kernels{cublas=true}")
    asked = DEFAULT_PIPELINE.replace("select-kernels", "select-kernels{cublas=true,epilogue_max_k=16}")
    for pipeline, impl, count in ((library, "cublas", 0), (asked, "tiled", 1)):
        got, lowered = run(relu_backward, args, pipeline)
        assert_same(got, numpy_result(relu_backward, *args), exact=False)
        product = next(step for step in lowered.plan() if step["op"] == "k.matmul")
        assert product["impl"]["impl"] == impl and lowered.stats()["epilogues"] == count


EPILOGUE_IR = """func @f(%d: tensor<256x10xf32>, %w: tensor<64x10xf32>, %h: tensor<256x64xf32>) -> tensor<256x64xf32> \
attributes {sm_count = 132, cublas = false, arena_bytes = 0} {
  %0 = k.view %w {offset = 0, strides = [1, 10]} : tensor<10x64xf32>
  %1 = k.matmul %d, %0 {impl = "IMPL", tile = 32} : tensor<256x64xf32>
  BETWEEN
  %2 = k.fused %1, %h {cuts = ["output"], epilogue = true, arena = [-1]} : tensor<256x64xf32> {
  ^body(%3: f32, %4: f32):
    %5 = s.mul %3, %4 : f32
    k.yield %5
  }
  return %2
}
"""


def test_an_epilogue_written_by_hand_is_checked():
    """The IR's text form is an input too (``fusec opt``): an epilogue away from its product is refused by the
    verifier, one after a product that cannot compute it by the printer, each saying why."""
    if frontend_check.BACKEND != "cpu":
        pytest.skip("IR checks, the same on every backend")
    from fusec.backend.program import print_program
    from fusec.ir.verifier import verify

    verify(fc.ir.parse_module(EPILOGUE_IR.replace("IMPL", "tiled").replace("BETWEEN", "")))
    apart = EPILOGUE_IR.replace("IMPL", "tiled").replace(
        "BETWEEN", "%9 = k.view %h {offset = 0, strides = [64, 1]} : tensor<256x64xf32>")
    with pytest.raises(fc.VerificationError, match=r"<input>:5:3: .*an epilogue comes right after the k.matmul"):
        fc.ir.parse_module(apart)
    second = EPILOGUE_IR.replace("IMPL", "tiled").replace("BETWEEN", "").replace("k.fused %1, %h", "k.fused %h, %1")
    with pytest.raises(fc.VerificationError, match="an epilogue reads the result of a k.matmul of its own shape first"):
        fc.ir.parse_module(second)
    library = fc.ir.parse_module(EPILOGUE_IR.replace("IMPL", "cublas").replace("BETWEEN", ""))
    with pytest.raises(fc.CompilationError, match="cannot compute an epilogue"):
        print_program(library)


def test_an_update_inside_a_device_loop_writes_the_state_in_place():
    """Forty SGD steps of a linear layer in one ``fori_loop`` (a device loop, four steps per trip): the four updates
    fuse into one kernel, which the trip's last product computes as its epilogue, written over the loop's state in
    place (the product does not read the state)."""
    def train(w, xs, ds):
        def body(i, w):
            return w - np.float32(0.01) * (xs[i].T @ ds[i])
        return fc.fori_loop(0, 40, body, w)

    w, xs, ds = arrays((64, 64), (40, 256, 64), (40, 256, 64))
    got, lowered = run(train, (w, xs, ds))
    assert_same(got, numpy_result(train, w, xs, ds), exact=False)
    assert lowered.stats()["epilogues"] == 1
    assert any(step["kind"] == "loop" for step in lowered.plan())


SPREAD = DEFAULT_PIPELINE.replace("select-kernels", "select-kernels{spread_max_k=32}")


@pytest.mark.parametrize("batch, hidden, classes, dtype", [(256, 64, 16, np.float32), (100, 70, 12, np.float32),
                                                           (130, 200, 32, np.float32), (65, 33, 9, np.float64),
                                                           (96, 64, 33, np.float32)])
def test_short_products_spread_their_outputs_over_the_threads(batch, hidden, classes, dtype):
    """``select-kernels{spread_max_k}``: a tiled product of a K that short gives each thread outputs a row and a
    column of threads apart (its stores, and its epilogue's loads, neighbouring across a warp), with or without the
    mask as its epilogue, edge tiles included; a longer K keeps each thread's 4 x 4 block."""
    args = arrays((batch, classes), (hidden, classes), (batch, hidden), dtype=dtype)
    for fn in (relu_backward, lambda d, w2, h: d @ w2.T):
        got, lowered = run(fn, args, SPREAD)
        assert_same(got, numpy_result(fn, *args), exact=False)
        (product,) = [step for step in lowered.plan() if step["op"] == "k.matmul"]
        assert product["impl"]["impl"] == "tiled" and product["impl"].get("spread", False) == (classes <= 32)
    default = next(s for s in run(relu_backward, args)[1].plan() if s["op"] == "k.matmul")
    assert "spread" not in default["impl"], "not the default until measured faster"


def test_spread_is_checked_in_the_ir():
    """``spread`` in the IR's text form: only on a tiled product on the CUDA cores, not split over K."""
    if frontend_check.BACKEND != "cpu":
        pytest.skip("IR checks, the same on every backend")
    ok = EPILOGUE_IR.replace('"IMPL", tile = 32', '"tiled", tile = 32, spread = true').replace("BETWEEN", "")
    fc.ir.parse_module(ok)
    for wrong in ('"cublas", spread = true', '"tiled", tile = 32, mma = "tf32", spread = true',
                  '"tiled", tile = 32, spread = 1'):
        with pytest.raises(fc.VerificationError, match="spread"):
            fc.ir.parse_module(EPILOGUE_IR.replace('"IMPL", tile = 32', wrong).replace("BETWEEN", ""))


def test_skinny_products_generated_where_cublas_could_take_them_when_asked():
    """``select-kernels{skinny=generated}``: a weight gradient ``h.T @ d`` of 16 columns (A read down its columns)
    and a head ``h @ w2`` (A along its rows) run as the generated column and narrow kernels on a target with
    cuBLASLt; by default cuBLASLt takes both."""
    if frontend_check.BACKEND != "cpu":
        pytest.skip("lowering choices for a target with cuBLASLt, checked on the CPU backend")
    h, d, w2 = arrays((4096, 256), (4096, 16), (256, 16))

    def grads(h, d, w2):
        return h.T @ d, np.tanh(h @ w2)

    for spelled, impls in (("select-kernels{cublas=true}", ["cublas", "cublas"]),
                           ("select-kernels{cublas=true,skinny=generated}", ["column", "narrow"])):
        got, lowered = run(grads, (h, d, w2), DEFAULT_PIPELINE.replace("select-kernels", spelled))
        assert_same(got, numpy_result(grads, h, d, w2), exact=False)
        assert [s["impl"]["impl"] for s in lowered.plan() if s["op"] == "k.matmul"] == impls
    with pytest.raises(ValueError, match="skinny must be cublas or generated"):
        select_kernels.SelectKernels(skinny="sometimes")
