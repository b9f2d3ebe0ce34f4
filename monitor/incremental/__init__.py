"""Checks through mergeable summaries: a frozen grid, cached bucket summaries, an engine.

A monitor with an engine (``[engine]`` or ``monitors[i].engine``; docs/engines.md) does not read
its windows into memory. Each check needs, per segment, the summary (``monitor.stats.summary``)
of every ``summary.bucket`` of its reference and current windows on one frozen grid::

    grid     FrozenGrid: the grid points (union over segments) and each segment's PSI edges,
             built from a sample of the reference window (every k-th row group, about
             ``summary.grid_sample_rows`` rows) and kept until it is ``summary.regrid`` old
             (default: the reference window's length), the reference's footer row count
             has changed twofold since, a fixed reference's bounds change, or the scores'
             settings change. Stored as ``<state_dir>/summaries/<name>/grid.npz`` (a replay
             keeps its grids in memory).
    buckets  one summary per (segment, bucket), keyed by the grid and by the bucket's files
             (path, size, mtime, ctime of every file whose row-group timestamps overlap
             it): a late or rewritten file changes the key of its buckets only. Cached in
             memory and as ``<state_dir>/summaries/<name>/<grid>/<bucket start ns>.bucket``
             (raw cells behind a JSON header, ``Bucket.to_bytes``; atomic writes;
             a corrupt entry is logged and recomputed; the oldest buckets are evicted beyond
             ``summary.cache_max_bytes``), as their non-zero cells. An hourly check then reads
             only the new hour, and each window's totals are rolled across checks (the
             buckets that left subtracted, the new ones added).
    engine   computes the buckets not cached: ``local``, ``dask`` or ``spark`` (``auto``: the
             configured cluster engine when the rows to read, from the footers, reach
             ``auto_rows``); an unreachable engine is an error, never a fall back.

Each invalid (null, NaN, infinite) score counts in its own bucket, by its timestamp
(``monitor.sources.read_summaries``), so a window's invalid share is the whole-window reader's.
"""

from monitor.incremental.checks import SummaryCheckError, SummaryChecks
from monitor.incremental.store import Bucket, BucketCache, FrozenGrid
from monitor.incremental.windows import SummaryRead

__all__ = [
    "Bucket",
    "BucketCache",
    "FrozenGrid",
    "SummaryCheckError",
    "SummaryChecks",
    "SummaryRead",
]
