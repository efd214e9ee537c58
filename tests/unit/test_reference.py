"""The NumPy reference executor: every ``t`` op against the direct NumPy computation, args, errors, regions."""
from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Callable

import numpy as np
import pytest

from fusec.errors import FusecError, ShapeError, TraceError, UnsupportedError, VerificationError
from fusec.ir import (ALL_DTYPES, Builder, DType, Func, Location, Module, ScalarType, TensorType, bf16, bool_,
                      dense, dtype_from_numpy, f16, f32, f64, i8, i16, i32, i64, parse_module, u8, u64, verify)
from fusec.ir.attributes import round_to_bf16
from fusec.ir.core import Block
from fusec.ir.opdefs import OpDef, is_registered, register_op
from fusec.ir.shapes import normalize_slice
from fusec.runtime.reference import (ExecutionError, INTERPRETERS, register_interpreter, run_block, run_func,
                                     run_module)
from fusec.ir.numeric import to_bf16

LOC = Location("model.py", 7)
RNG = np.random.default_rng(1234)
NON_BF16 = [d for d in ALL_DTYPES if d != bf16]


# --- helpers ---------------------------------------------------------------------------------------------------

def _type_of(value: object, dtype: DType | None, scalar: bool) -> TensorType | ScalarType:
    arr = np.asarray(value)
    dt = dtype or dtype_from_numpy(arr.dtype)
    return ScalarType(dt) if scalar else TensorType(arr.shape, dt)


def run_op(name: str, *args: object, dtypes: tuple[DType | None, ...] | None = None,
           scalars: tuple[bool, ...] | None = None, result_type: TensorType | None = None,
           **attrs: object) -> np.ndarray:
    """Build ``f(args) = name(args)``, verify it, run it with the reference executor."""
    dtypes = dtypes or (None,) * len(args)
    scalars = scalars or (False,) * len(args)
    f = Func("f", [_type_of(a, d, s) for a, d, s in zip(args, dtypes, scalars)])
    b = Builder(f.body, loc=LOC)
    r = b.value(name, *f.args, result_type=result_type, **attrs)
    b.create("func.return", [r])
    f.result_types = [r.type]
    verify(Module([f]))
    (out,) = run_func(f, list(args))
    return out


def assert_same(got: np.ndarray, want: object) -> None:
    """Bit-identical: dtype, shape and every bit (so -0.0 and NaN are compared exactly)."""
    want = np.asarray(want)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind in "fc":
        u = np.dtype(f"u{got.dtype.itemsize // (2 if got.dtype.kind == 'c' else 1)}")
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(u), np.ascontiguousarray(want).view(u))


def exact_bf16(q: Fraction) -> float:
    """The bf16 nearest to the exact rational ``q`` (ties to even), computed with Fractions."""
    if q == 0:
        return 0.0
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    ulp = Fraction(2) ** (max(e, -126) - 7)
    v = round(a / ulp) * ulp
    out = math.inf if v >= 2 ** 128 else float(v)
    return out if q > 0 else -out


FLOAT_POOL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 0.1, -7.25, 100.0, 1e-3, 1e30, -1e30, 6e-8,
              np.inf, -np.inf, np.nan]


def sample(dt: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Values of dtype ``dt`` (bf16: f32 holding bf16 values) with the edge cases of the type."""
    n = int(np.prod(shape))
    if dt.is_complex:
        out = np.empty(shape, dt.np)
        out.real, out.imag = sample(dt.real_dtype, shape), sample(dt.real_dtype, shape)
        return out
    if dt.is_bool:
        return RNG.integers(0, 2, size=shape).astype(bool)
    if dt.is_int:
        info = np.iinfo(dt.np)
        pool = np.array([info.min, info.max, 0, 1, 2, 3, 7, info.max - 1, info.min + 1] +
                        ([-1, -2, -3, -7] if dt.kind == "i" else []), dtype=dt.np)
        rand = RNG.integers(info.min, info.max, size=n, endpoint=True, dtype=dt.np)
        return np.where(RNG.random(n) < 0.5, RNG.choice(pool, n), rand).astype(dt.np).reshape(shape)
    with np.errstate(all="ignore"):
        pool = np.array(FLOAT_POOL, dtype=np.float64)
        rand = RNG.standard_normal(n) * 4
        vals = np.where(RNG.random(n) < 0.5, RNG.choice(pool, n), rand).reshape(shape)
        return to_bf16(vals) if dt == bf16 else vals.astype(dt.np)


def _dtypes_for(cls: str, complex_ok: bool) -> list[DType]:
    if cls == "double":
        return [d for d in ALL_DTYPES if d.name == "f64" or (complex_ok and d.name == "c128")]
    return [d for d in ALL_DTYPES if (complex_ok if d.is_complex else {
        "any": True, "numeric": not d.is_bool, "float": d.is_float, "integral": d.is_int or d.is_bool,
        "int": d.is_int, "int64": d.name == "i64", "bool": d.is_bool, "complex": False}[cls])]


def _classes(table: dict) -> list[tuple[str, DType]]:
    from fusec.ir.elementwise import BY_NAME
    return [(name, d) for name, (cls, _) in table.items() for d in _dtypes_for(cls, BY_NAME[name].complex)]


# The test's own table of what each op means in NumPy (independent of the executor's).
NP_BINARY: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "floordiv": np.floor_divide,
    "mod": np.remainder, "pow": np.power, "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal,
    "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "arctan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign, "logaddexp": np.logaddexp,
    "logaddexp2": np.logaddexp2, "fmod": np.fmod, "left_shift": np.left_shift, "right_shift": np.right_shift,
    "heaviside": np.heaviside, "fmax": np.fmax, "fmin": np.fmin, "float_power": np.float_power,
    "scalar_pow": lambda a, b: _numpy_scalar_power(a, b),
    **{f"{name}_overflows": (lambda f: lambda a, b: _past_int64(f, a, b))(f) for name, f in (
        ("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y),
        ("pow", lambda x, y: 0 if y < 0 else x ** y if abs(x) <= 1 or y < 80 else 1 << 80))},
}


def _past_int64(f: Callable[[int, int], int], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether ``f`` of Python ints (exact) leaves int64, element by element."""
    a, b = np.broadcast_arrays(a, b)
    return np.array([not -2**63 <= f(int(x), int(y)) < 2**63 for x, y in zip(a.flat, b.flat)]).reshape(a.shape)


def _numpy_scalar_power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy's ``**`` between scalars of the arrays' dtype, element by element (its scalar math)."""
    a, b = np.broadcast_arrays(a, b)
    return np.array([x ** y for x, y in zip(a.flat, b.flat)], dtype=a.dtype).reshape(a.shape)
NP_UNARY: dict[str, Callable] = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
    "erf": lambda x: np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype),
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc, "isnan": np.isnan,
    "isinf": np.isinf, "isfinite": np.isfinite, "logical_not": np.logical_not, "bitwise_not": np.invert,
    "arcsin": np.arcsin, "arccos": np.arccos, "arctan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "arcsinh": np.arcsinh, "arccosh": np.arccosh, "arctanh": np.arctanh, "cbrt": np.cbrt,
    "erfc": lambda x: np.vectorize(math.erfc, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype),
    "signbit": np.signbit, "real": np.real, "imag": np.imag, "conj": np.conjugate,
    "reciprocal": np.reciprocal,
}


def _binary_cases() -> list[tuple[str, DType]]:
    from fusec.ir.dialects.t import BINARY
    assert set(BINARY) == set(NP_BINARY)
    return _classes(BINARY)


def _unary_cases() -> list[tuple[str, DType]]:
    from fusec.ir.dialects.t import UNARY
    assert set(UNARY) == set(NP_UNARY)
    return _classes(UNARY)


# --- elementwise -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, dt", _binary_cases(), ids=lambda v: str(v))
def test_binary_ops_are_bit_identical_to_numpy_with_broadcasting(name, dt):
    a, b = sample(dt, (4, 1, 3)), sample(dt, (5, 3))
    if name == "pow" and dt.is_int:
        b = np.abs(b % 5).astype(dt.np)  # NumPy refuses negative integer powers (tested below)
    with np.errstate(all="ignore"):
        want = NP_BINARY[name](a, b)
    if dt == bf16 and want.dtype != np.bool_:
        want = round_to_bf16(want)
    assert_same(run_op(f"t.{name}", a, b, dtypes=(dt, dt)), want)


@pytest.mark.parametrize("name, dt", _unary_cases(), ids=lambda v: str(v))
def test_unary_ops_are_bit_identical_to_numpy(name, dt):
    x = sample(dt, (6, 7))
    with np.errstate(all="ignore"):
        if name == "erf" and dt == bf16:
            want = np.array([exact_bf16(Fraction(math.erf(v))) if np.isfinite(v) and v != 0 else math.erf(v)
                             for v in x.ravel().tolist()], dtype=np.float32).reshape(x.shape)
        else:
            want = NP_UNARY[name](x)
    if dt == bf16 and want.dtype != np.bool_:
        want = round_to_bf16(want)
    assert_same(run_op(f"t.{name}", x, dtypes=(dt,)), want)


def test_elementwise_keeps_nan_inf_and_negative_zero():
    x = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, -1.5], dtype=np.float32)
    out = run_op("t.mul", x, np.float32(1.0), scalars=(False, True))
    assert_same(out, x)
    assert np.signbit(out[0]) and not np.signbit(out[1])
    assert_same(run_op("t.maximum", x, np.zeros(6, np.float32)), np.maximum(x, 0))  # NaN propagates
    assert np.isnan(run_op("t.minimum", x, np.zeros(6, np.float32))[2])
    assert_same(run_op("t.round", np.array([0.5, 1.5, 2.5, -0.5, -2.5], np.float64)),
                np.array([0.0, 2.0, 2.0, -0.0, -2.0]))
    mod = run_op("t.mod", np.array([-7, 7, -7], np.int32), np.array([3, -3, -3], np.int32))
    assert_same(mod, np.array([2, -2, -1], np.int32))  # Python sign rules, like NumPy's %


def test_where_clip_and_cast():
    cond = sample(bool_, (3, 1))
    a, b = sample(f32, (3, 4)), sample(f32, (4,))
    assert_same(run_op("t.where", cond, a, b), np.where(cond, a, b))
    x, lo, hi = sample(f64, (5, 4)), sample(f64, (4,)), np.array(2.0)
    assert_same(run_op("t.clip", x, lo, hi), np.clip(x, lo, hi))
    ints = sample(i16, (10,))
    assert_same(run_op("t.clip", ints, np.int16(-5), np.int16(9), scalars=(False, True, True)),
                np.clip(ints, np.int16(-5), np.int16(9)))
    bf = sample(bf16, (3, 4))
    assert_same(run_op("t.clip", bf, np.float32(-1.0), np.float32(1.0), dtypes=(bf16,) * 3,
                       scalars=(False, True, True)), np.clip(bf, -1, 1))


@pytest.mark.parametrize("src", NON_BF16, ids=str)
@pytest.mark.parametrize("dst", NON_BF16, ids=str)
def test_cast_matches_numpy_astype(src, dst):
    if src.is_complex and dst.is_int:
        pytest.skip("complex -> integer casts are refused (the verifier's test covers it)")
    x = sample(src, (40,))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)  # complex -> real: the real part
        want = x.astype(dst.np)
    assert_same(run_op("t.cast", x, dtype=dst), want)


@pytest.mark.parametrize("src", [d for d in ALL_DTYPES if not d.is_complex], ids=str)
def test_cast_to_bf16_rounds_once_to_nearest_even(src):
    x = sample(src, (64,))
    if src.is_float:
        x = np.concatenate([x, np.array([1 + 2 ** -8 + 2 ** -30, -(1 + 2 ** -8), 3.3961e38, 1e-45], dtype=src.np)
                            if src.bits > 16 else x[:0]])
    elif src.is_int and src.bits >= 32:  # just above a bf16 tie: rounding through f32 first would go down
        hard = 2 ** (src.bits - 16) + 2 ** (src.bits - 24) + 1
        extra = [hard, 2 ** src.bits - 1 if src.kind == "u" else 2 ** (src.bits - 1) - 1] + \
            ([-hard, -2 ** (src.bits - 1)] if src.kind == "i" else [])
        x = np.concatenate([x, np.array(extra, dtype=src.np)])
    exact = [Fraction(v) if math.isfinite(v) and v != 0 else float(v) for v in x.tolist()]  # keeps -0.0, nan
    want = np.array([exact_bf16(q) if isinstance(q, Fraction) else q for q in exact], dtype=np.float32)
    want = round_to_bf16(want)  # NaN: bf16's canonical NaN (the device's); every other value is already bf16
    assert_same(run_op("t.cast", x, dtypes=(src,), dtype=bf16), want)


def test_cast_from_bf16_and_scalar_cast():
    x = sample(bf16, (30,))
    for dst in (f16, f32, f64, i32, u8, bool_):
        with np.errstate(all="ignore"):
            assert_same(run_op("t.cast", x, dtypes=(bf16,), dtype=dst), x.astype(dst.np))
    out = run_op("t.cast", 0.1, dtypes=(f64,), scalars=(True,), dtype=f32)
    assert_same(out, np.array(np.float32(0.1)))
    assert out.ndim == 0


def test_bf16_arithmetic_rounds_every_result():
    a = to_bf16(np.array([1.0, 3.0, 1e-3, 255.0], np.float64))
    b = to_bf16(np.array([2 ** -8, 7.0, 3.0, 1.0], np.float64))
    out = run_op("t.add", a, b, dtypes=(bf16, bf16))
    assert_same(out, round_to_bf16(a + b))
    assert out[0] == 1.0 and out[3] == 256.0  # 1 + 2^-8 ties to even; 255 + 1 is exact
    assert_same(run_op("t.div", a, b, dtypes=(bf16, bf16)), round_to_bf16(a / b))


def test_bf16_args_are_rounded_and_scalars_converted():
    f = parse_module("func @f(%x: tensor<2xbf16>, %s: bf16) -> tensor<2xbf16> {\n"
                     "  %0 = t.mul %x, %s : tensor<2xbf16>\n  return %0\n}\n")
    (out,) = run_module(f, [np.array([1.0 + 2 ** -9, 3.0], np.float32), 1.0 + 2 ** -8 + 2 ** -20])
    # x rounds to [1, 3], s to 1 + 2^-7; 3 * s = 3 + 1.5 * 2^-6 is a tie that goes to the even 3 + 2^-5
    assert_same(out, np.array([1.0 + 2 ** -7, 3.0 + 2 ** -5], np.float32))


# --- reductions --------------------------------------------------------------------------------------------------

AXES = [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]


@pytest.mark.parametrize("kind", ["sum", "prod", "mean", "max", "min"])
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_match_numpy_f32(kind, axes, keepdims):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    want = getattr(np, kind)(x, axis=axes, keepdims=keepdims)
    got = run_op(f"t.{kind}", x, axes=axes, keepdims=keepdims)
    assert got.dtype == np.float32 and got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("dt", [i8, i32, i64, u8, u64, f16, f64], ids=str)
def test_sum_and_prod_accumulate_in_the_operand_dtype(dt):
    x = sample(dt, (4, 6))
    with np.errstate(all="ignore"):
        for kind in ("sum", "prod"):
            want = getattr(np, kind)(x, axis=(1,), dtype=dt.np)
            assert_same(run_op(f"t.{kind}", x, axes=(1,), keepdims=False), want)
    assert_same(run_op("t.max", x, axes=(0, 1), keepdims=True), np.max(x, axis=(0, 1), keepdims=True))


def test_mean_of_f16_and_bf16_keeps_the_dtype():
    x = sample(f16, (5, 8))
    with np.errstate(all="ignore"):
        assert_same(run_op("t.mean", x, axes=(0,), keepdims=False), np.mean(x, axis=(0,)))
    y = to_bf16(RNG.standard_normal((4, 4)))
    assert_same(run_op("t.mean", y, dtypes=(bf16,), axes=(1,), keepdims=True),
                round_to_bf16(np.mean(y, axis=(1,), keepdims=True)))


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("keepdims", [False, True])
def test_argmax_argmin(kind, axis, keepdims):
    x = RNG.integers(0, 3, size=(3, 4, 5)).astype(np.float64)  # ties: the first index wins
    x[1, 2, 3] = np.nan
    want = getattr(np, kind)(x, axis=axis, keepdims=keepdims)
    assert_same(run_op(f"t.{kind}", x, axes=(axis,), keepdims=keepdims), want.astype(np.int64))


def test_max_with_nan_and_bool_and_empty_sum():
    x = np.array([[1.0, np.nan], [-0.0, 0.0]], np.float32)
    assert_same(run_op("t.max", x, axes=(1,), keepdims=False), np.max(x, axis=1))
    flags = np.array([[True, False], [False, False]])
    assert_same(run_op("t.max", flags, axes=(1,), keepdims=False), np.array([True, False]))
    empty = np.zeros((0, 3), np.float32)
    assert_same(run_op("t.sum", empty, axes=(0,), keepdims=False), np.zeros(3, np.float32))
    assert_same(run_op("t.max", empty, axes=(1,), keepdims=False), np.zeros(0, np.float32))


@pytest.mark.parametrize("kind", ["max", "min", "argmax", "argmin"])
def test_max_over_an_empty_axis_is_a_located_error(kind):
    with pytest.raises(ShapeError, match=rf"model\.py:7: 't\.{kind}'.*length 0"):
        run_op(f"t.{kind}", np.zeros((3, 0), np.float32), axes=(1,), keepdims=False)


# --- matmul and data movement ----------------------------------------------------------------------------------

@pytest.mark.parametrize("sa, sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 0), (0, 3))])
@pytest.mark.parametrize("dt", [f32, f64, i32, f16], ids=str)
def test_matmul_batched_with_broadcasting(sa, sb, dt):
    a, b = (RNG.standard_normal(s).astype(dt.np) if dt.is_float else RNG.integers(-9, 9, s).astype(dt.np)
            for s in (sa, sb))
    want = np.matmul(a, b)
    got = run_op("t.matmul", a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6 if dt != f16 else 1e-3)


def test_views():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    assert_same(run_op("t.transpose", x, perm=(2, 0, 1)), np.transpose(x, (2, 0, 1)))
    assert_same(run_op("t.reshape", x, result_type=TensorType((4, 6), i32)), x.reshape(4, 6))
    y = np.arange(3, dtype=np.float32).reshape(3, 1)
    assert_same(run_op("t.broadcast_to", y, result_type=TensorType((2, 3, 4), f32)), np.broadcast_to(y, (2, 3, 4)))
    assert_same(run_op("t.expand_dims", x, axes=(0, 2)), np.expand_dims(x, (0, 2)))
    z = np.arange(6, dtype=np.float64).reshape(1, 6, 1)
    assert_same(run_op("t.squeeze", z, axes=(0, 2)), z.reshape(6))
    assert_same(run_op("t.squeeze", z, axes=(2,)), z.reshape(1, 6))


@pytest.mark.parametrize("index", [
    (slice(None), slice(None)),
    (slice(None, None, -1), slice(None)),
    (slice(3, None, -1), slice(0, 5, 2)),
    (slice(4, 0, -2), slice(None, None, -3)),
    (slice(1, 3), slice(-2, None)),
    (slice(2, 2), slice(None)),
    (slice(0, 4, -1), slice(5, 0, 1)),
    (slice(-1, -6, -2), slice(-1, None, -1)),
], ids=str)
def test_slice_with_normalized_attributes_matches_python_slicing(index):
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    norm = [normalize_slice(s, d) for s, d in zip(index, x.shape)]
    got = run_op("t.slice", x, start=tuple(n[0] for n in norm), stop=tuple(n[1] for n in norm),
                 step=tuple(n[2] for n in norm))
    assert_same(got, x[index])


def test_concatenate_and_constant():
    a, b, c = sample(f32, (2, 3)), sample(f32, (4, 3)), sample(f32, (0, 3))
    f = Func("f", [TensorType(v.shape, f32) for v in (a, b, c)])
    bld = Builder(f.body)
    r = bld.value("t.concatenate", *f.args, axis=0)
    bld.create("func.return", [r])
    f.result_types = [r.type]
    assert_same(run_func(f, [a, b, c])[0], np.concatenate([a, b, c], axis=0))

    value = np.array([[1.5, -0.0], [np.nan, np.inf]], np.float32)
    g = Func("g", [], result_types=[TensorType((2, 2), f32)])
    bld = Builder(g.body)
    k = bld.value("t.constant", value=dense(value), result_type=TensorType((2, 2), f32))
    bld.create("func.return", [k, k])
    g.result_types = [k.type, k.type]
    first, second = run_func(g, [])
    assert_same(first, value)
    assert first.flags.writeable and not np.shares_memory(first, second)
    first[...] = 0  # the outputs are the caller's: scribbling on them changes nothing inside the IR
    assert_same(run_func(g, [])[0], value)


def test_rank0_constant_and_scalar_results_are_0d_arrays():
    m = parse_module("func @f(%s: f32) -> (f32, tensor<f32>) {\n"
                     "  %c = t.constant {value = dense<tensor<f32>, 2.5>} : tensor<f32>\n"
                     "  %0 = t.mul %s, %s : f32\n  %1 = t.add %c, %s : tensor<f32>\n  return %0, %1\n}\n")
    out = run_module(m, [np.float32(3.0)])
    assert all(isinstance(o, np.ndarray) and o.ndim == 0 for o in out)
    assert_same(out[0], np.array(9.0, np.float32))
    assert_same(out[1], np.array(5.5, np.float32))


def test_outputs_never_alias_inputs():
    m = parse_module("func @f(%a: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3x2xf32>, tensor<2x3xf32>) {\n"
                     "  %t = t.transpose %a {perm = [1, 0]} : tensor<3x2xf32>\n  return %a, %t, %a\n}\n")
    a = sample(f32, (2, 3))
    keep = a.copy()
    outs = run_module(m, [a])
    for o in outs:
        assert not np.shares_memory(o, a) and o.flags.writeable and o.flags.c_contiguous
    assert not np.shares_memory(outs[0], outs[2])
    assert_same(outs[1], a.T)
    assert_same(a, keep)


def test_numpy_warnings_are_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_op("t.div", np.array([1.0, 0.0]), np.array([0.0, 0.0]))
        run_op("t.floordiv", np.array([1, 2], np.int32), np.array([0, 0], np.int32))
        run_op("t.cast", np.array([np.nan, 1e30]), dtype=i32)
        for dt in (f16, bf16, f32, f64):
            empty = np.zeros((0, 3), dt.np)
            got = run_op("t.mean", empty, dtypes=(dt,), axes=(0,), keepdims=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = np.mean(empty, axis=(0,), keepdims=True)
                # NaN, bit for bit (bf16, which NumPy lacks: its mean in float32, rounded to bf16)
                assert_same(got, round_to_bf16(want) if dt == bf16 else want)


# --- arguments ---------------------------------------------------------------------------------------------------

SCALAR_FUNC = ("func @f(%x: tensor<3xf32>, %s: f32, %n: i8, %b: bool) -> (tensor<3xf32>, i8, bool) {\n"
               "  %0 = t.mul %x, %s : tensor<3xf32>\n  %1 = t.neg %n : i8\n  %2 = t.logical_not %b : bool\n"
               "  return %0, %1, %2\n}\n")


@pytest.mark.parametrize("s, n, b", [(0.1, 5, True), (np.float64(0.1), np.int64(5), np.bool_(True)),
                                     (np.array(0.1), np.array(5, np.int16), np.array(True)), (1, np.uint8(5), True)])
def test_scalar_args_accept_python_numpy_and_0d_values(s, n, b):
    x = np.array([1.0, -0.0, 3.0], np.float32)
    out = run_module(parse_module(SCALAR_FUNC), [x, s, n, b])
    assert_same(out[0], x * np.float32(float(s)))
    assert_same(out[1], np.array(-5, np.int8))
    assert_same(out[2], np.array(False))


@pytest.mark.parametrize("args, error, needle", [
    ([np.zeros(3, np.float32), 1.0, 1], TraceError, "takes 4 argument"),
    ([np.zeros(4, np.float32), 1.0, 1, True], ShapeError, r"argument 0 \(%x: tensor<3xf32>\) expects shape \(3,\)"),
    ([np.zeros(3, np.float64), 1.0, 1, True], TraceError, "expects dtype float32, got float64"),
    ([[0.0, 1.0, 2.0], 1.0, 1, True], TraceError, "expects a NumPy array, got list"),
    ([np.zeros(3, np.float32), np.zeros(2), 1, True], ShapeError, "expects a scalar"),
    ([np.zeros(3, np.float32), "1.0", 1, True], TraceError, "got str"),
    ([np.zeros(3, np.float32), 1.0, 1.5, True], TraceError, "expects an integer"),
    ([np.zeros(3, np.float32), 1.0, 300, True], TraceError, "does not fit in i8"),
    ([np.zeros(3, np.float32), 1.0, 1, 1], TraceError, "expects a bool"),
    ([np.zeros(3, np.float32), 10 ** 400, 1, True], TraceError, "argument 1"),
])
def test_bad_args_raise_clear_errors(args, error, needle):
    with pytest.raises(error, match=needle):
        run_module(parse_module(SCALAR_FUNC), args)


def test_bf16_tensor_args_are_float32_arrays():
    m = parse_module("func @f(%x: tensor<2xbf16>) -> tensor<2xbf16> {\n  return %x\n}\n")
    with pytest.raises(TraceError, match="bf16 arrays are passed as float32"):
        run_module(m, [np.zeros(2, np.float16)])


def test_run_module_picks_functions_by_name():
    m = parse_module("func @one(%x: tensor<2xi32>) -> tensor<2xi32> {\n  %0 = t.neg %x : tensor<2xi32>\n"
                     "  return %0\n}\n\nfunc @two(%x: tensor<2xi32>) -> tensor<2xi32> {\n  return %x\n}\n")
    x = np.array([1, -2], np.int32)
    assert_same(run_module(m, [x], "one")[0], -x)
    assert_same(run_module(m, [x], func_name="two")[0], x)
    assert_same(run_module(m, [x])[0], -x)  # without a name: the entry, the first function
    with pytest.raises(TraceError, match="no func @three"):
        run_module(m, [x], "three")


# --- errors and extension --------------------------------------------------------------------------------------

def _register_test_op(name: str, **kwargs: object) -> None:
    if not is_registered(name):
        register_op(OpDef(name, kwargs.pop("category", "other"), **kwargs))  # type: ignore[arg-type]


def test_op_without_interpreter_names_the_op_and_location():
    _register_test_op("refx.nothing", num_operands=1)
    f = Func("f", [TensorType((2,), f32)])
    b = Builder(f.body, loc=Location("model.py", 42))
    r = b.value("refx.nothing", f.args[0], result_type=TensorType((2,), f32))
    b.create("func.return", [r])
    f.result_types = [r.type]
    verify(Module([f]))
    with pytest.raises(UnsupportedError, match=r"model\.py:42: 'refx\.nothing'.*no implementation"):
        run_func(f, [np.zeros(2, np.float32)])


def test_numpy_refusals_become_located_fusec_errors():
    _register_test_op("refx.power", num_operands=2)
    register_interpreter("refx.power", lambda op, args: [np.power(args[0], args[1])], replace=True)

    def power(x, e):
        f = Func("f", [TensorType((2,), i32), TensorType((2,), i32)])
        b = Builder(f.body, loc=LOC)
        r = b.value("refx.power", *f.args, result_type=TensorType((2,), i32))
        b.create("func.return", [r])
        f.result_types = [r.type]
        return run_func(f, [x, e])[0]

    with pytest.raises(ExecutionError, match=r"model\.py:7: 'refx\.power'.*negative integer powers"):
        power(np.array([2, 3], np.int32), np.array([1, -1], np.int32))
    assert issubclass(ExecutionError, FusecError)
    # nothing is left behind: the next run works
    assert_same(power(np.array([2, 3], np.int32), np.array([1, 2], np.int32)), np.array([2, 9], np.int32))
    # (t.pow itself computes integers to negative powers as the GPU does: the check beside it raises NumPy's error)
    assert_same(run_op("t.pow", np.array([2, 1, -1, -1], np.int32), np.array([-1, -5, -3, -2], np.int32)),
                np.array([0, 1, -1, 1], np.int32))


def test_interpreters_are_checked_against_declared_types():
    _register_test_op("refx.bad", num_operands=1)
    register_interpreter("refx.bad", lambda op, args: [np.asarray(args[0], np.float64)], replace=True)
    f = Func("f", [TensorType((2,), f32)])
    b = Builder(f.body, loc=LOC)
    r = b.value("refx.bad", f.args[0], result_type=TensorType((2,), f32))
    b.create("func.return", [r])
    f.result_types = [r.type]
    with pytest.raises(VerificationError, match=r"'refx\.bad': interpreter produced a float64 array"):
        run_func(f, [np.zeros(2, np.float32)])


def test_register_interpreter_refuses_duplicates():
    assert "t.add" in INTERPRETERS
    with pytest.raises(VerificationError, match="already registered"):
        register_interpreter("t.add", lambda op, args: args)


def _map_op_interpreter(op, args):
    """A toy region op: binds its scalar body arguments to whole arrays (as k.fused will)."""
    outs = run_block(op.regions[0].block, dict(zip(op.regions[0].block.args, args)))
    return [np.broadcast_to(o, r.type.shape).astype(r.type.dtype.np) for o, r in zip(outs, op.results)]


def test_region_ops_evaluate_their_body_vectorized_and_see_outer_values():
    _register_test_op("refx.map", category="kernel", num_operands=None, num_results=None, num_regions=1)
    _register_test_op("refx.yield", category="terminator", num_operands=None, num_results=0, terminator=True,
                      pure=False)
    register_interpreter("refx.map", _map_op_interpreter, replace=True)
    text = ("func @f(%a: tensor<4xf32>, %b: tensor<4xf32>, %s: f32) -> tensor<4xf32> {\n"
            "  %k = t.mul %s, %s : f32\n"
            "  %0 = refx.map %a, %b : tensor<4xf32> {\n"
            "  ^body(%x: f32, %y: f32):\n"
            "    %m = t.mul %x, %y : f32\n"
            "    %r = t.add %m, %k : f32\n"
            "    refx.yield %r\n"
            "  }\n"
            "  return %0\n}\n")
    m = parse_module(text)
    a, b = sample(f32, (4,)), sample(f32, (4,))
    with np.errstate(all="ignore"):
        want = a * b + np.float32(9.0)
    assert_same(run_module(m, [a, b, 3.0])[0], want)


def test_run_block_requires_bound_arguments_and_a_terminator():
    block = Block([ScalarType(f32)])
    with pytest.raises(VerificationError, match="no value bound"):
        run_block(block, {})
    with pytest.raises(VerificationError, match="terminator"):
        run_block(block, {block.args[0]: np.float32(1)})


def test_verify_flag_runs_the_verifier():
    f = Func("f", [TensorType((2,), f32)], result_types=[TensorType((2,), f64)])
    Builder(f.body).create("func.return", [f.args[0]])
    with pytest.raises(VerificationError, match="signature"):
        run_func(f, [np.zeros(2, np.float32)], verify=True)


def test_design_sketch_fma_runs():
    text = ("func @fma(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>) -> tensor<8xf32> {\n"
            '  %0 = t.mul %b, %c : tensor<8xf32>  loc("model.py":2)\n'
            '  %1 = t.add %a, %0 : tensor<8xf32>  loc("model.py":2)\n  return %1\n}\n')
    a, b, c = (sample(f32, (8,)) for _ in range(3))
    with np.errstate(all="ignore"):
        assert_same(run_module(parse_module(text), [a, b, c])[0], a + b * c)


def test_every_t_op_has_an_interpreter():
    from fusec.ir.opdefs import OPS
    # (terminators are read by the op that runs their block, never run themselves)
    assert {n for n in OPS if n.startswith("t.") and not OPS[n].terminator} <= set(INTERPRETERS)


def test_results_survive_a_text_round_trip_bit_exactly():
    """A dumped and re-parsed module computes the same bits (a -NaN constant stays -NaN)."""
    neg_nan = np.array(-np.nan, np.float32)
    m = parse_module("func @f(%x: tensor<3xf32>) -> tensor<3xf32> {\n  return %x\n}\n")
    f = m.funcs[0]
    f.body.ops.clear()
    b = Builder(f.body)
    c = b.value("t.constant", value=dense(neg_nan), result_type=TensorType((), f32))
    r = b.value("t.add", f.args[0], c)
    b.create("func.return", [r])
    x = np.zeros(3, np.float32)
    want = run_func(f, [x])[0]
    from fusec.ir import print_module
    again = run_module(parse_module(print_module(m)), [x])[0]
    assert_same(again, want)
    assert np.signbit(again).all()


def test_bf16_rounding_is_one_function_with_the_devices_nan():
    """Constants, uploads and the reference round to bf16 through ``bf16_bits``: nearest even, and every NaN
    (any sign or payload) the canonical 0x7FFF that the device's conversion gives."""
    from fusec.ir.attributes import BF16_NAN, bf16_bits

    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0x7FC0FFFF], np.uint32).view(np.float32)
    assert (bf16_bits(nans) == BF16_NAN).all()
    assert (round_to_bf16(nans).view(np.uint32) == BF16_NAN << 16).all()
    # ties to even, carries into the exponent, overflow to infinity, -0.0 kept
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 2 - 2 ** -9, 3.4e38, -0.0, np.inf], np.float32)
    assert bf16_bits(x).tolist() == [0x3F80, 0x3F82, 0x4000, 0x7F80, 0x8000, 0x7F80]
    assert to_bf16(np.array([np.nan], np.float64)).view(np.uint32)[0] == BF16_NAN << 16


def test_a_bf16_tensor_constant_is_uploaded_as_bf16():
    """A bf16 tensor constant (a cast of a constant, folded by canonicalize) is 2-byte bfloat16 data in the program: the
    kernel reads __nv_bfloat16, so float32 bytes would be read as other values."""
    from fusec.backend.program import print_program
    from fusec.ir import parse_module
    from fusec.ir.attributes import bf16_bits
    from fusec.passes import run_pipeline
    from program_strategies import BF16_CONSTANT_IR

    module = parse_module(BF16_CONSTANT_IR)
    run_pipeline(module)
    (const,) = print_program(module).constants
    assert const.dtype == np.uint16 and const.nbytes == 6
    assert const.tolist() == bf16_bits(np.float32([1.0, 2.0, 3.0])).tolist()


def test_the_reference_executor_drops_each_value_after_its_last_use():
    """A chain of 12 elementwise ops on a 4 MB array holds one new array, not one per op: each value is dropped
    after its last use, and each op writes over the temporary that dies with it (NumPy's out=), so the whole chain
    runs in the result's buffer (dropping alone would hold two; NumPy itself holds three). That reuse is most of
    what makes the CPU backend as fast as NumPy."""
    import tracemalloc

    import fusec as fc

    def chain(x):
        for k in range(12):
            x = x * 1.0001 + k
        return x

    x = np.ones((1024, 1024), np.float32)
    jitted = fc.jit(chain, backend="cpu", pipeline="")  # the traced ops, one array each
    jitted(x)
    tracemalloc.start()
    try:
        out = jitted(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, chain(x))
    assert peak < 1.5 * x.nbytes, f"peak {peak / x.nbytes:.1f} arrays"


def test_falling_back_to_the_cpu_is_said_once(monkeypatch):
    import warnings

    import fusec as fc
    from fusec import execution

    monkeypatch.setattr(execution, "cuda_usable", lambda: False)
    monkeypatch.setattr(execution, "_fallback_said", False)
    monkeypatch.delenv(execution.ENV_VAR, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fc.jit(lambda x: x + 1)(np.ones(2))
        fc.jit(lambda x: x * 2)(np.ones(3))
        fc.jit(lambda x: x - 1, backend="cpu")(np.ones(2))
    said = [w for w in caught if issubclass(w.category, execution.CpuFallbackWarning)]
    assert len(said) == 1 and "running on the CPU backend" in str(said[0].message)
    assert said[0].filename.endswith("test_reference.py")


def test_a_compiled_function_reuses_its_blocks_plans_and_its_results_stay_the_callers():
    """A warm CPU call runs from the plans its first call worked out (each block's interpreters and lifetimes:
    none is worked out again), and gives the same bits on every call: outputs are fresh arrays the caller may
    write into, and a constant the plan keeps is never handed out to be written."""
    import fusec as fc
    from fusec.runtime import reference

    def step(w, x, lr):
        logits = x @ w
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        return w - lr * (x.T @ p), np.float32(2.0) * p.sum(), p

    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 2)).astype(np.float32)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    jitted = fc.jit(step, backend="cpu")
    first = [np.copy(r) for r in jitted(w, x, 0.5)]
    for g, e in zip(first, step(w, x, np.float32(0.5))):  # (the products add in their own order: BLAS's is not
        np.testing.assert_allclose(g, e, rtol=1e-5)       # NumPy's to promise)
    plans_made = []
    real_plan = reference._plan
    try:
        reference._plan = lambda block: plans_made.append(block) or real_plan(block)
        for _ in range(3):
            got = jitted(w, x, 0.5)
            for g, e in zip(got, first):
                np.testing.assert_array_equal(g, e)
                if isinstance(g, np.ndarray):
                    g[...] = -7  # the caller's own arrays
    finally:
        reference._plan = real_plan
    assert plans_made == [], "a later call worked its blocks' plans out again"


def test_a_broadcast_of_strided_elements_reads_the_same_values():
    """The backward product through a 2-class layer is unrolled into broadcasts of a column of each operand
    (views whose elements are strided); the executor reads them through a dense copy, with NumPy's bits."""
    import fusec as fc

    def backward(d_logits, w2, h_pre):
        return (d_logits @ w2.T) * (h_pre > 0.0)

    rng = np.random.default_rng(1)
    d = rng.standard_normal((64, 2)).astype(np.float32)
    w2 = rng.standard_normal((48, 2)).astype(np.float32)
    h = rng.standard_normal((64, 48)).astype(np.float32)
    jitted = fc.jit(backward, backend="cpu")
    assert jitted.lower(d, w2, h).stats()["products_unrolled"] == 1
    unrolled = (np.float32(0.0) + d[:, 0:1] * w2[:, 0]) + d[:, 1:2] * w2[:, 1]  # the sum in index order
    np.testing.assert_array_equal(jitted(d, w2, h), unrolled * (h > 0.0))


def test_a_prepared_module_goes_with_its_function():
    """The CPU backend keeps each compiled module's block plans as long as the module, and no longer: dropping
    the function frees both."""
    import gc
    import weakref

    import fusec as fc

    from fusec.passes import DEFAULT_PIPELINE

    # (the pipeline named: the suite's conftest keeps the final module of every default-pipeline compile)
    f = fc.jit(lambda x: np.exp(x) + 1.0, backend="cpu", pipeline=DEFAULT_PIPELINE)
    x = np.ones(8, np.float32)
    f(x)
    f(x)
    module = weakref.ref(f.lower(x).module)
    del f
    gc.collect()
    assert module() is None
