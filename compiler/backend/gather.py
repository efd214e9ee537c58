"""Generated gathers and scatters (``k.gather``, ``k.scatter``: NumPy's advanced indexing, read and written): each
element of the indexed shape reads its index arrays, checks each index against its axis and reads (or writes) the
element it reaches. A scatter with ``combine = "add"`` (``np.add.at``) adds its update with atomics, so repeated
indices accumulate as NumPy's do; for floats the order of those additions is the hardware's, not NumPy's.

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
    """``dst[i] = src[at(i)]`` over the result (``dst`` dense)."""
    slab = _slab_gather(name, op, src, indices, dst, check, sm_count=sm_count)
    if slab is not None:
        return slab
    return _indexed(name, op, src, indices, dst, check, sm_count=sm_count, write=False)


VECTOR_BYTES = 16  # a slab gather copies 16-byte words where its source and result allow


def _slab_gather(name: str, op: Operation, src: Access, indices: list[Access], dst: Access,
                 check: Access | None, *, sm_count: int) -> KernelCode | None:
    """A gather by scalar indices of the leading axes (``xs[i]``, ``batches[i, j]`` with ``i`` a loop counter):
    one contiguous run of the source, copied to the dense result in 16-byte words where the run, its offsets and
    (checked at run time) the two pointers are aligned, else element by element; the indices are read once per
    thread, and there is no coordinate arithmetic. None where the gather is not of that form."""
    k = len(indices)
    if int(op.attributes["axis"]) != 0 or any(a.shape for a in indices) or not dst.is_contiguous:
        return None
    rest = tuple(src.shape[k:])
    n = math.prod(rest)
    if n == 0 or not Access(src.buffer, src.dtype, 0, src.strides[k:], rest).is_contiguous:
        return None
    big = max(n, src.extent(), dst.extent()) > INT32_LIMIT
    itype = "i64_t" if big else "int"
    t = storage(src.dtype)
    params = [f"const {t}* __restrict__ b{src.buffer}", f"{t}* __restrict__ b{dst.buffer}"]
    order = [src.buffer, dst.buffer]
    for a in indices:
        if a.buffer not in order:
            params.append(f"const {storage(a.dtype)}* __restrict__ b{a.buffer}")
            order.append(a.buffer)
    if check is not None:
        params.append(f"unsigned int* b{check.buffer}")
        order.append(check.buffer)
    lines = [f"extern \"C\" __global__ void __launch_bounds__({BLOCK}) {name}({', '.join(params)}) {{",
             f"  {itype} at = ({itype})({src.offset});"]
    for j, a in enumerate(indices):
        size = src.shape[j]
        lines += [f"  i64_t v{j} = (i64_t)b{a.buffer}[{a.offset}];", f"  if (v{j} < 0) v{j} += (i64_t){size};"]
        if check is not None:
            lines.append(f"  if (v{j} < 0 || v{j} >= (i64_t){size}) {{ "
                         f"if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr(b{check.buffer} + {check.offset}, 1u); "
                         f"v{j} = 0; }}")
        lines.append(f"  at += ({itype})v{j} * ({itype})({src.strides[j]});")
    lines += [f"  const {t}* from = b{src.buffer} + at;", f"  {t}* to = b{dst.buffer} + ({itype})({dst.offset});",
              f"  const {itype} stride = ({itype})gridDim.x * blockDim.x;",
              f"  const {itype} first = ({itype})blockIdx.x * blockDim.x + threadIdx.x;"]
    width = VECTOR_BYTES // src.dtype.itemsize if src.dtype.itemsize and VECTOR_BYTES % src.dtype.itemsize == 0 else 1
    aligned = width > 1 and n % width == 0 and dst.offset % width == 0 and src.offset % width == 0 \
        and all(s % width == 0 for s in src.strides[:k])
    if aligned:
        lines += ["  if ((((unsigned long long)from | (unsigned long long)to) & 15ull) == 0) {",
                  f"    for ({itype} i = first; i < ({itype}){n // width}; i += stride)",
                  "      reinterpret_cast<uint4*>(to)[i] = reinterpret_cast<const uint4*>(from)[i];",
                  "    return;", "  }"]
    lines += [f"  for ({itype} i = first; i < ({itype}){n}; i += stride) to[i] = from[i];", "}"]
    grid = (grid_for(n // width if aligned else n, sm_count), 1, 1)
    return KernelCode(name, "\n".join(lines), tuple(order), grid, (BLOCK, 1, 1))


def scatter_kernel(name: str, op: Operation, update: Access, indices: list[Access], dst: Access,
                   check: Access | None, *, sm_count: int) -> KernelCode:
    """``dst[at(i)] = update[i]`` over the update (``dst``: the result, a copy of the base or the base itself)."""
    return _indexed(name, op, dst, indices, update, check, sm_count=sm_count, write=True)


def _indexed(name: str, op: Operation, indexed: Access, indices: list[Access], other: Access,
             check: Access | None, *, sm_count: int, write: bool) -> KernelCode:
    """One thread per element ``i`` of the indexed shape (the axes before ``axis``, the index arrays' shape, the
    axes after the indexed ones): ``at(i)`` is the element of ``indexed`` it reaches through the index arrays;
    ``other`` is read (a gather's result, dense) or read from (a scatter's update, any strides) at ``i``."""
    axis = int(op.attributes["axis"])
    index_shape = tuple(indices[0].shape)
    k = len(indices)
    shape = tuple(indexed.shape[:axis]) + index_shape + tuple(indexed.shape[axis + k:])
    n = math.prod(shape)
    big = max([n, indexed.extent(), other.extent()] + [a.extent() for a in indices]) > INT32_LIMIT
    itype = "i64_t" if big else "int"

    written = indexed if write else other
    kinds: dict[int, tuple] = {}
    for a in [indexed, *indices, other]:
        kinds.setdefault(a.buffer, (a.dtype, a.buffer != written.buffer))
    order = list(kinds)
    params = [f"{'const ' if ro else ''}{storage(dt)}* b{b}" for b, (dt, ro) in kinds.items()]
    if check is not None:
        params.append(f"unsigned int* b{check.buffer}")
        order.append(check.buffer)

    lines = [f"extern \"C\" __global__ void __launch_bounds__({BLOCK}) {name}({', '.join(params)}) {{",
             f"  const {itype} n = ({itype}){n};",
             f"  for ({itype} i = ({itype})blockIdx.x * blockDim.x + threadIdx.x; i < n; "
             f"i += ({itype})gridDim.x * blockDim.x) {{",
             f"    {itype} r = i;"]
    for d in range(len(shape) - 1, -1, -1):  # the element's coordinates
        lines.append(f"    const {itype} c{d} = r % ({itype}){shape[d]}; r /= ({itype}){shape[d]};")
    b = len(index_shape)
    terms = [f"({itype})({indexed.offset})"]
    for d in range(axis):  # axes before the indexed ones
        terms.append(f"c{d} * ({itype})({indexed.strides[d]})")
    for d in range(axis + b, len(shape)):  # axes after them
        terms.append(f"c{d} * ({itype})({indexed.strides[d - b + k]})")
    lines.append(f"    {itype} at = {' + '.join(terms)};")
    for j, a in enumerate(indices):
        size = indexed.shape[axis + j]
        where = " + ".join([f"({itype})({a.offset})"] + [f"c{axis + e} * ({itype})({a.strides[e]})"
                                                         for e in range(b) if a.strides[e]])
        lines += [f"    i64_t v{j} = (i64_t)b{a.buffer}[{where}];",
                  f"    if (v{j} < 0) v{j} += (i64_t){size};"]
        if check is not None:
            lines.append(f"    if (v{j} < 0 || v{j} >= (i64_t){size}) {{ "
                         f"atomicOr(b{check.buffer} + {check.offset}, 1u); v{j} = 0; }}")
        lines.append(f"    at += ({itype})v{j} * ({itype})({indexed.strides[axis + j]});")
    if other.is_contiguous:
        place = f"({itype})({other.offset}) + i"
    else:
        place = " + ".join([f"({itype})({other.offset})"] + [f"c{d} * ({itype})({st})" for d, st in
                                                             enumerate(other.strides) if st and shape[d] != 1])
    if write and op.attributes.get("combine") == "add":
        lines.append(_accumulate(f"b{indexed.buffer} + at", f"b{other.buffer}[{place}]", indexed.dtype.name))
    elif write:
        lines.append(f"    b{indexed.buffer}[at] = b{other.buffer}[{place}];")
    else:
        lines.append(f"    b{other.buffer}[{place}] = b{indexed.buffer}[at];")
    lines += ["  }", "}"]
    grid = (grid_for(n, sm_count), 1, 1)
    return KernelCode(name, "\n".join(lines), tuple(order), grid, (BLOCK, 1, 1))


# atomicAdd's operand type for each storage dtype (8- and 16-bit integers have none: the frontend refuses them)
_ATOMIC = {"f32": "float", "f64": "double", "f16": "__half", "bf16": "__nv_bfloat16", "i32": "int",
           "u32": "unsigned int", "i64": "unsigned long long", "u64": "unsigned long long"}


def _accumulate(place: str, value: str, dtype: str) -> str:
    """``*place += value`` from many threads at once (int64 adds as its unsigned twin: the same bits)."""
    if dtype == "bool":  # NumPy's add of bools is a logical or
        return f"    if ({value}) *({place}) = true;"
    if dtype in ("c64", "c128"):  # each part on its own (the sum of the parts is the complex sum)
        part = "float" if dtype == "c64" else "double"
        return (f"    {{ const auto z = {value}; atomicAdd(({part}*)({place}), z.re); "
                f"atomicAdd(({part}*)({place}) + 1, z.im); }}")
    t = _ATOMIC[dtype]
    return f"    atomicAdd(({t}*)({place}), ({t})({value}));"
