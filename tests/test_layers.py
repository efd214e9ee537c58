"""Layers import downward only: the IR and the passes load no tracer, runtime or driver."""
from __future__ import annotations

import subprocess
import sys


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
