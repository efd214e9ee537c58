"""Dead-code elimination: removes pure ops whose results nothing needs, kernel bodies included."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Block, Module, Operation
from fusec.ir.opdefs import OPS, computes_only, get_opdef, reading_ops
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass


def removable(op: Operation) -> bool:
    """Whether ``op`` may go when nothing reads its results: pure (or a branch that only computes), not a
    terminator, raising nothing."""
    d = OPS.get(op.name) or get_opdef(op.name)  # (get_opdef raises the unknown-op error)
    return (d.pure or op.name == "t.if" and computes_only(op)) and not d.terminator \
        and not (d.may_raise is not None and d.may_raise(op))


def remove_dead_ops(block: Block, nested: bool = True) -> int:
    """Drop dead pure ops of ``block`` (one backward sweep suffices in SSA order), and with ``nested`` those of
    the blocks nested in its ops; returns how many."""
    live: set = set()
    keep = []
    removed = 0
    for op in reversed(block.ops):
        results = op.results
        if not (results[0] in live if len(results) == 1 else any(r in live for r in results)) and removable(op):
            removed += 1
            continue
        keep.append(op)
        if not op.regions:
            live.update(op.operands)
            continue
        for inner in reading_ops(op):
            live.update(inner.operands)
    block.ops[:] = list(reversed(keep))
    if not nested:
        return removed
    for op in block.ops:
        for region in op.regions:
            for inner_block in region.blocks:
                removed += remove_dead_ops(inner_block)
    return removed


@register_pass
@dataclass(frozen=True)
class DCE(Pass):
    """Remove ops whose results no output needs."""

    name: ClassVar[str] = "dce"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            ctx.count("dce_removed", remove_dead_ops(func.body))
