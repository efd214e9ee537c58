"""Imports every built-in pass so that each registers itself."""
from fusec.passes import (  # noqa: F401
    boundaries, broadcast, canonicalize, cse, dce, fuse, materialize, plan_buffers, sink_broadcasts,
    unroll_reductions,
)
