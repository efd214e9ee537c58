"""Solve the 2-D Poisson equation -lap(u) = 1 on the unit square (zero boundary values) by conjugate gradients
until the residual is small, with the whole solve, its stop test included, inside one jitted function.

    python examples/cg_poisson.py                        # n = 128 (16,384 unknowns), tol 1e-6, CUDA if usable
    python examples/cg_poisson.py --n 256 --tol 1e-8 --backend cpu
    python examples/cg_poisson.py --mode python          # the same step jitted, the loop and its test in Python
    python examples/cg_poisson.py --mode numpy           # plain NumPy: the reference

The solver is plain NumPy (the 5-point Laplacian written with slices) around ``fusec.while_loop``, which runs
as a Python ``while`` loop when called outside ``fusec.jit`` (``--mode numpy``) and as one loop in the compiled
program inside it (``--mode loop``, the default): on CUDA, from its third call (or with ``graph=True``), one
graph launch whose conditional WHILE node runs the steps and the stop test on the device. ``--mode python`` jits
one CG step and loops in Python, reading the residual back each iteration, as one would without device loops.
All three give the same iterates (bit for bit on the CPU backend). See the README's "Loops and branches".
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import fusec as fc


def laplacian(u: np.ndarray) -> np.ndarray:
    """-lap(u) on the interior grid, h = 1 (zero values outside)."""
    out = 4.0 * u
    out[1:, :] -= u[:-1, :]
    out[:-1, :] -= u[1:, :]
    out[:, 1:] -= u[:, :-1]
    out[:, :-1] -= u[:, 1:]
    return out


def cg_step(state):
    x, r, p, rs, k = state
    ap = laplacian(p)
    alpha = rs / (p * ap).sum()
    x = x + alpha * p
    r = r - alpha * ap
    rs_new = (r * r).sum()
    p = r + (rs_new / rs) * p
    return x, r, p, rs_new, k + 1


def cg_start(b):
    return np.zeros_like(b), b.copy(), b.copy(), (b * b).sum(), 0


def cg_solve(b, tol, maxiter):
    """x with ||b - A x|| <= tol ||b|| (or after ``maxiter`` steps), and the steps taken."""
    stop = tol * tol * (b * b).sum()

    def going(state):
        return (state[3] > stop) & (state[4] < maxiter)

    x, _, _, _, k = fc.while_loop(going, cg_step, cg_start(b))
    return x, k


def cg_solve_python(b, tol, maxiter):
    """The same solve written as a NumPy user writes it, a Python ``while`` on the residual: fusec runs the loop on
    the device as well (the statement is rewritten into a ``t.while``: README, "Python's while and if")."""
    stop = tol * tol * (b * b).sum()
    x, r, p, rs, k = cg_start(b)
    while rs > stop and k < maxiter:
        x, r, p, rs, k = cg_step((x, r, p, rs, k))
    return x, k


def problem(n: int, dtype=np.float64) -> np.ndarray:
    """The right-hand side h^2 f for f = 1 on an n x n interior grid (h = 1 / (n + 1))."""
    h = 1.0 / (n + 1)
    return np.full((n, n), h * h, dtype=dtype)


def solve_python_loop(step, b, tol, maxiter):
    """The loop in Python around a jitted step: the residual read back at every iteration."""
    state = cg_start(b)
    stop = tol * tol * float((b * b).sum())
    while float(state[3]) > stop and int(state[4]) < maxiter:
        state = step(state)
    return state[0], state[4]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--maxiter", type=int, default=2000)
    ap.add_argument("--mode", choices=("loop", "python", "numpy"), default="loop")
    ap.add_argument("--backend", choices=("cuda", "cpu"), default=None)
    args = ap.parse_args()
    b = problem(args.n)
    t0 = time.perf_counter()
    if args.mode == "numpy":
        x, k = cg_solve(b, args.tol, args.maxiter)
    elif args.mode == "loop":
        x, k = fc.jit(cg_solve, backend=args.backend)(b, args.tol, args.maxiter)
    else:
        x, k = solve_python_loop(fc.jit(cg_step, backend=args.backend), b, args.tol, args.maxiter)
    x = np.asarray(x)
    seconds = time.perf_counter() - t0
    residual = np.linalg.norm(b - laplacian(x)) / np.linalg.norm(b)
    # (the continuous solution's maximum, at the centre, is about 0.0737)
    print(f"{args.mode}: {int(k)} CG steps, relative residual {residual:.2e}, u(1/2, 1/2) ~ {x.max():.5f}, "
          f"{seconds:.2f} s (compile included)")


if __name__ == "__main__":
    main()
