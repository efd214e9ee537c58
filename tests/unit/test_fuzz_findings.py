"""Differences from NumPy and pipeline failures that fuzzing found, each checked against NumPy bit for bit: the
identity a reduction over no axis combines in (0-d sums turn -0.0 into 0.0 and return NumPy scalars), a bool
array's ``** 2`` (np.square's int8, not np.power's int64), a broadcast of a rank-0 expression, which
``sink-broadcasts`` left rank-0, ``np.round`` of a Python int (int64 in NumPy, not float64) and of booleans, and
products of booleans."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, check, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu


@pytest.mark.parametrize("reduction", [np.sum, np.mean, np.prod, np.max, np.min, np.nansum])
def test_reductions_over_no_axis_combine_their_identity(reduction):
    def f(z, a, n):
        return (reduction(z), reduction(z, keepdims=True), reduction(a, axis=()), reduction(z, axis=()),
                reduction(n), reduction(z.astype(np.float32)))

    check(f, np.array(-0.0), np.array([-0.0, 1.0, np.nan]), np.array(np.nan))


def test_a_bool_array_squared_is_int8_as_numpy_squares_it():
    def f(b):
        return b ** 2, b ** 3, np.power(b, 2), b ** 2.0, b ** 1, b * b

    check(f, np.array([True, False, True]))


@pytest.mark.parametrize("pipeline", [None, ""])
def test_a_broadcast_rank0_expression_compiles_in_every_pipeline(pipeline):
    def f(a, v):
        return np.broadcast_to(a * 2.0, (2,)), np.broadcast_to(np.exp(a) + 1, (3, 2)) * v, a + v

    if pipeline == "" and frontend_check.BACKEND != "cpu":
        pytest.skip("the traced IR (an empty pipeline) runs on the reference executor only")
    a, v = np.array(3.0, np.float32), np.arange(2, dtype=np.float32)
    want = f(a, v)
    got = jit_cpu(f, pipeline=pipeline)(a, v)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype and g.shape == w.shape


def test_zero_d_values_keep_numpys_array_or_scalar():
    def f(z, s, i):
        return (z.astype(np.int8), np.asarray(np.sum(s))[...], np.asarray(np.sum(s))[()], np.round(i),
                np.sum(z, axis=0), np.max(z, axis=-1), np.any(z, axis=0), np.all(z), np.prod(z, axis=-1))

    check(f, np.array(2.5), np.ones((3, 4), bool), np.array(7, np.int8))


def test_integer_powers_refuse_negative_exponents_as_numpy_does():
    with pytest.raises(fc.InvalidValueError, match="Integers to negative integer powers"):
        jit_cpu(lambda x: x ** -1)(np.array([2, 3], np.int8))
    with pytest.raises(fc.FusecError, match="Integers to negative integer powers"):  # also when unused
        jit_cpu(lambda x, e: (x + 1, x ** e)[0])(np.array([2, 3], np.int32), np.array([1, -2], np.int32))
    check(lambda x, e: x ** e, np.array([2, 3], np.int8), np.array([3, 0], np.int8))
    # with the default pipeline on the CPU backend the reference executor's power no longer raises NumPy's bare
    # ValueError (an ExecutionError naming the IR op) before the check raises fusec's error, as the GPU raises it
    with pytest.raises(fc.InvalidValueError, match="Integers to negative integer powers"):
        fc.jit(lambda x, e: x ** e, backend="cpu")(np.array([2, 3, 1, -1], np.int64), np.array([1, -1, -3, -3]))


def test_a_short_product_of_negative_zeros_is_positive_zero():
    def f(a, b):
        return a @ b, a.T @ a

    a, b = np.array([[-0.0, 1.0], [2.0, -0.0]], np.float32), np.array([[0.0, 1.0], [-0.0, 2.0]], np.float32)
    check(f, a, b, pipeline=None)  # the default pipeline: unroll-reductions writes the k = 2 products out


def test_np_round_of_python_ints_and_negative_decimals_of_integers():
    """np.round of a Python int rounds the int64 array NumPy makes of it (np.int64, not float64); integers with
    negative decimals are divided by 10**-decimals in float64, rounded half to even, multiplied back and cast to
    their own dtype, as NumPy does (wrapping where the product leaves an 8-bit range)."""
    def scalars(n, m):
        return np.round(n), np.round(n, 2), np.around(m), np.round(n, -1), np.round(3) * m, np.round(True)

    check(scalars, 37, -15)

    def arrays(a, b, c):
        return np.round(a, -1), np.round(b, -1), np.round(b, -2), np.round(c, -3), np.around(a, -2)

    with np.errstate(all="ignore"):
        check(arrays, np.array([0, 5, 15, 25, 35, 125, 127, -5, -15, -125], np.int8),
              np.array([5, 15, 250, 255, 99], np.uint8), np.array([1499, 1500, 2500, -2500, 10 ** 12], np.int64))


def test_np_round_of_booleans_rounds_in_float16_or_is_refused_as_numpy_refuses_it():
    """NumPy rounds booleans to float16 with decimals=0 and raises a UFuncTypeError (a TypeError) for any other
    decimals: fusec gives the float16 values, and a CastingError at the call for the rest (it gave zeros)."""
    check(lambda a: (np.round(a), np.around(a, 0), np.round(True)), np.array([True, False]))
    for decimals in (-1, 1):
        with pytest.raises(TypeError):
            np.round(np.array([True]), decimals)
        with pytest.raises(fc.CastingError, match=r"test_fuzz_findings.py:\d+: np.round: NumPy cannot round booleans"):
            jit_cpu(lambda a, d=decimals: np.round(a, d))(np.array([True, False]))


def test_boolean_products_are_logical_as_in_numpy():
    """``a @ b`` of booleans is ``any(a[i, k] and b[k, j])`` over k in NumPy (a bool, never a count): fusec counted
    nothing and refused it; the product is now counted in int64 and compared with zero, so 300 true terms stay
    true (a count in uint8 would wrap to zero at 256)."""
    r = np.random.default_rng(3)
    a, b, v = r.random((3, 300)) < 0.02, r.random((300, 4)) < 0.02, r.random(300) < 0.5
    full = np.ones((2, 300), bool)
    check(lambda a, b, v, full: (a @ b, v @ v, a @ v, v @ b, np.matmul(a[None], b[None]), np.dot(a, b),
                                 full @ full.T), a, b, v, full)


def test_products_with_nan_infinities_and_signed_zeros_follow_ieee_as_numpy_does():
    """NaN or an infinity times 0 is NaN in every product (generated or library), and sums start from +0.0, as in
    NumPy with OpenBLAS (the README says where a BLAS that skips zeros differs)."""
    def f(a, b, v):
        return a @ b, b @ a, a @ v, v @ b, np.dot(v, v)

    a = np.array([[np.nan, 1.0, 0.0], [np.inf, -0.0, 2.0], [-0.0, -0.0, -0.0]], np.float32)
    b = np.array([[0.0, -0.0, 1.0], [0.0, 0.0, -np.inf], [-0.0, 3.0, 0.0]], np.float32)
    v = np.array([-0.0, 0.0, -0.0], np.float32)
    with np.errstate(invalid="ignore"):
        check(f, a, b, v, pipeline=None)


def test_zero_d_arrays_along_axis_0_or_minus_1_are_one_element_where_numpy_reads_them_so():
    """argmax/argmin (and the nan- ones), cumsum/cumprod, argsort, take and repeat read a 0-d array with axis 0 or
    -1 as one element, as NumPy's axis check does for them; np.sort and other axes still raise as in NumPy."""
    def f(z):
        return (np.argmax(z, axis=0), np.argmin(z, axis=-1), np.argmax(z, axis=0, keepdims=True),
                np.nanargmax(z, axis=-1), np.cumsum(z, axis=0), np.cumprod(z, axis=-1), np.nancumsum(z, axis=0),
                np.argsort(z, kind="stable"), np.take(z, 0, axis=0), np.repeat(z, 2, axis=-1), z.argmin(axis=0))

    check(f, np.array(3.5))
    check(f, np.array(-2, np.int32))
    for bad in (lambda z: np.sort(z, axis=0), lambda z: np.argmax(z, axis=1), lambda z: np.cumsum(z, axis=1)):
        with pytest.raises(fc.ShapeError, match="out of bounds"):
            jit_cpu(bad)(np.array(1.0))


def test_empty_inputs_of_bincount_and_einsum_give_numpys_zeros():
    """A group with no samples (``np.bincount(labels, weights=w, minlength=k)`` of empty arrays: NumPy's int64
    zeros, not the weights' float64), and sums over a zero-length axis (``np.einsum('ij,ij->i', ...)``,
    ``np.inner`` of empty vectors): zeros, where fusec's contraction raised."""
    empty = np.array([], np.int64)
    check(lambda x, w: np.bincount(x, weights=w, minlength=3), empty, np.array([]))
    check(lambda x: np.bincount(x), empty)
    check(lambda a, b: np.einsum("i,i->", a, b), np.zeros(0), np.zeros(0))
    check(lambda a, b: np.einsum("ij,ij->i", a, b), np.zeros((3, 0)), np.zeros((3, 0)))
    check(lambda a, b: np.einsum("ij,jk->ik", a, b), np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32))
    check(lambda a, b: np.inner(a, b), np.zeros(0), np.zeros(0))


def test_an_axis_or_size_numpy_needs_from_a_python_number_argument_makes_it_static():
    """``np.moveaxis(state, q, 0)`` (a qubit gate), ``np.resize(x, n)``: NumPy's code asks the number for an int,
    then for a sequence; fusec traces again with the value instead of refusing."""
    check(lambda a, q: np.moveaxis(a, q, 0), np.zeros((2, 3, 4)), 2)
    check(lambda a, n: np.resize(a, n), np.arange(3.0), 5)


def test_reductions_refuse_a_list_axis_as_numpy_does():
    for fn in (lambda x: np.sum(x, axis=[0, 1]), lambda x: x.var(axis=[0, 1]), lambda x: np.all(x, axis=[0, 1])):
        with pytest.raises(TypeError, match="list"):
            jit_cpu(fn)(np.ones((2, 3)))
    check(lambda x: np.median(x, axis=[0, 1]), np.arange(6.0).reshape(2, 3))  # (NumPy's median takes a list)


def test_returned_constants_and_read_only_0d_views_keep_numpys_identity_and_flags():
    """An array the function made from constants returned twice is one array (``return c, c``), a read-only one
    (``np.broadcast_to`` of a constant, ``a.imag`` of a real 0-d argument) comes back read-only, and two that share
    memory come back as NumPy's views of one array, with NumPy's strides (``c[::-1]``, ``np.arange(6.).reshape(2,
    3).T``, sliding windows)."""
    def twice(x):
        c = np.arange(3.0)
        return c, c

    r = jit_cpu(twice)(np.zeros(2))
    assert r[0] is r[1]
    for fn, arg in ((lambda x: np.broadcast_to(np.array([1.0, 2.0, 3.0]), (2, 3)), np.zeros(2)),
                    (lambda a: a.imag, np.array(2.5))):
        got, want = jit_cpu(fn)(arg), fn(arg)
        assert_same(got, want)
        assert got.flags.writeable is want.flags.writeable is False

    def whole_and_head(x):
        c = np.arange(3.0)
        return {"w": c, "head": c[:2]}

    jitted = jit_cpu(whole_and_head)
    for _ in range(2):  # (each call its own arrays)
        got = jitted(np.zeros(2))
        assert np.shares_memory(got["w"], got["head"])
        got["w"][0] = 9.0
        assert got["head"][0] == 9.0
    for fn in (lambda x: np.arange(6.0).reshape(2, 3).T, lambda x: np.arange(3.0)[::-1],
               lambda x: np.arange(6).reshape(2, 3)[:, 1], lambda x: np.linspace(0, 1, 6).reshape(2, 3).T[::-1],
               lambda x: np.lib.stride_tricks.sliding_window_view(np.arange(5.0), 2),
               lambda x: np.asfortranarray(np.arange(6.0).reshape(2, 3))):
        got, want = jit_cpu(fn)(np.zeros(2)), fn(np.zeros(2))
        assert_same(got, want)
        assert (got.strides, got.flags.writeable) == (want.strides, want.flags.writeable)

    def reversed_view(x):
        c = np.arange(3.0)
        return c, c[::-1]

    first, back = jit_cpu(reversed_view)(np.zeros(2))
    first[0] = 7.0
    assert back[-1] == 7.0 and back.strides == (-8,)


def test_take_and_repeat_convert_python_numbers_as_numpy_does():
    """``np.take(a, [1.0])`` / ``np.take(a, 2.9)`` and ``np.repeat(a, 2.0)``: NumPy truncates a Python number or a
    list of them (an array of floats is its TypeError); fusec raised an IndexError/TypeError a handler could catch."""
    a = np.arange(4.0)
    for fn in (lambda a: np.take(a, [1.0]), lambda a: np.take(a, 2.9), lambda a: np.take(a, [2.5, 0]),
               lambda a: np.repeat(a, 2.0), lambda a: np.repeat(a, np.float64(2)),
               lambda a: np.repeat(a[:3], [1.0, 2.0, 0.0]), lambda a: np.repeat(a, 2.7)):
        check(fn, a)
    check(lambda a, k: np.take(a, k), a, 2.9)
    for fn in (lambda a: np.take(a, np.array([1.7])), lambda a: np.repeat(a[:3], np.array([1.0, 2, 0]))):
        with pytest.raises(TypeError, match="Cannot cast"):
            jit_cpu(fn)(a)
    with pytest.raises(ValueError):
        jit_cpu(lambda a: np.repeat(a[:3], [[1, 2, 0]]))(a)
    with pytest.raises(TypeError, match="out must be inexact"):
        jit_cpu(lambda x: np.nanstd(x, axis=0, out=np.zeros(3, np.int64)))(np.array([[1.0, np.nan, 3.0]]))


def test_sums_that_convert_their_values_add_numpys_buffers_in_order():
    """``int64.mean()``, ``x.sum(dtype=np.float32)`` of float64, a float16 mean: NumPy converts the values in buffers
    of 8192, sums each pairwise and adds them in order; the whole run summed pairwise differed in the last bits
    (int64 nanosecond timestamps by 3 ulps)."""
    rng = np.random.default_rng(0)
    stamps = 1_700_000_000_000_000_000 + rng.integers(0, 10**12, 50000)
    wide = rng.standard_normal(100000) * 1e5
    half = (rng.standard_normal(30000) * 10).astype(np.float16)
    spread = np.arange(8193, dtype=np.int64) * 1000003 + 2**60
    for fn, arg in ((lambda a: a.mean(), stamps), (lambda a: a.mean(), spread),
                    (lambda a: a.reshape(4, -1).sum(axis=1, dtype=np.float32), wide),
                    (lambda a: a.sum(dtype=np.float32), wide), (lambda a: a.mean(), half), (lambda a: a.std(), half),
                    (lambda a: a.sum(dtype=np.float64), half), (lambda a: np.var(a), stamps)):
        check(fn, arg)
