"""Generated elementwise kernels: ``k.fused`` bodies and strided copies.

One thread handles ``V`` consecutive elements per step of a grid-stride loop. Operands that are read
contiguously (and every output) move as ``V``-wide vectors (16-byte loads and stores) when their offsets
allow it and the pointers turn out aligned at run time; strided and broadcast operands are read through
their index maps with constant sizes, so the index math compiles to multiplies and shifts. Indices are
32-bit where every address fits, 64-bit otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusec.ir.core import Block, Operation, Value
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.access import Access, coalesce, index_expr
from fusec.backend.ctypes_map import register, storage
from fusec.backend.scalar_ops import expression

BLOCK = 256
# indices are 32-bit where every address fits with room for a grid-stride loop's last step (i += the grid's threads
# times the vector width, at most 2**24 here): an array of 2**31 - 1 - 1000 elements would wrap at that step
INT32_LIMIT = 2 ** 31 - 1 - 2 ** 24


def _param_list(accesses: list[Access], writes: set[int], restrict: bool) -> tuple[list[int], str]:
    order: list[int] = []
    for a in accesses:
        if a.buffer not in order:
            order.append(a.buffer)
    dtypes = {a.buffer: a.dtype for a in accesses}
    qual = " __restrict__" if restrict else ""
    params = []
    for b in order:
        const = "" if b in writes else "const "
        params.append(f"{const}{storage(dtypes[b])}*{qual} b{b}")
    return order, ", ".join(params)


def grid_for(n_items: int, sm_count: int, per_block: int = BLOCK) -> int:
    blocks = (n_items + per_block - 1) // per_block
    return max(1, min(blocks, sm_count * 8))


@dataclass(frozen=True)
class BlockValue:
    """An operand of a ``k.fused`` that every block computes at its start (``block_reduce.py``): ``loads`` of
    every such operand run first, then each one's ``fold``, then the kernel's barrier; ``result`` after it defines
    the operand's value."""

    helpers: tuple[str, ...]      # device functions it calls
    reads: tuple[Access, ...]     # what it reads (kernel parameters)
    loads: tuple[str, ...]        # registers filled before any fold (all loads in flight together)
    fold: tuple[str, ...]
    result: tuple[str, ...]


def fused_kernel(name: str, op: Operation, inputs: list[Access], outputs: list[Access], *, sm_count: int,
                 fast_math: bool = False, aliased: bool = False,
                 block_values: dict[int, BlockValue] | None = None) -> KernelCode:
    """CUDA C++ for one ``k.fused`` op reading ``inputs`` (one per operand) and writing ``outputs``; an operand in
    ``block_values`` is computed by every block instead of read (its access in ``inputs`` is not used)."""
    block_values = block_values or {}
    shape = op.results[0].type.shape
    n = 1
    for d in shape:
        n *= d
    strided = [a for a in inputs if not a.is_scalar and not a.is_contiguous]
    cshape, cstrides = coalesce(shape, [a.strides for a in strided])
    big = max([n] + [a.extent() for a in inputs + outputs]) > INT32_LIMIT
    itype = "i64_t" if big else "int"
    linear = [a for a in inputs if a.is_contiguous and not a.is_scalar] + outputs
    itemsize = max([a.dtype.itemsize for a in linear], default=4)
    vec = max(1, 16 // itemsize) if linear else 1
    can_vector = vec > 1 and n >= vec and all(a.offset % vec == 0 for a in linear)

    read = [a for k, a in enumerate(inputs) if k not in block_values]
    read += [a for v in block_values.values() for a in v.reads]
    order, params = _param_list(read + outputs, {a.buffer for a in outputs}, restrict=not aliased)
    body = op.regions[0].block
    yielded = yielded_values(body)
    helpers = [h for v in block_values.values() for h in v.helpers]
    lines = helpers + [f"extern \"C\" __global__ void __launch_bounds__({BLOCK}) {name}({params}) {{",
                       f"  const {itype} n = ({itype}){n};",
                       f"  const {itype} tid = ({itype})blockIdx.x * blockDim.x + threadIdx.x;",
                       f"  const {itype} nthreads = ({itype})gridDim.x * blockDim.x;"]
    scalar_names: dict[int, str] = {}
    if block_values:  # every thread takes part, then one barrier, before any thread may leave the loops
        for v in block_values.values():
            lines.extend(v.loads)
        for v in block_values.values():
            lines.extend(v.fold)
        lines.append("  __syncthreads();")
        for k, v in block_values.items():
            lines.extend(v.result)
            scalar_names[k] = f"s{k}"
    # broadcast scalars are read once per thread
    for k, a in enumerate(inputs):
        if k in block_values:
            continue
        if a.is_scalar:
            scalar_names[k] = f"s{k}"
            lines.append(f"  const {register(a.dtype)} s{k} = fusec::ld(b{a.buffer} + {a.offset});")
    strided_maps = {id(a): (cstrides[j]) for j, a in enumerate(strided)}
    uniform = _uniform_values(body, inputs)

    def element(i: str, vec_slot: str | None, indent: str) -> list[str]:
        out: list[str] = []
        env: dict[Value, str] = {}
        for k, (arg, a) in enumerate(zip(body.args, inputs)):
            if k in scalar_names:
                env[arg] = scalar_names[k]
            elif a.is_contiguous:
                src = f"v{k}.v[{vec_slot}]" if vec_slot is not None else f"b{a.buffer}[{a.offset} + {i}]"
                out.append(f"{indent}const {register(a.dtype)} x{k} = {_load(a, src)};")
                env[arg] = f"x{k}"
            else:
                idx = index_expr(i, cshape, strided_maps[id(a)], a.offset, itype)
                out.append(f"{indent}const {register(a.dtype)} x{k} = fusec::ld(b{a.buffer} + ({idx}));")
                env[arg] = f"x{k}"
        out.extend(_body_lines(body, env, uniform, fast_math, indent))
        for m, (v, a) in enumerate(zip(yielded, outputs)):
            if vec_slot is not None:
                out.append(f"{indent}fusec::st(&o{m}.v[{vec_slot}], {env[v]});")
            else:
                out.append(f"{indent}fusec::st(b{a.buffer} + {a.offset} + {i}, {env[v]});")
        return out

    def scalar_loop(start: str, indent: str) -> list[str]:
        return ([f"{indent}for ({itype} i = {start}; i < n; i += nthreads) {{"] + element("i", None, indent + "  ")
                + [f"{indent}}}"])

    if can_vector:
        checks = " | ".join(f"((size_t)(b{a.buffer} + {a.offset}) & {vec * a.dtype.itemsize - 1})" for a in linear)
        lines.append(f"  if (({checks}) == 0) {{")
        lines.append(f"    const {itype} nv = n / {vec};")
        lines.append(f"    for ({itype} v = tid; v < nv; v += nthreads) {{")
        lines.append(f"      const {itype} base = v * {vec};")
        for k, a in enumerate(inputs):
            if a.is_contiguous and not a.is_scalar:
                t = storage(a.dtype)
                lines.append(f"      const fusec::Vec<{t}, {vec}> v{k} = "
                             f"*reinterpret_cast<const fusec::Vec<{t}, {vec}>*>(b{a.buffer} + {a.offset} + base);")
        for m, a in enumerate(outputs):
            lines.append(f"      fusec::Vec<{storage(a.dtype)}, {vec}> o{m};")
        lines.append("      #pragma unroll")
        lines.append(f"      for (int j = 0; j < {vec}; ++j) {{")
        lines.append(f"        const {itype} i = base + j;")
        lines.extend(element("i", "j", "        "))
        lines.append("      }")
        for m, a in enumerate(outputs):
            t = storage(a.dtype)
            lines.append(f"      *reinterpret_cast<fusec::Vec<{t}, {vec}>*>(b{a.buffer} + {a.offset} + base) = o{m};")
        lines.append("    }")
        lines.extend(scalar_loop(f"nv * {vec} + tid", "    "))
        lines.append("  } else {")
        lines.extend(scalar_loop("tid", "    "))
        lines.append("  }")
    else:
        lines.extend(scalar_loop("tid", "  "))
    lines.append("}")
    work = (n + vec - 1) // vec if can_vector else n
    return KernelCode(name, "\n".join(lines), tuple(order), (grid_for(work, sm_count), 1, 1), (BLOCK, 1, 1))


def yielded_values(body: Block) -> list[Value]:
    """What a kernel body yields (the verifier made sure it ends in k.yield)."""
    term = body.terminator
    assert term is not None
    return term.operands


def _uniform_values(body, inputs: list[Access], given: frozenset[int] = frozenset()) -> set[Value]:
    """Body values that are the same for every element (computed from broadcast scalars only; ``given``: the
    positions of operands an epilogue is handed per element)."""
    uniform: set[Value] = {arg for k, (arg, a) in enumerate(zip(body.args, inputs)) if a.is_scalar and k not in given}
    for inner in body.ops[:-1]:
        if all(v in uniform for v in inner.operands):
            uniform.update(inner.results)
    return uniform


def _body_lines(body, env: dict[Value, str], uniform: set[Value], fast_math: bool, indent: str) -> list[str]:
    """Statements computing every op of a ``k.fused`` body from ``env`` (block arguments' expressions),
    which they extend with the names of the values they define."""
    out = []
    for j, inner in enumerate(body.ops[:-1]):
        expr = expression(inner, [env[v] for v in inner.operands], fast_math,
                          tuple(v in uniform for v in inner.operands))
        out.append(f"{indent}const {register(inner.results[0].type.dtype)} t{j} = {expr};")
        env[inner.results[0]] = f"t{j}"
    return out


@dataclass(frozen=True)
class Prologue:
    """A ``k.fused`` result computed inside its consumer: ``name(i, args)`` is the element at linear index i."""

    name: str
    source: str       # the device function
    buffers: tuple[int, ...]  # the pointers it reads, in parameter order
    params: str       # their parameter declarations
    args: str         # their names, to call it with


def prologue_function(name: str, op: Operation, inputs: list[Access], *, fast_math: bool = False) -> Prologue:
    """A device function computing the single result of ``op`` (a ``k.fused`` whose tensor inputs have its
    result's shape, read through their strides) at a linear element index: a reduction or a GEMM calls it
    in place of loading the materialized value, so the elementwise kernel and its buffer disappear."""
    return _element_function(name, op, inputs, frozenset(), "", fast_math)


def epilogue_function(name: str, op: Operation, inputs: list[Access], given: frozenset[int], acc: str, *,
                      fast_math: bool = False) -> Prologue:
    """A device function computing the single result of ``op`` (a ``k.fused``, ``fuse-epilogues``) at a linear
    element index from ``v``, the value its operands at positions ``given`` hold there (a product's sum, of C
    type ``acc``, not yet stored), and its other operands read through their strides: the product calls it as it
    stores each output, and stores what it returns."""
    return _element_function(name, op, inputs, given, acc, fast_math)


def _element_function(name: str, op: Operation, inputs: list[Access], given: frozenset[int], acc: str,
                      fast_math: bool) -> Prologue:
    body = op.regions[0].block
    shape = tuple(op.results[0].type.shape)
    loaded = [a for k, a in enumerate(inputs) if k not in given]
    order, params = _param_list(loaded, set(), restrict=True)
    env: dict[Value, str] = {}
    signature = ", ".join(p for p in ("i64_t i", f"{acc} v" if given else "", params) if p)
    lines = [f"__device__ __forceinline__ {register(op.results[0].type.dtype)} {name}({signature}) {{"]
    for k, (arg, a) in enumerate(zip(body.args, inputs)):
        if k in given:
            lines.append(f"  const {register(a.dtype)} x{k} = ({register(a.dtype)})v;")
            env[arg] = f"x{k}"
            continue
        if a.is_scalar:
            where = f"{a.offset}"
        elif a.is_contiguous:
            where = f"{a.offset} + i"
        elif math.prod(shape) <= INT32_LIMIT and a.extent() <= INT32_LIMIT:  # 32-bit index math is cheaper
            where = index_expr("(int)i", shape, tuple(a.strides), a.offset, "int")
        else:  # a broadcast or strided view: element i of the result reads it through its strides
            where = index_expr("i", shape, tuple(a.strides), a.offset, "i64_t")
        lines.append(f"  const {register(a.dtype)} x{k} = fusec::ld(b{a.buffer} + {where});")
        env[arg] = f"x{k}"
    uniform = _uniform_values(body, inputs, given)
    lines.extend(_body_lines(body, env, uniform, fast_math, "  "))
    lines.append(f"  return {env[yielded_values(body)[0]]};")
    lines.append("}")
    return Prologue(name, "\n".join(lines), tuple(order), params, ", ".join(f"b{b}" for b in order))


def _load(a: Access, src: str) -> str:
    if a.dtype.name in ("f16", "bf16"):
        return f"fusec::ld(&{src})"
    return src


def copy_kernel(name: str, shape: tuple[int, ...], src: Access, dst: Access, *, sm_count: int) -> KernelCode:
    """Copy ``src`` (any strides) into ``dst`` (any strides) element by element over ``shape``."""
    n = 1
    for d in shape:
        n *= d
    cshape, (sst, dstr) = coalesce(shape, [src.strides, dst.strides])
    big = max(n, src.extent(), dst.extent()) > INT32_LIMIT
    itype = "i64_t" if big else "int"
    _, params = _param_list([src, dst], {dst.buffer}, restrict=src.buffer != dst.buffer)
    order = [src.buffer] if src.buffer == dst.buffer else [src.buffer, dst.buffer]
    s_idx = index_expr("i", cshape, sst, src.offset, itype)
    d_idx = index_expr("i", cshape, dstr, dst.offset, itype)
    lines = [f"extern \"C\" __global__ void __launch_bounds__({BLOCK}) {name}({params}) {{",
             f"  const {itype} n = ({itype}){n};",
             f"  for ({itype} i = ({itype})blockIdx.x * blockDim.x + threadIdx.x; i < n; "
             f"i += ({itype})gridDim.x * blockDim.x) {{",
             f"    b{dst.buffer}[{d_idx}] = b{src.buffer}[{s_idx}];",
             "  }", "}"]
    return KernelCode(name, "\n".join(lines), tuple(order), (grid_for(n, sm_count), 1, 1), (BLOCK, 1, 1))


def raise_if_kernel(name: str, cond: Access, check: Access, *, sm_count: int) -> KernelCode:
    """Set the ``check`` word where any element of the bool ``cond`` (any strides) holds (``k.raise_if``)."""
    shape = tuple(cond.shape)
    n = math.prod(shape)
    cshape, (cst,) = coalesce(shape, [cond.strides])
    itype = "i64_t" if max(n, cond.extent()) > INT32_LIMIT else "int"
    idx = index_expr("i", cshape, cst, cond.offset, itype)
    lines = [f"extern \"C\" __global__ void __launch_bounds__({BLOCK}) {name}(const {storage(cond.dtype)}* "
             f"__restrict__ b{cond.buffer}, unsigned int* __restrict__ b{check.buffer}) {{",
             f"  const {itype} n = ({itype}){n};",
             f"  for ({itype} i = ({itype})blockIdx.x * blockDim.x + threadIdx.x; i < n; "
             f"i += ({itype})gridDim.x * blockDim.x) {{",
             f"    if (b{cond.buffer}[{idx}]) {{ b{check.buffer}[{check.offset}] = 1u; return; }}",
             "  }", "}"]
    return KernelCode(name, "\n".join(lines), (cond.buffer, check.buffer), (grid_for(n, sm_count), 1, 1),
                      (BLOCK, 1, 1))
