"""Paired decay tests: reference vectors, scipy cross-checks, properties and validation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from monitor.errors import InsufficientDataError, StatsInputError
from monitor.stats import (
    ConfidenceInterval,
    bca_interval,
    minimum_detectable_effect,
    paired_test,
    required_sample_size,
    sign_flip_test,
)

REL = 1e-9
outcome = st.integers(0, 20).map(lambda i: i / 20)  # nDCG-like values on a grid (ties common)


def _mc_tolerance(p: float, r: int) -> float:
    """_meta.tolerance_policy.monte_carlo: 4 sqrt(p(1-p)/R) + 1/(R+1)."""
    return float(4 * np.sqrt(p * (1 - p) / r) + 1 / (r + 1))


# ---------------------------------------------------------------------------- reference vectors


def test_paired_ap_example(reference_vectors: dict[str, Any]) -> None:
    ap = reference_vectors["paired_AP_example"]
    res = paired_test(ap["A_baseline"], ap["B_new"], rng=0)
    assert res.n == ap["n"]
    assert res.mean_difference == pytest.approx(ap["mean_diff"], rel=REL)
    assert res.sd_difference == pytest.approx(ap["sd_diff"], rel=REL)
    assert res.effect_size == pytest.approx(ap["effect_size_dz"], rel=REL)
    assert [res.wins, res.losses, res.ties] == ap["wins_losses_ties"]
    tt = ap["t_test"]
    assert res.ttest.statistic == pytest.approx(tt["t"], rel=REL)
    assert res.ttest.pvalue == pytest.approx(tt["p_two_sided"], rel=REL)
    assert res.ttest.df == tt["df"]
    # exact randomization: 14/1024, compared as an integer count
    assert res.permutation.exact
    assert res.permutation.n_resamples == 1024
    assert round(res.pvalue * 1024) == 14
    assert res.pvalue == 14 / 1024
    assert res.sign_test_pvalue == ap["sign_test"]["p_two_sided"]
    assert res.wilcoxon_pvalue == pytest.approx(
        ap["wilcoxon_signed_rank"]["p_exact_conditional_on_ties"], abs=1e-12
    )
    # BCa: within one 0.001 lattice step of the exact-bootstrap interval
    lo, hi = ap["bootstrap"]["bca"]["ci95_exact_bootstrap_midp"]
    assert abs(res.confidence_interval.low - lo) <= 0.001 + 1e-12
    assert abs(res.confidence_interval.high - hi) <= 0.001 + 1e-12
    assert res.mde == pytest.approx(ap["power_of_example"]["mde_80pct_z"], rel=REL)
    one = sign_flip_test(
        np.round(np.subtract(ap["B_new"], ap["A_baseline"]), 12), alternative="greater"
    )
    assert one.pvalue == ap["randomization_signflip"]["p_one_sided_greater"]
    assert one.min_pvalue == 2.0**-10


@pytest.mark.parametrize("seed", [0, 1, 2, 42])
def test_bca_matches_scipy_lattice(reference_vectors: dict[str, Any], seed: int) -> None:
    ap = reference_vectors["paired_AP_example"]
    raw = np.subtract(ap["B_new"], ap["A_baseline"])  # what scipy was given: unrounded B - A
    ci = bca_interval(raw, rng=seed)
    scipy_ci = ap["bootstrap"]["bca"]["ci95_scipy_R9999"][f"seed{seed}"]
    assert ci.low == pytest.approx(scipy_ci[0], abs=1e-9)
    assert ci.high == pytest.approx(scipy_ci[1], abs=1e-9)
    # On the rounded grid the tie counts behind z0 can move an endpoint by one lattice step
    # (seed 42 gives 0.013); the policy allows one step (0.001) from the exact bootstrap.
    exact = ap["bootstrap"]["bca"]["ci95_exact_bootstrap_midp"]
    rounded = bca_interval(np.round(raw, 12), rng=seed)
    assert abs(rounded.low - exact[0]) <= 0.001 + 1e-12
    assert abs(rounded.high - exact[1]) <= 0.001 + 1e-12


def test_one_topic_carries_all(reference_vectors: dict[str, Any]) -> None:
    vec = reference_vectors["paired_AP_example"]["one_topic_carries_all"]
    res = paired_test(np.zeros(10), vec["d"], rng=3)
    assert res.pvalue == vec["p_randomization"]
    assert res.ttest.statistic == pytest.approx(vec["t"], rel=REL)
    assert res.ttest.pvalue == pytest.approx(vec["p_t"], rel=REL)
    assert res.sign_test_pvalue == vec["p_sign_test"]
    assert res.wilcoxon_pvalue == vec["p_wilcoxon"]
    assert (res.wins, res.losses, res.ties) == (1, 0, 9)


def test_float_tie_demo_uses_relative_tolerance(reference_vectors: dict[str, Any]) -> None:
    vec = reference_vectors["paired_AP_example"]["float_tie_demo"]
    res = paired_test(vec["A"], vec["B"], rng=0)
    assert res.permutation.exact
    assert res.pvalue * vec["total"] == vec["exact_count_integer"]


def test_n30_signflip(reference_vectors: dict[str, Any]) -> None:
    vec = reference_vectors["paired_n30_signflip_dp"]
    d = np.asarray(vec["d_hundredths"]) / 100
    res = paired_test(np.zeros(30), d, n_resamples=99_999, rng=12345)
    exact = vec["signflip_exact_p"]
    assert not res.permutation.exact
    assert res.permutation.n_resamples == 99_999
    assert abs(res.pvalue - exact) <= _mc_tolerance(exact, 99_999)
    assert res.ttest.statistic == pytest.approx(vec["t"], rel=REL)
    assert res.ttest.pvalue == pytest.approx(vec["p_t"], rel=REL)
    assert res.wilcoxon_pvalue == pytest.approx(vec["wilcoxon_auto"]["p"], rel=REL)
    assert res.permutation.min_pvalue == 2 / 100_000


def test_sample_size_and_mde(reference_vectors: dict[str, Any]) -> None:
    ss = reference_vectors["paired_AP_example"]["sample_size"]
    assert required_sample_size(ss["s_d"], ss["delta"]) == int(np.ceil(ss["n_formula_exact_z"]))
    k30 = reference_vectors["sequential"]["design"]["decay_K30"]
    a = k30["alpha_run"]
    assert minimum_detectable_effect(0.1093, 200, alpha=a, alternative="less") == pytest.approx(
        k30["MDE_n200"], rel=REL
    )
    assert minimum_detectable_effect(0.1093, 500, alpha=a, alternative="less") == pytest.approx(
        k30["MDE_n500"], rel=REL
    )
    assert required_sample_size(0.1093, 0.0243, alpha=a, alternative="less") == int(
        np.ceil(k30["n_required_delta0.0243"])
    )
    assert required_sample_size(0.0, 0.01) == 2


# ---------------------------------------------------------------------------- against scipy


def test_against_scipy_ttest_rel() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        n = int(rng.integers(3, 60))
        ref = np.round(rng.random(n), 2)
        cur = np.clip(np.round(ref + rng.normal(-0.02, 0.1, n), 2), 0, 1)
        for alternative, margin in (("two-sided", 0.0), ("less", 0.01), ("greater", 0.02)):
            res = paired_test(
                ref,
                cur,
                alternative=alternative,
                margin=margin,
                n_resamples=99,
                n_bootstrap=99,
                rng=0,
            )
            shift = {"less": margin, "greater": -margin}.get(alternative, 0.0)
            sp = stats.ttest_rel(cur + shift, ref, alternative=alternative)
            assert res.ttest.statistic == pytest.approx(sp.statistic, rel=1e-6)
            assert res.ttest.pvalue == pytest.approx(sp.pvalue, rel=1e-6)


def test_against_scipy_permutation_test_exact() -> None:
    rng = np.random.default_rng(2)
    for _ in range(10):
        n = int(rng.integers(2, 12))
        d = np.round(rng.normal(0.1, 1, n), 1)
        for alternative in ("two-sided", "less", "greater"):
            ours = sign_flip_test(d, alternative=alternative)
            ref = stats.permutation_test(
                (d,), np.mean, permutation_type="samples", alternative=alternative
            )
            assert ours.exact
            assert ours.pvalue == pytest.approx(ref.pvalue, abs=1e-12)


def test_against_scipy_permutation_test_monte_carlo() -> None:
    rng = np.random.default_rng(4)
    d = np.round(rng.normal(0.15, 1, 40), 2)
    ref = stats.permutation_test(
        (d,), np.mean, permutation_type="samples", n_resamples=20_000, rng=0
    ).pvalue
    ours = sign_flip_test(d, n_resamples=20_000, rng=1)
    assert not ours.exact
    assert abs(ours.pvalue - ref) <= 2 * _mc_tolerance(ref, 20_000)


@pytest.mark.parametrize("seed", [0, 7, 12345])
def test_against_scipy_bootstrap_bca(seed: int) -> None:
    rng = np.random.default_rng(seed + 100)
    x = np.round(rng.gamma(2.0, 0.05, int(rng.integers(5, 300))) - 0.1, 3)
    ref = stats.bootstrap((x,), np.mean, method="BCa", n_resamples=3_000, rng=seed)
    ours = bca_interval(x, n_resamples=3_000, rng=seed)
    assert ours.low == pytest.approx(ref.confidence_interval.low, rel=1e-10)
    assert ours.high == pytest.approx(ref.confidence_interval.high, rel=1e-10)
    # paired_test draws the bootstrap first, so the same seed gives the same interval
    res = paired_test(np.zeros(x.size), x, rng=seed, n_bootstrap=3_000, n_resamples=99)
    assert res.confidence_interval == ours


@pytest.mark.parametrize("n", [4, 9, 30, 60])
def test_against_scipy_wilcoxon_small_tied(n: int) -> None:
    rng = np.random.default_rng(n)
    d = rng.integers(-3, 4, n) / 4
    d[0] = d[1] = 0.5  # at least one tie
    d = d[d != 0]
    for alternative in ("two-sided", "less", "greater"):
        res = paired_test(
            np.zeros(d.size), d, alternative=alternative, n_resamples=99, n_bootstrap=99, rng=0
        )
        ref = stats.wilcoxon(d, alternative=alternative, method="auto").pvalue
        assert res.wilcoxon_pvalue == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("n", [12, 13, 14])
def test_the_diagnostics_run_on_the_margin_shifted_differences(n: int) -> None:
    """With a margin the sign test and Wilcoxon, like the decision, test d + margin ('less'),
    d - margin ('greater'); and Wilcoxon's exact null of tied ranks stops at n = 13 as
    scipy's 'auto' does (both once passed every test when changed)."""
    rng = np.random.default_rng(n)
    ref = np.full(n, 0.5)
    d = rng.integers(-4, 3, n) / 20 + 0.0125  # on a grid: ties; none at -margin or +margin
    margin = 0.0125
    for alternative, shifted in (("less", d + margin), ("greater", d - margin)):
        res = paired_test(
            ref, ref + d, alternative=alternative, margin=margin, n_resamples=99, n_bootstrap=99
        )
        nz = np.round(shifted, 12)
        nz = nz[nz != 0]
        assert np.unique(np.abs(nz)).size < nz.size  # the case has ties
        want = stats.wilcoxon(nz, alternative=alternative, method="auto").pvalue
        assert res.wilcoxon_pvalue == pytest.approx(want, rel=1e-9)
        wins = int(np.sum(nz > 0))
        binom = stats.binomtest(wins, nz.size, alternative=alternative).pvalue
        assert res.sign_test_pvalue == pytest.approx(binom, rel=1e-12)


def test_against_scipy_wilcoxon_and_binomtest() -> None:
    rng = np.random.default_rng(9)
    ref = np.round(rng.random(40), 1)
    cur = np.clip(np.round(ref + rng.normal(0.05, 0.2, 40), 1), 0, 1)
    res = paired_test(ref, cur, n_resamples=99, n_bootstrap=99, rng=0)
    d = np.round(cur - ref, 12)
    nz = d[d != 0]
    assert res.wilcoxon_pvalue == pytest.approx(stats.wilcoxon(nz).pvalue, rel=1e-12)
    wins = int(np.sum(nz > 0))
    assert res.sign_test_pvalue == pytest.approx(stats.binomtest(wins, nz.size).pvalue, rel=1e-12)


# ---------------------------------------------------------------------------- behaviour


def test_degenerate_data_no_nan_no_warning() -> None:
    same = np.full(50, 0.4)
    res = paired_test(same, same, rng=0)
    assert res.pvalue == 1.0
    assert res.ttest.pvalue == 1.0
    assert res.ttest.statistic == 0.0
    assert res.confidence_interval == ConfidenceInterval(0.0, 0.0)
    assert res.effect_size == 0.0
    assert res.ties == 50
    up = paired_test(same, same + 0.1, alternative="greater", rng=0)
    assert up.effect_size == np.inf
    assert up.ttest.statistic == np.inf
    assert up.ttest.pvalue == 0.0
    assert up.confidence_interval == ConfidenceInterval(0.1, 0.1)
    assert up.mean_difference == 0.1
    # with a margin exactly equal to the decay, the shifted differences are all zero
    edge = paired_test(same, same - 0.01, alternative="less", margin=0.01, rng=0)
    assert edge.pvalue == 1.0
    assert edge.ttest.pvalue == 1.0


def test_margin_one_sided_decay() -> None:
    rng = np.random.default_rng(8)
    ref = rng.random(400)
    cur = ref - 0.05 + rng.normal(0, 0.05, 400)
    decayed = paired_test(ref, cur, alternative="less", margin=0.01, n_resamples=2_000, rng=1)
    assert decayed.pvalue <= 1 / 2_001 * 1.0001
    tolerated = paired_test(
        ref, cur + 0.045, alternative="less", margin=0.01, n_resamples=2_000, rng=1
    )
    assert tolerated.pvalue > 0.5
    assert decayed.permutation.min_pvalue == 1 / 2_001


def test_exact_sign_flip_counts_ties_at_a_zero_sum() -> None:
    """An observed sum of about 0 (here exactly 0 on a grid of 0.05, in floats): its ties are
    counted as integer enumeration counts them (the tie tolerance once scaled with |T|, 0
    here, and the exact p was 0.48 instead of 0.57)."""
    di = np.array([45, 45, -90, 45, -45, -90, 135, 45, -90])
    base = np.arange(9) * 7 % 100
    d = np.round((base + di) / 100 - base / 100, 12)
    signs = np.array(list(itertools.product([1, -1], repeat=9)))
    sums = signs @ np.abs(di)
    for alternative, want in (("greater", sums >= 0), ("less", sums <= 0)):
        got = sign_flip_test(d, alternative=alternative, n_resamples=10**6)
        assert got.exact
        assert got.pvalue == want.mean()


def test_monte_carlo_p_is_never_0() -> None:
    """(b + 1) / (R + 1): every resample below the observed sum is still p = 1 / (R + 1)."""
    got = sign_flip_test(-np.ones(40), alternative="less", n_resamples=999, rng=0)
    assert not got.exact
    assert got.pvalue == 1 / 1000 == got.min_pvalue


def test_monte_carlo_is_seeded_and_batch_independent() -> None:
    d = np.random.default_rng(0).normal(0.05, 1, 300)
    a = sign_flip_test(d, rng=5, n_resamples=5_000)
    b = sign_flip_test(d, rng=5, n_resamples=5_000, batch=37)
    assert a == b
    assert sign_flip_test(d, rng=np.random.default_rng(5), n_resamples=5_000) == a


# ---------------------------------------------------------------------------- properties


@given(
    st.lists(st.tuples(outcome, outcome), min_size=2, max_size=30),
    st.integers(-5, 5),
    st.sampled_from(["two-sided", "less", "greater"]),
)
def test_paired_invariant_to_common_shift(
    pairs: list[tuple[float, float]], shift: int, alternative: str
) -> None:
    ref, cur = (np.array(c) for c in zip(*pairs, strict=True))
    a = paired_test(ref, cur, alternative=alternative, n_resamples=499, n_bootstrap=199, rng=1)
    b = paired_test(
        ref + shift, cur + shift, alternative=alternative, n_resamples=499, n_bootstrap=199, rng=1
    )
    assert a.pvalue == b.pvalue
    assert a.ttest.pvalue == pytest.approx(b.ttest.pvalue, rel=1e-9, abs=1e-12)
    assert (a.wins, a.losses, a.ties) == (b.wins, b.losses, b.ties)
    assert a.confidence_interval.low == pytest.approx(b.confidence_interval.low, abs=1e-9)


@given(
    st.lists(st.integers(-20, 20).map(lambda i: i / 20), min_size=1, max_size=40),
    st.sampled_from(["two-sided", "less", "greater"]),
    st.integers(1, 3000),
)
def test_sign_flip_pvalue_properties(d: list[float], alternative: str, r: int) -> None:
    res = sign_flip_test(d, alternative=alternative, n_resamples=r, rng=0)
    assert 0.0 < res.pvalue <= 1.0
    assert res.pvalue >= res.min_pvalue * (1 - 1e-12) or res.pvalue == 1.0
    if not res.exact:
        assert res.pvalue >= 1 / (r + 1)


@given(st.lists(outcome, min_size=2, max_size=40))
def test_bca_contains_mean_like_values(d: list[float]) -> None:
    ci = bca_interval(d, n_resamples=199, rng=0)
    assert ci.low <= ci.high
    assert min(d) - 1e-12 <= ci.low
    assert ci.high <= max(d) + 1e-12


# ---------------------------------------------------------------------------- validation


def test_paired_test_iv() -> None:
    ok = [0.1, 0.2, 0.3]
    with pytest.raises(StatsInputError, match=r"must have the same length .* got 3 and 2"):
        paired_test(ok, [0.1, 0.2])
    with pytest.raises(InsufficientDataError, match="at least 2 pairs; got 1"):
        paired_test([0.1], [0.2])
    with pytest.raises(StatsInputError, match="`margin` must be 0 when `alternative` is"):
        paired_test(ok, ok, margin=0.01)
    with pytest.raises(StatsInputError, match=r"`margin` must be a finite number in \[0, inf\]"):
        paired_test(ok, ok, alternative="less", margin=-0.01)
    with pytest.raises(StatsInputError, match="`alternative` must be one of"):
        paired_test(ok, ok, alternative="lower")
    with pytest.raises(StatsInputError, match="`n_resamples` must be an integer >= 1; got 0"):
        paired_test(ok, ok, n_resamples=0)
    with pytest.raises(StatsInputError, match="`n_bootstrap` must be an integer >= 1"):
        paired_test(ok, ok, n_bootstrap=-3)
    with pytest.raises(StatsInputError, match=r"`confidence_level` must be a finite number in \(0"):
        paired_test(ok, ok, confidence_level=1.0)
    with pytest.raises(StatsInputError, match="`alpha` must be a finite number"):
        paired_test(ok, ok, alpha=0.0)
    with pytest.raises(StatsInputError, match="`power` must be a finite number"):
        paired_test(ok, ok, power=1.5)
    with pytest.raises(StatsInputError, match="`tie_tolerance` must be a finite number"):
        paired_test(ok, ok, tie_tolerance=-1e-9)
    with pytest.raises(StatsInputError, match=r"`rng` must be a numpy\.random\.Generator"):
        paired_test(ok, ok, rng="seed")  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`rng` seed must be a non-negative integer"):
        paired_test(ok, ok, rng=-1)
    with pytest.raises(StatsInputError, match="`current` must not contain NaN"):
        paired_test(ok, [0.1, np.nan, 0.3])
    with pytest.raises(StatsInputError, match="`reference` must be 1-D"):
        paired_test([ok], [ok])
    # finite values whose sums (of cubes: BCa's skew) overflow: once a silent NaN mean, NaN
    # interval and p = 0, below the design's own floor
    with pytest.raises(
        StatsInputError, match=r"`current - reference` must stay within 4.37e\+99 .* got 1e\+297"
    ):
        paired_test([0.0] * 12, [1e297] * 6 + [-1e297] * 6)
    with pytest.raises(StatsInputError, match=r"`current - reference` must stay within .* inf"):
        paired_test([-1.7e308] * 3, [1.7e308] * 3)  # the difference itself overflows
    scale = 1e98  # inside the bound (50 values): every number finite, no warning
    r = paired_test(np.ones(50) * scale, (1.0 + np.linspace(-0.1, 0.05, 50)) * scale, rng=1)
    assert all(
        math.isfinite(x)
        for x in (
            r.mean_difference,
            r.pvalue,
            r.ttest.pvalue,
            r.confidence_interval.low,
            r.confidence_interval.high,
        )
    )


def test_sign_flip_test_iv() -> None:
    with pytest.raises(InsufficientDataError, match="`differences` needs at least 1"):
        sign_flip_test([])
    with pytest.raises(StatsInputError, match="`batch` must be an integer >= 1; got 0"):
        sign_flip_test([1.0], batch=0)
    with pytest.raises(StatsInputError, match="`n_resamples` must be an integer >= 1"):
        sign_flip_test([1.0], n_resamples=1.5)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`alternative` must be one of"):
        sign_flip_test([1.0], alternative=None)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`rng` must be"):
        sign_flip_test([1.0], rng=True)
    with pytest.raises(StatsInputError, match=r"`differences` must stay within"):
        sign_flip_test([1.7e308] * 3)  # its sums overflowed: p 0 with a floor of 0.25


def test_bca_interval_iv() -> None:
    with pytest.raises(InsufficientDataError, match="`data` needs at least 2"):
        bca_interval([1.0])
    with pytest.raises(StatsInputError, match="`confidence_level` must be"):
        bca_interval([1.0, 2.0], confidence_level=0)
    with pytest.raises(StatsInputError, match="`n_resamples` must be an integer >= 1"):
        bca_interval([1.0, 2.0], n_resamples=0)
    with pytest.raises(StatsInputError, match="`data` must not contain NaN"):
        bca_interval([1.0, np.nan])


def test_minimum_detectable_effect_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`sd` must be a finite number in \[0, inf\]"):
        minimum_detectable_effect(-1.0, 10)
    with pytest.raises(StatsInputError, match="`n` must be an integer >= 1; got 0"):
        minimum_detectable_effect(1.0, 0)
    with pytest.raises(StatsInputError, match="`alpha` must be"):
        minimum_detectable_effect(1.0, 10, alpha=1.0)
    with pytest.raises(StatsInputError, match="`power` must be"):
        minimum_detectable_effect(1.0, 10, power=0.0)
    with pytest.raises(StatsInputError, match="`alternative` must be one of"):
        minimum_detectable_effect(1.0, 10, alternative="both")


def test_required_sample_size_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`delta` must be a finite number in \(0, inf\]"):
        required_sample_size(0.1, 0.0)
    with pytest.raises(StatsInputError, match="`sd` must be a finite number"):
        required_sample_size(np.nan, 0.1)
    with pytest.raises(StatsInputError, match="`alpha` must be"):
        required_sample_size(0.1, 0.1, alpha=-0.1)
    with pytest.raises(StatsInputError, match="`power` must be"):
        required_sample_size(0.1, 0.1, power=2)
    with pytest.raises(StatsInputError, match="`alternative` must be one of"):
        required_sample_size(0.1, 0.1, alternative="")


@pytest.mark.parametrize("bits", [np.random.PCG64, np.random.MT19937, np.random.Philox])
def test_every_bit_generator_gives_a_calibrated_sign_flip(bits: type) -> None:
    """32 zero differences and 8 of 0.01: exactly 2**-8 of sign vectors reach the observed
    sum. The signs were the bit generator's raw words, 32 bits for MT19937 (the high half
    always 0, so the signs of half the differences never flipped): p = 1e-4, not 0.0039."""
    from monitor.stats import sign_flip_test

    d = np.concatenate([np.zeros(32), np.full(8, 0.01)])
    r = sign_flip_test(
        d, alternative="greater", n_resamples=99_999, rng=np.random.Generator(bits(7))
    )
    exact = 2.0**-8
    se = (exact * (1 - exact) / 99_999) ** 0.5
    assert abs(r.pvalue - exact) < 5 * se


def test_the_bca_interval_of_extreme_but_finite_data_is_an_interval() -> None:
    """The acceleration's sums of cubes overflowed (1e104) or underflowed (1e-170) to 0/0: a
    NaN quantile level and a bare ValueError. It is computed scale-free."""
    from monitor.stats import bca_interval

    for data in ([0.0, 1e104, 3e103], [1e-170, 0.0, 0.0, 2e-170]):
        x = np.array(data)
        ci = bca_interval(x, n_resamples=999, rng=np.random.default_rng(3))
        assert x.min() <= ci.low <= ci.high <= x.max() * (1 + 1e-12)  # linear quantiles
        scaled = bca_interval(x / x.max(), n_resamples=999, rng=np.random.default_rng(3))
        assert ci.low / x.max() == pytest.approx(scaled.low, rel=1e-9)
        assert ci.high / x.max() == pytest.approx(scaled.high, rel=1e-9)


def test_inputs_past_the_arithmetic_are_refused_not_nan() -> None:
    """bca_interval lacked the overflow guard paired_test and sign_flip_test have (a NaN
    interval, or numpy's own quantile error), required_sample_size raised a bare
    OverflowError, and a masked array lost its mask (the masked value under it tested)."""
    for data in ([1e308, -1e308, 5e307], [1.7e308, 1.7e308, 0.0]):
        with pytest.raises(StatsInputError, match="data"):
            bca_interval(data, rng=1)
    for sd, delta in ((1e200, 1e-200), (1e160, 1.0), (1.0, 1e-160)):  # ** raised there
        with pytest.raises(StatsInputError, match="sd / delta"):
            required_sample_size(sd, delta)
    masked = np.ma.masked_array([0.9, 0.0, 0.9], mask=[False, True, False])
    with pytest.raises(StatsInputError, match="masked"):
        paired_test(masked, [0.9, 0.9, 0.9], rng=1)
    unmasked = np.ma.masked_array([0.9, 0.5, 0.9], mask=[False, False, False])
    assert paired_test(unmasked, [0.9, 0.9, 0.9], rng=1).n == 3  # a mask of nothing is fine


def test_masked_values_are_refused_where_arrays_are_taken_whole() -> None:
    """calibration's labels and summarize's values took a masked array without its mask (the
    value under a masked label scored, a masked score counted)."""
    from monitor.stats import Grid, calibration, summarize

    labels = np.ma.masked_array([True, False, True], mask=[False, True, False])
    with pytest.raises(StatsInputError, match="labels"):
        calibration([0.9, 0.8, 0.7], labels)
    scores = np.ma.masked_array([0.1, 0.5, 0.9], mask=[False, True, False])
    with pytest.raises(StatsInputError, match="values"):
        summarize(scores, Grid(np.linspace(0.0, 1.0, 5)))


def test_masked_codes_points_and_edges_are_refused() -> None:
    """The ranking functions' codes and judged flags, a grid's points, summary_grid's
    reference and edges and bin_ends' edges went through a bare np.asarray, which drops a
    mask: a masked (missing) entry was used as the value under it."""
    from monitor.stats import Grid, bin_ends, judgment_summary, ranking_metrics, summary_grid

    def masked(values: list[Any], at: int = 1) -> Any:
        mask = [i == at for i in range(len(values))]
        return np.ma.masked_array(values, mask=mask)

    calls: dict[str, Callable[[], object]] = {
        "run_query": lambda: ranking_metrics(
            masked([0, 1]), [0, 1], [0, 0], [0, 1], [1.0, 1.0], n_queries=2, metrics=["ndcg@10"]
        ),
        "judged_query": lambda: judgment_summary(
            masked([0, 0]), [1.0, 1.0], n_queries=1, metrics=["ap"]
        ),
        "points": lambda: Grid(masked([0.0, 0.5, 1.0])),
        "sorted_reference": lambda: summary_grid(
            masked([0.1, 0.2, 99.0], at=2), [0.15], n_current=10
        ),
        "edges": lambda: bin_ends(Grid(np.array([0.0, 0.5, 1.0])), masked([0.0, 0.5])),
    }
    for name, call in calls.items():
        with pytest.raises(StatsInputError, match=f"`{name}` must not hold masked values"):
            call()
