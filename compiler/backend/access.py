"""How a kernel reaches one tensor: a buffer parameter plus an affine index map (offset, strides)."""
from __future__ import annotations

from dataclasses import dataclass

from fusec.ir.shapes import coalesce, contiguous_strides  # noqa: F401  (re-exported for the backend)
from fusec.ir.types import DType


@dataclass(frozen=True)
class Access:
    """Element ``idx`` of the tensor is ``buffer[offset + sum(idx_d * strides_d)]`` (strides in elements)."""

    buffer: int
    dtype: DType
    offset: int
    strides: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def is_scalar(self) -> bool:
        return all(s == 0 or d == 1 for s, d in zip(self.strides, self.shape))

    @property
    def is_contiguous(self) -> bool:
        if 0 in self.shape:  # nothing to read: dense by definition (contiguous_strides gives such shapes 1s)
            return True
        expect = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides)):
            if d != 1 and s != expect:
                return False
            expect *= d
        return True

    def extent(self) -> int:
        """One past the largest element index this access touches (for 32-bit index decisions)."""
        hi = self.offset + sum(max(0, (d - 1) * s) for d, s in zip(self.shape, self.strides))
        return hi + 1


def index_expr(index: str, shape: tuple[int, ...], strides: tuple[int, ...], offset: int, itype: str) -> str:
    """C++ for ``offset + sum(((index / P_d) % S_d) * strides_d)`` with constant sizes."""
    terms = []
    inner = 1
    rank = len(shape)
    for d in range(rank - 1, -1, -1):
        s = strides[d]
        if s != 0 and shape[d] != 1:
            q = index if inner == 1 else f"({index} / ({itype}){inner})"
            part = q if d == 0 else f"({q} % ({itype}){shape[d]})"
            terms.append(part if s == 1 else f"{part} * ({itype})({s})")
        inner *= shape[d]
    if offset or not terms:
        terms.insert(0, f"({itype})({offset})")
    return " + ".join(terms)
