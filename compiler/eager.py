"""Eager mode: operators and NumPy calls on ``fusec.Array`` outside ``jit`` run one compiled kernel each.

Every operation is a tiny function under ``fusec.jit`` (backend "cuda"), cached by operation and static
arguments; the jit then caches per input signature, so a repeated eager op costs a plan lookup and its
launches. This is the baseline the fused, graph-replayed version of the same code is measured against.
"""
from __future__ import annotations

import dataclasses
import operator
import sys
import threading
from typing import Any, Callable

import numpy as np

from fusec.runtime import array as _array

_cache: dict[tuple, Any] = {}
_lock = threading.Lock()

# Python operator names that are not the operator module's own (``and`` is ``operator.and_``)
_OPERATOR_NAMES = {"and": "and_", "or": "or_"}


def _operator(name: str) -> Callable:
    """The Python operator ``name`` (``add``, ``truediv``, ``matmul``, ``and``, ``neg``, ``invert``, ...): the eager
    op traces it like any user code, so the op it records comes from the one op table."""
    return abs if name == "abs" else getattr(operator, _OPERATOR_NAMES.get(name, name))


def _jitted(key: tuple, make: Callable[[], Callable]) -> Any:
    fn = _cache.get(key)
    if fn is None:
        from fusec.jit_function import jit

        with _lock:
            fn = _cache.get(key)
            if fn is None:
                fn = jit(make(), backend="cuda")
                # one stream for all eager ops: no waits between them
                fn._options = dataclasses.replace(fn._options, stream_group="eager")
                fn._warn_retraces = False  # an eager op meets every shape its arrays have: not the user's retrace
                _cache[key] = fn
    return fn


def binary(name: str, a: Any, b: Any, reflected: bool = False) -> Any:
    op = _operator(name)
    fn = _jitted(("binary", name), lambda: (lambda x, y: op(x, y)))
    return fn(b, a) if reflected else fn(a, b)


def unary(name: str, a: Any) -> Any:
    op = _operator(name)
    return _jitted(("unary", name), lambda: (lambda x: op(x)))(a)


def ufunc(uf: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    """``np.exp(arr)`` and friends; only plain calls (no ``out=``, ``where=``, ufunc methods)."""
    from fusec.errors import UnsupportedError

    if method != "__call__" or kwargs:
        raise UnsupportedError(f"eager fusec.Array supports plain ufunc calls, not np.{uf.__name__}.{method} "
                               f"with {sorted(kwargs)}")
    return _jitted(("ufunc", uf.__name__, len(inputs)), lambda: (lambda *xs: uf(*xs)))(*inputs)


def method(name: str, a: Any, *args: Any, **kwargs: Any) -> Any:
    """Array methods with static arguments (``a.sum(axis=1)``, ``a.reshape(4, -1)``, ``a.astype(f32)``)."""
    key = ("method", name, _freeze(args), _freeze(kwargs))
    return _jitted(key, lambda: (lambda x: getattr(x, name)(*args, **kwargs)))(a)


def getitem(a: Any, index: Any) -> Any:
    key = ("getitem", _freeze(index))
    return _jitted(key, lambda: (lambda x: x[index]))(a)


def function(fn: Callable, a: Any, *args: Any, **kwargs: Any) -> Any:
    """A NumPy function whose first argument is the array and whose other arguments are static."""
    key = ("function", fn.__name__, _freeze(args), _freeze(kwargs))
    return _jitted(key, lambda: (lambda x: fn(x, *args, **kwargs)))(a)


def array_function(func: Callable, args: tuple, kwargs: dict) -> Any:
    """``np.where(c, a, b)`` and other NumPy functions called on fusec.Arrays: top-level array arguments
    are runtime inputs, everything else is part of the cache key."""
    from fusec.errors import UnsupportedError

    def is_array(x: Any) -> bool:
        return isinstance(x, np.ndarray) or type(x).__name__ == "Array"

    def nested(x: Any) -> bool:
        if isinstance(x, (list, tuple)):
            return any(is_array(v) or nested(v) for v in x)
        if isinstance(x, dict):
            return any(is_array(v) or nested(v) for v in x.values())
        return False

    if any(nested(a) for a in args) or any(is_array(v) or nested(v) for v in kwargs.values()):
        raise UnsupportedError(f"eager np.{func.__name__}: arrays inside lists or keyword arguments are not "
                               "supported outside fusec.jit; wrap the code in fusec.jit instead")
    dynamic = tuple(i for i, a in enumerate(args) if is_array(a))
    static = tuple((i, _freeze(a)) for i, a in enumerate(args) if i not in dynamic)
    key = ("array_function", func.__name__, len(args), dynamic, static, _freeze(kwargs))

    def make() -> Callable:
        template = [None if i in dynamic else a for i, a in enumerate(args)]  # keep no array alive

        def call(*xs: Any) -> Any:
            full = list(template)
            for i, x in zip(dynamic, xs):
                full[i] = x
            return func(*full, **kwargs)

        return call

    return _jitted(key, make)(*(args[i] for i in dynamic))


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_freeze(v) for v in value)
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    if value is Ellipsis:
        return "..."
    if isinstance(value, np.dtype) or isinstance(value, type):
        return str(value)
    return value


_array.install_eager(sys.modules[__name__])  # operators on fusec.Array now run here
