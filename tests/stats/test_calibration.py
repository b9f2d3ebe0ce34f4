"""Calibration: reference vectors (both bin conventions, the boundary case), AUC against scipy's
Mann-Whitney U, the Murphy identity, the equal-mass rule, non-probability scores, validation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from monitor.errors import InsufficientDataError, StatsInputError
from monitor.stats import CalibrationResult, calibration

REL = 1e-9


def _murphy(res: CalibrationResult) -> tuple[float, float, float, float, float]:
    """(brier, reliability, resolution, uncertainty, within_bin), all present."""
    values = (res.brier, res.reliability, res.resolution, res.uncertainty, res.within_bin)
    assert all(x is not None for x in values)
    return values  # type: ignore[return-value]


def _check_bins(res: CalibrationResult, expected: list[dict[str, Any]]) -> None:
    assert [b.index for b in res.bins] == [e["bin"] for e in expected]
    assert [b.n for b in res.bins] == [e["n"] for e in expected]
    for got, want in zip(res.bins, expected, strict=True):
        assert got.mean_confidence == pytest.approx(want["mean_conf"], rel=REL)
        assert got.fraction_positive == pytest.approx(want["frac_pos"], rel=REL)
        assert got.gap == pytest.approx(want["gap"], rel=REL, abs=1e-15)


@pytest.mark.parametrize("closed", ["right", "left"])
def test_reference_vectors(reference_vectors: dict[str, Any], closed: str) -> None:
    ref = reference_vectors["calibration"]
    res = calibration(ref["p"], ref["y"], binning="equal_width", closed=closed)  # type: ignore[arg-type]
    conv = ref[f"{closed}_closed"]
    assert res.ece == pytest.approx(conv["ece"], rel=REL)
    assert res.mce == pytest.approx(conv["mce"], rel=REL)
    assert res.brier == pytest.approx(ref["brier"], rel=REL)
    _check_bins(res, conv["bins"])
    assert res.n == 12
    assert res.positives == 7
    assert res.probabilities


@pytest.mark.parametrize("closed", ["right", "left"])
def test_reference_boundary_case(reference_vectors: dict[str, Any], closed: str) -> None:
    ref = reference_vectors["calibration"]["boundary_case"]
    res = calibration(ref["p"], ref["y"], binning="equal_width", closed=closed)  # type: ignore[arg-type]
    conv = ref[f"{closed}_closed"]
    assert res.ece == pytest.approx(conv["ece"], rel=REL)
    assert res.mce == pytest.approx(conv["mce"], rel=REL)
    assert res.brier == pytest.approx(ref["brier"], rel=REL)
    _check_bins(res, conv["bins"])
    for b in res.bins:
        assert (b.lower, b.upper) == (b.index / 10, (b.index + 1) / 10)


def test_edges_are_searchsorted_not_floor() -> None:
    # 0.3 * 10 = 3.0000000000000004 would floor into bin 3; as a right-closed edge it is bin 2
    res = calibration([0.3, 0.0, 1.0], [1, 0, 1], binning="equal_width")
    assert [b.index for b in res.bins] == [0, 2, 9]
    res = calibration([0.3, 0.0, 1.0], [1, 0, 1], binning="equal_width", closed="left")
    assert [b.index for b in res.bins] == [0, 3, 9]


def test_equal_mass_rule() -> None:
    # 10 scores, 3 bins: sorted positions 0-3 / 4-6 / 7-9 (floor(i B / N))
    p = np.linspace(0.05, 0.95, 10)
    res = calibration(p, [0, 0, 0, 1, 0, 1, 1, 1, 1, 1], n_bins=3)
    assert [b.n for b in res.bins] == [4, 3, 3]
    assert [b.index for b in res.bins] == [0, 1, 2]
    assert res.bins[0].lower == p[0]
    assert res.bins[0].upper == p[3]
    # ties stay in the bin of their first member: positions 2-5 are equal
    tied = [0.1, 0.2, 0.5, 0.5, 0.5, 0.5, 0.7, 0.8, 0.9, 0.95]
    res = calibration(tied, [0] * 5 + [1] * 5, n_bins=5)
    assert [b.n for b in res.bins] == [2, 4, 2, 2]
    assert res.bins[1].lower == res.bins[1].upper == 0.5
    assert sum(b.n for b in res.bins) == 10


def test_auc_matches_mann_whitney() -> None:
    rng = np.random.default_rng(3)
    p = np.round(rng.random(200), 1)  # many ties
    y = (rng.random(200) < p).astype(int)
    res = calibration(p, y)
    u = stats.mannwhitneyu(p[y == 1], p[y == 0]).statistic
    assert res.auc == pytest.approx(u / (y.sum() * (200 - y.sum())), rel=1e-12)


@given(
    st.lists(
        st.tuples(st.floats(0, 1, allow_subnormal=False), st.booleans()), min_size=2, max_size=40
    )
)
def test_auc_property(pairs: list[tuple[float, bool]]) -> None:
    p = np.array([a for a, _ in pairs])
    y = np.array([b for _, b in pairs])
    res = calibration(p, y)
    if y.all() or not y.any():
        assert res.auc is None
    else:
        u = stats.mannwhitneyu(p[y], p[~y]).statistic
        assert res.auc == pytest.approx(u / (y.sum() * (~y).sum()), rel=1e-12, abs=1e-15)
    brier, rel, res_, unc, within = _murphy(res)
    assert 0.0 <= brier <= 1.0
    assert res.ece is not None
    assert res.mce is not None
    assert 0.0 <= res.ece <= res.mce <= 1.0
    assert brier == pytest.approx(rel - res_ + unc + within, abs=1e-12)


@given(
    st.lists(st.floats(-3, 3, allow_subnormal=False), max_size=60),
    st.lists(st.floats(-3, 3, allow_subnormal=False), max_size=60),
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), max_size=20),
)
def test_merged_classes_are_the_sorted_scores(
    a: list[float], b: list[float], ties: list[float]
) -> None:
    """The equal-mass bins take all scores sorted as the two sorted classes merged (one pass):
    the same values as ``np.sort`` of all of them, ties across the classes included; the bins
    the calibration then reports equal those of a reference that sorts all scores."""
    from monitor.stats.calibration import _merged

    pos = np.sort(np.array(a + ties[::2], dtype=np.float64))
    neg = np.sort(np.array(b + ties[1::2], dtype=np.float64))
    merged = _merged(pos, neg, np.searchsorted(neg, pos, side="left"))
    assert np.array_equal(merged, np.sort(np.concatenate((pos, neg))))
    p = np.concatenate((pos, neg))
    if p.size == 0:
        return
    y = np.arange(p.size) < pos.size
    res = calibration(np.clip(p, 0.0, 1.0) + 0.0, y, n_bins=4)
    ps = np.sort(np.clip(p, 0.0, 1.0) + 0.0)
    bounds = [int(i * 4 // ps.size) for i in range(ps.size)]  # floor(i B / N), ties whole
    want = []
    for i, value in enumerate(ps):
        first = int(np.searchsorted(ps, value, side="left"))
        want.append(bounds[first] if first < i else bounds[i])
    assert [b.n for b in res.bins] == [want.count(k) for k in sorted(set(want))]
    assert [b.lower for b in res.bins] == [float(ps[want.index(k)]) for k in sorted(set(want))]


@given(
    levels=st.lists(st.integers(0, 10), min_size=1, max_size=11, unique=True),
    data=st.data(),
)
def test_murphy_identity_exact_with_constant_bins(levels: list[int], data: st.DataObject) -> None:
    """Scores on the bin centres (constant within each equal-width bin): W = 0."""
    centres = [(k + 0.5) / 11 for k in levels]
    pairs = data.draw(
        st.lists(st.tuples(st.sampled_from(centres), st.booleans()), min_size=1, max_size=50)
    )
    p = [a for a, _ in pairs]
    y = [int(b) for _, b in pairs]
    res = calibration(p, y, n_bins=11, binning="equal_width")
    brier, rel, res_, unc, within = _murphy(res)
    assert within == pytest.approx(0.0, abs=1e-12)
    assert brier == pytest.approx(rel - res_ + unc, abs=1e-12)
    # equal-mass bins keep ties together, so they are constant too when each bin holds one value
    res = calibration(p, y, n_bins=50)
    if all(b.lower == b.upper for b in res.bins):
        assert res.within_bin == pytest.approx(0.0, abs=1e-12)


def test_scores_that_are_not_probabilities() -> None:
    res = calibration([2.5, -1.0, 7.0, 3.0], [1, 0, 1, 0])
    assert not res.probabilities
    assert res.ece is res.mce is res.brier is None
    assert res.reliability is res.resolution is res.uncertainty is res.within_bin is None
    assert res.bins == ()
    assert res.auc == 0.75


def test_one_class_has_no_auc() -> None:
    res = calibration([0.2, 0.8], [True, True])
    assert res.auc is None
    assert res.uncertainty == 0.0
    assert res.brier == pytest.approx((0.64 + 0.04) / 2, rel=REL)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n_bins": 0}, StatsInputError, "`n_bins` must be an integer >= 1; got 0."),
        ({"n_bins": 2.0}, StatsInputError, "`n_bins` must be an integer >= 1; got 2.0."),
        ({"binning": "quantile"}, StatsInputError, "`binning` must be one of {'equal_mass', "),
        ({"closed": "both"}, StatsInputError, "`closed` must be one of {'right', 'left'}; got"),
        ({"scores": []}, InsufficientDataError, "`scores` needs at least 1 value(s); got 0."),
        ({"scores": [0.1, math.nan]}, StatsInputError, "`scores` must not contain NaN or inf"),
        ({"scores": [[0.1, 0.2]]}, StatsInputError, "`scores` must be 1-D; got an array of shape"),
        ({"labels": [0, 2]}, StatsInputError, "`labels` must be 0 or 1 (or booleans); got 1 other"),
        ({"labels": [0, 1, 1]}, StatsInputError, "`labels` must have the same length as `scores`"),
        ({"labels": ["a", "b"]}, StatsInputError, "`labels` must be a 1-D array of numbers; got"),
    ],
)
def test_calibration_iv(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    args: dict[str, Any] = {"scores": [0.1, 0.9], "labels": [0, 1], **kwargs}
    with pytest.raises(error) as info:
        calibration(**args)
    assert str(info.value).startswith(message), str(info.value)
