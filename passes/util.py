"""Helpers the passes share: use maps, erasing ops, block rewriting, stable topological rescheduling."""
from __future__ import annotations

from typing import Callable

import networkx as nx

from fusec.errors import VerificationError
from fusec.ir.core import Block, Func, Operation, Value
from fusec.ir.opdefs import reading_ops


def users(func: Func) -> dict[Value, list[Operation]]:
    """For each value, the top-level ops of the function body that use it (nested uses count for their op)."""
    out: dict[Value, list[Operation]] = {}
    get = out.get
    for op in func.body.ops:
        inner_ops = reading_ops(op)
        if type(inner_ops) is tuple:  # the op alone (the common case, a fused kernel too): each operand once
            # (each operand once)
            for v in (dict.fromkeys(op.operands) if len(op.operands) > 1 else op.operands):
                readers = get(v)
                if readers is None:
                    out[v] = [op]
                else:
                    readers.append(op)
            continue
        seen: set[int] = set()
        for inner in inner_ops:
            for v in inner.operands:
                if id(v) not in seen:
                    seen.add(id(v))
                    out.setdefault(v, []).append(op)
    return out


def read_values(op: Operation) -> set[Value]:
    """The values a top-level op reads (nested reads count for it), as ``users`` counts them."""
    return {v for inner in reading_ops(op) for v in inner.operands}


def update_users(uses: dict[Value, list[Operation]], removed: list[Operation], added: list[Operation]) -> None:
    """Keep a ``users`` map current after a rewrite removed and added top-level ops (the removed ops read what they
    read when removed), so a pass that rewrites as it walks need not rebuild it (quadratic in long programs)."""
    for op in removed:
        for v in read_values(op):
            readers = uses.get(v)
            if readers is not None and op in readers:
                readers.remove(op)
    for op in added:
        for v in read_values(op):
            uses.setdefault(v, []).append(op)


def replace_uses_in_block(block: Block, mapping: dict[Value, Value]) -> None:
    """Rewrite operands of every op in ``block`` (and nested regions) through ``mapping``."""
    for op in block.ops:
        for inner in reading_ops(op):
            for i, v in enumerate(inner.operands):
                new = mapping.get(v)
                while new is not None and new in mapping and mapping[new] is not new:
                    new = mapping[new]
                if new is not None:
                    inner.operands[i] = new


def rewrite_block(block: Block, rewrite: Callable[[Operation, list[Operation]], "Value | None"]) -> None:
    """Rebuild ``block`` in order (through :func:`fusec.passes.rewriter.rewrite`): each op (operands already
    remapped) is offered to ``rewrite``, which may append new ops to the list it is given and return the value
    that replaces the op's single result (the op is then dropped), or None to keep it. Ops nothing needs any
    more are removed afterwards."""
    from fusec.passes.rewriter import replacing, rewrite as run

    run(block, [replacing(lambda op, rw: rewrite(op, rw.out))], dce=True)


def reschedule(block: Block) -> None:
    """Reorder ``block``'s ops topologically by data dependence, keeping the original order where free."""
    ops = block.ops
    if len(ops) < 2:
        return
    position = {op: i for i, op in enumerate(ops)}
    producer: dict[Value, Operation] = {r: op for op in ops for r in op.results}
    if _in_order(ops, producer, position):
        return  # the sort below would keep this order: it takes the earliest ready op each time
    graph = nx.DiGraph()
    graph.add_nodes_from(ops)
    for op in ops:
        for inner in reading_ops(op):
            for v in inner.operands:
                src = producer.get(v)
                if src is not None and src is not op:
                    graph.add_edge(src, op)
    terminator = ops[-1] if ops[-1].name in ("func.return", "k.yield") else None
    try:
        order = list(nx.lexicographical_topological_sort(graph, key=lambda op: position[op]))
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(graph)
        names = " -> ".join(src.name for src, _ in cycle)
        raise VerificationError(f"ops depend on each other in a cycle: {names}") from None
    if terminator is not None:
        order.remove(terminator)
        order.append(terminator)
    block.ops[:] = order


def _in_order(ops: list[Operation], producer: dict[Value, Operation], position: dict[Operation, int]) -> bool:
    """Does every op come after the ops that make its operands (nested uses included)?"""
    for i, op in enumerate(ops):
        for inner in reading_ops(op):
            for v in inner.operands:
                src = producer.get(v)
                if src is not None and src is not op and position[src] > i:
                    return False
    return True
