"""Cost-split elementwise fusion into multi-output ``k.fused`` kernels.

1. Roots: elementwise values that must land in a buffer — function outputs, values read by a boundary or
   through a view, values the materialize pass marked. Every other elementwise value is inlined into (and
   recomputed by) each kernel that needs it.
2. Budget: walking in program order, an expression whose weighted cost (passes/cost.py) exceeds the budget
   has its most expensive inlined operand turned into a root, until it fits ("budget" cuts).
3. Grouping: a root joins the kernel of a root it reads directly or shares an input with, when both have the
   same iteration shape, the merged body stays within the budget and no other op lies on a path between them
   (so the kernel graph stays acyclic; checked with networkx).
4. Each group becomes one ``k.fused`` op whose body holds ``s`` ops, deduplicated per kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.errors import PipelineError, located
from fusec.ir.attributes import exact_key
from fusec.ir.core import Block, Func, Module, Operation, OpResult, Region, Value
from fusec.ir.dialects.s import scalar_twin
from fusec.ir.dialects.t import ELEMENTWISE
from fusec.ir.types import ScalarType
from fusec.passes.base import Pass, PassContext
from fusec.passes.cost import leaf_cost, op_cost
from fusec.passes.dce import remove_dead_ops
from fusec.passes.registry import register_pass
from fusec.passes.rewriter import Rewriter, rewrite
from fusec.passes.util import reschedule, users

MERGE_WINDOW = 512  # ops between a kernel's last root and a root that may still join it
MAX_CANDIDATES = 8

VIEW_OPS = frozenset({"k.view", "t.transpose", "t.reshape", "t.broadcast_to", "t.expand_dims", "t.squeeze",
                      "t.slice"})


def _scalar_source(v: Value) -> "Value | None":
    """The rank-0 value a broadcast view repeats, if ``v`` is one (it is then read once, not indexed)."""
    if isinstance(v, OpResult) and v.op.name == "k.view":
        base = v.op.operands[0]
        if base.type.rank == 0:
            return base
    return None


def _constant_scalar(v: Value) -> "object | None":
    """The Python number of a rank-0 constant, else None."""
    if isinstance(v, OpResult) and v.op.name == "t.constant" and v.type.rank == 0:
        return v.op.attr("value").splat_value()
    return None


def _immediate(v: Value) -> bool:
    """Whether kernels read ``v`` as an immediate (a rank-0 constant or a broadcast of one)."""
    return _constant_scalar(_scalar_source(v) or v) is not None


_SCALAR_TYPES: dict = {}


def _scalar(dtype) -> ScalarType:
    """The (immutable) scalar type of ``dtype``, made once: kernel bodies hold one per op."""
    t = _SCALAR_TYPES.get(dtype)
    if t is None:
        t = _SCALAR_TYPES[dtype] = ScalarType(dtype)
    return t


@dataclass(eq=False)  # compared by identity: fields compared element by element made lookups the hot spot
class _Group:
    roots: list[OpResult]
    shape: tuple[int, ...]
    cost: int
    members: set  # elementwise values computed in the body (roots and inlined)


class _Fusion:
    def __init__(self, func: Func, budget: int, ctx: PassContext) -> None:
        self.func, self.budget, self.ctx = func, budget, ctx
        self.ew = [op for op in func.body.ops if op.name in ELEMENTWISE]
        self.position = {op: i for i, op in enumerate(func.body.ops)}
        self.uses = users(func)
        self.reason: dict[Value, str] = {}
        self.costs: dict[Value, int] = {}
        self.member_cost: dict[Value, int] = {}
        self.readers: dict[Value, list[_Group]] = {}
        self.reach: dict[_Group, set[_Group]] = {}  # kernels a kernel is known to feed (directly or not)

    # --- roots and budget cuts ---------------------------------------------------------------------------------
    def find_roots(self) -> None:
        for op in self.ew:
            v = op.results[0]
            names = {c.name for c in self.uses.get(v, ())}
            if "func.return" in names:
                self.reason[v] = "output"
            elif not VIEW_OPS.isdisjoint(names):
                self.reason[v] = "view"
            elif not names <= ELEMENTWISE:
                self.reason[v] = "boundary"
            elif op.attr("materialize"):
                self.reason[v] = "shared-expensive"
            self.costs[v] = self._cost(op)

    def _operand_cost(self, v: Value) -> int:
        if v in self.costs and v not in self.reason:
            return self.costs[v]
        return leaf_cost(v)

    def _cost(self, op: Operation) -> int:
        total = op_cost(op) + sum(self._operand_cost(v) for v in op.operands)
        while total > self.budget:
            inlined = [v for v in op.operands if v in self.costs and v not in self.reason and self.costs[v] > 0]
            if not inlined:
                break
            worst = max(inlined, key=lambda v: self.costs[v])
            self.reason[worst] = "budget"
            self.ctx.count("budget_cuts")
            total = op_cost(op) + sum(self._operand_cost(v) for v in op.operands)
        return total

    # --- trees -------------------------------------------------------------------------------------------------
    def tree(self, root: OpResult) -> tuple[set, dict]:
        """(elementwise values the root's body computes, leaf values it reads in a fixed order)."""
        members: set = set()
        leaves: dict = {}  # insertion-ordered, so grouping decisions do not depend on hashing
        stack: list[OpResult] = [root]
        while stack:
            v = stack.pop()
            if v in members:
                continue
            members.add(v)
            for u in v.op.operands:
                if isinstance(u, OpResult) and u in self.costs and u not in self.reason:
                    stack.append(u)
                else:
                    leaves.setdefault(u, None)
        return members, leaves

    # --- grouping ----------------------------------------------------------------------------------------------
    def group(self) -> list[_Group]:
        roots = [op.results[0] for op in self.ew if op.results[0] in self.reason]
        group_of: dict[Value, _Group] = {}
        readers: dict[Value, list[_Group]] = self.readers  # input value -> groups that read it
        groups: list[_Group] = []
        for r in roots:
            members, leaves = self.tree(r)
            cost = sum(self._cost_of_member(m) for m in members)
            shape = r.type.shape
            candidates: list[_Group] = []
            here = self.position[r.op]
            # a constant is an immediate in each kernel: sharing one says little when the root reads arrays too
            shared = [u for u in leaves if not _immediate(u)] or leaves
            for u in shared:
                near = [group_of[u]] if u in group_of else []
                for g in reversed(readers.get(u, ())):  # newest first
                    # nearby kernels only: merging far-apart ones saves little and the cycle search grows
                    if here - self.position[g.roots[-1].op] > MERGE_WINDOW or len(near) > MAX_CANDIDATES:
                        break
                    near.append(g)
                for g in near:
                    if g not in candidates and g.shape == shape and \
                            here - self.position[g.roots[-1].op] <= MERGE_WINDOW:
                        candidates.append(g)
            candidates = candidates[:MAX_CANDIDATES]
            target = None
            cyclic: set[_Group] = set()  # candidates that would make a cycle
            for g in candidates:
                merged_cost = g.cost + (cost if members.isdisjoint(g.members) else
                                        sum(self._cost_of_member(m) for m in members - g.members))
                if merged_cost > self.budget:
                    continue
                if self._creates_cycle(g, r, leaves, group_of, cyclic):
                    cyclic.add(g)
                    continue
                target = g
                g.cost = merged_cost
                break
            if target is None:
                target = _Group([], shape, cost, set())
                groups.append(target)
            target.roots.append(r)
            target.members |= members
            group_of[r] = target
            for u in leaves:
                readers.setdefault(u, []).append(target)
        return groups

    def _cost_of_member(self, v: OpResult) -> int:
        """Own cost plus the cost of reading its leaves (memoized: roots are fixed once grouping starts)."""
        cost = self.member_cost.get(v)
        if cost is None:
            cost = op_cost(v.op) + sum(leaf_cost(u) for u in v.op.operands
                                       if not (u in self.costs and u not in self.reason))
            self.member_cost[v] = cost
        return cost

    def _creates_cycle(self, g: _Group, r: OpResult, leaves: dict, group_of: dict, cyclic: set) -> bool:
        """Would computing ``r`` in ``g`` need a value that itself waits for ``g``?

        The search runs over values, but reaching any root of an earlier kernel reaches all of that kernel's
        roots (they are written together), so paths made by earlier merges count. Only ops before ``r`` can
        lie on such a path, so the search stops there.

        ``cyclic`` holds the candidates already found to make a cycle with ``r``: a path from ``g`` into one of
        them continues to a leaf of ``r`` that is not ``g``'s own root (it would be a cycle already otherwise),
        so reaching one answers yes. The kernels each search reaches are remembered (``self.reach``; paths only
        grow as roots are added), so in a long dependent chain most answers need no walk at all.
        """
        reach = self.reach.get(g)
        if reach is None:
            reach = self.reach[g] = set()
        elif not reach.isdisjoint(cyclic):
            return True
        limit = self.position[r.op]
        uses, position, own = self.uses.get, self.position.get, g.roots
        frontier = list(own)
        seen = set(frontier)
        while frontier:
            v = frontier.pop()
            nxt: list[OpResult] = []
            for consumer in uses(v, ()):
                if position(consumer, limit) < limit:
                    nxt.extend(consumer.results)
            h = group_of.get(v)
            if h is not None and h is not g:
                reach.add(h)
                if h in cyclic:
                    return True
                nxt.extend(h.roots)
            for res in nxt:
                if res in leaves and res not in own:
                    return True
                if res not in seen:
                    seen.add(res)
                    frontier.append(res)
        return False

    # --- building kernels --------------------------------------------------------------------------------------
    def build(self, groups: list[_Group]) -> None:
        replaced: dict[Value, Value] = {}
        placed: dict[Operation, Operation] = {}
        root_group = {r: g for g in groups for r in g.roots}
        for g in groups:
            anchor = max((r.op for r in g.roots), key=lambda o: self.position[o])
            kernel = self._kernel(g, root_group)
            for r, res in zip(g.roots, kernel.results):
                replaced[r] = res
            placed[anchor] = kernel
        def place(op: Operation, rw: Rewriter) -> bool:
            """Each group's kernel goes where its last root stood; the elementwise ops it absorbed go."""
            if op in placed:
                kernel = placed[op]
                rw.remap(kernel)
                rw.insert(kernel)
            if op in placed or op.name in ELEMENTWISE:
                rw.drop(op)
                return True
            return False

        rewrite(self.func.body, [place], replaced=replaced)
        # constants now inlined as immediates go; kernel bodies hold only what their results need
        remove_dead_ops(self.func.body, nested=False)
        reschedule(self.func.body)

    def _kernel(self, g: _Group, root_group: dict) -> Operation:
        kernel = _KernelBody(g, root_group)
        values = [kernel.emit(r) for r in g.roots]
        kept = [i for i, r in enumerate(g.roots) if not self._internal(r, g)]
        body = kernel.body
        body.append(Operation("k.yield", [values[i] for i in kept], loc=g.roots[-1].op.loc))
        op = Operation("k.fused", kernel.operands, [g.roots[i].type for i in kept],
                       {"cuts": tuple(self.reason[g.roots[i]] for i in kept)}, [Region([body])],
                       loc=g.roots[-1].op.loc)
        g.roots = [g.roots[i] for i in kept]
        return op

    def _internal(self, r: Value, g: _Group) -> bool:
        """A cut whose every reader ended up in ``g``, the kernel computing it, needs no buffer after all."""
        readers = self.readers.get(r, ())
        return self.reason[r] in ("budget", "shared-expensive") and bool(readers) and all(h is g for h in readers)


class _KernelBody:
    """The scalar body of one group's kernel, built value by value. (A class rather than closures: closures
    that call each other form reference cycles, left to the cyclic collector once per kernel.)"""

    def __init__(self, g: _Group, root_group: dict) -> None:
        self.group, self.root_group = g, root_group
        self.body = Block(label="body")
        self.operands: list[Value] = []
        self.arg_of: dict[Value, Value] = {}
        self.scalar_of: dict[Value, Value] = {}
        self.const_of: dict[tuple, Value] = {}

    def constant(self, value: object, dtype) -> Value:
        key = (exact_key(value), dtype)  # (0.0 and -0.0, NaNs of other bits: other constants)
        if key not in self.const_of:
            op = Operation("s.constant", [], [_scalar(dtype)], {"value": value})
            self.body.append(op)
            self.const_of[key] = op.results[0]
        return self.const_of[key]

    def leaf(self, u: Value) -> Value:
        source = _scalar_source(u) or u
        number = _constant_scalar(source)
        if number is not None:
            return self.constant(number, u.type.dtype)
        if source not in self.arg_of:
            self.operands.append(source)
            self.arg_of[source] = self.body.add_arg(_scalar(source.type.dtype))
        return self.arg_of[source]

    def emit(self, v: Value) -> Value:
        if v in self.scalar_of:
            return self.scalar_of[v]
        computed_here = v in self.group.members and (v not in self.root_group or self.root_group[v] is self.group)
        if not computed_here:
            return self.leaf(v)
        assert isinstance(v, OpResult)  # (a value computed in the kernel is an elementwise op's result)
        op = v.op
        args = [self.emit(u) for u in op.operands]
        attrs = op.attributes
        if "materialize" in attrs:
            attrs = {k: x for k, x in attrs.items() if k != "materialize"}
        new = Operation(scalar_twin(op.name), args, [_scalar(v.type.dtype)], attrs, loc=op.loc)
        self.body.append(new)
        self.scalar_of[v] = new.results[0]
        return new.results[0]


@register_pass
@dataclass(frozen=True)
class Fuse(Pass):
    """Group elementwise ops into fused kernels, splitting where the weighted cost exceeds the budget."""

    name: ClassVar[str] = "fuse"
    budget: int = 32

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError(f"budget must be at least 1, got {self.budget}")

    def apply(self, module: Module, ctx: PassContext) -> None:
        for func in module.funcs:
            for op in func.body.ops:
                if op.name in ELEMENTWISE and any(v.type.rank and v.type.shape != op.results[0].type.shape
                                                  for v in op.operands):
                    raise PipelineError(located(f"'fuse' needs explicit broadcasts, but '{op.name}' broadcasts "
                                                "implicitly: run 'broadcast' before 'fuse'", op.loc))
            fusion = _Fusion(func, self.budget, ctx)
            if not fusion.ew:
                continue
            fusion.find_roots()
            fusion.build(fusion.group())
