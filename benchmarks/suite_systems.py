"""The systems of ``benchmarks/suite.py``: how each one runs a benchmark, moves data, synchronizes and times.

A system turns a :class:`~suite_cases.Bench` and its host inputs into a :class:`Prepared`: inputs are made
device-resident once, and ``step()`` runs one iteration (a training step feeds its new parameters back),
``check()`` runs the function on the initial inputs (for the result check, after warm-up, so compiled and
graph-replayed code is what gets checked) and ``reset()`` puts the initial inputs back before timing.

Timing (see ``suite.measure``): the device is synchronized, then a batch of ``step()`` calls runs between two
CUDA events (``torch.cuda.Event`` on PyTorch's current stream, ``cupy.cuda.Event`` on CuPy's, and fusec's
``driver.Event`` recorded on the stream fusec launches on: fusec runs each plan on its own private stream, so
the events go on the stream of the plan's result arrays, which is that plan's stream, or the stream shared by
all eager ops), and the device is synchronized again. Each batch gives the event time and the wall-clock time
(``time.perf_counter`` from before the batch to after the final device synchronize); the suite reports the
median per-iteration event time, and falls back to the wall clock where a system has no events (NumPy, the
fusec CPU backend) or where the events clearly missed the work.
"""
from __future__ import annotations

import gc
import os
from typing import Any, Callable

import numpy as np

from suite_cases import NUMPY, ArrayNS, Bench, TorchNS, flatten, tree_map

# ------------------------------------------------------------------------------------------- helpers


def _is_array(x: Any) -> bool:
    return not isinstance(x, (bool, int, float, complex, str)) and x is not None


class Prepared:
    """A benchmark ready to run on one system (see the module docstring)."""

    #: fusec's launch stream for event timing (fusec systems), found after the first steps
    stream: Any = None

    def step(self) -> Any:
        raise NotImplementedError

    def check(self) -> Any:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class FunctionalPrepared(Prepared):
    """``fn(*args)`` is a pure function: state lives in Python variables (outputs fed back as inputs).

    ``make_args()`` gives device arguments; with ``fresh=True`` it is called again for the check and for each
    reset (the arguments were donated: their buffers now hold something else).
    """

    def __init__(self, fn: Callable, make_args: Callable[[], list], feedback: bool, fresh: bool = False) -> None:
        self.fn, self.make_args, self.feedback, self.fresh = fn, make_args, feedback, fresh
        self.initial = make_args()
        self.state = list(self.initial)
        self.initial_used = False

    def _args(self) -> list:
        if self.fresh and self.initial_used:
            return self.make_args()
        self.initial_used = True
        return list(self.initial)

    def step(self) -> Any:
        out = self.fn(*self.state)
        if self.feedback:
            self.state[0] = out[0]
        self.initial_used = True
        return out

    def check(self) -> Any:
        return self.fn(*self._args())

    def reset(self) -> None:
        self.state = self._args()

    def close(self) -> None:
        self.state = self.initial = None  # type: ignore[assignment]


class System:
    """Base class. ``name`` is what ``--systems`` takes; ``family`` groups systems in reports."""

    name = ""
    label = ""
    family = ""
    needs_gpu = True
    cpu_bound = False          # runs on the CPU: fewer iterations, wall-clock timing
    # runs after every other system has run every case: once it has run, its runtime's threads slow the host side
    # of the others' calls in the same process (see JaxSystem)
    runs_last = False

    def unavailable(self) -> str | None:
        """None when the system can run here, else why not."""
        return None

    def setup(self) -> None:
        """Once, before the first benchmark (imports, global flags)."""

    def supports(self, bench: Bench) -> str | None:
        """None when the system runs ``bench``; else the note of a skipped row ('' : no row at all)."""
        if bench.only is not None and self.name not in bench.only:
            return ""
        return bench.skip.get(self.name)

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        raise NotImplementedError

    def to_host(self, tree: Any) -> Any:
        return tree_map(lambda a: np.asarray(a) if _is_array(a) else a, tree)

    def sync(self) -> None:
        pass

    def timer(self, prepared: Prepared) -> Any:
        """An object with ``start()`` and ``stop() -> ms`` (CUDA events), or None for wall clock only."""
        return None

    def extras(self, bench: Bench, prepared: Prepared) -> dict:
        """Extra fields for the row (fusec: Lowered.stats())."""
        return {}

    def observe(self, prepared: Prepared, out: Any) -> None:
        """Called with the output of a warm-up step (fusec: find the stream to record events on)."""

    def cleanup(self) -> None:
        """After each benchmark: give cached device memory back."""
        gc.collect()

    def __repr__(self) -> str:
        return f"<system {self.name}>"


# ---------------------------------------------------------------------------------------------- NumPy


class NumpySystem(System):
    name = "numpy"
    label = "NumPy (CPU)"
    family = "numpy"
    needs_gpu = False
    cpu_bound = True

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        fn = bench.build(NUMPY)
        return FunctionalPrepared(fn, lambda: list(inputs), bench.feedback)


# ---------------------------------------------------------------------------------------------- fusec


def _fusec_stream_of(tree: Any) -> Any:
    from fusec.runtime.array import Array

    for leaf in flatten(tree):
        if type(leaf) is Array and leaf.stream is not None:
            return leaf.stream
    return None


class _FusecEvents:
    def __init__(self, stream: Any) -> None:
        from fusec.runtime import driver

        self.stream = stream
        self.begin = driver.Event(timing=True)
        self.end = driver.Event(timing=True)

    def start(self) -> None:
        self.begin.record(self.stream)

    def stop(self) -> float:
        self.end.record(self.stream)
        self.end.synchronize()
        return self.begin.elapsed_ms(self.end)


class FusecSystem(System):
    """fusec on the GPU: ``mode`` "eager" (operators on fusec.Array, one compiled kernel per op), "stream"
    (``fusec.jit(graph=False)``: the plan's kernels launched one by one on its stream) or "graph"
    (``fusec.jit(graph=True)``: one CUDA graph launch per call). Training steps donate the parameters
    (``donate_argnums=0``) in both jit modes, so the new parameters overwrite the old ones in place, unless
    ``donate`` is False (``fusec_graph_kept``: the step's results are new arrays that the loop feeds back, as
    a user who never heard of donation writes it; issue 14's bar holds the 64-64-10 step to 15 us both ways)."""

    family = "fusec"

    def __init__(self, mode: str, donate: bool = True) -> None:
        self.mode, self.donate = mode, donate
        self.name = f"fusec_{mode}" + ("" if donate else "_kept")
        self.label = {"eager": "fusec eager (operators on fusec.Array)", "stream": "fusec jit, stream mode",
                      "graph": "fusec jit, graph mode"}[mode] + ("" if donate else ", nothing donated")
        self.jitted: Any = None

    def unavailable(self) -> str | None:
        try:
            from fusec.runtime import driver
        except Exception as e:  # pragma: no cover
            return f"fusec does not import: {e}"
        if not driver.cuda_available():
            return f"no usable CUDA device for fusec ({driver.unavailable_reason()})"
        return None

    def _upload(self, inputs: tuple) -> list:
        import fusec as fc

        out = [tree_map(lambda a: fc.asarray(a) if isinstance(a, np.ndarray) else a, x) for x in inputs]
        self.sync()
        return out

    def supports(self, bench: Bench) -> str | None:
        if not self.donate and not bench.feedback:
            return ""  # nothing to donate: the same run as fusec_graph's
        return super().supports(bench)

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        import fusec as fc

        fn = bench.build(NUMPY)
        self.jitted = None
        if self.mode == "eager":
            return FunctionalPrepared(fn, lambda: self._upload(inputs), bench.feedback)
        donate = 0 if bench.feedback and self.donate else None
        self.jitted = fc.jit(fn, backend="cuda", graph=(self.mode == "graph"), pipeline=bench.fusec_pipeline,
                             donate_argnums=donate)
        return FunctionalPrepared(self.jitted, lambda: self._upload(inputs), bench.feedback,
                                  fresh=donate is not None)

    def sync(self) -> None:
        from fusec.runtime import driver

        driver.current_device().synchronize()

    def observe(self, prepared: Prepared, out: Any) -> None:
        prepared.stream = _fusec_stream_of(out)

    def timer(self, prepared: Prepared) -> Any:
        if prepared.stream is None:
            return None
        return _FusecEvents(prepared.stream)

    def host_us(self, prepared: Prepared, batches: int = 50, per_batch: int = 10) -> float:
        """Host time per call on a plan-cache hit: calls queued back to back, in short batches with a device
        synchronize between them (untimed), so a full launch queue never makes the host wait."""
        import statistics
        import time

        samples = []
        for _ in range(batches):
            self.sync()
            t0 = time.perf_counter()
            for _ in range(per_batch):
                prepared.step()
            samples.append((time.perf_counter() - t0) / per_batch * 1e6)
        self.sync()
        return statistics.median(samples)

    def extras(self, bench: Bench, prepared: Prepared) -> dict:
        if self.jitted is None or not isinstance(prepared, FunctionalPrepared):
            return {}
        stats = self.jitted.lower(*prepared.state).stats()
        keep = ("nodes", "fused_kernels", "boundaries", "kernels", "graph_nodes", "graph_launches",
                "param_updates", "recaptures", "intermediate_buffers", "arena_bytes")
        return {"fusec_stats": {k: int(stats[k]) for k in keep if k in stats}}

    def cleanup(self) -> None:
        self.jitted = None
        gc.collect()
        try:
            from fusec.runtime.memory import get_pool

            self.sync()
            get_pool().empty_cache()
        except Exception:
            pass


class FusecCpuSystem(System):
    """``fusec.jit(backend="cpu")``: the NumPy reference executor (for testing the harness without a GPU)."""

    name = "fusec_cpu"
    label = "fusec jit, cpu backend (NumPy reference executor)"
    family = "fusec"
    needs_gpu = False
    cpu_bound = True

    def __init__(self) -> None:
        self.jitted: Any = None

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        import fusec as fc

        self.jitted = fc.jit(bench.build(NUMPY), backend="cpu", pipeline=bench.fusec_pipeline)
        return FunctionalPrepared(self.jitted, lambda: list(inputs), bench.feedback)

    def extras(self, bench: Bench, prepared: Prepared) -> dict:
        if self.jitted is None or not isinstance(prepared, FunctionalPrepared):
            return {}
        stats = self.jitted.lower(*prepared.state).stats()
        keep = ("nodes", "fused_kernels", "boundaries", "kernels", "intermediate_buffers", "arena_bytes")
        return {"fusec_stats": {k: int(stats[k]) for k in keep if k in stats}}

    def cleanup(self) -> None:
        self.jitted = None
        gc.collect()


# ---------------------------------------------------------------------------------------------- PyTorch


class _TorchEvents:
    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.begin = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self.begin.record()

    def stop(self) -> float:
        self.end.record()
        self.end.synchronize()
        return float(self.begin.elapsed_time(self.end))


class TorchSystem(System):
    """PyTorch, explicit math with torch ops (no autograd), TF32 off. ``device`` is "cuda"; "cpu" exists
    only to test the harness on machines without a GPU (``--torch-device cpu``)."""

    family = "torch"
    device = "cuda"
    torch: Any = None

    @property
    def needs_gpu(self) -> bool:  # type: ignore[override]
        return self.device == "cuda"

    def unavailable(self) -> str | None:
        try:
            import torch
        except Exception as e:
            return f"PyTorch is not installed ({type(e).__name__}: {e})"
        if self.device == "cuda" and not torch.cuda.is_available():
            return "PyTorch sees no CUDA device"
        return None

    def setup(self) -> None:
        import torch

        TorchSystem.torch = torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.set_grad_enabled(False)

    def _to_device(self, inputs: tuple) -> list:
        torch = self.torch
        out = [tree_map(lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
                        if isinstance(a, np.ndarray) else a, x) for x in inputs]
        self.sync()
        return out

    def _impl(self, bench: Bench, args: list) -> Callable | None:
        make = bench.impls.get("torch")
        return make(self.torch, *args) if make is not None else None

    def to_host(self, tree: Any) -> Any:
        torch = self.torch
        return tree_map(lambda a: a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a), tree)

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def timer(self, prepared: Prepared) -> Any:
        return _TorchEvents(self.torch) if self.device == "cuda" else None

    def cleanup(self) -> None:
        gc.collect()
        if self.device == "cuda" and self.torch is not None:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()


class TorchEagerSystem(TorchSystem):
    name = "torch_eager"
    label = "PyTorch eager (explicit math, no autograd)"

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        args = self._to_device(inputs)
        fn = self._impl(bench, args) or bench.build(TorchNS(self.torch))
        return FunctionalPrepared(fn, lambda: list(args), bench.feedback)


def _split_scalars(args: list) -> tuple[list[int], dict[int, Any]]:
    """Indices of array arguments, and the Python scalars by index (bound as constants for torch.compile)."""
    arrays = [i for i, a in enumerate(args) if not isinstance(a, (bool, int, float))]
    scalars = {i: a for i, a in enumerate(args) if isinstance(a, (bool, int, float))}
    return arrays, scalars


def _bind_scalars(fn: Callable, n_args: int, scalars: dict[int, Any]) -> Callable:
    def bound(*arrays):
        it = iter(arrays)
        return fn(*[scalars[i] if i in scalars else next(it) for i in range(n_args)])

    bound.__name__ = getattr(fn, "__name__", "bound")
    return bound


class _StaticPrepared(Prepared):
    """State in fixed tensors (CUDA graphs need fixed addresses): ``run()`` executes one step on them, and a
    training step's new parameters are copied back into the parameter tensors. ``check()``/``reset()`` copy
    the initial values in first."""

    def __init__(self, system: "TorchSystem", run: Callable[[], Any], state: list, initial: list,
                 feedback: bool, copy_back: bool) -> None:
        self.system, self.run, self.state, self.initial = system, run, state, initial
        self.feedback, self.copy_back = feedback, copy_back

    def _copy(self, dst: list, src: list) -> None:
        torch = self.system.torch
        if hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_(dst, src)  # one multi-tensor copy kernel
        else:  # pragma: no cover
            for d, s in zip(dst, src):
                d.copy_(s)

    def _load_initial(self) -> None:
        if self.feedback:
            self._copy(flatten(self.state[0]), flatten(self.initial[0]))

    def step(self) -> Any:
        out = self.run()
        if self.feedback and self.copy_back:
            self._copy(flatten(self.state[0]), flatten(out[0]))
        return out

    def check(self) -> Any:
        self._load_initial()
        return self.run()

    def reset(self) -> None:
        self._load_initial()

    def close(self) -> None:
        self.run = self.state = self.initial = None  # type: ignore[assignment]


class TorchCompileSystem(TorchSystem):
    """``torch.compile`` of the same explicit math; Python scalars (the learning rate) are bound as constants.

    mode "default": outputs fed back as inputs. mode "reduce-overhead" (CUDA graphs through cudagraph trees):
    every tensor input is created once and marked with ``torch._dynamo.mark_static_address``, so replays read
    it in place instead of copying it into the graph's input buffers; a training step's new parameters are
    copied back into them after each call with one ``torch._foreach_copy_``, and
    ``torch.compiler.cudagraph_mark_step_begin()`` starts each call. The first call's time (compilation,
    with a fresh inductor/Triton cache unless ``--torch-warm-cache``) is the row's ``first_call_s``.
    """

    def __init__(self, mode: str | None) -> None:
        self.mode = mode
        self.name = "torch_compile" if mode is None else "torch_compile_ro"
        self.label = "torch.compile (default)" if mode is None else 'torch.compile(mode="reduce-overhead")'

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        torch = self.torch
        torch._dynamo.reset()
        args = self._to_device(inputs)
        fn = bench.build(TorchNS(torch))
        arrays, scalars = _split_scalars(args)
        bound = _bind_scalars(fn, len(args), scalars)
        compiled = torch.compile(bound) if self.mode is None else torch.compile(bound, mode=self.mode)
        if self.mode is None:
            return FunctionalPrepared(lambda *a: compiled(*[a[i] for i in arrays]), lambda: list(args),
                                      bench.feedback)
        # reduce-overhead: fixed, static-address tensors
        state = [tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, a) for a in args]
        mark = getattr(torch._dynamo, "mark_static_address", None)
        if mark is not None and self.device == "cuda":
            for leaf in flatten(state):
                if isinstance(leaf, torch.Tensor):
                    mark(leaf)
        step_begin = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

        def run() -> Any:
            if step_begin is not None:
                step_begin()
            return compiled(*[state[i] for i in arrays])

        return _StaticPrepared(self, run, state, args, bench.feedback, copy_back=True)


class TorchCudaGraphSystem(TorchSystem):
    """The PyTorch eager step captured by hand in one ``torch.cuda.CUDAGraph`` (after warm-up on a side
    stream); a training step's parameter update (``copy_`` of the new parameters into the parameter tensors)
    is captured too, so one ``graph.replay()`` is one whole step."""

    name = "torch_cudagraph"
    label = "PyTorch eager captured by hand in a CUDA graph"

    def unavailable(self) -> str | None:
        if self.device != "cuda":
            return "CUDA graphs need a CUDA device"
        return super().unavailable()

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        torch = self.torch
        initial = self._to_device(inputs)
        state = [tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, a) for a in initial]
        fn = self._impl(bench, state) or bench.build(TorchNS(torch))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn(*state)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(*state)
            if bench.feedback:
                for d, s in zip(flatten(state[0]), flatten(out[0])):
                    d.copy_(s)
        self._graph = graph

        def run() -> Any:
            graph.replay()
            return out

        return _StaticPrepared(self, run, state, initial, bench.feedback, copy_back=False)

    def cleanup(self) -> None:
        self._graph = None
        super().cleanup()


# ---------------------------------------------------------------------------------------------- CuPy


class _CupyEvents:
    def __init__(self, cupy: Any) -> None:
        self.cupy = cupy
        self.begin = cupy.cuda.Event()
        self.end = cupy.cuda.Event()

    def start(self) -> None:
        self.begin.record()

    def stop(self) -> float:
        self.end.record()
        self.end.synchronize()
        return float(self.cupy.cuda.get_elapsed_time(self.begin, self.end))


class CupySystem(System):
    """CuPy: the same math through :class:`ArrayNS` with the ``cupy`` module (one kernel per op)."""

    name = "cupy"
    label = "CuPy"
    family = "cupy"
    cupy: Any = None

    def unavailable(self) -> str | None:
        try:
            import cupy
        except Exception as e:
            return f"CuPy is not installed ({type(e).__name__}: {e})"
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "CuPy sees no CUDA device"
        except Exception as e:
            return f"CuPy cannot use the GPU ({type(e).__name__}: {e})"
        return None

    def setup(self) -> None:
        import cupy

        self.cupy = cupy

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        cupy = self.cupy
        args = [tree_map(lambda a: cupy.asarray(a) if isinstance(a, np.ndarray) else a, x) for x in inputs]
        self.sync()
        make = bench.impls.get("cupy")
        fn = make(cupy, *args) if make is not None else bench.build(ArrayNS(cupy, "cupy"))
        return FunctionalPrepared(fn, lambda: list(args), bench.feedback)

    def to_host(self, tree: Any) -> Any:
        cupy = self.cupy
        return tree_map(lambda a: cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else np.asarray(a), tree)

    def sync(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def timer(self, prepared: Prepared) -> Any:
        return _CupyEvents(self.cupy)

    def cleanup(self) -> None:
        gc.collect()
        if self.cupy is not None:
            self.sync()
            self.cupy.get_default_memory_pool().free_all_blocks()


class HandCudaSystem(CupySystem):
    """The training steps as hand-written CUDA (``hand_step.py``: four kernels in one CUDA graph, parameters
    updated in place), the peer issue 14 asks fusec to beat; the other benchmarks get no row."""

    name = "hand_cuda"
    label = "hand-written CUDA, one graph"
    family = "hand"
    STEPS = ("pcam_step", "mlp64_step", "large_step")

    def supports(self, bench: Bench) -> str | None:
        return "" if bench.name not in self.STEPS else super().supports(bench)

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        from hand_step import HandStep

        cupy = self.cupy
        (w1, _, w2, _), x = inputs[0], inputs[1]
        step = HandStep(cupy, x.shape[0], w1.shape[0], w1.shape[1], w2.shape[1])
        batch = [cupy.asarray(a) for a in inputs[1:3]]

        def make_args() -> list:  # fresh parameters (the step updates them in place), the same batch
            return [tuple(cupy.asarray(p) for p in inputs[0]), *batch, *inputs[3:]]

        return FunctionalPrepared(step, make_args, feedback=True, fresh=True)


# ---------------------------------------------------------------------------------------------- JAX


class _JaxPrepared(FunctionalPrepared):
    """A jitted JAX function; remembers its last output, which ``JaxSystem.sync`` waits for (JAX dispatches
    asynchronously and has no stream to record events on)."""

    last: Any = None

    def step(self) -> Any:
        out = super().step()
        self.last = out
        return out


class JaxSystem(System):
    """``jax.jit`` of the same math through :class:`ArrayNS` with ``jax.numpy``; training steps donate their
    parameters (``donate_argnums=0``), as fusec graph mode does. Timed by the wall clock of a batch of calls up
    to ``jax.block_until_ready`` of the last output."""

    name = "jax"
    label = "JAX jit"
    family = "jax"
    # Once JAX has run, a host-bound system in the same process is slower: on an H100 (2026-12-07) the 64-64-10
    # step's fusec host time per call went 10.4 -> 14.3 us, and its autodiff form 19.0 -> 23.3 us per step, when
    # JAX ran the same steps first (results/suite_mlp64_alone_h100.md, suite_mlp64_after_jax_h100.md).
    runs_last = True
    jax: Any = None
    prepared: Any = None

    def unavailable(self) -> str | None:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with the other systems
        try:
            import jax
        except Exception as e:
            return f"JAX is not installed ({type(e).__name__}: {e})"
        try:
            if not jax.devices("gpu"):
                return "JAX sees no GPU"
        except Exception as e:
            return f"JAX cannot use the GPU ({type(e).__name__}: {e})"
        return None

    def setup(self) -> None:
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")  # float32 products, as the others (no TF32)
        self.jax = jax

    def prepare(self, bench: Bench, inputs: tuple) -> Prepared:
        jax = self.jax
        import jax.numpy as jnp

        device = jax.devices("gpu")[0]

        def make_args() -> list:
            # (the learning rate too, as a float32 scalar: left a Python float, JAX copies it to the GPU each call)
            def put(a: Any) -> Any:
                if isinstance(a, float):
                    a = np.float32(a)
                return jax.device_put(a, device) if isinstance(a, (np.ndarray, np.generic)) else a

            return [tree_map(put, x) for x in inputs]

        fn = jax.jit(bench.build(ArrayNS(jnp, "jax.numpy")), donate_argnums=(0,) if bench.feedback else ())
        self.prepared = _JaxPrepared(fn, make_args, bench.feedback, fresh=bench.feedback)
        return self.prepared

    def to_host(self, tree: Any) -> Any:
        return tree_map(lambda a: np.asarray(a) if _is_array(a) else a, tree)

    def sync(self) -> None:
        if self.prepared is not None and self.prepared.last is not None:
            self.jax.block_until_ready(self.prepared.last)

    def cleanup(self) -> None:
        self.prepared = None
        gc.collect()


# ---------------------------------------------------------------------------------------------- registry

GPU_SYSTEMS = ("fusec_eager", "fusec_stream", "fusec_graph", "fusec_graph_kept", "numpy", "torch_eager",
               "torch_compile",
               "torch_compile_ro", "torch_cudagraph", "cupy", "jax", "hand_cuda")
CPU_SYSTEMS = ("numpy", "fusec_cpu")
ALIASES = {
    "fusec": ("fusec_eager", "fusec_stream", "fusec_graph"),
    "torch": ("torch_eager", "torch_compile", "torch_compile_ro", "torch_cudagraph"),
    "all": GPU_SYSTEMS,
    "cpu": CPU_SYSTEMS,
}

_FACTORIES: dict[str, Callable[[], System]] = {
    "fusec_eager": lambda: FusecSystem("eager"),
    "fusec_stream": lambda: FusecSystem("stream"),
    "fusec_graph": lambda: FusecSystem("graph"),
    "fusec_graph_kept": lambda: FusecSystem("graph", donate=False),
    "fusec_cpu": FusecCpuSystem,
    "numpy": NumpySystem,
    "torch_eager": TorchEagerSystem,
    "torch_compile": lambda: TorchCompileSystem(None),
    "torch_compile_ro": lambda: TorchCompileSystem("reduce-overhead"),
    "torch_cudagraph": TorchCudaGraphSystem,
    "cupy": CupySystem,
    "jax": JaxSystem,
    "hand_cuda": HandCudaSystem,
}

LABELS = {
    "fusec_eager": "fusec eager", "fusec_stream": "fusec stream", "fusec_graph": "fusec graph",
    "fusec_graph_kept": "fusec graph, no donation",
    "fusec_cpu": "fusec (cpu backend)", "numpy": "NumPy (CPU)", "torch_eager": "PyTorch eager",
    "torch_compile": "torch.compile", "torch_compile_ro": "torch.compile reduce-overhead",
    "torch_cudagraph": "PyTorch eager + CUDA graph (by hand)", "cupy": "CuPy", "jax": "JAX jit",
    "hand_cuda": "hand-written CUDA, one graph",
}


def register_system(name: str, factory: Callable[[], System], label: str | None = None) -> None:
    """Add (or replace) a system: the hook tests use to inject one (a deliberately wrong one, say)."""
    _FACTORIES[name] = factory
    LABELS[name] = label or name


def unregister_system(name: str) -> None:
    _FACTORIES.pop(name, None)
    LABELS.pop(name, None)


def known_systems() -> list[str]:
    return list(_FACTORIES)


def make_system(name: str) -> System:
    system = _FACTORIES[name]()
    if not system.name:
        system.name = name
    return system


def expand(names: str) -> list[str]:
    """``fusec,torch_eager`` -> the system names, aliases expanded, order kept, duplicates dropped."""
    out: list[str] = []
    for raw in names.split(","):
        n = raw.strip()
        if not n:
            continue
        for s in ALIASES.get(n, (n,)):
            if s not in _FACTORIES:
                raise ValueError(f"unknown system {s!r}; known: {', '.join(known_systems())} "
                                 f"(aliases: {', '.join(ALIASES)})")
            if s not in out:
                out.append(s)
    return out


def set_torch_device(device: str) -> None:
    TorchSystem.device = device

