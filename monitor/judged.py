"""Per-query outcomes from ranked runs and graded judgments (``outcomes.kind = "judged_runs"``).

Composes ``monitor.sources.read_judged_runs`` (parquet or TREC files -> placed lists joined to
the judgments) with ``monitor.stats.placed_metrics`` (R and ideal DCG from
``judgment_summary``, computed once per judgment version) and ``monitor.stats.calibration``
into the ``OutcomeWindow``
the decay test reads, so the rest of the monitor sees the same per-query outcomes as with
precomputed ones. Conventions (``docs/outcomes.md``):

* A *list* is one query's results in one evaluation run (rows sharing segment, query id and
  timestamp). Each list is scored; a query's outcome is the mean over its lists in the window
  (``counts`` lists), as repeated evaluations are averaged on the precomputed path.
* Lists whose query has no judged relevant document make the decision metric undefined (nDCG's
  ideal DCG is 0): they are left out and counted (``undefined_lists``); lists of queries with
  no judgment at all are counted in ``unjudged_lists`` too.
* A document judged twice for one query with different grades is an error naming the query and
  the document; the same grade twice is one judgment.
* Calibration pools every judged (query, document) row of the window that has a score:
  label = grade >= ``relevant_grade``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from monitor.errors import SchemaError
from monitor.sources import OutcomeSpec, OutcomeWindow, Window
from monitor.sources.judged import judged_window_key, read_judged_runs
from monitor.sources.model import FloatArray, IntArray, JudgedRuns, JudgedSpec
from monitor.sources.outcomes import KeptWindows
from monitor.stats import (
    CalibrationResult,
    JudgmentSummary,
    calibration,
    judgment_summary,
    parse_metric,
    placed_metrics,
)

__all__ = ["JudgedInfo", "forget_windows", "judged_outcomes", "metric_names"]


@dataclass(frozen=True, slots=True)
class JudgedInfo:
    """What a judged-runs window was scored with, and its window-level numbers.

    ``means``: each metric's mean over the queries the test uses, those where the decision
    metric is defined (a reported metric defined on more queries, nDCG beside AP at a higher
    ``relevant_grade``, is averaged over the same ones); ``calibration``: pooled over judged,
    scored rows (None when the runs carry no scores or no row is judged).
    """

    metric: str
    report: tuple[str, ...]
    judged_metric: str
    judgments_version: str
    judgments_path: str
    runs_format: str
    judgments_format: str
    lists: int
    runs: int
    duplicates: int
    undefined_lists: int
    unjudged_lists: int
    judged_rows: int
    means: dict[str, float] = field(default_factory=dict)
    calibration: CalibrationResult | None = None
    condensed: bool = False


def metric_names(judged: JudgedSpec) -> tuple[str, ...]:
    """Canonical names: the decision metric first, then the reported ones and judged@k."""
    names = [parse_metric(judged.metric).name]
    for m in (*judged.report, judged.judged_metric):
        name = parse_metric(m).name
        if name not in names:
            names.append(name)
    return tuple(names)


_WINDOWS = KeptWindows(16)  # windows' outcomes kept (a few per monitor: reference, current)
_SCORED_LOCK = threading.Lock()
SCORED = 0  # windows scored (not handed back kept), for tests and benchmarks


def judged_outcomes(spec: OutcomeSpec, window: Window) -> OutcomeWindow:
    """The per-query outcomes of ``window`` computed from its runs and the judgments.

    Kept by ``judged_window_key`` (the judgments' version and the rows the window holds): an
    hourly check's reference window holds the same runs until one enters or leaves it, and
    scoring a week of daily runs again cost 0.26 s a check at 2,000 queries x 100 results.
    A kept result is handed back with this window and the newest run's time of now."""
    judged = spec.judged
    if judged is None:
        raise ValueError("`spec` must have `judged` set (outcomes.kind = 'judged_runs').")
    rows_key, newest = judged_window_key(spec, window)
    key = (spec, rows_key)
    hit = _WINDOWS.get(key, window, newest)
    if hit is not None:
        return hit
    out = _judged_outcomes(spec, judged, window)
    _WINDOWS.keep(key, out, lambda: (spec, judged_window_key(spec, window)[0]), spec.path)
    return out


def forget_windows() -> None:
    """Forget every kept window's outcomes (benchmarks that time the scoring itself)."""
    _WINDOWS.clear()


def _judged_outcomes(spec: OutcomeSpec, judged: JudgedSpec, window: Window) -> OutcomeWindow:
    global SCORED
    with _SCORED_LOCK:
        SCORED += 1
    jr = read_judged_runs(spec, window)
    names = metric_names(judged)
    lists = int(jr.list_query.size)
    summary = _summary(jr, judged, names).padded(max(int(jr.query_names.size), 1))
    result = placed_metrics(
        jr.row_list,
        jr.row_grade,
        jr.row_judged,
        list_query=jr.list_query,
        summary=summary,
        metrics=names,
        duplicates=jr.duplicates,
    )
    unjudged = int(np.count_nonzero(jr.list_query >= jr.judged_queries))
    decision = result.metrics[names[0]]
    key_of_list = jr.list_key
    n_keys = int(key_of_list.max()) + 1 if lists else 0
    first = np.full(n_keys, lists, dtype=np.int64)  # each key's first list
    np.minimum.at(first, key_of_list, np.arange(lists, dtype=np.int64))

    def per_key(values: FloatArray) -> tuple[FloatArray, IntArray]:
        ok = np.isfinite(values)
        counts = np.bincount(key_of_list[ok], minlength=n_keys).astype(np.int64)
        sums = np.bincount(key_of_list[ok], weights=values[ok], minlength=n_keys)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        return means, counts

    means, counts = per_key(decision)
    keep = counts > 0
    extras = {m: per_key(result.metrics[m])[0][keep] for m in names[1:]}
    key_q = jr.list_query[first][keep]
    segments = None
    if spec.segment_column is not None:
        if jr.list_segment is None and bool(keep.any()):
            # the outcome window would hold outcomes beside no segments (a bare numpy
            # broadcasting error when paired)
            raise SchemaError(
                f"{jr.runs_format} runs carry no segment, so outcomes.segment_column "
                f"{spec.segment_column!r} cannot be read from them",
                path=spec.path,
                column=spec.segment_column,
                hint="unset outcomes.segment_column, or log the runs as parquet with that column",
            )
        seg_names = np.asarray(jr.segment_names, dtype=np.str_)
        segments = (
            seg_names[jr.list_segment[first][keep]]
            if jr.list_segment is not None and seg_names.size
            else np.empty(0, dtype=np.str_)
        )
    window_means = {names[0]: float(means[keep].mean()) if keep.any() else float("nan")}
    for m in names[1:]:  # over queries, as the decision metric: a query evaluated twice in
        v = extras[m]  # the window weighs once (its lists' mean, as the pairs use it)
        window_means[m] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
    cal, judged_rows = _calibration(jr, judged)
    info = JudgedInfo(
        metric=names[0],
        report=names[1:],
        judged_metric=parse_metric(judged.judged_metric).name,
        judgments_version=jr.judgments_version,
        judgments_path=jr.judgments_path,
        runs_format=jr.runs_format,
        judgments_format=jr.judgments_format,
        lists=lists,
        runs=int(np.unique(jr.list_timestamp).size),
        duplicates=int(result.duplicates),
        undefined_lists=int(np.count_nonzero(~np.isfinite(decision))),
        unjudged_lists=unjudged,
        judged_rows=judged_rows,
        means=window_means,
        calibration=cal,
        condensed=parse_metric(judged.metric).kind == "ndcg_cond",
    )
    return OutcomeWindow(
        window=window,
        query_ids=np.asarray(jr.query_names[key_q], dtype=np.str_),
        segments=segments,
        outcomes=np.asarray(means[keep], dtype=np.float64),
        counts=counts[keep],
        rows=jr.rows,
        dropped_nan=0,
        dropped_inf=0,
        dropped_null_query=0,
        newest_timestamp=jr.newest_timestamp,
        files_read=jr.files_read,
        dropped_null=jr.dropped_null,
        extras=extras,
        judged=info,
        runs=_runs_by_key(decision, key_of_list),
    )


def _runs_by_key(decision: FloatArray, key_of_list: IntArray) -> FloatArray:
    """The lists' finite decision values key by key (a key's in list order): the runs the
    window's means average (keys without one have none, as they leave the window)."""
    ok = np.isfinite(decision)
    order = np.argsort(key_of_list[ok], kind="stable")
    return np.asarray(decision[ok][order], dtype=np.float64)


_SUMMARIES: OrderedDict[tuple[object, ...], JudgmentSummary] = OrderedDict()
_SUMMARIES_LOCK = threading.Lock()


def _summary(jr: JudgedRuns, judged: JudgedSpec, names: tuple[str, ...]) -> JudgmentSummary:
    """R and ideal DCG per judged query, computed once per judgment version and settings."""
    key = (
        jr.judgments_path,
        jr.judgments_version,
        (judged.judgment_query_column, judged.judgment_doc_column, judged.grade_column),
        judged.relevant_grade,
        judged.gain,
        names,
    )
    with _SUMMARIES_LOCK:
        hit = _SUMMARIES.get(key)
        if hit is not None:
            _SUMMARIES.move_to_end(key)
            return hit
    summary = judgment_summary(
        jr.judged_query,
        jr.grade,
        n_queries=jr.judged_queries,
        metrics=names,
        relevant_grade=judged.relevant_grade,
        gain=judged.gain,
    )
    with _SUMMARIES_LOCK:
        _SUMMARIES[key] = summary
        while len(_SUMMARIES) > 8:
            _SUMMARIES.popitem(last=False)
    return summary


def _calibration(jr: JudgedRuns, judged: JudgedSpec) -> tuple[CalibrationResult | None, int]:
    """Calibration over the placed rows that have a judgment and a score (pooled over the
    window; a dropped duplicate does not count)."""
    if jr.row_score is None:
        return None, 0
    rows = np.flatnonzero(jr.row_judged)  # (indices and take: a boolean mask selects slowly)
    scores = jr.row_score.take(rows)
    scored = np.isfinite(scores)
    if not scored.all():
        keep = np.flatnonzero(scored)
        rows, scores = rows.take(keep), scores.take(keep)
    n = int(rows.size)
    if n == 0:
        return None, 0
    labels = jr.row_grade.take(rows) >= judged.relevant_grade
    return calibration(scores, labels, n_bins=judged.calibration_bins), n
