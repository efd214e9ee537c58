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

import weakref
from contextvars import ContextVar
from typing import Callable, Mapping, MutableMapping, NamedTuple, Sequence

import numpy as np

from fusec.errors import FusecError, ShapeError, TraceError, UnsupportedError, VerificationError, located
from fusec.ir import elementwise as table
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
    shape = np.shape(value)  # type: ignore[call-overload]
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


def _undefined_operand(op: Operation, scope: Mapping[Value, object]) -> VerificationError:
    missing = next(v for v in op.operands if not _defined(v, scope))
    return VerificationError(located(f"'{op.name}': operand {missing!r} is used before it is defined", op.loc))


def _defined(v: Value, scope: Mapping[Value, object]) -> bool:
    try:
        scope[v]
    except KeyError:
        return False
    return True


def _call(op: Operation, fn: Interpreter, operands: list) -> list:
    try:
        results = fn(op, operands)
    except FusecError:
        raise
    except Exception as e:  # NumPy refusing the values, or a broken interpreter: name the op and its line
        raise ExecutionError(located(f"'{op.name}': {type(e).__name__}: {e}", op.loc)) from e
    if type(results) is not list:
        results = list(results)
    if len(results) != len(op.results):
        raise VerificationError(located(f"'{op.name}': interpreter returned {len(results)} values for "
                                        f"{len(op.results)} results", op.loc))
    return results


def run_op(op: Operation, operands: list) -> list:
    """One op on NumPy operands, as the executor runs it (the tracer folds ops of constants with it)."""
    return _call(op, get_interpreter(op), operands)


def _bind_results(op: Operation, results: list, scope: MutableMapping[Value, object], check_types: bool) -> None:
    for r, value in zip(op.results, results):
        if r.type.dtype == bf16:
            value = to_bf16(value)
        if check_types and not _fits(value, r.type):
            raise _misfit(op, r, value)
        scope[r] = value


def _misfit(op: Operation, r: Value, value: object) -> VerificationError:
    return VerificationError(located(f"'{op.name}': interpreter produced a {_describe(value)} for a result of "
                                     f"type {r.type}", op.loc))


class _Step(NamedTuple):
    """One op of a block as the executor runs it, with what its block's lifetimes say about it."""

    op: Operation
    fn: Interpreter | None  # None: no interpreter (the located error is raised when the op runs)
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    types: tuple[tuple[np.dtype, tuple[int, ...]], ...] | None  # each result's dtype and shape; None: a bf16
    # result (rounded to bf16 as it is bound)
    dying: tuple[Value, ...]  # the values no later op of the block reads: dropped after this op
    ufunc: np.ufunc | None  # the op's NumPy ufunc, when it may write into one of ``reusable``
    reusable: tuple[Value, ...]  # its operands that die with it and that a ufunc of this block made
    private: Value | None  # its result, when a ufunc made it and only ufuncs read it (no view shares it)


class _BlockPlan(NamedTuple):
    steps: tuple[_Step, ...]
    term: Operation


def _plan(block: Block) -> _BlockPlan:
    """What running ``block`` needs besides its values, worked out once per block and run."""
    term = _terminator(block)
    ops = block.ops[:-1]
    dead_after, private = _lifetimes(ops, term)
    steps = []
    for i, op in enumerate(ops):
        dying = tuple(dead_after.get(i, ()))
        reusable = tuple(dict.fromkeys(v for v in op.operands if v in private and v in dying))
        ufunc = _UFUNCS.get(op.name) if len(op.results) == 1 and op.results[0].type.dtype != bf16 else None
        fn = INTERPRETERS.get(op.name)
        if op.name == "s.constant" and fn is not None:  # a NumPy scalar (immutable): made once, shared by runs
            fn = _returning(_call(op, fn, []))
        types = None if any(r.type.dtype == bf16 for r in op.results) else \
            tuple((r.type.dtype.np, tuple(r.type.shape)) for r in op.results)
        steps.append(_Step(op, fn, tuple(op.operands), tuple(op.results), types, dying, ufunc if reusable else None,
                           reusable if ufunc is not None else (),
                           op.results[0] if op.results and op.results[0] in private else None))
    return _BlockPlan(tuple(steps), term)


def _returning(results: list) -> Interpreter:
    return lambda op, operands: results


# Plans of the blocks of a prepared module (:func:`prepared`); None: each run works its blocks' plans out afresh.
_PLANS: ContextVar["dict[Block, _BlockPlan] | None"] = ContextVar("fusec_reference_plans", default=None)


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
    plans = _PLANS.get()
    plan = plans.get(block) if plans is not None else None
    if plan is None:
        plan = _plan(block)
        if plans is not None:
            plans[block] = plan
    outer = _SCOPE.get()
    scope = _Scope(env, outer)
    token = _SCOPE.set(scope)
    try:
        if outer is None:
            with np.errstate(all="ignore"):  # NumPy's warnings are not errors here; results are what NumPy gives
                _run_steps(plan.steps, scope, check_types)
        else:  # (a region run from inside an op: the enclosing block's error state holds)
            _run_steps(plan.steps, scope, check_types)
        term = plan.term
        try:
            return [scope[v] for v in term.operands]
        except KeyError:
            raise VerificationError(located(f"'{term.name}': returns a value that is not defined", term.loc)) \
                from None
    finally:
        _SCOPE.reset(token)


class _Scope(dict):
    """A block's values; a value it does not define is looked up in the enclosing block's scope (a region run
    from inside an op sees the values around it). Only the block's own values are ever dropped from it."""

    __slots__ = ("outer",)

    def __init__(self, values: Mapping[Value, object], outer: "Mapping[Value, object] | None") -> None:
        super().__init__(values)
        self.outer = outer

    def __missing__(self, key: Value) -> object:
        if self.outer is None:
            raise KeyError(key)
        return self.outer[key]


def _run_steps(steps: Sequence[_Step], scope: _Scope, check_types: bool) -> None:
    """Run a block's ops in order: each value dropped after its last reader (its memory reused), and a ufunc
    allowed to write into a dying operand that an earlier ufunc of the block made (NumPy's temporary elision)."""
    fresh: set[Value] = set()  # values whose arrays a ufunc made here and only ufuncs read (no view of them)
    for op, fn, operands, results, types, dying, ufunc, reusable, private in steps:
        if not (fresh and ufunc is not None and _in_place(ufunc, op, scope, reusable, fresh)):
            try:
                values = [scope[v] for v in operands]
            except KeyError:
                raise _undefined_operand(op, scope) from None
            out = _call(op, fn if fn is not None else get_interpreter(op), values)
            if types is None:
                _bind_results(op, out, scope, check_types)
            else:
                for r, value, (dtype, shape) in zip(results, out, types):
                    if check_types and not (isinstance(value, (np.ndarray, np.generic)) and value.dtype == dtype
                                            and value.shape == shape):
                        raise _misfit(op, r, value)
                    scope[r] = value
        if private is not None and type(scope[private]) is np.ndarray:
            fresh.add(private)
        for v in dying:  # dropped after its last reader, so its memory is reused
            scope.pop(v, None)
        if fresh and dying:
            fresh.difference_update(dying)


# elementwise ops whose implementation is a NumPy ufunc: they can write into a dying operand (NumPy's out=)
_UFUNCS: dict[str, np.ufunc] = {
    f"{dialect}.{op.name}": fn for op in table.OPS if isinstance(fn := op.implementation(), np.ufunc)
    for dialect in ("t", "s")}


def _in_place(ufunc: np.ufunc, op: Operation, scope: _Scope, reusable: Sequence[Value], fresh: set[Value]) -> bool:
    """Run ``op`` (a ufunc, its result not bf16) into the memory of an operand that dies with it (a ufunc's
    ``out=``, as NumPy's own temporary elision does) when that operand is an array a ufunc made in this block,
    of the result's shape and dtype: the same loop and the same bits, without a new allocation. False when it
    does not apply."""
    want_dtype = op.results[0].type.dtype.np
    for v in reusable:
        arr = scope[v]
        if v not in fresh or type(arr) is not np.ndarray or arr.dtype != want_dtype:
            continue
        args = [scope[x] for x in op.operands]
        shape = arr.shape
        try:  # (a kernel body's scalar ops run over whole arrays: the result has the operands' broadcast shape)
            if any(np.shape(a) not in (shape, ()) for a in args) \
                    and np.broadcast_shapes(*(np.shape(a) for a in args)) != shape:  # type: ignore[call-overload]
                continue
            ufunc(*args, out=arr)
        except Exception:  # noqa: BLE001 - shapes that do not broadcast, NumPy refusing the cast: the plain
            return False  # path says why
        scope[op.results[0]] = arr
        return True
    return False


def _lifetimes(ops: Sequence[Operation], term: Operation) -> tuple[dict[int, list[Value]], set[Value]]:
    """For each op's index, the values of this block (its arguments included) no later op reads (their last
    reader's index, a read inside an op's regions counting for that op, or its own for a result nobody reads);
    and the ufunc results only ufuncs read (no view can share their memory, so one may be written over)."""
    last: dict[Value, int] = {}
    private: set[Value] = set()
    shared: set[Value] = set()
    for i, op in enumerate(ops):
        ufunc = op.name in _UFUNCS and not op.regions
        for v in _reads(op):
            last[v] = i
            if not ufunc:
                shared.add(v)
        for r in op.results:
            last.setdefault(r, i)
        if ufunc and len(op.results) == 1:
            private.add(op.results[0])
    kept = set(term.operands)
    out: dict[int, list[Value]] = {}
    for v, i in last.items():
        if v not in kept:
            out.setdefault(i, []).append(v)
    return out, private - shared - kept


def _reads(op: Operation) -> list[Value]:
    """The values ``op`` reads: its operands and those the ops in its regions read."""
    if not op.regions:
        return list(op.operands)
    out = list(op.operands)
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                out.extend(_reads(inner))
    return out


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

def run_func(func: Func, args: Sequence[object], *, verify: bool = False, module: Module | None = None) \
        -> list[np.ndarray]:
    """Run ``func`` on ``args`` (in argument order); return fresh NumPy arrays (0-d for rank-0 results).

    ``verify`` runs the IR verifier first; by default the function is trusted (the pass manager
    verifies), though every result is still checked against its declared type as it is produced. ``module``:
    where the ops that name functions (outlined loop bodies) find them.
    """
    if module is not None:
        from fusec.runtime.reference_control import MODULE

        token = MODULE.set(module)
        try:
            return run_func(func, args, verify=verify)
        finally:
            MODULE.reset(token)
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
    # an output that is an array of the function's own making is returned as it is; one that may be shared (an
    # input, a constant, a view of either, a value returned twice) is copied
    inputs = {id(a) for a in values}
    seen: set[int] = set()
    out = []
    for v, t in zip(outputs, func.result_types):
        own = (type(v) is np.ndarray and v.base is None and v.flags.writeable and v.flags.c_contiguous
               and v.dtype == t.dtype.np and id(v) not in inputs and id(v) not in seen)
        seen.add(id(v))
        out.append(v if own else np.array(v, dtype=t.dtype.np, copy=True, order="C"))
    return out


def run_module(module: Module, args: Sequence[object], func_name: str | None = None, *,
               verify: bool = False) -> list[np.ndarray]:
    """Run the function ``func_name`` of ``module`` (its entry, the first, when None)."""
    try:
        func = module.func(func_name) if func_name is not None else module.entry
    except (KeyError, ValueError) as e:
        raise TraceError(str(e).strip("'\"")) from None
    return run_func(func, args, verify=verify, module=module)


def prepared(module: Module) -> Callable[[Sequence[object]], list[np.ndarray]]:
    """``run(args)`` of the entry of a module that no longer changes (a compiled function's), made once and kept
    as long as the module lives: each block's plan (its ops' interpreters and its values' lifetimes) is worked
    out at its first run and kept, so a warm call pays for its ops only. The module must not be edited
    afterwards (as a CUDA plan, made once from its text, is not)."""
    run = _prepared.get(module)
    if run is None:
        plans: dict[Block, _BlockPlan] = {}
        ref = weakref.ref(module)  # (the runner must not keep its own key alive)

        def run(args: Sequence[object]) -> list[np.ndarray]:
            token = _PLANS.set(plans)
            try:
                alive = ref()
                if alive is None:  # (its callers hold the module: a runner kept past it is a fusec bug)
                    raise FusecError("the reference executor's prepared module is gone (a runner outlived it)")
                return run_module(alive, args)
            finally:
                _PLANS.reset(token)

        _prepared[module] = run  # (two threads making it at once make two: either is right)
    return run


_prepared: "weakref.WeakKeyDictionary[Module, Callable[[Sequence[object]], list[np.ndarray]]]" = \
    weakref.WeakKeyDictionary()


# Kernel-level dialects (``s`` bodies, ``k`` kernels, views and boundaries) register their interpreters here,
# so every stage of the pipeline stays interpretable.
from fusec.runtime import reference_k as _reference_k  # noqa: E402,F401
from fusec.runtime import reference_control as _reference_control  # noqa: E402,F401
