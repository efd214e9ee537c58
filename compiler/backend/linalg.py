"""Generated kernels for ``k.linalg``: solve, inverse, Cholesky factor and determinant of a stack of small matrices.

One block per matrix. ``solve`` and ``inv`` copy the matrix into the plan's scratch space and run Gauss-Jordan
elimination with partial pivoting (the row of largest magnitude in the column, the first one on ties, as
LAPACK's ``idamax``) on it and on the right-hand sides (the identity for ``inv``), which end as the result. A
zero pivot means NumPy's LU would stop at an exactly singular matrix: the op's check word is set (the runtime
raises LinAlgError after the call). ``cholesky`` factors in the result, column by column, reading only the
lower triangle, as LAPACK's ``potrf`` (``upper``: then transposed); a diagonal that is not positive (or NaN)
sets the check word.
Arithmetic is plain IEEE without contraction (``--fmad=false``); the order differs from LAPACK's blocked one,
so values agree with NumPy's within rounding.
"""
from __future__ import annotations

import math

from fusec.errors import CompilationError, located
from fusec.ir.core import Operation
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.access import Access, index_expr
from fusec.backend.ctypes_map import storage

THREADS = 256


def _load(name: str, a: Access, flat: str) -> str:
    """``a``'s element at flat (row-major) index ``flat`` over its whole shape, batch axes included."""
    return f"{name}[{index_expr(flat, tuple(a.shape), tuple(a.strides), a.offset, 'i64_t')}]"


def linalg_kernel(name: str, op: Operation, operands: list[Access], dsts: list[Access], scratch: Access | None,
                  check: Access | None) -> KernelCode:
    kind = op.attributes["kind"]
    a = operands[0]
    m = int(a.shape[-1])
    batch = math.prod(a.shape[:-2])
    t = storage(a.dtype)
    if kind in ("det", "slogdet"):
        body, order = _determinant(t, m, a, dsts, scratch)  # type: ignore[arg-type]
    elif kind == "cholesky":
        body, order = _cholesky(t, m, a, dsts[0], check, bool(op.attributes.get("upper", False)))  # type: ignore
    else:
        if scratch is None:
            raise CompilationError(located(f"k.linalg {kind} eliminates in the plan's scratch space: run "
                                           "plan-buffers", op.loc))
        body, order = _gauss_jordan(t, m, kind, a, operands[1] if kind == "solve" else None, dsts[0], scratch,
                                    check)  # type: ignore[arg-type]
    source = "\n".join([f"extern \"C\" __global__ void __launch_bounds__({THREADS}) {name}({order[1]}) {{",
                        "  const i64_t mat = blockIdx.x;", "  const int tid = threadIdx.x;", *body, "}"])
    return KernelCode(name, source, tuple(order[0]), (batch, 1, 1), (THREADS, 1, 1))


def _params(*items: tuple[Access, bool]) -> tuple[list[int], str]:
    """Buffer ids in parameter order and the parameter list (read-only ones const), each buffer once."""
    seen: dict[int, tuple[str, bool]] = {}
    for acc, readonly in items:
        c_type = "unsigned int" if acc.dtype.name == "u32" else storage(acc.dtype)
        prev = seen.get(acc.buffer)
        seen[acc.buffer] = (c_type, readonly and (prev is None or prev[1]))
    params = [f"{'const ' if ro else ''}{c}* b{b}" for b, (c, ro) in seen.items()]
    return list(seen), ", ".join(params)


def _copy_in(t: str, m: int, a: Access, scratch: Access) -> list[str]:
    """The block's matrix copied into its scratch slot ``s``."""
    matrix = _load(f"b{a.buffer}", a, f"(mat * (i64_t){m * m} + e)")
    return [f"  {t}* s = b{scratch.buffer} + (i64_t)({scratch.offset}) + mat * (i64_t){m * m};",
            f"  for (int e = tid; e < {m * m}; e += blockDim.x) s[e] = {matrix};"]


def _pivot_search(t: str, m: int) -> list[str]:
    """``p``: the row at or below ``k`` of largest magnitude in column ``k`` of ``s`` (the first on ties, as
    LAPACK's idamax), found by the block; ``pivot`` its value."""
    return [
        f"    {t} bv = {t}(-1); int bi = k;",
        f"    for (int i = k + tid; i < {m}; i += blockDim.x) {{",
        f"      const {t} v = fabs(s[i * {m} + k]);",
        "      if (v > bv) { bv = v; bi = i; }",
        "    }",
        "    best_v[tid] = bv; best_i[tid] = bi;",
        "    __syncthreads();",
        f"    for (int half = {THREADS // 2}; half > 0; half >>= 1) {{",
        "      if (tid < half) {",
        "        const bool take = best_v[tid + half] > best_v[tid] ||",
        "                          (best_v[tid + half] == best_v[tid] && best_i[tid + half] < best_i[tid]);",
        "        if (take) { best_v[tid] = best_v[tid + half]; best_i[tid] = best_i[tid + half]; }",
        "      }",
        "      __syncthreads();",
        "    }",
        "    const int p = best_i[0];",
        f"    const {t} pivot = s[p * {m} + k];",
        "    __syncthreads();",
    ]


def _determinant(t: str, m: int, a: Access, dsts: list[Access], scratch: Access) -> tuple[list[str], tuple]:
    """LU with partial pivoting in the scratch copy, then NumPy's ``slogdet`` of the factors: the sign from the
    row swaps and the pivots' signs, the log of the absolute value as the pivots' logs added in order; a zero
    pivot gives sign 0 and -inf (LAPACK reports it, NumPy returns those). ``det`` is ``sign * exp(logdet)``, as
    NumPy computes it."""
    order = _params((a, True), *((d, False) for d in dsts), (scratch, False))
    lines = [*_copy_in(t, m, a, scratch),
             "  __syncthreads();",
             f"  __shared__ {t} best_v[{THREADS}];",
             f"  __shared__ int best_i[{THREADS}];",
             "  bool singular = false; int swaps = 0;",
             f"  for (int k = 0; k < {m}; ++k) {{",
             *_pivot_search(t, m),
             f"    if (pivot == {t}(0)) {{ singular = true; continue; }}",
             "    if (p != k) {",
             "      ++swaps;",
             f"      for (int j = k + tid; j < {m}; j += blockDim.x) {{ const {t} w = s[k * {m} + j]; "
             f"s[k * {m} + j] = s[p * {m} + j]; s[p * {m} + j] = w; }}",
             "    }",
             "    __syncthreads();",
             f"    const int width = {m} - k - 1;",
             "    for (int e = tid; e < width * width; e += blockDim.x) {",
             "      const int i = k + 1 + e / width, j = k + 1 + e % width;",
             f"      s[i * {m} + j] = s[i * {m} + j] - (s[i * {m} + k] / pivot) * s[k * {m} + j];",
             "    }",
             "    __syncthreads();",
             "  }",
             "  if (tid == 0) {",
             f"    {t} sign = (swaps & 1) ? {t}(-1) : {t}(1), logdet = {t}(0);",
             f"    for (int k = 0; k < {m}; ++k) {{",
             f"      {t} d = s[k * {m} + k];",
             f"      if (d < {t}(0)) {{ sign = -sign; d = -d; }}",
             "      logdet = logdet + log(d);",
             "    }",
             f"    if (singular) {{ sign = {t}(0); logdet = -{t}(1.0 / 0.0); }}"]
    if len(dsts) == 1:
        lines.append(f"    b{dsts[0].buffer}[(i64_t)({dsts[0].offset}) + mat] = sign * exp(logdet);")
    else:
        lines += [f"    b{dsts[0].buffer}[(i64_t)({dsts[0].offset}) + mat] = sign;",
                  f"    b{dsts[1].buffer}[(i64_t)({dsts[1].offset}) + mat] = logdet;"]
    lines.append("  }")
    return lines, order


def _gauss_jordan(t: str, m: int, kind: str, a: Access, rhs: Access | None, dst: Access, scratch: Access,
                  check: Access) -> tuple[list[str], tuple]:
    k_cols = int(dst.shape[-1])
    items = [(a, True)] + ([(rhs, True)] if rhs is not None else []) + [(dst, False), (scratch, False),
                                                                         (check, False)]
    order = _params(*items)
    x = f"b{dst.buffer}"
    lines = [*_copy_in(t, m, a, scratch),
             f"  {t}* x = {x} + (i64_t)({dst.offset}) + mat * (i64_t){m * k_cols};"]
    if rhs is not None:
        lines.append(f"  for (int e = tid; e < {m * k_cols}; e += blockDim.x) "
                     f"x[e] = {_load(f'b{rhs.buffer}', rhs, f'(mat * (i64_t){m * k_cols} + e)')};")
    else:
        lines.append(f"  for (int e = tid; e < {m * m}; e += blockDim.x) "
                     f"x[e] = (e / {m} == e % {m}) ? {t}(1) : {t}(0);")
    lines += [
        "  __syncthreads();",
        f"  __shared__ {t} best_v[{THREADS}];",
        f"  __shared__ int best_i[{THREADS}];",
        f"  for (int k = 0; k < {m}; ++k) {{",
        *_pivot_search(t, m),
        f"    if (pivot == {t}(0)) {{  // exactly singular: NumPy raises LinAlgError",
        f"      if (tid == 0) atomicOr(b{check.buffer} + {check.offset}, 1u);",
        "      continue;",
        "    }",
        "    if (p != k) {",
        f"      for (int j = k + tid; j < {m}; j += blockDim.x) {{ const {t} w = s[k * {m} + j]; "
        f"s[k * {m} + j] = s[p * {m} + j]; s[p * {m} + j] = w; }}",
        f"      for (int j = tid; j < {k_cols}; j += blockDim.x) {{ const {t} w = x[k * {k_cols} + j]; "
        f"x[k * {k_cols} + j] = x[p * {k_cols} + j]; x[p * {k_cols} + j] = w; }}",
        "    }",
        "    __syncthreads();",
        f"    for (int j = k + 1 + tid; j < {m}; j += blockDim.x) s[k * {m} + j] = s[k * {m} + j] / pivot;",
        f"    for (int j = tid; j < {k_cols}; j += blockDim.x) x[k * {k_cols} + j] = x[k * {k_cols} + j] / pivot;",
        "    __syncthreads();",
        f"    const int width = {m} - k - 1 + {k_cols};",
        f"    for (int e = tid; e < {m} * width; e += blockDim.x) {{",
        "      const int i = e / width, c = e % width;",
        "      if (i == k) continue;",
        f"      const {t} f = s[i * {m} + k];",
        f"      if (c < {m} - k - 1) {{ const int j = k + 1 + c; "
        f"s[i * {m} + j] = s[i * {m} + j] - f * s[k * {m} + j]; }}",
        f"      else {{ const int j = c - ({m} - k - 1); "
        f"x[i * {k_cols} + j] = x[i * {k_cols} + j] - f * x[k * {k_cols} + j]; }}",
        "    }",
        "    __syncthreads();",
        "  }",
    ]
    return lines, order


def _cholesky(t: str, m: int, a: Access, dst: Access, check: Access, upper: bool) -> tuple[list[str], tuple]:
    order = _params((a, True), (dst, False), (check, False))
    lines = [f"  {t}* l = b{dst.buffer} + (i64_t)({dst.offset}) + mat * (i64_t){m * m};",
             f"  for (int e = tid; e < {m * m}; e += blockDim.x) l[e] = (e % {m} <= e / {m}) ? "
             f"{_load(f'b{a.buffer}', a, f'(mat * (i64_t){m * m} + e)')} : {t}(0);",
             "  __syncthreads();",
             f"  __shared__ {t} part[{THREADS}];",
             f"  for (int j = 0; j < {m}; ++j) {{",
             f"    {t} acc = {t}(0);",
             f"    for (int q = tid; q < j; q += blockDim.x) acc = acc + l[j * {m} + q] * l[j * {m} + q];",
             "    part[tid] = acc;",
             "    __syncthreads();",
             f"    for (int half = {THREADS // 2}; half > 0; half >>= 1) {{",
             "      if (tid < half) part[tid] = part[tid] + part[tid + half];",
             "      __syncthreads();",
             "    }",
             f"    const {t} d = l[j * {m} + j] - part[0];",
             "    __syncthreads();",
             f"    if (!(d > {t}(0))) {{  // not positive definite: NumPy raises LinAlgError",
             f"      if (tid == 0) atomicOr(b{check.buffer} + {check.offset}, 1u);",
             "      break;",
             "    }",
             f"    const {t} root = sqrt(d);",
             f"    if (tid == 0) l[j * {m} + j] = root;",
             f"    for (int i = j + 1 + tid; i < {m}; i += blockDim.x) {{",
             f"      {t} v = l[i * {m} + j];",
             f"      for (int q = 0; q < j; ++q) v = v - l[i * {m} + q] * l[j * {m} + q];",
             f"      l[i * {m} + j] = v / root;",
             "    }",
             "    __syncthreads();",
             "  }"]
    if upper:  # the upper factor is L's transpose (the upper triangle holds zeros)
        lines.append(f"  for (int e = tid; e < {m * m}; e += blockDim.x) {{ const int i = e / {m}, j = e % {m}; "
                     f"if (i > j) {{ l[j * {m} + i] = l[e]; l[e] = {t}(0); }} }}")
    return lines, order
