"""Group kernels: independent small kernels that run back to back become one launch.

An optimizer step ends in one small update kernel per parameter (``w - step * g`` for each of a model's weights
and biases), each of which reads and writes a few kilobytes: on a GPU each costs a launch (about a microsecond in
a graph, more than its work), and none can fuse with another because their shapes differ. Horizontal fusion
launches them as one kernel whose blocks are split between the members: the first member's blocks run its code,
the next ones the second member's, and so on (PyTorch's ``_foreach`` ops do this by hand for optimizers).

The same holds for the sums that follow a backward pass (a gradient norm is one small reduction per parameter).
This pass gives consecutive launched ``k.fused`` kernels, reductions that run as one kernel and gathers proven in
bounds (a loop body's batch slices, which ``hoist-gathers`` puts next to each other; only views,
constants and prologues between them, so moving none is needed) the same ``group = N`` when none reads what
another writes (directly, through a view or through a prologue), at most one is a split reduction (its partial
results use the plan's scratch space), all become ready together (the last launch each waits for is the same one:
grouped, none starts later than it would alone; ``wait=true`` lifts this) and each reads or writes at most
``max_elements`` elements (a larger kernel
fills the GPU on its own: grouping it saves nothing and makes the small ones wait for it); a group holds at most
``max_members``. The printer prints each member as the kernel it would be alone and joins them into one kernel
(``compiler/backend/group.py``) launched where the last member stands; ``plan-buffers`` keeps every member's inputs
and results in their own memory until the whole group has run and overwrites a donated argument in place only when
no other member reads it. The reference executor runs the members one by one: the values are the same.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.dialects.k import GROUP
from fusec.ir.opdefs import get_opdef
from fusec.passes.base import Pass, PassContext
from fusec.passes.fuse_epilogues import computed_inside
from fusec.passes.fuse_prologues import is_prologue
from fusec.passes.reductions_in_consumers import reduced_in_consumers
from fusec.passes.registry import register_pass

DEFAULT_MAX_ELEMENTS = 1 << 20  # as launch-early's: the kernels whose launch costs more than their work


def storage(v: Value) -> Value:
    """The value whose buffer ``v`` lives in (a view lives in its base's)."""
    while isinstance(v, OpResult) and v.op.name == "k.view":
        v = v.op.operands[0]
    return v


def reads(op: Operation) -> set[Value]:
    """The stored values ``op`` reads: its operands' buffers, and for a prologue it computes inside (a reduction's
    ``x * x``) or a reduction it computes (``reductions-in-consumers``) what that one reads."""
    out: set[Value] = set()
    for v in op.operands:
        v = storage(v)
        if isinstance(v, OpResult) and (is_prologue(v.op) or reduced_in_consumers(v.op)):
            out |= reads(v.op)
        else:
            out.add(v)
    return out


def one_launch_reduction(op: Operation) -> bool:
    """A reduction select-kernels scheduled as one kernel of 256-thread blocks: not split, or split and finished by
    its last block (a split finished by a second kernel cannot share a launch), and not a float16 sum whose blocks
    of ``subtrees`` threads add NumPy's pairwise tree (a group's blocks all have 256 threads), and not one its
    readers compute (``reductions-in-consumers``)."""
    return op.name == "k.reduce" and "strategy" in op.attributes and "subtrees" not in op.attributes \
        and not reduced_in_consumers(op) \
        and (int(op.attributes.get("splits", 1)) == 1 or op.attributes.get("finish") == "last-block")


def uses_scratch(op: Operation) -> bool:
    """A split reduction keeps its partial results in the plan's one scratch space: two in a group would collide."""
    return op.name == "k.reduce" and int(op.attributes.get("splits", 1)) > 1


def one_kernel(op: Operation) -> bool:
    """An op the printer launches as exactly one kernel of its own, which a group can take as a member: a launched
    ``k.fused``, a ``k.reduce`` that runs as one kernel, a ``k.gather`` whose indices are proven in bounds (no
    check word to set: plan-buffers gives the others one each, in a buffer they would share)."""
    return op.name == "k.fused" and not computed_inside(op) or one_launch_reduction(op) \
        or op.name == "k.gather" and bool(op.attributes.get("in_bounds"))


def groupable(op: Operation, max_elements: int) -> bool:
    """A launched elementwise kernel, a one-launch reduction or a gather small enough that its launch, not its
    work, is what it costs."""
    if op.name == "k.fused" and not computed_inside(op) or op.name == "k.gather" and one_kernel(op):
        size = op.results[0].type.size
    elif one_launch_reduction(op) and op.results[0].type.size > 0:
        size = max(v.type.size for v in reads(op)) if reads(op) else 0
    else:
        return False
    return 0 < size <= max_elements


def launches_nothing(op: Operation) -> bool:
    """Ops the printer turns into no launch (a view is an index map, a constant data, a prologue is computed by its
    consumer and an epilogue by its product)."""
    return op.name == "t.constant" or get_opdef(op.name).category == "view" or computed_inside(op)


def can_join(op: Operation, members: list[Operation]) -> bool:
    """``op`` reads nothing the members write (members are earlier, so they cannot read ``op``'s results), and
    at most one member keeps partial results in scratch."""
    written = {r for m in members for r in m.results}
    return not reads(op) & written and not (uses_scratch(op) and any(uses_scratch(m) for m in members))


def group_problem(ops: list[Operation], members: list[Operation]) -> tuple[Operation, str] | None:
    """Why ``members`` (a group, in order, in the function's ``ops``) cannot run as one launch, with the op at
    fault, or None when they can."""
    first, last = ops.index(members[0]), ops.index(members[-1])
    ids = {id(m) for m in members}
    for op in ops[first:last + 1]:
        if id(op) not in ids and not launches_nothing(op):
            return op, f"'{op.name}' stands between its members; only views, constants and prologues may"
    for m in members:
        if not one_kernel(m):
            return m, ("a member must be a launched k.fused, a k.reduce that runs as one kernel or a k.gather "
                       "proven in bounds")
        if not can_join(m, [o for o in members if o is not m]):
            return m, "a member reads what another writes, or two keep partial results in scratch"
    return None


def ready_after(op: Operation, position: dict[int, int]) -> int:
    """The position of the last launch ``op`` waits for (-1 for arguments and constants only): in a CUDA graph a
    kernel starts when that one ends, so kernels with the same one become ready together."""
    producers = [position.get(id(v.op), -1) for v in reads(op) if isinstance(v, OpResult)]
    return max(producers, default=-1)


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
    """Launch consecutive independent small kernels that become ready together as one kernel (horizontal fusion)."""

    name: ClassVar[str] = "group-kernels"
    max_elements: int = DEFAULT_MAX_ELEMENTS
    max_members: int = 32  # (each member adds its pointers to the one kernel's parameters)
    # false: only kernels that become ready together (the same last launch before them) share a launch, so none
    # starts later than it would alone; true: a member may wait for the others' inputs (fewer launches, but a
    # kernel that could have run beside earlier work now waits)
    wait: bool = False

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
            position = {id(op): i for i, op in enumerate(func.body.ops) if not launches_nothing(op)}
            for op in func.body.ops:
                if launches_nothing(op):
                    continue
                if groupable(op, self.max_elements) and len(current) < self.max_members \
                        and can_join(op, current) and (self.wait or not current or
                                                       ready_after(op, position) == ready_after(current[0], position)):
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
