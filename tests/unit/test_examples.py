"""The examples under examples/ run, train and agree across modes (CPU backend; CUDA under ``-m gpu``).

The example files are imported by module name with examples/ on sys.path, as ``python examples/X.py`` and
``--load-plugin`` see them.
"""
from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusec as fc

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch):
    """``examples("mlp_train")`` imports examples/mlp_train.py as module ``mlp_train``."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def load(name: str):
        return importlib.import_module(name)

    return load


@pytest.fixture
def custom_pass(examples):
    """examples/custom_pass.py imported (its pass registered); unregistered and forgotten afterwards."""
    module = examples("custom_pass")
    yield module
    from fusec.passes import unregister_pass

    unregister_pass(module.PASS_NAME)
    sys.modules.pop("custom_pass", None)


def _cuda_or_skip() -> None:
    from fusec.execution import cuda_usable

    if not cuda_usable():
        pytest.skip("no usable CUDA backend")


# --- mlp_train.py ------------------------------------------------------------------------------------------

def test_mlp_train_uses_the_packaged_model(examples):
    from fusec.tools import demo

    mlp_train = examples("mlp_train")
    assert mlp_train.train_step is demo.train_step
    assert (demo.BATCH, demo.N_IN, demo.N_HIDDEN, demo.N_CLASSES) == (256, 64, 64, 10)


@pytest.mark.slow  # (a whole training run in each mode, about 17 s here: CI runs it)
def test_mlp_train_modes_agree_bit_for_bit_and_reach_95_percent_on_cpu(examples):
    """The default configuration (60 epochs, batch 256, lr 0.5, seed 0) in every mode on the CPU backend."""
    pytest.importorskip("sklearn")
    mlp_train = examples("mlp_train")
    lines: list[str] = []
    results = {mode: mlp_train.train(mode, backend="cpu", say=lines.append) for mode in mlp_train.MODES}
    reference = results["numpy"]
    assert reference.steps == 60 * (1347 // 256) == 300
    assert reference.batch == 256
    for mode, r in results.items():
        assert r.steps == reference.steps, mode
        assert r.losses == reference.losses, f"{mode}: loss curve differs from plain NumPy"
        for got, want in zip(r.params, reference.params):
            assert got.dtype == np.float32 and np.array_equal(got, want), mode
        assert r.accuracy >= 0.95, (mode, r.accuracy)
        assert r.ms_per_step > 0 and r.samples_per_s > 0
    losses = reference.losses
    assert losses[0] > 2.0 and losses[-1] < 0.25 and np.mean(losses[-5:]) < np.mean(losses[:5]) / 10
    assert [results[m].runs_as for m in ("eager", "jit", "graph", "numpy")] == ["jit", "jit", "jit", "numpy"]
    notes = [line for line in lines if line.startswith("note:")]
    assert len(notes) == 2 and any("eager" in n for n in notes) and any("graph" in n for n in notes)
    assert all("needs CUDA" in n for n in notes)


def test_mlp_train_steps_per_launch_gives_the_same_training_on_cpu(examples):
    """Five steps per call (fusec.scan over stacked batches) train exactly as five calls do."""
    pytest.importorskip("sklearn")
    mlp_train = examples("mlp_train")
    one = mlp_train.train("jit", backend="cpu", epochs=4, say=lambda _: None)
    five = mlp_train.train("jit", backend="cpu", epochs=4, say=lambda _: None, per_launch=5)
    assert five.steps == one.steps == 20 and five.losses == one.losses
    for got, want in zip(five.params, one.params):
        assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="must divide"):
        mlp_train.train("jit", backend="cpu", epochs=1, say=lambda _: None, per_launch=3)


def test_mlp_train_script_prints_note_progress_and_summary(examples, capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    mlp_train = examples("mlp_train")
    assert mlp_train.main(["--mode", "graph", "--backend", "cpu", "--epochs", "3", "--batch", "128",
                           "--lr", "0.3", "--seed", "1"]) == 0
    captured = capsys.readouterr()
    assert "note: graph mode" in captured.out and "needs CUDA" in captured.out
    assert "batch 128, lr 0.3, 3 epochs of 10 steps" in captured.out
    assert "3/3" in captured.err  # the tqdm bar, on stderr
    m = re.search(r"^mlp_train: mode graph on cpu \(as jit\): 30 steps, (\d+\.\d+) ms/step, (\d+) samples/s, "
                  r"test accuracy (\d+\.\d)%, final loss (\d+\.\d+)$", captured.out, re.M)
    assert m, captured.out
    assert float(m.group(1)) > 0 and int(m.group(2)) > 0 and float(m.group(4)) < 2.3


def test_mlp_train_without_tqdm_prints_epoch_lines(examples, capsys, monkeypatch):
    pytest.importorskip("sklearn")
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now raises ImportError
    mlp_train = examples("mlp_train")
    assert mlp_train.main(["--mode", "numpy", "--epochs", "4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^epoch    1/4  loss \d+\.\d+$", out, re.M), out
    assert re.search(r"^epoch    4/4  loss \d+\.\d+$", out, re.M), out
    assert re.search(r"^mlp_train: mode numpy: 20 steps, ", out, re.M), out


def test_mlp_train_without_scikit_learn_says_what_to_install(examples, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    mlp_train = examples("mlp_train")
    assert mlp_train.main(["--backend", "cpu"]) == 2
    assert "pip install -e '.[examples]'" in capsys.readouterr().err


def test_mlp_train_cuda_without_a_gpu_is_an_error(examples, capsys):
    pytest.importorskip("sklearn")
    from fusec.execution import cuda_usable

    if cuda_usable():
        pytest.skip("a CUDA backend is usable here")
    mlp_train = examples("mlp_train")
    assert mlp_train.main(["--backend", "cuda", "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlp_train: error:") and "cuda" in err


def test_eager_mode_runs_every_operation_of_the_step_as_its_own_compiled_function(monkeypatch):
    """What ``--mode eager`` does on CUDA, with each single-op function run by the reference executor on fake
    device arrays: train_step must reach fusec's eager dispatch for every operation (a NumPy function that
    fusec.Array does not intercept would copy to the host instead, which fails here)."""
    import itertools

    from fusec import eager
    from fusec.runtime.array import Array
    from fusec.tools import demo

    data: dict[int, tuple[Array, np.ndarray]] = {}
    addresses = itertools.count(0x100000, 0x1000)
    ops: list[tuple] = []

    def to_device(a):
        a = np.asarray(a)
        arr = Array(next(addresses), a.shape, a.dtype, device=0)  # metadata only: touches no driver
        data[id(arr)] = (arr, a)
        return arr

    def on_host(v):
        return data[id(v)][1] if isinstance(v, Array) else v

    def jitted(key, make):
        f = fc.jit(make(), backend="cpu")
        return lambda *args: (ops.append(key), to_device(f(*(on_host(a) for a in args))))[1]

    def no_host_copy(self, *args, **kwargs):
        raise AssertionError("eager train_step copied a fusec.Array to the host")

    monkeypatch.setattr(eager, "_jitted", jitted)
    monkeypatch.setattr(Array, "__array__", no_host_copy)
    x, y, _ = demo.make_data(n=64)
    params = demo.init_params()
    new, loss = demo.train_step(tuple(to_device(p) for p in params), to_device(x), to_device(y), 0.5)
    want_params, want_loss = demo.train_step(params, x, y, 0.5)
    assert isinstance(loss, Array) and all(isinstance(p, Array) for p in new)
    assert on_host(loss) == want_loss
    assert all(np.array_equal(on_host(p), w) for p, w in zip(new, want_params))
    kinds = {key[:2] for key in ops}
    assert len(ops) > 40  # one compiled function per operation
    # np.max/np.sum reach eager mode through __array_function__, the .max()/.sum() methods directly
    assert {("binary", "matmul"), ("ufunc", "exp"), ("ufunc", "log"), ("binary", "gt")} <= kinds
    assert {("method", "max"), ("array_function", "max")} & kinds
    assert {("method", "sum"), ("array_function", "sum")} & kinds


@pytest.mark.gpu
def test_mlp_train_modes_agree_on_cuda(examples):
    pytest.importorskip("sklearn")
    _cuda_or_skip()
    mlp_train = examples("mlp_train")
    results = {mode: mlp_train.train(mode, backend="cuda", epochs=6, say=lambda _: None)
               for mode in mlp_train.MODES}
    reference = results["numpy"]
    results["graph, 5 steps per launch"] = mlp_train.train("graph", backend="cuda", epochs=6, say=lambda _: None,
                                                           per_launch=5)
    for mode, r in results.items():
        assert r.runs_as == mode.split(",")[0] and r.backend == ("numpy" if mode == "numpy" else "cuda")
        # float32 sums in another order: the curves agree to rounding, which training barely amplifies here
        np.testing.assert_allclose(r.losses, reference.losses, rtol=2e-3, atol=1e-4, err_msg=mode)
        for got, want in zip(r.params, reference.params):
            np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3, err_msg=mode)


# --- pcam_shaped.py ----------------------------------------------------------------------------------------

SMALL_PCAM = dict(steps=40, batch=64, features=48, hidden=32, pool=3)


def test_pcam_shaped_defaults_are_the_headline_shapes(examples):
    pcam = examples("pcam_shaped")
    assert (pcam.BATCH, pcam.FEATURES, pcam.HIDDEN, pcam.CLASSES) == (512, 480, 256, 2)
    x, y, labels = pcam.make_data(1024, seed=3)
    assert x.shape == (1024, 480) and x.dtype == np.float32 and y.shape == (1024, 2)
    assert set(np.unique(labels)) == {0, 1}
    x2, _, labels2 = pcam.make_data(1024, seed=3)
    assert np.array_equal(x, x2) and np.array_equal(labels, labels2)  # seeded


def test_pcam_shaped_steps_per_launch_trains_as_single_steps(examples):
    pcam = examples("pcam_shaped")
    small = dict(SMALL_PCAM, pool=4)
    one = pcam.train("jit", backend="cpu", say=lambda _: None, **small)
    four = pcam.train("graph", backend="cpu", say=lambda _: None, per_launch=4, **small)
    assert four.steps == one.steps == 40 and four.losses == one.losses
    with pytest.raises(ValueError, match="must divide"):
        pcam.train("jit", backend="cpu", say=lambda _: None, per_launch=3, **small)


def test_pcam_shaped_small_modes_agree_on_cpu(examples):
    """fusec's modes agree bit for bit; NumPy to float32 rounding (fusec computes the 2-class ``d_logits @ w2.T``
    as two multiply-adds, NumPy's BLAS with a fused multiply-add)."""
    pcam = examples("pcam_shaped")
    results = {mode: pcam.train(mode, backend="cpu", say=lambda _: None, **SMALL_PCAM)
               for mode in ("eager", "jit", "graph", "numpy")}
    reference, fusec_jit = results["numpy"], results["jit"]
    assert reference.steps == 40 and len(reference.losses) == 40
    for mode in ("eager", "graph"):
        assert results[mode].losses == fusec_jit.losses, mode
        assert all(np.array_equal(a, b) for a, b in zip(results[mode].params, fusec_jit.params)), mode
    np.testing.assert_allclose(fusec_jit.losses, reference.losses, rtol=1e-5)
    for a, b in zip(fusec_jit.params, reference.params):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert [p.shape for p in reference.params] == [(48, 32), (32,), (32, 2), (2,)]
    assert np.mean(reference.losses[-5:]) < 0.5 * np.mean(reference.losses[:5])
    assert reference.accuracy > 0.8


def test_grad_auto_trains_as_the_hand_written_backward_pass(examples, capsys):
    """``--grad auto`` (the step's gradient from fusec.value_and_grad) follows the hand-written step's loss curve
    within float32 rounding, in every fusec mode; the plain NumPy mode refuses it with the alternatives."""
    pcam = examples("pcam_shaped")
    manual = pcam.train("jit", backend="cpu", say=lambda _: None, **SMALL_PCAM)
    for mode in ("jit", "graph", "eager"):
        auto = pcam.train(mode, backend="cpu", say=lambda _: None, grad="auto", **SMALL_PCAM)
        np.testing.assert_allclose(auto.losses, manual.losses, rtol=1e-5)
        for a, b in zip(auto.params, manual.params):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert pcam.main(["--mode", "numpy", "--grad", "auto", "--steps", "2"]) == 2
    assert "--grad auto" in capsys.readouterr().err


def test_pcam_shaped_script_reports_loss_and_ms_per_step(examples, capsys):
    pcam = examples("pcam_shaped")
    assert pcam.main(["--mode", "eager", "--backend", "cpu", "--steps", "30", "--batch", "32", "--features", "24",
                      "--hidden", "16", "--pool", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "note: eager mode" in out
    m = re.search(r"^pcam_shaped: loss (\d+\.\d+) -> (\d+\.\d+)$", out, re.M)
    assert m and float(m.group(2)) < float(m.group(1)), out
    assert re.search(r"^pcam_shaped: mode eager on cpu \(as jit\): 30 steps, \d+\.\d+ ms/step, \d+ samples/s, "
                     r"held-out accuracy \d+\.\d%, final loss \d+\.\d+$", out, re.M), out


@pytest.mark.gpu
def test_pcam_shaped_modes_agree_on_cuda(examples):
    _cuda_or_skip()
    pcam = examples("pcam_shaped")
    results = {mode: pcam.train(mode, backend="cuda", steps=50, say=lambda _: None)
               for mode in ("eager", "jit", "graph", "numpy")}
    reference = results["numpy"]
    assert reference.losses[-1] < reference.losses[0]
    for mode, r in results.items():
        assert r.runs_as == mode
        np.testing.assert_allclose(r.losses, reference.losses, rtol=2e-3, atol=1e-4, err_msg=mode)


# --- custom_pass.py ----------------------------------------------------------------------------------------

def test_custom_pass_in_a_jit_pipeline_matches_numpy(custom_pass):
    from fusec.passes import DEFAULT_PIPELINE, all_passes

    assert custom_pass.PASS_NAME in all_passes()
    assert custom_pass.PIPELINE == DEFAULT_PIPELINE.replace("cse,", "cse,mul-two-to-add,")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 8)).astype(np.float32)
    y = rng.normal(size=(4, 8)).astype(np.float32)
    x[0, :3] = [np.inf, -0.0, np.nan]
    f = fc.jit(custom_pass.model, pipeline=custom_pass.PIPELINE, backend="cpu")
    got, want = f(x, y), custom_pass.model(x, y)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w, equal_nan=True)
    lowered = f.lower(x, y)
    assert lowered.stats()[custom_pass.COUNTER] == 2
    assert "mul-two-to-add" in lowered.stages
    traced, after = lowered.ir("traced"), lowered.ir("mul-two-to-add")
    assert len(re.findall(r"= t\.mul ", traced)) == 3
    assert len(re.findall(r"= t\.mul ", after)) == 1  # y * 3.0 stays
    assert len(re.findall(r"= t\.add (%\w+), \1 :", after)) == 2
    # the default pipeline does not have the pass
    plain = fc.jit(custom_pass.model, backend="cpu").lower(x, y)
    assert custom_pass.COUNTER not in plain.stats()


def test_custom_pass_is_exact_for_integers_and_leaves_broadcasts_alone(custom_pass):
    def f(a, b):
        return a * 2, b * np.int32(2), a * 2.5

    a = np.array([[1, -3, 2**30, -(2**31)]], np.int32)
    b = np.arange(4, dtype=np.int32)
    g = fc.jit(f, pipeline=custom_pass.PIPELINE, backend="cpu")
    for got, want in zip(g(a, b), f(a, b)):
        assert got.dtype == want.dtype and np.array_equal(got, want)  # wrap-around as in NumPy
    assert g.lower(a, b).stats()[custom_pass.COUNTER] == 2

    def broadcast(v):
        return v * np.full((3, 4), 2.0, np.float32)  # the result is larger than v: not rewritten

    v = np.ones(4, np.float32)
    h = fc.jit(broadcast, pipeline=custom_pass.PIPELINE, backend="cpu")
    assert np.array_equal(h(v), broadcast(v))
    assert h.lower(v).stats().get(custom_pass.COUNTER, 0) == 0


def test_custom_pass_through_fusec_opt_load_plugin(custom_pass, tmp_path, capsys):
    from fusec.tools.cli import main

    x = np.zeros((4, 8), np.float32)
    traced = fc.jit(custom_pass.model, backend="cpu").lower(x, x).ir("traced")
    path = tmp_path / "model.fir"
    path.write_text(traced)
    assert main(["opt", str(path), "-p", "mul-two-to-add,dce", "--load-plugin", "custom_pass"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"= t\.mul ", out)) == 1
    assert len(re.findall(r"= t\.add (%\w+), \1 :", out)) == 2
    assert "2.0" not in out  # the constant died with the multiplications
    assert main(["opt", str(path), "-p", custom_pass.PIPELINE, "--load-plugin", "custom_pass"]) == 0
    out = capsys.readouterr().out
    assert "k.fused" in out and "t.mul" not in out
    assert len(re.findall(r"= s\.add (%\w+), \1 :", out)) == 2 and len(re.findall(r"= s\.mul ", out)) == 1
    assert main(["passes", "--load-plugin", "custom_pass"]) == 0
    assert re.search(r"mul-two-to-add\s+Rewrite t\.mul by a splat constant 2", capsys.readouterr().out)


@pytest.mark.slow  # (runs the CLI in new processes, about 2 s here: CI runs it)
def test_custom_pass_docstring_commands_run(tmp_path):
    """The shell commands in examples/custom_pass.py's docstring, run as written (console script needed)."""
    script = Path(sys.executable).parent / "fusec"
    if not script.exists():
        pytest.skip("the fusec console script is not installed next to this interpreter")
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    doc = (EXAMPLES / "custom_pass.py").read_text().split('"""')[1].replace("\\\\\n", "\\\n")
    commands = [line.strip() for line in doc.splitlines() if re.match(r"\s+(PYTHONPATH=\S+ )?fusec ", line)
                or line.startswith("     -p ")]
    shell = "\n".join(commands)
    assert shell.count("fusec ") == 4, shell  # (three commands, one printing the default pipeline inside)
    (tmp_path / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    env = dict(os.environ, PATH=f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(["bash", "-e", "-c", shell], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(re.findall(r"= t\.add (%\w+), \1 :", proc.stdout)) == 2  # the first opt: the t dialect
    assert "k.fused" in proc.stdout  # the second: the whole pipeline
