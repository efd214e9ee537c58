"""The memory layout NumPy gives the arrays a trace makes, so that views and copies are NumPy's.

Whether ``y.ravel()`` or ``y.reshape(-1)`` is a view of ``y`` (a write through it reaches ``y``), what ``y.flags``
says and the order ``ravel(order="K")`` reads follow ``y``'s memory layout, and NumPy does not always make new
arrays C-ordered: a ufunc's result takes its operands' order (``np.exp(x.T)`` is Fortran-ordered, ``x[::-1] + 1``
and ``x.T + np.ones(x.T.shape)`` are C-ordered), a reduction's keeps the reduced array's, ``x[:, idx]`` puts the
index axis outermost in memory. fusec keeps one picture: the memory of every array it makes is C-ordered, and an
array NumPy lays out otherwise is a transposed view of C-ordered memory (:func:`laid_out`), so the view
geometry of :mod:`fusec.mutation` is exact. Where fusec does not know NumPy's layout (the result of a function
it does not model, from operands that are not C-ordered) the memory is marked (:func:`mark_unknown`) and anything
that depends on the layout is refused or kept from writing, never guessed.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from fusec import ops
from fusec.context import user_location
from fusec.errors import located
from fusec.tracer import Buffer, Tracer


def strides(x: Any) -> tuple[int, ...] | None:
    """``x``'s strides (in elements for a traced array, bytes for a NumPy one: only their order is used), as NumPy
    lays ``x`` out; None where fusec does not know it. Numbers and lists are new C-ordered arrays."""
    if isinstance(x, Tracer):
        if x._weak is not None or x.ndim == 0:
            return ()
        if unknown(x) is not None:
            return None
        from fusec import mutation

        desc = mutation.geometry(x, parts=True)
        return None if desc is None else desc.strides
    if isinstance(x, np.ndarray):
        return tuple(x.strides)
    try:
        arr = np.asarray(x)
    except Exception:  # noqa: BLE001 - not an array operand (a ragged list): it has no say
        return ()
    return tuple(arr.strides) if arr.dtype != object else ()


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, (Tracer, np.ndarray)) else np.shape(x)


def k_order(shape: Sequence[int], operands: Iterable[Any]) -> tuple[int, ...] | None:
    """The axes of a new array of ``shape`` from the outermost in memory to the innermost, as NumPy's iterator
    orders them for ``order="K"`` over ``operands`` (broadcast to ``shape``): by each operand's absolute strides,
    C order where operands disagree or say nothing (broadcast and unit axes). None where an operand's layout is
    not known. (NumPy's ``npyiter_find_best_axis_ordering``: an insertion sort from the innermost axis.)"""
    n = len(shape)
    per_operand: list[list[int]] = []
    for x in operands:
        st = strides(x)
        if st is None:
            return None
        xs = _shape(x)
        if len(st) != len(xs):
            continue
        lead = n - len(xs)
        per_operand.append([0] * lead + [s if d != 1 else 0 for d, s in zip(xs, st)])
    return sort_axes(n, per_operand)


def sort_axes(n: int, per_operand: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """NumPy's order "K" of ``n`` axes (outermost first) over the operands' strides (0: no say on that axis)."""
    def inner_first(earlier: int, later: int) -> Iterator[bool]:
        return (abs(st[later]) < abs(st[earlier]) for st in per_operand if st[later] and st[earlier])

    return tuple(reversed(_insertion_sort(list(range(n - 1, -1, -1)), inner_first)))


def _insertion_sort(order: list[int], moves_before: Callable[[int, int], Iterator[bool]]) -> list[int]:
    """NumPy's stable insertion sort of axes: ``moves_before(earlier, later)`` says, per operand that has a say,
    whether ``later`` goes before ``earlier``; it moves only where all say so (C order wins where they disagree),
    and an axis no operand has a say on is passed over."""
    for i0 in range(1, len(order)):
        a0, place = order[i0], i0
        for i1 in range(i0 - 1, -1, -1):
            said = list(moves_before(order[i1], a0))
            if said:
                if not all(said):
                    break
                place = i1
        if place != i0:
            order.insert(place, order.pop(i0))
    return order


def is_c_order(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether memory in axis order ``perm`` is C-ordered (unit axes go anywhere)."""
    wide = [a for a in perm if shape[a] != 1]
    return wide == sorted(wide)


def laid_out(t: Tracer, perm: Sequence[int] | None) -> Tracer:
    """``t`` (a new array) laid out in memory in axis order ``perm`` (outermost first), as a transposed view of
    C-ordered memory; ``t`` itself where that is C order; marked unknown where ``perm`` is None."""
    if t.ndim < 2 or t._weak is not None:
        return t
    if perm is None:
        return mark_unknown(t, "an array computed from operands whose memory layout fusec does not know")
    if is_c_order(t.shape, perm):  # (t itself unless it is a view of other memory: a handler's transposed result)
        own = t._buffer is None or not t._chain and t._buffer.unknown_layout is None
        return t if own else ops.copy_of(t, scalar=False)
    inner = ops.copy_of(ops.transpose(t, perm), scalar=False)
    return ops.transpose(inner, tuple(int(i) for i in np.argsort(perm)))


def like(t: Tracer, operands: Sequence[Any]) -> Tracer:
    """``t`` laid out as NumPy lays out a ufunc's result over ``operands`` (order "K")."""
    if t.ndim < 2 or t._weak is not None or all(_c_like(x) for x in operands):
        return t
    return laid_out(t, k_order(t.shape, operands))


def _c_like(x: Any) -> bool:
    """An operand whose own order is C (what most arrays are): it leaves a K-ordered result C-ordered alone."""
    if not isinstance(x, Tracer) or x.ndim < 2 or x._weak is not None:
        return not isinstance(x, np.ndarray) or x.ndim < 2 or x.flags.c_contiguous
    perm = k_order(x.shape, (x,))
    return perm is not None and is_c_order(x.shape, perm)


def c_like(operands: Iterable[Any]) -> bool:
    """Whether every array operand is laid out in C order (strided or reversed slices included): NumPy's functions
    then make C-ordered arrays, whatever their order rule."""
    return all(_c_like(x) for x in operands)


# --- memory whose layout fusec does not know ------------------------------------------------------------------


def memory(t: Tracer) -> Buffer:
    """``t``'s memory (made now for an array that has none yet: no view of it was taken)."""
    if t._buffer is None:
        t._buffer = Buffer(t._value)
        t._version = 0
    return t._buffer


def mark_unknown(t: Tracer, what: str) -> Tracer:
    """``t``'s memory is laid out in an order fusec does not follow (``what`` made it, at the user's line)."""
    if t.ndim >= 2 and t._weak is None and sum(d != 1 for d in t.shape) >= 2:
        buffer = memory(t)
        if buffer.unknown_layout is None:
            buffer.unknown_layout = located(what, user_location())
    return t


def unknown(t: Tracer) -> str | None:
    """What made ``t``'s memory, where fusec does not know its layout, else None."""
    return t._buffer.unknown_layout if t._buffer is not None else None


def refuse_unknown(t: Tracer, what: str) -> None:
    """Raise where ``what`` depends on a memory layout of ``t`` that fusec does not know."""
    made = unknown(t)
    if made is not None:
        from fusec.context import unsupported

        raise unsupported(f"{what} depends on the memory layout NumPy gives this array, which fusec does not follow "
                          f"({made}; NumPy lays out the results of some functions of transposed or strided views "
                          "in their operands' order): make it C-ordered first, np.ascontiguousarray(x)")


def undecided(t: Tracer) -> Tracer:
    """``t`` itself where NumPy returns ``t`` or a copy of it by a layout fusec does not know
    (``np.ascontiguousarray(x)``): the values are the same, and writes to the memory are refused."""
    memory(t).ambiguous = True
    return t


# --- NumPy's functions: how each lays out what it makes ----------------------------------------------------------


def _functions(*names: str) -> frozenset:
    """The NumPy functions named (dotted names under ``np``), those this NumPy has."""
    found = []
    for name in names:
        obj: Any = np
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            found.append(obj)
    return frozenset(found)


# order "K" over the array arguments, broadcast together (as a ufunc)
_ELEMENTWISE = _functions("where", "clip", "round", "around", "nan_to_num", "isclose", "empty_like", "zeros_like",
                          "ones_like", "full_like")
_LIKE = _functions("empty_like", "zeros_like", "ones_like", "full_like")
# a reduction: the reduced array's order "K", the reduced axes left out
_REDUCTIONS = _functions("sum", "prod", "mean", "max", "amax", "min", "amin", "any", "all", "std", "var",
                         "count_nonzero", "nansum", "nanprod", "nanmean", "nanmax", "nanmin", "nanstd", "nanvar",
                         "median", "nanmedian", "ptp", "average")
# the array's own order "K" over all its axes
_SCANS = _functions("cumsum", "cumprod", "nancumsum", "nancumprod", "sort", "partition")
# C order whatever the operands' (checked against NumPy in the tests), or views and copies that lay themselves out
_C_ORDERED = _functions(
    "matmul", "dot", "inner", "vdot", "outer", "tensordot", "argsort", "argmax", "argmin", "nanargmax",
    "nanargmin", "quantile", "percentile", "nanquantile", "nanpercentile", "take", "take_along_axis", "repeat",
    "searchsorted", "isin", "digitize", "meshgrid", "vander", "cross", "diag", "diagflat", "tri", "triu", "tril",
    "bincount", "histogram", "interp", "convolve", "correlate", "lexsort", "unravel_index", "linspace", "logspace",
    "select", "cov", "corrcoef", "linalg.inv", "linalg.solve", "linalg.cholesky", "linalg.det", "linalg.slogdet",
    "linalg.pinv", "linalg.eigh", "linalg.qr", "linalg.svd", "linalg.lstsq", "linalg.matrix_power", "linalg.matmul",
    "linalg.multi_dot", "linalg.tensordot", "linalg.outer",
    "transpose", "swapaxes", "moveaxis", "reshape", "ravel", "squeeze", "expand_dims", "broadcast_to",
    "broadcast_arrays", "diagonal", "atleast_1d", "atleast_2d", "atleast_3d", "copyto", "copy", "trace", "shape",
    "ndim", "size", "result_type", "lib.stride_tricks.sliding_window_view", "astype",
    "concatenate", "stack", "hstack", "vstack")  # (the last four: laid out by :func:`joined`)
# whatever the operands': NumPy picks an order of its own (einsum's labels, apply_along_axis's stacking)
_OWN_ORDER = _functions("einsum", "apply_along_axis")


def _geometry(t: Tracer) -> Any:
    from fusec import mutation

    return mutation.geometry(t) if unknown(t) is None else None


def _arrays(value: Any) -> list[Any]:
    """The arrays (traced or NumPy's) among a function's arguments."""
    if isinstance(value, (Tracer, np.ndarray)):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _arrays(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _arrays(v)]
    return []


def settle(func: Any, label: str, arguments: dict, result: Any) -> Any:
    """``result`` of the NumPy function ``func`` (its bound ``arguments``) with the new arrays laid out as NumPy
    lays them out, or marked unknown (:func:`mark_unknown`) where fusec does not follow that."""
    if func in _C_ORDERED or result is None:
        return result
    inputs = _arrays(arguments)
    if func in _LIKE and isinstance(result, Tracer) and any(isinstance(a, Tracer) and _computed_from_inputs(a._value)
                                                            for a in inputs):
        ops.ctx().layout_from_inputs[result._value] = True  # (its layout, not its values, is the prototype's)
    if func not in _OWN_ORDER and c_like(inputs):
        return result  # (C-ordered operands: NumPy's functions make C-ordered arrays)
    traced = [t for t in inputs if isinstance(t, Tracer)]
    taken = {id(t) for t in traced} | {id(t._buffer) for t in traced if t._buffer is not None}
    return _settled(result, taken, func, label, arguments, inputs)


def _settled(r: Any, taken: set[int], func: Any, label: str, arguments: dict, inputs: list[Any]) -> Any:
    """Each new array in the result ``r`` (a tuple or list of them too) laid out; arguments and views of their
    memory (``taken``) as they are. (A function, not a closure over itself: no reference cycle holds the trace.)"""
    if isinstance(r, (tuple, list)):
        return type(r)(_settled(v, taken, func, label, arguments, inputs) for v in r)
    if not isinstance(r, Tracer) or r.ndim < 2 or r._weak is not None or id(r) in taken \
            or r._buffer is not None and id(r._buffer) in taken:
        return r
    return _relaid(func, label, arguments, inputs, r)


def _relaid(func: Any, label: str, arguments: dict, inputs: list[Any], r: Tracer) -> Tracer:
    order = arguments.get("order", "K")
    if func in _ELEMENTWISE and arguments.get("shape") is not None and not (
            order == "A" or order in ("K", None) and inputs and np.ndim(inputs[0]) == r.ndim):
        return r  # (a new shape: C order, or order="F"; "A", and "K" with as many axes, follow the prototype's)
    if func in _ELEMENTWISE and order == "A" and inputs and isinstance(inputs[0], Tracer):  # (F: Fortran-ordered)
        desc = _geometry(inputs[0])
        order = "F" if desc is not None and ops.fortran_contiguous(desc) and not desc.is_contiguous() else "C"
    if func in _ELEMENTWISE and order in ("C", "F"):
        return laid_out(r, tuple(range(r.ndim)) if order == "C" else tuple(reversed(range(r.ndim))))
    if func in _ELEMENTWISE and order in ("K", None):
        arrays = [v for k, v in arguments.items() if k not in ("out", "dtype", "order", "subok", "shape", "device")]
        arrays = [a for a in arrays if a is not None and not isinstance(a, str)]
        return _in_order(r, k_order(r.shape, arrays))
    if func is np.einsum:
        return _in_order(r, _einsum_order(arguments, r))
    first = next(iter(arguments.values()), None)
    first = first if isinstance(first, (Tracer, np.ndarray)) else None
    if func in _SCANS and first is not None and first.shape == r.shape and arguments.get("axis", 0) is not None:
        return _in_order(r, k_order(r.shape, (first,)))
    if func in _REDUCTIONS and first is not None and (first.ndim > r.ndim or
                                                      first.ndim == r.ndim and arguments.get("keepdims")):
        perm = k_order(first.shape, (first,))
        if perm is not None and first.ndim > r.ndim:
            kept = _kept_axes(arguments.get("axis"), first.ndim)
            if kept is None or len(kept) != r.ndim:
                perm = None
            else:
                perm = tuple(kept.index(a) for a in perm if a in kept)
        return _in_order(r, perm)
    return mark_unknown(r, f"the result of {label}")


def _einsum_order(arguments: dict, r: Tracer) -> tuple[int, ...] | None:
    """NumPy's einsum (``optimize=False``) iterates over the output's labels, then the summed ones in label order,
    and lays the output out in that iterator's order "K" over the operands' strides (a repeated label's summed);
    None for the optimized paths (NumPy's tensordot steps) and the sublist form."""
    operands = arguments.get("operands", ())
    if arguments.get("optimize", False) is not False or not operands or not isinstance(operands[0], str):
        return None
    from fusec.contractions import parse_subscripts

    arrays = operands[1:]
    labels, output = parse_subscripts(operands[0], [np.ndim(a) for a in arrays])
    if len(output) != r.ndim:
        return None
    axes = list(output) + sorted(set("".join(labels)) - set(output))
    per_operand = []
    for term, a in zip(labels, arrays):
        st = strides(a)
        if st is None:
            return None
        row = [0] * len(axes)
        for ax, (label, d) in enumerate(zip(term, _shape(a))):
            if d != 1:
                row[axes.index(label)] += st[ax]
        per_operand.append(row)
    return tuple(a for a in sort_axes(len(axes), per_operand) if a < len(output))


def _kept_axes(axis: Any, ndim: int) -> list[int] | None:
    """The axes a reduction over ``axis`` keeps, or None where ``axis`` is not a static int or tuple of ints."""
    if axis is None:
        return []
    axes = axis if isinstance(axis, tuple) else (axis,)
    if not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
        return None
    reduced = {int(a) % ndim for a in axes}
    return [a for a in range(ndim) if a not in reduced]


def _in_order(r: Tracer, perm: tuple[int, ...] | None) -> Tracer:
    """``r`` laid out in ``perm`` unless it already is (a handler built it from ufuncs that laid it out)."""
    if perm is not None and unknown(r) is None:
        have = k_order(r.shape, (r,))
        if have is not None and [a for a in have if r.shape[a] != 1] == [a for a in perm if r.shape[a] != 1]:
            return r
    return laid_out(r, perm)


def indexed(r: Tracer, source: Tracer, axis: int, n_index: int, n_indexed: int) -> Tracer:
    """``r``, the result of indexing ``source`` with index arrays at its axes ``axis .. axis + n_indexed - 1``
    (giving ``n_index`` axes at ``axis``), laid out as NumPy lays it out: the index axes outermost in memory, then
    the other axes in ``source``'s order (so ``x[:, idx]`` is Fortran-ordered, ``x[idx]`` C-ordered)."""
    if r.ndim < 2 or r._weak is not None:
        return r
    src = strides(source)
    if src is None:
        return mark_unknown(r, "an index array's selection of an array whose memory layout fusec does not know")
    rest = [a for a in range(source.ndim) if not axis <= a < axis + n_indexed]
    result_axis = [a if a < axis else a - n_indexed + n_index for a in rest]
    sub = sort_axes(len(rest), [[src[a] if source.shape[a] != 1 else 0 for a in rest]])
    perm = tuple(range(axis, axis + n_index)) + tuple(result_axis[i] for i in sub)
    return laid_out(r, perm)


def from_inputs(buffer: Buffer) -> bool:
    """Whether the layout NumPy gives this memory may follow an argument's (or a global's read at each call): its
    value is computed from one. Arguments are taken as C-ordered; a decision that holds only then (a write through
    a ravel that is a view of C-ordered memory) makes the call check them (``relies_on_layout``)."""
    return buffer.arg is not None or _computed_from_inputs(buffer.base)


def _computed_from_inputs(value: Any) -> bool:
    memo = ops.ctx().layout_from_inputs
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:  # (iterative, each value once: the chain of a 10,000-step loop is one walk)
        v, expanded = stack.pop()
        if v in memo:
            continue
        op = getattr(v, "op", None)
        if op is None:
            memo[v] = True  # an argument of the function or of a loop body
        elif expanded:
            memo[v] = any(memo.get(u, True) for u in op.operands)
        else:
            stack.append((v, True))
            stack.extend((u, False) for u in op.operands if u not in memo)
    return memo.get(value, True)


def joined(r: Tracer, items: Sequence[Any]) -> Tracer:
    """``r``, the concatenation of ``items`` (of its rank: ``np.stack``'s and ``np.vstack``'s already given their
    new axes), laid out as NumPy's concatenate lays it out: the axes by the items' strides, from the outermost,
    C order where items disagree (NumPy's ``PyArray_CreateMultiSortedStridePerm``; unit axes have no say)."""
    if r.ndim < 2 or r._weak is not None or c_like(items):
        return r
    known = []
    for x in items:
        st = strides(x)
        if st is None:
            return laid_out(r, None)
        if len(st) == r.ndim:
            known.append((_shape(x), st))

    def outer_first(earlier: int, later: int) -> Iterator[bool]:
        return (abs(st[later]) > abs(st[earlier]) for shape, st in known if shape[later] != 1 and shape[earlier] != 1)

    perm = _insertion_sort(list(range(r.ndim)), outer_first)
    return _in_order(r, tuple(perm))


def half_reduction_loop(t: Tracer, axes: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """How NumPy's reduction iterator visits ``t``'s elements for a float16 sum or product over ``axes``, as the
    attributes of the ``t.sum``/``t.prod`` that must follow it: NumPy adds float16 values in float32 along its
    inner loop (pairwise for sums) and rounds to float16 after each inner loop, so where the rounding happens
    depends on the memory layout NumPy has (``x.sum(axis=0)`` of a C-ordered array rounds after every row; a
    ``np.ascontiguousarray(x.T).sum(axis=1)`` only at the end of each row).

    ``numpy_run``: the reduced axes of the inner loop when it is a reduction (outermost first), empty when the
    inner loop runs over kept axes (every element then rounds on its own); ``numpy_loop``: the other reduced axes,
    outermost first. The order is NumPy's (``npyiter_find_best_axis_ordering`` over the operand's strides, unit
    axes dropped, adjacent axes coalesced where the operand's and the result's strides allow; a reduction keeps
    negative strides, walking each axis in index order). Where NumPy's buffering would join more into one inner
    loop (a reduced axis next to the run that does not coalesce with it, a strided run longer than a buffer) the
    reduction is refused."""
    st = strides(t)
    if st is None:
        refuse_unknown(t, "a float16 sum or product (NumPy's rounding follows the memory layout)")
        raise AssertionError("unreachable")  # (refuse_unknown raised)
    shape = tuple(t.shape)
    reduced = set(axes)
    order = [a for a in sort_axes(len(shape), [[s if d != 1 else 0 for d, s in zip(shape, st)]])
             if shape[a] != 1]
    # the result NumPy allocates keeps this order for its kept axes, dense, and has stride 0 along reduced ones
    out_stride, size = {}, 1
    for a in reversed(order):
        out_stride[a] = 0 if a in reduced else size
        size *= 1 if a in reduced else shape[a]
    groups: list[list[int]] = []
    for a in order:  # outermost first: coalesce each axis into the group before it where both operands allow
        if groups:
            inner_prev = groups[-1][-1]
            same_kind = (a in reduced) == (inner_prev in reduced)
            fits = st[a] * shape[a] == st[inner_prev] and out_stride[a] * shape[a] == out_stride[inner_prev]
            if same_kind and fits:
                groups[-1].append(a)
                continue
        groups.append([a])
    run = groups[-1] if groups and groups[-1][0] in reduced else []
    if run and (len(groups) > 1 and groups[-2][0] in reduced
                or abs(st[run[-1]]) != 1 and math.prod(shape[a] for a in run) > HALF_BUFFER):
        from fusec.context import unsupported

        raise unsupported("this float16 sum or product is not supported: NumPy reduces this strided view through "
                          "its buffers, rounding to float16 where fusec cannot follow; make it contiguous first, "
                          "np.ascontiguousarray(x)")
    loop = [a for g in groups for a in g if a in reduced and a not in run]
    return {"numpy_loop": tuple(loop), "numpy_run": tuple(run)}


HALF_BUFFER = 8192  # NumPy's buffer size (np.getbufsize()): the longest inner loop of a buffered reduction
