"""Verdicts: from a check's data and the sequential state to a state with reasons and numbers.

Pure code (numpy and ``monitor.stats``; no I/O, no clock). The rules, with the numbers in the
README's "How the alarms hold their budget":

* **Input drift** (per segment). Each check compares the current window's top-1 scores with the
  reference through PSI on frozen reference-quantile bins, KS and a zero-score rate test; those are
  reported. The *alarm* uses evidence from non-overlapping blocks: the scores that arrived since the
  last block used (at least ``min_block_samples``). A block's PSI p-value under the tolerance null
  (true PSI <= ``tolerance``) becomes ``z = clip(isf(p), -4, 8)`` and feeds a CUSUM
  ``S = max(0, S + z - k)``; an alarm is raised when ``S > h`` (``h`` sets the in-control run length
  to ``checks / -ln(1 - share * budget)``) or immediately when the block's Holm-adjusted p-value is
  below ``(1 - share) * budget / checks`` (abrupt shifts). A raised drift stays until the block's
  debiased PSI is below ``tolerance`` for ``clear_after`` consecutive blocks.
* **Model decay** (per segment). A one-sided sign-flip test of ``mean(current - reference) <
  -margin`` on per-query pairs decides, at ``alpha = budget / looks`` per look (Bonferroni over the
  looks in the period, valid under any dependence between looks), Holm-adjusted over segments. A new
  look happens only when the paired data changed and at least ``period / looks`` passed since the
  last one; in between the last look's result is carried. A golden set too small ever to reach that
  alpha (``2**-n > alpha``) is insufficient data, not ``ok``.
* **State**: ``model_decay`` if decay is established (whatever the input did); else ``data_drift``
  if a drift alarm is active; else ``insufficient_data`` if either side could not decide; else
  ``ok``. ``error`` is set by the job runner when a run fails.
"""

from __future__ import annotations

import functools
import hashlib
import math
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from scipy.stats import norm

from monitor.config import MonitorConfig
from monitor.stats import (
    BaselinePositions,
    DriftBaseline,
    adjust_pvalues,
    arl_for_budget,
    build_baseline,
    cusum_step,
    cusum_threshold,
    drift_tests,
    paired_test,
    proportion_test_counts,
    psi,
    z_from_pvalue,
)

__all__ = [
    "STATES",
    "AlarmPlan",
    "CheckData",
    "DecayTrack",
    "DriftTrack",
    "InputReport",
    "MonitorState",
    "OutcomeReport",
    "Pairs",
    "SegmentData",
    "Verdict",
    "alarm_plan",
    "error_verdict",
    "evaluate",
]

STATES = ("ok", "data_drift", "model_decay", "insufficient_data", "error")
_NS = 1_000_000_000


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


# --------------------------------------------------------------------------- alarm plan


@dataclass(frozen=True, slots=True)
class AlarmPlan:
    """The per-check thresholds that hold a monitor's false-alarm budget for its schedule.

    ``checks`` slots per period; drift: CUSUM ``h`` for an in-control run length of ``drift_arl0``
    evidence blocks (times the number of segments, Bonferroni) and the immediate threshold
    ``drift_alpha`` (``drift_z``); decay: ``decay_alpha = budget / decay_looks`` per look, looks at
    least ``look_spacing`` apart, ``n_resamples >= 20 / decay_alpha``.
    """

    checks: int
    segments: int
    drift_arl0: float
    drift_h: float
    drift_alpha: float
    drift_z: float
    decay_looks: int
    decay_alpha: float
    look_spacing: timedelta
    n_resamples: int
    min_pairs_for_alpha: int


@functools.lru_cache(maxsize=256)
def _cusum_h(arl0: float, k: float) -> float:
    """``cusum_threshold`` is a Markov-chain root search (seconds): cache it per (ARL0, k)."""
    return cusum_threshold(arl0, k=k)


def alarm_plan(monitor: MonitorConfig, segments: int = 1) -> AlarmPlan:
    """Thresholds for ``monitor`` with ``segments`` compared segments (see ``AlarmPlan``)."""
    budget = monitor.budget
    checks = monitor.schedule.checks_per(budget.period)
    share = monitor.drift.cusum_share
    arl0 = arl_for_budget(checks, share * budget.drift) * segments if share > 0 else math.inf
    h = _cusum_h(arl0, monitor.drift.cusum_k) if math.isfinite(arl0) else math.inf
    drift_alpha = (1.0 - share) * budget.drift / checks
    drift_z = float(norm.isf(drift_alpha)) if drift_alpha > 0 else math.inf
    looks = monitor.decay.looks or min(checks, 30)
    decay_alpha = budget.decay / looks
    n_resamples = monitor.decay.n_resamples or max(9999, math.ceil(20.0 / decay_alpha))
    return AlarmPlan(
        checks=checks,
        segments=segments,
        drift_arl0=arl0,
        drift_h=h,
        drift_alpha=drift_alpha,
        drift_z=drift_z,
        decay_looks=looks,
        decay_alpha=decay_alpha,
        look_spacing=budget.period / looks,
        n_resamples=n_resamples,
        min_pairs_for_alpha=math.ceil(math.log2(1.0 / decay_alpha)),
    )


# --------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class DriftTrack:
    """Sequential drift state of one segment: CUSUM, end of the last evidence block, alarm."""

    cusum: float = 0.0
    evidence_end: datetime | None = None
    active: bool = False
    active_since: datetime | None = None
    quiet: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "cusum": self.cusum,
            "evidence_end": _iso(self.evidence_end),
            "active": self.active,
            "active_since": _iso(self.active_since),
            "quiet": self.quiet,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DriftTrack:
        return cls(
            cusum=float(d.get("cusum", 0.0)),
            evidence_end=_parse_iso(d.get("evidence_end")),
            active=bool(d.get("active", False)),
            active_since=_parse_iso(d.get("active_since")),
            quiet=int(d.get("quiet", 0)),
        )


@dataclass(frozen=True, slots=True)
class DecayTrack:
    """Sequential decay state: the last look, its data fingerprint and its per-segment reports."""

    last_look_at: datetime | None = None
    fingerprint: str | None = None
    reports: Mapping[str, OutcomeReport] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "last_look_at": _iso(self.last_look_at),
            "fingerprint": self.fingerprint,
            "reports": {k: v.to_dict() for k, v in self.reports.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DecayTrack:
        return cls(
            last_look_at=_parse_iso(d.get("last_look_at")),
            fingerprint=d.get("fingerprint"),
            reports={k: OutcomeReport.from_dict(v) for k, v in d.get("reports", {}).items()},
        )


_TRACK_KEYS = {"cusum", "evidence_end", "active", "active_since", "quiet"}
_DECAY_KEYS = {"last_look_at", "fingerprint", "reports"}


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
    if d.get("version") != 1:
        raise ValueError(f"unknown state version {d.get('version')!r:.40}; expected 1")
    for key in ("state_since", "last_at", "last_run", "last_success"):
        _check_time(d, key, "")
    state = d.get("state")
    _need(state is None or state in STATES, "state", f"null or one of {STATES}", state)
    fp = d.get("fingerprint")
    _need(fp is None or isinstance(fp, str), "fingerprint", "null or a string", fp)
    drift = d.get("drift", {})
    _need(isinstance(drift, Mapping), "drift", "an object of segments", drift)
    for segment, track in drift.items():
        where = f"drift[{segment!r:.40}]."
        _need(isinstance(track, Mapping), where[:-1], "an object", track)
        unknown = set(track) - _TRACK_KEYS
        _need(not unknown, where[:-1], f"an object with keys {sorted(_TRACK_KEYS)}", unknown)
        _check_number(track.get("cusum", 0.0), f"{where}cusum")
        _need(track.get("cusum", 0.0) >= 0, f"{where}cusum", "a number >= 0", track.get("cusum"))
        quiet = track.get("quiet", 0)
        _need(
            isinstance(quiet, int) and not isinstance(quiet, bool) and quiet >= 0,
            f"{where}quiet",
            "an integer >= 0",
            quiet,
        )
        active = track.get("active", False)
        _need(isinstance(active, bool), f"{where}active", "true or false", active)
        for key in ("evidence_end", "active_since"):
            _check_time(track, key, where)
    decay = d.get("decay", {})
    _need(isinstance(decay, Mapping), "decay", "an object", decay)
    unknown = set(decay) - _DECAY_KEYS
    _need(not unknown, "decay", f"an object with keys {sorted(_DECAY_KEYS)}", unknown)
    _check_time(decay, "last_look_at", "decay.")
    dfp = decay.get("fingerprint")
    _need(dfp is None or isinstance(dfp, str), "decay.fingerprint", "null or a string", dfp)
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
    sets it); a state file written under other settings is not resumed.
    """

    drift: Mapping[str, DriftTrack] = field(default_factory=dict)
    decay: DecayTrack = field(default_factory=DecayTrack)
    state: str | None = None
    state_since: datetime | None = None
    last_at: datetime | None = None
    last_run: datetime | None = None
    last_success: datetime | None = None
    fingerprint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The persisted JSON document (version 1); ``from_dict`` reads it back."""
        return {
            "version": 1,
            "drift": {k: v.to_dict() for k, v in self.drift.items()},
            "decay": self.decay.to_dict(),
            "state": self.state,
            "state_since": _iso(self.state_since),
            "last_at": _iso(self.last_at),
            "last_run": _iso(self.last_run),
            "last_success": _iso(self.last_success),
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MonitorState:
        """Read a persisted document; ``ValueError`` naming the first bad field when its shape,
        a type or a number (non-finite, negative CUSUM) is wrong."""
        _check_state_doc(d)
        return cls(
            drift={k: DriftTrack.from_dict(v) for k, v in d.get("drift", {}).items()},
            decay=DecayTrack.from_dict(d.get("decay", {})),
            state=d.get("state"),
            state_since=_parse_iso(d.get("state_since")),
            last_at=_parse_iso(d.get("last_at")),
            last_run=_parse_iso(d.get("last_run")),
            last_success=_parse_iso(d.get("last_success")),
            fingerprint=d.get("fingerprint"),
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
    """One segment's data for a check. ``current_timestamps`` (int64 ns) align with ``current``.

    ``positions`` (optional, only with ``baseline``): ``current`` located in ``baseline``,
    precomputed by a reader that serves many windows against one frozen baseline (the backtest);
    the drift numbers are identical with or without it.
    """

    reference: np.ndarray
    current: np.ndarray
    current_timestamps: np.ndarray
    pairs: Pairs
    baseline: DriftBaseline | None = None
    positions: BaselinePositions | None = None


@dataclass(frozen=True, slots=True)
class CheckData:
    """What the job runner read for one check: windows, per-segment data, freshness."""

    current_start: datetime
    current_end: datetime
    reference_start: datetime
    reference_end: datetime
    segments: Mapping[str, SegmentData]
    newest_score: datetime | None = None
    newest_outcome: datetime | None = None
    reference_outcome_queries: int = 0
    current_outcome_queries: int = 0


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True, slots=True)
class InputReport:
    """Input drift numbers for one segment (the JSON ``input`` object)."""

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
    evidence: bool = False
    block_start: str | None = None
    block_samples: int = 0
    block_psi: float | None = None
    block_pvalue: float | None = None
    block_pvalue_adjusted: float | None = None
    z: float | None = None
    cusum: float = 0.0
    cusum_threshold: float | None = None
    z_threshold: float | None = None
    alarm: str | None = None
    drift_since: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (_finite(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class OutcomeReport:
    """Paired outcome numbers for one segment (the JSON ``outcome`` object)."""

    n_pairs: int
    only_reference: int
    only_current: int
    coverage: float
    decidable: bool
    decay: bool = False
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
            },
            "alarm_plan": None
            if plan is None
            else {
                k: (_finite(v) if isinstance(v, float) else v)
                for k, v in asdict(plan).items()
                if k != "look_spacing"
            }
            | {"look_spacing_seconds": plan.look_spacing.total_seconds()},
            "sequential": self.sequential,
        }


def error_verdict(monitor: str, at: datetime, message: str) -> Verdict:
    """The verdict of a run that failed (unreadable source, bad schema, ...)."""
    return Verdict(monitor=monitor, at=at, state="error", reasons=(message,), error=message)


# --------------------------------------------------------------------------- evaluation


def _rng_seed(seed: int, segment: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, zlib.crc32(segment.encode("utf-8"))])


def _fingerprint(segments: Mapping[str, SegmentData]) -> str:
    h = hashlib.sha256()
    for name in sorted(segments):
        p = segments[name].pairs
        h.update(name.encode("utf-8"))
        h.update(np.ascontiguousarray(p.reference, dtype=np.float64).tobytes())
        h.update(np.ascontiguousarray(p.current, dtype=np.float64).tobytes())
    return h.hexdigest()[:24]


def _evaluate_input(
    monitor: MonitorConfig,
    at: datetime,
    data: CheckData,
    seg: SegmentData,
    track: DriftTrack,
    plan: AlarmPlan,
) -> tuple[InputReport, DriftTrack, float | None]:
    """Per-window drift numbers and the evidence block's p-value (None when no evidence)."""
    cfg = monitor.drift
    n_ref, n_cur = int(seg.reference.size), int(seg.current.size)
    if n_ref < cfg.min_reference_samples or n_cur < cfg.min_current_samples:
        return (
            InputReport(
                n_reference=n_ref,
                n_current=n_cur,
                decidable=False,
                cusum=track.cusum,
                drift=track.active,
                drift_since=_iso(track.active_since),
            ),
            track,
            None,
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

    block_start = data.current_start
    if track.evidence_end is not None and track.evidence_end > block_start:
        block_start = track.evidence_end
    start_ns = int((block_start - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))
    start_ns *= 1000
    block = seg.current[seg.current_timestamps >= start_ns]
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
        block_start=_iso(block_start),
        block_samples=int(block.size),
        cusum=track.cusum,
        cusum_threshold=plan.drift_h,
        z_threshold=plan.drift_z,
        drift=track.active,
        drift_since=_iso(track.active_since),
    )
    if block.size < cfg.min_block_samples:
        return report, track, None
    bres = psi(baseline, block, tolerance=cfg.tolerance, smoothing=cfg.smoothing)
    z = z_from_pvalue(bres.pvalue)
    new_cusum = cusum_step(track.cusum, z, k=cfg.cusum_k)
    report = replace(
        report,
        evidence=True,
        block_psi=bres.statistic,
        block_pvalue=bres.pvalue,
        z=z,
        cusum=new_cusum,
    )
    quiet = track.quiet + 1 if bres.debiased < cfg.tolerance else 0
    new_track = replace(track, cusum=new_cusum, evidence_end=at, quiet=quiet)
    return report, new_track, bres.pvalue


def _settle_drift(
    monitor: MonitorConfig,
    at: datetime,
    reports: dict[str, InputReport],
    tracks: dict[str, DriftTrack],
    block_p: dict[str, float],
    plan: AlarmPlan,
) -> None:
    """Raise or clear alarms once every segment's evidence is in (Holm over segments)."""
    names = sorted(block_p)
    adjusted = (
        dict(zip(names, adjust_pvalues([block_p[n] for n in names], method="holm"), strict=True))
        if names
        else {}
    )
    for name, report in list(reports.items()):
        track = tracks[name]
        alarm: str | None = None
        if name in adjusted:
            if adjusted[name] <= plan.drift_alpha:
                alarm = "immediate"
            elif track.cusum > plan.drift_h:
                alarm = "cusum"
        if alarm is not None:
            track = replace(
                track, cusum=0.0, active=True, active_since=track.active_since or at, quiet=0
            )
        elif track.active and track.quiet >= monitor.drift.clear_after:
            track = replace(track, active=False, active_since=None, quiet=0)
        elif not track.active:
            track = replace(track, quiet=0)
        tracks[name] = track
        reports[name] = replace(
            report,
            alarm=alarm,
            block_pvalue_adjusted=float(adjusted[name]) if name in adjusted else None,
            drift=track.active,
            drift_since=_iso(track.active_since),
        )


def _evaluate_outcomes(
    monitor: MonitorConfig,
    at: datetime,
    data: CheckData,
    decay: DecayTrack,
    plan: AlarmPlan,
) -> tuple[dict[str, OutcomeReport], DecayTrack]:
    cfg = monitor.decay
    fingerprint = _fingerprint(data.segments)
    due = decay.last_look_at is None or at - decay.last_look_at >= plan.look_spacing
    changed = fingerprint != decay.fingerprint
    needed = max(cfg.min_pairs, plan.min_pairs_for_alpha)
    base: dict[str, OutcomeReport] = {}
    decidable: list[str] = []
    for name, seg in data.segments.items():
        p = seg.pairs
        base[name] = OutcomeReport(
            n_pairs=p.n,
            only_reference=p.only_reference,
            only_current=p.only_current,
            coverage=p.coverage,
            decidable=p.n >= needed,
            alpha=plan.decay_alpha,
            margin=cfg.margin,
        )
        if p.n >= needed:
            decidable.append(name)
    if not (due and changed) and decay.reports:
        carried = {}
        for name, report in base.items():
            old = decay.reports.get(name)
            carried[name] = (
                replace(old, new_look=False) if old is not None and report.decidable else report
            )
        return carried, decay
    if not decidable:
        return base, decay
    results = {}
    for name in decidable:
        seg = data.segments[name]
        results[name] = paired_test(
            seg.pairs.reference,
            seg.pairs.current,
            alternative="less",
            margin=cfg.margin,
            n_resamples=plan.n_resamples,
            confidence_level=cfg.confidence_level,
            alpha=plan.decay_alpha,
            power=cfg.power,
            rng=np.random.default_rng(_rng_seed(monitor.seed, name)),
        )
    names = sorted(results)
    adjusted = adjust_pvalues([results[n].pvalue for n in names], method="holm")
    out = dict(base)
    for name, p_adj in zip(names, adjusted, strict=True):
        r = results[name]
        ci = r.confidence_interval
        out[name] = replace(
            base[name],
            decay=bool(p_adj <= plan.decay_alpha),
            mean_difference=r.mean_difference,
            median_difference=r.median_difference,
            sd_difference=r.sd_difference,
            pvalue=r.pvalue,
            pvalue_adjusted=float(p_adj),
            ci_low=ci.low,
            ci_high=ci.high,
            confidence_level=r.confidence_level,
            effect_size=r.effect_size,
            wins=r.wins,
            losses=r.losses,
            ties=r.ties,
            mde=r.mde,
            ttest_pvalue=r.ttest.pvalue,
            sign_test_pvalue=r.sign_test_pvalue,
            wilcoxon_pvalue=r.wilcoxon_pvalue,
            n_resamples=r.permutation.n_resamples,
            exact=r.permutation.exact,
            flat=bool(ci.low >= -cfg.margin and ci.high <= cfg.margin),
            looked_at=_iso(at),
            new_look=True,
        )
    return out, DecayTrack(last_look_at=at, fingerprint=fingerprint, reports=out)


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _reasons(
    monitor: MonitorConfig,
    data: CheckData,
    inputs: Mapping[str, InputReport],
    outcomes: Mapping[str, OutcomeReport],
    plan: AlarmPlan,
) -> list[str]:
    out: list[str] = []
    cfg = monitor.drift
    for name in sorted(outcomes):
        r = outcomes[name]
        where = f"segment {name!r}: " if name else ""
        needed = max(monitor.decay.min_pairs, plan.min_pairs_for_alpha)
        if not r.decidable:
            out.append(
                f"{where}too few paired queries to test decay: {r.n_pairs} pairs, need {needed} "
                f"(alpha per look {plan.decay_alpha:.2g} needs 2^-n <= alpha and min_pairs "
                f"{monitor.decay.min_pairs}); {r.only_reference} queries only in the reference, "
                f"{r.only_current} only in the current window"
            )
            continue
        ci = f"{r.confidence_level or 0:.0%} CI [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"
        stem = (
            f"{where}mean outcome difference {_fmt(r.mean_difference, '+.4f')} over "
            f"{r.n_pairs} pairs, {ci}, p={_fmt(r.pvalue_adjusted, '.3g')} "
            f"(alpha per look {plan.decay_alpha:.2g}, margin {monitor.decay.margin:g})"
        )
        if r.decay:
            out.append(f"model decay: {stem}")
        elif r.flat:
            out.append(f"outcome flat within +-{monitor.decay.margin:g}: {stem}")
        else:
            out.append(f"no evidence of decay (not proof of none: MDE {_fmt(r.mde)}): {stem}")
        if r.coverage < monitor.decay.min_coverage:
            out.append(
                f"{where}pairing coverage {r.coverage:.0%} is below "
                f"{monitor.decay.min_coverage:.0%}: the golden set changed "
                f"({r.only_reference} reference-only, "
                f"{r.only_current} current-only queries)"
            )
        if not r.new_look and r.looked_at:
            out.append(f"{where}decay result carried from the look at {r.looked_at}")
    for name in sorted(inputs):
        ir = inputs[name]
        where = f"segment {name!r}: " if name else ""
        if not ir.decidable:
            newest = _iso(data.newest_score) or "never"
            out.append(
                f"{where}too few scores to test drift: {ir.n_current} in the current window "
                f"[{_iso(data.current_start)}, {_iso(data.current_end)}) (need "
                f"{cfg.min_current_samples}), {ir.n_reference} in the reference (need "
                f"{cfg.min_reference_samples}); newest score at {newest}"
            )
            continue
        stem = (
            f"{where}PSI {_fmt(ir.psi)} (noise floor {_fmt(ir.psi_noise_floor)}, tolerance "
            f"{cfg.tolerance:g}), KS D {_fmt(ir.ks_statistic)}, zero-score rate "
            f"{_fmt(ir.zero_rate_reference, '.1%')} -> {_fmt(ir.zero_rate_current, '.1%')}, "
            f"CUSUM {ir.cusum:.2f}/{plan.drift_h:.2f}"
        )
        if ir.alarm == "immediate":
            out.append(
                f"data drift (abrupt): {stem}, block p={_fmt(ir.block_pvalue_adjusted, '.3g')}"
            )
        elif ir.alarm == "cusum":
            out.append(f"data drift (sustained, CUSUM crossed): {stem}")
        elif ir.drift:
            out.append(f"data drift since {ir.drift_since} (not yet cleared): {stem}")
        else:
            out.append(f"no input drift alarm: {stem}")
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

    With ``sequential=False`` the previous state is ignored (a replay of a past slot without its
    history); the returned state is then not meant to be stored.
    """
    if len(data.segments) > monitor.max_segments:
        raise ValueError(
            f"{len(data.segments)} segments exceed max_segments={monitor.max_segments}"
        )
    plan = alarm_plan(monitor, segments=max(1, len(data.segments)))
    prior = state if sequential else MonitorState()
    inputs: dict[str, InputReport] = {}
    tracks: dict[str, DriftTrack] = dict(prior.drift)  # segments absent now keep their state
    block_p: dict[str, float] = {}
    for name, seg in data.segments.items():
        report, track, p = _evaluate_input(
            monitor, at, data, seg, prior.drift.get(name, DriftTrack()), plan
        )
        inputs[name], tracks[name] = report, track
        if p is not None:
            block_p[name] = p
    _settle_drift(monitor, at, inputs, tracks, block_p, plan)
    outcomes, decay_track = _evaluate_outcomes(monitor, at, data, prior.decay, plan)

    if any(r.decay for r in outcomes.values()):
        verdict_state = "model_decay"
    elif any(r.drift for r in inputs.values()):
        verdict_state = "data_drift"
    elif (
        not data.segments
        or not all(r.decidable for r in inputs.values())
        or not all(r.decidable for r in outcomes.values())
    ):
        verdict_state = "insufficient_data"
    else:
        verdict_state = "ok"
    reasons = _reasons(monitor, data, inputs, outcomes, plan)
    if not data.segments:
        reasons.insert(
            0,
            f"no data at all in [{_iso(data.reference_start)}, {_iso(data.current_end)}); newest "
            f"score {_iso(data.newest_score) or 'never'}, newest outcome "
            f"{_iso(data.newest_outcome) or 'never'}",
        )
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
        },
        newest_score=data.newest_score,
        newest_outcome=data.newest_outcome,
        sequential=sequential,
    )
    new_state = MonitorState(
        drift=tracks,
        decay=decay_track,
        state=prior.state,
        state_since=prior.state_since,
        last_at=at,
        last_run=prior.last_run,
        last_success=prior.last_success,
    )
    return verdict, new_state
