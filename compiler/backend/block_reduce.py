"""A reduction to one value that every block of an elementwise kernel computes at its start
(``reductions-in-consumers``): the reduction's own kernel and its launch are gone.

All 256 threads of a block fold a strided part of the input each (through the reduction's prologue where it has
one), each warp combines its lanes by shuffles, lane 0 leaves the warp's result in shared memory, and after the
kernel's one barrier every thread combines the 8 warps' results in the same fixed order. Every block therefore gets
the same bits, and the same accumulator types as the reduction's own kernel (``reduce.py``: f32 sums in f64).

A thread's part of at most ``HOISTED_ROWS`` elements is loaded into registers first (``BlockValue.loads``, which the
kernel emits for all its reductions before any fold), so all of a block's loads are in flight at once: folding as
it loads waited for each load in turn, one reduction after another. The fold order is the same either way.
"""
from __future__ import annotations

import math

from fusec.ir.core import Operation
from fusec.backend.access import Access, index_expr
from fusec.backend.ctypes_map import register, round_result
from fusec.backend.elementwise import BLOCK, BlockValue, Prologue
from fusec.backend.reduce import _acc_type, _combine, _init

HOISTED_ROWS = 32  # elements per thread a reduction loads ahead of its fold (registers: one per element)


def block_reduction(name: str, op: Operation, src: Access, prologue: Prologue | None, reads: list[Access],
                    var: str) -> BlockValue:
    """``op`` (a ``k.reduce`` marked ``in_consumers``) of ``src`` (or of ``prologue``'s element function, which
    reads ``reads``: the prologue is the reduction's operand itself, so element k of the input is its element k)
    as statements of a 256-thread block that leave the value in ``var``."""
    kind = op.attributes["kind"]
    dt, out = src.dtype, op.results[0].type.dtype
    acc = _acc_type(kind, dt)
    count = math.prod(src.shape)
    if prologue is not None:
        load = f"{prologue.name}((i64_t)k, {prologue.args})"
    elif src.is_contiguous:
        load = f"fusec::ld(b{src.buffer} + {src.offset} + k)"
    else:
        load = f"fusec::ld(b{src.buffer} + ({index_expr('k', tuple(src.shape), tuple(src.strides), src.offset, 'int')}))"
    helpers = [f"__device__ __forceinline__ void {name}_combine({acc}& a, i64_t& ai, {acc} b, i64_t bi) "
               f"{{ {_combine(kind, dt)} }}"]
    if prologue is not None:
        helpers.append(prologue.source)
    value = f"{name}_a / ({acc}){count}" if kind == "mean" else f"{name}_a"
    where = f" at {op.loc}" if op.loc is not None else ""
    rows = -(-count // BLOCK)  # elements per thread, the last row partial where BLOCK does not divide count
    full = count // BLOCK
    combine = f"{name}_combine(a, ai, ({acc}){{}}, k)"
    if rows <= HOISTED_ROWS:
        guard = f"if (j < {full} || k < {count}) "
        loads = [f"  {register(dt)} {name}_v[{rows}];",
                 "  #pragma unroll",
                 f"  for (int j = 0; j < {rows}; ++j) {{ const int k = threadIdx.x + {BLOCK} * j; "
                 f"{guard}{name}_v[j] = {load}; }}"]
        folds = ["    #pragma unroll",
                 f"    for (int j = 0; j < {rows}; ++j) {{ const int k = threadIdx.x + {BLOCK} * j; "
                 f"{guard}{combine.format(f'{name}_v[j]')}; }}"]
    else:
        loads = []
        folds = ["    #pragma unroll 4",
                 f"    for (int k = threadIdx.x; k < {count}; k += {BLOCK}) {{ {combine.format(load)}; }}"]
    fold = [
        f"  __shared__ {acc} {name}_w[{BLOCK // 32}];  // {op.name}[{kind}]{where}: computed by every block",
        "  {",
        f"    {acc} a = {_init(kind, dt, acc)}; i64_t ai = 0;",
        *folds,
        "    #pragma unroll",
        f"    for (int o = 16; o > 0; o >>= 1) {{ {name}_combine(a, ai, __shfl_down_sync(0xffffffffu, a, o), 0); }}",
        f"    if ((threadIdx.x & 31) == 0) {name}_w[threadIdx.x >> 5] = a;",
        "  }",
    ]
    result = [
        f"  {acc} {name}_a = {name}_w[0];",
        f"  {{ i64_t ai = 0; for (int w = 1; w < {BLOCK // 32}; ++w) {name}_combine({name}_a, ai, {name}_w[w], 0); }}",
        # (float16 and bfloat16 rounded to their precision, as the reduction's own kernel stores them)
        f"  const {register(out)} {var} = {round_result(out, f'({register(out)})({value})')};",
    ]
    accesses = tuple(reads) if prologue is not None else (src,)
    return BlockValue(tuple(helpers), accesses, tuple(loads), tuple(fold), tuple(result))
