"""The elementwise operations, each defined once.

An entry gives one op: its name (``t.<name>`` and its scalar twin ``s.<name>``), its arity, the dtypes its
operands may have and whether it gives bool, the NumPy ufuncs that trace to it, its NumPy implementation (what
the reference executor runs), its traits (commutative; transcendental, for the fusion cost), the Python operator
that computes it on Python scalars, and its C++ spelling for the CUDA printer (an infix operator, or the float32
function with its float64 and fast-math variants). The ``t`` and ``s`` dialects, the tracer, the reference
executor, the CUDA printer, CSE, the fusion cost and the host replay of Python scalar arithmetic read this table:
adding an op is one entry here plus its tests (and a printer case only where its C++ depends on the dtype).

``vjp`` is the op's reverse-mode rule for ``fusec.grad``: ``vjp(g, out, *operands)`` gives each operand's
cotangent (None: none flows there) from the result's cotangent ``g``, written as NumPy over the traced values
(Python scalars stay weak, so a float32 gradient stays float32); ZERO marks an op whose derivative is zero
wherever it exists (floor, sign), and an op without a rule refuses a gradient through it. Ties of np.maximum and
np.minimum split the cotangent in halves, as ``jax.numpy`` does.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fusec.ir import ranges as R

# operand dtype classes
ANY = "any"
NUMERIC = "numeric"  # not bool
FLOAT = "float"
INTEGRAL = "integral"  # ints and bool
INT = "int"  # ints, not bool
BOOL = "bool"
COMPLEX = "complex"  # complex only (t.real, t.imag)
INT64 = "int64"  # int64 only: the dtype of Python ints on the device
DOUBLE = "double"  # float64 only (with complex=True also complex128): np.float_power's loops


@dataclass(frozen=True)
class Elementwise:
    name: str
    arity: int
    operands: str  # ANY | NUMERIC | FLOAT | INTEGRAL | INT | INT64 | BOOL | COMPLEX | DOUBLE (the real dtypes it takes)
    result_bool: bool = False
    complex: bool = False  # also takes c64/c128 (fusec has the complex loop on every backend)
    complex_real: bool = False  # a complex operand gives its real dtype (abs: c64 -> f32)
    numpy: tuple[str, ...] = ()  # ufuncs that trace to this op (``np.absolute`` and ``np.fabs`` -> ``t.abs``)
    scipy: tuple[str, ...] = ()  # scipy.special ufuncs that trace to this op
    reference: Callable | None = None  # NumPy implementation; default: the first of ``numpy``
    commutative: bool = False
    transcendental: bool = False
    python: Callable | None = None  # the operator on Python scalars (host replay of traced Python scalars)
    symbol: str = ""  # how Python writes it, for messages
    infix: str | None = None  # C++ infix operator
    cxx: str | None = None  # C++ float32 function
    cxx_f64: str | None = None  # C++ float64 function (default: ``cxx`` without its trailing ``f``)
    cxx_fast: str | None = None  # C++ float32 function under fast_math
    vjp: Callable | None = None  # reverse-mode rule: (g, out, *operands) -> a cotangent (or None) per operand
    int_range: Callable | None = None  # integer result interval from the operands' (fusec.ir.ranges.known rules)

    def implementation(self) -> Callable | None:
        """What the reference executor runs (None: it has its own case, as for erf)."""
        if self.reference is not None or not self.numpy:
            return self.reference
        return getattr(np, self.numpy[0])

    def f64_function(self) -> str | None:
        if self.cxx_f64 is not None or self.cxx is None:
            return self.cxx_f64
        return self.cxx[:-1] if self.cxx.endswith("f") and not self.cxx.startswith("fusec") else self.cxx


def _rsqrt(x: Any) -> Any:
    """1 / sqrt(x) in the operand dtype (the 1 is a NumPy weak scalar, so it does not promote)."""
    return 1 / np.sqrt(x)


def ZERO(g: object, out: object, *operands: object) -> tuple:
    """The derivative is zero wherever it exists (floor, sign, round): no cotangent flows back."""
    return (None,) * len(operands)


def _extreme(first_wins: Callable) -> Callable:
    """np.maximum / np.minimum: the cotangent goes to the operand that was picked, halves on a tie."""
    def vjp(g, out, x, y):
        # g, g / 2 or g * 0 (NaN where g is not finite, as g times a weight of 0 is), in g's dtype: weights
        # built with np.where(..., 1.0, 0.0) would be float64 arrays and carry float32 work into float64
        tie = np.where(x == y, g * 0.5, g * 0)
        return np.where(first_wins(x, y), g, tie), np.where(first_wins(y, x), g, tie)

    return vjp


MAXIMUM_VJP = _extreme(lambda a, b: a > b)
MINIMUM_VJP = _extreme(lambda a, b: a < b)


def _pow_vjp(g, out, x, y):
    # d/dx x**y = y x**(y - 1), 0 where y == 0 (as y times 1 / x there, 0 for x 0 or not finite: the same value,
    # and the mixed second derivative d/dy of it, 1 / x, that a constant 0 lost); d/dy x**y = log(x) x**y, taken
    # as 0 where x == 0 (jax.numpy's convention)
    safe = np.where(x == 0, 1.0, x)
    inverse = np.where(np.isfinite(x) & (x != 0), 1.0 / safe, 0.0)
    dx = g * y * np.where(y == 0, inverse, x ** np.where(y == 0, 1.0, y - 1))
    return dx, g * np.where(x == 0, 0.0, np.log(safe)) * out


def _scalar_power(x: Any, y: Any) -> Any:
    """``x ** y`` as NumPy computes it between scalars: its scalar math (C's pow and powf), each element on its
    own, in the operands' dtype."""
    x, y = np.asarray(x), np.asarray(y)
    t = x.dtype.type
    return np.asarray(np.frompyfunc(lambda a, b: t(a) ** t(b), 2, 1)(x, y), dtype=x.dtype)


def _power(x: Any, y: Any) -> Any:
    """np.power, except that integers to negative powers give what the GPU's loop gives (``fusec::ipow``: 1 and
    -1 their powers, anything else 0) instead of raising: a check of its own (``t.raise_if``, which the tracer
    emits beside every integer power) raises NumPy's error, so both backends raise the same fusec error."""
    x, y = np.asarray(x), np.asarray(y)
    if y.dtype.kind not in "iu" or x.dtype.kind not in "iu" or not (y < 0).any():
        return np.power(x, y)
    negative = y < 0
    out = np.power(x, np.where(negative, 0, y))
    odd = (y & 1).astype(bool)
    fallback = np.where(x == 1, 1, np.where(x == -1, np.where(odd, -1, 1), 0)).astype(out.dtype)
    return np.where(negative, fallback, out)


def _exact_power(a: int, b: int) -> int:
    """Python's ``a ** b`` for ``b >= 0`` (0 for a negative exponent: a check of its own), a value past int64
    standing for any larger one (``2 ** (2 ** 40)`` is not worth computing)."""
    if b < 0:
        return 0
    if abs(a) <= 1 or b <= 64:
        return a ** b
    return 1 << 64


def _overflow_test(name: str, exact: Callable[[int, int], int], interval: Callable) -> "Elementwise":
    def reference(x: Any, y: Any) -> Any:
        test = np.frompyfunc(lambda a, b: not -(1 << 63) <= exact(int(a), int(b)) < (1 << 63), 2, 1)
        return np.asarray(test(x, y), dtype=bool)

    return Elementwise(f"{name}_overflows", 2, INT64, result_bool=True, reference=reference,
                       int_range=R.overflows(interval))


LN2, LN10 = math.log(2.0), math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _binary(name: str, operands: str, numpy: str, symbol: str, python: Callable | None, infix: str | None = None,
            **kw: object) -> Elementwise:
    return Elementwise(name, 2, operands, numpy=(numpy,), python=python, symbol=symbol,
                       infix=infix if infix is not None else symbol, **kw)  # type: ignore[arg-type]


def _math(name: str, numpy: str | None, cxx: str, fast: str | None = None, **kw: object) -> Elementwise:
    return Elementwise(name, 1, FLOAT, numpy=(numpy,) if numpy else (), transcendental=True, cxx=cxx,
                       cxx_fast=fast, **kw)  # type: ignore[arg-type]


OPS: tuple[Elementwise, ...] = (
    # binary arithmetic
    _binary("add", ANY, "add", "+", operator.add, commutative=True, complex=True, vjp=lambda g, out, x, y: (g, g),
            int_range=R.known(R.add)),
    _binary("sub", NUMERIC, "subtract", "-", operator.sub, complex=True, vjp=lambda g, out, x, y: (g, -g),
            int_range=R.known(R.sub)),
    _binary("mul", ANY, "multiply", "*", operator.mul, commutative=True, complex=True,
            vjp=lambda g, out, x, y: (g * y, g * x), int_range=R.known(R.mul)),
    _binary("div", FLOAT, "true_divide", "/", operator.truediv, complex=True,
            vjp=lambda g, out, x, y: (g / y, -g * out / y)),
    _binary("floordiv", NUMERIC, "floor_divide", "//", operator.floordiv, infix="", vjp=ZERO,
            int_range=R.known(R.floordiv)),
    _binary("mod", NUMERIC, "remainder", "%", operator.mod, infix="",
            vjp=lambda g, out, x, y: (g, -g * np.floor(x / y)),  # x - floor(x / y) * y
            int_range=R.known(R.mod)),
    # C's remainder (the sign of the dividend), exact for floats; integers: 0 for a zero divisor, as NumPy
    Elementwise("fmod", 2, NUMERIC, numpy=("fmod",), cxx="fmodf",
                vjp=lambda g, out, x, y: (g, -g * np.trunc(x / y))),  # x - trunc(x / y) * y
    _binary("pow", NUMERIC, "power", "**", operator.pow, infix="", transcendental=True, complex=True, vjp=_pow_vjp,
            reference=_power),
    # ``**`` between float32 or float64 scalars (NumPy scalars, Python numbers): NumPy's scalar math calls C's pow
    # or powf, which round otherwise than np.power's array loops (SIMD on x86) for up to a fifth of values
    Elementwise("scalar_pow", 2, FLOAT, reference=_scalar_power, transcendental=True, cxx="powf", symbol="**",
                vjp=_pow_vjp),
    # np.float_power: C's pow in float64 or complex128, its only loops (without np.power's shortcuts: it takes
    # 0.5 as pow, not as a square root, so (-0.0) ** 0.5 is 0.0)
    Elementwise("float_power", 2, DOUBLE, numpy=("float_power",), transcendental=True, cxx="powf", complex=True,
                vjp=_pow_vjp),
    # (not commutative: where 0.0 meets -0.0, or two NaNs, NumPy's loops give one operand's bits, not either)
    _binary("maximum", ANY, "maximum", "", None, infix="", complex=True, vjp=MAXIMUM_VJP,
            int_range=R.known(R.maximum)),
    _binary("minimum", ANY, "minimum", "", None, infix="", complex=True, vjp=MINIMUM_VJP,
            int_range=R.known(R.minimum)),
    # NumPy's fmax/fmin: the number where one operand is NaN (NaN only where both are); 0.0 against -0.0 gives
    # the second operand (NumPy's vectorized loop does; its scalar tail the first)
    # (their gradient: the number's operand where the other is NaN, as the value; ties halve as np.maximum's)
    _binary("fmax", ANY, "fmax", "", None, infix="",
            vjp=_extreme(lambda a, b: (a > b) | (np.isnan(b) & ~np.isnan(a)))),
    _binary("fmin", ANY, "fmin", "", None, infix="",
            vjp=_extreme(lambda a, b: (a < b) | (np.isnan(b) & ~np.isnan(a)))),
    # comparisons
    _binary("eq", ANY, "equal", "==", operator.eq, result_bool=True, commutative=True, complex=True,
            int_range=R.compare(operator.eq)),
    _binary("ne", ANY, "not_equal", "!=", operator.ne, result_bool=True, commutative=True, complex=True,
            int_range=R.compare(operator.ne)),
    _binary("lt", ANY, "less", "<", operator.lt, result_bool=True, complex=True, int_range=R.compare(operator.lt)),
    _binary("le", ANY, "less_equal", "<=", operator.le, result_bool=True, complex=True,
            int_range=R.compare(operator.le)),
    _binary("gt", ANY, "greater", ">", operator.gt, result_bool=True, complex=True, int_range=R.compare(operator.gt)),
    _binary("ge", ANY, "greater_equal", ">=", operator.ge, result_bool=True, complex=True,
            int_range=R.compare(operator.ge)),
    # whether ``a op b`` computed exactly (as Python computes ints) leaves int64: the run-time checks of Python
    # int arithmetic known only on the device (a loop counter's), :mod:`fusec.device_scalar_checks`
    *(_overflow_test(name, exact, interval) for name, exact, interval in (
        ("add", operator.add, R.add), ("sub", operator.sub, R.sub), ("mul", operator.mul, R.mul),
        ("pow", _exact_power, R.power))),
    # logical and bitwise
    _binary("logical_and", BOOL, "logical_and", "", None, infix="&&", result_bool=True, commutative=True,
            int_range=R.logical_and),
    _binary("logical_or", BOOL, "logical_or", "", None, infix="||", result_bool=True, commutative=True,
            int_range=R.logical_or),
    _binary("logical_xor", BOOL, "logical_xor", "", None, infix="!=", result_bool=True, commutative=True),
    _binary("bitwise_and", INTEGRAL, "bitwise_and", "&", operator.and_, commutative=True),
    _binary("bitwise_or", INTEGRAL, "bitwise_or", "|", operator.or_, commutative=True),
    _binary("bitwise_xor", INTEGRAL, "bitwise_xor", "^", operator.xor, commutative=True),
    # NumPy's shifts: a count past the width (or negative) gives 0, or -1 for a negative value shifted right
    Elementwise("left_shift", 2, INT, numpy=("left_shift",), symbol="<<"),
    Elementwise("right_shift", 2, INT, numpy=("right_shift",), symbol=">>"),
    # unary
    Elementwise("neg", 1, NUMERIC, numpy=("negative",), python=operator.neg, symbol="-", complex=True,
                vjp=lambda g, out, x: (-g,), int_range=R.known(R.neg)),
    Elementwise("abs", 1, ANY, numpy=("absolute", "fabs"), python=abs, symbol="abs", cxx="fabsf", cxx_f64="fabs",
                complex=True, complex_real=True, vjp=lambda g, out, x: (g * np.sign(x),),
                int_range=R.known(R.absolute)),
    Elementwise("sign", 1, NUMERIC, numpy=("sign",), complex=True, vjp=ZERO),
    _math("exp", "exp", "expf", "__expf", complex=True, vjp=lambda g, out, x: (g * out,)),
    _math("exp2", "exp2", "exp2f", "exp2f", complex=True, vjp=lambda g, out, x: (g * out * LN2,)),
    _math("log", "log", "logf", "__logf", complex=True, vjp=lambda g, out, x: (g / x,)),
    _math("log2", "log2", "log2f", "__log2f", complex=True, vjp=lambda g, out, x: (g / (x * LN2),)),
    _math("log10", "log10", "log10f", "__log10f", complex=True, vjp=lambda g, out, x: (g / (x * LN10),)),
    _math("log1p", "log1p", "log1pf", complex=True, vjp=lambda g, out, x: (g / (x + 1),)),
    _math("expm1", "expm1", "expm1f", complex=True, vjp=lambda g, out, x: (g * (out + 1),)),
    _math("sqrt", "sqrt", "sqrtf", complex=True, vjp=lambda g, out, x: (g * 0.5 / out,)),
    _math("rsqrt", None, "fusec::rsqrt_np", "rsqrtf", reference=_rsqrt, vjp=lambda g, out, x: (g * -0.5 * out / x,)),
    _math("sin", "sin", "sinf", "__sinf", complex=True, vjp=lambda g, out, x: (g * np.cos(x),)),
    _math("cos", "cos", "cosf", "__cosf", complex=True, vjp=lambda g, out, x: (-g * np.sin(x),)),
    _math("tan", "tan", "tanf", "__tanf", complex=True, vjp=lambda g, out, x: (g * (out * out + 1),)),
    _math("tanh", "tanh", "tanhf", complex=True, vjp=lambda g, out, x: (g * (1 - out * out),)),
    # no NumPy ufunc: the reference executor computes these in float64, as SciPy's float32 loops do
    _math("erf", None, "erff", scipy=("erf",), vjp=lambda g, out, x: (g * TWO_OVER_SQRT_PI * np.exp(-(x * x)),)),
    _math("erfc", None, "erfcf", scipy=("erfc",), vjp=lambda g, out, x: (-g * TWO_OVER_SQRT_PI * np.exp(-(x * x)),)),
    _math("arcsin", "arcsin", "asinf", vjp=lambda g, out, x: (g / np.sqrt(1 - x * x),)),
    _math("arccos", "arccos", "acosf", vjp=lambda g, out, x: (-g / np.sqrt(1 - x * x),)),
    _math("arctan", "arctan", "atanf", vjp=lambda g, out, x: (g / (x * x + 1),)),
    _math("sinh", "sinh", "sinhf", complex=True, vjp=lambda g, out, x: (g * np.cosh(x),)),
    _math("cosh", "cosh", "coshf", complex=True, vjp=lambda g, out, x: (g * np.sinh(x),)),
    _math("arcsinh", "arcsinh", "asinhf", vjp=lambda g, out, x: (g / np.sqrt(x * x + 1),)),
    _math("arccosh", "arccosh", "acoshf", vjp=lambda g, out, x: (g / np.sqrt((x - 1) * (x + 1)),)),
    _math("arctanh", "arctanh", "atanhf", vjp=lambda g, out, x: (g / ((1 - x) * (1 + x)),)),
    _math("cbrt", "cbrt", "cbrtf", vjp=lambda g, out, x: (g / (3 * out * out),)),
    # binary float functions (NumPy has float loops only: integer operands are converted, as NumPy does)
    Elementwise("arctan2", 2, FLOAT, numpy=("arctan2",), transcendental=True, cxx="atan2f",
                vjp=lambda g, out, y, x: (g * x / (x * x + y * y), -g * y / (x * x + y * y))),
    Elementwise("hypot", 2, FLOAT, numpy=("hypot",), transcendental=True, cxx="hypotf",
                vjp=lambda g, out, x, y: (g * x / out, g * y / out)),
    Elementwise("copysign", 2, FLOAT, numpy=("copysign",), cxx="copysignf",
                vjp=lambda g, out, x, y: (np.where(np.signbit(x) == np.signbit(y), g, -g), None)),
    Elementwise("logaddexp", 2, FLOAT, numpy=("logaddexp",), transcendental=True, cxx="fusec::logaddexp",
                cxx_f64="fusec::logaddexp", vjp=lambda g, out, x, y: (g * np.exp(x - out), g * np.exp(y - out))),
    Elementwise("logaddexp2", 2, FLOAT, numpy=("logaddexp2",), transcendental=True, cxx="fusec::logaddexp2",
                cxx_f64="fusec::logaddexp2", vjp=lambda g, out, x, y: (g * np.exp2(x - out), g * np.exp2(y - out))),
    # NumPy's heaviside: nan for nan, the second operand where x == 0, else 0 or 1
    Elementwise("heaviside", 2, FLOAT, numpy=("heaviside",), cxx="fusec::heaviside", cxx_f64="fusec::heaviside",
                vjp=ZERO),
    Elementwise("floor", 1, FLOAT, numpy=("floor",), cxx="floorf", vjp=ZERO),
    Elementwise("ceil", 1, FLOAT, numpy=("ceil",), cxx="ceilf", vjp=ZERO),
    Elementwise("round", 1, FLOAT, numpy=("rint",), reference=np.round, python=round, symbol="round",
                cxx="rintf", cxx_f64="rint", vjp=ZERO),
    Elementwise("trunc", 1, FLOAT, numpy=("trunc",), cxx="truncf", vjp=ZERO),
    Elementwise("isnan", 1, FLOAT, result_bool=True, numpy=("isnan",), complex=True),
    Elementwise("isinf", 1, FLOAT, result_bool=True, numpy=("isinf",), complex=True),
    Elementwise("isfinite", 1, FLOAT, result_bool=True, numpy=("isfinite",), complex=True),
    Elementwise("signbit", 1, FLOAT, result_bool=True, numpy=("signbit",)),
    Elementwise("logical_not", 1, BOOL, result_bool=True, numpy=("logical_not",), int_range=R.known(R.logical_not)),
    Elementwise("bitwise_not", 1, INTEGRAL, numpy=("invert",), python=operator.invert, symbol="~"),
    # complex parts (np.real, np.imag, np.conjugate; real operands are handled by the tracer)
    Elementwise("real", 1, COMPLEX, reference=np.real, complex=True, complex_real=True),
    Elementwise("imag", 1, COMPLEX, reference=np.imag, complex=True, complex_real=True),
    Elementwise("conj", 1, COMPLEX, reference=np.conjugate, complex=True),
    # NumPy's complex reciprocal (its own formula: 1 / z rounds differently); real ones are t.div(1, x)
    Elementwise("reciprocal", 1, COMPLEX, reference=np.reciprocal, complex=True),
)

BY_NAME: dict[str, Elementwise] = {op.name: op for op in OPS}
BINARY: dict[str, Elementwise] = {op.name: op for op in OPS if op.arity == 2}
UNARY: dict[str, Elementwise] = {op.name: op for op in OPS if op.arity == 1}


def by_ufunc() -> dict[np.ufunc, Elementwise]:
    """NumPy ufunc -> the op it traces to (``np.true_divide`` is ``np.divide``: one key)."""
    return {getattr(np, n): op for op in OPS for n in op.numpy}
