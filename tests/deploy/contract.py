"""What the deploy artefacts may rely on: the exporter's metric names and the runbook URL base.

``METRICS`` is the exporter contract (issue 5): metric name -> label names (``job``/``instance``
are added by Prometheus). Helpers pull every PromQL expression out of the dashboards and the rule
file, and substitute Grafana's variables so the expressions can be parsed and run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = REPO / "grafana" / "dashboards"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = REPO / "deploy" / "prometheus" / "alerts_test.yml"
GRAFANA_PROVISIONING = REPO / "grafana" / "provisioning"
GRAFANA_RULES = GRAFANA_PROVISIONING / "alerting" / "rules.yaml"
RUNBOOK = REPO / "docs" / "runbook.md"
RUNBOOK_BASE = "https://github.com/retrieval-monitor/retrieval-monitor/blob/main/docs/runbook.md"
JOB = "retrieval-monitor"

_SEG = ("monitor", "segment")
METRICS: dict[str, tuple[str, ...]] = {
    "retrieval_monitor_state": ("monitor", "state"),
    "retrieval_monitor_state_since_timestamp_seconds": ("monitor",),
    "retrieval_monitor_schedule_interval_seconds": ("monitor",),
    "retrieval_monitor_psi": _SEG,
    "retrieval_monitor_psi_pvalue": _SEG,
    "retrieval_monitor_psi_noise_floor": _SEG,
    "retrieval_monitor_psi_debiased": _SEG,
    "retrieval_monitor_psi_tolerance": ("monitor",),
    "retrieval_monitor_ks_statistic": _SEG,
    "retrieval_monitor_ks_pvalue": _SEG,
    "retrieval_monitor_zero_score_ratio": ("monitor", "segment", "window"),
    "retrieval_monitor_out_of_range_ratio": _SEG,
    "retrieval_monitor_drift_cusum": _SEG,
    "retrieval_monitor_drift_cusum_threshold": ("monitor",),
    "retrieval_monitor_drift_z": _SEG,
    "retrieval_monitor_drift_z_threshold": ("monitor",),
    "retrieval_monitor_late_scores": _SEG,
    "retrieval_monitor_input_drift": _SEG,
    "retrieval_monitor_outcome_mean_difference": _SEG,
    "retrieval_monitor_outcome_pvalue": _SEG,
    "retrieval_monitor_outcome_alpha": ("monitor",),
    "retrieval_monitor_outcome_ci_lower": _SEG,
    "retrieval_monitor_outcome_ci_upper": _SEG,
    "retrieval_monitor_outcome_effect_size": _SEG,
    "retrieval_monitor_outcome_pairs": _SEG,
    "retrieval_monitor_outcome_pairing_coverage_ratio": _SEG,
    "retrieval_monitor_outcome_mde": _SEG,
    "retrieval_monitor_outcome_margin": ("monitor",),
    "retrieval_monitor_model_decay": _SEG,
    "retrieval_monitor_window_samples": ("monitor", "source", "window"),
    "retrieval_monitor_data_latest_timestamp_seconds": ("monitor", "source"),
    "retrieval_monitor_last_run_timestamp_seconds": ("monitor",),
    "retrieval_monitor_last_success_timestamp_seconds": ("monitor",),
    "retrieval_monitor_last_run_duration_seconds": ("monitor",),
    "retrieval_monitor_engine_info": ("monitor", "kind"),
    "retrieval_monitor_runs_total": ("monitor",),
    "retrieval_monitor_run_failures_total": ("monitor",),
    "retrieval_monitor_build_info": ("version",),
    "retrieval_monitor_source_age_seconds": ("monitor", "source"),
    "retrieval_monitor_source_stale": ("monitor", "source"),
    "retrieval_monitor_source_max_lag_seconds": ("monitor", "source"),
    "retrieval_monitor_source_last_timestamp_seconds": ("monitor", "source"),
    # The state-save rule accepts these with or without a monitor label.
    "retrieval_monitor_state_save_failures_total": ("monitor",),
    "retrieval_monitor_state_save_failing": ("monitor",),
    "retrieval_monitor_state_resets_total": ("monitor", "reason"),
    "retrieval_monitor_last_state_reset_timestamp_seconds": ("monitor", "reason"),
    "retrieval_monitor_last_state_save_timestamp_seconds": ("monitor",),
}
# Contract metrics the rules already use but the daemon on this branch does not export yet:
# the source metrics come with branch i10-sources, the state-save metrics with i10-state (issue
# 10). The live test expects them to be absent and fails once they appear: then empty this set.
PENDING_METRICS: frozenset[str] = frozenset()
# Series that Prometheus itself writes and the artefacts may use.
PROMETHEUS_SERIES = frozenset({"up", "ALERTS"})

_NAME = re.compile(r"\bretrieval_monitor_[a-z_]+\b")


def metric_names(expr: str) -> set[str]:
    """Every ``retrieval_monitor_*`` name an expression mentions."""
    return set(_NAME.findall(expr))


def load_dashboards() -> dict[str, dict[str, Any]]:
    """File name -> parsed dashboard JSON, for every file in ``grafana/dashboards``."""
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def dashboard_exprs(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(where, expr)`` for every query in a dashboard: panel targets and variable queries."""
    found: list[tuple[str, str]] = []
    for panel in iter_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            found.append(
                (f"panel {panel['id']} {panel['title']!r} {target['refId']}", target["expr"])
            )
    return found


def variable_queries(dashboard: Mapping[str, Any]) -> list[str]:
    """The ``label_values(...)`` queries of the dashboard's query variables."""
    return [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def substitute(expr: str, *, monitor: str, segment: str = ".*") -> str:
    """Replace Grafana's variables the way Grafana would for one monitor and all segments."""
    return (
        expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
        .replace("$monitor", monitor)
        .replace("$segment", segment)
    )


def grafana_value(value: str, variable: Mapping[str, Any]) -> str:
    """``value`` as Grafana's Prometheus data source interpolates it into a query for
    ``variable`` (``interpolateQueryExpr``, packages/grafana-prometheus/src/escaping.ts): a
    multi-valued or include-all variable's value is regex-escaped for the PromQL string
    (``prometheusSpecialRegexEscape``: ``search.v2`` -> ``search\\\\.v2``, the regex
    ``search\\.v2``), any other's has its backslashes and quotes escaped."""
    if variable.get("multi") or variable.get("includeAll"):
        value = value.replace("\\", "\\\\\\\\")
        return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)
    return value.replace("\\", "\\\\").replace("'", "\\\\'")


def load_grafana_rules() -> list[dict[str, Any]]:
    """Every Grafana-managed rule of ``grafana/provisioning/alerting/rules.yaml``."""
    doc = yaml.safe_load(GRAFANA_RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def grafana_query(rule: Mapping[str, Any]) -> str:
    """The PromQL of a Grafana rule: the ``expr`` of its one data-source query."""
    (query,) = [d for d in rule["data"] if d["datasourceUid"] != "__expr__"]
    expr: str = query["model"]["expr"]
    return expr


def load_rules() -> list[dict[str, Any]]:
    """Every rule of ``deploy/prometheus/alerts.yml``."""
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]
