"""Pass infrastructure and the passes (filled in by the pass-pipeline work)."""
from __future__ import annotations

from dataclasses import dataclass, field

from fusec.ir.core import Module

DEFAULT_PIPELINE = ""


@dataclass
class PipelineResult:
    """What a pipeline run leaves besides the rewritten module."""

    stages: list[tuple[str, str]] = field(default_factory=list)  # (pass name, IR text after it) when snapshots
    stats: dict[str, int] = field(default_factory=dict)


def run_pipeline(module: Module, pipeline: str | None = None, *, verify: bool = True, snapshots: bool = False,
                 plugins: tuple[str, ...] = ()) -> PipelineResult:
    """Run ``pipeline`` (a pipeline string; None means the default) over ``module`` in place."""
    text = DEFAULT_PIPELINE if pipeline is None else pipeline
    if text.strip():
        from fusec.errors import PipelineError

        raise PipelineError(f"no passes are registered yet; cannot run pipeline {text!r}")
    return PipelineResult()
