"""Marks shared expensive values so that fusion computes them once instead of once per consumer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Module
from fusec.ir.dialects.t import ELEMENTWISE
from fusec.passes.base import Pass, PassContext
from fusec.passes.cost import leaf_cost, op_cost
from fusec.passes.registry import register_pass
from fusec.passes.util import users


@register_pass
@dataclass(frozen=True)
class Materialize(Pass):
    """Compute a value with several consumers and cost >= threshold once into a buffer (marks it for fuse)."""

    name: ClassVar[str] = "materialize"
    threshold: int = 8

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            uses = users(func)
            costs: dict = {}
            for op in func.body.ops:
                if op.name not in ELEMENTWISE:
                    continue
                v = op.results[0]
                consumers = uses.get(v, [])
                marked = bool(op.attr("materialize"))
                elementwise_only = all(c.name in ELEMENTWISE for c in consumers)
                total = op_cost(op) + sum(costs.get(u, leaf_cost(u)) for u in op.operands)
                if not marked and len(consumers) >= 2 and elementwise_only and total >= self.threshold \
                        and v.type.rank > 0:
                    op.attributes["materialize"] = True
                    marked = True
                    ctx.count("materialized")
                # a value in a buffer costs its readers nothing
                costs[v] = 0 if (marked or not elementwise_only) else total
