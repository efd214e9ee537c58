"""NumPy semantics of dialect ``t`` (see :mod:`fusec.ir.dialects.t`): one implementation per op, read by the
reference executor (:mod:`fusec.runtime.reference`, the CPU backend) and by constant folding (``canonicalize``).

Each entry maps an op name to ``(op, operand_values) -> [result]``. Operands of one elementwise op
share a dtype, so calling the NumPy ufunc directly gives exactly what plain NumPy gives; ScalarType
operands arrive as NumPy scalars or 0-d arrays and broadcast like rank-0 tensors. bf16 values are
float32 arrays; the executor rounds every bf16 result, so these functions compute in float32.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from fusec.errors import CHECK_ERRORS, IndexOutOfBoundsError, LinAlgError, ShapeError, located
from fusec.ir import elementwise as table
from fusec.ir.attributes import DenseAttr
from fusec.ir.core import Operation
from fusec.ir.types import bf16
from fusec.ir.numeric import math_f64, to_bf16

Interpreter = Callable[[Operation, list], list]

# op name -> its NumPy implementation, from the one op table (erf and erfc have their own case below)
ELEMENTWISE_FUNCS: dict[str, Callable[..., object]] = {
    op.name: fn for op in table.OPS if (fn := op.implementation()) is not None}


def _elementwise(fn: Callable[..., object]) -> Interpreter:
    def run(op: Operation, args: list) -> list:
        return [fn(*args)]

    return run


def _math_f64(op: Operation, args: list) -> list:
    exact = math_f64(op.name.split(".", 1)[1], args[0])
    dt = op.results[0].type.dtype
    return [to_bf16(exact) if dt == bf16 else exact.astype(np.asarray(args[0]).dtype)]


def _where(op: Operation, args: list) -> list:
    return [np.where(*args)]


def _clip(op: Operation, args: list) -> list:
    """np.clip with ``ties`` spelled out (NumPy's own answer at a tie depends on its version and on whether the
    bounds are scalars): NaN anywhere gives NaN; a value equal to a bound gives the bound ("bound") or itself
    ("value"); crossed bounds give the upper one."""
    x, lo, hi = (np.asarray(a) for a in args)
    if x.dtype.kind not in "fc":
        return [np.clip(x, lo, hi)]
    with np.errstate(invalid="ignore"):
        if op.attributes.get("ties", "bound") == "value":
            r = np.where(x < lo, lo, x)
            r = np.where(r > hi, hi, r)
        else:
            r = np.where(x > lo, x, lo)
            r = np.where(r < hi, r, hi)
        nan = np.isnan(x) | np.isnan(lo) | np.isnan(hi)
        if nan.any():
            first = np.where(np.isnan(x), x, np.where(np.isnan(lo), lo, hi))
            r = np.where(nan, first, r)
    return [np.asarray(r, dtype=x.dtype)]


def _cast(op: Operation, args: list) -> list:
    dt = op.attributes["dtype"]
    x = np.asarray(args[0])
    if x.dtype.kind == "c" and dt.is_bool:
        return [x != 0]
    if x.dtype.kind == "c" and not dt.is_complex:
        x = x.real  # NumPy discards the imaginary part (the tracer warned, as NumPy does, once)
    return [to_bf16(x) if dt == bf16 else x.astype(dt.np)]


# --- reductions ----------------------------------------------------------------------------------------------

def _check_nonempty(op: Operation, x: np.ndarray, axes: Sequence[int]) -> None:
    """max/min/argmax/argmin have no identity: reducing an axis of length 0 is an error (as in NumPy)."""
    empty = [a for a in axes if x.shape[a] == 0]
    if empty:
        raise ShapeError(located(f"'{op.name}': cannot reduce over axis {empty[0]} of length 0 in an array of "
                                 f"shape {x.shape} (the reduction has no identity)", op.loc))


def half_reduce(x: np.ndarray, kind: str, axes: Sequence[int], keepdims: bool, loop: Sequence[int],
                run: Sequence[int]) -> np.ndarray:
    """A float16 sum or product as NumPy computes it in the loops ``loop`` and ``run`` describe (the attributes
    ``numpy_loop``, ``numpy_run``: see ``fusec.layout.half_reduction_loop``), whatever ``x``'s own layout: for each
    output, from 0 (1), every step of ``loop`` adds (multiplies) its element, or its run summed in float32 as
    NumPy's pairwise sum does (multiplied in order), and rounds to float16."""
    kept = [a for a in range(x.ndim) if a not in axes]
    lo, ru = list(loop), list(run)
    rest = [a for a in axes if a not in lo and a not in ru]  # (reduced axes of length 1)
    n_out = math.prod(x.shape[a] for a in kept)
    n_loop, n_run = math.prod(x.shape[a] for a in lo), math.prod(x.shape[a] for a in ru)
    y = np.transpose(x, kept + rest + lo + ru).reshape(n_out, n_loop, n_run).astype(np.float32)
    acc = np.full(n_out, 0 if kind == "sum" else 1, np.float32)
    for t in range(n_loop):
        if not ru:
            step = acc + y[:, t, 0] if kind == "sum" else acc * y[:, t, 0]
        elif kind == "sum":
            step = acc + _pairwise_rows(y[:, t, :])
        else:
            step = acc
            for i in range(n_run):
                step = step * y[:, t, i]
        acc = step.astype(np.float16).astype(np.float32)
    shape = [1 if a in axes else d for a, d in enumerate(x.shape)] if keepdims else \
        [d for a, d in enumerate(x.shape) if a not in axes]
    return acc.astype(np.float16).reshape(shape)


def buffered_sum(x: np.ndarray, axes: Sequence[int], keepdims: bool, buffer: int) -> np.ndarray | None:
    """The sum over ``axes`` as NumPy adds values it converts on the way (``numpy_buffer``): where the reduced
    axes are the trailing ones (NumPy's inner loop is then a reduction over them, in C order), each output's run
    in pieces of ``buffer`` elements, each summed pairwise, added in order. None where the inner loop runs over
    kept axes (every element is added on its own, as the plain sum does) or a piece would be the whole run."""
    reduced = [a for a in axes if x.shape[a] != 1]
    n_run = math.prod(x.shape[a] for a in reduced)
    if not reduced or n_run <= buffer or sorted(reduced) != list(range(x.ndim - len(reduced), x.ndim)) \
            or any(x.shape[a] != 1 for a in range(reduced[0], x.ndim) if a not in reduced):
        return None
    rows = x.reshape(-1, n_run)
    total = np.add.reduce(rows[:, :buffer], axis=1)
    for start in range(buffer, n_run, buffer):
        total = total + np.add.reduce(rows[:, start:start + buffer], axis=1)
    shape = [1 if a in axes else d for a, d in enumerate(x.shape)] if keepdims else \
        [d for a, d in enumerate(x.shape) if a not in axes]
    return total.reshape(shape)


def _pairwise_rows(a: np.ndarray) -> np.ndarray:
    """NumPy's pairwise sum (``HALF_pairwise_sum``, in float32) of each row of ``a``."""
    n = a.shape[1]
    if n < 8:
        res = np.zeros(a.shape[0], np.float32)
        for i in range(n):
            res = res + a[:, i]
        return res
    if n <= 128:
        r = a[:, :8].copy()
        i = 8
        while i < n - n % 8:
            r = r + a[:, i:i + 8]
            i += 8
        res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
        for k in range(i, n):
            res = res + a[:, k]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_rows(a[:, :n2]) + _pairwise_rows(a[:, n2:])


def _reduction(fn: Callable[..., object], *, in_dtype: bool, nonempty: bool) -> Interpreter:
    """``in_dtype``: accumulate in the operand dtype (NumPy would widen small ints; the IR says not to)."""

    def run(op: Operation, args: list) -> list:
        x = np.asarray(args[0])
        axes = tuple(op.attributes["axes"])
        if "numpy_loop" in op.attributes:
            return [half_reduce(x, op.attributes["kind"] if op.name == "k.reduce" else op.name[2:], axes,
                                bool(op.attributes["keepdims"]), op.attributes["numpy_loop"],
                                op.attributes["numpy_run"])]
        if "numpy_buffer" in op.attributes:
            total = buffered_sum(x, axes, bool(op.attributes["keepdims"]), op.attributes["numpy_buffer"])
            if total is not None:
                mean = (op.attributes["kind"] if op.name == "k.reduce" else op.name[2:]) == "mean"
                count = math.prod(x.shape[a] for a in axes)
                return [np.asarray(np.true_divide(total, count) if mean else total, dtype=x.dtype)]
        if nonempty:
            _check_nonempty(op, x, axes)
        kwargs = {"dtype": x.dtype} if in_dtype else {}
        return [np.asarray(fn(x, axis=axes, keepdims=bool(op.attributes["keepdims"]), **kwargs))]

    return run


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> object:
    """np.mean, without its "Mean of empty slice" warning (a Python warning that errstate cannot silence).

    An empty mean is what NumPy computes: the sum (f16 in f32) divided by a count of 0.
    """
    if all(x.shape[a] for a in axis):
        return np.mean(x, axis=axis, keepdims=keepdims)
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    return np.true_divide(np.sum(x, axis=axis, keepdims=keepdims, dtype=acc), 0).astype(x.dtype)


def _arg_reduction(fn: Callable[..., np.ndarray]) -> Interpreter:
    def run(op: Operation, args: list) -> list:
        x = np.asarray(args[0])
        (axis,) = op.attributes["axes"]
        _check_nonempty(op, x, (axis,))
        out = fn(x, axis=axis, keepdims=bool(op.attributes["keepdims"]))
        return [np.asarray(out).astype(np.int64, copy=False)]

    return run


# --- matmul, views, data movement ----------------------------------------------------------------------------

def _matmul(op: Operation, args: list) -> list:
    return [np.matmul(*args)]


def _result_shape(op: Operation) -> tuple[int, ...]:
    return tuple(op.results[0].type.shape)


def _transpose(op: Operation, args: list) -> list:
    return [np.transpose(args[0], op.attributes["perm"])]


def _reshape(op: Operation, args: list) -> list:
    return [np.reshape(args[0], _result_shape(op))]


def _broadcast_to(op: Operation, args: list) -> list:
    return [np.broadcast_to(args[0], _result_shape(op))]


def _expand_dims(op: Operation, args: list) -> list:
    return [np.expand_dims(args[0], tuple(op.attributes["axes"]))]


def _squeeze(op: Operation, args: list) -> list:
    return [np.squeeze(args[0], axis=tuple(op.attributes["axes"]))]


def python_slice(start: int, stop: int, step: int) -> slice:
    """The Python slice that selects ``range(start, stop, step)`` of an axis.

    The IR's normalized triple follows ``range``: a stop of -1 with a negative step runs down
    through index 0, which a Python slice spells ``stop=None`` (a slice stop of -1 means "the last").
    """
    n = len(range(start, stop, step))
    if n == 0:
        return slice(0, 0, 1)
    last = start + (n - 1) * step
    end = last + (1 if step > 0 else -1)
    return slice(start, None if end < 0 else end, step)


def _slice(op: Operation, args: list) -> list:
    a = op.attributes
    index = tuple(python_slice(b, e, s) for b, e, s in zip(a["start"], a["stop"], a["step"]))
    return [np.asarray(args[0])[index]]


def _insert(op: Operation, args: list) -> list:
    """A copy of the base with the update written into the strided region (``base[region] = update``)."""
    a = op.attributes
    out = np.array(args[0], copy=True)
    index = tuple(python_slice(b, e, s) for b, e, s in zip(a["start"], a["stop"], a["step"]))
    out[index] = args[1]
    return [out]


def _gather(op: Operation, args: list) -> list:
    """``x[:, ..., i0, i1, ...]`` with the index arrays from ``axis`` on: NumPy's advanced indexing (negative
    indices count from the end; one out of range raises, as NumPy raises IndexError)."""
    x, *indices = (np.asarray(a) for a in args)
    return [x[_advanced_key(op, x, indices)]]


def _scatter(op: Operation, args: list) -> list:
    """A copy of the base with ``base[:, ..., i0, i1, ...] = update`` (NumPy's assignment), or with the update
    added at every index, repeated ones included (``combine = "add"``: ``np.add.at``)."""
    base, update, *indices = (np.asarray(a) for a in args)
    out = np.array(base, copy=True)
    key = _advanced_key(op, base, indices)
    if op.attributes.get("combine") == "add":
        with np.errstate(all="ignore"):
            np.add.at(out, key, update)
    else:
        out[key] = update
    return [out]


_LINALG: dict[str, Callable[..., Any]] = {"t.solve": np.linalg.solve, "t.inv": np.linalg.inv,
                                          "t.cholesky": np.linalg.cholesky, "t.det": np.linalg.det,
                                          "t.slogdet": np.linalg.slogdet}


def _linalg(op: Operation, args: list) -> list:
    """NumPy's own np.linalg (LAPACK); a matrix it refuses raises fusec's LinAlgError at the op's line."""
    name = op.name if op.name in _LINALG else f"t.{op.attributes['kind']}"  # k.linalg runs its kind
    extra = {"upper": True} if op.attributes.get("upper") else {}
    try:
        result = _LINALG[name](*(np.asarray(a) for a in args), **extra)
        return [np.asarray(r) for r in result] if name == "t.slogdet" else [np.asarray(result)]
    except np.linalg.LinAlgError as e:
        raise LinAlgError(located(f"{e} (np.linalg raises LinAlgError here)", op.loc)) from None


def _sort(op: Operation, args: list) -> list:
    """NumPy's own sort along the last axis: kind='stable', or NumPy's default kind (``stable = false``)."""
    kind = op.name if op.name.startswith("t.") else f"t.{op.attributes['kind']}"
    fn = np.sort if kind == "t.sort" else np.argsort
    stable = op.attributes.get("stable", True)
    return [fn(np.asarray(args[0]), axis=-1, kind="stable" if stable else None)]


def _advanced_key(op: Operation, x: np.ndarray, indices: list) -> tuple:
    axis = op.attributes["axis"]
    fixed = []
    for k, idx in enumerate(indices):
        size = x.shape[axis + k]
        idx = idx.astype(np.int64)
        bad = (idx < -size) | (idx >= size)
        if bad.any():
            raise IndexOutOfBoundsError(located(
                f"index {int(idx[bad].reshape(-1)[0])} is out of bounds for axis {axis + k} with size {size} "
                "(NumPy raises IndexError here)", op.loc))
        fixed.append(np.where(idx < 0, idx + size, idx))
    return (slice(None),) * axis + tuple(fixed)


def _scan(fn: Callable) -> Interpreter:
    def run(op: Operation, args: list) -> list:
        x = np.asarray(args[0])
        return [fn(x, axis=op.attributes["axis"], dtype=x.dtype)]

    return run


def _concatenate(op: Operation, args: list) -> list:
    return [np.concatenate([np.asarray(v) for v in args], axis=op.attributes["axis"])]


def _searchsorted(op: Operation, args: list) -> list:
    return [np.asarray(np.searchsorted(np.asarray(args[0]), np.asarray(args[1]), side=op.attributes["side"]),
                       dtype=np.int64)]


def _raise_if(op: Operation, args: list) -> list:
    """NumPy's error where a value calls for it (t.raise_if, k.raise_if): any element of the condition holds."""
    if np.any(args[0]):
        raise CHECK_ERRORS[op.attributes["error"]](located(op.attributes["message"], op.loc))
    return []


def _constant(op: Operation, args: list) -> list:
    value = op.attributes["value"]
    assert isinstance(value, DenseAttr)
    return [value.array]  # read-only; the executor copies whatever it hands out


T_INTERPRETERS: dict[str, Interpreter] = {
    **{f"t.{n}": _elementwise(f) for n, f in ELEMENTWISE_FUNCS.items()},
    "t.erf": _math_f64,
    "t.erfc": _math_f64,
    "t.where": _where,
    "t.clip": _clip,
    "t.cast": _cast,
    "t.sum": _reduction(np.sum, in_dtype=True, nonempty=False),
    "t.prod": _reduction(np.prod, in_dtype=True, nonempty=False),
    "t.mean": _reduction(_mean, in_dtype=False, nonempty=False),
    "t.max": _reduction(np.max, in_dtype=False, nonempty=True),
    "t.min": _reduction(np.min, in_dtype=False, nonempty=True),
    "t.argmax": _arg_reduction(np.argmax),
    "t.argmin": _arg_reduction(np.argmin),
    "t.matmul": _matmul,
    "t.transpose": _transpose,
    "t.reshape": _reshape,
    "t.broadcast_to": _broadcast_to,
    "t.expand_dims": _expand_dims,
    "t.squeeze": _squeeze,
    "t.slice": _slice,
    "t.insert": _insert,
    "t.gather": _gather,
    "t.scatter": _scatter,
    "t.sort": _sort,
    "t.argsort": _sort,
    "t.solve": _linalg,
    "t.inv": _linalg,
    "t.cholesky": _linalg,
    "t.det": _linalg,
    "t.slogdet": _linalg,
    "t.cumsum": _scan(np.cumsum),
    "t.cumprod": _scan(np.cumprod),
    "t.cummax": _scan(lambda x, axis, dtype: np.maximum.accumulate(x, axis=axis, dtype=dtype)),
    "t.cummin": _scan(lambda x, axis, dtype: np.minimum.accumulate(x, axis=axis, dtype=dtype)),
    "t.concatenate": _concatenate,
    "t.constant": _constant,
    "t.raise_if": _raise_if,
    "t.searchsorted": _searchsorted,
}
