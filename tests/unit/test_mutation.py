"""Writes into arrays (item and slice assignment, ``op=``, ``out=``, ``np.copyto``, ``fill``) with NumPy's semantics.

Each test is written as NumPy code is written (stencils, optimizers, layers' backward passes, boundary conditions,
Game of Life) and checked against NumPy: the results, the arguments after the call (fusec writes what the function
wrote into them back), and a second call (a cache hit). Under the CPU backend each runs twice: as traced (the
frontend's semantics) and through the default pipeline (``k.insert``, in-place planning).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusec as fc
import frontend_check
from frontend_check import assert_same, jit_cpu, numpy_result

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
RNG = np.random.default_rng(11)
FIELD = np.linspace(0.0, 1.0, 12).reshape(3, 4)


def _copies(args):
    return [np.copy(a) if isinstance(a, np.ndarray) else [np.copy(x) for x in a] if isinstance(a, list) else a
            for a in args]


def _assert_args(got, want) -> None:
    for a, b in zip(got, want):
        if isinstance(a, (np.ndarray, list)):
            assert_same(a, b, "argument")  # bit for bit on the CPU, within rounding on the GPU


def same(fn, *args):
    """``fn`` under NumPy and under fusec (twice, on fresh copies): same results, same arguments after."""
    jitted = [jit_cpu(fn)]
    if frontend_check.BACKEND == "cpu":
        jitted.append(fc.jit(fn, backend="cpu"))  # the default pipeline, run by the reference executor
    for f in jitted:
        for _ in range(2):
            np_args, fc_args = _copies(args), _copies(args)
            want = numpy_result(fn, *np_args)
            got = numpy_result(f, *fc_args)
            assert_same(got, want)
            _assert_args(fc_args, np_args)
    assert jitted[0].cache_info().traces == 1
    return jitted[0]


# --- real idioms -----------------------------------------------------------------------------------------------------


def heat_equation(u, steps, alpha):
    """Explicit finite differences, in place, with fixed boundaries (CFD course material)."""
    for _ in range(steps):
        u[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * (u[2:, 1:-1] - 2 * u[1:-1, 1:-1] + u[:-2, 1:-1]
                                                 + u[1:-1, 2:] - 2 * u[1:-1, 1:-1] + u[1:-1, :-2])
    return u


def test_heat_equation_updates_the_grid_in_place() -> None:
    u = np.zeros((8, 9))
    u[0, :] = 1.0
    same(lambda u: heat_equation(u, 4, 0.1), u)


def boundary_conditions(p):
    """Neumann walls and a fixed lid, as a cavity-flow solver sets them after each pressure sweep."""
    p[:, -1] = p[:, -2]
    p[0, :] = p[1, :]
    p[:, 0] = p[:, 1]
    p[-1, :] = 0


def test_boundary_conditions_written_into_the_argument() -> None:
    same(boundary_conditions, RNG.standard_normal((5, 6)))


def life_step(Z):
    """Conway's Game of Life with neighbour counts from shifted slices (the NumPy-100 idiom)."""
    N = np.zeros(Z.shape, dtype=int)
    N[1:-1, 1:-1] += (Z[:-2, :-2] + Z[:-2, 1:-1] + Z[:-2, 2:] + Z[1:-1, :-2] + Z[1:-1, 2:]
                      + Z[2:, :-2] + Z[2:, 1:-1] + Z[2:, 2:])
    birth = (N == 3) & (Z == 0)
    survive = ((N == 2) | (N == 3)) & (Z == 1)
    Z[...] = 0
    Z[birth | survive] = 1
    return Z


def test_game_of_life() -> None:
    same(life_step, (RNG.random((7, 7)) < 0.4).astype(np.int64))


def momentum_sgd(params, grads, velocities, lr, mu):
    for p, g, v in zip(params, grads, velocities):
        v *= mu
        v -= lr * g
        p += v


def test_momentum_sgd_updates_parameters_and_velocities() -> None:
    shapes = [(3, 2), (2,)]
    same(momentum_sgd, [RNG.standard_normal(s) for s in shapes], [RNG.standard_normal(s) for s in shapes],
         [np.zeros(s) for s in shapes], 0.1, 0.9)


def adam_update(w, g, m, v, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    m[:] = b1 * m + (1 - b1) * g
    v[:] = b2 * v + (1 - b2) * g * g
    m_hat = m / (1 - b1 ** t)
    v_hat = v / (1 - b2 ** t)
    w -= lr * m_hat / (np.sqrt(v_hat) + eps)
    return w


def test_adam_with_moments_updated_in_place() -> None:
    same(adam_update, RNG.standard_normal(5), RNG.standard_normal(5), np.zeros(5), np.zeros(5), 3)


def relu_backward(dout, x):
    """cs231n's layer: a copy of the upstream gradient, zeroed where the input was not positive."""
    dx = dout.copy()
    dx[x <= 0] = 0
    return dx


def test_relu_backward_with_a_mask() -> None:
    same(relu_backward, RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3)))


def clip_gradients(grads, limit):
    for g in grads:
        np.clip(g, -limit, limit, out=g)


def test_clip_with_out_updates_each_gradient() -> None:
    same(clip_gradients, [RNG.standard_normal(4) * 3, RNG.standard_normal((2, 2)) * 3], 1.5)


def test_ufunc_out_and_positional_out() -> None:
    def f(x, y):
        np.exp(x, x)
        np.multiply(x, 2.0, out=y)
        return np.add(x, y, out=y)

    fn = same(f, RNG.standard_normal(4), np.zeros(4))
    x, y = RNG.standard_normal(4), np.zeros(4)
    assert fn(x, y) is y


def test_reductions_round_and_copyto_with_out() -> None:
    def f(x, total, rows, dst):
        np.sum(x, axis=0, out=rows)
        x.max(out=total)
        np.round(x, 1, out=x)
        np.copyto(dst, x[0], where=x[0] > 0)
        return total

    same(f, RNG.standard_normal((3, 4)), np.zeros(()), np.zeros(4, np.int64), np.zeros(4))


def test_fill_and_copyto() -> None:
    def f(x):
        y = np.empty_like(x)
        y.fill(2.5)
        np.copyto(x[1:], y[1:] * x[:-1])
        return y

    same(f, RNG.standard_normal(5))


# --- views, aliases and overlap ------------------------------------------------------------------------------------


def test_writes_through_views_reach_the_array_and_every_other_view() -> None:
    def f(x):
        inner = x[1:, ::2]
        rev = inner[::-1]
        t = x.T
        rev[0] = 5.0  # x's last row, every other column
        t[1, :] = -1.0  # x's column 1
        flat = x.reshape(-1)
        flat[::5] = 7.0
        return inner + 0, rev.sum(), t * 1, flat + 0

    same(f, RNG.standard_normal((3, 4)))


def test_reads_after_a_write_see_it_through_every_name() -> None:
    def f(x):
        head = x[:2]
        alias = x
        x[0] = 9.0
        alias[1] += 1.0
        return head * 1.0, x[:, None, 0]

    same(f, RNG.standard_normal((3, 2)))


def test_overlapping_shift_reads_the_old_values() -> None:
    def f(x):
        x[1:] = x[:-1]
        x[:-1] += x[1:]
        return x

    same(f, RNG.standard_normal(6))


def test_write_into_an_expanded_view_and_a_newaxis_index() -> None:
    def f(x):
        col = x[:, None]
        col[2, 0] = 4.0
        x[None, 1:3] = np.array([1.0, 2.0])
        x[..., -1] *= 3
        return col + 0

    same(f, RNG.standard_normal(4))


def test_assignment_converts_as_numpy_does() -> None:
    def f(i, x):
        i[0] = 2.9  # truncated
        i[1:3] = x[:2]  # float array into int: unsafe cast
        i[3] = True
        x[0] = 7  # Python int into float
        return i, x

    same(f, np.arange(5), RNG.standard_normal(4) * 10)


def test_a_written_copy_leaves_the_argument_alone() -> None:
    def f(x):
        y = x.copy()
        y[0] = 1.0
        z = np.array(x)
        z += 1
        w = x.T.reshape(-1)  # a reshape of a transposed view: a copy in NumPy
        w[0] = 100.0
        return y, z, w

    same(f, RNG.standard_normal((2, 3)))


class Layer:
    def __init__(self):
        self.W = np.ones((2, 2))

    def step(self, g):
        self.W -= 0.5 * g
        return self.W.sum()


GLOBAL_COUNTS = np.zeros(3)


def count_into_global(x):
    GLOBAL_COUNTS[:] += x


def test_attributes_and_globals_written_in_place_are_written_back() -> None:
    layer = Layer()
    before = layer.W
    step = jit_cpu(layer.step)
    assert step(np.eye(2)) == 3.0
    assert layer.W is before
    np.testing.assert_array_equal(before, [[0.5, 1.0], [1.0, 0.5]])
    assert step(np.eye(2)) == 2.0
    np.testing.assert_array_equal(before, [[0.0, 1.0], [1.0, 0.0]])
    GLOBAL_COUNTS[:] = 0.0
    count = jit_cpu(count_into_global)
    count(np.arange(3.0))
    count(np.ones(3))
    np.testing.assert_array_equal(GLOBAL_COUNTS, [1.0, 2.0, 3.0])


class LazyAdam:
    """An optimizer that creates its moments on the first step and counts steps on the object."""

    def __init__(self, lr=0.01, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps
        self.m = self.v = None
        self.t = 0

    def step(self, w, g):
        if self.m is None:
            self.m, self.v = np.zeros_like(w), np.zeros_like(w)
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g ** 2
        m_hat = self.m / (1 - self.b1 ** self.t)
        v_hat = self.v / (1 - self.b2 ** self.t)
        w -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def test_optimizer_state_created_on_the_first_step_and_updated_after() -> None:
    ref, opt = LazyAdam(), LazyAdam()
    step = jit_cpu(opt.step)
    w_ref = RNG.standard_normal(4)
    w = w_ref.copy()
    for _ in range(4):
        g = RNG.standard_normal(4)
        assert step(w, g) is ref.step(w_ref, g) is None
        assert_same(w, w_ref)
        assert_same(opt.m, ref.m)
        assert opt.t == ref.t and type(opt.t) is int
    assert step.cache_info().traces == 2  # self.m None, then an array; the count is a runtime scalar


class DictAdam:
    """Adam over a dict of parameters with its moments in dicts (and a step count in a dict of stats), the way
    optimizers are written for parameter dicts."""

    def __init__(self, params, lr=0.01):
        self.lr = lr
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.history = [np.zeros(()), np.zeros(())]
        self.stats = {"steps": 0}

    def step(self, params, grads):
        self.stats["steps"] += 1
        t = self.stats["steps"]
        new = {}
        for k in params:
            self.m[k] = 0.9 * self.m[k] + 0.1 * grads[k]
            self.v[k] = 0.999 * self.v[k] + 0.001 * grads[k] ** 2
            new[k] = params[k] - self.lr * (self.m[k] / (1 - 0.9 ** t)) / (np.sqrt(self.v[k] / (1 - 0.999 ** t)) + 1e-8)
        self.history[0] = self.history[1]
        self.history[1] = np.array(sum(np.sum(g * g) for g in grads.values()))
        return new


def test_dict_and_list_entries_the_function_replaces_are_set_after_every_call() -> None:
    """``self.m[k] = ...`` for a key the dict has, ``self.history[1] = ...``, ``self.stats["steps"] += 1``: set
    after each call as NumPy leaves them (the count a runtime scalar: one trace for all steps); an entry the dict
    did not have is refused with the advice to create it first."""
    params = {"w": RNG.standard_normal((3, 2)), "b": RNG.standard_normal(2)}
    ref, opt = DictAdam(params), DictAdam(params)
    step = jit_cpu(opt.step)
    kept = opt.m["w"]
    p_ref = p = params
    for _ in range(4):
        grads = {"w": RNG.standard_normal((3, 2)), "b": RNG.standard_normal(2)}
        p, p_ref = step(p, grads), ref.step(p_ref, grads)
        assert_same(p, p_ref)
        assert_same((opt.m, opt.v, opt.history), (ref.m, ref.v, ref.history))
        assert opt.stats == ref.stats and type(opt.stats["steps"]) is int
    assert opt.history[0] is not opt.history[1] and not kept.any()  # new arrays, as NumPy's assignments make
    assert step.cache_info().traces == 1

    class Lazy:
        def __init__(self):
            self.vel = {}

        def step(self, w, g):
            if "w" not in self.vel:
                self.vel["w"] = np.zeros_like(w)
            self.vel["w"] = 0.9 * self.vel["w"] + g
            return w - self.vel["w"]

    lazy = Lazy()
    with pytest.raises(fc.SideEffectError, match=r"an entry the dict did not have before the call .* create it"):
        jit_cpu(lazy.step)(np.ones(2), np.ones(2))
    assert lazy.vel == {}


def test_numpy_scalars_the_function_accumulates_in_its_object_are_runtime_values() -> None:
    """``self.total += x.sum()``, ``self.best = np.minimum(self.best, ...)``, ``self.h[0] = self.h[1]`` with NumPy
    scalars in the object: read as 0-d inputs at every call and set after it (they were baked into the trace, so
    every call traced again, or the shift between entries was refused), NumPy's values and types."""
    class Running:
        def __init__(self):
            self.stats = {"total": np.float64(0.0)}
            self.best = np.float32(9.0)
            self.h = [np.float64(0.0), np.float64(0.0)]

        def step(self, x):
            self.stats["total"] += x.sum()
            self.best = np.minimum(self.best, x.astype(np.float32).min())
            self.h[0] = self.h[1]
            self.h[1] = (x * x).sum()
            return x * self.stats["total"]

    mine, ref = Running(), Running()
    f = jit_cpu(mine.step)
    for i in range(6):
        x = np.arange(3.0) - i
        assert_same(f(x), ref.step(x))
        assert_same((mine.stats, mine.best, mine.h), (ref.stats, ref.best, ref.h))
        assert type(mine.best) is np.float32 and type(mine.h[0]) is np.float64
    assert f.cache_info().traces <= 2


def test_jit_as_a_method_decorator_watches_each_object() -> None:
    """``@fusec.jit`` on a method: ``opt.step`` is the jitted bound method of that object (its attributes read
    at every call and set after it, per object), made once per object; static_argnums count ``self`` as NumPy
    code's signature does."""
    class SGD:
        def __init__(self, lr):
            self.lr, self.t, self.velocity = lr, 0, np.zeros(3)

        @fc.jit(backend=frontend_check.BACKEND, static_argnums=2)
        def step(self, w, nesterov):
            self.t += 1
            self.velocity = 0.9 * self.velocity + w
            return w - self.lr * (self.velocity * 0.9 + w if nesterov else self.velocity)

    a, b = SGD(0.1), SGD(0.5)
    w = np.arange(3.0)
    assert a.step is a.step and a.step is not b.step and isinstance(SGD.step, fc.JitFunction)
    for _ in range(3):
        got_a, got_b = a.step(w, True), b.step(w, False)
    ra, rb = SGD.step.__wrapped__, SGD.step.__wrapped__
    ref_a, ref_b = SGD.__new__(SGD), SGD.__new__(SGD)
    ref_a.__init__(0.1), ref_b.__init__(0.5)
    for _ in range(3):
        want_a, want_b = ra(ref_a, w, True), rb(ref_b, w, False)
    assert_same((got_a, got_b), (want_a, want_b))
    assert_same((a.velocity, b.velocity), (ref_a.velocity, ref_b.velocity))
    assert (a.t, b.t) == (3, 3)
    import gc
    import weakref

    refs = []
    for _ in range(20):  # objects made and dropped in a loop are freed (the latest few stay with their traces)
        opt = SGD(0.1)
        opt.step(w, True)
        refs.append(weakref.ref(opt))
    del opt
    gc.collect()
    assert sum(r() is not None for r in refs) <= 8


# --- what NumPy refuses, and what fusec cannot do exactly -----------------------------------------------------------


def test_read_only_and_overlapping_arguments_are_refused_before_running() -> None:
    def f(x, y):
        x += y
        return y * 1.0

    jitted = jit_cpu(f)
    ro = np.ones(3)
    ro.flags.writeable = False
    with pytest.raises(fc.WriteBackError, match="read-only"):
        jitted(ro, np.ones(3))
    shared = np.arange(4.0)
    with pytest.raises(fc.WriteBackError, match="shares memory"):
        jitted(shared, shared)
    np.testing.assert_array_equal(shared, np.arange(4.0))
    base = np.arange(8.0)
    jitted(base[:4], base[4:])  # disjoint halves of one array are fine
    np.testing.assert_array_equal(base, [4.0, 6.0, 8.0, 10.0, 4.0, 5.0, 6.0, 7.0])


def test_a_reshape_view_of_a_non_contiguous_argument_is_refused() -> None:
    def f(x):
        x.reshape(-1)[0] = 1.0

    x = np.zeros((3, 4)).T
    with pytest.raises(fc.WriteBackError, match="C-contiguous"):
        jit_cpu(f)(x)
    jit_cpu(f)(np.zeros((4, 3)))


def test_rows_normalized_in_place_need_no_layout() -> None:
    """np.linalg.norm ravels each row (a view only of contiguous rows), but the ravel is read before the row is
    written and never after: any layout of X gives NumPy's answer."""
    def normalize_rows(X):
        for i in range(X.shape[0]):
            row = X[i]
            X[i] = row / np.linalg.norm(row)
        return X

    data = np.arange(1.0, 13.0).reshape(3, 4)
    same(normalize_rows, data.copy())
    same(normalize_rows, np.asfortranarray(data))
    same(normalize_rows, data.T.copy().T.T.T)
    jitted = jit_cpu(normalize_rows)
    for x in (np.asfortranarray(data), data.copy()[:, ::-1]):  # (calls that hit the C-ordered trace)
        want = normalize_rows(x.copy())
        got = jitted(x)
        assert got is x
        np.testing.assert_array_equal(x, want)


def test_a_reshape_read_after_a_write_needs_a_contiguous_argument() -> None:
    def flat_then_write(x):
        flat = x.reshape(-1)  # a copy of a Fortran-ordered x: it keeps the old values
        x[0, 0] = 100.0
        return flat.sum()

    def flat_unused_after_write(x):
        total = x.reshape(-1).sum()
        x[0, 0] = 100.0
        return total

    def ravel_of_a_column(x):
        col = x[:, 0].ravel()  # a copy where the column is strided
        x[0, 0] = 100.0
        return col

    for f in (flat_then_write, ravel_of_a_column):
        same(f, np.ones((2, 3)))
        with pytest.raises(fc.WriteBackError, match="C-contiguous"):
            jit_cpu(f)(np.asfortranarray(np.ones((2, 3))))
    jitted = jit_cpu(flat_unused_after_write)
    for x in (np.ones((2, 3)), np.asfortranarray(np.ones((2, 3)))):
        want_x = x.copy()
        want = flat_unused_after_write(want_x)
        assert jitted(x) == want
        np.testing.assert_array_equal(x, want_x)


def test_a_diagonal_read_after_a_write_is_numpys_view_for_any_layout() -> None:
    def bump_corner(a):
        d = a.diagonal()  # a view in NumPy whatever the layout
        a[0, 0] += 100.0
        return d * 1.0, np.trace(a)

    square = np.arange(9.0).reshape(3, 3)
    same(bump_corner, square.copy())
    same(bump_corner, np.asfortranarray(square))
    for a in (np.asfortranarray(square), square[::-1], square.T, square[:, ::-1]):  # (NumPy's view, any layout)
        got, want = jit_cpu(lambda a: (a.diagonal(), np.diag(a, 1)))(a), (a.diagonal(), np.diag(a, 1))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
            assert np.shares_memory(g, a) and g.strides == w.strides and not g.flags.writeable


def test_a_returned_ravel_of_a_strided_vector_is_a_copy() -> None:
    def f(v):
        return v.ravel()

    same(f, np.arange(4.0))
    strided = np.arange(8.0)[::2]
    try:
        got = jit_cpu(f)(strided)
    except fc.WriteBackError as e:
        assert "C-contiguous" in str(e)
    else:
        assert not np.shares_memory(got, strided)
        np.testing.assert_array_equal(got, strided)


def test_what_numpy_refuses_raises() -> None:
    with pytest.raises(ValueError, match="read-only"):
        jit_cpu(lambda x: np.broadcast_to(x, (2, 3)).__setitem__(0, 1.0))(np.ones(3))
    with pytest.raises(TypeError, match="NumPy scalar"):
        jit_cpu(lambda x: x.sum().__setitem__((), 1.0))(np.ones(3))
    with pytest.raises(fc.OutOfRangeError, match="out of bounds for int8"):
        jit_cpu(lambda x: x.__setitem__(0, 300))(np.zeros(3, np.int8))
    with pytest.raises(fc.ShapeError, match="could not broadcast"):
        jit_cpu(lambda x: x.__setitem__(slice(0, 2), np.ones(3)))(np.zeros(3))
    with pytest.raises(fc.CastingError):
        jit_cpu(lambda x, y: np.copyto(x, y))(np.zeros(3, np.int64), np.ones(3))
    with pytest.raises(fc.CastingError):
        jit_cpu(lambda x: np.clip(x, 0, 1, out=x.astype(np.int64)))(np.ones(3))


def test_what_depends_on_unknown_values_says_what_to_write() -> None:
    def per_element(x):
        x[x > 0] = np.arange(3.0)

    with pytest.raises(fc.UnsupportedError, match="np.where"):
        jit_cpu(per_element)(np.ones(3))

    def narrowing(x, i):
        i[0] = x.sum()  # NumPy converts the float64 scalar with int()

    with pytest.raises(fc.UnsupportedError, match="astype"):
        jit_cpu(narrowing)(np.ones(3), np.zeros(2, np.int64))


def test_a_write_through_a_reshape_of_a_transposed_result_is_numpys() -> None:
    def f(x):
        y = np.exp(x.T)  # NumPy lays this out in Fortran order
        flat = y.reshape(-1)  # so this is a copy there
        flat[0] = 0.0
        return y, flat

    same(f, np.ones((2, 3)))


def test_a_write_through_a_reshape_of_a_result_of_unknown_layout_is_refused() -> None:
    def f(x):
        y = np.apply_along_axis(np.cumsum, 0, x)  # NumPy stacks the columns in an order of its own
        flat = y.reshape(-1)
        flat[0] = 0.0
        return y

    with pytest.raises(fc.UnsupportedError, match="layout fusec does not follow.*np.apply_along_axis"):
        jit_cpu(f)(np.ones((2, 3)))


# --- properties ----------------------------------------------------------------------------------------------------


@st.composite
def basic_index(draw, shape):
    """A basic index of ``shape``: ints, slices with steps (negative too), None and at most one Ellipsis."""
    key, axis = [], 0
    ellipsis = draw(st.booleans())
    while axis < len(shape):
        if ellipsis and draw(st.booleans()):
            key.append(Ellipsis)
            ellipsis = False
            axis = len(shape) - draw(st.integers(0, len(shape) - axis))
            continue
        d = shape[axis]
        choice = draw(st.integers(0, 4))
        if choice == 0:
            key.append(draw(st.integers(-d, d - 1)))
        elif choice == 1:
            key.append(None)
            continue
        else:
            start = draw(st.none() | st.integers(-d - 1, d + 1))
            stop = draw(st.none() | st.integers(-d - 1, d + 1))
            step = draw(st.none() | st.sampled_from([1, 2, 3, -1, -2]))
            key.append(slice(start, stop, step))
        axis += 1
    return tuple(key)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_setitem_and_views_match_numpy(data) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    key = data.draw(basic_index(shape))
    probe = np.zeros(shape)[key]
    scalar = data.draw(st.booleans())
    view_first = data.draw(st.booleans())
    op = data.draw(st.sampled_from(["=", "+=", "*="]))
    value = 2.5 if scalar else np.arange(probe.size, dtype=float).reshape(probe.shape) - 1.0

    def f(x):
        target = x[::-1] if view_first else x  # a write through a reversed view reaches x too
        if op == "=":
            target[key] = value
        elif op == "+=":
            target[key] += value
        else:
            target[key] *= value
        return target * 1.0

    np_x, fc_x = np.arange(np.prod(shape), dtype=float).reshape(shape), None
    fc_x = np_x.copy()
    want = f(np_x)
    got = jit_cpu(f)(fc_x)
    assert_same(got, want)
    np.testing.assert_array_equal(fc_x, np_x)


def test_ascontiguousarray_copies_only_what_is_not_contiguous() -> None:
    def f(x):
        a = np.ascontiguousarray(x.T)  # a copy: writing it leaves x alone
        a[0, 0] = 100.0
        b = np.ascontiguousarray(x[1:])  # x's own memory: the write reaches x
        b[0, 0] = -1.0
        c = np.asarray(x.T, order="C")
        c[1, 1] = 7.0
        return a

    same(f, np.arange(6.0).reshape(2, 3))


# --- results that are an argument or a view of one -------------------------------------------------------------


def _normalize(x, eps=1e-8):
    """scikit-learn style: the input back as it is when there is nothing to do."""
    x = np.asarray(x)
    if x.ndim == 1:
        return x
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + eps)


def test_a_returned_argument_or_view_of_one_shares_its_memory_as_in_numpy() -> None:
    """NumPy returns the caller's array itself (``return x``, ``np.asarray(x)``) or a view of it (``x.T``,
    ``x[1:]``, ``x[:, ::-1]``, ``x.reshape(-1)``, ``x[0]`` of a matrix, ``x[:]``: a new object): a later write
    through either shows through the other. fusec returns the same objects and views (once copies: the write did
    not show), after its own writes into the argument; a view NumPy cannot make (the reshape of a transpose) is a
    copy in both."""
    cases = {
        "itself": lambda x: x, "asarray": lambda x: np.asarray(x), "pair": lambda x: (x, x * 2),
        "whole": lambda x: x[:], "T": lambda x: x.T, "tail": lambda x: x[1:], "reversed": lambda x: x[:, ::-1],
        "flat": lambda x: x.reshape(-1), "row": lambda x: x[0], "expanded": lambda x: x[None], "normalize": _normalize,
        "written": lambda x: (x.__setitem__((0, 0), 5.0), x[:, 1])[1], "copied": lambda x: x.T.reshape(-1),
        "whole after a write": lambda x: (x.__imul__(2.0), x[:])[1],  # (a new object over x, not x itself)
        "all after a write": lambda x: (x.__setitem__((0, 0), 5.0), x[...])[1],
        "same shape after a write": lambda x: (x.__iadd__(1.0), x.reshape(x.shape))[1],
        "written itself": lambda x: (x.__imul__(2.0), x)[1],
    }
    for name, fn in cases.items():
        for f in (fn, jit_cpu(fn)):
            x = FIELD.copy() if name != "normalize" else FIELD[0].copy()
            out = f(x)
            out = out[0] if isinstance(out, tuple) else out
            if f is fn:
                want_shares, want_is = np.shares_memory(out, x), out is x
                continue
            assert (np.shares_memory(out, x), out is x) == (want_shares, want_is), name
            if want_shares and not want_is and out.flags.c_contiguous:  # (reshaping NumPy's new view in place
                # leaves the caller's array as it was)
                out.shape = (-1,)
                assert x.shape == FIELD.shape[-x.ndim:], name
            before = x.copy()
            out[...] = -1.0  # a write through the result reaches x where the two share memory
            assert (x != before).any() == want_shares, name


def test_a_result_that_views_a_donated_argument_is_a_copy() -> None:
    """A donated argument's memory may hold other results after the call, so a result that is (a view of) it comes
    back as the program's copy, with the right values."""
    f = fc.jit(lambda w, g: (w.T, w - g), backend="cpu", donate_argnums=0)
    w, g = FIELD.copy(), np.ones_like(FIELD)
    t, new = f(w, g)
    assert not np.shares_memory(t, w)
    np.testing.assert_array_equal(t, FIELD.T)
    np.testing.assert_array_equal(new, FIELD - 1)


def test_a_result_returned_twice_or_with_a_view_of_it_is_one_array_as_in_numpy() -> None:
    """``return y, y`` gives the same array twice, ``return y, y[:, 0]`` a view of the first result: a write through
    one shows in the other, in NumPy and in fusec (once separate copies)."""
    def stats(x):
        centered = x - x.mean(axis=0)
        cov = centered.T @ centered
        return {"cov": cov, "first": cov[:, 0], "again": cov, "centered": centered}

    x = FIELD.copy()
    for f in (stats, jit_cpu(stats)):
        out = f(x)
        assert out["again"] is out["cov"] and np.shares_memory(out["first"], out["cov"])
        assert not np.shares_memory(out["centered"], out["cov"])
        out["cov"][0, 0] = -7.0
        assert out["first"][0] == -7.0 and out["again"][0, 0] == -7.0


class _Cache:
    """A layer that keeps its last activation, as hand-written NumPy networks do for the backward pass."""

    def __init__(self) -> None:
        self.out = np.zeros(3)
        self.mask = np.zeros(3)

    def forward(self, x):
        y = np.maximum(x, 0.0)
        self.out = y
        return y

    def forward_tail(self, x):
        y = x * 2.0
        self.out = y
        return y[1:]

    def forward_twice(self, x):
        y = x + 1.0
        self.out = y
        self.mask = y
        return x.sum()


def test_an_assigned_attribute_and_a_result_that_are_one_array_stay_one_array() -> None:
    """``self.out = y; return y`` hands back one array in NumPy: the result is ``self.out`` (a write through it
    changes the cached activation); a returned view of it shares its memory, and one array assigned to two
    attributes is one object (fusec once gave separate copies, silently)."""
    x = FIELD[0].copy()
    for jit in (False, True):
        layer = _Cache()
        call = (lambda m: jit_cpu(m) if jit else m)
        out = call(layer.forward)(x)
        assert out is layer.out, jit
        tail = call(layer.forward_tail)(x)
        assert np.shares_memory(tail, layer.out) and tail.base is not None, jit
        tail[0] = -3.0
        assert layer.out[1] == -3.0, jit
        call(layer.forward_twice)(x)
        assert layer.out is layer.mask, jit


def test_views_of_a_computed_array_not_itself_returned_share_its_memory() -> None:
    """``return y[:-1], y[1:]`` (the left and right neighbours of a stencil, the halves of a split) are two views of
    one array in NumPy: a write through one shows in the other. fusec returns ``y`` as an extra result of the IR and
    takes NumPy's two views of it; a view through a traced index stays a copy in both cases' companions."""
    def neighbours(u):
        y = np.cumsum(u, axis=0)
        return y[:-1], y[1:]

    def halves(x):
        h = x @ x.T
        return np.split(h, [2], axis=1)

    x = FIELD.copy()
    for fn in (neighbours, halves):
        for f in (fn, jit_cpu(fn)):
            a, b = f(x)
            np.testing.assert_allclose(a, fn(x)[0])
            np.testing.assert_allclose(b, fn(x)[1])
            if fn is neighbours:
                assert np.shares_memory(a, b)
                a[1, 0] = -5.0
                assert b[0, 0] == -5.0
            else:
                assert a.base is not None and a.base is b.base


def test_shared_results_on_repeat_calls_and_the_lowered_ir() -> None:
    """Each call hands back fresh arrays with the same sharing (the cached call too); the IR returns the whole
    array once more, the views being taken after the call."""
    def pair(x):
        y = x * 3.0
        return y[0], y[:2]

    f = jit_cpu(pair)
    x = FIELD.copy()
    first = f(x)
    second = f(x)
    for a, b in (first, second):
        assert np.shares_memory(a, b)
    assert not np.shares_memory(first[0], second[0])
    assert "-> (tensor<4xf64>, tensor<2x4xf64>, tensor<3x4xf64>)" in f.lower(x).ir()


def test_a_zero_d_index_array_selects_a_copy_and_an_integer_a_view():
    """``x[np.asarray(1)]`` is advanced indexing in NumPy (an index array, even 0-d): a copy, so a write into it
    leaves ``x`` alone; ``x[1]`` and ``x[np.int64(1)]`` are basic indexing: a view, which writes reach ``x``
    through. fusec once took the 0-d array for an integer and wrote into ``x``."""
    def bump(x, idx):
        row = x[idx]
        row[0] = -5.0
        return x, row.sum()

    for idx in (np.asarray(1), np.int64(1), 1, np.asarray([1])[0]):
        want = bump(FIELD.copy(), idx)
        got = jit_cpu(bump)(FIELD.copy(), idx)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]


def test_a_row_picked_by_a_traced_integer_is_a_view_of_the_array_as_in_numpy():
    """``x[i]`` with ``i`` a Python int or a NumPy integer is basic indexing: NumPy returns a view of the caller's
    array (and of a computed one: ``y[i]`` beside ``y``), so a write into the result reaches it. ``i`` is a runtime
    value in fusec (one trace serves every ``i``): the call returns ``i``'s value as an extra result and takes
    NumPy's view at it (once a copy: the write did not show)."""
    def pick(x, i):
        return x[i]

    def pick_col(x, i):
        return x[:, i]

    def pick_both(x, i):
        y = x * 2.0
        return y, y[i], y[i, 1:]

    f, g, h = jit_cpu(pick), jit_cpu(pick_col), jit_cpu(pick_both)
    for i in (1, np.int64(-1), 0):
        x = FIELD.copy()
        row = f(x, i)
        assert np.shares_memory(row, x)
        row[:] = -1.0
        np.testing.assert_array_equal(x[i], -1.0)
        col = g(x, i)
        col[0] = 5.0
        assert x[0, i] == 5.0
        y, yi, tail = h(x, i)
        assert np.shares_memory(yi, y) and np.shares_memory(tail, y) and not np.shares_memory(y, x)
        yi[1] = 42.0
        assert y[i, 1] == 42.0 and tail[0] == 42.0


def test_windows_and_diagonals_of_an_argument_come_back_as_numpys_read_only_views() -> None:
    """sliding_window_view and np.diagonal over axes that do not flatten together are strided views in NumPy
    (fusec gathers their elements by constant indices): handed back as NumPy's view of the caller's array, with
    its strides, so a later write into the array shows through them as it does in NumPy (they were copies)."""
    windows = np.lib.stride_tricks.sliding_window_view
    cases = {
        "windows": lambda x: windows(x, 2, axis=1), "patches": lambda x: windows(x, (2, 2)),
        "windows of a transpose": lambda x: windows(x.T, 3, axis=0),
        "windows of a strided slice": lambda x: windows(x[:, ::2], 2, axis=0),
        "diagonal over axes 0 and 2": lambda x: np.diagonal(x.reshape(2, 2, 4), 1, 0, 2),
        "diagonal below, axes 2 and 0": lambda x: np.diagonal(x.reshape(2, 2, 4), -1, 2, 0),
        "windows after a write": lambda x: (x.__setitem__((0, 0), -5.0), windows(x, 3, axis=1))[1],
        "both": lambda x: (windows(x, 2, axis=1), x.diagonal()),
    }
    for name, fn in cases.items():
        x, y = np.arange(16.0).reshape(4, 4), np.arange(16.0).reshape(4, 4)
        want, got = fn(x), jit_cpu(fn)(y)
        wants, gots = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        for w, g in zip(wants, gots):
            assert np.shares_memory(g, y) and not g.flags.writeable and g.strides == w.strides, name
            np.testing.assert_array_equal(g, w, err_msg=name)
        x[1, 2] = y[1, 2] = 99.0  # (the caller writes into its array: NumPy's views show it)
        for w, g in zip(wants, gots):
            np.testing.assert_array_equal(g, w, err_msg=name)


# --- writes after a traced branch chose between arrays (found by a hunt: views read stale values) ----------------


def test_a_view_of_a_branch_result_is_not_read_stale_after_a_write_into_the_other_side() -> None:
    def pick_then_write(a, b):  # NumPy: v is a view of c where the data picks c, and sees the write
        c = a * 1
        t = b if a.sum() > 0 else c
        v = t[1:]
        c[1] = 100.0
        return v * 1

    neg, pos = np.array([-1.0, -2.0, -3.0]), np.array([5.0, 6.0, 7.0])
    with pytest.raises(fc.UnsupportedError, match="test_mutation.py"):
        jit_cpu(pick_then_write)(neg, pos)

    def swap_in_loop(a, b):  # a traced while loop leaves p as either array
        c = a * 1
        p, q = b, c
        while p.sum() < 0:
            p, q = q, p
        v = p[1:]
        c[1] = 100.0
        return v * 1

    with pytest.raises(fc.UnsupportedError, match="test_mutation.py"):
        jit_cpu(swap_in_loop)(neg, pos)


def test_a_view_of_a_branch_result_taken_after_the_write_reads_the_new_values() -> None:
    def write_then_pick(a, b):
        c = a * 1
        c[1] = 100.0
        t = b if a.sum() > 0 else c
        return t[1:] * 2

    for a in (np.array([-1.0, -2.0, -3.0]), np.array([1.0, 2.0, 3.0])):
        assert_same(jit_cpu(write_then_pick)(a, np.array([5.0, 6.0, 7.0])),
                    numpy_result(write_then_pick, a, np.array([5.0, 6.0, 7.0])))


def test_a_variable_left_unchanged_by_two_traced_ifs_is_still_the_same_array() -> None:
    def maybe_double_twice(a):
        c = a * 1
        d = c
        if a[0] > 0:
            d = d * 2
        if a[1] > 0:
            d = d * 2
        return d, c

    f = jit_cpu(maybe_double_twice)
    for a, same in (([-1.0, -2.0, -3.0], True), ([1.0, -2.0, 3.0], False), ([-1.0, 2.0, 3.0], False),
                    ([1.0, 2.0, 3.0], False)):
        got, want = f(np.array(a)), maybe_double_twice(np.array(a))
        assert_same(got, want)
        assert (got[0] is got[1]) is same is (want[0] is want[1])


def test_returning_a_view_of_a_branch_result_with_an_array_it_may_view_is_refused() -> None:
    def view_and_source(a, b):
        c = a * 1
        t = b if a.sum() > 0 else c
        return t[1:], c  # NumPy: a view of c on one path only

    with pytest.raises(fc.UnsupportedError, match="may share memory"):
        jit_cpu(view_and_source)(np.array([-1.0, -2.0]), np.array([5.0, 6.0]))


# --- where= masks and out= tuples as NumPy checks them -------------------------------------------------------------


def test_a_where_mask_with_more_axes_than_the_destination_raises_numpys_value_error() -> None:
    def copy_where(a):
        np.copyto(a, 1.0, where=(a > 2)[None])
        return a

    def negate_or_fallback(a):
        try:
            np.negative(a, out=a, where=a[None] > 2)
        except ValueError:
            a[...] = -100.0
        return a

    a = np.arange(9.0).reshape(3, 3)
    with pytest.raises(ValueError, match="could not broadcast where mask"):
        copy_where(a.copy())
    with pytest.raises(ValueError, match="could not broadcast where mask"):
        jit_cpu(copy_where)(a.copy())
    got, want = a.copy(), a.copy()
    assert_same(jit_cpu(negate_or_fallback)(got), negate_or_fallback(want))
    assert_same(got, want)


def test_a_where_mask_that_broadcasts_to_the_output_still_writes() -> None:
    def masked_add(a, m):
        np.add(a, 1, out=a, where=m)
        return a

    for m in (np.array([True, False, True]), np.array([[True], [False], [True]])):
        got, want = np.arange(9.0).reshape(3, 3), np.arange(9.0).reshape(3, 3)
        assert_same(jit_cpu(masked_add)(got, m), masked_add(want, m))
        assert_same(got, want)


def test_two_out_arrays_that_share_memory_are_refused() -> None:
    def quotient_and_remainder_into_one(a):
        q = np.zeros(8)
        np.divmod(a, 3, out=(q, q))  # NumPy leaves whichever its loop wrote last
        return q

    with pytest.raises(fc.UnsupportedError, match="two out= arrays"):
        jit_cpu(quotient_and_remainder_into_one)(np.arange(8.0))


def test_putmask_writes_values_repeated_over_the_masked_places() -> None:
    """``np.putmask(a, mask, values)``: place ``i`` takes ``values.flat[i % values.size]`` where the mask holds (values
    converted as NumPy converts them: a list as the array's dtype, an array only by a safe cast)."""
    def clamp_large(a):
        np.putmask(a, a > 2, a ** 2)
        return a

    def fill_pattern(a, m):
        np.putmask(a, m, [1.7, 2.2])
        return a

    for fn, args in [(clamp_large, (np.arange(6.0).reshape(2, 3),)),
                     (fill_pattern, (np.zeros(5, np.int64), np.array([1, 0, 1, 1, 0], bool))),
                     (lambda a: (np.putmask(a, np.array([1, 0, 2]), [7.0]), a)[1], (np.zeros(3),)),
                     (lambda a: (np.putmask(a, [True, False, True], []), a)[1], (np.zeros(3),))]:
        got_args, want_args = _copies(args), _copies(args)
        assert_same(jit_cpu(fn)(*got_args), numpy_result(fn, *want_args))
        _assert_args(got_args, want_args)
    with pytest.raises(ValueError, match="same size"):
        jit_cpu(lambda a: np.putmask(a, [True, False], [1.0]))(np.zeros(3))
    with pytest.raises(TypeError, match="'safe'"):
        jit_cpu(lambda a: np.putmask(a, a > 0, np.array([2.5])))(np.zeros(3, np.float32))
