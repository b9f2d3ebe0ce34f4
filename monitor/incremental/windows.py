"""One check's windows as buckets: the read result, the rolled totals, bucket keys and runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from monitor.incremental.store import Bucket, FrozenGrid
from monitor.sources import (
    FileStat,
    SummaryPart,
    Window,
    files_digest,
)
from monitor.stats import (
    Cells,
    Grid,
    ScoreSummary,
    bin_ends,
)
from monitor.verdict.data import SegmentSummaries


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
    # each window's bucket starts (int64 ns)
    starts: tuple[NDArray[np.int64], NDArray[np.int64]]
    # each window's rolling state, whose bin rows the next check reuses (None: none kept)
    rolling: tuple[_Rolling, _Rolling] | None = None
    bucket_ns: int = 3_600 * 10**9  # the buckets' length

    @property
    def n_reference(self) -> int:
        return sum(s.n for s in self.reference_totals.values())

    @property
    def n_current(self) -> int:
        return sum(s.n for s in self.current_totals.values())

    def segment(self, name: str) -> SegmentSummaries:
        """One segment's windows for the verdict (totals, buckets, bins on its edges)."""
        grid = self.grid.grid
        ref_total = self.reference_totals.get(name)
        cur_total = self.current_totals.get(name)
        if ref_total is None or cur_total is None:  # a segment one window lacks
            empty = Cells.total(grid, [])
            ref_total = empty if ref_total is None else ref_total
            cur_total = empty if cur_total is None else cur_total
        edges = self.grid.edges.get(name)
        if edges is None:  # a segment new since the grid was built
            edges = _derived_edges(ref_total, self.bins)
        ref_rolling, cur_rolling = self.rolling or (None, None)
        ref_buckets, cur_buckets = self.reference_buckets, self.current_buckets
        made: dict[bytes, tuple[NDArray[np.int64], NDArray[np.int64]]] = {}

        def binner(e: NDArray[np.float64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
            # any edges (the segment's, an anchor's): through each window's memo, so a check
            # bins only the buckets that are new to the window on those edges; once a check
            key = e.tobytes()
            got = made.get(key)
            if got is None:
                ends = bin_ends(grid, e)
                got = made[key] = (
                    _bins(grid, ref_buckets, name, e, rolling=ref_rolling, ends=ends),
                    _bins(grid, cur_buckets, name, e, rolling=cur_rolling, ends=ends),
                )
            return got

        ref_starts, cur_starts = self.starts
        return SegmentSummaries(
            grid=grid,
            edges=edges,
            reference=ref_total,
            current=cur_total,
            reference_starts=ref_starts,
            current_starts=cur_starts,
            binner=binner,
            bucket_ns=self.bucket_ns,
        )


class _Rolling:
    """A window's per-segment totals kept across checks: buckets that left the window (or were
    recomputed: another object) are subtracted and new ones added, so a check costs the
    buckets that changed, not the window's length. Exact (integer counts)."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.members: dict[int, Bucket] = {}  # by id: the bucket objects summed
        self.order: list[Bucket] = []  # the buckets of the last update, in time order
        # (segment, edges) -> the check that last used them, its buckets and their bin rows
        # (see ``_bins``); an entry no check used since the last update is dropped
        self.binned: _BinMemo = {}
        self.generation = 0  # the updates so far
        self.counts: dict[str, NDArray[np.int64]] = {}
        self.scalars: dict[str, list[int]] = {}  # rows, invalid, zeros
        self.holding: dict[str, int] = {}  # segment -> member buckets that hold it
        self.unplaced = 0  # invalid rows in no summary (``Bucket.unplaced``), summed

    def _apply(self, bucket: Bucket, sign: int) -> None:
        self.unplaced += sign * bucket.unplaced
        for name, c in bucket.summaries.items():
            counts = self.counts.get(name)
            if counts is None:
                counts = self.counts[name] = np.zeros(self.grid.n_cells, dtype=np.int64)
                self.scalars[name] = [0, 0, 0]
            # a bucket's cell indices are unique: ufunc.at adds exactly what ``+=`` would, and
            # in numpy 2 about twice as fast as the fancy-index gather, add and scatter
            (np.add if sign > 0 else np.subtract).at(counts, c.index, c.count)
            held = self.scalars[name]
            held[0] += sign * c.rows
            held[1] += sign * c.invalid
            held[2] += sign * c.zeros
            left = self.holding.get(name, 0) + sign
            if left:
                self.holding[name] = left
            else:
                del self.holding[name]

    @property
    def segments(self) -> frozenset[str]:
        """The segments some bucket of the window holds."""
        return frozenset(self.holding)

    @property
    def rows(self) -> tuple[int, int]:
        """The window's rows and invalid rows (those in no summary included)."""
        rows = sum(int(s[0]) for s in self.scalars.values()) + self.unplaced
        return rows, sum(int(s[1]) for s in self.scalars.values()) + self.unplaced

    def update(self, buckets: list[Bucket]) -> dict[str, ScoreSummary]:
        """The window's totals per segment for ``buckets`` (in time order): the buckets that
        left the window subtracted, the new ones added."""
        self.generation += 1
        for stale in [key for key, v in self.binned.items() if v[0] < self.generation - 1]:
            del self.binned[stale]  # edges no longer asked for (an anchor since refreshed)
        members = self.members
        k = _moved_on(self.order, buckets)
        if k is not None:  # the usual check: the window moved on by k buckets, none recomputed
            for gone in self.order[:k]:
                self._apply(members.pop(id(gone)), -1)
            for b in buckets[len(self.order) - k :]:
                members[id(b)] = b
                self._apply(b, +1)
        else:
            want = {id(b): b for b in buckets}  # a recomputed bucket is another object
            for gone_id in members.keys() - want.keys():
                self._apply(members.pop(gone_id), -1)
            for new_id in want.keys() - members.keys():
                members[new_id] = want[new_id]
                self._apply(want[new_id], +1)
        self.order = list(buckets)
        # a bucket's rows lie in [start, start + bucket): a segment's newest row is in the
        # latest bucket that holds it, so the search stops there
        newest: dict[str, int] = {}
        for b in reversed(buckets):
            for name, c in b.summaries.items():
                if name not in newest and c.newest_ns is not None:
                    newest[name] = c.newest_ns
            if len(newest) >= len(self.holding):
                break
        out = {}
        for name, counts in self.counts.items():
            rows, invalid, zeros = self.scalars[name]
            if rows == 0 and not counts.any():
                continue  # a segment no bucket of the window holds any more
            held = counts.copy()
            held.flags.writeable = False
            out[name] = ScoreSummary(self.grid, held, rows, invalid, zeros, newest.get(name))
        return out


_BinMemo = dict[tuple[str, bytes], tuple[int, list[Bucket], NDArray[np.int64]]]


def _bins(
    grid: Grid,
    buckets: list[Bucket],
    name: str,
    edges: NDArray[np.float64],
    *,
    rolling: _Rolling | None = None,
    ends: NDArray[np.intp] | None = None,
) -> NDArray[np.int64]:
    """(n_buckets x B) bin counts of a segment (read-only), each bucket's computed once and
    kept on it; with ``rolling`` (the window's, its memo updated) the rows of the buckets that
    were in the window at the last check are taken from its matrix in one step, not bucket by
    bucket. ``ends``: ``bin_ends(grid, edges)``, when the caller has them."""
    key = edges.tobytes()
    if ends is None:
        ends = bin_ends(grid, edges)
    out = np.zeros((len(buckets), edges.size + 1), dtype=np.int64)
    todo: list[int] | range = range(len(buckets))
    memo = rolling.binned if rolling is not None else None
    last = memo.get((name, key)) if memo is not None else None
    k = _moved_on(last[1], buckets) if last is not None else None
    if last is not None and k is not None:  # moved on by k buckets: one slice of the matrix
        kept_rows = len(last[1]) - k
        out[:kept_rows] = last[2][k:]
        todo = range(kept_rows, len(buckets))
    elif last is not None:
        where = {id(b): i for i, b in enumerate(last[1])}  # alive in ``last``: ids unique
        at = np.fromiter((where.get(id(b), -1) for b in buckets), np.intp, len(buckets))
        kept = at >= 0
        out[kept] = last[2][at[kept]]
        todo = np.flatnonzero(~kept).tolist()
    for i in todo:
        b = buckets[i]
        s = b.summaries.get(name)
        if s is None:
            continue
        held = b.bins.get(key)
        if held is None:
            held = b.bins[key] = {}
            # a segment new since the grid was built gets other edges as its reference rolls:
            # kept, every edge set of a grid's life stayed on every bucket (a memo the cache's
            # bytes did not count). Two sets a segment are in use at once (its edges, its
            # anchor's); the oldest beyond that go
            while len(b.bins) > 2 * len(b.summaries) + 2:
                del b.bins[next(iter(b.bins))]
        row = held.get(name)
        if row is None:
            row = held[name] = s.bins(ends)
        out[i] = row
    out.flags.writeable = False
    if rolling is not None:
        rolling.binned[(name, key)] = (rolling.generation, list(buckets), out)
    return out


def _moved_on(before: Sequence[object], now: Sequence[object], most: int = 2) -> int | None:
    """k (0 <= k <= ``most``) when ``now`` is ``before`` moved on: ``before`` less its first k
    items, then any new ones (compared by identity first, then ``==``: a ``Bucket`` has no
    ``__eq__``, a ``FileStat`` is a value); None otherwise (an item recomputed or changed in
    between). One comparison of the two lists in C: what a window or a file list does from
    one hourly check to the next."""
    for k in range(min(most, len(before)) + 1):
        kept = len(before) - k
        if len(now) >= kept and now[:kept] == before[k:]:
            return k
    return None


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


_I64 = np.iinfo(np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class FileTable:
    """A check's files (sorted by path) with their timestamp spans and rows as arrays, so that
    what a window or a bucket holds is one vectorised comparison, not a pass in Python: a file
    of unknown span may hold any time (``oldest`` = int64 min, ``newest`` = int64 max)."""

    files: list[FileStat]
    oldest: NDArray[np.int64]
    newest: NDArray[np.int64]
    rows: NDArray[np.int64]

    @classmethod
    def of(cls, files: list[FileStat]) -> FileTable:
        n = len(files)
        known = [f.oldest_ns is not None and f.newest_ns is not None for f in files]
        oldest = np.fromiter(
            (f.oldest_ns if k else _I64.min for f, k in zip(files, known, strict=True)),
            np.int64,
            n,
        )
        newest = np.fromiter(
            (f.newest_ns if k else _I64.max for f, k in zip(files, known, strict=True)),
            np.int64,
            n,
        )
        rows = np.fromiter((f.rows for f in files), np.int64, n)
        return cls(files, oldest, newest, rows)

    def take(self, rows: list[int]) -> FileTable:
        """The table of these rows, in this order."""
        at = np.array(rows, dtype=np.intp)
        files = self.files
        return FileTable([files[j] for j in rows], self.oldest[at], self.newest[at], self.rows[at])

    def touching(self, start_ns: int, end_ns: int) -> NDArray[np.bool_]:
        """Which files may hold rows of [start, end)."""
        return (self.oldest < end_ns) & (self.newest >= start_ns)

    def rows_in(self, w: Window) -> int:
        """The rows the footers give for the files that may hold rows of ``w`` (a bound)."""
        return int(self.rows[self.touching(w.start_ns, w.end_ns)].sum())


def _fingerprints(
    files: list[FileStat] | FileTable,
    starts: NDArray[np.int64],
    step: int,
) -> list[str]:
    """Per bucket: a digest of the (path, size, mtime, deleted rows) of every file that may
    hold its rows, ``files`` being in path order (see ``files_digest``). A check digests only the
    buckets whose files changed (``BucketPlan``)."""
    table = files if isinstance(files, FileTable) else FileTable.of(files)
    n = int(starts.size)
    if n == 0:
        return []
    first = int(starts[0])
    unknown = (table.oldest == _I64.min) | (table.newest == _I64.max)
    oldest = np.where(unknown, first, table.oldest)
    newest = np.where(unknown, first, table.newest)
    lo = np.where(unknown, 0, np.maximum(0, (oldest - first) // step))
    hi = np.where(unknown, n - 1, np.minimum(n - 1, (newest - first) // step))
    counts = np.maximum(hi - lo + 1, 0)
    which = np.repeat(np.arange(counts.size), counts)  # (file, bucket) pairs, in file order
    offset = np.arange(which.size) - np.repeat(np.cumsum(counts) - counts, counts)
    bucket = np.repeat(lo, counts) + offset
    order = np.argsort(bucket, kind="stable")  # by bucket; files stay in path order
    held = table.files
    ordered = [held[j] for j in which[order].tolist()]  # each bucket's files, bucket by bucket
    bounds = np.searchsorted(bucket[order], np.arange(n + 1)).tolist()
    return [files_digest(ordered[bounds[i] : bounds[i + 1]]) for i in range(n)]


class BucketPlan:
    """One monitor's bucket digests and buckets kept from its last check, so that planning a
    check costs the files that changed since, not the windows' length.

    ``window_file_stats`` hands out the same ``FileStat`` object for a file that did not
    change. The files added and removed since the last check are found by comparing the two
    lists: usually the last check's list less its first files and plus new ones at its end
    (``_moved_on``, as the rolled windows find their buckets), else a set difference of
    object ids (the last check's objects are held here, so their ids are not reused). A
    bucket keeps its digest, and its bucket, unless such a file may hold rows of it (a file
    of unknown span: every bucket) or it is new to the windows; the others are digested as
    ``_fingerprints`` does, from the files that may hold their rows in path order. Nothing is
    kept from a check that failed: ``commit`` is called once its buckets are all in hand."""

    # more buckets to digest than this and they are digested in one pass over the table
    _FEW = 8

    def __init__(self) -> None:
        self.table: FileTable | None = None
        self.step = 0
        self.key = ""
        self.runs: list[_Run] = []  # each window's first start, digests and buckets

    def update(self, files: list[FileStat], step: int, span: Window) -> _PlanStep:
        """This check's files (those of ``span``) against the last check's: its file table and
        which bucket starts (ns) must be digested again (None: every bucket)."""
        last = self.table
        if last is None or step != self.step:
            return _PlanStep(FileTable.of(files), step, None)
        before = last.files
        k = _moved_on(before, files)
        if k is not None:  # k files left at the list's start, new ones at its end
            added, removed = files[len(before) - k :], before[:k]
            new = FileTable.of(added)
            table = FileTable(
                files,
                np.concatenate([last.oldest[k:], new.oldest]),
                np.concatenate([last.newest[k:], new.newest]),
                np.concatenate([last.rows[k:], new.rows]),
            )
        else:
            ids = dict.fromkeys(map(id, files))
            if len(ids) != len(files):  # a file listed twice: nothing to compare it with
                return _PlanStep(FileTable.of(files), step, None)
            held = dict.fromkeys(map(id, before))
            added = [f for f in files if id(f) not in held]
            removed = [f for f in before if id(f) not in ids]
            table = FileTable.of(files)
        if not added and not removed:
            return _PlanStep(last, step, set())
        dirty: set[int] = set()
        lo_ns, hi_ns = span.start_ns, span.end_ns
        for f in (*added, *removed):
            if f.oldest_ns is None or f.newest_ns is None:
                return _PlanStep(table, step, None)  # it may hold rows of any bucket
            lo, hi = max(f.oldest_ns, lo_ns), min(f.newest_ns, hi_ns - 1)
            dirty.update(range(lo - lo % step, hi + 1, step))
        return _PlanStep(table, step, dirty)

    def fingerprints(
        self, plan: _PlanStep, key: str, starts: list[int]
    ) -> tuple[list[str], list[Bucket | None]]:
        """The digest of each bucket of ``starts`` (consecutive, ``plan.step`` apart) and the
        bucket held from the last check when it is still valid (same grid ``key``, same
        files; else None)."""
        n = len(starts)
        out = [""] * n
        have: list[Bucket | None] = [None] * n
        if plan.dirty is not None and plan.step == self.step and n:
            first = starts[0]
            for at, prints, buckets in self.runs:  # copied slice by slice, not start by start
                offset = (at - first) // plan.step
                lo, hi = max(0, offset), min(n, offset + len(prints))
                if lo < hi:
                    out[lo:hi] = prints[lo - offset : hi - offset]
                    if key == self.key:
                        have[lo:hi] = buckets[lo - offset : hi - offset]
            for b in plan.dirty:
                i = (b - first) // plan.step
                if 0 <= i < n:
                    out[i], have[i] = "", None
        todo = _indices(out, "")
        if len(todo) > self._FEW:  # a first check, a new grid: one pass over the table
            files = plan.table.files
            by_path = sorted(range(len(files)), key=lambda j: files[j].path)
            every = _fingerprints(
                plan.table.take(by_path), np.array(starts, dtype=np.int64), plan.step
            )
            for i in todo:
                out[i] = every[i]
        else:
            for i in todo:
                out[i] = _one_print(plan.table, starts[i], plan.step)
        return out, have

    def commit(self, plan: _PlanStep, key: str, runs: list[_Run]) -> None:
        """Keep this check's files, and each window's digests and buckets (its first start,
        then both in time order), for the next check."""
        self.table, self.step, self.key, self.runs = plan.table, plan.step, key, runs


_Run = tuple[int, list[str], list[Bucket]]


@dataclass(frozen=True, slots=True)
class _PlanStep:
    table: FileTable
    step: int
    dirty: set[int] | None  # bucket starts to digest again (None: every bucket)


def _indices(items: list[Any], value: object) -> list[int]:
    """Where ``value`` is in ``items`` (compared by ``==``), found by ``list.index`` in C."""
    out: list[int] = []
    i = -1
    try:
        while True:
            i = items.index(value, i + 1)
            out.append(i)
    except ValueError:
        return out


def _one_print(table: FileTable, start: int, step: int) -> str:
    """One bucket's digest as ``_fingerprints`` makes it: from the files that may hold its
    rows, in path order."""
    at = np.flatnonzero(table.touching(start, start + step)).tolist()
    return files_digest(sorted((table.files[j] for j in at), key=lambda f: f.path))


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
    invalid rows (in a bucket where their row group has no valid score) count in their own
    bucket, as ``read_summary_part`` attributes them (``unplaced_at``): in the run's first
    bucket, those it could not attribute (none: every engine gives them)."""
    by: dict[int, dict[str, Cells]] = {b: {} for b in starts}
    for (name, b), s in part.summaries.items():
        by[b][name] = Cells.of(s)
    rest = part.unplaced - sum(part.unplaced_at.values())
    return {
        b: Bucket(b, summaries, part.unplaced_at.get(b, 0) + (rest if i == 0 else 0))
        for i, (b, summaries) in enumerate(by.items())
    }
