"""Helpers for alarms on tests that run on a schedule: p -> z scores, CUSUM and its run lengths.

Design (``docs/statistics.md``, notes D.3): each window's p-value becomes z = Phi^-1(1 - p),
clipped to [-4, 8]; the CUSUM S_t = max(0, S_{t-1} + z_t - k) alarms when S_t > h, with h chosen
so that the in-control average run length ARL0 meets a false-alarm budget:
P(false alarm within T looks) ~= 1 - exp(-T / ARL0); with a shared reference (below), exactly
the chain's T-step absorption instead.

Shared reference noise. When every window is compared with the same reference sample, the
windows' z-scores share the reference's own sampling error. At the edge of a tolerance null
(true PSI = tolerance, where the linear term of the PSI dominates) the correlation of two windows'
statistics is rho = m / (n + m) (window size m, reference size n). The ``*_shared`` thresholds
model z_t = sqrt(rho) U + sqrt(1 - rho) V_t with U ~ N(0, 1) fixed for the period and V_t i.i.d.
N(0, 1), and choose the threshold so that the *average over U* of the false-alarm probability
within T looks meets the budget (adaptive or fine-grid quadrature over U). With ``phases``
P > 1 the windows cycle through P phases with independent references (a daily or weekly seasonal
reference): the immediate threshold sees P independent shared terms, T / P windows each; a CUSUM
excursion spans many phases, so it sees their average, with variance rho / P.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import special

from monitor.errors import StatsInputError
from monitor.stats import _dist
from monitor.stats import _validation as v

__all__ = [
    "arl_for_budget",
    "cusum_arl",
    "cusum_step",
    "cusum_threshold",
    "cusum_threshold_shared",
    "shewhart_threshold_shared",
    "z_from_pvalue",
]

# Brook-Evans states: the discretization the reference vectors were computed with.
_STATES = 400
#: the shared-reference CUSUM's integral over U is computed to this share of the budget (h to
#: about 1e-3 relative: 7e-4 at T = 720, rho = 0.077, h = 64.5)
_SHARED_TOL = 1e-3
#: below this budget the integral is computed to 1 % of it (0.1 % there took 15 s a search)
_SHARED_SMALL_P = 1e-6
#: the least budget the shared-reference CUSUM threshold is solved for (at 1e-11 the solved h
#: held 1.013 p, at 1e-12 1.06 p: the chain's chance is exact to about 1e-13)
_SHARED_MIN_P = 1e-10


def _brentq(f: Any, low: float, high: float, **tolerances: float) -> float:
    """``scipy.optimize.brentq``, imported on first use (a one-shot check whose thresholds are
    cached never needs scipy.optimize)."""
    from scipy import optimize

    return float(optimize.brentq(f, low, high, **tolerances))


def z_from_pvalue(pvalue: float, *, lower: float = -4.0, upper: float = 8.0) -> float:
    """z = clip(Phi^-1(1 - p), lower, upper) (``norm.isf``); p = 0 gives ``upper``."""
    pvalue = v.real(pvalue, "pvalue", low=0.0, high=1.0)
    lower = v.real(lower, "lower")
    upper = v.real(upper, "upper")
    if not lower < upper:
        raise StatsInputError(f"`lower` must be < `upper`; got {lower!r} and {upper!r}.")
    return float(min(max(_dist.norm_isf(pvalue), lower), upper))


def cusum_step(previous: float, z: float, *, k: float = 0.5) -> float:
    """One CUSUM update: max(0, previous + z - k) (Page 1954)."""
    previous = v.real(previous, "previous", low=0.0)
    z = v.real(z, "z")
    k = v.real(k, "k", low=0.0)
    return max(0.0, previous + z - k)


def cusum_arl(h: float, *, k: float = 0.5, shift: float = 0.0, states: int = _STATES) -> float:
    """Average run length of the CUSUM with N(shift, 1) increments (Brook & Evans 1972).

    [0, h] is cut into ``states`` cells of width w = h / N with midpoints (i + 1/2) w; cell 0
    also holds the reset at 0. From midpoint c_i the next value lands in cell j with probability
    Phi((j + 1) w - c_i + k - shift) - Phi(j w - c_i + k - shift) (cell 0: everything below w);
    ARL = [(I - P)^-1 1]_0. With N = 400 this reproduces the reference values; it is about 1 %
    below the continuous-state ARL at ARL0 ~ 14 000 (conservative for false alarms). A chain
    that all but never escapes (a strongly negative shift), whose I - P is singular in floats,
    has ARL inf.
    """
    h = v.real(h, "h", low=0.0, low_open=True)
    k = v.real(k, "k", low=0.0)
    shift = v.real(shift, "shift")
    states = v.integer(states, "states", minimum=2)
    return _arl(h, k, shift, states)


def _transitions(h: float, k: float, shift: float | np.ndarray, states: int) -> np.ndarray:
    """The Brook-Evans chain's transient transition matrix (``states`` x ``states``; a stack
    of them for an array of shifts): P[i, j] = P(next value in cell j | midpoint of cell i)."""
    w = h / states
    centres = (np.arange(states) + 0.5) * w
    tops = (np.arange(states) + 1) * w
    at = np.asarray(shift, dtype=np.float64)[..., None, None]
    upper = special.ndtr(tops[None, :] - centres[:, None] + k - at)
    lower = special.ndtr(tops[None, :] - w - centres[:, None] + k - at)
    transition: np.ndarray = np.asarray(upper - lower, dtype=np.float64)
    transition[..., :, 0] = upper[..., :, 0]
    return transition


def _alarm_within(h: float, k: float, shifts: np.ndarray, states: int, looks: int) -> np.ndarray:
    """P(the CUSUM from 0 alarms within ``looks`` steps) for each of ``shifts``: 1 minus the
    mass the chain keeps after ``looks`` steps of its transient matrix (the exact T-step
    absorption, not 1 - exp(-T / ARL): a chain must climb to h before it can alarm, so with
    few looks the geometric form overstates the chance, most for the shifted nodes, and an
    h solved from it held a daily schedule's CUSUM at 0.000 against a 0.004 budget)."""
    mats = _transitions(h, k, shifts, states).reshape(len(shifts), states, states)
    mass = np.zeros((len(shifts), states))
    mass[:, 0] = 1.0
    steps = looks
    # the chain's mass after T steps by repeated squaring of its matrices: log2(T) products
    out = mass
    power = mats
    while steps:
        if steps & 1:
            out = np.einsum("ni,nij->nj", out, power)
        steps >>= 1
        if steps:
            power = power @ power
    alarmed: np.ndarray = np.clip(1.0 - out.sum(axis=1), 0.0, 1.0)
    return alarmed


def _arl(h: float, k: float, shift: float, states: int) -> float:
    transition = _transitions(h, k, shift, states).reshape(states, states)
    # a chain that all but never escapes (a strongly negative shift: ARL past 1e20) leaves
    # I - P singular in floats: the solve fails, or returns garbage, negative or not finite
    try:
        arl = float(np.linalg.solve(np.eye(states) - transition, np.ones(states))[0])
    except np.linalg.LinAlgError:
        return math.inf
    return arl if math.isfinite(arl) and arl >= 1.0 else math.inf


def cusum_threshold(arl0: float, *, k: float = 0.5, states: int = _STATES) -> float:
    """The h with ``cusum_arl(h, k=k) == arl0`` (Brent's root search on log ARL)."""
    arl0 = v.real(arl0, "arl0", low=1.0, low_open=True)
    k = v.real(k, "k", low=0.0)
    states = v.integer(states, "states", minimum=2)
    target = math.log(arl0)

    def gap(h: float) -> float:
        return math.log(_arl(h, k, 0.0, states)) - target

    high = 1.0
    while gap(high) < 0:
        high *= 2.0
        if high > 1e4:  # pragma: no cover - ARL grows exponentially in h
            raise StatsInputError(f"`arl0` {arl0!r} is out of reach for k={k!r}.")
    low = 1e-6
    if gap(low) > 0:
        raise StatsInputError(
            f"`arl0` must exceed the run length at h -> 0 ({math.exp(gap(low) + target):.3g}); "
            f"got {arl0!r}."
        )
    return float(_brentq(gap, low, high, xtol=1e-12, rtol=1e-14))


def arl_for_budget(looks: int, false_alarm_probability: float) -> float:
    """ARL0 = T / -ln(1 - p): the in-control run length that gives false-alarm probability p
    within T looks, taking run lengths as geometric (720 looks, p = 0.05 -> 14 037)."""
    looks = v.integer(looks, "looks", minimum=1)
    p = v.real(
        false_alarm_probability,
        "false_alarm_probability",
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
    )
    return looks / -math.log1p(-p)


#: |u| past which the shared reference term's normal mass is left to the end nodes' values
_U_SPAN = 8.0


def _normal_expectation(
    chance: Callable[[np.ndarray], np.ndarray], tol: float, *, width: float = 2.0, depth: int = 12
) -> float:
    """E[g(U)], U ~ N(0, 1), for a chance g(u) monotone in u: adaptive Simpson on g(u) phi(u).

    A grid of ``width`` over [-8, 8] with its midpoints, then per level one call of ``g`` on
    the quarter points of every open interval: an interval whose two-panel Simpson estimate
    S2 is within 15 tol (b - a) / 16 of its one-panel S1 is closed at S2 + (S2 - S1) / 15,
    the others are halved; ends that agree to 1e-12 close it at g (Phi(b) - Phi(a)) (g
    monotone: flat between them), and each tail past +-8 takes its end node's g.

    Gauss-Hermite nodes cannot do this: given U, the CUSUM's chance of an alarm within T looks
    is nearly a step in U once h is large (0 to 1 over u in [0.8, 2.4] at T = 720, rho = 0.1,
    h = 42.6), and 24 nodes gave 0.0405 where the integral is 0.0464 (h too low, the budget
    overspent by 15 %; 0.028 for 0.032 at T = 8760, rho = 0.05)."""
    grid = np.arange(-_U_SPAN, _U_SPAN + width / 2, width)
    ends = chance(grid)
    mids = chance((grid[:-1] + grid[1:]) / 2)
    total = float(special.ndtr(-_U_SPAN) * ends[0] + special.ndtr(-_U_SPAN) * ends[-1])
    a, b, fa, fm, fb = grid[:-1], grid[1:], ends[:-1], mids, ends[1:]
    span = 2 * _U_SPAN
    for level in range(depth):
        flat = np.abs(fb - fa) <= 1e-12
        total += float(np.sum((special.ndtr(b[flat]) - special.ndtr(a[flat])) * fa[flat]))
        a, b, fa, fm, fb = a[~flat], b[~flat], fa[~flat], fm[~flat], fb[~flat]
        if a.size == 0:
            break
        m = (a + b) / 2
        quarter = chance(np.concatenate([(a + m) / 2, (m + b) / 2]))
        fl, fr = quarter[: a.size], quarter[a.size :]
        length = b - a
        ga, gl, gm, gr, gb = (
            f * _dist.norm_pdf(x)
            for f, x in ((fa, a), (fl, (a + m) / 2), (fm, m), (fr, (m + b) / 2), (fb, b))
        )
        s1 = length / 6 * (ga + 4 * gm + gb)
        s2 = length / 12 * (ga + 4 * gl + 2 * gm + 4 * gr + gb)
        done = np.abs(s2 - s1) <= 15 * tol * length / span
        if level == depth - 1:
            done[:] = True
        total += float(np.sum(s2[done] + (s2[done] - s1[done]) / 15))
        keep = ~done
        a, m, b = a[keep], m[keep], b[keep]
        fa, fl, fm, fr, fb = fa[keep], fl[keep], fm[keep], fr[keep], fb[keep]
        # each open interval becomes its two halves, with their ends and midpoints known
        a, b = np.concatenate([a, m]), np.concatenate([m, b])
        fa, fm, fb = np.concatenate([fa, fm]), np.concatenate([fl, fr]), np.concatenate([fm, fb])
    return total


#: the shared-reference Shewhart's grid over u (trapezoid weights times phi(u)), fine enough
#: for its near-step integrand Phi((c - sqrt(rho) u) / sqrt(1 - rho))^(T / P)
_U_GRID = np.linspace(-10.0, 10.0, 2001)  # past +-10: 1.5e-23 of the mass
_U_WEIGHTS = _dist.norm_pdf(_U_GRID) * (_U_GRID[1] - _U_GRID[0])
_U_WEIGHTS[[0, -1]] /= 2
# summing to 1 exactly: 2e-14 short, log E_U[...] could never reach a budget under that, and
# the search for c doubled its bracket for ever (a budget of 1e-12 over 168 phases)
_U_WEIGHTS /= _U_WEIGHTS.sum()


def _check_shared(looks: int, p: float, rho: float, phases: int) -> tuple[int, float, float, int]:
    looks = v.integer(looks, "looks", minimum=1)
    p = v.real(p, "false_alarm_probability", low=0.0, high=1.0, low_open=True, high_open=True)
    rho = v.real(rho, "rho", low=0.0, high=1.0, high_open=True)
    phases = v.integer(phases, "phases", minimum=1)
    return looks, p, rho, phases


def cusum_threshold_shared(
    looks: int,
    false_alarm_probability: float,
    *,
    k: float = 0.5,
    rho: float = 0.0,
    phases: int = 1,
    states: int = _STATES,
) -> float:
    """CUSUM h so that E_U[P(alarm within T looks | U)] = p for windows sharing a reference.

    Given U the increments are N(sqrt(r) U, 1 - r) with r = rho / phases; standardising by
    s = sqrt(1 - r) gives a CUSUM with reference k / s, threshold h / s and shift sqrt(r) U / s,
    whose chance of an alarm within T looks is the exact T-step absorption of ``cusum_arl``'s
    Brook-Evans chain from 0 (``_alarm_within``), integrated over U by ``_normal_expectation``
    (adaptive: given U the chance is nearly a step in U once h is large). ``states``: the
    chain's cells (400 takes 10-20 s at T = 720; the alarm plan's 100, about 0.3 s, give an h
    about 1 % higher, a hair conservative). ``rho = 0`` gives exactly
    ``cusum_threshold(arl_for_budget(T, p), k=k)``, the ARL definition. Usually h is above
    that (a shared reference adds false alarms); with few looks it can be below it. 0 when even
    h -> 0 holds the budget independently (then also with a shared reference: P(any alarm)
    = E_U[1 - (1 - q(U))^T] <= 1 - (1 - E q)^T, concave in the per-look rate q).
    """
    looks, p, rho, phases = _check_shared(looks, false_alarm_probability, rho, phases)
    k = v.real(k, "k", low=0.0)
    states = v.integer(states, "states", minimum=2)
    if arl_for_budget(looks, p) <= _arl(1e-6, k, 0.0, states):
        return 0.0  # even h -> 0 holds the budget independently, so with rho > 0 too (below)
    if rho == 0.0:
        return cusum_threshold(arl_for_budget(looks, p), k=k, states=states)
    if p < _SHARED_MIN_P:
        # the chain's chance given U is exact to about 1e-13: below this floor the integral
        # is rounding (a budget of 1e-15 "held" at h = 693, a chain cell 7 z units wide)
        raise StatsInputError(
            f"`false_alarm_probability` {p!r} is below {_SHARED_MIN_P:g}, the least a shared "
            "reference's CUSUM threshold is computed for."
        )
    r = rho / phases
    s = math.sqrt(1.0 - r)
    scale = math.sqrt(r) / s

    def gap(h: float) -> float:
        def chance(u: np.ndarray) -> np.ndarray:
            return _alarm_within(h / s, k / s, scale * u, states, looks)

        # the chain's chance is exact to about 1e-13 (1 minus the mass kept): a tolerance
        # under that could never be met, and halved every interval to the last level
        share = _SHARED_TOL if p >= _SHARED_SMALL_P else 10 * _SHARED_TOL
        fa = _normal_expectation(chance, max(share * p, 1e-12))
        return math.log(max(fa, 1e-300)) - math.log(p)

    low = cusum_threshold(arl_for_budget(looks, p), k=k, states=states)
    if gap(low) <= 0:
        # The shared reference lowers P(any alarm) at the independent threshold (few looks
        # and a large k: 1 - (1 - q)^T is concave in the per-look rate q), so h is below it;
        # when even h -> 0 holds the budget, 0.
        tiny = 1e-6
        if gap(tiny) <= 0:
            return 0.0
        return float(_brentq(gap, tiny, low, xtol=1e-6))
    high = low * 1.5 + 1.0
    while gap(high) > 0:
        high *= 1.5
        if high > 1e3:  # pragma: no cover - the shift's tail is Gaussian
            raise StatsInputError(f"no CUSUM threshold holds the budget with rho={rho!r}.")
    return float(_brentq(gap, low, high, xtol=1e-6))


def shewhart_threshold_shared(
    looks: int,
    false_alarm_probability: float,
    *,
    rho: float = 0.0,
    phases: int = 1,
) -> float:
    """z threshold c with P(any of T windows has z > c) = p when windows share references.

    Each of the G = min(P, T) phases that hold a window has T / G windows sharing one reference
    term U_g: P(no alarm) = (E_U[Phi((c - sqrt(rho) U) / sqrt(1 - rho))^(T / G)])^G (with more
    phases than windows, each window is a phase of its own). ``rho = 0`` gives the
    independent-window threshold ``Phi^-1(1 - (1 - (1 - p)^(1 / T)))`` (close to Bonferroni).
    """
    looks, p, rho, phases = _check_shared(looks, false_alarm_probability, rho, phases)
    groups = min(phases, looks)
    per_phase = looks / groups
    s = math.sqrt(1.0 - rho)
    root = math.sqrt(rho)

    log_p = math.log(p)

    def gap(c: float) -> float:
        # in the upper tail throughout: with Phi near 1, 1 - Phi is kept only to 1.1e-16
        # (Phi(8.3) is 1.0), so below a budget of about 1e-11 a window c came out anywhere
        # (9.6 p at T = 86,400; 1e-9 p at a budget of 5e-16). log Phi(x) by log_ndtr, the
        # chance of an alarm in a phase given U as -expm1(T / G log Phi), its mean q over U,
        # and P(alarm) = 1 - (1 - q)^G = -expm1(G log1p(-q)).
        log_cdf = per_phase * special.log_ndtr((c - root * _U_GRID) / s)
        q = float(_U_WEIGHTS @ -np.expm1(log_cdf))
        alarm = 1.0 if q >= 1.0 else -math.expm1(groups * math.log1p(-q))
        return math.log(max(alarm, 1e-300)) - log_p

    low, high = 0.0, 10.0
    if gap(low) <= 0:
        return 0.0  # even c = 0 holds the budget (one look at p >= 1/2, a few at more)
    while gap(high) > 0:
        high *= 2.0
        if high > 80.0:  # pragma: no cover - P(z > 40) is 0 in floats
            raise StatsInputError(
                f"no immediate threshold holds the budget `false_alarm_probability` {p!r}."
            )
    return float(_brentq(gap, low, high, xtol=1e-9))
