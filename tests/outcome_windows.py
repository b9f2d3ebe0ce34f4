"""One comparison of two ``OutcomeWindow``s, field by field, for the tests of kept windows."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from monitor.sources import OutcomeWindow


def assert_same_window(a: OutcomeWindow, b: OutcomeWindow) -> None:
    """Every field equal: arrays (and mappings of arrays) element by element, the rest by
    ``==`` (the window, counts of dropped rows, the newest time, a judged window's info)."""
    for f in dataclasses.fields(OutcomeWindow):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert (x is None) == (y is None), f.name
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        elif isinstance(x, Mapping) and isinstance(y, Mapping):
            assert x.keys() == y.keys(), f.name
            for k in x:
                np.testing.assert_array_equal(x[k], y[k], err_msg=f"{f.name}[{k}]")
        else:
            assert x == y, f.name
