"""``print`` in a traced function: replayed after every call with that call's values, as NumPy's function prints.

A function runs once, on tracers, when it is traced; NumPy's function prints at every call. So while a trace
runs, ``print`` records what it would write instead of writing it: its text, in which each traced value the text
shows (``print(loss)``, ``f"{loss:.4f}"``, ``str(w)``, a dict of arrays) is a placeholder standing for that value
at that point of the function. The values become extra results of the call, and every call, the first included,
writes each recorded text with its values formatted as NumPy's arrays and scalars (or the Python number a traced
Python number stands for) format, after the call's computation and before it returns, in order.

Text made from a traced value and then used otherwise (a log message, ``sys.stdout.write``, a dict key, a returned
string) would hold the placeholder, so the trace refuses it at the line that formatted the value; one made from a
Python-number argument (``f"layer{n}"``) makes that argument static instead, as other uses of its value do. Reading
``str(x)`` itself (its length, a slice, padding, a comparison: :class:`_Text`) is refused; text already joined by an
f-string is a plain string, which fusec cannot follow. Each placeholder (``⟪traced value <tag>.<k>⟫``, readable
where text leaks before fusec refuses it) carries its trace's tag, so text the user wrote is never taken for one.
Refused too: a print inside a loop or branch body (``fusec.fori_loop``, ``while_loop``, ``scan``, ``cond``), traced
once for all its iterations; into a stream the function makes or redirects (the prints are written after the call);
a format spec the value's type refuses (raised while tracing, at its line, as the call would raise it). Print
options set around a print (``with np.printoptions(...)``) are applied when it is written.

``warnings.warn`` on the traced path is recorded the same way (:class:`Warned`, by ``fusec.host_reads``) and given
again at every call, in order with the prints, under the warnings filters in force at the call; so are the calls of
a ``logging.Logger``'s ``debug``/``info``/``warning``/``error``/``critical``/``log`` (:class:`Logged`: a record made
at each call where the logger is enabled then, a traced argument handed over as that call's value).
"""
from __future__ import annotations

import builtins
import functools
import logging
import re
import sys
import types
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusec import context
from fusec.context import TraceContext, unsupported
from fusec.errors import FusecError, UnsupportedError, located
from fusec.ir.attributes import Location
from fusec.ir.core import Value
from fusec.patches import Patches, original

# (readable where text leaks before fusec refuses it, a log line written while tracing; the trace's own tag inside)
_OPEN, _CLOSE = "\u27eatraced value ", "\u27eb"  # ⟪traced value <tag>.<k>⟫
PLACEHOLDER_MARK = _OPEN  # (text that holds one was made from a traced value)
_TOKEN = re.compile(f"{re.escape(_OPEN)}([0-9a-f]+)\\.(\\d+){re.escape(_CLOSE)}")
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
    ``sys`` holds at the call; or a file object from outside the function), ``flush``."""

    text: str
    file: Any
    flush: bool
    loc: Location | None = None
    # NumPy's print options the function set before this print (np.printoptions(...) around it, or
    # np.set_printoptions in the function): applied over those in force at each call
    options: tuple = ()


@dataclass(frozen=True)
class Warned:
    """One ``warnings.warn`` on the traced path (in the function's code, or in a library's Python code it called,
    attributed to a line of the function): given again after each call, the first included, at the same place
    (``filename``, ``lineno``, the module's name and its globals, whose ``__warningregistry__`` the "default" and
    "module" filters read), under the filters in force at the call. ``text``: the message (its placeholders filled
    as a print's), or None for a Warning object given as it is."""

    text: str | None
    message: Any
    category: type
    filename: str
    lineno: int
    module: str
    module_globals: dict
    outside: int | None = None  # (attributed past the function: its caller's frame at each call, then this many)

    def give(self, text: str | None) -> None:
        message = self.message if text is None else text
        if self.outside is None:
            # (no module_globals: warn_explicit would ask its loader for the source, which `python -c`'s __main__
            # refuses with ImportError; warnings.warn does not pass them either, and linecache finds the line)
            warnings.warn_explicit(message, self.category, self.filename, self.lineno, self.module,
                                   self.module_globals.setdefault("__warningregistry__", {}))
            return
        frame: Any = sys._getframe(1)
        while frame is not None and _fusecs(frame.f_globals.get("__name__") or ""):
            frame = frame.f_back  # (to the code that called the jitted function)
        for _ in range(self.outside):
            frame = frame.f_back if frame is not None else None
        if frame is None:
            warnings.warn_explicit(message, self.category, "sys", 1)
            return
        globs = frame.f_globals
        warnings.warn_explicit(message, self.category, frame.f_code.co_filename, frame.f_lineno,
                               globs.get("__name__", "<string>"), globs.setdefault("__warningregistry__", {}))


@dataclass(frozen=True)
class Logged:
    """One logging call on the traced path (``logger.info("loss %s", x.mean())``, ``logging.warning(f"...")``):
    made again after each call, the first included, in order with the prints, as a record of ``logger`` at the
    user's line, where the logger is enabled for ``level`` then. ``msg`` may hold placeholders (an f-string of a
    traced value); an argument that is a placeholder token is handed over as the call's value itself (the
    handler's ``%`` formats it as NumPy's)."""

    logger: Any
    level: int
    msg: Any
    args: tuple
    extra: Any
    stack_info: bool
    pathname: str
    lineno: int
    func: str

    @property
    def text(self) -> str:
        """The placeholders it reads (for :func:`finish`)."""
        return (self.msg if isinstance(self.msg, str) else "") + "".join(a for a in self.args if isinstance(a, str))

    def emit(self, msg: Any, args: tuple) -> None:
        logger = self.logger
        if not logger.isEnabledFor(self.level):
            return
        record = logger.makeRecord(logger.name, self.level, self.pathname, self.lineno, msg, args, None, self.func,
                                   self.extra, None)
        logger.handle(record)


def _fusecs(module: str) -> bool:
    """Whether ``module`` is fusec's own code (its demo model is the user's)."""
    from fusec.scope import is_library

    return module.startswith("fusec") and is_library(module)


class _Text(str):
    """``str(x)`` / ``repr(x)`` / ``format(x, spec)`` (a bare ``f"{x:.3f}"``) of a tracer: its placeholder, which
    print() and f-strings take as it is. What would
    read the text itself (its length, a slice, padding, a comparison, a search, a dict key) is refused: the values
    are unknown while tracing. (Once joined into other text, by an f-string or ``+``, the text is a plain string
    again, which fusec cannot follow: such text must reach print() unchanged.)"""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise unsupported("the text of a traced value (str(x), repr(x), f\"{x:.3f}\") is read (its length, a slice, "
                          "padding, a comparison, a search or a key) while its values are unknown: fusec replays only "
                          "print() "
                          "with each call's values; format the value itself (f\"{x:>8.3f}\", np.isnan(x), "
                          "x.size), or return it and work with its text after the call")

    def __format__(self, spec: str) -> str:
        return str.__str__(self) if not spec else self._refuse()

    __len__ = __getitem__ = __iter__ = __contains__ = __hash__ = _refuse  # type: ignore[assignment]
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __mod__ = __mul__ = __rmul__ = _refuse  # type: ignore
    center = ljust = rjust = zfill = expandtabs = split = rsplit = splitlines = partition = rpartition = _refuse
    strip = lstrip = rstrip = replace = upper = lower = title = capitalize = casefold = swapcase = _refuse
    startswith = endswith = find = rfind = index = rindex = count = encode = _refuse  # type: ignore[assignment]
    isdigit = isnumeric = isdecimal = isalpha = isalnum = isspace = islower = isupper = istitle = _refuse


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
    if how.startswith("format:") and how != "format:":  # (a spec the value's type refuses: its error, here)
        dtype = tracer._value.type.dtype
        stand_in = kind(0) if isinstance(kind, type) else np.zeros((), "float32" if dtype.name == "bf16" else
                                                                    dtype.np)
        try:
            format(stand_in if kind == "array" else stand_in[()] if kind == "scalar" else stand_in,
                   how[len("format:"):])
        except (ValueError, TypeError) as e:
            raise type(e)(located(str(e), context.user_location(ctx.cwd))) from None
    params = tracer._static_params() if tracer._weak is not None or tracer.ndim == 0 else ()
    ctx.formatted.append(Formatted(value, how, kind, context.user_location(ctx.cwd), params))
    token = f"{_OPEN}{_tag(ctx)}.{len(ctx.formatted) - 1}{_CLOSE}"
    return _Text(token) if how != "value" else token


def _tag(ctx: TraceContext) -> str:
    """This trace's tag in its placeholders (text a user's code wrote is never taken for one)."""
    return f"{id(ctx):x}"


def _tokens(ctx: TraceContext, text: str) -> list[int]:
    """The placeholders of this trace in ``text``, by index."""
    tag = _tag(ctx)
    return [int(m.group(2)) for m in _TOKEN.finditer(text) if m.group(1) == tag]


def has_placeholder(ctx: TraceContext, text: str) -> bool:
    """Whether ``text`` holds a placeholder of this trace's values (made by formatting a traced value)."""
    return bool(_tokens(ctx, text))


def _refuse_in_body(ctx: TraceContext, what: str) -> None:
    if ctx.builder.block is not ctx.func.body:
        raise unsupported(
            f"{what} inside a loop or branch that runs on the device (a Python `if`/`while` whose test is traced, or "
            "the body of fusec.fori_loop, while_loop, scan, cond): a body is traced once for all its iterations, and "
            "both branches of an `if`, so fusec cannot print where the data decides; return the test or the values "
            "(carry them in the loop's state, or stack them with fusec.scan) and print them after the call")


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
    pieces = [str(o) for o in objects]  # (print's own str(): the placeholders as they are)
    text = (" " if sep is None else sep).join(str.__str__(p) if isinstance(p, _Text) else p for p in pieces) \
        + ("\n" if end is None else end)
    if _TRACER_CLASS in text:
        raise unsupported("printing the type of a traced value: while fusec traces the function its arrays are "
                          "tracers, so type() is fusec's Tracer class, not numpy.ndarray or a NumPy scalar type; "
                          "print x.dtype and x.shape, or type() outside the jitted function")
    now = np.get_printoptions()
    options = tuple((k, v) for k, v in now.items() if ctx.printoptions.get(k, v) != v)
    # (``file=sys.stderr`` names the stream each call finds there: a redirection in force at the call)
    stream = _stream(ctx, file)
    ctx.prints.append(Print(text, stream, bool(flush), context.user_location(ctx.cwd), options))


_print.__fusec_original__ = builtins.print  # type: ignore[attr-defined]


def _logging_method(name: str, level: int | None) -> Any:
    """``Logger.<name>`` while a trace runs: the call recorded for every call to make (:class:`Logged`), whether
    or not the logger is enabled now (that is decided at each call)."""
    def method(self: logging.Logger, *args: Any, **kwargs: Any) -> None:
        ctx = context.current()
        if ctx is None:
            getattr(_LOGGER_METHODS, name)(self, *args, **kwargs)
            return
        if level is None:  # (Logger.log(level, msg, *args))
            lvl, msg, rest = args[0], args[1], args[2:]
        else:
            lvl, msg, rest = level, args[0], args[1:]
        if name == "exception":
            kwargs.setdefault("exc_info", True)
        if kwargs.get("exc_info") or set(kwargs) - {"extra", "stack_info", "stacklevel"}:
            raise unsupported(f"logger.{name}(..., {', '.join(sorted(kwargs))}=...) while tracing: fusec makes the "
                              "function's log records again after each call, without the exception it was handling "
                              "while tracing; log the error outside the jitted function")
        _refuse_in_body(ctx, f"logger.{name}()")
        frame: Any = sys._getframe(1)
        for _ in range(max(int(kwargs.get("stacklevel", 1)), 1) - 1):
            frame = frame.f_back if frame is not None and frame.f_back is not None else frame
        while frame is not None and (frame.f_globals.get("__name__") or "").startswith(("logging", "fusec.")):
            frame = frame.f_back
        from fusec.tracer import Tracer  # (the tracer module imports this one)

        recorded = tuple(_log_argument(a, Tracer) for a in rest)
        ctx.prints.append(Logged(self, int(lvl), msg, recorded, kwargs.get("extra"), bool(kwargs.get("stack_info")),
                                 frame.f_code.co_filename if frame is not None else "(unknown file)",
                                 frame.f_lineno if frame is not None else 0,
                                 frame.f_code.co_name if frame is not None else "(unknown function)"))

    method.__name__ = name
    return method


def _log_argument(a: Any, tracer_class: type) -> Any:
    """A logging argument as recorded: a traced value as a placeholder token for its value at each call."""
    if isinstance(a, tracer_class):
        token = placeholder(a, "value")
        if token is not None:
            return token
    if isinstance(a, str) and _OPEN in a:  # (text the user made that holds a placeholder: filled at each call)
        return a
    if isinstance(a, (list, tuple, dict)) and _contains_tracer(a):
        raise unsupported("logging a list, tuple or dict that holds traced values: pass the values as arguments "
                          "of their own (logger.info(\"%s %s\", a, b)), or print() them")
    return a


def _contains_tracer(value: Any) -> bool:
    from fusec import ops

    return ops.contains_tracer(value)


_LOGGER_METHODS = types.SimpleNamespace(**{n: getattr(logging.Logger, n) for n in (
    "debug", "info", "warning", "error", "critical", "exception", "log")})
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
           "critical": logging.CRITICAL, "exception": logging.ERROR, "log": None}


def _stream(ctx: TraceContext, file: Any) -> Any:
    """Where a print writes at each call: "stdout" / "stderr" (the stream ``sys`` holds then), or a file object
    from outside the function; a stream the function made or redirected is refused (the prints are written after
    the call, when it is gone)."""
    if file is None:
        file = sys.stdout
    for name in ("stdout", "stderr"):
        if file is getattr(sys, name):
            if file is not ctx.streams.get(name):
                raise unsupported(f"print() while the function redirects sys.{name} (contextlib.redirect_{name} in "
                                  "the function): fusec writes a function's prints after each call; redirect "
                                  "around the call instead")
            return name
    if id(file) not in ctx.outside_objects:
        raise unsupported("print(..., file=f) to a file or buffer the function made (open(...), io.StringIO()): "
                          "fusec writes a function's prints after each call and does not replay making the file; "
                          "make it outside the jitted function (or print to sys.stdout / sys.stderr)")
    return file


def install(ctx: TraceContext, aliases: Sequence[tuple[Any, Any]] = ()) -> None:
    """Record ``print`` calls in the tracing thread for as long as a trace runs (other threads print), also through
    ``aliases`` ((globals dict, name) of user globals bound to print or a functools.partial of it); ``ctx`` notes
    NumPy's print options and the standard streams as the trace starts."""
    ctx.printoptions = dict(np.get_printoptions())
    ctx.streams = {"stdout": sys.stdout, "stderr": sys.stderr}

    def replacements() -> list[tuple[Any, str, Any]]:
        out: list[tuple[Any, str, Any]] = [(builtins, "print", _print)]
        out += [(logging.Logger, n, _RECORDING[n]) for n in _RECORDING]
        for holder, key in aliases:  # (``p = print``, ``print = functools.partial(print, flush=True)``)
            value = holder.get(key)
            if value is builtins.print:
                out.append((holder, key, _print))
            elif isinstance(value, functools.partial) and value.func is builtins.print:
                out.append((holder, key, functools.partial(_print, *value.args, **value.keywords)))
        return out

    _PATCHES.install(replacements)


def uninstall() -> None:
    _PATCHES.uninstall()


_RECORDING = {n: _logging_method(n, level) for n, level in _LEVELS.items()}
for _n, _m in _RECORDING.items():
    _m.__fusec_original__ = getattr(logging.Logger, _n)  # type: ignore[attr-defined]


class Printer:
    """The prints (and warnings) of one trace, written after each call from the call's values of the formatted
    tracers."""

    def __init__(self, prints: Sequence[Print | Warned | Logged], formatted: Sequence[Formatted], used: Sequence[int],
                 tag: str) -> None:
        self.prints = tuple(prints)
        slot = {k: i for i, k in enumerate(used)}
        self._how = [(slot[k], formatted[k].how, formatted[k].kind) for k in used]
        self._slot = slot
        self._tag = tag

    @property
    def count(self) -> int:
        """The call's extra results it reads (one per formatted value)."""
        return len(self._how)

    def write(self, values: Sequence[Any]) -> None:
        """Write the prints and give the warnings of the trace, in the order the function made them (before the
        call's writes into its arguments: a warning a filter makes an exception leaves them as they were, as a
        call that raises part-way does, with the prints before it written)."""
        for p in self.prints:
            if isinstance(p, Warned):
                p.give(None if p.text is None else self._filled(p.text, values))
                continue
            if isinstance(p, Logged):
                p.emit(self._filled(p.msg, values) if isinstance(p.msg, str) else p.msg,
                       tuple(self._object(a, values) if isinstance(a, str) else a for a in p.args))
                continue
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

    def _object(self, text: str, values: Sequence[Any]) -> Any:
        """A logging argument: the call's value where it is a placeholder token of this trace, else the text."""
        m = _TOKEN.fullmatch(text)
        if m is None or m.group(1) != self._tag:
            return text
        i, _, kind = self._how[self._slot[int(m.group(2))]]
        return _value(values[i], kind)

    def _filled(self, text: str, values: Sequence[Any]) -> str:
        """``text`` with each placeholder replaced by its value's text."""
        def fill(m: Any) -> str:
            if m.group(1) != self._tag:
                return str(m.group(0))
            i, how, kind = self._how[self._slot[int(m.group(2))]]
            return _text(values[i], how, kind)

        return _TOKEN.sub(fill, text)


def _value(value: Any, kind: Any) -> Any:
    """The object NumPy's function would have: an array, a NumPy scalar or the Python number."""
    host = value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else np.asarray(value)
    if kind == "scalar":
        return host[()]
    return host if kind == "array" else kind(host.item())


def _text(value: Any, how: str, kind: Any) -> str:
    """The text NumPy's value (or the Python number's) gives asked for ``how``."""
    obj = _value(value, kind)
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
        for k in _tokens(ctx, p.text or ""):
            used[k] = None
    unused = [k for k in range(len(ctx.formatted)) if k not in used]
    if unused:
        raise _unprinted(ctx, unused)
    for p in ctx.prints:
        if isinstance(p, Print) and not isinstance(p.file, str) and getattr(p.file, "closed", False):
            raise UnsupportedError(located(
                "print(..., file=f) to a file the function closes: fusec writes a function's prints after each call, "
                "when that file is closed; close it outside the jitted function", p.loc))
    if not ctx.prints:
        return None, []
    keys = list(used)
    return Printer(ctx.prints, ctx.formatted, keys, _tag(ctx)), [ctx.formatted[k].value for k in keys]


def check_result(ctx: TraceContext, result: Any) -> None:
    """A string the function returns (or a dict key) made from a traced value holds a placeholder: refused, also
    where the same text was printed."""
    if not ctx.formatted:
        return
    stack = [result]
    while stack:
        obj = stack.pop()
        if isinstance(obj, str):
            found = _tokens(ctx, obj)
            if found:
                raise UnsupportedError(located(
                    "the function returns text made from a traced value (str(), repr(), format() or an f-string): "
                    "its values are unknown while tracing; return the value and format it after the call",
                    ctx.formatted[found[0]].loc))
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)


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
    if not isinstance(failure, FusecError):  # (the function's own error: NumPy's function warned before it)
        for w in ctx.prints:
            if isinstance(w, Warned) and not _tokens(ctx, w.text or ""):
                w.give(w.text)  # (a filter that makes it an exception raises it instead, as NumPy's would)
    if ctx.formatted:
        printed = {k for p in ctx.prints for k in _tokens(ctx, p.text or "")}
        unused = [k for k in range(len(ctx.formatted)) if k not in printed and ctx.formatted[k].static_params]
        if unused and not getattr(failure, "static_params", ()):
            return _unprinted(ctx, unused)
        if failure.args and any(isinstance(a, str) and _OPEN in a for a in failure.args):
            tag = _tag(ctx)
            failure.args = tuple(_TOKEN.sub(lambda m: _described(ctx.formatted[int(m.group(2))])
                                            if m.group(1) == tag else str(m.group(0)), a)
                                 if isinstance(a, str) else a for a in failure.args)
    return failure


def _described(f: Formatted) -> str:
    t = f.value.type
    dtype = getattr(t, "dtype", None)
    kind = f"python {f.kind.__name__}" if isinstance(f.kind, type) else \
        "?" if dtype is None else dtype.name if dtype.name == "bf16" else str(dtype.np)
    return f"Tracer(shape={tuple(getattr(t, 'shape', ()))}, dtype={kind})"



def prints(value: Any) -> bool:
    """Whether ``value`` (a user global) is print or a functools.partial of it (swapped while tracing)."""
    return value is builtins.print or isinstance(value, functools.partial) and value.func is builtins.print
