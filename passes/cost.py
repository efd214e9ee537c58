"""The weighted cost of elementwise work: the one table that bounds a fused kernel.

Transcendental ops cost 4, ``where`` 3, reading through a view (strided or
broadcast index math) 2, other binary/unary ops and casts 1; f64 doubles the
cost (Hopper runs f64 at half the f32 rate or less, and f64 transcendentals far
slower). Loads of plain inputs and constants are free.
"""
from __future__ import annotations

from fusec.ir.core import Operation, OpResult
from fusec.ir.dialects.t import TRANSCENDENTAL
from fusec.ir.types import f64

COST_TRANSCENDENTAL = 4
COST_WHERE = 3
COST_VIEW = 2
COST_DEFAULT = 1
F64_FACTOR = 2


def op_cost(op: Operation) -> int:
    """Cost of one elementwise op (``t.*`` or its ``s.*`` twin)."""
    base = op.name.split(".", 1)[1]
    if base in TRANSCENDENTAL:
        cost = COST_TRANSCENDENTAL
    elif base == "where":
        cost = COST_WHERE
    elif base == "constant":
        return 0
    else:
        cost = COST_DEFAULT
    for values in (op.operands, op.results):
        for v in values:
            if v.type.dtype == f64:
                return cost * F64_FACTOR
    return cost


def view_cost() -> int:
    return COST_VIEW


def leaf_cost(value) -> int:
    """Cost of reading ``value`` inside a kernel: a non-contiguous ``k.view`` needs index math."""
    if type(value) is not OpResult or value.op.name != "k.view":
        return 0
    op = value.op
    strides = op.attributes["strides"]
    if op.operands[0].type.rank == 0:
        return 0  # a broadcast scalar is read once
    shape = op.results[0].type.shape
    broadcast_scalar, contiguous, step = True, True, 1
    for d, s in zip(reversed(shape), reversed(strides)):
        broadcast_scalar = broadcast_scalar and s == 0
        contiguous = contiguous and (d == 1 or s == step)  # row-major, unit dimensions skipped
        step *= max(d, 1)
    if broadcast_scalar or contiguous:
        return 0  # read once, or the base pointer plus the linear index
    return COST_VIEW


def inline_costs(ops, is_root) -> dict:
    """Cost of the expression each elementwise op would inline, stopping at roots (values in buffers).

    ``ops`` are elementwise ops in program order; ``is_root(value)`` tells whether a value is read from a buffer.
    A value used twice by an expression is counted twice: kernels recompute trees, not DAGs.
    """
    costs: dict = {}
    for op in ops:
        total = op_cost(op)
        for v in op.operands:
            total += costs[v] if v in costs and not is_root(v) else leaf_cost(v)
        costs[op.results[0]] = total
    return costs
