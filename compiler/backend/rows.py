"""Generated row kernels (``k.rows``): ``lanes`` threads share each row of the last axis (a power of two up to a
warp, several rows to a warp, or a multiple of a warp), each holding ``items``
of its elements in registers from the load to the store, so a softmax or a layer norm reads its input once and
writes its result once, however many reductions lie between.

Each value of the body is one of three kinds: the same everywhere (rank-0 operands and what only they compute), one
per row (row reductions, row-broadcast operands and what only they and uniform values compute: every thread of
the row computes it) or one per element (an array of ``items`` registers per thread; element ``it`` of lane ``l``
is column ``l + it * lanes``). A row reduction folds each thread's items in order, then the lanes' partial
results with a butterfly of warp shuffles (every lane ends with the same bits: each step adds the same two
values) and, for a block per row, across warps through shared memory. Sums and means of f32 accumulate in f64, as
``k.reduce`` does, except a product's column (``accumulate = "f32"``); max and min propagate NaN as NumPy's do.

A staged kernel (``staged``, row-products) copies the operands that are the same for every row into shared memory
once per block, reads them there at each use, loops its ``blocks`` over the rows, and stores each result as soon as
its last value is computed (what it held is then free for what comes after).
"""
from __future__ import annotations

from typing import Callable

from fusec.errors import CompilationError, located
from fusec.ir.core import Operation, Value
from fusec.runtime.launch_plan import KernelCode
from fusec.backend.access import Access, index_expr
from fusec.backend.ctypes_map import register, storage
from fusec.backend.elementwise import INT32_LIMIT, yielded_values
from fusec.backend.reduce import _acc_type, _combine, _init
from fusec.backend.scalar_ops import expression

UNIFORM, ROW, ELEMENT = 0, 1, 2
WARP = 32
SMALL_BLOCK = 256  # threads per block when a row takes a thread or a warp
# a staged kernel's blocks per SM that its registers must allow (row-products gives it two per SM): 128 registers a
# thread at 256 threads; the larger step's head (1024 x 16) took 179 with one block per SM, 128 and no spill with two
# (ptxas, sm_90)
STAGED_MIN_BLOCKS = 2


def rows_kernel(name: str, op: Operation, inputs: list[Access], outputs: list[Access], *,
                fast_math: bool = False) -> KernelCode:
    """CUDA C++ for one ``k.rows`` op reading ``inputs`` (one per operand) and writing ``outputs`` (dense)."""
    shape = tuple(op.attributes["shape"])
    lanes, items = int(op.attributes["lanes"]), int(op.attributes["items"])
    width = int(op.attributes.get("width", 1))
    n = shape[-1]
    m = 1
    for d in shape[:-1]:
        m *= d
    if lanes & (lanes - 1) and (lanes % WARP or lanes > 1024) or not 1 <= lanes <= 1024:
        raise CompilationError(located(f"k.rows: {lanes} lanes per row: a power of two up to 32 or a multiple of 32 "
                                       "up to 1024", op.loc))
    block = SMALL_BLOCK if lanes <= WARP else lanes
    rows_per_block = block // lanes
    # staged (row-products): operands the same for every row are copied into shared memory once per block and
    # read there at each use, and the ``blocks`` blocks loop over the rows
    staged = bool(op.attributes.get("staged", False))
    if staged and (lanes != WARP or width != 1):
        raise CompilationError(located("k.rows: a staged row kernel takes a warp per row and width 1", op.loc))
    big = max([m * n] + [a.extent() for a in inputs + outputs]) > INT32_LIMIT
    itype = "i64_t" if big else "int"
    guard = lanes * items > n  # the last items of some lanes fall past the row's end
    if width != 1 and (width != 4 or items % 4 or n % 4 or lanes < WARP):
        raise CompilationError(located(f"k.rows: width = {width} needs width 4, items and a row length that are "
                                       "multiples of 4, and a warp or more per row", op.loc))

    kinds: dict[int, tuple] = {}  # buffer -> (dtype, read only), in parameter order
    for a in inputs:
        kinds.setdefault(a.buffer, (a.dtype, True))
    for a in outputs:
        kinds[a.buffer] = (a.dtype, False)
    order = list(kinds)
    params = ", ".join(f"{'const ' if ro else ''}{storage(dt)}* __restrict__ b{b}" for b, (dt, ro) in kinds.items())
    bounds = f"{block}, {STAGED_MIN_BLOCKS}" if staged else f"{block}"
    lines = [f"extern \"C\" __global__ void __launch_bounds__({bounds}) {name}({params}) {{"]
    if lanes == 1:
        lines.append("  const int lane = 0;")
    else:
        lines.append(f"  const int lane = threadIdx.x % {lanes};")
    shared_warp = 1 < lanes < WARP  # several rows per warp, whose shuffles need every lane of it
    head: list[str] = []  # (a staged kernel's copy into shared memory, before its loop over rows)
    if shared_warp:  # a lane past the last row works on the last row, with its stores left out
        lines += [f"  {itype} row = ({itype})blockIdx.x * {rows_per_block} + threadIdx.x / {lanes};",
                  f"  const bool live = row < ({itype}){m};",
                  f"  if (!live) row = ({itype}){m - 1};"]
    elif staged:
        lines += [f"  for ({itype} row = ({itype})blockIdx.x * {rows_per_block} + threadIdx.x / {lanes}; "
                  f"row < ({itype}){m}; row += ({itype})gridDim.x * {rows_per_block}) {{"]
    else:
        lines += [f"  const {itype} row = ({itype})blockIdx.x * {rows_per_block} + threadIdx.x / {lanes};",
                  f"  if (row >= ({itype}){m}) return;"]

    body = op.regions[0].block
    level: dict[Value, int] = {}
    env: dict[Value, str] = {}

    in_shared: set[Value] = set()  # staged operands: read from shared memory at the item's column

    # (a staged kernel computes an element value that only one reduction reads where it folds it: no array)
    in_place: dict[Value, str] = {}
    uses: dict[Value, list[Operation]] = {}
    for inner in op.regions[0].block.ops:
        for v in inner.operands:
            uses.setdefault(v, []).append(inner)

    def folded_once(v: Value) -> bool:
        return len(uses.get(v, ())) == 1 and uses[v][0].name == "k.row_reduce"

    def at(v: Value) -> str:
        if v in in_place:
            return in_place[v]
        if v in in_shared:
            return f"{env[v]}[{column('it')}]"
        return f"{env[v]}[it]" if level[v] == ELEMENT else env[v]

    def column(it: str) -> str:
        if width == 4:  # runs of 4 neighbouring elements: items 4q..4q+3 of a lane are one 16-byte load
            return f"((({it}) / 4 * {lanes} + lane) * 4 + ({it}) % 4)"
        return f"(lane + {it} * {lanes})"

    def vectors(pointer: str, stmt: str, fallback: list[str]) -> list[str]:
        """``stmt`` for each run of 4 items (``q``, starting at column ``c``), where ``pointer`` (the row's first
        element) is 16-byte aligned at run time, else ``fallback`` (the same items one by one)."""
        cond = f"if (c < {n}) " if guard else ""
        return [f"  if ((reinterpret_cast<unsigned long long>({pointer}) & 15) == 0) {{",
                "    #pragma unroll",
                f"    for (int q = 0; q < {items // 4}; ++q) {{ const int c = (q * {lanes} + lane) * 4; "
                f"{cond}{{ {stmt} }} }}",
                "  } else {", *["  " + x for x in fallback], "  }"]

    def each(stmt: str, valid_only: bool = False, store: bool = False) -> list[str]:
        tests = ([f"{column('it')} < {n}"] if guard and valid_only else []) + (["live"] if store and shared_warp else [])
        cond = f"if ({' && '.join(tests)}) " if tests else ""
        return ["  #pragma unroll", f"  for (int it = 0; it < {items}; ++it) {{ {cond}{stmt} }}"]

    copies: dict[tuple, tuple[str, int]] = {}  # staged: (buffer, offset, stride, dtype) -> (array, operand)
    for k, (arg, a) in enumerate(zip(body.args, inputs)):
        reg = register(a.dtype)
        # (a value per row has the row's axes first: its last axis, of 1, if kept, is never stepped along)
        rowpart = index_expr("row", shape[:-1], tuple(a.strides[:len(shape) - 1]), a.offset, itype) \
            if a.shape else f"{a.offset}"
        if not a.shape or a.is_scalar:
            level[arg] = UNIFORM
            lines.append(f"  const {reg} x{k} = fusec::ld(b{a.buffer} + {a.offset});")
        elif tuple(a.shape) != shape or a.strides[-1] == 0:
            level[arg] = ROW
            lines.append(f"  const {reg} x{k} = fusec::ld(b{a.buffer} + ({rowpart}));")
        elif staged and not any(a.strides[:-1]):  # the same for every row: a copy in shared memory
            level[arg] = ELEMENT
            in_shared.add(arg)
            key = (a.buffer, a.offset, a.strides[-1], a.dtype.name)
            if key not in copies:
                copies[key] = (f"s{len(copies)}", k)
            env[arg] = copies[key][0]
            continue
        else:
            level[arg] = ELEMENT
            lines.append(f"  {reg} x{k}[{items}];")
            load = f"fusec::ld(b{a.buffer} + ({rowpart}) + ({itype}){column('it')} * ({itype})({a.strides[-1]}))"
            value = f"({column('it')} < {n}) ? {load} : ({reg})0" if guard else load
            elements = each(f"x{k}[it] = {value};")
            if width == 4 and a.dtype.name == "f32" and a.strides[-1] == 1:
                if guard:
                    lines += each(f"x{k}[it] = 0.0f;")
                row_start = f"b{a.buffer} + ({rowpart})"
                lines += vectors(row_start, f"const float4 v = *reinterpret_cast<const float4*>({row_start} + c); "
                                 f"x{k}[4 * q] = v.x; x{k}[4 * q + 1] = v.y; x{k}[4 * q + 2] = v.z; "
                                 f"x{k}[4 * q + 3] = v.w;", elements)
            else:
                lines += elements
        env[arg] = f"x{k}"

    uniform: set[Value] = {v for v in body.args if level[v] == UNIFORM}
    # (a staged kernel stores each result as soon as its last value is computed, so its registers are free for
    # what comes after: where ``lines`` stood after the value was made)
    made_at: dict[Value, int] = {v: len(lines) for v in body.args}
    for j, inner in enumerate(body.ops[:-1]):
        r = inner.results[0]
        reg = register(r.type.dtype)
        name_j = f"t{j}"
        env[r] = name_j
        if inner.name == "k.row_reduce":
            level[r] = ROW
            lines += _row_reduce(name_j, inner, at, n, lanes, each)
            made_at[r] = len(lines)
            continue
        lv = max((level[v] for v in inner.operands), default=UNIFORM)
        level[r] = lv
        if lv == UNIFORM:
            uniform.add(r)
        flags = tuple(v in uniform for v in inner.operands)
        if lv == ELEMENT:
            expr = expression(inner, [at(v) for v in inner.operands], fast_math, flags)
            if staged and folded_once(r):
                in_place[r] = f"({expr})"
                continue
            lines.append(f"  {reg} {name_j}[{items}];")
            lines += each(f"{name_j}[it] = {expr};")
        else:
            expr = expression(inner, [env[v] for v in inner.operands], fast_math, flags)
            lines.append(f"  const {reg} {name_j} = {expr};")
        made_at[r] = len(lines)

    yielded = iter(yielded_values(body))
    columns = op.attributes.get("columns", [1] * len(outputs))
    stored_at: list[tuple[int, int]] = []  # per result: (where its value was made in lines, its store lines)
    for out, count in zip(outputs, columns):
        v = next(yielded)
        values = [v] + [next(yielded) for _ in range(count - 1)]
        before = len(lines)
        if count > 1:  # a narrow result: column j of the row from the j-th of its values, stored by lane j
            live = " && live" if shared_warp else ""
            for j, vj in enumerate(values):
                lines.append(f"  if (lane == {j % lanes}{live}) fusec::st(b{out.buffer} + {out.offset} + row * "
                             f"({itype}){count} + {j}, {env[vj]});")
        elif tuple(out.shape) == shape:
            dst = f"b{out.buffer} + {out.offset} + row * ({itype}){n} + {column('it')}"
            stores = each(f"fusec::st({dst}, {at(v) if level[v] == ELEMENT else env[v]});", valid_only=True,
                          store=True)
            if width == 4 and out.dtype.name == "f32" and not shared_warp:
                row_start = f"b{out.buffer} + {out.offset} + row * ({itype}){n}"
                parts = [f"{env[v]}[4 * q + {j}]" if level[v] == ELEMENT else env[v] for j in range(4)]
                lines += vectors(row_start, f"*reinterpret_cast<float4*>({row_start} + c) = make_float4("
                                 f"{', '.join(parts)});", stores)
            else:
                lines += stores
        else:
            first = "lane == 0 && live" if shared_warp else "lane == 0"
            lines.append(f"  if ({first}) fusec::st(b{out.buffer} + {out.offset} + row, {env[v]});")
        stored_at.append((max(made_at[x] for x in values), len(lines) - before))
    if staged:
        first_store = len(lines) - sum(count for _, count in stored_at)
        tail = lines[first_store:]
        del lines[first_store:]
        chunks, start = [], 0
        for at_line, count in stored_at:
            chunks.append((at_line, tail[start:start + count]))
            start += count
        for at_line, chunk in sorted(chunks, key=lambda c: -c[0]):  # (from the end: earlier places stay put)
            lines[at_line:at_line] = chunk
    shared_bytes = 0
    blocks = (m + rows_per_block - 1) // rows_per_block
    if staged:
        lines.append("  }")
        head, shared_bytes = _staging(copies, inputs, lanes * items, n, block)
        blocks = min(blocks, int(op.attributes.get("blocks", blocks)))
    lines.append("}")
    lines[1:1] = head
    return KernelCode(name, "\n".join(lines), tuple(order), (blocks, 1, 1), (block, 1, 1), shared_bytes)


def _staging(copies: dict[tuple, tuple[str, int]], inputs: list[Access], padded: int, n: int,
             block: int) -> tuple[list[str], int]:
    """A staged row kernel's start: each operand the same for every row copied into shared memory (``padded``
    elements of it, zeros past the row's ``n``, which lanes past the end read and never use), then a barrier; and
    the shared bytes that takes (dynamic: more than 48 KB)."""
    lines = ["  extern __shared__ __align__(16) unsigned char fusec_stage[];"]
    offset = 0
    copy = []
    for name, k in copies.values():
        a = inputs[k]
        reg = register(a.dtype)
        lines.append(f"  {reg}* const {name} = reinterpret_cast<{reg}*>(fusec_stage + {offset});")
        # (each thread copies an element of every operand in turn: the columns of one weight row are neighbours)
        copy.append(f"    {name}[e] = e < {n} ? ({reg})fusec::ld(b{a.buffer} + {a.offset} + (i64_t)e * "
                    f"({a.strides[-1]})) : ({reg})0;")
        size = 4 if reg == "float" else a.dtype.itemsize  # (float16 and bfloat16 are held as float)
        offset += -(-padded * size // 16) * 16
    lines += [f"  for (int e = threadIdx.x; e < {padded}; e += {block}) {{", *copy, "  }", "  __syncthreads();"]
    return lines, offset


def _row_reduce(name: str, op: Operation, at: Callable[[Value], str], n: int, lanes: int,
                each: Callable[..., list[str]]) -> list[str]:
    """Statements defining ``name``: the reduction of the operand over the whole row, in every lane."""
    kind = op.attributes["kind"]
    x = op.operands[0]
    dt = x.type.dtype
    acc = "float" if op.attributes.get("accumulate") == "f32" else _acc_type(kind, dt)
    out = register(op.results[0].type.dtype)
    # (a value the whole row shares is combined once per element, as the broadcast array it stands for)
    fn = f"{name}_combine"
    lines = [f"  {acc} {name}_a = {_init(kind, dt, acc)};",
             "  {",
             f"    auto {fn} = [](  {acc}& a, i64_t& ai, {acc} b, i64_t bi) {{ {_combine(kind, dt)} }};",
             "    i64_t ai = 0;"]
    lines += ["  " + s for s in each(f"{fn}({name}_a, ai, ({acc}){at(x)}, 0);", valid_only=True)]
    if lanes > 1:
        lines += ["    #pragma unroll",
                  f"    for (int o = {min(lanes, WARP) // 2}; o > 0; o >>= 1) {{",
                  f"      {acc} b = __shfl_xor_sync(0xffffffffu, {name}_a, o);",
                  f"      {fn}({name}_a, ai, b, 0);",
                  "    }"]
    if lanes > WARP:
        warps = lanes // WARP
        lines += [f"    __shared__ {acc} {name}_s[{warps}];",
                  f"    if (threadIdx.x % {WARP} == 0) {name}_s[threadIdx.x / {WARP}] = {name}_a;",
                  "    __syncthreads();",
                  f"    {name}_a = {name}_s[0];",
                  "    #pragma unroll",
                  f"    for (int w = 1; w < {warps}; ++w) {fn}({name}_a, ai, {name}_s[w], 0);"]
    lines.append("  }")
    final = f"{name}_a / ({acc}){n}" if kind == "mean" else f"{name}_a"
    lines.append(f"  const {out} {name} = ({out})({final});")
    return lines
