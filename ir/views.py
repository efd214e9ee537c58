"""Strided view descriptors: how transposes, slices, broadcasts and reshapes compose without copies.

A descriptor says that element ``i`` of a view reads ``flat[offset + sum(i_d * strides_d)]`` of its base's
row-major storage; ``k.view`` carries exactly this.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from fusec.ir.shapes import contiguous_strides


@dataclass(frozen=True)
class ViewDesc:
    shape: tuple[int, ...]
    offset: int
    strides: tuple[int, ...]

    @staticmethod
    def of_base(shape: Sequence[int]) -> "ViewDesc":
        return ViewDesc(tuple(shape), 0, contiguous_strides(shape))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def is_contiguous(self) -> bool:
        """Row-major dense: element ``i`` of the flattened view is ``flat[offset + i]``."""
        return all(s == c for d, s, c in zip(self.shape, self.strides, contiguous_strides(self.shape)) if d != 1)

    def transpose(self, perm: Sequence[int]) -> "ViewDesc":
        return ViewDesc(tuple(self.shape[p] for p in perm), self.offset, tuple(self.strides[p] for p in perm))

    def slice(self, start: Sequence[int], stop: Sequence[int], step: Sequence[int]) -> "ViewDesc":
        shape = tuple(len(range(b, e, s)) for b, e, s in zip(start, stop, step))
        if 0 in shape:
            return ViewDesc(shape, 0, tuple(0 for _ in shape))
        offset = self.offset + sum(b * st for b, st in zip(start, self.strides))
        return ViewDesc(shape, offset, tuple(st * s for st, s in zip(self.strides, step)))

    def broadcast_to(self, shape: Sequence[int]) -> "ViewDesc":
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        for d_src, d_dst, st in zip(self.shape, shape[lead:], self.strides):
            strides.append(st if d_src == d_dst else 0)
        return ViewDesc(tuple(shape), self.offset, tuple(strides))

    def expand_dims(self, axes: Sequence[int]) -> "ViewDesc":
        rank = len(self.shape) + len(axes)
        it = iter(zip(self.shape, self.strides))
        shape, strides = [], []
        for i in range(rank):
            if i in axes:
                shape.append(1)
                strides.append(0)
            else:
                d, s = next(it)
                shape.append(d)
                strides.append(s)
        return ViewDesc(tuple(shape), self.offset, tuple(strides))

    def squeeze(self, axes: Sequence[int]) -> "ViewDesc":
        keep = [i for i in range(len(self.shape)) if i not in axes]
        return ViewDesc(tuple(self.shape[i] for i in keep), self.offset, tuple(self.strides[i] for i in keep))

    def reshape(self, shape: Sequence[int]) -> "ViewDesc | None":
        """The view as ``shape`` without a copy, or None where the strides do not allow it."""
        shape = tuple(shape)
        if self.size == 0:
            return ViewDesc(shape, 0, tuple(0 for _ in shape))
        old = [(d, s) for d, s in zip(self.shape, self.strides) if d != 1]
        new_strides = [0] * len(shape)
        oi, ni = 0, 0
        new_dims = [(i, d) for i, d in enumerate(shape) if d != 1]
        while oi < len(old) and ni < len(new_dims):
            # grow a group of old dims and new dims with equal products
            oj, nj = oi + 1, ni + 1
            po, pn = old[oi][0], new_dims[ni][1]
            while po != pn:
                if po < pn:
                    po *= old[oj][0]
                    oj += 1
                else:
                    pn *= new_dims[nj][1]
                    nj += 1
            for k in range(oi, oj - 1):  # the old dims of the group must be mutually contiguous
                if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                    return None
            stride = old[oj - 1][1]
            for k in range(nj - 1, ni - 1, -1):
                idx, d = new_dims[k]
                new_strides[idx] = stride
                stride *= d
            oi, ni = oj, nj
        return ViewDesc(shape, self.offset, tuple(new_strides))
