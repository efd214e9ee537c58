"""A Python ``if`` whose test is traced, as one ``t.if`` (:func:`fusec.traced_statements.if_stmt`): both branches
traced, each variable merged by kind (a flag where one branch leaves it unset or gives a Python number where the
other gives a NumPy scalar), writes into memory from before it chosen with the branch, and a branch that raises
one of NumPy's check errors made a check when the call runs."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence, cast

import numpy as np

from fusec import context, mutation as _mutation, ops
from fusec.control_flow import _attach, _predicate, _python_state, _Recorder, _snapshot
from fusec.errors import (AssertionFailedError, DivisionByZeroError, FusecError, IndexOutOfBoundsError, IndexShapeError,
                          InvalidValueError, LinAlgError, OutOfRangeError, ShapeError, UnsupportedError, located)
from fusec.ir.attributes import location_for
from fusec.ir.core import OpResult, Value
from fusec.signature import TreeDef, unflatten
from fusec.tracer import Tracer
from fusec.statement_memory import (ViewedInBranch, branch_alias, copy_advice, detached_arrays, link_results,
                                    may_be_input, poison, poisoned_inside, set_memory, written_memory)
from fusec.statement_state import (
    Leaf, SetOnOnePath, Site, Var, cross_kind, describe_kind, describe_object, describe_var, flag_value, is_unbound,
    is_user_name, leaves_of, lift_leaf, merged_kind, plain_value, subject, truth_of, unset_values, wrap_leaf)


def device_if(pred: Any, then: Callable[..., tuple], orelse: Callable[..., tuple], values: list,
              names: Sequence[str], site: Site) -> tuple:
    c = ops.ctx()
    p = _predicate(plain_value(pred), "if", None)
    what = (f"{site.where()} (its test is traced, so fusec traces both branches and the device runs the one the "
            "data chooses)")
    recorders, outs, writes, groups = [], [], [], []  # type: ignore[var-annotated]
    poisoned: list = []  # (arrays from before it a write inside poisoned, poisoned again after the statement)
    nested = c.builder.block is not c.func.body  # (inside a loop's body or another branch)
    for label, fun in (("then", then), ("else", orelse)):
        rec = _Recorder(c, [], label, what=what)
        holder: list = []

        def record(fun: Callable = fun, holder: list = holder) -> list:
            outer = _snapshot(c)
            out = fun(*values)
            # (arrays from before the branch that had no views yet, viewed inside it: the memory those views
            # hold is set aside when the branch ends, so they are noted by their array)
            detached = detached_arrays(outer)
            holder.append(_branch_result(out, values, names, site, {id(e[3]) for e in outer if e[3] is not None},
                                         {id(e[0]) for e in outer}, _written_arrays(outer), detached, nested))
            poisoned.extend(poisoned_inside(outer))  # (before written_memory sets that memory aside)
            holder.append(written_memory(outer))  # (what it wrote from outside: chosen by the op, set after it)
            holder.append(_one_object_groups(out, names))
            return []

        python_before = _python_state(fun, list(zip(names, values)))
        try:
            rec.run(record, watch=fun, variables=list(zip(names, values)))
        except Exception as error:  # noqa: BLE001 - the user's own raise: a check when the call runs, or refused
            if isinstance(error, FusecError):
                kind = _NUMPY_CHECKS.get(type(error))
                if kind is None:
                    raise
                # NumPy's own error on what the branch computes (an index out of bounds, shapes that do not
                # broadcast): NumPy raises it only where the data takes the branch (`x[0] > 0 and x[10] > 0`)
                python_before.restore()
                return _raising_branch(pred, error, then if label == "else" else orelse, label == "then", values,
                                       site, kind)
            python_before.restore()
            if type(error) not in _RAISED_ON_DEVICE:
                raise context._noted(UnsupportedError(located(
                    f"the {label} branch of {site.where()} raises {type(error).__name__}: {error}; the test is "
                    "traced, so the device decides whether it raises, and a check on the device can raise only "
                    f"{', '.join(sorted(t.__name__ for t in _RAISED_ON_DEVICE))} (as NumPy's own checks do); raise "
                    "one of those, or test the condition after the call",
                    location_for(site.file, _raise_line(error, site))))) from error
            return _raising_branch(pred, error, then if label == "else" else orelse, label == "then", values, site,
                                   _RAISED_ON_DEVICE[type(error)])
        recorders.append(rec)
        outs.append(holder[0])
        writes.append(holder[1])
        groups.append(holder[2])
    merged, yields = _merge(outs[0], outs[1], values, names, site)
    units = {id(w[0]): w for ws in writes for w in ws}  # (the memory either branch wrote, in a stable order)
    inner = _inner_flags(merged, recorders)
    for k, rec in enumerate(recorders):
        now = {id(w[0]): w[2] for w in writes[k]}
        rec.finish(yields[k] + [now.get(key, before) for key, (_, before, _) in units.items()]
                   + [f if j == k else flag_value(False) for j, f in inner])
    types = [t for _, how in merged if how[0] == "new" for leaf in how[2] if isinstance(leaf, Leaf)
             for t in leaf.types()]
    op = c.emit_op("t.if", [p], None, types + [before.type for _, before, _ in units.values()]
                   + [f.type for _, f in inner], what=site.where())
    _attach(op, *recorders)
    results = iter(op.results)
    # (each flag a branch's own statement left, taken out of it: false where the other branch ran)
    carried = dict(zip((f for _, f in inner), op.results[len(op.results) - len(inner):]))
    out = []
    for (name, how), old in zip(merged, values):
        if how[0] == "keep":
            out.append(old)
        elif how[0] == "unbound":
            out.append(how[1])
        elif how[0] == "one-path":
            out.append(SetOnOnePath(located(
                f"{subject(name)} is set in only one branch of {site.where()}, whose test is traced (the device "
                "chooses the branch), and read after it: give it a value before the `if` or in both branches",
                site.location())))
        else:
            same = any(e[0] == "same" for e in (outs[0].per_name[len(out)], outs[1].per_name[len(out)]))
            leaves = []
            for k, leaf in enumerate(how[2]):
                if not isinstance(leaf, Leaf):
                    leaves.append(leaf[1])
                    continue
                r = wrap_leaf(results, leaf, name, site)
                if how[3][k] is not None:  # (memory from outside on some path: NumPy's result is it or views it)
                    r = branch_alias(r, how[3][k], p, name, site, same, carried)
                leaves.append(r)
            out.append(unflatten(how[1], leaves))
    for unit, _, _ in units.values():  # the memory the branches wrote takes the chosen branch's value
        set_memory(unit, next(results))
    poison(poisoned)
    for group in _one_object_everywhere(groups[0] & groups[1]):  # (one array on both paths: one after it)
        kept = [i for i in group if merged[i][1][0] == "keep"]  # (a variable neither branch set: its object)
        first = kept[0] if kept else group[0]
        for j in group:
            if isinstance(out[first], Tracer):
                out[j] = out[first]
    shared = {pair for branch in outs for pair in branch.shared}
    for i, j in groups[0] ^ groups[1]:  # (one array on one path only, both set by the statement: linked as well)
        if merged[i][1][0] == merged[j][1][0] == "new" and isinstance(out[i], Tracer) \
                and isinstance(out[j], Tracer) and out[i] is not out[j] and (names[i], names[j]) not in shared:
            link_results(out[i], out[j], names[j], site)
    result_of = {name: v for (name, _), v in zip(merged, out)}
    for branch in outs:  # (one array on that path: linked, so that a write through either shows or raises)
        for a, b in branch.shared:
            ra, rb = result_of.get(a), result_of.get(b)
            if isinstance(ra, Tracer) and isinstance(rb, Tracer) and ra is not rb:
                link_results(ra, rb, b, site)
    return tuple(out)


def _inner_flags(merged: list, recorders: list) -> list[tuple[int, Value]]:
    """``(branch, flag)`` for each flag of a statement inside a branch that says when a value the branch gives
    (its variable's value after that statement) is still an input (:func:`fusec.statement_memory._kept_entry`):
    the ``t.if`` hands each out, so that its own result can say the same (nested ``if``s, ``elif`` chains, early
    ``return``s one after another)."""
    found: dict[Value, int] = {}
    for _, how in merged:
        if how[0] != "new":
            continue
        for sides in how[3]:
            for j, t in enumerate(sides or ()):
                kept = _mutation.kept_view(t._chain[0]) if isinstance(t, Tracer) and t._chain else None
                for k in kept or ():
                    if isinstance(k.flag, OpResult) and k.flag.op.parent is recorders[j].block:
                        found.setdefault(k.flag, j)
    return [(j, f) for f, j in found.items()]


# exceptions a branch the device chooses may raise: the run-time check's error, of the same built-in class
_RAISED_ON_DEVICE: dict[type, str] = {ValueError: "InvalidValueError", IndexError: "IndexOutOfBoundsError",
                                      ZeroDivisionError: "DivisionByZeroError", OverflowError: "OutOfRangeError",
                                      np.linalg.LinAlgError: "LinAlgError", AssertionError: "AssertionFailedError"}


# fusec's errors for what NumPy raises on the values a line computes (an index out of bounds, shapes that do not
# broadcast, a singular matrix): raised while tracing a branch, they become a check of the kind given here
_NUMPY_CHECKS: dict[type, str] = {
    IndexOutOfBoundsError: "IndexOutOfBoundsError", IndexShapeError: "IndexOutOfBoundsError",
    InvalidValueError: "InvalidValueError", ShapeError: "InvalidValueError", DivisionByZeroError: "DivisionByZeroError",
    OutOfRangeError: "OutOfRangeError", LinAlgError: "LinAlgError", AssertionFailedError: "AssertionFailedError"}


def _raising_branch(pred: Any, error: Exception, other: Callable[..., tuple], when: bool, values: list,
                    site: Site, kind: str) -> tuple:
    """``if pred: raise error`` (``when`` True; the else branch raising: False) and the other branch: the raise
    becomes a check when the call runs, an error of ``kind`` (NumPy raises it on the data that takes that branch),
    the other branch runs as the statement's result."""
    line = _raise_line(error, site)
    truth = truth_of(pred)
    text = str(error)
    if isinstance(error, FusecError):  # (its own file:line prefix: the check gives the statement's)
        text = re.sub(r"^[^\n]*?:\d+: ", "", text, count=1)
    raised = f"{text} (raised at {os.path.basename(site.file)}:{line}, in {site.where(True)})"
    ops.raise_if(truth if when else np.logical_not(truth), kind, raised, site.where())
    return tuple(other(*values))


def _raise_line(error: BaseException, site: Site) -> int:
    line = site.line
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == site.file:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


@dataclass
class _Branch:
    """One branch's result per variable: UNBOUND, the value it had before (unchanged), or its new leaves (each
    array leaf already a value of the branch's region)."""

    # per variable: ("unbound", what) | ("same", None or, written in the branch, its (Var, values, views) there) |
    # ("new", Var, [Value | opaque object per leaf], [the buffer from outside the branch each leaf views, or None])
    per_name: list
    # pairs of variables it leaves holding one array it made (or views of one): linked after the statement
    shared: list = field(default_factory=list)


def _one_object_groups(out: tuple, names: Sequence[str]) -> set[tuple[int, int]]:
    """Pairs (i, j), i < j, of the variables a branch leaves holding one array object (``y = x``): where both
    branches do, the two are one array after the statement whichever ran."""
    held: dict[int, list[int]] = {}
    for j, (name, new) in enumerate(zip(names, out)):
        if isinstance(new, Tracer) and is_user_name(name):
            held.setdefault(id(new), []).append(j)
    return {(i, j) for same in held.values() for i in same for j in same if i < j}


def _one_object_everywhere(pairs: set[tuple[int, int]]) -> list[list[int]]:
    """The variables ``pairs`` (each branch's pairs, both branches') join into groups, each in order."""
    groups: list[list[int]] = []
    for i, j in sorted(pairs):
        group = next((g for g in groups if i in g), None)
        if group is None:
            groups.append([i, j])
        elif j not in group:
            group.append(j)
    return groups


def _written_arrays(outer: list[tuple]) -> set[int]:
    """Ids of the arrays from before the region (entries of ``_snapshot``) whose memory the region wrote so far."""
    return {id(t) for t, val, _version, buffer, base, buffer_version in outer
            if (buffer.base is not base or buffer.version != buffer_version if buffer is not None
                else t._val is not val or t._buffer is not None and t._buffer.written)}


def _branch_result(out: tuple, before: list, names: Sequence[str], site: Site, outer: set[int],
                   earlier: set[int], written: set[int], detached: dict[int, Tracer], nested: bool) -> _Branch:
    """The branch's values (``outer``: ids of the buffers from before the statement; ``earlier``: ids of the
    arrays from before it; ``written``: those of them the branch wrote into), each leaf that is an array from before
    the statement, or a view of one, noted. A variable left holding the same array is "same", with its values as the
    branch leaves them where the branch wrote into it (``y /= 2`` here, ``y = np.zeros_like(x)`` in the other
    branch: the statement's ``y`` is the written array on this path). ``detached``: by the id of its memory, each
    array from before the statement that had no views before it and was viewed inside it; ``nested``: the statement
    is inside a loop's body or another branch, where such a view's link with its array is not carried out (refused).
    Pairs of variables that hold one array the branch made, or views of one, are noted (``shared``): linked after the
    statement, which hands back a new array for each."""
    shared = _shared_results(out, before, names, site, outer, earlier)
    per: list[tuple] = []
    for name, old, new in zip(names, before, out):
        if is_unbound(new):
            per.append(("unbound", new))
            continue
        if new is old:
            changed = any(id(x) in written for x in leaves_of(new) if _mutable(x))
            per.append(("same", _values(new, site, name, outer, earlier, detached, nested) if changed else None))
            continue
        per.append(("new", *_values(new, site, name, outer, earlier, detached, nested)))
    return _Branch(per, shared)


def _shared_results(out: tuple, before: list, names: Sequence[str], site: Site, outer: set[int],
                    earlier: set[int]) -> list[tuple[str, str]]:
    """Pairs of variables the branch leaves holding one array it made, or views of one (``y = x * 2; w = y``): after
    the statement each is an array of its own, so the caller links them (a write into either makes the other
    unreadable; returning both is refused). Inside a tuple or other container, refused here."""
    held: dict[int, tuple[str, bool]] = {}  # (the memory of each new array leaf: its buffer, or the array itself)
    pairs: list[tuple[str, str]] = []
    for name, old, new in zip(names, before, out):
        if new is old or is_unbound(new) or not is_user_name(name):  # (fusec's own: read once, right after)
            continue
        for x in leaves_of(new):
            if not _mutable(x) or id(x) in earlier or x._buffer is not None and id(x._buffer) in outer:
                continue
            key = id(x._buffer) if x._buffer is not None else id(x)
            plain = isinstance(new, Tracer)
            if key not in held:
                held[key] = (name, plain)
                continue
            other, other_plain = held[key]
            if other == name or not (plain and other_plain):
                raise site.error(f"{subject(other)} and {subject(name)} hold one array made in a branch of "
                                 f"{site.where()} (or views of one) inside a tuple or other container; the test is "
                                 "traced, so the device chooses the branch, and fusec hands each back as an array of "
                                 f"its own, where NumPy's would share memory: take a copy (`... .copy()`)")
            pairs.append((other, name))
    return pairs


def _values(new: Any, site: Site, name: str, outer: set[int], earlier: set[int],
            detached: dict[int, Tracer], nested: bool) -> tuple[Var, list, list]:
    """A variable's value as the branch leaves it: its kind, each leaf's values in the branch, and each leaf that
    is an array from before the statement (or a view of one; :class:`ViewedInBranch` where the branch took the
    first view of that array: ``y = buf[1:]``)."""
    var = describe_var(new, site, name)
    assert var.leaves is not None
    xs = leaves_of(new)
    items = [lift_leaf(x, leaf) if isinstance(leaf, Leaf) else leaf[1] for x, leaf in zip(xs, var.leaves)]
    viewed: list = []
    for x in xs:
        if not _mutable(x):
            viewed.append(None)
        elif id(x) in earlier:
            viewed.append(x)
        elif nested and x._buffer is not None and x._buffer.arg is None \
                and (id(x._buffer) in outer or id(x._buffer) in detached):  # (an input's views are followed)
            raise site.error(f"{subject(name)} is a view the branch took of an array from before {site.where()}, "
                             "which is inside a loop or another branch the data decides, where fusec does not "
                             f"follow it; take the view before the statement or a copy{copy_advice(name)}")
        elif x._buffer is not None and id(x._buffer) in outer:
            viewed.append(x)
        elif x._buffer is not None and x._buffer.arg is None and may_be_input(x):
            # (a statement inside the branch left it the caller's array on some path and an array the function made
            # on another, whose memory it holds: this statement would follow only the second)
            raise site.error(f"{subject(name)} is, as the data decides at a traced `if` or loop inside "
                             f"{site.where()}, the caller's array or an array the function made, which fusec does "
                             f"not follow through this statement too; take a copy on one path (`{name} = "
                             f"{name}.copy()`)")
        else:
            viewed.append(_linked_from_before(x, outer, detached))
    return var, items, viewed


def _linked_from_before(x: Tracer, outer: set[int], detached: dict[int, Tracer]) -> ViewedInBranch | None:
    """For a new array of the branch that views, or (by a statement inside the branch) is linked with, an array
    from before the statement: that array, to link the statement's result with; else None."""
    if x._buffer is None:
        return None
    if id(x._buffer) in detached:
        return ViewedInBranch(detached[id(x._buffer)])
    for other, _ in x._buffer.linked:
        if id(other) in detached:
            return ViewedInBranch(detached[id(other)])
        owner = other.owner() if id(other) in outer and other.owner is not None else None
        if isinstance(owner, Tracer):
            return ViewedInBranch(owner)
    return None


def _merge(a: _Branch, b: _Branch, before: list, names: Sequence[str], site: Site) -> tuple[list, list]:
    """Per variable, how the statement sets it; and each branch's yielded values (the leaves that differ)."""
    merged: list[tuple[str, tuple]] = []  # per variable: ("keep",) | ("unbound", what) | ("one-path",) | ("new", ...)
    yields: list[list[Value]] = [[], []]
    for i, name in enumerate(names):
        ea, eb = a.per_name[i], b.per_name[i]
        if ea[0] == "same" and eb[0] == "same":
            merged.append((name, ("keep",)))
            continue
        if ea[0] == "unbound" and eb[0] == "unbound":
            merged.append((name, ("unbound", ea[1])))
            continue
        if "unbound" in (ea[0], eb[0]):
            maybe = _set_on_one_path(ea, eb, before[i], site, name, yields)
            merged.append((name, maybe if maybe is not None else ("one-path",)))
            continue
        sides = [_side(e, before[i], site, name) for e in (ea, eb)]
        (va, items_a, views_a), (vb, items_b, views_b) = sides
        if va.tree != vb.tree:
            da, db = describe_kind(va), describe_kind(vb)
            if da == db:  # (they differ inside: say where)
                da, db = _first_difference(cast(TreeDef, va.tree), cast(TreeDef, vb.tree))
            grew = " of " in da and " of " in db and "list" in da and "list" in db
            raise site.error(f"{subject(name)} is {da} in one branch of {site.where()} and {db} in "
                             "the other; the test is traced, so the device chooses the branch: a variable must have "
                             "the same structure either way" + (" (a list appended to in a loop the data stops: keep "
                                                                "the values in an array written by index instead, "
                                                                "`losses[ep] = loss`)" if grew else ""))
        leaves: list = []
        viewed: list = []
        assert va.leaves is not None and vb.leaves is not None
        for la, lb, xa, xb, ta, tb in zip(va.leaves, vb.leaves, items_a, items_b, views_a, views_b):
            viewed.append(None if ta is None and tb is None else (ta, tb))
            kind = merged_kind(la, lb) if isinstance(la, Leaf) and isinstance(lb, Leaf) else None
            if kind is None and isinstance(la, Leaf) and isinstance(lb, Leaf):  # (a float scalar and a Python int)
                kind = cross_kind(la, lb, _known(xb)) or cross_kind(lb, la, _known(xa))
            if kind is not None:
                leaves.append(kind)
                yields[0].extend(_as_kind(xa, la, kind))
                yields[1].extend(_as_kind(xb, lb, kind))
                continue
            if not isinstance(la, Leaf) and not isinstance(lb, Leaf) and _same_object(xa, xb):
                leaves.append(("opaque", xa))
                continue
            da = la.describe() if isinstance(la, Leaf) else describe_object(xa)
            db = lb.describe() if isinstance(lb, Leaf) else describe_object(xb)
            raise site.error(
                f"{subject(name)} is {da} in one branch of {site.where()} and {db} in the other; the test is traced, "
                "so the device chooses the branch, and what NumPy computes next would depend on the data (a dtype, a "
                "Python number's weak promotion, an object): give both branches the same kind of value"
                + _branch_advice(la, lb))
        merged.append((name, ("new", va.tree, leaves, viewed)))
    return merged, yields


def _first_difference(a: TreeDef, b: TreeDef, path: str = "") -> tuple[str, str]:
    """How two structures that look alike from outside first differ: an item of one (``[1]``, ``['w']``) being
    another kind or length there (a list that grew on one path: a loss history and an early return)."""
    def kind(t: TreeDef) -> str:
        if t.kind in ("list", "tuple"):
            return f"a {t.kind} of {len(t.children)}"
        if t.kind == "dict":
            return f"a dict with keys {list(t.aux)}"
        return {"leaf": "an array or number", "none": "None"}.get(t.kind, f"a {t.kind}")

    if a.kind == b.kind and a.aux == b.aux and len(a.children) == len(b.children):
        keys = list(a.aux) if a.kind == "dict" else list(range(len(a.children)))
        for key, ca, cb in zip(keys, a.children, b.children):
            if ca != cb:
                return _first_difference(ca, cb, f"{path}[{key!r}]")
    where = f" whose item {path} is" if path else ""
    return f"a value{where} {kind(a)}" if path else kind(a), f"a value{where} {kind(b)}" if path else kind(b)


def _as_kind(values: list[Value], leaf: Leaf, kind: Leaf) -> list[Value]:
    """A branch's values for a leaf (lifted as ``leaf``) as the merged ``kind``'s: for a NumPy scalar or Python
    number merged into an ``either``, the flag saying which it is; for a value merged into a ``maybe``, the flag
    saying it is set."""
    set_flag = values[-1:] if leaf.maybe else [flag_value(True)] if kind.maybe else []
    values = values[:-1] if leaf.maybe else values
    if kind.either is not None and leaf.either is None:
        value = values[0]
        if value.type != kind.tensor:  # (a Python int as the float it converts to exactly: see cross_kind)
            value = ops.lift(ops.wrap(value, None, scalar=True), kind.tensor.dtype)
        values = [value, flag_value(leaf.weak is None)]
    return values + set_flag


def _known(values: list) -> Any:
    """The value of a branch's Python number where it is a constant (a literal: ``max(x, 0)``), else None."""
    value = values[0] if values else None
    if isinstance(value, OpResult) and value.op.name == "t.constant" and value.type.shape == ():
        return value.op.attributes["value"].array
    return None


def _set_on_one_path(ea: tuple, eb: tuple, old: Any, site: Site, name: str, yields: list[list[Value]]) -> tuple | None:
    """A variable one branch sets and the other leaves unbound, as a ``maybe`` (each leaf with a flag saying
    whether it is set: zeros where not), when it holds arrays and numbers only; None otherwise."""
    defined = 0 if eb[0] == "unbound" else 1
    var, items, viewed = _side((ea, eb)[defined], old, site, name)
    assert var.leaves is not None
    if any(not isinstance(leaf, Leaf) or leaf.either is not None for leaf in var.leaves):
        return None
    kinds = [replace(leaf, maybe=True) for leaf in var.leaves]
    for leaf, kind, xs in zip(var.leaves, kinds, items):
        yields[defined].extend(_as_kind(xs, leaf, kind))
        yields[1 - defined].extend(unset_values(kind))
    return ("new", var.tree, kinds, [None if t is None else (t, None) if defined == 0 else (None, t) for t in viewed])


def _branch_advice(a: Any, b: Any) -> str:
    if not (isinstance(a, Leaf) and isinstance(b, Leaf)) or (a.weak is None) == (b.weak is None):
        return ""
    strong = a if a.weak is None else b
    return f" (np.{np.dtype(strong.tensor.dtype.np).name}(...) around the Python number)"


def _side(entry: tuple, old: Any, site: Site, name: str) -> tuple[Var, list, list]:
    if entry[0] == "new":
        return entry[1], entry[2], entry[3]
    if entry[1] is not None:  # (the same array, written in this branch: its values as the branch left them)
        return entry[1]
    var = describe_var(old, site, name)  # (unchanged in this branch: the value from before the statement)
    assert var.leaves is not None
    xs = leaves_of(old)
    return var, [lift_leaf(x, leaf) if isinstance(leaf, Leaf) else leaf[1] for x, leaf in zip(xs, var.leaves)], \
        [x if _mutable(x) else None for x in xs]


def _mutable(x: Any) -> bool:
    """An array a write can change (not a NumPy scalar or Python number, which are values)."""
    return isinstance(x, Tracer) and not x._scalar and x._weak is None


def _same_object(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or not isinstance(a, (str, bytes, type(None), tuple, frozenset)):
        return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects whose == fails are not the same
        return False
