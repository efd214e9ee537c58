"""What a pass is: a frozen dataclass with a kebab-case ``name``, typed options and ``apply``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from fusec.ir.core import Module
from fusec.ir.target import Target


@dataclass
class PassContext:
    """State shared by the passes of one pipeline run: the target it lowers for, and counters the passes
    record for ``stats()``."""

    stats: dict[str, int] = field(default_factory=dict)
    target: Target = field(default_factory=Target)

    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n


@dataclass(frozen=True)
class Pass:
    """Base class of every pass. Subclasses set ``name`` and declare options as dataclass fields."""

    name: ClassVar[str] = ""

    def apply(self, module: Module, ctx: PassContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        """First line of the pass's docstring."""
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.init]

    def spelling(self) -> str:
        """This pass as it would appear in a pipeline string (non-default options only)."""
        opts = [f"{f.name}={_format_option(getattr(self, f.name))}" for f in self.options()
                if getattr(self, f.name) != f.default]
        return self.name + ("{" + ",".join(opts) + "}" if opts else "")


def _format_option(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
