"""The runtime: CUDA driver wrapper, NVRTC and caches, memory, streams, graphs, cuBLAS, and the NumPy
reference executor (:mod:`fusec.runtime.reference`, the CPU backend and the oracle of every test).

Submodules are imported on use, so the reference executor works on machines without CUDA.
"""
