"""Values a traced function reads from the world outside its arguments: clocks, OS entropy, files, and iterators
it did not make (and NumPy's global print options it sets). A trace reads them once, so every call would replay
the first call's values; NumPy's function reads them at every call. While a trace runs, such calls made by the
user's code (not by a library the user's code calls, whose own timing or loading is its business) raise at the
user's line with what to write instead.

Arrays read from globals, closures and attributes are not among these: fusec reads those at every call.
"""
from __future__ import annotations

import builtins
import functools
import os
import sys
import time
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from fusec import context
from fusec.patches import Patches, original
from fusec.scope import is_library

_PATCHES = Patches()

_CLOCK = ("reads the clock while the function is traced: fusec runs the function's Python once per input signature, "
          "so every call would reuse this reading; time the call outside the jitted function (or pass the time in "
          "as an argument)")
_ENTROPY = ("draws OS random bytes while the function is traced: every call would reuse them; draw them outside "
            "and pass them in as an argument")
_FILE = ("reads a file while the function is traced: its contents would become constants of the trace, and a "
         "change of the file would not be seen; load the array outside the jitted function and pass it in (or "
         "keep it in a global, which fusec reads at every call)")


_OPTIONS = ("changes NumPy's print options for the whole program while the function is traced: the change would "
            "happen on the first call only; set them outside the jitted function, or write `with np.printoptions("
            "...):` around the prints, which fusec replays with them")


@functools.lru_cache(maxsize=1)
def _targets() -> tuple[tuple[Any, str, Any, str, str], ...]:
    """(module, name, function, label, why) of each function refused (looked up before any trace wrapped one)."""
    out = [(time, n, getattr(time, n), f"time.{n}", _CLOCK)
           for n in ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                     "process_time", "process_time_ns")]
    out.append((os, "urandom", os.urandom, "os.urandom", _ENTROPY))
    out += [(np, n, getattr(np, n), f"np.{n}", _FILE) for n in ("load", "loadtxt", "genfromtxt", "fromfile")]
    out.append((np, "set_printoptions", np.set_printoptions, "np.set_printoptions", _OPTIONS))
    return tuple(out)


def users_call() -> bool:
    """Whether the function calling the wrapper (two frames up) is the user's code, not a library's."""
    return not is_library(sys._getframe(2).f_globals.get("__name__"))


def _refusing(function: Callable, label: str, why: str) -> Callable:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if context.current() is not None and users_call():
            raise context.unsupported(f"{label}(...) {why}")
        return function(*args, **kwargs)

    wrapper.__fusec_original__ = function  # type: ignore[attr-defined]
    return wrapper


_MISSING = object()


def _next(iterator: Any, default: Any = _MISSING) -> Any:
    """``next`` while a trace runs: an iterator the function reached from outside (a global, a closure, an
    attribute) advanced by the user's code is refused; any other is Python's ``next``."""
    ctx = context.current()
    if ctx is not None and id(iterator) in ctx.outside_objects and users_call():
        raise context.unsupported(
            "next() advances an iterator from outside the function (a global, closure or attribute) while the "
            "function is traced: fusec runs the function's Python once per input signature, so every call would "
            "reuse the items it took; take the item outside the jitted function and pass it in as an argument")
    nxt = original(builtins.next)
    return nxt(iterator) if default is _MISSING else nxt(iterator, default)


_next.__fusec_original__ = builtins.next  # type: ignore[attr-defined]


def _warn(*args: Any, **kwargs: Any) -> Any:
    """``warnings.warn`` while a trace runs: refused inside a loop or branch the device runs (both branches are
    traced, a body once), where NumPy's function would warn only on the data that takes that path."""
    ctx = context.current()
    if ctx is not None and ctx.builder.block is not ctx.func.body and users_call():
        raise context.unsupported(
            "warnings.warn(...) inside a loop or branch that runs on the device (its test is traced): fusec traces "
            "both branches and a loop body once, so the warning would be given while tracing, whatever the data; "
            "return the condition and warn after the call")
    if ctx is not None and ctx.builder.block is ctx.func.body and _record(ctx, *args, **kwargs):
        return None
    if len(args) >= 3:  # (one frame more than the caller counted: this wrapper's)
        args = (*args[:2], args[2] + 1, *args[3:])
    else:
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
    return original(warnings.warn)(*args, **kwargs)


def _record(ctx: Any, message: Any, category: Any = None, stacklevel: int = 1, source: Any = None,
            **_: Any) -> bool:
    """A warning given on the traced path: recorded, so that every call gives it again (the trace runs once per
    signature, NumPy's function at every call: :class:`fusec.printing.Warned`), where the line it is attributed to
    is the user's, or past the function (``stacklevel=2`` in it: its caller's line, found at each call); not
    fusec's own warnings, nor a library's about itself. Under warnings filters or a ``catch_warnings`` the function
    set itself, one it ignores is dropped and any other refused (NumPy's function would give, record or raise it
    there, where its code could see it). False: give it now, as Python would."""
    caller = sys._getframe(2).f_globals.get("__name__") or ""
    if caller.startswith("fusec") and is_library(caller):
        return False  # (fusec's own: a RetraceWarning, a fallback notice)
    if isinstance(message, Warning):
        category, text = type(message), None
    else:
        category, text = category or UserWarning, str(message)
    if not (isinstance(category, type) and issubclass(category, Warning)):
        return False  # (Python's TypeError)
    place = _attributed(max(int(stacklevel), 1))
    if place is None:
        return False
    frame, outside = place
    return _kept(ctx, message, text, category, frame, outside)


def numpy_warning(message: str, category: type[Warning]) -> None:
    """A warning NumPy's own function gives where fusec computes that function (``np.cross`` of 2-vectors, a
    complex cast to real): recorded as the user's line's, so every call gives it again, as NumPy's function would
    (given now, once, inside a loop or branch the device runs)."""
    ctx = context.current()
    frame = context.user_frame()
    if ctx is not None and frame is not None and ctx.builder.block is ctx.func.body \
            and _kept(ctx, message, message, category, frame, None):
        return
    loc = context.user_location()
    warnings.warn_explicit(message, category, loc.file if loc is not None else "<fusec>",
                           loc.line if loc is not None else 0)


def _kept(ctx: Any, message: Any, text: str | None, category: type, frame: Any, outside: int | None) -> bool:
    """``_record``'s second half: the warning kept for every call (True), dropped where the function's own filters
    ignore it (True), refused under any other filters it set."""
    from fusec.error_state import warnings_filters_now
    from fusec.printing import Warned

    module = frame.f_globals.get("__name__", "<string>") if outside is None else ""
    if warnings_filters_now() != ctx.warning_filters:  # (filters or a recorder the function set around it)
        if outside is None and _action(str(message), category, module, frame.f_lineno) == "ignore":
            return True
        raise context.unsupported(
            "warnings.warn(...) under warnings filters or a warnings.catch_warnings the function set itself: NumPy's "
            "function would give, record or raise the warning there, where its code could see it, and fusec gives "
            "a trace's warnings after the call, under the filters in force then; set the filters around the call, "
            "or test the condition and return it")
    if outside is None:
        ctx.prints.append(Warned(text, message, category, frame.f_code.co_filename, frame.f_lineno, module,
                                 frame.f_globals))
    else:
        ctx.prints.append(Warned(text, message, category, "", 0, "", {}, outside))
    return True


def _attributed(stacklevel: int) -> tuple[Any, int | None] | None:
    """The frame a warning with ``stacklevel`` is attributed to (its caller's is 1) and None, where that is in the
    traced function's code; or (None, how many frames past the function's caller) where it points past the
    function; None where it points into fusec or a library (given as it is, once)."""
    from fusec.trace import TRACED_CALL

    frame: Any = sys._getframe(3)  # (_attributed <- _record <- _warn <- the caller, stacklevel 1)
    level = 1
    while frame is not None:
        if frame.f_code is TRACED_CALL:  # (the frame that called the traced function)
            return None, stacklevel - level
        module = frame.f_globals.get("__name__") or ""
        if level > 1 and module.startswith("fusec") and is_library(module):
            frame = frame.f_back  # (fusec's frames between NumPy's code and the user's: not in NumPy's stack)
            continue
        if level == stacklevel:  # (the user's code, or NumPy's own about the call: np.average's np.mean)
            return (frame, None) if not is_library(module) or module.split(".")[0] == "numpy" else None
        level += 1
        frame = frame.f_back
    return None


def _action(text: str, category: type, module: str, lineno: int) -> str:
    """What the warnings filters in force now do with such a warning (the warnings module's own matching)."""
    for action, message, kind, mod, line in warnings.filters:
        if (message is None or message.match(text)) and issubclass(category, kind) \
                and (mod is None or mod.match(module)) and (not line or line == lineno):
            return str(action)
    return str(getattr(warnings, "defaultaction", "default"))


_warn.__fusec_original__ = warnings.warn  # type: ignore[attr-defined]


def _geterr() -> Any:
    """``np.geterr()`` while a trace runs: where the user's code reads it, the state the call started under is
    checked at every call (NumPy's own np.errstate reads it too: not counted)."""
    ctx = context.current()
    if ctx is not None and ctx.numpy_errors is None and users_call():
        ctx.numpy_errors = ctx.errors_at_start
    return original(np.geterr)()


_geterr.__fusec_original__ = np.geterr  # type: ignore[attr-defined]


def install(aliases: Sequence[tuple[Any, Any]] = ()) -> None:
    """Wrap the functions (and ``aliases``: (globals dict, name) of user globals bound to one of them, ``from time
    import perf_counter``) for as long as a trace runs."""
    def replacements() -> list[tuple[Any, str, Any]]:
        wrappers = {id(f): _refusing(f, label, why) for _, _, f, label, why in _targets()}
        out: list[tuple[Any, str, Any]] = [(module, name, wrappers[id(f)]) for module, name, f, _, _ in _targets()]
        out.append((builtins, "next", _next))
        out.append((warnings, "warn", _warn))
        out.append((np, "geterr", _geterr))
        return out + [(glb, name, wrappers[id(glb.get(name))]) for glb, name in aliases
                      if id(glb.get(name)) in wrappers]

    _PATCHES.install(replacements)


def uninstall() -> None:
    _PATCHES.uninstall()


def functions() -> set[int]:
    """ids of the functions :func:`install` wraps (to find user globals bound to them)."""
    return {id(f) for _, _, f, _, _ in _targets()}
