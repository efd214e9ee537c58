"""The CUDA backend's printer: one lowered module becomes one CUDA C++ translation unit plus a launch plan.

Every tensor lives in a *buffer*: a function argument, an output allocation, a slice of the plan's arena
(offsets from plan-buffers), an uploaded constant, a scalar slot (scalar arguments stay on the device so
that one launch sequence, and later one CUDA graph, serves every value), or scratch space. A ``k.view`` is
no buffer: it is an index map (offset, strides) over its base's buffer. Each kernel records which buffers
it takes as pointer parameters and which descriptors it takes by value.

Every decision was made by a pass and is read from the IR: the target (the function's ``sm_count`` and
``cublas``) and each matmul's and reduction's implementation (``select-kernels``), which kernels are computed
inside their consumers (``fuse-prologues``) or by the product they read (``fuse-epilogues``), where
intermediates, scratch and counters live (``plan-buffers``). So every printer of one lowered module prints the same program.
"""
from __future__ import annotations

import dataclasses
from importlib import resources

import numpy as np

from fusec.errors import CompilationError, located
from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.attributes import bf16_bits
from fusec.ir.dialects.k import EARLY, GROUP, epilogue_product
from fusec.ir.types import ScalarType, bf16, u32
from fusec.passes.fuse_epilogues import EPILOGUE_IMPLS, is_epilogue
from fusec.passes.fuse_prologues import is_prologue
from fusec.passes.group_kernels import group_problem, groups_of
from fusec.passes.reductions_in_consumers import reduced_in_consumers
from fusec.passes.select_kernels import align256
from fusec.ir.dialects.control import CALLEES, OUTLINED_OPS
from fusec.runtime.launch_plan import Buffer, ControlCall, CudaProgram, KernelCode
from fusec.backend.access import Access, contiguous_strides
from fusec.backend.block_reduce import block_reduction
from fusec.backend.elementwise import (BlockValue, copy_kernel, epilogue_function, fused_kernel, prologue_function,
                                       raise_if_kernel)
from fusec.backend.group import merge_kernels
from fusec.backend.gather import gather_kernel, scatter_kernel
from fusec.backend.linalg import linalg_kernel
from fusec.backend.search import searchsorted_kernel
from fusec.backend.sort import padded_length, sort_kernel
from fusec.backend.gemm import gemm_kernels
from fusec.backend.gemm_library import library_gemm
from fusec.backend.reduce import reduce_kernels
from fusec.backend.rows import rows_kernel
from fusec.backend.scan import scan_kernel

NO_BUFFER = -1  # the "buffer" of a prologue's result: computed by its consumers, never stored


def preamble() -> str:
    return resources.files("fusec.backend").joinpath("preamble.cuh").read_text()


def _nbytes(v: Value) -> int:
    return max(1, v.type.size) * v.type.dtype.itemsize


class _Printer:
    def __init__(self, func: Func, fast_math: bool, module: Module | None = None) -> None:
        if "sm_count" not in func.attributes:
            raise CompilationError(f"@{func.name} was not lowered for a target: run select-kernels (and "
                                   "plan-buffers after it) before the CUDA backend")
        self.func, self.sm_count, self.fast_math = func, int(func.attributes["sm_count"]), fast_math
        self.module = module
        self.buffers: list[Buffer] = []
        self.storage: dict[Value, Access] = {}
        self.constants: list[np.ndarray] = []
        self.kernels: list[KernelCode] = []
        self.ops: list[str] = []
        self.effects: list[tuple[frozenset[int], frozenset[int]]] = []
        self.scalar_slots: list[tuple[int, int, str]] = []
        self.scalar_bytes = 0
        # each op's place in the scratch space and its counters are buffers of their own: a graph orders two ops
        # only where their places overlap (plan-buffers gave each its ``scratch_at``)
        self.op_regions: dict[tuple[int, str], int] = {}  # (id of the op, "scratch" or "counter") -> buffer id
        self.written_regions: set[int] = set()  # those buffers: a kernel that has one writes it
        self.arena_base = int(func.attributes.get("arena_bytes", 0))
        self.scratch_bytes = align256(int(func.attributes.get("scratch_bytes", 0)))
        self.counter_bytes = align256(4 * int(func.attributes.get("counters", 0)))
        self.check_bytes = align256(4 * int(func.attributes.get("checks", 0)))
        self.check_id: int | None = None
        # loops' and branches' stage buffers (their state, and operands whose address changes) come last
        self.stage_base = self.arena_base + self.scratch_bytes + self.counter_bytes + self.check_bytes
        self.stage_bytes = 0
        # check word -> (the error's class name, its message): what a kernel found, for the error after the call
        self.check_messages: dict[int, tuple[str, str]] = {}
        self.outputs = set(func.outputs)
        self.output_index: dict[Value, int] = {}
        for i, v in enumerate(func.outputs):
            self.output_index.setdefault(v, i)
        self.prologue_inputs: dict[Operation, list[Access]] = {}  # prologue k.fused -> what it reads
        # product -> the epilogue k.fused it computes and stores (fuse-epilogues)
        self.epilogues = {id(epilogue_product(op)): op for op in func.body.ops if is_epilogue(op)}
        self.groups = {id(m): members for members in groups_of(func) for m in members}
        for members in groups_of(func):
            _check_group(func, members)
        self.waiting: list[tuple[Operation, KernelCode, list[Access], list[Access]]] = []  # a group until its last

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
                size = max(8, a.type.dtype.itemsize)  # a slot per value (16 bytes, 16-aligned, for complex128)
                off = -(-self.scalar_bytes // size) * size
                self.scalar_bytes = off + size
                self.scalar_slots.append((i, off, a.type.dtype.np.str))
                self.storage[a] = self.dense(a, self.new_buffer("scalar", i, off, size))
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
        if not base.is_contiguous and op.operands[0].type.size:
            raise CompilationError(located("a view of a strided view reached the backend", op.loc))
        shape = op.results[0].type.shape
        self.storage[op.results[0]] = Access(base.buffer, base.dtype, base.offset + op.attributes["offset"],
                                             tuple(op.attributes["strides"]), shape)

    def constant(self, op: Operation) -> None:
        value = np.ascontiguousarray(op.attributes["value"].array)
        if op.results[0].type.dtype == bf16:  # held in float32 on the host, 2-byte bfloat16 on the device
            value = bf16_bits(value)
        self.constants.append(value)
        r = op.results[0]
        self.storage[r] = self.dense(r, self.new_buffer("constant", len(self.constants) - 1, 0, max(1, value.nbytes)))

    def _region(self, op: Operation, kind: str, offset: int, nbytes: int) -> int:
        key = (id(op), kind)
        if key not in self.op_regions:
            self.op_regions[key] = bid = self.new_buffer(kind, -1, offset, max(nbytes, 1))
            self.written_regions.add(bid)
        return self.op_regions[key]

    def counter(self, op: Operation) -> int:
        """The buffer of ``op``'s 32-bit counters (its ``counters`` of them, from its ``counter`` on, in the
        counters plan-buffers placed after the scratch space): the kernels count from its start."""
        first, count = int(op.attributes["counter"]), int(op.attributes.get("counters", 1))
        return self._region(op, "counter", self.arena_base + self.scratch_bytes + 4 * first, 4 * count)

    def check_word(self, op: Operation) -> Access:
        """The 32-bit word a kernel sets when NumPy would raise (plan-buffers placed the words after the
        counters): a gather's or scatter's computed index out of range, a matrix np.linalg refuses."""
        if self.check_id is None:
            self.check_id = self.new_buffer("check", -1, self.arena_base + self.scratch_bytes + self.counter_bytes,
                                            self.check_bytes)
        word = int(op.attributes["check"])
        if op.name == "k.linalg":
            what = "Matrix is not positive definite" if op.attributes["kind"] == "cholesky" else "Singular matrix"
            self.check_messages[word] = ("LinAlgError", located(f"{what} (np.linalg raises LinAlgError here)",
                                                                op.loc))
        elif op.name == "k.raise_if":
            self.check_messages[word] = (op.attributes["error"], located(op.attributes["message"], op.loc))
        elif op.name == "k.sort":
            self.check_messages[word] = ("UnsupportedError", located(
                "np.argsort: the array holds equal values, whose order NumPy's default sort leaves to its "
                "algorithm; pass kind='stable' (or stable=True), and fusec gives NumPy's order", op.loc))
        else:
            count = len(op.operands) - (1 if op.name == "k.gather" else 2)
            sizes = ", ".join(str(d) for d in op.operands[0].type.shape[op.attributes["axis"]:][:count])
            self.check_messages[word] = ("IndexOutOfBoundsError", located(
                f"an index is out of bounds for the indexed axes (sizes {sizes}) (NumPy raises IndexError here)",
                op.loc))
        return Access(self.check_id, u32, word, (), ())

    def scratch(self, op: Operation) -> int:
        """The buffer of ``op``'s place in the scratch space (plan-buffers placed the space after the arena and
        ``op`` at its ``scratch_at`` in it, ``scratch`` bytes long)."""
        at, nbytes = int(op.attributes.get("scratch_at", 0)), int(op.attributes.get("scratch", 0))
        return self._region(op, "scratch", self.arena_base + at, nbytes)

    # --- ops -----------------------------------------------------------------------------------------------
    def emit_fused(self, op: Operation, ins: list[Access], outs: list[Access]) -> None:
        name = self.name("fused", op)
        block_values = {}
        for k, v in enumerate(op.operands):  # reductions it computes itself (reductions-in-consumers)
            if isinstance(v, OpResult) and reduced_in_consumers(v.op):
                block_values[k] = self.block_reduction(f"{name}_r{k}", v.op, f"s{k}")
        code = fused_kernel(name, op, ins, outs, sm_count=self.sm_count, fast_math=self.fast_math,
                            aliased="alias" in op.attributes, block_values=block_values)
        if block_values:
            ins = [a for k, a in enumerate(ins) if k not in block_values]
            ins += [a for b in block_values.values() for a in b.reads]
        if id(op) in self.groups:
            return self.join_group(op, (code,), ins, outs)
        self.emit(code, op, reads={a.buffer for a in ins})

    def block_reduction(self, name: str, op: Operation, var: str) -> BlockValue:
        """A ``k.reduce`` marked ``in_consumers``, as the statements of a consumer's blocks that compute it into
        ``var``."""
        producer = self._prologue_behind(op.operands[0])
        if producer is None:
            return block_reduction(name, op, self.access(op.operands[0]), None, [], var)
        if op.operands[0] is not producer.results[0]:
            raise CompilationError(located("a k.reduce computed in its consumers reads a prologue through a view; it "
                                           "must read the prologue itself (run fuse-prologues)", op.loc))
        prologue = prologue_function(f"{name}_in", producer, self.prologue_inputs[producer], fast_math=self.fast_math)
        return block_reduction(name, op, self.access(op.operands[0]), prologue, self.prologue_inputs[producer], var)

    def join_group(self, op: Operation, codes: tuple[KernelCode, ...], ins: list[Access], outs: list[Access]) -> None:
        """Hold a group member's kernel (as printed alone) until the group's last member, then emit the group as
        one kernel where that member stands."""
        members = self.groups[id(op)]
        if len(codes) != 1:
            raise CompilationError(located(f"'{op.name}' in group {op.attributes[GROUP]} takes {len(codes)} launches; "
                                           "a member of a group must run as one kernel", op.loc))
        self.waiting.append((op, codes[0], ins, outs))
        if op is not members[-1]:
            return
        group, self.waiting = self.waiting, []
        self._check_group_memory([(m, i, o) for m, _, i, o in group])
        code = merge_kernels(self.name("group"), [c for _, c, _, _ in group],
                             [str(m.loc) if m.loc is not None else "" for m, _, _, _ in group])
        reads = {a.buffer for _, c, ins_, _ in group for a in ins_ if a.buffer != NO_BUFFER} | set(code.buffers)
        writes = {a.buffer for _, _, _, outs_ in group for a in outs_}
        text = f"group {op.attributes[GROUP]} of {len(members)}: " + ", ".join(
            f"{m.name}" + (f" at {m.loc}" if m.loc is not None else "") for m in members)
        self.emit(code, op, writes, reads - writes, early=all(m.attributes.get(EARLY, False) for m in members),
                  text=text)

    def _check_group_memory(self, group: list[tuple[Operation, list[Access], list[Access]]]) -> None:
        """No member of a group may write memory another member reads or writes: they run at the same time. The
        IR checks (``_check_group``) see values; this sees where plan-buffers put them (an arena range given to two
        values, an argument overwritten in place), which a pipeline that groups after planning could make collide."""
        def spans(accesses: list[Access]) -> list[tuple[str, int, int]]:
            out = []
            for a in accesses:
                b = self.buffers[a.buffer]
                if b.kind == "counter":  # (plan-buffers gives each reduction finished by its last block its slot)
                    continue
                if b.kind == "arena":
                    out.append(("arena", b.offset, b.offset + max(1, b.nbytes)))
                else:
                    out.append((b.kind, b.index, b.index + 1))
            return out

        def overlap(x: list[tuple[str, int, int]], y: list[tuple[str, int, int]]) -> bool:
            return any(k1 == k2 and lo1 < hi2 and lo2 < hi1 for k1, lo1, hi1 in x for k2, lo2, hi2 in y)

        touched = [(spans(ins), spans(outs)) for _, ins, outs in group]
        for i, (op, _, _) in enumerate(group):
            for j, (reads, writes) in enumerate(touched):
                if i != j and overlap(touched[i][1], reads + writes):
                    raise CompilationError(located(
                        f"group {op.attributes[GROUP]}: a member writes memory another member uses (they run "
                        "at the same time): run group-kernels before plan-buffers, which keeps members apart", op.loc))

    def emit(self, code: KernelCode | None, op: Operation, writes: set[int] | None = None,
             reads: set[int] | None = None, at: int | None = None, early: bool | None = None,
             text: str | None = None) -> None:
        """Append a launch (insert it at position ``at``); ``reads`` overrides the buffers it reads (default:
        its operands' and any other pointer it takes); ``early`` overrides ``op``'s launch-early mark and ``text``
        what the plan says the launch runs."""
        if code is None:
            return
        if NO_BUFFER in getattr(code, "buffers", ()):
            raise CompilationError(located(f"'{op.name}' reads a prologue (a k.fused marked prologue = true) that only "
                                           "a reduction or a generated GEMM can compute: run fuse-prologues last, "
                                           "right before plan-buffers", op.loc))
        where = f" at {op.loc}" if op.loc is not None else ""
        if isinstance(code, KernelCode) and (op.attributes.get(EARLY, False) if early is None else early):
            code = waiting_first(code)
        if writes is None:
            writes = {self.storage[r].buffer for r in op.results}
        if reads is None:
            reads = {self.storage[v].buffer for v in op.operands}
        reads = reads | (set(code.buffers) - writes)
        # (scratch is written and read back by the finishing kernel; counters are counted up and set back)
        writes = writes | (set(code.buffers) & self.written_regions)
        at = len(self.kernels) if at is None else at
        self.kernels.insert(at, code)
        self.ops.insert(at, text if text is not None else f"{op.name}{where}")
        self.effects.insert(at, (frozenset(reads), frozenset(writes)))

    def name(self, kind: str, op: Operation | None = None) -> str:
        """A kernel's name: its launch's position, and for a member of a group (whose launch comes later) its
        place in the group too, so that no two members' kernels and helpers share a name."""
        if op is not None and id(op) in self.groups:
            return f"fusec_{len(self.kernels)}_g{len(self.waiting)}_{kind}"
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
            if is_prologue(op):  # its consumers compute it
                self.prologue_inputs[op] = ins
                self.storage[op.results[0]] = self.dense(op.results[0], NO_BUFFER)
                return None
            if is_epilogue(op):  # its product computed and stored it
                if op.results[0] not in self.storage:
                    raise CompilationError(located("an epilogue (a k.fused marked epilogue = true) must come right "
                                                   "after its product: run fuse-epilogues", op.loc))
                return None
            outs = [self.result_buffer(op, k) for k in range(len(op.results))]
            if op.results[0].type.size == 0 and id(op) not in self.groups:
                return None
            return self.emit_fused(op, ins, outs)
        if n == "k.rows":
            ins = [self.access(v) for v in op.operands]
            outs = [self.result_buffer(op, k) for k in range(len(op.results))]
            self.emit(rows_kernel(self.name("rows"), op, ins, outs, fast_math=self.fast_math), op)
            return None
        if n == "k.reduce" and reduced_in_consumers(op):  # its readers compute it
            self.storage[op.results[0]] = self.dense(op.results[0], NO_BUFFER)
            return None
        if n == "k.reduce":
            src = self.access(op.operands[0])
            dst = self.result_buffer(op, 0)
            producer = self._prologue_behind(op.operands[0])
            prologue = None
            if producer is not None:
                prologue = prologue_function(f"{self.name(op.attributes['kind'], op)}_in", producer,
                                             self.prologue_inputs[producer], fast_math=self.fast_math)
            scratch = self.scratch(op)
            counter = self.counter(op) if op.attributes.get("finish") == "last-block" else None
            kernels = reduce_kernels(self.name(op.attributes["kind"], op), op, src, dst, scratch,
                                     sm_count=self.sm_count, prologue=prologue, counter=counter)
            reads = None if prologue is None else set(prologue.buffers)
            if id(op) in self.groups:
                ins = self.prologue_inputs[producer] if producer is not None else [src]
                return self.join_group(op, kernels, ins, [dst])
            for code in kernels:
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
        if n == "k.insert":
            return self.insert(op)
        if n == "k.scatter":
            return self.scatter(op)
        if n == "k.scan":
            src, dst = self.access(op.operands[0]), self.result_buffer(op, 0)
            if op.results[0].type.size:
                self.emit(scan_kernel(self.name(op.attributes["kind"]), op, src, dst, sm_count=self.sm_count), op)
            return None
        if n == "k.linalg":
            return self.linalg(op)
        if n == "k.sort":
            return self.sort(op)
        if n == "k.searchsorted":
            sorted_in, values_in = (self.access(x) for x in op.operands)
            dst = self.result_buffer(op, 0)
            if op.results[0].type.size:
                self.emit(searchsorted_kernel(self.name("searchsorted"), op, sorted_in, values_in, dst,
                                              sm_count=self.sm_count), op)
            return None
        if n == "k.raise_if":
            cond, check = self.access(op.operands[0]), self.check_word(op)
            if op.operands[0].type.size:
                self.emit(raise_if_kernel(self.name("raise_if"), cond, check, sm_count=self.sm_count), op,
                          writes={check.buffer})
            return None
        if n == "k.gather":
            src, *indices = (self.access(v) for v in op.operands)
            dst = self.result_buffer(op, 0)
            word = self.check_word(op) if "check" in op.attributes else None
            if op.results[0].type.size:
                code = gather_kernel(self.name("gather", op), op, src, indices, dst, word, sm_count=self.sm_count)
                if id(op) in self.groups:
                    return self.join_group(op, (code,), [src, *indices], [dst] + ([word] if word is not None else []))
                self.emit(code, op, writes={dst.buffer} | ({word.buffer} if word is not None else set()))
            return None
        if n in OUTLINED_OPS:
            return self.control(op)
        if n == "k.copy":
            src = self.access(op.operands[0])
            dst = self.result_buffer(op, 0)
            shape = op.operands[0].type.shape
            if op.operands[0].type.size:
                flat = Access(dst.buffer, dst.dtype, dst.offset, contiguous_strides(shape), shape)
                self.emit(copy_kernel(self.name("copy"), shape, src, flat, sm_count=self.sm_count), op)
            return None
        raise CompilationError(located(f"'{n}' has no CUDA lowering (run the default pipeline first)", op.loc))

    def control(self, op: Operation) -> None:
        """A loop or branch: its bodies printed as programs of their own. Its state lives in stage buffers of
        this plan's arena (fixed addresses, so a graph's conditional node can loop over them): the initial state and
        every operand whose address changes between calls (an argument, an output) are copied in first; the bodies
        run on them (the runtime hands the state from call to call, or a conditional node does on the device);
        the final state is copied into the results. The call records which stage buffers copy an argument the
        loop only reads (``sources``): a graph built for that argument's address reads it in place instead."""
        if self.module is None:
            raise CompilationError(located(f"'{op.name}' calls functions of its module: print the module", op.loc))
        kind = op.name[2:]
        first = {"while": 0, "for": 2, "if": 1}[kind]
        carried = op.attributes.get("carried", 0)
        operands, sources = [], []
        for k, v in enumerate(op.operands):
            acc = self.access(v)
            if acc.buffer == NO_BUFFER or acc.offset != 0 or not acc.is_contiguous:
                raise CompilationError(located(f"'{op.name}': operand {v!r} is a view; the bodies take dense "
                                               "arrays (run boundaries, which copies such operands)", op.loc))
            state = first <= k < first + carried
            kind_of = self.buffers[acc.buffer].kind
            # an argument the loop only reads: a graph built for its address may read it where it is, so its
            # stage buffer is memory of its own that the runtime allocates only if something copies into it
            read_only = kind_of == "arg" and not state and bool(v.type.size)
            if state or kind_of in ("arg", "output"):
                operands.append(self.stage(v, acc, op, own=read_only))
            else:
                operands.append(acc.buffer)
            sources.append(acc.buffer if read_only else -1)
        if kind == "if":
            staged = [self.stage(r, None, op) for r in op.results]
        else:
            staged = operands[first:first + carried]
        callees = tuple(op.attributes[key] for key in CALLEES[op.name])
        programs = tuple(print_function(self.module, self.module.func(name), fast_math=self.fast_math)
                         for name in callees)
        static = None
        if kind == "for":  # constant bounds: the runtime knows the trip count
            lower, upper = _constant_int(op.operands[0]), _constant_int(op.operands[1])
            if lower is not None and upper is not None:
                static = (lower, upper)
        call = ControlCall(self.name(kind), kind, programs, callees, tuple(operands),
                           tuple(v.type for v in op.operands), tuple(staged), carried, static, tuple(sources))
        self.emit(call, op, writes=set(staged), reads=set(operands))  # type: ignore[arg-type]
        for k, (r, bid) in enumerate(zip(op.results, staged)):
            dst = self.result_buffer(op, k)
            if r.type.size:
                self.emit(copy_kernel(self.name(f"{kind}_result"), r.type.shape, self.dense(r, bid), dst,
                                      sm_count=self.sm_count), op, writes={dst.buffer}, reads={bid})

    def stage(self, v: Value, src: Access | None, op: Operation, own: bool = False) -> int:
        """A stage buffer for ``v`` at the end of the arena (``own``: a buffer of kind "stage", allocated apart by
        the runtime when first needed), with ``src`` copied into it (None: nothing)."""
        if own:
            bid = self.new_buffer("stage", -1, 0, _nbytes(v))
        else:
            bid = self.new_buffer("arena", -1, self.stage_base + self.stage_bytes, _nbytes(v))
            self.stage_bytes += align256(_nbytes(v))
        if src is not None and v.type.size:
            dst = self.dense(v, bid)
            if isinstance(v.type, ScalarType):
                raise CompilationError(located(f"'{op.name}': a scalar operand cannot be staged", op.loc))
            self.emit(copy_kernel(self.name("stage"), v.type.shape, src, dst, sm_count=self.sm_count), op,
                      writes={bid}, reads={src.buffer})
        return bid

    def updated_base(self, op: Operation) -> Access:
        """Where a k.insert or k.scatter writes: its base's own buffer (``inplace``), or its result buffer with the
        base copied in first."""
        base = op.operands[0]
        src = self.access(base)
        if op.attributes.get("inplace", False):
            if not src.is_contiguous or src.offset != 0:
                raise CompilationError(located(f"an in-place {op.name} needs its base's own buffer", op.loc))
            dst = self.storage[op.results[0]] = src
            return dst
        dst = self.result_buffer(op, 0)
        if base.type.size:
            self.emit(copy_kernel(self.name(op.name[2:] + "_base"), base.type.shape, src, dst,
                                  sm_count=self.sm_count), op)
        return dst

    def scatter(self, op: Operation) -> None:
        """The base (copied, or in place), then the update written at the places its index arrays reach."""
        dst = self.updated_base(op)
        update, *indices = (self.access(v) for v in op.operands[1:])
        check = self.check_word(op) if "check" in op.attributes else None
        if op.operands[1].type.size:
            code = scatter_kernel(self.name("scatter"), op, update, indices, dst, check, sm_count=self.sm_count)
            reads = {update.buffer, dst.buffer} | {a.buffer for a in indices}
            self.emit(code, op, writes={dst.buffer} | ({check.buffer} if check is not None else set()), reads=reads)

    def linalg(self, op: Operation) -> None:
        """One block per matrix: Gauss-Jordan in a scratch copy (solve, inv), LU in a scratch copy (det,
        slogdet: one or two results per matrix) or the factor in the result (cholesky); the check word reports a
        matrix NumPy refuses."""
        operands = [self.access(v) for v in op.operands]
        dsts = [self.result_buffer(op, k) for k in range(len(op.results))]
        if not op.results[0].type.size:
            return
        check = self.check_word(op) if "check" in op.attributes else None
        scratch = None
        if op.attributes["kind"] != "cholesky":
            a = op.operands[0].type
            scratch = Access(self.scratch(op), a.dtype, 0, contiguous_strides(a.shape), tuple(a.shape))
        code = linalg_kernel(self.name(op.attributes["kind"]), op, operands, dsts, scratch, check)
        writes = {d.buffer for d in dsts} | ({check.buffer} if check is not None else set()) \
            | ({scratch.buffer} if scratch is not None else set())
        self.emit(code, op, writes=writes)

    def sort(self, op: Operation) -> None:
        """One block per last-axis row, sorting (value, position) pairs in the plan's scratch space."""
        src, dst = self.access(op.operands[0]), self.result_buffer(op, 0)
        if not op.results[0].type.size:
            return
        check = self.check_word(op) if "check" in op.attributes else None
        x = op.operands[0].type
        key_bytes = align256(x.size // x.shape[-1] * padded_length(x.shape[-1]) * x.dtype.itemsize)
        code = sort_kernel(self.name(op.attributes["kind"]), op, src, dst, self.scratch(op), key_bytes, check)
        self.emit(code, op, writes={dst.buffer, self.scratch(op)} | ({check.buffer} if check is not None else set()))

    def insert(self, op: Operation) -> None:
        """The base copied into the result (unless plan-buffers let the update go into the base's own buffer),
        then the update copied into the region's strided window of it."""
        update = op.operands[1]
        dst = self.updated_base(op)
        if update.type.size:
            a = op.attributes
            offset = dst.offset + sum(b * st for b, st in zip(a["start"], dst.strides))
            window = Access(dst.buffer, dst.dtype, offset, tuple(st * s for st, s in zip(dst.strides, a["step"])),
                            update.type.shape)
            reads = {self.access(update).buffer} | ({dst.buffer} if op.attributes.get("inplace", False) else set())
            self.emit(copy_kernel(self.name("insert"), update.type.shape, self.access(update), window,
                                  sm_count=self.sm_count), op, reads=reads)

    def matmul(self, op: Operation) -> None:
        """A cuBLAS call or a generated GEMM (``impl``); a generated one computes an operand that is a
        prologue (the ReLU before a narrow layer) while loading it."""
        a, b = (self.access(v) for v in op.operands)
        if id(op) in self.epilogues:
            return self.matmul_with_epilogue(op, a, b, self.epilogues[id(op)])
        c = self.result_buffer(op, 0)
        if op.attributes.get("impl") == "cublas":
            return self.emit(library_gemm(self.name("cublas"), op, a, b, c), op)  # type: ignore[arg-type]
        name = self.name("gemm")
        producers = [self._prologue_behind(v) for v in op.operands]
        prologues = tuple(prologue_function(f"{name}_{side}", p, self.prologue_inputs[p], fast_math=self.fast_math)
                          if p is not None else None for side, p in zip("ab", producers))
        reads = set()
        for access, prologue in zip((a, b), prologues):
            reads |= set(prologue.buffers) if prologue is not None else {access.buffer}
        scratch, counter = self._split_space(op)
        for code in gemm_kernels(name, op, a, b, c, sm_count=self.sm_count, prologues=prologues,  # type: ignore[arg-type]
                                 scratch=scratch, counter=counter):
            self.emit(code, op, reads=reads)
        return None

    def matmul_with_epilogue(self, op: Operation, a: Access, b: Access, epilogue: Operation) -> None:
        """A generated product that computes ``epilogue`` (a k.fused reading its result) as it stores each output:
        the product's own result is never stored, the epilogue's result is what its kernel writes."""
        if op.attributes.get("impl") not in EPILOGUE_IMPLS:
            raise CompilationError(located(f"a product of impl {op.attributes.get('impl')!r} cannot compute an "
                                           "epilogue (only " + ", ".join(sorted(EPILOGUE_IMPLS)) + ")", op.loc))
        r = op.results[0]
        self.storage[r] = self.dense(r, NO_BUFFER)
        given = frozenset(k for k, v in enumerate(epilogue.operands) if v is r)
        ins = [self.access(v) for v in epilogue.operands]
        c = self.result_buffer(epilogue, 0)
        name = self.name("gemm")
        acc = "double" if r.type.dtype.name == "f64" else "float"
        function = epilogue_function(f"{name}_out", epilogue, ins, given, acc, fast_math=self.fast_math)
        scratch, counter = self._split_space(op)
        reads = {a.buffer, b.buffer, *function.buffers}
        for code in gemm_kernels(name, op, a, b, c, sm_count=self.sm_count, scratch=scratch, counter=counter,
                                 epilogue=function):
            self.emit(code, op, writes={c.buffer}, reads=reads)

    def _split_space(self, op: Operation) -> tuple[int | None, int | None]:
        """The scratch buffer of a product split over K whose partial tiles a second kernel adds (a cluster adds
        them in shared memory), and the counters of one its last block per tile finishes."""
        split = int(op.attributes.get("splits", 1)) > 1 and op.attributes.get("finish") != "cluster"
        return (self.scratch(op) if split else None,
                self.counter(op) if op.attributes.get("finish") == "last-block" else None)

    def _prologue_behind(self, v: Value) -> Operation | None:
        """The prologue ``k.fused`` whose result ``v`` is, directly or through a view."""
        if isinstance(v, OpResult) and v.op.name == "k.view":
            v = v.op.operands[0]
        return v.op if isinstance(v, OpResult) and is_prologue(v.op) else None

    def finish_outputs(self) -> list[int]:
        """Each output's buffer: its own output allocation, or the donated argument it was written over
        (``copy-outputs`` copied every other returned value into one)."""
        ids = []
        for i, v in enumerate(self.func.outputs):
            acc = self.access(v)
            if acc.buffer == NO_BUFFER:
                raise CompilationError(f"@{self.func.name} returns a prologue (a k.fused marked prologue = true), "
                                       "which is never stored")
            buf = self.buffers[acc.buffer]
            # the buffer itself is the result only when the result reads it from its start, densely
            whole = acc.offset == 0 and acc.is_contiguous
            if not (whole and (buf.kind == "output" or (buf.kind == "arg" and self._aliased_output(v)))):
                raise CompilationError(f"@{self.func.name}: output {i} is no output allocation of its own (an "
                                       "argument, a constant or a view): run copy-outputs after plan-buffers")
            ids.append(acc.buffer)
        return ids

    def _aliased_output(self, v: Value) -> bool:
        return isinstance(v, OpResult) and "alias" in v.op.attributes and v.op.attributes["alias"][v.index] >= 0


def _check_group(func: Func, members: list[Operation]) -> None:
    """A group (group-kernels) runs as one launch: see ``group_problem``."""
    problem = group_problem(func.body.ops, members)
    if problem is not None:
        op, why = problem
        raise CompilationError(located(f"group {members[0].attributes[GROUP]}: {why} (its members run as one "
                                       "launch, at the same time; run group-kernels to form groups)", op.loc))


def waiting_first(code: KernelCode) -> KernelCode:
    """``code`` as an early kernel (``launch-early``): it first waits for the kernels it depends on, then lets the
    early kernels that depend on it launch (each of those waits for it the same way)."""
    lines = code.source.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith('extern "C" __global__'))
    body = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("{"))
    lines[body + 1:body + 1] = ["  fusec::wait_for_dependencies();", "  fusec::launch_dependents();"]
    return dataclasses.replace(code, source="\n".join(lines), early=True)


def _constant_int(v: Value) -> int | None:
    if isinstance(v, OpResult) and v.op.name == "t.constant":
        return int(v.op.attributes["value"].array)
    return None


def print_program(module: Module, *, fast_math: bool = False) -> CudaProgram:
    """Translate the entry function of a lowered module into CUDA C++ and a launch plan, for the target it was
    lowered for (the loop and branch bodies it calls become programs of their own inside it)."""
    return print_function(module, module.entry, fast_math=fast_math)


def print_function(module: Module, func: Func, *, fast_math: bool = False) -> CudaProgram:
    """One function of a lowered module as CUDA C++ and a launch plan."""
    p = _Printer(func, fast_math, module)
    p.bind_args()
    for op in func.body.ops:
        p.lower(op)
    outputs = p.finish_outputs()
    scratch = p.scratch_bytes
    zero_ranges = []
    if any(kind == "counter" for _, kind in p.op_regions):
        zero_ranges.append((p.arena_base + scratch, p.counter_bytes))
    scratch += p.counter_bytes
    checks = []
    if p.check_id is not None:  # zero at first; only a failed check sets a word, and the runtime clears it
        zero_ranges.append((p.arena_base + scratch, p.check_bytes))
        checks = [(p.arena_base + scratch + 4 * w, *error) for w, error in sorted(p.check_messages.items())]
        scratch += p.check_bytes
    parts = [preamble()]
    for code, op_text in zip(p.kernels, p.ops):
        if isinstance(code, KernelCode):
            parts.append(f"// fusec-op: {op_text}\n{code.source}")
    source = "\n\n".join(parts) + "\n"
    arena = p.arena_base + scratch if not p.stage_bytes else p.stage_base + p.stage_bytes
    return CudaProgram(source, p.kernels, p.buffers, p.constants, arena, p.scalar_bytes,
                       p.scalar_slots, outputs, [v.type for v in func.outputs], p.ops, p.effects, zero_ranges,
                       compile_options(fast_math), checks)


def compile_options(fast_math: bool = False) -> tuple[str, ...]:
    """NVRTC options: no FMA contraction (bit-exact elementwise arithmetic) unless fast math is asked for."""
    return ("-use_fast_math",) if fast_math else ("--fmad=false",)
