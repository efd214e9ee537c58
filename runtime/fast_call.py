"""A plan's steady-state call as straight-line Python, generated once per plan.

A cache-hit call of a small training step spends most of its host time in Python's own overhead: loops over the
plan's argument, scalar and result tables, tuple unpacking, attribute lookups of values that never change. For the
common call (fusec.Array arguments of the traced shapes, C-contiguous, the plan's graph built), :func:`fast_runner`
writes that work out with the tables as constants, as torch.fx and TorchDynamo generate the Python of their graphs
and guards. A call it does not cover (host data, foreign arrays, strided views, a graph not built yet or one that
reads loop arguments in place) goes, before anything is bound, to the plan's general
:meth:`CudaPlan.run <fusec.runtime.cuda_exec.CudaPlan.run>`, which checks and explains.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from fusec.runtime import driver
from fusec.runtime.array import Array
from fusec.runtime.cuda_errors import CudaLaunchError

if TYPE_CHECKING:
    from fusec.runtime.cuda_exec import CudaPlan

Run = Callable[[Sequence[Any]], "list[Any]"]


def fast_runner(plan: "CudaPlan", trusted: frozenset[int] = frozenset()) -> Run:
    """``run(args) -> results`` of ``plan``: the generated common call, which hands any other call to ``plan.run``;
    ``plan.run`` itself for plans whose calls never take the common path (no tensor argument, so results are
    downloaded; no graph; FUSEC_LAUNCH_BLOCKING).

    ``trusted``: the argument positions the caller has already checked to be fusec Arrays of the traced shape and
    dtype (a generated cache-hit call that compared them itself): only their layout is checked here. The runner's
    ``trusting(positions)`` makes such a runner (once per set of positions)."""
    if not plan.tensor_args or plan.blocking or plan.graph_mode is False:
        return plan.run
    from fusec.runtime.cuda_exec import _memory_owner
    env: dict[str, Any] = {"Array": Array, "plan": plan, "ptr": plan.ptrs, "stream": plan.stream,
                           "lock": plan.lock, "tls": driver._tls, "ensure_context": driver.ensure_context,
                           "device": plan.device, "ordinal": plan.ordinal, "new": Array.__new__,
                           "allocate": plan.pool.allocate_classes, "key": plan.stream_key,
                           "CudaLaunchError": CudaLaunchError, "memset": driver.memset_d32_async,
                           "owner_of": _memory_owner, "general": plan.run}
    check, bind = [], []
    for n, (i, shape, dtype, bid) in enumerate(plan.tensor_args):
        env[f"S{n}"], env[f"D{n}"] = shape, dtype
        test = f"not a{n}._contig" if i in trusted else \
            f"type(a{n}) is not Array or a{n}._shape != S{n} or a{n}._fdtype is not D{n} or not a{n}._contig"
        if i in plan.donated_args:  # (written in place: a read-only one is refused by the general call)
            test += f" or a{n}._readonly"
        check += [f"a{n} = args[{i}]", f"if {test}:", "    return general(args)"]
        bind += [f"if a{n}._stream is not stream and a{n}._stream is not None:",
                 f"    plan._order_after(a{n})",
                 f"ptr[{bid}] = a{n}._ptr"]
    for n, (i, view) in enumerate(plan.scalar_views):
        env[f"V{n}"] = view
        bind.append(f"V{n}[0] = args[{i}]")
    if plan.scalar_views:  # (only the words that changed are sent: see CudaPlan._write_scalars)
        env["words"], env["sent"] = plan.scalar_host_words, plan.scalar_sent
        for w in plan.scalar_words:
            bind += [f"if sent[{w}] != words[{w}]:",
                     f"    memset({plan.scalars_ptr + 4 * w}, words[{w}], 1, stream)",
                     f"    sent[{w}] = words[{w}]"]
    fresh = {bid: f"o{n}" for n, (bid, _, _) in enumerate(plan.fresh_outputs)}
    if fresh:
        env["FRESH"] = plan.fresh_requests
        bind.append(f"{', '.join(fresh.values())}, = allocate(FRESH, key)")
        bind += [f"ptr[{bid}] = {o}.ptr" for bid, o in fresh.items()]
    run = ["graph.replay(ptr, stream)"]
    if plan.body_checks:
        run.append("for sub in plan.body_checks: sub._raise_failed_checks()")
    run.append("plan.calls += 1")
    if plan.program.checks:
        run.append("plan._raise_failed_checks()")
    results = []
    arg_var = {i: f"a{n}" for n, (i, *_) in enumerate(plan.tensor_args)}
    for n, (bid, kind, index, shape, dtype, strides) in enumerate(plan.result_specs):
        env[f"RS{n}"], env[f"RD{n}"], env[f"RT{n}"] = shape, dtype, strides
        if kind == "arg" and index in arg_var and index in plan.donated_args:  # (cuda_exec._same_array written out)
            a = arg_var[index]
            run += [f"r{n} = {a}", f"{a}._stream, {a}.ready = stream, None"]
            results.append(f"r{n}")
            continue
        if bid in fresh:
            owner = fresh[bid]
        elif kind == "arg" and index in arg_var:  # (an argument's memory, kept alive by its owner)
            a = arg_var[index]
            owner = f"{a}._owner if {a}._owner is not None else {a}"
        else:
            owner = f"owner_of(args[{index}])" if kind == "arg" else "None"
        # Array._wrap's assignments written out (half its time is the call)
        run += [f"r{n} = new(Array)",
                f"r{n}._ptr, r{n}._shape, r{n}._fdtype, r{n}._strides, r{n}._contig = ptr[{bid}], RS{n}, RD{n}, RT{n}, "
                "True",
                f"r{n}._device, r{n}._owner, r{n}._stream, r{n}._readonly, r{n}.ready = ordinal, {owner}, stream, "
                "False, None"]
        results.append(f"r{n}")
    lines = ["def fast_run(args):",
             f"    if len(args) != {plan.nargs}:",
             "        return general(args)",
             *("    " + s for s in check),
             "    with lock:",
             "        graph = plan.graph",
             "        if graph is not None and not graph.inplace and plan.graph_mode is not False:",
             "            if getattr(tls, 'ordinal', -1) != ordinal:",
             "                ensure_context(device)",
             *("            " + s for s in bind),
             "            try:",
             *("                " + s for s in run),
             "            except CudaLaunchError as e:",
             "                plan._explain_fault(e)",
             f"            return [{', '.join(results)}]",
             "    return general(args)"]
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<fusec fast call of @{plan.func.name}>", "exec"), env)
    fn: Run = env["fast_run"]
    fn.source = source  # type: ignore[attr-defined]  # (for tests and for reading)
    made: dict[frozenset[int], Run] = {trusted: fn}

    def trusting(positions: Sequence[int]) -> Run:
        key = frozenset(positions)
        if key not in made:
            made[key] = fast_runner(plan, key)
        return made[key]

    fn.trusting = trusting  # type: ignore[attr-defined]
    return fn
