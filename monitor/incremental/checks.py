"""The summary side of the job runner: grids built and kept, buckets read, engines chosen."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

import numpy as np
from numpy.typing import NDArray

from monitor.config import EngineConfig, MonitorConfig
from monitor.engines import Engine, engine_alive, make_engine
from monitor.epoch import from_ns
from monitor.errors import EngineUnavailableError, MonitorError
from monitor.files import NotRegularFile, atomic_write, read_regular
from monitor.incremental.store import (
    _FORMAT,
    MAX_GRID_BYTES,
    Bucket,
    BucketCache,
    FrozenGrid,
    _grid_key,
)
from monitor.incremental.windows import (
    BucketPlan,
    SummaryRead,
    _indices,
    _Rolling,
    _runs,
    _split,
)
from monitor.sources import (
    ScoreSpec,
    Window,
    check_summary_part,
    files_digest,
    read_scores,
    window_file_stats,
)
from monitor.stats import (
    Grid,
    ScoreSummary,
    build_baseline,
    summary_grid,
)

log = logging.getLogger("monitor.incremental")

_Have = list[Bucket | None]  # a window's buckets by position, None until in hand


class SummaryCheckError(MonitorError):
    """A check through summaries cannot run as asked (a slot inside a bucket)."""


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
        self._plans: dict[str, BucketPlan] = {}  # per monitor: its last check's buckets
        self._lock = threading.Lock()  # guards the dicts of engines and of start locks
        self._starting: dict[str, threading.Lock] = {}
        # engines a check is using (``engine(hold=True)`` to ``release``), by id: one a reload
        # or an address change retires is closed when its last check is done with it, not
        # under a check (whose retry started it again with the old settings, for good)
        self._users: dict[int, int] = {}
        self._retired: dict[int, Engine] = {}
        self._usable: set[tuple[str, str | None]] | None = None  # None: every engine
        self.last_engine: dict[str, str] = {}

    # -- engines ----------------------------------------------------------------------------

    def engine(self, settings: EngineConfig, kind: str, *, hold: bool = False) -> Engine:
        """The engine of ``kind`` (started once, shared by the monitors); ``hold``: counted as
        in use until ``release`` (a reload then closes it only once it is released)."""
        if kind in self._given:
            return self._given[kind]
        address = _address(settings, kind)
        with self._lock:
            starting = self._starting.setdefault(kind, threading.Lock())
        # one lock a kind, held while an engine starts: a connect that waits out its timeout on
        # an unreachable scheduler no longer holds back the monitors of the other kinds
        with starting:
            with self._lock:
                held = self._engines.get((kind, address))
                if held is not None and hold:  # counted at once: a reload may run meanwhile
                    self._users[id(held)] = self._users.get(id(held), 0) + 1
            if held is not None and not engine_alive(held):
                # its scheduler went away (a restart): a new engine reconnects, where the
                # closed one failed every later check until the daemon restarted
                log.warning(
                    "engine lost; starting it again", extra={"kind": kind, "address": address}
                )
                if hold:
                    self.release(held)
                self._drop(held)
                held = None
            if held is None:
                # one engine of a kind: a reload that changed its address (spark.master) once
                # got the old SparkSession back from getOrCreate and kept running on it
                with self._lock:
                    others = [self._engines.pop(k) for k in list(self._engines) if k[0] == kind]
                    idle = self._retire(others)
                for other in idle:
                    _close(other)
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
                with self._lock:
                    self._engines[(kind, address)] = held
                    if hold:
                        self._users[id(held)] = self._users.get(id(held), 0) + 1
            return held

    def release(self, engine: Engine) -> None:
        """A check is done with ``engine`` (from ``engine(hold=True)``): closed now if it was
        retired meanwhile, or if no monitor can use it any more (one a check started after a
        reload, with the settings from before it)."""
        with self._lock:
            key = id(engine)
            if key not in self._users:
                return  # a given engine, or one dropped as failed
            self._users[key] -= 1
            if self._users[key] > 0:
                return
            del self._users[key]
            close = self._retired.pop(key, None)
            if close is None and self._usable is not None:
                stale = [
                    k for k, e in self._engines.items() if e is engine and k not in self._usable
                ]
                for k in stale:
                    close = self._engines.pop(k)
        if close is not None:
            log.info("engine closed: no monitor uses it", extra={"kind": close.kind})
            _close(close)

    def _retire(self, engines: Iterable[Engine]) -> list[Engine]:
        """Of ``engines`` (taken out of the held ones, under the lock), those no check uses,
        to be closed now; the others are closed by their last ``release``."""
        idle = []
        for engine in engines:
            if self._users.get(id(engine), 0) > 0:
                self._retired[id(engine)] = engine
            else:
                idle.append(engine)
        return idle

    def keep_engines(self, settings: Iterable[EngineConfig]) -> None:
        """Close the held engines none of ``settings`` can use (a reload moved every monitor
        off a Dask cluster or a Spark session: its workers would run, unused, until the daemon
        exits; a Spark session is stopped, its JVM kept by pyspark until then); engines handed
        in at construction are the caller's."""
        usable = {
            (kind, _address(s, kind))
            for s in settings
            for kind in ((s.kind,) if s.kind != "auto" else ("local", s.cluster_kind()))
            if kind is not None
        }
        with self._lock:
            self._usable = usable
            idle = self._retire(
                [self._engines.pop(k) for k in list(self._engines) if k not in usable]
            )
        for engine in idle:
            log.info("engine closed: no monitor uses it", extra={"kind": engine.kind})
            _close(engine)

    def _drop(self, engine: Engine) -> None:
        """Forget and close a held engine that failed (the next ``engine`` starts another)."""
        with self._lock:
            for key in [k for k, held in self._engines.items() if held is engine]:
                self._engines.pop(key)
            self._users.pop(id(engine), None)
            self._retired.pop(id(engine), None)
        _close(engine)

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for e in engines:
            e.close()

    def forget(self, name: str) -> None:
        """Drop what was kept in memory for monitor ``name`` (its grid, rolled windows, bucket
        plan and cached buckets): it was removed, or its settings changed (SIGHUP). Files stay:
        a grid or bucket on disk is keyed by the settings it was made under."""
        self._grids.pop(name, None)
        self._plans.pop(name, None)
        self.last_engine.pop(name, None)
        for key in list(self._rolling):  # a snapshot: other monitors' checks may add
            if key[0] == name:
                self._rolling.pop(key, None)
        self.cache.forget(name)

    def holds(self, name: str) -> bool:
        """Whether anything is kept in memory for monitor ``name``."""
        kept = (
            name in self._grids
            or name in self._plans
            or any(k[0] == name for k in list(self._rolling))
        )
        return kept or self.cache.holds(name)

    # -- the grid ---------------------------------------------------------------------------

    def _grid_present(self, path: Path) -> bool:
        """Whether the monitor's grid file is there. A directory that cannot be entered is
        this check's error, as a grid file that cannot be read is (``_read_grid``): a grid of
        its own would decide on other edges than the daemon's (``monitor check``), or be one
        the daemon keeps in memory, never saved nor looked for again once access is back."""
        try:
            return path.exists()
        except OSError as exc:
            hint = (
                "give the daemon's user access to its state_dir again"
                if self.persist_grids
                else "run as the daemon's user, or with read access to its state_dir"
            )
            raise SummaryCheckError(f"cannot read the summary grid {path}: {exc}; {hint}") from exc

    def _grid_path(self, name: str) -> Path | None:
        """The persisted grid's file: read by every runner with a state directory (``monitor
        check`` decides on the daemon's grid), written only with ``persist_grids``."""
        if self.directory is None:
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
        identity = _reference_print(monitor, settings, reference)
        memo = self._grids.get(monitor.name)
        held = memo[1] if memo is not None and memo[0] == want else None
        # the grid a rebuild replaces: its cached buckets go with it
        replaced = memo[1].key if memo is not None else None
        path = self._grid_path(monitor.name)
        if held is None and path is not None and self._grid_present(path):
            held, replaced = self._read_grid(monitor.name, path, want, replaced)
        keep_edges = [np.asarray(e, np.float64) for e in keep_edges]
        if (
            held is not None
            and not _stale(held, monitor, settings, at, reference, rows[0], identity)
            # an anchor's edges are grid points, or its PSI cannot be summed: an anchor made
            # while the monitor read whole windows (its engine off a while) needs a new grid
            and all(held.grid.holds(e) for e in keep_edges)
        ):
            self._grids[monitor.name] = (want, held)
            return held
        built = replace(
            self._build(monitor, settings, at, reference, want, keep_edges, rows),
            reference_print=identity,
        )
        self._grids[monitor.name] = (want, built)
        self.cache.forget(monitor.name)
        if path is not None and self.persist_grids:
            try:
                atomic_write(path.parent, path, built.to_bytes(), stem="grid")
            except OSError as exc:
                log.warning(
                    "cannot write the summary grid; it is kept in memory",
                    extra={"monitor": monitor.name, "path": str(path), "error": str(exc)},
                )
            else:  # the old grid's buckets are never read again: they go now, not at the bound
                if replaced is not None and replaced != built.key:
                    self.cache.drop_grid(monitor.name, replaced)
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

    def _read_grid(
        self, name: str, path: Path, want: str, replaced: str | None
    ) -> tuple[FrozenGrid | None, str | None]:
        """The grid file at ``path`` (None: unusable, and why is logged) and the key of the
        grid it held (its buckets go when a new one replaces it). A damaged or foreign file,
        or one that is no regular file (a FIFO once hung every check), is removed where this
        process owns the grids and left to the daemon elsewhere. One that cannot be read
        (permissions) is an error in a read-only process (check, report): building its own
        grid, it would decide on other edges than the daemon did."""
        bad: BaseException | None = None
        try:
            data = read_regular(path, MAX_GRID_BYTES)
        except FileNotFoundError:
            return None, replaced  # removed meanwhile: built anew
        except NotRegularFile as exc:
            bad = exc
        except OSError as exc:
            if not self.persist_grids:
                raise SummaryCheckError(
                    f"cannot read the summary grid {path}: {exc}; run as the daemon's "
                    "user, or with read access to its state_dir"
                ) from exc
            bad = exc
        if bad is None:
            try:
                grid = FrozenGrid.from_bytes(data)
            except MemoryError:
                raise  # the process's, not the file's: a valid grid is never removed for it
            # anything the zip and .npy readers raise on a damaged file is damage: a flipped
            # bit raised RuntimeError ('encrypted'), NotImplementedError (a zip version),
            # TokenError or SyntaxError (a .npy header), each not taken for damage, and every
            # check was an error until the file was removed by hand
            except Exception as exc:
                bad = exc
        if bad is None:
            # built under other score or summary settings: not used, its buckets replaced
            return (grid if grid.key == _grid_key(grid.grid, want) else None), grid.key
        # removed where this process owns the grids (the daemon writes the new one); a
        # read-only process (check, report) leaves the file to the daemon
        fate = "ignored (left for the daemon)"
        if self.persist_grids:
            try:
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()
                else:
                    path.unlink(missing_ok=True)
                fate = "removed"
            except OSError as gone:
                fate = f"kept (cannot remove it: {gone.strerror or gone})"
        log.warning(
            f"corrupt summary grid {fate}; building a new one",
            extra={"monitor": name, "path": str(path), "error": str(bad)},
        )
        return None, replaced

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
        # the sample's invalid share is not the window's (a NaN row group sampled is a far
        # larger share of the sample): the window's is checked exactly from its buckets
        spec = replace(monitor.scores, max_invalid_share=1.0)
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
        # one walk over the span of both windows (adjacent unless windows.gap or a fixed
        # reference sets them apart)
        span = Window(
            start=min(reference.start, current.start), end=max(reference.end, current.end)
        )
        plan = self._plans.setdefault(monitor.name, BucketPlan())
        # apart (windows.gap, a fixed reference): the gap's partitions are not walked
        apart = reference.end < current.start or current.end < reference.start
        files = window_file_stats(spec, span, parts=(reference, current) if apart else None)
        step_plan = plan.update(files, step, span)
        table = step_plan.table
        rows_ref, rows_cur = table.rows_in(reference), table.rows_in(current)
        frozen = self.grid(
            monitor, settings, at, reference, current, keep_edges, rows=(rows_ref, rows_cur)
        )
        read = cached = 0
        engine_used: str | None = None
        # per window: its starts, as ints, their digests and buckets (None: not yet in hand)
        per_window: list[tuple[Window, NDArray[np.int64], list[int], list[str], _Have]] = []
        missing: list[tuple[list[int], list[tuple[int, str]], _Have]] = []
        for w in (reference, current):
            starts = np.arange(w.start_ns, w.end_ns, step, dtype=np.int64)
            order = starts.tolist()
            prints, have = plan.fingerprints(step_plan, frozen.key, order)
            per_window.append((w, starts, order, prints, have))
            wanted = [(order[i], prints[i]) for i in _indices(have, None)]
            got = self.cache.get_many(monitor.name, frozen.key, frozen.grid, wanted)
            cached += len(order) - len(wanted) + len(got)
            lack = []
            for b, fp in wanted:
                bucket = got.get(b)
                if bucket is None:
                    lack.append((b, fp))
                else:
                    have[(b - order[0]) // step] = bucket
            if lack:
                missing.append((order, lack, have))
        if missing:
            touched = np.zeros(len(table.files), dtype=bool)
            for _, lack, _ in missing:
                for run in _runs(lack, step):
                    touched |= table.touching(run[0][0], run[-1][0] + step)
            rows_to_read = int(table.rows[touched].sum())
            engine_used = _choose(settings, rows_to_read)
            engine: Engine | None = self.engine(settings, engine_used, hold=True)
            try:
                for order, lack, have in missing:
                    for run in _runs(lack, step):
                        lo, hi = run[0][0], run[-1][0] + step
                        run_window = Window(start=from_ns(lo), end=from_ns(hi))
                        try:
                            assert engine is not None
                            part = engine.summaries(
                                spec, run_window, frozen.grid, bucket=settings.bucket, check=False
                            )
                        except EngineUnavailableError:
                            if engine_used == "local" or engine is None:
                                raise
                            # the cluster went away under a held engine (a scheduler
                            # restart): one new engine, once; a second failure is this
                            # check's error
                            self._drop(engine)
                            engine = None
                            engine = self.engine(settings, engine_used, hold=True)
                            part = engine.summaries(
                                spec, run_window, frozen.grid, bucket=settings.bucket, check=False
                            )
                        made = _split(part, [b for b, _ in run])
                        for b, fp in run:
                            self.cache.put(monitor.name, frozen.key, fp, made[b])
                            have[(b - order[0]) // step] = made[b]
                            read += 1
            finally:
                if engine is not None:
                    self.release(engine)
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
        held_all: list[list[Bucket]] = []
        for *_, have in per_window:
            assert None not in have  # every bucket cached or read
            held_all.append(cast(list[Bucket], have))
        plan.commit(
            step_plan,
            frozen.key,
            [
                (order[0], prints, h)
                for (_, _, order, prints, _), h in zip(per_window, held_all, strict=True)
                if order
            ],
        )
        lists: list[list[Bucket]] = []
        seen: list[frozenset[str]] = []
        totals: list[dict[str, ScoreSummary]] = []
        rolled: list[_Rolling] = []
        rows = 0
        newest: int | None = None
        for (w, *_), held in zip(per_window, held_all, strict=True):
            role = "reference" if w is reference else "current"
            rolling = self._rolling.get((monitor.name, role))
            if rolling is None or rolling.grid is not frozen.grid:
                rolling = self._rolling[(monitor.name, role)] = _Rolling(frozen.grid)
            totals.append(rolling.update(held))  # a cost of the buckets that changed
            rolled.append(rolling)
            total_rows, total_bad = rolling.rows
            _check_invalid(spec, w, total_rows, total_bad, engine_for_error=self, settings=settings)
            rows += total_rows
            lists.append(held)
            seen.append(rolling.segments)
            for s in totals[-1].values():
                if s.newest_ns is not None and (newest is None or s.newest_ns > newest):
                    newest = s.newest_ns
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
            starts=(per_window[0][1], per_window[1][1]),
            rolling=(rolled[0], rolled[1]),
            bucket_ns=step,
        )


def _address(settings: EngineConfig, kind: str) -> str | None:
    """Where an engine of ``kind`` runs under ``settings`` (None: in process); one held a
    (kind, address)."""
    return {
        "dask": settings.dask_address or "local",
        "spark": settings.spark_remote or settings.spark_master or "local[2]",
    }.get(kind)


def _close(engine: Engine) -> None:
    """Close an engine being replaced; a failure to (a client whose scheduler is gone) is
    logged, not raised: the new engine is what the check needs."""
    try:
        engine.close()
    except Exception as exc:  # the cluster library's own
        log.warning("engine not closed cleanly", extra={"kind": engine.kind, "error": repr(exc)})


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


def _reference_print(monitor: MonitorConfig, settings: EngineConfig, reference: Window) -> str:
    """The digest of a fixed reference's files (path, size, mtime, ctime, deletes) where the
    grid is ``full`` (it must hold every reference value), else "": a rewrite that keeps the row
    count (a re-scoring, a correction) changes it."""
    if not (monitor.windows.fixed_reference and settings.grid == "full"):
        return ""
    files = window_file_stats(monitor.scores, reference)
    return files_digest(sorted(files, key=lambda f: f.path))


def _stale(
    held: FrozenGrid,
    monitor: MonitorConfig,
    settings: EngineConfig,
    at: datetime,
    reference: Window,
    rows: int,
    identity: str = "",
) -> bool:
    if not held.edges and rows > 0:
        return True  # built on an empty reference (one point): its rows have landed since
    if monitor.windows.fixed_reference:
        if (held.reference_start, held.reference_end) != (reference.start, reference.end):
            return True
        # a fixed window changes by late, removed or rewritten files: a full grid must hold
        # every value (its exact KS), so any change of its files rebuilds it (a rewrite of as
        # many rows kept the old grid for good); an automatic one is rebuilt as a rolling one is
        if settings.grid == "full":
            return rows != held.reference_rows or identity != held.reference_print
        return not held.reference_rows / 2 <= rows <= 2 * max(held.reference_rows, 1)
    limit = settings.regrid or (reference.end - reference.start)
    if at - held.built_at >= limit or at < held.built_at:
        return True
    # the reference has grown or shrunk twofold since (a young world, a volume change)
    return not held.reference_rows / 2 <= rows <= 2 * max(held.reference_rows, 1)


def _rows(spec: ScoreSpec, window: Window) -> int:
    """The rows the footers give for a window's files (an upper bound; no data read)."""
    return sum(f.rows for f in window_file_stats(spec, window))


def _by_segment(
    values: NDArray[np.float64], codes: NDArray[np.int32] | None, names: tuple[str, ...]
) -> dict[str, NDArray[np.float64]]:
    if codes is None:
        return {"": values}
    return {name: values[codes == i] for i, name in enumerate(names)}
