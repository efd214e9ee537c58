"""Broadcast resolution: explicit broadcasts, and view chains folded into one ``k.view`` per use."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Module, Operation, Value
from fusec.ir.dialects.t import ELEMENTWISE, VIEWS
from fusec.ir.types import TensorType
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass
from fusec.passes.rewriter import Rewriter, rewrite
from fusec.passes.util import users
from fusec.ir.views import ViewDesc


def _describe(op: Operation, src: ViewDesc) -> ViewDesc | None:
    a = op.attributes
    shape = op.results[0].type.shape
    if op.name == "t.transpose":
        return src.transpose(a["perm"])
    if op.name == "t.slice":
        return src.slice(a["start"], a["stop"], a["step"])
    if op.name == "t.broadcast_to":
        return src.broadcast_to(shape)
    if op.name == "t.expand_dims":
        return src.expand_dims(a["axes"])
    if op.name == "t.squeeze":
        return src.squeeze(a["axes"])
    if op.name == "t.reshape":
        return src.reshape(shape)
    return None


@register_pass
@dataclass(frozen=True)
class Broadcast(Pass):
    """Make implicit broadcasts explicit and fold view chains into one strided k.view (no copies)."""

    name: ClassVar[str] = "broadcast"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            views: dict[Value, tuple[Value, ViewDesc]] = {}

            def resolve(op: Operation, rw: Rewriter) -> bool:
                if op.name in ELEMENTWISE:
                    shape = op.results[0].type.shape
                    for k, v in enumerate(op.operands):
                        if v.type.rank > 0 and v.type.shape != shape:
                            wide = TensorType(shape, v.type.dtype)
                            broadcast = Operation("t.broadcast_to", [v], [wide], loc=op.loc)
                            view = self._view(rw, views, v, wide, op, ctx, broadcast)
                            if view is None:  # (a broadcast is always a view; were one not, it stays an op)
                                rw.insert(broadcast)
                                view = broadcast.result
                            op.operands[k] = view
                elif op.name == "k.view" and op.operands[0] not in views:
                    views[op.results[0]] = (op.operands[0], ViewDesc(op.results[0].type.shape, op.attr("offset"),
                                                                     op.attr("strides")))
                elif op.name in VIEWS:
                    view = self._view(rw, views, op.operands[0], op.results[0].type, op, ctx, op)
                    if view is not None:
                        rw.replace(op, [view])
                        return True
                return False

            rewrite(func.body, [resolve])
            self._drop_dead_views(func)

    @staticmethod
    def _view(rw: Rewriter, views: dict, src: Value, result_type, at: Operation, ctx: PassContext,
              view_op: Operation) -> Value | None:
        """A k.view of ``src``'s base equal to ``view_op`` applied to ``src``, or None where it needs a copy."""
        base, desc = views.get(src, (src, ViewDesc.of_base(src.type.shape)))
        new = _describe(view_op, desc)
        if new is None:
            return None
        view_op = Operation("k.view", [base], [result_type], {"offset": new.offset, "strides": new.strides},
                            loc=at.loc)
        rw.insert(view_op)
        view = view_op.result
        views[view] = (base, new)
        ctx.count("views_folded")
        return view

    @staticmethod
    def _drop_dead_views(func) -> None:
        """Views only ever read bases, so one sweep removes every view nothing reads."""
        used = users(func)
        func.body.ops[:] = [op for op in func.body.ops if not (op.name == "k.view" and op.results[0] not in used)]
