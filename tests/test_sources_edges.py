"""The edges of a window, a partition and a limit, each where a one-character slip (< for <=,
floor for ceil) once went unseen by the suite (a mutation review): the row at exactly a window's
start is in, the row at exactly its end is out, a row at a partition's end is refused, a share
exactly at ``max_invalid_share`` passes, and coverage counts the reference's keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monitor.errors import BadValuesError, MonitorError
from monitor.sources import (
    OutcomeSpec,
    Window,
    clear_cache,
    latest_timestamp,
    pair_outcomes,
    read_outcomes,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)
H, DAY = timedelta(hours=1), timedelta(days=1)


def _outcomes(
    path: Path,
    times: list[object],
    queries: list[str | None],
    values: list[float],
    *,
    kind: pa.DataType | None = None,
    row_group_size: int | None = None,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "timestamp": pa.array(times, kind or pa.timestamp("us", tz="UTC")),
            "query_id": pa.array(queries, pa.string()),
            "outcome": pa.array(values, pa.float64()),
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size)
    clear_cache()


def test_the_row_at_a_windows_start_is_read_from_an_earlier_row_group(tmp_path: Path) -> None:
    """Row groups [T0 - 1h, T0] and [T0 + 1h, T0 + 2h]: the first one's newest row is exactly
    the window's start, so the group overlaps [T0, T0 + 1d) and must be read."""
    _outcomes(
        tmp_path / "a.parquet",
        [T0 - H, T0, T0 + H, T0 + 2 * H],
        ["a", "b", "c", "d"],
        [1.0, 2.0, 3.0, 4.0],
        row_group_size=2,
    )
    w = read_outcomes(OutcomeSpec(str(tmp_path)), Window(T0, T0 + DAY))
    assert sorted(w.query_ids.tolist()) == ["b", "c", "d"]


def test_the_row_at_a_windows_end_is_not_read(tmp_path: Path) -> None:
    """Half-open: a file holding T0 + 23h and T0 + 1d gives [T0, T0 + 1d) the first row only."""
    _outcomes(tmp_path / "a.parquet", [T0 + 23 * H, T0 + DAY], ["a", "b"], [1.0, 2.0])
    w = read_outcomes(OutcomeSpec(str(tmp_path)), Window(T0, T0 + DAY))
    assert (w.rows, w.query_ids.tolist()) == (1, ["a"])


def test_whole_second_stamps_against_window_edges_between_seconds(tmp_path: Path) -> None:
    """Integer epoch seconds (``timestamp_unit = "s"``) at 0, 5, 10 and 20 s, window
    [0.5 s, 10.5 s): the rows at 5 and 10 s. The edges are rounded up to whole seconds (a row
    at t s is in when t >= 0.5, i.e. t >= 1, and when t < 10.5, i.e. t < 11); rounding down let
    the row at 0 s in and the one at 10 s out."""
    s0 = int(T0.timestamp())
    _outcomes(
        tmp_path / "a.parquet",
        [s0, s0 + 5, s0 + 10, s0 + 20],
        ["a", "b", "c", "d"],
        [1.0] * 4,
        kind=pa.int64(),
    )
    spec = OutcomeSpec(str(tmp_path), timestamp_unit="s")
    half = timedelta(milliseconds=500)
    w = read_outcomes(spec, Window(T0 + half, T0 + timedelta(seconds=10) + half))
    assert sorted(w.query_ids.tolist()) == ["b", "c"]


def test_a_row_at_its_date_partitions_end_is_refused(tmp_path: Path) -> None:
    """``date=2024-01-01`` covers [01-01, 01-02): a row at 01-02T00:00 lies outside it, and
    pruning by the name would put it in the wrong windows."""
    _outcomes(
        tmp_path / "date=2024-01-01" / "a.parquet", [T0 + 10 * H, T0 + DAY], ["a", "b"], [1.0, 2.0]
    )
    with pytest.raises(MonitorError, match="outside its partition"):
        read_outcomes(OutcomeSpec(str(tmp_path)), Window(T0, T0 + 2 * DAY))


def test_the_newest_row_is_found_in_a_partition_beside_a_root_file(tmp_path: Path) -> None:
    """A file at the root (newest 01-02T20:00, no partition) and ``date=2024-01-02`` holding
    21:00: the newest is 21:00. A partition is skipped only when it ends at or before the
    newest row found; one that merely starts before it may hold a newer one."""
    _outcomes(tmp_path / "legacy.parquet", [T0 + DAY + 20 * H], ["a"], [1.0])
    _outcomes(tmp_path / "date=2024-01-02" / "b.parquet", [T0 + DAY + 21 * H], ["b"], [1.0])
    assert latest_timestamp(OutcomeSpec(str(tmp_path))) == T0 + DAY + 21 * H


def test_an_invalid_share_exactly_at_the_limit_passes(tmp_path: Path) -> None:
    """1 null query id of 4 rows with ``max_invalid_share = 0.25``: the limit is a share that
    may be dropped (> refuses), so the window reads, with the row dropped and counted."""
    _outcomes(tmp_path / "a.parquet", [T0 + H] * 4, ["a", "b", "c", None], [1.0, 2.0, 3.0, 4.0])
    w = read_outcomes(OutcomeSpec(str(tmp_path), max_invalid_share=0.25), Window(T0, T0 + DAY))
    assert (w.rows, w.dropped_null_query) == (4, 1)
    with pytest.raises(BadValuesError):
        read_outcomes(OutcomeSpec(str(tmp_path), max_invalid_share=0.24), Window(T0, T0 + DAY))


def test_nan_and_infinite_outcomes_are_counted_apart(tmp_path: Path) -> None:
    _outcomes(
        tmp_path / "a.parquet",
        [T0 + H] * 5,
        ["a", "b", "c", "d", "e"],
        [1.0, float("nan"), float("inf"), float("-inf"), 4.0],
    )
    w = read_outcomes(OutcomeSpec(str(tmp_path), max_invalid_share=0.6), Window(T0, T0 + DAY))
    assert (w.dropped_nan, w.dropped_inf) == (1, 2)
    assert sorted(w.query_ids.tolist()) == ["a", "e"]


def test_coverage_is_the_share_of_reference_queries_paired(tmp_path: Path) -> None:
    """Reference queries a, b, c; the current window holds a only: coverage 1/3 (the share of
    the golden set the look could pair), never 1 (the current window's own keys)."""
    _outcomes(tmp_path / "r.parquet", [T0 + H] * 3, ["a", "b", "c"], [1.0, 2.0, 3.0])
    _outcomes(tmp_path / "c.parquet", [T0 + DAY + H], ["a"], [1.0])
    spec = OutcomeSpec(str(tmp_path))
    paired = pair_outcomes(
        read_outcomes(spec, Window(T0, T0 + DAY)),
        read_outcomes(spec, Window(T0 + DAY, T0 + 2 * DAY)),
    )
    assert paired.coverage == pytest.approx(1 / 3)


def test_the_read_caches_hold_no_more_memory_than_their_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outcome groups kept for the next check, with their query ids decoded to Python strings
    (several times the table's bytes), and the windows read from them: what the two caches
    keep, measured (tracemalloc for the decoded values and windows, the tables' bytes for
    Arrow's), stays within their bounds and is what they charge for it."""
    import gc
    import tracemalloc

    from monitor.sources import footers, outcomes

    groups, windows = footers._GROUPS, outcomes.KEPT
    monkeypatch.setattr(groups, "max_bytes", 24 << 20)
    monkeypatch.setattr(windows, "max_bytes", 24 << 20)
    n = 10_000
    for k in range(20):
        _outcomes(
            tmp_path / f"run-{k}.parquet",
            [T0 + k * H] * n,
            [f"query-{k}-{i:06d}-with-a-longer-identifier" for i in range(n)],
            [0.5] * n,
        )
    clear_cache()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for hours in (2, 20, 5):  # three windows, the largest too large to keep
            w = read_outcomes(OutcomeSpec(str(tmp_path)), Window(T0, T0 + hours * H))
            assert w.query_ids.size == hours * n
            del w
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    tables = sum(int(table.nbytes) for table, _, _ in groups._entries.values())
    assert groups._entries, "no row group was kept"
    assert len(windows._held) == 2
    assert groups.held_bytes <= groups.max_bytes
    assert windows.held_bytes <= windows.max_bytes
    assert kept + tables <= groups.max_bytes + windows.max_bytes, (kept, tables)
    charged = groups.held_bytes + windows.held_bytes
    assert kept + tables <= 1.25 * charged, (kept, tables, charged)
