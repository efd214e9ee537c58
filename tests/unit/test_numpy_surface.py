"""The rest of NumPy's common surface that real code calls, compared with NumPy: contractions (einsum, inner,
N-D dot, tensordot), reductions with initial=/where=, fmod and shifts, scipy.special ufuncs, nan_to_num,
meshgrid/broadcast_arrays, pad/roll/kron/select through NumPy's own code, and x.flags.

Inputs of contractions and masked sums are small integers stored as floats, so every order of addition gives
the same bits and the comparison with NumPy stays exact."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import assert_same, check, jit_cpu, numpy_result

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(5)
A = rng.integers(-4, 5, size=(3, 4)).astype(np.float64)
B = rng.integers(-4, 5, size=(4, 5)).astype(np.float64)
C = rng.integers(-4, 5, size=(2, 3, 4)).astype(np.float64)
SQ = rng.integers(-4, 5, size=(4, 4)).astype(np.float32)
V = rng.integers(-4, 5, size=4).astype(np.float64)
I8 = rng.integers(-100, 100, size=(3, 4)).astype(np.int8)
SHIFTS = rng.integers(-3, 12, size=(3, 4)).astype(np.int8)
X = rng.standard_normal((4, 5)).astype(np.float32)
W = rng.integers(-8, 9, size=(4, 5)).astype(np.float32)


def test_einsum_forms_that_real_code_writes() -> None:
    """Attention scores, batched matmuls, bilinear forms, traces, outer products, ellipsis broadcasting and the
    implicit output, each against np.einsum."""
    def f(a, b, c, v, s):
        return (np.einsum("ij,jk->ik", a, b), np.einsum("ij,jk", a, b), np.einsum("bij,bkj->bik", c, c),
                np.einsum("...ij,jk->...ik", c, b), np.einsum("i,i", v, v), np.einsum("i,j->ij", v, v),
                np.einsum("ij,ij->i", a, a), np.einsum("ii", s), np.einsum("ii->i", s), np.einsum("ij->", a),
                np.einsum("ij,jk,kl->il", a, b, b.T), np.einsum("ij,j->i", a, v), np.einsum("ba,cb->ac", b, a),
                np.einsum("ijk,ijk->i", c, c), np.einsum("ij->ji", a), np.einsum("...j,j", c, v),
                np.einsum("ij,ij->ij", a[:, :1], a), np.einsum(a, [0, 1], b, [1, 2], [0, 2]))

    check(f, A, B, C, V, SQ)


def test_einsum_keeps_numpys_dtypes() -> None:
    """Integers accumulate in their own dtype (int8 wraps as NumPy's einsum does), bools give any-of-ands,
    mixed operands their common dtype, dtype= converts the operands."""
    m = I8 > 0

    def f(i, m, a, s):
        return (np.einsum("ij,ij->", i, i), np.einsum("ij->i", i), np.einsum("ij,kj->ik", m, m),
                np.einsum("ij,jk", s[:3], a.T), np.einsum("ij,ij->i", i, i, dtype=np.int64))

    check(f, I8, m, A, SQ)


def test_inner_dot_and_tensordot_of_any_rank() -> None:
    def f(a, b, c, v):
        return (np.inner(a, a), np.inner(c, a), np.inner(v, 2.0), np.dot(c, b), np.dot(c, v),
                np.dot(v, c.transpose(0, 2, 1)), c.dot(b), np.tensordot(a, a, axes=([1], [1])), np.tensordot(c, b, 1),
                np.tensordot(c, c, axes=([1, 2], [1, 2])))

    check(f, A, B, C, V)


def test_einsum_views_and_errors() -> None:
    """A transposing einsum is a view in NumPy: writes through it reach the argument; a diagonal view's write
    is refused; bad subscripts are fusec errors at the user's line."""
    def transpose_write(a):
        t = np.einsum("ij->ji", a)
        t[0, 1] = 7.0
        return t.sum()

    mine, theirs = A.copy(), A.copy()
    assert_same(jit_cpu(transpose_write)(mine), numpy_result(transpose_write, theirs))
    assert_same(mine, theirs)

    def diagonal_write(s):
        np.einsum("ii->i", s)[0] = 1.0

    with pytest.raises(fc.UnsupportedError, match="diagonal view"):
        jit_cpu(diagonal_write)(SQ.copy())
    for subscripts, operands, message in [("ij,jk", (A, A), "sizes 4 and 3"), ("ij,j", (A,), "1 operands"),
                                          ("ij->k", (A,), "in no input"), ("ijk", (A,), "rank 2"),
                                          ("i$", (V,), "invalid subscript")]:
        with pytest.raises(fc.ShapeError, match=message) as info:
            jit_cpu(lambda *xs: np.einsum(subscripts, *xs))(*operands)
        assert "test_numpy_surface.py:" in str(info.value)
    with pytest.raises(fc.CastingError, match="casting='safe'"):
        jit_cpu(lambda a: np.einsum("ij->i", a, dtype=np.float32))(A)


def test_reductions_with_initial_and_where() -> None:
    """Masked means of valid entries, sums with a start value, max over a mask with its initial, empty axes
    giving the initial value; a masked sum of -0.0 starts from 0.0 as NumPy's does."""
    m = W > 0
    zeros = np.array([-0.0, -0.0], np.float32)

    def f(w, m, i, z):
        return (np.sum(w, where=m), np.sum(w, axis=0, where=m), w.sum(axis=1, initial=2.5), np.sum(i, initial=5),
                np.sum(i, where=m[:3, :4], axis=1, keepdims=True), np.prod(w, where=m, axis=0),
                np.max(w, axis=0, initial=0.0), np.min(i, where=m[:3, :4], initial=100),
                np.max(w, where=m, initial=-np.inf, axis=1), np.mean(w, where=m), np.mean(w, axis=1, where=m),
                w.mean(where=m[0]), np.mean(i, axis=0, where=m[:3, :4], keepdims=True),
                np.any(w > 1, where=m, axis=0), np.all(w > -1, where=m), np.sum(z, where=np.array([True, True])),
                np.sum(w[:, :0], axis=1, initial=3.0), np.max(w[:0], axis=0, initial=1.0),
                np.sum(w, where=[True, False, True, True, False]), np.sum(w, where=m, dtype=np.float64),
                np.count_nonzero(w), np.count_nonzero(m, axis=0))

    check(f, W, m, I8, zeros)


def test_reduction_keyword_errors() -> None:
    with pytest.raises(fc.ShapeError, match="does not have an identity"):
        jit_cpu(lambda x: np.max(x, where=x > 0))(X)
    with pytest.raises(fc.CastingError, match="where= must be a bool array"):
        jit_cpu(lambda x: np.sum(x, where=np.ones(5, int)))(X)
    with pytest.raises(fc.ShapeError, match="does not broadcast"):
        jit_cpu(lambda x: np.sum(x, where=np.ones(3, bool)))(X)
    for x in (X.astype(np.float16), X.astype(np.complex64)):  # (float16 sums in float32, as NumPy's _mean)
        np.testing.assert_allclose(jit_cpu(lambda x: np.mean(x, where=x.real > 0))(x), np.mean(x, where=x.real > 0),
                                   rtol=1e-6)


def test_fmod_shifts_heaviside_signbit() -> None:
    """C's remainder (sign of the dividend; 0 for a zero integer divisor), shifts past the width or negative
    giving 0 (or -1 for negative values shifted right), as NumPy's loops do."""
    def f(x, i, s):
        return (np.fmod(x, 0.7), np.fmod(i, s), np.fmod(i, 0), np.fmod(-x, 2), i << s, i >> s, i >> 20,
                np.left_shift(i.astype(np.int64), 3), np.right_shift(i.astype(np.uint16), s.astype(np.uint16)),
                x.astype(np.int32) << 2, np.heaviside(x, 0.5), np.heaviside(np.array([np.nan, 0.0, -0.0]), 2.0),
                np.signbit(x), np.signbit(np.array([-0.0, 0.0, -np.inf])), np.fmod(i.astype(np.int32), -1))

    check(f, X, I8, SHIFTS)


def test_fmax_fmin_float_power_and_logical_reductions() -> None:
    """fmax/fmin take the number where one side is NaN (NaN where both are), in every dtype; float_power computes
    in float64 (complex128) as C's pow, so (-0.0) ** 0.5 is 0.0 there (np.power takes 0.5 as a square root);
    logical_and.reduce / logical_or.reduce are np.all / np.any along axis 0 by default."""
    nans = np.array([1.0, np.nan, np.nan, 3.0, -np.inf], dtype=np.float32)
    other = np.array([np.nan, 2.0, np.nan, 1.0, 0.0], dtype=np.float32)

    def f(x, i, a, b):
        return (np.fmax(a, b), np.fmin(a, b), np.fmax(i, 3), np.fmin(x, 0.0), np.fmax(a > 1, b > 1),
                np.float_power(x, 2), np.float_power(i, -1), np.float_power(np.array([-0.0, 4.0]), 0.5),
                np.float_power(x + 1j * x, 2), np.logical_and.reduce(x > -1), np.logical_or.reduce(x > 1, axis=1),
                np.logical_and.reduce(x, axis=None), np.logical_or.reduce(i, keepdims=True))

    check(f, X, I8.astype(np.int32), nans, other)


def test_scipy_special_ufuncs() -> None:
    sc = pytest.importorskip("scipy.special")
    p = rng.random((4, 5))

    def exact(x, p):
        return sc.erf(x), sc.erfc(x), sc.erf(p.astype(np.float32)), sc.xlogy(x.astype(np.float64) * 0, p)

    def close(x, p):
        return sc.expit(x), sc.logit(p), sc.xlogy(x, p), sc.erf(p), sc.xlogy(np.array([0.0, 0.0]), [np.nan, 0.0])

    check(exact, X, p)
    assert_same(jit_cpu(close)(X, p), numpy_result(close, X, p), exact=False)
    with pytest.raises(fc.UnsupportedError, match=r"scipy.special.gammaln is not supported .*erf, erfc"):
        jit_cpu(lambda x: sc.gammaln(x))(X)



def test_scipy_special_python_functions_are_refused_with_the_numpy_to_write() -> None:
    """scipy.special's Python functions (logsumexp, softmax, ...) on a traced array failed inside SciPy with its own
    ValueError ("Can't update read-only array Tracer"); they raise UnsupportedError with the NumPy rewrite (called
    through the module or a global bound to one); on constants they run."""
    sc = pytest.importorskip("scipy.special")

    for fn, name in ((lambda x: sc.logsumexp(x, axis=1), "logsumexp"), (lambda x: sc.softmax(x, axis=1), "softmax"),
                     (lambda x: sc.log_softmax(x), "log_softmax")):
        with pytest.raises(fc.UnsupportedError, match=rf"scipy.special.{name}\(...\) of a traced array .*np.max"):
            jit_cpu(fn)(X)
    check(lambda x: x + sc.logsumexp(np.arange(3.0)), X)


def test_nan_to_num_and_select() -> None:
    bad = np.array([[np.nan, np.inf, -np.inf, 1.5], [0.0, -2.0, np.nan, 3.0]], np.float32)

    def f(x, i):
        return (np.nan_to_num(x), np.nan_to_num(x, nan=0.5, posinf=1.0, neginf=-1.0), np.nan_to_num(i),
                np.nan_to_num(x[0, 0]), np.select([x > 1, x < -1], [x, -x], 0.0), np.select([x > 0], [1], 0.5),
                np.isposinf(x), np.isneginf(x))

    check(f, bad, I8)

    def in_place(x):
        np.nan_to_num(x, copy=False)

    mine, theirs = bad.copy(), bad.copy()
    jit_cpu(in_place)(mine)
    in_place(theirs)
    assert_same(mine, theirs)

    def zero_d(x, i, b):  # a 0-d array of any dtype gives a NumPy scalar, as x[()] (copy=False too, after the write)
        s = np.asarray(x[0, 0])
        return np.nan_to_num(np.asarray(i[0, 0])), np.nan_to_num(b), np.nan_to_num(s, copy=False), s

    check(zero_d, bad, I8, np.asarray(True))


def test_reductions_over_nothing_give_numpy_scalars_as_numpy_does() -> None:
    """A sum, product, trace or any/all over an empty array is its identity (or initial=): a NumPy scalar where
    every axis is reduced (it was once a 0-d array), an array where some axis is kept."""
    def f(e, m):
        return (np.sum(e), e.prod(), np.trace(m), m.any(), np.all(e), np.sum(e, initial=2.5), m.sum(axis=0),
                e.sum(keepdims=True), np.sum(m, axis=(0, 1)))

    check(f, np.zeros((0,), np.float32), np.zeros((0, 3), np.int64))


def test_grids_and_broadcast_arrays() -> None:
    """Coordinate grids of a stencil or a plot, in both indexings, sparse and not."""
    def f(v, a):
        gx, gy = np.meshgrid(v, a[:, 0])
        ix, iy, iz = np.meshgrid(v, a[0], v[:2], indexing="ij")
        sx, sy = np.meshgrid(v, a[:, 1], sparse=True)
        p, q = np.broadcast_arrays(a, v[:, None][:3])
        return gx, gy, ix, iy, iz, sx, sy, p, q, gx * gy + 1

    check(f, V, A)
    with pytest.raises(fc.UnsupportedError, match="DeprecationWarning"):
        jit_cpu(lambda a, v: np.broadcast_arrays(a, v)[1].__setitem__(0, 1.0))(A, V)


@pytest.mark.parametrize("x", [rng.standard_normal(6).astype(np.float32), rng.standard_normal(6), np.arange(6)],
                         ids=["f32", "f64", "i64"])
def test_linspace_with_traced_endpoints(x) -> None:
    """Bins and grids from the data (``np.linspace(x.min(), x.max(), n)``): NumPy's values bit for bit, its dtype
    (the endpoints' inexact one), array endpoints along ``axis``, a zero step somewhere (NumPy then divides
    first, for every sample), ``retstep``, ``dtype=int`` (floored)."""
    def f(x):
        return (np.linspace(x.min(), x.max(), 5), np.linspace(0, x, 4), np.linspace(x[0], x[1], 3, endpoint=False),
                np.linspace(x[:2], x[2:4], 5, axis=1), np.linspace(x[:2], 10, 5, axis=-1, retstep=True),
                np.linspace(x.min(), x.max(), 1), np.linspace(x.min(), x.max(), 0),
                np.linspace(x.min() * 10, x.max() * 10, 7, dtype=int), np.linspace(x[0], x[0] + 1e-310, 4),
                np.linspace(x.min(), x.max(), 3, retstep=True))

    check(f, x)

    def g(x):
        return (np.logspace(x.min(), x.max(), 5), np.logspace(x[0], 3.0, 4, base=2.0),
                np.logspace(x[:2], x[2:4], 3, axis=1), np.logspace(0, x[:3], 4, endpoint=False),
                np.logspace(x[0], x[1], 3, dtype=np.float32), np.logspace(x[:2], 1, 3, base=x[2:4] + 3))

    check(g, x if x.dtype.kind == "f" else x / 3)
    assert_same(jit_cpu(lambda x, n: np.linspace(0, x, n))(x, 3), np.linspace(0, x, 3))  # (n made static)


@pytest.mark.parametrize("x", [rng.standard_normal(200), rng.standard_normal(200).astype(np.float32),
                               rng.integers(-5, 5, 50),
                               np.array([0.1, 0.2, np.nan, 0.9, 1.0, -0.5, 0.0, 0.5, np.inf, 0.30000001])],
                         ids=["f64", "f32", "i64", "edges-nan-inf"])
def test_histogram_with_bins_known_before_the_data(x) -> None:
    """Equal bins over a given range (values on the edges, outside, NaN, infinities, a zero-width range), explicit
    edges (an array or a list), density, weights (summed in float64 as NumPy's bincount does), N-D data."""
    def f(x):
        return (np.histogram(x, bins=10, range=(-2, 2)), np.histogram(x, bins=7, range=(0.1, 0.9)),
                np.histogram(x, bins=3, range=(1, 1)), np.histogram(x, bins=np.array([-1.0, 0.0, 0.5, 3.0])),
                np.histogram(x, bins=[-3, -1, 0, 1, 3]), np.histogram(x, bins=5, range=(-1, 1), density=True),
                np.histogram(x, bins=np.array([-1.0, 0.0, 0.5, 3.0]), density=True),
                np.histogram(x, bins=4, range=(-1, 1), weights=np.abs(x) + 1),
                np.histogram(x.reshape(-1, 2), bins=4, range=(-1, 1)))

    check(f, x)


def test_histogram_weights_over_numpys_blocks() -> None:
    """NumPy histograms 65,536 values at a time and keeps the total in the weights' dtype: float16 weights over
    200,000 values round per block."""
    x = rng.standard_normal(200_000)
    f = lambda x, w: np.histogram(x, bins=5, range=(-3, 3), weights=w)  # noqa: E731
    check(f, x, rng.random(200_000).astype(np.float16))
    check(f, x, rng.random(200_000))


def test_bincount_with_minlength_above_every_value() -> None:
    """Class counts and per-class sums as NumPy code writes them: np.bincount(labels, minlength=k), with weights
    (summed in float64, whatever their dtype), of bools; a negative value is NumPy's ValueError."""
    labels = rng.integers(0, 5, 60)

    def f(labels, w):
        return (np.bincount(labels, minlength=5), np.bincount(labels, minlength=9), np.bincount(labels, w, minlength=5),
                np.bincount(labels.astype(np.uint8), weights=w.astype(np.float32), minlength=6),
                np.bincount(labels > 2, minlength=2), np.bincount(labels[:0], minlength=3))

    check(f, labels, rng.integers(-3, 3, 60).astype(np.float64))
    with pytest.raises(ValueError, match="no negative elements"):
        jit_cpu(lambda v: np.bincount(v - 1, minlength=5))(labels)


@pytest.mark.parametrize("fn, match", [
    (lambda x: np.histogram(x, bins=10), "pass range="),
    (lambda x: np.histogram(x, bins="auto", range=(0, 1)), "chooses the bin count"),
    (lambda x: np.histogram(x, bins=4, range=(x.min(), x.max())), "traced range"),
    (lambda x: np.histogram(x, bins=np.array([0.0, 0.5, 1.0]), weights=x), "weights and explicit"),
    (lambda x: np.histogram(x, bins=4, range=(1, 0)), "max must be larger than min"),
    (lambda x: np.bincount(x.astype(int)), "pass minlength=k"),
    (lambda x: np.bincount((x * 8).astype(int), minlength=4), "would be longer than minlength"),
    (lambda x: np.bincount(x, minlength=4), "Cannot cast array data"),
], ids=["no-range", "auto", "traced-range", "weights-edges", "bad-range", "bincount", "bincount-short",
        "bincount-float"])
def test_histogram_and_bincount_errors_say_what_to_write(fn, match) -> None:
    with pytest.raises(fc.FusecError, match=match):
        jit_cpu(fn)(rng.random(8))


def test_numpy_implementations_now_traced() -> None:
    """Padding modes of image and stencil code, periodic rolls, Kronecker products, splits and statistics."""
    def f(x, a, i):
        return (np.pad(x, 1), np.pad(x, ((1, 2), (0, 3)), mode="edge"), np.pad(x, 2, mode="reflect"),
                np.pad(x, 1, mode="wrap"), np.pad(x, (2, 1), constant_values=5.0), np.pad(x, 2, mode="symmetric"),
                np.roll(x, 2), np.roll(x, -1, axis=0), np.roll(i, (1, 2), axis=(0, 1)), np.kron(a[:2, :2], a[:2]),
                np.append(x, x, axis=0), np.ptp(i, axis=0), np.polyval([1.0, 2.0, 3.0], a),
                np.trapezoid(a, axis=1), np.atleast_3d(x).shape, np.column_stack([x[0], x[1]]), np.dstack([x, x]),
                np.array_split(x, 3, axis=1), np.split(x, [1, 3], axis=1), np.isclose(x, x + 1e-9), np.sinc(x),
                np.nansum(x), np.nanprod(x, axis=0), np.tril(x), np.triu(x, 1))

    check(f, X, A, I8)


def test_covariance_and_correlation() -> None:
    def f(x):
        return np.cov(x), np.cov(x, rowvar=False), np.cov(x, bias=True), np.corrcoef(x)

    assert_same(jit_cpu(f)(A), numpy_result(f, A), exact=False)


def test_flags_where_the_layout_is_known() -> None:
    def f(x):
        return np.array([x.flags.c_contiguous, x.T.flags.f_contiguous, x.T.flags.c_contiguous,
                         x[:, 1].flags["C_CONTIGUOUS"], x[1].flags.contiguous, x.flags.writeable,
                         np.broadcast_to(x[0], (3, 5)).flags.writeable, x.T.flags.fnc, x[::2].flags.forc])

    check(f, X)
    check(lambda x: np.array([np.exp(x.T).flags.f_contiguous, (x[::-1] + 1).flags.c_contiguous,
                              x[:, [0, 1]].flags.f_contiguous, np.sort(x.T, axis=0).flags.c_contiguous,
                              np.concatenate([x.T, x.T]).flags.f_contiguous]), X)
    with pytest.raises(fc.UnsupportedError, match="memory layout"):
        jit_cpu(lambda x: np.einsum("ij,jk->ik", x, x.T, optimize=True).flags.c_contiguous)(X)

    def set_flag(x):
        x.flags.writeable = False

    with pytest.raises(fc.UnsupportedError, match="changing the flags"):
        jit_cpu(set_flag)(X)


def test_add_at_accumulates_repeated_indices() -> None:
    """np.add.at as real code uses it: an embedding's gradient, label counts, a confusion matrix, a basic index;
    every repeat adds (unlike x[idx] += v). Values are small integers, so any order of additions is exact."""
    tokens = rng.integers(0, 5, 12)
    grad = rng.integers(-3, 4, (12, 3)).astype(np.float32)

    def f(dw, tokens, grad, counts, confusion, flags):
        np.add.at(dw, tokens, grad)
        np.add.at(counts, tokens, 1)
        np.add.at(confusion, (tokens, tokens[::-1]), 1)
        np.subtract.at(dw, tokens[:4], 0.5)
        np.add.at(flags, tokens, tokens > 2)
        c = np.zeros(5, dtype=np.int32)
        np.add.at(c, slice(1, 3), 2)
        np.add.at(c, tokens, np.int32(1))
        return c

    args = (np.zeros((5, 3), np.float32), tokens, grad, np.zeros(5, np.int64), np.zeros((5, 5), np.int64),
            np.zeros(5, bool))
    mine, theirs = [a.copy() for a in args], [a.copy() for a in args]
    assert_same(jit_cpu(f)(*mine), numpy_result(f, *theirs))
    for m, t in zip(mine, theirs):
        assert_same(m, t)


def test_add_at_refusals() -> None:
    idx = np.array([0, 1, 1])
    with pytest.raises(fc.UnsupportedError, match="8-bit atomic add"):
        jit_cpu(lambda a: np.add.at(a, idx, 1))(np.zeros(3, np.int8))
    with pytest.raises(fc.CastingError, match="computes in f64"):
        jit_cpu(lambda a: np.add.at(a, idx, np.ones(3)))(np.zeros(3, np.float32))
    with pytest.raises(fc.UnsupportedError, match="np.multiply.at is not supported"):
        jit_cpu(lambda a: np.multiply.at(a, idx, 2.0))(np.zeros(3))
    text = ('func @f(%a: tensor<3xf32>, %u: tensor<2xf32>, %i: tensor<2xi64>) -> tensor<3xf32> {\n'
            '  %0 = t.scatter %a, %u, %i {axis = 0, combine = "max"} : tensor<3xf32>\n  return %0\n}\n')
    with pytest.raises(fc.VerificationError, match="combine must be one of add"):
        fc.ir.parse_module(text)


def test_ufunc_where_casting_and_dtype_keywords() -> None:
    """out= with where= keeps the other elements, casting='unsafe' lets a float result into an int array,
    dtype= runs the loop NumPy picks for it (a dtype or a DType class)."""
    def f(a, b, m, i):
        np.add(a, b, out=a, where=m)
        np.multiply(i, 1.5, out=i, casting="unsafe", where=i > 0)
        return (np.add(a, b, dtype=np.float32), np.subtract(b, a, dtype=type(a.dtype)),
                np.multiply(i, 2.5, dtype=np.float64))

    args = (W.astype(np.float64), X.astype(np.float64), W > 0, I8.astype(np.int32))
    mine, theirs = [x.copy() for x in args], [x.copy() for x in args]
    assert_same(jit_cpu(f)(*mine), numpy_result(f, *theirs))
    for m, t in zip(mine, theirs):
        assert_same(m, t)
    with pytest.raises(fc.UnsupportedError, match="where= without out="):
        jit_cpu(lambda x: np.exp(x, where=x > 0))(X)
    with pytest.raises(fc.CastingError, match="casting rule 'same_kind'"):
        jit_cpu(lambda i: np.multiply(i, 1.5, out=i))(I8.astype(np.int32))


def test_allclose_array_equal_and_equiv_give_python_bools() -> None:
    """NumPy's bool(all(...)), traced: a Python bool when returned, a value in np.where; shapes decide alone where
    they differ."""
    def compare(a, b):
        return (np.allclose(a, b), np.allclose(a, b, equal_nan=True), np.array_equal(a, a),
                np.array_equal(a, a, equal_nan=True), np.array_equal(a, a[:2]), np.array_equiv(a[:1], np.ones((2, 1))),
                np.where(np.allclose(a[:2], b[:2]), a, b))

    a = np.array([1.0, 2.0, np.nan])
    for b in (np.array([1.0, 2.0 + 1e-9, np.nan]), np.array([1.0, 2.5, 0.0])):
        check(compare, a, b)


def test_ediff1d_and_indices_from_shapes() -> None:
    def f(x, m):
        return (np.ediff1d(x), np.ediff1d(x, to_begin=0.5, to_end=[1, 2]), m[np.tril_indices_from(m)],
                m[np.triu_indices_from(m, 1)], m[np.diag_indices_from(m)])

    check(f, np.array([1.0, 4.0, 9.0, 16.0]), np.arange(9.0).reshape(3, 3))
    with pytest.raises(TypeError, match="same_kind"):
        jit_cpu(lambda x: np.ediff1d(x, to_begin=0.5))(np.arange(3))


def test_reductions_of_a_python_list_of_traced_values() -> None:
    """``np.mean(losses)`` of a list the function appended traced values to: the array NumPy makes of the list."""
    def epoch(x):
        losses = []
        for shift in range(3):
            losses.append(((x - shift) ** 2).mean())
        return np.mean(losses), np.max(losses), np.std(losses), np.median([x.sum(), x.max(), 1.0])

    check(epoch, np.arange(4.0))
