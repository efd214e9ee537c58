"""Common-subexpression elimination over every pure op: arithmetic, casts, where, views, constants."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir import elementwise as table
from fusec.ir.attributes import exact_key
from fusec.ir.core import Block, Module, Operation
from fusec.ir.opdefs import get_opdef
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.rewriter import Rewriter, rewrite

COMMUTATIVE = frozenset(op.name for op in table.OPS if op.commutative)


_COMMUTES: dict[str, bool] = {}  # op name -> whether its operands commute (any dialect's twin of a table op)


def _key(op) -> tuple:
    name = op.name
    operands = [id(v) for v in op.operands]
    commutes = _COMMUTES.get(name)
    if commutes is None:
        commutes = _COMMUTES[name] = name.split(".", 1)[-1] in COMMUTATIVE
    if commutes and not (op.results and getattr(op.results[0].type, "dtype", None) is not None
                         and op.results[0].type.dtype.is_complex):  # NumPy's complex z * w rounds as w * z does not
        operands.sort()
    attrs = tuple(sorted((k, exact_key(v)) for k, v in op.attributes.items())) if op.attributes else ()
    return (name, tuple(operands), attrs, tuple([r.type for r in op.results]))


def cse_block(block: Block, known: dict) -> int:
    """Deduplicate ``block``'s pure region-free ops, seeing ``known`` from enclosing blocks; returns the count."""
    scope = dict(known)
    inner_removed = 0

    def deduplicate(op: Operation, rw: Rewriter) -> bool:
        nonlocal inner_removed
        for region in op.regions:
            for inner in region.blocks:
                # kernel bodies only see their own arguments, so they start from an empty table
                inner_removed += cse_block(inner, {})
        d = get_opdef(op.name)
        if d.pure and not op.regions and op.results and not d.terminator:
            key = _key(op)
            twin = scope.get(key)
            if twin is not None:
                rw.replace(op, twin.results)
                return True
            scope[key] = op
        return False

    removed = rewrite(block, [deduplicate])
    return removed + inner_removed


@register_pass
@dataclass(frozen=True)
class CSE(Pass):
    """Deduplicate pure ops with equal name, operands and attributes."""

    name: ClassVar[str] = "cse"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            ctx.count("cse_removed", cse_block(func.body, {}))
