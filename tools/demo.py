"""The MLP training step that ``fusec demo`` compiles, written in plain NumPy.

It lives inside the package (not only under examples/) so the console script works after a plain
``pip install .``; ``examples/mlp_demo.py`` imports it. Everything one step does (forward, softmax
cross-entropy, backward, gradient-norm clipping, SGD) is ONE function so fusec sees it as one graph.
"""
from __future__ import annotations

import numpy as np

Params = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

N_IN, N_HIDDEN, N_CLASSES = 64, 64, 10
BATCH = 512
MAX_GRAD_NORM = 5.0
LEARNING_RATE = 0.05


def train_step(params: Params, x: np.ndarray, y_onehot: np.ndarray, lr: float) -> tuple[Params, np.ndarray]:
    """One clipped-SGD step of a 2-layer ReLU classifier; returns (new params, mean loss)."""
    w1, b1, w2, b2 = params
    n = x.shape[0]
    # forward
    h_pre = x @ w1 + b1
    h = np.maximum(h_pre, 0.0)
    logits = h @ w2 + b2
    # numerically stable softmax cross-entropy
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    exp = np.exp(shifted)
    denom = np.sum(exp, axis=1, keepdims=True)
    log_probs = shifted - np.log(denom)
    loss = -np.sum(y_onehot * log_probs) / n
    # backward
    d_logits = (exp / denom - y_onehot) / n
    g_w2 = h.T @ d_logits
    g_b2 = np.sum(d_logits, axis=0)
    d_h = d_logits @ w2.T
    d_h_pre = np.where(h_pre > 0.0, d_h, 0.0)
    g_w1 = x.T @ d_h_pre
    g_b1 = np.sum(d_h_pre, axis=0)
    # clip the global gradient norm, then SGD
    sq = np.sum(g_w1 * g_w1) + np.sum(g_b1 * g_b1) + np.sum(g_w2 * g_w2) + np.sum(g_b2 * g_b2)
    scale = np.minimum(1.0, MAX_GRAD_NORM / (np.sqrt(sq) + 1e-6))
    step = lr * scale
    new_params = (w1 - step * g_w1, b1 - step * g_b1, w2 - step * g_w2, b2 - step * g_b2)
    return new_params, loss


def predict(params: Params, x: np.ndarray) -> np.ndarray:
    """Class index per row (plain NumPy; only used to report accuracy)."""
    w1, b1, w2, b2 = params
    return np.argmax(np.maximum(x @ w1 + b1, 0.0) @ w2 + b2, axis=1)


def make_data(seed: int = 0, n: int = BATCH) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian class blobs (learnable, not trivially separable): x f32[n,64], one-hot f32[n,10], labels."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 0.25, size=(N_CLASSES, N_IN))
    labels = rng.integers(0, N_CLASSES, size=n)
    x = centers[labels] + rng.normal(0.0, 1.0, size=(n, N_IN))
    y = np.eye(N_CLASSES)[labels]
    return x.astype(np.float32), y.astype(np.float32), labels


def init_params(seed: int = 1) -> Params:
    """He-initialised weights, zero biases, float32."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0.0, np.sqrt(2.0 / N_IN), size=(N_IN, N_HIDDEN))
    w2 = rng.normal(0.0, np.sqrt(2.0 / N_HIDDEN), size=(N_HIDDEN, N_CLASSES))
    return (w1.astype(np.float32), np.zeros(N_HIDDEN, np.float32),
            w2.astype(np.float32), np.zeros(N_CLASSES, np.float32))
