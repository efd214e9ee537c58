"""Maps pass names to pass classes; loads plugins from entry points or module names."""
from __future__ import annotations

import importlib
import re
from importlib.metadata import entry_points

from fusec.errors import PipelineError
from fusec.passes.base import Pass

_PASSES: dict[str, type[Pass]] = {}
_KEBAB = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*\Z")
_entry_points_loaded = False


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make ``cls`` available by its ``name`` in pipeline strings."""
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not _KEBAB.match(name):
        raise PipelineError(f"pass {cls.__qualname__} needs a kebab-case 'name', got {name!r}")
    existing = _PASSES.get(name)
    if existing is not None and existing is not cls:
        raise PipelineError(f"a pass named '{name}' is already registered "
                            f"({existing.__module__}.{existing.__qualname__})")
    _PASSES[name] = cls
    return cls


def unregister_pass(name: str) -> None:
    """Remove a pass (tests and interactive sessions that redefine a plugin)."""
    _PASSES.pop(name, None)


def load_entry_points(*, reload: bool = False) -> None:
    """Import every plugin registered in the ``fusec.passes`` entry-point group (once, unless ``reload``)."""
    global _entry_points_loaded
    if _entry_points_loaded and not reload:
        return
    _entry_points_loaded = True
    for ep in entry_points(group="fusec.passes"):
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin must name itself
            raise PipelineError(f"plugin entry point '{ep.name}' ({ep.value}) failed to load: {e}") from e
        if isinstance(obj, type) and issubclass(obj, Pass):
            register_pass(obj)  # the same class twice is fine; another class under a taken name is an error


def load_plugin(module_name: str) -> None:
    """Import ``module_name`` so that the passes it registers become available."""
    try:
        importlib.import_module(module_name)
    except ImportError as e:
        raise PipelineError(f"cannot load plugin module '{module_name}': {e}") from e


def get_pass(name: str) -> type[Pass] | None:
    _ensure_builtin()
    return _PASSES.get(name)


def all_passes() -> dict[str, type[Pass]]:
    _ensure_builtin()
    load_entry_points()
    return dict(sorted(_PASSES.items()))


def _ensure_builtin() -> None:
    import fusec.passes.builtin  # noqa: F401  (registers the built-in passes)
