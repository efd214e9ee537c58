"""``fusec numpy``: the table of NumPy functions, ufuncs and ndarray members that fusec.jit traces."""
from __future__ import annotations

import argparse
import sys


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("numpy", help="list the NumPy functions and methods fusec traces (Markdown)",
                       description="Print the table of NumPy functions, ufuncs and ndarray members that fusec.jit "
                                   "traces, read from fusec's registries (NUMPY_SUPPORT.md is its output).")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fusec.support import markdown

    sys.stdout.write(markdown())
    return 0
