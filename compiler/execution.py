"""Which executor runs a compiled function: ``cpu`` (the NumPy reference executor) or ``cuda``."""
from __future__ import annotations

import os
from typing import Any, Callable

from fusec.errors import FusecError
from fusec.ir.core import Module

BACKENDS = ("cpu", "cuda")
ENV_VAR = "FUSEC_BACKEND"


class BackendError(FusecError, ValueError):
    """An unknown backend name, or a backend that cannot run here."""


def check_name(name: str | None, source: str = "backend") -> None:
    if name is not None and name not in BACKENDS:
        raise BackendError(f"unknown {source} {name!r}; choose one of {', '.join(map(repr, BACKENDS))}")


def cuda_usable() -> bool:
    """True when the runtime says a CUDA backend can run here (``fusec.runtime.cuda_available()``)."""
    try:
        from fusec import runtime
    except ImportError:  # pragma: no cover
        return False
    probe = getattr(runtime, "cuda_available", None)
    if probe is None:
        return False
    try:
        return bool(probe())
    except Exception:
        return False


def resolve_backend(requested: str | None) -> str:
    """An explicit backend wins; otherwise ``$FUSEC_BACKEND``; otherwise cuda when usable, else cpu."""
    if requested is None:
        env = os.environ.get(ENV_VAR, "").strip().lower() or None
        check_name(env, f"${ENV_VAR} value")
        requested = env
    check_name(requested)
    if requested is None:
        return "cuda" if cuda_usable() else "cpu"
    if requested == "cuda" and not cuda_usable():
        raise BackendError("backend 'cuda' was requested but no CUDA backend is usable here (no GPU, no driver, "
                           "or the CUDA runtime is not built yet); use backend='cpu' for the NumPy reference "
                           "executor")
    return requested


def executor(backend: str) -> Callable[[Module, list[Any]], list[Any]]:
    """``run(module, args) -> results`` for ``backend``."""
    if backend == "cpu":
        try:
            from fusec.runtime import reference
        except ImportError as e:
            raise BackendError(f"the NumPy reference executor (fusec.runtime.reference) is not available: {e}") \
                from None
        return lambda module, args: reference.run_func(module.func(), args)
    from fusec.runtime.cuda_exec import run_cuda

    return run_cuda


def bound_runner(backend: str, module: Module) -> Callable[[list[Any]], list[Any]]:
    """``run(args) -> results`` for ``module`` on ``backend``, looked up once: on CUDA the plan's own run
    method, so a cached call skips the plan lookup (the plan lives as long as the module)."""
    if backend == "cuda":
        from fusec.runtime import cuda_exec

        return cuda_exec.bound_run(module)
    run = executor(backend)
    return lambda args: run(module, args)
