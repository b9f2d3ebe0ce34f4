"""The detection benchmark's small CI version: issue 9's worlds through the daemon's code path.

Each test replays simulated months with ``bench/detection.py`` (``monitor.backtest`` over parquet
worlds, the shipped defaults) and checks the contract: no false drift alarm on a strong daily and
weekly cycle (and the phase-blind rule on the same data does alarm, so the test can fail), decay
named at the first check after the evaluation run lands and held without flapping, a drift on
few scores an hour raised once and held, and a dead score feed reported as ``insufficient_data``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.bench_modules import load_bench

REPO = Path(__file__).resolve().parent.parent


detection: Any = load_bench("detection")
pytestmark = pytest.mark.slow


def test_strong_seasonality_holds_and_the_phase_blind_rule_does_not(tmp_path: Path) -> None:
    phased = detection.run_month(detection.WORLDS["strong_seasonality"], 0, tmp_path / "a")
    blind = detection.run_month(
        detection.WORLDS["strong_seasonality/phase-blind"], 0, tmp_path / "b"
    )
    assert phased.drift_alarms == 0
    assert phased.decay_alarms == 0
    # the hour-blind comparison pages for nights and weekends (2 raises this month since a raised
    # alarm holds until the clearing CUSUM crosses; 7 with the band alone)
    assert blind.drift_alarms >= 2


def test_decay_is_named_at_the_first_check_after_the_run_lands(tmp_path: Path) -> None:
    # onset 13:00; the next daily run starts at 02:00 and ends by 02:20; hourly checks
    r = detection.run_month(detection.WORLDS["decay_h13"], 0, tmp_path)
    assert r.delay_hours is not None
    assert r.delay_hours <= 13 + 2  # the 03:00 check, one interval after landing
    assert r.changes_after_onset == 1  # raised once, never flapping back while it persists
    assert r.hours_right is not None
    assert r.hours_right > 0.9


def test_a_drift_on_few_scores_is_raised_once_and_held(tmp_path: Path) -> None:
    # 300 scores an hour, true PSI 2.5 x the tolerance: a block's point estimate often dips
    # into the clearing band at night; before the clearing CUSUM this world flapped 9 times
    r = detection.run_month(detection.WORLDS["step_drift_0.05_300/h"], 0, tmp_path)
    assert r.delay_hours is not None
    assert r.changes_after_onset == 1
    assert r.hours_right is not None
    assert r.hours_right > 0.85
    assert r.drift_alarms == 0  # nothing before the onset


def test_dead_score_feed_is_insufficient_data(tmp_path: Path) -> None:
    r = detection.run_month(detection.WORLDS["dead_feed"], 0, tmp_path)
    assert r.delay_hours is not None
    assert r.delay_hours <= 3  # max_lag 2 h for an hourly schedule, then the next check
    assert r.drift_alarms == 0


def test_wilson_interval_brackets_the_rate() -> None:
    low, high = detection.wilson_interval(3, 40)
    assert low < 3 / 40 < high
    assert detection.wilson_interval(0, 10)[0] == 0.0


@pytest.mark.parametrize("outage", [False, True], ids=["young-monitor", "reference-outage"])
def test_hours_the_reference_lacks_raise_no_false_drift(tmp_path: Path, outage: bool) -> None:
    """A strong daily and weekly cycle, nothing changing: a monitor started 3 days into its
    log (its 7-day reference and anchor lack most hours of the week), or a 6-hour feed
    outage in the reference week. Blocks in hours with no reference rows were compared
    with the whole week's mix: data_drift for most of those hours (a review's repro: ~75%
    of hours for 5 weeks; 9 hours after the outage)."""
    from dataclasses import replace
    from datetime import UTC, datetime, timedelta

    from monitor.backtest import backtest
    from monitor.config import load_config
    from monitor.simulate import SCENARIOS, write_world

    origin = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday
    scenario = SCENARIOS["strong_seasonality"]
    if outage:
        night = (timedelta(days=1), timedelta(days=1, hours=6))
        scenario = replace(scenario, name="outage", scores_outage=night)
    world = write_world(
        tmp_path / "w", scenario, start=origin, end=origin + timedelta(days=10), seed=11
    )
    start = origin + (timedelta(days=7, hours=18) if outage else timedelta(days=3))
    (result,) = backtest(load_config(world.config_path), start, origin + timedelta(days=10))
    states = [v.state for v in result.verdicts]
    assert len(states) >= 48
    assert "data_drift" not in states
    if outage:  # the outage's hours of the week came round, with no evidence from them
        said = " ".join(r for v in result.verdicts for r in v.reasons)
        assert "too few of them in hours the reference holds" in said


def test_an_alarm_at_the_onset_slot_is_false_and_a_false_decay_fails_the_bench() -> None:
    """Two counting rules of the bench: the check at the onset slot decides on the window
    before it, so an alarm there is false (it was neither false nor a detection's delay);
    and a world with no real change fails on false decay alarms too (only drift was read,
    so a decay-only null world could never fail ``make bench``)."""
    from dataclasses import dataclass
    from datetime import UTC, datetime, timedelta

    @dataclass
    class Check:
        at: datetime
        state: str

    onset = datetime(2026, 1, 10, tzinfo=UTC)
    states = ["ok", "ok", "data_drift", "data_drift"]
    checks = [Check(onset + (k - 2) * timedelta(hours=1), s) for k, s in enumerate(states)]
    assert detection.false_alarms(checks, onset) == (1, 0)  # raised at the onset slot
    assert detection.false_alarms(checks, onset - timedelta(hours=1)) == (0, 0)
    quiet = {"p_false_drift_ci": (0.0, 0.16), "p_false_decay_ci": (0.0, 0.16)}
    loud = {"p_false_drift_ci": (0.0, 0.16), "p_false_decay_ci": (0.84, 1.0)}
    summary = {"stationary": quiet, "decay_at_margin": loud, "x/phase-blind": loud}
    assert detection.null_failures(summary) == ["decay_at_margin", "x/phase-blind"]
    drifting = {"p_false_drift_ci": (0.84, 1.0), "p_false_decay_ci": (0.0, 0.16)}
    assert detection.null_failures({"a": drifting, "a/phase-blind": drifting}) == ["a"]


def test_failed_checks_and_missed_months_show_in_the_summary() -> None:
    """A month whose checks all ended in error read as a perfect null month (no alarm, nothing
    insufficient), and a month that never detected vanished from the delays with no count of
    the months that did; the median of two delays was the larger."""
    result = detection.MonthResult
    rows = [
        result("w", 0, 0, 0, 3.0, 0.9, 1, 1.0),
        result("w", 1, 0, 0, 5.0, 0.9, 1, 1.0),
        result("w", 2, 0, 0, None, 0.0, 0, 1.0),
        result("broken", 0, 0, 0, None, None, None, 1.0, errors=720),
    ]
    summary = detection.summarize(rows)
    assert summary["w"]["detected_months"] == 2
    assert summary["w"]["delay_median_h"] == 4.0
    assert summary["broken"]["error_checks"] == 720
    table = detection.format_table(summary)
    assert "| w | 3 |" in table
    assert "| 2/3 | 4 / 5 / 5 |" in table
    assert table.rstrip().endswith("| 720 |")
    assert detection.run_failures(summary) == [
        "checks ended in error in ['broken']: their months decide nothing"
    ]
    assert detection.run_failures({"w": summary["w"]}) == []
