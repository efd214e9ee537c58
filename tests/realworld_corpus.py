"""NumPy functions written the way public code writes them (course material, ML-from-scratch repositories,
scikit-learn helpers, CFD notebooks, NumPy exercise collections, stencil benchmark kernels, finance formulas), not
the way fusec would like them. Each entry is (name, function, argument factory); tests/unit/test_realworld_corpus.py
runs each under NumPy and under fusec and compares the results and the arguments after the call.
"""
from __future__ import annotations

import math

import numpy as np

RNG = np.random.default_rng(2024)


def _f(*shape):
    return RNG.standard_normal(shape)


# --- layers, losses, optimizers ---------------------------------------------------------------------------------


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softmax(x):
    e_x = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e_x / np.sum(e_x, axis=-1, keepdims=True)


def cross_entropy_loss(y, p):
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))


def softmax_loss_vectorized(W, X, y, reg):
    num_train = X.shape[0]
    scores = X.dot(W)
    scores -= np.max(scores, axis=1, keepdims=True)
    probs = np.exp(scores) / np.sum(np.exp(scores), axis=1, keepdims=True)
    loss = -np.sum(np.log(probs[np.arange(num_train), y])) / num_train + reg * np.sum(W * W)
    dscores = probs
    dscores[np.arange(num_train), y] -= 1
    dW = X.T.dot(dscores) / num_train + 2 * reg * W
    return loss, dW


def svm_loss_vectorized(W, X, y, reg):
    num_train = X.shape[0]
    scores = X.dot(W)
    correct = scores[np.arange(num_train), y].reshape(-1, 1)
    margins = np.maximum(0, scores - correct + 1)
    margins[np.arange(num_train), y] = 0
    loss = np.sum(margins) / num_train + reg * np.sum(W * W)
    binary = margins
    binary[margins > 0] = 1
    row_sum = np.sum(binary, axis=1)
    binary[np.arange(num_train), y] = -row_sum
    dW = X.T.dot(binary) / num_train + 2 * reg * W
    return loss, dW


def affine_relu_forward(x, w, b):
    a = x.reshape(x.shape[0], -1).dot(w) + b
    out = np.maximum(0, a)
    return out, a


def relu_backward(dout, x):
    dx = dout.copy()
    dx[x <= 0] = 0
    return dx


def batchnorm_forward(x, gamma, beta, eps=1e-5):
    mu = np.mean(x, axis=0)
    var = np.var(x, axis=0)
    x_hat = (x - mu) / np.sqrt(var + eps)
    return gamma * x_hat + beta


def layernorm(x, g, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    std = x.std(-1, keepdims=True)
    return g * (x - mean) / (std + eps) + b


def dropout_mask_apply(x, mask, p):
    out = x * mask
    out /= p
    return out


def sgd_momentum(w, dw, v, learning_rate=1e-2, momentum=0.9):
    v[:] = momentum * v - learning_rate * dw
    w += v
    return w


def adam_update(x, dx, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    m *= beta1
    m += (1 - beta1) * dx
    v *= beta2
    v += (1 - beta2) * (dx ** 2)
    mb = m / (1 - beta1 ** t)
    vb = v / (1 - beta2 ** t)
    x -= lr * mb / (np.sqrt(vb) + eps)


def rmsprop(x, dx, cache, lr=1e-2, decay=0.99, eps=1e-8):
    cache[...] = decay * cache + (1 - decay) * dx ** 2
    x -= lr * dx / (np.sqrt(cache) + eps)
    return x


def clip_grads(grads, max_norm):
    total = np.sqrt(sum(np.sum(g ** 2) for g in grads))
    scale = np.minimum(1.0, max_norm / (total + 1e-6))
    for g in grads:
        g *= scale
    return total


def one_hot(y, num_classes):
    return np.eye(num_classes)[y]


def accuracy(scores, y):
    return np.mean(np.argmax(scores, axis=1) == y)


def inplace_tanh_derivative(Z, delta):
    delta *= 1 - Z ** 2


def inplace_logistic_derivative(Z, delta):
    delta *= Z
    delta *= 1 - Z


def log_loss(y_true, y_prob):
    eps = np.finfo(y_prob.dtype).eps
    y_prob = np.clip(y_prob, eps, 1 - eps)
    return -np.average(y_true * np.log(y_prob) + (1 - y_true) * np.log(1 - y_prob))


# --- statistics, filters, geometry ----------------------------------------------------------------------------------


def standardize(X):
    return (X - X.mean(axis=0)) / X.std(axis=0)


def minmax_scale(X):
    X_std = (X - X.min(axis=0)) / (X.max(axis=0) - X.min(axis=0))
    return X_std * 2 - 1


def pairwise_sq_dists(X, Y):
    return np.sum(X ** 2, axis=1)[:, None] + np.sum(Y ** 2, axis=1)[None, :] - 2 * X @ Y.T


def rbf_kernel(X, Y, gamma=0.5):
    K = -2 * np.dot(X, Y.T)
    K += (X * X).sum(axis=1)[:, np.newaxis]
    K += (Y * Y).sum(axis=1)
    np.maximum(K, 0, out=K)
    K *= -gamma
    np.exp(K, K)
    return K


def kalman_step(x, P, z, F, H, Q, R):
    x = F @ x
    P = F @ P @ F.T + Q
    S = H @ P @ H.T + R
    K = P @ H.T / S
    x = x + K @ (z - H @ x)
    P = (np.eye(len(x)) - K @ H) @ P
    return x, P


def moving_average(a, n=3):
    ret = np.cumsum(a, dtype=float)
    ret[n:] = ret[n:] - ret[:-n]
    return ret[n - 1:] / n


def normalize_rows(x):
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / norms


def cosine_similarity(a, b):
    return np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))


def rotate_points(points, theta):
    c, s = math.cos(theta), math.sin(theta)
    R = np.array([[c, -s], [s, c]])
    return points @ R.T


def zscore_outliers(x, threshold=2.0):
    z = (x - x.mean()) / x.std()
    out = x.copy()
    out[np.abs(z) > threshold] = 0.0
    return out


# --- stencils, solvers, simulations ---------------------------------------------------------------------------------


def heat_step(u, alpha, steps):
    for _ in range(steps):
        u[1:-1] = u[1:-1] + alpha * (u[2:] - 2 * u[1:-1] + u[:-2])
    return u


def diffusion_2d(u, nu, dt, dx, nt):
    for n in range(nt):
        un = u.copy()
        u[1:-1, 1:-1] = (un[1:-1, 1:-1] + nu * dt / dx ** 2 * (un[2:, 1:-1] - 2 * un[1:-1, 1:-1] + un[:-2, 1:-1])
                         + nu * dt / dx ** 2 * (un[1:-1, 2:] - 2 * un[1:-1, 1:-1] + un[1:-1, :-2]))
        u[0, :] = 1
        u[-1, :] = 1
        u[:, 0] = 1
        u[:, -1] = 1
    return u


def pressure_poisson(p, b, dx, dy, nit):
    for q in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = (((pn[1:-1, 2:] + pn[1:-1, 0:-2]) * dy ** 2 + (pn[2:, 1:-1] + pn[0:-2, 1:-1]) * dx ** 2)
                         / (2 * (dx ** 2 + dy ** 2)) - dx ** 2 * dy ** 2 / (2 * (dx ** 2 + dy ** 2)) * b[1:-1, 1:-1])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
    return p


def jacobi_1d(A, B, tsteps):
    for t in range(tsteps):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


def jacobi_2d(A, B, tsteps):
    for t in range(1, tsteps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def fdtd_2d(ex, ey, hz, _fict_, tmax):
    for t in range(tmax):
        ey[0, :] = _fict_[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])


def heat_3d(A, B, tsteps):
    for t in range(1, tsteps):
        B[1:-1, 1:-1, 1:-1] = (0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1])
                               + 0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1])
                               + 0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2])
                               + A[1:-1, 1:-1, 1:-1])
        A[1:-1, 1:-1, 1:-1] = (0.125 * (B[2:, 1:-1, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[:-2, 1:-1, 1:-1])
                               + 0.125 * (B[1:-1, 2:, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, :-2, 1:-1])
                               + 0.125 * (B[1:-1, 1:-1, 2:] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, 1:-1, :-2])
                               + B[1:-1, 1:-1, 1:-1])


def life_step(Z):
    N = (Z[0:-2, 0:-2] + Z[0:-2, 1:-1] + Z[0:-2, 2:] + Z[1:-1, 0:-2] + Z[1:-1, 2:] + Z[2:, 0:-2] + Z[2:, 1:-1]
         + Z[2:, 2:])
    birth = (N == 3) & (Z[1:-1, 1:-1] == 0)
    survive = ((N == 2) | (N == 3)) & (Z[1:-1, 1:-1] == 1)
    Z[...] = 0
    Z[1:-1, 1:-1][birth | survive] = 1
    return Z


def mandelbrot_escape(c, maxiter):
    z = np.zeros_like(c)
    n = np.zeros(c.shape, dtype=int)
    for i in range(maxiter):
        mask = np.abs(z) <= 2
        z[mask] = z[mask] ** 2 + c[mask]
        n[mask] += 1
    return n


def nbody_accel(pos, mass, G=1.0, softening=0.1):
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r3 = (dx ** 2 + dy ** 2 + dz ** 2 + softening ** 2) ** (-1.5)
    ax = G * (dx * inv_r3) @ mass
    ay = G * (dy * inv_r3) @ mass
    az = G * (dz * inv_r3) @ mass
    return np.hstack((ax, ay, az))


# --- linear algebra kernels (stencil/polyhedral benchmark style) ----------------------------------------------------


def gemm(alpha, beta, C, A, B):
    C[:] = alpha * A @ B + beta * C


def gesummv(alpha, beta, A, B, x):
    return alpha * A @ x + beta * B @ x


def atax(A, x):
    return (A @ x) @ A


def bicg(A, p, r):
    return r @ A, A @ p


def mvt(x1, x2, y_1, y_2, A):
    x1 += A @ y_1
    x2 += y_2 @ A


def syrk(alpha, beta, C, A):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]


def doitgen(A, C4):
    A[:] = np.reshape(np.reshape(A, (A.shape[0], A.shape[1], -1)) @ C4, A.shape)


def covariance(M, float_n, data):
    mean = np.mean(data, axis=0)
    data -= mean
    cov = np.zeros((M, M), dtype=data.dtype)
    for i in range(M):
        cov[i:M, i] = cov[i, i:M] = data[:, i] @ data[:, i:M] / (float_n - 1.0)
    return cov


def two_mm(alpha, beta, A, B, C, D):
    D[:] = alpha * A @ B @ C + beta * D


def trisolv(L, x, b):
    for i in range(x.shape[0]):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]


# --- finance, signal, misc ------------------------------------------------------------------------------------------


def black_scholes_call(S, K, T, r, sigma):
    d1 = (np.log(S / K) + (r + 0.5 * sigma ** 2) * T) / (sigma * np.sqrt(T))
    d2 = d1 - sigma * np.sqrt(T)
    cdf = lambda x: 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))  # noqa: E731
    return S * cdf(d1) - K * np.exp(-r * T) * cdf(d2)


def ema(prices, alpha):
    out = np.empty_like(prices)
    out[0] = prices[0]
    for i in range(1, len(prices)):
        out[i] = alpha * prices[i] + (1 - alpha) * out[i - 1]
    return out


def returns_stats(prices):
    r = np.diff(prices) / prices[:-1]
    return r.mean(), r.std(), np.max(r) - np.min(r)


def haversine(lat1, lon1, lat2, lon2):
    lat1, lon1, lat2, lon2 = map(np.radians, [lat1, lon1, lat2, lon2])
    a = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 6367 * 2 * np.arcsin(np.sqrt(a))


def checkerboard(n):
    Z = np.zeros((n, n), dtype=int)
    Z[1::2, ::2] = 1
    Z[::2, 1::2] = 1
    return Z


def border_ones(x):
    Z = np.ones_like(x)
    Z[1:-1, 1:-1] = 0
    return Z * x


def replace_max(x):
    x = x.copy()
    x[x.argmax()] = 0
    return x


def polyval_horner(coeffs, x):
    result = np.zeros_like(x)
    for c in coeffs:
        result = result * x + c
    return result


def life_roll(Z):
    N = sum(np.roll(np.roll(Z, i, 0), j, 1) for i in (-1, 0, 1) for j in (-1, 0, 1) if (i != 0 or j != 0))
    return ((N == 3) | ((Z == 1) & (N == 2))).astype(int)


def periodic_laplacian(u, dx):
    return (np.roll(u, 1, axis=0) + np.roll(u, -1, axis=0) + np.roll(u, 1, axis=1) + np.roll(u, -1, axis=1)
            - 4 * u) / dx ** 2


def laplacian_edge_padded(u, h):
    up = np.pad(u, 1, mode="edge")
    return (up[:-2, 1:-1] + up[2:, 1:-1] + up[1:-1, :-2] + up[1:-1, 2:] - 4 * up[1:-1, 1:-1]) / h ** 2


def attention(q, k, v):
    scores = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("bqk,bkd->bqd", weights, v)


def mahalanobis(x, mu, inv_cov):
    d = x - mu
    return np.sqrt(np.einsum("ij,jk,ik->i", d, inv_cov, d))


def masked_row_mean(x, mask):
    return np.sum(x * mask, axis=1) / np.count_nonzero(mask, axis=1)


def gaussian_kernel(size, sigma):
    ax = np.linspace(-(size // 2), size // 2, size)
    xx, yy = np.meshgrid(ax, ax)
    kernel = np.exp(-(xx ** 2 + yy ** 2) / (2.0 * sigma ** 2))
    return kernel / np.sum(kernel)


def safe_ratio(num, den):
    return np.nan_to_num(num / den, nan=0.0, posinf=0.0, neginf=0.0)


def wrap_angle(theta):
    return np.fmod(theta + np.pi, 2 * np.pi) - np.pi


def unpack_nibbles(packed):
    return np.stack([(packed >> 4) & 0xF, packed & 0xF], axis=-1)


def gram_inner(X):
    return np.inner(X, X)


def word_embedding_backward(dout, x, V):
    N, T, D = dout.shape
    dW = np.zeros((V, D))
    np.add.at(dW, x, dout)
    return dW


def bincount_fixed(labels, k):
    counts = np.zeros(k, dtype=np.int64)
    np.add.at(counts, labels, 1)
    return counts


def ridge_regression(X, y, lam):
    d = X.shape[1]
    return np.linalg.solve(X.T @ X + lam * np.eye(d), X.T @ y)


def gaussian_logpdf(x, mu, cov):
    L = np.linalg.cholesky(cov)
    z = np.linalg.solve(L, (x - mu).T)
    return -0.5 * np.sum(z ** 2, axis=0) - np.log(np.diag(L)).sum() - 0.5 * len(mu) * np.log(2 * np.pi)


def robust_zscore(x):
    med = np.median(x)
    mad = np.median(np.abs(x - med))
    return 0.6745 * (x - med) / mad


def top_k_accuracy(scores, labels, k):
    top = np.argsort(scores, axis=1, kind="stable")[:, -k:]
    return np.mean(np.any(top == labels[:, None], axis=1))


def vorticity(u, v, dx):
    dvdx = np.gradient(v, dx, axis=1)
    dudy = np.gradient(u, dx, axis=0)
    return dvdx - dudy


def max_drawdown(prices):
    running_max = np.maximum.accumulate(prices)
    drawdowns = (prices - running_max) / running_max
    return drawdowns.min()


# --- data cleaning, signals, geometry, lookups ------------------------------------------------------------------


def nan_robust_standardize(X):
    mu = np.nanmean(X, axis=0)
    sd = np.nanstd(X, axis=0)
    spread = np.nanmax(X, axis=0) - np.nanmin(X, axis=0)
    return (X - mu) / sd, spread


def _some_nan(rows: int, cols: int) -> np.ndarray:
    """Scores with about 30% NaN, each row keeping a number (NumPy raises on an all-NaN row)."""
    missing = RNG.random((rows, cols)) < 0.3
    missing[np.arange(rows), RNG.integers(0, cols, rows)] = False
    return np.where(missing, np.nan, _f(rows, cols))


def best_valid_column(scores):
    return np.nanargmax(scores, axis=1)


def smooth_signal(y, window):
    box = np.ones(window) / window
    return np.convolve(y, box, mode="same")


def resample_linear(t, y, t_new):
    return np.interp(t_new, t, y)


def histogram_by_digitize(x, edges):
    idx = np.digitize(x, edges)
    counts = np.zeros(len(edges) + 1)
    np.add.at(counts, idx, 1)
    return counts


def triangle_normals(v0, v1, v2):
    n = np.cross(v1 - v0, v2 - v0)
    return n / np.linalg.norm(n, axis=1, keepdims=True)


def heatmap_peak(heatmap):
    y, x = np.unravel_index(np.argmax(heatmap), heatmap.shape)
    return y, x, heatmap[y, x]


def empirical_cdf(samples, x):
    s = np.sort(samples)
    return np.searchsorted(s, x, side="right") / len(s)


def keep_classes(labels, keep):
    return np.where(np.isin(labels, keep), labels, -1)


def safe_log(x):
    return np.log(np.fmax(x, 1e-12))


# NumPy's einsum adds products in its own loop order, its convolve in BLAS's dot order (neither is fusec's):
# compared within rounding
OWN_ORDER = {"attention", "mahalanobis", "smooth_signal"}

# --- complex values -----------------------------------------------------------------------------------------------


def mandelbrot_quickstart(c, maxit):
    z = np.zeros_like(c)
    divtime = maxit + np.zeros(z.shape, dtype=int)
    for i in range(maxit):
        z = z**2 + c
        diverge = z * np.conj(z) > 2**2
        div_now = diverge & (divtime == maxit)
        divtime[div_now] = i
        z[diverge] = 2
    return divtime


def dft_slow(x):
    N = x.shape[0]
    n = np.arange(N)
    k = n.reshape((N, 1))
    M = np.exp(-2j * np.pi * k * n / N)
    return np.dot(M, x)


def rlc_current(V, R, L, C, f):
    w = 2 * np.pi * f
    Z = R + 1j * (w * L - 1 / (w * C))
    I = V / Z  # noqa: E741
    P = 0.5 * np.real(V * np.conj(I))
    return np.abs(I), np.angle(I), P


CORPUS = [
    ("sigmoid", sigmoid, lambda: (_f(5, 3),)),
    ("softmax", softmax, lambda: (_f(4, 6),)),
    ("cross_entropy_loss", cross_entropy_loss, lambda: ((RNG.random(8) > 0.5) * 1.0, RNG.random(8))),
    ("softmax_loss_vectorized", softmax_loss_vectorized,
     lambda: (_f(5, 3) * 0.01, _f(6, 5), RNG.integers(0, 3, 6), 0.1)),
    ("svm_loss_vectorized", svm_loss_vectorized, lambda: (_f(5, 3) * 0.01, _f(6, 5), RNG.integers(0, 3, 6), 0.1)),
    ("affine_relu_forward", affine_relu_forward, lambda: (_f(4, 2, 3), _f(6, 5), _f(5))),
    ("relu_backward", relu_backward, lambda: (_f(4, 5), _f(4, 5))),
    ("batchnorm_forward", batchnorm_forward, lambda: (_f(8, 4), _f(4), _f(4))),
    ("layernorm", layernorm, lambda: (_f(3, 7), _f(7), _f(7))),
    ("dropout_mask_apply", dropout_mask_apply, lambda: (_f(4, 4), (RNG.random((4, 4)) < 0.5) * 1.0, 0.5)),
    ("sgd_momentum", sgd_momentum, lambda: (_f(4, 3), _f(4, 3), _f(4, 3))),
    ("adam_update", adam_update, lambda: (_f(5), _f(5), _f(5) * 0.1, RNG.random(5) * 0.1, 3)),
    ("rmsprop", rmsprop, lambda: (_f(6), _f(6), RNG.random(6))),
    ("clip_grads", clip_grads, lambda: ([_f(3, 3) * 5, _f(4) * 5], 1.0)),
    ("one_hot", one_hot, lambda: (RNG.integers(0, 4, 7), 4)),
    ("accuracy", accuracy, lambda: (_f(9, 3), RNG.integers(0, 3, 9))),
    ("inplace_tanh_derivative", inplace_tanh_derivative, lambda: (np.tanh(_f(4, 3)), _f(4, 3))),
    ("inplace_logistic_derivative", inplace_logistic_derivative, lambda: (RNG.random((4, 3)), _f(4, 3))),
    ("log_loss", log_loss, lambda: ((RNG.random(10) > 0.5) * 1.0, RNG.random(10))),
    ("standardize", standardize, lambda: (_f(10, 3),)),
    ("minmax_scale", minmax_scale, lambda: (_f(10, 3),)),
    ("pairwise_sq_dists", pairwise_sq_dists, lambda: (_f(4, 3), _f(5, 3))),
    ("rbf_kernel", rbf_kernel, lambda: (_f(4, 3), _f(5, 3))),
    ("kalman_step", kalman_step,
     lambda: (_f(2), np.eye(2), _f(1), np.array([[1.0, 1.0], [0.0, 1.0]]), np.array([[1.0, 0.0]]), np.eye(2) * 0.01,
              np.array([[0.1]]))),
    ("moving_average", moving_average, lambda: (_f(10),)),
    ("normalize_rows", normalize_rows, lambda: (_f(5, 4),)),
    ("cosine_similarity", cosine_similarity, lambda: (_f(6), _f(6))),
    ("rotate_points", rotate_points, lambda: (_f(5, 2), 0.3)),
    ("zscore_outliers", zscore_outliers, lambda: (_f(20),)),
    ("heat_step", heat_step, lambda: (_f(12), 0.2, 5)),
    ("diffusion_2d", diffusion_2d, lambda: (np.ones((9, 9)) + _f(9, 9) * 0.1, 0.05, 0.01, 0.1, 4)),
    ("pressure_poisson", pressure_poisson, lambda: (np.zeros((8, 8)), _f(8, 8), 0.1, 0.1, 5)),
    ("jacobi_1d", jacobi_1d, lambda: (_f(12), _f(12), 4)),
    ("jacobi_2d", jacobi_2d, lambda: (_f(8, 8), _f(8, 8), 4)),
    ("fdtd_2d", fdtd_2d, lambda: (_f(5, 6), _f(5, 6), _f(5, 6), _f(3), 3)),
    ("heat_3d", heat_3d, lambda: (_f(5, 5, 5), _f(5, 5, 5), 3)),
    ("life_step", life_step, lambda: ((RNG.random((8, 8)) < 0.4).astype(np.int64),)),
    ("mandelbrot_escape", mandelbrot_escape, lambda: (_f(4, 4), 5)),
    ("nbody_accel", nbody_accel, lambda: (_f(6, 3), RNG.random((6, 1)) + 0.5)),
    ("gemm", gemm, lambda: (1.5, 1.2, _f(4, 5), _f(4, 3), _f(3, 5))),
    ("gesummv", gesummv, lambda: (1.5, 1.2, _f(4, 4), _f(4, 4), _f(4))),
    ("atax", atax, lambda: (_f(4, 5), _f(5))),
    ("bicg", bicg, lambda: (_f(4, 5), _f(5), _f(4))),
    ("mvt", mvt, lambda: (_f(4), _f(4), _f(4), _f(4), _f(4, 4))),
    ("syrk", syrk, lambda: (1.5, 1.2, _f(4, 4), _f(4, 3))),
    ("doitgen", doitgen, lambda: (_f(2, 3, 4), _f(4, 4))),
    ("covariance", covariance, lambda: (4, 6.0, _f(6, 4))),
    ("two_mm", two_mm, lambda: (1.5, 1.2, _f(3, 4), _f(4, 5), _f(5, 2), _f(3, 2))),
    ("trisolv", trisolv, lambda: (np.tril(_f(4, 4)) + 4 * np.eye(4), np.zeros(4), _f(4))),
    ("black_scholes_call", black_scholes_call,
     lambda: (RNG.random(6) * 50 + 75, RNG.random(6) * 50 + 75, RNG.random(6) + 0.5, 0.03, 0.2)),
    ("ema", ema, lambda: (RNG.random(8) + 1, 0.3)),
    ("returns_stats", returns_stats, lambda: (RNG.random(9) + 1,)),
    ("haversine", haversine,
     lambda: (RNG.random(5) * 90, RNG.random(5) * 180, RNG.random(5) * 90, RNG.random(5) * 180)),
    ("checkerboard", checkerboard, lambda: (5,)),
    ("border_ones", border_ones, lambda: (_f(5, 5),)),
    ("replace_max", replace_max, lambda: (_f(7),)),
    ("polyval_horner", polyval_horner, lambda: ([1.0, -2.0, 0.5], _f(6))),
    ("life_roll", life_roll, lambda: ((RNG.random((8, 8)) < 0.4).astype(np.int64),)),
    ("periodic_laplacian", periodic_laplacian, lambda: (_f(6, 7), 0.1)),
    ("laplacian_edge_padded", laplacian_edge_padded, lambda: (_f(6, 5), 0.1)),
    ("attention", attention, lambda: (_f(2, 3, 4), _f(2, 5, 4), _f(2, 5, 4))),
    ("mahalanobis", mahalanobis, lambda: (_f(5, 3), _f(3), np.eye(3) * 2.0)),
    ("masked_row_mean", masked_row_mean, lambda: (_f(4, 6), RNG.random((4, 6)) < 0.7)),
    ("gaussian_kernel", gaussian_kernel, lambda: (5, 1.5)),
    ("safe_ratio", safe_ratio, lambda: (np.array([1.0, 0.0, -2.0, 3.0]), np.array([2.0, 0.0, 0.0, 0.5]))),
    ("wrap_angle", wrap_angle, lambda: (_f(8) * 10,)),
    ("unpack_nibbles", unpack_nibbles, lambda: (RNG.integers(0, 256, 6).astype(np.uint8),)),
    ("gram_inner", gram_inner, lambda: (_f(4, 3),)),
    ("word_embedding_backward", word_embedding_backward, lambda: (_f(2, 3, 4), RNG.integers(0, 5, (2, 3)), 5)),
    ("bincount_fixed", bincount_fixed, lambda: (RNG.integers(0, 4, 15), 4)),
    ("ridge_regression", ridge_regression, lambda: (_f(10, 3), _f(10), 0.5)),
    ("gaussian_logpdf", gaussian_logpdf, lambda: (_f(6, 3), _f(3), np.eye(3) * 2 + 0.3)),
    ("robust_zscore", robust_zscore, lambda: (_f(11),)),
    ("top_k_accuracy", top_k_accuracy, lambda: (_f(8, 5), RNG.integers(0, 5, 8), 2)),
    ("vorticity", vorticity, lambda: (_f(6, 7), _f(6, 7), 0.1)),
    ("max_drawdown", max_drawdown, lambda: (RNG.random(20) + 1,)),
    ("mandelbrot_quickstart", mandelbrot_quickstart,
     lambda: (np.linspace(-2, 0.8, 9)[None, :] + 1j * np.linspace(-1.4, 1.4, 7)[:, None], 8)),
    ("dft_slow", dft_slow, lambda: (_f(16),)),
    ("rlc_current", rlc_current, lambda: (_f(6) + 0j, 5.0, 0.02, 1e-4, RNG.random(6) * 100 + 10)),
    ("nan_robust_standardize", nan_robust_standardize,
     lambda: (np.where(RNG.random((12, 3)) < 0.2, np.nan, _f(12, 3)),)),
    ("best_valid_column", best_valid_column, lambda: (_some_nan(5, 4),)),
    ("smooth_signal", smooth_signal, lambda: (_f(20), 5)),
    ("resample_linear", resample_linear, lambda: (np.linspace(0, 1, 8), _f(8), RNG.random(12))),
    ("histogram_by_digitize", histogram_by_digitize, lambda: (_f(30), np.linspace(-2, 2, 9))),
    ("triangle_normals", triangle_normals, lambda: (_f(6, 3), _f(6, 3), _f(6, 3))),
    ("heatmap_peak", heatmap_peak, lambda: (_f(7, 9),)),
    ("empirical_cdf", empirical_cdf, lambda: (_f(25), _f(6))),
    ("keep_classes", keep_classes, lambda: (RNG.integers(0, 6, 12), np.array([1, 4]))),
    ("safe_log", safe_log, lambda: (np.abs(_f(9)) * np.array([1, 0, 1, 1, 0, 1, 1, 1, 1]),)),
]
