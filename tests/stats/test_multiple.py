"""Adjusted p-values against the reference vectors (statsmodels-checked) and scipy's BH."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from monitor.errors import InsufficientDataError, StatsInputError
from monitor.stats import adjust_pvalues

pvals = st.lists(st.floats(0, 1), min_size=1, max_size=40)


@pytest.mark.parametrize("family", ["BH1995_15", "ladder_10", "segments_6"])
@pytest.mark.parametrize("method", ["bonferroni", "holm", "bh"])
def test_reference_vectors(reference_vectors: dict[str, Any], family: str, method: str) -> None:
    vec = reference_vectors["multiple_comparisons"][family]
    adjusted = adjust_pvalues(vec["p"], method=method)
    np.testing.assert_allclose(adjusted, vec[f"{method}_adj"], rtol=1e-9, atol=1e-12)
    # the notes: compare adj <= alpha with a small tolerance (0.03 * 10 / 3 is 0.0999...)
    assert int(np.sum(adjusted <= 0.05 + 1e-12)) == vec[f"n_reject_{method}"]


@given(pvals)
def test_against_scipy_false_discovery_control(p: list[float]) -> None:
    np.testing.assert_allclose(
        adjust_pvalues(p, method="bh"), stats.false_discovery_control(p), rtol=1e-12
    )


@given(pvals)
def test_ordering_properties(p: list[float]) -> None:
    arr = np.asarray(p)
    bonf, holm, bh = (adjust_pvalues(p, method=m) for m in ("bonferroni", "holm", "bh"))
    assert np.all(arr <= bh + 1e-15)
    assert np.all(bh <= holm + 1e-15)
    assert np.all(holm <= bonf + 1e-15)
    assert np.all(bonf <= 1.0)
    # order-preserving and permutation-equivariant
    order = np.argsort(arr, kind="stable")
    assert np.all(np.diff(holm[order]) >= -1e-15)
    perm = np.random.default_rng(0).permutation(arr.size)
    np.testing.assert_allclose(adjust_pvalues(arr[perm], method="holm"), holm[perm])


def test_adjust_pvalues_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`method` must be one of \{'bonferroni', 'holm'"):
        adjust_pvalues([0.1], method="fdr")
    with pytest.raises(StatsInputError, match=r"`pvalues` must lie in \[0, 1\]; got 1.5"):
        adjust_pvalues([0.1, 1.5])
    with pytest.raises(StatsInputError, match="`pvalues` must not contain NaN"):
        adjust_pvalues([0.1, np.nan])
    with pytest.raises(StatsInputError, match="`pvalues` must be 1-D"):
        adjust_pvalues([[0.1]])
    with pytest.raises(InsufficientDataError, match="`pvalues` needs at least 1"):
        adjust_pvalues([])
