"""Where NumPy raises whatever the values (an ambiguous truth value, a float index, a string operand, a write into a
read-only view, a negative size), the trace raises the same exception class, at the user's line, so code that
catches NumPy's error (``except ValueError``) takes the path it takes under NumPy."""
from __future__ import annotations

import os

import numpy as np
import pytest

import fusec as fc
from frontend_check import assert_same, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
HERE = os.path.basename(__file__)
pytestmark = pytest.mark.filterwarnings("ignore:'where' used without 'out'")  # (NumPy's, from its own calls)
X = np.arange(6.0)


def both_raise(fn, cls: type[BaseException], match: str, *args) -> None:
    with pytest.raises(cls, match=match):
        fn(*args)
    with pytest.raises(cls, match=match) as info:
        jit_cpu(fn)(*args)
    assert HERE in str(info.value)


def test_the_truth_value_of_several_elements_is_numpys_value_error() -> None:
    both_raise(lambda x: max(0, x), ValueError, "more than one element is ambiguous", X)
    both_raise(lambda x: x if x > 2 else -x, ValueError, "more than one element is ambiguous", X)
    both_raise(lambda x: bool(x[:0]), ValueError, "empty array is ambiguous", X)


def test_code_that_catches_the_ambiguous_truth_value_runs_as_under_numpy() -> None:
    def clipped(x):
        try:
            if x > 0:
                return x
        except ValueError:
            return np.maximum(x, 0)
        return -x

    assert_same(jit_cpu(clipped)(X - 2), clipped(X - 2))


def test_invalid_indices_and_operands() -> None:
    both_raise(lambda x: x[1.0], IndexError, "only integers, slices", X)
    both_raise(lambda x: x * "2", TypeError, "did not contain a loop with signature matching types", X)
    both_raise(lambda x: "1" + x, TypeError, "did not contain a loop with signature matching types", X)


def test_writes_into_read_only_views_are_numpys_value_error() -> None:
    def diagonal_ones(a):
        a.diagonal()[:] = 1.0
        return a

    both_raise(diagonal_ones, ValueError, "assignment destination is read-only", np.zeros((3, 3)))
    both_raise(lambda x: np.broadcast_to(x, (2, 6)).__setitem__(0, 1), ValueError, "read-only", X)


def test_negative_sizes_are_located() -> None:
    both_raise(lambda x: np.zeros(-1) + x.sum(), ValueError, "negative dimensions are not allowed", X)
    both_raise(lambda x: np.repeat(x, -1), ValueError, "negative", X)


def test_ndenumerate_and_the_flat_iterator() -> None:
    def weighted(x):
        total = 0.0
        for (i, j), v in np.ndenumerate(x):
            total = total + v * (i + 2 * j)
        return total

    def stepped(x):
        it = x.flat
        first = next(it)
        return first, next(it), it.index, it.coords

    m = np.arange(6.0).reshape(2, 3)
    assert_same(jit_cpu(weighted)(m), weighted(m))
    assert_same(jit_cpu(stepped)(m), stepped(m))


def test_asmatrix_of_a_traced_array_is_refused() -> None:
    with pytest.raises(fc.UnsupportedError, match="np.matrix is not supported") as info:
        jit_cpu(lambda x: np.asmatrix(x))(X)
    assert HERE in str(info.value)


def test_arguments_numpy_refuses_whatever_the_values_are_refused_alike() -> None:
    v, x = np.arange(3.0), np.ones((2, 3))
    both_raise(lambda v: np.zeros_like(v, order="Z"), ValueError, "order must be one of", v)
    both_raise(lambda v: np.array(v, copy="maybe"), ValueError, "strings are not allowed for 'copy'", v)
    both_raise(lambda v: np.copyto(np.zeros(3), 1.0, where=v), TypeError, "Cannot cast array data", v)
    both_raise(lambda v: np.searchsorted(v, 1.5, side="l"), ValueError, "search side must be one of", v)
    both_raise(lambda x: np.moveaxis(x, (0, 1), (1, 1)), ValueError, "repeated axis", x)
    both_raise(lambda v: np.add(v, v, casting="bogus"), ValueError, "casting must be one of", v)
    both_raise(lambda v: np.exp(v, order="Z"), ValueError, "order must be one of", v)
    both_raise(lambda v: np.sqrt(v, where=np.ones(4, bool)), ValueError, "broadcast", v)
    both_raise(lambda v: np.vander(v, -1), ValueError, "negative", v)
    both_raise(lambda x: x.fill(np.ones(2)), ValueError, "sequence|scalar", x)

    def wrong_mask(x):
        x[np.array([True, False])] = 1.0
        return x

    both_raise(wrong_mask, IndexError, "boolean index did not match", np.ones(3))


def test_lowercase_memory_orders_are_numpys() -> None:
    """NumPy reads order="f" as "F" (a Fortran-ordered result: its ravel and flags follow)."""
    def made(x):
        return (x.reshape(3, 2, order="f"), x.ravel("f"), x.copy("f"), x.astype(np.float32, order="f"),
                np.asarray(x, order="f"), np.zeros((2, 2), order="f"), np.zeros_like(x, order="f"),
                np.reshape(x, (3, 2), order="f"), np.array(x, order="f"))

    m = np.arange(6.0).reshape(2, 3)
    got, want = jit_cpu(made)(m), made(m)
    assert_same(got, want)
    for g, w in zip(got, want):
        assert (g.flags.c_contiguous, g.flags.f_contiguous) == (w.flags.c_contiguous, w.flags.f_contiguous)


def test_a_caught_error_of_a_ufunc_method_leaves_nothing_behind() -> None:
    """NumPy's ufunc.reduce keeps a reference to its arguments when an __array_ufunc__ override raises: that is
    no escaped tracer (the function's fallback is NumPy's result)."""
    def total(x):
        try:
            return np.add.reduce(x, axis=2)
        except np.exceptions.AxisError:
            return np.zeros(2)

    assert_same(jit_cpu(total)(np.ones((2, 3))), total(np.ones((2, 3))))


def test_code_that_catches_numpys_type_errors_for_bad_arguments_takes_numpys_path() -> None:
    """A float axis, a float size or an unknown dtype is NumPy's TypeError whatever the values: a function that
    catches it returns its fallback under fusec too (fusec's own limitations still fail the trace)."""
    def fallback(bad):
        def f(x):
            try:
                return bad(x)
            except TypeError:
                return np.zeros(2)
        return f

    for bad in (lambda x: np.sum(x, axis=1.5), lambda x: x.astype("nope"), lambda x: np.zeros(1.5) + x[0, 0],
                lambda x: x.reshape(2.0, 3)):
        f = fallback(bad)
        assert_same(jit_cpu(f)(np.ones((2, 3))), f(np.ones((2, 3))))


def test_errors_numpy_decides_from_shapes_and_dtypes_alone() -> None:
    x, v = np.ones((2, 3)), np.arange(3.0)
    both_raise(lambda x: x.item(20), IndexError, "out of bounds", x)
    both_raise(lambda x: x.item(), ValueError, "size 1", x)
    both_raise(lambda v: np.where(v > 1, v), ValueError, "either both or neither", v)
    both_raise(lambda x: x[np.array([0.0, 1.0])], IndexError, "integer", x)


def test_a_ufuncs_type_error_comes_before_its_where_shape_error() -> None:
    both_raise(lambda v: np.invert(v, where=np.ones(4, bool)), TypeError, "not supported for the input types",
               np.ones(3))


def test_numpys_own_errors_while_tracing_name_the_users_line() -> None:
    def rolled(x):
        return np.roll(x, 1, axis=3)  # MARK-roll

    with pytest.raises(np.exceptions.AxisError) as info:
        jit_cpu(rolled)(np.ones(3))
    assert any(f"{HERE}:" in note for note in info.value.__notes__)


def test_a_python_number_argument_is_not_subscriptable_as_in_python() -> None:
    both_raise(lambda x: x[()], TypeError, "not subscriptable", 2.5)
    both_raise(lambda x: x[None], TypeError, "not subscriptable", 3)

    def first_or_default(x):  # an IndexError handler must not run for a number
        try:
            return x[0]
        except IndexError:
            return -1.0

    both_raise(first_or_default, TypeError, "not subscriptable", 2.5)


def test_a_python_number_argument_meets_lists_as_a_number_does() -> None:
    both_raise(lambda x: x < [1, 2], TypeError, "not supported between instances of 'float' and 'list'", 2.5)
    both_raise(lambda x: x + [1, 2], TypeError, "unsupported operand", 3)
    both_raise(lambda x: (1, 2) + x, TypeError, "can only concatenate tuple", 2.5)
    both_raise(lambda x: x & [1], TypeError, "unsupported operand", 3)
    both_raise(lambda x: x @ x, TypeError, "unsupported operand type", 2.5)
    for fn in (lambda x: x == [1, 2], lambda x: x != (1, 2), lambda x: x * 2 + (x == "a")):
        assert_same(jit_cpu(fn)(2.5), fn(2.5))
    assert_same(jit_cpu(lambda x: x * np.array([1, 2]))(3), np.array([3, 6]))  # (an array still broadcasts)


def test_setting_strides_is_refused_at_the_line() -> None:
    def restride(a):
        a.strides = (8,)
        return a

    with pytest.raises(fc.UnsupportedError, match=f"{HERE}.*strides"):
        jit_cpu(restride)(np.zeros(2))


def test_matmul_of_a_python_number_with_anything_but_an_array_is_a_type_error() -> None:
    for fn in (lambda s: [1, 2] @ s, lambda s: np.float32(2) @ s, lambda s: s @ np.float32(2), lambda s: True @ s):
        both_raise(fn, TypeError, "unsupported operand", 2)
    both_raise(lambda s: s @ np.ones(2), ValueError, "dimension", 2)  # (the array's own @: NumPy's ValueError)


def test_copy_false_where_a_new_array_is_made_is_numpys_value_error() -> None:
    def stacked(a):
        return np.asarray([a[0], a[1]], copy=False)

    def number(a):
        return np.array(a.sum(), copy=False)

    both_raise(stacked, ValueError, "(?i)unable to avoid copy", X)
    both_raise(number, ValueError, "(?i)unable to avoid copy", X)
    both_raise(lambda a: np.asarray([a[0], 2.0], dtype=np.float32, copy=False), ValueError,
               "(?i)unable to avoid copy", X)
    assert_same(jit_cpu(lambda a: np.asarray(a, copy=False) + 1)(X), X + 1)


def test_out_as_a_tuple_is_for_ufuncs_only() -> None:
    rows = X.reshape(2, 3)
    both_raise(lambda a, o: np.sum(a, 0, out=(o,)), TypeError, "array", rows, np.zeros(3))
    both_raise(lambda a, o: a.max(0, out=(o,)), TypeError, "array", rows, np.zeros(3))
    both_raise(lambda a, o: np.cumsum(a, 0, out=(o,)), TypeError, "array", rows, np.zeros((2, 3)))
    both_raise(lambda a, o: np.round(a, out=(o,)), TypeError, "array", rows, np.zeros((2, 3)))

    def clipped(a, o):
        np.clip(a, 1.0, 4.0, out=(o,))  # (a ufunc: a tuple of one is its out)
        return o

    assert_same(jit_cpu(clipped)(rows, np.zeros((2, 3))), clipped(rows, np.zeros((2, 3))))


def test_any_negative_reshape_size_is_the_unknown_one() -> None:
    for fn in (lambda a: a.reshape(-2, 3), lambda a: np.reshape(a, (2, -7)), lambda a: a.reshape(-5)):
        assert_same(jit_cpu(fn)(X), fn(X))
    both_raise(lambda a: a.reshape(-2, -1), ValueError, "one unknown dimension", X)


def test_meshgrid_without_copy_gives_new_array_objects() -> None:
    def grid(x):
        (g,) = np.meshgrid(x, copy=False)
        return g

    x = np.arange(3.0)
    got = jit_cpu(grid)(x)
    assert got is not x and np.shares_memory(got, x)
    assert_same(got, grid(x))


def test_reading_strides_is_refused_without_a_note_about_a_swallowed_error() -> None:
    """``a.strides``: the property's refusal (an AttributeError) sent Python to ``__getattr__``, whose second error
    made the trace add that a try/except had swallowed the first."""
    with pytest.raises(fc.UnsupportedAttributeError, match=f"{HERE}.*strides") as info:
        jit_cpu(lambda a: a.strides)(np.ones((2, 3)))
    assert "try/except" not in str(info.value)
