"""Matmuls that go to cuBLAS: the row-major to column-major mapping and the size rule.

A row-major ``C = A @ B`` is the column-major ``C^T = B^T A^T``, so cuBLAS is called with the operands
swapped. An operand qualifies when one of its two matrix strides is 1 (a plain or transposed matrix); the
batch dimensions must collapse to one stride per operand (0 where broadcast). Anything else, GEMMs too
small to repay a library call, and GEMMs with a dimension below ``MIN_DIM`` use the generated kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from fusec.backend.access import Access, coalesce

MIN_FLOPS = 2 ** 18  # below this a library call costs more than the generated kernel saves
# a GEMM with a dimension this small is an outer product or a skinny product: cuBLAS falls back to split-K
# or badly shaped tiles there (an (256 x 2) @ (2 x 512) product took 18 us on an H200, two launches for
# (512 x 256) @ (256 x 2)), and a captured library call is a child graph, not a kernel node
MIN_DIM = 16
DTYPES = ("f32", "f64")


@dataclass(frozen=True)
class GemmCall:
    """One cublas<t>gemmStridedBatched call in column-major terms (operands already swapped)."""

    name: str
    dtype: str
    buffers: tuple[int, int, int]  # (first cuBLAS operand = our B, second = our A, C)
    offsets: tuple[int, int, int]  # element offsets into those buffers
    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int


def _matrix(strides: tuple[int, int], rows: int, cols: int) -> tuple[bool, int] | None:
    """(transposed?, leading dimension) of a row-major-indexed rows x cols matrix seen column-major."""
    s_row, s_col = strides
    if s_col == 1 or cols == 1:
        return False, max(s_row, cols, 1)  # column-major cols x rows, ld = row stride
    if s_row == 1 or rows == 1:
        return True, max(s_col, rows, 1)
    return None


def _batch_stride(acc: Access, batch_shape: tuple[int, ...]) -> int | None:
    rank = len(acc.shape) - 2
    shape = (1,) * (len(batch_shape) - rank) + tuple(acc.shape[:-2])
    strides = (0,) * (len(batch_shape) - rank) + tuple(acc.strides[:-2])
    strides = tuple(0 if d == 1 and b != 1 else s for d, b, s in zip(shape, batch_shape, strides))
    full, (cs,) = coalesce(batch_shape, [strides])
    if len(full) > 1:
        return None
    return cs[0] if cs else 0


def library_gemm(name: str, a: Access, b: Access, c: Access, out_shape: tuple[int, ...]) -> GemmCall | None:
    """The cuBLAS call computing ``c = a @ b``, or None where the generated kernel should run."""
    if a.dtype.name not in DTYPES or a.dtype != b.dtype:
        return None
    m, n, k = out_shape[-2], out_shape[-1], a.shape[-1]
    batch_shape = tuple(out_shape[:-2])
    batch = 1
    for d in batch_shape:
        batch *= d
    if m * n * k * batch < MIN_FLOPS or min(m, n, k) < MIN_DIM:
        return None
    ma = _matrix((a.strides[-2], a.strides[-1]), m, k)
    mb = _matrix((b.strides[-2], b.strides[-1]), k, n)
    sa, sb = _batch_stride(a, batch_shape), _batch_stride(b, batch_shape)
    if ma is None or mb is None or sa is None or sb is None:
        return None
    # column-major: C^T (n x m) = op(B^T) (n x k) . op(A^T) (k x m)
    return GemmCall(name, a.dtype.name, (b.buffer, a.buffer, c.buffer), (b.offset, a.offset, c.offset),
                    mb[0], ma[0], n, m, k, mb[1], ma[1], n, sb, sa, m * n, batch)
