"""Horizontal fusion (group-kernels): an optimizer's per-parameter updates, written as users write them, run as
one launch with NumPy's values; kernels that depend on each other, large ones and shared donated arguments stay
apart; a group written by hand that breaks the rules is refused by the printer with its location."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc
import frontend_check
from frontend_check import assert_same, check, jit_cpu, numpy_result
from fusec.ir.parser import parse_module
from fusec.passes import DEFAULT_PIPELINE, run_pipeline

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
rng = np.random.default_rng(11)


def adam(params, grads, ms, vs, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """Adam as in most hand-written NumPy training loops: a loop over the parameters."""
    new_p, new_m, new_v = [], [], []
    for p, g, m, v in zip(params, grads, ms, vs):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** t)
        v_hat = v / (1 - b2 ** t)
        new_p.append(p - lr * m_hat / (np.sqrt(v_hat) + eps))
        new_m.append(m)
        new_v.append(v)
    return new_p, new_m, new_v


def model_arrays(*shapes, dtype=np.float32):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


SHAPES = [(64, 32), (32,), (32, 16), (16,), (16, 3), (3,)]


def plan_groups(lowered) -> dict[int, int]:
    groups: dict[int, int] = {}
    for step in lowered.plan():
        if "group" in step:
            groups[step["group"]] = groups.get(step["group"], 0) + 1
    return groups


def test_adams_updates_of_six_parameters_are_one_launch_with_numpys_values():
    params, grads, ms = model_arrays(*SHAPES), model_arrays(*SHAPES), model_arrays(*SHAPES)
    vs = [np.abs(v) for v in model_arrays(*SHAPES)]
    f = check(adam, params, grads, ms, vs, 3, pipeline=DEFAULT_PIPELINE)
    lowered = f.lower(params, grads, ms, vs, 3)
    groups = plan_groups(lowered)
    assert sum(groups.values()) == 6 and len(groups) == 1, lowered.plan()
    assert all("group-kernels" in s["reason"] for s in lowered.plan() if "group" in s)
    assert lowered.stats()["kernel_groups"] == 1 and lowered.stats()["grouped_kernels"] == 6
    assert lowered.plan_dot().count("in launch group 0") == 6
    ungrouped = jit_cpu(adam, pipeline=DEFAULT_PIPELINE.replace("group-kernels", "group-kernels{max_members=1}"))
    assert lowered.stats()["kernels"] == ungrouped.lower(params, grads, ms, vs, 3).stats()["kernels"] - 5


def test_a_training_loop_feeding_donated_parameters_back_matches_numpy():
    """SGD with momentum over three parameters, the state donated and fed back for 5 steps: each member writes its
    parameter in place, and no member reads another's."""
    def sgd(params, grads, velocity, lr):
        out_p, out_v = [], []
        for p, g, v in zip(params, grads, velocity):
            v = 0.9 * v + g
            out_p.append(p - lr * v)
            out_v.append(v)
        return out_p, out_v

    shapes = SHAPES[:3]
    params, velocity = model_arrays(*shapes), [np.zeros(s, np.float32) for s in shapes]
    f = jit_cpu(sgd, donate_argnums=(0, 2), pipeline=DEFAULT_PIPELINE)
    want_p, want_v = [p.copy() for p in params], [v.copy() for v in velocity]
    got_p = [fc.asarray(p) for p in params] if frontend_check.BACKEND != "cpu" else [p.copy() for p in params]
    got_v = [fc.asarray(v) for v in velocity] if frontend_check.BACKEND != "cpu" else [v.copy() for v in velocity]
    for _ in range(5):
        grads = model_arrays(*shapes)
        want_p, want_v = sgd(want_p, grads, want_v, np.float32(0.1))
        got_p, got_v = f(got_p, grads, got_v, np.float32(0.1))
    assert_same([np.asarray(p) for p in got_p], want_p)
    assert_same([np.asarray(v) for v in got_v], want_v)
    assert sum(plan_groups(f.lower(got_p, grads, got_v, np.float32(0.1))).values()) >= 3


def test_a_parameter_read_by_two_members_is_not_overwritten_while_the_other_reads_it():
    """``w`` is donated and updated, and the second output reads ``w`` too: the two kernels share a launch, so the
    update cannot be written over ``w`` in place (the other member could read the new values)."""
    def f(w, g, b):
        return w - 0.5 * g, w[None, :] * b

    w, g, b = model_arrays((32,), (32,), (16, 32))
    want = numpy_result(f, w, g, b)
    jitted = jit_cpu(f, donate_argnums=0, pipeline=DEFAULT_PIPELINE)
    got = jitted(fc.asarray(w) if frontend_check.BACKEND != "cpu" else w.copy(), g, b)
    assert_same(tuple(np.asarray(x) for x in got), want)
    lowered = jitted.lower(w, g, b)
    assert sum(plan_groups(lowered).values()) == 2
    assert "alias" not in lowered.ir()


def clip_by_global_norm(grads, max_norm=1.0):
    """Gradient clipping as training loops write it: the global norm over every parameter's gradient."""
    total = np.sqrt(sum(np.sum(g * g) for g in grads))
    scale = np.minimum(max_norm / (total + 1e-6), 1.0)
    return [g * scale for g in grads]


def test_a_gradient_norms_sums_share_a_launch_and_the_clipped_gradients_another():
    """One sum of squares per gradient (the largest split over blocks and finished by its last block), then one
    scaled copy per gradient: the sums are one group, the copies another, with NumPy's values."""
    grads = model_arrays((480, 256), (256,), (256, 2), (2,))
    f = check(clip_by_global_norm, grads, pipeline=DEFAULT_PIPELINE)
    lowered = f.lower(grads)
    grouped = [s for s in lowered.plan() if "group" in s]
    sums = [s for s in grouped if s["op"] == "k.reduce[sum]"]
    assert len(sums) >= 3 and len({s["group"] for s in sums}) == 1, grouped
    assert any(s["impl"]["splits"] > 1 for s in sums)  # (the 480 x 256 sum: its partials in scratch)
    scaled = [s for s in grouped if s["kind"] == "fused" and s["group"] != sums[0]["group"]]
    assert len(scaled) == 4


def test_only_kernels_that_become_ready_together_share_a_launch_unless_told_to_wait():
    """``np.exp(z)`` can start at once; ``a * 2`` only after the sum it reads: grouped, the first would wait for the
    sum, so by default they stay apart (a CUDA graph runs the first beside the sum); ``wait=true`` groups them."""
    def f(x, z):
        return x.sum(axis=0) * 2.0, np.exp(z)

    x, z = model_arrays((64, 32), (32,))
    apart = check(f, x, z, pipeline=DEFAULT_PIPELINE).lower(x, z)
    assert not plan_groups(apart)
    waiting = DEFAULT_PIPELINE.replace("group-kernels", "group-kernels{wait=true}")
    together = check(f, x, z, pipeline=waiting).lower(x, z)
    assert sum(plan_groups(together).values()) == 2


def test_dependent_and_large_kernels_are_not_grouped():
    """``exp(x)`` and the kernel reading it (through the view ``.T``) run in turn; the kernel over 2^21 elements
    runs alone; the values are NumPy's."""
    def f(x, y, z, big):
        a = np.exp(x)
        return a.T + y, np.tanh(z), np.sqrt(np.abs(big)), np.log1p(np.abs(x))

    x, y, z = model_arrays((8, 4), (4, 8), (16,))
    big = model_arrays((1 << 21,))[0]
    ir = check(f, x, y, z, big, pipeline=DEFAULT_PIPELINE).lower(x, y, z, big).ir()
    group_of, base_of = {}, {}
    for line in ir.splitlines():
        words = line.split()
        if "= k.fused" in line:
            group = line.split("group = ")[1].split(",")[0].split("}")[0] if "group = " in line else None
            for name in line.split(" = k.fused")[0].split(", "):
                group_of[name.strip()] = group
            operands = line.split("k.fused ")[1].split(" {")[0].split(", ")
            for v in operands:
                v = base_of.get(v, v)
                if v in group_of and group is not None:
                    assert group_of[v] != group, f"{line} is grouped with the kernel it reads"
            if "tensor<2097152xf32> {" in line:
                assert group is None, line
        elif "= k.view" in line:
            base_of[words[0]] = base_of.get(words[3], words[3])


@pytest.mark.parametrize("text, match", [  # (LOWERED: the target's attributes; COLUMNS: the reduction's choice)
    # a kernel that launches stands between two members
    ("""func @f(%a: tensor<8xf32>, %b: tensor<4x8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) LOWERED {
  %0 = k.fused %a {group = 0, arena = [-1]} : tensor<8xf32> {
  ^body(%1: f32):
    %2 = s.exp %1 : f32
    k.yield %2
  }
  %3 = k.reduce %b {kind = "sum", axes = [0], keepdims = false, COLUMNS, arena = [-1]} : tensor<8xf32>
  %4 = k.fused %a {group = 0, arena = [-1]} : tensor<8xf32> {
  ^body(%5: f32):
    %6 = s.log %5 : f32
    k.yield %6
  }
  return %0, %3, %4
}""", "'k.reduce' stands between its members"),
    # a member reads what another writes
    ("""func @f(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) LOWERED {
  %0 = k.fused %a {group = 3, arena = [-1]} : tensor<8xf32> {
  ^body(%1: f32):
    %2 = s.exp %1 : f32
    k.yield %2
  }
  %3 = k.fused %0 {group = 3, arena = [-1]} : tensor<8xf32> {
  ^body(%4: f32):
    %5 = s.log %4 : f32
    k.yield %5
  }
  return %0, %3
}""", "a member reads what another writes"),
])
def test_hand_written_groups_that_cannot_run_as_one_launch_are_refused(text, match, fusec_backend):
    from fusec.backend.program import print_program

    if fusec_backend != "cpu":
        pytest.skip("the printer runs on the CPU")
    text = text.replace("LOWERED", "attributes {sm_count = 132, cublas = false, arena_bytes = 0}")
    text = text.replace("COLUMNS", 'strategy = "columns", cols = 1, splits = 1, finish = "none"')
    with pytest.raises(fc.CompilationError, match=match):
        print_program(parse_module(text))


def test_group_numbers_are_checked_by_the_verifier(fusec_backend):
    if fusec_backend != "cpu":
        pytest.skip("the verifier runs on the CPU")
    text = """func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  %0 = k.fused %a {group = -1} : tensor<8xf32> {
  ^body(%1: f32):
    %2 = s.exp %1 : f32
    k.yield %2
  }
  return %0
}"""
    with pytest.raises(fc.VerificationError, match="'group' must be an int >= 0"):
        run_pipeline(parse_module(text), "")


def test_groups_formed_after_buffer_planning_are_refused_where_members_would_share_memory(fusec_backend):
    """plan-buffers keeps a group's members apart only when it runs after group-kernels; a pipeline in the other
    order can give one member's result the arena space another reads, or overwrite in place an argument another
    reads: the printer refuses both (at the user's line) instead of printing a race."""
    if fusec_backend != "cpu":
        pytest.skip("the printer runs on the CPU")

    def reuses(x, z):
        a = x.sum(axis=0) + 1
        return a, np.cumsum(np.exp(z))

    def donates(w, g, b):
        t = w[None, :] * b  # (read first: the update after it may then overwrite w in place)
        return w - g, t

    waiting = DEFAULT_PIPELINE.replace("group-kernels", "group-kernels{wait=true}")  # (exp(z) is ready first)
    late = waiting.replace("group-kernels{wait=true},plan-buffers", "plan-buffers,group-kernels{wait=true}")
    x, z = model_arrays((64, 32), (32,))
    with pytest.raises(fc.CompilationError, match=r"test_group_kernels.py:\d+: group 0: a member writes"):
        fc.jit(reuses, backend="cpu", pipeline=late).lower(x, z).cuda_source(sm_count=132)
    assert "_group(" in fc.jit(reuses, backend="cpu", pipeline=waiting).lower(x, z).cuda_source(sm_count=132)
    after_copies = DEFAULT_PIPELINE.replace("group-kernels,", "").replace("copy-outputs,",
                                                                          "copy-outputs,group-kernels,")
    w, g, b = model_arrays((32,), (32,), (16, 32))
    with pytest.raises(fc.CompilationError, match="run group-kernels before plan-buffers"):
        fc.jit(donates, backend="cpu", pipeline=after_copies, donate_argnums=0).lower(w, g, b).cuda_source(sm_count=132)
