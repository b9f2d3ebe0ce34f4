"""Per-segment reports and the verdict (the ``monitor check --json`` contract)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from monitor.redact import redact
from monitor.verdict._common import _finite, _iso
from monitor.verdict.plan import AlarmPlan


@dataclass(frozen=True, slots=True)
class InputReport:
    """Input drift numbers for one segment (the JSON ``input`` object).

    ``psi`` ... ``out_of_range_rate``: the current window against the reference. ``block_*``: the
    newest evidence block ``[block_start, block_end)`` against the reference of the same phases
    (track ``reference``) and against the anchor (``anchor_*``); ``alarm`` says which rule fired
    (``immediate`` / ``cusum``) on which track (``alarm_track``); while a track is raised,
    ``clear_cusum`` / ``anchor_clear_cusum`` is its clearing CUSUM, which must pass
    ``clear_threshold`` (with ``clear_after`` blocks in the band) to clear it. Through
    summaries on a grid that does not resolve D: ``ks_statistic`` is the bracket's D_lo and
    ``ks_pvalue`` its p, ``ks_statistic_high`` D_hi and ``ks_pvalue_low`` p(D_hi) (None when
    exact); ``grid_points`` the frozen grid's size (None: the windows were read whole).
    ``late_scores``: scores found this check in blocks tested before (a writer later than
    ``drift.settle``: no block tests them); they were more than ``late_scores_lag_min`` and at
    most ``late_scores_lag_max`` seconds behind their time (None: none found).
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
    ks_statistic_high: float | None = None
    ks_pvalue_low: float | None = None
    grid_points: int | None = None
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
    clear_cusum: float | None = None
    anchor_clear_cusum: float | None = None
    clear_threshold: float | None = None
    alarm: str | None = None
    alarm_track: str | None = None
    undecidable_reason: str | None = None
    drift_since: str | None = None
    drift_tracks: tuple[str, ...] = ()
    late_scores: int = 0
    late_scores_lag_min: float | None = None
    late_scores_lag_max: float | None = None

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

    ``decidable`` False: the numbers are descriptive only (too few pairs for the look's alpha,
    or ``undecidable_reason``: judgment holes). Judged runs: ``metric`` is the decision metric,
    ``metrics`` each reported metric's paired means (``reference``, ``current``,
    ``mean_difference``), ``judged_*`` the mean judged@k of both sides.
    ``decay`` is the raised state (it stays until ``recovered``); ``significant`` says whether
    this look's test rejected; ``test`` which permutation test decided ("sign-flip", or
    "run-label" when a key had several runs in a window).
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
    test: str | None = None
    flat: bool = False
    looked_at: str | None = None
    new_look: bool = False
    runs: int = 0
    runs_start: str | None = None
    runs_end: str | None = None
    late_rows: int = 0
    reference_start: str | None = None
    reference_end: str | None = None
    metric: str | None = None
    metrics: dict[str, dict[str, float | None]] | None = None
    judged_metric: str | None = None
    judged_reference: float | None = None
    judged_current: float | None = None
    judgment_holes: bool = False
    undecidable_reason: str | None = None
    calibration: dict[str, dict[str, Any] | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (_finite(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OutcomeReport:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})


def feed_stale(stale: Iterable[str], feed: str) -> bool:
    """Whether the staleness reasons ``stale`` (``Verdict.stale``: "<feed> feed stale since
    ...") name ``feed`` ("score" or "outcome")."""
    return any(r.startswith(f"{feed} feed stale") for r in stale)


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
    judgments: Mapping[str, Any] | None = None

    def feed_stale(self, feed: str) -> bool:
        """Whether the check found the ``feed`` ("score" or "outcome") stale."""
        return feed_stale(self.stale, feed)

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
            "judgments": None if self.judgments is None else dict(self.judgments),
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
    """The verdict of a run that failed (unreadable source, bad schema, ...); a password in
    the message (a source's URI, in an exception from the filesystem) is redacted."""
    message = redact(message)
    return Verdict(monitor=monitor, at=at, state="error", reasons=(message,), error=message)


# --------------------------------------------------------------------------- drift
