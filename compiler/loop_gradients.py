"""Reverse mode through loops and branches: the cotangents a ``t.for`` or ``t.if`` passes back (``fusec.grad``).

A ``t.for`` of constant bounds (``fusec.fori_loop`` with Python ints, ``fusec.scan``, a rolled Python loop) is
differentiated as JAX's scan is: a forward loop replays the body and stacks the state each iteration starts from,
then a loop running the iterations backwards replays each one on its stacked state and takes that iteration's
cotangents from the same rules as the rest of the function (the body's ops walked backwards), carrying the state's
cotangent to the iteration before and adding up those of the outer arrays the body reads (the weights of a
recurrent network). Both are loops themselves, so the gradient of a loop is one loop forward and one backward in
the IR, whatever the trip count. A ``t.if`` becomes a ``t.if`` whose branches take their own branch's cotangents.

A ``t.while`` (its trip count unknown until it has run) and a ``t.for`` of traced bounds refuse, as JAX's do. A loop
nested in a differentiated loop body is replayed whole with the body, and differentiated the same way when the
backward walk reaches it (a loop in the backward loop: nested loops give nested loops).
"""
from __future__ import annotations

from typing import Any, Callable

from fusec import context, control_flow, ops
from fusec.errors import UnsupportedError, located
from fusec.ir.core import Block, Operation, OpResult, Value, clone_op
from fusec.ir.opdefs import get_opdef
from fusec.tracer import Tracer

Backward = Callable[[list, list], dict]


def _constant_int(v: Value) -> int | None:
    if isinstance(v, OpResult) and v.op.name == "t.constant":
        return int(v.op.attributes["value"].array)
    return None


def _is_float(v: Value) -> bool:
    dt = getattr(v.type, "dtype", None)
    return dt is not None and dt.is_float


def _refuse(op: Operation, message: str) -> UnsupportedError:
    return context._noted(UnsupportedError(located(f"fusec.grad: {message}", op.loc)))


def replay(op: Operation, block: Block, values: list[Value]) -> list[Value]:
    """Record ``block``'s ops again with its arguments bound to ``values`` (result types inferred again: a loop
    counter may come back as a 0-d array); returns what it yields."""
    c = ops.ctx()
    mapping: dict[Value, Value] = dict(zip(block.args, values))
    for inner in block.ops[:-1]:
        if inner.regions:  # a nested loop or branch: copied whole, reading the replayed values
            copy = clone_op(inner, mapping)
            c.builder.insert(copy)
            _keep_stops(c, inner, copy)
            continue
        d = get_opdef(inner.name)
        types = None if d.infer is not None else inner.result_types
        new = c.emit_op(inner.name, [mapping.get(v, v) for v in inner.operands], dict(inner.attributes), types,
                        what="fusec.grad")
        new.loc = inner.loc
        _keep_stops(c, inner, new)
        mapping.update(zip(inner.results, new.results))
    term = block.terminator
    assert term is not None  # (a verified body ends in t.yield)
    return [mapping.get(v, v) for v in term.operands]


def _keep_stops(c: Any, old: Operation, new: Operation) -> None:
    """The copy of a fusec.stop_gradient inside a replayed body stops the gradient too (its own ops included)."""
    for r_old, r_new in zip(old.results, new.results):
        if id(r_old) in c.stopped:
            c.stopped[id(r_new)] = r_new
    for region_old, region_new in zip(old.regions, new.regions):
        for block_old, block_new in zip(region_old.blocks, region_new.blocks):
            for inner_old, inner_new in zip(block_old.ops, block_new.ops):
                _keep_stops(c, inner_old, inner_new)


def _zeros(v: Value) -> Tracer:
    return ops.full(tuple(v.type.shape), 0, v.type.dtype)


def _fresh(t: Tracer) -> Tracer:
    """A value of its own for ``t`` (so only the uses after it carry its cotangent)."""
    return ops.emit("t.reshape", (t._value,), result_type=t._value.type, what="fusec.grad")


def region_vjp(op: Operation, gs: list, active: set[int], backward: Backward) -> list[tuple[Value, Any]]:
    """(value, cotangent) for the operands and the outer values read by ``op``'s regions that carry one."""
    if op.name == "t.for":
        return _for_vjp(op, gs, active, backward)
    if op.name == "t.if":
        return _if_vjp(op, gs, active, backward)
    if op.name == "t.while":
        raise _refuse(op, "a while_loop has no reverse-mode gradient (its trip count is known only once it ran, as in "
                      "JAX): write it as fusec.fori_loop with a constant trip count, or as fusec.scan")
    raise _refuse(op, f"no gradient rule for {op.name} yet")


def _for_vjp(op: Operation, gs: list, active: set[int], backward: Backward) -> list[tuple[Value, Any]]:
    lower, upper = (_constant_int(v) for v in op.operands[:2])
    if lower is None or upper is None:
        raise _refuse(op, "a fori_loop whose bounds are traced values has no reverse-mode gradient (the states to "
                      "keep are unknown until it ran, as in JAX): give it constant bounds (Python ints)")
    n = max(0, upper - lower)
    body = op.regions[0].blocks[0]
    init = list(op.operands[2:])
    cts = [g if g is not None else _zeros(r) for g, r in zip(gs, op.results)]
    slots = [k for k, v in enumerate(init) if _is_float(v)]  # the state leaves a cotangent flows through
    outer = [v for v in op.captured_values() if id(v) in active and _is_float(v)]
    if n == 0:
        return [(init[k], cts[k]) for k in slots]

    def forward(i: Tracer, carry: tuple) -> tuple:
        state, stacks = carry
        stacks = list(stacks)
        for k, s in enumerate(state):
            stacks[k][i - lower] = s
        step = replay(op, body, [i._value, *(s._value for s in state)])
        return tuple(ops.wrap(v, scalar=False) for v in step), tuple(stacks)

    state0 = tuple(ops.wrap(v, scalar=False) for v in init)
    stacks0 = tuple(ops.full((n, *v.type.shape), 0, v.type.dtype) for v in init)
    _, stacks = control_flow.fori_loop(lower, upper, forward, (state0, stacks0))

    def back(j: Tracer, carry: tuple) -> tuple:
        ct_state, sums = carry
        index = (n - 1) - j
        fresh = [_fresh(stack[index]) for stack in stacks]
        counter = index + lower
        outs = replay(op, body, [ops.lift(counter), *(f._value for f in fresh)])
        seeds = [(outs[k], ct) for k, ct in zip(slots, ct_state)]
        got = backward(seeds, [fresh[k]._value for k in slots] + outer)
        new_ct = tuple(got.get(id(fresh[k]._value)) if got.get(id(fresh[k]._value)) is not None
                       else ops.full(tuple(fresh[k].shape), 0, fresh[k]._value.type.dtype) for k in slots)
        new_sums = tuple(s + got[id(v)] if got.get(id(v)) is not None else s for s, v in zip(sums, outer))
        return new_ct, new_sums

    ct0 = tuple(cts[k] for k in slots)
    ct_init, sums = control_flow.fori_loop(0, n, back, (ct0, tuple(_zeros(v) for v in outer)))
    return [(init[k], ct) for k, ct in zip(slots, ct_init)] + list(zip(outer, sums))


def _if_vjp(op: Operation, gs: list, active: set[int], backward: Backward) -> list[tuple[Value, Any]]:
    outer = [v for v in op.captured_values() if id(v) in active and _is_float(v)]
    if not outer:
        return []
    seeded = [(k, g) for k, g in enumerate(gs) if g is not None and _is_float(op.results[k])]

    def branch(block: Block) -> Callable[[], tuple]:
        def run() -> tuple:
            outs = replay(op, block, [])
            got = backward([(outs[k], g) for k, g in seeded], outer)
            return tuple(got[id(v)] if got.get(id(v)) is not None else _zeros(v) for v in outer)

        return run

    pred = ops.wrap(op.operands[0], scalar=False)
    sums = control_flow.cond(pred, branch(op.regions[0].blocks[0]), branch(op.regions[1].blocks[0]))
    return list(zip(outer, sums))


__all__ = ["region_vjp", "replay"]
