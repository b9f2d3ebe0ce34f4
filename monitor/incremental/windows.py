"""One check's windows as buckets: the read result, the rolled totals, bucket keys and runs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from monitor.incremental.store import Bucket, FrozenGrid
from monitor.sources import (
    FileStat,
    SummaryPart,
    Window,
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
        self.holding: dict[str, int] = {}  # segment -> member buckets that hold it
        self.unplaced = 0  # invalid rows in no summary (``Bucket.unplaced``), summed

    def _apply(self, bucket: Bucket, sign: int) -> None:
        self.unplaced += sign * bucket.unplaced
        for name, c in bucket.summaries.items():
            counts = self.counts.get(name)
            if counts is None:
                counts = self.counts[name] = np.zeros(self.grid.n_cells, dtype=np.int64)
                self.scalars[name] = np.zeros(3, dtype=np.int64)
            counts[c.index] += sign * c.count
            self.scalars[name] += sign * np.array([c.rows, c.invalid, c.zeros], dtype=np.int64)
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
        want = {b.start_ns: b for b in buckets}
        for start, old in list(self.members.items()):
            if want.get(start) is not old:
                self._apply(old, -1)
                del self.members[start]
        for start, b in want.items():
            if start not in self.members:
                self._apply(b, +1)
                self.members[start] = b
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


def _in(f: FileStat, w: Window) -> bool:
    """Whether a file may hold rows of ``w`` (unknown spans: yes)."""
    return _overlaps(f, w.start_ns, w.end_ns - w.start_ns)


def _overlaps(f: FileStat, start_ns: int, step: int) -> bool:
    """Whether a file may hold rows of [start, start + step) (unknown spans: yes)."""
    if f.oldest_ns is None or f.newest_ns is None:
        return True
    return f.oldest_ns < start_ns + step and f.newest_ns >= start_ns


def _fingerprints(files: list[FileStat], starts: NDArray[np.int64], step: int) -> list[str]:
    """Per bucket: a digest of the (path, size, mtime, deleted rows) of every file that may
    hold its rows."""
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
            # a file without deleted rows digests as it did before ``deletes`` existed
            tail = f"\0{f.deletes}" if f.deletes else ""
            h.update(f"{f.path}\0{f.size}\0{f.mtime_ns}{tail}\n".encode())
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
