"""Delta Lake and Iceberg tables as sources: a table's snapshot resolved to its live data files.

The only importer of ``deltalake`` (delta-rs) and ``pyiceberg`` (the optional extra
``.[tables]``). A table becomes the list of parquet data files of one snapshot, each with its
size and the bounds of its timestamps from the table's own statistics (Delta's add-action
``stats``, widened by 1 ms because Delta truncates timestamps to milliseconds; Iceberg's
``lower_bounds``/``upper_bounds`` and hour/day/month/year partitions of the timestamp column)
and, for Delta, its partition values (hive rules: a date
partition prunes and is checked against the file's footer; a partition column can be the
segment). The files then go through the planner and reader of parquet paths (``_walk`` lists
them, pruned by bounds), so every reader rule and every engine is the same.

Honoured: files removed in the Delta log or no longer in the Iceberg snapshot are not read
(the snapshot lists live files only); Delta deletion vectors (decoded by delta-rs) and Iceberg
parquet position deletes become each file's deleted row positions (``_File.deleted``), which
the readers leave out like rows that never were (not counted, not the newest timestamp).
Refused with a ``SourceError`` naming the file, when the file would be read: Iceberg equality
deletes and deletion vectors in puffin files; non-parquet Iceberg data files. Refused for the
whole table: Delta column mapping (physical column names differ from the schema's); files
outside the table's directory or filesystem. Snapshots are cached per (table, version): a
daemon re-reads only the log's new commits.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from monitor.epoch import to_ns
from monitor.errors import SourceError, SourceNotFoundError
from monitor.sources.footers import _ts_to_ns
from monitor.sources.model import _NS_PER, OutcomeSpec, ScoreSpec
from monitor.sources.paths import (
    HIVE_NULL,
    _File,
    _filesystem,
    _Interval,
    _partition_interval,
    _Source,
)
from monitor.sources.translate import _translate

__all__ = ["current_snapshot", "pin_snapshot"]

_INSTALL = "pip install 'retrieval-monitor[tables]'"
_DELTA_MS_NS = 1_000_000  # Delta's timestamp statistics are truncated to milliseconds

Spec = TypeVar("Spec", ScoreSpec, OutcomeSpec)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    version: int
    root: str  # the filesystem path the files are listed under (for messages)
    fs: Any  # pyarrow.fs.FileSystem
    files: tuple[_File, ...]


_SNAPSHOTS: OrderedDict[tuple[Any, ...], _Snapshot] = OrderedDict()
_SNAPSHOTS_MAX = 64
_LOCK = threading.Lock()
_DELTA_LATEST: dict[str, Any] = {}  # table path -> DeltaTable kept open, updated incrementally
_DELTA_LOCKS: dict[str, threading.Lock] = {}
_CATALOGS: dict[tuple[tuple[str, str], ...], Any] = {}


def _table_source(spec: ScoreSpec | OutcomeSpec, prune: bool) -> _Source:
    """The ``_Source`` of a table spec: its snapshot's files, listed rather than walked."""
    snap = _snapshot(spec, prune)
    return _Source(spec.path, snap.fs, snap.root, False, None, prune, files=snap.files)


def current_snapshot(spec: ScoreSpec | OutcomeSpec) -> int | None:
    """The version (Delta) or snapshot id (Iceberg) a read of ``spec`` sees now; None for a
    parquet path or an Iceberg table without a snapshot yet."""
    if spec.format == "parquet":
        return None
    version = _snapshot(spec, spec.prune_partitions).version
    return None if version < 0 else version


def pin_snapshot(spec: Spec) -> Spec:
    """``spec`` with ``snapshot`` set to the table's current one (unchanged for parquet paths
    and for a spec already pinned): an engine pins before planning, so that its tasks, which
    resolve the table again, read the very files it planned, whatever commits land meanwhile."""
    if spec.format == "parquet" or spec.snapshot is not None:
        return spec
    version = current_snapshot(spec)
    return spec if version is None else replace(spec, snapshot=version)


def _snapshot(spec: ScoreSpec | OutcomeSpec, prune: bool) -> _Snapshot:
    if spec.format == "delta":
        return _delta(spec, prune)
    if spec.format == "iceberg":
        return _iceberg(spec)
    raise ValueError(f"not a table format: {spec.format!r}")


def _cached(key: tuple[Any, ...], build: Callable[[], _Snapshot]) -> _Snapshot:
    with _LOCK:
        hit = _SNAPSHOTS.get(key)
        if hit is not None:
            _SNAPSHOTS.move_to_end(key)
            return hit
    snap = build()
    with _LOCK:
        _SNAPSHOTS[key] = snap
        while len(_SNAPSHOTS) > _SNAPSHOTS_MAX:
            _SNAPSHOTS.popitem(last=False)
    return snap


def clear_table_cache() -> None:
    """Forget cached snapshots, open Delta tables and catalogs (tests)."""
    with _LOCK:
        _SNAPSHOTS.clear()
        _DELTA_LATEST.clear()
        _CATALOGS.clear()


def _missing_extra(kind: str, path: str, exc: ImportError) -> SourceError:
    return SourceError(
        f"is a {kind} table, and reading {kind} tables needs the optional extra "
        f"'tables' ({exc.name or exc} is not installed)",
        path=path,
        hint=_INSTALL,
    )


def _bounds(
    lo: int | None, hi: int | None, slack: int
) -> _Interval:  # [lo, hi + slack) in ns, None when either end is unknown
    if lo is None or hi is None:
        return None
    return lo, hi + slack


# -- Delta Lake ------------------------------------------------------------------------------


def _delta(spec: ScoreSpec | OutcomeSpec, prune: bool) -> _Snapshot:
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError
    except ImportError as exc:
        raise _missing_extra("Delta", spec.path, exc) from exc
    path = spec.path
    pinned = spec.snapshot

    def key(version: int) -> tuple[Any, ...]:
        return ("delta", path, version, prune, spec.timestamp_column, spec.timestamp_unit)

    try:
        if pinned is not None:  # time travel to the version an engine planned
            return _cached(
                key(pinned),
                lambda: _delta_files(spec, DeltaTable(path, version=pinned), pinned, prune),
            )
        with _LOCK:
            lock = _DELTA_LOCKS.setdefault(path, threading.Lock())
        with lock:  # one thread at a time updates this table and lists its version
            table = _DELTA_LATEST.get(path)
            if table is None:
                table = DeltaTable(path)
                _DELTA_LATEST[path] = table
            else:
                table.update_incremental()  # reads only the commits since
            version = int(table.version())
            return _cached(key(version), lambda: _delta_files(spec, table, version, prune))
    except TableNotFoundError as exc:
        _DELTA_LATEST.pop(path, None)
        raise SourceNotFoundError(
            f"is not a Delta table (no readable _delta_log): {exc}",
            path=path,
            hint="point `path` at the table's directory, the one holding _delta_log",
        ) from exc
    except (DeltaError, OSError, ValueError) as exc:
        _DELTA_LATEST.pop(path, None)
        at = "" if pinned is None else f" at version {pinned}"
        raise SourceError(
            f"the Delta log{at} cannot be read: {type(exc).__name__}: {exc}",
            path=path,
            hint="check the table with delta-rs or Spark (a version removed by log cleanup "
            "can no longer be read; a newer Delta protocol may need a newer deltalake)",
        ) from exc


def _delta_files(spec: ScoreSpec | OutcomeSpec, table: Any, version: int, prune: bool) -> _Snapshot:
    path = spec.path
    config = table.metadata().configuration or {}
    mapping = config.get("delta.columnMapping.mode", "none")
    if mapping not in ("none", None):
        raise SourceError(
            f"uses Delta column mapping (mode {mapping!r}): its files' physical column names "
            "are not the table's, and the reader matches columns by name",
            path=path,
            hint="read a copy of the table without column mapping",
        )
    with_dv: dict[str, npt.NDArray[np.int64]] = {}
    if "deletionVectors" in (table.protocol().reader_features or []):
        dvs = pa.table(table.deletion_vectors())  # delta-rs decodes them: a keep mask per file
        vectors = dvs.column("selection_vector").combine_chunks()
        # by the path relative to the table's root: delta-rs names them under its canonical
        # root (symlinks and '..' resolved), which a path given through a link or with '..'
        # never matched (every such table refused as 'only 0 could be matched')
        base = _local_part(str(table.table_uri)).rstrip("/") + "/"
        for i, uri in enumerate(dvs.column("filepath").to_pylist()):
            keep = np.asarray(vectors[i].values.to_numpy(zero_copy_only=False), dtype=bool)
            local = _local_part(uri)
            relative = local[len(base) :] if local.startswith(base) else local
            with_dv[relative] = np.flatnonzero(~keep).astype(np.int64)
    matched = 0
    fs, root = _filesystem(path)
    actions = pa.table(table.get_add_actions(flatten=True))
    column = spec.timestamp_column
    lo_ns = _delta_stat(actions, f"min.{column}", spec.timestamp_unit)
    hi_ns = _delta_stat(actions, f"max.{column}", spec.timestamp_unit)
    slack = _delta_slack(actions, f"max.{column}", spec.timestamp_unit)
    part_cols = [n for n in actions.column_names if n.startswith("partition.")]
    part_values = {n: actions.column(n).to_pylist() for n in part_cols}
    files = []
    rel_paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    mtimes = actions.column("modification_time").to_pylist()
    for i, rel in enumerate(rel_paths):
        name = unquote(rel)
        if "://" in name:
            raise SourceError(
                f"lists a data file outside its directory ({name}; a shallow clone?), which "
                "is not supported",
                path=path,
                hint="read a deep copy of the table",
            )
        file_path = f"{root.rstrip('/')}/{name}"
        parts = tuple(
            (n.removeprefix("partition."), _partition_text(part_values[n][i])) for n in part_cols
        )
        deleted = with_dv.get(name)
        matched += deleted is not None
        files.append(
            _File(
                file_path,
                int(sizes[i]),
                int(mtimes[i]) * 1_000_000,
                parts,
                _partition_interval(parts) if prune else None,
                _bounds(lo_ns[i], hi_ns[i], slack),
                deleted=deleted,
            )
        )
    if matched != len(with_dv):  # never read past a deletion vector that matches no file
        raise SourceError(
            f"has {len(with_dv)} file(s) with deletion vectors in version {version}, of which "
            f"only {matched} could be matched to the table's files; none is read",
            path=path,
            hint="purge the deletion vectors (REORG TABLE ... APPLY (PURGE), or OPTIMIZE)",
        )
    return _Snapshot(version, root, fs, tuple(files))


def _delta_stat(actions: pa.Table, name: str, unit: str | None) -> list[int | None]:
    """A statistics column in ns since the epoch (None where missing)."""
    if name not in actions.column_names:
        return [None] * actions.num_rows
    col = actions.column(name)
    if pa.types.is_timestamp(col.type):
        ns = _ts_to_ns(col, str(col.type.unit))
    elif pa.types.is_integer(col.type) and unit is not None:
        ns = _ts_to_ns(col.cast(pa.int64()), unit)
    else:
        return [None] * actions.num_rows
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return [int(v) if ok else None for v, ok in zip(ns.tolist(), valid.tolist(), strict=True)]


def _delta_slack(actions: pa.Table, name: str, unit: str | None) -> int:
    """How far past a file's ``max`` statistic its timestamps may go: Delta truncates
    timestamps to milliseconds; integers are exact (one unit, the bound being exclusive)."""
    if name in actions.column_names and pa.types.is_timestamp(actions.column(name).type):
        return _DELTA_MS_NS
    return _NS_PER.get(unit or "ns", 1)


def _partition_text(value: object) -> str:
    """A Delta partition value as the text its hive directory would hold."""
    if value is None:
        return HIVE_NULL
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _local_part(uri: str) -> str:
    """A Delta data file's URI as the path its filesystem knows it by (local path or
    bucket/key): Delta percent-encodes the paths in its log."""
    if uri.startswith("file:"):
        return unquote(urlparse(uri).path)
    return unquote(uri.split("://", 1)[1]) if "://" in uri else uri


def _iceberg_local(uri: str) -> str:
    """An Iceberg file's URI as the path its filesystem knows it by, as pyiceberg's
    ``PyArrowFileIO`` reads it: not unquoted (a partition ``seg=c%2Fd`` is a directory of
    that name on disk; unquoted, every file of a table with such a value, or in a warehouse
    path with a space, was 'disappeared while reading')."""
    if "://" not in uri:
        return uri
    return urlparse(uri).path if uri.startswith("file:") else uri.split("://", 1)[1]


# -- Iceberg ---------------------------------------------------------------------------------


def _iceberg(spec: ScoreSpec | OutcomeSpec) -> _Snapshot:
    try:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import (
            NoSuchIdentifierError,
            NoSuchNamespaceError,
            NoSuchTableError,
        )
    except ImportError as exc:
        raise _missing_extra("Iceberg", spec.path, exc) from exc
    props = dict(spec.catalog)
    catalog_name = props.pop("name", "default")
    where = f"in the Iceberg catalog {catalog_name!r}"
    try:
        with _LOCK:
            catalog = _CATALOGS.get(spec.catalog)
        if catalog is None:
            catalog = load_catalog(catalog_name, **props)
            with _LOCK:
                _CATALOGS[spec.catalog] = catalog
        table = catalog.load_table(spec.path)
    except (NoSuchTableError, NoSuchNamespaceError, NoSuchIdentifierError) as exc:
        raise SourceNotFoundError(
            f"no such table {where}: {exc}",
            path=spec.path,
            hint="check `table` (namespace.name) and the catalog properties",
        ) from exc
    except Exception as exc:  # catalogs raise their drivers' errors (SQL, HTTP, Glue, ...)
        raise SourceError(
            f"the table cannot be loaded {where}: {type(exc).__name__}: {exc}",
            path=spec.path,
            hint="check the catalog properties (`catalog.*`, or pyiceberg's own configuration)",
        ) from exc
    if spec.snapshot is None:
        current = table.current_snapshot()
        snapshot_id = -1 if current is None else int(current.snapshot_id)
    else:
        snapshot_id = spec.snapshot
        if table.snapshot_by_id(snapshot_id) is None:
            raise SourceError(
                f"has no snapshot {snapshot_id} {where} (expired since it was planned?)",
                path=spec.path,
                hint="the next check reads the current snapshot",
            )
    key = (
        "iceberg",
        spec.catalog,
        spec.path,
        snapshot_id,
        spec.timestamp_column,
        spec.timestamp_unit,
    )
    return _cached(key, lambda: _iceberg_files(spec, table, snapshot_id, where))


def _iceberg_files(
    spec: ScoreSpec | OutcomeSpec, table: Any, snapshot_id: int, where: str
) -> _Snapshot:
    from pyiceberg.conversions import from_bytes
    from pyiceberg.manifest import DataFileContent, FileFormat
    from pyiceberg.types import (
        IntegerType,
        LongType,
        TimestampNanoType,
        TimestampType,
        TimestamptzNanoType,
        TimestamptzType,
    )

    location = table.location()
    fs, root = _filesystem(location)
    scheme = urlparse(location).scheme or "file"
    if snapshot_id < 0:
        return _Snapshot(snapshot_id, root, fs, ())
    field_id: int | None = None
    field_type: Any = None
    factor = slack = 0
    try:
        found = table.schema().find_field(spec.timestamp_column)
    except ValueError:
        found = None
    if found is not None:
        kind = found.field_type
        if isinstance(kind, TimestampType | TimestamptzType):
            factor = 1_000
        elif isinstance(kind, TimestampNanoType | TimestamptzNanoType):
            factor = 1
        elif isinstance(kind, IntegerType | LongType) and spec.timestamp_unit is not None:
            factor = _NS_PER[spec.timestamp_unit]
        if factor:
            field_id, field_type, slack = found.field_id, kind, factor
    try:
        tasks = list(table.scan(snapshot_id=snapshot_id).plan_files())
    except Exception as exc:  # manifests unreadable: pyiceberg raises its FileIO's errors
        raise SourceError(
            f"the manifests of snapshot {snapshot_id} cannot be read {where}: "
            f"{type(exc).__name__}: {exc}",
            path=spec.path,
        ) from exc
    files = []
    specs = table.specs()
    positions: dict[str, dict[str, npt.NDArray[np.int64]]] = {}
    for task in tasks:
        data = task.file
        uri = str(data.file_path)
        file_scheme = urlparse(uri).scheme or "file"
        if file_scheme != scheme:
            raise SourceError(
                f"lists the data file {uri} on another filesystem than the table's "
                f"({location}), which is not supported",
                path=spec.path,
            )
        file_path = _iceberg_local(uri)
        problem = None
        deleted = None
        unsupported = [
            d
            for d in task.delete_files
            if d.content != DataFileContent.POSITION_DELETES or d.file_format != FileFormat.PARQUET
        ]
        if unsupported:
            kinds = sorted({f"{d.content.name.lower()} in {d.file_format}" for d in unsupported})
            problem = SourceError(
                f"has {len(unsupported)} Iceberg delete file(s) ({', '.join(kinds)}) in "
                f"snapshot {snapshot_id} of {spec.path} that the reader cannot apply (it "
                "applies parquet position deletes only)",
                path=file_path,
                hint="compact the table (rewrite_data_files with delete files applied), or "
                "write with write.delete.mode = copy-on-write",
            )
        elif data.file_format != FileFormat.PARQUET:
            problem = SourceError(
                f"is an Iceberg data file in {data.file_format}; only parquet is read",
                path=file_path,
                hint="write the table's data files as parquet",
            )
        elif task.delete_files:
            deleted = _positions(fs, scheme, uri, task.delete_files, positions, spec.path)
        bounds: _Interval = None
        if field_id is not None:
            lower = (data.lower_bounds or {}).get(field_id)
            upper = (data.upper_bounds or {}).get(field_id)
            if lower is not None and upper is not None:
                lo = int(from_bytes(field_type, lower)) * factor
                hi = int(from_bytes(field_type, upper)) * factor
                bounds = _bounds(lo, hi, slack)
            period = _iceberg_period(specs.get(data.spec_id), data.partition, field_id)
            if period is not None:  # hidden partitioning: hour/day/month/year(timestamp)
                bounds = period if bounds is None else _intersect(bounds, period)
        files.append(
            _File(
                file_path,
                int(data.file_size_in_bytes),
                0,
                (),
                None,
                bounds,
                problem,
                None if deleted is None or deleted.size == 0 else deleted,
            )
        )
    return _Snapshot(snapshot_id, root, fs, tuple(files))


def _iceberg_period(partition_spec: Any, partition: Any, field_id: int) -> _Interval:
    """The period a file's hour / day / month / year partition of the timestamp spells."""
    from pyiceberg.transforms import DayTransform, HourTransform, MonthTransform, YearTransform

    if partition_spec is None:
        return None
    for pos, pf in enumerate(partition_spec.fields):
        if pf.source_id != field_id:
            continue
        value = partition[pos]
        if value is None:
            continue
        v = int(value)
        if isinstance(pf.transform, HourTransform):
            return v * 3_600 * _NS_PER["s"], (v + 1) * 3_600 * _NS_PER["s"]
        if isinstance(pf.transform, DayTransform):
            return v * 86_400 * _NS_PER["s"], (v + 1) * 86_400 * _NS_PER["s"]
        if isinstance(pf.transform, MonthTransform):
            lo = datetime(1970 + v // 12, v % 12 + 1, 1, tzinfo=UTC)
            hi = datetime(1970 + (v + 1) // 12, (v + 1) % 12 + 1, 1, tzinfo=UTC)
            return to_ns(lo), to_ns(hi)
        if isinstance(pf.transform, YearTransform):
            return to_ns(datetime(1970 + v, 1, 1, tzinfo=UTC)), to_ns(
                datetime(1971 + v, 1, 1, tzinfo=UTC)
            )
    return None


def _intersect(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """Both bounds hold; should they disagree (broken metadata), prune by neither alone."""
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo < hi else (min(a[0], b[0]), max(a[1], b[1]))


def _positions(
    fs: Any,
    scheme: str,
    uri: str,
    delete_files: Any,
    cache: dict[str, dict[str, npt.NDArray[np.int64]]],
    table: str,
) -> npt.NDArray[np.int64]:
    """The row positions of the data file ``uri`` deleted by its position delete files (each
    delete file read once per snapshot, grouped by the data file it names), sorted."""
    found = []
    for d in delete_files:
        d_uri = str(d.file_path)
        by_file = cache.get(d_uri)
        if by_file is None:
            inner = _iceberg_local(d_uri)
            try:
                rows = pq.read_table(inner, columns=["file_path", "pos"], filesystem=fs)
            except (OSError, pa.ArrowException, ValueError, KeyError) as exc:
                raise _translate(exc, inner, f"reading a position delete file of {table}") from exc
            names = np.asarray(rows.column("file_path").to_pylist(), dtype=object)
            pos = rows.column("pos").to_numpy(zero_copy_only=False).astype(np.int64)
            order = np.argsort(names, kind="stable")
            uniq, starts = np.unique(names[order], return_index=True)
            ends = [*starts[1:].tolist(), names.size]
            by_file = {
                str(name): pos[order[start:end]]
                for name, start, end in zip(uniq.tolist(), starts.tolist(), ends, strict=True)
            }
            cache[d_uri] = by_file
        hit = by_file.get(uri)
        if hit is not None:
            found.append(hit)
    if not found:
        return np.empty(0, dtype=np.int64)
    return np.unique(np.concatenate(found))
