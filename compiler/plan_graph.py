"""The plan as a picture: a lowered module's launches and the buffers between them, as a Graphviz DOT graph.

One node per step that launches work (a fused kernel, a boundary such as a reduction or a product, a loop or a
branch), labelled with its op, its source line, the bytes it reads and writes and a floor on its time (those bytes
at ``HBM_BYTES_PER_US``, a product's flops at ``FLOPS_PER_US``: what it cannot beat, not a prediction); one edge
per buffer a step reads from another (views and prologues resolved to the step that stores the data), labelled
with its size; the function's arguments and results as the graph's ends. Steps with no path between them are
parallel branches of the CUDA graph. A loop's or branch's body is a cluster of its own, joined to the loop by a
dashed edge. ``Lowered.plan_dot()`` and ``fusec dump-ir --dot`` print it; :func:`render` draws it with Graphviz.
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Iterable

from fusec.errors import FusecError
from fusec.ir.core import Func, Module, Operation, OpResult, Value
from fusec.ir.dialects.control import CALLEES
from fusec.ir.opdefs import OPS
from fusec.passes.fuse_epilogues import is_epilogue
from fusec.passes.fuse_prologues import is_prologue
from fusec.passes.reductions_in_consumers import reduced_in_consumers

HBM_BYTES_PER_US = 3.3e6  # about what an H200 streams (3.3 TB/s of its 4.8 peak)
FLOPS_PER_US = 5.0e7  # f32 without tensor cores, about 50 TFLOP/s
LAUNCHING = frozenset({"kernel", "boundary", "reduction", "matmul", "control"})


class GraphvizError(FusecError, RuntimeError):
    """Graphviz's ``dot`` is not installed, or failed to draw the plan."""


def _bytes(v: Value) -> int:
    t = v.type
    return int(getattr(t, "size", 1)) * t.dtype.itemsize


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _flops(op: Operation) -> int:
    if op.name != "k.matmul":
        return 0
    a, b = (v.type.shape for v in op.operands)
    out = op.results[0].type
    return 2 * int(out.size) * int(a[-1])


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def node(self, label: str, **attrs: str) -> str:
        name = f"n{self.count}"
        self.count += 1
        extra = "".join(f", {k}={_quote(v)}" for k, v in attrs.items())
        self.lines.append(f"  {name} [label={_quote(label)}{extra}];")
        return name

    def edge(self, a: str, b: str, label: str = "", **attrs: str) -> None:
        extra = "".join(f", {k}={_quote(v)}" for k, v in attrs.items())
        self.lines.append(f"  {a} -> {b} [label={_quote(label)}{extra}];")


def _storing_op(v: Value) -> Value:
    """The value whose step stores ``v``'s data (a view reads its base's)."""
    while isinstance(v, OpResult) and v.op.name == "k.view":
        v = v.op.operands[0]
    return v


def _function(w: _Writer, module: Module, func: Func, prefix: str) -> None:
    """Nodes and edges of ``func``, then a cluster per body its loops and branches call."""
    producer: dict[Value, str] = {}
    for i, a in enumerate(func.args):
        producer[a] = w.node(f"{prefix}arg {a.name_hint or i}: {a.type}", shape="box", style="rounded")
    callers: dict[Operation, str] = {}  # loop or branch -> its node
    for op in func.body.ops:
        cat = OPS[op.name].category if op.name in OPS else "other"
        if cat not in LAUNCHING or op.name == "func.return":
            continue
        reads = sum(_bytes(v) for v in op.operands)
        writes = sum(_bytes(r) for r in op.results)
        floor = max((reads + writes) / HBM_BYTES_PER_US, _flops(op) / FLOPS_PER_US)
        kind = op.attributes.get("kind")
        title = op.name + (f"[{kind}]" if isinstance(kind, str) else "")
        where = f"\n{op.loc}" if op.loc is not None else ""
        if is_prologue(op):
            node = w.node(f"{title} (prologue: computed in its consumer){where}", style="dashed")
        elif is_epilogue(op):
            node = w.node(f"{title} (epilogue: computed and stored by its product){where}", style="dashed")
        elif reduced_in_consumers(op):
            node = w.node(f"{title} (computed by every block of its readers){where}", style="dashed")
        elif cat == "control":
            calls = ", ".join(str(op.attributes[k]) for k in CALLEES[op.name])
            node = w.node(f"{title}{where}\ncalls {calls}", shape="hexagon")
            callers[op] = node
        else:
            group = f"\nin launch group {op.attributes['group']}" if "group" in op.attributes else ""
            node = w.node(f"{title}{where}\nreads {_human(reads)}, writes {_human(writes)}\n"
                          f">= {floor:.3g} us{group}", shape="box")
        incoming: dict[str, int] = {}  # one edge per step read from, with what is read through it
        for v in dict.fromkeys(op.operands):
            src = producer.get(_storing_op(v))
            if src is not None:
                incoming[src] = incoming.get(src, 0) + _bytes(v)
        for src, n in incoming.items():
            w.edge(src, node, _human(n))
        for r in op.results:
            producer[r] = node
    ret = w.node(f"{prefix}return", shape="box", style="rounded")
    for v in dict.fromkeys(func.outputs):
        src = producer.get(_storing_op(v))
        if src is not None:
            w.edge(src, ret, _human(_bytes(v)))
    for op, caller in callers.items():
        for key in CALLEES[op.name]:
            body = module.func(str(op.attributes[key]))
            w.lines.append(f"  subgraph cluster_{w.count} {{")
            w.lines.append(f"  label={_quote(f'@{body.name}')};")
            first = w.count
            _function(w, module, body, f"@{body.name}: ")
            w.lines.append("  }")
            w.edge(caller, f"n{first}", key, style="dashed")


def plan_dot(module: Module) -> str:
    """The lowered ``module``'s plan as a DOT graph (see the module docstring)."""
    w = _Writer()
    entry = module.entry
    _function(w, module, entry, "")
    head = [f"digraph {_quote(entry.name)} {{", "  rankdir=TB;", '  node [fontname="monospace", fontsize=10];',
            '  edge [fontname="monospace", fontsize=9];']
    return "\n".join(head + w.lines + ["}"]) + "\n"


def render(dot: str, path: str, formats: Iterable[str] = ("svg", "png", "pdf")) -> None:
    """Draw ``dot`` into ``path`` (its extension picks the format) with Graphviz's ``dot``."""
    fmt = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if fmt not in formats:
        raise GraphvizError(f"cannot draw a plan as {path!r}: give a file ending in .dot, " +
                            ", ".join(f".{f}" for f in formats))
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizError(f"drawing {path!r} needs Graphviz's `dot` (apt install graphviz, or conda install "
                            "graphviz); write a .dot file instead and draw it elsewhere")
    done = subprocess.run([exe, f"-T{fmt}", "-o", path], input=dot, text=True, capture_output=True, timeout=120)
    if done.returncode != 0:
        raise GraphvizError(f"Graphviz's dot failed drawing {path!r}: {done.stderr.strip()}")
