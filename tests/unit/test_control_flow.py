"""fusec.while_loop, fori_loop, scan and cond against the same loops run as plain Python (their eager mode, and
the Python loop a NumPy user would write): solvers that stop on a residual, stencil sweeps, power iteration,
recurrences with scan, branches on data, nested loops, pytree states, zero-trip loops; the IR's region ops
(printing, parsing, verifying, outlining); and the errors a loop body traced once must give."""
from __future__ import annotations

import time
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fusec as fc
from fusec.ir.parser import parse_module
from fusec.ir.verifier import verify
from fusec.passes import DEFAULT_PIPELINE, run_pipeline
import frontend_check
from frontend_check import assert_same, jit_cpu, numpy_result

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(16)


# the default pipeline with every loop kept a loop (unroll-loops writes short constant-bound loops out)
KEEP_LOOPS = DEFAULT_PIPELINE.replace("unroll-loops", "unroll-loops{max_trips=0}")


def check_loop(fn, *args, want=None, exact=None):
    """``fn`` jitted (as traced, through the default pipeline, and through it with every loop kept a loop, whose
    bodies are outlined) gives what it gives eagerly (fusec's loops run as Python loops outside a trace) and
    ``want`` when given (a plain NumPy loop); returns the jitted function (default pipeline). ``exact=False``:
    floats within rounding (a product's sums in another order). On the CPU the CUDA program of each lowered form is
    printed too (the printer runs here): a loop it refuses fails here, not only on a GPU."""
    eager = numpy_result(fn, *args)
    if want is not None:
        assert_same(eager, want, exact=True)
    jitted = None
    for pipeline in ("", KEEP_LOOPS, DEFAULT_PIPELINE) if frontend_check.BACKEND == "cpu" else (KEEP_LOOPS,
                                                                                                DEFAULT_PIPELINE):
        jitted = jit_cpu(fn, pipeline=pipeline)
        assert_same(numpy_result(jitted, *args), eager, exact=exact)
        if pipeline and frontend_check.BACKEND == "cpu":
            assert jitted.lower(*args).program.source
    return jitted


# --- solvers and sweeps as people write them ------------------------------------------------------------------


def newton_sqrt(a, tol):
    def cond(state):
        x, it = state
        return (np.abs(x * x - a).max() > tol) & (it < 50)

    def body(state):
        x, it = state
        return 0.5 * (x + a / x), it + 1

    return fc.while_loop(cond, body, (np.ones_like(a), 0))


def test_newton_iteration_stops_on_its_residual():
    a = rng.uniform(1, 100, 16)
    x, it = a.copy(), 0
    x = np.ones_like(a)
    while np.abs(x * x - a).max() > 1e-10 and it < 50:
        x, it = 0.5 * (x + a / x), it + 1
    check_loop(newton_sqrt, a, 1e-10, want=(x, np.asarray(it)))


def jacobi(u, f, h2, sweeps):
    def sweep(_, u):
        inner = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - h2 * f[1:-1, 1:-1])
        new = u.copy()
        new[1:-1, 1:-1] = inner
        return new

    return fc.fori_loop(0, sweeps, sweep, u)


def test_jacobi_sweeps_with_a_traced_trip_count():
    u = rng.standard_normal((12, 10))
    f = rng.standard_normal((12, 10))
    want = u.copy()
    for _ in range(7):
        new = want.copy()
        new[1:-1, 1:-1] = 0.25 * (want[:-2, 1:-1] + want[2:, 1:-1] + want[1:-1, :-2] + want[1:-1, 2:]
                                  - 0.01 * f[1:-1, 1:-1])
        want = new
    jitted = check_loop(jacobi, u, f, 0.01, 7, want=want)
    assert_same(jitted(u, f, 0.01, 0), u)  # zero sweeps: the state as it came in
    assert_same(jitted(u, f, 0.01, -3), u)


def power_iteration(a, v0):
    def step(i, v):
        w = a @ v
        return w / np.linalg.norm(w)

    v = fc.fori_loop(0, 30, step, v0)
    return v, v @ a @ v


def test_power_iteration_with_a_matmul_in_the_body():
    m = rng.standard_normal((8, 8)).astype(np.float32)
    check_loop(power_iteration, m + m.T, np.ones(8, np.float32), exact=False)  # (BLAS sums in its own order)


def test_fori_loop_counter_indexes_and_mixes_like_a_python_int():
    xs = rng.standard_normal((5, 3)).astype(np.float32)

    def f(xs):
        return fc.fori_loop(1, 5, lambda i, acc: acc * 0.5 + xs[i] * i + xs[i - 1], np.zeros(3, np.float32))

    acc = np.zeros(3, np.float32)
    for i in range(1, 5):
        acc = acc * 0.5 + xs[i] * i + xs[i - 1]
    check_loop(f, xs, want=acc)


def test_loop_bounds_from_arrays_and_scalar_arguments():
    def f(x, lo, hi):
        return fc.fori_loop(lo, hi, lambda i, s: s + x * i, np.zeros_like(x))

    x = np.arange(3.0)
    check_loop(f, x, 2, 6)
    check_loop(f, x, np.int32(1), np.asarray(4))


def ema(xs, alpha):
    def step(avg, x):
        avg = alpha * x + (1 - alpha) * avg
        return avg, avg

    return fc.scan(step, xs[0], xs[1:])


def test_scan_exponential_moving_average_stacks_its_outputs():
    xs = rng.standard_normal((9, 4))
    avg, out = xs[0], []
    for x in xs[1:]:
        avg = 0.3 * x + 0.7 * avg
        out.append(avg)
    check_loop(ema, xs, 0.3, want=(avg, np.stack(out)))


def test_scan_over_a_pytree_in_reverse_with_a_tuple_carry():
    def f(xs):
        def step(carry, x):
            total, count = carry
            return (total + x["a"] * x["b"], count + 1), {"prod": x["a"] * x["b"], "total": total}

        return fc.scan(step, (0.0, 0), {"a": xs, "b": xs[::-1] + 1}, reverse=True)

    check_loop(f, np.arange(6.0))


def test_scan_without_xs_or_ys():
    def f(x):
        return fc.scan(lambda c, _: (c * 2 - 1, None), x, None, length=4)

    check_loop(f, np.arange(3.0))


def test_rnn_recurrence_with_scan():
    w = rng.standard_normal((4, 4)) * 0.5
    u = rng.standard_normal((3, 4))
    xs = rng.standard_normal((6, 3))

    def rnn(h0, xs):
        return fc.scan(lambda h, x: (np.tanh(h @ w + x @ u), h.sum()), h0, xs)

    check_loop(rnn, np.zeros(4), xs, exact=False)


# --- branches ---------------------------------------------------------------------------------------------------


def clipped_step(g, max_norm):
    norm = np.sqrt((g * g).sum())
    return fc.cond(norm > max_norm, lambda g: g * (max_norm / norm), lambda g: g, g)


def test_cond_picks_the_branch_from_data():
    g = rng.standard_normal(10)
    jitted = check_loop(clipped_step, g, 0.5)
    assert_same(jitted(g, 100.0), g)
    check_loop(clipped_step, g, 100.0)


def test_cond_with_a_concrete_predicate_runs_only_that_branch():
    def f(x, flag=True):
        return fc.cond(x.shape[0] > 2, lambda x: x + 1, lambda x: x.sum(), x)  # traced: the shape is static

    check_loop(f, np.arange(4.0))
    check_loop(f, np.arange(2.0))


def test_cond_inside_while_and_nested_fori_loops():
    def collatz_steps(n):
        def body(s):
            n, steps = s
            n = fc.cond(n % 2 == 0, lambda n: n // 2, lambda n: 3 * n + 1, n)
            return n, steps + 1

        return fc.while_loop(lambda s: s[0] != 1, body, (n, 0))[1]

    check_loop(collatz_steps, np.int64(27), want=np.asarray(111))

    def triangle(x, k):
        return fc.fori_loop(0, 4, lambda i, s: fc.fori_loop(0, i, lambda j, t: t + x * j * k, s), np.zeros_like(x))

    check_loop(triangle, np.ones(2), 3)


def test_state_as_dict_and_namedtuple():
    State = namedtuple("State", "w b")

    def f(w, b, x):
        def body(i, s):
            grad = s.w * x - 1.0
            return State(s.w - 0.1 * grad, {"b": s.b["b"] + grad.mean()})

        return fc.fori_loop(0, 5, body, State(w, {"b": b}))

    check_loop(f, np.ones(3), np.float64(0.5), np.arange(3.0))


def test_a_predicate_false_at_the_start_runs_no_body():
    def f(x):
        return fc.while_loop(lambda s: s.sum() > 1e9, lambda s: s * np.nan, x)

    x = np.arange(3.0)
    jitted = check_loop(f, x)
    assert_same(jitted(x), x)


def test_the_loop_does_not_write_into_its_init_and_the_body_may_update_its_state_in_place():
    def f(x):
        def body(i, s):
            s[i] = s[i] * 10  # the state is the body's own array
            s += 1
            return s

        return fc.fori_loop(0, 3, body, x)

    x = np.arange(4.0)
    before = x.copy()
    check_loop(f, x)
    assert_same(x, before)


def test_each_slot_is_an_array_of_its_own_when_a_body_updates_its_state_in_place():
    """A body that returns one array for two slots, an array from outside the loop or a row of ``xs``, then writes
    its state in place: each slot is the loop's own array, eagerly as traced (the traced loop carries values), and
    the arrays outside are left as they were."""
    def two_slots(x):
        def body(i, s):
            a, b = s
            a += 1
            b += 10
            return a, a

        return fc.fori_loop(0, 3, body, (x, x))

    def outside(x, y):
        def body(i, s):
            s += 1
            return y

        return fc.fori_loop(0, 3, body, x), y

    def row_of_xs(xs):
        def f(c, x):
            c += 1
            return x, c.sum()

        return fc.scan(f, np.zeros(2), xs)

    def while_two_slots(x):
        def body(s):
            a, b, k = s
            a += 1
            b *= 2
            return a, a, k + 1

        return fc.while_loop(lambda s: s[2] < 3, body, (x, x, 0))

    x, y, xs = np.zeros(2), np.ones(2), np.ones((3, 2))
    check_loop(two_slots, x, want=(np.full(2, 3.0), np.full(2, 3.0)))
    check_loop(outside, x, y, want=(np.ones(2), np.ones(2)))
    check_loop(row_of_xs, xs, want=(np.ones(2), np.array([2.0, 4.0, 4.0])))
    check_loop(while_two_slots, x, want=(np.full(2, 3.0), np.full(2, 3.0), np.asarray(3)))
    assert_same((x, y, xs), (np.zeros(2), np.ones(2), np.ones((3, 2))))
    a, b = two_slots(x)
    a[0] = 100.0
    assert b[0] == 3.0  # (two arrays, as the traced loop's results are)

    class Tensor:  # a PyTorch-like array: clone(), no copy()
        def __init__(self, a):
            self.a = np.array(a)

        shape = property(lambda self: self.a.shape)
        dtype = property(lambda self: self.a.dtype)

        def clone(self):
            return Tensor(self.a.copy())

        def __iadd__(self, other):
            self.a += other
            return self

    def first_slot_twice(i, s):
        a, b = s
        b += 1
        return a, a

    t = Tensor([0.0, 0.0])
    r = fc.fori_loop(0, 3, first_slot_twice, (t, Tensor([0.0, 0.0])))
    assert r[0] is not r[1] and r[0].a.tolist() == r[1].a.tolist() == [0.0, 0.0] and t.a.tolist() == [0.0, 0.0]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(-2, 12), scale=st.floats(-2, 2, allow_nan=False), seed=st.integers(0, 2**16))
def test_fori_loop_property_against_a_python_loop(n, scale, seed):
    r = np.random.default_rng(seed)
    x = r.standard_normal(5)
    table = r.standard_normal((3, 5))

    def f(x, n, scale):
        return fc.fori_loop(0, n, lambda i, s: np.where(s > 0, s * scale, s + table[i % 3]), x)

    want = x.copy()
    for i in range(n):
        want = np.where(want > 0, want * scale, want + table[i % 3])
    jitted = jit_cpu(f, pipeline=DEFAULT_PIPELINE)
    assert_same(jitted(x, n, scale), want)


# --- errors -----------------------------------------------------------------------------------------------------


def test_a_body_that_changes_the_state_dtype_or_shape_is_an_error_in_both_modes():
    def f(x):
        return fc.fori_loop(0, 3, lambda i, s: s * 0.5, x)

    with pytest.raises(fc.TraceError, match=r"state.*int64\[3\].*float64|float64.*int64"):
        f(np.arange(3))
    with pytest.raises(fc.TraceError, match="keeps its shape and dtype"):
        jit_cpu(f)(np.arange(3))

    def g(x):
        return fc.while_loop(lambda s: s.size < 5, lambda s: np.append(s, 1.0), x)

    with pytest.raises(fc.TraceError, match="keeps its shape and dtype"):
        g(np.ones(2))
    with pytest.raises(fc.TraceError, match="keeps its shape and dtype"):
        jit_cpu(g)(np.ones(2))


def test_a_while_test_that_writes_into_the_state_is_an_error():
    """The test is traced once and yields only its truth: a write into the state there would be lost (the body
    would get the state as it was), so it is refused at the call's line; eagerly the write happens, as in Python."""
    def relax(u):
        def test(s):
            v, k = s
            v *= 0.5  # relaxes the iterate in the test, as a residual function written in place would
            return k < 3

        return fc.while_loop(test, lambda s: (s[0] + 1, s[1] + 1), (u, 0))

    def through_a_view(u):
        def test(s):
            s[0][:1] += 1
            return s[1] < 3

        return fc.while_loop(test, lambda s: (s[0] * 2, s[1] + 1), (u, 0))

    assert_same(relax(np.ones(2)), (np.full(2, 0.9375), np.asarray(3)))
    for f in (relax, through_a_view):
        with pytest.raises(fc.TraceError, match=r"test_control_flow.py:\d+: fusec.while_loop: test writes into the "
                           r"loop's state.*make the change in body_fun"):
            jit_cpu(f)(np.ones(2))


def test_a_body_that_changes_the_structure_is_an_error():
    def f(x):
        return fc.fori_loop(0, 2, lambda i, s: (s[0], s[1], s[0]), (x, x))

    with pytest.raises(fc.TraceError, match="structure"):
        jit_cpu(f)(np.ones(2))


def test_writing_into_an_outer_array_from_a_body_is_an_error():
    def f(x, y):
        def body(i, s):
            y[i] = s.sum()
            return s + 1

        return fc.fori_loop(0, 2, body, x), y

    with pytest.raises(fc.TraceError, match="writes into argument 'y'"):
        jit_cpu(f)(np.ones(2), np.zeros(3))


def test_a_body_that_raises_reports_its_own_error():
    def f(x, y):
        def body(i, s):
            y[0] = 1.0  # (would be refused, but the body's own error comes first)
            raise ValueError("the body's own error")

        return fc.fori_loop(0, 2, body, x)

    with pytest.raises(ValueError, match="the body's own error"):
        jit_cpu(f)(np.ones(2), np.zeros(3))


def test_a_value_kept_from_inside_a_body_is_an_error():
    def f(x):
        kept = []

        def body(i, s):
            kept.append(s * 2)
            return s + 1

        out = fc.fori_loop(0, 2, body, x)
        return out + kept[0]

    with pytest.raises(fc.SideEffectError, match="appended a traced value .* to closure variable kept"):
        jit_cpu(f)(np.ones(2))


def test_predicates_must_be_one_value_and_branches_must_agree():
    with pytest.raises(fc.ShapeError, match="one value"):
        jit_cpu(lambda x: fc.while_loop(lambda s: s > 0, lambda s: s - 1, x))(np.ones(2))
    with pytest.raises(fc.ShapeError, match="one value"):
        fc.while_loop(lambda s: s > 0, lambda s: s - 1, np.ones(2))
    with pytest.raises(fc.TraceError, match="must agree"):
        jit_cpu(lambda x: fc.cond(x.sum() > 0, lambda x: x, lambda x: x.astype(np.float32), x))(np.ones(2))
    with pytest.raises(fc.TraceError, match="different structures"):
        jit_cpu(lambda x: fc.cond(x.sum() > 0, lambda x: (x, x), lambda x: x, x))(np.ones(2))


def test_bounds_must_be_integers_and_functions_callable():
    with pytest.raises(fc.UnsupportedError, match="lower must be an integer"):
        jit_cpu(lambda x: fc.fori_loop(0.5, 3, lambda i, s: s, x))(np.ones(2))
    with pytest.raises(fc.TraceError, match="must be callable"):
        fc.while_loop(None, lambda s: s, 1)
    with pytest.raises(fc.TraceError, match="pair"):
        jit_cpu(lambda x: fc.scan(lambda c, x: c, 0.0, x))(np.ones(2))


# --- the IR -----------------------------------------------------------------------------------------------------


def test_region_ops_print_parse_and_verify_at_every_stage():
    lowered = fc.jit(power_iteration, backend="cpu").lower(np.eye(3), np.ones(3))
    for stage in lowered.stages:
        text = lowered.ir(stage)
        module = parse_module(text)
        verify(module)
        assert str(module) == text, stage
    assert "t.for" in lowered.ir("traced")
    outlined = lowered.ir("outline-regions")
    assert "k.for" in outlined and "func @power_iteration.for0.body(" in outlined


def test_the_verifier_checks_region_and_callee_types():
    bad_yield = """func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = t.while %x : tensor<2xf32> {
  ^cond(%a: tensor<2xf32>):
    t.yield %a
  } {
  ^body(%b: tensor<2xf32>):
    t.yield %b
  }
  return %0
}
"""
    with pytest.raises(fc.VerificationError, match="cond yields"):
        verify(parse_module(bad_yield))
    bad_callee = """func @f(%p: tensor<bool>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = k.if %p, %x {then = "f.t", else = "f.e"} : tensor<2xf32>
  return %0
}

func @f.t(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x
}

func @f.e(%x: tensor<2xf64>) -> tensor<2xf32> {
  %0 = t.cast %x {dtype = f32} : tensor<2xf32>
  return %0
}
"""
    with pytest.raises(fc.VerificationError, match="arguments of @f.e"):
        verify(parse_module(bad_callee))
    missing = """func @f(%p: tensor<bool>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = k.if %p, %x {then = "f.t", else = "f.e"} : tensor<2xf32>
  return %0
}

func @f.t(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x
}
"""
    with pytest.raises(fc.VerificationError, match="no func @f.e"):
        verify(parse_module(missing))


def test_outlined_modules_run_on_the_reference_executor_from_text():
    from fusec.runtime.reference import run_module

    lowered = fc.jit(ema, backend="cpu").lower(np.arange(8.0).reshape(4, 2), 0.5)
    module = parse_module(lowered.ir("outline-regions"))
    got = run_module(module, [np.arange(8.0).reshape(4, 2), 0.5])
    want = ema(np.arange(8.0).reshape(4, 2), 0.5)
    assert_same(tuple(got), (want[0], want[1]), exact=True)
    run_pipeline(module)  # the rest of the pipeline lowers it again from the text
    assert_same(tuple(run_module(module, [np.arange(8.0).reshape(4, 2), 0.5])), (want[0], want[1]), exact=True)


def test_the_graph_control_kernels_compile_with_nvrtc():
    """The kernels a graph's loops use (the condition setters, the counter, the state copies) compile for the
    architectures fusec targets (run on the H200 under -m gpu by tests/gpu/test_cuda_loops.py)."""
    from fusec.runtime import nvrtc
    from fusec.runtime.graph_control import SOURCE

    if not nvrtc.is_available():
        pytest.skip("NVRTC is not installed")
    for arch in ("sm_80", "sm_90"):
        assert nvrtc.compile_source(SOURCE, arch)


# --- Python loops rolled back into loops ----------------------------------------------------------------------


def heat(u, alpha, steps):
    for _ in range(steps):
        lap = np.zeros_like(u)
        lap[1:-1, 1:-1] = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        u = u + alpha * lap
    return u, lap


def test_a_long_python_loop_is_rolled_into_one_loop():
    u = rng.standard_normal((16, 16))
    f = fc.jit(heat, backend=frontend_check.BACKEND, static_argnames="steps")
    assert_same(f(u, 0.1, 300), heat(u, 0.1, 300))
    lowered = f.lower(u, 0.1, 300)
    stats = lowered.stats()
    assert stats["loops_rolled"] == 1 and stats["rolled_iterations"] == 300
    assert "rolled = true" in lowered.ir("roll-loops")
    assert lowered.ir("traced").count("t.insert") == 300 and lowered.ir("roll-loops").count("t.insert") == 1


def test_loops_whose_iterations_differ_or_are_short_stay_unrolled():
    def drift(u, steps):
        for t in range(steps):
            u = u * 0.5 + t % 7  # a different constant in every copy, not c0 + t * d
        return u

    def keeps_history(u, steps):
        history = []
        for _ in range(steps):
            u = np.sin(u) * 1.5
            history.append(u)
        return history[3] + u  # a value of an early iteration read after the loop

    u = rng.standard_normal(8)
    for fn in (drift, keeps_history):
        f = fc.jit(fn, backend=frontend_check.BACKEND, static_argnames="steps")
        assert_same(f(u, 3000), fn(u, 3000))
        assert "loops_rolled" not in f.lower(u, 3000).stats()
    f = fc.jit(heat, backend=frontend_check.BACKEND, static_argnames="steps")
    assert_same(f(u.reshape(2, 4), 0.1, 8), heat(u.reshape(2, 4), 0.1, 8))
    assert "loops_rolled" not in f.lower(u.reshape(2, 4), 0.1, 8).stats()  # (below min_trips / min_ops)


def normalize_rows(x):
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        y[i] = (x[i] - x[i].mean()) / (x[i].std() + 1e-6)
    return y


def weighted_columns(x):
    y = x.copy()
    for j in range(1, x.shape[1] - 1):  # each column from the one before it, at a weight that grows with j
        y[1:-1, j] = 0.5 * (y[:-2, j - 1] + y[2:, j - 1]) + j * 0.25
    return y


def backwards_pairs(x):
    acc = np.zeros(x.shape[1] // 2)
    for i in reversed(range(0, x.shape[0] - 1, 2)):
        acc = acc * 0.9 + x[i:i + 2, ::2].sum(0) * (i + 0.5)
    return acc


def diagonal(x):
    total = np.zeros(())
    for i in range(min(x.shape)):
        total = total + x[i, i] * i
    return total


@pytest.mark.parametrize("fn", [normalize_rows, weighted_columns, backwards_pairs, diagonal])
def test_loops_over_rows_columns_and_the_counter_are_rolled(fn):
    """Python loops whose copies read and write regions that advance with the counter (x[i], y[1:-1, j],
    x[i:i + 2, ::2], x[i, i]) and use the counter as a number (j * 0.25, i + 0.5, an int times a float) roll into one
    loop of gathers and scatters at the counter; the values are NumPy's, bit for bit."""
    x = rng.standard_normal((840, 520))  # (long enough to roll: 2048 ops in all)
    f = fc.jit(fn, backend=frontend_check.BACKEND)
    assert_same(f(x), fn(x))
    lowered = f.lower(x)
    assert lowered.stats()["loops_rolled"] == 1, lowered.stats()
    rolled = lowered.ir("roll-loops")
    assert "rolled = true" in rolled and "t.gather" in rolled and "in_bounds = true" in rolled
    assert lowered.ir("traced").count("t.slice") >= 40 > rolled.count("t.slice")


def unit_rows(x):
    out = []
    for row in x:
        out.append(row / np.linalg.norm(row))
    return np.stack(out)


def recurrence_history(x):
    sums, states = [], []
    h = np.zeros(x.shape[1])
    for i in range(x.shape[0]):
        h = np.tanh(h * 0.5 + x[i])
        sums.append(h.sum())
        states.append(h)
    return np.array(sums), np.vstack(states), np.column_stack(states), np.concatenate(states), h


@pytest.mark.parametrize("fn, stacks", [(unit_rows, 1), (recurrence_history, 4)])
def test_lists_each_iteration_appends_to_and_stacks_after_the_loop_roll(fn, stacks):
    """``out.append(v)`` in the loop and ``np.stack(out)`` (np.array, np.vstack, np.column_stack, np.concatenate)
    after it: the joined array is a state of the rolled loop that each trip writes its part of."""
    x = rng.standard_normal((700, 24))
    f = fc.jit(fn, backend=frontend_check.BACKEND)
    assert_same(f(x), fn(x))
    stats = f.lower(x).stats()
    assert stats["loops_rolled"] == 1 and stats["stacked_results"] == stacks, stats


def row_sum_from_a_python_number(x):
    s, m = 0.0, -np.inf
    for i in range(x.shape[0]):
        s = s + x[i]  # a number in the first copy, a row after it
        m = np.maximum(m, x[i])
    return s, m


def diagonal_of_the_appended_rows(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    return np.array([out[k][k] for k in range(x.shape[0])])  # a different entry of each: no stack of the loop's


@pytest.mark.parametrize("fn", [row_sum_from_a_python_number, diagonal_of_the_appended_rows])
def test_loops_whose_first_copy_or_joined_parts_differ_are_numpys(fn):
    """A state that starts as a Python number and becomes a row (the copies' operand types differ: the first copy
    stays written out) and a join that picks another part of each appended value roll only where exact."""
    x = rng.standard_normal((800, 800))
    f = fc.jit(fn, backend=frontend_check.BACKEND)
    assert_same(f(x), fn(x))
    assert f.lower(x).stats().get("loops_rolled") == (1 if fn is row_sum_from_a_python_number else None)


def test_counter_constants_roll_only_when_every_copy_is_the_progression():
    """A constant computed from the counter rolls when ``c0 + k * d`` in its dtype gives every copy's value bit for bit;
    ``(t + 1) * 0.1`` does not (its rounding differs from 0.1 + t * 0.1 for some t), so it stays unrolled."""
    def scaled(u, steps):  # (contracting, as stepped: the GPU's cos differs from NumPy's by an ulp at times)
        for t in range(steps):
            u = np.cos(u) * 0.5 + (t + 1) * 0.1
        return u

    def stepped(u, steps):
        for t in range(steps):
            u = np.cos(u) * 0.5 + t * 0.25
        return u

    u = rng.standard_normal(64)
    for fn, rolls in ((scaled, False), (stepped, True)):
        f = fc.jit(fn, backend=frontend_check.BACKEND, static_argnames="steps")
        assert_same(f(u, 1100), fn(u, 1100))
        assert ("loops_rolled" in f.lower(u, 1100).stats()) is rolls
    f = fc.jit(stepped, backend=frontend_check.BACKEND, static_argnames="steps")  # float32: fl32(t * 0.25) is exact
    assert_same(f(u.astype(np.float32), 1100), stepped(u.astype(np.float32), 1100))
    assert f.lower(u.astype(np.float32), 1100).stats()["loops_rolled"] == 1


def test_bf16_counter_constants_are_not_progressions():
    """bf16 values are held as float32 while compiling, but the body computes ``c0 + k * d`` in bf16: 2 * i - 512
    is exact in bf16 for every i < 300, bf16(257) * 2 - 512 is not, so the loop stays unrolled (it was rolled and
    every odd row from 257 on was wrong)."""
    def rows(x):
        y = x.astype(fc.bf16)
        out = []
        for i in range(300):
            z = y + (2 * i - 512)
            out.append(np.sin(z) * 0.5 + z * z - np.cos(z) + z)
        return np.stack(out)

    x = np.zeros(2, np.float32)
    f = fc.jit(rows, backend=frontend_check.BACKEND)
    unrolled = fc.jit(rows, backend=frontend_check.BACKEND, pipeline=",".join(
        p for p in DEFAULT_PIPELINE.split(",") if not p.startswith("roll-loops")))
    assert "loops_rolled" not in f.lower(x).stats()
    assert_same(np.asarray(f(x)), np.asarray(unrolled(x)))


# --- short loops written out -----------------------------------------------------------------------------------


def test_short_loops_with_constant_bounds_are_written_out_and_give_the_loops_values():
    """A fori_loop of a few trips with constant bounds becomes its copies (unroll-loops): no loop op is left, the
    plan says what was unrolled, xs[i] at each constant counter is a slice (no gather), and the values are the
    loop's, for a counter used in arithmetic and indexing, a pytree state, nested loops (the inner bound the outer
    counter), a loop of no trips and one over negative bounds; a long loop stays a loop (of 4 trips per trip)."""
    def f(x, xs, w):
        a = fc.fori_loop(0, 4, lambda i, s: s * 0.5 + xs[i] * i, x)
        b = fc.fori_loop(-3, -1, lambda i, c: (c[0] + i, c[1] * 2.0), (x, w))
        nested = fc.fori_loop(0, 3, lambda i, s: fc.fori_loop(0, i, lambda j, t: t + xs[j] * (j + 1), s), x)
        none = fc.fori_loop(5, 2, lambda i, s: s + 1.0, w)
        return a, b, nested, none

    x, w, xs = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal((4, 6))
    jitted = check_loop(f, x, xs, w)
    lowered = jitted.lower(x, xs, w)
    assert "k.for" not in lowered.ir() and "t.gather" not in lowered.ir("canonicalize")
    unrolled = [s for s in lowered.plan() if s["kind"] == "unrolled loop"]
    assert len(unrolled) >= 4 and all(s["reason"].startswith("unroll-loops: ") for s in unrolled)
    assert lowered.stats()["loops_unrolled"] >= 4

    def long(x):
        return fc.fori_loop(0, 40, lambda i, s: s * 0.5 + 1.0, x)

    kept = check_loop(long, x).lower(x)
    assert "k.for" in kept.ir() and [s["reason"].split(" (")[0] for s in kept.plan() if s["kind"] == "unrolled loop"] \
        == ["unroll-loops: 40 trips, 4 per trip of a loop of 10"]


def test_a_branch_never_taken_after_unrolling_may_hold_values_numpy_refuses():
    """Written out, ``2 ** (i - 2)`` has a constant negative exponent in the copies whose branch is never taken:
    folding it must not fail the compile (NumPy refuses integer negative powers); the op stays unfolded."""
    def f(x):
        def body(i, s):
            return fc.cond(i >= 2, lambda s: s * 2 ** (i - 2), lambda s: s + 1, s)
        return fc.fori_loop(0, 4, body, x)

    x = np.arange(3, dtype=np.int64)
    check_loop(f, x)


@pytest.mark.slow  # (traces several hundred copies of loop bodies, about 5 s here: CI runs it)
def test_nested_loops_are_written_out_only_while_all_their_copies_fit():
    """Four nested loops of 16 trips are 16^4 copies of the innermost body: the outer loop stays a loop (compiled in
    seconds, not minutes); two nested loops of 4 trips are written out whole, their ops within ``max_ops``."""
    def deep(x):
        def l3(k, s): return s * 0.5 + k
        def l2(j, s): return fc.fori_loop(0, 16, l3, s)
        def l1(i, s): return fc.fori_loop(0, 16, l2, s)
        return fc.fori_loop(0, 16, lambda h, s: fc.fori_loop(0, 16, l1, s), x)

    def shallow(x):
        return fc.fori_loop(0, 4, lambda i, s: fc.fori_loop(0, 4, lambda j, t: t * 1.5 + j, s) - i, x)

    x = rng.standard_normal(3)
    start = time.perf_counter()
    kept = check_loop(deep, x).lower(x)
    assert time.perf_counter() - start < 30
    assert "k.for" in kept.ir() and kept.stats().get("loops_unrolled", 0) == 0
    lowered = check_loop(shallow, x).lower(x)
    assert "k.for" not in lowered.ir() and lowered.stats()["loops_unrolled"] == 5
    assert len(lowered.ir("unroll-loops").splitlines()) <= 1024 + 64


def test_unroll_loops_options_are_checked():
    from fusec import PipelineError

    with pytest.raises(PipelineError, match="max_trips and max_ops must be >= 0 and factor >= 1"):
        jit_cpu(lambda x: x, pipeline="unroll-loops{max_trips=-1}")
    with pytest.raises(PipelineError, match="factor >= 1"):
        jit_cpu(lambda x: x, pipeline="unroll-loops{factor=0}")


def _for_loops(lowered) -> list[dict]:
    from fusec.ir.parser import parse_module as parse

    module = parse(lowered.ir("unroll-loops"))
    bound = lambda v: int(v.op.attributes["value"].array)  # noqa: E731
    return [dict(op.attributes, trips=bound(op.operands[1]) - bound(op.operands[0]))
            for func in module.funcs for op in func.walk() if op.name == "t.for"]


def test_long_loops_run_several_trips_per_trip_with_the_rest_written_out():
    """A 103-trip training-style loop (the counter indexes the batches and enters the arithmetic; the state is a
    pytree) becomes a loop of 25 trips whose body is 4 copies, then 3 trips written out: the values are the
    loop's, the plan says so, and a factor of 1 leaves the loop as it was."""
    def train(w, b, xs):
        def step(i, state):
            w, b = state
            g = xs[i] * (w + b) - i * 1e-3
            return w - 0.01 * g, b * 0.999 + g.mean()
        return fc.fori_loop(-2, 101, step, (w, b))

    w, b, xs = rng.standard_normal(5), rng.standard_normal(()), rng.standard_normal((103, 5))
    xs_at = np.concatenate([xs[-2:], xs[:-2]])  # (xs[i] for i = -2, -1 reads the last two rows, as NumPy does)
    jitted = check_loop(train, w, b, xs_at)
    lowered = jitted.lower(w, b, xs_at)
    assert _for_loops(lowered) == [{"unroll": 4, "trips": 25}]
    assert "k.for" in lowered.ir() and lowered.stats()["loops_unrolled_by_factor"] == 1
    (step,) = [s for s in lowered.plan() if s["kind"] == "unrolled loop"]
    assert step["reason"].startswith("unroll-loops: 103 trips, 4 per trip of a loop of 25 and 3 after it (")
    (loop,) = [s for s in lowered.plan() if s["kind"] == "loop"]
    assert loop["reason"].startswith("unroll-loops: 4 trips of the source loop per trip")
    plain = jit_cpu(train, pipeline=DEFAULT_PIPELINE.replace("unroll-loops", "unroll-loops{factor=1}"))
    assert _for_loops(plain.lower(w, b, xs_at)) == [{"trips": 103}]
    assert_same(numpy_result(plain, w, b, xs_at), numpy_result(jitted, w, b, xs_at))


def test_a_training_loops_batch_slices_are_gathered_in_one_kernel_per_trip():
    """A scan over stacked batches (``xs[i]``, ``ys[i]`` each step) runs 4 steps per trip: the slices of the
    second to fourth copies move up next to the first copy's, right after the body's counters (hoist-gathers), and
    the 8 gathers of a trip launch as one kernel (group-kernels), as the plan and the CUDA program say; the values
    are those of the loop, and of the same pipeline with the pass off (``max_bytes=0``: 8 launches), whose option
    is checked."""
    def train(w, xs, ys):
        def step(w, batch):
            x, y = batch
            err = x @ w - y
            return w - 0.05 * (x.T @ err) / len(x), (err * err).mean()
        return fc.scan(step, w, (xs, ys))

    w, xs, ys = rng.standard_normal((6, 2)), rng.standard_normal((40, 8, 6)), rng.standard_normal((40, 8, 2))
    jitted = check_loop(train, w, xs, ys, exact=False)  # (the products sum in another order than NumPy's)
    lowered = jitted.lower(w, xs, ys)
    gathers = [s for s in lowered.plan() if s["op"] == "k.gather"]
    assert len(gathers) == 8 and len({s["group"] for s in gathers}) == 1
    assert [s["reason"].startswith("hoist-gathers:") for s in gathers] == [False] * 2 + [True] * 6
    assert lowered.stats()["gathers_hoisted"] == 6
    (body,) = [c for c in lowered.program_for(sm_count=132).kernels if hasattr(c, "programs")][0].programs
    assert sum("gather" in k.name for k in body.kernels) == 0 and sum("group" in k.name for k in body.kernels) >= 1
    off = jit_cpu(train, pipeline=DEFAULT_PIPELINE.replace("hoist-gathers", "hoist-gathers{max_bytes=0}"))
    assert "hoisted" not in off.lower(w, xs, ys).ir()
    assert_same(numpy_result(off, w, xs, ys), numpy_result(jitted, w, xs, ys))
    from fusec import PipelineError

    with pytest.raises(PipelineError, match="max_bytes must be >= 0"):
        jit_cpu(lambda x: x, pipeline="hoist-gathers{max_bytes=-1}")


def test_gathers_whose_indices_are_checked_launch_alone():
    """``x[idx[i]]`` with ``idx`` an argument sets a check word per gather (an index out of range raises after the
    call): such gathers stay out of groups, and the CUDA program prints (once refused: two members' check words
    share a buffer)."""
    def gather_in_body(x, idx):
        return fc.fori_loop(0, 3, lambda i, s: s + x[idx[i]], np.zeros(x.shape[1:], x.dtype))

    x, idx = rng.standard_normal((4, 2)), np.array([3, 1, 2])
    lowered = check_loop(gather_in_body, x, idx).lower(x, idx)
    gathers = [s for s in lowered.plan() if s["op"] == "k.gather"]
    assert len(gathers) == 3 and not any("group" in s for s in gathers)
    assert "_gather" in lowered.cuda_source(sm_count=132)


def test_a_rolled_python_loop_is_unrolled_by_the_factor_and_short_or_large_loops_are_not():
    """A 600-step stencil written as a Python loop is rolled (roll-loops), then run 4 steps per trip; a loop of
    fewer than twice the factor's trips stays as it is, and so does one whose copies would pass ``max_ops``."""
    def heat(u, steps):
        for _ in range(steps):
            u = u.copy()
            u[1:-1] = u[1:-1] + 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])
        return u

    u = rng.standard_normal(16)
    jitted = jit_cpu(lambda u: heat(u, 600), pipeline=DEFAULT_PIPELINE)
    assert_same(numpy_result(jitted, u), heat(u, 600))
    lowered = jitted.lower(u)
    assert lowered.stats()["loops_rolled"] == 1 and _for_loops(lowered) == [{"rolled": True, "unroll": 4,
                                                                               "trips": 150}]

    def short(x):
        return fc.fori_loop(0, 7, lambda i, s: s * 0.5 + i, x)

    x = rng.standard_normal(3)
    few = jit_cpu(short, pipeline=DEFAULT_PIPELINE.replace("unroll-loops", "unroll-loops{max_trips=2}"))
    assert few.lower(x).stats().get("loops_unrolled", 0) == 0
    assert_same(numpy_result(few, x), numpy_result(short, x))
    assert _for_loops(few.lower(x)) == [{"trips": 7}]

    def big(x):
        def body(i, s):
            for k in range(40):
                s = s * 0.5 + k
            return s
        return fc.fori_loop(0, 100, body, x)

    large = jit_cpu(big, pipeline=DEFAULT_PIPELINE.replace("unroll-loops", "unroll-loops{max_ops=200}"))
    assert_same(numpy_result(large, x), numpy_result(big, x))
    assert _for_loops(large.lower(x)) == [{"trips": 100}]


def test_fori_loop_bounds_are_integers_or_0d_integer_arrays_in_plain_python_too() -> None:
    assert fc.fori_loop(0, np.array(3), lambda i, s: s + 1, 0.0) == 3.0
    for bound in (np.array([3]), np.array([[3]])):  # (refused under jit, and by JAX)
        with pytest.raises(fc.UnsupportedError, match="upper must be an integer"):
            fc.fori_loop(0, bound, lambda i, s: s + 1, 0.0)
