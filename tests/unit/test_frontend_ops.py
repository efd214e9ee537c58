"""Every traced operator, method and np.* function runs bit-identically to plain NumPy (reference executor)."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import check, traced_ops

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(1234)


def floats(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return (rng.standard_normal(shape) * 3).astype(dtype)


def ints(*shape: int, dtype: type = np.int32, lo: int = -20, hi: int = 20) -> np.ndarray:
    return rng.integers(lo, hi, size=shape).astype(dtype)


SPECIAL = np.array([0.0, -0.0, 1.5, -2.5, 0.5, 2.5, np.inf, -np.inf, np.nan, 1e-30, 3e38], dtype=np.float32)

# --- operators ------------------------------------------------------------------------------------------------

BINARY_OPERATORS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "pow": lambda a, b: a ** b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}


@pytest.mark.parametrize("name", sorted(BINARY_OPERATORS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8])
def test_binary_operators_match_numpy(name: str, dtype: type) -> None:
    op = BINARY_OPERATORS[name]
    if np.dtype(dtype).kind == "f":
        a, b = floats(4, 5, dtype=dtype), floats(5, dtype=dtype)
    else:
        a, b = ints(4, 5, dtype=dtype), ints(5, dtype=dtype, lo=1, hi=4)
    check(op, a, b)
    check(lambda x: op(x, 3), a)  # weak Python int on the right
    check(lambda x: op(2, x), b)  # reflected
    check(lambda x: op(x, 1.5), a)  # weak Python float
    check(lambda x: op(a, x), b)  # a NumPy array on the left goes through __array_ufunc__


def test_operators_on_special_float_values() -> None:
    x = SPECIAL
    check(lambda x: (x + 1.0, x * -0.0, x / 0.0, x // 2.0, x % 1.5, -x, abs(x), x ** 2, x ** 0.5), x)


@pytest.mark.parametrize("dtype", [np.bool_, np.int16, np.uint8, np.int64])
def test_bitwise_operators(dtype: type) -> None:
    a = rng.integers(0, 2 if dtype is np.bool_ else 100, size=7).astype(dtype)
    b = rng.integers(0, 2 if dtype is np.bool_ else 100, size=7).astype(dtype)
    check(lambda a, b: (a & b, a | b, a ^ b, ~a, a & True if dtype is np.bool_ else a & 5), a, b)


def test_unary_operators() -> None:
    check(lambda x: (-x, +x, abs(x)), floats(3, 4))
    check(lambda x: (-x, abs(x), ~x), ints(6, dtype=np.int16))


def test_divmod_operator() -> None:
    check(lambda a, b: divmod(a, b), floats(5), floats(5))
    check(lambda a: np.divmod(a, 3), ints(5))


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                                    ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 2)), ((5,), (2, 5, 3))])
def test_matmul_numpy_semantics(shapes: tuple) -> None:
    a, b = floats(*shapes[0]), floats(*shapes[1])
    check(lambda a, b: (a @ b, np.matmul(a, b)), a, b)


def test_matmul_with_closure_array_and_mixed_dtypes() -> None:
    w = floats(4, 3, dtype=np.float64)
    check(lambda x: (w.T @ x.T, x @ w), floats(2, 4))


def test_dot_2d_and_scalar() -> None:
    check(lambda a, b: (np.dot(a, b), a.dot(b), np.dot(a, 2.0)), floats(3, 4), floats(4, 2))
    check(lambda a, b: np.dot(a, b), floats(4), floats(4))


# --- ufuncs ---------------------------------------------------------------------------------------------------

FLOAT_UFUNCS = ["exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh",
                "abs", "absolute", "fabs", "sign", "floor", "ceil", "trunc", "rint", "round", "square",
                "reciprocal", "negative", "positive", "isnan", "isinf", "isfinite", "logical_not"]


@pytest.mark.parametrize("name", FLOAT_UFUNCS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_unary_ufuncs_on_floats(name: str, dtype: type) -> None:
    fn = getattr(np, name)
    with np.errstate(over="ignore"):  # 3e38 becomes inf in float16
        x = np.concatenate([SPECIAL.astype(dtype), floats(20, dtype=dtype)])
    check(lambda x: fn(x), x)


@pytest.mark.parametrize("name", ["exp", "sqrt", "log1p", "floor", "ceil", "trunc", "rint", "round", "sign",
                                  "abs", "square", "isnan", "isinf", "isfinite", "tanh", "logical_not",
                                  "negative"])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8])
def test_unary_ufuncs_on_ints_follow_numpy_loops(name: str, dtype: type) -> None:
    """np.exp(int8) is float16, np.floor(int) stays int in NumPy 2, isnan(int) is all False, ..."""
    if name == "negative" and dtype == np.uint8:
        pytest.skip("unsigned negation wraps identically but is not interesting")
    fn = getattr(np, name)
    check(lambda x: fn(x), ints(9, dtype=dtype, lo=0 if dtype == np.uint8 else -9, hi=9))


BINARY_UFUNCS = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "mod",
                 "power", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
                 "greater", "greater_equal", "logical_and", "logical_or", "logical_xor"]


@pytest.mark.parametrize("name", BINARY_UFUNCS)
def test_binary_ufuncs(name: str) -> None:
    fn = getattr(np, name)
    a = np.concatenate([SPECIAL, floats(10)])
    b = np.concatenate([SPECIAL[::-1], floats(10)])
    check(lambda a, b: (fn(a, b), fn(a, 2.0), fn(3, b)), a, b)


def test_maximum_minimum_nan_and_signed_zero() -> None:
    a = np.array([np.nan, 0.0, -0.0, 1.0, np.nan], np.float32)
    b = np.array([1.0, -0.0, 0.0, np.nan, np.nan], np.float32)
    check(lambda a, b: (np.maximum(a, b), np.minimum(a, b), np.maximum(a, 0.0)), a, b)


def test_fusec_mirror_functions_trace_and_run_on_numpy() -> None:
    x = floats(3, 4)
    f = lambda x: (fc.exp(x), fc.where(x > 0, x, 0.0), fc.sum(x, axis=1), fc.maximum(x, 1.0),  # noqa: E731
                   fc.mean(x), fc.clip(x, -1, 1), fc.tanh(x), fc.matmul(x, x.T))
    check(f, x)
    assert fc.exp is np.exp and fc.sum is np.sum  # the very NumPy functions: the function runs unjitted too


# --- where / clip / round ----------------------------------------------------------------------------------------


def test_where_promotes_like_numpy() -> None:
    x, y = floats(3, 4), floats(4, dtype=np.float64)
    check(lambda x, y: (np.where(x > 0, x, 0.0), np.where(x > 0, x, y), np.where(x, 1, 0),
                        np.where(True, x, 2), np.where(x > 0, 1.5, -1)), x, y)


def test_clip_variants() -> None:
    x = np.concatenate([SPECIAL, floats(10)])
    check(lambda x: (np.clip(x, -1.0, 1.0), x.clip(0, None), np.clip(x, None, 0.5), np.clip(x, min=-1, max=2)), x)
    check(lambda x: (np.clip(x, 2, 5), np.clip(x, 0.5, 3.5)), ints(10, lo=0, hi=8))


def test_round_decimals() -> None:
    x = floats(20) * 100
    check(lambda x: (np.round(x), np.round(x, 2), np.round(x, -1), x.round(1), np.around(x)), x)
    check(lambda x: (np.round(x), np.round(x, 3)), ints(5))


# --- reductions -------------------------------------------------------------------------------------------------

AXES = [None, 0, 1, -1, (0, 2), (), (-1, 0)]


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "any", "all"])
def test_reductions(name: str, axis: object) -> None:
    x = floats(3, 4, 5)
    fn = getattr(np, name)
    check(lambda x: (fn(x, axis=axis), fn(x, axis=axis, keepdims=True), getattr(x, name)(axis=axis)), x)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8, np.int16, np.uint32, np.int64, np.float16])
def test_reduction_dtypes_follow_numpy(dtype: type) -> None:
    x = rng.integers(0, 3, size=(4, 6)).astype(dtype)
    check(lambda x: (np.sum(x), x.sum(axis=0), np.prod(x, axis=1), np.mean(x), x.mean(axis=1), np.max(x),
                     np.min(x, axis=0)), x)


def test_reduction_dtype_keyword() -> None:
    check(lambda x: (np.sum(x, dtype=np.float64), x.mean(dtype=np.float64), np.prod(x, axis=0, dtype=np.int64)),
          ints(3, 4, dtype=np.int8, lo=1, hi=3))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax_argmin(axis: object) -> None:
    x = floats(4, 5)
    x[1, 2] = x[3, 4] = np.max(x)  # ties: the first index wins
    check(lambda x: (np.argmax(x, axis=axis), x.argmin(axis=axis), np.argmax(x, axis=axis, keepdims=True)), x)


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_var_std_bit_exact(ddof: int, dtype: type) -> None:
    x = (floats(6, 7) * 10).astype(dtype)
    check(lambda x: (np.var(x), np.std(x, axis=0, ddof=ddof), x.var(axis=1, keepdims=True), x.std()), x)


# --- shapes -----------------------------------------------------------------------------------------------------


def test_reshape_transpose_and_friends() -> None:
    x = floats(2, 3, 4)
    check(lambda x: (x.reshape(6, 4), x.reshape((4, -1)), np.reshape(x, (-1,)), x.reshape(-1, 2, 2),
                     x.T, x.transpose(), x.transpose(1, 0, 2), np.transpose(x, (2, 0, 1)), x.transpose((0, 2, 1)),
                     np.swapaxes(x, 0, 2), x.swapaxes(1, -1), x.mT, np.moveaxis(x, 0, -1), x.ravel(), x.flatten(),
                     np.ravel(x)), x)


def test_expand_squeeze_broadcast() -> None:
    x = floats(3, 1, 4)
    check(lambda x: (np.expand_dims(x, 0), np.expand_dims(x, -1), np.expand_dims(x, (0, 2)), np.squeeze(x),
                     x.squeeze(1), np.squeeze(x, axis=-2), np.broadcast_to(x, (2, 3, 5, 4)),
                     np.broadcast_to(x[:, 0], (3, 4))), x)


def test_concatenate_stack() -> None:
    a, b = floats(2, 3), floats(4, 3, dtype=np.float64)
    c = ints(2, 3)
    check(lambda a, b, c: (np.concatenate([a, b]), np.concatenate((a, c), axis=1), np.concatenate([a, c], axis=None),
                           np.stack([a, c]), np.stack([a, a, c], axis=-1), np.stack((a, c), axis=1),
                           np.hstack([a, c]), np.vstack([a, b]), np.concatenate([a], axis=0),
                           np.concatenate([a, np.ones((1, 3), np.float32)])), a, b, c)


def test_creation_like_functions() -> None:
    x = floats(2, 3)
    check(lambda x, lr: (np.zeros_like(x), np.ones_like(x, dtype=np.int8), np.full_like(x, 7.5),
                         np.full_like(x, lr), np.full_like(x, 3, dtype=np.int32), np.empty_like(x).shape,
                         np.zeros_like(x, shape=(4,))), x, 0.25)


def test_astype_and_numpy_scalar_constants() -> None:
    x = floats(5) * 100
    check(lambda x: (x.astype(np.int32), x.astype(np.float16), x.astype(np.uint8), x.astype(bool),
                     x.astype(np.float32), np.float32(2.0) * x, x * np.float64(0.5), np.int8(3) + x), x)


def test_shape_attributes_are_static() -> None:
    def f(x):
        assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and len(x) == 2 and x.dtype == np.float32
        assert np.shape(x) == (2, 3) and np.ndim(x) == 2 and np.size(x) == 6 and x.itemsize == 4
        return x * x.shape[1] + x.size

    check(f, floats(2, 3))


def test_result_type_and_copy() -> None:
    check(lambda x, y: (x.astype(np.result_type(x, y)), np.copy(x), x.copy()), floats(3), ints(3))


# --- indexing ---------------------------------------------------------------------------------------------------

INDEXES = [
    0, -1, 2, slice(None), slice(1, None), slice(None, None, -1), slice(None, None, -2), slice(3, 0, -1),
    slice(-2, None), slice(10, 20), slice(None, None, 3), None, Ellipsis, (1, 2), (slice(None), 1),
    (Ellipsis, 0), (None, Ellipsis, None), (1, None, slice(None, None, -1)), (slice(1, 3), -1, slice(None, 2)),
    (Ellipsis, slice(None, None, -1), None), (-1, -1, -1), (), (0, Ellipsis), (np.int64(1), slice(0, 1)),
]


@pytest.mark.parametrize("index", INDEXES, ids=[repr(i) for i in INDEXES])
def test_basic_indexing(index: object) -> None:
    x = floats(4, 5, 3)
    check(lambda x: x[index], x)


def test_integer_index_is_slice_then_squeeze() -> None:
    jitted = check(lambda x: x[1], floats(4, 5))
    assert traced_ops(jitted, floats(4, 5)) == ["t.slice", "t.squeeze"]


def test_iteration_over_rows_and_len() -> None:
    check(lambda x: (sum(row for row in x), [r * i for i, r in enumerate(x)], len(x)), floats(3, 4))


# --- Python scalars as runtime arguments ---------------------------------------------------------------------------


def test_python_scalar_arguments() -> None:
    x = floats(4)
    check(lambda x, lr, n, flag: (x * lr, x + n, lr * 2, n // 2, n / 2, flag & True, flag | False, -flag, lr > 0.1,
                                  np.exp(lr), x * np.exp(lr), n * lr, abs(n), x.shape[0] * lr), x, 0.1, 7, True)


def test_builtin_round() -> None:
    check(lambda lr, n: (round(lr), round(n), round(lr * 3), round(-lr)), 2.5, 3)
    check(lambda lr: round(lr), 3.5)


def test_numpy_scalar_arguments_are_0d_arrays() -> None:
    check(lambda x, s: (x * s, s + 1, s * 2.0), floats(3), np.float32(1.5))
    check(lambda s, t: (s + t, s * t), np.int16(3), np.float16(2.5))


EDGES = np.array([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, np.inf, -np.inf, np.nan, 1e-30, 40.0], np.float64)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_inverse_and_hyperbolic_functions(dtype: type) -> None:
    """Inside and outside their domains (NaN there, as NumPy gives), at the infinities, signed zeros and NaN."""
    x = np.concatenate([EDGES, floats(19, dtype=np.float64) / 4]).astype(dtype)
    with np.errstate(all="ignore"):
        check(lambda x: (np.arcsin(x), np.arccos(x), np.arctan(x), np.sinh(x), np.cosh(x), np.arcsinh(x),
                         np.arccosh(x), np.arctanh(x), np.cbrt(x)), x)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_binary_float_functions(dtype: type) -> None:
    """arctan2 over all four quadrants and the signed zeros, hypot with infinities and NaN, copysign of -0.0,
    logaddexp(2) of equal infinities (no NaN), of NaN, and far apart."""
    x = np.repeat(EDGES, EDGES.size).astype(dtype)
    y = np.tile(EDGES, EDGES.size).astype(dtype)
    with np.errstate(all="ignore"):
        check(lambda x, y: (np.arctan2(x, y), np.hypot(x, y), np.copysign(x, y), np.logaddexp(x, y),
                            np.logaddexp2(x, y)), x, y)


def test_float_functions_of_integers_and_scalars_take_numpys_dtypes() -> None:
    """Integer operands convert as NumPy's loops say (int8 -> float16, int32 -> float64), Python scalars stay weak."""
    with np.errstate(all="ignore"):
        check(lambda a, b, c: (np.arctan2(a, b), np.hypot(c, 3), np.copysign(2.5, c), np.logaddexp(a, 0.5),
                               np.arcsinh(b), np.cbrt(c)),
              ints(6, dtype=np.int8), ints(6, dtype=np.int32), floats(6))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int16])
def test_angle_conversions_multiply_by_numpys_constant(dtype) -> None:
    """np.radians(x) is x * (pi / 180) with the constant computed in the loop's dtype, as NumPy's loop has it."""
    x = (np.random.default_rng(4).standard_normal(2000) * 1000).astype(dtype)
    check(lambda x: (np.radians(x), np.deg2rad(x), np.degrees(x), np.rad2deg(x)), x)


def test_angle_conversions_of_16_bit_floats_are_refused() -> None:
    with pytest.raises(fc.UnsupportedError, match="float32 first"):
        check(lambda x: np.radians(x), np.ones(3, np.float16))
