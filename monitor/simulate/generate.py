"""Drawing a world's logs: the score log and the golden set's outcomes, day by day from seeded
streams (the randomness contract is in :mod:`monitor.simulate`)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from monitor.errors import StatsInputError
from monitor.simulate.scenario import (
    _STREAM_GOLDEN,
    _STREAM_OUTCOMES,
    _STREAM_SCORES,
    _US_PER_DAY,
    _US_PER_HOUR,
    EASY_LOGNORMAL,
    HARD_LOGNORMAL,
    MIX_PEAK_HOUR,
    REPEAT_LENGTH,
    RUN_LENGTH,
    VOLUME_PEAK_HOUR,
    ZERO_GAP,
    OutcomeLog,
    RngLike,
    Scenario,
    ScoreLog,
    TimeLike,
    _days,
    _in_segments,
    _is_weekend,
    _level,
    _segment_probs,
    _td_us,
)


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
    flaky = round(scenario.flaky_share * n)
    run_offsets = (
        scenario.evaluation_hour * _US_PER_HOUR
        + np.arange(runs, dtype=np.int64) * _US_PER_DAY // runs
    )
    lo, hi, origin_us = int(t0.astype(np.int64)), int(t1.astype(np.int64)), int(o.astype(np.int64))
    run_us, repeat_us = _td_us(RUN_LENGTH), _td_us(REPEAT_LENGTH)
    parts_us, parts_q, parts_y = [], [], []
    days = _days(t0, t1)
    # from the day before: a day's later runs (24 a day from 02:00) and repeats land on the
    # next day, and a span starting there once lost them (two spans of a world disagreed)
    for day in range(days.start - 1, days.stop):
        g = _stream(ss, _STREAM_OUTCOMES, day)
        # fixed-size draws per day, so the stream layout never depends on the span
        first_at = g.integers(0, run_us, size=(runs, n), dtype=np.int64)
        first_eps = g.standard_normal((runs, n))
        repeated = g.random((runs, n)) < scenario.repeat_share
        again_at = run_us + g.integers(0, repeat_us, size=(runs, n), dtype=np.int64)
        again_eps = g.standard_normal((runs, n))
        # drawn last, and only for flaky worlds: every other world's streams are unchanged
        missed = np.zeros((runs, n), dtype=bool)
        if flaky:
            missed[:, :flaky] = g.random((runs, flaky)) >= scenario.flaky_find
        starts = day * _US_PER_DAY + run_offsets  # (runs,)
        level = _level(scenario.decay_start, scenario.decay_ramp, starts - origin_us)
        quality = theta[None, :] - level[:, None] * drop[None, :]
        query = np.broadcast_to(np.arange(n), (runs, n))
        us = np.concatenate(
            [(starts[:, None] + first_at).ravel(), (starts[:, None] + again_at)[repeated]]
        )
        q = np.concatenate([query.ravel(), query[repeated]])
        first_y = np.where(missed, 0.0, quality + scenario.evaluation_noise_sd * first_eps)
        again_y = np.where(missed, 0.0, quality + scenario.evaluation_noise_sd * again_eps)
        y = np.concatenate([first_y.ravel(), again_y[repeated]])
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
