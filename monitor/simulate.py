"""World simulator: retrieval logs with known drift and decay, for the demo, tests and benchmarks.

Two logs come out of a world, as the daemon reads them:

* **scores**: one top-1 retrieval score per served query. Each query is *easy* or *hard*; its score
  is 0 with probability ``p0`` (a point mass: nothing matched), otherwise lognormal (skewed):

  ``p0_easy(t) = zero_share - hard_share * ZERO_GAP + z(t)``,
  ``p0_hard(t) = p0_easy(t) + ZERO_GAP``,
  ``z(t) = zero_daily_amplitude * cos(2π (hour(t) - 3) / 24) + zero_weekend_shift * weekend(t)``,
  ``score | easy, > 0 ~ exp(N(ln 11, 0.35²))``, ``score | hard, > 0 ~ exp(N(ln 6.5, 0.45²))``,

  so the zero share at the base mix is exactly ``zero_share`` when ``z = 0``. ``hour(t)`` is the
  fractional UTC hour of the row's timestamp; ``weekend(t)`` is 1 on Saturdays and Sundays (UTC).
  The share of hard queries at time ``t`` is

  ``h(t) = hard_share + mix_daily_amplitude * cos(2π (hour(t) - 3) / 24)
  + mix_weekend_shift * weekend(t) + drift_strength * drift_level(t)``

  (the drift term only in ``drift_segments``), so the expected share of exact zeros at ``t`` is
  ``p0_easy(t) + ZERO_GAP * h(t)``. Validation keeps ``h`` and both ``p0`` in [0, 1] at every
  ``t`` (see :func:`with_seasonality`, :func:`diurnal`, :func:`strong_seasonality` for presets
  of the cycle). Traffic per hour is Poisson with mean

  ``scores_per_hour * (1 + volume_daily_amplitude * cos(2π (hour - 14) / 24))
  * (volume_weekend_factor if weekend else 1) / ((5 + 2 * volume_weekend_factor) / 7)``,

  i.e. a daily peak at 14:00 UTC, quieter weekends, and a weekly mean of ``scores_per_hour``.
  Timestamps are uniform within the hour. Covariate shift (drift) is *only* a change of the mix:
  the score model per query type never changes.

* **outcomes**: a FIXED golden set of ``golden_set_size`` labelled queries (``"q0001"``, ...),
  evaluated ``evaluations_per_day`` times a day from ``evaluation_hour`` (UTC) on, each run spread
  over 15 minutes; a share ``repeat_share`` of the queries is evaluated a second time in the same
  run (15-20 minutes after it starts) so that consumers must average by query id. The outcome of
  query ``q`` at a run at time ``t`` is

  ``clip(theta_q - drop_q * decay_level(t) + eps, 0, 1)``, ``theta_q ~ Beta`` with mean
  ``quality_mean`` and sd ``quality_sd`` (between queries), ``eps ~ N(0, evaluation_noise_sd²)``
  (between evaluations), ``drop_q ~ N(decay_size, (decay_spread * decay_size)²)``.

  Every query of a run uses the level at the run's *start* (``evaluation_hour`` + k * 24 h /
  ``evaluations_per_day``), so a decay whose onset falls at any hour or minute takes effect from
  the first run that starts at or after it.
  ``decay_size`` is the mean drop *before* clipping; clipping at 0 makes the realised mean drop
  slightly smaller (a few per mille of it at the defaults). Because the golden set is fixed, drift
  leaves outcomes untouched: under covariate shift the paired difference is exactly zero in
  expectation (the outcomes are the very same numbers as in the stationary world with that seed).

Time. ``drift_start`` and ``decay_start`` are offsets from the world's *origin* (by default the
``start`` of the span generated). ``drift_level`` / ``decay_level`` are 0 before the start, then 1
(abrupt) or a linear ramp to 1 over ``*_ramp`` (gradual). Timestamps are ``datetime64[us]`` in UTC;
naive ``datetime`` arguments are taken as UTC.

Feeds. Both logs are drawn in full and then thinned, so a feed setting never changes a draw.
Score rows at or after ``origin + scores_stop`` are dropped (a dead feed; ``None``: never), and
so are those in ``[origin + a, origin + b)`` when ``scores_outage = (a, b)`` (the volume
collapses to zero, then recovers at ``b`` with the world it would have had). Outcome rows at or
after ``origin + outcomes_stop`` are dropped; a run in progress at the stop keeps only the rows
logged before it (a partial run, as a real feed dying mid-run leaves).

Randomness. A world is a function of (scenario, origin, seed): every whole UTC day is generated from
its own stream ``SeedSequence(seed, spawn_key=(stream, day_since_epoch))`` and the golden set from
``spawn_key=(GOLDEN,)``, then cropped to ``[start, end)``. Two spans of one world therefore agree
exactly where they overlap, and the golden-set qualities do not depend on the span. A
``numpy.random.Generator`` passed as ``rng`` is consumed once to draw the world's seed. The
seasonality of the zero share and the feed settings use no randomness of their own: at their
defaults (0, 0, None, None, None) every world is the same, bit for bit, as before they existed.

True PSI. Outside the feeds the score distribution at any time is a point mass at 0 plus the
two lognormals, with masses set by ``h(t)`` and ``p0(t)``; over a span it is the same mixture
with volume-weighted masses. :func:`score_mixture` integrates them (exact to rounding),
:func:`true_psi` is the population PSI of one such distribution against a reference span on
the reference's decile bins (Monte Carlo as a fallback and cross-check), and
:func:`edge_strength` finds by root finding the ``drift_strength`` whose true PSI equals a
tolerance, to put a world exactly at the edge of the drift test's null (PSI <= tolerance);
:func:`psi_crossing` dates when a trailing window's true PSI first reaches a level (e.g. when a
gradual drift crosses twice the tolerance).

Generation is pure numpy; only :func:`write_world` touches parquet (through ``monitor.sources``);
the true-PSI helpers use scipy (``ndtr``, ``brentq``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from monitor.errors import ConfigError, StatsInputError

__all__ = [
    "EDGE_ORIGIN",
    "LOCALES_20",
    "LOCALE_WEIGHTS_20",
    "SCENARIOS",
    "OutcomeLog",
    "Scenario",
    "ScoreLog",
    "ScoreMixture",
    "World",
    "at_edge",
    "config_text",
    "diurnal",
    "edge_strength",
    "generate_outcomes",
    "generate_scores",
    "golden_qualities",
    "psi_crossing",
    "score_mixture",
    "split_by_day",
    "strong_seasonality",
    "true_psi",
    "with_seasonality",
    "write_world",
]

DriftKind = Literal["none", "abrupt", "gradual"]
TimeLike: TypeAlias = datetime | np.datetime64
RngLike: TypeAlias = np.random.Generator | np.random.SeedSequence | int

#: Difference between the zero-score probabilities of hard and easy queries.
ZERO_GAP = 0.20
#: Lognormal (log-mean, log-sd) of the positive top-1 score of easy and of hard queries.
EASY_LOGNORMAL = (math.log(11.0), 0.35)
HARD_LOGNORMAL = (math.log(6.5), 0.45)
#: Hour (UTC) of the daily traffic peak and of the daily hard-query peak.
VOLUME_PEAK_HOUR = 14.0
MIX_PEAK_HOUR = 3.0
#: Length of an evaluation run, and the window in which repeated evaluations happen.
RUN_LENGTH = timedelta(minutes=15)
REPEAT_LENGTH = timedelta(minutes=5)

_US_PER_HOUR = 3_600_000_000
_US_PER_DAY = 24 * _US_PER_HOUR
_DRIFT_KINDS = ("none", "abrupt", "gradual")
# Stream ids in the seed's spawn key; never renumber them (it would change every world).
_STREAM_SCORES = 0
_STREAM_OUTCOMES = 1
_STREAM_GOLDEN = 2


@dataclass(frozen=True, slots=True)
class Scenario:
    """A simulated world: how its score log and its golden-set outcomes behave over time.

    See the module docstring for the model. Every field is validated at construction; all
    problems are reported together in one :class:`~monitor.errors.ConfigError`.
    Change the effect size with :meth:`with_effect` (or ``dataclasses.replace``).
    """

    name: str
    # drift: covariate shift of the query mix towards hard queries
    drift_kind: DriftKind = "none"
    drift_start: timedelta | None = None
    drift_ramp: timedelta = timedelta(0)
    drift_strength: float = 0.0
    drift_segments: tuple[str, ...] | None = None
    # decay: per-query outcomes drop on the fixed golden set
    decay_start: timedelta | None = None
    decay_ramp: timedelta = timedelta(0)
    decay_size: float = 0.0
    decay_spread: float = 0.5
    decay_segments: tuple[str, ...] | None = None
    # golden set and its evaluations
    golden_set_size: int = 300
    quality_mean: float = 0.55
    quality_sd: float = 0.22
    evaluation_noise_sd: float = 0.02
    evaluations_per_day: int = 1
    evaluation_hour: int = 2
    repeat_share: float = 0.02
    # traffic and score distribution
    scores_per_hour: float = 2000.0
    zero_share: float = 0.20
    hard_share: float = 0.25
    volume_daily_amplitude: float = 0.5
    volume_weekend_factor: float = 0.75
    mix_daily_amplitude: float = 0.03
    mix_weekend_shift: float = 0.01
    # seasonality of the zero-score probability (both query types); 0 = none
    zero_daily_amplitude: float = 0.0
    zero_weekend_shift: float = 0.0
    # feeds: offsets from origin after which a log is empty (None = never), and a score outage
    scores_stop: timedelta | None = None
    outcomes_stop: timedelta | None = None
    scores_outage: tuple[timedelta, timedelta] | None = None
    # segments (e.g. locales); () means the logs carry no segment column
    segments: tuple[str, ...] = ()
    segment_weights: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        problems = _scenario_problems(self)
        if problems:
            raise ConfigError(problems, source=f"Scenario {self.name!r}")

    @property
    def has_segments(self) -> bool:
        """Whether the logs carry a ``segment`` column."""
        return bool(self.segments)

    def with_effect(
        self, *, drift_strength: float | None = None, decay_size: float | None = None
    ) -> Scenario:
        """This scenario with another effect size (``None`` keeps the current one).

        ``drift_strength = 0`` or ``decay_size = 0`` gives the matching null world with the same
        timing, which the benchmark uses to measure false alarms.
        """
        return dataclasses.replace(
            self,
            drift_strength=self.drift_strength if drift_strength is None else drift_strength,
            decay_size=self.decay_size if decay_size is None else decay_size,
        )

    def drift_level(self, elapsed: npt.ArrayLike | timedelta) -> npt.NDArray[np.float64]:
        """Share of ``drift_strength`` in effect ``elapsed`` (timedelta64/timedelta) after origin.

        0 before ``drift_start``; then 1 (abrupt) or ``min(1, (elapsed - drift_start) / ramp)``.
        """
        return _level(self.drift_start, self.drift_ramp, _elapsed_us(elapsed))

    def decay_level(self, elapsed: npt.ArrayLike | timedelta) -> npt.NDArray[np.float64]:
        """Share of ``decay_size`` in effect ``elapsed`` after origin (as :meth:`drift_level`)."""
        return _level(self.decay_start, self.decay_ramp, _elapsed_us(elapsed))


@dataclass(frozen=True, slots=True)
class ScoreLog:
    """Top-1 scores: ``timestamps`` (datetime64[us], UTC, sorted), ``scores`` (float64, >= 0)."""

    timestamps: npt.NDArray[np.datetime64]
    scores: npt.NDArray[np.float64]
    segments: npt.NDArray[np.str_] | None

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def columns(self) -> dict[str, np.ndarray]:
        """The columns as written to parquet: ``timestamp``, ``score`` [, ``segment``]."""
        cols: dict[str, np.ndarray] = {"timestamp": self.timestamps, "score": self.scores}
        if self.segments is not None:
            cols["segment"] = self.segments
        return cols


@dataclass(frozen=True, slots=True)
class OutcomeLog:
    """Golden-set evaluations: ``timestamps`` (sorted), ``query_ids`` ("q0001"...), ``outcomes``.

    ``outcomes`` are float64 in [0, 1] (an nDCG@10-like metric); a query may appear more than once
    in a run (``Scenario.repeat_share``).
    """

    timestamps: npt.NDArray[np.datetime64]
    query_ids: npt.NDArray[np.str_]
    outcomes: npt.NDArray[np.float64]
    segments: npt.NDArray[np.str_] | None

    def __len__(self) -> int:
        return int(self.outcomes.shape[0])

    def columns(self) -> dict[str, np.ndarray]:
        """The columns as written to parquet: timestamp, query_id, outcome [, segment]."""
        cols: dict[str, np.ndarray] = {
            "timestamp": self.timestamps,
            "query_id": self.query_ids,
            "outcome": self.outcomes,
        }
        if self.segments is not None:
            cols["segment"] = self.segments
        return cols


@dataclass(frozen=True, slots=True)
class World:
    """A world written to disk by :func:`write_world`; ``start``/``end`` are aware UTC datetimes."""

    directory: Path
    config_path: Path
    scores_path: Path
    outcomes_path: Path
    scenario: Scenario
    start: datetime
    end: datetime
    seed: int


# --------------------------------------------------------------------------------------------
# validation


def _scenario_problems(s: Scenario) -> list[str]:
    problems: list[str] = []

    def bad(field: str, constraint: str, value: object) -> None:
        problems.append(f"`{field}` must be {constraint}; got {value!r}.")

    def unit(field: str, value: float, *, closed_high: bool = False) -> None:
        ok = 0.0 <= value <= 1.0 if closed_high else 0.0 <= value < 1.0
        if not (isinstance(value, int | float) and math.isfinite(value) and ok):
            bad(field, "in [0, 1]" if closed_high else "in [0, 1)", value)

    if not s.name:
        bad("name", "a non-empty string", s.name)
    if s.drift_kind not in _DRIFT_KINDS:
        bad("drift_kind", f"one of {set(_DRIFT_KINDS)}", s.drift_kind)
    elif (s.drift_kind == "none") != (s.drift_start is None):
        bad("drift_start", "None exactly when `drift_kind` is 'none'", s.drift_start)
    if s.drift_start is not None and s.drift_start < timedelta(0):
        bad("drift_start", "a non-negative timedelta or None", s.drift_start)
    if s.drift_kind == "gradual" and s.drift_ramp <= timedelta(0):
        bad("drift_ramp", "a positive timedelta when `drift_kind` is 'gradual'", s.drift_ramp)
    if s.drift_kind != "gradual" and s.drift_ramp != timedelta(0):
        bad("drift_ramp", "timedelta(0) unless `drift_kind` is 'gradual'", s.drift_ramp)
    if s.decay_start is not None and s.decay_start < timedelta(0):
        bad("decay_start", "a non-negative timedelta or None", s.decay_start)
    if s.decay_ramp < timedelta(0):
        bad("decay_ramp", "a non-negative timedelta (0 = abrupt)", s.decay_ramp)
    unit("drift_strength", s.drift_strength)
    unit("decay_size", s.decay_size)
    if not (math.isfinite(s.decay_spread) and s.decay_spread >= 0):
        bad("decay_spread", "a finite number >= 0", s.decay_spread)
    if s.decay_start is None and s.decay_size != 0:
        bad("decay_size", "0 when `decay_start` is None", s.decay_size)
    if not (isinstance(s.golden_set_size, int) and s.golden_set_size >= 1):
        bad("golden_set_size", "an integer >= 1", s.golden_set_size)
    if not (0.0 < s.quality_mean < 1.0):
        bad("quality_mean", "in (0, 1)", s.quality_mean)
    elif not (0.0 < s.quality_sd**2 < s.quality_mean * (1 - s.quality_mean)):
        bad(
            "quality_sd",
            f"in (0, {math.sqrt(s.quality_mean * (1 - s.quality_mean)):.4g}) "
            "(a Beta distribution with mean `quality_mean`)",
            s.quality_sd,
        )
    if not (math.isfinite(s.evaluation_noise_sd) and s.evaluation_noise_sd >= 0):
        bad("evaluation_noise_sd", "a finite number >= 0", s.evaluation_noise_sd)
    if not (isinstance(s.evaluations_per_day, int) and 1 <= s.evaluations_per_day <= 24):
        bad("evaluations_per_day", "an integer in [1, 24]", s.evaluations_per_day)
    if not (isinstance(s.evaluation_hour, int) and 0 <= s.evaluation_hour <= 23):
        bad("evaluation_hour", "an integer in [0, 23]", s.evaluation_hour)
    unit("repeat_share", s.repeat_share, closed_high=True)
    if not (math.isfinite(s.scores_per_hour) and s.scores_per_hour > 0):
        bad("scores_per_hour", "a finite number > 0", s.scores_per_hour)
    unit("hard_share", s.hard_share)
    lo, hi = s.hard_share * ZERO_GAP, 1.0 - (1.0 - s.hard_share) * ZERO_GAP
    if not (lo <= s.zero_share <= hi):
        bad(
            "zero_share",
            f"in [{lo:.4g}, {hi:.4g}] (hard_share * 0.2, 1 - easy share * 0.2)",
            s.zero_share,
        )
    unit("volume_daily_amplitude", s.volume_daily_amplitude)
    if not (0.0 < s.volume_weekend_factor <= 10.0):
        bad("volume_weekend_factor", "in (0, 10]", s.volume_weekend_factor)
    peak = s.hard_share + abs(s.mix_daily_amplitude) + abs(s.mix_weekend_shift) + s.drift_strength
    trough = s.hard_share - abs(s.mix_daily_amplitude) - abs(s.mix_weekend_shift)
    if not (trough >= 0.0 and peak <= 1.0):
        bad(
            "hard_share",
            "such that the hard-query share, seasonality and drift included, stays in [0, 1] "
            f"(range [{trough:.4g}, {peak:.4g}])",
            s.hard_share,
        )
    zero_ok = True
    for field, shift in (
        ("zero_daily_amplitude", s.zero_daily_amplitude),
        ("zero_weekend_shift", s.zero_weekend_shift),
    ):
        if not (isinstance(shift, int | float) and math.isfinite(shift)):
            bad(field, "a finite number", shift)
            zero_ok = False
    if zero_ok:
        p0_easy = s.zero_share - s.hard_share * ZERO_GAP
        z_lo = p0_easy - abs(s.zero_daily_amplitude) + min(s.zero_weekend_shift, 0.0)
        z_hi = p0_easy + ZERO_GAP + abs(s.zero_daily_amplitude) + max(s.zero_weekend_shift, 0.0)
        if not (z_lo >= 0.0 and z_hi <= 1.0):
            bad(
                "zero_daily_amplitude",
                "such that the zero-score probabilities of easy and hard queries, seasonality "
                f"included, stay in [0, 1] (range [{z_lo:.4g}, {z_hi:.4g}] with "
                f"`zero_weekend_shift` {s.zero_weekend_shift!r})",
                s.zero_daily_amplitude,
            )
    for field, stop in (("scores_stop", s.scores_stop), ("outcomes_stop", s.outcomes_stop)):
        if stop is not None and not (isinstance(stop, timedelta) and stop >= timedelta(0)):
            bad(field, "a non-negative timedelta or None", stop)
    outage = s.scores_outage
    if outage is not None and not (
        isinstance(outage, tuple)
        and len(outage) == 2
        and all(isinstance(t, timedelta) for t in outage)
        and timedelta(0) <= outage[0] < outage[1]
    ):
        bad(
            "scores_outage",
            "None or a (start, end) pair of timedeltas with 0 <= start < end",
            outage,
        )
    if len(set(s.segments)) != len(s.segments) or not all(s.segments):
        bad("segments", "distinct non-empty names", s.segments)
    if s.segment_weights and (
        len(s.segment_weights) != len(s.segments)
        or not all(math.isfinite(w) and w > 0 for w in s.segment_weights)
    ):
        bad("segment_weights", "() or one positive weight per segment", s.segment_weights)
    for field, chosen in (
        ("drift_segments", s.drift_segments),
        ("decay_segments", s.decay_segments),
    ):
        if chosen is not None and not set(chosen) <= set(s.segments):
            bad(field, f"None or a subset of `segments` {s.segments}", chosen)
    return problems


def with_seasonality(
    base: Scenario,
    *,
    day: float,
    night: float,
    mix_weekend_shift: float,
    zero_weekend_shift: float = 0.0,
    name: str | None = None,
) -> Scenario:
    """``base`` with a weekday zero-score share of ``day`` at 15:00 UTC and ``night`` at 03:00 UTC.

    Sets ``zero_share = (day + night) / 2`` and ``zero_daily_amplitude = (night - day) / 2 -
    ZERO_GAP * mix_daily_amplitude`` (the mix cycle of ``base`` moves the zero share too, by
    ``ZERO_GAP`` per unit of hard share), so the expected share of exact zeros at weekday hour
    ``x`` is ``(day + night) / 2 + (night - day) / 2 * cos(2π (x - 3) / 24)`` outside a drift.
    On weekends it is higher by ``zero_weekend_shift + ZERO_GAP * mix_weekend_shift``; the
    weekend mix shift also moves the positive scores (more hard queries). ``name`` defaults to
    ``f"{base.name}_seasonal"``.
    """
    return dataclasses.replace(
        base,
        name=f"{base.name}_seasonal" if name is None else name,
        zero_share=(day + night) / 2,
        zero_daily_amplitude=(night - day) / 2 - ZERO_GAP * base.mix_daily_amplitude,
        zero_weekend_shift=zero_weekend_shift,
        mix_weekend_shift=mix_weekend_shift,
    )


def diurnal(base: Scenario, *, name: str | None = None) -> Scenario:
    """``base`` with issue 9's first world: zero share 10 % by day and 30 % at night.

    The weekend hard-query share is 0.05 higher (``mix_weekend_shift``).

    See :func:`with_seasonality`; ``name`` defaults to ``f"{base.name}_diurnal"``.
    """
    return with_seasonality(
        base,
        day=0.10,
        night=0.30,
        mix_weekend_shift=0.05,
        name=f"{base.name}_diurnal" if name is None else name,
    )


def strong_seasonality(base: Scenario, *, name: str | None = None) -> Scenario:
    """``base`` with a strong daily and weekly cycle: zero share 5 % by day, 40 % at night.

    Weekends add 0.05 to the zero probability and 0.10 to the hard-query share (zero share
    about 12 % by day and 47 % at night). See :func:`with_seasonality`; ``name`` defaults to
    ``f"{base.name}_strong_seasonality"``.
    """
    return with_seasonality(
        base,
        day=0.05,
        night=0.40,
        mix_weekend_shift=0.10,
        zero_weekend_shift=0.05,
        name=f"{base.name}_strong_seasonality" if name is None else name,
    )


#: Twenty locales and their traffic weights (Zipf, 1/k): the largest gets 28 % of the traffic and
#: on average 83 of a 300-query golden set, the smallest 1.4 % and 4 queries (in about 31 % of
#: seeds some segment gets fewer than 2: a segment the decay side cannot decide).
LOCALES_20 = (
    "en-US", "de-DE", "fr-FR", "es-ES", "ja-JP", "pt-BR", "it-IT", "en-GB", "nl-NL", "pl-PL",
    "ko-KR", "sv-SE", "tr-TR", "zh-CN", "ru-RU", "id-ID", "cs-CZ", "da-DK", "hi-IN", "ar-SA",
)  # fmt: skip
LOCALE_WEIGHTS_20 = tuple(1.0 / k for k in range(1, len(LOCALES_20) + 1))

_STATIONARY = Scenario("stationary")
_ABRUPT_DECAY = Scenario("abrupt_decay", decay_start=timedelta(days=15), decay_size=0.04)

#: Named presets. Effects start on day 15 of a 30-day month (after a 7-day reference and a week of
#: healthy days); change their size with :meth:`Scenario.with_effect`.
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _STATIONARY,
        Scenario(
            "covariate_shift",
            drift_kind="abrupt",
            drift_start=timedelta(days=15),
            drift_strength=0.35,
        ),
        Scenario(
            "gradual_drift",
            drift_kind="gradual",
            drift_start=timedelta(days=10),
            drift_ramp=timedelta(days=10),
            drift_strength=0.35,
        ),
        _ABRUPT_DECAY,
        Scenario("subtle_decay", decay_start=timedelta(days=15), decay_size=0.015),
        Scenario(
            "drift_and_decay",
            drift_kind="abrupt",
            drift_start=timedelta(days=15),
            drift_strength=0.35,
            decay_start=timedelta(days=15),
            decay_size=0.04,
        ),
        Scenario(
            "small_golden_set", decay_start=timedelta(days=15), decay_size=0.04, golden_set_size=10
        ),
        Scenario(
            "segment_drift",
            drift_kind="abrupt",
            drift_start=timedelta(days=15),
            drift_strength=0.35,
            drift_segments=("fr",),
            segments=("en", "de", "fr"),
            segment_weights=(0.6, 0.25, 0.15),
        ),
        # issue 9's worlds
        # issue 9's first row was measured at 1,000 scores/h
        diurnal(dataclasses.replace(_STATIONARY, scores_per_hour=1000.0), name="diurnal"),
        strong_seasonality(
            dataclasses.replace(_STATIONARY, scores_per_hour=1000.0), name="strong_seasonality"
        ),
        dataclasses.replace(
            _STATIONARY, name="dead_feed", scores_stop=timedelta(days=15, hours=10)
        ),
        dataclasses.replace(
            _STATIONARY,
            name="score_outage",
            scores_outage=(timedelta(days=15, hours=2), timedelta(days=15, hours=8)),
        ),
        dataclasses.replace(_STATIONARY, name="dead_outcomes", outcomes_stop=timedelta(days=15)),
        dataclasses.replace(
            _STATIONARY, name="segments_20", segments=LOCALES_20, segment_weights=LOCALE_WEIGHTS_20
        ),
        dataclasses.replace(_ABRUPT_DECAY, name="golden_30", golden_set_size=30),
        dataclasses.replace(_ABRUPT_DECAY, name="evaluations_4", evaluations_per_day=4),
    )
}


def _utc_us(value: TimeLike, name: str) -> np.datetime64:
    """``value`` as a naive-UTC ``datetime64[us]``; naive datetimes are taken as UTC."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return np.datetime64(value, "us")
    if isinstance(value, np.datetime64) and not np.isnat(value):
        converted: np.datetime64 = value.astype("datetime64[us]")
        return converted
    raise StatsInputError(f"`{name}` must be a datetime or a numpy datetime64; got {value!r}.")


def _span(
    start: TimeLike, end: TimeLike, origin: TimeLike | None
) -> tuple[np.datetime64, np.datetime64, np.datetime64]:
    t0, t1 = _utc_us(start, "start"), _utc_us(end, "end")
    if not t0 < t1:
        raise StatsInputError(f"`end` must be after `start`; got start={t0}, end={t1}.")
    o = t0 if origin is None else _utc_us(origin, "origin")
    return t0, t1, o


def _seed_sequence(rng: RngLike) -> np.random.SeedSequence:
    if isinstance(rng, np.random.SeedSequence):
        return rng
    if isinstance(rng, np.random.Generator):
        return np.random.SeedSequence(rng.integers(0, 2**63, size=2).tolist())
    if isinstance(rng, int | np.integer) and not isinstance(rng, bool) and rng >= 0:
        return np.random.SeedSequence(int(rng))
    raise StatsInputError(
        f"`rng` must be a numpy Generator, a SeedSequence or a non-negative integer; got {rng!r}."
    )


def _stream(ss: np.random.SeedSequence, *key: int) -> np.random.Generator:
    child = np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, *key))
    return np.random.Generator(np.random.PCG64(child))


# --------------------------------------------------------------------------------------------
# time helpers


def _elapsed_us(elapsed: npt.ArrayLike | timedelta) -> npt.NDArray[np.int64]:
    if isinstance(elapsed, timedelta):
        elapsed = np.timedelta64(elapsed, "us")
    arr = np.asarray(elapsed)
    if not np.issubdtype(arr.dtype, np.timedelta64):
        raise StatsInputError(f"`elapsed` must be timedelta64 or timedelta; got dtype {arr.dtype}.")
    return arr.astype("timedelta64[us]").astype(np.int64)


def _level(
    start: timedelta | None,
    ramp: timedelta,
    elapsed_us: npt.NDArray[np.int64] | npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """0 before ``start``, then 1 (``ramp == 0``) or a linear ramp to 1 over ``ramp``."""
    if start is None:
        return np.zeros(elapsed_us.shape)
    since = (elapsed_us - _td_us(start)).astype(np.float64)
    ramp_us = _td_us(ramp)
    if ramp_us == 0:
        return (since >= 0).astype(np.float64)
    ramped: npt.NDArray[np.float64] = np.clip(since / ramp_us, 0.0, 1.0)
    return ramped


def _td_us(td: timedelta) -> int:
    return (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds


def _days(t0: np.datetime64, t1: np.datetime64) -> range:
    """Epoch-day numbers of the UTC days that intersect ``[t0, t1)``."""
    first = int(t0.astype("datetime64[D]").astype(np.int64))
    last = int((t1 - np.timedelta64(1, "us")).astype("datetime64[D]").astype(np.int64))
    return range(first, last + 1)


def _is_weekend(epoch_day: int) -> bool:
    return (epoch_day + 3) % 7 >= 5  # 1970-01-01 was a Thursday (weekday 3, Monday = 0)


def _segment_probs(s: Scenario) -> npt.NDArray[np.float64]:
    w = np.asarray(s.segment_weights or [1.0] * len(s.segments), dtype=np.float64)
    probs: npt.NDArray[np.float64] = w / w.sum()
    return probs


def _in_segments(
    codes: npt.NDArray[np.intp] | None, s: Scenario, chosen: tuple[str, ...] | None
) -> npt.NDArray[np.bool_] | bool:
    if codes is None or chosen is None:
        return True
    wanted = np.isin(np.arange(len(s.segments)), [s.segments.index(c) for c in chosen])
    return wanted[codes]


# --------------------------------------------------------------------------------------------
# scores


def _hourly_rate(s: Scenario, epoch_day: int) -> npt.NDArray[np.float64]:
    """Mean number of scores in each hour of ``epoch_day`` (evaluated at the hour's midpoint)."""
    hour = np.arange(24) + 0.5
    daily = 1.0 + s.volume_daily_amplitude * np.cos(2 * np.pi * (hour - VOLUME_PEAK_HOUR) / 24)
    weekly = s.volume_weekend_factor if _is_weekend(epoch_day) else 1.0
    norm = (5.0 + 2.0 * s.volume_weekend_factor) / 7.0
    rate: npt.NDArray[np.float64] = s.scores_per_hour * daily * weekly / norm
    return rate


def _scores_for_day(
    s: Scenario, ss: np.random.SeedSequence, epoch_day: int, origin_us: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.intp] | None]:
    """One whole UTC day of scores: (microseconds since epoch, scores, segment codes or None)."""
    rng = _stream(ss, _STREAM_SCORES, epoch_day)
    counts = rng.poisson(_hourly_rate(s, epoch_day))
    n = int(counts.sum())
    day_us = epoch_day * _US_PER_DAY
    us = np.repeat(np.arange(24, dtype=np.int64) * _US_PER_HOUR, counts)
    us += rng.integers(0, _US_PER_HOUR, size=n, dtype=np.int64)
    us.sort()
    codes = (
        rng.choice(len(s.segments), size=n, p=_segment_probs(s)).astype(np.intp)
        if s.segments
        else None
    )
    u_type, u_zero, z = rng.random(n), rng.random(n), rng.standard_normal(n)

    hour = us / _US_PER_HOUR
    hard_share = (
        s.hard_share
        + s.mix_daily_amplitude * np.cos(2 * np.pi * (hour - MIX_PEAK_HOUR) / 24)
        + (s.mix_weekend_shift if _is_weekend(epoch_day) else 0.0)
    )
    if s.drift_start is not None and s.drift_strength > 0:
        level = _level(s.drift_start, s.drift_ramp, day_us + us - origin_us)
        hard_share = hard_share + s.drift_strength * level * _in_segments(
            codes, s, s.drift_segments
        )
    hard = u_type < hard_share
    p0_easy: float | npt.NDArray[np.float64] = s.zero_share - s.hard_share * ZERO_GAP
    if s.zero_daily_amplitude or s.zero_weekend_shift:  # skipped at 0: old worlds stay bit-exact
        p0_easy = p0_easy + _zero_shift(s, hour, epoch_day)
    zero = u_zero < np.where(hard, p0_easy + ZERO_GAP, p0_easy)
    log_mu = np.where(hard, HARD_LOGNORMAL[0], EASY_LOGNORMAL[0])
    log_sd = np.where(hard, HARD_LOGNORMAL[1], EASY_LOGNORMAL[1])
    scores = np.where(zero, 0.0, np.exp(log_mu + log_sd * z))
    us = us + day_us
    logged = _scores_logged(s, us - origin_us)
    if logged is not None:  # a dead feed or an outage drops rows after every draw is made
        us, scores = us[logged], scores[logged]
        codes = None if codes is None else codes[logged]
    return us, scores, codes


def _zero_shift(
    s: Scenario, hour: npt.NDArray[np.float64], epoch_day: int
) -> npt.NDArray[np.float64]:
    """Seasonal term added to the zero-score probability of both query types."""
    shift: npt.NDArray[np.float64] = s.zero_daily_amplitude * np.cos(
        2 * np.pi * (hour - MIX_PEAK_HOUR) / 24
    ) + (s.zero_weekend_shift if _is_weekend(epoch_day) else 0.0)
    return shift


def _scores_logged(
    s: Scenario, since_origin_us: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_] | None:
    """Mask of the score rows the feed delivers (None: all), from ``scores_stop`` and the outage."""
    if s.scores_stop is None and s.scores_outage is None:
        return None
    logged = np.ones(since_origin_us.shape, dtype=np.bool_)
    if s.scores_stop is not None:
        logged &= since_origin_us < _td_us(s.scores_stop)
    if s.scores_outage is not None:
        a, b = (_td_us(t) for t in s.scores_outage)
        logged &= (since_origin_us < a) | (since_origin_us >= b)
    return logged


def generate_scores(
    scenario: Scenario,
    start: TimeLike,
    end: TimeLike,
    *,
    rng: RngLike,
    origin: TimeLike | None = None,
) -> ScoreLog:
    """The top-1 score log of ``scenario`` in ``[start, end)``.

    ``origin`` is the world's start, from which ``drift_start`` counts (default: ``start``).
    ``rng`` is a seed (int or SeedSequence: the same world for every span) or a Generator (one
    draw from it makes the seed). Whole UTC days are generated and then cropped, so spans of one
    world agree where they overlap. Cost: about 5 random draws per row.
    """
    if not isinstance(scenario, Scenario):
        raise StatsInputError(f"`scenario` must be a Scenario; got {scenario!r}.")
    t0, t1, o = _span(start, end, origin)
    ss = _seed_sequence(rng)
    lo, hi, origin_us = int(t0.astype(np.int64)), int(t1.astype(np.int64)), int(o.astype(np.int64))
    parts_us, parts_scores, parts_codes = [], [], []
    for day in _days(t0, t1):
        us, scores, codes = _scores_for_day(scenario, ss, day, origin_us)
        keep = slice(np.searchsorted(us, lo, side="left"), np.searchsorted(us, hi, side="left"))
        parts_us.append(us[keep])
        parts_scores.append(scores[keep])
        if codes is not None:
            parts_codes.append(codes[keep])
    segments = (
        np.asarray(scenario.segments)[np.concatenate(parts_codes)] if scenario.segments else None
    )
    return ScoreLog(
        timestamps=np.concatenate(parts_us).astype("datetime64[us]"),
        scores=np.concatenate(parts_scores),
        segments=segments,
    )


# --------------------------------------------------------------------------------------------
# outcomes


def _beta_params(mean: float, sd: float) -> tuple[float, float]:
    kappa = mean * (1 - mean) / sd**2 - 1
    return mean * kappa, (1 - mean) * kappa


def golden_qualities(
    scenario: Scenario, *, rng: RngLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.intp] | None]:
    """The fixed golden set of a world: (``theta``, ``drop``, segment codes or None), one per query.

    ``theta_q ~ Beta(a, b)`` with mean ``quality_mean`` and sd ``quality_sd``;
    ``drop_q = decay_size * (1 + decay_spread * z_q)``, ``z_q ~ N(0, 1)`` (zero outside
    ``decay_segments``). Depends only on the scenario and the seed, never on a time span.
    """
    ss = _seed_sequence(rng)
    g = _stream(ss, _STREAM_GOLDEN)
    n = scenario.golden_set_size
    theta = g.beta(*_beta_params(scenario.quality_mean, scenario.quality_sd), size=n)
    z = g.standard_normal(n)
    codes = (
        g.choice(len(scenario.segments), size=n, p=_segment_probs(scenario)).astype(np.intp)
        if scenario.segments
        else None
    )
    drop = scenario.decay_size * (1.0 + scenario.decay_spread * z)
    drop = drop * _in_segments(codes, scenario, scenario.decay_segments)
    return theta, drop, codes


def _query_ids(n: int) -> npt.NDArray[np.str_]:
    return np.asarray([f"q{i:04d}" for i in range(1, n + 1)])


def generate_outcomes(
    scenario: Scenario,
    start: TimeLike,
    end: TimeLike,
    *,
    rng: RngLike,
    origin: TimeLike | None = None,
) -> OutcomeLog:
    """The golden-set evaluations of ``scenario`` whose timestamps fall in ``[start, end)``.

    A run at time ``t`` (``evaluation_hour`` + k * 24 h / ``evaluations_per_day``) uses
    ``decay_level(t - origin)`` for every query of the run. Same seed conventions as
    :func:`generate_scores`; the golden set is :func:`golden_qualities`.
    """
    if not isinstance(scenario, Scenario):
        raise StatsInputError(f"`scenario` must be a Scenario; got {scenario!r}.")
    t0, t1, o = _span(start, end, origin)
    ss = _seed_sequence(rng)
    theta, drop, codes = golden_qualities(scenario, rng=ss)
    n, runs = scenario.golden_set_size, scenario.evaluations_per_day
    run_offsets = (
        scenario.evaluation_hour * _US_PER_HOUR
        + np.arange(runs, dtype=np.int64) * _US_PER_DAY // runs
    )
    lo, hi, origin_us = int(t0.astype(np.int64)), int(t1.astype(np.int64)), int(o.astype(np.int64))
    run_us, repeat_us = _td_us(RUN_LENGTH), _td_us(REPEAT_LENGTH)
    parts_us, parts_q, parts_y = [], [], []
    for day in _days(t0, t1):
        g = _stream(ss, _STREAM_OUTCOMES, day)
        # fixed-size draws per day, so the stream layout never depends on the span
        first_at = g.integers(0, run_us, size=(runs, n), dtype=np.int64)
        first_eps = g.standard_normal((runs, n))
        repeated = g.random((runs, n)) < scenario.repeat_share
        again_at = run_us + g.integers(0, repeat_us, size=(runs, n), dtype=np.int64)
        again_eps = g.standard_normal((runs, n))
        starts = day * _US_PER_DAY + run_offsets  # (runs,)
        level = _level(scenario.decay_start, scenario.decay_ramp, starts - origin_us)
        quality = theta[None, :] - level[:, None] * drop[None, :]
        query = np.broadcast_to(np.arange(n), (runs, n))
        us = np.concatenate(
            [(starts[:, None] + first_at).ravel(), (starts[:, None] + again_at)[repeated]]
        )
        q = np.concatenate([query.ravel(), query[repeated]])
        y = np.concatenate(
            [
                (quality + scenario.evaluation_noise_sd * first_eps).ravel(),
                (quality + scenario.evaluation_noise_sd * again_eps)[repeated],
            ]
        )
        order = np.argsort(us, kind="stable")
        us, q, y = us[order], q[order], y[order]
        keep = (us >= lo) & (us < hi)
        if scenario.outcomes_stop is not None:  # the outcome feed dies: rows from then on vanish
            keep &= us - origin_us < _td_us(scenario.outcomes_stop)
        parts_us.append(us[keep])
        parts_q.append(q[keep])
        parts_y.append(y[keep])
    q_all = np.concatenate(parts_q).astype(np.intp)
    return OutcomeLog(
        timestamps=np.concatenate(parts_us).astype("datetime64[us]"),
        query_ids=_query_ids(n)[q_all],
        outcomes=np.clip(np.concatenate(parts_y), 0.0, 1.0),
        segments=None if codes is None else np.asarray(scenario.segments)[codes[q_all]],
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


# --------------------------------------------------------------------------------------------
# files


def _toml_string(value: str) -> str:
    # JSON string escapes (\", \\, \n, \uXXXX) are valid TOML basic-string escapes.
    return json.dumps(value, ensure_ascii=False)


def config_text(
    scenario: Scenario, *, monitor_name: str, schedule: str, listen: str, seed: int, extra: str
) -> str:
    """The TOML configuration of a world written by ``write_world`` (``extra`` appended)."""
    lines = [
        "[server]",
        f"listen = {_toml_string(listen)}",
        'state_dir = "state"',
        "",
        "[[monitors]]",
        f"name = {_toml_string(monitor_name)}",
        f"schedule = {_toml_string(schedule)}",
        f"seed = {seed}",
        'scores.path = "scores"',
        'scores.timestamp_column = "timestamp"',
        'scores.score_column = "score"',
    ]
    if scenario.has_segments:
        lines.append('scores.segment_column = "segment"')
    lines += [
        'outcomes.path = "outcomes"',
        'outcomes.timestamp_column = "timestamp"',
        'outcomes.query_column = "query_id"',
        'outcomes.outcome_column = "outcome"',
    ]
    if scenario.has_segments:
        lines.append('outcomes.segment_column = "segment"')
    lines += ['windows.current = "1d"', 'windows.reference = "7d"']
    text = "\n".join(lines) + "\n"
    if extra:
        text += extra if extra.endswith("\n") else extra + "\n"
    return text


def split_by_day(
    timestamps: npt.NDArray[np.datetime64], columns: dict[str, np.ndarray]
) -> Sequence[tuple[str, dict[str, np.ndarray]]]:
    """Rows (sorted by time) cut into one piece per UTC day, as (``YYYY-MM-DD``, columns)."""
    days = timestamps.astype("datetime64[D]")
    if days.size == 0:
        return []
    cuts = np.flatnonzero(days[1:] != days[:-1]) + 1
    bounds = np.concatenate([[0], cuts, [days.size]])
    return [
        (str(days[a]), {k: v[a:b] for k, v in columns.items()})
        for a, b in itertools.pairwise(bounds.tolist())
    ]


def write_world(
    directory: str | Path,
    scenario: Scenario,
    *,
    start: TimeLike,
    end: TimeLike,
    seed: int,
    monitor_name: str = "demo",
    schedule: str = "1h",
    listen: str = "127.0.0.1:9464",
    extra_monitor_toml: str = "",
) -> World:
    """Write the world ``(scenario, origin=start, seed)`` over ``[start, end)`` under ``directory``.

    Layout: ``scores/date=YYYY-MM-DD/part-0.parquet`` (timestamp, score[, segment]),
    ``outcomes/date=YYYY-MM-DD/part-0.parquet`` (timestamp, query_id, outcome[, segment]), one file
    per UTC day that has rows, and ``monitor.toml`` (paths relative to it; ``seed`` is the world's
    seed; ``extra_monitor_toml`` is appended verbatim inside the ``[[monitors]]`` table).
    Existing files at those paths are replaced atomically (write, then rename), so a demo may
    call this again with a later ``end`` to let its world grow under a running daemon: the
    world is deterministic, so earlier days are rewritten identically.
    """
    if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise StatsInputError(f"`seed` must be a non-negative integer; got {seed!r}.")
    # Imported here so that generating worlds in memory (the benchmark) never loads pyarrow.
    from monitor.sources import write_parquet

    root = Path(directory)
    t0, t1, _ = _span(start, end, None)
    scores = generate_scores(scenario, t0, t1, rng=seed)
    outcomes = generate_outcomes(scenario, t0, t1, rng=seed)
    for name, log in (("scores", scores), ("outcomes", outcomes)):
        for date, cols in split_by_day(log.timestamps, log.columns()):
            target = root / name / f"date={date}" / "part-0.parquet"
            # Write beside and rename, so a daemon reading while a demo rewrites its world never
            # sees half a file (readers skip names that start with a dot, as pyarrow does).
            hidden = target.with_name(f".{target.name}.tmp")
            write_parquet(hidden, cols)
            os.replace(hidden, target)
    config_path = root / "monitor.toml"
    config_path.write_text(
        config_text(
            scenario,
            monitor_name=monitor_name,
            schedule=schedule,
            listen=listen,
            seed=seed,
            extra=extra_monitor_toml,
        )
    )
    return World(
        directory=root,
        config_path=config_path,
        scores_path=root / "scores",
        outcomes_path=root / "outcomes",
        scenario=scenario,
        start=t0.astype(datetime).replace(tzinfo=UTC),
        end=t1.astype(datetime).replace(tzinfo=UTC),
        seed=seed,
    )
