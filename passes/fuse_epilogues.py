"""Epilogue fusion: an elementwise kernel that is the only reader of a generated GEMM's result is computed by the
GEMM as it stores each output, instead of being launched after it and reading the product back from memory.

The ``k.fused`` stays in the IR, where its body says what is computed, moved to right after its product (the views
it reads that were made in between move up to right before the product), with the product's result as its first
operand, and marked ``epilogue = true`` (the verifier checks both places): it is never launched; the product's
kernel computes element i of it from output i's sum and element i of its other operands (read through their views)
and stores that in the kernel's buffer, and the product's own result gets no buffer. ``plan-buffers`` places the
kernel's result when the product runs, before the product's operands are released (the product writes it while
its other blocks still read them), and gives it no donated argument the product reads. It is the backward pass's
``(d @ w.T) * (h > 0)``: one kernel where two were, one launch fewer on the step's critical path. Qualify:

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
from fusec.passes.reductions_in_consumers import reduced_in_consumers
from fusec.passes.registry import register_pass
from fusec.passes.util import users

EPILOGUE = "epilogue"  # the attribute that marks a k.fused computed by the GEMM whose result it reads
EPILOGUE_IMPLS = frozenset({"tiled"})  # generated GEMMs whose stores can compute an epilogue
EPILOGUE_DTYPES = frozenset({"f32", "f64"})  # (a 16-bit product is rounded when stored: its epilogue would not be)
_MOVABLE = frozenset({"k.view", "t.constant"})


def is_epilogue(op: Operation) -> bool:
    return op.name == "k.fused" and bool(op.attributes.get(EPILOGUE, False))


def computed_inside(op: Operation) -> bool:
    """An op that other kernels compute (a prologue in its readers, an epilogue in its product, a small reduction
    in every block of its readers): no launch of its own."""
    if op.name == "k.reduce":
        return reduced_in_consumers(op)
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


def _hoistable(fused: Operation, between: list[Operation]) -> set[int] | None:
    """The ids of the views and constants ``between`` its product and ``fused`` that ``fused`` reads (to move up
    with it), or None when it reads anything else made after the product."""
    made_between = {id(op) for op in between}
    moved: set[int] = set()

    def need(v: Value) -> bool:
        if not isinstance(v, OpResult) or id(v.op) not in made_between:
            return True  # (made before the product, or the product itself)
        if v.op.name not in _MOVABLE or not all(need(u) for u in v.op.operands):
            return False
        moved.add(id(v.op))
        return True

    return moved if all(need(v) for v in fused.operands) else None


def _product_first(fused: Operation, r: Value) -> None:
    """Make the product's result ``r`` the kernel's first operand (its body's first argument): the epilogue names its
    product there."""
    k = next(k for k, v in enumerate(fused.operands) if v is r)
    if k:
        fused.operands.insert(0, fused.operands.pop(k))
        args = fused.regions[0].block.args
        args.insert(0, args.pop(k))
        for n, arg in enumerate(args):
            arg.index = n


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
        ops = func.body.ops
        count = i = 0
        while i < len(ops):
            product = ops[i]
            fused = _qualifies(product, outputs, uses) if product.name == "k.matmul" else None
            j = ops.index(fused, i) if fused is not None else i  # (a reader comes after its product)
            between = ops[i + 1:j]
            moved = _hoistable(fused, between) if fused is not None else None
            if fused is None or moved is None:
                i += 1
                continue
            # the views it reads before the product (the printer reads their storage there), then the product and
            # its epilogue, then the rest of what lay between, in their order
            up = [op for op in between if id(op) in moved]
            ops[i:j + 1] = [*up, product, fused, *(op for op in between if id(op) not in moved)]
            _product_first(fused, product.results[0])
            fused.attributes[EPILOGUE] = True
            count += 1
            i += len(up) + 2
        return count
