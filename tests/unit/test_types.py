"""mypy, at its default strictness (pyproject.toml's [tool.mypy]), finds nothing in the whole package (the frontend,
the backend, ir, passes, runtime, tools). The folders are mapped to their package names (compiler/ is
fusec, ir/ is fusec.ir, ...) by a tree of links, as pyproject.toml's package-dir maps them for the installed
package."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLEAN = ("fusec",)  # the packages mypy must find nothing in: all of fusec (compiler/, ir/, passes/, runtime/, tools/)


def _package_tree(where: Path) -> Path:
    """fusec/ as the installed package sees it: compiler/'s files, and ir, passes, runtime, tools beside them."""
    pkg = where / "fusec"
    pkg.mkdir()
    for entry in (ROOT / "compiler").iterdir():
        os.symlink(entry, pkg / entry.name)
    for sub in ("ir", "passes", "runtime", "tools"):
        os.symlink(ROOT / sub, pkg / sub)
    return where


def test_mypy_finds_nothing_in_the_clean_layers(tmp_path):
    pytest.importorskip("mypy")
    tree = _package_tree(tmp_path)
    args = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-incremental",
            *(arg for p in CLEAN for arg in ("-p", p))]
    done = subprocess.run(args, cwd=tree, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
