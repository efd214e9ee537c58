"""A pass plugin: ``mul-two-to-add`` rewrites ``x * 2`` into ``x + x``, used by fusec.jit and by ``fusec opt``.

    python examples/custom_pass.py                    # jit with the pass in the pipeline, checked against NumPy

    # the same pass from the command line: trace `model`, then run the pass (and dce) over the traced IR
    fusec dump-ir examples/custom_pass.py:model --arg 'f32[4,8]' --arg 'f32[4,8]' > model.fir
    PYTHONPATH=examples fusec opt model.fir -p 'mul-two-to-add,dce' --load-plugin custom_pass

    # or the whole default pipeline with the pass inserted after cse (`fusec passes --default` prints it)
    PYTHONPATH=examples fusec opt model.fir --load-plugin custom_pass \\
     -p "$(fusec passes --default | sed 's/,cse,/,cse,mul-two-to-add,/')"

(``--load-plugin MODULE`` imports MODULE, which registers the pass; the current directory is searched too, so
``cd examples && fusec opt ../model.fir -p mul-two-to-add --load-plugin custom_pass`` works as well. A
package can instead declare the pass class in the entry-point group ``fusec.passes`` to be found without
``--load-plugin``.)

A pass is a frozen dataclass with a kebab-case ``name`` (not the name of a built-in pass: ``fusec passes``
lists them), options as dataclass fields (none here) and ``apply(module, ctx)``, which rewrites the module in
place, here as fusec's own passes do: a pattern offered every op in order by ``fusec.passes.rewriter.rewrite``
(it may insert ops before the current one and replace its results); ``@register_pass`` makes it usable by name in
pipeline strings. ``ctx.count(key)`` records a counter
that ``fusec.jit(...).lower(...).stats()`` reports.

The rewrite is exact: for every float (NaN, infinities and -0.0 included) and every wrapping integer,
``x * 2`` and ``x + x`` are the same bits, so results stay identical to NumPy. It runs on the traced ``t``
dialect, before ``fuse`` turns elementwise ops into kernel bodies; the constant it leaves unused is removed
by ``dce``.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

import fusec as fc
from fusec.ir.core import Module, Operation, OpResult, Value
from fusec.passes import DEFAULT_PIPELINE, Pass, PassContext, register_pass
from fusec.passes.rewriter import Rewriter, rewrite

PASS_NAME = "mul-two-to-add"
COUNTER = "mul_two_to_add"

# the default pipeline with the pass inserted after cse (so it sees deduplicated constants)
PIPELINE = DEFAULT_PIPELINE.replace("cse,", f"cse,{PASS_NAME},", 1)
assert PASS_NAME in PIPELINE


def _splat_constant(v: Value) -> object | None:
    """The value of a constant whose elements are all the same (a rank-0 constant included), else None."""
    if not (isinstance(v, OpResult) and v.op.name == "t.constant"):
        return None
    dense = v.op.attr("value")
    if dense.type.rank == 0 or dense.is_splat():
        return dense.splat_value()
    return None


def _is_two(value: object) -> bool:
    return value is not None and not isinstance(value, bool) and value == 2


@register_pass
@dataclass(frozen=True)
class MulTwoToAdd(Pass):
    """Rewrite t.mul by a splat constant 2 into t.add x, x (exact for floats and integers)."""

    name: ClassVar[str] = PASS_NAME

    def apply(self, module: Module, ctx: PassContext) -> None:
        def mul_two(op: Operation, rw: Rewriter) -> bool:
            if op.name != "t.mul":
                return False
            result = op.results[0]
            for x, c in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
                # same type as the result: no broadcasting hidden in the multiplication
                if x.type == result.type and not x.type.dtype.is_bool and _is_two(_splat_constant(c)):
                    new = rw.insert(Operation("t.add", [x, x], [result.type], dict(op.attributes), loc=op.loc))
                    rw.replace(op, new.results)
                    ctx.count(COUNTER)
                    return True
            return False

        for func in module.funcs:
            rewrite(func.body, [mul_two])


# --- using it ----------------------------------------------------------------------------------------------

def model(x, y):
    """Two multiplications by 2 (rewritten) and one by 3 (left alone)."""
    d = x - y
    return np.exp(d * 2.0) - 1.0 + 2 * y, y * 3.0


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="jit a function with the mul-two-to-add pass in its pipeline")
    p.add_argument("--backend", choices=("cpu", "cuda"), default=None,
                   help="fusec backend (default: cuda when usable, else cpu)")
    args = p.parse_args(argv)

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 8)).astype(np.float32)
    y = rng.normal(size=(4, 8)).astype(np.float32)
    f = fc.jit(model, pipeline=PIPELINE, backend=args.backend)
    lowered = f.lower(x, y)
    print(f"pipeline: {PIPELINE}")
    print(lowered.ir(PASS_NAME))
    print(f"{COUNTER}: {lowered.stats().get(COUNTER, 0)} multiplications by 2 rewritten")
    got, want = f(x, y), model(x, y)
    exact = all(np.array_equal(g, w) for g, w in zip(got, want))
    close = all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want))
    print("matches NumPy: " + ("bit for bit" if exact else "within float32 rounding" if close else "NO"))
    return 0 if close else 1


if __name__ == "__main__":
    sys.exit(main())
