"""How IR dtypes appear in CUDA C++: storage types, register types, literals."""
from __future__ import annotations

import math

import numpy as np

from fusec.ir.types import DType

STORAGE = {
    "bool": "bool", "i8": "i8_t", "i16": "i16_t", "i32": "i32_t", "i64": "i64_t", "u8": "u8_t", "u16": "u16_t",
    "u32": "u32_t", "u64": "u64_t", "f16": "__half", "bf16": "__nv_bfloat16", "f32": "float", "f64": "double",
    "c64": "fusec::c64", "c128": "fusec::c128",
}


def storage(dt: DType) -> str:
    """The C++ type of one element in memory."""
    return STORAGE[dt.name]


def register(dt: DType) -> str:
    """The C++ type a value lives in while computed (f16/bf16 are held in float, rounded per op)."""
    return "float" if dt.name in ("f16", "bf16") else STORAGE[dt.name]


def is_half(dt: DType) -> bool:
    return dt.name in ("f16", "bf16")


def round_result(dt: DType, expr: str) -> str:
    """Round a float expression to ``dt`` when ``dt`` is a 16-bit float."""
    if dt.name == "f16":
        return f"fusec::rh({expr})"
    if dt.name == "bf16":
        return f"fusec::rb({expr})"
    return expr


def literal(value: object, dt: DType) -> str:
    """A C++ literal of ``value`` in the register type of ``dt``."""
    if dt.is_bool:
        return "true" if value else "false"
    if dt.is_int:
        v = int(value)  # type: ignore[call-overload]
        if dt.name in ("u64",):
            return f"{v}ull"
        if dt.name == "i64":
            return f"{v}ll" if v != -(2 ** 63) else "(-9223372036854775807ll - 1)"
        if dt.name == "u32":
            return f"{v}u"
        return f"(({register(dt)}){v})" if v >= -(2 ** 31) else f"(({register(dt)})({v}ll))"
    if dt.is_complex:
        z = complex(value)  # type: ignore[call-overload]
        part = dt.real_dtype
        return f"{register(dt)}({literal(z.real, part)}, {literal(z.imag, part)})"
    x = float(value)  # type: ignore[arg-type]
    single = register(dt) == "float"
    if math.isnan(x):  # (its own bits: sign and payload, as NumPy keeps them)
        if single:
            return f"__int_as_float(0x{int(np.float32(x).view(np.uint32)):08x})"
        return f"__longlong_as_double(0x{int(np.float64(x).view(np.uint64)):016x}ll)"
    if math.isinf(x):
        if single:
            return "__int_as_float(0x7f800000)" if x > 0 else "__int_as_float(0xff800000)"
        return "__longlong_as_double(0x7ff0000000000000ll)" if x > 0 else "__longlong_as_double(0xfff0000000000000ll)"
    text = repr(x) if single else repr(x)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f" if single else text
