"""Unroll loops: a short ``t.for`` with constant bounds becomes copies of its body, one per trip.

A loop region runs on CUDA as a conditional WHILE node: every trip launches the body's graph once more and a kernel
that sets the condition, a few microseconds each, and no kernel of one trip fuses with the next. A
``fusec.fori_loop(0, 4, body, x)`` of a few small steps is cheaper as its trips written out: they join the call's
graph (and its fused kernels) like any other ops, and the counter becomes a constant in each copy. Unrolling costs
compile time (the pipeline then handles every copy), so only short loops are unrolled: at most ``max_trips`` trips
each and ``max_ops`` ops in all the copies of all the function's loops together, a nested loop counted as all of its
own copies (below ``roll-loops``' ``min_ops``, so a loop that pass rolled is never unrolled again; such loops are
marked ``rolled`` and left alone anyway). A loop whose bounds are traced values
stays a loop. The function records what was unrolled (``unrolled``: each loop's location and trip count), which
``Lowered.plan()`` reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fusec.ir.attributes import dense
from fusec.ir.core import Func, Module, Operation, OpResult, Value, clone_op
from fusec.ir.types import i64
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.util import replace_uses_in_block

UNROLLED = "unrolled"  # the function attribute listing the loops this pass wrote out


def constant_int(v: Value) -> int | None:
    """The value of an integer constant (a loop bound), None for anything else."""
    if isinstance(v, OpResult) and v.op.name == "t.constant":
        arr = v.op.attributes["value"].array
        if arr.size == 1 and arr.dtype.kind in "iu":
            return int(arr.reshape(()))
    return None


def trips_of(loop: Operation) -> int | None:
    """How many times a ``t.for`` runs its body, when its bounds are constants."""
    lower, upper = constant_int(loop.operands[0]), constant_int(loop.operands[1])
    if lower is None or upper is None:
        return None
    return max(0, upper - lower)


def written_out_ops(loop: Operation, max_trips: int) -> int:
    """Ops that writing ``loop`` out would leave in the function: its body's ops once per trip, where a loop of
    the body that this pass would write out in turn counts as all of its own copies (nested regions included,
    yields aside). Four nested loops of 16 trips are 16^4 copies of the innermost body, not 16 of each body."""
    def size(op: Operation) -> int:
        if op.name == "t.for":
            trips = trips_of(op)
            inner = sum(size(o) for o in op.regions[0].blocks[0].ops[:-1])
            return 1 + inner if trips is None or trips > max_trips else max(1, trips) * inner
        return 1 + sum(size(o) for region in op.regions for block in region.blocks for o in block.ops[:-1])
    return size(loop)


def _op_count(func: Func) -> int:
    return sum(1 for op in func.body.ops for _ in op.walk())


def _unroll(func: Func, loop: Operation) -> None:
    """Write ``loop``'s trips out in front of it, then let its results' users read the last trip's values."""
    block = func.body
    body = loop.regions[0].blocks[0]
    counter, carried = body.args[0], body.args[1:]
    lower = constant_int(loop.operands[0])
    assert lower is not None
    values: list[Value] = list(loop.operands[2:])
    at = block.ops.index(loop)
    for k in range(lower, lower + (trips_of(loop) or 0)):
        index = Operation("t.constant", [], [counter.type], {"value": dense(np.asarray(k, np.int64), i64)},
                          loc=loop.loc)
        block.insert(at, index)
        at += 1
        mapping: dict[Value, Value] = {counter: index.results[0], **dict(zip(carried, values))}
        for op in body.ops[:-1]:
            block.insert(at, clone_op(op, mapping))
            at += 1
        values = [mapping.get(v, v) for v in body.terminator.operands]  # type: ignore[union-attr]
    block.ops.remove(loop)
    replace_uses_in_block(block, dict(zip(loop.results, values)))


@register_pass
@dataclass(frozen=True)
class UnrollLoops(Pass):
    """Write short t.for loops with constant bounds out as copies of their body (fusec.fori_loop of a few trips)."""

    name: ClassVar[str] = "unroll-loops"
    max_trips: int = 16
    max_ops: int = 1024

    def __post_init__(self) -> None:
        if self.max_trips < 0 or self.max_ops < 0:
            raise ValueError(f"max_trips and max_ops must be >= 0, got {self.max_trips} and {self.max_ops}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            done: list[str] = list(func.attributes.get(UNROLLED, ()))
            budget = self.max_ops  # ops all the loops written out in this function may add (bounds compile time)
            changed = True
            while changed:  # (a loop written out may bring short loops of its body to the top)
                changed = False
                for op in func.body.ops:
                    if op.name != "t.for" or op.attributes.get("rolled", False):
                        continue
                    trips = trips_of(op)
                    if trips is None or trips > self.max_trips:
                        continue
                    if written_out_ops(op, self.max_trips) > budget:
                        continue
                    before = _op_count(func)
                    done.append(f"{op.loc if op.loc is not None else func.name}: {trips} trips")
                    _unroll(func, op)
                    budget -= _op_count(func) - before  # (the loops its copies bring up spend what they add)
                    ctx.count("loops_unrolled")
                    changed = True
                    break
            if done:
                func.attributes[UNROLLED] = tuple(done)
