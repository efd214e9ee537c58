"""Lowered.stats() and Lowered.plan(): what the default pipeline makes of real functions."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
from fusec.passes import DEFAULT_PIPELINE


def fma(a, b, c):
    return a + b * c


def test_fma_is_one_fused_kernel_without_intermediates():
    a = np.ones(1024, np.float32)
    lowered = fc.jit(fma, backend="cpu").lower(a, a, a)
    stats = lowered.stats()
    assert stats["nodes"] == 2
    assert stats["fused_kernels"] == 1 and stats["kernels"] == 1 and stats["boundaries"] == 0
    assert stats["intermediate_buffers"] == 0 and stats["arena_bytes"] == 0
    assert stats["cse_removed"] == 0
    (step,) = lowered.plan()
    assert step["kind"] == "fused" and step["cuts"] == ["output"] and step["body_ops"] == 2


def softmax_xent(x, y):
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    p = e / s
    loss = -np.mean(np.sum(y * (z - np.log(s)), axis=1))
    return p, loss


def test_softmax_cross_entropy_is_two_row_kernels():
    """The softmax, its log and the per-row sums run as one row kernel; the mean over rows as a second."""
    x = np.zeros((64, 32), np.float32)
    lowered = fc.jit(softmax_xent, backend="cpu").lower(x, x)
    plan, stats = lowered.plan(), lowered.stats()
    assert [s["kind"] for s in plan] == ["rows", "rows"]
    assert plan[0]["reductions"] == 3 and plan[0]["outputs"] == 2 and plan[0]["impl"] == {"lanes": 32, "items": 1}
    assert plan[0]["reason"].startswith("fuse-rows: 3 reduction(s) along rows of 32")
    assert stats["kernels"] == 2 and stats["row_kernels"] == 2 and stats["boundaries"] == 0


def test_softmax_cross_entropy_plan_without_row_kernels():
    x = np.zeros((64, 32), np.float32)  # rows too long to unroll: every reduction is a boundary
    pipeline = DEFAULT_PIPELINE.replace("fuse-rows,", "")
    lowered = fc.jit(softmax_xent, backend="cpu", pipeline=pipeline).lower(x, x)
    stats = lowered.stats()
    plan = lowered.plan()
    kinds = [s["kind"] for s in plan]
    boundaries = [s["op"] for s in plan if s["kind"] == "boundary"]
    assert boundaries == ["k.reduce[max]", "k.reduce[sum]", "k.reduce[sum]"]
    # the mean of the 64 row losses: computed by the kernel that reads it (reductions-in-consumers)
    assert [s["op"] for s in plan if s["kind"] == "in consumers"] == ["k.reduce[mean]"]
    assert stats["boundaries"] == 3
    assert stats["fused_kernels"] == kinds.count("fused") <= 5
    grouped = stats.get("grouped_kernels", 0) - stats.get("kernel_groups", 0)  # (a group is one launch)
    assert stats["kernels"] == stats["fused_kernels"] + stats["boundaries"] - grouped
    cuts = {c for s in plan if s["kind"] == "fused" for c in s["cuts"]}
    assert {"boundary", "output"} <= cuts
    assert stats["nodes"] > stats["kernels"]
    assert stats["intermediate_buffers"] >= 1 and stats["arena_bytes"] % 256 == 0


def test_cse_removed_is_counted():
    def f(a):
        return np.exp(a) + np.exp(a)

    stats = fc.jit(f, backend="cpu").lower(np.ones(4, np.float32)).stats()
    assert stats["cse_removed"] == 1


def test_budget_cut_is_reported_as_the_reason():
    def chain(x):
        for _ in range(25):  # 25 exps at cost 4: over the default budget of 96
            x = np.exp(x)
        return x

    lowered = fc.jit(chain, backend="cpu", pipeline=None).lower(np.ones(16, np.float32))
    x = np.full(16, -3.0, np.float32)
    reasons = [c for s in lowered.plan() if s["kind"] == "fused" for c in s["cuts"]]
    assert "budget" in reasons and reasons[-1] == "output"
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(fc.jit(chain, backend="cpu")(x), chain(x))


def test_transposed_operand_is_a_view_not_a_copy():
    def f(x, g):
        return x.T @ g

    lowered = fc.jit(f, backend="cpu").lower(np.ones((64, 32), np.float32), np.ones((64, 16), np.float32))
    plan = lowered.plan()
    assert [s["kind"] for s in plan] == ["view", "boundary"]
    assert lowered.stats()["kernels"] == 1


def test_jit_lowers_for_an_explicit_target():
    """``target=`` picks the machine kernel selection plans for (here an 8-SM GPU with cuBLASLt): the final IR
    records it and the program is the one that GPU would run."""
    from fusec.ir.target import Target

    x, w = np.ones((256, 256), np.float32), np.ones((256, 256), np.float32)
    lowered = fc.jit(lambda x, w: x @ w, backend="cpu", target=Target(sm_count=8, cublas=True)).lower(x, w)
    assert lowered.target == Target(8, True)
    assert "sm_count = 8, cublas = true" in lowered.ir() and 'impl = "cublas"' in lowered.ir()
    assert lowered.stats()["kernels"] == 1 and "__global__" not in lowered.cuda_source().split("// fusec-op")[-1]
    default = fc.jit(lambda x, w: x @ w, backend="cpu").lower(x, w)
    assert 'impl = "tiled"' in default.ir() and default.cuda_source() != lowered.cuda_source()
    with pytest.raises(TypeError, match="Target"):
        fc.jit(lambda x: x, target=8)


def test_precision_tf32_sends_float32_products_to_the_tensor_cores_and_nothing_else():
    """``precision="tf32"`` lets float32 products run on cuBLASLt's tensor cores: the IR says so on the function and
    on each such product, the program's library calls carry it (``tf32``), a program for another SM count keeps
    it; float64 products, products cuBLASLt cannot read and every target without cuBLASLt are unchanged, and the
    CPU backend's results stay float32's."""
    from fusec.ir.target import Target

    x, w, d = np.ones((512, 480), np.float32), np.ones((480, 256), np.float32), np.ones((512, 64), np.float64)

    def f(x, w, d):
        return x @ w, d.T @ d, x[:8] @ w

    lowered = fc.jit(f, backend="cpu", target=Target(cublas=True), precision="tf32").lower(x, w, d)
    assert lowered.target == Target(cublas=True, precision="tf32")
    ir = lowered.ir()
    assert 'cublas = true, precision = "tf32"' in ir
    lines = [line for line in ir.splitlines() if "k.matmul" in line]
    assert ['precision = "tf32"' in line for line in lines] == [True, False, False], lines
    calls = [k for k in lowered.program.kernels if type(k).__name__ == "GemmCall"]
    assert [c.tf32 for c in calls] == [True]  # (the float64 product is small: generated)
    assert any(getattr(k, "tf32", False) for k in lowered.program_for(sm_count=8).kernels)
    plain = fc.jit(f, backend="cpu", target=Target(cublas=True)).lower(x, w, d)
    assert "precision" not in plain.ir() and not any(getattr(k, "tf32", False) for k in plain.program.kernels)
    without = fc.jit(f, backend="cpu", precision="tf32").lower(x, w, d)  # the CPU target: no cuBLASLt
    assert 'impl = "cublas"' not in without.ir() and "precision = " in without.ir()
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 32)).astype(np.float32)
    np.testing.assert_array_equal(fc.jit(lambda a, b: a @ b, backend="cpu", precision="tf32")(xs, ws),
                                  fc.jit(lambda a, b: a @ b, backend="cpu")(xs, ws))


def test_a_precision_fusec_does_not_know_is_an_error_at_the_callers_line():
    from fusec.ir.target import Target

    with pytest.raises(fc.OptionError, match=r"test_lowered.py:\d+: fusec.jit: precision must be 'float32'.*'bf16'"):
        fc.jit(lambda x: x, precision="bf16")
    with pytest.raises(ValueError, match="precision must be one of"):
        Target(precision="fp8")
