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
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from monitor.errors import ConfigError, StatsInputError
from monitor.schedule import (
    Schedule,
    cron_walk,
    format_duration,
    parse_duration,
    parse_rfc3339,
    parse_schedule,
)
from monitor.sources import JudgedSpec, OutcomeSpec, ScoreSpec
from monitor.sources.model import GainKind
from monitor.stats import parse_metric
from monitor.webconfig import TlsConfig, WebConfig, check_tls_files, load_web_config, unreadable

__all__ = [
    "BudgetConfig",
    "Config",
    "DecayConfig",
    "DriftConfig",
    "EngineConfig",
    "MonitorConfig",
    "ReportConfig",
    "ServerConfig",
    "WindowConfig",
    "load_config",
    "parse_config",
    "parse_listen",
    "with_server_flags",
]

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The HTTP endpoint and the state directory.

    TLS comes from the web config file (exporter-toolkit format) when it has a
    ``tls_server_config``, else from ``tls_cert_file``/``tls_key_file``; :meth:`tls` says which.
    """

    host: str = "127.0.0.1"
    port: int = 9464
    state_dir: Path = Path("state")
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    shutdown_timeout: timedelta = timedelta(seconds=30)
    web_config_file: Path | None = None
    web: WebConfig = field(default_factory=WebConfig)
    max_connections: int = 64
    request_timeout: timedelta = timedelta(seconds=10)
    idle_timeout: timedelta = timedelta(seconds=60)

    def tls(self) -> TlsConfig | None:
        """The TLS settings in force, or ``None`` for plain HTTP."""
        if self.web.tls is not None:
            return self.web.tls
        if self.tls_cert_file is not None and self.tls_key_file is not None:
            return TlsConfig(cert_file=self.tls_cert_file, key_file=self.tls_key_file)
        return None

    @property
    def listen(self) -> str:
        """``host:port`` (``[host]:port`` for IPv6), as written in the config."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ReportConfig:
    """The HTML pages (``monitor report``, ``/monitors/<name>``, ``/``): link bases and the
    bounded check history (see ``monitor.report.history``).

    ``runbook_url``: where ``docs/runbook.md`` is rendered; a page links
    ``<runbook_url>#<alert name, lower case>``. ``grafana_url``: the Grafana base URL; a page
    links the provisioned dashboards (uids ``retrieval-monitor-overview`` and
    ``retrieval-monitor-drilldown``) with ``var-monitor`` set. None: no link is drawn.
    """

    runbook_url: str | None = None
    grafana_url: str | None = None
    history_max_entries: int = 10_000
    history_max_age: timedelta = timedelta(days=35)


ENGINE_KINDS = ("local", "dask", "spark", "auto")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Checks through mergeable summaries (``monitor.incremental``; docs/engines.md): where the
    summaries of new buckets are computed and how the frozen grid and the bucket cache behave.

    ``kind = "auto"`` uses the cluster engine (``spark`` when ``spark_master`` or
    ``spark_remote`` is set, else ``dask`` when ``dask_address`` is set) when the rows to read,
    from the parquet footers, reach ``auto_rows``, and ``local`` below. ``grid = "full"``: every
    distinct reference value is a grid point (exact KS on a fixed reference; small windows).
    ``regrid``: the grid's age limit (None: the reference window's length; a fixed reference
    keeps its grid while its bounds stay). ``grid_sample_rows``: a grid is built from about this
    many reference rows (every k-th row group)."""

    kind: str = "local"
    dask_address: str | None = None
    spark_master: str | None = None
    spark_remote: str | None = None
    auto_rows: int = 100_000_000
    bucket: timedelta = timedelta(hours=1)
    max_effect: float = 0.1
    grid: str = "auto"
    grid_sample_rows: int = 20_000_000
    regrid: timedelta | None = None
    cache_max_bytes: int = 1 << 30

    def cluster_kind(self) -> str | None:
        """The engine ``auto`` moves to for large reads (None: none configured)."""
        if self.spark_master is not None or self.spark_remote is not None:
            return "spark"
        if self.dask_address is not None:
            return "dask"
        return None


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """Current window ``[at - current, at)``; reference rolling (``reference`` before it, after
    ``gap``) or fixed ``[reference_start, reference_end)``."""

    current: timedelta = timedelta(days=1)
    reference: timedelta | None = timedelta(days=7)
    gap: timedelta = timedelta(0)
    reference_start: datetime | None = None
    reference_end: datetime | None = None

    @property
    def fixed_reference(self) -> bool:
        """True when the reference is a fixed healthy baseline period."""
        return self.reference_start is not None

    @property
    def reference_span(self) -> timedelta:
        """Length of the reference window (rolling or fixed)."""
        if self.reference_start is not None and self.reference_end is not None:
            return self.reference_end - self.reference_start
        return self.reference or timedelta(0)


@dataclass(frozen=True, slots=True)
class DriftConfig:
    """Input drift on top-1 scores (PSI tolerance null + CUSUM/immediate alarm; see README)."""

    bins: int = 10
    tolerance: float = 0.02
    smoothing: float = 0.5
    min_reference_samples: int = 1000
    min_current_samples: int = 200
    min_block_samples: int = 200
    cusum_k: float = 0.5
    cusum_share: float = 0.8
    clear_after: int = 3
    clear_share: float = 0.5
    seasonality: str = "auto"
    anchor: bool = True
    anchor_refresh: timedelta = timedelta(days=28)


@dataclass(frozen=True, slots=True)
class DecayConfig:
    """Model decay on paired outcomes (one-sided sign-flip test of current < reference - margin)."""

    margin: float = 0.005
    min_pairs: int = 20
    min_coverage: float = 0.8
    n_resamples: int | None = None
    confidence_level: float = 0.95
    power: float = 0.8
    looks: int | None = None
    cadence: timedelta = timedelta(days=1)
    run_gap: timedelta = timedelta(hours=1)
    settle: timedelta = timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """False-alarm budget: at most ``drift`` (``decay``) chance of any false alarm a ``period``."""

    period: timedelta = timedelta(days=30)
    drift: float = 0.05
    decay: float = 0.05


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    """One monitored retrieval system."""

    name: str
    schedule: Schedule
    scores: ScoreSpec
    outcomes: OutcomeSpec
    seed: int = 0
    windows: WindowConfig = field(default_factory=WindowConfig)
    drift: DriftConfig = field(default_factory=DriftConfig)
    decay: DecayConfig = field(default_factory=DecayConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    max_segments: int = 20
    max_invalid_share: float = 0.01
    run_timeout: timedelta = timedelta(minutes=10)
    misfire_grace: timedelta = timedelta(minutes=5)
    scores_max_lag: timedelta | None = None
    outcomes_max_lag: timedelta | None = None
    engine: str | None = None  # "local" | "dask" | "spark" | "auto": overrides [engine].kind

    @property
    def score_lag_limit(self) -> timedelta:
        """``scores.max_lag``, default ``clamp(2 x schedule interval, 1h, 6h)``."""
        if self.scores_max_lag is not None:
            return self.scores_max_lag
        interval = self.schedule.nominal_interval(self.budget.period)
        return min(max(2 * interval, timedelta(hours=1)), timedelta(hours=6))

    @property
    def outcome_lag_limit(self) -> timedelta:
        """``outcomes.max_lag``, default ``2 x decay.cadence + decay.settle``."""
        if self.outcomes_max_lag is not None:
            return self.outcomes_max_lag
        return 2 * self.decay.cadence + self.decay.settle

    @property
    def seasonal_period(self) -> timedelta | None:
        """The seasonal period drift blocks are phase-matched over (None: no seasonality).

        ``auto``: weekly (hour of week) when the reference spans at least 7 days, daily (hour of
        day) when it spans at least 2 days, else none. Weekly is the default because weekend
        traffic differs from weekday traffic in most products (measured in docs/detection.md).
        """
        mode = _seasonal_mode(self.drift.seasonality, self.windows.reference_span)
        return {"daily": timedelta(days=1), "weekly": timedelta(days=7)}.get(mode)


def _seasonal_mode(seasonality: str, reference_span: timedelta) -> str:
    """``seasonality`` with ``auto`` resolved by the reference's span (7 days: weekly; 2 days:
    daily; else none)."""
    if seasonality != "auto":
        return seasonality
    if reference_span >= timedelta(days=7):
        return "weekly"
    return "daily" if reference_span >= timedelta(days=2) else "none"


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration."""

    server: ServerConfig
    monitors: tuple[MonitorConfig, ...]
    path: Path | None = None
    report: ReportConfig = field(default_factory=ReportConfig)
    engine: EngineConfig | None = None  # None: no [engine] table
    # the ServerConfig fields a command-line flag set (``with_server_flags``): they win over
    # the file's at start-up and at every reload (``keep_flagged``)
    flagged: frozenset[str] = frozenset()

    def engine_for(self, monitor: MonitorConfig) -> EngineConfig | None:
        """The engine settings a monitor checks with (its ``engine`` overriding ``kind``), or
        None when it reads whole windows into memory (no ``[engine]`` table, no override)."""
        if self.engine is None and monitor.engine is None:
            return None
        base = self.engine or EngineConfig()
        return base if monitor.engine is None else replace(base, kind=monitor.engine)

    def monitor(self, name: str) -> MonitorConfig:
        """The monitor called ``name``; ``KeyError`` listing the known names otherwise."""
        for m in self.monitors:
            if m.name == name:
                return m
        known = ", ".join(m.name for m in self.monitors)
        raise KeyError(f"no monitor named {name!r}; known: {known}")


class _Collector:
    """Gathers problems while reading a TOML table, each prefixed with its path."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def table(self, data: Any, path: str) -> dict[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.add(path, f"must be a table; got {type(data).__name__}")
            return {}
        return data

    def unknown(self, data: dict[str, Any], path: str, known: set[str]) -> None:
        for key in sorted(set(data) - known):
            where = f"{path}.{key}" if path else key
            self.add(where, f"unknown key (known: {', '.join(sorted(known))})")

    def get(
        self,
        data: dict[str, Any],
        key: str,
        path: str,
        default: T,
        convert: Callable[[Any], T],
    ) -> T:
        if key not in data:
            return default
        where = f"{path}.{key}" if path else key
        try:
            return convert(data[key])
        except (ValueError, TypeError) as exc:
            self.add(where, str(exc))
            return default


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string; got {value!r}")
    return value


def _optional_string(value: Any) -> str | None:
    return _string(value)


def _int(low: int, high: int | None = None) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < low
            or (high is not None and value > high)
        ):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise ValueError(f"must be an integer {bound}; got {value!r}")
        return value

    return convert


def _float(
    low: float, high: float, *, open_low: bool = False, open_high: bool = False
) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok:
            v = float(value)
            ok = math.isfinite(v) and (v > low if open_low else v >= low)
            ok = ok and (v < high if open_high else v <= high)
        if not ok:
            lo = "(" if open_low else "["
            hi = ")" if open_high else "]"
            raise ValueError(f"must be a number in {lo}{low}, {high}{hi}; got {value!r}")
        return float(value)

    return convert


def _gain(value: Any) -> GainKind:
    if value == "linear":
        return "linear"
    if value == "exponential":
        return "exponential"
    raise ValueError(f"must be 'linear' or 'exponential'; got {value!r}")


def _duration(value: Any) -> timedelta:
    if not isinstance(value, str):
        raise ValueError(f"must be a duration string like '1h'; got {value!r}")
    return parse_duration(value)


def _nonneg_duration(value: Any) -> timedelta:
    """A duration that may be zero: ``0``, or zero of any unit (``"0s"``, ``"0m"``, ``"0.0h"``)."""
    if value == 0 or value == "0":
        return timedelta(0)
    if not isinstance(value, str):
        raise ValueError(f"must be a duration string like '1h'; got {value!r}")
    return parse_duration(value, zero=True)


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = parse_rfc3339(value)
        except ValueError:
            raise ValueError(f"must be an RFC 3339 timestamp; got {value!r}") from None
    else:
        raise ValueError(f"must be an RFC 3339 timestamp; got {value!r}")
    if parsed.tzinfo is None:
        raise ValueError(f"must carry a timezone (e.g. 'Z'); got {value!r}")
    return parsed.astimezone(UTC)


def _unit(value: Any) -> Any:
    if value not in ("s", "ms", "us", "ns"):
        raise ValueError(f"must be one of 's', 'ms', 'us', 'ns'; got {value!r}")
    return str(value)


def _resolve(base: Path, text: str) -> str:
    if "://" in text or Path(text).is_absolute():
        return text
    return str(base / text)


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?$")


def parse_listen(text: Any) -> tuple[str, int]:
    """``(host, port)`` of ``host:port``, ``[IPv6]:port`` or ``:port`` (loopback); ``ValueError``.

    A hostname must resolve (``getaddrinfo``), since binding it would fail at start-up otherwise.
    """
    shape = "must be 'host:port', '[IPv6]:port' or ':port' with a port in [0, 65535]"
    if not isinstance(text, str):
        raise ValueError(f"{shape}; got {text!r}")
    match = re.fullmatch(r"(?:\[([^\]]+)\]|([^\[\]:]*)):(\d{1,5})", text)
    if match is None:
        if text.count(":") > 1 and not text.startswith("["):
            raise ValueError(f"{shape} (put an IPv6 address in brackets); got {text!r}")
        raise ValueError(f"{shape}; got {text!r}")
    v6, host, port_text = match.groups()
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"{shape}; got {text!r}")
    if v6 is not None:
        try:
            if ipaddress.ip_address(v6.split("%", 1)[0]).version != 6:
                raise ValueError
        except ValueError:
            raise ValueError(f"'[{v6}]' is not an IPv6 address; got {text!r}") from None
        return v6, port
    if not host:
        return "127.0.0.1", port
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        pass
    else:
        return host, port
    if re.fullmatch(r"[0-9.]+", host) or not _HOSTNAME.match(host):
        raise ValueError(f"{host!r} is neither an IPv4 address nor a hostname; got {text!r}")
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ValueError(f"hostname {host!r} does not resolve ({exc}); got {text!r}") from None
    return host, port


def _web_config(c: _Collector, where: str, path: Path) -> WebConfig | None:
    web, problems = load_web_config(path)
    for problem in problems:
        c.add(where, f"{path}: {problem}")
    return web


def _parse_server(c: _Collector, data: Any, base: Path) -> ServerConfig:
    t = c.table(data, "server")
    c.unknown(
        t,
        "server",
        {
            "listen",
            "state_dir",
            "tls_cert_file",
            "tls_key_file",
            "shutdown_timeout",
            "web_config_file",
            "max_connections",
            "request_timeout",
            "idle_timeout",
        },
    )
    host, port = c.get(t, "listen", "server", ("127.0.0.1", 9464), parse_listen)
    state_dir = Path(_resolve(base, c.get(t, "state_dir", "server", "state", _string)))
    cert = c.get(t, "tls_cert_file", "server", None, _optional_string)
    key = c.get(t, "tls_key_file", "server", None, _optional_string)
    cert_path = Path(_resolve(base, cert)) if cert else None
    key_path = Path(_resolve(base, key)) if key else None
    if (cert is None) != (key is None):
        c.add("server", "tls_cert_file and tls_key_file must be given together")
    elif cert_path is not None and key_path is not None:
        problem = check_tls_files(TlsConfig(cert_file=cert_path, key_file=key_path))
        if problem is not None:
            c.add("server.tls_cert_file", problem)
    web_file = c.get(t, "web_config_file", "server", None, _optional_string)
    web_path = Path(_resolve(base, web_file)) if web_file else None
    web = _web_config(c, "server.web_config_file", web_path) if web_path else None
    if web is not None and web.tls is not None and cert is not None:
        c.add(
            "server",
            "TLS is set twice: by tls_cert_file/tls_key_file and by the web config file's "
            "tls_server_config; keep one",
        )
    return ServerConfig(
        host=host,
        port=port,
        state_dir=state_dir,
        tls_cert_file=cert_path,
        tls_key_file=key_path,
        shutdown_timeout=c.get(t, "shutdown_timeout", "server", timedelta(seconds=30), _duration),
        web_config_file=web_path,
        web=web or WebConfig(),
        max_connections=c.get(t, "max_connections", "server", 64, _int(1, 10_000)),
        request_timeout=c.get(t, "request_timeout", "server", timedelta(seconds=10), _duration),
        idle_timeout=c.get(t, "idle_timeout", "server", timedelta(seconds=60), _duration),
    )


def _url(value: Any) -> str:
    text = _string(value)
    if not re.match(r"^https?://[^\s/?#]+[^\s]*$", text):
        raise ValueError(f"must be an http:// or https:// URL without spaces; got {text!r}")
    return text.rstrip("/") if "#" not in text else text


def _parse_report(c: _Collector, data: Any) -> ReportConfig:
    t = c.table(data, "report")
    c.unknown(t, "report", {"runbook_url", "grafana_url", "history_max_entries", "history_max_age"})
    d = ReportConfig()
    runbook = c.get(t, "runbook_url", "report", None, _url)
    if runbook is not None and "#" in runbook:
        c.add("report.runbook_url", f"must not hold a #fragment (pages add one); got {runbook!r}")
    max_age = c.get(t, "history_max_age", "report", d.history_max_age, _duration)
    if max_age < timedelta(days=1):
        c.add("report.history_max_age", f"must be at least 1d; got {format_duration(max_age)!r}")
    return ReportConfig(
        runbook_url=runbook,
        grafana_url=c.get(t, "grafana_url", "report", None, _url),
        history_max_entries=c.get(
            t, "history_max_entries", "report", d.history_max_entries, _int(10, 1_000_000)
        ),
        history_max_age=max_age,
    )


def with_server_flags(
    config: Config, *, listen: str | None = None, web_config_file: Path | None = None
) -> Config:
    """``config`` with ``--web.listen-address`` / ``--web.config.file`` in place of the TOML's.

    A web config file given here replaces ``[server] web_config_file``, and its
    ``tls_server_config`` (when it has one) takes precedence over ``tls_cert_file`` and
    ``tls_key_file``.
    Raises ``ConfigError`` listing every problem with the flags.
    """
    c = _Collector()
    server = config.server
    flagged = set(config.flagged)
    if listen is not None:
        try:
            host, port = parse_listen(listen)
        except ValueError as exc:
            c.add("--web.listen-address", str(exc))
        else:
            server = replace(server, host=host, port=port)
            flagged |= {"host", "port"}
    if web_config_file is not None:
        web = _web_config(c, "--web.config.file", web_config_file)
        if web is not None:
            server = replace(server, web_config_file=web_config_file, web=web)
            flagged |= {"web_config_file", "web"}
    if c.problems:
        raise ConfigError(c.problems)
    return replace(config, server=server, flagged=frozenset(flagged))


def keep_flagged(new: Config, running: Config) -> Config:
    """``new`` (a reloaded file) with the server settings that flags set for ``running``: a
    flag wins over the file at every reload, as at start-up."""
    if not running.flagged:
        return new
    kept = {name: getattr(running.server, name) for name in running.flagged}
    return replace(new, server=replace(new.server, **kept), flagged=running.flagged)


def _parse_monitor(
    c: _Collector, data: Any, path: str, base: Path, engine: EngineConfig | None = None
) -> MonitorConfig | None:
    t = c.table(data, path)
    c.unknown(
        t,
        path,
        {
            "name",
            "schedule",
            "seed",
            "scores",
            "outcomes",
            "windows",
            "drift",
            "decay",
            "budget",
            "max_segments",
            "max_invalid_share",
            "run_timeout",
            "misfire_grace",
            "engine",
        },
    )
    before = len(c.problems)
    name = c.get(t, "name", path, "", _string)
    if "name" not in t:
        c.add(f"{path}.name", "is required")
    elif name and not _NAME.match(name):
        c.add(f"{path}.name", f"must match {_NAME.pattern} (it becomes a label); got {name!r}")
    schedule = c.get(t, "schedule", path, parse_schedule("1h"), _schedule)
    max_invalid = c.get(t, "max_invalid_share", path, 0.01, _float(0.0, 1.0))

    scores = _parse_source(c, t.get("scores"), f"{path}.scores", base, ScoreSpec, max_invalid)
    outcomes = _parse_source(
        c, t.get("outcomes"), f"{path}.outcomes", base, OutcomeSpec, max_invalid
    )
    if (
        scores is not None
        and outcomes is not None
        and (scores.segment_column is None) != (outcomes.segment_column is None)
    ):
        c.add(path, "scores.segment_column and outcomes.segment_column must be set together")

    windows = _parse_windows(c, t.get("windows"), f"{path}.windows")
    drift = _parse_drift(c, t.get("drift"), f"{path}.drift")
    decay = _parse_decay(c, t.get("decay"), f"{path}.decay")
    budget = _parse_budget(c, t.get("budget"), f"{path}.budget")
    _check_resamples(c, path, schedule, decay, budget)
    interval = schedule.nominal_interval(budget.period)
    run_timeout = c.get(t, "run_timeout", path, min(timedelta(minutes=10), interval), _duration)
    misfire = c.get(t, "misfire_grace", path, min(timedelta(minutes=5), interval), _duration)
    lags = {}
    for side in ("scores", "outcomes"):
        table = t.get(side)
        if isinstance(table, dict) and "max_lag" in table:
            lags[side] = c.get(table, "max_lag", f"{path}.{side}", None, _duration)
    _check_windows(c, path, windows, drift, decay, interval, schedule_is_cron=schedule.is_cron)
    kind = c.get(t, "engine", path, None, _engine_kind)
    settings = engine if engine is not None or kind is None else EngineConfig()
    if settings is not None:
        _check_buckets(c, path, settings, schedule, windows, drift)
        if kind == "auto" and settings.cluster_kind() is None:
            c.add(
                f"{path}.engine",
                "'auto' needs engine.dask.address or engine.spark.master/remote to move to",
            )
    # parsed before the early return, so that every problem of the table is reported at once
    seed = c.get(t, "seed", path, 0, _int(0))
    max_segments = c.get(t, "max_segments", path, 20, _int(1, 1000))
    if len(c.problems) > before or scores is None or outcomes is None:
        return None
    return MonitorConfig(
        name=name,
        schedule=schedule,
        seed=seed,
        scores=scores,
        outcomes=outcomes,
        windows=windows,
        drift=drift,
        decay=decay,
        budget=budget,
        max_segments=max_segments,
        max_invalid_share=max_invalid,
        run_timeout=run_timeout,
        misfire_grace=misfire,
        scores_max_lag=lags.get("scores"),
        outcomes_max_lag=lags.get("outcomes"),
        engine=kind,
    )


def _engine_kind(value: Any) -> str:
    if value not in ENGINE_KINDS:
        raise ValueError(f"must be one of {', '.join(map(repr, ENGINE_KINDS))}; got {value!r}")
    return str(value)


def _check_buckets(
    c: _Collector,
    path: str,
    engine: EngineConfig,
    schedule: Schedule,
    windows: WindowConfig,
    drift: DriftConfig,
) -> None:
    """Checks through summaries add whole buckets: the slots and every window bound must fall
    on bucket boundaries (epoch-aligned), and phase-matched blocks need buckets within an hour."""
    b = engine.bucket
    text = format_duration(b)
    if schedule.interval is not None:
        if schedule.interval % b:
            c.add(
                f"{path}.schedule",
                f"the interval {format_duration(schedule.interval)} is not a multiple of "
                f"engine.summary.bucket {text}: checks would end inside a bucket",
            )
    else:
        for slot in _cron_times(schedule, b):
            if (slot - _EPOCH) % b:
                c.add(
                    f"{path}.schedule",
                    f"fires at {slot:%H:%M}, inside a bucket of engine.summary.bucket {text}: "
                    "every cron time must be a bucket boundary",
                )
                break
    for key, value in (
        ("current", windows.current),
        ("reference", windows.reference),
        ("gap", windows.gap),
    ):
        if value is not None and value % b:
            c.add(
                f"{path}.windows.{key}",
                f"{format_duration(value)} is not a multiple of engine.summary.bucket {text}",
            )
    for key, at in (
        ("reference_start", windows.reference_start),
        ("reference_end", windows.reference_end),
    ):
        if at is not None and (at - _EPOCH) % b:
            c.add(
                f"{path}.windows.{key}",
                f"{at.isoformat()} is not on a boundary of engine.summary.bucket {text}",
            )
    if _seasonal_mode(drift.seasonality, windows.reference_span) != "none" and (
        timedelta(hours=1) % b
    ):
        c.add(
            f"{path}.drift.seasonality",
            f"phase-matched blocks (hour of day or week) need engine.summary.bucket to divide "
            f"1h; got {text} (or set drift.seasonality = 'none')",
        )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _parse_engine(c: _Collector, data: Any) -> EngineConfig | None:
    if data is None:
        return None
    t = c.table(data, "engine")
    c.unknown(t, "engine", {"kind", "auto_rows", "dask", "spark", "summary"})
    d = EngineConfig()
    dask = c.table(t.get("dask"), "engine.dask")
    c.unknown(dask, "engine.dask", {"address"})
    spark = c.table(t.get("spark"), "engine.spark")
    c.unknown(spark, "engine.spark", {"master", "remote"})
    summary = c.table(t.get("summary"), "engine.summary")
    c.unknown(
        summary,
        "engine.summary",
        {"bucket", "max_effect", "grid", "grid_sample_rows", "regrid", "cache_max_bytes"},
    )
    remote = c.get(spark, "remote", "engine.spark", None, _optional_string)
    if remote is not None and not remote.startswith("sc://"):
        c.add("engine.spark.remote", f"must be a Spark Connect URL sc://host:port; got {remote!r}")
    if "master" in spark and "remote" in spark:
        c.add("engine.spark", "give either master (a SparkSession) or remote (Spark Connect)")
    kind = c.get(t, "kind", "engine", d.kind, _engine_kind)
    out = EngineConfig(
        kind=kind,
        dask_address=c.get(dask, "address", "engine.dask", None, _optional_string),
        spark_master=c.get(spark, "master", "engine.spark", None, _optional_string),
        spark_remote=remote,
        auto_rows=c.get(t, "auto_rows", "engine", d.auto_rows, _int(1)),
        bucket=c.get(summary, "bucket", "engine.summary", d.bucket, _duration),
        max_effect=c.get(
            summary, "max_effect", "engine.summary", d.max_effect, _float(0.0, 10.0, open_low=True)
        ),
        grid=c.get(summary, "grid", "engine.summary", d.grid, _grid_kind),
        grid_sample_rows=c.get(
            summary, "grid_sample_rows", "engine.summary", d.grid_sample_rows, _int(1000)
        ),
        regrid=c.get(summary, "regrid", "engine.summary", None, _duration),
        cache_max_bytes=c.get(
            summary, "cache_max_bytes", "engine.summary", d.cache_max_bytes, _int(1 << 20)
        ),
    )
    if out.kind == "dask" and out.dask_address is None:
        out = replace(out, dask_address="local")
    if out.kind == "spark" and out.spark_master is None and out.spark_remote is None:
        out = replace(out, spark_master="local[2]")
    if out.kind == "auto" and out.cluster_kind() is None:
        c.add("engine.kind", "'auto' needs engine.dask.address or engine.spark.master/remote")
    if out.bucket < timedelta(minutes=1) or out.bucket > timedelta(days=1):
        c.add(
            "engine.summary.bucket", f"must be between 1m and 1d; got {format_duration(out.bucket)}"
        )
    return out


def _grid_kind(value: Any) -> str:
    if value not in ("auto", "full"):
        raise ValueError(f"must be 'auto' or 'full'; got {value!r}")
    return str(value)


def _check_windows(
    c: _Collector,
    path: str,
    windows: WindowConfig,
    drift: DriftConfig,
    decay: DecayConfig,
    interval: timedelta,
    *,
    schedule_is_cron: bool = False,
) -> None:
    """Settings that cannot work: say why instead of failing (or misleading) at run time.

    (A cron schedule's slots are irregular; a window shorter than its mean gap is a deliberate
    sample, so only interval schedules are held to the rule.)
    """
    if windows.current < interval and not schedule_is_cron:
        c.add(
            f"{path}.windows.current",
            f"{format_duration(windows.current)} is shorter than the schedule interval "
            f"{format_duration(interval)}: scores between two checks would never be seen; use "
            f"at least {format_duration(interval)}",
        )
    span = windows.reference_span
    for mode, period in (("daily", timedelta(days=1)), ("weekly", timedelta(days=7))):
        if drift.seasonality == mode and span < period:
            c.add(
                f"{path}.drift.seasonality",
                f"'{mode}' needs a reference of at least {format_duration(period)} (one of each "
                f"phase); the reference spans {format_duration(span)}",
            )
    if decay.run_gap <= decay.settle:
        c.add(
            f"{path}.decay.run_gap",
            f"must be longer than decay.settle ({format_duration(decay.settle)}): a run is "
            f"complete once no outcome arrived for `settle`",
        )


_SPEC_COLUMNS = {
    ScoreSpec: {"timestamp_column": "timestamp", "score_column": "score"},
    OutcomeSpec: {
        "timestamp_column": "timestamp",
        "query_column": "query_id",
        "outcome_column": "outcome",
    },
}


def _parse_source(
    c: _Collector,
    data: Any,
    path: str,
    base: Path,
    kind: type[ScoreSpec] | type[OutcomeSpec],
    max_invalid: float,
) -> Any:
    """``scores`` / ``outcomes`` table -> ``ScoreSpec`` / ``OutcomeSpec`` (None on problems)."""
    t = c.table(data, path)
    columns = _SPEC_COLUMNS[kind]
    known = {"path", "segment_column", "timestamp_unit", "prune_partitions", "max_lag", *columns}
    known.add("format")
    fmt = c.get(t, "format", path, "parquet", _format)
    if fmt == "iceberg":  # a table by name in a catalog, not a path
        known = (known - {"path"}) | {"table", "catalog"}
    judged_kind = kind is OutcomeSpec and t.get("kind") == "judged_runs"
    if kind is ScoreSpec:
        known |= {"rank_column", "top_rank"}
    if kind is OutcomeSpec:
        known |= {"kind"}
        if judged_kind:
            known = (known - {"path", "outcome_column"}) | _JUDGED_KEYS
    c.unknown(t, path, known)
    before = len(c.problems)
    if kind is OutcomeSpec and t.get("kind", "per_query") not in ("per_query", "judged_runs"):
        c.add(f"{path}.kind", f"must be 'per_query' or 'judged_runs'; got {t.get('kind')!r}")
    where = "runs" if judged_kind else "table" if fmt == "iceberg" else "path"
    if where not in t:
        c.add(f"{path}.{where}", "is required")
    location = c.get(t, where, path, "", _string)
    kwargs: dict[str, Any] = {
        "path": location if fmt == "iceberg" else _resolve(base, location),
        "format": fmt,
        "catalog": c.get(t, "catalog", path, _NO_CATALOG, _catalog),
        "segment_column": c.get(t, "segment_column", path, None, _optional_string),
        "timestamp_unit": c.get(t, "timestamp_unit", path, None, _unit),
        "prune_partitions": c.get(t, "prune_partitions", path, True, _bool),
        "max_invalid_share": max_invalid,
    }
    for key, default in columns.items():
        if judged_kind and key == "outcome_column":
            continue
        kwargs[key] = c.get(t, key, path, default, _string)
    if judged_kind:
        kwargs["judged"] = _parse_judged(c, t, path, base)
    if kind is ScoreSpec:
        kwargs["rank_column"] = c.get(t, "rank_column", path, None, _optional_string)
        kwargs["top_rank"] = c.get(t, "top_rank", path, 1, _int(0))
    if len(c.problems) > before:
        return None
    try:
        return kind(**kwargs)
    except ValueError as exc:
        c.add(path, str(exc))
        return None


_NO_CATALOG: tuple[tuple[str, str], ...] = ()


def _format(value: Any) -> str:
    if value not in ("parquet", "delta", "iceberg"):
        raise ValueError(f"must be 'parquet', 'delta' or 'iceberg'; got {value!r}")
    return str(value)


def _catalog(value: Any) -> tuple[tuple[str, str], ...]:
    """``catalog.*``: pyiceberg ``load_catalog`` properties (strings), ``name`` among them."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"must be a table of strings (catalog properties); got {value!r}")
    return tuple(sorted(value.items()))


_JUDGED_KEYS = {
    "runs",
    "judgments",
    "judgments_version",
    "metric",
    "report",
    "relevant_grade",
    "gain",
    "doc_column",
    "rank_column",
    "score_column",
    "judgment_query_column",
    "judgment_doc_column",
    "grade_column",
    "judged_k",
    "judged_tolerance",
    "calibration_bins",
}


def _metric(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a metric name such as 'ndcg@10'; got {value!r}")
    try:
        return parse_metric(value).name
    except StatsInputError as exc:
        raise ValueError(str(exc)) from None


def _metrics(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"must be a list of metric names; got {value!r}")
    return tuple(_metric(v) for v in value)


def _parse_judged(c: _Collector, t: dict[str, Any], path: str, base: Path) -> JudgedSpec | None:
    """The ``judged_runs`` keys of an ``outcomes`` table (see ``JudgedSpec``)."""
    d = JudgedSpec(judgments="-")
    before = len(c.problems)
    if "judgments" not in t:
        c.add(f"{path}.judgments", "is required when kind = 'judged_runs'")
    metric = c.get(t, "metric", path, d.metric, _metric)
    cut = parse_metric(metric).k if metric else None
    judged_k = c.get(t, "judged_k", path, cut or d.judged_k, _int(1, 10_000))
    report = c.get(t, "report", path, d.report, _metrics)
    kwargs: dict[str, Any] = {
        "judgments": _resolve(base, c.get(t, "judgments", path, "", _string)),
        "judgments_version": c.get(t, "judgments_version", path, None, _optional_string),
        "metric": metric,
        "report": report,
        "relevant_grade": c.get(t, "relevant_grade", path, d.relevant_grade, _float(0.0, 1e9)),
        "gain": c.get(t, "gain", path, d.gain, _gain),
        "judged_k": judged_k,
        "judged_tolerance": c.get(
            t, "judged_tolerance", path, d.judged_tolerance, _float(0.0, 1.0)
        ),
        "calibration_bins": c.get(t, "calibration_bins", path, d.calibration_bins, _int(2, 1000)),
    }
    for key in (
        "doc_column",
        "rank_column",
        "score_column",
        "judgment_query_column",
        "judgment_doc_column",
        "grade_column",
    ):
        kwargs[key] = c.get(t, key, path, getattr(d, key), _string)
    if len(c.problems) > before:
        return None
    try:
        return JudgedSpec(**kwargs)
    except ValueError as exc:
        c.add(path, str(exc))
        return None


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false; got {value!r}")
    return value


def _schedule(value: Any) -> Schedule:
    if not isinstance(value, str):
        raise ValueError(f"must be an interval like '1h' or a 5-field cron string; got {value!r}")
    return parse_schedule(value)


def _parse_windows(c: _Collector, data: Any, path: str) -> WindowConfig:
    t = c.table(data, path)
    c.unknown(t, path, {"current", "reference", "gap", "reference_start", "reference_end"})
    current = c.get(t, "current", path, timedelta(days=1), _duration)
    gap = c.get(t, "gap", path, timedelta(0), _nonneg_duration)
    start = c.get(t, "reference_start", path, None, _timestamp)
    end = c.get(t, "reference_end", path, None, _timestamp)
    fixed = "reference_start" in t or "reference_end" in t
    if fixed:
        if "reference" in t:
            c.add(path, "give either reference (rolling) or reference_start/reference_end (fixed)")
        if ("reference_start" in t) != ("reference_end" in t):
            c.add(path, "reference_start and reference_end must be given together")
        elif start is not None and end is not None and start >= end:
            c.add(f"{path}.reference_end", "must be after reference_start")
        return WindowConfig(
            current=current, reference=None, gap=gap, reference_start=start, reference_end=end
        )
    reference = c.get(t, "reference", path, timedelta(days=7), _duration)
    return WindowConfig(current=current, reference=reference, gap=gap)


def _parse_drift(c: _Collector, data: Any, path: str) -> DriftConfig:
    t = c.table(data, path)
    d = DriftConfig()
    c.unknown(t, path, set(DriftConfig.__dataclass_fields__))
    return DriftConfig(
        bins=c.get(t, "bins", path, d.bins, _int(2, 1000)),
        tolerance=c.get(t, "tolerance", path, d.tolerance, _float(0.0, 10.0)),
        smoothing=c.get(t, "smoothing", path, d.smoothing, _float(0.0, 10.0, open_low=True)),
        min_reference_samples=c.get(
            t, "min_reference_samples", path, d.min_reference_samples, _int(2)
        ),
        min_current_samples=c.get(t, "min_current_samples", path, d.min_current_samples, _int(2)),
        min_block_samples=c.get(t, "min_block_samples", path, d.min_block_samples, _int(2)),
        # past 2 (a sustained shift of 4 z units) the immediate rule is the test for it, and the
        # shared-reference threshold search fails (k = 2.5: no sign change; 3: singular chain)
        cusum_k=c.get(t, "cusum_k", path, d.cusum_k, _float(0.0, 2.0, open_low=True)),
        cusum_share=c.get(t, "cusum_share", path, d.cusum_share, _float(0.0, 1.0)),
        clear_after=c.get(t, "clear_after", path, d.clear_after, _int(1)),
        clear_share=c.get(t, "clear_share", path, d.clear_share, _float(0.0, 1.0, open_low=True)),
        seasonality=c.get(t, "seasonality", path, d.seasonality, _seasonality),
        anchor=c.get(t, "anchor", path, d.anchor, _bool),
        anchor_refresh=c.get(t, "anchor_refresh", path, d.anchor_refresh, _duration),
    )


def _seasonality(value: Any) -> str:
    if value not in ("auto", "none", "daily", "weekly"):
        raise ValueError(f"must be one of 'auto', 'none', 'daily', 'weekly'; got {value!r}")
    return str(value)


def _parse_decay(c: _Collector, data: Any, path: str) -> DecayConfig:
    t = c.table(data, path)
    d = DecayConfig()
    c.unknown(t, path, set(DecayConfig.__dataclass_fields__))
    n_resamples = c.get(t, "n_resamples", path, None, _int(99, 10_000_000))
    looks = c.get(t, "looks", path, None, _int(1))
    return DecayConfig(
        margin=c.get(t, "margin", path, d.margin, _float(0.0, 1.0)),
        min_pairs=c.get(t, "min_pairs", path, d.min_pairs, _int(2)),
        min_coverage=c.get(t, "min_coverage", path, d.min_coverage, _float(0.0, 1.0)),
        n_resamples=n_resamples,
        confidence_level=c.get(
            t,
            "confidence_level",
            path,
            d.confidence_level,
            _float(0.0, 1.0, open_low=True, open_high=True),
        ),
        power=c.get(t, "power", path, d.power, _float(0.0, 1.0, open_low=True, open_high=True)),
        looks=looks,
        cadence=c.get(t, "cadence", path, d.cadence, _duration),
        run_gap=c.get(t, "run_gap", path, d.run_gap, _duration),
        settle=c.get(t, "settle", path, d.settle, _nonneg_duration),
    )


# The most sign-flip resamples one decay test may draw: about 1.3 s per segment at 2,000 pairs on
# one core (docs/configuration.md). Without it, `budget.decay = 1e-6` asks for 6e8 and a check
# runs for minutes.
MAX_RESAMPLES = 1_000_000
_MAX_RESAMPLES = MAX_RESAMPLES


def _implied_resamples(schedule: Schedule, decay: DecayConfig, budget: BudgetConfig) -> int:
    """The sign-flip resample count a monitor's decay test will use.

    ``decay.n_resamples`` or ``max(9999, ceil(20 / alpha))`` with the alpha of a look one cadence
    after the previous, ``alpha = budget.decay * cadence / (period + cadence)`` (``cadence =
    period / decay.looks`` when looks are given): the same numbers as ``verdict.alarm_plan`` (a
    test keeps the two equal), so that ``validate`` can refuse what a check could not finish.
    A look sooner after the previous spends less alpha; its resamples are capped at
    ``MAX_RESAMPLES`` (such a look can then not reject, which only costs power).
    """
    del schedule
    return decay.n_resamples or max(9999, math.ceil(20.0 / _nominal_alpha(decay, budget)))


def _nominal_alpha(decay: DecayConfig, budget: BudgetConfig) -> float:
    cadence = budget.period / decay.looks if decay.looks else decay.cadence
    return budget.decay * (cadence / (budget.period + cadence))


def _check_resamples(
    c: _Collector, path: str, schedule: Schedule, decay: DecayConfig, budget: BudgetConfig
) -> None:
    n = _implied_resamples(schedule, decay, budget)
    if n <= _MAX_RESAMPLES:
        return
    if decay.n_resamples is not None:
        c.add(
            f"{path}.decay.n_resamples",
            f"must be at most {_MAX_RESAMPLES:,} (the resample cap); got {n:,}",
        )
        return
    alpha = _nominal_alpha(decay, budget)
    enough = _fitting_decay(schedule, decay, budget)
    c.add(
        f"{path}.budget.decay",
        f"implies {n:,} sign-flip resamples per check (ceil(20 / alpha), alpha = "
        f"{alpha:.3g} per look one decay.cadence after the previous), above the cap of "
        f"{_MAX_RESAMPLES:,}; raise budget.decay to at least {enough!r} or lengthen "
        f"decay.cadence; got {budget.decay!r}",
    )


def _fitting_decay(schedule: Schedule, decay: DecayConfig, budget: BudgetConfig) -> float:
    """The smallest ``budget.decay`` of two significant digits whose implied resamples are
    within the cap: the bound ``20 / cap * budget.decay / alpha`` rounded up, then checked
    with ``_implied_resamples`` itself (at the bound, ``20 / alpha`` can land a rounding error
    above the cap: 0.00062 over a daily cadence implies 1,000,001)."""
    lowest = 20.0 / _MAX_RESAMPLES * (budget.decay / _nominal_alpha(decay, budget))
    exponent = math.floor(math.log10(lowest)) - 1
    digits = math.ceil(round(lowest / 10.0**exponent, 9))
    while True:
        candidate = float(f"{digits}e{exponent}")
        fits = replace(budget, decay=candidate)
        if _implied_resamples(schedule, decay, fits) <= _MAX_RESAMPLES:
            return candidate
        digits += 1


def _cron_times(schedule: Schedule, bucket: timedelta) -> list[datetime]:
    """Times a cron schedule fires at, enough to tell whether each is on a bucket boundary.
    A bucket that divides a day sees only the time of day: every allowed hour and minute
    (whatever the days: a time that fires only in June once passed a check of 35 days from
    1 January). Otherwise the slots of 400 days (at most 20,000)."""
    day = datetime(2026, 1, 1, tzinfo=UTC)
    if schedule.cron_fields is not None and timedelta(days=1) % bucket == timedelta(0):
        minutes, hours = schedule.cron_fields[0], schedule.cron_fields[1]
        return [day.replace(hour=h, minute=m) for h in sorted(hours) for m in sorted(minutes)]
    end = day + timedelta(days=400)
    return [t for t in cron_walk(schedule) if t <= end][:20_000]


def _parse_budget(c: _Collector, data: Any, path: str) -> BudgetConfig:
    t = c.table(data, path)
    d = BudgetConfig()
    c.unknown(t, path, {"period", "drift", "decay"})
    unit = _float(0.0, 0.5, open_low=True)
    return BudgetConfig(
        period=c.get(t, "period", path, d.period, _duration),
        drift=c.get(t, "drift", path, d.drift, unit),
        decay=c.get(t, "decay", path, d.decay, unit),
    )


def parse_config(data: dict[str, Any], *, base: Path, source: str | None = None) -> Config:
    """Validate a parsed TOML document; raise ``ConfigError`` listing every problem."""
    c = _Collector()
    c.unknown(data, "", {"server", "report", "engine", "monitors"})
    server = _parse_server(c, data.get("server"), base)
    report = _parse_report(c, data.get("report"))
    engine = _parse_engine(c, data.get("engine"))
    raw = data.get("monitors")
    monitors: list[MonitorConfig] = []
    if raw is None:
        c.add("monitors", "at least one [[monitors]] table is required")
    elif not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        c.add("monitors", "must be an array of tables ([[monitors]])")
    else:
        if not raw:
            c.add("monitors", "at least one [[monitors]] table is required")
        seen: dict[str, int] = {}
        for i, item in enumerate(raw):
            m = _parse_monitor(c, item, f"monitors[{i}]", base, engine)
            if m is None:
                continue
            if m.name in seen:
                c.add(f"monitors[{i}].name", f"duplicates monitors[{seen[m.name]}].name {m.name!r}")
            seen[m.name] = i
            monitors.append(m)
    if c.problems:
        raise ConfigError(c.problems, source=source)
    return Config(
        server=server,
        monitors=tuple(monitors),
        path=Path(source) if source else None,
        report=report,
        engine=engine,
    )


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML file; ``ConfigError`` if unreadable or invalid."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([unreadable(exc)], source=str(p)) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"not valid TOML: {exc}"], source=str(p)) from exc
    return parse_config(data, base=p.resolve().parent, source=str(p))
