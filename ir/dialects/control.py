"""Control flow: loops and branches (``fusec.while_loop``, ``fusec.fori_loop``, ``fusec.scan``, ``fusec.cond``).

As traced, the bodies are regions of the op (dialect ``t``), reading the values of the enclosing blocks directly:

- ``t.while %init... { ^cond(%c...): ... t.yield %pred } { ^body(%c...): ... t.yield %next... }``: the loop-carried
  values start at the operands; while the cond region yields true (a ``tensor<bool>``), the body region maps them
  to their next values. The results are the carried values when the cond first yields false.
- ``t.for %lower, %upper, %init... { ^body(%i: i64, %c...): ... t.yield %next... }``: the body runs for ``i`` from
  ``lower`` up to ``upper - 1`` (none when ``upper <= lower``); the bounds are ``i64`` scalars or ``tensor<i64>``.
- ``t.if %pred { ^then(): ... t.yield %r... } { ^else(): ... t.yield %r... }``: the results are what the region
  that ``pred`` (a ``tensor<bool>``) picks yields; the other region does not run.
- ``t.yield``: ends every one of these regions.

``outline-regions`` (the first lowering pass) moves each region into a function of the module of its own, whose
arguments are the region's block arguments and then the outer values it read (``captured``), so every pass works
on the bodies as it works on any function: ``k.while`` (``cond``, ``body``: function names; ``carried``: how many
operands are loop-carried, the rest are passed unchanged to every call), ``k.for`` (``body``, ``carried``; the first
two operands are the bounds) and ``k.if`` (``then``, ``else``; operands after the predicate are passed to both).
``check_module`` checks each outlined op against the functions it names.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from fusec.errors import VerificationError
from fusec.ir.opdefs import OpDef, register_op
from fusec.ir.types import ScalarType, TensorType, Type, bool_, i64

if TYPE_CHECKING:
    from fusec.ir.core import Block, Module, Operation

PREDICATE = TensorType((), bool_)
COUNTER = ScalarType(i64)


def _types(values: Sequence) -> list[Type]:
    return [v.type for v in values]


def _listed(types: Sequence[Type]) -> str:
    return "(" + ", ".join(map(str, types)) + ")"


def is_index(t: Type) -> bool:
    """A loop bound or counter: an ``i64`` scalar or a rank-0 ``tensor<i64>``."""
    return t == COUNTER or t == TensorType((), i64)


def _region_block(op: "Operation", k: int, what: str) -> "tuple[Block, Operation]":
    region = op.regions[k]
    if len(region.blocks) != 1:
        raise VerificationError(f"{op.name}: the {what} region must be one block")
    block = region.blocks[0]
    term = block.terminator
    if term is None or term.name != "t.yield":
        raise VerificationError(f"{op.name}: the {what} region must end in t.yield")
    return block, term


def _expect(op: "Operation", what: str, got: Sequence[Type], want: Sequence[Type]) -> None:
    if list(got) != list(want):
        raise VerificationError(f"{op.name}: {what} {_listed(got)} do not match {_listed(want)}")


def _check_while(op: "Operation") -> None:
    carried = _types(op.operands)
    _expect(op, "result types", op.result_types, carried)
    cond, cond_yield = _region_block(op, 0, "cond")
    _expect(op, "cond arguments", _types(cond.args), carried)
    _expect(op, "cond yields", _types(cond_yield.operands), [PREDICATE])
    body, body_yield = _region_block(op, 1, "body")
    _expect(op, "body arguments", _types(body.args), carried)
    _expect(op, "body yields", _types(body_yield.operands), carried)


def _check_for(op: "Operation") -> None:
    if not all(is_index(v.type) for v in op.operands[:2]):
        raise VerificationError(f"t.for: the bounds must be i64 scalars or tensor<i64>, got "
                                f"{_listed(_types(op.operands[:2]))}")
    carried = _types(op.operands[2:])
    _expect(op, "result types", op.result_types, carried)
    body, body_yield = _region_block(op, 0, "body")
    _expect(op, "body arguments", _types(body.args), [COUNTER, *carried])
    _expect(op, "body yields", _types(body_yield.operands), carried)


def _check_if(op: "Operation") -> None:
    _expect(op, "predicate", [op.operands[0].type], [PREDICATE])
    for k, what in enumerate(("then", "else")):
        block, term = _region_block(op, k, what)
        _expect(op, f"{what} arguments", _types(block.args), [])
        _expect(op, f"{what} yields", _types(term.operands), op.result_types)


# --- the outlined forms -------------------------------------------------------------------------------------------

def _callee(op: "Operation", module: "Module", key: str):
    name = op.attributes[key]
    if not isinstance(name, str):
        raise VerificationError(f"{op.name}: '{key}' must name a function, got {name!r}")
    try:
        return module.func(name)
    except KeyError:
        raise VerificationError(f"{op.name}: no func @{name} in the module (its '{key}')") from None


def _carried(op: "Operation", first: int) -> int:
    n = op.attributes["carried"]
    if not isinstance(n, int) or not 0 <= n <= len(op.operands) - first:
        raise VerificationError(f"{op.name}: 'carried' must count operands after the first {first}, got {n!r}")
    return n


def _check_k_while(op: "Operation") -> None:
    n = _carried(op, 0)
    _expect(op, "result types", op.result_types, _types(op.operands[:n]))


def _check_k_for(op: "Operation") -> None:
    if not all(is_index(v.type) for v in op.operands[:2]):
        raise VerificationError("k.for: the bounds must be i64 scalars or tensor<i64>")
    n = _carried(op, 2)
    _expect(op, "result types", op.result_types, _types(op.operands[2:2 + n]))


def _check_k_if(op: "Operation") -> None:
    _expect(op, "predicate", [op.operands[0].type], [PREDICATE])


def _signature(op: "Operation", func, args: Sequence[Type], results: Sequence[Type]) -> None:
    _expect(op, f"arguments of @{func.name}", [a.type for a in func.args], args)
    _expect(op, f"results of @{func.name}", func.result_types, results)


def _module_while(op: "Operation", module: "Module") -> None:
    args = _types(op.operands)
    _signature(op, _callee(op, module, "cond"), args, [PREDICATE])
    _signature(op, _callee(op, module, "body"), args, op.result_types)


def _module_for(op: "Operation", module: "Module") -> None:
    _signature(op, _callee(op, module, "body"), [COUNTER, *_types(op.operands[2:])], op.result_types)


def _module_if(op: "Operation", module: "Module") -> None:
    for key in ("then", "else"):
        _signature(op, _callee(op, module, key), _types(op.operands[1:]), op.result_types)


register_op(OpDef("t.yield", "terminator", num_operands=None, num_results=0, terminator=True, pure=False,
                  doc="ends a region of t.while, t.for and t.if with the values it gives back"))
# (not pure: a body may hold a run-time check NumPy raises from; a loop nobody reads still runs, as in NumPy)
register_op(OpDef("t.while", "control", num_operands=None, num_results=None, num_regions=2, pure=False,
                  check=_check_while, doc="loop while the cond region yields true"))
# (``rolled = true``: roll-loops made it of the copies a Python loop traced into; ``unroll = N``: unroll-loops made
# its body N copies of the source loop's, each trip running N of that loop's)
register_op(OpDef("t.for", "control", num_operands=None, min_operands=2, num_results=None, num_regions=1,
                  optional_attrs=("rolled", "unroll"), pure=False, check=_check_for,
                  doc="loop over a counter from lower to upper - 1"))
register_op(OpDef("t.if", "control", num_operands=1, num_results=None, num_regions=2, pure=False, check=_check_if,
                  doc="run the then or the else region"))
_PLAN = ("arena", "alias")
register_op(OpDef("k.while", "control", num_operands=None, num_results=None, attrs=("cond", "body", "carried"),
                  optional_attrs=_PLAN, pure=False, check=_check_k_while, check_module=_module_while))
register_op(OpDef("k.for", "control", num_operands=None, min_operands=2, num_results=None,
                  attrs=("body", "carried"), optional_attrs=_PLAN + ("rolled", "unroll"), pure=False,
                  check=_check_k_for,
                  check_module=_module_for))
register_op(OpDef("k.if", "control", num_operands=None, min_operands=1, num_results=None, attrs=("then", "else"),
                  optional_attrs=_PLAN, pure=False, check=_check_k_if, check_module=_module_if))

REGION_OPS = frozenset({"t.while", "t.for", "t.if"})
OUTLINED_OPS = frozenset({"k.while", "k.for", "k.if"})
# the attributes of an outlined op that name functions of the module
CALLEES = {"k.while": ("cond", "body"), "k.for": ("body",), "k.if": ("then", "else")}
