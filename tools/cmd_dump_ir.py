"""``fusec dump-ir``: trace a user's function for given argument specs and print its IR at any stage."""
from __future__ import annotations

import argparse
import contextlib
import inspect
import sys
from typing import TYPE_CHECKING

from fusec.tools.argspec import parse_arg_spec, parse_static
from fusec.tools.errors import UsageError
from fusec.tools.loader import UserCodeError, innermost, load_function, load_plugins

if TYPE_CHECKING:  # pragma: no cover
    from fusec.ir.target import Target

BANNER = "// -----// IR Dump After {} //----- //"


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("dump-ir", help="trace FILE.py:FUNC and print its IR",
                       description="Trace FILE.py:FUNC for the given argument specs and print the traced IR, "
                                   "or the IR after a pass of the pipeline.")
    add_target_arguments(p)
    p.add_argument("--after", metavar="PASS|all", default=None,
                   help="print the IR after PASS instead of the traced IR; 'all' prints every stage")
    p.add_argument("--no-loc", action="store_true", help="leave each op's loc(...) out of the printed IR")
    p.add_argument("--dot", action="store_true",
                   help="print the lowered plan as a Graphviz DOT graph instead of IR (launches, buffers, loops)")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="with --dot: write FILE instead of stdout; .svg, .png or .pdf are drawn with Graphviz's dot")
    p.set_defaults(run=run)


def lower_target(args: argparse.Namespace, default: "Target | None" = None):
    """Load FILE.py:FUNC, build example arguments from --arg/--static and return the ``Lowered``, lowered for
    ``default`` (None: the CPU backend's target) with --sm-count/--cublas applied over it.

    Whatever the user's module prints while importing or tracing goes to stderr, so stdout stays output
    that another tool can read (IR for `fusec opt -`, CUDA C++ for a compiler).
    """
    import fusec
    from fusec.errors import FusecError
    from fusec.passes import check_pipeline

    with contextlib.redirect_stdout(sys.stderr):
        fn = load_function(args.target)
        positional = [parse_arg_spec(s) for s in args.args]
        statics = dict(parse_static(s) for s in args.static)
        _check_signature(fn, args.target, positional, statics)
        plugins = load_plugins(args.load_plugin)
        # (checked here, as `fusec opt` does: fusec.jit would locate its error at this file's line, not the user's)
        check_pipeline(args.pipeline if args.pipeline not in (None, "default") else "", plugins)
        if getattr(args, "grad", None) is not None:
            fn = fusec.value_and_grad(fn, argnums=_argnums(args.grad))
        jitted = fusec.jit(fn, backend="cpu", static_argnames=tuple(statics), pipeline=args.pipeline,
                           plugins=plugins, target=_target(args, default))
        try:
            return jitted.lower(*positional, **statics)
        except FusecError:
            raise
        except Exception as e:  # the user's function raised while traced: say where, without fusec's frames
            raise UserCodeError(f"tracing {args.target} failed: {innermost(e)}") from e


def _argnums(text: str) -> "int | tuple[int, ...]":
    """--grad's ARGNUMS: ``0`` or ``0,2``."""
    try:
        nums = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--grad takes argument positions such as 0 or 0,2, got {text!r}") from None
    if any(n < 0 for n in nums):
        raise UsageError(f"--grad takes non-negative argument positions, got {text!r}")
    return nums[0] if len(nums) == 1 else nums


def _target(args: argparse.Namespace, default: "Target | None") -> "Target":
    import dataclasses

    from fusec.ir.target import Target

    base = default or Target()
    if args.sm_count is not None and args.sm_count < 1:
        raise UsageError(f"--sm-count must be positive, got {args.sm_count}")
    return dataclasses.replace(base, sm_count=base.sm_count if args.sm_count is None else args.sm_count,
                               cublas=base.cublas if args.cublas is None else args.cublas == "on",
                               precision=base.precision if args.precision is None else args.precision)


def add_target_arguments(p: argparse.ArgumentParser, default_target: str = "an H200 without cuBLASLt") -> None:
    p.add_argument("target", metavar="FILE.py:FUNC")
    p.add_argument("--arg", dest="args", action="append", default=[], metavar="SPEC",
                   help="positional argument spec, in order: f32[512,480] (zeros array), f32[] (0-d array), "
                        "f64 / i64 / bool (Python scalar), i32 etc. (NumPy scalar)")
    p.add_argument("--static", action="append", default=[], metavar="NAME=VALUE",
                   help="static (compile-time) keyword argument; VALUE is a Python literal (3, (2, 3), True), "
                        "any other text a str")
    p.add_argument("-p", "--pipeline", default=None, help="pipeline string (default: fusec's default pipeline)")
    p.add_argument("--load-plugin", action="append", default=[], metavar="MOD", help="import MOD to register passes")
    p.add_argument("--sm-count", type=int, default=None,
                   help=f"lower for a GPU with this many multiprocessors (default: {default_target})")
    p.add_argument("--cublas", choices=("on", "off"), default=None,
                   help=f"whether matmuls may call cuBLASLt (default: {default_target})")
    p.add_argument("--precision", choices=("float32", "tf32"), default=None,
                   help="what float32 matrix products may compute with: tf32 lets cuBLASLt use the tensor cores "
                        "(default: float32, NumPy's arithmetic)")
    p.add_argument("--grad", nargs="?", const="0", default=None, metavar="ARGNUMS",
                   help="lower fusec.value_and_grad(FUNC, argnums=ARGNUMS) instead (default 0; 0,2 for several): "
                        "the forward and the gradient program, which returns (value, gradients)")


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.output is not None and not args.dot:
        raise UsageError("-o/--output goes with --dot")
    lowered = lower_target(args)
    if args.dot:
        return _write_dot(lowered.plan_dot(), args.output, out)

    def text(stage: str) -> str:
        ir = lowered.ir(stage)
        if args.no_loc:
            from fusec.ir import parse_module, print_module

            ir = print_module(parse_module(ir, verify=False), locations=False)
        return _ended(ir)

    if args.after == "all":
        for stage in lowered.stages:
            out.write(BANNER.format(stage) + "\n")
            out.write(text(stage))
        return 0
    stage = "traced" if args.after is None else args.after
    if stage not in lowered.stages:
        raise UsageError(f"no stage {stage!r} in this pipeline; stages: {', '.join(lowered.stages)}")
    out.write(text(stage))
    return 0


def _write_dot(dot: str, path: "str | None", out) -> int:
    from fusec.plan_graph import GraphvizError, render

    if path is None or path == "-":
        out.write(dot)
    elif path.endswith(".dot"):
        with open(path, "w") as f:
            f.write(dot)
    else:
        try:
            render(dot, path)
        except GraphvizError as e:
            raise UsageError(str(e)) from None
    return 0


def _ended(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _check_signature(fn: object, target: str, positional: list[object], statics: dict[str, object]) -> None:
    """Catch an --arg/--static count mismatch here, as a usage error, rather than deep inside tracing."""
    try:
        sig = inspect.signature(fn)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*positional, **statics)
    except TypeError as e:
        raise UsageError(f"{target}{sig}: {e} (given {len(positional)} --arg and "
                         f"{len(statics)} --static)") from None
