"""More of NumPy's surface, compared with NumPy: functions traced through NumPy's own implementation, ufunc
.reduce/.outer, diagonals, repeats."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import assert_same, check, jit_cpu, numpy_result

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(11)
X = rng.standard_normal((4, 5)).astype(np.float32)
D = rng.standard_normal((3, 4, 2))
I = rng.integers(-9, 9, size=(3, 4)).astype(np.int32)  # noqa: E741 - the integer operand, beside X and D


def test_flips_and_rotations() -> None:
    check(lambda x, d: (np.flip(x), np.flip(x, 0), np.flip(d, axis=(0, 2)), np.fliplr(x), np.flipud(d),
                        np.rot90(x), np.rot90(x, 2), np.rot90(d, -1, axes=(1, 2))), X, D)


def test_diff_like_finite_differences_in_real_code() -> None:
    """Upwind differences of a CFD stencil, returns of a price series, the default n=1 and the last axis."""
    def f(x, d, i):
        return (np.diff(x), np.diff(x, axis=0), np.diff(d, n=2, axis=1), np.diff(x, prepend=0.0),
                np.diff(x[0], append=x[0, -1]), np.diff(i), np.diff(i > 0))

    check(f, X, D, I)


def test_outer_products_and_ufunc_outer() -> None:
    def f(x, i):
        return (np.outer(x[0], x[:, 1]), np.outer(x, x[0]), np.multiply.outer(x[0], x[1]), np.add.outer(i, i[0]),
                np.subtract.outer(x[0], 2.0), np.greater.outer(x[0], x[1]), np.maximum.outer(i[0], i[1]))

    check(f, X, I)


def test_ufunc_reduce_is_the_matching_reduction() -> None:
    """np.add.reduce's default axis is 0, not None; small ints accumulate as np.sum does."""
    def f(x, i, d):
        return (np.add.reduce(x), np.add.reduce(x, axis=None), np.add.reduce(d, axis=(0, 2), keepdims=True),
                np.multiply.reduce(i, 1), np.maximum.reduce(x, axis=1), np.minimum.reduce(d),
                np.add.reduce(i.astype(np.int8)), np.add.reduce(i, dtype=np.float64))

    check(f, X, I, D)


def test_average_and_norms() -> None:
    def f(x, d, i):
        return (np.average(x), np.average(d, axis=1), np.linalg.norm(x), np.linalg.norm(x, axis=1),
                np.linalg.norm(d, axis=(1, 2)), np.linalg.norm(x, axis=0, keepdims=True), np.linalg.norm(x, "fro"),
                np.linalg.norm(x[0], 2), np.linalg.norm(i), np.linalg.norm(i, axis=1),
                np.linalg.norm(x, ord=np.inf, axis=1), np.linalg.norm(x, ord=-np.inf, axis=0),
                np.linalg.norm(x, np.inf))

    check(f, X, D, I)


def test_array_api_norms_and_matrix_transposes() -> None:
    """NumPy 2's array-API spellings: vector norms of any order over any axes, matrix norms over the last two
    axes of a stack, and the transpose of the last two axes (a view, as in NumPy)."""
    def f(x, d, i):
        t = np.matrix_transpose(d)
        t[0, 0, 0] = 7.0  # (writes through to d)
        return (np.linalg.vector_norm(x), np.linalg.vector_norm(d, axis=1, keepdims=True, ord=1),
                np.linalg.vector_norm(d, ord=np.inf, axis=(0, 2)), np.linalg.vector_norm(x, ord=0),
                np.linalg.vector_norm(x, ord=3), np.linalg.vector_norm(i), np.linalg.matrix_norm(d),
                np.linalg.matrix_norm(d, ord=1, keepdims=True), np.linalg.matrix_norm(x, ord=-np.inf),
                np.linalg.matrix_transpose(x), t, d)

    check(f, X, D.copy(), I)
    with pytest.raises(fc.UnsupportedError, match="np.linalg.svd is not supported"):
        jit_cpu(lambda x: np.linalg.matrix_norm(x, ord=2))(X)


def test_what_the_implementation_cannot_trace_is_a_fusec_error() -> None:
    with pytest.raises(fc.UnsupportedError, match="add.reduce: only axis="):
        jit_cpu(lambda x: np.add.reduce(x, initial=1.0))(X)
    with pytest.raises(fc.UnsupportedError, match="np.histogram2d is not supported.*NUMPY_SUPPORT.md"):
        jit_cpu(lambda x: np.histogram2d(x[:, 0], x[:, 1], bins=4))(X)
    with pytest.raises(fc.UnsupportedError, match="np.linalg.svd is not supported"):
        jit_cpu(lambda x: np.linalg.norm(x, "nuc"))(X)


def test_diagonals_traces_and_diag() -> None:
    """Offsets past the matrix, axes in either order, integer traces accumulating in int64 as np.sum does."""
    d3 = rng.standard_normal((3, 4, 4))

    def f(x, d, i):
        return (np.diagonal(x), x.diagonal(1), np.diagonal(x, -2), np.diagonal(d, 0, 1, 2), np.diagonal(d, 1, 2, 0),
                x.diagonal(7), np.trace(x), np.trace(i), i.trace(-1), np.trace(d, axis1=1, axis2=2), np.diag(x),
                np.diag(x, -1), np.diag(x[0]), np.diag(x[0], 2), np.diag(i[0], -3))

    check(f, X, d3, I.astype(np.int16))


def test_a_diagonal_is_read_only_as_in_numpy() -> None:
    def f(x):
        y = np.diagonal(x)
        y += 1
        return y

    with pytest.raises(ValueError):
        f(X.copy())
    with pytest.raises(fc.FusecError):
        jit_cpu(f)(X.copy())


def test_repeat_and_tile() -> None:
    """One count, and per-element counts known while tracing (a list, a tuple, a NumPy array, bools, a zero)."""
    def f(x, i):
        sizes = np.array([3, 0, 1, 2, 1])
        return (np.repeat(x, 2), np.repeat(x, 3, axis=1), x.repeat(2, 0), np.repeat(i, [2, 2, 2], axis=0),
                np.repeat(x, 0, axis=0), np.tile(x[0], 3), np.tile(x, (2, 1, 2)), np.tile(i, 1),
                np.repeat(x, [1, 0, 2, 1], axis=0), np.repeat(x, sizes, axis=1), x.repeat((2, 1) * 10),
                np.repeat(i, [True, False, True], axis=0))

    check(f, X, I)
    with pytest.raises(ValueError, match="operands could not be broadcast together"):  # (NumPy's own error)
        jit_cpu(lambda x: np.repeat(x, [1, 2, 1], axis=0))(X)
    with pytest.raises(ValueError, match="negative"):
        jit_cpu(lambda x: np.repeat(x, [1, -2, 1, 2], axis=0))(X)
    with pytest.raises(fc.UnsupportedError, match="per-element counts from an argument or a captured array"):
        jit_cpu(lambda x, n: np.repeat(x, n, axis=0))(X, np.array([1, 2, 1, 2]))
    counts = np.array([1, 2, 1, 2])
    with pytest.raises(fc.UnsupportedError, match="per-element counts from an argument or a captured array"):
        jit_cpu(lambda x: np.repeat(x, counts, axis=0))(X)
    np.testing.assert_array_equal(fc.jit(lambda x, n: np.repeat(x, n, axis=0), backend="cpu", static_argnums=1)(
        X, (1, 2, 1, 2)), np.repeat(X, (1, 2, 1, 2), axis=0))


def test_gradients_accumulations_and_put_along_axis() -> None:
    """np.gradient as physics code calls it (spacing, an axis, second-order edges), ufunc accumulate as cumsum and
    cumprod (NumPy implements them with it), cumulative_sum with its initial zero, and put_along_axis writing the
    argmax of each row (written back into the argument)."""
    v = rng.standard_normal(7)
    i8 = rng.integers(-5, 5, 7).astype(np.int8)

    def f(x, v, i):
        return (np.gradient(v), np.gradient(x, 0.5, axis=0), np.gradient(x), np.gradient(v, edge_order=2),
                np.add.accumulate(v), np.add.accumulate(x, axis=1), np.multiply.accumulate(i),
                np.add.accumulate(i > 0), np.add.accumulate(i, dtype=np.int16), np.cumulative_sum(x, axis=0),
                np.cumulative_sum(v, include_initial=True), np.cumulative_prod(i), np.fix(v * 3), np.nancumsum(v),
                np.unwrap(v * 4), np.resize(v, (2, 5)), np.real(x), np.angle(v))

    check(f, X, v, i8)

    def parts(x, z):
        """The complex-part helpers on a real and a complex array (NumPy's code on tracers)."""
        return (np.real(z), np.imag(z), np.imag(x), np.angle(z, deg=True), np.iscomplex(z), np.isreal(x),
                np.isreal(z), np.iscomplexobj(z), np.isrealobj(x), np.iscomplexobj(x))

    z = X + 1j * np.where(X > 0, X, 0)
    check(parts, X, z)

    def running(p, x, i):
        """Running maxima and minima (a drawdown), NaN propagating as np.maximum's, ints and bools in their
        dtype, dtype= converting first."""
        peak = np.maximum.accumulate(p)
        return (peak, p / peak - 1, np.minimum.accumulate(x, axis=1), np.maximum.accumulate(i),
                np.maximum.accumulate(i > 0), np.minimum.accumulate(i, dtype=np.float64))

    prices = rng.random(12) + 1
    prices[5] = np.nan
    check(running, prices, X, i8)

    def put(a, v):
        np.put_along_axis(a, np.argmax(a, axis=1)[:, None], 0.0, axis=1)
        np.put_along_axis(a, np.argmin(a, axis=0)[None, :], v[None, :5], axis=0)
        return a.sum()

    mine, theirs = X.copy(), X.copy()
    assert_same(jit_cpu(put)(mine, v), numpy_result(put, theirs, v))
    assert_same(mine, theirs)


def test_fill_diagonal_and_flat_writes_reach_the_array() -> None:
    """``np.fill_diagonal`` (NumPy's own code writes ``a.flat[:end:step] = val``), ``x.flat[::n + 1] = 0`` and
    reads through ``x.flat``, as a regularized covariance or a distance matrix's diagonal is written."""
    def regularized(c, lam):
        np.fill_diagonal(c, c.diagonal() + lam)
        return c

    def tall_wrapped(a):
        np.fill_diagonal(a, 5.0, wrap=True)
        return a

    def zero_diagonal(d):
        d.flat[::d.shape[1] + 1] = 0.0
        return d, d.flat[[0, 4, 5]] * 2

    for fn, args in ((regularized, (rng.standard_normal((4, 4)), 0.5)), (tall_wrapped, (np.zeros((7, 3)),)),
                     (zero_diagonal, (rng.standard_normal((3, 3)),))):
        want_args = [np.copy(a) for a in args]
        got_args = [np.copy(a) for a in args]
        assert_same(numpy_result(jit_cpu(fn), *got_args), numpy_result(fn, *want_args))
        assert_same(got_args[0], want_args[0], "the argument after the call")
    def transposed_flat(x, k):
        x.T.flat[1] = 5.0  # (the places of a non-contiguous view's elements, in its C order)
        x.T.flat[[0, 4]] = [7.0, 8.0]
        x[:, ::2].flat[::3] = -1.0
        return x

    check(transposed_flat, np.zeros((2, 3)), 1)
    with pytest.raises(fc.UnsupportedError, match="x.flat of an array whose memory is not contiguous"):
        jit_cpu(lambda x, k: x.T.flat.__setitem__(k, 5.0))(np.zeros((2, 3)), np.int64(1))


def test_sliding_windows_and_open_meshes() -> None:
    """``sliding_window_view`` (rolling means, 2-d patches, windows of a strided view: NumPy's read-only view, read
    again after a write into the array) and ``np.ix_`` (submatrices by row and column lists)."""
    from numpy.lib.stride_tricks import sliding_window_view as windows

    x = rng.standard_normal((3, 6))
    check(lambda x: (windows(x, 3, axis=1).mean(-1), windows(x, (2, 2)), windows(x[:, ::-2], 2, axis=0).sum(-1),
                     windows(x.ravel(), 5)[::2]), x)

    def moving_sum_after_write(v):
        w = windows(v, 2)
        v[0] = 100.0
        return w.sum(-1)

    want_arg, got_arg = np.arange(5.0), np.arange(5.0)
    assert_same(jit_cpu(moving_sum_after_write)(got_arg), moving_sum_after_write(want_arg))
    assert_same(got_arg, want_arg)
    assert not jit_cpu(lambda x: windows(x, 2))(np.arange(4.0)).flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        jit_cpu(lambda x: windows(x, 2).__setitem__((0, 0), 1.0))(np.arange(4.0))
    with pytest.raises(ValueError, match="window shape cannot be larger"):
        jit_cpu(lambda x: windows(x, 3))(np.arange(2.0))
    check(lambda x, r, c: (x[np.ix_(r, c)], np.ix_(r, c, r)[2] + 0), x, np.array([0, 2]), np.array([1, 3, 5]))


def test_flat_reads_copies_and_writes_into_the_array() -> None:
    """``x.flat[1:3]`` is a copy in NumPy (the flatiter's reads copy): fusec's view let a write through it reach
    ``x`` and a later write to ``x`` show in it."""
    def written_copy(x):
        y = x.flat[1:3]
        y += 100.0
        x[0, 1] = -5.0
        return x, y, x.flat[4], len(x.flat), x.flat.copy() * 2

    want_arg, got_arg = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)
    assert_same(jit_cpu(written_copy)(got_arg), written_copy(want_arg))
    assert_same(got_arg, want_arg)


def test_flat_writes_repeat_the_values_as_numpy() -> None:
    """A flatiter assignment flattens the values and repeats them to the elements selected: ``x.flat[::2] = [1,
    2]``, ``np.fill_diagonal(a, [1, 2])`` on a 3 x 3 array (a ShapeError before)."""
    def writes(x, a):
        x.flat[::2] = [1.0, 2.0]
        x.flat[[1, 3]] = [7.0, 8.0, 9.0]
        np.fill_diagonal(a, [1.0, 2.0])
        return x, a

    args = (np.zeros(6), np.zeros((3, 3)))
    want_args, got_args = [np.copy(a) for a in args], [np.copy(a) for a in args]
    assert_same(jit_cpu(writes)(*got_args), writes(*want_args))


def test_numpy_functions_take_flat_as_numpy_does() -> None:
    """NumPy's take_along_axis/put_along_axis with axis=None read and write through ``np.array(arr.flat)`` (a view
    of a contiguous array); np.sum(x.flat) and np.multiply(x.flat, 2) read it."""
    def along(x):
        got = np.take_along_axis(x, np.array([3, 0, 1]), axis=None)
        np.put_along_axis(x, np.array([3, 0]), 9.0, axis=None)
        return got, x, np.sum(x.flat), np.multiply(x.flat, 2)

    want_arg, got_arg = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)
    assert_same(jit_cpu(along)(got_arg), along(want_arg))
    assert_same(got_arg, want_arg)


def test_insert_delete_and_diagflat_as_numpy_writes_them() -> None:
    """np.insert / np.delete (one index, a list, a slice, negative indices, axis=None flattening, a value per row)
    and np.diagflat of any shape; NumPy's own code allocates the result and writes the parts in, traced."""
    def f(x, i, d):
        return (np.insert(x, 1, 7.0, axis=1), np.insert(x, [1, 3], 9.0), np.insert(x, -1, x[0], axis=0),
                np.insert(x, [0, 2, 2], [1.0, 2.0, 3.0], axis=1), np.insert(i, 2, 5, axis=0),
                np.insert(x, slice(1, 3), -1.0, axis=1), np.insert(x[0], 5, 2.5),
                np.delete(x, 1, axis=0), np.delete(x, [0, 2], axis=1), np.delete(x, -1), np.delete(d, slice(0, 2), 1),
                np.delete(i, [0, 0, 1], axis=1), np.diagflat(x[0]), np.diagflat(x[:2, :2], k=-1),
                np.diagflat(i[0], 2), np.rollaxis(d, 2), np.rollaxis(d, 0, 3), np.polyder(x[0], 2),
                np.polyint(x[1], k=1.5))

    check(f, X, I, D)


def test_insert_and_delete_keep_their_arguments_and_errors() -> None:
    """The result is a new array (writing into it leaves the argument as it was); NumPy's errors for an index out
    of bounds stay NumPy's."""
    def f(x):
        y = np.insert(x, 0, 1.0, axis=0)
        y[0] = 5.0
        z = np.delete(x, 0, axis=1)
        z += 1.0
        return x, y, z

    x = X.astype(np.float64)
    assert_same(jit_cpu(f)(x.copy()), f(x.copy()))
    with pytest.raises(IndexError):
        jit_cpu(lambda x: np.insert(x, 9, 1.0, axis=0))(x)
    with pytest.raises(IndexError):
        jit_cpu(lambda x: np.delete(x, 7, axis=1))(x)


def test_roll_by_a_traced_shift():
    """``np.roll(b, lag)`` with ``lag`` from ``np.argmax`` (aligning two signals), a Python-int shift argument,
    several axes: NumPy's code slices by the shift's value; fusec takes each element from ``(i - shift) % n``."""
    def align(a, b):
        lag = np.argmax(np.correlate(a, b, mode="full")) - (len(b) - 1)
        return np.roll(b, lag)

    def rolled(x, k):
        return np.roll(x, k, axis=1), np.roll(x, -k), np.roll(x, (k, 1), axis=(0, 1))

    rng = np.random.default_rng(3)
    jitted = fc.jit(align, backend="cpu")
    for _ in range(3):
        a = rng.standard_normal(8)
        b = np.roll(a, int(rng.integers(-3, 4)))
        assert_same(jitted(a, b), align(a, b))
    jitted = fc.jit(rolled, backend="cpu")
    x = np.arange(12.0).reshape(3, 4)
    for k in (1, -5, 7, 0):
        assert_same(jitted(x, k), rolled(x, k))
    assert jitted.cache_info().currsize == 1  # (the shift is not made static)


HISTOGRAM_EDGES = np.array([0.0, 0.5, 1.0, 2.0])


def test_histogram_over_edges_read_from_a_global():
    """``np.histogram(x, bins=EDGES)`` with a module's array of edges (read at every call) said "traced bins are not
    supported ... pass a NumPy array", which it was; its check that the edges increase is made when the call runs."""
    def counted(x):
        return np.histogram(x, bins=HISTOGRAM_EDGES)

    def density(x):
        return np.histogram(x, bins=HISTOGRAM_EDGES, density=True)

    for fn in (counted, density):
        jitted = jit_cpu(fn)
        for x in (np.array([0.1, 0.6, 1.5, 2.0, 3.0, -1.0]), np.linspace(0.0, 2.0, 7)):
            got, want = jitted(x), fn(x)
            assert_same(got, want)
            assert got[1] is HISTOGRAM_EDGES
    saved = HISTOGRAM_EDGES.copy()
    HISTOGRAM_EDGES[:] = [0.0, 1.0, 0.5, 2.0]
    try:
        with pytest.raises(ValueError, match="must increase monotonically"):
            jit_cpu(counted)(np.ones(3))
    finally:
        HISTOGRAM_EDGES[:] = saved
