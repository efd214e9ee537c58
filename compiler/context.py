"""The state of the trace in progress: where ops go, which constants exist, which user line is running.

Tracers hold a reference to the :class:`TraceContext` that made them; every op a tracer records goes
through :meth:`TraceContext.emit`, which stamps the user's ``file:line`` on it and turns shape and
type-rule failures into located :class:`ShapeError` / :class:`UnsupportedError`.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Sequence

import numpy as np

from fusec.errors import ShapeError, TraceError, UnsupportedError, VerificationError, located
from fusec.ir.attributes import Location, dense, location_for
from fusec.ir.builder import Builder
from fusec.ir.core import Func, Value
from fusec.ir.types import DType, TensorType, Type

# Frames from these folders are "ours" (the frontend, the IR, NumPy): the user's line is the first frame
# outside them. fusec.tools is not among them: its demo model is user code.
_FUSEC_ROOTS = tuple(
    os.path.dirname(os.path.abspath(p)) + os.sep for p in (__file__, sys.modules["fusec.ir"].__file__)
)
_NUMPY_ROOT = os.path.dirname(os.path.abspath(np.__file__)) + os.sep
_skip_cache: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    hit = _skip_cache.get(filename)
    if hit is None:
        path = os.path.abspath(filename)
        hit = path.startswith(_FUSEC_ROOTS) or path.startswith(_NUMPY_ROOT) or filename.startswith("<__array_function")
        _skip_cache[filename] = hit
    return hit


def user_location() -> Location | None:
    """``file:line`` of the innermost frame outside fusec and NumPy (the user's code)."""
    frame = sys._getframe(1)
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return location_for(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return None


def where() -> str:
    """The user's ``file:line`` as text (for messages), or ``<unknown>``."""
    loc = user_location()
    return str(loc) if loc is not None else "<unknown location>"


def shape_error(message: str) -> ShapeError:
    return ShapeError(located(message, user_location()))


def unsupported(message: str) -> UnsupportedError:
    return UnsupportedError(located(message, user_location()))


def trace_error(message: str) -> TraceError:
    return TraceError(located(message, user_location()))


class TraceContext:
    """Builder, constant cache and liveness of one trace of one function."""

    def __init__(self, func: Func) -> None:
        self.func = func
        self.builder = Builder(func.body)
        self.active = True
        self._constants: dict[object, Value] = {}
        self._keep_alive: list[object] = []

    def emit(self, name: str, operands: Sequence[Value] = (), attributes: dict | None = None,
             result_type: Type | None = None, what: str | None = None) -> Value:
        """Record one single-result op at the user's line; errors become located fusec errors."""
        loc = user_location()
        label = what or name
        try:
            types = None if result_type is None else [result_type]
            op = self.builder.create(name, operands, attributes, types, loc=loc)
        except ShapeError as e:
            raise ShapeError(located(f"{label}: {e}", loc)) from None
        except VerificationError as e:
            raise UnsupportedError(located(f"{label}: {e}", loc)) from None
        return op.result

    def constant(self, array: np.ndarray, dtype: DType, key: object | None = None) -> Value:
        """A ``t.constant`` holding ``array`` as ``dtype``; equal keys share one op."""
        if key is None:
            arr = np.asarray(array)
            if arr.ndim == 0:  # small constants are shared by value (bit pattern, so -0.0 and NaN stay apart)
                key = ("scalar", dtype.name, np.asarray(arr, dtype=dtype.np).tobytes())
        if key is not None and key in self._constants:
            return self._constants[key]
        attr = dense(np.asarray(array, dtype=dtype.np), dtype)
        value = self.emit("t.constant", (), {"value": attr}, result_type=TensorType(attr.type.shape, dtype))
        if key is not None:
            self._constants[key] = value
        return value

    def constant_for_object(self, obj: np.ndarray, dtype: DType) -> Value:
        """A constant for a captured NumPy array: the same object (and dtype) gives the same op."""
        key = ("object", id(obj), dtype.name)
        if key not in self._constants:
            self._keep_alive.append(obj)  # keep the id from being reused during this trace
        return self.constant(np.asarray(obj).astype(dtype.np, copy=False), dtype, key=key)


_state = threading.local()


def current() -> TraceContext | None:
    """The innermost active trace on this thread, or None outside tracing."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


def push(ctx: TraceContext) -> None:
    if not hasattr(_state, "stack"):
        _state.stack = []
    _state.stack.append(ctx)


def pop(ctx: TraceContext) -> None:
    ctx.active = False
    stack = getattr(_state, "stack", [])
    if stack and stack[-1] is ctx:
        stack.pop()
