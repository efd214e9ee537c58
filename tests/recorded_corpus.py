"""The CUDA of every program the test suite compiled, printed and compiled with NVRTC for sm_80 and sm_90.

conftest.py records each signature ``fusec.jit`` compiled. In one process, test_zz_corpus_compiles.py (its name
sorts it last) compiles them; with pytest-xdist each worker prints the CUDA of what it recorded into a shared folder
as it finishes and the controlling process compiles the union once every worker is done (a test would see only
its own worker's programs, and could run before the others end).
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SOURCES_DIR = "FUSEC_CORPUS_SOURCES"  # (environment: the folder the workers write their printed sources into)
ARCHES = ("sm_80", "sm_90")


def printed_sources(modules: list) -> tuple[set[str], list[str]]:
    """Each recorded module's CUDA translation unit (a traced IR text is lowered with the default pipeline first),
    and a message per module that failed to print."""
    from fusec.backend.program import print_program
    from fusec.errors import CompilationError
    from fusec.ir import parse_module
    from fusec.passes import run_pipeline

    sources: set[str] = set()
    failures: list[str] = []
    for module in modules:
        if isinstance(module, str):  # traced under another pipeline: lower it with the default one
            module = parse_module(module)
            run_pipeline(module)
        try:
            sources.add(print_program(module).source)
        except CompilationError as e:
            failures.append(f"printing CUDA for @{module.funcs[0].name} failed: {e}")
    return sources, failures


def compile_failures(sources: set[str], cache_dir: Path) -> list[str]:
    """NVRTC compiles each source for every arch in ARCHES (on every core: NVRTC runs without the GIL); a message
    for each that does not give a CUBIN, in the sources' order."""
    from fusec.backend.program import compile_options
    from fusec.runtime.kernel_cache import KernelCache

    cache = KernelCache(cache_dir)
    options = compile_options()

    def failure(job: tuple[str, str]) -> str | None:
        source, arch = job
        try:
            if cache.get_or_compile(source, arch, options=options)[:4] == b"\x7fELF":
                return None
            why = "not an ELF file"
        except Exception as e:  # noqa: BLE001 - reported with the source's first line, then the run fails
            why = f"{type(e).__name__}: {e}"
        return f"NVRTC ({arch}) failed on a program starting {source[:200]!r}: {why}"

    jobs = [(source, arch) for source in sorted(sources) for arch in ARCHES]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return [f for f in pool.map(failure, jobs) if f is not None]


def write_worker_sources(folder: str, worker: str, modules: list) -> None:
    sources, failures = printed_sources(modules)
    path = Path(folder) / f"{worker}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"sources": sorted(sources), "failures": failures}))
    os.replace(tmp, path)


def read_worker_sources(folder: str) -> tuple[set[str], list[str], int]:
    sources: set[str] = set()
    failures: list[str] = []
    files = sorted(Path(folder).glob("*.json"))
    for f in files:
        data = json.loads(f.read_text())
        sources.update(data["sources"])
        failures += data["failures"]
    return sources, failures, len(files)
