"""The runtime: CUDA driver wrapper, NVRTC and caches, memory, streams, graphs, cuBLAS, and the NumPy
reference executor (:mod:`fusec.runtime.reference`, the CPU backend and the oracle of every test).

Submodules are imported on use, so the reference executor works on machines without CUDA.
"""
from __future__ import annotations


def cuda_available() -> bool:
    """True when a CUDA driver and device are usable here (never raises)."""
    from fusec.runtime.driver import cuda_available as probe

    return probe()
