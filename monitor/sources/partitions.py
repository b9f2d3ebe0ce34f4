"""Window selection: which files and row groups may hold a window's rows; the newest timestamp."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from monitor.epoch import from_ns as _from_ns
from monitor.errors import (
    SchemaError,
    SourceNotFoundError,
)
from monitor.memo import ByIdentity
from monitor.sources import footers
from monitor.sources.footers import (
    _FOOTERS,
    _I64_MIN,
    _Footer,
    _footer_stats,
    _opened,
    _ts_stats,
    _ts_to_ns,
    _ts_unit,
    _TsStats,
)
from monitor.sources.model import OutcomeSpec, ScoreSpec, Window
from monitor.sources.paths import (
    _File,
    _Interval,
    _open_source,
    _Source,
    _walk,
)
from monitor.sources.translate import _translate


def _newest(source: _Source, column: str, unit: str | None) -> tuple[int | None, int]:
    """Newest timestamp (ns) in the source and the number of files seen.

    Partitions are visited newest first; one whose period ends at or before the newest timestamp
    already found is not listed, so only the newest partition's footers are read.
    """
    if source.is_file:
        f = next(_walk(source, lambda _i: True))
        return _ts_stats(source, f, column, unit).newest, 1
    best: list[int] = []  # the newest timestamp found so far, read by ``keep`` as the walk goes
    seen = 0

    def keep(interval: _Interval) -> bool:
        # a partition that ends at or before the newest timestamp already found is not listed
        return not best or interval is None or interval[1] > best[0]

    for f in _walk(source, keep, newest_first=True):
        seen += 1
        newest = _ts_stats(source, f, column, unit).newest
        if f.deleted is not None and newest is not None and (not best or newest > best[0]):
            newest = _live_newest(source, f, column, unit)  # the newest row may be deleted
        if newest is not None and (not best or newest > best[0]):
            best[:] = [newest]
    return (best[0] if best else None), seen


def _live_newest(source: _Source, f: _File, column: str, unit: str | None) -> int | None:
    """The newest timestamp of the rows of ``f`` that its table has not deleted."""
    footer = _FOOTERS.get(source, f)
    native = _ts_unit(footer, f, column, unit)
    with _opened(source, f, footer) as pf:
        try:
            table = pf.read(columns=[column])
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise _translate(exc, f.path, f"reading column {column!r}") from exc
    ns = _ts_to_ns(table.column(column), native)
    keep = ns != _I64_MIN
    assert f.deleted is not None
    keep[f.deleted[f.deleted < ns.size]] = False
    return int(ns[keep].max()) if keep.any() else None


def _overlaps(interval: _Interval, window: Window) -> bool:
    return interval is None or (interval[0] < window.end_ns and interval[1] > window.start_ns)


@dataclass(frozen=True, slots=True)
class _Plan:
    file: _File
    footer: _Footer
    unit: str
    groups: tuple[int, ...]  # row groups that may hold rows of the window
    starts: tuple[int, ...]  # the file's row position of each one's first row
    inside: tuple[bool, ...]  # the whole row group is in the window, no null timestamps
    capacity: int
    stats: _TsStats  # the file's timestamp statistics


def _plan(source: _Source, window: Window, column: str, unit: str | None) -> list[_Plan]:
    plans = []
    for f in _walk(
        source,
        lambda interval: _overlaps(interval, window),
        within=(window.start_ns, window.end_ns),
    ):
        plan = _plan_file(source, f, window, column, unit)
        if plan is not None:
            plans.append(plan)
    return plans


# A file's plan when the window holds all of it, by the walked ``_File`` object (the same
# object while its watched directory is unchanged): a check plans every outcome file of its
# windows again, and all but the newest lie wholly inside them
_WHOLE_PLANS: ByIdentity[_Plan] = ByIdentity(4096)


def _plan_file(
    source: _Source, f: _File, window: Window, column: str, unit: str | None
) -> _Plan | None:
    """The row groups of ``f`` that may hold rows of ``window`` (None: none may)."""
    start, end = window.start_ns, window.end_ns
    tag = (column, unit, footers.CLEARED)
    held = _WHOLE_PLANS.get(f, tag)
    if held is not None:
        lo, hi = held.stats.oldest, held.stats.newest  # known: it was planned whole
        if lo is not None and hi is not None and lo >= start and hi < end:
            return held
    footer, stats = _footer_stats(source, f, column, unit)
    if f.interval is not None:
        _check_partition(f, stats, column)
    if stats.clean and stats.oldest is not None and stats.newest is not None:
        if stats.newest < start or stats.oldest >= end:
            return None  # no row group in the window
        if stats.oldest >= start and stats.newest < end:  # every row group, whole
            n = len(stats.rows)
            plan = _Plan(
                f,
                footer,
                stats.unit,
                tuple(range(n)),
                stats.starts,
                (True,) * n,
                sum(stats.rows),
                stats,
            )
            _WHOLE_PLANS.put(f, tag, plan)
            return plan
    groups, starts, inside, capacity, first = [], [], [], 0, 0
    for g, rows in enumerate(stats.rows):
        lo, hi, nulls = stats.lo[g], stats.hi[g], stats.nulls[g]
        first += rows
        if rows == 0 or (lo is not None and hi is not None and (hi < start or lo >= end)):
            continue
        groups.append(g)
        starts.append(first - rows)
        inside.append(lo is not None and hi is not None and lo >= start and hi < end and nulls == 0)
        capacity += rows
    if not groups:
        return None
    return _Plan(
        f, footer, stats.unit, tuple(groups), tuple(starts), tuple(inside), capacity, stats
    )


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


def latest_timestamp(spec: ScoreSpec | OutcomeSpec) -> datetime | None:
    """Newest timestamp in the source, from footer statistics (cached); ``None`` if it holds none.

    Only the newest hive partition's files are opened. A glob matching no file raises
    ``SourceNotFoundError``; an existing empty directory gives ``None``.
    """
    source = _open_source(spec)
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
