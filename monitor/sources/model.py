"""Public value types of the sources package: windows, source specs and what a read returns.

No pyarrow here: these are the types the rest of ``monitor`` passes around."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from monitor.epoch import to_ns as _to_ns
from monitor.stats import Runs

TimeUnit: TypeAlias = Literal["s", "ms", "us", "ns"]


SourceFormat: TypeAlias = Literal["parquet", "delta", "iceberg"]


FloatArray: TypeAlias = npt.NDArray[np.float64]


IntArray: TypeAlias = npt.NDArray[np.int64]


_NS_PER: dict[str, int] = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open time window ``[start, end)``; both ends are stored as UTC datetimes.

    Raises ``ValueError`` if an end is not a timezone-aware ``datetime`` or ``start >= end``.
    """

    start: datetime
    end: datetime
    # both ends in ns since the epoch, computed once (planning asks for them per file and row
    # group)
    _ns: tuple[int, int] = field(default=(0, 0), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = []
        for name in ("start", "end"):
            value = getattr(self, name)
            if not isinstance(value, datetime):
                problems.append(f"`{name}` must be a datetime; got {value!r}.")
            elif value.tzinfo is None or value.utcoffset() is None:
                problems.append(
                    f"`{name}` must be timezone-aware (e.g. tzinfo=UTC); "
                    f"got naive {value.isoformat()}."
                )
        if problems:
            raise ValueError(" ".join(problems))
        object.__setattr__(self, "start", self.start.astimezone(UTC))
        object.__setattr__(self, "end", self.end.astimezone(UTC))
        if not self.start < self.end:
            raise ValueError(f"`start` must be before `end`; got {self}.")
        object.__setattr__(self, "_ns", (_to_ns(self.start), _to_ns(self.end)))

    @property
    def start_ns(self) -> int:
        """``start`` in nanoseconds since the Unix epoch."""
        return self._ns[0]

    @property
    def end_ns(self) -> int:
        """``end`` in nanoseconds since the Unix epoch (excluded from the window)."""
        return self._ns[1]

    def __str__(self) -> str:
        return f"[{self.start.isoformat()}, {self.end.isoformat()})"


def _validate_spec(spec: ScoreSpec | OutcomeSpec, columns: Mapping[str, str | None]) -> None:
    problems = []
    if not isinstance(spec.path, str) or not spec.path:
        problems.append(f"`path` must be a non-empty string; got {spec.path!r}.")
    for name, value in columns.items():
        if value is not None and (not isinstance(value, str) or not value):
            problems.append(f"`{name}` must be a non-empty string; got {value!r}.")
    if spec.timestamp_unit is not None and spec.timestamp_unit not in _NS_PER:
        problems.append(
            f"`timestamp_unit` must be one of 's', 'ms', 'us', 'ns' or None; "
            f"got {spec.timestamp_unit!r}."
        )
    if spec.format not in ("parquet", "delta", "iceberg"):
        problems.append(f"`format` must be 'parquet', 'delta' or 'iceberg'; got {spec.format!r}.")
    if spec.catalog and spec.format != "iceberg":
        problems.append("`catalog` is for Iceberg tables only (format 'iceberg').")
    if not isinstance(spec.catalog, tuple) or not all(
        isinstance(kv, tuple) and len(kv) == 2 and all(isinstance(x, str) for x in kv)
        for kv in spec.catalog
    ):
        problems.append(f"`catalog` must be a tuple of (key, value) strings; got {spec.catalog!r}.")
    snapshot = spec.snapshot
    if snapshot is not None and (
        isinstance(snapshot, bool) or not isinstance(snapshot, int) or spec.format == "parquet"
    ):
        problems.append(
            f"`snapshot` must be None or, for a table format, an integer; got {snapshot!r}."
        )
    share = spec.max_invalid_share
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
        problems.append(f"`max_invalid_share` must be a number in [0, 1]; got {share!r}.")
    if problems:
        raise ValueError(" ".join(problems))


@dataclass(frozen=True, slots=True)
class ScoreSpec:
    """Where the score log lives and how its columns are named.

    ``timestamp_unit`` is needed only for integer epoch columns. ``max_invalid_share`` is the share
    of a window's rows that may be dropped (null, NaN, inf) before the read is an error.
    ``prune_partitions`` skips hive partitions outside the window without opening them.
    ``rank_column`` (a full result log, one row per result): only rows whose rank equals
    ``top_rank`` are the logged top-1 scores, so a team that logs whole result lists needs no
    second pipeline.
    ``format``: ``"parquet"`` (``path`` is a file, directory, glob or URI), ``"delta"``
    (``path`` is a Delta Lake table's directory, the one holding ``_delta_log``) or
    ``"iceberg"`` (``path`` is a table identifier such as ``"db.scores"`` in the catalog
    ``catalog``: pyiceberg's ``load_catalog`` properties, ``name`` among them). A table is read
    as the data files of its snapshot ``snapshot`` (None: the current one; see
    ``monitor.sources.tables``), through the same planner and reader as parquet paths.
    ``max_segments`` (None: no bound): a read that meets more distinct values of
    ``segment_column`` is a ``SourceError`` naming the file, as soon as it meets them.
    """

    path: str
    timestamp_column: str = "timestamp"
    score_column: str = "score"
    segment_column: str | None = None
    timestamp_unit: TimeUnit | None = None
    max_invalid_share: float = 0.01
    prune_partitions: bool = True
    rank_column: str | None = None
    top_rank: int = 1
    format: SourceFormat = "parquet"
    catalog: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    snapshot: int | None = None
    max_segments: int | None = None

    def __post_init__(self) -> None:
        if self.max_segments is not None and (
            isinstance(self.max_segments, bool)
            or not isinstance(self.max_segments, int)
            or self.max_segments < 1
        ):
            raise ValueError(
                f"`max_segments` must be a positive integer or None; got {self.max_segments!r}."
            )
        _validate_spec(
            self,
            {
                "timestamp_column": self.timestamp_column,
                "score_column": self.score_column,
                "segment_column": self.segment_column,
                "rank_column": self.rank_column,
            },
        )
        if isinstance(self.top_rank, bool) or not isinstance(self.top_rank, int):
            raise ValueError(f"`top_rank` must be an integer; got {self.top_rank!r}.")


GainKind: TypeAlias = Literal["linear", "exponential"]


@dataclass(frozen=True, slots=True)
class JudgedSpec:
    """Outcomes computed from ranked runs and graded judgments (``outcomes.kind = "judged_runs"``).

    The runs live at the ``OutcomeSpec``'s ``path`` (parquet: ``timestamp``, ``query_id``,
    ``doc_id``, ``rank`` and/or ``score``; or TREC run files ``qid Q0 docid rank score tag``, one
    evaluation run per file); ``judgments`` is a parquet or TREC qrels (``qid 0 docid grade``)
    file or directory. A directory with ``version=<name>`` subdirectories holds versions: the
    last name in sort order is used unless ``judgments_version`` pins one. ``metric`` decides;
    ``report`` is shown beside it; ``judged@{judged_k}`` is always computed, and a current
    window whose mean judged@k falls more than ``judged_tolerance`` below the reference's makes
    the decay look undecidable (unless the decision metric is a condensed ``ndcg'``).
    ``rank_column`` / ``score_column`` are used when the file has them (at least one).
    """

    judgments: str
    metric: str = "ndcg@10"
    report: tuple[str, ...] = ("ap", "rr", "p@10", "r@100", "judged@10")
    relevant_grade: float = 1.0
    gain: GainKind = "linear"
    doc_column: str = "doc_id"
    rank_column: str = "rank"
    score_column: str = "score"
    judgment_query_column: str = "query_id"
    judgment_doc_column: str = "doc_id"
    grade_column: str = "grade"
    judgments_version: str | None = None
    judged_k: int = 10
    judged_tolerance: float = 0.05
    calibration_bins: int = 10

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.judgments, str) or not self.judgments:
            problems.append(f"`judgments` must be a non-empty string; got {self.judgments!r}.")
        if self.gain not in ("linear", "exponential"):
            problems.append(f"`gain` must be 'linear' or 'exponential'; got {self.gain!r}.")
        if not isinstance(self.judged_k, int) or self.judged_k < 1:
            problems.append(f"`judged_k` must be an integer >= 1; got {self.judged_k!r}.")
        if not 0.0 <= self.judged_tolerance <= 1.0:
            problems.append(f"`judged_tolerance` must be in [0, 1]; got {self.judged_tolerance!r}.")
        if not isinstance(self.calibration_bins, int) or self.calibration_bins < 2:
            problems.append(
                f"`calibration_bins` must be an integer >= 2; got {self.calibration_bins!r}."
            )
        if problems:
            raise ValueError(" ".join(problems))

    @property
    def judged_metric(self) -> str:
        """The judged@k metric name this spec always computes."""
        return f"judged@{self.judged_k}"


@dataclass(frozen=True, slots=True)
class OutcomeSpec:
    """Where the outcome log (one row per evaluation of a labelled query) lives, and its columns.

    With ``judged`` set (``outcomes.kind = "judged_runs"``), ``path`` holds ranked runs and the
    outcomes are computed from them and the judgments (``outcome_column`` is unused).
    ``format``, ``catalog`` and ``snapshot`` as in ``ScoreSpec`` (judged runs: parquet only).
    """

    path: str
    timestamp_column: str = "timestamp"
    query_column: str = "query_id"
    outcome_column: str = "outcome"
    segment_column: str | None = None
    timestamp_unit: TimeUnit | None = None
    max_invalid_share: float = 0.01
    prune_partitions: bool = True
    judged: JudgedSpec | None = None
    format: SourceFormat = "parquet"
    catalog: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    snapshot: int | None = None

    def __post_init__(self) -> None:
        _validate_spec(
            self,
            {
                "timestamp_column": self.timestamp_column,
                "query_column": self.query_column,
                "outcome_column": self.outcome_column,
                "segment_column": self.segment_column,
            },
        )
        if self.judged is not None and self.format != "parquet":
            raise ValueError(
                f"judged runs are read from parquet or TREC files only; got format {self.format!r}."
            )

    @property
    def kind(self) -> str:
        """``"judged_runs"`` when outcomes are computed from runs and judgments, else
        ``"per_query"``."""
        return "per_query" if self.judged is None else "judged_runs"


@dataclass(frozen=True, slots=True)
class ScoreWindow:
    """The scores of one window.

    ``rows`` counts every row whose timestamp is in the window. Of those, rows with a null score or
    a null segment are counted in ``dropped_null``, then NaN scores in ``dropped_nan`` and infinite
    ones in ``dropped_inf``; ``len(values) == rows - dropped_null - dropped_nan - dropped_inf``.
    Rows with a null timestamp belong to no window. ``segment_names`` lists, sorted, the segments
    with at least one value; ``segment_codes[i]`` indexes it. ``newest_timestamp`` is the newest
    timestamp in the whole source (``None`` if it holds none), for freshness alerts.

    ``coarse_spans`` (k x 2, int64 ns; empty when every timestamp was decoded): the
    [oldest, newest] of the row groups whose timestamps ``read_scores`` did not decode (its
    ``cuts``): each of their rows carries its group's newest timestamp, which answers t >= c as
    the row's own does for every c outside (oldest, newest], and gives the same newest.
    """

    window: Window
    values: FloatArray
    timestamps: IntArray | None
    segment_codes: npt.NDArray[np.int32] | None
    segment_names: tuple[str, ...]
    rows: int
    dropped_nan: int
    dropped_inf: int
    dropped_null: int
    newest_timestamp: datetime | None
    files_read: int
    coarse_spans: IntArray = field(default_factory=lambda: np.empty((0, 2), dtype=np.int64))

    @property
    def dropped(self) -> int:
        """All dropped rows: ``dropped_null + dropped_nan + dropped_inf``."""
        return self.dropped_null + self.dropped_nan + self.dropped_inf

    def by_segment(self) -> dict[str, FloatArray]:
        """Values per segment name (file order kept); ``ValueError`` if no segment column is set."""
        if self.segment_codes is None:
            raise ValueError(
                "by_segment() needs a `segment_column` in the ScoreSpec; none was set."
            )
        if len(self.segment_names) == 1:
            return {self.segment_names[0]: self.values}
        order = np.argsort(self.segment_codes, kind="stable")
        bounds = np.searchsorted(self.segment_codes[order], np.arange(len(self.segment_names) + 1))
        return {
            name: self.values[np.sort(order[bounds[i] : bounds[i + 1]])]
            for i, name in enumerate(self.segment_names)
        }


@dataclass(frozen=True, slots=True)
class OutcomeWindow:
    """Per-key mean outcomes of one window; a key is ``(segment, query_id)`` or ``query_id``.

    Keys are sorted (by segment, then query id); integer query ids become strings. ``outcomes`` is
    the mean of the ``counts`` evaluations of each key. Of the ``rows`` in the window, rows with a
    null query id are counted in ``dropped_null_query``, then a null outcome or segment in
    ``dropped_null``, then NaN and infinite outcomes in ``dropped_nan`` / ``dropped_inf``.
    ``extras`` (judged runs): per-key means of the metrics reported beside the decision metric,
    aligned with ``query_ids`` (NaN where a key's metric is undefined). ``runs``: the outcomes
    those means average, key by key (``counts[k]`` of key k, in read order), for the decay
    test's run labels (``monitor.stats.runs``); None from a reader that keeps only the means.
    """

    window: Window
    query_ids: npt.NDArray[np.str_]
    segments: npt.NDArray[np.str_] | None
    outcomes: FloatArray
    counts: IntArray
    rows: int
    dropped_nan: int
    dropped_inf: int
    dropped_null_query: int
    newest_timestamp: datetime | None
    files_read: int
    dropped_null: int = 0
    extras: Mapping[str, FloatArray] = field(default_factory=dict)
    judged: Any = None  # monitor.judged.JudgedInfo for judged runs (kept free of its imports)
    runs: FloatArray | None = None

    @property
    def dropped(self) -> int:
        """All dropped rows."""
        return self.dropped_null_query + self.dropped_null + self.dropped_nan + self.dropped_inf

    def frozen(self) -> OutcomeWindow:
        """This window with its arrays read-only (a result kept and handed out again)."""
        arrays = (self.query_ids, self.segments, self.outcomes, self.counts, self.runs)
        for a in (*arrays, *self.extras.values()):
            if a is not None:
                a.flags.writeable = False
        return self


@dataclass(frozen=True, slots=True)
class PairedOutcomes:
    """Two outcome windows paired by key, sorted by key.

    ``coverage = pairs / (pairs + only_reference)``, the share of the reference's keys that the
    current window evaluated again (0.0 when the reference is empty); ``only_reference_ids`` and
    ``only_current_ids`` (with their segments) say which keys are missing, so a silently changed
    golden set is visible.
    """

    query_ids: npt.NDArray[np.str_]
    segments: npt.NDArray[np.str_] | None
    reference: FloatArray
    current: FloatArray
    reference_counts: IntArray
    current_counts: IntArray
    only_reference: int
    only_current: int
    coverage: float
    only_reference_ids: npt.NDArray[np.str_] = field(
        default_factory=lambda: np.empty(0, dtype=np.str_)
    )
    only_current_ids: npt.NDArray[np.str_] = field(
        default_factory=lambda: np.empty(0, dtype=np.str_)
    )
    only_reference_segments: npt.NDArray[np.str_] | None = None
    only_current_segments: npt.NDArray[np.str_] | None = None
    reference_extras: Mapping[str, FloatArray] = field(default_factory=dict)
    current_extras: Mapping[str, FloatArray] = field(default_factory=dict)
    reference_runs: Runs | None = None
    current_runs: Runs | None = None

    @property
    def pairs(self) -> int:
        """Number of keys present in both windows."""
        return len(self.query_ids)

    def by_segment(self) -> dict[str, PairedOutcomes]:
        """One ``PairedOutcomes`` per segment (sorted); ``ValueError`` if there are no segments."""
        if self.segments is None:
            raise ValueError(
                "by_segment() needs a `segment_column` in the OutcomeSpec; none was set."
            )
        ref_seg = _or_empty(self.only_reference_segments)
        cur_seg = _or_empty(self.only_current_segments)
        names = sorted(set(self.segments.tolist()) | set(ref_seg.tolist()) | set(cur_seg.tolist()))
        result = {}
        for name in names:
            sel = self.segments == name
            ref_sel = ref_seg == name
            cur_sel = cur_seg == name
            pairs = int(sel.sum())
            only_ref = int(ref_sel.sum())
            result[name] = PairedOutcomes(
                query_ids=self.query_ids[sel],
                segments=self.segments[sel],
                reference=self.reference[sel],
                current=self.current[sel],
                reference_counts=self.reference_counts[sel],
                current_counts=self.current_counts[sel],
                only_reference=only_ref,
                only_current=int(cur_sel.sum()),
                coverage=pairs / (pairs + only_ref) if pairs + only_ref else 0.0,
                only_reference_ids=self.only_reference_ids[ref_sel],
                only_current_ids=self.only_current_ids[cur_sel],
                only_reference_segments=ref_seg[ref_sel],
                only_current_segments=cur_seg[cur_sel],
                reference_extras={k: v[sel] for k, v in self.reference_extras.items()},
                current_extras={k: v[sel] for k, v in self.current_extras.items()},
                reference_runs=_take(self.reference_runs, sel),
                current_runs=_take(self.current_runs, sel),
            )
        return result


def _take(runs: Runs | None, sel: npt.NDArray[np.bool_]) -> Runs | None:
    return None if runs is None else runs.take(np.flatnonzero(sel))


def _or_empty(arr: npt.NDArray[np.str_] | None) -> npt.NDArray[np.str_]:
    return np.empty(0, dtype=np.str_) if arr is None else arr


@dataclass(frozen=True, slots=True)
class JudgedRuns:
    """The ranked lists of one window, placed and joined to the judgments they are scored
    against.

    A *list* is one query's ranked results in one evaluation run: the rows sharing a
    ``(segment, query_id, timestamp)``, numbered in order of first appearance.
    ``list_query`` / ``list_segment`` / ``list_timestamp`` describe the lists; ``list_key``
    numbers their (segment, query) keys (a query's lists in one segment share one). The rows
    are *placed*: list by list, each best first (``monitor.sources.ranked``), duplicate
    documents dropped (``duplicates`` counts them); ``row_grade`` is a row's judged grade (0
    where unjudged), ``row_judged`` whether it has a judgment, ``row_score`` its score (None when
    no file had a score column; NaN where null). ``query_names[code]`` is a query's id: codes
    below ``judged_queries`` are the queries of the judgments, in their order; the rest are
    queries only the runs have. ``judged_query`` / ``grade`` are the unique judgments (query
    code, grade), for R and the ideal DCG.
    """

    window: Window
    list_query: IntArray
    list_segment: IntArray | None
    list_timestamp: IntArray
    list_key: IntArray
    row_list: IntArray
    row_grade: FloatArray
    row_judged: npt.NDArray[np.bool_]
    row_score: FloatArray | None
    duplicates: int
    query_names: npt.NDArray[np.str_]
    judged_queries: int
    segment_names: tuple[str, ...]
    judged_query: IntArray
    grade: FloatArray
    judgments_version: str
    judgments_path: str
    rows: int
    dropped_null: int
    newest_timestamp: datetime | None
    files_read: int
    runs_format: str  # "parquet" | "trec"
    judgments_format: str  # "parquet" | "trec"
