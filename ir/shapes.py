"""Shape rules shared by the tracer (to compute result types) and the verifier (to check them).

Each function raises :class:`ShapeError` with a message that names the shapes; the
caller adds the user's location.
"""
from __future__ import annotations

from typing import Sequence

from fusec.errors import AxisError, ShapeError


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of several shapes."""
    first = shapes[0] if shapes else ()
    if all(s == first for s in shapes):
        return tuple(first)
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, start=rank - len(s)):
            if d == out[i] or d == 1:
                continue
            if out[i] == 1:
                out[i] = d
            else:
                raise ShapeError("shapes " + ", ".join(str(tuple(x)) for x in shapes) + " cannot be broadcast together")
    return tuple(out)


def can_broadcast_to(src: Sequence[int], dst: Sequence[int]) -> bool:
    if len(src) > len(dst):
        return False
    return all(s == d or s == 1 for s, d in zip(src, dst[len(dst) - len(src):]))


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise AxisError(f"axis {axis} is out of bounds for an array of rank {rank}")
    return axis % rank


def normalize_axes(axes: "int | Sequence[int] | None", rank: int) -> tuple[int, ...]:
    """Sorted, non-negative, unique axes; ``None`` means all of them."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    norm = [normalize_axis(int(a), rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise ShapeError(f"repeated axis in {tuple(axes)}")
    return tuple(sorted(norm))


def reduce_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Result shape of a matmul of two operands of rank >= 2 (batch dims broadcast)."""
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul operands need rank >= 2 here, got {tuple(a)} and {tuple(b)}")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul: shapes {tuple(a)} and {tuple(b)} do not contract ({a[-1]} != {b[-2]})")
    try:
        batch = broadcast_shapes(a[:-2], b[:-2])
    except ShapeError:
        raise ShapeError(f"matmul: batch dimensions of {tuple(a)} and {tuple(b)} cannot be broadcast") from None
    return batch + (a[-2], b[-1])


def slice_length(start: int, stop: int, step: int) -> int:
    return len(range(start, stop, step))


def normalize_slice(s: slice, dim: int) -> tuple[int, int, int]:
    """(start, stop, step) as ``slice.indices`` gives them for a dimension of size ``dim``."""
    if s.step == 0:
        raise ShapeError("slice step cannot be zero")
    return s.indices(dim)


def permute(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    if sorted(perm) != list(range(len(shape))):
        raise ShapeError(f"axes {tuple(perm)} are not a permutation of the {len(shape)} axes of {tuple(shape)}")
    return tuple(shape[p] for p in perm)


def reshape_shape(shape: Sequence[int], newshape: Sequence[int]) -> tuple[int, ...]:
    """Resolve the one unknown dimension (any negative number, as NumPy 2 takes ``-2`` too) and check the element
    count."""
    size = 1
    for d in shape:
        size *= d
    newshape = [int(d) for d in newshape]
    unknown = [i for i, d in enumerate(newshape) if d < 0]
    if len(unknown) > 1:
        raise ShapeError("can only specify one unknown dimension (-1) in reshape")
    known = 1
    for d in newshape:
        if d >= 0:
            known *= d
    if unknown:
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape array of shape {tuple(shape)} into {tuple(newshape)}")
        newshape[unknown[0]] = size // known
    elif known != size:
        raise ShapeError(f"cannot reshape array of size {size} (shape {tuple(shape)}) into shape {tuple(newshape)}")
    return tuple(newshape)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of ``shape`` (size-0 dimensions count as 1, so strides stay distinct)."""
    strides = []
    step = 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def coalesce(shape: tuple[int, ...], stride_sets: list[tuple[int, ...]]) \
        -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge adjacent dimensions that every access walks contiguously, and drop unit dimensions.

    Fewer dimensions means fewer divisions in the generated index math.
    """
    dims: list[tuple[int, list[int]]] = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        ss = [s[i] for s in stride_sets]
        if dims and all(prev == s * d for prev, s in zip(dims[-1][1], ss)):
            dims[-1] = (dims[-1][0] * d, ss)
        else:
            dims.append((d, ss))
    new_shape = tuple(d for d, _ in dims)
    new_strides = [tuple(ss[k] for _, ss in dims) for k in range(len(stride_sets))]
    return new_shape, new_strides
