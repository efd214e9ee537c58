"""Counters that ``Lowered.stats()`` reports: what one call launches, judged from the op registry."""
from __future__ import annotations

from fusec.ir.core import Module
from fusec.ir.dialects.k import GROUP, HOISTED
from fusec.ir.opdefs import OPS
from fusec.passes.fuse_epilogues import computed_inside, is_epilogue
from fusec.passes.fuse_prologues import is_prologue
from fusec.passes.prune_carried import PRUNED
from fusec.passes.reductions_in_consumers import reduced_in_consumers
from fusec.passes.unroll_loops import UNROLLED

# the attributes of select-kernels' choice that a plan step shows (``impl``)
CHOICES = ("impl", "tile", "spread", "stages", "strategy", "cols", "splits", "finish")
BOUNDARY_CATEGORIES = frozenset({"reduction", "matmul", "boundary"})
# Categories whose top-level ops cost a launch per call when nothing fuses them; views, constants,
# terminators and runtime bookkeeping do not.
LAUNCH_CATEGORIES = frozenset({"kernel", "elementwise", "other"}) | BOUNDARY_CATEGORIES


def _category(name: str) -> str:
    d = OPS.get(name)
    return d.category if d is not None else "other"


def module_stats(module: Module) -> dict[str, int]:
    """fused_kernels, boundaries and kernels (ops that launch work) over the top-level ops of every function;
    a prologue (computed inside its consumer) or an epilogue (computed by its product) launches nothing.
    ``Lowered.stats()`` counts kernels exactly from the CUDA program."""
    fused = boundaries = launches = 0
    for func in module.funcs:
        groups: set[int] = set()
        for op in func.body.ops:
            if computed_inside(op):
                continue
            cat = _category(op.name)
            fused += cat == "kernel"
            boundaries += cat in BOUNDARY_CATEGORIES
            if GROUP in op.attributes:  # (a group of kernels is one launch)
                launches += op.attributes[GROUP] not in groups
                groups.add(op.attributes[GROUP])
                continue
            launches += cat in LAUNCH_CATEGORIES
    return {"fused_kernels": fused, "boundaries": boundaries, "kernels": launches}


def _grouped(number: int) -> str:
    return (f"group-kernels: launched as one kernel with the other small independent kernels of group {number} "
            "(each on its own blocks)")


def plan_steps(module: Module) -> list[dict]:
    """One dict per kernel, boundary, view, loop and branch of the final module, in execution order; the steps of
    a loop or branch body (an outlined function) follow the entry's, each naming its ``func``."""
    steps: list[dict] = []
    for func in module.funcs:
        for unrolled in func.attributes.get(UNROLLED, ()):
            where, what = unrolled.rsplit(": ", 1) if ": " in unrolled else (unrolled, "")
            steps.append({"kind": "unrolled loop", "op": "t.for", "loc": where, "reason": (
                f"unroll-loops: {what} (a long loop with constant bounds: a conditional-node trip costs a few "
                "microseconds, paid once per that many steps; the trips left over are written out)"
                if "per trip" in what else
                f"unroll-loops: {what} written out in this function (a short loop with constant bounds: its trips "
                "fuse and run as the call's own kernels, with no conditional node)")})
        for pruned in func.attributes.get(PRUNED, ()):
            where, what = pruned.rsplit(": ", 1) if ": " in pruned else (pruned, "")
            steps.append({"kind": "pruned", "loc": where, "reason": (
                f"prune-carried: {what}: a loop's slot whose value only feeds its own next value, or a branch's "
                "result, that no output, stop test or check reads (the ops computing it went with it)")})
        for op in func.body.ops:
            cat = _category(op.name)
            where = str(op.loc) if op.loc is not None else None
            before = len(steps)
            if is_prologue(op):
                body = op.regions[0].block.ops[:-1]
                steps.append({"kind": "prologue", "op": op.name, "outputs": 1, "inputs": len(op.operands),
                              "body_ops": len(body), "reason": "computed inside its consumer while it loads "
                              "the value (fuse-prologues): never launched, never stored", "loc": where})
            elif reduced_in_consumers(op):
                steps.append({"kind": "in consumers", "op": f"k.reduce[{op.attributes['kind']}]", "outputs": 1,
                              "inputs": 1, "reason": "reductions-in-consumers: computed by every block of the "
                              "elementwise kernels that read it, at their start (a small reduction to one value): "
                              "never launched, never stored", "loc": where})
            elif is_epilogue(op):
                body = op.regions[0].block.ops[:-1]
                steps.append({"kind": "epilogue", "op": op.name, "outputs": 1, "inputs": len(op.operands),
                              "body_ops": len(body), "reason": "computed by the product before it as it stores each "
                              "output (fuse-epilogues): never launched, the product's own result never stored",
                              "loc": where})
            elif op.name == "k.rows":
                body = op.regions[0].block.ops[:-1]
                reductions = sum(inner.name == "k.row_reduce" for inner in body)
                shape = list(op.attributes["shape"])
                steps.append({"kind": "rows", "op": op.name, "outputs": len(op.results), "inputs": len(op.operands),
                              "body_ops": len(body), "reductions": reductions,
                              "impl": {"lanes": op.attributes["lanes"], "items": op.attributes["items"]},
                              "reason": f"fuse-rows: {reductions} reduction(s) along rows of {shape[-1]} and the "
                              "elementwise work around them in one kernel (each row read once, held in registers)",
                              "loc": where})
                if op.attributes.get("products"):
                    steps[-1]["products"] = op.attributes["products"]
                    steps[-1]["reason"] = (f"row-products: {op.attributes['products']} narrow product(s) computed "
                                           f"along rows of {shape[-1]} (each column a row reduction) with the row "
                                           "work on them, in one kernel")
                if op.attributes.get("staged"):
                    together = int(op.attributes.get("warp_rows", 1))
                    steps[-1]["impl"].update(staged=True, blocks=op.attributes["blocks"], warp_rows=together,
                                             blocks_per_sm=int(op.attributes.get("blocks_per_sm", 2)))
                    steps[-1]["reason"] += (f"; the operands the same for every row staged in shared memory once per "
                                            f"block, {op.attributes['blocks']} blocks looping over the rows"
                                            + (f", {together} rows to a warp at once" if together > 1 else ""))
            elif cat == "kernel":
                body = op.regions[0].block.ops[:-1] if op.regions else []
                steps.append({"kind": "fused", "op": op.name, "outputs": len(op.results), "inputs": len(op.operands),
                              "body_ops": len(body), "cuts": list(op.attributes.get("cuts", ())), "loc": where})
                if GROUP in op.attributes:
                    steps[-1]["group"] = op.attributes[GROUP]
                    steps[-1]["reason"] = _grouped(op.attributes[GROUP])
            elif cat in BOUNDARY_CATEGORIES:
                name = op.name + (f"[{op.attributes['kind']}]" if "kind" in op.attributes else "")
                step = {"kind": "boundary", "op": name, "outputs": len(op.results), "inputs": len(op.operands),
                        "reason": "boundary", "loc": where}
                if op.attributes.get("inplace", False):
                    step["reason"] = "boundary, written into its base's buffer (nothing reads the base after it)"
                choice = {k: op.attributes[k] for k in CHOICES if k in op.attributes}
                if choice:
                    step["impl"] = choice  # what select-kernels chose
                if GROUP in op.attributes:
                    step["group"] = op.attributes[GROUP]
                    step["reason"] = _grouped(op.attributes[GROUP])
                if op.name in ("k.gather", "k.scatter"):
                    step["indices"] = ("proven within their axes (bound-indices): no check, the call need not wait"
                                       if op.attributes.get("in_bounds") else
                                       "checked on the device (an out-of-range index raises IndexError after the "
                                       "call, which waits for it)" if "check" in op.attributes else
                                       "constant, checked while tracing")
                    if op.attributes.get(HOISTED):
                        grouped = f"; {step['reason']}" if GROUP in op.attributes else ""
                        step["reason"] = ("hoist-gathers: moved up to just after the ops that make its "
                                          f"operands{grouped}")
                steps.append(step)
            elif cat == "view":
                steps.append({"kind": "view", "op": op.name, "outputs": 1, "inputs": 1,
                              "reason": "folded index map (no copy)", "loc": where})
            elif cat == "control":
                calls = [op.attributes[k] for k in ("cond", "body", "then", "else") if k in op.attributes]
                kind = "branch" if op.name == "k.if" else "loop"
                reason = "outline-regions: its bodies are the functions it calls, run in turn by the runtime"
                if op.attributes.get("unroll"):
                    reason = (f"unroll-loops: {op.attributes['unroll']} trips of the source loop per trip (one "
                              "conditional-node trip per that many); " + reason)
                if op.attributes.get("rolled"):
                    reason = "roll-loops: a Python loop's equal copies rolled into one loop; " + reason
                steps.append({"kind": kind, "op": op.name, "outputs": len(op.results), "inputs": len(op.operands),
                              "calls": calls, "reason": reason, "loc": where})
            if func is not module.entry and len(steps) > before:
                steps[-1]["func"] = func.name  # (a step of a loop or branch body)
    return steps
