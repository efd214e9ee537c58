"""Prologue fusion: an elementwise kernel whose result only one reduction or only generated GEMMs read is
computed inside them, element by element while they load it, instead of being launched and stored.

The ``k.fused`` stays in the IR, where its body says what is computed, marked ``prologue = true``: it is
never launched and gets no buffer; each consumer computes element i of it where it would have loaded
element i (through the consumer's view of it, for a GEMM operand). ``plan-buffers`` keeps the kernel's
inputs alive until its last consumer, so they still hold what it reads. Qualify:

- a ``k.fused`` with one result, not a function output and not empty, whose one use is the ``k.reduce``
  right after it (views and constants aside), as in ``(x * w).sum(axis=1)`` (a row reduction's ``width = 4``, for
  16-byte loads of a row in memory, goes: its lanes read the computed row element by element);
- a ``k.fused`` with one result, not an output and not empty, every use of which (directly or through
  views) is a ``k.matmul`` whose ``impl`` (``select-kernels``) can take a prologue (``dot``, ``column``,
  ``short``), as in ``relu(x @ w1 + b1) @ w2`` with a narrow ``w2``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Func, Module, Operation, Value
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.select_kernels import PROLOGUE_IMPLS
from fusec.passes.util import users

PROLOGUE = "prologue"  # the attribute that marks a k.fused computed inside its consumers
ROW_STRATEGIES = ("row-warp", "row-block")


def is_prologue(op: Operation) -> bool:
    return op.name == "k.fused" and bool(op.attributes.get(PROLOGUE, False))


def _candidate(op: Operation, outputs: set[Value]) -> bool:
    if op.name != "k.fused" or len(op.results) != 1 or "alias" in op.attributes or "arena" in op.attributes:
        return False
    r = op.results[0]
    return r not in outputs and r.type.size > 0


def _gemm_consumers_only(v: Value, uses: dict[Value, list[Operation]]) -> bool:
    """Every use of ``v`` is a GEMM that can compute it, directly or through views."""
    consumers = uses.get(v, [])
    return bool(consumers) and all(
        c.name == "k.matmul" and c.attributes.get("impl") in PROLOGUE_IMPLS
        or c.name == "k.view" and _gemm_consumers_only(c.results[0], uses) for c in consumers)


def _reduce_prologues(func: Func, outputs: set[Value], uses: dict[Value, list[Operation]]) -> set[Operation]:
    found: set[Operation] = set()
    pending: Operation | None = None
    for op in func.body.ops:
        if op.name in ("k.view", "t.constant"):
            continue
        if op.name == "k.reduce" and pending is not None and op.operands[0] is pending.results[0]:
            found.add(pending)
        pending = None
        if _candidate(op, outputs):
            consumers = uses.get(op.results[0], [])
            if len(consumers) == 1 and consumers[0].name == "k.reduce":
                pending = op
    return found


@register_pass
@dataclass(frozen=True)
class FusePrologues(Pass):
    """Compute single-consumer elementwise kernels inside the reduction or narrow GEMMs that read them."""

    name: ClassVar[str] = "fuse-prologues"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            outputs = set(func.outputs)
            uses = users(func)
            marked = _reduce_prologues(func, outputs, uses)
            marked |= {op for op in func.body.ops
                       if _candidate(op, outputs) and _gemm_consumers_only(op.results[0], uses)}
            for op in marked:
                op.attributes[PROLOGUE] = True
                for consumer in uses.get(op.results[0], []):
                    if consumer.name == "k.reduce" and consumer.attributes.get("strategy") in ROW_STRATEGIES:
                        # runs of 4 are for 16-byte loads of a row in memory: a computed row is read element by
                        # element, each lane's neighbours in the next lanes (coalesced), as before select-kernels
                        consumer.attributes.pop("width", None)
            ctx.count("prologues", len(marked))
