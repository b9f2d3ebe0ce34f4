"""The exporter: metric families built from the latest verdicts, read from a fresh registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from monitor.config import MonitorConfig, parse_config
from monitor.exporter import make_registry, render
from monitor.jobs import RESET_REASONS, Board, RunRecord
from monitor.verdict import STATES, MonitorState, alarm_plan, error_verdict, evaluate
from tests.test_verdict import AT, check_data, segment


def monitors(*names: str) -> tuple[MonitorConfig, ...]:
    docs = [{"name": n, "scores": {"path": "s"}, "outcomes": {"path": "o"}} for n in names]
    return parse_config({"monitors": docs}, base=Path("/tmp")).monitors


def record_decay(board: Board, m: MonitorConfig) -> None:
    seg = segment(np.random.default_rng(1), AT, decay=0.05)
    verdict, state = evaluate(m, AT, check_data(AT, {"": seg}), MonitorState())
    started = AT + timedelta(seconds=5)
    state = MonitorState(
        drift=state.drift,
        decay=state.decay,
        state=verdict.state,
        state_since=started,
        last_at=AT,
        last_run=started,
        last_success=started,
    )
    samples = {("scores", "current"): 2000, ("outcomes", "current"): 300}
    board.record(RunRecord(verdict, started, 0.25, 1234, samples), state)


def test_states_and_statistics_after_a_decay_run() -> None:
    (a, b) = monitors("a", "b")
    board = Board([a, b], {})
    record_decay(board, a)
    registry = make_registry(board)
    get = registry.get_sample_value
    for s in STATES:
        assert get("retrieval_monitor_state", {"monitor": "a", "state": s}) == (
            1.0 if s == "model_decay" else 0.0
        )
    assert get("retrieval_monitor_model_decay", {"monitor": "a", "segment": ""}) == 1.0
    assert get("retrieval_monitor_input_drift", {"monitor": "a", "segment": ""}) == 0.0
    diff = get("retrieval_monitor_outcome_mean_difference", {"monitor": "a", "segment": ""})
    assert diff is not None
    assert diff < -0.04
    low = get("retrieval_monitor_outcome_ci_lower", {"monitor": "a", "segment": ""})
    high = get("retrieval_monitor_outcome_ci_upper", {"monitor": "a", "segment": ""})
    assert low is not None
    assert high is not None
    assert low <= diff <= high
    assert get("retrieval_monitor_outcome_pairs", {"monitor": "a", "segment": ""}) == 300
    assert get("retrieval_monitor_psi", {"monitor": "a", "segment": ""}) is not None
    assert get("retrieval_monitor_outcome_alpha", {"monitor": "a"}) == pytest.approx(0.05 / 31)
    plan = alarm_plan(a)
    assert get("retrieval_monitor_drift_cusum_threshold", {"monitor": "a"}) == pytest.approx(
        plan.drift_h
    )
    assert plan.drift_h > 7.94  # above the independent-block design: reference shared
    assert (
        get(
            "retrieval_monitor_window_samples",
            {"monitor": "a", "source": "scores", "window": "current"},
        )
        == 2000
    )
    assert get("retrieval_monitor_runs_total", {"monitor": "a"}) == 1
    assert get("retrieval_monitor_run_failures_total", {"monitor": "a"}) == 0
    assert get("retrieval_monitor_last_run_duration_seconds", {"monitor": "a"}) == 0.25
    assert get("retrieval_monitor_schedule_interval_seconds", {"monitor": "a"}) == 3600
    assert (
        get("retrieval_monitor_last_success_timestamp_seconds", {"monitor": "a"})
        == (AT + timedelta(seconds=5)).timestamp()
    )
    # monitor b has not run: no state is claimed, no statistic is made up
    assert all(get("retrieval_monitor_state", {"monitor": "b", "state": s}) == 0 for s in STATES)
    assert get("retrieval_monitor_psi", {"monitor": "b", "segment": ""}) is None
    assert get("retrieval_monitor_runs_total", {"monitor": "b"}) == 0
    assert get("retrieval_monitor_build_info", {"version": "0.1.0"}) == 1


def test_error_run_exports_no_statistics_and_counts_a_failure() -> None:
    (a,) = monitors("a")
    board = Board([a], {})
    started = datetime(2026, 11, 30, 1, tzinfo=UTC)
    verdict = error_verdict("a", AT, "scores: file x.parquet: not a parquet file")
    state = MonitorState(state="error", state_since=started, last_run=started)
    board.record(RunRecord(verdict, started, 0.1), state)
    get = make_registry(board).get_sample_value
    assert get("retrieval_monitor_state", {"monitor": "a", "state": "error"}) == 1
    assert get("retrieval_monitor_run_failures_total", {"monitor": "a"}) == 1
    assert get("retrieval_monitor_psi", {"monitor": "a", "segment": ""}) is None
    assert get("retrieval_monitor_last_success_timestamp_seconds", {"monitor": "a"}) is None


def test_a_raised_alarm_stays_exported_through_an_error_and_a_restart() -> None:
    """A raised decay (and drift) alarm is exported from the monitor's state while the latest
    check is an error and before the first check after a start, with the last look's outcome
    gauges. They once disappeared: an errored check or a restart during a decay incident
    resolved RetrievalModelDecay (which has no keep_firing_for) and paged again after it."""
    from dataclasses import replace

    (a,) = monitors("a")
    board = Board([a], {})
    record_decay(board, a)
    raised = board.state("a")
    assert raised.decay.active
    label = {"monitor": "a", "segment": ""}
    diff = make_registry(board).get_sample_value("retrieval_monitor_outcome_mean_difference", label)
    started = AT + timedelta(hours=1)
    board.record(
        RunRecord(error_verdict("a", started, "scores: x.parquet unreadable"), started, 0.1),
        replace(raised, state="error"),
    )
    restarted = Board([a], {"a": raised})  # a new process: the state file, no run yet
    for b in (board, restarted):
        get = make_registry(b).get_sample_value
        assert get("retrieval_monitor_model_decay", label) == 1.0
        assert get("retrieval_monitor_input_drift", label) == 0.0
        assert get("retrieval_monitor_outcome_mean_difference", label) == diff
        assert get("retrieval_monitor_psi", label) is None  # the latest check's alone
    cleared = replace(raised, decay=replace(raised.decay, active={}))
    get = make_registry(Board([a], {"a": cleared})).get_sample_value
    assert get("retrieval_monitor_model_decay", label) == 0.0


def test_removed_monitor_disappears_and_help_says_scheduled() -> None:
    (a, b) = monitors("a", "b")
    old = Board([a, b], {})
    record_decay(old, b)
    assert b'monitor="b"' in render(make_registry(old))
    new = Board([a], {"a": MonitorState(state="ok", state_since=AT)})  # config without b
    text = render(make_registry(new)).decode()
    assert 'monitor="b"' not in text
    assert 'retrieval_monitor_state{monitor="a",state="ok"} 1.0' in text
    assert "# HELP retrieval_monitor_psi" in text
    assert "Computed on the monitor's schedule, not at scrape time." in text
    helps = [line for line in text.splitlines() if line.startswith("# HELP")]
    assert not [h for h in helps if h.count("Computed on the monitor's schedule") > 1]


def test_persistence_metrics() -> None:
    (a, b) = monitors("a", "b")
    board = Board([a, b], {})
    t = datetime(2026, 12, 1, tzinfo=UTC)
    board.saved("a", t)
    board.save_failed("b", "OSError: [Errno 30] Read-only file system", t)
    board.save_failed("b", "OSError: [Errno 30] Read-only file system", t)
    board.reset("b", "future")
    with pytest.raises(ValueError, match="`reason` must be one of"):
        board.reset("b", "cosmic_rays")
    get = make_registry(board).get_sample_value
    assert get("retrieval_monitor_state_save_failures_total", {"monitor": "a"}) == 0.0
    assert get("retrieval_monitor_state_save_failures_total", {"monitor": "b"}) == 2.0
    ts = "retrieval_monitor_last_state_save_timestamp_seconds"
    assert get(ts, {"monitor": "a"}) == t.timestamp()
    assert get(ts, {"monitor": "b"}) is None
    for reason in RESET_REASONS:  # every reason is exported, zeros included (bounded labels)
        got = get("retrieval_monitor_state_resets_total", {"monitor": "b", "reason": reason})
        assert got == (1.0 if reason == "future" else 0.0)
    board.reconfigure([a], {})  # SIGHUP removed b: its series disappear
    get = make_registry(board).get_sample_value
    assert get("retrieval_monitor_state_save_failures_total", {"monitor": "b"}) is None
    text = render(make_registry(board)).decode()
    assert "# TYPE retrieval_monitor_state_resets_total counter" in text


def test_a_cron_monitor_exports_its_longest_gap_for_the_stale_alerts() -> None:
    """RetrievalMonitorStale fires past twice ``schedule_interval_seconds``. For a weekday
    schedule the exported value was the average gap (1d 8h 44m), whose double is shorter
    than the weekend: the alert fired every Monday before the first check was due."""
    paths = {"scores": {"path": "s"}, "outcomes": {"path": "o"}}
    docs = [
        {"name": "weekday", "schedule": "0 9 * * MON-FRI", **paths},
        {"name": "hourly", "schedule": "1h", **paths},
    ]
    weekday, hourly = parse_config({"monitors": docs}, base=Path("/tmp")).monitors
    get = make_registry(Board([weekday, hourly], {})).get_sample_value
    assert get("retrieval_monitor_schedule_interval_seconds", {"monitor": "weekday"}) == 3 * 86400
    assert get("retrieval_monitor_schedule_interval_seconds", {"monitor": "hourly"}) == 3600


def test_the_exported_alpha_is_the_latest_looks() -> None:
    """A look sooner after the previous spends less alpha (hourly evaluation runs: 6.7e-5
    against the plan's 1.6e-3 for a look a day after the last). outcome_alpha, which the
    adjusted p-value is read against, is the look's, not the plan's."""
    from dataclasses import replace

    (a,) = monitors("a")
    board = Board([a], {})
    record_decay(board, a)
    run = board.snapshot()[0].latest
    assert run is not None
    planned = run.verdict.plan
    assert planned is not None
    looked = {
        k: replace(o, alpha=planned.decay_alpha / 24) for k, o in run.verdict.outcomes.items()
    }
    board.record(replace(run, verdict=replace(run.verdict, outcomes=looked)), board.state("a"))
    get = make_registry(board).get_sample_value
    assert get("retrieval_monitor_outcome_alpha", {"monitor": "a"}) == pytest.approx(
        planned.decay_alpha / 24
    )
