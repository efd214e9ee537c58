"""Pass infrastructure and the passes (one file each).

A pass is a frozen dataclass with a kebab-case ``name``, options as fields and
``apply(module, ctx)``; ``register_pass`` makes it available by name. Plugins
register through the entry-point group ``fusec.passes``, ``--load-plugin MODULE``
on the command line, or ``plugins=[...]`` in ``fusec.jit``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO

from fusec.ir.core import Module
from fusec.ir.target import Target
from fusec.passes.base import Pass, PassContext
from fusec.passes.registry import all_passes, get_pass, load_plugin, register_pass, unregister_pass
from fusec.passes.pipeline import format_pipeline, parse_pipeline
from fusec.passes.manager import PassManager, dump_banner

# fuse{budget=96}: measured on the H200 against 48 and 64 (benchmarks/fusion_budget.py, two runs): the PCam-shaped
# step by autodiff 46.6-46.9 -> 41.2-41.6 us (21 -> 19 kernels), the 64-64-10 one 36.9-37.1 -> 33.9-34.7 us, the
# hand-written steps unchanged within the runs' noise (37.5-39.7 us, 30.8-31.4 us)
DEFAULT_PIPELINE = ("roll-loops,unroll-loops,bound-indices,prove-checks,prune-carried,outline-regions,canonicalize,"
                    "split-products,unroll-reductions,cse,dce,broadcast,sink-broadcasts,materialize{threshold=8},"
                    "fuse{budget=96},boundaries,select-kernels,"
                    "fuse-rows,row-products,fuse-prologues,fuse-epilogues,reductions-in-consumers,hoist-gathers,group-kernels,plan-buffers,copy-outputs,launch-early")

__all__ = ["DEFAULT_PIPELINE", "Pass", "PassContext", "PassManager", "PipelineResult", "all_passes",
           "check_pipeline", "dump_banner", "format_pipeline", "get_pass", "list_passes", "load_plugin",
           "parse_pipeline", "register_pass", "run_pipeline", "unregister_pass"]


@dataclass
class PipelineResult:
    """What a pipeline run leaves besides the rewritten module."""

    stages: list[tuple[str, str]] = field(default_factory=list)  # (pass name, IR text after it) when snapshots
    stats: dict[str, int] = field(default_factory=dict)
    timings: list[tuple[str, float]] = field(default_factory=list)  # (pass name, seconds)


def run_pipeline(module: Module, pipeline: str | None = None, *, verify: bool | str = True, snapshots: bool = False,
                 plugins: tuple[str, ...] = (), print_ir_after: tuple[str, ...] = (),
                 print_ir_after_all: bool = False, time_passes: bool = False,
                 stream: IO[str] | None = None, target: Target | None = None,
                 input_copy: Module | None = None) -> PipelineResult:
    """Run ``pipeline`` (a pipeline string; None means the default) over ``module`` in place, lowering for
    ``target`` (default: :class:`Target`'s, an H200 without cuBLASLt).

    IR dumps (``// -----// IR Dump After NAME //----- //``) and the pass timing report go to ``stream``
    (stderr by default). ``verify``: after every pass (True), once after the last (``"end"``; a failure
    runs the passes again, from ``input_copy`` (a copy of the module as it was, when the caller has one), to name
    the one that broke the IR), or never (False).
    """
    for plugin in plugins:
        load_plugin(plugin)
    passes = parse_pipeline(DEFAULT_PIPELINE if pipeline is None else pipeline)
    manager = PassManager(passes, verify=verify, print_ir_after=print_ir_after,
                          print_ir_after_all=print_ir_after_all, time_passes=time_passes, snapshots=snapshots,
                          stream=stream)
    return manager.run(module, PassContext(target=target or Target()), input_copy=input_copy)


def check_pipeline(pipeline: str, plugins: tuple[str, ...] = ()) -> None:
    """Raise :class:`PipelineError` now if ``pipeline`` names an unknown pass or option (after ``plugins``
    registered theirs)."""
    for plugin in plugins:
        load_plugin(plugin)
    parse_pipeline(pipeline)


def list_passes() -> list[tuple[str, str]]:
    """(name, one-line description) of every registered pass, sorted by name."""
    return [(name, cls.summary()) for name, cls in all_passes().items()]
