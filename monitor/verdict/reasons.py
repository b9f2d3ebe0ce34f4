"""Reasons: the evidence that decided, deciding segments first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from monitor.config import MonitorConfig
from monitor.schedule import format_duration
from monitor.verdict._common import _iso, percent
from monitor.verdict.data import CheckData
from monitor.verdict.plan import AlarmPlan
from monitor.verdict.reports import InputReport, OutcomeReport


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _below(share: float, bound: float) -> tuple[str, str]:
    """``share`` (< ``bound``) and the bound in percent, both to 3 significant digits or as
    many more as tell them apart (79.996 % is not "80 %, below 80 %"; nor is a bound of
    80.04 % printed as 80 %)."""
    for digits in range(3, 13):
        a, b = (format(100 * x, f".{digits}g") for x in (share, bound))
        if a != b:
            return a, b
    return repr(100 * share), repr(100 * bound)


def _outcome_reason(monitor: MonitorConfig, name: str, r: OutcomeReport) -> str:
    where = f"segment {name!r}: " if name else ""
    ci = (
        f"{percent(r.confidence_level or 0)}% CI [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"
        if r.ci_low is not None
        else "no interval"
    )
    ref = f"reference runs [{r.reference_start}, {r.reference_end})"
    runs = f"{r.runs} run(s) landed [{r.runs_start}, {r.runs_end}]"
    if r.late_rows:
        runs += f" ({r.late_rows} row(s) landed late in the runs looked at before: looked at again)"
    what = f"mean {r.metric} difference" if r.metric else "mean outcome difference"
    stem = (
        f"{what} {_fmt(r.mean_difference, '+.4f')} over {r.n_pairs} pairs "
        f"({r.wins} wins, {r.losses} losses, {r.ties} ties), {ci}, "
        f"p={_fmt(r.pvalue_adjusted if r.decidable else r.pvalue, '.3g')} "
        f"(look alpha {_fmt(r.alpha, '.2g')}, margin {monitor.decay.margin:g}); {runs} vs {ref}"
    )
    if not r.new_look and r.looked_at:
        stem += f"; carried from the look at {r.looked_at}"
    if r.decay:
        head = f"model decay since {r.decay_since}" if not r.significant else "model decay"
        if not r.significant and r.new_look:
            recovered = r.ci_low is not None and r.ci_low > -monitor.decay.margin
            cov = monitor.decay.min_coverage
            if r.ci_low is None:  # no interval to compare (it claimed one was not above)
                head += f" (not cleared: this look has no interval, {r.n_pairs} pairs)"
            elif not recovered:
                head += " (not yet recovered: the interval's lower end is not above -margin)"
            elif r.coverage < cov:  # 79.5 % is not "80 %, below 80 %"
                share, bound = _below(r.coverage, cov)
                head += (
                    f" (not cleared: this look paired {share}% of the reference's queries, "
                    f"below {bound}%; a run still landing in parts clears nothing)"
                )
            elif not r.decidable:
                head += " (not cleared: the interval is above -margin, but the look undecidable)"
        if r.undecidable_reason:
            head += f"; this look undecidable: {r.undecidable_reason}"
        return f"{where}{head}: {stem}"
    if not r.decidable and r.undecidable_reason:
        return f"{where}undecidable: {r.undecidable_reason}; descriptive: {stem}"
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
    unseen = None if r.mde is None else monitor.decay.margin + r.mde
    return (
        f"{where}no evidence of decay (not proof of none: a drop smaller than about "
        f"{_fmt(unseen)}, the margin plus the MDE {_fmt(r.mde)}, may be present and unseen): "
        f"{stem}"
    )


def _input_reason(
    monitor: MonitorConfig, data: CheckData, name: str, ir: InputReport, plan: AlarmPlan
) -> str:
    where = f"segment {name!r}: " if name else ""
    cfg = monitor.drift
    if not ir.decidable:
        newest = _iso(data.newest_score) or "never"
        text = (
            f"undecidable drift: {ir.undecidable_reason}; descriptive: window PSI "
            f"{_fmt(ir.psi)}, KS D {_fmt(ir.ks_statistic)}"
            if ir.undecidable_reason and ir.psi is not None
            else f"undecidable drift: {ir.n_current} scores in the current window "
            f"[{_iso(data.current_start)}, {_iso(data.current_end)}) (need "
            f"{cfg.min_current_samples}), {ir.n_reference} in the reference (need "
            f"{cfg.min_reference_samples}); newest score at {newest}"
        )
        if ir.drift:  # the alarm stands: said first (only "undecidable" was said)
            text = f"data drift since {ir.drift_since} against {_tracks(ir)} (this window {text})"
        return where + text
    ref_txt = f"the reference [{_iso(data.reference_start)}, {_iso(data.reference_end)})"
    if plan.seasonal_period is not None:
        daily = plan.seasonal_period == timedelta(days=1)
        ref_txt += f" at the same {'hour of day' if daily else 'hour of week'}"
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
        why = (
            f"under the {cfg.min_block_samples} a block needs"
            if ir.block_samples < cfg.min_block_samples
            # phases the reference lacks are set aside (``_block_test``)
            else f"too few of them in hours the reference holds (need {cfg.min_block_samples})"
        )
        block = f"no new evidence block ({ir.block_samples} scores since {ir.block_start}: {why})"
    cusum = f"CUSUM {ir.cusum:.2f}"
    if ir.anchor_cusum is not None:
        cusum += f" (anchor {ir.anchor_cusum:.2f})"
    # the immediate rule holds the Holm-adjusted p to drift_alpha: z > drift_z when every
    # segment's tracks have a block this hour, a little less when fewer do
    cusum += (
        f" / h {plan.drift_h:.2f}, immediate at adjusted p <= {plan.drift_alpha:.3g} "
        f"(z > {plan.drift_z:.2f} with every track compared)"
    )
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
        return (
            f"{where}data drift since {ir.drift_since} against {_tracks(ir)} (clears after "
            f"{cfg.clear_after} blocks with debiased PSI below "
            f"{cfg.clear_share * cfg.tolerance:g}{_clearing(ir)}): {stem}"
        )
    return f"{where}no input drift alarm: {stem}"


def _tracks(ir: InputReport) -> str:
    """The raised tracks: "the reference", "the anchor" or both."""
    return " and ".join("the anchor" if t == "anchor" else "the reference" for t in ir.drift_tracks)


def _clearing(ir: InputReport) -> str:
    """The raised tracks' clearing CUSUMs and their threshold: " and the clearing CUSUM (now
    1.20, anchor 0.40) past 4.77" ("" with tolerance 0: the band alone clears)."""
    if ir.clear_threshold is None:
        return ""
    now = [f"{ir.clear_cusum:.2f}"] if ir.clear_cusum is not None else []
    if ir.anchor_clear_cusum is not None:
        now.append(f"anchor {ir.anchor_clear_cusum:.2f}")
    return f" and the clearing CUSUM (now {', '.join(now)}) past {ir.clear_threshold:.2f}"


def _reasons(
    monitor: MonitorConfig,
    data: CheckData,
    inputs: Mapping[str, InputReport],
    outcomes: Mapping[str, OutcomeReport],
    plan: AlarmPlan,
    stale: Sequence[str],
    *,
    decided: bool = False,
    dropped: Mapping[str, datetime | None] | None = None,
    undecided: bool = False,
) -> list[str]:
    """Reasons, the deciding ones first: decays, drifts, then the rest, undecidable last. A
    stale feed's line comes first when it decided (``insufficient_data``), else after the
    decays and drifts that did (``decided``): the page's headline is the first reason. A
    drift alarm ``dropped`` this check (segment: raised since) is said first unless an alarm
    decided, else last. When the check is ``undecided`` (``insufficient_data``), what could
    not be decided comes before what was (an outcome flat, no drift alarm): the headline says
    why the state is what it is."""
    out: list[tuple[float, str]] = [(2.5 if decided else 0, s) for s in stale]
    # the rank of what could not be decided: ahead of what was when that side (no segment of
    # it decidable) is why the check is undecided, not a segment the others decided for
    low_in = 2.9 if undecided and not any(r.decidable for r in inputs.values()) else 5
    low_out = 2.9 if undecided and not any(r.decidable for r in outcomes.values()) else 5
    if not outcomes and data.segments:
        out.append((low_out, "no evaluation run looked at yet: decay undecided"))
    dropped = dropped or {}
    for name in sorted(dropped):
        where = f"segment {name!r}: " if name else ""
        out.append(
            (
                6 if decided else -1,
                f"{where}drift alarm raised since {_iso(dropped[name])} dropped: no "
                f"score of the segment in [{_iso(data.reference_start)}, "
                f"{_iso(data.current_end)})",
            )
        )
    for name in sorted(outcomes):
        r = outcomes[name]
        rank = 1 if r.decay else (low_out if not r.decidable else 3)
        out.append((rank, _outcome_reason(monitor, name, r)))
        # while the look decides, carried or new (it vanished one check after the look); not
        # for a segment of scores only, with no golden query on either side (nothing was lost:
        # its 0 % once read as "the golden set changed" at every check)
        held = r.n_pairs + r.only_reference + r.only_current
        if r.coverage < monitor.decay.min_coverage and r.looked_at and held:
            where = f"segment {name!r}: " if name else ""
            share, bound = _below(r.coverage, monitor.decay.min_coverage)
            out.append(
                (
                    4,
                    f"{where}pairing coverage {share}% is below {bound}%: the golden set "
                    "changed, or "
                    "queries returned no results "
                    f"({r.only_reference} reference-only, {r.only_current} current-only "
                    f"queries)",
                )
            )
    for name in sorted(inputs):
        ir = inputs[name]
        rank = 2 if ir.drift else (low_in if not ir.decidable else 3)
        out.append((rank, _input_reason(monitor, data, name, ir, plan)))
        if ir.late_scores:
            where = f"segment {name!r}: " if name else ""
            lo, hi = (
                format_duration(timedelta(seconds=round(x or 0.0)))
                for x in (ir.late_scores_lag_min, ir.late_scores_lag_max)
            )
            settle = format_duration(monitor.drift.settle)
            out.append(
                (
                    4,
                    f"{where}{ir.late_scores} scores landed after the evidence block holding "
                    f"their time was tested, more than {lo} and at most {hi} late: no block "
                    f"tests them (a writer later than drift.settle = {settle}); set "
                    f"drift.settle to that writer's lateness ({hi} covers it)",
                )
            )
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
