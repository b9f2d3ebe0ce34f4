"""Verdicts: from a check's data and the sequential state to a state with reasons and numbers.

Pure code (numpy and ``monitor.stats``; no I/O, no clock). The rules, with the numbers in the
README's "How a check decides":

* **Input drift** (per segment, two tracks). The window-level PSI, KS and zero-rate numbers of
  the current window against the reference are reported. The *alarm* uses evidence from
  non-overlapping blocks: the scores that arrived since the last block (at least
  ``min_block_samples``). A block is compared with reference data **of the same phase**: with a
  seasonal period (``drift.seasonality``: daily = hour of day, weekly = hour of week) the
  expected bin shares are the reference's shares in the block's phases, weighted by the block's
  own phase mix, so a night block is compared with reference nights. The block's PSI p-value
  under the tolerance null (true PSI <= ``tolerance``) becomes ``z = clip(isf(p), -4, 8)`` and
  feeds a CUSUM ``S = max(0, S + z - k)``; an alarm is raised when ``S > h`` or at once when the
  block's Holm-adjusted p-value is below the immediate threshold. ``h`` and the immediate
  threshold account for the blocks' shared reference sample (``stats.cusum_threshold_shared``).
  Track ``reference`` compares with the rolling (or fixed) reference; with a rolling reference,
  track ``anchor`` compares with a frozen *anchor* (the reference as it was when the monitor
  started or was last re-anchored, kept as per-phase bin counts), so drift that creeps past the
  tolerance over weeks alarms, and an alarm stays raised while the change persists. A raised
  track clears only after ``clear_after`` consecutive blocks whose debiased PSI against *that
  track's* reference is below ``clear_share * tolerance`` (half, by default: a band between
  the two keeps a drift near the edge from flapping). The anchor is refreshed after
  ``anchor_refresh`` only while no alarm is raised and the rolling reference is within half the
  tolerance of it.
* **Model decay** (per segment). A one-sided sign-flip test of ``mean(current - reference) <
  -margin`` on per-query pairs decides. The current side is the complete evaluation runs that
  landed since the last look (pooled), the reference side the reference period's runs; a look
  happens at the first check after new complete runs land. Budget: each look spends
  ``alpha = budget * min(dt, cadence) / (period + cadence)`` with ``dt`` the time since the
  previous look, so any window of length ``period`` spends at most ``budget`` (a union bound,
  valid however dependent the looks on a fixed golden set are), and no look ever waits. Holm over
  segments. A raised segment stays raised (``model_decay``) until a look shows recovery: the
  interval's lower end back above ``-margin``; meanwhile the reference is frozen at the one the
  decay was found against, so a rolling reference never absorbs a decay. A golden set too small
  to reach the look's alpha (``2**-n > alpha``) is undecidable; its descriptive numbers are still
  reported.
* **Freshness**: a source whose newest row before ``at`` is older than its ``max_lag`` is stale.
* **State**: ``model_decay`` if a segment's decay is raised (whatever the input did); else
  ``data_drift`` if a drift track is raised and the score feed is fresh; else
  ``insufficient_data`` if a feed is stale or no segment could decide a side; else ``ok``.
  Undecidable segments are reported as such and do not make the monitor ``insufficient_data``
  when other segments decide. ``error`` is set by the job runner when a run fails.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from scipy.stats import norm

from monitor.config import MAX_RESAMPLES, MonitorConfig
from monitor.stats import (
    BaselinePositions,
    DriftBaseline,
    adjust_pvalues,
    build_baseline,
    cusum_step,
    cusum_threshold_shared,
    drift_tests,
    paired_test,
    proportion_test_counts,
    psi_test_counts,
    shewhart_threshold_shared,
    z_from_pvalue,
)

__all__ = [
    "STATES",
    "TRACKS",
    "AlarmPlan",
    "Anchor",
    "CheckData",
    "DecayTrack",
    "DriftTrack",
    "InputReport",
    "MonitorState",
    "OutcomeReport",
    "Pairs",
    "SegmentData",
    "SegmentDrift",
    "Verdict",
    "alarm_plan",
    "error_verdict",
    "evaluate",
    "phase_counts",
    "phase_of",
]

STATES = ("ok", "data_drift", "model_decay", "insufficient_data", "error")
TRACKS = ("reference", "anchor")
STATE_VERSION = 2
_NS = 1_000_000_000
_HOUR_NS = 3600 * _NS
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_LOOKS_KEPT = 10_000


def _iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _parse_iso(text: str | None) -> datetime | None:
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _finite(x: float) -> float | None:
    """JSON has no NaN/inf: non-finite numbers become null."""
    return float(x) if math.isfinite(x) else None


def _ns(t: datetime) -> int:
    return (t - _EPOCH) // timedelta(microseconds=1) * 1000


def _from_ns(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


# --------------------------------------------------------------------------- phases


def phase_of(timestamps_ns: np.ndarray, period: timedelta | None) -> np.ndarray:
    """Phase index of each timestamp: hour of day (daily, 0-23, UTC), hour of week (weekly,
    0-167, Monday 00:00 UTC = 0) or 0 (no seasonality)."""
    ts = np.asarray(timestamps_ns, dtype=np.int64)
    if period is None:
        return np.zeros(ts.shape, dtype=np.intp)
    hours = ts // _HOUR_NS
    if period == timedelta(days=1):
        return (hours % 24).astype(np.intp)
    return ((hours + 72) % 168).astype(np.intp)  # 1970-01-01 was a Thursday


def _phases(period: timedelta | None) -> int:
    if period is None:
        return 1
    return 24 if period == timedelta(days=1) else 168


def phase_counts(
    values: np.ndarray,
    timestamps_ns: np.ndarray | None,
    edges: np.ndarray,
    period: timedelta | None,
) -> np.ndarray:
    """Counts of ``values`` per (phase, bin) on the right-closed bins of inner ``edges``: P x B."""
    bins = int(edges.size) + 1
    phases = _phases(period)
    idx = np.searchsorted(edges, values, side="left")
    if phases == 1 or timestamps_ns is None:
        return np.bincount(idx, minlength=bins).astype(np.float64).reshape(1, bins)
    ph = phase_of(timestamps_ns, period)
    flat = np.bincount(ph * bins + idx, minlength=phases * bins)
    return flat.astype(np.float64).reshape(phases, bins)


# --------------------------------------------------------------------------- alarm plan


@dataclass(frozen=True, slots=True)
class AlarmPlan:
    """The per-check thresholds that hold a monitor's false-alarm budget for its schedule.

    ``checks`` slots per period; drift: ``tests = segments x tracks`` compared series, CUSUM
    ``drift_h`` for a share ``cusum_share`` of the budget split over them and ``drift_alpha`` /
    ``drift_z`` the immediate threshold for the rest, both accounting for the blocks' shared
    reference (correlation ``rho = 1 / (1 + reference cycles per phase)``, ``phases`` independent
    phase references a CUSUM cycles through); decay: ``decay_alpha`` spent by a look one
    ``cadence`` after the previous one (``budget * cadence / (period + cadence)``),
    ``decay_looks`` such looks fit in a period.
    """

    checks: int
    segments: int
    tracks: int
    seasonal_period: timedelta | None
    phases: int
    rho: float
    drift_h: float
    drift_alpha: float
    drift_z: float
    decay_looks: int
    decay_alpha: float
    cadence: timedelta
    n_resamples: int
    min_pairs_for_alpha: int

    def look_alpha(self, monitor: MonitorConfig, since_last: timedelta | None) -> float:
        """Alpha a look spends ``since_last`` after the previous look (None: first look)."""
        period = monitor.budget.period
        dt = self.cadence if since_last is None else min(since_last, self.cadence)
        return monitor.budget.decay * (dt / (period + self.cadence))


@functools.lru_cache(maxsize=256)
def _cusum_h(checks: int, p: float, k: float, rho: float, phases: int) -> float:
    """Markov-chain root search (up to a second with a shared reference): cached."""
    if rho == 0.0:
        return cusum_threshold_shared(checks, p, k=k)
    return cusum_threshold_shared(checks, p, k=k, rho=rho, phases=phases, states=100)


@functools.lru_cache(maxsize=256)
def _shewhart_z(checks: int, p: float, rho: float, phases: int) -> float:
    return shewhart_threshold_shared(checks, p, rho=rho, phases=phases)


def _tracks(monitor: MonitorConfig) -> int:
    return 2 if monitor.drift.anchor and not monitor.windows.fixed_reference else 1


def alarm_plan(monitor: MonitorConfig, segments: int = 1) -> AlarmPlan:
    """Thresholds for ``monitor`` with ``segments`` compared segments (see ``AlarmPlan``)."""
    budget = monitor.budget
    checks = monitor.schedule.checks_per(budget.period)
    interval = monitor.schedule.nominal_interval(budget.period)
    period = monitor.seasonal_period
    tracks = _tracks(monitor)
    tests = max(1, segments) * tracks
    span = monitor.windows.reference_span
    if period is None:
        cycles = span / max(interval, timedelta(seconds=1))
        phases = 1
    else:
        cycles = span / period
        phases = max(1, round(period / max(interval, timedelta(hours=1))))
        phases = min(phases, _phases(period))
    rho = round(1.0 / (1.0 + max(cycles, 1e-9)), 4)
    share = monitor.drift.cusum_share
    if share > 0:
        h = _cusum_h(checks, share * budget.drift / tests, monitor.drift.cusum_k, rho, phases)
    else:
        h = math.inf
    if share < 1:
        drift_z = _shewhart_z(checks, (1.0 - share) * budget.drift / tests, rho, phases)
        drift_alpha = float(norm.sf(drift_z)) * tests  # compared with Holm-adjusted p-values
    else:
        drift_z, drift_alpha = math.inf, 0.0
    cadence = monitor.decay.cadence
    looks = max(1, math.floor(budget.period / cadence))
    if monitor.decay.looks:
        looks = monitor.decay.looks
        cadence = budget.period / looks
    decay_alpha = budget.decay * (cadence / (budget.period + cadence))
    n_resamples = monitor.decay.n_resamples or max(9999, math.ceil(20.0 / decay_alpha))
    return AlarmPlan(
        checks=checks,
        segments=segments,
        tracks=tracks,
        seasonal_period=period,
        phases=phases,
        rho=rho,
        drift_h=h,
        drift_alpha=drift_alpha,
        drift_z=drift_z,
        decay_looks=looks,
        decay_alpha=decay_alpha,
        cadence=cadence,
        n_resamples=n_resamples,
        min_pairs_for_alpha=math.ceil(math.log2(1.0 / decay_alpha)),
    )


# --------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class DriftTrack:
    """Sequential state of one drift track of one segment: CUSUM and alarm."""

    cusum: float = 0.0
    active: bool = False
    active_since: datetime | None = None
    quiet: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "cusum": self.cusum,
            "active": self.active,
            "active_since": _iso(self.active_since),
            "quiet": self.quiet,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DriftTrack:
        cusum = float(d.get("cusum", 0.0))
        if not math.isfinite(cusum) or cusum < 0:
            raise ValueError(f"drift CUSUM must be a finite number >= 0; got {cusum!r}")
        return cls(
            cusum=cusum,
            active=bool(d.get("active", False)),
            active_since=_parse_iso(d.get("active_since")),
            quiet=int(d.get("quiet", 0)),
        )


@dataclass(frozen=True, slots=True)
class Anchor:
    """A frozen drift reference kept as per-phase bin counts (``counts``: phases x bins)."""

    edges: tuple[float, ...]
    counts: tuple[tuple[float, ...], ...]
    start: datetime
    end: datetime
    set_at: datetime

    @property
    def array(self) -> np.ndarray:
        return np.asarray(self.counts, dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "edges": list(self.edges),
            "counts": [[int(x) if x.is_integer() else x for x in row] for row in self.counts],
            "start": _iso(self.start),
            "end": _iso(self.end),
            "set_at": _iso(self.set_at),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Anchor:
        edges = tuple(float(x) for x in d["edges"])
        counts = tuple(tuple(float(x) for x in row) for row in d["counts"])
        if any(len(row) != len(edges) + 1 for row in counts) or not counts:
            raise ValueError("anchor counts must have one row per phase, len(edges) + 1 each")
        if not all(math.isfinite(x) and x >= 0 for row in counts for x in row):
            raise ValueError("anchor counts must be finite and >= 0")
        start, end, set_at = (_parse_iso(d.get(k)) for k in ("start", "end", "set_at"))
        if start is None or end is None or set_at is None:
            raise ValueError("anchor needs start, end and set_at")
        return cls(edges=edges, counts=counts, start=start, end=end, set_at=set_at)


@dataclass(frozen=True, slots=True)
class SegmentDrift:
    """Drift state of one segment: end of the last evidence block, its tracks, its anchor."""

    evidence_end: datetime | None = None
    reference: DriftTrack = field(default_factory=DriftTrack)
    anchor: DriftTrack = field(default_factory=DriftTrack)
    anchor_ref: Anchor | None = None

    def track(self, name: str) -> DriftTrack:
        return self.reference if name == "reference" else self.anchor

    @property
    def active(self) -> bool:
        return self.reference.active or self.anchor.active

    def to_dict(self) -> dict[str, Any]:
        return {
            "evidence_end": _iso(self.evidence_end),
            "reference": self.reference.to_dict(),
            "anchor": self.anchor.to_dict(),
            "anchor_ref": None if self.anchor_ref is None else self.anchor_ref.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SegmentDrift:
        anchor_ref = d.get("anchor_ref")
        return cls(
            evidence_end=_parse_iso(d.get("evidence_end")),
            reference=DriftTrack.from_dict(d.get("reference", {})),
            anchor=DriftTrack.from_dict(d.get("anchor", {})),
            anchor_ref=None if anchor_ref is None else Anchor.from_dict(anchor_ref),
        )


@dataclass(frozen=True, slots=True)
class DecayTrack:
    """Sequential decay state: looks spent, the runs already looked at, raised segments, the
    frozen reference while a decay is raised, and the last look's per-segment reports."""

    looks: tuple[datetime, ...] = ()
    runs_end: datetime | None = None
    active: Mapping[str, datetime] = field(default_factory=dict)
    reference_start: datetime | None = None
    reference_end: datetime | None = None
    reports: Mapping[str, OutcomeReport] = field(default_factory=dict)

    @property
    def last_look_at(self) -> datetime | None:
        return self.looks[-1] if self.looks else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "looks": [_iso(t) for t in self.looks],
            "runs_end": _iso(self.runs_end),
            "active": {k: _iso(v) for k, v in self.active.items()},
            "reference_start": _iso(self.reference_start),
            "reference_end": _iso(self.reference_end),
            "reports": {k: v.to_dict() for k, v in self.reports.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DecayTrack:
        looks = tuple(t for t in (_parse_iso(x) for x in d.get("looks", [])) if t is not None)
        active = {k: _parse_iso(v) for k, v in d.get("active", {}).items()}
        return cls(
            looks=looks,
            runs_end=_parse_iso(d.get("runs_end")),
            active={k: v for k, v in active.items() if v is not None},
            reference_start=_parse_iso(d.get("reference_start")),
            reference_end=_parse_iso(d.get("reference_end")),
            reports={k: OutcomeReport.from_dict(v) for k, v in d.get("reports", {}).items()},
        )


_TRACK_KEYS = {"cusum", "active", "active_since", "quiet"}
_SEGMENT_KEYS = {"evidence_end", "reference", "anchor", "anchor_ref"}
_DECAY_KEYS = {"looks", "runs_end", "active", "reference_start", "reference_end", "reports"}


def _need(ok: bool, where: str, what: str, value: Any) -> None:
    if not ok:
        raise ValueError(f"`{where}` must be {what}; got {value!r:.80}")


def _check_time(d: Mapping[str, Any], key: str, where: str) -> None:
    value = d.get(key)
    _need(
        value is None or isinstance(value, str), f"{where}{key}", "null or an RFC 3339 time", value
    )
    if value is not None:
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"`{where}{key}` must be an RFC 3339 time; got {value!r:.80}"
            ) from None
        _need(t.tzinfo is not None, f"{where}{key}", "a time with a UTC offset", value)


def _check_number(value: Any, where: str) -> None:
    _need(
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
        where,
        "a finite number",
        value,
    )


def _check_state_doc(d: Any) -> None:
    """Validate the shape of a persisted state document (types, finiteness, known keys of the
    sequential parts), so that a damaged file is rejected as a whole instead of loading into
    a state that silently switches an alarm off or fails every later check."""
    _need(isinstance(d, Mapping), "state", "a JSON object", type(d).__name__)
    if d.get("version") != STATE_VERSION:
        raise ValueError(
            f"unknown state version {d.get('version')!r:.40}; expected {STATE_VERSION}"
        )
    for key in ("state_since", "last_at", "first_at", "last_run", "last_success"):
        _check_time(d, key, "")
    state = d.get("state")
    _need(state is None or state in STATES, "state", f"null or one of {STATES}", state)
    fp = d.get("fingerprint")
    _need(fp is None or isinstance(fp, str), "fingerprint", "null or a string", fp)
    before = d.get("before_last")
    _need(before is None or isinstance(before, Mapping), "before_last", "an object", before)
    drift = d.get("drift", {})
    _need(isinstance(drift, Mapping), "drift", "an object of segments", drift)
    for segment, seg in drift.items():
        where = f"drift[{segment!r:.40}]"
        _need(isinstance(seg, Mapping), where, "an object", seg)
        unknown = set(seg) - _SEGMENT_KEYS
        _need(not unknown, where, f"an object with keys {sorted(_SEGMENT_KEYS)}", unknown)
        _check_time(seg, "evidence_end", f"{where}.")
        for name in ("reference", "anchor"):
            track = seg.get(name, {})
            tw = f"{where}.{name}."
            _need(isinstance(track, Mapping), tw[:-1], "an object", track)
            unknown = set(track) - _TRACK_KEYS
            _need(not unknown, tw[:-1], f"an object with keys {sorted(_TRACK_KEYS)}", unknown)
            _check_number(track.get("cusum", 0.0), f"{tw}cusum")
            _need(track.get("cusum", 0.0) >= 0, f"{tw}cusum", "a number >= 0", track.get("cusum"))
            quiet = track.get("quiet", 0)
            _need(
                isinstance(quiet, int) and not isinstance(quiet, bool) and quiet >= 0,
                f"{tw}quiet",
                "an integer >= 0",
                quiet,
            )
            active = track.get("active", False)
            _need(isinstance(active, bool), f"{tw}active", "true or false", active)
            _check_time(track, "active_since", tw)
        anchor = seg.get("anchor_ref")
        _need(
            anchor is None or isinstance(anchor, Mapping),
            f"{where}.anchor_ref",
            "an object",
            anchor,
        )
    decay = d.get("decay", {})
    _need(isinstance(decay, Mapping), "decay", "an object", decay)
    unknown = set(decay) - _DECAY_KEYS
    _need(not unknown, "decay", f"an object with keys {sorted(_DECAY_KEYS)}", unknown)
    for key in ("runs_end", "reference_start", "reference_end"):
        _check_time(decay, key, "decay.")
    looks = decay.get("looks", [])
    _need(isinstance(looks, list), "decay.looks", "a list of times", looks)
    for i, t in enumerate(looks):
        _check_time({"t": t}, "t", f"decay.looks[{i}].")
    raised = decay.get("active", {})
    _need(isinstance(raised, Mapping), "decay.active", "an object of segments", raised)
    for k in raised:
        _check_time(raised, k, "decay.active.")
    reports = decay.get("reports", {})
    _need(isinstance(reports, Mapping), "decay.reports", "an object of segments", reports)
    names = set(OutcomeReport.__dataclass_fields__)
    for segment, report in reports.items():
        where = f"decay.reports[{segment!r:.40}]"
        _need(isinstance(report, Mapping), where, "an object", report)
        _need(
            {"n_pairs", "only_reference", "only_current", "coverage", "decidable"} <= set(report),
            where,
            "a complete outcome report",
            sorted(report),
        )
        for key, value in report.items():
            if key in names and isinstance(value, float):
                _check_number(value, f"{where}.{key}")


@dataclass(frozen=True, slots=True)
class MonitorState:
    """Everything a monitor carries from check to check; persisted by the job runner.

    ``fingerprint`` names the settings the sequential state was computed under (the job runner
    sets it); a state file written under other settings is not resumed. ``before_last`` is the
    state as it was before the slot ``last_at`` was decided, so ``monitor check`` can reproduce
    the daemon's latest verdict exactly (read-only).
    """

    drift: Mapping[str, SegmentDrift] = field(default_factory=dict)
    decay: DecayTrack = field(default_factory=DecayTrack)
    state: str | None = None
    state_since: datetime | None = None
    last_at: datetime | None = None
    first_at: datetime | None = None
    last_run: datetime | None = None
    last_success: datetime | None = None
    fingerprint: str | None = None
    before_last: MonitorState | None = None

    def to_dict(self, *, nested: bool = True) -> dict[str, Any]:
        """The persisted JSON document (version 2); ``from_dict`` reads it back."""
        out: dict[str, Any] = {
            "version": STATE_VERSION,
            "drift": {k: v.to_dict() for k, v in self.drift.items()},
            "decay": self.decay.to_dict(),
            "state": self.state,
            "state_since": _iso(self.state_since),
            "last_at": _iso(self.last_at),
            "first_at": _iso(self.first_at),
            "last_run": _iso(self.last_run),
            "last_success": _iso(self.last_success),
            "fingerprint": self.fingerprint,
        }
        if nested and self.before_last is not None:
            out["before_last"] = self.before_last.to_dict(nested=False)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MonitorState:
        """Read a persisted document; ``ValueError`` naming the first bad field when its shape,
        a type or a number (non-finite, negative CUSUM) is wrong."""
        _check_state_doc(d)
        before = d.get("before_last")
        return cls(
            drift={k: SegmentDrift.from_dict(v) for k, v in d.get("drift", {}).items()},
            decay=DecayTrack.from_dict(d.get("decay", {})),
            state=d.get("state"),
            state_since=_parse_iso(d.get("state_since")),
            last_at=_parse_iso(d.get("last_at")),
            first_at=_parse_iso(d.get("first_at")),
            last_run=_parse_iso(d.get("last_run")),
            last_success=_parse_iso(d.get("last_success")),
            fingerprint=d.get("fingerprint"),
            before_last=None if before is None else cls.from_dict(before),
        )


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class Pairs:
    """Per-query outcomes of one segment, paired by query id (same order)."""

    reference: np.ndarray
    current: np.ndarray
    only_reference: int = 0
    only_current: int = 0
    query_ids: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.reference.size)

    @property
    def coverage(self) -> float:
        total = self.n + self.only_reference
        return self.n / total if total else 0.0


@dataclass(frozen=True, slots=True)
class SegmentData:
    """One segment's data for a check. Timestamps are int64 ns and align with their values.

    ``positions`` (optional, only with ``baseline``): ``current`` located in ``baseline``,
    precomputed by a reader that serves many windows against one frozen baseline (the backtest);
    ``reference_phases`` (optional): the reference's per-(phase, bin) counts on ``baseline``'s
    edges, cached by the runner for a fixed reference. The numbers are identical without them.
    """

    reference: np.ndarray
    current: np.ndarray
    current_timestamps: np.ndarray
    pairs: Pairs
    baseline: DriftBaseline | None = None
    positions: BaselinePositions | None = None
    reference_timestamps: np.ndarray | None = None
    reference_phases: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class CheckData:
    """What the job runner read for one check: windows, per-segment data, freshness.

    Outcomes: ``runs`` complete evaluation runs landed in ``[runs_start, runs_end]`` since the
    last look (0: nothing new to look at), paired with the reference period
    ``[outcome_reference_start, outcome_reference_end)``. ``newest_score`` / ``newest_outcome``
    are the newest rows before ``at`` that the runner saw (None: none in the windows read).
    """

    current_start: datetime
    current_end: datetime
    reference_start: datetime
    reference_end: datetime
    segments: Mapping[str, SegmentData]
    newest_score: datetime | None = None
    newest_outcome: datetime | None = None
    reference_outcome_queries: int = 0
    current_outcome_queries: int = 0
    runs: int = 0
    runs_start: datetime | None = None
    runs_end: datetime | None = None
    outcome_reference_start: datetime | None = None
    outcome_reference_end: datetime | None = None


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True, slots=True)
class InputReport:
    """Input drift numbers for one segment (the JSON ``input`` object).

    ``psi`` ... ``out_of_range_rate``: the current window against the reference. ``block_*``: the
    newest evidence block ``[block_start, block_end)`` against the reference of the same phases
    (track ``reference``) and against the anchor (``anchor_*``); ``alarm`` says which rule fired
    (``immediate`` / ``cusum``) on which track (``alarm_track``).
    """

    n_reference: int
    n_current: int
    decidable: bool
    drift: bool = False
    psi: float | None = None
    psi_pvalue: float | None = None
    psi_noise_floor: float | None = None
    psi_debiased: float | None = None
    psi_tolerance: float | None = None
    psi_bins: int | None = None
    ks_statistic: float | None = None
    ks_pvalue: float | None = None
    ks_location: float | None = None
    zero_rate_reference: float | None = None
    zero_rate_current: float | None = None
    zero_rate_pvalue: float | None = None
    out_of_range_rate: float | None = None
    volume_ratio: float | None = None
    evidence: bool = False
    block_start: str | None = None
    block_end: str | None = None
    block_samples: int = 0
    block_reference_samples: float | None = None
    block_psi: float | None = None
    block_pvalue: float | None = None
    block_pvalue_adjusted: float | None = None
    z: float | None = None
    cusum: float = 0.0
    anchor_start: str | None = None
    anchor_end: str | None = None
    anchor_psi: float | None = None
    anchor_pvalue: float | None = None
    anchor_pvalue_adjusted: float | None = None
    anchor_z: float | None = None
    anchor_cusum: float | None = None
    anchor_drift: bool = False
    cusum_threshold: float | None = None
    z_threshold: float | None = None
    alarm: str | None = None
    alarm_track: str | None = None
    drift_since: str | None = None
    drift_tracks: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in asdict(self).items():
            out[k] = (
                _finite(v) if isinstance(v, float) else (list(v) if isinstance(v, tuple) else v)
            )
        return out


@dataclass(frozen=True, slots=True)
class OutcomeReport:
    """Paired outcome numbers for one segment (the JSON ``outcome`` object).

    ``decidable`` False: the numbers are descriptive only (too few pairs for the look's alpha).
    ``decay`` is the raised state (it stays until ``recovered``); ``significant`` says whether
    this look's test rejected.
    """

    n_pairs: int
    only_reference: int
    only_current: int
    coverage: float
    decidable: bool
    decay: bool = False
    significant: bool = False
    recovered: bool = False
    decay_since: str | None = None
    mean_difference: float | None = None
    median_difference: float | None = None
    sd_difference: float | None = None
    pvalue: float | None = None
    pvalue_adjusted: float | None = None
    alpha: float | None = None
    margin: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence_level: float | None = None
    effect_size: float | None = None
    wins: int = 0
    losses: int = 0
    ties: int = 0
    mde: float | None = None
    ttest_pvalue: float | None = None
    sign_test_pvalue: float | None = None
    wilcoxon_pvalue: float | None = None
    n_resamples: int | None = None
    exact: bool | None = None
    flat: bool = False
    looked_at: str | None = None
    new_look: bool = False
    runs: int = 0
    runs_start: str | None = None
    runs_end: str | None = None
    reference_start: str | None = None
    reference_end: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (_finite(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OutcomeReport:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True, slots=True)
class Verdict:
    """The result of one check of one monitor."""

    monitor: str
    at: datetime
    state: str
    reasons: tuple[str, ...]
    inputs: Mapping[str, InputReport] = field(default_factory=dict)
    outcomes: Mapping[str, OutcomeReport] = field(default_factory=dict)
    plan: AlarmPlan | None = None
    windows: Mapping[str, str | None] = field(default_factory=dict)
    newest_score: datetime | None = None
    newest_outcome: datetime | None = None
    error: str | None = None
    sequential: bool = True
    stale: tuple[str, ...] = ()
    replay_from: datetime | None = None

    @property
    def input(self) -> InputReport | None:
        """The segment that determines the drift state (drifting, else largest PSI)."""
        if not self.inputs:
            return None
        return max(self.inputs.values(), key=lambda r: (r.drift, r.decidable, r.psi or 0.0))

    @property
    def outcome(self) -> OutcomeReport | None:
        """The segment that determines the decay state (decaying, else smallest p-value)."""
        if not self.outcomes:
            return None
        return max(
            self.outcomes.values(),
            key=lambda r: (
                r.decay,
                r.decidable,
                -(r.pvalue_adjusted if r.pvalue_adjusted is not None else 2.0),
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``monitor check --json`` contract for one monitor."""
        segmented = set(self.inputs) | set(self.outcomes)
        inp = self.input
        out = self.outcome
        plan = self.plan
        return {
            "name": self.monitor,
            "at": _iso(self.at),
            "state": self.state,
            "reasons": list(self.reasons),
            "error": self.error,
            "input": inp.to_dict() if inp else None,
            "outcome": out.to_dict() if out else None,
            "segments": [
                {
                    "segment": s,
                    "input": self.inputs[s].to_dict() if s in self.inputs else None,
                    "outcome": self.outcomes[s].to_dict() if s in self.outcomes else None,
                }
                for s in sorted(segmented)
            ]
            if segmented - {""}
            else [],
            "windows": dict(self.windows),
            "freshness": {
                "newest_score": _iso(self.newest_score),
                "newest_outcome": _iso(self.newest_outcome),
                "stale": list(self.stale),
            },
            "alarm_plan": None if plan is None else _plan_dict(plan),
            "sequential": self.sequential,
            "replay_from": _iso(self.replay_from),
        }


def _plan_dict(plan: AlarmPlan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in asdict(plan).items():
        if isinstance(v, timedelta):
            out[f"{k}_seconds"] = v.total_seconds()
        elif k == "seasonal_period":
            out["seasonal_period_seconds"] = None
        else:
            out[k] = _finite(v) if isinstance(v, float) else v
    return out


def error_verdict(monitor: str, at: datetime, message: str) -> Verdict:
    """The verdict of a run that failed (unreadable source, bad schema, ...)."""
    return Verdict(monitor=monitor, at=at, state="error", reasons=(message,), error=message)


# --------------------------------------------------------------------------- drift


def _rng_seed(seed: int, segment: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, zlib.crc32(segment.encode("utf-8"))])


@dataclass(frozen=True, slots=True)
class _Block:
    psi: float
    debiased: float
    pvalue: float
    n_reference: float


def _block_test(
    counts: np.ndarray,
    block_phases: np.ndarray,
    block_bins: np.ndarray,
    tolerance: float,
    smoothing: float,
) -> _Block | None:
    """Block bin counts against the phase-weighted reference counts ``counts`` (P x B).

    Expected shares q = sum_p w_p c_p / n_p with w_p the block's share in phase p (phases the
    reference lacks fall back to the whole reference); the reference size for N_eff is
    1 / sum_p (w_p^2 / n_p), the size of an equally precise plain sample.
    """
    phases, bins = counts.shape
    m = block_bins.size
    cur = np.bincount(block_bins, minlength=bins).astype(np.float64)
    totals = counts.sum(axis=1)
    if phases == 1:
        ref, n_ref = counts[0], float(totals[0])
    else:
        w = np.bincount(block_phases, minlength=phases).astype(np.float64) / m
        missing = (w > 0) & (totals <= 0)
        overall = counts.sum(axis=0)
        if overall.sum() <= 0:
            return None
        shares = np.where(totals[:, None] > 0, counts / np.maximum(totals, 1.0)[:, None], 0.0)
        q = (w[:, None] * shares).sum(axis=0) + w[missing].sum() * overall / overall.sum()
        inv = np.sum(np.where(totals > 0, w**2 / np.maximum(totals, 1.0), 0.0))
        inv += w[missing].sum() ** 2 / overall.sum()
        n_ref = 1.0 / inv
        ref = q * n_ref
    if n_ref <= 0 or ref.sum() <= 0:
        return None
    r = psi_test_counts(ref, cur, tolerance=tolerance, smoothing=smoothing, n_reference=n_ref)
    return _Block(psi=r.statistic, debiased=r.debiased, pvalue=r.pvalue, n_reference=n_ref)


def _volume_ratio(
    monitor: MonitorConfig, data: CheckData, seg: SegmentData, counts: np.ndarray
) -> float | None:
    """Current-window volume over the volume the reference had at the same phases."""
    span = data.reference_end - data.reference_start
    cur_span = data.current_end - data.current_start
    if span <= timedelta(0) or seg.reference.size == 0:
        return None
    period = monitor.seasonal_period
    if period is None or counts.shape[0] == 1 or seg.reference_timestamps is None:
        expected = seg.reference.size * (cur_span / span)
    else:
        cycles = span / period
        start = _ns(data.current_start) // _HOUR_NS
        end = -(-_ns(data.current_end) // _HOUR_NS)
        hours = np.arange(start, end, dtype=np.int64) * _HOUR_NS
        ph = phase_of(hours, period)
        per_phase = counts.sum(axis=1) / cycles
        expected = float(per_phase[ph].sum()) * (cur_span / timedelta(hours=int(end - start)))
    return float(seg.current.size / expected) if expected > 0 else None


def _make_anchor(
    monitor: MonitorConfig,
    at: datetime,
    data: CheckData,
    seg: SegmentData,
    edges: np.ndarray,
    counts: np.ndarray,
) -> Anchor:
    del monitor, seg
    return Anchor(
        edges=tuple(float(x) for x in edges),
        counts=tuple(tuple(float(x) for x in row) for row in counts),
        start=data.reference_start,
        end=data.reference_end,
        set_at=at,
    )


def _evaluate_input(
    monitor: MonitorConfig,
    at: datetime,
    data: CheckData,
    seg: SegmentData,
    prior: SegmentDrift,
    plan: AlarmPlan,
) -> tuple[InputReport, SegmentDrift, dict[str, float]]:
    """Window numbers and each track's block p-value (``{track: p}``; empty: no evidence)."""
    cfg = monitor.drift
    n_ref, n_cur = int(seg.reference.size), int(seg.current.size)
    tracks_txt = tuple(t for t in TRACKS if prior.track(t).active)
    if n_ref < cfg.min_reference_samples or n_cur < cfg.min_current_samples:
        return (
            InputReport(
                n_reference=n_ref,
                n_current=n_cur,
                decidable=False,
                cusum=prior.reference.cusum,
                drift=prior.active,
                drift_since=_iso(_since(prior)),
                drift_tracks=tracks_txt,
            ),
            prior,
            {},
        )
    baseline = seg.baseline
    positions = seg.positions
    if baseline is None:
        baseline = build_baseline(seg.reference, bins=cfg.bins)
        positions = None
    both = drift_tests(
        baseline,
        seg.current,
        tolerance=cfg.tolerance,
        smoothing=cfg.smoothing,
        positions=positions,
    )
    ordered = baseline.sorted_reference
    zero_ref = int(np.searchsorted(ordered, 0.0, side="right")) - int(
        np.searchsorted(ordered, 0.0, side="left")
    )
    zero_cur = int(np.count_nonzero(seg.current == 0.0))
    zero = proportion_test_counts(zero_ref, n_ref, zero_cur, n_cur)
    period = plan.seasonal_period
    counts = seg.reference_phases
    if counts is None:
        counts = phase_counts(seg.reference, seg.reference_timestamps, baseline.edges, period)

    block_start = data.current_start
    if prior.evidence_end is not None and prior.evidence_end > block_start:
        block_start = prior.evidence_end
    in_block = seg.current_timestamps >= _ns(block_start)
    block = seg.current[in_block]
    report = InputReport(
        n_reference=n_ref,
        n_current=n_cur,
        decidable=True,
        psi=both.psi.statistic,
        psi_pvalue=both.psi.pvalue,
        psi_noise_floor=both.psi.noise_floor,
        psi_debiased=both.psi.debiased,
        psi_tolerance=cfg.tolerance,
        psi_bins=both.psi.n_bins,
        ks_statistic=both.ks.statistic,
        ks_pvalue=both.ks.pvalue,
        ks_location=both.ks.statistic_location,
        zero_rate_reference=zero.rate_reference,
        zero_rate_current=zero.rate_current,
        zero_rate_pvalue=zero.pvalue,
        out_of_range_rate=both.psi.out_of_range_rate,
        volume_ratio=_volume_ratio(monitor, data, seg, counts),
        block_start=_iso(block_start),
        block_end=_iso(at),
        block_samples=int(block.size),
        cusum=prior.reference.cusum,
        cusum_threshold=plan.drift_h,
        z_threshold=plan.drift_z,
        drift=prior.active,
        drift_since=_iso(_since(prior)),
        drift_tracks=tracks_txt,
    )
    state = prior
    use_anchor = plan.tracks == 2
    if use_anchor:
        anchor = state.anchor_ref
        if (
            anchor is None
            or (
                anchor.array.shape[0] != counts.shape[0]  # the seasonality setting changed
            )
            or (
                at - anchor.set_at >= cfg.anchor_refresh
                and not state.active
                and _close_to_anchor(anchor, seg, period, cfg.tolerance, cfg.smoothing)
            )
        ):
            anchor = _make_anchor(monitor, at, data, seg, baseline.edges, counts)
        state = replace(state, anchor_ref=anchor)
        report = replace(
            report,
            anchor_start=_iso(anchor.start),
            anchor_end=_iso(anchor.end),
            anchor_cusum=state.anchor.cusum,
        )
    if block.size < cfg.min_block_samples:
        return report, state, {}
    block_ts = seg.current_timestamps[in_block]
    block_ph = phase_of(block_ts, period) if counts.shape[0] > 1 else np.zeros(block.size, np.intp)
    pvalues: dict[str, float] = {}
    test = _block_test(
        counts,
        block_ph,
        np.searchsorted(baseline.edges, block, side="left"),
        cfg.tolerance,
        cfg.smoothing,
    )
    if test is not None:
        z = z_from_pvalue(test.pvalue)
        cusum = cusum_step(state.reference.cusum, z, k=cfg.cusum_k)
        quiet = state.reference.quiet + 1 if test.debiased < cfg.clear_share * cfg.tolerance else 0
        state = replace(state, reference=replace(state.reference, cusum=cusum, quiet=quiet))
        report = replace(
            report,
            evidence=True,
            block_psi=test.psi,
            block_pvalue=test.pvalue,
            z=z,
            cusum=cusum,
            block_reference_samples=test.n_reference,
        )
        pvalues["reference"] = test.pvalue
    if use_anchor and state.anchor_ref is not None:
        anchor = state.anchor_ref
        edges = np.asarray(anchor.edges, dtype=np.float64)
        a_counts = anchor.array
        a_ph = block_ph if a_counts.shape[0] == counts.shape[0] else phase_of(block_ts, period)
        if a_counts.shape[0] == 1:
            a_ph = np.zeros(block.size, np.intp)
        test = _block_test(
            a_counts,
            a_ph,
            np.searchsorted(edges, block, side="left"),
            cfg.tolerance,
            cfg.smoothing,
        )
        if test is not None:
            z = z_from_pvalue(test.pvalue)
            cusum = cusum_step(state.anchor.cusum, z, k=cfg.cusum_k)
            quiet = state.anchor.quiet + 1 if test.debiased < cfg.clear_share * cfg.tolerance else 0
            state = replace(state, anchor=replace(state.anchor, cusum=cusum, quiet=quiet))
            report = replace(
                report,
                evidence=True,
                anchor_psi=test.psi,
                anchor_pvalue=test.pvalue,
                anchor_z=z,
                anchor_cusum=cusum,
            )
            pvalues["anchor"] = test.pvalue
    if pvalues:
        state = replace(state, evidence_end=at)
    return report, state, pvalues


def _close_to_anchor(
    anchor: Anchor,
    seg: SegmentData,
    period: timedelta | None,
    tolerance: float,
    smoothing: float,
) -> bool:
    """Whether the rolling reference is within half the tolerance of the anchor (debiased)."""
    edges = np.asarray(anchor.edges, dtype=np.float64)
    now = phase_counts(seg.reference, seg.reference_timestamps, edges, period).sum(axis=0)
    then = anchor.array.sum(axis=0)
    if now.sum() <= 0 or then.sum() <= 0:
        return False
    r = psi_test_counts(then, now, tolerance=tolerance, smoothing=smoothing)
    return r.debiased < tolerance / 2


def _since(d: SegmentDrift) -> datetime | None:
    times = [t.active_since for t in (d.reference, d.anchor) if t.active and t.active_since]
    return min(times) if times else None


def _settle_drift(
    monitor: MonitorConfig,
    at: datetime,
    reports: dict[str, InputReport],
    states: dict[str, SegmentDrift],
    block_p: dict[tuple[str, str], float],
    plan: AlarmPlan,
) -> None:
    """Raise or clear alarms once every segment's evidence is in (Holm over segment-tracks)."""
    keys = sorted(block_p)
    adjusted = (
        dict(zip(keys, adjust_pvalues([block_p[k] for k in keys], method="holm"), strict=True))
        if keys
        else {}
    )
    for name, report in list(reports.items()):
        state = states[name]
        fired: list[tuple[str, str]] = []
        for track_name in TRACKS[: plan.tracks]:
            track = state.track(track_name)
            key = (name, track_name)
            alarm: str | None = None
            if key in adjusted:
                if adjusted[key] <= plan.drift_alpha:
                    alarm = "immediate"
                elif track.cusum > plan.drift_h:
                    alarm = "cusum"
            if alarm is not None:
                track = replace(
                    track, cusum=0.0, active=True, active_since=track.active_since or at, quiet=0
                )
                fired.append((alarm, track_name))
            elif track.active and track.quiet >= monitor.drift.clear_after:
                track = replace(track, active=False, active_since=None, quiet=0)
            elif not track.active:
                track = replace(track, quiet=0)
            state = (
                replace(state, reference=track)
                if track_name == "reference"
                else replace(state, anchor=track)
            )
        states[name] = state
        first = fired[0] if fired else (None, None)
        reports[name] = replace(
            report,
            alarm=first[0],
            alarm_track=first[1],
            block_pvalue_adjusted=_get(adjusted, (name, "reference")),
            anchor_pvalue_adjusted=_get(adjusted, (name, "anchor")),
            drift=state.active,
            anchor_drift=state.anchor.active,
            drift_since=_iso(_since(state)),
            drift_tracks=tuple(t for t in TRACKS if state.track(t).active),
            cusum=state.reference.cusum,
            anchor_cusum=state.anchor.cusum if plan.tracks == 2 else None,
        )


def _get(d: Mapping[tuple[str, str], float], key: tuple[str, str]) -> float | None:
    return float(d[key]) if key in d else None


# --------------------------------------------------------------------------- decay


def _describe(pairs: Pairs) -> dict[str, Any]:
    d = pairs.current - pairs.reference
    if d.size == 0:
        return {}
    rounded = np.round(d, 12)
    return {
        "mean_difference": float(d.mean()),
        "median_difference": float(np.median(d)),
        "sd_difference": float(d.std(ddof=1)) if d.size > 1 else None,
        "wins": int(np.count_nonzero(rounded > 0)),
        "losses": int(np.count_nonzero(rounded < 0)),
        "ties": int(np.count_nonzero(rounded == 0)),
    }


def _evaluate_outcomes(
    monitor: MonitorConfig,
    at: datetime,
    data: CheckData,
    decay: DecayTrack,
    plan: AlarmPlan,
) -> tuple[dict[str, OutcomeReport], DecayTrack]:
    cfg = monitor.decay
    period = monitor.budget.period
    last = decay.last_look_at
    if (
        data.runs == 0
        or data.runs_end is None
        or (decay.runs_end is not None and data.runs_end <= decay.runs_end)
        or (last is not None and at <= last)
    ):
        # nothing new landed (or already looked at): carry the last look; raised stays raised
        carried = {k: replace(v, new_look=False) for k, v in decay.reports.items()}
        return carried, decay
    since = None if decay.last_look_at is None else at - decay.last_look_at
    alpha = plan.look_alpha(monitor, since)
    n_resamples = cfg.n_resamples or min(MAX_RESAMPLES, max(9999, math.ceil(20.0 / alpha)))
    needed = max(cfg.min_pairs, math.ceil(math.log2(1.0 / alpha)))
    look = {
        "alpha": alpha,
        "margin": cfg.margin,
        "looked_at": _iso(at),
        "new_look": True,
        "runs": data.runs,
        "runs_start": _iso(data.runs_start),
        "runs_end": _iso(data.runs_end),
        "reference_start": _iso(data.outcome_reference_start),
        "reference_end": _iso(data.outcome_reference_end),
    }
    base: dict[str, OutcomeReport] = {}
    results = {}
    for name, seg in data.segments.items():
        p = seg.pairs
        base[name] = OutcomeReport(
            n_pairs=p.n,
            only_reference=p.only_reference,
            only_current=p.only_current,
            coverage=p.coverage,
            decidable=p.n >= needed,
            **look,  # type: ignore[arg-type]
            **_describe(p),
        )
        if p.n >= 2:
            results[name] = paired_test(
                p.reference,
                p.current,
                alternative="less",
                margin=cfg.margin,
                n_resamples=n_resamples,
                confidence_level=cfg.confidence_level,
                alpha=alpha,
                power=cfg.power,
                rng=np.random.default_rng(_rng_seed(monitor.seed, name)),
            )
    decidable = sorted(n for n in results if base[n].decidable)
    adjusted = dict(
        zip(
            decidable,
            adjust_pvalues([results[n].pvalue for n in decidable], method="holm")
            if decidable
            else [],
            strict=True,
        )
    )
    active = dict(decay.active)
    out = dict(base)
    for name, r in results.items():
        ci = r.confidence_interval
        p_adj = adjusted.get(name)
        significant = p_adj is not None and p_adj <= alpha
        recovered = ci.low is not None and math.isfinite(ci.low) and ci.low > -cfg.margin
        if significant:
            active.setdefault(name, at)
        elif name in active and recovered and base[name].decidable:
            del active[name]
        out[name] = replace(
            base[name],
            significant=bool(significant),
            recovered=bool(recovered and not significant and name in decay.active),
            pvalue=r.pvalue,
            pvalue_adjusted=None if p_adj is None else float(p_adj),
            ci_low=ci.low,
            ci_high=ci.high,
            confidence_level=r.confidence_level,
            effect_size=r.effect_size,
            mde=r.mde,
            ttest_pvalue=r.ttest.pvalue,
            sign_test_pvalue=r.sign_test_pvalue,
            wilcoxon_pvalue=r.wilcoxon_pvalue,
            n_resamples=r.permutation.n_resamples,
            exact=r.permutation.exact,
            flat=bool(ci.low >= -cfg.margin and ci.high <= cfg.margin),
        )
    for name in list(out):
        if name in active:
            out[name] = replace(out[name], decay=True, decay_since=_iso(active[name]))
    for name, since_at in active.items():  # raised segments absent from this look stay raised
        if name not in out and name in decay.reports:
            out[name] = replace(decay.reports[name], new_look=False, decay_since=_iso(since_at))
    ref_start, ref_end = decay.reference_start, decay.reference_end
    if active and ref_start is None:
        ref_start, ref_end = data.outcome_reference_start, data.outcome_reference_end
    elif not active:
        ref_start = ref_end = None
    looks = (*tuple(t for t in decay.looks if at - t < period)[-_MAX_LOOKS_KEPT:], at)
    return out, DecayTrack(
        looks=looks,
        runs_end=data.runs_end,
        active=active,
        reference_start=ref_start,
        reference_end=ref_end,
        reports=out,
    )


# --------------------------------------------------------------------------- reasons


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _outcome_reason(monitor: MonitorConfig, name: str, r: OutcomeReport) -> str:
    where = f"segment {name!r}: " if name else ""
    ci = (
        f"{r.confidence_level or 0:.0%} CI [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"
        if r.ci_low is not None
        else "no interval"
    )
    ref = f"reference runs [{r.reference_start}, {r.reference_end})"
    runs = f"{r.runs} run(s) landed [{r.runs_start}, {r.runs_end}]"
    stem = (
        f"mean outcome difference {_fmt(r.mean_difference, '+.4f')} over {r.n_pairs} pairs "
        f"({r.wins} wins, {r.losses} losses, {r.ties} ties), {ci}, "
        f"p={_fmt(r.pvalue_adjusted if r.decidable else r.pvalue, '.3g')} "
        f"(look alpha {_fmt(r.alpha, '.2g')}, margin {monitor.decay.margin:g}); {runs} vs {ref}"
    )
    if not r.new_look and r.looked_at:
        stem += f"; carried from the look at {r.looked_at}"
    if r.decay:
        head = f"model decay since {r.decay_since}" if not r.significant else "model decay"
        if not r.significant and r.new_look:
            head += " (not yet recovered: the interval's lower end is not above -margin)"
        return f"{where}{head}: {stem}"
    if not r.decidable:
        return (
            f"{where}undecidable (too few pairs for the look alpha: 2^-n must be <= alpha and "
            f"n >= min_pairs {monitor.decay.min_pairs}; {r.only_reference} queries only in the "
            f"reference, {r.only_current} only in the current runs); descriptive: {stem}"
        )
    if r.recovered:
        return f"{where}decay cleared (recovered: interval above -margin): {stem}"
    if r.flat:
        return f"{where}outcome flat within +-{monitor.decay.margin:g}: {stem}"
    return f"{where}no evidence of decay (not proof of none: MDE {_fmt(r.mde)}): {stem}"


def _input_reason(
    monitor: MonitorConfig, data: CheckData, name: str, ir: InputReport, plan: AlarmPlan
) -> str:
    where = f"segment {name!r}: " if name else ""
    cfg = monitor.drift
    if not ir.decidable:
        newest = _iso(data.newest_score) or "never"
        return (
            f"{where}undecidable drift: {ir.n_current} scores in the current window "
            f"[{_iso(data.current_start)}, {_iso(data.current_end)}) (need "
            f"{cfg.min_current_samples}), {ir.n_reference} in the reference (need "
            f"{cfg.min_reference_samples}); newest score at {newest}"
        )
    ref_txt = f"the reference [{_iso(data.reference_start)}, {_iso(data.reference_end)})"
    if plan.seasonal_period is not None:
        ref_txt += f" at the same {'hour of day' if plan.phases <= 24 else 'hour of week'}"
    block = (
        f"block [{ir.block_start}, {ir.block_end}) of {ir.block_samples} scores: PSI "
        f"{_fmt(ir.block_psi)} vs {ref_txt}, adjusted p={_fmt(ir.block_pvalue_adjusted, '.3g')}"
    )
    if ir.anchor_psi is not None:
        block += (
            f"; PSI {_fmt(ir.anchor_psi)} vs the anchor [{ir.anchor_start}, {ir.anchor_end}), "
            f"adjusted p={_fmt(ir.anchor_pvalue_adjusted, '.3g')}"
        )
    if not ir.evidence:
        block = f"no new evidence block ({ir.block_samples} scores since {ir.block_start})"
    cusum = f"CUSUM {ir.cusum:.2f}"
    if ir.anchor_cusum is not None:
        cusum += f" (anchor {ir.anchor_cusum:.2f})"
    cusum += f" / h {plan.drift_h:.2f}, immediate z > {plan.drift_z:.2f}"
    window = (
        f"window PSI {_fmt(ir.psi)} (noise floor {_fmt(ir.psi_noise_floor)}, tolerance "
        f"{cfg.tolerance:g}), KS D {_fmt(ir.ks_statistic)}, zero-score rate "
        f"{_fmt(ir.zero_rate_reference, '.1%')} -> {_fmt(ir.zero_rate_current, '.1%')}"
    )
    stem = f"{block}; {cusum}; {window}"
    track = "the anchor" if ir.alarm_track == "anchor" else "the reference"
    if ir.alarm == "immediate":
        return f"{where}data drift (abrupt, against {track}): {stem}"
    if ir.alarm == "cusum":
        return f"{where}data drift (sustained, CUSUM against {track} crossed h): {stem}"
    if ir.drift:
        which = " and ".join(
            "the anchor" if t == "anchor" else "the reference" for t in ir.drift_tracks
        )
        return (
            f"{where}data drift since {ir.drift_since} against {which} (clears after "
            f"{cfg.clear_after} blocks with debiased PSI below "
            f"{cfg.clear_share * cfg.tolerance:g}): {stem}"
        )
    return f"{where}no input drift alarm: {stem}"


def _reasons(
    monitor: MonitorConfig,
    data: CheckData,
    inputs: Mapping[str, InputReport],
    outcomes: Mapping[str, OutcomeReport],
    plan: AlarmPlan,
    stale: Sequence[str],
) -> list[str]:
    """Reasons, the deciding ones first: decays, drifts, then the rest, undecidable last."""
    out: list[tuple[int, str]] = [(0, s) for s in stale]
    for name in sorted(outcomes):
        r = outcomes[name]
        rank = 1 if r.decay else (5 if not r.decidable else 3)
        out.append((rank, _outcome_reason(monitor, name, r)))
        if r.coverage < monitor.decay.min_coverage and r.new_look:
            where = f"segment {name!r}: " if name else ""
            out.append(
                (
                    4,
                    f"{where}pairing coverage {r.coverage:.0%} is below "
                    f"{monitor.decay.min_coverage:.0%}: the golden set changed "
                    f"({r.only_reference} reference-only, {r.only_current} current-only "
                    f"queries)",
                )
            )
    for name in sorted(inputs):
        ir = inputs[name]
        rank = 2 if ir.drift else (5 if not ir.decidable else 3)
        out.append((rank, _input_reason(monitor, data, name, ir, plan)))
        if ir.volume_ratio is not None and ir.volume_ratio < 0.5:
            where = f"segment {name!r}: " if name else ""
            out.append(
                (
                    4,
                    f"{where}volume collapse: {ir.n_current} scores in the current window, "
                    f"{ir.volume_ratio:.0%} of what the reference had at the same phases",
                )
            )
    return [text for _, text in sorted(out, key=lambda x: x[0])]


# --------------------------------------------------------------------------- evaluate


def _stale(monitor: MonitorConfig, at: datetime, data: CheckData) -> list[str]:
    out = []
    for feed, newest, limit in (
        ("score", data.newest_score, monitor.score_lag_limit),
        ("outcome", data.newest_outcome, monitor.outcome_lag_limit),
    ):
        if newest is None or at - newest > limit:
            since = _iso(newest) if newest is not None else "before the windows read"
            out.append(f"{feed} feed stale since {since} (max_lag {limit})")
    return out


def evaluate(
    monitor: MonitorConfig,
    at: datetime,
    data: CheckData,
    state: MonitorState,
    *,
    sequential: bool = True,
) -> tuple[Verdict, MonitorState]:
    """Decide one check; returns the verdict and the state to carry to the next check.

    With ``sequential=False`` the previous state is ignored (a slot decided without its
    history); the returned state is then not meant to be stored.
    """
    if len(data.segments) > monitor.max_segments:
        raise ValueError(
            f"{len(data.segments)} segments exceed max_segments={monitor.max_segments}"
        )
    plan = alarm_plan(monitor, segments=max(1, len(data.segments)))
    prior = state if sequential else MonitorState()
    inputs: dict[str, InputReport] = {}
    drift: dict[str, SegmentDrift] = dict(prior.drift)  # segments absent now keep their state
    block_p: dict[tuple[str, str], float] = {}
    for name, seg in data.segments.items():
        report, seg_state, pvalues = _evaluate_input(
            monitor, at, data, seg, prior.drift.get(name, SegmentDrift()), plan
        )
        inputs[name], drift[name] = report, seg_state
        for track, p in pvalues.items():
            block_p[(name, track)] = p
    _settle_drift(monitor, at, inputs, drift, block_p, plan)
    outcomes, decay_track = _evaluate_outcomes(monitor, at, data, prior.decay, plan)
    stale = _stale(monitor, at, data)
    score_stale = any(s.startswith("score") for s in stale)

    if any(r.decay for r in outcomes.values()):
        verdict_state = "model_decay"
    elif any(r.drift for r in inputs.values()) and not score_stale:
        verdict_state = "data_drift"
    elif (
        stale
        or not data.segments
        or not any(r.decidable for r in inputs.values())
        or not any(r.decidable for r in outcomes.values())
    ):
        verdict_state = "insufficient_data"
    else:
        verdict_state = "ok"
    reasons = _reasons(monitor, data, inputs, outcomes, plan, stale)
    if not data.segments:
        reasons.insert(
            0,
            f"no data at all in [{_iso(data.reference_start)}, {_iso(data.current_end)}); newest "
            f"score {_iso(data.newest_score) or 'never'}, newest outcome "
            f"{_iso(data.newest_outcome) or 'never'}",
        )
    if not outcomes and data.segments:
        reasons.append("no evaluation run looked at yet: decay undecided")
    verdict = Verdict(
        monitor=monitor.name,
        at=at,
        state=verdict_state,
        reasons=tuple(reasons),
        inputs=inputs,
        outcomes=outcomes,
        plan=plan,
        windows={
            "reference_start": _iso(data.reference_start),
            "reference_end": _iso(data.reference_end),
            "current_start": _iso(data.current_start),
            "current_end": _iso(data.current_end),
            "outcome_reference_start": _iso(data.outcome_reference_start),
            "outcome_reference_end": _iso(data.outcome_reference_end),
            "runs_start": _iso(data.runs_start),
            "runs_end": _iso(data.runs_end),
        },
        newest_score=data.newest_score,
        newest_outcome=data.newest_outcome,
        sequential=sequential,
        stale=tuple(stale),
    )
    new_state = MonitorState(
        drift=drift,
        decay=decay_track,
        state=prior.state,
        state_since=prior.state_since,
        last_at=at,
        first_at=prior.first_at or at,
        last_run=prior.last_run,
        last_success=prior.last_success,
        before_last=replace(prior, before_last=None),
    )
    return verdict, new_state
