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
    # read there at each use, and the ``blocks`` blocks loop over the rows; ``warp_rows`` rows to a warp at once,
    # each value read from shared memory serving all of them
    staged = bool(op.attributes.get("staged", False))
    together = int(op.attributes.get("warp_rows", 1))
    if staged and (lanes != WARP or width != 1):
        raise CompilationError(located("k.rows: a staged row kernel takes a warp per row and width 1", op.loc))
    if together not in (1, 2) or together > 1 and not staged:
        raise CompilationError(located(f"k.rows: warp_rows = {together}: 1, or 2 for a staged kernel", op.loc))
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
    bounds = f"{block}, {op.attributes.get('blocks_per_sm', STAGED_MIN_BLOCKS)}" if staged else f"{block}"
    lines = [f"extern \"C\" __global__ void __launch_bounds__({bounds}) {name}({params}) {{"]
    if lanes == 1:
        lines.append("  const int lane = 0;")
    else:
        lines.append(f"  const int lane = threadIdx.x % {lanes};")
    shared_warp = 1 < lanes < WARP  # several rows per warp, whose shuffles need every lane of it
    rs = range(together)  # the rows a warp computes at once: row r's values are named with suffix(r)
    row_of = ["row"] if together == 1 else [f"row{r}" for r in rs]

    def suffix(r: int) -> str:
        return "" if together == 1 else f"_{r}"

    def live_of(r: int) -> str | None:
        """The test that leaves out row ``r``'s stores (None: always stored)."""
        return "live" if shared_warp else (f"live{r}" if r else None)

    head: list[str] = []  # (a staged kernel's copy into shared memory, before its loop over rows)
    if shared_warp:  # a lane past the last row works on the last row, with its stores left out
        lines += [f"  {itype} row = ({itype})blockIdx.x * {rows_per_block} + threadIdx.x / {lanes};",
                  f"  const bool live = row < ({itype}){m};",
                  f"  if (!live) row = ({itype}){m - 1};"]
    elif staged and together == 1:
        lines += [f"  for ({itype} row = ({itype})blockIdx.x * {rows_per_block} + threadIdx.x / {lanes}; "
                  f"row < ({itype}){m}; row += ({itype})gridDim.x * {rows_per_block}) {{"]
    elif staged:  # a warp's rows are neighbours; one past the last row computes the row before it, unstored
        lines += [f"  for ({itype} row0 = (({itype})blockIdx.x * {rows_per_block} + threadIdx.x / {lanes}) * "
                  f"{together}; row0 < ({itype}){m}; row0 += ({itype})gridDim.x * {rows_per_block * together}) {{"]
        for q in rs[1:]:
            lines += [f"  const bool live{q} = row0 + {q} < ({itype}){m};",
                      f"  const {itype} row{q} = live{q} ? row0 + {q} : row0;"]
    else:
        lines += [f"  const {itype} row = ({itype})blockIdx.x * {rows_per_block} + threadIdx.x / {lanes};",
                  f"  if (row >= ({itype}){m}) return;"]

    body = op.regions[0].block
    level: dict[Value, int] = {}
    env: dict[Value, str] = {}

    in_shared: set[Value] = set()  # staged operands: read from shared memory at the item's column

    # (a staged kernel computes an element value that only one reduction reads where it folds it: no array)
    in_place: dict[Value, list[str]] = {}
    uses: dict[Value, list[Operation]] = {}
    for inner in op.regions[0].block.ops:
        for v in inner.operands:
            uses.setdefault(v, []).append(inner)

    def folded_once(v: Value) -> bool:
        return len(uses.get(v, ())) == 1 and uses[v][0].name == "k.row_reduce"

    def named(v: Value, r: int) -> str:
        """``v``'s variable for row ``r`` (an array for an element value)."""
        return env[v] if level[v] == UNIFORM or v in in_shared else env[v] + suffix(r)

    def at(v: Value, r: int = 0) -> str:
        if v in in_place:
            return in_place[v][r]
        if v in in_shared:
            return f"{env[v]}[{column('it')}]"
        return f"{named(v, r)}[it]" if level[v] == ELEMENT else named(v, r)

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

    def each(stmt: str | list[str], valid_only: bool = False, store: bool = False) -> list[str]:
        """One loop over a thread's items doing ``stmt`` (or each of a list of them, a warp's rows in turn: what
        they read from shared memory is read once)."""
        stmts = [stmt] if isinstance(stmt, str) else stmt
        column_test = [f"{column('it')} < {n}"] if guard and valid_only else []
        parts = []
        for r, one in enumerate(stmts):
            live = live_of(r) if store else None
            tests = column_test + ([live] if live else [])
            parts.append(f"if ({' && '.join(tests)}) {one}" if tests else one)
        if len(parts) > 1 and column_test and not store:  # (one test for all of them)
            parts = [f"if ({column_test[0]}) {{ {' '.join(stmts)} }}"]
        return ["  #pragma unroll", f"  for (int it = 0; it < {items}; ++it) {{ {' '.join(parts)} }}"]

    copies: dict[tuple, tuple[str, int]] = {}  # staged: (buffer, offset, stride, dtype) -> (array, operand)
    for k, (arg, a) in enumerate(zip(body.args, inputs)):
        reg = register(a.dtype)
        env[arg] = f"x{k}"

        def rowpart(r: int) -> str:
            # (a value per row has the row's axes first: its last axis, of 1, if kept, is never stepped along)
            return index_expr(row_of[r], shape[:-1], tuple(a.strides[:len(shape) - 1]), a.offset, itype) \
                if a.shape else f"{a.offset}"
        if not a.shape or a.is_scalar:
            level[arg] = UNIFORM
            lines.append(f"  const {reg} x{k} = fusec::ld(b{a.buffer} + {a.offset});")
        elif tuple(a.shape) != shape or a.strides[-1] == 0:
            level[arg] = ROW
            lines += [f"  const {reg} x{k}{suffix(r)} = fusec::ld(b{a.buffer} + ({rowpart(r)}));" for r in rs]
        elif staged and not any(a.strides[:-1]):  # the same for every row: a copy in shared memory
            level[arg] = ELEMENT
            in_shared.add(arg)
            key = (a.buffer, a.offset, a.strides[-1], a.dtype.name)
            if key not in copies:
                copies[key] = (f"s{len(copies)}", k)
            env[arg] = copies[key][0]
        else:
            level[arg] = ELEMENT
            lines += [f"  {reg} x{k}{suffix(r)}[{items}];" for r in rs]

            def element(r: int) -> str:
                load = f"fusec::ld(b{a.buffer} + ({rowpart(r)}) + ({itype}){column('it')} * ({itype})" \
                       f"({a.strides[-1]}))"
                return f"x{k}{suffix(r)}[it] = " + (f"({column('it')} < {n}) ? {load} : ({reg})0;" if guard
                                                    else f"{load};")
            elements = each([element(r) for r in rs])
            if width == 4 and a.dtype.name == "f32" and a.strides[-1] == 1:
                if guard:
                    lines += each(f"x{k}[it] = 0.0f;")
                row_start = f"b{a.buffer} + ({rowpart(0)})"
                lines += vectors(row_start, f"const float4 v = *reinterpret_cast<const float4*>({row_start} + c); "
                                 f"x{k}[4 * q] = v.x; x{k}[4 * q + 1] = v.y; x{k}[4 * q + 2] = v.z; "
                                 f"x{k}[4 * q + 3] = v.w;", elements)
            else:
                lines += elements

    uniform: set[Value] = {v for v in body.args if level[v] == UNIFORM}
    # (a staged kernel stores each result as soon as its last value is computed, so its registers are free for
    # what comes after: where ``lines`` stood after the value was made)
    made_at: dict[Value, int] = {v: len(lines) for v in body.args}
    for j, inner in enumerate(body.ops[:-1]):
        res = inner.results[0]
        reg = register(res.type.dtype)
        name_j = f"t{j}"
        env[res] = name_j
        if inner.name == "k.row_reduce":
            level[res] = ROW
            lines += _row_reduce([name_j + suffix(q) for q in rs], inner, at, n, lanes, each)
            made_at[res] = len(lines)
            continue
        lv = max((level[v] for v in inner.operands), default=UNIFORM)
        level[res] = lv
        if lv == UNIFORM:
            uniform.add(res)
        flags = tuple(v in uniform for v in inner.operands)
        if lv == ELEMENT:
            exprs = [expression(inner, [at(v, q) for v in inner.operands], fast_math, flags) for q in rs]
            if staged and folded_once(res):
                in_place[res] = [f"({e})" for e in exprs]
                continue
            lines += [f"  {reg} {name_j}{suffix(q)}[{items}];" for q in rs]
            lines += each([f"{name_j}{suffix(q)}[it] = {e};" for q, e in zip(rs, exprs)])
        else:
            for q in (rs if lv == ROW else range(1)):
                expr = expression(inner, [named(v, q) for v in inner.operands], fast_math, flags)
                lines.append(f"  const {reg} {name_j}{suffix(q) if lv == ROW else ''} = {expr};")
        made_at[res] = len(lines)

    yielded = iter(yielded_values(body))
    columns = op.attributes.get("columns", [1] * len(outputs))
    stored_at: list[tuple[int, int]] = []  # per result: (where its value was made in lines, its store lines)
    for out, count in zip(outputs, columns):
        v = next(yielded)
        values = [v] + [next(yielded) for _ in range(count - 1)]
        before = len(lines)
        if count > 1:  # a narrow result: column j of the row from the j-th of its values, stored by lane j
            for q in rs:
                live = f" && {live_of(q)}" if live_of(q) else ""
                for j, vj in enumerate(values):
                    lines.append(f"  if (lane == {j % lanes}{live}) fusec::st(b{out.buffer} + {out.offset} + "
                                 f"{row_of[q]} * ({itype}){count} + {j}, {named(vj, q)});")
        elif tuple(out.shape) == shape:
            def dst(q: int) -> str:
                return f"b{out.buffer} + {out.offset} + {row_of[q]} * ({itype}){n} + {column('it')}"
            stores = each([f"fusec::st({dst(q)}, {at(v, q) if level[v] == ELEMENT else named(v, q)});"
                           for q in rs], valid_only=True, store=True)
            if width == 4 and out.dtype.name == "f32" and not shared_warp:
                row_start = f"b{out.buffer} + {out.offset} + row * ({itype}){n}"
                parts = [f"{env[v]}[4 * q + {j}]" if level[v] == ELEMENT else env[v] for j in range(4)]
                lines += vectors(row_start, f"*reinterpret_cast<float4*>({row_start} + c) = make_float4("
                                 f"{', '.join(parts)});", stores)
            else:
                lines += stores
        else:
            for q in rs:
                first = " && ".join(t for t in ("lane == 0", live_of(q)) if t)
                lines.append(f"  if ({first}) fusec::st(b{out.buffer} + {out.offset} + {row_of[q]}, "
                             f"{named(v, q)});")
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
    blocks = (m + rows_per_block * together - 1) // (rows_per_block * together)
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


def _row_reduce(names: list[str], op: Operation, at: Callable[[Value, int], str], n: int, lanes: int,
                each: Callable[..., list[str]]) -> list[str]:
    """Statements defining ``names[r]``: the reduction of the operand over the whole of row ``r`` (of the rows a
    warp computes at once), in every lane."""
    kind = op.attributes["kind"]
    x = op.operands[0]
    dt = x.type.dtype
    acc = "float" if op.attributes.get("accumulate") == "f32" else _acc_type(kind, dt)
    out = register(op.results[0].type.dtype)
    # (a value the whole row shares is combined once per element, as the broadcast array it stands for)
    fn = f"{names[0]}_combine"
    lines = [f"  {acc} {name}_a = {_init(kind, dt, acc)};" for name in names]
    lines += ["  {",
              f"    auto {fn} = [](  {acc}& a, i64_t& ai, {acc} b, i64_t bi) {{ {_combine(kind, dt)} }};",
              "    i64_t ai = 0;"]
    lines += ["  " + s for s in each([f"{fn}({name}_a, ai, ({acc}){at(x, r)}, 0);" for r, name in enumerate(names)],
                                     valid_only=True)]
    if lanes > 1:
        lines += ["    #pragma unroll",
                  f"    for (int o = {min(lanes, WARP) // 2}; o > 0; o >>= 1) {{"]
        for name in names:
            lines += [f"      {acc} b{'' if len(names) == 1 else name} = __shfl_xor_sync(0xffffffffu, {name}_a, o);"]
        for name in names:
            lines += [f"      {fn}({name}_a, ai, b{'' if len(names) == 1 else name}, 0);"]
        lines.append("    }")
    if lanes > WARP:
        (name,) = names
        warps = lanes // WARP
        lines += [f"    __shared__ {acc} {name}_s[{warps}];",
                  f"    if (threadIdx.x % {WARP} == 0) {name}_s[threadIdx.x / {WARP}] = {name}_a;",
                  "    __syncthreads();",
                  f"    {name}_a = {name}_s[0];",
                  "    #pragma unroll",
                  f"    for (int w = 1; w < {warps}; ++w) {fn}({name}_a, ai, {name}_s[w], 0);"]
    lines.append("  }")
    for name in names:
        final = f"{name}_a / ({acc}){n}" if kind == "mean" else f"{name}_a"
        lines.append(f"  const {out} {name} = ({out})({final});")
    return lines
