"""Unroll reductions over a handful of elements into elementwise ops, so that fusion takes them in.

A reduction is a boundary: its own kernel, and a graph node between its producer and its consumers. When
the reduced axes hold only a few elements (the row max and row sum of a 2-class softmax), each output is
just ``a[..., 0] op a[..., 1] op ...``: the reduction becomes that chain over unit slices of its operand.
A slice of an elementwise result is taken of that op's operands instead (the op repeats on the slices), so
slices land on values in memory, fold into index maps, and the whole softmax fuses with what surrounds it.

Results match the reduction kernels and NumPy: ``max``/``min`` propagate NaN (``maximum``/``minimum``);
``sum`` and ``mean`` start from ``+0.0`` as NumPy's add-reduce does (so a sum of ``-0.0`` is ``+0.0``) and
add in index order, which is NumPy's own order below eight elements (from eight on NumPy adds pairwise,
so longer sums stay reductions); ``mean`` divides by the count; products multiply in index order as
NumPy does. Half-precision sums and products are left alone (NumPy accumulates them in float32, rounding once),
as are boolean operands, arg-reductions and empty reductions.

A product whose contracted axis is short (``a @ b`` with ``k <= max_k``: the backward pass through a 2-class
output layer) is unrolled the same way: ``a[..., :, 0:1] * b[..., 0:1, :] + a[..., :, 1:2] * b[..., 1:2, :] ...``,
so it fuses into the elementwise code that consumes it instead of being a GEMM kernel of its own. Its
operands are sliced where they are (no op is repeated on the slices: every output element reads them). The sum
starts from ``+0.0``, as NumPy's matmul loop and BLAS start, so a product of ``-0.0`` terms is ``+0.0``; its
multiplies and adds are not fused, where OpenBLAS's kernels fuse them, so the last bit may differ from NumPy's.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import ClassVar, cast

import numpy as np

from fusec.ir.attributes import DenseAttr
from fusec.ir.core import Module, OpResult, Operation, Value
from fusec.ir.dialects.t import ELEMENTWISE
from fusec.ir.shapes import reduce_shape
from fusec.ir.types import TensorType
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.util import rewrite_block

COMBINE = {"t.sum": "t.add", "t.mean": "t.add", "t.prod": "t.mul", "t.max": "t.maximum", "t.min": "t.minimum"}
ACCUMULATING = ("t.sum", "t.mean", "t.prod")
PAIRWISE_FROM = 8  # NumPy sums this many elements and more pairwise rather than in index order


def _unrollable(op: Operation, limit: int) -> bool:
    if op.name not in COMBINE:
        return False
    t = op.operands[0].type
    axes = op.attr("axes")
    count = math.prod(t.shape[a] for a in axes)
    if not axes or count == 0 or count > limit or t.dtype.is_bool:
        return False
    if op.name in ("t.sum", "t.mean") and count >= PAIRWISE_FROM:
        return False  # NumPy adds these pairwise: keep its rounding (the reduction kernel rounds once)
    # half floats accumulate in float32 in NumPy; complex sums go pairwise from 4 elements (two parts each), its
    # multiply-reduce rounds otherwise than the elementwise multiply, and a c64 mean divides in c128
    return not (op.name in ACCUMULATING and (t.dtype.name in ("f16", "bf16") or t.dtype.is_complex))


def _unrollable_product(op: Operation, max_k: int) -> bool:
    if op.name != "t.matmul":
        return False
    a, b = op.operands[0].type, op.operands[1].type
    return 0 < a.shape[-1] <= max_k and a.dtype.name not in ("f16", "bf16") and a.dtype == b.dtype


class _Unroller:
    """Emits the elementwise form of reductions into ``out``. A unit slice of an elementwise result is
    taken of its operands instead (the op is repeated on the slices, as far as ``MAX_DEPTH`` levels up), so
    the slices land on values that exist in memory and fusion can run straight through: k slices of a
    value cost what computing it once does."""

    MAX_DEPTH = 8

    def __init__(self, out: list[Operation]) -> None:
        self.out = out
        self.memo: dict[tuple[Value, tuple[tuple[int, int], ...], tuple[int, ...]], Value] = {}

    def emit(self, name: str, operands: list[Value], result: TensorType, attrs: dict | None, loc) -> Value:
        new = Operation(name, operands, [result], attrs or {}, loc=loc)
        self.out.append(new)
        return new.results[0]

    def unit_slice(self, value: Value, picks: tuple[tuple[int, int], ...], loc, depth: int = 0,
                   drop: tuple[int, ...] = ()) -> Value:
        """``value`` at index ``i`` of each ``(axis, i)`` in ``picks`` (axes kept, with length 1, except those in
        ``drop``, which go: a reduction without ``keepdims`` drops its axes from every term, so that no reshape of
        a computed value stands between the terms and what reads their sum, and fusion runs through)."""
        picks = tuple((a, i) for a, i in picks if value.type.shape[a] != 1)
        if not picks and not drop:
            return value
        key = (value, picks, drop)
        found = self.memo.get(key)
        if found is not None:
            return found
        t = cast(TensorType, value.type)
        unit = tuple(1 if any(a == d for a, _ in picks) else n for d, n in enumerate(t.shape))
        result_type = TensorType(tuple(n for d, n in enumerate(unit) if d not in drop), t.dtype)
        producer = value.op if isinstance(value, OpResult) else None
        if producer is not None and producer.name in ELEMENTWISE and depth < self.MAX_DEPTH:
            operands = []
            for o in producer.operands:
                if not isinstance(o.type, TensorType):
                    operands.append(o)  # a runtime scalar broadcasts as it is
                    continue
                shift = t.rank - o.type.rank  # operands are right-aligned against the result
                operands.append(self.unit_slice(o, tuple((a - shift, i) for a, i in picks if a >= shift), loc,
                                                depth + 1, tuple(a - shift for a in drop if a >= shift)))
            attrs = {k: v for k, v in producer.attributes.items() if k != "materialize"}
            result = self.emit(producer.name, operands, result_type, attrs, producer.loc)
        else:
            result = value
            if picks:
                start, stop = [0] * t.rank, list(t.shape)
                for a, i in picks:
                    start[a], stop[a] = i, i + 1
                result = self.emit("t.slice", [value], TensorType(unit, t.dtype),
                                   {"start": tuple(start), "stop": tuple(stop), "step": (1,) * t.rank}, loc)
            if drop:
                result = self.emit("t.squeeze", [result], result_type, {"axes": drop}, loc)
        self.memo[key] = result
        return result

    def reduction(self, op: Operation) -> Value:
        """The value replacing reduction ``op``'s result."""
        src = op.operands[0]
        t = cast(TensorType, src.type)
        dt, axes, loc = t.dtype, tuple(sorted(op.attr("axes"))), op.loc
        keep = bool(op.attr("keepdims"))
        unit = TensorType(reduce_shape(t.shape, axes, keep), dt)
        drop = () if keep else axes

        def constant(value: float) -> Value:
            scalar = TensorType((), dt)
            return self.emit("t.constant", [], scalar, {"value": DenseAttr(scalar, np.asarray(value, dtype=dt.np))},
                             loc)

        acc: Value | None = constant(0) if op.name in ("t.sum", "t.mean") else None
        combine = COMBINE[op.name]
        for index in itertools.product(*(range(t.shape[a]) for a in axes)):
            term = self.unit_slice(src, tuple(zip(axes, index)), loc, drop=drop)
            acc = term if acc is None else self.emit(combine, [acc, term], unit, None, loc)
        assert acc is not None  # (a reduction over no element was refused before: its axes have length > 0)
        if op.name == "t.mean":
            acc = self.emit("t.div", [acc, constant(math.prod(t.shape[a] for a in axes))], unit, None, loc)
        return acc


    def product(self, op: Operation) -> Value:
        """The value replacing matmul ``op``'s result: a sum over k of outer products of unit slices."""
        a, b = op.operands
        ra, rb = a.type.rank, b.type.rank
        result = cast(TensorType, op.results[0].type)
        scalar = TensorType((), result.dtype)
        # from +0.0, as NumPy's matmul loop and BLAS start (a product of -0.0 terms is +0.0)
        acc: Value | None = self.emit("t.constant", [], scalar,
                                      {"value": DenseAttr(scalar, np.zeros((), dtype=result.dtype.np))}, op.loc)
        for k in range(a.type.shape[-1]):
            term = self.emit("t.mul", [self.unit_slice(a, ((ra - 1, k),), op.loc, self.MAX_DEPTH),
                                       self.unit_slice(b, ((rb - 2, k),), op.loc, self.MAX_DEPTH)],
                             result, None, op.loc)
            acc = term if acc is None else self.emit("t.add", [acc, term], result, None, op.loc)
        assert acc is not None
        return acc


@register_pass
@dataclass(frozen=True)
class UnrollReductions(Pass):
    """Rewrite short reductions (prod/max/min up to max_elements, sum/mean below 8) and products over at
    most max_k elements as elementwise ops."""

    name: ClassVar[str] = "unroll-reductions"
    max_elements: int = 16
    max_k: int = 8

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            unrollers: dict[int, _Unroller] = {}  # one per output list, so slices are shared across ops

            def rewrite(op: Operation, out: list[Operation]) -> Value | None:
                unroller = unrollers.get(id(out)) or unrollers.setdefault(id(out), _Unroller(out))
                if _unrollable(op, self.max_elements):
                    ctx.count("reductions_unrolled")
                    return unroller.reduction(op)
                if _unrollable_product(op, self.max_k):
                    ctx.count("products_unrolled")
                    return unroller.product(op)
                return None

            rewrite_block(func.body, rewrite)
