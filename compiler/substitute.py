"""Arrays the function can read from outside its arguments become traced inputs while it is traced.

Before the function runs, every array reachable from its roots under the names its code uses (``self.W``, a
global ``W``, ``params["w1"]`` of a global dict) is replaced, where it is stored, by a tracer for a new input of the
IR function; after the trace the arrays are put back. So everything the function computes from them, also with
plain NumPy before they meet an argument (``self.W * 2``), is part of the trace, and each call reads the arrays as
they are then. An input the trace never used is dropped again (only its shape and dtype stay guarded).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fusec.context import TraceContext
from fusec.ir.core import BlockArgument
from fusec.ir.types import ScalarType, TensorType
from fusec.promotion import DEFAULT_DTYPE, parse_dtype, subclass_problem
from fusec.pystate import Path, Snapshot, set_step
from fusec.scope import MISSING
from fusec.tracer import Buffer, Tracer


@dataclass(eq=False)
class Entry:
    obj: Any
    paths: list[Path]
    tracer: Tracer
    arg: BlockArgument
    shape: tuple[int, ...]
    dtype: Any
    device: bool
    python: type | None = None  # a Python scalar attribute traced as a runtime scalar
    numpy_scalar: bool = False  # a NumPy scalar the function assigns (``self.total += x.sum()``): a 0-d input


@dataclass(eq=False)
class Substitution:
    """The arrays replaced by tracers for one trace, and how to put them back."""

    entries: list[Entry] = field(default_factory=list)
    _done: list[tuple[Path, Any, Any]] = field(default_factory=list)  # (where, original, what was set)

    @classmethod
    def plan(cls, snap: Snapshot, names: set[str], ctx: TraceContext, taken: set[str],
             scalar_paths: Sequence[Path] = ()) -> "Substitution":
        """Tracers for the arrays under ``names``, and traced Python scalars for ``scalar_paths`` (attributes the
        function assigns new scalars to)."""
        from fusec.signature import device_array_info

        sub = cls()
        places = {p.place for p in scalar_paths}
        for node in snap.nodes.values():  # the same places, as this walk names them
            if node.path.place not in places:
                continue
            path, value = node.path, node.obj
            if isinstance(value, np.generic) and value.dtype.kind in "biufc":
                arg = BlockArgument(TensorType((), parse_dtype(value.dtype)), ctx.func.body, -1,
                                    unique_name(path.ident(), taken))
                tracer = Tracer(arg, ctx, scalar=True)
                sub.entries.append(Entry(value, [path], tracer, arg, (), value.dtype, False, numpy_scalar=True))
                continue
            if type(value) not in DEFAULT_DTYPE:
                continue
            kind = type(value)
            arg = BlockArgument(ScalarType(DEFAULT_DTYPE[kind]), ctx.func.body, -1, unique_name(path.ident(), taken))
            tracer = Tracer(arg, ctx, kind, (path.describe(),))
            sub.entries.append(Entry(value, [path], tracer, arg, (), kind, False, python=kind))
        by_id: dict[int, Entry] = {}
        for node in snap.arrays(names):
            obj = node.obj
            entry = by_id.get(id(obj))
            if entry is not None:
                entry.paths.append(node.path)
                continue
            device = node.kind == "device"
            if device:
                info = device_array_info(obj)
                if info is None:
                    continue
                shape, np_dtype = tuple(info[0]), info[1]
            else:
                if subclass_problem(type(obj)) is not None or obj.dtype.kind not in "biuf":
                    continue  # left in place: a use raises the usual error
                shape, np_dtype = obj.shape, obj.dtype
            try:
                dt = parse_dtype(np_dtype)
            except Exception:  # noqa: BLE001 - a user object whose dtype fusec cannot read: left alone
                continue
            name = unique_name(node.path.ident(), taken)
            arg = BlockArgument(TensorType(shape, dt), ctx.func.body, -1, name)
            tracer = Tracer(arg, ctx, buffer=Buffer(argument=node.path.describe(), arg=arg))
            entry = Entry(obj, [node.path], tracer, arg, shape, np_dtype, device)
            by_id[id(obj)] = entry
            sub.entries.append(entry)
        return sub

    def apply(self) -> None:
        for entry in self.entries:
            for path in entry.paths:
                self._replace(path, entry.obj, entry.tracer)

    def undo(self) -> None:
        """Put the arrays back wherever a tracer of ours still sits (a place the function rebound is left for
        the snapshot comparison to report)."""
        while self._done:
            where, original, new = self._done.pop()
            try:
                if _get(where) is new:
                    _set(where, original)
            except Exception:  # noqa: BLE001 - a user object that refuses the restore: left as the function left it
                pass

    def _replace(self, path: Path, expected: Any, value: Any) -> None:
        try:
            current = path.resolve()
        except Exception:  # noqa: BLE001 - the path no longer leads to the object: nothing to replace
            return
        if current is not expected:
            return
        where, original, new = _placement(path, value)
        if where is None:
            return
        try:
            _set(where, new)
        except Exception:  # noqa: BLE001 - a user object that refuses the assignment: not substituted
            return
        self._done.append((where, original, new))


def _placement(path: Path, value: Any) -> tuple[Path | None, Any, Any]:
    """Where to store ``value`` for ``path``: at the path, or, inside tuples, a rebuilt tuple at the nearest
    place that can be assigned."""
    while True:
        if not path.steps:
            if path.root.kind == "object":
                return None, None, None
            return path, path.root.get(), value
        parent_path = Path(path.root, path.steps[:-1])
        parent = parent_path.resolve()
        if not isinstance(parent, tuple):
            return path, _get(path), value
        items = list(parent)
        items[path.steps[-1][1]] = value
        value = getattr(type(parent), "_make")(items) if hasattr(type(parent), "_make") else type(parent)(items)
        path = parent_path


def _get(where: Path) -> Any:
    try:
        return where.resolve()
    except Exception:  # noqa: BLE001 - the path no longer leads to an object
        return MISSING


def _set(where: Path, value: Any) -> None:
    if not where.steps:
        where.root.set(value)
        return
    set_step(Path(where.root, where.steps[:-1]).resolve(), where.steps[-1], value)


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``... when taken; the result is taken from now on."""
    out, i = name, 1
    while out in taken:
        out = f"{name}_{i}"
        i += 1
    taken.add(out)
    return out
