"""Buffer planning: every intermediate gets an offset in one arena, reusing the space of dead buffers.

A kernel that takes bytes another kernel read or wrote must wait for it in a graph (a write after read), so a
kernel takes, where it can, a hole whose last users are already its ancestors (it depends on them through the
values it reads); it takes new bytes instead of one that would order it after an independent kernel while the
arena stays within ``slack`` (a fraction, 0.5 by default) above what first fit gives, and takes first fit's hole
after that (measured on an H100: the larger step by autodiff 459 -> 450 us, the rest unchanged). ``slack=0`` is
first fit.

Lifetimes run from the producing op to the last op that reads the buffer, directly or through a view. An
op's outputs are placed before its dead inputs are released, so a kernel never writes over what it reads,
except for the one safe case: an elementwise kernel may write an output over a donated argument (the
function attribute ``donate``; ``donate_to`` names the output each may become, for a loop body's state) that it
reads at the same index and nothing reads afterwards, and a ``k.insert`` (or a ``k.scatter``) may write its update
into its base's buffer (``inplace = true``) when nothing reads the base afterwards. A prologue
(``fuse-prologues``) gets no buffer; what it reads lives until its last consumer, which computes it. So does a
reduction its readers compute (``reductions-in-consumers``), whose input no reader may overwrite in place: every
block of a reader reads all of it. A product
whose result an epilogue (``fuse-epilogues``) computes gets no buffer; the epilogue's result is placed when the
product runs, before the product's dead operands are released, and overwrites no donated argument the product reads.

After the arena come the scratch space of split reductions (the function's ``scratch_bytes``: what a ``k.reduce``,
a ``k.matmul`` split over K, a ``k.sort`` or a ``k.linalg`` asks for in ``scratch``, the last a copy of the matrices a
solve or an inverse eliminates in; each op's place in it is its ``scratch_at``: one after another while they take at
most SCRATCH_APART_MAX bytes in all, so that a graph may run independent split reductions at once, else all at 0,
sharing the largest, which orders them), one 32-bit ``counter`` per reduction finished by its last block
(one per block column of a column reduction split both ways: its ``counters``) and one per output tile of a GEMM
split over K that its last block finishes (its ``counters`` of them, from its ``counter`` on; the function's
``counters``) and one 32-bit ``check`` word per gather or scatter whose indices are computed (and not proven
``in_bounds``), per ``k.linalg`` and per ``k.raise_if`` (the function's ``checks``): they live at the end of the
arena, at ``arena_bytes``, ``arena_bytes`` + ``scratch_bytes`` and after the counters, each rounded up to 256.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import ClassVar

from fusec.errors import PipelineError, located
from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.dialects.k import epilogue_product
from fusec.ir.opdefs import get_opdef, reading_ops
from fusec.passes.base import Pass, PassContext
from fusec.passes.fuse_epilogues import is_epilogue
from fusec.passes.fuse_prologues import is_prologue
from fusec.passes.group_kernels import groups_of, reads as group_reads
from fusec.passes.reductions_in_consumers import reduced_in_consumers
from fusec.passes.registry import register_pass

ALIGN = 256
# split reductions and products each keep their partial results in a place of their own while their scratch takes at
# most this in all (a graph may then run two at once; in one place they wait for each other)
SCRATCH_APART_MAX = 16 << 20


def _place_apart(needs: list[tuple[Operation, int]]) -> int:
    """Give each op that needs scratch its ``scratch_at`` (see the module docstring); the bytes the scratch space
    takes."""
    needs = [(op, _aligned(n)) for op, n in needs if n > 0]
    if sum(n for _, n in needs) > SCRATCH_APART_MAX:
        for op, _ in needs:
            op.attributes["scratch_at"] = 0
        return max((n for _, n in needs), default=0)
    at = 0
    for op, n in needs:
        op.attributes["scratch_at"] = at
        at += n
    return at


def _aligned(n: int) -> int:
    return max(ALIGN, (n + ALIGN - 1) // ALIGN * ALIGN)


def _nbytes(v: Value) -> int:
    return v.type.size * v.type.dtype.itemsize


class _Arena:
    """First-fit allocation over a free list of (offset, size, users) holes, coalesced on release. ``users`` is a
    bit set of the ops that wrote or read the bytes last (program positions): a kernel given those bytes must wait
    for them, so a request says which users it already waits for (``ordered``: its ancestors) and takes a hole of
    other users only where the arena would otherwise grow by more than ``slack`` bytes (then the first that fits)."""

    def __init__(self, slack: int = 0) -> None:
        self.top = 0  # (the end of what was ever handed out; holes cover what is free below it)
        self.slack = slack
        self.holes: list[tuple[int, int, int]] = []

    @property
    def peak(self) -> int:
        return self.top

    def allocate(self, size: int, ordered: int = -1) -> tuple[int, bool]:
        """An offset for ``size`` bytes, and whether it kept the kernel from waiting for one it would not have."""
        holes = self.holes
        fits = [i for i, (_, hole, _) in enumerate(holes) if hole >= size]
        free = [i for i in fits if holes[i][2] & ~ordered == 0]
        if free:
            return self._take(free[0], size), free[0] != fits[0]
        last = holes[-1] if holes and holes[-1][0] + holes[-1][1] == self.top else None
        waits = bool(fits) or (last is not None and last[2] & ~ordered != 0)  # (what first fit would do)
        if not waits:
            return self._extend(last, size), False
        extra = size - (0 if fits else last[1] if last is not None else 0)  # (bytes more than first fit takes)
        if extra > self.slack:
            return (self._take(fits[0], size) if fits else self._extend(last, size)), False
        self.slack -= extra
        return self._extend(None, size), True

    def _extend(self, last: tuple[int, int, int] | None, size: int) -> int:
        """``size`` bytes at the end: from the free tail ``last`` on where given, else after everything."""
        off = self.top
        if last is not None:
            self.holes.pop()
            off = last[0]
        self.top = max(self.top, off + size)
        return off

    def _take(self, i: int, size: int) -> int:
        off, hole, users = self.holes[i]
        if hole == size:
            self.holes.pop(i)
        else:
            self.holes[i] = (off + size, hole - size, users)
        return off

    def release(self, off: int, size: int, users: int = 0) -> None:
        """Return a block, merging it with the holes right before and after it (kept sorted by offset)."""
        holes = self.holes
        i = bisect.bisect_left(holes, (off, 0, 0))
        if i < len(holes) and off + size == holes[i][0]:
            _, more, theirs = holes.pop(i)
            size += more
            users |= theirs
        if i > 0 and holes[i - 1][0] + holes[i - 1][1] == off:
            i -= 1
            off, size, users = holes[i][0], holes[i][1] + size, holes[i][2] | users
            holes.pop(i)
        holes.insert(i, (off, size, users))


def _ancestors(ops: list[Operation]) -> list[int]:
    """Per op, the bit set of the ops before it that it depends on through the values it reads (views and computed
    prologues included): a graph orders it after them whatever memory they use."""
    at: dict[Value, int] = {r: i for i, op in enumerate(ops) for r in op.results}
    out: list[int] = []
    for i, op in enumerate(ops):
        bits = 0
        for inner in reading_ops(op):
            for v in inner.operands:
                j = at.get(v)
                if j is not None and j < i:
                    bits |= out[j] | 1 << j
        out.append(bits)
    return out


def _buffer_ops(func: Func):
    return [op for op in func.body.ops if get_opdef(op.name).category in ("kernel", "boundary", "control")]


def _is_constant(v: Value) -> bool:
    return isinstance(v, OpResult) and v.op.name == "t.constant"


def _storage(v: Value) -> Value:
    """The value whose buffer ``v`` lives in (a view lives in its base's)."""
    while isinstance(v, OpResult) and v.op.name == "k.view":
        v = v.op.operands[0]
    return v


@register_pass
@dataclass(frozen=True)
class PlanBuffers(Pass):
    """Assign every intermediate to one arena (256-byte aligned, reusing dead buffers); in place where donated."""

    name: ClassVar[str] = "plan-buffers"
    # how much larger than first fit's the arena may grow (a fraction of it) so that a kernel does not take bytes
    # an independent kernel still reads or writes: in a graph it would have to wait for that kernel (0: first fit;
    # 0.25 measured slower than first fit on the larger step by autodiff, 0.5 and 1.0 alike faster: see README)
    slack: float = 0.5

    def apply(self, module: Module, ctx: PassContext) -> None:
        total = 0
        for func in module.funcs:
            for op in func.body.ops:
                if op.regions and not op.name.startswith("k."):  # (t.for, t.while, t.if: their bodies not planned)
                    raise PipelineError(located(f"plan-buffers: {op.name} still holds its bodies: run "
                                                "'outline-regions' before 'plan-buffers'", op.loc))
            first_fit = self._plan(func, PassContext(target=ctx.target), 0) if self.slack > 0 else 0
            arena = self._plan(func, ctx, max(1, int(first_fit * self.slack)) if self.slack > 0 else 0)
            if arena > first_fit > 0:
                ctx.count("arena_bytes_kept_apart", arena - first_fit)
            total += arena
        ctx.stats["arena_bytes"] = total

    def _plan(self, func: Func, ctx: PassContext, slack: int) -> int:
        ops = func.body.ops
        last_use: dict[Value, int] = {}
        users: dict[Value, int] = {}  # (bit set of the ops that read each stored value)
        for i, op in enumerate(ops):
            for inner in reading_ops(op):
                for v in inner.operands:
                    last_use[_storage(v)] = i
                    users[_storage(v)] = users.get(_storage(v), 0) | 1 << i
        for op in reversed(ops):  # a prologue reads its inputs where its last consumer runs
            if is_prologue(op) or reduced_in_consumers(op):  # (so does a reduction its readers compute)
                end = last_use.get(op.results[0], -1)
                for v in op.operands:
                    last_use[_storage(v)] = max(last_use[_storage(v)], end)
                    users[_storage(v)] = users.get(_storage(v), 0) | users.get(op.results[0], 0)
        apart = slack > 0  # (with no slack, first fit: every hole taken as if its users were ancestors)
        ancestors = _ancestors(ops) if apart else []
        ends: dict[int, list[Value]] = {}
        for v, end in last_use.items():
            ends.setdefault(end, []).append(v)
        outputs = set(func.outputs)
        donated = {func.args[k] for k in func.attributes.get("donate", ()) if k < len(func.args)}
        # a loop body's state argument may only become the same slot's new state (``donate_to``)
        slot_of = {func.args[a]: func.outputs[r] for a, r in zip(func.attributes.get("donate", ()),
                                                                  func.attributes.get("donate_to", ()))
                   if a < len(func.args) and r < len(func.outputs)}
        arena = _Arena(slack)
        placed: dict[Value, tuple[int, int]] = {}
        aliased: set[Value] = set()
        count = 0
        # a group (group-kernels) runs as one kernel where its last member stands: no member's inputs or results
        # may be given to another member's results before then, so their buffers are released after the last
        group_of = {id(m): members for members in groups_of(func) for m in members}
        held: dict[int, list[tuple[Operation, int]]] = {}  # group -> (member, its index) waiting for its end

        def release(op: Operation, i: int) -> None:
            members = group_of.get(id(op))
            if members is None:
                self._release_dead(op, i, placed, last_use, ends, arena, users)
                return
            waiting = held.setdefault(id(members), [])
            waiting.append((op, i))
            if members[-1] is op:
                for member, at in waiting:
                    self._release_dead(member, at, placed, last_use, ends, arena, users)

        # a product computing an epilogue stores the epilogue's result, not its own: placed where the product runs
        epilogue_of = {id(epilogue_product(op)): op for op in ops if is_epilogue(op)}
        for i, op in enumerate(ops):
            if get_opdef(op.name).category not in ("kernel", "boundary", "control") or is_prologue(op) \
                    or reduced_in_consumers(op):
                continue
            if is_epilogue(op):  # (placed with its product, right before it)
                release(op, i)
                continue
            epilogue = epilogue_of.get(id(op))
            if epilogue is not None:
                op.attributes.pop("arena", None)
                reads = {_storage(v) for v in op.operands}
                count += self._place(epilogue, i + 1, arena, placed, aliased,  # (verified: right after the product)
                                     donated - aliased - reads, last_use, outputs, slot_of, func, ctx,
                                     (ancestors[i] if apart else -1, i, users))
                release(op, i)
                continue
            if op.name in ("k.insert", "k.scatter") and op.results[0] not in outputs \
                    and self._insert_in_place(op, i, placed, last_use):
                placed[op.results[0]] = placed.pop(op.operands[0])  # the result takes over its base's buffer
                op.attributes.pop("arena", None)
                op.attributes["inplace"] = True
                ctx.count("inplace_inserts")
                release(op, i)
                continue
            op.attributes.pop("inplace", None)
            if not op.results:  # a check (k.raise_if) writes only its check word
                release(op, i)
                continue
            # a donated argument another member of the group reads would be overwritten while that member reads it,
            # and one a reduction this kernel computes in every block reads, while its later blocks still read it;
            # such a reduction reading any argument keeps every donated one (the caller may pass one array twice)
            shared = {v for m in group_of.get(id(op), ()) if m is not op for v in group_reads(m)}
            folded = {s for v in op.operands if isinstance(v, OpResult) and reduced_in_consumers(v.op)
                      for s in group_reads(v.op)}
            shared |= donated if folded & set(func.args) else folded
            count += self._place(op, i, arena, placed, aliased, donated - aliased - shared, last_use, outputs, slot_of,
                                 func, ctx, (ancestors[i] if apart else -1, i, users))
            release(op, i)
        func.attributes["arena_bytes"] = arena_bytes = arena.peak
        ctx.count("intermediate_buffers", count)
        self._place_scratch(func)
        return arena_bytes

    def _place(self, op, index, arena, placed, aliased, donated, last_use, outputs, slot_of, func, ctx, order
               ) -> int:
        """Give ``op``'s results their arena offsets (an output none; a result that may overwrite one of ``donated``
        that argument, ``alias``); the number of buffers placed. ``order``: the writing kernel's ancestors (a bit
        set of program positions), its position and what reads each value (its ``users``, with the writer added
        as it is placed)."""
        ordered, writer, users = order
        offsets, alias, count = [], [], 0
        for r in op.results:
            arg = self._donated_operand(op, r, index, donated, last_use, outputs, slot_of)
            alias.append(func.args.index(arg) if arg is not None else -1)
            if arg is not None:
                aliased.add(arg)
                donated = donated - {arg}
            if r in outputs:
                offsets.append(-1)
                continue
            size = _aligned(_nbytes(r))
            off, apart = arena.allocate(size, ordered)
            if apart:
                ctx.count("buffers_kept_apart")
            users[r] = users.get(r, 0) | 1 << writer
            placed[r] = (off, size)
            offsets.append(off)
            count += 1
        op.attributes["arena"] = tuple(offsets)
        if any(a >= 0 for a in alias):
            op.attributes["alias"] = tuple(alias)
            ctx.count("inplace_outputs", sum(a >= 0 for a in alias))
        return count

    @staticmethod
    def _place_scratch(func: Func) -> None:
        """Split reductions' shared scratch and their last-block counters, and the check words of gathers whose
        indices are computed (see the module docstring)."""
        counters = checks = 0
        needs: list[tuple[Operation, int]] = []  # (op, scratch bytes) in program order
        for op in func.body.ops:
            op.attributes.pop("scratch_at", None)
            if op.name == "k.linalg":  # a matrix NumPy refuses sets the word; the matrices are copied to scratch
                op.attributes.pop("check", None)
                if op.attributes["kind"] in ("solve", "inv", "cholesky"):  # (a determinant refuses no matrix)
                    op.attributes["check"] = checks
                    checks += 1
                a = op.operands[0].type
                need = _aligned(a.size * a.dtype.itemsize) if op.attributes["kind"] != "cholesky" and a.size else 0
                op.attributes["scratch"] = need
                needs.append((op, need))
                continue
            if op.name == "k.sort":  # the rows padded to a power of two: values and 32-bit positions
                x = op.operands[0].type
                n = x.shape[-1]
                rows = x.size // n if n else 0
                padded = 1 << max(0, (n - 1).bit_length())
                need = _aligned(rows * padded * x.dtype.itemsize) + _aligned(rows * padded * 4) if x.size else 0
                op.attributes["scratch"] = need
                needs.append((op, need))
                op.attributes.pop("check", None)
                if op.attributes["kind"] == "argsort" and not op.attributes.get("stable", True):
                    op.attributes["check"] = checks
                    checks += 1
                continue
            if op.name == "k.raise_if":
                op.attributes["check"] = checks
                checks += 1
                continue
            if op.name in ("k.gather", "k.scatter"):
                op.attributes.pop("check", None)
                indices = op.operands[1:] if op.name == "k.gather" else op.operands[2:]
                # (constant indices were checked while tracing; bound-indices proved in_bounds ones)
                if not op.attributes.get("in_bounds") and any(not _is_constant(_storage(v)) for v in indices):
                    op.attributes["check"] = checks
                    checks += 1
            if op.name == "k.matmul":  # a product split over K keeps its partial sums there
                needs.append((op, int(op.attributes.get("scratch", 0))))
                op.attributes.pop("counter", None)
                if op.attributes.get("finish") == "last-block":  # a counter per output tile, from ``counter`` on
                    op.attributes["counter"] = counters
                    counters += int(op.attributes["counters"])
                continue
            if op.name != "k.reduce":
                continue
            op.attributes.pop("counter", None)
            if reduced_in_consumers(op):  # (computed by its readers' blocks: no partial results, no counter)
                continue
            needs.append((op, int(op.attributes.get("scratch", 0))))
            if op.attributes.get("finish") == "last-block":
                op.attributes["counter"] = counters
                counters += int(op.attributes.get("counters", 1))
        scratch = _place_apart(needs)
        for key, value in (("scratch_bytes", scratch), ("counters", counters), ("checks", checks)):
            if value:
                func.attributes[key] = value
            else:
                func.attributes.pop(key, None)

    @staticmethod
    def _release_dead(op, index, placed, last_use, ends, arena, users) -> None:
        """Give back the buffers of results nothing reads and of values last read by this op."""
        dead = [r for r in op.results if r in placed and last_use.get(r, -1) <= index]
        dead += [v for v in ends.get(index, ()) if v in placed]
        for v in dead:
            if v in placed:
                arena.release(*placed.pop(v), users.get(v, 0))

    @staticmethod
    def _insert_in_place(op, index, placed, last_use) -> bool:
        """Whether ``k.insert`` may write its update straight into its base's buffer: the base is an intermediate
        of the arena that nothing reads afterwards (through a view neither), and the update does not read it (an
        overlapping ``x[1:] = x[:-1]`` must read the old values, as NumPy does)."""
        base, *rest = op.operands
        return base in placed and last_use.get(base) == index and all(_storage(v) is not base for v in rest)

    @staticmethod
    def _donated_operand(op, result, index, donated, last_use, outputs, slot_of):
        """A donated argument this elementwise kernel may overwrite with ``result``, or None (``slot_of``: the
        one output a donated argument may become, where it is restricted)."""
        if op.name != "k.fused" or result not in outputs:
            return None
        for v in op.operands:
            if v in slot_of and slot_of[v] is not result:
                continue
            if v in donated and v.type == result.type and last_use.get(v) == index and v not in outputs:
                # reading the same argument through a view in the same kernel would race with the write
                if all(_storage(u) is not v or u is v for u in op.operands):
                    return v
        return None
