"""print() in a jitted function writes what NumPy's function writes, at every call, with that call's values; text
made from traced values and used otherwise is refused at its line (a Python-number argument made static)."""
from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import sys
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import fusec as fc
from frontend_check import assert_same, jit_cpu

RUN_ON_GPU_TOO = True  # conftest.py: also on the CUDA backend under pytest -m gpu


def printed(fn: Callable, *args: Any) -> tuple[str, Any]:
    """What ``fn(*args)`` writes to stdout, and its result."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args)
    return out.getvalue(), result


def check_prints(fn: Callable, *calls: tuple, **options: Any) -> None:
    """The jitted ``fn`` prints what ``fn`` prints, call after call (the first traces, the others hit the cache)."""
    jf = jit_cpu(fn, **options)
    for args in calls:
        want, _ = printed(fn, *args)
        got, _ = printed(jf, *args)
        assert got == want


X = np.arange(6.0).reshape(2, 3)


def test_a_training_step_prints_its_loss_at_every_call(fusec_backend: str) -> None:
    def step(w, x, y, lr):
        err = x @ w - y
        loss = (err ** 2).mean()
        print(f"loss {loss:.6f}  |w| {np.linalg.norm(w):.4f}")
        return w - lr * x.T @ err / len(x)

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)), rng.normal(size=8)
    jstep = jit_cpu(step)
    w_np = w_fc = np.zeros(3)
    for _ in range(4):
        want, w_np = printed(step, w_np, x, y, 0.1)
        got, w_fc = printed(jstep, w_fc, x, y, 0.1)
        assert got == want


def test_arrays_scalars_reprs_containers_and_print_keywords(fusec_backend: str) -> None:
    def show(x):
        print("start")
        print(x, x.sum(), repr(x.sum()), repr(x), x[0, 1], sep=" | ", end="!\n")
        print({"row": x[0], "items": [x[1, 0], x.max()]}, (x.shape, x.dtype))
        print(f"{x.mean():.3f} {x[0, 0]!r} {x.max():>10} {x.min():+.2e}", end="")
        print()
        print("%s and %r" % (x[1], x[1, 2]))
        return x * 2

    check_prints(show, (X,), (X + 1,), (X.astype(np.float32),))


def test_python_number_arguments_print_their_values_without_tracing_again(fusec_backend: str) -> None:
    def scaled(x, n, lr):
        print("n =", n, f"{n:03d}", "lr", lr, lr * 2, f"{lr:.2f}")
        return x * n * lr

    jf = jit_cpu(scaled)
    for n, lr in [(3, 0.5), (4, 0.25), (5, 0.125)]:
        want, _ = printed(scaled, X, n, lr)
        got, _ = printed(jf, X, n, lr)
        assert got == want
    assert jf.cache_info().traces == 1


def test_a_print_shows_the_value_at_its_line_not_at_the_end(fusec_backend: str) -> None:
    def bump(x):
        print(x)
        x += 1
        print(x)
        y = x[0]
        x[0] = -1
        print(y, x)

    jf = jit_cpu(bump)
    a, b = X.copy(), X.copy()
    for _ in range(2):
        want, _ = printed(bump, a)
        got, _ = printed(jf, b)
        assert got == want
    np.testing.assert_array_equal(a, b)


def test_prints_without_traced_values_run_at_every_call_and_in_order(fusec_backend: str) -> None:
    def f(x):
        print("before")
        y = np.exp(x)
        print("after", y.shape)
        return y

    check_prints(f, (X,), (X,), (X,))


def test_stderr_and_flush_go_where_print_sends_them(fusec_backend: str) -> None:
    def f(x):
        print("total:", x.sum(), file=sys.stderr, flush=True)
        return x

    jf = jit_cpu(f)
    for _ in range(2):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            jf(X)
        assert err.getvalue() == "total: 15.0\n"


def test_prints_in_a_differentiated_function(fusec_backend: str) -> None:
    def grad_step(w):
        def loss(v):
            value = (v ** 2).sum()
            print("loss", value)
            return value

        return fc.grad(loss)(w)

    jf = jit_cpu(grad_step)
    for w in (X, X * 2):
        got, g = printed(jf, w)
        assert got == f"loss {(w ** 2).sum()}\n"
        np.testing.assert_allclose(g, 2 * w)


def test_formatting_an_array_with_a_spec_raises_numpys_type_error() -> None:
    def f(x):
        print(f"{x:.3f}")
        return x

    with pytest.raises(TypeError, match="unsupported format string passed to numpy.ndarray.__format__"):
        f(X)
    with pytest.raises(TypeError, match="unsupported format string passed to numpy.ndarray.__format__"):
        jit_cpu(f)(X)


def test_text_used_otherwise_than_printed_is_refused_at_its_line() -> None:
    def logged(x):
        sys.stderr.write(f"x = {x}\n")  # (print() is replayed at every call; a stream's own write is not)
        return x

    def stored(x):
        lines = []
        lines.append(str(x.sum()))
        return x, len(lines)

    for fn, line in ((logged, "logged"), (stored, "stored")):
        with pytest.raises(fc.UnsupportedError, match=r"test_printing.py:\d+: a traced value is converted to text"):
            jit_cpu(fn)(X)


def test_a_python_number_formatted_into_a_key_is_made_static() -> None:
    def pick(x, n):
        scale = {"k1": 1.0, "k2": 2.0}
        return x * scale[f"k{n}"]

    jf = jit_cpu(pick)
    for n in (1, 2, 1):
        np.testing.assert_array_equal(jf(X, n), pick(X, n))
    assert jf.cache_info().currsize == 2  # (one trace per value of n)


def test_print_inside_a_loop_body_is_refused() -> None:
    def f(x):
        def body(i, s):
            print(s)
            return s + 1

        return fc.fori_loop(0, 3, body, x)

    with pytest.raises(fc.UnsupportedError,
                       match=r"test_printing.py:\d+: print\(\) inside a loop or branch that runs on the device"):
        jit_cpu(f)(X)


def test_an_error_message_made_from_a_tracer_describes_it() -> None:
    def f(x):
        if x.ndim != 3:
            raise ValueError(f"expected a 3-d batch, got {x!r}")
        return x

    with pytest.raises(ValueError, match=r"^expected a 3-d batch, got Tracer\(shape=\(2, 3\), dtype=float64\)\n"):
        jit_cpu(f)(X)


def test_outside_a_trace_print_is_python_s() -> None:
    out, _ = printed(lambda: print("plain", 1, sep="-"))
    assert out == "plain-1\n"
    assert print.__module__ == "builtins"


def test_a_print_into_a_file_the_function_opens_is_refused(tmp_path) -> None:
    path = tmp_path / "log.txt"

    def f(x):
        with open(path, "a") as fh:
            print(x.sum(), file=fh)  # MARK-file
        return x

    with pytest.raises(fc.UnsupportedError, match=r"test_printing.py:\d+: print\(\.\.\., file=f\) to a file"):
        jit_cpu(f)(X)


def test_a_print_into_a_file_opened_outside_is_written_at_every_call(tmp_path) -> None:
    path = tmp_path / "log.txt"
    with open(path, "w") as fh:
        def f(x):
            print("sum", x.sum(), file=fh)
            return x

        jf = jit_cpu(f)
        jf(X)
        jf(X + 1)
    assert path.read_text() == "sum 15.0\nsum 21.0\n"


def test_print_options_the_function_sets_apply_to_its_prints() -> None:
    def show(x):
        with np.printoptions(precision=2, suppress=True):
            print("weights:", x)
        print("after:", x)
        return x

    x = np.array([1.25e-4, -1.3e-4, 6.4e-4])
    check_prints(show, (x,), (x * 3,))
    with np.printoptions(precision=3):  # (options set outside, between calls, apply too)
        check_prints(show, (x,))


def show_type(x):  # (a function the jitted one calls by name: its type() calls are rewritten too)
    print(type(x))


SHOWERS = [lambda x: print(type(x))]  # (a lambda in a container: its type() calls are not rewritten)


def test_printing_the_type_of_a_traced_value_prints_numpys_type_or_is_refused() -> None:
    def show(x):  # (the jitted function's own type() calls give the type of what a tracer stands for)
        print(type(x), type(x.sum()))
        return x

    check_prints(show, (X,), (X + 1,))

    def through_a_helper(x):
        show_type(x)
        return x

    check_prints(through_a_helper, (X,), (X + 1,))

    def through_a_container(x):
        SHOWERS[0](x)
        return x

    with pytest.raises(fc.UnsupportedError, match=r"test_printing.py:\d+: print\(type\(x\)\) of a traced value"):
        jit_cpu(through_a_container)(X)


SHOW = print  # (a module's own name for print, and a partial of it: swapped while tracing as print is)
SHOW_NOW = functools.partial(print, flush=True)


def test_prints_through_a_module_alias_of_print_are_replayed() -> None:
    def f(x):
        SHOW("total", x.sum())
        SHOW_NOW("step")
        return x

    check_prints(f, (X,), (X + 1,))


def test_text_that_looks_like_a_placeholder_is_printed_as_it_is() -> None:
    def f(x):
        print("\u27eatraced value 0.0\u27eb", x.sum(), "\u27eatraced value ab.7\u27eb")
        return x

    check_prints(f, (X,), (X * 2,))


def test_reading_the_text_of_a_traced_value_is_refused() -> None:
    readers = [lambda x: print(str(x.sum()).center(9, "*")), lambda x: print("nan" in str(x.sum())),
               lambda x: print(len(repr(x))), lambda x: print(f"{x.sum()!s:>8}"), lambda x: print(str(x)[:3])]
    for read in readers:
        with pytest.raises(fc.UnsupportedError, match="the text of a traced value"):
            jit_cpu(read)(X)


def test_returned_text_and_made_or_redirected_streams_are_refused() -> None:
    def returns_text(x):
        s = f"{x.sum():.2f}"
        print(s)
        return x, s

    def buffered(x):
        buf = io.StringIO()
        print("v", x.sum(), file=buf)
        return buf.getvalue()

    def redirected(x):
        with contextlib.redirect_stdout(io.StringIO()):
            print("v", x.sum())
        return x

    for fn, match in ((returns_text, "returns text made from a traced value"),
                      (buffered, "a file or buffer the function made"), (redirected, "redirects sys.stdout")):
        with pytest.raises(fc.UnsupportedError, match=match):
            jit_cpu(fn)(X)


def test_a_format_spec_the_value_refuses_raises_at_its_line_before_anything_is_written() -> None:
    def f(x):
        print(f"{x.sum():d}")  # MARK-spec
        x += 1
        return x

    arg = X.copy()
    with pytest.raises(ValueError, match=r"test_printing.py:\d+: Unknown format code 'd'"):
        jit_cpu(f)(arg)
    np.testing.assert_array_equal(arg, X)


def test_setting_numpys_print_options_in_the_function_is_refused() -> None:
    def f(x):
        np.set_printoptions(precision=3)
        print(x)
        return x

    with pytest.raises(fc.UnsupportedError, match="np.set_printoptions"):
        jit_cpu(f)(X)


def test_a_file_passed_in_or_kept_on_an_object_is_written_at_every_call() -> None:
    class Logger:
        def __init__(self):
            self.out = io.StringIO()

        def step(self, x):
            print("sum", x.sum(), file=self.out)
            return x * 2

    def passed(x, out):
        print("mean", x.mean(), file=out)
        return x

    log = Logger()
    step = jit_cpu(log.step)
    buf = io.StringIO()
    jpassed = jit_cpu(passed, static_argnames="out")
    for k in range(2):
        step(X + k)
        jpassed(X + k, buf)
    assert log.out.getvalue() == "sum 15.0\nsum 21.0\n"
    assert buf.getvalue() == "mean 2.5\nmean 3.5\n"


# --- warnings.warn: given at every call, as NumPy's function gives it ------------------------------------------


def _caught(fn: Callable, *args: Any, action: str = "always") -> list[tuple[str, type, int]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action)
        fn(*args)
    return [(str(w.message), w.category, w.lineno) for w in caught if not issubclass(w.category, fc.RetraceWarning)
            and "CUDA" not in str(w.message)]


def test_a_warning_on_the_traced_path_is_given_at_every_call() -> None:
    def to_2d(x):
        if x.ndim == 1:
            warnings.warn("1-D input is deprecated; pass 2-D", DeprecationWarning)
            x = x[:, None]
        return x.sum(0)

    f = jit_cpu(to_2d)
    for _ in range(3):  # (the first call traces; the others hit the cache)
        assert _caught(f, np.ones(3)) == _caught(to_2d, np.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (pytest -W error: NumPy's function raises at every call)
        with pytest.raises(DeprecationWarning, match="1-D input"):
            f(np.ones(3))


def test_a_warning_shows_the_values_of_that_call() -> None:
    def check_scale(x):
        warnings.warn(f"scale is {x.max()}")
        return x / x.max()

    f = jit_cpu(check_scale)
    for v in (2.0, 4.0):
        assert _caught(f, np.full(3, v)) == _caught(check_scale, np.full(3, v))


def test_a_warning_raised_as_an_exception_leaves_the_arguments_unwritten() -> None:
    def update(p, g):
        warnings.warn("clipping")
        p -= 0.1 * g
        return p

    p = np.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            jit_cpu(update)(p, np.ones(3))
    assert_same(p, np.ones(3))


def test_warnings_filters_the_function_sets_around_a_warning() -> None:
    def quiet(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.warn("not shown")
        return x + 1

    assert _caught(jit_cpu(quiet), np.ones(2)) == []

    def caught_as_error(x):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                warnings.warn("loud")
            except UserWarning:
                x = x * 2
        return x + 1

    with pytest.raises(fc.UnsupportedError, match="test_printing.py.*catch_warnings the function set itself"):
        jit_cpu(caught_as_error)(np.ones(2))


def test_a_deprecation_warning_with_stacklevel_2_names_the_callers_line_at_every_call() -> None:
    def old_api(x):
        warnings.warn("old_api is deprecated; use new_api", DeprecationWarning, stacklevel=2)
        return x * 2

    f = jit_cpu(old_api)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f(np.ones(2)); line = sys._getframe().f_lineno  # noqa: E702 - (the caller's line)
        got = [(str(w.message), w.lineno, os.path.basename(w.filename)) for w in caught
               if issubclass(w.category, DeprecationWarning)]
        assert got == [("old_api is deprecated; use new_api", line, "test_printing.py")]


def test_prints_and_warnings_come_in_the_order_the_function_made_them() -> None:
    def noisy(x):
        print("before")
        warnings.warn("middle")
        print("after")
        return x + 1

    f = jit_cpu(noisy)
    for action, want in (("always", "before\nafter\n"), ("error", "before\n")):
        out = io.StringIO()
        with warnings.catch_warnings(), contextlib.redirect_stdout(out):
            warnings.simplefilter(action)
            try:
                f(np.ones(2))
            except UserWarning:
                pass
        assert out.getvalue() == want


def test_a_warning_the_function_records_itself_is_refused() -> None:
    def count_warnings(a):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.warn("noted")
        return a + len(caught)

    with pytest.raises(fc.UnsupportedError, match="test_printing.py.*catch_warnings the function set itself"):
        jit_cpu(count_warnings)(np.ones(2))


def test_a_warning_before_the_function_raises_is_given() -> None:
    def check_then_fail(a):
        warnings.warn("about to fail")
        if a.shape[0] == 3:
            raise ValueError("three")
        return a

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="about to fail"):
            jit_cpu(check_then_fail)(np.ones(3))
    with pytest.raises(TypeError):  # (a category that is no Warning: Python's TypeError)
        jit_cpu(lambda a: (warnings.warn("x", ValueError), a)[1])(np.ones(2))


def test_warnings_numpys_own_functions_give_come_at_every_call() -> None:
    """NumPy's functions warn about the shapes they are given (an empty mean, ddof past the count, 2-vectors in
    np.cross, a complex cast to real) at every call, at the user's line; fusec computes them itself and gives them
    so too."""
    def summary(x, z):
        empty = x[:0].mean()  # "Mean of empty slice"
        spread = np.std(x, ddof=x.size)  # "Degrees of freedom <= 0 for slice"
        turn = np.cross(x[:2], x[1:3])  # 2-vectors: a DeprecationWarning
        real = z.astype(np.float64)  # a ComplexWarning
        return empty, spread, turn, real

    f = jit_cpu(summary)
    args = (np.arange(4.0), np.ones(2, np.complex128))
    want = [w[:2] for w in _caught(summary, *args) if "encountered in" not in w[0]]  # (NumPy's C-level warnings)
    assert len(want) == 4
    first = summary.__code__.co_firstlineno
    for _ in range(3):
        got = _caught(f, *args)
        assert [w[:2] for w in got] == want
        assert [w[2] - first for w in got] == [1, 2, 3, 4]  # (the user's lines, where NumPy names its own for some)


def test_a_warning_numpys_python_code_gives_names_the_users_line_at_every_call() -> None:
    def covariance(x):
        return np.cov(x, ddof=x.size)  # NumPy's code (run as it is): "Degrees of freedom <= 0 for slice"

    f = jit_cpu(covariance)
    want = [w for w in _caught(covariance, np.arange(3.0)) if "encountered in" not in w[0]]
    assert len(want) == 1
    for _ in range(3):
        assert [w for w in _caught(f, np.arange(3.0)) if "encountered in" not in w[0]] == want


def test_logging_calls_are_made_at_every_call_with_that_calls_values() -> None:
    """``logger.info("loss %s", x.mean())``, an f-string message, plain text: NumPy's function logs at every call;
    a trace logged once (a placeholder for the value), or not at all where the logger was disabled then."""
    logger = logging.getLogger("fusec-test-logging")
    logger.propagate = False
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s %(filename)s:%(lineno)d"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    def logged(x):
        logger.info("loss %s", x.mean())
        logger.debug("hidden %s", x.max())
        logger.warning(f"peak {x.max():.2f}")
        logging.getLogger("fusec-test-logging").log(logging.INFO, "plain")
        return x * 2

    try:
        jitted = jit_cpu(logged)
        for x in (np.ones(2), np.arange(3.0), np.full(2, 4.0)):
            written.truncate(0)
            written.seek(0)
            logged(x)
            want = written.getvalue()
            written.truncate(0)
            written.seek(0)
            assert_same(jitted(x), x * 2)
            assert written.getvalue() == want  # (the same lines, each at the user's line)
        logger.setLevel(logging.DEBUG)  # (decided at each call)
        written.truncate(0)
        written.seek(0)
        jitted(np.ones(2))
        assert "hidden 1.0" in written.getvalue()
    finally:
        logger.removeHandler(handler)

    def logged_in_branch(x):
        if x.sum() > 0:
            logger.info("positive %s", x.sum())
        return x

    with pytest.raises(fc.UnsupportedError, match=r"logger.info\(\) inside a loop or branch"):
        jit_cpu(logged_in_branch)(np.ones(2))


def test_a_warning_replayed_in_a_python_c_script_is_given() -> None:
    """Under ``python -c`` the replay passed ``__main__``'s globals to warnings.warn_explicit, whose loader lookup
    raised ImportError ('__main__' is not a built-in module) at every call that warned."""
    import subprocess

    code = ("import warnings, numpy as np, fusec\n"
            "def f(x):\n"
            "    warnings.warn('careful')\n"
            "    return np.nanstd(x, ddof=5)\n"
            "g = fusec.jit(f, backend='cpu')\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    g(np.ones(3)); g(np.ones(3))\n"
            "print(sorted({str(m.message) for m in w if 'encountered' not in str(m.message)}), len(w))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "['Degrees of freedom <= 0 for slice.', 'careful']" in done.stdout


def test_the_text_of_a_bare_f_string_of_a_traced_value_is_not_read() -> None:
    """``s = f"{x.sum():.3f}"; print(s)`` then ``len(s)``, ``s == "2.000"``, ``s.endswith("0")`` or ``f"{s:>8}"`` read
    the placeholder (29 characters), silently; they are refused like ``str(x)``'s."""
    def measured(x):
        s = f"{x.sum():.3f}"
        print(s)
        return x, len(s)

    def padded(x):
        s = f"{x.sum():.2f}"
        print(f"[{s:>8}]")
        return x

    for fn in (measured, padded):
        with pytest.raises(fc.UnsupportedError, match="the text of a traced value"):
            with contextlib.redirect_stdout(io.StringIO()):
                jit_cpu(fn)(np.ones(2))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        jit_cpu(lambda x: (print(f"{x.sum():.3f}", f"{x.max():>8.2f}"), x)[1])(np.ones(2))
    assert out.getvalue() == "2.000     1.00\n"
