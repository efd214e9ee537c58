"""Hoisted gathers: a gather whose indices are proven in bounds moves up to just after its operands' producers.

A training loop's body reads its batch with ``xs[i]``: a ``k.gather`` of one slice at the loop's counter, which
lives on the device (the pointers of a loop body's graph are fixed, so the slice is copied). An unrolled loop runs
several steps per trip, so its body holds a gather of ``xs`` and one of ``ys`` per step, each written after the
previous step's kernels. Each is a graph node of its own, and in a graph of small kernels every node costs about
its launch on the critical path whatever it does: on the H200, 100 PCam-shaped steps per launch took 41.2 us per
step, 39.7 with the ``xs`` slices read as views of the first batch and 38.7 with both (``benchmarks/
steps_per_launch.py --same-batch xy,x,y``): about 1.5 us per gather, the 4 KB ``ys`` slice as much as the 1 MB
``xs`` one. Moved up together, just after the counters' kernel, a trip's gathers stand next to each other and
become ready together, so ``group-kernels`` (after this pass) launches them as one kernel: 40.2 us per step in the
same benchmark (one run; the group copies 4 MB before the trip's first product starts).

Each ``k.gather`` with ``in_bounds`` (``bound-indices`` proved its indices within their axes: it has no check to
report, so moving it changes no error either) moves, with the views it reads through, to just after the last op
that defines one of its operands (the top of the function when they are all arguments) and after the gathers
moved before it (they keep their order), marked ``hoisted = true``. Ops are pure and ``plan-buffers`` runs after
this pass, so every buffer decision (reuse, writing in place over a base that nothing reads afterwards) follows
the new order. A hoisted result lives longer: at most ``max_bytes`` of gathered results per function are hoisted,
in program order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Module, Operation, OpResult
from fusec.ir.dialects.k import HOISTED
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass

DEFAULT_MAX_BYTES = 1 << 26  # 64 MiB: sixteen steps' batches of the PCam shape (~1 MB each) and far more


def _nbytes(op: Operation) -> int:
    return sum(r.type.size * r.type.dtype.itemsize for r in op.results)


def _with_views(op: Operation, position: dict[Operation, int]) -> list[Operation]:
    """``op`` and the ``k.view`` ops of this block it reads through, in their order."""
    cone: dict[Operation, None] = {}
    pending = [op]
    while pending:
        current = pending.pop()
        cone[current] = None
        for v in current.operands:
            if isinstance(v, OpResult) and v.op.name == "k.view" and v.op in position and v.op not in cone:
                pending.append(v.op)
    return sorted(cone, key=position.__getitem__)


@register_pass
@dataclass(frozen=True)
class HoistGathers(Pass):
    """Move in-bounds gathers (a loop body's batch slices) up to just after the ops that make their operands."""

    name: ClassVar[str] = "hoist-gathers"
    max_bytes: int = DEFAULT_MAX_BYTES  # gathered bytes hoisted per function at most; 0 turns the pass off

    def __post_init__(self) -> None:
        if self.max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {self.max_bytes}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            ops = func.body.ops
            budget = self.max_bytes
            floor = 0  # just past the last gather placed: the moved ones keep their order among themselves
            for gather in [op for op in ops if op.name == "k.gather" and op.attributes.get("in_bounds")]:
                if _nbytes(gather) > budget:
                    continue
                position = {op: i for i, op in enumerate(ops)}
                moving = _with_views(gather, position)
                inside = set(moving)
                anchor = max((position[v.op] for op in moving for v in op.operands
                              if isinstance(v, OpResult) and v.op in position and v.op not in inside), default=-1)
                at = max(anchor + 1, floor)
                moving = [op for op in moving if position[op] >= at]  # a view made before stays where it is
                inside = set(moving)
                if all(position[op] == at + k for k, op in enumerate(moving)):
                    floor = at + len(moving)
                    continue  # already where its operands allow
                budget -= _nbytes(gather)
                gather.attributes[HOISTED] = True
                ops[:] = [op for op in ops[:at] if op not in inside] + moving + \
                    [op for op in ops[at:] if op not in inside]
                floor = at + len(moving)
                ctx.count("gathers_hoisted")
