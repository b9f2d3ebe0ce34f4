"""Parquet sources: the only module that imports pyarrow.

Turns parquet logs into the float64 arrays the statistics layer needs, and writes parquet for the
demo world and the tests. The data contract is in ``docs/data-contract.md``; in short:

* A source path is a parquet file, a directory (read recursively), a glob, or a URI that pyarrow's
  filesystems understand (``file://``, ``s3://``, ...). Below a directory or a glob's fixed prefix,
  files and directories whose names start with ``_`` or ``.`` are skipped.
* Hive partition directories whose value is a UTC date (``date=2026-11-30``) or that spell a
  UTC period with ``year=``/``month=``/``day=``/``hour=`` are pruned by the window without being
  opened. A file read from such a partition must hold only timestamps inside it
  (``SchemaError`` otherwise), because other windows would skip it.
* Windows are half-open, ``[start, end)`` in UTC: an event at ``start`` is in, one at ``end`` is
  out. Naive timestamp columns are UTC; integer epoch columns need ``timestamp_unit``.
* Within a window, rows are counted (``rows``); rows with a null, NaN or infinite value are
  dropped and counted; when ``dropped / rows > max_invalid_share`` the read raises
  ``BadValuesError``. An empty window is not an error: arrays of length 0 come back, with the
  source's newest timestamp.
* Every pyarrow failure becomes a ``SourceError`` subclass that names the file and column.

Footers and row-group statistics are cached per ``(path, size, mtime)``, so a daemon or a backtest
that reads window after window lists only the partitions it needs and never re-reads a footer.
"""

from __future__ import annotations

import errno
import fnmatch
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeAlias
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from monitor.errors import (
    BadValuesError,
    CorruptFileError,
    SchemaError,
    SourceError,
    SourceNotFoundError,
    SourcePermissionError,
)

__all__ = [
    "OutcomeSpec",
    "OutcomeWindow",
    "PairedOutcomes",
    "ScoreSpec",
    "ScoreWindow",
    "Window",
    "clear_cache",
    "latest_timestamp",
    "pair_outcomes",
    "read_outcomes",
    "read_scores",
    "write_parquet",
]

TimeUnit: TypeAlias = Literal["s", "ms", "us", "ns"]
FloatArray: TypeAlias = npt.NDArray[np.float64]
IntArray: TypeAlias = npt.NDArray[np.int64]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NS_PER: dict[str, int] = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_PARQUET_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}
_I64_MIN = int(np.iinfo(np.int64).min)
_I64_MAX = int(np.iinfo(np.int64).max)
_GLOB_CHARS = re.compile(r"[*?\[]")
_DATE_VALUE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_CACHE_MAX_FILES = 65_536
# pyarrow reports undecodable pages as a bare OSError (no errno); these words tell them from I/O.
_CORRUPT = re.compile(
    r"deserializ|thrift|corrupt|magic|truncat|unexpected end|page header|decompress|invalid|"
    r"out of bounds|exceeds|premature|snappy|zstd|lz4|gzip|brotli",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------------------------------
# Public value types
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Errors: every pyarrow / OS failure becomes a SourceError subclass
# --------------------------------------------------------------------------------------------------


def _translate(exc: BaseException, path: str, doing: str) -> SourceError:
    """Map an exception raised by pyarrow or the OS while ``doing`` something to ``path``."""
    text = str(exc)
    if (
        isinstance(exc, PermissionError)
        or (isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM))
        or "Permission denied" in text
        or "[errno 13]" in text
    ):
        return SourcePermissionError(
            f"permission denied while {doing}: {text}",
            path=path,
            hint="grant the monitor's user read access to the file and its directories",
        )
    if isinstance(exc, FileNotFoundError):
        return SourceNotFoundError(
            f"disappeared while {doing}: {text}",
            path=path,
            hint="the file was removed or renamed during the read; retry, or check the producer",
        )
    decoding = isinstance(exc, OSError) and exc.errno is None and _CORRUPT.search(text) is not None
    if decoding or isinstance(exc, pa.ArrowException | ValueError | EOFError):
        return CorruptFileError(
            f"cannot be read as parquet while {doing}: {text}",
            path=path,
            hint="the file is corrupt or truncated; rewrite it, or move it out of the source "
            "(a name starting with '_' or '.' is skipped)",
        )
    return SourceError(
        f"I/O error while {doing}: {type(exc).__name__}: {text}",
        path=path,
        hint="check that the storage is reachable and retry",
    )


# --------------------------------------------------------------------------------------------------
# Discovery: listing with hive-partition pruning
# --------------------------------------------------------------------------------------------------

_Interval: TypeAlias = tuple[int, int] | None  # [lo, hi) in ns, None = unknown


@dataclass(frozen=True, slots=True)
class _File:
    path: str
    size: int
    mtime_ns: int
    partitions: tuple[tuple[str, str], ...]
    interval: _Interval


@dataclass(frozen=True, slots=True)
class _Source:
    display: str
    fs: pafs.FileSystem
    root: str  # a file, or the directory that is walked
    is_file: bool
    pattern: str | None  # glob over full paths, for glob sources
    prune: bool


_FS_CACHE: dict[str, tuple[pafs.FileSystem, str]] = {}
_FS_LOCK = threading.Lock()
_LOCAL_FS = pafs.LocalFileSystem()


def _filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path inside it; URI filesystems are created once per path."""
    if "://" not in path:
        return _LOCAL_FS, str(Path(path).expanduser().absolute())
    with _FS_LOCK:
        cached = _FS_CACHE.get(path)
    if cached is not None:
        return cached
    try:
        resolved: tuple[pafs.FileSystem, str] = pafs.FileSystem.from_uri(path)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise SourceNotFoundError(
            f"no filesystem understands this URI: {exc}",
            path=path,
            hint="use a local path or a file://, s3://, gs:// or hdfs:// URI that pyarrow supports",
        ) from exc
    with _FS_LOCK:
        _FS_CACHE[path] = resolved
    return resolved


def _info(fs: pafs.FileSystem, path: str, display: str) -> pafs.FileInfo:
    try:
        return fs.get_file_info(path)
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, display, "looking the path up") from exc


def _resolve(path: str, prune: bool) -> _Source:
    fs, inner = _filesystem(path)
    match = _GLOB_CHARS.search(inner)
    if match is not None:
        root = inner[: match.start()].rsplit("/", 1)[0] or "/"
        info = _info(fs, root, path)
        if info.type != pafs.FileType.Directory:
            raise SourceNotFoundError(
                f"the glob's directory {root!r} does not exist",
                path=path,
                hint="check the path in the configuration",
            )
        return _Source(path, fs, root, False, inner, prune)
    info = _info(fs, inner, path)
    if info.type == pafs.FileType.NotFound:
        raise SourceNotFoundError(
            "no such file or directory", path=path, hint="check the path in the configuration"
        )
    return _Source(path, fs, inner, info.type == pafs.FileType.File, None, prune)


def _hive(name: str) -> tuple[str, str] | None:
    key, sep, value = name.partition("=")
    return (key, unquote(value)) if sep and key else None


def _partition_interval(parts: tuple[tuple[str, str], ...]) -> _Interval:
    """The UTC period a chain of hive partitions spells, or None when it spells none.

    ``<any>=YYYY-MM-DD`` sets year, month and day; ``year=``, ``month=``, ``day=``, ``hour=`` set
    one field each (integers). The interval is the finest period whose coarser fields are all known.
    """
    fields: dict[str, int] = {}
    for key, value in parts:
        m = _DATE_VALUE.match(value)
        if m:
            fields.update(year=int(m[1]), month=int(m[2]), day=int(m[3]))
        elif key.lower() in ("year", "month", "day", "hour") and value.isdigit():
            fields[key.lower()] = int(value)
    try:
        if "year" not in fields:
            return None
        year = fields["year"]
        if "month" not in fields:
            lo, hi = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
        elif "day" not in fields:
            month = fields["month"]
            lo = datetime(year, month, 1, tzinfo=UTC)
            hi = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        else:
            lo = datetime(year, fields["month"], fields["day"], tzinfo=UTC)
            if "hour" in fields:
                lo += timedelta(hours=fields["hour"])
                if fields["hour"] > 23:
                    return None
                hi = lo + timedelta(hours=1)
            else:
                hi = lo + timedelta(days=1)
    except (ValueError, OverflowError):
        return None
    return _to_ns(lo), _to_ns(hi)


def _list_dir(source: _Source, directory: str) -> list[pafs.FileInfo]:
    try:
        infos = source.fs.get_file_info(pafs.FileSelector(directory, recursive=False))
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, directory, "listing the directory") from exc
    return sorted(infos, key=lambda i: i.path)


def _walk(
    source: _Source,
    keep: Callable[[_Interval], bool],
) -> Iterator[_File]:
    """Files of ``source`` in path order, descending only into partitions that ``keep`` accepts."""
    if source.is_file:
        info = _info(source.fs, source.root, source.display)
        yield _File(info.path, info.size or 0, info.mtime_ns or 0, (), None)
        return
    stack: list[tuple[str, tuple[tuple[str, str], ...], _Interval]] = [(source.root, (), None)]
    while stack:
        directory, parts, interval = stack.pop()
        subdirs = []
        for info in _list_dir(source, directory):
            if info.base_name.startswith(("_", ".")):
                continue
            if info.type == pafs.FileType.Directory:
                kv = _hive(info.base_name)
                sub_parts = (*parts, kv) if kv else parts
                sub_interval = _partition_interval(sub_parts) if source.prune else None
                if sub_interval is None or keep(sub_interval):
                    subdirs.append((info.path, sub_parts, sub_interval))
            elif info.type == pafs.FileType.File and (
                source.pattern is None or fnmatch.fnmatchcase(info.path, source.pattern)
            ):
                yield _File(info.path, info.size or 0, info.mtime_ns or 0, parts, interval)
        stack.extend(reversed(subdirs))


# --------------------------------------------------------------------------------------------------
# Footers and row-group statistics, cached per (path, size, mtime)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _TsStats:
    """Per row group: rows, and the [min, max] of the timestamp column in ns (None = unknown)."""

    rows: tuple[int, ...]
    lo: tuple[int | None, ...]
    hi: tuple[int | None, ...]
    nulls: tuple[int | None, ...]

    @property
    def newest(self) -> int | None:
        known = [h for h in self.hi if h is not None]
        return max(known) if known else None

    @property
    def oldest(self) -> int | None:
        known = [lo for lo in self.lo if lo is not None]
        return min(known) if known else None


@dataclass(slots=True)
class _Footer:
    metadata: pq.FileMetaData
    schema: pa.Schema
    leaf_index: dict[str, int]
    ts_stats: dict[tuple[str, str | None], _TsStats] = field(default_factory=dict)


class _FooterCache:
    """LRU cache of parquet footers keyed by filesystem, path, size and modification time."""

    def __init__(self, max_files: int) -> None:
        self._max = max_files
        self._entries: OrderedDict[tuple[str, str, int, int], _Footer] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # footers read from storage, for tests and benchmarks

    def get(self, source: _Source, f: _File) -> _Footer:
        key = (source.fs.type_name, f.path, f.size, f.mtime_ns)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry
        entry = _read_footer(source, f)
        with self._lock:
            self.opened += 1
            self._entries[key] = entry
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.opened = 0


_FOOTERS = _FooterCache(_CACHE_MAX_FILES)


def clear_cache() -> None:
    """Forget every cached footer and filesystem (tests; or after rewriting files in place)."""
    _FOOTERS.clear()
    with _FS_LOCK:
        _FS_CACHE.clear()


def _read_footer(source: _Source, f: _File) -> _Footer:
    try:
        with source.fs.open_input_file(f.path) as handle:
            metadata = pq.read_metadata(handle)
        schema = metadata.schema.to_arrow_schema()
    except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
        raise _translate(exc, f.path, "reading the parquet footer") from exc
    leaf_index: dict[str, int] = {}
    for i in range(metadata.num_columns):
        leaf_index.setdefault(metadata.schema.column(i).path, i)
    return _Footer(metadata, schema, leaf_index)


@contextmanager
def _opened(source: _Source, f: _File, footer: _Footer) -> Iterator[pq.ParquetFile]:
    """The file opened for reading with its cached footer; the handle is closed on exit."""
    try:
        handle = source.fs.open_input_file(f.path)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise _translate(exc, f.path, "opening the file") from exc
    try:
        try:
            pf = pq.ParquetFile(handle, metadata=footer.metadata)
        except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
            raise _translate(exc, f.path, "opening the file") from exc
        yield pf
    finally:
        handle.close()


def _column_type(
    footer: _Footer, f: _File, column: str, role: str, spec_column_hint: str
) -> pa.DataType:
    idx = footer.schema.get_field_index(column)
    if idx < 0:
        found = ", ".join(repr(n) for n in footer.schema.names)
        raise SchemaError(
            f"the {role} column is missing; columns found: {found}",
            path=f.path,
            column=column,
            hint=f"set `{spec_column_hint}` in the configuration to one of the columns found",
        )
    dtype: pa.DataType = footer.schema.field(idx).type
    return dtype


def _ts_unit(footer: _Footer, f: _File, column: str, unit: str | None) -> str:
    """The unit of the timestamp column's values in this file (for integer columns: ``unit``)."""
    dtype = _column_type(footer, f, column, "timestamp", "timestamp_column")
    if pa.types.is_timestamp(dtype):
        return str(dtype.unit)
    if pa.types.is_integer(dtype):
        if unit is None:
            raise SchemaError(
                f"is an integer column ({dtype}) but no `timestamp_unit` is configured",
                path=f.path,
                column=column,
                hint="set `timestamp_unit` to 's', 'ms', 'us' or 'ns' for integer epoch columns",
            )
        return unit
    raise SchemaError(
        f"has type {dtype}; expected a timestamp or an integer epoch column",
        path=f.path,
        column=column,
        hint="write timestamps as parquet TIMESTAMP, or integers with `timestamp_unit` set",
    )


def _ts_stats(source: _Source, f: _File, column: str, unit: str | None) -> _TsStats:
    footer = _FOOTERS.get(source, f)
    key = (column, unit)
    cached = footer.ts_stats.get(key)
    if cached is not None:
        return cached
    native = _ts_unit(footer, f, column, unit)
    md = footer.metadata
    leaf = footer.leaf_index.get(column)
    raw_unit: str | None = None
    if leaf is not None:
        col_schema = md.schema.column(leaf)
        logical = col_schema.logical_type
        if logical.type == "TIMESTAMP":
            raw_unit = _PARQUET_UNITS.get(_json_field(logical.to_json(), "timeUnit"))
        elif col_schema.physical_type in ("INT32", "INT64") and not pa.types.is_timestamp(
            footer.schema.field(column).type
        ):
            raw_unit = native
    rows: list[int] = []
    los: list[int | None] = []
    his: list[int | None] = []
    nulls: list[int | None] = []
    missing = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        rows.append(rg.num_rows)
        st = rg.column(leaf).statistics if leaf is not None else None
        if raw_unit is not None and st is not None and st.has_min_max:
            factor = _NS_PER[raw_unit]
            los.append(int(st.min_raw) * factor)
            his.append(int(st.max_raw) * factor)
            nulls.append(int(st.null_count) if st.has_null_count else None)
        else:
            los.append(None)
            his.append(None)
            nulls.append(None)
            missing.append(g)
    if missing:  # no usable statistics (e.g. INT96, or a writer without them): read the column once
        with _opened(source, f, footer) as pf:
            for g in missing:
                try:
                    table = pf.read_row_group(g, columns=[column])
                except (OSError, pa.ArrowException, ValueError) as exc:
                    raise _translate(exc, f.path, f"reading column {column!r}") from exc
                ns = _ts_to_ns(table.column(column), native)
                valid = ns[ns != _I64_MIN]
                los[g] = int(valid.min()) if valid.size else None
                his[g] = int(valid.max()) if valid.size else None
                nulls[g] = int(ns.size - valid.size)
    stats = _TsStats(tuple(rows), tuple(los), tuple(his), tuple(nulls))
    footer.ts_stats[key] = stats
    return stats


def _json_field(text: str, name: str) -> str:
    m = re.search(rf'"{name}"\s*:\s*"([^"]*)"', text)
    return m[1] if m else ""


def _ts_native(chunked: pa.ChunkedArray | pa.Array, unit: str) -> npt.NDArray[np.int64]:
    """Timestamp values as int64 in their own unit, nulls as INT64_MIN."""
    arr = chunked.combine_chunks() if isinstance(chunked, pa.ChunkedArray) else chunked
    if pa.types.is_timestamp(arr.type) or not pa.types.is_int64(arr.type):
        arr = arr.cast(pa.int64())
    if arr.null_count:
        arr = pc.fill_null(arr, _I64_MIN)
    out: npt.NDArray[np.int64] = arr.to_numpy(zero_copy_only=False)
    return out


def _ts_to_ns(chunked: pa.ChunkedArray | pa.Array, unit: str) -> npt.NDArray[np.int64]:
    """Timestamp values in ns since the epoch, nulls as INT64_MIN."""
    native = _ts_native(chunked, unit)
    factor = _NS_PER[unit]
    if factor == 1:
        return native
    ns = native * factor
    ns[native == _I64_MIN] = _I64_MIN
    return ns


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _native_bounds(window: Window, unit: str) -> tuple[int, int]:
    """``[lo, hi)`` in the column's unit such that ``lo <= v < hi`` iff ``v`` is in the window."""
    factor = _NS_PER[unit]
    lo = _ceil_div(window.start_ns, factor)
    hi = _ceil_div(window.end_ns, factor)
    return max(lo, _I64_MIN + 1), min(hi, _I64_MAX)


# --------------------------------------------------------------------------------------------------
# Newest timestamp (freshness) and window selection
# --------------------------------------------------------------------------------------------------


def _newest(source: _Source, column: str, unit: str | None) -> tuple[int | None, int]:
    """Newest timestamp (ns) in the source and the number of files seen.

    Partitions are visited newest first; one whose period ends at or before the newest timestamp
    already found is not listed, so only the newest partition's footers are read.
    """
    if source.is_file:
        f = next(_walk(source, lambda _i: True))
        return _ts_stats(source, f, column, unit).newest, 1
    best: int | None = None
    seen = 0
    stack: list[tuple[str, tuple[tuple[str, str], ...], _Interval]] = [(source.root, (), None)]
    while stack:
        directory, parts, interval = stack.pop()
        if interval is not None and best is not None and interval[1] <= best:
            continue
        subdirs = []
        for info in _list_dir(source, directory):
            if info.base_name.startswith(("_", ".")):
                continue
            if info.type == pafs.FileType.Directory:
                kv = _hive(info.base_name)
                sub_parts = (*parts, kv) if kv else parts
                sub_interval = _partition_interval(sub_parts) if source.prune else None
                subdirs.append((info.path, sub_parts, sub_interval))
            elif info.type == pafs.FileType.File and (
                source.pattern is None or fnmatch.fnmatchcase(info.path, source.pattern)
            ):
                f = _File(info.path, info.size or 0, info.mtime_ns or 0, parts, interval)
                seen += 1
                newest = _ts_stats(source, f, column, unit).newest
                if newest is not None and (best is None or newest > best):
                    best = newest
        # Unknown periods first in the stack's tail order? No: pop() takes the last; put the newest
        # period last so it is visited first, and unknown ones before it (they cannot be skipped).
        subdirs.sort(key=lambda s: (s[2] is None, s[2][1] if s[2] is not None else 0))
        stack.extend(subdirs)
    return best, seen


def _overlaps(interval: _Interval, window: Window) -> bool:
    return interval is None or (interval[0] < window.end_ns and interval[1] > window.start_ns)


@dataclass(frozen=True, slots=True)
class _Plan:
    file: _File
    footer: _Footer
    unit: str
    groups: tuple[int, ...]  # row groups that may hold rows of the window
    inside: tuple[bool, ...]  # the whole row group is in the window, no null timestamps
    capacity: int


def _plan(source: _Source, window: Window, column: str, unit: str | None) -> list[_Plan]:
    plans = []
    start, end = window.start_ns, window.end_ns
    for f in _walk(source, lambda interval: _overlaps(interval, window)):
        stats = _ts_stats(source, f, column, unit)
        if f.interval is not None:
            _check_partition(f, stats, column)
        groups, inside, capacity = [], [], 0
        for g, rows in enumerate(stats.rows):
            lo, hi, nulls = stats.lo[g], stats.hi[g], stats.nulls[g]
            if rows == 0 or (lo is not None and hi is not None and (hi < start or lo >= end)):
                continue
            groups.append(g)
            inside.append(
                lo is not None and hi is not None and lo >= start and hi < end and nulls == 0
            )
            capacity += rows
        if groups:
            footer = _FOOTERS.get(source, f)
            plans.append(
                _Plan(
                    f,
                    footer,
                    _ts_unit(footer, f, column, unit),
                    tuple(groups),
                    tuple(inside),
                    capacity,
                )
            )
    return plans


def _check_partition(f: _File, stats: _TsStats, column: str) -> None:
    assert f.interval is not None
    lo, hi = stats.oldest, stats.newest
    if (lo is not None and lo < f.interval[0]) or (hi is not None and hi >= f.interval[1]):
        part = "/".join(f"{k}={v}" for k, v in f.partitions)
        raise SchemaError(
            f"holds timestamps from {_from_ns(lo or 0).isoformat()} to "
            f"{_from_ns(hi or 0).isoformat()}, outside its partition {part} "
            f"[{_from_ns(f.interval[0]).isoformat()}, {_from_ns(f.interval[1]).isoformat()}); "
            "windows that prune by partition would miss those rows",
            path=f.path,
            column=column,
            hint="partition by the UTC date/hour of this column, or set prune_partitions: false",
        )


# --------------------------------------------------------------------------------------------------
# Column conversion
# --------------------------------------------------------------------------------------------------


def _check_numeric(dtype: pa.DataType, f: _File, column: str, role: str, key: str) -> None:
    if not (pa.types.is_floating(dtype) or pa.types.is_integer(dtype) or pa.types.is_null(dtype)):
        raise SchemaError(
            f"has type {dtype}; the {role} column must be a float (or integer) column",
            path=f.path,
            column=column,
            hint=f"write {role}s as float32/float64, or point `{key}` at the right column",
        )


def _check_label(dtype: pa.DataType, f: _File, column: str, role: str, key: str) -> None:
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    if not (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_null(dtype)
    ):
        raise SchemaError(
            f"has type {dtype}; the {role} column must hold strings or integers",
            path=f.path,
            column=column,
            hint=f"point `{key}` at a string or integer column",
        )


def _floats(chunked: pa.ChunkedArray) -> tuple[FloatArray, npt.NDArray[np.bool_] | None]:
    """Values as float64 and the validity mask (None when there is no null)."""
    arr = chunked.combine_chunks()
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan), np.zeros(len(arr), dtype=bool)
    valid = None
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
    values = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
    return values, valid


class _Labels:
    """Maps label values (strings, or integers written as strings) to stable integer codes."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def code(self, name: str) -> int:
        return self.codes.setdefault(name, len(self.codes))

    def encode(
        self, chunked: pa.ChunkedArray
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
        """Codes (-1 for null) and the validity mask."""
        arr = chunked.combine_chunks()
        if pa.types.is_null(arr.type):
            return np.full(len(arr), -1, dtype=np.int32), np.zeros(len(arr), dtype=bool)
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        names = [str(v) for v in arr.dictionary.to_pylist()]
        lut = np.array([self.code(n) for n in names] + [-1], dtype=np.int32)
        idx = arr.indices
        if idx.null_count:
            idx = pc.fill_null(idx, len(names))
        codes = lut[np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int64)]
        return codes, codes >= 0

    def names(self) -> list[str]:
        return list(self.codes)


def _segment(
    table: pa.Table, f: _File, column: str | None, labels: _Labels, n: int
) -> tuple[npt.NDArray[np.int32] | None, npt.NDArray[np.bool_] | None]:
    if column is None:
        return None, None
    if column in table.column_names:
        return labels.encode(table.column(column))
    value = dict(f.partitions)[column]
    return np.full(n, labels.code(value), dtype=np.int32), None


def _segment_source(footer: _Footer, f: _File, column: str | None) -> str | None:
    """Validate the segment column of a file: ``None`` if it comes from a hive partition."""
    if column is None:
        return None
    if footer.schema.get_field_index(column) < 0 and column in dict(f.partitions):
        return None
    dtype = _column_type(footer, f, column, "segment", "segment_column")
    _check_label(dtype, f, column, "segment", "segment_column")
    return column


def _read_group(pf: pq.ParquetFile, plan: _Plan, g: int, columns: list[str]) -> pa.Table:
    try:
        return pf.read_row_group(g, columns=columns, use_threads=True)
    except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
        raise _translate(exc, plan.file.path, f"reading row group {g}") from exc


def _in_window(table: pa.Table, column: str, unit: str, window: Window) -> npt.NDArray[np.bool_]:
    native = _ts_native(table.column(column), unit)
    lo, hi = _native_bounds(window, unit)
    mask: npt.NDArray[np.bool_] = (native >= lo) & (native < hi)
    return mask


def _raise_bad_values(
    what: str,
    column: str,
    window: Window,
    rows: int,
    counts: Mapping[str, int],
    share: float,
    per_file: Mapping[str, int],
) -> None:
    dropped = sum(counts.values())
    worst = sorted(per_file.items(), key=lambda kv: -kv[1])[:3]
    files = ", ".join(f"{p} ({n})" for p, n in worst)
    detail = ", ".join(f"{k}: {v}" for k, v in counts.items())
    raise BadValuesError(
        f"{dropped} of {rows} {what} rows in window {window} are invalid ({detail}), "
        f"{dropped / rows:.2%} > max_invalid_share {share:.2%}; most in: {files}",
        path=worst[0][0] if len(worst) == 1 else files,
        column=column,
        hint="fix the producer of these rows, or raise max_invalid_share if they are expected",
    )


# --------------------------------------------------------------------------------------------------
# Public readers
# --------------------------------------------------------------------------------------------------


def latest_timestamp(spec: ScoreSpec | OutcomeSpec) -> datetime | None:
    """Newest timestamp in the source, from footer statistics (cached); ``None`` if it holds none.

    Only the newest hive partition's files are opened. A glob matching no file raises
    ``SourceNotFoundError``; an existing empty directory gives ``None``.
    """
    source = _resolve(spec.path, spec.prune_partitions)
    newest, _ = _newest_checked(source, spec.timestamp_column, spec.timestamp_unit)
    return None if newest is None else _from_ns(newest)


def _newest_checked(source: _Source, column: str, unit: str | None) -> tuple[int | None, int]:
    newest, seen = _newest(source, column, unit)
    if seen == 0 and source.pattern is not None:
        raise SourceNotFoundError(
            "the glob matches no file",
            path=source.display,
            hint="check the path in the configuration",
        )
    return newest, seen


def read_scores(spec: ScoreSpec, window: Window, *, with_timestamps: bool = False) -> ScoreWindow:
    """Read the finite scores whose timestamp is in ``window`` (half-open, UTC).

    Only the row groups whose timestamp statistics overlap the window are read, and only the
    timestamp, score and segment columns; rows are copied straight into a preallocated float64
    array (no pandas). ``with_timestamps`` also returns the aligned timestamps (int64 ns, UTC), so
    a caller can read a long span once and slice it. Raises ``BadValuesError`` when
    ``dropped / rows > spec.max_invalid_share``.
    """
    if not isinstance(window, Window):
        raise TypeError(f"`window` must be a Window; got {type(window).__name__}.")
    source = _resolve(spec.path, spec.prune_partitions)
    newest, _ = _newest_checked(source, spec.timestamp_column, spec.timestamp_unit)
    plans = _plan(source, window, spec.timestamp_column, spec.timestamp_unit)

    seg_col = spec.segment_column
    seg_sources = []
    for plan in plans:
        dtype = _column_type(plan.footer, plan.file, spec.score_column, "score", "score_column")
        _check_numeric(dtype, plan.file, spec.score_column, "score", "score_column")
        seg_sources.append(_segment_source(plan.footer, plan.file, seg_col))

    capacity = sum(p.capacity for p in plans)
    values = np.empty(capacity, dtype=np.float64)
    stamps = np.empty(capacity if with_timestamps else 0, dtype=np.int64)
    codes = np.empty(capacity if seg_col is not None else 0, dtype=np.int32)
    labels = _Labels()
    n = rows = n_null = n_nan = n_inf = 0
    per_file: dict[str, int] = {}

    for plan, seg_in_file in zip(plans, seg_sources, strict=True):
        dropped_before = n_null + n_nan + n_inf
        with _opened(source, plan.file, plan.footer) as pf:
            for g, inside in zip(plan.groups, plan.inside, strict=True):
                need_ts = with_timestamps or not inside
                columns = [spec.score_column]
                if need_ts:
                    columns.append(spec.timestamp_column)
                if seg_in_file is not None:
                    columns.append(seg_in_file)
                table = _read_group(pf, plan, g, columns)
                score, valid = _floats(table.column(spec.score_column))
                mask = (
                    None if inside else _in_window(table, spec.timestamp_column, plan.unit, window)
                )
                seg, seg_valid = _segment(table, plan.file, seg_col, labels, table.num_rows)
                in_rows = table.num_rows if mask is None else int(mask.sum())
                rows += in_rows
                keep = mask
                for extra in (valid, seg_valid):
                    if extra is not None:
                        keep = extra if keep is None else keep & extra
                if keep is not None:
                    n_null += in_rows - int(keep.sum())
                    score = score[keep]
                finite = np.isfinite(score)
                if finite.all():
                    take = None
                    kept = score
                else:
                    bad = score[~finite]
                    nan = int(np.isnan(bad).sum())
                    n_nan += nan
                    n_inf += bad.size - nan
                    take = finite
                    kept = score[finite]
                m = kept.size
                values[n : n + m] = kept
                if with_timestamps:
                    ns = _ts_to_ns(table.column(spec.timestamp_column), plan.unit)
                    ns = _select(ns, keep, take)
                    stamps[n : n + m] = ns
                if seg is not None:
                    codes[n : n + m] = _select(seg, keep, take)
                n += m
        if n_null + n_nan + n_inf > dropped_before:
            per_file[plan.file.path] = n_null + n_nan + n_inf - dropped_before

    if rows and (n_null + n_nan + n_inf) / rows > spec.max_invalid_share:
        _raise_bad_values(
            "score",
            spec.score_column,
            window,
            rows,
            {"null": n_null, "NaN": n_nan, "inf": n_inf},
            spec.max_invalid_share,
            per_file,
        )
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
        newest_timestamp=None if newest is None else _from_ns(newest),
        files_read=len(plans),
    )


def _select(
    arr: npt.NDArray[Any], keep: npt.NDArray[np.bool_] | None, take: npt.NDArray[np.bool_] | None
) -> npt.NDArray[Any]:
    if keep is not None:
        arr = arr[keep]
    if take is not None:
        arr = arr[take]
    return arr


def _shrink(arr: npt.NDArray[Any], n: int) -> npt.NDArray[Any]:
    """``arr[:n]`` without keeping a much larger buffer alive."""
    if n == arr.size:
        return arr
    if n >= 0.9 * arr.size:
        return arr[:n]
    return arr[:n].copy()


def _compact_codes(
    codes: npt.NDArray[np.int32], names: list[str]
) -> tuple[npt.NDArray[np.int32], tuple[str, ...]]:
    """Keep the names that occur, sorted, and renumber ``codes`` to match (in place when owned)."""
    counts = np.bincount(codes, minlength=len(names)) if codes.size else np.zeros(len(names))
    present = sorted((names[i], i) for i in range(len(names)) if counts[i] > 0)
    lut = np.full(max(len(names), 1), -1, dtype=np.int32)
    for new, (_, old) in enumerate(present):
        lut[old] = new
    out: npt.NDArray[np.int32] = lut[codes] if codes.size else codes
    return out, tuple(name for name, _ in present)


def read_outcomes(spec: OutcomeSpec, window: Window) -> OutcomeWindow:
    """Read the outcomes in ``window`` and average the repeated evaluations of each key.

    A key is ``query_id`` (as a string), or ``(segment, query_id)`` when ``segment_column`` is set.
    ``outcomes[k] = mean of the counts[k] finite outcomes of key k``; keys are sorted.
    """
    if not isinstance(window, Window):
        raise TypeError(f"`window` must be a Window; got {type(window).__name__}.")
    source = _resolve(spec.path, spec.prune_partitions)
    newest, _ = _newest_checked(source, spec.timestamp_column, spec.timestamp_unit)
    plans = _plan(source, window, spec.timestamp_column, spec.timestamp_unit)
    seg_col = spec.segment_column
    seg_sources = []
    for plan in plans:
        dtype = _column_type(
            plan.footer, plan.file, spec.outcome_column, "outcome", "outcome_column"
        )
        _check_numeric(dtype, plan.file, spec.outcome_column, "outcome", "outcome_column")
        dtype = _column_type(plan.footer, plan.file, spec.query_column, "query id", "query_column")
        _check_label(dtype, plan.file, spec.query_column, "query id", "query_column")
        seg_sources.append(_segment_source(plan.footer, plan.file, seg_col))

    labels = _Labels()
    qids: list[npt.NDArray[np.object_]] = []
    outs: list[FloatArray] = []
    segs: list[npt.NDArray[np.int32]] = []
    rows = n_nullq = n_null = n_nan = n_inf = 0
    per_file: dict[str, int] = {}
    for plan, seg_in_file in zip(plans, seg_sources, strict=True):
        dropped_before = n_nullq + n_null + n_nan + n_inf
        with _opened(source, plan.file, plan.footer) as pf:
            for g in plan.groups:
                columns = [spec.timestamp_column, spec.query_column, spec.outcome_column]
                if seg_in_file is not None:
                    columns.append(seg_in_file)
                table = _read_group(pf, plan, g, columns)
                mask = _in_window(table, spec.timestamp_column, plan.unit, window)
                in_rows = int(mask.sum())
                rows += in_rows
                qarr = table.column(spec.query_column).combine_chunks()
                if pa.types.is_dictionary(qarr.type):
                    qarr = qarr.dictionary_decode()
                if not (pa.types.is_string(qarr.type) or pa.types.is_large_string(qarr.type)):
                    qarr = qarr.cast(pa.string())
                q = qarr.to_numpy(zero_copy_only=False)
                q_valid = qarr.is_valid().to_numpy(zero_copy_only=False)
                mask_q = mask & q_valid
                n_nullq += in_rows - int(mask_q.sum())
                value, valid = _floats(table.column(spec.outcome_column))
                seg, seg_valid = _segment(table, plan.file, seg_col, labels, table.num_rows)
                keep = mask_q
                for extra in (valid, seg_valid):
                    if extra is not None:
                        keep = keep & extra
                n_null += int(mask_q.sum()) - int(keep.sum())
                value = value[keep]
                finite = np.isfinite(value)
                bad = value[~finite]
                nan = int(np.isnan(bad).sum())
                n_nan += nan
                n_inf += bad.size - nan
                outs.append(value[finite])
                qids.append(q[keep][finite])
                if seg is not None:
                    segs.append(seg[keep][finite])
        dropped = n_nullq + n_null + n_nan + n_inf - dropped_before
        if dropped:
            per_file[plan.file.path] = dropped

    if rows and (n_nullq + n_null + n_nan + n_inf) / rows > spec.max_invalid_share:
        _raise_bad_values(
            "outcome",
            spec.outcome_column,
            window,
            rows,
            {"null query id": n_nullq, "null": n_null, "NaN": n_nan, "inf": n_inf},
            spec.max_invalid_share,
            per_file,
        )
    all_q = np.concatenate(qids) if qids else np.empty(0, dtype=object)
    all_v = np.concatenate(outs) if outs else np.empty(0, dtype=np.float64)
    q_names, q_code = np.unique(all_q.astype(str), return_inverse=True)
    if seg_col is not None:
        names = labels.names()
        all_s = np.concatenate(segs) if segs else np.empty(0, dtype=np.int32)
        order = np.argsort(np.array(names, dtype=str)) if names else np.empty(0, dtype=np.intp)
        rank = np.empty(len(names), dtype=np.int64)
        rank[order] = np.arange(len(names))
        key = rank[all_s] * max(len(q_names), 1) + q_code if all_s.size else q_code
    else:
        key = q_code
    uniq, inv = np.unique(key, return_inverse=True)
    counts = np.bincount(inv, minlength=uniq.size).astype(np.int64)
    sums = np.bincount(inv, weights=all_v, minlength=uniq.size)
    means = sums / np.maximum(counts, 1)
    width = max(len(q_names), 1)
    query_ids = q_names[uniq % width] if uniq.size else np.empty(0, dtype=np.str_)
    segments = None
    if seg_col is not None:
        sorted_names = np.array(sorted(labels.names()), dtype=str)
        segments = sorted_names[uniq // width] if uniq.size else np.empty(0, dtype=np.str_)
    return OutcomeWindow(
        window=window,
        query_ids=np.asarray(query_ids, dtype=np.str_),
        segments=segments,
        outcomes=np.asarray(means, dtype=np.float64),
        counts=counts,
        rows=rows,
        dropped_nan=n_nan,
        dropped_inf=n_inf,
        dropped_null_query=n_nullq,
        newest_timestamp=None if newest is None else _from_ns(newest),
        files_read=len(plans),
        dropped_null=n_null,
    )


def pair_outcomes(reference: OutcomeWindow, current: OutcomeWindow) -> PairedOutcomes:
    """Pair two outcome windows by key (``(segment, query_id)`` when both have segments).

    The result is sorted by key; ``coverage = pairs / keys in the reference`` (0.0 if it has none).
    Raises ``ValueError`` if one window has segments and the other does not.
    """
    if (reference.segments is None) != (current.segments is None):
        raise ValueError(
            "`reference` and `current` must both have segments or both have none; "
            f"got {'segments' if reference.segments is not None else 'none'} and "
            f"{'segments' if current.segments is not None else 'none'}."
        )
    vocab_q = np.unique(np.concatenate([reference.query_ids, current.query_ids]).astype(str))
    width = max(vocab_q.size, 1)

    def keys(w: OutcomeWindow, vocab_s: npt.NDArray[np.str_] | None) -> IntArray:
        k: IntArray = np.searchsorted(vocab_q, w.query_ids.astype(str)).astype(np.int64)
        if vocab_s is not None and w.segments is not None:
            k = k + np.searchsorted(vocab_s, w.segments.astype(str)).astype(np.int64) * width
        return k

    vocab_s = None
    if reference.segments is not None and current.segments is not None:
        vocab_s = np.unique(np.concatenate([reference.segments, current.segments]).astype(str))
    k_ref, k_cur = keys(reference, vocab_s), keys(current, vocab_s)
    common, i_ref, i_cur = np.intersect1d(k_ref, k_cur, assume_unique=True, return_indices=True)
    only_ref = np.setdiff1d(np.arange(k_ref.size), i_ref, assume_unique=True)
    only_cur = np.setdiff1d(np.arange(k_cur.size), i_cur, assume_unique=True)
    del common
    n_ref = k_ref.size

    def seg(w: OutcomeWindow, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.str_] | None:
        return None if w.segments is None else w.segments[idx]

    return PairedOutcomes(
        query_ids=reference.query_ids[i_ref],
        segments=seg(reference, i_ref),
        reference=reference.outcomes[i_ref],
        current=current.outcomes[i_cur],
        reference_counts=reference.counts[i_ref],
        current_counts=current.counts[i_cur],
        only_reference=int(only_ref.size),
        only_current=int(only_cur.size),
        coverage=i_ref.size / n_ref if n_ref else 0.0,
        only_reference_ids=reference.query_ids[only_ref],
        only_current_ids=current.query_ids[only_cur],
        only_reference_segments=seg(reference, only_ref),
        only_current_segments=seg(current, only_cur),
    )


# --------------------------------------------------------------------------------------------------
# Writing (demo world, simulator, tests)
# --------------------------------------------------------------------------------------------------


def write_parquet(
    path: str | Path,
    columns: Mapping[str, np.ndarray],
    *,
    row_group_size: int | None = None,
) -> None:
    """Write ``columns`` (name -> 1-D array of equal length) to a parquet file at ``path``.

    ``datetime64`` arrays are written as UTC timestamps of the same unit; parent directories are
    created. Used by the demo world, the simulator and the tests.
    """
    arrays = {}
    for name, values in columns.items():
        arr = np.asarray(values)
        if np.issubdtype(arr.dtype, np.datetime64):
            unit = np.datetime_data(arr.dtype)[0]
            arrays[name] = pa.array(arr, type=pa.timestamp(unit, tz="UTC"))
        else:
            arrays[name] = pa.array(arr)
    table = pa.table(arrays)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, target, row_group_size=row_group_size)
