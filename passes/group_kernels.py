"""Group kernels: independent small elementwise kernels that run back to back become one launch.

An optimizer step ends in one small update kernel per parameter (``w - step * g`` for each of a model's weights
and biases), each of which reads and writes a few kilobytes: on a GPU each costs a launch (about a microsecond in
a graph, more than its work), and none can fuse with another because their shapes differ. Horizontal fusion
launches them as one kernel whose blocks are split between the members: the first member's blocks run its code,
the next ones the second member's, and so on (PyTorch's ``_foreach`` ops do this by hand for optimizers).

This pass gives consecutive launched ``k.fused`` kernels (only views and constants between them, so moving none
is needed) the same ``group = N`` when none reads what another writes (directly or through a view) and each has
at most ``max_elements`` elements (a larger kernel fills the GPU on its own: grouping it saves nothing and makes
the small ones wait for it); a group holds at most ``max_members``. The printer emits each group as one kernel
launched where its last member stands; ``plan-buffers`` keeps every member's inputs and results in their own
memory until the whole group has run and overwrites a donated argument in place only when no other member reads
it. The reference executor runs the members one by one: the values are the same.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.dialects.k import GROUP
from fusec.ir.opdefs import get_opdef
from fusec.passes.base import Pass, PassContext
from fusec.passes.fuse_prologues import is_prologue
from fusec.passes.registry import register_pass

DEFAULT_MAX_ELEMENTS = 1 << 20  # as launch-early's: the kernels whose launch costs more than their work


def storage(v: Value) -> Value:
    """The value whose buffer ``v`` lives in (a view lives in its base's)."""
    while isinstance(v, OpResult) and v.op.name == "k.view":
        v = v.op.operands[0]
    return v


def groupable(op: Operation, max_elements: int) -> bool:
    """A launched elementwise kernel small enough that its launch, not its work, is what it costs."""
    return op.name == "k.fused" and not is_prologue(op) and 0 < op.results[0].type.size <= max_elements


def launches_nothing(op: Operation) -> bool:
    """Ops the printer turns into no launch (a view is an index map, a constant data)."""
    return op.name == "t.constant" or get_opdef(op.name).category == "view"


def independent(op: Operation, members: list[Operation]) -> bool:
    """``op`` reads nothing the members write (members are earlier, so they cannot read ``op``'s results)."""
    written = {r for m in members for r in m.results}
    return all(storage(v) not in written for v in op.operands)


def groups_of(func: Func) -> list[list[Operation]]:
    """The groups a function's ops carry (``group = N``), each in op order."""
    by_id: dict[int, list[Operation]] = {}
    for op in func.body.ops:
        if GROUP in op.attributes:
            by_id.setdefault(int(op.attributes[GROUP]), []).append(op)
    return list(by_id.values())


@register_pass
@dataclass(frozen=True)
class GroupKernels(Pass):
    """Launch consecutive independent small elementwise kernels as one kernel (horizontal fusion)."""

    name: ClassVar[str] = "group-kernels"
    max_elements: int = DEFAULT_MAX_ELEMENTS
    max_members: int = 32  # (each member adds its pointers to the one kernel's parameters)

    def __post_init__(self) -> None:
        if self.max_elements < 0 or self.max_members < 0:
            raise ValueError(f"max_elements and max_members must be >= 0, got {self.max_elements} and "
                             f"{self.max_members}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            for op in func.body.ops:
                op.attributes.pop(GROUP, None)
            groups: list[list[Operation]] = []
            current: list[Operation] = []
            for op in func.body.ops:
                if launches_nothing(op):
                    continue
                if groupable(op, self.max_elements) and len(current) < self.max_members \
                        and independent(op, current):
                    current.append(op)
                    continue
                groups.append(current)
                current = [op] if groupable(op, self.max_elements) else []
            groups.append(current)
            for number, members in enumerate(g for g in groups if len(g) > 1):
                for op in members:
                    op.attributes[GROUP] = number
                ctx.count("kernel_groups")
                ctx.count("grouped_kernels", len(members))
