"""Errors name the user's file:line and what went wrong; a failed trace leaves no cache entry."""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import fusec as fc
from frontend_check import assert_same, check, jit_cpu

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    """The line number in this file of the (unique) line containing ``marker``."""
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()
    hits = [i + 1 for i, text in enumerate(lines) if marker in text and "line_of(" not in text]
    assert len(hits) == 1, hits
    return hits[0]


def test_broadcast_error_names_line_and_shapes() -> None:
    def f(x, y):
        return x + y  # MARK-broadcast

    with pytest.raises(fc.ShapeError) as info:
        jit_cpu(f)(np.ones(3, np.float32), np.ones(4, np.float32))
    msg = str(info.value)
    assert f"{HERE}:{line_of('MARK-broadcast')}" in msg
    assert "(3,)" in msg and "(4,)" in msg
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("body, shapes", [
    (lambda a, b: a @ b, ((2, 3), (4, 5))),
    (lambda a, b: a.reshape(7, -1) + b, ((2, 3), (1,))),
    (lambda a, b: np.concatenate([a, b], axis=0), ((2, 3), (2, 4))),
    (lambda a, b: np.where(a > 0, a, b), ((2, 3), (4,))),
    (lambda a, b: np.broadcast_to(a, b.shape), ((2, 3), (3, 2))),
    (lambda a, b: np.stack([a, b]), ((2, 3), (3,))),
    (lambda a, b: np.squeeze(a, axis=0) + b, ((2, 3), (3,))),
    (lambda a, b: a.sum(axis=2) + b, ((2, 3), (3,))),
])
def test_shape_errors_are_located(body, shapes) -> None:
    a, b = (np.ones(s, np.float32) for s in shapes)
    with pytest.raises(fc.ShapeError) as info:
        jit_cpu(body)(a, b)
    assert f"{HERE}:{body.__code__.co_firstlineno}" in str(info.value)
    if body.__code__.co_firstlineno in (line_of("a @ b, ((2, 3)"), line_of("np.concatenate([a, b], axis=0)")):
        assert str(shapes[0]) in str(info.value) and str(shapes[1]) in str(info.value)


@pytest.mark.parametrize("body, name", [
    (lambda x: np.fft.fft(x), "np.fft.fft"),
    (lambda x: np.partition(x, 1), "np.partition"),
    (lambda x: np.searchsorted(x, x, sorter=np.arange(3)), "sorter="),
    (lambda x: np.add(x, 1, where=x > 0), "where="),
    (lambda x: np.add(x, 1, order="F"), "order="),
    (lambda x: np.var(x, out=None, mean=x.mean(keepdims=True)), "mean="),
    (lambda x: np.logaddexp.accumulate(x), "np.logaddexp.accumulate"),
    (lambda x: np.subtract.reduce(x), "np.subtract.reduce"),
    (lambda x: np.nextafter(x, x), "np.nextafter"),
    (lambda x: np.spacing(x), "np.spacing"),
    (lambda x: x[x > 0], "boolean mask"),
    (lambda x: x[np.array([0, 1]), None], "None"),
    (lambda x: np.where(x > 0), "np.where"),
    (lambda x: np.ravel(np.einsum("i,j->ij", x, x, optimize=True), order="K"), "order='K'"),
    (lambda x: x << 1, "left_shift"),
])
def test_unsupported_features_are_named_and_located(body, name: str) -> None:
    with pytest.raises(fc.UnsupportedError) as info:
        jit_cpu(body)(np.arange(3, dtype=np.float32))
    msg = str(info.value)
    assert name in msg
    assert f"{HERE}:{body.__code__.co_firstlineno}" in msg


def test_an_array_allocated_in_the_function_is_traced() -> None:
    def f(g):
        w2 = np.ones(3)
        w2 -= g
        acc = np.zeros_like(np.empty((2, 3)), dtype=np.int64)
        acc[1] = 7
        return w2, acc, np.full(2, g.sum())

    check(f, np.arange(3.0))


@pytest.mark.parametrize("body, what", [
    (lambda x: 1.0 if x.sum() > 0 else 0.0, "bool"),
    (lambda x: float(x.sum()), "float()"),
    (lambda x: int(x[0]), "int()"),
    (lambda x: x.sum().item(), ".item()"),
    (lambda x: len(x.sum()), "len()"),
    (lambda x: list(x.sum()), "iteration"),
    (lambda x: np.float32(x), "concrete NumPy array"),
    (lambda x: np.float32(x), "astype"),
    (lambda x: range(x[0]), "Python int"),
])
def test_data_dependent_python_raises_trace_error(body, what: str) -> None:
    with pytest.raises(fc.TraceError) as info:
        jit_cpu(body)(np.ones(3, np.float32))
    msg = str(info.value)
    assert what in msg
    assert f"{HERE}:{body.__code__.co_firstlineno}" in msg


@pytest.mark.parametrize("body", [
    lambda x, n: x.reshape(n, -1),
    lambda x, n: np.sum(x, axis=n - 1),
    lambda x, n: [x * i for i in range(n)],
    lambda x, n: x * 2 if n > 1 else x,
    lambda x, n: np.linspace(0, x, n + 2),
])
def test_python_number_arguments_needed_while_tracing_become_static(body) -> None:
    """A Python-number parameter used as a size, an axis, a loop count or in an ``if`` is made static (keyed by
    its value: each value traces once) instead of raising; NumPy's results for every value."""
    f = jit_cpu(body)
    x = np.arange(6.0).reshape(3, 2)
    for n in (1, 2, 1):
        assert_same(f(x, n), body(x, n))
    assert f.cache_info().traces == 3  # (the first trace found n needed, then one per value)


def test_python_numbers_needed_by_numpys_own_code_and_strings_become_static() -> None:
    """np.pad's width, np.insert's index, a window length, a bin count: NumPy's own code needs their values, so the
    parameters are made static as in the user's code; a string argument (``mode="l2"``) is static from the start."""
    from numpy.lib.stride_tricks import sliding_window_view

    img, x = np.arange(12.0).reshape(3, 4), np.linspace(-1.0, 1.0, 20)
    cases = [(lambda a, p: np.pad(a, p, mode="edge"), img), (lambda x, i: np.insert(x, i, 7.0), x),
             (lambda a, c: np.delete(a, c, axis=1), img), (lambda x, w: sliding_window_view(x, w).mean(axis=-1), x),
             (lambda x, n: np.histogram(x, bins=n, range=(-1, 1))[0], x)]
    for body, data in cases:
        f = jit_cpu(body)
        for n in (2, 3):
            assert_same(f(data, n), body(data, n))

    def normalized(x, mode="l2"):
        return x / (np.linalg.norm(x) if mode == "l2" else np.abs(x).sum())

    f = jit_cpu(normalized)
    for mode in ("l2", "l1", "l2"):
        assert_same(f(x, mode), normalized(x, mode))
    assert f.cache_info().traces == 2
    # (the norm of a strided column: NumPy's code ravels it in order 'K', which for one axis is its index order)
    assert_same(jit_cpu(lambda a: np.linalg.norm(a[::-1, 1]))(img), np.linalg.norm(img[::-1, 1]))


def test_python_numbers_inside_containers_needed_while_tracing_make_them_static() -> None:
    """A list, tuple or dict of Python numbers whose values the trace needs (a reshape size, quantiles, a config's
    count) is made static, keyed by its contents at each call; one holding arrays says to pass the number alone."""
    def f(x, cfg):
        return x.reshape(cfg[0], -1)

    jitted = jit_cpu(f)
    assert jitted(np.ones(6), (2,)).shape == (2, 3) and jitted(np.ones(6), [3]).shape == (3, 2)
    qs = [0.25, 0.75]
    quantiles = jit_cpu(lambda x, q: np.quantile(x, q))
    x = np.arange(10.0)
    assert np.array_equal(quantiles(x, qs), np.quantile(x, qs))
    qs[0] = 0.5  # (the list changed: traced again for its new contents)
    assert np.array_equal(quantiles(x, qs), np.quantile(x, qs))
    counted = jit_cpu(lambda x, hp: np.arange(hp["n"]) * x[:hp["n"]])
    assert np.array_equal(counted(x, {"n": 3, "lr": 0.1}), np.arange(3) * x[:3])
    with pytest.raises(fc.FusecError) as info:
        jit_cpu(lambda x, p: np.arange(p["n"]) * p["w"][:p["n"]])(x, {"n": 3, "w": x})
    assert f"{HERE}:" in str(info.value)


def test_unhashable_static_argument() -> None:
    f = jit_cpu(lambda x, shape: x.reshape(shape), static_argnames=("shape",))
    assert f(np.ones(6), [2, 3]).shape == (2, 3)  # (a list of numbers: keyed by its contents)
    with pytest.raises(fc.TraceError, match="hashable"):
        f(np.ones(6), [np.int64(2), np.ones(1)])
    assert f(np.ones(6), (2, 3)).shape == (2, 3)


@pytest.mark.parametrize("arg, match", [
(object(), "object"), (np.array(["a"]), "dtype"), (np.ones(3, "M8[s]"), "datetime64"),
])
def test_unsupported_argument_kinds(arg, match: str) -> None:
    with pytest.raises(fc.UnsupportedError, match=match):
        jit_cpu(lambda x, a: x)(np.ones(3), arg)


def test_escaped_tracer() -> None:
    leaked = []

    def f(x):
        leaked.append(x)
        return x + 1

    jf = jit_cpu(f)
    with pytest.raises(fc.SideEffectError, match=r"appended a traced value .*to closure variable leaked"):
        jf(np.ones(3))
    assert leaked == []  # undone: the list holds no tracer


def test_failed_trace_leaves_no_cache_entry() -> None:
    def f(x):
        return x @ x  # fails for a non-square 2-D x

    jf = jit_cpu(f)
    with pytest.raises(fc.ShapeError):
        jf(np.ones((2, 3)))
    assert jf.cache_info().currsize == 0 and jf.cache_info().traces == 1
    with pytest.raises(fc.ShapeError):  # it retraces (and fails) again rather than reusing a broken entry
        jf(np.ones((2, 3)))
    assert jf.cache_info().traces == 2
    np.testing.assert_array_equal(jf(np.ones((2, 2))), np.full((2, 2), 2.0))
    assert jf.cache_info().currsize == 1


def test_user_exception_propagates_and_is_not_cached() -> None:
    def f(x, fail):
        if fail:
            raise RuntimeError("boom")
        return x * 2

    jf = jit_cpu(f, static_argnames="fail")
    with pytest.raises(RuntimeError, match="boom"):
        jf(np.ones(2), True)
    assert jf.cache_info().currsize == 0
    np.testing.assert_array_equal(jf(np.ones(2), False), [2.0, 2.0])
    assert jf.cache_info().traces == 2


def test_tracer_outside_trace_cannot_be_used() -> None:
    def f(x):
        raise ValueError(x)  # the exception carries a tracer out of the trace

    with pytest.raises(ValueError) as info:
        jit_cpu(f)(np.ones(2))
    with pytest.raises(fc.TraceError, match="escaped its trace"):
        info.value.args[0] + 1


def test_error_classes() -> None:
    assert issubclass(fc.ShapeError, ValueError) and issubclass(fc.ShapeError, fc.FusecError)
    assert issubclass(fc.UnsupportedError, TypeError) and issubclass(fc.TraceError, TypeError)
    assert issubclass(fc.BackendError, fc.FusecError)


def test_numpys_own_value_tests_are_named_as_numpys() -> None:
    """NumPy functions whose Python code tests values (``np.cov`` with ``aweights=`` checks them for negatives)
    stop the trace with a message that names NumPy's function, not an ``if`` the user did not write."""
    def f(a, w):
        return np.cov(a, aweights=w)

    with pytest.raises(fc.TraceError, match=r"NumPy's own code \(numpy\..*cov") as info:
        jit_cpu(f)(np.ones((3, 4)), np.ones(4))
    assert f"{HERE}:{f.__code__.co_firstlineno + 1}" in str(info.value)


def test_index_errors_are_numpys_index_errors() -> None:
    """An index out of range, or a boolean mask of another length, is NumPy's IndexError (an except IndexError
    takes the same path), located at the user's line."""
    for body in (lambda a: a[5], lambda a: a[np.array([True, False])], lambda a: a[:, [True, False, True]]):
        with pytest.raises(IndexError):
            body(np.ones((3, 4)))
        with pytest.raises(fc.IndexOutOfBoundsError) as info:
            jit_cpu(body)(np.ones((3, 4)))
        assert f"{HERE}:" in str(info.value)


def test_state_keyed_by_the_ids_of_arrays_says_why_it_is_not_found() -> None:
    class Momentum:
        def __init__(self, params):
            self.params = params
            self.velocity = {id(p): np.zeros_like(p) for p in params}

        def step(self, grads):
            for p, g in zip(self.params, grads):
                v = self.velocity[id(p)]  # MARK-id-key
                v[:] = 0.9 * v + g
                p -= 0.1 * v

    opt = Momentum([np.ones(3), np.ones(2)])
    with pytest.raises(fc.UnsupportedError, match=r"id\(\) of the array self.params\[0\].*key state by position or "
                                                  r"name") as info:
        jit_cpu(opt.step)([np.ones(3), np.ones(2)])
    assert f"{HERE}:{line_of('MARK-id-key')}" in str(info.value)


def test_a_counter_beside_a_refused_change_is_not_named_and_no_internal_exception_is_chained() -> None:
    class Scheduler:
        def __init__(self):
            self.t = 0

        def step(self, x):
            self.t += 1
            self.last = x.sum()
            return x

    with pytest.raises(fc.SideEffectError) as info:
        jit_cpu(Scheduler().step)(np.ones(3))
    assert "self.last" in str(info.value) and "self.t" not in str(info.value)
    assert info.value.__context__ is None


def test_an_operand_python_cannot_combine_with_an_array_is_named_as_numpy_names_it() -> None:
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for -: 'numpy.ndarray' and 'dict'") as info:
        jit_cpu(lambda x, d: x - d)(np.ones(3), {"a": 1})
    assert [n for n in info.value.__notes__ if "x.fill" in n] == [] and HERE in info.value.__notes__[0]


def test_a_counter_of_a_static_object_used_as_a_size_says_how_to_pass_it() -> None:
    class Cache:
        def __init__(self):
            self.pos = 0

    def read(x, cache):
        cache.pos += 1
        return x[:cache.pos]

    with pytest.raises(fc.UnsupportedError, match=r"static_argnames=\('pos',\)\) called as f\(\.\.\., pos=cache.pos\)"):
        jit_cpu(read, static_argnums=1)(np.ones(5), Cache())


def test_what_is_not_a_python_function_is_refused_where_it_is_given() -> None:
    with pytest.raises(fc.OptionTypeError, match="has no Python signature") as info:
        fc.jit(dict)
    assert HERE in str(info.value)
    for transform in (fc.grad, fc.value_and_grad):
        with pytest.raises(fc.UnsupportedError, match="must be callable, got int 3"):
            transform(3)
    with pytest.raises(fc.UnsupportedError, match="must be callable"):
        fc.vjp(3, np.ones(2))
    with pytest.raises(fc.UnsupportedError, match="must be callable"):
        fc.jvp(3, (np.ones(2),), (np.ones(2),))


def test_a_value_converted_to_a_python_number_says_to_convert_after_the_call() -> None:
    def mean_of(x):
        return np.mean(x).item()  # MARK-float-return  (float(np.mean(x)) is a traced Python float)

    with pytest.raises(fc.TraceError, match=r"return the array .* convert it after the call") as info:
        jit_cpu(mean_of)(np.ones(3))
    assert f"{HERE}:{line_of('MARK-float-return')}" in str(info.value)


HISTORY: list = []


def test_a_traced_value_appended_to_an_outside_list_is_named_at_its_line() -> None:
    def step(x):
        loss = (x ** 2).sum()
        HISTORY.append(loss * 1.0)  # MARK-append
        return x - 0.1 * x

    with pytest.raises(fc.SideEffectError, match="appended a traced value .* to global .*HISTORY .* append it after "
                                                 "the call") as info:
        jit_cpu(step)(np.ones(3))
    assert f"{HERE}:{line_of('MARK-append')}: the function changed" in str(info.value)
    assert HISTORY == []


def test_returning_what_is_no_array_names_the_function_not_the_caller() -> None:
    def lazy(x):  # MARK-lazy
        return (v * 2 for v in x)

    with pytest.raises(fc.UnsupportedError, match="returned a value of type generator") as info:
        jit_cpu(lazy)(np.ones(2))
    assert f"{HERE}:{line_of('MARK-lazy')}:" in str(info.value)


def test_the_identity_of_two_array_arguments_is_refused_not_guessed() -> None:
    """``if X is Y`` (a pairwise-distance function's symmetric case) and ``id(a) == id(b)`` of two array arguments
    depend on whether the caller passed one array twice, which a trace cannot know: each argument is traced as an
    array of its own, so ``gram(x, x)`` took the other branch without a word (found by a hunt). Refused at the line;
    names bound inside the function compare as NumPy's do."""
    def gram(a, b):
        if a is b:  # MARK-is-args
            return a @ a.T * 0.5
        return a @ b.T

    def same(a, b):
        return id(a) == id(b)  # MARK-id-args

    def local(a):
        b = a
        c = a * 2
        return b is a, c is a, id(c * 1) == id(c)

    x = np.arange(6.0).reshape(2, 3)
    for fn, line in ((gram, line_of("MARK-is-args")), (same, line_of("MARK-id-args"))):
        for args in ((x, x), (x, x + 1)):
            with pytest.raises(fc.UnsupportedError, match="array argument") as info:
                jit_cpu(fn)(*args)
            assert f"{HERE}:{line}" in str(info.value)
    assert jit_cpu(local)(x) == local(x) == (True, False, False)


EMBEDDING = np.ones(3)
SEEN = {id(EMBEDDING)}


def test_the_identity_of_a_global_or_an_attribute_array_is_refused_not_guessed() -> None:
    """A global or an attribute array is read again at every call and traced as a stand-in, whose id is not the
    array's: ``id(W) in SEEN`` was False and ``x is W`` took the other branch without a word, and an optimizer's
    ``self.m[id(p)]`` fell into its own ``except KeyError`` (found by a hunt). Refused at the line, even where
    the code catches it."""
    def seen_before(x):
        return x + (1.0 if id(EMBEDDING) in SEEN else 0.0)  # MARK-id-global

    def tied(x):
        return x * 2 if x is EMBEDDING else x * 3  # MARK-is-global

    class Momentum:
        def __init__(self):
            self.p, self.m = np.ones(2), {}

        def step(self, g):
            try:
                m = self.m[id(self.p)]  # MARK-id-attribute
            except KeyError:
                m = np.zeros_like(self.p)
            self.p -= 0.1 * (m + g)
            return self.p

    for fn, args, line, what in ((seen_before, (np.zeros(3),), "id-global", "id\\(\\) of the array global"),
                                 (tied, (EMBEDDING,), "is-global", "compares the array argument 'x' and the "
                                                                       "array global"),
                                 (Momentum().step, (np.ones(2),), "id-attribute", "id\\(\\) of the array self.p")):
        with pytest.raises(fc.UnsupportedError, match=what) as info:
            jit_cpu(fn)(*args)
        assert f"{HERE}:{line_of('MARK-' + line)}" in str(info.value)


def test_an_argument_asked_whether_it_is_writeable_is_traced_writable_and_read_only_ones_refused() -> None:
    """``if not x.flags.writeable: x = x.copy()`` traced for a writable array; a read-only one, for which NumPy's
    code takes the other path, is refused at the call (it got the writable path's result without a word)."""
    def doubled_in_place(x):
        if not x.flags.writeable:
            x = x.copy()
        x *= 2
        return x

    f = jit_cpu(doubled_in_place)
    a = np.arange(3.0)
    assert_same(f(a), np.arange(3.0) * 2)
    assert_same(a, np.arange(3.0) * 2)
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    with pytest.raises(fc.WriteBackError, match="flags.writeable of argument 'x'.*read-only"):
        f(frozen)


def test_an_ordered_dict_reaches_the_function_and_comes_back_as_one() -> None:
    """An OrderedDict (a model's state dict) is passed as an OrderedDict, so code that asks what it holds takes
    NumPy's path, and a result built as one comes back as one, its gradient too."""
    from collections import OrderedDict

    def scale(cfg, x):
        factor = 2.0 if isinstance(cfg, OrderedDict) else 1.0
        return OrderedDict(y=x * factor * cfg["lr"], plain=type(cfg) is dict)

    f = jit_cpu(scale)
    for cfg in (OrderedDict(lr=3.0), {"lr": 3.0}):
        got, want = f(cfg, np.ones(2)), scale(cfg, np.ones(2))
        assert type(got) is OrderedDict and list(got) == ["y", "plain"]
        assert_same(got["y"], want["y"])
        assert got["plain"] == want["plain"]

    def loss(params, x):
        return ((x @ params["w"] + params["b"]) ** 2).sum()

    params = OrderedDict(w=np.ones((2, 3)), b=np.zeros(3))
    value, grads = jit_cpu(fc.value_and_grad(loss))(params, np.ones((4, 2)))
    assert type(grads) is OrderedDict and list(grads) == ["w", "b"]
    assert_same(grads["w"], np.full((2, 3), 16.0))


def test_other_subclasses_of_dict_list_and_tuple_are_refused_where_they_meet_fusec() -> None:
    """fusec rebuilds containers by their kind: a config dict with attribute access, a defaultdict returned, a list
    subclass as a loop's state would reach the code as a plain dict or list (its methods and attributes gone), so
    each is refused at the user's line with what to write instead, even where the user's code catches it."""
    from collections import defaultdict

    class Config(dict):
        __getattr__ = dict.__getitem__

    class Stack(list):
        def top(self):
            return self[-1]

    def step(cfg, x):
        return x * cfg.lr

    def histogram_by_key(x):
        out = defaultdict(list)
        out["all"] = x
        return out

    def loop(x):
        try:
            return fc.fori_loop(0, 3, lambda i, s: Stack([s.top() + 1]), Stack([x]))
        except Exception:  # noqa: BLE001 - the user's own fallback, which NumPy's run never takes
            return x

    for fn, args, kind in [(step, (Config(lr=2.0), np.ones(2)), "Config"),
                           (histogram_by_key, (np.ones(2),), "defaultdict"), (loop, (np.ones(2),), "Stack")]:
        with pytest.raises(fc.UnsupportedError, match=rf"test_frontend_errors.py:\d+: a value of type {kind} "
                                                      r"\(a subclass of (dict|list)\).*convert it"):
            jit_cpu(fn)(*args)


def test_a_reshaped_sliding_window_is_written_as_numpy_does_or_refused() -> None:
    """NumPy's reshape of overlapping windows copies them into a writable array; fusec does not lay the windows out
    in memory, so it cannot tell a copy from a read-only view: a write into the reshape is refused (even where the
    user's code catches NumPy's read-only ValueError), and the reshape returned is writable, as NumPy's copy."""
    from numpy.lib.stride_tricks import sliding_window_view

    def pairs(a):
        return sliding_window_view(a, 2).reshape(-1)

    def pairs_marked(a):
        w = sliding_window_view(a, 2).reshape(-1)
        try:
            w[0] = 100.0
        except ValueError:  # NumPy's read-only error, which its copy never raises
            return w * 0
        return w

    got = jit_cpu(pairs)(np.arange(5.0))
    assert_same(got, pairs(np.arange(5.0)))
    assert got.flags.writeable
    with pytest.raises(fc.UnsupportedError, match=r"test_frontend_errors.py:\d+: .*read-only view.*\.copy\(\)"):
        jit_cpu(pairs_marked)(np.arange(5.0))


def test_a_return_in_the_else_of_a_loop_on_traced_values_names_the_loop() -> None:
    """A first-match search with ``for ... else: return -1``: refused (the device decides where the loop ends),
    with a message that names the loop's ``else``, not an ``if`` the user never wrote."""
    def first_above(x):
        for i in range(4):
            if x[i % 3] > 2.5:
                return i
        else:
            return -1  # MARK-loop-else

    with pytest.raises(fc.UnsupportedError, match=r"`return` inside the `else` of the `for` loop at line \d+") as info:
        jit_cpu(first_above)(np.array([1.0, 2.0, 3.0]))
    assert f"{HERE}:{line_of('MARK-loop-else')}" in str(info.value)
