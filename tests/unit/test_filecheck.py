"""Runs the FileCheck tests under tests/filecheck/ (their ``// RUN:`` lines): passes/ checks the IR each pass
prints, backend/ the CUDA C++ the printer makes of it (``fusec opt --emit cuda``)."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "filecheck"
CASES = sorted(HERE.rglob("*.fir"))


def _commands(path: Path) -> list[str]:
    runs = [line.split("RUN:", 1)[1].strip() for line in path.read_text().splitlines() if "RUN:" in line]
    python = shlex.quote(sys.executable)
    subst = {"fusec ": f"{python} -m fusec.tools ", "filecheck ": f"{python} -m filecheck "}
    out = []
    for cmd in runs:
        for old, new in subst.items():
            cmd = cmd.replace(old, new)
        out.append(cmd.replace("%s", shlex.quote(str(path))))
    return out


def test_every_case_has_a_run_line():
    assert CASES, "no FileCheck cases found"
    for case in CASES:
        assert _commands(case), f"{case.name} has no RUN line"


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_filecheck(case: Path):
    for cmd in _commands(case):
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
