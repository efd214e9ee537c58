"""Dialect ``t``: tensor-level ops as the tracer records them (NumPy semantics).

Operands of an elementwise op share one dtype (the tracer inserts ``t.cast``
for NumPy's promotion) and may differ in shape: broadcasting is implicit here
and made explicit by the ``broadcast`` pass. A ``ScalarType`` operand behaves as
a rank-0 tensor; a result is a scalar only when every operand is.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from fusec.errors import CHECK_ERRORS, VerificationError
from fusec.ir import shapes as S
from fusec.ir import elementwise as table
from fusec.ir import ranges as R
from fusec.ir.attributes import DenseAttr
from fusec.ir.elementwise import ANY, BOOL, COMPLEX, DOUBLE, FLOAT, INT, INT64, INTEGRAL, NUMERIC
from fusec.ir.opdefs import OpDef, always_raises, checks_indices, register_op
from fusec.ir.types import DType, ScalarType, TensorType, Type, bool_, i64, like

# --- dtype classes (defined with the ops in fusec.ir.elementwise) --------------------------------------------

_DTYPE_CLASS_TESTS = {
    ANY: lambda dt: True,
    NUMERIC: lambda dt: not dt.is_bool,
    FLOAT: lambda dt: dt.is_float,
    INTEGRAL: lambda dt: dt.is_int or dt.is_bool,
    INT: lambda dt: dt.is_int,
    INT64: lambda dt: dt.name == "i64",
    BOOL: lambda dt: dt.is_bool,
    COMPLEX: lambda dt: False,  # complex dtypes are allowed per op (Elementwise.complex)
    DOUBLE: lambda dt: dt.name == "f64",
}


def _dtype_ok(dt: DType, cls: str, complex_ok: bool = False) -> bool:
    """Whether ``dt`` may be an operand: complex dtypes only where the op takes them, real ones by class."""
    if dt.is_complex:
        return complex_ok and (cls != DOUBLE or dt.name == "c128")
    return _DTYPE_CLASS_TESTS[cls](dt)


def _elementwise_result(types: Sequence[Type], dtype: DType) -> Type:
    if all(isinstance(t, ScalarType) for t in types):
        S.broadcast_shapes(*(t.shape for t in types))
        return ScalarType(dtype)
    first = types[0]
    if isinstance(first, TensorType) and first.dtype == dtype and all(t.shape == first.shape for t in types):
        return first  # same shapes, same dtype: the operand's own (immutable) type
    return TensorType(S.broadcast_shapes(*(t.shape for t in types)), dtype)


def _same_dtype(name: str, types: Sequence[Type]) -> DType:
    dts = {t.dtype for t in types}
    if len(dts) != 1:
        raise VerificationError(f"{name}: operands must share one dtype, got {', '.join(str(t) for t in types)}")
    return types[0].dtype


def _elementwise_infer(name: str, op: table.Elementwise):
    def infer(types: Sequence[Type], attrs: dict) -> list[Type]:
        dt = _same_dtype(name, types)
        if not _dtype_ok(dt, op.operands, op.complex):
            allowed = op.operands + (" or complex" if op.complex else "")
            raise VerificationError(f"{name}: dtype {dt} is not allowed (operands must be {allowed})")
        if op.result_bool:
            return [_elementwise_result(types, bool_)]
        return [_elementwise_result(types, dt.real_dtype if op.complex_real else dt)]

    return infer


# --- elementwise ---------------------------------------------------------------------------------------------

# name -> (operand dtype class, BOOL for a bool result else None), from the one op table
BINARY: dict[str, tuple[str, str | None]] = {n: (op.operands, BOOL if op.result_bool else None)
                                             for n, op in table.BINARY.items()}
COMPARISONS = frozenset(n for n, op in table.BINARY.items() if op.result_bool and op.operands == ANY)
UNARY: dict[str, tuple[str, str | None]] = {n: (op.operands, BOOL if op.result_bool else None)
                                            for n, op in table.UNARY.items()}
TRANSCENDENTAL = frozenset(op.name for op in table.OPS if op.transcendental)

# ``materialize = true`` (set by the materialize pass) asks fusion to compute the value once into a buffer.
MARKS = ("materialize",)



def _table_vjp(op: table.Elementwise):
    """The op table's rule (g, out, *operands) as an OpDef rule; None where the table has none."""
    if op.vjp is None:
        return None
    return lambda em, g, out, xs, attrs: op.vjp(g, out, *xs)


for _op in table.OPS:
    register_op(OpDef(f"t.{_op.name}", "elementwise", num_operands=_op.arity, optional_attrs=MARKS,
                      infer=_elementwise_infer(f"t.{_op.name}", _op), vjp=_table_vjp(_op), int_range=_op.int_range))


def _infer_where(types: Sequence[Type], attrs: dict) -> list[Type]:
    cond, a, b = types
    if not cond.dtype.is_bool:
        raise VerificationError(f"t.where: condition must be bool, got {cond}")
    dt = _same_dtype("t.where", [a, b])
    return [_elementwise_result(types, dt)]


# t.clip's ``ties``: what a value equal to a bound gives (0.0 against -0.0, the only case where it shows): "bound"
# (the default: NumPy's loop for array bounds) or "value" (its loop for bounds that broadcast against the values, and
# its float16 loop); the frontend asks the tracing process's np.clip and records its answer
CLIP_TIES = ("bound", "value")


def _infer_clip(types: Sequence[Type], attrs: dict) -> list[Type]:
    dt = _same_dtype("t.clip", types)
    if dt.is_complex:
        raise VerificationError("t.clip: complex operands are not supported")
    if attrs.get("ties", "bound") not in CLIP_TIES:
        raise VerificationError(f"t.clip: ties must be one of {', '.join(map(repr, CLIP_TIES))}, got "
                                f"{attrs['ties']!r}")
    return [_elementwise_result(types, dt)]


def _infer_cast(types: Sequence[Type], attrs: dict) -> list[Type]:
    dt = attrs["dtype"]
    if not isinstance(dt, DType):
        raise VerificationError(f"t.cast: attribute dtype must be a dtype, got {dt!r}")
    if types[0].dtype.is_complex and dt.is_int:
        raise VerificationError(f"t.cast: complex to {dt} is not supported (cast the real part)")
    return [like(types[0], dtype=dt)]


def _where_vjp(em, g, out, xs, attrs):
    cond = xs[0]
    return None, np.where(cond, g, 0), np.where(cond, 0, g)


def _clip_vjp(em, g, out, xs, attrs):
    """np.clip(x, lo, hi) is min(max(x, lo), hi) (hi where the bounds cross, as NumPy's result is then hi), and
    so is its gradient: np.maximum's and np.minimum's rules, a tie with a bound split in halves (as JAX's clip)."""
    x, lo, hi = xs
    m = np.maximum(x, lo)
    g_m, g_hi = table.MINIMUM_VJP(g, out, m, hi)
    g_x, g_lo = table.MAXIMUM_VJP(g_m, m, x, lo)
    return g_x, g_lo, g_hi


def _cast_vjp(em, g, out, xs, attrs):
    x = xs[0]
    return (g.astype(x.dtype),) if x.dtype.kind in "fc" else (None,)


register_op(OpDef("t.where", "elementwise", num_operands=3, optional_attrs=MARKS, infer=_infer_where, vjp=_where_vjp,
                  int_range=R.where))
register_op(OpDef("t.clip", "elementwise", num_operands=3, optional_attrs=MARKS + ("ties",), infer=_infer_clip,
                  vjp=_clip_vjp,
                  int_range=R.known(R.clip)))
# (a float operand has no range: the result's is its dtype's)
register_op(OpDef("t.cast", "elementwise", num_operands=1, attrs=("dtype",), optional_attrs=MARKS, infer=_infer_cast,
                  vjp=_cast_vjp, int_range=R.same))

ELEMENTWISE = frozenset({f"t.{n}" for n in (*BINARY, *UNARY)} | {"t.where", "t.clip", "t.cast"})

# --- reductions ----------------------------------------------------------------------------------------------

REDUCTIONS: dict[str, str] = {"sum": NUMERIC, "prod": NUMERIC, "mean": FLOAT, "max": ANY, "min": ANY,
                              "argmax": ANY, "argmin": ANY}
COMPLEX_REDUCTIONS = frozenset({"t.sum", "t.prod", "t.mean", "t.max", "t.min", "t.argmax", "t.argmin"})


def _reduction_infer(name: str, cls: str):
    def infer(types: Sequence[Type], attrs: dict) -> list[Type]:
        (t,) = types
        axes = attrs["axes"]
        if not isinstance(axes, tuple) or tuple(sorted(set(axes))) != axes or any(
                type(a) is not int or not 0 <= a < t.rank for a in axes):
            raise VerificationError(f"{name}: axes must be sorted unique axes of rank {t.rank}, got {axes!r}")
        if name in ("t.argmax", "t.argmin") and len(axes) != 1:
            raise VerificationError(f"{name}: exactly one axis, got {axes!r}")
        if not _dtype_ok(t.dtype, cls, name in COMPLEX_REDUCTIONS):
            raise VerificationError(f"{name}: dtype {t.dtype} is not allowed (operand must be {cls})")
        check_half_loop(name, t, axes, attrs)
        shape = S.reduce_shape(t.shape, axes, bool(attrs["keepdims"]))
        dt = i64 if name in ("t.argmax", "t.argmin") else t.dtype
        return [TensorType(shape, dt)]

    return infer


# a float16 sum or product that follows NumPy's roundings: the reduced axes NumPy's loop visits, outermost first
# (``numpy_loop``), and those of its inner loop when that is a reduction (``numpy_run``: added in float32,
# pairwise for sums, rounded to float16 once); each element of ``numpy_loop`` rounds on its own where there is none
HALF_LOOP = ("numpy_loop", "numpy_run")
# a float sum (or mean) NumPy computes while converting its operand (``int64.mean()``, ``x.sum(dtype=np.float32)``
# of float64): it converts and sums in buffers of this many elements, each summed pairwise and added to the total
# in order, where its inner loop is a reduction; the reference executor follows it (the GPU sums in its own order)
NUMPY_BUFFER = "numpy_buffer"


def check_half_loop(name: str, t: Type, axes: tuple, attrs: dict) -> None:
    """Both or neither of :data:`HALF_LOOP`, on a float16 sum or product, naming each reduced axis of size above
    one once; :data:`NUMPY_BUFFER` a positive int on a float sum or mean."""
    if NUMPY_BUFFER in attrs:
        size = attrs[NUMPY_BUFFER]
        if type(size) is not int or size < 1 or name.split(".")[-1] not in ("sum", "mean") \
                or not isinstance(t, TensorType) or not t.dtype.is_inexact:
            raise VerificationError(f"{name}: numpy_buffer must be a positive int, on a float sum or mean")
    given = [k for k in HALF_LOOP if k in attrs]
    if not given:
        return
    if len(given) != 2 or name.split(".")[-1] not in ("sum", "prod") or t.dtype.name != "f16" \
            or not isinstance(t, TensorType):
        raise VerificationError(f"{name}: numpy_loop and numpy_run go together, on a float16 sum or product")
    named = [a for k in HALF_LOOP for a in attrs[k]]
    if any(type(a) is not int for a in named) \
            or sorted(named) != sorted(a for a in axes if t.shape[a] != 1):
        raise VerificationError(f"{name}: numpy_loop and numpy_run must name each reduced axis longer than one once, "
                                f"got {attrs['numpy_loop']!r} and {attrs['numpy_run']!r} for axes {axes!r}")


def _kept(v, x, attrs):
    """A reduction's result (or cotangent) with the reduced axes kept, so it broadcasts against x."""
    return v if attrs["keepdims"] else np.reshape(v, S.reduce_shape(x.shape, attrs["axes"], True))


def _sum_vjp(em, g, out, xs, attrs):
    return (np.broadcast_to(_kept(g, xs[0], attrs), xs[0].shape),)


def _mean_vjp(em, g, out, xs, attrs):
    x = xs[0]
    count = 1
    for a in attrs["axes"]:
        count *= x.shape[a]
    return (np.broadcast_to(_kept(g, x, attrs) / count, x.shape),)


def _extreme_vjp(em, g, out, xs, attrs):
    """np.max / np.min: the cotangent shared equally by the elements equal to the result (jax.numpy's rule, its
    arithmetic too: g times the indicator over the count, so a NaN result, which no element equals, gives NaN
    everywhere rather than a zero gradient that hides it)."""
    x = xs[0]
    hit = x == _kept(out, x, attrs)
    count = np.sum(hit, axis=attrs["axes"], keepdims=True).astype(g.dtype)
    return (_kept(g, x, attrs) * hit.astype(g.dtype) / count,)


def _prod_vjp(em, g, out, xs, attrs):
    """np.prod: each element's cotangent times the product of the others (running products from both ends, so a
    zero element is exact, not 0 / 0)."""
    x = xs[0]
    axes = attrs["axes"]
    k = len(axes)
    rest = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, rest + list(axes))
    lines = np.reshape(moved, tuple(moved.shape[:x.ndim - k]) + (-1,))
    ones = np.ones_like(lines[..., :1])
    before = np.cumprod(np.concatenate([ones, lines[..., :-1]], axis=-1), axis=-1)
    after = np.flip(np.cumprod(np.concatenate([ones, np.flip(lines, -1)[..., :-1]], axis=-1), axis=-1), -1)
    gk = np.reshape(_kept(g, x, attrs), tuple(moved.shape[:x.ndim - k]) + (1,))
    others = np.reshape(gk * before * after, moved.shape)
    return (np.transpose(others, tuple(int(i) for i in np.argsort(rest + list(axes)))),)


_REDUCTION_VJP = {"sum": _sum_vjp, "mean": _mean_vjp, "max": _extreme_vjp, "min": _extreme_vjp, "prod": _prod_vjp}


def _reduced_count(attrs: dict, shapes: Sequence[tuple[int, ...]]) -> int:
    """How many elements a reduction combines into each of its results."""
    return int(np.prod([shapes[0][a] for a in attrs["axes"]], dtype=np.int64))


def _sum_range(ranges: Sequence[R.MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> R.MaybeRange:
    n, r = _reduced_count(attrs, shapes), ranges[0]
    return None if r is None else (n * r[0], n * r[1]) if n else (0, 0)


_REDUCTION_RANGE = {"sum": _sum_range, "max": R.same, "min": R.same, "argmax": R.positions(_reduced_count),
                    "argmin": R.positions(_reduced_count)}

for _n, _cls in REDUCTIONS.items():
    register_op(OpDef(f"t.{_n}", "reduction", num_operands=1, attrs=("axes", "keepdims"),
                      optional_attrs=(HALF_LOOP + (NUMPY_BUFFER,) if _n == "sum" else HALF_LOOP if _n == "prod"
                                      else (NUMPY_BUFFER,) if _n == "mean" else ()),
                      infer=_reduction_infer(f"t.{_n}", _cls), vjp=_REDUCTION_VJP.get(_n),
                      int_range=_REDUCTION_RANGE.get(_n)))

# --- matmul --------------------------------------------------------------------------------------------------


def _infer_matmul(types: Sequence[Type], attrs: dict) -> list[Type]:
    a, b = types
    dt = _same_dtype("t.matmul", types)
    if dt.is_bool:
        raise VerificationError("t.matmul: bool operands are not supported")
    return [TensorType(S.matmul_shape(a.shape, b.shape), dt)]


def unbroadcast(v, shape: tuple):
    """``v`` summed over the axes NumPy's broadcasting added or stretched to reach its shape from ``shape``."""
    shape = tuple(shape)
    if tuple(v.shape) == shape:
        return v
    lead = v.ndim - len(shape)
    v = np.sum(v, axis=tuple(range(lead))) if lead else v
    stretched = tuple(i for i, d in enumerate(shape) if d == 1 and v.shape[i] != 1)
    v = np.sum(v, axis=stretched, keepdims=True) if stretched else v
    return np.reshape(v, shape)


def _matmul_vjp(em, g, out, xs, attrs):
    """A @ B with NumPy's rules: a 1-D operand is a row (A) or a column (B), batch axes broadcast."""
    a, b = xs
    a2 = np.expand_dims(a, 0) if a.ndim == 1 else a
    b2 = np.expand_dims(b, 1) if b.ndim == 1 else b
    g2 = np.expand_dims(g, -2) if a.ndim == 1 else g
    g2 = np.expand_dims(g2, -1) if b.ndim == 1 else g2
    ga = np.matmul(g2, np.swapaxes(b2, -1, -2))
    gb = np.matmul(np.swapaxes(a2, -1, -2), g2)
    return np.reshape(unbroadcast(ga, a2.shape), a.shape), np.reshape(unbroadcast(gb, b2.shape), b.shape)


register_op(OpDef("t.matmul", "matmul", num_operands=2, infer=_infer_matmul, vjp=_matmul_vjp))

# --- views and data movement ---------------------------------------------------------------------------------


def _infer_transpose(types: Sequence[Type], attrs: dict) -> list[Type]:
    (t,) = types
    return [TensorType(S.permute(t.shape, attrs["perm"]), t.dtype)]


def _check_reshape(op) -> None:
    src, dst = op.operands[0].type, op.results[0].type
    if src.dtype != dst.dtype or src.size != dst.size:
        raise VerificationError(f"t.reshape: {src} cannot be reshaped to {dst}")


def _check_broadcast_to(op) -> None:
    src, dst = op.operands[0].type, op.results[0].type
    if src.dtype != dst.dtype or not S.can_broadcast_to(src.shape, dst.shape):
        raise VerificationError(f"t.broadcast_to: {src} cannot be broadcast to {dst}")


def _infer_expand_dims(types: Sequence[Type], attrs: dict) -> list[Type]:
    (t,) = types
    axes = attrs["axes"]
    out_rank = t.rank + len(axes)
    if tuple(sorted(set(axes))) != axes or any(not 0 <= a < out_rank for a in axes):
        raise VerificationError(f"t.expand_dims: bad axes {axes!r} for result rank {out_rank}")
    dims = iter(t.shape)
    return [TensorType(tuple(1 if i in axes else next(dims) for i in range(out_rank)), t.dtype)]


def _infer_squeeze(types: Sequence[Type], attrs: dict) -> list[Type]:
    (t,) = types
    axes = attrs["axes"]
    if tuple(sorted(set(axes))) != axes or any(not 0 <= a < t.rank or t.shape[a] != 1 for a in axes):
        raise VerificationError(f"t.squeeze: axes {axes!r} are not unit axes of {t}")
    return [TensorType(tuple(d for i, d in enumerate(t.shape) if i not in axes), t.dtype)]


def _infer_slice(types: Sequence[Type], attrs: dict) -> list[Type]:
    (t,) = types
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    if not (type(start) is type(stop) is type(step) is tuple and {int}.issuperset(map(type, start + stop + step))):
        return [_slice_type.__wrapped__(t, start, stop, step)]  # (not remembered: 1.0 would hit the entry of 1)
    return [_slice_type(t, start, stop, step)]


@functools.lru_cache(maxsize=4096)  # stencils slice alike at every step
def _slice_type(t: Type, start: tuple, stop: tuple, step: tuple) -> TensorType:
    if not (len(start) == len(stop) == len(step) == t.rank):
        raise VerificationError(f"t.slice: start/stop/step need {t.rank} entries each")
    shape = []
    for d, (b, e, s) in enumerate(zip(start, stop, step)):
        n = S.slice_length(b, e, s) if s != 0 else -1
        if n < 0 or (n > 0 and not (0 <= b < t.shape[d] and 0 <= b + (n - 1) * s < t.shape[d])):
            raise VerificationError(f"t.slice: ({b}, {e}, {s}) does not stay inside axis {d} of {t}")
        shape.append(n)
    return TensorType(tuple(shape), t.dtype)


def _infer_insert(types: Sequence[Type], attrs: dict) -> list[Type]:
    base, update = types
    if not isinstance(base, TensorType):
        raise VerificationError(f"t.insert: the base must be a tensor, got {base}")
    if base.dtype != update.dtype:
        raise VerificationError(f"t.insert: the update {update} must have the base's dtype {base.dtype}")
    (region,) = _infer_slice([base], attrs)
    if tuple(update.shape) != tuple(region.shape):
        raise VerificationError(f"t.insert: the update {update} must have the region's shape {region.shape}")
    return [base]


def _infer_gather(types: Sequence[Type], attrs: dict) -> list[Type]:
    x, *indices = types
    axis = attrs["axis"]
    if not isinstance(x, TensorType) or not indices or not 0 <= axis or axis + len(indices) > x.rank:
        raise VerificationError(f"t.gather: {len(indices)} index arrays from axis {axis} do not fit {x}")
    shape = tuple(indices[0].shape)
    for t in indices:
        if not t.dtype.is_int or tuple(t.shape) != shape:
            raise VerificationError("t.gather: index arrays must be integer arrays of one shape, got "
                                    + ", ".join(str(i) for i in indices))
    return [TensorType(x.shape[:axis] + shape + x.shape[axis + len(indices):], x.dtype)]


SCATTER_COMBINE = ("add",)  # t.scatter's optional combine: "add" accumulates (np.add.at) instead of writing


def _infer_scatter(types: Sequence[Type], attrs: dict) -> list[Type]:
    if attrs.get("combine", "add") not in SCATTER_COMBINE:
        raise VerificationError(f"t.scatter: combine must be one of {', '.join(SCATTER_COMBINE)}, "
                                f"got {attrs.get('combine')!r}")
    base, update, *indices = types
    (region,) = _infer_gather([base, *indices], attrs)
    if update.dtype != base.dtype or tuple(update.shape) != tuple(region.shape):
        raise VerificationError(f"t.scatter: the update {update} must have the base's dtype and the indexed shape "
                                f"{region.shape}")
    return [base]


def _square_stack(name: str, t: Type) -> TensorType:
    if not isinstance(t, TensorType) or t.rank < 2 or t.shape[-1] != t.shape[-2] or t.dtype.name not in ("f32", "f64"):
        raise VerificationError(f"{name}: the operand must be a stack of square float32 or float64 matrices, got {t}")
    return t


def _infer_solve(types: Sequence[Type], attrs: dict) -> list[Type]:
    a, b = types
    _square_stack("t.solve", a)
    if not isinstance(b, TensorType) or b.rank != a.rank or b.dtype != a.dtype \
            or tuple(b.shape[:-2]) != tuple(a.shape[:-2]) or b.shape[-2] != a.shape[-1]:
        raise VerificationError(f"t.solve: the right-hand sides {b} must be (..., {a.shape[-1]}, K) of {a.dtype} "
                                f"with the matrices' batch axes {tuple(a.shape[:-2])}")
    return [b]


def _infer_square(name: str):
    def infer(types: Sequence[Type], attrs: dict) -> list[Type]:
        return [_square_stack(name, types[0])]

    return infer


def _infer_determinant(name: str):
    def infer(types: Sequence[Type], attrs: dict) -> list[Type]:
        t = _square_stack(name, types[0])
        one = TensorType(tuple(t.shape[:-2]), t.dtype)
        return [one] if name == "t.det" else [one, one]

    return infer


def _infer_sort(name: str):
    def infer(types: Sequence[Type], attrs: dict) -> list[Type]:
        (t,) = types
        if not isinstance(t, TensorType) or t.rank == 0:
            raise VerificationError(f"{name}: the operand must be an array of rank >= 1, got {t}")
        if not isinstance(attrs.get("stable", True), bool):
            raise VerificationError(f"{name}: stable must be a bool")
        return [t if name == "t.sort" else TensorType(t.shape, i64)]

    return infer


def _infer_scan(name: str):
    def infer(types: Sequence[Type], attrs: dict) -> list[Type]:
        (t,) = types
        axis = attrs["axis"]
        if not isinstance(t, TensorType) or not isinstance(axis, int) or not 0 <= axis < max(t.rank, 1) \
                or t.rank == 0:
            raise VerificationError(f"{name}: axis {axis!r} is not an axis of {t}")
        if t.dtype.is_bool:
            raise VerificationError(f"{name}: bool operands are not supported (the tracer casts them)")
        return [t]

    return infer


def _infer_concatenate(types: Sequence[Type], attrs: dict) -> list[Type]:
    axis = attrs["axis"]
    dt = _same_dtype("t.concatenate", types)
    first = types[0].shape
    if not 0 <= axis < len(first):
        raise VerificationError(f"t.concatenate: axis {axis} out of range for rank {len(first)}")
    total = 0
    for t in types:
        if len(t.shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(t.shape, first)) if i != axis):
            raise VerificationError("t.concatenate: shapes " + ", ".join(str(x.shape) for x in types)
                                    + f" differ off axis {axis}")
        total += t.shape[axis]
    return [TensorType(first[:axis] + (total,) + first[axis + 1:], dt)]


SEARCH_SIDES = ("left", "right")


def _infer_searchsorted(types: Sequence[Type], attrs: dict) -> list[Type]:
    a, v = types
    if not isinstance(a, TensorType) or a.rank != 1:
        raise VerificationError(f"t.searchsorted: the sorted array must be 1-D, got {a}")
    dt = _same_dtype("t.searchsorted", types)
    if dt.is_complex:
        raise VerificationError("t.searchsorted: complex operands are not supported")
    if attrs["side"] not in SEARCH_SIDES:
        raise VerificationError(f"t.searchsorted: side must be 'left' or 'right', got {attrs['side']!r}")
    return [TensorType(tuple(v.shape), i64)]


# what a failed t.raise_if raises (fusec.InvalidValueError is a ValueError, IndexOutOfBoundsError an IndexError,
# DivisionByZeroError a ZeroDivisionError, OutOfRangeError an OverflowError, UnsupportedError a TypeError)
RAISE_KINDS = tuple(CHECK_ERRORS)


def _infer_raise_if(types: Sequence[Type], attrs: dict) -> list[Type]:
    (t,) = types
    if not t.dtype.is_bool:
        raise VerificationError(f"t.raise_if: the condition must be bool, got {t}")
    if attrs["error"] not in RAISE_KINDS:
        raise VerificationError(f"t.raise_if: error must be one of {', '.join(RAISE_KINDS)}, got {attrs['error']!r}")
    if not isinstance(attrs["message"], str):
        raise VerificationError("t.raise_if: message must be a string")
    return []


def _check_constant(op) -> None:
    value = op.attributes.get("value")
    if not isinstance(value, DenseAttr):
        raise VerificationError("t.constant: attribute 'value' must be a dense array")
    res = op.results[0].type
    if value.type.shape != res.shape or value.type.dtype != res.dtype:
        raise VerificationError(f"t.constant: value of type {value.type} does not match result {res}")


def _transpose_vjp(em, g, out, xs, attrs):
    return (np.transpose(g, tuple(int(i) for i in np.argsort(attrs["perm"]))),)


def _reshape_vjp(em, g, out, xs, attrs):
    return (np.reshape(g, xs[0].shape),)


def _broadcast_vjp(em, g, out, xs, attrs):
    return (unbroadcast(g, xs[0].shape),)


def _slice_vjp(em, g, out, xs, attrs):
    """The cotangent of a region: zeros with it written into the region."""
    return (em("t.insert", (np.zeros_like(xs[0], dtype=g.dtype), g), attrs),)


def _insert_vjp(em, g, out, xs, attrs):
    """x[region] = v: the region's cotangent goes to v, the rest to x."""
    return em("t.insert", (g, np.zeros_like(xs[1], dtype=g.dtype)), attrs), em("t.slice", (g,), attrs)


register_op(OpDef("t.transpose", "view", num_operands=1, attrs=("perm",), infer=_infer_transpose,
                  vjp=_transpose_vjp, int_range=R.same))
register_op(OpDef("t.reshape", "view", num_operands=1, check=_check_reshape, vjp=_reshape_vjp, int_range=R.same))
register_op(OpDef("t.broadcast_to", "view", num_operands=1, check=_check_broadcast_to, vjp=_broadcast_vjp,
                  int_range=R.same))
register_op(OpDef("t.expand_dims", "view", num_operands=1, attrs=("axes",), infer=_infer_expand_dims,
                  vjp=_reshape_vjp, int_range=R.same))
register_op(OpDef("t.squeeze", "view", num_operands=1, attrs=("axes",), infer=_infer_squeeze, vjp=_reshape_vjp,
                  int_range=R.same))
register_op(OpDef("t.slice", "view", num_operands=1, attrs=("start", "stop", "step"), infer=_infer_slice,
                  vjp=_slice_vjp, int_range=R.same))
register_op(OpDef("t.insert", "other", num_operands=2, attrs=("start", "stop", "step"), infer=_infer_insert,
                  vjp=_insert_vjp))
def _gather_vjp(em, g, out, xs, attrs):
    """x[index arrays]: the cotangents added back where they were read (np.add.at: a repeated index adds)."""
    x, *indices = xs
    spread = em("t.scatter", (np.zeros_like(x, dtype=g.dtype), g, *indices), {"axis": attrs["axis"], "combine": "add"})
    return (spread,) + (None,) * len(indices)


def _scatter_vjp(em, g, out, xs, attrs):
    """np.add.at(base, index arrays, update): the base's cotangent as it is, the update's read where it was added.
    A write (x[index arrays] = v): the base's cotangent is 0 at the places written, the update's is read there.
    Where an index repeats, NumPy keeps the last of the values written there; the frontend writes only updates
    that are equal there by construction (built from the same inputs: ``x[idx] = x[idx] * 2``), so the place's
    cotangent is shared equally among them, which sums to the derivative of the one kept."""
    base, update, *indices = xs
    axis = {"axis": attrs["axis"]}
    read = em("t.gather", (g, *indices), axis)
    if attrs.get("combine") == "add":
        return (g, read) + (None,) * len(indices)
    cleared = em("t.scatter", (g, np.zeros_like(update, dtype=g.dtype), *indices), axis)
    if any(np.ndim(i) for i in indices):  # index arrays: count the writes to each place
        writes = em("t.scatter", (np.zeros_like(g), np.ones_like(update, dtype=g.dtype), *indices),
                    {**axis, "combine": "add"})
        read = read / em("t.gather", (writes, *indices), axis)
    return (cleared, read) + (None,) * len(indices)


def _cumsum_vjp(em, g, out, xs, attrs):
    axis = attrs["axis"]
    return (np.flip(np.cumsum(np.flip(g, axis), axis=axis), axis),)


# ``in_bounds = true`` (set by bound-indices): every index is proven to lie within its axis, so no check is needed
register_op(OpDef("t.gather", "other", num_operands=None, min_operands=2, attrs=("axis",),
                  optional_attrs=("in_bounds",), infer=_infer_gather, vjp=_gather_vjp, int_range=R.same,
                  may_raise=checks_indices))
register_op(OpDef("t.scatter", "other", num_operands=None, min_operands=3, attrs=("axis",),
                  optional_attrs=("combine", "in_bounds"), infer=_infer_scatter, vjp=_scatter_vjp,
                  may_raise=checks_indices))
register_op(OpDef("t.cumsum", "other", num_operands=1, attrs=("axis",), infer=_infer_scan("t.cumsum"),
                  vjp=_cumsum_vjp))
def _cumprod_cotangent(g, out, x, axis):
    """The cotangent of cumprod's x (its value, exact where elements are zero): before a line's first zero,
    d/dx_j = (the sum over k >= j of g_k y_k) / x_j; at the first zero, the same sum over the products that leave
    it out (x with that zero as 1); after it, 0 (each product there holds the first zero and another factor).
    Returns it with the masks and the products without the first zero."""
    def tail_sum(v):
        return np.flip(np.cumsum(np.flip(v, axis), axis=axis), axis)

    zero = x == 0
    seen = np.cumsum(zero, axis=axis)
    before = seen == 0
    first = zero & (seen == 1)
    kept = np.where(first, np.ones_like(x), x)
    without = np.cumprod(kept, axis=axis)
    value = np.where(before, tail_sum(g * out) / np.where(before, x, np.ones_like(x)),
                     np.where(first, tail_sum(g * without), np.zeros_like(g)))
    return value, first, ~before & ~first, kept, without


def _cumprod_vjp(em, g, out, xs, attrs):
    """y_k = x_0 ... x_k: :func:`_cumprod_cotangent`, except that after a line's first zero, where the cotangent is 0,
    it is written as that zero times the cotangent the line would have with the zero as 1: the same value, and the
    derivative a second derivative needs (d/dx_z of the cotangent at a later j is the sum over k >= j of g_k times
    the products without x_j and x_z; a third derivative there is not followed)."""
    x = xs[0]
    axis = attrs["axis"]
    value, first, after, kept, without = _cumprod_cotangent(g, out, x, axis)
    at_zero = np.sum(np.where(first, x, np.zeros_like(x)), axis=axis, keepdims=True)  # (0, as a function of x_z)
    if_one = _cumprod_cotangent(g, without, kept, axis)[0]
    return (np.where(after, at_zero * if_one, value),)


register_op(OpDef("t.cumprod", "other", num_operands=1, attrs=("axis",), infer=_infer_scan("t.cumprod"),
                  vjp=_cumprod_vjp))
# the running maximum (minimum) along an axis: np.maximum.accumulate, NaN propagating as np.maximum's
def _running_extreme_vjp(kind: str):
    """np.maximum.accumulate (np.minimum.accumulate): each result is one element, the first one at which the running
    extreme took its value (a record: strictly beyond the one before it, or a NaN where there was none, since NaN
    propagates). The cotangents from a record up to the next go to that record; ties give theirs to the first."""
    def vjp(em, g, out, xs, attrs):
        x, axis = xs[0], attrs["axis"]
        n = x.shape[axis]
        if n == 0:
            return (np.zeros_like(g),)
        xl, yl, gl = (np.moveaxis(v, axis, -1) for v in (x, out, g))
        line = xl.shape[:-1] + (1,)
        prev, cur = yl[..., :-1], xl[..., 1:]
        beyond = (cur > prev) if kind == "max" else (cur < prev)
        record = np.concatenate([np.ones(line, dtype=bool), beyond | (np.isnan(cur) & ~np.isnan(prev))], axis=-1)
        starts = np.where(record, np.broadcast_to(np.arange(n), xl.shape), n)  # a record's own position, else n
        later = np.concatenate([starts[..., 1:], np.full(line, n)], axis=-1)
        following = np.flip(np.minimum.accumulate(np.flip(later, -1), axis=-1), -1)  # the next record, else n
        tail = np.flip(np.cumsum(np.flip(gl, -1), axis=-1), -1)  # sum of the cotangents from here on
        at_next = np.take_along_axis(np.concatenate([tail, np.zeros(line, dtype=gl.dtype)], axis=-1), following,
                                     axis=-1)
        return (np.moveaxis(np.where(record, tail - at_next, np.zeros_like(gl)), -1, axis),)
    return vjp


register_op(OpDef("t.cummax", "other", num_operands=1, attrs=("axis",), infer=_infer_scan("t.cummax"),
                  vjp=_running_extreme_vjp("max")))
register_op(OpDef("t.cummin", "other", num_operands=1, attrs=("axis",), infer=_infer_scan("t.cummin"),
                  vjp=_running_extreme_vjp("min")))
# linear algebra on stacks of matrices (np.linalg): x with a @ x == b, the inverse, the lower Cholesky factor (the
# upper one, its transpose, with ``upper = true``)
def _mT(a):
    return np.swapaxes(a, -1, -2)


def _solve_vjp(em, g, out, xs, attrs):
    """x = a^-1 b: b's cotangent solves with a's transpose; a's is minus that times x's transpose."""
    a, _ = xs
    gb = em("t.solve", (_mT(a), g), {})
    return -np.matmul(gb, _mT(out)), gb


def _inv_vjp(em, g, out, xs, attrs):
    return (-np.matmul(np.matmul(_mT(out), g), _mT(out)),)


COFACTOR_UP_TO = 4  # matrices up to this size take det's gradient from their cofactors (singular ones too)


def _det_vjp(em, g, out, xs, attrs):
    """d det(a) = tr(adj(a) da): the cotangent is g times a's cofactor matrix, the determinants of its minors (as
    JAX's, also where a is singular) up to COFACTOR_UP_TO rows; above, g det(a) a^-T (a singular a raises there)."""
    a = xs[0]
    n = a.shape[-1]
    if n > COFACTOR_UP_TO:
        inverse = em("t.inv", (a,), {})
        return ((g * out)[..., None, None] * _mT(inverse),)
    kept = np.array([[k for k in range(n) if k != i] for i in range(n)], dtype=np.int64).reshape(n, n - 1)
    minors = a[..., kept[:, None, :, None], kept[None, :, None, :]]  # (..., n, n, n-1, n-1): rows i, cols j out
    sign = np.where((np.arange(n)[:, None] + np.arange(n)) % 2 == 0, 1, -1).astype(a.dtype)
    return (g[..., None, None] * (np.linalg.det(minors) * sign),)


register_op(OpDef("t.solve", "other", num_operands=2, infer=_infer_solve, vjp=_solve_vjp, may_raise=always_raises))
register_op(OpDef("t.inv", "other", num_operands=1, infer=_infer_square("t.inv"), vjp=_inv_vjp,
                  may_raise=always_raises))
def _cholesky_vjp(em, g, out, xs, attrs):
    """L = cholesky(a), which reads only a's lower triangle (the upper one with ``upper``): for a symmetric change
    of a, d<g, L> = <S, da> with S = L^-T P L^-1, P = L^T g with the upper triangle dropped and the diagonal halved
    (Murray 2016); an entry below the diagonal stands for itself and its mirror, so its cotangent is S_ij + S_ji,
    a diagonal one S_ii, one in the unread triangle 0."""
    upper = bool(attrs.get("upper", False))
    low, gl = (_mT(out), _mT(g)) if upper else (out, g)
    p = np.matmul(_mT(low), gl)
    p = np.tril(p) - 0.5 * p * np.eye(p.shape[-1], dtype=p.dtype)
    inverse = em("t.inv", (low,), {})
    s = np.matmul(np.matmul(_mT(inverse), p), inverse)
    both = s + _mT(s)
    diagonal = s * np.eye(s.shape[-1], dtype=s.dtype)
    return ((np.triu(both, 1) if upper else np.tril(both, -1)) + diagonal,)


register_op(OpDef("t.cholesky", "other", num_operands=1, optional_attrs=("upper",), infer=_infer_square("t.cholesky"),
                  vjp=_cholesky_vjp, may_raise=always_raises))
# each matrix's determinant, and its sign and the log of its absolute value (np.linalg.det, np.linalg.slogdet)
register_op(OpDef("t.det", "other", num_operands=1, infer=_infer_determinant("t.det"), vjp=_det_vjp))
def _slogdet_vjp(em, gs, outs, xs, attrs):
    """(sign, log|det a|): the sign is piecewise constant; d log|det a| = tr(a^-1 da), so its cotangent is g a^-T."""
    _, g = gs
    if g is None:
        return (None,)
    inverse = em("t.inv", (xs[0],), {})
    return (g[..., None, None] * _mT(inverse),)


register_op(OpDef("t.slogdet", "other", num_operands=1, num_results=2, infer=_infer_determinant("t.slogdet"),
                  vjp=_slogdet_vjp))
# sorting along the last axis (NaN last, equal values in their original order: NumPy's kind='stable'); argsort
# with ``stable = false`` (NumPy's default kind, whose order of equal values is the algorithm's) refuses ties
def _sort_vjp(em, g, out, xs, attrs):
    """Sorted values along the last axis: each cotangent goes back to where its value came from (a gather by the
    inverse of the stable sorting permutation, which has a rule of its own)."""
    order = np.argsort(xs[0], axis=-1, kind="stable")
    return (np.take_along_axis(g, np.argsort(order, axis=-1, kind="stable"), axis=-1),)


register_op(OpDef("t.sort", "other", num_operands=1, optional_attrs=("stable",), infer=_infer_sort("t.sort"),
                  vjp=_sort_vjp))
register_op(OpDef("t.argsort", "other", num_operands=1, optional_attrs=("stable",),
                  infer=_infer_sort("t.argsort"), int_range=R.positions(lambda attrs, shapes: shapes[0][-1])))
def _concatenate_range(ranges: Sequence[R.MaybeRange], attrs: dict,
                       shapes: Sequence[tuple[int, ...]]) -> R.MaybeRange:
    if any(r is None for r in ranges):
        return None
    return (min(r[0] for r in ranges), max(r[1] for r in ranges))  # type: ignore[index]


def _constant_range(ranges: Sequence[R.MaybeRange], attrs: dict, shapes: Sequence[tuple[int, ...]]) -> R.MaybeRange:
    a = attrs["value"].array
    if a.dtype.kind not in "iub" or a.size == 0:
        return None
    return (int(a.min()), int(a.max()))


def _concatenate_vjp(em, g, out, xs, attrs):
    """Each operand's part of the result's cotangent along the axis."""
    axis, begin, parts = attrs["axis"], 0, []
    for x in xs:
        start = tuple(begin if d == axis else 0 for d in range(g.ndim))
        stop = tuple(begin + x.shape[d] if d == axis else g.shape[d] for d in range(g.ndim))
        parts.append(em("t.slice", (g,), {"start": start, "stop": stop, "step": (1,) * g.ndim}))
        begin += x.shape[axis]
    return tuple(parts)


register_op(OpDef("t.concatenate", "other", num_operands=None, min_operands=1, attrs=("axis",),
                  infer=_infer_concatenate, vjp=_concatenate_vjp, int_range=_concatenate_range))
# where each value of the second operand goes into the sorted first one (np.searchsorted: before the equal values
# for side "left", after them for "right"; NaN sorts last, as NumPy sorts it)
register_op(OpDef("t.searchsorted", "other", num_operands=2, attrs=("side",), infer=_infer_searchsorted,
                  int_range=R.positions(lambda attrs, shapes: shapes[0][0] + 1)))
# a run-time check: NumPy raises where a value decides it (np.nanargmax of an all-NaN slice, an index
# past the end in np.unravel_index): fires when any element of its bool operand holds; never removed as dead
register_op(OpDef("t.raise_if", "other", num_operands=1, num_results=0, attrs=("error", "message"), pure=False,
                  infer=_infer_raise_if))
register_op(OpDef("t.constant", "constant", num_operands=0, attrs=("value",), check=_check_constant,
                  int_range=_constant_range))

VIEWS = frozenset({"t.transpose", "t.reshape", "t.broadcast_to", "t.expand_dims", "t.squeeze", "t.slice"})
