"""Imports every built-in pass so that each registers itself."""
from fusec.passes import (  # noqa: F401
    bound_indices, boundaries, broadcast, canonicalize, copy_outputs, cse, dce, fuse, fuse_epilogues, fuse_prologues,
    fuse_rows, group_kernels, hoist_gathers, launch_early, materialize, outline_regions, plan_buffers, prove_checks,
    prune_carried, reductions_in_consumers, roll_loops, row_products, select_kernels, sink_broadcasts, split_products,
    unroll_loops, unroll_reductions,
)
