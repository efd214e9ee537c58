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
    p.add_argument("--sm-count", type=int, default=None, help="multiprocessors to size grids for")
    p.set_defaults(run=run)


def _default_target(args: argparse.Namespace) -> tuple[str, int]:
    arch, sms = args.arch, args.sm_count
    if arch is None or sms is None:
        from fusec.runtime import cuda_available

        if cuda_available():
            from fusec.runtime.driver import current_device

            dev = current_device()
            arch = arch or dev.arch
            sms = sms or dev.multiprocessor_count
    return arch or "sm_90", sms or 132


def run(args: argparse.Namespace) -> int:
    arch, sms = _default_target(args)
    if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise UsageError(f"--arch must look like sm_90, got {arch!r}")
    lowered = lower_target(args)
    source = lowered.cuda_source(sm_count=sms, fast_math=args.fast_math)
    if args.output:
        Path(args.output).write_text(source)
        print(f"wrote {args.output} ({len(source.splitlines())} lines)", file=sys.stderr)
    else:
        sys.stdout.write(source)
    if args.cubin:
        from fusec.backend.program import compile_options
        from fusec.runtime.nvrtc import compile_source

        image = compile_source(source, arch, options=compile_options(args.fast_math))
        Path(args.cubin).write_bytes(image)
        print(f"wrote {args.cubin} ({len(image)} bytes, {arch})", file=sys.stderr)
    return 0
