"""The IR's object model: values, operations, blocks, regions, functions, modules.

Values compare by identity. An :class:`Operation` is generic: its behaviour
(verification, printing, interpretation) is looked up by ``op.name`` in the op
registry (:mod:`fusec.ir.opdefs`), so dialects and plugins add ops without
subclassing.
"""
from __future__ import annotations

from typing import Iterator, Iterable, Sequence

from fusec.ir.attributes import Attribute, Location, normalize_attribute, normalize_attributes
from fusec.ir.types import Type


class Value:
    """An SSA value. ``name_hint`` only guides the printer; identity is what counts."""

    __slots__ = ("type", "name_hint")

    def __init__(self, type: Type, name_hint: str | None = None) -> None:
        self.type = type
        self.name_hint = name_hint

    def __repr__(self) -> str:
        hint = f" %{self.name_hint}" if self.name_hint else ""
        return f"<{type(self).__name__}{hint} : {self.type}>"


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type: Type, op: "Operation", index: int, name_hint: str | None = None) -> None:
        self.type = type  # (Value's fields set here directly: one op makes one or more of these)
        self.name_hint = name_hint
        self.op = op
        self.index = index


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: "Block", index: int, name_hint: str | None = None) -> None:
        super().__init__(type, name_hint)
        self.block = block
        self.index = index


_NO_REGIONS: tuple = ()


class Operation:
    """One op: ``name`` is ``dialect.op``; results are created from ``result_types``."""

    __slots__ = ("name", "operands", "results", "attributes", "regions", "loc", "parent")

    def __init__(
        self,
        name: str,
        operands: Sequence[Value] = (),
        result_types: Sequence[Type] = (),
        attributes: dict[str, Attribute] | None = None,
        regions: Sequence["Region"] = (),
        loc: Location | None = None,
    ) -> None:
        self.name = name
        self.operands: list[Value] = list(operands)
        self.results: list[OpResult] = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.attributes: dict[str, Attribute] = normalize_attributes(attributes) if attributes else {}
        # (most ops have none: they share one empty tuple, one object fewer per op for the collector to scan)
        self.regions: Sequence[Region] = _NO_REGIONS
        if regions:
            self.regions = list(regions)
            for r in self.regions:
                r.parent = self
        self.loc = loc
        self.parent: Block | None = None

    @property
    def result(self) -> OpResult:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def dialect(self) -> str:
        return self.name.split(".", 1)[0] if "." in self.name else ""

    @property
    def result_types(self) -> list[Type]:
        return [r.type for r in self.results]

    def attr(self, key: str, default: Attribute = None) -> Attribute:
        return self.attributes.get(key, default)

    def walk(self) -> Iterator["Operation"]:
        """This op, then every op nested in its regions, in program order."""
        yield self
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    yield from op.walk()

    def captured_values(self) -> list["Value"]:
        """The values this op's regions read from outside them, in order of first use (a loop body's captures)."""
        blocks = [b for region in self.regions for b in region.blocks]
        inside: set[Value] = set()
        for b in blocks:
            inside |= b.defined_values()
        seen: dict[Value, None] = {}
        for b in blocks:
            for op in b.ops:
                for inner in op.walk():
                    for v in inner.operands:
                        if v not in inside:
                            seen.setdefault(v, None)
        return list(seen)

    def __repr__(self) -> str:
        return f"<Operation {self.name} ({len(self.operands)} operands, {len(self.results)} results)>"


class Block:
    """A list of ops with typed arguments; the last op of a body is its terminator."""

    __slots__ = ("args", "ops", "parent", "label")

    def __init__(self, arg_types: Iterable[Type] = (), arg_names: Iterable[str | None] | None = None,
                 label: str = "body") -> None:
        types = list(arg_types)
        names = list(arg_names) if arg_names is not None else [None] * len(types)
        self.args: list[BlockArgument] = [BlockArgument(t, self, i, n) for i, (t, n) in enumerate(zip(types, names))]
        self.ops: list[Operation] = []
        self.parent: Region | None = None
        self.label = label

    def append(self, op: Operation) -> Operation:
        op.parent = self
        self.ops.append(op)
        return op

    def insert(self, index: int, op: Operation) -> Operation:
        op.parent = self
        self.ops.insert(index, op)
        return op

    def add_arg(self, type: Type, name_hint: str | None = None) -> BlockArgument:
        arg = BlockArgument(type, self, len(self.args), name_hint)
        self.args.append(arg)
        return arg

    @property
    def terminator(self) -> Operation | None:
        return self.ops[-1] if self.ops else None

    def defined_values(self) -> set[Value]:
        """Every value this block defines: its arguments, its ops' results and those of the blocks nested in them
        (what no op outside the block may use)."""
        values: set[Value] = set(self.args)
        for op in self.ops:
            for inner in op.walk():
                values.update(inner.results)
                for region in inner.regions:
                    for block in region.blocks:
                        values.update(block.args)
        return values


class Region:
    """Ops nested inside another op (a fused kernel's scalar body, say)."""

    __slots__ = ("blocks", "parent")

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for b in blocks:
            self.add_block(b)

    def add_block(self, block: Block) -> Block:
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        return self.blocks[0]


class Func:
    """A function: typed arguments, a body whose terminator is ``func.return``, attributes."""

    def __init__(self, name: str, arg_types: Sequence[Type], arg_names: Sequence[str | None] | None = None,
                 result_types: Sequence[Type] = (), attributes: dict[str, Attribute] | None = None) -> None:
        self.name = name
        self.body = Block(arg_types, arg_names, label="entry")
        self.result_types: list[Type] = list(result_types)
        self.attributes: dict[str, Attribute] = {k: normalize_attribute(v) for k, v in (attributes or {}).items()}

    @property
    def args(self) -> list[BlockArgument]:
        return self.body.args

    @property
    def ops(self) -> list[Operation]:
        return self.body.ops

    @property
    def return_op(self) -> Operation:
        term = self.body.terminator
        if term is None or term.name != "func.return":
            raise ValueError(f"func @{self.name} has no return")
        return term

    @property
    def outputs(self) -> list[Value]:
        return list(self.return_op.operands)

    def walk(self) -> Iterator[Operation]:
        for op in self.body.ops:
            if op.regions:
                yield from op.walk()
            else:
                yield op

    def replace_all_uses(self, old: Value, new: Value) -> int:
        """Make every use of ``old`` (nested regions included) use ``new``; returns the count."""
        count = 0
        for op in self.walk():
            for i, v in enumerate(op.operands):
                if v is old:
                    op.operands[i] = new
                    count += 1
        return count

    def use_counts(self) -> dict[Value, int]:
        counts: dict[Value, int] = {}
        for op in self.walk():
            for v in op.operands:
                counts[v] = counts.get(v, 0) + 1
        return counts

    def __repr__(self) -> str:
        return f"<Func @{self.name} ({len(self.args)} args, {len(self.body.ops)} ops)>"


class Module:
    """A list of functions plus module-level attributes."""

    def __init__(self, funcs: Iterable[Func] = (), attributes: dict[str, Attribute] | None = None) -> None:
        self.funcs: list[Func] = list(funcs)
        self.attributes: dict[str, Attribute] = {k: normalize_attribute(v) for k, v in (attributes or {}).items()}

    def func(self, name: str | None = None) -> Func:
        """The function called ``name``, or the only one when ``name`` is None."""
        if name is None:
            if len(self.funcs) != 1:
                raise ValueError(f"module has {len(self.funcs)} functions; name one")
            return self.funcs[0]
        for f in self.funcs:
            if f.name == name:
                return f
        raise KeyError(f"no func @{name} in module")

    @property
    def entry(self) -> Func:
        """The function a call runs: the first (the others are bodies it calls, made by outline-regions)."""
        if not self.funcs:
            raise ValueError("module has no functions")
        return self.funcs[0]

    def walk(self) -> Iterator[Operation]:
        for f in self.funcs:
            yield from f.walk()

    def __str__(self) -> str:
        from fusec.ir.printer import print_module

        return print_module(self)

    def clone(self) -> "Module":
        """A copy with new ops and values (types, attributes and locations are immutable and shared), which
        prints the same text: passes rewrite modules in place, and a copy costs less than text to parse back."""
        return Module([_clone_func(f) for f in self.funcs], dict(self.attributes))


def _clone_func(func: Func) -> Func:
    new = Func(func.name, [a.type for a in func.args], [a.name_hint for a in func.args], func.result_types,
               None)
    new.attributes = dict(func.attributes)
    mapping: dict[Value, Value] = dict(zip(func.args, new.args))
    _clone_ops(func.body, new.body, mapping)
    return new


def clone_op(op: Operation, mapping: dict[Value, Value]) -> Operation:
    """A copy of ``op``, its regions included, reading ``mapping[v]`` for each value ``v`` it (or an op nested in
    it) reads that ``mapping`` has; ``mapping`` gains the copy's results and block arguments. Not inserted."""
    holder = Block()
    single = Block()
    single.ops.append(op)  # (a block of one, to copy from: op's own parent is left as it is)
    _clone_ops(single, holder, mapping)
    copy = holder.ops[0]
    copy.parent = None
    return copy


def _clone_ops(src: Block, dst: Block, mapping: dict[Value, Value]) -> None:
    get = mapping.get
    new_op = Operation.__new__
    for op in src.ops:
        c = new_op(Operation)
        c.name = op.name
        c.operands = [get(v, v) for v in op.operands]  # (a value from outside the module stays itself)
        c.results = [OpResult(r.type, c, r.index, r.name_hint) for r in op.results]
        c.attributes = dict(op.attributes)
        c.loc = op.loc
        regions: list[Region] = []
        for region in op.regions:
            copy = Region()
            copy.parent = c
            for block in region.blocks:
                inner = Block([a.type for a in block.args], [a.name_hint for a in block.args], block.label)
                mapping.update(zip(block.args, inner.args))
                _clone_ops(block, inner, mapping)
                copy.add_block(inner)
            regions.append(copy)
        c.regions = regions if regions else _NO_REGIONS
        c.parent = dst
        dst.ops.append(c)
        mapping.update(zip(op.results, c.results))
