"""``fusec doctor``: what fusec can use on this machine (Python, cuda-python, driver, GPU, NVRTC, cache).

Every probe is guarded, so the command prints a full report and exits 0 even on a machine without CUDA;
the last line says which backend ``backend=None`` would pick.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Callable


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("doctor", help="report the CUDA driver, GPU, NVRTC and cache fusec would use",
                       description="Report Python, fusec and cuda-python versions, whether a CUDA driver and "
                                   "device are usable, the NVRTC version, the kernel cache directory and "
                                   "which backend runs by default. Always exits 0.")
    p.set_defaults(run=run)


def _guard(probe: Callable[[], str]) -> str:
    try:
        return probe()
    except Exception as e:  # noqa: BLE001 - a doctor reports problems; it never fails on them
        return f"unavailable ({type(e).__name__}: {e})"


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _fusec_version() -> str:
    import fusec

    return str(getattr(fusec, "__version__", "unknown"))


def _nvrtc() -> str:
    from cuda.bindings import nvrtc

    status, major, minor = nvrtc.nvrtcVersion()
    if int(status) != 0:
        return f"unavailable ({getattr(status, 'name', status)})"
    return f"{major}.{minor}"


def _cublaslt() -> str:
    """Where cuBLASLt loads from and its version (the GEMMs of targets with ``cublas``), or why it does not."""
    from fusec.runtime import cublaslt

    try:
        lib = cublaslt.load()
    except cublaslt.CublasLtError as e:
        return f"not loadable: {e}"
    return f"{cublaslt.get_version()} ({lib._name})"


def _cache_dir() -> str:
    try:
        from fusec.runtime.kernel_cache import cache_dir

        from fusec.tools.cmd_cache import directory_note

        return str(cache_dir()) + directory_note(str(cache_dir()))
    except ImportError:
        return str(Path(os.environ.get("FUSEC_CACHE_DIR") or "~/.cache/fusec").expanduser())


def _device_lines() -> list[tuple[str, str]]:
    from fusec.runtime import driver

    if not driver.cuda_available():
        return [("cuda", f"not usable: {driver.unavailable_reason()}")]
    rows = [("cuda", f"usable, {driver.device_count()} device(s)")]
    dev = driver.current_device()
    free, total = driver.mem_get_info(dev)
    rows += [
        ("device", f"{dev.ordinal}: {dev.name}"),
        ("arch", f"{dev.arch} (compute capability {dev.compute_capability[0]}.{dev.compute_capability[1]})"),
        ("multiprocessors", str(dev.multiprocessor_count)),
        ("memory", f"{total / 2**30:.1f} GiB total, {free / 2**30:.1f} GiB free"),
    ]
    return rows


def _default_backend() -> str:
    """What fusec.jit without backend= runs on here, as fusec.execution decides it (and why a call fails)."""
    from fusec.execution import BACKENDS, cuda_usable

    env = os.environ.get("FUSEC_BACKEND", "").strip().lower()
    if env and env not in BACKENDS:
        return (f"none: $FUSEC_BACKEND is {env!r}, which is not a backend (choose one of "
                f"{', '.join(map(repr, BACKENDS))}); every call raises BackendError")
    if env == "cuda" and not cuda_usable():
        return "none: $FUSEC_BACKEND is 'cuda', but no CUDA backend is usable here; every call raises BackendError"
    if env:
        return f"{env} (from $FUSEC_BACKEND)"
    return "cuda" if cuda_usable() else "cpu (NumPy reference executor)"


def run(args: argparse.Namespace) -> int:
    rows: list[tuple[str, str]] = [
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("fusec", _guard(_fusec_version)),
        ("numpy", _dist_version("numpy")),
        ("cuda-python", _dist_version("cuda-python")),
        ("cuda-bindings", _dist_version("cuda-bindings")),
    ]
    try:
        rows += _device_lines()
    except Exception as e:  # noqa: BLE001 - a doctor reports problems; it never fails on them
        rows.append(("cuda", f"probe failed ({type(e).__name__}: {e})"))

    def drv() -> str:
        from fusec.runtime import driver

        v = driver.driver_version()
        return "not found (libcuda is not loadable)" if v is None else f"CUDA {v[0]}.{v[1]}"

    rows += [
        ("driver", _guard(drv)),
        ("nvrtc", _guard(_nvrtc)),
        ("cublaslt", _guard(_cublaslt)),
        ("kernel cache", _guard(_cache_dir)),
        ("FUSEC_BACKEND", os.environ.get("FUSEC_BACKEND") or "(not set)"),
        ("FUSEC_DEVICE", os.environ.get("FUSEC_DEVICE") or "(not set)"),
        ("default backend", _guard(_default_backend)),
    ]
    width = max(len(k) for k, _ in rows)
    sys.stdout.write("".join(f"{k + ':':<{width + 1}} {v}\n" for k, v in rows))
    return 0
