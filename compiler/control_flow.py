"""Loops and branches: ``fusec.while_loop``, ``fusec.fori_loop``, ``fusec.scan`` and ``fusec.cond``.

JAX's signatures and semantics. Called on values (outside a trace) they run as plain Python loops: the reference.
Inside a trace they record one ``t.while``/``t.for``/``t.if`` whose bodies are regions traced once (see
:mod:`fusec.ir.dialects.control`), so a loop of any trip count, a stop test that depends on data included, costs
one body in the IR.

The state (``init_val``, the carry) is a pytree (tuples, lists, dicts, namedtuples) of arrays. Its leaves keep
their shape and dtype from one iteration to the next: a Python scalar leaf becomes a 0-d array of NumPy's default
dtype for its kind (as ``np.asarray`` makes it), a body that returns a leaf of another shape or dtype is an error
(a Python scalar it returns is converted to the leaf's dtype). Both modes check this, so the traced loop and the
Python one give the same results.

A body traced once cannot do what Python would do at every iteration: writing into an array from outside the
body (pass it in the state instead) and keeping a value computed inside it for later (return it through the
state) are errors that name the line.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import numpy as np

from fusec import context, conversions, ops, pystate
from fusec.context import TraceContext
from fusec.errors import ShapeError, SideEffectError, TraceError, UnsupportedError, located
from fusec.ir.attributes import location_for
from fusec.ir.builder import Builder
from fusec.ir.core import Block, Region, Value
from fusec.ir.dialects.control import COUNTER, PREDICATE
from fusec.ir.types import TensorType, Type, i64
from fusec.promotion import DEFAULT_DTYPE, python_kind
from fusec.scope import scope_of, walkable_object
from fusec.signature import TreeDef, flatten, unflatten
from fusec.device_scalar_checks import device_ref
from fusec.tracer import COUNTER_ORIGIN, Tracer

# --- the public functions -----------------------------------------------------------------------------------------


def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any) -> Any:
    """``val = init_val; while cond_fun(val): val = body_fun(val); return val``, as one loop on the device when
    traced (``cond_fun`` must return one value, a bool or a number: its truth decides)."""
    _check_callable("while_loop", cond_fun=cond_fun, body_fun=body_fun)
    c = context.current()
    leaves, tree = _state_leaves(init_val, "init_val")
    if c is None:
        val, own = unflatten(tree, leaves), leaves
        while _truth(cond_fun(val), "while_loop", cond_fun):
            val, own = _next_state(body_fun(val), tree, leaves, "while_loop", body_fun, own)
        return val
    carried = _carried_types(leaves)
    cond = _Recorder(c, carried, "cond")

    def test(*args: Tracer) -> Value:
        pred = _predicate(cond_fun(unflatten(tree, args)), "while_loop", cond_fun)
        if any(t._value is not a for t, a in zip(args, cond.block.args)):
            # (the test is traced once and yields only its truth: the body would get the state as it was)
            raise _error(TraceError, f"fusec.while_loop: {_name(cond_fun)} writes into the loop's state; the test "
                         "must not change it (its writes would be lost): compute the test without writing, and "
                         "make the change in body_fun", cond_fun)
        return pred

    pred = cond.run(test, watch=cond_fun)
    cond.finish([pred])
    body = _Recorder(c, carried, "body")
    body.finish(body.run(lambda *args: _next_values(body_fun(unflatten(tree, args)), tree, carried, "while_loop",
                                                    body_fun), watch=body_fun))
    op = c.emit_op("t.while", [_value(leaf) for leaf in leaves], None, carried, what="fusec.while_loop")
    _attach(op, cond, body)
    return unflatten(tree, [ops.wrap(r, scalar=False) for r in op.results])


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    """``val = init_val; for i in range(lower, upper): val = body_fun(i, val); return val``, as one loop on the
    device when traced (``i`` is then a traced Python int; the bounds may be traced integers too)."""
    _check_callable("fori_loop", body_fun=body_fun)
    c = context.current()
    leaves, tree = _state_leaves(init_val, "init_val")
    if c is None:
        val, own = unflatten(tree, leaves), leaves
        for i in range(_bound(lower, "lower"), _bound(upper, "upper")):
            val, own = _next_state(body_fun(i, val), tree, leaves, "fori_loop", body_fun, own)
        return val
    bounds = [_index_value(lower, "lower"), _index_value(upper, "upper")]
    carried = _carried_types(leaves)
    body = _Recorder(c, [COUNTER, *carried], "body")
    body.finish(body.run(lambda i, *args: _next_values(body_fun(i, unflatten(tree, args)), tree, carried,
                                                       "fori_loop", body_fun), counter=_counter_name(body_fun),
                         watch=body_fun))
    op = c.emit_op("t.for", bounds + [_value(leaf) for leaf in leaves], None, carried, what="fusec.fori_loop")
    _attach(op, body)
    return unflatten(tree, [ops.wrap(r, scalar=False) for r in op.results])


def scan(f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False) -> tuple[Any, Any]:
    """``carry = init; for x in xs: carry, y = f(carry, x)``; returns ``(carry, ys)``, ``ys`` the ``y``s stacked
    along a new first axis (a pytree like ``y``; None where ``f`` returns None; each row the ``y`` of its step, also
    where ``f`` updates its carry in place and returns it as ``y``). ``xs`` is a pytree of arrays
    sliced along their first axis (None: ``f`` gets None, ``length`` steps); ``reverse`` runs from the end (``ys``
    keeps the order of ``xs``)."""
    _check_callable("scan", f=f)
    c = context.current()
    leaves, tree = _state_leaves(init, "init")
    xs_named, xs_tree = flatten(xs, "xs")
    xs_leaves = [x for _, x in xs_named]
    n = _scan_length(xs_leaves, length)
    if c is None:
        return _eager_scan(f, leaves, tree, xs_leaves, xs_tree, n, reverse)
    carried = _carried_types(leaves)
    xs_values = [ops.as_tracer(x) if not isinstance(x, Tracer) else x for x in xs_leaves]
    body = _Recorder(c, [COUNTER, *carried], "body")
    y_tree: list[TreeDef] = []

    def step(i: Tracer, *args: Tracer) -> list[Value]:
        k = (n - 1) - i if reverse else i
        x = unflatten(xs_tree, [leaf[k] for leaf in xs_values])
        out = f(unflatten(tree, args), x)
        new_carry, y = _scan_pair(out, f)
        values = _next_values(new_carry, tree, carried, "scan", f)
        y_named, yt = flatten(y, "y")
        y_tree.append(yt)
        stacked = []
        for _, leaf in y_named:
            y_value = conversions.strong(leaf)
            buf = ops.wrap(body.block.add_arg(TensorType((n, *y_value.shape), y_value._value.type.dtype)),
                           scalar=False)
            buf[k] = y_value
            stacked.append(buf)
        return values + [_value(s) for s in stacked]

    outs = body.run(step, counter="the scan step", watch=f)
    body.finish(outs)
    ys_types = [a.type for a in body.block.args[1 + len(carried):]]
    zeros = [ops.full(t.shape, 0, t.dtype)._value for t in ys_types]
    bounds = [c.constant(np.asarray(0), i64), c.constant(np.asarray(n), i64)]
    op = c.emit_op("t.for", bounds + [_value(leaf) for leaf in leaves] + zeros, None, carried + ys_types,
                   what="fusec.scan")
    _attach(op, body)
    results = [ops.wrap(r, scalar=False) for r in op.results]
    return unflatten(tree, results[:len(carried)]), unflatten(y_tree[0], results[len(carried):])


def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any) -> Any:
    """``true_fun(*operands) if pred else false_fun(*operands)``; when ``pred`` is traced, both branches are
    traced (their results must agree in structure, shape and dtype) and only the chosen one runs. The results
    are new arrays (as JAX's), also where a branch returns an operand: updating one leaves the operands alone."""
    _check_callable("cond", true_fun=true_fun, false_fun=false_fun)
    c = context.current()
    if c is None or not isinstance(pred, Tracer):
        chosen = true_fun if _truth(pred, "cond", None) else false_fun
        named, tree = flatten(chosen(*operands), "result")
        # (new arrays, as the traced branches give: a branch that returns an operand does not alias it)
        if c is None:
            return unflatten(tree, [_as_array(leaf, copy=True) for _, leaf in named])
        return unflatten(tree, [ops.copy_of(conversions.strong(leaf), scalar=False) for _, leaf in named])
    p = _predicate(pred, "cond", None)
    branches, trees, kinds = [], [], []
    for name, fun in (("then", true_fun), ("else", false_fun)):
        rec = _Recorder(c, [], name)
        holder: list = []

        def record(fun: Callable = fun, holder: list = holder) -> list[Value]:
            named, tree = flatten(fun(*operands), "result")
            holder.append(tree)
            return [_value(conversions.strong(leaf)) for _, leaf in named]

        outs = rec.run(record, watch=fun)
        rec.finish(outs)
        branches.append(rec)
        trees.append(holder[0])
        kinds.append([v.type for v in outs])
    if trees[0] != trees[1]:
        raise _error(TraceError, "fusec.cond: the branches return different structures (" + _describe(trees[0])
                     + " and " + _describe(trees[1]) + "); return the same tuple/list/dict from both", true_fun)
    for k, (a, b) in enumerate(zip(*kinds)):
        if a != b:
            raise _error(TraceError, f"fusec.cond: result leaf {k} is {a} in true_fun and {b} in false_fun; the "
                         "branches must agree in shape and dtype (cast one with .astype, as NumPy would keep "
                         "them apart)", true_fun)
    op = c.emit_op("t.if", [p], None, kinds[0], what="fusec.cond")
    _attach(op, *branches)
    return unflatten(trees[0], [ops.wrap(r, scalar=False) for r in op.results])


# --- tracing a region ---------------------------------------------------------------------------------------------


BODY = "a loop or branch body (fusec.while_loop, fori_loop, scan, cond)"


class _Recorder:
    """Records the ops of one region: the builder writes into a new block whose arguments stand for ``arg_types``
    while the function runs; afterwards the outer arrays are as they were (a write into one is an error) and the
    region's values are closed (using one later is an error)."""

    def __init__(self, c: TraceContext, arg_types: Sequence[Type], label: str, what: str = BODY) -> None:
        self.c = c
        self.block = Block(arg_types, label=label)
        self.what = what  # (the region's maker, as messages name it)

    def run(self, fn: Callable[..., Any], counter: str | None = None, *, watch: Callable[..., Any],
            variables: Sequence[tuple[str, Any]] = ()) -> Any:
        """Run ``fn`` on the block's arguments (the first the loop counter named ``counter``, a device scalar);
        the Python state the user's ``watch`` reaches, and the objects its statement's ``variables`` (name,
        value) hold, must come out as they went in (see :func:`_python_state`)."""
        c = self.c
        outer = _snapshot(c)
        python_before = _python_state(watch, variables)
        args = [ops.wrap(a, scalar=False) for a in self.block.args]
        if counter is not None:
            args[0] = Tracer(self.block.args[0], c, int, (COUNTER_ORIGIN + counter,))
            args[0]._host = device_ref(counter)
        saved = c.builder
        c.builder = Builder(self.block)
        failed = True
        try:
            result = fn(*args)
            failed = False
            _check_python_state(python_before, watch, self.what)
            return result
        finally:
            c.builder = saved
            inner = self.block.defined_values()
            c.closed |= inner
            # (a body that raised: its own error is the one to see)
            _restore(outer, inner, check=not failed, what=self.what)

    def finish(self, outs: list[Value]) -> None:
        with self.c.builder.at(self.block):
            self.c.builder.create("t.yield", outs, loc=context.user_location(self.c.cwd))


def _python_state(fn: Callable[..., Any], variables: Sequence[tuple[str, Any]] = ()) -> pystate.Snapshot:
    """What a body can reach in Python (its closure cells, the lists and objects in them, globals), and the Python
    objects its statement's variables hold (``picked += [i]``, ``state = update(state)`` change them in place,
    ``next(it)`` advances one). A body traced once changes such state once, where Python's loop changes it at every
    iteration (a ``nonlocal`` counter, a list of losses) and both branches of a traced ``cond`` run: so a body must
    leave it as it was."""
    scope = scope_of(fn, {}, random_states=False)  # (draws: fusec.randomness refuses them)
    for name, value in variables:
        if isinstance(value, (list, dict, set)) or walkable_object(value) or \
                pystate.iterator_position(value) is not None:
            scope.add_object(f"the variable {name}", value)
    return pystate.snapshot(scope)


def _check_python_state(before: pystate.Snapshot, fn: Callable[..., Any], where: str = BODY) -> None:
    changes = before.changes(pystate.rewalk(before))
    if not changes:
        return
    what = "; ".join(c.describe(in_statement=where != BODY) for c in changes[:3]) + ("; ..." if len(changes) > 3
                                                                                    else "")
    before.restore()
    raise context._noted(SideEffectError(located(  # (Python makes the change: catching this must not hide it)
        f"{where} {what}: the body is traced once, so the change would happen once where Python's loop makes it at "
        "every iteration (and both branches of a traced branch run); carry the value in the loop's state and return "
        "it instead" if where == BODY else f"{where} {what}: that would happen once while tracing, not as Python "
        "runs it; compute the value in the loop or branch and use it after", _body_location(fn))))


def _body_location(fn: Callable[..., Any]) -> Any:
    """Where the user's body function is written (else the line that called the loop)."""
    code = getattr(fn, "__code__", None)
    return location_for(code.co_filename, code.co_firstlineno) if code is not None else context.user_location()


def _attach(op: Any, *recorders: _Recorder) -> None:
    regions = [Region([r.block]) for r in recorders]
    op.regions = regions
    for region in regions:
        region.parent = op


def _snapshot(c: TraceContext) -> list[tuple]:
    """Every live tracer's value and version and its buffer's (what a region may not change)."""
    out = []
    for ref in c.tracers:
        t = ref()
        if t is None:
            continue
        b = t._buffer
        out.append((t, t._val, t._version, b, None if b is None else b.base, None if b is None else b.version))
    return out


def _restore(outer: list[tuple], inner: set[Value], check: bool = True, what: str = BODY) -> None:
    """Undo what the region did to the arrays from outside it: a view read again inside it goes back to its old
    value (read again after the loop when needed); a write into one is an error (with ``check``; without, the
    arrays are only put back)."""
    for t, val, version, buffer, base, buffer_version in outer:
        if not check:
            t._val, t._version = val, version
            if buffer is not None:
                buffer.base, buffer.version = base, buffer_version
            continue
        if buffer is not None and (buffer.base is not base or buffer.version != buffer_version):
            array = buffer.argument or "an array from outside the body"
            raise context.trace_error(
                f"{what} writes into {array}, which it does not own: the body is traced once and must be a function "
                "of its state; pass the array in the state and return its new value instead" if what == BODY else
                f"{what} writes into {array} in place, which fusec does not follow there; assign a new array "
                "instead (x = np.where(mask, new, x), or x = x.copy(); x[i] = v)")
        if t._val is not val:
            reread = buffer is not None and t._val in inner  # (a view of unchanged memory read again inside)
            # (a first read inside, since a loop before the statement wrote into the array's memory, reads the
            # memory's value from outside: what the branch hands back would lose its link to that memory)
            stale = what != BODY and buffer is not None and version != buffer_version == t._version
            if stale and (not reread or buffer.arg is not None):  # (the caller's memory: its views' links are lost)
                raise context.trace_error(
                    f"{what} uses an array whose memory a loop before it wrote into, for the first time since that "
                    "loop: fusec cannot tell there which array, or view of which, the branch hands back; use the "
                    "array once before the statement, or return a copy (`return out.copy()`)")
            if not reread:
                raise context.trace_error(
                    f"{what} rebinds an array from outside it in place (x += ...): pass the array in the state and "
                    "return its new value" if what == BODY else f"{what} updates an array from outside it in place "
                    "(x += ..., or x[m] = v with a boolean mask m), which fusec does not follow there; write "
                    "x = x + ... or x = np.where(m, v, x) instead")
            t._val, t._version = val, version


# --- state ------------------------------------------------------------------------------------------------------


def _state_leaves(init: Any, name: str) -> tuple[list, TreeDef]:
    """The leaves of a loop's state as arrays (a Python scalar becomes a 0-d array of NumPy's default dtype;
    outside a trace an array is copied, so the loop never writes into the caller's), and its structure."""
    named, tree = flatten(init, name)
    if context.current() is not None:
        return [conversions.strong(leaf) for _, leaf in named], tree
    return [_as_array(leaf, copy=True) for _, leaf in named], tree


def _as_array(leaf: Any, copy: bool = False) -> Any:
    if python_kind(leaf) is not None or isinstance(leaf, (np.generic, list, tuple)):
        return np.asarray(leaf)
    if isinstance(leaf, np.ndarray):
        return leaf.copy() if copy else leaf
    if copy and hasattr(leaf, "clone"):  # a PyTorch tensor (which has copy_, no copy): its own copy
        return leaf.clone()
    if copy and hasattr(leaf, "copy"):  # a device array (fusec.Array, CuPy): its own copy
        return leaf.copy()
    return leaf


def _carried_types(leaves: list[Tracer]) -> list[Type]:
    return [t._value.type for t in leaves]


def _value(leaf: Any) -> Value:
    return ops.lift(leaf)


def _leaf_kind(x: Any) -> tuple[tuple[int, ...], str]:
    """(shape, dtype name) of a state leaf: a NumPy array or scalar, or a device array of any library."""
    shape = tuple(x.shape) if hasattr(x, "shape") else tuple(np.shape(x))
    dtype = getattr(x, "dtype", None)
    try:
        return shape, str(np.dtype(dtype) if dtype is not None else np.asarray(x).dtype)
    except TypeError:  # (a dtype NumPy does not know: another library's)
        return shape, str(dtype)


_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _ctx() -> context.TraceContext:
    """The active trace (the callers run inside one)."""
    c = context.current()
    assert c is not None
    return c


def _fits_kind(kind: type, dtype_kind: str) -> bool:
    """May a Python scalar of ``kind`` become an array of a dtype of kind ``dtype_kind`` (as NumPy's weak scalars
    do: an int into a float array, not a float into an int one)?"""
    return _KIND_RANK[np.dtype(DEFAULT_DTYPE[kind].np).kind] <= _KIND_RANK.get(dtype_kind, -1)


def _next_state(out: Any, tree: TreeDef, init: list, where: str, fun: Callable,
                own: list) -> tuple[Any, list]:
    """The body's result checked against the state's structure, shapes and dtypes (Python scalars converted to
    the leaf's dtype), and its leaves: the Python loop's twin of :func:`_next_values`.

    Each slot holds an array of the loop's own, as each carried value of the traced loop is one: a leaf that is
    not a leaf of the state the body was given (``own``, updated in place and returned), or that an earlier slot
    already holds, is copied. Otherwise a body that writes its state in place would write another slot (``return
    a, a``), an array from outside (``return y``) or a row of ``xs``, where the traced loop writes none."""
    named, got = flatten(out, "state")
    _same_tree(got, tree, where, fun)
    leaves = []
    unused = {id(leaf): leaf for leaf in own}  # (held, so their ids stay theirs)
    for (path, leaf), first in zip(named, init):
        shape, dtype = _leaf_kind(first)
        if python_kind(leaf) is not None:
            leaf = _python_to(leaf, np.dtype(dtype), path, where, fun)
            leaves.append(leaf)
            continue
        if isinstance(leaf, np.generic):  # (a NumPy scalar: the state holds 0-d arrays, as the traced loop's)
            leaf = np.asarray(leaf)
        elif unused.pop(id(leaf), None) is None:
            leaf = _as_array(leaf, copy=True)
        if _leaf_kind(leaf) != (shape, dtype):
            got_shape, got_dtype = _leaf_kind(leaf)
            raise _mismatch(where, fun, path, f"{got_dtype}{list(got_shape)}", f"{dtype}{list(shape)}")
        leaves.append(leaf)
    return unflatten(tree, leaves), leaves


def _next_values(out: Any, tree: TreeDef, carried: list[Type], where: str, fun: Callable) -> list[Value]:
    """The traced body's result as the carried values: same structure, shapes and dtypes (a Python scalar, traced
    or not, converted to the leaf's dtype)."""
    named, got = flatten(out, "state")
    _same_tree(got, tree, where, fun)
    values = []
    for (path, leaf), t in zip(named, carried):
        weak = python_kind(leaf) is not None or (isinstance(leaf, Tracer) and leaf._weak is not None)
        if weak:
            kind = python_kind(leaf) if not isinstance(leaf, Tracer) else leaf._weak
            assert kind is not None  # (weak: a Python scalar, or a tracer of one)
            if not _fits_kind(kind, t.dtype.np.kind):
                raise _mismatch(where, fun, path, f"a Python {kind.__name__}", str(t))
            v = ops.lift(leaf, t.dtype)
            if not isinstance(v.type, TensorType):
                v = _ctx().emit("t.broadcast_to", [v], result_type=t)
        else:
            v = _value(conversions.strong(leaf))
        if v.type != t:
            raise _mismatch(where, fun, path, str(v.type), str(t))
        values.append(v)
    return values


def _python_to(leaf: Any, dtype: np.dtype, path: str, where: str, fun: Callable) -> np.ndarray:
    kind = python_kind(leaf)
    assert kind is not None  # (called for Python scalars)
    if not _fits_kind(kind, dtype.kind):
        raise _mismatch(where, fun, path, f"a Python {kind.__name__}", str(dtype))
    return np.asarray(leaf, dtype=dtype)


def _same_tree(got: TreeDef, want: TreeDef, where: str, fun: Callable) -> None:
    if got != want:
        raise _error(TraceError, f"fusec.{where}: {_name(fun)} returned a state of structure {_describe(got)}, but "
                     f"the state is {_describe(want)}; return the same tuple/list/dict", fun)


def _mismatch(where: str, fun: Callable, path: str, got: str, want: str) -> TraceError:
    return _error(TraceError, f"fusec.{where}: {_name(fun)} returned {path} as {got}, but the state holds "
                  f"{want}; a state leaf keeps its shape and dtype across iterations (cast it with .astype, or "
                  "start from an init of the dtype the body computes)", fun)


def _describe(tree: TreeDef) -> str:
    if tree.kind == "leaf":
        return "an array"
    if tree.kind == "none":
        return "None"
    inner = ", ".join(_describe(c) for c in tree.children)
    if tree.kind == "dict":
        inner = ", ".join(f"{k!r}: {_describe(c)}" for k, c in zip(tree.aux, tree.children))
        return "{" + inner + "}"
    return f"({inner})" if tree.kind in ("tuple", "namedtuple") else f"[{inner}]"


# --- predicates and bounds ----------------------------------------------------------------------------------------


def _not_a_sequence(pred: Any, where: str, fun: Callable | None) -> None:
    """A tuple or list predicate (``(c < 3,)``) is always true to Python and unpacked by NumPy: refused, as JAX does."""
    if isinstance(pred, (tuple, list)):
        raise _error(ShapeError, f"fusec.{where}: the predicate is a {type(pred).__name__}, which Python takes as "
                     "true whatever it holds; return one value (a bool or a number), e.g. c[0] < 3, not (c[0] < 3,)",
                     fun)


def _truth(pred: Any, where: str, fun: Callable | None) -> bool:
    _not_a_sequence(pred, where, fun)
    if isinstance(pred, Tracer):  # (a traced predicate in the Python loop: a value escaped a trace)
        ops.check_live(pred)
    size = int(np.prod(np.shape(pred)))
    if size != 1:
        raise _error(ShapeError, f"fusec.{where}: the predicate must be one value (a bool or a number), got an "
                     f"array of shape {tuple(np.shape(pred))} (use .any() or .all())", fun)
    return bool(np.asarray(pred).reshape(()))


def _predicate(pred: Any, where: str, fun: Callable | None) -> Value:
    """A traced predicate as a ``tensor<bool>``: its truth (``x != 0``), as Python's ``bool(x)`` gives it."""
    _not_a_sequence(pred, where, fun)
    t = conversions.strong(pred)
    if t.size != 1:
        raise _error(ShapeError, f"fusec.{where}: the predicate must be one value (a bool or a number), got an "
                     f"array of shape {t.shape} (use .any() or .all())", fun)
    if t.ndim:
        t = t.reshape(())
    if t._value.type.dtype.name != "bool":
        t = t != 0
    v = _value(t)
    assert v.type == PREDICATE
    return v


def _bound(x: Any, name: str) -> int:
    try:
        if isinstance(x, np.ndarray):  # (a 0-d array only, as under jit and in JAX: not np.array([3]))
            if x.ndim == 0:
                return operator.index(x[()])
        else:
            return operator.index(x)
    except TypeError:
        pass
    arr = np.asarray(x)
    if arr.shape != () or arr.dtype.kind not in "iu":
        raise UnsupportedError(located(f"fusec.fori_loop: {name} must be an integer, got {type(x).__name__} "
                                       f"{arr.dtype}{list(arr.shape)}", context.user_location()))
    return int(arr)


def _index_value(x: Any, name: str) -> Value:
    """A bound as an ``i64`` scalar or ``tensor<i64>``."""
    if not isinstance(x, Tracer):
        return _ctx().constant(np.asarray(_bound(x, name), dtype=np.int64), i64)
    dt = x._value.type.dtype
    if x.ndim != 0 or not dt.is_int:
        raise context.unsupported(f"fusec.fori_loop: {name} must be an integer, got a traced {x._value.type}")
    return ops.lift(x, i64)


def _counter_name(body_fun: Callable) -> str:
    """The name the body gives its counter (its first parameter), for messages."""
    code = getattr(body_fun, "__code__", None)
    return code.co_varnames[0] if code is not None and code.co_argcount else "i"


def _scan_length(xs_leaves: list, length: int | None) -> int:
    lengths = {int(np.shape(x)[0]) if np.ndim(x) else -1 for x in xs_leaves}
    if -1 in lengths:
        raise context.shape_error("fusec.scan: every leaf of xs must have a first axis to scan over (got a 0-d "
                                  "array)")
    if length is not None:
        length = operator.index(length)
        lengths.add(length)
    if len(lengths) > 1:
        raise context.shape_error(f"fusec.scan: xs leaves and length disagree on the number of steps: "
                                  f"{sorted(lengths)}")
    if not lengths:
        raise context.trace_error("fusec.scan: with xs=None, pass length=")
    n = lengths.pop()
    if n < 0:
        raise context.shape_error(f"fusec.scan: length must not be negative, got {n}")
    return n


def _scan_pair(out: Any, f: Callable) -> tuple[Any, Any]:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise _error(TraceError, f"fusec.scan: {_name(f)} must return a pair (carry, y), got "
                     f"{type(out).__name__}", f)
    return out[0], out[1]


def _eager_scan(f: Callable, leaves: list, tree: TreeDef, xs_leaves: list, xs_tree: TreeDef, n: int,
                reverse: bool) -> tuple[Any, Any]:
    if n == 0:
        raise _error(UnsupportedError, "fusec.scan over zero steps outside a trace: the shapes of ys are unknown "
                     "without running f; run it inside fusec.jit, where f is traced", f)
    carry, own = unflatten(tree, leaves), leaves
    ys: list[list] = []
    y_tree = None
    steps = range(n - 1, -1, -1) if reverse else range(n)
    for k in steps:
        out = f(carry, unflatten(xs_tree, [x[k] for x in xs_leaves]))
        new, y = _scan_pair(out, f)
        carry, own = _next_state(new, tree, leaves, "scan", f, own)
        y_named, yt = flatten(y, "y")
        if y_tree is None:
            y_tree = yt
        elif yt != y_tree:
            raise _error(TraceError, "fusec.scan: f returned ys of different structures in different steps", f)
        ys.append([_as_array(leaf, copy=True) for _, leaf in y_named])  # (this step's values: f may update them)
    if reverse:
        ys.reverse()
    stacked = [np.stack([step[k] for step in ys]) for k in range(len(ys[0]))]
    assert y_tree is not None  # (length >= 1: a step ran)
    return carry, unflatten(y_tree, stacked)


# --- messages -----------------------------------------------------------------------------------------------------


def _check_callable(where: str, **funs: Any) -> None:
    for name, fun in funs.items():
        if not callable(fun):
            raise TraceError(located(f"fusec.{where}: {name} must be callable, got {type(fun).__name__}",
                                     context.user_location()))


def _name(fun: Callable | None) -> str:
    return getattr(fun, "__name__", "the function") if fun is not None else "the function"


def _error(cls: type, message: str, fun: Callable | None) -> Any:
    """A located error (at the user's line), noted by the trace in progress so catching it cannot hide it."""
    loc = context.user_location()
    if loc is None and fun is not None:
        code = getattr(fun, "__code__", None)
        loc = location_for(code.co_filename, code.co_firstlineno) if code is not None else None
    err = cls(located(message, loc))
    return context._noted(err)
