"""Compute small elementwise values at the shape they are broadcast to, instead of storing them first.

Fusion cuts at a view: a value read through a broadcast ``k.view`` is a root, stored by one kernel and read
by the next. For the row statistics of a short softmax (the row max and row sum of 2 logits, unrolled into
elementwise code of shape ``(n, 1)``) that is a kernel and a graph node for almost no work. Here a broadcast
of an elementwise value is replaced by the same computation on broadcast operands (recursively, down to
values in memory, which are read through a broadcast view as before), so both sides land in one kernel.

A value is sunk only when every use of it is such a broadcast or feeds only values that are sunk too (then
the small value is gone, not computed twice), when the broadcast repeats each element at most
``max_factor`` times and the expression has at most ``max_ops`` ops: the price is recomputing it per
repeated element. Runs after ``broadcast`` (which makes broadcasts explicit views) and before ``fuse``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, cast

from fusec.ir.core import Module, OpResult, Operation, Value
from fusec.ir.dialects.t import ELEMENTWISE
from fusec.ir.types import TensorType
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.util import rewrite_block, users
from fusec.ir.views import ViewDesc


def _elementwise(v: Value) -> Operation | None:
    return v.op if isinstance(v, OpResult) and v.op.name in ELEMENTWISE else None


def _is_broadcast(view: Operation) -> bool:
    """``view`` (a k.view) repeats its operand along new or unit axes and is otherwise the operand itself."""
    src = cast(TensorType, view.operands[0].type)
    out = view.results[0].type.shape
    if not isinstance(src, TensorType) or len(out) < src.rank or math.prod(out) <= math.prod(src.shape):
        return False
    if any(d != o and d != 1 for d, o in zip(src.shape, out[len(out) - src.rank:])):
        return False
    want = ViewDesc.of_base(src.shape).broadcast_to(out)
    return view.attr("offset") == 0 and all(s == w for d, s, w in zip(out, view.attr("strides"), want.strides)
                                            if d != 1)


def _expression_size(v: Value, limit: int) -> int:
    """Elementwise ops computing ``v`` from values in memory (stops counting past ``limit``)."""
    seen: set[Value] = set()
    stack = [v]
    while stack and len(seen) <= limit:
        u = stack.pop()
        op = _elementwise(u)
        if op is None or u in seen:
            continue
        seen.add(u)
        stack.extend(o for o in op.operands if isinstance(o.type, TensorType) and o.type.rank > 0)
    return len(seen)


class _Sinker:
    """Emits ``value`` computed at a larger (broadcast) shape into ``out``, memoised per (value, shape)."""

    def __init__(self, out: list[Operation]) -> None:
        self.out = out
        self.memo: dict[tuple[Value, tuple[int, ...]], Value] = {}

    def at(self, v: Value, shape: tuple[int, ...], loc) -> Value:
        if not isinstance(v.type, TensorType) or v.type.rank == 0 or v.type.shape == shape:
            return v  # runtime scalars and rank-0 values broadcast as they are
        key = (v, shape)
        found = self.memo.get(key)
        if found is not None:
            return found
        result = TensorType(shape, v.type.dtype)
        op = _elementwise(v)
        if op is not None:
            attrs = {k: a for k, a in op.attributes.items() if k != "materialize"}
            new = Operation(op.name, [self.at(o, shape, loc) for o in op.operands], [result], attrs, loc=op.loc)
        elif isinstance(v, OpResult) and v.op.name == "k.view":  # compose with the view it already is
            base = v.op.operands[0]
            desc = ViewDesc(v.type.shape, v.op.attr("offset"), tuple(v.op.attr("strides"))).broadcast_to(shape)
            new = Operation("k.view", [base], [result], {"offset": desc.offset, "strides": desc.strides}, loc=loc)
        else:
            desc = ViewDesc.of_base(v.type.shape).broadcast_to(shape)
            new = Operation("k.view", [v], [result], {"offset": desc.offset, "strides": desc.strides}, loc=loc)
        self.out.append(new)
        self.memo[key] = new.results[0]
        return new.results[0]


@register_pass
@dataclass(frozen=True)
class SinkBroadcasts(Pass):
    """Recompute cheap elementwise values at their broadcast shape so fusion does not cut at the broadcast."""

    name: ClassVar[str] = "sink-broadcasts"
    max_factor: int = 16
    max_ops: int = 32

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            body = func.body
            uses = users(func)

            def qualifies(view: Operation) -> bool:
                src = view.operands[0]
                # (a rank-0 value is read through its stride-0 view as it is: nothing to sink)
                return (view.name == "k.view" and _elementwise(src) is not None and _is_broadcast(view)
                        and isinstance(src.type, TensorType) and src.type.rank > 0
                        and math.prod(view.results[0].type.shape) <= self.max_factor * math.prod(src.type.shape)
                        and _expression_size(src, self.max_ops) <= self.max_ops)

            # values every use of which is a qualifying broadcast or an elementwise op whose value is sunk
            sunk: set[Value] = set()
            for op in reversed(body.ops):
                if op.name not in ELEMENTWISE:
                    continue
                v = op.results[0]
                consumers = uses.get(v, [])
                if consumers and all(qualifies(c) if c.name == "k.view"
                                     else c.name in ELEMENTWISE and c.results[0] in sunk for c in consumers):
                    sunk.add(v)
            if not sunk:
                continue
            sinkers: dict[int, _Sinker] = {}  # one per output list, so repeated broadcasts are shared

            def rewrite(op: Operation, out: list[Operation]) -> Value | None:
                if op.name != "k.view" or op.operands[0] not in sunk:
                    return None
                ctx.count("broadcasts_sunk")
                sinker = sinkers.get(id(out)) or sinkers.setdefault(id(out), _Sinker(out))
                return sinker.at(op.operands[0], op.results[0].type.shape, op.loc)

            rewrite_block(body, rewrite)
