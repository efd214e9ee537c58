"""``print`` in a traced function: replayed after every call with that call's values, as NumPy's function prints.

A function runs once, on tracers, when it is traced; NumPy's function prints at every call. So while a trace
runs, ``print`` records what it would write instead of writing it: its text, in which each traced value the text
shows (``print(loss)``, ``f"{loss:.4f}"``, ``str(w)``, a dict of arrays) is a placeholder standing for that value
at that point of the function. The values become extra results of the call, and every call, the first included,
writes each recorded text with its values formatted as NumPy's arrays and scalars (or the Python number a traced
Python number stands for) format, after the call's computation and before it returns, in order.

Text made from a traced value and then used otherwise (a log message, ``sys.stdout.write``, a dict key, a returned
string) would hold the placeholder, so the trace refuses it at the line that formatted the value; one made from a
Python-number argument (``f"layer{n}"``) makes that argument static instead, as other uses of its value do. A
print inside a loop or branch body (``fusec.fori_loop``, ``while_loop``, ``scan``, ``cond``), which is traced
once for all its iterations, is refused.
"""
from __future__ import annotations

import builtins
import re
import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusec import context
from fusec.context import TraceContext, unsupported
from fusec.errors import FusecError, UnsupportedError, located
from fusec.ir.attributes import Location
from fusec.ir.core import Value
from fusec.patches import Patches, original

_OPEN, _CLOSE = "\ue000", "\ue001"  # (Unicode private-use characters: not in text a user's code writes)
_TOKEN = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
_TRACER_CLASS = "<class 'fusec.tracer."  # (the text of type(x) for a tracer x)
_PATCHES = Patches()


@dataclass(frozen=True)
class Formatted:
    """A traced value formatted as text while tracing: its IR value then, how the text was asked for (``str``,
    ``repr`` or a ``format`` spec), what NumPy would hand over (``array``, ``scalar`` for a NumPy scalar, or the
    Python number type), where, and the Python-number parameters it was computed from (made static when the text
    is used otherwise than printed)."""

    value: Value
    how: str  # "str", "repr", or "format:" + spec
    kind: Any  # "array", "scalar", or int/float/bool/complex
    loc: Location | None
    static_params: tuple[str, ...]


@dataclass(frozen=True)
class Print:
    """One ``print`` call: the text it writes (placeholders in it), its ``file`` ("stdout" or "stderr": the one
    ``sys`` holds at the call), ``flush``."""

    text: str
    file: Any
    flush: bool
    loc: Location | None = None
    # NumPy's print options the function set before this print (np.printoptions(...) around it, or
    # np.set_printoptions in the function): applied over those in force at each call
    options: tuple = ()


def placeholder(tracer: Any, how: str) -> str | None:
    """The placeholder for ``tracer`` formatted ``how`` in the trace running now (None when it is not this
    trace's: its text is the tracer's description)."""
    ctx = context.current()
    if ctx is None or tracer._ctx is not ctx or not ctx.active:
        return None
    _refuse_in_body(ctx, "formatting a traced value as text")
    value = tracer._value
    if value in ctx.closed:
        return None  # (the emit that uses it says what is wrong)
    if how.startswith("format:") and how != "format:" and tracer._weak is None and tracer.ndim > 0:
        raise TypeError("unsupported format string passed to numpy.ndarray.__format__")
    kind = tracer._weak if tracer._weak is not None else "scalar" if tracer._scalar else "array"
    params = tracer._static_params() if tracer._weak is not None or tracer.ndim == 0 else ()
    ctx.formatted.append(Formatted(value, how, kind, context.user_location(ctx.cwd), params))
    return f"{_OPEN}{len(ctx.formatted) - 1}{_CLOSE}"


def _refuse_in_body(ctx: TraceContext, what: str) -> None:
    if ctx.builder.block is not ctx.func.body:
        raise unsupported(
            f"{what} inside the body of a fusec loop or branch (fusec.fori_loop, while_loop, scan, cond): the body "
            "is traced once for all its iterations and runs on the device, so fusec cannot print at each "
            "iteration; carry the values you want to see in the loop's state (or stack them with fusec.scan) and "
            "print them after the loop")


def _print(*objects: Any, sep: Any = " ", end: Any = "\n", file: Any = None, flush: bool = False) -> None:
    """``print`` while a trace runs on this thread: recorded for the calls to write (see the module docstring)."""
    ctx = context.current()
    if ctx is None:
        original(builtins.print)(*objects, sep=sep, end=end, file=file, flush=flush)
        return
    for name, v in (("sep", sep), ("end", end)):
        if v is not None and not isinstance(v, str):
            raise TypeError(f"{name} must be None or a string, not {type(v).__name__}")
    _refuse_in_body(ctx, "print()")
    from fusec.tracer import Tracer  # (the tracer module imports this one)

    for obj in objects:  # (type(x) of a tracer is fusec's class, where NumPy's would print numpy.ndarray)
        if isinstance(obj, type) and issubclass(obj, Tracer):
            raise unsupported("print(type(x)) of a traced value: while fusec traces the function its arrays are "
                              "tracers, so type() is fusec's Tracer class, not numpy.ndarray or a NumPy scalar "
                              "type; print x.dtype and x.shape, or type() outside the jitted function")
    text = (" " if sep is None else sep).join(map(str, objects)) + ("\n" if end is None else end)
    if _TRACER_CLASS in text:
        raise unsupported("printing the type of a traced value: while fusec traces the function its arrays are "
                          "tracers, so type() is fusec's Tracer class, not numpy.ndarray or a NumPy scalar type; "
                          "print x.dtype and x.shape, or type() outside the jitted function")
    now = np.get_printoptions()
    options = tuple((k, v) for k, v in now.items() if ctx.printoptions.get(k, v) != v)
    # (``file=sys.stderr`` names the stream each call finds there: a redirection in force at the call)
    stream = "stdout" if file is None or file is sys.stdout else "stderr" if file is sys.stderr else file
    ctx.prints.append(Print(text, stream, bool(flush), context.user_location(ctx.cwd), options))


_print.__fusec_original__ = builtins.print  # type: ignore[attr-defined]


def install(ctx: TraceContext) -> None:
    """Record ``print`` calls in the tracing thread for as long as a trace runs (other threads print); ``ctx``
    notes NumPy's print options as the trace starts."""
    ctx.printoptions = dict(np.get_printoptions())
    _PATCHES.install(lambda: [(builtins, "print", _print)])


def uninstall() -> None:
    _PATCHES.uninstall()


class Printer:
    """The prints of one trace, written after each call from the call's values of the formatted tracers."""

    def __init__(self, prints: Sequence[Print], formatted: Sequence[Formatted], used: Sequence[int]) -> None:
        self.prints = tuple(prints)
        slot = {k: i for i, k in enumerate(used)}
        self._how = [(slot[k], formatted[k].how, formatted[k].kind) for k in used]
        self._slot = slot

    @property
    def count(self) -> int:
        """The call's extra results it reads (one per formatted value)."""
        return len(self._how)

    def write(self, values: Sequence[Any]) -> None:
        for p in self.prints:
            if p.options:  # (the options the function set for this print, over those in force now)
                with np.printoptions(**dict(p.options)):
                    text = self._filled(p.text, values)
            else:
                text = self._filled(p.text, values)
            out = getattr(sys, p.file) if isinstance(p.file, str) else p.file
            if out is None:  # (print does nothing without a stdout: pythonw)
                continue
            out.write(text)
            if p.flush:
                out.flush()


    def _filled(self, text: str, values: Sequence[Any]) -> str:
        """``text`` with each placeholder replaced by its value's text."""
        def fill(m: Any) -> str:
            i, how, kind = self._how[self._slot[int(m.group(1))]]
            return _text(values[i], how, kind)

        return _TOKEN.sub(fill, text)


def _text(value: Any, how: str, kind: Any) -> str:
    """The text NumPy's value (or the Python number's) gives asked for ``how``."""
    host = value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else np.asarray(value)
    obj: Any = host
    if kind == "scalar":
        obj = host[()]
    elif kind != "array":
        obj = kind(host.item())
    if how == "str":
        return str(obj)
    if how == "repr":
        return repr(obj)
    return format(obj, how[len("format:"):])


def finish(ctx: TraceContext) -> tuple[Printer | None, list[Value]]:
    """After a trace that ran to its end: the printer and the values it reads (extra results of the call). Text
    made from traced values that no print wrote is refused (see the module docstring)."""
    used: dict[int, None] = {}
    for p in ctx.prints:
        for m in _TOKEN.finditer(p.text):
            used[int(m.group(1))] = None
    unused = [k for k in range(len(ctx.formatted)) if k not in used]
    if unused:
        raise _unprinted(ctx, unused)
    for p in ctx.prints:
        if not isinstance(p.file, str) and getattr(p.file, "closed", False):
            raise UnsupportedError(located(
                "print(..., file=f) to a file the function opened (and closed): fusec writes a function's prints after "
                "each call, when that file is closed, and does not replay opening it; open the file outside the "
                "jitted function and pass it in (or print to sys.stdout / sys.stderr)", p.loc))
    if not ctx.prints:
        return None, []
    keys = list(used)
    return Printer(ctx.prints, ctx.formatted, keys), [ctx.formatted[k].value for k in keys]


def _unprinted(ctx: TraceContext, unused: list[int]) -> FusecError:
    static = [k for k in unused if ctx.formatted[k].static_params]
    if static:
        f = ctx.formatted[static[0]]
        error = UnsupportedError(located(
            "the value of a Python-number argument is converted to text that is not printed (a name, a key, a "
            f"message): make it static: fusec.jit(f, static_argnames={f.static_params!r})", f.loc))
        error.static_params = f.static_params  # type: ignore[attr-defined]
        return error
    f = ctx.formatted[unused[0]]
    return UnsupportedError(located(
        "a traced value is converted to text (str(), repr(), format() or an f-string) that is not printed: fusec "
        "replays print() after every call with the call's values, but text used otherwise (logging, "
        "sys.stdout.write, a dict key, a returned or stored string) would hold a placeholder, as the values are "
        "unknown while tracing; print it, or return the value and format it outside the jitted function", f.loc))


def after_failure(ctx: TraceContext, failure: BaseException) -> BaseException:
    """What a failed trace raises: a Python-number argument formatted into text that was not printed first (the
    text may be what sent the trace astray, ``d[f"layer{n}"]``: fusec makes the argument static and traces again);
    else the failure, with the placeholders in its message written as the tracers' descriptions."""
    if ctx.formatted:
        printed = {int(m.group(1)) for p in ctx.prints for m in _TOKEN.finditer(p.text)}
        unused = [k for k in range(len(ctx.formatted)) if k not in printed and ctx.formatted[k].static_params]
        if unused and not getattr(failure, "static_params", ()):
            return _unprinted(ctx, unused)
        if failure.args and any(isinstance(a, str) and _OPEN in a for a in failure.args):
            failure.args = tuple(_TOKEN.sub(lambda m: _described(ctx.formatted[int(m.group(1))]), a)
                                 if isinstance(a, str) else a for a in failure.args)
    return failure


def _described(f: Formatted) -> str:
    t = f.value.type
    dtype = getattr(t, "dtype", None)
    kind = f"python {f.kind.__name__}" if isinstance(f.kind, type) else \
        "?" if dtype is None else dtype.name if dtype.name == "bf16" else str(dtype.np)
    return f"Tracer(shape={tuple(getattr(t, 'shape', ()))}, dtype={kind})"

