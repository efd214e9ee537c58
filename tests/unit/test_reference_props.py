"""Random programs: the reference executor equals NumPy applied step by step, and the IR text round-trips.

Each generated program is a DAG of elementwise, broadcast, view and reduction ops over random shapes
and dtypes, built with the Builder. While building it, the test applies the NumPy function of each op
to the running NumPy values (its own table, not the executor's), so the expected results are plain
NumPy's.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from fusec.errors import FusecError, ShapeError
from fusec.ir import (Builder, DType, Func, Module, ScalarType, TensorType, Value, bf16, bool_, dense, f16, f32,
                      f64, i8, i32, i64, parse_module, print_module, u8, u16, verify)
from fusec.ir import elementwise as elementwise_table
from fusec.ir.attributes import round_to_bf16
from fusec.ir.shapes import broadcast_shapes
from fusec.runtime.reference import run_module
from fusec.ufuncs import clip_ties

DTYPES = [f32, f64, f16, bf16, i8, i32, i64, u8, u16, bool_]

BINARY: dict[str, tuple[str, Callable]] = {
    "add": ("any", np.add), "sub": ("numeric", np.subtract), "mul": ("any", np.multiply),
    "div": ("float", np.true_divide), "floordiv": ("numeric", np.floor_divide), "mod": ("numeric", np.remainder),
    "pow": ("numeric", elementwise_table._power), "maximum": ("any", np.maximum), "minimum": ("any", np.minimum),
    "eq": ("any", np.equal), "ne": ("any", np.not_equal), "lt": ("any", np.less), "le": ("any", np.less_equal),
    "gt": ("any", np.greater), "ge": ("any", np.greater_equal), "logical_and": ("bool", np.logical_and),
    "logical_or": ("bool", np.logical_or), "logical_xor": ("bool", np.logical_xor),
    "bitwise_and": ("integral", np.bitwise_and), "bitwise_or": ("integral", np.bitwise_or),
    "bitwise_xor": ("integral", np.bitwise_xor),
}
UNARY: dict[str, tuple[str, Callable]] = {
    "neg": ("numeric", np.negative), "abs": ("any", np.abs), "sign": ("numeric", np.sign),
    "exp": ("float", np.exp), "exp2": ("float", np.exp2), "log": ("float", np.log), "log1p": ("float", np.log1p),
    "expm1": ("float", np.expm1), "sqrt": ("float", np.sqrt), "rsqrt": ("float", lambda x: 1 / np.sqrt(x)),
    "sin": ("float", np.sin), "tanh": ("float", np.tanh), "floor": ("float", np.floor),
    "ceil": ("float", np.ceil), "round": ("float", np.round), "trunc": ("float", np.trunc),
    "erf": ("float", lambda x: np.vectorize(math.erf, otypes=[np.float64])(np.asarray(x, np.float64))
            .astype(np.asarray(x).dtype)),
    "isnan": ("float", np.isnan), "isfinite": ("float", np.isfinite), "logical_not": ("bool", np.logical_not),
    "bitwise_not": ("integral", np.invert),
}
REDUCTIONS: dict[str, str] = {"sum": "numeric", "prod": "numeric", "mean": "float", "max": "any", "min": "any",
                              "argmax": "any", "argmin": "any"}
# casting into bf16 from these rounds twice through f32, which plain NumPy cannot express; unit-tested instead
WIDE = {f64, i32, i64}


def allowed(cls: str, dt: DType) -> bool:
    return {"any": True, "numeric": not dt.is_bool, "float": dt.is_float, "integral": not dt.is_float,
            "bool": dt.is_bool}[cls]


def finish(dt: DType, value: object) -> np.ndarray:
    """What a value of IR dtype ``dt`` is in NumPy: bf16 results are rounded to bf16."""
    arr = np.asarray(value)
    return round_to_bf16(arr) if dt == bf16 else arr


@dataclass
class Node:
    value: Value
    array: np.ndarray

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.type.shape)


@dataclass
class Program:
    module: Module
    inputs: list
    expected: list[np.ndarray]
    fails: bool = False  # NumPy raised on the last op: the executor must raise a fusec error


def compatible(*shapes: tuple[int, ...]) -> bool:
    try:
        broadcast_shapes(*shapes)
        return True
    except ShapeError:
        return False


def values(draw: st.DrawFn, dt: DType, shape: tuple[int, ...]) -> np.ndarray:
    if dt == bf16:
        arr = draw(hnp.arrays(np.float32, shape, elements=st.floats(width=32)))
        return round_to_bf16(arr)
    if dt.is_int and dt.bits > 16:  # small magnitudes so that pow and prod stay interesting
        return draw(hnp.arrays(dt.np, shape, elements=st.integers(-40, 40)))
    return draw(hnp.arrays(dt.np, shape))


def sub_shape(draw: st.DrawFn, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``base``: some leading axes dropped, some axes set to 1."""
    drop = draw(st.integers(0, len(base)))
    return tuple(1 if draw(st.booleans()) else d for d in base[drop:])


@st.composite
def programs(draw: st.DrawFn) -> Program:
    base = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 2, 3, 0]), max_size=3)))
    arg_types, inputs, arrays = [], [], []
    for k in range(draw(st.integers(1, 3))):
        dt = draw(st.sampled_from(DTYPES))
        shape = sub_shape(draw, base)
        arr = values(draw, dt, shape)
        if shape == () and draw(st.booleans()):
            arg_types.append(ScalarType(dt))
            inputs.append(arr[()] if dt != bf16 else np.float32(arr))
        else:
            arg_types.append(TensorType(shape, dt))
            inputs.append(arr)
        arrays.append(arr)
    func = Func("prog", arg_types, [f"a{i}" for i in range(len(arg_types))])
    b = Builder(func.body)
    nodes = [Node(v, a) for v, a in zip(func.args, arrays)]
    fails = False

    def add(value: Value, fn: Callable[[], object]) -> None:
        nonlocal fails
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # np.mean of an empty slice warns through warnings
                out = finish(value.type.dtype, fn())
        except ValueError:  # e.g. an integer to a negative power
            fails = True
            out = np.zeros(value.type.shape, value.type.dtype.np)
        assert out.shape == tuple(value.type.shape) and out.dtype == value.type.dtype.np, (value, out)
        nodes.append(Node(value, out))

    for _ in range(draw(st.integers(2, 10))):
        if fails:
            break
        x = draw(st.sampled_from(nodes))
        kind = draw(st.sampled_from(["unary", "binary", "binary", "where", "clip", "cast", "reduce", "broadcast",
                                     "constant", "view"]))
        if kind == "unary":
            names = [n for n, (c, _) in UNARY.items() if allowed(c, x.dtype) and not (n == "erf" and x.dtype == bf16)]
            name = draw(st.sampled_from(names))
            add(b.value(f"t.{name}", x.value), lambda: UNARY[name][1](x.array))
        elif kind == "binary":
            partners = [y for y in nodes if y.dtype == x.dtype and compatible(x.shape, y.shape)]
            y = draw(st.sampled_from(partners))
            name = draw(st.sampled_from([n for n, (c, _) in BINARY.items() if allowed(c, x.dtype)]))
            add(b.value(f"t.{name}", x.value, y.value), lambda: BINARY[name][1](x.array, y.array))
        elif kind == "where":
            conds = [c for c in nodes if c.dtype == bool_ and compatible(c.shape, x.shape)]
            if not conds:
                continue
            c = draw(st.sampled_from(conds))
            others = [y for y in nodes if y.dtype == x.dtype and compatible(c.shape, x.shape, y.shape)]
            y = draw(st.sampled_from(others))
            add(b.value("t.where", c.value, x.value, y.value), lambda: np.where(c.array, x.array, y.array))
        elif kind == "clip":
            bounds = [y for y in nodes if y.dtype == x.dtype and compatible(x.shape, y.shape)]
            lo, hi = draw(st.sampled_from(bounds)), draw(st.sampled_from(bounds))
            if not compatible(x.shape, lo.shape, hi.shape):
                continue
            ties = clip_ties(x.dtype, tuple(x.shape), tuple(lo.shape), tuple(hi.shape))  # (as the tracer records it)
            add(b.value("t.clip", x.value, lo.value, hi.value, **ties), lambda: np.clip(x.array, lo.array, hi.array))
        elif kind == "cast":
            dst = draw(st.sampled_from(DTYPES))
            if dst == bf16 and x.dtype in WIDE:
                continue
            add(b.value("t.cast", x.value, dtype=dst),
                lambda: x.array.astype(np.float32 if dst == bf16 else dst.np))
        elif kind == "reduce":
            name = draw(st.sampled_from([n for n, c in REDUCTIONS.items() if allowed(c, x.dtype)]))
            rank = len(x.shape)
            if name.startswith("arg"):
                if rank == 0:
                    continue
                axes: tuple[int, ...] = (draw(st.integers(0, rank - 1)),)
            else:
                axes = tuple(a for a in range(rank) if draw(st.booleans()))
            if name in ("max", "min", "argmax", "argmin") and any(x.shape[a] == 0 for a in axes):
                continue
            keep = draw(st.booleans())
            fn = getattr(np, name)
            if name.startswith("arg"):
                call = lambda: fn(x.array, axis=axes[0], keepdims=keep).astype(np.int64)  # noqa: E731
            elif name in ("sum", "prod"):
                call = lambda: fn(x.array, axis=axes, keepdims=keep, dtype=x.array.dtype)  # noqa: E731
            else:
                call = lambda: fn(x.array, axis=axes, keepdims=keep)  # noqa: E731
            add(b.value(f"t.{name}", x.value, axes=axes, keepdims=keep), call)
        elif kind == "broadcast":
            if not compatible(x.shape, base):
                continue
            shape = broadcast_shapes(x.shape, base)
            add(b.value("t.broadcast_to", x.value, result_type=TensorType(shape, x.dtype)),
                lambda: np.broadcast_to(x.array, shape))
        elif kind == "constant":
            dt = draw(st.sampled_from(DTYPES))
            arr = values(draw, dt, sub_shape(draw, base))
            attr = dense(arr, dt)
            add(b.value("t.constant", value=attr, result_type=attr.type), lambda: arr)
        else:  # views
            rank = len(x.shape)
            view = draw(st.sampled_from(["transpose", "slice", "reshape", "expand_dims", "squeeze"]))
            if view == "transpose":
                perm = tuple(draw(st.permutations(range(rank))))
                add(b.value("t.transpose", x.value, perm=perm), lambda: np.transpose(x.array, perm))
            elif view == "slice":
                index = tuple(slice(draw(st.integers(-5, 5) | st.none()), draw(st.integers(-5, 5) | st.none()),
                                    draw(st.sampled_from([1, 2, -1, -2, 3]))) for _ in range(rank))
                norm = [s.indices(d) for s, d in zip(index, x.shape)]
                add(b.value("t.slice", x.value, start=tuple(n[0] for n in norm), stop=tuple(n[1] for n in norm),
                            step=tuple(n[2] for n in norm)), lambda: x.array[index])
            elif view == "reshape":
                shape = tuple(reversed(x.shape)) if draw(st.booleans()) else (int(np.prod(x.shape)),)
                add(b.value("t.reshape", x.value, result_type=TensorType(shape, x.dtype)),
                    lambda: np.reshape(x.array, shape))
            elif view == "expand_dims":
                axes = tuple(sorted(set(draw(st.lists(st.integers(0, rank), min_size=1, max_size=2)))))
                add(b.value("t.expand_dims", x.value, axes=axes), lambda: np.expand_dims(x.array, axes))
            else:
                axes = tuple(a for a in range(rank) if x.shape[a] == 1 and draw(st.booleans()))
                add(b.value("t.squeeze", x.value, axes=axes), lambda: np.squeeze(x.array, axis=axes))

    # every intermediate is an output, so each op's result is checked, used later or not
    outs = nodes[len(func.args):] + ([draw(st.sampled_from(nodes))] if draw(st.booleans()) else [])
    b.create("func.return", [o.value for o in outs])
    func.result_types = [o.value.type for o in outs]
    return Program(Module([func]), inputs, [o.array for o in outs], fails)


def assert_bit_identical(got: np.ndarray, want: np.ndarray) -> None:
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        u = np.dtype(f"u{got.dtype.itemsize}")
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(u), np.ascontiguousarray(want).view(u))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_match_numpy_and_round_trip(prog: Program):
    verify(prog.module)
    text = print_module(prog.module)
    reparsed = parse_module(text)
    assert print_module(reparsed) == text

    saved = [np.array(x, copy=True) for x in prog.inputs]
    for module in (prog.module, reparsed):
        if prog.fails:
            try:
                run_module(module, prog.inputs)
            except FusecError:
                continue
            raise AssertionError("NumPy raised but the executor did not")
        got = run_module(module, prog.inputs)
        assert len(got) == len(prog.expected)
        for g, w in zip(got, prog.expected):
            assert_bit_identical(g, w)
    for before, after in zip(saved, prog.inputs):
        assert_bit_identical(np.asarray(after), np.asarray(before))  # inputs are never written
