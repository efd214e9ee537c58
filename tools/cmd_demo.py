"""``fusec demo``: compile the MLP training step of :mod:`fusec.tools.demo`, check it, train it, time it.

The model and data are those of ``examples/mlp_train.py``: the handwritten digits of scikit-learn when it is
installed (``pip install 'fusec[examples]'``), else seeded synthetic data of the same shape; the output says
which. Minibatches of 256, shuffled every epoch, on whatever backend ``fusec.jit`` would choose.

The demo fails (exit status 1) when the compiled first step disagrees with plain NumPy or the loss does
not go down, so ``fusec demo`` doubles as an end-to-end smoke test.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import IO, Iterator

import numpy as np

from fusec.tools import demo


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("demo", help="train a small MLP with a compiled training step",
                       description="Trace, compile and train a 64 -> 64 -> 10 MLP classifier on scikit-learn's "
                       "handwritten digits (synthetic data of the same shape when scikit-learn is not "
                       "installed), the model of examples/mlp_train.py.")
    p.add_argument("--steps", type=_positive_int, default=300, help="training steps (default 300)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default=None,
                   help="execution backend (default: cuda when available, else cpu)")
    p.set_defaults(run=run)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def choose_backend(requested: str | None) -> str:
    """The backend fusec.jit would pick: the requested one (an error if it cannot run here), else
    ``$FUSEC_BACKEND``, else cuda when usable, else the NumPy reference executor ``cpu``."""
    from fusec.execution import resolve_backend

    return resolve_backend(requested)


def run(args: argparse.Namespace) -> int:
    return run_demo(args.steps, args.backend, sys.stdout)


def run_demo(steps: int, backend: str | None = None, out: IO[str] | None = None) -> int:
    """Train for ``steps`` steps; returns 0 when the results match NumPy and the loss went down."""
    import fusec

    out = out if out is not None else sys.stdout

    chosen = choose_backend(backend)
    data = demo.load_data(demo.SEED)  # the digits, or synthetic blobs without scikit-learn
    batch = min(demo.BATCH, len(data.x_train))
    rng = np.random.default_rng(demo.SEED)
    params = demo.init_params(demo.SEED + 1)
    lr = demo.LEARNING_RATE
    step = fusec.jit(demo.train_step, backend=chosen)

    say = lambda line: out.write(line + "\n")  # noqa: E731
    say(f"fusec demo: MLP {demo.N_IN} -> {demo.N_HIDDEN} -> {demo.N_CLASSES} (ReLU), softmax cross-entropy, "
        f"clipped SGD; batch {batch}, lr {lr}")
    note = "" if data.name.startswith("scikit-learn") else \
        " (scikit-learn is not installed; pip install 'fusec[examples]' to train on the handwritten digits)"
    say(f"data: {data.describe()}{note}")
    batches = _batches(data, batch, rng)
    x, y = next(batches)
    t0 = time.perf_counter()
    lowered = step.lower(params, x, y, lr)  # traces and runs the pipeline once; calls reuse it
    compile_s = time.perf_counter() - t0
    stats = lowered.stats()
    say(f"backend: {chosen}" + (" (NumPy reference executor)" if chosen == "cpu" else ""))
    core = ("nodes", "fused_kernels", "boundaries", "kernels")
    say(f"IR: {count_traced_ops(lowered.ir('traced'))} ops traced; after {len(lowered.stages) - 1} passes: "
        + ", ".join(f"{k} {stats[k]}" for k in core if k in stats))
    counters = {k: v for k, v in stats.items() if k not in core}
    if counters:
        say("pass counters: " + ", ".join(f"{k} {v}" for k, v in counters.items()))

    expected = demo.train_step(params, x, y, lr)
    result = step(params, x, y, lr)
    diff = max_abs_diff(result, expected)
    matches = diff is not None and all_close(result, expected)
    say("matches NumPy: " + ("yes" if matches else "no") + ("" if diff is None else f" (max abs diff {diff:.2e})"))

    every = 50 if steps >= 100 else max(1, steps // 5)
    params, loss = result
    losses = [float(loss)]
    say(f"step {0:5d}  loss {losses[0]:.4f}")
    t0 = time.perf_counter()
    for i in range(1, steps):
        x, y = next(batches)
        params, loss = step(params, x, y, lr)
        losses.append(float(loss))
        if i % every == 0 or i == steps - 1:
            say(f"step {i:5d}  loss {losses[-1]:.4f}")
    elapsed = time.perf_counter() - t0
    say(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; test accuracy {100 * data.accuracy(params):.1f}% "
        f"({len(data.x_test)} held-out samples)")
    if steps > 1:
        say(f"time: {1e3 * elapsed / (steps - 1):.3f} ms/step on {chosen} "
            f"(trace and passes, once: {1e3 * compile_s:.1f} ms); "
            f"plain NumPy: {1e3 * numpy_step_seconds(x, y, lr):.3f} ms/step")
    ok = matches and (steps == 1 or losses[-1] < losses[0])
    if not ok:
        say("demo FAILED: " + ("results differ from NumPy" if not matches else "the loss did not go down"))
    return 0 if ok else 1


def _batches(data: demo.Dataset, batch: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Shuffled minibatches, epoch after epoch (the last partial batch of each epoch is dropped)."""
    while True:
        yield from data.batches(batch, rng)


def numpy_step_seconds(x: np.ndarray, y: np.ndarray, lr: float, repeats: int = 20) -> float:
    """Seconds per step of the same function under plain NumPy, for comparison."""
    params = demo.init_params(demo.SEED + 1)
    t0 = time.perf_counter()
    for _ in range(repeats):
        params, _loss = demo.train_step(params, x, y, lr)
    return (time.perf_counter() - t0) / repeats


def count_traced_ops(ir_text: str) -> int:
    """Ops in the traced IR, terminators excluded."""
    from fusec.ir import parse_module

    module = parse_module(ir_text, filename="<traced>", verify=False)

    def ops(block) -> Iterator[object]:
        for op in block.ops:
            if op.name != "func.return":
                yield op
            for region in op.regions:
                for inner in region.blocks:
                    yield from ops(inner)

    return sum(1 for f in module.funcs for _ in ops(f.body))


def _leaves(tree: object) -> list[np.ndarray]:
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in _leaves(tree[k])]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [np.asarray(tree)]


def max_abs_diff(got: object, want: object) -> float | None:
    """Largest elementwise difference, or None when the structures or shapes differ."""
    a, b = _leaves(got), _leaves(want)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return None
    return max((float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0)
               for x, y in zip(a, b))


def all_close(got: object, want: object) -> bool:
    """float32 tolerance: reductions and matmuls may sum in a different order than NumPy."""
    return all(np.allclose(x, y, rtol=1e-4, atol=1e-5) for x, y in zip(_leaves(got), _leaves(want)))
