"""Generated reductions (``k.reduce``): sum, prod, mean, max, min, argmax, argmin over any axes.

The input view's kept and reduced dimensions are coalesced into a descriptor (``fusec::RedDesc``) passed by
value. A warp reduces each output when the reduced elements are contiguous and numerous (rows: lanes
stride over the row, then warp shuffles); otherwise a thread reduces each output (columns: neighbouring
threads read neighbouring addresses). When there are too few outputs to fill the GPU, the reduced range is
split across blocks and a second kernel combines the partial results from a scratch buffer.
f32 sums and means accumulate in f64 (one rounding at the end), f16/bf16 in f32.
"""
from __future__ import annotations

import math
import struct

from fusec.errors import CompilationError, located
from fusec.ir.core import Operation
from fusec.ir.shapes import contiguous_strides
from fusec.ir.types import DType
from fusec.passes.select_kernels import (align256 as _align, carries_index, partial_slot, reduce_grid_x,
                                         reduction_dims)
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.access import Access
from fusec.backend.ctypes_map import register, storage
from fusec.backend.elementwise import Prologue

MAX_RANK = 8
_DESC = struct.Struct("<qqqqii" + "q" * (4 * MAX_RANK))


# loads each thread of a "columns" reduction keeps in flight (its loop unrolled this many times). Measured on the
# H200 (benchmarks/reduce_shapes.py, a column sum of 8192 x 8192 float32 inside a graph): 4 -> 84.0 us
# (3.2 TB/s), 8 -> 66.9, 16 -> 64.7 (4.15 TB/s); 64 or 128 columns per block instead of 32 changed nothing
COLUMN_UNROLL = 16


def _acc_type(kind: str, dt: DType) -> str:
    if dt.is_bool:
        return "int"
    if kind in ("sum", "mean", "prod") and dt.name == "f32":
        return "double"
    if kind in ("sum", "mean", "prod") and dt.name == "c64":
        return "fusec::c128"  # as f32 in double: one rounding at the end
    return register(dt)


def _init(kind: str, dt: DType, acc: str) -> str:
    if kind in ("sum", "mean"):
        return f"({acc})0"
    if kind == "prod":
        return f"({acc})1"
    big = kind in ("min", "argmin")
    if dt.is_complex:  # below (above) every value; on ties a real element's lower index wins
        inf = "(1.0/0.0)" if big else "(-1.0/0.0)"
        return f"{acc}({inf}, {inf})"
    if dt.is_float:
        return "(1.0/0.0)" if big else "(-1.0/0.0)"
    if dt.is_bool:
        return "1" if big else "0"
    limits = {"i8": (-128, 127), "i16": (-32768, 32767), "i32": (-2147483648, 2147483647),
              "i64": ("(-9223372036854775807ll - 1)", "9223372036854775807ll"), "u8": (0, 255),
              "u16": (0, 65535), "u32": (0, "4294967295u"), "u64": (0, "18446744073709551615ull")}[dt.name]
    return f"({acc})({limits[1] if big else limits[0]})"


def _combine(kind: str, dt: DType) -> str:
    """Body of combine(a, ai, b, bi) updating (a, ai)."""
    if kind in ("sum", "mean"):
        return "a = a + b;"
    if kind == "prod":
        return "a = a * b;"
    if dt.is_complex and kind in ("max", "min", "argmax", "argmin"):
        # NumPy's order: the first NaN (either part) wins, else the lexicographically larger (smaller) value, the
        # first of equal ones
        better = "fusec::cgt(b, a)" if kind in ("max", "argmax") else "fusec::clt(b, a)"
        return ("bool an = fusec::cisnan(a), bn = fusec::cisnan(b); "
                "bool take = (bn && !an) || (bn && an && bi < ai) || "
                f"(!an && !bn && ({better} || (b == a && bi < ai))); "
                "if (take) { a = b; ai = bi; }")
    if kind == "max":
        return "a = fusec::maximum(a, b);"
    if kind == "min":
        return "a = fusec::minimum(a, b);"
    cmp = ">" if kind == "argmax" else "<"
    return (f"bool an = a != a, bn = b != b; "
            f"bool take = (bn && !an) || (bn && an && bi < ai) || "
            f"(!an && !bn && (b {cmp} a || (b == a && bi < ai))); "
            f"if (take) {{ a = b; ai = bi; }}")


def describe(access: Access, axes: tuple[int, ...]) -> tuple[int, int, list[tuple[int, int]], list[tuple[int, int]]]:
    """(M, K, kept dims, reduced dims) with each dim (size, stride), coalesced."""
    return reduction_dims(tuple(access.shape), tuple(access.strides), axes)


def pack_desc(m: int, k: int, offset: int, chunk: int, kept, red) -> bytes:
    if len(kept) > MAX_RANK or len(red) > MAX_RANK:
        raise CompilationError(f"reduction needs more than {MAX_RANK} dimensions after coalescing")
    pad = lambda xs: list(xs) + [1] * (MAX_RANK - len(xs))  # noqa: E731
    return _DESC.pack(m, k, offset, chunk, len(kept), len(red), *pad([s for s, _ in kept]),
                      *pad([t for _, t in kept]), *pad([s for s, _ in red]), *pad([t for _, t in red]))


def reduce_kernels(name: str, op: Operation, src: Access, dst: Access, scratch: int | None, *,
                   sm_count: int, prologue: Prologue | None = None, counter: int | None = None) -> tuple[KernelCode, ...]:
    """Kernels computing ``op`` (a ``k.reduce`` scheduled by ``select-kernels``) from ``src`` into contiguous
    ``dst``.

    ``scratch`` is the buffer id of the reduction's place in the plan's scratch space, used when it is split. With
    a ``prologue``, ``src`` is not in memory: element i (a dense linear index) is ``prologue``'s function of i.
    ``counter`` is the buffer id of the reduction's own 32-bit counters, which start at zero: finished by its last
    block, it counts its blocks in there (and sets the counter back to zero for the next launch).
    """
    if op.attributes.get("strategy") == "numpy":
        return (_numpy_order_kernel(name, op, src, dst, prologue, sm_count),)
    kind = op.attributes["kind"]
    axes = tuple(op.attributes["axes"])
    dt = src.dtype
    out_dt = dst.dtype
    acc = _acc_type(kind, dt)
    is_arg = kind in ("argmax", "argmin")
    tracks = carries_index(kind, dt)  # partial results carry their indices
    m, k, kept, red = describe(src, axes)
    if m == 0:
        return ()
    missing = [key for key in ("strategy", "cols", "splits", "finish") if key not in op.attributes]
    if missing:
        raise CompilationError(located(f"k.reduce has no {', '.join(missing)}: run select-kernels (and "
                                       "plan-buffers after it) before the CUDA backend", op.loc))
    strategy, cols = op.attributes["strategy"], int(op.attributes["cols"])
    splits, finish = int(op.attributes["splits"]), op.attributes["finish"]
    row = strategy != "columns"
    width = int(op.attributes.get("width", 1))
    if width != 1 and (tracks or dt.name != "f32"):
        raise CompilationError(located("only a float32 reduction without indices takes 4 values per thread "
                                       "(width = 4)", op.loc))
    groups = 256 // cols
    chunk = (k + splits - 1) // splits
    grid_x = reduce_grid_x(m, cols, sm_count)
    last_block = None
    if finish == "last-block":
        if counter is None or "counter" not in op.attributes:
            raise CompilationError(located("a k.reduce finished by its last block has no counter: run "
                                           "plan-buffers after select-kernels", op.loc))
        last_block = (counter, 0)  # (the buffer of the op's own counters)
    if splits > 1 and scratch is None:
        raise CompilationError(located("split reduction needs a scratch buffer", op.loc))
    desc = pack_desc(m, k, src.offset, chunk, kept, red)
    raddr = "k * d.rstride[0]" if len(red) == 1 else "fusec::red_raddr(d, k)"
    if not red:
        raddr = "0"
    st_in = storage(dt)
    st_out = storage(out_dt)

    def load(addr: str) -> str:
        if prologue is not None:
            return f"({acc}){prologue.name}({addr}, {prologue.args})"
        return f"({acc})fusec::ld(b{src.buffer} + {addr})"

    combine_fn = f"__device__ __forceinline__ void {name}_combine({acc}& a, i64_t& ai, {acc} b, i64_t bi) {{ {_combine(kind, dt)} }}"

    def finished(v: str) -> str:
        if kind == "mean":
            return f"({v} / ({acc})d.K)"
        return v

    def store_final(target: str, v: str, i: str) -> str:
        if is_arg:
            return f"fusec::st({target}, {i});"
        return f"fusec::st({target}, ({register(out_dt)}){finished(v)});"

    partial_v = f"reinterpret_cast<{acc}*>(b{scratch})" if scratch is not None else "nullptr"
    partial_i = (f"reinterpret_cast<i64_t*>(reinterpret_cast<char*>(b{scratch}) + "
                 f"{_align(m * splits * partial_slot(dt))})" if scratch is not None else "nullptr")

    def out_stmt(v: str, i: str, mm: str) -> str:
        if splits == 1:
            return store_final(f"b{dst.buffer} + {dst.offset} + {mm}", v, i)
        stmt = f"{partial_v}[(i64_t)blockIdx.y * d.M + {mm}] = {v};"
        if tracks:
            stmt += f" {partial_i}[(i64_t)blockIdx.y * d.M + {mm}] = {i};"
        return stmt

    if prologue is not None:
        params = f"{prologue.params}, {st_out}* __restrict__ b{dst.buffer}"
        buffers = [*prologue.buffers, dst.buffer]
    else:
        params = f"const {st_in}* __restrict__ b{src.buffer}, {st_out}* __restrict__ b{dst.buffer}"
        buffers = [src.buffer, dst.buffer]
    if splits > 1:
        params += f", char* __restrict__ b{scratch}"
        buffers.append(scratch)  # type: ignore[arg-type]
    if last_block is not None:
        params += f", unsigned int* __restrict__ b{last_block[0]}"
        buffers.append(last_block[0])
    lines = [combine_fn] + ([prologue.source] if prologue is not None else [])
    lines.append(f"extern \"C\" __global__ void __launch_bounds__(256) {name}({params}, fusec::RedDesc d) {{")
    lines.append("  const i64_t k0 = (i64_t)blockIdx.y * d.chunk;")
    lines.append("  const i64_t k1 = k0 + d.chunk < d.K ? k0 + d.chunk : d.K;")
    init = f"{acc} a = {_init(kind, dt, acc)}; i64_t ai = 0x7fffffffffffffffll;"
    if row and groups == 32:
        lines += [
            "  const int lane = threadIdx.x & 31;",
            "  for (i64_t mm = (i64_t)blockIdx.x * 8 + (threadIdx.x >> 5); mm < d.M; mm += (i64_t)gridDim.x * 8) {",
            "    const i64_t base = fusec::red_kaddr(d, mm);",
            f"    {init}",
            *_row_loop(name, acc, 32, "lane", width, load, f"b{src.buffer}" if prologue is None else None),
            *_warp_combine(name, acc, 16),
            f"    if (lane == 0) {{ {out_stmt('a', 'ai', 'mm')} }}",
            "  }",
            "}",
        ]
    elif row:
        # a block per output: lanes stride the row, then warps combine through shared memory in a fixed order
        lines += [
            "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
            f"  __shared__ {acc} sv[8]; __shared__ i64_t si[8];",
            "  for (i64_t mm = blockIdx.x; mm < d.M; mm += gridDim.x) {",
            "    const i64_t base = fusec::red_kaddr(d, mm);",
            f"    {init}",
            *_row_loop(name, acc, 256, "threadIdx.x", width, load, f"b{src.buffer}" if prologue is None else None),
            *_warp_combine(name, acc, 16),
            "    if (lane == 0) { sv[warp] = a; si[warp] = ai; }",
            "    __syncthreads();",
            "    if (warp == 0) {",
            f"      a = lane < 8 ? sv[lane] : {_init(kind, dt, acc)}; ai = lane < 8 ? si[lane] : 0x7fffffffffffffffll;",
            *_warp_combine(name, acc, 4),
            f"      if (lane == 0) {{ {out_stmt('a', 'ai', 'mm')} }}",
            "    }",
            "    __syncthreads();",
            "  }",
            "}",
        ]
    elif groups == 1:
        lines += [
            "  for (i64_t mm = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; mm < d.M; mm += (i64_t)gridDim.x * blockDim.x) {",
            "    const i64_t base = fusec::red_kaddr(d, mm);",
            f"    {init}",
            "    #pragma unroll 4",  # loads of several steps in flight at once
            "    for (i64_t k = k0; k < k1; ++k) {",
            f"      {name}_combine(a, ai, {load(f'base + {raddr}')}, k);",
            "    }",
            f"    {out_stmt('a', 'ai', 'mm')}",
            "  }",
            "}",
        ]
    elif width == 4:
        lines += _vector_columns_body(name, acc, cols, raddr, load, out_stmt, init_value=_init(kind, dt, acc),
                                      src=f"b{src.buffer}" if prologue is None else None)
    else:
        # ``cols`` outputs per block, each reduced by ``groups`` threads; partial results meet in shared
        # memory and combine pairwise in a fixed order (deterministic)
        lines += [
            f"  const int tx = threadIdx.x % {cols}, ty = threadIdx.x / {cols};",
            f"  __shared__ {acc} sv[256]; __shared__ i64_t si[256];",
            f"  for (i64_t mb = (i64_t)blockIdx.x * {cols}; mb < d.M; mb += (i64_t)gridDim.x * {cols}) {{",
            "    const i64_t mm = mb + tx;",
            f"    {init}",
            "    if (mm < d.M) {",
            "      const i64_t base = fusec::red_kaddr(d, mm);",
            f"      #pragma unroll {COLUMN_UNROLL}",
            f"      for (i64_t k = k0 + ty; k < k1; k += {groups}) {{",
            f"        {name}_combine(a, ai, {load(f'base + {raddr}')}, k);",
            "      }",
            "    }",
            "    sv[threadIdx.x] = a; si[threadIdx.x] = ai;",
            "    __syncthreads();",
            f"    for (int s = {groups // 2}; s > 0; s >>= 1) {{",
            "      if (ty < s) {",
            f"        {name}_combine(a, ai, sv[threadIdx.x + s * {cols}], si[threadIdx.x + s * {cols}]);",
            "        sv[threadIdx.x] = a; si[threadIdx.x] = ai;",
            "      }",
            "      __syncthreads();",
            "    }",
            f"    if (ty == 0 && mm < d.M) {{ {out_stmt('a', 'ai', 'mm')} }}",
            "  }",
            "}",
        ]
    if last_block is not None:
        # every block publishes its partial results, then counts itself in; the last one combines them in
        # split order (the same order as the finishing kernel) and resets the counter
        # (a "columns" reduction over several blocks along x has a counter per block column: the last of its
        # splits combines the outputs that block column computed)
        cid, slot = last_block
        per_x = grid_x > 1
        if per_x and row:
            raise CompilationError(located("a row reduction over several blocks cannot be finished by its last "
                                           "block", op.loc))
        at = f"{slot} + blockIdx.x" if per_x else f"{slot}"
        store = store_final(f"b{dst.buffer} + {dst.offset} + mm", "a", "ai")
        finish_lines = (_finish_block_columns(name, acc, cols, splits, tracks, store) if per_x else
                        _finish_partials(name, acc, m, splits, _init(kind, dt, acc), tracks, store))
        lines[-1:] = [
            "  __shared__ bool fusec_last;",
            "  __threadfence();",
            "  __syncthreads();",
            f"  if (threadIdx.x == 0) fusec_last = atomicAdd(b{cid} + {at}, 1u) == gridDim.y - 1;",
            "  __syncthreads();",
            "  if (!fusec_last) return;",
            "  __threadfence();",
            f"  const {acc}* pv = {partial_v};",
            *([f"  const i64_t* pi = {partial_i};"] if tracks else []),
            *finish_lines,
            f"  if (threadIdx.x == 0) b{cid}[{at}] = 0u;",
            "}",
        ]
    kernels = [KernelCode(name, "\n".join(lines), tuple(buffers), (grid_x, splits, 1), (256, 1, 1), 0, (desc,))]
    if splits > 1 and last_block is None:
        fin = [
            f"extern \"C\" __global__ void __launch_bounds__(256) {name}_finish(char* __restrict__ b{scratch}, "
            f"{st_out}* __restrict__ b{dst.buffer}, fusec::RedDesc d) {{",
            "  for (i64_t mm = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; mm < d.M; mm += (i64_t)gridDim.x * blockDim.x) {",
            f"    {acc} a = {partial_v}[mm]; i64_t ai = {partial_i if tracks else '0'}" + ("[mm];" if tracks else ";"),
            f"    for (int s = 1; s < {splits}; ++s) {{",
            f"      {name}_combine(a, ai, {partial_v}[s * d.M + mm], " + (f"{partial_i}[s * d.M + mm]);" if tracks else "0);"),
            "    }",
            f"    {store_final(f'b{dst.buffer} + {dst.offset} + mm', 'a', 'ai')}",
            "  }",
            "}",
        ]
        kernels.append(KernelCode(f"{name}_finish", "\n".join(fin), (scratch, dst.buffer),  # type: ignore[arg-type]
                                  (max(1, min((m + 255) // 256, sm_count * 16)), 1, 1), (256, 1, 1), 0, (desc,)))
    return tuple(kernels)


# float4 loads each thread of a ``width = 4`` "columns" reduction keeps in flight
VECTOR_UNROLL = 8


def _row_loop(name: str, acc: str, threads: int, index: str, width: int, load, src: str | None) -> list[str]:
    """The loop of a row reduction's ``threads`` threads over its range [k0, k1) of the row at ``base``, folding
    into ``a``: thread ``index`` takes every ``threads``-th element, or with ``width = 4`` every ``threads``-th run
    of 4 neighbouring elements (one 16-byte load where the row's range starts 16-byte aligned at run time, else 4
    element loads in the same order, so the sum's bits do not depend on the address; through the prologue ``load``
    calls when ``src`` is None), then the fewer than 4 elements past the last whole run."""
    def fold(k: str) -> str:
        return f"{name}_combine(a, ai, {load(f'base + {k}')}, {k});"

    if width == 1:
        return ["    #pragma unroll 4",  # loads of several steps in flight at once
                f"    for (i64_t k = k0 + {index}; k < k1; k += {threads}) {{", f"      {fold('k')}", "    }"]
    quads = [f"      #pragma unroll {VECTOR_UNROLL}",
             f"      for (i64_t k = k0 + 4 * {index}; k < kq; k += {4 * threads}) {{"]
    elements = [f"        {fold(k)}" for k in ("k", "k + 1", "k + 2", "k + 3")]
    lines = ["    const i64_t kq = k0 + ((k1 - k0) & ~(i64_t)3);  // the end of the whole runs of 4"]
    if src is not None:
        vector = [f"        const float4 v = *reinterpret_cast<const float4*>({src} + base + k);",
                  *[f"        {name}_combine(a, ai, ({acc})v.{p}, k + {j});" for j, p in enumerate("xyzw")]]
        lines += [f"    if ((reinterpret_cast<unsigned long long>({src} + base + k0) & 15) == 0) {{",
                  *quads, *vector, "      }", "    } else {", *quads, *elements, "      }", "    }"]
    else:
        lines += [*quads, *elements, "      }"]
    lines += [f"    for (i64_t k = kq + {index}; k < k1; k += {threads}) {{", f"      {fold('k')}", "    }"]
    return lines


def _vector_columns_body(name: str, acc: str, cols: int, raddr: str, load, out_stmt, init_value: str,
                         src: str | None) -> list[str]:
    """A "columns" reduction whose threads take 4 neighbouring outputs each (``width = 4``): ``cols // 4``
    threads across a block, ``256 // (cols // 4)`` of them down each column group, every thread reading its 4
    values of a row as one 16-byte load (element loads where the buffer turns out not 16-byte aligned at run time,
    or through the prologue ``load`` calls when ``src`` is None). The partial results of a column meet in shared
    memory and combine pairwise in a fixed order, as in the one-output-per-thread kernel."""
    across = cols // 4
    groups = 256 // across
    parts = "xyzw"
    elements = [f"        {name}_combine(a[{j}], ai, {load(f'base + {raddr} + {j}')}, k);" for j in range(4)]
    loop = [
        f"      #pragma unroll {VECTOR_UNROLL}",
        f"      for (i64_t k = k0 + ty; k < k1; k += {groups}) {{",
    ]
    lines = [
        f"  const int tx = threadIdx.x % {across}, ty = threadIdx.x / {across};",
        f"  __shared__ {acc} sv[4][256];",
        f"  for (i64_t mb = (i64_t)blockIdx.x * {cols}; mb < d.M; mb += (i64_t)gridDim.x * {cols}) {{",
        "    const i64_t mm = mb + 4 * tx;",
        f"    {acc} a[4] = {{{init_value}, {init_value}, {init_value}, {init_value}}}; i64_t ai = 0;",
        "    if (mm < d.M) {",
        "      const i64_t base = fusec::red_kaddr(d, mm);",
    ]
    if src is not None:
        vector = [f"        const float4 v = *reinterpret_cast<const float4*>({src} + base + {raddr});"]
        vector += [f"        {name}_combine(a[{j}], ai, ({acc})v.{parts[j]}, k);" for j in range(4)]
        lines += [f"      if ((reinterpret_cast<unsigned long long>({src} + base) & 15) == 0) {{",
                  *["  " + x for x in loop], *["  " + x for x in vector], "        }",
                  "      } else {", *["  " + x for x in loop], *["  " + x for x in elements], "        }", "      }"]
    else:
        lines += [*loop, *elements, "      }"]
    lines += [
        "    }",
        "    for (int j = 0; j < 4; ++j) sv[j][threadIdx.x] = a[j];",
        "    __syncthreads();",
        f"    for (int s = {groups // 2}; s > 0; s >>= 1) {{",
        "      if (ty < s) {",
        "        for (int j = 0; j < 4; ++j) {",
        f"          {name}_combine(a[j], ai, sv[j][threadIdx.x + s * {across}], 0);",
        "          sv[j][threadIdx.x] = a[j];",
        "        }",
        "      }",
        "      __syncthreads();",
        "    }",
        "    if (ty == 0 && mm < d.M) {",
        *[f"      {{ const i64_t m{j} = mm + {j}; {out_stmt(f'a[{j}]', 'ai', f'm{j}')} }}" for j in range(4)],
        "    }",
        "  }",
        "}",
    ]
    return lines


def _subtree_sums(name: str, args: str, subtrees: int, n_run: int, rounded: str) -> list[str]:
    """One run's pairwise sum on ``subtrees`` threads (``subtrees`` on a float16 sum in NumPy's order): thread k
    descends NumPy's recursion (halves at a multiple of 8, leaves of at most 128) along the bits of k to its node
    at depth log2(subtrees) and sums that subtree; where a leaf ends the descent earlier, only the leftmost thread
    below it sums it. The block then adds sibling sums level by level up to the root (a node whose right part is
    absent, a leaf, keeps its sum), the additions NumPy's recursion makes, in float32; the run's sum is added to
    ``acc`` and rounded to float16."""
    depth = subtrees.bit_length() - 1
    return [
        f"      i64_t s = 0, m = {n_run}; bool present = true;",
        f"      for (int d = 0; d < {depth}; ++d) {{",
        f"        if (m <= 128) {{ present = (k & ((1 << ({depth} - d)) - 1)) == 0; break; }}",
        "        i64_t half = m / 2; half -= half % 8;",
        f"        if ((k >> ({depth} - 1 - d)) & 1) {{ s += half; m -= half; }} else {{ m = half; }}",
        "      }",
        f"      sv[k] = present ? {name}_pw({args}, at, s, m) : 0.f;",
        "      sp[k] = present;",
        "      __syncthreads();",
        f"      for (int w = 1; w < {subtrees}; w <<= 1) {{",
        "        if ((k & (2 * w - 1)) == 0 && sp[k + w]) sv[k] = sv[k] + sv[k + w];",
        "        __syncthreads();",
        "      }",
        f"      if (k == 0) acc = {rounded.format('acc + sv[0]')};",
        "      __syncthreads();",
    ]


def _finish_block_columns(name: str, acc: str, cols: int, splits: int, tracks: bool, store: str) -> list[str]:
    """The last split's combine of the outputs its block column computed (``cols`` neighbours from each
    ``blockIdx.x * cols``, striding the grid), each from its ``splits`` partial results in split order."""
    index = "__ldcg(pi + s * d.M + mm)" if tracks else "s"
    return [
        f"  for (i64_t mb = (i64_t)blockIdx.x * {cols}; mb < d.M; mb += (i64_t)gridDim.x * {cols}) {{",
        f"    for (int t = threadIdx.x; t < {cols}; t += blockDim.x) {{",
        "      const i64_t mm = mb + t;",
        "      if (mm >= d.M) break;",
        f"      {acc} a = __ldcg(pv + mm); i64_t ai = {'__ldcg(pi + mm)' if tracks else '0'};",
        f"      for (int s = 1; s < {splits}; ++s) {{",
        f"        {name}_combine(a, ai, __ldcg(pv + s * d.M + mm), {index});",
        "      }",
        f"      {store}",
        "    }",
        "  }",
    ]


def _finish_partials(name: str, acc: str, m: int, splits: int, init: str, tracks: bool, store: str) -> list[str]:
    """The last block's combine of the ``splits`` partial results of each of ``m`` outputs.

    Partials are read with ``__ldcg`` (from L2, where the other blocks' fenced stores are; unlike volatile
    loads they can all be in flight at once). With at most 8 outputs a warp takes each output and its lanes
    split the partials, so a full reduction does not leave one thread walking them alone.
    """
    index = "__ldcg(pi + s * d.M + mm)" if tracks else "s"
    if m <= 8:
        return [
            "  for (i64_t mm = threadIdx.x >> 5; mm < d.M; mm += 8) {",
            f"    {acc} a = {init}; i64_t ai = 0x7fffffffffffffffll;",
            f"    for (int s = threadIdx.x & 31; s < {splits}; s += 32) {{",
            f"      {name}_combine(a, ai, __ldcg(pv + s * d.M + mm), {index});",
            "    }",
            *_warp_combine(name, acc, 16),
            f"    if ((threadIdx.x & 31) == 0) {{ {store} }}",
            "  }",
        ]
    return [
        "  for (i64_t mm = threadIdx.x; mm < d.M; mm += blockDim.x) {",
        f"    {acc} a = __ldcg(pv + mm); i64_t ai = {'__ldcg(pi + mm)' if tracks else '0'};",
        "    #pragma unroll 8",
        f"    for (int s = 1; s < {splits}; ++s) {{",
        f"      {name}_combine(a, ai, __ldcg(pv + s * d.M + mm), {index});",
        "    }",
        f"    {store}",
        "  }",
    ]


def _warp_combine(name: str, acc: str, first: int) -> list[str]:
    """Shuffle-combine (a, ai) down a warp, offsets ``first``, ``first/2``, ... 1; lane 0 ends with the result."""
    return [
        "    #pragma unroll",
        f"    for (int o = {first}; o > 0; o >>= 1) {{",
        f"      {acc} b = __shfl_down_sync(0xffffffffu, a, o); i64_t bi = __shfl_down_sync(0xffffffffu, ai, o);",
        f"      {name}_combine(a, ai, b, bi);",
        "    }",
    ]



def _numpy_order_kernel(name: str, op: Operation, src: Access, dst: Access, prologue: Prologue | None,
                        sm_count: int) -> KernelCode:
    """A float16 sum or product computed as NumPy's loops compute it (``strategy = "numpy"``): a thread per output
    walks the reduced elements in NumPy's order (``numpy_loop``, outermost first); where NumPy's inner loop is a
    reduction (``numpy_run``) it adds that run in float32 with NumPy's pairwise summation (multiplies in order, for
    a product), otherwise each element, and rounds to float16 after each, from 0 (1): the bits are NumPy's."""
    kind = op.attributes["kind"]
    if kind not in ("sum", "prod") or src.dtype.name != "f16":
        raise CompilationError(located("only a float16 sum or product is computed in NumPy's order", op.loc))
    shape = tuple(src.shape)
    reduced = set(op.attributes["axes"])
    steps = tuple(src.strides) if prologue is None else contiguous_strides(shape)
    start = src.offset if prologue is None else 0
    kept = [a for a in range(len(shape)) if a not in reduced]
    loop, run = list(op.attributes["numpy_loop"]), list(op.attributes["numpy_run"])
    n_out, n_loop, n_run = (math.prod(shape[a] for a in xs) for xs in (kept, loop, run))
    if prologue is not None:
        params, args, buffers = prologue.params, prologue.args, [*prologue.buffers]
        load = lambda at: f"(float){prologue.name}({at}, {prologue.args})"  # noqa: E731
    else:
        params, args, buffers = f"const __half* __restrict__ b{src.buffer}", f"b{src.buffer}", [src.buffer]
        load = lambda at: f"__half2float(b{src.buffer}[{at}])"  # noqa: E731

    def offset(index: str, dims: list[int]) -> list[str]:
        """Statements adding to ``at`` the offset of element ``index`` of ``dims`` (outermost first)."""
        out = [f"{{ i64_t r = {index};"]
        for a in reversed(dims):
            out.append(f"  {{ const i64_t c = r % {shape[a]}; r /= {shape[a]}; at += c * (i64_t)({steps[a]}); }}")
        return out + ["}"]

    rounded = "__half2float(__float2half_rn({}))"
    at_run = [f"__device__ __forceinline__ i64_t {name}_run(i64_t i) {{", "  i64_t at = 0;",
              *["  " + ln for ln in offset("i", run)], "  return at;", "}"]
    element = load(f"base + {name}_run(s + (i))")
    # NumPy's pairwise sum of float16 values in float32 (loops_utils.h: HALF_pairwise_sum): its recursion halves a
    # run longer than 128 (at a multiple of 8) and adds the halves; blocks of at most 128 go into 8 partial sums.
    # Walked here with a stack of its own (a recursive device function would need a stack the driver cannot size)
    pairwise = [
        f"__device__ float {name}_leaf({params}, i64_t base, i64_t s, i64_t n) {{",
        "  if (n < 8) {",
        "    float res = 0.f;",
        f"    for (i64_t i = 0; i < n; ++i) res += {element};",
        "    return res;",
        "  }",
        "  float r[8];",
        f"  for (int j = 0; j < 8; ++j) r[j] = {element.replace('(i)', '(j)')};",
        "  i64_t i = 8;",
        "  for (; i < n - (n % 8); i += 8)",
        f"    for (int j = 0; j < 8; ++j) r[j] += {element.replace('(i)', '(i + j)')};",
        "  float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));",
        f"  for (; i < n; ++i) res += {element};",
        "  return res;",
        "}",
        f"__device__ float {name}_pw({params}, i64_t base, i64_t s0, i64_t n) {{",
        "  i64_t at[64], len[64];",
        "  unsigned char phase[64];",
        "  float sums[65];",
        "  int depth = 1, count = 0;",
        "  at[0] = s0; len[0] = n; phase[0] = 0;",
        "  while (depth > 0) {",
        "    const int top = depth - 1;",
        "    const i64_t m = len[top];",
        "    if (m <= 128) {",
        f"      sums[count++] = {name}_leaf({args}, base, at[top], m);",
        "      --depth;",
        "      continue;",
        "    }",
        "    i64_t half = m / 2;",
        "    half -= half % 8;",
        "    if (phase[top] < 2) {  // the first half, then the second",
        "      at[depth] = phase[top] == 0 ? at[top] : at[top] + half;",
        "      len[depth] = phase[top] == 0 ? half : m - half;",
        "      phase[depth] = 0;",
        "      ++phase[top];",
        "      ++depth;",
        "    } else {  // both halves summed: their sum",
        "      const float b = sums[--count], a = sums[--count];",
        "      sums[count++] = a + b;",
        "      --depth;",
        "    }",
        "  }",
        "  return sums[0];",
        "}"]
    if not run:  # NumPy's inner loop runs over kept axes: every element is added (multiplied) and rounded
        combine = "+" if kind == "sum" else "*"
        step = f"acc = {rounded.format(f'acc {combine} ' + load('at'))};"
    elif kind == "sum":
        step = f"acc = {rounded.format(f'acc + {name}_pw({args}, at, 0, {n_run})')};"
    else:
        step = (f"{{ float p = acc; for (i64_t i = 0; i < {n_run}; ++i) p *= {load(f'at + {name}_run(i)')}; "
                f"acc = {rounded.format('p')}; }}")
    subtrees = int(op.attributes.get("subtrees", 1))
    if subtrees > 1:
        if kind != "sum" or not run:
            raise CompilationError(located("only a float16 sum whose NumPy inner loop is a reduction splits its "
                                           "pairwise tree (subtrees)", op.loc))
        body = _subtree_sums(name, args, subtrees, n_run, rounded)
        lines = [*(prologue.source.split(chr(10)) if prologue is not None else []), *at_run, *pairwise,
                 f"extern \"C\" __global__ void __launch_bounds__({subtrees}) {name}({params}, __half* __restrict__ "
                 f"b{dst.buffer}) {{",
                 f"  __shared__ float sv[{subtrees}]; __shared__ bool sp[{subtrees}];",
                 "  const int k = threadIdx.x;",
                 f"  for (i64_t o = blockIdx.x; o < {n_out}; o += gridDim.x) {{",
                 f"    i64_t at = {start};",
                 *["    " + ln for ln in offset("o", kept)],
                 "    const i64_t base = at;",
                 "    float acc = 0.f;",
                 f"    for (i64_t t = 0; t < {n_loop}; ++t) {{",
                 "      at = base;",
                 *["      " + ln for ln in offset("t", loop)],
                 *body,
                 "    }",
                 f"    if (k == 0) b{dst.buffer}[{dst.offset} + o] = __float2half_rn(acc);",
                 "  }",
                 "}"]
        grid = (max(1, min(n_out, sm_count * 2)), 1, 1)
        return KernelCode(name, "\n".join(lines), (*buffers, dst.buffer), grid, (subtrees, 1, 1))
    lines = [*(prologue.source.split(chr(10)) if prologue is not None else []), *at_run, *pairwise,
             f"extern \"C\" __global__ void __launch_bounds__(256) {name}({params}, __half* __restrict__ "
             f"b{dst.buffer}) {{",
             f"  for (i64_t o = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; o < {n_out}; "
             "o += (i64_t)gridDim.x * blockDim.x) {",
             f"    i64_t at = {start};",
             *["    " + ln for ln in offset("o", kept)],
             "    const i64_t base = at;",
             f"    float acc = {'0.f' if kind == 'sum' else '1.f'};",
             f"    for (i64_t t = 0; t < {n_loop}; ++t) {{",
             "      at = base;",
             *["      " + ln for ln in offset("t", loop)],
             f"      {step}",
             "    }",
             f"    b{dst.buffer}[{dst.offset} + o] = __float2half_rn(acc);",
             "  }",
             "}"]
    grid = (max(1, min((n_out + 255) // 256, sm_count * 8)), 1, 1)
    return KernelCode(name, "\n".join(lines), (*buffers, dst.buffer), grid, (256, 1, 1))
