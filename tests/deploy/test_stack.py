"""The harness against a tiny in-test ``/metrics`` endpoint with sample series of every metric.

Real Prometheus and Alertmanager (Debian packages) on loopback ports. It proves that every PromQL
expression of the dashboards and the rules parses *and returns data* from Prometheus, that each
alert reaches ``firing`` on the world it describes, and that the decay alert reaches the webhook
with its labels and runbook link.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.store import RESET_REASONS
from tests.deploy.contract import (
    ALERTS,
    METRICS,
    RUNBOOK_BASE,
    dashboard_exprs,
    grafana_query,
    load_dashboards,
    load_grafana_rules,
    load_rules,
    substitute,
)
from tests.deploy.stack import Stack, StaticMetrics, free_port

STATES = ("ok", "data_drift", "model_decay", "insufficient_data", "error")
PER_SEGMENT_STATS = {
    "retrieval_monitor_psi": 0.08,
    "retrieval_monitor_psi_pvalue": 0.001,
    "retrieval_monitor_psi_noise_floor": 0.009,
    "retrieval_monitor_psi_debiased": 0.071,
    "retrieval_monitor_ks_statistic": 0.13,
    "retrieval_monitor_ks_pvalue": 1e-6,
    "retrieval_monitor_out_of_range_ratio": 0.01,
    "retrieval_monitor_drift_cusum": 3.0,
    "retrieval_monitor_drift_z": 1.5,
    "retrieval_monitor_late_scores": 0,
    "retrieval_monitor_outcome_mean_difference": -0.03,
    "retrieval_monitor_outcome_pvalue": 0.0004,
    "retrieval_monitor_outcome_ci_lower": -0.045,
    "retrieval_monitor_outcome_ci_upper": -0.017,
    "retrieval_monitor_outcome_effect_size": -0.3,
    "retrieval_monitor_outcome_pairs": 400,
    "retrieval_monitor_outcome_pairing_coverage_ratio": 0.98,
    "retrieval_monitor_outcome_mde": 0.02,
}
PER_MONITOR_STATS = {
    "retrieval_monitor_psi_tolerance": 0.02,
    "retrieval_monitor_drift_cusum_threshold": 7.94,
    "retrieval_monitor_drift_z_threshold": 4.19,
    "retrieval_monitor_outcome_alpha": 0.001667,
    "retrieval_monitor_outcome_margin": 0.005,
    "retrieval_monitor_last_run_duration_seconds": 2.5,
}


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _monitor(
    name: str,
    state: str,
    now: float,
    *,
    segments: dict[str, tuple[int, int]],
    age: float = 60,
    stale_source: str = "",
    reset: str = "",
) -> list[str]:
    """Series of one monitor; ``segments`` maps segment -> (input_drift, model_decay).

    ``stale_source`` names a source whose newest row is older than its max_lag. A monitor in
    state ``error`` has not saved its state since ``age`` seconds ago. ``reset`` names the
    reason of a state reset a minute before ``now``, at start-up (counted before any scrape)."""
    lines = [
        f"retrieval_monitor_state{_labels(monitor=name, state=s)} {int(s == state)}" for s in STATES
    ]
    ok_run = state != "error"
    lines += [
        f"retrieval_monitor_state_since_timestamp_seconds{_labels(monitor=name)} {now - age}",
        f"retrieval_monitor_schedule_interval_seconds{_labels(monitor=name)} 600",
        f"retrieval_monitor_last_run_timestamp_seconds{_labels(monitor=name)} {now - 30}",
        f"retrieval_monitor_last_success_timestamp_seconds{_labels(monitor=name)} "
        f"{now - 30 if ok_run else now - age}",
        f"retrieval_monitor_runs_total{_labels(monitor=name)} 7",
        f"retrieval_monitor_engine_info{_labels(monitor=name, kind='memory')} 1",
        f"retrieval_monitor_run_failures_total{_labels(monitor=name)} {0 if ok_run else 5}",
        f"retrieval_monitor_state_save_failures_total{_labels(monitor=name)} 0",
        f"retrieval_monitor_state_save_failing{_labels(monitor=name)} 0",
        *(
            f"retrieval_monitor_state_resets_total{_labels(monitor=name, reason=r)} "
            f"{int(r == reset)}"
            for r in RESET_REASONS
        ),
        *(
            [
                "retrieval_monitor_last_state_reset_timestamp_seconds"
                f"{_labels(monitor=name, reason=reset)} {now - 60}"
            ]
            if reset
            else []
        ),
        f"retrieval_monitor_last_state_save_timestamp_seconds{_labels(monitor=name)} "
        f"{now - 30 if ok_run else now - age}",
    ]
    lines += [f"{metric}{_labels(monitor=name)} {v}" for metric, v in PER_MONITOR_STATS.items()]
    for source in ("scores", "outcomes"):
        src = {"monitor": name, "source": source}
        lines.append(f"retrieval_monitor_data_latest_timestamp_seconds{_labels(**src)} {now - 120}")
        stale = source == stale_source
        lines.append(f"retrieval_monitor_source_stale{_labels(**src)} {int(stale)}")
        lines.append(
            f"retrieval_monitor_source_age_seconds{_labels(**src)} {90_000 if stale else 120}"
        )
        lag = 7_200 if source == "scores" else 180_000
        lines.append(f"retrieval_monitor_source_max_lag_seconds{_labels(**src)} {lag}")
        lines.append(
            f"retrieval_monitor_source_last_timestamp_seconds{_labels(**src)} "
            f"{now - 90_000 if stale else now - 120}"
        )
        for window in ("reference", "current"):
            lines.append(f"retrieval_monitor_window_samples{_labels(**src, window=window)} 500")
    for segment, (drift, decay) in segments.items():
        seg = {"monitor": name, "segment": segment}
        stats = dict(PER_SEGMENT_STATS)
        if drift:  # the drifting segment's writer also lands late (RetrievalMonitorLateScores)
            stats["retrieval_monitor_late_scores"] = 250
        lines += [f"{metric}{_labels(**seg)} {v}" for metric, v in stats.items()]
        lines += [
            f"retrieval_monitor_input_drift{_labels(**seg)} {drift}",
            f"retrieval_monitor_model_decay{_labels(**seg)} {decay}",
        ]
        for window in ("reference", "current"):
            lines.append(f"retrieval_monitor_zero_score_ratio{_labels(**seg, window=window)} 0.01")
    return lines


def exposition(now: float) -> str:
    """Four monitors that between them make every alert's expression true."""
    lines = [
        *_monitor("decaying", "model_decay", now, segments={"": (0, 1)}),
        *_monitor("drifting", "data_drift", now, segments={"en": (0, 0), "fr": (1, 0)}),
        *_monitor("starved", "insufficient_data", now, segments={}, stale_source="outcomes"),
        *_monitor("broken", "error", now, segments={}, age=100_000, reset="syntax"),
        'retrieval_monitor_build_info{version="0.0.0-test"} 1',
    ]
    return "\n".join(lines) + "\n"


def test_the_sample_exposition_covers_the_contract() -> None:
    names = {line.split("{")[0] for line in exposition(0.0).splitlines()}
    assert names == set(METRICS)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    endpoint = StaticMetrics(exposition(time.time()))
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: RetrievalMonitorDown's `up == 0`
    workdir: Path = tmp_path_factory.mktemp("stack")
    try:
        with Stack(workdir, targets=[endpoint.address, dead], rules=ALERTS) as s:
            s.wait_for_targets_up(1)
            # Three scrapes, so rate-style panels (increase over a range) have two samples.
            s.wait_for_query('count_over_time(up{job="retrieval-monitor"}[1m]) >= 3', timeout=30)
            s.wait_for_alert("RetrievalModelDecay", timeout=30, monitor="decaying")
            yield s
    finally:
        endpoint.close()


@pytest.mark.integration
@pytest.mark.slow
def test_targets(stack: Stack) -> None:
    health = sorted(stack.target_health().values())
    assert health == ["down", "up"]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(load_dashboards()))
def test_every_dashboard_expression_returns_data(stack: Stack, name: str) -> None:
    dash = load_dashboards()[name]
    empty = []
    for monitor in ("decaying", "drifting"):
        for where, expr in dashboard_exprs(dash):
            if not stack.query(substitute(expr, monitor=monitor)):
                empty.append((monitor, where))
    assert not empty


@pytest.mark.integration
@pytest.mark.slow
def test_dashboard_variables_return_values(stack: Stack) -> None:
    monitors = {s["monitor"] for s in stack.series("retrieval_monitor_state")}
    assert monitors == {"decaying", "drifting", "starved", "broken"}
    segments = {
        s.get("segment")
        for s in stack.series('retrieval_monitor_outcome_pairs{monitor="drifting"}')
    }
    assert segments == {"en", "fr"}


@pytest.mark.integration
@pytest.mark.slow
def test_every_rule_expression_returns_data(stack: Stack) -> None:
    empty = [r["alert"] for r in load_rules() if not stack.query(r["expr"])]
    assert not empty


@pytest.mark.integration
@pytest.mark.slow
def test_every_grafana_rule_query_returns_data(stack: Stack) -> None:
    """Query A of each Grafana-managed rule, as Grafana would send it to this Prometheus."""
    empty = [r["title"] for r in load_grafana_rules() if not stack.query(grafana_query(r))]
    assert not empty


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    ("alert", "labels"),
    [
        ("RetrievalModelDecay", {"monitor": "decaying", "severity": "critical"}),
        ("RetrievalDataDrift", {"monitor": "drifting", "segment": "fr", "severity": "warning"}),
        ("RetrievalMonitorInsufficientData", {"monitor": "starved"}),
        ("RetrievalMonitorStale", {"monitor": "broken"}),
        ("RetrievalMonitorRunFailures", {"monitor": "broken"}),
        ("RetrievalMonitorDown", {"job": "retrieval-monitor"}),
        ("RetrievalMonitorSourceStale", {"monitor": "starved", "source": "outcomes"}),
        ("RetrievalMonitorStateSaveFailing", {"monitor": "broken"}),
        ("RetrievalMonitorStateReset", {"monitor": "broken", "reason": "syntax"}),
        ("RetrievalMonitorLateScores", {"monitor": "drifting", "segment": "fr"}),
    ],
)
def test_each_alert_fires_on_its_world(stack: Stack, alert: str, labels: dict[str, str]) -> None:
    fired = stack.wait_for_alert(alert, timeout=20, **labels)
    assert fired["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#{alert.lower()}"
    assert "?" not in fired["annotations"]["description"]  # every number was found


@pytest.mark.integration
@pytest.mark.slow
def test_only_the_right_monitors_alert(stack: Stack) -> None:
    stack.wait_for_alert("RetrievalDataDrift", timeout=20, monitor="drifting")
    by_alert: dict[str, set[tuple[str, str]]] = {}
    for alert in stack.alerts():
        lab = alert["labels"]
        by_alert.setdefault(lab["alertname"], set()).add(
            (lab.get("monitor", ""), lab.get("segment", ""))
        )
    assert by_alert["RetrievalModelDecay"] == {("decaying", "")}
    assert by_alert["RetrievalDataDrift"] == {("drifting", "fr")}
    # Drift without decay never raised the decay alert, at any evaluation so far.
    assert not stack.query(
        'count_over_time(ALERTS{alertname="RetrievalModelDecay",monitor="drifting"}[10m])'
    )


@pytest.mark.integration
@pytest.mark.slow
def test_decay_alert_reaches_the_webhook(stack: Stack) -> None:
    alert = stack.wait_for_notification("RetrievalModelDecay", timeout=30, monitor="decaying")
    assert alert["status"] == "firing"
    assert alert["labels"]["severity"] == "critical"
    assert alert["labels"]["job"] == "retrieval-monitor"
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#retrievalmodeldecay"
    assert "-0.0300" in alert["annotations"]["description"]
