"""``verdict.phase_counts`` without seasonality counts as ``bincount(searchsorted(...))``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.verdict import phase_counts

values = st.lists(st.integers(-20, 20).map(lambda i: i / 4), max_size=300)
edges = st.lists(st.integers(-20, 20).map(lambda i: i / 4), min_size=1, max_size=12).map(
    lambda e: np.unique(np.array(e, dtype=np.float64))
)


@given(values, edges)
def test_phase_counts_match_the_searchsorted_definition(xs: list[float], es: np.ndarray) -> None:
    x = np.array(xs, dtype=np.float64)
    want = np.bincount(np.searchsorted(es, x, side="left"), minlength=es.size + 1)
    got = phase_counts(x, None, es, None)
    assert got.shape == (1, es.size + 1)
    assert np.array_equal(got[0], want)


@pytest.mark.parametrize("n", [0, 65_535, 65_536, 200_001])
def test_phase_counts_across_chunks_with_nan(n: int) -> None:
    rng = np.random.default_rng(n)
    x = np.round(rng.normal(size=n), 2)
    x[::11] = np.nan
    es = np.unique(np.quantile(np.nan_to_num(x), np.arange(1, 10) / 10)) if n else np.zeros(1)
    want = np.bincount(np.searchsorted(es, x, side="left"), minlength=es.size + 1)
    assert np.array_equal(phase_counts(x, None, es, None)[0], want)
