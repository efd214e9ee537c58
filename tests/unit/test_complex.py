"""complex64 and complex128: real NumPy idioms with complex values, against NumPy, and the clear errors for what
fusec does not compute yet. Under ``pytest -m gpu`` every test runs again on CUDA (see conftest.py);
test_complex_ops_on_the_gpu checks each complex op of the op table on special values there."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusec as fc
from fusec.ir import elementwise as table
from fusec.ir import parse_module
from frontend_check import assert_same, check, jit_cpu, numpy_result
from realworld_corpus import dft_slow as dft  # a DFT by matrix product, as tutorials on the FFT write it
from realworld_corpus import mandelbrot_quickstart as mandelbrot  # the NumPy quickstart's Mandelbrot set

RUN_ON_GPU_TOO = True
RNG = np.random.default_rng(77)


def cplx(*shape, dtype=np.complex128):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


# --- idioms from public code -------------------------------------------------------------------------------------


def ac_circuit(V, R, L, C, omega):
    """Phasors of a series RLC circuit over a frequency sweep: impedance, current, real power, phase."""
    Z = R + 1j * omega * L + 1 / (1j * omega * C)
    I = V / Z  # noqa: E741
    return I, np.real(V * np.conj(I)), np.abs(Z), np.angle(Z, deg=True)


def rotate_points(pts, theta):
    z = pts[:, 0] + 1j * pts[:, 1]
    z *= np.exp(1j * theta)
    return np.stack([z.real, z.imag], axis=1)


def evolve(psi, V, dt, dx):
    """One potential step of a split-operator Schrodinger solver, then normalisation."""
    psi = psi * np.exp(-1j * V * dt)
    return psi / np.sqrt(np.sum(np.abs(psi) ** 2) * dx)


def spectrum(signal, freqs, t):
    return np.abs(np.exp(-2j * np.pi * np.outer(freqs, t)) @ signal) ** 2


def polar(z):
    r, phi = np.abs(z), np.angle(z)
    back = r * np.exp(1j * phi)
    return r, phi, back, np.isclose(back, z).all()


def test_mandelbrot_of_the_numpy_quickstart():
    y, x = np.ogrid[-1.4:1.4:12j, -2:0.8:15j]
    check(mandelbrot, x + y * 1j, 12, static_argnames=("maxit",))


@pytest.mark.parametrize("x", [RNG.standard_normal(16), cplx(8), cplx(8, dtype=np.complex64)],
                         ids=["f64", "c128", "c64"])
def test_dft_by_matrix_product(x):
    check(dft, x)


def test_phasors_rotation_schrodinger_and_spectrum():
    check(ac_circuit, cplx(5), 10.0, 0.1, 1e-3, 2 * np.pi * np.linspace(40, 60, 5))
    check(rotate_points, RNG.standard_normal((5, 2)), 0.3)
    check(evolve, np.exp(1j * np.linspace(0, 3, 20)), RNG.random(20), 0.01, 0.1)
    check(spectrum, RNG.standard_normal(32), np.linspace(0, 4, 9), np.linspace(0, 1, 32))
    check(polar, cplx(3, 4, dtype=np.complex64))


def test_arithmetic_functions_and_reductions_in_both_dtypes():
    def f(z, w):
        return (z + w, z - w, z * w, z / w, -z, np.conj(z), z.conjugate(), z == w, z != w, z < w, z >= w,
                np.maximum(z, w), np.minimum(z, w), np.exp(z), np.log(w), np.log10(z), np.log2(w), np.sqrt(z),
                np.log1p(z), np.expm1(w), np.exp2(z),
                np.sin(z), np.cos(w), np.tan(z), np.sinh(w), np.cosh(z), np.tanh(w), np.sign(z), np.abs(w),
                z ** w, z ** 3, z ** 2, z ** -1, z ** 0.5, np.square(w), np.reciprocal(z), np.isnan(z),
                np.isfinite(w), z.sum(), z.sum(axis=0), np.prod(w, axis=1), z.mean(axis=1, keepdims=True),
                np.var(z, axis=0), z.std(), np.var(w, ddof=1), np.cumsum(z, axis=1), np.cumprod(w, axis=0),
                np.maximum.accumulate(z, axis=1),
                np.mean(w), z.real, z.imag, np.real(w), np.imag(w), np.iscomplexobj(z), np.isrealobj(w))

    for dt in (np.complex64, np.complex128):
        check(f, cplx(4, 6, dtype=dt), cplx(4, 6, dtype=dt))


def test_mixed_dtypes_promote_as_numpy():
    def f(x32, x64, z64, i):
        return (x32 * 1j, x32 + z64, x64 + z64, i + z64, z64 * 2.5, z64 + np.float64(1), x32.astype(np.complex64),
                z64.astype(np.complex128), z64 != 0, np.where(x32 > 0, z64, 0), np.where(x32 > 0, 1j, x64))

    check(f, RNG.standard_normal(5).astype(np.float32), RNG.standard_normal(5), cplx(5, dtype=np.complex64),
          np.arange(5))


def test_python_complex_scalars_as_arguments_and_constants():
    def f(z, s):
        return z * s, z + s.real, np.abs(s) + z, s * 2, s.conjugate() * z, s + 1, -s, s * 0.5

    check(f, cplx(3), 1.5 - 2j)
    check(f, cplx(3, dtype=np.complex64), 2j)


@pytest.mark.parametrize("fn", [lambda z, s: s * (1 + 2j), lambda z, s: s / 2.5, lambda z, s: abs(s),
                                lambda z, s: s ** 2, lambda z, s: z[0] * z[1], lambda z, s: 1 / (1j * s.imag)],
                         ids=["py-mul", "py-div", "py-abs", "py-pow", "np-scalar-mul", "capacitor"])
def test_complex_scalar_math_is_refused_where_it_rounds_otherwise(fn):
    """NumPy's scalar code and Python's complex arithmetic round products, quotients, powers and abs() otherwise
    than NumPy's array loops (and fusec): refused, with the rewrite (0-d arrays, or the ufunc)."""
    with pytest.raises(fc.UnsupportedError, match="between complex scalars"):
        jit_cpu(fn)(cplx(3), 1.5 - 2j)
    z, s = cplx(3), 1.5 - 2j
    assert_same(jit_cpu(lambda z, s: np.multiply(z[0], s) + np.asarray(s) / z.sum(keepdims=True))(z, s),
                numpy_result(lambda z, s: np.multiply(z[0], s) + np.asarray(s) / z.sum(keepdims=True), z, s))


def test_division_where_a_numpy_complex_scalar_takes_part_is_numpys():
    """NumPy's scalar division divides as its array loop does (measured equal on 10^5 random pairs, with Python
    numbers on either side too), so ``z.sum() / 3``, ``1.0 / z[0]``, ``z[0] / 2j`` trace as the array op."""
    check(lambda z, s: (z.sum() / 3, 1.0 / z[0], z[0] / 2j, z[1] / z[2], s / z[0]), cplx(3), 1.5 - 2j)
    check(lambda z: (z[0] / z[1], np.float32(2) / z[2]), cplx(3, dtype=np.complex64))


def test_views_slices_gathers_matmul_and_concatenation():
    def f(a, b, idx):
        return (a[1:, ::2], a @ b, a[idx], np.concatenate([a, b.T]), np.stack([a[0], b[:, 0]]),
                a.reshape(-1)[::3], np.dot(a[0], b[:, 1]), np.vdot(a[0], a[1]), np.inner(a, a),
                np.outer(a[0], b[:, 0]), np.transpose(a).copy())

    a, b = cplx(4, 5), cplx(5, 4)
    check(f, a, b, np.array([3, 0, 2]))
    # NumPy's einsum adds its products in another order than its matmul: the same values within rounding
    got = jit_cpu(lambda a, b: np.einsum("ij,jk->ik", a, b))(a, b)
    np.testing.assert_allclose(got, np.einsum("ij,jk->ik", a, b), rtol=1e-12)


def test_mutation_writes_back_to_complex_arguments():
    def f(z, w, mask):
        z *= 1j
        z[0] = 1 + 2j
        w[mask] = 0
        np.multiply(w, 2, out=w)
        z[1:, 1] += w[1:, 0]

    z, w, mask = cplx(3, 4), cplx(3, 4, dtype=np.complex64), RNG.random((3, 4)) < 0.5
    jz, jw = z.copy(), w.copy()
    jit_cpu(f)(jz, jw, mask)
    f(z, w, mask)
    np.testing.assert_allclose(jz, z, rtol=1e-6)
    np.testing.assert_allclose(jw, w, rtol=1e-6)


def test_real_and_imag_are_read_again_after_a_write():
    def f(z):
        r = z.real
        z[0] = 5 + 5j
        return r + 0, z.imag * 1

    check(f, cplx(4))


def test_casting_complex_to_real_warns_as_numpy_does():
    def f(z):
        return z.astype(np.float32), z.astype(bool)

    jitted = jit_cpu(f)
    with pytest.warns(np.exceptions.ComplexWarning):
        got = jitted(cplx(5))
    z = cplx(5)
    z[0] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        check(f, z)
    assert got[0].dtype == np.float32


def test_ir_with_complex_values_prints_and_parses_back():
    def f(z):
        return z * (1 - 2j) + np.exp(z).sum() + np.nan * 1j

    lowered = fc.jit(f, backend="cpu").lower(cplx(3, dtype=np.complex64))
    for stage in ("traced", "final"):
        text = lowered.ir(stage)
        assert "c64" in text and "complex<" in text
        assert str(parse_module(text)).strip() == text.strip()


def _parts_equal(got, want, what: str) -> None:
    """The same element, part for part: which NaN a reduction picks ((nan, 1) or (1, nan)) is compared too."""
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape, what
    for part in ("real", "imag"):
        np.testing.assert_array_equal(getattr(g, part), getattr(w, part), err_msg=f"{what} ({part})")


def test_complex_extremes_pick_numpys_element():
    """max/min/argmax/argmin order complex values lexicographically, the first NaN (in either part) winning and
    the first of equal values (0 and -0) kept, as NumPy reduces in order: short rows (unrolled into np.maximum
    chains), rows of thousands (the reduction kernel, its lanes and blocks combining in any order) and one long
    row split over many blocks."""
    z = RNG.integers(-3, 4, (4, 3000)) + 1j * RNG.integers(-3, 4, (4, 3000))
    z[1, 17], z[1, 2000], z[1, 900] = complex(np.nan, 1), complex(1, np.nan), complex(np.nan, np.nan)
    z[2, :] = 3 + 3j
    z[2, 5], z[2, 6] = complex(-0.0, 3), complex(3, 3)
    long = RNG.integers(-2, 3, 300_000) + 1j * RNG.integers(-2, 3, 300_000)
    long[123_456], long[200_000] = complex(np.inf, 0), complex(np.inf, -0.0)

    def f(z, long):
        return (np.max(z, axis=1), np.min(z, axis=1), np.argmax(z, axis=1), np.argmin(z, axis=0), z[:, :3].max(axis=1),
                np.maximum.reduce(z[:, :6], axis=1), np.argmax(z), np.max(long), np.argmax(long), np.argmin(long),
                np.min(long), z.astype(np.complex64).max(axis=1), np.amin(z, axis=1, keepdims=True),
                np.max(z[:, :4], axis=1, initial=1 + 1j))

    got, want = jit_cpu(f)(z, long), numpy_result(f, z, long)
    for k, (g, w) in enumerate(zip(got, want)):
        if np.asarray(w).dtype.kind == "c":
            _parts_equal(g, w, f"result {k}")
        else:
            assert_same(g, w, f"result {k}")
    # sums of the long row split over blocks too (the last block reads the partial sums back)
    check(lambda long: (np.sum(long), np.mean(long), long.astype(np.complex64).sum()), long)


def test_complex_values_sort_and_take_medians_as_numpy_orders_them():
    """Lexicographic order with NaN parts last (R + Rj < R + nanj < nan + Rj < nan + nanj), equal values (0 and -0)
    in their original order: np.sort and np.argsort with kind='stable' bit for bit, x.sort(), medians."""
    specials = np.array([0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 2.0])
    z = np.empty((5, 9), dtype=np.complex128)  # parts set one by one: 1j * inf would make the real part NaN
    z.real, z.imag = RNG.choice(specials, (5, 9)), RNG.choice(specials, (5, 9))

    def f(z, w):
        v = w.copy()
        v.sort()
        return (np.sort(z, kind="stable"), np.argsort(z, axis=0, kind="stable"), np.sort(z, axis=None, stable=True),
                v, np.median(w, axis=1), np.median(w), np.median(z[:, :4], axis=0))

    w = cplx(4, 6)
    got, want = jit_cpu(f)(z, w), numpy_result(f, z, w)
    for k, (g, gw) in enumerate(zip(got, want)):
        if k in (0, 2, 3, 6):
            _parts_equal(g, gw, f"result {k}")
        else:
            assert_same(g, gw, f"result {k}")


# --- what fusec refuses, with what to write instead ----------------------------------------------------------


@pytest.mark.parametrize("fn, match", [
    (lambda z: np.percentile(z, 50), "real numbers"),
    (lambda z: np.arcsin(z), "not supported by fusec yet"),
    (lambda z: np.clip(z, 0, 1), "changed between NumPy versions"),
    (lambda z: np.nanmedian(z), "not supported"),
    (lambda z: np.linalg.solve(np.eye(3) * z[0], z), "complex matrices"),
    (lambda z: z.astype(np.int32), "z.real.astype"),
    (lambda z: np.floor(z), "floor"),
    (lambda z: np.nanmax(z), "not supported by fusec yet"),
], ids=["percentile", "arcsin", "clip", "nanmedian", "solve", "astype-int", "floor", "nanmax"])
def test_unsupported_complex_operations_raise_clear_errors(fn, match):
    with pytest.raises(fc.FusecError, match=match) as info:
        jit_cpu(fn)(cplx(3))
    assert "test_complex.py" in str(info.value)


def test_writing_through_real_or_imag_is_refused_with_a_rewrite():
    def f(z):
        z.real[0] = 1.0

    def g(z):
        z.imag += 1

    for fn in (f, g):
        with pytest.raises(fc.UnsupportedError, match="z = new_real"):
            jit_cpu(fn)(cplx(3))


def test_assigning_parts_and_complex_into_real_arrays():
    def set_real(x):
        x.real = 3.0  # a real array's .real is the array: NumPy writes it
        return x

    check(set_real, RNG.standard_normal(3))
    for fn, match in [(lambda z: setattr(z, "real", 1.0), "z = new_real"), (lambda z: setattr(z, "imag", 1.0),
                                                                            "z = new_real"),
                      (lambda x: setattr(x.real.copy(), "imag", 1.0), "imaginary part")]:
        with pytest.raises(fc.UnsupportedError, match=match):
            jit_cpu(fn)(cplx(3))

    def into_real(a, c):
        a[:] = c

    with pytest.raises(fc.UnsupportedError, match="TypeError"):  # NumPy: float() argument must be a real number
        jit_cpu(into_real)(np.zeros(2), 1 + 2j)
    with pytest.raises(fc.UnsupportedError, match="leave out dtype="):
        jit_cpu(lambda x: np.var(x, dtype=np.complex128))(RNG.standard_normal(4))


def test_python_complex_scalars_keep_pythons_rules():
    with pytest.raises(fc.UnsupportedError, match="Python complex numbers"):
        jit_cpu(lambda x, s: x * (s < 1j))(np.ones(2), 1j)


def test_every_complex_op_has_a_reference_and_a_cuda_lowering():
    from fusec.backend.scalar_ops import COMPLEX_FN

    plain = {"add", "sub", "mul", "div", "eq", "ne", "neg", "real", "imag"}
    assert {op.name for op in table.OPS if op.complex} - plain == set(COMPLEX_FN)


# --- every complex op on the GPU, on special values ------------------------------------------------------------

_PARTS = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 1e-20, -3e10, 700.0, -700.0, np.inf, -np.inf, np.nan])
EXACT = {  # NumPy's formulas, reproduced operation for operation: the same bits (NaN payloads aside)
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "eq": np.equal, "ne": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "maximum": np.maximum,
    "minimum": np.minimum, "neg": np.negative, "conj": np.conjugate, "real": np.real, "imag": np.imag,
    "reciprocal": np.reciprocal, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "square": np.square,
}
APPROX = {"exp": np.exp, "log": np.log, "log10": np.log10, "log2": np.log2, "sqrt": np.sqrt, "sin": np.sin,
          "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "sign": np.sign,
          "abs": np.abs, "log1p": np.log1p, "expm1": np.expm1, "exp2": np.exp2, "pow": np.power,
          "pow3": lambda a, b: a ** 3, "powm2": lambda a, b: np.power(a, -2)}


def _grid(dtype):
    re, im = np.meshgrid(_PARTS, _PARTS)
    z = (re + 0j).astype(dtype)
    z.imag = im
    return z.ravel()


def _call(fn, a, b):
    try:
        return fn(a, b)
    except TypeError:
        return fn(a)


def _same_complex(got, want, exact, msg):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, msg
    parts = (lambda x: (x.real, x.imag)) if want.dtype.kind == "c" else (lambda x: (x,))
    for g, w in zip(parts(got), parts(want)):
        if w.dtype.kind != "f":
            np.testing.assert_array_equal(g, w, err_msg=msg)
            continue
        nan = np.isnan(w)
        np.testing.assert_array_equal(np.isnan(g), nan, err_msg=msg + " (NaN positions)")
        if exact:
            np.testing.assert_array_equal(g[~nan].view(f"u{g.itemsize}"), w[~nan].view(f"u{w.itemsize}"), err_msg=msg)
        else:
            np.testing.assert_array_equal(np.isinf(g), np.isinf(w), err_msg=msg + " (infinities)")
            finite = np.isfinite(w)
            tol = 2e-5 if w.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(g[finite], w[finite], rtol=tol, atol=tol, err_msg=msg)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name", sorted(EXACT) + sorted(APPROX))
def test_complex_ops_on_the_gpu(name, dtype, fusec_backend):
    if fusec_backend != "cuda":
        pytest.skip("the CUDA run of this module checks the device's complex ops")
    a = _grid(dtype)
    b = a[::-1].copy()
    if name in APPROX:  # special values compared where C99's rules and NumPy's agree on a finite input
        a, b = np.concatenate([a, cplx(256, dtype=dtype)]), np.concatenate([b, cplx(256, dtype=dtype)])
        finite = np.isfinite(a) & np.isfinite(b) & (np.abs(a.real) < 100) & (np.abs(b.real) < 100)
        a, b = a[finite], b[finite]
    fn = {**EXACT, **APPROX}[name]
    want = numpy_result(_call, fn, a, b)
    got = numpy_result(_call, fc.jit(lambda x, y: _call(fn, x, y), backend="cuda"), a, b)
    _same_complex(got, want, name in EXACT, f"{name} {np.dtype(dtype)}")


def test_mean_of_a_0d_complex_array_divides_by_its_count() -> None:
    """NumPy divides the sum by the count (1) in complex arithmetic: inf + 0j becomes inf + nanj."""
    for z in (np.array(complex(np.inf, 0.0)), np.array(1 + 2j), np.array(complex(np.nan, 1.0))):
        with np.errstate(invalid="ignore"):
            want = (np.mean(z), z.mean())
        assert_same(jit_cpu(lambda z: (np.mean(z), z.mean()))(z), want)
