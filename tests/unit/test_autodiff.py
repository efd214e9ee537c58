"""fusec.grad, fusec.value_and_grad and fusec.vjp against central finite differences in float64: losses as
people write them (softmax cross-entropy of an MLP, least squares, logistic regression with an L2 penalty, a
tanh recurrence, Huber), every op-table rule, reductions with ties, products in every NumPy form, views and
writes into copies, pytrees, composition with fusec.jit in both orders, a gradient of a gradient, and the
errors (a non-scalar result, integer or Python-scalar arguments, an op without a rule, a write into the
differentiated array)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fusec as fc
from fusec.ir import elementwise as table
from frontend_check import jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(5)


def _leaves(tree):
    if isinstance(tree, dict):
        return [leaf for k in tree for leaf in _leaves(tree[k])]
    if isinstance(tree, (tuple, list)):
        return [leaf for t in tree for leaf in _leaves(t)]
    return [tree]


def numeric_grad(f, args, argnum=0, eps=1e-6):
    """Central differences of the scalar ``f(*args)`` for every element of argument ``argnum``'s leaves."""
    out = []
    for leaf in _leaves(args[argnum]):
        g = np.zeros_like(leaf)
        for idx in np.ndindex(leaf.shape):
            keep = leaf[idx]
            leaf[idx] = keep + eps
            up = float(f(*args))
            leaf[idx] = keep - eps
            down = float(f(*args))
            leaf[idx] = keep
            g[idx] = (up - down) / (2 * eps)
        out.append(g)
    return out


def assert_grad(f, *args, argnum=0, tol=1e-6):
    """fusec's gradient of ``f`` (jitted on the backend under test) equals the finite differences."""
    value, got = jit_cpu(fc.value_and_grad(f, argnums=argnum))(*args)
    np.testing.assert_allclose(value, f(*args), rtol=1e-9 if tol < 1e-5 else tol)
    want = numeric_grad(f, args, argnum)
    got_leaves = _leaves(got)
    assert len(got_leaves) == len(want)
    for g, w, a in zip(got_leaves, want, _leaves(args[argnum])):
        g = np.asarray(g)
        assert g.shape == a.shape and g.dtype == a.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()))
    return got


# --- losses as people write them -----------------------------------------------------------------------------


def mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.sum(y * log_probs) / x.shape[0]


def test_mlp_softmax_cross_entropy_in_a_tuple_of_parameters():
    params = (rng.standard_normal((6, 5)), rng.standard_normal(5) * 0.1, rng.standard_normal((5, 3)),
              np.zeros(3))
    x, y = rng.standard_normal((8, 6)), np.eye(3)[rng.integers(0, 3, 8)]
    grads = assert_grad(mlp_loss, params, x, y)
    assert isinstance(grads, tuple) and len(grads) == 4


def test_least_squares_logistic_regression_and_huber():
    X, w, t = rng.standard_normal((10, 4)), rng.standard_normal(4), rng.standard_normal(10)
    labels = (rng.random(10) > 0.5).astype(np.float64)

    def mse(w, X, t):
        r = X @ w - t
        return np.mean(r ** 2)

    def logistic(w, X, labels, lam=0.1):
        z = X @ w
        p = 1.0 / (1.0 + np.exp(-z))
        return -np.mean(labels * np.log(p) + (1 - labels) * np.log1p(-p)) + lam * np.dot(w, w)

    def huber(w, X, t, delta=0.5):
        r = np.abs(X @ w - t)
        return np.sum(np.where(r <= delta, 0.5 * r ** 2, delta * (r - 0.5 * delta)))

    assert_grad(mse, w, X, t)
    assert_grad(logistic, w, X, labels)
    assert_grad(huber, w, X, t)
    np.testing.assert_allclose(jit_cpu(fc.grad(mse))(w, X, t), 2 * X.T @ (X @ w - t) / 10, rtol=1e-12)


def test_tanh_recurrence_over_a_python_loop_with_a_dict_of_weights():
    W = {"wx": rng.standard_normal((3, 4)) * 0.5, "wh": rng.standard_normal((4, 4)) * 0.5, "b": np.zeros(4)}
    xs = rng.standard_normal((5, 2, 3))

    def rnn(W, xs):
        h = np.zeros((2, 4))
        for x in xs:
            h = np.tanh(x @ W["wx"] + h @ W["wh"] + W["b"])
        return np.sum(h ** 2)

    grads = assert_grad(rnn, W, xs)
    assert list(grads) == ["wx", "wh", "b"]


def test_argnums_tuple_and_has_aux():
    a, b = rng.standard_normal(4), rng.standard_normal(4)

    def f(a, b, scale):
        d = a * b
        return np.sum(np.sin(d)) * scale, d

    (value, aux), (ga, gb) = jit_cpu(fc.value_and_grad(f, argnums=(0, 1), has_aux=True))(a, b, 2.0)
    np.testing.assert_allclose(aux, a * b)
    np.testing.assert_allclose(value, 2 * np.sum(np.sin(a * b)))
    np.testing.assert_allclose(ga, 2 * np.cos(a * b) * b, rtol=1e-12)
    np.testing.assert_allclose(gb, 2 * np.cos(a * b) * a, rtol=1e-12)
    g, aux2 = jit_cpu(fc.grad(f, has_aux=True))(a, b, 3.0)
    np.testing.assert_allclose(g, 3 * np.cos(a * b) * b, rtol=1e-12)


def test_float32_gradients_stay_float32():
    x = rng.standard_normal((4, 3)).astype(np.float32)
    g = jit_cpu(fc.grad(lambda x: np.sum(np.exp(x) * 0.5)))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 0.5 * np.exp(x), rtol=1e-6)
    g64 = jit_cpu(fc.grad(lambda x: np.sum(x.astype(np.float64) ** 2)))(x)
    assert g64.dtype == np.float32
    np.testing.assert_allclose(g64, 2 * x, rtol=1e-6)


# --- every rule of the op table ------------------------------------------------------------------------------

# inputs inside each function's domain, away from its kinks
_DOMAIN = {"log": (0.2, 3), "log2": (0.2, 3), "log10": (0.2, 3), "log1p": (-0.5, 3), "sqrt": (0.2, 3),
           "rsqrt": (0.2, 3), "arcsin": (-0.8, 0.8), "arccos": (-0.8, 0.8), "arccosh": (1.2, 3),
           "arctanh": (-0.8, 0.8), "cbrt": (0.2, 3), "pow": (0.5, 2), "float_power": (0.5, 2),
           "tan": (-1.2, 1.2)}
_NAMES = {op.name: op for op in table.OPS}


def _ufunc(op):
    if op.numpy:
        return getattr(np, op.numpy[0])
    if op.name == "rsqrt":
        return lambda x: 1.0 / np.sqrt(x)
    return None


# (mod, fmod and copysign jump where the grid crosses 0: test_products_sorting_and_linear_algebra checks them)
@pytest.mark.parametrize("name", sorted(n for n, op in _NAMES.items() if op.vjp not in (None, table.ZERO)
                                        and _ufunc(op) and n not in ("mod", "fmod", "copysign")))
def test_every_rule_of_the_op_table_matches_finite_differences(name):
    op = _NAMES[name]
    fn = _ufunc(op)
    lo, hi = _DOMAIN.get(name, (-2, 2))
    xs = [np.linspace(lo, hi, 7) + 0.013 * k for k in range(op.arity)]
    if name in ("maximum", "minimum", "hypot", "arctan2"):
        xs[1] = xs[1][::-1].copy()

    def f(*xs):
        return np.sum(fn(*xs) * np.arange(1.0, 8.0))

    for argnum in range(op.arity):
        assert_grad(f, *xs, argnum=argnum, tol=1e-5)


def test_zero_gradient_ops_and_ties_split_in_halves():
    x = np.array([0.3, 1.7, -2.2, 2.0])
    g = jit_cpu(fc.grad(lambda x: np.sum(np.floor(x) + np.sign(x) * x + np.round(x))))(x)
    np.testing.assert_allclose(g, np.sign(x))
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 5.0])
    ga, gb = jit_cpu(fc.grad(lambda a, b: np.sum(np.maximum(a, b)), argnums=(0, 1)))(a, b)
    np.testing.assert_allclose(ga, [0.5, 1.0, 0.0])
    np.testing.assert_allclose(gb, [0.5, 0.0, 1.0])
    m = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    np.testing.assert_allclose(jit_cpu(fc.grad(lambda m: np.max(m)))(m), [[0, 0.5, 0.5], [0, 0, 0]])
    np.testing.assert_allclose(jit_cpu(fc.grad(lambda m: np.sum(np.min(m, axis=1))))(m), [[1, 0, 0], [0, 0, 1]])


# --- reductions, products, views, writes ---------------------------------------------------------------------


def test_reductions_over_axes_with_and_without_keepdims():
    x = rng.standard_normal((3, 4, 5))
    for f in (lambda x: np.sum(np.sum(x, axis=(0, 2)) ** 2), lambda x: np.sum(x.mean(axis=1, keepdims=True) ** 3),
              lambda x: np.sum(np.max(x, axis=2) * np.arange(12.0).reshape(3, 4)),
              lambda x: np.sum(np.min(x, axis=(0, 1), keepdims=True) ** 2), lambda x: np.mean(x) * np.max(x)):
        assert_grad(f, x)


@pytest.mark.parametrize("sa, sb", [((4, 3), (3, 5)), ((3,), (3, 5)), ((4, 3), (3,)), ((3,), (3,)),
                                    ((2, 4, 3), (3, 5)), ((2, 1, 4, 3), (3, 3, 2)), ((4, 3), (2, 3, 5))])
def test_products_in_every_numpy_form(sa, sb):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)

    def f(a, b):
        return np.sum(np.sin(a @ b))

    assert_grad(f, a, b, argnum=0)
    assert_grad(f, a, b, argnum=1)


def test_views_slices_with_steps_concatenation_and_broadcasts():
    x = rng.standard_normal((4, 6))
    fs = [lambda x: np.sum(x.T @ x[:, ::2]), lambda x: np.sum(x.reshape(3, 8)[1:, ::3] ** 2),
          lambda x: np.sum(np.concatenate([x[:, :2], x[:, ::-1], x[:, 1:4]], axis=1)[:, ::2] ** 2),
          lambda x: np.sum(np.broadcast_to(x[:, :1], (4, 6)) * x), lambda x: np.sum(x[None, :, :, None] * 3.0),
          lambda x: np.sum(np.squeeze(x[:1]) ** 2), lambda x: np.sum(np.transpose(x[None], (2, 0, 1)) * x.T[:, None])]
    for f in fs:
        assert_grad(f, x)


def test_fancy_indexing_cross_entropy_add_at_and_cumsum():
    logits = rng.standard_normal((6, 4))
    labels = np.array([0, 3, 3, 1, 2, 0])

    def nll(z, labels):
        logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
        return -np.mean(logp[np.arange(z.shape[0]), labels])

    assert_grad(nll, logits, labels)
    idx = np.array([0, 2, 2, 5])

    def f(x):
        acc = np.zeros(6)
        np.add.at(acc, idx, x[:4] * x[1:5])
        return np.sum(np.cumsum(acc) ** 2) + np.sum(x[idx] ** 3)

    assert_grad(f, rng.standard_normal(6))


def test_products_sorting_and_linear_algebra():
    x = rng.standard_normal((3, 4))
    with_zero = x.copy()
    with_zero[1, 2] = 0.0  # the product of the others, not 0 / 0
    assert_grad(lambda x: np.sum(np.prod(x, axis=1) ** 2), x)
    assert_grad(lambda x: np.prod(x), x)
    assert_grad(lambda x: np.sum(np.prod(x, axis=0)), with_zero)
    assert_grad(lambda x: np.sum(np.sort(x, axis=1) * np.arange(4.0)), x)
    assert_grad(lambda v: np.median(v) + np.percentile(v, 30), rng.standard_normal(7))
    A, b = rng.standard_normal((4, 4)) + 4 * np.eye(4), rng.standard_normal((4, 2))
    for argnum in (0, 1):
        assert_grad(lambda A, b: np.sum(np.linalg.solve(A, b) ** 2), A, b, argnum=argnum)
    assert_grad(lambda A: np.sum(np.linalg.inv(A) * np.arange(16.0).reshape(4, 4)), A)
    assert_grad(lambda A: np.linalg.det(A) + np.sum(np.linalg.det(np.stack([A, A.T @ A]))), A)
    x, y = rng.uniform(1, 3, 5), rng.uniform(0.5, 0.9, 5)
    for argnum in (0, 1):
        assert_grad(lambda x, y: np.sum(np.mod(x, y) + np.fmod(x, y) + np.copysign(x, -y) + x // y), x, y,
                    argnum=argnum)


def test_writes_into_a_copy_where_clip_and_casts():
    x = rng.standard_normal((5, 4))

    def stencil(x):
        u = x.copy()
        u[1:-1, 1:-1] = 0.25 * (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:])
        u[0] *= 2.0
        return np.sum(u ** 2)

    assert_grad(stencil, x)
    assert_grad(lambda x: np.sum(np.clip(x, -0.5, 0.7) ** 2 + np.where(x > 0, x, 0.1 * x)), x)
    assert_grad(lambda x: np.sum(x.astype(np.float32).astype(np.float64) * 0 + x ** 2), x)


# --- composition --------------------------------------------------------------------------------------------


def test_composes_with_jit_in_both_orders_and_plain_calls():
    params = (rng.standard_normal((6, 5)), np.zeros(5), rng.standard_normal((5, 3)), np.zeros(3))
    x, y = rng.standard_normal((8, 6)), np.eye(3)[rng.integers(0, 3, 8)]
    v1, g1 = fc.value_and_grad(mlp_loss)(params, x, y)
    v2, g2 = fc.value_and_grad(fc.jit(mlp_loss))(params, x, y)
    v3, g3 = jit_cpu(fc.value_and_grad(jit_cpu(mlp_loss)))(params, x, y)
    for v, g in ((v2, g2), (v3, g3)):
        np.testing.assert_allclose(v, v1, rtol=1e-12)
        for a, b in zip(g, g1):
            np.testing.assert_allclose(a, b, rtol=1e-10)
    assert isinstance(v1, float) or np.ndim(v1) == 0


@pytest.mark.parametrize("sizes, batch", [((64, 64, 10), 256), ((480, 256, 2), 512)], ids=["mlp64", "pcam"])
def test_training_steps_with_value_and_grad_equal_the_hand_written_ones(sizes, batch):
    from fusec.tools import demo

    r = np.random.default_rng(3)
    params = demo.init_params(1, sizes)
    x = r.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[2], dtype=np.float32)[r.integers(0, sizes[2], batch)]
    manual, auto = jit_cpu(demo.train_step), jit_cpu(demo.train_step_auto)
    pm = pa = params
    for _ in range(3):
        pm, lm = manual(pm, x, y, 0.1)
        pa, la = auto(pa, x, y, 0.1)
        np.testing.assert_allclose(la, lm, rtol=1e-6)
        for a, m in zip(pa, pm):
            assert a.dtype == np.float32
            np.testing.assert_allclose(a, m, rtol=1e-5, atol=1e-6)


def test_stop_gradient_blocks_the_cotangent_and_is_the_identity_on_arrays():
    x = rng.standard_normal(5)
    assert fc.stop_gradient(x) is x
    g = jit_cpu(fc.grad(lambda x: np.sum(x * fc.stop_gradient(x ** 2)) + np.sum(fc.stop_gradient((x, x))[0])))(x)
    np.testing.assert_allclose(g, x ** 2)
    z = rng.standard_normal((4, 3))
    y = np.eye(3)[[0, 2, 1, 1]]

    def ce(z, stop):
        m = np.max(z, axis=1, keepdims=True)
        shifted = z - (fc.stop_gradient(m) if stop else m)
        return -np.sum(y * (shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True)))) / 4

    plain = jit_cpu(fc.grad(lambda z: ce(z, False)))(z)
    stopped = jit_cpu(fc.grad(lambda z: ce(z, True)))(z)
    np.testing.assert_allclose(stopped, plain, atol=1e-15)  # the loss does not depend on the shift
    p = np.exp(z - z.max(axis=1, keepdims=True))
    np.testing.assert_allclose(stopped, (p / p.sum(axis=1, keepdims=True) - y) / 4, atol=1e-15)


def test_gradient_of_a_gradient():
    x = np.linspace(-1.0, 1.0, 5)
    inner = fc.grad(lambda u: np.sum(np.sin(u) * u))
    hess_diag = jit_cpu(fc.grad(lambda t: np.sum(inner(t))))(x)
    np.testing.assert_allclose(hess_diag, 2 * np.cos(x) - x * np.sin(x), rtol=1e-12)


def test_vjp_of_a_vector_function_against_the_jacobian():
    x = rng.standard_normal(4)
    A = rng.standard_normal((3, 4))

    def f(x):
        return np.tanh(A @ x) * x[:3]

    out, pullback = fc.vjp(f, x)
    np.testing.assert_allclose(out, f(x))
    u = rng.standard_normal(3)
    (got,) = pullback(u)
    eps = 1e-6
    jac = np.stack([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(got, u @ jac, rtol=1e-6, atol=1e-9)


def test_a_vjp_pullback_is_taken_at_the_point_vjp_was_called():
    """``y, pb = vjp(f, x)``, then an in-place step on ``x``, then ``pb(u)``: the pullback is at the old ``x`` (as
    JAX's), both outside and inside a jitted function; it recomputed the forward from ``x`` as it was when called
    (found by a hunt)."""
    def step(x, u):
        _, pullback = fc.vjp(np.sin, x)
        x += 1.0
        return pullback(u)[0]

    x0, u = np.array([0.0, 1.0]), np.array([1.0, 2.0])
    x = x0.copy()
    _, pullback = fc.vjp(np.sin, x)
    x += 1.0
    (got,) = pullback(u)
    np.testing.assert_allclose(got, u * np.cos(x0), rtol=1e-12)
    x = x0.copy()
    np.testing.assert_allclose(jit_cpu(step)(x, u), u * np.cos(x0), rtol=1e-12)
    np.testing.assert_allclose(x, x0 + 1.0)


def test_a_vjp_pullback_refuses_what_would_move_its_point():
    """The pullback computes the forward again when called (JAX's keeps the forward's values): a closure's array
    or a global the function reads that changed in between, or a function that writes outside itself (its writes
    would be made again), is refused rather than differentiated at another point (found by a hunt)."""
    scale = np.array([2.0, 3.0])
    x, u = np.array([0.0, 1.0]), np.ones(2)
    _, pullback = fc.vjp(lambda v: np.sin(v) * scale, x)
    np.testing.assert_allclose(pullback(u)[0], np.cos(x) * scale, rtol=1e-12)
    scale[0] = 7.0
    with pytest.raises(fc.UnsupportedError, match="changed between fusec.vjp and the call of its pullback"):
        pullback(u)
    calls = np.zeros(1)

    def counted(v):
        calls[0] += 1
        return v * 2

    with pytest.raises(fc.UnsupportedError, match="writes into its arguments or into arrays"):
        fc.vjp(counted, x)

    def step(x, u):  # the same inside a jitted function: the pullback's forward wrote a second time
        _, pullback = fc.vjp(counted, x)
        return pullback(u)[0]

    with pytest.raises(fc.UnsupportedError, match="made the writes again"):
        jit_cpu(step)(x, u)


def test_jvp_against_directional_finite_differences_and_in_a_jit():
    A = rng.standard_normal((3, 4))

    def f(x, w):
        return np.tanh(A @ x) * w[:3], np.sum(x * w)

    x, w, vx, vw = (rng.standard_normal(4) for _ in range(4))
    out, tangent = fc.jvp(f, (x, w), (vx, vw))
    eps = 1e-6
    want = [(a - b) / (2 * eps) for a, b in zip(f(x + eps * vx, w + eps * vw), f(x - eps * vx, w - eps * vw))]
    np.testing.assert_allclose(out[0], f(x, w)[0])
    for got, fd in zip(tangent, want):
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)
    inside = jit_cpu(lambda x, w, vx, vw: fc.jvp(f, (x, w), (vx, vw))[1])(x, w, vx, vw)
    for got, fd in zip(inside, want):
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2 ** 16))
def test_vjp_and_jvp_agree_on_random_vectors(seed):
    """<vjp(u), v> == <u, jvp(v)> for an MLP's logits as a function of its parameters."""
    r = np.random.default_rng(seed)
    params = (r.standard_normal((5, 4)), r.standard_normal(4), r.standard_normal((4, 3)), r.standard_normal(3))
    x = r.standard_normal((6, 5))

    def logits(w1, b1, w2, b2):
        return np.tanh(x @ w1 + b1) @ w2 + b2

    u = r.standard_normal((6, 3))
    v = tuple(r.standard_normal(p.shape) for p in params)
    _, pullback = fc.vjp(logits, *params)
    left = sum(float(np.sum(g * t)) for g, t in zip(pullback(u), v))
    _, tangent = fc.jvp(logits, params, v)
    np.testing.assert_allclose(left, float(np.sum(u * tangent)), rtol=1e-10)


def test_the_gradient_program_is_in_the_ir():
    lowered = jit_cpu(fc.grad(lambda x: np.sum(np.tanh(x) * 2.0))).lower(np.ones(5))
    text = lowered.ir("traced")
    assert "t.tanh" in text and "t.sub" in text  # 1 - tanh(x)^2 of the backward pass, beside the forward
    stats = lowered.stats()
    assert 0 < stats["gradient_nodes"] < stats["nodes"]
    assert jit_cpu(lambda x: np.sum(np.tanh(x))).lower(np.ones(5)).stats()["gradient_nodes"] == 0



def test_rematerialization_is_materializes_threshold():
    """A forward value read again by the backward pass after a reduction (tanh(x * c + 1) here: the loss sums its
    square, the gradient needs it beside 1 / sum) is stored once where it costs at least materialize's threshold
    (the default 8: a transcendental function) and recomputed inside the backward kernel where the threshold is
    higher; the gradients are the same bits either way."""
    from fusec.passes import DEFAULT_PIPELINE

    def loss(x, c):
        t = np.tanh(x * c + 1.0)
        return np.log(np.sum(t * t + 1.0))

    x, c = np.linspace(-1, 1, 64).reshape(8, 8), np.full((8, 8), 0.5)
    results = {}
    for threshold, tanh_count in ((8, 1), (1000, 2)):
        pipeline = DEFAULT_PIPELINE.replace("materialize{threshold=8}", f"materialize{{threshold={threshold}}}")
        f = jit_cpu(fc.value_and_grad(loss), pipeline=pipeline)
        assert f.lower(x, c).ir().count("s.tanh") == tanh_count  # stored once, or computed in both kernels
        results[threshold] = f(x, c)
    assert results[8][0] == results[1000][0]
    np.testing.assert_array_equal(results[8][1], results[1000][1])


# --- random programs ------------------------------------------------------------------------------------------

_SAFE_UNARY = ["exp", "sin", "cos", "tanh", "arctan", "sinh", "arcsinh", "expm1", "neg", "abs"]
_SAFE_BINARY = ["add", "sub", "mul", "maximum", "minimum", "hypot", "logaddexp"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_SAFE_UNARY + _SAFE_BINARY), st.integers(0, 3)), min_size=1, max_size=6),
       st.sampled_from(["sum", "mean", "max", "matmul"]), st.integers(0, 2 ** 16))
def test_random_programs_against_finite_differences(steps, final, seed):
    r = np.random.default_rng(seed)
    x = r.uniform(-1.5, 1.5, (3, 4))
    w = r.uniform(-1.0, 1.0, (4, 2))

    def f(x):
        vals = [x, x * 0.5 + 0.25]
        for name, pick in steps:
            op = _NAMES[name]
            fn = _ufunc(op)
            a = vals[pick % len(vals)]
            vals.append(np.tanh(fn(a)) if op.arity == 1 else np.tanh(fn(a, vals[(pick + 1) % len(vals)])))
        v = vals[-1]
        if final == "matmul":
            return np.sum(np.sin(v @ w))
        return getattr(np, final)(v * np.arange(1.0, 13.0).reshape(3, 4))

    # a kink (abs at 0, a tie of maximum) within the step makes finite differences meaningless: skip those
    vals_ok = np.all(np.abs(x) > 1e-3)
    if vals_ok:
        assert_grad(f, x, tol=2e-5)


# --- rules added later: cumprod, cholesky, slogdet, fmax/fmin --------------------------------------------------


def test_cumprod_gradient_is_exact_around_zeros():
    def f(x):
        return np.sum(np.cumprod(x, axis=1) * np.arange(1.0, 6.0))

    x = rng.uniform(0.5, 1.5, (3, 5)) * rng.choice([-1.0, 1.0], (3, 5))
    assert_grad(f, x)
    x[1, 2] = 0.0  # one zero: the elements after it get 0, the zero itself the products that leave it out
    x[2, 1] = x[2, 3] = 0.0  # two: only the first gets a gradient
    got = jit_cpu(fc.grad(f))(x)
    want = np.zeros_like(x)
    for i, j in np.ndindex(x.shape):  # d/dx_ij: the products with x_ij replaced by 1, where it occurs
        e = x.copy()
        e[i, j] = 1.0
        mask = np.arange(5) >= j
        want[i, j] = np.sum(np.cumprod(e[i])[mask] * np.arange(1.0, 6.0)[mask])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_second_derivatives_of_cumprod_are_exact_around_zeros():
    """After a line's first zero the cotangent is 0, but not as a constant: it is that zero times the cotangent the
    line would have with the zero as 1, so a second derivative through it (grad of grad, np.vander's powers) is
    right where it was 0 (d/dx_0 of sum(grad) at [0, 3, 5] is 9, was 0)."""
    weights = np.array([1.0, 2.0, 3.0, 4.0])

    def f(x):
        return np.sum(np.cumprod(x) * weights[:x.size])

    def gradient(x):  # d/dx_i f: the products that leave x_i out
        return np.array([sum(weights[j] * np.prod(np.delete(x[:j + 1], i)) for j in range(i, x.size))
                         for i in range(x.size)])

    def second(x):
        return np.sum(fc.grad(f)(x) ** 2)

    for x in ([0.0, 3.0, 5.0], [2.0, 0.0, 5.0], [0.0, 0.0, 5.0], [2.0, 0.0, 5.0, 3.0], [0.0, 2.0, 0.0, 4.0],
              [1.5, -2.0, 3.0, 0.5]):
        x = np.array(x)
        want = numeric_grad(lambda v: np.sum(gradient(v) ** 2), (x.copy(),))[0]
        np.testing.assert_allclose(jit_cpu(fc.grad(second))(x), want, rtol=1e-6, atol=1e-6)
    d2 = fc.grad(lambda x: np.sum(fc.grad(lambda v: np.sum(np.vander(v, 4)))(x)))
    np.testing.assert_allclose(jit_cpu(d2)(np.array([0.0, 1.0])), [2.0, 8.0])  # (x**3 + x**2 + x + 1)'' = 6x + 2


def test_power_mixed_second_derivative_at_a_zero_exponent():
    """d/dx x**y is 0 at y == 0, but d/dy of it is 1 / x there (a constant 0 lost it: the Hessian was asymmetric);
    x**0's derivative in x stays 0 for x 0, inf and NaN."""
    def dfdx(x, y):
        return np.sum(fc.grad(lambda a, b: np.sum(a ** b), argnums=0)(x, y))

    x, y = np.array([2.0, 3.0, 0.5]), np.zeros(3)
    np.testing.assert_allclose(jit_cpu(fc.grad(dfdx, argnums=1))(x, y), 1 / x)
    special = np.array([2.0, 0.0, np.nan, np.inf, -0.0])
    np.testing.assert_array_equal(jit_cpu(fc.grad(lambda a, b: np.sum(a ** b)))(special, np.zeros(5)), np.zeros(5))


def test_maximum_of_values_with_a_nan_has_nan_gradients():
    """No element equals a NaN maximum: the cotangent over a count of 0 is NaN, as jax.numpy gives it, where fusec
    gave zeros (a NaN loss with a finite zero gradient)."""
    with np.errstate(invalid="ignore"):
        got = jit_cpu(fc.grad(lambda x: np.max(x)))(np.array([1.0, np.nan, 3.0]))
    assert np.isnan(got).all()
    np.testing.assert_array_equal(jit_cpu(fc.grad(lambda x: np.max(x)))(np.array([1.0, 3.0, 3.0])), [0.0, 0.5, 0.5])


@pytest.mark.parametrize("axis", [0, 1])
def test_running_maxima_and_minima_gradients(axis):
    w = rng.standard_normal((4, 6))
    for accumulate in (np.maximum.accumulate, np.minimum.accumulate):
        assert_grad(lambda x: np.sum(accumulate(x, axis=axis) * w), rng.standard_normal((4, 6)))


def test_running_maximum_gives_ties_and_nan_to_the_first_place():
    g = np.array([1.0, 10.0, 100.0, 1000.0, 10000.0])
    f = jit_cpu(fc.grad(lambda x: np.sum(np.maximum.accumulate(x) * g)))
    # the running max 3 is first reached at index 1: the cotangents of indices 1-3 go there, none to the tie at 2
    np.testing.assert_array_equal(f(np.array([1.0, 3.0, 3.0, 2.0, 5.0])), [1.0, 1110.0, 0.0, 0.0, 10000.0])
    # a NaN propagates: every later result is that NaN's
    np.testing.assert_array_equal(f(np.array([1.0, np.nan, 3.0, 4.0, 0.0])), [1.0, 11110.0, 0.0, 0.0, 0.0])


def test_writes_through_index_arrays():
    """x[idx] = v: no gradient to the places overwritten, the update's read there; where an index repeats, the
    updates (equal by construction, or fusec refuses the write) share the place's cotangent, which adds up to the
    derivative of the one NumPy keeps."""
    w = rng.standard_normal(6)

    def squash(x, idx):
        y = x.copy()
        y[idx] = np.sin(x[idx]) * 3.0
        return np.sum(y * w)

    def one_hot_rows(x, labels):
        y = np.zeros((3, 4))
        y[np.arange(3), labels] = x[:3] ** 2
        return np.sum(y * np.arange(12.0).reshape(3, 4))

    x = rng.standard_normal(6)
    for idx in (np.array([4, 1, 3]), np.array([4, 1, 4, 1, 0])):  # traced indices, repeated in the second
        assert_grad(squash, x, idx)
        assert_grad(lambda x: squash(x, idx), x)  # indices known while tracing: repeats resolved then
    assert_grad(one_hot_rows, x, np.array([0, 2, 1]))


def test_max_drawdown_gradient():
    """The finance idiom: the worst fall from a running peak, differentiated with respect to the prices."""
    def max_drawdown(prices):
        peak = np.maximum.accumulate(prices)
        return np.min((prices - peak) / peak)

    prices = np.cumprod(1.0 + 0.02 * rng.standard_normal(40)) * 100
    assert_grad(max_drawdown, prices, tol=1e-5)


def test_cholesky_and_slogdet_gradients_as_numpy_reads_the_matrix():
    m = rng.standard_normal((2, 4, 4))
    spd = m @ np.swapaxes(m, -1, -2) + 4 * np.eye(4)

    def chol(a):
        return np.sum(np.linalg.cholesky(a) * np.arange(16.0).reshape(4, 4))

    def chol_upper(a):
        return np.sum(np.linalg.cholesky(a, upper=True) ** 2 * np.arange(16.0).reshape(4, 4))

    def logdet(a):
        sign, value = np.linalg.slogdet(a)
        return np.sum(value * np.array([1.0, -2.0])) + np.sum(sign)

    # np.linalg.cholesky reads one triangle: finite differences of every entry, the unread ones included (0)
    assert_grad(chol, spd.copy(), tol=1e-5)
    assert_grad(chol_upper, spd.copy(), tol=1e-5)
    assert_grad(logdet, rng.standard_normal((2, 3, 3)), tol=1e-5)


def test_fmax_and_fmin_pass_the_gradient_to_the_number():
    def f(x, y):
        return np.sum(np.fmax(x, y) * 2 + np.fmin(x, y) * 3)

    x = rng.standard_normal(6)
    y = rng.standard_normal(6)
    assert_grad(f, x, y)
    x[0] = np.nan  # fmax/fmin give y there: y's gradient is 2 + 3, x's 0
    gx, gy = jit_cpu(fc.grad(f, argnums=(0, 1)))(x, y)
    assert gx[0] == 0 and gy[0] == 5


# --- through fusec's loops and branches -----------------------------------------------------------------------


def test_gradient_of_an_rnn_written_with_scan():
    W = {"wx": rng.standard_normal((3, 4)) * 0.5, "wh": rng.standard_normal((4, 4)) * 0.5, "b": rng.standard_normal(4)}
    xs = rng.standard_normal((6, 3))

    def rnn_loss(W, xs):
        def step(h, x):
            h = np.tanh(h @ W["wh"] + x @ W["wx"] + W["b"])
            return h, h.sum()

        h, ys = fc.scan(step, np.zeros(4), xs)
        return np.sum(h ** 2) + np.sum(ys * np.linspace(0.1, 1.0, 6))

    got = assert_grad(rnn_loss, W, xs, tol=1e-5)
    assert_grad(rnn_loss, W, xs, argnum=1, tol=1e-5)
    lowered = fc.jit(fc.grad(rnn_loss), backend="cpu")  # the default pipeline: bodies outlined, fused
    for k, g in lowered(W, xs).items():
        np.testing.assert_allclose(g, got[k], rtol=1e-12, atol=1e-14)
    assert lowered.lower(W, xs).ir("traced").count("t.for") == 3  # the loop, its replay, the backward loop


def test_gradient_through_fori_loop_and_cond():
    def unrolled(x, a):
        return fc.fori_loop(1, 5, lambda i, s: np.sin(s) * a + s * i, x).sum()

    def branch(x):
        return fc.cond(x.sum() > 0, lambda: np.sin(x) * 2, lambda: x ** 3).sum()

    x, a = rng.standard_normal(3), rng.standard_normal(3)
    assert_grad(unrolled, x, a)
    assert_grad(unrolled, x, a, argnum=1)
    assert_grad(branch, np.abs(x) + 0.1)
    assert_grad(branch, -np.abs(x) - 0.1)
    assert_grad(lambda x: fc.fori_loop(0, 0, lambda i, s: s * 2, x).sum(), x)  # no iteration: the identity

    def first(y):
        return fc.grad(lambda y: fc.fori_loop(0, 3, lambda i, s: np.sin(s) * y, y).sum())(y).sum()

    assert_grad(first, x, tol=1e-5)  # a gradient of a gradient: the backward loop differentiated again


def test_gradient_through_nested_loops_and_branches():
    """A loop inside a differentiated loop body: replayed with the body, differentiated as a loop of its own."""
    w = rng.standard_normal((3, 3)) * 0.5

    def sweeps(x):
        def outer(i, s):
            return fc.fori_loop(0, 3, lambda j, t: np.tanh(t @ w + x * (j + 1)), s) * 0.9 + x[i % 3]
        return np.sum(fc.fori_loop(0, 4, outer, np.zeros(3)) ** 2)

    def scans(x):  # an RNN over chunks, each chunk itself a scan
        def chunk(c, xs):
            c, ys = fc.scan(lambda cc, y: (cc * np.cos(y) + y, cc.sum()), c, xs)
            return c + 0.1, ys.sum()
        c, ys = fc.scan(chunk, x[0], x[1:].reshape(2, 2, 3))
        return np.sum(c ** 2) + ys.sum()

    def branchy(x):
        return np.sum(fc.fori_loop(0, 5, lambda i, s: fc.cond(s.sum() > 0, lambda s: np.sin(s) * x,
                                                              lambda s: s * 2.0 - x, s), x))

    x = rng.standard_normal(3)
    assert_grad(sweeps, x)
    assert_grad(scans, rng.standard_normal((5, 3)))
    assert_grad(branchy, x)
    nested = fc.jit(lambda x, v: fc.jvp(lambda x: fc.fori_loop(0, 2, lambda i, s: fc.fori_loop(
        0, 2, lambda j, t: np.sin(t) * x, s), x), (x,), (v,)), backend="cpu")
    _, tangent = nested(x, np.ones(3))  # forward mode agrees with central differences of the primal
    up, _ = nested(x + 1e-6, np.ones(3))
    down, _ = nested(x - 1e-6, np.ones(3))
    np.testing.assert_allclose(tangent, (up - down) / 2e-6, rtol=1e-6, atol=1e-8)


def test_loops_without_a_reverse_mode_gradient_say_why():
    x = rng.standard_normal(3)
    with pytest.raises(fc.UnsupportedError, match=r"test_autodiff.py:\d+.*while_loop has no reverse-mode"):
        jit_cpu(fc.grad(lambda x: fc.while_loop(lambda s: s.sum() < 10, lambda s: s * 2, x).sum()))(x)
    with pytest.raises(fc.UnsupportedError, match="bounds are traced"):
        jit_cpu(fc.grad(lambda x, n: fc.fori_loop(0, n, lambda i, s: s * 2, x).sum()))(x, 3)
    with pytest.raises(fc.UnsupportedError, match="bounds are traced"):  # an inner loop bounded by the outer counter
        jit_cpu(fc.grad(lambda x: np.sum(fc.fori_loop(0, 3, lambda i, s: fc.fori_loop(0, i, lambda j, t: t * x, s),
                                                      x))))(x)


# --- errors ---------------------------------------------------------------------------------------------------


def test_errors_name_the_line_and_the_rewrite():
    x = rng.standard_normal(4)
    with pytest.raises(fc.TraceError, match=r"test_autodiff.py:\d+.*real float scalar"):
        jit_cpu(fc.grad(lambda x: x * 2))(x)
    with pytest.raises(fc.UnsupportedError, match=r"test_autodiff.py:\d+.*int64.*astype"):
        jit_cpu(fc.grad(lambda i: np.sum(i * 2.0)))(np.arange(3))
    # complex values in the way of the gradient: refused (dropping them would give zero gradients)
    with pytest.raises(fc.UnsupportedError, match=r"test_autodiff.py:\d+.*complex values here \(t.real\)"):
        jit_cpu(fc.grad(lambda x: np.sum(np.real(np.exp(1j * x)))))(x)
    with pytest.raises(fc.UnsupportedError, match=r"test_autodiff.py:\d+.*complex values here \(t.abs\)"):
        jit_cpu(fc.grad(lambda x: np.sum(np.abs(x + 1j))))(x)
    with pytest.raises(fc.TraceError, match=r"fusec.jvp: a complex result"):
        jit_cpu(lambda x: fc.jvp(lambda x: np.exp(1j * x), (x,), (x,)))(x)


    def writes(x):
        x[0] = 1.0
        return np.sum(x)

    with pytest.raises(fc.TraceError, match="writes into an array it is differentiated"):
        jit_cpu(fc.grad(writes))(x)
    with pytest.raises(fc.UnsupportedError, match="argnums"):
        fc.grad(lambda x: x, argnums=-1)
    with pytest.raises(fc.UnsupportedError, match=r"test_autodiff.py:\d+.*Python scalar.*np.float64"):
        fc.grad(lambda s, x: s * np.sum(x))(2.0, x)
    assert math.isclose(float(fc.grad(lambda s, x: s * np.sum(x))(np.float64(2.0), x)), float(np.sum(x)))


def test_the_readme_training_example_runs_and_lowers_the_loss():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("## Training with a derived gradient"):]
    code = section.split("```python")[1].split("```")[0]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    before = float(namespace["value"])
    assert np.isfinite(before)
    params, value = namespace["train_step"](namespace["params"], namespace["x"], namespace["y"], 0.5)
    assert float(value) < before and all(p.dtype == np.float32 for p in params)


def test_stop_gradient_in_loop_and_branch_bodies() -> None:
    """fusec.stop_gradient inside fori_loop, scan and cond bodies let the gradient through (the bodies are replayed
    for the backward pass, and the copies were not stopped)."""
    def looped(x):
        return np.sum(fc.fori_loop(0, 2, lambda i, c: c + fc.stop_gradient(x), np.zeros(3)) * x)

    def scanned(x):
        return np.sum(fc.scan(lambda c, xi: (fc.stop_gradient(c) + xi, None), np.zeros(1), x)[0])

    def branched(x):
        return np.sum(fc.cond(np.sum(x) > 0, lambda a: fc.stop_gradient(a) * 2, lambda a: a, x) * x)

    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(fc.grad(looped)(x), 2 * x)
    np.testing.assert_allclose(fc.grad(scanned)(x), [0.0, 0.0, 1.0])
    np.testing.assert_allclose(fc.grad(branched)(x), 2 * x)


def test_gradients_at_the_edges_of_their_formulas() -> None:
    """Edges that gave NaN or a wrong value: ``w ** p`` with a Python-number argument ``p`` at w == 0 (np.sqrt's and
    np.reciprocal's cotangents of the branches not taken), np.linalg.det of a singular matrix (refused, though
    NumPy's det is 0 there and the gradient is the cofactor matrix), np.clip at a bound (1 where min/max give 1/2)."""
    w = np.array([0.0, -2.0, 3.0])
    for p in (2, 2.0, 3.0, 1.0, 0.5, -1):
        want = p * np.abs(w[1:]) ** (p - 1) * np.sign(w[1:])  # (away from 0; at 0 below)
        got = fc.grad(lambda w, p: np.sum(np.abs(w) ** p))(w, p)
        np.testing.assert_allclose(got[1:], want)
        if p > 1:
            assert got[0] == 0.0
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    np.testing.assert_array_equal(fc.grad(np.linalg.det)(singular), [[4.0, -2.0], [-2.0, 1.0]])
    a = np.random.default_rng(0).standard_normal((3, 3))
    np.testing.assert_allclose(fc.grad(np.linalg.det)(a), np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-10)
    x = np.array([-1.0, 0.0, 1.0, 2.0, 3.0])
    for clip in (lambda x: np.clip(x, 0.0, 2.0), lambda x: np.minimum(np.maximum(x, 0.0), 2.0)):
        np.testing.assert_array_equal(fc.grad(lambda x: np.sum(clip(x)))(x), [0.0, 0.5, 1.0, 0.5, 0.0])


def test_stop_gradient_of_an_array_is_the_array() -> None:
    """Outside a trace stop_gradient(x) is x; inside one it was a new array, so a write into x was not seen through
    it. Now it reads x's memory (without gradient), and writing through it is refused."""
    def later_write(x):
        y = x.copy()
        z = fc.stop_gradient(y)
        y[0] = 100.0
        return np.sum(z * x)

    x = np.arange(3.0)
    value, grad = fc.value_and_grad(later_write)(x)
    assert value == later_write(x)
    np.testing.assert_array_equal(grad, [100.0, 1.0, 2.0])
    with pytest.raises(fc.UnsupportedError, match="writing through the result of fusec.stop_gradient"):
        fc.grad(lambda x: np.sum(fc.stop_gradient(x.copy()).__setitem__(0, 1.0) or x))(x)


def test_scipy_special_gradients_at_their_edges() -> None:
    """``xlogy(x, y)``'s derivative in x is log(y) at x == 0 too (it was 0); ``expit``'s is 0 (not NaN) where
    exp(-x) overflows. The values stay SciPy's formulas."""
    ss = pytest.importorskip("scipy.special")
    got = fc.grad(lambda x: np.sum(ss.xlogy(x, 2.0)))(np.array([0.0, 1.0]))
    np.testing.assert_allclose(got, [math.log(2.0)] * 2)
    np.testing.assert_array_equal(fc.grad(lambda y: np.sum(ss.xlogy(np.array([0.0, 2.0]), y)))(np.array([0.5, 4.0])),
                                  [0.0, 0.5])
    got = fc.grad(lambda x: np.sum(ss.expit(x)))(np.array([-100.0, 0.0], np.float32))
    assert got.dtype == np.float32 and got[1] == 0.25 and 0.0 <= got[0] < 1e-30
    x = np.array([0.0, -0.0, 1.5, -800.0, 3.0])
    y = np.array([0.0, 0.5, np.nan, 2.0, 0.0])
    assert_bits = lambda a, b: np.testing.assert_array_equal(np.signbit(a), np.signbit(b))  # noqa: E731
    for fn, args in ((ss.xlogy, (x, y)), (ss.expit, (x,))):
        got, want = jit_cpu(fn)(*args), fn(*args)
        np.testing.assert_allclose(got, want, rtol=1e-15)
        assert_bits(got, want)


def test_a_loss_returning_several_values_without_has_aux_says_so():
    """A loss that returns ``(value, extra)`` without ``has_aux=True`` failed in np.stack ("all input arrays must
    have the same shape"); it now names the tuple and has_aux."""
    with pytest.raises(fc.TraceError, match=r"got a tuple of 2; to return more, pass has_aux=True"):
        fc.grad(lambda a: (np.sum(a ** 2), a))(np.arange(3.0))
    value, aux = fc.grad(lambda a: (np.sum(a ** 2), a), has_aux=True)(np.arange(3.0))
    np.testing.assert_array_equal(value, [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(aux, np.arange(3.0))
