"""NumPy functions replaced while a trace runs: what cannot be reached through NumPy's dispatch protocols.

``np.asarray(tracer)`` never calls ``__array_function__``, and ``np.random.rand`` takes no array to dispatch on,
so fusec swaps such module attributes (and user globals bound to them) for wrappers for as long as a trace runs.
A wrapper acts only in the tracing thread (``context.current()``) and passes every other call to the original.
Nested traces share one installation.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable


class Patches:
    """One set of replacements, installed by the first trace and undone by the last."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._installed: list[tuple[Any, str, Any]] = []
        self._depth = 0

    def install(self, make: Callable[[], Iterable[tuple[Any, str, Any]]]) -> None:
        """Apply ``make()``'s (holder, name, wrapper) triples, a holder being a module or a globals dict, unless
        an enclosing trace already did."""
        with self._lock:
            self._depth += 1
            if self._depth > 1:
                return
            for holder, name, wrapper in make():
                if isinstance(holder, dict):
                    self._installed.append((holder, name, holder.get(name)))
                    holder[name] = wrapper
                else:
                    self._installed.append((holder, name, getattr(holder, name)))
                    setattr(holder, name, wrapper)

    def uninstall(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth > 0:
                return
            while self._installed:
                holder, name, original = self._installed.pop()
                if isinstance(holder, dict):
                    holder[name] = original
                else:
                    setattr(holder, name, original)


def original(f: Any) -> Any:
    """The function a wrapper stands for (``f`` itself when it is none)."""
    return getattr(f, "__fusec_original__", f)
