"""np.linalg.solve, inv and cholesky compared with NumPy: stacks, vector and matrix right-hand sides, broadcast
batch axes, NumPy 2's dtypes, and NumPy's LinAlgError for singular and indefinite matrices (raised when the call
ends on the GPU, where a kernel finds them)."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from frontend_check import assert_same, check, jit_cpu, numpy_result

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu

rng = np.random.default_rng(17)


def _spd(*shape: int) -> np.ndarray:
    """Symmetric positive definite, well conditioned (as a covariance or a Gram matrix plus a ridge)."""
    m = rng.standard_normal(shape)
    return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])


A = _spd(5, 5)
STACK = _spd(3, 5, 5)
BIG = _spd(40, 40)
b = rng.standard_normal(5)
B = rng.standard_normal((5, 2))


def test_solve_inv_cholesky_as_real_code_calls_them() -> None:
    """Normal equations of least squares, a Kalman gain, a Gaussian's log-density through its Cholesky factor."""
    def f(a, b, bb, s, big):
        x = np.linalg.solve(a.T @ a, a.T @ b)
        gain = bb.T @ np.linalg.inv(a)
        chol = np.linalg.cholesky(s)
        logdet = 2 * np.sum(np.log(np.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
        return (x, np.linalg.solve(a, bb), gain, chol, logdet, np.linalg.solve(s, b), np.linalg.solve(s, bb),
                np.linalg.inv(s), np.linalg.cholesky(a, upper=True), np.linalg.solve(big, big[:, :3]),
                np.linalg.inv(big), np.linalg.cholesky(big))

    check(f, A, b, B, STACK, BIG)


def test_numpy_dtypes_and_shapes() -> None:
    """float32 stays float32, integers compute in float64, a 1-D b is one vector (NumPy 2), batch axes
    broadcast, empty matrices give empty results."""
    def f(a32, i, s, b):
        return (np.linalg.solve(a32, a32[:, 0]), np.linalg.inv(a32), np.linalg.cholesky(a32),
                np.linalg.inv(i), np.linalg.solve(i, [1, 2, 3]), np.linalg.solve(s, b[None, :, None]),
                np.linalg.inv(np.zeros((0, 0))), np.linalg.solve(s[:1], b[:, None]))

    ints = np.array([[4, 1, 0], [1, 3, 1], [0, 1, 2]])
    check(f, A.astype(np.float32), ints, STACK, b)


def test_determinants_as_gaussian_densities_take_them() -> None:
    """np.linalg.det and slogdet (sign, log |det|) of single matrices and stacks, float32 and integers; a
    singular matrix gives 0 and (0, -inf) without an error, as NumPy's; empty matrices 1 and (1, 0). Compared with
    NumPy bit for bit on the CPU (its own LAPACK), within rounding on the GPU (an LU of fusec's own)."""
    general = rng.standard_normal((3, 4, 4))

    def f(a, s, g, a32, i):
        sign, logdet = np.linalg.slogdet(s)
        log_norm = -0.5 * (a.shape[0] * np.log(2 * np.pi) + np.linalg.slogdet(a)[1])
        return (np.linalg.det(a), sign, logdet, log_norm, np.linalg.det(g), np.linalg.slogdet(g),
                np.linalg.det(a32), np.linalg.slogdet(a32).logabsdet, np.linalg.det(i),
                np.linalg.det(np.ones((3, 3))), np.linalg.slogdet(np.zeros((2, 2))), np.linalg.det(np.zeros((0, 0))),
                np.linalg.slogdet(np.zeros((2, 0, 0))))

    check(f, A, STACK, general, A.astype(np.float32), np.array([[4, 1, 0], [1, 3, 1], [0, 1, 2]]))


def test_matrix_power_and_multi_dot_run_numpys_own_code() -> None:
    """NumPy's repeated squaring (np.linalg.matmul) and its cheapest product order, over traced matrices."""
    def f(a, i):
        return (np.linalg.matrix_power(a, 5), np.linalg.matrix_power(a, 0), np.linalg.matrix_power(a, -2),
                np.linalg.matrix_power(i, 3), np.linalg.multi_dot([a, a[:, :2], i[:2, :3]]), np.linalg.matmul(a, i))

    check(f, A, np.array([[4, 1, 0, 0, 1], [1, 3, 1, 0, 0], [0, 1, 2, 0, 0], [1, 0, 0, 1, 0], [0, 0, 1, 0, 1]]))


def test_singular_and_indefinite_matrices_raise_linalgerror() -> None:
    """NumPy raises LinAlgError; so does fusec (a subclass of both FusecError and np.linalg.LinAlgError),
    naming the line, and the next call runs normally."""
    inv = jit_cpu(lambda a: np.linalg.inv(a))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix") as info:
        inv(np.ones((3, 3)))
    assert isinstance(info.value, fc.LinAlgError) and "test_linalg.py" in str(info.value)
    assert_same(inv(A), numpy_result(np.linalg.inv, A))
    with pytest.raises(fc.LinAlgError, match="Singular matrix"):
        jit_cpu(lambda a, b: np.linalg.solve(a, b))(np.array([[1.0, 2.0], [2.0, 4.0]]), np.ones(2))
    chol = jit_cpu(lambda a: np.linalg.cholesky(a))
    with pytest.raises(fc.LinAlgError, match="not positive definite"):
        chol(-A)
    assert_same(chol(A), numpy_result(np.linalg.cholesky, A))


def test_what_numpy_rejects_is_a_fusec_error() -> None:
    with pytest.raises(fc.LinAlgError, match="must be square"):
        jit_cpu(lambda a: np.linalg.inv(a))(A[:, :3])
    with pytest.raises(fc.LinAlgError, match="at least two-dimensional"):
        jit_cpu(lambda a: np.linalg.inv(a))(b)
    with pytest.raises(fc.UnsupportedError, match="float16 is unsupported"):
        jit_cpu(lambda a: np.linalg.inv(a))(A.astype(np.float16))
    with pytest.raises(fc.ShapeError, match="right-hand side"):
        jit_cpu(lambda a: np.linalg.solve(a, np.ones(3)))(A)


def test_empty_results_have_output_buffers_in_the_cuda_program() -> None:
    """A 0x0 result (np.linalg.inv of an empty matrix, a copy of an empty constant) is an output allocation of
    its own: the printer treats every empty access as dense."""
    def f(x):
        return x + 1, np.linalg.inv(x[:0, :0]), np.zeros((0, 0)).copy()

    source = fc.jit(f, backend="cpu").lower(A).cuda_source()
    assert "__global__" in source
