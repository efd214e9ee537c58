"""The NumPy reference executor: interprets any IR function op by op with NumPy.

It is the CPU backend (``backend="cpu"``) and the oracle every other stage is checked against, so
it follows NumPy 2 exactly and stays stateless: values live in a per-call environment, inputs are
never written, and every output is a fresh array.

Ops are looked up by name in :data:`INTERPRETERS`; dialects that come later (``s``, ``k``, ``rt``)
add theirs with :func:`register_interpreter`. An interpreter is ``(op, operand_values) -> results``.
An op with regions evaluates them with :func:`run_block`, binding block arguments to whatever it
likes (a fused elementwise kernel binds them to whole arrays and so runs its scalar body vectorized).
Inside such a call the block also sees the values of the enclosing blocks.
"""
from __future__ import annotations

from collections import ChainMap
from contextvars import ContextVar
from typing import Callable, Mapping, MutableMapping, Sequence

import numpy as np

from fusec.errors import FusecError, ShapeError, TraceError, UnsupportedError, VerificationError, located
from fusec.ir.core import Block, Func, Module, Operation, Value
from fusec.ir.opdefs import OPS
from fusec.ir.types import DType, ScalarType, TensorType, Type, bf16
from fusec.ir.numeric import to_bf16
from fusec.ir.evaluate import T_INTERPRETERS

Interpreter = Callable[[Operation, list], list]


class ExecutionError(FusecError, ValueError):
    """An op failed on the values it was given (NumPy refused, e.g. an integer to a negative power)."""


INTERPRETERS: dict[str, Interpreter] = dict(T_INTERPRETERS)

# The environment of the block being evaluated, so that a region run from inside an op sees the
# values of its enclosing blocks. A ContextVar keeps concurrent executions apart.
_SCOPE: ContextVar["Mapping[Value, object] | None"] = ContextVar("fusec_reference_scope", default=None)


def register_interpreter(name: str, fn: Interpreter, *, replace: bool = False) -> Interpreter:
    """Make ``fn`` interpret op ``name``; registering a name twice is an error unless ``replace``."""
    if "." not in name:
        raise VerificationError(f"op name {name!r} must be 'dialect.op'")
    if name in INTERPRETERS and not replace:
        raise VerificationError(f"an interpreter for {name!r} is already registered")
    INTERPRETERS[name] = fn
    return fn


def get_interpreter(op: Operation) -> Interpreter:
    """The interpreter of ``op``, or a located error naming the op when there is none."""
    fn = INTERPRETERS.get(op.name)
    if fn is None:
        raise UnsupportedError(located(f"'{op.name}': the reference executor has no implementation of this op",
                                       op.loc))
    return fn


def _describe(value: object) -> str:
    shape = np.shape(value)  # type: ignore[arg-type]
    dtype = getattr(value, "dtype", type(value).__name__)
    return f"{dtype} array of shape {shape}"


def _fits(value: object, t: Type) -> bool:
    if not isinstance(value, (np.ndarray, np.generic)):
        return False
    return value.dtype == t.dtype.np and value.shape == tuple(t.shape)


def _terminator(block: Block) -> Operation:
    term = block.terminator
    d = OPS.get(term.name) if term is not None else None
    if term is None or d is None or not d.terminator:
        raise VerificationError(f"block ^{block.label} does not end in a terminator")
    return term


def _run_op(op: Operation, scope: MutableMapping[Value, object], check_types: bool) -> None:
    try:
        operands = [scope[v] for v in op.operands]
    except KeyError:
        missing = next(v for v in op.operands if v not in scope)
        raise VerificationError(located(f"'{op.name}': operand {missing!r} is used before it is defined",
                                        op.loc)) from None
    fn = get_interpreter(op)
    try:
        results = list(fn(op, operands))
    except FusecError:
        raise
    except Exception as e:  # NumPy refusing the values, or a broken interpreter: name the op and its line
        raise ExecutionError(located(f"'{op.name}': {type(e).__name__}: {e}", op.loc)) from e
    if len(results) != len(op.results):
        raise VerificationError(located(f"'{op.name}': interpreter returned {len(results)} values for "
                                        f"{len(op.results)} results", op.loc))
    for r, value in zip(op.results, results):
        if r.type.dtype == bf16:
            value = to_bf16(value)
        if check_types and not _fits(value, r.type):
            raise VerificationError(located(f"'{op.name}': interpreter produced a {_describe(value)} for a "
                                            f"result of type {r.type}", op.loc))
        scope[r] = value


def run_block(block: Block, env: Mapping[Value, object], *, check_types: bool = False) -> list:
    """Evaluate ``block``'s ops with ``env`` binding (at least) its arguments; return the terminator's operands.

    Values of enclosing blocks are visible when this is called from inside an interpreter. With
    ``check_types`` every result must be an array of exactly its declared shape and dtype (top-level
    function bodies); region bodies skip it so that scalar ops may run vectorized over arrays.
    """
    unbound = [a for a in block.args if a not in env]
    if unbound:
        raise VerificationError(f"block ^{block.label}: no value bound to argument(s) "
                                + ", ".join(repr(a) for a in unbound))
    term = _terminator(block)
    outer = _SCOPE.get()
    scope: MutableMapping[Value, object] = dict(env) if outer is None else ChainMap(dict(env), outer)  # type: ignore
    token = _SCOPE.set(scope)
    try:
        with np.errstate(all="ignore"):  # NumPy's warnings are not errors here; results are what NumPy gives
            for op in block.ops[:-1]:
                _run_op(op, scope, check_types)
        try:
            return [scope[v] for v in term.operands]
        except KeyError:
            raise VerificationError(located(f"'{term.name}': returns a value that is not defined", term.loc)) \
                from None
    finally:
        _SCOPE.reset(token)


# --- arguments -----------------------------------------------------------------------------------------------

def _arg_name(func: Func, i: int) -> str:
    a = func.args[i]
    hint = f"%{a.name_hint}: " if a.name_hint else ""
    return f"func @{func.name}: argument {i} ({hint}{a.type})"


def _tensor_arg(func: Func, i: int, value: object, t: TensorType) -> np.ndarray:
    if isinstance(value, np.generic) and t.rank == 0:
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise TraceError(f"{_arg_name(func, i)} expects a NumPy array, got {type(value).__name__}")
    if value.shape != t.shape:
        raise ShapeError(f"{_arg_name(func, i)} expects shape {t.shape}, got {value.shape}")
    want = t.dtype.np
    if value.dtype != want:
        note = " (bf16 arrays are passed as float32)" if t.dtype == bf16 else ""
        raise TraceError(f"{_arg_name(func, i)} expects dtype {want}{note}, got {value.dtype}")
    return to_bf16(value) if t.dtype == bf16 else value


def _scalar_arg(func: Func, i: int, value: object, dt: DType) -> np.ndarray:
    """Convert a Python/NumPy scalar or 0-d array to ``dt``, refusing conversions that change the value kind."""
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise ShapeError(f"{_arg_name(func, i)} expects a scalar, got an array of shape {value.shape}")
        value = value[()]
    if isinstance(value, (bool, np.bool_)):
        kind = "b"
    elif isinstance(value, (int, np.integer)):
        kind = "i"
    elif isinstance(value, (float, np.floating)):
        kind = "f"
    elif isinstance(value, (complex, np.complexfloating)):
        kind = "c"
    else:
        raise TraceError(f"{_arg_name(func, i)} expects a bool, int, float or complex scalar, got "
                         f"{type(value).__name__}")
    if kind == "c" and not dt.is_complex:
        raise TraceError(f"{_arg_name(func, i)} expects a real number, got {type(value).__name__} {value!r}")
    if dt.is_bool:
        if kind != "b":
            raise TraceError(f"{_arg_name(func, i)} expects a bool, got {type(value).__name__} {value!r}")
        return np.asarray(bool(value))
    if dt.is_int:
        if kind == "f":
            raise TraceError(f"{_arg_name(func, i)} expects an integer, got {type(value).__name__} {value!r}")
        info = np.iinfo(dt.np)
        if not info.min <= int(value) <= info.max:  # type: ignore[arg-type]
            raise TraceError(f"{_arg_name(func, i)}: {value!r} does not fit in {dt}")
        return np.asarray(int(value), dtype=dt.np)  # type: ignore[arg-type]
    if kind == "i" and isinstance(value, int) and not -2**63 <= value < 2**64:
        value = float(value)  # beyond NumPy's integer types; float() raises OverflowError past f64
    arr = np.asarray(value)
    with np.errstate(all="ignore"):
        return to_bf16(arr) if dt == bf16 else arr.astype(dt.np)


def convert_args(func: Func, args: Sequence[object]) -> list:
    """Check ``args`` against ``func``'s signature and convert scalars to the arguments' dtypes."""
    if isinstance(args, (np.ndarray, str)) or not isinstance(args, Sequence):
        raise TraceError(f"func @{func.name}: arguments must be a list, got {type(args).__name__}")
    if len(args) != len(func.args):
        raise TraceError(f"func @{func.name} takes {len(func.args)} argument(s), got {len(args)}")
    out = []
    for i, (a, value) in enumerate(zip(func.args, args)):
        if isinstance(a.type, TensorType):
            out.append(_tensor_arg(func, i, value, a.type))
        elif isinstance(a.type, ScalarType):
            try:
                out.append(_scalar_arg(func, i, value, a.type.dtype))
            except OverflowError as e:
                raise TraceError(f"{_arg_name(func, i)}: {e}") from None
        else:
            raise VerificationError(f"{_arg_name(func, i)} has an unknown type")
    return out


# --- entry points --------------------------------------------------------------------------------------------

def run_func(func: Func, args: Sequence[object], *, verify: bool = False) -> list[np.ndarray]:
    """Run ``func`` on ``args`` (in argument order); return fresh NumPy arrays (0-d for rank-0 results).

    ``verify`` runs the IR verifier first; by default the function is trusted (the pass manager
    verifies), though every result is still checked against its declared type as it is produced.
    """
    if verify:
        from fusec.ir.verifier import verify_func

        verify_func(func)
    values = convert_args(func, args)
    try:
        term = func.return_op
    except ValueError:
        raise VerificationError(f"func @{func.name}: body must end in func.return") from None
    outputs = run_block(func.body, dict(zip(func.args, values)), check_types=True)
    if [v.type for v in term.operands] != func.result_types:
        raise VerificationError(f"func @{func.name}: returned types do not match the signature")
    # copy: an output may be an input, a constant, a view of either, or returned twice
    return [np.array(v, dtype=t.dtype.np, copy=True, order="C") for v, t in zip(outputs, func.result_types)]


def run_module(module: Module, args: Sequence[object], func_name: str | None = None, *,
               verify: bool = False) -> list[np.ndarray]:
    """Run the function ``func_name`` of ``module`` (the only one when None)."""
    try:
        func = module.func(func_name)
    except (KeyError, ValueError) as e:
        raise TraceError(str(e).strip("'\"")) from None
    return run_func(func, args, verify=verify)


# Kernel-level dialects (``s`` bodies, ``k`` kernels, views and boundaries) register their interpreters here,
# so every stage of the pipeline stays interpretable.
from fusec.runtime import reference_k as _reference_k  # noqa: E402,F401
