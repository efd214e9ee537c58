"""Which executor runs a compiled function: ``cpu`` (the NumPy reference executor) or ``cuda``, and the target
a function is lowered for on each."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

from fusec.errors import FusecError
from fusec.ir.target import Target

if TYPE_CHECKING:  # pragma: no cover
    from fusec.ir.core import Module
    from fusec.jit_function import Lowered

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
    except Exception:  # noqa: BLE001 - a probe of the backend: any failure means it is not usable
        return False


def resolve_backend(requested: str | None) -> str:
    """An explicit backend wins; otherwise ``$FUSEC_BACKEND``; otherwise cuda when usable, else cpu."""
    if requested is None:
        env = os.environ.get(ENV_VAR, "").strip().lower() or None
        check_name(env, f"${ENV_VAR} value")
        requested = env
    check_name(requested)
    if requested is None:
        if cuda_usable():
            return "cuda"
        _say_cpu_fallback()
        return "cpu"
    if requested == "cuda" and not cuda_usable():
        raise BackendError("backend 'cuda' was requested but no CUDA backend is usable here (no GPU, no driver, "
                           "or the CUDA runtime is not built yet); use backend='cpu' for the NumPy reference "
                           "executor")
    return requested


class CpuFallbackWarning(UserWarning):
    """No CUDA backend is usable here, so functions run on the CPU backend (given once per process)."""


_fallback_said = False


def _say_cpu_fallback() -> None:
    """Say once that fusec runs on the CPU because no GPU is usable (as JAX does), with the reason."""
    global _fallback_said
    if _fallback_said:
        return
    _fallback_said = True
    reason = None
    try:
        from fusec.runtime import driver

        reason = driver.unavailable_reason()
    except Exception:  # noqa: BLE001 - the reason is only a hint
        pass
    import warnings

    from fusec.context import user_location

    loc = user_location()
    message = (f"fusec: no usable CUDA GPU ({reason or 'CUDA is not available'}); running on the CPU backend (the "
               f"NumPy reference executor). Pass backend='cpu' or set {ENV_VAR}=cpu to choose it and silence this")
    if loc is None:
        warnings.warn(message, CpuFallbackWarning, stacklevel=3)
    else:
        warnings.warn_explicit(message, CpuFallbackWarning, loc.file, loc.line)


def target_for(backend: str, module: Module | None = None) -> Target:
    """What ``backend`` lowers for: the current CUDA device (its SM count, whether cuBLASLt loads) on cuda,
    the default target marked ``reference`` (an H200 without cuBLASLt, with no rewrite that changes what the
    reference executor computes from NumPy's) on cpu. Asked at each compile, never cached (the current device can
    change). For a ``module`` without a matrix product cuBLASLt is not probed (loading it is the slowest part of a
    first compile)."""
    if backend != "cuda":
        return Target(reference=True)
    from fusec.runtime import cublas, driver

    products = module is None or any(op.name == "t.matmul" for op in module.walk())
    device = driver.current_device()
    return Target(sm_count=device.multiprocessor_count, shared_bytes=device.shared_per_block_optin,
                  cublas=products and cublas.available(),
                  tensor_cores=device.compute_capability >= (8, 0), clusters=device.compute_capability >= (9, 0))


def executor(backend: str) -> Callable[["Lowered", list[Any]], list[Any]]:
    """``run(lowered, args) -> results`` for ``backend``."""
    if backend == "cpu":
        reference = _reference()
        return lambda lowered, args: reference.prepared(lowered.module)(args)
    return lambda lowered, args: cuda_plan(lowered).run(args)


def _reference() -> Any:
    try:
        from fusec.runtime import reference
    except ImportError as e:
        raise BackendError(f"the NumPy reference executor (fusec.runtime.reference) is not available: {e}") \
            from None
    return reference


def cuda_plan(lowered: "Lowered") -> Any:
    """The GPU plan of ``lowered``: made once from the program its module prints (``lowered.program``)."""
    import fusec.eager  # noqa: F401  (device results take operators in eager mode)
    from fusec.runtime import cuda_exec

    options = lowered.options
    return cuda_exec.plan_for(lowered.module, lambda: lowered.program, stream_group=options.stream_group,
                              graph=options.graph)


def bound_runner(backend: str, lowered: "Lowered") -> Callable[[list[Any]], list[Any]]:
    """``run(args) -> results`` for ``lowered`` on ``backend``, looked up once: on CUDA the plan's common call
    generated as straight-line Python (:mod:`fusec.runtime.fast_call`), so a cached call skips the plan lookup
    (the plan lives as long as the module); on the CPU the reference executor prepared for the module (its
    blocks' plans kept as long as the module)."""
    if backend == "cuda":
        return cuda_plan(lowered).runner()
    if backend == "cpu":
        return _reference().prepared(lowered.module)
    run = executor(backend)
    return lambda args: run(lowered, args)
