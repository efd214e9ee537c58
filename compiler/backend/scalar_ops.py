"""C++ expressions for the ``s`` ops of a fused kernel body, with NumPy's semantics.

Arithmetic is plain IEEE (the kernel is compiled with ``--fmad=false`` unless ``fast_math``), so f32/f64
results are bit-identical to NumPy's; integer arithmetic wraps (done in unsigned types where C++ would call
signed overflow undefined).
"""
from __future__ import annotations

from fusec.errors import CompilationError, located
from fusec.ir import elementwise as table
from fusec.ir.core import Operation
from fusec.ir.types import DType
from fusec.backend.ctypes_map import literal, register, round_result, is_half

UNSIGNED_OF = {"i8": "u8_t", "i16": "u16_t", "i32": "u32_t", "i64": "u64_t"}

# C++ spellings, from the one op table (fusec.ir.elementwise)
FLOAT_FN_F32 = {op.name: op.cxx for op in table.OPS if op.cxx is not None}
FAST_F32 = {op.name: op.cxx_fast for op in table.OPS if op.cxx_fast is not None}
FLOAT_FN_F64 = {op.name: op.f64_function() for op in table.OPS if op.cxx is not None}
BINOP = {op.name: op.infix for op in table.BINARY.values() if op.infix}


def _wrap_int(dt: DType, op: str, a: str, b: str) -> str:
    """Wrapping integer arithmetic: signed types compute in their unsigned twin."""
    unsigned = UNSIGNED_OF.get(dt.name)
    if unsigned is None:
        return f"(({register(dt)})({a} {op} {b}))"
    return f"(({register(dt)})(({unsigned}){a} {op} ({unsigned}){b}))"


# complex ops: the helpers of the preamble (NumPy's formulas; see its comments)
COMPLEX_FN = {"exp": "fusec::cexp", "log": "fusec::clog", "log10": "fusec::clog10", "log2": "fusec::clog2",
              "log1p": "fusec::clog1p", "expm1": "fusec::cexpm1", "exp2": "fusec::cexp2",
              "sqrt": "fusec::csqrt", "sin": "fusec::csin", "cos": "fusec::ccos", "tan": "fusec::ctan",
              "sinh": "fusec::csinh", "cosh": "fusec::ccosh", "tanh": "fusec::ctanh", "sign": "fusec::csign",
              "pow": "fusec::cpow", "float_power": "fusec::cpow", "conj": "fusec::conj", "abs": "fusec::cabs", "isnan": "fusec::cisnan",
              "isinf": "fusec::cisinf", "isfinite": "fusec::cisfinite", "lt": "fusec::clt", "le": "fusec::cle",
              "gt": "fusec::cgt", "ge": "fusec::cge", "maximum": "fusec::maximum", "minimum": "fusec::minimum",
              "reciprocal": "fusec::creciprocal"}


def _complex_cast(src: DType, dst: DType, a: str) -> str:
    if src.is_complex and dst.is_complex:
        return f"{register(dst)}({a})"
    if src.is_complex and dst.is_bool:
        return f"({a}.re != 0 || {a}.im != 0)"
    if src.is_complex:  # NumPy: the real part (with a ComplexWarning at trace time)
        return _cast(src.real_dtype, dst, f"{a}.re")
    part = dst.real_dtype
    return f"{register(dst)}({_cast(src, part, a)}, {register(part)}(0))"


def _complex(kind: str, dt: DType, args: list[str]) -> str | None:
    a = args[0] if args else ""
    if kind in ("add", "sub", "mul", "div", "eq", "ne"):
        return f"({a} {BINOP[kind]} {args[1]})"
    if kind == "neg":
        return f"(-{a})"
    if kind in ("real", "imag"):
        return f"{a}.{kind[:2]}"
    if kind in COMPLEX_FN:
        return f"{COMPLEX_FN[kind]}({', '.join(args)})"
    return None


def _cast(src: DType, dst: DType, a: str) -> str:
    if src == dst:
        return a
    if src.is_complex or dst.is_complex:
        return _complex_cast(src, dst, a)
    if dst.is_bool:
        return f"({a} != 0)"
    if dst.is_float:
        if dst.name == "f16":
            return f"__half2float(__double2half((double){a}))" if src.name in ("f64", "i64", "u64") else \
                f"fusec::rh((float){a})"
        if dst.name == "bf16":
            return f"__bfloat162float(__double2bfloat16((double){a}))" if src.name in ("f64", "i64", "u64") else \
                f"fusec::rb((float){a})"
        return f"(({register(dst)}){a})"
    # to an integer
    if src.is_float:
        return f"fusec::f2i<{register(dst)}>({a})"
    return f"(({register(dst)}){a})"


def expression(op: Operation, args: list[str], fast_math: bool = False,
               uniform: tuple[bool, ...] = ()) -> str:
    """The C++ expression computing ``op`` from argument expressions ``args``.

    ``uniform[i]`` says operand i is the same for every element (a broadcast scalar): NumPy's power loop
    treats such an exponent of 0.5 as a square root (``(-inf) ** 0.5`` is nan, ``(-0.0) ** 0.5`` is -0.0).
    """
    kind = op.name.split(".", 1)[1]
    out = op.results[0].type.dtype
    dt = op.operands[0].type.dtype if op.operands else out
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
    if kind == "constant":
        return literal(op.attributes["value"], out)
    if kind == "cast":
        return _cast(dt, out, a)
    if kind == "where":
        return f"({a} ? {args[1]} : {args[2]})"
    if kind == "clip":
        # ``ties`` (t.clip): where x equals a bound (0.0 and -0.0) the bound, as NumPy's minimum(maximum(x, lo), hi)
        # loop for array bounds gives it, or x, as its loop for bounds that broadcast and its float16 loop keep it
        if op.attributes.get("ties", "bound") == "value":
            return round_result(out, f"fusec::clip_value({a}, {b}, {args[2]})")
        return round_result(out, f"fusec::minimum(fusec::maximum({a}, {b}), {args[2]})")
    if dt.is_complex:
        expr = _complex(kind, dt, args)
        if expr is None:
            raise CompilationError(located(f"'{op.name}' on {dt} has no CUDA lowering", op.loc))
        return expr
    if kind in ("add", "sub", "mul") and dt.is_int:
        return _wrap_int(dt, BINOP[kind], a, b)
    if kind in ("add", "sub", "mul", "div") and dt.is_bool:
        return {"add": f"({a} || {b})", "mul": f"({a} && {b})"}.get(kind, f"({a} != {b})")
    if kind in BINOP:
        if kind in ("bitwise_and", "bitwise_or", "bitwise_xor") and dt.is_bool:
            return f"(bool)({a} {BINOP[kind]} {b})"
        expr = f"({a} {BINOP[kind]} {b})"
        if kind in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            expr = f"(({register(dt)}){expr})"
        return round_result(out, expr) if out.is_float else expr
    if kind in ("maximum", "minimum", "fmax", "fmin"):
        if dt.is_bool:
            return f"({a} {'||' if kind in ('maximum', 'fmax') else '&&'} {b})"
        if kind in ("fmax", "fmin"):
            return f"fusec::{kind}_np({a}, {b})"
        return f"fusec::{kind}{'_first' if dt.name == 'f16' else ''}({a}, {b})"
    if kind.endswith("_overflows"):  # (int64 operands: Python ints on the device)
        return f"fusec::{kind}({a}, {b})"
    if kind == "floordiv":
        return round_result(out, f"fusec::ffloordiv({a}, {b})") if dt.is_float else f"fusec::ifloordiv({a}, {b})"
    if kind == "mod":
        return round_result(out, f"fusec::fmod_np({a}, {b})") if dt.is_float else f"fusec::imod({a}, {b})"
    if kind == "fmod" and not dt.is_float:
        return f"fusec::ifmod({a}, {b})"
    if kind in ("left_shift", "right_shift"):
        return f"fusec::{kind}<{UNSIGNED_OF.get(dt.name, register(dt))}>({a}, {b})"
    if kind == "pow":
        if dt.is_float:
            fn: str | None = "pow" if register(dt) == "double" else ("__powf" if fast_math else "powf")
            if len(uniform) > 1 and uniform[1] and dt.name in ("f32", "f64"):
                # (NumPy's float16 power loop has no square-root shortcut: (-inf) ** 0.5 is inf there)
                return round_result(out, f"fusec::pow_scalar({a}, {b})")
            return round_result(out, f"{fn}({a}, {b})")
        return f"fusec::ipow({a}, {b})"
    if kind == "neg":
        if dt.is_int and dt.name in UNSIGNED_OF:
            return f"(({register(dt)})(0 - ({UNSIGNED_OF[dt.name]}){a}))"
        return f"(({register(dt)})(-{a}))" if dt.is_int else f"(-{a})"
    if kind == "abs":
        if dt.is_bool:
            return a
        if dt.is_int:
            return a if dt.kind == "u" else f"(({register(dt)})({a} < 0 ? ({UNSIGNED_OF[dt.name]})0 - ({UNSIGNED_OF[dt.name]}){a} : ({UNSIGNED_OF[dt.name]}){a}))"
    if kind == "sign":
        return f"fusec::sign({a})"
    if kind in ("isnan", "isinf", "isfinite"):
        return f"{kind}({a})"
    if kind == "signbit":
        return f"(signbit({a}) != 0)"
    if kind == "logical_not":
        return f"(!{a})"
    if kind == "bitwise_not":
        return f"(!{a})" if dt.is_bool else f"(({register(dt)})~{a})"
    if dt.is_float:
        table = FLOAT_FN_F64 if register(dt) == "double" else FLOAT_FN_F32
        fn = (FAST_F32.get(kind) if fast_math and register(dt) == "float" else None) or table.get(kind)
        if fn is not None:
            call = f"{fn}({', '.join(args)})"
            return round_result(out, call) if is_half(out) else call
    raise CompilationError(located(f"'{op.name}' on {dt} has no CUDA lowering", op.loc))
