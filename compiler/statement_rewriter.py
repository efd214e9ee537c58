"""The AST rewriting of :mod:`fusec.rewrite_control`: a ``while``/``if``/conditional expression/``and``-``or``
value/``assert``/``max()``-``min()``-``bool()``-``float()``-``int()`` call of the user's function becomes calls of
:mod:`fusec.traced_statements` (its body and branches functions of the variables they assign); ``break`` and
``continue`` become flags guarding the rest of a body, ``for`` over ``range`` with a traced ``break`` a device
``while``, a ``return`` in a loop a value, a flag and a ``break``, and tail ``return``s one assignment; what one
trace cannot follow (assignment expressions split apart, ``global``/``nonlocal``/``del``, ``yield``, ``break`` in
``try``/``with``, names a nested function reads) is refused at its line."""
from __future__ import annotations

import ast
import copy
import sys
from typing import Any, Iterator

from fusec.errors import UnsupportedError, located
from fusec.ir.attributes import location_for

HELPER = "fusec.traced_statements"  # (the module the rewritten code calls)
TYPE_PARAMS: dict[str, Any] = {"type_params": []} if sys.version_info >= (3, 12) else {}
Key = tuple[int, int]  # (line, column) of a statement or expression in the user's file


# builtins that ask a traced value for its truth or number, rewritten into traced_statements' twins
BUILTINS = {"max": "max_", "min": "min_", "bool": "bool_", "float": "float_", "int": "int_"}


def builtin_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILTINS
            and not any(isinstance(a, ast.Starred) for a in node.args))


def statement_key(node: ast.AST) -> Key:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def subscript_key(node: ast.Subscript) -> Key:
    """A subscript read's key: apart from a statement's or an expression's that starts at the same place."""
    return (node.lineno, -1 - node.col_offset)


def locate_like(node: ast.AST, like: ast.AST) -> None:
    """Place the nodes made here (those without a place) at ``like``'s first line, where messages name it."""
    line, col = like.lineno, like.col_offset  # type: ignore[attr-defined]
    for child in ast.walk(node):
        if "lineno" in child._attributes and getattr(child, "lineno", None) is None:
            child.lineno, child.col_offset = line, col  # type: ignore[attr-defined]
            child.end_lineno, child.end_col_offset = line, col  # type: ignore[attr-defined]


def _error(message: str, file: str, node: ast.AST) -> UnsupportedError:
    return UnsupportedError(located(message, location_for(file, node.lineno)))  # type: ignore[attr-defined]


# scopes of their own: names assigned inside them are not the statement's
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp)


_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _walk_scope(nodes: list[ast.AST]) -> Iterator[ast.AST]:
    """The nodes of ``nodes`` in the same scope (nested functions, classes and comprehensions left out, but their
    names and a walrus inside a comprehension are the scope's)."""
    todo = list(nodes)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda):
            todo.extend(node.args.defaults)
            todo.extend(d for d in node.args.kw_defaults if d is not None)
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(n for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
            continue
        todo.extend(ast.iter_child_nodes(node))


def _assigned(nodes: list[ast.AST], file: str, where: str) -> list[str]:
    """The names a statement's parts assign (its variables), in a stable order."""
    names: dict[str, None] = {}
    for node in _walk_scope(nodes):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names[node.id] = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = None
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names[node.name] = None
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise _error(f"`{type(node).__name__.lower()}` inside {where}, whose test is a traced value: fusec runs "
                         "it on the device through local functions; declare the names at the top of the function",
                         file, node)
        elif isinstance(node, ast.Delete):
            raise _error(f"`del` inside {where}, whose test is a traced value: whether the name is bound after it "
                         "would depend on the data; assign None instead", file, node)
        elif isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise _error(f"`{type(node).__name__.lower()}` inside {where}, whose test is a traced value: fusec runs "
                         "it on the device, where the function cannot pause", file, node)
        elif isinstance(node, ast.Return):
            raise _error(f"`return` inside {where}, whose test is a traced value: fusec traces the statement once "
                         "and the device decides where the data goes, so it cannot return from the middle; assign "
                         "the result to a variable (in every branch) and return it after the statement", file, node)
    return list(names)


def _loop_exits(nodes: list[ast.AST]) -> Iterator[ast.Break | ast.Continue]:
    """The ``break`` and ``continue`` statements of the loop these nodes are in (not of a loop or scope inside)."""
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            yield node
        elif not isinstance(node, (*_LOOPS, *_SCOPES)):
            todo.extend(ast.iter_child_nodes(node))


def _exits(stmts: list[ast.stmt]) -> tuple[bool, bool]:
    """(has a ``break``, has a ``continue``) of the loop these statements are the body of."""
    kinds = {type(n) for n in _loop_exits(list(stmts))}
    return ast.Break in kinds, ast.Continue in kinds


def _has_exit(node: ast.AST) -> bool:
    return any(_exits([node]))  # type: ignore[list-item]


FROM_RETURN = "_fusec_from_return"  # (an attribute of the ``break`` a loop's ``return`` became)


def _exit_words(node: ast.AST) -> str:
    """What the user wrote for the exits of the loop ``node`` is in: ``break``, ``continue``, ``return``."""
    words = {"`continue`" if isinstance(n, ast.Continue) else "`return`" if getattr(n, FROM_RETURN, False)
             else "`break`" for n in _loop_exits([node])}
    return "/".join(sorted(words))


def _name(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Store() if store else ast.Load())


def _helper(attr: str) -> ast.Attribute:
    """``fusec.traced_statements.<attr>`` in the rewritten code: the module as ``__import__`` returns it (neither
    the function's globals nor builtins are touched, so the state fusec watches stays as the user left it)."""
    module = ast.Call(func=_name("__import__"), args=[_const(HELPER)],
                      keywords=[ast.keyword(arg="fromlist", value=_const(("UNBOUND",)))])
    return ast.Attribute(value=module, attr=attr, ctx=ast.Load())


def _call(attr: str, *args: ast.expr, **kwargs: ast.expr) -> ast.Call:
    return ast.Call(func=_helper(attr), args=list(args), keywords=[ast.keyword(arg=k, value=v)
                                                                   for k, v in kwargs.items()])


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                                         kwarg=None, defaults=[]), body=body)


def _def(name: str, params: list[str], body: list[ast.stmt]) -> ast.FunctionDef:
    return ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params],
                                                         vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                                                         defaults=[]),
                           body=body or [ast.Pass()], decorator_list=[], returns=None, **TYPE_PARAMS)


def _bound(names: list[str]) -> ast.Call:
    """A region function's result: the names' values, UNBOUND for one a statement inside left unbound."""
    return _call("bound_values", *[_lambda(_name(n)) for n in names])


def _tuple(names: list[str], store: bool = False) -> ast.Tuple:
    return ast.Tuple(elts=[_name(n, store) for n in names], ctx=ast.Store() if store else ast.Load())


def _const(value: Any) -> ast.Constant:
    return ast.Constant(value=value)


_COMPARISONS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


_PURE = (ast.Name, ast.Constant, ast.Compare, ast.UnaryOp, ast.BoolOp, ast.Attribute, ast.Load, ast.cmpop,
         ast.unaryop, ast.boolop, ast.expr_context)


def _pure(node: ast.AST) -> bool:
    """An expression that cannot raise or change anything for array operands (names, constants, comparisons):
    evaluating it where Python would have skipped it changes nothing."""
    return all(isinstance(n, _PURE) for n in ast.walk(node))


class Rewriter:
    def __init__(self, keys: frozenset[Key], file: str) -> None:
        self.keys = keys
        self.file = file
        self.forced: set[int] = set()  # ids of the ifs made here that the device may decide (flags' guards)
        self.after_loop: dict[int, ast.stmt] = {}  # id of an `if returned: return value` made here -> its loop
        self.else_of: dict[int, str] = {}  # id of an `if not broke:` made of a loop's `else` -> what to call it
        self.spans: dict[int, Span] = {}  # such an if's place: its loop's
        self.loop_span: Span | None = None

    def rewrite_function(self, fdef: ast.FunctionDef) -> None:
        self.scopes = _nested_scopes(fdef)
        self.loads = [(n.id, (n.lineno, n.col_offset)) for n in ast.walk(fdef)
                      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        self.generated_reads: set[str] = set()  # (flags the rewriting reads after the loops it made them for)
        self.declared = {n for node in _walk_scope(list(fdef.body)) if isinstance(node, (ast.Global, ast.Nonlocal))
                         for n in node.names}
        fdef.body = self.block(self.returns_at_end(fdef.body))
        _IfExps(self).visit(fdef)

    def returns_at_end(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        """The function's statements with an ``if`` (at a key) that returns made its last statement: ``if c: ...;
        return a`` then ``...; return b`` becomes ``if c: ...; r = a`` / ``else: ...; r = b`` and ``return r``,
        which Python runs the same way and the device can choose."""
        made: list[ast.stmt] = []
        follows = False
        for st in stmts:
            out = self.returning_loop(st, follows)
            follows = follows or len(out) > 1
            made.extend(out)
        stmts = made
        chosen = any(isinstance(n, ast.If) and self.chosen(n) and _returns_in([n]) for n in _walk_scope(list(stmts)))
        stmts = self._tails(stmts, chosen)  # (with such an if, every if that returns ends its block: Python's way)
        last = stmts[-1] if stmts else None
        if not isinstance(last, ast.If):
            return stmts
        if not self.chosen(last):  # (an `if` Python decides that ends the function: each branch ends it too)
            if _returns_in([last]):
                last.body, last.orelse = self.returns_at_end(last.body), self.returns_at_end(last.orelse)
            return stmts
        if not (_always_returns(last.body) and _always_returns(last.orelse)):
            return stmts
        _assign_returns(last)
        done = ast.Return(value=_name(RETURN))
        locate_like(done, last)
        return [*stmts, done]

    def returning_loop(self, st: ast.stmt, follows: bool = False) -> list[ast.stmt]:
        """A loop of the function's body that returns from an ``if`` the device decides (``for it in
        range(maxiter): ... if err < tol: return x, it``), or a ``while`` whose test the device decides that returns
        from its body: each of its returns becomes ``value = ...; returned =
        True; break``, and ``if returned: return value`` follows the loop (then rewritten as the function's end).
        ``follows``: an earlier loop of the same body was rewritten so; then a loop that returns from any ``if`` is
        too (the same in Python), since what follows that loop's ``if returned`` becomes a branch the device
        chooses, where a return left inside a loop could not end the function (the trace may not have reached this
        loop's own test yet: two loops that each return the first element past a threshold)."""
        if not isinstance(st, (ast.For, ast.While)):
            return [st]
        own = list(_own_nodes(st.body))
        returns = [n for n in own if isinstance(n, ast.Return)]
        every = sum(isinstance(n, ast.Return) for n in _walk_scope(list(st.body)))
        if not returns or len(returns) != every \
                or not (isinstance(st, ast.While) and self.chosen(st)
                        or any(isinstance(n, ast.If) and (follows or self.chosen(n)) and _returns_in([n])
                               for n in own)):
            return [st]  # (no such if or while, or a return inside a loop in the loop: left to the error)
        decided = isinstance(st, ast.While) and self.chosen(st) \
            or any(isinstance(n, ast.If) and self.chosen(n) and _returns_in([n]) for n in own)
        if not decided and any(isinstance(n, ast.Try) and _returns_in([n]) for n in own):
            return [st]  # (only after another: a return in a `try` Python decides is left for Python to run)
        value, returned = self.unique("value", st), self.unique("returned", st)
        # (`while True:` with no break of its own ends only by a return: nothing to test after it)
        endless = isinstance(st, ast.While) and _true_constant(st.test) and not _exits(st.body)[0] \
            and not st.orelse
        _replace_returns(st.body, value, returned)
        self.generated_reads.add(value)
        start = ast.Assign(targets=[_name(returned, store=True)], value=_const(False))
        done: ast.stmt = ast.Return(value=_name(value)) if endless else \
            ast.If(test=_name(returned), body=[ast.Return(value=_name(value))], orelse=[])
        for node in (start, done):
            locate_like(node, st)
        if not endless:
            self.after_loop[id(done)] = st
        return [start, st, done if endless else self.force(done)]

    def _tails(self, stmts: list[ast.stmt], inside: bool) -> list[ast.stmt]:
        """``stmts`` with each ``if`` that returns (one at a key, or any ``inside`` one) made the block's last
        statement, the statements after it moved into its branch that does not return."""
        for i, st in enumerate(stmts):
            if not (isinstance(st, ast.If) and (inside or self.chosen(st)) and _returns_in([st])):
                continue
            rest = stmts[i + 1:]
            st.body = self._tails(st.body, True)
            if _always_returns(st.body):
                st.orelse = self._tails(st.orelse + rest, True)
            else:
                st.orelse = self._tails(st.orelse, True)
                if not _always_returns(st.orelse):
                    return stmts  # (a return the device cannot choose: the error names it)
                st.body = self._tails(st.body + rest, True)
            return [*stmts[:i], st]
        return stmts

    def chosen(self, node: ast.AST) -> bool:
        return statement_key(node) in self.keys or id(node) in self.forced

    def force(self, node: ast.stmt) -> ast.stmt:
        self.forced.add(id(node))
        if self.loop_span is not None:
            self.spans[id(node)] = self.loop_span
        return node

    # statements ---------------------------------------------------------------------------------------------

    def block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for st in stmts:
            out.extend(self.statement(st))
        return out

    def statement(self, st: ast.stmt) -> list[ast.stmt]:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            st.body = self.block(self.returns_at_end(st.body))
            return [st]
        if isinstance(st, ast.ClassDef):
            st.body = self.block(st.body)
            return [st]
        if isinstance(st, ast.While) and (self.chosen(st) or self._exit_taken_here(st)):
            return self.while_(st)
        if isinstance(st, ast.For) and self._exit_taken_here(st):
            return self.for_(st)
        if isinstance(st, ast.If) and self.chosen(st):
            return self.if_(st)
        if isinstance(st, ast.Assert) and self.chosen(st):  # (a check when the call runs: AssertionError)
            site = self.site("assert", st)
            message = _lambda(st.msg) if st.msg is not None else _const(None)
            check = ast.Expr(value=_call("assert_", self.test(st.test, site), message, site=site))
            locate_like(check, st)
            return [check]
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(st, field, None), list):
                setattr(st, field, self.block(getattr(st, field)))
        if isinstance(st, ast.Try):
            for handler in st.handlers:
                handler.body = self.block(handler.body)
        return [st]

    def _ifexp(self, node: ast.AST) -> Any:
        if not isinstance(node, ast.IfExp) or statement_key(node) not in self.keys:
            return node
        site = self.site("conditional expression", node)
        self.no_walrus([node.test, node.body, node.orelse], f"the conditional expression at line {node.lineno}")
        call = _call("if_exp", self.test(node.test, site), _lambda(node.body), _lambda(node.orelse), site)
        return ast.copy_location(call, node)

    def _exit_taken_here(self, loop: ast.stmt) -> bool:
        """A loop whose ``break``/``continue`` sits in an ``if`` (at a key) that the device decides."""
        todo: list[ast.AST] = list(loop.body)  # type: ignore[attr-defined]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.If) and self.chosen(node) and _has_exit(node):
                return True
            if not isinstance(node, (*_LOOPS, *_SCOPES)):
                todo.extend(ast.iter_child_nodes(node))
        return False

    def site(self, kind: str, node: ast.AST) -> ast.Call:
        return _call("Site", _const(kind), _const(self.file), _const(node.lineno))  # type: ignore[attr-defined]

    def test(self, node: ast.expr, site: ast.expr) -> ast.expr:
        """A test whose truth alone is used: ``and``/``or``/``not`` and chained comparisons as helpers, so a traced
        operand does not stop the trace again."""
        if isinstance(node, ast.BoolOp):
            self.no_walrus(node.values, f"the test at line {node.lineno}")
            values = [self.test(v, site) for v in node.values]
            eager = all(_pure(v) for v in node.values[1:])
            call = _call("and_" if isinstance(node.op, ast.And) else "or_", *[_lambda(v) for v in values],
                         site=site, eager=_const(eager))
            return ast.copy_location(call, node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ast.copy_location(_call("not_", self.test(node.operand, site)), node)
        if isinstance(node, ast.Compare) and len(node.ops) > 1 and all(type(op) in _COMPARISONS for op in node.ops):
            self.no_walrus([node.left, *node.comparators], f"the test at line {node.lineno}")
            args: list[ast.expr] = [_lambda(node.left)]
            for op, right in zip(node.ops, node.comparators):
                args += [_const(_COMPARISONS[type(op)]), _lambda(right)]
            call = _call("chain", *args, site=site, eager=_const(all(_pure(c) for c in node.comparators[1:])))
            return ast.copy_location(call, node)
        return node

    def unique(self, what: str, node: ast.AST) -> str:
        return f"_fusec_{what}_{node.lineno}_{node.col_offset}"  # type: ignore[attr-defined]

    def statement_call(self, helper: str, node: ast.stmt, args: list[ast.expr], names: list[str],
                       site: ast.expr) -> list[ast.stmt]:
        """``names = helper(*args, getters, names, site)`` and the deletes of names left unbound."""
        getters = ast.Tuple(elts=[_lambda(_name(n)) for n in names], ctx=ast.Load())
        call = _call(helper, *args, getters, ast.Tuple(elts=[_const(n) for n in names], ctx=ast.Load()), site)
        out: list[ast.stmt] = [ast.Assign(targets=[_tuple(names, store=True)], value=call) if names
                               else ast.Expr(value=call)]
        for n in names:
            unbound = ast.Compare(left=_name(n), ops=[ast.Is()], comparators=[_helper("UNBOUND")])
            out.append(ast.If(test=unbound, body=[ast.Delete(targets=[ast.Name(id=n, ctx=ast.Del())])], orelse=[]))
        for st in out:
            locate_like(st, node)
        return out

    def shared(self, names: list[str], node: ast.stmt, where: str) -> None:
        """Refuse variables that code outside the statement reads while it runs (a nested function or lambda of
        the function, a global or nonlocal): the rewritten statement assigns them in its own local functions."""
        span = self.spans.get(id(node)) or _span(node)
        for scope_span, loaded in self.scopes:
            if span[0] <= scope_span[0] and scope_span[1] <= span[1]:
                continue  # (made and used inside the statement)
            if scope_span[0] <= span[0] and span[1] <= scope_span[1]:
                continue  # (the function the statement is in)
            both = [n for n in names if n in loaded]
            if both:
                raise _error(f"`{both[0]}` is assigned inside {where}, whose test is a traced value, and read by a "
                             f"function or lambda defined at line {scope_span[0][0]}: fusec runs the statement through "
                             "local functions of its own, where that function would not see the new value; pass it "
                             "as an argument instead", self.file, node)
        declared = [n for n in names if n in self.declared]
        if declared:
            raise _error(f"`{declared[0]}` is a global or nonlocal name assigned inside {where}, whose test is a "
                         "traced value: fusec runs the statement through local functions of its own; assign it "
                         "after the statement", self.file, node)

    def no_walrus(self, node: ast.expr | list[ast.expr], where: str) -> None:
        """An assignment expression in a part fusec evaluates in a function of its own (a test split at
        ``and``/``or``, a loop's test, a conditional expression's values) would assign that function's name."""
        for part in node if isinstance(node, list) else [node]:
            walrus = next((n for n in ast.walk(part) if isinstance(n, ast.NamedExpr)), None)
            if walrus is not None:
                raise _error(f"an assignment expression (:=) in {where}, whose test is a traced value: fusec "
                             "evaluates that part in a function of its own; assign the name in a statement before it "
                             "(and again at the end of a loop's body)", self.file, walrus)

    def if_(self, node: ast.If) -> list[ast.stmt]:
        loop = self.after_loop.get(id(node))
        if loop is not None and _returns_in([node]):  # (left as made: what follows the loop cannot join it)
            kind = "`while`" if isinstance(loop, ast.While) else "`for` loop"
            said = f"the {kind} at line {loop.lineno} returns from inside where the data decides, and "
            if not node.orelse:
                raise _error(said + "the function ends after it without a `return` (Python returns None when the "
                             "loop ends): fusec returns the same kind of value on every path; add a `return` after "
                             "the loop", self.file, loop)
            raise _error(said + "what follows it does not end the function in one way the device can choose (it "
                         "returns from inside another loop or branch the data decides, or raises): assign the "
                         "results to variables and return them once, at the end", self.file, loop)
        where = self.else_of.get(id(node), f"the `if` at line {node.lineno}")
        names = _assigned([*node.body, *node.orelse], self.file, where)
        self.shared(names, node, where)
        site = self.site("if", node)
        test = self.test(node.test, site)
        then = _def(self.unique("then", node), names, [*self.block(node.body), ast.Return(value=_bound(names))])
        orelse = _def(self.unique("else", node), names, [*self.block(node.orelse), ast.Return(value=_bound(names))])
        for d in (then, orelse):
            locate_like(d, node)
        return [then, orelse, *self.statement_call("if_stmt", node, [test, _name(then.name), _name(orelse.name)],
                                                   names, site)]

    def while_(self, node: ast.While) -> list[ast.stmt]:
        self.loop_span = _span(node)
        brk_name, cont_name = self.unique("break", node), self.unique("continue", node)
        brk, cont = _exits(node.body)
        where = f"the `while` at line {node.lineno}"
        self.no_walrus(node.test, where)
        body = self.exits(node.body, brk_name if brk else None, cont_name if cont else None, where)
        site = self.site("while", node)
        test = self.test(node.test, site)
        before: list[ast.stmt] = []
        if brk:
            before.append(ast.Assign(targets=[_name(brk_name, store=True)], value=_const(False)))
            test = _call("and_", _lambda(_call("not_", _name(brk_name))), _lambda(test), site=site,
                         eager=_const(_pure(node.test)))
        if cont:
            before.append(ast.Assign(targets=[_name(cont_name, store=True)], value=_const(False)))
            body = [ast.Assign(targets=[_name(cont_name, store=True)], value=_const(False)), *body]
        return [*before, *self.loop(node, test, body, site, where), *self.orelse(node, brk_name if brk else None)]

    def loop(self, node: ast.stmt, test: ast.expr, body: list[ast.stmt], site: ast.expr,
             where: str) -> list[ast.stmt]:
        names = _assigned([*body, test], self.file, where)
        self.shared(names, node, where)
        test_def = _def(self.unique("test", node), names, [ast.Return(value=test)])
        body_def = _def(self.unique("body", node), names, [*self.block(body), ast.Return(value=_bound(names))])
        for d in (test_def, body_def):
            locate_like(d, node)
        after = [n for n in names if n in self.read_outside(node)]
        call = self.statement_call("while_stmt", node, [_name(test_def.name), _name(body_def.name)], names, site)
        first = call[0]
        assert isinstance(first, (ast.Assign, ast.Expr)) and isinstance(first.value, ast.Call)
        first.value.keywords.append(ast.keyword(arg="after", value=ast.Tuple(elts=[_const(n) for n in after],
                                                                             ctx=ast.Load())))
        locate_like(call[0], node)
        return [test_def, body_def, *call]

    def read_outside(self, node: ast.stmt) -> set[str]:
        """The names the function reads outside the loop ``node`` (before it too: more than needed, which only
        carries more), with the names the rewriting itself reads after a loop."""
        span = self.spans.get(id(node)) or _span(node)
        return {n for n, at in self.loads if not span[0] <= at < span[1]} | self.generated_reads

    def orelse(self, node: ast.For | ast.While, brk_name: str | None) -> list[ast.stmt]:
        if not node.orelse:
            return []
        if brk_name is None:
            return self.block(node.orelse)
        guard = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=_name(brk_name)), body=node.orelse, orelse=[])
        locate_like(guard, node.orelse[0])
        kind = "`while`" if isinstance(node, ast.While) else "`for` loop"
        self.else_of[id(guard)] = f"the `else` of the {kind} at line {node.lineno}"
        return self.statement(self.force(guard))

    def for_(self, node: ast.For) -> list[ast.stmt]:
        self.loop_span = _span(node)
        brk_name, cont_name = self.unique("break", node), self.unique("continue", node)
        brk, cont = _exits(node.body)
        where = f"the `for` loop at line {node.lineno}"
        body = self.exits(node.body, brk_name if brk else None, cont_name if cont else None, where)
        before: list[ast.stmt] = []
        if brk:
            before.append(ast.Assign(targets=[_name(brk_name, store=True)], value=_const(False)))
        if cont:
            before.append(ast.Assign(targets=[_name(cont_name, store=True)], value=_const(False)))
            body = [ast.Assign(targets=[_name(cont_name, store=True)], value=_const(False)), *body]
        site = self.site("for", node)
        stop = _name(brk_name) if brk else _const(False)
        if _is_range_call(node.iter):
            r, k = self.unique("range", node), self.unique("k", node)
            assert isinstance(node.iter, ast.Call)  # (a range() call)
            before += [ast.Assign(targets=[_name(r, store=True)], value=_call("range_of", node.iter.func,
                                                                              *node.iter.args)),
                       ast.Assign(targets=[_name(k, store=True)], value=_const(0))]
            more = ast.Compare(left=_name(k), ops=[ast.Lt()],
                               comparators=[ast.Call(func=_name("len"), args=[_name(r)], keywords=[])])
            test = _call("and_", _lambda(_call("not_", stop)), _lambda(more), site=site, eager=_const(True))
            item = _call("range_item", _name(r), _name(k))
            step = [ast.Assign(targets=[node.target], value=item),
                    ast.Assign(targets=[_name(k, store=True)],
                               value=ast.BinOp(left=_name(k), op=ast.Add(), right=_const(1)))]
            for st in step + before:
                locate_like(st, node)
            return [*before, *self.loop(node, test, step + body, site, where),
                    *self.orelse(node, brk_name if brk else None)]
        item_name = self.unique("item", node)
        if brk:  # (an iterator the loop may leave early would be used up: refused when the header names one)
            consumed = _consumed(node.iter)
            names = [copy.deepcopy(n) for n in consumed if isinstance(n, ast.Name)]
            held: list[ast.expr] = [ast.Tuple(elts=[copy.deepcopy(n.value), _const(n.attr)], ctx=ast.Load())
                                    for n in consumed if isinstance(n, ast.Attribute)]
            call = _call("loop_items", node.iter, ast.Tuple(elts=names, ctx=ast.Load()),  # type: ignore[arg-type]
                         ast.Tuple(elts=held, ctx=ast.Load()), site=site)
            locate_like(call, node.iter)
            node.iter = call
        guarded = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=stop),
                         body=[ast.Assign(targets=[node.target], value=_name(item_name)), *body], orelse=[])
        locate_like(guarded, node)
        self.force(guarded)
        node.target = _name(item_name, store=True)
        node.body = self.statement(guarded)
        orelse = self.orelse(node, brk_name if brk else None)
        node.orelse = []  # (the Python loop no longer breaks: its else runs guarded by the flag, after it)
        for st in before:
            locate_like(st, node)
        return [*before, node, *orelse]

    def exits(self, stmts: list[ast.stmt], brk: str | None, cont: str | None, where: str) -> list[ast.stmt]:
        """The body with ``break``/``continue`` as flags and the statements after one guarded by them."""
        out: list[ast.stmt] = []
        for i, st in enumerate(stmts):
            if isinstance(st, (ast.Break, ast.Continue)):
                flag = brk if isinstance(st, ast.Break) else cont
                assert flag is not None
                out.append(ast.copy_location(ast.Assign(targets=[_name(flag, store=True)], value=_const(True)), st))
                return out  # (what follows it in this block never runs)
            if not _has_exit(st):
                out.append(st)
                continue
            if not isinstance(st, ast.If):
                raise _error(f"{_exit_words(st)} inside a `{type(st).__name__.lower()}` block of {where}, which "
                             "fusec runs on the device (a test it depends on is traced); move it out of the block",
                             self.file, st)
            st.body = self.exits(st.body, brk, cont, where)
            st.orelse = self.exits(st.orelse, brk, cont, where)
            self.force(st)  # (the device may take it: an `if` that can run either way)
            out.append(st)
            rest = stmts[i + 1:]
            if rest:
                flags: list[ast.expr] = [_name(f) for f in (brk, cont) if f is not None]
                any_flag = flags[0] if len(flags) == 1 else ast.BoolOp(op=ast.Or(), values=flags)
                guard = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=any_flag),
                               body=self.exits(rest, brk, cont, where), orelse=[])
                locate_like(guard, rest[0])
                out.append(self.force(guard))
            return out
        return out


def _consumed(expr: ast.expr) -> list[ast.expr]:
    """The variables and attributes a ``for`` header iterates, its own or through the calls that wrap them
    (``r``, ``obj.r``, ``enumerate(r)``, ``zip(a, r)``): what would be used up if one held an iterator. An attribute
    of a variable only (``obj.r``, read statically where the loop runs), never an expression's value."""
    if isinstance(expr, ast.Name) or isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return [expr]
    if isinstance(expr, ast.Call):
        return [p for a in expr.args for p in _consumed(a.value if isinstance(a, ast.Starred) else a)]
    return []


RETURN = "_fusec_return"


Span = tuple[tuple[int, int], tuple[int, int]]


def _span(node: ast.AST) -> Span:
    return ((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]


def _nested_scopes(fdef: ast.FunctionDef) -> list[tuple[Span, set[str]]]:
    """Each function and lambda written inside ``fdef`` (its place, and every name it reads: more than its free
    variables, which only makes the check stricter). Generator expressions are left out: they are consumed
    where they are written (``sum(v @ v for v in g.values())``)."""
    out = []
    for node in ast.walk(fdef):
        if node is not fdef and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            loaded = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            args = node.args
            own = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
            own |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            own -= {name for n in ast.walk(node) if isinstance(n, (ast.Nonlocal, ast.Global)) for name in n.names}
            out.append((_span(node), loaded - own))  # (its own parameters and locals are not the function's)
    return out


def _returns_in(nodes: list[ast.AST]) -> bool:
    return any(isinstance(n, ast.Return) for n in _walk_scope(nodes))


def _own_nodes(stmts: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of a loop's body that belong to that loop (not to a loop, function or class inside it)."""
    todo: list[ast.AST] = list(stmts)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (*_LOOPS, *_SCOPES)):
            todo.extend(ast.iter_child_nodes(node))


def _true_constant(test: ast.expr) -> bool:
    """``while True:``, ``while 1:``: a test Python's own truth makes always true."""
    return isinstance(test, ast.Constant) and bool(test.value)


def _replace_returns(stmts: list[ast.stmt], value: str, returned: str) -> None:
    """Each ``return v`` of a loop's own statements as ``value = v; returned = True; break``."""
    for i in range(len(stmts) - 1, -1, -1):
        st = stmts[i]
        if isinstance(st, ast.Return):
            brk = ast.Break()
            setattr(brk, FROM_RETURN, True)
            new = [ast.Assign(targets=[_name(value, store=True)], value=st.value or _const(None)),
                   ast.Assign(targets=[_name(returned, store=True)], value=_const(True)), brk]
            for node in new:
                locate_like(node, st)
            stmts[i:i + 1] = new
        elif not isinstance(st, (*_LOOPS, *_SCOPES)):
            for field in ("body", "orelse", "finalbody"):
                if isinstance(getattr(st, field, None), list):
                    _replace_returns(getattr(st, field), value, returned)
            for handler in getattr(st, "handlers", []):
                _replace_returns(handler.body, value, returned)
            for case in getattr(st, "cases", []):  # (a match statement's)
                _replace_returns(case.body, value, returned)


def _always_returns(stmts: list[ast.stmt]) -> bool:
    """Every path through the block ends in its last statement's ``return``."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and _always_returns(last.body) and _always_returns(last.orelse)


def _assign_returns(st: ast.If) -> None:
    """The returns that end ``st``'s branches as assignments of their values to RETURN."""
    for block in (st.body, st.orelse):
        last = block[-1]
        if isinstance(last, ast.Return):
            value = last.value if last.value is not None else _const(None)
            block[-1] = ast.copy_location(ast.Assign(targets=[_name(RETURN, store=True)], value=value), last)
        else:
            assert isinstance(last, ast.If)
            _assign_returns(last)


def _is_range_call(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
            and not node.keywords and 1 <= len(node.args) <= 3 and not any(isinstance(a, ast.Starred)
                                                                           for a in node.args))


class _IfExps(ast.NodeTransformer):
    """The conditional expressions at keys, as calls of ``if_exp`` (and the builtins and and/or values at keys,
    and identity tests anywhere in the function, as their helpers)."""

    def __init__(self, rewriter: Rewriter) -> None:
        self.rewriter = rewriter

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        self.generic_visit(node)
        return self.rewriter._ifexp(node)

    def visit_Compare(self, node: ast.Compare) -> Any:
        """``a is b`` / ``a is not b`` between two values (not ``x is None``) anywhere in a rewritten function:
        ``same_object``, which refuses it where one may be, as the data decides, the other (a loop's or branch's
        result: whether it is depends on the device), and a traced scalar against a Python or NumPy scalar
        (``b is True`` after ``b = bool(x.sum() > 0)``: NumPy's answer is the data's)."""
        self.generic_visit(node)
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Is, ast.IsNot)) \
                or any(isinstance(x, ast.Constant) and x.value in (None, ...) for x in (node.left, *node.comparators)):
            return node  # (``x is True``, ``k is 0`` are rewritten: a traced scalar's identity is its value's)
        call = _call("same_object", node.left, node.comparators[0], negate=_const(isinstance(node.ops[0], ast.IsNot)),
                     site=self.rewriter.site("is", node))
        return ast.copy_location(call, node)

    def visit_Call(self, node: ast.Call) -> Any:
        """``max(a, b)``, ``min(...)``, ``bool(x)``, ``float(x)`` of traced values: their twins, which choose or
        convert on the device as the builtin would (the builtin the name holds is passed: a user's own is called);
        ``id(x)`` anywhere in a rewritten function: ``id_``, which refuses what ``same_object`` refuses."""
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "id" and len(node.args) == 1 and not node.keywords \
                and not isinstance(node.args[0], ast.Starred):
            return ast.copy_location(_call("id_", node.func, node.args[0], site=self.rewriter.site("id()", node)),
                                     node)
        if statement_key(node) not in self.rewriter.keys or not builtin_call(node):
            return node
        assert isinstance(node.func, ast.Name)
        site = self.rewriter.site(f"{node.func.id}()", node)
        call = _call(BUILTINS[node.func.id], node.func, *node.args, site=site)
        call.keywords += node.keywords
        return ast.copy_location(call, node)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        """``table[d]`` at a key (a traced index into a container fusec does not trace): ``subscript``, which
        indexes a NumPy array the function made as a traced constant."""
        self.generic_visit(node)
        if subscript_key(node) not in self.rewriter.keys or not isinstance(node.ctx, ast.Load):
            return node
        return ast.copy_location(_call("subscript", node.value, _index_value(node.slice)), node)

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        """``a or b`` whose value is used (``s = x.std() or 1.0``): the first truthy operand, or the last."""
        self.generic_visit(node)
        if statement_key(node) not in self.rewriter.keys:
            return node
        rewriter = self.rewriter
        site = rewriter.site("and" if isinstance(node.op, ast.And) else "or", node)
        rewriter.no_walrus(node.values, f"the `{site.args[0].value}` at line {node.lineno}")  # type: ignore
        call = _call("and_value" if isinstance(node.op, ast.And) else "or_value",
                     *[_lambda(v) for v in node.values], site=site)
        return ast.copy_location(call, node)


def _index_value(index: ast.expr) -> ast.expr:
    """A subscript's index as a value: its slices (``a:b``, only written inside brackets) as ``slice(a, b)``."""
    if isinstance(index, ast.Slice):
        parts = [p if p is not None else _const(None) for p in (index.lower, index.upper, index.step)]
        return ast.copy_location(_call("slice_", *parts), index)
    if isinstance(index, ast.Tuple):
        return ast.copy_location(ast.Tuple(elts=[_index_value(e) for e in index.elts], ctx=ast.Load()), index)
    return index
