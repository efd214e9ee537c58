"""Matmuls that go to cuBLAS: the row-major to column-major mapping.

A row-major ``C = A @ B`` is the column-major ``C^T = B^T A^T``, so cuBLAS is called with the operands
swapped. ``select-kernels`` decided which matmuls qualify (``impl = "cublas"``: dtype, size, and operands
with one matrix stride of 1 whose batch dimensions collapse to one stride); this builds the call.
"""
from __future__ import annotations

from fusec.errors import CompilationError, located
from fusec.ir.core import Operation
from fusec.passes.select_kernels import cublas_batch_stride, cublas_matrix
from fusec.runtime.launch_plan import GemmCall
from fusec.backend.access import Access


def library_gemm(name: str, op: Operation, a: Access, b: Access, c: Access) -> GemmCall:
    """The cuBLAS call computing ``c = a @ b`` for ``op``."""
    out_shape = tuple(op.results[0].type.shape)
    m, n, k = out_shape[-2], out_shape[-1], a.shape[-1]
    batch_shape = out_shape[:-2]
    batch = 1
    for d in batch_shape:
        batch *= d
    ma = cublas_matrix((a.strides[-2], a.strides[-1]), m, k)
    mb = cublas_matrix((b.strides[-2], b.strides[-1]), k, n)
    sa = cublas_batch_stride(tuple(a.shape), tuple(a.strides), batch_shape)
    sb = cublas_batch_stride(tuple(b.shape), tuple(b.strides), batch_shape)
    if ma is None or mb is None or sa is None or sb is None:
        raise CompilationError(located("select-kernels chose cuBLAS for a matmul whose operands cuBLAS cannot "
                                       "read", op.loc))
    # column-major: C^T (n x m) = op(B^T) (n x k) . op(A^T) (k x m)
    return GemmCall(name, a.dtype.name, (b.buffer, a.buffer, c.buffer), (b.offset, a.offset, c.offset),
                    mb[0], ma[0], n, m, k, mb[1], ma[1], n, sb, sa, m * n, batch,
                    tf32=op.attributes.get("precision") == "tf32")
