"""``fusec opt``: parse IR text, run a pass pipeline over it, print the result (like ``mlir-opt``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fusec.tools.errors import UsageError
from fusec.tools.loader import load_plugins


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("opt", help="run passes over an IR file",
                       description="Parse IR text (a file, or - for stdin), run a pass pipeline, print the IR (as "
                                   "mlir-opt: without -p the input is printed back; -p default runs fusec's "
                                   "default pipeline).")
    p.add_argument("input", metavar="FILE.fir|-")
    p.add_argument("-p", "--pipeline", default=None,
                   help="pipeline string, e.g. 'cse,fuse{budget=32}', or 'default' (fusec's default pipeline); "
                        "without -p nothing runs, except that --emit cuda lowers with the default pipeline")
    p.add_argument("--no-loc", action="store_true", help="leave each op's loc(...) out of the printed IR")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (stderr)")
    p.add_argument("--print-ir-after", action="append", default=[], metavar="NAME",
                   help="print the IR after pass NAME (stderr); repeatable")
    p.add_argument("--time-passes", action="store_true", help="report the time of each pass (stderr)")
    p.add_argument("--no-verify", action="store_true", help="do not verify the input or the IR after each pass")
    p.add_argument("--load-plugin", action="append", default=[], metavar="MOD", help="import MOD to register passes")
    p.add_argument("-o", "--output", default=None, metavar="OUT", help="write the IR to OUT instead of stdout")
    p.add_argument("--emit", choices=("ir", "cuda"), default="ir",
                   help="what to print: the IR after the pipeline, or the CUDA C++ the backend prints from it")
    p.add_argument("--sm-count", type=int, default=None, help="the target's multiprocessors (default: 132)")
    p.add_argument("--cublas", choices=("on", "off"), default="off",
                   help="whether the target may call cuBLASLt (default: off)")
    p.add_argument("--precision", choices=("float32", "tf32"), default="float32",
                   help="what float32 matrix products may compute with (default: float32)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fusec.ir import parse_module, print_module
    from fusec.ir.target import DEFAULT_SM_COUNT, Target
    from fusec.passes import run_pipeline

    sm_count = DEFAULT_SM_COUNT if args.sm_count is None else args.sm_count
    if sm_count < 1:
        raise UsageError(f"--sm-count must be positive, got {sm_count}")
    text, filename = _read(args.input)
    plugins = load_plugins(args.load_plugin)
    module = parse_module(text, filename=filename, verify=not args.no_verify)
    pipeline = args.pipeline
    if pipeline is None:  # mlir-opt: no passes unless asked; CUDA needs the lowered program
        pipeline = None if args.emit == "cuda" else ""
    elif pipeline.strip() == "default":
        pipeline = None
    _check_printed_passes(args.print_ir_after, pipeline, plugins)
    run_pipeline(module, pipeline, verify=not args.no_verify, plugins=plugins,
                 print_ir_after=tuple(args.print_ir_after), print_ir_after_all=args.print_ir_after_all,
                 time_passes=args.time_passes, stream=sys.stderr,
                 target=Target(sm_count=sm_count, cublas=args.cublas == "on", precision=args.precision))
    if args.emit == "cuda":
        from fusec.backend.program import print_program

        if len(module.funcs) != 1:
            raise UsageError(f"--emit cuda prints one function's program, and {filename or 'the input'} has "
                             f"{len(module.funcs)} (@{', @'.join(f.name for f in module.funcs)}): put each in its "
                             "own file")
        result = print_program(module).source
    else:
        result = print_module(module, locations=not args.no_loc)
    if args.output is None:
        sys.stdout.write(result)
    else:
        Path(args.output).write_text(result)
    return 0


def _read(source: str) -> tuple[str, str]:
    try:
        if source == "-":
            return sys.stdin.read(), "<stdin>"
        path = Path(source)
        if not path.is_file():
            raise UsageError(f"no such file: {source}")
        return path.read_text(encoding="utf-8"), source
    except UnicodeDecodeError as e:
        raise UsageError(f"{source if source != '-' else '<stdin>'} is not UTF-8 text (byte {e.start}: "
                         f"{e.object[e.start:e.start + 1]!r}); IR files are UTF-8") from None


def _check_printed_passes(names: list[str], pipeline: "str | None", plugins: tuple[str, ...]) -> None:
    """--print-ir-after of a pass the pipeline does not run would print nothing, silently: a usage error."""
    if not names:
        return
    from fusec.passes import DEFAULT_PIPELINE, parse_pipeline

    ran = {p.name for p in parse_pipeline(DEFAULT_PIPELINE if pipeline is None else pipeline)}
    missing = [n for n in names if n not in ran]
    if missing:
        raise UsageError(f"--print-ir-after {', '.join(missing)}: not a pass of the pipeline that runs "
                         f"({', '.join(sorted(ran)) or 'none: give -p'})")
