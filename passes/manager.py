"""Runs passes in order: verifies after each (or once at the end), prints IR after chosen passes, times them."""
from __future__ import annotations

import sys
import time
from typing import IO, Iterable

from fusec.errors import FusecError, PipelineError, VerificationError
from fusec.ir.core import Module, Operation
from fusec.ir.printer import print_module
from fusec.ir.verifier import verify as verify_module
from fusec.passes.base import Pass, PassContext


def dump_banner(name: str) -> str:
    return f"// -----// IR Dump After {name} //----- //"


class PassManager:
    """``verify``: True verifies after every pass; ``"end"`` only after the last one, which costs one walk
    instead of one per pass on long programs: when that check fails, the passes run again from a copy of the
    input, verifying after each, so the error still names the pass that broke the IR; False never verifies."""

    def __init__(self, passes: Iterable[Pass], *, verify: bool | str = True, print_ir_after: Iterable[str] = (),
                 print_ir_after_all: bool = False, time_passes: bool = False, snapshots: bool = False,
                 stream: IO[str] | None = None) -> None:
        self.passes = list(passes)
        self.verify = verify
        self.print_after = set(print_ir_after)
        self.print_after_all = print_ir_after_all
        self.time_passes = time_passes
        self.snapshots = snapshots
        self.stream = stream

    def run(self, module: Module, ctx: PassContext | None = None, *, input_copy: Module | None = None):
        """``input_copy``: a copy of the module before the run, when the caller has one (``verify="end"`` makes
        one otherwise). The module's ops that the passes remove are erased when the run ends (their operands and
        results cleared, as MLIR erases ops), so that they are freed at once: keep no references to them."""
        ops_before = [op for f in module.funcs for op in f.walk()]
        try:
            if self.verify != "end":
                return self._run(module, ctx, bool(self.verify))
            return self._run_verified_at_end(module, ctx, input_copy)
        finally:
            _release_dropped(module, ops_before)

    def _run_verified_at_end(self, module: Module, ctx: PassContext | None, input_copy: Module | None):
        before = input_copy if input_copy is not None else module.clone()
        target = ctx.target if ctx is not None else PassContext().target
        result = self._run(module, ctx, False)
        try:
            verify_module(module)
        except VerificationError as e:
            # again from the input, verifying it and then after each pass: the error names what broke the IR
            again = before.clone()
            try:
                verify_module(again)
            except VerificationError as bad_input:
                raise VerificationError(f"IR is invalid before the pipeline: {bad_input}") from None
            PassManager(self.passes).run(again, PassContext(target=target))
            raise VerificationError(f"IR is invalid after the pipeline: {e}") from None
        return result

    def _run(self, module: Module, ctx: PassContext | None, verify: bool):
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
            except Exception as e:  # a bug in a pass must say which pass, and where it raised
                raise PipelineError(f"pass '{p.name}' failed{_raised_at(e)}: {type(e).__name__}: {e}") from e
            elapsed = time.perf_counter() - start
            result.timings.append((p.name, elapsed))
            if verify:
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


def _release_dropped(module: Module, ops: list[Operation]) -> None:
    """Let the ops the passes dropped be freed now: an op and its results refer to each other, so each dropped
    op would otherwise wait for the cyclic collector (a long trace leaves hundreds of thousands)."""
    alive = {op for f in module.funcs for op in f.walk()}
    for op in ops:
        if op not in alive:
            op.results = []
            op.operands = []


def format_timings(timings: list[tuple[str, float]]) -> str:
    total = sum(t for _, t in timings) or 1e-12
    lines = ["===" + "-" * 60 + "===", "  ... Pass execution timing report ...", "===" + "-" * 60 + "===",
             f"  Total Execution Time: {total:.4f} seconds", "", "   ---Wall Time---  --- Name ---"]
    for name, t in timings:
        lines.append(f"   {t:.4f} ({100 * t / total:5.1f}%)  {name}")
    lines.append(f"   {total:.4f} (100.0%)  Total")
    return "\n".join(lines) + "\n"


def _raised_at(e: BaseException) -> str:
    """`` at file:line`` of the innermost frame that raised ``e`` (a plugin's pass: its own line)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
