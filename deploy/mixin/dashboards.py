"""The two Grafana dashboards (classic JSON model), built from the mixin configuration.

``python -m deploy.generate`` writes them to ``grafana/dashboards/``; ``tests/deploy`` fails when
the committed JSON differs from what it writes. Uids, the job selector of every expression and the
runbook link come from ``deploy/mixin/config.toml``.

Conventions: pinned ``uid``s, ``id`` null, a ``datasource`` template variable used by every panel
(no ``${DS_...}`` import placeholders), a unit on every data panel, coloured thresholds, and only
metric names the exporter exports (see docs/operations.md for what each panel shows).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from deploy.mixin.alerts import words
from deploy.mixin.config import MixinConfig

DS: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39

# State encoded as a number so one stat / state-timeline shows it with value mappings.
STATES = ("ok", "data_drift", "model_decay", "insufficient_data", "error")
STATE_COLOURS = {
    "ok": "green",
    "data_drift": "yellow",
    "model_decay": "red",
    "insufficient_data": "blue",
    "error": "purple",
}

Panel = dict[str, Any]


def _state_code(selector: str) -> str:
    """PromQL: 0..4 for the current state of each monitor matching ``selector``."""
    parts = [
        f'({i} * max by (monitor) (retrieval_monitor_state{{{selector},state="{s}"}} == 1))'
        for i, s in enumerate(STATES)
    ]
    return "\n  or ".join(parts)


def _state_mappings() -> list[dict[str, Any]]:
    return [
        {
            "type": "value",
            "options": {
                str(i): {"text": s, "color": STATE_COLOURS[s], "index": i}
                for i, s in enumerate(STATES)
            },
        }
    ]


def _last_success(m: str) -> str:
    """The time of the last successful check, as RetrievalMonitorStale reads it: when a monitor
    has never succeeded (0 or absent), the time its current state began."""
    return (
        f"(retrieval_monitor_last_success_timestamp_seconds{{{m}}} > 0\n"
        f"  or on (job, instance, monitor)\n"
        f"  retrieval_monitor_state_since_timestamp_seconds{{{m}}})"
    )


def _data_age(m: str) -> str:
    """Each source's newest row at the latest check as a share of its max_lag: the age the
    daemon's staleness rule compares (``slot - newest > max_lag``: RetrievalMonitorSourceStale),
    exported at the check's slot, not counted from now: between a daily check and the next,
    ``now - newest`` of a healthy feed grows to a day, past its max_lag."""
    return (
        f"retrieval_monitor_source_age_seconds{{{m}}}\n"
        "/ on (job, instance, monitor, source)\n"
        f"retrieval_monitor_source_max_lag_seconds{{{m}}}"
    )


#: What the data-age panels show.
_DATA_AGE_NOTE = (
    "Age of each source's newest row (scores, outcomes) at the latest check's slot, as a share "
    "of the source's max_lag: the age the daemon's staleness rule compares, so above 100 % the "
    "check found the source stale (RetrievalMonitorSourceStale). Measured at the check, not "
    "now: between two checks of a daily monitor a healthy feed's newest row ages a day, which "
    "the next check judges."
)


def _thresholds(*steps: tuple[str, float | None]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def _target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> dict[str, Any]:
    return {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend, **extra}


class _Layout:
    """Hands out panel ids and grid positions left to right, top to bottom."""

    def __init__(self) -> None:
        self.next_id = 1
        self.x = 0
        self.y = 0
        self.row_h = 0

    def place(self, panel: Panel, w: int, h: int) -> Panel:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel["id"] = self.next_id
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        return panel

    def row(self, title: str, **extra: Any) -> Panel:
        self.x, self.y = 0, self.y + self.row_h
        panel: Panel = {"type": "row", "title": title, "collapsed": False, "panels": [], **extra}
        panel["id"] = self.next_id
        panel["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": self.y}
        self.next_id += 1
        self.y += 1
        self.row_h = 0
        return panel


def _text_panel(runbook: str) -> Panel:
    content = (
        "**Data drift**: the distribution of logged top-1 retrieval scores moved (PSI/KS, CUSUM "
        "alarm) while the paired per-query outcomes establish no decay: traffic changed; the "
        "outcome panel's interval and MDE say how large a drop could still be unseen.  \n"
        "**Model decay**: per-query outcomes (e.g. nDCG@10) on the same labelled queries, paired "
        "by query id, dropped beyond the tolerated margin: quality itself is lower. "
        f"What to do for each alert: [runbook]({runbook})."
    )
    return {
        "type": "text",
        "title": "Drift versus decay",
        "options": {"mode": "markdown", "content": content},
    }


def _stat(
    title: str,
    expr: str,
    unit: str,
    thresholds: dict[str, Any],
    *,
    legend: str = "",
    description: str = "",
    mappings: list[dict[str, Any]] | None = None,
    color_mode: str = "background",
    text_mode: str = "value",
) -> Panel:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [_target(expr, legend, instant=True)],
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "thresholds": thresholds,
                "mappings": mappings or [],
                "color": {"mode": "thresholds"},
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": color_mode,
            "graphMode": "none",
            "textMode": text_mode,
            "justifyMode": "auto",
            "orientation": "auto",
        },
    }


def _dashed(name: str, colour: str = "red") -> dict[str, Any]:
    """Override: draw the series ``name`` as a dashed threshold line."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "color", "value": {"mode": "fixed", "fixedColor": colour}},
            {"id": "custom.fillOpacity", "value": 0},
        ],
    }


def _timeseries(
    title: str,
    targets: list[dict[str, Any]],
    unit: str,
    *,
    description: str = "",
    overrides: list[dict[str, Any]] | None = None,
    thresholds: dict[str, Any] | None = None,
    threshold_style: str = "off",
    log_scale: bool = False,
    draw: str = "line",
) -> Panel:
    custom: dict[str, Any] = {
        "drawStyle": draw,
        "lineWidth": 2,
        "fillOpacity": 0,
        "showPoints": "auto",
        "spanNulls": True,
        "thresholdsStyle": {"mode": threshold_style},
        "axisSoftMin": 0 if not log_scale else None,
    }
    if log_scale:
        custom["scaleDistribution"] = {"type": "log", "log": 10}
        del custom["axisSoftMin"]
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "custom": custom,
                "color": {"mode": "palette-classic"},
                "thresholds": thresholds or _thresholds(("green", None)),
            },
            "overrides": overrides or [],
        },
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        },
    }


def _band_overrides(upper: str, lower: str) -> list[dict[str, Any]]:
    """Overrides that shade the interval: ``upper`` is filled down to ``lower``.

    ``fillBelowTo`` needs exact display names, so the band is exact where the panel shows one
    segment (the drill-down repeats the panel per segment); elsewhere the bounds are thin lines.
    """
    bound_style = [
        {"id": "custom.lineWidth", "value": 1},
        {"id": "custom.lineStyle", "value": {"fill": "dot", "dash": [2, 4]}},
        {"id": "color", "value": {"mode": "fixed", "fixedColor": "blue"}},
    ]
    return [
        {"matcher": {"id": "byRegexp", "options": "^(upper|lower).*"}, "properties": bound_style},
        {
            "matcher": {"id": "byName", "options": upper},
            "properties": [
                {"id": "custom.fillBelowTo", "value": lower},
                {"id": "custom.fillOpacity", "value": 25},
            ],
        },
    ]


def _variables(selector: str, *, overview: bool) -> dict[str, Any]:
    ds_var = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
    }
    monitor_query = f"label_values(retrieval_monitor_state{{{selector}}}, monitor)"
    monitor_var = {
        "name": "monitor",
        "label": "Monitor",
        "type": "query",
        "datasource": DS,
        "query": {"query": monitor_query, "refId": "monitor"},
        "definition": monitor_query,
        "refresh": 2,
        "sort": 1,
        "multi": overview,
        "includeAll": overview,
        "current": {},
        "hide": 0,
        "regex": "",
    }
    variables: list[dict[str, Any]] = [ds_var, monitor_var]
    if not overview:
        pairs = f'retrieval_monitor_outcome_pairs{{{selector},monitor="$monitor"}}'
        seg_query = f"label_values({pairs}, segment)"
        variables.append(
            {
                "name": "segment",
                "label": "Segment",
                "type": "query",
                "datasource": DS,
                "query": {"query": seg_query, "refId": "segment"},
                "definition": seg_query,
                "refresh": 2,
                "sort": 1,
                "multi": True,
                "includeAll": True,
                # Matches monitors without a segment column too (their series have no label).
                "allValue": ".*",
                "current": {},
                "hide": 0,
                "regex": "",
            }
        )
    return {"list": variables}


def _dashboard(
    config: MixinConfig, name: str, title: str, panels: list[Panel], *, overview: bool
) -> dict[str, Any]:
    return {
        "id": None,
        "uid": f"{config.dashboard_uid_prefix}-{name}",
        "title": title,
        "description": "retrieval-monitor: data drift versus model decay",
        "tags": ["retrieval-monitor"],
        "timezone": "utc",
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "1m",
        "time": {"from": "now-7d", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "annotations": {"list": []},
        "links": [
            {
                "title": "Runbook",
                "type": "link",
                "url": config.runbook_base,
                "targetBlank": True,
                "icon": "doc",
                "tags": [],
                "asDropdown": False,
                "includeVars": False,
                "keepTime": False,
                "tooltip": "",
            },
            {
                "title": "retrieval-monitor dashboards",
                "type": "dashboards",
                "tags": ["retrieval-monitor"],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
                "icon": "external link",
                "targetBlank": False,
                "tooltip": "",
                "url": "",
            },
        ],
        "templating": _variables(config.selector, overview=overview),
        "panels": panels,
    }


def overview(config: MixinConfig) -> dict[str, Any]:
    """One repeated row per monitor: state, time in state, PSI/KS, outcome band, freshness, runs."""
    lay = _Layout()
    # =~: the repeated rows' variable is multi-valued, and Grafana regex-escapes such a value
    # ("search.v2" -> "search\\.v2"), which an exact match never equals: every panel of a
    # monitor with a dot in its name showed no data
    m = f'{config.selector},monitor=~"$monitor"'
    stale = config.alerts["RetrievalMonitorStale"].count("periods")
    panels: list[Panel] = [lay.place(_text_panel(config.runbook_base), 18, 4)]
    panels.append(
        lay.place(
            _stat(
                "Monitors by state",
                f"sum by (state) (retrieval_monitor_state{{{config.selector}}} == 1)",
                "none",
                _thresholds(("blue", None)),
                legend="{{state}}",
                color_mode="value",
                text_mode="value_and_name",
            ),
            6,
            4,
        )
    )
    panels.append(lay.row("Monitor $monitor", repeat="monitor"))
    panels.append(
        lay.place(
            _stat(
                "Current state",
                _state_code(m),
                "none",
                _thresholds(("green", None)),
                mappings=_state_mappings(),
                description="ok, data_drift, model_decay, insufficient_data or error.",
            ),
            4,
            5,
        )
    )
    panels.append(
        lay.place(
            _stat(
                "Time in state",
                f"time() - retrieval_monitor_state_since_timestamp_seconds{{{m}}}",
                "s",
                _thresholds(("text", None)),
                color_mode="value",
                description="Since the current state began (persisted across restarts).",
            ),
            4,
            5,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "PSI vs tolerance",
                [
                    _target(f"retrieval_monitor_psi{{{m}}}", "PSI {{segment}}", "A"),
                    _target(f"retrieval_monitor_psi_debiased{{{m}}}", "debiased {{segment}}", "B"),
                    _target(f"retrieval_monitor_psi_tolerance{{{m}}}", "tolerance", "C"),
                ],
                "none",
                overrides=[_dashed("tolerance")],
                description=(
                    "PSI of the current window vs the reference; debiased = max(0, PSI - noise "
                    "floor). The dashed line is the tolerance the monitor ignores."
                ),
            ),
            8,
            5,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Drift evidence (CUSUM) vs alarm threshold h",
                [
                    _target(f"retrieval_monitor_drift_cusum{{{m}}}", "CUSUM {{segment}}", "A"),
                    _target(f"retrieval_monitor_drift_cusum_threshold{{{m}}}", "h", "B"),
                ],
                "none",
                overrides=[_dashed("h")],
                description="S_t = max(0, S_{t-1} + z_t - k); drift is declared when S_t > h.",
            ),
            8,
            5,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "KS statistic",
                [
                    _target(f"retrieval_monitor_ks_statistic{{{m}}}", "D {{segment}}", "A"),
                ],
                "none",
                thresholds=_thresholds(("green", None), ("orange", 0.1), ("red", 0.2)),
                threshold_style="dashed",
                description="Two-sample KS D of current vs reference scores (0.1 / 0.2 guides).",
            ),
            6,
            6,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Outcome mean difference (band = interval)",
                [
                    _target(
                        f"retrieval_monitor_outcome_mean_difference{{{m}}}", "mean {{segment}}", "A"
                    ),
                    _target(f"retrieval_monitor_outcome_ci_upper{{{m}}}", "upper {{segment}}", "B"),
                    _target(f"retrieval_monitor_outcome_ci_lower{{{m}}}", "lower {{segment}}", "C"),
                    _target(f"-retrieval_monitor_outcome_margin{{{m}}}", "-margin", "D"),
                ],
                "none",
                overrides=[*_band_overrides("upper ", "lower "), _dashed("-margin")],
                description=(
                    "mean(current - reference) over queries paired by id, with its interval; "
                    "decay is declared when the test rejects 'no worse than -margin' (dashed)."
                ),
            ),
            8,
            6,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Pairs and minimum detectable effect",
                [
                    _target(f"retrieval_monitor_outcome_pairs{{{m}}}", "pairs {{segment}}", "A"),
                    _target(f"retrieval_monitor_outcome_mde{{{m}}}", "MDE {{segment}}", "B"),
                ],
                "none",
                overrides=[
                    {
                        "matcher": {"id": "byRegexp", "options": "MDE.*"},
                        "properties": [
                            {"id": "custom.axisPlacement", "value": "right"},
                            {"id": "unit", "value": "none"},
                        ],
                    }
                ],
                description="Paired queries (left), smallest decay the test can see (right).",
            ),
            5,
            6,
        )
    )
    panels.append(
        lay.place(
            _stat(
                "Data age / max_lag",
                _data_age(m),
                "percentunit",
                _thresholds(("green", None), ("orange", 0.75), ("red", 1)),
                legend="{{source}}",
                text_mode="value_and_name",
                description=_DATA_AGE_NOTE,
            ),
            5,
            3,
        )
    )
    panels.append(
        lay.place(
            _stat(
                "Since last success (periods)",
                f"(time() - {_last_success(m)})\n"
                f"  / on (job, instance, monitor)\n"
                f"  retrieval_monitor_schedule_interval_seconds{{{m}}}",
                "none",
                _thresholds(("green", None), ("orange", stale - 0.5), ("red", stale)),
                description="Time since the last successful check in schedule periods (a cron "
                "schedule's longest gap; a monitor that never succeeded counts from when its "
                f"state began, as the alert does): RetrievalMonitorStale fires after "
                f"{words(stale)}.",
            ),
            5,
            3,
        )
    )
    panels.append(
        lay.place(
            _stat(
                "Failed runs in range",
                f"sum(increase(retrieval_monitor_run_failures_total{{{m}}}[$__range]))",
                "none",
                _thresholds(("green", None), ("red", 1)),
                description="Runs that ended in state error during the dashboard time range.",
            ),
            5,
            3,
        )
    )
    panels.append(
        lay.place(
            _stat(
                "Last run duration",
                f"retrieval_monitor_last_run_duration_seconds{{{m}}}",
                "s",
                _thresholds(("green", None), ("orange", 60), ("red", 300)),
                color_mode="value",
            ),
            5,
            3,
        )
    )
    return _dashboard(config, "overview", "Retrieval monitor: overview", panels, overview=True)


def drilldown(config: MixinConfig) -> dict[str, Any]:
    """One monitor, chosen segments: every statistic behind the verdict, over time."""
    lay = _Layout()
    m = f'{config.selector},monitor="$monitor"'
    ms = f'{m},segment=~"$segment"'
    panels: list[Panel] = [lay.place(_text_panel(config.runbook_base), 24, 3)]
    panels.append(lay.row("State"))
    panels.append(
        lay.place(
            {
                "type": "state-timeline",
                "title": "State over time",
                "datasource": DS,
                "targets": [_target(_state_code(m), "{{monitor}}")],
                "fieldConfig": {
                    "defaults": {
                        "unit": "none",
                        "mappings": _state_mappings(),
                        "thresholds": _thresholds(("green", None)),
                        "color": {"mode": "thresholds"},
                        "custom": {"fillOpacity": 80, "lineWidth": 0},
                    },
                    "overrides": [],
                },
                "options": {"showValue": "auto", "mergeValues": True, "rowHeight": 0.9},
            },
            16,
            4,
        )
    )
    panels.append(
        lay.place(
            _stat(
                "Verdict flags",
                # a `flag` label each: `or` matches on every other label, and both series
                # carry the same ones, so a plain `or` dropped every decay flag
                f'label_replace(retrieval_monitor_input_drift{{{ms}}}, "flag", "input drift", '
                f'"", "") or label_replace(retrieval_monitor_model_decay{{{ms}}}, "flag", '
                f'"model decay", "", "")',
                "none",
                _thresholds(("green", None), ("red", 1)),
                legend="{{flag}} {{segment}}",
                text_mode="value_and_name",
            ),
            8,
            4,
        )
    )
    panels.append(lay.row("Input drift (top-1 scores)"))
    panels.append(
        lay.place(
            _timeseries(
                "PSI, noise floor and tolerance",
                [
                    _target(f"retrieval_monitor_psi{{{ms}}}", "PSI {{segment}}", "A"),
                    _target(f"retrieval_monitor_psi_debiased{{{ms}}}", "debiased {{segment}}", "B"),
                    _target(f"retrieval_monitor_psi_noise_floor{{{ms}}}", "floor {{segment}}", "C"),
                    _target(f"retrieval_monitor_psi_tolerance{{{m}}}", "tolerance", "D"),
                ],
                "none",
                overrides=[_dashed("tolerance")],
                description="Noise floor = (B-1)(1/n+1/m): the PSI expected with no drift at all.",
            ),
            12,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Drift p-values (PSI tolerance null, KS)",
                [
                    _target(f"retrieval_monitor_psi_pvalue{{{ms}}}", "PSI p {{segment}}", "A"),
                    _target(f"retrieval_monitor_ks_pvalue{{{ms}}}", "KS p {{segment}}", "B"),
                ],
                "none",
                log_scale=True,
                description="Per-window p-values; the alarm is CUSUM/Shewhart on z, not p < 0.05.",
            ),
            12,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "CUSUM S_t vs h",
                [
                    _target(f"retrieval_monitor_drift_cusum{{{ms}}}", "S {{segment}}", "A"),
                    _target(f"retrieval_monitor_drift_cusum_threshold{{{m}}}", "h", "B"),
                ],
                "none",
                overrides=[_dashed("h")],
            ),
            8,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Evidence z vs immediate threshold",
                [
                    _target(f"retrieval_monitor_drift_z{{{ms}}}", "z {{segment}}", "A"),
                    _target(f"retrieval_monitor_drift_z_threshold{{{m}}}", "z threshold", "B"),
                ],
                "none",
                overrides=[_dashed("z threshold")],
            ),
            8,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "KS statistic D",
                [_target(f"retrieval_monitor_ks_statistic{{{ms}}}", "D {{segment}}", "A")],
                "none",
                thresholds=_thresholds(("green", None), ("orange", 0.1), ("red", 0.2)),
                threshold_style="dashed",
            ),
            8,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Zero-score and out-of-range shares",
                [
                    _target(
                        f"retrieval_monitor_zero_score_ratio{{{ms}}}",
                        "zero {{window}} {{segment}}",
                        "A",
                    ),
                    _target(
                        f"retrieval_monitor_out_of_range_ratio{{{ms}}}",
                        "out of range {{segment}}",
                        "B",
                    ),
                ],
                "percentunit",
                thresholds=_thresholds(("green", None), ("orange", 0.05), ("red", 0.1)),
                threshold_style="dashed",
                description=(
                    "Empty results score 0; out of range = outside the reference's range. "
                    "A jump here usually means a pipeline change, not user behaviour."
                ),
            ),
            12,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Window sizes",
                [_target(f"retrieval_monitor_window_samples{{{m}}}", "{{source}} {{window}}", "A")],
                "none",
                draw="bars",
            ),
            12,
            7,
        )
    )
    panels.append(lay.row("Model decay (paired outcomes)"))
    panels.append(
        lay.place(
            _timeseries(
                "Outcome mean difference (band = interval) vs -margin: $segment",
                [
                    _target(f"retrieval_monitor_outcome_mean_difference{{{ms}}}", "mean", "A"),
                    _target(f"retrieval_monitor_outcome_ci_upper{{{ms}}}", "upper", "B"),
                    _target(f"retrieval_monitor_outcome_ci_lower{{{ms}}}", "lower", "C"),
                    _target(f"-retrieval_monitor_outcome_margin{{{m}}}", "-margin", "D"),
                ],
                "none",
                overrides=[*_band_overrides("upper", "lower"), _dashed("-margin")],
                description="Repeated per segment, so each band is one segment's interval.",
            ),
            12,
            7,
        )
    )
    panels[-1].update(repeat="segment", repeatDirection="h", maxPerRow=2)
    panels.append(
        lay.place(
            _timeseries(
                "Decay p-value vs per-look alpha",
                [
                    _target(f"retrieval_monitor_outcome_pvalue{{{ms}}}", "p {{segment}}", "A"),
                    _target(f"retrieval_monitor_outcome_alpha{{{m}}}", "alpha", "B"),
                ],
                "none",
                log_scale=True,
                overrides=[_dashed("alpha")],
                description="One-sided sign-flip p (Holm over segments); decay needs p <= alpha.",
            ),
            12,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Effect size",
                [
                    _target(
                        f"retrieval_monitor_outcome_effect_size{{{ms}}}", "effect {{segment}}", "A"
                    )
                ],
                "none",
                thresholds=_thresholds(("red", None), ("orange", -0.5), ("green", -0.2)),
                threshold_style="dashed",
            ),
            8,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "MDE vs tolerated decay",
                [
                    _target(f"retrieval_monitor_outcome_mde{{{ms}}}", "MDE {{segment}}", "A"),
                    _target(f"retrieval_monitor_outcome_margin{{{m}}}", "margin", "B"),
                ],
                "none",
                overrides=[_dashed("margin", "orange")],
                description="If the MDE is well above the margin the query set is too small.",
            ),
            8,
            7,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Pairs and pairing coverage",
                [
                    _target(f"retrieval_monitor_outcome_pairs{{{ms}}}", "pairs {{segment}}", "A"),
                    _target(
                        f"retrieval_monitor_outcome_pairing_coverage_ratio{{{ms}}}",
                        "coverage {{segment}}",
                        "B",
                    ),
                ],
                "none",
                overrides=[
                    {
                        "matcher": {"id": "byRegexp", "options": "coverage.*"},
                        "properties": [
                            {"id": "unit", "value": "percentunit"},
                            {"id": "custom.axisPlacement", "value": "right"},
                        ],
                    }
                ],
            ),
            8,
            7,
        )
    )
    panels.append(lay.row("Runs and data"))
    panels.append(
        lay.place(
            _timeseries(
                "Data age per source / max_lag",
                [_target(_data_age(m), "{{source}}")],
                "percentunit",
                description=_DATA_AGE_NOTE,
                thresholds=_thresholds(("green", None), ("orange", 0.75), ("red", 1)),
                threshold_style="dashed",
            ),
            8,
            6,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Runs and failures",
                [
                    _target(f"increase(retrieval_monitor_runs_total{{{m}}}[1h])", "runs / h", "A"),
                    _target(
                        f"increase(retrieval_monitor_run_failures_total{{{m}}}[1h])",
                        "failures / h",
                        "B",
                    ),
                ],
                "none",
                overrides=[_dashed("failures / h")],
            ),
            8,
            6,
        )
    )
    panels.append(
        lay.place(
            _timeseries(
                "Run duration vs schedule",
                [
                    _target(f"retrieval_monitor_last_run_duration_seconds{{{m}}}", "duration", "A"),
                    _target(
                        f"time() - {_last_success(m)}",
                        "since last success",
                        "B",
                    ),
                    _target(
                        f"{config.alerts['RetrievalMonitorStale'].count('periods')} * "
                        f"retrieval_monitor_schedule_interval_seconds{{{m}}}",
                        "stale limit",
                        "C",
                    ),
                ],
                "s",
                overrides=[_dashed("stale limit")],
            ),
            8,
            6,
        )
    )
    panels.append(
        lay.place(
            _stat(
                "Build",
                f"retrieval_monitor_build_info{{{config.selector}}}",
                "none",
                _thresholds(("text", None)),
                legend="{{version}}",
                color_mode="none",
                text_mode="name",
            ),
            24,
            3,
        )
    )
    return _dashboard(config, "drilldown", "Retrieval monitor: drill-down", panels, overview=False)


DASHBOARDS: dict[str, Callable[[MixinConfig], dict[str, Any]]] = {
    "overview.json": overview,
    "drilldown.json": drilldown,
}


def render(config: MixinConfig, build: Callable[[MixinConfig], dict[str, Any]]) -> str:
    """The file text of one dashboard: sorted keys, two-space indent, trailing newline."""
    return json.dumps(build(config), indent=2, sort_keys=True) + "\n"
