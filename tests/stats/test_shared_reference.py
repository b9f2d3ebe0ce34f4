"""Thresholds for windows that share one reference sample, and PSI from count vectors.

The shared-reference thresholds are checked against Monte Carlo simulation of the model they
assume (z_t = sqrt(rho) U + sqrt(1 - rho) V_t), and reduce exactly to the independent design.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate
from scipy.special import log_ndtr
from scipy.stats import norm

from monitor.errors import StatsInputError
from monitor.stats import (
    arl_for_budget,
    build_baseline,
    cusum_threshold,
    cusum_threshold_shared,
    psi,
    psi_test_counts,
    shewhart_threshold_shared,
)
from monitor.stats.sequential import _alarm_within


def _wilson(k: int, n: int, z: float = 3.0) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_rho_zero_is_the_independent_design() -> None:
    assert cusum_threshold_shared(720, 0.04) == pytest.approx(
        cusum_threshold(arl_for_budget(720, 0.04))
    )
    exact = -math.expm1(math.log1p(-0.01) / 720)  # per-window level for 1 % over 720

    assert shewhart_threshold_shared(720, 0.01) == pytest.approx(float(norm.isf(exact)), rel=1e-6)


def test_thresholds_grow_with_the_shared_share() -> None:
    hs = [cusum_threshold_shared(200, 0.05, rho=r, states=100) for r in (0.01, 0.05, 0.2)]
    assert hs == sorted(hs)
    assert hs[0] > cusum_threshold_shared(200, 0.05)
    # phases: a CUSUM averages independent phase references, so it needs less
    assert cusum_threshold_shared(200, 0.05, rho=0.2, phases=24, states=100) < hs[-1]
    # P phase references averaged: the share of one is rho / P (once unpinned: a mutation
    # using rho whole took the weekly plan's h from 12.8 to 436, no drift alarm ever)
    for rho, phases in ((0.2, 24), (0.5, 168), (0.125, 20)):
        assert cusum_threshold_shared(
            200, 0.05, rho=rho, phases=phases, states=100
        ) == cusum_threshold_shared(200, 0.05, rho=rho / phases, states=100)


def _cusum_false_alarms(h: float, rho: float, looks: int, streams: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(streams)
    s = np.zeros(streams)
    fired = np.zeros(streams, dtype=bool)
    for _ in range(looks):
        z = math.sqrt(rho) * u + math.sqrt(1 - rho) * rng.standard_normal(streams)
        s = np.maximum(0.0, s + z - 0.5)
        fired |= s > h
        s[fired] = 0.0
    return int(fired.sum())


def test_cusum_threshold_holds_the_budget_by_simulation() -> None:
    looks, budget, rho, streams = 150, 0.10, 0.15, 6000
    h = cusum_threshold_shared(looks, budget, rho=rho, states=100)
    k = _cusum_false_alarms(h, rho, looks, streams, seed=1)
    low, high = _wilson(k, streams)
    assert low <= budget <= high + 0.01  # Brook-Evans is slightly conservative
    naive = cusum_threshold(arl_for_budget(looks, budget))
    k_naive = _cusum_false_alarms(naive, rho, looks, streams, seed=1)
    assert _wilson(k_naive, streams)[0] > budget  # ignoring the shared term breaks the budget


@pytest.mark.parametrize("rho", [0.05, 0.08, 0.1])
def test_a_cusum_whose_alarm_chance_is_a_step_in_the_shared_term_holds_its_budget(
    rho: float,
) -> None:
    """Hourly checks over 30 days, 4 % of the budget: with a large h, given the shared term U
    the chance of an alarm within T looks goes from 0 to 1 over a narrow band of u, which 24
    Gauss-Hermite nodes under-integrated: h = 42.6 at rho = 0.1, whose false alarms were 4.6 %
    (26.2 at rho = 0.08: 4.4 %). The expectation on a fine grid of u (an independent rule) is
    the budget, and at rho = 0.1 so are simulated false alarms (100 states: a hair under)."""
    looks, budget = 720, 0.04
    h = cusum_threshold_shared(looks, budget, rho=rho, states=100)
    s = math.sqrt(1 - rho)
    u = np.linspace(-8.0, 8.0, 1601)
    chance = _alarm_within(h / s, 0.5 / s, math.sqrt(rho) * u / s, 100, looks)
    density = np.exp(-u * u / 2) / math.sqrt(2 * math.pi)
    assert float(np.trapezoid(chance * density, u)) == pytest.approx(budget, rel=2e-3)
    if rho == 0.1:
        streams = 100_000
        low, high = _wilson(_cusum_false_alarms(h, rho, looks, streams, seed=2025), streams)
        assert low <= budget <= high * 1.06, (h, low, high)


def test_few_looks_and_a_large_k_put_the_shared_threshold_below_the_independent_one() -> None:
    # a monthly-ish schedule (3 looks a period) with k = 2: the shared reference lowers
    # P(any alarm) at the independent h, whose bracket then had no sign change (ValueError)
    looks, budget, rho, k, streams = 3, 0.02, 0.1045, 2.0, 400_000
    h = cusum_threshold_shared(looks, budget, k=k, rho=rho)
    assert 0.0 < h < cusum_threshold(arl_for_budget(looks, budget), k=k)
    rng = np.random.default_rng(3)
    u = rng.standard_normal(streams)
    s = np.zeros(streams)
    fired = np.zeros(streams, dtype=bool)
    for _ in range(looks):
        z = math.sqrt(rho) * u + math.sqrt(1 - rho) * rng.standard_normal(streams)
        s = np.maximum(0.0, s + z - k)
        fired |= s > h
    low, high = _wilson(int(fired.sum()), streams)
    assert low <= budget <= high + 0.002
    # one look at k = 2.5: even h -> 0 (P(z > 2.5) = 0.6 %) holds a 2 % budget
    assert cusum_threshold_shared(1, budget, k=2.5, rho=rho) == 0.0


def test_a_shewhart_threshold_with_a_large_shared_share_holds_its_budget() -> None:
    """rho = 0.9 (a current window much longer than its reference): given U, the chance of
    no alarm Phi((c - sqrt(rho) U) / sqrt(1 - rho))^T is a step in U, which 24 Gauss-Hermite
    nodes under-integrated (c = 2.46, 4.6 % false alarms against 4 %)."""
    looks, budget, rho, streams = 168, 0.04, 0.9, 60_000
    c = shewhart_threshold_shared(looks, budget, rho=rho)
    rng = np.random.default_rng(4)
    u = rng.standard_normal(streams)
    fired = np.zeros(streams, dtype=bool)
    for _ in range(looks):
        fired |= math.sqrt(rho) * u + math.sqrt(1 - rho) * rng.standard_normal(streams) > c
    low, high = _wilson(int(fired.sum()), streams)
    assert low <= budget <= high, (c, low, high)


def test_shewhart_threshold_holds_the_budget_by_simulation() -> None:
    looks, budget, rho, phases, streams = 96, 0.1, 0.3, 4, 20000
    c = shewhart_threshold_shared(looks, budget, rho=rho, phases=phases)
    rng = np.random.default_rng(2)
    u = rng.standard_normal((streams, phases))
    per = looks // phases
    v = rng.standard_normal((streams, phases, per))
    z = math.sqrt(rho) * u[:, :, None] + math.sqrt(1 - rho) * v
    k = int((z > c).any(axis=(1, 2)).sum())
    low, high = _wilson(k, streams)
    assert low <= budget <= high


def test_shared_iv() -> None:
    with pytest.raises(StatsInputError, match="`rho`"):
        cusum_threshold_shared(10, 0.05, rho=1.0)
    with pytest.raises(StatsInputError, match="`phases`"):
        shewhart_threshold_shared(10, 0.05, rho=0.1, phases=0)
    with pytest.raises(StatsInputError, match="`false_alarm_probability`"):
        cusum_threshold_shared(10, 0.0)
    # even c = 0 holds the budget: 0, as the CUSUM's h (brentq's ValueError on an unsigned
    # bracket before; validate --plans refused such a plan)
    assert shewhart_threshold_shared(1, 0.7) == 0.0
    assert shewhart_threshold_shared(1, 0.5, rho=0.9999) == 0.0
    # the grid's weights fell 2e-14 short of 1: the search for c never ended under that
    assert 7.0 < shewhart_threshold_shared(720, 1e-12, rho=0.5, phases=168) < 8.5


@pytest.mark.parametrize(
    ("looks", "budget", "rho", "phases"),
    [
        (86_400, 5e-13, 0.0, 1),
        (720, 1e-13, 0.0, 1),
        (720, 5e-16, 0.5, 168),
        (720, 1e-13, 0.09, 168),
    ],
)
def test_a_shewhart_threshold_for_a_tiny_budget_holds_it(
    looks: int, budget: float, rho: float, phases: int
) -> None:
    """With Phi near 1 the chance of a window's alarm 1 - Phi was kept only to 1.1e-16, so
    below a budget of about 1e-11 c came out anywhere: 9.6 p at a 30-second schedule's 86,400
    looks and a budget of 5e-13, 1e-9 p (no alarm ever) at 5e-16 over 168 phases. Checked
    against the closed form at rho = 0 and an adaptive integral (scipy's quad) otherwise."""
    c = shewhart_threshold_shared(looks, budget, rho=rho, phases=phases)
    groups = min(phases, looks)
    per = looks / groups
    if rho == 0.0:
        assert c == pytest.approx(float(norm.isf(-math.expm1(math.log1p(-budget) / looks))))
        return
    s, r = math.sqrt(1 - rho), math.sqrt(rho)

    def chance(u: float) -> float:
        return float(-math.expm1(per * log_ndtr((c - r * u) / s)) * norm.pdf(u))

    q = integrate.quad(chance, -12.0, 12.0, limit=500, epsabs=0.0, epsrel=1e-10)[0]
    assert -math.expm1(groups * math.log1p(-q)) == pytest.approx(budget, rel=2e-3)
    # below what the chain resolves the integral over U is rounding: h = 693 "held" 1e-15
    with pytest.raises(StatsInputError, match="is below 1e-10"):
        cusum_threshold_shared(720, 1e-15, rho=0.5, phases=20, states=100)


@given(
    st.integers(min_value=0, max_value=2**31 - 1),
    st.floats(min_value=0.0, max_value=0.1),
)
def test_psi_test_counts_equals_psi_on_integer_counts(seed: int, tolerance: float) -> None:
    rng = np.random.default_rng(seed)
    base = build_baseline(rng.gamma(2.0, 1.0, 3000))
    cur = rng.gamma(2.2, 1.0, 500)
    direct = psi(base, cur, tolerance=tolerance)
    counts = psi_test_counts(base.reference_counts, direct.current_counts, tolerance=tolerance)
    assert counts.statistic == pytest.approx(direct.statistic, rel=1e-12)
    assert counts.pvalue == pytest.approx(direct.pvalue, rel=1e-9, abs=1e-15)
    assert counts.noise_floor == pytest.approx(direct.noise_floor)


def test_psi_test_counts_weighted_reference_size() -> None:
    ref = np.array([10.5, 20.25, 30.0])
    r = psi_test_counts(ref, np.array([10, 20, 30]), n_reference=500.0)
    assert r.n_eff == pytest.approx(500 * 60 / 560)
    with pytest.raises(StatsInputError, match="same length"):
        psi_test_counts(ref, np.array([1, 2]))


@pytest.mark.parametrize("phases", [1, 24])
def test_the_shared_shewhart_threshold_holds_for_a_one_minute_schedule(phases: int) -> None:
    """43,200 looks a month (a check a minute): every Gauss-Hermite term of P(no alarm)
    underflows near c = 0, which once raised a math domain error; the threshold is computed in
    log space and still holds the budget (it grows with the looks)."""
    c = shewhart_threshold_shared(43_200, 0.05, rho=0.3, phases=phases)
    fewer = shewhart_threshold_shared(720, 0.05, rho=0.3, phases=phases)
    assert math.isfinite(c)
    assert c > fewer > 0


def _no_alarm_by_quadrature(c: float, looks: int, rho: float, phases: int) -> float:
    """P(no alarm) of the shared-reference model, integrated by scipy's adaptive quadrature
    (the function under test uses Gauss-Hermite nodes): min(P, T) phases hold the windows."""
    from scipy import integrate

    groups = min(phases, looks)
    per = looks / groups

    def density(u: float) -> float:
        return float(norm.pdf(u) * norm.cdf((c - math.sqrt(rho) * u) / math.sqrt(1 - rho)) ** per)

    inner, _ = integrate.quad(density, -12.0, 12.0, epsabs=1e-13, epsrel=1e-12, limit=200)
    return float(inner**groups)


@given(
    st.integers(min_value=1, max_value=2000),
    st.integers(min_value=1, max_value=400),
    st.floats(min_value=0.01, max_value=0.8),
    st.floats(min_value=0.005, max_value=0.2),
)
def test_shewhart_threshold_solves_its_model_for_any_phases(
    looks: int, phases: int, rho: float, budget: float
) -> None:
    """For every split of the looks into phases, including one that leaves a fraction of a
    window a phase (30 looks in 11 phases once lost the exponent to a rounding error: z 2.07
    instead of 2.93, a false-alarm chance above the budget) and more phases than looks."""
    c = shewhart_threshold_shared(looks, budget, rho=rho, phases=phases)
    alarm = 1.0 - _no_alarm_by_quadrature(c, looks, rho, phases)
    # Gauss-Hermite's nodes are within 3 % of the quadrature over this range (hundreds of
    # windows a phase at rho near 0.8 are the worst); the lost exponent was off 10-100x
    assert alarm == pytest.approx(budget, rel=0.05)


@given(
    st.integers(min_value=2, max_value=2000),
    st.floats(min_value=0.01, max_value=0.8),
)
def test_shewhart_threshold_rises_with_the_phases(looks: int, rho: float) -> None:
    """More phases share each reference term among fewer windows: the windows are less
    correlated, so holding the same budget takes a threshold at least as high; past one phase
    a window, more phases change nothing."""
    thresholds = [
        shewhart_threshold_shared(looks, 0.05, rho=rho, phases=p)
        for p in range(1, min(looks, 40) + 1)
    ]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(thresholds))
    assert shewhart_threshold_shared(looks, 0.05, rho=rho, phases=looks + 7) == pytest.approx(
        shewhart_threshold_shared(looks, 0.05, rho=rho, phases=looks), rel=1e-12
    )


@pytest.mark.parametrize(
    ("looks", "budget", "phases"),
    [(30, 0.02, 7), (30, 0.002, 7), (4, 0.02, 1)],
)
def test_a_cusum_over_few_looks_spends_its_budget(looks: int, budget: float, phases: int) -> None:
    """A daily schedule (30 looks a period), 1 or 10 segments, and a monthly-ish one: h was
    solved from E_U[1 - exp(-T / ARL(h | U))], which with few looks overstates the chance (a
    chain must climb to h first): h = 9.99, 51.4, 19.2, whose own model then gave P(false
    alarm) 0.009, 0.000, 0.000 against 0.02, 0.002, 0.02, and detection was lost. From the
    chain's exact T-step absorption the model's simulated false alarms meet the budget."""
    rho = 0.5
    h = cusum_threshold_shared(looks, budget, rho=rho, phases=phases, states=100)
    streams = 200_000 if budget < 0.01 else 60_000
    # a CUSUM over many phases sees their references' average: the shared share rho / phases
    fired = _cusum_false_alarms(h, rho / phases, looks, streams, seed=9)
    low, high = _wilson(fired, streams)
    assert low <= budget <= high * 1.05, (h, fired / streams)  # 100 states: a hair conservative
