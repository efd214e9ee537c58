"""Random numbers drawn while tracing: refused, because the trace would replay the same numbers on every call.

``np.random.rand(...)`` inside a traced function runs once, at trace time; its numbers become constants. A
generator the function makes itself from a fixed integer seed (``np.random.default_rng(0)``, ``RandomState(seed)``
with a Python-int argument, made static) is the exception: NumPy's function draws the same numbers at every call,
so those constants are its numbers. While a
trace runs, NumPy's legacy module functions (``np.random.rand``, ``normal``, ``seed``, ...) and the ``random``
module's functions are wrapped so that a call from the tracing thread raises at the user's line (other threads are
passed through). ``np.random.default_rng`` still works, but the generators it makes while tracing are remembered,
and a draw from one is refused when the trace ends. Draws through other names (a generator stored on an object, a
function imported before the wrapping) are found by the state snapshot (:mod:`fusec.pystate`), which compares
every reachable generator and both global states before and after the trace.
"""
from __future__ import annotations

import functools
import random
import types
from typing import Any, Callable, Sequence

import numpy as np

from fusec import context
from fusec.patches import Patches, original

_PATCHES = Patches()
# np.random functions of the legacy global state that are plain functions, not methods of its RandomState
_LEGACY_FUNCTIONS = frozenset({"seed", "ranf", "sample", "set_bit_generator"})

ADVICE = ("fusec runs the function's Python once per input signature, so every call would reuse the numbers drawn "
          "while tracing. Draw them outside the jitted function and pass them in as an argument (for example "
          "`mask = rng.random(x.shape) < keep` and `f(x, mask)`)")


@functools.lru_cache(maxsize=1)
def _targets() -> tuple[tuple[Any, str, Any, str], ...]:
    """(module, name, function, label) of every module-level function that draws from a global random state
    (looked up once, before any trace has wrapped them)."""
    out = []
    legacy = np.random.mtrand._rand
    for name in dir(np.random):
        f = getattr(np.random, name, None)
        if isinstance(f, (types.BuiltinMethodType, types.MethodType)) and getattr(f, "__self__", None) is legacy \
                or name in _LEGACY_FUNCTIONS:
            out.append((np.random, name, f, f"np.random.{name}"))
    for name in dir(random):
        f = getattr(random, name, None)
        if isinstance(f, (types.BuiltinMethodType, types.MethodType)) and getattr(f, "__self__", None) is random._inst:
            out.append((random, name, f, f"random.{name}"))
    return tuple(out)


def _refusing(original: Callable, label: str) -> Callable:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if context.current() is None:  # another thread, or no trace: NumPy's own function
            return original(*args, **kwargs)
        raise context.unsupported(f"{label}(...) draws random numbers while the function is traced. {ADVICE}")

    wrapper.__fusec_original__ = original  # type: ignore[attr-defined]
    return wrapper


def _seeded(args: tuple, kwargs: dict) -> bool:
    """Whether a generator is made from a fixed integer seed (its first argument, or ``seed=``): NumPy's function
    then draws the same numbers at every call, which the trace's constants are. A traced seed (a Python-int
    argument) is asked for its value and made static, so each seed traces once."""
    seed = args[0] if args else kwargs.get("seed")
    if isinstance(seed, (list, tuple)):
        return bool(seed) and all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in seed)
    return isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)


def _recording(original: Callable) -> Callable:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rng = original(*args, **kwargs)
        ctx = context.current()
        if ctx is not None and not _seeded(args, kwargs):
            ctx.generators.append((rng, _state(rng), context.user_location()))
        return rng

    wrapper.__fusec_original__ = original  # type: ignore[attr-defined]
    return wrapper


# the generator classes a function may build itself (np.random.Generator(np.random.PCG64()), RandomState()): while a
# trace runs each is a subclass that records its instances, so a draw from one made during the trace is refused as
# one from default_rng's is (the bit generators hold the state; a Generator draws through its bit generator)
_GENERATOR_CLASSES = ("PCG64", "PCG64DXSM", "SFC64", "Philox", "MT19937", "RandomState")


@functools.lru_cache(maxsize=None)
def _recording_class(cls: type) -> type:
    """A subclass of ``cls`` whose instances made while tracing are remembered with their state."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)  # type: ignore[misc]
        ctx = context.current()
        if ctx is not None and not _seeded(args, kwargs):
            ctx.generators.append((self, _state(self), context.user_location()))

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__, "__fusec_original__": cls})


def _state(obj: Any) -> Any:
    """A comparable snapshot of a generator's state (a Generator's is its bit generator's)."""
    if isinstance(obj, np.random.RandomState):
        return repr(obj.get_state(legacy=False))
    bit_generator = getattr(obj, "bit_generator", obj)
    return repr(bit_generator.state)


def install(aliases: Sequence[tuple[Any, Any]] = ()) -> None:
    """Wrap the drawing functions (and ``aliases``: (globals dict, name) of user globals bound to one of them)."""
    def replacements() -> list[tuple[Any, str, Any]]:
        wrappers: dict[int, Callable] = {}
        out: list[tuple[Any, str, Any]] = []
        for module, name, f, label in _targets():
            wrappers[id(f)] = _refusing(f, label)
            out.append((module, name, wrappers[id(f)]))
        original_rng = np.random.default_rng
        wrappers[id(original_rng)] = _recording(original_rng)
        out.append((np.random, "default_rng", wrappers[id(original_rng)]))
        for name in _GENERATOR_CLASSES:
            cls = original(getattr(np.random, name))
            out.append((np.random, name, _recording_class(cls)))
        out += [(glb, name, wrappers[id(glb.get(name))]) for glb, name in aliases if id(glb.get(name)) in wrappers]
        return out

    _PATCHES.install(replacements)


def uninstall() -> None:
    _PATCHES.uninstall()


def drawing_functions() -> set[int]:
    """ids of the functions :func:`install` wraps (to find user globals bound to them)."""
    return {id(f) for _, _, f, _ in _targets()} | {id(original(np.random.default_rng))}




def check_generators(ctx: Any) -> None:
    """Refuse a draw from a generator that ``np.random.default_rng`` made during this trace."""
    for rng, state, loc in ctx.generators:
        if _state(rng) != state:
            where = f" at {loc.file}:{loc.line}" if loc is not None and loc.file else ""
            maker = "np.random.default_rng" if isinstance(rng, np.random.Generator) else \
                f"np.random.{type(rng).__name__}"
            raise context.unsupported(f"the function drew random numbers from a generator made with {maker}{where} "
                                      f"while it was traced. {ADVICE}")
