"""The exporter: metric families built from the latest verdicts, read from a fresh registry."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from monitor.config import MonitorConfig, parse_config
from monitor.exporter import make_registry, render
from monitor.jobs import RESET_REASONS, Board, RunRecord
from monitor.verdict import (
    STATES,
    CheckData,
    DecayTrack,
    DriftTrack,
    MonitorState,
    SegmentDrift,
    Verdict,
    alarm_plan,
    error_verdict,
    evaluate,
)
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
    # each source's newest row's age at the check's slot (what max_lag bounds), not at the run
    age = partial(get, "retrieval_monitor_source_age_seconds")
    assert age({"monitor": "a", "source": "scores"}) == 60
    assert age({"monitor": "a", "source": "outcomes"}) == 90 * 60
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


def test_an_alarm_of_a_segment_gone_from_the_data_is_not_carried() -> None:
    """A segment whose alarm was raised, then gone from the data, keeps its state; its gauge
    is not exported by a check (the check has no such segment), and was by every errored
    check and restart, firing RetrievalDataDrift for as long. The alarms carried are those
    of the latest check's segments."""
    from dataclasses import replace

    (a,) = monitors("a")
    raised = DriftTrack(cusum=9.0, active=True, active_since=AT)
    state = MonitorState(
        state="ok",
        drift={"web": SegmentDrift(reference=raised), "news": SegmentDrift(reference=raised)},
        segments=("web",),
    )
    get = make_registry(Board([a], {"a": state})).get_sample_value  # restarted, no run yet
    assert get("retrieval_monitor_input_drift", {"monitor": "a", "segment": "web"}) == 1.0
    assert get("retrieval_monitor_input_drift", {"monitor": "a", "segment": "news"}) is None
    unknown = replace(state, segments=None)  # a file from before segments were recorded
    get = make_registry(Board([a], {"a": unknown})).get_sample_value
    assert get("retrieval_monitor_input_drift", {"monitor": "a", "segment": "news"}) == 1.0
    doc = MonitorState.from_dict(state.to_dict())
    assert doc.segments == ("web",)


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
    # failing until a save succeeds: the counter alone let the alert go once its window passed
    assert get("retrieval_monitor_state_save_failing", {"monitor": "a"}) == 0.0
    assert get("retrieval_monitor_state_save_failing", {"monitor": "b"}) == 1.0
    board.saved("b", t)
    assert (
        make_registry(board).get_sample_value(
            "retrieval_monitor_state_save_failing", {"monitor": "b"}
        )
        == 0.0
    )
    # a reset's time: counted at start-up, before the first scrape, its counter shows no rise
    reset_ts = "retrieval_monitor_last_state_reset_timestamp_seconds"
    when = make_registry(board).get_sample_value(reset_ts, {"monitor": "b", "reason": "future"})
    assert when is not None
    assert abs(when - datetime.now(UTC).timestamp()) < 60
    never = make_registry(board).get_sample_value(reset_ts, {"monitor": "b", "reason": "syntax"})
    assert never is None
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


def record_check(board: Board, m: MonitorConfig, data: CheckData) -> Verdict:
    """Evaluates ``data`` from a fresh state and records the run on ``board``."""
    verdict, state = evaluate(m, AT, data, MonitorState())
    started = AT + timedelta(seconds=5)
    board.record(
        RunRecord(verdict, started, 0.25),
        replace(state, state=verdict.state, state_since=started, last_run=started),
    )
    return verdict


def test_a_stale_score_feed_is_exported_on_the_scores_source() -> None:
    """``source_stale`` names the feed whose newest row is older than its max_lag: here the
    score feed (newest score 10 hours before the check, the outcomes fresh), so
    ``{source="scores"}`` is 1 and ``{source="outcomes"}`` 0. With the feed names swapped
    the stale score feed was reported on the outcomes series, and the alert named the wrong
    producer."""
    (a,) = monitors("a")
    board = Board([a], {})
    data = check_data(AT, {"": segment(np.random.default_rng(1), AT)})
    verdict = record_check(board, a, replace(data, newest_score=AT - timedelta(hours=10)))
    assert [r.split(" since")[0] for r in verdict.stale] == ["score feed stale"]
    get = make_registry(board, process=False).get_sample_value
    assert get("retrieval_monitor_source_stale", {"monitor": "a", "source": "scores"}) == 1.0
    assert get("retrieval_monitor_source_stale", {"monitor": "a", "source": "outcomes"}) == 0.0


def test_source_last_timestamps_are_the_verdicts_newest_rows() -> None:
    """``source_last_timestamp_seconds`` is the newest row of each source the latest check
    saw: the verdict's ``newest_score`` for scores and ``newest_outcome`` for outcomes (one
    minute and 90 minutes before the check). The series was once not exported at all, and
    nothing noticed."""
    (a,) = monitors("a")
    board = Board([a], {})
    record_decay(board, a)
    run = board.snapshot()[0].latest
    assert run is not None
    v = run.verdict
    assert v.newest_score == AT - timedelta(minutes=1)
    assert v.newest_outcome == AT - timedelta(minutes=90)
    get = make_registry(board, process=False).get_sample_value
    name = "retrieval_monitor_source_last_timestamp_seconds"
    assert get(name, {"monitor": "a", "source": "scores"}) == v.newest_score.timestamp()
    assert get(name, {"monitor": "a", "source": "outcomes"}) == v.newest_outcome.timestamp()


def test_zero_score_ratios_are_exported_per_window() -> None:
    """``zero_score_ratio{window=...}`` carries the input report's zero rate of that window:
    ``reference`` the reference's and ``current`` the current's (they differ here). The two
    windows were once swapped, which shows a rise of exact-zero scores as a fall."""
    (a,) = monitors("a")
    board = Board([a], {})
    record_decay(board, a)
    run = board.snapshot()[0].latest
    assert run is not None
    r = run.verdict.inputs[""]
    assert r.zero_rate_reference is not None
    assert r.zero_rate_current is not None
    assert r.zero_rate_reference != r.zero_rate_current
    get = make_registry(board, process=False).get_sample_value
    label = {"monitor": "a", "segment": ""}
    ratio = "retrieval_monitor_zero_score_ratio"
    assert get(ratio, {**label, "window": "reference"}) == r.zero_rate_reference
    assert get(ratio, {**label, "window": "current"}) == r.zero_rate_current


def test_an_undecidable_input_segment_exports_no_statistics() -> None:
    """A segment with too few current scores (50 of the 200 needed) is undecidable: it
    exports its ``input_drift`` (0) and none of the statistics gauges (psi, KS, CUSUM, zero
    ratios...), while the decidable segment beside it exports them all. Without the guard the
    undecidable segment exported the CUSUM it carried, as if this check had computed it."""
    (a,) = monitors("a")
    board = Board([a], {})
    rng = np.random.default_rng(1)
    segments = {"": segment(rng, AT), "thin": segment(rng, AT, n_cur=50)}
    verdict = record_check(board, a, check_data(AT, segments))
    assert verdict.inputs[""].decidable
    assert not verdict.inputs["thin"].decidable
    get = make_registry(board, process=False).get_sample_value
    for name, expected in (("", True), ("thin", False)):
        label = {"monitor": "a", "segment": name}
        assert get("retrieval_monitor_input_drift", label) == 0.0
        for suffix in ("psi", "ks_statistic", "drift_cusum"):
            assert (get("retrieval_monitor_" + suffix, label) is not None) is expected, suffix
        for window in ("reference", "current"):
            got = get("retrieval_monitor_zero_score_ratio", {**label, "window": window})
            assert (got is not None) is expected, window
    inputs = {
        "retrieval_monitor_" + s
        for s in (
            "psi",
            "psi_pvalue",
            "psi_noise_floor",
            "psi_debiased",
            "ks_statistic",
            "ks_pvalue",
            "out_of_range_ratio",
            "drift_cusum",
            "drift_z",
            "late_scores",
            "zero_score_ratio",
        )
    }
    text = render(make_registry(board, process=False)).decode()
    exported = {line.split("{")[0] for line in text.splitlines() if 'segment="thin"' in line}
    assert not exported & inputs
    assert "retrieval_monitor_input_drift" in exported


def test_judged_metric_means_are_exported_per_window() -> None:
    """``outcome_metric{window=...}`` of a judged monitor carries each metric's paired mean of
    that window: ndcg@10 0.8 in the reference and 0.6 in the current, ap 0.5 and 0.4. The
    reference series once carried the current window's value, so both read the same and the
    fall of the metric did not show."""
    (a,) = monitors("a")
    board = Board([a], {})
    record_decay(board, a)
    run = board.snapshot()[0].latest
    assert run is not None
    means: dict[str, dict[str, float | None]] = {
        "ndcg@10": {"reference": 0.8, "current": 0.6, "mean_difference": -0.2},
        "ap": {"reference": 0.5, "current": 0.4, "mean_difference": -0.1},
    }
    judged = {
        k: replace(o, metric="ndcg@10", metrics=means) for k, o in run.verdict.outcomes.items()
    }
    board.record(replace(run, verdict=replace(run.verdict, outcomes=judged)), board.state("a"))
    get = make_registry(board, process=False).get_sample_value
    for metric, sides in means.items():
        for window in ("reference", "current"):
            labels = {"monitor": "a", "segment": "", "metric": metric, "window": window}
            assert get("retrieval_monitor_outcome_metric", labels) == sides[window], labels
        labels = {"monitor": "a", "segment": "", "metric": metric, "window": "mean_difference"}
        assert get("retrieval_monitor_outcome_metric", labels) is None


def test_a_raised_decay_without_a_report_stays_exported_after_a_restart() -> None:
    """A state file whose decay is raised on a segment but holds no report for it (the last
    look left none) still exports ``model_decay`` 1 for that segment before the first check
    after a start. The series once went missing, so a restart during a decay incident
    resolved RetrievalModelDecay and paged again at the next check."""
    (a,) = monitors("a")
    raised = MonitorState(
        decay=DecayTrack(active={"": AT - timedelta(days=1)}),
        state="model_decay",
        state_since=AT - timedelta(days=1),
    )
    assert not raised.decay.reports
    get = make_registry(Board([a], {"a": raised}), process=False).get_sample_value
    assert get("retrieval_monitor_model_decay", {"monitor": "a", "segment": ""}) == 1.0
    assert get("retrieval_monitor_state", {"monitor": "a", "state": "model_decay"}) == 1.0


def test_a_stale_feed_that_held_a_drift_back_holds_it_through_an_error_and_a_restart() -> None:
    """RetrievalDataDrift fires on input_drift unless the score feed is stale. A check in
    error exported no source_stale while the carried drift alarm stayed 1, so a drift a stale
    feed had held back fired on a feed both stale and unreadable (and SourceStale resolved).
    The latest decided check's staleness is kept in the state and carried with the alarms."""
    (a,) = monitors("a")
    rng = np.random.default_rng(4)
    data = replace(
        check_data(AT, {"": segment(rng, AT, shift=1.0)}), newest_score=AT - timedelta(days=1)
    )
    verdict, state = evaluate(a, AT, data, MonitorState())
    assert verdict.feed_stale("score")
    assert state.stale == ("scores",)
    assert MonitorState.from_dict(state.to_dict()).stale == ("scores",)
    board = Board([a], {})
    board.record(RunRecord(verdict, AT, 0.1), state)
    started = AT + timedelta(hours=1)
    board.record(
        RunRecord(error_verdict("a", started, "scores: x.parquet unreadable"), started, 0.1),
        replace(state, state="error"),
    )
    for b in (board, Board([a], {"a": state})):  # an error, then a new process
        get = make_registry(b).get_sample_value
        assert get("retrieval_monitor_source_stale", {"monitor": "a", "source": "scores"}) == 1
        assert get("retrieval_monitor_source_stale", {"monitor": "a", "source": "outcomes"}) == 0
    # a state file from before the record: nothing is claimed
    old = Board([a], {"a": replace(state, stale=None)})
    get = make_registry(old).get_sample_value
    assert get("retrieval_monitor_source_stale", {"monitor": "a", "source": "scores"}) is None
