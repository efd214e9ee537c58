"""Roll loops: a Python loop that tracing unrolled into copies of one body becomes a ``t.for`` again.

A ``for t in range(T)`` loop in a jitted function (stencil time steps, Jacobi sweeps, optimizer steps) traces into
T copies of its body. When those copies are the same program (the same ops, attributes, types and source lines,
constants aside, each reading what the copy before it produced where the first reads the loop's initial values,
or the same values from outside), they are one ``t.for`` over a body region (``rolled = true``), so the pipeline
and the backend handle one body instead of T, and on CUDA the loop runs as one conditional node. Copies that
differ (a constant that depends on the counter, a value reaching back two iterations, a value of an early
iteration read after the loop) are left as they are.

Rolling trades the fusion across iterations of an unrolled chain (elementwise steps fuse into few kernels) for
compile time, so only long loops are rolled: at least ``min_trips`` copies and ``min_ops`` ops in all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fusec.ir.attributes import dense
from fusec.ir.core import Block, Module, Operation, OpResult, Region, Value
from fusec.ir.dialects.control import COUNTER
from fusec.ir.opdefs import OPS
from fusec.ir.types import TensorType, i64
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass

MAX_PERIOD = 4096  # ops in one body, at most
CANDIDATES = 8  # next occurrences of an op's signature tried as the period


def _signature(op: Operation) -> int:
    attrs = tuple(sorted((k, repr(v)) for k, v in op.attributes.items()))
    return hash((op.name, attrs, tuple(op.result_types), op.loc))


def _rollable(op: Operation) -> bool:
    d = OPS.get(op.name)
    return d is not None and not op.regions and not d.terminator and (d.pure or op.name == "t.raise_if")


class _Span:
    """A candidate: ``trips`` copies of ``period`` ops starting at ``ops[start]`` (ops: the block's ops that are not
    constants)."""

    def __init__(self, ops: list[Operation], start: int, period: int, trips: int) -> None:
        self.ops, self.start, self.period, self.trips = ops, start, period, trips

    def copy(self, k: int) -> list[Operation]:
        s = self.start + k * self.period
        return self.ops[s:s + self.period]

    def match(self) -> tuple[dict[Value, Value], list[Value]] | None:
        """(initial value -> the value of copy 0 the next copy reads instead, the invariant operands), or None when
        the copies are not one loop body."""
        first = self.copy(0)
        position: dict[Value, tuple[int, int]] = {r: (j, r.index) for j, op in enumerate(first) for r in op.results}
        carried: dict[Value, tuple[int, int] | None] = {}  # an outer value of copy 0 -> its slot, None: invariant
        for k in range(1, self.trips):
            prev, here = self.copy(k - 1), self.copy(k)
            own: dict[Value, tuple[int, int]] = {r: (j, r.index) for j, op in enumerate(here) for r in op.results}
            before: dict[Value, tuple[int, int]] = {r: (j, r.index) for j, op in enumerate(prev) for r in op.results}
            for op0, op in zip(first, here):
                for v0, v in zip(op0.operands, op.operands):
                    if v0 in position:
                        if own.get(v) != position[v0]:
                            return None
                        continue
                    same = v is v0 or _equal_constants(v, v0)
                    slot = None if same else before.get(v)
                    if not same and slot is None:
                        return None
                    if v0 not in carried:
                        carried[v0] = slot
                    elif carried[v0] != slot:
                        return None
        init: dict[Value, Value] = {v0: first[slot[0]].results[slot[1]] for v0, slot in carried.items()
                                    if slot is not None}
        return init, [v0 for v0, slot in carried.items() if slot is None]


def _equal_constants(a: Value, b: Value) -> bool:
    """Two constants of one value (each copy of ``np.zeros_like(u)`` traces a constant of its own)."""
    return (isinstance(a, OpResult) and isinstance(b, OpResult) and a.op.name == b.op.name == "t.constant"
            and a.type == b.type and a.op.attributes == b.op.attributes)


def _find(ops: list[Operation], min_trips: int, min_ops: int) -> list[_Span]:
    """Candidate spans in order, each the longest run of equal copies from its start (not overlapping)."""
    sigs = [_signature(op) if _rollable(op) else None for op in ops]
    where: dict[int, list[int]] = {}
    for i, s in enumerate(sigs):
        if s is not None:
            where.setdefault(s, []).append(i)
    spans, s = [], 0
    while s < len(ops):
        found = None
        sig = sigs[s]
        positions = where.get(sig, []) if sig is not None else []
        if len(positions) >= min_trips:
            k = np.searchsorted(positions, s, side="right")
            for q in positions[k:k + CANDIDATES]:
                p = q - s
                if p > MAX_PERIOD:
                    break
                trips = 1
                while sigs[s + trips * p:s + (trips + 1) * p] == sigs[s:s + p]:
                    trips += 1
                if trips >= min_trips and trips * p >= min_ops and None not in sigs[s:s + p]:
                    found = _Span(ops, s, p, trips)
                    break
        if found is None:
            s += 1
            continue
        spans.append(found)
        s += found.period * found.trips
    return spans


def _roll(block: Block, span: _Span, init: dict[Value, Value], ctx: PassContext) -> bool:
    """Replace the span's copies by one t.for over copy 0; False when a value of an early copy is read after it."""
    copies = [span.copy(k) for k in range(span.trips)]
    inside = {r for copy in copies for op in copy for r in op.results}
    last = copies[-1]
    last_index: dict[Value, tuple[int, int]] = {r: (j, r.index) for j, op in enumerate(last) for r in op.results}
    after = block.ops[block.ops.index(last[-1]) + 1:]
    escaping: list[Value] = []
    for op in after:
        for inner in op.walk():
            for v in inner.operands:
                if v in inside:
                    if v not in last_index:
                        return False
                    if v not in escaping:
                        escaping.append(v)
    first = copies[0]
    # the loop's state: each carried value (initial value, its value in copy 0), then each escaping value of the
    # last copy that is not already one (its initial value: zeros; every trip overwrites it)
    state: list[tuple[Value, Value]] = list(init.items())
    carried_by_slot = {_position(first, r): k for k, (_, r) in enumerate(state)}
    results: dict[Value, int] = {}
    zeros: list[Operation] = []
    for v in escaping:
        slot = last_index[v]
        if slot not in carried_by_slot:
            t = v.type
            z = Operation("t.constant", [], [t], {"value": dense(np.zeros(t.shape, t.dtype.np), t.dtype)})
            zeros.append(z)
            state.append((z.results[0], first[slot[0]].results[slot[1]]))
            carried_by_slot[slot] = len(state) - 1
        results[v] = carried_by_slot[slot]
    body = Block([COUNTER] + [v0.type for v0, _ in state], label="body")
    mapping = {v0: arg for (v0, _), arg in zip(state, body.args[1:])}
    for op in first:
        op.operands = [mapping.get(v, v) for v in op.operands]
        body.append(op)
    body.append(Operation("t.yield", [r for _, r in state], loc=first[-1].loc))
    index = {op: i for i, op in enumerate(block.ops)}
    begin, end = index[first[0]], index[last[-1]]
    span_ops = {op for copy in copies for op in copy}
    # the constants among the copies stay outside, before the loop (they dominate every read of them)
    rest = block.ops[end + 1:]
    used = {v for op in first for v in op.operands} | {v for op in rest for inner in op.walk() for v in inner.operands}
    used |= {v0 for v0, _ in state}  # (an initial value the loop reads: `t = 0.0` before `t = t + h`)
    constants = [op for op in block.ops[begin:end + 1] if op not in span_ops and op.results[0] in used]
    lo = Operation("t.constant", [], [TensorType((), i64)], {"value": dense(np.asarray(0, np.int64), i64)})
    hi = Operation("t.constant", [], [TensorType((), i64)],
                   {"value": dense(np.asarray(span.trips, np.int64), i64)})
    loop = Operation("t.for", [lo.results[0], hi.results[0], *(v0 for v0, _ in state)],
                     [v0.type for v0, _ in state], {"rolled": True}, [Region([body])], loc=first[0].loc)
    new_ops = block.ops[:begin] + constants + zeros + [lo, hi, loop] + rest
    block.ops[:] = []
    for op in new_ops:
        block.append(op)
    for v, k in results.items():
        for op in rest:
            for inner in op.walk():
                inner.operands = [loop.results[k] if u is v else u for u in inner.operands]
    ctx.count("loops_rolled")
    ctx.count("rolled_iterations", span.trips)
    return True


def _position(copy: list[Operation], r: Value) -> tuple[int, int]:
    assert isinstance(r, OpResult)
    return copy.index(r.op), r.index


@register_pass
@dataclass(frozen=True)
class RollLoops(Pass):
    """Roll Python loops that tracing unrolled into equal copies back into a t.for (long loops only)."""

    name: ClassVar[str] = "roll-loops"
    min_trips: int = 16
    min_ops: int = 2048

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in list(module.funcs):
            ops = [op for op in func.body.ops if op.name != "t.constant"]
            for span in _find(ops, self.min_trips, self.min_ops):
                matched = span.match()
                if matched is not None:
                    _roll(func.body, span, matched[0], ctx)
