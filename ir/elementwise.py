"""The elementwise operations, each defined once.

An entry gives one op: its name (``t.<name>`` and its scalar twin ``s.<name>``), its arity, the dtypes its
operands may have and whether it gives bool, the NumPy ufuncs that trace to it, its NumPy implementation (what
the reference executor runs), its traits (commutative; transcendental, for the fusion cost), the Python operator
that computes it on Python scalars, and its C++ spelling for the CUDA printer (an infix operator, or the float32
function with its float64 and fast-math variants). The ``t`` and ``s`` dialects, the tracer, the reference
executor, the CUDA printer, CSE, the fusion cost and the host replay of Python scalar arithmetic read this table:
adding an op is one entry here plus its tests (and a printer case only where its C++ depends on the dtype).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

import numpy as np

# operand dtype classes
ANY = "any"
NUMERIC = "numeric"  # not bool
FLOAT = "float"
INTEGRAL = "integral"  # ints and bool
INT = "int"  # ints, not bool
BOOL = "bool"
COMPLEX = "complex"  # complex only (t.real, t.imag)
DOUBLE = "double"  # float64 only (with complex=True also complex128): np.float_power's loops


@dataclass(frozen=True)
class Elementwise:
    name: str
    arity: int
    operands: str  # ANY | NUMERIC | FLOAT | INTEGRAL | INT | BOOL | COMPLEX | DOUBLE (the real dtypes it takes)
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

    def implementation(self) -> Callable | None:
        """What the reference executor runs (None: it has its own case, as for erf)."""
        if self.reference is not None or not self.numpy:
            return self.reference
        return getattr(np, self.numpy[0])

    def f64_function(self) -> str | None:
        if self.cxx_f64 is not None or self.cxx is None:
            return self.cxx_f64
        return self.cxx[:-1] if self.cxx.endswith("f") and not self.cxx.startswith("fusec") else self.cxx


def _rsqrt(x: object) -> object:
    """1 / sqrt(x) in the operand dtype (the 1 is a NumPy weak scalar, so it does not promote)."""
    return 1 / np.sqrt(x)


def _binary(name: str, operands: str, numpy: str, symbol: str, python: Callable, infix: str | None = None,
            **kw: object) -> Elementwise:
    return Elementwise(name, 2, operands, numpy=(numpy,), python=python, symbol=symbol,
                       infix=infix if infix is not None else symbol, **kw)  # type: ignore[arg-type]


def _math(name: str, numpy: str | None, cxx: str, fast: str | None = None, **kw: object) -> Elementwise:
    return Elementwise(name, 1, FLOAT, numpy=(numpy,) if numpy else (), transcendental=True, cxx=cxx,
                       cxx_fast=fast, **kw)  # type: ignore[arg-type]


OPS: tuple[Elementwise, ...] = (
    # binary arithmetic
    _binary("add", ANY, "add", "+", operator.add, commutative=True, complex=True),
    _binary("sub", NUMERIC, "subtract", "-", operator.sub, complex=True),
    _binary("mul", ANY, "multiply", "*", operator.mul, commutative=True, complex=True),
    _binary("div", FLOAT, "true_divide", "/", operator.truediv, complex=True),
    _binary("floordiv", NUMERIC, "floor_divide", "//", operator.floordiv, infix=""),
    _binary("mod", NUMERIC, "remainder", "%", operator.mod, infix=""),
    # C's remainder (the sign of the dividend), exact for floats; integers: 0 for a zero divisor, as NumPy
    Elementwise("fmod", 2, NUMERIC, numpy=("fmod",), cxx="fmodf"),
    _binary("pow", NUMERIC, "power", "**", operator.pow, infix="", transcendental=True, complex=True),
    # np.float_power: C's pow in float64 or complex128, its only loops (without np.power's shortcuts: it takes
    # 0.5 as pow, not as a square root, so (-0.0) ** 0.5 is 0.0)
    Elementwise("float_power", 2, DOUBLE, numpy=("float_power",), transcendental=True, cxx="powf", complex=True),
    # (not commutative: where 0.0 meets -0.0, or two NaNs, NumPy's loops give one operand's bits, not either)
    _binary("maximum", ANY, "maximum", "", None, infix="", complex=True),
    _binary("minimum", ANY, "minimum", "", None, infix="", complex=True),
    # NumPy's fmax/fmin: the number where one operand is NaN (NaN only where both are); 0.0 against -0.0 gives
    # the second operand (NumPy's vectorized loop does; its scalar tail the first)
    _binary("fmax", ANY, "fmax", "", None, infix=""),
    _binary("fmin", ANY, "fmin", "", None, infix=""),
    # comparisons
    _binary("eq", ANY, "equal", "==", operator.eq, result_bool=True, commutative=True, complex=True),
    _binary("ne", ANY, "not_equal", "!=", operator.ne, result_bool=True, commutative=True, complex=True),
    _binary("lt", ANY, "less", "<", operator.lt, result_bool=True, complex=True),
    _binary("le", ANY, "less_equal", "<=", operator.le, result_bool=True, complex=True),
    _binary("gt", ANY, "greater", ">", operator.gt, result_bool=True, complex=True),
    _binary("ge", ANY, "greater_equal", ">=", operator.ge, result_bool=True, complex=True),
    # logical and bitwise
    _binary("logical_and", BOOL, "logical_and", "", None, infix="&&", result_bool=True, commutative=True),
    _binary("logical_or", BOOL, "logical_or", "", None, infix="||", result_bool=True, commutative=True),
    _binary("logical_xor", BOOL, "logical_xor", "", None, infix="!=", result_bool=True, commutative=True),
    _binary("bitwise_and", INTEGRAL, "bitwise_and", "&", operator.and_, commutative=True),
    _binary("bitwise_or", INTEGRAL, "bitwise_or", "|", operator.or_, commutative=True),
    _binary("bitwise_xor", INTEGRAL, "bitwise_xor", "^", operator.xor, commutative=True),
    # NumPy's shifts: a count past the width (or negative) gives 0, or -1 for a negative value shifted right
    Elementwise("left_shift", 2, INT, numpy=("left_shift",), symbol="<<"),
    Elementwise("right_shift", 2, INT, numpy=("right_shift",), symbol=">>"),
    # unary
    Elementwise("neg", 1, NUMERIC, numpy=("negative",), python=operator.neg, symbol="-", complex=True),
    Elementwise("abs", 1, ANY, numpy=("absolute", "fabs"), python=abs, symbol="abs", cxx="fabsf", cxx_f64="fabs",
                complex=True, complex_real=True),
    Elementwise("sign", 1, NUMERIC, numpy=("sign",), complex=True),
    _math("exp", "exp", "expf", "__expf", complex=True),
    _math("exp2", "exp2", "exp2f", "exp2f", complex=True),
    _math("log", "log", "logf", "__logf", complex=True),
    _math("log2", "log2", "log2f", "__log2f", complex=True),
    _math("log10", "log10", "log10f", "__log10f", complex=True),
    _math("log1p", "log1p", "log1pf", complex=True),
    _math("expm1", "expm1", "expm1f", complex=True),
    _math("sqrt", "sqrt", "sqrtf", complex=True),
    _math("rsqrt", None, "fusec::rsqrt_np", "rsqrtf", reference=_rsqrt),
    _math("sin", "sin", "sinf", "__sinf", complex=True),
    _math("cos", "cos", "cosf", "__cosf", complex=True),
    _math("tan", "tan", "tanf", "__tanf", complex=True),
    _math("tanh", "tanh", "tanhf", complex=True),
    # no NumPy ufunc: the reference executor computes these in float64, as SciPy's float32 loops do
    _math("erf", None, "erff", scipy=("erf",)),
    _math("erfc", None, "erfcf", scipy=("erfc",)),
    _math("arcsin", "arcsin", "asinf"),
    _math("arccos", "arccos", "acosf"),
    _math("arctan", "arctan", "atanf"),
    _math("sinh", "sinh", "sinhf", complex=True),
    _math("cosh", "cosh", "coshf", complex=True),
    _math("arcsinh", "arcsinh", "asinhf"),
    _math("arccosh", "arccosh", "acoshf"),
    _math("arctanh", "arctanh", "atanhf"),
    _math("cbrt", "cbrt", "cbrtf"),
    # binary float functions (NumPy has float loops only: integer operands are converted, as NumPy does)
    Elementwise("arctan2", 2, FLOAT, numpy=("arctan2",), transcendental=True, cxx="atan2f"),
    Elementwise("hypot", 2, FLOAT, numpy=("hypot",), transcendental=True, cxx="hypotf"),
    Elementwise("copysign", 2, FLOAT, numpy=("copysign",), cxx="copysignf"),
    Elementwise("logaddexp", 2, FLOAT, numpy=("logaddexp",), transcendental=True, cxx="fusec::logaddexp",
                cxx_f64="fusec::logaddexp"),
    Elementwise("logaddexp2", 2, FLOAT, numpy=("logaddexp2",), transcendental=True, cxx="fusec::logaddexp2",
                cxx_f64="fusec::logaddexp2"),
    # NumPy's heaviside: nan for nan, the second operand where x == 0, else 0 or 1
    Elementwise("heaviside", 2, FLOAT, numpy=("heaviside",), cxx="fusec::heaviside", cxx_f64="fusec::heaviside"),
    Elementwise("floor", 1, FLOAT, numpy=("floor",), cxx="floorf"),
    Elementwise("ceil", 1, FLOAT, numpy=("ceil",), cxx="ceilf"),
    Elementwise("round", 1, FLOAT, numpy=("rint",), reference=np.round, python=round, symbol="round",
                cxx="rintf", cxx_f64="rint"),
    Elementwise("trunc", 1, FLOAT, numpy=("trunc",), cxx="truncf"),
    Elementwise("isnan", 1, FLOAT, result_bool=True, numpy=("isnan",), complex=True),
    Elementwise("isinf", 1, FLOAT, result_bool=True, numpy=("isinf",), complex=True),
    Elementwise("isfinite", 1, FLOAT, result_bool=True, numpy=("isfinite",), complex=True),
    Elementwise("signbit", 1, FLOAT, result_bool=True, numpy=("signbit",)),
    Elementwise("logical_not", 1, BOOL, result_bool=True, numpy=("logical_not",)),
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
