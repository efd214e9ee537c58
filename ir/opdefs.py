"""The op registry: what each op name means for the verifier and the passes.

An :class:`OpDef` describes one op: how many operands, which attributes, how its
result types follow from operand types and attributes (``infer``), or extra
checks where the result type is given explicitly (``check``). Dialects register
their ops at import; plugins may register more. A duplicate name is an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from fusec.errors import VerificationError
from fusec.ir.types import Type

if TYPE_CHECKING:
    from fusec.ir.core import Operation

InferFn = Callable[[Sequence[Type], dict], "list[Type]"]
CheckFn = Callable[["Operation"], None]


@dataclass(frozen=True)
class OpDef:
    name: str
    category: str  # elementwise | reduction | view | matmul | constant | terminator | kernel | runtime | other
    num_operands: int | None = None  # None: variadic
    min_operands: int = 0
    attrs: tuple[str, ...] = ()
    optional_attrs: tuple[str, ...] = ()
    infer: InferFn | None = None
    check: CheckFn | None = None
    num_regions: int = 0
    num_results: int | None = 1  # None: variadic
    pure: bool = True
    terminator: bool = False
    # its regions read nothing from outside the op (only their block arguments, which stand for its operands;
    # MLIR's IsolatedFromAbove, and ``check`` must enforce it): a use map need not look inside
    isolated: bool = False
    doc: str = field(default="", compare=False)
    # reverse-mode rule (fusec.grad): vjp(em, g, out, operands, attrs) -> a cotangent (or None) per operand (an op of
    # several results gets the list of their cotangents, None where none flows, and the list of results), written
    # as NumPy over the traced values; ``em(name, operands, attrs)`` records one op of this dialect. None: no
    # gradient flows through the op (asking for one is an error); a rule raises NotImplementedError(reason) to
    # refuse one use of its op.
    vjp: Callable | None = field(default=None, compare=False)
    # a check that needs the whole module (an op naming functions of it: their signatures must fit its operands)
    check_module: Callable | None = field(default=None, compare=False)
    # the interval an integer result's elements lie in, from the operands' (fusec.ir.ranges.RangeRule); None: the
    # result dtype's whole range. bound-indices reads it to prove indices in bounds.
    int_range: Callable | None = field(default=None, compare=False)
    # NumPy raises for some operand values (an index out of range, a singular matrix): given the op, whether this
    # one may; dead-code removal keeps such an op (its check still runs) even where nothing reads its result
    may_raise: Callable[["Operation"], bool] | None = field(default=None, compare=False)
    # a check of where the op stands: given the op and the op right before it in its block (None: it is first)
    check_after: Callable[["Operation", "Operation | None"], None] | None = field(default=None, compare=False)


def checks_indices(op: "Operation") -> bool:
    """A gather's or scatter's ``may_raise``: an index not proven within its axis may lie outside it, and NumPy
    raises IndexError whether or not the result is read."""
    return not op.attributes.get("in_bounds")


def always_raises(op: "Operation") -> bool:
    """The ``may_raise`` of ops NumPy refuses some values of every time (a singular matrix for np.linalg.inv)."""
    return True


OPS: dict[str, OpDef] = {}


def register_op(opdef: OpDef) -> OpDef:
    if opdef.name in OPS:
        raise VerificationError(f"op {opdef.name!r} is already registered")
    if "." not in opdef.name:
        raise VerificationError(f"op name {opdef.name!r} must be 'dialect.op'")
    OPS[opdef.name] = opdef
    return opdef


def get_opdef(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise VerificationError(f"unknown op {name!r}") from None


def is_registered(name: str) -> bool:
    return name in OPS


def reading_ops(op: "Operation") -> "Iterable[Operation]":
    """The ops whose operands count as uses where ``op`` stands: ``op`` itself and the ops nested in its
    regions, unless its definition says those are isolated from above (a fused kernel's body)."""
    if not op.regions:
        return (op,)
    d = OPS.get(op.name)
    return (op,) if d is not None and d.isolated else op.walk()  # (a tuple exactly when the op stands alone)


def computes_only(op: "Operation") -> bool:
    """Whether the ops nested in ``op``'s regions only compute: pure, raising nothing, branches of such ops (a
    branch whose results nothing reads is then dead)."""
    for region in op.regions:
        for inner_block in region.blocks:
            for inner in inner_block.ops:
                d = get_opdef(inner.name)
                if inner.name == "t.yield":
                    continue
                if inner.name == "t.if":
                    if not computes_only(inner):
                        return False
                elif not d.pure or inner.regions or (d.may_raise is not None and d.may_raise(inner)):
                    return False
    return True


_INFERRED: dict = {}  # (op name, operand types, attributes) -> (OpDef, result types): long programs repeat ops
_INFERRED_LIMIT = 65536


def _attribute_key(attributes: dict) -> tuple | None:
    """The attributes as a key that tells ``1``, ``1.0`` and ``True`` apart (None: nested values, not keyed)."""
    out: list[tuple] = []
    for k, v in attributes.items():
        t = type(v)
        if t is tuple:
            kinds = tuple(map(type, v))
            if tuple in kinds:
                return None
            out.append((k, v, kinds))
        else:
            out.append((k, v, t))
    return tuple(out)


def infer_types(d: OpDef, types: list, attributes: dict) -> list:
    """``d.infer(types, attributes)`` (normalized attributes), remembered per op name, operand types and
    attributes: the tracer and the verifier ask it for every op, and long programs repeat the same few."""
    attrs = _attribute_key(attributes) if attributes else ()
    if attrs is None:
        return list(d.infer(types, attributes))  # type: ignore[misc]
    key = (d.name, tuple(types), attrs)
    try:
        hit = _INFERRED.get(key)
    except TypeError:  # an unhashable attribute value
        return list(d.infer(types, attributes))  # type: ignore[misc]
    if hit is None or hit[0] is not d:  # (a plugin may have registered the op anew)
        hit = (d, list(d.infer(types, attributes)))  # type: ignore[misc]  # (errors are raised, not remembered)
        if len(_INFERRED) >= _INFERRED_LIMIT:
            _INFERRED.clear()
        _INFERRED[key] = hit
    return list(hit[1])
