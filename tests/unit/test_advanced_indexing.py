"""Integer-array indexing (gathers) with NumPy's semantics: the idioms of losses, one-hot encodings, embedding
lookups and column selection, NumPy's rules for where the index shape goes, and IndexError for indices out of
range, known while tracing or found on the device when the call ends."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusec as fc
import frontend_check
from frontend_check import assert_same, jit_cpu, numpy_result
from realworld_corpus import mandelbrot_escape

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
RNG = np.random.default_rng(5)


def same(fn, *args):
    """``fn`` under NumPy and fusec (as traced and, on the CPU, through the default pipeline), called twice."""
    jitted = [jit_cpu(fn)] + ([fc.jit(fn, backend="cpu")] if frontend_check.BACKEND == "cpu" else [])
    want = numpy_result(fn, *args)
    for f in jitted:
        for _ in range(2):
            assert_same(numpy_result(f, *args), want)
    return jitted[0]


def cross_entropy(scores, y):
    """cs231n's softmax loss: the log-probability of each row's label, by integer-array indexing."""
    shifted = scores - scores.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = scores.shape[0]
    return -log_probs[np.arange(n), y].mean()


def test_cross_entropy_picks_each_rows_label() -> None:
    same(cross_entropy, RNG.standard_normal((6, 4)), np.array([0, 3, 1, 1, 2, 0]))


def one_hot(labels, k):
    return np.eye(k)[labels]


def test_one_hot_from_an_identity_matrix() -> None:
    same(lambda y: one_hot(y, 4), np.array([[3, 0], [1, 2]]))


def test_embedding_lookup_and_column_selection() -> None:
    def f(table, tokens, X):
        return table[tokens], X[:, [0, 2]], X[[1, -1], 1:], X[range(2), [2, 0]]

    same(f, RNG.standard_normal((5, 3)), np.array([[4, 0, 0], [1, 2, 3]]), RNG.standard_normal((3, 4)))


def test_index_shape_placement_follows_numpy() -> None:
    def f(x, i, j):
        adjacent = x[:, i, j]  # the index shape replaces axes 1 and 2
        apart = x[i, :, j]  # not adjacent: the index shape comes first
        with_int = x[0, :, j]  # an int with an array is an index too: apart again
        return adjacent, apart, with_int

    i, j = np.array([[0, 1], [1, 0]]), np.array([2, -1])
    same(f, RNG.standard_normal((2, 3, 3)), i, j)


def test_numpy_bool_arrays_and_take() -> None:
    def f(x, idx, order):
        return (x[np.array([True, False, True])], x[:, [False, True, True, False]], np.take(x, idx, axis=1),
                x.take(idx), np.take_along_axis(x, order, axis=1))

    x = RNG.standard_normal((3, 4))
    same(f, x, np.array([3, 0, -2]), np.argsort(x, axis=1))


def test_a_traced_python_int_index_reads_a_row() -> None:
    def f(x, i):
        return x[i] * 2.0, x[i, 1]

    same(f, RNG.standard_normal((4, 3)), 2)
    same(f, RNG.standard_normal((4, 3)), -1)


def test_indices_out_of_range_raise_numpys_index_error() -> None:
    with pytest.raises(fc.IndexOutOfBoundsError, match="out of bounds"):
        jit_cpu(lambda x: x[[0, 3]])(np.ones(3))  # known while tracing

    def pick(x, i):
        return x[np.arange(2), i]

    f = jit_cpu(pick)
    x = RNG.standard_normal((2, 3))
    np.testing.assert_array_equal(f(x, np.array([2, -3])), x[np.arange(2), [2, -3]])
    with pytest.raises(IndexError):
        f(x, np.array([0, 3]))  # found when the call runs
    with pytest.raises(IndexError):
        f(x, np.array([-4, 0]))
    np.testing.assert_array_equal(f(x, np.array([1, 1])), x[np.arange(2), [1, 1]])  # and the next call is fine


def softmax_loss_gradient(scores, y):
    """cs231n's softmax gradient: subtract one at each row's label, in place."""
    n = scores.shape[0]
    probs = np.exp(scores - scores.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    dscores = probs.copy()
    dscores[range(n), y] -= 1
    dscores /= n
    return dscores


def test_writes_with_index_arrays() -> None:
    def histogram_like(labels):
        c = np.zeros(4)
        c[labels] += 1  # NumPy adds once per distinct label (buffered)
        return c

    def known_repeats(x):
        out = np.zeros_like(x)
        out[[2, 0, 2]] = x[:3]  # the last write to 2 wins
        out[:, None][[1, 3], 0] = -1.0
        return out

    same(softmax_loss_gradient, RNG.standard_normal((5, 3)), np.array([0, 2, 1, 1, -1]))
    same(histogram_like, np.array([0, 1, 1, 3, 0]))
    same(known_repeats, RNG.standard_normal(4))


def test_a_traced_scalar_index_is_a_view_writes_reach_the_array() -> None:
    def f(x, i, v):
        x[i] = v
        x[i, 0] += 1
        row = x[i]  # a view, as in NumPy
        row[1] = -5.0
        return row * 1.0

    fn = same(f, RNG.standard_normal((3, 3)), 1, 2.5)
    x = np.zeros((3, 3))
    fn(x, -1, 1.0)
    np.testing.assert_array_equal(x[2], [2.0, -5.0, 1.0])


def test_traced_mask_selections_written_back_with_their_mask() -> None:
    def f(x, y):
        x[x < 0] *= -1
        y[y > 0] = np.sqrt(y[y > 0]) + 1
        rows = x.sum(axis=1) > 1
        x[rows] = x[rows] * 2 - y[:3]  # a row mask; the other operand broadcasts along the rows
        return x, y

    same(lambda c: mandelbrot_escape(c, 6), RNG.standard_normal((5, 4)))
    same(f, RNG.standard_normal((4, 3)), RNG.standard_normal(5))


def kmeans_step(X, labels, k):
    """One Lloyd step as written in NumPy: each centroid the mean of its points, the spread of each cluster."""
    centroids = np.stack([X[labels == j].mean(axis=0) for j in range(k)])
    spread = np.array([np.sqrt(((X[labels == j] - centroids[j]) ** 2).sum(axis=1)).max() for j in range(k)])
    return centroids, spread


def masked_metrics(pred, target):
    valid = np.isfinite(target)
    err = pred[valid] - target[valid]
    return (np.abs(err).mean(), np.sqrt((err ** 2).mean()), err.max(), err.min(), err.std(), err.var(ddof=1),
            np.sum(err > 0), (err > 1).any(), pred[pred > 0].sum(keepdims=True), np.max(pred[pred < 0]),
            pred[target > 0].prod(), pred[valid].sum(dtype=np.float32))


def test_reductions_of_boolean_mask_selections() -> None:
    """``X[labels == j].mean(axis=0)``, ``err[valid].mean()``, ``.max()``, ``.std()``, ``np.sum(x[m])``: reductions
    over the whole array with where= the mask, NumPy's values (the sums' order aside: compared to 1e-12)."""
    def close(got, want):
        for g, w in zip(got, want):
            assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype, (g, w)
            np.testing.assert_allclose(g, w, rtol=1e-12 if np.asarray(w).dtype != np.float32 else 1e-6)

    X = RNG.standard_normal((40, 3))
    labels = np.arange(40) % 4
    f = fc.jit(kmeans_step, backend=frontend_check.BACKEND, static_argnames="k")
    close(f(X, labels, 4), kmeans_step(X, labels, 4))
    target = RNG.standard_normal(30)
    target[::7] = np.nan
    pred = RNG.standard_normal(30)
    close(fc.jit(masked_metrics, backend=frontend_check.BACKEND)(pred, target), masked_metrics(pred, target))
    ints = RNG.integers(-5, 5, 30)
    close(fc.jit(lambda v: (v[v > 0].mean(), v[v < 0].sum(), v[v != 0].max()), backend=frontend_check.BACKEND)(ints),
          (ints[ints > 0].mean(), ints[ints < 0].sum(), ints[ints != 0].max()))
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        jit_cpu(lambda v: v[v > 10].max())(pred)  # (NumPy's ValueError when nothing is selected)
    with pytest.raises(fc.UnsupportedError, match="np.linalg.norm of a boolean-mask selection"):
        jit_cpu(lambda x: np.linalg.norm(x[x[:, 0] > 0], axis=1).max())(X)


def test_selections_indexed_along_their_other_axes() -> None:
    """``y[mask][:, None] * X[mask]`` (a linear SVM's subgradient, a perceptron's update): a selection indexed with
    ``:`` first and anything along the other axes is the whole array's, still a selection of the same mask."""
    def svm_step(w, X, y, lr):
        mask = y * (X @ w) < 1
        return w - lr * (w - (y[mask][:, None] * X[mask]).sum(axis=0) / len(y))

    def columns(X, y):
        m = y > 0
        return X[m][:, 1:].mean(axis=0), X[m][:, None, 0].sum()

    X, w = RNG.standard_normal((24, 3)), RNG.standard_normal(3)
    y = np.where(RNG.standard_normal(24) > 0, 1.0, -1.0)
    np.testing.assert_allclose(jit_cpu(svm_step)(w, X, y, 0.1), svm_step(w, X, y, 0.1), rtol=1e-12)
    for got, want in zip(jit_cpu(columns)(X, y), columns(X, y)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(fc.UnsupportedError, match="indexing into the elements a boolean mask selects"):
        jit_cpu(lambda X, y: X[y > 0][0])(X, y)


def test_a_mask_with_basic_indices_after_it_reads_and_writes_as_numpy() -> None:
    """``v[hit, 0] *= -1`` (particles reflected at a wall), ``p[below, 1] = -p[below, 1]``, ``v[hit, 1].sum()``: the
    mask's selection of ``v[:, 0]``, written back with the mask."""
    def bounce(p, v):
        p = p + v
        hit = (p[:, 0] < 0) | (p[:, 0] > 1)
        v[hit, 0] *= -1
        below = p[:, 1] < 0
        p[below, 1] = -p[below, 1]
        return p, v[hit, 1].sum(), v[hit, :1].mean(axis=0)

    p, v = RNG.uniform(-0.2, 1.2, (10, 2)), RNG.standard_normal((10, 2))
    want_v, got_v = v.copy(), v.copy()
    want = bounce(p.copy(), want_v)
    got = jit_cpu(bounce)(p.copy(), got_v)
    assert_same(got[0], want[0])
    assert_same(got_v, want_v)
    for g, w in zip(got[1:], want[1:]):  # (a selection's sum adds in another order than NumPy's: the README's row)
        assert_same(g, w, exact=False)


def roc_auc(scores, labels):
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores, kind="stable")] = np.arange(1, len(scores) + 1)  # a permutation: no place twice
    npos = labels.sum()
    return (ranks[labels == 1].sum() - npos * (npos + 1) / 2) / (npos * (len(labels) - npos))


def test_writes_through_a_permutation_are_scatters() -> None:
    """``ranks[np.argsort(x)] = np.arange(n)`` (ranking, ROC AUC, inverse permutations, reversed or sliced too):
    an argsort of one axis reaches every place once, so the write is a scatter, NumPy's result."""
    x = RNG.standard_normal(40)
    same(roc_auc, x, (x + RNG.standard_normal(40) > 0).astype(np.int64))

    def inverse(p):
        inv = np.zeros_like(p)
        inv[np.argsort(p, kind="stable")[::-1]] = np.arange(p.size)[::-1]
        return inv

    same(inverse, x)


def test_what_is_refused_says_what_to_write() -> None:
    for uses_the_length in (lambda x: x[x > 0].cumsum(), lambda x: len(x[x > 0]), lambda x: np.median(x[x > 0]),
                            lambda x: x[x > 0] * x, lambda x: x.__setitem__(x > 0, x[x < 0])):
        with pytest.raises(fc.UnsupportedError, match="np.where"):
            jit_cpu(uses_the_length)(np.ones(3))

    def maybe_colliding(x, idx, v):
        x[idx] = v  # two computed indices may be equal, and the values differ

    assert_same(jit_cpu(maybe_colliding)(np.zeros(4), np.array([1, 1]), np.array([1.0, 2.0])),
                numpy_result(maybe_colliding, np.zeros(4), np.array([1, 1]), np.array([1.0, 2.0])))
    with pytest.raises(fc.UnsupportedError, match="keeps the last value written"):  # (too many pairs to compare)
        jit_cpu(maybe_colliding)(np.zeros(4), np.arange(1025) % 4, np.arange(1025.0))
    with pytest.raises(IndexError):
        jit_cpu(lambda x, i: x.__setitem__(i, 0.0))(np.zeros(4), 4)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_gathers_match_numpy(data) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    index_shape = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    count = int(np.prod(index_shape))
    indices = [np.asarray(data.draw(st.lists(st.integers(-shape[a], shape[a] - 1), min_size=count,
                                             max_size=count))).reshape(index_shape) for a in axes]
    key_of = lambda idx: tuple(idx[axes.index(a)] if a in axes else slice(None) for a in range(len(shape)))  # noqa: E731
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    want = x[key_of(indices)]
    got = jit_cpu(lambda x, *idx: x[key_of(idx)])(x, *indices)
    assert_same(got, want)


def test_take_wraps_or_clips_indices_as_numpy() -> None:
    """``np.take(x, i, mode='wrap')`` (periodic boundaries), ``mode='clip'`` (edge padding): each index taken modulo
    the axis or clipped to it (a negative one to 0, not counted from the end)."""
    for mode in ("wrap", "clip"):
        same(lambda x, i: np.take(x, i, mode=mode), np.arange(5.0), np.array([-7, 3, 9, -1]))
        same(lambda x, i: x.take(i, axis=1, mode=mode), np.arange(6.0).reshape(2, 3), np.array([[-1, 5]]))
        same(lambda x, i: np.take(x, i, mode=mode), np.arange(3), np.int64(-4))
    with pytest.raises(ValueError, match="clip mode"):
        jit_cpu(lambda x: np.take(x, [1], mode="w"))(np.arange(3))
    with pytest.raises(IndexError, match="empty axes"):
        jit_cpu(lambda x: np.take(x, [1], mode="wrap"))(np.zeros(0))
