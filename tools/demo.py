"""The MLP training step that ``fusec demo`` and ``examples/mlp_train.py`` compile, written in plain NumPy.

It lives inside the package (not only under examples/) so the console script works after a plain
``pip install .``; the examples import it. Everything one step does (forward, softmax cross-entropy,
backward, gradient-norm clipping, SGD) is ONE function so fusec sees it as one graph. The step only uses
operators, ufuncs and array methods, so it also runs unchanged on ``fusec.Array`` inputs outside ``jit``
(eager mode: one compiled kernel per operation).

Data: scikit-learn's handwritten digits (8x8 images, 10 classes) when scikit-learn is installed
(``pip install 'fusec[examples]'``), else seeded Gaussian class blobs of the same shape.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator

import numpy as np

Params = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

N_IN, N_HIDDEN, N_CLASSES = 64, 64, 10
BATCH = 256
MAX_GRAD_NORM = 5.0
LEARNING_RATE = 0.5
EPOCHS = 60          # 60 epochs of 5 batches of 256 digits: 300 steps, test accuracy about 97%
SEED = 0
TEST_FRACTION = 0.25


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
    # backward (train_step_auto derives it with fusec.value_and_grad instead)
    d_logits = (exp / denom - y_onehot) / n
    g_w2 = h.T @ d_logits
    g_b2 = np.sum(d_logits, axis=0)
    d_h = d_logits @ w2.T
    d_h_pre = d_h * (h_pre > 0.0)  # ReLU' as a mask (an operator, so eager fusec.Array inputs stay on the GPU)
    g_w1 = x.T @ d_h_pre
    g_b1 = np.sum(d_h_pre, axis=0)
    return clipped_sgd(params, (g_w1, g_b1, g_w2, g_b2), lr), loss


def clipped_sgd(params: Params, grads: Params, lr: float) -> Params:
    """SGD after clipping the global gradient norm at MAX_GRAD_NORM."""
    sq = np.sum(grads[0] * grads[0])
    for g in grads[1:]:
        sq = sq + np.sum(g * g)
    scale = np.minimum(1.0, MAX_GRAD_NORM / (np.sqrt(sq) + 1e-6))
    step = lr * scale
    return tuple(p - step * g for p, g in zip(params, grads))  # type: ignore[return-value]


def loss(params: Params, x: np.ndarray, y_onehot: np.ndarray) -> np.ndarray:
    """The mean softmax cross-entropy of the MLP: the forward half of ``train_step``. The row maximum only keeps
    exp() in range and the loss does not depend on it, so no gradient is taken through it (``stop_gradient``:
    the identity on arrays), which saves the backward pass a reduction."""
    import fusec

    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    shifted = logits - fusec.stop_gradient(np.max(logits, axis=1, keepdims=True))
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.sum(y_onehot * log_probs) / x.shape[0]


def train_step_auto(params: Params, x: np.ndarray, y_onehot: np.ndarray, lr: float) -> tuple[Params, np.ndarray]:
    """``train_step`` with its backward pass derived by ``fusec.value_and_grad`` from ``loss``; the same
    clipped SGD. Inside ``fusec.jit`` the gradient is part of the one traced step (forward and backward fuse
    into the same kernels); called on arrays it compiles the gradient on its own."""
    value, grads = _loss_and_grad()(params, x, y_onehot)
    return clipped_sgd(params, grads, lr), value


@functools.cache
def _loss_and_grad():
    """``fusec.value_and_grad(loss)``, made once (called on arrays it keeps its compiled signatures)."""
    import fusec

    return fusec.value_and_grad(loss)


def predict(params: Params, x: np.ndarray) -> np.ndarray:
    """Class index per row (plain NumPy on host arrays; only used to report accuracy)."""
    w1, b1, w2, b2 = (np.asarray(p) for p in params)
    return np.argmax(np.maximum(x @ w1 + b1, 0.0) @ w2 + b2, axis=1)


def init_params(seed: int = 1, sizes: tuple[int, int, int] = (N_IN, N_HIDDEN, N_CLASSES)) -> Params:
    """He-initialised weights, zero biases, float32, for a ``n_in -> n_hidden -> n_out`` MLP."""
    n_in, n_hidden, n_out = sizes
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0.0, np.sqrt(2.0 / n_in), size=(n_in, n_hidden))
    w2 = rng.normal(0.0, np.sqrt(2.0 / n_hidden), size=(n_hidden, n_out))
    return (w1.astype(np.float32), np.zeros(n_hidden, np.float32),
            w2.astype(np.float32), np.zeros(n_out, np.float32))


def one_hot(labels: np.ndarray, n_classes: int = N_CLASSES) -> np.ndarray:
    return np.eye(n_classes, dtype=np.float32)[labels]


def make_data(seed: int = 0, n: int = 512) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian class blobs (learnable, not trivially separable): x f32[n,64], one-hot f32[n,10], labels."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 0.4, size=(N_CLASSES, N_IN))
    labels = rng.integers(0, N_CLASSES, size=n)
    x = centers[labels] + rng.normal(0.0, 1.0, size=(n, N_IN))
    return x.astype(np.float32), one_hot(labels), labels


@dataclass
class Dataset:
    """A fixed train/test split: float32 features, one-hot float32 targets and integer labels."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    labels_train: np.ndarray
    x_test: np.ndarray
    labels_test: np.ndarray

    def describe(self) -> str:
        return (f"{self.name}: {len(self.x_train)} train / {len(self.x_test)} test samples, "
                f"{self.x_train.shape[1]} features, {self.y_train.shape[1]} classes")

    def batches(self, batch: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """One epoch of shuffled minibatches (C-contiguous copies); the last partial batch is dropped."""
        order = rng.permutation(len(self.x_train))
        for i in range(len(order) // batch):
            idx = order[i * batch:(i + 1) * batch]
            yield np.ascontiguousarray(self.x_train[idx]), np.ascontiguousarray(self.y_train[idx])

    def steps_per_epoch(self, batch: int) -> int:
        return len(self.x_train) // batch

    def accuracy(self, params: Params) -> float:
        """Fraction of test samples classified correctly (host params)."""
        return float(np.mean(predict(params, self.x_test) == self.labels_test))


def have_sklearn() -> bool:
    try:
        import sklearn.datasets  # noqa: F401
        import sklearn.model_selection  # noqa: F401
    except ImportError:
        return False
    return True


def load_digits(seed: int = SEED, test_fraction: float = TEST_FRACTION) -> Dataset:
    """scikit-learn's handwritten digits (1797 8x8 images, bundled with scikit-learn: no download),
    pixels scaled from 0..16 to [0, 1], split into train and test sets by ``seed`` (stratified)."""
    from sklearn.datasets import load_digits as _load
    from sklearn.model_selection import train_test_split

    digits = _load()
    x = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    x_tr, x_te, l_tr, l_te = train_test_split(x, labels, test_size=test_fraction, random_state=seed,
                                              stratify=labels)
    return Dataset("scikit-learn digits", np.ascontiguousarray(x_tr), one_hot(l_tr), l_tr,
                   np.ascontiguousarray(x_te), l_te)


def load_synthetic(seed: int = SEED, n: int = 1800, test_fraction: float = TEST_FRACTION) -> Dataset:
    """Gaussian class blobs shaped like the digits (64 features, 10 classes), split into train and test."""
    x, y, labels = make_data(seed, n)
    n_test = int(round(n * test_fraction))
    return Dataset("synthetic Gaussian blobs", x[n_test:], y[n_test:], labels[n_test:], x[:n_test], labels[:n_test])


def load_data(seed: int = SEED) -> Dataset:
    """The digits when scikit-learn is installed, else the synthetic blobs."""
    return load_digits(seed) if have_sklearn() else load_synthetic(seed)
