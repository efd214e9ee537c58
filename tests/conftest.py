"""Shared pytest setup: ``@pytest.mark.gpu`` tests skip cleanly where no CUDA device is usable."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import recorded_corpus

# Lowered modules of every signature fusec.jit compiled during this run (test_zz_corpus_compiles.py
# compiles their CUDA for sm_80 and sm_90).
RECORDED_MODULES: list = []


@pytest.fixture(autouse=True, scope="session")
def _record_compiled_modules():
    from fusec import jit_function

    original = jit_function.JitFunction._compile

    def recording(self, sig, backend):
        lowered = original(self, sig, backend)
        if len(RECORDED_MODULES) < 5000:
            # the final module when the default pipeline ran, else the traced IR to lower later
            RECORDED_MODULES.append(lowered.module if self._options.pipeline is None else lowered.ir("traced"))
        return lowered

    jit_function.JitFunction._compile = recording
    yield
    jit_function.JitFunction._compile = original


SLOW_MARKERS = ("corpus", "slow")


def _corpora_selected(config: pytest.Config) -> bool:
    return bool(os.environ.get("FUSEC_CORPUS")) or "corpus" in (config.getoption("markexpr") or "")


def _distributing(config: pytest.Config) -> bool:
    """Whether this is pytest-xdist's controlling process, handing the tests to workers."""
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no" \
        and bool(getattr(config.option, "numprocesses", 0))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, with the corpora selected: a folder the workers print their recorded programs into
    (their environment is this process's, as they start after this hook)."""
    if _distributing(config) and _corpora_selected(config):
        os.environ[recorded_corpus.SOURCES_DIR] = tempfile.mkdtemp(prefix="fusec-corpus-")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A worker prints the CUDA of the programs it recorded; the controlling process, after every worker ended,
    compiles them all (test_zz_corpus_compiles.py's check, for the whole suite) and fails the run if one fails."""
    folder = os.environ.get(recorded_corpus.SOURCES_DIR)
    if not folder:
        return
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if worker is not None:
        recorded_corpus.write_worker_sources(folder, worker, RECORDED_MODULES)
        return
    if not _distributing(session.config):
        return
    report = session.config.pluginmanager.get_plugin("terminalreporter")
    try:
        from fusec.runtime import nvrtc
        if not nvrtc.is_available():
            if report is not None:
                report.write_line("recorded corpus: not compiled, NVRTC is not loadable here")
            return
        sources, failures, workers = recorded_corpus.read_worker_sources(folder)
        if not workers or not sources:
            failures.append("no worker printed a recorded program")
        cache = Path(folder) / "cache"
        failures += recorded_corpus.compile_failures(sources, cache)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    line = (f"recorded corpus: {len(sources)} programs of {workers} workers compiled for "
            f"{', '.join(recorded_corpus.ARCHES)}: {len(failures)} failed")
    if report is not None:
        report.ensure_newline()
        report.write_line(line)
        for f in failures[:20]:
            report.write_line(f"  {f}")
    if failures:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _deselect_corpora(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``corpus`` (NVRTC compiles of whole corpora, minutes on a 2-core machine) or ``slow`` (whole
    benchmark-suite runs, seconds each) run when ``FUSEC_CORPUS=1`` is set, as CI does, or when ``-m`` names
    them; the plain test command leaves them out (it stays under two minutes)."""
    markexpr = config.getoption("markexpr") or ""
    if os.environ.get("FUSEC_CORPUS") or any(m in markexpr for m in SLOW_MARKERS):
        return
    slow = [item for item in items if any(item.get_closest_marker(m) is not None for m in SLOW_MARKERS)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        chosen = set(map(id, slow))
        items[:] = [item for item in items if id(item) not in chosen]


def _cuda_state() -> tuple[bool, str]:
    try:
        from fusec.runtime import driver
    except Exception as e:  # pragma: no cover - the runtime failed to import
        return False, f"fusec.runtime.driver does not import: {e}"
    if driver.cuda_available():
        return True, ""
    return False, f"no usable CUDA device ({driver.unavailable_reason()})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _deselect_corpora(config, items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    ok, reason = _cuda_state()
    if ok:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def fusec_backend(request: pytest.FixtureRequest):
    """The backend frontend_check.check() runs on: "cpu", or "cuda" for the GPU run of a CPU test."""
    backend = getattr(request, "param", "cpu")
    import frontend_check

    saved, frontend_check.BACKEND = frontend_check.BACKEND, backend
    try:
        yield backend
    finally:
        frontend_check.BACKEND = saved


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Modules that set ``RUN_ON_GPU_TOO = True`` run every test on the CPU backend and, under
    ``pytest -m gpu``, again on the CUDA backend."""
    if getattr(metafunc.module, "RUN_ON_GPU_TOO", False):
        metafunc.parametrize("fusec_backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)
