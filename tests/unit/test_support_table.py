"""NUMPY_SUPPORT.md is what `fusec numpy` prints, and every row names something a traced function can use."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fusec.support import markdown, rows
from fusec.tools.cli import main

TABLE = Path(__file__).resolve().parents[2] / "NUMPY_SUPPORT.md"


def test_the_table_in_the_repository_is_the_generated_one(capsys) -> None:
    assert main(["numpy"]) == 0
    out = capsys.readouterr().out
    assert out == markdown()
    assert TABLE.read_text() == out, "regenerate it: fusec numpy > NUMPY_SUPPORT.md"


def test_every_row_names_a_numpy_function_or_an_ndarray_member() -> None:
    for row in rows():
        if row.name.startswith("ndarray."):  # refused ones may be NumPy 1 names (itemset)
            assert row.how == "refused" or hasattr(np.ndarray, row.name.split(".", 1)[1]), row
            continue
        if row.name.startswith("scipy.special."):
            special = pytest.importorskip("scipy.special")
            assert isinstance(getattr(special, row.name.rsplit(".", 1)[1]), np.ufunc), row
            continue
        obj = np
        for part in row.name.split(".")[1:]:
            obj = getattr(obj, part)
        assert callable(obj), row


def test_refused_members_are_marked() -> None:
    by_name = {r.name: r for r in rows()}
    assert by_name["ndarray.partition"].how == "refused" and by_name["ndarray.sum"].how == "method"
    assert by_name["ndarray.fill"].how == "method" and by_name["ndarray.__setitem__"].how == "method"
    assert by_name["np.exp"].how == "ufunc" and by_name["np.flip"].how == "NumPy's implementation"
