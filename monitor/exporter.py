"""Prometheus exposition: the only module that imports prometheus_client.

A custom ``Collector`` builds every metric from the board's latest immutable run records at scrape
time, so a monitor removed from the config disappears from ``/metrics`` instead of lingering, and a
scrape never computes statistics (they are computed on each monitor's schedule; HELP says so).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import (
    CONTENT_TYPE_LATEST,
    CONTENT_TYPE_PLAIN_0_0_4,
    choose_encoder,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor import __version__
from monitor.board import Board, MonitorSnapshot
from monitor.store import RESET_REASONS
from monitor.verdict import STATES, InputReport, MonitorState, OutcomeReport

__all__ = [
    "CONTENT_TYPE",
    "PREFIX",
    "HttpCounts",
    "MonitorCollector",
    "make_registry",
    "render",
    "render_negotiated",
]

PREFIX = "retrieval_monitor_"
CONTENT_TYPE = CONTENT_TYPE_LATEST
_SCHED = " Computed on the monitor's schedule, not at scrape time."

# (metric suffix, help, attribute of InputReport)
_INPUT_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "psi",
        "Population stability index of the current window's top-1 scores against the "
        "reference's frozen quantile bins (+0.5 count smoothing).",
        "psi",
    ),
    (
        "psi_pvalue",
        "P-value of the PSI under the tolerance null (true PSI <= tolerance).",
        "psi_pvalue",
    ),
    ("psi_noise_floor", "Expected PSI under no change, (B-1)(1/n+1/m).", "psi_noise_floor"),
    ("psi_debiased", "PSI minus its noise floor, floored at 0.", "psi_debiased"),
    (
        "ks_statistic",
        "Two-sample Kolmogorov-Smirnov D of current vs reference top-1 scores.",
        "ks_statistic",
    ),
    (
        "ks_pvalue",
        "Two-sample KS p-value (tiny on large windows even for immaterial shifts).",
        "ks_pvalue",
    ),
    (
        "out_of_range_ratio",
        "Share of current scores outside the reference's [min, max].",
        "out_of_range_rate",
    ),
    (
        "drift_cusum",
        "CUSUM statistic S of the drift evidence z-scores (alarm above the threshold).",
        "cusum",
    ),
    ("drift_z", "Latest drift evidence z-score (from the newest block's PSI p-value).", "z"),
    (
        "late_scores",
        "Scores the latest check found in evidence blocks tested before (they landed later "
        "than drift.settle: no block tests them).",
        "late_scores",
    ),
)
_OUTCOME_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "outcome_mean_difference",
        "Mean per-query outcome difference, current minus reference.",
        "mean_difference",
    ),
    (
        "outcome_pvalue",
        "One-sided permutation p-value of decay beyond the margin (sign flips, or run labels "
        "when a query has several runs), Holm-adjusted over segments.",
        "pvalue_adjusted",
    ),
    (
        "outcome_ci_lower",
        "Lower end of the BCa bootstrap interval of the mean difference.",
        "ci_low",
    ),
    (
        "outcome_ci_upper",
        "Upper end of the BCa bootstrap interval of the mean difference.",
        "ci_high",
    ),
    ("outcome_effect_size", "Mean difference over its standard deviation (d_z).", "effect_size"),
    (
        "outcome_mde",
        "Minimum detectable effect at the per-look alpha and the configured power.",
        "mde",
    ),
)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc + _SCHED, labels=labels)


def _add_stale(family: GaugeMetricFamily, name: str, state: MonitorState) -> None:
    """Each source's staleness as the latest decided check found it (the state's record; none
    in a file written before 2026-12-07), for a check with no verdict of its own (an error, or
    none yet since a start): a drift alert the stale score feed held back stays held back."""
    if state.stale is None:
        return
    for source in ("scores", "outcomes"):
        family.add_metric([name, source], 1.0 if source in state.stale else 0.0)


def _ts(value: Any) -> float | None:
    return value.timestamp() if value is not None else None


class MonitorCollector(Collector):
    """Builds the ``retrieval_monitor_*`` families from a board snapshot at each scrape."""

    def __init__(self, snapshot: Callable[[], list[MonitorSnapshot]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snaps = self._snapshot()
        seg = ["monitor", "segment"]
        state = _gauge(
            "state", "1 for the monitor's current state, 0 for the others.", ["monitor", "state"]
        )
        since = _gauge(
            "state_since_timestamp_seconds", "When the current state began.", ["monitor"]
        )
        interval = _gauge(
            "schedule_interval_seconds",
            "Seconds between checks: the interval, or for a cron schedule the longest gap between "
            "two slots (its nights or weekend), which the stale alerts take twice.",
            ["monitor"],
        )
        tolerance = _gauge(
            "psi_tolerance", "PSI the monitor ignores (tolerance null).", ["monitor"]
        )
        h = _gauge(
            "drift_cusum_threshold", "CUSUM threshold h that holds the drift budget.", ["monitor"]
        )
        zthr = _gauge("drift_z_threshold", "Immediate (abrupt drift) z threshold.", ["monitor"])
        alpha = _gauge(
            "outcome_alpha",
            "Alpha of the latest decay look, which the adjusted p-values are held against (a look "
            "sooner after the previous spends less); before any look, a look's one cadence after "
            "the previous.",
            ["monitor"],
        )
        margin = _gauge("outcome_margin", "Tolerated decay of the mean outcome.", ["monitor"])
        inputs = {s: _gauge(s, d, seg) for s, d, _ in _INPUT_GAUGES}
        outcomes = {s: _gauge(s, d, seg) for s, d, _ in _OUTCOME_GAUGES}
        zero = _gauge(
            "zero_score_ratio", "Share of top-1 scores exactly 0.", ["monitor", "segment", "window"]
        )
        drift = _gauge(
            "input_drift",
            "1 while a data drift alarm is active (while the latest check is an error, or before "
            "the first check after a start: the alarm as the monitor's state holds it).",
            seg,
        )
        decay = _gauge(
            "model_decay",
            "1 while model decay is established (while the latest check is an error, or before "
            "the first check after a start: as the monitor's state holds it, with its last "
            "look's outcome gauges).",
            seg,
        )
        pairs = _gauge("outcome_pairs", "Queries paired by id between the windows.", seg)
        coverage = _gauge(
            "outcome_pairing_coverage_ratio",
            "Paired queries over the reference window's queries.",
            seg,
        )
        judged = _JudgedFamilies.make()
        samples = _gauge(
            "window_samples",
            "Samples in each window (outcomes: queries).",
            ["monitor", "source", "window"],
        )
        latest = _gauge(
            "data_latest_timestamp_seconds",
            "Newest timestamp seen in each source.",
            ["monitor", "source"],
        )
        src_last = _gauge(
            "source_last_timestamp_seconds",
            "Newest row before the latest check's slot, per source (scores, outcomes).",
            ["monitor", "source"],
        )
        age = _gauge(
            "source_age_seconds",
            "Age of a source's newest row at the latest check's slot: what max_lag bounds.",
            ["monitor", "source"],
        )
        stale = _gauge(
            "source_stale",
            "1 when a source's newest row is older than its max_lag at the latest check (a "
            "check in error, or none yet since a start: at the latest decided one).",
            ["monitor", "source"],
        )
        max_lag = _gauge(
            "source_max_lag_seconds",
            "A source's max_lag: older than this at a check, its newest row makes it stale.",
            ["monitor", "source"],
        )
        last_run = _gauge("last_run_timestamp_seconds", "When the latest run started.", ["monitor"])
        last_ok = _gauge(
            "last_success_timestamp_seconds",
            "When the latest run started that did not end in error and whose state was saved.",
            ["monitor"],
        )
        duration = _gauge("last_run_duration_seconds", "Duration of the latest run.", ["monitor"])
        engine = _gauge(
            "engine_info",
            "Where the latest check summarised the scores (memory: whole windows in arrays; "
            "local, dask, spark: the engine of a check through summaries); always 1.",
            ["monitor", "kind"],
        )
        runs = CounterMetricFamily(
            PREFIX + "runs", "Checks run since start-up.", labels=["monitor"]
        )
        failures = CounterMetricFamily(
            PREFIX + "run_failures",
            "Checks that ended in error, or whose state could not be saved, since start-up.",
            labels=["monitor"],
        )
        save_failures = CounterMetricFamily(
            PREFIX + "state_save_failures",
            "Saves of the monitor's sequential state that failed since start-up (read-only or "
            "full state_dir); each also counts as a run failure.",
            labels=["monitor"],
        )
        last_save = GaugeMetricFamily(
            PREFIX + "last_state_save_timestamp_seconds",
            "When the monitor's state file was last written successfully (at start-up: the "
            "file's modification time).",
            labels=["monitor"],
        )
        save_failing = GaugeMetricFamily(
            PREFIX + "state_save_failing",
            "1 while the monitor's latest state save failed (until one succeeds), else 0.",
            labels=["monitor"],
        )
        resets = CounterMetricFamily(
            PREFIX + "state_resets",
            "Sequential state resets since start-up, by reason: a state file that could not be "
            f"trusted was set aside, or the state became unusable ({', '.join(RESET_REASONS)}).",
            labels=["monitor", "reason"],
        )
        reset_at = GaugeMetricFamily(
            PREFIX + "last_state_reset_timestamp_seconds",
            "When the monitor's sequential state was last reset for this reason since start-up "
            "(absent: never). A reset at start-up is counted before the first scrape, so the "
            "counter alone shows no increase.",
            labels=["monitor", "reason"],
        )
        for snap in snaps:
            name = snap.monitor.name
            for reason, when in snap.reset_at.items():
                reset_at.add_metric([name, reason], when.timestamp())
            save_failures.add_metric([name], float(snap.save_failures_total))
            save_failing.add_metric([name], float(snap.save_error is not None))
            if snap.last_state_save is not None:
                last_save.add_metric([name], snap.last_state_save.timestamp())
            for reason in RESET_REASONS:
                resets.add_metric([name, reason], float(snap.resets.get(reason, 0)))
            current = snap.state.state
            for s in STATES:
                state.add_metric([name, s], 1.0 if s == current else 0.0)
            if snap.state.state_since is not None:
                since.add_metric([name], snap.state.state_since.timestamp())
            interval.add_metric(
                [name],
                snap.monitor.schedule.longest_gap().total_seconds(),
            )
            tolerance.add_metric([name], snap.monitor.drift.tolerance)
            max_lag.add_metric([name, "scores"], snap.monitor.score_lag_limit.total_seconds())
            max_lag.add_metric([name, "outcomes"], snap.monitor.outcome_lag_limit.total_seconds())
            margin.add_metric([name], snap.monitor.decay.margin)
            for metric, value in (
                (last_run, snap.state.last_run),
                (last_ok, snap.state.last_success),
            ):
                if value is not None:
                    metric.add_metric([name], value.timestamp())
            runs.add_metric([name], float(snap.runs_total))
            failures.add_metric([name], float(snap.failures_total))
            run = snap.latest
            if run is None:  # after a start: the alarms the persisted state holds
                self._add_carried(outcomes, drift, decay, pairs, coverage, name, snap.state)
                _add_stale(stale, name, snap.state)
                continue
            duration.add_metric([name], run.duration_seconds)
            engine.add_metric([name, run.engine], 1.0)
            v = run.verdict
            if v.plan is not None:
                h.add_metric([name], v.plan.drift_h)
                zthr.add_metric([name], v.plan.drift_z)
                looked = (o.alpha for o in v.outcomes.values() if o.alpha is not None)
                alpha.add_metric([name], next(looked, v.plan.decay_alpha))
            for (source, window), n in run.window_samples.items():
                samples.add_metric([name, source, window], float(n))
            for source, t in (("scores", v.newest_score), ("outcomes", v.newest_outcome)):
                if t is not None:
                    latest.add_metric([name, source], t.timestamp())
                    src_last.add_metric([name, source], t.timestamp())
                    age.add_metric([name, source], (v.at - t).total_seconds())
                if v.state != "error":
                    feed = "score" if source == "scores" else "outcome"
                    is_stale = v.feed_stale(feed)
                    stale.add_metric([name, source], 1.0 if is_stale else 0.0)
            for segment, r in v.inputs.items():
                self._add_input(inputs, zero, drift, name, segment, r)
            for segment, o in v.outcomes.items():
                self._add_outcome(outcomes, decay, pairs, coverage, name, segment, o)
                judged.add(name, segment, o)
            if v.state == "error":  # no statistics: a raised alarm stays raised, not resolved
                self._add_carried(outcomes, drift, decay, pairs, coverage, name, snap.state)
                _add_stale(stale, name, snap.state)
            if v.judgments is not None and v.judgments.get("version"):
                judged.info.add_metric([name, str(v.judgments["version"])], 1.0)
        yield from (state, since, interval, tolerance, h, zthr, alpha, margin)
        yield from inputs.values()
        yield from (zero, drift)
        yield from outcomes.values()
        yield from judged.all()
        yield from (
            decay,
            pairs,
            coverage,
            samples,
            latest,
            src_last,
            age,
            stale,
            max_lag,
            last_run,
            last_ok,
            duration,
            engine,
            runs,
            failures,
            save_failures,
            save_failing,
            reset_at,
            last_save,
            resets,
        )
        info = GaugeMetricFamily(
            PREFIX + "build_info", "Build information; always 1.", labels=["version"]
        )
        info.add_metric([__version__], 1.0)
        yield info

    @staticmethod
    def _add_input(
        families: dict[str, GaugeMetricFamily],
        zero: GaugeMetricFamily,
        drift: GaugeMetricFamily,
        name: str,
        segment: str,
        r: InputReport,
    ) -> None:
        drift.add_metric([name, segment], 1.0 if r.drift else 0.0)
        if not r.decidable:
            return
        for suffix, _, attr in _INPUT_GAUGES:
            value = getattr(r, attr)
            if value is not None:
                families[suffix].add_metric([name, segment], float(value))
        for window, value in (
            ("reference", r.zero_rate_reference),
            ("current", r.zero_rate_current),
        ):
            if value is not None:
                zero.add_metric([name, segment, window], float(value))

    @classmethod
    def _add_carried(
        cls,
        outcomes: dict[str, GaugeMetricFamily],
        drift: GaugeMetricFamily,
        decay: GaugeMetricFamily,
        pairs: GaugeMetricFamily,
        coverage: GaugeMetricFamily,
        name: str,
        state: MonitorState,
    ) -> None:
        """The alarms of a monitor whose latest check gave no statistics (an error, or none
        yet since a start), as its sequential state holds them: each segment's drift alarm,
        and its decay with the last look's report. Without them an errored check or a restart
        resolved a raised alert and paged again when the next check raised it."""
        for segment, track in state.drift.items():
            # the latest check's segments only, as its own gauges were: an alarm of a segment
            # gone from the data was exported at every error and restart, and not between
            if state.segments is None or segment in state.segments:
                drift.add_metric([name, segment], 1.0 if track.active else 0.0)
        raised = state.decay.active
        for segment, report in state.decay.reports.items():
            report = replace(report, decay=segment in raised)
            cls._add_outcome(outcomes, decay, pairs, coverage, name, segment, report)
        for segment in raised:
            if segment not in state.decay.reports:
                decay.add_metric([name, segment], 1.0)

    @staticmethod
    def _add_outcome(
        families: dict[str, GaugeMetricFamily],
        decay: GaugeMetricFamily,
        pairs: GaugeMetricFamily,
        coverage: GaugeMetricFamily,
        name: str,
        segment: str,
        o: OutcomeReport,
    ) -> None:
        decay.add_metric([name, segment], 1.0 if o.decay else 0.0)
        pairs.add_metric([name, segment], float(o.n_pairs))
        coverage.add_metric([name, segment], float(o.coverage))
        for suffix, _, attr in _OUTCOME_GAUGES:
            value = getattr(o, attr)
            if value is not None:
                families[suffix].add_metric([name, segment], float(value))


_CALIBRATION_GAUGES = (
    ("ece", "Expected calibration error of scores as relevance probabilities (equal-mass bins)."),
    ("mce", "Maximum calibration error over the bins."),
    ("brier", "Brier score: mean (score - relevant)^2 over judged results."),
    ("reliability", "Brier decomposition (Murphy): reliability, lower is better."),
    ("resolution", "Brier decomposition (Murphy): resolution, higher is better."),
    ("uncertainty", "Brier decomposition (Murphy): uncertainty of the labels."),
    ("auc", "Pooled ROC AUC of the scores over judged (query, document) pairs."),
)


@dataclass(frozen=True, slots=True)
class _JudgedFamilies:
    """Judged-runs gauges: per-metric means per window, judgment holes, calibration, version."""

    metric: GaugeMetricFamily
    holes: GaugeMetricFamily
    calibration: dict[str, GaugeMetricFamily]
    info: GaugeMetricFamily
    calibrated: set[str]  # monitors whose calibration is added (once: it is the window's)

    @classmethod
    def make(cls) -> _JudgedFamilies:
        win = ["monitor", "window"]  # pooled over the window's lists, not a segment's
        return cls(
            metric=_gauge(
                "outcome_metric",
                "Mean of each configured metric over the paired queries (judged runs).",
                ["monitor", "segment", "metric", "window"],
            ),
            holes=_gauge(
                "judgment_holes",
                "1 when judged@k fell more than judged_tolerance below the reference's.",
                ["monitor", "segment"],
            ),
            calibration={k: _gauge(f"calibration_{k}", doc, win) for k, doc in _CALIBRATION_GAUGES},
            info=_gauge(
                "judgments_info", "The judgment set in use; always 1.", ["monitor", "version"]
            ),
            calibrated=set(),
        )

    def add(self, name: str, segment: str, o: OutcomeReport) -> None:
        if o.metric is None:
            return
        self.holes.add_metric([name, segment], 1.0 if o.judgment_holes else 0.0)
        for metric, sides in (o.metrics or {}).items():
            for window in ("reference", "current"):
                value = sides.get(window)
                if value is not None:
                    self.metric.add_metric([name, segment, metric, window], float(value))
        if name in self.calibrated:  # every segment's report holds the same pooled numbers
            return
        self.calibrated.add(name)
        for window, cal in (o.calibration or {}).items():
            for key, family in self.calibration.items():
                value = None if cal is None else cal.get(key)
                if value is not None:
                    family.add_metric([name, window], float(value))

    def all(self) -> Iterator[GaugeMetricFamily]:
        yield self.metric
        yield self.holes
        yield from self.calibration.values()
        yield self.info


@dataclass(frozen=True, slots=True)
class HttpCounts:
    """What the HTTP server counted since start-up (it hands a fresh one to each scrape)."""

    connections_active: int = 0
    connections_accepted: int = 0
    connections_rejected: int = 0
    connections_timed_out: int = 0
    tls_handshake_failures: int = 0
    auth_failures: int = 0


class _HttpCollector(Collector):
    """``retrieval_monitor_http_*``: the endpoint's own connection counters."""

    def __init__(self, counts: Callable[[], HttpCounts]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        c = self._counts()
        active = GaugeMetricFamily(
            PREFIX + "http_connections_active", "HTTP connections open now (scrape time)."
        )
        active.add_metric([], float(c.connections_active))
        yield active
        for name, doc, value in (
            (
                "http_connections_accepted",
                "Connections admitted since start-up.",
                c.connections_accepted,
            ),
            (
                "http_connections_rejected",
                "Connections closed at once because max_connections were open.",
                c.connections_rejected,
            ),
            (
                "http_connections_timed_out",
                "Connections closed for exceeding request_timeout or idle_timeout, or idle "
                "and given way to a new one at max_connections.",
                c.connections_timed_out,
            ),
            (
                "http_tls_handshake_failures",
                "Connections whose TLS handshake failed or timed out.",
                c.tls_handshake_failures,
            ),
            ("http_auth_failures", "Requests answered 401 (basic auth).", c.auth_failures),
        ):
            counter = CounterMetricFamily(PREFIX + name, doc)
            counter.add_metric([], float(value))
            yield counter


def make_registry(
    board: Board,
    *,
    http_counts: Callable[[], HttpCounts] | None = None,
    process: bool = True,
) -> CollectorRegistry:
    """A registry of its own: this monitor's collector, the HTTP counters when given, and the
    standard ``process_*`` / ``python_*`` collectors (``process=False`` leaves those out)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(board.snapshot))
    if http_counts is not None:
        registry.register(_HttpCollector(http_counts))
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition of ``registry``."""
    return generate_latest(registry)


class _Restricted(Collector):
    """Only the samples named in ``?name[]=``. ``CollectorRegistry.restricted_registry`` would find
    nothing here: it looks names up from ``describe()``, which ``MonitorCollector`` leaves out
    because its families follow the board."""

    def __init__(self, registry: CollectorRegistry, names: frozenset[str]) -> None:
        self._registry = registry
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            samples = [s for s in metric.samples if s.name in self._names]
            if samples:
                kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                kept.samples = samples
                yield kept


def render_negotiated(
    registry: CollectorRegistry,
    *,
    accept: str | None,
    accept_encoding: str | None,
    names: Sequence[str] = (),
) -> tuple[bytes, list[tuple[str, str]]]:
    """``(body, headers)`` of a ``/metrics`` response, as prometheus_client's own server does it.

    ``Accept`` chooses the Prometheus text or OpenMetrics format (``choose_encoder``; an
    ``Accept`` it cannot parse, such as ``version=abc``, gets the text format, as client_golang's
    negotiation does: it was a 500 and a logged traceback per request), ``Accept-Encoding: gzip``
    compresses unless its ``q`` is 0, and ``names`` (``?name[]=...``) restricts the families.
    """
    encoder: Callable[[Any], bytes]
    try:
        encoder, content_type = choose_encoder(accept or "")
    except (ValueError, TypeError):  # a version that is not a version: prometheus_client raises
        encoder, content_type = generate_latest, CONTENT_TYPE_PLAIN_0_0_4
    source: Any = _Restricted(registry, frozenset(names)) if names else registry
    body = encoder(source)
    headers = [("Content-Type", content_type)]
    if _gzip_accepted(accept_encoding or ""):
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    headers.append(("Vary", "Accept, Accept-Encoding"))
    return body, headers


def _gzip_accepted(header: str) -> bool:
    """Whether ``Accept-Encoding`` takes gzip: named with a ``q`` above 0 (RFC 9110 12.5.3:
    ``gzip;q=0`` refuses it; prometheus_client's ``gzip_accepted`` ignores ``q``). A ``q`` that
    is not a number counts as 1."""
    for item in header.split(","):
        name, *params = (p.strip() for p in item.split(";"))
        if name.lower() != "gzip":
            continue
        q = next((p[2:] for p in params if p.lower().startswith("q=")), "1")
        try:
            return float(q) > 0
        except ValueError:
            return True
    return False
