"""The world simulator: determinism, the score and outcome models, and the scenarios' claims."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from monitor.errors import ConfigError, StatsInputError
from monitor.simulate import (
    LOCALE_WEIGHTS_20,
    LOCALES_20,
    MIX_PEAK_HOUR,
    SCENARIOS,
    ZERO_GAP,
    OutcomeLog,
    Scenario,
    ScoreLog,
    at_edge,
    diurnal,
    edge_strength,
    generate_outcomes,
    generate_scores,
    golden_qualities,
    psi_crossing,
    score_mixture,
    strong_seasonality,
    true_psi,
    with_seasonality,
    write_world,
)

START = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday
DAY = timedelta(days=1)


def _day(log: ScoreLog | OutcomeLog, day: int) -> npt.NDArray[np.bool_]:
    """Mask of the rows of ``log`` on day ``day`` (0 = START's day)."""
    lo = np.datetime64(START.replace(tzinfo=None) + day * DAY, "us")
    return (log.timestamps >= lo) & (log.timestamps < lo + np.timedelta64(1, "D"))


def _per_query_mean(log: OutcomeLog, day: int) -> tuple[npt.NDArray[np.str_], npt.NDArray[Any]]:
    """Per-query mean outcome of day ``day`` (averages repeated evaluations), sorted by query id."""
    mask = _day(log, day)
    ids, inverse = np.unique(log.query_ids[mask], return_inverse=True)
    sums = np.bincount(inverse, weights=log.outcomes[mask])
    return ids, sums / np.bincount(inverse)


def _paired(log: OutcomeLog, before: int, after: int) -> npt.NDArray[np.float64]:
    ids_a, a = _per_query_mean(log, before)
    ids_b, b = _per_query_mean(log, after)
    assert np.array_equal(ids_a, ids_b)
    d: npt.NDArray[np.float64] = b - a
    return d


def _psi(ref: npt.NDArray[np.float64], cur: npt.NDArray[np.float64]) -> tuple[float, int]:
    """PSI on 10 reference-quantile bins (unique edges, right-closed, open ends, +0.5 smoothing)."""
    edges = np.unique(np.quantile(ref, np.arange(1, 10) / 10))
    bins = edges.size + 1
    r = np.bincount(np.searchsorted(edges, ref, side="left"), minlength=bins) + 0.5
    c = np.bincount(np.searchsorted(edges, cur, side="left"), minlength=bins) + 0.5
    p, q = c / c.sum(), r / r.sum()
    return float(np.sum((p - q) * np.log(p / q))), bins


def _hourly_excess_psi(log: ScoreLog, day: int) -> npt.NDArray[np.float64]:
    """PSI of each hour of ``day`` against the 7 days before it, minus the noise floor."""
    ref = log.scores[
        np.logical_or.reduce([_day(log, d) for d in range(day - 7, day)])  # 7 whole days
    ]
    out = []
    for hour in range(24):
        lo = np.datetime64(START.replace(tzinfo=None) + day * DAY + hour * timedelta(hours=1), "us")
        cur = log.scores[(log.timestamps >= lo) & (log.timestamps < lo + np.timedelta64(1, "h"))]
        psi, bins = _psi(ref, cur)
        out.append(psi - (bins - 1) * (1 / ref.size + 1 / cur.size))
    return np.asarray(out)


@pytest.fixture(scope="module")
def stationary_scores() -> ScoreLog:
    return generate_scores(SCENARIOS["stationary"], START, START + 14 * DAY, rng=7)


# ----------------------------------------------------------------------------------------------
# input validation


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": ""}, "`name` must be a non-empty string; got ''."),
        ({"drift_kind": "sudden"}, "`drift_kind` must be one of"),
        (
            {"drift_kind": "abrupt"},
            "`drift_start` must be None exactly when `drift_kind` is 'none'",
        ),
        ({"drift_start": DAY}, "`drift_start` must be None exactly when"),
        (
            {"drift_kind": "abrupt", "drift_start": -DAY},
            "`drift_start` must be a non-negative timedelta or None",
        ),
        (
            {"drift_kind": "gradual", "drift_start": DAY},
            "`drift_ramp` must be a positive timedelta when `drift_kind` is 'gradual'",
        ),
        ({"drift_ramp": DAY}, "`drift_ramp` must be timedelta(0) unless `drift_kind` is 'gradual'"),
        ({"decay_start": -DAY}, "`decay_start` must be a non-negative timedelta or None"),
        ({"decay_ramp": -DAY}, "`decay_ramp` must be a non-negative timedelta (0 = abrupt)"),
        ({"drift_strength": 1.5}, "`drift_strength` must be in [0, 1); got 1.5."),
        ({"decay_size": float("nan"), "decay_start": DAY}, "`decay_size` must be in [0, 1)"),
        ({"decay_size": 0.04}, "`decay_size` must be 0 when `decay_start` is None; got 0.04."),
        ({"decay_spread": -1.0}, "`decay_spread` must be a finite number >= 0; got -1.0."),
        ({"golden_set_size": 0}, "`golden_set_size` must be an integer >= 1; got 0."),
        ({"quality_mean": 1.0}, "`quality_mean` must be in (0, 1); got 1.0."),
        ({"quality_sd": 0.6}, "`quality_sd` must be in (0, 0.4975)"),
        ({"evaluation_noise_sd": -0.1}, "`evaluation_noise_sd` must be a finite number >= 0"),
        ({"evaluations_per_day": 0}, "`evaluations_per_day` must be an integer in [1, 24]; got 0."),
        ({"evaluation_hour": 24}, "`evaluation_hour` must be an integer in [0, 23]; got 24."),
        ({"repeat_share": 2.0}, "`repeat_share` must be in [0, 1]; got 2.0."),
        ({"scores_per_hour": 0.0}, "`scores_per_hour` must be a finite number > 0; got 0.0."),
        ({"zero_share": 0.01}, "`zero_share` must be in [0.05, 0.85]"),
        ({"volume_daily_amplitude": 1.0}, "`volume_daily_amplitude` must be in [0, 1); got 1.0."),
        ({"volume_weekend_factor": 0.0}, "`volume_weekend_factor` must be in (0, 10]; got 0.0."),
        ({"mix_daily_amplitude": 0.3}, "hard-query share, seasonality and drift included"),
        ({"segments": ("en", "en")}, "`segments` must be distinct non-empty names"),
        (
            {"segments": ("en", "de"), "segment_weights": (1.0,)},
            "`segment_weights` must be () or one positive weight per segment",
        ),
        (
            {"segments": ("en",), "decay_segments": ("fr",)},
            "`decay_segments` must be None or a subset of `segments`",
        ),
        (
            {"zero_daily_amplitude": float("nan")},
            "`zero_daily_amplitude` must be a finite number; got nan.",
        ),
        ({"zero_weekend_shift": float("inf")}, "`zero_weekend_shift` must be a finite number"),
        ({"zero_weekend_shift": "0.1"}, "`zero_weekend_shift` must be a finite number; got '0.1'."),
        (  # p0_easy = 0.15 at the defaults: an amplitude of 0.2 takes it below 0 by day
            {"zero_daily_amplitude": 0.2},
            "`zero_daily_amplitude` must be such that the zero-score probabilities of easy and "
            "hard queries, seasonality included, stay in [0, 1] (range [-0.05, 0.55]",
        ),
        (
            {"zero_weekend_shift": -0.16},
            "seasonality included, stay in [0, 1] (range [-0.01, 0.35] with `zero_weekend_shift`",
        ),
        ({"zero_share": 0.8, "zero_daily_amplitude": 0.1}, "range [0.65, 1.05]"),
        ({"scores_stop": -DAY}, "`scores_stop` must be a non-negative timedelta or None"),
        ({"flaky_share": 1.5}, "`flaky_share` must be in [0, 1]"),
        ({"flaky_find": 0.0}, "`flaky_find` must be in (0, 1]"),
        (
            {"outcomes_stop": 3.0},
            "`outcomes_stop` must be a non-negative timedelta or None; got 3.0.",
        ),
        (
            {"scores_outage": (DAY, DAY)},
            "`scores_outage` must be None or a (start, end) pair of timedeltas with "
            "0 <= start < end",
        ),
        ({"scores_outage": (-DAY, DAY)}, "`scores_outage` must be None or a (start, end) pair"),
        ({"scores_outage": (DAY,)}, "`scores_outage` must be None or a (start, end) pair"),
        ({"scores_outage": [DAY, 2 * DAY]}, "`scores_outage` must be None or a (start, end) pair"),
    ],
)
def test_scenario_iv(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Scenario(**{"name": "x", **changes})
    assert any(message in p for p in info.value.problems), info.value.problems


def test_scenario_iv_gathers_every_problem() -> None:
    with pytest.raises(ConfigError) as info:
        Scenario("x", golden_set_size=0, evaluation_hour=-1, repeat_share=-0.5)
    assert len(info.value.problems) == 3
    assert str(info.value).startswith("Scenario 'x': 3 configuration problem(s)")


def test_generate_iv() -> None:
    sc = SCENARIOS["stationary"]
    with pytest.raises(StatsInputError, match="`end` must be after `start`"):
        generate_scores(sc, START, START, rng=0)
    with pytest.raises(StatsInputError, match="`start` must be a datetime or a numpy datetime64"):
        generate_scores(sc, "2024-01-01", START + DAY, rng=0)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`origin` must be a datetime"):
        generate_outcomes(sc, START, START + DAY, rng=0, origin=np.datetime64("NaT"))
    with pytest.raises(StatsInputError, match="`rng` must be a numpy Generator"):
        generate_outcomes(sc, START, START + DAY, rng=-1)
    with pytest.raises(StatsInputError, match="`scenario` must be a Scenario"):
        generate_scores("stationary", START, START + DAY, rng=0)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`elapsed` must be timedelta64 or timedelta"):
        sc.drift_level(np.array([1.0]))
    with pytest.raises(StatsInputError, match="`seed` must be a non-negative integer"):
        write_world(Path("unused"), sc, start=START, end=START + DAY, seed=-3)


# ----------------------------------------------------------------------------------------------
# presets and effect sizes


def test_presets_exist_with_claimed_parameters() -> None:
    needed = {
        "stationary",
        "covariate_shift",
        "gradual_drift",
        "abrupt_decay",
        "subtle_decay",
        "drift_and_decay",
        "small_golden_set",
    }
    assert needed <= set(SCENARIOS)
    assert all(name == sc.name for name, sc in SCENARIOS.items())
    assert SCENARIOS["stationary"].drift_start is None
    assert SCENARIOS["stationary"].decay_start is None
    assert SCENARIOS["covariate_shift"].decay_size == 0
    assert SCENARIOS["covariate_shift"].drift_kind == "abrupt"
    assert SCENARIOS["gradual_drift"].drift_kind == "gradual"
    assert 0.015 <= SCENARIOS["subtle_decay"].decay_size <= 0.02
    assert SCENARIOS["drift_and_decay"].drift_strength > 0
    assert SCENARIOS["drift_and_decay"].decay_size > 0
    assert 8 <= SCENARIOS["small_golden_set"].golden_set_size <= 12


def test_issue_9_presets_exist_with_claimed_parameters() -> None:
    stationary = SCENARIOS["stationary"]
    for name in ("diurnal", "strong_seasonality"):
        sc = SCENARIOS[name]
        assert (sc.drift_start, sc.decay_start) == (None, None)
        assert sc.zero_daily_amplitude > 0
        assert sc.mix_weekend_shift > stationary.mix_weekend_shift
    assert SCENARIOS["strong_seasonality"].zero_weekend_shift > 0
    dead = SCENARIOS["dead_feed"]
    assert dead.scores_stop is not None
    assert dead.outcomes_stop is None
    assert SCENARIOS["dead_outcomes"].outcomes_stop is not None
    outage = SCENARIOS["score_outage"].scores_outage
    assert outage is not None
    assert outage[0] < outage[1]
    seg = SCENARIOS["segments_20"]
    assert (len(seg.segments), seg.golden_set_size) == (20, 300)
    assert (seg.segments, seg.segment_weights) == (LOCALES_20, LOCALE_WEIGHTS_20)
    assert all(a > b for a, b in zip(seg.segment_weights, seg.segment_weights[1:], strict=False))
    for name, field, value in (
        ("golden_30", "golden_set_size", 30),
        ("evaluations_4", "evaluations_per_day", 4),
    ):
        sc = SCENARIOS[name]
        assert getattr(sc, field) == value
        assert (
            dataclasses.replace(
                sc, name="abrupt_decay", **{field: getattr(SCENARIOS["abrupt_decay"], field)}
            )
            == SCENARIOS["abrupt_decay"]
        )


def _fingerprint(sc: Scenario) -> str:
    """Digest of two days of scores and four days of outcomes around day 15 (seed 123).

    Scores and outcomes are rounded (1e-6, 1e-9) so that a last-ulp difference of a vectorised
    ``exp`` between CPUs cannot change the digest; timestamps, ids and segments are exact.
    """
    h = hashlib.sha256()
    s = generate_scores(sc, START + 14 * DAY, START + 16 * DAY, rng=123, origin=START)
    h.update(s.timestamps.astype(np.int64).tobytes())
    h.update(np.round(s.scores, 6).tobytes())
    if s.segments is not None:
        h.update("|".join(s.segments.tolist()).encode())
    o = generate_outcomes(sc, START + 13 * DAY, START + 17 * DAY, rng=123, origin=START)
    h.update(o.timestamps.astype(np.int64).tobytes())
    h.update("|".join(o.query_ids.tolist()).encode())
    h.update(np.round(o.outcomes, 9).tobytes())
    if o.segments is not None:
        h.update("|".join(o.segments.tolist()).encode())
    return h.hexdigest()[:16]


# Computed with the simulator as it was before the zero-share seasonality and the feed settings
# existed (commit eaa167f, numpy 2.4): new fields at their defaults must leave every old world
# bit for bit as it was. numpy keeps Generator streams stable across releases in practice; if an
# upgrade ever changes one, every digest changes at once, which says so.
_PINNED = {
    "stationary": "64df2e1d08f15c79",
    "covariate_shift": "8aa2e8d3a939a0cd",
    "gradual_drift": "eb4fa47c2037c0a6",
    "abrupt_decay": "75ad0368f2876fe0",
    "subtle_decay": "0d2b2e901f6e58a2",
    "drift_and_decay": "0245c9b2e41ddb4b",
    "small_golden_set": "33fda662f72ab194",
    "segment_drift": "de11245ada7d8f95",
}


@pytest.mark.parametrize("name", sorted(_PINNED))
def test_existing_worlds_are_unchanged(name: str) -> None:
    assert _fingerprint(SCENARIOS[name]) == _PINNED[name]


def test_with_effect_changes_only_the_effect() -> None:
    base = SCENARIOS["drift_and_decay"]
    weaker = base.with_effect(drift_strength=0.1)
    assert weaker.drift_strength == 0.1
    assert weaker.decay_size == base.decay_size
    assert dataclasses.replace(weaker, drift_strength=base.drift_strength) == base
    null = base.with_effect(drift_strength=0.0, decay_size=0.0)
    assert (null.drift_strength, null.decay_size, null.drift_start) == (0.0, 0.0, base.drift_start)
    with pytest.raises(ConfigError, match="decay_size"):
        base.with_effect(decay_size=-0.1)


def test_levels_abrupt_and_gradual() -> None:
    hours = np.array([0, 239, 240, 360, 480, 600], dtype="timedelta64[h]")
    np.testing.assert_allclose(SCENARIOS["gradual_drift"].drift_level(hours), [0, 0, 0, 0.5, 1, 1])
    step = np.array([0, 359, 360, 361], dtype="timedelta64[h]")  # decay starts on day 15
    np.testing.assert_array_equal(SCENARIOS["abrupt_decay"].decay_level(step), [0, 0, 1, 1])
    assert SCENARIOS["abrupt_decay"].decay_level(timedelta(days=15)) == 1.0
    np.testing.assert_array_equal(SCENARIOS["stationary"].drift_level(hours), np.zeros(6))


# ----------------------------------------------------------------------------------------------
# determinism


def test_same_seed_same_world_other_seed_other_world() -> None:
    sc = SCENARIOS["drift_and_decay"]
    a = generate_scores(sc, START, START + 2 * DAY, rng=3)
    b = generate_scores(sc, START, START + 2 * DAY, rng=3)
    c = generate_scores(sc, START, START + 2 * DAY, rng=4)
    np.testing.assert_array_equal(a.timestamps, b.timestamps)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert len(a) != len(c) or not np.array_equal(a.scores, c.scores)
    oa = generate_outcomes(sc, START, START + 2 * DAY, rng=3)
    ob = generate_outcomes(sc, START, START + 2 * DAY, rng=3)
    np.testing.assert_array_equal(oa.query_ids, ob.query_ids)
    np.testing.assert_array_equal(oa.outcomes, ob.outcomes)
    # a Generator is consumed once: same state -> same world
    g1 = generate_scores(sc, START, START + DAY, rng=np.random.default_rng(9))
    g2 = generate_scores(sc, START, START + DAY, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(g1.scores, g2.scores)


def test_overlapping_spans_of_one_world_agree() -> None:
    sc = SCENARIOS["drift_and_decay"]
    origin = START
    long = generate_scores(sc, START, START + 3 * DAY, rng=5, origin=origin)
    t0, t1 = START + timedelta(hours=30), START + timedelta(hours=55)
    short = generate_scores(sc, t0, t1, rng=5, origin=origin)
    lo, hi = (
        np.datetime64(t0.replace(tzinfo=None), "us"),
        np.datetime64(t1.replace(tzinfo=None), "us"),
    )
    inside = (long.timestamps >= lo) & (long.timestamps < hi)
    np.testing.assert_array_equal(long.timestamps[inside], short.timestamps)
    np.testing.assert_array_equal(long.scores[inside], short.scores)

    olong = generate_outcomes(sc, START + 13 * DAY, START + 17 * DAY, rng=5, origin=origin)
    oshort = generate_outcomes(sc, START + 15 * DAY, START + 16 * DAY, rng=5, origin=origin)
    inside = _day(olong, 15)
    np.testing.assert_array_equal(olong.query_ids[inside], oshort.query_ids)
    np.testing.assert_array_equal(olong.outcomes[inside], oshort.outcomes)


@pytest.mark.parametrize(("runs", "hour"), [(24, 2), (2, 23)])
def test_evaluation_runs_that_cross_midnight_are_in_every_span(runs: int, hour: int) -> None:
    """A day's later runs (24 a day from 02:00; 2 a day from 23:00) land on the next day; a
    span starting there never drew the day before, so they were missing from it (22 runs on
    a world's first day instead of 24) and two spans of one world disagreed."""
    from dataclasses import replace

    sc = replace(SCENARIOS["abrupt_decay"], evaluations_per_day=runs, evaluation_hour=hour)
    long = generate_outcomes(sc, START, START + 4 * DAY, rng=5, origin=START)
    short = generate_outcomes(sc, START + 2 * DAY, START + 4 * DAY, rng=5, origin=START)
    lo = np.datetime64((START + 2 * DAY).replace(tzinfo=None), "us")
    inside = long.timestamps >= lo
    np.testing.assert_array_equal(long.timestamps[inside], short.timestamps)
    np.testing.assert_array_equal(long.outcomes[inside], short.outcomes)


def test_golden_set_does_not_depend_on_span_or_timing() -> None:
    theta, drop, codes = golden_qualities(SCENARIOS["abrupt_decay"], rng=11)
    theta2, _, _ = golden_qualities(SCENARIOS["stationary"], rng=11)
    np.testing.assert_array_equal(theta, theta2)
    assert codes is None
    assert theta.shape == drop.shape == (300,)
    # the day-1 outcomes are theta plus small noise, whatever span they are generated in
    for end in (START + 2 * DAY, START + 9 * DAY):
        log = generate_outcomes(SCENARIOS["stationary"], START, end, rng=11)
        ids, y = _per_query_mean(log, 1)
        assert ids[0] == "q0001"
        assert ids[-1] == "q0300"
        assert np.max(np.abs(y - theta)) < 0.1


# ----------------------------------------------------------------------------------------------
# scores


def test_score_log_contract(stationary_scores: ScoreLog) -> None:
    log = stationary_scores
    assert log.timestamps.dtype == np.dtype("datetime64[us]")
    assert log.scores.dtype == np.float64
    assert log.segments is None
    assert np.all(np.diff(log.timestamps.astype(np.int64)) >= 0)
    assert log.timestamps[0] >= np.datetime64("2024-01-01T00:00", "us")
    assert log.timestamps[-1] < np.datetime64("2024-01-15T00:00", "us")
    assert np.all(np.isfinite(log.scores))
    assert np.all(log.scores >= 0)
    assert set(log.columns()) == {"timestamp", "score"}


def test_zero_share_and_skewed_continuous_part(stationary_scores: ScoreLog) -> None:
    scores = stationary_scores.scores
    assert abs(np.mean(scores == 0) - 0.20) < 0.01
    positive = scores[scores > 0]
    assert stats.skew(positive) > 0.5
    assert np.min(positive) > 0


def test_volume_has_daily_and_weekly_seasonality(stationary_scores: ScoreLog) -> None:
    ts = stationary_scores.timestamps
    hours = (ts - np.datetime64("2024-01-01T00", "us")).astype("timedelta64[h]").astype(np.int64)
    per_hour = np.bincount(hours, minlength=14 * 24).reshape(14, 24)
    by_hour_of_day = per_hour.mean(axis=0)
    assert by_hour_of_day.max() / by_hour_of_day.min() > 2.0  # 1.5 / 0.5 = 3 in expectation
    assert int(np.argmax(by_hour_of_day)) in (13, 14)
    per_day = per_hour.sum(axis=1)
    weekend = per_day[[5, 6, 12, 13]].mean()  # Jan 6, 7, 13, 14 2024
    weekday = per_day[[0, 1, 2, 3, 4, 7, 8, 9, 10, 11]].mean()
    assert 0.70 < weekend / weekday < 0.80  # volume_weekend_factor = 0.75
    # the weekly mean is scores_per_hour
    assert abs(per_hour.mean() / 2000 - 1) < 0.01


def test_stationary_hourly_psi_is_at_the_noise_floor(stationary_scores: ScoreLog) -> None:
    excess = np.concatenate([_hourly_excess_psi(stationary_scores, d) for d in (7, 12)])
    # The mild seasonality in the mix must stay far below the 0.02 tolerance of the drift test.
    # Single night-time blocks (~600 scores) scatter by ~0.007 around the floor, so only the
    # average over 48 blocks (sd ~0.001) is asserted; measured 0.0004-0.0016 over seeds 0-4.
    assert abs(excess.mean()) < 0.01


def _zero_share_at(log: ScoreLog, hours: tuple[int, ...], weekend: bool) -> float:
    """Share of exact zeros among the rows logged in the given UTC hours on (week)end days."""
    ts = log.timestamps
    day = ts.astype("datetime64[D]").astype(np.int64)
    is_weekend = (day + 3) % 7 >= 5
    hour = (ts - ts.astype("datetime64[D]")).astype("timedelta64[h]").astype(np.int64)
    mask = np.isin(hour, hours) & (is_weekend == weekend)
    return float(np.mean(log.scores[mask] == 0))


def _expected_zero_share(sc: Scenario, hour: float, weekend: bool, drift: float = 0.0) -> float:
    """The model's zero share at a fractional hour: p0_easy(t) + ZERO_GAP * h(t)."""
    c = np.cos(2 * np.pi * (hour - MIX_PEAK_HOUR) / 24)
    h = sc.hard_share + sc.mix_daily_amplitude * c + sc.mix_weekend_shift * weekend
    h += sc.drift_strength * drift
    p0_easy = sc.zero_share - sc.hard_share * ZERO_GAP + sc.zero_daily_amplitude * c
    return float(p0_easy + sc.zero_weekend_shift * weekend + ZERO_GAP * h)


@pytest.mark.parametrize(
    ("name", "day", "night"), [("diurnal", 0.10, 0.30), ("strong_seasonality", 0.05, 0.40)]
)
def test_seasonal_zero_share_by_day_and_night(name: str, day: float, night: float) -> None:
    sc = SCENARIOS[name]
    busy = dataclasses.replace(sc, scores_per_hour=4000.0)  # volume leaves the shares alone
    log = generate_scores(busy, START, START + 14 * DAY, rng=31)  # 10 weekdays, 4 weekend days
    # the claim itself, from the model: weekday 15:00 and 03:00 UTC
    assert _expected_zero_share(sc, 15.0, False) == pytest.approx(day, abs=1e-12)
    assert _expected_zero_share(sc, 3.0, False) == pytest.approx(night, abs=1e-12)
    # measured on generated rows, in the hour around the trough and the peak (the cosine's mean
    # over one hour is 0.997 of its peak). Weekday rows: ~64,000 by day (sd 0.0009), ~22,000 at
    # night (sd 0.0033); weekend hours ~6,500-19,000 rows (sd <= 0.0065).
    measured_day = _zero_share_at(log, (14,), weekend=False)
    measured_night = _zero_share_at(log, (2,), weekend=False)
    assert measured_day == pytest.approx(_expected_zero_share(sc, 14.5, False), abs=0.006)
    assert measured_night == pytest.approx(_expected_zero_share(sc, 2.5, False), abs=0.02)
    assert abs(measured_day - day) < 0.01
    assert abs(measured_night - night) < 0.025
    # weekends: the zero shift and the mix shift add up
    for hour in (2, 14):
        assert _zero_share_at(log, (hour,), weekend=True) == pytest.approx(
            _expected_zero_share(sc, hour + 0.5, True), abs=0.03
        )
    weekend_gain = _zero_share_at(log, tuple(range(24)), True) - _zero_share_at(
        log, tuple(range(24)), False
    )
    claimed = sc.zero_weekend_shift + ZERO_GAP * sc.mix_weekend_shift
    assert abs(weekend_gain - claimed) < 0.01


def test_seasonality_helpers_keep_the_base_world() -> None:
    base = SCENARIOS["covariate_shift"]
    for helper, suffix in ((diurnal, "_diurnal"), (strong_seasonality, "_strong_seasonality")):
        seasonal = helper(base)
        assert seasonal.name == "covariate_shift" + suffix
        assert (seasonal.drift_kind, seasonal.drift_start, seasonal.drift_strength) == (
            base.drift_kind,
            base.drift_start,
            base.drift_strength,
        )
    custom = with_seasonality(base, day=0.15, night=0.25, mix_weekend_shift=0.0, name="mild")
    assert custom.name == "mild"
    assert _expected_zero_share(custom, 15.0, False) == pytest.approx(0.15, abs=1e-12)
    assert _expected_zero_share(custom, 3.0, False) == pytest.approx(0.25, abs=1e-12)
    with pytest.raises(ConfigError, match="zero_daily_amplitude"):
        with_seasonality(base, day=0.0, night=0.6, mix_weekend_shift=0.0)


def test_covariate_shift_moves_scores() -> None:
    sc = SCENARIOS["covariate_shift"]
    log = generate_scores(sc, START + 8 * DAY, START + 16 * DAY, rng=2, origin=START)
    excess = _hourly_excess_psi(log, 15)
    assert excess.mean() >= 0.05
    assert np.all(excess >= 0.03)
    before = log.scores[_day(log, 14)]
    after = log.scores[_day(log, 15)]
    assert np.mean(after == 0) > np.mean(before == 0) + 0.05  # hard queries miss more often
    assert np.median(after) < np.median(before)


def test_gradual_drift_grows_over_its_ramp() -> None:
    sc = SCENARIOS["gradual_drift"]  # 10 days ramp from day 10
    log = generate_scores(sc, START, START + 21 * DAY, rng=2)
    ref = log.scores[np.logical_or.reduce([_day(log, d) for d in range(7)])]
    psi = [_psi(ref, log.scores[_day(log, d)])[0] for d in (8, 12, 16, 20)]
    assert psi[0] < 0.005
    assert psi[0] < psi[1] < psi[2] < psi[3]
    assert psi[3] >= 0.05


def test_segment_drift_only_moves_its_segment() -> None:
    sc = SCENARIOS["segment_drift"]
    log = generate_scores(sc, START + 8 * DAY, START + 16 * DAY, rng=4, origin=START)
    assert log.segments is not None
    assert set(log.columns()) == {"timestamp", "score", "segment"}
    shares = {s: float(np.mean(log.segments == s)) for s in sc.segments}
    assert shares == pytest.approx({"en": 0.6, "de": 0.25, "fr": 0.15}, abs=0.01)
    before, after = _day(log, 14), _day(log, 15)
    for segment, moved in (("en", False), ("de", False), ("fr", True)):
        mine = log.segments == segment
        psi, _ = _psi(log.scores[before & mine], log.scores[after & mine])
        assert (psi > 0.05) is moved, (segment, psi)


def _us(t: datetime) -> np.datetime64:
    return np.datetime64(t.replace(tzinfo=None), "us")


def test_dead_feed_logs_nothing_after_the_stop() -> None:
    sc = SCENARIOS["dead_feed"]
    assert sc.scores_stop is not None
    stop = _us(START + sc.scores_stop)
    log = generate_scores(sc, START + 13 * DAY, START + 18 * DAY, rng=4, origin=START)
    alive = generate_scores(SCENARIOS["stationary"], START + 13 * DAY, START + 18 * DAY, rng=4)
    assert log.timestamps.max() < stop
    assert stop - log.timestamps.max() < np.timedelta64(5, "m")  # it was busy until it died
    # before the stop: the very same rows as the live world
    before = alive.timestamps < stop
    np.testing.assert_array_equal(log.timestamps, alive.timestamps[before])
    np.testing.assert_array_equal(log.scores, alive.scores[before])
    # a span wholly after the stop is empty; the outcome feed is untouched
    after = generate_scores(sc, START + 16 * DAY, START + 17 * DAY, rng=4, origin=START)
    assert len(after) == 0
    assert after.timestamps.dtype == np.dtype("datetime64[us]")
    np.testing.assert_array_equal(
        generate_outcomes(sc, START, START + 17 * DAY, rng=4).outcomes,
        generate_outcomes(SCENARIOS["stationary"], START, START + 17 * DAY, rng=4).outcomes,
    )


def test_score_outage_is_a_gap_then_recovery() -> None:
    sc = SCENARIOS["score_outage"]
    assert sc.scores_outage is not None
    a, b = (_us(START + t) for t in sc.scores_outage)
    log = generate_scores(sc, START + 14 * DAY, START + 17 * DAY, rng=9, origin=START)
    alive = generate_scores(SCENARIOS["stationary"], START + 14 * DAY, START + 17 * DAY, rng=9)
    assert not np.any((log.timestamps >= a) & (log.timestamps < b))
    kept = (alive.timestamps < a) | (alive.timestamps >= b)
    np.testing.assert_array_equal(log.timestamps, alive.timestamps[kept])
    np.testing.assert_array_equal(log.scores, alive.scores[kept])
    assert np.sum(~kept) > 1000  # six hours of traffic went missing
    gap = np.diff(log.timestamps.astype(np.int64)).max()
    assert gap >= (b - a).astype(np.int64)  # the longest silence is the outage
    assert np.sum(log.timestamps >= b) > 0  # and the feed recovered


def test_outcome_feed_stop_drops_runs_and_cuts_a_run_in_progress() -> None:
    sc = SCENARIOS["dead_outcomes"]
    assert sc.outcomes_stop is not None
    stop = _us(START + sc.outcomes_stop)
    log = generate_outcomes(sc, START, START + 20 * DAY, rng=2)
    alive = generate_outcomes(SCENARIOS["stationary"], START, START + 20 * DAY, rng=2)
    assert log.timestamps.max() < stop
    before = alive.timestamps < stop
    np.testing.assert_array_equal(log.timestamps, alive.timestamps[before])
    np.testing.assert_array_equal(log.outcomes, alive.outcomes[before])
    # a stop inside a run (02:00-02:20) keeps the rows logged before it: a partial run
    mid = dataclasses.replace(sc, outcomes_stop=timedelta(days=3, hours=2, minutes=7))
    partial = generate_outcomes(mid, START + 3 * DAY, START + 4 * DAY, rng=2, origin=START)
    assert 0 < len(partial) < 300
    assert partial.timestamps.max() < _us(START + timedelta(days=3, hours=2, minutes=7))


@settings(max_examples=20)
@given(
    stop_minutes=st.integers(0, 3 * 24 * 60),
    outage_minutes=st.tuples(st.integers(0, 3 * 24 * 60), st.integers(1, 600)),
)
def test_feed_settings_only_thin_the_world(
    stop_minutes: int, outage_minutes: tuple[int, int]
) -> None:
    base = Scenario("thin", scores_per_hour=60.0, golden_set_size=5, evaluations_per_day=3)
    start, length = (timedelta(minutes=m) for m in outage_minutes)
    stop = timedelta(minutes=stop_minutes)
    sc = dataclasses.replace(
        base, scores_stop=stop, outcomes_stop=stop, scores_outage=(start, start + length)
    )
    t0, t1 = START + timedelta(hours=5), START + 3 * DAY
    full, thin = (generate_scores(x, t0, t1, rng=1, origin=START) for x in (base, sc))
    since = full.timestamps - _us(START)
    kept = (since < np.timedelta64(stop)) & (
        (since < np.timedelta64(start)) | (since >= np.timedelta64(start + length))
    )
    np.testing.assert_array_equal(thin.timestamps, full.timestamps[kept])
    np.testing.assert_array_equal(thin.scores, full.scores[kept])
    full_o, thin_o = (generate_outcomes(x, t0, t1, rng=1, origin=START) for x in (base, sc))
    kept_o = full_o.timestamps - _us(START) < np.timedelta64(stop)
    np.testing.assert_array_equal(thin_o.query_ids, full_o.query_ids[kept_o])
    np.testing.assert_array_equal(thin_o.outcomes, full_o.outcomes[kept_o])


# ----------------------------------------------------------------------------------------------
# outcomes


def test_outcome_log_contract() -> None:
    sc = SCENARIOS["stationary"]
    log = generate_outcomes(sc, START, START + 3 * DAY, rng=1)
    assert log.timestamps.dtype == np.dtype("datetime64[us]")
    assert np.all(np.diff(log.timestamps.astype(np.int64)) >= 0)
    assert np.all((log.outcomes >= 0) & (log.outcomes <= 1))
    assert set(log.columns()) == {"timestamp", "query_id", "outcome"}
    # one run a day at 02:00 UTC, lasting 20 minutes at most
    minutes = (log.timestamps - log.timestamps.astype("datetime64[D]")).astype("timedelta64[m]")
    assert np.all((minutes >= 120) & (minutes < 140))
    for day in range(3):
        ids, counts = np.unique(log.query_ids[_day(log, day)], return_counts=True)
        assert ids.size == 300
        assert set(counts.tolist()) <= {1, 2}
        assert 0 < np.sum(counts == 2) < 20  # repeat_share = 0.02: about 6 repeats a run


def test_outcomes_vary_between_queries_more_than_between_evaluations() -> None:
    sc = SCENARIOS["stationary"]
    log = generate_outcomes(sc, START, START + 8 * DAY, rng=6)
    _, y1 = _per_query_mean(log, 1)
    d = _paired(log, 1, 2)
    assert 0.18 < np.std(y1) < 0.26  # between queries: quality_sd = 0.22
    assert np.std(d) < 0.04  # between evaluations: sqrt(2) * 0.02 = 0.028
    assert abs(np.mean(d)) < 4 * np.std(d, ddof=1) / np.sqrt(d.size)


def test_flaky_queries_score_zero_in_most_runs_and_leave_the_others_alone() -> None:
    base = SCENARIOS["stationary"]
    flaky = dataclasses.replace(base, flaky_share=0.3, flaky_find=0.1)
    steady = generate_outcomes(base, START, START + 20 * DAY, rng=4)
    log = generate_outcomes(flaky, START, START + 20 * DAY, rng=4)
    np.testing.assert_array_equal(log.query_ids, steady.query_ids)  # same runs, same rows
    hard = np.isin(log.query_ids, [f"q{i:04d}" for i in range(1, 91)])  # the first 30 %
    np.testing.assert_array_equal(log.outcomes[~hard], steady.outcomes[~hard])
    found = log.outcomes[hard] == steady.outcomes[hard]
    assert 0.07 < found.mean() < 0.13  # found in a tenth of the runs
    assert np.all(log.outcomes[hard][~found] == 0.0)


def test_covariate_shift_leaves_outcomes_alone() -> None:
    shifted = generate_outcomes(SCENARIOS["covariate_shift"], START, START + 20 * DAY, rng=8)
    stationary = generate_outcomes(SCENARIOS["stationary"], START, START + 20 * DAY, rng=8)
    # the golden set is fixed: the very same evaluations as in the stationary world
    np.testing.assert_array_equal(shifted.outcomes, stationary.outcomes)
    d = _paired(shifted, 13, 17)  # before vs after the shift on day 15
    se = np.std(d, ddof=1) / np.sqrt(d.size)
    assert abs(np.mean(d)) < 4 * se


@pytest.mark.parametrize("name", ["abrupt_decay", "drift_and_decay", "small_golden_set"])
def test_decay_lowers_the_paired_mean_by_its_size(name: str) -> None:
    sc = SCENARIOS[name]
    log = generate_outcomes(sc, START, START + 20 * DAY, rng=12)
    before = _paired(log, 12, 14)
    after = _paired(log, 14, 16)
    se_b = np.std(before, ddof=1) / np.sqrt(before.size)
    se_a = np.std(after, ddof=1) / np.sqrt(after.size)
    assert abs(np.mean(before)) < 4 * se_b
    # clipping at 0 shrinks the drop a little: allow 10 % of it on top of sampling error
    assert abs(np.mean(after) + sc.decay_size) < 4 * se_a + 0.1 * sc.decay_size


def test_subtle_decay_is_seen_paired_and_missed_unpaired() -> None:
    sc = SCENARIOS["subtle_decay"]
    log = generate_outcomes(sc, START, START + 17 * DAY, rng=0)
    ids_a, a = _per_query_mean(log, 14)
    ids_b, b = _per_query_mean(log, 16)
    assert np.array_equal(ids_a, ids_b)
    paired = stats.ttest_rel(b, a, alternative="less")
    welch = stats.ttest_ind(b, a, equal_var=False, alternative="less")
    # Measured over seeds 0-4: paired p 1e-25..5e-15, Welch p 0.14..0.22. Welch would need the
    # mean drop to be twice its size to reach 0.05; the paired t is about 9.
    assert paired.pvalue < 1e-6
    assert welch.pvalue > 0.05


@pytest.mark.parametrize("onset_hour", [0, 1, 2, 3, 7, 13, 19, 23])
@pytest.mark.parametrize("evaluations", [1, 4, 24])
def test_decay_onset_at_any_hour_applies_from_the_first_run_after_it(
    onset_hour: int, evaluations: int
) -> None:
    onset = timedelta(days=3, hours=onset_hour, minutes=30)
    sc = Scenario(
        "onset",
        decay_start=onset,
        decay_size=0.2,
        decay_spread=0.0,
        evaluations_per_day=evaluations,
        golden_set_size=20,
        quality_mean=0.5,
        quality_sd=0.05,  # theta near 0.5: a drop of 0.2 is never clipped
        repeat_share=0.0,
    )
    decayed = generate_outcomes(sc, START + 2 * DAY, START + 5 * DAY, rng=8, origin=START)
    healthy = generate_outcomes(
        sc.with_effect(decay_size=0.0), START + 2 * DAY, START + 5 * DAY, rng=8, origin=START
    )
    np.testing.assert_array_equal(decayed.timestamps, healthy.timestamps)
    drop = healthy.outcomes - decayed.outcomes
    # the run a row belongs to starts on the run grid at or before the row
    grid_us = 24 * 3_600_000_000 // evaluations
    since = (decayed.timestamps - _us(START)).astype(np.int64)
    run_start = (since - 2 * 3_600_000_000) // grid_us * grid_us + 2 * 3_600_000_000
    after_onset = run_start >= _td_us_test(onset)
    np.testing.assert_allclose(drop[after_onset], 0.2, atol=1e-12)
    np.testing.assert_array_equal(drop[~after_onset], 0.0)
    assert after_onset.any()
    assert (~after_onset).any()
    # the level the runs see is the scenario's decay_level at their start
    np.testing.assert_array_equal(
        sc.decay_level(run_start.astype("timedelta64[us]")), after_onset.astype(np.float64)
    )


def _td_us_test(td: timedelta) -> int:
    return int(np.timedelta64(td, "us").astype(np.int64))


def test_decay_segments_confine_the_decay() -> None:
    sc = Scenario(
        "fr_decay",
        decay_start=timedelta(days=2),
        decay_size=0.05,
        decay_segments=("fr",),
        segments=("en", "fr"),
    )
    log = generate_outcomes(sc, START, START + 4 * DAY, rng=3)
    assert log.segments is not None
    ids, seg_index = np.unique(log.query_ids, return_index=True)
    segment_of = dict(zip(ids.tolist(), log.segments[seg_index].tolist(), strict=True))
    ids_a, a = _per_query_mean(log, 1)
    _, b = _per_query_mean(log, 3)
    fr = np.array([segment_of[q] == "fr" for q in ids_a])
    assert 100 < fr.sum() < 200
    assert np.mean((b - a)[fr]) < -0.04
    assert abs(np.mean((b - a)[~fr])) < 0.01


# ----------------------------------------------------------------------------------------------
# invariants for any small world


@settings(max_examples=15)
@given(
    seed=st.integers(0, 2**32),
    hours=st.integers(1, 60),
    offset_minutes=st.integers(0, 24 * 60),
    evaluations=st.integers(1, 4),
    queries=st.integers(1, 40),
    segmented=st.booleans(),
)
def test_any_world_respects_the_contract(
    seed: int, hours: int, offset_minutes: int, evaluations: int, queries: int, segmented: bool
) -> None:
    sc = Scenario(
        "any",
        scores_per_hour=50.0,
        golden_set_size=queries,
        evaluations_per_day=evaluations,
        segments=("a", "b") if segmented else (),
    )
    t0 = START + timedelta(minutes=offset_minutes)
    t1 = t0 + timedelta(hours=hours)
    lo, hi = (
        np.datetime64(t0.replace(tzinfo=None), "us"),
        np.datetime64(t1.replace(tzinfo=None), "us"),
    )
    for log in (
        generate_scores(sc, t0, t1, rng=seed),
        generate_outcomes(sc, t0, t1, rng=seed),
    ):
        ts = log.timestamps
        assert np.all((ts >= lo) & (ts < hi))
        assert np.all(np.diff(ts.astype(np.int64)) >= 0)
        assert (log.segments is not None) is segmented
        assert all(len(col) == len(log) for col in log.columns().values())
    outcomes = generate_outcomes(sc, t0, t1, rng=seed)
    assert np.all((outcomes.outcomes >= 0) & (outcomes.outcomes <= 1))
    assert len(set(outcomes.query_ids.tolist())) <= queries


# ----------------------------------------------------------------------------------------------
# true PSI and the null's edge

WEEK = timedelta(days=7)
REF = (START + 8 * DAY, START + 15 * DAY)  # the week before the presets' onset on day 15


@pytest.mark.parametrize("name", ["covariate_shift", "strong_covariate", "score_outage"])
def test_score_mixture_against_generated_scores(name: str) -> None:
    """The integrated distribution of a week spanning the onset against 10^6 generated scores."""
    sc = (
        strong_seasonality(SCENARIOS["covariate_shift"])
        if name == "strong_covariate"
        else SCENARIOS[name]
    )
    span = (START + 12 * DAY + timedelta(hours=7), START + 19 * DAY + timedelta(hours=7))
    mix = score_mixture(sc, span, origin=START)
    assert mix.zero + mix.easy + mix.hard == pytest.approx(1.0, abs=1e-12)
    busy = dataclasses.replace(sc, scores_per_hour=1e6 / 168)
    sample = np.sort(generate_scores(busy, *span, rng=13, origin=START).scores)
    n = sample.size
    # 4 binomial sd at 10^6 draws: 0.0017 for the zero share, 0.002 for the CDF
    assert np.mean(sample == 0) == pytest.approx(mix.zero, abs=4 * np.sqrt(mix.zero / n))
    for x in (0.5, 3.0, 5.0, 6.5, 8.0, 11.0, 15.0, 25.0):
        ecdf = np.searchsorted(sample, x, side="right") / n
        assert ecdf == pytest.approx(float(mix.cdf(x)), abs=0.002), x
    for k in range(1, 10):
        q = mix.quantile(k / 10)
        if q == 0.0:
            assert mix.zero >= k / 10
        else:
            assert np.searchsorted(sample, q, side="right") / n == pytest.approx(k / 10, abs=0.002)
    assert mix.cdf(-1.0) == 0.0
    assert float(mix.cdf(0.0)) == pytest.approx(mix.zero, abs=1e-15)


def test_score_mixture_at_an_instant_is_the_model() -> None:
    sc = strong_seasonality(SCENARIOS["covariate_shift"])
    for day, hour in ((3, 2.5), (6, 15.0), (15, 3.0), (20, 9.25)):  # day 6 is a Sunday
        t = START + day * DAY + timedelta(hours=hour)
        mix = score_mixture(sc, t, origin=START)
        # the test's own formula: zero share = p0_easy(t) + ZERO_GAP * h(t)
        expected = _expected_zero_share(sc, hour, day % 7 >= 5, drift=float(day >= 15))
        assert mix.zero == pytest.approx(expected, abs=1e-12)
    with pytest.raises(StatsInputError, match=r"`p` must be in \(0, 1\); got 1\.0\."):
        mix.quantile(1.0)
    with pytest.raises(StatsInputError, match="`segment` must be None or one of"):
        score_mixture(sc, START, origin=START, segment="en")


def test_true_psi_iv() -> None:
    sc = SCENARIOS["covariate_shift"]
    cur = (START + 15 * DAY, START + 16 * DAY)
    with pytest.raises(StatsInputError, match="`scenario` must be a Scenario"):
        true_psi("covariate_shift", cur, REF, origin=START)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError) as info:
        true_psi(
            sc,
            START + 15 * DAY,
            REF,
            origin=START,
            bins=1,
            method="monte_carlo",
            n_samples=10,
            segment="fr",
        )
    message = str(info.value)
    for part in (
        "`bins` must be an integer >= 2; got 1.",
        "`n_samples` must be an integer >= 1000; got 10.",
        "`segment` must be None or one of `scenario.segments` (); got 'fr'.",
        "`current` must be a (start, end) span when `method` is 'monte_carlo'.",
    ):
        assert part in message
    with pytest.raises(StatsInputError, match="`method` must be one of"):
        true_psi(sc, cur, REF, origin=START, method="exact")  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`reference` must be a \\(start, end\\) pair"):
        true_psi(sc, cur, START, origin=START)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`current` must be a time or a \\(start, end\\)"):
        true_psi(sc, (START, START + DAY, START), REF, origin=START)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="`end` must be after `start`"):
        true_psi(sc, cur, (REF[1], REF[0]), origin=START)
    dead = SCENARIOS["dead_feed"]
    for method in ("integrate", "monte_carlo"):
        with pytest.raises(StatsInputError, match="`current` holds no logged scores"):
            true_psi(dead, (START + 16 * DAY, START + 17 * DAY), REF, origin=START, method=method)


def test_edge_strength_iv() -> None:
    with pytest.raises(StatsInputError, match="`base` must be a Scenario"):
        edge_strength("covariate_shift")  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match=r"`base` must have a drift .*; got 'none'\."):
        edge_strength(SCENARIOS["stationary"])
    early = Scenario("early", drift_kind="abrupt", drift_start=DAY)
    with pytest.raises(StatsInputError, match=r"`base\.drift_start` must be >= 7 days"):
        edge_strength(early)
    with pytest.raises(
        StatsInputError, match=r"`tolerance` must be a finite number > 0; got 0\.0\."
    ):
        edge_strength(SCENARIOS["covariate_shift"], 0.0)
    with pytest.raises(StatsInputError, match="`tolerance` must be reachable"):
        edge_strength(SCENARIOS["covariate_shift"], 5.0)


@pytest.mark.parametrize("name", ["stationary", "diurnal", "strong_seasonality"])
def test_true_psi_of_a_stationary_world_is_zero_over_whole_weeks(name: str) -> None:
    sc = SCENARIOS[name]
    start = START + timedelta(days=15, hours=5, minutes=17)  # any start: whole weeks average out
    assert true_psi(sc, (start, start + WEEK), REF, origin=START) == pytest.approx(0.0, abs=1e-12)
    # ...but a night hour is not a week: the cycle alone moves it, the more the stronger it is
    night = (START + 15 * DAY + timedelta(hours=2), START + 15 * DAY + timedelta(hours=4))
    psi_night = true_psi(sc, night, REF, origin=START)
    if name == "stationary":
        assert psi_night < 0.002
    else:
        assert psi_night > 0.05


def test_true_psi_against_generated_scores() -> None:
    """The integrated PSI of a strong shift against 10^6 generated scores on each side."""
    sc = SCENARIOS["covariate_shift"]  # drift_strength 0.35
    cur = (START + 15 * DAY, START + 15 * DAY + WEEK)
    exact = true_psi(sc, cur, REF, origin=START)
    busy = dataclasses.replace(sc, scores_per_hour=1e6 / 168)
    current = generate_scores(busy, *cur, rng=3, origin=START).scores
    reference = generate_scores(busy, *REF, rng=4, origin=START).scores
    # measured over 6 seeds: mean 0.1438, sd 0.0015 (exact: 0.1440)
    assert _psi(reference, current)[0] == pytest.approx(exact, abs=0.006)
    assert 0.1 < exact < 0.2


def test_true_psi_against_generated_scores_at_the_edge() -> None:
    """The integrated PSI of an edge world against 10^6 generated scores on each side."""
    for base in (SCENARIOS["covariate_shift"], strong_seasonality(SCENARIOS["covariate_shift"])):
        strength = edge_strength(base, 0.02)
        sc = base.with_effect(drift_strength=strength)
        cur = (START + 15 * DAY, START + 15 * DAY + WEEK)
        assert true_psi(sc, cur, REF, origin=START) == pytest.approx(0.02, abs=1e-9)
        busy = dataclasses.replace(sc, scores_per_hour=1e6 / 168)  # 10^6 scores a week
        current = generate_scores(busy, *cur, rng=5, origin=START).scores
        reference = generate_scores(busy, *REF, rng=6, origin=START).scores
        assert 0.99e6 < current.size < 1.01e6
        # The monitor's binning; measured sd of this estimate over 20 seeds: 0.0003, mean
        # 0.0201 (the plug-in bias is about (B - 1) * 2e-6 plus the noise of the edges).
        assert _psi(reference, current)[0] == pytest.approx(0.02, abs=0.0015)
        # without the drift the same weeks have no PSI at all
        null = dataclasses.replace(busy, drift_strength=0.0)
        assert true_psi(null, cur, REF, origin=START) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    ("name", "current", "segment"),
    [
        (  # a night hour of a strong cycle after an edge-sized drift
            "strong_covariate",
            (START + 15 * DAY + timedelta(hours=3), START + 15 * DAY + timedelta(hours=4)),
            None,
        ),
        ("gradual_drift", (START + 14 * DAY, START + 15 * DAY), None),  # mid-ramp
        ("segment_drift", (START + 15 * DAY, START + 16 * DAY), "fr"),
        ("segment_drift", (START + 15 * DAY, START + 16 * DAY), None),
        ("outage_covariate", (START + 15 * DAY, START + 16 * DAY), None),
    ],
)
def test_true_psi_integrated_against_monte_carlo(
    name: str, current: tuple[datetime, datetime], segment: str | None
) -> None:
    worlds = {
        "strong_covariate": strong_seasonality(SCENARIOS["covariate_shift"]).with_effect(
            drift_strength=0.13
        ),
        "outage_covariate": dataclasses.replace(
            SCENARIOS["covariate_shift"],
            scores_outage=(timedelta(days=15, hours=6), timedelta(days=15, hours=20)),
        ),
    }
    sc = worlds.get(name) or SCENARIOS[name]
    exact = true_psi(sc, current, REF, origin=START, segment=segment)
    mc = [
        true_psi(sc, current, REF, origin=START, segment=segment, method="monte_carlo", rng=k)
        for k in range(2)
    ]
    # 10^6 draws a side: measured sd of one estimate 0.0007 at PSI 0.03 and 0.0015 at PSI 0.14
    assert np.mean(mc) == pytest.approx(exact, abs=0.001 + 0.02 * exact)
    assert exact > 0.002  # each case is a real drift, not a trivially small one


def test_true_psi_outage_changes_the_weighting() -> None:
    # an outage over the night hours leaves a day-heavy span: its PSI differs from the full span
    sc = SCENARIOS["strong_seasonality"]
    quiet = dataclasses.replace(sc, scores_outage=(timedelta(days=15), timedelta(days=15, hours=8)))
    span = (START + 15 * DAY, START + 16 * DAY)
    assert true_psi(quiet, span, REF, origin=START) > true_psi(sc, span, REF, origin=START) + 0.01


def test_true_psi_at_an_instant_is_the_limit_of_short_spans() -> None:
    sc = SCENARIOS["strong_seasonality"].with_effect()
    for hour in (0.25, 3.0, 9.6, 15.0, 22.9):
        t = START + 15 * DAY + timedelta(hours=hour)
        instant = true_psi(sc, t, REF, origin=START)
        # a span centred on t: its mean equals the instant's value to second order
        second = timedelta(seconds=1)
        short = true_psi(sc, (t - second, t + second), REF, origin=START)
        assert instant == pytest.approx(short, rel=1e-7, abs=1e-12)


def test_at_edge_sets_the_strength_and_the_volume() -> None:
    base = SCENARIOS["covariate_shift"]
    for volume in (300.0, 10_000.0, 1e6 / 24):
        world = at_edge(base, scores_per_hour=volume)
        assert world.name == "covariate_shift_edge"
        assert world.scores_per_hour == volume
        cur = (START + 15 * DAY, START + 15 * DAY + WEEK)
        assert true_psi(world, cur, REF, origin=START) == pytest.approx(0.02, abs=1e-9)
    assert at_edge(base, name="e").scores_per_hour == base.scores_per_hour


def test_edge_strength_grows_with_the_tolerance_and_handles_ramps() -> None:
    base = SCENARIOS["covariate_shift"]
    strengths = [edge_strength(base, tol) for tol in (0.01, 0.02, 0.05, 0.1)]
    assert all(0 < a < b < 0.7 for a, b in itertools.pairwise(strengths))
    gradual = SCENARIOS["gradual_drift"]
    s = edge_strength(gradual, 0.05)
    done = START + gradual.drift_start + gradual.drift_ramp  # type: ignore[operator]
    onset = START + gradual.drift_start  # type: ignore[operator]
    world = gradual.with_effect(drift_strength=s)
    assert true_psi(world, (done, done + WEEK), (onset - WEEK, onset), origin=START) == (
        pytest.approx(0.05, abs=1e-9)
    )
    # the same shift of the mix has the same PSI, abrupt or at the end of a ramp
    assert s == pytest.approx(edge_strength(base, 0.05), rel=1e-6)


def test_psi_crossing_dates_the_first_crossing() -> None:
    gradual = SCENARIOS["gradual_drift"]  # ramp over days 10-20 to strength 0.35
    ref = (START + 3 * DAY, START + 10 * DAY)
    between = (START + 10 * DAY, START + 25 * DAY)
    t = psi_crossing(gradual, 0.04, reference=ref, between=between, origin=START)
    assert t is not None
    assert t.tzinfo is not None
    second = timedelta(seconds=1)
    assert true_psi(gradual, (t - DAY, t), ref, origin=START) >= 0.04
    assert true_psi(gradual, (t - DAY - 2 * second, t - 2 * second), ref, origin=START) < 0.04
    assert START + 10 * DAY < t < START + 20 * DAY
    # a higher level is crossed later; a level never reached gives None
    later = psi_crossing(gradual, 0.08, reference=ref, between=between, origin=START)
    assert later is not None
    assert later > t
    assert psi_crossing(gradual, 5.0, reference=ref, between=between, origin=START) is None
    # an abrupt step is crossed while the trailing day fills with drifted traffic
    step = SCENARIOS["covariate_shift"]
    onset = START + 15 * DAY
    t_step = psi_crossing(step, 0.02, reference=REF, between=(onset, onset + 2 * DAY), origin=START)
    assert t_step is not None
    assert onset < t_step < onset + DAY
    # a window the feed left silent cannot cross
    dead = dataclasses.replace(step, scores_stop=timedelta(days=15))
    assert (
        psi_crossing(
            dead, 0.02, reference=REF, between=(onset + DAY, onset + 2 * DAY), origin=START
        )
        is None
    )


def test_psi_crossing_iv() -> None:
    sc = SCENARIOS["gradual_drift"]
    with pytest.raises(StatsInputError) as info:
        psi_crossing(
            sc,
            -1.0,
            reference=REF,
            between=START,  # type: ignore[arg-type]
            origin=START,
            window=timedelta(0),
            bins=0,
            segment="fr",
        )
    for part in (
        "`level` must be a finite number > 0; got -1.0.",
        "`window` must be a positive timedelta; got datetime.timedelta(0).",
        "`bins` must be an integer >= 2; got 0.",
        "`between` must be a (start, end) pair",
        "`segment` must be None or one of",
    ):
        assert part in str(info.value)
    with pytest.raises(StatsInputError, match="`scenario` must be a Scenario"):
        psi_crossing(None, 0.1, reference=REF, between=REF, origin=START)  # type: ignore[arg-type]


@settings(max_examples=25)
@given(
    hours=st.floats(0.0, 24 * 7),
    length=st.floats(0.01, 72.0),
    strength=st.floats(0.0, 0.6),
    amplitude=st.floats(0.0, 0.15),
)
def test_true_psi_is_non_negative_and_zero_against_itself(
    hours: float, length: float, strength: float, amplitude: float
) -> None:
    sc = dataclasses.replace(
        SCENARIOS["covariate_shift"], drift_strength=strength, zero_daily_amplitude=amplitude
    )
    start = START + 10 * DAY + timedelta(hours=hours)
    span = (start, start + timedelta(hours=length))
    assert true_psi(sc, span, span, origin=START) == pytest.approx(0.0, abs=1e-12)
    assert true_psi(sc, span, REF, origin=START) >= 0.0


# ----------------------------------------------------------------------------------------------
# files


def test_write_world_round_trips(tmp_path: Path) -> None:
    sc = SCENARIOS["segment_drift"]
    end = START + 2 * DAY + timedelta(hours=6)
    world = write_world(
        tmp_path, sc, start=START, end=end, seed=21, extra_monitor_toml="decay.margin = 0.01"
    )
    assert world.config_path == tmp_path / "monitor.toml"
    assert (world.start, world.end, world.seed, world.scenario) == (START, end, 21, sc)
    score_files = sorted(world.scores_path.glob("date=*/part-0.parquet"))
    outcome_files = sorted(world.outcomes_path.glob("date=*/part-0.parquet"))
    assert [f.parent.name for f in score_files] == [
        "date=2024-01-01",
        "date=2024-01-02",
        "date=2024-01-03",
    ]
    assert [f.parent.name for f in outcome_files] == [f.parent.name for f in score_files]

    scores = generate_scores(sc, START, end, rng=21)
    read = [pq.read_table(f) for f in score_files]
    assert read[0].schema.names == ["timestamp", "score", "segment"]
    assert str(read[0].schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    got_ts = np.concatenate(
        [t.column("timestamp").to_numpy().astype("datetime64[us]") for t in read]
    )
    np.testing.assert_array_equal(got_ts, scores.timestamps)
    np.testing.assert_array_equal(
        np.concatenate([t.column("score").to_numpy() for t in read]), scores.scores
    )
    assert scores.segments is not None
    got_seg = np.concatenate([np.asarray(t.column("segment").to_pylist()) for t in read])
    np.testing.assert_array_equal(got_seg, scores.segments)

    outcomes = generate_outcomes(sc, START, end, rng=21)
    read = [pq.read_table(f) for f in outcome_files]
    assert read[0].schema.names == ["timestamp", "query_id", "outcome", "segment"]
    got_ids = np.concatenate([np.asarray(t.column("query_id").to_pylist()) for t in read])
    np.testing.assert_array_equal(got_ids, outcomes.query_ids)
    got_y = np.concatenate([t.column("outcome").to_numpy() for t in read])
    np.testing.assert_array_equal(got_y, outcomes.outcomes)


def test_write_world_makes_the_directory_of_a_log_with_no_row(tmp_path: Path) -> None:
    """A span before the first evaluation run (02:00) has no outcome: its directory is made
    anyway, so the feed reads as one with nothing yet (insufficient_data), not as a config
    naming a path that does not exist (error)."""
    world = write_world(
        tmp_path,
        SCENARIOS["stationary"],
        start=START + timedelta(hours=3),
        end=START + timedelta(hours=20),
        seed=1,
    )
    assert world.outcomes_path.is_dir()
    assert not list(world.outcomes_path.rglob("*.parquet"))
    assert list(world.scores_path.rglob("*.parquet"))


def test_write_world_config_has_the_contract_shape(tmp_path: Path) -> None:
    world = write_world(tmp_path, SCENARIOS["stationary"], start=START, end=START + DAY, seed=0)
    config = tomllib.loads(world.config_path.read_text())
    assert config == {
        "server": {"listen": "127.0.0.1:9464", "state_dir": "state"},
        "monitors": [
            {
                "name": "demo",
                "schedule": "1h",
                "seed": 0,
                "scores": {
                    "path": "scores",
                    "timestamp_column": "timestamp",
                    "score_column": "score",
                },
                "outcomes": {
                    "path": "outcomes",
                    "timestamp_column": "timestamp",
                    "query_column": "query_id",
                    "outcome_column": "outcome",
                },
                "windows": {"current": "1d", "reference": "7d"},
            }
        ],
    }
    # relative paths resolve against the config file's directory
    monitor = config["monitors"][0]
    assert (world.config_path.parent / monitor["scores"]["path"]) == world.scores_path
    assert (world.config_path.parent / monitor["outcomes"]["path"]) == world.outcomes_path


def test_write_world_config_with_segments_and_extras(tmp_path: Path) -> None:
    world = write_world(
        tmp_path,
        SCENARIOS["segment_drift"],
        start=START,
        end=START + DAY,
        seed=3,
        monitor_name='odd "name"',
        schedule="15m",
        listen="0.0.0.0:9999",
        extra_monitor_toml='decay.margin = 0.01\nalerts.channel = "x"',
    )
    config = tomllib.loads(world.config_path.read_text())
    monitor = config["monitors"][0]
    assert config["server"]["listen"] == "0.0.0.0:9999"
    assert (monitor["name"], monitor["schedule"], monitor["seed"]) == ('odd "name"', "15m", 3)
    assert monitor["scores"]["segment_column"] == "segment"
    assert monitor["outcomes"]["segment_column"] == "segment"
    assert monitor["decay"] == {"margin": 0.01}
    assert monitor["alerts"] == {"channel": "x"}


def test_write_world_again_with_a_later_end_grows_the_same_world(tmp_path: Path) -> None:
    sc = SCENARIOS["abrupt_decay"]
    first = write_world(tmp_path, sc, start=START, end=START + timedelta(hours=36), seed=5)
    day0 = first.scores_path / "date=2024-01-01" / "part-0.parquet"
    before = pq.read_table(day0)
    partial = pq.read_table(first.scores_path / "date=2024-01-02" / "part-0.parquet").num_rows
    write_world(tmp_path, sc, start=START, end=START + 2 * DAY, seed=5)
    assert pq.read_table(day0).equals(before)
    grown = pq.read_table(first.scores_path / "date=2024-01-02" / "part-0.parquet").num_rows
    assert grown > partial
    assert not list(tmp_path.rglob(".*"))  # no temporary files left behind
