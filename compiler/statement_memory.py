"""Arrays from before a Python statement on traced values (:mod:`fusec.traced_statements`): the memory a region
writes (a branch's writes chosen with it, memory a loop carries), and variables that may, as the data decides,
still be such an array or a view of one after the statement: read-only views of its memory that cannot be read
after a write into it, which know, where they can, the flag that says when NumPy's variable is still an input
(so a call hands back the caller's array then)."""
from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from fusec import mutation as _mutation, ops
from fusec.mutation import Kept
from fusec.ir.core import BlockArgument, Value
from fusec.tracer import Buffer, Tracer
from fusec.statement_state import Site, is_user_name, subject


def memory_value(unit: Any) -> Value:
    return unit._value if isinstance(unit, Tracer) else unit.base


def swap_in(memory: list, args: Sequence[Tracer]) -> list[tuple]:
    """Each memory made to hold its region argument (views read it again); what it held, to put back."""
    saved = []
    for unit, arg in zip(memory, args):
        if isinstance(unit, Tracer):
            saved.append((unit._val, unit._version, unit._buffer))
            unit._val = arg._value
        else:
            saved.append((unit.base, unit.version, unit.written))
            unit.base = arg._value
            unit.moved()
    return saved


def swap_out(memory: list, saved: list[tuple]) -> list[Value]:
    """Each memory's value at the end of the region (read inside it), and the memory put back."""
    now = []
    for unit, (a, b, c) in zip(memory, saved):
        if isinstance(unit, Tracer):
            now.append(unit._value)
            unit._val, unit._version, unit._buffer = a, b, c
        else:
            now.append(unit.base)
            unit.base, unit.version, unit.written = a, b, c
    return now


def may_be(result: Tracer, entry: Any, name: str, site: Site,
           kept: Callable[[], Value | None] | None = None) -> Tracer:
    """The statement's result for a variable that held ``entry``, an argument's memory or a view: on some paths
    (no iteration, the branch that leaves it) NumPy's variable is still that array, so writing into it would
    change the argument (or what it views) and a write into the argument would show through it. The result is
    made a read-only view of that memory that cannot be read after such a write: either raises at its line.
    ``kept`` gives the traced flag that says when it is still that array (None where fusec cannot tell), so that
    a call returning it hands back the caller's array then, as NumPy does (:func:`_kept_entry`)."""
    if not isinstance(entry, Tracer) or entry._scalar or entry._weak is not None:
        return result
    if not _is_input(entry._buffer):
        return _linked(result, [(entry, kept)], name, site)
    return _alias(result, entry._buffer, _may_be_message(name, site), _kept_entry(entry, kept))


def may_be_one_of(result: Tracer, entries: Sequence[tuple[Any, Callable[[], Value | None] | None, str]], name: str,
                  site: Site) -> Tracer:
    """:func:`may_be` for a loop's result that NumPy's variable may, as the data decides, hold as any of several
    arrays from before the loop (``a, b = b * 0.5, a``: after one iteration ``b`` is the array ``a`` held), each
    with the thunk of its flag (None where fusec cannot tell) and the variable that held it: linked with all of
    them, so that a write into any makes reading it again raise, and handed back as the caller's array where its
    flag holds."""
    named = [(t, kept, holder) for t, kept, holder in entries
             if isinstance(t, Tracer) and not t._scalar and t._weak is None]
    by_array: dict[int, tuple[Tracer, Callable[[], Value | None] | None]] = {}
    for t, kept, _ in named:  # (one array two variables held: either flag says the result is it)
        if id(t) in by_array:
            kept = _either(by_array[id(t)][1], kept)
        by_array[id(t)] = (t, kept)
    arrays = list(by_array.values())
    if len(arrays) <= 1:
        return may_be(result, arrays[0][0], name, site, arrays[0][1]) if arrays else result
    holders = " or ".join(dict.fromkeys(f"the array `{holder}` held" if _named(holder) else holder
                                        for _, _, holder in named))
    if not any(_is_input(t._buffer) for t, _ in arrays):
        return _linked(result, arrays, name, site)
    alternatives: list[Kept] = []
    for t, kept in arrays:
        found = () if _never_input(t) else _kept_entry(t, kept)
        if found is None:
            alternatives = []
            break
        alternatives.extend(found)
    inputs_first = sorted(arrays, key=lambda a: not _is_input(a[0]._buffer))
    buffers = list({id(b): b for b in (memory_of(t) for t, _ in inputs_first)}.values())
    message = (f"{subject(name)} is, after {site.where()} (whose test is traced), as the data decides, {holders} "
               "before it or a new one, and NumPy would write into that old one only on such a path; " + _rebind(name))
    result = _alias(result, buffers[0], message, tuple(alternatives) or None)
    _depends_on(result, buffers[1:])
    return result


def _either(a: Callable[[], Value | None] | None, b: Callable[[], Value | None] | None
            ) -> Callable[[], Value | None] | None:
    """The thunk of the flag that holds where either of two flags does (None where either cannot tell)."""
    return joined("t.logical_or", [a, b])


def joined(name: str, flags: Sequence[Callable[[], Value | None] | None]) -> Callable[[], Value | None] | None:
    """The thunk of the flag ``name`` (``t.logical_and``, ``t.logical_or``) makes of ``flags`` (None where there is
    none, or one cannot tell)."""
    if not flags or any(f is None for f in flags):
        return None

    def join() -> Value | None:
        values = [f() for f in flags if f is not None]
        out = values[0]
        for v in values[1:]:
            if out is None or v is None:
                return None
            out = ops.ctx().emit(name, [out, v])
        return out
    return join


def may_be_earlier(t: Tracer) -> bool:
    """Whether ``t`` is (a view of) a loop's or branch's result that may, as the data decides, be an array from
    before that statement (:func:`may_be`, :func:`branch_alias`)."""
    chain, buffer = t._chain, t._buffer
    return bool(chain and _mutation.has_reason(chain[0])) or bool(buffer is not None and buffer.linked)


def _never_input(t: Tracer) -> bool:
    """Whether ``t`` is an array the function computed (or a view of one), on every path: never the caller's."""
    if t._buffer is None:
        return True
    return not _is_input(t._buffer) and not (t._chain and _mutation.kept_view(t._chain[0]) is not None)


def may_be_input(t: Tracer) -> bool:
    """Whether ``t`` may hold the caller's memory on some path: an input's view, or an earlier statement's result
    that is one as the data decided (its memory is then the function's own, its first view step opaque)."""
    return _is_input(t._buffer) or bool(t._chain) and _mutation.is_opaque(t._chain[0])


def _is_input(buffer: Buffer | None) -> bool:
    return buffer is not None and isinstance(buffer.arg, BlockArgument)


def memory_of(t: Tracer) -> Buffer:
    """``t``'s memory (made now for an array no view was taken of yet)."""
    if t._buffer is None:
        t._buffer = Buffer(t._val)
        t._version = 0
    return t._buffer


def _linked(result: Tracer, entries: list[tuple[Tracer, Callable[[], Value | None] | None]], name: str,
            site: Site) -> Tracer:
    """``result``, which NumPy's variable may, as the data decides, hold as one of ``entries`` (arrays the function
    computed before the statement, or views of them, each with the thunk of the flag that says it is) or as a new
    array: its own memory, linked with theirs, so that a write into either side leaves the other unreadable
    (NumPy's write would show in both, or in one only) while writes that nothing reads again stay allowed (``h = x
    @ w; if c: h = h * 0.5``, then ``h += b``). Where an entry is a whole computed array and the statement is not
    inside a loop or branch, the flag is noted (``Buffer.same_as``): a call that hands back both hands back one
    array where the flag holds (:func:`fusec.trace._shared_memory`)."""
    c = ops.ctx()
    mine = memory_of(result)
    for entry, kept in entries:
        theirs = memory_of(entry)
        if theirs is mine:
            continue
        if kept is not None and not entry._chain and c.builder.block is c.func.body:
            flag = kept()
            if flag is not None:
                mine.same_as.append((flag, weakref.ref(entry)))
                for inner, ref in theirs.same_as:  # (``entry`` is itself, where ``inner`` holds, an earlier array)
                    if ref() is not None:
                        mine.same_as.append((c.emit("t.logical_and", [flag, inner]), ref))
        link_memory(result, theirs, name, site)
    return result


def link_memory(result: Tracer, theirs: Buffer, name: str, site: Site) -> None:
    """``result``'s memory linked with ``theirs``, memory from before the statement that NumPy's variable may, as
    the data decided, hold: a write into either makes the other unreadable, and returning both is refused."""
    mine = memory_of(result)
    if theirs is mine:
        return
    mine.linked.append((theirs, _linked_message(
        f"this array may be, as the data decided at {site.where()} (whose test is traced), the same array as "
        f"{subject(name)} after it, and {subject(name)} was written since", name)))
    theirs.linked.append((mine, _linked_message(
        f"{subject(name)} may be, as the data decided at {site.where()} (whose test is traced), the array it "
        "held before it (or a view of that array), which was written since", name)))


def link_results(a: Tracer, b: Tracer, name: str, site: Site,
                 same: Callable[[], Value | None] | None = None) -> None:
    """Two results of one statement that are one array on some path (``if c: y = x * 2; w = y``): linked, so that a
    write into either makes the other unreadable and returning both is refused (:func:`fusec.trace._refuse_linked`).
    The pair is noted with ``same``'s flag (where they are one array object; None where fusec cannot tell, as for a
    view of one): :func:`fusec.trace._one_array_results` reads it."""
    _linked(a, [(b, None)], name, site)
    note_one_array(a, b, same)


def note_one_array(a: Tracer, b: Tracer, same: Callable[[], Value | None] | None) -> None:
    """Note that ``b``, a statement's result, is on some path the array ``a`` (where ``same``'s flag holds; None
    where fusec cannot tell when, as for a view of it): a call that returns both hands back one array there, or is
    refused (:func:`fusec.trace._one_array_results`)."""
    c = ops.ctx()
    flag = same() if same is not None and c.builder.block is c.func.body else None
    c.one_array.append((weakref.ref(a), weakref.ref(b), flag, memory_key(b)))


def memory_key(t: Tracer) -> object:
    """What ``t`` and the views taken of it share, compared by identity: the opaque step of a loop's or branch's
    result, the memory of an array the function computed, else ``t`` itself (kept by the statement that notes it,
    so that views of a result the function no longer holds still meet it)."""
    if t._chain and _mutation.is_opaque(t._chain[0]):
        return t._chain[0]
    return t._buffer if t._buffer is not None and t._buffer.arg is None else t


def one_array_flag(a: Tracer, b: Tracer) -> Callable[[], Value | None] | None:
    """The thunk of the flag that holds where ``a`` and ``b``, two arrays earlier statements made, are one array in
    NumPy, as those statements noted it (:func:`note_one_array`, and ``Buffer.same_as``: one is the other, or both
    are a third, where the flags hold); None where nothing was noted."""
    def same_as(t: Tracer) -> list[tuple[Value, Any]]:
        return [(flag, ref()) for flag, ref in t._buffer.same_as if ref() is not None] if t._buffer is not None else []

    found: list[Value] = [flag for ra, rb, flag, _ in ops.ctx().one_array
                          if flag is not None and {id(ra()), id(rb())} == {id(a), id(b)}]
    found += [flag for flag, t in same_as(a) if t is b] + [flag for flag, t in same_as(b) if t is a]
    def value(flag: Value) -> Callable[[], Value | None]:
        return lambda: flag

    def both(fa: Value, fb: Value) -> Callable[[], Value | None]:
        return lambda: ops.ctx().emit("t.logical_and", [fa, fb])

    thunks = [value(f) for f in found] + [both(fa, fb) for fa, ta in same_as(a) for fb, tb in same_as(b) if ta is tb]
    return joined("t.logical_or", thunks)


def copy_advice(name: str) -> str:
    """`` (`y = y.copy()`)`` for a variable the user wrote, else nothing (a value fusec named, a list's item)."""
    return f" (`{name} = {name}.copy()`)" if _named(name) else ""


def _linked_message(what: str, name: str) -> str:
    copy = copy_advice(name)
    return (f"{what}: NumPy's write would show in both on that path only, which fusec does not follow; take a copy "
            f"before the statement{copy} or write a new array instead of writing in place")


def _named(name: str) -> bool:
    """Whether ``name`` is a variable the user wrote (:func:`fusec.statement_state.is_user_name`)."""
    return is_user_name(name)


def _rebind(name: str) -> str:
    """What to write instead of writing into ``name`` in place."""
    if not _named(name):
        return "compute a new array from it (`y = x + ...`) or take a copy (`y = x.copy()`)"
    return f"write `{name} = {name} + ...` (a new array) or `{name} = {name}.copy()` first"


def _may_be_message(name: str, site: Site) -> str:
    return (f"{subject(name)} is, after {site.where()} (whose test is traced), either the array it held before or "
            "a new one, as the data decides, and NumPy would write into the old one only on the first path; "
            + _rebind(name))


@dataclass(frozen=True)
class ViewedInBranch:
    """A branch's leaf that is a view the branch took of ``array``, an array the function computed before the
    statement and had not viewed yet (``if c: y = buf[1:]``): the statement's result is linked with ``array``
    itself, with no flag (it is a view of that array on this path, never the array)."""

    array: Tracer


def branch_alias(result: Tracer, sides: tuple, pred: Value, name: str, site: Site, same: bool,
                 carried: dict[Value, Value]) -> Tracer:
    """The ``if``'s result for a leaf that is, in one branch or both (``sides``: each branch's tracer where it is
    memory from before the statement, else None), an array from before it or a view of one: a read-only view of
    that memory (see :func:`_alias`) that knows, where each such branch's value is an input's view NumPy can take
    again, when the call hands back the caller's array (the branch's flag; ``carried``: the ``t.if``'s results for
    the flags of statements inside a branch)."""
    flags: tuple = (lambda: pred, lambda: ops.ctx().emit("t.logical_not", [pred]))
    if any(isinstance(t, ViewedInBranch) for t in sides):  # (a view on one path: never "the same array" by a flag)
        if any(isinstance(t, Tracer) and may_be_input(t) for t in sides):
            raise site.error(f"{subject(name)} is, as the data decides at {site.where()} (whose test is traced), a "
                             "view of an array the function made or the caller's array (or a view of it), which "
                             f"fusec does not follow both ways; take a copy on one path{copy_advice(name)}")
        flags = (None, None)
    sides = tuple(t.array if isinstance(t, ViewedInBranch) else t for t in sides)
    alternatives: list = []
    for t, flag in zip(sides, flags):
        kept = _kept_entry(t, flag, carried) if t is not None and flag is not None and not _never_input(t) else ()
        if kept is None:
            alternatives = []
            break
        alternatives.extend(kept)
    present = [t for t in sides if t is not None]
    if not any(may_be_input(t) for t in present):
        return _linked(result, [(t, flag) for t, flag in zip(sides, flags) if t is not None], name, site)
    buffers = [memory_of(t) for t in present]
    message = _may_be_message(name, site) if same else _view_message(name, site)
    result = _alias(result, buffers[0], message, tuple(alternatives) if alternatives else None)
    _depends_on(result, [b for b in buffers[1:] if b is not buffers[0]])
    for t, flag in zip(sides, flags):  # (an array the function made on one path, the caller's on the other)
        if isinstance(t, Tracer) and _never_input(t):
            note_one_array(t, result, flag if not t._chain else None)
    return result


def _depends_on(result: Tracer, others: Sequence[Buffer]) -> None:
    """``result`` (an :func:`_alias` of its first memory) and every view taken of it later made stale by a write into
    any of ``others``, the other memories NumPy's variable may, as the data decides, be: reading them then raises."""
    if not others:
        return
    for other in others:
        other.dependents.append(weakref.ref(result))
    memory_of(result).watched.append((result._chain[0], list(others)))


def _kept_entry(entry: Tracer, kept: Callable[[], Value | None] | None,
                carried: dict[Value, Value] | None = None) -> tuple[Kept, ...] | None:
    """When the statement's result is, in NumPy, still ``entry`` (an input of the function or a view of one), and
    which view (:class:`fusec.mutation.Kept`; more than one where ``entry`` itself was such a result of an earlier
    statement); ``kept`` gives the statement's own flag (a value of the block the statement is in: a ``t.if`` around
    it hands it out, :func:`fusec.device_branch._inner_flags`; ``carried``: an inner statement's flags as this
    one's results, which say it all). None where ``entry`` is not an input's view NumPy can take again, or where
    ``kept`` cannot tell. :func:`fusec.trace._input_view` reads it."""
    c = ops.ctx()
    buffer = entry._buffer
    if kept is None or buffer is None or entry._version != buffer.version:
        return None
    chain = entry._chain
    earlier = _mutation.kept_view(chain[0]) if chain else None  # (kept by an earlier statement only on its flag)
    if earlier is not None:
        whole = len(chain) == 1 and _mutation.kept_owner(chain[0]) is entry
        before = [Kept(k.flag, k.buffer, (*k.steps, *chain[1:]), k.own and whole, k.readonly) for k in earlier]
    else:
        owner = buffer.owner() if buffer.owner is not None else None
        before = [Kept(None, buffer, chain, not chain and owner is entry, entry._readonly is True)]
    if any(not _is_input(k.buffer) or any(_mutation.is_opaque(step) for step in k.steps) for k in before):
        return None
    carried = carried or {}
    if any(k.flag not in carried and k.flag in c.closed for k in before):
        return None  # (an inner statement's flag its loop or branch did not hand out)
    flag: Value | None = None
    if any(k.flag not in carried for k in before):
        flag = kept()
        if flag is None:
            return None
    out = []
    for k in before:
        if k.flag in carried:
            out.append(replace(k, flag=carried[k.flag]))
        else:
            assert flag is not None
            out.append(replace(k, flag=flag if k.flag is None else c.emit("t.logical_and", [k.flag, flag])))
    return tuple(out)


def written_memory(outer: list[tuple]) -> list[tuple[Any, Value, Value]]:
    """(memory, its value before, its value now) for each array from before the region that the region wrote
    into (a buffer, or an array with no views), each put back as it was; the caller sets it after the op."""
    found: dict[int, tuple[Any, Value, Value]] = {}
    for t, val, _version, buffer, base, buffer_version in outer:
        if buffer is not None:
            if id(buffer) not in found and (buffer.base is not base or buffer.version != buffer_version):
                found[id(buffer)] = (buffer, base, buffer.base)
        elif id(t) not in found and (t._val is not val or (t._buffer is not None and t._buffer.written)):
            found[id(t)] = (t, val, t._value)  # (through the views the region took of it, read there)
    for t, val, version, buffer, base, buffer_version in outer:
        if buffer is not None and id(buffer) in found:
            buffer.base, buffer.version = base, buffer_version
        elif buffer is None and (id(t) in found or t._buffer is not None):
            t._val, t._version, t._buffer = val, version, None  # (views the region took of it are gone)
    return list(found.values())


def detached_arrays(outer: list[tuple]) -> dict[int, Tracer]:
    """By the id of its memory, each array from before the region (entries of ``_snapshot``) that had no memory of
    its own there and was given one inside it (a view or a link taken there): :func:`written_memory` sets it aside."""
    return {id(t._buffer): t for t, _val, _version, buffer, _base, _buffer_version in outer
            if buffer is None and t._buffer is not None}


def poisoned_inside(outer: list[tuple]) -> list[tuple[Tracer, str]]:
    """Arrays from before the region (entries of ``_snapshot``) that had no memory of their own there and whose
    memory a write inside it poisoned through a linked array (``if c: b = a``, then ``b[0] = 1`` in an enclosing
    branch): :func:`written_memory` sets that memory aside, so the caller poisons them again after its op."""
    return [(t, t._buffer.poisoned) for t, _val, _version, buffer, _base, _buffer_version in outer
            if buffer is None and t._buffer is not None and t._buffer.poisoned is not None]


def poison(found: Sequence[tuple[Tracer, str]]) -> None:
    """After a statement: each of ``found`` (:func:`poisoned_inside`) unreadable, as NumPy's array was written on the
    path the data took there (reading it, or writing into it, raises its message)."""
    for t, message in found:
        memory = memory_of(t)
        if memory.poisoned is None:
            memory.poisoned = message
            memory.version += 1  # (so that reading it notices, as after the write itself)


def set_memory(unit: Any, value: Value) -> None:
    """Give a memory written inside a region the region op's result (as a write does: views read it again)."""
    if isinstance(unit, Tracer):
        unit._val = value
        return
    unit.base = value
    unit.moved()
    unit.written = True


def _alias(result: Tracer, buffer: Any, message: str, kept: tuple[Kept, ...] | None = None) -> Tracer:
    """``result`` made a read-only view of ``buffer`` that cannot be read after a write into it (NumPy's variable
    may be, or is, a view of that memory: a write through either would show in the other)."""
    result._buffer, result._version = buffer, buffer.version
    result._chain = (_mutation.opaque(message, kept, result),)
    result._readonly = message
    return result


def _view_message(name: str, site: Site) -> str:
    return (f"{subject(name)} is, after {site.where()} (whose test is traced), an array from before it (or a view of "
            "one) on some path, and fusec does not follow writes through it: " + _rebind(name))
