"""Per-query outcomes from ranked runs and graded judgments (``outcomes.kind = "judged_runs"``).

Composes ``monitor.sources.read_judged_runs`` (parquet or TREC files -> codes) with
``monitor.stats.ranking_metrics`` and ``monitor.stats.calibration`` into the ``OutcomeWindow``
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

from dataclasses import dataclass, field

import numpy as np

from monitor.errors import SchemaError
from monitor.sources import OutcomeSpec, OutcomeWindow, Window
from monitor.sources.judged import read_judged_runs
from monitor.sources.model import FloatArray, IntArray, JudgedRuns, JudgedSpec
from monitor.stats import CalibrationResult, calibration, parse_metric, ranking_metrics

__all__ = ["JudgedInfo", "judged_outcomes", "metric_names"]


@dataclass(frozen=True, slots=True)
class JudgedInfo:
    """What a judged-runs window was scored with, and its window-level numbers.

    ``means``: each metric's mean over the window's queries where it is defined (the decision
    metric's over the queries the test uses); ``calibration``: pooled over judged, scored rows
    (None when the runs carry no scores or no row is judged).
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


def judged_outcomes(spec: OutcomeSpec, window: Window) -> OutcomeWindow:
    """The per-query outcomes of ``window`` computed from its runs and the judgments."""
    judged = spec.judged
    if judged is None:
        raise ValueError("`spec` must have `judged` set (outcomes.kind = 'judged_runs').")
    jr = read_judged_runs(spec, window)
    names = metric_names(judged)
    lists = int(jr.list_query.size)
    jq, jd, grade = _unique_judgments(jr)
    rep_list, rep_doc, rep_grade = _per_list(jr.list_query, jq, jd, grade)
    result = ranking_metrics(
        jr.row_list,
        jr.row_doc,
        rep_list,
        rep_doc,
        rep_grade,
        n_queries=lists,
        metrics=names,
        rank=jr.row_rank,
        score=jr.row_score,
        relevant_grade=judged.relevant_grade,
        gain=judged.gain,
    )
    judged_any = np.zeros(max(int(jr.query_names.size), 1), dtype=bool)
    judged_any[jq] = True
    unjudged = int(np.count_nonzero(~judged_any[jr.list_query])) if lists else 0
    decision = result.metrics[names[0]]
    key_of_list = jr.list_key
    n_keys = int(key_of_list[-1]) + 1 if lists else 0
    first = np.searchsorted(key_of_list, np.arange(n_keys))  # each key's first list

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
        seg_names = np.asarray(jr.segment_names, dtype=np.str_)
        segments = (
            seg_names[jr.list_segment[first][keep]]
            if jr.list_segment is not None and seg_names.size
            else np.empty(0, dtype=np.str_)
        )
    window_means = {names[0]: float(means[keep].mean()) if keep.any() else float("nan")}
    for m in names[1:]:
        v = result.metrics[m]
        window_means[m] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
    cal, judged_rows = _calibration(jr, jq, jd, grade, judged)
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
    )


def _unique_judgments(jr: JudgedRuns) -> tuple[IntArray, IntArray, FloatArray]:
    """Judgments sorted by (query, document), one per pair; conflicting grades raise."""
    n_docs = max(jr.n_docs, 1)
    key = jr.judged_query * n_docs + jr.judged_doc
    order = np.lexsort((jr.grade, key))
    key, grade = key[order], jr.grade[order]
    if key.size > 1:
        same = key[1:] == key[:-1]
        clash = same & (grade[1:] != grade[:-1])
        if clash.any():
            i = int(np.flatnonzero(clash)[0])
            q = str(jr.query_names[key[i] // n_docs])
            d = jr.doc_name(int(key[i] % n_docs))
            raise SchemaError(
                f"query {q!r}: document {d!r} is judged twice with different grades "
                f"({grade[i]:g} and {grade[i + 1]:g})",
                path=jr.judgments_path,
                hint="keep one grade per (query, document); pin a judgments version to compare",
            )
        first = np.concatenate(([True], ~same))
        key, grade = key[first], grade[first]
    return (key // n_docs).astype(np.int64), (key % n_docs).astype(np.int64), grade


def _per_list(
    list_query: IntArray, jq: IntArray, jd: IntArray, grade: FloatArray
) -> tuple[IntArray, IntArray, FloatArray]:
    """The judgments of each list's query, repeated per list (lists of one query share them)."""
    n_q = int(
        max(
            int(jq.max()) + 1 if jq.size else 0, int(list_query.max()) + 1 if list_query.size else 0
        )
    )
    start = np.searchsorted(jq, np.arange(n_q), side="left")
    end = np.searchsorted(jq, np.arange(n_q), side="right")
    if list_query.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    c = (end - start)[list_query]
    total = int(c.sum())
    rep_list = np.repeat(np.arange(list_query.size, dtype=np.int64), c)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(c) - c, c)
    rows = np.repeat(start[list_query], c) + offsets
    return rep_list, jd[rows], grade[rows]


def _calibration(
    jr: JudgedRuns, jq: IntArray, jd: IntArray, grade: FloatArray, judged: JudgedSpec
) -> tuple[CalibrationResult | None, int]:
    """Calibration over the scored rows that have a judgment (pooled over the window)."""
    if jr.row_score is None or jr.row_list.size == 0 or jq.size == 0:
        return None, 0
    n_docs = max(jr.n_docs, 1)
    jkey = jq * n_docs + jd
    rkey = jr.list_query[jr.row_list] * n_docs + jr.row_doc
    pos = np.minimum(np.searchsorted(jkey, rkey), jkey.size - 1)
    hit = (jkey[pos] == rkey) & np.isfinite(jr.row_score)
    n = int(hit.sum())
    if n == 0:
        return None, 0
    labels = (grade[pos[hit]] >= judged.relevant_grade).astype(np.int64)
    return calibration(jr.row_score[hit], labels, n_bins=judged.calibration_bins), n
