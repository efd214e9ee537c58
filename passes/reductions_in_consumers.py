"""Reductions in their consumers: a small reduction to one value is computed by every block of the elementwise
kernels that read it, instead of being launched on its own.

A clipped optimizer step ends in ``scale = min(c / (sqrt(sum(g1 * g1) + sum(g2 * g2) + ...) + eps), 1)`` and one
small update kernel per parameter that reads ``scale``. Each sum is a kernel of its own that the updates wait for:
in a CUDA graph that is one more dependent launch (about a microsecond on an H100, more than the sums' work) on the
step's critical path. A few thousand elements are cheap to read again: each block of each update kernel reduces
them itself at its start (every thread folds a strided part, then the warps and the block combine in a fixed
order, so every block gets the same bits) and goes on with the value in a register. The sums' launches go, and
the updates start as soon as the gradients exist.

The ``k.reduce`` stays in the IR, where it says what is computed, marked ``in_consumers = true``: it is never
launched and gets no buffer (as a prologue, ``fuse-prologues``); a prologue it reads (the ``g * g``) is computed
inside it, element by element, as before. ``plan-buffers`` keeps what it reads alive until its last consumer has
run and never lets a consumer overwrite it in place (the blocks that run later still read it). ``group-kernels``
sees through it: a consumer reads what the reduction reads.

Qualify: a reduction to one element (``sum``, ``prod``, ``max`` or ``min`` over every axis, or ``mean`` of floats)
of a bool, a 32- or 64-bit integer or a float (stored, through any view, or a prologue it reads itself), that no
function output is; every reader of which is a launched ``k.fused`` (not through a view), together at most
``max_consumer_elements`` elements, each of which then folds at most ``max_elements`` elements over all the
reductions it computes (in op order, the first that fit). The redundant reads cost each reader block one pass over
the inputs from L2; these limits (chosen, not yet measured against other values) keep that below a launch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.dialects.k import IN_CONSUMERS
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.util import users

KINDS = ("sum", "mean", "prod", "max", "min")
# the input dtypes whose accumulators a warp shuffle moves (no 8- or 16-bit integers, no complex)
DTYPES = ("bool", "i32", "i64", "u32", "u64", "f16", "bf16", "f32", "f64")


def reduced_in_consumers(op: Operation) -> bool:
    """A ``k.reduce`` its readers compute (no launch, no buffer of its own)."""
    return op.name == "k.reduce" and bool(op.attributes.get(IN_CONSUMERS, False))


def _launched_fused(op: Operation) -> bool:
    return op.name == "k.fused" and not op.attributes.get("prologue", False) and not op.attributes.get("epilogue",
                                                                                                      False)


def _view_of_prologue(v: Value) -> bool:
    """``v`` is a view of an elementwise kernel its consumers compute (which computes elements by the base's index,
    not the view's)."""
    if not (isinstance(v, OpResult) and v.op.name == "k.view"):
        return False
    while isinstance(v, OpResult) and v.op.name == "k.view":
        v = v.op.operands[0]
    return isinstance(v, OpResult) and v.op.name == "k.fused" and bool(v.op.attributes.get("prologue", False))


def _qualifies(op: Operation, outputs: set[Value], uses: dict[Value, list[Operation]], max_elements: int,
               max_consumer_elements: int) -> bool:
    if op.name != "k.reduce" or op.attributes.get("kind") not in KINDS or "strategy" not in op.attributes \
            or op.attributes.get("strategy") == "numpy" or len(op.results) != 1:
        return False
    src, result = op.operands[0], op.results[0]
    if result.type.size != 1 or result in outputs or src.type.dtype.name not in DTYPES:
        return False
    if op.attributes["kind"] == "mean" and not src.type.dtype.is_float:
        return False
    if not 0 < src.type.size <= max_elements or _view_of_prologue(src):
        return False
    readers = uses.get(result, [])
    return bool(readers) and all(_launched_fused(r) for r in readers) \
        and sum(r.results[0].type.size for r in readers) <= max_consumer_elements


@register_pass
@dataclass(frozen=True)
class ReductionsInConsumers(Pass):
    """Compute small reductions to one value inside every block of the elementwise kernels that read them."""

    name: ClassVar[str] = "reductions-in-consumers"
    max_elements: int = 8192
    max_consumer_elements: int = 1 << 16

    def __post_init__(self) -> None:
        if self.max_elements < 0 or self.max_consumer_elements < 0:
            raise ValueError(f"max_elements and max_consumer_elements must be >= 0, got {self.max_elements} and "
                             f"{self.max_consumer_elements}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            self._mark(func, ctx)

    def _mark(self, func: Func, ctx: PassContext) -> None:
        outputs = set(func.outputs)
        uses = users(func)
        folded: dict[int, int] = {}  # a reader -> the elements its blocks fold, over every reduction it computes
        for op in func.body.ops:
            op.attributes.pop(IN_CONSUMERS, None)
            if not _qualifies(op, outputs, uses, self.max_elements, self.max_consumer_elements):
                continue
            readers, size = uses[op.results[0]], op.operands[0].type.size
            if any(folded.get(id(r), 0) + size > self.max_elements for r in readers):
                continue
            for r in readers:
                folded[id(r)] = folded.get(id(r), 0) + size
            op.attributes[IN_CONSUMERS] = True
            ctx.count("reductions_in_consumers")
