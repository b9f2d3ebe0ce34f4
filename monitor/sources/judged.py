"""Reading ranked runs (``outcomes.kind = "judged_runs"``): placed lists joined to judgments.

Runs: parquet with ``timestamp`` (of the evaluation run), ``query_id``, ``doc_id``, ``rank``
and/or ``score`` (and the segment column, if set), read in batches into arrays sized from the
footers, each batch's documents coded and joined to the judgments as it arrives; or TREC run
files (``monitor.sources.textfiles``). The judgments come from ``monitor.sources.judgments``;
placement, de-duplication and the join's rules from ``monitor.sources.ranked``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from monitor.epoch import from_ns as _from_ns
from monitor.errors import SchemaError
from monitor.sources import footers
from monitor.sources.columns import (
    KeptByRows,
    _floats,
    _in_window,
    _live,
    _memo,
    _raise_bad_values,
    _read_groups,
    _require_label,
    _require_numeric,
    _rows_key,
)
from monitor.sources.footers import (
    _Footer,
    _native_bounds,
    _opened,
    _ts_native,
    _ts_stats,
    _ts_to_ns,
    refuse_nul,
)
from monitor.sources.judgments import (
    _BATCH,
    _Judgments,
    _load_judgments,
    _name_codes,
    _one_array,
    _strings,
    _valid,
)
from monitor.sources.model import FloatArray, IntArray, JudgedRuns, JudgedSpec, OutcomeSpec, Window
from monitor.sources.partitions import _newest_checked, _Plan, _plan
from monitor.sources.paths import HIVE_NULL, _File, _open_source, _Source
from monitor.sources.ranked import (
    IdKeys,
    RowIds,
    duplicates,
    id_keys,
    join,
    placement,
)
from monitor.sources.textfiles import _is_trec, _line_count, _tokens, _trec_files
from monitor.sources.translate import _translate


@dataclass(frozen=True, slots=True)
class _RunRows:
    """Run rows in read order, coded: ``query`` by ``_Coder`` (judged queries first),
    ``segment`` into ``segment_names``; ``docs`` the document ids (fingerprints, and the
    bytes in Arrow); ``grade`` each row's judgment (joined batch by batch)."""

    run: npt.NDArray[np.int32]  # code of the row's timestamp in ``stamps``
    stamps: IntArray
    query: npt.NDArray[np.int32]
    docs: RowIds
    grade: npt.NDArray[np.signedinteger[Any]]  # code into the judgments' grade values
    rank: FloatArray | None
    score: FloatArray | None
    segment: npt.NDArray[np.int32] | None
    rows: int
    dropped_null: int
    files_read: int
    fmt: str


class _Coder:
    """Codes query ids against the judgments' (0 .. J - 1, in their order) and gives queries
    only the runs have, and segments, the next codes in order of appearance. A batch's query
    ids come as a dictionary array (read so from parquet, or ``dictionary_encode``-d): its
    distinct values are looked up once, and again only when the dictionary changes (a row
    group's batches share one)."""

    def __init__(self, judgments: _Judgments) -> None:
        self.judgments = judgments
        self.extra: dict[str, int] = {}
        self.segments: dict[str, int] = {}
        self._last: tuple[pa.Array, npt.NDArray[np.int32]] | None = None

    def queries(self, ids: pa.Array, path: str, column: str | None) -> npt.NDArray[np.int32]:
        """The codes of a batch of non-null query ids (of file ``path``, ``column``; one
        holding a NUL character is a ``SchemaError``)."""
        if (
            pa.types.is_dictionary(ids.type)
            and pa.types.is_string(ids.type.value_type)
            and ids.dictionary.null_count == 0
        ):
            dictionary, indices = ids.dictionary, ids.indices
        else:
            encoded = pc.dictionary_encode(_strings(ids))
            dictionary, indices = encoded.dictionary, encoded.indices
        if self._last is None or not self._last[0].equals(dictionary):
            refuse_nul(dictionary, path, column)
            codes = self.judgments.codes
            lookup = np.array([codes.get(v, -1) for v in dictionary.to_pylist()], dtype=np.int32)
            self._last = (dictionary, lookup)
        lookup = self._last[1]
        at = np.asarray(indices.to_numpy(zero_copy_only=False))
        out = lookup.take(at)
        if out.size and int(out.min()) < 0:  # queries without judgments, in order of appearance
            entries, first = np.unique(at[out < 0], return_index=True)
            base = len(self.judgments.names)
            for e in entries[np.argsort(first)]:
                name = dictionary[int(e)].as_py()
                lookup[e] = base + self.extra.setdefault(name, len(self.extra))
            out = lookup.take(at)
        return out

    def segment(self, strings: pa.Array, path: str, column: str) -> IntArray:
        """The codes of a batch of segment values (one holding a NUL character is a
        ``SchemaError``: numpy's fixed-width strings drop a trailing NUL, so "de" and "de\\0"
        became one segment)."""
        refuse_nul(pc.unique(strings), path, column, what="segment")
        return _name_codes(strings, self.segments)

    def names(self) -> npt.NDArray[np.str_]:
        judged = self.judgments.name_array
        if not self.extra:
            return judged
        return np.concatenate([judged, np.asarray(list(self.extra), dtype=np.str_)]).astype(np.str_)


def read_judged_runs(spec: OutcomeSpec, window: Window) -> JudgedRuns:
    """The ranked lists in ``window``, placed and joined to the judgments (see ``JudgedRuns``).

    Rows with a null query id, document id or segment are dropped and counted; more than
    ``max_invalid_share`` of the window's rows dropped raises ``BadValuesError``. A row whose
    rank and score are both null is dropped too.
    """
    judged = _judged(spec)
    source = _open_source(spec)  # a path, or a Delta / Iceberg table's live files
    newest = _newest_run(spec, source)
    judgments = _load_judgments(judged)
    coder = _Coder(judgments)
    runs = _read_runs(spec, judged, source, window, coder, judgments)
    q_names = coder.names()
    n_q = max(int(q_names.size), 1)
    lists = _lists(runs.query, runs.segment, runs.run, n_q)
    row_list, n_lists = lists.row_list, int(lists.query.size)
    docs, score, grade, rank = runs.docs, runs.score, runs.grade, runs.rank
    segmented, stamps = runs.segment is not None, runs.stamps
    counts = (runs.rows, runs.dropped_null, runs.files_read, runs.fmt)
    del runs  # frees the run, query and segment codes before the next steps' scratch
    order = placement(row_list, n_lists, rank, score, docs)
    del rank
    if order is not None:
        row_list, docs, grade = row_list[order], docs.take(order), grade[order]
        score = None if score is None else score[order]
    drop = duplicates(row_list, n_lists, docs)
    dups = 0
    if drop is not None:
        keep = np.flatnonzero(~drop)
        dups = int(drop.size - keep.size)
        row_list, grade = row_list[keep], grade[keep]
        score = None if score is None else score[keep]
    n_judged = len(judgments.names)
    return JudgedRuns(
        window=window,
        list_query=lists.query,
        list_segment=lists.segment if segmented else None,
        list_timestamp=stamps[lists.timestamp],
        list_key=lists.key,
        row_list=row_list,
        row_grade=judgments.index.grades(grade),
        row_judged=grade >= 0,
        row_score=score,
        duplicates=dups,
        query_names=q_names,
        judged_queries=n_judged,
        segment_names=tuple(coder.segments),
        judged_query=judgments.index.query,
        grade=judgments.index.grade,
        judgments_version=judgments.version,
        judgments_path=judgments.path,
        rows=counts[0],
        dropped_null=counts[1],
        newest_timestamp=None if newest is None else _from_ns(newest),
        files_read=counts[2],
        runs_format=counts[3],
        judgments_format=judgments.fmt,
    )


@dataclass(frozen=True, slots=True)
class _Lists:
    row_list: IntArray
    query: IntArray
    segment: IntArray
    timestamp: IntArray
    key: IntArray


def _lists(
    query: npt.NDArray[np.integer[Any]],
    segment: npt.NDArray[np.integer[Any]] | None,
    ts: npt.NDArray[np.integer[Any]],
    n_q: int,
) -> _Lists:
    """Each row's list, lists numbered in order of first appearance (rows written list by
    list get non-decreasing numbers), and each list's query, segment, timestamp and
    (segment, query) key. Works on runs of equal (segment, query, timestamp), so rows written
    list by list cost one pass."""
    n = query.size
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return _Lists(empty, empty, empty, empty, empty)
    new = np.ones(n, dtype=bool)
    np.not_equal(query[1:], query[:-1], out=new[1:])
    new[1:] |= ts[1:] != ts[:-1]
    if segment is not None:
        new[1:] |= segment[1:] != segment[:-1]
    starts = np.flatnonzero(new)
    lengths = np.diff(np.append(starts, n))
    q_r, ts_r = query[starts].astype(np.int64), ts[starts]
    seg_r = (
        segment[starts].astype(np.int64)
        if segment is not None
        else np.zeros(starts.size, dtype=np.int64)
    )
    stamps, t_r = np.unique(ts_r, return_inverse=True)
    key_r = (seg_r * n_q + q_r) * stamps.size + t_r.ravel()
    uniq, first, inverse = np.unique(key_r, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    number = np.empty(uniq.size, dtype=np.int64)
    number[by_first] = np.arange(uniq.size, dtype=np.int64)
    row_list = np.repeat(number[inverse.ravel()], lengths)
    key = uniq[by_first]
    t_code = key % stamps.size
    pair = key // stamps.size  # segment * n_q + query
    _, pair_code = np.unique(pair, return_inverse=True)
    return _Lists(
        row_list=row_list,
        query=(pair % n_q).astype(np.int64),
        segment=(pair // n_q).astype(np.int64),
        timestamp=stamps[t_code].astype(np.int64),
        key=pair_code.ravel().astype(np.int64),
    )


def read_run_times(spec: OutcomeSpec, window: Window) -> IntArray:
    """Timestamps (ns, sorted) of the outcome rows in ``window``: what the runner splits into
    evaluation runs. Only the timestamp column is read (a row counts whatever its values);
    judged runs in TREC files give their file's time once per line (a file completed after a
    look adds rows to its run, which the next check looks at again, as it does parquet rows
    landing late; counted once per file version). A table's live files only, as
    ``read_outcomes`` reads them. A window holding the same rows as one read before
    (``_rows_key``; 16 kept a process) gets the same times back, read-only."""
    source = _open_source(spec)
    if spec.judged is not None and _is_trec(source, window):
        found = _trec_files(source, window)
        stamps = np.asarray([t for _, t in found], dtype=np.int64)
        counts = np.asarray([_line_count(source, f) for f, _ in found], dtype=np.int64)
        return np.sort(np.repeat(stamps, counts))
    column = spec.timestamp_column

    def key_of(plans: list[_Plan]) -> tuple[object, ...]:
        return (column, footers.CLEARED, _rows_key(source, plans, window, column))

    plans = _plan(source, window, column, spec.timestamp_unit)
    key = key_of(plans)
    hit = _TIMES.lookup(key)
    if hit is not None:  # the same rows as a window read before: the same times
        return hit
    out: list[IntArray] = []
    for plan in plans:
        lo, hi = _native_bounds(window, plan.unit)
        groups = _read_groups(source, plan, [column])
        for (table, memo), first in zip(groups, plan.starts, strict=True):
            # a group's timestamps converted once while its file is unchanged
            values = table.column(column)
            native = _memo(memo, ("stamps", plan.unit), _ts_native, values, plan.unit)
            ns = _memo(memo, ("ns", plan.unit), _ts_to_ns, values, plan.unit)
            mask = (native >= lo) & (native < hi)
            live = _live(plan.file, first, table.num_rows)  # a table's deleted rows: no run
            if live is not None:
                mask &= live
            out.append(ns[mask])
    times = np.sort(np.concatenate(out)) if out else np.empty(0, dtype=np.int64)
    _TIMES.keep(
        key, times, lambda: key_of(_plan(source, window, column, spec.timestamp_unit)), spec.path
    )
    return times


def _read_only(a: IntArray) -> IntArray:
    a.flags.writeable = False
    return a


# the run times of the last few windows, by the rows they hold: an hourly check's lookback
# holds the same runs until one lands or leaves it (read-only arrays)
_TIMES: KeptByRows[IntArray] = KeptByRows(16, _read_only, "run times")


def judged_window_key(spec: OutcomeSpec, window: Window) -> tuple[tuple[object, ...], int | None]:
    """What a window's judged outcomes are a function of, and the newest run's time (ns).

    The key holds ``clear_cache``'s count, the judgments' path and version, then each file
    that may hold rows of the window, by identity (path, size, mtime, ctime, deleted rows),
    with the rows of it the window holds: for a parquet row group wholly inside the window (by
    its footer statistics) its index; for one the window cuts, a digest of its rows'
    in-window mask (timestamps read, and kept, as ``read_run_times`` reads them); for a TREC
    file its run's time. Two windows with equal keys hold the same rows under the same
    judgments, so they have the same outcomes (``monitor.judged`` keeps them by this key).
    Reads no run data for windows whose ends fall between runs, as an hourly check's
    reference window does but once a run.
    """
    judged = _judged(spec)
    source = _open_source(spec)
    newest = _newest_run(spec, source)
    judgments = _load_judgments(judged)
    parts: list[object] = [footers.CLEARED, judgments.path, judgments.version]
    if _is_trec(source, window):
        parts += [(*f.identity, t) for f, t in _trec_files(source, window)]
        return tuple(parts), newest
    plans = _plan(source, window, spec.timestamp_column, spec.timestamp_unit)
    parts += _rows_key(source, plans, window, spec.timestamp_column)
    return tuple(parts), newest


def _judged(spec: OutcomeSpec) -> JudgedSpec:
    if spec.judged is None:
        raise ValueError("`spec` must have `judged` set (outcomes.kind = 'judged_runs').")
    return spec.judged


def _newest_run(spec: OutcomeSpec, source: _Source) -> int | None:
    if _is_trec(source, None):
        stamps = [t for _, t in _trec_files(source, None)]
        return max(stamps) if stamps else None
    newest, _ = _newest_checked(source, spec.timestamp_column, spec.timestamp_unit)
    return newest


def _read_runs(
    spec: OutcomeSpec,
    judged: JudgedSpec,
    source: _Source,
    window: Window,
    coder: _Coder,
    judgments: _Judgments,
) -> _RunRows:
    if _is_trec(source, window):
        return _read_trec_runs(spec, source, window, coder, judgments)
    return _read_parquet_runs(spec, judged, source, window, coder, judgments)


class _RunSink:
    """A window's coded run rows, filled batch by batch into arrays sized once from the
    footers (``capacity``: the planned row groups' rows), then trimmed without a copy. Each
    batch is joined to the judgments as it arrives, so the join's scratch is one batch's; its
    document ids stay in Arrow (only the fingerprints are copied)."""

    def __init__(
        self, capacity: int, judgments: _Judgments, rank: bool, score: bool, segment: bool
    ) -> None:
        self.n = 0
        self.judgments = judgments
        self.stamps: dict[int, int] = {}
        self.run = np.empty(capacity, dtype=np.int32)
        self.query = np.empty(capacity, dtype=np.int32)
        self.grade = np.empty(capacity, dtype=judgments.index.code.dtype)
        self.rank = np.empty(capacity) if rank else None
        self.score = np.empty(capacity) if score else None
        self.segment = np.empty(capacity, dtype=np.int32) if segment else None
        self.fp = np.empty(capacity, dtype=np.uint64)
        self.docs: list[pa.Array] = []

    def add(
        self,
        ts: IntArray | int,
        query: npt.NDArray[np.int32],
        docs: pa.Array,
        keys: IdKeys,
        rank: FloatArray | None,
        score: FloatArray | None,
        segment: IntArray | int | None,
    ) -> None:
        """Append one batch (``keys``: its ``docs``' ``id_keys``), joined to the judgments."""
        a, b = self.n, self.n + query.size
        if isinstance(ts, int):
            self.run[a:b] = self.stamps.setdefault(ts, len(self.stamps))
        else:
            values, inverse = np.unique(ts, return_inverse=True)
            codes = np.array(
                [self.stamps.setdefault(int(v), len(self.stamps)) for v in values], np.int32
            )
            self.run[a:b] = codes[inverse.ravel()]
        self.query[a:b] = query
        self.fp[a:b] = keys.fp
        self.grade[a:b] = _code_docs(self.judgments, keys, query)
        self.docs.append(docs)
        for dest, part in ((self.rank, rank), (self.score, score)):
            if dest is not None:
                dest[a:b] = np.nan if part is None else part
        if self.segment is not None and segment is not None:
            self.segment[a:b] = segment
        self.n = b

    def rows(self, *, rows: int, dropped: int, files: int, fmt: str) -> _RunRows:
        n = self.n
        return _RunRows(
            run=self.run[:n],
            stamps=np.fromiter(self.stamps, dtype=np.int64, count=len(self.stamps)),
            query=self.query[:n],
            docs=RowIds(self.fp[:n], pa.chunked_array(self.docs, pa.string())),
            grade=self.grade[:n],
            rank=None if self.rank is None else self.rank[:n],
            score=None if self.score is None else self.score[:n],
            segment=None if self.segment is None else self.segment[:n],
            rows=rows,
            dropped_null=dropped,
            files_read=files,
            fmt=fmt,
        )


def _code_docs(
    judgments: _Judgments, keys: IdKeys, query: npt.NDArray[np.int32]
) -> npt.NDArray[np.signedinteger[Any]]:
    """Each row's grade code (the batch's join)."""
    n_judged = len(judgments.names)
    if query.size and int(query.max()) >= n_judged:  # queries without judgments: no match
        query = np.where(query < n_judged, query, -1)
    return join(judgments.index, query, keys)


def _batches(
    pf: pq.ParquetFile, plan: _Plan, g: int, columns: list[str]
) -> Iterator[pa.RecordBatch]:
    try:
        yield from pf.iter_batches(
            batch_size=_BATCH, row_groups=[g], columns=columns, use_threads=True
        )
    except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
        raise _translate(exc, plan.file.path, f"reading row group {g}") from exc


@dataclass(frozen=True, slots=True)
class _Group:
    """How to read one planned row group of a run file."""

    plan: _Plan
    g: int
    inside: bool  # wholly inside the window: no timestamp filter
    const_ts: int | None  # its one timestamp, from the footer (None: read the column)
    rank: bool
    score: bool
    seg_const: int | None  # the segment code when the segment is a hive partition
    columns: tuple[str, ...]
    dictionary: tuple[str, ...]  # columns read as dictionary arrays (the file's string ids)


def _read_parquet_runs(
    spec: OutcomeSpec,
    judged: JudgedSpec,
    source: _Source,
    window: Window,
    coder: _Coder,
    judgments: _Judgments,
) -> _RunRows:
    plans = _plan(source, window, spec.timestamp_column, spec.timestamp_unit)
    groups: list[_Group] = []
    seg_col = spec.segment_column
    for plan in plans:  # every schema problem is found before any data is read
        f, footer = plan.file, plan.footer
        _require_label(footer, f, spec.query_column, "query id", "query_column")
        _require_label(footer, f, judged.doc_column, "document id", "doc_column")
        rank_here, score_here = _check_ordering(footer, f, judged)
        names = set(footer.schema.names)
        from_partition = (
            seg_col is not None and seg_col not in names and seg_col in dict(f.partitions)
        )
        if seg_col is not None and not from_partition:
            _require_label(footer, f, seg_col, "segment", "segment_column")
        seg_const: int | None = None
        if from_partition:
            value = str(dict(f.partitions)[str(seg_col)])
            # a null partition key (Hive's and Spark's name for it): null segments, dropped
            # and counted as a null in a segment column is, never a segment of that name
            if "\x00" in value:  # URL-decoded: "de%00" is "de\0"
                refuse_nul(pa.array([value]), f.path, str(seg_col), what="segment")
            seg_const = (
                _NULL_SEGMENT
                if value == HIVE_NULL
                else coder.segments.setdefault(value, len(coder.segments))
            )
        stats = _ts_stats(source, f, spec.timestamp_column, spec.timestamp_unit)
        q_type = footer.schema.field(spec.query_column).type
        # query ids repeat (about a list's length each): read as dictionary arrays, decoded
        # per distinct value, not per row
        dictionary = (spec.query_column,) if pa.types.is_string(q_type) else ()
        for g, inside in zip(plan.groups, plan.inside, strict=True):
            # a row group wholly inside the window with one timestamp (one evaluation run)
            # needs no timestamp column: the footer's statistics give it
            lo, hi = stats.lo[g], stats.hi[g]
            const_ts = lo if inside and lo is not None and lo == hi else None
            columns = [spec.query_column, judged.doc_column]
            if const_ts is None:
                columns.append(spec.timestamp_column)
            columns += [
                c
                for c, h in ((judged.rank_column, rank_here), (judged.score_column, score_here))
                if h
            ]
            if seg_col is not None and not from_partition:
                columns.append(seg_col)
            groups.append(
                _Group(
                    plan,
                    g,
                    inside,
                    const_ts,
                    rank_here,
                    score_here,
                    seg_const,
                    tuple(columns),
                    dictionary,
                )
            )
    sink = _RunSink(
        sum(p.capacity for p in plans),
        judgments,
        rank=any(gr.rank for gr in groups),
        score=any(gr.score for gr in groups),
        segment=seg_col is not None,
    )
    rows = dropped = 0
    per_file: dict[str, int] = {}
    causes: dict[tuple[str, str], int] = {}
    # Arrow decodes the next batches in a thread of its own while this one codes the last
    # (reading the ids' words there too costs 25% more CPU in GIL hand-offs on a busy machine)
    for part in _prepared(_prefetch(_decode(source, groups)), spec, judged, window):
        rows += part.rows
        if part.dropped:
            dropped += part.dropped
            path = part.group.plan.file.path
            per_file[path] = per_file.get(path, 0) + part.dropped
            for cause, column, n in part.causes:
                if n:
                    causes[(cause, column)] = causes.get((cause, column), 0) + n
        if part.keys.size == 0:
            continue
        sink.add(
            part.ts,
            coder.queries(part.query, part.group.plan.file.path, spec.query_column),
            part.docs,
            part.keys,
            part.rank,
            part.score,
            part.group.seg_const
            if part.segment is None
            else coder.segment(part.segment, part.group.plan.file.path, str(spec.segment_column)),
        )
    if dropped:
        # the column of the commonest cause is the one named (a row may have several)
        worst = max(causes, key=lambda k: causes[k])
        why = {f"{cause} ({column!r})": n for (cause, column), n in causes.items()}
        _refuse_dropped(spec, window, rows, dropped, why, per_file, column=worst[1])
    return sink.rows(rows=rows, dropped=dropped, files=len(plans), fmt="parquet")


@dataclass(frozen=True, slots=True)
class _Part:
    """One batch of run rows, filtered to the window and to valid rows: ``rows`` read in the
    window, ``dropped`` of them invalid; the rest's ids (``keys`` of ``docs``), ordering and
    timestamp (one for the batch, or per row)."""

    group: _Group
    rows: int
    dropped: int
    query: pa.Array
    docs: pa.Array
    keys: IdKeys
    rank: FloatArray | None
    score: FloatArray | None
    segment: pa.Array | None
    ts: IntArray | int
    causes: tuple[tuple[str, str, int], ...] = ()  # (cause, column, rows) of ``dropped``


_NULL_SEGMENT = -1  # a group's segment code when its hive partition names a null segment


def _prepared(
    batches: Iterator[tuple[_Group, pa.RecordBatch]],
    spec: OutcomeSpec,
    judged: JudgedSpec,
    window: Window,
) -> Iterator[_Part]:
    """Each batch as a ``_Part``: the window filter, the validity rules, the ids' words."""
    seg_col = spec.segment_column
    for gr, batch in batches:
        table = pa.Table.from_batches([batch])
        if gr.inside:
            n_in = table.num_rows
        else:
            mask = _in_window(table, spec.timestamp_column, gr.plan.unit, window)
            n_in = int(mask.sum())
            if n_in < table.num_rows:
                table = table.filter(pa.array(mask))
        q = _one_array(table.column(spec.query_column))  # a dictionary array, as read
        d = _strings(table.column(judged.doc_column))
        # (cause, column, valid rows): a row is dropped for each cause it has
        checks: list[tuple[str, str, npt.NDArray[np.bool_]]] = []
        if q.null_count:
            checks.append(("null query id", spec.query_column, _valid(q)))
        if d.null_count:
            checks.append(("null document id", judged.doc_column, _valid(d)))
        seg = None
        if seg_col is not None and gr.seg_const is None:
            seg = _strings(table.column(seg_col))
            if seg.null_count:
                checks.append(("null segment", seg_col, _valid(seg)))
        elif gr.seg_const == _NULL_SEGMENT:
            checks.append(("null segment", str(seg_col), np.zeros(n_in, dtype=np.bool_)))
        rank = _maybe_floats(table, judged.rank_column) if gr.rank else None
        score = _maybe_floats(table, judged.score_column) if gr.score else None
        ordered = _ordered(rank, score)
        if ordered is not None:
            names = [
                c
                for c, here in ((judged.rank_column, gr.rank), (judged.score_column, gr.score))
                if here
            ]
            checks.append(("neither rank nor score", " and ".join(names), ordered))
        invalid = [valid for _, _, valid in checks]
        ts: IntArray | int = (
            int(gr.const_ts)
            if gr.const_ts is not None
            else _ts_to_ns(table.column(spec.timestamp_column), gr.plan.unit)
        )
        del table
        n_ok = n_in
        if invalid and n_in:  # rows with a null id or segment, or neither rank nor score
            valid = np.logical_and.reduce(invalid) if len(invalid) > 1 else invalid[0]
            n_ok = int(np.count_nonzero(valid))
            if n_ok < n_in:
                keep = pa.array(valid)
                q, d = q.filter(keep), d.filter(keep)
                seg = None if seg is None else seg.filter(keep)
                rank = None if rank is None else rank[valid]
                score = None if score is None else score[valid]
                if not isinstance(ts, int):
                    ts = ts[valid]
        causes = tuple(
            (cause, column, n_in - int(np.count_nonzero(valid)))
            for cause, column, valid in checks
            if n_ok < n_in
        )
        yield _Part(gr, n_in, n_in - n_ok, q, d, id_keys(d), rank, score, seg, ts, causes)


def _decode(source: _Source, groups: list[_Group]) -> Iterator[tuple[_Group, pa.RecordBatch]]:
    """The batches of every planned row group, file by file (each file opened once)."""
    at = 0
    while at < len(groups):
        plan = groups[at].plan
        with _opened(source, plan.file, plan.footer, groups[at].dictionary) as pf:
            while at < len(groups) and groups[at].plan is plan:
                gr = groups[at]
                for batch in _batches(pf, plan, gr.g, list(gr.columns)):
                    yield gr, batch
                at += 1


_T = TypeVar("_T")


def _prefetch(items: Iterator[_T], depth: int = 2) -> Iterator[_T]:
    """``items``, produced up to ``depth`` ahead in a thread of their own. An exception in
    the producer is raised here, in order; leaving early (or an exception here) stops the
    producer at its next item."""
    slots: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(entry: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((True, end))
        except BaseException as exc:  # handed to the consumer, which raises it
            put((False, exc))

    worker = threading.Thread(target=produce, name="judged-runs-read", daemon=True)
    worker.start()
    try:
        while True:
            ok, item = slots.get()
            if not ok:
                assert isinstance(item, BaseException)
                raise item
            if item is end:
                return
            yield cast(_T, item)
    finally:
        stop.set()


def _join(parts: list[IntArray]) -> IntArray:
    if not parts:
        return np.empty(0, dtype=np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _check_ordering(footer: _Footer, f: _File, judged: JudgedSpec) -> tuple[bool, bool]:
    """Whether the run file has a rank and a score column; at least one is required and each
    present one must be numeric (``SchemaError`` naming the file and column otherwise)."""
    names = set(footer.schema.names)
    here = [c in names for c in (judged.rank_column, judged.score_column)]
    if not any(here):
        raise SchemaError(
            f"has neither a rank column ({judged.rank_column!r}) nor a score column "
            f"({judged.score_column!r}); columns found: "
            + ", ".join(repr(n) for n in footer.schema.names),
            path=f.path,
            hint="set `rank_column` or `score_column` to the column that orders the results",
        )
    for present, col, role, key in (
        (here[0], judged.rank_column, "rank", "rank_column"),
        (here[1], judged.score_column, "score", "score_column"),
    ):
        if present:
            _require_numeric(footer, f, col, role, key)
    return here[0], here[1]


def _maybe_floats(table: pa.Table, column: str) -> FloatArray:
    """The column as floats, NaN where null."""
    values, valid = _floats(table.column(column))
    if valid is not None:
        values = np.where(valid, values, np.nan)
    return values


def _ordered(rank: FloatArray | None, score: FloatArray | None) -> npt.NDArray[np.bool_] | None:
    """Which rows have a rank or a score (not NaN: an infinite one is a value, a log
    probability's -inf last and +inf first, as on the TREC path and in trec_eval); None when
    every row has one."""
    ordered = None
    for values in (rank, score):
        if values is not None:
            present = ~np.isnan(values)
            if present.all():
                return None
            ordered = present if ordered is None else ordered | present
    return ordered


def _read_trec_runs(
    spec: OutcomeSpec, source: _Source, window: Window, coder: _Coder, judgments: _Judgments
) -> _RunRows:
    """TREC run files' rows; a line whose rank and score are both ``nan`` is dropped and
    counted, as a parquet row with neither is (it was kept, last: judged@k and P@k differed
    from the same data in parquet, and ``max_invalid_share`` never applied)."""
    files = _trec_files(source, window)
    parsed = []
    for f, t in files:
        shape = "qid Q0 docid rank score tag"
        numbers = {3: "rank", 4: "score"}
        parsed.append((f.path, t, _tokens(source, f, 6, shape, text=(0, 2), numbers=numbers)))
    rows = sum(p[2].rows for p in parsed)
    sink = _RunSink(rows, judgments, rank=True, score=True, segment=False)
    dropped, per_file = 0, {}
    for path, t, fields in parsed:
        # every line's query id checked (a NUL one is refused), dropped lines' too
        query = coder.queries(fields.text[0], path, None)
        docs = fields.text[2]
        rank, score = fields.numbers[3], fields.numbers[4]
        ordered = _ordered(rank, score)
        if ordered is not None:
            gone = int(ordered.size - np.count_nonzero(ordered))
            if gone:
                per_file[path] = gone
                dropped += gone
                query, docs = query[ordered], docs.filter(pa.array(ordered))
                rank, score = rank[ordered], score[ordered]
        sink.add(t, query, docs, id_keys(docs), rank, score, None)
    why = {"both rank and score nan": dropped}
    _refuse_dropped(spec, window, rows, dropped, why, per_file, column=None)
    return sink.rows(rows=rows, dropped=dropped, files=len(files), fmt="trec")


def _refuse_dropped(
    spec: OutcomeSpec,
    window: Window,
    rows: int,
    dropped: int,
    why: dict[str, int],
    per_file: dict[str, int],
    *,
    column: str | None,
) -> None:
    """``BadValuesError`` naming ``column`` (None: a text file's) when the ``dropped`` run
    rows (``why``: by cause; a row may have several) are more than ``max_invalid_share`` of
    the window's ``rows``."""
    if rows and dropped / rows > spec.max_invalid_share:
        _raise_bad_values(
            "run", column, window, rows, why, spec.max_invalid_share, per_file, dropped=dropped
        )


__all__ = ["read_judged_runs", "read_run_times"]
