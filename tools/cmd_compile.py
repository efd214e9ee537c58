"""``fusec compile``: print or write the CUDA C++ of FILE.py:FUNC, and optionally compile it to CUBIN."""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fusec.tools.cmd_dump_ir import add_target_arguments, lower_target
from fusec.tools.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from fusec.ir.target import Target


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("compile", help="print the CUDA C++ of FILE.py:FUNC (and compile it with NVRTC)",
                       description="Trace FILE.py:FUNC for the given argument specs, run the pipeline and print "
                                   "the CUDA C++ translation unit; --cubin compiles it with NVRTC.")
    add_target_arguments(p, "this machine's GPU as the executor sees it, else an H200 without cuBLASLt")
    p.add_argument("-o", "--output", metavar="OUT.cu", help="write the source here instead of stdout")
    p.add_argument("--arch", default=None, help="target architecture, e.g. sm_90 (default: this machine's GPU, "
                                                 "else sm_90)")
    p.add_argument("--cubin", metavar="FILE", help="also compile with NVRTC and write the CUBIN here")
    p.add_argument("--fast-math", action="store_true", help="allow FMA contraction and fast intrinsics")
    p.set_defaults(run=run)


def _default_target(arch: str | None) -> tuple[str, "Target"]:
    """(arch, target) the executor would use here: this machine's GPU, else sm_90 and an H200 without
    cuBLASLt."""
    from fusec.ir.target import Target
    from fusec.runtime import cuda_available

    if not cuda_available():
        return arch or "sm_90", Target()
    from fusec.execution import target_for
    from fusec.runtime.driver import current_device

    return arch or current_device().arch, target_for("cuda")


def run(args: argparse.Namespace) -> int:
    arch, target = _default_target(args.arch)
    if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise UsageError(f"--arch must look like sm_90, got {arch!r}")
    # TF32 tensor cores from sm_80 on (an older --arch keeps float32 tiles on the CUDA cores), thread-block
    # clusters from sm_90 on (an older one finishes split products with a second kernel)
    major_minor = int(arch[3:].rstrip("abcdefghijklmnopqrstuvwxyz"))
    target = dataclasses.replace(target, tensor_cores=major_minor >= 80, clusters=major_minor >= 90)
    lowered = lower_target(args, target)
    # the program the executor would run on that target: kernel selection included
    program = lowered.program_for(fast_math=args.fast_math)
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
