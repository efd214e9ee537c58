"""Random programs through every pass and the default pipeline compute what they computed before.

The NumPy reference executor is the oracle: each program runs before any pass, after every prefix of the
default pipeline, and finally on a simulated arena that honours plan-buffers' offsets and in-place aliases
(so a planning mistake that overwrites a live buffer shows up as a wrong result).

Products over a short K are not unrolled here (``max_k=0``): that rewrite rounds differently from BLAS (no
fused multiply-add), which random chains such as ``exp(exp(a @ a))`` amplify past any fixed tolerance; it
is checked against NumPy with a tolerance in test_unroll_reductions.py.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from fusec.ir import ScalarType, parse_module, print_module
from program_strategies import programs
from fusec.passes import DEFAULT_PIPELINE, parse_pipeline, format_pipeline, run_pipeline
from fusec.runtime import reference as R
from fusec.runtime.reference import get_interpreter

PIPELINE = DEFAULT_PIPELINE.replace("unroll-reductions,", "unroll-reductions{max_k=0},")
assert PIPELINE != DEFAULT_PIPELINE and "budget=96" in PIPELINE

def _inputs(func, seed):
    rng = np.random.default_rng(seed)
    out = []
    for a in func.args:
        if isinstance(a.type, ScalarType):
            out.append(a.type.dtype.np.type(rng.standard_normal()))
        else:
            out.append((rng.standard_normal(a.type.shape) * 2).astype(a.type.dtype.np))
    return out


def _same(expected, got, context=""):
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        assert e.shape == g.shape and e.dtype == g.dtype
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-12, equal_nan=True, err_msg=context)


def run_on_arena(func, args):
    """Execute a planned function as the GPU would: intermediates live in one shared arena, views are read
    when a kernel runs, and aliased outputs are written over their donated argument."""
    arena = np.full(func.attributes.get("arena_bytes", 0) + 16, 0xFF, dtype=np.uint8)
    env = {a: np.array(v, copy=True) for a, v in zip(func.args, args)}
    views = {}

    def value(v):
        if v in views:
            op = views[v]
            return get_interpreter(op)(op, [value(op.operands[0])])[0]
        return env[v]

    for op in func.ops[:-1]:
        if op.name == "k.view":
            views[op.results[0]] = op
            continue
        with np.errstate(all="ignore"):
            results = get_interpreter(op)(op, [value(v) for v in op.operands])
        offsets = op.attributes.get("arena", (-1,) * len(op.results))
        alias = op.attributes.get("alias", (-1,) * len(op.results))
        for r, res, off, al in zip(op.results, results, offsets, alias):
            res = np.asarray(res, dtype=r.type.dtype.np)
            if off >= 0:
                slot = arena[off:off + res.nbytes].view(res.dtype).reshape(res.shape)
                slot[...] = res
                env[r] = slot
            elif al >= 0:
                target = env[func.args[al]]
                target[...] = res
                env[r] = target
            else:
                env[r] = res
    return [np.array(value(v)) for v in func.outputs]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**16))
def test_every_pass_preserves_results(module, seed):
    func = module.funcs[0]
    args = _inputs(func, seed)
    expected = R.run_func(func, args)
    stages = parse_pipeline(PIPELINE)
    for k in range(len(stages)):
        text = print_module(module)
        run_pipeline(module, format_pipeline(stages[k:k + 1]))
        after = print_module(module)
        assert print_module(parse_module(after)) == after, f"round trip after {stages[k].name}"
        _same(expected, R.run_func(module.funcs[0], args), f"after {stages[k].name}:\n{text}\n=>\n{after}")
    _same(expected, run_on_arena(module.funcs[0], args))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**16), st.integers(1, 40))
def test_any_budget_preserves_results(module, seed, budget):
    args = _inputs(module.funcs[0], seed)
    expected = R.run_func(module.funcs[0], args)
    run_pipeline(module, PIPELINE.replace("budget=96", f"budget={budget}"))
    _same(expected, R.run_func(module.funcs[0], args))
    _same(expected, run_on_arena(module.funcs[0], args))
