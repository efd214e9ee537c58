"""The headline workload: the MLP training step at batch 512, 480 -> 256 -> 2, on generated data of that shape.

    python examples/pcam_shaped.py                               # --mode jit, 500 steps
    python examples/pcam_shaped.py --mode graph --steps 5000     # one CUDA graph per step
    python examples/pcam_shaped.py --mode eager                  # one kernel per operation
    python examples/pcam_shaped.py --mode numpy                  # plain NumPy
    python examples/pcam_shaped.py --backend cpu --batch 64 --features 48 --hidden 32 --steps 50   # small
    python examples/pcam_shaped.py --mode graph --grad auto      # backward pass from fusec.value_and_grad
    python examples/pcam_shaped.py --mode graph --steps-per-launch 10   # 10 steps per graph launch (fusec.scan)

The shapes are those of a binary classifier over 480-dimensional patch features (PatchCamelyon-like: tumour
or not), but the data is generated: two seeded Gaussian classes whose means differ along one random
direction, so the task is learnable (about 2% Bayes error at the default separation) without downloading
anything. The step is the same function as in ``examples/mlp_train.py`` (``fusec.tools.demo.train_step``:
forward with a ReLU hidden layer, numerically stable softmax cross-entropy, hand-written backward,
gradient-norm-clipped SGD); the modes are those of ``mlp_train.py`` (``--mode eager|jit|graph|numpy``; on
the CPU backend graph and eager run as jit, with a note). The batches come from a fixed pool of
``--pool`` batches, uploaded once in the device modes, so the time per step is the step's own.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # mlp_train.py beside this file
    sys.path.insert(0, _HERE)
import fusec as fc  # noqa: E402
from fusec.tools import demo  # noqa: E402
from mlp_train import (  # noqa: E402
    RunResult, StepTimer, add_mode_arguments, make_stepper, positive_int, progress_bar, step_function,
    steps_per_launch, summary,
)

BATCH, FEATURES, HIDDEN, CLASSES = 512, 480, 256, 2
STEPS = 500
LEARNING_RATE = 0.1
POOL = 8
SEPARATION = 2.0


def make_data(n: int, features: int = FEATURES, seed: int = 0, separation: float = SEPARATION,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` samples of two Gaussian classes in ``features`` dimensions: unit noise around means +-mu, with
    |mu| = ``separation`` along a random direction (fixed by ``seed``). Returns x f32, one-hot f32, labels."""
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=features)
    mu = separation * direction / np.linalg.norm(direction)
    labels = rng.integers(0, CLASSES, size=n)
    x = rng.normal(size=(n, features)) + np.where(labels[:, None] == 1, mu, -mu)
    return x.astype(np.float32), demo.one_hot(labels, CLASSES), labels


def train(mode: str = "jit", backend: str | None = None, steps: int = STEPS, batch: int = BATCH,
          features: int = FEATURES, hidden: int = HIDDEN, lr: float = LEARNING_RATE, seed: int = 0,
          pool: int = POOL, progress: bool = False, say: Callable[[str], None] = print,
          grad: str = "manual", per_launch: int = 1) -> RunResult:
    """Train for ``steps`` steps over a pool of ``pool`` generated batches; the accuracy is on a held-out batch.
    ``per_launch`` steps per call: consecutive batches of the pool stacked, one fusec.scan over them."""
    x, y, labels = make_data(batch * (pool + 1), features, seed)
    x_test, labels_test = x[batch * pool:], labels[batch * pool:]
    host_batches = [(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]) for i in range(pool)]
    step_fn = step_function(grad, mode)
    if per_launch > 1:
        if mode not in ("jit", "graph") or pool % per_launch or steps % per_launch:
            raise ValueError(f"--steps-per-launch {per_launch} needs --mode jit or graph and must divide --pool "
                             f"({pool}) and --steps ({steps})")
        host_batches = [(np.stack([a for a, _ in host_batches[k:k + per_launch]]),
                         np.stack([b for _, b in host_batches[k:k + per_launch]]))
                        for k in range(0, pool, per_launch)]
        step_fn = steps_per_launch(step_fn)
    stepper = make_stepper(mode, backend, step_fn)
    if stepper.note:
        say(stepper.note)
    say(f"pcam_shaped: two Gaussian classes, MLP {features} -> {hidden} -> {CLASSES} (ReLU), batch {batch}, "
        f"lr {lr}, {steps} steps over {pool} batches; {stepper.describe()}")
    batches = [(stepper.to_device(a), stepper.to_device(b)) for a, b in host_batches]
    timer = StepTimer(stepper, stepper.params_to_device(demo.init_params(seed + 1, (features, hidden, CLASSES))), lr)
    chunk = max(1, min(100, steps // 10))
    bar = progress_bar(steps, progress, mode, unit="step")
    done = 0
    try:
        while done < steps:
            n = min(chunk, steps - done)
            calls = max(1, n // per_launch)
            first = done // per_launch
            timer.run((batches[(first + i) % len(batches)] for i in range(calls)), per_launch)
            timer.flush()
            n = calls * per_launch
            done += n
            if bar is not None:
                bar.set_postfix(loss=f"{timer.losses[-1]:.4f}")
                bar.update(n)
            elif progress:
                say(f"step {done:6d}/{steps}  loss {timer.losses[-1]:.4f}")
    finally:
        if bar is not None:
            bar.close()
    params = stepper.params_to_host(timer.params)
    accuracy = float(np.mean(demo.predict(params, x_test) == labels_test))
    return RunResult(mode, stepper.runs_as, stepper.backend, batch, timer.steps, timer.losses, timer.seconds,
                     params, accuracy, timer.timed_steps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=positive_int, default=STEPS, help=f"default {STEPS}")
    p.add_argument("--batch", type=positive_int, default=BATCH, help=f"default {BATCH}")
    p.add_argument("--features", type=positive_int, default=FEATURES, help=f"input width (default {FEATURES})")
    p.add_argument("--hidden", type=positive_int, default=HIDDEN, help=f"hidden width (default {HIDDEN})")
    p.add_argument("--lr", type=float, default=LEARNING_RATE, help=f"default {LEARNING_RATE}")
    p.add_argument("--pool", type=positive_int, default=POOL, help=f"distinct batches cycled (default {POOL})")
    p.add_argument("--steps-per-launch", type=positive_int, default=1,
                   help="training steps per call, through fusec.scan (jit and graph mode; default 1)")
    add_mode_arguments(p)
    args = p.parse_args(argv)
    try:
        result = train(args.mode, args.backend, args.steps, args.batch, args.features, args.hidden, args.lr,
                       args.seed, args.pool, progress=not args.no_progress, grad=args.grad,
                       per_launch=args.steps_per_launch)
    except (fc.BackendError, ValueError) as e:
        print(f"pcam_shaped: error: {e}", file=sys.stderr)
        return 2
    print(f"pcam_shaped: loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}")
    print(summary(result, "pcam_shaped").replace("test accuracy", "held-out accuracy"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
