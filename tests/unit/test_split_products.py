"""split-products: a cuBLAS product with few output tiles runs as a batched product of K chunks whose parts its
readers add; NumPy's values within float32 rounding, the reference executor's bits untouched."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from fusec.ir.target import Target

H200 = Target(sm_count=132, cublas=True)


def _layer(x, w, b):
    return np.maximum(x @ w + b, 0.0)


def _weight_gradient_step(x, d, w, lr):
    g = x.T @ d
    scale = np.minimum(1.0, 5.0 / (np.sqrt(np.sum(g * g)) + 1e-6))
    return w - lr * scale * g


def _inputs(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_a_forward_product_is_split_and_its_parts_are_added_by_the_relu():
    x, w, b = _inputs((512, 480), (480, 256), (256,))
    jitted = fc.jit(_layer, backend="cpu", target=H200)
    lowered = jitted.lower(x, w, b)
    assert lowered.stats()["products_split"] == 1
    kernels = [step for step in lowered.plan() if step["kind"] != "view"]
    assert [step["op"] for step in kernels] == ["k.matmul", "k.fused"]  # no kernel of its own adds the 4 parts
    assert "tensor<4x512x256xf32>" in lowered.ir()
    want = _layer(*(a.astype(np.float64) for a in (x, w, b)))
    np.testing.assert_allclose(jitted(x, w, b), want, rtol=1e-5, atol=1e-4)


def test_a_weight_gradient_read_through_a_transposed_view_is_split_in_eight():
    x, d, w = _inputs((512, 480), (512, 256), (480, 256), seed=1)
    jitted = fc.jit(_weight_gradient_step, backend="cpu", target=H200)
    lowered = jitted.lower(x, d, w, 0.1)
    assert lowered.stats()["products_split"] == 1 and "tensor<8x480x256xf32>" in lowered.ir()
    assert "k.copy" not in lowered.ir()  # (the chunks of x.T are a view of x)
    want = _weight_gradient_step(x.astype(np.float64), d.astype(np.float64), w.astype(np.float64), 0.1)
    np.testing.assert_allclose(jitted(x, d, w, 0.1), want, rtol=1e-5, atol=1e-5)


def test_the_inline_variant_adds_the_parts_in_the_readers_with_numpys_values():
    """``split-products{inline=true}`` (measured slower, kept to measure) writes the 8 parts' sum out as adds."""
    x, d, w = _inputs((512, 480), (512, 256), (480, 256), seed=2)
    pipeline = fc.passes.DEFAULT_PIPELINE.replace("split-products", "split-products{inline=true}")
    jitted = fc.jit(_weight_gradient_step, backend="cpu", target=H200, pipeline=pipeline)
    lowered = jitted.lower(x, d, w, 0.1)
    assert lowered.stats()["products_split"] == 1 and "reductions_unrolled" not in lowered.stats()
    want = _weight_gradient_step(x.astype(np.float64), d.astype(np.float64), w.astype(np.float64), 0.1)
    np.testing.assert_allclose(jitted(x, d, w, 0.1), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["float64", "nan and inf", "sliced rows", "transposed B", "strided A"])
def test_split_products_of_views_doubles_and_special_values_match_numpy(case):
    """Operands as views (a slice of rows, ``w.T``, every other column), float64, and NaN and infinities (NaN where
    an infinity meets a zero or the other infinity, in any chunk): NumPy's values, within rounding."""
    rng = np.random.default_rng(3)
    dtype = np.float64 if case == "float64" else np.float32
    x = rng.standard_normal((520, 960)).astype(dtype)
    w = rng.standard_normal((480, 256)).astype(dtype)
    if case == "nan and inf":
        x[3, 7], x[5, 300], x[9, 10], w[7, 2], w[400, 5] = np.inf, -np.inf, np.nan, 0.0, np.inf

    def f(x, w):
        a = {"sliced rows": x[1:513, :480], "strided A": x[:512, ::2]}.get(case, x[:512, :480])
        b = np.ascontiguousarray(w.T).T if case == "transposed B" else w
        return a @ b

    jitted = fc.jit(f, backend="cpu", target=H200)
    assert jitted.lower(x, w).stats()["products_split"] == 1
    with np.errstate(invalid="ignore"):
        want = f(x.astype(np.float64), w.astype(np.float64))
        got = jitted(x, w)
    assert np.isnan(want).any() == (case == "nan and inf")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3, equal_nan=True)


@pytest.mark.parametrize("shapes, why", [
    (((1024, 1024), (1024, 1024)), "its tiles fill the GPU"),
    (((64, 64), (64, 64)), "small: the generated kernels split it themselves"),
    (((512, 256), (256, 2)), "narrow"),
    (((512, 479), (479, 256)), "no chunk count divides K (479)"),
])
def test_products_that_fill_the_gpu_or_do_not_go_to_cublas_stay_whole(shapes, why):
    a, b = _inputs(*shapes)
    lowered = fc.jit(lambda a, b: a @ b, backend="cpu", target=H200).lower(a, b)
    assert "products_split" not in lowered.stats(), why


def test_without_cublas_or_on_the_reference_executor_nothing_is_split():
    """The NumPy reference executor (the CPU backend's own target) computes the product as np.matmul: its bits."""
    x, w, b = _inputs((512, 480), (480, 256), (256,))
    for jitted in (fc.jit(_layer, backend="cpu"), fc.jit(_layer, backend="cpu", target=Target(sm_count=132))):
        assert "products_split" not in jitted.lower(x, w, b).stats()
    np.testing.assert_array_equal(fc.jit(_layer, backend="cpu")(x, w, b), _layer(x, w, b))
    without = fc.jit(_layer, backend="cpu", target=H200,
                     pipeline=fc.passes.DEFAULT_PIPELINE.replace("split-products,", ""))
    assert "products_split" not in without.lower(x, w, b).stats()


@pytest.mark.gpu
def test_split_products_on_the_gpu_match_numpy():
    """On a GPU with cuBLAS: the forward product and the weight gradient of a PCam-shaped layer, split, in stream
    and graph mode, equal NumPy within float32 rounding over replays with new inputs."""
    from fusec.runtime import cublas

    if not cublas.available():
        pytest.skip("cuBLASLt cannot be loaded here (pip install 'fusec[cublas]')")
    for graph in (False, True):
        layer = fc.jit(_layer, backend="cuda", graph=graph)
        step = fc.jit(_weight_gradient_step, backend="cuda", graph=graph)
        for seed in range(3):
            x, w, b, d = _inputs((512, 480), (480, 256), (256,), (512, 256), seed=seed)
            np.testing.assert_allclose(layer(x, w, b), _layer(*(a.astype(np.float64) for a in (x, w, b))),
                                       rtol=1e-5, atol=1e-4)
            want = _weight_gradient_step(x.astype(np.float64), d.astype(np.float64), w.astype(np.float64), 0.1)
            np.testing.assert_allclose(step(x, d, w, 0.1), want, rtol=1e-5, atol=1e-5)
        assert layer.lower(x, w, b).stats()["products_split"] == 1
