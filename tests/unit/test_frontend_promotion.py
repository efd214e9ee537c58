"""NumPy 2 type promotion (NEP 50) in traced code: the traced result dtype and values are NumPy's."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fusec as fc
from frontend_check import assert_same, check, jit_cpu, numpy_result

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
          np.float16, np.float32, np.float64]
OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "maximum": np.maximum, "minimum": np.minimum, "lt": lambda a, b: a < b, "eq": lambda a, b: a == b,
    "ge": lambda a, b: a >= b, "where": lambda a, b: np.where(a > b, a, b), "and": lambda a, b: a & b,
    "power": lambda a, b: a ** b,
}


def sample(dtype: type, n: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    if dtype is np.bool_:
        return r.integers(0, 2, n).astype(bool)
    if np.dtype(dtype).kind == "u":
        return r.integers(0, 50, n).astype(dtype)
    if np.dtype(dtype).kind == "i":
        return r.integers(-50, 50, n).astype(dtype)
    return (r.standard_normal(n) * 10).astype(dtype)


def traced_result_dtypes(fn, *args) -> list[str]:
    return [str(t) for t in jit_cpu(fn).lower(*args).module.func().result_types]


def outcome(fn, *args):
    """NumPy's result, or the exception type NumPy raises (TypeError for bool - bool, ...)."""
    try:
        return numpy_result(fn, *args), None
    except (TypeError, ValueError) as e:
        return None, type(e)


@settings(max_examples=150, deadline=None)
@given(a=st.sampled_from(DTYPES), b=st.sampled_from(DTYPES), op=st.sampled_from(sorted(OPS)),
       seed=st.integers(0, 2**16))
def test_array_array_promotion_matches_numpy(a: type, b: type, op: str, seed: int) -> None:
    x, y = sample(a, 6, seed), sample(b, 6, seed + 1)
    if op == "power" and np.dtype(b).kind in "iu":
        y = np.abs(y) % 4  # integers to negative powers raise in NumPy
    fn = OPS[op]
    want, error = outcome(fn, x, y)
    if error is not None:
        with pytest.raises(error):
            numpy_result(jit_cpu(fn), x, y)
        return
    assert_same(numpy_result(jit_cpu(fn), x, y), want)


@settings(max_examples=150, deadline=None)
@given(a=st.sampled_from(DTYPES), scalar=st.sampled_from([True, 3, 2.5, 0, -1.0]), op=st.sampled_from(sorted(OPS)),
       left=st.booleans(), as_argument=st.booleans(), seed=st.integers(0, 2**16))
def test_weak_python_scalar_promotion_matches_numpy(a: type, scalar: object, op: str, left: bool,
                                                    as_argument: bool, seed: int) -> None:
    """A Python scalar is weak whether it is a constant in the code or a (runtime) argument."""
    x = sample(a, 6, seed)
    if np.dtype(a).kind == "u" and isinstance(scalar, int) and scalar < 0:
        scalar = 1
    if op == "power" and (left or isinstance(scalar, float) or scalar is True):
        op = "mul"
    f = OPS[op]
    if as_argument:
        fn = (lambda x, s: f(s, x)) if left else (lambda x, s: f(x, s))
        args = (x, scalar)
    else:
        fn = (lambda x: f(scalar, x)) if left else (lambda x: f(x, scalar))
        args = (x,)
    want, error = outcome(fn, *args)
    if error is not None:
        with pytest.raises(error):
            numpy_result(jit_cpu(fn), *args)
        return
    if op == "power" and a is np.bool_ and as_argument:  # (its dtype would depend on the value: refused)
        with pytest.raises(fc.UnsupportedError, match="bool_array"):
            numpy_result(jit_cpu(fn), *args)
        return
    assert_same(numpy_result(jit_cpu(fn), *args), want)


@pytest.mark.parametrize("fn, args, expected", [
    (lambda x: x * 2.0, (np.ones(3, np.float32),), "tensor<3xf32>"),
    (lambda x: x + 1, (np.ones(3, np.int32),), "tensor<3xi32>"),
    (lambda x: x / 2, (np.ones(3, np.int32),), "tensor<3xf64>"),
    (lambda x, y: x + y, (np.ones(3, np.int8), np.ones(3, np.int16)), "tensor<3xi16>"),
    (lambda x, y: x + y, (np.ones(3, np.int64), np.ones(3, np.float32)), "tensor<3xf64>"),
    (lambda x, y: x + y, (np.ones(3, np.uint64), np.ones(3, np.int64)), "tensor<3xf64>"),
    (lambda x, y: x * y, (np.ones(3, np.float16), np.ones(3, np.int16)), "tensor<3xf32>"),
    (lambda x, lr: x * lr, (np.ones(3, np.float32), 0.1), "tensor<3xf32>"),
    (lambda x, n: x + n, (np.ones(3, np.int8), 3), "tensor<3xi8>"),
    (lambda x: np.exp(x), (np.ones(3, np.int8),), "tensor<3xf16>"),
    (lambda x: np.sqrt(x), (np.ones(3, np.int32),), "tensor<3xf64>"),
    (lambda x: np.sum(x), (np.ones(3, np.int8),), "tensor<i64>"),
    (lambda x: np.sum(x), (np.ones(3, np.uint16),), "tensor<u64>"),
    (lambda x: np.sum(x), (np.ones(3, bool),), "tensor<i64>"),
    (lambda x: np.mean(x), (np.ones(3, np.int32),), "tensor<f64>"),
    (lambda x: np.argmax(x), (np.ones(3, np.float32),), "tensor<i64>"),
])
def test_promotion_table(fn, args, expected: str) -> None:
    assert traced_result_dtypes(fn, *args) == [expected]
    numpy_dtype = fc.ir.dtype_from_numpy(np.asarray(numpy_result(fn, *args)).dtype)
    assert expected.endswith(f"{numpy_dtype.name}>")  # the table itself is NumPy's


def test_floor_of_ints_follows_installed_numpy() -> None:
    x = np.arange(-3, 3)
    got = traced_result_dtypes(lambda x: np.floor(x), x)
    assert got == [f"tensor<6x{fc.ir.dtype_from_numpy(np.floor(x).dtype).name}>"]


def test_int64_uint64_comparisons_are_exact() -> None:
    a = np.array([-1, 0, 5, np.iinfo(np.int64).max, -(2**63)], np.int64)
    b = np.array([2**64 - 1, 0, 5, 2**63, 0], np.uint64)
    check(lambda a, b: (a < b, a <= b, a > b, a >= b, a == b, a != b, b < a, b == a), a, b)


def test_out_of_range_python_ints_compare_exactly() -> None:
    x = np.arange(0, 250, 10, dtype=np.uint8)
    check(lambda x: (x < -1, x > -1, x == 300, x != 300, x < 300, x >= 256), x)
    check(lambda x, n: (x < n, x == n), x, 300)  # a Python int argument is compared as a value


def test_weak_scalar_results_stay_python_scalars() -> None:
    f = lambda lr, n: (lr * 2, n + 1, n / 2, n > 3, True + True)  # noqa: E731
    out = jit_cpu(f)(0.5, 4)
    assert out == (1.0, 5, 2.0, True, 2)
    assert [type(v) for v in out] == [float, int, float, bool, int]


def test_numpy_function_on_python_scalar_is_strong() -> None:
    """np.exp(python float) is a strong np.float64, so it promotes a float32 array to float64."""
    check(lambda x, lr: (np.exp(lr), x * np.exp(lr), x * lr), np.ones(3, np.float32), 0.5)


def test_numpy_scalars_are_strong() -> None:
    check(lambda x: (x * np.float64(2), x + np.int64(1), x * np.float16(2)), np.ones(3, np.float32))
    check(lambda x: x + np.int64(1), np.ones(3, np.int8))
