"""Public value types of the sources package: windows, source specs and what a read returns.

No pyarrow here: these are the types the rest of ``monitor`` passes around."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt

TimeUnit: TypeAlias = Literal["s", "ms", "us", "ns"]


FloatArray: TypeAlias = npt.NDArray[np.float64]


IntArray: TypeAlias = npt.NDArray[np.int64]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_NS_PER: dict[str, int] = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


def _to_ns(moment: datetime) -> int:
    """Nanoseconds since the Unix epoch of a timezone-aware datetime (exact, microsecond input)."""
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1_000


def _from_ns(ns: int) -> datetime:
    """UTC datetime of ``ns`` nanoseconds since the epoch (floored to microseconds)."""
    return _EPOCH + timedelta(microseconds=ns // 1_000)


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open time window ``[start, end)``; both ends are stored as UTC datetimes.

    Raises ``ValueError`` if an end is not a timezone-aware ``datetime`` or ``start >= end``.
    """

    start: datetime
    end: datetime

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

    @property
    def start_ns(self) -> int:
        """``start`` in nanoseconds since the Unix epoch."""
        return _to_ns(self.start)

    @property
    def end_ns(self) -> int:
        """``end`` in nanoseconds since the Unix epoch (excluded from the window)."""
        return _to_ns(self.end)

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
    """

    path: str
    timestamp_column: str = "timestamp"
    score_column: str = "score"
    segment_column: str | None = None
    timestamp_unit: TimeUnit | None = None
    max_invalid_share: float = 0.01
    prune_partitions: bool = True

    def __post_init__(self) -> None:
        _validate_spec(
            self,
            {
                "timestamp_column": self.timestamp_column,
                "score_column": self.score_column,
                "segment_column": self.segment_column,
            },
        )


@dataclass(frozen=True, slots=True)
class OutcomeSpec:
    """Where the outcome log (one row per evaluation of a labelled query) lives, and its columns."""

    path: str
    timestamp_column: str = "timestamp"
    query_column: str = "query_id"
    outcome_column: str = "outcome"
    segment_column: str | None = None
    timestamp_unit: TimeUnit | None = None
    max_invalid_share: float = 0.01
    prune_partitions: bool = True

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


@dataclass(frozen=True, slots=True)
class ScoreWindow:
    """The scores of one window.

    ``rows`` counts every row whose timestamp is in the window. Of those, rows with a null score or
    a null segment are counted in ``dropped_null``, then NaN scores in ``dropped_nan`` and infinite
    ones in ``dropped_inf``; ``len(values) == rows - dropped_null - dropped_nan - dropped_inf``.
    Rows with a null timestamp belong to no window. ``segment_names`` lists, sorted, the segments
    with at least one value; ``segment_codes[i]`` indexes it. ``newest_timestamp`` is the newest
    timestamp in the whole source (``None`` if it holds none), for freshness alerts.
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

    @property
    def dropped(self) -> int:
        """All dropped rows."""
        return self.dropped_null_query + self.dropped_null + self.dropped_nan + self.dropped_inf


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
            )
        return result


def _or_empty(arr: npt.NDArray[np.str_] | None) -> npt.NDArray[np.str_]:
    return np.empty(0, dtype=np.str_) if arr is None else arr
