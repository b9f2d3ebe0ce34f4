"""The world simulator: determinism, the score and outcome models, and the scenarios' claims."""

from __future__ import annotations

import dataclasses
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
    SCENARIOS,
    OutcomeLog,
    Scenario,
    ScoreLog,
    generate_outcomes,
    generate_scores,
    golden_qualities,
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
