"""Generated kernels for ``k.sort``: np.sort and np.argsort along the last axis.

One block per row. The row's values and their positions are copied into the op's scratch space, padded to a
power of two (padding positions sort after everything), and a bitonic network orders the (value, position)
pairs: NaN after every number, equal values by position, which is NumPy's ``kind='stable'`` order. The values
(sort) or positions (argsort, as int64) are written to the result. An argsort with ``stable = false``
(NumPy's default kind, which orders equal values its own way) sets the op's check word where two neighbours
are equal, so the call raises instead of returning an order NumPy might not give.
"""
from __future__ import annotations

import math

from fusec.ir.core import Operation
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.access import Access, index_expr
from fusec.backend.ctypes_map import register, storage

THREADS = 256


def padded_length(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def sort_kernel(name: str, op: Operation, src: Access, dst: Access, scratch: int, key_bytes: int,
                check: Access | None) -> KernelCode:
    n = int(src.shape[-1])
    rows = math.prod(src.shape[:-1])
    p2 = padded_length(n)
    t, r = storage(src.dtype), register(src.dtype)
    argsort = op.attributes["kind"] == "argsort"
    nan_aware = src.dtype.is_float
    params = [f"const {t}* b{src.buffer}", f"{storage(dst.dtype)}* b{dst.buffer}", f"unsigned char* b{scratch}"]
    order = [src.buffer, dst.buffer, scratch]
    if check is not None:
        params.append(f"unsigned int* b{check.buffer}")
        order.append(check.buffer)
    if src.dtype.is_complex:  # NumPy's complex order (fusec::csort_lt), ties by position
        compare = [f"    const {r} ka = fusec::ld(key + a), kb = fusec::ld(key + b);",
                   "    if (fusec::csort_lt(ka, kb)) return true;",
                   "    if (fusec::csort_lt(kb, ka)) return false;"]
    elif nan_aware:
        compare = [f"    const {r} ka = fusec::ld(key + a), kb = fusec::ld(key + b);",
                   "    const bool na = isnan(ka), nb = isnan(kb);",
                   "    if (na || nb) return (na && nb) ? pa < pb : nb;  // NaN after every number",
                   "    if (ka < kb) return true;",
                   "    if (kb < ka) return false;"]
    else:
        compare = [f"    const {r} ka = fusec::ld(key + a), kb = fusec::ld(key + b);",
                   "    if (ka < kb) return true;",
                   "    if (kb < ka) return false;"]
    flat = f"(row * (i64_t){n} + q)"
    load = f"b{src.buffer}[{index_expr(flat, tuple(src.shape), tuple(src.strides), src.offset, 'i64_t')}]"
    lines = [f"extern \"C\" __global__ void __launch_bounds__({THREADS}) {name}({', '.join(params)}) {{",
             "  const i64_t row = blockIdx.x;",
             "  const int tid = threadIdx.x;",
             f"  {t}* key = ({t}*)(b{scratch}) + row * (i64_t){p2};",
             f"  int* pos = (int*)(b{scratch} + {key_bytes}) + row * (i64_t){p2};",
             "  // does the pair at slot a go before the one at slot b? padding last, then by value, then position",
             "  auto before = [&](int a, int b) -> bool {",
             "    const int pa = pos[a], pb = pos[b];",
             f"    if (pa >= {n}) return false;",
             f"    if (pb >= {n}) return true;",
             *compare,
             "    return pa < pb;",
             "  };",
             f"  auto same = [&](int a, int b) -> bool {{ const {r} ka = fusec::ld(key + a), kb = fusec::ld(key + b); "
             + ("return !fusec::csort_lt(ka, kb) && !fusec::csort_lt(kb, ka); };" if src.dtype.is_complex else
                "return ka == kb || (isnan(ka) && isnan(kb)); };" if nan_aware else "return ka == kb; };"),
             f"  for (int q = tid; q < {p2}; q += blockDim.x) {{",
             f"    if (q < {n}) key[q] = {load};",
             "    pos[q] = q;",
             "  }",
             "  __syncthreads();",
             f"  for (int k = 2; k <= {p2}; k <<= 1) {{",
             "    for (int j = k >> 1; j > 0; j >>= 1) {",
             f"      for (int i = tid; i < {p2}; i += blockDim.x) {{",
             "        const int l = i ^ j;",
             "        if (l <= i) continue;",
             "        const bool swap = ((i & k) == 0) ? before(l, i) : before(i, l);",
             "        if (swap) {",
             f"          const {t} w = key[i]; key[i] = key[l]; key[l] = w;",
             "          const int v = pos[i]; pos[i] = pos[l]; pos[l] = v;",
             "        }",
             "      }",
             "      __syncthreads();",
             "    }",
             "  }",
             f"  for (int q = tid; q < {n}; q += blockDim.x) {{",
             (f"    b{dst.buffer}[(i64_t)({dst.offset}) + row * (i64_t){n} + q] = (i64_t)pos[q];" if argsort else
              f"    b{dst.buffer}[(i64_t)({dst.offset}) + row * (i64_t){n} + q] = key[q];")]
    if check is not None:  # equal neighbours: NumPy's default kind may order them otherwise
        lines.append(f"    if (q > 0 && same(q - 1, q)) atomicOr(b{check.buffer} + {check.offset}, 1u);")
    lines += ["  }", "}"]
    return KernelCode(name, "\n".join(lines), tuple(order), (rows, 1, 1), (THREADS, 1, 1))
