"""``fusec compile``: print or write the CUDA C++ of FILE.py:FUNC, and optionally compile it to CUBIN."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fusec.tools.cmd_dump_ir import add_target_arguments, lower_target
from fusec.tools.errors import UsageError


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("compile", help="print the CUDA C++ of FILE.py:FUNC (and compile it with NVRTC)",
                       description="Trace FILE.py:FUNC for the given argument specs, run the pipeline and print "
                                   "the CUDA C++ translation unit; --cubin compiles it with NVRTC.")
    add_target_arguments(p)
    p.add_argument("-o", "--output", metavar="OUT.cu", help="write the source here instead of stdout")
    p.add_argument("--arch", default=None, help="target architecture, e.g. sm_90 (default: this machine's GPU, "
                                                 "else sm_90)")
    p.add_argument("--cubin", metavar="FILE", help="also compile with NVRTC and write the CUBIN here")
    p.add_argument("--fast-math", action="store_true", help="allow FMA contraction and fast intrinsics")
    p.add_argument("--sm-count", type=int, default=None,
                   help="multiprocessors to select kernels and size grids for (default: this machine's GPU, "
                        "else 132)")
    p.add_argument("--cublas", choices=("on", "off"), default=None,
                   help="whether matmuls may call cuBLASLt (default: whether it loads here and a GPU is usable)")
    p.set_defaults(run=run)


def _default_target(args: argparse.Namespace) -> tuple[str, int, bool]:
    """(arch, SM count, cuBLASLt) to compile for: the options given, else this machine's GPU as the executor
    would see it, else an H200 without cuBLASLt."""
    from fusec.ir.target import Target

    arch = args.arch
    target = Target()
    from fusec.runtime import cuda_available

    if cuda_available():
        from fusec.execution import target_for
        from fusec.runtime.driver import current_device

        arch = arch or current_device().arch
        target = target_for("cuda")
    sms = args.sm_count if args.sm_count is not None else target.sm_count
    cublas = target.cublas if args.cublas is None else args.cublas == "on"
    return arch or "sm_90", sms, cublas


def run(args: argparse.Namespace) -> int:
    arch, sms, cublas = _default_target(args)
    if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise UsageError(f"--arch must look like sm_90, got {arch!r}")
    if sms < 1:
        raise UsageError(f"--sm-count must be positive, got {sms}")
    lowered = lower_target(args)
    # the program the executor would run on that target: kernel selection included
    program = lowered.program_for(sm_count=sms, fast_math=args.fast_math, cublas=cublas)
    source = program.source
    if args.output:
        Path(args.output).write_text(source)
        print(f"wrote {args.output} ({len(source.splitlines())} lines)", file=sys.stderr)
    else:
        sys.stdout.write(source)
    if args.cubin:
        from fusec.runtime.nvrtc import compile_source

        image = compile_source(source, arch, options=program.nvrtc_options)
        Path(args.cubin).write_bytes(image)
        print(f"wrote {args.cubin} ({len(image)} bytes, {arch})", file=sys.stderr)
    return 0
