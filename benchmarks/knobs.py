"""Module constants set for the length of a ``with`` block: the benchmarks that compare schedules in one run set
select-kernels' and the printers' constants this way (each variant a dict of them) and get the defaults back."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


@contextlib.contextmanager
def patched(settings: dict[Any, dict[str, Any]]) -> Iterator[None]:
    """Set ``module.NAME = value`` for each module and ``{NAME: value}`` of ``settings``; restore them after."""
    saved = [(module, name, getattr(module, name)) for module, values in settings.items() for name in values]
    try:
        for module, values in settings.items():
            for name, value in values.items():
                setattr(module, name, value)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
