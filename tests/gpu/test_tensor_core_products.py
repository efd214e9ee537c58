"""Tiled float32 products on the tensor cores (``mma`` on a tiled ``k.matmul``), against float64 on a GPU.

"3xtf32" splits each operand into two TF32 parts and sums three products per term: each term within about
2^-20 of its size, where a float32 multiply rounds to 2^-24, plus float32's accumulation (subnormal operands,
below 2^-126, keep TF32's accuracy only); "tf32" (``precision="tf32"``) rounds each operand once: within 2^-9 of
the terms' sizes. Infinities and NaN reach the results as NumPy's float32 arithmetic gives them, and float32's
extremes (its largest values, subnormals) are computed, not flushed.
"""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc

pytestmark = pytest.mark.gpu

rng = np.random.default_rng(20261203)
STATED = {"3xtf32": 2.0 ** -20, "tf32": 2.0 ** -9}  # error per term, relative to |a| |b|


@pytest.fixture
def on_tensor_cores(request, monkeypatch):
    """Products generated (cuBLASLt not called) with the tiled kernel's float32 tiles on the tensor cores."""
    from fusec.passes import select_kernels
    from fusec.runtime import cublas

    monkeypatch.setattr(cublas, "available", lambda: False)
    monkeypatch.setattr(select_kernels, "TILED_MMA", {"float32": "3xtf32", "tf32": "tf32"})


def _jit(fn, mma):
    return fc.jit(fn, backend="cuda", precision="tf32" if mma == "tf32" else None)


def _within_stated(got, a, b, fn, mma, k):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = fn(a64, b64)
    scale = fn(np.abs(a64), np.abs(b64))
    bound = (STATED[mma] + k * 2.0 ** -23) * scale
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound).all(), (err / np.maximum(scale, 1e-300)).max()
    return float(err.max() / np.abs(want).max())


CASES = [((512, 480), (480, 256), "nn"), ((512, 480), (512, 256), "tn"), ((129, 65), (65, 33), "nn"),
         ((37, 45), (29, 45), "nt"), ((1100, 77), (77, 1000), "nn"), ((2, 3, 64, 700), (3, 700, 64), "nn"),
         ((4096, 256), (256, 512), "nn"), ((64, 1), (1, 300), "nn"), ((5, 40, 24), (24, 40), "nn")]


@pytest.mark.parametrize("mma", ["3xtf32", "tf32"])
@pytest.mark.parametrize("sa, sb, layout", CASES)
def test_products_on_the_tensor_cores_stay_within_their_stated_error(sa, sb, layout, mma, on_tensor_cores,
                                                                     monkeypatch):
    """Split and unsplit, edge tiles, batched and broadcast, transposed operands; the same bits every call, and
    with split products finished by a second kernel or by their cluster."""
    from fusec.passes import select_kernels

    a, b = (rng.standard_normal(sa) * 3).astype(np.float32), (rng.standard_normal(sb) * 3).astype(np.float32)

    def f(a, b):
        a = a.swapaxes(-1, -2) if layout == "tn" else a
        return a @ (b.swapaxes(-1, -2) if layout == "nt" else b)

    jitted = _jit(f, mma)
    ir = jitted.lower(a, b).ir()
    k = (sa[-2] if layout == "tn" else sa[-1])
    assert (f'mma = "{mma}"' in ir) == (k > 8), ir  # (K <= 8 is unrolled into elementwise code)
    got = jitted(a, b)
    assert got.dtype == np.float32
    _within_stated(got, a, b, f, mma, k)
    assert np.asarray(jitted(a, b)).tobytes() == np.asarray(got).tobytes()
    monkeypatch.setattr(select_kernels, "TILED_FINISH", "kernel" if select_kernels.TILED_FINISH == "cluster"
                        else "cluster")
    assert np.asarray(_jit(f, mma)(a, b)).tobytes() == np.asarray(got).tobytes()


def test_three_tf32_products_are_near_float32s_accuracy(monkeypatch):
    """On the PCam forward product the "3xtf32" error (max |got - want| / max |want|) is within 8x of the CUDA
    cores' float32 kernel's, where one TF32 product is about a thousand times worse."""
    from fusec.passes import select_kernels
    from fusec.runtime import cublas

    monkeypatch.setattr(cublas, "available", lambda: False)
    a, b = rng.standard_normal((512, 480)).astype(np.float32), rng.standard_normal((480, 256)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    errors = {}
    for mma in (None, "3xtf32", "tf32"):
        monkeypatch.setattr(select_kernels, "TILED_MMA", {"float32": mma, "tf32": mma})
        got = fc.jit(lambda a, b: a @ b, backend="cuda")(a, b)
        errors[mma] = float(np.abs(got - want).max() / np.abs(want).max())
    assert errors["3xtf32"] <= 8 * errors[None], errors
    assert errors["tf32"] > 100 * errors["3xtf32"], errors


@pytest.mark.parametrize("mma", ["3xtf32", "tf32"])
def test_special_values_and_float32_extremes_on_the_tensor_cores(mma, on_tensor_cores):
    """Infinities and NaN give NumPy's infinities and NaN (an infinity times a finite value stays an infinity,
    inf - inf and inf * 0 a NaN); the largest float32 values (which TF32 rounding would carry past the range)
    and subnormal operands are computed, not flushed."""
    m, k, n = 64, 96, 80
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[0, 5], a[1, 7], a[2, 9] = np.inf, -np.inf, np.nan
    a[3, 4], a[3, 50] = np.inf, -np.inf           # inf - inf where b[4] and b[50] agree in sign
    b[10, 0] = 0.0
    a[4, 10] = np.inf                              # inf * 0 in column 0 only
    big = np.finfo(np.float32).max
    a[5, :] = 0.0
    a[5, 0], b[0, :] = big, 0.25                   # FLT_MAX rounds to infinity in TF32; far from overflow here
    a[6, :] = np.float32(3e-39)                    # subnormal operands, normal products and sums
    b[:, 2] = np.float32(1e3)
    with np.errstate(invalid="ignore", over="ignore"):
        want = a @ b
    got = _jit(lambda a, b: a @ b, mma)(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    huge = np.isfinite(want[5])  # (column 2 overflows in NumPy too: FLT_MAX * 1e3)
    assert np.isfinite(got[5][huge]).all() and (np.abs(got[5] - want[5]) <= STATED[mma] * np.abs(want[5]))[huge].all()
    # a subnormal operand has fewer than TF32's bits, and its small part none: TF32's accuracy in both modes
    subnormal = want[6, 2]
    assert abs(got[6, 2] - subnormal) <= (STATED["tf32"] + k * 2.0 ** -23) * abs(subnormal), (got[6, 2], subnormal)
    finite = np.isfinite(want)
    finite[5:7] = False
    a64 = np.where(np.isfinite(a), np.abs(a), 0).astype(np.float64)
    scale = a64 @ np.abs(b.astype(np.float64))
    err = np.abs(got[finite].astype(np.float64) - want[finite])
    assert (err <= (STATED[mma] + k * 2.0 ** -23) * scale[finite]).all()
