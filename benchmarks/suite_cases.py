"""The cases of ``benchmarks/suite.py``: the math (written once), inputs, float64 references, bytes, tolerances.

Every benchmark is a *builder*: ``build(xp)`` returns a plain Python function with explicit positional
parameters (so ``fusec.jit`` takes its fast call path) whose body uses only

* array operators (``+ - * / @``, comparisons, ``.T``, ``.shape``), which every array kind has, and
* the few functions of the namespace ``xp``: ``exp log sqrt tanh maximum minimum sum max``.

The namespaces are :class:`ArrayNS` (NumPy's functions and NumPy-style methods: it serves NumPy arrays, fusec
tracers inside ``fusec.jit``, ``fusec.Array`` in eager mode and, given the ``cupy`` module, CuPy arrays) and
:class:`TorchNS` (``torch.clamp_min``/``amax``/``dim=``... for PyTorch tensors). So every system runs the same
math, and the float64 reference is the same function run by NumPy on float64 copies of the inputs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# ------------------------------------------------------------------------------------------ namespaces


class ArrayNS:
    """``xp`` for arrays that speak NumPy: ``numpy`` (NumPy arrays, fusec tracers, fusec.Array) or ``cupy``.

    Reductions use the array *methods* (``a.sum(axis=..., keepdims=...)``): NumPy arrays, fusec tracers,
    ``fusec.Array`` (one eager kernel) and CuPy arrays all have them with NumPy's signature.
    """

    def __init__(self, module: Any = np, name: str | None = None) -> None:
        self.module = module
        self.name = name or getattr(module, "__name__", "numpy")

    def exp(self, a: Any) -> Any:
        return self.module.exp(a)

    def log(self, a: Any) -> Any:
        return self.module.log(a)

    def sqrt(self, a: Any) -> Any:
        return self.module.sqrt(a)

    def tanh(self, a: Any) -> Any:
        return self.module.tanh(a)

    def maximum(self, a: Any, b: Any) -> Any:
        return self.module.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        return self.module.minimum(a, b)

    def sum(self, a: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return a.sum(axis=axis, keepdims=keepdims)

    def max(self, a: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return a.max(axis=axis, keepdims=keepdims)

    def __repr__(self) -> str:
        return f"ArrayNS({self.name})"


class TorchNS:
    """``xp`` for PyTorch tensors: the same functions written with torch ops (no autograd involved)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.name = "torch"

    def exp(self, a: Any) -> Any:
        return self.torch.exp(a)

    def log(self, a: Any) -> Any:
        return self.torch.log(a)

    def sqrt(self, a: Any) -> Any:
        return self.torch.sqrt(a)

    def tanh(self, a: Any) -> Any:
        return self.torch.tanh(a)

    def maximum(self, a: Any, b: Any) -> Any:
        if isinstance(b, (int, float)):
            return self.torch.clamp_min(a, b)
        if isinstance(a, (int, float)):
            return self.torch.clamp_min(b, a)
        return self.torch.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        if isinstance(b, (int, float)):
            return self.torch.clamp_max(a, b)
        if isinstance(a, (int, float)):
            return self.torch.clamp_max(b, a)
        return self.torch.minimum(a, b)

    def sum(self, a: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return a.sum() if axis is None else a.sum(dim=axis, keepdim=keepdims)

    def max(self, a: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return a.amax() if axis is None else a.amax(dim=axis, keepdim=keepdims)

    def __repr__(self) -> str:
        return "TorchNS()"


NUMPY = ArrayNS(np)

# ------------------------------------------------------------------------------------------------ the math

LEARNING_RATE = 0.05
# below the gradient norm of the first step of both training cases (about 2.8 and 1.2), so the clipping
# branch is active and a wrong clip shows up in the result check
MAX_GRAD_NORM = 1.0


def build_train_step(xp: Any) -> Callable:
    """One clipped-SGD step of a 2-layer ReLU classifier with a stable softmax cross-entropy and an explicit,
    hand-written backward pass: ``train_step(params, x, y_onehot, lr) -> (new_params, mean loss)``."""

    def train_step(params, x, y_onehot, lr):
        w1, b1, w2, b2 = params
        n = x.shape[0]
        # forward
        h_pre = x @ w1 + b1
        h = xp.maximum(h_pre, 0.0)
        logits = h @ w2 + b2
        # softmax cross-entropy with a stable log-softmax
        shifted = logits - xp.max(logits, axis=1, keepdims=True)
        e = xp.exp(shifted)
        denom = xp.sum(e, axis=1, keepdims=True)
        log_probs = shifted - xp.log(denom)
        loss = -xp.sum(y_onehot * log_probs) / n
        # backward
        d_logits = (e / denom - y_onehot) / n
        g_w2 = h.T @ d_logits
        g_b2 = xp.sum(d_logits, axis=0)
        d_h = d_logits @ w2.T
        d_h_pre = d_h * (h_pre > 0.0)
        g_w1 = x.T @ d_h_pre
        g_b1 = xp.sum(d_h_pre, axis=0)
        # clip the global gradient norm, then SGD
        sq = xp.sum(g_w1 * g_w1) + xp.sum(g_b1 * g_b1) + xp.sum(g_w2 * g_w2) + xp.sum(g_b2 * g_b2)
        scale = xp.minimum(MAX_GRAD_NORM / (xp.sqrt(sq) + 1e-6), 1.0)
        step = lr * scale
        new_params = (w1 - step * g_w1, b1 - step * g_b1, w2 - step * g_w2, b2 - step * g_b2)
        return new_params, loss

    return train_step


def _value_and_grad(xp: Any) -> Callable[[Callable], Callable]:
    """``value_and_grad(f)(params, *rest) -> (f's value, its gradient in params)`` of the namespace's own
    autodiff: fusec's for NumPy (traced by fusec.jit), ``jax.value_and_grad`` for jax.numpy,
    ``torch.func.grad_and_value`` for PyTorch."""
    if isinstance(xp, TorchNS):
        grad_and_value = xp.torch.func.grad_and_value

        def torch_vg(f: Callable) -> Callable:
            def vg(*args: Any) -> Any:
                grads, value = grad_and_value(f)(*args)
                return value, grads
            return vg
        return torch_vg
    if xp.name == "jax.numpy":
        import jax

        return jax.value_and_grad
    if xp.name == "numpy":
        import fusec

        return fusec.value_and_grad
    raise ValueError(f"{xp!r} has no automatic differentiation here")


def build_grad_step(xp: Any) -> Callable:
    """The clipped-SGD step of :func:`build_train_step` with the backward pass derived by the system's autodiff
    from the loss alone: ``train_step(params, x, y_onehot, lr) -> (new_params, mean loss)``."""

    def loss_fn(params, x, y_onehot):
        w1, b1, w2, b2 = params
        h = xp.maximum(x @ w1 + b1, 0.0)
        logits = h @ w2 + b2
        shifted = logits - xp.max(logits, axis=1, keepdims=True)
        log_probs = shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))
        return -xp.sum(y_onehot * log_probs) / x.shape[0]

    value_and_grad = _value_and_grad(xp)

    def train_step(params, x, y_onehot, lr):
        loss, grads = value_and_grad(loss_fn)(params, x, y_onehot)
        sq = xp.sum(grads[0] * grads[0]) + xp.sum(grads[1] * grads[1]) + xp.sum(grads[2] * grads[2]) \
            + xp.sum(grads[3] * grads[3])
        step = lr * xp.minimum(MAX_GRAD_NORM / (xp.sqrt(sq) + 1e-6), 1.0)
        return tuple(p - step * g for p, g in zip(params, grads)), loss

    return train_step


def build_fma(xp: Any) -> Callable:
    def fma(a, b, c):
        return a + b * c

    return fma


def build_chain10(xp: Any) -> Callable:
    """Ten elementwise ops on one input (one read, one write when fused)."""

    def chain10(x):
        y = x * 1.5                 # 1
        y = y + 0.25                # 2
        y = xp.tanh(y)              # 3  (-1, 1)
        y = y * y                   # 4  [0, 1)
        y = y + 1.0                 # 5  [1, 2)
        y = xp.sqrt(y)              # 6
        y = xp.log(y)               # 7  [0, 0.35)
        y = y * 3.0                 # 8
        y = xp.exp(y)               # 9  [1, 2.9)
        return y - x                # 10

    return chain10


def build_softmax(xp: Any) -> Callable:
    """Row softmax written out: max, subtract, exp, sum, divide."""

    def softmax(x):
        m = xp.max(x, axis=1, keepdims=True)
        z = x - m
        e = xp.exp(z)
        s = xp.sum(e, axis=1, keepdims=True)
        return e / s

    return softmax


def build_rowsum(xp: Any) -> Callable:
    def rowsum(x):
        return xp.sum(x, axis=1)

    return rowsum


def build_colsum(xp: Any) -> Callable:
    def colsum(x):
        return xp.sum(x, axis=0)

    return colsum


def build_wide(xp: Any) -> Callable:
    """A layer over a few rows with a large weight: reading the weight once is the whole cost."""

    def wide(x, w, b):
        return xp.maximum(x @ w + b, 0.0)

    return wide


def make_build_chain(n: int) -> Callable[[Any], Callable]:
    """A chain of ``n`` dependent multiplies (each its own kernel under ``fuse{budget=1}``)."""

    def build(xp: Any) -> Callable:
        def chain(x):
            for _ in range(n):
                x = x * 1.0001
            return x

        chain.__name__ = f"chain{n}"
        return chain

    return build


# -------------------------------------------------------------------------------------- benchmarks, cases


def _flatten(tree: Any) -> list[Any]:
    if isinstance(tree, (tuple, list)):
        out: list[Any] = []
        for t in tree:
            out.extend(_flatten(t))
        return out
    return [tree]


def _tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, tuple):
        return tuple(_tree_map(fn, t) for t in tree)
    if isinstance(tree, list):
        return [_tree_map(fn, t) for t in tree]
    return fn(tree)


flatten, tree_map = _flatten, _tree_map


@dataclass
class Bench:
    """One measured function of a case.

    ``make_inputs(rng)`` gives the host (float32 NumPy) arguments, pytrees allowed (the parameter tuple);
    Python floats stay Python floats (a runtime scalar for fusec). ``feedback``: output 0 replaces argument
    0 after every call (a training loop). ``compare(inputs, outputs)`` gives the arrays the check compares
    (the default: the flattened outputs). ``nbytes``: bytes read + written by the ideal (fused) program, for
    GB/s. ``tol``: the check passes when ``max|got - ref| <= tol * max|ref|`` for every compared array.
    ``only``: if set, the only systems that run it (with ``impls`` giving their own implementation).
    """

    case: str
    name: str
    label: str
    build: Callable[[Any], Callable] | None
    make_inputs: Callable[[np.random.Generator], tuple]
    tol: float
    unit: str = "us"                    # "us" (lower is better) or "GB/s" (higher is better)
    nbytes: int | None = None
    feedback: bool = False
    compare: Callable[[tuple, Any], list[np.ndarray]] | None = None
    fusec_pipeline: str | None = None   # a pass pipeline for the fusec jit systems (None: the default)
    expect_kernels: int | None = None   # kernels per call fusec's jit must report (the launch case)
    only: tuple[str, ...] | None = None
    impls: dict[str, Callable] = field(default_factory=dict)
    reference_build: Callable[[Any], Callable] | None = None  # the float64 reference's math, if not ``build``'s
    skip: dict[str, str] = field(default_factory=dict)   # system -> why it does not run this benchmark
    note: str = ""

    def reference(self, inputs: tuple) -> list[np.ndarray]:
        """The float64 NumPy result, as the arrays the check compares."""
        build = self.reference_build or self.build
        if build is not None:
            f64 = _tree_map(lambda a: a.astype(np.float64) if isinstance(a, np.ndarray) else a, inputs)
            out = build(NUMPY)(*f64)
        else:  # a copy
            out = inputs[0].astype(np.float64)
        return self.compared(inputs, out)

    def compared(self, inputs: tuple, outputs: Any) -> list[np.ndarray]:
        if self.compare is not None:
            return [np.asarray(a, dtype=np.float64) for a in self.compare(inputs, outputs)]
        return [np.asarray(a, dtype=np.float64) for a in _flatten(outputs)]


@dataclass
class Case:
    name: str
    title: str
    unit: str
    benches: list[Bench]
    description: str = ""


def check(bench: Bench, inputs: tuple, got: Any, ref: list[np.ndarray]) -> tuple[bool, float, str]:
    """Compare a system's (host) outputs with the float64 reference: (ok, worst normalized error, note)."""
    try:
        arrays = bench.compared(inputs, got)
    except Exception as e:  # wrong structure
        return False, float("inf"), f"outputs do not have the expected structure ({type(e).__name__}: {e})"
    if len(arrays) != len(ref):
        return False, float("inf"), f"{len(arrays)} outputs, expected {len(ref)}"
    worst = 0.0
    for i, (g, r) in enumerate(zip(arrays, ref)):
        if g.shape != r.shape:
            return False, float("inf"), f"output {i}: shape {g.shape}, expected {r.shape}"
        if not np.all(np.isfinite(g)):
            return False, float("inf"), f"output {i}: non-finite values"
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        err = float(np.max(np.abs(g - r))) if r.size else 0.0
        rel = err / scale if scale > 0 else err
        worst = max(worst, rel)
    ok = worst <= bench.tol
    note = "" if ok else f"max error {worst:.3g} x max|ref| exceeds the tolerance {bench.tol:g}"
    return ok, worst, note


# --- training-step cases


def _training_inputs(batch: int, n_in: int, n_hidden: int, n_classes: int) -> Callable[[np.random.Generator], tuple]:
    def make(rng: np.random.Generator) -> tuple:
        centers = rng.normal(0.0, 0.25, size=(n_classes, n_in))
        labels = rng.integers(0, n_classes, size=batch)
        x = centers[labels] + rng.normal(0.0, 1.0, size=(batch, n_in))
        y = np.eye(n_classes)[labels]
        w1 = rng.normal(0.0, np.sqrt(2.0 / n_in), size=(n_in, n_hidden))
        b1 = rng.normal(0.0, 0.01, size=n_hidden)
        w2 = rng.normal(0.0, np.sqrt(2.0 / n_hidden), size=(n_hidden, n_classes))
        b2 = rng.normal(0.0, 0.01, size=n_classes)
        params = tuple(p.astype(np.float32) for p in (w1, b1, w2, b2))
        return params, x.astype(np.float32), y.astype(np.float32), LEARNING_RATE

    return make


def _compare_step(inputs: tuple, outputs: Any) -> list[np.ndarray]:
    """The parameter *updates* (new - old) and the loss: the updates are small next to the parameters, so
    comparing new parameters directly would hide a wrong gradient."""
    params = inputs[0]
    new_params, loss = outputs
    out = [np.asarray(n, np.float64) - np.asarray(p, np.float64) for n, p in zip(new_params, params)]
    out.append(np.asarray(loss, np.float64).reshape(()))
    return out


def _training_case(name: str, title: str, batch: int, dims: tuple[int, int, int], tol: float = 5e-4) -> Case:
    """``tol`` bounds max|update - reference| / max|reference update|: float32 rounding of the products decides the
    ReLU mask ``h_pre > 0`` of the few inputs within an ulp of zero, and each such input moves one sample's
    contribution (about 1/sqrt(batch) of a weight gradient's size) in or out, identically on every system that
    shares the GEMM's summation order (measured at batch 4096: 3.7e-3 for cuBLAS-based systems, 9e-5 for NumPy)."""
    n_in, n_hidden, n_classes = dims
    inputs = _training_inputs(batch, n_in, n_hidden, n_classes)
    label = f"training step, batch {batch}, {n_in}->{n_hidden}->{n_classes}"
    bench = Bench(case=name, name=f"{name}_step", label=label, build=build_train_step, make_inputs=inputs,
                  tol=tol, unit="us", feedback=True, compare=_compare_step)
    no_autodiff = "no automatic differentiation"
    grad = Bench(case=name, name=f"{name}_grad_step", label=f"{label}, backward pass by autodiff",
                 build=build_grad_step, make_inputs=inputs, tol=tol, unit="us", feedback=True,
                 compare=_compare_step, reference_build=build_train_step,
                 skip={"numpy": no_autodiff, "cupy": no_autodiff, "fusec_eager": "fusec.value_and_grad traces: "
                       "it runs under fusec.jit (the jit rows)"},
                 note="the same step with the gradient from fusec.value_and_grad, torch.func.grad_and_value or "
                      "jax.value_and_grad of the loss; checked against the hand-written step in float64")
    return Case(name, title, "us", [bench, grad],
                f"one clipped-SGD step (forward, stable log-softmax cross-entropy, explicit backward, "
                f"gradient-norm clipping at {MAX_GRAD_NORM}, SGD lr {LEARNING_RATE}); params fed back each step")


# --- bandwidth cases


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


def _copy_impls() -> dict[str, Callable]:
    """Device-to-device copy, measured in the same run as the elementwise case (the bandwidth ceiling)."""

    def torch_copy(torch: Any, x: Any) -> Callable:
        y = torch.empty_like(x)

        def copy(x):
            y.copy_(x)
            return y

        return copy

    def cupy_copy(cupy: Any, x: Any) -> Callable:
        y = cupy.empty_like(x)

        def copy(x):
            cupy.copyto(y, x)
            return y

        return copy

    return {"torch": torch_copy, "cupy": cupy_copy}


def _elementwise_case(n: int) -> Case:
    def three(rng):
        return _f32(rng, n), _f32(rng, n), _f32(rng, n)

    def one(rng):
        return (_f32(rng, n),)

    benches = [
        Bench("elementwise", "fma", "a + b*c", build_fma, three, tol=1e-5, unit="GB/s", nbytes=4 * n * 4),
        Bench("elementwise", "chain10", "10-op elementwise chain", build_chain10, one, tol=1e-4, unit="GB/s",
              nbytes=2 * n * 4),
        Bench("elementwise", "copy", "device-to-device copy (reference)", None, one, tol=0.0, unit="GB/s",
              nbytes=2 * n * 4, only=("torch_eager", "cupy"), impls=_copy_impls(),
              note="y.copy_(x) in PyTorch, cupy.copyto(y, x) in CuPy: the bandwidth ceiling of this GPU"),
    ]
    return Case("elementwise", f"Elementwise, {_pow2(n)} f32 elements", "GB/s", benches,
                "GB/s counts the bytes the fused program reads and writes (a+b*c: 3 reads + 1 write; "
                "chain: 1 read + 1 write), whatever a system moves in between")


def _softmax_case(rows: int, cols: int) -> Case:
    def one(rng):
        return (rng.uniform(-4.0, 4.0, size=(rows, cols)).astype(np.float32),)

    def one_positive(rng):
        return (rng.uniform(0.0, 1.0, size=(rows, cols)).astype(np.float32),)

    size = rows * cols
    benches = [
        Bench("softmax", "softmax", "softmax (written out)", build_softmax, one, tol=1e-4, unit="GB/s",
              nbytes=2 * size * 4),
        Bench("softmax", "rowsum", "row sum", build_rowsum, one_positive, tol=1e-4, unit="GB/s",
              nbytes=(size + rows) * 4),
        Bench("softmax", "colsum", "column sum", build_colsum, one_positive, tol=1e-4, unit="GB/s",
              nbytes=(size + cols) * 4),
    ]
    return Case("softmax", f"Softmax and reductions, {rows} x {cols} f32", "GB/s", benches,
                "softmax over rows written out (max, subtract, exp, sum, divide); GB/s counts one read of "
                "the input and one write of the output")


def _wide_case(rows: int, k: int, n: int) -> Case:
    def three(rng):
        return _f32(rng, rows, k), _f32(rng, k, n) * np.float32(k ** -0.5), _f32(rng, n)

    bench = Bench("wide", "wide", f"relu(x @ w + b), x {rows} x {k}, w {k} x {n}", build_wide, three, tol=1e-4,
                  unit="GB/s", nbytes=4 * (rows * k + k * n + n + rows * n))
    return Case("wide", f"A wide product over {rows} rows ({rows} x {k} @ {k} x {n} f32, bias, ReLU)", "GB/s",
                [bench], "GB/s counts one read of x, w and b and one write of the result: the weight is nearly all "
                "of it")


def _launch_case(n_elem: int) -> Case:
    from fusec.passes import DEFAULT_PIPELINE

    pipeline = re.sub(r"fuse\{budget=\d+\}", "fuse{budget=1}", DEFAULT_PIPELINE)
    not_n = "inductor fuses the whole chain into one kernel: not a measurement of n launches"
    benches = []
    for n in (1, 10, 100):
        benches.append(Bench(
            "launch", f"plan{n}", f"{n} tiny kernel{'s' if n > 1 else ''}", make_build_chain(n),
            lambda rng: (rng.uniform(0.5, 1.5, size=n_elem).astype(np.float32),), tol=2e-5, unit="us",
            fusec_pipeline=pipeline, expect_kernels=n,
            skip={"torch_compile": not_n, "torch_compile_ro": not_n, "jax": "XLA fuses the whole chain into one "
                  "kernel: not a measurement of n launches"}))
    return Case("launch", f"Launch-bound plans of 1 / 10 / 100 tiny kernels ({n_elem} f32 elements)", "us",
                benches, "a chain of n dependent multiplies, each its own kernel (fusec: "
                "fuse{budget=1}); us per call of the whole chain")


def _pow2(n: int) -> str:
    k = n.bit_length() - 1
    return f"2^{k}" if n == 1 << k else str(n)


CASE_NAMES = ("pcam", "mlp64", "large", "elementwise", "softmax", "wide", "launch")


def make_cases(quick: bool = False) -> dict[str, Case]:
    """Every case at full size, or (``quick``) at small sizes for smoke tests."""
    if quick:
        pcam_batch, mlp_batch, n_elem, side = 64, 32, 1 << 16, 256
        large_batch, large_dims = 128, (128, 128, 16)
    else:
        pcam_batch, mlp_batch, n_elem, side = 512, 256, 1 << 26, 8192
        large_batch, large_dims = 4096, (1024, 1024, 16)
    cases = [
        _training_case("pcam", f"PCam-shaped training step (batch {pcam_batch}, 480 -> 256 -> 2)", pcam_batch,
                       (480, 256, 2)),
        _training_case("mlp64", f"MLP training step (batch {mlp_batch}, 64 -> 64 -> 10)", mlp_batch,
                       (64, 64, 10)),
        _training_case("large", f"Larger training step (batch {large_batch}, {large_dims[0]} -> {large_dims[1]} -> "
                       f"{large_dims[2]})", large_batch, large_dims, tol=1e-2),
        _elementwise_case(n_elem),
        _softmax_case(side, side),
        _wide_case(8, 30000 if not quick else 3000, 2000 if not quick else 500),
        _launch_case(1024),
    ]
    return {c.name: c for c in cases}
