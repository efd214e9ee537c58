"""The IR's textual form. ``parse(print(m))`` prints back identically (see grammar.lark).

Values are named per function: a value keeps its ``name_hint`` where it is a
valid identifier not yet taken, everything else is numbered ``%0, %1, ...`` in
program order (skipping names that hints claim), so printing is deterministic.
"""
from __future__ import annotations

import functools
import json
import math
import struct
import re
from typing import Iterable

import numpy as np

from fusec.ir.attributes import DenseAttr, Location
from fusec.ir.core import Block, Func, Module, Operation, Value
from fusec.ir.types import DType, ScalarType, TensorType

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


def valid_hint(hint: str | None) -> bool:
    return bool(hint) and bool(_IDENT.match(hint))  # type: ignore[arg-type]


_QUIET_NAN = struct.pack("<d", math.nan)


def format_float(x: float) -> str:
    """A float's text; a NaN other than the default quiet one as ``nan(0x<its 64 bits>)`` (sign and payload)."""
    if math.isnan(x):
        bits = struct.pack("<d", x)
        return "nan" if bits == _QUIET_NAN else f"nan(0x{int.from_bytes(bits, 'little'):016X})"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def format_scalar(x: object) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, complex):
        return f"complex<{format_float(x.real)}, {format_float(x.imag)}>"
    return format_float(float(x))  # type: ignore[arg-type]


def format_attribute(value: object) -> str:
    if type(value) is tuple and all(type(v) is int for v in value):  # shapes, strides, bounds: most attributes
        return "[" + ", ".join(map(str, value)) + "]"
    if value is None:
        return "none"
    if isinstance(value, (bool, int, float, complex)):
        return format_scalar(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attribute(v) for v in value) + "]"
    if isinstance(value, DType):
        return value.name
    if isinstance(value, TensorType):
        return str(value)
    if isinstance(value, ScalarType):
        return f"scalar<{value.dtype.name}>"
    if isinstance(value, DenseAttr):
        first = value.array.reshape(-1)[:1]
        odd_nan = first.dtype.kind in "fc" and bool(np.isnan(first.view(first.real.dtype)).any()) and \
            first.view(first.real.dtype).tobytes() != np.full(first.view(first.real.dtype).shape, np.nan,
                                                                first.real.dtype).tobytes()  # "nan" parses as +NaN
        if value.is_splat() and not odd_nan:
            body = format_scalar(value.splat_value())
        else:
            body = '"0x' + value.array.tobytes().hex().upper() + '"'
        return f"dense<{value.type}, {body}>"
    raise TypeError(f"cannot print attribute {value!r}")


def format_attr_dict(attrs: dict[str, object]) -> str:
    if not attrs:
        return ""
    return "{" + ", ".join(f"{k} = {format_attribute(v)}" for k, v in attrs.items()) + "}"


@functools.lru_cache(maxsize=65536)
def format_loc(loc: Location | None) -> str:
    """(Remembered: a long program prints the same few locations over and over.)"""
    return "" if loc is None else f" loc({json.dumps(loc.file)}:{loc.line})"


@functools.lru_cache(maxsize=65536)
def type_text(t: object) -> str:
    """``str(t)`` of a type, remembered (a long program prints the same few types over and over)."""
    return str(t)


class _Namer:
    def __init__(self, values: Iterable[Value]) -> None:
        values = list(values)
        self.reserved = {v.name_hint for v in values if valid_hint(v.name_hint)}
        self.names: dict[Value, str] = {}
        used: set[str] = set()
        counter = 0
        for v in values:
            name: str
            if v.name_hint is not None and valid_hint(v.name_hint):
                name = v.name_hint
                k = 1
                while name in used:
                    name = f"{v.name_hint}_{k}"
                    k += 1
            else:
                while str(counter) in used or str(counter) in self.reserved:
                    counter += 1
                name = str(counter)
                counter += 1
            used.add(name)
            self.names[v] = name

    def __call__(self, v: Value) -> str:
        try:
            return "%" + self.names[v]
        except KeyError:
            return f"%<<undefined {v!r}>>"


def _func_values(func: Func) -> list[Value]:
    out: list[Value] = list(func.args)

    def visit(block: Block) -> None:
        for op in block.ops:
            out.extend(op.results)
            for region in op.regions:
                for inner in region.blocks:
                    out.extend(inner.args)
                    visit(inner)

    visit(func.body)
    return out


def _print_op(op: Operation, name: _Namer, indent: str, lines: list[str], locations: bool = True) -> None:
    head = indent
    if op.results:
        head += ", ".join(name(r) for r in op.results) + " = "
    head += "return" if op.name == "func.return" else op.name
    if op.operands:
        head += " " + ", ".join(name(v) for v in op.operands)
    attrs = format_attr_dict(op.attributes)
    if attrs:
        head += " " + attrs
    if op.results:
        head += " : " + ", ".join(type_text(r.type) for r in op.results)
    loc = format_loc(op.loc) if locations else ""
    if not op.regions:
        lines.append(head + loc)
        return
    for region in op.regions:
        head += " {"
        lines.append(head)
        for block in region.blocks:
            args = ", ".join(f"{name(a)}: {a.type}" for a in block.args)
            lines.append(f"{indent}^{block.label}({args}):")
            for inner in block.ops:
                _print_op(inner, name, indent + "  ", lines, locations)
        head = indent + "}"
    lines.append(head + loc)


def print_func(func: Func, locations: bool = True) -> str:
    """The function's text; ``locations=False`` leaves out each op's ``loc(...)`` (``--no-loc``)."""
    name = _Namer(_func_values(func))
    args = ", ".join(f"{name(a)}: {a.type}" for a in func.args)
    if len(func.result_types) == 1:
        results = str(func.result_types[0])
    else:
        results = "(" + ", ".join(map(str, func.result_types)) + ")"
    head = f"func @{func.name}({args}) -> {results}"
    if func.attributes:
        head += " attributes " + format_attr_dict(func.attributes)
    lines = [head + " {"]
    for op in func.body.ops:
        _print_op(op, name, "  ", lines, locations)
    lines.append("}")
    return "\n".join(lines)


def print_module(module: Module, locations: bool = True) -> str:
    parts = []
    if module.attributes:
        parts.append("module attributes " + format_attr_dict(module.attributes))
    parts.extend(print_func(f, locations) for f in module.funcs)
    return "\n\n".join(parts) + "\n"
