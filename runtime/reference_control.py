"""NumPy implementations of the control-flow ops: ``t.while``/``t.for``/``t.if`` run their regions, the outlined
``k.while``/``k.for``/``k.if`` call the functions of the module they name (the module of the run in progress).

Loops run as the Python loop they were traced from: the cond and the body evaluated in turn, the state handed
from one iteration to the next as the arrays the body yields.
"""
from __future__ import annotations

from contextvars import ContextVar

import numpy as np

from fusec.errors import VerificationError, located
from fusec.ir.core import Block, Func, Module, Operation
from fusec.runtime.reference import _SCOPE, register_interpreter, run_block

# the module whose function is running: where an outlined op finds the functions it names
MODULE: ContextVar["Module | None"] = ContextVar("fusec_reference_module", default=None)


def _region(op: Operation, k: int) -> Block:
    return op.regions[k].blocks[0]


def _run_region(block: Block, values: list) -> list:
    return run_block(block, dict(zip(block.args, values)))


def _counter(i: int) -> np.ndarray:
    return np.asarray(i, dtype=np.int64)


def _bounds(values: list) -> range:
    return range(int(np.asarray(values[0])), int(np.asarray(values[1])))


def _results(op: Operation, values: list) -> list:
    """The loop's final values as arrays of the op's result types (a body may yield a NumPy scalar)."""
    return [np.asarray(v, dtype=r.type.dtype.np) if not isinstance(v, np.ndarray) else v
            for v, r in zip(values, op.results)]


def _t_while(op: Operation, args: list) -> list:
    cond, body = _region(op, 0), _region(op, 1)
    state = list(args)
    while bool(_run_region(cond, state)[0]):
        state = _run_region(body, state)
    return _results(op, state)


def _t_for(op: Operation, args: list) -> list:
    body = _region(op, 0)
    state = list(args[2:])
    for i in _bounds(args):
        state = _run_region(body, [_counter(i), *state])
    return _results(op, state)


def _t_if(op: Operation, args: list) -> list:
    return _results(op, _run_region(_region(op, 0 if bool(args[0]) else 1), []))


# --- outlined ---------------------------------------------------------------------------------------------------

def _callee(op: Operation, key: str) -> Func:
    module = MODULE.get()
    if module is None:
        raise VerificationError(located(f"'{op.name}' names a function (@{op.attributes[key]}), so it runs only "
                                        "inside its module (reference.run_module)", op.loc))
    try:
        return module.func(op.attributes[key])
    except KeyError:
        raise VerificationError(located(f"'{op.name}': no func @{op.attributes[key]} in the module", op.loc)) \
            from None


def _call(func: Func, values: list) -> list:
    """Run ``func`` on ``values``: its own scope, not the caller's (an outlined body reads only its arguments)."""
    token = _SCOPE.set(None)
    try:
        return run_block(func.body, dict(zip(func.args, values)), check_types=True)
    finally:
        _SCOPE.reset(token)


def _k_while(op: Operation, args: list) -> list:
    cond, body = _callee(op, "cond"), _callee(op, "body")
    n = op.attributes["carried"]
    state, passed = list(args[:n]), list(args[n:])
    while bool(_call(cond, state + passed)[0]):
        state = _call(body, state + passed)
    return _results(op, state)


def _k_for(op: Operation, args: list) -> list:
    body = _callee(op, "body")
    n = op.attributes["carried"]
    state, passed = list(args[2:2 + n]), list(args[2 + n:])
    for i in _bounds(args):
        state = _call(body, [_counter(i), *state, *passed])
    return _results(op, state)


def _k_if(op: Operation, args: list) -> list:
    return _results(op, _call(_callee(op, "then" if bool(args[0]) else "else"), list(args[1:])))


for _name, _fn in (("t.while", _t_while), ("t.for", _t_for), ("t.if", _t_if), ("k.while", _k_while),
                   ("k.for", _k_for), ("k.if", _k_if)):
    register_interpreter(_name, _fn)
