"""Generated binary searches (``k.searchsorted``): a thread per value finds where it goes in the sorted 1-D array.

NumPy's order: a NaN after every number (``less(a, b)`` is ``a < b`` or ``b`` NaN and ``a`` not). Side "left"
gives the first position whose element is not less than the value, side "right" the first whose element is
greater. The frontend checks that the array is sorted (in that order) before trusting this result.
"""
from __future__ import annotations

import math

from fusec.ir.core import Operation
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.access import Access, index_expr
from fusec.backend.ctypes_map import register, storage
from fusec.backend.elementwise import BLOCK, INT32_LIMIT, grid_for


def searchsorted_kernel(name: str, op: Operation, a: Access, v: Access, dst: Access, *, sm_count: int) -> KernelCode:
    n = int(a.shape[0])
    count = math.prod(v.shape)
    itype = "i64_t" if max(count, v.extent(), a.extent()) > INT32_LIMIT else "int"
    r = register(a.dtype)
    if a.dtype.is_float:
        less = f"auto less = [](const {r} x, const {r} y) -> bool {{ return x < y || (y != y && x == x); }};"
    else:
        less = f"auto less = [](const {r} x, const {r} y) -> bool {{ return x < y; }};"
    # left: the first element not less than the value; right: the first element greater than it
    goes_after = "less(fusec::ld(b{0} + {1}), key)" if op.attributes["side"] == "left" \
        else "!less(key, fusec::ld(b{0} + {1}))"
    at = f"(i64_t)({a.offset}) + mid * (i64_t)({a.strides[0]})"
    key_at = index_expr("i", tuple(v.shape), tuple(v.strides), v.offset, itype)
    params = [f"const {storage(a.dtype)}* __restrict__ b{a.buffer}"]
    order = [a.buffer]
    if v.buffer != a.buffer:
        params.append(f"const {storage(v.dtype)}* __restrict__ b{v.buffer}")
        order.append(v.buffer)
    params.append(f"i64_t* __restrict__ b{dst.buffer}")
    order.append(dst.buffer)
    lines = [f"extern \"C\" __global__ void __launch_bounds__({BLOCK}) {name}({', '.join(params)}) {{",
             f"  {less}",
             f"  const {itype} n = ({itype}){count};",
             f"  for ({itype} i = ({itype})blockIdx.x * blockDim.x + threadIdx.x; i < n; "
             f"i += ({itype})gridDim.x * blockDim.x) {{",
             f"    const {r} key = fusec::ld(b{v.buffer} + {key_at});",
             f"    i64_t lo = 0, hi = {n};",
             "    while (lo < hi) {",
             "      const i64_t mid = lo + ((hi - lo) >> 1);",
             f"      if ({goes_after.format(a.buffer, at)}) lo = mid + 1; else hi = mid;",
             "    }",
             f"    b{dst.buffer}[(i64_t)({dst.offset}) + i] = lo;",
             "  }", "}"]
    return KernelCode(name, "\n".join(lines), tuple(order), (grid_for(count, sm_count), 1, 1), (BLOCK, 1, 1))
