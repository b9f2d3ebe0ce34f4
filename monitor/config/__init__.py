"""The TOML configuration, validated up front: every problem at once, each with its path.

Shape (``monitor.toml``; relative paths resolve against the file's directory)::

    [server]
    listen = "127.0.0.1:9464"        # /metrics, /healthz, /status
    state_dir = "state"              # persisted sequential state; survives restarts

    [report]                         # optional: links and history of the HTML pages
    runbook_url = "https://git.example.com/ops/retrieval-monitor/blob/main/docs/runbook.md"
    grafana_url = "https://grafana.example.com"

    [engine]                         # optional: check through cached summaries (docs/engines.md)
    kind = "local"                   # "local" | "dask" | "spark" | "auto"
    summary.bucket = "1h"

    [[monitors]]
    name = "web-search"              # the `monitor` label
    schedule = "1h"                  # interval or 5-field cron (UTC)
    scores.path = "data/scores"
    outcomes.path = "data/outcomes"
    windows.current = "1d"
    windows.reference = "7d"         # rolling; or windows.reference_start/_end (RFC 3339)

Every threshold has a default; ``docs/configuration.md`` lists each key with its default and why.

The package, in the order a file is read::

    model   the frozen dataclasses (``Config``, ``MonitorConfig``, ...) and their defaults
    fields  ``_Collector`` (problems with their paths) and the converters of single values
    checks  settings valid one by one that cannot work together (windows, buckets, resamples)
    parse   one parser per table, ``parse_config`` / ``load_config``, and the server flags
"""

from __future__ import annotations

from monitor.config.checks import MAX_RESAMPLES
from monitor.config.fields import parse_listen
from monitor.config.model import (
    ENGINE_KINDS,
    BudgetConfig,
    Config,
    DecayConfig,
    DriftConfig,
    EngineConfig,
    MonitorConfig,
    ReportConfig,
    ServerConfig,
    WindowConfig,
)
from monitor.config.parse import keep_flagged, load_config, parse_config, with_server_flags

__all__ = [
    "ENGINE_KINDS",
    "MAX_RESAMPLES",
    "BudgetConfig",
    "Config",
    "DecayConfig",
    "DriftConfig",
    "EngineConfig",
    "MonitorConfig",
    "ReportConfig",
    "ServerConfig",
    "WindowConfig",
    "keep_flagged",
    "load_config",
    "parse_config",
    "parse_listen",
    "with_server_flags",
]
