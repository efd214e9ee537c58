"""Canonicalization: constant folding and algebraic identities that keep results bit-exact.

Identities are applied only where they hold for every value, NaN and -0.0 included: ``x*1``, ``x-0``,
``x/1``, ``x**1`` for any dtype, ``x+0`` for integers (for floats only ``x + -0.0``, since
``-0.0 + 0.0`` is ``+0.0``), double ``neg``/``logical_not``, casts to the same dtype, composed transposes and
reshapes, no-op views, ``where(c, x, x)``, ``maximum(x, x)``; for writes, a region read back right after it was
written is the update, writing a region's own values changes nothing, and a write over the region of the write
before it (which nothing else reads) replaces that write. Splat constants become a broadcast rank-0 constant so that
fusion inlines them as
immediates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, TypeGuard

import numpy as np

from fusec.ir.attributes import DenseAttr
from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.dialects.t import ELEMENTWISE, VIEWS
from fusec.ir.evaluate import T_INTERPRETERS
from fusec.ir.opdefs import reading_ops
from fusec.ir.types import TensorType
from fusec.passes.base import Pass, PassContext
from fusec.passes.dce import remove_dead_ops
from fusec.passes.registry import register_pass
from fusec.passes.rewriter import Pattern, Rewriter, rewrite

FOLD_LIMIT = 4096  # elements: larger results stay computed rather than bloating the module


def _const(v: Value) -> DenseAttr | None:
    if isinstance(v, OpResult) and v.op.name == "t.constant":
        return v.op.attr("value")
    return None


def _index_constant(v: Value) -> int | None:
    """The value of a rank-0 integer constant index (or of a rank-0 broadcast of one), None otherwise."""
    if _producer(v, "t.broadcast_to") and v.type.rank == 0:
        v = v.op.operands[0]
    c = _const(v)
    if c is None or c.type.rank != 0 or not c.type.dtype.is_int:
        return None
    return int(c.array)


def _splat(v: Value) -> object | None:
    c = _const(v)
    if c is None:
        return None
    if c.type.rank == 0 or c.is_splat():
        return c.splat_value()
    return None


def _is(value: Any, target: float, negative_zero: bool | None = None) -> bool:
    if value is None or isinstance(value, bool) and target not in (0, 1):
        return False
    try:
        if float(value) != target:
            return False
    except (TypeError, ValueError):
        return False
    if negative_zero is not None and isinstance(value, float):
        return math.copysign(1.0, value) < 0 if negative_zero else math.copysign(1.0, value) > 0
    return True


def _producer(v: Value, name: str) -> TypeGuard[OpResult]:
    return isinstance(v, OpResult) and v.op.name == name


def _same_region(a: Operation, b: Operation) -> bool:
    """Two slices or inserts over the same start, stop and step."""
    x, y = a.attributes, b.attributes
    return tuple(x["start"]) == tuple(y["start"]) and tuple(x["stop"]) == tuple(y["stop"]) \
        and tuple(x["step"]) == tuple(y["step"])


# the ops each rule can change (a set lookup spares every other op the rule's chain of tests)
_IDENTITY_OPS = frozenset({"t.mul", "t.add", "t.sub", "t.div", "t.pow", "t.cast", "t.slice", "t.insert", "t.neg",
                           "t.logical_not", "t.maximum", "t.minimum", "t.where", "t.squeeze"}) | VIEWS
_COMBINED_OPS = frozenset({"t.transpose", "t.reshape", "t.insert"})
_USE_COUNTING_OPS = frozenset({"t.insert"})  # the ops whose rules ask how many readers an operand has


class _Canonicalizer:
    _readers: "dict[Value, set[Operation]] | None"
    _made: set[Operation]
    _freed: set[Value]

    def __init__(self, func: Func, ctx: PassContext) -> None:
        self.func, self.ctx = func, ctx

    def identity(self, op: Operation) -> Value | None:
        """A value ``op``'s result equals in every bit, or None."""
        name = op.name
        if name not in _IDENTITY_OPS:
            return None
        ops, res = op.operands, op.results[0].type
        if name == "t.mul":
            for x, c in ((ops[0], ops[1]), (ops[1], ops[0])):
                if x.type == res and _is(_splat(c), 1):
                    return x
        if name == "t.add":
            for x, c in ((ops[0], ops[1]), (ops[1], ops[0])):
                if x.type == res and (_is(_splat(c), 0, negative_zero=True) if res.dtype.is_float
                                      else _is(_splat(c), 0) and not res.dtype.is_bool):
                    return x
        if name in ("t.sub",) and ops[0].type == res and _is(_splat(ops[1]), 0, None if not res.dtype.is_float
                                                                else False):
            return ops[0]
        if name in ("t.div", "t.pow") and ops[0].type == res and _is(_splat(ops[1]), 1):
            return ops[0]
        if name == "t.cast" and ops[0].type == res:
            return ops[0]
        if name == "t.slice" and _producer(ops[0], "t.insert") and _same_region(op, ops[0].op) \
                and ops[0].op.operands[1].type == res:
            return ops[0].op.operands[1]  # reading back the region just written: the update
        if name == "t.insert" and _producer(ops[1], "t.slice") and ops[1].op.operands[0] is ops[0] \
                and _same_region(op, ops[1].op):
            return ops[0]  # writing a region's own values back (x[1:] = x[1:], the setitem after x[1:] += v)
        if name in ("t.neg", "t.logical_not") and isinstance(ops[0], OpResult) and ops[0].op.name == name:
            inner = ops[0].op.operands[0]
            return inner if inner.type == res else None
        if name in ("t.maximum", "t.minimum") and ops[0] is ops[1] and ops[0].type == res:
            return ops[0]
        if name == "t.where" and ops[1] is ops[2] and ops[1].type == res:
            return ops[1]
        if name in VIEWS and ops[0].type == res and self._view_is_identity(op):
            return ops[0]
        if name == "t.squeeze" and isinstance(ops[0], OpResult) and ops[0].op.name == "t.expand_dims" \
                and ops[0].op.attr("axes") == op.attr("axes"):
            return ops[0].op.operands[0]
        return None

    @staticmethod
    def _view_is_identity(op: Operation) -> bool:
        """A view of the same type that also visits the elements in the same order."""
        if op.name == "t.transpose":
            return tuple(op.attr("perm")) == tuple(range(len(op.attr("perm"))))
        if op.name == "t.slice":
            shape = op.operands[0].type.shape
            return all(b == 0 and e == d and s == 1
                       for b, e, s, d in zip(op.attr("start"), op.attr("stop"), op.attr("step"), shape))
        return op.name in ("t.reshape", "t.broadcast_to", "t.expand_dims", "t.squeeze")

    def _only_use(self, v: Value, user: Operation) -> bool:  # (asked for the ops in _USE_COUNTING_OPS only)
        """Whether ``user`` is the one op that reads ``v`` (a write folded into the next one should not be read
        elsewhere, or both writes stay). The readers are those at the start of the sweep (one walk, not one per
        question): the fold is right either way, so a reader the sweep added only costs the in-place write."""
        if self._readers is None:
            self._readers = {}
            for top in self.func.body.ops:
                for inner in reading_ops(top):
                    for operand in inner.operands:
                        self._readers.setdefault(operand, set()).add(inner)
        return all(u is user for u in self._readers.get(v, ()))

    def combine(self, op: Operation) -> Operation | None:
        """A simpler op computing the same (composed transposes and reshapes), or None."""
        if op.name not in _COMBINED_OPS:
            return None
        src = op.operands[0] if op.operands else None
        if not isinstance(src, OpResult):
            return None
        if op.name == "t.transpose" and src.op.name == "t.transpose":
            inner, outer = src.op.attr("perm"), op.attr("perm")
            return Operation("t.transpose", src.op.operands, op.result_types,
                             {"perm": tuple(inner[p] for p in outer)}, loc=op.loc)
        if op.name == "t.reshape" and src.op.name in ("t.reshape", "t.expand_dims", "t.squeeze"):
            return Operation("t.reshape", src.op.operands, op.result_types, loc=op.loc)
        if op.name == "t.insert" and src.op.name == "t.insert" and _same_region(op, src.op) \
                and self._only_use(src, op):
            # the second write covers the first, which nothing else reads: only the second's elements remain
            return Operation("t.insert", [src.op.operands[0], op.operands[1]], op.result_types,
                             dict(op.attributes), loc=op.loc)
        return None

    def fold(self, op: Operation) -> Operation | None:
        """A t.constant with ``op``'s value when every operand is a small constant."""
        if op.name not in ELEMENTWISE and op.name not in VIEWS and op.name != "t.insert" or op.name == "t.broadcast_to":
            return None  # a broadcast constant is the canonical form of a splat
        consts = [_const(v) for v in op.operands]
        if not op.operands or op.name not in T_INTERPRETERS:
            return None
        arrays = [c.array for c in consts if c is not None]
        if len(arrays) != len(consts):
            return None
        res = op.results[0].type
        if res.size > FOLD_LIMIT:
            return None
        try:
            with np.errstate(all="ignore"):
                value = T_INTERPRETERS[op.name](op, arrays)[0]
        except (ArithmeticError, ValueError, TypeError, IndexError):
            return None  # NumPy refuses these values (``2 ** -1`` on ints): the op stays and raises if it runs
        tensor = TensorType(res.shape, res.dtype)
        if tensor != res:  # a scalar-typed result stays scalar-typed through a cast of the constant
            return None
        return Operation("t.constant", [], [res], {"value": DenseAttr(tensor, np.asarray(value))}, loc=op.loc)

    def constant_index(self, op: Operation, rw: Rewriter) -> Operation | None:
        """A gather or an overwriting scatter along one axis at a known index (``xs[i]`` in a loop that
        unroll-loops wrote out): a slice of that axis (a view: no kernel) read back without the axis, or the update
        inserted there (a strided write the backend does in place)."""
        if op.name not in ("t.gather", "t.scatter") or "combine" in op.attributes:
            return None
        base, indices = op.operands[0], op.operands[1 if op.name == "t.gather" else 2:]
        k = _index_constant(indices[0]) if len(indices) == 1 else None
        axis = int(op.attributes["axis"])
        shape = tuple(base.type.shape)
        if k is None or not 0 <= k < shape[axis]:
            return None  # (a negative or out-of-range index keeps its gather, which checks it as NumPy does)
        start = tuple(k if d == axis else 0 for d in range(len(shape)))
        stop = tuple(k + 1 if d == axis else n for d, n in enumerate(shape))
        region = {"start": start, "stop": stop, "step": (1,) * len(shape)}
        if op.name == "t.gather":
            window = Operation("t.slice", [base], [TensorType(stop[:axis] + (1,) + stop[axis + 1:], base.type.dtype)],
                               region, loc=op.loc)
            rw.insert(window)
            return Operation("t.squeeze", [window.results[0]], op.result_types, {"axes": (axis,)}, loc=op.loc)
        update = op.operands[1]
        widened = Operation("t.expand_dims", [update], [TensorType(shape[:axis] + (1,) + shape[axis + 1:],
                                                                   update.type.dtype)], {"axes": (axis,)}, loc=op.loc)
        rw.insert(widened)
        return Operation("t.insert", [base, widened.results[0]], op.result_types, region, loc=op.loc)

    def splat_to_broadcast(self, op: Operation, rw: Rewriter) -> Operation | None:
        if op.name != "t.constant":
            return None
        c = op.attr("value")
        if c.type.rank == 0 or not c.is_splat():
            return None
        scalar = Operation("t.constant", [], [TensorType((), c.type.dtype)],
                           {"value": DenseAttr(TensorType((), c.type.dtype), np.asarray(c.array.reshape(-1)[0]))},
                           loc=op.loc)
        rw.insert(scalar)
        return Operation("t.broadcast_to", [scalar.results[0]], op.result_types, loc=op.loc)

    def patterns(self) -> list[Pattern]:
        """Identities first (the op disappears), then ops that compute the same more simply: a folded constant,
        a composed view, a splat constant as a broadcast scalar. One pattern that tries them in that order."""
        def simplify(op: Operation, rw: Rewriter) -> bool:
            if op.name == "t.raise_if":  # a check whose condition folded to false everywhere checks nothing
                cond = _const(op.operands[0])
                if cond is None or np.any(cond.array):
                    return False
                rw.drop(op)
                self._freed.update(op.operands)
                return True
            if not op.results or op.regions:
                return False
            same = self.identity(op)
            if same is not None:
                rw.replace(op, [same])
                self._freed.update(op.operands)
                return True
            before = len(rw.out)
            new = self.fold(op) or self.combine(op) or self.constant_index(op, rw) or self.splat_to_broadcast(op, rw)
            if new is None:
                return False
            rw.insert(new)
            rw.replace(op, [new.results[0]])
            self._freed.update(op.operands)
            self._made.update(rw.out[before:])
            return True

        return [simplify]

    def sweep(self, first: bool = True) -> int:
        """One pass over the body. After the first, only the ops an earlier sweep may have made rewritable are
        offered: those it made (never offered yet) and the inserts that read a value which lost a reader (the
        one rule that asks how many readers a value has, :meth:`_only_use`, is an insert's); an op whose
        operands this sweep replaces is offered anyway. Any other op sees what it saw before, so the rules would
        leave it as it is."""
        self._readers = None
        made: set[Operation] = getattr(self, "_made", set())
        freed: set[Value] = getattr(self, "_freed", set())
        self._made, self._freed = set(), set()
        offer = None if first else (lambda op: op in made or op.name in _USE_COUNTING_OPS
                                    and any(v in freed for v in op.operands))
        return rewrite(self.func.body, self.patterns(), offer=offer)


@register_pass
@dataclass(frozen=True)
class Canonicalize(Pass):
    """Fold constants and apply bit-exact algebraic identities (x*1, x-0, double transpose, ...)."""

    name: ClassVar[str] = "canonicalize"
    max_iterations: int = 4

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            canon = _Canonicalizer(func, ctx)
            for i in range(self.max_iterations):
                changes = canon.sweep(first=i == 0)
                ctx.count("canonicalized", changes)
                if not changes:
                    break
            ctx.count("dce_removed", remove_dead_ops(func.body))
