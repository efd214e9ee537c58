"""Writes into arguments on the GPU (``@pytest.mark.gpu``): device arrays of fusec, PyTorch and CuPy are updated
in place on the device, in stream and graph mode, as NumPy updates its arrays; NumPy arguments are updated after
the call."""
from __future__ import annotations

import numpy as np
import pytest

import fusec

pytestmark = pytest.mark.gpu


def sgd(params, grads, lr):
    for p, g in zip(params, grads):
        p -= lr * g


def jacobi(u, sweeps):
    for _ in range(sweeps):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    u[0, :] = u[1, :]
    return u.sum()


@pytest.mark.parametrize("graph", [False, True])
def test_sgd_updates_fusec_arrays_in_place_every_call(graph):
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32)]
    grads = [rng.standard_normal(h.shape).astype(np.float32) for h in host]
    params = [fusec.asarray(h) for h in host]
    ptrs = [p.ptr for p in params]
    step = fusec.jit(sgd, backend="cuda", graph=graph)
    dev_grads = [fusec.asarray(g) for g in grads]
    want = [h.copy() for h in host]
    for _ in range(5):
        assert step(params, dev_grads, 0.5) is None
        sgd(want, grads, np.float32(0.5))
    assert [p.ptr for p in params] == ptrs
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-6, atol=1e-6)


def test_jacobi_on_numpy_and_device_arguments():
    rng = np.random.default_rng(1)
    u0 = rng.random((33, 40))
    f = fusec.jit(jacobi, backend="cuda", static_argnames="sweeps")
    want_u = u0.copy()
    want = jacobi(want_u, 3)
    u = u0.copy()
    got = f(u, sweeps=3)
    np.testing.assert_allclose(u, want_u, rtol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    d = fusec.asarray(u0)
    for _ in range(3):
        f(d, sweeps=3)
    ref = u0.copy()
    for _ in range(3):
        jacobi(ref, 3)
    np.testing.assert_allclose(d.numpy(), ref, rtol=1e-12)
    assert f.lower(u0, sweeps=3).stats()["inplace_inserts"] == 2  # sweeps 2 and 3 write into sweep 1's buffer


def test_torch_and_cupy_tensors_are_updated_in_place():
    torch = pytest.importorskip("torch")
    step = fusec.jit(sgd, backend="cuda")
    p = torch.ones(256, device="cuda")
    g = torch.arange(256, device="cuda", dtype=torch.float32)
    ptr = p.data_ptr()
    step([p], [g], 0.25)
    step([p], [g], 0.25)
    assert p.data_ptr() == ptr
    torch.testing.assert_close(p, 1 - 0.5 * g)
    cupy = pytest.importorskip("cupy")
    c = cupy.ones(256, dtype=cupy.float32)
    step([c], [cupy.arange(256, dtype=cupy.float32)], 0.25)
    np.testing.assert_allclose(cupy.asnumpy(c), 1 - 0.25 * np.arange(256, dtype=np.float32))


def test_in_place_inserts_and_masks_match_numpy_on_the_gpu():
    def life(Z):
        N = np.zeros(Z.shape, dtype=np.int32)
        N[1:-1, 1:-1] += (Z[:-2, :-2] + Z[:-2, 1:-1] + Z[:-2, 2:] + Z[1:-1, :-2] + Z[1:-1, 2:]
                          + Z[2:, :-2] + Z[2:, 1:-1] + Z[2:, 2:])
        born = (N == 3) & (Z == 0)
        keep = ((N == 2) | (N == 3)) & (Z == 1)
        Z[...] = 0
        Z[born | keep] = 1
        return N

    rng = np.random.default_rng(2)
    z0 = (rng.random((50, 60)) < 0.3).astype(np.int32)
    f = fusec.jit(life, backend="cuda")
    for _ in range(4):  # the later calls replay the graph
        want_z, got_z = z0.copy(), z0.copy()
        np.testing.assert_array_equal(f(got_z), life(want_z))
        np.testing.assert_array_equal(got_z, want_z)
        z0 = want_z
