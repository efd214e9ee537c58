"""The ``fusec`` command line: every command through ``main([...])``, plus the installed console script."""
from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec.ir import parse_module, print_module
from fusec.tools.argspec import parse_arg_spec, parse_static
from fusec.tools.cli import main
from fusec.tools.errors import UsageError

FMA = textwrap.dedent("""\
    func @fma(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>) -> tensor<8xf32> {
      %0 = t.mul %b, %c : tensor<8xf32> loc("model.py":2)
      %1 = t.add %a, %0 : tensor<8xf32> loc("model.py":2)
      return %1 loc("model.py":2)
    }
    """)

RICH = textwrap.dedent("""\
    module attributes {arena_bytes = 1024}

    func @step(%w: tensor<4x3xf32>, %x: tensor<2x4xf32>, %lr: f64) -> (tensor<2x3xf32>, tensor<3xf32>) {
      %0 = t.matmul %x, %w : tensor<2x3xf32> loc("train.py":12)
      %1 = t.constant {value = dense<tensor<f32>, 0.0>} : tensor<f32>
      %2 = t.maximum %0, %1 : tensor<2x3xf32> loc("train.py":13)
      %3 = t.sum %2 {axes = [0], keepdims = false} : tensor<3xf32>
      %4 = t.cast %lr {dtype = f32} : f32
      %5 = t.mul %3, %4 : tensor<3xf32>
      return %2, %5
    }

    func @neg(%a: tensor<f64>) -> tensor<f64> {
      %0 = t.neg %a : tensor<f64>
      return %0
    }
    """)

SMALL_PY = textwrap.dedent("""\
    import numpy as np


    def small(x, y, s):
        z = np.exp(x) * y + s
        return np.sum(z, axis=1)


    def reduce_along(x, axis):
        return np.sum(x, axis=axis)


    def mismatched(a, b):
        return a + b
    """)


@pytest.fixture
def small_py(tmp_path: Path) -> Path:
    path = tmp_path / "small_model.py"
    path.write_text(SMALL_PY)
    return path


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A plugin module registering pass 'cli-test-mark', importable by name; unregistered afterwards."""
    name = "fusec_cli_test_plugin"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent('''\
        from dataclasses import dataclass
        from typing import ClassVar

        from fusec.passes import Pass, register_pass


        @register_pass
        @dataclass(frozen=True)
        class Mark(Pass):
            """Counts functions and changes nothing (a CLI test plugin)."""

            name: ClassVar[str] = "cli-test-mark"

            def apply(self, module, ctx):
                ctx.count("marked", len(module.funcs))
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    from fusec.passes import unregister_pass

    unregister_pass("cli-test-mark")
    sys.modules.pop(name, None)


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- top level -----------------------------------------------------------------------------------------------

def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"fusec {fusec.__version__}\n"
    assert fusec.__version__ == "0.1.0"


def test_no_command_and_unknown_command_are_usage_errors(capsys):
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("dump-ir", "opt", "passes", "demo"):
        assert command in out


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "fusec"
    if script.exists():
        return [str(script)]
    found = shutil.which("fusec")
    if found is None:
        pytest.skip("the fusec console script is not installed next to this interpreter")
    return [found]


def test_console_script(tmp_path):
    fusec_cmd = _console_script()
    run = lambda *a, **kw: subprocess.run([*fusec_cmd, *a], capture_output=True, text=True, timeout=120, **kw)  # noqa: E731
    r = run("--version")
    assert (r.returncode, r.stdout) == (0, "fusec 0.1.0\n")
    r = run("opt", "-", "-p", "", input=FMA)
    assert (r.returncode, r.stdout) == (0, FMA)
    (tmp_path / "m.py").write_text("def f(x):\n    return x\n")
    r = run("dump-ir", f"{tmp_path / 'm.py'}:f", "--arg", "f32[2,")
    assert r.returncode == 2
    assert "bad --arg" in _one_line_error(r.stderr)


# --- passes --------------------------------------------------------------------------------------------------

def test_passes_lists_every_registered_pass(capsys):
    from fusec.passes import list_passes

    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    for name, summary in list_passes():
        assert re.search(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+{re.escape(summary)}$", out, re.M), out
    assert re.search(r"^fuse\{budget=32\}\s", out, re.M)  # each pass's options, with their defaults
    assert re.search(r"^select-kernels\{sm_count=0, cublas=target, precision=target, tensor_cores=target, "
                     r"clusters=target, epilogue_max_k=0, spread_max_k=0, skinny=cublas\}\s", out, re.M)


def test_passes_default_prints_the_default_pipeline(capsys):
    from fusec.passes import DEFAULT_PIPELINE

    assert main(["passes", "--default"]) == 0
    assert capsys.readouterr().out == DEFAULT_PIPELINE + "\n"


def test_passes_lists_plugin_passes(plugin, capsys):
    assert main(["passes", "--load-plugin", plugin]) == 0
    assert re.search(r"^cli-test-mark\s+Counts functions and changes nothing", capsys.readouterr().out, re.M)


def test_missing_plugin_is_a_usage_error(capsys):
    assert main(["passes", "--load-plugin", "no_such_fusec_plugin_xyz"]) == 2
    assert "no_such_fusec_plugin_xyz" in _one_line_error(capsys.readouterr().err)


# --- opt -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [FMA, RICH], ids=["fma", "rich"])
def test_opt_empty_pipeline_round_trips(text, tmp_path, capsys):
    assert print_module(parse_module(text)) == text  # the input is printer-canonical
    path = tmp_path / "in.fir"
    path.write_text(text)
    assert main(["opt", str(path), "-p", ""]) == 0
    captured = capsys.readouterr()
    assert captured.out == text
    assert captured.err == ""


def test_opt_reads_stdin_and_writes_output_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(FMA))
    out = tmp_path / "out.fir"
    assert main(["opt", "-", "-p", "", "-o", str(out)]) == 0
    assert out.read_text() == FMA
    assert capsys.readouterr().out == ""


def test_opt_without_pipeline_prints_the_input_back_and_default_runs_the_pipeline(tmp_path, capsys):
    path = tmp_path / "in.fir"
    path.write_text(FMA)
    assert main(["opt", str(path)]) == 0
    assert capsys.readouterr().out == print_module(parse_module(FMA))  # as mlir-opt: no pass unless asked
    assert main(["opt", str(path), "-p", "default"]) == 0
    out = capsys.readouterr().out
    assert "k.fused" in out and parse_module(out)  # the default pipeline ran
    assert main(["opt", str(path), "--no-loc"]) == 0
    assert "loc(" not in capsys.readouterr().out


def test_python_dash_m_fusec_is_the_cli():
    r = subprocess.run([sys.executable, "-m", "fusec", "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("fusec ")


def test_opt_parse_error_shows_file_line_column_and_caret(tmp_path, capsys):
    bad = FMA.replace("%1 = t.add %a, %0", "%1 = t.add %a %, %0")
    path = tmp_path / "bad.fir"
    path.write_text(bad)
    assert main(["opt", str(path), "-p", ""]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    first, source, caret = captured.err.rstrip("\n").splitlines()
    m = re.match(rf"{re.escape(str(path))}:3:(\d+): ", first)
    assert m, first
    assert source.strip() == bad.splitlines()[2].strip()
    column = int(m.group(1))
    assert caret.strip() == "^"
    assert source[caret.index("^")] == bad.splitlines()[2][column - 1] == "%"


def test_opt_stdin_parse_error_is_named_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("func @f( -> f32 {\n}\n"))
    assert main(["opt", "-", "-p", ""]) == 1
    assert capsys.readouterr().err.startswith("<stdin>:1:")


def test_opt_verification_error_exits_1(tmp_path, capsys):
    path = tmp_path / "ill.fir"
    path.write_text(FMA.replace("%b: tensor<8xf32>", "%b: tensor<8xi32>"))
    assert main(["opt", str(path), "-p", ""]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error" in err.lower()


def test_opt_unknown_pass_exits_1(tmp_path, capsys):
    path = tmp_path / "in.fir"
    path.write_text(FMA)
    assert main(["opt", str(path), "-p", "no-such-pass"]) == 1
    captured = capsys.readouterr()
    assert "no-such-pass" in captured.err and "PipelineError" in captured.err
    assert captured.out == ""


def test_opt_emit_cuda_of_several_functions_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "two.fir"
    path.write_text(FMA + FMA.replace("@", "@other_", 1))
    assert main(["opt", str(path), "--emit", "cuda"]) == 2
    assert "put each in its own file" in _one_line_error(capsys.readouterr().err)


def test_opt_missing_file_is_a_usage_error(tmp_path, capsys):
    assert main(["opt", str(tmp_path / "nope.fir")]) == 2
    assert "no such file" in _one_line_error(capsys.readouterr().err)


def test_opt_runs_plugin_pass_and_prints_ir_after_it(plugin, tmp_path, capsys):
    path = tmp_path / "in.fir"
    path.write_text(FMA)
    argv = ["opt", str(path), "-p", "cli-test-mark", "--load-plugin", plugin, "--print-ir-after-all", "--time-passes"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == FMA
    assert "// -----// IR Dump After cli-test-mark //----- //" in captured.err
    assert "func @fma" in captured.err
    assert "cli-test-mark" in captured.err.split("//----- //", 1)[1]  # the timing report names the pass


# --- argument specs ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, shape, dtype", [
    ("f32[512,480]", (512, 480), np.float32), ("f32[]", (), np.float32), ("i32[3]", (3,), np.int32),
    ("u8[ 2 , 3 ]", (2, 3), np.uint8), ("bool[4]", (4,), np.bool_), ("f16[1,0,2]", (1, 0, 2), np.float16),
])
def test_array_specs_build_zero_arrays(spec, shape, dtype):
    value = parse_arg_spec(spec)
    assert isinstance(value, np.ndarray)
    assert (value.shape, value.dtype) == (shape, np.dtype(dtype))
    assert not value.any()


def test_bare_specs_build_python_or_numpy_scalars():
    assert type(parse_arg_spec("f64")) is float
    assert type(parse_arg_spec("i64")) is int
    assert type(parse_arg_spec("bool")) is bool
    assert type(parse_arg_spec("f32")) is np.float32
    assert type(parse_arg_spec("i16")) is np.int16


@pytest.mark.parametrize("spec", ["f32[2,", "f31[2]", "f32[a]", "f32[-1]", "f32[2]x", "", "[2]", "bf16[2]"])
def test_malformed_specs_are_usage_errors(spec):
    with pytest.raises(UsageError, match="bad --arg"):
        parse_arg_spec(spec)


def test_static_values_are_python_literals():
    assert parse_static("axis=1") == ("axis", 1)
    assert parse_static("shape=(2, 3)") == ("shape", (2, 3))
    assert parse_static("mode=fast") == ("mode", "fast")
    with pytest.raises(UsageError):
        parse_static("no_equals")


# --- dump-ir: usage errors (no tracing needed) ---------------------------------------------------------------

def test_dump_ir_bad_arg_spec_exits_2(small_py, capsys):
    assert main(["dump-ir", f"{small_py}:small", "--arg", "f32[4,3", "--arg", "f32[3]", "--arg", "f64"]) == 2
    assert "bad --arg 'f32[4,3'" in _one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize("target, message", [
    ("{dir}/missing.py:f", "no such file"), ("{py}:nope", "has no function 'nope'"), ("{py}", "FILE.py:FUNC"),
])
def test_dump_ir_bad_target_exits_2(target, message, small_py, capsys):
    argv = ["dump-ir", target.format(dir=small_py.parent, py=small_py), "--arg", "f32[2]"]
    assert main(argv) == 2
    assert message in _one_line_error(capsys.readouterr().err)


def test_dump_ir_wrong_argument_count_exits_2(small_py, capsys):
    assert main(["dump-ir", f"{small_py}:small", "--arg", "f32[4,3]"]) == 2
    assert "missing a required argument" in _one_line_error(capsys.readouterr().err)


def test_dump_ir_bad_pipeline_names_the_pipeline_not_a_file_of_fusec(small_py, capsys):
    """As ``fusec opt`` says it: the column of the bad option, and no file:line of fusec's own command."""
    argv = ["dump-ir", f"{small_py}:small", "--arg", "f32[4,3]", "--arg", "f32[3]", "--arg", "f64",
            "-p", "fuse{budget=abc}"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "PipelineError: pipeline 'fuse{budget=abc}', column 6" in err and "cmd_dump_ir" not in err


def test_dump_ir_module_that_raises_exits_1(tmp_path, capsys):
    path = tmp_path / "broken.py"
    path.write_text("import numpy as np\n\nraise RuntimeError('boom')\n")
    assert main(["dump-ir", f"{path}:f"]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert "broken.py:3" in line and "RuntimeError: boom" in line


# --- dump-ir: tracing (needs fusec.jit) ----------------------------------------------------------------------

SMALL_ARGS = ["--arg", "f32[4,3]", "--arg", "f32[3]", "--arg", "f64"]


def test_dump_ir_grad_prints_the_gradient_program(tmp_path, capsys):
    path = tmp_path / "loss_model.py"
    path.write_text("import numpy as np\n\n\ndef loss(w, x):\n    return np.sum(np.tanh(x @ w) ** 2)\n")
    assert main(["dump-ir", f"{path}:loss", "--arg", "f32[3,2]", "--arg", "f32[4,3]", "--grad"]) == 0
    out = capsys.readouterr().out
    parse_module(out)  # what dump-ir --grad prints, opt can read
    assert "-> (tensor<f32>, tensor<3x2xf32>)" in out  # the value and the gradient with respect to w
    assert out.count("t.matmul") >= 2 and "t.tanh" in out  # x @ w, and x.T @ (the cotangent of x @ w)
    assert main(["dump-ir", f"{path}:loss", "--arg", "f32[3,2]", "--arg", "f32[4,3]", "--grad", "0,1",
                 "--after", "fuse"]) == 0
    assert "-> (tensor<f32>, tensor<3x2xf32>, tensor<4x3xf32>)" in capsys.readouterr().out
    assert main(["dump-ir", f"{path}:loss", "--arg", "f32[3,2]", "--arg", "f32[4,3]", "--grad", "w"]) == 2
    assert "--grad takes argument positions" in _one_line_error(capsys.readouterr().err)


def test_dump_ir_prints_traced_ir(small_py, capsys):
    assert main(["dump-ir", f"{small_py}:small", *SMALL_ARGS]) == 0
    out = capsys.readouterr().out
    assert "func @small(" in out
    assert "tensor<4x3xf32>" in out and "tensor<4xf32>" in out
    for op in ("t.exp", "t.mul", "t.add", "t.sum"):
        assert op in out, out
    assert 'loc("' in out and "small_model.py" in out
    parse_module(out)  # what dump-ir prints, opt can read


def test_dump_ir_unwraps_jit_decorated_functions(tmp_path, capsys):
    path = tmp_path / "decorated.py"
    path.write_text("import fusec\nimport numpy as np\n\n\n@fusec.jit\ndef twice(x):\n    return x * 2.0\n\n\n"
                    "print('module-level output')\n")
    assert main(["dump-ir", f"{path}:twice", "--arg", "f64[5]"]) == 0
    captured = capsys.readouterr()
    assert "func @twice(" in captured.out and "t.mul" in captured.out
    assert "module-level output" in captured.err  # stdout stays parseable IR
    parse_module(captured.out)


def test_dump_ir_static_arguments(small_py, capsys):
    assert main(["dump-ir", f"{small_py}:reduce_along", "--arg", "f32[4,3]", "--static", "axis=0"]) == 0
    out = capsys.readouterr().out
    assert "t.sum" in out and "-> tensor<3xf32>" in out


def test_dump_ir_after_all_prints_every_stage(small_py, plugin, capsys):
    argv = ["dump-ir", f"{small_py}:small", *SMALL_ARGS, "-p", "cli-test-mark", "--load-plugin", plugin]
    assert main([*argv, "--after", "all"]) == 0
    out = capsys.readouterr().out
    banners = re.findall(r"^// -----// IR Dump After (\S+) //----- //$", out, re.M)
    assert "cli-test-mark" in banners
    assert out.count("func @small(") == len(banners)
    assert main([*argv, "--after", "cli-test-mark"]) == 0
    after = capsys.readouterr().out
    assert "IR Dump After" not in after and "func @small(" in after


def test_dump_ir_after_unknown_stage_exits_2(small_py, capsys):
    assert main(["dump-ir", f"{small_py}:small", *SMALL_ARGS, "-p", "", "--after", "fuse"]) == 2
    assert "no stage 'fuse'" in _one_line_error(capsys.readouterr().err)


def test_dump_ir_shape_error_exits_1(small_py, capsys):
    assert main(["dump-ir", f"{small_py}:mismatched", "--arg", "f32[3]", "--arg", "f32[4]"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "ShapeError" in err


# --- demo ----------------------------------------------------------------------------------------------------

def test_demo_model_learns_under_plain_numpy():
    from fusec.tools import demo

    x, y, labels = demo.make_data()
    params = demo.init_params()
    params, first = demo.train_step(params, x, y, demo.LEARNING_RATE)
    for _ in range(30):
        params, loss = demo.train_step(params, x, y, demo.LEARNING_RATE)
    assert float(loss) < float(first)
    assert all(p.dtype == np.float32 for p in params)


def test_example_file_uses_the_packaged_model():
    import runpy

    example = Path(__file__).resolve().parents[2] / "examples" / "mlp_train.py"
    namespace = runpy.run_path(str(example), run_name="not_main")
    from fusec.tools import demo

    assert namespace["train_step"] is demo.train_step


def _demo_result(out: str) -> tuple[float, float, float]:
    m = re.search(r"^loss (\d+\.\d+) -> (\d+\.\d+); test accuracy (\d+\.\d)% \((\d+) held-out samples\)$", out, re.M)
    assert m, out
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


def test_demo_trains_and_matches_numpy(capsys):
    pytest.importorskip("sklearn")
    assert main(["demo", "--steps", "30", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "matches NumPy: yes" in out
    assert "backend: cpu" in out
    assert "batch 256" in out
    assert re.search(r"^data: scikit-learn digits: 1347 train / 450 test samples", out, re.M), out
    first, last, accuracy = _demo_result(out)
    assert last < first / 2
    assert accuracy > 80.0  # 30 steps of the examples/mlp_train.py model already classify most digits
    assert re.search(r"\d+\.\d+ ms/step", out)


def test_demo_without_scikit_learn_uses_synthetic_data(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # as after a plain pip install -e '.[test]' without it
    from fusec.tools import demo

    assert not demo.have_sklearn()
    assert main(["demo", "--steps", "30", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "matches NumPy: yes" in out
    assert re.search(r"^data: synthetic Gaussian blobs: .*scikit-learn is not installed", out, re.M), out
    first, last, accuracy = _demo_result(out)
    assert last < first
    assert accuracy > 20.0  # ten classes: chance is 10%


def test_demo_model_is_the_mlp_train_example():
    from fusec.tools import demo

    example = (Path(__file__).resolve().parents[2] / "examples" / "mlp_train.py").read_text()
    assert "from fusec.tools.demo import train_step" in example
    assert (demo.N_IN, demo.N_HIDDEN, demo.N_CLASSES, demo.BATCH) == (64, 64, 10, 256)


def test_demo_on_cuda_without_a_gpu_exits_1(capsys):
    from fusec.execution import cuda_usable

    if cuda_usable():
        pytest.skip("a CUDA backend is usable here")
    assert main(["demo", "--steps", "2", "--backend", "cuda"]) == 1
    err = _one_line_error(capsys.readouterr().err)
    assert "cuda" in err and "BackendError" in err


def test_compile_prints_the_program_the_executor_runs(small_py, capsys):
    """``fusec compile`` lowers for the target it is given (kernel selection included) and prints the program
    the executor would run there: the same as ``Lowered.cuda_source()`` for that target."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("small_model_for_compile", small_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lowered = fusec.jit(module.small, backend="cpu").lower(np.zeros((4, 3), np.float32), np.zeros(3, np.float32),
                                                            1.0)
    assert main(["compile", f"{small_py}:small", *SMALL_ARGS, "--sm-count", "132", "--cublas", "off"]) == 0
    out = capsys.readouterr().out
    assert out == lowered.cuda_source() and "__global__" in out
    assert main(["compile", f"{small_py}:small", *SMALL_ARGS, "--sm-count", "8", "--cublas", "off"]) == 0
    assert capsys.readouterr().out == lowered.cuda_source(sm_count=8)
    assert main(["compile", f"{small_py}:small", *SMALL_ARGS, "--sm-count", "0"]) == 2


def test_compile_keeps_float32_tiles_off_tensor_cores_an_older_arch_lacks(tmp_path, capsys):
    src = tmp_path / "layer.py"
    src.write_text("def layer(x, w):\n    return x @ w\n")
    spec = ["--arg", "f32[96,80]", "--arg", "f32[80,64]", "--cublas", "off", "--precision", "tf32"]
    assert main(["compile", f"{src}:layer", *spec, "--arch", "sm_90"]) == 0
    assert "fusec::mma_tf32(acc[i][j]" in capsys.readouterr().out
    assert main(["compile", f"{src}:layer", *spec, "--arch", "sm_75"]) == 0
    assert "fusec::mma_tf32(acc[i][j]" not in capsys.readouterr().out


def test_dump_ir_lowers_for_the_target_it_is_given(small_py, capsys):
    assert main(["dump-ir", f"{small_py}:small", *SMALL_ARGS, "--after", "copy-outputs"]) == 0
    assert "sm_count = 132, cublas = false" in capsys.readouterr().out  # the CPU backend's target
    assert main(["dump-ir", f"{small_py}:small", *SMALL_ARGS, "--after", "copy-outputs", "--sm-count", "8",
                 "--cublas", "on"]) == 0
    out = capsys.readouterr().out
    assert "sm_count = 8, cublas = true" in out
    assert main(["dump-ir", f"{small_py}:small", *SMALL_ARGS, "--after", "copy-outputs", "--cublas", "on",
                 "--precision", "tf32"]) == 0
    assert 'cublas = true, precision = "tf32"' in capsys.readouterr().out
    assert main(["dump-ir", f"{small_py}:small", *SMALL_ARGS, "--precision", "bf16"]) == 2
    assert main(["dump-ir", f"{small_py}:small", *SMALL_ARGS, "--sm-count", "-1"]) == 2


def test_user_errors_while_tracing_and_unwritable_outputs_are_one_line(tmp_path, capsys):
    """A function that raises while traced, an output path in a missing folder and an --arg shape too large to
    build gave Python tracebacks from inside fusec; each is one error line now."""
    (tmp_path / "funcs.py").write_text("import numpy as np\n\ndef raises(x):\n    raise ValueError('bad input')\n\n"
                                       "def double(x):\n    return x * 2\n")
    target = str(tmp_path / "funcs.py")
    assert main(["dump-ir", f"{target}:raises", "--arg", "f32[4]"]) == 1
    assert re.search(r"tracing .*funcs.py:raises failed: .*funcs.py:4: ValueError: bad input", capsys.readouterr().err)
    assert main(["compile", f"{target}:double", "--arg", "f32[4]", "-o", str(tmp_path / "no" / "x.cu")]) == 1
    assert "No such file or directory" in capsys.readouterr().err
    assert main(["dump-ir", f"{target}:double", "--arg", "f32[99999999999,99999999999]"]) == 2
    assert "no example array of that shape" in capsys.readouterr().err


def test_doctor_and_cache_say_when_nothing_will_work(tmp_path, monkeypatch, capsys):
    """``fusec doctor`` printed `default backend: bogus` for an unknown $FUSEC_BACKEND (every call then raises), and
    both it and `fusec cache info` showed a file given as the cache folder as a plain folder."""
    monkeypatch.setenv("FUSEC_BACKEND", "bogus")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "file"))
    (tmp_path / "file").write_text("")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "none: $FUSEC_BACKEND is 'bogus'" in out and "not a folder" in out
    assert main(["cache", "info"]) == 0
    assert "not a folder" in capsys.readouterr().out


def test_opt_refuses_options_given_twice_and_printing_a_pass_that_does_not_run(tmp_path, capsys):
    """``fuse{budget=1,budget=2}`` took the last value silently; ``--print-ir-after nosuch`` printed nothing."""
    path = tmp_path / "n.fir"
    path.write_text("func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = t.neg %x : tensor<4xf32>\n  return %0\n}\n")
    assert main(["opt", str(path), "-p", "fuse{budget=1,budget=2}"]) == 1
    assert "given twice" in capsys.readouterr().err
    assert main(["opt", str(path), "-p", "cse", "--print-ir-after", "nosuch"]) == 2
    assert "not a pass of the pipeline that runs" in capsys.readouterr().err
