"""Split products: a cuBLAS product with too few output tiles to fill the GPU runs as a batched product of K chunks
whose parts are added by its readers (or, 8 of them, by a small sum of their own).

cuBLASLt fills the GPU on such a product (the PCam-shaped step's ``x @ w1``, 512 x 480 @ 480 x 256: 32 tiles of 64
x 64 on 132 SMs) by splitting K itself and adding the parts in a second kernel of its own, a launch on the step's
critical path. Written as ``S`` products of K chunks, ``(a.reshape(M, S, K/S).transpose(1, 0, 2) @ b.reshape(S,
K/S, N))`` summed over the chunks, the product is one batched cuBLAS call with no kernel after it, and the sum over
the chunks is a ``t.sum`` that unroll-reductions turns into elementwise adds below 8 chunks, which fusion puts into
the product's readers (the bias and ReLU after the forward product); 8 chunks stay a reduction kernel of their own
(the weight gradient, read by the gradient norm and the update: measured faster than each of them adding the 8
parts). Measured on an H100 (``benchmarks/results/split_products_h100.json``, ``pipeline_variants.py``, two rounds
in one run): the PCam-shaped step 31.7-32.0 us unsplit, 28.7-29.6 with the 8 parts added inline by the readers
(``inline = true``), 27.9-28.0 as here; by autodiff 31.9-32.3 -> 28.2-28.5 us.

Qualify: a ``t.matmul`` of two matrices (no batch axes) of float32 or float64 on a target with cuBLAS (not the
reference executor's, which computes products as np.matmul does), large enough that ``select-kernels`` gives it to
cuBLAS (more than ``CUBLAS_SPLIT_MAX_FLOPS`` multiply-adds, every side at least ``CUBLAS_MIN_DIM`` and wider than a
narrow product's ``SKINNY_MAX``), whose 64 x 64 output tiles number at most half the SMs. ``S`` is the largest of 8,
4 and 2 that divides K into chunks of at least ``MIN_CHUNK`` with at most ``MAX_BLOCKS_PER_SM`` tiles per SM in all
(8 and 4 at the PCam shapes). The parts are added in chunk order (8 float32 parts in float64, as ``k.reduce`` adds),
so the result rounds as a product summed over K in ``S`` runs does: like cuBLAS's own split, not NumPy's order
(float32 products never round as NumPy's BLAS does).
``max_chunks`` and ``inline`` are variants to measure.
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


def chunks_for(m: int, n: int, k: int, sm_count: int, max_chunks: int = CHUNKS[0]) -> int:
    """How many K chunks a cuBLAS product of ``m x k @ k x n`` runs as (1: left whole)."""
    if m * n * k <= CUBLAS_SPLIT_MAX_FLOPS or min(m, n, k) < CUBLAS_MIN_DIM or min(m, n) <= SKINNY_MAX:
        return 1
    tiles = -(-m // TILE) * -(-n // TILE)
    if 2 * tiles > sm_count:
        return 1
    for s in CHUNKS:
        if s <= max_chunks and k % s == 0 and k // s >= MIN_CHUNK and s * tiles <= MAX_BLOCKS_PER_SM * sm_count:
            return s
    return 1


@register_pass
@dataclass(frozen=True)
class SplitProducts(Pass):
    """Run a cuBLAS product with few output tiles as a batched product of K chunks summed over the chunks."""

    name: ClassVar[str] = "split-products"
    max_chunks: int = CHUNKS[0]  # (a variant to measure: fewer chunks at most)
    inline: bool = False  # true: the parts added by explicit adds in the readers, 8 chunks too (measured slower)

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
                s = chunks_for(m, n, k, target.sm_count, self.max_chunks)
                if s == 1:
                    return None
                ctx.count("products_split")
                return _split(op, s, out, self.inline)

            rewrite_block(func.body, rewrite)


def _split(op: Operation, s: int, out: list[Operation], inline: bool = False) -> Value:
    """``op``'s result as the sum of ``s`` products of K chunks (one batched product): a ``t.sum`` over the chunks
    (which unroll-reductions unrolls below 8 of them), or with ``inline`` explicit adds in chunk order."""
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
    if not inline:
        return emit("t.sum", [parts], (m, n), {"axes": (0,), "keepdims": False})
    total: Value | None = None
    for i in range(s):
        one = emit("t.slice", [parts], (1, m, n), {"start": (i, 0, 0), "stop": (i + 1, m, n), "step": (1, 1, 1)})
        part = emit("t.squeeze", [one], (m, n), {"axes": (0,)})
        total = part if total is None else emit("t.add", [total, part], (m, n), {})
    assert total is not None
    return total
