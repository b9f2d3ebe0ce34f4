"""The reference a decay look pairs with, on daily golden-set runs (100 queries at 02:00,
hourly checks, 1-day current window, 7-day rolling reference): never the runs looked at, a
rolling one moved back before them after an outage, and the frozen one kept after a decay
clears until the rolling one holds none of the decayed runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from monitor.config import load_config
from monitor.jobs import Runner
from monitor.sources import write_parquet
from monitor.verdict import Verdict

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
QUERIES = np.array([f"q{i:03d}" for i in range(100)])


def _us(t: datetime) -> np.datetime64:
    return np.datetime64(t.replace(tzinfo=None), "us")


def _world(root: Path, shift: Callable[[int], float], days: int, runs: int | None = None) -> Runner:
    """Scores every 2 minutes (flat) for ``days`` days, and one evaluation run a day at 02:00
    (the first ``runs`` days; all by default) whose outcomes are a fixed quality per query
    plus ``shift(day)`` plus noise (sd 0.01)."""
    rng = np.random.default_rng(7)
    stamps = _us(T0) + np.arange(0, days * 24 * 60, 2).astype("timedelta64[m]")
    write_parquet(
        root / "scores" / "s.parquet", {"timestamp": stamps, "score": rng.normal(size=stamps.size)}
    )
    quality = rng.uniform(0.2, 0.8, QUERIES.size)
    for day in range(days if runs is None else runs):
        at = _us(T0 + day * DAY + timedelta(hours=2)) + np.arange(QUERIES.size).astype(
            "timedelta64[s]"
        )
        outcome = quality + shift(day) + rng.normal(0.0, 0.01, QUERIES.size)
        write_parquet(
            root / "outcomes" / f"run-{day:02d}.parquet",
            {"timestamp": at, "query_id": QUERIES, "outcome": outcome},
        )
    (root / "monitor.toml").write_text(
        '[server]\nstate_dir = "state"\n[[monitors]]\nname = "m"\nschedule = "1h"\nseed = 1\n'
        'scores.path = "scores"\noutcomes.path = "outcomes"\noutcomes.query_column = "query_id"\n'
        'windows.current = "1d"\nwindows.reference = "7d"\n'
    )
    config = load_config(root / "monitor.toml")
    return Runner(config, clock=lambda: T0 + days * DAY)


def _look(runner: Runner, day: int) -> Verdict:
    return runner.run("m", T0 + day * DAY + timedelta(hours=3)).verdict


def _when(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_relapse_after_a_decay_cleared_is_raised(tmp_path: Path) -> None:
    """Down 0.03 on days 9-11 (raised), back on day 12 (cleared), down 0.02 from day 13: the
    relapse is raised at once against the frozen reference. The rolling reference of days 6-12
    would hold the decayed runs, which pulled it down and masked the relapse for ever."""

    def shift(day: int) -> float:
        return -0.03 if 9 <= day <= 11 else (-0.02 if day >= 13 else 0.0)

    runner = _world(tmp_path, shift, 16)
    _look(runner, 8)
    states = {day: _look(runner, day) for day in range(9, 15)}
    assert [states[d].state for d in range(9, 15)] == [
        "model_decay", "model_decay", "model_decay", "ok", "model_decay", "model_decay",
    ]  # fmt: skip
    frozen = states[9].outcomes[""]
    for day in (12, 13):
        o = states[day].outcomes[""]
        assert (o.reference_start, o.reference_end) == (
            frozen.reference_start,
            frozen.reference_end,
        )
        assert o.mean_difference is not None
        assert abs(o.mean_difference - shift(day)) < 0.005


def test_a_relapse_found_after_an_outage_is_compared_with_the_healthy_runs(
    tmp_path: Path,
) -> None:
    """Raised on days 9-11, cleared on day 12, the daemon down from day 13 to day 22 while the
    golden set relapses by 0.015: the look after the outage moved the rolling reference back
    to [day 6, day 13), which held the decayed runs; the hold was judged on the unmoved window
    and released, and the relapse read as -0.002 (ok)."""

    def shift(day: int) -> float:
        return -0.03 if 9 <= day <= 11 else (-0.015 if day >= 13 else 0.0)

    runner = _world(tmp_path, shift, 24)
    states = [_look(runner, day).state for day in range(8, 13)]
    assert states == ["ok", "model_decay", "model_decay", "model_decay", "ok"]
    v = _look(runner, 22)
    o = v.outcomes[""]
    assert v.state == "model_decay"
    assert _when(o.reference_end) <= T0 + 9 * DAY + timedelta(hours=2)  # the healthy runs
    assert o.mean_difference is not None
    assert abs(o.mean_difference - shift(13)) < 0.005


def test_a_cleared_decay_keeps_its_reference_until_the_rolling_one_is_clean(
    tmp_path: Path,
) -> None:
    """After the clearing look (day 12, first run 02:00), the frozen reference is kept while the
    rolling one starts before that run, then the rolling one is used again."""

    def shift(day: int) -> float:
        return -0.03 if 9 <= day <= 11 else 0.0

    runner = _world(tmp_path, shift, 23)
    for day in range(8, 22):
        v = _look(runner, day)
        o = v.outcomes[""]
        assert v.state == ("model_decay" if 9 <= day <= 11 else "ok"), day
        rolling = v.at - 8 * DAY
        if day <= 19:  # the rolling reference would start before day 12 02:00
            assert _when(o.reference_end) <= T0 + 9 * DAY + timedelta(hours=2), day
        else:
            assert _when(o.reference_start) == rolling, day
            assert _when(o.reference_start) >= T0 + 12 * DAY


def test_a_look_after_a_long_outage_pairs_with_the_week_before_its_runs(tmp_path: Path) -> None:
    """The daemon is down from day 9 to day 19 and the golden set drops 0.05 from day 12: the
    first look pools days 9-19 and pairs them with the 7 days before them, where the rolling
    reference (after the pooled runs began) was emptied and the decay never seen."""

    def shift(day: int) -> float:
        return -0.05 if day >= 12 else 0.0

    runner = _world(tmp_path, shift, 21)
    _look(runner, 8)
    v = _look(runner, 19)
    o = v.outcomes[""]
    assert v.state == "model_decay"
    assert o.n_pairs == QUERIES.size
    start = _when(o.runs_start)
    assert start == T0 + 9 * DAY + timedelta(hours=2)
    assert _when(o.reference_end) == start
    assert _when(o.reference_end) - _when(o.reference_start) == 7 * DAY


@pytest.mark.parametrize("later", [4, 52])
def test_rows_that_land_late_in_a_looked_at_run_are_looked_at(tmp_path: Path, later: int) -> None:
    """Day 9's run is written in two files: half its queries on time (healthy), the other half
    90 minutes later, down 0.2, with the same 02:00 times. The check after they land looks at
    the run again, with them; they were older than the last look's runs_end, so they were
    never tested and entered the rolling reference. Without late rows, no check looks twice.
    ``later``: the next check's hour after day 9 00:00 (52: after an outage past the 2d15m
    lookback, which was cut at the last look's end and never counted them)."""
    runner = _world(tmp_path, lambda day: 0.0, 13, runs=9)
    for day in range(3, 9):
        assert _look(runner, day).outcomes[""].late_rows == 0
    rng = np.random.default_rng(3)
    quality = np.random.default_rng(7)  # the world's per-query quality (its second draw)
    quality.normal(size=13 * 24 * 30)
    base = quality.uniform(0.2, 0.8, QUERIES.size)
    at = _us(T0 + 9 * DAY + timedelta(hours=2)) + np.arange(QUERIES.size).astype("timedelta64[s]")
    for part, half, shift in (("a", slice(0, None, 2), 0.0), ("b", slice(1, None, 2), -0.2)):
        if part == "b":
            on_time = runner.run("m", T0 + 9 * DAY + timedelta(hours=3)).verdict
            o = on_time.outcomes[""]
            assert (on_time.state, o.n_pairs, o.late_rows) == ("ok", 50, 0)
        write_parquet(
            tmp_path / "outcomes" / f"run-09{part}.parquet",
            {
                "timestamp": at[half],
                "query_id": QUERIES[half],
                "outcome": base[half] + shift + rng.normal(0.0, 0.01, 50),
            },
        )
    late = runner.run("m", T0 + 9 * DAY + timedelta(hours=later)).verdict
    o = late.outcomes[""]
    assert late.state == "model_decay"
    # 49 late: the 50th (at 02:01:39) is newer than the on-time half's newest row (02:01:38)
    assert (o.new_look, o.late_rows, o.n_pairs) == (True, 49, 100)
    assert o.mean_difference is not None
    assert abs(o.mean_difference + 0.1) < 0.01
    assert "landed late" in " ".join(late.reasons)
    again = runner.run("m", T0 + 9 * DAY + timedelta(hours=later + 1)).verdict
    assert not again.outcomes[""].new_look  # counted now: no third look at the same rows


def test_a_schedule_edit_keeps_a_raised_decay_and_its_looks(tmp_path: Path) -> None:
    """Decay raised at day 9 03:00; then the schedule changes (a restart, and a SIGHUP): the
    state is reset for the drift side (its thresholds depend on the schedule), but the decay
    track, whose settings did not change, is kept. The decay stays raised since 03:00 and the
    runs already looked at are not looked at again. A schedule edit once resolved an open decay
    page and spent a look again on the same runs."""
    from monitor.store import StateStore

    runner = _world(tmp_path, lambda day: -0.05 if day >= 9 else 0.0, 11)
    for day in range(3, 10):
        _look(runner, day)
    raised = _look(runner, 9).outcomes[""]
    assert raised.decay
    assert raised.decay_since is not None
    config_path = tmp_path / "monitor.toml"
    config_path.write_text(config_path.read_text().replace('schedule = "1h"', 'schedule = "2h"'))
    edited = load_config(config_path)
    # a restart: the file was written under the old schedule
    restarted = Runner(edited, clock=lambda: T0 + 11 * DAY)
    assert restarted.board.snapshot()[0].resets["config_changed"] == 1
    later = restarted.run("m", T0 + 9 * DAY + timedelta(hours=4)).verdict
    o = later.outcomes[""]
    assert later.state == "model_decay"
    assert (o.decay, o.new_look, o.decay_since) == (True, False, raised.decay_since)
    saved = StateStore(tmp_path / "state").load("m")
    assert saved.decay.active == {"": _when(raised.decay_since)}
    # a reload (SIGHUP) that changes the schedule back: kept in memory too
    runner.reconfigure(load_config(config_path), reset={"m"})
    assert runner.board.state("m").decay.active == {"": _when(raised.decay_since)}
    # a change of the decay settings themselves starts the track over
    config_path.write_text(
        config_path.read_text().replace("seed = 1\n", "seed = 1\ndecay.margin = 0.01\n")
    )
    fresh = Runner(load_config(config_path), clock=lambda: T0 + 11 * DAY)
    assert not fresh.board.state("m").decay.active


def test_the_frozen_reference_outlives_an_outage_look_that_moved_back(tmp_path: Path) -> None:
    """Cleared on day 12, the daemon down to day 22: that look used the frozen reference (its
    rolling one, moved back, held the decayed runs) but then released it, judged on the unmoved
    window. Relapsed rows of days 13-21 landing late were looked at with the moved-back rolling
    reference, decayed runs and all, and read "outcome flat" (and by a daemon checking every
    slot, never looked at: its lookback did not reach back to the outage look's runs)."""
    days = 25
    rng = np.random.default_rng(7)
    stamps = _us(T0) + np.arange(0, days * 24 * 60, 2).astype("timedelta64[m]")
    write_parquet(
        tmp_path / "scores" / "s.parquet",
        {"timestamp": stamps, "score": rng.normal(size=stamps.size)},
    )
    quality = rng.uniform(0.2, 0.8, QUERIES.size)
    noise = {d: rng.normal(0.0, 0.01, QUERIES.size) for d in range(days)}

    def write(name: str, day: int, half: slice, shift: float) -> None:
        at = _us(T0 + day * DAY + timedelta(hours=2)) + np.arange(QUERIES.size).astype(
            "timedelta64[s]"
        )
        write_parquet(
            tmp_path / "outcomes" / f"{name}-{day:02d}.parquet",
            {
                "timestamp": at[half],
                "query_id": QUERIES[half],
                "outcome": (quality + shift + noise[day])[half],
            },
        )

    for day in range(days):  # days 13-21: the even half on time, healthy
        whole = slice(None) if not 13 <= day <= 21 else slice(0, None, 2)
        write("run", day, whole, -0.03 if 9 <= day <= 11 else 0.0)
    (tmp_path / "monitor.toml").write_text(
        '[server]\nstate_dir = "state"\n[[monitors]]\nname = "m"\nschedule = "1h"\nseed = 1\n'
        'scores.path = "scores"\noutcomes.path = "outcomes"\noutcomes.query_column = '
        '"query_id"\nwindows.current = "1d"\nwindows.reference = "7d"\n'
    )
    runner = Runner(load_config(tmp_path / "monitor.toml"), clock=lambda: T0 + days * DAY)
    assert [_look(runner, day).state for day in range(8, 13)] == [
        "ok", "model_decay", "model_decay", "model_decay", "ok",
    ]  # fmt: skip
    assert _look(runner, 22).state == "ok"
    assert runner.board.state("m").decay.reference_start is not None  # still held
    for day in range(13, 22):  # the odd half lands late, relapsed
        write("late", day, slice(1, None, 2), -0.03)
    # the daemon's next slot: the outage look pooled days of runs, older than the usual
    # lookback (2d 15m), which never reached back to count their late rows
    v = runner.run("m", T0 + 22 * DAY + timedelta(hours=4)).verdict
    o = v.outcomes[""]
    assert v.state == "model_decay"
    assert o.late_rows == 450
    assert _when(o.reference_end) <= T0 + 9 * DAY + timedelta(hours=3)  # the healthy runs
