"""PSI, KS and the point-mass test: reference vectors, scipy checks, properties, calibration."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from monitor.errors import InsufficientDataError, StatsInputError
from monitor.stats import (
    BaselinePositions,
    DriftBaseline,
    baseline_positions,
    build_baseline,
    drift,
    drift_tests,
    ks_2samp,
    proportion_test,
    proportion_test_counts,
    psi,
    psi_from_counts,
)
from monitor.stats.drift import _ks_exact_sf, _sorted_quantiles

REL = 1e-9  # _meta.tolerance_policy.closed_form

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
# Scores on a coarse grid, so that ties and point masses are common.
grid = st.integers(0, 12).map(lambda i: i / 4)


# ---------------------------------------------------------------------------- reference vectors


def test_psi_counts_basic(reference_vectors: dict[str, Any]) -> None:
    vec = reference_vectors["psi"]["vectors"]["psi_counts_basic"]
    value = psi_from_counts(vec["ref_counts"], vec["cur_counts"], smoothing=0.0)
    assert value == pytest.approx(vec["psi"], rel=REL)
    n_eff = 100 * 100 / 200
    assert n_eff * value == pytest.approx(vec["chi2_stat"], rel=REL)
    assert stats.chi2.sf(n_eff * value, 3) == pytest.approx(vec["p_chi2"], rel=REL)


def test_psi_empty_bin_sensitivity(reference_vectors: dict[str, Any]) -> None:
    vec = reference_vectors["psi"]["vectors"]["psi_empty_bin"]
    ref, cur = vec["ref_counts"], vec["cur_counts"]
    assert psi_from_counts(ref, cur) == pytest.approx(vec["psi_additive_0.5"], rel=REL)
    assert psi_from_counts(ref, cur, smoothing=1.0) == pytest.approx(vec["psi_additive_1"], rel=REL)
    assert psi_from_counts(ref, cur, smoothing=0.0) == np.inf


def test_psi_point_mass_and_out_of_range(reference_vectors: dict[str, Any]) -> None:
    vec = reference_vectors["psi"]["vectors"]["psi_raw_pointmass"]
    base = build_baseline(vec["ref"], bins=vec["B_requested"])
    np.testing.assert_array_equal(base.edges, vec["inner_edges_unique"])
    assert base.n_bins == vec["B_effective"]
    rc = vec["right_closed"]
    np.testing.assert_array_equal(base.reference_counts, rc["ref_counts"])
    res = psi(base, vec["cur"])
    np.testing.assert_array_equal(res.current_counts, rc["cur_counts"])
    assert res.statistic == pytest.approx(rc["psi_additive_0.5"], rel=REL)
    assert res.current_counts.sum() == len(vec["cur"])  # 12.0 > max(ref) is kept, not dropped
    oor = vec["out_of_range_current"]
    assert res.out_of_range_rate == (oor["below_ref_min"] + oor["above_ref_max"]) / len(vec["cur"])
    assert res.empty_bins == 1
    assert res.empty_reference_bins == 0
    assert psi(base, vec["cur"], smoothing=0.0).statistic == np.inf
    assert psi(base, vec["cur"], smoothing=0.0).pvalue == 0.0


def test_psi_no_empty_bins(reference_vectors: dict[str, Any]) -> None:
    vec = reference_vectors["psi"]["tv_no_empty_bins"]
    base = build_baseline(vec["ref"], bins=5)
    np.testing.assert_array_equal(base.edges, vec["inner_edges"])
    res = psi(base, vec["cur"], smoothing=0.0)
    np.testing.assert_array_equal(res.reference_counts, vec["ref_counts"])
    np.testing.assert_array_equal(res.current_counts, vec["cur_counts"])
    assert res.statistic == pytest.approx(vec["psi"], rel=REL)
    n, m = 20, 10
    assert res.n_eff == pytest.approx(n * m / (n + m), rel=REL)
    assert res.noise_floor == pytest.approx(4 * (1 / n + 1 / m), rel=REL)
    assert res.debiased == max(res.statistic - res.noise_floor, 0.0)
    assert res.pvalue == pytest.approx(stats.chi2.sf(res.n_eff * res.statistic, 4), rel=REL)


@pytest.mark.parametrize("case", range(5))
def test_psi_null_expectation(reference_vectors: dict[str, Any], case: int) -> None:
    """Noise floor (B-1)(1/n+1/m) against the simulated null means of the notes (rel 5 %)."""
    row = reference_vectors["psi"]["null_expectation_simulation"][case]
    ref = np.arange(row["n"], dtype=float)  # any continuous reference: bins are its deciles
    base = build_baseline(ref, bins=row["B"])
    cur = np.linspace(0, row["n"] - 1, row["m"])
    floor = psi(base, cur).noise_floor
    assert floor == pytest.approx(row["approx_mean"], rel=1e-12)
    assert floor == pytest.approx(row["refquantile_bins_add05_mean"], rel=0.05)


def test_ks_vectors(reference_vectors: dict[str, Any]) -> None:
    for name, vec in reference_vectors["ks"]["vectors"].items():
        if name == "timing_s":
            continue
        for method, key in (("exact", "p_exact"), ("asymp", "p_asymp"), ("auto", "p_auto")):
            res = ks_2samp(vec["x"], vec["y"], method=method)
            assert res.statistic == pytest.approx(vec["D"], rel=1e-12), name
            assert res.pvalue == pytest.approx(vec[key], rel=1e-9, abs=1e-12), (name, method)
            assert res.statistic_location == vec["location"], name
            assert res.statistic_sign == vec["sign"], name


def test_ks_histogram_bound_vector(reference_vectors: dict[str, Any]) -> None:
    vec = reference_vectors["ks"]["histogram_bound_vector"]
    base = build_baseline(vec["ref"], bins=4)
    np.testing.assert_allclose(base.edges, vec["inner_edges"], rtol=1e-12)
    out = drift_tests(base, vec["cur"])
    np.testing.assert_array_equal(out.psi.current_counts, vec["cur_counts"])
    assert out.ks.statistic == pytest.approx(vec["D_exact"], rel=1e-12)
    assert vec["D_lower_edges"] <= out.ks.statistic <= vec["D_upper"]


# ---------------------------------------------------------------------------- against scipy


def test_against_scipy_ks_2samp_random() -> None:
    rng = np.random.default_rng(20261130)
    for trial in range(120):
        n, m = int(rng.integers(1, 80)), int(rng.integers(1, 80))
        x = np.round(rng.normal(size=n), int(rng.integers(0, 3)))
        y = np.round(rng.normal(0.3 * (trial % 3), size=m), int(rng.integers(0, 3)))
        for alternative in ("two-sided", "less", "greater"):
            for method in ("exact", "asymp"):
                ours = ks_2samp(x, y, alternative=alternative, method=method)
                ref = stats.ks_2samp(x, y, alternative=alternative, method=method)
                assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12, abs=1e-15)
                # Documented tolerance: 1e-9 absolute (exact path counting round-off).
                assert ours.pvalue == pytest.approx(ref.pvalue, abs=1e-9)
                _assert_location_attains_d(
                    x, y, ours.statistic_location, ours.statistic_sign, ours.statistic
                )


def _assert_location_attains_d(
    x: np.ndarray, y: np.ndarray, loc: float, sign: int, d: float
) -> None:
    gap = np.mean(x <= loc) - np.mean(y <= loc)
    assert sign * gap == pytest.approx(d, abs=1e-12)


def test_against_scipy_ks_2samp_large() -> None:
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=10_000), rng.normal(0.02, size=9_973)
    for method in ("exact", "asymp", "auto"):
        ours, ref = ks_2samp(x, y, method=method), stats.ks_2samp(x, y, method=method)
        assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
        assert ours.pvalue == pytest.approx(ref.pvalue, abs=1e-9)
    big = ks_2samp(rng.normal(size=20_000), rng.normal(size=3_000))
    assert big.method == "asymp"


@pytest.mark.parametrize(
    ("n", "shift", "alternative"),
    [
        (10_000, 0.4, "two-sided"),  # D 0.157: p 4.7e-108, read as 1.0 before the tilt
        (10_000, 0.1, "two-sided"),
        (10_000, 0.05, "two-sided"),
        (10_000, 0.02, "two-sided"),
        (4_000, 0.1, "greater"),  # p 7.4e-5, read as 1.0 before the tilt
        (4_000, -0.1, "less"),
        (3_000, 0.0, "greater"),
    ],
)
def test_exact_p_value_of_large_samples_against_scipy(
    n: int, shift: float, alternative: str
) -> None:
    """n = m, where scipy counts the paths outside the band (or has a closed form one-sided)
    rather than 1 - P(inside): its small p-values are accurate, and the band is wide enough
    that raw path counts span more than float64's range within one row."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=n), rng.normal(shift, size=n)
    ours = ks_2samp(x, y, alternative=alternative, method="exact")
    ref = stats.ks_2samp(x, y, alternative=alternative, method="exact")
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert ours.pvalue == pytest.approx(ref.pvalue, abs=1e-10)


def _exact_by_integers(k: int, n: int, m: int, alternative: str) -> float:
    """P(D >= k / (n m)) from the paths inside the band, counted in Python integers."""
    from fractions import Fraction
    from math import comb

    def inside(i: int, j: int) -> bool:
        gap = i * m - j * n
        if alternative == "greater":
            return gap < k
        if alternative == "less":
            return -gap < k
        return abs(gap) < k

    row = [1 if inside(0, j) else 0 for j in range(m + 1)]
    for j in range(1, m + 1):
        row[j] = row[j - 1] if row[j] else 0
    for i in range(1, n + 1):
        new = [0] * (m + 1)
        for j in range(m + 1):
            if inside(i, j):
                new[j] = row[j] + (new[j - 1] if j else 0)
        row = new
    return float(1 - Fraction(row[m], comb(n + m, n)))


@given(
    st.integers(min_value=1, max_value=120),
    st.integers(min_value=1, max_value=120),
    st.floats(min_value=0.0, max_value=1.0),
    st.sampled_from(["two-sided", "greater", "less"]),
)
def test_exact_p_value_against_integer_path_counts(
    n: int, m: int, share: float, alternative: str
) -> None:
    k = max(1, round(share * n * m))
    assert _ks_exact_sf(k, n, m, alternative) == pytest.approx(
        _exact_by_integers(k, n, m, alternative), abs=1e-12
    )


def test_against_numpy_quantile() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        data = np.sort(np.round(rng.normal(size=int(rng.integers(1, 50))), 1))
        probs = np.arange(1, 10) / 10
        np.testing.assert_array_equal(_sorted_quantiles(data, probs), np.quantile(data, probs))


def test_against_scipy_proportion_z() -> None:
    # pooled z equals the signed root of the 2x2 chi-square statistic without continuity correction
    table = np.array([[30, 70], [45, 55]])
    res = proportion_test_counts(30, 100, 45, 100)
    chi2, p, _, _ = stats.chi2_contingency(table, correction=False)
    assert res.statistic**2 == pytest.approx(chi2, rel=1e-12)
    assert res.pvalue == pytest.approx(p, rel=1e-9)
    assert res.statistic > 0
    assert res.difference == pytest.approx(0.15)
    assert proportion_test_counts(30, 100, 45, 100, alternative="greater").pvalue == pytest.approx(
        p / 2, rel=1e-9
    )


# ---------------------------------------------------------------------------- behaviour


def test_baseline_is_frozen_and_read_only() -> None:
    base = build_baseline([3.0, 1.0, 2.0, 0.0, 0.0, 5.0])
    assert isinstance(base, DriftBaseline)
    for arr in (base.sorted_reference, base.edges, base.reference_counts):
        assert not arr.flags.writeable
    assert base.reference_min == 0.0
    assert base.reference_max == 5.0
    assert base.n_reference == 6
    with pytest.raises(AttributeError):
        base.bins = 3  # type: ignore[misc]


def test_psi_paths_agree_and_sorted_input() -> None:
    rng = np.random.default_rng(11)
    ref = np.where(rng.random(5_000) < 0.2, 0.0, rng.gamma(2.0, size=5_000))
    cur = np.where(rng.random(3_000) < 0.3, 0.0, rng.gamma(2.2, size=3_000) + 0.1)
    base = build_baseline(ref)
    a = psi(base, cur, tolerance=0.01)
    b = psi(base, np.sort(cur), tolerance=0.01, assume_sorted=True)
    c = drift_tests(base, cur, tolerance=0.01)
    for other in (b, c.psi):
        np.testing.assert_array_equal(a.current_counts, other.current_counts)
        assert a.statistic == other.statistic
        assert a.pvalue == other.pvalue
        assert a.out_of_range_rate == other.out_of_range_rate
    assert a.pvalue == pytest.approx(
        stats.ncx2.sf(a.n_eff * a.statistic, a.n_bins - 1, 0.01 * a.n_eff), rel=1e-12, abs=0
    )
    ks = ks_2samp(ref, cur)
    assert c.ks == ks
    # the zero point mass has its own bin (-inf, 0]
    assert base.edges[0] == 0.0
    assert base.reference_counts[0] == np.count_nonzero(ref == 0)


@pytest.mark.parametrize("seed", range(2, 8))
def test_the_tolerance_null_p_is_scipys_noncentral_chi2_where_it_decides(seed: int) -> None:
    """ncx2.sf(N_eff PSI, B - 1, tolerance N_eff) on data whose p lies where alarms are
    decided (1e-6 to 0.9), compared without an absolute slack (pytest.approx's default 1e-12
    accepted any tiny p, so a wrong noncentrality passed)."""
    rng = np.random.default_rng(seed)
    ref = rng.gamma(2.0, size=4_000)
    cur = rng.gamma(2.0, size=2_000) * (1.0 + 0.02 * seed)
    got = psi(build_baseline(ref), cur, tolerance=0.01)
    want = stats.ncx2.sf(got.n_eff * got.statistic, got.n_bins - 1, 0.01 * got.n_eff)
    assert 1e-6 < want < 0.9
    assert got.pvalue == pytest.approx(want, rel=1e-9, abs=0)


def test_drift_detects_shift() -> None:
    rng = np.random.default_rng(5)
    base = build_baseline(rng.normal(size=20_000))
    same = drift_tests(base, rng.normal(size=2_000))
    moved = drift_tests(base, rng.normal(0.3, size=2_000))
    assert moved.psi.pvalue < 1e-6
    assert moved.ks.pvalue < 1e-6
    assert same.psi.pvalue > 1e-3
    assert same.ks.pvalue > 1e-3
    assert moved.psi.debiased > same.psi.debiased


def test_proportion_test_point_mass() -> None:
    ref = np.r_[np.zeros(300), np.ones(700)]
    cur = np.r_[np.zeros(400), np.ones(600)]
    res = proportion_test(ref, cur, value=0.0, alternative="greater")
    assert (res.rate_reference, res.rate_current) == (0.3, 0.4)
    assert res.pvalue < 1e-5
    flat = proportion_test_counts(0, 10, 0, 20)
    assert (flat.statistic, flat.pvalue) == (0.0, 1.0)


# ---------------------------------------------------------------------------- properties


@given(st.lists(grid, min_size=1, max_size=60), st.integers(2, 12))
def test_psi_of_sample_against_itself_is_zero(values: list[float], bins: int) -> None:
    base = build_baseline(values, bins=bins)
    res = psi(base, values)
    assert res.statistic == pytest.approx(0.0, abs=1e-15)
    assert res.pvalue == pytest.approx(1.0)
    assert res.empty_bins == res.empty_reference_bins


@given(
    st.lists(finite, min_size=1, max_size=50),
    st.lists(finite, min_size=1, max_size=50),
    st.integers(2, 12),
    st.floats(0, 0.2),
)
def test_psi_properties(ref: list[float], cur: list[float], bins: int, tol: float) -> None:
    base = build_baseline(ref, bins=bins)
    res = psi(base, cur, tolerance=tol)
    assert res.statistic >= 0.0
    assert 0.0 <= res.pvalue <= 1.0
    assert res.current_counts.sum() == len(cur)
    assert base.reference_counts.sum() == len(ref)
    assert 2 <= res.n_bins <= bins
    assert 0.0 <= res.out_of_range_rate <= 1.0
    # symmetric in the two count vectors (Jeffreys divergence)
    assert psi_from_counts(res.current_counts, res.reference_counts) == pytest.approx(
        res.statistic, rel=1e-12, abs=1e-15
    )


@given(st.lists(grid, min_size=1, max_size=40), st.lists(grid, min_size=1, max_size=40))
def test_ks_properties(x: list[float], y: list[float]) -> None:
    res = ks_2samp(x, y)
    assert 0.0 <= res.statistic <= 1.0
    assert 0.0 <= res.pvalue <= 1.0
    swapped = ks_2samp(y, x)
    assert swapped.statistic == res.statistic
    assert ks_2samp(x, x).statistic == 0.0
    greater = ks_2samp(x, y, alternative="greater").statistic
    less = ks_2samp(x, y, alternative="less").statistic
    assert res.statistic == max(greater, less)


# ---------------------------------------------------------------------------- calibration


@pytest.mark.parametrize(("n", "m", "reps"), [(200, 200, 1500), (20_000, 2_000, 400)])
def test_psi_pvalue_calibrated_under_null(n: int, m: int, reps: int) -> None:
    """Rejection rate at 0.05 under H0 within 3 binomial standard errors."""
    rng = np.random.default_rng(n + m)
    rejections = 0
    for _ in range(reps):
        base = build_baseline(rng.random(n))
        rejections += psi(base, rng.random(m)).pvalue <= 0.05
    rate = rejections / reps
    assert abs(rate - 0.05) <= 3 * np.sqrt(0.05 * 0.95 / reps), rate


# ---------------------------------------------------------------------------- validation


def test_build_baseline_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`bins` must be an integer >= 2; got 1\."):
        build_baseline([1.0, 2.0], bins=1)
    with pytest.raises(StatsInputError, match="`bins` must be an integer"):
        build_baseline([1.0, 2.0], bins=2.5)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`bins` must be an integer"):
        build_baseline([1.0, 2.0], bins=True)
    with pytest.raises(InsufficientDataError, match="`reference` needs at least 1"):
        build_baseline([])
    with pytest.raises(StatsInputError, match="`reference` must not contain NaN"):
        build_baseline([1.0, np.nan])
    with pytest.raises(StatsInputError, match="`reference` must be 1-D"):
        build_baseline([[1.0, 2.0]])
    with pytest.raises(StatsInputError, match="`reference` must be a 1-D array of numbers"):
        build_baseline(["a", "b"])


def test_psi_iv() -> None:
    base = build_baseline([1.0, 2.0, 3.0])
    with pytest.raises(StatsInputError, match="`baseline` must be a DriftBaseline"):
        psi([1.0, 2.0], [1.0])  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match=r"`tolerance` must be a finite number in \[0, inf\]"):
        psi(base, [1.0], tolerance=-0.1)
    with pytest.raises(StatsInputError, match="`smoothing` must be a finite number"):
        psi(base, [1.0], smoothing=float("nan"))
    with pytest.raises(InsufficientDataError, match="`current` needs at least 1"):
        psi(base, [])
    with pytest.raises(StatsInputError, match="`current` must not contain NaN or infinite"):
        psi(base, [1.0, np.inf])
    with pytest.raises(StatsInputError, match="`current` must be sorted ascending"):
        psi(base, [2.0, 1.0], assume_sorted=True)


def test_psi_from_counts_iv() -> None:
    with pytest.raises(StatsInputError, match="must have the same length; got 2 and 3"):
        psi_from_counts([1, 2], [1, 2, 3])
    with pytest.raises(StatsInputError, match="`reference_counts` must have at least 2 bins"):
        psi_from_counts([1], [1])
    with pytest.raises(StatsInputError, match="`current_counts` must be non-negative"):
        psi_from_counts([1, 2], [1, -2])
    with pytest.raises(InsufficientDataError, match="`current_counts` holds no observations"):
        psi_from_counts([1, 2], [0, 0])
    with pytest.raises(StatsInputError, match="`smoothing` must be a finite number"):
        psi_from_counts([1, 2], [1, 2], smoothing=-1)


def test_ks_2samp_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`alternative` must be one of \{'two-sided'"):
        ks_2samp([1.0], [2.0], alternative="both")
    with pytest.raises(
        StatsInputError, match=r"`method` must be one of \{'auto', 'exact', 'asymp'\}"
    ):
        ks_2samp([1.0], [2.0], method="approx")
    with pytest.raises(InsufficientDataError, match="`y` needs at least 1"):
        ks_2samp([1.0], [])
    with pytest.raises(StatsInputError, match="`x` must not contain NaN"):
        ks_2samp([np.nan], [1.0])
    with pytest.raises(StatsInputError, match="`y` must be sorted ascending"):
        ks_2samp([1.0], [3.0, 2.0], assume_sorted=True)


def test_drift_tests_iv() -> None:
    base = build_baseline([1.0, 2.0, 3.0])
    with pytest.raises(StatsInputError, match="`baseline` must be a DriftBaseline"):
        drift_tests(None, [1.0])  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`tolerance` must be a finite number"):
        drift_tests(base, [1.0], tolerance=np.inf)
    with pytest.raises(InsufficientDataError):
        drift_tests(base, np.array([]))


def test_proportion_test_iv() -> None:
    with pytest.raises(StatsInputError, match="`value` must be a finite number"):
        proportion_test([0.0], [0.0], value=float("nan"))
    with pytest.raises(StatsInputError, match="`alternative` must be one of"):
        proportion_test([0.0], [0.0], alternative="up")
    with pytest.raises(InsufficientDataError, match="`current` needs at least 1"):
        proportion_test([0.0], [])


def test_proportion_test_counts_iv() -> None:
    with pytest.raises(
        StatsInputError, match=r"`k_reference` must be <= `n_reference` \(3\); got 4"
    ):
        proportion_test_counts(4, 3, 0, 3)
    with pytest.raises(StatsInputError, match=r"`k_current` must be <= `n_current` \(3\); got 5"):
        proportion_test_counts(0, 3, 5, 3)
    with pytest.raises(StatsInputError, match="`n_current` must be an integer >= 0; got -1"):
        proportion_test_counts(0, 3, 0, -1)
    with pytest.raises(InsufficientDataError, match="needs observations on both sides"):
        proportion_test_counts(0, 0, 0, 3)
    with pytest.raises(StatsInputError, match="`alternative` must be one of"):
        proportion_test_counts(0, 3, 0, 3, alternative="two_sided")


# ---------------------------------------------------------------------- rank-key KS and positions


def _streaming_extremes(xs: np.ndarray, ys: np.ndarray) -> tuple[int, float, int, float]:
    """The former implementation, kept as an independent reference: i m - j n evaluated at every
    pooled point (x then y), first occurrence of each extreme."""
    n, m = xs.size, ys.size
    best_pos, loc_pos, best_neg, loc_neg = -1, np.nan, -1, np.nan
    for data in (xs, ys):
        diff = np.searchsorted(xs, data, side="right") * m - np.searchsorted(ys, data, "right") * n
        i_max, i_min = int(np.argmax(diff)), int(np.argmin(diff))
        if int(diff[i_max]) > best_pos:
            best_pos, loc_pos = int(diff[i_max]), float(data[i_max])
        if -int(diff[i_min]) > best_neg:
            best_neg, loc_neg = -int(diff[i_min]), float(data[i_min])
    return max(best_pos, 0), loc_pos, max(best_neg, 0), loc_neg


def _ours_extremes(xs: np.ndarray, ys: np.ndarray) -> tuple[int, float, int, float]:
    ext = drift._ks_extremes(xs, drift._rank_keys(xs, ys))
    loc_neg = ext.loc_neg if ext.y_index < 0 else drift._first_equal(ys, ext.y_index)
    return ext.k_pos, ext.loc_pos, ext.k_neg, loc_neg


@pytest.mark.parametrize("chunk", [3, 1 << 16])
def test_ks_extremes_against_pooled_scan(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(drift, "_KS_CHUNK", chunk)
    rng = np.random.default_rng(20261201)
    for trial in range(1500):
        n, m = int(rng.integers(1, 25)), int(rng.integers(1, 25))
        decimals = int(rng.integers(0, 3))
        xs = np.sort(np.round(rng.normal(size=n), decimals))
        ys = np.round(rng.normal(float(rng.choice([0.0, 0.5, -2.0, 2.0])), size=m), decimals)
        if trial % 5 == 0:
            ys = rng.choice(xs, size=m)  # every y ties with an x
        ys = np.sort(ys)
        assert _ours_extremes(xs, ys) == _streaming_extremes(xs, ys), (xs, ys)


@given(st.lists(grid, min_size=1, max_size=30), st.lists(grid, min_size=1, max_size=30))
def test_ks_extremes_property(x: list[float], y: list[float]) -> None:
    xs, ys = np.sort(np.asarray(x)), np.sort(np.asarray(y))
    assert _ours_extremes(xs, ys) == _streaming_extremes(xs, ys)


def _parts_positions(
    base: DriftBaseline, current: np.ndarray, rng: np.random.Generator
) -> BaselinePositions:
    shuffled = rng.permutation(current)
    cuts = np.sort(rng.integers(0, current.size + 1, size=int(rng.integers(0, 4))))
    parts = [baseline_positions(base, p) for p in np.split(shuffled, cuts)]
    return BaselinePositions.concatenate(base, parts)


def _assert_same_drift(a: Any, b: Any) -> None:
    for field in ("statistic", "pvalue", "statistic_location", "statistic_sign", "method"):
        assert getattr(a.ks, field) == getattr(b.ks, field), field
    for field in ("statistic", "pvalue", "out_of_range_rate", "empty_bins", "n_current"):
        assert getattr(a.psi, field) == getattr(b.psi, field), field
    np.testing.assert_array_equal(a.psi.current_counts, b.psi.current_counts)


def test_drift_tests_on_a_sorted_window_identical() -> None:
    """``assume_sorted`` (the report's runner sorts the window once for the verdict and the
    page) gives what sorting inside gives; an unsorted window is refused."""
    rng = np.random.default_rng(12)
    for _ in range(200):
        n, m = int(rng.integers(1, 80)), int(rng.integers(1, 80))
        decimals = int(rng.integers(0, 3))
        ref = np.round(rng.normal(size=n), decimals)
        cur = np.round(rng.normal(float(rng.choice([0.0, 0.3, 3.0])), size=m), decimals)
        base = build_baseline(ref, bins=int(rng.integers(2, 8)))
        plain = drift_tests(base, cur, tolerance=0.01)
        _assert_same_drift(
            plain, drift_tests(base, np.sort(cur), tolerance=0.01, assume_sorted=True)
        )
    with pytest.raises(StatsInputError, match="`current` must be sorted ascending"):
        drift_tests(build_baseline([1.0, 2.0]), [2.0, 1.0], assume_sorted=True)


def test_drift_tests_positions_identical() -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        n, m = int(rng.integers(1, 80)), int(rng.integers(1, 80))
        decimals = int(rng.integers(0, 3))
        ref = np.round(rng.normal(size=n), decimals)
        cur = np.round(rng.normal(float(rng.choice([0.0, 0.3, -3.0, 3.0])), size=m), decimals)
        base = build_baseline(ref, bins=int(rng.integers(2, 8)))
        plain = drift_tests(base, cur, tolerance=0.01)
        fast = drift_tests(base, cur, tolerance=0.01, positions=_parts_positions(base, cur, rng))
        _assert_same_drift(plain, fast)
        ks = ks_2samp(ref, cur)
        assert (fast.ks.statistic, fast.ks.pvalue) == (ks.statistic, ks.pvalue)


def test_drift_tests_positions_identical_large_with_point_mass() -> None:
    """A 20 % zero mass on both sides (every zero ties the reference), asymptotic p-value."""
    rng = np.random.default_rng(3)
    ref = np.where(rng.random(60_000) < 0.2, 0.0, rng.lognormal(size=60_000))
    cur = np.where(rng.random(15_000) < 0.25, 0.0, rng.lognormal(0.05, size=15_000))
    base = build_baseline(ref)
    fast = drift_tests(base, cur, positions=_parts_positions(base, cur, rng))
    _assert_same_drift(drift_tests(base, cur), fast)
    assert fast.ks.method == "asymp"


def test_baseline_positions_counts_and_keys() -> None:
    base = build_baseline([0.0, 0.0, 1.0, 2.0, 3.0], bins=2)
    pos = baseline_positions(base, [3.5, 0.0, -1.0, 1.5, 2.0])
    # key = 2 #{ref < y} + tie: -1 -> 0, 0 -> 1, 1.5 -> 6, 2 -> 7, 3.5 -> 10
    np.testing.assert_array_equal(pos.keys, [0, 1, 6, 7, 10])
    np.testing.assert_array_equal(pos.counts, [2, 3])  # edges [1.0]: (-inf, 1], (1, inf)
    assert pos.keys.dtype == np.int32
    assert not pos.keys.flags.writeable
    empty = baseline_positions(base, [])
    assert empty.size == 0
    assert BaselinePositions.concatenate(base, [pos, empty]).size == 5


def test_positions_iv() -> None:
    base = build_baseline(np.arange(10.0))
    other = build_baseline(np.arange(10.0))
    cur = np.array([1.5, 2.5, 3.5])
    pos = baseline_positions(base, cur)
    with pytest.raises(StatsInputError, match="`positions` must be BaselinePositions computed"):
        drift_tests(other, cur, positions=pos)
    with pytest.raises(StatsInputError, match="`positions` must locate the 2 values"):
        drift_tests(base, cur[:2], positions=pos)
    bad = BaselinePositions(base, np.array([0, 2, 99], np.int32), pos.counts)
    with pytest.raises(StatsInputError, match=r"`positions.keys` must lie in \[0, 20\]"):
        drift_tests(base, cur, positions=bad)
    with pytest.raises(StatsInputError, match=r"`parts\[0\]` must be BaselinePositions"):
        BaselinePositions.concatenate(other, [pos])
    with pytest.raises(StatsInputError, match="`values` must be sorted"):
        baseline_positions(base, [2.0, 1.0], assume_sorted=True)
    with pytest.raises(StatsInputError, match="`baseline` must be a DriftBaseline"):
        baseline_positions("ref", cur)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- large-N KS p-value


def test_ks_asymp_large_n_against_kstwo() -> None:
    """Above N_eff = 10 000 the 2 smirnov(N, D) tail is its expansion: documented tolerance
    relative <= 40 / N for p >= 1e-8, never below scipy; scipy's own value elsewhere."""
    for n_eff in (10_001, 30_000):
        for z in np.linspace(0.3, 4.0, 38):
            d = z / np.sqrt(n_eff)
            ours = drift._ks_asymp_sf(d, 2 * n_eff, 2 * n_eff, "two-sided")
            ref = float(stats.kstwo.sf(d, n_eff))
            if n_eff * d * d < 2.2:
                assert ours == ref
            else:
                assert ref <= ours <= ref * (1 + 40 / n_eff) or ref < 1e-8
    small = drift._ks_asymp_sf(0.03, 20_000, 3_000, "two-sided")  # N_eff 2 609: scipy's value
    assert small == float(stats.kstwo.sf(0.03, round(20_000 * 3_000 / 23_000)))


@pytest.mark.parametrize("n_eff", [10_001, 875_000, 10_000_019])
def test_ks_asymp_p_never_rises_with_d_across_the_switch(n_eff: int) -> None:
    """The large-N expansion is a little above scipy's value, and scipy's below the switch
    (N D^2 = 2.2) was used as is: a larger D got a larger p there (by 3e-7 at N 10 000 019),
    and a KS bracket straddling it an inverted p-value range."""
    switch = math.sqrt(2.2 / n_eff)
    ds = np.concatenate(
        [switch * (1 + np.linspace(-1e-3, 1e-3, 401)), switch * (1 + np.geomspace(1e-15, 1, 200))]
    )
    ds.sort()
    ps = [drift._ks_asymp_sf(float(d), 2 * n_eff, 2 * n_eff, "two-sided") for d in ds]
    assert all(b <= a for a, b in itertools.pairwise(ps)), n_eff
    below = float(stats.kstwo.sf(float(ds[ds * ds * n_eff < 2.2][-1]), n_eff))
    assert ps[int(np.searchsorted(ds * ds * n_eff, 2.2))] <= below


def test_against_scipy_ks_2samp_asymptotic_large_n() -> None:
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=30_000), rng.normal(size=25_000)
    for shift, exact_scipy in ((0.0, True), (0.05, False)):
        ours, ref = ks_2samp(x, y + shift), stats.ks_2samp(x, y + shift)
        assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
        if exact_scipy:  # scipy's own kstwo.sf (D differs from scipy's float D in the last bits)
            assert ours.pvalue == pytest.approx(ref.pvalue, rel=1e-12)
        else:  # N_eff = 13 636, p ~ 1e-5: documented tolerance 40 / N_eff, conservative
            assert ref.pvalue <= ours.pvalue <= ref.pvalue * (1 + 40 / 13_636)
            assert ours.pvalue < 1e-3


def test_exact_ks_two_sided_is_symmetric_in_the_sample_sizes() -> None:
    """The exact path count loops over the shorter sample: same p-value either way round, and
    scipy's exact value."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=1500), rng.normal(0.15, size=120)
    a = ks_2samp(x, y, method="exact").pvalue
    b = ks_2samp(y, x, method="exact").pvalue
    assert a == pytest.approx(b, rel=1e-12)
    assert a == pytest.approx(stats.ks_2samp(x, y, method="exact").pvalue, rel=1e-8)
