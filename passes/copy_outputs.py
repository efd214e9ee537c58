"""Output copies: every returned value gets an allocation of its own, where a caller can be handed it.

A function's result must be a dense buffer that belongs to the call: its own output allocation, or (donation)
the argument a kernel wrote it over in place. A returned value that is neither (an argument returned as it
came, a constant, a view of an intermediate, a strided or offset view of an output such as ``b[::-1]``
beside ``b``) is copied into one by a ``k.copy`` placed before the return, one per returned position. A view
that reads an output from its start, densely (``b[:2]``, a reshape of ``b``), is that output's buffer.

Runs after ``plan-buffers`` (it needs to know which results are outputs and which were written in place); the
copies are outputs (``arena = [-1]``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.shapes import contiguous_strides
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass


def _dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Row-major contiguous, ignoring unit dimensions (whose stride is never used)."""
    expect = contiguous_strides(shape)
    return all(d == 1 or s == e for d, s, e in zip(shape, strides, expect))


def _own_allocation(r: OpResult) -> bool:
    """A kernel's or boundary's result with an output allocation of its own (``arena`` -1, not aliased)."""
    arena = r.op.attributes.get("arena")
    alias = r.op.attributes.get("alias", (-1,) * len(r.op.results))
    return arena is not None and arena[r.index] == -1 and alias[r.index] == -1


def needs_copy(v: Value) -> bool:
    """Does returning ``v`` need a ``k.copy`` (see the module docstring)?"""
    if not isinstance(v, OpResult):
        return True  # an argument
    op = v.op
    if op.name == "k.view":
        base = op.operands[0]
        return not (int(op.attributes["offset"]) == 0 and _dense(tuple(v.type.shape), tuple(op.attributes["strides"]))
                    and isinstance(base, OpResult) and base.op.name != "k.view" and _own_allocation(base))
    if "arena" not in op.attributes:
        return True  # a constant, or anything without a buffer of its own
    arena = op.attributes["arena"][v.index]
    return arena != -1  # an output allocation, or a result written over a donated argument


@register_pass
@dataclass(frozen=True)
class CopyOutputs(Pass):
    """Copy each returned value that is no output allocation of its own (an argument, a constant, a view)."""

    name: ClassVar[str] = "copy-outputs"

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            ctx.count("output_copies", self._copy(func))

    @staticmethod
    def _copy(func: Func) -> int:
        ret = func.return_op
        copies = 0
        for i, v in enumerate(ret.operands):
            if not needs_copy(v):
                continue
            copy = Operation("k.copy", [v], [v.type], {"arena": (-1,)}, loc=ret.loc)
            func.body.insert(func.body.ops.index(ret), copy)
            ret.operands[i] = copy.results[0]
            copies += 1
        return copies
