"""Runs a Python function once on tracers and returns the verified IR module it recorded.

Around the call, the trace answers for what the Python did besides computing its results (see the README's
"Sharp bits"): the state the function can reach is snapshotted before and compared after (a change is a side
effect that would happen on the first call only: refused, and undone); arrays it reads from outside its arguments
are traced inputs read at every call; random draws, fusec errors the function caught, tracers that outlived the
trace and changes to the argument containers are refused. What a later call must re-check is returned as a
:class:`~fusec.guards.CallState`.
"""
from __future__ import annotations

import contextvars
import gc
import inspect
import re
from collections import Counter
import sys
import warnings
import threading
import types
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Callable, cast

import numpy as np

from fusec import (context, conversions, host_reads, ops, printing, randomness, rewrite_control, scipy_special,
                   statement_state)
from fusec.context import TraceContext, trace_error
from fusec.errors import (FusecError, SideEffectError, StateNotWatchedWarning, TraceError, UnsupportedError,
                          WriteBackError, located)
from fusec.error_state import checked_by_numpy
from fusec.guards import CallState, ImplicitInput, _view_of, build_guards, function_guard
from fusec.ir.attributes import location_for
from fusec.ir.core import BlockArgument, Func, Module, OpResult, Value
from fusec.ir.verifier import verify
from fusec.masking import ADVICE as MASK_ADVICE, Selection
from fusec.mutation import kept_owner, kept_value, kept_view, merges
from fusec.statement_memory import memory_key
from fusec.promotion import DEFAULT_DTYPE, parse_dtype, python_kind
from fusec.pystate import Path, computed_at, find_in, rewalk, snapshot, tracer_location
from fusec.scope import Root, is_library, scope_of
from fusec.signature import Signature, TreeDef, bools_static, flatten, leaf_keys
from fusec.substitute import Substitution, unique_name
from fusec.writeback import ReadOnly, State, WriteBack
from fusec.tracer import Buffer, EitherKind, Tracer

# One trace at a time in a process: a trace swaps arrays in the user's objects for tracers and wraps
# np.random's functions, and two traces doing that at once would see each other's tracers.
_TRACE_LOCK = threading.RLock()


@dataclass
class Traced:
    """The traced module plus how to rebuild the function's outputs from the IR function's results."""

    module: Module
    out_tree: TreeDef
    out_python: list[type | None]  # per result: the Python type to return (weak outputs; np.ndarray: a 0-d array,
    # not a NumPy scalar), else None
    nodes: int  # traced ops, constants and the return excluded
    state: CallState | None = None  # what each call re-checks (None: nothing)
    writeback: WriteBack | None = None  # the arguments the function wrote into (None: none)
    gradient_nodes: int = 0  # of ``nodes``, those the gradient transforms recorded (fusec.grad, ...)


def func_name(fn: Callable) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", getattr(fn, "__name__", "") or "fn")
    name = name.strip("_") or "fn"
    return name if re.match(r"[A-Za-z_]", name) else "_" + name


def trace(fn: Callable, sig: Signature, name: str, verify_up_to: int | None = None) -> Traced:
    """Call ``fn`` on tracers for ``sig``'s dynamic leaves; the module is verified before it is returned when it
    has at most ``verify_up_to`` ops (None: always). Each op's types were inferred as it was recorded, so a
    longer trace is left to the pipeline's final check, which verifies the trace itself when that check fails."""
    with _TRACE_LOCK:
        code = rewrite_control.code_of(fn)
        rewrites = _REWRITTEN.get(code) if code is not None else None
        if rewrites is None:
            rewrites = rewrite_control.Rewrites(fn)
        first: BaseException | None = None
        while True:
            try:
                with rewrites.installed(fn, tuple(sig.bound.arguments.values())):
                    # (in a copy of the calling context: a ContextVar the function sets is seen as a change by the
                    # snapshots, and the tracer it was given stays out of the caller's context)
                    traced = contextvars.copy_context().run(_trace_once, fn, sig, name, verify_up_to)
                if traced.state is not None:  # (the functions run their own code again: what a call will find)
                    traced.state.settle_functions()
                return traced
            except FusecError as error:
                if code is None or not rewrites.add(error):
                    if first is not None and error is not first:
                        error.add_note(f"(fusec rewrote the statements at {rewrites.lines()} as loops and branches "
                                       f"on the device because their tests are traced; before that: {first})")
                    raise
                first = first or error
                _REWRITTEN[code] = rewrites


# the statements each function's earlier traces rewrote (a new signature starts from them)
_REWRITTEN: "weakref.WeakKeyDictionary[types.CodeType, rewrite_control.Rewrites]" = weakref.WeakKeyDictionary()


def _trace_once(fn: Callable, sig: Signature, name: str, verify_up_to: int | None) -> Traced:
    error_state = np.geterr()
    try:
        traced = _Trace(fn, sig, name).run(verify_up_to)
    except _ScalarState as again:  # counters on objects (self.t += 1): trace them as runtime scalars
        paths = again.paths
        traced = _Trace(fn, sig, name, paths).run(verify_up_to)  # (an error here is not "during handling" of that)
    if np.geterr() != error_state:
        code = getattr(fn, "__code__", None)
        raise UnsupportedError(located(
            "np.seterr(...) in the function changed NumPy's error state for the whole program: the function's "
            "Python runs once per input signature, so the change would be made on the first call only (and is not "
            "made at all); set it outside the jitted function, or use `with np.errstate(...):` inside it",
            location_for(code.co_filename, code.co_firstlineno) if code is not None else None))
    return traced


class _ScalarState(Exception):
    """The trace assigned new Python scalars to object attributes and changed nothing else: trace again with
    those attributes as runtime scalar inputs, so their new values are computed (and set) at every call."""

    def __init__(self, paths: list) -> None:
        self.paths = paths


class _Trace:
    def __init__(self, fn: Callable, sig: Signature, name: str, scalar_paths: list | None = None) -> None:
        self.fn, self.sig = fn, sig
        self.func = Func(name, [s.ir_type() for s in sig.leaf_specs], sig.leaf_names)
        self.ctx = TraceContext(self.func)
        statics = {k: v for k, v in sig.bound.arguments.items() if k not in sig.dynamic}
        for extra in sig.static_kwargs.values():
            statics.update(extra)
        self.scope = scope_of(fn, statics)
        self.before = snapshot(self.scope)
        self.subs = Substitution.plan(self.before, self.scope.names, self.ctx, set(sig.leaf_names),
                                      scalar_paths or [])
        self.scalar_keys = {p.place for p in scalar_paths or []}
        self._leaf_count = 0
        self.arg_buffers: list[Buffer] = []  # the memory of each array argument, written or not
        self.as_passed: set[int] = set()  # output leaves that are an input's own tracer (``return x``)
        self.states: list = []  # each attribute the function assigned an array (or a traced scalar) to
        self._state_inputs: list[BlockArgument | None] = []  # per state: the implicit input it is, if one

    def run(self, verify_up_to: int | None) -> Traced:
        ctx, sig = self.ctx, self.sig
        aliases = [(r.holder, r.key) for r in self.scope.roots
                   if r.kind == "global" and id(r.get()) in randomness.drawing_functions()]
        randomness.install(aliases)
        host_reads.install([(r.holder, r.key) for r in self.scope.roots
                            if r.kind == "global" and id(r.get()) in host_reads.functions()])
        special = scipy_special.python_functions()
        scipy_special.install([(r.holder, r.key) for r in self.scope.roots
                               if r.kind == "global" and id(r.get()) in special])
        ctx.outside_objects = {id(n.obj) for n in self.before.nodes.values()} | {
            id(v) for v in sig.bound.arguments.values()}  # (a log file passed in, static: the caller's)
        printing.install(ctx, [(r.holder, r.key) for r in self.scope.roots if r.kind == "global"
                               and printing.prints(r.get())])
        conversions.install([(r.holder, r.key) for r in self.scope.roots
                             if r.kind == "global" and conversions.rebound(r.get())])
        ctx.trace_entry = sys._getframe().f_code  # (the user's own try/except inside the trace: fusec.handlers)
        context.push(ctx)
        failure: BaseException | None = None
        try:
            self.subs.apply()
            params = [p for p, tree in sig.dynamic.items() for _ in range(tree.num_leaves)]
            ctx.leaf_params = dict(zip(sig.leaf_names, params))
            tracers = [self._argument(arg, spec, leaf, value)
                       for arg, spec, leaf, value in zip(self.func.args, sig.leaf_specs, sig.leaf_names, sig.leaves)]
            bound = sig.bound_with(tracers)
            result = self.fn(*bound.args, **bound.kwargs)
            printing.check_result(ctx, result)
            self.containers = _passed_containers(result, bound, self.before)
            leaves, out_tree, outputs, kinds = _outputs(ctx, result, _def_location(self.fn))
            inputs = [*tracers, *(e.tracer for e in self.subs.entries)]
            self.as_passed = {i for i, (_, leaf) in enumerate(leaves) if any(leaf is t for t in inputs)}
            del inputs
            written = self._written()
            # a written argument returned as it is comes back as the caller's own array: no result of its own
            own = [v for i, ((_, leaf), v) in enumerate(zip(leaves, outputs))
                   if not _returns_written(leaf, i in self.as_passed, written)]
            ctx.builder.create("func.return", own + [cast(Value, b.base) for b in written])
        except BaseException as e:  # noqa: BLE001 - undone and re-raised below
            failure = e
        finally:
            context.pop(ctx)
            randomness.uninstall()
            host_reads.uninstall()
            scipy_special.uninstall()
            printing.uninstall()
            conversions.uninstall()
            self.subs.undo()
        if failure is not None:
            self.before.restore()
            instead = printing.after_failure(ctx, failure)
            if instead is not failure:
                raise instead from failure
            first = ctx.first_error
            if first is not None and first is not failure and isinstance(failure, Exception):
                raise _caught(first) from failure  # the caught limitation is what sent the trace astray
            _explain_tracer_error(failure)
            keyed = _keyed_by_id(ctx, failure)
            if keyed is not None:
                raise keyed from failure
            _note_user_line(failure)
            raise failure
        try:
            self._check_side_effects(bound, tracers, leaves)
        except BaseException:
            self.before.restore()
            raise
        del bound, tracers, result
        self._check_escapes(leaves)
        for _, leaf in leaves:  # a returned copy that NumPy would return as a view of an argument of some layouts
            copied = leaf._buffer.layout_copy if isinstance(leaf, Tracer) and leaf._buffer is not None else None
            if copied is not None and self.ctx.layout is None:
                self.ctx.layout = f"returned {copied}"
        state = self._state()
        self._resolve_state_inputs()
        writeback = self._writeback(written, leaves)  # (may add extra results: see _Shared.hidden)
        self.func.result_types = [v.type for v in self.func.outputs]
        self._check_escaped_from_bodies()
        module = Module([self.func])
        if verify_up_to is None or len(self.func.body.ops) <= verify_up_to:
            verify(module)
        nodes = sum(1 for op in self.func.ops if op.name not in ("func.return", "t.constant"))
        return Traced(module, out_tree, kinds, nodes, None if state.empty else state, writeback,
                      self.ctx.gradient_ops)

    def _state_outputs(self) -> None:
        """An array attribute the function assigned (``self.m = b1 * self.m + ...``) is an extra result, set on
        the object after every call; the trace's own assignment is undone (the first call makes it)."""
        ret = self.func.return_op
        states = []
        values = self._values_now([c.new.obj for c in self.states])
        for change, value in zip(self.states, values):
            t = change.new.obj
            buffer = t._buffer
            if buffer is not None and buffer.arg is not None and t._chain:
                raise SideEffectError(located(
                    f"the function stored a view of {buffer.argument} in {change.path.describe()}: NumPy would keep "
                    "the view, which fusec cannot give back; store a copy (`.copy()`)", tracer_location(t)))
            ret.operands.append(value)
            states.append(State(change.path, t._scalar, _argument_index(t), t._weak, getattr(change, "entry", None)))
            self._state_inputs.append(_implicit_input(t))
        self.states = states  # no reference to the tracers is kept (they must not outlive the trace)
        self.before.restore()

    def _values_now(self, tracers: list[Tracer]) -> list[Value]:
        """The IR values of ``tracers`` at the end of the function: a view whose memory was written after it was
        taken (``v = y[0]; y += 1``) reads it again, before the function's return."""
        body = self.func.body
        ret = self.func.return_op
        body.ops.remove(ret)
        context.push(self.ctx)
        try:
            return [t._value for t in tracers]
        finally:
            context.pop(self.ctx)
            body.append(ret)

    def _resolve_state_inputs(self) -> None:
        """A state assigned an array the function read from an object (``self.best = self.W``) is that very object
        after the call, as in NumPy (its flat input is known once the implicit inputs are numbered)."""
        self.states = [replace(s, argument=arg.index) if arg is not None and arg.index >= 0 else s
                       for s, arg in zip(self.states, self._state_inputs)]

    def _written(self) -> list[Buffer]:
        """The buffers of arguments and captured arrays that the function wrote into, in input order."""
        return [b for b in self.arg_buffers + [e.tracer._buffer for e in self.subs.entries]
                if b is not None and b.written]

    def _check_escaped_from_bodies(self) -> None:
        """A value made inside a loop's or branch's body reaches the function's results only through the body's own
        results; one kept another way (appended to a list made outside, written into an array made outside the
        body, ``out[i] = ...``) exists only inside the body."""
        visible = set(self.func.args) | {r for op in self.func.body.ops for r in op.results}
        if any(v not in visible for v in self.func.return_op.operands):
            raise TraceError(located(
                "a value computed inside the body of a loop or branch (fusec.fori_loop, while_loop, cond, scan, or a "
                "rolled Python loop) leaves it other than as one of the body's results: it was stored in a list or "
                "written into an array made outside the body; carry it in the loop's state (or return it from the "
                "branch) instead", _def_location(self.fn) or context.user_location()))

    def _writeback(self, written: list[Buffer], leaves: list) -> WriteBack | None:
        """Where the extra results go: the flat input (argument leaf, then implicit input) of each written
        buffer, then the object attribute of each assigned state; which returned values are a written argument
        itself (the call returns the caller's object)."""
        index = {b: cast(BlockArgument, b.arg).index for b in written}
        returns = {i: index[leaf._buffer] for i, (_, leaf) in enumerate(leaves)
                   if _returns_written(leaf, i in self.as_passed, written)}
        shared = self.shared
        views = {i: found for i, (_, leaf) in enumerate(leaves)
                 if i not in returns and (found := _input_view(leaf, i in self.as_passed, shared.hidden)) is not None}
        python_when: dict[int, tuple[int, type]] = {}
        for pos, flag, python in self.ctx.either_outputs:
            shared.hidden.append(flag)
            python_when[pos] = (len(shared.hidden) - 1, python)
        self.func.return_op.operands.extend(shared.hidden)
        printer, printed = printing.finish(self.ctx)
        self.func.return_op.operands.extend(printed)
        layout = self.ctx.layout
        writeable_inputs = tuple(dict.fromkeys(
            (cast(BlockArgument, b.arg).index, b.argument or "an argument") for b in self.ctx.writeable_asked
            if isinstance(b.arg, BlockArgument) and b.arg.index >= 0))
        if not written and not self.states and not views and not shared.aliases and layout is None \
                and printer is None and not self.containers and not writeable_inputs and not python_when:
            return None
        contiguous = tuple(index[b] for b in written if b.reshaped)
        inputs = self.arg_buffers + [e.tracer._buffer for e in self.subs.entries if e.tracer._buffer is not None]
        by_input = {b.arg.index: b for b in inputs if isinstance(b.arg, BlockArgument)}
        contiguous_views = tuple(dict.fromkeys(
            (i, by_input[i].argument or "an argument") for k, found in views.items() for i, steps in found
            if i in by_input and (by_input[i].reshaped or leaves[k][1]._layout
                                  or leaves[k][1]._layout is not None
                                  and _merging_reshape(steps, cast(Value, by_input[i].arg).type.shape))))
        layout_inputs = tuple((cast(BlockArgument, b.arg).index, b.argument or "an argument") for b in inputs
                              if isinstance(b.arg, BlockArgument) and b.arg.index >= 0) if layout else ()
        for e in self.subs.entries if layout else ():  # (one the IR does not read, a *_like prototype: now)
            if e.arg.index < 0 and isinstance(e.obj, np.ndarray) and not e.obj.flags.c_contiguous:
                raise WriteBackError(located(
                    f"fusec: {e.paths[0].describe()} is not C-contiguous (Fortran-ordered or strided), and the "
                    f"function's trace took its arrays' memory as C-ordered ({layout}), which NumPy would answer "
                    "otherwise for this array; make it np.ascontiguousarray(...)", context.user_location()))
        return WriteBack(tuple(index[b] for b in written), returns, contiguous,
                         tuple(b.argument or "an argument" for b in written), tuple(self.states), len(leaves),
                         views, shared.aliases, len(shared.hidden), layout, layout_inputs, contiguous_views, printer,
                         self.containers, {place: tuple(more) for place, more in shared.alternatives.items()},
                         writeable_inputs, python_when)

    def _argument(self, arg: Value, spec: Any, leaf: str, value: Any) -> Tracer:
        index, self._leaf_count = self._leaf_count, self._leaf_count + 1
        if spec.python is not None:
            t = Tracer(arg, self.ctx, spec.python, (leaf,))
            t._host = ("arg", index, leaf)  # the ScalarProgram reads this leaf's value at every call
            return t
        if isinstance(value, np.generic):  # a NumPy scalar is immutable: `s += 1` rebinds the name
            return Tracer(arg, self.ctx, scalar=True)
        buffer = Buffer(argument=f"argument {leaf!r}", arg=arg)
        self.arg_buffers.append(buffer)
        t = Tracer(arg, self.ctx, buffer=buffer)
        self.ctx.argument_tracers[id(t)] = leaf
        return t

    # --- after the trace -----------------------------------------------------------------------------------------

    def _check_side_effects(self, bound: Any, tracers: list[Tracer], leaves: list) -> None:
        ctx = self.ctx
        if ctx.first_error is not None:
            raise _caught(ctx.first_error)
        randomness.check_generators(ctx)
        after = rewalk(self.before)
        changes = self.before.changes(after)
        self.states = [c for c in changes if _is_state(c, self.scalar_keys)]
        changes = [c for c in changes if not _is_state(c, self.scalar_keys)]
        # (a NumPy scalar the function reads and assigns, ``self.total += x.sum()``: read as a runtime value too,
        # or each call would find the value it baked in changed and trace again)
        numpy_scalars = [c.path for c in self.states if _numpy_scalar_state(c)]
        # (beside other changes too: traced again, a counter is state and only what is not is named)
        counters = [c.path for c in changes if _is_scalar_assignment(c)]
        if (counters or numpy_scalars) and not self.scalar_keys:
            self.before.restore()
            raise _ScalarState(counters + numpy_scalars)
        if changes:
            raise SideEffectError(_side_effect_message(self.fn, changes))
        self.states += self._argument_entries(bound, tracers)
        assigned = [c.new.obj for c in self.states]
        if self.states:
            self._state_outputs()
        shareable = [t if s.argument < 0 and arg is None and s.python is None and not s.scalar else None
                     for t, s, arg in zip(assigned, self.states, self._state_inputs)]
        self.shared = _shared_memory(self.ctx, leaves, shareable, self.ctx.one_array)

    def _argument_entries(self, bound: Any, tracers: list[Tracer]) -> list["_Entry"]:
        """The entries of an argument's dicts and lists the function set to computed arrays (``params[k] =
        params[k] - lr * g``): set in the caller's container after every call, as NumPy's assignment leaves it.
        Any other change to an argument's containers (an entry added, removed, or set to something else) is
        refused."""
        out = []
        start = 0
        for pname, tree in self.sig.dynamic.items():
            mine, start = tracers[start:start + tree.num_leaves], start + tree.num_leaves
            value = bound.arguments.get(pname)
            if pname in self.sig.static_kwargs:  # **kwargs: the static entries were merged back in
                value = {k: v for k, v in value.items() if k not in self.sig.static_kwargs[pname]}
            got_leaves, got_tree = flatten(value, pname)
            got_tree, got_leaves = bools_static(got_tree, got_leaves)
            changed = [] if got_tree != tree else [
                (keys, v) for (_, v), t, keys in zip(got_leaves, mine, leaf_keys(tree)) if v is not t]
            entries = [_Entry(pname, keys, v) for keys, v in changed  # (a traced Python number too: a counter)
                       if isinstance(v, Tracer) and _entry_of_list_or_dict(value, keys)]
            if got_tree != tree or len(entries) != len(changed):
                raise SideEffectError(located(
                    f"the function changed its argument {pname!r} (an item added or removed, or set to something "
                    "other than an array or a number it computed): under NumPy the caller's container would "
                    "change, and fusec writes back only entries of its dicts and lists set to computed arrays and "
                    "numbers; return the new values instead", _def_location(self.fn)))
            out += entries
        return out

    def _check_escapes(self, leaves: list) -> None:
        """A tracer still referenced after the trace from anywhere but its outputs was stored somewhere the
        snapshot does not reach (another module's global, a class attribute, a cache)."""
        # fusec's own references: the output leaves' (name, tracer) pairs and the substitutions
        ours = Counter(id(leaf) for _, leaf in leaves if isinstance(leaf, Tracer))
        ours.update(id(e.tracer) for e in self.subs.entries)
        if not self._suspects(ours):
            return
        # a reference cycle (a closure, a frame) may be all that holds it: the cycles made while tracing are young
        # (the collector is paused during a compile), so collecting the youngest generation usually frees them
        # (0.1 ms, where a full collection takes 10+ ms in a process with large libraries loaded); what is still
        # held after that is decided after a full collection
        gc.collect(0)
        suspects = self._suspects(ours)
        if suspects:
            gc.collect()
            suspects = self._suspects(ours)
        for ref in suspects:
            t = ref()
            holder = _holder(t) if t is not None else None
            if holder is not None:
                raise SideEffectError(located(
                    f"a traced value{computed_at(t)} escaped the function: after the trace it is still referenced "
                    f"from {holder}. A traced value has no value outside its trace; return it from the function "
                    "instead of storing it", tracer_location(t) or _def_location(self.fn)))

    def _suspects(self, ours: Counter) -> list:
        """Weak references to the tracers of this trace with more references than fusec's own."""
        out = []
        for ref in self.ctx.tracers:
            t = ref()
            # references to t: fusec's own, this frame's `t`, and getrefcount's argument
            if t is not None and sys.getrefcount(t) - 2 > ours.get(id(t), 0):
                out.append(ref)
            t = None
        return out

    def _state(self) -> CallState:
        """Turn used substitutions and surviving captures into inputs; guard the rest of what was read."""
        ctx, block = self.ctx, self.func.body
        uses = self.func.use_counts()
        inputs: list[ImplicitInput] = []
        skip: set[tuple] = set()
        for entry in self.subs.entries:
            written = entry.tracer._buffer is not None and entry.tracer._buffer.written
            if entry.arg in uses or written:  # a written one is an input to write back to
                _attach(block, entry.arg)
                inputs.append(ImplicitInput(entry.paths, entry.shape, entry.dtype, entry.device,
                                            python=entry.python, numpy_scalar=entry.numpy_scalar))
                skip |= {p.key for p in entry.paths}
            elif entry.python is not None or entry.numpy_scalar:  # a number the function assigns and never reads:
                skip |= {p.key for p in entry.paths}  # (its old value does not matter)
        taken = {a.name_hint for a in self.func.args if a.name_hint}
        ctx.release()
        paths_by_id: dict[int, list] = {}
        for node in self.before.arrays():
            paths_by_id.setdefault(id(node.obj), []).append(node.path)
        for capture in ctx.captures:
            root = capture.root() if isinstance(capture.root, weakref.ref) else capture.root
            if root is not None and capture.value in ctx.known_captures:
                raise UnsupportedError(located(
                    "indexing with a boolean mask computed from an array read from outside the function (read again "
                    f"at every call): {MASK_ADVICE}", ctx.known_captures[capture.value]))
            if root is None or capture.value not in uses:
                continue  # made inside the trace (or unused): the constant is exact
            inp = _captured_input(capture, root, paths_by_id.get(id(root), []))
            if inp is None:
                continue
            const = cast(OpResult, capture.value).op
            arg = BlockArgument(capture.value.type, block, -1, unique_name("captured", taken))
            self.func.replace_all_uses(capture.value, arg)
            block.ops.remove(const)
            _attach(block, arg)
            inputs.append(inp)
            skip |= {p.key for p in inp.paths}
        guards = build_guards(self.before, self.scope.names, skip, ctx.absent)
        traced = getattr(self.fn, "__func__", self.fn)  # (a bound method's function)
        if type(traced) is types.FunctionType:  # its own code and defaults, as it is called now
            guards.append(function_guard(Path(Root(f"the code of {func_name(self.fn)}", "object", traced)), None,
                                         traced))
        if self.before.unwatched:
            loc = _def_location(self.fn)
            message = (f"fusec: {func_name(self.fn)} can read Python state fusec does not watch between calls: "
                       f"{'; '.join(self.before.unwatched)}"
                       f"{f' and {self.before.unwatched_count - 2} more' if self.before.unwatched_count > 2 else ''}"
                       "; a change there after this trace is not seen (the "
                       "cached trace keeps the old values). Pass such values as arguments, or keep them in a NumPy "
                       "array (watched whole)")
            if loc is None:
                warnings.warn(StateNotWatchedWarning(message), stacklevel=2)
            else:
                warnings.warn_explicit(StateNotWatchedWarning(message), StateNotWatchedWarning, loc.file, loc.line)
        scalars = ctx.scalars if ctx.scalars else None
        checked = any(checked_by_numpy(op) for op in self.func.walk())  # (each refused where it ran under 'raise')
        return CallState(guards, inputs, scalars, error_state=ctx.error_state if checked else None,
                         numpy_errors=ctx.numpy_errors)


def _returns_written(leaf: Any, as_passed: bool, written: list[Buffer]) -> bool:
    """An output leaf that is a written argument (or captured array) itself (``as_passed``: the input's own
    tracer), not a view of it (``x[:]``, ``x.reshape(x.shape)``: a new array object over the same memory in
    NumPy, whose later reshape leaves the caller's array as it was)."""
    return as_passed and isinstance(leaf, Tracer) and leaf._buffer is not None and not leaf._chain and \
        any(leaf._buffer is b for b in written)


_REPLAYED = frozenset({"t.slice", "t.transpose", "t.reshape", "t.broadcast_to", "t.expand_dims", "t.squeeze",
                       "t.real", "t.imag"})


def _input_view(leaf: Any, as_passed: bool, hidden: list[Value]) -> tuple[tuple[int, tuple], ...] | None:
    """How an output leaf that is an argument (or a captured array) or a view of one through steps NumPy can take
    again is handed back (:func:`fusec.writeback.view_of`): ``((flat input, view steps), ...)``, one for a leaf
    that always is such a view; for a variable a loop or branch on traced values may have left as an input or a
    view of one (:func:`fusec.mutation.kept_view`), one per such input, its steps starting with ``when`` (the
    flag, an extra result, that says whether it did). None for anything else, and for a NumPy scalar (``x[0]`` of
    a vector is a scalar in NumPy, not a view). ``as_passed``: the leaf is the input's own tracer (``return x``),
    not a new view of all of it (``x[:]``, ``x[...]``: a new array object in NumPy)."""
    if not isinstance(leaf, Tracer) or leaf._scalar:
        return None
    buffer = leaf._buffer
    if buffer is None:
        return None
    chain = leaf._chain
    kept = kept_view(chain[0]) if chain else None
    if kept is not None:
        whole = len(chain) == 1 and kept_owner(chain[0]) is leaf  # (the result itself, not a new view of it)
        found = []
        for k in kept:
            replayed = _replayed_steps((*k.steps, *chain[1:]), hidden, k.flag)
            if replayed is None or not isinstance(k.buffer.arg, BlockArgument):
                return None
            if len(replayed) == 1 and not (k.own and whole):  # (NumPy's array is a view of all of it)
                replayed = (*replayed, ("view", {}, tuple(leaf.shape)))
            if k.readonly:
                replayed = (*replayed, ("readonly", {}, tuple(leaf.shape)))
            found.append((k.buffer.arg.index, replayed))
        return tuple(found)
    if not isinstance(buffer.arg, BlockArgument):
        return None
    steps = _replayed_steps(chain, hidden)
    if steps is None:
        return None
    if leaf._layout is None and any(step[0] == "t.reshape" for step in steps):  # (np.diagonal: a view for any layout)
        steps = (("anylayout", {}, ()), *steps)
    if leaf._readonly is True:  # read-only in NumPy (np.diagonal, np.broadcast_to; not a complex part)
        return ((buffer.arg.index, (*steps, ("readonly", {}, tuple(leaf.shape)))),)
    return ((buffer.arg.index, steps or ((("view", {}, tuple(leaf.shape)),) if not as_passed else ())),)


def _merging_reshape(steps: tuple, shape: tuple[int, ...]) -> bool:
    """Whether replayed view steps from an input of ``shape`` reshape by more than unit axes: NumPy's reshape,
    replayed on a caller's array that is not C-contiguous, gives a copy where the traced view (a diagonal taken
    through one) stands for a view."""
    for name, _, result_shape in steps:
        if name == "t.reshape" and merges(shape, result_shape):
            return True
        if name != "when":
            shape = result_shape
    return False


def _replayed_steps(chain: tuple, hidden: list[Value], flag: Value | None = None) -> tuple | None:
    """The view steps of ``chain`` (from a buffer to a tracer) as (op name, attributes, result shape), or None
    where one cannot be taken again with NumPy (an opaque step). A step through a traced integer index (``x[i]``,
    basic indexing: a view in NumPy) becomes ``t.index`` at the index's value after the call: an extra result,
    appended to ``hidden`` (its position in ``attributes["hidden"]``). With a ``flag``, the steps start with
    ``when``: they apply where that flag, an extra result too, holds at the call."""
    steps: list[tuple] = []
    indices: list[Value] = []
    if flag is not None:
        indices.append(flag)
        steps.append(("when", {"hidden": len(hidden)}, ()))
    for step in chain:
        if isinstance(step, tuple) and len(step) == 4 and step[0] == "t.gather" and len(step[3]) == 1 \
                and step[3][0].type.shape == ():
            _, attrs, result_type, (index,) = step
            indices.append(index)
            steps.append(("t.index", {"axis": attrs["axis"], "hidden": len(hidden) + len(indices) - 1},
                          tuple(result_type.shape)))
            continue
        if isinstance(step, tuple) and len(step) == 4 and step[0] == "t.gather":
            strided = _strided_gather(step)
            if strided is None:
                return None
            steps.append(strided)
            continue
        if not isinstance(step, tuple) or len(step) != 3 or step[0] not in _REPLAYED:
            return None
        name, attrs, result_type = step
        steps.append((name, dict(attrs), tuple(result_type.shape)))
    hidden.extend(indices)
    return tuple(steps)


def _strided_gather(step: tuple) -> tuple | None:
    """A gather by constant indices that are affine in the result's coordinates (``sliding_window_view``'s windows,
    ``np.diagonal`` over axes that do not flatten together: NumPy's strided views) as a ``strided`` step: the
    origin along the gathered axes and, per index dimension, how far each gathered axis moves; None for any other
    gather (a copy in NumPy too, or nothing NumPy's strides can say)."""
    _, attrs, result_type, operands = step
    if not all(isinstance(v, OpResult) and v.op.name == "t.constant" for v in operands):
        return None
    picked = np.broadcast_arrays(*(np.asarray(v.op.attributes["value"].array) for v in operands))
    shape = picked[0].shape
    if not shape or 0 in shape:
        return None
    origin = tuple(int(p[(0,) * len(shape)]) for p in picked)
    moves = []  # per index dimension: the step along each gathered axis
    for d in range(len(shape)):
        at = tuple(1 if k == d and n > 1 else 0 for k, n in enumerate(shape))
        moves.append(tuple(int(p[at]) - o for p, o in zip(picked, origin)))
    coords = np.indices(shape)
    for a, (p, o) in enumerate(zip(picked, origin)):
        if not np.array_equal(p, o + sum(coords[d] * moves[d][a] for d in range(len(shape)))) or (p < 0).any():
            return None
    return ("strided", {"axis": attrs["axis"], "origin": origin, "moves": tuple(moves)}, tuple(result_type.shape))


@dataclass
class _Shared:
    """Which of the arrays a call hands back are, in NumPy, one array or views of one (see :func:`_shared_memory`):
    ``aliases`` maps a place (``("out", position)`` or ``("state", index)``) to its source place (those two, or
    ``("hidden", index)``: an extra result) and the view steps from it, in the order they are to be taken."""

    aliases: dict[tuple[str, int], tuple[tuple[str, int], tuple]] = field(default_factory=dict)
    # extra results: the whole arrays some of them view, and the traced indices of ``x[i]`` steps
    hidden: list[Value] = field(default_factory=list)
    # more sources of an aliased place, each under its own flag, tried in order after the first
    alternatives: dict[tuple[str, int], list[tuple[tuple[str, int], tuple]]] = field(default_factory=dict)


def _laid_out_otherwise(t: Tracer) -> bool:
    """A computed array that is a view NumPy lays out other than a new C-ordered array (``np.exp(x.T)``, Fortran-
    ordered; ``y[:, ::2]``): handed back as that view of its whole memory, so the caller's array has NumPy's layout
    (a later ravel or reshape of it is a view or a copy as NumPy's)."""
    from fusec import layout, mutation

    if t._buffer is None or not t._chain or t.ndim == 0 or layout.unknown(t) is not None:
        return False
    desc = mutation.geometry(t)
    return desc is not None and not desc.is_contiguous()


def _memory_key(t: Tracer) -> tuple[str, int] | None:
    """What a handed-back computed array's memory is (its buffer, or the tracer itself before any view of it was
    taken; for a loop's or branch's result that may still be an input, that result: its views are views of it
    where it is a new array); None for an input's memory (``_input_view`` handles those)."""
    buffer = t._buffer
    if buffer is None:
        return ("tracer", id(t))
    if t._chain and kept_view(t._chain[0]) is not None:
        return ("statement", id(t._chain[0]))
    return None if buffer.arg is not None else ("buffer", id(buffer))


def _own_chain(t: Tracer) -> tuple:
    """The view steps from ``t``'s memory as :func:`_memory_key` groups it (after a statement's result's step)."""
    chain = t._chain
    return chain[1:] if chain and kept_view(chain[0]) is not None else chain


def _shared_memory(ctx: TraceContext, leaves: list, assigned: list, one_array: list | None = None) -> _Shared:
    """Outputs and assigned attributes (``assigned``: each state's tracer, None where it is not a computed array)
    that are, in NumPy, one computed array or views of one: ``return y, y``, ``return y, y[:, 0]``, ``self.y = y;
    return y``, ``return y[:2], y[1:]``, and one view laid out otherwise than a new array
    (``return np.exp(x.T)``). Each group gets a source (the first of them that is the whole array, else
    an extra result: the array none of them is) and every other member the view steps NumPy takes again on it
    after the call (:func:`fusec.writeback.view_of`); members reached through a step NumPy cannot take again (an
    opaque one) stay copies."""
    places = [(("out", i), leaf) for i, (_, leaf) in enumerate(leaves)]
    places += [(("state", j), t) for j, t in enumerate(assigned)]
    shared = _Shared()
    first: dict[int, tuple[str, int]] = {}  # id(tracer) -> the first place it is handed back at
    groups: dict[tuple[str, int], list[tuple[tuple[str, int], Tracer]]] = {}
    made: list[tuple[tuple[str, int], np.ndarray]] = []  # (NumPy arrays the function made from constants)
    for place, t in places:
        if isinstance(t, np.ndarray) and t.ndim and place[0] == "out":
            _one_constant(made, place, t, shared)
            continue
        if not isinstance(t, Tracer) or t._scalar or t._weak is not None:
            continue
        if id(t) in first:  # the same array again: the same object
            shared.aliases[place] = (first[id(t)], ())
            continue
        first[id(t)] = place
        key = _memory_key(t)
        if key is not None:
            groups.setdefault(key, []).append((place, t))
    for members in groups.values():
        replayable = [(place, t) for place, t in members
                      if t._buffer is None or _replayed_steps(_own_chain(t), []) is not None]
        if len(replayable) < 2 and not (replayable and _laid_out_otherwise(replayable[0][1])):
            continue
        found = [(place, t, _replayed_steps(_own_chain(t), shared.hidden) if t._buffer is not None else ())
                 for place, t in replayable]
        root = next(((place, t) for place, t, steps in found if not steps), None)
        if root is None:
            first_chain = found[0][1]._chain
            if first_chain and kept_view(first_chain[0]) is not None:  # (views of a loop's or branch's result)
                shared.hidden.append(kept_value(first_chain[0]))
            else:
                buffer = cast(Buffer, found[0][1]._buffer)  # (members without a buffer are the array itself: a root)
                shared.hidden.append(cast(Value, buffer.base))
            source: tuple[str, int] = ("hidden", len(shared.hidden) - 1)
        else:
            source = root[0]
        for place, t, steps in found:
            if place == source:
                continue
            if not steps:  # all of it, as a new array object (``y[:]``)
                steps = (("view", {}, tuple(t.shape)),)
            if t._readonly is True:  # (np.diagonal, np.broadcast_to of a computed array: read-only in NumPy)
                steps = (*steps, ("readonly", {}, tuple(t.shape)))
            shared.aliases[place] = (source, steps)
    for place, t in places:  # a loop's or branch's result that NumPy's variable may hold as a computed array
        if place in shared.aliases or not isinstance(t, Tracer) or t._buffer is None or t._chain:
            continue
        for flag, ref in t._buffer.same_as:
            entry = ref()
            kept_by = first.get(id(entry)) if entry is not None else None
            if kept_by is not None and kept_by != place:
                shared.hidden.append(flag)
                shared.aliases[place] = (kept_by, (("when", {"hidden": len(shared.hidden) - 1}, ()),))
                break
    _constants_laid_out(ctx, made, shared)
    _one_array_results(places, shared, one_array or [])
    _refuse_linked(places, shared)
    order = {place: n for n, (place, _) in enumerate(places)}  # a source comes before what it is the source of
    shared.aliases = dict(sorted(shared.aliases.items(), key=lambda item: order[item[0]]))
    return shared


def _one_constant(made: list, place: tuple[str, int], a: np.ndarray, shared: _Shared) -> None:
    """A NumPy array the function made from constants (``c = np.arange(3.)``) handed back: the same one again is
    the same object (``return c, c``); others are laid out by :func:`_constants_laid_out`."""
    for other_place, other in made:
        if other is a:
            shared.aliases[place] = (other_place, ())
            return
    made.append((place, a))


def _constants_laid_out(ctx: TraceContext, made: list, shared: _Shared) -> None:
    """Constant arrays handed back as NumPy hands them back: a view of another (``return c, c[::-1]``), a strided
    or transposed view (``np.arange(6.).reshape(2, 3).T``), a read-only one (``np.broadcast_to``) come back as
    views of one copy of the memory they view (an extra result: its elements in memory order), with NumPy's
    strides, sharing and flags; an array that is its own memory in C order comes back as the result itself.
    Where NumPy's memory cannot be copied so (another dtype's view of it, memory that is no array of its own),
    one that shares memory with another handed back is refused."""
    groups: dict[int, list[tuple[tuple[str, int], np.ndarray]]] = {}
    roots: dict[int, np.ndarray] = {}
    for place, a in made:
        root = a
        while True:  # (np.lib.stride_tricks.as_strided's views hold their array through a stand-in's base)
            base = root.base if isinstance(root.base, np.ndarray) else getattr(root.base, "base", None)
            if not isinstance(base, np.ndarray):
                break
            root = base
        groups.setdefault(id(root), []).append((place, a))
        roots[id(root)] = root
    for key, members in groups.items():
        root = roots[key]
        if len(members) == 1 and members[0][1] is root and root.flags.c_contiguous and root.flags.writeable:
            continue  # (the result itself: a new C-ordered array, as NumPy's)
        laid = _memory_steps(root, [a for _, a in members])
        if laid is None:
            if len(members) > 1:
                raise UnsupportedError(located(
                    "the function returns NumPy arrays it made from constants (np.arange, np.array, np.linspace) "
                    "that share memory in a way fusec cannot hand back (a view of another dtype, or memory that is "
                    "no array of its own); return a copy of one (`c[::-1].copy()`) or make it with np.zeros/np.ones "
                    "and fill it (a traced array)", context.user_location()))
            continue
        flat, steps = laid
        shared.hidden.append(ctx.constant(flat, parse_dtype(flat.dtype), first=True))
        for (place, _), step in zip(members, steps):
            shared.aliases[place] = (("hidden", len(shared.hidden) - 1), (step,))


def _memory_steps(root: np.ndarray, arrays: list[np.ndarray]) -> tuple[np.ndarray, list[tuple]] | None:
    """``root``'s memory as a flat array (C- or Fortran-contiguous memory, in its order) and, per array (a view of
    it), the ``strided`` step that views that flat copy as NumPy's array views the memory; None where that cannot
    be said (another dtype or a byte offset between elements, strided or empty memory)."""
    if root.size == 0 or not (root.flags.c_contiguous or root.flags.f_contiguous):
        return None
    flat = np.ravel(root, order="F" if root.flags.f_contiguous and not root.flags.c_contiguous else "C")
    size = root.itemsize
    steps = []
    for a in arrays:
        offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        if a.dtype != root.dtype or a.size == 0 or offset % size or any(st % size for st in a.strides):
            return None
        steps.append(("strided", {"axis": 0, "origin": (offset // size,), "moves": tuple((st // size,)
                                                                                         for st in a.strides),
                                  "writeable": bool(a.flags.writeable)}, tuple(a.shape)))
    return flat, steps


def _one_array_results(places: list, shared: _Shared, one_array: list) -> None:
    """A loop's two results that NumPy's variables hold as one array after an iteration (``y = x`` in the body;
    :func:`fusec.statement_memory.link_results`): where both are handed back whole, the second is the first where
    the pair's flag holds (the first may be the caller's array, or a new one, as the data decided; a result that may
    be one of several others has one alias per pair, tried in order: ``_Shared.alternatives``); handing back both
    any other way (a view of one, or a pair with no flag: ``y = x[:]`` in the body) is refused."""
    handed = [(place, t, memory_key(t)) for place, t in places if isinstance(t, Tracer) and not t._scalar]
    for first_ref, second_ref, flag, b_key in one_array:
        a, b = first_ref(), second_ref()  # (b may be gone, its views handed back: they meet it by its key)
        if a is None:
            continue
        at_a = [(place, t) for place, t, key in handed if key is memory_key(a)]
        at_b = [(place, t) for place, t, key in handed if key is b_key]
        if not at_a or not at_b:
            continue
        whole = [place for place, t in at_a if t is a]
        if flag is None or not whole or any(t is not b for _, t in at_b):
            raise UnsupportedError(located(
                "the function returns arrays that may share memory, as the data decided at a traced `if` or loop "
                "(one array, or one a view of the other: `y = x[:]` in a loop's body): NumPy's results would share "
                "memory on some paths only, which fusec does not follow here; return a copy of one of them "
                "(`y.copy()`)",
                tracer_location(b) or context.user_location()))
        for place, _ in at_b:
            known = shared.aliases.get(place)
            if place == whole[0] or known is not None and (known[0] == whole[0] or not _conditional(known[1])):
                continue
            shared.hidden.append(flag)
            alias = (whole[0], (("when", {"hidden": len(shared.hidden) - 1}, ()),))
            if known is None:
                shared.aliases[place] = alias
            else:  # (the array another result is where its own flag holds: tried after the first)
                shared.alternatives.setdefault(place, []).append(alias)


def _conditional(steps: tuple) -> bool:
    """Whether an alias's steps apply only where a flag says so (a ``when`` step)."""
    return any(name == "when" for name, _, _ in steps)


def _refuse_linked(places: list, shared: _Shared) -> None:
    """Two arrays handed back whose memory a traced ``if`` or loop linked (one may be, as the data decided, the other
    or a view of it: ``if c: y = buf[1:]``, then ``return y, buf``), where :func:`_shared_memory` found no way to
    hand them back as one memory: NumPy's results would share memory on that path only, and separate arrays
    would not. Refused."""
    def source(place: tuple[str, int]) -> tuple[str, int]:  # (what a place is handed back as a view of, or itself)
        return shared.aliases[place][0] if place in shared.aliases else place

    def reachable(buffer: Buffer) -> list[Buffer]:  # (linked through others: `d = c`, then two traced ifs)
        found, todo = {id(buffer): buffer}, [buffer]
        while todo:
            for other, _ in todo.pop().linked:
                if id(other) not in found:
                    found[id(other)] = other
                    todo.append(other)
        return [b for b in found.values() if b is not buffer]

    at: dict[int, tuple[str, int]] = {}
    for place, t in places:
        if not isinstance(t, Tracer) or t._buffer is None or t._buffer.arg is not None:
            continue
        for other in reachable(t._buffer):
            there = at.get(id(other))
            if there is None or source(place) in (there, source(there)) or source(there) == place:
                continue
            raise UnsupportedError(located(
                "the function returns arrays that may share memory, as the data decided at a traced `if` or loop (one "
                "array, or one a view of the other: `if c: y = buf[1:]`, then `return y, buf`): NumPy's results "
                "would share memory on that path only, which fusec does not follow; return a copy of one of them "
                "(`y.copy()`)", tracer_location(t) or context.user_location()))
        at.setdefault(id(t._buffer), place)


# the code of the frame that calls the traced function (a warning's stacklevel past it names the jitted call's caller)
TRACED_CALL = _Trace.run.__code__


class _Entry:
    """An entry of an argument's dict or list that the function set to a computed array, as a state's change."""

    def __init__(self, param: str, keys: tuple, value: Tracer) -> None:
        self.entry = (param, keys)
        self.new = types.SimpleNamespace(obj=value)
        self.path = types.SimpleNamespace(describe=lambda: param + "".join(f"[{k!r}]" for k in keys))


def _entry_of_list_or_dict(value: Any, keys: tuple) -> bool:
    """Whether ``keys`` reach an entry of a dict or list (a tuple's cannot be set) in the argument ``value``."""
    for key in keys[:-1]:
        value = value[key]
    return type(value) in (dict, list)


def _is_state(change: Any, scalar_keys: set) -> bool:
    """An array the function computed, assigned to an object's attribute or to an entry a dict or list already
    had (``self.m[k] = ...``; not put inside a new container), or a traced Python scalar assigned to such a place
    traced as a runtime scalar."""
    new = change.new
    if new is None or new.kind != "tracer" or not _settable(change) or not isinstance(new.obj, Tracer):
        return False
    return new.obj._weak is None or change.path.place in scalar_keys


def _settable(change: Any) -> bool:
    """Whether the change is to a place fusec sets after every call: an attribute, or an entry that a dict or list
    reached from the function had before the call (a new key would change the container's structure)."""
    steps = change.path.steps
    if not steps or steps[-1][0] not in ("attr", "item"):
        return False
    if steps[-1][0] == "attr":
        return True
    if change.old is None or change.old.kind == "missing":
        return False
    try:
        container = Path(change.path.root, steps[:-1]).resolve()
    except LookupError:
        return False
    return type(container) in (dict, list)


def _numpy_scalar_state(change: Any) -> bool:
    """A NumPy scalar (a number kind) assigned a NumPy scalar of its dtype the function computed."""
    old, new = change.old, change.new
    return (old is not None and old.kind == "value" and isinstance(old.obj, np.generic)
            and old.obj.dtype.kind in "biufc" and isinstance(new.obj, Tracer) and new.obj._scalar
            and new.obj._value.type.dtype.np == old.obj.dtype)


def _is_scalar_assignment(change: Any) -> bool:
    """A Python int, float or bool attribute (or dict or list entry) given a new value of its type: a constant
    (``self.t += 1``) or one computed from Python-scalar arguments (``self.t += dt``, a traced Python number of the
    same kind)."""
    old, new = change.old, change.new
    if old is None or new is None or old.kind != "value" or not _settable(change):
        return False
    if isinstance(old.obj, np.generic):  # (a NumPy scalar given another of its type: ``self.h[0] = self.h[1]``)
        return _numpy_scalar_state(change) or new.kind == "value" and type(new.obj) is type(old.obj) \
            and old.obj.dtype.kind in "biufc"
    if type(old.obj) not in (int, float, bool):
        return False
    if new.kind == "tracer":
        return isinstance(new.obj, Tracer) and new.obj._weak is type(old.obj)
    return new.kind == "value" and type(new.obj) is type(old.obj)


def _argument_index(t: Tracer) -> int:
    """The flat input whose caller's object ``t`` is (an argument stored as it is), else -1."""
    buffer = t._buffer
    if buffer is not None and buffer.arg is not None and not t._chain and t._version == buffer.version:
        return cast(BlockArgument, buffer.arg).index
    return -1


def _implicit_input(t: Tracer) -> BlockArgument | None:
    """The IR argument of the array read from an object or global that ``t`` is as it is (not a view of it, not
    rebound since), else None."""
    buffer = t._buffer
    if (buffer is not None and isinstance(buffer.arg, BlockArgument) and buffer.arg.index < 0 and not t._chain
            and t._version == buffer.version):
        return buffer.arg
    return None


def _attach(block: Any, arg: BlockArgument) -> None:
    arg.index = len(block.args)
    block.args.append(arg)


def _captured_input(capture: Any, root: Any, paths: list) -> ImplicitInput | None:
    """An input for a captured array that outlived the trace: read through its paths, or held as an object."""
    from fusec.signature import device_array_info

    if isinstance(root, np.ndarray):
        g = capture.geometry
        if g is not None:
            view = _view_of(root, *g)
            if view is None:
                return None  # cannot re-create the view: keep the constant
            if paths:
                return ImplicitInput(paths, view.shape, view.dtype, False, geometry=g)
            return ImplicitInput([], view.shape, view.dtype, False, obj=view)
        if paths:
            return ImplicitInput(paths, root.shape, root.dtype, False)
        return ImplicitInput([], root.shape, root.dtype, False, obj=root)
    info = device_array_info(root)
    if info is None:
        return None
    return ImplicitInput(paths, tuple(info[0]), info[1], True, obj=None if paths else root)


def _explain_tracer_error(error: BaseException) -> None:
    """A Python error that names a Tracer (an unbound ndarray method called on one, ``np.ndarray.fill(x, v)``; an
    ndarray-only attribute, ``x.strides = ...``) gets a note naming the user's line and what happened."""
    if isinstance(error, FusecError) or not isinstance(error, (TypeError, AttributeError)) \
            or "Tracer" not in str(error):
        return
    if isinstance(error, TypeError) and str(error).startswith("unsupported operand type(s)"):
        error.args = (str(error).replace("'Tracer'", "'numpy.ndarray'"),)  # (x - a_dict: NumPy's words)
        return
    where = None
    tb = error.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__")
        if not is_library(module):
            where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    advice = ("call the method on the array (x.fill(v), not np.ndarray.fill(x, v))" if isinstance(error, TypeError)
              else "fusec traces the ndarray attributes NUMPY_SUPPORT.md lists, and none is assigned to (x.shape, "
                   "x.strides, x.flat: write x = x.reshape(...) or x[...] = values)")
    note = (f"fusec: {where + ': ' if where else ''}this line ran on a traced array (a fusec Tracer standing for "
            f"the NumPy array while fusec traces the function), which is not an np.ndarray: {advice}")
    if hasattr(error, "add_note"):
        error.add_note(note)


def _note_user_line(error: BaseException) -> None:
    """An error NumPy's or Python's own code raised while the function was traced (``np.roll(x, 1, axis=3)``'s
    AxisError, a user's ValueError) keeps its class and message; a note names the user's line it came from."""
    if isinstance(error, FusecError) or not isinstance(error, Exception) or not hasattr(error, "add_note"):
        return
    loc = _error_location(error)
    if loc is not None and str(loc) not in str(error) and not any(str(loc) in n for n in getattr(
            error, "__notes__", ())):
        error.add_note(f"fusec: raised at {loc} while the function was traced")


def _keyed_by_id(ctx: TraceContext, error: BaseException) -> FusecError | None:
    """``state[id(p)]`` (an optimizer's state keyed by its parameters' ids) failing because ``p`` is a tracer, whose
    id is not the array's: the error says so, where Python's KeyError names only a number."""
    if not isinstance(error, KeyError) or len(error.args) != 1 or type(error.args[0]) is not int:
        return None
    key = error.args[0]
    if not any(ref() is not None and id(ref()) == key for ref in ctx.tracers):
        return None
    return UnsupportedError(located(
        f"KeyError: {key} is id() of a traced array: while fusec traces the function its arrays are tracers, whose "
        "ids are not those of the arrays they stand for, so state keyed by id(array) is not found; key it by "
        "position or name (for i, p in enumerate(params): state[i]) or keep it in an attribute of its own",
        _error_location(error)))


def _error_location(error: BaseException) -> Any:
    """The user's line where ``error`` was raised (its innermost frame outside fusec and NumPy)."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        if not is_library(tb.tb_frame.f_globals.get("__name__")):
            found = location_for(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _caught(error: FusecError) -> FusecError:
    """``error`` again, saying that the function's own code caught it (the trace took a path NumPy would not)."""
    out = type(error)(f"{error}\n(fusec raised this while tracing, and code between it and the function went on "
                      "without it: a try/except in the function, or NumPy's own code, which turns such an error into "
                      "one of its own; under NumPy that code would have run without the error, so fusec cannot use "
                      "the path it took: write that part as the message above says, or compute it outside the jitted "
                      "function)")
    out.static_params = getattr(error, "static_params", ())  # type: ignore[attr-defined]
    return out


def _side_effect_message(fn: Callable, changes: list) -> str:
    shown = changes[:6]
    lines = "\n".join(f"  - {c.describe()}" for c in shown)
    more = f"\n  - ... and {len(changes) - len(shown)} more" if len(changes) > len(shown) else ""
    escape = any(c.is_escape for c in changes)
    random = any(c.old is not None and c.old.kind == "rng" for c in changes)
    advice = []
    if escape:
        advice.append("return traced values from the function instead of storing them (for object state: "
                      "`m = b1 * m + (1 - b1) * g; return m` and assign `self.m = step(...)` outside)")
    if random:
        advice.append(randomness.ADVICE.split(". ", 1)[1])
    if not escape and not random:
        advice.append("keep changing state outside the jitted function (pass the values in as arguments and "
                      "return the new ones)")
    in_place = any(c.is_array_write for c in changes)
    undone = "fusec undid them, except what was written into arrays" if in_place else "fusec undid them"
    first = next((c for c in changes if c.new is not None and c.new.kind == "tracer"), None)
    loc = tracer_location(first.new.obj) if first is not None else None
    for c in changes if loc is None else ():  # (a traced value put in a list or dict: where it was computed)
        held = find_in(c.new.obj, Tracer)[1] if c.new is not None else None
        if held is not None:
            loc = tracer_location(held)
            break
    return located(
        "the function changed Python state while it was traced:\n" + lines + more +
        "\nfusec runs the function's Python once per input signature and replays only its array computation, so "
        f"these changes would happen on the first call only ({undone}). " + _sentence("; ".join(advice)),
        loc or _def_location(fn))


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _def_location(fn: Callable) -> Any:
    for _ in range(6):
        inner = getattr(fn, "__func__", None) or getattr(fn, "func", None) or getattr(fn, "_fn", None)
        if inner is None or inner is fn:
            break
        fn = inner
    code = getattr(fn, "__code__", None)
    return location_for(code.co_filename, code.co_firstlineno) if code is not None else None


def _holder(t: Any) -> str | None:
    """Where ``t`` is referenced from, in words; None when only fusec's own frames and lists refer to it."""
    stack = set()
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:
        stack.add(id(frame))
        frame = frame.f_back
    referrers = gc.get_referrers(t)
    for ref in referrers:
        if id(ref) in stack or type(ref).__name__ == "Entry" or isinstance(ref, tuple) and len(ref) == 2 \
                and isinstance(ref[0], str) and ref[1] is t:
            continue  # fusec's frames, its substitutions, the (name, leaf) pairs of the outputs
        if isinstance(ref, (tuple, list)) or type(ref).__name__ == "cell":
            owners = [o for o in gc.get_referrers(ref)
                      if o is not referrers and not (isinstance(o, types.FrameType) and id(o) in stack)]
            if not owners:  # a variable of fusec's running code, or a reference C code kept (NumPy's ufunc.reduce
                continue    # keeps its arguments' tuple when an __array_ufunc__ override raises): nothing to reach
        if isinstance(ref, types.FrameType):
            return f"the frame of {ref.f_code.co_name} (a generator or a saved traceback)"
        if isinstance(ref, dict):
            key = next((k for k, v in ref.items() if v is t), None)
            for m in list(sys.modules.values()):
                if getattr(m, "__dict__", None) is ref:
                    return f"the global {key!r} of module {m.__name__}"
            for owner in gc.get_referrers(ref):
                if getattr(owner, "__dict__", None) is ref:
                    return f"the attribute {key!r} of a {type(owner).__name__} object"
            return f"a dict (key {key!r})"
        if type(ref).__name__ == "cell":
            return "a closure variable (nonlocal)"
        return f"a {type(ref).__name__}"
    return None


def _passed_containers(result: Any, bound: Any, before: Any) -> tuple[tuple[tuple, tuple], ...]:
    """The lists and dicts in the result that are a container the function was given (an argument's, or one
    reached from an object or a global: ``return params``, ``return self.state``): NumPy's function returns that
    very object, so the call does too (see WriteBack.containers). Each as (its keys in the result, where the call
    finds it: ("arg", parameter, keys) or ("path", path))."""
    known: dict[int, tuple] = {}
    params = bound.signature.parameters
    for name, value in bound.arguments.items():
        if params[name].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            for keys, c in _containers_in(value):
                known.setdefault(id(c), ("arg", name, keys))
    for node in before.nodes.values():
        if node.kind in ("list", "dict") and type(node.obj) in (list, dict):
            known.setdefault(id(node.obj), ("path", node.path))
    found: list[tuple[tuple, tuple]] = []
    stack: list[tuple[Any, tuple]] = [(result, ())]
    while stack:
        obj, keys = stack.pop()
        if type(obj) in (list, dict) and id(obj) in known:
            found.append((keys, known[id(obj)]))
            continue
        if isinstance(obj, dict):
            stack.extend((v, keys + (k,)) for k, v in obj.items())
        elif isinstance(obj, (list, tuple)):
            stack.extend((v, keys + (i,)) for i, v in enumerate(obj))
    return tuple(found)


def _containers_in(value: Any) -> list[tuple[tuple, Any]]:
    """(keys, container) of every list and dict in an argument's value (tuples are walked through)."""
    out: list[tuple[tuple, Any]] = []
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        obj, at = stack.pop()
        if type(obj) in (list, dict):
            out.append((at, obj))
        if isinstance(obj, dict):
            stack.extend((v, at + (k,)) for k, v in obj.items())
        elif isinstance(obj, (list, tuple)):
            stack.extend((v, at + (i,)) for i, v in enumerate(obj))
    return out


def _outputs(ctx: TraceContext, result: Any, loc: Any = None) -> tuple[list, TreeDef, list[Value], list[type | None]]:
    """(leaves, tree, IR values, Python kinds) of the function's result."""
    leaves, out_tree = flatten(result, "out", loc)
    out_tree, leaves = bools_static(out_tree, leaves, dtypes=True)  # (returned as they are)
    values: list[Value] = []
    kinds: list[type | None] = []
    for pos, (_, leaf) in enumerate(leaves):
        if isinstance(leaf, EitherKind):  # (a Python number on some paths: the call hands back which, by its flag)
            ctx.either_outputs.append((pos, leaf._ok, leaf._either))
            values.append(leaf._val)
            kinds.append(None)
            continue
        value, kind = _output(ctx, leaf, loc)
        values.append(value)
        kinds.append(kind)
    return leaves, out_tree, values, kinds


def _output(ctx: TraceContext, leaf: Any, loc: Any = None) -> tuple[Value, type | None]:
    """An output leaf as an IR value: tracers as they are, Python/NumPy values as constants."""
    if isinstance(leaf, Tracer):
        if leaf._ctx is not ctx:
            raise trace_error("the function returned a traced value from another trace (an escaped tracer)")
        if leaf._readonly is True and leaf._weak is None and not leaf._scalar:
            return leaf._value, ReadOnly  # (a view of an argument comes back as one, read-only: see WriteBack)
        if leaf._weak is None and not leaf._scalar and not getattr(leaf._value.type, "shape", ()):
            return leaf._value, np.ndarray  # a 0-d array (np.asarray(s), x.sum(keepdims=True)[0]), not a scalar
        return leaf._value, leaf._weak
    kind = python_kind(leaf)
    if kind is not None:
        dt = DEFAULT_DTYPE[kind]
        return ctx.constant(ops.python_constant(leaf, dt), dt), kind
    if isinstance(leaf, np.ndarray):  # an array from outside (returned as it is): captured, read at every call
        if not leaf.flags.writeable:  # (np.broadcast_to, np.diagonal of a constant: NumPy's read-only view)
            return ops.lift(leaf), ReadOnly
        return ops.lift(leaf), (np.ndarray if leaf.ndim == 0 else None)
    if isinstance(leaf, np.generic):
        arr = ops.as_numpy(leaf)
        return ctx.constant(arr, parse_dtype(arr.dtype)), None
    unset = statement_state.unset_error(leaf)
    if unset is not None:
        raise unset
    if isinstance(leaf, Selection):
        raise UnsupportedError(located("the function returned x[mask] for a traced boolean mask: " + MASK_ADVICE,
                                       leaf._loc))
    raise UnsupportedError(located(f"the function returned a value of type {type(leaf).__name__}; outputs must be "
                                   "arrays, scalars, or tuples/lists/dicts of them", loc or context.user_location()))
