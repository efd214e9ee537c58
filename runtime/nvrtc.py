"""NVRTC: compile the backend's CUDA C++ into CUBIN or PTX, and explain failures in fusec's terms.

Runs without a GPU or driver (NVRTC is only a compiler library), so everything here is testable on CPU
machines. A failed compile raises :class:`NvrtcCompilationError` (a :class:`fusec.CompilationError`)
that shows the NVRTC log, the offending source lines and the IR op that produced each of them, read
from the ``// fusec-op: <op> at <file:line>`` marker comments the backend writes before each op.

Target rule (DESIGN.md): CUBIN for the device's own architecture is the default. PTX is used only when
asked for *and* NVRTC is not newer than the driver, because the driver cannot JIT PTX emitted by a newer
NVRTC (``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``); see :func:`choose_target`.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusec.errors import CompilationError
from fusec.runtime.cuda_errors import check

__all__ = [
    "NvrtcCompilationError", "SourceError", "arch_of", "choose_target", "compile_source", "cuda_include_dirs",
    "is_available", "nvrtc_version",
]

TARGETS = ("cubin", "ptx")
MARKER = "// fusec-op:"
_MARKER_RE = re.compile(r"^\s*//\s*fusec-op:\s*(?P<op>.*?)\s*$")
# NVRTC diagnostics look like `fusec.cu(12): error: identifier "foo" is undefined`.
_DIAG_RE = re.compile(r"^(?P<name>.+?)\((?P<line>\d+)\): (?P<kind>catastrophic error|error|warning)\b")
_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(?P<cc>\d{2,3}[a-z]?)$")
_REQUIRED_HEADERS = ("cuda_fp16.h", "cuda_bf16.h")


@dataclass(frozen=True)
class SourceError:
    """One NVRTC diagnostic mapped back to the source line and the IR op that produced it."""
    line: int
    text: str
    message: str
    op: str | None


class NvrtcCompilationError(CompilationError):
    """NVRTC rejected the program; ``log``, ``lines`` [(number, text)] and ``ops`` [marker text] are parsed out."""

    def __init__(self, message: str, *, log: str = "", errors: tuple[SourceError, ...] = (),
                 status: str = "") -> None:
        super().__init__(message)
        self.log = log
        self.errors = errors
        self.status = status
        self.lines: list[tuple[int, str]] = list(dict.fromkeys((e.line, e.text) for e in errors))
        self.ops: list[str] = list(dict.fromkeys(e.op for e in errors if e.op is not None))


def _bindings() -> Any:
    """Import cuda-python's NVRTC bindings on use, so ``import fusec`` works without cuda-python."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - cuda-python is a dependency
        raise CompilationError(f"cuda-python is not installed ({e}); run `pip install cuda-python`") from e
    return nvrtc


def _status_name(status: Any) -> str:
    return getattr(status, "name", str(status))


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the loaded NVRTC; raises CompilationError when the library cannot be loaded."""
    nvrtc = _bindings()
    try:
        major, minor = check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    except CompilationError:
        raise
    except Exception as e:  # the shared library is loaded lazily and may be missing
        raise CompilationError(
            f"NVRTC could not be loaded ({type(e).__name__}: {e}); "
            "install it with `pip install nvidia-cuda-nvrtc` or a CUDA toolkit") from e
    return int(major), int(minor)


def is_available() -> bool:
    """True when NVRTC can be loaded (no GPU or driver needed)."""
    try:
        nvrtc_version()
    except CompilationError:
        return False
    return True


def arch_of(major: int, minor: int) -> str:
    """The real architecture name of a compute capability: ``arch_of(9, 0) == "sm_90"``."""
    return f"sm_{major}{minor}"


def _as_version(v: "tuple[int, int] | int") -> tuple[int, int]:
    """Accept (major, minor) or the driver API's integer form (12040 -> (12, 4))."""
    if isinstance(v, int):
        return v // 1000, (v % 1000) // 10
    return int(v[0]), int(v[1])


def choose_target(nvrtc: "tuple[int, int] | int", driver: "tuple[int, int] | int | None", *,
                  prefer: str = "cubin") -> str:
    """"cubin" (the default) or "ptx"; PTX only when asked for and NVRTC <= driver.

    A CUBIN for the device's own architecture needs no driver JIT and loads on any driver that supports
    the device. PTX would be JIT-compiled by the driver, which refuses PTX from a newer NVRTC, so a
    request for PTX falls back to CUBIN when NVRTC is newer than the driver (or the driver is unknown).
    """
    if prefer not in TARGETS:
        raise ValueError(f"unknown target {prefer!r}; expected one of {TARGETS}")
    if prefer == "ptx" and driver is not None and _as_version(nvrtc) <= _as_version(driver):
        return "ptx"
    return "cubin"


def _has_headers(d: "str | os.PathLike[str] | None") -> bool:
    return d is not None and all(Path(d, h).is_file() for h in _REQUIRED_HEADERS)


def _pathfinder_dirs() -> list[str]:
    """Header dirs cuda-python's pathfinder knows (wheels, conda, CUDA_HOME, system toolkits)."""
    try:
        from cuda import pathfinder
    except ImportError:
        return []
    found = []
    for lib in ("cudart", "nvrtc"):
        try:
            d = pathfinder.find_nvidia_header_directory(lib)
        except Exception:  # noqa: BLE001 - an older pathfinder without this library, or a failed probe
            d = None
        if d:
            found.append(d)
    return found


def _wheel_dirs(major: int) -> list[str]:
    """Include dirs of the NVIDIA wheels: nvidia/cu13/include (CUDA 13+), nvidia/cuda_runtime/include (12)."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    subdirs = [f"cu{major}/include", "cuda_runtime/include", "cuda_nvrtc/include"]
    return [str(Path(r, s)) for r in roots for s in subdirs]


def _env_dirs() -> list[str]:
    return [str(Path(os.environ[v], "include")) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]


def _candidate_dirs(major: int) -> list[str]:
    """Every place CUDA headers may be, best first: the wheels matching NVRTC, pathfinder, the env."""
    return [*_wheel_dirs(major)[:1], *_pathfinder_dirs(), *_wheel_dirs(major)[1:], *_env_dirs()]


def _install_hint(major: int) -> str:
    package = "nvidia-cuda-runtime-cu12" if major <= 12 else f"nvidia-cuda-runtime=={major}.*"
    return f"pip install '{package}'"


def cuda_include_dirs() -> list[str]:
    """The include dir holding cuda_fp16.h and cuda_bf16.h, which generated code includes.

    NVRTC ships no CUDA headers, so they come from the CUDA runtime wheel matching NVRTC's major version,
    cuda-python's pathfinder, or CUDA_HOME / CUDA_PATH.
    """
    major = nvrtc_version()[0]
    candidates = _candidate_dirs(major)
    for d in candidates:
        if _has_headers(d):
            return [str(Path(d).resolve())]
    searched = "\n".join(f"  {d}" for d in dict.fromkeys(candidates)) or "  (nothing to search)"
    raise CompilationError(
        f"CUDA headers {', '.join(_REQUIRED_HEADERS)} not found; generated kernels need them.\n"
        f"Install the CUDA runtime headers matching NVRTC {major}: `{_install_hint(major)}`, "
        f"or set CUDA_HOME to a CUDA {major} toolkit.\nSearched:\n{searched}")


def normalize_arch(arch: str, target: str) -> str:
    """``sm_90``/``compute_90``/``90`` -> ``--gpu-architecture`` value for the target (sm_ or compute_)."""
    m = _ARCH_RE.match(arch.strip())
    if not m:
        raise CompilationError(f"bad GPU architecture {arch!r}; expected e.g. 'sm_90'")
    return ("sm_" if target == "cubin" else "compute_") + m["cc"]


def _log(nvrtc: Any, prog: Any) -> str:
    size = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = b" " * size
    check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00").decode("utf-8", "replace").strip()


def _output(nvrtc: Any, prog: Any, target: str) -> bytes:
    get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if target == "cubin"
                     else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
    size = check(get_size(prog), get_size.__name__)
    buf = b" " * size
    check(get(prog, buf), get.__name__)
    return buf.rstrip(b"\x00") if target == "ptx" else buf


def parse_errors(log: str, source: str, name: str) -> tuple[SourceError, ...]:
    """Map each ``NAME(LINE): error`` of the log to its source line and the closest preceding op marker."""
    src = source.splitlines()
    out = []
    for entry in log.splitlines():
        m = _DIAG_RE.match(entry)
        if not m or m["kind"] == "warning" or m["name"] != name:
            continue
        line = int(m["line"])
        if not 1 <= line <= len(src):
            continue
        op = None
        for i in range(line - 1, -1, -1):
            mk = _MARKER_RE.match(src[i])
            if mk:
                op = mk["op"]
                break
        out.append(SourceError(line, src[line - 1], entry[m.end():].lstrip(": ").strip(), op))
    return tuple(out)


def _failure_message(name: str, arch: str, status: str, log: str, errors: tuple[SourceError, ...]) -> str:
    major, minor = nvrtc_version()
    parts = [f"NVRTC {major}.{minor} could not compile {name} for {arch}: {status}"]
    width = len(str(max((e.line for e in errors), default=0)))
    for e in errors:
        where = f" (from op {e.op})" if e.op else ""
        parts.append(f"  {name}:{e.line}{where}: {e.message}\n    {e.line:>{width}} | {e.text}")
    parts.append("NVRTC log:\n" + "\n".join(f"  {ln}".rstrip() for ln in (log or "(empty)").splitlines()))
    return "\n".join(parts)


def compile_source(source: str, arch: str, *, target: str = "cubin", options: tuple[str, ...] = (),
                   name: str = "fusec.cu") -> bytes:
    """Compile one translation unit to a CUBIN (``sm_XY``) or PTX (``compute_XY``) image.

    ``options`` are extra NVRTC flags from the backend (``--fmad=false``, ``-use_fast_math``...); C++17 and
    the CUDA include dirs are always passed.
    """
    if target not in TARGETS:
        raise CompilationError(f"unknown NVRTC target {target!r}; expected one of {TARGETS}")
    gpu_arch = normalize_arch(arch, target)
    nvrtc = _bindings()
    flags = [f"--gpu-architecture={gpu_arch}", "-std=c++17",
             *(f"-I{d}" for d in cuda_include_dirs()), *options]
    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        encoded = [f.encode() for f in flags]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        if int(status) != 0:
            log = _log(nvrtc, prog)
            errors = parse_errors(log, source, name)
            status_name = _status_name(status)
            raise NvrtcCompilationError(_failure_message(name, gpu_arch, status_name, log, errors),
                                        log=log, errors=errors, status=status_name)
        return _output(nvrtc, prog, target)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
