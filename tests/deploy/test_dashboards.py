"""Static checks of the Grafana dashboards and provisioning (no Grafana needed)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.mixin import dashboards
from deploy.mixin.config import load
from tests.deploy.contract import (
    DASHBOARD_DIR,
    METRICS,
    REPO,
    RUNBOOK_BASE,
    dashboard_exprs,
    grafana_value,
    iter_panels,
    load_dashboards,
    metric_names,
    substitute,
    variable_queries,
)
from tests.deploy.stack import binary

DASHBOARDS = load_dashboards()
DS_REF = {"type": "prometheus", "uid": "${datasource}"}


def test_both_dashboards_exist() -> None:
    assert sorted(DASHBOARDS) == ["drilldown.json", "overview.json"]


def test_committed_json_is_what_the_generator_writes() -> None:
    config = load()
    for name, build in dashboards.DASHBOARDS.items():
        assert (DASHBOARD_DIR / name).read_text() == dashboards.render(config, build), (
            f"{name} is stale: run `make generate`"
        )


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_expression_selects_the_job(name: str) -> None:
    """Each metric selector carries the mixin's job matcher, as a mixin's dashboards do."""
    exprs = [e for _, e in dashboard_exprs(DASHBOARDS[name])] + variable_queries(DASHBOARDS[name])
    selectors = [
        m for e in exprs for m in re.findall(r"\bretrieval_monitor_[a-z_]+(\{[^}]*\}|)", e)
    ]
    assert selectors
    assert all(s.startswith('{job="retrieval-monitor"') for s in selectors), selectors


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_shape(name: str) -> None:
    dash = DASHBOARDS[name]
    assert dash["id"] is None
    assert re.fullmatch(r"[a-zA-Z0-9_-]{8,40}", dash["uid"])
    assert "__inputs" not in dash
    assert "__requires" not in dash
    assert "${DS_" not in (DASHBOARD_DIR / name).read_text()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "monitor" in variables
    ids = [p["id"] for p in iter_panels(dash["panels"])]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {name}"
    for panel in iter_panels(dash["panels"]):
        assert panel["gridPos"]["x"] >= 0
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] in {"row", "text"}:
            continue
        assert panel["datasource"] == DS_REF, panel["title"]
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults.get("unit"), f"{name}: panel {panel['title']!r} has no unit"
        steps = defaults["thresholds"]["steps"]
        assert steps
        assert steps[0]["value"] is None
        assert all(s["color"] for s in steps)
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        assert all(t["datasource"] == DS_REF for t in panel["targets"])


def test_uids_differ() -> None:
    uids = [d["uid"] for d in DASHBOARDS.values()]
    assert len(uids) == len(set(uids))


def test_drilldown_has_monitor_and_segment_variables() -> None:
    variables = {v["name"]: v for v in DASHBOARDS["drilldown.json"]["templating"]["list"]}
    assert {"datasource", "monitor", "segment"} <= set(variables)
    assert variables["segment"]["allValue"] == ".*"


def test_overview_repeats_a_row_per_monitor() -> None:
    rows = [p for p in DASHBOARDS["overview.json"]["panels"] if p["type"] == "row"]
    assert [r.get("repeat") for r in rows] == ["monitor"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_text_panel_explains_drift_versus_decay_and_links_runbook(name: str) -> None:
    texts = [p for p in DASHBOARDS[name]["panels"] if p["type"] == "text"]
    assert len(texts) == 1
    content: str = texts[0]["options"]["content"]
    assert "Data drift" in content
    assert "Model decay" in content
    assert RUNBOOK_BASE in content
    assert content.count("\n") <= 1  # two lines


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_only_exported_metric_names(name: str) -> None:
    exprs = [e for _, e in dashboard_exprs(DASHBOARDS[name])] + variable_queries(DASHBOARDS[name])
    used = set().union(*(metric_names(e) for e in exprs))
    assert used, "no metric found: the extraction is broken"
    assert used <= set(METRICS), sorted(used - set(METRICS))


def test_overview_covers_the_issue_list() -> None:
    used = set().union(*(metric_names(e) for _, e in dashboard_exprs(DASHBOARDS["overview.json"])))
    for needed in (
        "retrieval_monitor_state",
        "retrieval_monitor_state_since_timestamp_seconds",
        "retrieval_monitor_psi",
        "retrieval_monitor_psi_tolerance",
        "retrieval_monitor_ks_statistic",
        "retrieval_monitor_outcome_mean_difference",
        "retrieval_monitor_outcome_ci_lower",
        "retrieval_monitor_outcome_ci_upper",
        "retrieval_monitor_outcome_pairs",
        "retrieval_monitor_outcome_mde",
        "retrieval_monitor_source_age_seconds",
        "retrieval_monitor_run_failures_total",
        "retrieval_monitor_last_success_timestamp_seconds",
    ):
        assert needed in used, needed


def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    """Wrap each (substituted) expression in a recording rule; promtool parses them all."""
    rules: list[dict[str, Any]] = []
    for name, dash in DASHBOARDS.items():
        for i, (_, expr) in enumerate(dashboard_exprs(dash)):
            rules.append(
                {"record": f"check:{Path(name).stem}:{i}", "expr": substitute(expr, monitor="m")}
            )
    path = tmp_path / "dashboard_exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    proc = subprocess.run(
        [binary("promtool"), "check", "rules", "--lint=none", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(rules)} rules found" in proc.stdout


def test_time_since_last_success_reads_the_stale_alerts_clock(tmp_path: Path) -> None:
    """Both 'since last success' panels count a monitor that never succeeded (no last success
    exported) from when its state began, as RetrievalMonitorStale does, and one that did from
    its last success: promtool evaluates them on series the daemon exports."""
    labels = 'job="retrieval-monitor",instance="monitor:9464"'
    exprs = _panel_exprs(lambda title, expr: "last_success" in expr, ("never", "search"))
    at = 1860  # eval at 31m: "never" in error since 300 s, "search" last succeeded at 600 s
    expected = {
        ("never", True): (at - 300) / 600,
        ("search", True): (at - 600) / 600,
        ("never", False): at - 300,
        ("search", False): at - 600,
    }
    tests = []
    for _, expr in exprs:
        monitor = "never" if re.search(r'monitor=~?"never"', expr) else "search"
        periods = "schedule_interval" in expr
        tests.append(
            {
                "expr": expr,
                "eval_time": "31m",
                "exp_samples": [
                    {
                        "labels": f"{{{labels},monitor={monitor!r}}}".replace("'", '"'),
                        "value": expected[(monitor, periods)],
                    }
                ],
            }
        )
    series = [
        (f'retrieval_monitor_state_since_timestamp_seconds{{{labels},monitor="never"}}', "300x40"),
        (f'retrieval_monitor_state_since_timestamp_seconds{{{labels},monitor="search"}}', "0x40"),
        (
            f'retrieval_monitor_last_success_timestamp_seconds{{{labels},monitor="search"}}',
            "600x40",
        ),
        (f'retrieval_monitor_schedule_interval_seconds{{{labels},monitor="never"}}', "600x40"),
        (f'retrieval_monitor_schedule_interval_seconds{{{labels},monitor="search"}}', "600x40"),
    ]
    _promtool_expr_tests(tmp_path / "panels_test.yml", "1m", series, tests)


def test_data_age_is_the_age_the_stale_rule_compares(tmp_path: Path) -> None:
    """Both data-age panels divide the newest row's age at the latest check's slot by max_lag,
    as the daemon's stale rule does (``slot - newest > max_lag``). With ``time() - newest`` a
    healthy feed of a daily monitor (max_lag 6h) read past 100 % for the last 18 hours of each
    day (and from the run's start, high after a restart whose first check was of an earlier
    slot): promtool evaluates them 18 hours after the daily check on series the daemon
    exports."""
    labels = 'job="retrieval-monitor",instance="monitor:9464"'
    exprs = _panel_exprs(lambda title, expr: "Data age" in title, ("daily", "late"))
    check = 86400  # the daily check's slot, at 1d
    lag = {"scores": 21600, "outcomes": 172800}
    newest = {  # monitor -> source -> newest row before the slot
        "daily": {"scores": check - 5400, "outcomes": check - 86400},  # fresh: 25 %, 50 %
        "late": {"scores": check - 43200, "outcomes": check - 86400},  # scores stale: 200 %
    }
    series = []
    for monitor, sources in newest.items():
        own = f"{labels},monitor={monitor!r}".replace("'", '"')
        for source, t in sources.items():
            src = f'{own},source="{source}"'
            series.append((f"retrieval_monitor_source_age_seconds{{{src}}}", f"{check - t}x50"))
            series.append(
                (f"retrieval_monitor_source_max_lag_seconds{{{src}}}", f"{lag[source]}x50")
            )
    tests = []
    for _, expr in exprs:
        monitor = "late" if re.search(r'monitor=~?"late"', expr) else "daily"
        tests.append(
            {
                "expr": expr,
                "eval_time": "42h",  # 18 hours after the check: now - newest is past max_lag
                "exp_samples": [
                    {
                        "labels": f'{{{labels},monitor="{monitor}",source="{source}"}}',
                        "value": (check - t) / lag[source],
                    }
                    for source, t in newest[monitor].items()
                ],
            }
        )
    _promtool_expr_tests(tmp_path / "data_age_test.yml", "1h", series, tests)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_a_monitor_named_with_a_dot_has_data(name: str, tmp_path: Path) -> None:
    """Monitor names may hold ``.`` and ``:``; Grafana regex-escapes the value of a
    multi-valued variable (the overview's repeated rows), so each panel's monitor matcher must
    match the escaped value: promtool evaluates the state panel as Grafana sends it
    for ``search.v2:ab`` on a series the daemon exports. With ``monitor="$monitor"`` the
    overview's panels showed no data for such a monitor."""
    dash = DASHBOARDS[name]
    variable = next(v for v in dash["templating"]["list"] if v["name"] == "monitor")
    monitor = "search.v2:ab"
    (expr,) = [
        e
        for title, e in dashboard_exprs(dash)
        if "'Current state'" in title or "'State over time'" in title
    ]
    labels = f'job="retrieval-monitor",instance="monitor:9464",monitor="{monitor}"'
    series = [
        (f'retrieval_monitor_state{{{labels},state="{s}"}}', f"{int(s == 'model_decay')}x20")
        for s in ("ok", "data_drift", "model_decay", "insufficient_data", "error")
    ]
    tests = [
        {
            "expr": substitute(expr, monitor=grafana_value(monitor, variable)),
            "eval_time": "10m",
            "exp_samples": [{"labels": f'{{monitor="{monitor}"}}', "value": 2}],
        }
    ]
    _promtool_expr_tests(tmp_path / "dotted_test.yml", "1m", series, tests)


def test_a_broken_expression_is_caught(tmp_path: Path) -> None:
    """The check above can fail: promtool rejects an unparsable expression."""
    path = tmp_path / "bad.yml"
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "x", "expr": "sum(up"}]}]})
    )
    proc = subprocess.run(
        [binary("promtool"), "check", "rules", str(path)], capture_output=True, check=False
    )
    assert proc.returncode != 0


def test_provisioning_points_at_the_dashboards() -> None:
    prov = REPO / "grafana" / "provisioning"
    ds = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())
    assert ds["apiVersion"] == 1
    assert [d["type"] for d in ds["datasources"]] == ["prometheus"]
    dash = yaml.safe_load((prov / "dashboards" / "retrieval-monitor.yml").read_text())
    (provider,) = dash["providers"]
    assert provider["type"] == "file"
    compose = yaml.safe_load((REPO / "deploy" / "docker" / "compose.yml").read_text())
    volumes = compose["services"]["grafana"]["volumes"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in volumes if ":" in v}
    assert mounted[provider["options"]["path"]] == "../../grafana/dashboards"
    assert (
        mounted["/etc/grafana/provisioning/datasources"] == "../../grafana/provisioning/datasources"
    )
    assert (
        mounted["/etc/grafana/provisioning/dashboards"] == "../../grafana/provisioning/dashboards"
    )
    # the stack alerts through Prometheus (its rule file mounted): Grafana's twins of the same
    # rules mounted too notified every alert twice
    rules = compose["services"]["prometheus"]["volumes"]
    assert any("alerts.yml" in v for v in rules)
    assert not any("alerting" in v.split(":")[0] for v in volumes), volumes


def test_ages_are_coloured_against_their_own_limits() -> None:
    """A data age in seconds with fixed thresholds showed a healthy daily outcome feed red
    most of the day, and a daily monitor's time since its last success red 22 hours a day:
    ages are shown against the source's max_lag and the schedule's period, red where the
    stale rule and alert begin."""
    panels = {
        p["title"]: p
        for d in DASHBOARDS.values()
        for p in d["panels"] + [q for r in d["panels"] for q in r.get("panels", [])]
    }
    for title, limit in (
        ("Data age / max_lag", "retrieval_monitor_source_max_lag_seconds"),
        ("Data age per source / max_lag", "retrieval_monitor_source_max_lag_seconds"),
        ("Since last success (periods)", "retrieval_monitor_schedule_interval_seconds"),
    ):
        panel = panels[title]
        assert all(limit in t["expr"] for t in panel["targets"]), title
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        red = next(s["value"] for s in steps if s["color"] == "red")
        assert red == (2 if "periods" in title else 1), title


def _promtool_expr_tests(
    path: Path, interval: str, series: list[tuple[str, str]], tests: list[dict[str, Any]]
) -> None:
    """``promtool test rules`` of PromQL expression ``tests`` on ``series`` (one sample every
    ``interval``), written to ``path``: it must pass."""
    doc = {
        "rule_files": [],
        "evaluation_interval": interval,
        "tests": [
            {
                "interval": interval,
                "input_series": [{"series": k, "values": v} for k, v in series],
                "promql_expr_test": tests,
            }
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.run(
        [binary("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _panel_exprs(
    chosen: Callable[[str, str], bool], monitors: tuple[str, str]
) -> list[tuple[str, str]]:
    """(title, expression) of each panel of both dashboards that ``chosen`` picks, once for
    each of ``monitors`` (the dashboard variable substituted): one panel a dashboard."""
    exprs = [
        (title, substitute(expr, monitor=monitor))  # title: for the assertion's message
        for name in ("overview.json", "drilldown.json")
        for title, expr in dashboard_exprs(DASHBOARDS[name])
        if chosen(title, expr)
        for monitor in monitors
    ]
    assert len(exprs) == 4, exprs
    return exprs
