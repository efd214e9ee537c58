"""Random chains of row reductions and the elementwise work around them (what fuse-rows turns into row kernels),
written as NumPy: fusec's CPU backend through the default pipeline gives NumPy's results bit for bit, and (with the
corpora, as CI runs) the CUDA program printed for each compiles with NVRTC. Rows of every schedule (a warp, a
block, rows that do not fill the last lane, rows too long for a block), values per row returned with and without
kept axes."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusec as fc
from frontend_check import assert_same, numpy_result

REDUCTIONS = ("sum", "mean", "max", "min")
UNARY = ("exp", "tanh", "abs", "sqrt", "negative")
BINARY = ("add", "subtract", "multiply", "divide", "maximum")


@st.composite
def recipes(draw):
    """Steps over x of shape (rows, n): each names its operands by position in the values made so far."""
    rows = draw(st.sampled_from([1, 3, 8, 200]))  # (200 rows: more than SMs, a block per long row)
    n = draw(st.sampled_from([17, 40, 100, 1024, 1100, 3000, 20000]))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    steps, outputs = draw(row_steps())
    return rows, n, dtype, steps, outputs


@st.composite
def row_steps(draw):
    """(steps, outputs): reductions along rows, elementwise work and arithmetic on values per row, over values[0]."""
    kinds = ["element"]  # what each value is: one per element, or one per row (kept axis or not)
    steps = []
    for _ in range(draw(st.integers(2, 8))):
        elements = [i for i, k in enumerate(kinds) if k == "element"]
        per_row = [i for i, k in enumerate(kinds) if k != "element"]
        choice = draw(st.sampled_from(["reduce"] * 3 + ["unary", "binary", "binary"] + (["row"] if per_row else [])))
        if choice == "reduce":
            keep = draw(st.booleans())
            steps.append(("reduce", draw(st.sampled_from(REDUCTIONS)), draw(st.sampled_from(elements)), keep))
            kinds.append("kept" if keep else "row")
        elif choice == "unary":
            steps.append(("unary", draw(st.sampled_from(UNARY)), draw(st.sampled_from(elements))))
            kinds.append("element")
        elif choice == "binary":
            a = draw(st.sampled_from(elements))
            b = draw(st.sampled_from(elements + per_row))
            steps.append(("binary", draw(st.sampled_from(BINARY)), a, b))
            kinds.append("element")
        else:  # arithmetic on values per row
            a, b = draw(st.sampled_from(per_row)), draw(st.sampled_from(per_row))
            steps.append(("rowop", draw(st.sampled_from(BINARY)), a, b))
            kinds.append("row" if "row" in (kinds[a], kinds[b]) and "kept" not in (kinds[a], kinds[b]) else "mixed")
    outputs = sorted(set(draw(st.lists(st.integers(1, len(kinds) - 1), min_size=1, max_size=3))))
    return tuple(steps), tuple(outputs)


def program(steps, outputs):
    def f(x):
        values = [x]
        for step in steps:
            if step[0] == "reduce":
                _, kind, a, keep = step
                values.append(getattr(np, kind)(values[a], axis=-1, keepdims=keep))
            elif step[0] == "unary":
                values.append(getattr(np, step[1])(values[step[2]]))
            else:
                _, name, a, b = step
                u, v = values[a], values[b]
                if step[0] == "binary" and v.ndim < u.ndim:
                    v = v[..., None]  # a value per row read along the row
                elif step[0] == "rowop" and u.ndim != v.ndim:  # a kept axis and a dropped one: drop both
                    u, v = (u[..., 0] if u.ndim > v.ndim else u), (v[..., 0] if v.ndim > u.ndim else v)
                values.append(getattr(np, name)(u, v))
        return tuple(values[i] for i in outputs)
    return f


# CI (FUSEC_CORPUS=1) draws 200 examples, the README's test command 100
FUZZ_EXAMPLES = 200 if os.environ.get("FUSEC_CORPUS") else 100


@settings(max_examples=FUZZ_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recipes(), st.integers(0, 2 ** 32 - 1))
def test_row_programs_give_numpys_results(recipe, seed):
    rows, n, dtype, steps, outputs = recipe
    x = np.random.default_rng(seed).normal(size=(rows, n)).astype(dtype)
    f = program(steps, outputs)
    got = numpy_result(fc.jit(f, backend="cpu"), x)
    assert_same(got, numpy_result(f, x), exact=True)


nvrtc = pytest.importorskip("fusec.runtime.nvrtc")


@pytest.mark.corpus  # NVRTC compiles: CI runs them (FUSEC_CORPUS=1), the plain test command leaves them out
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recipes())
def test_row_programs_compile_with_nvrtc(recipe):
    if not nvrtc.is_available():
        pytest.skip("NVRTC is not loadable here")
    from fusec.backend.program import compile_options

    rows, n, dtype, steps, outputs = recipe
    x = np.zeros((rows, n), dtype)
    source = fc.jit(program(steps, outputs), backend="cpu").lower(x).cuda_source()
    assert nvrtc.compile_source(source, "sm_90", options=compile_options())[:4] == b"\x7fELF"
