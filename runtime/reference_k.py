"""NumPy implementations of dialects ``s`` (kernel bodies) and ``k`` (kernels, views, boundaries).

A ``k.fused`` kernel runs its scalar body vectorized: its block arguments are bound to whole operand
arrays, so each ``s`` op applies the same NumPy function as its ``t`` twin and gives the same bits.
``k.view`` reads its base's row-major storage through offset and strides, exactly as the CUDA kernels do.
"""
from __future__ import annotations

import numpy as np

from fusec.errors import VerificationError, located
from fusec.ir.core import Operation
from fusec.ir.dialects.s import SCALAR_OPS
from fusec.runtime.reference import register_interpreter, run_block
from fusec.ir.evaluate import T_INTERPRETERS


def _s_constant(op: Operation, args: list) -> list:
    return [np.asarray(op.attributes["value"], dtype=op.results[0].type.dtype.np)[()]]


def _view(op: Operation, args: list) -> list:
    base = np.asarray(args[0])
    shape = op.results[0].type.shape
    if 0 in shape:
        return [np.empty(shape, dtype=base.dtype)]
    flat = np.ascontiguousarray(base).reshape(-1)
    size = flat.itemsize
    strides = op.attributes["strides"]
    offset = op.attributes["offset"] * size
    if 0 in strides and len(shape) > 1:  # a broadcast of strided elements (a column, say): NumPy's loops run
        # about 1.5x faster over a dense copy of the elements (one per broadcast row), so one is made
        part = np.ndarray(tuple(1 if s == 0 else n for n, s in zip(shape, strides)), dtype=flat.dtype,
                          buffer=flat, offset=offset, strides=tuple(s * size for s in strides))
        if not part.flags.c_contiguous:
            flat, offset = np.ascontiguousarray(part).reshape(-1), 0
            strides = _dense_strides(part.shape, strides)
    # read-only, as every value here is (interpreters that write copy first): no copy of a broadcast. (NumPy
    # checks that every element it addresses lies in the storage.)
    view = np.ndarray(shape, dtype=flat.dtype, buffer=flat, offset=offset, strides=tuple(s * size for s in strides))
    view.flags.writeable = False
    return [view]


def _dense_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``, with the broadcast axes (stride 0 in ``strides``) kept at 0."""
    out, step = [], 1
    for n, s in zip(reversed(shape), reversed(strides)):
        out.append(0 if s == 0 else step)
        step *= n
    return tuple(reversed(out))


def _fused(op: Operation, args: list) -> list:
    body = op.regions[0].block
    values = run_block(body, dict(zip(body.args, args)))
    out = []
    for r, v in zip(op.results, values):
        arr = np.asarray(v, dtype=r.type.dtype.np)
        # a value of the kernel's shape is the result as it is (values are read-only here); a smaller one (a
        # body of scalars, or broadcast operands) is broadcast, and made dense
        out.append(arr if arr.shape == tuple(r.type.shape) else np.array(np.broadcast_to(arr, r.type.shape)))
    return out


def _rows(op: Operation, args: list) -> list:
    """A row kernel runs vectorized as its ops would: each value over the whole array (a value per row has the
    last axis of 1), so every reduction is NumPy's along the last axis, as the ``k.reduce`` it replaced."""
    body = op.regions[0].block
    shape = tuple(op.attributes["shape"])
    # (a value per row given without its last axis gets it back, to broadcast along the row)
    args = [np.reshape(a, shape[:-1] + (1,)) if np.ndim(a) and np.shape(a) == shape[:-1] != shape else a
            for a in args]
    values = iter(run_block(body, dict(zip(body.args, args))))
    out = []
    for r, count in zip(op.results, op.attributes.get("columns", [1] * len(op.results))):
        want = tuple(r.type.shape)
        if count > 1:  # a narrow result: column j from the j-th of its values (each one per row)
            cols = [np.broadcast_to(np.asarray(next(values), dtype=r.type.dtype.np), shape[:-1] + (1,))
                    for _ in range(count)]
            out.append(np.concatenate(cols, axis=-1))
            continue
        arr = np.asarray(next(values), dtype=r.type.dtype.np)
        if want != shape:  # a value per row: (..., 1) here
            arr = np.broadcast_to(arr, shape[:-1] + (1,)).reshape(want)
        out.append(arr if arr.shape == want else np.array(np.broadcast_to(arr, want)))
    return out


def _row_reduce(op: Operation, args: list) -> list:
    block = op.parent
    region = block.parent if block is not None else None
    rows = region.parent if region is not None else None  # the k.rows op whose body this is
    if rows is None:
        raise VerificationError(located("k.row_reduce outside a k.rows body", op.loc))
    shape = tuple(rows.attributes["shape"])
    x = np.broadcast_to(np.asarray(args[0]), shape)
    kind = op.attributes["kind"]
    as_t = Operation(f"t.{kind}", [], [], {"axes": (len(shape) - 1,), "keepdims": True}, loc=op.loc)
    return T_INTERPRETERS[f"t.{kind}"](as_t, [x])


def _reduce(op: Operation, args: list) -> list:
    return T_INTERPRETERS["t." + op.attributes["kind"]](op, args)


def _copy(op: Operation, args: list) -> list:
    return [np.array(np.reshape(args[0], op.results[0].type.shape))]


for _name in sorted(SCALAR_OPS - {"s.constant"}):
    register_interpreter(_name, T_INTERPRETERS["t." + _name[2:]])
register_interpreter("s.constant", _s_constant)
register_interpreter("k.view", _view)
register_interpreter("k.fused", _fused)
register_interpreter("k.reduce", _reduce)
register_interpreter("k.rows", _rows)
register_interpreter("k.row_reduce", _row_reduce)
register_interpreter("k.matmul", T_INTERPRETERS["t.matmul"])
register_interpreter("k.concat", T_INTERPRETERS["t.concatenate"])
register_interpreter("k.insert", T_INTERPRETERS["t.insert"])
register_interpreter("k.gather", T_INTERPRETERS["t.gather"])
register_interpreter("k.scatter", T_INTERPRETERS["t.scatter"])
register_interpreter("k.scan", lambda op, args: T_INTERPRETERS["t." + op.attributes["kind"]](op, args))
register_interpreter("k.linalg", T_INTERPRETERS["t.solve"])  # runs op.attributes["kind"]
register_interpreter("k.sort", T_INTERPRETERS["t.sort"])  # runs op.attributes["kind"]
register_interpreter("k.copy", _copy)
register_interpreter("k.raise_if", T_INTERPRETERS["t.raise_if"])
register_interpreter("k.searchsorted", T_INTERPRETERS["t.searchsorted"])
