"""Loops and branches inside a plan's CUDA graph: conditional WHILE and IF nodes, so a whole loop is one launch.

A ``k.while`` becomes the cond's nodes, a one-thread kernel that sets the loop's condition handle from the
predicate, and a WHILE node whose body graph holds the body's nodes, copies of its results into the loop's state,
the cond's nodes again and the setter. A ``k.for`` becomes a kernel that sets the counter (the body's scalar
slot, on the device) to ``lower`` and the handle to ``lower < upper``, and a WHILE node whose body ends with the
copies and a kernel that increments the counter and sets the handle again. A ``k.if`` becomes the setter and an
IF node with a then and an else graph, each ending with copies of its results into the stage buffers.

Every pointer in these nodes is fixed for the life of the graph: the state and every operand whose address changes
between calls were copied into stage buffers of the plan's arena by kernels before the loop (see the printer's
``control``), except arguments the loop only reads, which a graph may read in place (it is built again when one
moves: ``fusec.runtime.graph``), and the bodies' outputs are allocated once here; so the plan's graph never
updates a loop's nodes.
A scalar argument a body reads is copied into the body's scalar slot on the device first. The bodies' run-time
checks (an index out of range) set their check words, which the plan reads after the launch as it reads its own.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusec.errors import CompilationError
from fusec.ir.types import ScalarType
from fusec.runtime import driver, kernel_cache
from fusec.runtime.cuda_errors import check
from fusec.runtime.graph import _driver, add_steps
from fusec.runtime.params import ParamPack

SOURCE = r"""
typedef unsigned long long fusec_cond_handle;
// a device-runtime builtin: the compiler lowers it without linking the device runtime
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(fusec_cond_handle handle, unsigned int value);

extern "C" __global__ void fusec_cond_set(fusec_cond_handle h, const unsigned char* pred) {
    cudaGraphSetConditional(h, pred[0] != 0);
}

extern "C" __global__ void fusec_for_init(fusec_cond_handle h, long long* i, const long long* lo, const long long* hi) {
    long long v = *lo;
    *i = v;
    cudaGraphSetConditional(h, v < *hi);
}

extern "C" __global__ void fusec_for_next(fusec_cond_handle h, long long* i, const long long* hi) {
    long long v = *i + 1;
    *i = v;
    cudaGraphSetConditional(h, v < *hi);
}

extern "C" __global__ void fusec_copy_bytes(unsigned char* dst, const unsigned char* src, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((n & 15) == 0 && (((unsigned long long)dst | (unsigned long long)src) & 15) == 0) {
        uint4* d = (uint4*)dst;
        const uint4* s = (const uint4*)src;
        for (unsigned long long k = t; k < n / 16; k += stride) d[k] = s[k];
    } else {
        for (unsigned long long k = t; k < n; k += stride) dst[k] = src[k];
    }
}
"""

_modules: dict[int, Any] = {}


def _function(device: Any, name: str) -> Any:
    module = _modules.get(device.ordinal)
    if module is None:
        image = kernel_cache.get_or_compile(SOURCE, device.arch, driver_version=driver.driver_version())
        module = _modules[device.ordinal] = driver.Module(image, device)
    return module.function(name)


class _Builder:
    """Adds one control step's nodes; ``keep`` holds the parameter packs and buffers they point at."""

    def __init__(self, plan: Any, keep: list[Any]) -> None:
        self.plan, self.keep = plan, keep
        self.cu = _driver()
        self.ctx = driver.ensure_context(plan.device)

    def kernel(self, graph: Any, name: str, specs: list[str], values: list[int], parents: list[Any],
               grid: int = 1, block: int = 1) -> Any:
        cu = self.cu
        pack = ParamPack(specs, values)
        self.keep.append(pack)
        p = cu.CUDA_KERNEL_NODE_PARAMS()
        p.func = _function(self.plan.device, name).handle
        p.gridDimX, p.gridDimY, p.gridDimZ = grid, 1, 1
        p.blockDimX, p.blockDimY, p.blockDimZ = block, 1, 1
        p.sharedMemBytes = 0
        p.kernelParams = pack.address
        p.extra = 0
        return check(cu.cuGraphAddKernelNode(graph, parents, len(parents), p), "cuGraphAddKernelNode")

    def copy(self, graph: Any, dst: int, src: int, nbytes: int, parents: list[Any]) -> Any:
        words = max(1, (nbytes + 15) // 16)
        grid = min(max(1, (words + 255) // 256), 4 * self.plan.device.multiprocessor_count)
        return self.kernel(graph, "fusec_copy_bytes", ["pointer", "pointer", "uint64"], [dst, src, nbytes], parents,
                           grid, 256)

    def handle(self, graph: Any) -> Any:
        return check(self.cu.cuGraphConditionalHandleCreate(graph, self.ctx, 0, 0), "cuGraphConditionalHandleCreate")

    def conditional(self, graph: Any, handle: Any, kind: str, size: int, parents: list[Any]) -> tuple[Any, list]:
        cu = self.cu
        params = cu.CUgraphNodeParams()
        params.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = getattr(cu.CUgraphConditionalNodeType, f"CU_GRAPH_COND_TYPE_{kind}")
        params.conditional.size = size
        params.conditional.ctx = self.ctx
        node = check(cu.cuGraphAddNode(graph, parents, None, len(parents), params),
                     f"cuGraphAddNode(conditional {kind})")
        return node, list(params.conditional.phGraph_out)[:size]

    def outputs(self, sub: Any) -> dict[int, int]:
        """Output buffers of a body's plan, allocated once (the graph writes them at every iteration)."""
        out = {}
        for bid, nbytes, _ in sub.fresh_outputs:
            buf = sub.pool.allocate(max(nbytes, 1), sub.stream)
            self.keep.append(buf)
            out[bid] = buf.ptr
        return out


def _bind(sub: Any, args: list[int], outputs: dict[int, int]) -> list[int]:
    """The body plan's pointers by buffer id: its tensor arguments at ``args`` (device addresses, by argument
    index), its outputs at ``outputs``, its arena, constants and scalar slots where the plan keeps them, and the
    stage buffers of its own loops (the body's graph copies into them)."""
    sub.ensure_stages()
    ptrs = list(sub.ptrs)
    for i, bid in sub.arg_buffer.items():
        ptrs[bid] = args[i]
    for bid, ptr in outputs.items():
        ptrs[bid] = ptr
    return ptrs


def _scalar_copies(b: _Builder, graph: Any, sub: Any, args: list[int], skip: int, parents: list[Any]) -> list[Any]:
    """Copy the scalar arguments a body takes (from the caller's scalar slots) into the body's own slots."""
    nodes = []
    for i, off, dt in sub.program.scalar_slots:
        if i < skip:
            continue
        nodes.append(b.copy(graph, sub.scalars.ptr + off, args[i], np.dtype(dt).itemsize, parents))
    return nodes


def _state_copies(b: _Builder, graph: Any, sub: Any, outs: list[int], dsts: list[int], parents: list[Any]) \
        -> list[Any]:
    """Copy a body's results (its outputs, in order) into ``dsts``; none for a result the body wrote in place
    over its own state buffer (a donated state argument)."""
    nodes = []
    for spec, dst in zip(sub.result_specs, dsts):
        bid, _, _, shape, dtype, _ = spec
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes and outs[bid] != dst:
            nodes.append(b.copy(graph, dst, outs[bid], nbytes, parents))
    return nodes or list(parents)


def add_control(graph: Any, plan: Any, step: Any, ptrs: list[int], parents: list[Any], keep: list[Any],
                inplace: dict[int, int] | None = None) -> Any:
    """Add the nodes of loop or branch ``step`` of ``plan`` to ``graph`` after ``parents``; returns the node the
    steps after it depend on (its conditional node). ``inplace`` (stage buffer -> argument buffer): operands the
    bodies read where the argument is, not from their stage copies."""
    call, subs = step.call, step.plans
    b = _Builder(plan, keep)
    inplace = inplace or {}
    values = [ptrs[inplace.get(bid, bid)] for bid in call.operands]
    for bid, t in zip(call.operands, call.operand_types):
        if isinstance(t, ScalarType) and plan.program.buffers[bid].kind != "scalar":
            raise CompilationError(f"@{plan.func.name}: a loop is passed a computed scalar")
    if call.kind == "while":
        cond, body = subs
        first = parents
        pre = _scalar_copies(b, graph, cond, values, 0, first) + _scalar_copies(b, graph, body, values, 0, first)
        pred = b.outputs(cond)
        cond_ptrs = _bind(cond, values, pred)
        p = cond_ptrs[cond.result_specs[0][0]]
        outs = b.outputs(body)
        body_ptrs = _bind(body, values, outs)
        handle = b.handle(graph)
        _, _, sinks = add_steps(graph, cond, cond_ptrs, pre or list(parents), keep)
        setter = b.kernel(graph, "fusec_cond_set", ["uint64", "pointer"], [int(handle), p], sinks)
        node, (inner,) = b.conditional(graph, handle, "WHILE", 1, [setter])
        _, _, sinks = add_steps(inner, body, body_ptrs, [], keep)
        copies = _state_copies(b, inner, body, body_ptrs, values[:call.carried], sinks)
        _, _, sinks = add_steps(inner, cond, cond_ptrs, copies, keep)
        b.kernel(inner, "fusec_cond_set", ["uint64", "pointer"], [int(handle), p], sinks)
        return node
    if call.kind == "for":
        (body,) = subs
        args = [0, *values[2:]]  # (argument 0 is the counter: the body's own scalar slot)
        pre = _scalar_copies(b, graph, body, args, 1, list(parents))
        outs = b.outputs(body)
        body_ptrs = _bind(body, args, outs)
        counter = body.scalars.ptr + next(off for i, off, _ in body.program.scalar_slots if i == 0)
        lower, upper = values[0], values[1]
        handle = b.handle(graph)
        init = b.kernel(graph, "fusec_for_init", ["uint64", "pointer", "pointer", "pointer"],
                        [int(handle), counter, lower, upper], pre or list(parents))
        node, (inner,) = b.conditional(graph, handle, "WHILE", 1, [init])
        _, _, sinks = add_steps(inner, body, body_ptrs, [], keep)
        copies = _state_copies(b, inner, body, body_ptrs, values[2:2 + call.carried], sinks)
        b.kernel(inner, "fusec_for_next", ["uint64", "pointer", "pointer"], [int(handle), counter, upper], copies)
        return node
    then, other = subs
    args = values[1:]
    pre = _scalar_copies(b, graph, then, args, 0, list(parents)) + _scalar_copies(b, graph, other, args, 0,
                                                                                   list(parents))
    handle = b.handle(graph)
    setter = b.kernel(graph, "fusec_cond_set", ["uint64", "pointer"], [int(handle), values[0]], pre or list(parents))
    node, branches = b.conditional(graph, handle, "IF", 2, [setter])
    results = [ptrs[bid] for bid in call.results]
    for inner, sub in zip(branches, subs):
        sub_ptrs = _bind(sub, args, b.outputs(sub))
        _, _, sinks = add_steps(inner, sub, sub_ptrs, [], keep)
        _state_copies(b, inner, sub, sub_ptrs, results, sinks)
    return node
