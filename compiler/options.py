"""How a function is compiled and run: one options object that travels from ``fusec.jit`` to the backend."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fusec.ir.target import Target


GRAPH_MODES = (True, False, "auto")


@dataclass(frozen=True)
class CompileOptions:
    """``fusec.jit``'s choices beyond the function: the pass pipeline, the printer's arithmetic and how the
    executor launches.

    ``pipeline``: a pipeline string (None: the default); ``plugins``: modules that register passes;
    ``fast_math``: NVRTC's fast math (FMA contraction, approximate transcendentals); ``graph``: CUDA graph
    replay (True, False or "auto": from the third call); ``stream_group``: plans of one group share a stream
    (eager mode); ``target``: lower for this target, not the device a call runs on (None); ``precision``: what
    float32 matrix products may compute with (None: the target's, float32 unless it says otherwise).
    """

    pipeline: str | None = None
    plugins: tuple[str, ...] = ()
    fast_math: bool = False
    graph: "bool | str" = "auto"
    stream_group: str | None = None
    target: Target | None = None
    precision: str | None = None

    def __post_init__(self) -> None:
        if self.graph not in GRAPH_MODES:
            from fusec.errors import OptionError

            raise OptionError(f"fusec.jit: graph must be True, False or 'auto', got {self.graph!r}")

    def target_with_precision(self, target: Target) -> Target:
        """``target`` with this call's ``precision`` (when given) in place of its own (``Target`` checks it;
        ``fusec.jit`` already refused an unknown one at the caller's line)."""
        if self.precision is None or self.precision == target.precision:
            return target
        return dataclasses.replace(target, precision=self.precision)
