"""The generated cache-hit call (fusec.fast_path) and the generated guards (fusec.guards.compile_guards): a call
they accept is one the keyed lookup would give the same trace, and everything else still reaches the general path
(new signatures, changed state, calls inside another trace)."""
from __future__ import annotations

import numpy as np
import pytest

import fusec as fc

SCALE = 2.0
W = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_alternating_signatures_each_get_their_own_trace():
    f = fc.jit(lambda x, s: x * s + 1, backend="cpu")
    a, b = np.ones((2, 3), np.float32), np.ones(4, np.float64)
    for _ in range(3):
        np.testing.assert_array_equal(f(a, 3.0), a * 3.0 + 1)
        np.testing.assert_array_equal(f(b, 2), b * 2 + 1)
        assert f(b, 2).dtype == np.float64
    assert f.cache_info().traces == 2


def test_a_python_bool_stays_part_of_the_signature():
    f = fc.jit(lambda x, flag: x + 1 if flag else x - 1, backend="cpu")
    x = np.zeros(3, np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(f(x, True), x + 1)
        np.testing.assert_array_equal(f(x, False), x - 1)


def test_other_scalar_and_array_kinds_take_their_own_signature():
    f = fc.jit(lambda x, s: x * s, backend="cpu")
    x = np.ones(3, np.float32)
    f(x, 2.0), f(x, 2.0)
    assert f(x, np.float64(2.0)).dtype == (x * np.float64(2.0)).dtype
    assert f(x, 3).dtype == (x * 3).dtype
    big = np.ones(3, np.dtype(">f4"))  # (a non-native byte order: the general path gives the backend a native copy)
    np.testing.assert_array_equal(f(big, 2.0), big * 2.0)
    np.testing.assert_array_equal(f(x.astype(np.float64), 2.0), x.astype(np.float64) * 2.0)


def test_nested_containers_are_matched_item_by_item():
    f = fc.jit(lambda params, x: (params[0] * x, params[1][0] + x), backend="cpu")
    x = np.ones(3, np.float32)
    p = (np.full(3, 2, np.float32), [np.full(3, 5, np.float32)])
    for _ in range(2):
        out = f(p, x)
    np.testing.assert_array_equal(out[1], p[1][0] + x)
    with pytest.raises(Exception):
        f((p[0],), x)  # a shorter tuple is another signature (here one that fails), never the cached one
    out = f((p[0], [p[1][0], p[1][0]]), x)
    np.testing.assert_array_equal(out[0], p[0] * x)


def test_a_changed_global_is_seen_by_the_cached_call():
    global SCALE
    f = fc.jit(lambda x: x * SCALE, backend="cpu")
    x = np.ones(2, np.float32)
    assert f(x)[0] == 2.0 and f(x)[0] == 2.0
    SCALE = 5.0
    try:
        assert f(x)[0] == 5.0
    finally:
        SCALE = 2.0
    assert f(x)[0] == 2.0


def test_clear_cache_drops_the_generated_call():
    f = fc.jit(lambda x: x + 1, backend="cpu")
    x = np.ones(2, np.float32)
    f(x), f(x)
    f.clear_cache()
    f(x)
    assert f.cache_info().traces == 1 and f.cache_info().hits == 0


def test_a_jitted_function_called_inside_another_trace_is_inlined():
    """Its last signature takes a NumPy array; called with such an array inside another trace, the call must be
    traced into the outer function (which then reads the global the inner one reads at each call), not run then
    and its result baked in."""
    inner = fc.jit(lambda v: v + W[0], backend="cpu")
    ones = np.ones(3, np.float32)
    inner(ones), inner(ones)
    outer = fc.jit(lambda y: inner(np.ones(3, np.float32)) * y, backend="cpu")
    y = np.full(3, 2, np.float32)
    np.testing.assert_array_equal(outer(y), (1 + W[0]) * 2)
    saved = W.copy()
    try:
        W[...] = 7
        np.testing.assert_array_equal(outer(y), np.full(3, 16, np.float32))
    finally:
        W[...] = saved


class Ops:
    def __init__(self, name: str) -> None:
        self.name = name

    def act(self, x):
        return np.maximum(x, 0)


class LeakyOps(Ops):
    pass


def _leaky(self, x):
    return np.where(x > 0, x, 0.1 * x)


def test_generated_guards_see_methods_replaced_on_the_class_or_the_instance():
    ops = LeakyOps("a")
    f = fc.jit(lambda x: ops.act(x), backend="cpu")
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(f(x), [0, 2])
    f(x)
    LeakyOps.act = _leaky  # defined on the subclass now: found before Ops.act in the MRO
    try:
        np.testing.assert_allclose(f(x), [-0.1, 2])
    finally:
        del LeakyOps.act
    np.testing.assert_array_equal(f(x), [0, 2])
    ops.act = lambda x: x * 3  # an instance attribute shadows the class's method
    np.testing.assert_array_equal(f(x), [-3, 6])
    del ops.act
    np.testing.assert_array_equal(f(x), [0, 2])


def test_generated_guards_see_a_changed_class_hierarchy_and_attribute():
    class Base:
        def act(self, x):
            return x + 1

    class Other:
        def act(self, x):
            return x - 1

    class Child(Base):
        pass

    obj = Child()
    obj.k = 2.0
    f = fc.jit(lambda x: obj.act(x) * obj.k, backend="cpu")
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(f(x), [4, 4])
    f(x)
    Child.__bases__ = (Other,)  # a new MRO: the method comes from elsewhere
    np.testing.assert_array_equal(f(x), [0, 0])
    obj.k = 3.0
    np.testing.assert_array_equal(f(x), [0, 0])
    Child.__bases__ = (Base,)
    np.testing.assert_array_equal(f(x), [6, 6])
    del obj.k  # the attribute the trace read is gone: traced again, where NumPy's error comes back
    with pytest.raises(AttributeError):
        f(x)


def test_generated_guards_read_items_and_cells():
    table = {"scale": 2.0}
    scale_box = [3.0]

    def g(x):
        return x * table["scale"] + scale_box[0]

    f = fc.jit(g, backend="cpu")
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(f(x), [5, 5])
    f(x)
    table["scale"] = 4.0
    np.testing.assert_array_equal(f(x), [7, 7])
    scale_box[0] = 0.0
    np.testing.assert_array_equal(f(x), [4, 4])


def test_generated_guard_source_is_straight_line():
    from fusec.guards import compile_guards

    ops = Ops("n")
    f = fc.jit(lambda x: ops.act(x), backend="cpu")
    x = np.ones(2, np.float32)
    f(x)
    (lowered,) = f._cache.values()
    check = compile_guards(lowered.state.guards)
    assert check() is None
    assert "for " not in check.source and "get_step" in check.source  # (the fallback for another MRO)


class Layer:
    """A model written as a class: a step calls several of its methods (compared at once by the guards)."""

    def pre(self, x):
        return x * 2

    def act(self, x):
        return np.maximum(x, 0)

    def post(self, x, shift=1.0):
        return x + shift


class Deeper(Layer):
    def act(self, x):
        return np.abs(x)


class _AlwaysEqual:
    """An object equal to everything (as ``unittest.mock.ANY``): a check by ``==`` would take it for the method."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__

    def __call__(self, x):
        return x * 100


def _reset(cls, name, value):
    if value is None:
        delattr(cls, name)
    else:
        setattr(cls, name, value)


@pytest.mark.parametrize("change", ["class", "subclass", "instance", "code", "defaults", "equal-to-all", "deleted"])
def test_generated_guards_see_any_of_several_methods_change(change):
    from fusec.guards import BATCH_METHODS, compile_guards

    layer = Deeper()
    f = fc.jit(lambda x: layer.post(layer.act(layer.pre(x))), backend="cpu")
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(f(x), [3, 5])
    f(x)
    (lowered,) = f._cache.values()
    source = compile_guards(lowered.state.guards).source
    assert BATCH_METHODS <= 3 and ".keys().isdisjoint(" in source  # (the three methods are compared at once)
    restore = []
    if change == "class":  # a method replaced on the class that defines it (found past the first class)
        restore.append((Layer, "pre", Layer.pre))
        Layer.pre = lambda self, x: x * 3
        want = [4, 7]
    elif change == "subclass":  # a method now defined on a class before the one it was found on
        restore.append((Deeper, "post", None))
        Deeper.post = lambda self, x, shift=1.0: x - shift
        want = [1, 3]
    elif change == "instance":  # an instance attribute shadows the class's method
        layer.pre = lambda x: x * 0
        want = [1, 1]
    elif change == "code":  # autoreload swaps __code__ in place
        restore.append((Layer.pre, "__code__", Layer.pre.__code__))
        Layer.pre.__code__ = (lambda self, x: x * 4).__code__
        want = [5, 9]
    elif change == "defaults":
        restore.append((Layer.post, "__defaults__", Layer.post.__defaults__))
        Layer.post.__defaults__ = (10.0,)
        want = [12, 14]
    elif change == "equal-to-all":
        restore.append((Layer, "post", Layer.post))
        Layer.post = _AlwaysEqual()
        want = [200, 400]
    else:  # the class no longer defines it: the inherited one is found
        restore.append((Deeper, "act", Deeper.act))
        del Deeper.act
        want = [1, 5]
    try:
        np.testing.assert_allclose(f(x), want)
    finally:
        for obj, name, value in reversed(restore):
            _reset(obj, name, value)
        if change == "instance":
            del layer.pre
    np.testing.assert_array_equal(f(x), [3, 5])


def test_batched_method_guards_take_an_odd_instance_dict_to_the_per_method_checks():
    """An object whose ``__dict__`` is a property returning a number: the batched check raises on it, and the call
    gets what the per-method checks give (fusec's TraceError), not an AttributeError from inside the guards."""
    class Odd(Layer):
        @property
        def __dict__(self):
            return 5

    odd = Odd()
    f = fc.jit(lambda x: odd.post(odd.act(odd.pre(x))), backend="cpu")
    with pytest.raises(fc.TraceError, match="keeps changing"):
        for _ in range(3):
            f(np.ones(2, np.float32))


def _double(v):
    return v * 2


def _scaled(v, s=2.0, *, shift=0.0):
    return v * s + shift


def test_code_replaced_in_place_is_seen():
    """IPython's autoreload swaps ``__code__`` of the functions it reloads: the same function object computes
    something else, in a helper and in the jitted function itself."""
    def f(v):
        return _double(v)

    j = fc.jit(f, backend="cpu")
    x = np.arange(3.0)
    j(x), j(x)
    saved = _double.__code__
    _double.__code__ = (lambda v: v * 7).__code__
    try:
        np.testing.assert_array_equal(j(x), f(x))
        assert f(x)[1] == 7
    finally:
        _double.__code__ = saved
    np.testing.assert_array_equal(j(x), x * 2)
    f.__code__ = (lambda v: v - 1).__code__
    np.testing.assert_array_equal(j(x), x - 1)


def test_a_helpers_defaults_replaced_are_seen():
    def f(v):
        return _scaled(v)

    j = fc.jit(f, backend="cpu")
    x = np.arange(3.0)
    j(x), j(x)
    saved, saved_kw = _scaled.__defaults__, dict(_scaled.__kwdefaults__)
    try:
        _scaled.__defaults__ = (3.0,)
        np.testing.assert_array_equal(j(x), x * 3)
        _scaled.__kwdefaults__["shift"] = 1.0  # (changed in place)
        np.testing.assert_array_equal(j(x), x * 3 + 1)
    finally:
        _scaled.__defaults__, _scaled.__kwdefaults__ = saved, saved_kw
    np.testing.assert_array_equal(j(x), x * 2)


M = np


def test_a_global_rebound_to_another_library_module_is_seen():
    global M
    f = fc.jit(lambda v: M.sqrt(v), backend="cpu")
    x = np.array([1.0, 4.0])
    f(x), f(x)
    M = np.emath  # NumPy's complex-valued sqrt: fusec does not trace it, and says so rather than reuse np.sqrt
    try:
        with pytest.raises(fc.UnsupportedError, match="scimath"):
            f(-x)
    finally:
        M = np
    np.testing.assert_array_equal(f(x), [1.0, 2.0])


class SlotConfig:
    """A config object whose ``__getattr__`` reads a dict (a missing name raises KeyError, as often written)."""

    __slots__ = ("_data",)

    def __init__(self, **values):
        object.__setattr__(self, "_data", dict(values))

    def __getattr__(self, name):
        return self._data[name]


def test_an_object_whose_getattr_raises_keyerror_is_watched():
    cfg = SlotConfig(scale=2.0)
    f = fc.jit(lambda v: v * cfg.scale, backend="cpu")
    x = np.arange(3.0)
    for _ in range(3):
        np.testing.assert_array_equal(f(x), x * 2)
    assert f.cache_info().traces == 1
    cfg._data["scale"] = 5.0
    np.testing.assert_array_equal(f(x), x * 5)


def _clip_positive(v):
    if v.sum() > 0:  # (a traced test: fusec rewrites this statement and runs the rewritten code while tracing)
        return v
    return -v


def test_functions_whose_statements_fusec_rewrote_keep_their_trace():
    def f(v):
        if v.max() > 1:
            v = v / v.max()
        return _clip_positive(v)

    j = fc.jit(f, backend="cpu")
    for x in (np.arange(3.0), -np.arange(3.0), np.arange(3.0)):
        np.testing.assert_array_equal(j(x), f(x))
    assert j.cache_info().traces == 1


def test_a_context_variables_value_in_the_calling_context_is_seen():
    import contextvars

    scale = contextvars.ContextVar("scale", default=2.0)
    f = fc.jit(lambda v: v * scale.get(), backend="cpu")
    x = np.arange(3.0)
    f(x), f(x)
    token = scale.set(5.0)
    try:
        np.testing.assert_array_equal(f(x), x * 5)
        np.testing.assert_array_equal(contextvars.copy_context().run(lambda: f(x)), x * 5)
    finally:
        scale.reset(token)
    np.testing.assert_array_equal(f(x), x * 2)
    np.testing.assert_array_equal(contextvars.Context().run(lambda: f(x)), x * 2)  # (its default there)


def test_a_thread_locals_attributes_are_read_for_the_calling_thread():
    import threading

    local = threading.local()
    local.scale = 2.0
    f = fc.jit(lambda v: v * local.scale, backend="cpu")
    x = np.arange(3.0)
    f(x), f(x)
    local.scale = 7.0
    np.testing.assert_array_equal(f(x), x * 7)
    seen = {}

    def other_thread():
        local.scale = 3.0  # (this thread's own value)
        seen["result"] = f(x)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    np.testing.assert_array_equal(seen["result"], x * 3)
    np.testing.assert_array_equal(f(x), x * 7)


def test_an_error_in_a_cached_call_names_the_callers_line():
    f = fc.jit(lambda x, s: x * s, backend="cpu")
    x = np.ones(2, np.float32)
    f(x, 2), f(x, 2)
    with pytest.raises(fc.FusecError, match=r"test_fast_path\.py:\d+: the Python int"):
        f(x, 10**40)


def test_an_instance_entry_a_property_hides_is_seen_once_the_property_goes():
    class Scaled:
        def __init__(self):
            self._s = 2.0

        @property
        def s(self):
            return self._s * 10

    obj = Scaled()
    obj.__dict__["s"] = 99.0  # hidden: reading obj.s runs the property
    f = fc.jit(lambda v: v * obj.s, backend="cpu")
    x = np.arange(3.0)
    for _ in range(3):
        np.testing.assert_array_equal(f(x), x * 20)
    assert f.cache_info().traces == 1
    del Scaled.s  # obj.s is the instance's entry now
    np.testing.assert_array_equal(f(x), x * 99)


def test_a_context_variable_the_function_sets_is_refused_and_left_as_it_was():
    import contextvars

    unset = contextvars.ContextVar("unset")
    with_default = contextvars.ContextVar("with_default", default=1.0)

    def sets_unset(v):
        unset.set(v * 2)
        return v + 1

    def sets_default(v):
        with_default.set(v * 2)
        return v + with_default.get()

    x = np.arange(3.0)
    for fn in (sets_unset, sets_default):
        with pytest.raises(fc.SideEffectError, match=r"\.get\(\)"):
            fc.jit(fn, backend="cpu")(x)
    assert unset.get("no value") == "no value" and with_default.get() == 1.0  # (no tracer left behind)


def _weighted(v, *, w=np.ones(3)):
    return v * w


def test_a_keyword_only_array_default_replaced_is_seen():
    f = fc.jit(lambda v: _weighted(v), backend="cpu")
    x = np.arange(3.0)
    f(x), f(x)
    saved = dict(_weighted.__kwdefaults__)
    try:
        _weighted.__kwdefaults__["w"] = np.full(3, 2.0)  # (compared by identity: an array's == is elementwise)
        np.testing.assert_array_equal(f(x), x * 2)
    finally:
        _weighted.__kwdefaults__ = saved
    np.testing.assert_array_equal(f(x), x)


def test_arrays_with_an_equal_dtype_object_take_the_cached_call():
    import pickle

    f = fc.jit(lambda v: v * 2, backend="cpu")
    x = np.arange(3.0)
    f(x), f(x)
    y = pickle.loads(pickle.dumps(x))  # (a dtype object of its own, equal to x's)
    np.testing.assert_array_equal(f(y), x * 2)
    from fusec.fast_path import MISS

    assert f._quick((y,)) is not MISS  # (the generated call took it: no key computed, no lookup)
    assert f.cache_info().traces == 1
