"""Checks through mergeable summaries: a frozen grid, cached bucket summaries, an engine.

A monitor with an engine (``[engine]`` or ``monitors[i].engine``; docs/engines.md) does not read
its windows into memory. Each check needs, per segment, the summary (``monitor.stats.summary``)
of every ``summary.bucket`` of its reference and current windows on one frozen grid::

    grid     FrozenGrid: the grid points (union over segments) and each segment's PSI edges,
             built from a sample of the reference window (every k-th row group, about
             ``summary.grid_sample_rows`` rows) and kept until it is ``summary.regrid`` old
             (default: the reference window's length), a fixed reference's bounds change, or
             the scores' settings change. Stored as ``<state_dir>/summaries/<name>/grid.npz``.
    buckets  one summary per (segment, bucket), keyed by the grid and by the bucket's files
             (path, size, mtime of every file whose row-group timestamps overlap it): a late or
             rewritten file changes the key of its buckets only. Cached in memory and as
             ``<state_dir>/summaries/<name>/<grid>/<bucket start ns>.npz`` (atomic writes;
             a corrupt entry is logged and recomputed; the oldest buckets are evicted beyond
             ``summary.cache_max_bytes``). An hourly check then reads only the new hour.
    engine   computes the buckets not cached: ``local``, ``dask`` or ``spark`` (``auto``: the
             configured cluster engine when the rows to read, from the footers, reach
             ``auto_rows``); an unreachable engine is an error, never a fall back.

A row group's invalid (null, NaN, infinite) scores count in the first bucket of it that a read
holds (``monitor.sources.read_summaries``), so a window's invalid share can differ from the
whole-window reader's by one straddling row group at each end.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import threading
import time
import zipfile
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from monitor.config import EngineConfig, MonitorConfig
from monitor.engines import Engine, make_engine
from monitor.epoch import from_ns, to_ns
from monitor.errors import EngineUnavailableError, MonitorError
from monitor.sources import (
    FileStat,
    ScoreSpec,
    SummaryPart,
    Window,
    check_summary_part,
    read_scores,
    window_file_stats,
)
from monitor.stats import (
    Cells,
    Grid,
    ScoreSummary,
    bin_ends,
    build_baseline,
    summary_grid,
)
from monitor.store import atomic_write
from monitor.verdict.data import SegmentSummaries

__all__ = [
    "BucketCache",
    "FrozenGrid",
    "SummaryChecks",
    "SummaryRead",
]

log = logging.getLogger("monitor.incremental")

_FORMAT = 1
# what numpy raises on a damaged or foreign .npz file
_CORRUPT = (ValueError, KeyError, TypeError, OSError, EOFError, zipfile.BadZipFile)


class SummaryCheckError(MonitorError):
    """A check through summaries cannot run as asked (a slot inside a bucket)."""


@dataclass(frozen=True, slots=True, eq=False)
class FrozenGrid:
    """A monitor's frozen grid: points, each segment's PSI edges (grid points), when and from
    which reference window and how many sampled rows it was built, and ``key``, the identity
    its bucket summaries are cached under (points, score settings, bucket length)."""

    grid: Grid
    edges: Mapping[str, NDArray[np.float64]]
    built_at: datetime
    reference_start: datetime
    reference_end: datetime
    sample_rows: int
    key: str
    reference_rows: int = 0

    def to_bytes(self) -> bytes:
        names = sorted(self.edges)
        meta = {
            "format": _FORMAT,
            "built_at": to_ns(self.built_at),
            "reference": [to_ns(self.reference_start), to_ns(self.reference_end)],
            "sample_rows": self.sample_rows,
            "reference_rows": self.reference_rows,
            "key": self.key,
            "segments": names,
        }
        arrays = {f"edges_{i}": self.edges[n] for i, n in enumerate(names)}
        buf = io.BytesIO()
        np.savez(buf, points=self.grid.points, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]
        return buf.getvalue()

    @staticmethod
    def from_bytes(data: bytes) -> FrozenGrid:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != _FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, expected {_FORMAT}")
            grid = Grid(np.asarray(z["points"], dtype=np.float64))
            edges = {
                n: np.asarray(z[f"edges_{i}"], dtype=np.float64)
                for i, n in enumerate(meta["segments"])
            }
        bin_check = [bin_ends(grid, e) for e in edges.values()]  # every edge a grid point
        del bin_check
        return FrozenGrid(
            grid=grid,
            edges=edges,
            built_at=from_ns(int(meta["built_at"])),
            reference_start=from_ns(int(meta["reference"][0])),
            reference_end=from_ns(int(meta["reference"][1])),
            sample_rows=int(meta["sample_rows"]),
            key=str(meta["key"]),
            reference_rows=int(meta["reference_rows"]),
        )


@dataclass(frozen=True, slots=True, eq=False)
class Bucket:
    """One bucket's non-zero cells per segment (none: no valid score in it) and its invalid
    rows that no summary holds (row groups without one valid score)."""

    start_ns: int
    summaries: Mapping[str, Cells]
    unplaced: int = 0
    bins: dict[bytes, dict[str, NDArray[np.int64]]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.summaries.values()) + 256

    def to_bytes(self, key: str, fingerprint: str) -> bytes:
        names = sorted(self.summaries)
        cells = [self.summaries[n] for n in names]
        meta = {
            "format": _FORMAT,
            "grid": key,
            "fingerprint": fingerprint,
            "start_ns": self.start_ns,
            "unplaced": self.unplaced,
            "segments": names,
            "rows": [c.rows for c in cells],
            "invalid": [c.invalid for c in cells],
            "zeros": [c.zeros for c in cells],
            "newest": [c.newest_ns for c in cells],
        }
        arrays: dict[str, NDArray[np.int64]] = {}
        for i, c in enumerate(cells):
            arrays[f"index_{i}"] = c.index
            arrays[f"count_{i}"] = c.count
        buf = io.BytesIO()
        # uncompressed: the cells are already compact, and zlib cost more than the hour's read
        np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]
        return buf.getvalue()

    @staticmethod
    def from_bytes(data: bytes, grid: Grid, key: str) -> tuple[Bucket, str]:
        """The bucket and its files' fingerprint; ``ValueError`` if it is not this grid's."""
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != _FORMAT or meta.get("grid") != key:
                raise ValueError("not an entry of this grid")
            out: dict[str, Cells] = {}
            for i, name in enumerate(meta["segments"]):
                index = np.asarray(z[f"index_{i}"])
                count = np.asarray(z[f"count_{i}"])
                if index.dtype != np.int64 or count.dtype != np.int64:
                    raise ValueError(f"cells of dtype {index.dtype}, {count.dtype}")
                if index.shape != count.shape or index.ndim != 1:
                    raise ValueError(f"cells of shapes {index.shape}, {count.shape}")
                if index.size and (
                    index[0] < 0
                    or index[-1] >= grid.n_cells
                    or not bool(np.all(np.diff(index) > 0))
                    or count.min() <= 0
                ):
                    raise ValueError("cells out of range, unsorted or not positive")
                newest = meta["newest"][i]
                out[str(name)] = Cells(
                    index,
                    count,
                    rows=int(meta["rows"][i]),
                    invalid=int(meta["invalid"][i]),
                    zeros=int(meta["zeros"][i]),
                    newest_ns=None if newest is None else int(newest),
                )
        return (
            Bucket(int(meta["start_ns"]), out, int(meta["unplaced"])),
            str(meta["fingerprint"]),
        )


class BucketCache:
    """Bucket summaries in memory (LRU) and, with a ``directory``, on disk, each bounded by
    ``max_bytes`` (the oldest buckets go first on disk). Thread-safe."""

    def __init__(self, directory: Path | None, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._memory: OrderedDict[tuple[str, str, int], tuple[str, Bucket]] = OrderedDict()
        self._memory_bytes = 0
        self._disk: dict[Path, int] | None = None
        self._lock = threading.Lock()
        self.hits = self.misses = self.corrupt = 0
        self.writable = directory is not None
        self._retry_at = 0.0
        if directory is not None and directory.is_dir():
            for tmp in directory.glob("*/*/.*.tmp"):  # a write a kill interrupted
                tmp.unlink(missing_ok=True)

    def _path(self, monitor: str, key: str, start_ns: int) -> Path:
        assert self.directory is not None
        return self.directory / monitor / key / f"{start_ns}.npz"

    def get(
        self, monitor: str, key: str, grid: Grid, start_ns: int, fingerprint: str
    ) -> Bucket | None:
        with self._lock:
            held = self._memory.get((monitor, key, start_ns))
            if held is not None and held[0] == fingerprint:
                self._memory.move_to_end((monitor, key, start_ns))
                self.hits += 1
                return held[1]
        if self.directory is None:
            self.misses += 1
            return None
        path = self._path(monitor, key, start_ns)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as exc:
            log.warning(
                "cannot read a cached bucket; recomputing it",
                extra={"monitor": monitor, "path": str(path), "error": str(exc)},
            )
            self.misses += 1
            return None
        try:
            bucket, stored = Bucket.from_bytes(data, grid, key)
        except _CORRUPT as exc:
            log.warning(
                "corrupt cached bucket set aside; recomputing it",
                extra={"monitor": monitor, "path": str(path), "error": str(exc)},
            )
            self.corrupt += 1
            self.misses += 1
            path.unlink(missing_ok=True)
            return None
        if stored != fingerprint or bucket.start_ns != start_ns:
            self.misses += 1
            return None  # the bucket's files changed: recompute (and overwrite)
        self._remember(monitor, key, fingerprint, bucket)
        self.hits += 1
        return bucket

    def put(self, monitor: str, key: str, fingerprint: str, bucket: Bucket) -> None:
        self._remember(monitor, key, fingerprint, bucket)
        if self.directory is None:
            return
        if not self.writable:
            if time.monotonic() < self._retry_at:
                return
            self.writable = True  # try the disk again (space may have been freed)
        path = self._path(monitor, key, bucket.start_ns)
        data = bucket.to_bytes(key, fingerprint)
        try:
            atomic_write(path.parent, path, data, stem=str(bucket.start_ns), durable=False)
        except OSError as exc:  # a full or read-only disk costs the cache, not the check
            log.warning(
                "cannot write a cached bucket; buckets are kept in memory only for 10 minutes",
                extra={"monitor": monitor, "path": str(path), "error": str(exc)},
            )
            self.writable = False  # warned once, not once a bucket; retried in 10 minutes
            self._retry_at = time.monotonic() + 600.0
            return
        self._account(path, len(data))

    def _remember(self, monitor: str, key: str, fingerprint: str, bucket: Bucket) -> None:
        with self._lock:
            k = (monitor, key, bucket.start_ns)
            old = self._memory.pop(k, None)
            if old is not None:
                self._memory_bytes -= old[1].nbytes
            self._memory[k] = (fingerprint, bucket)
            self._memory_bytes += bucket.nbytes
            while self._memory_bytes > self.max_bytes and len(self._memory) > 1:
                _, (_, gone) = self._memory.popitem(last=False)
                self._memory_bytes -= gone.nbytes

    def _account(self, path: Path, size: int) -> None:
        assert self.directory is not None
        with self._lock:
            if self._disk is None:
                self._disk = {
                    p: p.stat().st_size for p in self.directory.glob("*/*/*.npz") if p.is_file()
                }
            self._disk[path] = size
            total = sum(self._disk.values())
            if total <= self.max_bytes:
                return
            # evict the oldest buckets (by start) until under the bound
            for victim in sorted(self._disk, key=lambda p: int(p.stem)):
                if total <= self.max_bytes or victim == path:
                    continue
                total -= self._disk.pop(victim)
                victim.unlink(missing_ok=True)

    def forget(self, monitor: str) -> None:
        """Drop a monitor's buckets from memory (its grid changed)."""
        with self._lock:
            for k in [k for k in self._memory if k[0] == monitor]:
                _, gone = self._memory.pop(k)
                self._memory_bytes -= gone.nbytes


@dataclass(frozen=True, slots=True, eq=False)
class SummaryRead:
    """What one check read through summaries: each window's buckets, the segments seen in
    each, the frozen grid, the engine that computed the buckets not cached (None: every
    bucket was cached) and how many were read and cached."""

    grid: FrozenGrid
    reference_buckets: list[Bucket]
    current_buckets: list[Bucket]
    reference: frozenset[str]
    current: frozenset[str]
    rows: int
    newest_ns: int | None
    engine: str | None
    buckets_read: int
    buckets_cached: int
    bins: int
    reference_totals: Mapping[str, ScoreSummary]
    current_totals: Mapping[str, ScoreSummary]

    @property
    def n_reference(self) -> int:
        return sum(s.n for s in self.reference_totals.values())

    @property
    def n_current(self) -> int:
        return sum(s.n for s in self.current_totals.values())

    def segment(self, name: str) -> SegmentSummaries:
        """One segment's windows for the verdict (totals, buckets, bins on its edges)."""
        grid = self.grid.grid
        ref = tuple(b.summaries.get(name) for b in self.reference_buckets)
        cur = tuple(b.summaries.get(name) for b in self.current_buckets)
        empty = Cells.total(grid, [])
        ref_total = self.reference_totals.get(name, empty)
        cur_total = self.current_totals.get(name, empty)
        edges = self.grid.edges.get(name)
        if edges is None:  # a segment new since the grid was built
            edges = _derived_edges(ref_total, self.bins)
        key = edges.tobytes()
        return SegmentSummaries(
            grid=grid,
            edges=edges,
            reference=ref_total,
            current=cur_total,
            reference_starts=np.array([b.start_ns for b in self.reference_buckets], np.int64),
            current_starts=np.array([b.start_ns for b in self.current_buckets], np.int64),
            reference_buckets=ref,
            current_buckets=cur,
            binned={
                key: (
                    _bins(grid, self.reference_buckets, name, edges),
                    _bins(grid, self.current_buckets, name, edges),
                )
            },
        )


class _Rolling:
    """A window's per-segment totals kept across checks: buckets that left the window (or were
    recomputed: another object) are subtracted and new ones added, so a check costs the
    buckets that changed, not the window's length. Exact (integer counts)."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.members: dict[int, Bucket] = {}
        self.counts: dict[str, NDArray[np.int64]] = {}
        self.scalars: dict[str, NDArray[np.int64]] = {}  # rows, invalid, zeros

    def _apply(self, bucket: Bucket, sign: int) -> None:
        for name, c in bucket.summaries.items():
            counts = self.counts.get(name)
            if counts is None:
                counts = self.counts[name] = np.zeros(self.grid.n_cells, dtype=np.int64)
                self.scalars[name] = np.zeros(3, dtype=np.int64)
            counts[c.index] += sign * c.count
            self.scalars[name] += sign * np.array([c.rows, c.invalid, c.zeros], dtype=np.int64)

    def update(self, buckets: list[Bucket]) -> dict[str, ScoreSummary]:
        want = {b.start_ns: b for b in buckets}
        for start, old in list(self.members.items()):
            if want.get(start) is not old:
                self._apply(old, -1)
                del self.members[start]
        for start, b in want.items():
            if start not in self.members:
                self._apply(b, +1)
                self.members[start] = b
        newest: dict[str, int] = {}
        for b in buckets:
            for name, c in b.summaries.items():
                if c.newest_ns is not None and c.newest_ns > newest.get(name, c.newest_ns - 1):
                    newest[name] = c.newest_ns
        out = {}
        for name, counts in self.counts.items():
            rows, invalid, zeros = (int(x) for x in self.scalars[name])
            if rows == 0 and not counts.any():
                continue  # a segment no bucket of the window holds any more
            held = counts.copy()
            held.flags.writeable = False
            out[name] = ScoreSummary(self.grid, held, rows, invalid, zeros, newest.get(name))
        return out


def _bins(
    grid: Grid, buckets: list[Bucket], name: str, edges: NDArray[np.float64]
) -> NDArray[np.int64]:
    """(n_buckets x B) bin counts of a segment, each bucket's computed once and kept on it."""
    key = edges.tobytes()
    ends = bin_ends(grid, edges)
    out = np.zeros((len(buckets), edges.size + 1), dtype=np.int64)
    for i, b in enumerate(buckets):
        s = b.summaries.get(name)
        if s is None:
            continue
        held = b.bins.setdefault(key, {})
        row = held.get(name)
        if row is None:
            row = held[name] = s.bins(ends)
        out[i] = row
    return out


def _derived_edges(total: ScoreSummary, bins: int) -> NDArray[np.float64]:
    """PSI edges for a segment the grid has none for: the grid points where the reference's
    cumulative share first reaches k / bins (k = 1 .. bins - 1), each once."""
    pts = total.grid.points
    n = total.n
    if n == 0:
        return pts[:0].copy()
    cum = np.cumsum(total.counts) / n
    cells = np.searchsorted(cum, np.arange(1, bins) / bins, side="left")
    idx = np.minimum(cells // 2, pts.size - 1)  # the point cell of, or the point above, a cell
    return np.unique(pts[idx])


class SummaryChecks:
    """The summary side of the job runner: grids, the bucket cache and the engines."""

    def __init__(
        self,
        state_dir: Path | None,
        *,
        max_bytes: int = 1 << 30,
        persist_grids: bool = True,
        engines: Mapping[str, Engine] | None = None,
    ) -> None:
        """``engines``: engines already started, by kind, used whatever the address (an
        embedding process's own cluster; they are not closed by ``close``)."""
        self.directory = None if state_dir is None else state_dir / "summaries"
        self.persist_grids = persist_grids
        self.cache = BucketCache(self.directory, max_bytes)
        self._grids: dict[str, tuple[str, FrozenGrid]] = {}
        self._engines: dict[tuple[str, str | None], Engine] = {}
        self._given = dict(engines or {})
        self._rolling: dict[tuple[str, str], _Rolling] = {}
        self._lock = threading.Lock()
        self.last_engine: dict[str, str] = {}

    # -- engines ----------------------------------------------------------------------------

    def engine(self, settings: EngineConfig, kind: str) -> Engine:
        """The engine of ``kind`` (started once, shared by the monitors)."""
        if kind in self._given:
            return self._given[kind]
        address = {
            "dask": settings.dask_address or "local",
            "spark": settings.spark_remote or settings.spark_master or "local[2]",
        }.get(kind)
        with self._lock:
            held = self._engines.get((kind, address))
            if held is None:
                try:
                    held = make_engine(
                        kind,
                        dask_address=settings.dask_address or "local",
                        spark_master=settings.spark_master or "local[2]",
                        spark_remote=settings.spark_remote,
                    )
                except ImportError as exc:
                    raise EngineUnavailableError(
                        kind,
                        address or "in process",
                        f"{exc}; install it with pip install 'retrieval-monitor[{kind}]'",
                    ) from exc
                log.info("engine started", extra={"kind": kind, "address": address})
                self._engines[(kind, address)] = held
            return held

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for e in engines:
            e.close()

    # -- the grid ---------------------------------------------------------------------------

    def _grid_path(self, name: str) -> Path | None:
        if self.directory is None or not self.persist_grids:
            return None
        return self.directory / name / "grid.npz"

    def grid(
        self,
        monitor: MonitorConfig,
        settings: EngineConfig,
        at: datetime,
        reference: Window,
        current: Window,
        keep_edges: Iterable[NDArray[np.float64]] = (),
        *,
        rows: tuple[int, int] | None = None,
    ) -> FrozenGrid:
        """The monitor's frozen grid, rebuilt when missing, too old or for other settings
        (``rows``: the windows' rows from their footers, when the caller has them)."""
        want = _settings_key(monitor.scores, settings, monitor.drift.bins)
        if rows is None:
            rows = (_rows(monitor.scores, reference), _rows(monitor.scores, current))
        memo = self._grids.get(monitor.name)
        held = memo[1] if memo is not None and memo[0] == want else None
        path = self._grid_path(monitor.name)
        if held is None and path is not None and path.exists():
            try:
                held = FrozenGrid.from_bytes(path.read_bytes())
                if held.key != _grid_key(held.grid, want):
                    held = None  # built under other score or summary settings
            except _CORRUPT as exc:
                log.warning(
                    "corrupt summary grid set aside; building a new one",
                    extra={"monitor": monitor.name, "path": str(path), "error": str(exc)},
                )
                path.unlink(missing_ok=True)
                held = None
        if held is not None and not _stale(held, monitor, settings, at, reference, rows[0]):
            self._grids[monitor.name] = (want, held)
            return held
        built = self._build(monitor, settings, at, reference, want, keep_edges, rows)
        self._grids[monitor.name] = (want, built)
        self.cache.forget(monitor.name)
        if path is not None:
            try:
                atomic_write(path.parent, path, built.to_bytes(), stem="grid")
            except OSError as exc:
                log.warning(
                    "cannot write the summary grid; it is kept in memory",
                    extra={"monitor": monitor.name, "path": str(path), "error": str(exc)},
                )
        log.info(
            "summary grid built",
            extra={
                "monitor": monitor.name,
                "points": int(built.grid.points.size),
                "sample_rows": built.sample_rows,
                "reference_start": reference.start.isoformat(),
            },
        )
        return built

    def _build(
        self,
        monitor: MonitorConfig,
        settings: EngineConfig,
        at: datetime,
        reference: Window,
        want: str,
        keep_edges: Iterable[NDArray[np.float64]],
        rows: tuple[int, int],
    ) -> FrozenGrid:
        spec = monitor.scores
        sample = read_scores(spec, reference, sample_rows=settings.grid_sample_rows)
        ref_rows, cur_rows = rows[0], max(rows[1], 1)
        split = _by_segment(sample.values, sample.segment_codes, sample.segment_names)
        points: list[NDArray[np.float64]] = [np.asarray(e, np.float64) for e in keep_edges]
        edges: dict[str, NDArray[np.float64]] = {}
        for name, values in split.items():
            if values.size == 0:
                continue
            ordered = np.sort(values)
            baseline = build_baseline(ordered, bins=monitor.drift.bins)
            edges[name] = np.asarray(baseline.edges, dtype=np.float64)
            share = values.size / max(sample.values.size, 1)
            if settings.grid == "full":
                points.append(np.unique(ordered))
                points.append(edges[name])
                continue
            g = summary_grid(
                ordered,
                baseline.edges,
                n_current=max(int(cur_rows * share), 1),
                max_effect=settings.max_effect,
                n_reference=max(int(ref_rows * share), ordered.size),
            )
            points.append(g.points)
        joined = np.unique(np.concatenate(points)) if points else np.zeros(0)
        if joined.size == 0:
            joined = np.zeros(1)  # an empty reference: one point (every check is undecidable)
        grid = Grid(joined)
        return FrozenGrid(
            grid=grid,
            edges=edges,
            built_at=at,
            reference_start=reference.start,
            reference_end=reference.end,
            sample_rows=int(sample.values.size),
            key=_grid_key(grid, want),
            reference_rows=ref_rows,
        )

    # -- the windows ------------------------------------------------------------------------

    def read(
        self,
        monitor: MonitorConfig,
        settings: EngineConfig,
        at: datetime,
        reference: Window,
        current: Window,
        keep_edges: Iterable[NDArray[np.float64]] = (),
    ) -> SummaryRead:
        """Both windows' bucket summaries: from the cache, the rest from the engine."""
        step = settings.bucket // timedelta(microseconds=1) * 1000
        for w in (reference, current):
            if w.start_ns % step or w.end_ns % step:
                raise SummaryCheckError(
                    f"the window [{w.start.isoformat()}, {w.end.isoformat()}) is not on "
                    f"boundaries of engine.summary.bucket; check at a bucket boundary"
                )
        spec = monitor.scores
        # one walk over the span of both windows (they are adjacent unless windows.gap is set)
        span = Window(
            start=min(reference.start, current.start), end=max(reference.end, current.end)
        )
        stats = sorted(window_file_stats(spec, span), key=lambda f: f.path)
        rows_ref, rows_cur = (sum(f.rows for f in stats if _in(f, w)) for w in (reference, current))
        frozen = self.grid(
            monitor, settings, at, reference, current, keep_edges, rows=(rows_ref, rows_cur)
        )
        read = cached = 0
        engine_used: str | None = None
        per_window: list[tuple[Window, NDArray[np.int64], list[str]]] = []
        for w in (reference, current):
            starts = np.arange(w.start_ns, w.end_ns, step, dtype=np.int64)
            per_window.append((w, starts, _fingerprints(stats, starts, step)))
        missing: list[tuple[Window, list[tuple[int, str]]]] = []
        buckets: dict[int, Bucket] = {}
        for w, starts, prints in per_window:
            lack: list[tuple[int, str]] = []
            for b, fp in zip(starts.tolist(), prints, strict=True):
                got = self.cache.get(monitor.name, frozen.key, frozen.grid, b, fp)
                if got is None:
                    lack.append((b, fp))
                else:
                    buckets[b] = got
                    cached += 1
            if lack:
                missing.append((w, lack))
        if missing:
            rows_to_read = sum(
                f.rows
                for f in stats
                if any(_overlaps(f, b, step) for _, lack in missing for b, _ in lack)
            )
            engine_used = _choose(settings, rows_to_read)
            engine = self.engine(settings, engine_used)
            for _w, lack in missing:
                for run in _runs(lack, step):
                    lo, hi = run[0][0], run[-1][0] + step
                    part = engine.summaries(
                        spec,
                        Window(start=from_ns(lo), end=from_ns(hi)),
                        frozen.grid,
                        bucket=settings.bucket,
                        check=False,
                    )
                    for b, bucket in _split(part, [b for b, _ in run]).items():
                        fp = dict(run)[b]
                        self.cache.put(monitor.name, frozen.key, fp, bucket)
                        buckets[b] = bucket
                        read += 1
            self.last_engine[monitor.name] = engine_used
            log.info(
                "buckets summarised",
                extra={
                    "monitor": monitor.name,
                    "engine": engine_used,
                    "rows_planned": rows_to_read,
                    "buckets_read": read,
                    "buckets_cached": cached,
                },
            )
        lists: list[list[Bucket]] = []
        seen: list[frozenset[str]] = []
        totals: list[dict[str, ScoreSummary]] = []
        rows = 0
        newest: int | None = None
        for w, starts, _ in per_window:
            held = [buckets[b] for b in starts.tolist()]
            total_rows = total_bad = 0
            names: set[str] = set()
            for bucket in held:
                names.update(bucket.summaries)
                total_rows += bucket.unplaced
                total_bad += bucket.unplaced
                for s in bucket.summaries.values():
                    total_rows += s.rows
                    total_bad += s.invalid
                    if s.newest_ns is not None and (newest is None or s.newest_ns > newest):
                        newest = s.newest_ns
            _check_invalid(spec, w, total_rows, total_bad, engine_for_error=self, settings=settings)
            rows += total_rows
            lists.append(held)
            seen.append(frozenset(names))
            role = "reference" if w is reference else "current"
            rolling = self._rolling.get((monitor.name, role))
            if rolling is None or rolling.grid is not frozen.grid:
                rolling = self._rolling[(monitor.name, role)] = _Rolling(frozen.grid)
            totals.append(rolling.update(held))
        return SummaryRead(
            grid=frozen,
            reference_buckets=lists[0],
            current_buckets=lists[1],
            reference=seen[0],
            current=seen[1],
            rows=rows,
            newest_ns=newest,
            engine=engine_used,
            buckets_read=read,
            buckets_cached=cached,
            bins=monitor.drift.bins,
            reference_totals=totals[0],
            current_totals=totals[1],
        )


def _check_invalid(
    spec: ScoreSpec,
    window: Window,
    rows: int,
    bad: int,
    *,
    engine_for_error: SummaryChecks,
    settings: EngineConfig,
) -> None:
    """``BadValuesError`` when the window's invalid share (from its buckets) is too high: the
    window is then read once more with the check, for the same message as the array reader."""
    if not rows or bad / rows <= spec.max_invalid_share:
        return
    engine = engine_for_error.engine(settings, "local")
    part = engine.summaries(spec, window, Grid(np.zeros(1)), bucket=None, check=False)
    check_summary_part(spec, window, part)
    # the re-read found the share within bounds (attribution at the window's ends): go on


def _choose(settings: EngineConfig, rows: int) -> str:
    if settings.kind != "auto":
        return settings.kind
    cluster = settings.cluster_kind()
    return cluster if cluster is not None and rows >= settings.auto_rows else "local"


def _settings_key(spec: ScoreSpec, settings: EngineConfig, bins: int) -> str:
    """What a grid and its buckets depend on besides the points."""
    return repr(
        (
            spec.path,
            spec.score_column,
            spec.timestamp_column,
            spec.timestamp_unit,
            spec.segment_column,
            spec.rank_column,
            spec.top_rank,
            settings.bucket,
            settings.grid,
            settings.max_effect,
            bins,
            _FORMAT,
        )
    )


def _stale(
    held: FrozenGrid,
    monitor: MonitorConfig,
    settings: EngineConfig,
    at: datetime,
    reference: Window,
    rows: int,
) -> bool:
    if monitor.windows.fixed_reference:
        return (held.reference_start, held.reference_end) != (reference.start, reference.end)
    limit = settings.regrid or (reference.end - reference.start)
    if at - held.built_at >= limit or at < held.built_at:
        return True
    # the reference has grown or shrunk twofold since (a young world, a volume change)
    return not held.reference_rows / 2 <= rows <= 2 * max(held.reference_rows, 1)


def _grid_key(grid: Grid, want: str) -> str:
    """The identity buckets are cached under: the points and the settings they depend on."""
    digest = hashlib.blake2b(grid.points.tobytes(), digest_size=8)
    digest.update(want.encode())
    return digest.hexdigest()


def _rows(spec: ScoreSpec, window: Window) -> int:
    """The rows the footers give for a window's files (an upper bound; no data read)."""
    return sum(f.rows for f in window_file_stats(spec, window))


def _in(f: FileStat, w: Window) -> bool:
    """Whether a file may hold rows of ``w`` (unknown spans: yes)."""
    if f.oldest_ns is None or f.newest_ns is None:
        return True
    return f.oldest_ns < w.end_ns and f.newest_ns >= w.start_ns


def _overlaps(f: FileStat, start_ns: int, step: int) -> bool:
    if f.oldest_ns is None or f.newest_ns is None:
        return True
    return f.oldest_ns < start_ns + step and f.newest_ns >= start_ns


def _fingerprints(files: list[FileStat], starts: NDArray[np.int64], step: int) -> list[str]:
    """Per bucket: a digest of the (path, size, mtime) of every file that may hold its rows."""
    members: list[list[FileStat]] = [[] for _ in range(starts.size)]
    if starts.size:
        first = int(starts[0])
        for f in files:
            if f.oldest_ns is None or f.newest_ns is None:
                lo, hi = 0, starts.size - 1
            else:
                lo = max(0, (f.oldest_ns - first) // step)
                hi = min(starts.size - 1, (f.newest_ns - first) // step)
            for i in range(int(lo), int(hi) + 1):
                members[i].append(f)
    out = []
    for group in members:
        h = hashlib.blake2b(digest_size=16)
        for f in group:
            h.update(f"{f.path}\0{f.size}\0{f.mtime_ns}\n".encode())
        out.append(h.hexdigest())
    return out


def _runs(lack: list[tuple[int, str]], step: int) -> list[list[tuple[int, str]]]:
    """Consecutive missing buckets grouped: each run is read as one window."""
    runs: list[list[tuple[int, str]]] = []
    for b, fp in lack:
        if runs and runs[-1][-1][0] + step == b:
            runs[-1].append((b, fp))
        else:
            runs.append([(b, fp)])
    return runs


def _split(part: SummaryPart, starts: list[int]) -> dict[int, Bucket]:
    """A run's part as one Bucket per bucket start (empty buckets included); its unplaced
    invalid rows count in the run's first bucket."""
    by: dict[int, dict[str, Cells]] = {b: {} for b in starts}
    for (name, b), s in part.summaries.items():
        by[b][name] = Cells.of(s)
    return {
        b: Bucket(b, summaries, part.unplaced if i == 0 else 0)
        for i, (b, summaries) in enumerate(by.items())
    }


def _by_segment(
    values: NDArray[np.float64], codes: NDArray[np.int32] | None, names: tuple[str, ...]
) -> dict[str, NDArray[np.float64]]:
    if codes is None:
        return {"": values}
    return {name: values[codes == i] for i, name in enumerate(names)}
