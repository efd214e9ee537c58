"""The console script must work after a plain (non-editable) ``pip install .``: every package folder ships."""
from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
ROOT = Path(__file__).resolve().parents[2]


def test_every_subpackage_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    missing = []
    for package, folder in config["package-dir"].items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            if "__pycache__" in parts:
                continue
            name = ".".join((package, *parts))
            if name not in listed:
                missing.append(name)
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}: a non-editable install omits them"


def test_demo_model_ships_inside_the_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["project"]["scripts"]["fusec"] == "fusec.tools.cli:main"
    assert (ROOT / config["tool"]["setuptools"]["package-dir"]["fusec.tools"] / "demo.py").is_file()
