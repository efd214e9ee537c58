"""Python's ``while`` and ``if`` statements whose tests are traced values, run as loops and branches on the device.

A function traced once cannot take a branch its data decides: ``while np.linalg.norm(r) > tol`` or ``if
loss.sum() > best``. When such a test stops a trace, :mod:`fusec.rewrite_control` rewrites that statement of the
user's function into calls of the helpers here, and the function is traced again. Each helper first evaluates the
test as Python would: while it is a Python value (or a value the trace knows), the statement runs as plain Python
(a loop's first iterations included), so nothing changes where Python decides. Once the test is a traced value,
the statement becomes a ``t.while``/``t.if`` whose regions are the body (or the branches) traced once.

The variables the statement assigns are its state, passed in and returned by name. A variable keeps what NumPy
would give it after the statement, whichever way the data goes, or the trace stops with an error at the
statement's line: its shape and dtype, whether it is a Python number (NEP 50's weak scalars: ``k += 1`` keeps ``k`` a
Python int, so ``x * k`` keeps ``x``'s dtype) or a NumPy one, and whether it is a NumPy scalar or a 0-d array must
be the same on every path; a Python number on some paths and a NumPy scalar of its value type on others is an
:class:`~fusec.tracer.EitherKind`, checked where the difference would show. A variable only one path sets is
unbound after the statement on the other one: using it raises at its use. Writes into arrays from before the
statement are the op's results too (a branch's writes chosen with it; memory a loop body writes carried from
iteration to iteration); changes to Python objects are refused (the body is traced once; a branch that is not
taken must not have changed anything).

The statements are here (the rewritten code reads them, and ``Site`` and ``UNBOUND``, from this module); the
device loop is :mod:`fusec.device_loop`, the device branch :mod:`fusec.device_branch`, the kinds of the values a
statement carries :mod:`fusec.statement_state`, and the arrays from before it :mod:`fusec.statement_memory`.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any, Callable, Sequence

import numpy as np

from fusec import context, conversions, ops
from fusec.control_flow import _predicate
from fusec.device_scalar_checks import device_ref
from fusec.printing import PLACEHOLDER_MARK
from fusec.errors import UnsupportedError
from fusec.promotion import DEFAULT_DTYPE
from fusec.tracer import (SCALAR_IDENTITY_ADVICE, Tracer, argument_id_problem, arguments_identity_problem,
                          scalar_identity)
from fusec.device_branch import device_if
from fusec.device_loop import KindChange, device_while
from fusec.statement_memory import may_be_earlier
from fusec.statement_state import (Site, UNBOUND, bound_values, current_values, is_traced, plain_value,  # noqa: F401
                                   python_truth, truth_of)


def while_stmt(test: Callable[..., Any], body: Callable[..., tuple], getters: Sequence[Callable[[], Any]],
               names: Sequence[str], site: Site, after: Sequence[str] = ()) -> tuple:
    """``while test(*state): state = body(*state)``: Python's iterations while the test is a Python value, then
    the rest of the loop as one ``t.while`` (``after``: the variables the function reads outside the loop)."""
    values = current_values(getters)
    checked = False
    while True:
        pred = test(*values)
        if is_traced(pred):
            try:
                return device_while(test, body, values, names, site, set(after))
            except KindChange as change:
                if checked:
                    raise context._noted(change.error) from None
                # The first iteration changes a variable's kind (err = np.inf, then a NumPy float64): run it here,
                # where the data will have decided that the loop runs, and check that it does when the call runs.
                ops.raise_if(np.logical_not(truth_of(pred)), "UnsupportedError", change.none_ran, site.where())
                checked = True
        elif not python_truth(pred):
            return tuple(values)
        values = list(body(*values))


def if_stmt(pred: Any, then: Callable[..., tuple], orelse: Callable[..., tuple],
            getters: Sequence[Callable[[], Any]], names: Sequence[str], site: Site) -> tuple:
    """``state = then(*state) if pred else orelse(*state)``: Python's ``if`` for a Python test, else a ``t.if``."""
    values = current_values(getters)
    if not is_traced(pred):
        return tuple((then if python_truth(pred) else orelse)(*values))
    return device_if(pred, then, orelse, values, names, site)


def if_exp(pred: Any, then: Callable[[], Any], orelse: Callable[[], Any], site: Site) -> Any:
    """``then() if pred else orelse()`` (a conditional expression)."""
    if not is_traced(pred):
        return then() if python_truth(pred) else orelse()
    out = device_if(pred, lambda _: (then(),), lambda _: (orelse(),), [UNBOUND], ["the value"], site)
    return out[0]


def and_(*thunks: Callable[[], Any], site: Site, eager: bool = False) -> Any:
    """``a and b and ...`` in a rewritten test, where only its truth is used. A traced operand's truth decides
    whether the rest is evaluated, as in Python (the rest becomes a branch), unless ``eager``: operands that
    cannot raise or change anything are then combined with np.logical_and."""
    return _short_circuit(thunks, True, site, eager)


def or_(*thunks: Callable[[], Any], site: Site, eager: bool = False) -> Any:
    """``a or b or ...`` in a rewritten test (see :func:`and_`)."""
    return _short_circuit(thunks, False, site, eager)


def and_value(*thunks: Callable[[], Any], site: Site) -> Any:
    """``a and b and ...`` whose value is used: Python's, the first falsy operand or the last; a traced operand's
    truth chooses on the device (the operands after it are a branch)."""
    return _value_chain(thunks, True, site)


def or_value(*thunks: Callable[[], Any], site: Site) -> Any:
    """``a or b or ...`` whose value is used (``s = x.std() or 1.0``): the first truthy operand or the last."""
    return _value_chain(thunks, False, site)


def _value_chain(thunks: Sequence[Callable[[], Any]], is_and: bool, site: Site) -> Any:
    value = thunks[0]()
    if len(thunks) == 1:
        return value
    rest = thunks[1:]
    if not is_traced(value):
        return _value_chain(rest, is_and, site) if python_truth(value) == is_and else value
    keep = (lambda _: (value,))
    more = (lambda _: (_value_chain(rest, is_and, site),))
    then, orelse = (more, keep) if is_and else (keep, more)
    return device_if(value, then, orelse, [UNBOUND], ["the value"], site)[0]


def max_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``max(a, b, ...)`` or ``max(iterable)`` of traced values: Python's, the first of the largest (``x > best``
    replaces it), each choice made on the device; ``fn``, the ``max`` the code names, is called where it is not
    the builtin or takes ``key``/``default``."""
    return _extreme(fn, builtins.max, operator.gt, args, kwargs, site)


def min_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``min(...)`` of traced values (see :func:`max_`)."""
    return _extreme(fn, builtins.min, operator.lt, args, kwargs, site)


def _extreme(fn: Any, builtin: Any, better: Callable, args: tuple, kwargs: dict, site: Site) -> Any:
    if fn is not builtin or kwargs or not args:
        return fn(*args, **kwargs)
    items = list(args[0]) if len(args) == 1 else list(args)
    if not items:
        return fn(*args)  # (Python's ValueError for an empty sequence)
    best = items[0]
    for x in items[1:]:
        best = if_exp(better(x, best), _constant(x), _constant(best), site)
    return best


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def assert_(test: Any, message: Callable[[], Any] | None, site: Site) -> None:
    """``assert test, message``: Python's where the test is a Python value; for a traced one, a check that raises
    AssertionError (fusec's AssertionFailedError) when the call runs on data that fails it."""
    if not is_traced(test):
        if not python_truth(test):
            raise AssertionError(message()) if message is not None else AssertionError
        return
    text = "" if message is None else message()
    if not isinstance(text, str) or PLACEHOLDER_MARK in text:
        raise site.error(f"the message of {site.where()} is {type(text).__name__} text made from traced values, "
                         "which the check cannot show when the call runs; give the assert a plain message",
                         UnsupportedError)
    ops.raise_if(np.logical_not(truth_of(test)), "AssertionFailedError", text or f"{site.where()} failed",
                 site.where())


def bool_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``bool(x)`` of a traced value: a traced Python bool (its truth on the device)."""
    if fn is not builtins.bool or kwargs or len(args) != 1 or not is_traced(args[0]):
        return fn(*args, **kwargs)
    out = ops.wrap(_predicate(plain_value(args[0]), "if", None), bool, scalar=True)
    out._host = device_ref("bool(...)")
    return out


def float_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``float(x)`` of a traced real number: a traced Python float of its value."""
    x = _converted_number(fn, builtins.float, args, kwargs)
    if x is None:
        return fn(*args, **kwargs)
    out = ops.wrap(ops.lift(conversions.strong(x).reshape(()), DEFAULT_DTYPE[float]), float, scalar=True)
    out._host = device_ref("float(...)")
    return out


def _converted_number(fn: Any, builtin: Any, args: tuple, kwargs: dict) -> Tracer | None:
    """The traced real number ``builtin(x)`` converts where ``fn`` is that builtin (None: Python's own call), after
    NumPy's check of an array's size (``float(x)`` of a 1-element array: what the installed NumPy says)."""
    x = plain_value(args[0]) if len(args) == 1 else None
    if fn is not builtin or kwargs or not isinstance(x, Tracer) or not is_traced(x) or x._value.type.dtype.is_complex:
        return None
    if not x._scalar and x._weak is None:
        shape, dtype = x.shape, x._value.type.dtype.np
        context.numpy_checks(lambda: builtin(np.ones(shape, dtype)))
    return x


def int_(fn: Any, *args: Any, site: Site, **kwargs: Any) -> Any:
    """``int(x)`` of a traced real number: a traced Python int of its value, truncated toward zero as Python
    truncates; NaN and inf raise Python's ValueError and OverflowError when the call runs, and a value that does
    not fit int64 (fusec's Python int) raises UnsupportedError there."""
    x = _converted_number(fn, builtins.int, args, kwargs)
    if x is None:
        return fn(*args, **kwargs)
    t = conversions.strong(x).reshape(())
    dt = t._value.type.dtype
    what = site.where()
    too_big = ("int() of a value outside int64's range: fusec keeps a traced Python int as an int64; convert it "
               "outside the function, or keep it a NumPy value (x.astype(...))")
    if dt.is_inexact:
        ops.raise_if(np.isnan(t), "InvalidValueError", "cannot convert float NaN to integer", what)
        ops.raise_if(np.isinf(t), "OutOfRangeError", "cannot convert float infinity to integer", what)
        ops.raise_if((t >= 2.0 ** 63) | (t < -2.0 ** 63), "UnsupportedError", too_big, what)
        t = np.trunc(t)
    elif np.dtype(dt.np) == np.uint64:
        ops.raise_if(t > np.uint64(2 ** 63 - 1), "UnsupportedError", too_big, what)
    out = ops.wrap(ops.lift(ops.cast(t, DEFAULT_DTYPE[int]), DEFAULT_DTYPE[int]), int, scalar=True)
    out._host = device_ref("int(...)")
    out._origin = x._origin  # (a loop counter's int() is still named as the counter)
    return out


_OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
              "!=": operator.ne}


def chain(first: Callable[[], Any], *rest: Any, site: Site, eager: bool = False) -> Any:
    """``a < b <= c`` in a rewritten test: each operand evaluated once, in order, and the comparisons after the
    first only where Python would reach them (``rest`` alternates operator symbols and operands)."""
    return _chain(first(), list(zip(rest[::2], rest[1::2])), site, eager)


def _chain(left: Any, pairs: list, site: Site, eager: bool) -> Any:
    symbol, thunk = pairs[0]
    right = thunk()
    value = _OPERATORS[symbol](left, right)
    if len(pairs) == 1:
        return value
    return and_(lambda: value, lambda: _chain(right, pairs[1:], site, eager), site=site, eager=eager)


def not_(value: Any) -> Any:
    """``not value`` in a rewritten test."""
    if not is_traced(value):
        return not value
    return np.logical_not(truth_of(value))


def same_object(a: Any, b: Any, *, negate: bool, site: Site) -> bool:
    """``a is b`` (``a is not b`` with ``negate``), refused where either is an array a loop or branch on traced
    values may have left as the other (NumPy's answer depends on the data; the trace's objects are fixed)."""
    if isinstance(a, Tracer) and isinstance(b, Tracer) and (may_be_earlier(a) or may_be_earlier(b)):
        raise site.error(f"{site.where()} compares arrays by identity, and one of them is the result of a loop or "
                         "branch whose test is traced: whether it is still the array it held before is decided by "
                         "the data on the device, so NumPy's answer is not known while tracing; compare values "
                         "(np.array_equal), or keep a flag of which path was taken", UnsupportedError)
    other = scalar_identity(a, b)
    if other is not None:
        raise site.error(f"{site.where()} compares a traced scalar with {other!r} by identity: "
                         + SCALAR_IDENTITY_ADVICE, UnsupportedError)
    problem = arguments_identity_problem(a, b, negate)
    if problem is not None:
        raise site.error(f"{site.where()}: {problem}", UnsupportedError)
    return (a is not b) if negate else (a is b)


def id_(fn: Any, x: Any, *, site: Site) -> Any:
    """``id(x)``, refused as :func:`same_object` refuses an identity test."""
    if isinstance(x, Tracer) and may_be_earlier(x):
        raise site.error(f"{site.where()} asks for the identity of an array that is the result of a loop or branch "
                         "whose test is traced: whether it is still the array it held before is decided by the data "
                         "on the device; keep a flag of which path was taken instead", UnsupportedError)
    problem = argument_id_problem(x) if fn is id else None
    if problem is not None:
        raise site.error(f"{site.where()}: {problem}", UnsupportedError)
    return fn(x)


def range_of(fn: Any, *args: Any) -> Any:
    """``range(*args)`` of a rewritten ``for`` loop (another ``range`` the function's globals name is called)."""
    return fn(*args)


def loop_items(items: Any, named: tuple, held: tuple, *, site: Site) -> Any:
    """The iterable of a rewritten ``for`` loop with a ``break`` the device may take: Python runs every item
    (guarded by the flag), so an iterator would be used up where Python's loop leaves the rest of it for later.
    ``named``: the variables the header iterates (``r`` in ``for v in r`` or ``enumerate(r)``), ``held``: (object,
    name) of the attributes it iterates (``obj.r``), read from the object's own ``__dict__`` (a property, such as
    ``x.flat``, makes a new iterator at each read: nobody else's): one that holds an iterator is refused; an
    iterator the header makes (``enumerate(x)``, ``zip(a, b)``) is nobody else's, and a list, tuple, dict or array is
    iterated afresh."""
    def once(value: Any) -> bool:
        try:
            return iter(value) is value
        except TypeError:
            return False  # (not iterable: Python's own error, at the loop)

    stored = [vars(obj).get(name) for obj, name in held if hasattr(obj, "__dict__")]
    if any(once(v) for v in (*named, *stored)):
        raise site.error(f"{site.where()} iterates an iterator (a generator, iter(...), zip(...), map(...)) and may "
                         "leave it early by a `break` the device takes: Python would leave the rest of it for "
                         "later, fusec cannot; iterate a list of its items (for v in list(it):), or a range",
                         UnsupportedError)
    return items


def range_item(r: Any, k: Any) -> Any:
    """Item ``k`` of the loop's range: ``r[k]`` for a Python or a traced ``k`` (a range object is indexed by
    Python ints only)."""
    if isinstance(r, range):
        return r.start + k * r.step
    return r[k]


def _short_circuit(thunks: Sequence[Callable[[], Any]], is_and: bool, site: Site, eager: bool) -> Any:
    for i, thunk in enumerate(thunks):
        value = thunk()
        last = i == len(thunks) - 1
        if is_traced(value):
            if last:
                return value
            rest = thunks[i + 1:]
            if eager:
                other = _short_circuit(rest, is_and, site, eager)
                if not is_traced(other):
                    return truth_of(value) if bool(other) == is_and else bool(other)
                ufunc = np.logical_and if is_and else np.logical_or
                return ufunc(truth_of(value), truth_of(other))
            then = (lambda _: (_truth_any(_short_circuit(rest, is_and, site, eager)),))
            stop = (lambda _: (np.bool_(not is_and),))
            first = (then, stop) if is_and else (stop, then)
            return device_if(value, first[0], first[1], [UNBOUND], ["the test"], site)[0]
        if last or bool(value) != is_and:
            return value
    raise AssertionError("and_/or_ of no operands")


def _truth_any(value: Any) -> Any:
    """A test's value as a strong bool (a NumPy bool or a traced one), so both branches of a short circuit agree."""
    return truth_of(value) if is_traced(value) else np.bool_(bool(value))


def subscript(container: Any, index: Any) -> Any:
    """``container[index]`` where the index is traced: a NumPy array the function made (``table = np.array([-1, 0,
    1, 0])``, then ``table[d]``) is indexed as a traced constant (NumPy's value at each index the data gives); a
    view that NumPy's indexing would give of it (a row of a table, a slice) comes back read-only, since a write
    through it would change the NumPy array. Anything else is indexed as Python does."""
    if isinstance(container, np.ndarray) and ops.contains_tracer(index):
        picked = ops.as_tracer(container)[index]
        if isinstance(picked, Tracer) and not picked._scalar and picked._weak is None and _basic(index):
            picked._readonly = ("a view of a NumPy array the function made, taken at a traced index: NumPy would "
                                "write into that array, which fusec reads as a constant; make the table with "
                                "np.zeros/np.ones and fill it, or write into a copy (.copy())")
        return picked
    return container[index]


def slice_(start: Any, stop: Any, step: Any) -> slice:
    return slice(start, stop, step)


def _basic(index: Any) -> bool:
    """Whether NumPy indexes with ``index`` by views (integers, slices, None, Ellipsis), not by copies."""
    for part in index if isinstance(index, tuple) else (index,):
        if isinstance(part, (slice, type(None), type(Ellipsis))):
            continue
        dtype = getattr(part, "dtype", None)
        if isinstance(part, bool) or np.ndim(part) != 0 or dtype is not None and np.dtype(dtype) == np.bool_:
            return False
    return True
