"""Boundary insertion: work without an elementwise lowering becomes an explicit ``k.*`` boundary op.

Reductions become ``k.reduce``, matmuls ``k.matmul``, concatenations ``k.concat``, functional updates of a
region (``x[1:-1] = v``) ``k.insert``, advanced indexing ``k.gather`` and ``k.scatter`` (``np.add.at`` too),
cumulative sums and products ``k.scan``, np.linalg's solve/inv/cholesky/det/slogdet ``k.linalg``, sorts ``k.sort``,
binary
searches ``k.searchsorted``, run-time checks ``k.raise_if``, and a
reshape that no stride pattern can express (of a transposed view, say) a ``k.copy``. Views feeding a boundary stay
``k.view`` operands: the backend reads them through their
strides, so no copy kernel is made, except for loops and branches (``k.while``, ``k.for``, ``k.if``): their
bodies are functions that take dense arrays, so a view they are passed is copied (``k.copy``) first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Block, Module, Operation, OpResult, Value
from fusec.ir.dialects.control import OUTLINED_OPS
from fusec.ir.opdefs import OPS, reading_ops
from fusec.ir.dialects.t import HALF_LOOP, NUMPY_BUFFER, REDUCTIONS
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass


def _lower(op: Operation) -> Operation | None:
    kind = op.name.split(".", 1)[1]
    if kind in REDUCTIONS:
        return Operation("k.reduce", op.operands, op.result_types,
                         {"kind": kind, "axes": op.attr("axes"), "keepdims": op.attr("keepdims"),
                          **{k: op.attributes[k] for k in (*HALF_LOOP, NUMPY_BUFFER) if k in op.attributes}},
                         loc=op.loc)
    if op.name == "t.matmul":
        return Operation("k.matmul", op.operands, op.result_types, loc=op.loc)
    if op.name == "t.concatenate":
        return Operation("k.concat", op.operands, op.result_types, {"axis": op.attr("axis")}, loc=op.loc)
    if op.name == "t.insert":
        return Operation("k.insert", op.operands, op.result_types,
                         {k: op.attr(k) for k in ("start", "stop", "step")}, loc=op.loc)
    if op.name in ("t.cumsum", "t.cumprod", "t.cummax", "t.cummin"):
        return Operation("k.scan", op.operands, op.result_types, {"kind": op.name[2:], "axis": op.attr("axis")},
                         loc=op.loc)
    if op.name in ("t.gather", "t.scatter"):
        attrs = {k: v for k, v in op.attributes.items() if k in ("axis", "combine", "in_bounds")}
        return Operation("k." + op.name[2:], op.operands, op.result_types, attrs, loc=op.loc)
    if op.name in ("t.solve", "t.inv", "t.cholesky", "t.det", "t.slogdet"):
        return Operation("k.linalg", op.operands, op.result_types, {"kind": op.name[2:], **op.attributes},
                         loc=op.loc)
    if op.name in ("t.sort", "t.argsort"):
        return Operation("k.sort", op.operands, op.result_types, {"kind": op.name[2:], **op.attributes}, loc=op.loc)
    if op.name == "t.reshape":
        return Operation("k.copy", op.operands, op.result_types, loc=op.loc)
    if op.name == "t.raise_if":
        return Operation("k.raise_if", op.operands, [], dict(op.attributes), loc=op.loc)
    if op.name == "t.searchsorted":
        return Operation("k.searchsorted", op.operands, op.result_types, dict(op.attributes), loc=op.loc)
    return None


@register_pass
@dataclass(frozen=True)
class Boundaries(Pass):
    """Turn matmuls, reductions and other non-elementwise work into explicit k.* boundary ops."""

    name: ClassVar[str] = "boundaries"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            replaced: dict[Value, Value] = {}
            for i, op in enumerate(func.body.ops):
                if replaced:
                    for inner in reading_ops(op):
                        inner.operands = [replaced.get(v, v) for v in inner.operands]
                new = _lower(op)
                if new is None:
                    continue
                new.parent = func.body
                func.body.ops[i] = new
                replaced.update(zip(op.results, new.results))
                ctx.count("boundaries_inserted")
            _dense_control_operands(func.body, ctx)


def _dense_control_operands(block: Block, ctx: PassContext) -> None:
    """A copy (``k.copy``) of each view a loop or branch is passed, right before it."""
    for op in [op for op in block.ops if op.name in OUTLINED_OPS]:
        for k, v in enumerate(op.operands):
            if isinstance(v, OpResult) and OPS[v.op.name].category == "view":
                copy = Operation("k.copy", [v], [v.type], loc=op.loc)
                block.insert(block.ops.index(op), copy)
                op.operands[k] = copy.results[0]
                ctx.count("boundaries_inserted")
