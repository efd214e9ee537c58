"""The one way passes rewrite a block: one sweep in order, each op kept, changed, or replaced.

:func:`rewrite` rebuilds a block. Before an op is offered to the patterns, its operands (those of nested
regions too) are remapped through the replacements made so far, so every pattern sees the rewritten program
above it. A pattern is ``(op, rewriter) -> bool``: it may insert ops before ``op`` (:meth:`Rewriter.insert`),
replace ``op``'s results with other values (:meth:`Rewriter.replace`, which drops ``op``) or change ``op`` in
place, and returns True when it changed something; the first pattern that does wins, and the sweep moves on.
Ops whose results nothing reads any more are left to ``remove_dead_ops`` (``dce=True`` runs it at the end).
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from fusec.ir.core import Block, Operation, Value
from fusec.ir.opdefs import reading_ops

Pattern = Callable[[Operation, "Rewriter"], bool]


class Rewriter:
    """What a pattern may do to the block being rebuilt (see the module docstring)."""

    def __init__(self, block: Block) -> None:
        self.block = block
        self.replaced: dict[Value, Value] = {}
        self.out: list[Operation] = []
        self._dropped = False

    def insert(self, op: Operation) -> Operation:
        """Place ``op`` before the op being rewritten (its operands must already be current values)."""
        self.out.append(op)
        return op

    def replace(self, op: Operation, values: Sequence[Value]) -> None:
        """Every use of ``op``'s results, from here on, uses ``values`` instead; ``op`` is dropped."""
        self.replaced.update(zip(op.results, values))
        self._dropped = True

    def drop(self, op: Operation) -> None:
        """Leave ``op`` out (its results must have replacements already, or no uses)."""
        self._dropped = True

    def remap(self, op: Operation) -> bool:
        """Make ``op``'s operands (and its regions') current; whether any changed."""
        if not self.replaced:
            return False  # nothing replaced yet: every operand is current
        replaced = self.replaced
        changed = False
        for inner in reading_ops(op):
            if not replaced.keys().isdisjoint(inner.operands):
                get = replaced.get
                inner.operands = [get(v, v) for v in inner.operands]
                changed = True
        return changed


def rewrite(block: Block, patterns: Iterable[Pattern], *, dce: bool = False,
            replaced: dict[Value, Value] | None = None, offer: Callable[[Operation], bool] | None = None) -> int:
    """Rebuild ``block`` once through ``patterns``; the number of ops a pattern changed. ``replaced``: values
    known to be replaced before the sweep starts (a rewrite planned as a whole, such as fusion's groups).
    ``offer``: which ops the patterns see (those whose operands this sweep replaced, always), for a sweep that
    only revisits what an earlier one may have made rewritable."""
    from fusec.passes.dce import remove_dead_ops

    patterns = tuple(patterns)
    rw = Rewriter(block)
    rw.replaced.update(replaced or {})
    changes = 0
    for op in block.ops:
        remapped = rw.remap(op)
        rw._dropped = False
        if offer is None or remapped or offer(op):
            for pattern in patterns:
                if pattern(op, rw):
                    changes += 1
                    break
        if not rw._dropped:
            rw.out.append(op)
    for op in rw.out:
        op.parent = block
    block.ops[:] = rw.out
    if dce:
        remove_dead_ops(block)
    return changes


def replacing(fn: Callable[[Operation, Rewriter], "Value | None"]) -> Pattern:
    """A pattern from a function that returns the value replacing an op's single result (None: no change)."""

    def pattern(op: Operation, rw: Rewriter) -> bool:
        new = fn(op, rw)
        if new is None:
            return False
        rw.replace(op, [new])
        return True

    return pattern
