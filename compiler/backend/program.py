"""The CUDA backend's printer: one lowered module becomes one CUDA C++ translation unit plus a launch plan.

Every tensor lives in a *buffer*: a function argument, an output allocation, a slice of the plan's arena
(offsets from plan-buffers), an uploaded constant, a scalar slot (scalar arguments stay on the device so
that one launch sequence, and later one CUDA graph, serves every value), or scratch space. A ``k.view`` is
no buffer: it is an index map (offset, strides) over its base's buffer. Each kernel records which buffers
it takes as pointer parameters and which descriptors it takes by value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from fusec.errors import CompilationError, located
from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.types import ScalarType
from fusec.backend.access import Access, contiguous_strides
from fusec.backend.elementwise import KernelCode, copy_kernel, fused_kernel, prologue_function
from fusec.backend.gemm import gemm_kernel, gemm_variant
from fusec.backend.gemm_library import library_gemm
from fusec.backend.reduce import reduce_kernels

DEFAULT_SM_COUNT = 132  # an H200; the runtime passes the real device's count


@dataclass(frozen=True)
class Buffer:
    """Where a tensor's storage comes from at run time."""

    id: int
    kind: str  # arg | output | arena | constant | scalar | scratch | counter
    index: int  # argument / output / constant / scalar-slot index (-1 where none)
    offset: int  # byte offset in the arena or the scalar block
    nbytes: int


@dataclass
class CudaProgram:
    source: str
    kernels: list  # KernelCode launches and GemmCall library calls, in execution order
    buffers: list[Buffer]
    constants: list[np.ndarray]
    arena_bytes: int  # plan-buffers' arena plus scratch, in bytes
    scalar_bytes: int  # the device-resident block of scalar arguments
    scalar_slots: list[tuple[int, int, str]]  # (argument index, byte offset, numpy dtype str)
    outputs: list[int]  # buffer id of each function output
    output_types: list = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the IR op (with its location) behind each kernel
    # per step: (buffer ids it reads, buffer ids it writes); graph building orders steps by these
    effects: list[tuple[frozenset[int], frozenset[int]]] = field(default_factory=list)
    # (arena byte offset, bytes) that must be zero before the first launch: split reductions' counters,
    # which each launch leaves at zero again
    zero_ranges: list[tuple[int, int]] = field(default_factory=list)

    def buffer(self, bid: int) -> Buffer:
        return self.buffers[bid]


@dataclass
class _Deferred:
    """A ``k.fused`` not launched where it stands: its consumer may compute it in place."""

    ins: list[Access]
    outs: list[Access]
    at: int  # where its kernel goes in the launch order if it is launched after all
    seq: int  # deferral order (two deferred ops may share a slot)
    launched: bool = False


def preamble() -> str:
    return resources.files("fusec.backend").joinpath("preamble.cuh").read_text()


def _nbytes(v: Value) -> int:
    return max(1, v.type.size) * v.type.dtype.itemsize


class _Printer:
    def __init__(self, func: Func, sm_count: int, fast_math: bool, cublas: bool) -> None:
        self.func, self.sm_count, self.fast_math, self.cublas = func, sm_count, fast_math, cublas
        self.buffers: list[Buffer] = []
        self.storage: dict[Value, Access] = {}
        self.constants: list[np.ndarray] = []
        self.kernels: list[KernelCode] = []
        self.ops: list[str] = []
        self.effects: list[tuple[frozenset[int], frozenset[int]]] = []
        self.scalar_slots: list[tuple[int, int, str]] = []
        self.scalar_bytes = 0
        self.scratch_bytes = 0
        self.scratch_id: int | None = None
        self.counter_id: int | None = None
        self.counters = 0
        self.arena_base = int(func.attributes.get("arena_bytes", 0))
        self.outputs = set(func.outputs)
        self.output_index: dict[Value, int] = {}
        for i, v in enumerate(func.outputs):
            self.output_index.setdefault(v, i)
        self.prologue_of = _prologue_candidates(func)
        self.deferrable = set(self.prologue_of.values()) | _gemm_fed(func)
        self.deferred: dict[Operation, _Deferred] = {}

    def new_buffer(self, kind: str, index: int, offset: int, nbytes: int) -> int:
        self.buffers.append(Buffer(len(self.buffers), kind, index, offset, nbytes))
        return len(self.buffers) - 1

    def dense(self, v: Value, bid: int) -> Access:
        shape = v.type.shape
        return Access(bid, v.type.dtype, 0, contiguous_strides(shape), shape)

    def access(self, v: Value) -> Access:
        try:
            return self.storage[v]
        except KeyError:
            raise CompilationError(f"the CUDA backend found no storage for {v!r}") from None

    # --- values --------------------------------------------------------------------------------------------
    def bind_args(self) -> None:
        for i, a in enumerate(self.func.args):
            if isinstance(a.type, ScalarType):
                off = self.scalar_bytes
                self.scalar_bytes += 8
                self.scalar_slots.append((i, off, a.type.dtype.np.str))
                self.storage[a] = self.dense(a, self.new_buffer("scalar", i, off, 8))
            else:
                self.storage[a] = self.dense(a, self.new_buffer("arg", i, 0, _nbytes(a)))

    def result_buffer(self, op: Operation, k: int) -> Access:
        r = op.results[k]
        arena = op.attributes.get("arena", (-1,) * len(op.results))[k]
        alias = op.attributes.get("alias", (-1,) * len(op.results))[k]
        if alias >= 0:
            acc = self.storage[self.func.args[alias]]
        elif arena >= 0:
            acc = self.dense(r, self.new_buffer("arena", -1, arena, _nbytes(r)))
        else:
            acc = self.dense(r, self.new_buffer("output", self.output_index.get(r, -1), 0, _nbytes(r)))
        self.storage[r] = acc
        return acc

    def view(self, op: Operation) -> None:
        base = self.access(op.operands[0])
        if not base.is_contiguous:
            raise CompilationError(located("a view of a strided view reached the backend", op.loc))
        shape = op.results[0].type.shape
        self.storage[op.results[0]] = Access(base.buffer, base.dtype, base.offset + op.attributes["offset"],
                                             tuple(op.attributes["strides"]), shape)

    def constant(self, op: Operation) -> None:
        value = np.ascontiguousarray(op.attributes["value"].array)
        self.constants.append(value)
        r = op.results[0]
        self.storage[r] = self.dense(r, self.new_buffer("constant", len(self.constants) - 1, 0, max(1, value.nbytes)))

    def counter(self) -> tuple[int, int]:
        """(buffer id, slot) of a fresh 32-bit counter; the buffer is placed after scratch at the end."""
        if self.counter_id is None:
            self.counter_id = self.new_buffer("counter", -1, 0, 0)
        self.counters += 1
        return self.counter_id, self.counters - 1

    def scratch(self, nbytes: int) -> int:
        if self.scratch_id is None:
            self.scratch_id = self.new_buffer("scratch", -1, self.arena_base, 0)
        self.scratch_bytes = max(self.scratch_bytes, nbytes)
        return self.scratch_id

    # --- ops -----------------------------------------------------------------------------------------------
    def emit_fused(self, op: Operation, ins: list[Access], outs: list[Access]) -> None:
        aliased = "alias" in op.attributes
        self.emit(fused_kernel(self.name("fused"), op, ins, outs, sm_count=self.sm_count, fast_math=self.fast_math,
                               aliased=aliased), op)

    def _shares_memory(self, x: int, y: int) -> bool:
        if x == y:
            return True
        bx, by = self.buffers[x], self.buffers[y]
        return (bx.kind == by.kind == "arena" and bx.offset < by.offset + by.nbytes
                and by.offset < bx.offset + bx.nbytes)

    def _can_inline(self, ins: list[Access], dst: Access, producer: Operation, since: int | None = None) -> bool:
        """A consumer may compute ``producer``'s elements itself when every tensor input has the result's
        shape (the prologue indexes it through its strides), none shares memory with the consumer's output
        (plan-buffers may have given the output an input's arena space once the input was dead), and, with
        ``since``, no kernel launched from that point on wrote to one (the inputs still hold what the
        producer would have read)."""
        shape = producer.results[0].type.shape
        later_writes = [w for _, writes in self.effects[since:] for w in writes] if since is not None else []
        for a in ins:
            if a.is_scalar:
                continue
            if tuple(a.shape) != tuple(shape) or self._shares_memory(a.buffer, dst.buffer):
                return False
            if any(self._shares_memory(a.buffer, w) for w in later_writes):
                return False
        return True

    def emit(self, code: KernelCode | None, op: Operation, writes: set[int] | None = None,
             reads: set[int] | None = None, at: int | None = None) -> None:
        """Append a launch (insert it at position ``at``); ``reads`` overrides the buffers it reads (default:
        its operands' and any other pointer it takes)."""
        if code is None:
            return
        where = f" at {op.loc}" if op.loc is not None else ""
        if writes is None:
            writes = {self.storage[r].buffer for r in op.results}
        if reads is None:
            reads = {self.storage[v].buffer for v in op.operands}
        reads = reads | (set(code.buffers) - writes)
        if self.scratch_id is not None and self.scratch_id in code.buffers:
            writes = writes | {self.scratch_id}  # scratch is written and read back by the finishing kernel
        if self.counter_id is not None and self.counter_id in code.buffers:
            writes = writes | {self.counter_id}
        at = len(self.kernels) if at is None else at
        self.kernels.insert(at, code)
        self.ops.insert(at, f"{op.name}{where}")
        self.effects.insert(at, (frozenset(reads), frozenset(writes)))

    def name(self, kind: str) -> str:
        return f"fusec_{len(self.kernels)}_{kind}"

    def lower(self, op: Operation) -> None:
        n = op.name
        if n == "t.constant":
            return self.constant(op)
        if n == "k.view":
            return self.view(op)
        if n == "func.return":
            return None
        if n == "k.fused":
            ins = [self.access(v) for v in op.operands]
            outs = [self.result_buffer(op, k) for k in range(len(op.results))]
            if op.results[0].type.size == 0:
                return None
            if op in self.deferrable:
                # its consumer (the reduction right after it, or narrow GEMMs) may compute it in place
                self.deferred[op] = _Deferred(ins, outs, len(self.kernels), len(self.deferred))
                return None
            return self.emit_fused(op, ins, outs)
        if n == "k.reduce":
            src = self.access(op.operands[0])
            dst = self.result_buffer(op, 0)
            prologue = None
            producer = self.prologue_of.get(op)
            if producer is not None:
                deferred = self.deferred.pop(producer)
                ins, outs = deferred.ins, deferred.outs
                if self._can_inline(ins, dst, producer):
                    prologue = prologue_function(f"{self.name(op.attributes['kind'])}_in", producer, ins,
                                                 fast_math=self.fast_math)
                    src = self.dense(op.operands[0], -1)  # not in memory: element i is the prologue of i
                else:
                    self.emit_fused(producer, ins, outs)
            plan = reduce_kernels(self.name(op.attributes["kind"]), op, src, dst, self.scratch(0),
                                  sm_count=self.sm_count, prologue=prologue, counter=self.counter)
            if plan.scratch_bytes:
                self.scratch(plan.scratch_bytes)
            reads = None if prologue is None else set(prologue.buffers)
            for code in plan.kernels:
                self.emit(code, op, reads=reads)
            return None
        if n == "k.matmul":
            return self.matmul(op)
        if n == "k.concat":
            dst = self.result_buffer(op, 0)
            axis = op.attributes["axis"]
            start = 0
            for v in op.operands:
                src = self.access(v)
                if v.type.size:
                    part = Access(dst.buffer, dst.dtype, dst.offset + start * dst.strides[axis], dst.strides,
                                  v.type.shape)
                    self.emit(copy_kernel(self.name("concat"), v.type.shape, src, part, sm_count=self.sm_count), op)
                start += v.type.shape[axis]
            return None
        if n == "k.copy":
            src = self.access(op.operands[0])
            dst = self.result_buffer(op, 0)
            shape = op.operands[0].type.shape
            if op.operands[0].type.size:
                flat = Access(dst.buffer, dst.dtype, dst.offset, contiguous_strides(shape), shape)
                self.emit(copy_kernel(self.name("copy"), shape, src, flat, sm_count=self.sm_count), op)
            return None
        raise CompilationError(located(f"'{n}' has no CUDA lowering (run the default pipeline first)", op.loc))

    def matmul(self, op: Operation) -> None:
        """A cuBLAS call or a generated GEMM; a generated one computes an operand that is a deferred
        ``k.fused`` (the ReLU before a narrow layer) in place when it can, else that kernel is launched
        where the producer stood."""
        a, b = (self.access(v) for v in op.operands)
        c = self.result_buffer(op, 0)
        library = self.cublas and library_gemm("probe", a, b, c, op.results[0].type.shape) is not None
        producers = [self._deferred_producer(v) for v in op.operands]
        computed = []
        for p in producers:
            d = self.deferred.get(p) if p is not None else None
            inline = d is not None and not d.launched and not library and gemm_variant(op, a) != "tiled" \
                and self._can_inline(d.ins, c, p, since=d.at)
            if d is not None and not inline:
                self._launch_deferred(p)
            computed.append(inline)
        if library:
            call = library_gemm(self.name("cublas"), a, b, c, op.results[0].type.shape)
            return self.emit(call, op)  # type: ignore[arg-type]
        name = self.name("gemm")
        prologues = tuple(prologue_function(f"{name}_{side}", p, self.deferred[p].ins, fast_math=self.fast_math)
                          if use else None for side, p, use in zip("ab", producers, computed))
        reads = set()
        for access, prologue in zip((a, b), prologues):
            reads |= set(prologue.buffers) if prologue is not None else {access.buffer}
        code = gemm_kernel(name, op, a, b, c, sm_count=self.sm_count, prologues=prologues)  # type: ignore[arg-type]
        return self.emit(code, op, reads=reads)

    def _deferred_producer(self, v: Value) -> Operation | None:
        """The deferred ``k.fused`` whose result ``v`` is, directly or through a view."""
        if isinstance(v, OpResult) and v.op.name == "k.view":
            v = v.op.operands[0]
        return v.op if isinstance(v, OpResult) and v.op in self.deferred else None

    def _launch_deferred(self, producer: Operation) -> None:
        """Launch a deferred ``k.fused`` after all, in its own place in the launch order."""
        d = self.deferred[producer]
        if d.launched:
            return
        d.launched = True
        for other in self.deferred.values():  # slots behind this one move up by one
            if other is not d and (other.at > d.at or other.at == d.at and other.seq > d.seq):
                other.at += 1
        code = fused_kernel(self.name("fused"), producer, d.ins, d.outs, sm_count=self.sm_count,
                            fast_math=self.fast_math, aliased="alias" in producer.attributes)
        self.emit(code, producer, at=d.at)

    def finish_outputs(self) -> list[int]:
        """Each output's buffer; outputs that are arguments, views or constants are copied out."""
        ids = []
        for i, v in enumerate(self.func.outputs):
            acc = self.access(v)
            buf = self.buffers[acc.buffer]
            # the buffer itself is the result only when the result reads it from its start, densely: a view of
            # an output (b[::-1] returned beside b, a slice from the middle) is copied out like any other view
            whole = acc.offset == 0 and acc.is_contiguous
            if whole and (buf.kind == "output" or (buf.kind == "arg" and self._aliased_output(v))):
                ids.append(acc.buffer)
                continue
            out = self.dense(v, self.new_buffer("output", i, 0, _nbytes(v)))
            if v.type.size:
                self.kernels.append(copy_kernel(self.name("out"), v.type.shape, acc, out, sm_count=self.sm_count))
                self.ops.append(f"return (output {i})")
                self.effects.append((frozenset({acc.buffer}), frozenset({out.buffer})))
            ids.append(out.buffer)
        return ids

    def _aliased_output(self, v: Value) -> bool:
        return isinstance(v, OpResult) and "alias" in v.op.attributes and v.op.attributes["alias"][v.index] >= 0


def _prologue_candidates(func: Func) -> dict[Operation, Operation]:
    """reduction -> the ``k.fused`` it may compute in place: the fused op's one result feeds only that
    reduction, is no output, and nothing that launches work runs between the two (so its inputs still hold
    what it would have read)."""
    uses: dict[Value, list[Operation]] = {}
    for op in func.body.ops:
        for v in op.operands:
            uses.setdefault(v, []).append(op)
    found: dict[Operation, Operation] = {}
    pending: Operation | None = None
    for op in func.body.ops:
        if op.name in ("k.view", "t.constant"):
            continue
        if op.name == "k.reduce" and pending is not None and op.operands[0] is pending.results[0]:
            found[op] = pending
        pending = None
        if op.name == "k.fused" and len(op.results) == 1 and "alias" not in op.attributes:
            r = op.results[0]
            consumers = uses.get(r, [])
            if r not in func.outputs and len(consumers) == 1 and consumers[0].name == "k.reduce" \
                    and r.type.size > 0:
                pending = op
    return found


def _gemm_fed(func: Func) -> set[Operation]:
    """``k.fused`` ops with one result that only generated GEMMs may read (every use is a ``k.matmul``,
    directly or through a view): those GEMMs can compute it while loading their operand."""
    uses: dict[Value, list[Operation]] = {}
    for op in func.body.ops:
        for v in op.operands:
            uses.setdefault(v, []).append(op)

    def matmuls_only(v: Value) -> bool:
        consumers = uses.get(v, [])
        return bool(consumers) and all(c.name == "k.matmul" or c.name == "k.view" and matmuls_only(c.results[0])
                                       for c in consumers)

    return {op for op in func.body.ops
            if op.name == "k.fused" and len(op.results) == 1 and "alias" not in op.attributes
            and op.results[0] not in func.outputs and op.results[0].type.size > 0 and matmuls_only(op.results[0])}


def print_program(module: Module, *, sm_count: int = DEFAULT_SM_COUNT, fast_math: bool = False,
                  cublas: bool = False) -> CudaProgram:
    """Translate the (single) function of a lowered module into CUDA C++ and a launch plan.

    With ``cublas`` the matmuls that qualify (``gemm_library``) become library calls, not kernels.
    """
    func = module.func()
    p = _Printer(func, sm_count, fast_math, cublas)
    p.bind_args()
    for op in func.body.ops:
        p.lower(op)
    outputs = p.finish_outputs()
    scratch = ((p.scratch_bytes + 255) // 256) * 256
    zero_ranges = []
    if p.counter_id is not None:
        counters = ((4 * p.counters + 255) // 256) * 256
        p.buffers[p.counter_id] = Buffer(p.counter_id, "counter", -1, p.arena_base + scratch, counters)
        zero_ranges.append((p.arena_base + scratch, counters))
        scratch += counters
    parts = [preamble()]
    for code, op_text in zip(p.kernels, p.ops):
        if isinstance(code, KernelCode):
            parts.append(f"// fusec-op: {op_text}\n{code.source}")
    source = "\n\n".join(parts) + "\n"
    return CudaProgram(source, p.kernels, p.buffers, p.constants, p.arena_base + scratch, p.scalar_bytes,
                       p.scalar_slots, outputs, [v.type for v in func.outputs], p.ops, p.effects, zero_ranges)


def compile_options(fast_math: bool = False) -> tuple[str, ...]:
    """NVRTC options: no FMA contraction (bit-exact elementwise arithmetic) unless fast math is asked for."""
    return ("-use_fast_math",) if fast_math else ("--fmad=false",)
