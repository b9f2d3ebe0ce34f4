"""Parquet footers and row-group timestamp statistics, cached per ``(path, size, mtime, ctime)``."""

from __future__ import annotations

import dataclasses
import itertools
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from monitor.errors import (
    SchemaError,
)
from monitor.memo import ByIdentity
from monitor.sources.model import _NS_PER, Window
from monitor.sources.paths import _FS_CACHE, _FS_LOCK, _File, _Source, clear_listings
from monitor.sources.translate import _translate

if TYPE_CHECKING:  # (scores imports this module)
    from monitor.sources.scores import FileStat

_PARQUET_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}


_I64_MIN = int(np.iinfo(np.int64).min)


_I64_MAX = int(np.iinfo(np.int64).max)


_CACHE_MAX_FILES = 65_536
# footers kept, by their estimated memory: an in-memory footer is about 8 times its thrift form
# (160 KB for a file of 20 columns in 8 row groups). By count alone, a daemon kept the footer of
# every file it ever walked, up to 65,536 of them (10 GB of such files), long after they left
# its windows
_CACHE_MAX_BYTES = 256 << 20
_FOOTER_OVERHEAD = 4096
# past the byte bound only footers unused this long go: an unpartitioned source plans every
# file at every check, and a bound below its footers once read them all again at each check
_HOT_SECONDS = 86400.0
_clock = time.monotonic


@dataclass(frozen=True, slots=True)
class _TsStats:
    """Per row group: rows, and the [min, max] of the timestamp column in ns (None = unknown)."""

    rows: tuple[int, ...]
    lo: tuple[int | None, ...]
    hi: tuple[int | None, ...]
    nulls: tuple[int | None, ...]
    unit: str = ""  # the column's unit in this file (``_ts_unit``)
    # computed once (a check plans every file of its windows again: these make that cheap)
    newest: int | None = field(init=False)
    oldest: int | None = field(init=False)
    clean: bool = field(init=False)  # every row group has rows, known bounds and no nulls
    starts: tuple[int, ...] = field(init=False)  # each row group's first row in the file

    def __post_init__(self) -> None:
        known_hi = [h for h in self.hi if h is not None]
        known_lo = [lo for lo in self.lo if lo is not None]
        set_ = object.__setattr__
        set_(self, "newest", max(known_hi) if known_hi else None)
        set_(self, "oldest", min(known_lo) if known_lo else None)
        set_(
            self,
            "clean",
            all(r > 0 for r in self.rows)
            and len(known_lo) == len(known_hi) == len(self.rows)
            and all(n == 0 for n in self.nulls),
        )
        set_(self, "starts", tuple(itertools.accumulate(self.rows, initial=0))[:-1])


@dataclass(slots=True)
class _Footer:
    metadata: pq.FileMetaData
    schema: pa.Schema
    leaf_index: dict[str, int]
    ts_stats: dict[tuple[str, str | None], _TsStats] = field(default_factory=dict)
    numeric: set[str] = field(default_factory=set)  # columns found numeric (checked once)


class _FooterCache:
    """LRU cache of parquet footers keyed by filesystem, path, size, modification time and (local
    files) status change time; bounded by count, and by estimated bytes (``_footer_bytes``)
    for the footers no read asked for in ``_HOT_SECONDS``."""

    def __init__(self, max_files: int, max_bytes: int = _CACHE_MAX_BYTES) -> None:
        self._max = max_files
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str, int, int, int], _Footer] = OrderedDict()
        self._used: dict[tuple[str, str, int, int, int], float] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.opened = 0  # footers read from storage, for tests and benchmarks

    @property
    def nbytes(self) -> int:
        """The estimated memory of the footers held."""
        return self._bytes

    def get(self, source: _Source, f: _File) -> _Footer:
        key = (source.fs.type_name, *f.identity)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._used[key] = _clock()
                return entry
        entry = _read_footer(source, f)
        with self._lock:
            self.opened += 1
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= _footer_bytes(old)
            self._entries[key] = entry
            now = self._used[key] = _clock()
            self._bytes += _footer_bytes(entry)
            while len(self._entries) > 1:
                oldest = next(iter(self._entries))
                over = self._bytes > self.max_bytes and now - self._used[oldest] > _HOT_SECONDS
                if len(self._entries) <= self._max and not over:
                    break
                gone = self._entries.pop(oldest)
                del self._used[oldest]
                self._bytes -= _footer_bytes(gone)
        return entry

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._used.clear()
            self._bytes = 0
            self.opened = 0


def _footer_bytes(footer: _Footer) -> int:
    """A footer's estimated memory: 8 times its thrift size (measured 7.9-8.4x), and a little."""
    return 8 * int(footer.metadata.serialized_size) + _FOOTER_OVERHEAD


_FOOTERS = _FooterCache(_CACHE_MAX_FILES)


class _Memo(dict[object, Any]):
    """A row group's memo of values derived from it alone; ``charge(n)`` tells the cache that
    holds the group what a new value's memory is (the cache's bound counts it)."""

    __slots__ = ("charge",)

    def __init__(self) -> None:
        super().__init__()
        self.charge: Callable[[int], None] = _no_charge


def _no_charge(nbytes: int) -> None:
    return None


def footprint(value: object) -> int:
    """An estimate of what ``value`` holds in memory: an array's bytes, plus each object's own
    size for an array of objects (query ids as Python strings: about 50 bytes each beyond
    their pointer); tuples, lists, mappings and dataclasses (a read window) member by member;
    anything else its ``getsizeof``."""
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return int(value.nbytes) + sum(map(sys.getsizeof, value.ravel().tolist()))
        return int(value.nbytes)
    if isinstance(value, (tuple, list)):
        return sys.getsizeof(value) + sum(footprint(v) for v in value)
    if isinstance(value, Mapping):
        return sys.getsizeof(value) + sum(footprint(v) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = sys.getsizeof(value)
        return own + sum(footprint(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0 if value is None else sys.getsizeof(value)


class _GroupCache:
    """LRU cache of row groups read before (``pa.Table``s, immutable), keyed by filesystem,
    path, size, modification time, row group and columns, each with a memo of values derived
    from it alone (decoded columns), bounded by their memory: the table's bytes, 16 KiB an
    entry for the objects around them, and each memo value's ``footprint`` as it is made
    (query ids decoded to Python strings hold several times their table's bytes). A group
    over an eighth of the bound is not kept. For the outcome windows: a check reads the whole
    reference window of outcomes again at every check, and its files rarely change (an
    evaluation run a day or an hour); opening and decoding them cost about 0.3 ms a file."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        # key -> (table, memo, the bytes charged for it)
        self._entries: OrderedDict[tuple[object, ...], tuple[pa.Table, _Memo, int]]
        self._entries = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.read = 0  # row groups read from storage, for tests and benchmarks

    @staticmethod
    def key(source: _Source, f: _File, group: int, columns: Sequence[str]) -> tuple[object, ...]:
        return (source.fs.type_name, *f.identity, group, tuple(columns))

    def get(self, key: tuple[object, ...]) -> tuple[pa.Table, _Memo] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0], entry[1]

    def put(self, key: tuple[object, ...], table: pa.Table) -> tuple[pa.Table, _Memo]:
        """Keep ``table`` (unless too large); returns it with its memo (a new one, whose
        values are charged to the entry as they are made)."""
        memo = _Memo()
        size = int(table.nbytes) + (16 << 10)
        with self._lock:
            self.read += 1
            if size > self.max_bytes // 8:
                return table, memo
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            self._entries[key] = (table, memo, size)
            self._bytes += size
            self._shrink()
        memo.charge = lambda nbytes: self._charge(key, memo, nbytes)
        return table, memo

    def _charge(self, key: tuple[object, ...], memo: _Memo, nbytes: int) -> None:
        """Count ``nbytes`` more for the entry ``key`` (if it is still this memo's): an entry
        grown over an eighth of the bound is let go, and the oldest go until the rest fit."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[1] is not memo:
                return
            size = entry[2] + nbytes
            self._bytes += nbytes
            if size > self.max_bytes // 8:
                del self._entries[key]
                self._bytes -= size
            else:
                self._entries[key] = (entry[0], memo, size)
            self._shrink()

    def _shrink(self) -> None:
        while self._bytes > self.max_bytes:
            _, gone = self._entries.popitem(last=False)
            self._bytes -= gone[2]

    @property
    def held_bytes(self) -> int:
        """The bytes charged for the entries kept (at most ``max_bytes``)."""
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.read = 0


_GROUPS = _GroupCache(64 << 20)
CLEARED = 0  # calls of ``clear_cache`` so far: a key holding it outlives no clearing


# files planned whole by ``window_file_stats``, by identity and columns (bounded; values derived
# from the footers, so forgotten with them)
_WHOLE: dict[tuple[object, ...], FileStat] = {}
_WHOLE_MAX = 1 << 16
# the same by the walk's object itself (``ByIdentity``, tagged with the planned columns): a walk
# hands out the same ``_File`` while its directory is unchanged, so an unchanged file costs one
# dict look-up, and the same ``_Subtree`` while nothing below it changed (then the value is its
# files' list)
_WHOLE_BY_FILE: ByIdentity[Any] = ByIdentity(_WHOLE_MAX)


ALSO_CLEARED: list[Callable[[], None]] = []  # the readers' kept windows (``KeptByRows.clear``)


def clear_cache() -> None:
    """Forget every cached footer, kept row group and outcome window, directory listing,
    filesystem and table snapshot (tests; or after rewriting files in place)."""
    from monitor.sources.tables import clear_table_cache  # (tables imports this module)

    global CLEARED
    _FOOTERS.clear()
    _GROUPS.clear()
    _WHOLE.clear()
    _WHOLE_BY_FILE.clear()
    clear_listings()
    with _FS_LOCK:
        _FS_CACHE.clear()
    clear_table_cache()
    for clear in ALSO_CLEARED:
        clear()
    CLEARED += 1  # last: a key made after this call meets no group read before it


def _int96_as_us(metadata: pq.FileMetaData, schema: pa.Schema) -> pa.Schema:
    """``schema`` with each top-level INT96 column a microsecond timestamp, as ``_opened``
    reads it (``coerce_int96_timestamp_unit``): Spark's legacy type, often holding 9999-12-31,
    which nanoseconds cannot hold."""
    for i in range(metadata.num_columns):
        column = metadata.schema.column(i)
        if column.physical_type != "INT96" or "." in column.path:
            continue
        at = schema.get_field_index(column.path)
        if at >= 0 and pa.types.is_timestamp(schema.field(at).type):
            field = schema.field(at)
            schema = schema.set(at, field.with_type(pa.timestamp("us", tz=field.type.tz)))
    return schema


def _read_footer(source: _Source, f: _File) -> _Footer:
    try:
        with source.fs.open_input_file(f.path) as handle:
            metadata = pq.read_metadata(handle)
        schema = _int96_as_us(metadata, metadata.schema.to_arrow_schema())
    except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
        raise _translate(exc, f.path, "reading the parquet footer") from exc
    # each top-level primitive column's leaf, by position: a path string is ambiguous (a
    # struct `event` with a field `time` and a column named `event.time` share "event.time",
    # and the struct's statistics were taken for the column's: 0 rows read, silently)
    leaf_index: dict[str, int] = {}
    at = 0
    for top in schema:
        leaves = _leaves(top.type)
        if (
            leaves == 1
            and not pa.types.is_nested(top.type)
            and at < metadata.num_columns
            and metadata.schema.column(at).path == top.name
        ):
            leaf_index.setdefault(top.name, at)
        at += leaves
    return _Footer(metadata, schema, leaf_index)


def _leaves(kind: pa.DataType) -> int:
    """The parquet leaf columns an Arrow type is stored in."""
    if pa.types.is_struct(kind):
        return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaves(kind.key_type) + _leaves(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaves(kind.value_type)
    return 1


@contextmanager
def _opened(
    source: _Source, f: _File, footer: _Footer, read_dictionary: Sequence[str] = ()
) -> Iterator[pq.ParquetFile]:
    """The file opened for reading with its cached footer (``read_dictionary``: string
    columns to read as dictionary arrays); the handle is closed on exit."""
    try:
        handle = source.fs.open_input_file(f.path)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise _translate(exc, f.path, "opening the file") from exc
    try:
        try:
            # page checksums (parquet-mr writes them) verified: a flipped bit was read as a
            # score of 9e307; INT96 (Spark's legacy timestamps) read in microseconds, as the
            # footer's schema says (in nanoseconds 9999-12-31 wrapped round to 1816)
            pf = pq.ParquetFile(
                handle,
                metadata=footer.metadata,
                read_dictionary=list(read_dictionary) or None,
                page_checksum_verification=True,
                coerce_int96_timestamp_unit="us",
            )
        except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
            raise _translate(exc, f.path, "opening the file") from exc
        yield pf
    finally:
        handle.close()


def _column_type(
    footer: _Footer, f: _File, column: str, role: str, spec_column_hint: str
) -> pa.DataType:
    idx = footer.schema.get_field_index(column)
    if idx < 0 and footer.schema.names.count(column) > 1:  # pyarrow: -1 for a duplicate too
        raise SchemaError(
            f"the {role} column appears {footer.schema.names.count(column)} times; a column "
            "name must be unique",
            path=f.path,
            column=column,
            hint="write the file with one column of this name",
        )
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
    return _footer_stats(source, f, column, unit)[1]


def _footer_stats(
    source: _Source, f: _File, column: str, unit: str | None
) -> tuple[_Footer, _TsStats]:
    """The file's footer and its timestamp statistics (computed once per footer)."""
    footer = _FOOTERS.get(source, f)
    key = (column, unit)
    cached = footer.ts_stats.get(key)
    if cached is not None:
        return footer, cached
    native = _ts_unit(footer, f, column, unit)
    md = footer.metadata
    leaf = footer.leaf_index.get(column)
    raw_unit: str | None = None
    unsigned = False
    if leaf is not None:
        col_schema = md.schema.column(leaf)
        logical = col_schema.logical_type
        if logical.type == "TIMESTAMP":
            raw_unit = _PARQUET_UNITS.get(_json_field(logical.to_json(), "timeUnit"))
        elif col_schema.physical_type in ("INT32", "INT64") and not pa.types.is_timestamp(
            footer.schema.field(column).type
        ):
            raw_unit = native
            unsigned = pa.types.is_unsigned_integer(footer.schema.field(column).type)
    rows: list[int] = []
    los: list[int | None] = []
    his: list[int | None] = []
    nulls: list[int | None] = []
    missing = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        rows.append(rg.num_rows)
        st = rg.column(leaf).statistics if leaf is not None else None
        # an unsigned column's raw statistics read signed (UINT64_MAX as -1: the group pruned
        # as lying before every window); its logical ones are the values, and a value past
        # int64 nanoseconds either way (a sentinel: INT64_MAX or INT64_MIN seconds) leaves the
        # group's span unknown: it is read, and such values are null (``_ts_to_ns``)
        lo_hi = (
            None
            if raw_unit is None or st is None or not st.has_min_max
            else (int(st.min), int(st.max))
            if unsigned
            else (int(st.min_raw), int(st.max_raw))
        )
        factor = _NS_PER[raw_unit] if raw_unit is not None else 1
        if lo_hi is not None and lo_hi[0] * factor >= -_I64_MAX and lo_hi[1] * factor <= _I64_MAX:
            los.append(lo_hi[0] * factor)
            his.append(lo_hi[1] * factor)
            nulls.append(int(st.null_count) if st is not None and st.has_null_count else None)
        else:
            los.append(None)
            his.append(None)
            nulls.append(None)
            missing.append(g)
    if missing:  # no usable statistics (e.g. INT96, or a writer without them): read the column once
        placed, unplaceable, example = 0, 0, None
        with _opened(source, f, footer) as pf:
            for g in missing:
                try:
                    table = pf.read_row_group(g, columns=[column])
                except (OSError, pa.ArrowException, ValueError) as exc:
                    raise _translate(exc, f.path, f"reading column {column!r}") from exc
                values = table.column(column)
                ns = _ts_to_ns(values, native)
                valid = ns[ns != _I64_MIN]
                los[g] = int(valid.min()) if valid.size else None
                his[g] = int(valid.max()) if valid.size else None
                nulls[g] = int(ns.size - valid.size)
                placed += int(valid.size)
                unplaceable += len(values) - values.null_count - int(valid.size)
                if example is None and len(values) > values.null_count:
                    example = values.drop_null()[0].as_py()
        integer = not pa.types.is_timestamp(footer.schema.field(column).type)
        if integer and len(missing) == md.num_row_groups and unplaceable and not placed:
            # every value past int64 nanoseconds: not a sentinel, the wrong unit (epoch
            # milliseconds read as seconds once made a full source look empty: "no data")
            raise SchemaError(
                f"no value of this integer timestamp column is a time in `timestamp_unit` "
                f"{native!r} (e.g. {example}); every one would be after the year 2262",
                path=f.path,
                column=column,
                hint="check `timestamp_unit`: epoch milliseconds are 'ms', microseconds 'us'",
            )
    stats = _TsStats(tuple(rows), tuple(los), tuple(his), tuple(nulls), native)
    footer.ts_stats[key] = stats
    return footer, stats


def _json_field(text: str, name: str) -> str:
    m = re.search(rf'"{name}"\s*:\s*"([^"]*)"', text)
    return m[1] if m else ""


# Arrow types whose values buffer is a numpy array as it stands.
_NUMPY_TYPES = {
    pa.float64(): np.float64,
    pa.float32(): np.float32,
    pa.int64(): np.int64,
    pa.int32(): np.int32,
    pa.int16(): np.int16,
    pa.int8(): np.int8,
    pa.uint64(): np.uint64,
    pa.uint32(): np.uint32,
    pa.uint16(): np.uint16,
    pa.uint8(): np.uint8,
}


def _numbers(arr: pa.Array) -> npt.NDArray[Any]:
    """A numeric array without nulls as a read-only numpy view of its values buffer; any other
    array through ``to_numpy(zero_copy_only=False)`` (the same values).

    pyarrow's ``to_numpy`` imports pandas when it is installed (about 0.15 s of a one-shot
    check); the view does not."""
    dtype = _NUMPY_TYPES.get(arr.type)
    if dtype is None or arr.null_count:
        return np.asarray(arr.to_numpy(zero_copy_only=False))
    if len(arr) == 0:
        return np.empty(0, dtype=dtype)
    size = np.dtype(dtype).itemsize
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * size)


def _valid(arr: pa.Array) -> npt.NDArray[np.bool_]:
    """The validity of each element (``is_valid()``) as a numpy bool array, without pandas."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    flags = np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + len(arr)]
    return flags.astype(bool)


def refuse_nul(ids: pa.Array, path: str, column: str | None, *, what: str = "query id") -> None:
    """``SchemaError`` when a query id (``what``; a string array, or a dictionary's values)
    holds a NUL character: numpy's fixed-width strings drop a trailing NUL, so "q1" and
    "q1\\0" became one query (their outcomes averaged, or pairs misaligned)."""
    if pa.types.is_dictionary(ids.type):
        ids = ids.dictionary
    if not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)):
        return
    if len(ids) and pc.any(pc.match_substring(ids, "\x00")).as_py():
        raise SchemaError(
            f"holds a {what} with a NUL character",
            path=path,
            column=column,
            hint=f"{what}s must be text without NUL characters",
        )


def _strings(arr: pa.Array) -> npt.NDArray[np.object_]:
    """A string array as numpy objects (``to_numpy(zero_copy_only=False)`` but for nulls, which
    hold an arbitrary string here: mask them with ``_valid``), through a dictionary encoding so
    that only the distinct strings become Python objects, and without pandas."""
    encoded = arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
    names = np.empty(len(encoded.dictionary) + 1, dtype=object)
    names[:-1] = encoded.dictionary.to_pylist()
    names[-1] = ""
    indices = encoded.indices
    if indices.null_count:
        indices = pc.fill_null(indices, len(names) - 1)
    out: npt.NDArray[np.object_] = names[_numbers(indices)]
    return out


def _ts_native(chunked: pa.ChunkedArray | pa.Array, unit: str) -> npt.NDArray[np.int64]:
    """Timestamp values as int64 in their own unit, nulls as INT64_MIN."""
    arr = chunked.combine_chunks() if isinstance(chunked, pa.ChunkedArray) else chunked
    if pa.types.is_uint64(arr.type):  # past int64 (a sentinel such as UINT64_MAX): no time
        arr = pc.if_else(pc.greater(arr, pa.scalar(_I64_MAX, pa.uint64())), None, arr)
    if pa.types.is_timestamp(arr.type) or not pa.types.is_int64(arr.type):
        arr = arr.cast(pa.int64())
    if arr.null_count:
        arr = pc.fill_null(arr, _I64_MIN)
    out: npt.NDArray[np.int64] = _numbers(arr)
    return out


def _ts_to_ns(chunked: pa.ChunkedArray | pa.Array, unit: str) -> npt.NDArray[np.int64]:
    """Timestamp values in ns since the epoch, nulls as INT64_MIN. A value whose ns would
    leave int64 (a sentinel such as INT64_MAX seconds; any time outside 1678-2262) is null
    too: multiplied, it would wrap to some other time, inside windows it is not in."""
    native = _ts_native(chunked, unit)
    factor = _NS_PER[unit]
    if factor == 1:
        return native
    ns = native * factor
    limit = _I64_MAX // factor
    # two reductions, and a masked pass only when a null (INT64_MIN) or such a value is there
    if native.size and (int(native.min()) < -limit or int(native.max()) > limit):
        ns[(native > limit) | (native < -limit)] = _I64_MIN
    return ns


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _native_bounds(window: Window, unit: str) -> tuple[int, int]:
    """``[lo, hi)`` in the column's unit such that ``lo <= v < hi`` iff ``v`` is in the window."""
    factor = _NS_PER[unit]
    lo = _ceil_div(window.start_ns, factor)
    hi = _ceil_div(window.end_ns, factor)
    return max(lo, _I64_MIN + 1), min(hi, _I64_MAX)
