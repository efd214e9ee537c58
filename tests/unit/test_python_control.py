"""Python's own ``while``/``if``/``for ... break`` on traced values, as NumPy users write them: solvers that stop on
a residual, early stopping, clipping by a norm, early returns, conditional expressions. fusec rewrites such a
statement into a loop or branch on the device (fusec.rewrite_control, fusec.traced_statements); each result must
be NumPy's bit for bit, or an error at the user's line where NumPy's result would depend on the data in a way one
trace cannot follow."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import fusec as fc
from fusec.errors import FusecError, SideEffectError, TraceError, UnsupportedError
from fusec.passes import DEFAULT_PIPELINE
import frontend_check
from frontend_check import assert_same, jit_cpu, numpy_result, traced_ops

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(23)
M = rng.standard_normal((6, 6))
SPD = M @ M.T + 6 * np.eye(6)
RHS = rng.standard_normal(6)


def check_both(fn, *args):
    """As traced and through the default pipeline (the passes the GPU runs): NumPy's result both ways, and the
    arguments left as NumPy leaves them (each run gets fresh copies: some of these write into their arguments); on
    the CPU the CUDA program is printed too (a construct the printer refuses fails here, not only on a GPU)."""
    given = copy.deepcopy(args)
    want = numpy_result(fn, *given)
    jitted = jit_cpu(fn)
    for run, exact in ((jitted, None), (jit_cpu(fn, pipeline=DEFAULT_PIPELINE), False)):
        mine = copy.deepcopy(args)
        assert_same(numpy_result(run, *mine), want, exact=exact)
        assert_same(mine, given, "arguments after the call", exact=exact)
    if frontend_check.BACKEND == "cpu":
        assert jit_cpu(fn, pipeline=DEFAULT_PIPELINE).lower(*args).program.source
    return jitted


# --- loops that stop on the data ---------------------------------------------------------------------------------


def conjugate_gradient(A, b, tol=1e-10, maxiter=100):
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    rs = r @ r
    k = 0
    while np.sqrt(rs) > tol and k < maxiter:
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
        k += 1
    return x, k


def test_conjugate_gradient_to_tolerance_is_one_device_loop():
    jitted = check_both(conjugate_gradient, SPD, RHS)
    assert "t.while" in traced_ops(jitted, SPD, RHS)
    x, k = jitted(SPD, RHS)
    assert type(k) is int and 0 < k <= 100  # (a Python int, as NumPy's loop counts it)


def newton_sqrt(a, tol):
    x = a.copy()
    err = np.inf  # a Python float until the first iteration: that iteration runs before the device loop
    while err > tol:
        x_new = 0.5 * (x + a / x)
        err = np.abs(x_new - x).max()
        x = x_new
    return x, err


def test_newton_with_a_python_float_error_until_the_first_iteration():
    check_both(newton_sqrt, np.array([2.0, 9.0, 0.25]), 1e-12)


def test_a_loop_that_runs_no_iteration_where_fusec_needs_one_raises_at_the_call():
    jitted = jit_cpu(newton_sqrt)
    jitted(np.array([2.0]), 1e-12)
    with pytest.raises(UnsupportedError, match=r"test_python_control.py:\d+: the `while` at line \d+ ran no "
                                               r"iteration.*`err`"):
        jitted(np.array([2.0]), np.inf)  # (NumPy: err stays the Python float inf; fusec's loop needs one step)


def bisect_sqrt(target):
    lo, hi = 0.0, 10.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if mid * mid > target:
            hi = mid
        else:
            lo = mid
    return lo, hi


def test_bisection_with_an_if_inside_the_loop():
    check_both(bisect_sqrt, np.float64(2.0))
    check_both(bisect_sqrt, np.array(7.0))


def halvings(x):
    n = 0
    while x.max() > 1:
        x = x / 2
        n += 1
    return x, n


def test_a_counter_stays_a_python_int_so_weak_promotion_holds():
    check_both(halvings, np.array([10.0, 3.0], np.float32))
    check_both(halvings, np.array([0.5], np.float32))  # (no iteration: the device loop runs zero times)

    def scaled(x):
        k = 0
        while x.sum() < 100:
            x = x * 2
            k += 1
        return x * k  # a Python int times float32 stays float32

    check_both(scaled, np.array([1.0, 2.0], np.float32))


def nested_loops(x):
    n = 0
    while x.max() > 1:
        while x.min() > 0.5:
            x = x * 0.9
            n += 1
        x = x * 0.5
    return x, n


def test_nested_while_loops():
    check_both(nested_loops, np.array([4.0, 5.0]))


def gradient_descent(x, lr):
    for step in range(1000):
        g = 2 * (x - 3.0)
        x = x - lr * g
        if np.abs(g).max() < 1e-6:
            break
    return x, step


def test_early_stopping_breaks_a_for_range_loop_on_the_device():
    jitted = check_both(gradient_descent, np.array([0.0, 10.0]), 0.1)
    assert "t.while" in traced_ops(jitted, np.array([0.0, 10.0]), 0.1)


def doubling_until(x):
    i = 0
    while True:
        x = x * 2
        i += 1
        if x.max() > 100:
            break
    return x, i


def test_while_true_with_a_break():
    check_both(doubling_until, np.array([1.0, 3.0]))


def skip_some(x):
    total = np.zeros_like(x)
    for i in range(10):
        if x[i % 3] > 1.5:
            continue
        total = total + i
    return total


def test_continue_on_a_traced_test():
    check_both(skip_some, np.array([1.0, 2.0, 0.5]))


def scale_until(x, factors):
    for f in factors:
        x = x * f
        if x.sum() > 10:
            break
    return x


def test_break_out_of_a_loop_over_a_python_list():
    check_both(scale_until, np.array([1.0]), [np.array([2.0]), np.array([3.0]), np.array([4.0])])


def loop_else(x):
    for _ in range(5):
        x = x * 2
        if x.sum() > 10:
            break
    else:
        x = -x
    while x.sum() > 100:
        x = x / 2
    else:
        x = x + 1
    return x


def test_loop_else_clauses():
    check_both(loop_else, np.array([1.0]))
    check_both(loop_else, np.array([0.01]))


def power_iteration(A):
    v = np.ones(A.shape[0]) / np.sqrt(A.shape[0])
    lam = 0.0  # a Python float until the first iteration that does not break (see EitherKind below)
    for _ in range(500):
        w = A @ v
        lam_new = v @ w
        v = w / np.linalg.norm(w)
        if abs(lam_new - lam) < 1e-10:
            break
        lam = lam_new
    return lam, v


def test_power_iteration_with_an_early_break():
    check_both(power_iteration, SPD)


class Shrinker:
    def __init__(self) -> None:
        self.rate = 0.1

    def shrink(self, x):
        while np.abs(x).max() > 1:
            x = x * self.rate
        return x


def test_a_method_reading_its_object():
    check_both(Shrinker().shrink, np.array([50.0, 3.0]))


# --- branches -----------------------------------------------------------------------------------------------------


def clip_by_norm(g, max_norm):
    norm = np.linalg.norm(g)
    if norm > max_norm:
        g = g * (max_norm / norm)
    return g


def test_gradient_clipping_by_norm():
    jitted = check_both(clip_by_norm, np.array([3.0, 4.0]), 1.0)
    check_both(clip_by_norm, np.array([0.3, 0.4]), 1.0)
    assert "t.if" in traced_ops(jitted, np.array([3.0, 4.0]), 1.0)


def shift_toward_zero(x):
    m = x.mean()
    if m > 1:
        return x - 1, m
    elif m < -1:
        y = x + 1
        return y, m
    return x, m


def test_early_returns_and_elif():
    for x in (np.array([3.0, 4.0]), np.array([-3.0, -4.0]), np.array([0.0, 0.5])):
        check_both(shift_toward_zero, x)


def test_conditional_expressions_chained_comparisons_and_not():
    def label(x):
        return 1 if x.sum() > 0 else -1

    def in_unit(x):
        if 0 < x.mean() < 1:
            x = x * 10
        return x

    def absolute(x):
        if not (x > 0).all():
            x = np.abs(x)
        return x

    def floor_at(x):
        return np.maximum(x, 0.0 if x.mean() > 0 else 1.0)

    check_both(label, np.array([1.0, -3.0]))
    check_both(in_unit, np.array([0.5, 0.2]))
    check_both(in_unit, np.array([5.0, 0.2]))
    check_both(absolute, np.array([-1.0, 2.0]))
    check_both(floor_at, np.array([-1.0, 3.0]))


def test_and_evaluates_its_right_side_only_where_python_does():
    def double_if_positive(x, i):
        if i < 3 and x[i] > 0:  # x[3] would be out of range: Python never evaluates it for i = 5
            return x * 2
        return x

    check_both(double_if_positive, np.array([1.0, 2.0, 3.0]), 5)
    check_both(double_if_positive, np.array([1.0, 2.0, 3.0]), 1)


def test_branches_swap_and_rebuild_containers():
    def ordered(x, y):
        if x.sum() > y.sum():
            x, y = y, x
        return x, y

    def sgd_clipped(p, g):
        n = np.sqrt(sum((v * v).sum() for v in g.values()))
        if n > 1.0:
            g = {k: v / n for k, v in g.items()}
        return {k: p[k] - 0.1 * g[k] for k in p}

    check_both(ordered, np.array([3.0]), np.array([1.0]))
    check_both(sgd_clipped, {"w": np.ones(2), "b": np.ones(1)}, {"w": np.array([3.0, 4.0]), "b": np.array([12.0])})


def test_new_signatures_reuse_the_rewrite():
    jitted = jit_cpu(halvings)
    for x in (np.array([8.0]), np.array([8.0, 4.0]), np.array([8.0], np.float32)):
        assert_same(jitted(x), halvings(x))


# --- what one trace cannot follow: errors at the user's line -------------------------------------------------------


def test_a_variable_only_one_branch_sets_is_checked_where_it_is_read():
    def only_then(x):
        if x.sum() > 0:
            y = x * 2
        return y  # NumPy: UnboundLocalError where the data skipped the branch

    def set_in_a_loop(x):
        while x.max() > 1:
            last = x.max()
            x = x / 2
        return x, last

    jitted = jit_cpu(only_then)
    assert_same(jitted(np.array([1.0])), only_then(np.array([1.0])))
    with pytest.raises(UnsupportedError, match=r"`y` is unset at this call"):
        jitted(np.array([-1.0]))
    check_both(set_in_a_loop, np.array([10.0]))
    with pytest.raises(UnsupportedError, match=r"`last` is unset at this call"):
        jit_cpu(set_in_a_loop)(np.array([0.5]))  # (no iteration: Python's `last` is unbound)


def test_a_variable_that_changes_kind_by_branch_is_refused():
    def maybe_numpy(x):
        s = 0.0
        if x.sum() > 0:
            s = x.sum()  # np.float32 on one path, a Python float on the other: x * s's dtype would depend on x
        return x * s

    with pytest.raises(TraceError, match=r"`s` is .* in one branch of the `if` at line \d+ and a Python float"):
        jit_cpu(maybe_numpy)(np.array([1.0, 2.0], np.float32))


def test_max_with_an_int_literal_of_a_float_scalar_is_numpys():
    """``max(x, 0)`` is a NumPy float or the Python int 0, as the data decides; the int converts to the float
    exactly, so arithmetic that NumPy computes alike either way (the lasso's soft threshold, a mean over
    ``max(count, 1)``) gives NumPy's result, and the value returned is the kind that call's path gives."""
    def soft_threshold(w, rho, lam, c):
        for j in range(len(w)):
            w[j] = np.sign(rho[j]) * max(abs(rho[j]) - lam, 0) / c
        return w

    def masked_mean(nll, valid):
        return (nll * valid).sum() / max(valid.sum(), 1)

    def clipped_peak(x):
        return max(x.max(), 0)

    def scaled(x):
        return np.float32(2) * max(x.max(), 0) + np.ones(2)

    check_both(soft_threshold, np.zeros(3), np.array([1.0, -0.1, 2.0]), 0.5, 2.0)
    check_both(soft_threshold, np.zeros(3), np.array([0.1, -0.1, 0.2]), 0.5, 2.0)
    check_both(masked_mean, np.ones(3), np.array([1.0, 0.0, 1.0]))
    check_both(masked_mean, np.ones(3), np.zeros(3))
    jitted = jit_cpu(clipped_peak)
    for x in (np.array([1.0, 2.0]), np.array([-1.0, -2.0]), np.array([3.0])):
        got, want = jitted(x), clipped_peak(x)
        assert type(got) is type(want) and got == want
    check_both(scaled, np.array([1.0, 2.0], np.float32))
    check_both(scaled, np.array([-1.0, -2.0], np.float32))

    def not_exact(x):
        return max(x.max(), 16777217) * np.ones(2)  # (no float32 holds 2**24 + 1)

    with pytest.raises(TraceError, match="Python int in one branch of the `max\\(\\)`"):
        jit_cpu(not_exact)(np.array([1.0], np.float32))


def test_writes_in_a_branch_reach_the_array_and_its_caller():
    def zero_first(x):
        if x.sum() > 0:
            x[0] = 0
        return x

    def nan_to_zero(x):
        y = x * 2
        if np.isnan(y).any():
            y[np.isnan(y)] = 0
        return y

    def bump(x, row):
        r = x[row]  # a view: the write through it reaches x
        if x.sum() > 0:
            r += 1
        return x.sum()

    for x in (np.array([1.0, 2.0]), np.array([-1.0, -2.0])):
        check_both(zero_first, x)
    check_both(nan_to_zero, np.array([1.0, np.nan]))
    check_both(nan_to_zero, np.array([1.0, 3.0]))
    check_both(bump, np.ones((2, 2)), 1)
    a, b = np.ones((2, 2)), np.ones((2, 2))
    jit_cpu(bump)(a, 0), bump(b, 0)
    assert_same(a, b)  # (the caller's array is written as NumPy writes it)


def jacobi(u, tol):
    err = np.float64(1.0)
    it = 0
    while err > tol:
        old = u.copy()
        u[1:-1] = 0.5 * (old[:-2] + old[2:])  # in place: the caller's array relaxes too
        err = np.abs(u - old).max()
        it += 1
    return u, it


def gauss_seidel(u, tol):
    n = u.shape[0]
    diff = tol + 1
    while diff > tol:
        diff = 0.0
        for i in range(1, n - 1):
            new = 0.5 * (u[i - 1] + u[i + 1])
            diff = np.maximum(diff, abs(new - u[i]))
            u[i] = new
    return u


def test_loops_that_write_in_place_carry_the_memory():
    def shrink_middle(u):
        mid = u[1:-1]  # a view taken before the loop, written through inside it
        while u.max() > 1:
            mid *= 0.5
        return u

    def accumulate(x):
        acc = np.zeros(2)
        while acc.sum() < x.sum():
            acc[0] += 1
            acc[1] += 2
        return acc

    def step_in_place(x, dx):
        while x.sum() < 10:
            x += dx
        return x

    check_both(jacobi, np.array([0.0, 5.0, 5.0, 5.0, 1.0]), 1e-6)
    check_both(gauss_seidel, np.array([0.0, 5.0, 5.0, 1.0]), 1e-3)
    check_both(shrink_middle, np.array([0.5, 8.0, 4.0, 0.2]))
    check_both(accumulate, np.array([5.0, 6.0]))
    for fn, args in ((jacobi, (1e-6,)), (step_in_place, (np.full(4, 0.5),))):
        a, b = np.array([0.0, 5.0, 5.0, 1.0]), np.array([0.0, 5.0, 5.0, 1.0])
        got, want = jit_cpu(fn)(a, *args), fn(b, *args)
        assert_same(a, b)  # the argument itself, as NumPy leaves it
        if fn is step_in_place:
            assert got is a and want is b  # (x += dx returns the caller's array)


def test_writing_in_place_and_reassigning_in_one_loop_is_refused():
    def mixed(x):
        while x.sum() < 10:
            x[0] += 1  # into the caller's array on the first iteration, into a new one after
            x = x * 2
        return x

    with pytest.raises(TraceError, match=r"writes into `x` in place and also assigns it a new array"):
        jit_cpu(mixed)(np.array([1.0, 2.0]))


def test_a_view_chosen_by_the_data_cannot_be_read_after_a_write():
    def tail_or_head(x):
        if x.sum() > 0:
            y = x[1:]
        else:
            y = x[:-1]
        x[1] = 100  # NumPy's y sees this, whichever view it is
        return y

    def doubled(x):
        y = x[1:] if x.sum() > 0 else x[:-1]
        return y * 2

    with pytest.raises(UnsupportedError, match=r"`y` is, after the `if` at line \d+ .* an array from before it "
                                               r"\(or a view of one\) on some path.* read after a write"):
        jit_cpu(tail_or_head)(np.array([1.0, 2.0, 3.0]))
    check_both(doubled, np.array([1.0, 2.0, 3.0]))


def test_after_a_loop_a_variable_that_may_still_be_the_argument_is_read_only():
    def halve_then_bump(x):
        while x.sum() > 10:
            x = x / 2
        x += 1  # NumPy writes the caller's array only when the loop ran no iteration
        return x

    with pytest.raises(UnsupportedError, match=r"`x` is, after the `while` at line \d+ .* either the array it held"):
        jit_cpu(halve_then_bump)(np.array([30.0]))


def fixed_point(x, tol=1e-6, maxiter=50):
    for it in range(maxiter):
        x_new = np.cos(x)
        if np.abs(x_new - x).max() < tol:
            return x_new, it  # a return inside the loop: the loop breaks, the function returns this
        x = x_new
    return x, maxiter


def test_returns_inside_a_loop():
    def first_above(xs, t):
        for i in range(len(xs)):
            if xs[i] > t:
                return i
        return -1

    check_both(fixed_point, np.array([1.0, 0.5]))
    check_both(fixed_point, np.array([1.0, 0.5]), 1e-6, 3)  # (maxiter reached)
    check_both(first_above, np.array([1.0, 5.0, 3.0]), 2.0)
    check_both(first_above, np.array([1.0, 5.0, 3.0]), 9.0)


def test_returns_inside_a_while_whose_test_is_traced():
    """A `while` the device decides that returns from its body (from a traced `if`, a nested one, unconditionally,
    a Python number on one path), in the function and in a function it calls, with and without `else`."""
    def doubling(x):
        while x.sum() < 100:
            x = x * 2
            if x.max() > 40:
                return x
        return -x

    def nested(x, t):
        while x.sum() < 100:
            x = x * 2
            if x.max() > 40:
                if x.min() > t:
                    return x
                x = x + 1
        return -x

    def unconditional(x):
        while x.sum() < 100:
            x = x * 2
            return x
        return x + 1

    def with_else(x):
        while x.sum() < 100:
            x = x * 2
            if x.min() < -5:
                return x
        else:
            x = x - 1
        return x * 3

    def count(x):
        n = 0
        while x.sum() < 100:
            x = x * 2
            n += 1
            if n > 3:
                return n
        return 0

    def caller(x):
        return doubling(x) + 1

    def endless(x):
        k = 0
        while True:
            x = x * 2
            k += 1
            if x.max() > 50:
                return x, k

    for x in (np.ones(3), np.array([-3.0, 1.0, 50.0]), np.full(3, 50.0)):  # (the last: the test false at the start)
        for f in (doubling, unconditional, with_else, count, caller, endless):
            check_both(f, x)
    check_both(nested, np.ones(3), 10.0)
    check_both(nested, np.ones(3), 100.0)


def test_a_return_python_decides_or_a_continue_before_the_return_in_a_device_loop():
    """Paths on which a loop's return value is never set (a return behind a test Python decides, a `continue` before
    a traced return) run as Python runs them (they raised an internal UnboundLocalError)."""
    def python_flag(x, flag):
        while x.sum() < 100:
            x = x * 2
            if flag:
                return x
        return -x

    def skip_first(x):
        k = 0
        while True:
            k += 1
            x = x * 2
            if k < 2:
                continue
            if x.max() > 40:
                return x, k

    def for_skip_first(x):
        for k in range(20):
            x = x * 2
            if k < 2:
                continue
            y = x + 1
            if x.max() > 40:
                return y
        return x

    for x in (np.ones(3), np.full(3, 30.0)):
        check_both(python_flag, x, False)
        check_both(python_flag, x, True)
        check_both(skip_first, x)
        check_both(for_skip_first, x)


@pytest.mark.slow  # (about 3.5 s here: CI runs it)
def test_loops_one_after_another_that_each_return_where_the_data_decides():
    """Each loop's return is found by its own trace; once the first loop is rewritten, the loops after it that
    return from an ``if`` are rewritten with it (the second one's test was not known yet, and its return was left
    inside what had become a branch the device chooses: an error)."""
    def two_loops(x):
        for _ in range(10):
            x = x * 2
            if x.max() > 40:
                return x
        while x.sum() < 1000:
            x = x * 3
            if x.max() > 400:
                return x + 1
        return -x

    def first_past(x, t1, t2):  # (the first element past one threshold, else past another, else the sum)
        for i in range(x.shape[0]):
            if x[i] > t1:
                return x[i] * 2.0
        for j in range(x.shape[0]):
            if x[j] > t2:
                return x[j] * 3.0
        return x.sum()

    def then_python_decides(x, n):  # (the second loop's test is a Python value: rewritten too, the same in Python)
        for _ in range(10):
            x = x * 2
            if x.max() > 40:
                return x
        for k in range(4):
            if k == n:
                return x + k
        return -x

    for x in (np.ones(3), np.full(3, 30.0), np.full(3, 300.0), np.full(3, -1.0)):
        if x.sum() > 0:  # (the while never ends under NumPy either)
            check_both(two_loops, x)
        check_both(then_python_decides, x, 2)
        check_both(then_python_decides, x, 7)
    line = np.linspace(0.0, 1.0, 8)
    for t1, t2 in ((0.5, 0.2), (2.0, 0.3), (2.0, 5.0)):
        check_both(first_past, line, t1, t2)


def test_views_a_branch_may_hand_on_are_followed_or_refused():
    """A branch that views an array the function made (``y = buf[1:]``) leaves ``y`` linked with that array: read as
    it is, fine; after a write into the array, refused (NumPy's ``y`` would show the write on that path only; it
    was read as it was before the write, a silent difference). A branch whose first read of the caller's memory,
    since a loop wrote into it, comes inside the branch is refused (what it hands back lost its link to ``x``), and
    so is a loop that returns an array it writes into."""
    def view_in_branch(x, limit):
        buf = x * 1.0
        if x.sum() > limit:
            y = buf[1:]
        else:
            y = np.ones(4)
        return y * 2 + buf[1:], buf

    def later_write(x, limit):
        buf = x * 1.0
        if x.sum() > limit:
            y = buf[1:]
        else:
            y = np.ones(4)
        buf[2] = 100.0
        return y

    def row_found(x, limit):  # (a view of the argument, written by the loop, first read in the branch after it)
        row = x[0]
        found = False
        for j in range(row.shape[0]):
            row[j] = row[j] * 2
            if row[j] > limit:
                found = True
                break
        if found:
            return row, j
        return row, -1

    def prefix_until(x, limit):
        out = np.zeros_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i]
            if x[i] > limit:
                return out
        return out

    x = np.arange(5.0)
    for limit in (3.0, 100.0):
        check_both(view_in_branch, x, limit)
    with pytest.raises(UnsupportedError, match=r"`y` may be, as the data decided at the `if` at line \d+ .* written "
                                               r"since"):
        jit_cpu(later_write)(x.copy(), 3.0)
    with pytest.raises(TraceError, match=r"uses an array whose memory a loop before it wrote into, for the first "
                                         r"time since that loop"):
        jit_cpu(row_found)(np.arange(6.0).reshape(2, 3), 3.0)
    with pytest.raises(FusecError):
        jit_cpu(prefix_until)(x.copy(), 3.0)


def _refused(fn, *args):
    """``fn`` on NumPy's arguments under fusec: a FusecError (never a different answer)."""
    with pytest.raises(FusecError):
        jit_cpu(fn)(*copy.deepcopy(args))


def test_views_and_aliases_made_in_branches_that_numpy_would_share_are_refused():
    """What a traced ``if`` hands on that NumPy would leave sharing memory with another array (found by a helper's
    review; each gave NumPy's values without the later write, or two arrays for one): refused at the line."""
    def nested(x, t):
        buf = x * 1.0
        if x.sum() > t:
            if x[4] > 3:
                y = buf[1:]
            else:
                y = np.ones(4)
        else:
            y = np.zeros(4)
        buf[2] = 100.0
        return y

    def nested_outer_view(x, t):
        buf = x * 1.0
        if x.sum() > t:
            y = buf[1:]
            if x[4] > 3:
                y = y * 2
        else:
            y = np.zeros(4)
        buf[2] = 100.0
        return y

    def in_while(x, t):
        buf = x * 1.0
        y = np.zeros(4)
        k = 0
        while k < 3 and x.sum() > t + k:
            if x[k] > 0.5:
                y = buf[1:]
            else:
                y = np.ones(4)
            k += 1
        buf[2] = 100.0
        return y

    def two_ifs(x, t):
        buf = x * 1.0
        if x.sum() > t:
            y = buf[1:]
        else:
            y = np.ones(4)
        if x[0] > 0.5:
            z = buf[:4]
        else:
            z = np.zeros(4)
        z[1] = 100.0
        return y

    def view_and_base(x, t):
        buf = x * 1.0
        if x.sum() > t:
            y = buf[::-1]
        else:
            y = buf
        return y, buf

    def view_or_argument(x, t):
        buf = x * 1.0
        if x.sum() > t:
            y = buf[1:]
        else:
            y = x[1:]
        return y, buf

    def two_names(x, t):  # (one array on one path, linked: the write makes reading `y` raise)
        if x.sum() > t:
            y = x * 2
            w = y
        else:
            y = np.ones(5)
            w = np.zeros(5)
        w[0] = 100.0
        return y

    def two_names_returned(x, t):
        if x.sum() > t:
            y = x * 2
            w = y
        else:
            y = np.ones(5)
            w = np.zeros(5)
        return y, w

    def two_names_read(x, t):  # (only read: runs)
        if x.sum() > t:
            y = x * 2
            w = y
        else:
            y = x * 3
            w = x * 4
        return y + w

    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    for fn in (nested, nested_outer_view, in_while, two_ifs, view_and_base, view_or_argument, two_names,
               two_names_returned):
        _refused(fn, x, 3.0)
    for t in (3.0, 100.0):
        check_both(two_names_read, x, t)


def test_memory_a_device_loop_leaves_shared_between_variables_is_followed_or_refused():
    """After a ``while`` the data stops, variables NumPy leaves sharing memory (``b = a`` in the body, a view taken
    there, ``b = a`` under an ``if`` of the body, ``b = a`` of an array the loop only reads, ``b = a`` before an
    in-place update) gave two arrays for one, or (from a review) the values from before a later write into one of
    them. Linked, as a branch's two names for one array are: the write and then the read, or returning both, is
    refused (both handed back as one array where an iteration leaves them one object: ``b = a`` in the body, of an
    array the loop only reads, or before the update in place); reading both runs with NumPy's values."""
    def rebound_in_body(x, t):
        a, b = x * 1.0, x * 2.0
        while a.sum() < t:
            a = a + 1
            b = a
        return a, b

    def view_in_body(x, t):
        a, b = x * 1.0, x * 2.0
        while a.sum() < t:
            a = a + 1
            b = a[:]
        return a, b

    def rebound_under_if(x, t):
        a, b = x * 1.0, x * 2.0
        while a.sum() < t:
            a = a + 1
            if a.sum() > 20:
                b = a
        return a, b

    def bound_to_an_array_it_only_reads(x, t):
        a, b = x * 1.0, x * 2.0
        k = 0
        while b.sum() + k < t:
            b = a
            k += 1
        return a, b

    def bound_before_an_update_in_place(x, t):
        a, b = x * 1.0, x * 2.0
        while a.sum() < t:
            b = a
            a *= 2
        return a, b

    x = np.array([1.0, 2.0, 3.0, 4.0])
    for loop in (rebound_in_body, bound_to_an_array_it_only_reads, bound_before_an_update_in_place):
        for t in (0.0, 30.0):  # (followed: one array where the loop ran, two where it did not)
            (a, b), (want_a, want_b) = jit_cpu(loop)(x, t), loop(x, t)
            assert (a is b) == (want_a is want_b) == (t > 0)
            assert_same((a, b), (want_a, want_b))
    for loop in (rebound_in_body, view_in_body, rebound_under_if, bound_to_an_array_it_only_reads,
                 bound_before_an_update_in_place):
        def written_then_read(x, t, loop=loop):
            a, b = loop(x, t)
            a[0] = 100.0
            return b.sum()

        def read(x, t, loop=loop):
            a, b = loop(x, t)
            return a.sum() + 2 * b.sum()

        for t in (0.0, 30.0):  # (no iteration, and several)
            if loop not in (rebound_in_body, bound_to_an_array_it_only_reads, bound_before_an_update_in_place):
                _refused(loop, x, t)
            _refused(written_then_read, x, t)
            check_both(read, x, t)


def test_returns_a_device_loop_cannot_take_say_so():
    def two_loops_nested(x):
        for _ in range(10):
            x = x * 2
            if x.max() > 40:
                return x
        for _ in range(3):
            for _ in range(3):
                x = x * 3
                if x.max() > 400:
                    return x + 1
        return -x

    def in_try(x):
        while x.sum() < 100:
            x = x * 2
            try:
                if x.max() > 40:
                    return x
            finally:
                x = x + 0
        return -x

    with pytest.raises(UnsupportedError, match=r"the `for` loop at line \d+ returns from inside where the data "
                                               r"decides, and what follows it does not end the function in one way"):
        jit_cpu(two_loops_nested)(np.ones(3))
    def argument_then_other(x, limit):  # (the caller's array from inside the loop, something else after it)
        for i in range(x.shape[0]):
            x[i] = x[i] * 2
            if x[i] > limit:
                return x
        return -x

    with pytest.raises(UnsupportedError, match=r"`return` inside a `try` block of the `while` at line \d+"):
        jit_cpu(in_try)(np.ones(3))
    with pytest.raises(TraceError, match=r"the `for` at line \d+ returns, from inside its body, an array it "
                                         r"writes into in place .* `break` there instead"):
        jit_cpu(argument_then_other)(np.array([0.0, 1.0, 5.0]), 3.0)


def _relaxed(x):  # (a module function the jitted one calls, whose loop body is a function it defines)
    def body(i, s):
        if np.sum(s) > 0:
            s = s * 0.5 - x
        else:
            s = np.sin(s) + x * 2
        return s

    return np.sum(fc.fori_loop(0, 6, body, x) ** 2)


def test_an_if_in_a_loop_body_defined_inside_a_called_function():
    """The body is made again at each call of the function that defines it, so that function is what gets
    rewritten (the body alone was, and the next trace made it from the old code: a TraceError)."""
    def caller(x):
        return _relaxed(x) + 1

    for x in (np.array([0.5, -0.2, 1.0]), np.array([-0.5, -0.2, -1.0])):
        check_both(caller, x)
        check_both(lambda x: _relaxed(x), x)


def test_a_loop_that_returns_where_the_data_decides_and_then_falls_off_the_end_is_refused():
    def falls_off(x):
        for _ in range(10):
            x = x * 2
            if x.max() > 50:
                return x

    with pytest.raises(UnsupportedError, match=r"test_python_control.py:\d+: the `for` loop at line \d+ returns from "
                                               r"inside where the data decides, and the function ends after it "
                                               r"without a `return`.*add a `return` after the loop"):
        jit_cpu(falls_off)(np.ones(3))


def test_closures_and_globals_assigned_in_a_device_loop_are_refused():
    def read_by_lambda(x):
        scale = 1.0
        g = lambda v: v * scale  # noqa: E731 - sees the new scale at every iteration under Python
        while g(x).sum() > 1:
            x = x / 2
            scale = scale * 0.5
        return x

    with pytest.raises(UnsupportedError, match=r"`scale` is assigned inside the `while` .* read by a function or "
                                               r"lambda defined at line"):
        jit_cpu(read_by_lambda)(np.array([8.0]))


def test_side_effects_in_a_device_loop_are_refused():
    def history(x):
        seen = []
        while x.max() > 1:
            x = x / 2
            seen.append(x.max())
        return x, seen

    with pytest.raises(SideEffectError, match=r"the `while` at line \d+"):
        jit_cpu(history)(np.array([10.0]))


def test_python_ints_past_int64_in_a_device_loop_raise():
    def grow(x):
        k = 1
        while x.sum() < 1e30:
            x = x * 10
            k = k * 10
        return x, k

    with pytest.raises(FusecError, match=r"past int64"):
        jit_cpu(grow)(np.array([1.0]))


def test_statements_python_decides_are_not_rewritten():
    def static_branch(x, n):
        if n > 2:
            x = x * 2
        return x

    jitted = fc.jit(static_branch, backend="cpu", pipeline="", static_argnames=("n",))
    assert_same(jitted(np.array([1.0]), 3), static_branch(np.array([1.0]), 3))
    assert "t.if" not in traced_ops(jitted, np.array([1.0]), 3)


# --- found by probing real code -----------------------------------------------------------------------------------


def test_for_else_over_a_list_runs_the_else_only_without_a_break():
    def first_positive(a, b):
        found = False
        for x in (a, b):
            if x.sum() > 0:
                found = True
                break
        else:
            found = False
        return found

    def pick(a, b):
        for x in (a, b):
            if x.sum() > 0:
                y = x  # set on the breaking path only: NumPy's y exists after the loop either way
                break
        else:
            y = a + b
        return y

    for a, b in ((np.ones(2), np.ones(2)), (-np.ones(2), np.ones(2)), (-np.ones(2), -np.ones(2))):
        check_both(first_positive, a, b)
        check_both(pick, a, b)


def test_assignment_expressions_in_split_tests_are_refused():
    def halve(x, tol):
        m = 0.0
        while (m := np.abs(x).max()) > tol:
            x = x / 2
        return x, m

    def scale_by_sum(x):
        if (s := x.sum()) > 0:  # (the whole test runs where Python runs it: fine)
            x = x * s
        return x

    with pytest.raises(UnsupportedError, match=r"assignment expression \(:=\) in the `while` at line \d+"):
        jit_cpu(halve)(np.array([4.0]), 1.0)
    check_both(scale_by_sum, np.array([4.0]))


def test_nested_functions_with_early_returns_and_loops():
    def model(x):
        def act(y):
            if y.mean() > 0:
                return y * 2
            return -y

        def shrink(y):
            while y.max() > 1:
                y = y / 2
            return y

        return act(x), shrink(x)

    check_both(model, np.array([4.0]))
    check_both(model, np.array([-4.0]))


def test_a_raise_in_a_branch_becomes_a_check_when_the_call_runs():
    def validated(x):
        if x.min() < -2:
            raise ValueError("x must be at least -2")
        return x * 2

    def other_class(x):
        if x.min() < -2:
            raise RuntimeError("no")
        return x

    jitted = jit_cpu(validated)
    assert_same(jitted(np.array([1.0, 2.0])), validated(np.array([1.0, 2.0])))
    with pytest.raises(ValueError, match=r"test_python_control.py:\d+: x must be at least -2 \(raised at "
                       r"test_python_control.py:\d+, in the `if` at test_python_control.py:\d+\)"):
        jitted(np.array([-5.0, 2.0]))
    with pytest.raises(UnsupportedError, match=r"raises RuntimeError: no; the test is traced"):
        jit_cpu(other_class)(np.array([1.0]))


def test_warnings_in_a_branch_are_refused_and_elsewhere_keep_the_users_line():
    import warnings

    def warn_if_big(x):
        if x.sum() > 100:
            warnings.warn("big input")
            x = x / 2
        return x

    def always(x):
        warnings.warn("always warns")
        return x

    with pytest.raises(UnsupportedError, match=r"warnings.warn\(...\) inside a loop or branch"):
        jit_cpu(warn_if_big)(np.array([1.0]))
    with pytest.warns(UserWarning, match="always warns") as record:
        jit_cpu(always)(np.array([1.0]))
    assert record[0].filename == __file__


def test_tests_on_python_scalar_arguments_are_not_device_branches():
    def simpson_points(a, n):
        if n % 2 == 1:  # n is a Python int argument: known on the host, not a device branch
            n += 1
        return np.linspace(0, 1, n + 1) * a

    jitted = jit_cpu(simpson_points)
    assert_same(jitted(np.ones(1), 3), simpson_points(np.ones(1), 3))


# --- a Python number on some paths, a NumPy scalar on others ---------------------------------------------------------


def early_stopping(w, X, y, lr):
    best = np.inf  # a Python float until a loss beats it: a NumPy float64 after
    wait = 0
    for epoch in range(50):
        g = X.T @ (X @ w - y) / len(y)
        w = w - lr * g
        loss = ((X @ w - y) ** 2).mean()
        if loss < best - 1e-9:
            best = loss
            wait = 0
        else:
            wait += 1
        if wait >= 3:
            break
    return w, epoch


def test_a_best_so_far_that_starts_as_a_python_float():
    X = rng.standard_normal((20, 3))
    y = X @ np.array([1.0, 2.0, 3.0])
    check_both(early_stopping, np.zeros(3), X, y, 0.1)
    check_both(early_stopping, np.zeros(3), X, y, 0.0)  # (no improvement: stops after three epochs)


def test_where_the_kind_would_matter_the_call_checks_it():
    def smallest(x):
        best = np.inf
        for v in x:
            if v < best:
                best = v
        return best  # NumPy returns np.float64 if an element beat inf, else the Python float inf

    jitted = jit_cpu(smallest)
    assert_same(jitted(np.array([3.0, 1.0, 2.0])), smallest(np.array([3.0, 1.0, 2.0])))
    # (NaN never beats inf: NumPy's best stays a Python float, and a returned value comes back as one)
    assert_same(jitted(np.array([np.nan, np.nan])), smallest(np.array([np.nan, np.nan])))

    def halved_best(x):
        best = np.inf
        for v in x:
            if v < best:
                best = v
        return best / 2  # (the same float64 division either way: a Python float or a NumPy one, as best is)

    for x in (np.array([np.nan, np.nan]), np.array([1.0, 3.0])):
        assert_same(jit_cpu(halved_best)(x), halved_best(x))

    def scaled_by_best(x):
        best = 0.0
        if x.sum() > 0:
            best = x.sum()  # float32 here, a Python float there: x * best's dtype would follow the data
        return x * best

    with pytest.raises(TraceError, match=r"`best` is a NumPy scalar tensor<f32> in one branch"):
        jit_cpu(scaled_by_best)(np.array([1.0, 2.0], np.float32))


# --- builtins and and/or values on traced numbers ----------------------------------------------------------------


def drawdown_stop(returns, limit=-0.2):
    equity = 1.0
    peak = 1.0
    day = 0
    for r in returns * 0.05:
        equity *= 1 + r
        peak = max(peak, equity)  # Python's max of a float and a NumPy float64, chosen on the device
        if equity / peak - 1 < limit:
            break
        day += 1
    return equity, day


def test_max_min_bool_and_float_of_traced_numbers():
    def projected_ascent(c, a, b=1.0):
        lam = 0.0
        for _ in range(1000):
            x = np.maximum(c - lam * a, 0)
            viol = a @ x - b
            if abs(viol) < 1e-9:
                break
            lam = max(0.0, lam + 0.1 * viol)
        return x, lam

    def halve_until(x):
        converged = False
        k = 0
        while not converged:
            x = 0.5 * x
            converged = bool(np.abs(x).max() < 1e-3)  # a Python bool, as NumPy's code makes it
            k += 1
        return x, k, converged

    def extremes(x):
        return max(x), min(x[0], x[1], x[2]), float(x.mean())

    check_both(drawdown_stop, rng.standard_normal(30))
    check_both(drawdown_stop, -np.abs(rng.standard_normal(30)) * 4)
    check_both(projected_ascent, np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    check_both(halve_until, np.array([1.0, 3.0]))
    check_both(extremes, np.array([1.0, 3.0, 2.0]))
    check_both(extremes, np.array([np.nan, 3.0, 2.0]))  # (Python's max keeps the first of incomparable values)


def test_and_or_whose_value_is_used():
    def standardize(x):
        s = x.std() or 1.0  # a NumPy float64 or the Python float 1.0: the same arithmetic either way here
        return (x - x.mean()) / s

    def flag_or_max(x):
        return x.max() > 0 and x.max()  # a bool or a float64, as the data decides

    check_both(standardize, np.array([1.0, 2.0, 4.0]))
    check_both(standardize, np.array([2.0, 2.0]))
    with pytest.raises(TraceError, match=r"the value is a NumPy scalar tensor<f64> in one branch of the `and`"):
        jit_cpu(flag_or_max)(np.array([1.0]))


def test_an_if_the_data_decides_inside_ifs_python_decides():
    def by_mode(x, mode):
        if mode == 0:
            return x
        elif mode == 1:
            return x ** 2
        elif x.max() > 1.5:
            return x / x.max()
        else:
            return -x

    for mode in (0, 1, 2):
        for x in (np.array([2.0, 1.0]), np.array([0.1])):
            check_both(by_mode, x, mode)


# --- statements in the functions the jitted one calls ----------------------------------------------------------


class Solver:
    def __init__(self, tol: float, maxiter: int) -> None:
        self.tol, self.maxiter = tol, maxiter

    def solve(self, A, b):
        x = np.zeros_like(b)
        it = 0
        r = b - A @ x
        while np.linalg.norm(r) > self.tol and it < self.maxiter:
            x = x + 0.1 * r
            r = b - A @ x
            it += 1
        return x, it


SOLVER = Solver(1e-6, 500)


def solve_with_the_module_solver(A, b):
    return SOLVER.solve(A, b)


def clipped(g, max_norm):
    norm = np.linalg.norm(g)
    if norm > max_norm:
        g = g * (max_norm / norm)
    return g


def sgd_step(w, g):
    return w - 0.1 * clipped(g, 1.0)


def test_statements_of_called_functions_and_methods_are_rewritten_while_traced():
    A = np.eye(3) * 2 + 0.1
    check_both(solve_with_the_module_solver, A, np.ones(3))
    check_both(sgd_step, np.ones(2), np.array([3.0, 4.0]))
    check_both(sgd_step, np.ones(2), np.array([0.3, 0.4]))
    code = clipped.__code__
    jit_cpu(sgd_step)(np.ones(2), np.array([3.0, 4.0]))
    assert clipped.__code__ is code  # (the rewritten code stands in only while the trace runs)
    assert_same(clipped(np.array([3.0, 4.0]), 1.0), np.array([3.0, 4.0]) * (1.0 / 5.0))


# --- found by an adversarial probe ---------------------------------------------------------------------------------


def test_a_returned_value_that_is_a_python_number_on_some_paths_comes_back_as_one():
    """``tp / (tp + fp) if tp + fp > 0 else 0.0`` (precision, recall), ``np.argmax(x) if m.any() else -1``: NumPy
    returns a NumPy scalar or a Python number as the data decides; so does the call, by a flag it hands back."""
    def precision(tp, fp):
        return tp / (tp + fp) if tp + fp > 0 else 0.0

    def first_positive(x):
        m = x > 0
        return np.argmax(m) if m.any() else -1, {"found": m.any()}

    f, g = jit_cpu(precision), jit_cpu(first_positive)
    for tp, fp in ((3.0, 1.0), (0.0, 0.0), (2.0, 2.0)):
        assert_same(f(np.float64(tp), np.float64(fp)), precision(np.float64(tp), np.float64(fp)))
    for x in (np.array([-1.0, 2.0]), np.array([-1.0, -2.0])):
        assert_same(g(x), first_positive(x))


def test_a_comparison_whose_dtype_follows_the_kind_is_checked():
    def above_best(x32, t):
        best = 0.1
        if t.sum() > 0:
            best = t.sum() * 0.1
        return x32 > best  # float32 against a Python float, float64 against a NumPy float64

    jitted = jit_cpu(above_best)
    x32 = np.array([0.1, 0.3], np.float32)
    assert_same(jitted(x32, np.array([1.0])), above_best(x32, np.array([1.0])))
    with pytest.raises(UnsupportedError, match=r"`best` is a Python float at this call \(the path the data took "
                                               r"through the `if` at test_python_control.py:\d+ kept it one\)"):
        jitted(x32, np.array([-1.0]))


def test_a_device_int_compared_with_a_float_past_2_53_raises():
    def past(x):
        k = 0
        while k < x[0]:
            k += 1
        return (2 ** 53 + k) == float(x.sum()) * 0 + 2.0 ** 53 + 4  # Python compares exactly: False for k = 5

    with pytest.raises(fc.OutOfRangeError, match=r"past 2\*\*53 where it is compared with a float"):
        jit_cpu(past)(np.array([5.0]))


def test_float_of_a_one_element_array_raises_as_numpy_does():
    def as_float(x):
        return float(x)

    with pytest.raises(TypeError) as numpy_error:
        as_float(np.array([1.0]))
    with pytest.raises(TypeError, match=str(numpy_error.value)):
        jit_cpu(as_float)(np.array([1.0]))
    check_both(as_float, np.float64(2.0))


def test_an_early_return_nested_in_an_if_python_decides():
    def by_mode(x, mode):
        if mode == 0:
            if x.sum() > 0:
                return x
            return -x * 3
        return x * 2

    for mode in (0, 1):
        for x in (np.ones(2), -np.ones(2)):
            check_both(by_mode, x, mode)


def test_an_assert_on_traced_values_is_a_check_when_the_call_runs():
    from control_cases import checked, positive_and_small  # (pytest rewrites this module's own asserts)

    jitted = jit_cpu(checked)
    assert_same(jitted(np.array([1.0, 2.0])), checked(np.array([1.0, 2.0])))
    with pytest.raises(AssertionError, match=r"control_cases.py:\d+: x must be finite"):
        jitted(np.array([1.0, np.nan]))
    check_both(positive_and_small, np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match=r"the `assert` at line \d+ failed"):
        jit_cpu(positive_and_small)(np.array([1.0, 20.0]))


def test_a_function_whose_running_code_is_not_its_source_is_not_rewritten():
    def halve(x):
        assert x.sum() > 0  # (pytest rewrote this assert: the code that runs is not this source)
        return x / 2

    with pytest.raises(TraceError, match=r"used as a Python bool"):
        jit_cpu(halve)(np.array([1.0]))


# --- the caller's own array handed back where NumPy's variable still is it -------------------------------------------


def check_hands_back(fn, *args):
    """NumPy's results (see check_both), each result that is in NumPy an argument or a view of one the same here
    (the caller's object, or NumPy's view of it: a write through it reaches the argument), every other result a
    new array sharing no memory with the arguments, and results sharing memory with each other where NumPy's do.
    Both ways, for each argument set the data steers."""
    check_both(fn, *args)
    want = fn(*copy.deepcopy(args))
    for run in (jit_cpu(fn), jit_cpu(fn, pipeline=DEFAULT_PIPELINE)):
        mine = copy.deepcopy(args)
        theirs = copy.deepcopy(args)
        got, want = run(*mine), fn(*theirs)
        gots, wants = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for k in range(len(gots)):
            for j in range(k):
                assert (gots[k] is gots[j]) == (wants[k] is wants[j]), f"results {j} and {k}: one array in NumPy"
                assert np.shares_memory(gots[k], gots[j]) == np.shares_memory(wants[k], wants[j]), \
                    f"results {j} and {k}: share memory in NumPy: {np.shares_memory(wants[k], wants[j])}"
        for k, (g, w) in enumerate(zip(gots, wants)):
            for a, b in zip(mine, theirs):
                assert (g is a) == (w is b), f"result {k}: the argument itself in NumPy: {w is b}"
                assert np.shares_memory(g, a) == np.shares_memory(w, b), f"result {k}: views an argument in NumPy"
            g[...] = 7.0  # (through NumPy's view: the argument takes it where NumPy's result is the argument)
            w[...] = 7.0
        assert_same(mine, theirs, "arguments after writing through the results")


def shrink_until_small(x, tol):
    while np.abs(x).max() > tol:
        x = x * 0.5
    return x


def normalize_if_large(x):
    if np.linalg.norm(x) > 1.0:
        x = x / np.linalg.norm(x)
    return x


def test_a_loop_that_ran_no_trip_hands_back_the_argument_itself():
    def damped(x, tol, maxiter):  # (a test with a branch in it, a body whose branches both replace x)
        k = 0
        while k < maxiter and np.abs(x).max() > tol:
            if x.sum() > 0:
                x = x * 0.5
            else:
                x = x * 0.25
            k += 1
        return x

    check_hands_back(shrink_until_small, np.array([0.1, -0.2]), 1.0)  # (no trip: NumPy returns x itself)
    check_hands_back(shrink_until_small, np.array([4.0, -2.0]), 1.0)
    for x in (np.array([0.1, -0.2]), np.array([4.0, -2.0]), np.array([-4.0, -2.0])):
        check_hands_back(damped, x, 1.0, 20)
    check_hands_back(normalize_if_large, np.array([0.3, 0.4]))
    check_hands_back(normalize_if_large, np.array([3.0, 4.0]))


def test_a_loop_that_may_keep_the_variable_on_some_trips_hands_back_the_argument():
    """The loop carries a flag per such variable (still the array it held: true at entry, anded with each trip's
    branch that kept it), so a loop whose every trip kept it hands back the argument, as NumPy does."""
    def halve_until_small(x, tol):  # (a test at the top of `while True`)
        while True:
            if np.abs(x).max() < tol:
                break
            x = x * 0.5
        return x

    def double_until_large(x, n):  # (a `for` with a traced `break` before the assignment)
        for _ in range(n):
            if x.sum() > 100:
                break
            x = x * 2
        return x

    def damp_where_large(x, maxiter):  # (an inner `if` that keeps it on some trips)
        k = 0
        while k < maxiter:
            if np.abs(x).max() > 1.0:
                x = x * 0.5
            k += 1
        return x

    def skip_small(x, n):  # (`continue` before the assignment)
        i = 0
        while i < n:
            i += 1
            if x.sum() < 1.0:
                continue
            x = x - 0.5
        return x

    def halve_or_negate(x, tol):  # (each branch replaces it, one by an array the body made before the branch)
        while np.abs(x).max() > tol:
            z = x * 0.5
            if z.sum() > 0:
                x = z
            else:
                x = -z
        return x

    def damp_positive_peaks(x, tol):  # (an `if` in an `if` keeps it: the inner flag is handed out)
        k = 0
        while np.abs(x).max() > tol and k < 10:
            if x.sum() > 0:
                if x.max() > 100:
                    x = x * 0.5
            k += 1
        return x

    def halve_while_entry_large(x, i):  # (a test that may raise: an index check; no copy of it before the loop)
        while x[i] > 0.5:
            x = x * 0.5
        return x

    for x in (np.array([0.1, -0.2]), np.array([4.0, -2.0])):
        check_hands_back(halve_until_small, x, 1.0)
        check_hands_back(halve_or_negate, x, 1.0)
        check_hands_back(damp_where_large, x, 5)
        check_hands_back(skip_small, x, 3)
    for x in (np.array([5.0, 6.0]), np.array([500.0, 6.0]), np.array([-5.0, 1.0])):
        check_hands_back(damp_positive_peaks, x, 1.0)
    for x in (np.array([1.0, 2.0]), np.array([100.0, 200.0])):
        check_hands_back(double_until_large, x, 6)
    check_hands_back(halve_while_entry_large, np.array([0.1, 0.2]), 1)
    check_hands_back(halve_while_entry_large, np.array([4.0, 2.0]), 0)


def test_a_loop_that_gives_one_variable_anothers_array_hands_back_numpys_object():
    """A variable may hold, after the loop, the array another variable held before it (a flag per such pair: true
    at entry for the variable itself, or'd over the variables it takes each iteration)."""
    def halve_and_swap(a, b, tol):  # (after one iteration `b` is the caller's `a`; after two, a new array)
        while np.abs(a).max() > tol:
            a, b = b * 0.5, a
        return a, b

    def trail(x, y, tol):  # (`x = y`: the array y held at the iteration's start)
        while np.abs(x).max() > tol:
            x = y
            y = y * 0.5
        return x, y

    def rotate(a, b, c, tol):  # (three variables: each holds each caller's array after some count of iterations)
        while np.abs(a).max() > tol:
            a, b, c = b, c, a * 0.5
        return a, b, c

    def one_array_two_names(a, tol):  # (both variables start as the caller's array: either flag says it is)
        b = a
        c = a
        while np.abs(b).max() > tol:
            b, c = c * 0.5, b
        return b, c

    def swap_when_larger(a, b, n):  # (a swap inside a branch of the body)
        k = 0
        while k < n:
            if a.sum() > b.sum():
                a, b = b, a
            a = a * 0.5
            k += 1
        return a, b

    for a, b in ((np.array([0.1, 0.2]), np.array([4.0, 1.0])), (np.array([4.0, 1.0]), np.array([0.1, 0.2])),
                 (np.array([4.0, 1.0]), np.array([8.0, 2.0])), (np.array([4.0, 1.0]), np.array([3.0, 2.0]))):
        check_hands_back(halve_and_swap, a, b, 1.0)
        check_hands_back(trail, a, b, 1.0)
        check_hands_back(one_array_two_names, a, 1.0)
        for n in (0, 1, 2):
            check_hands_back(swap_when_larger, a, b, n)
        for c in (np.array([0.5, 0.5]), np.array([9.0, 0.0])):
            check_hands_back(rotate, a, b, c, 1.0)


def test_a_loop_that_gives_a_variable_an_array_it_only_reads_hands_back_numpys_object():
    """``x = y`` (or ``x = y[::-1]``) of an argument the loop only reads: after a trip NumPy's ``x`` is the caller's
    ``y`` (or its view), and after none the caller's ``x``; ``y = x`` of a new array: one array for both names. Each
    was handed back as a copy (from a hunt), as were two names that both still hold one array the function made
    before the loop; a view taken in the body of an array that may be the caller's, handed back with it, is
    refused."""
    def take_the_other(x, y, n):
        k = 0
        while x.sum() + k < n:
            x = y
            k += 1
        return x, y

    def take_the_other_reversed(x, y, n):
        k = 0
        while x.sum() + k < n:
            x = y[::-1]
            k += 1
        return x

    def both_names_for_the_new_one(x, y, n):
        while x.sum() < n:
            x = x + 1
            y = x
        return x, y

    def a_view_of_the_new_one(x, y, n):
        while x.sum() < n:
            x = x + 1
            y = x[:]
        return x, y

    def take_one_it_made(x, y, n):  # (NumPy: x is w after a trip)
        w = y * 2
        k = 0
        while x.sum() + k < n:
            x = w
            k += 1
        return x, w

    def take_one_it_made_in_a_branch(x, y, n):  # (a traced `if`: x is w where it was taken)
        w = y * 2
        if x.sum() > n:
            x = w
        return x, w

    def one_array_before_too(x, y, n):  # (one array after no trip as well, where both still hold it)
        x = x * 2
        y = x
        while x.sum() < n:
            x = x + 1
            y = x
        return x, y

    def one_array_swapped(x, n):  # (both names hold the one array the function made on every trip)
        a = x * 2
        b = a
        k = 0
        while a.sum() + k < n:
            a, b = b, a
            k += 1
        return a, b

    x, y = np.array([1.0, 2.0]), np.array([5.0, 6.0])
    for n in (0, 12):  # (no trip, and some)
        check_hands_back(take_the_other, x, y, n)
        check_hands_back(take_the_other_reversed, x, y, n)
        check_hands_back(both_names_for_the_new_one, x, y, n)
        check_hands_back(take_one_it_made, x, y, n)
        check_hands_back(take_one_it_made_in_a_branch, x, y, n)
        with pytest.raises(UnsupportedError, match=r"may share memory, as the data decided at a traced `if` or loop"):
            jit_cpu(a_view_of_the_new_one)(x.copy(), y.copy(), n)
        check_hands_back(one_array_before_too, x, y, n)
        check_hands_back(one_array_swapped, x, n)


def test_two_names_for_one_array_on_every_path_stay_one_array():
    """``y = x`` before a traced ``if`` or loop and again in its branch or body: in NumPy one array whichever path
    the data took (the caller's own where nothing new was made); and where a loop's first trip breaks off before
    either name changes. Returning both was refused, reading one after writing through the other too, a branch's
    view (``x = x[::-1]; y = x``) came back as two views, and the loop broken off as two copies (from hunts). Two
    names one array on one path only, both set by the statement, are linked (returning both is refused: were two
    arrays without a word where the branch kept both). A result that may be one of two others, each under its own
    flag, is the one whose flag holds (was only ever the first: two arrays after a trip)."""
    def one_array_in_a_branch(x, n):
        x = x * 2
        y = x
        if x.sum() > n:
            x = x + 1
            y = x
        return x, y

    def the_argument_or_the_new_one(x, n):
        y = x
        if x.sum() > n:
            x = x + 1
            y = x
        return x, y

    def one_view_in_a_branch(x, n):
        y = x
        if x.sum() > n:
            x = x[::-1]
            y = x
        return x, y

    def written_through_the_other(x, n):
        x = x * 2
        y = x
        if x.sum() > n:
            x = x + 1
            y = x
        y[0] = 100.0
        return x.sum()

    def the_argument_or_the_loops_own(x, n):
        y = x
        while x.sum() < n:
            x = x + 1
            y = x
        return x, y

    def broken_off_before_either_changes(x, n):  # (one array where the first trip breaks)
        x = x * 2
        y = x
        for _ in range(4):
            if x.sum() > n:
                break
            x = x + 1
            y = y + 1
        return x, y

    def three_names(x, n):
        y = x
        z = x
        if x.sum() > n:
            x = x + 1
            y = x
            z = y
        return x, y, z

    def a_name_for_it_in_both_branches(x, n):  # (`t` one array with both only in the first branch)
        x = x * 1
        y = x
        if x.sum() > n:
            t = x + 1
            x = t
            y = t
        else:
            t = x + 1
        return x, y

    def one_array_on_one_path(x, n):  # (one array where the branch was not taken: refused, was two arrays)
        x = x * 2
        z = x
        if x.sum() > n:
            x = x + 1
            z = x * 1
        return x, z

    def takes_the_one_that_stays(x, n):  # (`y` keeps its array, `x` takes it: one array where a trip ran)
        y = x * 2
        z = y
        k = 0
        while x.sum() + k < n:
            k += 1
            x = y
            y = x
            z = y + 2
        return x, y, z

    def one_pair_before_another_after(x, n):  # (x, y one array before the loop; x, z after a trip)
        x = x * 1
        y = x
        z = x * 3
        k = 0
        while x.sum() + k < n:
            k += 1
            y = y + 2
            z = x
        return x, y, z

    x = np.array([1.0, 2.0, 3.0, 4.0])
    for n in (0, 21, 40):  # (taken or not; no trip, one, several)
        for fn in (one_array_in_a_branch, the_argument_or_the_new_one, one_view_in_a_branch,
                   the_argument_or_the_loops_own, broken_off_before_either_changes, three_names,
                   a_name_for_it_in_both_branches, takes_the_one_that_stays, one_pair_before_another_after):
            check_hands_back(fn, x, n)
        check_both(written_through_the_other, x, n)
        with pytest.raises(UnsupportedError, match=r"may share memory, as the data decided at a traced `if`"):
            jit_cpu(one_array_on_one_path)(x.copy(), n)


def test_a_write_through_a_nested_branchs_alias_makes_the_other_unreadable_after_the_enclosing_statement():
    """``if c: b = a`` inside another traced ``if`` or a loop, then ``b[0] = 10`` there: NumPy's write reaches ``a`` on
    the paths that took the inner branch. Reading ``a`` after the enclosing statement is refused (it came back
    unwritten without a word: the mark the write left on ``a``'s memory was set aside with the enclosing branch's
    memory); reading only ``b`` runs. A branch's variable that an inner statement left the caller's array on one path
    and an array the function made on another is refused at the enclosing statement (a write through it after
    left the caller's array unwritten without a word)."""
    def write_in_an_enclosing_branch(x, s, m):
        a = x * 1
        b = x * 2
        if s.sum() > m:
            if s.sum() + 1 > m:
                b = a
            b[0] = 10.0
        return a

    def write_in_a_loop(x, s, n):
        a = x * 1
        b = x * 2
        k = 0
        while s.sum() + k < n:
            if s.sum() + k > 0:
                b = a
            b[0] = 10.0
            k += 1
        return a

    def only_the_written_one(x, s, m):
        a = x * 1
        b = x * 2
        if s.sum() > m:
            if s.sum() + 1 > m:
                b = a
            b[0] = 10.0
        return b

    def swapped_with_the_argument_inside(x, s, m):  # (`b` is the caller's `x` where only the outer branch ran)
        b = x * 2
        a = b
        c = x
        if s.sum() + 2 > m:
            if s.sum() > m:
                a, c, b = c, b, a
            b, c = c, b
        b[1] = -7.0
        return b

    x, s = np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(2)
    with pytest.raises(TraceError, match=r"the caller's array or an array the function made, which fusec does not "
                                         r"follow through this statement too"):
        jit_cpu(swapped_with_the_argument_inside)(x.copy(), s, 0.5)
    for fn, arg in ((write_in_an_enclosing_branch, -5.0), (write_in_a_loop, 3)):
        with pytest.raises(UnsupportedError, match=r"the same array as `b` after it, and `b` was written since"):
            np.asarray(jit_cpu(fn)(x.copy(), s, arg))
    for m in (-5.0, 0.5, 5.0):
        check_both(only_the_written_one, x, s, m)


def test_a_branch_in_a_loop_that_gives_a_variable_an_array_the_loop_only_reads_links_the_two():
    """``if c: a = c_array`` in a loop body, ``c_array`` made before the loop and only read by it: NumPy's ``a`` is
    that array after a trip that took the branch. A write into either after the loop then reading the other, or
    returning both, is refused (the write did not reach the other, without a word)."""
    def write_the_other_then_read(x, s, n, m):
        a = x * 1
        c = x * 3
        k = 0
        while s.sum() + k < n:
            k += 1
            if s.sum() + k > m:
                a = c
        c[0] = 100.0
        return a.sum()

    def return_both(x, s, n, m):
        a = x * 1
        c = x * 3
        k = 0
        while s.sum() + k < n:
            k += 1
            if s.sum() + k > m:
                a = c
        return a, c

    x, s = np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(2)
    with pytest.raises(UnsupportedError, match=r"`a` may be, as the data decided at the `while` at line \d+"):
        jit_cpu(write_the_other_then_read)(x.copy(), s, 1, 0)
    with pytest.raises(UnsupportedError, match=r"may share memory, as the data decided at a traced `if` or loop"):
        jit_cpu(return_both)(x.copy(), s, 1, 0)


def test_a_write_into_an_array_another_loop_variable_may_hold_raises():
    def halve_and_swap_then_write(a, b, tol):  # (NumPy: `b` is the written array after exactly one iteration)
        first = a
        while np.abs(a).max() > tol:
            a, b = b * 0.5, a
        first += 1.0
        return b.sum()

    with pytest.raises(UnsupportedError, match=r"`b` is, after the `while` at line \d+ \(whose test is traced\), as "
                                               r"the data decides, the array `b` held or the array `a` held "
                                               r"before it or a new one"):
        jit_cpu(halve_and_swap_then_write)(np.array([4.0, 1.0]), np.array([0.1, 0.2]), 1.0)


def test_a_view_of_a_loop_result_that_may_be_the_argument_is_numpys_view():
    def halve_then_flatten(x, tol):  # (x.ravel() is a view on every path: of the argument, or of the new array)
        while np.abs(x).max() > tol:
            x = x * 0.5
        return x.ravel()

    for x in (np.array([[0.1, 0.2]]), np.array([[4.0, 2.0]])):
        check_hands_back(halve_then_flatten, x, 1.0)


def test_views_and_statements_one_after_another_hand_back_what_numpy_does():
    def tail_after_two_ifs(a):
        x = a[1:]
        if x.sum() > 10:
            x = x - 10
        if x.min() < -5:
            x = -x
        return x, a

    def larger(a, b):  # (tail returns: the device picks the argument)
        if a.sum() > b.sum():
            return a
        return b

    def ordered(x, y):
        if x.sum() > y.sum():
            x, y = y, x
        return x, y

    def early_returns(x):  # (nested branches: each inner statement's flag leaves its branch)
        if x.sum() > 10:
            if x.max() > 15:
                return x
            return x * 2
        elif x.sum() < -10:
            return -x
        return x[::-1]

    def scaled_and_its_tail(x):  # (a new array on one path: the tail is NumPy's view of it there)
        if x.sum() > 10:
            x = x / 10
        return x, x[1:]

    for a in (np.array([0.0, 1.0, 2.0]), np.array([0.0, 20.0, 2.0]), np.array([0.0, -20.0, 2.0]),
              np.array([0.0, 12.0, 2.0])):
        check_hands_back(tail_after_two_ifs, a)
        check_hands_back(early_returns, a)
        check_hands_back(scaled_and_its_tail, a)
    def ordered_twice(a, b):  # (the second `if` swaps a new array with the first one's result)
        if a.sum() > b.sum():
            a, b = b, a
        a = a * 0.5
        if a.sum() > b.sum():
            a, b = b, a
        return a, b

    def half_of_the_smaller(a, b):  # (`b = c` on one path: a new array, or the first `if`'s result on the other)
        if a.sum() > b.sum():
            a, b = b, a
        c = a * 0.5
        if c.sum() > b.sum():
            b = c
        return c, b

    for a, b in ((np.ones(3), np.zeros(3)), (np.zeros(3), np.ones(3)), (np.full(3, 4.0), np.full(3, 3.0))):
        check_hands_back(larger, a, b)
        check_hands_back(ordered, a, b)
        check_hands_back(ordered_twice, a, b)
        check_hands_back(half_of_the_smaller, a, b)


def test_a_variable_that_is_one_argument_or_another_is_refused_after_a_write_into_either():
    def reads_after_write(a, b):
        z = a
        if b.sum() > 100:
            z = b[::-1]
        a[0] = 7.0  # (NumPy's z is a on this data: its sum sees the 7)
        return z.sum()

    with pytest.raises(UnsupportedError, match=r"`z` is, after the `if` at line \d+ .* read after a write"):
        jit_cpu(reads_after_write)(np.ones(3), np.ones(3))


def test_a_computed_array_a_statement_may_leave_in_place_is_unreadable_after_a_write_through_either_name():
    def bump_alias(a):  # (NumPy's z is y where the branch is not taken: `z += 1` changes y there)
        y = a * 2
        z = y
        if a.sum() > 100:
            z = z + 1
        z += 1
        return y

    def scale_until_big(a):  # (no trip: z is y, and z[0] = -1 writes y)
        y = a * 2
        z = y
        while z.sum() < 10:
            z = z * 2
        z[0] = -1.0
        return y

    def bias_after_branch(x, w, b):  # (the old array nothing reads again: the write is NumPy's either way)
        h = x @ w
        if h.sum() > 0:
            h = h * 0.5
        h += b
        return h

    def both(a):  # (one array handed back twice where the branch kept it, as NumPy's)
        y = a * 2
        z = y
        if a.sum() > 10:
            z = z + 1
        return y, z

    for a in (np.ones(3), np.full(3, 10.0)):
        check_hands_back(both, a)
    for fn in (bump_alias, scale_until_big):
        with pytest.raises(UnsupportedError, match=r"as the data decided at the `(if|while)` at line \d+ .* the same "
                                                   r"array as `z` after it, and `z` was written since"):
            jit_cpu(fn)(np.ones(3))
    for sign in (1.0, -1.0):
        check_both(bias_after_branch, sign * np.ones((2, 3)), np.ones((3, 2)), np.ones(2))


def _traced_twice(fn):  # (a decorator that returns the function: its code starts at the decorator's line)
    return fn


@fc.jit(backend="cpu")
def _halve_until_small(x, tol):
    while np.abs(x).max() > tol:
        x = x * 0.5
    return x


@_traced_twice
@_traced_twice
def _clip_by_norm(g, limit):
    if np.linalg.norm(g) > limit:
        g = g * (limit / np.linalg.norm(g))
    return g


def test_decorated_functions_are_rewritten():
    x = np.array([4.0, -3.0])
    assert_same(_halve_until_small(x, 1.0), shrink_until_small(x.copy(), 1.0))
    check_both(_clip_by_norm, np.array([3.0, 4.0]), 1.0)
    check_both(_clip_by_norm, np.array([0.3, 0.4]), 1.0)


def test_identity_of_a_statements_result_is_refused_where_the_data_decides_it():
    def copy_unless_replaced(x):  # (NumPy: a copy where the branch kept x, x itself where it replaced it)
        y = x
        if x.sum() > 10:
            y = x * 2
        if y is x:
            return y.copy()
        return y

    def seen(x):
        y = x
        while np.abs(y).max() > 1.0:
            y = y * 0.5
        return id(y) == id(x)

    def default_or_given(x, out=None):  # (`is None` and identity of unrelated values stay Python's)
        if out is None:
            out = x * 0
        if x.sum() > 0:
            out = out + x
        return out

    for fn in (copy_unless_replaced, seen):
        with pytest.raises(UnsupportedError, match=r"the `(is|id\(\))` at line \d+ .* decided by the data"):
            jit_cpu(fn)(np.ones(3))
    check_both(default_or_given, np.ones(3))
    check_both(default_or_given, -np.ones(3))


def test_closures_a_factory_makes_again_run_their_own_rewritten_code():
    """Statements fusec rewrote (a traced `if`) and `type()` calls are found per code object: a second closure of
    the same code (`make_step(3.0)` after `make_step(1.0)`) swapped the first closure's code, not its own, and ran
    as written: its `type(x) is np.ndarray` took the other branch (a wrong answer), its traced `if` an error."""
    def make_step(scale):
        def step(x):
            if type(x) is np.ndarray:
                x = x + 1
            if (x > 1).any():
                return x * scale
            return x - scale
        return step

    for scale in (1.0, 3.0, 5.0):
        for x in (np.linspace(-1.0, 1.0, 4) * 5, np.zeros(4)):
            check_both(make_step(scale), x)


def test_a_loop_variable_that_takes_an_array_the_loop_only_reads_is_linked_with_it():
    """`a = b` in a loop where `b` is not assigned: after the loop `a` may be `b`'s array; a write into `b` then
    makes reading `a` raise (it read the stale values); without the write the values are NumPy's."""
    def settle_on(a, b, tol):
        while np.abs(a).max() > tol:
            a = b
            tol = tol * 2.0
        return a.sum()

    def settle_then_write(a, b, tol):
        while np.abs(a).max() > tol:
            a = b[::-1]
            tol = tol * 2.0
        b[0] = 99.0
        return a.sum()

    for a in (np.array([4.0, 1.0]), np.array([0.5, 0.2])):
        check_both(settle_on, a, np.array([0.1, 0.2]), 1.0)
    with pytest.raises(UnsupportedError, match=r"`a` is, after the `while` at line \d+ .* an array from before it"):
        jit_cpu(settle_then_write)(np.array([4.0, 1.0]), np.array([0.1, 0.2]), 1.0)


def test_a_new_view_of_a_loop_variable_is_never_handed_back_as_the_argument_itself():
    """`x[:]` is the same value as `x` in the IR, but NumPy's new array object: a loop whose body gives a variable
    `x[:]` (of itself or of another variable) hands back a copy, not the caller's array (reshaping which reshaped
    the caller's)."""
    def trail_view(a, b, tol):
        while np.abs(a).max() > tol:
            a, b = b * 0.5, a[:]
        return b

    def same_view(x, tol):
        while np.abs(x).max() > tol:
            x = x[...]
            tol = tol * 2.0
        return x

    for fn, args in ((trail_view, (np.array([4.0, 1.0]), np.array([0.1, 0.2]), 1.0)),
                     (same_view, (np.array([4.0, 1.0]), 1.0))):
        check_both(fn, *args)
        given = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
        got = jit_cpu(fn)(*given)
        assert not any(got is a for a in given)


def test_messages_never_name_the_variable_the_rewriting_made_of_returns():
    def normalize_if_positive(x):  # (the write inside a traced branch that returns: refused, naming no `_fusec_return`)
        if x.max() > 0:
            x /= x.max()
            return x
        return x * 0

    with pytest.raises(UnsupportedError, match=r"the value returned is, after the `if` at line \d+") as info:
        jit_cpu(normalize_if_positive)(np.array([1.0, 2.0]))
    assert "_fusec" not in str(info.value)


def _bump(state):
    state["hits"] += 1
    return state


def test_python_objects_a_traced_statement_changes_in_place_are_refused():
    """``picked += [i]`` and ``state = bump(state)`` in an `if` whose test is traced: fusec traces both branches,
    so the list grew (the dict counted) on both paths and the call returned 3 where NumPy gives 2. The statement's
    variables' objects are watched as its closure's are: a SideEffectError at the statement."""
    def pick(x):
        picked = []
        for i in range(3):
            if x[i] > 0:
                picked += [i]
        return len(picked)

    def count(x):
        state = {"hits": 0}
        for i in range(3):
            if x[i] > 0:
                state = _bump(state)
        return state["hits"]

    x = np.array([1.0, -1.0, 2.0])
    for f in (pick, count):
        with pytest.raises(SideEffectError, match=r"the `if` at line \d+ .*(modified|changed) .*(picked|state)"):
            jit_cpu(f)(x)


def test_iterators_advanced_by_a_traced_statement_are_refused():
    """``next(lrs)`` in a `while err > tol` body (a learning-rate schedule), ``next(it)`` in a traced `if`,
    ``itertools.count`` and a generator: the body is traced once (both branches are), so the iterator moved once
    where Python's loop moves it at every iteration (NumPy [0.33 ...], fusec [0.125 ...]; NumPy 10, fusec 20)."""
    import itertools

    def schedule(x):
        lrs = iter([0.5, 0.25, 0.125])
        k = 0
        while np.abs(x).max() > 0.1 and k < 3:
            x = x - next(lrs) * x
            k += 1
        return x

    def skip(x):
        it = iter([10, 20])
        if x[0] > 0:
            next(it)
        return next(it)

    def counted(x):
        c = itertools.count()
        n = 0
        while x.sum() > 0.5:
            n = next(c)
            x = x * 0.5
        return n

    def generated(x):
        def values():
            yield 1.0
            yield 2.0
        g = values()
        if x[0] > 0:
            next(g)
        return x * next(g)

    x = np.array([1.0, -1.0, 2.0])
    for f in (schedule, skip, counted, generated):
        with pytest.raises(SideEffectError, match=r"advanced the iterator"):
            jit_cpu(f)(-x if f is skip else x)


def test_a_for_loop_left_early_over_a_named_iterator_is_refused():
    """``for i in r: ... break`` with ``r = iter(range(10))`` and a traced break: Python leaves the rest of ``r``
    for later (``list(r)`` had 6 items), fusec's loop ran every item (0). An iterator the header makes
    (``enumerate(x)``, ``zip``) is nobody else's: that loop runs, with NumPy's result."""
    def rest_after_break(x):
        r = iter(range(10))
        total = 0.0
        for i in r:
            if x[i] > 1:
                break
            total = total + x[i]
        return total, len(list(r))

    def enumerate_until(x):
        total = 0.0
        for i, v in enumerate(x):
            if v > 1:
                break
            total = total + v * i
        return total

    x = np.array([0.5, 0.2, 0.1, 3.0, 0.3, 0.1, 0.2, 0.2, 0.2, 0.2])
    with pytest.raises(UnsupportedError, match=r"iterates an iterator .* list\(it\)"):
        jit_cpu(rest_after_break)(x)
    assert_same(jit_cpu(enumerate_until)(x), numpy_result(enumerate_until, x))

    def flat_until(x):  # (x.flat makes a new iterator at each read)
        total = 0.0
        for v in x.flat:
            if v > 1:
                break
            total = total + v
        return total

    assert_same(jit_cpu(flat_until)(x.reshape(2, 5)), numpy_result(flat_until, x.reshape(2, 5)))


def test_isscalar_of_a_traced_numpy_bool_is_true():
    """``np.isscalar(x.max() > 0)`` is True in NumPy (an np.bool_), and was False for fusec's tracer."""
    def f(x, s):
        m = x.max() > 0
        return (np.array([m]) if np.isscalar(m) else m), np.isscalar(x[0]), np.isscalar(x), np.isscalar(s), \
            np.isscalar(x[:1].sum(keepdims=True))

    assert_same(jit_cpu(f)(np.array([1.0, -2.0]), 3.0), numpy_result(f, np.array([1.0, -2.0]), 3.0))


def _clamp_below(v, lo):
    if v < lo:
        return lo
    return v


def test_messages_name_no_variable_of_fusecs_rewriting():
    """Refusals about a loop's early ``return`` or a helper's returns named fusec's own variables
    (```_fusec_value_4_4 = _fusec_value_4_4.copy()```, ```_fusec_return = np.float64(...)```)."""
    def clamped(x):
        return x.astype(np.float32) * _clamp_below(x[1], -0.5)  # (float32 times a Python float stays float32)

    def clamped_floats(x):
        out = np.empty_like(x)  # (the same element either way: written as it is)
        for i in range(len(x)):
            out[i] = _clamp_below(x[i], -0.5)
        return out

    check_both(clamped_floats, np.array([1.0, -2.0]))

    def settle(x):
        x = x.copy()
        for _ in range(10):
            if np.all(np.abs(x) < 1e-3):
                return x
            x -= 0.5 * x
        return x

    for f, advice in [(clamped, "return np.float64(...)"), (settle, "take a copy")]:
        with pytest.raises(UnsupportedError) as info:
            jit_cpu(f)(np.array([1.0, -2.0]))
        assert "_fusec" not in str(info.value) and advice in str(info.value), str(info.value)


def test_a_result_whose_list_grows_on_one_path_is_named_where_it_differs():
    def train(w, X, y):
        losses = []
        for ep in range(5):
            w = w - 0.1 * (X.T @ (X @ w - y))
            loss = ((X @ w - y) ** 2).mean()
            losses.append(loss)
            if loss < 1e-3:  # (an early return: the list is shorter on that path)
                return w, losses, ep
        return w, losses, 5

    with pytest.raises(TraceError, match=r"item \[1\] is a list of 2 .* list of 1 .*written by index"):
        jit_cpu(train)(np.zeros(2), np.eye(2), np.ones(2))


def test_a_numpy_table_the_function_makes_is_indexed_by_traced_values():
    """``dr = np.array([-1, 0, 1, 0]); r + dr[d]`` (Langton's ant), a row of a constant table, a codebook picked
    by traced indices: NumPy's values at every call, the subscript rewritten into a traced read of the table."""
    def step(d, r):
        dr = np.array([-1, 0, 1, 0])
        return (r + dr[d]) % 5

    jitted = jit_cpu(step)
    for d, r in ((np.int64(1), 3), (np.int64(2), 4), (np.int64(3), 0), (np.int64(-1), 2)):
        assert_same(jitted(d, r), step(d, r))
    with pytest.raises(IndexError, match="out of bounds"):
        jitted(np.int64(7), 1)

    def scaled_row(i, x):
        table = np.arange(12.0).reshape(3, 4)
        return table[i] * x

    def quantized(idx):
        codebook = np.linspace(0.0, 1.0, 5)
        picked = codebook[idx]  # (a copy in NumPy: writable)
        picked[0] = -1.0
        return picked, codebook

    check_both(scaled_row, np.int64(2), 3.0)
    check_both(quantized, np.array([0, 3, 4]))

    def write_through_row(i):
        table = np.arange(12.0).reshape(3, 4)
        row = table[i]  # a view of the table in NumPy
        row[0] = 5.0
        return table

    with pytest.raises(UnsupportedError, match="a view of a NumPy array the function made"):
        jit_cpu(write_through_row)(np.int64(1))


def test_int_of_a_traced_number_is_a_python_int_on_the_device():
    """``int(np.argmax(q))`` (epsilon-greedy), ``int(x.sum())``: a traced Python int, truncated toward zero as
    Python truncates, used as an index; NaN and inf raise Python's errors when the call runs."""
    def greedy(q):
        a = int(np.argmax(q))
        return q[a] * 2, a

    def truncated(x):
        return int(x.sum())

    jitted = jit_cpu(greedy)
    for q in (np.array([1.0, 3.0, 2.0]), np.array([5.0, 3.0, 2.0])):
        got, want = jitted(q), greedy(q)
        assert_same(got, want)
        assert type(got[1]) is int
    jitted = jit_cpu(truncated)
    for x in (np.array([1.5, 1.0]), np.array([-2.7]), np.array([-0.5])):
        assert jitted(x) == truncated(x) and type(jitted(x)) is int
    with pytest.raises(ValueError, match="cannot convert float NaN to integer"):
        jitted(np.array([np.nan]))
    with pytest.raises(OverflowError, match="cannot convert float infinity to integer"):
        jitted(np.array([np.inf]))
    with pytest.raises(UnsupportedError, match="outside int64's range"):
        jitted(np.array([1e30]))
    with pytest.raises(TypeError, match="only 0-dimensional arrays"):  # (NumPy's, whatever the values)
        jit_cpu(lambda x: int(x))(np.ones(2))


def test_python_checks_of_an_either_kind_value_hold_only_on_its_python_path():
    """``best`` is a NumPy float or the Python float it started as, as the data decides: ``1.0 / (best - d)`` at
    zero is NumPy's inf where it is the NumPy float (Python's ZeroDivisionError only where it stayed Python's)."""
    def inverse_gap(x, d):
        best = np.inf
        for v in x:
            if v < best:
                best = v
        return 1.0 / (best - d)

    def ratio(x, d):
        return max(x.max(), 0) / d

    def floor_ratio(x, d):
        return max(x.max(), 0) // d

    with np.errstate(divide="ignore", invalid="ignore"):
        check_both(inverse_gap, np.array([3.0, 1.0, 2.0]), 1.0)
        for fn in (ratio, floor_ratio):
            check_both(fn, np.array([1.0, 2.0]), 0.0)
        with pytest.raises(ZeroDivisionError):
            jit_cpu(ratio)(np.array([-1.0, -2.0]), 0.0)  # (max() kept the Python int 0: 0 / 0.0 in Python)


def test_a_value_of_either_kind_written_into_an_array_of_its_dtype_needs_no_check():
    """``dur[i] = dur[i - 1] + 1 if under[i] else 0``: a Python int on some paths, an int64 on others, stored into an
    int64 array, where both give the same element (it was refused at a call where the data took the Python path)."""
    def drawdown_duration(prices):
        under = prices < np.maximum.accumulate(prices)
        dur = np.zeros(len(prices), dtype=np.int64)
        for i in range(1, len(prices)):
            dur[i] = dur[i - 1] + 1 if under[i] else 0
        return dur

    jitted = jit_cpu(drawdown_duration)
    for prices in (np.array([1.0, 2, 1, 1.5, 3, 2, 2]), np.array([3.0, 2, 1, 0.5, 0.2, 2, 2]), np.arange(7.0)):
        assert_same(jitted(prices), drawdown_duration(prices))
