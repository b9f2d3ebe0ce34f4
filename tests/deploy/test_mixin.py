"""The mixin: one configuration (``deploy/mixin/config.toml``) from which
``python -m deploy.generate`` writes the dashboards, the Prometheus rules, the PrometheusRule and
the Grafana alerting files."""

from __future__ import annotations

import copy
import filecmp
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.generate import main, outputs
from deploy.mixin import grafana_alerting, render
from deploy.mixin.alerts import alert_groups
from deploy.mixin.config import ALERT_PARAMS, CONFIG_PATH, MixinConfigError, load, parse
from tests.deploy.contract import (
    REPO,
    dashboard_exprs,
    grafana_query,
    iter_panels,
    metric_names,
    variable_queries,
)

CONFIG_DOC: dict[str, Any] = tomllib.loads(CONFIG_PATH.read_text())
GENERATED = sorted(outputs(load()))


def test_the_generator_writes_every_generated_file() -> None:
    assert GENERATED == [
        "deploy/kubernetes/prometheusrule.yaml",
        "deploy/prometheus/alerts.yml",
        "grafana/dashboards/drilldown.json",
        "grafana/dashboards/overview.json",
        "grafana/provisioning/alerting/notifications.yaml",
        "grafana/provisioning/alerting/rules.yaml",
    ]


def test_no_generated_file_is_stale(tmp_path: Path) -> None:
    """Regenerate into a temporary tree with the real command; every file must be identical."""
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.generate", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    stale = [p for p in GENERATED if not filecmp.cmp(tmp_path / p, REPO / p, shallow=False)]
    assert not stale, f"stale (run `make generate`): {stale}"


def test_yaml_style_is_lossless() -> None:
    """Folded annotations and literal PromQL blocks load back as exactly the defined strings."""
    config = load()
    groups = alert_groups(config)
    files = outputs(config)
    alerts = yaml.safe_load(files["deploy/prometheus/alerts.yml"])
    assert alerts["groups"] == render.prometheus_groups(groups)
    grafana = yaml.safe_load(files["grafana/provisioning/alerting/rules.yaml"])
    assert grafana == grafana_alerting.rules_document(config, groups)
    notifications = yaml.safe_load(files["grafana/provisioning/alerting/notifications.yaml"])
    assert notifications == grafana_alerting.notifications_document()


def test_check_names_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--check`` can fail: an edited copy of a generated file is reported, exit status 1."""
    assert main(["--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["--check", "--out", str(tmp_path)]) == 0
    rules = tmp_path / "deploy/prometheus/alerts.yml"
    rules.write_text(rules.read_text().replace("for: 5m", "for: 6m", 1))
    (tmp_path / "grafana/dashboards/overview.json").unlink()
    assert main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "stale: deploy/prometheus/alerts.yml" in err
    assert "stale: grafana/dashboards/overview.json" in err
    assert "prometheusrule" not in err


def _variant(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(CONFIG_DOC)
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        table = doc
        for name in parents:
            table = table[name]
        if value is None:
            del table[key]
        else:
            table[key] = value
    return doc


def test_one_place_changes_every_artefact() -> None:
    """A different job, runbook base, uid prefixes and thresholds reach every generated file."""
    config = parse(
        _variant(
            prometheus__job="rm-prod",
            links__runbook_base="https://wiki.example.org/rm",
            grafana__dashboard_uid_prefix="rmx",
            grafana__alert_uid_prefix="rmp",
            alerts__RetrievalModelDecay={
                "severity": "warning",
                "for": "7m",
                "keep_firing_for": "20m",
            },
        )
    )
    files = outputs(config)
    alerts = yaml.safe_load(files["deploy/prometheus/alerts.yml"])
    rules = {r["alert"]: r for g in alerts["groups"] for r in g["rules"]}
    grafana = yaml.safe_load(files["grafana/provisioning/alerting/rules.yaml"])
    grules = {r["title"]: r for g in grafana["groups"] for r in g["rules"]}
    assert rules["RetrievalModelDecay"]["for"] == grules["RetrievalModelDecay"]["for"] == "7m"
    assert rules["RetrievalModelDecay"]["labels"] == {"severity": "warning"}
    assert rules["RetrievalModelDecay"]["keep_firing_for"] == "20m"
    assert grules["RetrievalModelDecay"]["labels"] == {"severity": "warning"}
    for name, rule in rules.items():
        assert 'job="rm-prod"' in rule["expr"], name
        assert "retrieval-monitor" not in rule["expr"], name
        assert rule["annotations"]["runbook_url"] == f"https://wiki.example.org/rm#{name.lower()}"
        assert grafana_query(grules[name]) == rule["expr"]
        assert grules[name]["uid"] == f"rmp-{name.lower()}"
        assert grules[name]["annotations"]["runbook_url"] == rule["annotations"]["runbook_url"]
    for name in ("overview", "drilldown"):
        dash = json.loads(files[f"grafana/dashboards/{name}.json"])
        assert dash["uid"] == f"rmx-{name}"
        assert "https://wiki.example.org/rm" in json.dumps(dash)
        exprs = [e for _, e in dashboard_exprs(dash)] + variable_queries(dash)
        assert all('job="rm-prod"' in e for e in exprs if metric_names(e))
    manifest = yaml.safe_load(files["deploy/kubernetes/prometheusrule.yaml"])
    assert manifest["spec"]["groups"] == alerts["groups"]


def test_thresholds_come_from_the_config() -> None:
    config = parse(
        _variant(
            alerts__RetrievalMonitorStale={"severity": "warning", "for": "5m", "periods": 3},
            alerts__RetrievalMonitorStateSaveFailing={
                "severity": "critical",
                "for": "1m",
                "failure_window": "1h",
                "periods": 4,
            },
        )
    )
    alerts = {a.name: a for g in alert_groups(config) for a in g.alerts}
    # the schedule's period is read through last_over_time over the hold, as every gauge of the
    # health alerts is (a missed scrape must not end the alert): see test_the_hold_*
    assert (
        "3 * last_over_time(retrieval_monitor_schedule_interval_seconds"
        in alerts["RetrievalMonitorStale"].expr
    )
    assert "more than three scheduled periods" in alerts["RetrievalMonitorStale"].description
    # the dashboards' stale marks follow the alert's periods
    files = outputs(config)
    drill = json.loads(files["grafana/dashboards/drilldown.json"])
    (limit,) = [e for w, e in dashboard_exprs(drill) if "'Run duration vs schedule' C" in w]
    assert limit.startswith("3 * retrieval_monitor_schedule_interval_seconds"), limit
    over = json.loads(files["grafana/dashboards/overview.json"])
    (since,) = [p for p in iter_panels(over["panels"]) if p["title"].startswith("Since last")]
    steps = since["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [(s["color"], s["value"]) for s in steps] == [
        ("green", None),
        ("orange", 2.5),
        ("red", 3),
    ]
    assert since["description"].endswith("RetrievalMonitorStale fires after three.")
    save = alerts["RetrievalMonitorStateSaveFailing"]
    assert "[1h]) > 0" in save.expr
    assert save.expr.count("4 * ") == 2
    assert (save.severity, save.for_) == ("critical", "1m")


#: The health alerts and the gauges each reads through last_over_time over the hold.
HELD = {
    "RetrievalMonitorInsufficientData": ["retrieval_monitor_state"],
    "RetrievalMonitorStale": [
        "retrieval_monitor_last_success_timestamp_seconds",
        "retrieval_monitor_state_since_timestamp_seconds",
        "retrieval_monitor_schedule_interval_seconds",
    ],
    "RetrievalMonitorRunFailures": ["retrieval_monitor_state"],
    "RetrievalMonitorSourceStale": ["retrieval_monitor_source_stale"],
    "RetrievalMonitorStateSaveFailing": [
        "retrieval_monitor_state_save_failing",
        "retrieval_monitor_last_state_save_timestamp_seconds",
        "retrieval_monitor_schedule_interval_seconds",
    ],
    "RetrievalMonitorStateReset": ["retrieval_monitor_last_state_reset_timestamp_seconds"],
    "RetrievalMonitorLateScores": ["retrieval_monitor_late_scores"],
}


def test_the_hold_reaches_every_gauge_of_the_health_alerts() -> None:
    """A failed scrape or a restart marks every series stale; a health alert that read a gauge as
    an instant vector resolved and began its `for` again (alerts_test.yml holds the promtool
    cases). Each gauge is read through last_over_time over [prometheus] hold; counters keep
    increase(), the verdicts keep_firing_for, RetrievalMonitorDown reads `up`."""
    config = parse(_variant(prometheus__hold="2m"))
    alerts = {a.name: a for g in alert_groups(config) for a in g.alerts}
    for name, gauges in HELD.items():
        expr = alerts[name].expr
        for gauge in gauges:
            found = re.findall(rf"(last_over_time\()?{gauge}\{{[^}}]*\}}(\[[^\]]*\])?", expr)
            assert found, (name, gauge, expr)
            assert all(held and selected == "[2m]" for held, selected in found), (name, expr)
        assert "[5m]" not in expr, (name, expr)
    assert "increase(retrieval_monitor_state_save_failures_total" in (
        alerts["RetrievalMonitorStateSaveFailing"].expr
    )
    unheld = {"RetrievalModelDecay", "RetrievalDataDrift", "RetrievalMonitorDown"}
    assert set(HELD) | unheld == set(alerts)
    for name in unheld:
        assert "last_over_time" not in alerts[name].expr, name


def test_config_iv() -> None:
    """Every problem is reported at once, each with its path, the constraint and the bad value."""
    doc = _variant(
        prometheus__job='bad"job',
        prometheus__hold="0m",
        links__runbook_base="runbook.md",
        grafana__alert_uid_prefix="has space",
        grafana__colour="blue",
        alerts__RetrievalModelDecay={
            "severity": "page",
            "for": "5 minutes",
            "keep_firing_for": "10m",
        },
        alerts__RetrievalMonitorStale={"severity": "warning", "for": "5m", "periods": 0},
        alerts__RetrievalDataDrift=None,
        alerts__RetrievalSomethingElse={"severity": "info", "for": "1m"},
    )
    with pytest.raises(MixinConfigError) as info:
        parse(doc)
    problems = info.value.problems
    expected = [
        "prometheus.job: must be a job name without quotes; got 'bad\"job'",
        "prometheus.hold: must be a duration above 0 such as '5m'; got '0m'",
        "links.runbook_base: must be an http(s) URL without a '#' fragment; got 'runbook.md'",
        "grafana.colour: unknown key; allowed: ",
        "grafana.alert_uid_prefix: must be letters, digits, '-' or '_'; got 'has space'",
        "alerts.RetrievalModelDecay.severity: must be one of ['critical', 'warning', 'info']; "
        "got 'page'",
        "alerts.RetrievalModelDecay.for: must be a duration such as '5m'; got '5 minutes'",
        "alerts.RetrievalMonitorStale.periods: must be an integer >= 1; got 0",
        "alerts.RetrievalDataDrift: missing",
        "alerts.RetrievalSomethingElse: unknown key; allowed: ",
    ]
    for text in expected:
        assert any(p.startswith(text) for p in problems), (text, problems)
    assert len(problems) == len(expected), problems


def test_uids_past_grafanas_40_characters_are_refused() -> None:
    """A prefix is refused when the longest uid built from it is past 40 characters; the
    longest that fits is taken (the longest alert name is 32 characters, 'drilldown' 9)."""
    longest_alert = max(ALERT_PARAMS, key=len)
    fits_alert, fits_dashboard = "r" * (39 - len(longest_alert)), "d" * (39 - len("drilldown"))
    parse(
        _variant(grafana__alert_uid_prefix=fits_alert, grafana__dashboard_uid_prefix=fits_dashboard)
    )
    doc = _variant(
        grafana__alert_uid_prefix="retrieval-monitor",
        grafana__dashboard_uid_prefix=fits_dashboard + "x",
        grafana__datasource_uid="p" * 41,
    )
    with pytest.raises(MixinConfigError) as info:
        parse(doc)
    problems = info.value.problems
    assert problems == [
        "grafana.dashboard_uid_prefix: at most 30 characters (its uid "
        f"'{fits_dashboard}x-drilldown' is past Grafana's 40); got 31",
        "grafana.alert_uid_prefix: at most 7 characters (its uid 'retrieval-monitor-"
        f"{longest_alert.lower()}' is past Grafana's 40); got 17",
        "grafana.datasource_uid: at most 40 characters; got 41",
    ], problems


def test_invalid_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text(CONFIG_PATH.read_text().replace('job = "retrieval-monitor"', "job = 3"))
    assert main(["--config", str(bad), "--out", str(tmp_path)]) == 2
    assert "prometheus.job: must be a job name without quotes; got 3" in capsys.readouterr().err
    assert not (tmp_path / "deploy").exists()
