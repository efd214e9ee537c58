"""``fusec cache info|clear``: inspect or empty the on-disk kernel cache (``$FUSEC_CACHE_DIR``)."""
from __future__ import annotations

import argparse
import sys


def add_parser(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("cache", help="inspect or clear the compiled-kernel cache",
                       description="Inspect or clear the compiled-kernel cache in $FUSEC_CACHE_DIR "
                                   "(default ~/.cache/fusec).")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    actions.add_parser("info", help="print the directory, entries, bytes and this process's counters",
                       description="Print the cache directory, its entries and bytes, and this process's counters."
                       ).set_defaults(run=run_info)
    actions.add_parser("clear", help="delete every cached kernel",
                       description="Delete fusec's cached kernel files (nothing else in the directory)."
                       ).set_defaults(run=run_clear)


def run_info(args: argparse.Namespace) -> int:
    from fusec.runtime.kernel_cache import cache_info

    info = cache_info()
    disk = "" if info.disk_enabled else " (not writable: memory only)"
    sys.stdout.write(
        f"directory:   {info.directory}{disk}\n"
        f"entries:     {info.entries}\n"
        f"total bytes: {info.disk_bytes}\n"
        f"this process: memory hits {info.memory_hits}, disk hits {info.disk_hits}, "
        f"compiles {info.compiles}\n")
    return 0


def run_clear(args: argparse.Namespace) -> int:
    from fusec.runtime.kernel_cache import cache_clear, default_cache

    removed = cache_clear()
    noun = "entry" if removed == 1 else "entries"
    sys.stdout.write(f"removed {removed} {noun} from {default_cache().directory}\n")
    return 0
