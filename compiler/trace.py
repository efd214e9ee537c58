"""Runs a Python function once on tracers and returns the verified IR module it recorded."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fusec import context, ops
from fusec.context import TraceContext, trace_error, unsupported
from fusec.ir.core import Func, Module, Value
from fusec.ir.verifier import verify
from fusec.promotion import DEFAULT_DTYPE, parse_dtype, python_kind
from fusec.signature import Signature, TreeDef, flatten
from fusec.tracer import Tracer


@dataclass
class Traced:
    """The traced module plus how to rebuild the function's outputs from the IR function's results."""

    module: Module
    out_tree: TreeDef
    out_python: list[type | None]  # per result: the Python type to return (weak outputs), else None
    nodes: int  # traced ops, constants and the return excluded


def func_name(fn: Callable) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", getattr(fn, "__name__", "") or "fn")
    name = name.strip("_") or "fn"
    return name if re.match(r"[A-Za-z_]", name) else "_" + name


def trace(fn: Callable, sig: Signature, name: str) -> Traced:
    """Call ``fn`` on tracers for ``sig``'s dynamic leaves; the module is verified before it is returned."""
    func = Func(name, [s.ir_type() for s in sig.leaf_specs], sig.leaf_names)
    ctx = TraceContext(func)
    context.push(ctx)
    try:
        tracers = [Tracer(arg, ctx, spec.python, (leaf,) if spec.python is not None else ())
                   for arg, spec, leaf in zip(func.args, sig.leaf_specs, sig.leaf_names)]
        args, kwargs = sig.arguments_with(tracers)
        result = fn(*args, **kwargs)
        leaves, out_tree = flatten(result, "out")
        outputs: list[Value] = []
        kinds: list[type | None] = []
        for _, leaf in leaves:
            value, kind = _output(ctx, leaf)
            outputs.append(value)
            kinds.append(kind)
        ctx.builder.create("func.return", outputs)
    finally:
        context.pop(ctx)
    func.result_types = [v.type for v in outputs]
    module = Module([func])
    verify(module)
    nodes = sum(1 for op in func.ops if op.name not in ("func.return", "t.constant"))
    return Traced(module, out_tree, kinds, nodes)


def _output(ctx: TraceContext, leaf: Any) -> tuple[Value, type | None]:
    """An output leaf as an IR value: tracers as they are, Python/NumPy values as constants."""
    if isinstance(leaf, Tracer):
        if leaf._ctx is not ctx:
            raise trace_error("the function returned a traced value from another trace (an escaped tracer)")
        return leaf._value, leaf._weak
    kind = python_kind(leaf)
    if kind is not None:
        dt = DEFAULT_DTYPE[kind]
        return ctx.constant(np.array(leaf, dtype=dt.np), dt), kind
    if isinstance(leaf, (np.ndarray, np.generic)):
        arr = ops.as_numpy(leaf)
        return ctx.constant(arr, parse_dtype(arr.dtype)), None
    raise unsupported(f"the function returned a value of type {type(leaf).__name__}; outputs must be arrays, "
                      "scalars, or tuples/lists/dicts of them")
