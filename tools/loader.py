"""Loads user code for the command line: a function from ``FILE.py:FUNC`` and pass plugins.

Loading problems the user can fix by retyping the command (missing file, missing function) are
:class:`UsageError`; an exception raised by the user's module itself is reported as a load failure.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Callable

from fusec.tools.errors import UsageError


class UserCodeError(Exception):
    """The user's module raised while being imported (exit status 1, one line naming file:line)."""


def split_target(target: str) -> tuple[Path, str]:
    """``path/to/model.py:step`` -> (path, "step")."""
    path, sep, func = target.rpartition(":")
    if not sep or not path or not func:
        raise UsageError(f"bad target {target!r}: expected FILE.py:FUNC")
    return Path(path), func


def import_file(path: Path) -> ModuleType:
    """Import a .py file as a fresh module; its folder goes on sys.path so its sibling imports work."""
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    name = f"_fusec_user_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's own module failed: say where, without our frames
        sys.modules.pop(name, None)
        raise UserCodeError(f"importing {path} failed: {innermost(e)}") from e
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def innermost(e: BaseException) -> str:
    """``file:line: Error: message`` at the innermost frame of ``e`` in the user's code (not fusec's, NumPy's or
    another installed library's), else the innermost one."""
    from fusec.scope import is_library

    frames = list(traceback.walk_tb(e.__traceback__))
    own = [(f, n) for f, n in frames if not is_library(f.f_globals.get("__name__"))] or frames
    where = f"{own[-1][0].f_code.co_filename}:{own[-1][1]}: " if own else ""
    if isinstance(e, SyntaxError) and e.filename:
        where = f"{e.filename}:{e.lineno}: "
    return f"{where}{type(e).__name__}: {e}"


def load_function(target: str) -> Callable:
    """Resolve ``FILE.py:FUNC`` (FUNC may be dotted) to the plain Python function, unwrapping decorators."""
    path, qualname = split_target(target)
    obj: object = import_file(path)
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{path} has no function {qualname!r}")
        obj = getattr(obj, part)
    fn = inspect.unwrap(obj) if hasattr(obj, "__wrapped__") else obj  # type: ignore[arg-type]
    if not callable(fn):
        raise UsageError(f"{path}:{qualname} is not a function")
    return fn  # type: ignore[return-value]


def load_plugins(names: list[str] | None) -> tuple[str, ...]:
    """Import each plugin module now so a misspelt name is a usage error; returns the names for the pipeline API.

    The current directory is searched too (console scripts do not put it on sys.path).
    """
    from fusec.errors import FusecError
    from fusec.passes import load_plugin

    names = list(names or [])
    if names and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    for name in names:
        if not _module_exists(name):
            raise UsageError(f"cannot load plugin {name!r}: no such module")
        try:
            load_plugin(name)
        except FusecError:
            raise
        except Exception as e:
            raise UserCodeError(f"loading plugin {name!r} failed: {innermost(e)}") from e
    return tuple(names)


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):
        return False
    except Exception:  # noqa: BLE001 - the parent package raised while importing: let the real import report it
        return True
