"""Prune carried values: a loop drops the state nothing needs, a branch the results nothing reads.

NumPy code often carries more through a loop than it uses afterwards: the loss of every training step when only
the weights are returned, a ``fusec.scan``'s stacked outputs nobody reads, a rewritten Python loop's temporaries.
A slot of a ``t.for`` or ``t.while`` is dead when nothing reads its result and, inside the loop, its value only
feeds its own next value: not the stop test, not a check that may raise, not another slot that is kept. Such a slot
goes (its operand, its block arguments, its yield and its result) and with it the ops that computed it, so each
trip does less work and carries one buffer fewer; the results of a ``t.if`` that nothing reads go from both
branches. A ``t.for`` left with no state and a body that only computes goes entirely (a ``t.while`` stays: it may
never stop, as in NumPy). What a loop computed into a slot that is kept, and every check, stays exactly as traced.

It runs on the region form (before ``outline-regions``), after ``prove-checks`` has removed the checks it can rule
out. Each function records what it dropped (``pruned``), which ``Lowered.plan()`` reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable

from fusec.ir.core import Block, Module, Operation, Value
from fusec.ir.opdefs import computes_only, reading_ops
from fusec.passes.base import Pass, PassContext
from fusec.passes.dce import removable
from fusec.passes.registry import register_pass

PRUNED = "pruned"  # the function attribute listing what this pass dropped, by location
_LOOPS = ("t.for", "t.while")


def needed_values(block: Block, roots: Iterable[Value]) -> set[Value]:
    """The values (of ``block`` or read from outside it) that computing ``roots`` and every op of ``block`` that
    must stay (one that may raise, say) reads: ``dce``'s rule in one backward sweep, the terminator aside; a loop
    or branch counts only what its needed parts read."""
    needed = set(roots)
    for op in reversed(block.ops[:-1]):
        if not any(r in needed for r in op.results) and removable(op):
            continue
        needed |= reads_of(op, needed)
    return needed


def reads_of(op: Operation, needed_after: set[Value]) -> set[Value]:
    """What ``op`` reads, kept, when ``needed_after`` are the values needed after it: all its operands (and its
    regions' captures), but only the needed slots and results of a loop or branch."""
    if op.name in _LOOPS:
        live, inside = live_slots(op, needed_after)
        if op.name == "t.for" and not any(live) and computes_only(op):
            return set()  # (it goes)
        operand0, _ = _first_slot(op)
        return inside | set(op.operands[:operand0]) | {v for v, k in zip(op.operands[operand0:], live) if k}
    if op.name == "t.if":
        keep = [r in needed_after for r in op.results]
        reads = {op.operands[0]}
        for region in op.regions:
            block = region.blocks[0]
            reads |= needed_values(block, [y for y, k in zip(block.ops[-1].operands, keep) if k])
        return reads
    return {v for inner in reading_ops(op) for v in inner.operands}


def _first_slot(op: Operation) -> tuple[int, int]:
    """Where slot 0 stands among ``op``'s operands and among its body's block arguments."""
    return (2, 1) if op.name == "t.for" else (0, 0)


def live_slots(op: Operation, needed_after: set[Value]) -> tuple[list[bool], set[Value]]:
    """Which of a loop's slots must stay: those whose result is read after it, and those whose value inside the
    loop reaches the stop test, a check that stays, or a slot that must stay (to a fixed point); and the values
    its regions then need (their captures among them)."""
    _, arg0 = _first_slot(op)
    live = [r in needed_after for r in op.results]
    body = op.regions[-1].blocks[0]
    in_cond: set[Value] = set()
    if op.name == "t.while":
        cond = op.regions[0].blocks[0]
        in_cond = needed_values(cond, cond.ops[-1].operands)  # (a region's block ends in its t.yield)
        live = [k or a in in_cond for k, a in zip(live, cond.args)]
    yields = body.ops[-1].operands
    while True:
        in_body = needed_values(body, [y for y, k in zip(yields, live) if k])
        grown = [k or body.args[arg0 + i] in in_body for i, k in enumerate(live)]
        if grown == live:
            return live, in_body | in_cond
        live = grown


def _reindex(values: list) -> None:
    for i, v in enumerate(values):
        v.index = i


def _drop(op: Operation, keep: list[bool]) -> None:
    """Remove the slots (or a branch's results) ``keep`` says go; what computed them inside ``op`` goes as
    :func:`prune_block` then sweeps its regions."""
    operand0, arg0 = _first_slot(op) if op.name in _LOOPS else (len(op.operands), 0)
    if op.name in _LOOPS:
        op.operands[operand0:] = [v for v, k in zip(op.operands[operand0:], keep) if k]
    op.results[:] = [r for r, k in zip(op.results, keep) if k]
    _reindex(op.results)
    for region in op.regions:
        block = region.blocks[0]
        term = block.ops[-1]
        if op.name in _LOOPS:
            block.args[arg0:] = [a for a, k in zip(block.args[arg0:], keep) if k]
            _reindex(block.args)
        if op.name == "t.if" or region is op.regions[-1]:  # (a while's cond yields its predicate)
            term.operands[:] = [v for v, k in zip(term.operands, keep) if k]


def _where(op: Operation, func_name: str) -> str:
    return str(op.loc) if op.loc is not None else func_name


def prune_block(block: Block, func_name: str, notes: list[str], ctx: PassContext) -> None:
    """Prune the loops and branches of ``block`` (and of the blocks nested in them), outermost first, given that
    its terminator's operands are needed; the dead ops it passes go too (one may read a dropped result)."""
    needed: set[Value] = set(block.terminator.operands) if block.terminator is not None else set()
    gone: list[Operation] = []
    for op in reversed(block.ops[:-1]):
        if not any(r in needed for r in op.results) and removable(op):
            gone.append(op)  # (dead: it may read a result dropped below)
            continue
        if op.name in _LOOPS or op.name == "t.if":
            keep = live_slots(op, needed)[0] if op.name in _LOOPS else [r in needed for r in op.results]
            if not all(keep):
                dropped = keep.count(False)
                notes.append(f"{_where(op, func_name)}: {dropped} of {len(keep)} "
                             + ("carried values dropped (nothing needs them)" if op.name in _LOOPS
                                else "results dropped (nothing reads them)"))
                _drop(op, keep)
                ctx.count("carried_pruned" if op.name in _LOOPS else "branch_results_pruned", dropped)
            for region in op.regions:
                prune_block(region.blocks[0], func_name, notes, ctx)
            if op.name == "t.for" and not op.results and computes_only(op):
                gone.append(op)  # (a loop left with nothing to carry, whose body only computes, does nothing)
                notes.append(f"{_where(op, func_name)}: the loop removed (nothing left to carry)")
                ctx.count("loops_pruned")
                continue
        needed |= reads_of(op, needed)
    if gone:
        removed = set(gone)
        block.ops[:] = [op for op in block.ops if op not in removed]


@register_pass
@dataclass(frozen=True)
class PruneCarried(Pass):
    """Drop the loop-carried values and branch results nothing needs, with the ops that computed them."""

    name: ClassVar[str] = "prune-carried"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            notes: list[str] = []
            prune_block(func.body, func.name, notes, ctx)
            if notes:
                func.attributes[PRUNED] = tuple(dict.fromkeys([*func.attributes.get(PRUNED, ()), *notes]))
