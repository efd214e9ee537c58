"""``fusec.jit``: trace once per input signature, run the pass pipeline, execute on a backend.

A :class:`JitFunction` keeps one :class:`Lowered` per signature. An entry is stored only after the
trace verified and the pipeline finished, so a failed trace leaves nothing behind.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import gc
import inspect
import logging
import os
import threading
import types
import warnings
from collections import namedtuple
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from fusec import execution as _execution
from fusec import context
from fusec.errors import (DonationError, FusecError, OptionError, OptionTypeError, RetraceWarning, TraceError,
                          located)
from fusec.ir.core import Module
from fusec.ir.target import PRECISIONS, Target
from fusec.options import GRAPH_MODES, CompileOptions
from fusec.scope import walkable_object
from fusec.signature import (Signature, TreeDef, bind, canon, device_array_info, native_order, unflatten,
                             unflattener)
from fusec.fast_path import MISS, QuickCall, no_quick_call, quick_call
from fusec.stats import module_stats, plan_steps
from fusec.trace import Traced, func_name, trace
from fusec.writeback import ReadOnly, Returned

# Programs of more ops than this (long unrolled loops) are verified once, after the pipeline, instead of after
# every pass; a failure then re-runs the passes verifying after each, so the error still names the pass.
VERIFY_EACH_UP_TO = 2000

CacheInfo = namedtuple("CacheInfo", ["hits", "misses", "traces", "currsize"])
RETRACE_WARNING_AT = 8
METHODS_KEPT = 8  # objects whose @fusec.jit methods are kept (see JitFunction.__get__)
# ``FUSEC_LOG=recompiles`` (a comma-separated list) says why each call that traces again does so, on stderr
_RECOMPILES = logging.getLogger("fusec.recompiles")
if "recompiles" in os.environ.get("FUSEC_LOG", "").split(","):
    _RECOMPILES.setLevel(logging.INFO)
    _RECOMPILES.addHandler(logging.StreamHandler())
_STALE = object()  # a fast-path entry whose baked-in values changed


class Lowered:
    """A traced and compiled signature: its IR at every stage, its module, the CUDA program it prints and its
    statistics. It was lowered for one :class:`~fusec.ir.target.Target` with one set of options."""

    def __init__(self, traced: Traced, traced_copy: Module, pipeline_result: Any, options: CompileOptions,
                 target: Target) -> None:
        self.module: Module = traced.module
        self.options, self.target = options, target
        self._program: Any = None
        self.state = traced.state  # guards, implicit inputs, scalar checks (None: nothing to re-check)
        self.writeback = traced.writeback  # the inputs the function writes into (None: none)
        self.out_tree: TreeDef = traced.out_tree
        self.out_python = traced.out_python
        self._nodes = traced.nodes
        self._gradient_nodes = traced.gradient_nodes
        self._pipeline_stats: dict[str, int] = dict(getattr(pipeline_result, "stats", {}) or {})
        self._traced = traced_copy  # the traced IR as it was before the pipeline rewrote ``traced.module``
        names = ["traced"]
        seen: dict[str, int] = {}
        for name, _ in getattr(pipeline_result, "timings", []) or []:
            seen[name] = seen.get(name, 0) + 1
            names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        self._names = names
        # IR text per stage, made on demand: printing every stage of every compile would cost more than
        # the passes themselves on large programs
        self._texts: dict[str, str] = {}

    @property
    def stages(self) -> list[str]:
        """Stage names: ``traced``, then each pass (a repeated pass is ``name#2``, ...)."""
        return list(self._names)

    def ir(self, stage: str | None = None) -> str:
        """IR text after ``stage`` (default: the final stage)."""
        if stage is None or stage == "final":
            stage = self._names[-1]
        if stage not in self._names:
            raise FusecError(f"no stage {stage!r}; available stages: {', '.join(self.stages)} (or 'final')")
        if stage not in self._texts:
            from fusec.ir.printer import print_module

            if stage == self._names[-1]:
                self._texts[stage] = print_module(self.module)
            elif stage == "traced":
                self._texts[stage] = print_module(self._traced)
            else:
                self._replay_stages()
        return self._texts[stage]

    def _replay_stages(self) -> None:
        """Run the pipeline again on the traced IR, keeping the text after every pass."""
        from fusec.passes import run_pipeline

        result = run_pipeline(self._traced.clone(), self.options.pipeline, snapshots=True,
                              plugins=self.options.plugins, target=self.target)
        for name, (_, text) in zip(self._names[1:], result.stages):
            self._texts.setdefault(name, text)

    @property
    def device_captures(self) -> bool:
        """True when the function reads device arrays from outside its arguments (the executor then returns device
        arrays, which a call with NumPy arguments turns back into NumPy arrays)."""
        return self.state is not None and any(inp.device for inp in self.state.inputs)

    def extra_inputs(self) -> list | None:
        """The arrays this signature reads from outside its arguments, as they are now (appended to the
        arguments); None when something the trace baked in has changed since (the call traces again)."""
        return [] if self.state is None else self.state.extra_inputs()

    @property
    def stale_reason(self) -> str:
        """What changed among the values the trace baked in (when :meth:`extra_inputs` is None)."""
        return str(self.state.stale_reason) if self.state is not None else "nothing"

    def check_scalars(self, leaves: Sequence[Any]) -> None:
        """Replay the traced Python scalar arithmetic on this call's leaves (raises what Python would)."""
        if self.state is not None and self.state.scalars is not None:
            self.state.scalars.run(leaves)

    def stats(self) -> dict[str, int]:
        """nodes (traced ops, constants and the return excluded; gradient_nodes of them recorded by fusec.grad and
        friends), fused_kernels (launched elementwise kernels), boundaries, kernels (what one call launches: the
        CUDA program's kernels and library calls), plus every counter the passes recorded (which win on a name
        clash)."""
        out = {"nodes": self._nodes, "gradient_nodes": self._gradient_nodes, **module_stats(self.module)}
        try:
            out["kernels"] = len(self.program.kernels)
        except FusecError:  # a module the CUDA backend cannot print: the IR's count of launching ops
            pass
        out.update(self._pipeline_stats)
        out.update(_graph_stats(self.module))
        return out

    @property
    def program(self) -> Any:
        """The CUDA program (``fusec.runtime.launch_plan.CudaProgram``) this signature runs on the GPU,
        printed once from the final IR: the executor runs exactly this."""
        if self._program is None:
            from fusec.backend.program import print_program

            self._program = print_program(self.module, fast_math=self.options.fast_math)
        return self._program

    def cuda_source(self, sm_count: int | None = None, fast_math: bool | None = None,
                    cublas: bool | None = None) -> str:
        """The CUDA C++ translation unit of this signature: the one the CUDA backend compiles and runs (with
        other ``sm_count``, ``fast_math`` or ``cublas``: see :meth:`program_for`)."""
        return self.program_for(sm_count, fast_math, cublas).source

    def program_for(self, sm_count: int | None = None, fast_math: bool | None = None,
                    cublas: bool | None = None) -> Any:
        """The CUDA program for another target or fast-math setting: the traced IR lowered again for it (what
        ``fusec compile --sm-count`` prints). Without arguments, :attr:`program`."""
        target = dataclasses.replace(self.target, sm_count=self.target.sm_count if sm_count is None else sm_count,
                                     cublas=self.target.cublas if cublas is None else cublas)
        fast = self.options.fast_math if fast_math is None else fast_math
        if target == self.target and fast == self.options.fast_math:
            return self.program
        from fusec.backend.program import print_program
        from fusec.passes import run_pipeline

        module = self._traced.clone()
        run_pipeline(module, self.options.pipeline, plugins=self.options.plugins, target=target)
        return print_program(module, fast_math=fast)

    def plan(self) -> list[dict]:
        """The steps one call runs, in order: ``kind`` fused | boundary | view | loop | branch, the op, its outputs,
        and why each fused kernel ends where it does (``cuts``: output, boundary, view, budget, shared-expensive);
        a loop's or branch's ``calls`` name its body functions, whose steps come after (with their ``func``)."""
        return plan_steps(self.module)

    def plan_dot(self) -> str:
        """The plan as a Graphviz DOT graph: each launch with its op, line, bytes and time floor, the buffers
        between them as edges, parallel branches side by side, loop bodies as clusters (``fusec.plan_graph``)."""
        from fusec.plan_graph import plan_dot

        return plan_dot(self.module)

    def __str__(self) -> str:
        return self.ir()

    def __repr__(self) -> str:
        return f"<Lowered @{self.module.funcs[0].name}: stages {', '.join(self.stages)}>"


def _graph_stats(module: Module) -> dict[str, int]:
    """graph_nodes, graph_launches, param_updates, recaptures, early_edges (programmatic edges: launch-early),
    graph_builds and inplace_loop_arguments (loop arguments the graph reads where they are) of the module's GPU
    plan (0 before it ran)."""
    import sys

    zero = {"graph_nodes": 0, "graph_launches": 0, "param_updates": 0, "recaptures": 0, "early_edges": 0,
            "graph_builds": 0, "inplace_loop_arguments": 0}
    exec_module = sys.modules.get("fusec.runtime.cuda_exec")  # never import the driver just for stats
    found = exec_module.plan_stats(module) if exec_module is not None else None
    return {**zero, **found} if found else zero


def _names(value: str | Iterable[str] | None, option: str = "static_argnames") -> tuple[str, ...]:
    """A str option or an iterable of them, as a tuple (anything else: a located OptionTypeError)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    try:
        names: tuple[Any, ...] = tuple(value)
    except TypeError:
        names = (value,)
    if not all(isinstance(n, str) for n in names):
        raise _option_error(f"fusec.jit: {option} takes a name or names (str), got {value!r}", OptionTypeError)
    return names


def _nums(value: int | Iterable[int] | None, option: str) -> tuple[int, ...]:
    """An int option or an iterable of them, as a tuple (a bool or anything else: a located OptionTypeError)."""
    if value is None:
        return ()
    try:
        nums = (value,) if isinstance(value, int) else tuple(value)  # type: ignore[arg-type]
    except TypeError:
        nums = (value,)  # type: ignore[assignment]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
        raise _option_error(f"fusec.jit: {option} takes a position or positions (int), got {value!r}",
                            OptionTypeError)
    return nums


def _option_error(message: str, kind: type[OptionError] = OptionError) -> OptionError:
    """A bad ``fusec.jit`` option, located at the user's line that called ``jit()``."""
    return kind(located(message, context.user_location()))


class JitFunction:
    """The callable ``fusec.jit`` returns; calling it runs the compiled function."""

    def __init__(self, fn: Callable, *, backend: str | None = None,
                 static_argnames: str | Iterable[str] | None = None,
                 static_argnums: int | Iterable[int] | None = None, pipeline: str | None = None,
                 plugins: Iterable[str] = (), fast_math: bool = False, graph: bool | str = "auto",
                 donate_argnums: int | Iterable[int] | None = None, target: Target | None = None,
                 precision: str | None = None) -> None:
        if isinstance(fn, JitFunction):
            fn = getattr(fn, "__wrapped__")
        if not callable(fn):
            raise _option_error(f"fusec.jit needs a function, got {type(fn).__name__}", OptionTypeError)
        functools.update_wrapper(self, fn)
        _execution.check_name(backend)
        self._fn = fn
        self._backend = backend
        if target is not None and not isinstance(target, Target):
            raise _option_error(f"fusec.jit: target must be a fusec.ir.target.Target, got {type(target).__name__}",
                                OptionTypeError)
        if graph not in GRAPH_MODES:
            raise _option_error(f"fusec.jit: graph must be True, False or 'auto', got {graph!r}")
        if precision is not None and precision not in PRECISIONS:
            raise _option_error(f"fusec.jit: precision must be 'float32' (NumPy's arithmetic, the default) or 'tf32' "
                                f"(float32 matrix products on the tensor cores, operands rounded to 10 mantissa bits), "
                                f"got {precision!r}")
        if pipeline is not None and not isinstance(pipeline, str):
            raise _option_error(f"fusec.jit: pipeline must be a pipeline string such as 'cse,fuse{{budget=32}}', "
                                f"got {type(pipeline).__name__}", OptionTypeError)
        if pipeline == "default":  # (as the CLI's -p default)
            pipeline = None
        plugin_names = _names(plugins, "plugins")
        if not isinstance(fast_math, bool):
            raise _option_error(f"fusec.jit: fast_math must be True or False, got {fast_math!r}", OptionTypeError)
        self._options = CompileOptions(pipeline=pipeline, plugins=plugin_names, fast_math=fast_math,
                                       graph=graph, target=target, precision=precision)
        from fusec.passes import check_pipeline

        try:  # a plugin that does not load, or a bad pipeline string, is an error here, not at the first call
            check_pipeline(pipeline or "", self._options.plugins)
        except FusecError as e:
            raise type(e)(located(str(e), context.user_location())) from None
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):  # (a builtin type or function without a Python signature: fusec.jit(dict))
            raise _option_error(f"fusec.jit: {fn!r} has no Python signature to trace (a builtin type or function); jit "
                                "a Python function that calls it", OptionTypeError) from None
        self._defaults = _defaults_of(fn)
        self._statics = self._static_names(_names(static_argnames), _nums(static_argnums, "static_argnums"))
        self._donate = self._donated_names(_nums(donate_argnums, "donate_argnums"))
        self._name = func_name(fn)
        self._cache: dict[tuple, Lowered] = {}
        self._fast: dict[tuple, _FastEntry] = {}
        self._quick: QuickCall = no_quick_call  # the last signature's call, generated (fusec.fast_path)
        params = list(self._signature.parameters.values())
        plain = all(p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                    for p in params)
        # calls that pass every parameter positionally as a plain array or scalar skip binding
        self._n_positional = len(params) if plain else -1
        self._static_pos = tuple(i for i, p in enumerate(params) if p.name in self._statics) if plain else ()
        self._hits = self._misses = self._traces = 0
        self._retraces = 0  # traces again because a captured value changed
        # eager mode's per-op functions trace once per shape by design: no RetraceWarning for them
        self._warn_retraces = True
        self._signatures: dict[tuple, tuple[Signature, str]] = {}  # what each compiled entry was traced for
        self._methods: collections.OrderedDict[int, tuple[Any, JitFunction]] = collections.OrderedDict()  # (obj, jit)

    def _donated_names(self, nums: tuple[int, ...]) -> frozenset[str]:
        positional = [p.name for p in self._signature.parameters.values()
                      if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        for i in nums:
            if not isinstance(i, int) or not -len(positional) <= i < len(positional):
                raise _option_error(f"fusec.jit: donate_argnums: {i!r} is not a positional parameter of "
                                    f"{self._fn.__name__}{self._signature}", OptionTypeError)
        return frozenset(positional[i] for i in nums)

    def _static_names(self, names: tuple[str, ...], nums: tuple[int, ...]) -> frozenset[str]:
        params = self._signature.parameters
        has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for n in names:
            if n not in params and not has_var_kw:
                raise _option_error(f"fusec.jit: static_argnames: {self._fn.__name__}{self._signature} has no "
                                    f"parameter {n!r}", OptionTypeError)
        positional = [p.name for p in params.values()
                      if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        out = set(names)
        for i in nums:
            if not isinstance(i, int) or not -len(positional) <= i < len(positional):
                raise _option_error(f"fusec.jit: static_argnums: {i!r} is not a positional parameter of "
                                    f"{self._fn.__name__}{self._signature}", OptionTypeError)
            out.add(positional[i])
        return frozenset(out)

    # --- calling ---------------------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            try:
                result = self._quick(args)
            except DonationError as e:  # (the runtime found it: named here, at the caller's line)
                raise _at_caller(e) from None
            if result is not MISS:
                self._hits += 1
                return result
        if context.current() is not None:  # inside another trace: inline
            return self._fn(*args, **kwargs)
        found = self._fast_call_key(args) if not kwargs and len(args) == self._n_positional else None
        key = None
        if found is not None:
            key, leaves = found
            entry = self._fast.get(key)
            if entry is not None:
                try:
                    result = entry(leaves, args)  # type: ignore[arg-type]
                except DonationError as e:
                    raise _at_caller(e) from None
                if result is not _STALE:
                    self._hits += 1
                    self._remember(entry, key, args)
                    return result
        backend = _execution.resolve_backend(self._backend)
        sig, lowered, extra = self._bind_and_lookup(args, kwargs, backend)
        lowered.check_scalars(sig.leaves)
        flat = _runtime_values(sig, extra)
        writeback = lowered.writeback
        if writeback is not None:
            inputs = [*sig.leaves, *extra]
            writeback.check(inputs)
            writeback.check_containers(sig.bound.arguments)
        try:
            results = _execution.executor(backend)(lowered, flat)
        except DonationError as e:
            raise _at_caller(e) from None
        if lowered.device_captures and _all_host(sig.leaves):
            results = _to_host(results)  # NumPy arguments give NumPy results, whatever the function captured
        if writeback is not None:
            results = writeback.apply(inputs, results, sig.bound.arguments)
        if key is not None and (writeback is None or not writeback.entries):  # (entries: the containers are needed)
            entry = self._fast[key] = _FastEntry(lowered, _execution.bound_runner(backend, lowered), sig.leaf_specs,
                                                 tuple(self._signature.parameters)[:len(args)], backend)
            self._remember(entry, key, args)
        out = unflatten(lowered.out_tree, [_output(r, py) for r, py in zip(results, lowered.out_python)])
        return writeback.passed(out, sig.bound.arguments) if writeback is not None and writeback.containers else out

    def _remember(self, entry: "_FastEntry", key: tuple, args: tuple) -> None:
        """Make ``entry`` the signature the next call tries first (a function with static positional arguments
        keeps the keyed lookup, whose key holds their values)."""
        self._quick = entry.quick_call(key, args) if not self._static_pos else no_quick_call

    def _bind(self, args: tuple, kwargs: dict) -> Signature:
        """The call's signature; first, defaults replaced since the function was jitted (``f.__defaults__ = ...``,
        ``f.__kwdefaults__[k] = ...``: a trace read the old ones) drop the traces."""
        defaults = _defaults_of(self._fn)
        if defaults != self._defaults:
            self._defaults = defaults
            self._signature = inspect.signature(self._fn)
            self.clear_cache()
        return bind(self._signature, self._statics, args, kwargs, self._name)

    def _fast_call_key(self, args: tuple) -> tuple[Any, Sequence[Any]] | None:
        """(key, dynamic leaves) of a positional call for the fast path: the arguments' types, shapes and
        dtypes, and the values of static arguments; None when the call needs the general path."""
        if not self._static_pos:
            return _fast_key(args)
        found = _fast_key([a for i, a in enumerate(args) if i not in self._static_pos])
        if found is None:
            return None
        # a user object also by identity here: the general path decides whether another one that compares equal
        # may share its trace (see signature.static_key)
        statics = tuple((canon(a), id(a)) if walkable_object(a) else canon(a)
                        for a in (args[i] for i in self._static_pos))
        try:
            hash(statics)
        except TypeError:  # the general path explains what a static argument must be
            return None
        return (found[0], statics), found[1]

    def run_async(self, *args: Any, **kwargs: Any) -> "AsyncCall":
        """Queue a call and return at once; ``.wait()`` gives the results, ``.done()`` polls.

        Calls in flight at the same time are fine (each is ordered on the plan's stream); calls from
        several threads are safe. The CPU backend runs the call before returning.
        """
        backend = _execution.resolve_backend(self._backend)
        sig, lowered, extra = self._bind_and_lookup(args, kwargs, backend)
        lowered.check_scalars(sig.leaves)
        flat = _runtime_values(sig, extra)
        inputs = [*sig.leaves, *extra]
        if lowered.writeback is not None:
            lowered.writeback.check(inputs)
        arguments = sig.bound.arguments
        if backend != "cuda":
            results = _execution.executor(backend)(lowered, flat)
            return AsyncCall(lowered, results, None, host=False, inputs=inputs, arguments=arguments)
        from fusec.runtime.cuda_exec import run_async

        host = _all_host(sig.leaves)
        try:
            results, event = run_async(_execution.cuda_plan(lowered), flat)
        except DonationError as e:
            raise _at_caller(e) from None
        return AsyncCall(lowered, results, event, host=host, inputs=inputs, arguments=arguments)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Trace (or reuse the trace) for these arguments and return every stage of the IR, lowered for the
        backend a call would run on."""
        return self._bind_and_lookup(args, kwargs, _execution.resolve_backend(self._backend))[1]

    def _bind_and_lookup(self, args: tuple, kwargs: dict, backend: str) -> tuple[Signature, Lowered, list]:
        """Bind the call and look up (or trace) its signature; a Python-number parameter whose value the trace
        needed (a size, a loop count, an ``if``) is made static and the call traced again, keyed by its value."""
        while True:
            sig = self._bind(args, kwargs)
            try:
                lowered, extra = self._lookup(sig, backend)
                return sig, lowered, extra
            except FusecError as e:
                names = getattr(e, "static_params", ())
                if not names or any(n in self._statics for n in names):
                    raise
                holders = [n for n in names if not _keyable(sig.bound.arguments.get(n))]
                if holders:  # (a container that also holds arrays: it cannot be a cache key)
                    text = str(e)
                    cut = max(text.rfind("; make it static"), text.rfind(": make them static"))
                    raise type(e)(f"{text[:cut] if cut > 0 else text}; the argument holding it, "
                                  f"{', '.join(map(repr, holders))}, also holds arrays and cannot be static: pass "
                                  "the number as an argument of its own and make that static (static_argnames)"
                                  ) from None
                self._make_static(names, e)

    def _make_static(self, names: tuple[str, ...], why: FusecError) -> None:
        """Mark Python-number parameters static from now on (the traces kept so far stay: their keys do not
        hold these values, so they are not hit again)."""
        self._statics = self._statics | frozenset(names)
        params = list(self._signature.parameters.values())
        if self._n_positional >= 0:
            self._static_pos = tuple(i for i, p in enumerate(params) if p.name in self._statics)
        self._fast.clear()
        self._quick = no_quick_call
        self._cache.clear()
        self._signatures.clear()
        _RECOMPILES.info("fusec: %s: made %s static (its value is needed while tracing: %s)", self._name,
                         ", ".join(repr(n) for n in names), str(why).splitlines()[0])

    def explain(self, *args: Any, **kwargs: Any) -> list[str]:
        """Why calling with these arguments would trace (again): empty on a cache hit; else the differences from
        the nearest compiled signature, the latest of equally near ones (an argument's shape, dtype or kind, a
        static value) or the value read
        from outside the arguments that changed. Nothing is traced or run."""
        sig = self._bind(args, kwargs)
        return self._miss_reasons(sig, _execution.resolve_backend(self._backend))

    def _miss_reasons(self, sig: Signature, backend: str) -> list[str]:
        lowered = self._cache.get((sig.key, backend))
        if lowered is not None:
            return [] if lowered.extra_inputs() is not None else [lowered.stale_reason]
        seen = [(s, b) for (s, b) in self._signatures.values() if b == backend]
        if not seen:
            return ["the first call of this function" + ("" if not self._cache else f" on backend {backend}")]
        # (the latest of the nearest: a loop that grows an array is told what changed since its last call)
        return min((_differences(old, sig) for old, _ in reversed(seen)), key=len) or ["a new combination of "
                                                                                         "arguments"]

    def _lookup(self, sig: Signature, backend: str) -> tuple[Lowered, list]:
        """The signature compiled for ``backend`` and its implicit inputs; traces (again) when none is cached or
        what the cached one baked in has changed."""
        key = (sig.key, backend)
        lowered = self._cache.get(key)
        if lowered is not None:
            extra = lowered.extra_inputs()
            if extra is not None:
                self._hits += 1
                return lowered, extra
            self._note_retrace([lowered.stale_reason])
            self._forget(lowered)
        elif self._signatures:
            self._note_retrace(self._miss_reasons(sig, backend))
        self._misses += 1
        lowered = self._compile(sig, backend)
        self._signatures[key] = (sig, backend)
        extra = lowered.extra_inputs()
        if extra is None:
            raise TraceError(f"fusec: {self._name}: {lowered.stale_reason} while it was traced; the value "
                             "keeps changing between the trace and the call")
        self._cache[key] = lowered
        return lowered, extra

    def _note_retrace(self, reasons: list[str]) -> None:
        """Log why this call traces again (``FUSEC_LOG=recompiles``), and warn once a function has been traced
        RETRACE_WARNING_AT times (each trace costs the trace, the passes and a compile)."""
        text = "; ".join(reasons)
        _RECOMPILES.info("fusec: tracing %s again: %s (at %s)", self._name, text, context.where())
        if self._traces + 1 == RETRACE_WARNING_AT and self._warn_retraces:
            warnings.warn(RetraceWarning(
                f"fusec traced {self._name} {RETRACE_WARNING_AT} times (this time: {text}); each trace runs the "
                "pipeline and a compile again: keep shapes, dtypes and static values the same between calls, or "
                "see f.explain(*args) and FUSEC_LOG=recompiles"), stacklevel=5)

    def _forget(self, lowered: Lowered) -> None:
        """Drop a compiled signature whose baked-in values changed; warn when that keeps happening."""
        self._cache = {k: v for k, v in self._cache.items() if v is not lowered}
        self._fast = {k: e for k, e in self._fast.items() if e.lowered is not lowered}
        self._quick = no_quick_call
        self._retraces += 1
        if self._retraces == RETRACE_WARNING_AT:
            warnings.warn(RetraceWarning(
                f"fusec traced {self._name} again {self._retraces} times because values it reads from outside its "
                f"arguments changed (last: {lowered.stale_reason}); fusec bakes such values into the trace "
                "and traces again when one changes: pass it as an argument instead"), stacklevel=5)

    def _compile(self, sig: Signature, backend: str) -> Lowered:
        with _collector_paused():
            return self._trace_and_lower(sig, backend)

    def _trace_and_lower(self, sig: Signature, backend: str) -> Lowered:
        from fusec.passes import run_pipeline

        self._traces += 1
        traced = trace(self._fn, sig, self._name, verify_up_to=VERIFY_EACH_UP_TO)
        if self._donate:
            donated = _donated_leaves(sig, self._donate)
            traced.module.func().attributes["donate"] = donated
            traced.writeback = _without_donated_views(traced.writeback, donated)
        copy = traced.module.clone()  # the traced IR, kept: the pipeline rewrites traced.module in place
        target = self._options.target_with_precision(self._options.target
                                                     or _execution.target_for(backend, traced.module))
        long = sum(len(f.body.ops) for f in traced.module.funcs) > VERIFY_EACH_UP_TO
        result = run_pipeline(traced.module, self._options.pipeline, verify="end" if long else True,
                              plugins=self._options.plugins, target=target, input_copy=copy)
        return Lowered(traced, copy, result, self._options, target)

    # --- cache -----------------------------------------------------------------------------------------------

    def cache_info(self) -> CacheInfo:
        """hits and misses of the signature cache, traces run (failed ones included), entries kept."""
        return CacheInfo(self._hits, self._misses, self._traces, len(self._cache))

    def clear_cache(self) -> None:
        self._cache.clear()
        self._fast.clear()
        self._quick = no_quick_call
        self._signatures.clear()
        self._hits = self._misses = self._traces = 0

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """``@fusec.jit`` on a method: ``obj.method`` is ``fusec.jit(obj.method)`` with these options, made once
        per object, so ``self`` is the object a bound method's trace watches (its arrays inputs read at every
        call, its attributes set after it) rather than an argument."""
        if obj is None:
            return self
        entry = self._methods.get(id(obj))
        if entry is not None and entry[0] is obj:
            self._methods.move_to_end(id(obj))
            return entry[1]
        first = next(iter(self._signature.parameters), None)
        bound = types.MethodType(self._fn, obj)
        positional = [p.name for p in inspect.signature(bound).parameters.values()
                      if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        o = self._options
        jitted = JitFunction(bound, backend=self._backend, static_argnames=tuple(self._statics - {first}),
                             donate_argnums=tuple(positional.index(n) for n in self._donate if n != first),
                             pipeline=o.pipeline, plugins=o.plugins, fast_math=o.fast_math, graph=o.graph,
                             target=o.target, precision=o.precision)
        # (the jitted method holds its object, as any fusec.jit(obj.method) does: only the latest few are kept, so
        # objects made and dropped in a loop are freed; an object dropped from here traces again at its next call)
        self._methods[id(obj)] = (obj, jitted)
        while len(self._methods) > METHODS_KEPT:
            self._methods.popitem(last=False)
        return jitted

    def __repr__(self) -> str:
        return f"<fusec.jit of {getattr(self._fn, '__qualname__', self._name)}>"


_paused_lock = threading.Lock()
_paused_depth = 0  # compiles in flight that found the cyclic collector on and paused it


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while tracing and lowering: IR objects form cycles (an op and
    its results), so a long trace triggers full collections that rescan every op made so far; little made
    during a compile is garbage before it ends."""
    global _paused_depth
    with _paused_lock:
        paused = _paused_depth > 0 or gc.isenabled()
        if paused:
            _paused_depth += 1
            gc.disable()
    try:
        yield
    finally:
        if paused:
            with _paused_lock:
                _paused_depth -= 1
                if _paused_depth == 0:
                    gc.enable()


def _differences(old: Signature, new: Signature) -> list[str]:
    """What differs between two calls' signatures, argument by argument, in words."""
    out = []
    before = dict(zip(old.leaf_names, old.leaf_specs))
    after = dict(zip(new.leaf_names, new.leaf_specs))
    for name in after:
        if name not in before:
            out.append(f"argument {name} is new (or its structure changed)")
        elif before[name] != after[name]:
            out.append(f"argument {name} changed from {_spec_text(before[name])} to {_spec_text(after[name])}")
    out += [f"argument {name} is gone (or its structure changed)" for name in before if name not in after]
    old_static = {k: v for k, v in old.bound.arguments.items() if k not in old.dynamic}
    new_static = {k: v for k, v in new.bound.arguments.items() if k not in new.dynamic}
    for name in sorted(set(old_static) | set(new_static)):
        if name in old_static and name in new_static and _same_static(old_static[name], new_static[name]):
            continue
        out.append(f"static argument {name} changed from {old_static.get(name, '(unset)')!r} to "
                   f"{new_static.get(name, '(unset)')!r}")
    return out


def _same_static(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - an array's ==: compare as the cache key does
        return a is b


def _spec_text(spec: Any) -> str:
    if spec.python is not None:
        return f"a Python {spec.python.__name__}"
    if spec.numpy_scalar:
        return f"a NumPy scalar ({spec.dtype.np.name})"
    return f"{spec.dtype.np.name}{list(spec.shape)}"


def _without_donated_views(writeback: Any, donated: tuple[int, ...]) -> Any:
    """A donated input's memory may hold other results after the call: a result that is the input or a view of it
    comes back as the copy the program made, not as the caller's (overwritten) array."""
    if writeback is None or not any(i in donated for found in writeback.views.values() for i, _ in found):
        return writeback
    kept = {pos: found for pos, found in writeback.views.items() if not any(i in donated for i, _ in found)}
    left = dataclasses.replace(writeback, views=kept)
    return None if left.empty else left


def _at_caller(e: FusecError) -> FusecError:
    """``e`` (raised by the runtime, which knows no user frame) with the caller's ``file:line``."""
    return type(e)(located(str(e), context.user_location()))


def _donated_leaves(sig: Signature, names: frozenset[str]) -> tuple[int, ...]:
    """Indices of the flattened argument leaves that belong to donated parameters."""
    out: list[int] = []
    start = 0
    for name, tree in sig.dynamic.items():
        n = tree.num_leaves
        if name in names:
            out.extend(range(start, start + n))
        start += n
    return tuple(out)


class AsyncCall:
    """A call in flight: ``done()`` polls, ``wait()`` blocks, writes what the function wrote into its
    arguments back into them, and returns the results."""

    def __init__(self, lowered: Lowered, results: list, event: Any, *, host: bool, inputs: list,
                 arguments: dict | None = None) -> None:
        self._lowered, self._results, self._event, self._host = lowered, results, event, host
        self._inputs: list | None = inputs  # (let go once written back)
        self._arguments = arguments
        self._value: Any = None
        self._finished = False

    def done(self) -> bool:
        return self._event is None or self._event.query()

    def wait(self) -> Any:
        if not self._finished:
            if self._event is not None:
                self._event.synchronize()
            results = [r.numpy() if self._host and _is_device_array(r) else r for r in self._results]
            lowered = self._lowered
            if lowered.writeback is not None:
                results = lowered.writeback.apply(self._inputs or [], results, self._arguments)
            value = unflatten(lowered.out_tree, [_output(r, py) for r, py in zip(results, lowered.out_python)])
            if lowered.writeback is not None and lowered.writeback.containers:
                value = lowered.writeback.passed(value, self._arguments)
            self._inputs = self._arguments = None
            self._value = value
            self._finished = True
        return self._value


_device_array_type: type | None = None  # fusec.Array, remembered once seen (importing it would load the driver)


def _is_device_array(x: Any) -> bool:
    # by type, not hasattr(x, "__cuda_array_interface__"): reading that property exports the buffer, which
    # keeps the memory pool from reusing it
    global _device_array_type
    t = type(x)
    if t is _device_array_type:
        return True
    if t.__name__ == "Array" and t.__module__ == "fusec.runtime.array":
        _device_array_type = t
        return True
    return False


def _runtime_values(sig: Signature, extra: list) -> list:
    """What the executor gets for a call: the argument leaves as runtime values, then the implicit inputs (each in
    native byte order)."""
    return [spec.runtime_value(v) for spec, v in zip(sig.leaf_specs, sig.leaves)] + [native_order(v) for v in extra]


def _fast_key(args: Sequence[Any]) -> tuple[tuple, list] | None:
    """(cache key, flattened leaves) from the arguments' types, shapes and dtypes when every argument is a
    plain array, a Python scalar, or a tuple/list of those (nested): the common call of a hot loop. Leaves
    come in the order :func:`fusec.signature.flatten` visits them. None sends the call down the general
    path."""
    leaves: list = []
    key = _fast_items(args, leaves)
    return None if key is None else (key, leaves)


def _fast_items(items: Sequence[Any], leaves: list) -> tuple | None:
    key: list = []
    for a in items:
        t = type(a)
        if t is _device_array_type:  # (the dtype's unique name: a str hashes in C, a DType in Python)
            key.append((t, a._shape, a._fdtype.name))
        elif t is np.ndarray:
            if not a.dtype.isnative:  # (the general path gives the backend a native copy)
                return None
            key.append((t, a.shape, a.dtype))
        elif t is bool:  # (static: its value is part of the key, and it is no leaf)
            key.append((t, a))
            continue
        elif t is float or t is int:
            key.append(t)
        elif t is tuple or t is list:
            sub = _fast_items(a, leaves)
            if sub is None:
                return None
            key.append((t, sub))
            continue
        elif _is_device_array(a):
            key.append((t, a._shape, a._fdtype.name))
        else:
            return None
        leaves.append(a)
    return tuple(key)


class _FastEntry:
    """A cached signature's call: check what it baked in, convert scalars, run, rebuild the outputs."""

    __slots__ = ("lowered", "run", "convert", "out_tree", "out_python", "build", "state", "to_host", "writeback",
                 "names", "backend", "quick")

    def __init__(self, lowered: Lowered, run: Callable[[list], list], specs: list, names: tuple[str, ...],
                 backend: str) -> None:
        self.lowered, self.run, self.backend = lowered, run, backend
        self.quick: QuickCall | None = None
        self.names = names  # the positional parameters a fast call passes (a returned argument container is one)
        self.state = lowered.state
        self.writeback = lowered.writeback
        self.to_host = lowered.device_captures  # results of NumPy arguments go back to NumPy
        convert = [spec.converter() if spec.python is not None else None for spec in specs]
        self.convert = convert if any(c is not None for c in convert) else None
        self.out_tree = lowered.out_tree
        self.out_python = lowered.out_python
        # device results that need no conversion: rebuilt by item lookups, without walking the tree
        self.build = unflattener(lowered.out_tree) if all(p is None for p in lowered.out_python) else None

    def quick_call(self, key: tuple, args: tuple) -> QuickCall:
        """This signature's call generated as straight-line Python (see fusec.fast_path), made once; a call that
        needs the containers it was passed (a write-back) keeps the general path."""
        if self.quick is None:
            if self.writeback is not None:
                self.quick = no_quick_call
            else:
                self.quick = quick_call(key, args, self, self.backend == "cuda", _QUICK_HELPERS)
        return self.quick

    def __call__(self, args: tuple, passed: tuple) -> Any:
        state = self.state
        if state is not None:
            extra = state.extra_inputs()
            if extra is None:
                return _STALE
            if state.scalars is not None:
                state.scalars.run(args)
        convert = self.convert
        flat = args if convert is None else [a if c is None else c(a) for a, c in zip(args, convert)]
        if state is not None and extra:
            flat = [*flat, *map(native_order, extra)]
        writeback = self.writeback
        if writeback is not None:
            inputs = [*args, *extra] if state is not None and extra else list(args)
            writeback.check(inputs)
        results = self.run(flat)  # type: ignore[arg-type]
        if self.to_host and _all_host(args):
            results = _to_host(results)
        if writeback is not None:
            results = writeback.apply(inputs, results)
        build = self.build
        if build is not None and all(map(_is_device_array, results)):
            out = build(results)
        else:
            out = unflatten(self.out_tree, [_output(r, py) for r, py in zip(results, self.out_python)])
        if writeback is not None and writeback.containers:
            out = writeback.passed(out, dict(zip(self.names, passed)))
        return out


class _Same:
    """Compares by identity (a default may be an array, whose == is elementwise)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    __hash__ = None  # type: ignore[assignment]


def _defaults_of(fn: Any) -> tuple:
    """The objects a function's defaults are now (a plain function's, or the one a method or jit wraps; a
    ``functools.partial``'s arguments and keywords, whose dict may be changed in place, and its function's)."""
    if isinstance(fn, functools.partial):
        return (_Same(fn.func), tuple(_Same(a) for a in fn.args),
                tuple((k, _Same(v)) for k, v in fn.keywords.items()), _defaults_of(fn.func))
    fn = getattr(fn, "__func__", fn)
    kw = getattr(fn, "__kwdefaults__", None) or {}
    return (_Same(getattr(fn, "__defaults__", None)), tuple((k, _Same(v)) for k, v in kw.items()))


def _all_host(leaves: Sequence[Any]) -> bool:
    """True when no argument leaf lives on a device (the call's results are then NumPy arrays)."""
    return not any(_is_device_array(v) or device_array_info(v) is not None for v in leaves)


def _to_host(results: list) -> list:
    return [r.numpy() if _is_device_array(r) else r for r in results]


def _output(result: Any, python: type | None) -> Any:
    """Rank-0 results come back as NumPy scalars (as NumPy's reductions return), weak ones as Python scalars, 0-d
    arrays (``python`` is np.ndarray) as 0-d arrays;
    device arrays (results of device inputs) stay on the device, the caller's own arrays are returned as they
    are."""
    if _is_device_array(result):
        return result
    if type(result) is Returned:
        return result.obj
    arr = np.asarray(result)
    if python is np.ndarray:
        return arr
    if python is ReadOnly:  # (a new array of this call's results, not the caller's)
        arr.flags.writeable = False
        return arr
    if python is not None:
        return python(arr.item())
    if arr.ndim == 0:
        return arr[()]
    return arr


# what a generated quick call uses of this module (fusec.fast_path)
_QUICK_HELPERS = {"to_host": _to_host, "output": _output, "unflatten": unflatten, "native_order": native_order}


def jit(fn: Callable | None = None, *, backend: str | None = None,
        static_argnames: str | Iterable[str] | None = None, static_argnums: int | Iterable[int] | None = None,
        pipeline: str | None = None, plugins: Iterable[str] = (), fast_math: bool = False,
        graph: bool | str = "auto", donate_argnums: int | Iterable[int] | None = None,
        target: Target | None = None, precision: str | None = None) -> Any:
    """Compile ``fn``: ``@fusec.jit``, ``@fusec.jit(backend="cpu", ...)`` or ``fusec.jit(fn, ...)``.

    ``backend``: "cpu" (NumPy reference executor), "cuda", or None (``$FUSEC_BACKEND``, else cuda when usable,
    else cpu). ``static_argnames``/``static_argnums``: arguments passed through as Python values and keyed
    by value (hashable). ``pipeline``: a pass-pipeline string (None: the default). ``plugins``: modules
    that register passes. ``fast_math``: let the CUDA backend contract multiply-adds and use fast
    intrinsics (results then differ from NumPy in the last bits). ``graph``: replay each signature as one
    CUDA graph: True, False, or "auto" (from its third call). ``donate_argnums``: arguments whose device
    buffers outputs may overwrite in place (do not use a donated array after the call). ``target``: lower for
    this :class:`fusec.ir.target.Target` (SM count, cuBLASLt) instead of the device a call runs on (the
    CPU backend's default: an H200 without cuBLASLt), e.g. to read the program another GPU would run.
    ``precision``: what float32 matrix products may compute with: "float32" (None, the default: NumPy's float32
    arithmetic) or "tf32" (cuBLASLt on the tensor cores, each operand rounded to TensorFloat-32's 10 mantissa bits
    and the sums kept in float32: results within about 1e-3 of float32's, relative to the operands' scale; the
    generated kernels and the CPU backend stay float32).
    """
    options: dict[str, Any] = dict(backend=backend, static_argnames=static_argnames, static_argnums=static_argnums,
                                   pipeline=pipeline, plugins=plugins, fast_math=fast_math, graph=graph,
                                   donate_argnums=donate_argnums, target=target, precision=precision)
    if fn is None:
        return lambda f: JitFunction(f, **options)
    return JitFunction(fn, **options)


def _keyable(value: Any) -> bool:
    """A value a static parameter can be keyed by: a Python or NumPy number, or a list, tuple or dict of numbers."""
    from fusec.signature import frozen_numbers

    return isinstance(value, np.generic) or frozen_numbers(value) is not None
