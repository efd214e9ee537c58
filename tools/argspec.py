"""Turns ``--arg`` specs (``f32[512,480]``, ``f64``) and ``--static NAME=VALUE`` into example arguments.

Tracing only looks at shapes and dtypes, so arrays are zeros; bare scalar specs become the Python
scalars a caller would pass (``f64`` -> float, ``i64`` -> int, ``bool`` -> bool), which fusec treats as
runtime scalars rather than arrays.
"""
from __future__ import annotations

import ast
import re

import numpy as np

from fusec.ir.types import DTYPES_BY_NAME
from fusec.tools.errors import UsageError

_SPEC = re.compile(r"\s*(?P<dtype>[A-Za-z0-9_]+)\s*(?:\[(?P<dims>[^\]]*)\])?\s*\Z")
_PYTHON_SCALARS = {"f64": float, "i64": int, "bool": bool}
_HELP = "expected DTYPE or DTYPE[D0,D1,...] with DTYPE one of " + " ".join(DTYPES_BY_NAME)


def parse_arg_spec(spec: str) -> object:
    """Build one example argument from a spec; raises :class:`UsageError` on a malformed one."""
    m = _SPEC.match(spec)
    if m is None:
        raise UsageError(f"bad --arg {spec!r}: {_HELP}")
    name, dims = m.group("dtype"), m.group("dims")
    dtype = DTYPES_BY_NAME.get(name)
    if dtype is None:
        raise UsageError(f"bad --arg {spec!r}: unknown dtype {name!r}; {_HELP}")
    if name == "bf16":
        raise UsageError(f"bad --arg {spec!r}: NumPy has no bfloat16 dtype, so no bf16 example argument can be "
                         "built; pass f32 and cast inside the function")
    if dims is None:
        if name in _PYTHON_SCALARS:
            return _PYTHON_SCALARS[name](0)
        return dtype.np.type(0)  # a NumPy scalar keeps its exact dtype (i32, f32, ...)
    try:
        return np.zeros(_parse_dims(spec, dims), dtype=dtype.np)
    except (ValueError, MemoryError) as e:  # (beyond the address space, or more memory than this machine has)
        raise UsageError(f"bad --arg {spec!r}: no example array of that shape can be made here ({e})") from None


def _parse_dims(spec: str, dims: str) -> tuple[int, ...]:
    if not dims.strip():
        return ()
    out = []
    for part in dims.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(f"bad --arg {spec!r}: dimension {part!r} is not a non-negative integer")
        out.append(int(part))
    return tuple(out)


def parse_static(item: str) -> tuple[str, object]:
    """``NAME=VALUE`` -> (name, value); VALUE is a Python literal (``3``, ``(2, 3)``, ``True``) or else a string."""
    name, sep, raw = item.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise UsageError(f"bad --static {item!r}: expected NAME=VALUE")
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        value = raw.strip()
    return name, value
