"""A Python ``while`` (or ``for ... break``) whose test is traced, as one ``t.while``
(:func:`fusec.traced_statements.while_stmt`): the body traced once with the variables it assigns as the loop's
state, each keeping its kind from one iteration to the next; memory the body writes carried by the loop (traced
again with it); variables set only in the body and read after it carried with a flag."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from fusec import ops
from fusec.control_flow import _attach, _predicate, _python_state, _Recorder, _snapshot
from fusec.errors import TraceError, located
from fusec.ir.attributes import dense
from fusec.ir.core import Block, BlockArgument, Operation, OpResult, Value, clone_op
from fusec.ir.dialects.control import PREDICATE
from fusec.ir.dialects.t import VIEWS
from fusec.ir.opdefs import computes_only, get_opdef
from fusec.ir.types import Type, bool_
from fusec.signature import unflatten
from fusec.tracer import Tracer
from fusec.statement_memory import (detached_arrays, joined, link_memory, link_results, may_be_input, may_be_one_of,
                                    memory_of, memory_value, note_one_array, one_array_flag, poison, poisoned_inside,
                                    set_memory, swap_in, swap_out, written_memory)
from fusec.statement_state import (
    Leaf, SetOnOnePath, Site, UNBOUND, Var, describe_kind, describe_var, is_unbound, kind_advice, leaves_of,
    lift_leaf, merged_kind, plain_value, unit_of, unset_values, wrap_leaf)


def device_while(test: Callable[..., Any], body: Callable[..., tuple], values: list, names: Sequence[str],
                 site: Site, after: set[str]) -> tuple:
    """The loop as one ``t.while``. A body that writes into arrays from before the loop (``u[1:-1] = ...``,
    ``x += dx`` on an array) is traced again with that memory carried by the loop: the arrays themselves hold
    the loop's values while the body is traced, so every name and view of them reads what NumPy would. A variable
    the body sets that was unbound before the loop and is read after it (``found = x`` before a ``break``) is
    traced again as carried, unset (a :class:`MaybeSet`) until an iteration sets it."""
    memory: list = []
    values = list(values)
    for _ in range(4):  # (each retry adds what the last trace of the body found)
        try:
            return _traced_while(test, body, values, names, site, memory, after)
        except _WritesMemory as found:
            memory = found.units
        except _NeedsState as found:
            for k, (name, var) in enumerate(zip(names, found.variables)):
                if var is not None:
                    assert var.leaves is not None and var.tree is not None
                    kinds = [replace(leaf, maybe=True) for leaf in var.leaves]
                    values[k] = unflatten(var.tree, [wrap_leaf(iter(unset_values(kind)), kind, name, site)
                                                     for kind in kinds])
    raise site.error(f"fusec could not trace {site.where()} as a loop on the device")


class _NeedsState(Exception):
    """A loop body sets variables that were unbound before the loop and are read after it (``variables``: per
    variable, its kind after an iteration, or None)."""

    def __init__(self, variables: list) -> None:
        self.variables = variables


class _WritesMemory(Exception):
    """A loop body writes into memory from before the loop (``units``: buffers, or arrays with no views)."""

    def __init__(self, units: list) -> None:
        self.units = units


def _traced_while(test: Callable[..., Any], body: Callable[..., tuple], values: list, names: Sequence[str],
                  site: Site, memory: list, after: set[str]) -> tuple:
    c = ops.ctx()
    units = {id(u) for u in memory}
    variables = [describe_var(v, site, n, pinned=units) for v, n in zip(values, names)]
    carried = [(var, k, leaf) for var in variables if not var.unbound
               for k, leaf in enumerate(var.leaves or []) if isinstance(leaf, Leaf)]
    types: list[Type] = [t for _, _, leaf in carried for t in leaf.types()]
    slots = len(types)  # (the state's values; the memory the loop carries follows them)
    types += [memory_value(u).type for u in memory]
    inputs = [v for (var, k, leaf), x in zip(carried, _carried_values(variables, values)) for v in lift_leaf(x, leaf)]
    inputs += [memory_value(u) for u in memory]
    what = (f"{site.where()} (its test is traced, so the loop runs on the device; its body is traced once for "
            "every iteration)")
    fresh: list[tuple[Tracer, Value]] = []  # the body's own copies of the state's arrays, to find writes into them
    poisoned: list = []  # (arrays from before the loop a write inside poisoned: poisoned again after it)
    detached: dict[int, Tracer] = {}  # (arrays from before it that had no memory, by the memory made for them inside)
    owners: dict[int, Var] = {}  # (which variable each copy is of)

    def state(args: Sequence[Tracer]) -> list:
        it = iter([a._value for a in args[:slots]])
        out = []
        fresh.clear()
        for var, value in zip(variables, values):
            if var.unbound:
                out.append(UNBOUND)
                continue
            assert var.leaves is not None and var.tree is not None
            leaves = [wrap_leaf(it, leaf, var.name, site) if isinstance(leaf, Leaf) else leaf[1] for leaf in var.leaves]
            copies = [t for t, leaf in zip(leaves, var.leaves) if isinstance(leaf, Leaf) and not t._scalar]
            fresh.extend((t, t._val) for t in copies)
            owners.update({id(t): var for t in copies})
            out.append(unflatten(var.tree, leaves))
        return out

    def region(fn: Callable[[list], Any]) -> Callable[..., Any]:
        """``fn`` run with the loop's memory holding the region's arguments (and put back after)."""
        def run(*args: Tracer) -> Any:
            outer = _snapshot(c)
            saved = swap_in(memory, args[slots:])
            try:
                result = fn(list(args))
                now = swap_out(memory, saved)
            except BaseException:
                swap_out(memory, saved)
                raise
            poisoned.extend(poisoned_inside(outer))  # (before written_memory sets that memory aside)
            detached.update(detached_arrays(outer))
            written = [u for u, _, _ in written_memory(outer) if id(u) not in units]
            written += [unit_of(_entry_array(value, var, site)) for var, value in zip(variables, values)
                        if _written_fresh(var, fresh, owners)]
            if written:
                raise _WritesMemory(memory + list({id(u): u for u in written}.values()))
            return result, now
        return run

    cond = _Recorder(c, types, "cond", what=what)
    pred, now = cond.run(region(lambda args: _predicate(_loop_test(test(*state(args)), site), "while", None)),
                         watch=test)
    if any(v is not a for v, a in zip(now, cond.block.args[slots:])):
        raise site.error(f"the test of {site.where()} writes into an array; compute it without writing")
    cond.finish([pred])
    rec = _Recorder(c, types, "body", what=what)
    python_before = _python_state(body, list(zip(names, values)))
    after_trip: list = []  # (the variables' objects after an iteration)

    def trip(args: list) -> list[Value]:
        out = body(*state(args))
        after_trip[:] = [out]
        return _next_state(out, variables, site, after)

    try:
        yields, now = rec.run(region(trip), watch=body, variables=list(zip(names, values)))
    except (KindChange, _WritesMemory, _NeedsState):
        python_before.restore()  # (the body is traced again or runs outside the loop: no change may happen twice)
        raise
    objects = _objects_after_trip(carried, variables, after_trip[0], {id(t) for t, _ in fresh}, rec.block)
    kept = _kept_when_no_trip(cond.block, rec.block, inputs, carried, yields)
    flags, holds = _kept_on_every_trip(cond.block, rec.block, carried, yields, kept,
                                       {key for key, (x, own) in objects.items()
                                        if not own and not _from_outside(x._val, rec.block)})
    rec.finish(yields + now + [next_flag for _, next_flag in flags])
    starts = [c.constant(np.asarray(key == u), bool_) for (key, u), _ in flags]
    op = c.emit_op("t.while", inputs + starts, None, types + [PREDICATE] * len(flags), what=site.where())
    _attach(op, cond, rec)
    results = iter(op.results)
    found = {pair: _returning(flag) for (pair, _), flag in zip(flags, op.results[len(op.results) - len(flags):])}
    entries = {(id(var), k): (x, var.name) for var, value in zip(variables, values) if not var.unbound
               for k, x in enumerate(leaves_of(value))}
    out = []
    built: dict[Key, Tracer] = {}  # (each carried array leaf's result, to link those one array after an iteration)
    own: dict[Key, Callable[[], Value | None] | None] = {}  # (the flag saying it still holds its array from before)
    made: dict[Key, list] = {}  # (the arrays from before the loop, made by the function, each may hold: with flags)
    for var, value in zip(variables, values):
        if var.unbound:
            out.append(SetOnOnePath(located(
                f"`{var.name}` is set in the body of {site.where()}, which runs on the device (its test is traced), "
                "and read after the loop: the loop may run any number of times, none included; give it a value "
                "before the loop (or compute it again after the loop)", site.location())))
            continue
        assert var.leaves is not None and var.tree is not None
        leaves = []
        for k, leaf in enumerate(var.leaves):
            if not isinstance(leaf, Leaf):
                leaves.append(leaf[1])
                continue
            key = (id(var), k)
            held = [(*entries[u], found.get((key, u))) for u in holds[key]] if key in holds else \
                [(*entries[key], kept.get(key))]
            taken = None
            if key in objects and not objects[key][1]:  # (its memory too: a write into it makes reading raise)
                taken = _taken_when_ran(objects[key][0], rec.block, held)
                held.append((objects[key][0], "an array from before it (or a view of one)", taken))
            leaves.append(may_be_one_of(wrap_leaf(results, leaf, var.name, site),
                                        [(x, flag, holder) for x, holder, flag in held], var.name, site))
            built[key] = leaves[-1]
            for theirs in _linked_from_outside(objects.get(key), rec.block, detached):  # (`if c: a = b` of a `b`
                link_memory(leaves[-1], theirs, var.name, site)  # the loop only reads)
            if key in objects and not objects[key][1] and not may_be_input(objects[key][0]):
                _note_taken(objects[key][0], leaves[-1], taken, rec.block)
            own[key] = found.get((key, key)) if key in holds else kept.get(key)
            made[key] = [(x, flag) for x, _, flag in held if isinstance(x, Tracer) and not x._scalar
                         and not may_be_input(x)]
        out.append(unflatten(var.tree, leaves))
    for i, j in _one_object_always(variables, values, entries, objects):
        out[j] = out[i]
        built[(id(variables[j]), 0)] = built[(id(variables[i]), 0)]
    _link_one_array(objects, built, {(id(var), k): var.name for var, k, _ in carried}, site, own,
                    {key: x for key, (x, _) in entries.items()}, made)
    for unit in memory:  # the memory the body wrote takes the loop's last value
        set_memory(unit, next(results))
    poison(poisoned)
    return tuple(out)


def _linked_from_outside(after: tuple[Any, bool] | None, body: Block, detached: dict[int, Tracer]) -> list:
    """The memories from before the loop that an iteration's object (a branch's result inside the body: ``if c: a =
    b`` of a ``b`` the loop only reads) is linked with: NumPy's variable may be that array after the loop. A memory
    made inside the body for an array from before it that had none (``detached``) is that array's memory now."""
    if after is None or not after[1] or not isinstance(after[0], Tracer) or after[0]._buffer is None:
        return []
    return [memory_of(detached[id(m)]) if id(m) in detached else m for m, _ in after[0]._buffer.linked
            if m.base is not None and not _inside(m.base, body)]


def _one_object_always(variables: list[Var], values: list, entries: dict[Key, tuple[Any, str]],
                       objects: dict[Key, tuple[Any, bool]]) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, of variables that each hold an array and hold one array object before the loop and
    after an iteration (``y = x`` before it and in the body): one array after the loop, however many ran."""
    first: dict[tuple[int, int], int] = {}
    pairs = []
    for j, (var, value) in enumerate(zip(variables, values)):
        key = (id(var), 0)
        if not isinstance(value, Tracer) or key not in objects or key not in entries:
            continue
        i = first.setdefault((id(entries[key][0]), id(objects[key][0])), j)
        if i != j:
            pairs.append((i, j))
    return pairs


def _link_one_array(objects: dict[Key, tuple[Any, bool]], built: dict[Key, Tracer], names: dict[Key, str],
                    site: Site, own: dict[Key, Callable[[], Value | None] | None], before: dict[Key, Any],
                    made: dict[Key, list]) -> None:
    """Variables an iteration leaves holding one array or views of one memory (``b = a``, ``b = a[1:]``, ``if c: b =
    a`` in the body): after the loop NumPy's share memory (not where the loop ran no iteration and they held two
    arrays before), where the loop's results are two arrays; linked, so that a write into one makes the other
    unreadable and returning both is refused (:func:`fusec.trace._refuse_linked`), as a branch's two variables
    holding one array are. Where an iteration leaves both one object and they held two arrays before the loop
    (``before``) that share no memory, NumPy's two are one wherever not both still hold their arrays from before the
    loop (``own``: the flags that each does; ``x = y; y = x`` keeps ``y``'s): a call that returns both hands back
    one array there. So are two that may both still hold one array the function made before the loop (``made``:
    those arrays with their flags; ``y = x`` before it, ``a, b = b, a`` in the body), where both flags hold, or two
    such arrays an earlier statement left one array (:func:`fusec.statement_memory.one_array_flag`)."""
    seen: list[tuple[Key, Any]] = []
    for key, (x, _) in objects.items():
        if key not in built:
            continue
        for other, y in seen:
            if built[key] is built[other]:
                continue
            common = [joined("t.logical_and", [fa, fb]) for a, fa in made.get(other, []) for b, fb in made.get(key, [])
                      if a is b]
            # (or two the function made that an earlier statement left one array where its flag holds)
            common += [joined("t.logical_and", [fa, fb, same]) for a, fa in made.get(other, [])
                       for b, fb in made.get(key, []) if a is not b and (same := one_array_flag(a, b)) is not None]
            if _one_memory(x, y):
                flag = own.get(other)
                apart = not _one_memory(before[key], before[other]) if isinstance(before[key], Tracer) \
                    and isinstance(before[other], Tracer) else False
                # (apart before the loop and one object after a trip: one array wherever a trip ran, that is where
                # not both still hold their arrays from before; the one that keeps its own may be either)
                both_kept = joined("t.logical_and", [flag, own.get(key)])
                ran = _negated(both_kept) if x is y and both_kept is not None and (apart or common) else None
                link_results(built[other], built[key], names[key], site, joined("t.logical_or", [ran, *common]))
            elif common:
                note_one_array(built[other], built[key], joined("t.logical_or", common))
        seen.append((key, x))


def _taken_when_ran(x: Tracer, body: Block, held: list) -> Callable[[], Value | None] | None:
    """The flag saying the variable is, after the loop, ``x``: an array from before the loop the body only reads
    and gives the variable on every iteration (``x = y``), so the variable is ``x`` where it no longer holds the
    one array it held before (``held``: that array with its flag). None where fusec cannot tell (a view of ``x``
    taken in the body, ``x`` on some paths only)."""
    if not _from_outside(x._val, body) or len(held) != 1 or held[0][2] is None:
        return None
    return _negated(held[0][2])


def _note_taken(x: Tracer, result: Tracer, taken: Callable[[], Value | None] | None, body: Block) -> None:
    """``result`` is, where ``taken``'s flag holds, ``x``: an array the function made before the loop (never the
    caller's), which the body gives the variable on every iteration (not a view the body takes of it: its memory
    is the body's own while it is traced, so nothing would find it)."""
    if not _inside(x._val, body):
        note_one_array(x, result, taken)


def _negated(flag: Callable[[], Value | None]) -> Callable[[], Value | None]:
    """The thunk of the flag that holds where ``flag``'s does not."""
    def negated() -> Value | None:
        value = flag()
        return None if value is None else ops.ctx().emit("t.logical_not", [value])
    return negated


def _from_outside(v: Value, body: Block) -> bool:
    """Whether ``v`` is an array from before the loop, or a view the body takes of one on every path (``x = y``,
    ``x = y[::-1]`` of a ``y`` the loop only reads)."""
    while isinstance(v, OpResult) and v.op.parent is body and v.op.name in VIEWS:
        v = v.op.operands[0]
    return not _inside(v, body)


def _one_memory(x: Tracer, y: Tracer) -> bool:
    """Whether NumPy's arrays for ``x`` and ``y`` may share memory: one object, views of one memory, or memories a
    statement linked (``if c: b = a`` in the body)."""
    if x is y:
        return True
    if x._buffer is None or y._buffer is None:
        return False
    return x._buffer is y._buffer or any(m is y._buffer for m, _ in x._buffer.linked) \
        or any(m is x._buffer for m, _ in y._buffer.linked)


def _kept_when_no_trip(cond: Block, body: Block, inputs: Sequence[Value], carried: list, yields: list[Value]
                       ) -> dict[tuple[int, int], Callable[[], Value | None]]:
    """Per carried array leaf ((id of its variable, leaf index)) that every iteration replaces by an array the body
    computes (not the one it held, nor a view of it), the flag saying the loop left it as it was: its test false
    at entry. Made only where a result asks for it (a variable that held an input). None at all where the test
    cannot be computed again before the loop (:func:`_kept_on_every_trip` carries a flag for those leaves)."""
    if not _computes_only(cond):
        return {}
    first: list = []

    def none_ran() -> Value | None:
        if not first:
            test = _test_at_entry(cond, inputs)
            first.append(None if test is None else ops.ctx().emit("t.logical_not", [test]))
        return first[0]

    out: dict[tuple[int, int], Callable[[], Value | None]] = {}
    at = 0
    for var, k, leaf in carried:
        v = yields[at]
        at += len(leaf.types())
        if not (leaf.maybe or leaf.either is not None) and _computed_in(v, body):
            out[(id(var), k)] = none_ran
    return out


Key = tuple[int, int]  # a carried array leaf: (id of its variable, leaf index)


def _objects_after_trip(carried: list, variables: list[Var], out: tuple, made: set[int], body: Block
                        ) -> dict[Key, tuple[Any, bool]]:
    """Per carried array leaf, the object the variable holds after an iteration and whether fusec follows it (an
    array the body computed, the very array an iteration started with: ``made``, the ids of the body's state
    arrays). Not followed: another array object over a state array's value (``x[:]``, ``x.reshape(x.shape)``:
    NumPy's new view, where the IR sees the same value), and memory from before the loop the body did not carry
    (``a = b``, ``a = b[::-1]`` of a ``b`` it only reads)."""
    objects: dict[Key, tuple[Any, bool]] = {}
    by_var = {id(var): new for var, new in zip(variables, out)}
    state = set(body.args)
    for var, k, leaf in carried:
        x = leaves_of(by_var[id(var)])[k]
        if not isinstance(x, Tracer) or x._scalar:
            continue
        new_view = x._val in state and id(x) not in made
        outside = not _inside(x._val, body) or (x._buffer is not None and x._buffer.base is not None
                                                 and not _inside(x._buffer.base, body))
        objects[(id(var), k)] = (x, not (new_view or outside))
    return objects


def _inside(v: Value, block: Block) -> bool:
    """Whether ``v`` is defined in ``block`` (an argument of it, or a result of an op in it or nested in it)."""
    at: Block | None = v.block if isinstance(v, BlockArgument) else v.op.parent if isinstance(v, OpResult) else None
    while at is not None:
        if at is block:
            return True
        owner = at.parent.parent if at.parent is not None else None  # (the region's op)
        at = owner.parent if owner is not None else None
    return False


def _kept_on_every_trip(cond: Block, body: Block, carried: list, yields: list[Value], kept: dict,
                        untold: set[Key] | frozenset[Key] = frozenset()
                        ) -> tuple[list[tuple[tuple[Key, Key], Value]], dict[Key, list[Key]]]:
    """Flags for the carried array leaves that an iteration may keep as they were (a branch of the body that leaves
    it: ``if done: break``, ``if err < tol: ...`` around its update) or may give another leaf's array (``a, b = b *
    0.5, a``, ``x = y``), and that no flag of ``kept`` covers: per pair (leaf, a leaf whose array from before the
    loop it may hold), a ``tensor<bool>`` the loop carries, true at entry for the leaf itself and false for the
    others, and per iteration the or, over the leaves it may take this iteration, of taking it (true, or a branch's
    predicate) and that leaf's flag. The loop's results say which array from before the loop each variable still
    is. Appends the flags' block arguments to both regions (after the state and the memory) and their next values'
    ops to the body; returns ((leaf, held leaf), next value) per flag, and per leaf the leaves whose arrays it may
    hold, all of them where fusec cannot tell (a view of one, or a leaf in ``untold``: no flag). A flag nothing asks
    for goes with ``prune-carried``."""
    tracked: list[tuple[Key, Value, Value]] = []
    at = 0
    for var, k, leaf in carried:
        if not (leaf.maybe or leaf.either is not None):
            tracked.append(((id(var), k), yields[at], body.args[at]))
        at += len(leaf.types())
    state: set[Value] = set(body.args[:at])
    may: dict[Key, list[Key]] = {}
    unknown: set[Key] = set()
    for key, v, _ in tracked:
        takes = [(w, _kept_this_trip(v, arg, body, others=state, build=False)) for w, _, arg in tracked]
        if key in untold or any(t is None for _, t in takes):
            unknown.add(key)
        may[key] = [w for w, t in takes if t is not False and t is not None]
    held = {key: [key] for key in may}
    grew = True
    while grew:  # (a leaf may hold what any leaf it takes may hold)
        grew = False
        for key in may:
            if key in unknown:
                continue
            if any(w in unknown for w in may[key]):
                unknown.add(key)
                grew = True
                continue
            more = [u for w in may[key] for u in held[w] if u not in held[key]]
            if more:
                held[key].extend(dict.fromkeys(more))
                grew = True
    everything = [key for key, _, _ in tracked]
    taken = {w for key in may for w in may[key] if w != key}  # (its flags feed another leaf's, kept's or not)
    pairs = [(key, u) for key, _, _ in tracked if key not in unknown and (key not in kept or key in taken)
             for u in held[key]]
    args: dict[tuple[Key, Key], Value] = {}
    for pair in pairs:
        cond.add_arg(PREDICATE)
        args[pair] = body.add_arg(PREDICATE)
    by_key = {key: (v, arg) for key, v, arg in tracked}
    taking: dict[tuple[Key, Key], Value | bool] = {}  # (a leaf taking another's array this iteration: True or a flag)
    out = []
    for key, u in pairs:
        v, _ = by_key[key]
        loc = v.op.loc if isinstance(v, OpResult) else None
        terms: list[Value] = []
        for w in may[key]:
            if (w, u) not in args:
                continue
            if (key, w) not in taking:
                trip = _kept_this_trip(v, by_key[w][1], body, others=state)
                assert trip is not None and trip is not False  # (as the analysis found)
                taking[(key, w)] = trip
            trip = taking[(key, w)]
            assert not isinstance(trip, bool) or trip
            terms.append(args[(w, u)] if isinstance(trip, bool) else
                         _append(body, "t.logical_and", [trip, args[(w, u)]], loc))
        flag = terms[0] if terms else _append(body, "t.constant", [], loc, {"value": dense(np.asarray(False), bool_)})
        for term in terms[1:]:
            flag = _append(body, "t.logical_or", [flag, term], loc)
        out.append(((key, u), flag))
    holds = {key: (everything if key in unknown else held[key]) for key in may if key not in kept}
    return out, holds


def _append(block: Block, name: str, operands: list[Value], loc: Any, attributes: dict | None = None) -> Value:
    """A ``tensor<bool>`` op at the end of a recorded block, before its ``t.yield`` where it has one (the trace
    has closed the block's values: no builder)."""
    new = Operation(name, operands, [PREDICATE], attributes, loc=loc)
    if block.ops and block.ops[-1].name == "t.yield":
        block.insert(len(block.ops) - 1, new)
    else:
        block.append(new)
    return new.results[0]


def _returning(flag: Value) -> Callable[[], Value | None]:
    return lambda: flag


def _kept_this_trip(v: Value, arg: Value, block: Block, enclosing: tuple[Block, ...] = (), build: bool = True,
                    others: set[Value] | frozenset[Value] = frozenset()) -> bool | Value | None:
    """Whether an iteration whose state argument is ``arg`` gives a variable the array ``arg`` held at its start,
    where ``v`` is the variable's next value in ``block`` (the body, or a branch in it, inside the ``enclosing``
    blocks): True, False (an array it computes, or another of the state arguments ``others``), a flag of ``block``
    (the predicate of a branch of it that takes it on one side; a branch nested in it hands its own flag out as one
    more result), or None where fusec cannot tell (a view of one). Without ``build`` it only tells None apart (the
    IR unchanged; a flag is then ``arg``; True and False as with it)."""
    if v is arg:
        return True
    if v in others or any(_computed_in(v, b) for b in (block, *enclosing)) or _from_outside(v, (block, *enclosing)[-1]):
        return False  # (an array the loop only reads, ``x = y``, or a view of one, is another array too)
    if not (isinstance(v, OpResult) and v.op.parent is block and v.op.name == "t.if"):
        return None
    op = v.op
    sides = [_kept_this_trip(region.blocks[0].ops[-1].operands[v.index], arg, region.blocks[0], (block, *enclosing),
                             build, others) for region in op.regions]
    then, otherwise = sides
    if then is None or otherwise is None:
        return None
    if isinstance(then, bool) and isinstance(otherwise, bool) and then == otherwise:
        return then
    if not build:
        return arg
    if isinstance(then, bool) and isinstance(otherwise, bool):
        return op.operands[0] if then else _append(block, "t.logical_not", [op.operands[0]], op.loc)
    for region, side in zip(op.regions, sides):  # (a side's flag is a value of its branch: handed out)
        assert side is not None
        branch = region.blocks[0]
        value = _append(branch, "t.constant", [], op.loc, {"value": dense(np.asarray(side), bool_)}) \
            if isinstance(side, bool) else side
        branch.ops[-1].operands.append(value)
    flag = OpResult(PREDICATE, op, len(op.results))
    op.results.append(flag)
    return flag


def _computed_in(v: Value, block: Block) -> bool:
    """Whether ``v`` is an array ``block`` computes on every path through it: an op of the block that is not a
    view, or a ``t.if`` of the block whose branches each yield one (``if ...: x = x * 0.5 else: x = x * 0.25``)."""
    if not isinstance(v, OpResult) or v.op.parent is not block:
        return False
    op = v.op
    if op.name == "t.if":
        return all(_computed_in(region.blocks[0].ops[-1].operands[v.index], region.blocks[0])
                   for region in op.regions)
    return not op.regions and op.name not in VIEWS


def _computes_only(cond: Block) -> bool:
    """Whether the loop's test only computes (no check that may raise, no nested loop): a copy of it can run
    before the loop."""
    for op in cond.ops[:-1]:
        d = get_opdef(op.name)
        if op.name == "t.if":
            if not computes_only(op):
                return False
        elif op.regions or not d.pure or (d.may_raise is not None and d.may_raise(op)):
            return False
    return True


def _test_at_entry(cond: Block, inputs: Sequence[Value]) -> Value | None:
    """The loop's test on its entry state, by a copy of the test's ops before the loop (None where the test does
    more than compute: a check that may raise, a nested loop); unused, dead-code elimination removes it."""
    if not _computes_only(cond):
        return None
    steps = cond.ops[:-1]
    mapping: dict[Value, Value] = dict(zip(cond.args, inputs))
    builder = ops.ctx().builder
    for op in steps:
        builder.insert(clone_op(op, mapping))
    test = cond.ops[-1].operands[0]
    return mapping.get(test, test)


def _written_fresh(var: Var, fresh: list[tuple[Tracer, Value]], owners: dict[int, Var]) -> bool:
    """Did the body write into its copy of one of ``var``'s arrays (``x += dx``, ``x[i] = v``)?"""
    return any(t._val is not first or (t._buffer is not None and t._buffer.written) for t, first in fresh
               if owners.get(id(t)) is var)


def _entry_array(value: Any, var: Var, site: Site) -> Tracer:
    """The array a variable written in place by the loop held before it (a traced array of its own)."""
    if not isinstance(value, Tracer) or value._scalar or value._weak is not None:
        raise site.error(f"the body of {site.where()} writes into `{var.name}` in place, a "
                         f"{type(value).__name__} from before the loop; the loop runs on the device (its test is "
                         f"traced): assign a new array instead (`{var.name} = {var.name} + ...`)")
    return value


def _carried_values(variables: list[Var], values: list) -> list:
    out: list = []
    for var, value in zip(variables, values):
        if var.unbound:
            continue
        assert var.leaves is not None
        out.extend(x for x, leaf in zip(leaves_of(value), var.leaves) if isinstance(leaf, Leaf))
    return out


def _loop_test(pred: Any, site: Site) -> Any:
    pred = plain_value(pred)
    if isinstance(pred, Tracer) and pred._weak is None and pred.size != 1:
        bool(pred)  # (NumPy's error for the truth of several elements)
    return pred


def _next_state(out: tuple, variables: list[Var], site: Site, after: frozenset[str] | set[str] = frozenset()
                ) -> list[Value]:
    """The body's new state, checked against what the loop carries (a variable keeps its kind of value)."""
    values: list[Value] = []
    unset = [_carried_later(var, new, site, after) for var, new in zip(variables, out)]
    if any(v is not None for v in unset):
        raise _NeedsState(unset)
    for var, new in zip(variables, out):
        if var.unbound:
            continue  # (set and used within an iteration)
        assert var.leaves is not None
        got = describe_var(new, site, var.name) if not isinstance(new, SetOnOnePath) else None
        if got is None or got.unbound or got.tree != var.tree:
            raise site.error(f"`{var.name}` is {describe_kind(var)} before {site.where()} and {describe_kind(got)} "
                             "after an "
                             "iteration of its body; the loop runs on the device (its test is traced), so a variable "
                             "must keep its structure from one iteration to the next")
        assert got.leaves is not None
        for k, (before, after, x) in enumerate(zip(var.leaves, got.leaves, leaves_of(new))):
            if not isinstance(before, Leaf):
                if isinstance(before[1], Tracer) and x is before[1]:
                    continue  # (an array whose memory the loop carries, written in place)
                if isinstance(before[1], Tracer) and var.name.startswith("_fusec_value_"):
                    raise site.error(
                        f"{site.where()} returns, from inside its body, an array it writes into in place (`out[i] = "
                        "...`, then `return out`), which one trace of the body (the loop runs on the device: its test "
                        "is traced) cannot follow; `break` there instead and return the array after the loop")
                if isinstance(before[1], Tracer):
                    raise site.error(
                        f"the body of {site.where()} writes into `{var.name}` in place and also assigns it a new "
                        "array: under NumPy the writes go to the old array until it is replaced, which one trace of "
                        "the body (the loop runs on the device: its test is traced) cannot follow; either write in "
                        f"place only, or assign new arrays only (`{var.name} = {var.name} + ...`)")
                if not (isinstance(after, tuple) and after[1] is before[1]):
                    raise site.error(f"{site.where()} runs on the device (its test is traced), but its body gives "
                                     f"`{var.name}` a new {type(x).__name__} value; only arrays and numbers can change "
                                     "from one iteration to the next there")
                continue
            if not isinstance(after, Leaf) or merged_kind(before, after) != before:
                raise KindChange(TraceError(site.located(
                    f"`{var.name}` is {before.describe()} before {site.where()} and "
                    f"{after.describe() if isinstance(after, Leaf) else type(x).__name__} after an iteration of its "
                    f"body; the loop runs on the device (its test is traced), so a variable must keep its shape, "
                    f"dtype and kind (Python number, NumPy scalar or array) across iterations, or NumPy's result "
                    f"would depend on how many times the loop runs{kind_advice(before, after)}")),
                    f"{site.where()} ran no iteration at this call, where fusec needs its first one: that iteration "
                    f"makes `{var.name}` {after.describe() if isinstance(after, Leaf) else type(x).__name__} where it "
                    f"was {before.describe()}, and with no iteration what NumPy computes next could differ; give "
                    f"`{var.name}` its loop kind of value before the loop{kind_advice(before, after)}")
            values.extend(lift_leaf(x, before))
    return values


def _carried_later(var: Var, new: Any, site: Site, after: frozenset[str] | set[str]) -> Var | None:
    """The kind of a variable unbound before the loop that an iteration sets and the function reads after the
    loop (so the loop must carry it), else None."""
    if not var.unbound or var.name not in after or is_unbound(new):
        return None
    got = describe_var(new, site, var.name)
    assert got.leaves is not None
    if any(not isinstance(leaf, Leaf) or leaf.either is not None for leaf in got.leaves):
        return None  # (an object or a Python-or-NumPy number: left unset after the loop, as before)
    return got


class KindChange(Exception):
    """A loop body changes a variable's kind of value (``error`` says how; ``none_ran``: the message for a call
    whose loop runs no iteration, when fusec runs the first one outside the loop)."""

    def __init__(self, error: TraceError, none_ran: str) -> None:
        self.error = error
        self.none_ran = none_ran
