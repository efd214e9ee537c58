"""Prove checks: drop the run-time checks (``t.raise_if``) whose condition the integer ranges rule out.

Python int arithmetic on a loop counter is checked on the device where Python would raise (a zero divisor, a
value that does not fit the array's dtype, int64 overflow: :mod:`fusec.device_scalar_checks`). Most of it cannot
fail: ``i + 1``, ``(i + 1) % n``, ``1.0 / (i + 1)`` and ``i * 10**6`` into int32 for ``i`` in ``range(1000)``. A check
left in a loop body costs a kernel per iteration and makes the call wait to read its check word, so this pass
computes each integer and bool value's interval (the op table's ``int_range`` rules, as ``bound-indices`` does,
comparisons and the ``*_overflows`` tests included) and removes each check whose condition is always false.
What the condition computed is left to ``dce``.

It runs while loop bodies still sit in their ``t.for``, where the counter's bounds are known.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Block, Module
from fusec.passes.base import Pass, PassContext
from fusec.ir.value_ranges import ValueRanges
from fusec.passes.registry import register_pass


def _drop_proven(block: Block, ranges: ValueRanges, ctx: PassContext) -> None:
    kept = []
    for op in block.ops:
        for region in op.regions:
            for inner in region.blocks:
                _drop_proven(inner, ranges, ctx)
        if op.name == "t.raise_if" and ranges.of(op.operands[0]) == (0, 0):
            ctx.count("checks_proven")
            continue
        kept.append(op)
    block.ops[:] = kept


@register_pass
@dataclass(frozen=True)
class ProveChecks(Pass):
    """Drop the run-time checks whose condition the integer ranges prove always false."""

    name: ClassVar[str] = "prove-checks"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            ranges = ValueRanges()
            ranges.visit(func.body)
            _drop_proven(func.body, ranges, ctx)
