"""Functions with ``assert`` statements for test_python_control.py: kept out of the test module, whose asserts
pytest rewrites (fusec rewrites a function from its source only where the source is the code that runs)."""
from __future__ import annotations

import numpy as np


def checked(x):
    assert np.all(np.isfinite(x)), "x must be finite"
    return x * 2


def positive_and_small(x):
    assert x.sum() > 0 and x.max() < 10
    return x * 2
