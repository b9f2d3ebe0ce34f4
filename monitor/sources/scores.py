"""Reading the scores of a window: as arrays (``read_scores``) or as mergeable summaries on a
frozen grid, one row group at a time (``read_summaries``)."""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from monitor.epoch import from_ns as _from_ns
from monitor.errors import MonitorError, SourceError
from monitor.sources.columns import (
    _compact_codes,
    _floats,
    _in_window,
    _Labels,
    _live,
    _null_label,
    _raise_bad_values,
    _read_group,
    _require_numeric,
    _segment,
    _segment_source,
    _select,
    _shrink,
    refuse_many_segments,
    too_many_segments,
)
from monitor.sources.footers import (
    _WHOLE,
    _WHOLE_BY_FILE,
    _WHOLE_MAX,
    _opened,
    _ts_stats,
    _ts_to_ns,
)
from monitor.sources.model import ScoreSpec, ScoreWindow, Window
from monitor.sources.partitions import _newest_checked, _overlaps, _Plan, _plan, _plan_file
from monitor.sources.paths import _File, _open_source, _Source, _Subtree, _walk_parts
from monitor.stats import Grid, ScoreSummary, summarize


@dataclass(frozen=True, slots=True)
class _Chunk:
    """One row group's scores in the window: the finite values (with their timestamps and
    segment codes when asked for), and the rows counted and dropped."""

    path: str
    rows: int
    null: int
    nan: int
    inf: int
    values: npt.NDArray[np.float64]
    stamps: npt.NDArray[np.int64] | None
    codes: npt.NDArray[np.int32] | None
    # the row group's [oldest, newest] timestamp (ns) from its statistics, given instead of
    # ``stamps`` when every row of it is kept (see ``_chunks``'s ``span_ok``)
    span: tuple[int, int] | None = None
    # with timestamps, when rows in the window were dropped (a null, NaN or infinite score,
    # or a null segment): their timestamps (ns), which say the buckets they count in
    dropped: npt.NDArray[np.int64] | None = None


@dataclass(frozen=True, slots=True)
class _Planned:
    source: _Source
    plans: list[_Plan]
    seg_sources: list[str | None]
    newest: int | None


def _prepare(
    spec: ScoreSpec, window: Window, *, newest: bool = True, source: _Source | None = None
) -> _Planned:
    """List the files and row groups of ``window`` and check their columns (no data read);
    ``newest``: also find the source's newest timestamp (one more partition walk); ``source``:
    the files already listed (an engine's task), not the spec's path walked again."""
    if not isinstance(window, Window):
        raise TypeError(f"`window` must be a Window; got {type(window).__name__}.")
    source = _open_source(spec) if source is None else source
    latest = (
        _newest_checked(source, spec.timestamp_column, spec.timestamp_unit)[0] if newest else None
    )
    plans = _plan(source, window, spec.timestamp_column, spec.timestamp_unit)
    seg_sources = [_check_columns(spec, plan) for plan in plans]
    return _Planned(source, plans, seg_sources, latest)


def _check_columns(spec: ScoreSpec, plan: _Plan) -> str | None:
    """The score (and rank) columns of a planned file are numeric; its segment source."""
    _require_numeric(plan.footer, plan.file, spec.score_column, "score", "score_column")
    if spec.rank_column is not None:
        _require_numeric(plan.footer, plan.file, spec.rank_column, "rank", "rank_column")
    return _segment_source(plan.footer, plan.file, spec.segment_column)


def _chunks(
    spec: ScoreSpec,
    window: Window,
    planned: _Planned,
    labels: _Labels,
    *,
    with_timestamps: bool,
    span_ok: Callable[[int, int], bool] | None = None,
) -> Iterator[_Chunk]:
    """The window's row groups one at a time: memory is one row group's, not the window's.

    With ``span_ok``, a row group inside the window, without segments, rank or deleted rows,
    whose statistics' span [oldest, newest] ``span_ok`` accepts, and all of whose scores are
    valid, comes with that ``span`` instead of its timestamps: every row is kept, so the span
    is exactly its rows' (decoding a timestamp column costs many times a score column's). Its
    timestamps are read when a score is not valid after all."""
    seg_col = spec.segment_column
    for plan, seg_in_file in zip(planned.plans, planned.seg_sources, strict=True):
        with _opened(planned.source, plan.file, plan.footer) as pf:
            for g, first, inside in zip(plan.groups, plan.starts, plan.inside, strict=True):
                span: tuple[int, int] | None = None
                if (
                    span_ok is not None
                    and inside
                    and seg_in_file is None
                    and seg_col is None
                    and spec.rank_column is None
                    and plan.file.deleted is None
                ):
                    lo, hi = plan.stats.lo[g], plan.stats.hi[g]
                    if lo is not None and hi is not None and span_ok(lo, hi):
                        span = (lo, hi)
                need_ts = (with_timestamps and span is None) or not inside
                columns = [spec.score_column]
                if need_ts:
                    columns.append(spec.timestamp_column)
                if seg_in_file is not None:
                    columns.append(seg_in_file)
                if spec.rank_column is not None:
                    columns.append(spec.rank_column)
                table = _read_group(pf, plan, g, columns)
                score, valid = _floats(table.column(spec.score_column))
                mask = (
                    None if inside else _in_window(table, spec.timestamp_column, plan.unit, window)
                )
                live = _live(plan.file, first, table.num_rows)  # a table's deleted rows: no rows
                if live is not None:
                    mask = live if mask is None else mask & live
                if spec.rank_column is not None:
                    rank, rank_valid = _floats(table.column(spec.rank_column))
                    top = rank == spec.top_rank
                    if rank_valid is not None:
                        top &= rank_valid
                    mask = top if mask is None else mask & top
                seg, seg_valid = _segment(table, plan.file, seg_col, labels, table.num_rows)
                in_rows = table.num_rows if mask is None else int(mask.sum())
                keep = mask
                for extra in (valid, seg_valid):
                    if extra is not None:
                        keep = extra if keep is None else keep & extra
                null = 0
                if keep is not None:
                    null = in_rows - int(keep.sum())
                    score = score[keep]
                finite = np.isfinite(score)
                nan = inf = 0
                if finite.all():
                    take = None
                    kept = score
                else:
                    bad = score[~finite]
                    nan = int(np.isnan(bad).sum())
                    inf = bad.size - nan
                    take = finite
                    kept = score[finite]
                stamps = None
                if span is not None and (keep is not None or take is not None):
                    span = None  # a score is not valid: the kept rows' own timestamps
                    table = _read_group(pf, plan, g, [spec.timestamp_column])
                dropped = None
                if with_timestamps and span is None:
                    ns = _ts_to_ns(table.column(spec.timestamp_column), plan.unit)
                    stamps = _select(ns, keep, take)
                    if kept.size < in_rows:
                        dropped = _dropped(ns, mask, keep, take)
                codes = None if seg is None else _select(seg, keep, take)
                if codes is not None and seg_col is not None:
                    refuse_many_segments(labels, codes, plan.file.path, seg_col)
                yield _Chunk(
                    plan.file.path, in_rows, null, nan, inf, kept, stamps, codes, span, dropped
                )


def _dropped(
    ns: npt.NDArray[np.int64],
    mask: npt.NDArray[np.bool_] | None,
    keep: npt.NDArray[np.bool_] | None,
    take: npt.NDArray[np.bool_] | None,
) -> npt.NDArray[np.int64]:
    """The timestamps of a row group's rows in the window (``mask``; None: all) that were not
    kept (``keep``, then ``take`` of those: what ``_select`` keeps)."""
    good = np.zeros(ns.size, dtype=bool)
    kept_at = np.flatnonzero(keep) if keep is not None else np.arange(ns.size)
    good[kept_at if take is None else kept_at[take]] = True
    return ns[~good if mask is None else mask & ~good]


def _check_invalid(
    spec: ScoreSpec,
    window: Window,
    rows: int,
    null: int,
    nan: int,
    inf: int,
    per_file: dict[str, int],
) -> None:
    if rows and (null + nan + inf) / rows > spec.max_invalid_share:
        _raise_bad_values(
            "score",
            spec.score_column,
            window,
            rows,
            {_null_label(spec.segment_column): null, "NaN": nan, "inf": inf},
            spec.max_invalid_share,
            per_file,
        )


def _thinned(spec: ScoreSpec, planned: _Planned, max_rows: int) -> _Planned:
    """Every k-th row group of the plan (k = ceil(rows / max_rows), in plan order) when it
    holds more than ``max_rows`` rows: a systematic sample across files and time."""
    total = sum(p.capacity for p in planned.plans)
    if total <= max_rows:
        return planned
    step = -(-total // max_rows)
    plans, seg_sources, i = [], [], 0
    for plan, seg in zip(planned.plans, planned.seg_sources, strict=True):
        keep = [j for j in range(len(plan.groups)) if (i + j) % step == 0]
        i += len(plan.groups)
        if not keep:
            continue
        groups = tuple(plan.groups[j] for j in keep)
        rows = _ts_stats(planned.source, plan.file, spec.timestamp_column, spec.timestamp_unit).rows
        plans.append(
            replace(
                plan,
                groups=groups,
                inside=tuple(plan.inside[j] for j in keep),
                # each kept group's first row too: left whole, the read's zip with the groups
                # raised on any file with a dropped group (and a table's deletes would have
                # been matched to the wrong rows)
                starts=tuple(plan.starts[j] for j in keep),
                capacity=sum(rows[g] for g in groups),
            )
        )
        seg_sources.append(seg)
    return _Planned(planned.source, plans, seg_sources, planned.newest)


def _no_cut_within(cuts: Sequence[int]) -> Callable[[int, int], bool]:
    """Whether no cut c has lo < c <= hi (the cuts at or below lo number those at or below hi)."""
    at = np.asarray(sorted(cuts), dtype=np.int64)

    def ok(lo: int, hi: int) -> bool:
        return bool(np.searchsorted(at, lo, side="right") == np.searchsorted(at, hi, side="right"))

    return ok


def read_scores(
    spec: ScoreSpec,
    window: Window,
    *,
    with_timestamps: bool = False,
    sample_rows: int | None = None,
    cuts: Sequence[int] | None = None,
    newest: bool = True,
) -> ScoreWindow:
    """Read the finite scores whose timestamp is in ``window`` (half-open, UTC).

    Only the row groups whose timestamp statistics overlap the window are read, and only the
    timestamp, score and segment columns; rows are copied straight into a preallocated float64
    array (no pandas). ``with_timestamps`` also returns the aligned timestamps (int64 ns, UTC), so
    a caller can read a long span once and slice it. Raises ``BadValuesError`` when
    ``dropped / rows > spec.max_invalid_share``. With ``spec.rank_column`` (a full result log)
    only the rows ranked ``spec.top_rank`` are scores, and only they count as rows.
    ``sample_rows``: read only every k-th row group so that about that many rows are read (a
    sample for a summary grid; None: every row). ``cuts`` (with ``with_timestamps``; int64 ns):
    the only instants the caller compares the timestamps with (t >= c). A row group wholly in
    the window that no cut splits (no c in (oldest, newest] of its statistics), without
    segments, rank or deleted rows and with every score valid, is read without its timestamp
    column, whose decoding costs several times the score column's; its rows carry its newest
    timestamp and ``coarse_spans`` lists it (``ScoreWindow``). ``newest``: also look up the
    source's newest timestamp (``newest_timestamp``; False: None, and no file outside the
    window is opened).
    """
    planned = _prepare(spec, window, newest=newest)
    if sample_rows is not None:
        planned = _thinned(spec, planned, sample_rows)
    seg_col = spec.segment_column
    capacity = sum(p.capacity for p in planned.plans)
    values = np.empty(capacity, dtype=np.float64)
    stamps = np.empty(capacity if with_timestamps else 0, dtype=np.int64)
    codes = np.empty(capacity if seg_col is not None else 0, dtype=np.int32)
    labels = _Labels(spec.max_segments)
    n = rows = n_null = n_nan = n_inf = 0
    per_file: dict[str, int] = {}
    span_ok = _no_cut_within(cuts) if with_timestamps and cuts is not None else None
    coarse: list[tuple[int, int]] = []
    for chunk in _chunks(
        spec, window, planned, labels, with_timestamps=with_timestamps, span_ok=span_ok
    ):
        rows += chunk.rows
        n_null += chunk.null
        n_nan += chunk.nan
        n_inf += chunk.inf
        if chunk.null + chunk.nan + chunk.inf:
            per_file[chunk.path] = per_file.get(chunk.path, 0) + chunk.null + chunk.nan + chunk.inf
        m = chunk.values.size
        values[n : n + m] = chunk.values
        if chunk.stamps is not None:
            stamps[n : n + m] = chunk.stamps
        elif with_timestamps and chunk.span is not None:
            stamps[n : n + m] = chunk.span[1]
            coarse.append(chunk.span)
        if chunk.codes is not None:
            codes[n : n + m] = chunk.codes
        n += m
    _check_invalid(spec, window, rows, n_null, n_nan, n_inf, per_file)
    values = _shrink(values, n)
    seg_codes: npt.NDArray[np.int32] | None = None
    seg_names: tuple[str, ...] = ()
    if seg_col is not None:
        seg_codes, seg_names = _compact_codes(_shrink(codes, n), labels.names())
    return ScoreWindow(
        window=window,
        values=values,
        timestamps=_shrink(stamps, n) if with_timestamps else None,
        segment_codes=seg_codes,
        segment_names=seg_names,
        rows=rows,
        dropped_nan=n_nan,
        dropped_inf=n_inf,
        dropped_null=n_null,
        newest_timestamp=None if planned.newest is None else _from_ns(planned.newest),
        files_read=len(planned.plans),
        coarse_spans=np.array(coarse, dtype=np.int64).reshape(-1, 2),
    )


@dataclass(frozen=True, slots=True)
class SummaryPart:
    """``read_summaries`` of some of a window's files, before the window's invalid-share check:
    the summaries, and the rows and null / NaN / infinite counts behind them (also per file),
    so that parts read apart (an engine's tasks) add up to the window exactly."""

    summaries: dict[tuple[str, int], ScoreSummary]
    rows: int
    null: int
    nan: int
    inf: int
    per_file: dict[str, int]
    # invalid rows in no summary: those in a bucket where their row group has no valid score
    unplaced: int = 0
    # ``unplaced`` by the bucket (its start, ns) each row falls in: a cached bucket carries its
    # own, and leaves the window with its hour
    unplaced_at: dict[int, int] = field(default_factory=dict)

    def __add__(self, other: SummaryPart) -> SummaryPart:
        merged = dict(self.summaries)
        for key, summary in other.summaries.items():
            merged[key] = merged[key] + summary if key in merged else summary
        per_file = dict(self.per_file)
        for path, k in other.per_file.items():
            per_file[path] = per_file.get(path, 0) + k
        unplaced_at = dict(self.unplaced_at)
        for b, k in other.unplaced_at.items():
            unplaced_at[b] = unplaced_at.get(b, 0) + k
        return SummaryPart(
            dict(sorted(merged.items())),
            self.rows + other.rows,
            self.null + other.null,
            self.nan + other.nan,
            self.inf + other.inf,
            per_file,
            self.unplaced + other.unplaced,
            dict(sorted(unplaced_at.items())),
        )


@dataclass(frozen=True, slots=True)
class FileStat:
    """A file that may hold rows of a window: its identity (path, size, mtime, ctime: a late or
    rewritten file changes it, as does a table's new deletion vector of it: ``deletes``), the
    span of its planned row groups' timestamps from their statistics (``oldest_ns`` /
    ``newest_ns``; None: unknown, it may hold any time) and their row count (an upper bound of
    the window's rows in it)."""

    path: str
    size: int
    mtime_ns: int
    oldest_ns: int | None
    newest_ns: int | None
    rows: int
    deletes: str = ""  # a table's deleted rows of the file (a digest; "" when none)
    ctime_ns: int = 0  # a local file's status change time (``_File.ctime_ns``; 0 elsewhere)


def files_digest(files: Iterable[FileStat]) -> str:
    """The digest of files (in the order given; callers sort by path): blake2b-128 of each
    file's path, size, mtime, ctime (local files) and deleted rows. The ctime catches a
    rewrite of the same size whose mtime was set back. A bucket's fingerprint and a fixed
    reference's identity alike."""
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        # a file without deleted rows digests as it did before ``deletes`` existed
        tail = f"\0{f.deletes}" if f.deletes else ""
        h.update(f"{f.path}\0{f.size}\0{f.mtime_ns}\0{f.ctime_ns}{tail}\n".encode())
    return h.hexdigest()


def window_file_stats(
    spec: ScoreSpec, window: Window, *, parts: Sequence[Window] | None = None
) -> list[FileStat]:
    """The files of ``window`` (as ``window_files``) with their identity and timestamp span,
    from the cached footers only (no data is read). ``parts``: the windows inside ``window``
    whose partitions are walked (default: all of it): a check's two windows with a gap
    between them (``windows.gap``, a fixed reference) never plan the gap's partitions, which
    the whole-window reader never opens (a damaged file there once made the check an error).

    A check asks this of every file of its windows each time, and all but the newest are
    unchanged: a file planned whole before (same path, size, mtime and columns) that lies
    inside the window again is not planned again (``_WHOLE``), and a watched partition that
    the walk hands out whole (``paths._Subtree``, the same object while nothing in it changed)
    gives the same list as last time in one look-up."""
    if not isinstance(window, Window):
        raise TypeError(f"`window` must be a Window; got {type(window).__name__}.")
    source = _open_source(spec)
    columns = (
        spec.timestamp_column,
        spec.timestamp_unit,
        spec.score_column,
        spec.rank_column,
        spec.segment_column,
    )
    planned = (source.fs.type_name, *columns)
    out: list[FileStat] = []
    wanted = tuple(parts) if parts else (window,)
    walk = _walk_parts(
        source,
        (lambda interval: _overlaps(interval, window))
        if len(wanted) == 1
        else (lambda interval: any(_overlaps(interval, w) for w in wanted)),
        within=tuple((w.start_ns, w.end_ns) for w in wanted),
    )
    for item in walk:
        if not isinstance(item, _Subtree):
            stat, _ = _file_stat(spec, source, item, window, planned)
            if stat is not None:
                out.append(stat)
            continue
        held = _WHOLE_BY_FILE.get(item, planned)
        if held is not None:
            out.extend(held)
            continue
        stats, every = [], True
        for f in item.files:
            stat, whole = _file_stat(spec, source, f, window, planned)
            every = every and whole
            if stat is not None:
                stats.append(stat)
        if every and item.token is not None:  # kept: the same list while the subtree is
            _remember(item, planned, stats)
        out.extend(stats)
    return out


def _remember(item: _File | _Subtree, planned: tuple[object, ...], value: Any) -> None:
    _WHOLE_BY_FILE.put(item, planned, value)


def _file_stat(
    spec: ScoreSpec, source: _Source, f: _File, window: Window, planned: tuple[object, ...]
) -> tuple[FileStat | None, bool]:
    """One file's ``FileStat`` for ``window`` (None: it holds no row of it), and whether it
    was planned whole and lies inside the window (then it is remembered by ``f``)."""
    start, end = window.start_ns, window.end_ns
    hit: FileStat | None = _WHOLE_BY_FILE.get(f, planned)
    whole: FileStat | None = hit
    if hit is not None:
        deletes = hit.deletes
    else:
        deletes = "" if f.deleted is None else _digest(f.deleted)
        whole = _WHOLE.get((*planned, *f.identity, deletes))
    if whole is not None:
        assert whole.oldest_ns is not None
        assert whole.newest_ns is not None
        if whole.newest_ns < start or whole.oldest_ns >= end:
            return None, False
        if whole.oldest_ns >= start and whole.newest_ns < end:
            if hit is None:
                _remember(f, planned, whole)
            return whole, True
    plan = _plan_file(source, f, window, spec.timestamp_column, spec.timestamp_unit)
    if plan is None:
        return None, False
    _check_columns(spec, plan)
    stats = plan.stats
    if stats.clean and len(plan.groups) == len(stats.rows):  # the whole file
        stat = FileStat(
            f.path,
            f.size,
            f.mtime_ns,
            stats.oldest,
            stats.newest,
            plan.capacity,
            deletes,
            f.ctime_ns,
        )
        if len(_WHOLE) >= _WHOLE_MAX:
            _WHOLE.clear()
        _WHOLE[(*planned, *f.identity, deletes)] = stat
        return stat, False
    # a row group of null timestamps only holds no row of any window: its unknown span would
    # put the file in every bucket's fingerprint (a late file of them re-read both windows)
    groups = [
        g
        for g in plan.groups
        if stats.lo[g] is not None or (nulls := stats.nulls[g]) is None or nulls < stats.rows[g]
    ]
    if not groups:
        return None, False
    lo = [stats.lo[g] for g in groups]
    hi = [stats.hi[g] for g in groups]
    known = all(x is not None for x in lo + hi)
    return (
        FileStat(
            f.path,
            f.size,
            f.mtime_ns,
            min(x for x in lo if x is not None) if known else None,
            max(x for x in hi if x is not None) if known else None,
            plan.capacity,
            deletes,
            f.ctime_ns,
        ),
        False,
    )


def _digest(deleted: npt.NDArray[np.int64]) -> str:
    """A file's deleted row positions, digested (they change with each new deletion vector)."""
    return f"{deleted.size}:{hashlib.blake2b(deleted.tobytes(), digest_size=8).hexdigest()}"


def window_files(spec: ScoreSpec, window: Window) -> list[str]:
    """The files that may hold rows of ``window`` (after hive and statistics pruning), each
    once, in order: what an engine hands out to its tasks."""
    return [p.file.path for p in _prepare(spec, window).plans]


def read_summaries(
    spec: ScoreSpec, window: Window, grid: Grid, *, bucket: timedelta | None = None
) -> dict[tuple[str, int], ScoreSummary]:
    """The window's scores as mergeable summaries on ``grid``, read one row group at a time
    (memory is a row group's, whatever the window's length): one per (segment, bucket start in
    ns since the epoch), the buckets being ``bucket``-long slices of the window from its start
    (None: one bucket, the whole window); segment "" without a segment column. The same rows,
    invalid counts and ``BadValuesError`` as ``read_scores``. A null, NaN or infinite score
    counts in the ``rows`` and ``invalid`` of its own bucket, in its row group's first segment
    name there, the same whichever engine or partitioning reads it (in a bucket where its row
    group has no valid score it counts in none: ``read_summary_part``'s ``unplaced``);
    ``newest_ns`` is a summary's newest score's timestamp.
    """
    part = read_summary_part(spec, window, grid, bucket=bucket)
    check_summary_part(spec, window, part)
    return part.summaries


def merge_summary_parts(
    spec: ScoreSpec,
    window: Window,
    grid: Grid,
    parts: list[SummaryPart],
    *,
    bucket: timedelta | None = None,
    check: bool = True,
) -> SummaryPart:
    """The window's part from its files' parts (an engine's tasks), checked once for the
    window's invalid share (unless not ``check``: the caller checks a wider window); no part
    (no file holds the window) is the empty window's."""
    if not parts:
        part = read_summary_part(spec, window, grid, bucket=bucket)
    else:
        part = parts[0]
        for other in parts[1:]:
            part = part + other
    if check:
        check_summary_part(spec, window, part)
    return part


class SegmentBound:
    """The window's ``max_segments`` over an engine's parts, file by file in planned order:
    each task reads its own files and bounds only those, so a window whose files each hold
    few segments but together too many was summarised whole on Dask and Spark, and failed
    later with another message, where a local read refuses it at the file that passes the
    bound. The driver adds each file's segments (``add``) until one would pass the bound or
    its task failed, then ``refuse`` reads that file again as a local read of the window
    reaches it, the segments before it counted, and raises what that read raises: the local
    read's error, its count row group by row group included."""

    def __init__(self, spec: ScoreSpec) -> None:
        self.spec = spec
        self.names: set[str] = set()

    @property
    def bounded(self) -> bool:
        return self.spec.max_segments is not None and self.spec.segment_column is not None

    def passes(self, names: Iterable[str]) -> bool:
        """Whether a file of segments ``names`` passes the bound (they are not added)."""
        limit = self.spec.max_segments
        return self.bounded and limit is not None and len(self.names.union(names)) > limit

    def add(self, names: Iterable[str]) -> None:
        if self.bounded:
            self.names.update(names)

    def admit(
        self,
        names: Iterable[str],
        window: Window,
        grid: Grid,
        bucket: timedelta | None,
        task: SummaryTask,
    ) -> None:
        """Add the segments of ``task``'s file, or ``refuse`` there if they pass the bound."""
        names = list(names)
        if self.passes(names):
            self.refuse(window, grid, bucket, task)
        self.add(names)

    def refuse(
        self,
        window: Window,
        grid: Grid,
        bucket: timedelta | None,
        task: SummaryTask,
        error: BaseException | None = None,
    ) -> NoReturn:
        """Raise what a local read of ``window`` raises at ``task``'s file (``error``: what
        its task raised, raised when the read raises nothing, as when the bound is off)."""
        if self.bounded:
            read_summary_part(
                self.spec, window, grid, bucket=bucket, task=task, seen_segments=self.names
            )
        if error is not None:
            raise error
        # the file read whole again was not refused (it changed since): the task's count
        raise too_many_segments(
            f"more than {self.spec.max_segments} distinct segments",
            self.spec.max_segments,
            task.path,
            self.spec.segment_column,
        )


def segment_names(part: SummaryPart) -> set[str]:
    """The segments ``part`` holds rows of."""
    return {name for name, _ in part.summaries}


def check_summary_part(spec: ScoreSpec, window: Window, part: SummaryPart) -> None:
    """``BadValuesError`` when the window's invalid share exceeds ``max_invalid_share``."""
    _check_invalid(spec, window, part.rows, part.null, part.nan, part.inf, part.per_file)


@dataclass(frozen=True, slots=True)
class SummaryTask:
    """One file of a window as the caller planned it, for an engine's task: the task reads that
    file (its hive partitions, table statistics and deletes as listed) without listing the
    source again, so a window of n files costs each task one footer, not a walk of n files."""

    path: str
    source: _Source


def window_tasks(spec: ScoreSpec, window: Window) -> list[SummaryTask]:
    """The files of ``window`` (as ``window_files``), each as a task for ``read_summary_part``."""
    planned = _prepare(spec, window, newest=False)
    return [
        SummaryTask(p.file.path, replace(planned.source, files=(p.file,))) for p in planned.plans
    ]


def read_summary_part(
    spec: ScoreSpec,
    window: Window,
    grid: Grid,
    *,
    bucket: timedelta | None = None,
    files: frozenset[str] | None = None,
    task: SummaryTask | None = None,
    seen_segments: Iterable[str] = (),
) -> SummaryPart:
    """``read_summaries`` of the window's ``files`` only (None: all), or of one planned ``task``,
    without the window's invalid-share check (the caller adds the parts up and checks once).
    ``seen_segments``: segments the window's files before these had rows of (counted against
    ``max_segments`` as a read of the whole window counts them; ``SegmentBound.refuse``)."""
    if bucket is not None and bucket <= timedelta(0):
        raise ValueError(f"`bucket` must be a positive duration; got {bucket!r}.")
    # no newest-timestamp walk: a summary's newest row is its own, and a check through
    # summaries looks the source's newest up itself only when both windows are empty; the
    # walk would open partitions after the window, which an engine's planned tasks never do
    planned = _prepare(spec, window, newest=False, source=None if task is None else task.source)
    if files is not None:
        keep = [i for i, p in enumerate(planned.plans) if p.file.path in files]
        if spec.format != "parquet" and len(keep) < len(files):
            gone = sorted(files - {planned.plans[i].file.path for i in keep})
            raise SourceError(
                f"was planned from another snapshot of the table: {len(gone)} of its files "
                f"({', '.join(gone[:3])}) are not in the snapshot read now (a commit since)",
                path=spec.path,
                hint="pin the snapshot for the tasks (monitor.sources.pin_snapshot); the next "
                "check reads the new one",
            )
        planned = _Planned(
            planned.source,
            [planned.plans[i] for i in keep],
            [planned.seg_sources[i] for i in keep],
            planned.newest,
        )
    labels = _Labels(spec.max_segments)
    for name in seen_segments:
        labels.code(name)
    labels.used = np.ones(len(labels.codes), dtype=np.bool_)
    # each (segment, bucket)'s summary, added to as its row groups come: memory is a summary
    # a part, not one a row group (400 row groups an hour held 110 MiB on an 18k-point grid)
    parts: dict[tuple[int, int], ScoreSummary] = {}

    def add(key: tuple[int, int], summary: ScoreSummary) -> None:
        held = parts.get(key)
        parts[key] = summary if held is None else held + summary

    rows = n_null = n_nan = n_inf = orphan = 0
    per_file: dict[str, int] = {}
    unplaced_at: dict[int, int] = {}
    start = window.start_ns
    step = None if bucket is None else bucket // timedelta(microseconds=1) * 1_000

    def one_bucket(lo: int, hi: int) -> bool:  # a row group all of whose rows go to one part
        return step is None or (lo - start) // step == (hi - start) // step

    for chunk in _chunks(spec, window, planned, labels, with_timestamps=True, span_ok=one_bucket):
        rows += chunk.rows
        bad = chunk.null + chunk.nan + chunk.inf
        n_null += chunk.null
        n_nan += chunk.nan
        n_inf += chunk.inf
        # each invalid row counts in its own bucket (a row group may span a day of them)
        bad_at: dict[int, int] = {}
        if bad:
            per_file[chunk.path] = per_file.get(chunk.path, 0) + bad
            assert chunk.dropped is not None
            assert chunk.dropped.size == bad
            at_b = np.zeros(bad, np.int64) if step is None else (chunk.dropped - start) // step
            b_of, b_counts = np.unique(at_b, return_counts=True)
            bad_at = dict(zip(b_of.tolist(), b_counts.tolist(), strict=True))
        if chunk.values.size == 0:  # every row invalid: in no summary (``SummaryPart.unplaced``)
            orphan += _unplace(bad_at, unplaced_at, start, step)
            continue
        if chunk.codes is None:
            if chunk.span is not None:  # every row kept: the statistics' span is theirs
                oldest, newest = chunk.span
            else:
                assert chunk.stamps is not None
                oldest, newest = int(chunk.stamps.min()), int(chunk.stamps.max())
            if one_bucket(oldest, newest):  # one part: nothing to split
                first_b = 0 if step is None else (oldest - start) // step
                invalid = bad_at.pop(first_b, 0)
                orphan += _unplace(bad_at, unplaced_at, start, step)
                add((0, first_b), summarize(chunk.values, grid, invalid=invalid, newest_ns=newest))
                continue
        assert chunk.stamps is not None  # a span is given only for a row group of one part
        # key = segment code * slots + bucket: (segment, bucket) in order, in a small range
        slots = 1 if step is None else -(-(window.end_ns - start) // step)
        key = (chunk.stamps - start) // step if step is not None else None
        if chunk.codes is not None:
            seg_key = chunk.codes.astype(np.int64) * slots
            key = seg_key if key is None else seg_key + key
        assert key is not None
        low = int(key.min())
        sizes = np.bincount(key - low)
        uniq = np.flatnonzero(sizes) + low
        values, stamps = chunk.values, chunk.stamps
        if uniq.size > 1 and not bool(np.all(key[1:] >= key[:-1])):
            # grouped by one stable sort, not one pass per key (a row group may span a day
            # of hourly buckets in several segments); time-ordered rows need none
            order = np.argsort(key, kind="stable")
            values, stamps = values[order], stamps[order]
        ends = np.cumsum(sizes[sizes > 0])
        # a bucket's invalid scores count in the row group's first segment name there: an
        # order of names, not of codes, so every engine's tasks attribute them alike
        invalid_of: dict[int, int] = {}
        if bad_at:
            names_now = labels.names()
            firsts: dict[int, tuple[str, int]] = {}
            for k in uniq.tolist():
                name = names_now[k // slots] if spec.segment_column is not None else ""
                b = k % slots
                if b not in firsts or (name, k) < firsts[b]:
                    firsts[b] = (name, k)
            for b in [b for b in bad_at if b in firsts]:
                invalid_of[firsts[b][1]] = bad_at.pop(b)
            orphan += _unplace(bad_at, unplaced_at, start, step)
        for k, end in zip(uniq.tolist(), ends.tolist(), strict=True):
            sel = slice(end - int(sizes[k - low]), end)  # the rows of key k, grouped
            s_code, b = divmod(int(k), slots)
            part = summarize(
                values[sel],
                grid,
                invalid=invalid_of.get(k, 0),
                newest_ns=int(stamps[sel].max()),
            )
            add((s_code, b), part)
    names = labels.names() if spec.segment_column is not None else [""]
    out: dict[tuple[str, int], ScoreSummary] = {}
    for (s_code, b), total in parts.items():
        key2 = (names[s_code], start + b * (step or 0))
        out[key2] = out[key2] + total if key2 in out else total
    return SummaryPart(
        dict(sorted(out.items())),
        rows,
        n_null,
        n_nan,
        n_inf,
        per_file,
        orphan,
        dict(sorted(unplaced_at.items())),
    )


def _unplace(
    bad_at: dict[int, int], unplaced_at: dict[int, int], start: int, step: int | None
) -> int:
    """Count the invalid rows of ``bad_at`` (by bucket index) as unplaced, by their bucket's
    start (ns); returns how many."""
    for b, n in bad_at.items():
        at = start + b * (step or 0)
        unplaced_at[at] = unplaced_at.get(at, 0) + n
    return sum(bad_at.values())


def summary_part_batches(
    payload: bytes, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """For an engine that hands a task its files as Arrow batches of paths (Spark's
    ``mapInArrow``): ``payload`` is the pickled (spec, window, grid, bucket, tasks by path);
    one row ``part`` holding the pickled sum of the ``read_summary_part`` of each path's task,
    read in planned order (the executor adds its files' parts, so the driver collects one part
    a task, not one a file), or the ``MonitorError`` the first bad file's reading raised (to
    be raised again, unchanged, by the caller), each with the segment names of every path read
    (for ``SegmentBound``), and ``index``, the planned index of its first file or of the bad
    one. A task of no path yields nothing."""
    spec, window, grid, bucket, tasks = pickle.loads(payload)
    order = {path: i for i, path in enumerate(tasks)}
    paths = sorted((p for b in batches for p in b.column(0).to_pylist()), key=order.__getitem__)
    total: SummaryPart | None = None
    names: dict[str, list[str]] = {}
    for path in paths:  # in planned order: the first bad file is the one a local read names
        try:
            part = read_summary_part(spec, window, grid, bucket=bucket, task=tasks[path])
        except MonitorError as exc:  # with the names of the files before it
            got = pickle.dumps((exc, names))
            yield pa.RecordBatch.from_pylist([{"index": order[path], "part": got}])
            return
        names[path] = sorted(segment_names(part))
        total = part if total is None else total + part
    if total is not None:
        got = pickle.dumps((total, names))
        yield pa.RecordBatch.from_pylist([{"index": order[paths[0]], "part": got}])
