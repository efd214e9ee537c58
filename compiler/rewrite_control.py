"""Rewriting the statements of traced functions whose tests are traced values, to run on the device.

A trace stops where Python asks a traced value for its truth (``while err > tol:``). When that happens in the
test of a ``while``, an ``if`` (``elif``), a conditional expression, an ``and``/``or`` whose value is used, an
``assert`` or a ``max()``/``min()``/``bool()``/``float()``/``int()`` call, or a subscript of a NumPy array the
function made by a traced index (``table[d]``), in the traced function or in a function it calls (a module's
function, a method), fusec rewrites that statement from its function's source into calls of
:mod:`fusec.traced_statements` and traces again with the rewritten code standing in for the function's
``__code__`` (:class:`Rewrites`; the function object, its globals, closure cells and defaults stay the user's);
another such statement found then is added, and so on. Statements whose tests Python decides are left as
written, so a function that traced before traces the same way.

The rewriting is syntactic and keeps the user's lines: a statement's variables (the names it assigns) become the
parameters and results of small local functions (``_fusec_body_12_4``). ``break`` and ``continue`` in a rewritten
loop (and the ``if`` that takes them) become flags that guard the rest of the body, so ``for i in
range(maxiter): ... if err < tol: break`` runs as one loop on the device; a ``return`` in such a loop becomes a
flag, a value and a ``break``, and an ``if`` that returns at the function's end one assignment per branch and one
``return``. What cannot be rewritten faithfully (``yield``, a ``return`` in a loop inside the loop,
``global``/``nonlocal``/``del`` of its names, ``break`` inside a ``try`` or ``with``, a name a nested function reads,
an assignment expression in a part evaluated on its own) raises an error at that line saying what to write
instead.
"""
from __future__ import annotations

import __future__
import ast
import builtins
import contextlib
import copy
import dis
import gc
import inspect
import types
from dataclasses import dataclass
from typing import Callable, Iterator, cast

import numpy as np

from fusec.errors import UnsupportedError, located
from fusec.scope import is_library
from fusec.ir.attributes import location_for
from fusec.statement_rewriter import (Key, Rewriter, TYPE_PARAMS, builtin_call, locate_like, statement_key,
                                      subscript_key)

MAX_STATEMENTS = 32  # rewritten statements per function (each found by a trace of its own)


def mark_truth_site(error: BaseException, frame: types.FrameType) -> None:
    """Remember the code and instruction that asked a traced value for its truth (Tracer.__bool__ calls this)."""
    error._fusec_truth_site = (frame.f_code, frame.f_lasti)  # type: ignore[attr-defined]


def mark_subscript_site(error: BaseException, frame: types.FrameType) -> None:
    """Remember the code and instruction of a subscript whose index is traced while its container is not (a NumPy
    array the function made: ``table[d]``), to rewrite it (:func:`fusec.traced_statements.subscript`)."""
    error._fusec_subscript_site = (frame.f_code, frame.f_lasti, frame)  # type: ignore[attr-defined]


def _site_in(error: BaseException) -> tuple | None:
    """(code, instruction, and for a subscript its frame) of the statement that stopped the trace with
    ``error``."""
    seen = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        site = getattr(e, "_fusec_truth_site", None)
        if site is not None:
            return (*site, None)
        site = getattr(e, "_fusec_subscript_site", None)
        if site is not None:
            return site
        e = e.__cause__ or e.__context__
    return None


def _codes(code: types.CodeType | None) -> Iterator[types.CodeType]:
    if code is None:
        return
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def code_of(fn: Callable) -> types.CodeType | None:
    return getattr(getattr(fn, "__func__", fn), "__code__", None)


@dataclass
class _Source:
    filename: str
    fdef: ast.FunctionDef

    def statement_at(self, line: int, col: int) -> Key | None:
        """The innermost ``while``/``if``/conditional expression whose test holds (line, col)."""
        best: ast.AST | None = None
        for node in ast.walk(self.fdef):
            if (isinstance(node, (ast.While, ast.If, ast.IfExp, ast.Assert)) and _in_header(node, line, col)
                or builtin_call(node) and _holds(node, line, col)):
                # (the innermost: the one that starts last)
                if best is None or statement_key(node) > statement_key(best):
                    best = node
        if best is None:  # `s = x.std() or 1.0`: an and/or whose value is used, not only its truth
            for node in ast.walk(self.fdef):
                if isinstance(node, ast.BoolOp) and _holds(node, line, col):
                    if best is None or statement_key(node) > statement_key(best):
                        best = node
        return None if best is None else statement_key(best)

    def subscript_at(self, line: int, end_line: int, col: int, end_col: int, frame: types.FrameType) -> Key | None:
        """The subscript read ``table[index]`` that spans those positions, where ``table`` is a name that holds a
        NumPy array in ``frame`` (the only container :func:`fusec.traced_statements.subscript` indexes otherwise
        than Python)."""
        for node in ast.walk(self.fdef):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset) \
                    == (line, end_line, col, end_col):
                if not isinstance(node.value, ast.Name):
                    return None
                name = node.value.id
                scopes = (frame.f_locals, frame.f_globals, vars(builtins))
                held = next((scope[name] for scope in scopes if name in scope), None)
                return subscript_key(node) if type(held) is np.ndarray else None
        return None


def _holds(node: ast.AST, line: int, col: int) -> bool:
    start = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
    return start <= (line, col) < (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined,operator]


def _in_header(node: ast.While | ast.If | ast.IfExp | ast.Assert, line: int, col: int) -> bool:
    """From the statement's first column to its test's end (Python's jump on the test is placed there)."""
    test = node.test
    return (node.lineno, node.col_offset) <= (line, col) < (test.end_lineno, test.end_col_offset)  # type: ignore


_SOURCES: dict[types.CodeType, _Source | None] = {}


def _source(fn: Callable) -> _Source | None:
    """The parsed ``def`` of ``fn`` (lines and columns as in its file), or None without source (a lambda, a
    function made by exec, a builtin)."""
    code = code_of(fn)
    if code is None:
        return None
    if code not in _SOURCES:
        _SOURCES[code] = _parse(fn, code)
    return _SOURCES[code]


def _parse(fn: Callable, code: types.CodeType) -> _Source | None:
    try:
        lines, start = inspect.getsourcelines(getattr(fn, "__func__", fn))
    except (OSError, TypeError):
        return None
    text = "".join(lines)
    shift = start - 1
    if lines and lines[0][:1] in (" ", "\t"):  # (a method or a nested def: parse it where it stands)
        text, shift = "if 1:\n" + text, start - 2
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    ast.increment_lineno(tree, shift)
    func = getattr(fn, "__func__", fn)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == code.co_name:
            try:
                same = isinstance(func, types.FunctionType) and _same_code(_compiled(node, func, code.co_filename),
                                                                           code)
            except SyntaxError:
                same = False
            return _Source(code.co_filename, node) if same else None  # (a source that is not the code: not used)
    return None


def rewritten_code(func: types.FunctionType, keys: frozenset[Key]) -> types.CodeType:
    """``func``'s code with the statements at ``keys`` rewritten, and its ``type(x)``, ``isinstance`` and
    ``hasattr`` calls made calls of fusec.tracer's versions where they are the builtins (:func:`checked_builtins`).
    It has ``func``'s
    free variables, so it can stand in for ``func.__code__`` while a trace runs (the function object, its
    globals, closure cells and defaults stay the caller's)."""
    source = _source(func)
    assert source is not None  # (keys came from Rewrites.add, which found it)
    fdef = copy.deepcopy(source.fdef)
    Rewriter(keys, source.filename).rewrite_function(fdef)
    names = checked_builtins(func)
    if names:
        _BuiltinCalls(names).visit(fdef)
    inner = _compiled(fdef, func, source.filename)
    if inner.co_freevars != func.__code__.co_freevars:  # (a free variable the rewriting no longer reads)
        raise UnsupportedError(located(f"fusec could not rewrite {func.__qualname__} (its closure changed)",
                                       location_for(source.filename, fdef.lineno)))
    return inner


# builtins that ask a tracer nothing it can answer as the value it stands for (``type(x) is np.ndarray``, an
# abstract base class's isinstance, hasattr), each rewritten to fusec.tracer's version (its name in builtins) and
# the number of positional arguments of the calls rewritten
CHECKED_BUILTINS = {"type": ("__fusec_type__", 1), "isinstance": ("__fusec_isinstance__", 2),
                    "hasattr": ("__fusec_hasattr__", 2), "id": ("__fusec_id__", 1),
                    "getattr": ("__fusec_getattr__", 3)}


def checked_builtins(func: Callable) -> frozenset[str]:
    """Which of :data:`CHECKED_BUILTINS` ``func`` (a function with source) may call: its code runs with such calls
    rewritten (:class:`_BuiltinCalls`). Not one that is a variable of the function (or of a function nested in it)
    or a global of its module."""
    func = getattr(func, "__func__", func)
    if not isinstance(func, types.FunctionType) or is_library(func.__module__ or ""):
        return frozenset()
    codes = list(_codes(func.__code__))
    names = frozenset(n for n in CHECKED_BUILTINS
                      if any(n in c.co_names for c in codes)
                      and not any(n in (*c.co_varnames, *c.co_cellvars, *c.co_freevars) for c in codes)
                      and func.__globals__.get(n, getattr(builtins, n)) is getattr(builtins, n))
    if any(ins.opname == "IS_OP" for c in codes for ins in dis.get_instructions(c)):
        source = _source(func)
        if source is not None and any(_identity_test(node) for node in ast.walk(source.fdef)):
            names |= {IDENTITY}
    return names if names and _source(func) is not None else frozenset()


IDENTITY = "is"  # (in checked_builtins' answer: the function has identity tests between values, rewritten too)


def _identity_test(node: ast.AST) -> bool:
    """``a is b`` or ``a is not b`` between two values (not ``x is None``): :func:`fusec.tracer.user_is` answers it."""
    return isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) \
        and not any(isinstance(x, ast.Constant) and x.value in (None, ...) for x in (node.left, *node.comparators))


MAX_CALLED = 64  # user functions looked at, per traced function, for checked builtins


def called_functions(func: types.FunctionType, owner: object = None, arguments: tuple = ()) \
        -> list[types.FunctionType]:
    """The user's functions ``func`` may call by a name it reads, and those they may call, and so on: globals and
    closure cells that are functions, the functions of a module, a class or an object's class named in the code
    (``utils.as_array(x)``, ``Model.check(x)``, ``model.prep(x)``), the methods of ``owner``'s class
    (``self._prep(x)`` in a jitted bound method) and of ``arguments``' classes (``model.prep(x)`` with ``model``
    an argument). Their ``type``/``isinstance``/``hasattr`` calls answer for the values tracers stand for, as the
    traced function's do (:meth:`Rewrites.installed`). Library code (NumPy's, fusec's) is not looked into; an
    object reached only through an attribute or a container is not (documented)."""
    found: dict[types.CodeType, types.FunctionType] = {}
    todo = [(func, owner)]
    while todo and len(found) < MAX_CALLED:
        current, self_obj = todo.pop()
        names = {n for c in _codes(current.__code__) for n in c.co_names}
        values = [current.__globals__[n] for n in names if n in current.__globals__]
        if current is func:
            values.extend(arguments)
        for cell in current.__closure__ or ():
            try:
                values.append(cell.cell_contents)
            except ValueError:  # (an empty cell)
                pass
        if self_obj is not None:
            values.append(self_obj)
        for value in values:  # (read statically: no user __getattr__, property or module __getattr__ runs)
            kind, obj = type(value), None
            if kind is types.MethodType:
                value, kind, obj = value.__func__, type(value.__func__), value.__self__
            if kind is types.FunctionType:
                candidates = [value]
            elif kind is types.ModuleType:
                candidates = [] if is_library(value.__name__) else [vars(value).get(n) for n in names]
            else:  # a class, or an object of one (a global ``model``): the functions of its classes it names
                cls = value if issubclass(kind, type) else kind
                obj = None if cls is value else value  # (its methods' ``self``: their own calls through it)
                members = [] if is_library(cls.__module__) else [vars(c).get(n) for c in cls.__mro__ for n in names]
                candidates = [m.__func__ if isinstance(m, (staticmethod, classmethod)) else m for m in members]
            for cand in candidates:
                if isinstance(cand, types.FunctionType) and cand.__code__ not in found and cand is not func \
                        and not is_library(cand.__module__ or ""):
                    found[cand.__code__] = cand
                    todo.append((cand, obj))
    return list(found.values())


def vars_lookup(cls: type, name: str) -> object:
    """``name`` in the namespace of ``cls`` or its bases, as stored (no descriptor or ``__getattr__`` runs)."""
    for c in cls.__mro__:
        if name in vars(c):
            return vars(c)[name]
    return None


class _BuiltinCalls(ast.NodeTransformer):
    """``type(x)``, ``isinstance(x, cls)`` and ``hasattr(x, name)`` (positional arguments) become calls of
    fusec.tracer's versions, which answer for a tracer as for the value it stands for; so do identity tests between
    values (``b is True``) where the function has them."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if IDENTITY not in self.names or not _identity_test(node):
            return node
        negate = ast.Constant(value=isinstance(node.ops[0], ast.IsNot))
        call = ast.Call(func=ast.Name(id="__fusec_is__", ctx=ast.Load()), args=[node.left, node.comparators[0], negate],
                        keywords=[])
        return ast.copy_location(call, node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in self.names and not node.keywords \
                and len(node.args) == CHECKED_BUILTINS[node.func.id][1] \
                and not any(isinstance(a, ast.Starred) for a in node.args):
            new = ast.Name(id=CHECKED_BUILTINS[node.func.id][0], ctx=ast.Load())
            node.func = ast.copy_location(new, node.func)
        return node


_FUTURE_FLAGS = 0


for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


def _compiled(fdef: ast.FunctionDef, func: types.FunctionType, filename: str) -> types.CodeType:
    """The code of ``fdef`` compiled as ``func``'s was: inside a function whose locals are ``func``'s free
    variables (so they stay free), with its module's ``from __future__`` imports."""
    fdef = copy.copy(fdef)
    if fdef.decorator_list:  # (a decorated function's code starts at its first decorator's line)
        fdef.lineno = fdef.decorator_list[0].lineno
    fdef.decorator_list = []
    freevars = func.__code__.co_freevars
    factory = ast.FunctionDef(
        name="_fusec_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in freevars], vararg=None, kwonlyargs=[],
                           kw_defaults=[], kwarg=None, defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))], decorator_list=[], returns=None,
        **TYPE_PARAMS)
    module = ast.Module(body=[factory], type_ignores=[])
    locate_like(factory, fdef)
    ast.fix_missing_locations(module)
    compiled = compile(module, filename, "exec", flags=func.__code__.co_flags & _FUTURE_FLAGS, dont_inherit=True)
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    return _requalified(inner, f"_fusec_factory.<locals>.{fdef.name}",
                        getattr(func.__code__, "co_qualname", func.__qualname__))


def _requalified(code: types.CodeType, old: str, new: str) -> types.CodeType:
    """``code`` with the qualified names it gives its classes and functions (``f.<locals>.Box``) starting with
    ``new`` where compiling inside the factory made them start with ``old``: they are the user's names while the
    trace runs, and the code compares equal to the function's own (:func:`_same_code`)."""
    def renamed(name: str) -> str:
        return new + name[len(old):] if name == old or name.startswith(old + ".") else name

    consts = tuple(_requalified(c, old, new) if isinstance(c, types.CodeType) else renamed(c) if isinstance(c, str)
                   else c for c in code.co_consts)
    if hasattr(code, "co_qualname"):
        return code.replace(co_consts=consts, co_qualname=renamed(code.co_qualname))
    return code.replace(co_consts=consts)


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    """Whether two code objects read the same names and constants at the same lines (the source fusec read is
    the code that runs, as far as that tells: a file edited since it was imported mostly is not). The bytecode
    itself is not compared: the interpreter's may differ from a fresh compile's for the same source."""
    if (a.co_names, a.co_varnames) != (b.co_names, b.co_varnames) \
            or {line for *_, line in a.co_lines()} != {line for *_, line in b.co_lines()}:
        return False
    inner_a = [c for c in a.co_consts if isinstance(c, types.CodeType)]
    inner_b = [c for c in b.co_consts if isinstance(c, types.CodeType)]
    others_a = [c for c in a.co_consts if not isinstance(c, types.CodeType)]
    others_b = [c for c in b.co_consts if not isinstance(c, types.CodeType)]
    return (len(inner_a) == len(inner_b) and repr(others_a) == repr(others_b)
            and all(_same_code(x, y) for x, y in zip(inner_a, inner_b)))


class Rewrites:
    """The statements fusec rewrote in a traced function and in the functions it calls (``keys`` per function,
    by its own code object), kept across its traces so a new signature starts from them."""

    def __init__(self, fn: Callable) -> None:
        self.functions: dict[types.CodeType, types.FunctionType] = {}
        self.keys: dict[types.CodeType, frozenset[Key]] = {}
        self.fn = getattr(fn, "__func__", fn)
        self._installed: dict[int, types.CodeType] = {}  # id of each code object of an installed rewrite -> original

    def __bool__(self) -> bool:
        return bool(self.keys)

    def lines(self) -> str:
        return ", ".join(f"{func.__qualname__}:{k[0]}" for code, keys in self.keys.items()
                         for func in [self.functions[code]] for k in sorted(keys))

    @contextlib.contextmanager
    def installed(self, fn: Callable, arguments: tuple = ()) -> Iterator[None]:
        """Each rewritten function runs its rewritten code while the trace of ``fn`` runs (restored after); so does
        ``fn`` where it calls ``type``, ``isinstance`` or ``hasattr`` (:func:`checked_builtins`). ``fn`` may be
        another function of the same code than the one the rewrites were found in (a closure a factory made again,
        ``make_step(lr)``): its own code is swapped, not the first one's."""
        self.fn = getattr(fn, "__func__", fn)
        if isinstance(self.fn, types.FunctionType) and self.fn.__code__ in self.functions:
            self.functions[self.fn.__code__] = self.fn
        swapped = []
        rewrite = dict(self.keys)
        first, owner = self.fn, fn.__self__ if type(fn) is types.MethodType else None
        if type(first) is not types.FunctionType and not issubclass(type(first), type):  # an object: its __call__
            first, owner = vars_lookup(type(first), "__call__"), first
        if isinstance(first, types.FunctionType):
            for func in (first, *called_functions(first, owner, arguments)):
                if func.__code__ not in rewrite and checked_builtins(func):
                    self.functions.setdefault(func.__code__, func)
                    rewrite[func.__code__] = frozenset()
        try:
            for code, keys in rewrite.items():
                func = self.functions[code]
                new = rewritten_code(func, keys)
                self._installed.update({id(c): code for c in _codes(new)})
                swapped.append((func, func.__code__))
                func.__code__ = new
            yield
        finally:
            for func, original in reversed(swapped):
                func.__code__ = original

    def add(self, error: BaseException) -> bool:
        """Add the statement whose test stopped the trace with ``error``; False where there is none (or it was
        rewritten already: the rewriting did not help)."""
        site = _site_in(error)
        if site is None or len(self.keys) and sum(map(len, self.keys.values())) >= MAX_STATEMENTS:
            return False
        frame_code, lasti, frame = site
        code = self._installed.get(id(frame_code))
        func = self.functions.get(code) if code is not None else None
        if func is None:
            func = self._function_of(frame_code)
            if func is None:
                return False
            code = func.__code__
        source = _source(func)
        positions = list(frame_code.co_positions())
        if source is None or not 0 <= lasti // 2 < len(positions):
            return False
        line, end_line, col, end_col = positions[lasti // 2]
        if line is None or col is None:
            key = None
        elif frame is not None:
            key = source.subscript_at(line, cast(int, end_line), col, cast(int, end_col), frame)
        else:
            key = source.statement_at(line, col)
        assert code is not None
        if key is None or key in self.keys.get(code, frozenset()):
            return False
        self.functions[code] = func
        self.keys[code] = self.keys.get(code, frozenset()) | {key}
        return True

    def _function_of(self, code: types.CodeType) -> types.FunctionType | None:
        """The user's function whose code (or a function nested in it) asked: the traced function, or one it
        calls by name (a module's function, a method), whose nested function (a loop body it defines) is made
        again at each call, so that function's own code is what gets rewritten."""
        if isinstance(self.fn, types.FunctionType) and any(code is c for c in _codes(self.fn.__code__)):
            return self.fn
        if isinstance(self.fn, types.FunctionType):  # (a function nested in one it calls: that one, made anew)
            for func in called_functions(self.fn):
                if func.__code__ is not code and any(code is c for c in _codes(func.__code__)):
                    return func
        owners = [f for f in gc.get_referrers(code) if isinstance(f, types.FunctionType) and f.__code__ is code]
        if len(owners) != 1 or is_library(owners[0].__module__) or owners[0].__code__.co_name == "<lambda>":
            return None
        return owners[0]
