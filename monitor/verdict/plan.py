"""The alarm plan: the thresholds that hold a monitor's budget, and the seasonal phases."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
from scipy import special

from monitor.config import MonitorConfig
from monitor.memo import ByIdentity
from monitor.stats import (
    cusum_threshold_shared,
    shewhart_threshold_shared,
)
from monitor.verdict._common import _HOUR_NS

# --------------------------------------------------------------------------- phases


def phase_of(timestamps_ns: np.ndarray, period: timedelta | None) -> np.ndarray:
    """Phase index of each timestamp: hour of day (daily, 0-23, UTC), hour of week (weekly,
    0-167, Monday 00:00 UTC = 0) or 0 (no seasonality)."""
    ts = np.asarray(timestamps_ns, dtype=np.int64)
    if period is None:
        return np.zeros(ts.shape, dtype=np.intp)
    hours = ts // _HOUR_NS
    if period == timedelta(days=1):
        return (hours % 24).astype(np.intp)
    return ((hours + 72) % 168).astype(np.intp)  # 1970-01-01 was a Thursday


def _phases(period: timedelta | None) -> int:
    if period is None:
        return 1
    return 24 if period == timedelta(days=1) else 168


def phase_counts(
    values: np.ndarray,
    timestamps_ns: np.ndarray | None,
    edges: np.ndarray,
    period: timedelta | None,
) -> np.ndarray:
    """Counts of ``values`` per (phase, bin) on the right-closed bins of inner ``edges``: P x B."""
    bins = int(edges.size) + 1
    phases = _phases(period)
    if phases == 1 or timestamps_ns is None:
        return _bin_counts(np.asarray(values), edges).astype(np.float64).reshape(1, bins)
    idx = np.searchsorted(edges, values, side="left")
    ph = phase_of(timestamps_ns, period)
    flat = np.bincount(ph * bins + idx, minlength=phases * bins)
    return flat.astype(np.float64).reshape(phases, bins)


# Values per chunk of ``_bin_counts``: the chunk and its comparison stay in the CPU cache.
_COUNT_CHUNK = 1 << 16


def _bin_counts(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``bincount(searchsorted(edges, values, 'left'), minlength=edges.size + 1)``, from the
    cumulative counts #{v <= e_k} taken chunk by chunk (about 10x faster than searching 10M
    values; NaN lands in the last bin, as there)."""
    upto = np.zeros(edges.size, dtype=np.int64)
    for start in range(0, values.size, _COUNT_CHUNK):
        part = values[start : start + _COUNT_CHUNK]
        for k, edge in enumerate(edges):
            upto[k] += np.count_nonzero(part <= edge)
    counts: np.ndarray = np.diff(np.concatenate(([0], upto, [values.size])))
    return counts


# --------------------------------------------------------------------------- alarm plan


@dataclass(frozen=True, slots=True)
class AlarmPlan:
    """The per-check thresholds that hold a monitor's false-alarm budget for its schedule.

    ``checks`` slots per period; drift: ``tests = segments x tracks`` compared series, CUSUM
    ``drift_h`` for a share ``cusum_share`` of the budget split over them and ``drift_alpha`` /
    ``drift_z`` the immediate threshold for the rest, both accounting for the blocks' shared
    reference (correlation ``rho = 1 / (1 + c)``, c the reference's rows of a block's phase over
    the block's: its copies of each phase, times the blocks an hour holds on a sub-hour
    schedule; ``phases`` independent phase references the blocks cycle through); decay:
    ``decay_alpha`` spent by a look one ``cadence`` after the previous one (``budget *
    cadence / (period + cadence)``), ``decay_looks`` such looks fit in a period. ``clear_h``: a
    raised drift track's clearing threshold (``clear_threshold``), searched with the others so
    that the daemon's threshold cache holds it before any alarm (a one-shot check that had to
    search it would import ``scipy.optimize``, 0.15 s).
    """

    checks: int
    segments: int
    tracks: int
    seasonal_period: timedelta | None
    phases: int
    rho: float
    drift_h: float
    drift_alpha: float
    drift_z: float
    clear_h: float
    decay_looks: int
    decay_alpha: float
    cadence: timedelta
    n_resamples: int
    min_pairs_for_alpha: int

    @property
    def resolved(self) -> bool:
        """Whether the CUSUM threshold is one its ``_CHAIN_STATES``-state chain resolves (cells
        at most half a z unit wide). Past that (a reference of few checks against its blocks,
        rho near 0.1 and up) the chain undercounts slow climbs and the solved h holds less
        than its budget: simulated, an anchor track at 4 times its share."""
        return not math.isfinite(self.drift_h) or self.drift_h <= 0.5 * _CHAIN_STATES

    def look_alpha(self, monitor: MonitorConfig, since_last: timedelta | None) -> float:
        """Alpha a look spends ``since_last`` after the previous look (None: first look)."""
        period = monitor.budget.period
        dt = self.cadence if since_last is None else min(since_last, self.cadence)
        return monitor.budget.decay * (dt / (period + self.cadence))


_CHAIN_STATES = 100  # the Brook-Evans chain's states in the CUSUM threshold search

# Thresholds by their exact inputs (``threshold_key``): what this process computed, and what a
# persistent cache handed in (``remember_thresholds``; the file is ``monitor.thresholds``'s).
_THRESHOLDS: dict[str, float] = {}


def threshold_key(kind: str, *inputs: float) -> str:
    """The cache key of a threshold: its kind and exact inputs (floats as ``float.hex``)."""
    return "|".join([kind, *(x.hex() if isinstance(x, float) else str(x) for x in inputs)])


def known_thresholds() -> dict[str, float]:
    """Every threshold this process knows (computed or remembered), by ``threshold_key``."""
    return dict(_THRESHOLDS)


def remember_thresholds(entries: Mapping[str, float]) -> None:
    """Hand in thresholds computed earlier by this code (a persistent cache); ``alarm_plan``
    then uses them instead of searching again. Keys not made by ``threshold_key`` are unused."""
    _THRESHOLDS.update({str(k): float(v) for k, v in entries.items()})


def _known(key: str, solve: Callable[[], float]) -> float:
    value = _THRESHOLDS.get(key)
    if value is None:
        value = _THRESHOLDS[key] = solve()
    return value


@functools.lru_cache(maxsize=256)
def _cusum_h(checks: int, p: float, k: float, rho: float, phases: int) -> float:
    """Markov-chain root search (up to a second with a shared reference): cached. 0 when even
    h -> 0 (an alarm at any z > k) holds the budget (few checks a period and a large k)."""
    if rho == 0.0:
        return _known(
            threshold_key("cusum", checks, p, k), lambda: cusum_threshold_shared(checks, p, k=k)
        )
    return _known(
        threshold_key("cusum", checks, p, k, rho, phases, _CHAIN_STATES),
        lambda: cusum_threshold_shared(
            checks, p, k=k, rho=rho, phases=phases, states=_CHAIN_STATES
        ),
    )


@functools.lru_cache(maxsize=64)
def clear_threshold(checks: int, k: float) -> float:
    """``h`` of a raised drift track's clearing CUSUM ``C = max(0, C - z - k)``, set so that its
    in-control ARL is the ``checks`` in one budget period (``cusum_threshold_shared`` without a
    shared term, whose budget p = 1 - 1/e gives ARL0 = T / -ln(1 - p) = T; on a 100-state
    chain, 4 ms, as the shared-reference search: h = 4.77 for 720 hourly checks over 30 days,
    k = 0.5; 400 states give 4.75 in 0.23 s). A drift exactly at the tolerance (block
    z ~ N(0, 1)) is then cleared falsely about once a period while it is raised
    (``bench/clearing.py``: 1.3-1.35 per 720 blocks of 200-300 scores, 0.76 of 1,000, almost
    never on larger blocks, where the band holds it), one past the tolerance far less often.
    With no more checks a period than the run length at h -> 0 (3.24 at k = 0.5: a ``10d``
    schedule, a monthly cron) h is 0: one block of evidence, -z > k, with the band. Cached like
    the alarm's thresholds."""
    return _known(
        threshold_key("clear", checks, k, 100),
        lambda: cusum_threshold_shared(checks, -math.expm1(-1.0), k=k, states=100),
    )


@functools.lru_cache(maxsize=256)
def _shewhart_z(checks: int, p: float, rho: float, phases: int) -> float:
    return _known(
        threshold_key("shewhart", checks, p, rho, phases),
        lambda: shewhart_threshold_shared(checks, p, rho=rho, phases=phases),
    )


def _tracks(monitor: MonitorConfig) -> int:
    return 2 if monitor.drift.anchor and not monitor.windows.fixed_reference else 1


_PLANS: ByIdentity[AlarmPlan] = ByIdentity(256)


def alarm_plan(monitor: MonitorConfig, segments: int = 1) -> AlarmPlan:
    """Thresholds for ``monitor`` with ``segments`` compared segments (see ``AlarmPlan``);
    kept per configuration object (a pure function of it, asked at every check: 0.06 ms)."""
    plan = _PLANS.get(monitor, segments)
    if plan is None:
        plan = _alarm_plan(monitor, segments)
        _PLANS.put(monitor, segments, plan)
    return plan


def _alarm_plan(monitor: MonitorConfig, segments: int) -> AlarmPlan:
    budget = monitor.budget
    checks = monitor.schedule.checks_per(budget.period)
    interval = monitor.schedule.nominal_interval(budget.period)
    period = monitor.seasonal_period
    tracks = _tracks(monitor)
    tests = max(1, segments) * tracks
    span = monitor.windows.reference_span
    # blocks to a phase: b consecutive blocks of a sub-hour schedule share one phase-hour's
    # reference copy, and each holds 1/b of that hour's rows
    per_phase = 1.0
    if period is None:
        cycles = span / max(interval, timedelta(seconds=1))
        phases = 1
    else:
        per_phase = max(timedelta(hours=1) / max(interval, timedelta(seconds=1)), 1.0)
        # the reference's rows of a block's phase over the block's: its span / period copies
        # of the phase-hour, b times a block's rows (at 5 minutes, 1/13 for a 7-day reference,
        # not the hourly block's 1/2: simulated, 10.9 % false alarms for a 5 % budget)
        cycles = span / period * per_phase
        phases = max(1, round(period / max(interval, timedelta(hours=1))))
        phases = min(phases, _phases(period))
    # below 1: a reference of seconds against a daily schedule rounded to 1 (no plan exists)
    rho = min(round(1.0 / (1.0 + max(cycles, 1e-9)), 4), 0.9999)
    share = monitor.drift.cusum_share
    if share > 0:
        k = monitor.drift.cusum_k
        p_cusum = share * budget.drift / tests
        # A false CUSUM alarm builds over about (h + 1.166) / k blocks (Siegmund's b = h + 1.166
        # covered at the in-control drift k); it averages the shared reference terms of only
        # the phases those blocks fall in (b blocks to a phase), not of all of them.
        span_blocks = math.ceil((_cusum_h(checks, p_cusum, k, 0.0, 1) + 1.166) / k) if k else 1
        seen = math.ceil(span_blocks / per_phase)
        if per_phase == 1.0:
            h = _cusum_h(checks, p_cusum, k, rho, max(1, min(phases, seen)))
        else:
            # A sub-hour schedule: the chain's one shared term for the whole period stands for
            # a month that visits T / b phase-hours, each with its term (one term over 43,200
            # looks at 1 minute asked h = 55-341 of some budgets, or spent 6.8 % of 4 % at 3
            # minutes). So the period is cut into windows of the `seen` phase-hours an alarm
            # builds over (seen b blocks, and the span a CUSUM carries into them), each under
            # one term averaged over its `seen` phases, the share split over the windows
            # (conservative: a fixed reference's visits to one phase share its term).
            window = math.ceil(seen * per_phase)
            windows = max(1, round(checks / window))
            own = -math.expm1(math.log1p(-p_cusum) / windows)
            h = _cusum_h(window + span_blocks, own, k, rho, max(1, min(phases, seen)))
    else:
        h = math.inf
    if share < 1:
        drift_z = _shewhart_z(checks, (1.0 - share) * budget.drift / tests, rho, phases)
        drift_alpha = float(special.ndtr(-drift_z)) * tests  # norm.sf; vs Holm-adjusted p
    else:
        drift_z, drift_alpha = math.inf, 0.0
    cadence = monitor.decay_cadence
    looks = monitor.decay.looks or max(1, math.floor(budget.period / cadence))
    decay_alpha = budget.decay * (cadence / (budget.period + cadence))
    n_resamples = monitor.decay.n_resamples or max(9999, math.ceil(20.0 / decay_alpha))
    return AlarmPlan(
        checks=checks,
        segments=segments,
        tracks=tracks,
        seasonal_period=period,
        phases=phases,
        rho=rho,
        drift_h=h,
        drift_alpha=drift_alpha,
        drift_z=drift_z,
        clear_h=clear_threshold(checks, monitor.drift.cusum_k),
        decay_looks=looks,
        decay_alpha=decay_alpha,
        cadence=cadence,
        n_resamples=n_resamples,
        min_pairs_for_alpha=math.ceil(math.log2(1.0 / decay_alpha)),
    )


# --------------------------------------------------------------------------- state
