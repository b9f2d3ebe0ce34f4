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
  track clears only when (a) its last ``clear_after`` consecutive blocks had a debiased PSI
  against *that track's* reference below ``clear_share * tolerance`` (half, by default: a band
  between the two keeps a drift near the edge from flapping) and (b) its clearing CUSUM
  ``C = max(0, C - z - k)``, the alarm's recursion on the same z's run the other way, is above
  ``clear_threshold`` (in-control ARL = the checks in a budget period: a drift exactly at the
  tolerance, z ~ N(0, 1), is cleared falsely about once a period while raised, 1.3-1.35 times
  on blocks of 200-300 scores in ``bench/clearing.py``'s model; one past it, far less often).
  Without (b) a drift of 2.5 x the tolerance on 300 scores an hour cleared and re-raised in
  19 of 20 months (2-10 state changes). With ``tolerance = 0`` (a) alone clears: no block can
  show a PSI below 0. The anchor is refreshed after
  ``anchor_refresh`` only while no alarm is raised and the rolling reference is within half the
  tolerance of it.
* **Model decay** (per segment). A one-sided permutation test of ``mean(current - reference) <
  -margin`` on per-query pairs decides: sign flips of the pairs' differences, or, when a query
  has several runs in a window, the run-label test (``monitor.stats.runs``: a mean of skewed
  runs against one new run is not symmetric). The current side is the complete evaluation runs that
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

import math
from dataclasses import replace
from datetime import datetime
from typing import Any

from monitor.config import MonitorConfig
from monitor.schedule import format_duration
from monitor.verdict._common import STATES, TRACKS, _iso, percent
from monitor.verdict.data import CheckData, JudgedCheck, Pairs, SegmentData, check_coarse
from monitor.verdict.decay import _evaluate_outcomes, calibration_summary, too_few_pairs
from monitor.verdict.detail import CheckDetail, InputDetail, OutcomeDetail, describe
from monitor.verdict.drift import _evaluate_input, _settle_drift, _since, timestamp_cuts
from monitor.verdict.plan import AlarmPlan, alarm_plan, phase_counts, phase_of
from monitor.verdict.reasons import _reasons
from monitor.verdict.reports import (
    InputReport,
    OutcomeReport,
    Verdict,
    error_verdict,
    feed_stale,
)
from monitor.verdict.state import (
    MAX_SKIPPED,
    STALE_SOURCES,
    Anchor,
    DecayTrack,
    DriftTrack,
    MonitorState,
    SegmentDrift,
)

__all__ = [
    "STATES",
    "TRACKS",
    "AlarmPlan",
    "Anchor",
    "CheckData",
    "CheckDetail",
    "DecayTrack",
    "DriftTrack",
    "InputDetail",
    "InputReport",
    "JudgedCheck",
    "MonitorState",
    "OutcomeDetail",
    "OutcomeReport",
    "Pairs",
    "SegmentData",
    "SegmentDrift",
    "Verdict",
    "alarm_plan",
    "check_coarse",
    "describe",
    "error_verdict",
    "evaluate",
    "percent",
    "phase_counts",
    "phase_of",
    "timestamp_cuts",
    "too_few_pairs",
]


def _stale(monitor: MonitorConfig, at: datetime, data: CheckData) -> list[str]:
    out = []
    for feed, newest, limit in (
        ("score", data.newest_score, monitor.score_lag_limit),
        ("outcome", data.newest_outcome, monitor.outcome_lag_limit),
    ):
        if newest is None or at - newest > limit:
            since = _iso(newest) if newest is not None else "before the windows read"
            # in the configuration's spelling (a timedelta read "max_lag 2 days, 0:00:00")
            out.append(f"{feed} feed stale since {since} (max_lag {format_duration(limit)})")
    return out


def _window_numbers(info: Any) -> dict[str, Any] | None:
    if info is None:
        return None
    return {
        "lists": info.lists,
        "runs": info.runs,
        "duplicates": info.duplicates,
        "undefined_lists": info.undefined_lists,
        "unjudged_lists": info.unjudged_lists,
        "judged_rows": info.judged_rows,
        "means": {k: (v if math.isfinite(v) else None) for k, v in info.means.items()},
        "calibration": calibration_summary(info),
    }


def _judgments(data: CheckData) -> dict[str, Any] | None:
    """The ``judgments`` object of ``check --json``: what the outcomes were computed with."""
    j = data.judged
    if j is None:
        return None
    ref = j.reference
    return {
        "metric": j.metric,
        "judged_metric": j.judged_metric,
        "judged_tolerance": j.judged_tolerance,
        "condensed": j.condensed,
        "version": ref.judgments_version,
        "path": ref.judgments_path,
        "runs_format": ref.runs_format,
        "judgments_format": ref.judgments_format,
        "reference": _window_numbers(ref),
        "current": _window_numbers(j.current),
    }


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
    # segments absent now keep their state (a raised alarm stays raised), but not for ever: one
    # not raised that has had no evidence for a reference and a current window is dropped (a
    # segment column of experiment ids grew the state file by 12 KB a segment ever seen, until
    # it was refused at 16 MiB and every track started over)
    horizon = at - monitor.windows.reference_span - monitor.windows.current
    drift: dict[str, SegmentDrift] = {
        name: seg
        for name, seg in prior.drift.items()
        if name in data.segments
        or (not seg.active and seg.evidence_end is not None and seg.evidence_end >= horizon)
    }
    # a raised segment with no score left in either window (its feed gone for a reference and
    # a current window, or the segment renamed): its alarm kept, unreported, read as ok without
    # a word of it; kept and reported, it paged for good and its series grew past max_segments.
    # It is dropped, and this check says so
    dropped = {
        name: _since(gone)
        for name, gone in prior.drift.items()
        if gone.active and name not in data.segments
    }
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
    score_stale = feed_stale(stale, "score")

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
    reasons = _reasons(
        monitor,
        data,
        inputs,
        outcomes,
        plan,
        stale,
        decided=verdict_state in ("model_decay", "data_drift"),
        dropped=dropped,
        undecided=verdict_state == "insufficient_data",
    )
    if not data.segments:
        reasons.insert(
            0,
            f"no data at all in [{_iso(data.reference_start)}, {_iso(data.current_end)}); newest "
            f"score {_iso(data.newest_score) or 'never'}, newest outcome "
            f"{_iso(data.newest_outcome) or 'never'}",
        )
    if not plan.resolved:
        reasons.append(
            f"alarm plan: the CUSUM threshold h {plan.drift_h:.4g} is past what its chain "
            f"resolves, so the drift false-alarm budget may not hold (the reference shares "
            f"rho {plan.rho:g} with each block): lengthen windows.reference"
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
            "outcome_reference_start": _iso(data.outcome_reference_start),
            "outcome_reference_end": _iso(data.outcome_reference_end),
            "runs_start": _iso(data.runs_start),
            "runs_end": _iso(data.runs_end),
        },
        newest_score=data.newest_score,
        newest_outcome=data.newest_outcome,
        sequential=sequential,
        stale=tuple(stale),
        judgments=_judgments(data),
    )
    skipped = prior.skipped
    if prior.last_at is not None and monitor.schedule.next_slot(prior.last_at) < at:
        # slots this state never saw (the daemon down, checks that ended in error): a replay
        # (``monitor check --at``) skips them as the daemon did
        skipped = (*skipped, (prior.last_at, at))[-MAX_SKIPPED:]
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
        skipped=skipped,
        origin_decay=prior.origin_decay,
        segments=tuple(sorted(data.segments)),
        stale=tuple(
            source for source in STALE_SOURCES if feed_stale(stale, source.removesuffix("s"))
        ),
    )
    return verdict, new_state
