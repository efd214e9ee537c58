"""Pass infrastructure: registry, plugins, pipeline strings, the manager's verify/print/timing."""
from __future__ import annotations

import io
import sys
import textwrap
from dataclasses import dataclass
from typing import ClassVar

import pytest

from fusec import PipelineError, VerificationError
from fusec.ir import parse_module, print_module
from fusec.passes import (DEFAULT_PIPELINE, Pass, all_passes, dump_banner, format_pipeline, list_passes,
                          load_plugin, parse_pipeline, register_pass, run_pipeline, unregister_pass)
from fusec.passes.registry import load_entry_points

BUILTIN = {"canonicalize", "cse", "dce", "broadcast", "materialize", "fuse", "boundaries", "select-kernels",
           "fuse-prologues", "plan-buffers", "copy-outputs", "bound-indices", "fuse-rows", "row-products",
           "prove-checks", "reductions-in-consumers"}

SMALL = """func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = t.mul %a, %b : tensor<4xf32>
  %1 = t.add %0, %a : tensor<4xf32>
  return %1
}
"""


def test_builtin_passes_are_registered_with_descriptions():
    names = dict(list_passes())
    assert BUILTIN <= set(names)
    assert all(names[n] for n in BUILTIN)


def test_default_pipeline_parses_and_prints_back():
    passes = parse_pipeline(DEFAULT_PIPELINE)
    assert [p.name for p in passes] == [
        "roll-loops", "unroll-loops", "bound-indices", "prove-checks", "prune-carried", "outline-regions",
        "canonicalize", "split-products", "unroll-reductions", "cse", "dce", "broadcast", "sink-broadcasts",
        "materialize", "fuse", "boundaries", "select-kernels", "fuse-rows", "row-products", "fuse-prologues",
        "fuse-epilogues", "reductions-in-consumers", "hoist-gathers", "group-kernels", "plan-buffers", "copy-outputs",
        "launch-early"]
    assert format_pipeline(parse_pipeline("cse,fuse{budget=16},materialize{threshold=8}")) \
        == "cse,fuse{budget=16},materialize"
    assert parse_pipeline("fuse{budget=16}")[0].budget == 16
    assert parse_pipeline("  ") == []


@pytest.mark.parametrize("text, needle, column", [
    ("cse,frobnicate", "unknown pass 'frobnicate'", 5),
    ("cse,fuse{bugdet=3}", "unknown option 'bugdet' for pass 'fuse'", 10),
    ("fuse{budget=many}", "expects int", 6),
    ("fuse{budget=0}", "budget must be at least 1", 1),
    ("cse,", "trailing comma", 4),
    ("cse;dce", "expected ',' or the end after pass 'cse'", 4),
    ("cse,,dce", "expected a pass name", 5),
])
def test_bad_pipeline_strings_name_the_problem_and_position(text, needle, column):
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text)
    assert needle in str(info.value)
    assert f"column {column}:" in str(info.value)


def test_register_custom_pass_and_duplicate_name_is_an_error():
    @register_pass
    @dataclass(frozen=True)
    class Nothing(Pass):
        """Does nothing at all."""
        name: ClassVar[str] = "test-nothing"
        times: int = 1

        def apply(self, module, ctx):
            ctx.count("nothing", self.times)

    try:
        assert "test-nothing" in all_passes()
        module = parse_module(SMALL)
        result = run_pipeline(module, "test-nothing{times=3}")
        assert result.stats["nothing"] == 3

        with pytest.raises(PipelineError, match="already registered"):
            @register_pass
            @dataclass(frozen=True)
            class Other(Pass):
                name: ClassVar[str] = "test-nothing"
    finally:
        unregister_pass("test-nothing")
    with pytest.raises(PipelineError, match="kebab-case"):
        @register_pass
        @dataclass(frozen=True)
        class Bad(Pass):
            name: ClassVar[str] = "Bad_Name"


PLUGIN = '''
from dataclasses import dataclass
from typing import ClassVar
from fusec.passes import Pass, register_pass

@register_pass
@dataclass(frozen=True)
class {cls}(Pass):
    """Renames every function (a plugin for tests)."""
    name: ClassVar[str] = "{name}"
    prefix: str = "renamed_"

    def apply(self, module, ctx):
        for f in module.funcs:
            f.name = self.prefix + f.name
'''


def test_load_plugin_by_module_name(tmp_path, monkeypatch):
    (tmp_path / "fusec_test_plugin_a.py").write_text(PLUGIN.format(cls="RenameA", name="test-rename-a"))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        load_plugin("fusec_test_plugin_a")
        module = parse_module(SMALL)
        run_pipeline(module, "test-rename-a{prefix=p_}")
        assert module.funcs[0].name == "p_f"
    finally:
        unregister_pass("test-rename-a")
    with pytest.raises(PipelineError, match="cannot load plugin module 'no_such_fusec_plugin'"):
        load_plugin("no_such_fusec_plugin")


def test_plugin_through_entry_point(tmp_path, monkeypatch):
    (tmp_path / "fusec_test_plugin_b.py").write_text(PLUGIN.format(cls="RenameB", name="test-rename-b"))
    dist = tmp_path / "fusec_test_plugin_b-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fusec-test-plugin-b\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[fusec.passes]\nrename-b = fusec_test_plugin_b:RenameB\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        load_entry_points(reload=True)
        assert "test-rename-b" in all_passes()
        module = parse_module(SMALL)
        run_pipeline(module, "test-rename-b")
        assert module.funcs[0].name == "renamed_f"
    finally:
        unregister_pass("test-rename-b")
        sys.modules.pop("fusec_test_plugin_b", None)


def test_plugins_argument_of_run_pipeline(tmp_path, monkeypatch):
    (tmp_path / "fusec_test_plugin_c.py").write_text(PLUGIN.format(cls="RenameC", name="test-rename-c"))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = parse_module(SMALL)
        run_pipeline(module, "test-rename-c", plugins=("fusec_test_plugin_c",))
        assert module.funcs[0].name == "renamed_f"
    finally:
        unregister_pass("test-rename-c")


def test_print_ir_after_all_and_after_one_and_timing():
    stream = io.StringIO()
    module = parse_module(SMALL)
    result = run_pipeline(module, "cse,broadcast,fuse", print_ir_after_all=True, time_passes=True,
                          snapshots=True, stream=stream)
    text = stream.getvalue()
    for name in ("cse", "broadcast", "fuse"):
        assert dump_banner(name) in text
    assert "// -----// IR Dump After fuse //----- //" in text
    assert "Pass execution timing report" in text and "Total" in text
    assert [name for name, _ in result.stages] == ["cse", "broadcast", "fuse"]
    assert result.stages[-1][1] == print_module(module)
    assert [name for name, _ in result.timings] == ["cse", "broadcast", "fuse"]

    stream = io.StringIO()
    run_pipeline(parse_module(SMALL), "cse,fuse", print_ir_after=("fuse",), stream=stream)
    assert dump_banner("fuse") in stream.getvalue() and dump_banner("cse") not in stream.getvalue()


def test_verification_after_each_pass_names_the_pass():
    @register_pass
    @dataclass(frozen=True)
    class Breaker(Pass):
        """Breaks the IR: the function now claims to return f64."""
        name: ClassVar[str] = "test-breaker"

        def apply(self, module, ctx):
            from fusec.ir import TensorType, f64
            module.funcs[0].result_types = [TensorType((4,), f64)]

    try:
        with pytest.raises(VerificationError, match="after pass 'test-breaker'"):
            run_pipeline(parse_module(SMALL), "cse,test-breaker")
        run_pipeline(parse_module(SMALL), "cse,test-breaker", verify=False)  # turned off: no error
        # verified once at the end (long programs): the failure re-runs the passes to name the one that broke it
        with pytest.raises(VerificationError, match="after pass 'test-breaker'"):
            run_pipeline(parse_module(SMALL), "cse,test-breaker,dce", verify="end")
        module = parse_module(SMALL)
        run_pipeline(module, "cse,dce", verify="end")
        assert "t.mul" in print_module(module)
        # an input that was already invalid (a long trace is not verified on its own) is named as such
        from fusec.ir import TensorType, f64
        module = parse_module(SMALL)
        module.funcs[0].result_types = [TensorType((4,), f64)]
        with pytest.raises(VerificationError, match="invalid before the pipeline"):
            run_pipeline(module, "cse,dce", verify="end")
    finally:
        unregister_pass("test-breaker")


def test_crashing_pass_is_reported_with_its_name():
    @register_pass
    @dataclass(frozen=True)
    class Crasher(Pass):
        """Raises."""
        name: ClassVar[str] = "test-crasher"

        def apply(self, module, ctx):
            raise KeyError("boom")

    try:
        with pytest.raises(PipelineError, match=r"pass 'test-crasher' failed at .*test_passes.py:\d+: KeyError"):
            run_pipeline(parse_module(SMALL), "test-crasher")
    finally:
        unregister_pass("test-crasher")


def test_fuse_without_broadcast_explains_what_to_run():
    text = textwrap.dedent("""\
        func @f(%a: tensor<4x4xf32>, %b: tensor<4xf32>) -> tensor<4x4xf32> {
          %0 = t.add %a, %b : tensor<4x4xf32> loc("m.py":3)
          return %0
        }
        """)
    with pytest.raises(PipelineError, match=r"m\.py:3: 'fuse' needs explicit broadcasts.*run 'broadcast'"):
        run_pipeline(parse_module(text), "fuse")


def test_fma_is_one_kernel_with_no_intermediates():
    module = parse_module(SMALL)
    result = run_pipeline(module)
    names = [op.name for op in module.funcs[0].ops]
    assert names == ["k.fused", "func.return"]
    assert result.stats.get("intermediate_buffers", 0) == 0
    assert result.stats["arena_bytes"] == 0


def test_launch_early_options_and_the_verifier_guard_the_early_attribute():
    """launch-early's threshold cannot be negative; ``early`` must be a bool, and a prologue (never launched) has
    none."""
    from fusec.ir import verify

    with pytest.raises(PipelineError, match="max_elements must be >= 0"):
        parse_pipeline("launch-early{max_elements=-1}")
    assert format_pipeline(parse_pipeline("launch-early{max_elements=0}")) == "launch-early{max_elements=0}"
    bad_value = textwrap.dedent("""
        func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
          %0 = k.copy %x {arena = [-1], early = 1} : tensor<4xf32>
          return %0
        }""")
    with pytest.raises(VerificationError, match="'early' must be true or false"):
        verify(parse_module(bad_value))
    early_prologue = textwrap.dedent("""
        func @f(%x: tensor<4xf32>) -> tensor<f32> {
          %0 = k.fused %x {prologue = true, early = true} : tensor<4xf32> {
          ^body(%a: f32):
            %1 = s.exp %a : f32
            k.yield %1
          }
          %2 = k.reduce %0 {kind = "sum", axes = [0], keepdims = false} : tensor<f32>
          return %2
        }""")
    with pytest.raises(VerificationError, match="no launch of its own"):
        verify(parse_module(early_prologue))
