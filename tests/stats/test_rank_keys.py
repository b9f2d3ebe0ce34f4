"""KS rank keys: the slice-bounded search of sorted values gives the keys of the plain search."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.stats.drift import _rank_keys

grid = st.integers(-30, 30).map(lambda i: i / 8)  # a coarse grid: ties within and across


def _definition(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """key(y) = 2 #{x < y} + [y equals some x], one value at a time."""
    return np.array([2 * int(np.sum(xs < y)) + int(np.any(xs == y)) for y in ys], dtype=np.int64)


@given(st.lists(grid, min_size=1, max_size=80), st.lists(grid, min_size=1, max_size=80))
def test_ordered_keys_are_the_definition(x: list[float], y: list[float]) -> None:
    xs, ys = np.sort(np.array(x)), np.sort(np.array(y))
    assert np.array_equal(_rank_keys(xs, ys, ordered=True), _definition(xs, ys))
    assert np.array_equal(_rank_keys(xs, ys), _definition(xs, ys))


@pytest.mark.parametrize(("n", "m"), [(1_000, 70_000), (70_000, 1_000), (200_003, 199_999)])
def test_ordered_keys_across_chunks(n: int, m: int) -> None:
    rng = np.random.default_rng(n + m)
    xs = np.sort(np.round(rng.normal(size=n), 2))
    ys = np.sort(np.round(rng.normal(0.2, 1.5, size=m), 2))
    got, want = _rank_keys(xs, ys, ordered=True), _rank_keys(xs, ys)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)
