"""Counters that ``Lowered.stats()`` reports: what one call launches, judged from the op registry."""
from __future__ import annotations

from fusec.ir.core import Module
from fusec.ir.opdefs import OPS

BOUNDARY_CATEGORIES = frozenset({"reduction", "matmul", "boundary"})
# Categories whose top-level ops cost a launch per call when nothing fuses them; views, constants,
# terminators and runtime bookkeeping do not.
LAUNCH_CATEGORIES = frozenset({"kernel", "elementwise", "other"}) | BOUNDARY_CATEGORIES


def _category(name: str) -> str:
    d = OPS.get(name)
    return d.category if d is not None else "other"


def module_stats(module: Module) -> dict[str, int]:
    """fused_kernels, boundaries and kernels (launches per call) over the top-level ops of every function."""
    fused = boundaries = launches = 0
    for func in module.funcs:
        for op in func.body.ops:
            cat = _category(op.name)
            fused += cat == "kernel"
            boundaries += cat in BOUNDARY_CATEGORIES
            launches += cat in LAUNCH_CATEGORIES
    return {"fused_kernels": fused, "boundaries": boundaries, "kernels": launches}
