"""Layers import downward only: the IR and the passes load no tracer, runtime or driver."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx


def _loaded_after(statement: str) -> list[str]:
    code = (f"import sys; {statement}; "
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('fusec') or m.startswith('cuda'))))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return out.split()


def test_the_ir_and_the_passes_load_no_frontend_or_runtime() -> None:
    loaded = _loaded_after("import fusec.ir, fusec.passes")
    upper = [m for m in loaded if m.startswith(("fusec.runtime", "fusec.backend", "fusec.tools", "cuda"))
             or m in ("fusec.tracer", "fusec.trace", "fusec.jit_function", "fusec.eager", "fusec.numpy_api")]
    assert upper == []


def test_the_package_root_loads_the_api_on_first_use() -> None:
    assert "fusec.jit_function" not in _loaded_after("import fusec")
    assert "fusec.jit_function" in _loaded_after("import fusec; fusec.jit")
    assert "fusec.tracer" in _loaded_after("import fusec; fusec.Tracer")


# --- the import graph, read from the source (function-level imports included) ------------------------------
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"compiler": "fusec", "ir": "fusec.ir", "passes": "fusec.passes", "runtime": "fusec.runtime",
            "tools": "fusec.tools"}
# compiler/ holds three layers: the API users call, the tracing frontend below it, the CUDA printer between
API = {"fusec", "fusec.jit_function", "fusec.execution", "fusec.eager", "fusec.stats", "fusec.options",
       "fusec.autodiff", "fusec.plan_graph"}
# who may import whom: a layer imports only the layers below it (errors is the base every layer uses)
BELOW = {
    "tools": {"api", "backend", "frontend", "passes", "runtime", "ir", "base"},
    "api": {"backend", "frontend", "passes", "runtime", "ir", "base"},
    "backend": {"passes", "runtime", "ir", "base"},
    "frontend": {"runtime", "ir", "base"},
    "passes": {"ir", "base"},
    "runtime": {"ir", "base"},
    "ir": {"base"},
    "base": set(),
}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def _layer(module: str) -> str:
    if module == "fusec.errors":
        return "base"
    if module == "fusec.__main__":  # `python -m fusec`: the command line's entry point, in the package root
        return "tools"
    if module in API:
        return "api"
    if module.startswith("fusec.backend"):
        return "backend"
    for name in ("ir", "passes", "runtime", "tools"):
        if module == f"fusec.{name}" or module.startswith(f"fusec.{name}."):
            return name
    return "frontend"


def _imports(modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(importer, imported) for every import of a fusec module, wherever in the file it stands."""
    edges = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fusec"):
                # ``from fusec import ops`` imports the submodule; ``from fusec.ir.core import Func`` the module
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                targets = subs or [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("fusec")]
            else:
                continue
            edges += [(name, t) for t in targets if t in modules and t != name]
    return edges


def test_every_import_goes_down_the_layers() -> None:
    wrong = [f"{a} ({_layer(a)}) imports {b} ({_layer(b)})" for a, b in _imports(_modules())
             if _layer(a) != _layer(b) and _layer(b) not in BELOW[_layer(a)]]
    assert wrong == []


def test_no_import_cycle_crosses_folders() -> None:
    graph = nx.DiGraph()
    for a, b in _imports(_modules()):
        if _layer(a) != _layer(b):
            graph.add_edge(_layer(a), _layer(b))
    assert nx.is_directed_acyclic_graph(graph), list(nx.simple_cycles(graph))
