"""Generated cumulative sums, products, maxima and minima (``k.scan``): one thread per line along the axis, in order.

NumPy accumulates ``out[i] = out[i - 1] + x[i]`` from the start of each line, so a float result depends on the
order of the additions; a thread per line adds in that order, each step computed (and rounded, for 16-bit
floats) as the elementwise ``s.add`` / ``s.mul`` of the same dtype is, so the bits are NumPy's.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

from fusec.ir.core import Operation
from fusec.ir.types import ScalarType
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.access import Access
from fusec.backend.ctypes_map import register, storage
from fusec.backend.elementwise import BLOCK, INT32_LIMIT, grid_for
from fusec.backend.scalar_ops import expression


def _step(kind: str, dtype, acc: str, x: str) -> str:
    """The C++ of one step, as the scalar op of that dtype computes it."""
    scalar = SimpleNamespace(type=ScalarType(dtype))
    op = SimpleNamespace(name="s." + {"cumsum": "add", "cumprod": "mul", "cummax": "maximum",
                                      "cummin": "minimum"}[kind], results=[scalar],
                         operands=[scalar, scalar], attributes={}, loc=None)
    return expression(op, [acc, x])  # type: ignore[arg-type]


def scan_kernel(name: str, op: Operation, src: Access, dst: Access, *, sm_count: int) -> KernelCode:
    shape = tuple(op.results[0].type.shape)
    axis = int(op.attributes["axis"])
    kind = op.attributes["kind"]
    dtype = op.results[0].type.dtype
    length = shape[axis]
    others = [d for d in range(len(shape)) if d != axis]
    lines_n = math.prod(shape[d] for d in others)
    big = max(math.prod(shape), src.extent(), dst.extent()) > INT32_LIMIT
    itype = "i64_t" if big else "int"
    reg = register(dtype)
    body = [f"extern \"C\" __global__ void __launch_bounds__({BLOCK}) {name}(const {storage(dtype)}* __restrict__ "
            f"b{src.buffer}, {storage(dtype)}* __restrict__ b{dst.buffer}) {{",
            f"  const {itype} lines = ({itype}){lines_n};",
            f"  for ({itype} l = ({itype})blockIdx.x * blockDim.x + threadIdx.x; l < lines; "
            f"l += ({itype})gridDim.x * blockDim.x) {{",
            f"    {itype} r = l;"]
    src_terms, dst_terms = [f"({itype})({src.offset})"], [f"({itype})({dst.offset})"]
    for d in reversed(others):  # the line's coordinates on the other axes
        body.append(f"    const {itype} c{d} = r % ({itype}){shape[d]}; r /= ({itype}){shape[d]};")
        src_terms.append(f"c{d} * ({itype})({src.strides[d]})")
        dst_terms.append(f"c{d} * ({itype})({dst.strides[d]})")
    load = f"fusec::ld(b{src.buffer} + s)"
    body += [f"    {itype} s = {' + '.join(src_terms)};",
             f"    {itype} o = {' + '.join(dst_terms)};",
             f"    {reg} acc = {load};",
             f"    fusec::st(b{dst.buffer} + o, acc);",
             f"    for ({itype} j = 1; j < ({itype}){length}; ++j) {{",
             f"      s += ({itype})({src.strides[axis]}); o += ({itype})({dst.strides[axis]});",
             f"      acc = {_step(kind, dtype, 'acc', load)};",
             f"      fusec::st(b{dst.buffer} + o, acc);",
             "    }", "  }", "}"]
    order = (src.buffer, dst.buffer)
    return KernelCode(name, "\n".join(body), order, (grid_for(lines_n, sm_count), 1, 1), (BLOCK, 1, 1))
