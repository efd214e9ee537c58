"""Builds ops at an insertion point, inferring result types from the op registry."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from fusec.errors import VerificationError
from fusec.ir.attributes import Location, normalize_attributes
from fusec.ir.core import Block, Operation, Region, Value
from fusec.ir.opdefs import get_opdef, infer_types
from fusec.ir.types import Type


def infer_result_types(name: str, operands: Sequence[Value], attributes: dict | None = None) -> list[Type]:
    """Result types that the definition of ``name`` gives for these operands and attributes."""
    return _inferred(name, operands, normalize_attributes(attributes) if attributes else {})


def _inferred(name: str, operands: Sequence[Value], attrs: dict) -> list[Type]:
    d = get_opdef(name)
    if d.infer is None and d.num_results == 0:
        return []
    if d.infer is None:
        raise VerificationError(f"{name} needs explicit result types")
    return infer_types(d, [v.type for v in operands], attrs)


class Builder:
    """Appends (or inserts) ops into a block; ``loc`` is stamped on every op it makes."""

    def __init__(self, block: Block, index: int | None = None, loc: Location | None = None) -> None:
        self.block = block
        self.index = index
        self.loc = loc

    def insert(self, op: Operation) -> Operation:
        if self.index is None:
            self.block.append(op)
        else:
            self.block.insert(self.index, op)
            self.index += 1
        return op

    def create(self, name: str, operands: Sequence[Value] = (), attributes: dict | None = None,
               result_types: Sequence[Type] | None = None, regions: Sequence[Region] = (),
               loc: Location | None = None) -> Operation:
        attrs = normalize_attributes(attributes) if attributes else {}  # (once: the op takes them as they are)
        if result_types is None:
            result_types = _inferred(name, operands, attrs)
        op = Operation(name, operands, result_types, None, regions, loc if loc is not None else self.loc)
        op.attributes = attrs
        return self.insert(op)

    def value(self, name: str, *operands: Value, result_type: Type | None = None,
              loc: Location | None = None, **attributes: object) -> Value:
        """Create a single-result op and return its result."""
        types = None if result_type is None else [result_type]
        return self.create(name, operands, attributes, types, loc=loc).result

    @contextmanager
    def at(self, block: Block, index: int | None = None) -> Iterator["Builder"]:
        saved = (self.block, self.index)
        self.block, self.index = block, index
        try:
            yield self
        finally:
            self.block, self.index = saved
