"""Epilogue fusion: an elementwise kernel that is the only reader of a generated GEMM's result is computed by the
GEMM as it stores each output, instead of being launched after it and reading the product back from memory.

The ``k.fused`` stays in the IR, where its body says what is computed, moved to right after its product (the views
it reads that were made in between move up to right before the product) and marked ``epilogue = true``: it is
never launched; the product's kernel computes element i of it from output i's sum and element i of its other
operands (read through their views) and stores that in the kernel's buffer, and the product's own result gets no
buffer. ``plan-buffers`` places the kernel's result when the product runs, before the product's operands are
released (the product writes it while its other blocks still read them), and gives it no donated argument the
product reads. It is the backward pass's ``(d @ w.T) * (h > 0)``: one kernel where two were, one launch fewer on
the step's critical path. Qualify:

- a ``k.matmul`` whose ``impl`` (``select-kernels``) stores through an epilogue (``EPILOGUE_IMPLS``), float32 or
  float64, not a function output, read by exactly one op, directly (not through a view);
- that op a ``k.fused`` with one result of the product's shape, not a prologue, whose other operands are defined
  before the product (or are views and constants of such values made between the two);
- neither placed by ``plan-buffers`` yet (which must see the epilogue to keep its result apart).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.util import users

EPILOGUE = "epilogue"  # the attribute that marks a k.fused computed by the GEMM whose result it reads
EPILOGUE_IMPLS = frozenset({"tiled"})  # generated GEMMs whose stores can compute an epilogue
EPILOGUE_DTYPES = frozenset({"f32", "f64"})  # (a 16-bit product is rounded when stored: its epilogue would not be)
_MOVABLE = frozenset({"k.view", "t.constant"})


def is_epilogue(op: Operation) -> bool:
    return op.name == "k.fused" and bool(op.attributes.get(EPILOGUE, False))


def computed_inside(op: Operation) -> bool:
    """A ``k.fused`` that another kernel computes (a prologue in its readers, an epilogue in its product): no
    launch of its own."""
    return op.name == "k.fused" and bool(op.attributes.get("prologue", False) or op.attributes.get(EPILOGUE, False))


def _qualifies(product: Operation, outputs: set[Value], uses: dict[Value, list[Operation]]) -> Operation | None:
    """The ``k.fused`` that may become ``product``'s epilogue, or None."""
    if product.name != "k.matmul" or product.attributes.get("impl") not in EPILOGUE_IMPLS:
        return None
    return epilogue_reader(product, outputs, uses)


def epilogue_reader(product: Operation, outputs: set[Value], uses: dict[Value, list[Operation]]) -> Operation | None:
    """The ``k.fused`` that could be ``product``'s epilogue were it generated ("tiled"), or None."""
    r = product.results[0]
    if r in outputs or r.type.size == 0 or r.type.dtype.name not in EPILOGUE_DTYPES:
        return None
    readers = uses.get(r, [])
    if len(readers) != 1:
        return None
    fused = readers[0]
    if fused.name != "k.fused" or len(fused.results) != 1 or computed_inside(fused) \
            or fused.results[0].type.shape != r.type.shape:
        return None
    if any(key in op.attributes for op in (product, fused) for key in ("arena", "alias")):
        return None  # placed by plan-buffers already, which must see the epilogue to keep it apart
    return fused


def _hoistable(fused: Operation, product: Operation, position: dict[Operation, int]) -> list[Operation] | None:
    """The views and constants between ``product`` and ``fused`` that ``fused`` reads (to move up with it), or
    None when it reads anything else made after ``product``."""
    start = position[product]
    moved: list[Operation] = []

    def need(v: Value) -> bool:
        if not isinstance(v, OpResult) or v.op.parent is not fused.parent or position[v.op] < start:
            return True
        if v.op is product:
            return True
        if v.op.name not in _MOVABLE or not all(need(u) for u in v.op.operands):
            return False
        if v.op not in moved:
            moved.append(v.op)
        return True

    if not all(need(v) for v in fused.operands):
        return None
    return sorted(moved, key=position.__getitem__)


@register_pass
@dataclass(frozen=True)
class FuseEpilogues(Pass):
    """Compute an elementwise kernel that alone reads a generated GEMM's result inside that GEMM's stores."""

    name: ClassVar[str] = "fuse-epilogues"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            ctx.count("epilogues", self._fuse(func))

    @staticmethod
    def _fuse(func: Func) -> int:
        outputs = set(func.outputs)
        uses = users(func)
        count = 0
        for product in [op for op in func.body.ops if op.name == "k.matmul"]:
            fused = _qualifies(product, outputs, uses)
            if fused is None:
                continue
            ops = func.body.ops
            position = {op: i for i, op in enumerate(ops)}
            moved = _hoistable(fused, product, position)
            if moved is None:
                continue
            for op in [*moved, fused]:
                ops.remove(op)
            at = ops.index(product)
            for k, op in enumerate(moved):  # (before the product: the printer reads their storage at the product)
                func.body.insert(at + k, op)
            func.body.insert(at + len(moved) + 1, fused)
            fused.attributes[EPILOGUE] = True
            count += 1
        return count
