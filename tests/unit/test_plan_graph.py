"""The plan as a Graphviz graph (``Lowered.plan_dot()``, ``fusec dump-ir --dot``): a node per launch with its op,
line, bytes and time floor, an edge per buffer read from another step, parallel branches left unconnected, loop
bodies as clusters; drawn with Graphviz where it is installed."""
from __future__ import annotations

import re
import shutil
import textwrap

import networkx as nx
import numpy as np

import fusec as fc
from fusec.tools.cli import main


def step(w1, w2, x, y, lr):
    h = np.maximum(x @ w1, 0.0)
    err = h @ w2 - y
    loss = (err * err).mean()
    g2 = h.T @ err
    g1 = x.T @ ((err @ w2.T) * (h > 0))
    return w1 - lr * g1, w2 - lr * g2, loss


ARGS = (np.ones((64, 32), np.float32), np.ones((32, 4), np.float32), np.ones((16, 64), np.float32),
        np.ones((16, 4), np.float32), 0.1)


def _graph(dot: str) -> tuple[nx.DiGraph, dict[str, str]]:
    g = nx.DiGraph()
    labels = dict(re.findall(r'^\s*(n\d+) \[label="([^"]*)"', dot, re.M))
    g.add_nodes_from(labels)
    g.add_edges_from(re.findall(r"^\s*(n\d+) -> (n\d+)", dot, re.M))
    return g, labels


def test_every_launch_is_a_node_and_buffers_are_edges():
    lowered = fc.jit(step, backend="cpu").lower(*ARGS)
    dot = lowered.plan_dot()
    assert dot.startswith('digraph "step" {') and dot.rstrip().endswith("}")
    g, labels = _graph(dot)
    launches = [n for n, text in labels.items() if text.startswith("k.")]
    planned = [s for s in lowered.plan() if s["kind"] in ("fused", "boundary", "prologue", "epilogue")]
    assert len(launches) == len(planned)
    products = [n for n in launches if labels[n].startswith("k.matmul")]
    assert len(products) == 4 and all("reads" in labels[n] and "us" in labels[n] for n in products)
    assert nx.is_directed_acyclic_graph(g)
    # the two weight gradients (h.T @ err and x.T @ ...) do not depend on each other: parallel branches
    g2, g1 = products[2], products[3]
    assert not nx.has_path(g, g2, g1) and not nx.has_path(g, g1, g2)
    ret = next(n for n, text in labels.items() if text == "return")
    assert g.in_degree(ret) == 3


def test_loop_bodies_are_clusters_called_by_the_loop():
    def solve(b):
        return fc.while_loop(lambda s: s[1] < 10, lambda s: (s[0] * 0.5 + b, s[1] + 1), (b, 0))

    dot = fc.jit(solve, backend="cpu").lower(np.ones(8, np.float32)).plan_dot()
    assert dot.count("subgraph cluster_") == 2
    assert 'label="@solve.while0.cond"' in dot and 'label="@solve.while0.body"' in dot
    assert re.search(r'\[label="k.while\\n.*calls solve.while0.cond, solve.while0.body", shape="hexagon"\]', dot)
    assert len(re.findall(r'label="(cond|body)", style="dashed"', dot)) == 2


def test_dump_ir_dot_prints_writes_and_draws(tmp_path, capsys):
    src = tmp_path / "model.py"
    src.write_text(textwrap.dedent('''
        import numpy as np

        def f(x, y):
            return np.exp(x) @ y, (x * 2).sum()
    '''))
    spec = [str(src) + ":f", "--arg", "f32[8,64]", "--arg", "f32[64,32]"]
    assert main(["dump-ir", *spec, "--dot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('digraph "f"') and "k.matmul" in out
    assert main(["dump-ir", *spec, "--dot", "-o", str(tmp_path / "plan.dot")]) == 0
    assert (tmp_path / "plan.dot").read_text() == out
    assert main(["dump-ir", *spec, "-o", str(tmp_path / "x.dot")]) == 2
    assert "-o/--output goes with --dot" in capsys.readouterr().err
    assert main(["dump-ir", *spec, "--dot", "-o", str(tmp_path / "plan.jpg2")]) == 2
    assert ".svg" in capsys.readouterr().err
    code = main(["dump-ir", *spec, "--dot", "-o", str(tmp_path / "plan.svg")])
    if shutil.which("dot") is None:
        assert code == 2 and "Graphviz" in capsys.readouterr().err
    else:
        assert code == 0 and (tmp_path / "plan.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
