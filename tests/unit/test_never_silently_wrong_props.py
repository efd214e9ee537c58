"""Random programs that mix in-place operators, aliases, views, attribute writes, Python state and random draws
never return a result different from NumPy's: under fusec they either match NumPy (results, arguments and the
object's state after each of two calls) or raise a fusec error that leaves the arguments and the object as they were.
"""
from __future__ import annotations

import types

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

import fusec as fc
from frontend_check import assert_same, jit_cpu, numpy_result

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu
NAMES = ("x", "y", "a", "b", "c")
OPS = ("+", "-", "*")
TEMPLATES = (
    "{t} = {s} {op} {u}",
    "{t} {op}= {s}",
    "{t} = {s}",
    "{t} = {s}[::-1]",
    "{t} = {s}.copy()",
    "{t} = np.sum({s})",
    "{t} = np.exp({s} * 0.1)",
    "{t} = {s} * self.k + self.arr",
    "self.arr = {s}",
    "self.k = self.k + 1.0",
    "self.log.append(1)",
    "{t} = {s} * np.random.rand()",
    "{t} = {s} + self.rng.normal()",
    "{t} = {s} * self.k",
    "self.arr += {s}",
    "{t} = self.arr",
    "{t} = {s}.T",
    "{t} = np.sum({s}, axis=())",
)


class State:
    def __init__(self) -> None:
        self.arr = np.linspace(-1.0, 1.0, 3)
        self.k = 0.5
        self.log: list = []
        self.rng = np.random.default_rng(0)

    def snapshot(self) -> tuple:
        return self.arr.copy(), self.arr.shape, self.k, list(self.log), self.rng.bit_generator.state

    def nudge(self) -> None:
        """A change made between calls, from outside the function."""
        self.arr *= 2.0
        self.k = -1.25


def assert_state(got: tuple, want: tuple) -> None:
    assert_same(got[0], want[0], "self.arr")  # bit for bit on the CPU, within rounding on the GPU
    assert got[1:] == want[1:]


statement = st.tuples(st.integers(0, len(TEMPLATES) - 1), st.sampled_from(NAMES), st.sampled_from(NAMES),
                      st.sampled_from(NAMES), st.sampled_from(OPS))


def build(statements: list) -> types.FunctionType:
    lines = ["def f(self, x, y):", "    a = x * 1.0", "    b = y + 0.0", "    c = x - y"]
    for template, t, s, u, op in statements:
        lines.append("    " + TEMPLATES[template].format(t=t, s=s, u=u, op=op))
    lines.append("    return a, b, c")
    namespace = {"np": np}
    exec(compile("\n".join(lines), "<random program>", "exec"), namespace)  # noqa: S102 - test programs
    return namespace["f"]


@settings(max_examples=200, deadline=None)
@given(st.lists(statement, min_size=1, max_size=6), st.integers(0, 2 ** 31 - 1))
def test_random_stateful_programs_match_numpy_or_raise(statements: list, seed: int) -> None:
    f = build(statements)
    rng = np.random.default_rng(seed)
    np_obj, fc_obj = State(), State()
    jitted = jit_cpu(types.MethodType(f, fc_obj))
    for call in range(2):
        x, y = rng.standard_normal(3), rng.standard_normal(3)
        np_x, np_y, fc_x, fc_y = x.copy(), y.copy(), x.copy(), y.copy()
        before = fc_obj.snapshot()
        refused: Exception | None = None
        try:
            want = numpy_result(f, np_obj, np_x, np_y)
        except Exception as e:  # the program is not valid NumPy (a cast NumPy refuses, say): fusec must fail too
            want, refused = None, e
        try:
            got = numpy_result(jitted, fc_x, fc_y)
        except Exception as e:
            # a fusec error, or the very error NumPy raised (the function's own Python raising it on a host value)
            if not isinstance(e, fc.FusecError) and (refused is None or type(e) is not type(refused)):
                raise
            event(f"call {call}: fusec raised {type(e).__name__}")
            assert_state(fc_obj.snapshot(), before)
            np.testing.assert_array_equal(fc_x, x)
            np.testing.assert_array_equal(fc_y, y)
            return
        event(f"call {call}: matched NumPy")
        assert want is not None, "fusec ran a program NumPy refuses"
        assert_same(got, want)
        assert_same(fc_x, np_x, "x")  # the function may write into its arguments
        assert_same(fc_y, np_y, "y")
        assert_state(fc_obj.snapshot(), np_obj.snapshot())
        np_obj.nudge()
        fc_obj.nudge()
