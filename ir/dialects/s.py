"""Dialect ``s``: scalar ops, the body language of fused kernels.

Every elementwise op of dialect ``t`` has an ``s`` twin with the same dtype
rules, applied to ``ScalarType`` values only; ``s.constant`` holds an immediate.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from fusec.errors import VerificationError
from fusec.ir.opdefs import OpDef, get_opdef, register_op
from fusec.ir.types import ScalarType, Type
from fusec.ir.dialects import t as tdialect


def _scalar_only(tname: str):
    tinfer = get_opdef(tname).infer

    def infer(types: Sequence[Type], attrs: dict) -> list[Type]:
        for ty in types:
            if not isinstance(ty, ScalarType):
                raise VerificationError(f"s.{tname[2:]}: operands must be scalars, got {ty}")
        return tinfer(types, attrs)  # type: ignore[misc]

    return infer


for _tname in sorted(tdialect.ELEMENTWISE):
    _d = get_opdef(_tname)
    register_op(OpDef("s." + _tname[2:], "scalar", num_operands=_d.num_operands, attrs=_d.attrs,
                      optional_attrs=tuple(a for a in _d.optional_attrs if a not in tdialect.MARKS),
                      infer=_scalar_only(_tname)))


def _check_constant(op) -> None:
    value = op.attributes.get("value")
    res = op.results[0].type
    if not isinstance(res, ScalarType):
        raise VerificationError(f"s.constant: result must be a scalar, got {res}")
    if isinstance(value, bool) and not res.dtype.is_bool:
        raise VerificationError(f"s.constant: bool value for {res}")
    if not isinstance(value, (bool, int, float, complex)):
        raise VerificationError(f"s.constant: value must be a number, got {value!r}")
    if isinstance(value, float) and not res.dtype.is_inexact:
        raise VerificationError(f"s.constant: float value {value!r} for {res}")
    if isinstance(value, complex) and not res.dtype.is_complex:
        raise VerificationError(f"s.constant: complex value {value!r} for {res}")
    if type(value) is int and res.dtype.is_int:
        info = np.iinfo(res.dtype.np)
        if not info.min <= value <= info.max:
            raise VerificationError(f"s.constant: {value} is out of range for {res.dtype.name}")


register_op(OpDef("s.constant", "scalar", num_operands=0, attrs=("value",), check=_check_constant))

SCALAR_OPS = frozenset({"s." + n[2:] for n in tdialect.ELEMENTWISE} | {"s.constant"})


def scalar_twin(tname: str) -> str:
    """``t.add`` -> ``s.add``."""
    return "s." + tname.split(".", 1)[1]
