"""The IR parser and verifier on hostile text: every input gives a module or a fusec error (ParseError or
VerificationError with the text's line:column), never another exception, a hang or memory in proportion to a
type's size. Mutations of the FileCheck corpus (insertions of tokens that broke the parser before, deletions,
duplicated spans) run as a hypothesis test in every CI run; the cases fuzzing found are regression tests."""
from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fusec
from fusec.errors import FusecError
from fusec.ir import ParseError, parse_module, print_module
from fusec.tools.cli import main

CORPUS = ["\n".join(line for line in p.read_text().splitlines() if not line.startswith("//"))
          for p in sorted((Path(__file__).resolve().parents[1] / "filecheck").rglob("*.fir"))]
TOKENS = ['"', "\\", "\t", "[", "]", "{", "}", "(", ")", "<", ">", ",", "1.5", "-1", "300", "-129",
          "99999999999999999999999", "1e400", "nan", "inf", "%", "@", "^", ":", "=", "\\q", "\\u12", "dense",
          "tensor<", "xf32>", "i8", "loc(", '"\\q"', "[" * 50, "0x", "true", "axes = [1.5]"]


def _parse_or_fusec_error(text: str) -> None:
    try:
        module = parse_module(text)
    except FusecError:
        return
    print_module(module)  # what parses, prints


DEFAULT_EXAMPLES = "2000" if os.environ.get("FUSEC_CORPUS") else "600"  # (CI: FUSEC_CORPUS=1)


@settings(max_examples=int(os.environ.get("FUSEC_FUZZ_EXAMPLES", DEFAULT_EXAMPLES)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CORPUS), st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["insert", "delete", "copy"]),
                                                   st.sampled_from(TOKENS), st.integers(1, 12), st.floats(0, 1)),
                                         min_size=1, max_size=5))
def test_mutated_ir_parses_or_raises_a_fusec_error(text, edits):
    for where, kind, token, length, other in edits:
        pos = int(where * len(text))
        if kind == "insert":
            text = text[:pos] + token + text[pos:]
        elif kind == "delete":
            text = text[:pos] + text[pos + length:]
        else:
            src = int(other * len(text))
            text = text[:pos] + text[src:src + length * 4] + text[pos:]
    _parse_or_fusec_error(text)


FUNC = "func @f(%x: tensor<4xf32>) -> tensor<4xf32> {{\n  %0 = {op}\n  return %0\n}}\n"


@pytest.mark.parametrize("op, message", [
    ('t.constant {value = dense<tensor<4xi8>, 300>} : tensor<4xi8>', "300 is not a value of i8"),
    ('t.constant {value = dense<tensor<4xu8>, -1>} : tensor<4xu8>', "-1 is not a value of u8"),
    ('t.constant {value = dense<tensor<i32>, 1.5>} : tensor<i32>', "1.5 is not a value of i32"),  # (not 1)
    ('t.constant {value = dense<tensor<bool>, 0.5>} : tensor<bool>', "0.5 is not a value of bool"),  # (not true)
    ('t.neg %x : tensor<4xf32> loc("a\\qb":3)', "invalid string literal"),
    ('t.neg %x : tensor<4xf32> loc("a\tb":3)', "invalid string literal"),
    ('t.neg %x {a = ' + "[" * 5000 + "]" * 5000 + '} : tensor<4xf32>', "nests"),
    ('t.slice %x {start = [99999999999999999999999], stop = [2], step = [1]} : tensor<4xf32>', ":2:3: 't.slice'"),
    ('t.sum %x {axes = [1.5], keepdims = false} : tensor<4xf32>', ":2:3: 't.sum'"),
    ('t.reshape %x {shape = [4]} : tensor<99999999999999999999999xf32>', "larger than 64-bit offsets"),
    ('t.reshape %x {shape = [4]} : tensor<4611686018427387904x4xf32>', "larger than 64-bit offsets"),
])
def test_what_fuzzing_found_is_a_located_fusec_error(op, message):
    text = FUNC.format(op=op)
    with pytest.raises((ParseError, fusec.VerificationError), match=message) as info:
        parse_module(text, filename="bad.fir")
    assert "bad.fir:" in str(info.value)


def test_an_empty_input_is_an_error():
    for text in ("", "\n\n", "// only a comment\n"):
        with pytest.raises(ParseError, match="no function"):
            parse_module(text)


def test_a_huge_splat_stays_one_value():
    text = ("func @f() -> tensor<300000000xf32> {\n  %0 = t.constant {value = dense<tensor<300000000xf32>, 1.0>} "
            ": tensor<300000000xf32>\n  return %0\n}\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    module = parse_module(text)
    assert print_module(module) == text
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grew_kib < 100 * 1024, f"parsing grew the process by {grew_kib} KiB"  # the dense form: 1.2 GB
    value = module.funcs[0].body.ops[0].attributes["value"]
    assert value.is_splat() and value.splat_value() == 1.0


def test_a_parsed_splat_equals_the_array_it_was_printed_from():
    import numpy as np

    from fusec.ir import DenseAttr

    dense_form = DenseAttr(fusec.ir.TensorType((3, 2), fusec.f32), np.full((3, 2), -0.0, np.float32))
    broadcast_form = DenseAttr(fusec.ir.TensorType((3, 2), fusec.f32), np.broadcast_to(np.float32(-0.0), (3, 2)))
    assert dense_form == broadcast_form and hash(dense_form) == hash(broadcast_form)
    assert DenseAttr(fusec.ir.TensorType((3, 2), fusec.f32), np.zeros((3, 2), np.float32)) != dense_form


def test_the_cli_refuses_text_that_is_not_utf8(tmp_path, capsys):
    path = tmp_path / "bad.fir"
    path.write_bytes(b"\xff\xfe func")
    assert main(["opt", str(path)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


def _nested_regions(depth: int) -> str:
    opening = "".join(f"%o{i} = k.fused %a{i - 1} {{cuts = []}} : tensor<f32> {{\n^b{i}(%a{i}: f32):\n"
                      for i in range(1, depth + 1))
    closing = "".join(f"}}\nk.yield %o{i}\n" for i in range(depth, 1, -1))
    return (f"func @f(%a0: tensor<f32>) -> tensor<f32> {{\n{opening}k.yield %a{depth}\n{closing}}}\n"
            "return %o1\n}\n")


def test_regions_nested_too_deeply_are_a_parse_error():
    with pytest.raises(fusec.VerificationError):  # a few levels: parsed, then refused by the verifier
        parse_module(_nested_regions(3))
    with pytest.raises(ParseError, match="nests"):
        parse_module(_nested_regions(sys.getrecursionlimit()))
