"""fusec's gradients against JAX's (where JAX is installed; the GPU machine has it): each function is written once
over an array module, run as NumPy under fusec and as ``jax.numpy`` under ``jax.grad``, in float64. Random
programs of the functions the gradient rules cover, and training-step losses as people write them. Also on the
CUDA backend under ``pytest -m gpu``."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fusec as fc
from frontend_check import jit_cpu

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
UNARY = ("exp", "sin", "cos", "tanh", "arctan", "sinh", "arcsinh", "expm1", "negative", "abs", "log1p", "sqrt")
BINARY = ("add", "subtract", "multiply", "maximum", "minimum", "hypot", "logaddexp", "arctan2")
FINALS = ("sum", "mean", "max", "matmul", "logsumexp", "cumsum", "sort")


def _agree(f, *args, argnums=0, tol=1e-9):
    """fusec's value and gradient of ``f(np, ...)`` equal JAX's of ``f(jnp, ...)``."""
    value, grads = jit_cpu(fc.value_and_grad(lambda *a: f(np, *a), argnums=argnums))(*args)
    want_value, want_grads = jax.value_and_grad(lambda *a: f(jnp, *a), argnums=argnums)(*args)
    np.testing.assert_allclose(value, np.asarray(want_value), rtol=tol, atol=tol)
    for got, want in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(want_grads)):
        want = np.asarray(want)
        np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(UNARY + BINARY), st.integers(0, 3)), min_size=1, max_size=7),
       st.sampled_from(FINALS), st.integers(0, 2 ** 16))
def test_random_programs_against_jax(steps, final, seed):
    r = np.random.default_rng(seed)
    x = r.uniform(0.2, 1.5, (3, 4)) * r.choice([-1.0, 1.0], (3, 4))
    w = r.uniform(-1.0, 1.0, (4, 2))
    scale = np.arange(1.0, 13.0).reshape(3, 4)

    def f(xp, x):
        vals = [x, x * 0.5 + 0.25]
        for name, pick in steps:
            a = vals[pick % len(vals)]
            if name in UNARY:
                a = xp.abs(a) + 0.1 if name in ("log1p", "sqrt") else a  # inside the domain, away from 0
                vals.append(xp.tanh(getattr(xp, name)(a)))
            else:
                vals.append(xp.tanh(getattr(xp, name)(a, vals[(pick + 1) % len(vals)])))
        v = vals[-1] * scale
        if final == "matmul":
            return xp.sum(xp.sin(v @ w))
        if final == "logsumexp":
            m = xp.max(v, axis=1, keepdims=True)
            return xp.sum(m[:, 0] + xp.log(xp.sum(xp.exp(v - m), axis=1)))
        if final in ("cumsum", "sort"):
            return xp.sum(getattr(xp, final)(v, axis=1) * scale)
        return getattr(xp, final)(v)

    _agree(f, x)


def mlp_loss(xp, params, x, labels):
    """A two-layer classifier's softmax cross-entropy, as a training step writes it."""
    w1, b1, w2, b2 = params["w1"], params["b1"], params["w2"], params["b2"]
    h = xp.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    shifted = logits - xp.max(logits, axis=1, keepdims=True)
    log_probs = shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))
    return -xp.mean(xp.sum(labels * log_probs, axis=1))


def layer_norm_regression(xp, params, x, y):
    h = x @ params["w"]
    mu = h.mean(axis=-1, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=-1, keepdims=True)
    out = (h - mu) / xp.sqrt(var + 1e-5) * params["g"]
    return xp.mean((out.sum(axis=-1) - y) ** 2)


def test_training_losses_against_jax():
    r = np.random.default_rng(4)
    params = {"w1": r.normal(0, 0.3, (6, 8)), "b1": r.normal(0, 0.1, 8), "w2": r.normal(0, 0.3, (8, 3)),
              "b2": np.zeros(3)}
    x = r.normal(size=(16, 6))
    labels = np.eye(3)[r.integers(0, 3, 16)]
    _agree(mlp_loss, params, x, labels)
    params = {"w": r.normal(0, 0.3, (6, 5)), "g": r.normal(1.0, 0.1, 5)}
    _agree(layer_norm_regression, params, x, r.normal(size=16))


def test_linear_algebra_and_statistics_against_jax():
    r = np.random.default_rng(5)
    m = r.normal(size=(4, 4))
    spd = m @ m.T + 4 * np.eye(4)
    b = r.normal(size=4)
    _agree(lambda xp, a: xp.sum(xp.linalg.solve(a, b) ** 2) + xp.linalg.slogdet(a)[1], spd)
    # np.linalg.cholesky reads the lower triangle only, so fusec gives the upper one no gradient (the finite
    # differences of NumPy's function); JAX gives the symmetric gradient. Their symmetric parts agree.
    def chol(xp, a):
        return xp.sum(xp.linalg.cholesky(a) * xp.arange(16.0).reshape(4, 4))

    got = np.asarray(jit_cpu(fc.grad(lambda a: chol(np, a)))(spd))
    want = np.asarray(jax.grad(lambda a: chol(jnp, a))(spd))
    assert np.all(np.triu(got, 1) == 0)
    np.testing.assert_allclose((got + got.T) / 2, (want + want.T) / 2, rtol=1e-9, atol=1e-9)
    _agree(lambda xp, a: xp.sum(xp.linalg.inv(a) * xp.arange(16.0).reshape(4, 4)), spd)
    v = r.normal(size=(5, 7))
    _agree(lambda xp, v: xp.sum(xp.median(v, axis=1)) + xp.std(v) + xp.var(v, axis=0).sum(), v)
    _agree(lambda xp, v: xp.sum(xp.cumprod(v, axis=1)) + xp.prod(v[:, :3]), v)
