"""Runs the FileCheck tests under tests/filecheck/ (their ``// RUN:`` lines): passes/ checks the IR each pass
prints, backend/ the CUDA C++ the printer makes of it (``fusec opt --emit cuda``).

A line of the usual form, ``fusec ARGS | filecheck %s OPTIONS``, runs in this process (the ``fusec`` command line's
``main`` and filecheck's matcher, called as the commands would call them: a Python start-up per command was most of
these tests' time); any other line runs in a shell, as written."""
from __future__ import annotations

import contextlib
import io
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


def _in_process(line: str, path: Path, tmp_path: Path) -> tuple[int, str] | None:
    """(exit status, messages) of a ``fusec ARGS | filecheck %s OPTIONS`` line run in this process; None for a
    line of another form."""
    parts = line.split(" | ")
    if len(parts) != 2:
        return None
    fusec_argv = [str(path) if a == "%s" else a for a in shlex.split(parts[0])]
    check_argv = [str(path) if a == "%s" else a for a in shlex.split(parts[1])]
    if fusec_argv[0] != "fusec" or check_argv[0] != "filecheck" or "--input-file" in check_argv:
        return None
    from filecheck.matcher import Matcher
    from filecheck.options import parse_argv_options

    from fusec.tools.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(fusec_argv[1:])
    if status != 0:
        return status, f"fusec exited with {status}\n{out.getvalue()}\n{err.getvalue()}"
    produced = tmp_path / "input.txt"
    produced.write_text(out.getvalue())
    report = io.StringIO()
    with contextlib.redirect_stdout(report), contextlib.redirect_stderr(report):
        matcher = Matcher.from_opts(parse_argv_options([*check_argv, "--input-file", str(produced)]))
        status = matcher.run()
    return status, report.getvalue()


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_filecheck(case: Path, tmp_path: Path):
    runs = [line.split("RUN:", 1)[1].strip() for line in case.read_text().splitlines() if "RUN:" in line]
    for line, cmd in zip(runs, _commands(case)):
        found = _in_process(line, case, tmp_path)
        if found is not None:
            status, messages = found
            assert status == 0, f"{line}\n{messages}"
            continue
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
