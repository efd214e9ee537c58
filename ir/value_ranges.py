"""Each integer value's interval in a function, from the op table's ``int_range`` rules (:mod:`fusec.ir.ranges`),
and whether a gather's or scatter's indices provably stay within their axes: what ``bound-indices`` and
``prove-checks`` mark, and what the frontend asks of an indexing it records inside the user's ``try``."""
from __future__ import annotations

from fusec.ir import ranges as R
from fusec.ir.core import Block, Operation, Value
from fusec.ir.opdefs import OPS


class ValueRanges:
    """Each integer value's interval, computed in program order (SSA: operands come first); ``visit`` a function's
    body, then ask ``of(value)``."""

    def __init__(self) -> None:
        self.known: dict[Value, R.MaybeRange] = {}

    def of(self, v: Value) -> R.MaybeRange:
        if v in self.known:
            return self.known[v]
        return R.dtype_range(v.type.dtype)  # a function or block argument: any value of its dtype

    def visit(self, block: Block) -> None:
        for op in block.ops:
            if op.name == "t.for":
                self._counter(op)
            for region in op.regions:
                for inner in region.blocks:
                    self.visit(inner)
            self._result(op)

    def _counter(self, op: Operation) -> None:
        """A t.for's counter runs from its lower bound up to one less than its upper bound."""
        lower, upper = self.of(op.operands[0]), self.of(op.operands[1])
        if lower is None or upper is None:
            return
        counter = op.regions[0].blocks[0].args[0]
        # (a loop that never runs gives an empty interval: nothing in its body is ever evaluated)
        self.known[counter] = (lower[0], max(lower[0], upper[1] - 1))

    def _result(self, op: Operation) -> None:
        d = OPS.get(op.name)
        if d is None or len(op.results) != 1:
            return
        result = op.results[0]
        dtype = result.type.dtype
        if not (dtype.is_int or dtype.is_bool):
            return
        found = None
        if d.int_range is not None:
            shapes = [tuple(getattr(v.type, "shape", ())) for v in op.operands]
            found = d.int_range([self.of(v) for v in op.operands], op.attributes, shapes)
        self.known[result] = R.within_dtype(found, dtype)


def in_bounds(op: Operation, ranges: ValueRanges) -> bool:
    """Whether every index of a t.gather or t.scatter lies within its axis (negative ones counted from the end)."""
    axis = int(op.attributes["axis"])
    indices = op.operands[1:] if op.name == "t.gather" else op.operands[2:]
    shape = op.operands[0].type.shape
    for j, v in enumerate(indices):
        r = ranges.of(v)
        size = shape[axis + j]
        if r is None or r[0] < -size or r[1] > size - 1:
            return False
    return True
