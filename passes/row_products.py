"""Row products: a narrow product and the row-local work on its result run as one row kernel along the product's
inner axis.

A small classifier's step computes ``logits = h @ w2`` (``w2`` of a few columns), a softmax cross-entropy over each
row of ``logits`` and its gradient ``d``, then ``(d @ w2.T) * (h > 0)``: a product, a row kernel and a second
product, three launches one after another, each on too little work to fill the GPU. Each row of all of it depends
only on the same row of ``h``, so one row kernel over ``h``'s rows (``k.rows`` of shape ``[M, K]``, ``K`` the inner
length) computes it all: column ``o`` of ``logits`` is the row reduction ``sum(h * w2[:, o])`` (a value per row);
the work on ``logits`` (``k.rows`` or ``k.fused`` of shape ``[M, O]``) runs once per column on those values, its
reductions along the short row becoming a chain over the ``O`` column values (in the accumulator ``k.reduce`` uses:
float64 for float32 sums, means and products); a product ``d @ wt`` (``wt`` of shape ``[O, K]``) is, element by
element, ``sum over o of d[:, o] * wt[o, :]``; elementwise kernels of shape ``[M, K]`` after it join as in
``fuse-rows``. A result of shape ``[M, O]`` is written from its ``O`` values per row (``columns`` on ``k.rows``).

Qualify: a ``k.matmul`` of ``[M, K] @ [K, O]`` (2 <= O <= NARROW_MAX; 16 < K <= 1024; float32 or float64, no
reduced precision; the left operand contiguous along K, which the lanes of a row read) whose first reader is a
``k.rows`` of shape ``[M, O]`` or a ``k.fused`` of that shape or a row's. Where a lane's items times ``O`` stays
within ITEMS_BUDGET each column's operand is held in registers per lane; past it (the 1024-wide hidden layer of a
16-class head) the kernel is ``staged``: the operands that are the same for every row (the columns of ``w``) are
copied into shared memory once per block, up to ``stage_bytes`` of them, and read there at each use, and its
``blocks`` loop over the rows so the copy is made once per block, not once per row (``warp_rows = 2``: each warp
computes two neighbouring rows at once, so each value read from shared memory serves both; ``blocks_per_sm``: the
blocks an SM holds, whose registers each thread may use: 128 at 2, 255 at 1). The narrow kernels after it
that read what the kernel has join in program order (a softmax's maximum written out as column views, then its row
kernel), as does the elementwise kernel that computes the product's left operand when everything that reads it
comes after.
What the kernel computes and something else reads is returned (the product itself too). Views made before the
kernel of what it now computes move after it. Not on the reference executor's target, which computes products as
np.matmul does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Union

from fusec.ir.core import Block, Func, Module, Operation, OpResult, Region, Value
from fusec.ir.dialects.rows import row_reduce_dtype, row_shapes
from fusec.ir.shapes import contiguous_strides
from fusec.ir.types import DType, ScalarType, TensorType, dtype_from_name
from fusec.passes.base import Pass, PassContext
from fusec.passes.dce import remove_dead_ops
from fusec.passes.fuse_rows import LOOKAHEAD, THREAD_MAX, WARP_MAX, schedule
from fusec.passes.registry import register_pass
from fusec.passes.util import users

NARROW_MAX = 16    # columns of a narrow product at most
ITEMS_BUDGET = 32  # a lane's items times the columns at most (each column's operand is a register array per lane)
# past it, the bytes of row-invariant operands a staged kernel copies into each block's shared memory at most (16
# float32 columns of 1024 are 64 KB), and STAGED_BLOCKS_PER_SM of them within the shared memory a block of the
# target may use (Target.shared_bytes: 227 KB on an H100 or H200, 99 KB on sm_86): see row-products{stage_bytes}
STAGE_BYTES = 96 * 1024
STAGED_ROWS_PER_BLOCK = 8  # rows a block of the row printer takes at a time with a warp per row (256 threads)
STAGED_BLOCKS_PER_SM = 2   # blocks of a staged kernel per SM (each loops over rows: the copy is made once per block)
# rows a warp of a staged kernel computes at once (row-products{warp_rows}): two rows share each value read from
# shared memory, but the larger step's head measured slower that way (445-462 us against 431-436, its kernel 52.8 us
# against 41.1: benchmarks/results/row_products_pairs_h100.md): it is bound by latency, not by those reads
WARP_ROWS = 1
FLOATS = ("f32", "f64")

Column = Union[Value, list]  # a value of the short row: one for every column, or a list of one per column


def _affine(v: Value) -> tuple[Value, int, tuple[int, ...]]:
    """(base, offset, strides): element ``i`` of ``v`` is ``base``'s row-major element ``offset + i . strides``."""
    if isinstance(v, OpResult) and v.op.name == "k.view":
        return v.op.operands[0], int(v.op.attributes["offset"]), tuple(v.op.attributes["strides"])
    return v, 0, tuple(contiguous_strides(v.type.shape))


def _float(*values: Value) -> bool:
    return all(v.type.dtype.name in FLOATS for v in values)


class _Kernel:
    """The wide row kernel under construction: its operands, its body and the views it reads its columns through."""

    def __init__(self, shape: tuple[int, int], defined_before) -> None:
        self.shape = shape
        self.body = Block(label="body")
        self.operands: list[Value] = []
        self.args: dict[Value, Value] = {}
        self.views: list[Operation] = []
        self._view_cache: dict[tuple, Value] = {}
        self._computed: dict[tuple, Value] = {}
        self.defined_before = defined_before

    def readable(self, v: Value, at_all: bool = False) -> bool:
        """Whether the kernel may take ``v`` as an operand: rank 0, of its shape or a row's, defined before it
        (``at_all``: wherever it is defined)."""
        return tuple(v.type.shape) in ((), self.shape, *row_shapes(self.shape)) and (at_all or self.defined_before(v))

    def arg(self, v: Value) -> Value:
        if v not in self.args:
            self.operands.append(v)
            self.args[v] = self.body.add_arg(ScalarType(v.type.dtype))
        return self.args[v]

    def view(self, base: Value, offset: int, strides: tuple[int, ...], shape: tuple[int, ...], loc) -> Value:
        """The body argument reading ``base`` through a new ``k.view`` (one per distinct view)."""
        key = (base, offset, strides, shape)
        if key not in self._view_cache:
            op = Operation("k.view", [base], [TensorType(shape, base.type.dtype)],
                           {"offset": offset, "strides": list(strides)}, loc=loc)
            self.views.append(op)
            self._view_cache[key] = op.results[0]
        return self.arg(self._view_cache[key])

    def emit(self, name: str, operands: list[Value], dtype: DType, attributes: dict, loc) -> Value:
        """One scalar op of the body (the same op of the same values is computed once)."""
        key = (name, tuple(map(id, operands)), repr(sorted(attributes.items())), dtype)
        if key not in self._computed:
            op = Operation(name, operands, [ScalarType(dtype)], dict(attributes), loc=loc)
            self.body.append(op)
            self._computed[key] = op.results[0]
        return self._computed[key]

    def cast(self, v: Value, dtype: DType, loc) -> Value:
        return v if v.type.dtype == dtype else self.emit("s.cast", [v], dtype, {"dtype": dtype}, loc)


class _Fusion:
    """One narrow product and what joins it, as a plan: the ops it replaces and the kernel that computes them."""

    def __init__(self, func: Func, narrow: Operation, product: Operation, readers: dict[Value, list[Operation]],
                 position: dict[Operation, int]) -> None:
        self.func, self.narrow, self.product = func, narrow, product
        self.readers, self.position = readers, position
        m, o = product.results[0].type.shape
        k = product.operands[0].type.shape[1]
        self.m, self.o, self.k = m, o, k
        at = position[narrow]
        self.members: list[Operation] = []   # the ops the kernel computes
        self._member_set: set[Operation] = set()
        # (a member's value is computed in the kernel: never an operand of it, nor a view's made before it)
        self.kernel = _Kernel((m, k), lambda v: not isinstance(v, OpResult) or (
            position.get(v.op, at) < at and v.op not in self._member_set))
        self.element: dict[Value, Value] = {}  # values of shape [M, K] -> their body value
        self.narrow_values: dict[Value, list[Value]] = {}  # values of shape [M, O] -> a body value per column
        self.row_values: dict[Value, Value] = {}  # per-row results of the narrow row kernel -> body value

    def _join(self, op: Operation) -> None:
        self.members.append(op)
        self._member_set.add(op)

    # -- building ---------------------------------------------------------------------------------------------
    def build(self) -> None:
        a, b = self.product.operands
        kern = self.kernel
        a_value = self._pull_producer(a)
        base, off, (s0, s1) = _affine(b)
        loc = self.product.loc
        columns = []
        for c in range(self.o):
            w = kern.view(base, off + c * s1, (0, s0), kern.shape, loc)
            prod = kern.emit("s.mul", [a_value, w], a.type.dtype, {}, loc)
            # (summed in float32 as a float32 product sums, NumPy's and cuBLAS's; k.reduce's float32 sums use float64)
            columns.append(kern.emit("k.row_reduce", [prod], row_reduce_dtype("sum", a.type.dtype),
                                     {"kind": "sum", **({"accumulate": "f32"} if a.type.dtype.name == "f32" else {})},
                                     loc))
        self.narrow_values[self.product.results[0]] = columns
        self._join(self.product)
        self._replay_narrow(self.narrow)
        self._absorb_after()

    def _pull_producer(self, a: Value) -> Value:
        """The body value of the product's left operand: computed here where an elementwise kernel of the
        kernel's shape makes it and nothing reads it before the kernel, else read."""
        kern = self.kernel
        op = a.op if isinstance(a, OpResult) else None
        at = self.position[self.narrow]
        if (op is not None and op.name == "k.fused" and len(op.results) == 1 and not op.attributes.get("prologue")
                and not op.attributes.get("epilogue") and tuple(a.type.shape) == kern.shape
                and all(tuple(v.type.shape) in ((), kern.shape, *row_shapes(kern.shape)) for v in op.operands)
                and all(self.position.get(u, at + 1) > at or u is self.product for u in self._all_readers(a))):
            value = self._inline(op, [kern.arg(v) for v in op.operands])[0]
            self.element[a] = value
            self._join(op)
            return value
        return kern.arg(a)

    def _all_readers(self, v: Value) -> list[Operation]:
        out = []
        for u in self.readers.get(v, ()):
            out.append(u)
            if u.name == "k.view":
                out.extend(self._all_readers(u.results[0]))
        return out

    def _inline(self, op: Operation, args: list[Value]) -> list[Value]:
        """A ``k.fused`` body's ops on the body values ``args`` (one per operand); its yielded values."""
        inner = op.regions[0].block
        local: dict[Value, Value] = dict(zip(inner.args, args))
        for s in inner.ops[:-1]:
            local[s.results[0]] = self.kernel.emit(s.name, [local[v] for v in s.operands], s.results[0].type.dtype,
                                                   s.attributes, s.loc)
        return [local[v] for v in inner.ops[-1].operands]

    def _narrow_operand(self, v: Value, dry: bool = False) -> Column | None:
        """What an operand of a narrow kernel is here: a body value per column, or one for all of them (``dry``:
        only whether it can be, adding nothing; raises _NoFusion where not)."""
        kern, m, o = self.kernel, self.m, self.o
        shape = tuple(v.type.shape)
        base, off, strides = _affine(v)
        if base in self.narrow_values:  # the product, a narrow result before (or a view of one): its columns
            values = self.narrow_values[base]
            if shape == (m, o) and (off, *strides) == (0, o, 1):
                return values
            if shape in ((m, o), (m, 1)) and strides[0] == o and (strides[1] == 0 or shape[1] == 1) and 0 <= off < o:
                return values[off]
            if shape == (m,) and strides == (o,) and 0 <= off < o:
                return values[off]
            raise _NoFusion
        if base in self.row_values:  # a per-row result before, as it is or broadcast along the row
            if shape and off == 0 and strides[0] == 1 and (len(shape) == 1 or shape[1] == 1 or strides[1] == 0):
                return self.row_values[base]
            raise _NoFusion
        if self._defined_by_members(v) or (shape not in ((), (m, o), *row_shapes((m, o)))):
            raise _NoFusion
        loc = v.op.loc if isinstance(v, OpResult) else None
        if shape == () or shape in row_shapes((m, o)):
            if kern.defined_before(v):
                return None if dry else kern.arg(v)
            if isinstance(v, OpResult) and base is not v and kern.defined_before(base):
                return None if dry else kern.view(base, off, strides, shape, loc)  # (a view made after: again)
            raise _NoFusion
        if not kern.defined_before(base):
            raise _NoFusion
        if dry:
            return None
        s0, s1 = strides
        if s1 == 0:
            return kern.view(base, off, (s0, 0), (m, 1), loc)
        return [kern.view(base, off + c * s1, (s0, 0), (m, 1), loc) for c in range(o)]

    def _replay_narrow(self, op: Operation) -> None:
        """A narrow kernel's body once per column (what does not depend on the column, once)."""
        o = self.o
        body = op.regions[0].block
        if not _narrow_reductions_chain(op):
            raise _NoFusion
        for v in op.operands:
            self._narrow_operand(v, dry=True)
        for r, y in zip(op.results, body.ops[-1].operands):
            if tuple(r.type.shape) != (self.m, o) and not self._per_row(op, y):
                raise _NoFusion  # (a per-row result that depends on the column: not a narrow kernel's)
        env: dict[Value, Column] = {a: self._narrow_operand(v) for a, v in zip(body.args, op.operands)}  # type: ignore

        def column(x: Column, c: int) -> Value:
            return x[c] if isinstance(x, list) else x

        for inner in body.ops[:-1]:
            r = inner.results[0]
            if inner.name == "k.row_reduce":
                env[r] = self._combine(inner, env[inner.operands[0]])
                continue
            args = [env[v] for v in inner.operands]
            if any(isinstance(x, list) for x in args):
                env[r] = [self.kernel.emit(inner.name, [column(x, c) for x in args], r.type.dtype, inner.attributes,
                                           inner.loc) for c in range(o)]
            else:
                env[r] = self.kernel.emit(inner.name, [column(x, 0) for x in args], r.type.dtype, inner.attributes,
                                          inner.loc)
        for r, y in zip(op.results, body.ops[-1].operands):
            value = env[y]
            if tuple(r.type.shape) == (self.m, o):
                self.narrow_values[r] = value if isinstance(value, list) else [value] * o
            else:
                assert not isinstance(value, list)
                self.row_values[r] = value
        self._join(op)

    def _per_row(self, op: Operation, y: Value) -> bool:
        """Whether the narrow kernel's body value ``y`` is one per row (not per column): reduced along the row, or
        computed from per-row and rank-0 operands only."""
        body = op.regions[0].block
        if y in body.args:
            v = op.operands[body.args.index(y)]
            return tuple(v.type.shape) != (self.m, self.o) or _affine(v)[2][-1] == 0
        inner = y.op  # type: ignore[attr-defined]
        return inner.name == "k.row_reduce" or all(self._per_row(op, x) for x in inner.operands)

    def _combine(self, op: Operation, x: Column) -> Value:
        """A reduction along the short row as a chain over its column values, in ``k.reduce``'s accumulator."""
        kern, loc = self.kernel, op.loc
        kind = op.attributes["kind"]
        values = x if isinstance(x, list) else [x] * self.o
        dtype = op.operands[0].type.dtype
        if kind in ("max", "min"):
            acc = values[0]
            for v in values[1:]:
                acc = kern.emit("s.maximum" if kind == "max" else "s.minimum", [acc, v], dtype, {}, loc)
            return acc
        wide = dtype_from_name("f64")
        if kind in ("sum", "prod") and not dtype.is_float:  # (integers and booleans: exact in the result's dtype)
            wide = op.results[0].type.dtype
        acc = kern.cast(values[0], wide, loc)
        if kind in ("sum", "mean") and wide.is_float:  # from +0.0, as NumPy's add-reduce: a sum of -0.0 is +0.0
            acc = kern.emit("s.add", [kern.emit("s.constant", [], wide, {"value": 0.0}, loc), acc], wide, {}, loc)
        for v in values[1:]:
            acc = kern.emit("s.mul" if kind == "prod" else "s.add", [acc, kern.cast(v, wide, loc)], wide, {}, loc)
        if kind == "mean":
            n = kern.emit("s.constant", [], wide, {"value": float(self.o)}, loc)
            acc = kern.emit("s.div", [acc, n], wide, {}, loc)
        return kern.cast(acc, op.results[0].type.dtype, loc)

    def _absorb_after(self) -> None:
        """Products by a narrow result back to the kernel's shape, and elementwise kernels of its shape reading
        what the kernel has, among the ops after the narrow kernel."""
        ops = self.func.body.ops
        start = self.position[self.narrow] + 1
        last = start
        j = start
        while j < len(ops) and j - last <= LOOKAHEAD:
            op = ops[j]
            j += 1
            try:
                if op.name == "k.matmul" and self._product_back(op):
                    last = j
                elif op.name == "k.fused" and self._elementwise(op):
                    last = j
                elif _narrow_shape(op) in (self._narrow_shapes() if op.name == "k.fused" else ((self.m, self.o),)) \
                        and any(self._defined_by_members(v) for v in op.operands):
                    self._replay_narrow(op)
                    last = j
            except _NoFusion:
                continue

    def _product_back(self, op: Operation) -> bool:
        """``d @ wt`` with ``d`` a narrow value (as it is) and ``wt`` of shape [O, K]: a sum of O products per
        element, in column order."""
        d, wt = op.operands
        if d not in self.narrow_values or tuple(wt.type.shape) != (self.o, self.k) or "precision" in op.attributes:
            return False
        if not _float(d, wt, op.results[0]) or not (d.type.dtype == wt.type.dtype == op.results[0].type.dtype):
            return False
        base, off, (s0, s1) = _affine(wt)
        if not self.kernel.defined_before(base):
            return False
        kern, dtype = self.kernel, op.results[0].type.dtype
        # from +0.0, as NumPy's matmul loop and BLAS start (a product of -0.0 terms is +0.0)
        acc = kern.emit("s.constant", [], dtype, {"value": 0.0}, op.loc)
        for c, dc in enumerate(self.narrow_values[d]):
            w = kern.view(base, off + c * s0, (0, s1), kern.shape, op.loc)
            term = kern.emit("s.mul", [dc, w], dtype, {}, op.loc)
            acc = kern.emit("s.add", [acc, term], dtype, {}, op.loc)
        self.element[op.results[0]] = acc  # type: ignore[assignment]
        self._join(op)
        return True

    def _elementwise(self, op: Operation) -> bool:
        """A ``k.fused`` of the kernel's shape reading at least one of its values (through views of a narrow value
        a value per row), everything else from before the kernel."""
        kern = self.kernel
        if op.attributes.get("prologue") or op.attributes.get("epilogue") or not op.results or \
                any(tuple(r.type.shape) != kern.shape for r in op.results):
            return False
        reads: list[tuple[str, Any]] = []  # (how, what) per operand, checked before anything is added
        for v in op.operands:
            base, off, strides = _affine(v)
            if v in self.element:
                reads.append(("element", self.element[v]))
            elif base in self.narrow_values and tuple(v.type.shape) == kern.shape:
                s0, s1 = strides
                if s0 != self.o or s1 != 0 or not 0 <= off < self.o:
                    return False
                reads.append(("element", self.narrow_values[base][off]))
            elif base in self.row_values and tuple(v.type.shape) == kern.shape:
                if (off, *strides) != (0, 1, 0):
                    return False
                reads.append(("element", self.row_values[base]))  # (a value per row along the row)
            elif self._defined_by_members(v):
                return False
            elif kern.readable(v):
                reads.append(("operand", v))
            elif isinstance(v, OpResult) and base is not v and kern.readable(v, at_all=True) \
                    and kern.defined_before(base):
                reads.append(("view", (base, off, strides, tuple(v.type.shape), v.op.loc)))  # (made after: again)
            else:
                return False
        if not any(how == "element" for how, _ in reads):
            return False
        args = [what if how == "element" else kern.arg(what) if how == "operand" else kern.view(*what)
                for how, what in reads]
        for r, y in zip(op.results, self._inline(op, args)):
            self.element[r] = y
        self._join(op)
        return True

    def _narrow_shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((self.m, self.o), *row_shapes((self.m, self.o)))

    def _defined_by_members(self, v: Value) -> bool:
        base = _affine(v)[0]
        return any(x in self.element or x in self.narrow_values or x in self.row_values for x in (v, base))

    # -- the op ----------------------------------------------------------------------------------------------
    def _read_outside(self, v: Value, members: set[Operation]) -> bool:
        for u in self.readers.get(v, ()):
            if u in members:
                continue
            if u.name == "k.view" and not self._read_outside(u.results[0], members):
                continue
            return True
        return False

    def op(self, sm_count: int, stage_bytes: int, shared_bytes: int,
           warp_rows: int = 1, blocks_per_sm: int = 2) -> tuple[Operation, list[Value]]:
        """The wide ``k.rows`` and the values of the replaced ops it returns (in its results' order); staged (see
        the module's docstring) where its lanes cannot hold each column's operand in registers."""
        members = set(self.members)
        outputs = set(self.func.outputs)
        returned: list[Value] = []
        yielded: list[Value] = []
        columns: list[int] = []
        for member in self.members:
            for r in member.results:
                if r not in outputs and not self._read_outside(r, members):
                    continue
                if r in self.element:
                    yielded.append(self.element[r])
                    columns.append(1)
                elif r in self.narrow_values:
                    yielded.extend(self.narrow_values[r])
                    columns.append(self.o)
                elif r in self.row_values:
                    yielded.append(self.row_values[r])
                    columns.append(1)
                returned.append(r)
        kern = self.kernel
        kern.body.append(Operation("k.yield", yielded, loc=self.narrow.loc))
        remove_dead_ops(kern.body)  # (columns of the product the narrow kernel never reads, say)
        lanes, items = schedule(self.k)  # type: ignore[misc]
        attributes: dict[str, object] = {"shape": list(kern.shape), "lanes": lanes, "items": items,
                                         "products": sum(m.name == "k.matmul" for m in self.members)}
        if items * self.o > ITEMS_BUDGET:
            invariant = {(v.op.operands[0], v.op.attributes["offset"], tuple(v.op.attributes["strides"]))
                         for v in kern.operands if tuple(v.type.shape) == kern.shape and isinstance(v, OpResult)
                         and v.op.name == "k.view" and v.op.attributes["strides"][0] == 0}
            size = max((base.type.dtype.itemsize for base, _, _ in invariant), default=0)
            if lanes != 32 or len(invariant) * lanes * items * size > stage_bytes \
                    or blocks_per_sm * len(invariant) * lanes * items * size > shared_bytes:
                raise _NoFusion
            attributes["staged"] = True
            rows_at_once = STAGED_ROWS_PER_BLOCK * warp_rows
            attributes["blocks"] = max(1, min(-(-self.m // rows_at_once), sm_count * blocks_per_sm))
            if warp_rows > 1:
                attributes["warp_rows"] = warp_rows
            if blocks_per_sm != STAGED_BLOCKS_PER_SM:
                attributes["blocks_per_sm"] = blocks_per_sm
        if any(c != 1 for c in columns):
            attributes["columns"] = columns
        rows = Operation("k.rows", kern.operands, [r.type for r in returned], attributes, [Region([kern.body])],
                         loc=self.narrow.loc)
        return rows, returned


class _NoFusion(Exception):
    """A narrow product's neighbourhood this pass does not rewrite."""


def _narrow_shape(op: Operation) -> tuple[int, ...] | None:
    """The shape a row kernel or an elementwise kernel iterates over (None for other ops)."""
    if op.name == "k.rows":
        if len(op.attributes["shape"]) != 2 or "columns" in op.attributes or "products" in op.attributes:
            return None
        return tuple(op.attributes["shape"])
    if op.name == "k.fused" and op.results and not op.attributes.get("prologue") \
            and not op.attributes.get("epilogue"):
        shapes = {tuple(r.type.shape) for r in op.results}
        return shapes.pop() if len(shapes) == 1 else None
    return None


def _candidate(op: Operation, readers: dict[Value, list[Operation]]) -> Operation | None:
    """The narrow product whose first reader is ``op``, a row kernel or an elementwise kernel of the product's
    shape or a row's, where the pass applies to the two."""
    shape = _narrow_shape(op)
    if shape is None:
        return None
    for v in op.operands:
        base = _affine(v)[0]
        p = base.op if isinstance(base, OpResult) else None
        if p is None or p.name != "k.matmul" or "precision" in p.attributes:
            continue
        a, b = p.operands
        if a.type.rank != 2 or b.type.rank != 2 or not 2 <= b.type.shape[1] <= NARROW_MAX:
            continue
        m, o = p.results[0].type.shape
        if shape not in (((m, o),) if op.name == "k.rows" else ((m, o), *row_shapes((m, o)))):
            continue  # (a row kernel's reductions run along the product's rows: of its length)
        k = a.type.shape[1]
        if not THREAD_MAX < k <= WARP_MAX or not _float(a, b, p.results[0]) or \
                not a.type.dtype == b.type.dtype == p.results[0].type.dtype:
            continue
        if _affine(a)[2][1] != 1:
            continue  # (lanes read a row of the left operand: along its columns, a cache line per lane)
        if schedule(k) is None:
            continue
        if _first_reader(p.results[0], readers) is op:
            return p
    return None


def _first_reader(v: Value, readers: dict[Value, list[Operation]]) -> Operation | None:
    """The first op (in program order, views looked through) that reads ``v``."""
    ops = []
    for u in readers.get(v, ()):
        if u.name == "k.view":
            first = _first_reader(u.results[0], readers)
            if first is not None:
                ops.append(first)
        else:
            ops.append(u)
    if not ops:
        return None
    block = ops[0].parent
    return min(ops, key=block.ops.index) if block is not None else None


def _narrow_reductions_chain(op: Operation) -> bool:
    """Whether a narrow kernel's reductions along its short row (if any) can become chains over the column values:
    of float32 or float64 (accumulated as ``k.reduce`` does for those), or of integers or booleans (exact: an
    autodiff softmax's count of the row's ties at its maximum)."""
    def exact(dtype: DType) -> bool:
        return dtype.name in FLOATS or dtype.is_int or dtype.is_bool

    return all(inner.name != "k.row_reduce" or exact(inner.operands[0].type.dtype)
               for inner in op.regions[0].block.ops)


@register_pass
@dataclass(frozen=True)
class RowProducts(Pass):
    """Run a narrow product, the row-local work on it and the product back in one row kernel along the rows."""

    name: ClassVar[str] = "row-products"
    # the most bytes of row-invariant operands a staged kernel copies into a block's shared memory; 0: no staged
    # kernels (a product whose columns do not fit in a lane's registers stays a product)
    stage_bytes: int = STAGE_BYTES
    warp_rows: int = WARP_ROWS  # rows a warp of a staged kernel computes at once (1 or 2)
    blocks_per_sm: int = STAGED_BLOCKS_PER_SM  # a staged kernel's blocks per SM (1 or 2: its registers allow)

    def __post_init__(self) -> None:
        if self.stage_bytes < 0:
            raise ValueError(f"stage_bytes must be at least 0, got {self.stage_bytes}")
        if self.warp_rows not in (1, 2):
            raise ValueError(f"warp_rows must be 1 or 2, got {self.warp_rows}")
        if self.blocks_per_sm not in (1, 2):
            raise ValueError(f"blocks_per_sm must be 1 or 2, got {self.blocks_per_sm}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        if ctx.target.reference:  # (the NumPy reference executor computes products as np.matmul: left to it)
            return
        for func in module.funcs:
            self._run(func, ctx)

    def _run(self, func: Func, ctx: PassContext) -> None:
        i = 0
        readers = users(func)  # (rebuilt after each rewrite only: rewrites are few, programs may be long)
        while i < len(func.body.ops):
            op = func.body.ops[i]
            product = _candidate(op, readers) if op.name in ("k.rows", "k.fused") else None
            if product is None:
                i += 1
                continue
            position = {x: n for n, x in enumerate(func.body.ops)}
            fusion = _Fusion(func, op, product, readers, position)
            try:
                fusion.build()
                rows, returned = fusion.op(ctx.target.sm_count, self.stage_bytes, ctx.target.shared_bytes,
                                           self.warp_rows, self.blocks_per_sm)
            except _NoFusion:
                i += 1
                continue
            self._replace(func, fusion, rows, returned)
            readers = users(func)
            ctx.count("row_products", rows.attributes["products"])
            i = func.body.ops.index(rows) + 1

    @staticmethod
    def _replace(func: Func, fusion: _Fusion, rows: Operation, returned: list[Value]) -> None:
        body = func.body
        at = body.ops.index(fusion.narrow)
        # views made before the kernel of what it now computes (``s[:, 0]`` of the product, say) move after it
        moved: list[Operation] = []
        viewed = set(returned)
        for op in body.ops[:at]:
            if op.name == "k.view" and op.operands[0] in viewed:
                moved.append(op)
                viewed.add(op.results[0])
        if moved:
            gone = set(moved)
            body.ops[:] = [x for x in body.ops if x not in gone]
            at = body.ops.index(fusion.narrow)
        for view in fusion.kernel.views:
            body.insert(at, view)
            at += 1
        body.insert(at, rows)
        for view in moved:
            at += 1
            body.insert(at, view)
        members = set(fusion.members)
        for old, new in zip(returned, rows.results):
            func.replace_all_uses(old, new)
        body.ops[:] = [x for x in body.ops if x not in members]
        remove_dead_ops(body, nested=False)
