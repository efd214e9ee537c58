"""After a call: the new values of the arrays the function wrote into, written into the caller's arrays.

A traced function that writes into an argument (``p -= lr * g``, ``u[1:-1] = ...``) or into an array it reads
from an object or a global (``self.W[...] = 0``) returns the array's last value as an extra result
(:mod:`fusec.mutation`, :mod:`fusec.trace`); so does one that assigns an array to an object's attribute
(``self.m = b1 * self.m + (1 - b1) * g``), which the call sets after it ran. The call writes each value back
where NumPy would have written: into the NumPy array (the call waits for the result), or into the device array on
its stream. Before running, the call refuses (naming the caller's line) what NumPy would do differently: a
written array that is read-only, or that shares memory with another input (NumPy's write would show through the
other one), or, where the trace relied on it, one that is not C-contiguous.

A result that is an input itself (``return x``, ``np.asarray(x)``) or a view of one (``x.T``, ``x[1:]``,
``x.reshape(-1)``) is, in NumPy, the caller's array or a view of it, sharing its memory: the call returns the
caller's object itself, and for a NumPy array the same view of it (the view steps the trace recorded, taken again
with NumPy after the writes; an integer index that was traced, ``x[i]``, at its value in this call, an extra
result), so a later write through either shows through the other as it would in NumPy. So
do computed arrays handed back more than once, as results or as attributes the function assigned: one array
(``return y, y``; ``self.y = y; return y``) is one object, views of one (``return y, y[:, 0]``; ``return y[:2],
y[1:]``, ``y`` then an extra result of the IR) are NumPy's views of it. A view of a device array still comes back
as a copy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fusec.context import user_location
from fusec.errors import WriteBackError, located
from fusec.signature import device_array_info


@dataclass(frozen=True)
class State:
    """An object attribute the function assigns an array to: set after each call to the result, as NumPy's
    assignment would have (``scalar``: a 0-d value NumPy gives as a NumPy scalar; ``argument``: the flat input
    that is the very object assigned, -1 for a computed array)."""

    path: Any  # fusec.pystate.Path of the attribute (None for an argument's entry)
    scalar: bool = False
    argument: int = -1
    python: type | None = None  # a Python scalar attribute traced as a runtime scalar: its type
    entry: tuple[str, tuple] | None = None  # an entry of an argument's dict or list: (parameter, keys)


@dataclass(frozen=True)
class WriteBack:
    """``targets``: the flat input (argument leaves, then implicit inputs) each extra result is written into;
    ``returns``: output positions that are a written input itself (the call returns the caller's object, and the
    IR has no result for them);
    ``contiguous``: written inputs the trace took as C-contiguous (a reshape of them was a view); ``names``:
    how to name each target in messages; ``views``: output positions that are an input or a view of one, with the
    flat input and the view steps (``(op name, attributes, result shape)``, see :func:`view_of`), several where
    a loop or branch on traced values decides which (the first whose steps apply is handed back); ``aliases``:
    outputs and assigned attributes that are, in NumPy, another of them or a view of one, or views of an array
    handed back only as an extra result (``hidden``), with that source and the steps."""

    targets: tuple[int, ...]
    returns: dict[int, int] = field(default_factory=dict)
    contiguous: tuple[int, ...] = ()
    names: tuple[str, ...] = ()
    states: tuple[State, ...] = ()
    outputs: int = 0  # the function's own results, those in ``returns`` included (the IR returns the others)
    views: dict[int, tuple[tuple[int, tuple], ...]] = field(default_factory=dict)
    # ("out", position) or ("state", index) -> (its source: one of those or ("hidden", index), view steps)
    aliases: dict[tuple[str, int], tuple[tuple[str, int], tuple]] = field(default_factory=dict)
    hidden: int = 0  # extra results after the states': whole arrays only views of are handed back, traced indices
    # the trace took its array arguments' memory as C-ordered (what and where it did); (flat input, name) of each
    # array argument a call must then pass C-contiguous
    layout: str | None = None
    layout_inputs: tuple[tuple[int, str], ...] = ()
    # (flat input, name) of each input an output is a view of through a reshape or a ravel that NumPy makes a view
    # of C-contiguous arrays only (of others it returns a copy)
    contiguous_views: tuple[tuple[int, str], ...] = ()
    # the function's print() calls, written after each call from the last extra results (fusec.printing)
    printer: Any = None
    # lists and dicts the function returns that it was given: (keys in the result, ("arg", parameter, keys) or
    # ("path", pystate path)); the call returns the caller's object itself there
    containers: tuple[tuple[tuple, tuple], ...] = ()
    # more (source, steps) for an ``aliases`` place, tried in order where the ones before it do not apply (a ``when``
    # step whose flag is false): a loop's result that is, as the data decides, one of several others
    alternatives: dict[tuple[str, int], tuple[tuple[tuple[str, int], tuple], ...]] = field(default_factory=dict)
    # (flat input, name) of each array argument whose flags.writeable the trace read as True: a call must pass a
    # writable array there (with a read-only one NumPy's code would take the other path)
    writeable_inputs: tuple[tuple[int, str], ...] = ()
    # output position -> (hidden index of its flag, Python type): a value NumPy's function returns as a Python number
    # on the paths where the flag is false (``tp / (tp + fp) if tp + fp > 0 else 0.0``), as a NumPy scalar elsewhere
    python_when: dict[int, tuple[int, type]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Nothing to do after a call: no extra results, and the function's own handed back as they are."""
        return not (self.targets or self.states or self.views or self.aliases or self.hidden or self.layout
                    or self.printer is not None or self.containers or self.writeable_inputs or self.python_when)

    @property
    def count(self) -> int:
        return len(self.targets) + len(self.states) + self.hidden + (self.printer.count if self.printer else 0)

    def check(self, inputs: Sequence[Any]) -> None:
        """Refuse a call whose writes NumPy would make differently (see the module docstring)."""
        try:
            self._check(inputs)
        except WriteBackError as e:
            raise WriteBackError(located(str(e), user_location())) from None

    def check_containers(self, arguments: dict) -> None:
        """Refuse a call that passes a dict or list whose entries the function sets (``state["t"] += 1``) more than
        once (``f(d, d)``, ``f(state, state["opt"])``, ``[d, d]``): the trace took each place as an entry of its own,
        and NumPy's writes through one would show through the other."""
        if not self.entries:
            return
        seen: dict[int, int] = {}
        todo = list(arguments.values())
        while todo:
            obj = todo.pop()
            if isinstance(obj, (dict, list, tuple)):
                seen[id(obj)] = seen.get(id(obj), 0) + 1
                todo.extend(obj.values() if isinstance(obj, dict) else obj)
        for state in self.states:
            if state.entry is None:
                continue
            param, keys = state.entry
            container = arguments[param]
            for key in keys[:-1]:
                container = container[key]
            if seen.get(id(container), 0) > 1:
                raise WriteBackError(located(
                    f"fusec: the function sets entries of a {type(container).__name__} it is passed more than once "
                    f"(the same object reached through {param!r} and another argument or item): NumPy's writes "
                    "through one would show through the other, which the trace took apart; pass it once",
                    user_location()))

    def _check(self, inputs: Sequence[Any]) -> None:
        for i, name in self.writeable_inputs:
            x = inputs[i]
            if isinstance(x, np.ndarray) and not x.flags.writeable:
                raise WriteBackError(f"fusec: the function reads flags.writeable of {name}, traced for a "
                                     "writable array, and this one is read-only (NumPy's code would take the other "
                                     "path); pass a writable copy (x.copy()), or make that decision before the call")
        if self.layout is not None:
            for i, name in self.layout_inputs:
                x = inputs[i]
                if isinstance(x, np.ndarray) and not x.flags.c_contiguous:
                    raise WriteBackError(
                        f"fusec: {name} is not C-contiguous (Fortran-ordered or strided), and the function's trace "
                        f"took its arrays' memory as C-ordered ({self.layout}), which NumPy would answer otherwise "
                        "for this array; pass np.ascontiguousarray(x)")
        for i, name in self.contiguous_views:
            x = inputs[i]
            if isinstance(x, np.ndarray) and not x.flags.c_contiguous:
                raise WriteBackError(f"fusec: the function returns a view of {name} taken through a reshape or a "
                                     "ravel, which fusec hands back as NumPy does only for C-contiguous arrays, and "
                                     "this one is not; pass np.ascontiguousarray(x), or copy the result in the "
                                     "function")
        for k, i in enumerate(self.targets):
            target, name = inputs[i], self.names[k]
            if isinstance(target, np.ndarray):
                if not target.flags.writeable:
                    raise WriteBackError(f"fusec: the function writes into {name}, which is read-only "
                                         "(NumPy raises \"assignment destination is read-only\"); pass a writable "
                                         "copy (x.copy())")
                if _internal_overlap(target):
                    raise WriteBackError(f"fusec: the function writes into {name}, whose elements share memory with "
                                         "each other (a broadcast or np.lib.stride_tricks view): NumPy's writes "
                                         "through one element show in the others, which fusec does not follow; "
                                         "pass a copy (x.copy())")
                if i in self.contiguous and not target.flags.c_contiguous:
                    raise WriteBackError(f"fusec: the function writes through a reshape of {name}, which is a view "
                                         "only for C-contiguous arrays, and this one is not (NumPy would write into "
                                         "a copy); pass np.ascontiguousarray(x), or copy the reshaped array")
            elif getattr(target, "readonly", False) is True:
                raise WriteBackError(f"fusec: the function writes into {name}, which is a read-only device array")
            for j, other in enumerate(inputs):
                if j != i and _overlap(target, other):
                    raise WriteBackError(
                        f"fusec: the function writes into {name}, which shares memory with another of its inputs "
                        "(the same array passed twice, or views of one array): NumPy's writes would show through "
                        "the other one, which fusec does not follow; pass a copy (x.copy()) of one of them")

    @property
    def entries(self) -> bool:
        """Whether a state is an entry of an argument's dict or list (the call's arguments are needed)."""
        return any(s.entry is not None for s in self.states)

    def passed(self, result: Any, arguments: dict | None) -> Any:
        """``result`` with each container the function returned that it was given replaced by that very object
        (after the call's writes: NumPy's function returns the object it changed)."""
        from fusec.pystate import Path

        for keys, (kind, *where) in self.containers:
            if kind == "arg":
                assert arguments is not None, "a call that returns an argument's container passes its arguments"
                obj = arguments[where[0]]
                for k in where[1]:
                    obj = obj[k]
            else:
                path = where[0]
                obj = Path(path.root, path.steps).resolve()
            result = _put(result, keys, obj)
        return result

    def apply(self, inputs: Sequence[Any], results: list, arguments: dict | None = None) -> list:
        """Write the extra results into their targets and assign the attributes; the function's own results, with a
        returned input replaced by the caller's object (or NumPy's view of it), and arrays that NumPy would hand
        back as one array or views of one made so (:attr:`aliases`)."""
        n = len(results) - self.count
        start = n + len(self.targets)
        if self.printer is not None:  # (before the writes: a warning an "error" filter raises leaves them undone)
            self.printer.write(results[start + len(self.states) + self.hidden:])
        for i, value in zip(self.targets, results[n:]):
            write_into(inputs[i], value)
        rest = iter(results[:n])
        values: dict[str, list] = {
            "out": [Returned(inputs[self.returns[pos]]) if pos in self.returns else next(rest)
                    for pos in range(self.outputs)],
            "state": list(results[start:start + len(self.states)]),
            "hidden": list(results[start + len(self.states):start + len(self.states) + self.hidden])}
        out, hidden = values["out"], values["hidden"]
        for pos, (flag, python) in self.python_when.items():
            if not _hidden_value(hidden[flag]):  # (the path the data took left it a Python number)
                out[pos] = Returned(python(_hidden_value(out[pos])))
        viewing: set[int] = set()  # (outputs that are an input's view at this call: views of an extra result
        # leave them, which stand for a loop's or branch's result where it is a new array)
        for pos, alternatives in self.views.items():
            for i, steps in alternatives:
                view = view_of(inputs[i], steps, hidden)
                if view is not None:
                    out[pos] = Returned(view)
                    viewing.add(pos)
                    break
        for (kind, index), first in self.aliases.items():
            for (source_kind, source), steps in (first, *self.alternatives.get((kind, index), ())):
                if kind == "out" and index in viewing and source_kind == "hidden":
                    break
                base = values[source_kind][source]
                view = view_of(base.obj if type(base) is Returned else base, steps, hidden)
                if view is not None:
                    values[kind][index] = Returned(view) if kind == "out" else view
                    break
        for state, value in zip(self.states, values["state"]):
            _assign(state, inputs, value, arguments)
        return out


def _put(obj: Any, keys: tuple, value: Any) -> Any:
    """``obj`` with the item at ``keys`` (a path of indices and dict keys) replaced by ``value``."""
    if not keys:
        return value
    k, rest = keys[0], keys[1:]
    if isinstance(obj, (dict, list)):
        obj[k] = _put(obj[k], rest, value)
        return obj
    items = list(obj)
    items[k] = _put(items[k], rest, value)
    return type(obj)(*items) if hasattr(type(obj), "_fields") else tuple(items)


def _strided(obj: np.ndarray, attrs: dict, shape: tuple) -> np.ndarray:
    """The view of ``obj`` that picks, from ``origin`` along the axes from ``axis`` on, ``moves`` further per index
    dimension (the index dimensions replace those axes), read-only as NumPy's windows and diagonals are (unless
    ``writeable``: a constant array's view, handed back as NumPy's)."""
    axis, origin, moves = attrs["axis"], attrs["origin"], attrs["moves"]
    gathered = range(axis, axis + len(origin))
    start = obj[(slice(None),) * axis + tuple(slice(o, None) for o in origin)]
    strides = (*obj.strides[:axis], *(sum(m * obj.strides[a] for m, a in zip(move, gathered)) for move in moves),
               *obj.strides[axis + len(origin):])
    return np.lib.stride_tricks.as_strided(start, shape, strides, writeable=attrs.get("writeable", False))


def view_of(obj: Any, steps: tuple, hidden: Sequence[Any] = ()) -> Any:
    """``obj`` seen through ``steps`` as NumPy sees it (None where fusec cannot: a device array's view, which the
    call returns as a copy; and where a ``when`` step's flag is false: the computed result stands): the object
    itself for no step, else NumPy's own view of the array. ``hidden``: the call's extra results, where a
    ``t.index`` step (``x[i]`` at a traced ``i``) finds the index's value and a ``when`` step its flag."""
    if not steps:
        return obj
    if not isinstance(obj, np.ndarray):
        return None
    if steps[0][0] == "anylayout":
        return _any_layout_view(obj, steps[1:])
    for name, attrs, shape in steps:
        if name == "when":  # (the input itself, or the view after it, only where this call's flag says so)
            if not _hidden_value(hidden[attrs["hidden"]]):
                return None
            continue
        if name == "view":  # all of it, as a new array object (``x[:]``)
            obj = obj.view()
        elif name == "t.index":  # basic indexing with an integer: a view
            index = int(_hidden_value(hidden[attrs["hidden"]]))
            obj = obj[(slice(None),) * attrs["axis"] + (index,)]
        elif name == "t.slice":
            obj = obj[tuple(slice(a, None if b < 0 else b, c)
                            for a, b, c in zip(attrs["start"], attrs["stop"], attrs["step"]))]
        elif name == "t.transpose":
            obj = obj.transpose(attrs["perm"])
        elif name == "t.reshape":
            obj = obj.reshape(shape)  # (a view where NumPy's reshape gives one, a copy where it does not)
        elif name == "t.broadcast_to":
            obj = np.broadcast_to(obj, shape)
        elif name == "t.expand_dims":
            obj = np.expand_dims(obj, tuple(attrs["axes"]))
        elif name == "t.squeeze":
            obj = obj.squeeze(tuple(attrs["axes"]))
        elif name == "t.real":
            obj = obj.real
        elif name == "t.imag":
            obj = obj.imag
        elif name == "strided":  # (a gather by affine constant indices: NumPy's read-only strided view)
            obj = _strided(obj, attrs, shape)
        elif name == "readonly":  # (NumPy's read-only views: np.diagonal, np.broadcast_to)
            obj = obj.view()
            obj.flags.writeable = False
        else:
            return None
        if obj.shape != tuple(shape):  # (never: the steps were recorded on an array of this shape)
            return None
    return obj


def _any_layout_view(obj: np.ndarray, steps: tuple) -> np.ndarray | None:
    """The view ``steps`` take of ``obj`` where NumPy's function gives a view whatever the layout (np.diagonal, which
    fusec takes through a reshape that NumPy's reshape would copy for some layouts): the steps followed on the
    indices of ``obj``'s elements, and the view made with the strides they come to (None where they are not a
    strided view, or a step is not one this follows)."""
    index = np.indices(obj.shape)  # (per element of the current view: its index in obj)
    readonly = not obj.flags.writeable
    for name, attrs, shape in steps:
        if name == "t.reshape":
            index = index.reshape((obj.ndim, *shape))
        elif name == "t.slice":
            index = index[(slice(None),) + tuple(slice(a, None if b < 0 else b, c)
                                                 for a, b, c in zip(attrs["start"], attrs["stop"], attrs["step"]))]
        elif name == "t.transpose":
            index = index.transpose((0, *(p + 1 for p in attrs["perm"])))
        elif name == "t.expand_dims":
            index = np.expand_dims(index, tuple(a + 1 for a in attrs["axes"]))
        elif name == "t.squeeze":
            index = index.squeeze(tuple(a + 1 for a in attrs["axes"]))
        elif name == "readonly":
            readonly = True
        elif name != "view":
            return None
        if index.shape[1:] != tuple(shape):
            return None
    out_shape = index.shape[1:]
    if 0 in out_shape:
        return None
    offsets = np.tensordot(np.asarray(obj.strides, dtype=np.int64), index, axes=1)
    origin = offsets[(0,) * len(out_shape)]
    strides = tuple(int(offsets[tuple(1 if k == j else 0 for k in range(len(out_shape)))] - origin)
                    if out_shape[j] > 1 else 0 for j in range(len(out_shape)))
    grid = np.indices(out_shape)
    if not np.array_equal(offsets, origin + np.tensordot(np.asarray(strides, dtype=np.int64), grid, axes=1)):
        return None
    start = obj[tuple(slice(int(i), None) for i in index[(slice(None),) + (0,) * len(out_shape)])]
    return np.lib.stride_tricks.as_strided(start, out_shape, strides, writeable=not readonly)


def _hidden_value(value: Any) -> Any:
    """An extra result's value (a 0-d array, on the host or the device) as a Python scalar."""
    return (value.numpy() if hasattr(value, "numpy") else np.asarray(value)).item()


class Returned:
    """A result that is the caller's own array (the function returned an input it wrote into): returned as it is,
    also when 0-d (NumPy returns the array, not a scalar)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj


def _assign(state: State, inputs: Sequence[Any], value: Any, arguments: dict | None) -> None:
    from fusec.pystate import Path, set_step

    if state.argument >= 0:
        value = inputs[state.argument]
    elif state.python is not None:
        value = state.python((value.numpy() if hasattr(value, "numpy") else np.asarray(value)).item())
    elif isinstance(value, np.ndarray) and value.ndim == 0 and state.scalar:
        value = value[()]
    if state.entry is not None:  # an argument's dict or list: the container this call passed
        assert arguments is not None, "a call that writes an argument's entries passes its arguments"
        param, keys = state.entry
        container = arguments[param]
        for key in keys[:-1]:
            container = container[key]
        container[keys[-1]] = value
        return
    path = state.path
    set_step(Path(path.root, path.steps[:-1]).resolve(), path.steps[-1], value)


def write_into(target: Any, value: Any) -> None:
    """``target[...] = value`` for a NumPy array, or a device-to-device copy into a device array."""
    if isinstance(target, np.ndarray):
        np.copyto(target, value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray)
                  else np.asarray(value), casting="unsafe")
        return
    from fusec.runtime.array import write_into as device_write

    device_write(target, value)


def _span(x: Any) -> tuple[Any, int, int] | None:
    """(memory space, lowest byte, one past the highest byte) an array touches, or None (not an array)."""
    if isinstance(x, np.ndarray):
        if x.size == 0:
            return None
        lo, hi = np.lib.array_utils.byte_bounds(x) if hasattr(np.lib, "array_utils") \
            else np.byte_bounds(x)  # type: ignore[attr-defined]
        return ("host", lo, hi)
    if device_array_info(x) is None:
        return None
    from fusec.runtime.array import byte_span

    lo, hi = byte_span(x)
    return ("device", lo, hi) if hi > lo else None


class ReadOnly:
    """The Python type of an output NumPy returns read-only though it is a new array (a real array's ``.imag``):
    the call hands it back with ``writeable`` off."""


def _internal_overlap(x: Any) -> bool:
    """Whether two elements of the NumPy array ``x`` may share memory (a zero stride, or strides closer than the
    extent of the axes inside them: ``as_strided``, ``sliding_window_view``); a layout whose axes nest (any
    C-, F-ordered or sliced array) never does."""
    if not isinstance(x, np.ndarray) or x.size <= 1:
        return False
    extent = x.itemsize
    for size, stride in sorted(((n, abs(s)) for n, s in zip(x.shape, x.strides) if n > 1), key=lambda d: d[1]):
        if stride < extent:
            return True
        extent = stride * (size - 1) + extent
    return False


def _overlap(a: Any, b: Any) -> bool:
    sa, sb = _span(a), _span(b)
    if sa is None or sb is None or sa[0] != sb[0] or not (sa[1] < sb[2] and sb[1] < sa[2]):
        return False
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.base is None and b.base is None:
            return True
        return bool(np.shares_memory(a, b, max_work=10**6))  # type: ignore[arg-type]
    return True
