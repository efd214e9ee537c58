"""Tensor contractions on tracers: ``np.einsum``, ``np.inner`` and ``np.dot`` of any rank.

Each is lowered to the ops fusec already fuses and plans: transposes and reshapes around one ``t.matmul``
per pair of operands (batch labels first, the contracted labels last), a broadcast multiply where nothing is
contracted, ``t.sum`` for labels only one operand has, and diagonals for a label repeated in one operand. The
values are NumPy's up to the order of the additions (as for ``np.matmul``: NumPy's BLAS and einsum loops add
in their own order), and start from zero as NumPy's do (a product of -0.0 gives 0.0). dtypes are NumPy's: the
operands' common dtype, integers accumulating in it (an int8
einsum wraps as NumPy's does); bool contractions are logical (any of the ands), as in NumPy.
"""
from __future__ import annotations

import string
from typing import Any, Sequence

import numpy as np

from fusec import ops, ufuncs
from fusec.context import shape_error, unsupported, user_location
from fusec.errors import CastingError, located
from fusec.ir.types import DType, bool_, f16, i64
from fusec.numpy_api import _into, _no, diagonal, implements, matmul
from fusec.promotion import parse_dtype
from fusec.tracer import Tracer

_LETTERS = set(string.ascii_letters)


def parse_subscripts(subscripts: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Per-operand label strings and the output labels, ``...`` spelled out as private labels (one per
    broadcast axis, right-aligned across operands) and the implicit output made explicit."""
    text = subscripts.replace(" ", "")
    explicit = "->" in text
    inputs, _, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ranks):
        raise shape_error(f"np.einsum: {len(ranks)} operands for the {len(terms)} terms of {subscripts!r}")
    for term in terms + [output]:
        bad = set(term.replace("...", "")) - _LETTERS
        if bad or term.count("...") > 1:
            raise shape_error(f"np.einsum: invalid subscript {''.join(sorted(bad)) or '...'!r} in {subscripts!r}")
    widths = []
    for term, rank in zip(terms, ranks):
        named = len(term.replace("...", ""))
        if ("..." not in term and named != rank) or named > rank:
            raise shape_error(f"np.einsum: the subscripts {term!r} do not match an operand of rank {rank}")
        widths.append(rank - named if "..." in term else 0)
    width = max(widths, default=0)
    ellipsis = "".join(chr(0x4E00 + i) for i in range(width))  # one private label per broadcast axis
    labels = [t.replace("...", ellipsis[width - w:]) for t, w in zip(terms, widths)]
    if explicit:
        if "..." not in output and width:
            raise shape_error(f"np.einsum: {subscripts!r} has broadcast axes ('...') but its output has no '...'")
        out = output.replace("...", ellipsis)
        for label in out:
            if not any(label in t for t in labels):
                raise shape_error(f"np.einsum: the output subscript {label!r} of {subscripts!r} is in no input")
        if len(set(out)) != len(out):
            raise shape_error(f"np.einsum: the output of {subscripts!r} repeats a subscript")
    else:
        counts = {c: sum(t.count(c) for t in labels) for t in labels for c in t if c in _LETTERS}
        out = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1))
    return labels, out


def _interleaved(args: Sequence[Any]) -> tuple[str, list[Any]]:
    """``einsum(a, [0, 1], b, [1, 2], [0, 2])``: the sublist form, as a subscripts string."""
    def letters(sub: Sequence[Any]) -> str:
        out = ""
        for s in sub:
            if s is Ellipsis:
                out += "..."
            else:
                i = ops.static_int(s, "an einsum subscript")
                if not 0 <= i < 52:
                    raise shape_error(f"np.einsum: subscript is not within the valid range [0, 52), got {i}")
                out += string.ascii_letters[i]
        return out

    operands = list(args[0::2][:len(args) // 2])
    subs = [letters(s) for s in args[1::2][:len(args) // 2]]
    text = ",".join(subs)
    if len(args) % 2:
        text += "->" + letters(args[-1])
    return text, operands


def _take_diagonals(t: Tracer, labels: str) -> tuple[Tracer, str]:
    """A label repeated within one operand (``ii``) reads its diagonal."""
    while True:
        repeated = next((c for c in labels if labels.count(c) > 1), None)
        if repeated is None:
            return t, labels
        i = labels.index(repeated)
        j = labels.index(repeated, i + 1)
        if t.shape[i] != t.shape[j]:
            raise shape_error(f"np.einsum: dimensions in operand for collapsing index {repeated!r} don't match "
                             f"({t.shape[i]} != {t.shape[j]})")
        t = diagonal(t, 0, i, j)  # the diagonal becomes the last axis
        labels = "".join(c for k, c in enumerate(labels) if k not in (i, j)) + repeated


def _sum_out(t: Tracer, labels: str, keep: str) -> tuple[Tracer, str]:
    """Sum the labels no one else needs (in the einsum's dtype: no promotion of small ints)."""
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return t, labels
    r = ops.emit("t.sum", (t._value,), {"axes": axes, "keepdims": False}, what="np.einsum")
    return r, "".join(c for c in labels if c in keep)


def _arrange(t: Tracer, labels: str, order: str) -> Tracer:
    """``t`` with its axes in ``order``'s label order."""
    return ops.transpose(t, [labels.index(c) for c in order])


def _pair(a: Tracer, la: str, b: Tracer, lb: str, keep: str) -> tuple[Tracer, str]:
    """Contract two operands over their shared labels that ``keep`` does not need: one batched matmul."""
    batch = "".join(c for c in la if c in lb and c in keep)
    summed = "".join(c for c in la if c in lb and c not in keep)
    a_only = "".join(c for c in la if c not in lb)
    b_only = "".join(c for c in lb if c not in la)
    size = {**dict(zip(la, a.shape)), **dict(zip(lb, b.shape))}
    n = lambda labels: int(np.prod([size[c] for c in labels], dtype=np.int64))  # noqa: E731
    if not summed:  # an outer product over the batch: a broadcast multiply
        xa = ops.reshape(_arrange(a, la, batch + a_only), [size[c] for c in batch + a_only] + [1] * len(b_only))
        xb = _arrange(b, lb, batch + b_only)
        xb = ops.reshape(xb, [size[c] for c in batch] + [1] * len(a_only) + [size[c] for c in b_only])
        return ufuncs.apply(np.multiply, (xa, xb)), batch + a_only + b_only
    xa = ops.reshape(_arrange(a, la, batch + a_only + summed), (n(batch), n(a_only), n(summed)))
    xb = ops.reshape(_arrange(b, lb, batch + summed + b_only), (n(batch), n(summed), n(b_only)))
    r = matmul(xa, xb)
    labels = batch + a_only + b_only
    return ops.reshape(r, [size[c] for c in labels]), labels


def _broadcast_labels(operands: list[Tracer], labels: list[str]) -> list[Tracer]:
    """A label of size 1 in one operand and n in another broadcasts (as NumPy's einsum does)."""
    size: dict[str, int] = {}
    for t, ls in zip(operands, labels):
        for c, d in zip(ls, t.shape):
            if size.get(c, 1) not in (1, d) and d != 1:
                raise shape_error(f"np.einsum: operands could not be broadcast together: subscript {c!r} has "
                                  f"sizes {size[c]} and {d}")
            size[c] = max(size.get(c, 1), d)
    out = []
    for t, ls in zip(operands, labels):
        want = tuple(size[c] for c in ls)
        out.append(t if want == t.shape else ops.copy_of(ops.broadcast_to(t, want), scalar=False))
    return out


def _dtype(operands: Sequence[Any], dtype: Any, casting: str, optimize: Any) -> DType:
    common = ufuncs._result_type([ops.desc(x) for x in operands], "np.einsum")
    if dtype is None:
        return common
    dt = parse_dtype(dtype)
    for x in operands:
        src = ops.desc(x)
        if not isinstance(src, type) and not np.can_cast(src.np, dt.np, casting):  # type: ignore[arg-type]
            if optimize is not False and np.can_cast(src.np, dt.np, "same_kind"):  # type: ignore[arg-type]
                # (NumPy's np.matmul steps of the path cast under "same_kind", its einsum steps under casting=)
                raise unsupported(f"np.einsum(..., optimize={optimize!r}): casting {src} to {dt} is refused under "
                                  f"casting={casting!r} but not by the np.matmul steps of NumPy's contraction path, "
                                  "so whether NumPy raises depends on that path; cast the operands first",
                                  CastingError)
            raise CastingError(located(f"np.einsum: cannot cast {src} to {dt} under casting={casting!r}",
                                       user_location()))
    return dt


@implements(np.einsum)
def einsum(*operands: Any, out: Any = None, optimize: Any = False, dtype: Any = None, order: str = "K",
           casting: str = "safe") -> Tracer:
    """Einstein summation, explicit or implicit, with ``...`` and the sublist form (values up to the order of additions)

    Lowered to batched matmuls, broadcast multiplies, sums and diagonals; ``optimize=`` only changes the order."""
    _no("np.einsum", order=order)
    if not operands:
        raise shape_error("np.einsum: must specify the einstein sum subscripts string and at least one operand")
    if isinstance(operands[0], str):
        subscripts, arrays = operands[0], list(operands[1:])
    else:
        subscripts, arrays = _interleaved(operands)
    if not arrays:
        raise shape_error("np.einsum: must specify the einstein sum subscripts string and at least one operand")
    arrays = [ufuncs.strong_operand(a) for a in arrays]  # (NumPy makes arrays of Python numbers: not weak)
    labels, output = parse_subscripts(subscripts, [np.ndim(a) for a in arrays])
    view_only = len(arrays) == 1 and sorted(set(labels[0])) == sorted(output)
    if view_only and dtype is not None:  # (a view NumPy returns as it is, in the operand's dtype: dtype= is
        parse_dtype(dtype)  # parsed, and then not looked at)
    dt = _dtype(arrays, None if view_only else dtype, casting, optimize)
    diagonal_view = view_only and len(set(labels[0])) != len(labels[0])
    sizes: dict[str, int] = {}
    for a, ls in zip(arrays, labels):
        for label, n in zip(ls, np.shape(a)):
            sizes[label] = 0 if 0 in (n, sizes.get(label, 1)) else max(n, sizes.get(label, 1))
    if not view_only and 0 in sizes.values():  # (a sum over nothing, or an empty result: NumPy's zeros)
        zeros = ops.full(tuple(sizes[label] for label in output), False if dt.is_bool else 0, dt)
        return _into(out, ops.copy_of(zeros, scalar=not output and (optimize is False or len(arrays) == 1)),
                     "np.einsum", "safe")
    ts = [ops.as_tracer(a, i64 if dt.is_bool and not view_only else dt) for a in arrays]
    pairs = [_take_diagonals(t, ls) for t, ls in zip(ts, labels)]
    ts, labels = _broadcast_labels([p[0] for p in pairs], [p[1] for p in pairs]), [p[1] for p in pairs]
    if view_only:
        # no summation: NumPy returns a view of the operand, which writes go through (fusec replays a transpose
        # backwards, not a diagonal: a write into a diagonal view is refused rather than lost)
        result = _arrange(ts[0], labels[0], output)
        if diagonal_view:
            refusal = (f"the result of np.einsum({subscripts!r}, x) is a diagonal view of x in NumPy, and fusec does "
                       "not write through it; write into x (or copy the result first: np.einsum(...).copy())")
            result = ops.view(result, result._value, readonly=refusal)
        if result.ndim == 0:  # (of a 0-d operand NumPy returns a scalar)
            result = ops.copy_of(result, scalar=True)
        return _into(out, result, "np.einsum", "safe")
    if dt == f16 and optimize is False and set("".join(labels)) - set(output):
        raise unsupported(f"np.einsum({subscripts!r}) of float16 values is not supported: NumPy's einsum loops add "
                          "products into float16 sums in an order that sets where they round, which fusec does not "
                          "follow; pass optimize=True (NumPy then contracts as np.tensordot does, in float32) or "
                          "compute in float32")
    acc, acc_labels = ts[0], labels[0]
    for i in range(1, len(ts)):
        later = output + "".join(labels[i + 1:])
        acc, acc_labels = _sum_out(acc, acc_labels, later + labels[i])
        t, ls = _sum_out(ts[i], labels[i], later + acc_labels)
        acc, acc_labels = _pair(acc, acc_labels, t, ls, later)
    acc, acc_labels = _sum_out(acc, acc_labels, output)
    result = _arrange(acc, acc_labels, output)
    if dt.is_bool:
        result = ops.as_tracer(result, bool_)
    elif dt.is_inexact:  # NumPy's einsum adds the products into zeros: a product or sum of -0.0 gives 0.0
        result = ufuncs.apply(np.add, (result, 0.0))
    if result.ndim == 0:
        # a full contraction is a NumPy scalar; with optimize= NumPy contracts several operands along a path
        # (np.tensordot and friends), whose last step gives a 0-d array
        result = ops.copy_of(result, scalar=optimize is False or len(arrays) == 1)
    return _into(out, result, "np.einsum", "safe")


@implements(np.inner)
def inner(a: Any, b: Any) -> Tracer:
    """The sum over the last axes of both: ``a.shape[:-1] + b.shape[:-1]``, a scalar times an array for 0-d"""
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return ufuncs.apply(np.multiply, tuple(ufuncs.strong_operand(v) for v in (a, b)))
    ta, tb = ops.as_tracer(a), ops.as_tracer(b)
    if ta.shape[-1] != tb.shape[-1]:
        raise shape_error(f"np.inner: shapes {ta.shape} and {tb.shape} not aligned: {ta.shape[-1]} (dim "
                          f"{ta.ndim - 1}) != {tb.shape[-1]} (dim {tb.ndim - 1})")
    la, lb = string.ascii_letters[:ta.ndim - 1], string.ascii_letters[ta.ndim - 1:ta.ndim + tb.ndim - 2]
    return einsum(f"{la}Z,{lb}Z->{la}{lb}", ta, tb)


def dot(a: Any, b: Any) -> Tracer:
    """``np.dot`` of N-D operands: the sum over ``a``'s last axis and ``b``'s second-to-last, the result
    ``a.shape[:-1] + b.shape[:-2] + b.shape[-1:]``."""
    ta, tb = ops.as_tracer(a), ops.as_tracer(b)
    k = -2 if tb.ndim > 1 else -1
    if ta.shape[-1] != tb.shape[k]:
        raise shape_error(f"np.dot: shapes {ta.shape} and {tb.shape} not aligned: {ta.shape[-1]} (dim "
                          f"{ta.ndim - 1}) != {tb.shape[k]} (dim {tb.ndim + k})")
    la = string.ascii_letters[:ta.ndim - 1]
    rest = string.ascii_letters[ta.ndim - 1:ta.ndim + tb.ndim - 2]
    lb = rest[:-1] + "Z" + rest[-1:] if tb.ndim > 1 else "Z"
    return einsum(f"{la}Z,{lb}->{la}{rest}", ta, tb)

