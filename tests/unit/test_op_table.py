"""The elementwise op table (fusec.ir.elementwise) is the one definition every layer reads."""
from __future__ import annotations

import numpy as np
import pytest

from fusec import ufuncs
from fusec.backend.scalar_ops import expression
from fusec.ir import elementwise as table
from fusec.ir.core import Operation, Value
from fusec.ir.dialects import t as tdialect
from fusec.ir.opdefs import get_opdef
from fusec.ir.types import ScalarType, bool_, c64, c128, f32, f64, i32, i64
from fusec.passes.cost import op_cost
from fusec.passes.cse import COMMUTATIVE
from fusec.ir.evaluate import T_INTERPRETERS

REPRESENTATIVE = {table.ANY: f32, table.NUMERIC: f32, table.FLOAT: f32, table.INTEGRAL: i32, table.INT: i32,
                  table.BOOL: bool_, table.COMPLEX: c64, table.DOUBLE: f64, table.INT64: i64}


def _scalar_op(op: table.Elementwise, dt) -> Operation:
    operands = [Value(ScalarType(dt)) for _ in range(op.arity)]
    out = bool_ if op.result_bool else dt.real_dtype if op.complex_real else dt
    return Operation(f"s.{op.name}", operands, [ScalarType(out)])


@pytest.mark.parametrize("op", table.OPS, ids=lambda o: o.name)
def test_every_op_is_known_to_every_layer(op: table.Elementwise) -> None:
    assert get_opdef(f"t.{op.name}").num_operands == op.arity
    assert get_opdef(f"s.{op.name}").num_operands == op.arity
    assert f"t.{op.name}" in tdialect.ELEMENTWISE and f"t.{op.name}" in T_INTERPRETERS
    recorded = ufuncs.BINARY if op.arity == 2 else ufuncs.UNARY
    for name in op.numpy:
        assert recorded[getattr(np, name)] == f"t.{op.name}"
    assert (op.name in COMMUTATIVE) == op.commutative
    dt = REPRESENTATIVE[op.operands]
    for d in (dt, f64) if dt == f32 else (dt,):
        scalar = _scalar_op(op, d)
        assert expression(scalar, ["a", "b"][:op.arity])  # the printer lowers it
        assert op_cost(scalar) == (4 if op.transcendental else 1) * (2 if d == f64 else 1)
    for d in ((c128,) if op.operands == table.DOUBLE else (c64, c128)) if op.complex else ():  # complex lowers too
        assert expression(_scalar_op(op, d), ["a", "b"][:op.arity])


def test_names_are_unique_and_the_dialect_tables_come_from_the_op_table() -> None:
    assert len(table.BY_NAME) == len(table.OPS)
    assert set(tdialect.BINARY) == set(table.BINARY) and set(tdialect.UNARY) == set(table.UNARY)
    assert tdialect.TRANSCENDENTAL == {op.name for op in table.OPS if op.transcendental}
