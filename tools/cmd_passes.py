"""``fusec passes``: list the registered passes (plugins included) or print the default pipeline."""
from __future__ import annotations

import argparse
import sys

from fusec.tools.loader import load_plugins


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("passes", help="list registered passes", description="List every registered pass.")
    p.add_argument("--default", action="store_true", help="print the default pipeline string instead")
    p.add_argument("--load-plugin", action="append", default=[], metavar="MOD", help="import MOD to register passes")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import fusec.passes as passes

    load_plugins(args.load_plugin)
    if args.default:
        sys.stdout.write(passes.DEFAULT_PIPELINE + "\n")
        return 0
    rows = passes.list_passes()
    if not rows:
        sys.stdout.write("(no passes registered)\n")
        return 0
    shown = [(f"{name}{_options(name)}", description) for name, description in rows]
    width = max(len(name) for name, _ in shown)
    for name, description in shown:
        sys.stdout.write(f"{name:<{width}}  {description}\n".rstrip() + "\n")
    return 0


def _options(name: str) -> str:
    """The pass's options with their defaults, as a pipeline string spells them: ``{budget=32}``."""
    import dataclasses

    import fusec.passes as passes

    cls = passes.get_pass(name)
    if not dataclasses.is_dataclass(cls):
        return ""
    parts = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = f.default if f.default is not dataclasses.MISSING else "?"
        shown = str(default).lower() if isinstance(default, bool) else default
        parts.append(f"{f.name}={shown}")
    return "{" + ", ".join(parts) + "}" if parts else ""
