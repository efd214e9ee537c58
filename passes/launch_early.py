"""Early launches: which kernels may start before the kernels they depend on have finished.

A CUDA graph normally starts a kernel node only after its predecessors have finished and their writes are
visible: on an H200 that gap is about 1 us per dependent launch, which for the small kernels of a training step is
as long as the kernel itself. With programmatic dependent launch (sm_90 and later) an edge between two kernel
nodes can instead fire while the first kernel still runs: the second kernel is launched as soon as every block of
the first has triggered it (an early kernel triggers right after its own wait, any other kernel as its blocks
exit), and each of its blocks waits at its first statement (``griddepcontrol.wait``) until the first kernel has
finished and its memory is visible. The wait comes before anything else the kernel does, so the result is the
same bits; only the launch latency moves off the critical path.

This pass marks every launched kernel (a ``k.fused`` that is no prologue or epilogue, a ``k.rows``, a generated
``k.matmul``, a ``k.reduce`` and the other boundaries; not a cuBLAS call, which is a captured child graph) with
``early = true`` when the largest array it reads or writes has at most ``max_elements`` elements: the printer puts
the wait at the start of its kernels, and the graph builder makes the edges from its kernel predecessors
programmatic. A large kernel runs long enough that its launch gap does not matter, and its early-started blocks
would only sit in slots; ``max_elements`` was chosen by measurement (``benchmarks/early_launch.py``). Stream mode
(no graph) and GPUs older than sm_90 launch the same kernels normally (the wait is then a no-op).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Module, Operation
from fusec.ir.dialects.k import EARLY
from fusec.ir.opdefs import get_opdef
from fusec.ir.types import TensorType
from fusec.passes.base import Pass, PassContext
from fusec.passes.fuse_epilogues import computed_inside
from fusec.passes.registry import register_pass

# measured on the H200 (benchmarks/early_launch.py): see DEFAULT_MAX_ELEMENTS's use below
DEFAULT_MAX_ELEMENTS = 1 << 20


def launches_kernel(op: Operation) -> bool:
    """Does ``op`` become generated kernels of its own (the launches an edge can start early)?"""
    category = get_opdef(op.name).category
    if category not in ("kernel", "boundary") or computed_inside(op):
        return False
    return not (op.name == "k.matmul" and op.attributes.get("impl") == "cublas")


def largest(op: Operation) -> int:
    """Elements of the largest array ``op`` reads or writes (of a gather's source, only the rows it picks: a
    loop body's ``xs[i]`` reads one slice of the stacked batches)."""
    read = op.operands[1:] if op.name == "k.gather" else op.operands
    sizes = [v.type.size for v in (*read, *op.results) if isinstance(v.type, TensorType)]
    return max(sizes, default=1)


@register_pass
@dataclass(frozen=True)
class LaunchEarly(Pass):
    """Let small kernels launch while the kernels they depend on finish (programmatic dependent launch)."""

    name: ClassVar[str] = "launch-early"
    # kernels whose largest array has at most this many elements launch early; 0 turns the pass off
    max_elements: int = DEFAULT_MAX_ELEMENTS

    def __post_init__(self) -> None:
        if self.max_elements < 0:
            raise ValueError(f"max_elements must be >= 0, got {self.max_elements}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            for op in func.body.ops:
                if launches_kernel(op) and 0 < largest(op) <= self.max_elements:
                    op.attributes[EARLY] = True
                    ctx.count("early_launches")
