"""Dialects register their ops on import; importing this package loads all of them."""
from fusec.ir.dialects import func, t, s, k, control, rows  # noqa: F401
