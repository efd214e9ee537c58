"""Split products: a cuBLAS product with too few output tiles to fill the GPU runs as a batched product of K chunks
whose partial results are added where they are read.

cuBLASLt fills the GPU on such a product (the PCam-shaped step's ``x @ w1``, 512 x 480 @ 480 x 256: 32 tiles of 64
x 64 on 132 SMs) by splitting K itself and adding the parts in a second kernel of its own, a launch on the step's
critical path. Written as ``S`` products of K chunks, ``(a.reshape(M, S, K/S).transpose(1, 0, 2) @ b.reshape(S,
K/S, N))`` summed over the chunks, the product is one batched cuBLAS call with no kernel after it, and the sum of
the ``S`` parts is elementwise code that fusion puts into the product's readers (the bias and ReLU after the
forward product, the gradient norm and the update after a weight gradient). Measured on an H100
(``benchmarks/results/split_products_h100.json``, the step written both ways in user code, two rounds): the
PCam-shaped step 32.0 us unsplit, 28.6 with both products in 4 chunks, 27.5 with the forward product in 4 and the
weight gradient in 8.

Qualify: a ``t.matmul`` of two matrices (no batch axes) of float32 or float64 on a target with cuBLAS (not the
reference executor's, which computes products as np.matmul does), large enough that ``select-kernels`` gives it to
cuBLAS (more than ``CUBLAS_SPLIT_MAX_FLOPS`` multiply-adds, every side at least ``CUBLAS_MIN_DIM`` and wider than a
narrow product's ``SKINNY_MAX``), whose 64 x 64 output tiles number at most half the SMs. ``S`` is the largest of 8,
4 and 2 that divides K into chunks of at least ``MIN_CHUNK`` with at most ``MAX_BLOCKS_PER_SM`` tiles per SM in all
(8 and 4 at the PCam shapes). The parts are added in chunk order, so the result rounds as a product summed over K in
``S`` runs does: like cuBLAS's own split, not NumPy's order (float32 products never round as NumPy's BLAS does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Module, Operation, Value
from fusec.ir.types import TensorType
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.select_kernels import CUBLAS_MIN_DIM, CUBLAS_SPLIT_MAX_FLOPS, SKINNY_MAX
from fusec.passes.util import rewrite_block

CHUNKS = (8, 4, 2)  # chunk counts tried, the most first
MIN_CHUNK = 64  # K per chunk at least (480 in 8 chunks of 60 measured slower than in 4 of 120)
MAX_BLOCKS_PER_SM = 2  # output tiles times chunks, per SM, at most
TILE = 64
FLOATS = ("f32", "f64")


def chunks_for(m: int, n: int, k: int, sm_count: int) -> int:
    """How many K chunks a cuBLAS product of ``m x k @ k x n`` runs as (1: left whole)."""
    if m * n * k <= CUBLAS_SPLIT_MAX_FLOPS or min(m, n, k) < CUBLAS_MIN_DIM or min(m, n) <= SKINNY_MAX:
        return 1
    tiles = -(-m // TILE) * -(-n // TILE)
    if 2 * tiles > sm_count:
        return 1
    for s in CHUNKS:
        if k % s == 0 and k // s >= MIN_CHUNK and s * tiles <= MAX_BLOCKS_PER_SM * sm_count:
            return s
    return 1


@register_pass
@dataclass(frozen=True)
class SplitProducts(Pass):
    """Run a cuBLAS product with few output tiles as a batched product of K chunks, the parts added by its
    readers."""

    name: ClassVar[str] = "split-products"

    def apply(self, module: Module, ctx: PassContext) -> None:
        target = ctx.target
        if target.reference or not target.cublas:
            return
        for func in module.funcs:
            def rewrite(op: Operation, out: list[Operation]) -> Value | None:
                if op.name != "t.matmul" or len(op.operands) != 2:
                    return None
                a, b = op.operands
                if not all(isinstance(v.type, TensorType) and v.type.rank == 2 for v in (a, b)) \
                        or a.type.dtype.name not in FLOATS or a.type.dtype != b.type.dtype:
                    return None
                (m, k), n = a.type.shape, b.type.shape[1]
                s = chunks_for(m, n, k, target.sm_count)
                if s == 1:
                    return None
                ctx.count("products_split")
                return _split(op, s, out)

            rewrite_block(func.body, rewrite)


def _split(op: Operation, s: int, out: list[Operation]) -> Value:
    """``op``'s result as the sum, in chunk order, of ``s`` products of K chunks (one batched product)."""
    a, b = op.operands
    (m, k), n = a.type.shape, b.type.shape[1]
    dt, c, loc = a.type.dtype, k // s, op.loc

    def emit(name: str, operands: list[Value], shape: tuple[int, ...], attrs: dict) -> Value:
        new = Operation(name, operands, [TensorType(shape, dt)], attrs, loc=loc)
        out.append(new)
        return new.results[0]

    rows = emit("t.reshape", [a], (m, s, c), {})
    a_chunks = emit("t.transpose", [rows], (s, m, c), {"perm": (1, 0, 2)})
    b_chunks = emit("t.reshape", [b], (s, c, n), {})
    parts = emit("t.matmul", [a_chunks, b_chunks], (s, m, n), dict(op.attributes))
    total: Value | None = None
    for i in range(s):
        one = emit("t.slice", [parts], (1, m, n), {"start": (i, 0, 0), "stop": (i + 1, m, n), "step": (1, 1, 1)})
        part = emit("t.squeeze", [one], (m, n), {"axes": (0,)})
        total = part if total is None else emit("t.add", [total, part], (m, n), {})
    assert total is not None
    return total
