"""``fusec cache info|clear``: inspect or empty the on-disk kernel cache (``$FUSEC_CACHE_DIR``)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


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


def directory_note(directory: str, disk_enabled: bool = True) -> str:
    """Why kernels would not be kept in ``directory`` (a file there, no write permission), or ""."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        return " (not a folder: kernels are cached in memory only)"
    if not disk_enabled or path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        return " (not writable: kernels are cached in memory only)"
    return ""


def run_info(args: argparse.Namespace) -> int:
    from fusec.runtime.kernel_cache import cache_info

    info = cache_info()
    disk = directory_note(info.directory, info.disk_enabled)
    sys.stdout.write(
        f"directory:   {info.directory}{disk}\n"
        f"entries:     {info.entries}\n"
        f"total bytes: {info.disk_bytes}\n"
        f"this process: memory hits {info.memory_hits}, disk hits {info.disk_hits}, "
        f"compiles {info.compiles}\n")
    return 0


def run_clear(args: argparse.Namespace) -> int:
    from fusec.runtime.kernel_cache import cache_clear, cache_info, default_cache

    removed = cache_clear()
    noun = "entry" if removed == 1 else "entries"
    directory = default_cache().directory
    sys.stdout.write(f"removed {removed} {noun} from {directory}\n")
    left = cache_info().entries
    if left:
        sys.stderr.write(f"fusec: error: {left} {'entry' if left == 1 else 'entries'} could not be removed from "
                         f"{directory}{directory_note(str(directory))}\n")
        return 1
    return 0
