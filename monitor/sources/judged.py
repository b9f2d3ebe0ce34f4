"""Reading ranked runs and graded judgments (``outcomes.kind = "judged_runs"``) as codes.

Runs: parquet with ``timestamp`` (of the evaluation run), ``query_id``, ``doc_id``, ``rank``
and/or ``score`` (and the segment column, if set); or TREC run files, ``qid Q0 docid rank score
tag`` per line, one evaluation run per file, whose time is the UTC timestamp in the file name
(``2026-11-30T02:00:00Z``, ``2026-11-30T0200Z`` or ``20261130T020000Z``) or else the file's
modification time. Judgments: parquet with ``query_id``, ``doc_id``, ``grade``; or TREC qrels,
``qid 0 docid grade``. Files are told apart by content: parquet starts with ``PAR1``.

A judgments directory whose entries are ``version=<name>`` directories holds versions; the last
name in sort order is used unless a version is pinned. Every check scores both windows against
the same judgments, so a judgment update never looks like decay.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from monitor.errors import SchemaError, SourceNotFoundError
from monitor.sources.columns import (
    _floats,
    _in_window,
    _raise_bad_values,
    _read_group,
    _require_label,
    _require_numeric,
)
from monitor.sources.footers import _FOOTERS, _Footer, _opened, _ts_to_ns
from monitor.sources.model import (
    FloatArray,
    IntArray,
    JudgedRuns,
    JudgedSpec,
    OutcomeSpec,
    Window,
    _from_ns,
    _to_ns,
)
from monitor.sources.partitions import _newest_checked, _overlaps, _plan
from monitor.sources.paths import _File, _list_dir, _resolve, _Source, _walk
from monitor.sources.translate import _translate

_MAGIC = b"PAR1"
_STAMP = re.compile(
    r"(\d{4})-?(\d{2})-?(\d{2})T(\d{2}):?(\d{2})(?::?(\d{2}))?Z?", flags=re.IGNORECASE
)
_CACHE_LOCK = threading.Lock()
_JUDGMENTS: OrderedDict[tuple[str, str], _Judgments] = OrderedDict()
_KINDS: dict[tuple[str, int, int], bool] = {}
_MAX_JUDGMENTS = 4


@dataclass(frozen=True, slots=True)
class _Judgments:
    query: pa.Array  # string
    doc: pa.Array  # string
    grade: FloatArray
    version: str
    path: str
    fmt: str


@dataclass(frozen=True, slots=True)
class _RunRows:
    ts: IntArray
    query: pa.Array
    doc: pa.Array
    rank: FloatArray | None
    score: FloatArray | None
    segment: pa.Array | None
    rows: int
    dropped_null: int
    files_read: int
    fmt: str


# --------------------------------------------------------------------------- public


def read_judged_runs(spec: OutcomeSpec, window: Window) -> JudgedRuns:
    """The ranked lists in ``window`` and the judgments, coded (see ``JudgedRuns``).

    Rows with a null query id, document id or segment are dropped and counted; more than
    ``max_invalid_share`` of the window's rows dropped raises ``BadValuesError``. A row whose
    rank and score are both null is dropped too.
    """
    judged = _judged(spec)
    source = _resolve(spec.path, spec.prune_partitions)
    newest = _newest_run(spec, source)
    runs = _read_runs(spec, judged, source, window)
    judgments = _load_judgments(judged)
    q_vocab, (run_q, jq) = _vocabulary(runs.query, judgments.query)
    q_names = np.asarray(q_vocab.to_numpy(zero_copy_only=False).astype(str), dtype=np.str_)
    d_vocab, (run_d, jd) = _vocabulary(runs.doc, judgments.doc)
    seg_names: tuple[str, ...] = ()
    seg_codes: IntArray | None = None
    if spec.segment_column is not None and runs.segment is not None:
        names, (seg_codes,) = _vocabulary(runs.segment)
        seg_names = tuple(str(n) for n in names.to_pylist())
    width = max(q_names.size, 1)
    key = run_q if seg_codes is None else seg_codes * width + run_q
    order = np.lexsort((runs.ts, key))
    key_sorted, ts_sorted = key[order], runs.ts[order]
    new_key = _changes(key_sorted)
    row_list_sorted, starts = _group_index(new_key | _changes(ts_sorted))
    row_list = np.empty(key.size, dtype=np.int64)
    row_list[order] = row_list_sorted
    list_key, _ = _group_index(new_key[starts])
    list_id = key_sorted[starts]
    return JudgedRuns(
        window=window,
        list_query=(list_id % width).astype(np.int64),
        list_segment=None if seg_codes is None else (list_id // width).astype(np.int64),
        list_key=list_key,
        list_timestamp=ts_sorted[starts].astype(np.int64),
        row_list=row_list,
        row_doc=run_d,
        row_rank=runs.rank,
        row_score=runs.score,
        query_names=q_names,
        n_docs=len(d_vocab),
        doc_name=lambda code: str(d_vocab[code].as_py()),
        segment_names=seg_names,
        judged_query=jq,
        judged_doc=jd,
        grade=judgments.grade,
        judgments_version=judgments.version,
        judgments_path=judgments.path,
        rows=runs.rows,
        dropped_null=runs.dropped_null,
        newest_timestamp=None if newest is None else _from_ns(newest),
        files_read=runs.files_read,
        runs_format=runs.fmt,
        judgments_format=judgments.fmt,
    )


def _changes(sorted_values: IntArray) -> npt.NDArray[np.bool_]:
    """True where a sorted array starts a new value (the first element included)."""
    out = np.ones(sorted_values.size, dtype=bool)
    out[1:] = sorted_values[1:] != sorted_values[:-1]
    return out


def _group_index(starts_mask: npt.NDArray[np.bool_]) -> tuple[IntArray, IntArray]:
    """Group number of each element of a sorted run (0, 0, 1, 1, 1, 2 ...) and the positions
    where groups start."""
    return np.cumsum(starts_mask, dtype=np.int64) - 1, np.flatnonzero(starts_mask)


def read_run_times(spec: OutcomeSpec, window: Window) -> IntArray:
    """Timestamps (ns, sorted) of the outcome rows in ``window``: what the runner splits into
    evaluation runs. Only the timestamp column is read (a row counts whatever its values);
    judged runs in TREC files give one timestamp per file."""
    source = _resolve(spec.path, spec.prune_partitions)
    if spec.judged is not None and _is_trec(source, window):
        stamps = [t for f, t in _trec_files(source, window)]
        return np.sort(np.asarray(stamps, dtype=np.int64))
    out: list[IntArray] = []
    for plan in _plan(source, window, spec.timestamp_column, spec.timestamp_unit):
        with _opened(source, plan.file, plan.footer) as pf:
            for g in plan.groups:
                table = _read_group(pf, plan, g, [spec.timestamp_column])
                mask = _in_window(table, spec.timestamp_column, plan.unit, window)
                out.append(_ts_to_ns(table.column(spec.timestamp_column), plan.unit)[mask])
    return np.sort(np.concatenate(out)) if out else np.empty(0, dtype=np.int64)


def judgments_version(judged: JudgedSpec) -> str:
    """The version of the judgments a check would use now (name and content fingerprint)."""
    return _load_judgments(judged).version


# --------------------------------------------------------------------------- runs


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


def _is_parquet(source: _Source, f: _File) -> bool:
    key = (f.path, f.size, f.mtime_ns)
    with _CACHE_LOCK:
        hit = _KINDS.get(key)
    if hit is not None:
        return hit
    try:
        with source.fs.open_input_stream(f.path) as handle:
            head = handle.read(4)
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, f.path, "opening the file") from exc
    kind = bytes(head) == _MAGIC
    with _CACHE_LOCK:
        if len(_KINDS) > 4096:
            _KINDS.clear()
        _KINDS[key] = kind
    return kind


def _files(source: _Source, window: Window | None) -> Iterator[_File]:
    keep = (lambda interval: True) if window is None else (lambda i: _overlaps(i, window))
    yield from _walk(source, keep)


def _is_trec(source: _Source, window: Window | None) -> bool:
    kinds = {_is_parquet(source, f) for f in _files(source, window)}
    if kinds == {True, False}:
        raise SchemaError(
            "mixes parquet and text files",
            path=source.display,
            hint="keep TREC run files and parquet runs in separate directories",
        )
    return bool(kinds == {False})


def _file_time(f: _File) -> int:
    base = f.path.rsplit("/", 1)[-1]
    m = _STAMP.search(base)
    if m:
        y, mo, d, h, mi, s = (int(x) if x else 0 for x in m.groups())
        try:
            return _to_ns(datetime(y, mo, d, h, mi, s, tzinfo=UTC))
        except ValueError:
            pass
    return f.mtime_ns


def _trec_files(source: _Source, window: Window | None) -> list[tuple[_File, int]]:
    out = []
    for f in _files(source, window):
        t = _file_time(f)
        if window is None or window.start_ns <= t < window.end_ns:
            out.append((f, t))
    return out


def _read_runs(spec: OutcomeSpec, judged: JudgedSpec, source: _Source, window: Window) -> _RunRows:
    if _is_trec(source, window):
        return _read_trec_runs(source, window)
    return _read_parquet_runs(spec, judged, source, window)


def _read_parquet_runs(
    spec: OutcomeSpec, judged: JudgedSpec, source: _Source, window: Window
) -> _RunRows:
    plans = _plan(source, window, spec.timestamp_column, spec.timestamp_unit)
    ts_parts: list[IntArray] = []
    q_parts: list[pa.Array] = []
    d_parts: list[pa.Array] = []
    r_parts: list[FloatArray] = []
    s_parts: list[FloatArray] = []
    seg_parts: list[pa.Array] = []
    have_rank = have_score = False
    rows = dropped = 0
    per_file: dict[str, int] = {}
    for plan in plans:
        f, footer = plan.file, plan.footer
        _require_label(footer, f, spec.query_column, "query id", "query_column")
        _require_label(footer, f, judged.doc_column, "document id", "doc_column")
        rank_here, score_here = _check_ordering(footer, f, judged)
        names = set(footer.schema.names)
        have_rank |= rank_here
        have_score |= score_here
        seg_col = spec.segment_column
        from_partition = (
            seg_col is not None and seg_col not in names and seg_col in dict(f.partitions)
        )
        if seg_col is not None and not from_partition:
            _require_label(footer, f, seg_col, "segment", "segment_column")
        columns = [spec.timestamp_column, spec.query_column, judged.doc_column]
        columns += [
            c for c, h in ((judged.rank_column, rank_here), (judged.score_column, score_here)) if h
        ]
        if seg_col is not None and not from_partition:
            columns.append(seg_col)
        before = dropped
        with _opened(source, f, footer) as pf:
            for g in plan.groups:
                table = _read_group(pf, plan, g, columns)
                mask = _in_window(table, spec.timestamp_column, plan.unit, window)
                n_in = int(mask.sum())
                rows += n_in
                if n_in == 0:
                    continue
                table = table.filter(pa.array(mask))
                q = _strings(table.column(spec.query_column))
                d = _strings(table.column(judged.doc_column))
                valid = q.is_valid().to_numpy(zero_copy_only=False) & d.is_valid().to_numpy(
                    zero_copy_only=False
                )
                seg = None
                if seg_col is not None:
                    seg = (
                        pa.array([dict(f.partitions)[seg_col]] * table.num_rows, pa.string())
                        if from_partition
                        else _strings(table.column(seg_col))
                    )
                    valid &= seg.is_valid().to_numpy(zero_copy_only=False)
                rank = _maybe_floats(table, judged.rank_column, rank_here)
                score = _maybe_floats(table, judged.score_column, score_here)
                ordered = np.isfinite(rank) | np.isfinite(score)
                valid &= ordered
                dropped += n_in - int(valid.sum())
                keep = pa.array(valid)
                ts_parts.append(_ts_to_ns(table.column(spec.timestamp_column), plan.unit)[valid])
                q_parts.append(q.filter(keep))
                d_parts.append(d.filter(keep))
                r_parts.append(rank[valid])
                s_parts.append(score[valid])
                if seg is not None:
                    seg_parts.append(seg.filter(keep))
        if dropped > before:
            per_file[f.path] = dropped - before
    if rows and dropped / rows > spec.max_invalid_share:
        _raise_bad_values(
            "run row",
            spec.query_column,
            window,
            rows,
            {"null query id, document id, segment, or both rank and score": dropped},
            spec.max_invalid_share,
            per_file,
        )
    return _RunRows(
        ts=np.concatenate(ts_parts) if ts_parts else np.empty(0, dtype=np.int64),
        query=_concat(q_parts),
        doc=_concat(d_parts),
        rank=np.concatenate(r_parts) if have_rank and r_parts else None,
        score=np.concatenate(s_parts) if have_score and s_parts else None,
        segment=_concat(seg_parts) if spec.segment_column is not None else None,
        rows=rows,
        dropped_null=dropped,
        files_read=len(plans),
        fmt="parquet",
    )


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


def _maybe_floats(table: pa.Table, column: str, here: bool) -> FloatArray:
    if not here:
        return np.full(table.num_rows, np.nan)
    values, valid = _floats(table.column(column))
    if valid is not None:
        values = np.where(valid, values, np.nan)
    return values


def _read_trec_runs(source: _Source, window: Window) -> _RunRows:
    files = _trec_files(source, window)
    ts: list[IntArray] = []
    qs: list[npt.NDArray[np.object_]] = []
    ds: list[npt.NDArray[np.object_]] = []
    rs: list[FloatArray] = []
    ss: list[FloatArray] = []
    for f, t in files:
        fields = _tokens(source, f, 6, "qid Q0 docid rank score tag")
        rank = _numbers(fields[:, 3], f, "rank", fields)
        score = _numbers(fields[:, 4], f, "score", fields)
        ts.append(np.full(fields.shape[0], t, dtype=np.int64))
        qs.append(fields[:, 0])
        ds.append(fields[:, 2])
        rs.append(rank)
        ss.append(score)
    n = int(sum(a.size for a in ts))
    return _RunRows(
        ts=np.concatenate(ts) if ts else np.empty(0, dtype=np.int64),
        query=pa.array(np.concatenate(qs) if qs else [], pa.string()),
        doc=pa.array(np.concatenate(ds) if ds else [], pa.string()),
        rank=np.concatenate(rs) if rs else np.empty(0),
        score=np.concatenate(ss) if ss else np.empty(0),
        segment=None,
        rows=n,
        dropped_null=0,
        files_read=len(files),
        fmt="trec",
    )


def _tokens(source: _Source, f: _File, width: int, shape: str) -> npt.NDArray[np.object_]:
    """The whitespace-separated fields of a text file, one row per non-empty line."""
    try:
        with source.fs.open_input_stream(f.path) as handle:
            raw = handle.read()
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, f.path, "reading the file") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(
            f"is neither parquet nor UTF-8 text (byte {exc.start})",
            path=f.path,
            hint=f"a TREC file holds lines `{shape}`",
        ) from exc
    lines = [line.split() for line in text.splitlines()]
    lines = [parts for parts in lines if parts]
    for i, parts in enumerate(lines):
        if len(parts) != width:
            raise SchemaError(
                f"line {i + 1} has {len(parts)} fields: {' '.join(parts)[:80]!r}; a TREC line "
                f"holds `{shape}`",
                path=f.path,
            )
    return np.array(lines, dtype=object).reshape(-1, width)


def _numbers(
    column: npt.NDArray[np.object_], f: _File, role: str, fields: npt.NDArray[np.object_]
) -> FloatArray:
    try:
        return np.asarray(column, dtype=np.float64)
    except ValueError:
        for i, value in enumerate(column):
            try:
                float(value)
            except ValueError:
                raise SchemaError(
                    f"line {i + 1}: the {role} {value!r} is not a number (query {fields[i, 0]!r})",
                    path=f.path,
                ) from None
        raise


# --------------------------------------------------------------------------- judgments


def _load_judgments(judged: JudgedSpec) -> _Judgments:
    source = _resolve(judged.judgments, False)
    name, chosen = _version(source, judged)
    files = list(_walk(chosen, lambda interval: True))
    if not files:
        raise SourceNotFoundError(
            "holds no judgment file", path=chosen.display, hint="check outcomes.judgments"
        )
    listing = "\n".join(f"{f.path}\t{f.size}\t{f.mtime_ns}" for f in files)
    print_ = hashlib.sha256(listing.encode()).hexdigest()[:12]
    key = (chosen.display, print_)
    with _CACHE_LOCK:
        hit = _JUDGMENTS.get(key)
        if hit is not None:
            _JUDGMENTS.move_to_end(key)
            return hit
    queries: list[pa.Array] = []
    docs: list[pa.Array] = []
    grades: list[FloatArray] = []
    kinds = set()
    for f in files:
        if _is_parquet(chosen, f):
            kinds.add("parquet")
            q, d, g = _parquet_judgments(chosen, f, judged)
        else:
            kinds.add("trec")
            fields = _tokens(chosen, f, 4, "qid 0 docid grade")
            q = pa.array(fields[:, 0], pa.string())
            d = pa.array(fields[:, 2], pa.string())
            g = _numbers(fields[:, 3], f, "grade", fields)
        bad = ~np.isfinite(g) | (g < 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SchemaError(
                f"query {q[i].as_py()!r}, document {d[i].as_py()!r} has grade {g[i]!r}; grades "
                "must be finite and >= 0",
                path=f.path,
                column=judged.grade_column,
                hint="map negative grades (e.g. spam = -2) to 0 upstream",
            )
        queries.append(q)
        docs.append(d)
        grades.append(g)
    version = f"{name} ({print_})" if name else print_
    result = _Judgments(
        query=_concat(queries),
        doc=_concat(docs),
        grade=np.concatenate(grades),
        version=version,
        path=chosen.display,
        fmt="+".join(sorted(kinds)),
    )
    with _CACHE_LOCK:
        _JUDGMENTS[key] = result
        while len(_JUDGMENTS) > _MAX_JUDGMENTS:
            _JUDGMENTS.popitem(last=False)
    return result


def _version(source: _Source, judged: JudgedSpec) -> tuple[str | None, _Source]:
    """The ``version=<name>`` directory to use (pinned or the last), or the whole source."""
    if source.is_file:
        return None, source
    entries = _list_dir(source, source.root)
    versions = sorted(
        e.base_name[len("version=") :]
        for e in entries
        if e.is_dir and e.base_name.startswith("version=")
    )
    if not versions:
        if judged.judgments_version is not None:
            raise SourceNotFoundError(
                f"has no version={judged.judgments_version} directory (no versions at all)",
                path=source.display,
                hint="unset outcomes.judgments_version, or lay versions out as version=<name>/",
            )
        return None, source
    name = judged.judgments_version if judged.judgments_version is not None else versions[-1]
    if name not in versions:
        raise SourceNotFoundError(
            f"has no version={name} directory; versions found: {', '.join(versions)}",
            path=source.display,
            hint="fix outcomes.judgments_version",
        )
    return name, _resolve(source.display.rstrip("/") + f"/version={name}", False)


def _parquet_judgments(
    source: _Source, f: _File, judged: JudgedSpec
) -> tuple[pa.Array, pa.Array, FloatArray]:
    footer = _FOOTERS.get(source, f)
    for col, role, key in (
        (judged.judgment_query_column, "query id", "judgment_query_column"),
        (judged.judgment_doc_column, "document id", "judgment_doc_column"),
    ):
        _require_label(footer, f, col, role, key)
    gcol = judged.grade_column
    _require_numeric(footer, f, gcol, "grade", "grade_column")
    with _opened(source, f, footer) as pf:
        try:
            table = pf.read(
                columns=[judged.judgment_query_column, judged.judgment_doc_column, gcol]
            )
        except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
            raise _translate(exc, f.path, "reading the judgments") from exc
    q = _strings(table.column(judged.judgment_query_column))
    d = _strings(table.column(judged.judgment_doc_column))
    g, valid = _floats(table.column(gcol))
    ok = q.is_valid().to_numpy(zero_copy_only=False) & d.is_valid().to_numpy(zero_copy_only=False)
    if valid is not None:
        ok &= valid
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise SchemaError(
            f"row {i} has a null query id, document id or grade",
            path=f.path,
            hint="every judgment needs all three",
        )
    return q, d, g


# --------------------------------------------------------------------------- coding


def _strings(chunked: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = chunked.combine_chunks() if isinstance(chunked, pa.ChunkedArray) else chunked
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string())
    return arr


def _concat(parts: list[pa.Array]) -> pa.Array:
    if not parts:
        return pa.array([], pa.string())
    return pa.concat_arrays([_strings(p) for p in parts])


def _vocabulary(*arrays: pa.Array) -> tuple[pa.Array, list[IntArray]]:
    """The sorted distinct values of ``arrays`` (UTF-8 byte order = code point order) and each
    array's codes into it: one hash pass (``dictionary_encode``) and a sort of the distinct
    values only."""
    parts = [_strings(a) for a in arrays]
    encoded = pc.dictionary_encode(pa.concat_arrays(parts)) if parts else None
    if encoded is None or len(encoded) == 0:
        return pa.array([], pa.string()), [np.empty(0, dtype=np.int64) for _ in parts]
    order = np.asarray(pc.array_sort_indices(encoded.dictionary).to_numpy(), dtype=np.int64)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size, dtype=np.int64)
    codes = rank[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
    vocab = pc.take(encoded.dictionary, pa.array(order))
    bounds = np.cumsum([0] + [len(p) for p in parts])
    return vocab, [codes[bounds[i] : bounds[i + 1]] for i in range(len(parts))]


__all__ = ["judgments_version", "read_judged_runs", "read_run_times"]
