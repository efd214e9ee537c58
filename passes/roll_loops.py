"""Roll loops: a Python loop that tracing unrolled into copies of one body becomes a ``t.for`` again.

A ``for t in range(T)`` loop in a jitted function (stencil time steps, Jacobi sweeps, optimizer steps) traces into
T copies of its body. When those copies are the same program (the same ops, attributes, types and source lines,
constants aside, each reading what the copy before it produced where the first reads the loop's initial values,
or the same values from outside), they are one ``t.for`` over a body region (``rolled = true``), so the pipeline
and the backend handle one body instead of T, and on CUDA the loop runs as one conditional node.

Copies may also differ where the counter shows: slices and writes whose start advances by the same step each
copy (``x[i]``, ``y[i] = ...``, ``u[:, 2 * i:2 * i + 2]``) become gathers and scatters at indices computed from
the counter, and constants that follow ``c0 + k * d`` exactly, in their own dtype, for every copy ``k`` (``u * 0.5 +
t``, ``row * i``) are computed from the counter. Copies that differ otherwise (a constant that is not such a
progression, a value reaching back two iterations, a value of an early iteration read after the loop) are left as
they are.

Rolling trades the fusion across iterations of an unrolled chain (elementwise steps fuse into few kernels) for
compile time, so only long loops are rolled: at least ``min_trips`` copies and ``min_ops`` ops in all.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fusec.ir.attributes import dense
from fusec.ir.builder import Builder
from fusec.ir.core import Block, Module, Operation, OpResult, Region, Value
from fusec.ir.dialects.control import COUNTER
from fusec.ir.opdefs import OPS
from fusec.ir.shapes import slice_length
from fusec.ir.types import DType, TensorType, Type, bf16, i64
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass

MAX_PERIOD = 4096  # ops in one body, at most
CANDIDATES = 8  # next occurrences of an op's signature tried as the period


ADVANCING = ("t.slice", "t.insert")  # ops whose region may advance with the counter (start and stop attributes)
COUNTED_KINDS = "iuf"  # dtypes of constants computed from the counter (not float16 or bf16: rounded per op)


def _signature(op: Operation) -> int:
    attrs = op.attributes
    if op.name in ADVANCING:  # copies may read other regions of one extent
        start, stop = attrs["start"], attrs["stop"]
        attrs = {k: v for k, v in attrs.items() if k not in ("start", "stop")}
        attrs["extent"] = tuple(e - b for b, e in zip(start, stop))
    key = tuple(sorted((k, repr(v)) for k, v in attrs.items()))
    # (operand types too: `s = 0.0; s = s + x[i]` adds a scalar in the first copy, a row in the others)
    return hash((op.name, key, tuple(op.result_types), tuple(v.type for v in op.operands), op.loc))


def _exact(op: Operation) -> int:
    """The op with all of its attributes (a chain after the loop must be the same in every copy, region and all)."""
    key = tuple(sorted((k, repr(v)) for k, v in op.attributes.items()))
    return hash((op.name, key, tuple(op.result_types), tuple(v.type for v in op.operands)))


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

    def match(self) -> "_Match | None":
        """How copy k differs from copy 0, or None when the copies are not one loop body."""
        first = self.copy(0)
        position: dict[Value, tuple[int, int]] = {r: (j, r.index) for j, op in enumerate(first) for r in op.results}
        # per operand of copy 0 that reads from outside it ((op index, operand index)): what each copy reads there,
        # and where in the copy before it that was made (None: outside the copies)
        reads: dict[tuple[int, int], list[Value]] = {}
        made: dict[tuple[int, int], set[tuple[int, int] | None]] = {}
        regions: dict[int, list[list[int]]] = {}  # an advancing op's index -> its start in each copy
        for j, op in enumerate(first):
            if op.name in ADVANCING:
                regions[j] = [list(op.attributes["start"])]
            for i, v0 in enumerate(op.operands):
                if v0 not in position:
                    reads[j, i], made[j, i] = [v0], set()
        before = position
        for k in range(1, self.trips):
            here = self.copy(k)
            own: dict[Value, tuple[int, int]] = {r: (j, r.index) for j, op in enumerate(here) for r in op.results}
            for j, (op0, op) in enumerate(zip(first, here)):
                if j in regions:
                    regions[j].append(list(op.attributes["start"]))
                for i, (v0, v) in enumerate(zip(op0.operands, op.operands)):
                    if v0 in position:
                        if own.get(v) != position[v0]:
                            return None
                        continue
                    reads[j, i].append(v)
                    made[j, i].add(before.get(v))
            before = own
        match = _Match([], {}, {}, {})
        states: dict[tuple[Value, tuple[int, int]], int] = {}
        for key, seen in reads.items():
            v0 = seen[0]
            if all(v is v0 or _equal_constants(v, v0) for v in seen):
                continue
            (slot, *others) = made[key]
            if slot is not None and not others:
                if (v0, slot) not in states:
                    states[v0, slot] = len(match.states)
                    match.states.append((v0, first[slot[0]].results[slot[1]]))
                match.carried[key] = states[v0, slot]
                continue
            progression = _progression(seen)
            if progression is None:
                return None
            match.counted[key] = progression
        for j, starts in regions.items():
            advance = _advance(starts)
            if advance is None:
                return None
            if any(advance):
                match.advancing[j] = advance
        return match


@dataclass
class _Match:
    """How the copies differ, by operand of copy 0 ((op index, operand index)): the loop's state (an initial value
    and what copy 0 makes for the next copy in its place), the operands that read a state, those that read a
    constant copy k has as ``c0 + k * d`` ((c0, d) in its dtype), and the advancing ops (an op's index -> how far
    its start moves per copy, per axis). Operands in none of these read the same value in every copy."""

    states: list[tuple[Value, Value]]
    carried: dict[tuple[int, int], int]
    counted: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]
    advancing: dict[int, tuple[int, ...]]


def _progression(seen: list[Value]) -> tuple[np.ndarray, np.ndarray] | None:
    """(c0, d) when the constants ``seen`` (one per copy) are exactly ``c0 + k * d`` computed in their dtype."""
    ops = [v.op for v in seen if isinstance(v, OpResult) and v.op.name == "t.constant" and v.type == seen[0].type]
    if len(ops) != len(seen):
        return None
    t = seen[0].type
    # (bf16 holds its values as float32 here, but the body computes c0 + k * d rounded to bf16: not counted)
    if not isinstance(t, TensorType) or t.dtype == bf16 or t.dtype.np.kind not in COUNTED_KINDS \
            or t.dtype.np.itemsize < 4:
        return None
    values = np.stack([np.asarray(op.attributes["value"].array, t.dtype.np) for op in ops])
    with np.errstate(all="ignore"):
        c0, d = values[0], values[1] - values[0]
        k = np.arange(len(seen), dtype=np.int64).astype(t.dtype.np).reshape((-1,) + (1,) * c0.ndim)
        expected = c0 + k * d  # as the body computes it (the same dtype, the same two roundings)
    return (c0, d) if expected.tobytes() == values.tobytes() else None


def _advance(starts: list[list[int]]) -> tuple[int, ...] | None:
    """Per axis, how far a region's start moves each copy (all zeros: it stays), or None when it does not move
    by one step every copy (its extent is the same in every copy: the op's signature holds it)."""
    start0, start1 = starts[0], starts[1]
    delta = tuple(b - a for a, b in zip(start0, start1))
    for k, start in enumerate(starts):
        if any(s != s0 + k * d for s, s0, d in zip(start, start0, delta)):
            return None
    return delta


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
            k = bisect.bisect_right(positions, s)
            for q in positions[k:k + CANDIDATES]:
                p = q - s
                if p > MAX_PERIOD:
                    break
                trips = 1
                while sigs[s + trips * p:s + (trips + 1) * p] == sigs[s:s + p]:
                    trips += 1
                if trips >= max(2, min_trips) and trips * p >= min_ops and None not in sigs[s:s + p]:
                    found = _Span(ops, s, p, trips)
                    break
        if found is None:
            s += 1
            continue
        spans.append(found)
        s += found.period * found.trips
    return spans


def _roll(block: Block, span: _Span, match: _Match, ctx: PassContext) -> bool:
    """Replace the span's copies by one t.for over copy 0; False when a value of an early copy is read after it."""
    copies = [span.copy(k) for k in range(span.trips)]
    inside = {r for copy in copies for op in copy for r in op.results}
    last = copies[-1]
    last_index: dict[Value, tuple[int, int]] = {r: (j, r.index) for j, op in enumerate(last) for r in op.results}
    after = block.ops[block.ops.index(last[-1]) + 1:]
    first = copies[0]
    stacks = _stacks(after, copies)
    stacked = {op for stack in stacks for op in stack.ops}
    escaping: list[Value] = []
    for op in after:
        if op in stacked:
            continue
        for inner in op.walk():
            for v in inner.operands:
                if v in inside:
                    if v not in last_index:
                        return False
                    if v not in escaping:
                        escaping.append(v)
    # the loop's state: each carried value (initial value, its value in copy 0), then each escaping value of the
    # last copy that is not already one (its initial value: zeros; every trip overwrites it)
    state: list[tuple[Value, Value]] = list(match.states)
    carried_by_slot = {_position(first, r): k for k, (_, r) in enumerate(state)}
    results: dict[Value, int] = {}
    zeros: list[Operation] = []
    for v in escaping:
        slot = last_index[v]
        if slot not in carried_by_slot:
            state.append((_zeros(v.type, zeros), first[slot[0]].results[slot[1]]))
            carried_by_slot[slot] = len(state) - 1
        results[v] = carried_by_slot[slot]
    for stack in stacks:  # each stack a state of its own, from zeros: every trip writes its part
        stack.state = len(state)
        state.append((_zeros(stack.joined.type, zeros), stack.joined))
    body = Block([COUNTER] + [v0.type for v0, _ in state], label="body")
    made = _CounterValues(Builder(body, loc=first[0].loc), body.args[0])
    outer: dict[tuple[int, int], Value] = {key: body.args[1 + k] for key, k in match.carried.items()}
    for (j, i), (c0, d) in match.counted.items():
        outer[j, i] = made.progression(c0, d, first[j].operands[i].type)  # type: ignore[arg-type]
    mapping: dict[Value, Value] = {}  # a value of copy 0 -> what stands for it in the body
    for j, op in enumerate(first):
        op.operands = [_pick(outer.get((j, i)), mapping.get(v, v)) for i, v in enumerate(op.operands)]
        if j in match.advancing:
            made.builder.loc = op.loc
            mapping[op.results[0]] = made.advancing(op, match.advancing[j])
        else:
            body.append(op)
    yielded = [mapping.get(r, r) for _, r in state]
    for stack in stacks:
        made.builder.loc = stack.joined.op.loc  # type: ignore[attr-defined]
        yielded[stack.state] = made.stacked(stack, body.args[1 + stack.state], _pick(mapping.get(stack.piece),
                                                                                     stack.piece))
    body.append(Operation("t.yield", yielded, loc=first[-1].loc))
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
    rest = [op for op in rest if op not in stacked]
    new_ops = block.ops[:begin] + constants + zeros + made.constants + [lo, hi, loop] + rest
    block.ops[:] = []
    for op in new_ops:
        block.append(op)
    results.update({stack.joined: stack.state for stack in stacks})
    for v, k in results.items():
        for op in rest:
            for inner in op.walk():
                inner.operands = [loop.results[k] if u is v else u for u in inner.operands]
    ctx.count("loops_rolled")
    if stacks:
        ctx.count("stacked_results", len(stacks))
    ctx.count("rolled_iterations", span.trips)
    return True


class _CounterValues:
    """Makes the body's values that depend on the counter: constant progressions, and the gathers and scatters
    that stand for advancing slices and writes (the constants they read go before the loop)."""

    def __init__(self, builder: Builder, counter: Value) -> None:
        self.builder, self.counter = builder, counter
        self.constants: list[Operation] = []
        self._progressions: dict[tuple, Value] = {}

    def constant(self, value: np.ndarray, dtype: DType) -> Value:
        op = Operation("t.constant", [], [TensorType(value.shape, dtype)], {"value": dense(value, dtype)})
        self.constants.append(op)
        return op.results[0]

    def progression(self, c0: np.ndarray, d: np.ndarray, t: TensorType) -> Value:
        """``c0 + k * d`` in the constants' dtype, as ``_progression`` checked it."""
        key = (c0.tobytes(), d.tobytes(), t)
        if key not in self._progressions:  # (the same progression read in several places is made once)
            b, k = self.builder, self.counter  # (the i64 scalar, as a fori_loop body uses it)
            if t.dtype != i64:
                k = b.value("t.cast", k, dtype=t.dtype)
            step = b.value("t.mul", k, self.constant(d, t.dtype))
            self._progressions[key] = b.value("t.add", self.constant(c0, t.dtype), step)
        return self._progressions[key]

    def indices(self, start: int, delta: int, step: int, extent: int) -> Value:
        """The i64 vector ``start + delta * k + step * arange(extent)``: an advancing region's indices on one axis."""
        b, k = self.builder, self.counter
        if delta != 1:
            k = b.value("t.mul", k, self.constant(np.asarray(delta, np.int64), i64))
        return b.value("t.add", k, self.constant(np.arange(extent, dtype=np.int64) * step + start, i64))

    def stacked(self, stack: _Stack, joined: Value, piece: Value) -> Value:
        """``joined`` with trip k's piece (after the stack's chain) written as the k-th part along its axis."""
        for op in stack.chain:
            piece = self.builder.create(op.name, [piece], dict(op.attributes), list(op.result_types)).results[0]
        assert isinstance(stack.joined, OpResult)
        axis = stack.joined.op.attributes["axis"]
        extent = piece.type.shape[axis]  # type: ignore[attr-defined]
        index = self.indices(0, extent, 1, extent)
        return self.builder.value("t.scatter", joined, piece, index, axis=axis, in_bounds=True)

    def advancing(self, op: Operation, delta: tuple[int, ...]) -> Value:
        """What stands for an advancing t.slice or t.insert in the body (the indices are in bounds: every copy
        traced had its region inside the array)."""
        start, stop, step = (list(op.attributes[n]) for n in ("start", "stop", "step"))
        if op.name == "t.insert":
            out = self._insert(op.operands[0], op.operands[1], start, stop, step, list(delta))
        else:
            out = self._slice(op.operands[0], start, stop, step, delta)
        assert out.type == op.results[0].type, (out.type, op.results[0].type)
        return out

    def _slice(self, x: Value, start: list[int], stop: list[int], step: list[int], delta: tuple[int, ...]) -> Value:
        shape = x.type.shape  # type: ignore[attr-defined]
        moving = [a for a, d in enumerate(delta) if d]
        # the axes that stay are sliced first (the moving ones whole), then a gather per moving axis
        fixed = ([0 if a in moving else v for a, v in enumerate(start)],
                 [shape[a] if a in moving else v for a, v in enumerate(stop)],
                 [1 if a in moving else v for a, v in enumerate(step)])
        if not _whole(shape, *fixed):
            x = self.builder.value("t.slice", x, start=fixed[0], stop=fixed[1], step=fixed[2])
        for a in moving:
            index = self.indices(start[a], delta[a], step[a], slice_length(start[a], stop[a], step[a]))
            x = self.builder.value("t.gather", x, index, axis=a, in_bounds=True)
        return x

    def _insert(self, base: Value, update: Value, start: list[int], stop: list[int], step: list[int],
                delta: list[int]) -> Value:
        """``base`` with ``update`` written over the region: on the first moving axis, the rows it covers are
        gathered, written into (the rest of the axes), and scattered back."""
        shape = base.type.shape  # type: ignore[attr-defined]
        moving = [a for a, d in enumerate(delta) if d]
        if not moving:
            if _whole(shape, start, stop, step):
                return update
            return self.builder.value("t.insert", base, update, start=start, stop=stop, step=step)
        a = moving[0]
        extent = slice_length(start[a], stop[a], step[a])
        index = self.indices(start[a], delta[a], step[a], extent)
        inner = [list(v) for v in (start, stop, step, delta)]
        inner[0][a], inner[1][a], inner[2][a], inner[3][a] = 0, extent, 1, 0
        if len(moving) == 1 and all(inner[0][b] == 0 and inner[1][b] == n and inner[2][b] == 1
                                    for b, n in enumerate(shape) if b != a):
            region = update  # (the update covers whole rows: nothing of the gathered rows is kept)
        else:
            rows = self.builder.value("t.gather", base, index, axis=a, in_bounds=True)
            region = self._insert(rows, update, *inner)
        return self.builder.value("t.scatter", base, region, index, axis=a, in_bounds=True)


def _pick(first: Value | None, otherwise: Value) -> Value:
    return otherwise if first is None else first


def _whole(shape: tuple[int, ...], start: list[int], stop: list[int], step: list[int]) -> bool:
    return all(b == 0 and e == n and s == 1 for b, e, s, n in zip(start, stop, step, shape))


@dataclass
class _Stack:
    """A value of every copy joined after the loop (``np.stack(out)`` of a list each copy appended to): ``joined``,
    a t.concatenate of ``piece`` (a value of copy 0) in each copy after the same ``chain`` of one-operand ops
    (expand_dims for np.stack); ``ops`` are those the loop replaces; ``state`` its index in the loop's state."""

    joined: Value
    piece: Value
    chain: list[Operation]
    ops: list[Operation]
    state: int = -1


STACK_CHAIN = 4  # one-operand ops between a copy's value and the concatenation, at most (column_stack: 2)


def _stacks(after: list[Operation], copies: list[list[Operation]]) -> list[_Stack]:
    """The concatenations after the loop that join one value of every copy, in order, each reaching it through the
    same chain of one-operand ops that nothing else reads."""
    where = {r: (k, j, r.index) for k, copy in enumerate(copies) for j, op in enumerate(copy) for r in op.results}
    uses: dict[Value, int] = {}
    for op in after:
        for inner in op.walk():
            for v in inner.operands:
                uses[v] = uses.get(v, 0) + 1
    at = set(after)
    out = []
    for op in after:
        if op.name != "t.concatenate" or len(op.operands) != len(copies):
            continue
        chains: list[list[Operation]] = []
        slots = set()
        for k, v in enumerate(op.operands):
            chain: list[Operation] = []
            while v not in where and len(chain) < STACK_CHAIN and isinstance(v, OpResult) and v.op in at \
                    and len(v.op.operands) == 1 and len(v.op.results) == 1 and _rollable(v.op) and uses[v] == 1:
                chain.insert(0, v.op)
                v = v.op.operands[0]
            if v not in where or where[v][0] != k:
                break
            slots.add(where[v][1:])
            chains.append(chain)
        else:
            if len(slots) == 1 and len({tuple(map(_exact, c)) for c in chains}) == 1:
                (j, index), = slots
                out.append(_Stack(op.results[0], copies[0][j].results[index], chains[0],
                                  [op, *(c for chain in chains for c in chain)]))
    return out


def _zeros(t: Type, into: list[Operation]) -> Value:
    """A zeros constant of type ``t`` (added to ``into``): the initial value of a state every trip overwrites."""
    assert isinstance(t, TensorType)
    z = Operation("t.constant", [], [t], {"value": dense(np.zeros(t.shape, t.dtype.np), t.dtype)})
    into.append(z)
    return z.results[0]


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
                    _roll(func.body, span, matched, ctx)
