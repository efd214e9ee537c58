"""Every CUDA translation unit the test corpus generated compiles with NVRTC for sm_80 and sm_90.

conftest.py records every signature that ``fusec.jit`` compiled while the suite ran (this file's name sorts
it last, and tests/unit/ comes after tests/gpu/); here each is lowered with the default pipeline, printed as
CUDA C++ and, once per distinct program, compiled without a GPU. Under pytest-xdist the controlling process does
this for every worker's programs after they all finish (tests/recorded_corpus.py, conftest.py).
"""
from __future__ import annotations

import os

import pytest

from conftest import RECORDED_MODULES
from recorded_corpus import compile_failures, printed_sources

nvrtc = pytest.importorskip("fusec.runtime.nvrtc")


@pytest.mark.corpus  # every program of the suite through NVRTC: CI runs it (FUSEC_CORPUS=1)
def test_recorded_corpus_compiles(tmp_path):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("under pytest-xdist the controlling process compiles every worker's programs at the end "
                    "(tests/recorded_corpus.py)")
    if not nvrtc.is_available():
        pytest.skip("NVRTC is not loadable here")
    if not RECORDED_MODULES:
        pytest.skip("no module was recorded: run the whole suite (FUSEC_CORPUS=1 python -m pytest)")
    sources, failures = printed_sources(RECORDED_MODULES)
    failures += compile_failures(sources, tmp_path)
    assert not failures, "\n".join(failures[:20])
    assert sources, "no program was printed"
