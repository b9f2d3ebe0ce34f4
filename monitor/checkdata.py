"""What a check reads: its windows, the reader it reads them with, and the small shapes of what
it read (the runs not looked at yet, split scores, paired outcomes as the verdict takes them).

``check_windows`` places a slot's reference and current windows (every caller: the runner,
backtest, the summary checks); ``ParquetReader`` is the runner's default ``DataReader`` (tests
and backtest's replay hand it others). ``monitor.jobs.Runner`` composes these with the
verdict.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from monitor.config import MonitorConfig
from monitor.epoch import from_ns as _from_ns
from monitor.epoch import rfc3339 as _iso
from monitor.judged import judged_outcomes
from monitor.sources import (
    OutcomeSpec,
    OutcomeWindow,
    PairedOutcomes,
    ScoreSpec,
    ScoreWindow,
    Window,
    files_digest,
    read_outcomes,
    read_run_times,
    read_scores,
    window_file_stats,
)
from monitor.stats import BaselinePositions, DriftBaseline
from monitor.verdict import JudgedCheck, Pairs, Verdict


def check_windows(monitor: MonitorConfig, at: datetime) -> tuple[Window, Window]:
    """(reference, current) windows for slot ``at``.

    Current ``[at - current, at)``; reference rolling ``[cs - gap - reference, cs - gap)`` (``cs``
    the current start) or the fixed ``[reference_start, min(reference_end, cs))``: a check
    before ``reference_end`` (a backtest, a daemon started within it) compares with the part
    logged before its current window, never with the current window's rows or rows after the
    slot. A fixed reference that begins at or after ``cs`` is returned whole; no check reads it
    (``Runner`` decides ``insufficient_data``, see ``_reference_ahead``).
    """
    w = monitor.windows
    current = Window(start=at - w.current, end=at)
    if w.reference_start is not None and w.reference_end is not None:
        end = min(w.reference_end, current.start) if w.reference_start < current.start else None
        reference = Window(start=w.reference_start, end=end or w.reference_end)
    else:
        assert w.reference is not None
        end = current.start - w.gap
        reference = Window(start=end - w.reference, end=end)
    return reference, current


class DataReader(Protocol):
    """Where a runner gets its windows (parquet by default; the backtest slices a cache)."""

    def scores(
        self,
        spec: ScoreSpec,
        window: Window,
        *,
        with_timestamps: bool,
        cuts: Sequence[int] | None = None,
    ) -> ScoreWindow:
        """The scores of ``window``; ``cuts``: the only instants (ns) the check compares their
        timestamps with, which lets a reader skip decoding them (``read_scores``)."""
        ...

    def outcomes(self, spec: OutcomeSpec, window: Window) -> OutcomeWindow: ...

    def outcome_times(self, spec: OutcomeSpec, window: Window) -> np.ndarray:
        """Timestamps (int64 ns) of the outcome rows in ``window``, for splitting into runs."""
        ...

    def positions(
        self, spec: ScoreSpec, window: Window, segment: str, baseline: DriftBaseline
    ) -> BaselinePositions | None:
        """The current window's positions in a frozen ``baseline``, when the reader has them
        precomputed (the backtest's cache); None makes the verdict locate the scores itself."""
        ...

    def identity(self, spec: ScoreSpec, window: Window) -> str:
        """What ``scores`` of ``window`` would hold, as a digest that changes with it (a late,
        removed or rewritten file): a fixed reference's frozen baseline is kept while it
        stays the same."""
        ...


class ParquetReader:
    """Reads every window from parquet through ``monitor.sources``."""

    def scores(
        self,
        spec: ScoreSpec,
        window: Window,
        *,
        with_timestamps: bool,
        cuts: Sequence[int] | None = None,
    ) -> ScoreWindow:
        return read_scores(spec, window, with_timestamps=with_timestamps, cuts=cuts)

    def outcomes(self, spec: OutcomeSpec, window: Window) -> OutcomeWindow:
        if spec.judged is not None:
            return judged_outcomes(spec, window)
        return read_outcomes(spec, window)

    def outcome_times(self, spec: OutcomeSpec, window: Window) -> np.ndarray:
        return read_run_times(spec, window)

    def positions(
        self, spec: ScoreSpec, window: Window, segment: str, baseline: DriftBaseline
    ) -> BaselinePositions | None:
        return None

    def identity(self, spec: ScoreSpec, window: Window) -> str:
        """blake2b-128 of the window's files (path, size, mtime, ctime, deleted rows), in
        path order, from the cached footers: no data read."""
        return files_digest(sorted(window_file_stats(spec, window), key=lambda f: f.path))


def _no_scores(window: Window) -> ScoreWindow:
    """The empty score window a check through summaries stands in for the arrays."""
    return ScoreWindow(
        window=window,
        values=_EMPTY,
        timestamps=_EMPTY_TS,
        segment_codes=None,
        segment_names=(),
        rows=0,
        dropped_nan=0,
        dropped_inf=0,
        dropped_null=0,
        newest_timestamp=None,
        files_read=0,
    )


def _takes_cuts(reader: DataReader) -> bool:
    """Whether ``reader.scores`` takes ``cuts`` (a reader written before it does not; it is
    then asked for every timestamp, as before)."""
    try:
        params = inspect.signature(reader.scores).parameters
    except (TypeError, ValueError):  # no signature to read: the old call is the safe one
        return False
    return "cuts" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _split_scores(window: ScoreWindow) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    ts = window.timestamps
    if window.segment_codes is None:
        return {"": (window.values, ts)}
    # one stable sort, not a mask a segment: rows x segments once made a check of a column of
    # many values (a request id as the segment) run for minutes before max_segments refused it
    order = np.argsort(window.segment_codes, kind="stable")  # file order kept within a segment
    bounds = np.searchsorted(window.segment_codes[order], np.arange(len(window.segment_names) + 1))
    out = {}
    for code, name in enumerate(window.segment_names):
        rows = order[bounds[code] : bounds[code + 1]]
        if rows.size:
            out[name] = (window.values[rows], ts[rows] if ts is not None else None)
    return out


def _judged_check(
    monitor: MonitorConfig, ref: OutcomeWindow, cur: OutcomeWindow | None
) -> JudgedCheck | None:
    spec = monitor.outcomes.judged
    if spec is None or ref.judged is None:
        return None
    info = ref.judged
    return JudgedCheck(
        metric=info.metric,
        judged_metric=info.judged_metric,
        judged_tolerance=spec.judged_tolerance,
        condensed=info.condensed,
        reference=info,
        current=None if cur is None else cur.judged,
    )


def _pairs(p: PairedOutcomes) -> Pairs:
    return Pairs(
        reference=p.reference,
        current=p.current,
        only_reference=p.only_reference,
        only_current=p.only_current,
        query_ids=p.query_ids,
        extras={k: (v, p.current_extras[k]) for k, v in p.reference_extras.items()},
        reference_runs=p.reference_runs,
        current_runs=p.current_runs,
    )


@dataclass(frozen=True, slots=True)
class _Runs:
    count: int
    new: Window | None
    end: datetime | None
    newest: datetime | None
    rows: int = 0  # rows in [new.start - run_gap, end] (0: the lookback does not cover it)
    late: int = 0  # rows landed since the last look in that look's span


def _newest(*arrays: np.ndarray | None) -> datetime | None:
    for arr in arrays:
        if arr is not None and arr.size:
            return _from_ns(int(arr.max()))
    return None


def _rows_in(ts: np.ndarray, lo: int, hi: int) -> int:
    """How many of the sorted times ``ts`` lie in ``[lo, hi]`` (ns)."""
    return int(np.searchsorted(ts, hi, "right") - np.searchsorted(ts, lo))


def _before(at: datetime, when: datetime | None) -> datetime | None:
    """``when`` if it is before ``at`` (a replay's source holds rows after its slot)."""
    return when if when is not None and when < at else None


def _judgment_versions(*windows: OutcomeWindow) -> list[str]:
    """The distinct judgment versions (name and content fingerprint) the windows were scored
    with, in order; one or none when they agree."""
    seen: list[str] = []
    for w in windows:
        if w.judged is not None and w.judged.judgments_version not in seen:
            seen.append(w.judged.judgments_version)
    return seen


def _empty_outcomes(like: OutcomeWindow, window: Window) -> OutcomeWindow:
    return replace(
        like,
        window=window,
        query_ids=like.query_ids[:0],
        segments=None if like.segments is None else like.segments[:0],
        outcomes=like.outcomes[:0],
        counts=like.counts[:0],
        runs=None if like.runs is None else like.runs[:0],
        rows=0,
        dropped_nan=0,
        dropped_inf=0,
        dropped_null_query=0,
        dropped_null=0,
        files_read=0,
        extras={},
        judged=None,
    )


_EMPTY = np.empty(0, dtype=np.float64)
_EMPTY_TS = np.empty(0, dtype=np.int64)


def _reference_ahead(monitor: MonitorConfig, at: datetime) -> Verdict | None:
    """The verdict of a slot whose fixed reference begins at or after its current window's
    start: nothing to compare with yet (``insufficient_data``, the state kept as it is)."""
    w = monitor.windows
    if w.reference_start is None or w.reference_end is None or w.reference_start < at - w.current:
        return None  # rolling (both bounds are set together), or already behind the window
    # the first slot whose current window begins after reference_start (the one at
    # reference_start + current still begins at it: it once named itself as the first)
    since = _iso(monitor.schedule.next_slot(w.reference_start + w.current))
    reason = (
        f"the fixed reference [{_iso(w.reference_start)}, {_iso(w.reference_end)}) begins at or "
        f"after this check's current window [{_iso(at - w.current)}, {_iso(at)}): checks "
        f"compare with it from {since} on"
    )
    return Verdict(monitor=monitor.name, at=at, state="insufficient_data", reasons=(reason,))


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
