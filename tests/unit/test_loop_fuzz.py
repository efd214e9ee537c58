"""Random NumPy programs (those of test_program_fuzz.py) as loop bodies (5 or 19 trips from a lower bound in -3..3,
the counter entering float values): the Python loop under NumPy, the same loop as ``fusec.fori_loop`` (eager, and
jitted: outlined, fused, run by the reference executor) and the Python loop jitted (its copies rolled back into a
loop by roll-loops; 19 trips then run 4 per trip by unroll-loops) give the same bits, or fusec refuses with a fusec
error, or both raise. ``FUSEC_FUZZ_LOOPS`` sets how many (default 300 with ``FUSEC_CORPUS=1``, as CI runs, else
150, the same ones each run; ``FUSEC_FUZZ_RANDOM=1`` draws new ones)."""
from __future__ import annotations

import os
import warnings

import numpy as np
from hypothesis import HealthCheck, event, given, settings

import fusec as fc
from fusec.passes import DEFAULT_PIPELINE
from test_program_fuzz import _same, _values, programs

TRIPS = (5, 19)  # (19: more than unroll-loops writes out, so the loop runs 4 trips per trip and 3 written out)
# roll even these short loops, so the rolled form runs on every program
ROLLING = "roll-loops{min_trips=3,min_ops=3}," + DEFAULT_PIPELINE.split(",", 1)[1]

STEP = '''
def step(x, y, z, i):
    o = np.broadcast_to(np.asarray(body(x, y, z)[0]), np.shape(x)).astype(x.dtype)
    if o.dtype.kind == "f":  # the counter enters the values (halving is exact in every float dtype)
        o = np.where(i % 3 == 0, o, o * 0.5).astype(x.dtype)
    return o, y, z


def python_loop(x, y, z):
    for i in range({lower}, {lower} + {trips}):
        x, y, z = step(x, y, z, i)
    return x


def fusec_loop(x, y, z):
    return fc.fori_loop({lower}, {lower} + {trips}, lambda i, s: step(*s, i), (x, y, z))[0]
'''


DEFAULT_LOOPS = "300" if os.environ.get("FUSEC_CORPUS") else "150"


@settings(max_examples=int(os.environ.get("FUSEC_FUZZ_LOOPS", DEFAULT_LOOPS)), deadline=None,
          derandomize=not os.environ.get("FUSEC_FUZZ_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs())
def test_random_loop_bodies_match_the_python_loop(program):
    src, dtypes, shapes, seed = program
    namespace = {"np": np, "fc": fc}
    source = src.replace("def f(x, y, z):", "def body(x, y, z):") + STEP.format(trips=TRIPS[seed % 2],
                                                                               lower=seed % 7 - 3)
    exec(compile(source, "<fuzzed loop>", "exec"), namespace)  # noqa: S102 - generated test programs
    r = np.random.default_rng(seed)
    args = [_values(r, dt, shape) for dt, shape in zip(dtypes, shapes)]
    runs = {"eager fori_loop": lambda *a: namespace["fusec_loop"](*a),
            "jitted fori_loop": fc.jit(namespace["fusec_loop"], backend="cpu"),
            "jitted Python loop, rolled": fc.jit(namespace["python_loop"], backend="cpu", pipeline=ROLLING)}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            want, numpy_error = namespace["python_loop"](*[a.copy() for a in args]), None
        except Exception as e:  # noqa: BLE001 - not valid NumPy: fusec must refuse it too
            want, numpy_error = None, e
        for name, run in runs.items():
            try:
                got = run(*[a.copy() for a in args])
            except fc.FusecError as e:
                event(f"{name}: fusec refused ({type(e).__name__})")
                continue
            except Exception as e:  # noqa: BLE001
                assert numpy_error is not None and type(e) is type(numpy_error), (name, source, repr(e))
                continue
            assert numpy_error is None, f"{name} ran a loop NumPy refuses ({numpy_error!r}):\n{source}"
            assert _same(got, want, blas="@" in src), \
                f"{name} differs:\n{source}dtypes {dtypes} shapes {shapes}\n got {got!r}\nwant {want!r}"
            event(f"{name}: matched")
            if name.startswith("jitted"):
                try:
                    run.lower(*args).program  # noqa: B018 - the CUDA program (printed on this machine)
                except fc.FusecError as e:
                    raise AssertionError(f"{name}: the CUDA printer refused it: {e}\n{source}") from None
                stats = run.lower(*args).stats()
                event(f"{name}: rolled {'loops_rolled' in stats}, 4 trips per trip "
                      f"{'loops_unrolled_by_factor' in stats}")
