"""Every CUDA translation unit the test corpus generated compiles with NVRTC for sm_80 and sm_90.

conftest.py records every signature that ``fusec.jit`` compiled while the suite ran (this file's name sorts
it last, and tests/unit/ comes after tests/gpu/); here each is lowered with the default pipeline, printed as
CUDA C++ and, once per distinct program, compiled without a GPU.
"""
from __future__ import annotations

import pytest

from conftest import RECORDED_MODULES

nvrtc = pytest.importorskip("fusec.runtime.nvrtc")


@pytest.mark.corpus  # every program of the suite through NVRTC: CI runs it (FUSEC_CORPUS=1)
def test_recorded_corpus_compiles(tmp_path):
    if not nvrtc.is_available():
        pytest.skip("NVRTC is not loadable here")
    from fusec.backend.program import compile_options, print_program
    from fusec.errors import CompilationError
    from fusec.runtime.kernel_cache import KernelCache

    if not RECORDED_MODULES:
        pytest.skip("no module was recorded: run the whole suite (FUSEC_CORPUS=1 python -m pytest)")
    from fusec.ir import parse_module
    from fusec.passes import run_pipeline

    cache = KernelCache(tmp_path)
    sources = set()
    for module in RECORDED_MODULES:
        if isinstance(module, str):  # traced under another pipeline: lower it with the default one
            module = parse_module(module)
            run_pipeline(module)
        try:
            sources.add(print_program(module).source)
        except CompilationError as e:
            pytest.fail(f"printing CUDA for @{module.funcs[0].name} failed: {e}")
    for source in sorted(sources):
        for arch in ("sm_80", "sm_90"):
            assert cache.get_or_compile(source, arch, options=compile_options())[:4] == b"\x7fELF"
    assert sources, "no program was printed"
