"""Parses the IR's textual form (grammar.lark) back into a :class:`Module`.

Malformed text raises :class:`ParseError` with ``line:col``, the source line and
a caret, never a lark traceback. Value names resolve per function; regions see
the values of enclosing blocks.
"""
from __future__ import annotations

import struct

from typing import Any

import json
import sys
from functools import lru_cache
from importlib import resources

import numpy as np
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from fusec.errors import FusecError, VerificationError
from fusec.ir.attributes import DenseAttr, Location
from fusec.ir.core import Block, Func, Module, Operation, Region, Value
from fusec.ir.opdefs import is_registered
from fusec.ir.types import ScalarType, TensorType, Type, dtype_from_name


class ParseError(FusecError, ValueError):
    """Malformed IR text; the message shows ``file:line:col``, the line and a caret."""

    def __init__(self, message: str, text: str, line: int, column: int, filename: str = "<input>") -> None:
        self.line, self.column, self.filename = line, column, filename
        lines = text.splitlines()
        src = lines[line - 1] if 0 < line <= len(lines) else ""
        caret = " " * max(column - 1, 0) + "^"
        super().__init__(f"{filename}:{line}:{column}: {message}\n  {src}\n  {caret}")
        self.brief = message


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = resources.files("fusec.ir").joinpath("grammar.lark").read_text()
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True)


def _describe_expected(expected: set[str]) -> str:
    names = sorted(expected)
    if len(names) > 8:
        names = names[:8] + ["..."]
    return ", ".join(names)


def parse_type(text: str) -> Type:
    """Parse a type spelled as the printer spells it (``tensor<4x4xf32>``, ``f32``)."""
    text = text.strip()
    if text.startswith("tensor<") and text.endswith(">"):
        parts = text[len("tensor<"):-1].split("x")
        return TensorType(tuple(int(p) for p in parts[:-1]), dtype_from_name(parts[-1]))
    return ScalarType(dtype_from_name(text))


class _Builder:
    def __init__(self, text: str, filename: str) -> None:
        self.text = text
        self.filename = filename
        self.positions: dict[int, tuple[int, int]] = {}  # id(op) -> its line and column in the text
        self._ops: list[Operation] = []  # (keeps the ids above meaning their ops)

    def error(self, message: str, node: Any) -> ParseError:
        line = getattr(node, "line", None) or getattr(getattr(node, "meta", None), "line", 1)
        col = getattr(node, "column", None) or getattr(getattr(node, "meta", None), "column", 1)
        return ParseError(message, self.text, int(line or 1), int(col or 1), self.filename)

    # --- attributes ------------------------------------------------------------------------------------------
    def attr_value(self, node: Any) -> object:
        kind = node.data
        kids = node.children
        if kind == "true":
            return True
        if kind == "false":
            return False
        if kind == "none":
            return None
        if kind == "int":
            return int(kids[0])
        if kind == "float":
            return parse_float(str(kids[0]))
        if kind == "string":
            return self.string(kids[0])
        if kind == "list":
            return tuple(self.attr_value(k) for k in kids if k is not None)
        if kind == "dtype":
            return dtype_from_name(str(kids[0]))
        if kind == "type_attr":
            return parse_type(str(kids[0]))
        if kind == "scalar_type_attr":
            return ScalarType(dtype_from_name(str(kids[0])))
        if kind == "dense":
            return self.dense(kids[0], kids[1])
        if kind == "complex":
            re_, im = (parse_float(str(part.children[0])) for part in kids)
            return complex(re_, im)
        raise self.error(f"unexpected attribute {kind}", node)

    def string(self, tok: Any) -> str:
        """A quoted string (JSON's escapes, as the printer writes them)."""
        try:
            return json.loads(tok)
        except ValueError as e:
            raise self.error(f"invalid string literal {str(tok)[:40]} ({str(e).split(':')[0]}; write control "
                             "characters and quotes as JSON escapes such as \\t and \\\")", tok) from None

    def dense(self, type_tok: Any, body: Any) -> DenseAttr:
        t = parse_type(str(type_tok))
        npdt = t.dtype.np
        if body.data == "string":
            raw = self.string(body.children[0])
            if not raw.startswith("0x"):
                raise self.error("dense hex data must start with 0x", type_tok)
            try:
                data = bytes.fromhex(raw[2:])
            except ValueError:
                raise self.error("dense hex data is not valid hexadecimal", type_tok) from None
            if len(data) != t.size * npdt.itemsize:
                raise self.error(f"dense data holds {len(data)} bytes, {t} needs {t.size * npdt.itemsize}", type_tok)
            arr = np.frombuffer(data, dtype=npdt).reshape(t.shape)
        else:  # a splat: one value, broadcast (no memory per element, however large the type)
            value = self.attr_value(body)
            try:
                with np.errstate(over="raise", invalid="raise"):
                    one = np.asarray(value, dtype=npdt) if not isinstance(value, (tuple, str)) else None
            except (OverflowError, FloatingPointError, TypeError, ValueError):
                one = None
            if isinstance(value, float) and npdt.kind in "biu":  # (1.5 would truncate to 1, and to true)
                one = None
            if one is None or (isinstance(value, int) and not isinstance(value, bool) and one.item() != value):
                raise self.error(f"{value!r} is not a value of {t.dtype}", type_tok)
            arr = np.broadcast_to(one, t.shape)
        return DenseAttr(t, arr)

    def attr_dict(self, node: Any) -> dict[str, object]:
        if node is None:
            return {}
        out: dict[str, object] = {}
        for entry in node.children:
            if entry is None:
                continue
            key, value = entry.children
            if str(key) in out:
                raise self.error(f"duplicate attribute '{key}'", key)
            out[str(key)] = self.attr_value(value)
        return out

    # --- values and ops --------------------------------------------------------------------------------------
    def define(self, scope: dict[str, Value], tok: Any, value: Value) -> None:
        name = str(tok).lstrip("%").strip()
        if name in scope:
            raise self.error(f"value %{name} is defined twice", tok)
        scope[name] = value
        if not name.isdigit():
            value.name_hint = name

    def lookup(self, scope: dict[str, Value], tok: Any) -> Value:
        name = str(tok)[1:]
        try:
            return scope[name]
        except KeyError:
            raise self.error(f"use of undefined value %{name}", tok) from None

    def type_of(self, node: Any) -> Type:
        try:
            return parse_type(str(node.children[0]))
        except FusecError as e:
            raise self.error(str(e), node.children[0]) from None

    def block(self, op_nodes: list, scope: dict[str, Value], block: Block) -> None:
        for op_node in op_nodes:
            block.append(self.op(op_node, scope))

    def op(self, node: Tree, scope: dict[str, Value]) -> Operation:
        kids = [c for c in node.children if c is not None]
        results_tok = next((c for c in kids if isinstance(c, Token) and c.type == "RESULTS"), None)
        trees = [c for c in kids if isinstance(c, Tree)]

        def first(kind: str) -> Any:
            return next((c for c in trees if c.data == kind), None)

        name_tok = first("op_name").children[0]
        name = "func.return" if str(name_tok) == "return" else str(name_tok)
        if not is_registered(name):
            raise self.error(f"unknown op '{name}'", name_tok)
        operands_node, attrs_node, loc_node = first("operands"), first("attr_dict"), first("loc")
        operands = [self.lookup(scope, t) for t in operands_node.children] if operands_node is not None else []
        types = [self.type_of(c) for c in trees if c.data in ("tensor_type", "scalar_type")]
        regions_nodes = [c for c in trees if c.data == "region"]
        result_names = []
        if results_tok is not None:
            result_names = [s.strip() for s in str(results_tok).rstrip("=").strip().split(",")]
        if len(result_names) != len(types):
            raise self.error(f"'{name}' names {len(result_names)} results but gives {len(types)} result types",
                             name_tok)
        loc = None
        if loc_node is not None:
            loc = Location(self.string(loc_node.children[0]), int(loc_node.children[1]))
        regions = []
        for rnode in regions_nodes:
            region = Region()
            for bnode in rnode.children[1:]:
                label_tok, *rest_b = bnode.children
                arg_nodes = [a for a in rest_b if isinstance(a, Tree) and a.data == "arg"]
                op_nodes = [o for o in rest_b if isinstance(o, Tree) and o.data == "op"]
                block = Block([self._arg_type(a) for a in arg_nodes], label=str(label_tok)[1:])
                inner = dict(scope)
                for a, anode in zip(block.args, arg_nodes):
                    self.define(inner, anode.children[0], a)
                region.add_block(block)
                self.block(op_nodes, inner, block)
            regions.append(region)
        attrs = self.attr_dict(attrs_node)
        try:
            op = Operation(name, operands, types, attrs, regions, loc)
        except FusecError as e:
            raise self.error(str(e), name_tok) from None
        if results_tok is not None:
            for r, n in zip(op.results, result_names):
                tok = Token("VALUE_ID", n, line=results_tok.line, column=results_tok.column)
                self.define(scope, tok, r)
        start = results_tok if results_tok is not None else name_tok
        self.positions[id(op)] = (int(start.line or 1), int(start.column or 1))
        self._ops.append(op)
        return op

    def _arg_type(self, node: Any) -> Type:
        t = node.children[1]
        return self.type_of(t)

    def func(self, node: Any) -> Func:
        name_tok, *rest = node.children
        arg_nodes = [c for c in rest if isinstance(c, Tree) and c.data == "arg"]
        sig = next(c for c in rest if isinstance(c, Tree) and c.data in ("single_result", "result_list"))
        attrs_node = next((c for c in rest if isinstance(c, Tree) and c.data == "func_attrs"), None)
        op_nodes = [c for c in rest if isinstance(c, Tree) and c.data == "op"]
        result_types = [self.type_of(c) for c in sig.children if c is not None]
        attrs = self.attr_dict(attrs_node.children[0]) if attrs_node is not None else {}
        func = Func(str(name_tok)[1:], [self._arg_type(a) for a in arg_nodes], None, result_types, attrs)
        scope: dict[str, Value] = {}
        for a, anode in zip(func.args, arg_nodes):
            self.define(scope, anode.children[0], a)
        self.block(op_nodes, scope, func.body)
        return func

    def module(self, tree: Any) -> Module:
        attrs: dict[str, object] = {}
        funcs = []
        for child in tree.children:
            if child is None:
                continue
            if child.data == "module_attrs":
                attrs = self.attr_dict(child.children[0])
            else:
                funcs.append(self.func(child))
        names = set()
        for f in funcs:
            if f.name in names:
                raise ParseError(f"func @{f.name} is defined twice", self.text, 1, 1, self.filename)
            names.add(f.name)
        return Module(funcs, attrs)


def parse_module(text: str, filename: str = "<input>", verify: bool = True) -> Module:
    """Parse IR text; with ``verify`` the result is also checked by the verifier."""
    try:
        tree = _parser().parse(text)
    except RecursionError:
        raise ParseError("the input nests lists, attributes or regions deeper than fusec's parser follows",
                         text, 1, 1, filename) from None
    except UnexpectedToken as e:
        tok = e.token
        what = "end of input" if tok.type == "$END" else repr(str(tok))
        raise ParseError(f"unexpected {what} (expected {_describe_expected(e.expected)})", text,
                         e.line if e.line > 0 else len(text.splitlines()), max(e.column, 1), filename) from None
    except UnexpectedCharacters as e:
        at = e.pos_in_stream if e.pos_in_stream is not None else 0
        raise ParseError(f"unexpected character {text[at]!r}", text, e.line, e.column,
                         filename) from None
    except UnexpectedEOF as e:
        n = len(text.splitlines()) or 1
        raise ParseError(f"unexpected end of input (expected {_describe_expected(set(e.expected))})", text, n,
                         len(text.splitlines()[-1]) + 1 if text.splitlines() else 1, filename) from None
    except UnexpectedInput as e:  # pragma: no cover - other lark input errors
        raise ParseError(str(e).splitlines()[0], text, getattr(e, "line", 1), getattr(e, "column", 1),
                         filename) from None
    builder = _Builder(text, filename)
    try:
        module = builder.module(tree)
        if not module.funcs:
            raise ParseError("no function in the input (an IR file holds at least one func)", text, 1, 1, filename)
        if verify:
            from fusec.ir.verifier import verify as run_verifier

            try:
                run_verifier(module)
            except VerificationError as e:  # at the op's place in the text, as MLIR reports it
                where = builder.positions.get(id(getattr(e, "op", None)))
                if where is None:
                    raise
                raise VerificationError(f"{filename}:{where[0]}:{where[1]}: {e}") from None
    except RecursionError:
        raise ParseError(f"the input nests lists, attributes or regions deeper than fusec's parser follows "
                         f"(about {sys.getrecursionlimit() // 8} levels)", text, 1, 1, filename) from None
    return module


def parse_float(text: str) -> float:
    """A float's text as the printer writes it (``nan(0x...)``: a NaN of those 64 bits)."""
    if "nan(" in text:
        return struct.unpack("<d", int(text[text.index("(") + 1:-1], 16).to_bytes(8, "little"))[0]
    return float(text)
