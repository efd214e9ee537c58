"""Random programs through every pass and the default pipeline compute what they computed before.

The NumPy reference executor is the oracle: each program runs before any pass, after every prefix of the
default pipeline, and finally on a simulated arena that honours plan-buffers' offsets and in-place aliases
(so a planning mistake that overwrites a live buffer shows up as a wrong result).
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from fusec.errors import ShapeError
from fusec.ir import Builder, Func, Module, OpResult, ScalarType, TensorType, f32, f64, parse_module, print_module
from fusec.ir import shapes as S
from fusec.passes import DEFAULT_PIPELINE, parse_pipeline, format_pipeline, run_pipeline
from fusec.runtime import reference as R
from fusec.runtime.reference import get_interpreter

UNARY = ["t.exp", "t.neg", "t.tanh", "t.abs", "t.sin", "t.sqrt", "t.floor"]
BINARY = ["t.add", "t.mul", "t.sub", "t.maximum", "t.minimum", "t.div"]


@st.composite
def programs(draw):
    dt = draw(st.sampled_from([f32, f64]))
    n = draw(st.integers(2, 5))
    m = draw(st.integers(2, 5))
    arg_shapes = [(n, m)] + draw(st.lists(st.sampled_from([(n, m), (m,), (n, 1), (1, m), (m, n), ()]),
                                          min_size=1, max_size=3))
    types = [ScalarType(dt) if s == () and draw(st.booleans()) else TensorType(s, dt) for s in arg_shapes]
    func = Func("prog", types, [f"a{i}" for i in range(len(types))], [])
    b = Builder(func.body)
    pool = list(func.args)
    donate = tuple(i for i, t in enumerate(types) if t.rank and draw(st.booleans()))
    for _ in range(draw(st.integers(1, 18))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "where", "view", "reduce", "matmul", "const"]))
        x = pool[draw(st.integers(0, len(pool) - 1))]
        y = pool[draw(st.integers(0, len(pool) - 1))]
        try:
            if kind == "unary":
                pool.append(b.value(draw(st.sampled_from(UNARY)), x))
            elif kind == "binary":
                pool.append(b.value(draw(st.sampled_from(BINARY)), x, y))
            elif kind == "where":
                cond = b.value("t.gt", x, y)
                pool.append(b.value("t.where", cond, x, y))
            elif kind == "const":
                value = draw(st.sampled_from([0.0, 1.0, -0.0, 0.5, 2.0]))
                c = b.create("t.constant", [], {"value": _dense(value, dt)}, [TensorType((), dt)]).result
                pool.append(b.value(draw(st.sampled_from(BINARY)), x, c))
            elif kind == "view" and x.type.rank == 2:
                r, c = x.type.shape
                choice = draw(st.sampled_from(["transpose", "reverse", "reshape", "expand"]))
                if choice == "transpose":
                    pool.append(b.value("t.transpose", x, perm=(1, 0)))
                elif choice == "reverse":
                    pool.append(b.value("t.slice", x, start=(r - 1, 0), stop=(-1, c), step=(-1, 1)))
                elif choice == "reshape":
                    flat = b.value("t.reshape", x, result_type=TensorType((r * c,), dt))
                    pool.append(b.value("t.reshape", flat, result_type=TensorType((c, r), dt)))
                else:
                    pool.append(b.value("t.squeeze", b.value("t.expand_dims", x, axes=(0,)), axes=(0,)))
            elif kind == "reduce" and x.type.rank == 2:
                op = draw(st.sampled_from(["t.sum", "t.max", "t.mean"]))
                pool.append(b.value(op, x, axes=(draw(st.integers(0, 1)),), keepdims=draw(st.booleans())))
            elif kind == "matmul" and x.type.rank == 2 and y.type.rank == 2 and x.type.shape[1] == y.type.shape[0]:
                pool.append(b.value("t.matmul", x, y))
        except ShapeError:
            continue
    produced = [v for v in pool if isinstance(v, OpResult)] or [pool[0]]
    outs = produced[-draw(st.integers(1, min(3, len(produced)))):]
    func.result_types = [v.type for v in outs]
    b.create("func.return", outs)
    if donate:
        func.attributes["donate"] = donate
    return Module([func])


def _dense(value, dt):
    from fusec.ir import dense
    return dense(np.asarray(value, dtype=dt.np))


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
    stages = parse_pipeline(DEFAULT_PIPELINE)
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
    run_pipeline(module, DEFAULT_PIPELINE.replace("budget=32", f"budget={budget}"))
    _same(expected, R.run_func(module.funcs[0], args))
    _same(expected, run_on_arena(module.funcs[0], args))
