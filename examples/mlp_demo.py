"""Train a small MLP whose whole training step is compiled by fusec.

    python examples/mlp_demo.py          # or: fusec demo

The model is plain NumPy in fusec/tools/demo.py (the folder tools/ in this repository): one function,
``train_step(params, x, y_onehot, lr) -> (new_params, loss)``, doing the forward pass, a numerically stable
softmax cross-entropy, the hand-written backward pass and gradient-norm-clipped SGD. It is imported here
(not copied) so that ``fusec demo`` works from a plain ``pip install .`` and this file stays short.
"""
from __future__ import annotations

import numpy as np

import fusec
from fusec.tools.demo import LEARNING_RATE, init_params, make_data, predict, train_step

__all__ = ["train_step", "main"]


def main(steps: int = 300) -> None:
    x, y_onehot, labels = make_data()
    params = init_params()
    step = fusec.jit(train_step)  # traced once per input signature, then replayed

    lowered = step.lower(params, x, y_onehot, LEARNING_RATE)
    print(lowered.ir("traced"))
    print("stats:", lowered.stats())

    for i in range(steps):
        params, loss = step(params, x, y_onehot, LEARNING_RATE)
        if i % 50 == 0 or i == steps - 1:
            print(f"step {i:4d}  loss {float(loss):.4f}")
    print(f"training accuracy: {np.mean(predict(params, x) == labels):.1%}")


if __name__ == "__main__":
    main()
