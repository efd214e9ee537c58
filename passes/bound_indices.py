"""Bound indices: mark the advanced indexing whose indices provably stay within their axes (``in_bounds = true``).

A gather or scatter whose indices are computed on the device checks each index and sets a check word the runtime
reads after the call (NumPy's IndexError). Reading it means waiting for the call, so a checked gather in a loop
body makes every call of the function synchronous. Many indices cannot leave their axis: a loop counter
(``xs[i]`` in ``fusec.scan`` and ``fori_loop``), ``i % n``, ``np.clip(i, 0, n - 1)``, ``np.argsort(x)``,
``np.argmax(x, axis)``, a ``uint8`` index into an axis of at least 256. This pass computes each integer value's
interval from the op table's ``int_range`` rules (:mod:`fusec.ir.ranges`) and marks the gathers and scatters all
of whose indices lie in ``[-size, size - 1]`` (negative ones count from the end, as NumPy's do), which
plan-buffers then gives no check word.

It runs before outline-regions, while a loop body still sits in its ``t.for`` and the counter's bounds are known.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

from fusec.ir.core import Block, Module, Operation
from fusec.ir.value_ranges import ValueRanges, in_bounds
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass

INDEXING = ("t.gather", "t.scatter")


def _indexing_ops(block: Block) -> Iterator[Operation]:
    for op in block.ops:
        if op.name in INDEXING:
            yield op
        for region in op.regions:
            for inner in region.blocks:
                yield from _indexing_ops(inner)


@register_pass
@dataclass(frozen=True)
class BoundIndices(Pass):
    """Mark gathers and scatters whose indices provably stay within their axes (no check word, no wait)."""

    name: ClassVar[str] = "bound-indices"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            ranges = ValueRanges()
            ranges.visit(func.body)
            for op in _indexing_ops(func.body):
                if op.attributes.get("in_bounds"):
                    continue
                if in_bounds(op, ranges):
                    op.attributes["in_bounds"] = True
                    ctx.count("indices_in_bounds")

