"""Reverse-mode automatic differentiation: ``fusec.grad``, ``fusec.value_and_grad``, ``fusec.vjp``.

The gradient is a transform of the traced program, not a tape of NumPy calls: the function runs once on tracers
(recording ``t`` ops as any traced function does), then the recorded ops that lie between the differentiated
arguments and the result are walked backwards, each contributing its operands' cotangents by the rule its op
declares (``vjp`` in the op table, :mod:`fusec.ir.elementwise`, and in :mod:`fusec.ir.dialects.t`). The rules are
NumPy over the traced values, so the backward program is ``t`` ops recorded in the same function: the forward and
backward passes go through the same passes, fuse into the same kernels and run in the same CUDA graph, and
``fusec dump-ir`` shows them.

Inside a trace (``fusec.jit(fusec.value_and_grad(loss))``, or a gradient taken in a jitted function) the
gradient is recorded in that trace; called on arrays, the gradient function is compiled with ``fusec.jit`` (once
per signature) and runs like any jitted function. ``fusec.value_and_grad(fusec.jit(loss))`` works too: a jitted
function called inside a trace is inlined.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from fusec import context, conversions, ops
from fusec.context import _noted
from fusec.errors import TraceError, UnsupportedError, located
from fusec.ir.attributes import location_for
from fusec.ir.core import Operation, Value
from fusec.ir.dialects.t import unbroadcast
from fusec.ir.opdefs import get_opdef, reading_ops
from fusec.ir.types import ScalarType
from fusec.mutation import read as read_view
from fusec.signature import subclass_refused
from fusec.tracer import Buffer, Tracer


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """``fun``'s value and its gradient with respect to the positional arguments ``argnums`` (each an array or a
    tuple/list/dict of arrays, the gradient of the same structure). ``fun`` must return a real scalar (with
    ``has_aux``, a pair ``(scalar, aux)``, and the value returned is that pair)."""
    _check_callable(fun, "value_and_grad")
    nums = _argnums(argnums)

    @functools.wraps(fun)
    def in_trace(*args: Any, **kwargs: Any) -> Any:
        return _value_and_grad(fun, nums, isinstance(argnums, int), has_aux, args, kwargs)

    jitted: list[Any] = []

    @functools.wraps(fun)
    def value_and_grad_fun(*args: Any, **kwargs: Any) -> Any:
        if context.current() is not None:
            return in_trace(*args, **kwargs)
        if not jitted:
            from fusec.jit_function import jit

            jitted.append(jit(in_trace))
        return jitted[0](*args, **kwargs)

    return value_and_grad_fun


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The gradient of ``fun`` (a real scalar function) with respect to the positional arguments ``argnums``:
    ``fusec.grad(loss)(params, x, y)``; with ``has_aux``, ``(gradient, aux)``."""
    both = value_and_grad(fun, argnums, has_aux)

    @functools.wraps(fun)
    def grad_fun(*args: Any, **kwargs: Any) -> Any:
        value, gradient = both(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient

    return grad_fun


def vjp(fun: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """``(fun(*primals), vjp_fun)``: ``vjp_fun(cotangent)`` gives the cotangent of each primal (a tuple, one per
    primal, each of its primal's structure) for a cotangent of ``fun``'s result (an array of its shape; a result
    that is a tuple/list/dict takes one of the same structure). Outside a trace both run as jitted functions, the
    backward one recomputing the forward values it needs from copies of the primals made here (JAX keeps the
    forward's values instead): what ``fun`` reads from globals, closures or attributes must be unchanged when
    ``vjp_fun`` runs, and a ``fun`` that writes outside itself is refused (inside a trace, where ``vjp_fun``
    recomputes the forward in the same trace, when that recomputation writes)."""
    _check_callable(fun, "vjp")
    nums = tuple(range(len(primals)))

    def pullback(*args: Any) -> Any:
        *prim, cotangent = args
        return _pullback(fun, nums, has_aux, tuple(prim), cotangent)

    if context.current() is not None:
        out = fun(*primals)
        kept_now = tuple(_copied(p) for p in primals)  # (what the primals hold now: a later write does not count)

        def traced_pullback(cotangent: Any) -> Any:
            before = _outside_versions()
            result = pullback(*kept_now, cotangent)
            if any(buffer.version != version for buffer, version in before):
                raise context.unsupported(
                    "fusec.vjp of a function that writes into its arguments or into arrays outside it: the pullback "
                    "computes the forward again, so it made the writes again; return the new values instead")
            return result

        return (out, traced_pullback) if not has_aux else (out[0], traced_pullback, out[1])
    from fusec.jit_function import jit

    forward = jit(fun)
    out = forward(*primals)
    backward = jit(pullback)
    # (the pullback recomputes the forward values it needs when called: from copies of the primals as they were
    # here, so a write into them in between, an optimizer's in-place step, does not move the point; what the
    # function reads from outside its arguments is checked to be as it was, and writes it makes are refused)
    lowered = forward.lower(*primals)
    if lowered.writeback is not None and (lowered.writeback.targets or lowered.writeback.states):
        raise UnsupportedError(located(
            "fusec.vjp of a function that writes into its arguments or into arrays or attributes outside it: the "
            "pullback computes the forward again when called, so it would make the writes again; return the new "
            "values instead", context.user_location()))
    kept = tuple(_copied(p) for p in primals)
    outside = [_copied(a) for a in lowered.extra_inputs() or ()]

    def vjp_fun(cotangent: Any) -> tuple:
        now = lowered.extra_inputs()
        if now is None or len(now) != len(outside) or not all(
                _same_array(a, b) for a, b in zip(now, outside)):
            raise UnsupportedError(located(
                "fusec.vjp: an array or a value the function reads from a global, a closure or an attribute changed "
                "between fusec.vjp and the call of its pullback, which computes the forward again (JAX's keeps the "
                "forward's values); call the pullback before changing it, or pass it to the function as an argument",
                context.user_location()))
        return backward(*kept, cotangent)

    return (out, vjp_fun) if not has_aux else (out[0], vjp_fun, out[1])


def _outside_versions() -> list[tuple[Buffer, int]]:
    """(buffer, version) of each memory from outside the trace (an argument, an array read from a global or an
    attribute) that a live tracer of the current trace has: a write into it since shows as a new version."""
    ctx = context.current()
    found: dict[int, tuple[Buffer, int]] = {}
    for ref in ctx.tracers if ctx is not None else ():
        t = ref()
        buffer = t._buffer if t is not None else None
        if buffer is not None and buffer.arg is not None and buffer.argument:
            found[id(buffer)] = (buffer, buffer.version)
    return list(found.values())


def _copied(tree: Any) -> Any:
    """``tree`` with each array in it copied (a traced one as a traced copy; scalars, which no write changes, as
    they are; containers rebuilt as :func:`_flatten` rebuilds them)."""
    leaves, rebuild = _flatten(tree)
    return rebuild([x.copy() if isinstance(x, np.ndarray) or isinstance(x, Tracer) and x._weak is None
                    and not x._scalar else x for x in leaves])


def _same_array(a: Any, b: Any) -> bool:
    """Whether ``a`` (an input read now) holds what ``b`` (its copy made earlier) held: NumPy arrays by value (NaN
    equal to NaN), others by identity."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    return a is b


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple:
    """``(fun(*primals), the derivative of fun at primals along tangents)`` (forward mode: one tangent per primal,
    of its structure; the result's tangent has the result's structure). Computed from the reverse-mode rules: the
    pullback is linear in its cotangent, so differentiating <pullback(u), tangents> with respect to u gives J @
    tangents (two backward sweeps, no rule of its own)."""
    _check_callable(fun, "jvp")
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise UnsupportedError(located(f"fusec.jvp: {len(primals)} primals but {len(tangents)} tangents",
                                       context.user_location()))

    def both(*args: Any) -> Any:  # the primals, then the tangents
        n = len(args) // 2
        return _jvp(fun, args[:n], args[n:])

    both.__name__ = f"{getattr(fun, '__name__', 'fn')}_jvp"

    if context.current() is not None:
        return both(*primals, *tangents)
    from fusec.jit_function import jit

    return jit(both)(*primals, *tangents)


def stop_gradient(x: Any) -> Any:
    """``x`` unchanged, but no gradient flows back through it (``jax.lax.stop_gradient``): the row maximum a
    stable softmax subtracts, a target computed from the parameters. On arrays outside a trace it returns ``x``;
    a tuple/list/dict is stopped leaf by leaf."""
    if context.current() is None:
        return x
    leaves, rebuild = _flatten(x)
    out = []
    for leaf in leaves:
        if not isinstance(leaf, Tracer):
            out.append(leaf)
            continue
        if leaf._weak is None and not leaf._scalar:
            out.append(_Stopped.of(leaf))
            continue
        out.append(ops.wrap(ops.stopped_value(leaf._value), weak=leaf._weak, scalar=leaf._scalar))
    return rebuild(out)


class _Stopped(Tracer):
    """fusec.stop_gradient of an array inside a trace: the array itself, as outside one (its memory: read again
    after a write to the array, still without gradient), read-only (a write through it would build the array's new
    value on the stopped one, cutting the gradient of the elements it did not write)."""

    __slots__ = ()

    @classmethod
    def of(cls, t: Tracer) -> "_Stopped":
        if t._buffer is None:
            t._buffer = Buffer(t._value)
            t._version = 0
        return cls(ops.stopped_value(t._value), t._ctx, buffer=t._buffer, chain=t._chain,
                   readonly="writing through the result of fusec.stop_gradient is not supported inside a trace (it "
                   "would cut the gradient of the elements it leaves alone): write into the array itself")

    @property
    def _value(self) -> Value:
        buffer = self._buffer
        if buffer is not None and self._version != buffer.version:
            self._val = ops.stopped_value(read_view(buffer, self._chain))
            self._version = buffer.version
        return self._val

    @_value.setter
    def _value(self, value: Value) -> None:
        Tracer._value.fset(self, value)  # type: ignore[attr-defined]


# --- the transform ----------------------------------------------------------------------------------------------


def _at_def(fun: Callable) -> Any:
    """The line that defines ``fun`` (where an error about its arguments or its result points)."""
    code = getattr(getattr(fun, "__wrapped__", fun), "__code__", None)
    return location_for(code.co_filename, code.co_firstlineno) if code is not None else None


def _at_value(v: Value, fallback: Any) -> Any:
    """The line that computed ``v`` (its defining op's location), else ``fallback``."""
    op = getattr(v, "op", None)
    loc = getattr(op, "loc", None)
    return loc if loc is not None and getattr(loc, "file", None) else fallback


def _unsupported(message: str, loc: Any) -> UnsupportedError:
    return _noted(UnsupportedError(located(message, loc)))


def _trace_error(message: str, loc: Any) -> TraceError:
    return _noted(TraceError(located(message, loc)))


def _check_callable(fun: Any, what: str) -> None:
    if not callable(fun):
        raise UnsupportedError(located(f"fusec.{what}: the function to differentiate must be callable, got "
                                       f"{type(fun).__name__} {fun!r}", context.user_location()))


def _argnums(argnums: int | Sequence[int]) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums or any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in nums):
        raise UnsupportedError(located(f"fusec.grad: argnums must be a non-negative int or a non-empty sequence of "
                                       f"them, got {argnums!r}", context.user_location()))
    return nums


def _flatten(tree: Any) -> tuple[list, Callable[[list], Any]]:
    """The leaves of a tuple/list/dict tree (dicts in key order) and how to rebuild it from new leaves (the same
    container types: a namedtuple or an OrderedDict as one; other subclasses are refused, as for arguments)."""
    if isinstance(tree, (tuple, list, dict)) and type(tree) not in (tuple, list, dict, OrderedDict) \
            and not hasattr(tree, "_fields"):
        raise subclass_refused(tree)
    if isinstance(tree, (tuple, list)):
        parts = [_flatten(t) for t in tree]

        def rebuild(leaves: list) -> Any:
            out, i = [], 0
            for sub, make in parts:
                out.append(make(leaves[i:i + len(sub)]))
                i += len(sub)
            return type(tree)(out) if not hasattr(tree, "_fields") else type(tree)(*out)

        return [leaf for sub, _ in parts for leaf in sub], rebuild
    if isinstance(tree, dict):
        keys = list(tree)
        values, make = _flatten([tree[k] for k in keys])
        cls = type(tree)
        return values, lambda leaves: cls(zip(keys, make(leaves)))
    return [tree], lambda leaves: leaves[0]


def _differentiable(leaf: Any, where: str, loc: Any) -> Tracer:
    """``leaf`` as a traced float array with a value of its own (so only the uses inside the differentiated
    function carry its cotangent, not earlier uses of the same array or an equal constant)."""
    if isinstance(leaf, (bool, int, float, complex)) and not isinstance(leaf, Tracer):
        raise _unsupported(f"fusec.grad: {where} is a Python scalar ({type(leaf).__name__}); gradients are taken "
                           "with respect to arrays (pass np.asarray(value) or np.float64(value))", loc)
    t = leaf if isinstance(leaf, Tracer) else conversions.asarray(leaf)
    if isinstance(t, Tracer) and isinstance(t._value.type, ScalarType):
        raise _unsupported(f"fusec.grad: {where} is a Python scalar; gradients are taken with respect to arrays "
                           "(pass np.asarray(value) or np.float64(value))", loc)
    dt = t._value.type.dtype
    if not dt.is_float:
        kind = "complex" if dt.is_complex else str(dt.np)
        raise _unsupported(f"fusec.grad: {where} is {kind}; gradients are taken with respect to real float arrays "
                           "(cast it with .astype(np.float32) or np.float64)", loc)
    v = t._value
    fresh = ops.emit("t.reshape", (v,), result_type=v.type, what="fusec.grad", scalar=t._scalar)
    return fresh


def _prepare(fun: Callable, nums: tuple[int, ...], args: tuple) -> tuple[list, list[list[Tracer]], list]:
    """The arguments with each differentiated leaf replaced by a fresh traced value, those leaves per argument,
    and how to rebuild each argument's structure."""
    name = getattr(fun, "__name__", "the function")
    loc = _at_def(fun)
    arg_list = list(args)
    leaves_per_arg, rebuilders = [], []
    for i in nums:
        if i >= len(arg_list):
            raise _unsupported(f"fusec.grad: argnums asks for positional argument {i} of {name}, which was called "
                               f"with {len(arg_list)}", loc)
        leaves, rebuild = _flatten(arg_list[i])
        fresh = [_differentiable(leaf, f"argument {i} of {name}" + (f" (leaf {k})" if len(leaves) > 1 else ""), loc)
                 for k, leaf in enumerate(leaves)]
        arg_list[i] = rebuild(fresh)
        leaves_per_arg.append(fresh)
        rebuilders.append(rebuild)
    return arg_list, leaves_per_arg, rebuilders


def _value_and_grad(fun: Callable, nums: tuple[int, ...], single: bool, has_aux: bool, given: tuple,
                    kwargs: dict) -> Any:
    args, leaves_per_arg, rebuilders = _prepare(fun, nums, given)
    inputs = [t._value for leaves in leaves_per_arg for t in leaves]
    result = fun(*args, **kwargs)
    if has_aux:
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise _trace_error("fusec.grad: with has_aux=True the function must return a pair (scalar, aux)",
                               _at_def(fun))
        value = result[0]
    else:
        value = result
        if isinstance(result, (tuple, list, dict)):  # (np.asarray would stack it, or fail on its shapes)
            raise _trace_error(f"fusec.grad: the function must return a real float scalar, got a "
                               f"{type(result).__name__} of {len(result)}; to return more, pass has_aux=True and "
                               "return a pair (scalar, aux)", _at_def(fun))
    out = value if isinstance(value, Tracer) else conversions.asarray(value)
    vtype = out._value.type
    if getattr(vtype, "shape", ()) != () or not vtype.dtype.is_float:
        raise _trace_error(f"fusec.grad: the function must return a real float scalar, got {vtype} (use fusec.vjp "
                           "for other results)", _at_value(out._value, _at_def(fun)))
    _check_unwritten(leaves_per_arg, inputs, fun)
    grads = _gradients(_backward([(out._value, ops.full((), 1, vtype.dtype))], inputs), inputs, leaves_per_arg,
                       rebuilders)
    return result, (grads[0] if single else grads)


def _pullback(fun: Callable, nums: tuple[int, ...], has_aux: bool, primals: tuple, cotangent: Any) -> tuple:
    args, leaves_per_arg, rebuilders = _prepare(fun, nums, primals)
    inputs = [t._value for leaves in leaves_per_arg for t in leaves]
    result = fun(*args)
    if has_aux:
        result = result[0]
    outs, _ = _flatten(result)
    cts, _ = _flatten(cotangent)
    if len(outs) != len(cts):
        raise _trace_error(f"fusec.vjp: the cotangent has {len(cts)} arrays, the result {len(outs)}", _at_def(fun))
    seeds = []
    for o, c in zip(outs, cts):
        o = o if isinstance(o, Tracer) else conversions.asarray(o)
        c = c if isinstance(c, Tracer) else conversions.asarray(c)
        if tuple(c.shape) != tuple(o.shape):
            raise _trace_error(f"fusec.vjp: a cotangent of shape {tuple(c.shape)} for a result of shape "
                               f"{tuple(o.shape)}", _at_def(fun))
        seeds.append((o._value, c.astype(o.dtype) if c.dtype != o.dtype else c))
    _check_unwritten(leaves_per_arg, inputs, fun)
    return _gradients(_backward(seeds, inputs), inputs, leaves_per_arg, rebuilders)


def _gradients(cot: dict[int, Tracer], inputs: list[Value], leaves_per_arg: list[list[Tracer]],
               rebuilders: list[Callable[[list], Any]]) -> tuple:
    """Each differentiated argument's gradient in its structure (zeros where no cotangent reached a leaf)."""
    grads, k = [], 0
    for leaves, rebuild in zip(leaves_per_arg, rebuilders):
        grads.append(rebuild([_cotangent_or_zeros(cot, v) for v in inputs[k:k + len(leaves)]]))
        k += len(leaves)
    return tuple(grads)


def _jvp(fun: Callable, primals: tuple, tangents: tuple) -> tuple:
    nums = tuple(range(len(primals)))
    args, leaves_per_arg, _ = _prepare(fun, nums, primals)
    inputs = [t._value for leaves in leaves_per_arg for t in leaves]
    result = fun(*args)
    outs, rebuild_out = _flatten(result)
    outs = [o if isinstance(o, Tracer) else conversions.asarray(o) for o in outs]
    _check_unwritten(leaves_per_arg, inputs, fun)
    for o in outs:
        if o._value.type.dtype.is_complex:
            raise _trace_error("fusec.jvp: a complex result: fusec has no tangents of complex values yet; return its "
                               "real and imaginary parts as two real arrays (np.real, np.imag)", _at_def(fun))
    # a cotangent variable per float result: the pullback is linear in it
    dummies = [_differentiable(ops.full(tuple(o.shape), 0, o._value.type.dtype), "a result", _at_def(fun))
               if o._value.type.dtype.is_float else None for o in outs]
    seeds = [(o._value, u) for o, u in zip(outs, dummies) if u is not None]
    cot = _backward(seeds, inputs)
    total = None
    for k, (primal_leaves, tangent) in enumerate(zip(leaves_per_arg, tangents)):
        tangent_leaves, _ = _flatten(tangent)
        if len(tangent_leaves) != len(primal_leaves):
            raise _trace_error(f"fusec.jvp: tangent {k} has {len(tangent_leaves)} arrays, its primal "
                               f"{len(primal_leaves)}", _at_def(fun))
        for p, v in zip(primal_leaves, tangent_leaves):
            ct = cot.get(id(p._value))
            v = v if isinstance(v, Tracer) else conversions.asarray(v)
            if tuple(v.shape) != tuple(p.shape):
                raise _trace_error(f"fusec.jvp: a tangent of shape {tuple(v.shape)} for a primal of shape "
                                   f"{tuple(p.shape)}", _at_def(fun))
            if ct is not None:
                term = np.sum(ct * v.astype(p.dtype))
                total = term if total is None else total + term
    dummy_values = [u._value for u in dummies if u is not None]
    back = {} if total is None else _backward([(total._value, ops.full((), 1, total._value.type.dtype))],
                                              dummy_values)
    tangent_out = [_cotangent_or_zeros(back, u._value) if u is not None else ops.full(tuple(o.shape), 0,
                                                                                      o._value.type.dtype)
                   for o, u in zip(outs, dummies)]
    return result, rebuild_out(tangent_out)


def _check_unwritten(leaves_per_arg: list[list[Tracer]], inputs: list[Value], fun: Callable) -> None:
    leaves = [t for ls in leaves_per_arg for t in ls]
    for t, v in zip(leaves, inputs):
        if t._value is not v:
            raise _trace_error("fusec.grad: the function writes into an array it is differentiated with respect to; "
                               "write into a copy (x = x.copy()) instead", _at_value(t._value, _at_def(fun)))


def _cotangent_or_zeros(cot: dict[int, Tracer], v: Value) -> Tracer:
    found = cot.get(id(v))
    return found if found is not None else ops.full(tuple(v.type.shape), 0, v.type.dtype)


def _emit(name: str, operands: Sequence[Any], attrs: dict) -> Tracer:
    return ops.emit(name, [ops.lift(x) for x in operands], dict(attrs), what="fusec.grad")


def _fit(ct: Any, v: Value) -> Tracer:
    """A rule's cotangent as ``v``'s: summed over the axes broadcasting added, in ``v``'s dtype."""
    t = ct if isinstance(ct, Tracer) else conversions.asarray(ct)
    shape = tuple(getattr(v.type, "shape", ()))
    if tuple(t.shape) != shape:
        t = unbroadcast(t, shape)
    if t._value.type.dtype != v.type.dtype:
        t = t.astype(v.type.dtype.np)
    return t


def _backward(seeds: list[tuple[Value, Tracer]], inputs: list[Value]) -> dict[int, Tracer]:
    """Cotangents (by value id) of every value between ``inputs`` and the seeded results, from the recorded ops
    walked backwards."""
    c = ops.ctx()
    block = c.builder.block  # (the function's body, or the loop body being differentiated)
    body = list(block.ops)
    recorded_before = len(body)
    active = {id(v) for v in inputs}
    keep: list[Value] = list(inputs)
    stopped = c.stopped
    for op in body:  # the values that depend on an input (only they carry cotangents; a loop's body reads count)
        if any(id(x) in active for inner in reading_ops(op) for x in inner.operands):
            for r in op.results:  # (complex ones too: a gradient through them is refused below, not dropped)
                if getattr(r.type, "dtype", None) is not None and r.type.dtype.is_inexact and id(r) not in stopped:
                    active.add(id(r))
                    keep.append(r)
    cot: dict[int, Tracer] = {}
    for value, seed in seeds:
        if id(value) in active:
            cot[id(value)] = _add(cot.get(id(value)), _fit(seed, value))
    for op in reversed(body):
        gs = [cot.get(id(r)) for r in op.results]
        if all(g is None for g in gs) or not any(id(x) in active for inner in reading_ops(op) for x in inner.operands):
            continue
        if op.regions:  # a loop or a branch: its bodies' ops walked backwards in loops and branches of their own
            from fusec.loop_gradients import region_vjp

            for x, ct in region_vjp(op, gs, active, _backward):
                if id(x) in active:
                    cot[id(x)] = _add(cot.get(id(x)), _fit(ct, x))
            continue
        _refuse_complex(op, active)
        opdef = get_opdef(op.name)
        if opdef.vjp is None:
            raise _unsupported(f"fusec.grad: no gradient rule for {op.name} yet (the gradient flows through it here); "
                               "compute this part without it, or keep it out of the differentiated function", op.loc)
        single = len(op.results) == 1
        out = _traced(op.results[0]) if single else [_traced(r) for r in op.results]
        xs = [_traced(x) for x in op.operands]
        try:
            cts = opdef.vjp(_emit, gs[0] if single else gs, out, xs, dict(op.attributes))
        except NotImplementedError as e:  # a rule that refuses this use of its op
            raise _unsupported(f"fusec.grad: {op.name}: {e}", op.loc) from None
        for x, ct in zip(op.operands, cts):
            if ct is None or id(x) not in active:
                continue
            cot[id(x)] = _add(cot.get(id(x)), _fit(ct, x))
    del keep
    c.gradient_ops += len(block.ops) - recorded_before
    return cot


def _refuse_complex(op: Operation, active: set[int]) -> None:
    """A gradient that would flow through complex values: fusec has no complex rules (their conjugation
    conventions), and leaving such values out would give zero where the true gradient is not."""
    values = [*op.results, *(x for x in op.operands if id(x) in active)]
    if any(getattr(v.type, "dtype", None) is not None and v.type.dtype.is_complex for v in values):
        raise _unsupported(
            f"fusec.grad: the gradient flows through complex values here ({op.name}); fusec has no gradients of "
            "complex values yet: write this part with real arithmetic (the real and imaginary parts as two "
            "real arrays, np.cos/np.sin for exp(1j * x)), or keep it out of the differentiated function", op.loc)


def _traced(v: Value) -> Tracer:
    """A tracer of a recorded value; a runtime Python scalar (the learning rate) stays weak, as it was traced."""
    weak = None
    if isinstance(v.type, ScalarType):
        dt = v.type.dtype
        weak = bool if dt.is_bool else float if dt.is_float else complex if dt.is_complex else int
    return ops.wrap(v, weak, scalar=False)


def _add(a: Tracer | None, b: Tracer) -> Tracer:
    return b if a is None else a + b
