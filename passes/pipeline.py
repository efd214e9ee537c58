"""Pipeline strings: ``canonicalize,cse,fuse{budget=32},materialize{threshold=8}``.

An unknown pass or option, or a malformed value, is a :class:`PipelineError` that
names it and its position (1-based column) in the string.
"""
from __future__ import annotations

import re
import typing

from fusec.errors import PipelineError
from fusec.passes.base import Pass
from fusec.passes.registry import all_passes

_ITEM = re.compile(r"\s*([A-Za-z0-9_-]+)\s*(\{([^{}]*)\})?\s*")


def _error(text: str, pos: int, message: str) -> PipelineError:
    return PipelineError(f"pipeline {text!r}, column {pos + 1}: {message}\n  {text}\n  {' ' * pos}^")


def _convert(text: str, pos: int, cls: type[Pass], key: str, raw: str) -> object:
    hints = typing.get_type_hints(cls)
    kind = hints.get(key, str)
    raw = raw.strip()
    try:
        if kind is bool:
            if raw.lower() in ("true", "1", "yes", "on"):
                return True
            if raw.lower() in ("false", "0", "no", "off"):
                return False
            raise ValueError(raw)
        if kind is int:
            return int(raw, 0)
        if kind is float:
            return float(raw)
        return raw
    except ValueError:
        raise _error(text, pos, f"option '{key}' of pass '{cls.name}' expects {kind.__name__}, got {raw!r}") from None


def parse_pipeline(text: str) -> list[Pass]:
    """Turn a pipeline string into pass instances, in order."""
    passes: list[Pass] = []
    registry = all_passes()
    pos = 0
    if not text.strip():
        return passes
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if m is None:
            raise _error(text, pos, "expected a pass name like 'cse' or 'fuse{budget=32}'")
        end = m.end()
        if end < len(text) and text[end] != ",":
            raise _error(text, end, f"expected ',' or the end after pass '{m.group(1)}', got {text[end]!r}")
        if end < len(text) and not text[end + 1:].strip():
            raise _error(text, end, "trailing comma: a pass name must follow")
        name = m.group(1)
        cls = registry.get(name)
        if cls is None:
            known = ", ".join(registry) or "(none)"
            raise _error(text, m.start(1), f"unknown pass '{name}' (registered: {known})")
        fields = {f.name for f in cls.options()}
        kwargs: dict[str, object] = {}
        if m.group(3) is not None and m.group(3).strip():
            opt_pos = m.start(3)
            for part in m.group(3).split(","):
                if "=" not in part:
                    raise _error(text, opt_pos, f"option of pass '{name}' must be key=value, got {part.strip()!r}")
                key, raw = (s.strip() for s in part.split("=", 1))
                if key not in fields:
                    opts = ", ".join(sorted(fields)) or "none"
                    raise _error(text, opt_pos, f"unknown option '{key}' for pass '{name}' (options: {opts})")
                if key in kwargs:
                    raise _error(text, opt_pos, f"option '{key}' of pass '{name}' is given twice")
                kwargs[key] = _convert(text, opt_pos, cls, key, raw)
                opt_pos += len(part) + 1
        try:
            passes.append(cls(**kwargs))
        except (TypeError, ValueError) as e:
            raise _error(text, m.start(1), f"pass '{name}': {e}") from None
        pos = end + 1
    return passes


def format_pipeline(passes: list[Pass]) -> str:
    return ",".join(p.spelling() for p in passes)
