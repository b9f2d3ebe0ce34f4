"""Scenarios: what a simulated world is (``Scenario``, its presets ``SCENARIOS``), the logs
it produces, and its drift and decay levels over time. The model is in :mod:`monitor.simulate`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from monitor.errors import ConfigError, StatsInputError

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
    # flaky queries: the first round(flaky_share * golden_set_size) find their relevant
    # document only in a share flaky_find of the runs (outcome 0 otherwise): skewed run noise
    flaky_share: float = 0.0
    flaky_find: float = 0.1
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
    unit("flaky_share", s.flaky_share, closed_high=True)
    if not (0.0 < s.flaky_find <= 1.0):
        bad("flaky_find", "in (0, 1]", s.flaky_find)
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
