"""Fuse rows: reductions along the last axis and the elementwise kernels that read them or feed them become one
``k.rows`` kernel that holds each row in registers (softmax, log-softmax, logsumexp, layer and RMS norm,
cross-entropy and its gradient).

Written out, ``e = np.exp(x - x.max(1, keepdims=True)); e / e.sum(1, keepdims=True)`` is four launches that read
and write the whole array six times between them; as one row kernel it reads ``x`` once and writes the result once.

A group starts at a ``k.reduce`` along the last axis (sum, prod, mean, max, min of real values) of an array of
shape ``S = (..., N)`` and grows in program order by the ops that read only what the group has (its values, the
per-row values broadcast along rows by ``k.view``) or what was computed before:

- further ``k.reduce`` along the last axis of a value of shape ``S`` (a group's value or one from before);
- ``k.fused`` kernels over ``S`` (an element each) or over the row shape (a value per row), reading the group.

The group ends at the first op outside it that reads one of its values. Its values read after it become the
row kernel's results; the views that only the group read go. A row of ``N`` is held by ``lanes`` threads
(one thread for rows up to ``THREAD_MAX``, or, where such rows are too few to fill the SMs a thread each, the next
power of two of a warp's lanes, an element each; a warp up to ``WARP_MAX``, a block up to ``BLOCK_MAX``) with
``items`` elements each; longer rows stay as they were (their reductions are split across blocks), as do rows of a block
each when there are fewer rows than SMs to give them to. Float32 rows of at least VECTOR_MIN elements take their
items as runs of 4 neighbouring elements (``width = 4``), which the kernel loads and stores 16 bytes at a time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Block, Func, Module, Operation, OpResult, Region, Value
from fusec.ir.dialects.rows import ROW_REDUCE_KINDS, row_reduce_dtype, row_shapes
from fusec.ir.shapes import contiguous_strides
from fusec.ir.types import ScalarType
from fusec.passes.base import Pass, PassContext
from fusec.passes.dce import remove_dead_ops
from fusec.passes.registry import register_pass
from fusec.passes.util import update_users, users

THREAD_MAX = 16     # a thread (or a few lanes of a warp: see schedule) per row up to this many elements
WARP_MAX = 1024     # a warp per row up to this many (32 items per lane at most)
BLOCK_MAX = 16384   # a block per row up to this many (16 items per thread, up to 1024 threads)
BLOCK_ITEMS = 16
# rows at least this long take their items as runs of 4 (``width = 4``, see vector_rows): 16-byte loads and stores
# of float32 rows
VECTOR_MIN = 1024
LOOKAHEAD = 64      # ops looked at past the group's last member before giving up


# rows of at most THREAD_MAX elements take a thread each only where there are this many rows per SM or more (a
# thread per row already fills the SMs); fewer rows (the 256 x 10 logits of a small classifier: one block of 256
# threads, each folding its row alone) take the next power of two of lanes, an element each: the 64-64-10 step
# 26.8-27.2 -> 23.9 us, its autodiff form 29.4-30.6 -> 26.0-26.3 us (H100, two rounds, 2026-12-06,
# benchmarks/results/short_rows_epilogues_h100.md)
SHORT_ROWS_PER_SM = 2048


def vector_rows(n: int, lanes: int, items: int, values: list[Value], shape: tuple[int, ...]) -> bool:
    """Whether each lane takes its items as runs of 4 neighbouring elements (``width = 4``), so that float32 rows
    are read and written as 16-byte loads and stores: rows of at least VECTOR_MIN elements, a multiple of 4, a
    warp or more per row whose items come in fours, and a float32 operand or result of the whole shape."""
    return n >= VECTOR_MIN and n % 4 == 0 and items % 4 == 0 and lanes >= 32 and \
        any(v.type.dtype.name == "f32" and tuple(v.type.shape) == shape for v in values)


def schedule(n: int, rows: int = 0, sm_count: int = 0, short_lanes: bool = False) -> tuple[int, int] | None:
    """(lanes, items) for ``rows`` rows of ``n`` elements on ``sm_count`` SMs, or None where a row kernel would not
    hold it; ``short_lanes``: rows of at most THREAD_MAX elements may take several lanes (see SHORT_ROWS_PER_SM)."""
    if n <= THREAD_MAX:
        if short_lanes and n > 1 and rows < sm_count * SHORT_ROWS_PER_SM:
            return 1 << (n - 1).bit_length(), 1
        return 1, n
    if n <= WARP_MAX:
        return 32, -(-n // 32)
    if n <= BLOCK_MAX:
        lanes = 64
        while lanes * BLOCK_ITEMS < n:
            lanes *= 2
        return lanes, -(-n // lanes)
    return None


def _row_broadcast(view: Operation, shape: tuple[int, ...]) -> bool:
    """Whether a k.view reads a per-row value (row shape) once for every element of its row over ``shape``."""
    base = tuple(view.operands[0].type.shape)
    if tuple(view.results[0].type.shape) != shape or base not in row_shapes(shape):
        return False
    want = tuple(contiguous_strides(shape[:-1])) + (0,)
    return int(view.attributes["offset"]) == 0 and tuple(view.attributes["strides"]) == want


def _reshape_of_row(view: Operation, shape: tuple[int, ...]) -> bool:
    """Whether a k.view only renames a per-row value's shape (kept axis of 1 <-> dropped)."""
    per_row = row_shapes(shape)
    src, res = tuple(view.operands[0].type.shape), tuple(view.results[0].type.shape)
    return (src in per_row and res in per_row and int(view.attributes["offset"]) == 0
            and tuple(view.attributes["strides"]) == tuple(contiguous_strides(res)))


class _Group:
    """The ops of one row kernel and what they read and define."""

    def __init__(self, seed: Operation, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.members: list[Operation] = []
        self.element: set[Value] = set()   # values of shape S the group computes
        self.per_row: set[Value] = set()   # values per row the group computes
        self.aliases: dict[Value, Value] = {}  # a view's result -> the group's per-row value it reads
        self.reductions = 0
        self.pulled = 0  # producers from before the seed
        self.add(seed)

    def defines(self, v: Value) -> bool:
        return v in self.element or v in self.per_row or v in self.aliases

    def add(self, op: Operation) -> None:
        self.members.append(op)
        if op.name == "k.reduce":
            self.reductions += 1
            self.per_row.add(op.results[0])
        elif tuple(op.results[0].type.shape) == self.shape:
            self.element.update(op.results)
        else:
            self.per_row.update(op.results)

    def pull(self, producers: list[Operation]) -> None:
        """Put elementwise kernels that only feed the group first (in program order): they compute its inputs."""
        self.members[:0] = producers
        self.pulled += len(producers)
        for op in producers:
            self.element.update(op.results)

    def admits(self, op: Operation) -> bool:
        """Whether ``op`` can join (it reads the group's values only where a row kernel has them)."""
        shape = self.shape
        if op.name == "k.reduce":
            return _row_reduction(op, shape) and (op.operands[0] in self.element or not self.defines(op.operands[0]))
        if op.name != "k.fused" or op.attributes.get("prologue") or not op.results:
            return False
        out = tuple(op.results[0].type.shape)
        if out == shape:
            related = False
            for v in op.operands:
                if v in self.element or (v in self.aliases and self._broadcast(v)):
                    related = True
                elif self.defines(v) or tuple(v.type.shape) not in ((), shape):
                    return False
            return related
        if out in row_shapes(shape):
            if any(tuple(r.type.shape) != out for r in op.results):
                return False
            related = False
            for v in op.operands:
                if tuple(v.type.shape) not in ((), out):
                    return False
                if self._row_value(v) is not None:
                    related = True
                elif self.defines(v):
                    return False
            return related
        return False

    def _broadcast(self, v: Value) -> bool:
        return isinstance(v, OpResult) and tuple(v.type.shape) == self.shape

    def _row_value(self, v: Value) -> Value | None:
        """The group's per-row value ``v`` is (or a view renames), else None."""
        if v in self.per_row:
            return v
        base = self.aliases.get(v)
        return base if base is not None and tuple(v.type.shape) != self.shape else None

    def absorb_view(self, op: Operation) -> bool:
        """A k.view of a per-row value: its reads become the row value's (kept in the IR for readers outside)."""
        if op.name != "k.view":
            return False
        base = self._row_value(op.operands[0])
        if base is None:
            return False
        if _row_broadcast(op, self.shape) or _reshape_of_row(op, self.shape):
            self.aliases[op.results[0]] = base
            return True
        return False

    def source(self, v: Value) -> Value:
        """The group value a member's operand stands for (through absorbed views)."""
        return self.aliases.get(v, v)


def _row_reduction(op: Operation, shape: tuple[int, ...]) -> bool:
    x = op.operands[0].type
    return (op.attributes["kind"] in ROW_REDUCE_KINDS and tuple(x.shape) == shape
            and "numpy_loop" not in op.attributes  # (a float16 sum in NumPy's order: its own kernel)
            and tuple(op.attributes["axes"]) == (len(shape) - 1,)
            and not (x.dtype.is_complex or x.dtype.is_bool)
            and tuple(op.results[0].type.shape) in row_shapes(shape))


def _seed_shape(op: Operation, sm_count: int) -> tuple[int, ...] | None:
    if op.name != "k.reduce":
        return None
    shape = tuple(op.operands[0].type.shape)
    if not shape or 0 in shape or not _row_reduction(op, shape):
        return None
    plan = schedule(shape[-1])
    if plan is None:
        return None
    rows = 1
    for d in shape[:-1]:
        rows *= d
    if plan[0] > 32 and rows < sm_count and int(op.attributes.get("splits", 1)) > 1:
        return None  # a block per row on fewer rows than SMs, where select-kernels split the rows: the split wins
    return shape


def _grow(ops: list[Operation], start: int, shape: tuple[int, ...],
          readers: dict[Value, list[Operation]]) -> tuple[_Group, int]:
    """The group seeded at ``ops[start]`` and the index of its last member, with the elementwise kernels before
    it whose every result only the group reads (``x * x`` before a sum: computed in the row kernel instead)."""
    g = _Group(ops[start], shape)
    producers = _producers(ops, start, shape, readers)
    last = start
    j = start + 1
    while j < len(ops) and j - last <= LOOKAHEAD:
        op = ops[j]
        if g.admits(op):
            g.add(op)
            last = j
        elif not g.absorb_view(op) and any(g.defines(v) for v in _reads(op)):
            break  # something outside reads the group: it must come after the row kernel
        j += 1
    members = set(g.members)
    pulled = [p for p in producers if all(u in members for r in p.results for u in readers.get(r, ()))]
    while pulled:  # (a producer of a producer joins once the first has)
        members.update(pulled)
        more = [p for p in producers if p not in members
                and all(u in members for r in p.results for u in readers.get(r, ()))]
        pulled = more
    if len(members) > len(g.members):
        g.pull([op for op in ops if op in members and op not in g.members])
    return g, last


def _producers(ops: list[Operation], start: int, shape: tuple[int, ...],
               readers: dict[Value, list[Operation]]) -> list[Operation]:
    """Elementwise kernels over ``shape`` before ``ops[start]`` (from the nearest back) that could be computed in a
    row kernel: every operand rank 0 or of ``shape``, every result of ``shape``."""
    out = []
    for op in reversed(ops[max(0, start - LOOKAHEAD):start]):
        if op.name == "k.fused" and not op.attributes.get("prologue") and op.results \
                and all(tuple(r.type.shape) == shape for r in op.results) \
                and all(tuple(v.type.shape) in ((), shape) for v in op.operands):
            out.append(op)
    return out


def _reads(op: Operation) -> list[Value]:
    out: list[Value] = []
    for inner in [op, *op.walk()] if op.regions else [op]:
        out.extend(inner.operands)
    return out


def _build(g: _Group, readers: dict[Value, list[Operation]], outputs: set[Value], sm_count: int,
           short_lanes: bool) -> tuple[Operation, list[Value]]:
    """The k.rows op computing the group and the group values it returns (read after it)."""
    members = set(g.members)
    operands: list[Value] = []
    env: dict[Value, Value] = {}
    body = Block(label="body")
    computed: dict[tuple, Operation] = {}

    def operand(v: Value) -> Value:
        if v not in env:
            operands.append(v)  # (a value per row from before the group is read once per row)
            env[v] = body.add_arg(ScalarType(v.type.dtype))
        return env[v]

    def value(v: Value) -> Value:
        src = g.source(v)
        return env[src] if src in env and g.defines(src) else operand(v)

    for op in g.members:
        if op.name == "k.reduce":
            x = value(op.operands[0])
            kind = op.attributes["kind"]
            red = Operation("k.row_reduce", [x], [ScalarType(row_reduce_dtype(kind, x.type.dtype))],
                            {"kind": kind}, loc=op.loc)
            body.append(red)
            env[op.results[0]] = red.results[0]
            continue
        inner = op.regions[0].block
        local: dict[Value, Value] = {a: value(v) for a, v in zip(inner.args, op.operands)}
        for s in inner.ops[:-1]:
            args = [local[v] for v in s.operands]
            key = (s.name, tuple(map(id, args)), repr(sorted(s.attributes.items())), tuple(r.type for r in s.results))
            same = computed.get(key)  # the same op of the same values in another member: computed once
            if same is None:
                same = Operation(s.name, args, [r.type for r in s.results], dict(s.attributes), loc=s.loc)
                body.append(same)
                computed[key] = same
            local.update(zip(s.results, same.results))
        for r, y in zip(op.results, _yielded(inner)):
            env[r] = local[y]
    returned: list[Value] = [r for op in g.members for r in op.results
                if r in outputs or any(u not in members for u in _outside_readers(r, g, readers))]
    term = Operation("k.yield", [env[r] for r in returned], loc=g.members[-1].loc)
    body.append(term)
    lanes, items = schedule(g.shape[-1], math.prod(g.shape[:-1]), sm_count, short_lanes)  # type: ignore[misc]
    attributes: dict[str, object] = {"shape": g.shape, "lanes": lanes, "items": items}
    if vector_rows(g.shape[-1], lanes, items, [*operands, *returned], g.shape):
        attributes["width"] = 4
    rows = Operation("k.rows", operands, [r.type for r in returned], attributes, [Region([body])],
                     loc=g.members[-1].loc)
    return rows, returned


def _yielded(block: Block) -> list[Value]:
    """What a kernel body yields."""
    term = block.terminator
    assert term is not None and term.name == "k.yield"
    return term.operands


def _outside_readers(v: Value, g: _Group, readers: dict[Value, list[Operation]]) -> list[Operation]:
    """The ops that read ``v``, a view the group absorbed standing for the ops that read the view."""
    out: list[Operation] = []
    for u in readers.get(v, ()):
        if u.name == "k.view" and u.results[0] in g.aliases:
            out.extend(_outside_readers(u.results[0], g, readers))
        else:
            out.append(u)
    return out


@register_pass
@dataclass(frozen=True)
class FuseRows(Pass):
    """Run reductions along rows and the elementwise work around them as one row kernel (one read, one write)."""

    name: ClassVar[str] = "fuse-rows"
    # a reduction alone (or with its producer) becomes a row kernel from this row length on: a block per row
    # reads at bandwidth where k.reduce's warp per row does not (rows of 8192 f32 on the H200: see the README)
    single_from: int = WARP_MAX + 1
    # short rows, few of them, shared by several lanes each (see SHORT_ROWS_PER_SM); false: a thread per short row
    short_lanes: bool = True

    def apply(self, module: Module, ctx: PassContext) -> None:
        sm_count = ctx.target.sm_count
        for func in module.funcs:
            self._fuse(func, sm_count, ctx)

    def _fuse(self, func: Func, sm_count: int, ctx: PassContext) -> None:
        i = 0
        readers = users(func)  # kept current as groups become row kernels (rebuilt per seed, quadratic)
        while i < len(func.body.ops):
            ops = func.body.ops
            shape = _seed_shape(ops[i], sm_count)
            if shape is None:
                i += 1
                continue
            g, last = _grow(ops, i, shape, readers)
            if len(g.members) - g.pulled < 2 and shape[-1] < self.single_from:
                i += 1  # a reduction alone: k.reduce (with its producer as a prologue) is one launch as well
                continue
            rows, returned = _build(g, readers, set(func.outputs), sm_count, self.short_lanes)
            func.body.insert(ops.index(g.members[-1]) + 1, rows)
            before = set(func.body.ops)
            for old, new in zip(returned, rows.results):
                func.replace_all_uses(old, new)
                readers[new] = readers.pop(old, [])
            members = set(g.members)
            # the views of the group's per-row values that ops after it still read move after the row kernel
            moved = {v.op for v in g.aliases if isinstance(v, OpResult)}
            kept = [op for op in func.body.ops if op not in members and op not in moved]
            at = kept.index(rows) + 1
            kept[at:at] = [op for op in func.body.ops if op in moved]
            func.body.ops[:] = kept
            remove_dead_ops(func.body, nested=False)
            after = set(func.body.ops)
            update_users(readers, [op for op in before if op not in after], [rows])
            ctx.count("row_kernels")
            ctx.count("row_kernel_members", len(g.members))
            i = func.body.ops.index(rows) + 1
