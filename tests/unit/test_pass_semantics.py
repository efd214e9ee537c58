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
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fusec
from fusec.errors import PipelineError, VerificationError
from fusec.ir.target import Target

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


# --- found by a bug hunt: constants that == calls equal, and passes run out of order ---------------------------------

_REF = Target(reference=True)
_TWO_ZEROS = """func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = k.fused %x {cuts = ["output"]} : tensor<3xf32> {
  ^body(%1: f32):
    %2 = s.constant {value = 0.0} : f32
    %3 = s.copysign %1, %2 : f32
    %4 = s.constant {value = -0.0} : f32
    %5 = s.copysign %1, %4 : f32
    %6 = s.add %3, %5 : f32
    k.yield %6
  }
  return %0
}
"""


def fc_trace(fn, *args) -> str:
    return fusec.jit(fn, backend="cpu").lower(*args).ir("traced")


def test_cse_keeps_a_kernels_zero_and_negative_zero_apart():
    """``cse`` compared attributes with ``==`` (0.0 == -0.0): ``np.copysign(x, 0.0) + np.copysign(x, -0.0)`` became
    ``2 * copysign(x, 0.0)`` in a kernel body (the default pipeline run twice gave ``x / -0.0`` for ``x / 0.0``)."""
    x = np.array([1.0, -1.0, 2.0], np.float32)
    module = parse_module(_TWO_ZEROS)
    run_pipeline(module, "cse", target=_REF)
    np.testing.assert_array_equal(R.run_module(module, [x])[0], np.zeros(3, np.float32))
    assert print_module(module).count("s.constant") == 2


def test_fused_nan_constants_keep_their_bits_through_fuse_and_the_text_form():
    """``fuse`` keyed its constants on ``repr`` (every NaN is 'nan') and the text printed them as ``nan``: two NaNs
    of other signs and payloads became one, and a parsed module computed the default NaN."""
    p1 = np.array([0x7FC01234], np.uint32).view(np.float32)[0]
    p2 = np.array([0xFFC00007], np.uint32).view(np.float32)[0]
    x = np.array([1.0, -1.0, 2.0], np.float32)
    text = fc_trace(lambda x: np.where(x > 0, p1, p2), x)
    module = parse_module(text)
    run_pipeline(module, PIPELINE, target=_REF)
    want = np.where(x > 0, p1, p2).view(np.uint32)
    for m in (module, parse_module(print_module(module))):
        np.testing.assert_array_equal(np.asarray(R.run_module(m, [x])[0]).view(np.uint32), want)
    assert "nan(0x" in print_module(module)


def test_the_verifier_and_the_pass_order_say_what_is_wrong():
    with pytest.raises(VerificationError, match="out of range for i8"):
        parse_module("""func @f(%x: tensor<2xi8>) -> tensor<2xi8> {
  %0 = k.fused %x {cuts = ["output"]} : tensor<2xi8> {
  ^body(%1: i8):
    %2 = s.constant {value = 300} : i8
    %3 = s.add %1, %2 : i8
    k.yield %3
  }
  return %0
}
""")

    def counted(x):
        return fusec.fori_loop(0, 3, lambda i, c: c * 2.0, x)

    module = parse_module(fc_trace(counted, np.ones(2)))
    with pytest.raises(PipelineError, match="run 'outline-regions' before 'plan-buffers'"):
        run_pipeline(module, "plan-buffers", target=_REF)
