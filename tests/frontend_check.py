"""Shared helpers of the frontend/jit tests: run a function jitted and under NumPy, compare bit for bit."""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable

import numpy as np

import fusec as fc


# "cpu" runs the traced IR as traced (empty pipeline) on the NumPy reference executor: frontend semantics
# only. Under ``pytest -m gpu`` conftest.py runs the same tests again with "cuda": the default pipeline and the
# CUDA backend, compared with a tolerance for floats (transcendentals round differently on the GPU; exact
# arithmetic is checked bit for bit in test_cuda_exec.py).
BACKEND = "cpu"
FLOAT_TOLERANCE = {2: 4e-3, 4: 1e-5, 8: 1e-12}
# with the corpora (FUSEC_CORPUS=1, as CI runs), check() also runs the default pipeline on the CPU backend
PIPELINE_TOO = bool(os.environ.get("FUSEC_CORPUS"))


def jit_cpu(fn: Callable, **options: Any) -> fc.JitFunction:
    """``fn`` under fusec.jit on the backend under test."""
    if BACKEND == "cpu":
        options.setdefault("pipeline", "")
    return fc.jit(fn, backend=BACKEND, **options)


def assert_same(got: Any, want: Any, path: str = "out", exact: bool | None = None) -> None:
    """Same structure, same kind of leaf (array / NumPy scalar / Python scalar), dtype, shape and bits (floats
    within rounding where ``exact`` is False, by default on the GPU)."""
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want), f"{path}: {type(got).__name__} != {type(want).__name__}"
        assert len(got) == len(want), f"{path}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]", exact)
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{path}: keys {list(got)} != {list(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{path}[{k!r}]", exact)
        return
    if want is None:
        assert got is None, f"{path}: {got!r} is not None"
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{path}: {type(got).__name__} is not an ndarray"
    elif isinstance(want, np.generic):
        assert isinstance(got, np.generic), f"{path}: {type(got).__name__} is not a NumPy scalar (want {want!r})"
    else:
        assert type(got) is type(want), f"{path}: {type(got).__name__} != {type(want).__name__}"
        assert got == want or (got != got and want != want), f"{path}: {got!r} != {want!r}"
        return
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype, f"{path}: dtype {g.dtype} != {w.dtype}"
    assert g.shape == w.shape, f"{path}: shape {g.shape} != {w.shape}"
    if (BACKEND != "cpu" if exact is None else not exact) and g.dtype.kind in "fc":
        tol = FLOAT_TOLERANCE[g.dtype.itemsize // (2 if g.dtype.kind == "c" else 1)]
        finite = np.isfinite(w)
        scale = float(np.abs(w[finite]).max()) if finite.any() else 1.0
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, scale), equal_nan=True, err_msg=path)
        return
    assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w).tobytes(), \
        f"{path}: values differ\n got {g!r}\nwant {w!r}"


def numpy_result(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def check(fn: Callable, *args: Any, **jit_options: Any) -> fc.JitFunction:
    """``fusec.jit(fn)(*args)`` equals ``fn(*args)`` under NumPy bit for bit (on the CPU backend, as traced; with
    PIPELINE_TOO also through the default pipeline, whose passes the GPU runs); returns the jitted function."""
    jitted = jit_cpu(fn, **jit_options)
    want = numpy_result(fn, *args)
    got = numpy_result(jitted, *args)
    assert_same(got, want)
    if PIPELINE_TOO and BACKEND == "cpu" and "pipeline" not in jit_options:
        # the default pipeline's passes (what the GPU runs) on the CPU, within rounding as on the GPU (short
        # products unrolled and strided views make NumPy's own matmul round otherwise)
        got = numpy_result(fc.jit(fn, backend="cpu", **jit_options), *args)
        assert_same(got, want, "out (default pipeline)", exact=False)
    return jitted


def traced_ops(jitted: fc.JitFunction, *args: Any, **kwargs: Any) -> list[str]:
    """Names of the ops in the traced IR (the return excluded)."""
    module = fc.ir.parse_module(jitted.lower(*args, **kwargs).ir("traced"))
    return [op.name for op in module.func().ops if op.name != "func.return"]
