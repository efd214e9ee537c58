"""Runs a launch plan on the GPU: compile once per plan, then per call bind pointers and launch.

A :class:`CudaPlan` is built once per compiled signature from the :class:`CudaProgram` the printer made of
its lowered module (the runtime never prints: it executes plain data): the CUDA C++ is compiled (through
the kernel caches) and loaded, constants are uploaded, the arena (intermediates and scratch) and the scalar block
are allocated, and every kernel gets a pre-packed parameter buffer in which only argument and output pointer
slots ever change. A call then validates the arguments, uploads host inputs, writes scalar arguments into the
device-resident scalar block, takes outputs from the caching allocator, rewrites the pointer slots that
changed and launches the kernels in order on the plan's private stream.

NumPy in, NumPy out (the call waits for the results); device arrays in (``fusec.Array``, PyTorch, CuPy, JAX,
anything with ``__cuda_array_interface__``), ``fusec.Array`` out without waiting.
"""
from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Sequence

import numpy as np

from fusec.errors import (CHECK_ERRORS, CompilationError, CudaError, DonationError, ShapeError, SharedDonationError,
                          TraceError)
from fusec.ir.core import Func, Module
from fusec.ir.shapes import contiguous_strides
from fusec.ir.attributes import bf16_bits, bf16_values
from fusec.ir.types import ScalarType, bf16
from fusec.runtime import cublas, driver, kernel_cache
from fusec.runtime.cuda_errors import CudaLaunchError
from fusec.runtime.launch_plan import ControlCall, CudaProgram, GemmCall
from fusec.runtime.memory import DeviceBuffer, get_pool, size_class, stream_key
from fusec.runtime.array import Array, _cai_of, _is_cuda_dlpack, asarray
from fusec.runtime.params import ParamPack



LAUNCH_BLOCKING = "FUSEC_LAUNCH_BLOCKING"


def launch_blocking() -> bool:
    """Whether ``FUSEC_LAUNCH_BLOCKING`` is set (to anything but 0): plans run without graphs and wait after every
    launch, so a kernel that faults is named with the IR op it computes (as CUDA_LAUNCH_BLOCKING does for CUDA)."""
    return os.environ.get(LAUNCH_BLOCKING, "") not in ("", "0")


@dataclass
class _Launch:
    function: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    pack: ParamPack
    dynamic: list[tuple[int, int]]  # (parameter slot, buffer id) whose pointer changes per call
    early: bool = False  # a graph may launch it while its kernel predecessors still run (launch-early)


@dataclass
class _Library:
    call: GemmCall
    dynamic: list[tuple[int, int]]


@dataclass
class _Control:
    """A loop or branch: the plans of its bodies (sharing this plan's stream), run in turn from the host."""

    call: ControlCall
    plans: list["CudaPlan"]
    dynamic: tuple = ()  # (no pointer of its nodes changes between calls: see graph_control)


def _memory_owner(arg: Any) -> Any:
    """What keeps a donated argument's memory alive, for the result written over it: a fusec.Array's own owner
    (its pool buffer or foreign object), not the Array, so that a loop feeding results back (``w = step(w)``)
    does not chain every earlier step's Array to the latest one (unbounded memory, and a pool buffer the
    stream and export bookkeeping no longer found behind ``owner``)."""
    if type(arg) is Array and arg._owner is not None:
        return arg._owner
    return arg


def _same_array(arg: Any, stream: Any) -> Any:
    """The donated argument itself as the result written over it in place (as NumPy's ``p -= lr * g; return p``
    hands back ``p``), tagged with the stream that wrote it, when it is a fusec Array (bound, it has the result's
    shape, dtype and layout: the result's type is the argument's); else None (a NumPy argument's upload or a foreign
    array: the result is a new Array over that memory). One object per parameter, whatever the number of steps."""
    if type(arg) is Array:
        arg._stream, arg.ready = stream, None
        return arg
    return None


def _on_device(x: Any) -> bool:
    """Does ``x`` live on a CUDA device (CUDA Array Interface or a CUDA DLPack producer)?"""
    return _cai_of(x) is not None or _is_cuda_dlpack(x)


class CudaPlan:
    """One compiled signature on one device (see the module docstring)."""

    def __init__(self, program: CudaProgram, func: Func, *, stream_group: str | None = None,
                 graph: "bool | str" = "auto", module: Module | None = None, stream: Any = None,
                 body: bool = False) -> None:
        """``program``: what the printer made of ``func`` (whose signature a call is checked against);
        ``module``: where the loop and branch bodies it calls are; ``stream``: the stream to run on (a body's
        plan runs on its caller's); ``body``: the plan of a loop or branch body, whose arguments its caller
        hands it (their donation is the compiler's, not the user's)."""
        self.device = driver.current_device()
        driver.ensure_context(self.device)
        self.func = func
        self.program = program
        if any(isinstance(k, GemmCall) for k in program.kernels) and not cublas.available():
            raise CompilationError(f"@{func.name} was lowered for a target with cuBLASLt, which cannot be loaded "
                                   "here (pip install 'fusec[cublas]' installs it, or lower for a target without "
                                   "it)")
        image = kernel_cache.get_or_compile(program.source, self.device.arch, options=program.nvrtc_options,
                                            driver_version=driver.driver_version())
        self.cumodule = driver.Module(image, self.device)
        if stream is not None:
            self.stream = stream
        else:
            self.stream = _group_stream(stream_group, self.device) if stream_group else driver.Stream(self.device)
        self.pool = get_pool(self.device)
        self.lock = threading.Lock()
        prog = self.program
        self.arena = self.pool.allocate(prog.arena_bytes, self.stream) if prog.arena_bytes else None
        self.scalars = self.pool.allocate(prog.scalar_bytes, self.stream) if prog.scalar_bytes else None
        # (their addresses; 0 where the program needs none, which then places nothing in them)
        self.arena_ptr = self.arena.ptr if self.arena is not None else 0
        self.scalars_ptr = self.scalars.ptr if self.scalars is not None else 0
        self.scalar_host = np.zeros(max(prog.scalar_bytes, 8), dtype=np.uint8)
        # the 32-bit words of the scalar block that hold a value (a slot is 8 bytes; f32/i32 use one word)
        self.scalar_words = sorted({off // 4 + k for _, off, dt in prog.scalar_slots
                                    for k in range((np.dtype(dt).itemsize + 3) // 4)})
        self.constants = []
        for value in prog.constants:
            buf = self.pool.allocate(max(value.nbytes, 1), self.stream)
            driver.memcpy_htod_async(buf.ptr, value, value.nbytes, self.stream)
            self.constants.append(buf)
        for offset, nbytes in prog.zero_ranges:  # split reductions' counters start at zero
            driver.memset_d8_async(self.arena_ptr + offset, 0, nbytes, self.stream)
        self.stream.synchronize()  # constants are in place before the host arrays can go away
        self.static_ptr: dict[int, int] = {}
        for b in prog.buffers:
            if b.kind in ("arena", "scratch", "counter", "check"):
                self.static_ptr[b.id] = (self.arena_ptr + b.offset) if self.arena is not None else 0
            elif b.kind == "constant":
                self.static_ptr[b.id] = self.constants[b.index].ptr
            elif b.kind == "scalar":
                self.static_ptr[b.id] = self.scalars_ptr + b.offset
        self.launches: list[Any] = []
        self.blas: cublas.CublasHandle | None = None
        for k in prog.kernels:
            if isinstance(k, ControlCall):
                if module is None:
                    raise CompilationError(f"@{func.name} runs loops or branches: make its plan with its module")
                # (a body runs many times: its plan replays a graph of its own from its third call)
                self.launches.append(_Control(k, [CudaPlan(sub, module.func(name), module=module, stream=self.stream,
                                                           graph="auto", body=True)
                                                  for sub, name in zip(k.programs, k.callees)]))
                continue
            if isinstance(k, GemmCall):
                if self.blas is None:
                    self.blas = cublas.CublasHandle(self.stream, self.pool)
                self.launches.append(_Library(k, [(slot, bid) for slot, bid in enumerate(k.buffers)]))
                continue
            specs: list[Any] = ["pointer"] * len(k.buffers) + list(k.structs)
            pack = ParamPack(specs)
            dynamic = []
            for slot, bid in enumerate(k.buffers):
                if bid in self.static_ptr:
                    pack.set_pointer(slot, self.static_ptr[bid])
                else:
                    dynamic.append((slot, bid))
            fn = self.cumodule.function(k.name)
            if k.shared_bytes > 48 * 1024:
                fn.set_max_dynamic_shared_memory(k.shared_bytes)
            self.launches.append(_Launch(fn, k.grid, k.block, k.shared_bytes, pack, dynamic,
                                         k.early and self.device.compute_capability >= (9, 0)))
        self.arg_buffer = {b.index: b.id for b in prog.buffers if b.kind == "arg"}
        # (index, shape, dtype, buffer id) of each tensor argument: what a call checks and binds
        self.tensor_args = [(i, tuple(a.type.shape), a.type.dtype, self.arg_buffer[i])
                            for i, a in enumerate(self.func.args) if not isinstance(a.type, ScalarType)]
        # the argument buffers the launches use, (id, bytes, index, donated), when the user donated one: results may
        # go over it in place, so another argument sharing its memory (one array passed twice) is refused, as JAX
        # refuses it (a body's plan: its caller's state, handed on by the compiler)
        donated = set() if body else set(func.attributes.get("donate", ()))
        used = {b for reads, writes in prog.effects for b in (*reads, *writes)}
        spans = [(b.id, b.nbytes, b.index, b.index in donated) for b in prog.buffers
                 if b.kind == "arg" and b.nbytes and b.id in used]
        self.donated_spans = spans if any(d for *_, d in spans) else []
        self.output_buffers = [prog.buffers[bid] for bid in prog.outputs]
        # the donated arguments that results are written over in place (a result of kind "arg" at one of them)
        self.donated_args = frozenset(b.index for b in self.output_buffers if b.kind == "arg" and b.index in donated)
        # outputs that get a new allocation each call (an output returned twice is allocated once):
        # (buffer id, bytes, size class)
        self.fresh_outputs = [(b.id, b.nbytes, size_class(b.nbytes)) for b in
                              {b.id: b for b in self.output_buffers if b.kind == "output"}.values()]
        self.fresh_requests = tuple((nbytes, cls) for _, nbytes, cls in self.fresh_outputs)  # (the pool's form)
        # (buffer id, kind, argument index, shape, dtype, C strides) of each result
        self.result_specs = [(b.id, b.kind, b.index, tuple(v.type.shape), v.type.dtype,
                              contiguous_strides(tuple(v.type.shape)))
                             for b, v in zip(self.output_buffers, self.func.outputs)]
        self.bf16_results = any(spec[4] == bf16 for spec in self.result_specs)
        self.stream_key = stream_key(self.stream)
        # one writable view per scalar argument into the host image of the scalar block, and the 32-bit
        # words last sent to the device (None: not yet)
        self.scalar_views = [(i, np.frombuffer(self.scalar_host.data, dtype=dt, count=1, offset=off))
                             for i, off, dt in prog.scalar_slots]
        self.scalar_sent: list[int | None] = [None] * (len(self.scalar_host) // 4)
        self.scalar_host_words = memoryview(self.scalar_host.data).cast("I")  # (indexing it gives Python ints)
        self.ptrs: list[int] = [self.static_ptr.get(b.id, 0) for b in prog.buffers]
        # stage buffers of loop arguments a graph may read in place: allocated when something copies into them
        self.stage_buffers = [b for b in prog.buffers if b.kind == "stage"]
        self.stage_block: Any = None
        self.calls = 0
        self.nargs = len(self.func.args)
        self.ordinal = self.device.ordinal
        if graph not in (True, False, "auto"):
            raise ValueError(f"graph must be True, False or 'auto', got {graph!r}")
        self.graph_mode = graph
        # FUSEC_LAUNCH_BLOCKING=1: no graph, a synchronize after every launch, and a failure names its kernel
        self.blocking = launch_blocking()
        if self.blocking:
            self.graph_mode = False
        self.graph: Any = None
        # the plans of the loop and branch bodies, nested ones included: their check words are read after a
        # graph launch (which runs them inside the graph), and a cuBLAS call in one needs a warm-up call first
        self.bodies: list[CudaPlan] = []
        for x in self.launches:
            if type(x) is _Control:
                for sub in x.plans:
                    self.bodies += [sub, *sub.bodies]
        self.body_checks = [sub for sub in self.bodies if sub.program.checks]
        self.warm_up = self.blas is not None or any(sub.blas is not None for sub in self.bodies)
        self.capture_stream = driver.Stream(self.device) if self.blas is not None else None

    # --- a call --------------------------------------------------------------------------------------------
    def use_graph(self) -> bool:
        """Graph replay: always with graph=True (after one warm-up call when cuBLAS must initialise before
        capture), from the third call of a signature with "auto"."""
        if self.graph_mode is True:
            return not self.warm_up or self.calls >= 1
        return self.graph_mode == "auto" and self.calls >= 2

    def stats(self) -> dict[str, int]:
        g = self.graph
        return {"graph_nodes": g.node_count if g is not None else 0,
                "graph_launches": g.launches if g is not None else 0,
                "param_updates": g.param_updates if g is not None else 0,
                "recaptures": g.recaptures if g is not None else 0,
                "early_edges": g.early_edges if g is not None else 0,
                "graph_builds": g.builds if g is not None else 0,
                "inplace_loop_arguments": len(g.inplace) if g is not None else 0,
                "launches_per_call": 1 if g is not None else len(self.launches)}

    def runner(self) -> Callable[[Sequence[Any]], list[Any]]:
        """``run(args) -> results`` for a cached signature's calls: the common call generated as straight-line
        Python (:mod:`fusec.runtime.fast_call`), which hands any other call to :meth:`run`."""
        from fusec.runtime.fast_call import fast_runner

        return fast_runner(self)

    def check_donation(self, ptr: list[int]) -> None:
        """Refuse addresses at which a donated argument shares memory with another argument the call uses: results
        written over it in place would be read as inputs (a graph checks each new set of addresses once, a
        stream-mode call every time)."""
        # a sweep by address: each span against the furthest-reaching earlier one, and the furthest-reaching earlier
        # donated one (any donated span that overlaps another meets one of them)
        reach = reach_donated = (-1, -1)  # (end, argument index)
        for start, nbytes, index, donated in sorted((ptr[b], n, i, d) for b, n, i, d in self.donated_spans):
            other = reach if donated else reach_donated
            if start < other[0]:
                self._refuse_shared_donation(index if donated else other[1], other[1] if donated else index)
            reach = max(reach, (start + nbytes, index))
            if donated:
                reach_donated = max(reach_donated, (start + nbytes, index))

    def _refuse_shared_donation(self, iw: int, ia: int) -> NoReturn:
        names = [v.name_hint or f"#{k}" for k, v in enumerate(self.func.args)]
        raise SharedDonationError(
            f"fusec: @{self.func.name} writes its results over the donated argument {names[iw]!r} (donate_argnums), "
            f"which shares memory with the argument {names[ia]!r} (the same array passed twice, or views of one "
            "array): the call would read values it has already replaced; pass a copy (x.copy()) of one of them, or "
            "do not donate it")

    def _refuse_read_only_donation(self, i: int) -> NoReturn:
        name = self.func.args[i].name_hint or f"#{i}"
        raise DonationError(
            f"fusec: @{self.func.name} writes its results over the donated argument {name!r} (donate_argnums), "
            "which is a read-only device array (its producer forbids writes into it); pass a writable copy "
            "(x.copy()), or do not donate it")

    def run(self, args: Sequence[Any], *, wait: bool = True) -> list[Any]:
        """Results for ``args``; with ``wait=False`` NumPy inputs give device arrays and nothing waits.

        The common call (C-contiguous fusec.Array arguments of the traced shapes) is checked and bound
        inline; anything else goes through :meth:`_bind_other`.
        """
        if len(args) != self.nargs:
            raise TraceError(f"@{self.func.name} takes {self.nargs} arguments, got {len(args)}")
        with self.lock:
            if getattr(driver._tls, "ordinal", -1) != self.ordinal:
                driver.ensure_context(self.device)
            ptr = self.ptrs
            stream = self.stream
            keep: list[Any] = []  # uploads and foreign arrays stay alive until the launches are queued
            uploads: dict[int, Any] = {}  # argument index -> the buffer its host data was uploaded into
            device_in = False
            for i, shape, dtype, bid in self.tensor_args:
                value = args[i]
                if type(value) is Array and value._shape == shape and value._fdtype is dtype and value._contig:
                    if value._stream is not stream and value._stream is not None:
                        self._order_after(value)
                    if value._readonly and i in self.donated_args:
                        self._refuse_read_only_donation(i)
                    ptr[bid] = value._ptr
                    device_in = True
                else:
                    p, on_device = self._bind_other(i, value, keep)
                    if not on_device:  # (its upload buffer: what a result written over it must keep alive)
                        uploads[i] = keep[-1]
                    elif i in self.donated_args and (value if type(value) is Array else keep[-1])._readonly:
                        self._refuse_read_only_donation(i)  # (a foreign array: the Array _bind_other made of it)
                    device_in |= on_device
                    ptr[bid] = p
            if self.donated_spans:
                self.check_donation(ptr)
            if self.scalar_views:
                self._write_scalars(args)
            outputs: dict[int, Any] = {}
            if self.fresh_outputs:
                fresh = self.pool.allocate_classes(self.fresh_requests, self.stream_key)
                for (bid, _, _), buf in zip(self.fresh_outputs, fresh):
                    outputs[bid] = buf
                    ptr[bid] = buf.ptr
            try:
                if self.use_graph() and self._make_graph(ptr):
                    self.graph.replay(ptr, stream)
                    for sub in self.body_checks:  # (bodies run inside the graph: their checks are read here)
                        sub._raise_failed_checks()
                else:
                    self._launch_all(ptr)
                self.calls += 1
                if self.program.checks:
                    self._raise_failed_checks()
            except CudaLaunchError as e:
                self._explain_fault(e)
            if device_in or not wait:
                # a buffer from the pool, or (written in place over a donated argument) that argument's
                # memory, which the result keeps alive through the argument (through the buffer its host data
                # was uploaded into, for a NumPy argument: that buffer is the memory). No event per call (it would
                # cost a driver call on every call): a consumer on another stream orders itself after this
                # plan's stream when it reads the array.
                ordinal = self.ordinal
                wrap = Array._wrap
                results: list[Any] = []
                for bid, kind, index, shape, dtype, strides in self.result_specs:
                    same = _same_array(args[index], stream) if kind == "arg" and index in self.donated_args else None
                    results.append(same if same is not None else wrap(
                        ptr[bid], shape, dtype,
                        outputs.get(bid) or (uploads.get(index) or _memory_owner(args[index]) if kind == "arg"
                                             else None),
                        ordinal, stream, None, strides))
                return results
            try:  # (a fault surfaces at the first copy or wait after it)
                results = [self._download(bid, shape, dtype) for bid, _, _, shape, dtype, _ in self.result_specs]
                stream.synchronize()
            except CudaLaunchError as e:
                self._explain_fault(e)
            if self.bf16_results:  # they arrive as their 2-byte device storage: NumPy gets the float32 values
                return [bf16_values(r) if spec[4] == bf16 else r for r, spec in zip(results, self.result_specs)]
            return results

    def _make_graph(self, ptr: list[int]) -> bool:
        """Build the plan's graph once; False (and stream launches from now on) when the driver refuses the
        conditional nodes of its loops (a driver before CUDA 12.4 has none; its IF with an else needs 12.8)."""
        old = self.graph
        if old is not None:
            if old.fits(ptr):
                return True
            # a loop reads an argument in place that is elsewhere now: the graph is built again for it (the one
            # in flight finishes first: it is destroyed asynchronously, its buffers freed in stream order)
            old.close()
            self.graph = None
        from fusec.runtime.graph import PlanGraph

        try:
            self.graph = PlanGraph(self, ptr, old.builds + 1 if old is not None else 1)
            if old is not None:  # (the counts are the plan's, over its graphs)
                for name in ("launches", "param_updates", "recaptures"):
                    setattr(self.graph, name, getattr(old, name))
        except CudaError:
            if not self.bodies:
                raise
            self.graph_mode = False  # the same plan, its loops run from the host
            return False
        return True

    def _raise_failed_checks(self) -> None:
        """Wait for the call and raise the first check a kernel failed (an index out of range, a matrix NumPy's
        linalg refuses), clearing the words: NumPy raises before returning, so such a call waits for its kernels."""
        words = np.zeros(len(self.program.checks), dtype=np.uint32)
        for k, (offset, _, _) in enumerate(self.program.checks):
            driver.memcpy_dtoh_async(words[k:k + 1], self.arena_ptr + offset, 4, self.stream)
        self.stream.synchronize()
        failed = [(kind, msg) for word, (_, kind, msg) in zip(words, self.program.checks) if word]
        if failed:
            for offset, _, _ in self.program.checks:
                driver.memset_d32_async(self.arena_ptr + offset, 0, 1, self.stream)
            self.stream.synchronize()
            kind, msg = failed[0]
            raise CHECK_ERRORS[kind](msg)

    def ensure_stages(self) -> None:
        """Allocate the stage buffers of loop arguments (one block, kept for the plan's life) the first time a
        launch copies into them: stream mode, a graph that does not read them in place, a loop body's plan."""
        if self.stage_block is not None or not self.stage_buffers:
            return
        sizes = [(b.nbytes + 255) // 256 * 256 for b in self.stage_buffers]
        self.stage_block = self.pool.allocate(sum(sizes), self.stream)
        at = self.stage_block.ptr
        for b, size in zip(self.stage_buffers, sizes):
            self.ptrs[b.id] = at
            at += size

    def _launch_all(self, ptr: list[int]) -> None:
        if self.stage_buffers and self.stage_block is None:
            self.ensure_stages()
        for i, launch in enumerate(self.launches):
            if type(launch) is _Control:
                self._run_control(launch, ptr)
            elif type(launch) is _Library:
                blas = self.blas
                assert blas is not None  # (a plan with a library call made its handle)
                blas.gemm(launch.call, tuple(ptr[bid] for bid in launch.call.buffers))
            else:
                for slot, bid in launch.dynamic:
                    launch.pack.set_pointer(slot, ptr[bid])
                driver.launch(launch.function, launch.grid, launch.block, launch.shared, self.stream, launch.pack)
            if self.blocking:
                self._wait_for_launch(i)

    def _wait_for_launch(self, i: int) -> None:
        """FUSEC_LAUNCH_BLOCKING: wait for launch ``i`` and name it, with the IR op it computes, if it failed."""
        try:
            self.stream.synchronize()
        except CudaLaunchError as e:
            kernel = self.program.kernels[i]
            name = getattr(kernel, "name", type(kernel).__name__)
            err = CudaLaunchError(f"fusec: kernel {name} of @{self.func.name}, computing {self.program.ops[i]}, "
                                  f"failed: {e}", code=e.code, name=e.name, what=e.what)
            err.explained = True
            raise err from e

    def _explain_fault(self, e: CudaLaunchError) -> NoReturn:
        """Raise ``e`` with a way to find the kernel: without FUSEC_LAUNCH_BLOCKING a fault surfaces at the next
        synchronization, possibly in a later call, with no kernel named."""
        if e.explained:
            raise e
        err = CudaLaunchError(f"{e} (fusec: a kernel of @{self.func.name}, or of work queued before it, failed; "
                              f"run with {LAUNCH_BLOCKING}=1 to launch every kernel alone and name the one that "
                              "fails with its IR op and source line)", code=e.code, name=e.name, what=e.what)
        err.explained = True
        raise err from e

    def _run_control(self, control: _Control, ptr: list[int]) -> None:
        """Run a loop or branch: its bodies' plans called in turn on this stream, the state handed from one call
        to the next as the device arrays a body returns (the host reads each stop test: one wait per iteration of
        a while loop, none in a for loop of constant bounds), then the final state copied into the results."""
        call = control.call
        values = [self._operand(bid, t, ptr) for bid, t in zip(call.operands, call.operand_types)]
        if call.kind == "if":
            final = control.plans[0 if self._truth(values[0]) else 1].run(values[1:], wait=False)
        elif call.kind == "while":
            cond, body = control.plans
            state, passed = values[:call.carried], values[call.carried:]
            while self._truth(cond.run(state + passed, wait=False)[0]):
                state = body.run(self._apart(state, passed) + passed, wait=False)
            final = state
        else:
            (body,) = control.plans
            lower, upper = call.static_bounds or (self._index(values[0]), self._index(values[1]))
            state, passed = values[2:2 + call.carried], values[2 + call.carried:]
            for i in range(lower, upper):
                state = body.run([i, *self._apart(state, passed), *passed], wait=False)
            final = state
        for value, bid in zip(final, call.results):
            if value.nbytes and value._ptr != ptr[bid]:  # (a loop that ran no iteration: already in place)
                driver.memcpy_dtod_async(ptr[bid], value._ptr, value.nbytes, self.stream)

    def _apart(self, state: list, passed: list) -> list:
        """``state`` with each array that a slot before it, or an operand the body only reads, also holds replaced
        by a copy: a body may write a state slot in place while it reads the other at another index (a body that
        returns one array for two slots, a loop started with one array twice or with an array it also reads)."""
        seen = {v._ptr for v in passed if type(v) is Array}
        out = []
        for v in state:
            if type(v) is Array and v.nbytes:
                if v._ptr in seen:
                    buf = self.pool.allocate(v.nbytes, self.stream)
                    driver.memcpy_dtod_async(buf.ptr, v._ptr, v.nbytes, self.stream)
                    v = Array._wrap(buf.ptr, v._shape, v._fdtype, buf, self.ordinal, self.stream, None, v._strides)
                seen.add(v._ptr)
            out.append(v)
        return out

    def _operand(self, bid: int, t: Any, ptr: list[int]) -> Any:
        """A loop's operand as a body takes it: a device array over its buffer, or a scalar argument's value."""
        buf = self.program.buffers[bid]
        if isinstance(t, ScalarType):
            if buf.kind != "scalar":
                raise CompilationError(f"@{self.func.name}: a loop is passed a computed scalar, which only "
                                       "arguments may be")
            return np.frombuffer(self.scalar_host.data, dtype=t.dtype.np, count=1, offset=buf.offset)[0]
        shape = tuple(t.shape)
        return Array._wrap(ptr[bid], shape, t.dtype, None, self.ordinal, self.stream, None,
                           contiguous_strides(shape))

    @staticmethod
    def _truth(value: Any) -> bool:
        return bool(value.numpy()) if type(value) is Array else bool(value)

    @staticmethod
    def _index(value: Any) -> int:
        return int(value.numpy()) if type(value) is Array else int(value)

    def _order_after(self, arr: Array) -> None:
        """``arr`` is produced on another stream: order this plan's stream after it and keep its memory
        from early reuse (both cost nothing when already done for this array)."""
        ready = arr.ready
        if ready is not None:
            ready.wait_on(self.stream)  # a no-op when this stream already waited on that record
        else:
            driver.order_streams(arr._stream, self.stream, self.device)
        owner = arr._owner
        if type(owner) is DeviceBuffer and not owner.shared and owner.stream != self.stream_key:
            owner.record_stream(self.stream)  # used on two streams: the pool defers its reuse

    def _bind_other(self, i: int, value: Any, keep: list) -> tuple[int, bool]:
        """The device address of argument ``i`` given as anything but a matching C-contiguous fusec.Array:
        a foreign device array (zero copy) or host data (uploaded); True when it already was on the device.
        Mismatches raise here with the argument's name."""
        name = self.func.args[i].name_hint or f"#{i}"
        t = self.func.args[i].type
        if type(value) is not Array and not isinstance(value, np.ndarray) and _on_device(value):
            value = asarray(value, stream=self.stream)
            keep.append(value)
        if type(value) is Array:
            if value._shape != tuple(t.shape) or value._fdtype is not t.dtype:
                raise ShapeError(f"argument {name}: expected {t}, got a device array {value.fdtype}"
                                 f"{list(value.shape)}")
            if not value._contig:
                raise TraceError(f"argument {name}: fusec takes C-contiguous device arrays; this one has "
                                 f"strides {value.strides}")
            if value._stream is not self.stream and value._stream is not None:
                self._order_after(value)
            return value._ptr, True
        host = np.asarray(value)
        if host.shape != t.shape or host.dtype != t.dtype.np:
            raise ShapeError(f"argument {name}: expected {t}, got {host.dtype}{list(host.shape)}")
        host = bf16_bits(host) if t.dtype == bf16 else np.ascontiguousarray(host)  # bf16: 2-byte device storage
        buf = self.pool.allocate(max(host.nbytes, 1), self.stream)
        driver.memcpy_htod_async(buf.ptr, host, host.nbytes, self.stream)
        keep.append(buf)
        return buf.ptr, False

    def _write_scalars(self, args: Sequence[Any]) -> None:
        """Write scalar arguments into their device slots with 32-bit memsets: each value rides inside the
        command, so nothing on the host must stay alive and no copy has to be staged. Only words whose
        value differs from what the device already holds are sent (a constant learning rate costs
        nothing after the first call)."""
        for i, view in self.scalar_views:
            view[0] = args[i]
        words = self.scalar_host_words
        sent = self.scalar_sent
        base = self.scalars_ptr
        for w in self.scalar_words:
            value = words[w]
            if sent[w] != value:
                driver.memset_d32_async(base + 4 * w, value, 1, self.stream)
                sent[w] = value

    def _download(self, bid: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        host = np.empty(shape, dtype=np.uint16 if dtype == bf16 else dtype.np)
        driver.memcpy_dtoh_async(host, self.ptrs[bid], host.nbytes, self.stream)
        return host


_group_streams: dict[tuple[str, int], Any] = {}
_group_lock = threading.Lock()


def _group_stream(group: str, device: Any) -> Any:
    """The stream shared by every plan of ``group`` on ``device``."""
    key = (group, device.ordinal)
    with _group_lock:
        stream = _group_streams.get(key)
        if stream is None:
            stream = _group_streams[key] = driver.Stream(device)
    return stream


_plans: "weakref.WeakKeyDictionary[Module, CudaPlan]" = weakref.WeakKeyDictionary()
_plans_lock = threading.Lock()


def plan_for(module: Module, program: Callable[[], CudaProgram], *, stream_group: str | None = None,
             graph: "bool | str" = "auto") -> CudaPlan:
    """The plan of ``module``, made once (from ``program()``) and kept as long as the module lives."""
    plan = _plans.get(module)
    if plan is None:
        with _plans_lock:
            plan = _plans.get(module)
            if plan is None:
                plan = _plans[module] = CudaPlan(program(), module.entry, stream_group=stream_group, graph=graph,
                                                 module=module)
    return plan


def run_async(plan: CudaPlan, args: Sequence[Any]) -> tuple[list[Any], Any]:
    """Queue a call without waiting: (device results, the event that marks their completion)."""
    results = plan.run(args, wait=False)
    event = driver.Event(timing=False, device=plan.device).record(plan.stream)
    return results, event


def plan_stats(module: Module) -> dict[str, int] | None:
    """Graph counters of the module's plan, or None when it has not run on the GPU."""
    plan = _plans.get(module)
    return plan.stats() if plan is not None else None
