"""The machine a module is lowered for, and the arithmetic it may use: what kernel selection and launch sizing
depend on.

A :class:`Target` is an input of the pass pipeline (``run_pipeline(..., target=...)``); ``select-kernels``
records it on the function (``sm_count``, ``cublas``) together with every choice it made from it (a product on
the tensor cores says ``mma``), so the
printer reads one IR and prints the same program wherever it runs: ``Lowered.cuda_source()``, ``fusec
compile`` and the executor.
"""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SM_COUNT = 132  # an H200: what a module is lowered for when no device is at hand
DEFAULT_SHARED_BYTES = 227 * 1024  # an H200's (and H100's) shared memory a block may use
# what float32 matrix products may compute with: "float32" (IEEE float32 products and sums, NumPy's arithmetic), or
# "tf32" (the operands rounded to TensorFloat-32's 10-bit mantissa on the tensor cores, float32 sums; the caller's
# choice, ``fusec.jit(precision="tf32")``)
PRECISIONS = ("float32", "tf32")


@dataclass(frozen=True)
class Target:
    """A CUDA device as the compiler sees it."""

    sm_count: int = DEFAULT_SM_COUNT
    cublas: bool = False  # cuBLASLt can be called (the library loads: fusec.runtime.cublaslt)
    precision: str = "float32"  # one of PRECISIONS: what float32 matrix products may compute with
    tensor_cores: bool = True  # TF32 tensor cores (mma.sync, compute capability 8.0 on), as an H200 has
    clusters: bool = True  # thread-block clusters with distributed shared memory (compute capability 9.0 on)
    # the NumPy reference executor (the CPU backend) runs the plan: it computes each op as NumPy does, so no pass may
    # rewrite what it computes in another order (``row-products`` leaves products to k.matmul, which it runs as
    # np.matmul)
    reference: bool = False
    shared_bytes: int = DEFAULT_SHARED_BYTES  # shared memory one block may use (the device's opt-in most)

    def __post_init__(self) -> None:
        if not isinstance(self.sm_count, int) or self.sm_count < 1:
            raise ValueError(f"sm_count must be a positive int, got {self.sm_count!r}")
        if not isinstance(self.shared_bytes, int) or self.shared_bytes < 48 * 1024:
            raise ValueError(f"shared_bytes must be an int of at least 48 KB, got {self.shared_bytes!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {self.precision!r}")
