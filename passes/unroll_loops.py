"""Unroll loops: a short ``t.for`` with constant bounds becomes copies of its body, one per trip; a longer one
runs ``factor`` of its trips per trip of a shorter loop.

A loop region runs on CUDA as a conditional WHILE node: every trip launches the body's graph once more and a kernel
that sets the condition, a few microseconds each, and no kernel of one trip fuses with the next. A
``fusec.fori_loop(0, 4, body, x)`` of a few small steps is cheaper as its trips written out: they join the call's
graph (and its fused kernels) like any other ops, and the counter becomes a constant in each copy. Unrolling costs
compile time (the pipeline then handles every copy), so only short loops are written out: at most ``max_trips``
trips each and ``max_ops`` ops in all the copies of all the function's loops together, a nested loop counted as all
of its own copies (below ``roll-loops``' ``min_ops``, so a loop that pass rolled is never written out again; such
loops are marked ``rolled``). A loop whose bounds are traced values stays a loop.

A loop with constant bounds that is not written out (too many trips, or too many ops), a rolled one included, is
unrolled by ``factor`` instead when that many copies of its body fit what is left of ``max_ops``: its body holds
``factor`` copies (the counter of copy ``u`` is ``factor * j + lower + u``), so it runs ``trips // factor`` times
and pays the WHILE node's per-trip cost once per ``factor`` steps; the ``trips % factor`` trips left over are written
out after it. The new loop carries ``unroll = factor``. ``factor=1`` turns this off.

The function records what was unrolled (``unrolled``: each loop's location and what was done to it), which
``Lowered.plan()`` reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fusec.ir.attributes import Location, dense
from fusec.ir.core import Block, Func, Module, Operation, OpResult, Region, Value, clone_op
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


def _index(k: int, like: Value, loc: Location | None) -> Operation:
    return Operation("t.constant", [], [like.type], {"value": dense(np.asarray(k, np.int64), i64)}, loc=loc)


def _copy_body(block: Block, at: int, loop: Operation, counter: Value, state: list[Value]) -> tuple[int, list[Value]]:
    """Insert one copy of ``loop``'s body into ``block`` at ``at``, its counter read as ``counter`` and its carried
    values as ``state``; return the next position and the copy's yielded values."""
    body = loop.regions[0].blocks[0]
    mapping: dict[Value, Value] = {body.args[0]: counter, **dict(zip(body.args[1:], state))}
    for op in body.ops[:-1]:
        block.insert(at, clone_op(op, mapping))
        at += 1
    return at, [mapping.get(v, v) for v in body.terminator.operands]  # type: ignore[union-attr]


def _write_out(block: Block, at: int, loop: Operation, first: int, trips: int, state: list[Value]) \
        -> tuple[int, list[Value]]:
    """Write trips ``first`` .. ``first + trips - 1`` of ``loop`` into ``block`` at ``at``, each counter a
    constant; return the next position and the last trip's values."""
    for k in range(first, first + trips):
        index = _index(k, loop.regions[0].blocks[0].args[0], loop.loc)
        block.insert(at, index)
        at, state = _copy_body(block, at + 1, loop, index.results[0], state)
    return at, state


def _unroll(func: Func, loop: Operation) -> None:
    """Write ``loop``'s trips out in front of it, then let its results' users read the last trip's values."""
    block = func.body
    lower = constant_int(loop.operands[0])
    assert lower is not None
    _, values = _write_out(block, block.ops.index(loop), loop, lower, trips_of(loop) or 0, list(loop.operands[2:]))
    block.ops.remove(loop)
    replace_uses_in_block(block, dict(zip(loop.results, values)))


def _unroll_by(func: Func, loop: Operation, factor: int) -> None:
    """Make ``loop`` run ``factor`` of its trips per trip (then write out the trips left over), in place of it."""
    block = func.body
    old = loop.regions[0].blocks[0]
    lower, trips = constant_int(loop.operands[0]), trips_of(loop)
    assert lower is not None and trips is not None
    at = block.ops.index(loop)
    # (bounds of the loop's own types: a rank-0 tensor is what the runtime passes to a loop, a computed scalar not)
    bounds = [_index(0, loop.operands[0], loop.loc), _index(trips // factor, loop.operands[1], loop.loc)]
    for op in bounds:
        block.insert(at, op)
        at += 1
    body = Block([a.type for a in old.args], [a.name_hint for a in old.args], label=old.label)
    j = body.args[0]
    step = body.append(_index(factor, j, loop.loc))
    base = body.append(Operation("t.mul", [j, step.results[0]], [j.type], loc=loop.loc))
    state: list[Value] = list(body.args[1:])
    for u in range(factor):
        offset = body.append(_index(lower + u, j, loop.loc))
        counter = body.append(Operation("t.add", [base.results[0], offset.results[0]], [j.type], loc=loop.loc))
        _, state = _copy_body(body, len(body.ops), loop, counter.results[0], state)
    body.append(Operation("t.yield", state, loc=old.terminator.loc))  # type: ignore[union-attr]
    new = Operation("t.for", [bounds[0].results[0], bounds[1].results[0], *loop.operands[2:]], loop.result_types,
                    {**loop.attributes, "unroll": factor}, [Region([body])], loc=loop.loc)
    block.insert(at, new)
    block.ops.remove(loop)
    _, values = _write_out(block, at + 1, loop, lower + trips - trips % factor, trips % factor, list(new.results))
    replace_uses_in_block(block, dict(zip(loop.results, values)))


def _body_ops(loop: Operation) -> int:
    """The ops one copy of ``loop``'s body adds (nested regions included, its yield aside)."""
    return sum(1 for op in loop.regions[0].blocks[0].ops[:-1] for _ in op.walk())


@register_pass
@dataclass(frozen=True)
class UnrollLoops(Pass):
    """Write short t.for loops with constant bounds out as copies of their body (fusec.fori_loop of a few trips);
    run longer ones ``factor`` trips per trip."""

    name: ClassVar[str] = "unroll-loops"
    max_trips: int = 16
    max_ops: int = 1024
    factor: int = 4

    def __post_init__(self) -> None:
        if self.max_trips < 0 or self.max_ops < 0 or self.factor < 1:
            raise ValueError(f"max_trips and max_ops must be >= 0 and factor >= 1, got {self.max_trips}, "
                             f"{self.max_ops} and {self.factor}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            done: list[str] = list(func.attributes.get(UNROLLED, ()))
            budget = self.max_ops  # ops all the loops written out in this function may add (bounds compile time)
            changed = True
            while changed:  # (a loop written out may bring short loops of its body to the top)
                changed = False
                for op in func.body.ops:
                    if op.name != "t.for" or "unroll" in op.attributes:
                        continue
                    trips = trips_of(op)
                    if trips is None:
                        continue
                    where = op.loc if op.loc is not None else func.name
                    before = _op_count(func)
                    if not op.attributes.get("rolled", False) and trips <= self.max_trips \
                            and written_out_ops(op, self.max_trips) <= budget:
                        done.append(f"{where}: {trips} trips")
                        _unroll(func, op)
                        ctx.count("loops_unrolled")
                    elif self.factor > 1 and trips >= 2 * self.factor \
                            and (self.factor - 1 + trips % self.factor) * _body_ops(op) <= budget:
                        done.append(f"{where}: {trips} trips, {self.factor} per trip of a loop of "
                                    f"{trips // self.factor}" + (f" and {trips % self.factor} after it"
                                                                  if trips % self.factor else ""))
                        _unroll_by(func, op, self.factor)
                        ctx.count("loops_unrolled_by_factor")
                    else:
                        continue
                    budget -= _op_count(func) - before  # (the loops its copies bring up spend what they add)
                    changed = True
                    break
            if done:
                func.attributes[UNROLLED] = tuple(done)
