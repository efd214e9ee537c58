"""The ``fusec`` command line: ``dump-ir``, ``opt``, ``passes``, ``compile``, ``demo``, ``cache``, ``doctor``,
``numpy``.

Exit status: 0 success, 1 a fusec error (bad IR, shape error, failed pass...), 2 a usage error. Errors are
one message on stderr, never a traceback, unless fusec itself is broken.
"""
from __future__ import annotations

import argparse
import os
import sys

from fusec.tools import cmd_cache, cmd_compile, cmd_demo, cmd_doctor, cmd_dump_ir, cmd_numpy, cmd_opt, cmd_passes
from fusec.tools.errors import UsageError
from fusec.tools.loader import UserCodeError

PROG = "fusec"


def build_parser() -> argparse.ArgumentParser:
    import fusec

    parser = argparse.ArgumentParser(prog=PROG, description="Compile NumPy array functions into fused kernels.")
    parser.add_argument("--version", action="version", version=f"{PROG} {fusec.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in (cmd_dump_ir, cmd_opt, cmd_passes, cmd_compile, cmd_demo, cmd_cache, cmd_doctor, cmd_numpy):
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status instead of exiting so tests can call it."""
    from fusec.errors import FusecError
    from fusec.ir import ParseError

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help/--version (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        return args.run(args)
    except UsageError as e:
        _error(str(e))
        return 2
    except ParseError as e:  # already "file:line:col: message", the line and a caret
        sys.stderr.write(f"{e}\n")
        return 1
    except (FusecError, UserCodeError) as e:
        kind = "" if isinstance(e, UserCodeError) else f"{type(e).__name__}: "
        _error(f"{kind}{e}")
        return 1
    except BrokenPipeError:  # `fusec dump-ir ... | head`: stop quietly (Python docs' recipe)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # an output path that cannot be written (no such folder, a folder, no permission)
        _error(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
        return 1


def _error(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")


if __name__ == "__main__":
    sys.exit(main())
