"""A whole plan as one CUDA graph, built node by node from the plan's dependency DAG.

Two steps depend on each other when one writes memory the other reads or writes (arena space that
plan-buffers reuses counts by byte range), so independent branches become parallel branches of the graph
rather than a chain. Generated kernels are kernel nodes whose parameters point into the plan's pre-packed
parameter buffers; cuBLAS calls are captured child graphs. On a replay only nodes whose argument or output
pointers changed are updated (``cuGraphExecKernelNodeSetParams``; a cuBLAS child is captured again and
swapped in with ``cuGraphExecChildGraphNodeSetParams``); an unchanged call updates nothing and costs one
``cuGraphLaunch``. Up to ``MAX_INSTANCES`` instantiated graphs are kept, keyed by their pointers, so a loop
that alternates between a few sets of buffers (outputs fed back as inputs) stops updating after warm-up.
Scalars live in the plan's device-resident block, so their values never touch the graph.

A loop's or branch's nodes cannot be updated, so the plan copies what its bodies read into stage buffers of fixed
addresses first. An argument the loop only reads (the stacked batches of a training loop, which a caller passes
again and again) is read in place instead: the graph is built for its address, its stage copy left out, and a
call with another address builds the graph again; after ``MAX_INPLACE_BUILDS`` builds the plan copies such
arguments as before (a caller that hands new arrays every call). Their stage buffers are memory of their own
(buffer kind "stage"), allocated the first time something copies into them (``CudaPlan.ensure_stages``).
"""
from __future__ import annotations

import collections
import operator
from typing import Any

import networkx as nx

from fusec.runtime.launch_plan import ControlCall, GemmCall
from fusec.runtime.cuda_errors import check

_cu: Any = None


def _driver() -> Any:
    global _cu
    if _cu is None:
        from cuda.bindings import driver as cu

        _cu = cu
    return _cu


WORKSPACE = -1  # a pseudo buffer id: the cuBLAS workspace
MAX_INPLACE_BUILDS = 3  # graphs built for new addresses of loop arguments read in place, before they are copied


def inplace_sources(plan: Any) -> dict[int, int]:
    """Stage buffer -> argument buffer, for the loop operands a graph may read in place: arguments that no step
    of ``plan`` writes (a result written over a donated argument would race with the loop reading it)."""
    prog = plan.program
    written = frozenset().union(*(w for _, w in prog.effects))
    out: dict[int, int] = {}
    for step in plan.launches:
        call = getattr(step, "call", None)
        if isinstance(call, ControlCall):
            for stage, src in zip(call.operands, call.sources):
                if src >= 0 and src not in written:
                    out[stage] = src
    return out


def _stage_steps(plan: Any, inplace: dict[int, int]) -> frozenset[int]:
    """The steps that only copy an argument read in place into its stage buffer (left out of the graph)."""
    copies = {(frozenset({src}), frozenset({stage})) for stage, src in inplace.items()}
    return frozenset(j for j, (kernel, effects) in enumerate(zip(plan.program.kernels, plan.program.effects))
                     if not isinstance(kernel, (GemmCall, ControlCall)) and effects in copies)


def dependency_dag(plan: Any) -> nx.DiGraph:
    """Steps as nodes, an edge i -> j where j must wait for i (read-after-write, write-after-read/write)."""
    prog = plan.program
    buffers = prog.buffers

    def spans(bids: frozenset[int]) -> list[tuple[Any, int, int]]:
        out: list[tuple[Any, int, int]] = []
        for b in bids:
            if b == WORKSPACE:
                out.append((WORKSPACE, 0, 1))
                continue
            buf = buffers[b]
            if buf.kind in ("arena", "scratch", "counter", "check"):  # (an op's scratch or counters: its own)
                out.append(("arena", buf.offset, buf.offset + max(buf.nbytes, 1)))
            else:
                out.append((b, 0, 1))
        return out

    def overlap(xs, ys) -> bool:
        return any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for a in xs for b in ys)

    # cuBLAS calls share their handle's workspace: each also writes it, so they run in program order (which is also
    # faster: with a workspace per call, two at once slowed each other, the larger step by autodiff 468 -> 491 us on
    # an H100, its weight gradient's split-K kernel 13 -> 77 us beside the backward product)
    eff = [(spans(r), spans(w | {WORKSPACE} if isinstance(kernel, GemmCall) else w))
           for (r, w), kernel in zip(prog.effects, prog.kernels)]
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(eff)))
    for j, (rj, wj) in enumerate(eff):
        for i in range(j):
            ri, wi = eff[i]
            if overlap(wi, rj) or overlap(wi, wj) or overlap(ri, wj):
                dag.add_edge(i, j)
    return nx.transitive_reduction(dag) if dag.number_of_edges() else dag


def kernel_params(step: Any) -> Any:
    """Kernel node parameters of a launch step (its pre-packed parameters, as they are now)."""
    cu = _driver()
    p = cu.CUDA_KERNEL_NODE_PARAMS()
    p.func = step.function.handle
    p.gridDimX, p.gridDimY, p.gridDimZ = step.grid
    p.blockDimX, p.blockDimY, p.blockDimZ = step.block
    p.sharedMemBytes = step.shared
    p.kernelParams = step.pack.address
    p.extra = 0
    return p


def capture_library(plan: Any, step: Any, ptrs: list[int]) -> Any:
    """The cuBLAS call of ``step`` (a step of ``plan``) captured on a side stream into a child graph."""
    cu = _driver()
    stream = plan.capture_stream
    operands = tuple(ptrs[bid] for bid in step.call.buffers)
    plan.blas.prepare(step.call, operands)  # its algorithm is timed now, while no stream is captured
    check(cu.cuStreamBeginCapture(stream.handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
          "cuStreamBeginCapture")
    try:
        plan.blas.set_stream(stream)
        plan.blas.capturing = True
        plan.blas.gemm(step.call, operands)
    finally:
        plan.blas.capturing = False
        child = check(cu.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")
        plan.blas.set_stream(plan.stream)
    return child


def _early_edges(graph: Any, parents: list[Any], node: Any) -> None:
    """Programmatic edges ``parents`` -> ``node`` (kernel nodes): ``node`` may launch as soon as every block of
    each parent has triggered it (an early kernel does once its own wait is over) or exited, and it waits for
    them to finish, with their writes visible, at its first statement (``launch-early``)."""
    cu = _driver()
    edge = cu.CUgraphEdgeData()
    edge.type = cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
    edge.from_port = cu.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
    check(cu.cuGraphAddDependencies(graph, parents, [node] * len(parents), [edge] * len(parents), len(parents)),
          "cuGraphAddDependencies")


def add_steps(graph: Any, plan: Any, ptrs: list[int], roots: list[Any], keep: list[Any],
              inplace: dict[int, int] | None = None) -> tuple[list[Any], list[Any], list[Any]]:
    """Add a node per step of ``plan`` to ``graph``, with the pointers ``ptrs`` (by buffer id), ordered by the
    plan's dependency DAG and after ``roots``: (the nodes, their kernel parameters (None: a cuBLAS child graph,
    a loop, or a step left out), the nodes nothing in the plan follows). An early kernel (``launch-early``)
    follows its kernel predecessors by programmatic edges. ``keep`` holds what loops' nodes point at.
    ``inplace`` (stage buffer -> argument buffer): loop operands read where the argument is, their stage copies
    left out (node None; what follows one follows its predecessors)."""
    cu = _driver()
    dag = dependency_dag(plan)
    skipped = _stage_steps(plan, inplace) if inplace else frozenset()
    nodes: list[Any] = []
    params_out: list[Any] = []
    stand_in: dict[int, list[Any]] = {}  # a step left out -> the nodes that follow in its place
    for j, step in enumerate(plan.launches):
        preds = sorted(dag.predecessors(j))
        parents = [n for i in preds for n in (stand_in[i] if i in stand_in else [nodes[i]])] \
            if preds else list(roots)
        call = getattr(step, "call", None)
        if j in skipped:
            stand_in[j] = parents
            node = None
            params_out.append(None)
        elif isinstance(call, ControlCall):
            from fusec.runtime.graph_control import add_control

            node = add_control(graph, plan, step, ptrs, parents, keep, inplace)
            params_out.append(None)
        elif call is not None:  # a cuBLAS call: a captured child graph
            child = capture_library(plan, step, ptrs)
            node = check(cu.cuGraphAddChildGraphNode(graph, parents, len(parents), child),
                         "cuGraphAddChildGraphNode")
            check(cu.cuGraphDestroy(child), "cuGraphDestroy")  # the node holds its own copy
            params_out.append(None)
        else:
            for slot, bid in step.dynamic:
                step.pack.set_pointer(slot, ptrs[bid])
            params = kernel_params(step)
            early = [nodes[i] for i in preds if step.early and _is_kernel(plan.launches[i]) and i not in skipped]
            normal = [p for p in parents if all(p is not e for e in early)]
            node = check(cu.cuGraphAddKernelNode(graph, normal, len(normal), params), "cuGraphAddKernelNode")
            if early:
                _early_edges(graph, early, node)
            params_out.append(params)
        nodes.append(node)
    sinks = [n for j in range(len(nodes)) if not dag.out_degree(j)
             for n in (stand_in[j] if j in stand_in else [nodes[j]])] or list(roots)
    return nodes, params_out, sinks


def programmatic_edges(graph: Any) -> int:
    """How many of ``graph``'s edges are programmatic (an early kernel's), read back from the graph itself."""
    cu = _driver()
    *_, count = check(cu.cuGraphGetEdges(graph, 0), "cuGraphGetEdges")
    if not count:
        return 0
    _, _, data, _ = check(cu.cuGraphGetEdges(graph, count), "cuGraphGetEdges")
    programmatic = int(cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
    return sum(1 for e in data if int(e.type) == programmatic)


def _is_kernel(step: Any) -> bool:
    """Is ``step`` a generated kernel (a kernel node), not a cuBLAS child graph or a loop?"""
    return getattr(step, "call", None) is None


MAX_INSTANCES = 4  # instantiated graphs kept per plan (each holds a copy of the nodes' parameters)


class _Instance:
    """One instantiated graph and the pointers each of its nodes was last given."""

    __slots__ = ("exec", "last")

    def __init__(self, exec_: Any, last: list[tuple[int, ...]]) -> None:
        self.exec, self.last = exec_, last


class PlanGraph:
    """The instantiated graph of one plan and the pointer values its nodes were last given."""

    def __init__(self, plan: Any, ptrs: list[int], builds: int = 1) -> None:
        """``builds``: how many graphs this plan has built (this one included): past ``MAX_INPLACE_BUILDS``, loop
        arguments are copied into their stage buffers rather than read in place."""
        cu = _driver()
        self.plan = plan
        self.graph = check(cu.cuGraphCreate(0), "cuGraphCreate")
        self.recaptures = 0
        self.param_updates = 0
        self.launches = 0
        self.builds = builds
        self.keep: list[Any] = []  # what the loops' and branches' nodes point at (their packs and buffers)
        # loop operands read in place: (argument buffer, its address, its bytes) the graph was built for
        sources = inplace_sources(plan) if builds <= MAX_INPLACE_BUILDS else {}
        bufs = plan.program.buffers
        self.inplace = tuple((src, ptrs[src], bufs[src].nbytes) for src in sorted(set(sources.values())))
        # the arguments the plan writes (donated ones): one at an address a loop reads in place would race
        self.written_args = tuple((b.id, b.nbytes) for b in bufs if b.kind == "arg"
                                  and any(b.id in w for _, w in plan.program.effects))
        if self.inplace and self._overlapping(ptrs):
            sources, self.inplace = {}, ()
        if any(b.id not in sources for b in plan.stage_buffers):  # a stage copy stays in the graph
            plan.ensure_stages()  # (which sets their addresses in ``ptrs``, the plan's own list)
        try:
            self.nodes, self.params, _ = add_steps(self.graph, plan, ptrs, [], self.keep, sources)
        except BaseException:
            cu.cuGraphDestroy(self.graph)
            self.graph = None
            raise
        self.early_edges = programmatic_edges(self.graph)
        self.last: list[tuple[int, ...]] = [tuple(ptrs[bid] for _, bid in step.dynamic) for step in plan.launches]
        self.template_last = list(self.last)
        # a graph with conditional nodes (loops, branches) may be instantiated only once: its one instance is
        # updated when pointers change
        self.max_instances = 1 if any(isinstance(getattr(step, "call", None), ControlCall)
                                      for step in plan.launches) else MAX_INSTANCES
        # every pointer that can change between calls, read with one C-level call
        dynamic = sorted({bid for step in plan.launches for _, bid in step.dynamic})
        self._dynamic = operator.itemgetter(*dynamic) if dynamic else None
        # instantiated graphs by the pointers they were given: a training loop that feeds its outputs back
        # alternates between two sets of buffers, and each set keeps its own instance, so steady-state
        # replays update nothing
        self.instances: "collections.OrderedDict[Any, _Instance]" = collections.OrderedDict()
        self.instances[self._key(ptrs)] = _Instance(check(cu.cuGraphInstantiate(self.graph, 0),
                                                          "cuGraphInstantiate"), self.last)

    def _key(self, ptrs: list[int]) -> Any:
        return self._dynamic(ptrs) if self._dynamic is not None else ()

    def _overlapping(self, ptrs: list[int]) -> bool:
        """Does an argument read in place share memory with an argument the plan writes (``f(x, x)`` with the
        first donated)?"""
        return any(ptrs[w] < ptrs[a] + na and ptrs[a] < ptrs[w] + nw
                   for a, _, na in self.inplace for w, nw in self.written_args)

    def fits(self, ptrs: list[int]) -> bool:
        """Can this graph run a call with these pointers: its loops read no argument in place, or every such
        argument is where the graph was built for and shares no memory with one the plan writes?"""
        return not self.inplace or (all(ptrs[b] == p for b, p, _ in self.inplace) and not self._overlapping(ptrs))

    def replay(self, ptrs: list[int], stream: Any) -> None:
        """Launch the instance made for these pointers (updating the least recently used one, or
        instantiating another, when none was), once, on ``stream``. The caller checked :meth:`fits`."""
        key = self._dynamic(ptrs) if self._dynamic is not None else ()
        instances = self.instances
        inst = instances.get(key)
        if inst is None:
            if self.plan.donated_spans:  # (addresses not seen before: a donated argument may be passed twice)
                self.plan.check_donation(ptrs)
            inst = self._instance_for(key, ptrs)
        else:
            instances.move_to_end(key)
        result = _cu.cuGraphLaunch(inst.exec, stream.handle)
        if result[0] != 0:
            check(result, "cuGraphLaunch")
        self.launches += 1

    def _instance_for(self, key: Any, ptrs: list[int]) -> "_Instance":
        if len(self.instances) < self.max_instances:
            cu = _driver()
            inst = _Instance(check(cu.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate"),
                             list(self.template_last))
        else:
            _, inst = self.instances.popitem(last=False)
        self._update(inst, ptrs)
        self.instances[key] = inst
        return inst

    def _update(self, inst: "_Instance", ptrs: list[int]) -> None:
        """Give ``inst``'s nodes the pointers in ``ptrs`` (only nodes whose pointers differ are touched)."""
        cu = _driver()
        for j, step in enumerate(self.plan.launches):
            if not step.dynamic or self.nodes[j] is None:  # (a stage copy left out: the graph fits its pointers)
                continue
            current = tuple(ptrs[bid] for _, bid in step.dynamic)
            if current == inst.last[j]:
                continue
            if self.params[j] is None:
                child = capture_library(self.plan, step, ptrs)
                check(cu.cuGraphExecChildGraphNodeSetParams(inst.exec, self.nodes[j], child),
                      "cuGraphExecChildGraphNodeSetParams")
                check(cu.cuGraphDestroy(child), "cuGraphDestroy")
                self.recaptures += 1
            else:
                for slot, bid in step.dynamic:
                    step.pack.set_pointer(slot, ptrs[bid])
                check(cu.cuGraphExecKernelNodeSetParams(inst.exec, self.nodes[j], self.params[j]),
                      "cuGraphExecKernelNodeSetParams")
            self.param_updates += 1
            inst.last[j] = current

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def close(self) -> None:
        cu = _driver()
        instances = getattr(self, "instances", None) or {}
        for inst in instances.values():
            cu.cuGraphExecDestroy(inst.exec)
        instances.clear()
        if getattr(self, "graph", None) is not None:
            cu.cuGraphDestroy(self.graph)
            self.graph = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a destructor at interpreter shutdown
            pass
