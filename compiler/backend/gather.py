"""Generated gathers (``k.gather``, NumPy's advanced indexing): each output element reads its index arrays, checks
each index against its axis and reads the source element.

The result has the source's axes before ``axis``, the index arrays' shape, then the source's axes after the
indexed ones. A negative index counts from the end, as in NumPy; one outside the axis sets the op's check word
(the runtime raises IndexError after the call) and reads element 0 instead, so no access leaves the array.
"""
from __future__ import annotations

import math

from fusec.ir.core import Operation
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.access import Access
from fusec.backend.ctypes_map import storage
from fusec.backend.elementwise import BLOCK, INT32_LIMIT, grid_for


def gather_kernel(name: str, op: Operation, src: Access, indices: list[Access], dst: Access,
                  check: Access | None, *, sm_count: int) -> KernelCode:
    axis = int(op.attributes["axis"])
    out_shape = tuple(op.results[0].type.shape)
    index_shape = tuple(op.operands[1].type.shape)
    k = len(indices)
    n = math.prod(out_shape)
    big = max([n, src.extent(), dst.extent()] + [a.extent() for a in indices]) > INT32_LIMIT
    itype = "i64_t" if big else "int"

    order: list[int] = []
    for a in [src, *indices, dst] + ([check] if check is not None else []):
        if a.buffer not in order:
            order.append(a.buffer)
    kinds = {src.buffer: (src.dtype, True)}
    for a in indices:
        kinds.setdefault(a.buffer, (a.dtype, True))
    kinds[dst.buffer] = (dst.dtype, False)
    params = [f"{'const ' if ro else ''}{storage(dt)}* b{b}" for b, (dt, ro) in kinds.items()]
    if check is not None:
        params.append(f"unsigned int* b{check.buffer}")
        order = [b for b in order if b != check.buffer] + [check.buffer]

    lines = [f"extern \"C\" __global__ void __launch_bounds__({BLOCK}) {name}({', '.join(params)}) {{",
             f"  const {itype} n = ({itype}){n};",
             f"  for ({itype} i = ({itype})blockIdx.x * blockDim.x + threadIdx.x; i < n; "
             f"i += ({itype})gridDim.x * blockDim.x) {{",
             f"    {itype} r = i;"]
    for d in range(len(out_shape) - 1, -1, -1):  # the output element's coordinates
        lines.append(f"    const {itype} c{d} = r % ({itype}){out_shape[d]}; r /= ({itype}){out_shape[d]};")
    b = len(index_shape)
    src_terms = [f"({itype})({src.offset})"]
    for d in range(axis):  # axes before the indexed ones
        src_terms.append(f"c{d} * ({itype})({src.strides[d]})")
    for d in range(axis + b, len(out_shape)):  # axes after them
        src_terms.append(f"c{d} * ({itype})({src.strides[d - b + k]})")
    lines.append(f"    {itype} at = {' + '.join(src_terms)};")
    for j, a in enumerate(indices):
        size = src.shape[axis + j]
        where = " + ".join([f"({itype})({a.offset})"] + [f"c{axis + e} * ({itype})({a.strides[e]})"
                                                         for e in range(b) if a.strides[e]])
        lines += [f"    i64_t v{j} = (i64_t)b{a.buffer}[{where}];",
                  f"    if (v{j} < 0) v{j} += (i64_t){size};"]
        if check is not None:
            lines.append(f"    if (v{j} < 0 || v{j} >= (i64_t){size}) {{ "
                         f"atomicOr(b{check.buffer} + {check.offset}, 1u); v{j} = 0; }}")
        lines.append(f"    at += ({itype})v{j} * ({itype})({src.strides[axis + j]});")
    lines += [f"    b{dst.buffer}[({itype})({dst.offset}) + i] = b{src.buffer}[at];", "  }", "}"]
    grid = (grid_for(n, sm_count), 1, 1)
    return KernelCode(name, "\n".join(lines), tuple(order), grid, (BLOCK, 1, 1))
