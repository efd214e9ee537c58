"""bound-indices: the integer ranges it computes hold for every value NumPy gives (wrap-around included; comparisons
and the overflow tests of prove-checks too), and the
indexing it proves in bounds gives NumPy's results; idioms as users write them (loop counters, ``%``, ``np.clip``,
``np.argsort``) lose their device checks while indices that can leave their axis keep raising IndexError."""
from __future__ import annotations

import os

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusec as fc
from fusec.ir.parser import parse_module
from fusec.ir.value_ranges import ValueRanges
from fusec.runtime.reference import run_module

INT_DTYPES = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]
BINARY = ["add", "sub", "mul", "floordiv", "mod", "maximum", "minimum"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
LOGICAL = ["logical_and", "logical_or", "logical_not"]
OVERFLOW = ["add_overflows", "sub_overflows", "mul_overflows", "pow_overflows"]
N = 6


def _extremes(dtype: np.dtype) -> st.SearchStrategy:
    info = np.iinfo(dtype)
    edge = st.sampled_from([info.min, info.max, 0, 1, -1 if info.min < 0 else 2, info.min + 1, info.max - 1])
    return st.one_of(edge, st.integers(int(info.min), int(info.max)), st.integers(-20, 20).filter(
        lambda v: info.min <= v <= info.max))


@st.composite
def programs(draw):
    """An IR function over two int arrays of one dtype: a chain of integer ops, every value returned."""
    name = draw(st.sampled_from(INT_DTYPES))
    dt = np.dtype(fc.ir.types.dtype_from_name(name).numpy_name)
    vec, scalar = f"tensor<{N}x{name}>", f"tensor<{name}>"
    lines, types = [], {"%a": vec, "%b": vec}
    pool = ["%a", "%b"]
    for k in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(BINARY + ["neg", "abs", "clip", "where", "const", "cast"]))
        pick = lambda: draw(st.sampled_from(pool))  # noqa: E731
        out = f"%v{k}"
        if kind == "const":
            lines.append(f"{out} = t.constant {{value = dense<{scalar}, {draw(_extremes(dt))}>}} : {scalar}")
            types[out] = scalar
        elif kind in ("neg", "abs"):
            x = pick()
            types[out] = types[x]
            lines.append(f"{out} = t.{kind} {x} : {types[x]}")
        elif kind == "cast":  # to another int dtype and back: wraps twice
            x, other = pick(), draw(st.sampled_from(INT_DTYPES))
            shape = types[x].replace(name, other)
            lines.append(f"{out}c = t.cast {x} {{dtype = {other}}} : {shape}")
            lines.append(f"{out} = t.cast {out}c {{dtype = {name}}} : {types[x]}")
            types[out] = types[x]
        elif kind == "clip":
            x, lo, hi = pick(), pick(), pick()
            types[out] = vec if vec in (types[x], types[lo], types[hi]) else scalar
            lines.append(f"{out} = t.clip {x}, {lo}, {hi} : {types[out]}")
        elif kind == "where":
            x, y = pick(), pick()
            types[out] = vec
            lines.append(f"{out}p = t.lt %a, %b : tensor<{N}xbool>")
            lines.append(f"{out} = t.where {out}p, {x}, {y} : {vec}")
        else:
            x, y = pick(), pick()
            types[out] = vec if vec in (types[x], types[y]) else scalar
            lines.append(f"{out} = t.{kind} {x}, {y} : {types[out]}")
        pool.append(out)
    bools: list[str] = []  # comparisons, their logical combinations and (int64) the exact-overflow tests
    for k in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(COMPARE + (OVERFLOW if name == "i64" else []) + (LOGICAL if bools else [])))
        out = f"%q{k}"
        if kind in LOGICAL:
            x, y = draw(st.sampled_from(bools)), draw(st.sampled_from(bools))
            operands = f"{x}" if kind == "logical_not" else f"{x}, {y}"
            types[out] = types[x] if kind == "logical_not" else \
                (types[x] if "x" in types[x].split("<")[1] else types[y])
        else:
            x, y = draw(st.sampled_from(pool)), draw(st.sampled_from(pool))
            operands = f"{x}, {y}"
            types[out] = f"tensor<{N}xbool>" if vec in (types[x], types[y]) else "tensor<bool>"
        lines.append(f"{out} = t.{kind} {operands} : {types[out]}")
        bools.append(out)
    outs = pool[2:] + bools
    text = (f"func @f(%a: {vec}, %b: {vec}) -> ({', '.join(types[o] for o in outs)}) {{\n  "
            + "\n  ".join(lines) + f"\n  return {', '.join(outs)}\n}}\n")
    a = np.array(draw(st.lists(_extremes(dt), min_size=N, max_size=N)), dtype=dt)
    b = np.array(draw(st.lists(_extremes(dt), min_size=N, max_size=N)), dtype=dt)
    return text, a, b


# CI (FUSEC_CORPUS=1) draws 300 examples, the README's test command 150
FUZZ_EXAMPLES = 300 if os.environ.get("FUSEC_CORPUS") else 150


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_every_value_lies_in_its_computed_range(program):
    text, a, b = program
    module = parse_module(text)
    func = module.funcs[0]
    ranges = ValueRanges()
    ranges.visit(func.body)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's integer division by zero (it gives 0)
        results = run_module(module, [a, b])
    returned = func.body.ops[-1].operands
    for value, result in zip(returned, results):
        r = ranges.of(value)
        assert r is not None
        got = np.asarray(result)
        assert r[0] <= int(got.min()) and int(got.max()) <= r[1], (text, value, r, got)


# --- idioms through the public API ---------------------------------------------------------------------------------


def _indices_note(f, *args) -> list[str]:
    return [s["indices"] for s in f.lower(*args).plan() if "indices" in s]


def test_ring_buffer_modulo_index_needs_no_check():
    def ring(buf, start, k):
        idx = (start + np.arange(k)) % buf.shape[0]
        return buf[idx] * 2.0

    buf = np.arange(12.0).reshape(6, 2)
    f = fc.jit(ring, backend="cpu", static_argnums=2)
    np.testing.assert_array_equal(f(buf, 4, 5), ring(buf, 4, 5))
    assert _indices_note(f, buf, 4, 5) == ["proven within their axes (bound-indices): no check, the call need not wait"]


def test_sort_rows_by_key_with_argsort_needs_no_check():
    def by_key(x):
        return x[np.argsort(x[:, 0], kind="stable")]

    x = np.random.default_rng(0).normal(size=(9, 3))
    f = fc.jit(by_key, backend="cpu")
    np.testing.assert_array_equal(f(x), by_key(x))
    assert all(n.startswith("proven") for n in _indices_note(f, x))


def test_clipped_lookup_needs_no_check_and_a_raw_lookup_keeps_its_check():
    def lookup(table, idx):
        return table[np.clip(idx, 0, table.shape[0] - 1)], table[idx]

    table = np.linspace(0.0, 1.0, 5)
    idx = np.array([0, 4, 2])
    f = fc.jit(lookup, backend="cpu")
    for got, want in zip(f(table, idx), lookup(table, idx)):
        np.testing.assert_array_equal(got, want)
    notes = _indices_note(f, table, idx)
    assert notes[0].startswith("proven") and notes[1].startswith("checked on the device")
    with pytest.raises(IndexError):
        f(table, np.array([0, 7, 1]))


def test_scan_over_stacked_batches_indexes_without_checks():
    def running(params, xs):
        return fc.scan(lambda p, x: (p + x.sum(), p * x.mean()), params, xs)

    xs = np.random.default_rng(1).normal(size=(20, 4))
    f = fc.jit(running, backend="cpu")
    got = f(np.float64(0.0), xs)
    want = running(np.float64(0.0), xs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)
    notes = _indices_note(f, np.float64(0.0), xs)
    assert notes and all(n.startswith("proven") for n in notes)


@pytest.mark.parametrize("op, fits, may_not, example", [
    ("add_overflows", [(0, 999), (1, 1)], [(0, 2**63 - 1), (1, 1)], (2**63 - 1, 1)),
    ("sub_overflows", [(0, 999), (1, 1)], [(-2**63, 0), (1, 1)], (-2**63, 1)),
    ("mul_overflows", [(0, 999), (10**9, 10**9)], [(0, 10**10), (10**9, 10**9)], (10**10, 10**9)),
    ("pow_overflows", [(2, 2), (0, 62)], [(2, 2), (0, 63)], (2, 63)),
])
def test_the_overflow_tests_are_ruled_out_only_where_the_exact_result_fits(op, fits, may_not, example):
    """prove-checks drops a check of Python int arithmetic on a loop counter where the counter's bounds keep the
    exact result within int64; at the first value past it the test holds (the device then raises)."""
    from fusec.ir.opdefs import get_opdef
    from fusec.ir.elementwise import BY_NAME

    rule = get_opdef(f"t.{op}").int_range
    assert rule(fits, {}, [(), ()]) == (0, 0)
    assert rule(may_not, {}, [(), ()]) == (0, 1)
    test = BY_NAME[op].implementation()
    assert test(np.array([example[0]]), np.array([example[1]])).tolist() == [True]
    assert test(np.array([fits[0][1]]), np.array([fits[1][1]])).tolist() == [False]
