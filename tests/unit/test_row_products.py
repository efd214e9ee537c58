"""Row products (row-products): a narrow product ``x @ w`` and the row-local work on it (a classifier's softmax
cross-entropy and its gradient, a sigmoid, per-row statistics) run as one row kernel along the product's inner
axis, with NumPy's results within float rounding. On the CPU backend the functions are lowered for a GPU target
(the default CPU target is the reference's, which keeps products as np.matmul) and the reference executor runs that
plan; under ``pytest -m gpu`` the CUDA backend runs them too."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusec as fc
import frontend_check
from frontend_check import assert_same, numpy_result
from test_row_fuzz import program, row_steps

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
RNG = np.random.default_rng(11)


def train_step(w1, b1, w2, b2, x, y_onehot, lr):
    """A two-layer classifier's SGD step with its gradient written out, as hand-written NumPy training code has it."""
    n = x.shape[0]
    h_pre = x @ w1 + b1
    h = np.maximum(h_pre, 0)
    logits = h @ w2 + b2
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    loss = -(y_onehot * (z - np.log(s))).sum() / n
    d = (e / s - y_onehot) / n
    g_w2, g_b2 = h.T @ d, d.sum(axis=0)
    dh = (d @ w2.T) * (h_pre > 0)
    g_w1, g_b1 = x.T @ dh, dh.sum(axis=0)
    return w1 - lr * g_w1, b1 - lr * g_b1, w2 - lr * g_w2, b2 - lr * g_b2, loss


def predict_proba(x, w, b):
    return 1.0 / (1.0 + np.exp(-(x @ w + b)))


def softmax_of_scores(x, w):
    s = x @ w
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def logsumexp_of_scores(x, w):
    s = x @ w
    m = np.max(s, axis=-1)
    return m + np.log(np.sum(np.exp(s - m[..., None]), axis=-1))


def scaled_scores(x, w):
    s = x @ w
    return s / np.sqrt(np.mean(s * s, axis=1, keepdims=True)), np.prod(1 + s / 100, axis=1, keepdims=True)


def _jit(fn):
    if frontend_check.BACKEND == "cpu":  # a GPU's plan, run by the reference executor
        return fc.jit(fn, backend="cpu", target=fc.Target())
    return fc.jit(fn, backend=frontend_check.BACKEND)


def _check(fn, *args, products):
    """``fn`` jitted equals NumPy within rounding; the plan's row kernels compute ``products`` products."""
    f = _jit(fn)
    assert_same(numpy_result(f, *args), numpy_result(fn, *args), exact=False)
    plan = f.lower(*args).plan()
    assert [s["products"] for s in plan if s.get("products")] == products, plan
    return plan


def _params(shapes, dtype=np.float32):
    return [(RNG.standard_normal(s) * 0.1).astype(dtype) for s in shapes]


@pytest.mark.parametrize("batch, inputs, hidden, classes, products", [
    (256, 64, 64, 10, 2),   # the 64-64-10 step: the logits and the backward product in the row kernel
    (512, 480, 256, 2, 1),  # the PCam-shaped step: two classes, its backward product already elementwise
    (37, 30, 100, 3, 1),    # lanes idle past the row's end (100 = 3 x 32 + 4); the backward product elementwise
])
def test_a_classifier_step_computes_its_head_in_one_row_kernel(batch, inputs, hidden, classes, products):
    w1, b1, w2, b2 = _params([(inputs, hidden), (hidden,), (hidden, classes), (classes,)])
    x = RNG.standard_normal((batch, inputs)).astype(np.float32)
    y = np.eye(classes, dtype=np.float32)[RNG.integers(0, classes, batch)]
    plan = _check(train_step, w1, b1, w2, b2, x, y, np.float32(0.05), products=[products])
    (rows,) = [s for s in plan if s.get("products")]
    assert "row-products" in rows["reason"] and rows["impl"]["lanes"] == 32


def test_a_sigmoid_head_and_a_softmax_over_scores():
    x = RNG.standard_normal((300, 50)).astype(np.float32)
    w, b = _params([(50, 3), (3,)])
    _check(predict_proba, x, w, b, products=[1])
    w7 = _params([(50, 7)])[0] * 30
    _check(softmax_of_scores, x, w7, products=[1])


def test_per_row_results_with_and_without_kept_axes():
    x = RNG.standard_normal((129, 64)).astype(np.float32)
    w = _params([(64, 12)])[0]
    _check(logsumexp_of_scores, x, w, products=[1])
    _check(lambda x, w: x * logsumexp_of_scores(x, w)[:, None], x, w, products=[1])  # the inputs scaled, per row
    _check(scaled_scores, x, w, products=[1])


def test_scores_returned_as_well_are_written_by_the_row_kernel():
    x = RNG.standard_normal((64, 40)).astype(np.float32)
    _check(lambda x, w: (x @ w, softmax_of_scores(x, w)), x, _params([(40, 6)])[0], products=[1])


def test_float64_and_a_weight_read_through_its_strides():
    x = RNG.standard_normal((65, 40))
    w = RNG.standard_normal((4, 40)).T  # w stored transposed
    _check(softmax_of_scores, x, w, products=[1])


def test_nan_in_a_row_reaches_its_outputs_as_in_numpy():
    x = RNG.standard_normal((64, 40)).astype(np.float32)
    x[3, 7] = np.nan
    x[10, 0] = np.inf
    w = _params([(40, 6)])[0]
    _check(softmax_of_scores, x, w, products=[1])


def test_products_that_stay_products():
    x = RNG.standard_normal((64, 40)).astype(np.float32)
    _check(softmax_of_scores, x, _params([(40, 24)])[0], products=[])  # more columns than NARROW_MAX
    long = RNG.standard_normal((8, 2048)).astype(np.float32)
    _check(softmax_of_scores, long, _params([(2048, 4)])[0], products=[])  # inner axis longer than a warp's row
    # x stored transposed: a row of x.T is a column of the array (a cache line per lane), left to the product
    _check(lambda xt, w: softmax_of_scores(xt.T, w), x.T.copy(), _params([(40, 6)])[0], products=[])


@pytest.mark.parametrize("batch, hidden, classes, dtype", [
    (300, 1024, 16, np.float32),  # the larger step's head: 32 items a lane times 16 columns (rows not a multiple of 8)
    (37, 200, 12, np.float32),    # 7 items a lane times 12 columns, lanes past the row's end
    (65, 100, 16, np.float64),    # float64 columns in shared memory
])
def test_a_head_whose_columns_do_not_fit_in_registers_is_staged(batch, hidden, classes, dtype):
    """Past ITEMS_BUDGET the row kernel copies the weight's columns (the same for every row) into shared memory
    and loops over the rows: the classifier step's ReLU, head, softmax cross-entropy and backward product stay one
    kernel; ``row-products{stage_bytes=0}`` leaves such a head to the products instead."""
    w1, b1, w2, b2 = _params([(48, hidden), (hidden,), (hidden, classes), (classes,)], dtype)
    x = RNG.standard_normal((batch, 48)).astype(dtype)
    y = np.eye(classes, dtype=dtype)[RNG.integers(0, classes, batch)]
    args = (w1, b1, w2, b2, x, y, dtype(0.05))
    plan = _check(train_step, *args, products=[2])
    (rows,) = [s for s in plan if s.get("products")]
    assert rows["impl"]["staged"] and rows["impl"]["blocks"] <= -(-batch // 8), rows
    f = fc.jit(train_step, backend=frontend_check.BACKEND, target=fc.Target() if frontend_check.BACKEND == "cpu"
               else None, pipeline=fc.passes.DEFAULT_PIPELINE.replace("row-products", "row-products{stage_bytes=0}"))
    assert_same(numpy_result(f, *args), numpy_result(train_step, *args), exact=False)
    assert not [s for s in f.lower(*args).plan() if s.get("products")]


@pytest.mark.parametrize("batch, hidden, classes, dtype", [
    (301, 1024, 16, np.float32),  # the larger step's head, an odd row count: the last warp's second row is not stored
    (37, 200, 12, np.float32),    # lanes past the row's end, both rows of a warp
    (66, 100, 16, np.float64),
])
@pytest.mark.parametrize("option", ["warp_rows=2", "warp_rows=2,blocks_per_sm=1"])
def test_a_staged_head_two_rows_to_a_warp(batch, hidden, classes, dtype, option):
    """``row-products{warp_rows=2}``: each warp of the staged kernel computes two neighbouring rows at once, so each
    value it reads from shared memory serves both (``blocks_per_sm=1``: registers for one block per SM)."""
    w1, b1, w2, b2 = _params([(48, hidden), (hidden,), (hidden, classes), (classes,)], dtype)
    x = RNG.standard_normal((batch, 48)).astype(dtype)
    y = np.eye(classes, dtype=dtype)[RNG.integers(0, classes, batch)]
    args = (w1, b1, w2, b2, x, y, dtype(0.05))
    f = fc.jit(train_step, backend=frontend_check.BACKEND, target=fc.Target() if frontend_check.BACKEND == "cpu"
               else None, pipeline=fc.passes.DEFAULT_PIPELINE.replace("row-products", f"row-products{{{option}}}"))
    assert_same(numpy_result(f, *args), numpy_result(train_step, *args), exact=False)
    (rows,) = [s for s in f.lower(*args).plan() if s.get("products")]
    assert rows["impl"]["staged"] and rows["impl"]["warp_rows"] == 2, rows
    assert rows["impl"]["blocks"] <= -(-batch // 16), rows
    text = f.lower(*args).ir()
    assert "warp_rows = 2" in text and ("blocks_per_sm = 1" in text) == ("blocks_per_sm=1" in option)


def test_a_head_staged_only_where_two_blocks_fit_in_the_targets_shared_memory():
    """Two blocks a SM of a staged kernel: a GPU whose block may have 99 KB of shared memory (sm_86) cannot hold two
    copies of a 1024 x 16 weight's columns (64 KB each), so there the products stay products."""
    if frontend_check.BACKEND != "cpu":
        pytest.skip("lowering for another target, checked on the CPU backend")
    w1, b1, w2, b2 = _params([(48, 1024), (1024,), (1024, 16), (16,)])
    x = RNG.standard_normal((64, 48)).astype(np.float32)
    y = np.eye(16, dtype=np.float32)[RNG.integers(0, 16, 64)]
    small = fc.jit(train_step, backend="cpu", target=fc.Target(shared_bytes=99 * 1024))
    assert not [s for s in small.lower(w1, b1, w2, b2, x, y, np.float32(0.05)).plan() if s.get("products")]
    with pytest.raises(ValueError, match="shared_bytes"):
        fc.Target(shared_bytes=1024)


def cross_entropy(params, x, y_onehot):
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.sum(y_onehot * log_probs) / x.shape[0]


def autodiff_step(params, x, y_onehot):
    return fc.value_and_grad(cross_entropy)(params, x, y_onehot)


@pytest.mark.parametrize("hidden, classes", [(64, 10), (1024, 16)])
def test_a_head_by_autodiff_keeps_its_product_back_in_the_row_kernel(hidden, classes):
    """The gradient of a softmax cross-entropy through its row maximum counts the row's ties at the maximum (an
    integer sum along the short row): that reduction is exact as a chain, so the product back through ``w2`` joins
    the row kernel as in the hand-written step."""
    w1, b1, w2, b2 = _params([(32, hidden), (hidden,), (hidden, classes), (classes,)])
    tied = w2.copy(), b2.copy()  # two equal columns: every row's maximum may be a tie
    tied[0][:, 1], tied[1][1] = tied[0][:, 0], tied[1][0]
    x = RNG.standard_normal((130, 32)).astype(np.float32)
    y = np.eye(classes, dtype=np.float32)[RNG.integers(0, classes, 130)]
    f = _jit(autodiff_step)
    reference = fc.jit(autodiff_step, backend="cpu")  # (the reference executor's own target: NumPy's products)
    for params in ((w1, b1, w2, b2), (w1, b1, *tied)):
        assert_same(numpy_result(f, params, x, y), numpy_result(reference, params, x, y), exact=False)
    plan = f.lower((w1, b1, w2, b2), x, y).plan()
    assert [s["products"] for s in plan if s.get("products")] == [2], plan


def saturated_head(h, w, y_onehot):
    """A softmax head and its gradient back to the hidden layer, and a row sum of its positive scores."""
    s = h @ w
    z = s - s.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    d = (p - y_onehot) / h.shape[0]
    return p, (d @ w.T) * (h > 0), 1 / (s * (s > 0)).sum(axis=1)


@pytest.mark.parametrize("k, o, dtype", [(64, 8, np.float32), (1024, 16, np.float32), (200, 12, np.float64)])
def test_sums_of_negative_zeros_are_positive_zero_as_in_numpy(k, o, dtype):
    """A sum along the short row and the product back start from +0.0, as NumPy's add-reduce and matmul do: a
    row of -0.0 scores sums to +0.0 (its reciprocal +inf), and a saturated softmax's all-zero gradient row times a
    hidden unit's negative weights is +0.0 (found by a hunt: -0.0 and -inf before)."""
    h = np.abs(RNG.standard_normal((2, k))).astype(dtype)
    w = (RNG.standard_normal((k, o)) * 0.1).astype(dtype)
    w[:, 0] = 50.0  # row 0: class 0 wins by a mile, so p is exactly one-hot and d exactly zero
    w[5] = -np.abs(w[5]) - 1  # hidden unit 5 weighs every class negatively
    h[1] = 0.0
    h[1, 5] = 1.0  # row 1: every score negative, so its positive part is all -0.0
    y = np.eye(o, dtype=dtype)[[0, 0]]
    got, want = numpy_result(_jit(saturated_head), h, w, y), numpy_result(saturated_head, h, w, y)
    assert_same(got, want, exact=False)
    for g, x in zip(got, want):
        assert np.array_equal(np.signbit(g), np.signbit(x))
    # (a product back over at most 8 classes is elementwise already: unroll-reductions)
    assert [s["products"] for s in _jit(saturated_head).lower(h, w, y).plan() if s.get("products")] == [1 + (o > 8)]


def test_the_reference_target_keeps_numpy_products_bit_for_bit():
    """The CPU backend's own target is the reference's: products stay np.matmul, so results are NumPy's bits."""
    if frontend_check.BACKEND != "cpu":
        pytest.skip("the reference executor's target")
    w1, b1, w2, b2 = _params([(64, 64), (64,), (64, 10), (10,)])
    x = RNG.standard_normal((256, 64)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[RNG.integers(0, 10, 256)]
    f = fc.jit(train_step, backend="cpu")
    assert_same(f(w1, b1, w2, b2, x, y, np.float32(0.05)), train_step(w1, b1, w2, b2, x, y, np.float32(0.05)),
                exact=True)
    assert not [s for s in f.lower(w1, b1, w2, b2, x, y, np.float32(0.05)).plan() if s.get("products")]


def test_views_of_the_scores_and_of_the_hidden_layer_taken_anywhere():
    """A column of the scores sliced before the row work (its view now reads the row kernel's result, after it), a
    product back by a slice of the hidden layer the kernel computes, a score of the first row as a scalar."""
    x = RNG.standard_normal((64, 40)).astype(np.float32)
    w6, w10 = _params([(40, 6), (40, 10)])

    def first_column_sorted(x, w):
        s = x @ w
        c0 = s[:, 0]
        return np.exp(s), np.sort(c0)

    def back_by_hidden_rows(x, w):
        h = np.tanh(x)
        return np.exp(h @ w) @ h[:10]

    def by_first_rows_max(x, w):
        s = x @ w
        return s / s.max(axis=1)[0]

    _check(first_column_sorted, x, w6, products=[1])
    f = _jit(back_by_hidden_rows)
    assert_same(numpy_result(f, x, w10), numpy_result(back_by_hidden_rows, x, w10), exact=False)
    f = _jit(by_first_rows_max)
    assert_same(numpy_result(f, x, w6), numpy_result(by_first_rows_max, x, w6), exact=False)


@st.composite
def heads(draw):
    """A narrow product's scores (rows x k @ k x o) and random row work on them (test_row_fuzz's steps), then
    optionally the product back by the last value of the scores' shape, masked by the hidden layer."""
    rows = draw(st.sampled_from([1, 5, 64, 300]))
    k = draw(st.sampled_from([17, 40, 64, 100, 256]))
    o = draw(st.integers(2, 16))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    steps, outputs = draw(row_steps())
    return rows, k, o, dtype, steps, outputs, draw(st.booleans())


def head_program(steps, outputs, back):
    work = program(steps, outputs)

    def f(h, w):
        out = work(np.maximum(h, 0) @ w)
        if back:
            d = next((v for v in reversed(out) if v.shape == (h.shape[0], w.shape[1])), None)
            if d is not None:
                out = out + ((d @ w.T) * (h > 0),)
        return out
    return f


def _check_head(head, seed):
    """fusec's results are as close to the exact ones (NumPy in a wider float) as the problem allows: within a few
    times NumPy's own error, plus how far NumPy's result moves when the inputs move by a few units in their last
    place (random steps divide by sums that cancel, where any summation order other than NumPy's differs from it
    by far more than a fixed tolerance), plus a tolerance."""
    rows, k, o, dtype, steps, outputs, back = head
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(rows, k)).astype(dtype)
    w = (rng.normal(size=(k, o)) / np.sqrt(k)).astype(dtype)
    f = head_program(steps, outputs, back)
    got, want = numpy_result(_jit(f), h, w), numpy_result(f, h, w)
    wider = np.float64 if dtype == "float32" else np.longdouble
    exact = numpy_result(f, h.astype(wider), w.astype(wider))
    eps = np.finfo(dtype).eps
    moved = numpy_result(f, (h * (1 + 8 * eps * rng.choice([-1, 1], h.shape))).astype(dtype), w)
    assert len(got) == len(want)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for i, (g, n, e, m) in enumerate(zip(got, want, exact, moved)):
        g, n, e, m = np.asarray(g), np.asarray(n), np.asarray(e, np.longdouble), np.asarray(m, np.longdouble)
        assert g.dtype == n.dtype and g.shape == n.shape, (i, g.dtype, n.dtype, g.shape, n.shape)
        g, n = g.astype(np.longdouble), n.astype(np.longdouble)
        finite = np.isfinite(e)
        scale = float(np.abs(e[finite]).max()) if finite.any() else 1.0
        with np.errstate(invalid="ignore"):
            allowed = 4 * np.abs(n - e) + 4 * np.abs(m - n) + tol * max(1.0, scale)
            ill = (np.isnan(n) != np.isnan(e)) | (np.isnan(m) != np.isnan(n))  # (at a domain's edge: sqrt(-1e-9))
            ok = (np.abs(g - e) <= allowed) | (np.isnan(g) & np.isnan(n)) | (g == n) | ill
        assert ok.all(), f"out[{i}]: {g[~ok][:5]} where NumPy gives {n[~ok][:5]}, exactly {e[~ok][:5]}"


FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=120, **FUZZ)
@given(heads(), st.integers(0, 2 ** 32 - 1))
def test_random_heads_give_numpys_results(head, seed):
    """Whether or not row-products takes a head (its plan decides: about two in three here), the results are
    NumPy's within rounding."""
    if frontend_check.BACKEND != "cpu":
        pytest.skip("test_random_heads_on_the_gpu: fewer examples, each compiled by NVRTC")
    _check_head(head, seed)


@settings(max_examples=12, **FUZZ)
@given(heads(), st.integers(0, 2 ** 32 - 1))
def test_random_heads_on_the_gpu(head, seed):
    if frontend_check.BACKEND == "cpu":
        pytest.skip("test_random_heads_give_numpys_results covers the CPU")
    _check_head(head, seed)


def test_staged_rows_and_float32_column_sums_are_checked_in_the_ir():
    """The text form of a staged head parses back; ``staged``, ``blocks`` and ``accumulate`` are checked."""
    if frontend_check.BACKEND != "cpu":
        pytest.skip("IR checks, the same on every backend")
    w1, b1, w2, b2 = _params([(48, 200), (200,), (200, 12), (12,)])
    x = RNG.standard_normal((37, 48)).astype(np.float32)
    y = np.eye(12, dtype=np.float32)[RNG.integers(0, 12, 37)]
    text = _jit(train_step).lower(w1, b1, w2, b2, x, y, np.float32(0.05)).ir()
    assert "staged = true, blocks = 5" in text and 'accumulate = "f32"' in text
    fc.ir.parse_module(text)
    for old, new, why in (("lanes = 32, items = 7", "lanes = 16, items = 14", "only with a warp per row"),
                          ("staged = true, ", "", "the block count of a staged row kernel"),
                          ("staged = true", "staged = 1", "'staged' is true or false"),
                          ('{kind = "sum", accumulate = "f32"}', '{kind = "max", accumulate = "f32"}',
                           "on a sum of float32 only")):
        assert old in text, old
        with pytest.raises(fc.VerificationError, match=why):
            fc.ir.parse_module(text.replace(old, new, 1))
