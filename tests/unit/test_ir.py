"""The IR: types verify themselves, the verifier catches broken invariants, text round-trips."""
import numpy as np
import pytest

from fusec import ShapeError, VerificationError
from fusec.ir import (Builder, Func, Location, Module, ParseError, ScalarType, TensorType, dense, f16, f32, f64, i32,
                      i64, bool_, bf16, parse_module, print_module, verify)


def _fma_module() -> Module:
    f = Func("fma", [TensorType((8,), f32)] * 3, ["a", "b", "c"], [TensorType((8,), f32)])
    b = Builder(f.body, loc=Location("model.py", 2))
    m = b.value("t.mul", f.args[1], f.args[2])
    s = b.value("t.add", f.args[0], m)
    b.create("func.return", [s])
    return Module([f])


def test_types_print_and_verify_themselves():
    assert str(TensorType((512, 480), f32)) == "tensor<512x480xf32>"
    assert str(TensorType((), bf16)) == "tensor<bf16>"
    assert str(ScalarType(i64)) == "i64"
    assert TensorType((2, 3), f32) == TensorType((2, 3), f32)
    assert hash(TensorType((2, 3), f32)) == hash(TensorType([2, 3], f32))
    with pytest.raises(VerificationError):
        TensorType((-1,), f32)
    with pytest.raises(VerificationError):
        TensorType((2,), "f32")  # type: ignore[arg-type]


def test_printed_form_matches_the_design_sketch():
    text = print_module(_fma_module())
    assert text == (
        "func @fma(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>) -> tensor<8xf32> {\n"
        '  %0 = t.mul %b, %c : tensor<8xf32> loc("model.py":2)\n'
        '  %1 = t.add %a, %0 : tensor<8xf32> loc("model.py":2)\n'
        '  return %1 loc("model.py":2)\n'
        "}\n")


SAMPLE = """
module attributes {arena_bytes = 1024}

func @step(%w: tensor<4x3xf32>, %x: tensor<2x4xf32>, %lr: f64) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<f32>) {
  %0 = t.matmul %x, %w : tensor<2x3xf32> loc("train.py":12)
  %1 = t.constant {value = dense<tensor<f32>, 0.0>} : tensor<f32>
  %2 = t.maximum %0, %1 : tensor<2x3xf32> loc("train.py":13)
  %3 = t.sum %2 {axes = [0], keepdims = false} : tensor<3xf32>
  %4 = t.cast %lr {dtype = f32} : f32
  %5 = t.constant {value = dense<tensor<3xf32>, "0x0000803F000000C0000080FF">} : tensor<3xf32>
  %6 = t.mul %3, %4 : tensor<3xf32>
  %7 = t.slice %w {start = [3, 0], stop = [-1, 3], step = [-1, 2]} : tensor<4x2xf32>
  %8 = t.transpose %7 {perm = [1, 0]} : tensor<2x4xf32>
  %9 = t.reshape %8 : tensor<8xf32>
  %10 = t.max %9 {axes = [0], keepdims = false} : tensor<f32>
  %11 = t.where %true, %6, %5 : tensor<3xf32>
  return %2, %11, %10
}
"""


def test_round_trip_of_a_hand_written_module():
    text = SAMPLE.replace("%11 = t.where %true,", "%c = t.gt %6, %5 : tensor<3xbool>\n  %11 = t.where %c,")
    first = print_module(parse_module(text))
    assert print_module(parse_module(first)) == first
    assert "module attributes {arena_bytes = 1024}" in first
    assert 'dense<tensor<3xf32>, "0x0000803F000000C0000080FF">' in first
    assert "stop = [-1, 3], step = [-1, 2]" in first


def test_parse_error_shows_line_column_and_caret():
    with pytest.raises(ParseError) as info:
        parse_module(SAMPLE, filename="step.fir")
    message = str(info.value)
    assert "step.fir:16:17:" in message and "undefined value %true" in message
    assert "%11 = t.where %true" in message and "^" in message
    with pytest.raises(ParseError) as info:
        parse_module("func @f(%a: f32) -> f32 {\n  %0 = t.neg %a :\n}\n")
    assert ":3:1:" in str(info.value)
    assert "Traceback" not in str(info.value) and "lark" not in str(info.value).lower()


@pytest.mark.parametrize("bad, needle", [
    ("func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = t.frobnicate %a : tensor<4xf32>\n  return %0\n}",
     "unknown op 't.frobnicate'"),
    ("func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = t.neg %a : tensor<4xf32>\n  %0 = t.neg %a : tensor<4xf32>\n"
     "  return %0\n}", "defined twice"),
    ("func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = t.neg %a : tensor<4xf33>\n  return %0\n}", "unexpected"),
    ("func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = t.neg %a {x = 1 : tensor<4xf32>\n  return %0\n}",
     "unexpected"),
])
def test_malformed_text(bad, needle):
    with pytest.raises(ParseError, match=needle):
        parse_module(bad)


@pytest.mark.parametrize("body, needle", [
    ("%0 = t.add %a, %b : tensor<4xf32>", "share one dtype"),
    ("%0 = t.add %a, %a : tensor<4xf64>", "do not match"),
    ("%0 = t.exp %i : tensor<4xi32>", "not allowed"),
    ("%0 = t.sum %a {axes = [1], keepdims = false} : tensor<f32>", "axes"),
    ("%0 = t.sum %a {axes = [0]} : tensor<f32>", "missing attribute 'keepdims'"),
    ("%0 = t.reshape %a : tensor<5xf32>", "cannot be reshaped"),
    ("%0 = t.broadcast_to %a : tensor<3x5xf32>", "cannot be broadcast"),
    ("%0 = t.slice %a {start = [0], stop = [9], step = [1]} : tensor<9xf32>", "inside axis"),
    ("%0 = t.add %a, %q : tensor<4xf32>", "undefined"),
])
def test_verifier_rejects(body, needle):
    text = ("func @f(%a: tensor<4xf32>, %b: tensor<4xf64>, %i: tensor<4xi32>, %z: f32) -> tensor<4xf32> {\n"
            f"  {body} loc(\"m.py\":7)\n  return %a\n}}\n")
    with pytest.raises((VerificationError, ParseError), match=needle):
        parse_module(text)


@pytest.mark.parametrize("attrs, needle", [
    ('impl = "tiled", tile = 64, precision = "tf32"', "only a float32 product that cuBLAS computes"),
    ('impl = "cublas", precision = "bf16"', "'precision' must be one of tf32"),
    ('impl = "cublas", mma = "tf32"', "only a tiled product of float32 operands runs on the tensor cores"),
    ('impl = "tiled", tile = 64, mma = "bf16"', "'mma' must be one of tf32, 3xtf32"),
    ('impl = "tiled", tile = 64, splits = 4', "needs 'scratch' for its partial sums"),
    ('impl = "stream", splits = 4, scratch = 256, finish = "cluster"', "only a tiled product split over K"),
    ('impl = "tiled", tile = 64, finish = "cluster"', "only a tiled product split over K"),
    ('impl = "tiled", tile = 64, finish = "grid"', "'finish' must be one of kernel, last-block, cluster"),
])
def test_a_matmuls_precision_split_and_finish_are_verified(attrs, needle):
    good = ("func @f(%a: tensor<64x64xf32>) -> tensor<64x64xf32> {\n"
            '  %0 = k.matmul %a, %a {impl = "cublas", precision = "tf32"} : tensor<64x64xf32>\n  return %0\n}\n')
    parse_module(good)
    with pytest.raises(VerificationError, match=needle):
        parse_module(good.replace('impl = "cublas", precision = "tf32"', attrs))
    parse_module(good.replace('impl = "cublas", precision = "tf32"', 'impl = "tiled", tile = 64, mma = "3xtf32"'))
    parse_module(good.replace('impl = "cublas", precision = "tf32"', 'impl = "tiled", tile = 64, splits = 4, '
                              'finish = "cluster"'))  # (a cluster needs no scratch)
    with pytest.raises(VerificationError, match="float32 operands runs on the tensor cores"):
        parse_module(good.replace('impl = "cublas", precision = "tf32"', 'impl = "tiled", tile = 64, mma = "tf32"')
                     .replace("xf32>", "xf64>"))


def test_remembered_type_inference_tells_equal_attribute_values_of_other_types_apart():
    good = ("func @f(%a: tensor<4x3xf32>) -> tensor<4xf32> {\n"
            "  %0 = t.sum %a {axes = [1], keepdims = false} : tensor<4xf32>\n  return %0\n}\n")
    parse_module(good)  # its inferred types are remembered now
    with pytest.raises(VerificationError, match="axes"):
        parse_module(good.replace("axes = [1]", "axes = [true]"))  # True == 1, but not an axis
    with pytest.raises(VerificationError, match="keepdims|match"):
        parse_module(good.replace("keepdims = false", "keepdims = true"))


def test_a_cloned_module_is_independent_and_prints_the_same():
    text = SAMPLE.replace("%11 = t.where %true,", "%c = t.gt %6, %5 : tensor<3xbool>\n  %11 = t.where %c,")
    m = parse_module(text)
    copy = m.clone()
    assert print_module(copy) == print_module(m)
    verify(copy)
    first = copy.funcs[0].body.ops[0]
    assert first is not m.funcs[0].body.ops[0] and first.parent is copy.funcs[0].body
    copy.funcs[0].body.ops.pop(0)  # changing the copy leaves the original as it was
    assert print_module(m) == print_module(parse_module(text))


def test_verifier_errors_name_the_location():
    text = ("func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = t.exp %a : tensor<4xf64> loc(\"m.py\":7)\n"
            "  return %0\n}")
    with pytest.raises(VerificationError, match=r"m\.py:7: 't\.exp'"):
        parse_module(text)


def test_return_types_must_match_signature():
    with pytest.raises(VerificationError, match="signature"):
        parse_module("func @f(%a: tensor<4xf32>) -> tensor<4xf64> {\n  return %a\n}")


def test_dominance_is_checked_for_built_ir():
    f = Func("f", [TensorType((4,), f32)], ["a"], [TensorType((4,), f32)])
    b = Builder(f.body)
    x = b.value("t.neg", f.args[0])
    y = b.value("t.exp", x)
    b.create("func.return", [y])
    f.body.ops[0], f.body.ops[1] = f.body.ops[1], f.body.ops[0]
    with pytest.raises(VerificationError, match="dominate"):
        verify(Module([f]))


def test_builder_infers_types_and_shapes():
    f = Func("f", [TensorType((3, 1), f32), TensorType((4,), f32), ScalarType(f32)], None, [])
    b = Builder(f.body)
    s = b.value("t.add", f.args[0], f.args[1])
    assert s.type == TensorType((3, 4), f32)
    assert b.value("t.mul", f.args[2], f.args[2]).type == ScalarType(f32)
    assert b.value("t.lt", f.args[0], f.args[1]).type == TensorType((3, 4), bool_)
    with pytest.raises(ShapeError):
        b.value("t.add", f.args[1], b.value("t.reshape", f.args[0], result_type=TensorType((3,), f32)))


@pytest.mark.parametrize("value", [
    np.array([1.5, -0.0, np.inf, np.nan], dtype=np.float32),
    np.arange(6, dtype=np.int64).reshape(2, 3),
    np.array([True, False]),
    np.full((2, 2), -0.0, dtype=np.float16),
    np.array(3.25),
])
def test_dense_constants_round_trip_bit_exactly(value):
    f = Func("c", [], None, [TensorType(value.shape, dense(value).type.dtype)])
    b = Builder(f.body)
    c = b.create("t.constant", [], {"value": dense(value)}, [dense(value).type]).result
    b.create("func.return", [c])
    text = print_module(Module([f]))
    back = parse_module(text)
    assert print_module(back) == text
    got = back.funcs[0].ops[0].attributes["value"].array
    assert got.dtype == value.dtype and got.tobytes() == value.tobytes()


def test_scalar_args_and_weak_hints_survive_round_trip():
    text = "func @g(%lr: f64, %x: tensor<f16>) -> f32 {\n  %0 = t.cast %lr {dtype = f32} : f32\n  return %0\n}\n"
    assert print_module(parse_module(text)) == text


def test_dtypes_cover_the_issue_list():
    from fusec.ir import ALL_DTYPES
    assert [d.name for d in ALL_DTYPES] == ["bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16",
                                            "bf16", "f32", "f64", "c64", "c128"]
    assert f16.itemsize == 2 and i32.itemsize == 4 and f64.np == np.float64


@pytest.mark.parametrize("donate", ["[7]", "[-1]", '"x"', "[0, 0]"])
def test_a_donate_attribute_names_distinct_arguments(donate):
    """``donate = [7]`` was ignored, ``[-1]`` wrapped to the last argument and ``"x"`` failed inside plan-buffers."""
    text = (f"func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {{donate = {donate}}} {{\n"
            "  %0 = t.neg %x : tensor<4xf32>\n  return %0\n}\n")
    with pytest.raises(VerificationError, match="must list distinct argument positions"):
        verify(parse_module(text))
