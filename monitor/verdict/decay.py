"""Model decay: looks at landed evaluation runs, time-based alpha spending, raise and recover."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from monitor.config import MAX_RESAMPLES, MonitorConfig
from monitor.errors import StatsInputError
from monitor.stats import (
    PairedResult,
    adjust_pvalues,
    difference_signs,
    paired_test,
    round_differences,
)
from monitor.stats.runs import several_runs
from monitor.verdict._common import _MAX_LOOKS_KEPT, _iso, _rng_seed
from monitor.verdict.data import CheckData, Pairs
from monitor.verdict.plan import AlarmPlan
from monitor.verdict.reports import OutcomeReport
from monitor.verdict.state import DecayTrack


def _unusable(monitor: MonitorConfig, segment: str, p: Pairs, exc: Exception) -> str:
    """What the paired test refused, said where it is: the outcome source and column, the
    segment and the query with the largest difference (a finite outcome of 1e308, a producer's
    sentinel, once failed the check naming only ``current - reference``)."""
    spec = monitor.outcomes
    with np.errstate(over="ignore", invalid="ignore"):
        gap = np.abs(p.current - p.reference)
    i = int(np.argmax(np.where(np.isnan(gap), -1.0, gap)))
    query = "" if p.query_ids is None else f" query {str(p.query_ids[i])!r}:"
    where = f" segment {segment!r}," if segment else ""
    return (
        f"outcomes {spec.path} (column {spec.outcome_column!r}),{where}{query} outcome "
        f"{float(p.reference[i]):g} in the reference, {float(p.current[i]):g} in the current "
        f"window: the paired test cannot use them ({exc})"
    )


def _describe(pairs: Pairs) -> dict[str, Any]:
    d = pairs.current - pairs.reference
    if d.size == 0:
        return {}
    signs = difference_signs(round_differences(d))  # as the paired test counts them
    return {
        "mean_difference": float(d.mean()),
        "median_difference": float(np.median(d)),
        "sd_difference": float(d.std(ddof=1)) if d.size > 1 else None,
        "wins": int(np.count_nonzero(signs > 0)),
        "losses": int(np.count_nonzero(signs < 0)),
        "ties": int(np.count_nonzero(signs == 0)),
    }


def _judged_numbers(data: CheckData, pairs: Pairs) -> dict[str, Any]:
    """Judged runs: each metric's paired means, judged@k on both sides, and the holes rule.

    Holes: when the current side's mean judged@k is more than ``judged_tolerance`` below the
    reference's on the same queries, unjudged documents took top ranks and a metric that counts
    them as non-relevant falls without any loss of quality, so the look is undecidable (unless
    the decision metric is a condensed ``ndcg'``, which leaves unjudged documents out).
    """
    j = data.judged
    if j is None:
        return {}
    metrics: dict[str, dict[str, float | None]] = {}
    sides = {j.metric: (pairs.reference, pairs.current), **(pairs.extras or {})}
    for m, (ref, cur) in sides.items():
        both = np.isfinite(ref) & np.isfinite(cur)
        metrics[m] = {
            "reference": _mean(ref[np.isfinite(ref)]),
            "current": _mean(cur[np.isfinite(cur)]),
            "mean_difference": _mean(cur[both] - ref[both]),
        }
    out: dict[str, Any] = {
        "metric": j.metric,
        "metrics": metrics,
        "judged_metric": j.judged_metric,
        "calibration": {
            "reference": calibration_summary(j.reference),
            "current": calibration_summary(j.current),
        },
    }
    judged = metrics.get(j.judged_metric)
    if judged is not None:
        out["judged_reference"] = judged["reference"]
        out["judged_current"] = judged["current"]
        ref_j, cur_j = judged["reference"], judged["current"]
        if ref_j is not None and cur_j is not None and ref_j - cur_j > j.judged_tolerance:
            out["judgment_holes"] = True
            if not j.condensed:
                out["undecidable_reason"] = (
                    f"{j.judged_metric} fell from {ref_j:.3f} to {cur_j:.3f} (more than "
                    f"judged_tolerance {j.judged_tolerance:g}): unjudged documents took top "
                    f"ranks, so {j.metric} would fall without any loss of quality; judge the "
                    f"new documents, or decide on a condensed metric such as ndcg'"
                )
    return out


_CALIBRATION_FIELDS = (
    "n",
    "positives",
    "n_bins",
    "binning",
    "probabilities",
    "ece",
    "mce",
    "brier",
    "reliability",
    "resolution",
    "uncertainty",
    "within_bin",
    "auc",
)


def calibration_summary(info: Any) -> dict[str, Any] | None:
    """A window's pooled calibration numbers (``JudgedInfo.calibration``) as plain values."""
    cal = None if info is None else info.calibration
    if cal is None:
        return None
    return {k: getattr(cal, k) for k in _CALIBRATION_FIELDS}


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if x.size else None


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
        or (decay.runs_end is not None and data.runs_end <= decay.runs_end and not data.late_rows)
        or (last is not None and at <= last)
    ):
        # nothing new landed (or already looked at): carry the last look; raised stays raised
        carried = {k: replace(v, new_look=False) for k, v in decay.reports.items()}
        return carried, decay
    since = None if decay.last_look_at is None else at - decay.last_look_at
    alpha = plan.look_alpha(monitor, since)
    enough = {
        name: _enough_pairs(seg.pairs, cfg.min_pairs, alpha) for name, seg in data.segments.items()
    }
    judged = {name: _judged_numbers(data, seg.pairs) for name, seg in data.segments.items()}
    holes = {name: j.get("undecidable_reason") is not None for name, j in judged.items()}
    # Holm's first step asks p <= alpha / k of the k segments tested (those with the pairs
    # a look needs: a segment of scores only, with no golden queries, is no test; counted,
    # it raised R and the MDE reported): a sign-flip p is at least 1 / (R + 1), so R grows
    # with k (20 resamples a unit of the smallest level Holm may ask; with 21 segments and
    # R = ceil(20 / alpha), no decay could ever be raised)
    tested = max(
        1,
        sum(enough[n] and not holes[n] for n in data.segments),
    )
    n_resamples = cfg.n_resamples or min(MAX_RESAMPLES, max(9999, math.ceil(20.0 * tested / alpha)))
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
        "late_rows": data.late_rows,
    }
    base: dict[str, OutcomeReport] = {}
    results = {}
    for name, seg in data.segments.items():
        p = seg.pairs
        # an outcome too large to difference (1e308) overflows here to a non-finite
        # description (None in the report); the paired test below refuses it by name
        with np.errstate(over="ignore", invalid="ignore"):
            described = _describe(p)
        why = dict(judged[name])
        if not enough[name] and not holes[name]:  # said in the JSON too, not only the reasons
            why["undecidable_reason"] = too_few_pairs(
                p.n, p.only_reference, p.only_current, cfg.min_pairs, alpha, runs=_runs_of(p)
            )
        base[name] = OutcomeReport(
            n_pairs=p.n,
            only_reference=p.only_reference,
            only_current=p.only_current,
            coverage=p.coverage,
            decidable=enough[name] and not holes[name],
            **look,  # type: ignore[arg-type]
            **described,
            **why,
        )
        if p.n >= 2 and not holes[name]:
            try:
                results[name] = paired_test(
                    p.reference,
                    p.current,
                    alternative="less",
                    margin=cfg.margin,
                    n_resamples=n_resamples,
                    confidence_level=cfg.confidence_level,
                    alpha=alpha / tested,  # the MDE at Holm's first step: what the look can find
                    power=cfg.power,
                    rng=np.random.default_rng(_rng_seed(monitor.seed, name)),
                    reference_runs=p.reference_runs,
                    current_runs=p.current_runs,
                )
            except StatsInputError as exc:
                raise StatsInputError(_unusable(monitor, name, p, exc)) from exc
    decidable = _reachable(base, results, alpha, keep=frozenset(decay.active))
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
        # a look over part of the golden set (a run still landing in parts: coverage below
        # min_coverage) may raise a decay but not clear one: the missing half was the decayed
        # one in a reviewer's world, which read ok for an hour and re-raised with a new since
        whole = base[name].coverage >= cfg.min_coverage
        cleared = False
        if significant:
            active.setdefault(name, at)
        elif name in active and recovered and base[name].decidable and whole:
            del active[name]
            cleared = True
        out[name] = replace(
            base[name],
            significant=bool(significant),
            # cleared by this look (an interval above -margin on a partial or undecidable
            # look read recovered beside decay true)
            recovered=cleared,
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
            test=r.permutation.method,
            flat=bool(ci.low >= -cfg.margin and ci.high <= cfg.margin),
        )
    for name in list(out):
        if name in active:
            out[name] = replace(out[name], decay=True, decay_since=_iso(active[name]))
    for name, since_at in active.items():  # raised segments absent from this look stay raised
        if name not in out and name in decay.reports:
            out[name] = replace(decay.reports[name], new_look=False, decay_since=_iso(since_at))
    ref_start, ref_end, hold = decay.reference_start, decay.reference_end, decay.hold_until
    if active and ref_start is None:
        ref_start, ref_end = data.outcome_reference_start, data.outcome_reference_end
    elif not active and decay.active and ref_start is not None:
        # cleared: the frozen reference stays until the rolling one starts at or after this
        # look's first run, so the decayed runs never enter it (a relapse would be masked)
        hold = data.runs_start
    elif not active and not decay.holds_reference(
        data.outcome_rolling_start or data.reference_start
    ):  # released on the window the look used (after an outage, moved back: it can still
        # hold the decayed runs, and the next such look compared a relapse with them)
        ref_start = ref_end = hold = None
    if active:
        hold = None
    looks = (*tuple(t for t in decay.looks if at - t < period)[-_MAX_LOOKS_KEPT:], at)
    return out, DecayTrack(
        looks=looks,
        runs_end=data.runs_end,
        active=active,
        reference_start=ref_start,
        reference_end=ref_end,
        reports=out,
        hold_until=hold,
        runs_start=data.runs_start,
        runs_rows=data.runs_rows,
    )


def _reachable(
    base: dict[str, OutcomeReport],
    results: Mapping[str, PairedResult],
    alpha: float,
    *,
    keep: frozenset[str] = frozenset(),
) -> list[str]:
    """The segments of the look's Holm family, marking the others of ``base`` undecidable.

    Holm's first step asks the smallest p to be at most alpha / k of k tests; each test's
    smallest attainable p is its design's (``min_pvalue``: 2^-n of n pairs enumerated, or
    1 / (R + 1) of R resamples), known before any outcome is seen. A test whose floor is above
    alpha / k could be raised only after others were, and alone never, yet it would read
    decidable and say "no evidence" (of a drop of any size, with an MDE it does not have): the
    test with the largest floor (then the fewest pairs, then the name) leaves the family until
    every floor reaches alpha / k of the rest. Data-independent, so the family-wise bound
    holds. A segment whose decay is raised (``keep``) stays: it was raised, and it clears on
    its interval (trimmed, it read undecidable at every look and the page never resolved)."""
    floors = {n: r.permutation.min_pvalue for n, r in results.items() if base[n].decidable}
    family = sorted(floors)
    while True:
        k = len(family)
        over = [n for n in family if n not in keep and floors[n] * k > alpha]
        if not over:
            break
        weakest = max(over, key=lambda n: (floors[n], -base[n].n_pairs, n))
        family.remove(weakest)
        r = results[weakest].permutation
        if not r.exact:  # R of the design: a run-label test that stopped early drew fewer
            design = f"1/(R+1) of R={round(1.0 / r.min_pvalue) - 1:,} resamples"
        elif r.method == "run-label":
            design = f"1 / {r.n_resamples:,} run labellings of {base[weakest].n_pairs} pairs"
        else:
            design = f"2^-n of {base[weakest].n_pairs} pairs"
        base[weakest] = replace(
            base[weakest],
            decidable=False,
            undecidable_reason=(
                f"its test's smallest p {floors[weakest]:.3g} ({design}) cannot reach the "
                f"look alpha {alpha:.3g} / {k} segment(s) (Holm's first step): no decay could "
                "be raised on its own; more pairs (queries), or a larger decay.n_resamples"
            ),
        )
    return family


def _runs_of(p: Pairs) -> np.ndarray | None:
    """Each pair's run count k = m + n when the run labels decide these pairs (some query
    with more than one run in a window), else None (the sign flips decide)."""
    ref, cur = p.reference_runs, p.current_runs
    if ref is None or cur is None or not ref.keys or not several_runs(ref, cur):
        return None
    return np.asarray(ref.counts + cur.counts)


def _enough_pairs(p: Pairs, least: int, alpha: float) -> bool:
    """Whether a look can decide ``p``: at least ``least`` pairs (``decay.min_pairs``) and a
    design whose smallest p can reach ``alpha`` whatever the outcomes: 2^-n for the sign flips,
    1 / prod k_q for the run labels (sum log2 k_q >= log2(1 / alpha); the Monte Carlo floor
    1 / (R + 1) is trimmed later, ``_reachable``)."""
    if p.n < least:
        return False
    ks = _runs_of(p)
    if ks is None:
        return p.n >= math.ceil(math.log2(1.0 / alpha))
    return float(np.log2(ks).sum()) >= math.log2(1.0 / alpha)


def too_few_pairs(
    n: int,
    only_reference: int,
    only_current: int,
    least: int,
    alpha: float,
    *,
    runs: np.ndarray | None = None,
) -> str:
    """Why a look of ``n`` pairs is undecidable for want of pairs: none (with the queries in
    one window only), fewer than ``decay.min_pairs`` (``least``), or too few for an exact
    test to reach ``alpha``: the sign flips' 2^-n, or, given the pairs' run counts ``runs``
    (k = m + n a pair), the run labels' 1 / prod k (at most alpha)."""
    need = math.ceil(math.log2(1.0 / alpha)) if alpha > 0 else 0
    if runs is not None and n > 0:  # the run labels decide: never the sign flips' 2^-n
        short = alpha > 0 and float(np.log2(runs).sum()) < math.log2(1.0 / alpha)
        floor = (
            f"a run-label test on them cannot reach this look's alpha {alpha:.3g} (its "
            f"{_count(runs)} labellings: 1 / labellings must be at most alpha)"
        )
        if n < least:
            also = f"; and {floor}" if short else ""
            return f"{n:,} pairs, fewer than the {least:,} a look needs (decay.min_pairs){also}"
        return f"{n:,} pairs of {int(runs.sum()):,} runs: {floor}"
    if n == 0:
        return (
            f"no pairs: no query is in both windows ({only_reference:,} only in the "
            f"reference, {only_current:,} only in the current runs)"
        )
    if n < least and least >= need:
        return f"{n:,} pairs, fewer than the {least:,} a look needs (decay.min_pairs)"
    if not need:
        return "too few pairs for this look's alpha"
    return (
        f"{n:,} pairs: a sign-flip test on them cannot reach this look's alpha {alpha:.3g} (it "
        f"needs 2^-n <= alpha: {need:,} pairs"
        + (f", and decay.min_pairs {least:,})" if n < least else ")")
    )


def _count(runs: np.ndarray) -> str:
    """prod k as a person reads it: exact up to 1e6, else as a power of ten."""
    log10 = float(np.log10(runs).sum())
    return f"{math.prod(int(k) for k in runs):,}" if log10 < 6 else f"10^{log10:.1f}"


# --------------------------------------------------------------------------- reasons
