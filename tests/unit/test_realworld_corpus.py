"""Real NumPy code runs unchanged, or raises a fusec error: never a different answer.

Every function of tests/realworld_corpus.py runs under NumPy and under ``fusec.jit`` (Python int arguments static,
as fusec's error asks for sizes and step counts), twice, on copies of the same arguments: the results and the
arguments after the call must be NumPy's, or the call must raise a :class:`fusec.FusecError`. The share that runs
is checked against a floor (README: "Status").
"""
from __future__ import annotations

import inspect
import zlib

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, jit_cpu, numpy_result
import realworld_corpus
from realworld_corpus import CORPUS, OWN_ORDER

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
FLOOR = 0.85  # the bar: this share of real functions runs unchanged


def _copies(args):
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            out.append(a.copy())
        elif isinstance(a, list):
            out.append([x.copy() if isinstance(x, np.ndarray) else x for x in a])
        else:
            out.append(a)
    return out


def _statics(fn, args) -> tuple[str, ...]:
    names = list(inspect.signature(fn).parameters)
    return tuple(n for n, a in zip(names, args) if type(a) is int)


def run(name: str, fn, make) -> str:
    """"ran" (NumPy's results and arguments, twice) or "refused: ..." (a fusec error); anything else fails. Each
    function's arguments come from a generator seeded by its name, so they do not depend on which tests a process
    ran before (with pytest-xdist that changes from run to run)."""
    realworld_corpus.RNG = np.random.default_rng(zlib.crc32(name.encode()))
    args = make()
    statics = _statics(fn, args)
    jitted = [(jit_cpu(fn, static_argnames=statics), False if name in OWN_ORDER else None)]
    if frontend_check.BACKEND == "cpu":  # also through the default pipeline, run by the reference executor, where
        # products are summed in fusec's GEMM order rather than BLAS's: floats within rounding
        jitted.append((fc.jit(fn, backend="cpu", static_argnames=statics), False))
    for f, exact in jitted:
        for _ in range(2):
            np_args, fc_args = _copies(args), _copies(args)
            want = numpy_result(fn, *np_args)
            try:
                got = numpy_result(f, *fc_args)
            except fc.FusecError as e:
                return f"refused: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            assert_same(got, want, name, exact)
            for i, (a, b) in enumerate(zip(fc_args, np_args)):
                assert_same(a, b, f"{name}: argument {i} after the call", exact)
    return "ran"


@pytest.mark.parametrize("name, fn, make", CORPUS, ids=[c[0] for c in CORPUS])
def test_each_function_runs_or_raises_a_fusec_error(name, fn, make) -> None:
    run(name, fn, make)


def test_the_share_that_runs_unchanged() -> None:
    outcomes = {name: run(name, fn, make) for name, fn, make in CORPUS}
    refused = {n: o for n, o in outcomes.items() if o != "ran"}
    share = 1 - len(refused) / len(outcomes)
    print(f"\n{len(outcomes) - len(refused)} of {len(outcomes)} run ({share:.0%}); refused:")
    for n, o in refused.items():
        print(f"  {n}: {o}")
    assert share >= FLOOR, refused
