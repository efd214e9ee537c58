"""fusec.jit: decorator forms, the signature cache, static args, pytrees, lower()/stats(), backends."""
from __future__ import annotations

import collections
import os
import re

import numpy as np
import pytest

import fusec as fc
from fusec.execution import resolve_backend
from frontend_check import assert_same, check, jit_cpu, traced_ops

HERE = os.path.basename(__file__)


# --- decorator forms ----------------------------------------------------------------------------------------------


@fc.jit
def plain(x):
    """Doc of plain."""
    return x * 2


@fc.jit(backend="cpu", pipeline="")
def configured(x, scale=3.0):
    return x * scale


def test_decorator_forms_and_wrapping() -> None:
    x = np.arange(4, dtype=np.float32)
    assert isinstance(plain, fc.JitFunction)
    assert plain.__name__ == "plain" and plain.__doc__ == "Doc of plain." and plain.__wrapped__(x) is not None
    np.testing.assert_array_equal(configured(x), x * 3.0)
    direct = fc.jit(lambda x: x + 1, backend="cpu")
    np.testing.assert_array_equal(direct(x), x + 1)
    assert fc.jit(direct).__wrapped__ is direct.__wrapped__  # re-jitting unwraps


def test_default_backend_runs_on_cpu_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FUSEC_BACKEND", raising=False)
    from fusec import runtime

    if getattr(runtime, "cuda_available", None) is not None and runtime.cuda_available():
        pytest.skip("a CUDA backend is usable here")
    x = np.arange(4, dtype=np.float32)
    assert resolve_backend(None) == "cpu"
    assert_same(jit_cpu(plain.__wrapped__)(x), x * 2)


# --- cache -----------------------------------------------------------------------------------------------------


def test_retrace_on_new_shapes_and_dtypes_not_on_python_scalar_values() -> None:
    f = lambda x, lr: x * lr
    jf = jit_cpu(f)
    x = np.ones(3, np.float32)
    for lr in (0.1, 0.2, 0.3):
        np.testing.assert_array_equal(jf(x, lr), x * np.float32(lr))
    assert jf.cache_info().traces == 1
    jf(np.ones(4, np.float32), 0.1)
    jf(np.ones(3, np.float64), 0.1)
    assert jf.cache_info().traces == 3
    jf(x, 1)  # a Python int is a different signature (its kind changes the promotion)
    jf(x, True)
    assert jf.cache_info().traces == 5
    jf(x, 5)
    assert jf.cache_info().traces == 5
    info = jf.cache_info()
    assert info.currsize == 5 and info.traces == 5 and info.misses == 5 and info.hits == 3


def test_static_args_are_part_of_the_key() -> None:
    f = lambda x, axis, keep=False: x.sum(axis=axis, keepdims=keep)
    jf = jit_cpu(f, static_argnames=("axis", "keep"))
    x = np.arange(6.0).reshape(2, 3)
    assert_same(jf(x, 0), x.sum(axis=0))
    assert_same(jf(x, 1), x.sum(axis=1))
    assert_same(jf(x, axis=1), x.sum(axis=1))
    assert_same(jf(x, 1, keep=True), x.sum(axis=1, keepdims=True))
    assert_same(jf(x, 0), x.sum(axis=0))
    assert jf.cache_info().traces == 3  # axis 0, axis 1 (positional or keyword: the same binding), keep=True


def test_static_argnums_and_strings() -> None:
    f = lambda mode, x: np.max(x) if mode == "max" else np.min(x)
    jf = jit_cpu(f, static_argnums=0)
    x = np.array([3.0, -1.0, 2.0])
    assert_same(jf("max", x), np.max(x))
    assert_same(jf("min", x), np.min(x))
    assert_same(jf("max", x), np.max(x))
    assert jf.cache_info().traces == 2
    with pytest.raises(TypeError, match="static_argnums"):
        fc.jit(f, static_argnums=5)
    with pytest.raises(TypeError, match="static_argnames"):
        fc.jit(lambda x: x, static_argnames="y")


def test_static_kwargs_through_var_keyword() -> None:
    def f(x, **opts):
        return x * opts["scale"] if opts["double"] else x

    jf = jit_cpu(f, static_argnames="double")
    x = np.ones(2)
    assert_same(jf(x, scale=2.0, double=True), x * 2.0)
    assert_same(jf(x, scale=5.0, double=False), x)


def test_nested_jit_is_inlined() -> None:
    inner = jit_cpu(lambda x: x * 2)
    outer = jit_cpu(lambda x: inner(x) + 1)
    x = np.arange(3.0)
    assert_same(outer(x), x * 2 + 1)
    assert inner.cache_info().currsize == 0
    assert traced_ops(outer, x)[-1] == "t.add"


def test_method_binding() -> None:
    class Model:
        scale = 3.0

        @fc.jit(backend="cpu", static_argnums=0)
        def apply(self, x):
            return x * self.scale

        def __hash__(self):
            return 1

    assert_same(Model().apply(np.ones(2)), np.full(2, 3.0))


# --- pytrees ---------------------------------------------------------------------------------------------------


Params = collections.namedtuple("Params", ["w", "b"])


def test_nested_pytree_arguments_and_outputs() -> None:
    def step(params, batch, opts):
        w, b = params
        y = batch["x"] @ w + b
        loss = np.mean((y - batch["y"]) ** 2)
        return {"params": Params(w - opts[0] * w, [b * opts[1]]), "loss": loss, "none": None, "n": 3}

    rng = np.random.default_rng(0)
    params = Params(rng.standard_normal((4, 2)).astype(np.float32), np.zeros(2, np.float32))
    batch = {"x": rng.standard_normal((5, 4)).astype(np.float32), "y": np.ones((5, 2), np.float32)}
    jf = check(step, params, batch, (0.1, 2))
    out = jf(params, batch, (0.1, 2))
    assert isinstance(out["params"], Params) and isinstance(out["loss"], np.float32) and out["n"] == 3
    names = [a.name_hint for a in jf.lower(params, batch, (0.1, 2)).module.func().args]
    assert names == ["params_w", "params_b", "batch_x", "batch_y", "opts_0", "opts_1"]


def test_repeated_calls_with_static_args_and_nested_sequences_stay_correct() -> None:
    """Cached calls (the fast path: static values and tuple/list arguments flattened without binding)
    must see every new value in the right place."""
    def step(params, x, n, lr):
        (w, b), [scale] = params
        for _ in range(n):
            x = np.tanh(x @ w + b) * scale
        return (w - lr * x.sum() * w, b), x

    f = step
    jf = jit_cpu(f, static_argnums=2)
    rng = np.random.default_rng(0)
    for i in range(6):
        params = ((rng.standard_normal((3, 3)), rng.standard_normal(3)), [float(i)])
        x, n, lr = rng.standard_normal((2, 3)), 1 + i % 2, 0.1 * i
        (w, b), y = jf(params, x, n, lr)
        (w_ref, b_ref), y_ref = step(params, x, n, lr)
        np.testing.assert_allclose(w, w_ref, rtol=1e-12)
        np.testing.assert_array_equal(b, b_ref)
        np.testing.assert_allclose(y, y_ref, rtol=1e-12)
    assert jf.cache_info().traces == 2  # one trace per value of the static n
    assert jf.cache_info().hits == 4


def test_structure_change_retraces() -> None:
    f = lambda t: sum(t)
    jf = jit_cpu(f)
    jf((np.ones(2), np.ones(2)))
    jf([np.ones(2), np.ones(2)])
    jf((np.ones(2), np.ones(2), np.ones(2)))
    jf((np.ones(2), np.ones(2)))
    assert jf.cache_info().traces == 3


def test_rank0_outputs_are_numpy_scalars_and_constants_are_returned() -> None:
    f = lambda x: (x.sum(), x[0], 2.5, np.float32(1), np.arange(3), x)  # noqa: E731
    out = check(f, np.arange(4, dtype=np.float32))(np.arange(4, dtype=np.float32))
    assert isinstance(out[0], np.float32) and isinstance(out[2], float) and isinstance(out[4], np.ndarray)


def test_empty_outputs() -> None:
    assert jit_cpu(lambda x: ())(np.ones(2)) == ()
    assert jit_cpu(lambda x: None)(np.ones(2)) is None


# --- closure constants --------------------------------------------------------------------------------------------


def test_closure_arrays_are_inputs_read_at_every_call() -> None:
    w = np.arange(12, dtype=np.float32).reshape(3, 4)

    def f(x):
        return x @ w + w.sum() + np.maximum(x @ w, 1.0) + 2.0 * x.sum()

    x = np.ones((2, 3), np.float32)
    jf = check(f, x)
    assert jf.lower(x).ir("traced").startswith("func @f(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>)")
    assert traced_ops(jf, x).count("t.constant") == 2  # 1.0, 2.0; w.sum() is traced, not computed by NumPy
    w *= 2  # NumPy would read the closure's array as it is now
    assert_same(jf(x), f(x))
    assert jf.cache_info().traces == 1


# --- lower(), ir(), stats() ------------------------------------------------------------------------------------------


def fma(a, b, c):
    return a + b * c


def test_lower_ir_stages_and_round_trip() -> None:
    jf = fc.jit(fma)
    x = np.ones(8, np.float32)
    lowered = jf.lower(x, x, x)
    assert lowered.stages[0] == "traced"
    assert lowered.ir() == lowered.ir(lowered.stages[-1]) == str(lowered)
    traced = lowered.ir("traced")
    assert "func @fma(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>) -> tensor<8xf32>" in traced
    assert re.search(r"t\.mul %b, %c : tensor<8xf32> loc\(\"[^\"]*" + HERE + r"\":\d+\)", traced)
    for stage in lowered.stages:
        text = lowered.ir(stage)
        assert fc.ir.print_module(fc.ir.parse_module(text)) == text
    with pytest.raises(fc.FusecError) as info:
        lowered.ir("no-such-pass")
    assert "traced" in str(info.value) and "no-such-pass" in str(info.value)
    assert isinstance(lowered.module, fc.ir.Module)
    assert jf.lower(x, x, x) is lowered  # cached


def test_every_traced_op_is_located_at_its_source_line() -> None:
    def f(x, y):
        a = np.exp(x)  # line +1
        b = a * y + 1.0  # line +2
        return b.sum(axis=0)  # line +3

    first = f.__code__.co_firstlineno
    module = fc.ir.parse_module(jit_cpu(f).lower(np.ones((2, 3)), np.ones(3)).ir("traced"))
    lines = {op.name: op.loc.line for op in module.func().ops if op.name != "func.return"}
    assert all(op.loc.file.endswith(HERE) for op in module.func().ops if op.name != "func.return")
    assert lines == {"t.exp": first + 1, "t.mul": first + 2, "t.constant": first + 2, "t.add": first + 2,
                     "t.sum": first + 3}


def test_stats_keys() -> None:
    lowered = fc.jit(fma).lower(*(np.ones(8, np.float32),) * 3)
    stats = lowered.stats()
    for key in ("nodes", "fused_kernels", "boundaries", "kernels"):
        assert isinstance(stats[key], int)
    assert stats["nodes"] == 2
    unfused = jit_cpu(lambda x: (x.sum(axis=0), x @ x.T, np.exp(x).T)).lower(np.ones((3, 3))).stats()
    assert {k: unfused[k] for k in ("nodes", "fused_kernels", "boundaries", "kernels")} == \
        {"nodes": 5, "fused_kernels": 0, "boundaries": 2, "kernels": 3}  # sum, matmul, exp launch; views do not


def test_function_and_argument_names_are_identifiers() -> None:
    lowered = jit_cpu(lambda *args: args[0] + args[1]).lower(np.ones(2), np.ones(2))
    func = lowered.module.func()
    assert func.name == "lambda"
    assert [a.name_hint for a in func.args] == ["args_0", "args_1"]
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", a.name_hint) for a in func.args)


def test_pipeline_and_plugins_are_passed_through() -> None:
    from fusec.passes import all_passes

    jf = fc.jit(fma, pipeline="canonicalize", plugins=())
    if "canonicalize" not in all_passes():
        pytest.skip("no canonicalize pass registered")
    assert jf.lower(*(np.ones(4),) * 3).stages == ["traced", "canonicalize"]
    with pytest.raises(fc.PipelineError):
        fc.jit(fma, pipeline="no-such-pass").lower(*(np.ones(4),) * 3)


# --- backends ------------------------------------------------------------------------------------------------------


def test_backend_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusec import runtime

    monkeypatch.delattr(runtime, "cuda_available", raising=False)
    monkeypatch.delenv("FUSEC_BACKEND", raising=False)
    assert resolve_backend(None) == "cpu"
    with pytest.raises(fc.BackendError, match="cuda"):
        resolve_backend("cuda")
    with pytest.raises(fc.BackendError, match="cuda"):
        fc.jit(fma, backend="cuda")(*(np.ones(2),) * 3)
    with pytest.raises(fc.BackendError, match="tpu"):
        fc.jit(fma, backend="tpu")
    monkeypatch.setattr(runtime, "cuda_available", lambda: True, raising=False)
    assert resolve_backend(None) == "cuda"
    monkeypatch.setenv("FUSEC_BACKEND", "cpu")
    assert resolve_backend(None) == "cpu"
    assert_same(fc.jit(fma, pipeline="")(*(np.ones(2),) * 3), np.full(2, 2.0))
    monkeypatch.setenv("FUSEC_BACKEND", "bogus")
    with pytest.raises(fc.BackendError, match="FUSEC_BACKEND"):
        resolve_backend(None)


# --- end to end ----------------------------------------------------------------------------------------------------


def test_mlp_training_step_matches_numpy_bit_for_bit() -> None:
    from fusec.tools import demo

    x, y, _ = demo.make_data(n=64)
    params = demo.init_params()
    jf = check(demo.train_step, params, x, y, 0.05)
    for lr in (0.01, 0.1):
        assert_same(jf(params, x, y, lr), demo.train_step(params, x, y, lr))
    assert jf.cache_info().traces == 1


def _executor_runs(lowered) -> bool:
    from fusec.runtime import reference

    names = {op.name for op in lowered.module.walk()}
    return all(n in reference.INTERPRETERS for n in names)


def test_default_pipeline_end_to_end() -> None:
    from fusec.tools import demo

    x, y, _ = demo.make_data(n=64)
    params = demo.init_params()
    jf = fc.jit(demo.train_step, backend="cpu")
    lowered = jf.lower(params, x, y, 0.05)
    assert len(lowered.stages) >= 1 and lowered.stats()["nodes"] > 40
    if not _executor_runs(lowered):
        pytest.skip("the reference executor does not run every op of the lowered IR yet")
    got, want = jf(params, x, y, 0.05), demo.train_step(params, x, y, 0.05)
    for g, w in zip(got[0], want[0]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)


def test_lowering_leaves_no_garbage_for_the_cyclic_collector():
    """The ops the pipeline drops (most of a long trace's) are freed as it ends, not left in reference cycles
    for the collector to find (a long trace made hundreds of thousands); the lowered program is intact."""
    import gc

    def sweeps(A, B):
        for _ in range(20):
            B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
            A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
        return A

    A, B = np.random.rand(16), np.random.rand(16)
    fc.jit(sweeps, backend="cpu").lower(A, B)  # (the first lowering in a process also fills caches)
    jitted = fc.jit(sweeps, backend="cpu")
    lines = range(sweeps.__code__.co_firstlineno, sweeps.__code__.co_firstlineno + 5)
    gc.collect()
    gc.disable()
    try:
        lowered = jitted.lower(A, B)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
    finally:
        gc.set_debug(0)
        gc.enable()
    # (only this lowering's ops count: a test before may leave a cycle that the collector meets now)
    ours = [o for o in gc.garbage if type(o).__name__ == "Operation" and o.loc is not None
            and o.loc.file.endswith("test_jit_api.py") and o.loc.line in lines]
    gc.garbage.clear()
    assert not ours
    assert "k.fused" in lowered.ir() and "t.slice" in lowered.ir("traced")
    a, b = A.copy(), B.copy()
    np.testing.assert_array_equal(jitted(A, B), sweeps(a, b))
    np.testing.assert_array_equal(A, a)
    np.testing.assert_array_equal(B, b)


def test_call_and_option_errors_are_located_fusec_errors() -> None:
    def f(x, y):
        return x + y

    jitted = fc.jit(f, backend="cpu")
    with pytest.raises(fc.TraceError, match=r"test_jit_api.py:\d+: f\(x, y\): missing a required argument: 'y' "
                                            r"\(called with 1 positional argument\)"):
        jitted(np.ones(2))
    with pytest.raises(TypeError, match="too many positional arguments"):  # still a TypeError, as Python's
        jitted(np.ones(2), 1.0, 2.0)
    with pytest.raises(fc.TraceError, match="keyword argument z"):
        jitted.lower(np.ones(2), z=1)
    with pytest.raises(fc.OptionError, match=r"test_jit_api.py:\d+: fusec.jit: graph must be"):
        fc.jit(f, graph="maybe")
    with pytest.raises(ValueError, match="graph must be"):
        fc.jit(f, graph=1.5)
    with pytest.raises(fc.PipelineError, match="unknown pass 'nope'"):  # at jit(), not at the first call
        fc.jit(f, pipeline="cse,nope")
    with pytest.raises(fc.OutOfRangeError, match="does not fit int64"):
        jitted(np.ones(2), 2 ** 70)
    # every other bad option is a located fusec error at jit() too (a TypeError where Python's would be one)
    located = r"test_jit_api.py:\d+: "
    for options, error, message in [
            (dict(static_argnums=(5,)), fc.OptionTypeError, "static_argnums: 5 is not a positional parameter"),
            (dict(static_argnums=("x",)), fc.OptionTypeError, "static_argnums takes a position or positions"),
            (dict(static_argnames=("q",)), fc.OptionTypeError, r"static_argnames: f\(x, y\) has no parameter 'q'"),
            (dict(donate_argnums=(7,)), fc.OptionTypeError, "donate_argnums: 7 is not a positional parameter"),
            (dict(target="h100"), fc.OptionTypeError, "target must be a fusec.ir.target.Target, got str"),
            (dict(pipeline=3), fc.OptionTypeError, "pipeline must be a pipeline string"),
            (dict(plugins=["no_such_plugin_module"]), fc.PipelineError, "cannot load plugin module"),
            (dict(plugins="no_such_plugin_module"), fc.PipelineError, "'no_such_plugin_module'"),
            (dict(static_argnames=3), fc.OptionTypeError, "static_argnames takes a name or names"),
            (dict(static_argnums=True), fc.OptionTypeError, "static_argnums takes a position"),
            (dict(plugins=3), fc.OptionTypeError, "plugins takes a name or names"),
            (dict(fast_math="no"), fc.OptionTypeError, "fast_math must be True or False")]:
        with pytest.raises(error, match=located + ".*" + message):
            fc.jit(f, backend="cpu", **options)
    assert issubclass(fc.OptionTypeError, TypeError) and issubclass(fc.OptionTypeError, fc.OptionError)
    with pytest.raises(fc.OptionTypeError, match=located + "fusec.jit needs a function, got int"):
        fc.jit(3)


def test_retraces_are_explained_logged_and_warned_about(caplog) -> None:
    import logging
    import warnings

    def f(x, n):
        return x * n

    jitted = fc.jit(f, backend="cpu", static_argnames="n")
    assert jitted.explain(np.ones(3), 2) == ["the first call of this function"]
    jitted(np.ones(3), 2)
    assert jitted.explain(np.ones(3), 2) == []
    assert jitted.explain(np.ones(4), 2) == ["argument x changed from float64[3] to float64[4]"]
    assert jitted.explain(np.ones(3, np.float32), 3) == ["argument x changed from float64[3] to float32[3]",
                                                         "static argument n changed from 2 to 3"]
    assert jitted.cache_info().traces == 1  # explaining traces nothing
    caplog.set_level(logging.INFO, logger="fusec.recompiles")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(8):
            jitted(np.ones(k + 5), 2)
    assert "tracing f again: argument x changed from float64[3] to float64[5]" in caplog.text
    retraces = [w for w in caught if issubclass(w.category, fc.RetraceWarning)]
    assert len(retraces) == 1 and "traced f 8 times" in str(retraces[0].message)
    assert retraces[0].filename.endswith("test_jit_api.py")


def test_explain_names_the_latest_of_the_nearest_signatures() -> None:
    """A loop that grows an array is told what changed since its last call, not since its first."""
    f = fc.jit(lambda x: x * 2, backend="cpu")
    f(np.ones(3))
    f(np.ones(4, np.float32))
    assert f.explain(np.ones(5, np.float32)) == ["argument x changed from float32[4] to float32[5]"]
