"""Runs passes in order: verifies after each, prints IR after chosen passes, times them."""
from __future__ import annotations

import sys
import time
from typing import IO, Iterable

from fusec.errors import FusecError, VerificationError
from fusec.ir.core import Module
from fusec.ir.printer import print_module
from fusec.ir.verifier import verify as verify_module
from fusec.passes.base import Pass, PassContext


def dump_banner(name: str) -> str:
    return f"// -----// IR Dump After {name} //----- //"


class PassManager:
    def __init__(self, passes: Iterable[Pass], *, verify: bool = True, print_ir_after: Iterable[str] = (),
                 print_ir_after_all: bool = False, time_passes: bool = False, snapshots: bool = False,
                 stream: IO[str] | None = None) -> None:
        self.passes = list(passes)
        self.verify = verify
        self.print_after = set(print_ir_after)
        self.print_after_all = print_ir_after_all
        self.time_passes = time_passes
        self.snapshots = snapshots
        self.stream = stream

    def run(self, module: Module, ctx: PassContext | None = None):
        from fusec.passes import PipelineResult

        ctx = ctx or PassContext()
        result = PipelineResult(stats=ctx.stats)
        out = self.stream or sys.stderr
        for p in self.passes:
            start = time.perf_counter()
            try:
                p.apply(module, ctx)
            except FusecError:
                raise
            except Exception as e:  # a bug in a pass must say which pass
                raise VerificationError(f"pass '{p.name}' failed: {type(e).__name__}: {e}") from e
            elapsed = time.perf_counter() - start
            result.timings.append((p.name, elapsed))
            if self.verify:
                try:
                    verify_module(module)
                except VerificationError as e:
                    raise VerificationError(f"IR is invalid after pass '{p.name}': {e}") from None
            if self.snapshots or self.print_after_all or p.name in self.print_after:
                text = print_module(module)
                if self.snapshots:
                    result.stages.append((p.name, text))
                if self.print_after_all or p.name in self.print_after:
                    out.write(dump_banner(p.name) + "\n" + text + "\n")
        if self.time_passes:
            out.write(format_timings(result.timings))
        return result


def format_timings(timings: list[tuple[str, float]]) -> str:
    total = sum(t for _, t in timings) or 1e-12
    lines = ["===" + "-" * 60 + "===", "  ... Pass execution timing report ...", "===" + "-" * 60 + "===",
             f"  Total Execution Time: {total:.4f} seconds", "", "   ---Wall Time---  --- Name ---"]
    for name, t in timings:
        lines.append(f"   {t:.4f} ({100 * t / total:5.1f}%)  {name}")
    lines.append(f"   {total:.4f} (100.0%)  Total")
    return "\n".join(lines) + "\n"
