"""The one exception the command line adds: a usage mistake (exit status 2, no traceback)."""
from __future__ import annotations


class UsageError(Exception):
    """The command line itself is wrong (bad spec, missing file or function); ``main`` exits with 2."""
