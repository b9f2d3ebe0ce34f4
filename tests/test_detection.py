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
