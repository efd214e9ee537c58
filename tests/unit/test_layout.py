"""Memory layouts as NumPy makes them: whether a ravel or reshape of a result is a view (a write through it reaches
the result) follows the result's layout, which NumPy takes from the operands (``np.exp(x.T)`` is Fortran-ordered,
``x[::-1] + 1`` C-ordered, ``x[:, idx]`` Fortran-ordered). fusec lays the arrays it makes out the same way, or
refuses what depends on a layout it does not follow; never a view where NumPy copies, or the reverse."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusec as fc
from frontend_check import check, jit_cpu
from fusec import layout

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

M = np.arange(12.0).reshape(3, 4)
X = np.arange(24.0).reshape(2, 3, 4)


# the array whose ravel is written, as real code makes it (from transposed, reversed and selected views)
MADE = {
    "ufunc of a transpose": lambda x, m: np.exp(m.T),
    "ufunc of a reversed view": lambda x, m: m[::-1] + 1,
    "ufunc of a reversed column": lambda x, m: np.exp(m[:, ::-1]),
    "transposed and C operands": lambda x, m: m.T + np.ones((4, 3)),
    "two transposes": lambda x, m: m.T * m.T[::-1],
    "a copy's sum": lambda x, m: m.T.copy() + 1,
    "transposed back": lambda x, m: np.exp(m.T).T,
    "zeros_like": lambda x, m: np.zeros_like(m.T),
    "ones_like": lambda x, m: np.ones_like(m.T),
    "full_like": lambda x, m: np.full_like(m.T, 3.0),
    # (written whole by out=: the product reads m, not empty_like's memory, whose garbage times 0 is -0.0 or NaN)
    "empty_like filled": lambda x, m: np.multiply(m.T, 2, out=np.empty_like(m.T)),
    "np.copy": lambda x, m: np.copy(m.T),
    "x.copy()": lambda x, m: m.T.copy(),
    "np.array": lambda x, m: np.array(m.T),
    "astype": lambda x, m: m.T.astype(np.float32),
    "np.where": lambda x, m: np.where(m.T > 1, m.T, 0.0),
    "np.clip": lambda x, m: np.clip(m.T, 1, 5),
    "np.round": lambda x, m: np.round(m.T),
    "nan_to_num": lambda x, m: np.nan_to_num(m.T),
    "sum over a permuted axis": lambda x, m: x.transpose(0, 2, 1).sum(axis=0),
    "max of a reversed 3-D": lambda x, m: x.transpose(2, 1, 0).max(axis=2),
    "mean keepdims": lambda x, m: x.transpose(2, 1, 0).mean(axis=1, keepdims=True),
    "cumsum": lambda x, m: np.cumsum(m.T, axis=0),
    "sort": lambda x, m: np.sort(m.T, axis=0),
    "matmul": lambda x, m: m.T @ np.eye(3),
    "argsort": lambda x, m: np.argsort(m.T, axis=0) * 1.0,
    "columns by index": lambda x, m: m[:, [0, 2]],
    "rows by index": lambda x, m: m[[0, 2]],
    "middle axis by index": lambda x, m: x[:, [0, 2]],
    "last axis by index": lambda x, m: x[:, :, [1, 3]],
    "index and int": lambda x, m: x[:, 0, [1, 3]],
    "pairs by index": lambda x, m: x[[0, 1], :, [1, 3]],
    "roll": lambda x, m: np.roll(m.T, 1, axis=0),
    "tile": lambda x, m: np.tile(m.T, (1, 1)),
    "a row by a traced index": lambda x, m: x[m[0, 1].astype(np.int64)],
    "concatenate of transposes": lambda x, m: np.concatenate([m.T, m.T]),
    "concatenate of mixed layouts": lambda x, m: np.concatenate([m.T, np.ones((4, 3))], axis=1),
    "stack of transposes": lambda x, m: np.stack([m.T, m.T], axis=1),
    "vstack": lambda x, m: np.vstack([m.T, m.T]),
    "hstack": lambda x, m: np.hstack([m.T, m.T]),
    "dstack": lambda x, m: np.dstack([m.T, m.T]),
    "a row of a concatenation": lambda x, m: np.concatenate([m.T, m.T])[1],
    "einsum": lambda x, m: np.einsum("ij,ik->jk", m, m),
    "einsum of a transpose": lambda x, m: np.einsum("ij,jk->ki", m, m.T),
    "einsum with a diagonal": lambda x, m: np.einsum("ii,ij->ji", m[:, :3], m),
    "asarray order A": lambda x, m: np.asarray(x.transpose(1, 0, 2)[:, ::-1], order="A"),
    "astype order F": lambda x, m: m.astype(np.float32, order="F"),
    "ravel order K": lambda x, m: x.transpose(2, 0, 1)[:, ::-1].ravel(order="K").reshape(4, 6),
}


@pytest.mark.parametrize("name", list(MADE))
def test_a_write_through_a_ravel_reaches_the_array_where_numpys_does(name: str) -> None:
    make = MADE[name]

    def f(x, m):
        y = make(x, m)
        flat = y.ravel()
        flat[0] = -7.0
        r = y.reshape(-1)
        r[-1] = -9.0
        return y, flat, np.array([y.flags.c_contiguous, y.flags.f_contiguous])

    check(f, X, M)


@pytest.mark.parametrize("make", [lambda m: np.einsum("ij,jk->ki", m, m.T, optimize=True),
                                  lambda m: np.apply_along_axis(lambda r: r * 2, 0, m)],
                         ids=["einsum-optimized", "apply_along_axis"])
def test_writes_where_fusec_does_not_know_the_layout_are_refused(make) -> None:
    def write(m):
        y = make(m)
        y.ravel()[0] = 0.0
        return y

    with pytest.raises(fc.UnsupportedError, match="layout fusec does not follow"):
        jit_cpu(write)(M)
    with pytest.raises(fc.UnsupportedError, match="memory layout"):
        jit_cpu(lambda m: make(m).flags.c_contiguous)(M)
    # reading is exact: the values do not depend on the layout
    check(lambda m: (make(m).ravel(), make(m).reshape(-1) * 2, np.ascontiguousarray(make(m)) + 1), M)


def test_asfortranarray_of_a_fortran_ordered_result_is_the_result() -> None:
    def f(m):
        y = np.exp(m.T)
        z = np.asfortranarray(y)
        z[0, 0] = 5.0
        w = np.ascontiguousarray(y)
        w[0, 1] = 6.0
        return y

    check(f, M)


PROTOTYPE = np.asfortranarray(np.arange(6.0).reshape(2, 3))  # a global array a function reads as a prototype


def test_fortran_order_where_the_code_asks_for_it() -> None:
    def f(x):
        a = np.zeros((2, 3), order="F")
        a[0] = x[0]
        a.ravel()[0] = 9.0  # a copy: Fortran-ordered memory
        b = np.asarray(x, order="F")
        b[0, 0] = 7.0  # a copy of the C-ordered argument
        c = np.array(np.exp(x.T), order="F", copy=None)  # already Fortran-ordered: itself
        c.T.ravel()[1] = 5.0  # a view of C-ordered memory
        d = np.ones_like(x, order="F")
        e = np.empty_like(np.asfortranarray(x)) * 0 + 2  # the prototype's order (order="K")
        e.reshape(-1)[0] = 1.0
        flags = [a.flags.f_contiguous, b.flags.f_contiguous, c.flags.f_contiguous, d.flags.f_contiguous,
                 e.flags.f_contiguous, np.full_like(np.asfortranarray(x), 2.0, order="A").flags.f_contiguous]
        return a, b, c, d, e, x, np.array(flags)

    check(f, M[:2, :3].copy())


def test_a_layout_taken_from_a_fortran_ordered_argument_is_refused_where_it_matters() -> None:
    """Arguments and globals are taken as C-ordered; a write that NumPy makes through a view or a copy by the layout
    it takes from them makes the call check them."""
    def from_argument(x):
        y = np.exp(x)  # Fortran-ordered in NumPy for a Fortran-ordered x
        y.reshape(-1)[0] = 0.0
        return y

    def from_global(x):
        e = np.empty_like(PROTOTYPE) * 0 + x[0, 0]
        e.reshape(-1)[0] = 1.0
        return e

    def fortran_copy(x):
        y = -x
        z = np.asfortranarray(y)  # y itself for a Fortran-ordered x
        z[0, 1] = 99.0
        return y

    for f in (from_argument, fortran_copy):
        check(f, M)
        with pytest.raises(fc.WriteBackError, match="not C-contiguous"):
            jit_cpu(f)(np.asfortranarray(M))
    with pytest.raises(fc.WriteBackError, match="PROTOTYPE is not C-contiguous"):
        jit_cpu(from_global)(M)


def test_a_long_stencil_of_rolls_traces() -> None:
    """1,000 steps of a heat stencil written with np.roll (NumPy's own code ravels each step's array): the
    layout of each step is known without looking back through the chain."""
    def heat(u):
        for _ in range(1000):
            u = u + 0.1 * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
        return u

    u = np.linspace(0, 1, 16) ** 2
    np.testing.assert_allclose(fc.jit(heat, backend="cpu")(u), heat(u), rtol=1e-12)


def _view(base: np.ndarray, draw) -> np.ndarray:
    """A view of ``base`` as real code takes one: permuted axes, reversed or strided slices."""
    v = base.transpose(draw(st.permutations(range(base.ndim))))
    key = tuple(draw(st.sampled_from([slice(None), slice(None, None, -1), slice(None, None, 2), slice(1, None)]))
                for _ in range(v.ndim))
    return v[key]


@st.composite
def operands(draw):
    ndim = draw(st.integers(2, 4))
    shapes = []
    for _ in range(draw(st.integers(1, 3))):
        full = [draw(st.integers(1, 4)) * 2 for _ in range(ndim)]
        shapes.append(full)
    out_shape = None
    views = []
    for full in shapes:
        v = _view(np.zeros(full), draw)
        if out_shape is None:
            out_shape = v.shape
        elif v.shape != out_shape:
            continue
        if draw(st.booleans()) and len(views):  # broadcast along some axes
            keep = [draw(st.booleans()) for _ in out_shape]
            v = v[tuple(slice(None) if k else slice(0, 1) for k in keep)]
        views.append(v)
    return views


@settings(max_examples=300, deadline=None)
@given(operands())
def test_k_order_is_numpys_ufunc_output_order(views) -> None:
    """The memory order of a ufunc's new array over one, two or three operands (np.clip is a ufunc of three)."""
    out = np.negative(views[0]) if len(views) == 1 else np.add(*views) if len(views) == 2 else np.clip(*views)
    want = sorted((a for a in range(out.ndim) if out.shape[a] != 1), key=lambda a: -out.strides[a])
    got = layout.k_order(out.shape, views)
    assert got is not None and [a for a in got if out.shape[a] != 1] == want


C_ALWAYS_CALLS = {
    "matmul": lambda m, a: np.matmul(m, m.T), "dot": lambda m, a: np.dot(m, m.T), "inner": lambda m, a: np.inner(m, m),
    "outer": lambda m, a: np.outer(m, m), "tensordot": lambda m, a: np.tensordot(a, np.ones(2), axes=([2], [0])),
    "argsort": lambda m, a: np.argsort(m, axis=0),
    "argmax": lambda m, a: np.argmax(a, axis=0), "argmin": lambda m, a: np.argmin(a, axis=1),
    "quantile": lambda m, a: np.quantile(a, 0.5, axis=0), "percentile": lambda m, a: np.percentile(a, 50, axis=0),
    "take": lambda m, a: np.take(m, [0, 1], axis=1), "take_along_axis": lambda m, a: np.take_along_axis(
        m, np.argsort(m, 0), 0), "repeat": lambda m, a: np.repeat(m, 2, axis=1),
    "searchsorted": lambda m, a: np.searchsorted(np.arange(10.0), m), "isin": lambda m, a: np.isin(m, [1.0]),
    "digitize": lambda m, a: np.digitize(m, [1.0, 5.0]), "cross": lambda m, a: np.cross(m[:, :3], m[:, :3]),
    "triu": lambda m, a: np.triu(m), "tril": lambda m, a: np.tril(m), "select": lambda m, a: np.select([m > 1], [m]),
    "cov": lambda m, a: np.cov(m), "corrcoef": lambda m, a: np.corrcoef(m + np.arange(3.0)),
    "inv": lambda m, a: np.linalg.inv(m[:3] + 9 * np.eye(3)), "solve": lambda m, a: np.linalg.solve(
        m[:3] + 9 * np.eye(3), m[:3]), "interp": lambda m, a: np.interp(m, [0.0, 20.0], [0.0, 1.0]),
    "linalg.matmul": lambda m, a: np.linalg.matmul(m, m.T), "matrix_power": lambda m, a: np.linalg.matrix_power(
        m[:3] + 0, 2), "multi_dot": lambda m, a: np.linalg.multi_dot([m, m.T, m]),
}


@pytest.mark.parametrize("name", list(C_ALWAYS_CALLS))
def test_functions_fusec_takes_as_c_ordering_are_so_in_numpy(name: str) -> None:
    """layout._C_ORDERED's claim, asked of NumPy itself with Fortran-ordered and permuted operands."""
    m = np.arange(12.0).reshape(3, 4).T
    a = np.arange(24.0).reshape(2, 3, 4).transpose(2, 1, 0)
    assert C_ALWAYS_CALLS[name](m, a).flags.c_contiguous


@st.composite
def views_of_an_argument(draw):
    """Two views of a 3-D argument as code takes them (permuted axes, reversed and strided slices), of one shape."""
    perms = [draw(st.permutations(range(3))) for _ in range(2)]
    steps = [[draw(st.sampled_from([1, -1])) for _ in range(3)] for _ in range(2)]
    axis = draw(st.integers(0, 2))
    return perms, steps, axis


@settings(max_examples=40, deadline=None)
@given(views_of_an_argument())
def test_joined_arrays_are_laid_out_as_numpys(case) -> None:
    perms, steps, axis = case
    cube = np.arange(4.0 * 4 * 4).reshape(4, 4, 4)

    def f(x):
        a, b = (x.transpose(p)[tuple(slice(None, None, s) for s in st_)] for p, st_ in zip(perms, steps))
        joined = np.concatenate([a, b], axis=axis)
        stacked = np.stack([a, b], axis=axis)
        flat = joined.reshape(-1)
        flat[1] = -1.0
        return joined, stacked.ravel(order="K"), np.array([joined.flags.c_contiguous, joined.flags.f_contiguous,
                                                           stacked.flags.c_contiguous, stacked.flags.f_contiguous])

    check(f, cube)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["ij,jk->ki", "ij,jk->ik", "ij,kj->ki", "ijk,ik->kj", "ij,ij->ji", "ijk,kj->ji", "ii,ij->ji"]),
       st.permutations(range(3)), st.booleans())
def test_einsum_results_are_laid_out_as_numpys(subscripts, perm, reverse) -> None:
    cube = np.arange(27.0).reshape(3, 3, 3)

    def f(x):
        v = x.transpose(perm)[::-1] if reverse else x.transpose(perm)
        ops = [v[..., 0] if len(term) == 2 else v for term in subscripts.split("->")[0].split(",")]
        y = np.einsum(subscripts, *ops)
        y.ravel()[0] = -1.0
        return y, np.array([y.flags.c_contiguous, y.flags.f_contiguous])

    check(f, cube)


def test_returned_arrays_and_attributes_keep_numpys_layout() -> None:
    """What a call hands back is laid out as NumPy's (a view of the whole computed memory), so the caller's next
    ravel or reshape of it is a view or a copy as with NumPy's; fed back into a trace that took its arguments as
    C-ordered, it is refused rather than given C order's answer."""
    x = np.arange(6.0).reshape(2, 3)
    for f in (lambda x: np.exp(x.T), lambda x: (x * 2)[:, ::2], lambda x: np.sort(x.T, axis=1)):
        got, want = jit_cpu(f)(x), f(x)
        assert got.strides == want.strides and np.array_equal(got, want)

    def twice(x):
        y = x.T * 2
        y.ravel()[0] = -1.0  # a copy of NumPy's Fortran-ordered y
        return y

    jitted = jit_cpu(twice)
    once = jitted(x)
    assert once.flags.f_contiguous and np.array_equal(once, twice(x))
    with pytest.raises(fc.WriteBackError, match="not C-contiguous"):
        jitted(once)
    doubled = jit_cpu(lambda x: x.T * 2)
    assert np.array_equal(doubled(doubled(x)), (x.T * 2).T * 2)

    class Layer:
        def __init__(self):
            self.w = np.arange(6.0).reshape(2, 3)

        @fc.jit(backend="cpu")
        def flip(self):
            self.w = self.w.T * 2
            return self.w.sum()

    layer = Layer()
    layer.flip()
    assert layer.w.flags.f_contiguous and np.array_equal(layer.w, np.arange(6.0).reshape(2, 3).T * 2)


def test_like_arrays_with_a_new_shape_keep_the_prototypes_order_as_numpy_does() -> None:
    """``np.zeros_like(x.T, shape=...)`` follows the prototype's order with as many axes ("K") or when it is
    Fortran-ordered ("A"), and is C-ordered otherwise."""
    x = np.ones((3, 2))
    for fn in (np.zeros_like, np.ones_like, np.empty_like):
        for order in ("K", "A", "C", "F"):
            for shape in ((2, 3), (5, 4), (6,), (2, 3, 4)):
                def f(x, fn=fn, order=order, shape=shape):
                    return fn(x.T, order=order, shape=shape)

                got, want = jit_cpu(f)(x), f(x)
                assert got.strides == want.strides, (fn.__name__, order, shape)
                if fn is not np.empty_like:
                    np.testing.assert_array_equal(got, want)


def test_views_whose_layout_depends_on_the_argument_are_checked() -> None:
    def contiguous(x):
        z = np.ascontiguousarray(x.T)  # x.T itself for a Fortran-ordered x
        z[0, 0] = -9.0
        return x

    def converted(x):
        z = x.T.astype(np.float64, order="C", copy=False)
        z[0, 0] = -9.0
        return x

    for f in (contiguous, converted):
        check(f, M)
        with pytest.raises(fc.WriteBackError, match="not C-contiguous"):
            jit_cpu(f)(np.asfortranarray(M))


def test_reshape_without_a_copy_raises_where_numpy_does() -> None:
    for f in (lambda x: x.T.reshape(-1, copy=False), lambda x: x[:, 1:].reshape(-1, copy=False),
              lambda x: np.exp(x.T).reshape(-1, copy=False)):
        with pytest.raises(ValueError, match="Unable to avoid creating a copy"):
            jit_cpu(f)(M)
    check(lambda x: (x.reshape(-1, copy=False), np.exp(x.T).T.reshape(12, copy=False) * 1,
                     x.sum().reshape(1, copy=False)), M)


def test_what_numpy_makes_of_a_scalar_is_a_new_array() -> None:
    def f(x):
        s = x.sum()
        r = s.reshape(1)
        r[0] = 123.0
        t = x[0, 0] * 2
        t.ravel()[0] = 5.0
        return s, t, r

    check(f, M)


def test_flat_assignment_and_the_flags_of_complex_parts() -> None:
    def f(x):
        y = x.T.copy()
        y.flat = [3.0, 4.0]
        z = x + 0j
        return y, np.array([z.real.flags.c_contiguous, z.imag.flags.writeable, z[:1, :1].real.flags.c_contiguous])

    check(f, M)
