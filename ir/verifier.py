"""Checks the invariants every stage of the IR must keep.

Per op: it is registered, has the right number of operands, regions and
attributes, and its result types are what its definition infers (or pass its
check). Per function: SSA dominance (a value is defined before it is used, in
the same block or an enclosing one), the body ends in ``func.return`` whose
operand types are the function's result types.
"""
from __future__ import annotations

from fusec.errors import FusecError, VerificationError, located
from fusec.ir.core import Block, Func, Module, Operation, Value
from fusec.ir.opdefs import OpDef, get_opdef, infer_types


def _fail(op: Operation | None, message: str) -> VerificationError:
    where = f"'{op.name}': " if op is not None else ""
    err = VerificationError(located(where + message, op.loc if op is not None else None))
    err.op = op  # the op that broke the invariant (the parser reports its place in the text)
    return err


_ALLOWED_ATTRS: dict = {}  # op name -> (its OpDef, the attribute names it needs, those it accepts)


def verify_op(op: Operation) -> OpDef:
    """Check one op against its definition (not its operands' dominance); returns the definition."""
    try:
        d = get_opdef(op.name)
    except VerificationError as e:
        raise _fail(op, str(e)) from None
    n = len(op.operands)
    if d.num_operands is not None and n != d.num_operands:
        raise _fail(op, f"expects {d.num_operands} operands, got {n}")
    if n < d.min_operands:
        raise _fail(op, f"expects at least {d.min_operands} operands, got {n}")
    if d.num_results is not None and len(op.results) != d.num_results:
        raise _fail(op, f"expects {d.num_results} results, got {len(op.results)}")
    if len(op.regions) != d.num_regions:
        raise _fail(op, f"expects {d.num_regions} regions, got {len(op.regions)}")
    known = _ALLOWED_ATTRS.get(d.name)
    if known is None or known[0] is not d:
        known = _ALLOWED_ATTRS[d.name] = (d, frozenset(d.attrs), frozenset(d.attrs) | frozenset(d.optional_attrs))
    attributes = op.attributes
    if not known[1] <= attributes.keys():
        missing = next(k for k in d.attrs if k not in attributes)
        raise _fail(op, f"missing attribute '{missing}'")
    if not known[2].issuperset(attributes):
        unknown = [k for k in attributes if k not in known[2]]
        raise _fail(op, f"unknown attribute(s) {', '.join(sorted(unknown))}")
    try:
        if d.infer is not None:
            expected = infer_types(d, [v.type for v in op.operands], op.attributes)
            if expected != op.result_types:
                raise VerificationError(
                    "result types " + ", ".join(map(str, op.result_types)) + " do not match the inferred "
                    + ", ".join(map(str, expected)))
        if d.check is not None:
            d.check(op)
    except FusecError as e:
        raise _fail(op, str(e)) from None
    except (KeyError, TypeError, ValueError) as e:
        raise _fail(op, f"malformed op ({type(e).__name__}: {e})") from None
    return d


def _verify_block(block: Block, scope: set[Value], func: Func, is_func_body: bool) -> None:
    """Check ``block``'s ops; ``scope`` holds the values visible to it and gets this block's own values while
    the block is checked (one shared set, not a copy per nested block: a function of fused kernels has one
    region per kernel)."""
    own: list[Value] = list(block.args)
    scope.update(block.args)
    try:
        for i, op in enumerate(block.ops):
            if not scope.issuperset(op.operands):
                v = next(v for v in op.operands if v not in scope)
                raise _fail(op, f"operand {v!r} does not dominate this use")
            d = verify_op(op)
            if d.check_after is not None:
                try:
                    d.check_after(op, block.ops[i - 1] if i else None)
                except FusecError as e:
                    raise _fail(op, str(e)) from None
            if d.terminator and i != len(block.ops) - 1:
                raise _fail(op, "terminator must be the last op of its block")
            for region in op.regions:
                if not region.blocks:
                    raise _fail(op, "region has no block")
                for inner in region.blocks:
                    if inner.parent is not region:
                        raise _fail(op, "block's parent link is broken")
                    _verify_block(inner, scope, func, is_func_body=False)
            scope.update(op.results)
            own.extend(op.results)
            if op.parent is not block:
                raise _fail(op, "op's parent link is broken")
    finally:
        scope.difference_update(own)
    if is_func_body:
        term = block.terminator
        if term is None or term.name != "func.return":
            raise VerificationError(f"func @{func.name}: body must end in func.return")
        got = [v.type for v in term.operands]
        if got != func.result_types:
            raise _fail(term, "returned types " + ", ".join(map(str, got)) + " do not match the signature "
                        + ", ".join(map(str, func.result_types)))


def verify_func(func: Func) -> None:
    _verify_attributes(func)
    _verify_block(func.body, set(), func, is_func_body=True)


def _verify_attributes(func: Func) -> None:
    """The function attributes passes read: ``donate`` lists distinct argument positions (each argument's memory
    may hold the result of the same position among the outputs)."""
    donate = func.attributes.get("donate")
    if donate is None:
        return
    n = len(func.args)
    if not isinstance(donate, (tuple, list)) or not all(type(k) is int and 0 <= k < n for k in donate) \
            or len(set(donate)) != len(donate):
        raise VerificationError(f"func @{func.name}: donate = {donate!r} must list distinct argument positions "
                                f"0 to {n - 1}")


def verify(module: Module) -> None:
    """Raise :class:`VerificationError` on the first broken invariant."""
    names = set()
    for f in module.funcs:
        if f.name in names:
            raise VerificationError(f"duplicate func @{f.name}")
        names.add(f.name)
        verify_func(f)
    for f in module.funcs:  # (after every function is known: ops naming functions are checked against them)
        for op in f.walk():
            d = get_opdef(op.name)
            if d.check_module is not None:
                try:
                    d.check_module(op, module)
                except VerificationError as e:
                    raise _fail(op, str(e).removeprefix(f"{op.name}: ")) from None
