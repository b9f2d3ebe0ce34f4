"""True PSI: the population value the drift test estimates, integrated from a scenario's
mixture (Monte Carlo as a cross-check), and the drift strengths that put a world at its edge."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.errors import StatsInputError
from monitor.simulate.generate import _hourly_rate, _scores_logged, _seed_sequence, _span, _utc_us
from monitor.simulate.scenario import (
    _US_PER_DAY,
    _US_PER_HOUR,
    EASY_LOGNORMAL,
    HARD_LOGNORMAL,
    MIX_PEAK_HOUR,
    ZERO_GAP,
    RngLike,
    Scenario,
    TimeLike,
    _level,
    _segment_probs,
    _td_us,
)

# --------------------------------------------------------------------------------------------
# true PSI: the population value the drift test estimates

PsiMethod = Literal["integrate", "monte_carlo"]
_PSI_METHODS = ("integrate", "monte_carlo")
#: A Monday at midnight UTC: the default origin of :func:`edge_strength`.
EDGE_ORIGIN = datetime(2024, 1, 1, tzinfo=UTC)
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


def _drift_share(s: Scenario, segment: str | None) -> float:
    """Share of the traffic (of ``segment``, or of all segments) that the drift moves."""
    if s.drift_segments is None:
        return 1.0
    if segment is not None:
        return 1.0 if segment in s.drift_segments else 0.0
    probs = _segment_probs(s)
    return float(sum(probs[s.segments.index(c)] for c in s.drift_segments))


def _masses(
    s: Scenario, t_us: npt.NDArray[np.float64], origin_us: int, drift_share: float
) -> npt.NDArray[np.float64]:
    """(P(score = 0), P(easy, > 0), P(hard, > 0)) at times ``t_us``: shape (3, len(t_us))."""
    day = np.floor(t_us / _US_PER_DAY)
    hour = (t_us - day * _US_PER_DAY) / _US_PER_HOUR
    weekend = ((day.astype(np.int64) + 3) % 7 >= 5).astype(np.float64)
    c = np.cos(2 * np.pi * (hour - MIX_PEAK_HOUR) / 24)
    h = s.hard_share + s.mix_daily_amplitude * c + s.mix_weekend_shift * weekend
    if s.drift_start is not None and s.drift_strength > 0:
        level = _level(s.drift_start, s.drift_ramp, t_us - origin_us)
        h = h + s.drift_strength * drift_share * level
    p0e = (
        s.zero_share
        - s.hard_share * ZERO_GAP
        + s.zero_daily_amplitude * c
        + s.zero_weekend_shift * weekend
    )
    p0h = p0e + ZERO_GAP
    return np.stack([(1 - h) * p0e + h * p0h, (1 - h) * (1 - p0e), h * (1 - p0h)])


def _pieces(
    s: Scenario, t0_us: int, t1_us: int, origin_us: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Pieces of ``[t0, t1)`` on which the expected volume is constant and the model smooth.

    Returns (piece starts, piece lengths, expected scores per microsecond), all in us. Breaks
    fall on every hour (the Poisson rate is set per hour) and at the drift's start and ramp end
    and the feed's stop and outage (offsets from origin), so Gauss-Legendre is exact to rounding.
    """
    first = -(-t0_us // _US_PER_HOUR) * _US_PER_HOUR
    cuts = [t0_us, t1_us, *range(first, t1_us, _US_PER_HOUR)]
    offsets = [s.drift_start, s.scores_stop]
    if s.drift_start is not None:
        offsets.append(s.drift_start + s.drift_ramp)
    if s.scores_outage is not None:
        offsets.extend(s.scores_outage)
    cuts += [origin_us + _td_us(o) for o in offsets if o is not None]
    edges = np.unique(np.clip(np.asarray(cuts, dtype=np.int64), t0_us, t1_us))
    starts, ends = edges[:-1], edges[1:]
    mid = (starts + ends) // 2
    day = mid // _US_PER_DAY
    hour = (mid - day * _US_PER_DAY) // _US_PER_HOUR
    rate = np.asarray([_hourly_rate(s, int(d))[int(x)] for d, x in zip(day, hour, strict=True)])
    logged = _scores_logged(s, mid - origin_us)
    if logged is not None:
        rate = rate * logged
    return starts.astype(np.float64), (ends - starts).astype(np.float64), rate / _US_PER_HOUR


def _span_masses(
    s: Scenario, t0_us: int, t1_us: int, origin_us: int, drift_share: float
) -> npt.NDArray[np.float64] | None:
    """Volume-weighted mean of :func:`_masses` over ``[t0, t1)`` (None: nothing is logged)."""
    starts, lengths, rate = _pieces(s, t0_us, t1_us, origin_us)
    nodes = starts[:, None] + lengths[:, None] * (_GL_NODES[None, :] + 1) / 2
    weights = (rate * lengths)[:, None] * _GL_WEIGHTS[None, :] / 2
    total = float(weights.sum())
    if total <= 0:
        return None
    m = _masses(s, nodes.ravel(), origin_us, drift_share)
    mean: npt.NDArray[np.float64] = (m * weights.ravel()).sum(axis=1) / total
    return mean


@dataclass(frozen=True, slots=True)
class ScoreMixture:
    """The score distribution at an instant or over a span: a point mass and two lognormals.

    ``zero`` = P(score = 0), ``easy`` = P(easy query, score > 0), ``hard`` = P(hard, > 0); they
    sum to 1. The positive parts are ``EASY_LOGNORMAL`` and ``HARD_LOGNORMAL``.
    """

    zero: float
    easy: float
    hard: float

    def cdf(self, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """P(score <= x) = ``zero + easy Φ((ln x - μ_e) / σ_e) + hard Φ((ln x - μ_h) / σ_h)``.

        0 for x < 0; ``zero`` at x = 0.
        """
        from scipy.special import ndtr

        arr = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore"):
            y = np.log(np.maximum(arr, 0.0))
        cdf: npt.NDArray[np.float64] = np.where(
            arr < 0,
            0.0,
            self.zero
            + self.easy * ndtr((y - EASY_LOGNORMAL[0]) / EASY_LOGNORMAL[1])
            + self.hard * ndtr((y - HARD_LOGNORMAL[0]) / HARD_LOGNORMAL[1]),
        )
        return cdf

    def quantile(self, p: float) -> float:
        """``inf{x : cdf(x) >= p}``: 0 inside the point mass, else Brent's root in log space."""
        from scipy.optimize import brentq

        if not (isinstance(p, int | float) and 0.0 < p < 1.0):
            raise StatsInputError(f"`p` must be in (0, 1); got {p!r}.")
        if p <= self.zero:
            return 0.0
        sd = max(EASY_LOGNORMAL[1], HARD_LOGNORMAL[1])
        lo = min(EASY_LOGNORMAL[0], HARD_LOGNORMAL[0]) - 40 * sd
        hi = max(EASY_LOGNORMAL[0], HARD_LOGNORMAL[0]) + 40 * sd

        def excess(y: float) -> float:
            return float(self.cdf(math.exp(y))) - p

        return math.exp(float(brentq(excess, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps)))


def _population_psi(reference: ScoreMixture, current: ScoreMixture, bins: int) -> float:
    """PSI of two mixtures on the reference's quantile bins (merged where equal, right-closed)."""
    edges = np.unique([reference.quantile(k / bins) for k in range(1, bins)])
    q = np.diff(np.concatenate([[0.0], reference.cdf(edges), [1.0]]))
    p = np.diff(np.concatenate([[0.0], current.cdf(edges), [1.0]]))
    return _psi_of_probabilities(q, p)


def _psi_of_probabilities(q: npt.NDArray[np.float64], p: npt.NDArray[np.float64]) -> float:
    both = (p <= 0) & (q <= 0)
    p, q = p[~both], q[~both]
    if np.any(p <= 0) or np.any(q <= 0):
        return math.inf
    return float(max(np.sum((p - q) * np.log(p / q)), 0.0))


def _sample_scores(
    s: Scenario,
    t0_us: int,
    t1_us: int,
    origin_us: int,
    drift_share: float,
    n: int,
    g: np.random.Generator,
) -> npt.NDArray[np.float64]:
    """``n`` scores drawn from the volume-weighted model over ``[t0, t1)`` (times, then scores)."""
    starts, lengths, rate = _pieces(s, t0_us, t1_us, origin_us)
    w = rate * lengths
    piece = g.choice(w.size, size=n, p=w / w.sum())
    t = starts[piece] + lengths[piece] * g.random(n)
    m = _masses(s, t, origin_us, drift_share)
    u = g.random(n)
    zero, easy = u < m[0], (u >= m[0]) & (u < m[0] + m[1])
    z = g.standard_normal(n)
    log_mu = np.where(easy, EASY_LOGNORMAL[0], HARD_LOGNORMAL[0])
    log_sd = np.where(easy, EASY_LOGNORMAL[1], HARD_LOGNORMAL[1])
    scores: npt.NDArray[np.float64] = np.where(zero, 0.0, np.exp(log_mu + log_sd * z))
    return scores


def _sample_psi(
    reference: npt.NDArray[np.float64], current: npt.NDArray[np.float64], bins: int
) -> float:
    """Sample PSI as the monitor bins it: type-7 reference quantiles, unique, right-closed."""
    edges = np.unique(np.quantile(reference, np.arange(1, bins) / bins))
    q = np.bincount(np.searchsorted(edges, reference, side="left"), minlength=edges.size + 1)
    p = np.bincount(np.searchsorted(edges, current, side="left"), minlength=edges.size + 1)
    return _psi_of_probabilities(q / q.sum(), p / p.sum())


def _when_us(when: object, name: str) -> tuple[int, int] | float:
    """A span as (start, end) epoch microseconds, or an instant as float microseconds."""
    if isinstance(when, tuple):
        if len(when) != 2:
            raise StatsInputError(f"`{name}` must be a time or a (start, end) pair; got {when!r}.")
        t0, t1, _ = _span(when[0], when[1], None)
        return int(t0.astype(np.int64)), int(t1.astype(np.int64))
    return float(_utc_us(when, name).astype(np.int64))  # type: ignore[arg-type]


def _mixture(
    s: Scenario, when: tuple[int, int] | float, origin_us: int, share: float, name: str
) -> ScoreMixture:
    if isinstance(when, tuple):
        m = _span_masses(s, when[0], when[1], origin_us, share)
        if m is None:
            raise StatsInputError(f"`{name}` holds no logged scores (the feed is silent).")
    else:
        m = _masses(s, np.asarray([when]), origin_us, share)[:, 0]
    return ScoreMixture(zero=float(m[0]), easy=float(m[1]), hard=float(m[2]))


def _segment_problem(scenario: Scenario, segment: str | None) -> list[str]:
    if segment is not None and segment not in scenario.segments:
        return [
            f"`segment` must be None or one of `scenario.segments` {scenario.segments}; "
            f"got {segment!r}."
        ]
    return []


def score_mixture(
    scenario: Scenario,
    when: TimeLike | tuple[TimeLike, TimeLike],
    *,
    origin: TimeLike,
    segment: str | None = None,
) -> ScoreMixture:
    """The true distribution of the scores logged at ``when`` (an instant or a (start, end) span).

    Masses ``zero = E[(1 - h) p0_easy + h p0_hard]``, ``easy = E[(1 - h)(1 - p0_easy)]``,
    ``hard = E[h (1 - p0_hard)]`` (module docstring). For a span the expectation is over time,
    weighted by the expected volume (the hourly Poisson mean; 0 where ``scores_stop`` or
    ``scores_outage`` silences the feed), by Gauss-Legendre quadrature (8 nodes) on pieces cut
    at every hour and at the drift's and the feed's break points, on which the integrand is
    smooth: exact to rounding. For an instant it is the model at that time (feed settings
    ignored). ``origin`` is the world's origin; ``segment`` restricts to one segment.
    """
    if not isinstance(scenario, Scenario):
        raise StatsInputError(f"`scenario` must be a Scenario; got {scenario!r}.")
    problems = _segment_problem(scenario, segment)
    if problems:
        raise StatsInputError(" ".join(problems))
    o_us = int(_utc_us(origin, "origin").astype(np.int64))
    share = _drift_share(scenario, segment)
    return _mixture(scenario, _when_us(when, "when"), o_us, share, "when")


def true_psi(
    scenario: Scenario,
    current: TimeLike | tuple[TimeLike, TimeLike],
    reference: tuple[TimeLike, TimeLike],
    *,
    origin: TimeLike,
    segment: str | None = None,
    bins: int = 10,
    method: PsiMethod = "integrate",
    n_samples: int = 1_000_000,
    rng: RngLike = 0,
) -> float:
    """The population PSI of the scores at ``current`` against those logged in ``reference``.

    Both sides are :func:`score_mixture` distributions (``current`` an instant or a span,
    ``reference`` a span). Bins are the reference's population quantiles ``F_ref^-1(k / bins)``,
    k = 1..bins-1, merged where equal (the zero mass makes several of them 0) and right-closed,
    as :func:`monitor.stats.build_baseline` bins a sample; PSI = ``sum_b (p_b - q_b)
    ln(p_b / q_b)`` without smoothing (+inf if a bin is empty on one side only).

    ``method='integrate'`` (default): the bin probabilities from the mixtures' CDFs, exact to
    about 1e-12. ``method='monte_carlo'``: the fallback and cross-check; ``n_samples`` draws from
    each side (times from the volume, then a score from the model at that time; ``current`` must
    be a span), binned as the monitor bins a sample. Its bias is about ``(B - 1) * 2 /
    n_samples``; measured sd at 10^6 draws a side: 0.0007 at PSI 0.03, 0.0015 at PSI 0.14.
    """
    if not isinstance(scenario, Scenario):
        raise StatsInputError(f"`scenario` must be a Scenario; got {scenario!r}.")
    problems = _segment_problem(scenario, segment)
    if not (isinstance(bins, int) and not isinstance(bins, bool) and bins >= 2):
        problems.append(f"`bins` must be an integer >= 2; got {bins!r}.")
    if method not in _PSI_METHODS:
        problems.append(f"`method` must be one of {set(_PSI_METHODS)}; got {method!r}.")
    if not (isinstance(n_samples, int) and not isinstance(n_samples, bool) and n_samples >= 1000):
        problems.append(f"`n_samples` must be an integer >= 1000; got {n_samples!r}.")
    if method == "monte_carlo" and not isinstance(current, tuple):
        problems.append("`current` must be a (start, end) span when `method` is 'monte_carlo'.")
    if not (isinstance(reference, tuple) and len(reference) == 2):
        problems.append(f"`reference` must be a (start, end) pair; got {reference!r}.")
    if problems:
        raise StatsInputError(" ".join(problems))
    o_us = int(_utc_us(origin, "origin").astype(np.int64))
    share = _drift_share(scenario, segment)
    ref_when, cur_when = _when_us(reference, "reference"), _when_us(current, "current")
    ref = _mixture(scenario, ref_when, o_us, share, "reference")
    cur = _mixture(scenario, cur_when, o_us, share, "current")
    if method == "integrate":
        return _population_psi(ref, cur, bins)
    g = np.random.default_rng(_seed_sequence(rng))
    spans = [w for w in (ref_when, cur_when) if isinstance(w, tuple)]  # both: checked above
    ref_sample, cur_sample = (
        _sample_scores(scenario, t0, t1, o_us, share, n_samples, g) for t0, t1 in spans
    )
    return _sample_psi(ref_sample, cur_sample, bins)


def psi_crossing(
    scenario: Scenario,
    level: float,
    *,
    reference: tuple[TimeLike, TimeLike],
    between: tuple[TimeLike, TimeLike],
    origin: TimeLike,
    window: timedelta = timedelta(days=1),
    segment: str | None = None,
    bins: int = 10,
) -> datetime | None:
    """The first time ``t`` in ``between`` when the trailing window's true PSI reaches ``level``.

    The PSI is :func:`true_psi` of ``[t - window, t)`` against ``reference`` (integrated). It is
    scanned on a grid of whole hours from ``between[0]``, then the first crossing is bisected to
    one second, so a crossing that lasts less than an hour may be missed. Returns an aware UTC
    datetime, or None when the PSI stays below ``level`` up to ``between[1]``. Use it to date,
    say, when a gradual drift's true PSI crosses twice the tolerance.
    """
    if not isinstance(scenario, Scenario):
        raise StatsInputError(f"`scenario` must be a Scenario; got {scenario!r}.")
    problems = _segment_problem(scenario, segment)
    if not (isinstance(level, int | float) and math.isfinite(level) and level > 0):
        problems.append(f"`level` must be a finite number > 0; got {level!r}.")
    if not (isinstance(window, timedelta) and window > timedelta(0)):
        problems.append(f"`window` must be a positive timedelta; got {window!r}.")
    if not (isinstance(bins, int) and not isinstance(bins, bool) and bins >= 2):
        problems.append(f"`bins` must be an integer >= 2; got {bins!r}.")
    for name, pair in (("reference", reference), ("between", between)):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            problems.append(f"`{name}` must be a (start, end) pair; got {pair!r}.")
    if problems:
        raise StatsInputError(" ".join(problems))
    o_us = int(_utc_us(origin, "origin").astype(np.int64))
    share = _drift_share(scenario, segment)
    ref = _mixture(scenario, _when_us(reference, "reference"), o_us, share, "reference")
    lo_us, hi_us = (int(t.astype(np.int64)) for t in _span(between[0], between[1], None)[:2])
    win_us = _td_us(window)

    def psi_at(t_us: int) -> float:
        m = _span_masses(scenario, t_us - win_us, t_us, o_us, share)
        if m is None:  # a silent window has no distribution: it cannot cross
            return -math.inf
        cur = ScoreMixture(zero=float(m[0]), easy=float(m[1]), hard=float(m[2]))
        return _population_psi(ref, cur, bins)

    grid = [*range(lo_us, hi_us, _US_PER_HOUR), hi_us]
    below = None
    for t_us in grid:
        if psi_at(t_us) >= level:
            if below is None:
                found = t_us
            else:
                a, b = below, t_us  # psi(a) < level <= psi(b)
                while b - a > 1_000_000:
                    mid = (a + b) // 2
                    a, b = (a, mid) if psi_at(mid) >= level else (mid, b)
                found = b
            stamp: datetime = np.datetime64(found, "us").astype(datetime)
            return stamp.replace(tzinfo=UTC)
        below = t_us
    return None


def edge_strength(
    base: Scenario,
    tolerance: float = 0.02,
    *,
    origin: TimeLike = EDGE_ORIGIN,
    bins: int = 10,
) -> float:
    """The ``drift_strength`` at which ``base``'s drift has a true PSI of exactly ``tolerance``.

    The PSI (:func:`true_psi`, integrated) is that of the week after the drift is complete,
    ``[origin + drift_start + drift_ramp, + 7 d)``, against the week before it starts,
    ``[origin + drift_start - 7 d, origin + drift_start)``. Whole weeks average the daily and
    weekly cycles out (the result does not depend on ``origin`` unless a feed setting breaks
    the weekly period), so PSI(0) = 0 and the root is unique: PSI grows with the strength. Found
    by Brent's method to 1e-12 on ``[0, s_max]``, ``s_max`` the largest strength the validation
    allows. Use it to set a world at the null's edge (``base.with_effect(drift_strength=...)``).
    """
    from scipy.optimize import brentq

    if not isinstance(base, Scenario):
        raise StatsInputError(f"`base` must be a Scenario; got {base!r}.")
    problems: list[str] = []
    if base.drift_start is None:
        problems.append(
            "`base` must have a drift (`drift_kind` 'abrupt' or 'gradual'); "
            f"got {base.drift_kind!r}."
        )
    elif base.drift_start < timedelta(days=7):
        problems.append(
            f"`base.drift_start` must be >= 7 days (a reference week before it); "
            f"got {base.drift_start!r}."
        )
    if not (isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance > 0):
        problems.append(f"`tolerance` must be a finite number > 0; got {tolerance!r}.")
    if problems:
        raise StatsInputError(" ".join(problems))
    o = _utc_us(origin, "origin").astype(datetime)
    onset = o + (base.drift_start or timedelta(0))  # not None: checked above
    full = onset + base.drift_ramp
    week = timedelta(days=7)

    def psi_at(strength: float) -> float:
        s = dataclasses.replace(base, drift_strength=strength)
        return true_psi(s, (full, full + week), (onset - week, onset), origin=o, bins=bins)

    room = 1.0 - (base.hard_share + abs(base.mix_daily_amplitude) + abs(base.mix_weekend_shift))
    s_max = min(room, 1.0 - 1e-9)
    top = psi_at(s_max)
    if top < tolerance:
        raise StatsInputError(
            f"`tolerance` must be reachable: the strongest drift `base` allows "
            f"({s_max:.4g}) has a true PSI of {top:.4g}; got {tolerance!r}."
        )
    return float(brentq(lambda x: psi_at(x) - tolerance, 0.0, s_max, xtol=1e-12, rtol=1e-12))


def at_edge(
    base: Scenario,
    tolerance: float = 0.02,
    *,
    scores_per_hour: float | None = None,
    name: str | None = None,
) -> Scenario:
    """``base`` with its drift set to :func:`edge_strength` (true PSI = ``tolerance``).

    ``scores_per_hour`` changes the volume (the true PSI does not depend on it: issue 9 asks for
    300/h, 10,000/h and 1M/day at the same edge); ``name`` defaults to ``f"{base.name}_edge"``.
    """
    strength = edge_strength(base, tolerance)
    return dataclasses.replace(
        base,
        name=f"{base.name}_edge" if name is None else name,
        drift_strength=strength,
        scores_per_hour=base.scores_per_hour if scores_per_hour is None else scores_per_hour,
    )
