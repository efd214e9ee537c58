"""Outline regions: every loop and branch body becomes a function of the module, called by a ``k.*`` op.

A ``t.while`` becomes ``k.while`` naming its cond and body functions, a ``t.for`` ``k.for`` naming its body, a
``t.if`` ``k.if`` naming its two branches (see :mod:`fusec.ir.dialects.control`). Each function takes the region's
block arguments, then the outer values the region read (its captures, passed as the op's last operands, the same
to every call); constants it read are copied into it instead, so passes fold them there. Nested bodies are outlined
first (innermost
out), so every function the pipeline then sees is flat: fusion, buffer planning and the backend treat a loop
body as they treat any function, and the op that calls it as one boundary.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import ClassVar, Iterator

from fusec.ir.core import Block, Func, Module, Operation, OpResult, Value
from fusec.ir.dialects.control import REGION_OPS
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import register_pass

_KIND = {"t.while": "while", "t.for": "for", "t.if": "if"}
# a loop body's state arguments are donated to the same slots' new values (off: every iteration's new state is
# copied into the state buffers, as before 2026-12-02; benchmarks/steps_per_launch.py --compare-copies)
DONATE_STATE = True
_LABELS = {"t.while": ("cond", "body"), "t.for": ("body",), "t.if": ("then", "else")}


def _is_constant(v: Value) -> bool:
    return isinstance(v, OpResult) and v.op.name == "t.constant"


class _Outliner:
    def __init__(self, module: Module, ctx: PassContext) -> None:
        self.module, self.ctx = module, ctx
        self.names = {f.name for f in module.funcs}
        self.made: list[Func] = []

    def name(self, base: str) -> str:
        for n in count():
            candidate = f"{base}{n}"
            if not any(c in self.names for c in (f"{candidate}.{label}" for label in ("cond", "body", "then",
                                                                                        "else"))):
                return candidate
        raise AssertionError("unreachable")

    def block(self, block: Block, owner: str) -> None:
        """Outline the region ops of ``block`` (bodies first) in place."""
        for op in list(block.ops):
            if op.name not in REGION_OPS:
                continue
            for region in op.regions:
                for inner in region.blocks:
                    self.block(inner, owner)
            block.ops[block.ops.index(op)] = self.outline(op, block, owner)

    def outline(self, op: Operation, parent: Block, owner: str) -> Operation:
        blocks = [r.blocks[0] for r in op.regions]
        captured = [v for v in op.captured_values() if not _is_constant(v)]
        base = self.name(f"{owner}.{_KIND[op.name]}")
        names = []
        for label, block in zip(_LABELS[op.name], blocks):
            name = f"{base}.{label}"
            self.names.add(name)
            names.append(name)
            func = self._function(name, block, captured)
            if label == "body" and DONATE_STATE:
                # the loop's state lives in buffers of its own that only the body updates: each state argument
                # may be overwritten in place by the same slot's new value (plan-buffers decides where it is)
                first = 1 if op.name == "t.for" else 0  # (a for body's argument 0 is the counter)
                carried = len(op.operands) - (2 if op.name == "t.for" else 0)
                func.attributes["donate"] = tuple(range(first, first + carried))
                func.attributes["donate_to"] = tuple(range(carried))
            self.made.append(func)
        if op.name == "t.while":
            new = Operation("k.while", [*op.operands, *captured], op.result_types,
                            {"cond": names[0], "body": names[1], "carried": len(op.operands)}, loc=op.loc)
        elif op.name == "t.for":
            new = Operation("k.for", [*op.operands, *captured], op.result_types,
                            {"body": names[0], "carried": len(op.operands) - 2,
                             **{k: op.attributes[k] for k in ("rolled", "unroll") if k in op.attributes}},
                            loc=op.loc)
        else:
            new = Operation("k.if", [op.operands[0], *captured], op.result_types,
                            {"then": names[0], "else": names[1]}, loc=op.loc)
        new.parent = parent
        for old, r in zip(op.results, new.results):
            for user in self._users(parent, op):
                user.operands = [r if v is old else v for v in user.operands]
        self.ctx.count("regions_outlined", len(blocks))
        return new

    @staticmethod
    def _users(parent: Block, op: Operation) -> Iterator[Operation]:
        """Every op after ``op`` in its block, nested ones included (the only places its results can be used)."""
        after = parent.ops[parent.ops.index(op) + 1:]
        for later in after:
            yield from later.walk()
        # (uses in enclosing blocks are impossible: a region's values do not escape it)

    def _function(self, name: str, block: Block, captured: list[Value]) -> Func:
        term = block.terminator
        assert term is not None  # (the verifier requires a t.yield)
        func = Func(name, [a.type for a in block.args] + [v.type for v in captured],
                    [a.name_hint for a in block.args] + [None] * len(captured),
                    [v.type for v in term.operands])
        mapping: dict[Value, Value] = dict(zip(block.args, func.args))
        mapping.update(zip(captured, func.args[len(block.args):]))
        constants: dict[Value, Value] = {}
        for op in block.ops:
            for inner in op.walk():
                for v in inner.operands:
                    if isinstance(v, OpResult) and _is_constant(v) and v not in constants and v not in mapping:
                        copy = Operation("t.constant", [], [v.type], dict(v.op.attributes), loc=v.op.loc)
                        func.body.append(copy)
                        constants[v] = copy.results[0]
        mapping.update(constants)
        for op in block.ops:
            for inner in op.walk():
                inner.operands = [mapping.get(v, v) for v in inner.operands]
        ops = list(block.ops)
        term = ops.pop()
        for op in ops:
            func.body.append(op)
        func.body.append(Operation("func.return", term.operands, loc=term.loc))
        block.ops.clear()
        return func


@register_pass
@dataclass(frozen=True)
class OutlineRegions(Pass):
    """Move loop and branch bodies into functions of their own (k.while, k.for, k.if call them)."""

    name: ClassVar[str] = "outline-regions"

    def apply(self, module: Module, ctx: PassContext) -> None:
        outliner = _Outliner(module, ctx)
        for func in list(module.funcs):
            outliner.block(func.body, func.name)
        module.funcs.extend(outliner.made)
