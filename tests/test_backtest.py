"""``monitor backtest``: the replay reproduces the daemon check for check, and its outputs."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.backtest import (
    CachedReader,
    CheckRow,
    MemoryStore,
    backtest,
    format_csv,
    format_json,
    run_backtest_cli,
    segment_alarms,
    summarize,
)
from monitor.cli import main as cli_main
from monitor.config import Config, MonitorConfig, load_config
from monitor.daemon import Daemon
from monitor.errors import BadValuesError
from monitor.jobs import ParquetReader, RunRecord
from monitor.simulate import SCENARIOS, write_world
from monitor.sources import ScoreSpec, Window, read_scores, write_parquet
from monitor.stats import baseline_positions, build_baseline, drift_tests
from monitor.verdict import STATES, InputReport, MonitorState, OutcomeReport, Verdict

ORIGIN = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


def _world(root: Path, scenario: str, *, fixed_reference: bool = False) -> Config:
    sc = dataclasses.replace(SCENARIOS[scenario], scores_per_hour=300)
    world = write_world(
        root, sc, start=ORIGIN, end=ORIGIN + 19 * DAY, seed=5, schedule="2h", listen="127.0.0.1:0"
    )
    if fixed_reference:
        text = world.config_path.read_text().replace('windows.reference = "7d"\n', "")
        text += (
            'windows.reference_start = "2026-03-02T00:00:00Z"\n'
            'windows.reference_end = "2026-03-09T00:00:00Z"\n'
            # 45 scores/h in segment 'fr': hour-of-week phases would leave one reference copy per
            # phase and take days to reach the alarm; these tests are about the replay path
            'drift.seasonality = "none"\n'
        )
        world.config_path.write_text(text)
    return load_config(world.config_path)


@pytest.fixture(scope="module")
def drift_and_decay(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """A rolling-reference world whose drift and decay both start on day 15 (2026-03-16)."""
    return _world(tmp_path_factory.mktemp("dd"), "drift_and_decay")


@pytest.fixture(scope="module")
def segmented_fixed(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """Three segments, drift in 'fr' from day 15, a fixed reference (the cached-baseline path)."""
    return _world(tmp_path_factory.mktemp("seg"), "segment_drift", fixed_reference=True)


def _with_state_dir(config: Config, directory: Path) -> Config:
    return dataclasses.replace(
        config, server=dataclasses.replace(config.server, state_dir=directory)
    )


def _run_daemon(config: Config, slots: list[datetime]) -> list[Verdict]:
    """Run the real daemon in-process, feeding it ``slots`` one per tick; stop when all ran."""
    pending = list(slots)
    records: list[RunRecord] = []
    all_ran = threading.Event()
    lock = threading.Lock()

    def slot_source(monitor: MonitorConfig) -> datetime | None:
        with lock:
            return pending.pop(0) if pending else None

    def on_run(record: RunRecord) -> None:
        records.append(record)
        if len(records) == len(slots):
            all_ran.set()

    daemon = Daemon(config, slot_source=slot_source, tick=timedelta(seconds=0.02), on_run=on_run)
    thread = threading.Thread(target=daemon.serve, kwargs={"install_signals": False})
    thread.start()
    try:
        finished = all_ran.wait(timeout=120)
    finally:
        daemon.stop()
        thread.join(timeout=60)
    assert finished, f"the daemon ran {len(records)} of {len(slots)} slots within 120 s"
    assert not thread.is_alive()
    return [r.verdict for r in records]


def _comparable(v: Verdict) -> dict[str, Any]:
    """A verdict's JSON, freshness included: the daemon reports the newest rows before its
    slot (once the newest row of the whole source, which a replay could not match)."""
    return v.to_dict()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("world", "start", "end"),
    [
        ("drift_and_decay", ORIGIN + 14 * DAY, ORIGIN + 17 * DAY),
        ("segmented_fixed", ORIGIN + 15 * DAY, ORIGIN + 17 * DAY),
    ],
)
def test_backtest_reproduces_daemon(
    world: str, start: datetime, end: datetime, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    config: Config = request.getfixturevalue(world)
    config = _with_state_dir(config, tmp_path / "daemon-state")
    slots = config.monitors[0].schedule.slots(start, end)
    daemon_verdicts = _run_daemon(config, slots)
    (result,) = backtest(config, start, end)

    assert [v.at for v in daemon_verdicts] == slots == [c.at for c in result.checks]
    assert [v.state for v in result.verdicts] == [v.state for v in daemon_verdicts]
    for mine, theirs in zip(result.verdicts, daemon_verdicts, strict=True):
        assert _comparable(mine) == _comparable(theirs)
    # the history is not trivial: both kinds of change happen within the replay
    states = {c.state for c in result.checks}
    assert "ok" in states
    assert states & {"data_drift", "model_decay"}
    # the sequential state the daemon persisted is the one the replay ends with
    saved = json.loads((tmp_path / "daemon-state" / "demo.json").read_text())
    final = MonitorState.from_dict(saved)
    assert final.state == result.checks[-1].state
    assert final.last_at == slots[-1]


def test_a_feed_dead_before_the_replayed_span_says_since_when(tmp_path: Path) -> None:
    """The score feed stopped on day 5; a replay from day 15 (its span starts on day 7) reports
    the day-5 row as the newest score, as the daemon does, where it said 'never', and the same
    slot answered differently with another --from."""
    sc = dataclasses.replace(
        SCENARIOS["dead_feed"], scores_per_hour=60, scores_stop=timedelta(days=5)
    )
    world = write_world(
        tmp_path / "w", sc, start=ORIGIN, end=ORIGIN + 17 * DAY, seed=5, schedule="6h"
    )
    config = _with_state_dir(load_config(world.config_path), tmp_path / "state")
    slots = config.monitors[0].schedule.slots(ORIGIN + 15 * DAY, ORIGIN + 16 * DAY)
    daemon = _run_daemon(config, slots)
    for start in (ORIGIN + 11 * DAY, ORIGIN + 15 * DAY):
        (result,) = backtest(config, start, ORIGIN + 16 * DAY)
        replayed = {v.at: v for v in result.verdicts}
        for theirs in daemon:
            mine = replayed[theirs.at]
            assert theirs.newest_score is not None
            assert theirs.newest_score < ORIGIN + 5 * DAY
            assert mine.newest_score == theirs.newest_score, (start, theirs.at)
            stale = [[r for r in v.reasons if "score" in r] for v in (mine, theirs)]
            assert stale[0] == stale[1]
            assert any("stale since 2026-03-05" in r for r in stale[0])


def test_backtest_never_writes_state(drift_and_decay: Config, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    marker = state_dir / "demo.json"
    marker.write_text(json.dumps(MonitorState(state="model_decay").to_dict()))
    before = sorted((p.name, p.stat().st_mtime_ns, p.read_bytes()) for p in state_dir.iterdir())
    config = _with_state_dir(drift_and_decay, state_dir)
    (result,) = backtest(config, ORIGIN + 10 * DAY, ORIGIN + 10 * DAY + 6 * HOUR)
    after = sorted((p.name, p.stat().st_mtime_ns, p.read_bytes()) for p in state_dir.iterdir())
    assert after == before
    # ... and it did not start from the persisted state either
    assert result.checks[0].state == "ok"


def test_memory_store_never_touches_disk() -> None:
    store = MemoryStore()
    assert store.load("m") == MonitorState()
    store.save("m", MonitorState(state="ok"))
    assert store.load("m").state == "ok"
    with pytest.raises(TypeError, match="no state file"):
        store.path("m")


@pytest.fixture(scope="module")
def short_run(drift_and_decay: Config) -> Any:
    start, end = ORIGIN + 15 * DAY, ORIGIN + 16 * DAY
    return backtest(drift_and_decay, start, end)


def test_json_shape(short_run: Any) -> None:
    doc = json.loads(format_json(short_run))
    assert set(doc) == {"monitor", "from", "to", "checks", "changes", "summary"}
    assert doc["monitor"] == "demo"
    assert doc["from"] == "2026-03-16T00:00:00Z"
    assert doc["to"] == "2026-03-17T00:00:00Z"
    assert len(doc["checks"]) == 13  # 2h slots in [from, to], both ends included
    for check in doc["checks"]:
        assert set(check) == {
            "at",
            "state",
            "psi",
            "ks_statistic",
            "outcome_mean_difference",
            "outcome_pvalue",
            "cusum",
        }
        assert check["state"] in STATES
    assert [c["at"] for c in doc["checks"]] == sorted(c["at"] for c in doc["checks"])
    assert doc["changes"][0]["from"] is None
    assert doc["changes"][0]["to"] == doc["checks"][0]["state"]
    for change in doc["changes"]:
        assert set(change) == {"at", "from", "to", "reason"}
        assert change["from"] != change["to"]
    summary = doc["summary"]
    assert set(summary) == {
        "checks",
        "alarms",
        "first_alarm",
        "first_alarm_kind",
        "hours_in_state",
        "final_state",
        "segment_alarms",
    }
    assert set(summary["segment_alarms"]) == {"data_drift", "model_decay"}
    assert summary["checks"] == 13
    assert sum(summary["hours_in_state"].values()) == pytest.approx(24.0)
    # several monitors: a list of documents
    both = json.loads(format_json([short_run[0], short_run[0]]))
    assert isinstance(both, list)
    assert len(both) == 2


def test_csv_shape(short_run: Any) -> None:
    rows = list(csv.reader(io.StringIO(format_csv(short_run))))
    assert rows[0] == [
        "monitor",
        "at",
        "state",
        "psi",
        "ks_statistic",
        "outcome_mean_difference",
        "outcome_pvalue",
        "cusum",
    ]
    assert len(rows) == 1 + len(short_run[0].checks)
    for row, check in zip(rows[1:], short_run[0].checks, strict=True):
        assert row[0] == "demo"
        assert row[2] == check.state
        assert float(row[3]) == check.psi
        assert float(row[7]) == check.cusum


def test_cli_backtest_json(drift_and_decay: Config, capsys: pytest.CaptureFixture[str]) -> None:
    assert drift_and_decay.path is not None
    code = cli_main(
        [
            "backtest",
            "--config",
            str(drift_and_decay.path),
            "--from",
            "2026-03-16T00:00:00Z",
            "--to",
            "2026-03-16T04:00:00Z",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    doc = json.loads(captured.out)
    assert [c["at"] for c in doc["checks"]] == [
        "2026-03-16T00:00:00Z",
        "2026-03-16T02:00:00Z",
        "2026-03-16T04:00:00Z",
    ]
    assert captured.err == ""  # not a terminal: no progress bar


def test_an_errored_slot_is_a_json_log_line_on_stderr(tmp_path: Path) -> None:
    """Each slot whose check ended in error writes its warning as a JSON line naming the
    monitor, the slot and the error, as ``check`` writes them; with logging never set up, the
    last-resort handler printed the bare word "check" instead. A process of its own: the log
    set-up is the process's."""
    import subprocess
    import sys

    config = _world(tmp_path, "stationary")
    assert config.path is not None
    broken = sorted(Path(config.monitors[0].scores.path).glob("date=2026-03-16/*.parquet"))[0]
    broken.write_bytes(b"not parquet")
    argv = ["backtest", "--config", str(config.path), "--csv"]
    argv += ["--from", "2026-03-16T00:00:00Z", "--to", "2026-03-16T04:00:00Z"]
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", *argv], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    checks = [line for line in lines if line["message"] == "check"]
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    errored = [datetime.fromisoformat(r[1].replace("Z", "+00:00")) for r in rows if r[2] == "error"]
    assert len(errored) == 2  # the slots whose current window holds the broken file
    assert [datetime.fromisoformat(c["at"]) for c in checks] == errored, proc.stderr
    for c in checks:
        assert c["monitor"] == "demo"
        assert str(broken) in c["error"], c


def test_text_report(short_run: Any, drift_and_decay: Config) -> None:
    out = io.StringIO()
    code = run_backtest_cli(
        drift_and_decay, ORIGIN + 15 * DAY, ORIGIN + 15 * DAY + 4 * HOUR, out=out, err=io.StringIO()
    )
    assert code == 0
    text = out.getvalue()
    assert "monitor demo: 3 checks" in text
    assert "-> " in text
    assert "alarms:" in text
    assert "segment alarms (the per-segment alerts' raises): " in text
    assert "hours in state:" in text


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(drift_and_decay: Config) -> None:
    start, end = ORIGIN + 15 * DAY, ORIGIN + 15 * DAY + 4 * HOUR
    plain, tty = io.StringIO(), _Tty()
    assert run_backtest_cli(drift_and_decay, start, end, out=io.StringIO(), err=plain) == 0
    assert run_backtest_cli(drift_and_decay, start, end, out=io.StringIO(), err=tty) == 0
    assert plain.getvalue() == ""
    assert tty.getvalue().startswith("\r[")
    assert "3/3 demo" in tty.getvalue()
    assert tty.getvalue().endswith("\n")


def test_a_long_replay_says_so_first(
    drift_and_decay: Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check --at`` before the daemon's state replays every slot from the start: a replay of
    ``_LONG_REPLAY`` slots or more (minutes on a 5-minute schedule) logs one line first, with
    the count and how to shorten it; a shorter one logs nothing."""
    import monitor.backtest as bt

    at = ORIGIN + 16 * DAY
    start = at - DAY  # 12 slots of a 2-hour schedule
    caplog.set_level(logging.WARNING, logger="monitor")
    monkeypatch.setattr(bt, "_LONG_REPLAY", 13)
    bt.replay_check(drift_and_decay, "demo", at, start)
    assert not [r for r in caplog.records if r.getMessage().startswith("replaying")]
    monkeypatch.setattr(bt, "_LONG_REPLAY", 12)
    bt.replay_check(drift_and_decay, "demo", at, start)
    (line,) = [r for r in caplog.records if r.getMessage().startswith("replaying")]
    assert line.__dict__["slots"] == 12
    assert "--replay-from" in line.getMessage()


@pytest.mark.parametrize(
    ("start", "end", "monitor", "message"),
    [
        (ORIGIN + 2 * DAY, ORIGIN + DAY, None, "--from must be before --to"),
        (ORIGIN + DAY, ORIGIN + DAY, None, "--from must be before --to"),
        (ORIGIN + DAY + 1 * HOUR, ORIGIN + DAY + 90 * 60 * timedelta(seconds=1), None, "no slot"),
        (ORIGIN, ORIGIN + DAY, "nope", "no monitor named 'nope'"),
    ],
)
def test_invalid_range_exit_3(
    drift_and_decay: Config, start: datetime, end: datetime, monitor: str | None, message: str
) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = run_backtest_cli(drift_and_decay, start, end, monitor=monitor, out=out, err=err)
    assert code == 3
    assert message in err.getvalue()
    assert out.getvalue() == ""


def test_backtest_iv(drift_and_decay: Config) -> None:
    naive = datetime(2026, 3, 10)
    with pytest.raises(ValueError, match="`start` must be a timezone-aware datetime"):
        backtest(drift_and_decay, naive, ORIGIN + 11 * DAY)
    with pytest.raises(ValueError, match="`start` must be before `end`"):
        backtest(drift_and_decay, ORIGIN + 11 * DAY, ORIGIN + 10 * DAY)
    with pytest.raises(KeyError, match="no monitor named"):
        backtest(drift_and_decay, ORIGIN + 10 * DAY, ORIGIN + 11 * DAY, monitors=["nope"])
    with pytest.raises(ValueError, match="`outcome_cache_size` must be an integer >= 0; got -1"):
        CachedReader(outcome_cache_size=-1)
    with pytest.raises(TypeError, match=r"`outcome_cache_size` must be an integer >= 0; got 1\.5"):
        CachedReader(outcome_cache_size=1.5)  # type: ignore[arg-type]


# -------------------------------------------------------------------------------- summary


def _row(hour: int, state: str) -> CheckRow:
    return CheckRow(at=ORIGIN + hour * HOUR, state=state, reason=f"{state} at {hour}")


def test_summarize_hand_checked() -> None:
    # ok 0-2h, drift 2-3h, ok 3-4h, decay 4-6h, drift 6-9h (end at 9h) -> 2 drift alarms, 1 decay
    rows = [
        _row(0, "ok"),
        _row(1, "ok"),
        _row(2, "data_drift"),
        _row(3, "ok"),
        _row(4, "model_decay"),
        _row(5, "model_decay"),
        _row(6, "data_drift"),
        _row(7, "data_drift"),
    ]
    s = summarize(rows, ORIGIN + 9 * HOUR)
    assert s.checks == 8
    assert s.drift_alarms == 2
    assert s.decay_alarms == 1
    assert s.first_alarm == ORIGIN + 2 * HOUR
    assert s.first_alarm_kind == "data_drift"
    assert s.final_state == "data_drift"
    assert s.hours_in_state == {
        "ok": 3.0,
        "data_drift": 4.0,
        "model_decay": 2.0,
        "insufficient_data": 0.0,
        "error": 0.0,
    }


def test_summarize_edges() -> None:
    assert summarize([], ORIGIN).checks == 0
    s = summarize([_row(0, "model_decay"), _row(1, "error")], ORIGIN + HOUR)
    assert s.decay_alarms == 1  # the first check counts as a change from no state
    assert s.first_alarm == ORIGIN
    assert s.hours_in_state["model_decay"] == 1.0
    assert s.hours_in_state["error"] == 0.0  # the last check is at the end
    quiet = summarize([_row(0, "ok"), _row(1, "insufficient_data")], ORIGIN + 3 * HOUR)
    assert (quiet.drift_alarms, quiet.decay_alarms, quiet.first_alarm) == (0, 0, None)
    assert quiet.hours_in_state["insufficient_data"] == 2.0


def _segments(
    hour: int, state: str, drift: str = "", decay: str = "", stale: bool = False
) -> Verdict:
    """A verdict of segments a and b: those in ``drift`` / ``decay`` hold the alarm raised."""
    return Verdict(
        monitor="m",
        at=ORIGIN + hour * HOUR,
        state=state,
        reasons=(state,),
        inputs={
            s: InputReport(n_reference=500, n_current=500, decidable=True, drift=s in drift)
            for s in "ab"
        },
        outcomes={
            s: OutcomeReport(
                n_pairs=100,
                only_reference=0,
                only_current=0,
                coverage=1.0,
                decidable=True,
                decay=s in decay,
            )
            for s in "ab"
        },
        stale=("score feed stale: newest score 3h old",) if stale else (),
    )


def test_segment_alarms_count_each_segments_raise() -> None:
    verdicts = [
        _segments(0, "ok"),
        _segments(1, "model_decay", decay="b"),
        # a's drift raised while b's decay sets the state: the state's alarms miss it, the
        # RetrievalDataDrift alert of segment a fires
        _segments(2, "model_decay", drift="a", decay="b"),
        Verdict(monitor="m", at=ORIGIN + 3 * HOUR, state="error", reasons=("boom",)),
        _segments(4, "model_decay", drift="a", decay="b"),
        # a stale score feed holds the drift alert back; it fires again once the feed is back
        _segments(5, "insufficient_data", drift="a", decay="b", stale=True),
        _segments(6, "model_decay", drift="ab", decay="b"),  # b's drift: its decay holds it back
        _segments(7, "data_drift", drift="ab"),  # b's decay cleared: b's drift alert fires
    ]
    rows = [CheckRow.from_verdict(v) for v in verdicts]
    s = summarize(rows, ORIGIN + 8 * HOUR, verdicts)
    # the state's changes: model_decay entered again after the error and the stale check
    assert (s.drift_alarms, s.decay_alarms) == (1, 3)
    assert s.segment_alarms == {"data_drift": 3, "model_decay": 1}
    assert segment_alarms(verdicts[:3]) == {"data_drift": 1, "model_decay": 1}
    # an error check exports the carried alarms and no staleness: a drift the stale feed
    # held back holds again, and fires
    held = [*verdicts[:2], verdicts[5], verdicts[3], verdicts[4]]
    assert segment_alarms(held) == {"data_drift": 1, "model_decay": 1}
    assert segment_alarms([*verdicts[:2], verdicts[4], verdicts[5], verdicts[3]]) == {
        "data_drift": 2,
        "model_decay": 1,
    }
    assert summarize(rows, ORIGIN + 8 * HOUR).segment_alarms is None  # rows alone cannot say


def test_check_row_reason_names_the_state() -> None:
    v = Verdict(
        monitor="m",
        at=ORIGIN,
        state="data_drift",
        reasons=("outcome flat within +-0.01: ...", "data drift (abrupt): PSI 0.3"),
    )
    assert CheckRow.from_verdict(v).reason == "data drift (abrupt): PSI 0.3"
    ok = Verdict(monitor="m", at=ORIGIN, state="ok", reasons=("first", "second"))
    assert CheckRow.from_verdict(ok).reason == "first"
    assert CheckRow.from_verdict(ok).psi is None


# -------------------------------------------------------------------------------- the reader


def _score_log(root: Path, *, nan_at: list[int] | None = None, shuffle: bool = False) -> ScoreSpec:
    """Three days of hourly-ish scores in one file per day, with segments a/b/c (c only day 2)."""
    rng = np.random.default_rng(0)
    for day in range(3):
        n = 500
        us = np.sort(rng.integers(0, 86_400_000_000, n)) + (
            (ORIGIN + day * DAY - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        )
        scores = rng.lognormal(1.0, 0.5, n)
        segments = rng.choice(["a", "b"] if day != 2 else ["a", "b", "c"], n)
        if nan_at is not None and day == 1:
            scores[nan_at] = np.nan
        if shuffle:
            order = rng.permutation(n)
            us, scores, segments = us[order], scores[order], segments[order]
        write_parquet(
            root / f"date={(ORIGIN + day * DAY).date()}" / "part-0.parquet",
            {"timestamp": us.astype("datetime64[us]"), "score": scores, "segment": segments},
        )
    return ScoreSpec(path=str(root), segment_column="segment")


def _windows() -> list[Window]:
    return [Window(ORIGIN + k * 6 * HOUR, ORIGIN + k * 6 * HOUR + DAY) for k in range(9)] + [
        Window(ORIGIN + 2 * DAY + 20 * HOUR, ORIGIN + 3 * DAY)
    ]


@pytest.mark.parametrize("shuffle", [False, True])
def test_cached_reader_matches_parquet(tmp_path: Path, shuffle: bool) -> None:
    spec = _score_log(tmp_path, shuffle=shuffle)
    reader = CachedReader()
    reader.cover(spec, _windows())
    for w in _windows():
        for with_ts in (False, True):
            mine = reader.scores(spec, w, with_timestamps=with_ts)
            theirs = read_scores(spec, w, with_timestamps=with_ts)
            assert mine.rows == theirs.rows
            assert mine.segment_names == theirs.segment_names
            assert mine.values.flags.writeable is False
            assert mine.newest_timestamp is not None
            assert mine.newest_timestamp < w.end
            for name in theirs.segment_names:
                np.testing.assert_array_equal(
                    np.sort(mine.by_segment()[name]), np.sort(theirs.by_segment()[name])
                )
            if with_ts:
                assert mine.timestamps is not None
                assert theirs.timestamps is not None
                key_mine = np.lexsort((mine.values, mine.timestamps))
                key_theirs = np.lexsort((theirs.values, theirs.timestamps))
                np.testing.assert_array_equal(
                    mine.timestamps[key_mine], theirs.timestamps[key_theirs]
                )
                np.testing.assert_array_equal(mine.values[key_mine], theirs.values[key_theirs])
            else:
                assert mine.timestamps is None
    assert reader.span_reads == 1
    assert reader.fallback_reads == 0


def test_cached_reader_falls_back_when_rows_are_dropped(tmp_path: Path) -> None:
    """A span with NaN rows cannot give per-window drop counts: those windows are read exactly."""
    spec = dataclasses.replace(
        _score_log(tmp_path, nan_at=list(range(0, 500, 50))), max_invalid_share=0.05
    )
    reader = CachedReader()
    reader.cover(spec, _windows())
    w = Window(ORIGIN + 18 * HOUR, ORIGIN + 42 * HOUR)
    mine = reader.scores(spec, w, with_timestamps=False)
    theirs = read_scores(spec, w)
    assert mine.dropped_nan == theirs.dropped_nan > 0
    assert reader.fallback_reads == 1
    strict = dataclasses.replace(spec, max_invalid_share=0.001)
    reader.cover(strict, _windows())
    with pytest.raises(BadValuesError):
        reader.scores(strict, w, with_timestamps=False)


def test_cached_reader_outside_cover_reads_parquet(tmp_path: Path) -> None:
    spec = _score_log(tmp_path)
    reader = CachedReader()
    reader.cover(spec, [Window(ORIGIN, ORIGIN + DAY)])
    w = Window(ORIGIN + 12 * HOUR, ORIGIN + 36 * HOUR)
    assert reader.scores(spec, w, with_timestamps=False).rows == read_scores(spec, w).rows
    assert reader.fallback_reads == 1
    reader.clear()
    assert reader.scores(spec, Window(ORIGIN, ORIGIN + DAY), with_timestamps=False).rows > 0
    assert reader.fallback_reads == 2


def test_cached_reader_identity_changes_when_a_span_is_read_again_over_changed_files(
    tmp_path: Path,
) -> None:
    """A replay clears its spans at each chunk and reads them again: the identity was the
    span's bounds, the same after a correction, so a fixed reference's first baseline was kept
    (``check --at`` read the correction, decided on the old scores). It is the span's files'
    digest as they were before its read, and within one read it stays the same."""
    spec = _score_log(tmp_path)
    reader = CachedReader()
    window = Window(ORIGIN, ORIGIN + DAY)
    reader.cover(spec, [window])
    first = reader.identity(spec, window)
    assert reader.identity(spec, window) == first  # one read: one identity
    assert first == ParquetReader().identity(spec, window)
    day = tmp_path / f"date={ORIGIN.date()}" / "part-0.parquet"
    write_parquet(
        day,
        {
            "timestamp": np.array([np.datetime64(ORIGIN.replace(tzinfo=None), "us")]),
            "score": np.array([1.0]),
            "segment": np.array(["a"]),
        },
    )
    assert reader.identity(spec, window) == first  # the span read holds the old files still
    reader.clear()
    reader.cover(spec, [window])
    assert reader.identity(spec, window) != first


def test_cached_reader_memoises_outcomes(drift_and_decay: Config) -> None:
    calls: list[Window] = []

    class Counting(ParquetReader):
        def outcomes(self, spec: Any, window: Window) -> Any:
            calls.append(window)
            return super().outcomes(spec, window)

    reader = CachedReader(fallback=Counting(), outcome_cache_size=1)
    spec = drift_and_decay.monitors[0].outcomes
    a, b = Window(ORIGIN, ORIGIN + DAY), Window(ORIGIN + DAY, ORIGIN + 2 * DAY)
    first = reader.outcomes(spec, a)
    assert reader.outcomes(spec, a) is first
    reader.outcomes(spec, b)
    reader.outcomes(spec, a)
    assert calls == [a, b, a]


# ------------------------------------------------------------------ precomputed positions


@pytest.mark.parametrize("shuffle", [False, True])
def test_cached_reader_positions_match_the_window(tmp_path: Path, shuffle: bool) -> None:
    """Positions assembled from pieces equal those of the window's own values, per segment."""
    spec = _score_log(tmp_path, shuffle=shuffle)
    reader = CachedReader()
    reader.cover(spec, _windows())
    reference = read_scores(spec, Window(ORIGIN, ORIGIN + DAY)).values
    base = build_baseline(reference)
    for w in _windows():
        by_segment = reader.scores(spec, w, with_timestamps=False).by_segment()
        for name, values in by_segment.items():
            pos = reader.positions(spec, w, name, base)
            assert pos is not None
            direct = baseline_positions(base, values)
            np.testing.assert_array_equal(np.sort(pos.keys), direct.keys)
            np.testing.assert_array_equal(pos.counts, direct.counts)
            fast = drift_tests(base, values, positions=pos)
            plain = drift_tests(base, values)
            assert fast.ks == plain.ks
            assert fast.psi.statistic == plain.psi.statistic
    w = _windows()[0]
    assert reader.positions(spec, w, "zz", base) is None  # segment not in the log
    assert reader.positions(spec, Window(w.start, w.end - HOUR), "a", base) is None  # not a cut
    other = build_baseline(reference[::2])
    pos = reader.positions(spec, w, "a", other)  # a new baseline: located again
    assert pos is not None
    assert pos.baseline is other
    assert reader.fallback_reads == 0


class _PlainReader(CachedReader):
    """A CachedReader without precomputed positions: the runner takes the daemon's path."""

    def positions(self, spec: Any, window: Window, segment: str, baseline: Any) -> None:
        return None


class _CountingReader(CachedReader):
    located = 0

    def positions(self, spec: Any, window: Window, segment: str, baseline: Any) -> Any:
        pos = super().positions(spec, window, segment, baseline)
        self.located += pos is not None
        return pos


@pytest.mark.slow
def test_backtest_positions_path_identical(segmented_fixed: Config) -> None:
    """Fixed reference, three segments: every check located from cached pieces gives the same
    verdict as the normal path (which ``test_backtest_reproduces_daemon`` ties to the daemon)."""
    start, end = ORIGIN + 15 * DAY, ORIGIN + 17 * DAY
    counting = _CountingReader()
    (fast,) = backtest(segmented_fixed, start, end, reader=counting)
    (plain,) = backtest(segmented_fixed, start, end, reader=_PlainReader())
    assert counting.located >= len(fast.verdicts) * 3
    assert [v.to_dict() for v in fast.verdicts] == [v.to_dict() for v in plain.verdicts]
    assert {c.state for c in fast.checks} & {"data_drift", "model_decay"}


def test_check_at_skips_the_slots_the_daemon_never_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon, down for eleven hours, catches up with the latest slot only: its drift block
    then spans the outage. ``check --at`` a later slot replayed every slot of the outage too
    (other blocks, another "drift since", another CUSUM); it skips them, as the daemon's state
    records (``skipped``), and says what the daemon said."""
    from monitor.jobs import Runner

    origin = datetime(2026, 3, 1, tzinfo=UTC)
    day, hour = timedelta(days=1), timedelta(hours=1)
    scenario = dataclasses.replace(
        SCENARIOS["covariate_shift"], scores_per_hour=1000.0, drift_start=9 * day + 5 * hour
    )
    world = write_world(
        tmp_path / "w", scenario, start=origin, end=origin + 11 * day, seed=5, schedule="1h"
    )
    config = load_config(world.config_path)
    now = [origin]
    runner: Runner | None = None
    decided: dict[datetime, dict[str, Any]] = {}
    down = (origin + 9 * day + 4 * hour, origin + 9 * day + 15 * hour)
    for at in config.monitors[0].schedule.slots(origin + 8 * day, origin + 10 * day + 2 * hour):
        if down[0] <= at <= down[1]:
            runner = None  # the process is gone; a new one loads the state file
            continue
        runner = runner or Runner(config, clock=lambda: now[0])
        now[0] = at
        decided[at] = runner.run("demo", at).verdict.to_dict()
    state = json.loads((config.server.state_dir / "demo.json").read_text())
    assert state["skipped"] == [["2026-03-10T03:00:00Z", "2026-03-10T16:00:00Z"]]
    for at in (origin + 9 * day + 16 * hour, origin + 9 * day + 20 * hour, origin + 10 * day):
        code = cli_main(
            ["check", "--config", str(world.config_path), "--json", "--at", at.isoformat()]
        )
        (checked,) = json.loads(capsys.readouterr().out)["monitors"]
        checked.pop("replay_from")
        daemon = {k: v for k, v in decided[at].items() if k != "replay_from"}
        assert checked == daemon, at
        assert code == {"ok": 0, "data_drift": 1}[daemon["state"]]
    assert decided[origin + 10 * day]["state"] == "data_drift"


def test_check_at_after_a_settings_change_keeps_the_decay_the_daemon_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reload that changes only drift settings starts the state fresh but keeps a raised
    decay. ``check --at`` a later slot replayed from that fresh state's first slot with no
    decay at all: ``ok`` where the daemon said ``model_decay``. The state records the decay
    track it began with (``origin_decay``), and the replay starts from it."""
    from monitor.jobs import Runner

    origin = datetime(2026, 3, 1, tzinfo=UTC)
    day, hour = timedelta(days=1), timedelta(hours=1)
    scenario = dataclasses.replace(SCENARIOS["abrupt_decay"], scores_per_hour=500.0)
    world = write_world(
        tmp_path / "w", scenario, start=origin, end=origin + 18 * day, seed=5, schedule="1h"
    )
    config = load_config(world.config_path)
    now = [origin]
    runner = Runner(config, clock=lambda: now[0])
    decided: dict[datetime, dict[str, Any]] = {}
    reload_at = origin + 16 * day + 12 * hour
    edited = world.directory / "edited.toml"  # the same state_dir
    edited.write_text(world.config_path.read_text() + 'drift.seasonality = "none"\n')
    for at in config.monitors[0].schedule.slots(origin + 15 * day, origin + 17 * day + 6 * hour):
        if at == reload_at:  # SIGHUP: the drift settings changed, the decay settings did not
            runner.reconfigure(load_config(edited), reset=["demo"])
        now[0] = at
        decided[at] = runner.run("demo", at).verdict.to_dict()
    assert decided[reload_at - hour]["state"] == "model_decay"
    state = json.loads((config.server.state_dir / "demo.json").read_text())
    assert state["first_at"] == "2026-03-17T12:00:00Z"
    assert state["origin_decay"]["active"]
    for at in (reload_at + 3 * hour, origin + 17 * day + 6 * hour):
        assert decided[at]["state"] == "model_decay"
        code = cli_main(["check", "--config", str(edited), "--json", "--at", at.isoformat()])
        (checked,) = json.loads(capsys.readouterr().out)["monitors"]
        checked.pop("replay_from")
        daemon = {k: v for k, v in decided[at].items() if k != "replay_from"}
        assert checked == daemon, at
        assert code == 2


def test_a_long_replay_reads_its_windows_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay from a daemon's first slot months back read every score of those months into
    memory at once. It reads a chunk (a week and a reference span of slots) at a time; the
    verdict is the one an undivided replay gives."""
    import monitor.backtest as backtest_module

    origin = datetime(2026, 3, 1, tzinfo=UTC)
    day = timedelta(days=1)
    scenario = dataclasses.replace(SCENARIOS["drift_and_decay"], scores_per_hour=200.0)
    world = write_world(
        tmp_path / "w", scenario, start=origin, end=origin + 30 * day, seed=5, schedule="1d"
    )
    config = load_config(world.config_path)
    at, start = origin + 29 * day, origin + 8 * day
    spans: list[tuple[datetime, datetime]] = []
    cover = CachedReader.cover

    def watched(self: CachedReader, spec: Any, windows: Any) -> None:
        windows = list(windows)
        spans.append((min(w.start for w in windows), max(w.end for w in windows)))
        cover(self, spec, windows)

    monkeypatch.setattr(CachedReader, "cover", watched)
    monkeypatch.setattr(backtest_module, "_CHUNK_MIN", timedelta(days=1))
    chunked = backtest_module.replay_record(config, "demo", at, start).verdict.to_dict()
    assert len(spans) == 3  # 21 daily slots in chunks of 8 days
    assert max(b - a for a, b in spans) <= timedelta(days=16)
    monkeypatch.setattr(backtest_module, "_CHUNK_MIN", timedelta(days=365))
    spans.clear()
    whole = backtest_module.replay_record(config, "demo", at, start).verdict.to_dict()
    assert len(spans) == 1
    assert chunked == whole
    assert whole["state"] in ("data_drift", "model_decay")


def test_a_settings_change_that_keeps_the_decay_keeps_when_its_state_began(
    tmp_path: Path,
) -> None:
    """A drift-only edit during a raised decay kept the decay but moved ``state_since`` to
    the reload (on-call looked for a cause in the hour before their own edit); at a restart
    it also dropped the last success, so the stale alert's clock began at the restart."""
    from monitor.jobs import Runner

    origin = datetime(2026, 3, 1, tzinfo=UTC)
    day, _hour = timedelta(days=1), timedelta(hours=1)
    scenario = dataclasses.replace(SCENARIOS["abrupt_decay"], scores_per_hour=300.0)
    world = write_world(
        tmp_path / "w", scenario, start=origin, end=origin + 18 * day, seed=5, schedule="1h"
    )
    config = load_config(world.config_path)
    now = [origin]
    runner = Runner(config, clock=lambda: now[0])
    slots = list(config.monitors[0].schedule.slots(origin + 16 * day, origin + 17 * day))
    for at in slots[:-2]:
        now[0] = at
        runner.run("demo", at)
    before = runner.board.state("demo")
    assert before.state == "model_decay"
    assert before.state_since is not None
    assert before.last_success is not None
    edited = world.directory / "edited.toml"  # the same state_dir
    edited.write_text(world.config_path.read_text() + 'drift.seasonality = "none"\n')
    runner.reconfigure(load_config(edited), reset=["demo"])
    now[0] = slots[-2]
    assert runner.run("demo", slots[-2]).verdict.state == "model_decay"
    assert runner.board.state("demo").state_since == before.state_since
    # a restart under yet other drift settings: the state file was written for others
    again = world.directory / "again.toml"
    again.write_text(world.config_path.read_text() + "drift.tolerance = 0.03\n")
    restarted = Runner(load_config(again), clock=lambda: now[0])
    loaded = restarted.board.state("demo")
    assert loaded.last_success == runner.board.state("demo").last_success
    now[0] = slots[-1]
    assert restarted.run("demo", slots[-1]).verdict.state == "model_decay"
    assert restarted.board.state("demo").state_since == before.state_since


def test_an_unreadable_file_after_the_replayed_span_changes_no_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A half-written file in today's partition (a writer still writing it) once turned every
    replayed check into ``error`` (and ``check --at`` on a past slot into exit 3): each span's
    read looked up the source's newest row, which opens the newest partition's files, one the
    daemon at those slots never saw. Now the replay's checks are those of the clean log; the
    failed lookup is logged."""
    config = _world(tmp_path / "w", "drift_and_decay")
    start, end = ORIGIN + 15 * DAY, ORIGIN + 15 * DAY + 6 * HOUR
    clean = [v.to_dict() for v in backtest(config, start, end)[0].verdicts]
    scores = Path(config.monitors[0].scores.path)
    late = scores / f"date={(ORIGIN + 20 * DAY).date()}" / "part-1.parquet"
    late.parent.mkdir(parents=True)
    late.write_bytes(b"PAR1 half written")
    with caplog.at_level(logging.WARNING, logger="monitor"):
        again = [v.to_dict() for v in backtest(config, start, end)[0].verdicts]
    assert [v["state"] for v in again] == [v["state"] for v in clean]
    assert "error" not in {v["state"] for v in again}
    assert again == clean
    assert any("newest row could not be looked up" in r.getMessage() for r in caplog.records)
    code = cli_main(
        [
            "check",
            "--config",
            str(config.path),
            "--at",
            end.isoformat(),
            "--replay-from",
            start.isoformat(),
        ]
    )
    assert code in (0, 1, 2)


def test_a_score_glob_that_matches_no_file_replays_as_the_daemons_error(tmp_path: Path) -> None:
    """Reading a span's own files only, the replay once took a glob that matches no file for
    an empty log (the daemon's newest-row lookup is what refuses it) and replayed ordinary
    verdicts where the daemon reports the configuration's error."""
    config = _world(tmp_path / "w", "drift_and_decay")
    assert config.path is not None
    text = config.path.read_text()
    assert 'scores.path = "scores"' in text
    config.path.write_text(
        text.replace('scores.path = "scores"', 'scores.path = "scores/date=*/no*.parquet"')
    )
    config = load_config(config.path)
    start = ORIGIN + 15 * DAY
    verdicts = backtest(config, start, start + 4 * HOUR)[0].verdicts
    assert [v.state for v in verdicts] == ["error"] * len(verdicts)
    assert all("glob matches no file" in v.reasons[0] for v in verdicts), verdicts[0].reasons
