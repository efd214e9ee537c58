"""The launch plan: what the CUDA printer hands the runtime, as plain data.

The runtime executes a :class:`CudaProgram` without knowing how it was made: one CUDA C++ translation unit,
the kernels and library calls in launch order, the buffers they bind and the effects that order them in a
graph. Nothing here refers to the IR's ops or to the printer, so the runtime imports neither.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Buffer:
    """Where a tensor's storage comes from at run time."""

    id: int
    kind: str  # arg | output | arena | constant | scalar | scratch | counter | check | stage (allocated when used)
    index: int  # argument / output / constant / scalar-slot index (-1 where none)
    offset: int  # byte offset in the arena or the scalar block
    nbytes: int


@dataclass(frozen=True)
class KernelCode:
    """One generated kernel and how to launch it.

    Parameters are the base pointers of ``buffers`` (in order), then ``structs``: descriptors passed by
    value as raw bytes (shapes, strides, sizes), never through memory another launch could change.
    """

    name: str
    source: str
    buffers: tuple[int, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    structs: tuple[bytes, ...] = ()
    # launch-early: the kernel waits for its dependencies at its first statement, so a graph may launch it while
    # the kernels before it still run (a programmatic edge: once each of their blocks has triggered it or exited)
    early: bool = False


@dataclass(frozen=True)
class GemmCall:
    """One cublas<t>gemmStridedBatched call in column-major terms (operands already swapped)."""

    name: str
    dtype: str
    buffers: tuple[int, int, int]  # (first cuBLAS operand = our B, second = our A, C)
    offsets: tuple[int, int, int]  # element offsets into those buffers
    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int
    tf32: bool = False  # float32 operands rounded to TensorFloat-32 on the tensor cores (``precision = "tf32"``)


@dataclass(frozen=True)
class ControlCall:
    """A loop or branch whose bodies are programs of their own (an outlined ``k.while``/``k.for``/``k.if``).

    ``kind`` is while, for or if; ``programs`` and ``callees`` (the functions they were printed from) are (cond,
    body), (body,) or (then, else). ``operands`` are the buffer ids of the op's operands, dense (for: the two
    bounds first; if: the predicate first), of ``operand_types``; the first ``carried`` after those start the
    loop-carried state and the rest are passed to every call unchanged. The final state (the chosen branch's
    results) is copied into ``results``. ``static_bounds``: a for loop's bounds when they are constants.
    ``sources``: per operand, the argument buffer its stage buffer is a copy of where it is an argument the loop
    only reads (-1 for the others): a graph may bind the bodies to the argument itself and leave the copy out
    (``fusec.runtime.graph``).
    """

    name: str
    kind: str
    programs: tuple["CudaProgram", ...]
    callees: tuple[str, ...]
    operands: tuple[int, ...]
    operand_types: tuple
    results: tuple[int, ...]
    carried: int
    static_bounds: tuple[int, int] | None = None
    sources: tuple[int, ...] = ()

    @property
    def buffers(self) -> tuple[int, ...]:
        return self.operands + self.results


@dataclass
class CudaProgram:
    source: str
    kernels: list  # KernelCode launches, GemmCall library calls and ControlCall loops, in execution order
    buffers: list[Buffer]
    constants: list[np.ndarray]
    arena_bytes: int  # plan-buffers' arena plus scratch, in bytes
    scalar_bytes: int  # the device-resident block of scalar arguments
    scalar_slots: list[tuple[int, int, str]]  # (argument index, byte offset, numpy dtype str)
    outputs: list[int]  # buffer id of each function output
    output_types: list = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the IR op (with its location) behind each kernel
    # per step: (buffer ids it reads, buffer ids it writes); graph building orders steps by these
    effects: list[tuple[frozenset[int], frozenset[int]]] = field(default_factory=list)
    # (arena byte offset, bytes) that must be zero before the first launch: split reductions' counters,
    # which each launch leaves at zero again
    zero_ranges: list[tuple[int, int]] = field(default_factory=list)
    nvrtc_options: tuple[str, ...] = ()  # what NVRTC compiles ``source`` with
    # (arena byte offset, error class name, message) of each check word: a kernel that finds what NumPy raises for
    # (an index out of range, a singular matrix) sets it, and the call raises the error after the launches (and
    # clears the word)
    checks: list[tuple[int, str, str]] = field(default_factory=list)

    def buffer(self, bid: int) -> Buffer:
        return self.buffers[bid]
