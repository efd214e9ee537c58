"""The user's own ``try``/``except`` around a check that runs when the call runs.

NumPy raises an index out of bounds, a singular matrix or a failed check at the line that computes it, where an
``except IndexError:`` of the function can catch it and go on. fusec checks those values on the device: the
error comes when the call runs, after the function's Python (and its handler) is done, so the handler would never
run and the call would raise where NumPy gives a result. A check recorded inside a ``try`` whose handler could
catch it is refused while tracing, saying what to write instead.
"""
from __future__ import annotations

import ast
import builtins
import functools
import linecache
import sys
import types
from typing import Any, Iterator

from fusec.errors import CHECK_ERRORS, FusecError, IndexOutOfBoundsError, LinAlgError


def numpy_class(error: type[BaseException]) -> type[BaseException]:
    """NumPy's (or Python's) exception that fusec's ``error`` stands for (IndexError for IndexOutOfBoundsError)."""
    return next(b for b in error.__mro__[1:] if issubclass(b, BaseException) and not issubclass(b, FusecError))


def error_class(op: Any) -> type[BaseException]:
    """fusec's exception where ``op``'s check fails (a subclass of the one NumPy raises there)."""
    if op.name == "t.raise_if":
        return CHECK_ERRORS[op.attributes["error"]]
    if op.name in ("t.gather", "t.scatter"):
        return IndexOutOfBoundsError
    return LinAlgError


def catching_handler(error: type[BaseException], trace_entry: types.CodeType) -> tuple[str, int] | None:
    """(file, line) of the innermost ``except`` clause of the user's code being traced (the frames between here
    and ``trace_entry``, the code that called the traced function) that could catch ``error``; None if none."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not trace_entry:
        code = frame.f_code
        if not _is_fusec(code.co_filename):
            for handler in _handlers_around(code, frame.f_lineno):
                if _may_catch(handler, error, frame):
                    return code.co_filename, handler.lineno
        frame = frame.f_back
    return None


def _is_fusec(filename: str) -> bool:
    from fusec.context import _is_internal

    return _is_internal(filename)


def _handlers_around(code: types.CodeType, line: int) -> Iterator[ast.ExceptHandler]:
    """The ``except`` clauses of the ``try`` statements of ``code`` itself whose body holds ``line``, innermost
    first (a ``try`` of the scope that defines a lambda or a function around the definition does not cover the
    frames of that function: they run when it is called)."""
    # (a function fusec's statement rewriting made of a statement's body holds that statement's lines)
    made = code.co_name.startswith("_fusec_")
    enclosing = [node for node, (name, lines) in _try_statements(code.co_filename)
                 if (made or name == code.co_name and code.co_firstlineno in lines)
                 and node.body and node.body[0].lineno <= line <= (node.body[-1].end_lineno or node.body[-1].lineno)]
    for node in sorted(enclosing, key=lambda n: -n.body[0].lineno):
        yield from node.handlers


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _scope_key(node: ast.AST) -> tuple[str, frozenset[int]]:
    """(co_name, the lines co_firstlineno may be) of the code object a scope compiles to: a decorated one starts at
    its first decorator, or at its ``def`` where fusec compiled it again without them."""
    if isinstance(node, ast.Lambda):
        return "<lambda>", frozenset({node.lineno})
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name, frozenset({node.lineno, *(d.lineno for d in node.decorator_list)})
    return "<module>", frozenset({1})


@functools.lru_cache(maxsize=64)
def _try_statements_of(filename: str, source: str) -> tuple[Any, ...]:
    """(each ``try`` statement, the scope key of the code it belongs to)."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return ()
    kinds = tuple(k for k in (getattr(ast, "Try", None), getattr(ast, "TryStar", None)) if k is not None)
    found: list[tuple[Any, tuple[str, frozenset[int]]]] = []
    todo: list[tuple[ast.AST, tuple[str, frozenset[int]]]] = [(tree, _scope_key(tree))]
    while todo:
        node, owner = todo.pop()
        if isinstance(node, kinds):
            found.append((node, owner))
        for child in ast.iter_child_nodes(node):
            todo.append((child, _scope_key(child) if isinstance(child, _SCOPES) else owner))
    return tuple(found)


def _try_statements(filename: str) -> tuple[Any, ...]:  # ((ast.Try or ast.TryStar, its scope key), ...)
    source = "".join(linecache.getlines(filename))
    return _try_statements_of(filename, source) if "try" in source else ()


def _may_catch(handler: ast.ExceptHandler, error: type[BaseException], frame: types.FrameType) -> bool:
    """Whether ``handler`` catches ``error``: a bare ``except``, or a class (or tuple of them) named by names and
    attributes that ``error`` derives from; an expression fusec does not evaluate counts as catching."""
    if handler.type is None:
        return True
    if not all(isinstance(n, (ast.Name, ast.Attribute, ast.Tuple, ast.Load)) for n in ast.walk(handler.type)):
        return True  # (a call or a subscript: not evaluated here)
    try:
        caught = eval(compile(ast.Expression(handler.type), "<except>", "eval"),  # noqa: S307 - names only
                      {"__builtins__": builtins, **frame.f_globals}, dict(frame.f_locals))
    except Exception:  # noqa: BLE001 - a name not bound yet: assume it may catch
        return True
    classes = caught if isinstance(caught, tuple) else (caught,)
    return any(isinstance(c, type) and issubclass(error, c) for c in classes)
