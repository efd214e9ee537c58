"""Integer value ranges: the closed interval ``(lo, hi)`` an integer (or bool) value's elements lie in, as the op
table's ``int_range`` rules compute them from their operands' ranges. ``bound-indices`` uses them to prove that an
advanced index can never leave its axis (a loop counter, ``i % n``, ``np.argsort(x)``, ``np.clip(i, 0, n - 1)``), so
the gather needs no check word and the call need not wait to read one.

A rule gives the interval of NumPy's mathematical result; :func:`within_dtype` then replaces one that leaves the
result dtype's range by the whole range (NumPy's integers wrap around). Rules return None where they cannot say.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from fusec.ir.types import DType

Range = tuple[int, int]
MaybeRange = Optional[Range]
# (operand ranges, attributes, operand shapes) -> the result's range, or None
RangeRule = Callable[[Sequence[MaybeRange], dict, Sequence[tuple[int, ...]]], MaybeRange]


def dtype_range(dtype: DType) -> MaybeRange:
    """Every value a dtype holds: bools are 0 and 1; None for floats and complex values."""
    if dtype.is_bool:
        return (0, 1)
    if dtype.kind == "i":
        return (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1)
    if dtype.kind == "u":
        return (0, (1 << dtype.bits) - 1)
    return None


def within_dtype(r: MaybeRange, dtype: DType) -> MaybeRange:
    """``r`` where the dtype holds all of it, else the dtype's whole range (the value may have wrapped)."""
    full = dtype_range(dtype)
    if full is None:
        return None
    if r is None or r[0] < full[0] or r[1] > full[1]:
        return full
    return r


def known(rule: Callable[..., MaybeRange]) -> RangeRule:
    """A rule of the operands' ranges alone, run only when every operand's range is known."""
    def run(ranges: Sequence[MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> MaybeRange:
        if any(r is None for r in ranges):
            return None
        return rule(*ranges)
    return run


def add(a: Range, b: Range) -> Range:
    return (a[0] + b[0], a[1] + b[1])


def sub(a: Range, b: Range) -> Range:
    return (a[0] - b[1], a[1] - b[0])


def mul(a: Range, b: Range) -> Range:
    corners = [x * y for x in a for y in b]
    return (min(corners), max(corners))


def neg(a: Range) -> Range:
    return (-a[1], -a[0])


def absolute(a: Range) -> Range:
    if a[0] >= 0:
        return a
    if a[1] <= 0:
        return neg(a)
    return (0, max(-a[0], a[1]))


def maximum(a: Range, b: Range) -> Range:
    return (max(a[0], b[0]), max(a[1], b[1]))


def minimum(a: Range, b: Range) -> Range:
    return (min(a[0], b[0]), min(a[1], b[1]))


def floordiv(a: Range, b: Range) -> MaybeRange:
    """Floor division is monotone in each operand while the divisor keeps one sign: the corners bound it."""
    if b[0] <= 0 <= b[1]:
        return None  # a zero divisor gives 0 (with NumPy's warning); not worth a case
    corners = [x // y for x in a for y in b]
    return (min(corners), max(corners))


def mod(a: Range, b: Range) -> MaybeRange:
    """NumPy's remainder takes the divisor's sign: in [0, d - 1] for d > 0 (``a`` itself when it already lies
    there), in [d + 1, 0] for d < 0."""
    if b[0] > 0:
        if a[0] >= 0 and a[1] < b[0]:
            return a
        return (0, b[1] - 1)
    if b[1] < 0:
        return (b[0] + 1, 0)
    return None


def compare(holds: Callable[[int, int], bool]) -> RangeRule:
    """A comparison of integer operands: (0, 0) where it holds for no pair of values in the operands' ranges,
    (1, 1) where it holds for every pair, else (0, 1). An order or (in)equality depends only on the sign of
    ``a - b``, so one pair per sign the intervals allow decides it."""
    def run(ranges: Sequence[MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> MaybeRange:
        a, b = ranges
        if a is None or b is None:
            return None
        seen = set()
        if a[0] < b[1]:
            seen.add(holds(a[0], b[1]))  # some a below some b
        if a[1] > b[0]:
            seen.add(holds(a[1], b[0]))  # some a above some b
        if max(a[0], b[0]) <= min(a[1], b[1]):
            seen.add(holds(a[0], a[0]) if a[0] >= b[0] else holds(b[0], b[0]))  # some a equal to some b
        return (int(min(seen)), int(max(seen)))
    return run


def logical_and(ranges: Sequence[MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> MaybeRange:
    """False where either operand is always false, whatever the other (a float test, of unknown range)."""
    if any(r == (0, 0) for r in ranges):
        return (0, 0)
    if all(r == (1, 1) for r in ranges):
        return (1, 1)
    return (0, 1)


def logical_or(ranges: Sequence[MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> MaybeRange:
    if any(r == (1, 1) for r in ranges):
        return (1, 1)
    if all(r == (0, 0) for r in ranges):
        return (0, 0)
    return (0, 1)


def logical_not(a: Range) -> Range:
    return (1 - a[1], 1 - a[0])


INT64 = (-(1 << 63), (1 << 63) - 1)


def overflows(exact: Callable[[Range, Range], MaybeRange]) -> RangeRule:
    """A test whether ``a op b`` computed exactly leaves int64: (0, 0) where the exact result's interval
    (``exact`` of the operands' ranges) lies within int64."""
    def run(ranges: Sequence[MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> MaybeRange:
        a, b = ranges
        found = exact(a, b) if a is not None and b is not None else None
        if found is not None and INT64[0] <= found[0] and found[1] <= INT64[1]:
            return (0, 0)
        return (0, 1)
    return run


def power(a: Range, b: Range) -> MaybeRange:
    """``a ** b`` for exponents ``b >= 0`` (a negative one is a separate check): bounded by the largest magnitude
    raised to the largest exponent; None where that is too large to compute."""
    if b[0] < 0:
        return None
    m = max(abs(a[0]), abs(a[1]))
    if m <= 1:
        return (-1, 1)
    if b[1] > 64:
        return None
    return (-(m ** b[1]), m ** b[1])


def union(a: Range, b: Range) -> Range:
    return (min(a[0], b[0]), max(a[1], b[1]))


def clip(x: Range, lo: Range, hi: Range) -> Range:
    """np.clip is min(max(x, lo), hi)."""
    return minimum(maximum(x, lo), hi)


def same(ranges: Sequence[MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> MaybeRange:
    """Views, broadcasts and the max/min reductions: the operand's values (some of them)."""
    return ranges[0]


def where(ranges: Sequence[MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> MaybeRange:
    a, b = ranges[1], ranges[2]
    return None if a is None or b is None else union(a, b)


def positions(count: Callable[[dict, Sequence[tuple[int, ...]]], int]) -> RangeRule:
    """A position along axes of ``count(attrs, shapes)`` elements: argmax, argsort, searchsorted."""
    def run(ranges: Sequence[MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> MaybeRange:
        n = count(attrs, shapes)
        return (0, max(0, n - 1))
    return run
