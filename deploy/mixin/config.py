"""Reads and checks ``deploy/mixin/config.toml``, the one configuration of the monitoring stack.

TOML because the daemon's own configuration is TOML (one format for operators to learn), it keeps
comments, its values are typed (an integer is not a string), and Python reads it without a
dependency (:mod:`tomllib`). Every problem is gathered and reported with its path before anything
is generated, like the daemon's own configuration check.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_PATH = Path(__file__).resolve().parent / "config.toml"
SEVERITIES = ("critical", "warning", "info")

# Each alert's own settings beyond severity and `for`: name -> kind ("duration" or "count").
ALERT_PARAMS: dict[str, dict[str, str]] = {
    "RetrievalModelDecay": {"keep_firing_for": "duration"},
    "RetrievalDataDrift": {"keep_firing_for": "duration"},
    "RetrievalMonitorInsufficientData": {},
    "RetrievalMonitorStale": {"periods": "count"},
    "RetrievalMonitorRunFailures": {},
    "RetrievalMonitorDown": {},
    "RetrievalMonitorSourceStale": {},
    "RetrievalMonitorStateSaveFailing": {"failure_window": "duration", "periods": "count"},
    "RetrievalMonitorStateReset": {"window": "duration"},
    "RetrievalMonitorLateScores": {},
}

_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")
# a duration with at least one non-zero part: a range selector of 0s selects nothing
_POSITIVE = re.compile(r"(?=.*[1-9])(?:[0-9]+(?:ms|s|m|h|d|w|y))+")
_UID_PART = re.compile(r"[a-zA-Z0-9_-]+")
_JOB = re.compile(r'[^"\\\n]+')
_URL = re.compile(r"https?://[^#\s]+")


class MixinConfigError(ValueError):
    """The mixin configuration has problems; ``problems`` lists each one with its path."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))


@dataclass(frozen=True, slots=True)
class AlertConfig:
    """Severity, ``for`` duration and the alert's own settings (see :data:`ALERT_PARAMS`)."""

    severity: str
    for_: str
    params: Mapping[str, str | int]

    def duration(self, name: str) -> str:
        """The duration setting ``name`` (a Prometheus duration string)."""
        value = self.params[name]
        if not isinstance(value, str):
            raise TypeError(f"`{name}` must be a duration; got {value!r}.")
        return value

    def count(self, name: str) -> int:
        """The integer setting ``name``."""
        value = self.params[name]
        if not isinstance(value, int):
            raise TypeError(f"`{name}` must be a count; got {value!r}.")
        return value


@dataclass(frozen=True, slots=True)
class MixinConfig:
    """Everything the generated rules, Grafana provisioning and dashboards take from one place."""

    job: str
    hold: str
    runbook_base: str
    dashboard_uid_prefix: str
    alert_uid_prefix: str
    folder: str
    datasource_uid: str
    evaluation_interval: str
    alerts: Mapping[str, AlertConfig]

    @property
    def selector(self) -> str:
        """The label matcher every expression carries, e.g. ``job="retrieval-monitor"``."""
        return f'job="{self.job}"'

    def runbook_url(self, alert: str) -> str:
        """The runbook section of ``alert`` (GitHub's anchor: the heading in lower case)."""
        return f"{self.runbook_base}#{alert.lower()}"


def _table(doc: Mapping[str, Any], key: str, problems: list[str]) -> Mapping[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        problems.append(f"{key}: must be a table; got {value!r}")
        return {}
    return value


def _string(
    table: Mapping[str, Any],
    path: str,
    key: str,
    problems: list[str],
    pattern: re.Pattern[str] | None = None,
    what: str = "a non-empty string",
) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value or (pattern and not pattern.fullmatch(value)):
        problems.append(f"{path}.{key}: must be {what}; got {value!r}")
        return ""
    return value


def _unknown(table: Mapping[str, Any], path: str, known: set[str], problems: list[str]) -> None:
    for key in sorted(set(table) - known):
        problems.append(f"{path}.{key}: unknown key; allowed: {sorted(known)}")


def _alert(name: str, table: Any, problems: list[str]) -> AlertConfig:
    path = f"alerts.{name}"
    if not isinstance(table, dict):
        problems.append(f"{path}: must be a table; got {table!r}")
        return AlertConfig("", "", {})
    kinds = ALERT_PARAMS[name]
    _unknown(table, path, {"severity", "for", *kinds}, problems)
    severity = table.get("severity")
    if severity not in SEVERITIES:
        problems.append(f"{path}.severity: must be one of {list(SEVERITIES)}; got {severity!r}")
    for_ = _string(table, path, "for", problems, _DURATION, "a duration such as '5m'")
    params: dict[str, str | int] = {}
    for key, kind in kinds.items():
        value = table.get(key)
        if kind == "duration":
            params[key] = _string(table, path, key, problems, _DURATION, "a duration such as '5m'")
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            params[key] = value
        else:
            problems.append(f"{path}.{key}: must be an integer >= 1; got {value!r}")
    return AlertConfig(str(severity), for_, params)


def parse(doc: Mapping[str, Any], path: Path = CONFIG_PATH) -> MixinConfig:
    """Check a parsed configuration; raise :class:`MixinConfigError` listing every problem."""
    problems: list[str] = []
    _unknown(doc, "", {"prometheus", "links", "grafana", "alerts"}, problems)
    prom = _table(doc, "prometheus", problems)
    links = _table(doc, "links", problems)
    grafana = _table(doc, "grafana", problems)
    alerts = _table(doc, "alerts", problems)
    _unknown(prom, "prometheus", {"job", "hold"}, problems)
    _unknown(links, "links", {"runbook_base"}, problems)
    grafana_keys = {
        "dashboard_uid_prefix",
        "alert_uid_prefix",
        "folder",
        "datasource_uid",
        "evaluation_interval",
    }
    _unknown(grafana, "grafana", grafana_keys, problems)
    job = _string(prom, "prometheus", "job", problems, _JOB, "a job name without quotes")
    hold = _string(
        prom, "prometheus", "hold", problems, _POSITIVE, "a duration above 0 such as '5m'"
    )
    runbook = _string(
        links, "links", "runbook_base", problems, _URL, "an http(s) URL without a '#' fragment"
    )
    uid_what = "letters, digits, '-' or '_'"
    config = MixinConfig(
        job=job,
        hold=hold,
        runbook_base=runbook,
        dashboard_uid_prefix=_string(
            grafana, "grafana", "dashboard_uid_prefix", problems, _UID_PART, uid_what
        ),
        alert_uid_prefix=_string(
            grafana, "grafana", "alert_uid_prefix", problems, _UID_PART, uid_what
        ),
        folder=_string(grafana, "grafana", "folder", problems),
        datasource_uid=_string(grafana, "grafana", "datasource_uid", problems, _UID_PART, uid_what),
        evaluation_interval=_string(
            grafana, "grafana", "evaluation_interval", problems, _DURATION, "a duration"
        ),
        alerts={
            name: _alert(name, alerts[name], problems) for name in ALERT_PARAMS if name in alerts
        },
    )
    for name in ALERT_PARAMS:
        if name not in alerts:
            problems.append(f"alerts.{name}: missing")
    _unknown(alerts, "alerts", set(ALERT_PARAMS), problems)
    _uid_lengths(config, problems)
    if problems:
        raise MixinConfigError(path, problems)
    return config


#: Grafana's longest uid, and the names the prefixes are joined with (``<prefix>-<name>``).
UID_MAX = 40
DASHBOARD_NAMES = ("overview", "drilldown")


def _uid_lengths(config: MixinConfig, problems: list[str]) -> None:
    """Append a problem for each prefix whose longest uid is past :data:`UID_MAX` characters."""
    longest = {
        "dashboard_uid_prefix": (config.dashboard_uid_prefix, max(DASHBOARD_NAMES, key=len)),
        "alert_uid_prefix": (config.alert_uid_prefix, max(ALERT_PARAMS, key=len).lower()),
    }
    for key, (prefix, name) in longest.items():
        if len(prefix) + 1 + len(name) > UID_MAX:
            problems.append(
                f"grafana.{key}: at most {UID_MAX - 1 - len(name)} characters (its uid "
                f"'{prefix}-{name}' is past Grafana's {UID_MAX}); got {len(prefix)}"
            )
    if (n := len(config.datasource_uid)) > UID_MAX:
        problems.append(f"grafana.datasource_uid: at most {UID_MAX} characters; got {n}")


def load(path: Path = CONFIG_PATH) -> MixinConfig:
    """Read and check the TOML file at ``path``."""
    with path.open("rb") as f:
        return parse(tomllib.load(f), path)
