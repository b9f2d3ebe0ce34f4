"""TOML document -> ``Config``: one parser per table, every problem gathered before failing
(``ConfigError``), and the command-line flags that override ``[server]``.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from monitor.config.checks import (
    _MAX_BUDGET_DECAY,
    _check_buckets,
    _check_resamples,
    _check_windows,
)
from monitor.config.fields import (
    _base_url,
    _bool,
    _catalog,
    _Collector,
    _decision_metric,
    _duration,
    _engine_kind,
    _float,
    _format,
    _gain,
    _grid_kind,
    _int,
    _metrics,
    _nonneg_duration,
    _optional_string,
    _resolve,
    _resolve_pattern,
    _schedule,
    _seasonality,
    _string,
    _timestamp,
    _unit,
    _url,
    parse_listen,
)
from monitor.config.model import (
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
from monitor.errors import ConfigError
from monitor.files import read_config_text
from monitor.schedule import format_duration, parse_schedule
from monitor.sources import JudgedSpec, OutcomeSpec, ScoreSpec
from monitor.stats import parse_metric
from monitor.webconfig import (
    TlsConfig,
    WebConfig,
    check_tls_files,
    directory_of,
    load_web_config,
    unreadable,
)

# not starting with "-": `--monitor -web` is read as a flag, and `-web-<time>.html` as options
_NAME = re.compile(r"^[A-Za-z0-9_.:][A-Za-z0-9_.:-]{0,63}$")


def _not_a_directory(path: Path) -> Path | None:
    """The nearest existing path at or above ``path`` when it is not a directory (a regular
    file where the state directory, or one above it, should be); None otherwise."""
    for at in (path, *path.parents):
        try:
            if at.exists():
                return None if at.is_dir() else at
        except OSError:  # not searchable: the daemon's own start says so
            return None
    return None


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
    blocked = _not_a_directory(state_dir)
    if blocked is not None:  # the daemon would run, and never save a state or a history
        c.add("server.state_dir", f"{blocked} exists and is not a directory")
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
        grafana_url=c.get(t, "grafana_url", "report", None, _base_url),
        history_max_entries=c.get(
            t, "history_max_entries", "report", d.history_max_entries, _int(10, 30_000)
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
    elif name and not _NAME.fullmatch(name):  # "$" of match let a final newline in
        c.add(f"{path}.name", f"must match {_NAME.pattern} (it becomes a label); got {name!r}")
    elif name and not name.strip("."):
        # "." and ".." name the state directory and its parent: the monitor's state, grid and
        # buckets landed outside their folders, where no bound counts them
        c.add(
            f"{path}.name", f"must hold a character other than '.' (it names files); got {name!r}"
        )
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
    parts = [f"{path}.{k}" for k in ("schedule", "windows", "drift", "decay", "budget")]
    parsed = not c.failed(*parts, since=before)  # the cross-checks' inputs are the user's
    if parsed:
        _check_resamples(c, path, schedule, decay, budget)
    interval = schedule.nominal_interval(budget.period)
    run_timeout = c.get(t, "run_timeout", path, min(timedelta(minutes=10), interval), _duration)
    misfire = c.get(t, "misfire_grace", path, min(timedelta(minutes=5), interval), _duration)
    lags = {}
    for side in ("scores", "outcomes"):
        table = t.get(side)
        if isinstance(table, dict) and "max_lag" in table:
            lags[side] = c.get(table, "max_lag", f"{path}.{side}", None, _duration)
    if parsed:
        _check_windows(c, path, windows, drift, decay, interval, schedule_is_cron=schedule.is_cron)
    kind = c.get(t, "engine", path, None, _engine_kind)
    settings = engine if engine is not None or kind is None else EngineConfig()
    if settings is not None and parsed and not c.failed("engine.summary.bucket"):
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
    if scores.segment_column is not None:  # the reader refuses a window of more as it reads
        scores = replace(scores, max_segments=max_segments)
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
        "path": (
            location
            if fmt == "iceberg"
            else _resolve_pattern(base, location)
            if fmt == "parquet"
            else _resolve(base, location)
        ),
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
        if isinstance(t, dict) and "top_rank" in t and "rank_column" not in t:
            c.add(f"{path}.top_rank", "applies only with rank_column (it was ignored)")
    if len(c.problems) > before:
        return None
    try:
        return kind(**kwargs)
    except ValueError as exc:
        c.add(path, str(exc))
        return None


_NO_CATALOG: tuple[tuple[str, str], ...] = ()


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


def _parse_judged(c: _Collector, t: dict[str, Any], path: str, base: Path) -> JudgedSpec | None:
    """The ``judged_runs`` keys of an ``outcomes`` table (see ``JudgedSpec``)."""
    d = JudgedSpec(judgments="-")
    before = len(c.problems)
    if "judgments" not in t:
        c.add(f"{path}.judgments", "is required when kind = 'judged_runs'")
    metric = c.get(t, "metric", path, d.metric, _decision_metric)
    cut = parse_metric(metric).k if metric else None
    # holes show in the top ranks: judged@100 of lists shorter than 100 never moves when an
    # unjudged document takes rank 1, while nDCG@100 falls (it paged as decay)
    judged_k = c.get(t, "judged_k", path, min(cut or d.judged_k, 10), _int(1, 10_000))
    report = c.get(t, "report", path, d.report, _metrics)
    kwargs: dict[str, Any] = {
        "judgments": _resolve_pattern(base, c.get(t, "judgments", path, "", _string)),
        "judgments_version": c.get(t, "judgments_version", path, None, _optional_string),
        "metric": metric,
        "report": report,
        "relevant_grade": c.get(
            t, "relevant_grade", path, d.relevant_grade, _float(0.0, 1e9, open_low=True)
        ),
        "gain": c.get(t, "gain", path, d.gain, _gain),
        "judged_k": judged_k,
        # below the 1/k one unjudged document in each top k costs (a strict '>')
        "judged_tolerance": c.get(
            t,
            "judged_tolerance",
            path,
            min(d.judged_tolerance, 0.5 / judged_k),
            _float(0.0, 1.0),
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
        if "gap" in t:  # once accepted and ignored
            c.add(
                f"{path}.gap",
                "applies to a rolling reference only; a fixed one is placed by "
                "reference_start/reference_end",
            )
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
        settle=c.get(t, "settle", path, d.settle, _nonneg_duration),
    )


def _parse_decay(c: _Collector, data: Any, path: str) -> DecayConfig:
    t = c.table(data, path)
    d = DecayConfig()
    c.unknown(t, path, set(DecayConfig.__dataclass_fields__))
    n_resamples = c.get(t, "n_resamples", path, None, _int(99, 10_000_000))
    # at most a million looks a period (more: a cadence under a microsecond, and alpha 0)
    looks = c.get(t, "looks", path, None, _int(1, 1_000_000))
    if isinstance(t, dict) and "looks" in t and "cadence" in t:  # one would silently lose
        c.add(
            f"{path}.looks",
            "give decay.cadence or its old spelling decay.looks (cadence = budget.period / "
            "looks), not both",
        )
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


def _parse_budget(c: _Collector, data: Any, path: str) -> BudgetConfig:
    t = c.table(data, path)
    d = BudgetConfig()
    c.unknown(t, path, {"period", "drift", "decay"})
    unit = _float(0.0, _MAX_BUDGET_DECAY, open_low=True)
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
            # by the name as written: a duplicate of a monitor with other problems is one too
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str):
                if name in seen:
                    c.add(f"monitors[{i}].name", f"duplicates monitors[{seen[name]}].name {name!r}")
                seen.setdefault(name, i)
            if m is not None:
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
        text = read_config_text(p)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([unreadable(exc)], source=str(p)) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"not valid TOML: {exc}"], source=str(p)) from exc
    except RecursionError as exc:  # arrays or tables nested hundreds deep
        raise ConfigError(["not valid TOML: nested too deeply"], source=str(p)) from exc
    return parse_config(data, base=directory_of(p), source=str(p))
