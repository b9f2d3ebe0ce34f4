"""The configuration's value types: frozen dataclasses, one per TOML table, and their defaults.

No parsing here (``monitor.config.parse`` builds these from a TOML document); the rest of
``monitor`` passes these around.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from monitor.schedule import Schedule
from monitor.sources import OutcomeSpec, ScoreSpec
from monitor.webconfig import TlsConfig, WebConfig


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
    # how late a score may land and still be in an evidence block: a block ends at least this
    # long before the check (0: at the newest score's hour, or the check)
    settle: timedelta = timedelta(0)


@dataclass(frozen=True, slots=True)
class DecayConfig:
    """Model decay on paired outcomes (one-sided permutation test of current < reference - margin:
    sign flips, or run labels when a query has several runs in a window)."""

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


def look_cadence(decay: DecayConfig, budget: BudgetConfig) -> timedelta:
    """How often the golden set is looked at: ``decay.cadence``, or ``budget.period /
    decay.looks`` when its old spelling ``looks`` is given. The one rule the alarm plan,
    ``validate`` and the outcome feed's default ``max_lag`` share."""
    return budget.period / decay.looks if decay.looks else decay.cadence


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
    def decay_cadence(self) -> timedelta:
        """How often the golden set is looked at (``look_cadence``)."""
        return look_cadence(self.decay, self.budget)

    @property
    def outcome_lag_limit(self) -> timedelta:
        """``outcomes.max_lag``, default ``2 x the decay cadence + decay.settle`` (the cadence
        that ``decay.looks`` spells too: it once read ``decay.cadence`` alone, and a golden set
        evaluated weekly under ``looks = 4`` was stale after two days)."""
        if self.outcomes_max_lag is not None:
            return self.outcomes_max_lag
        return 2 * self.decay_cadence + self.decay.settle

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
