"""Parquet sources: real files written in ``tmp_path``; every bad input gets a named error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor import sources
from monitor.epoch import to_ns
from monitor.errors import (
    BadValuesError,
    CorruptFileError,
    SchemaError,
    SourceNotFoundError,
    SourcePermissionError,
)
from monitor.sources import (
    OutcomeSpec,
    OutcomeWindow,
    ScoreSpec,
    Window,
    footers,
    latest_timestamp,
    pair_outcomes,
    read_outcomes,
    read_run_times,
    read_scores,
    window_file_stats,
    write_parquet,
)
from tests.outcome_windows import assert_same_window

T0 = datetime(2026, 11, 30, tzinfo=UTC)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
SEC = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    sources.clear_cache()


def _ts(*moments: datetime) -> np.ndarray:
    return np.array([m.replace(tzinfo=None) for m in moments], dtype="datetime64[us]")


def _scores(path: Path, moments: list[datetime], values: list[float], **extra: object) -> None:
    write_parquet(path, {"timestamp": _ts(*moments), "score": np.array(values), **extra})  # type: ignore[dict-item]


def _garble(path: Path, *, keep_stat: bool = False) -> None:
    """Overwrite a file with bytes that are not parquet (same size and mtime when asked)."""
    stat = path.stat()
    path.write_bytes(b"\x00" * stat.st_size)
    if keep_stat:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


# --- Window and specs -----------------------------------------------------------------------------


def test_window_iv() -> None:
    with pytest.raises(ValueError, match=r"`start` must be timezone-aware .* got naive 2026-11-30"):
        Window(datetime(2026, 11, 30), T0 + DAY)
    with pytest.raises(ValueError, match=r"`end` must be a datetime; got '2026'"):
        Window(T0, "2026")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`start` must be before `end`; got \[2026-11-30"):
        Window(T0, T0)
    berlin = timezone(timedelta(hours=1))
    w = Window(datetime(2026, 11, 30, 1, tzinfo=berlin), T0 + HOUR)
    assert w.start == T0
    assert w.start.tzinfo is UTC
    assert w.end_ns - w.start_ns == 3_600 * 10**9


def test_spec_iv() -> None:
    with pytest.raises(ValueError, match=r"`timestamp_unit` must be one of .* got 'h'"):
        ScoreSpec("x", timestamp_unit="h")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"`max_invalid_share` must be a number in \[0, 1\]; got 2"
    ):
        OutcomeSpec("x", max_invalid_share=2)
    with pytest.raises(ValueError, match=r"`path` must be a non-empty string; got ''"):
        ScoreSpec("")
    with pytest.raises(ValueError, match=r"`query_column` must be a non-empty string; got ''"):
        OutcomeSpec("x", query_column="")


# --- Layouts --------------------------------------------------------------------------------------


def test_single_file_half_open_window(tmp_path: Path) -> None:
    f = tmp_path / "s.parquet"
    w = Window(T0, T0 + DAY)
    moments = [T0 - timedelta(microseconds=1), T0, T0 + HOUR, T0 + DAY - timedelta(microseconds=1)]
    moments.append(T0 + DAY)  # exactly at `end`: excluded
    _scores(f, moments, [0.1, 0.2, 0.3, 0.4, 0.5])
    got = read_scores(ScoreSpec(str(f)), w, with_timestamps=True)
    np.testing.assert_array_equal(got.values, [0.2, 0.3, 0.4])
    assert got.values.dtype == np.float64
    assert got.rows == 3
    assert (got.dropped_nan, got.dropped_inf, got.dropped_null) == (0, 0, 0)
    assert got.newest_timestamp == T0 + DAY
    assert got.files_read == 1
    assert got.timestamps is not None
    expected = [to_ns(m) for m in moments[1:4]]
    np.testing.assert_array_equal(got.timestamps, expected)
    assert latest_timestamp(ScoreSpec(str(f))) == T0 + DAY


def test_many_row_groups_match_a_plain_mask(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 5_000
    offsets = np.sort(rng.integers(0, 3 * 86_400 * 10**6, n))
    stamps = np.datetime64(T0.replace(tzinfo=None), "us") + offsets.astype("timedelta64[us]")
    values = rng.random(n)
    write_parquet(
        tmp_path / "a.parquet", {"timestamp": stamps, "score": values}, row_group_size=300
    )
    w = Window(T0 + 13 * HOUR, T0 + 2 * DAY + 5 * HOUR)
    got = read_scores(ScoreSpec(str(tmp_path)), w)
    lo, hi = np.datetime64(w.start.replace(tzinfo=None)), np.datetime64(w.end.replace(tzinfo=None))
    np.testing.assert_array_equal(got.values, values[(stamps >= lo) & (stamps < hi)])


def test_cuts_leave_the_timestamps_of_row_groups_no_cut_splits_undecoded(tmp_path: Path) -> None:
    """With ``cuts``, a row group inside the window that no cut splits carries its newest
    timestamp on every row and is listed in ``coarse_spans``; t >= c and the newest timestamp
    are the decoded read's for every cut. A group a cut splits, one straddling the window's
    edge and one with a NaN score are decoded."""
    rng = np.random.default_rng(4)
    n = 3_000
    offsets = np.sort(rng.integers(0, 2 * 86_400 * 10**6, n))
    stamps = np.datetime64(T0.replace(tzinfo=None), "us") + offsets.astype("timedelta64[us]")
    values = rng.random(n)
    values[2_500] = np.nan  # its group is decoded: the kept rows' own timestamps
    write_parquet(
        tmp_path / "a.parquet", {"timestamp": stamps, "score": values}, row_group_size=250
    )
    spec = ScoreSpec(str(tmp_path), max_invalid_share=0.01)
    w = Window(T0 + 3 * HOUR, T0 + 2 * DAY)  # the first group straddles its start
    full = read_scores(spec, w, with_timestamps=True)
    split = int(offsets[1_100]) * 1_000 + to_ns(T0)  # inside the fifth group
    cuts = [to_ns(w.start), split, to_ns(T0 + DAY + 7 * HOUR)]
    got = read_scores(spec, w, with_timestamps=True, cuts=cuts)
    assert full.timestamps is not None
    assert got.timestamps is not None
    assert full.coarse_spans.shape == (0, 2)
    np.testing.assert_array_equal(got.values, full.values)
    assert (got.rows, got.dropped_nan) == (full.rows, full.dropped_nan) == (got.rows, 1)
    for c in cuts:
        np.testing.assert_array_equal(got.timestamps >= c, full.timestamps >= c)
    assert got.timestamps.max() == full.timestamps.max()
    spans = got.coarse_spans
    assert 0 < len(spans) <= 12 - 4  # 12 groups: not the straddling, split or NaN ones
    for lo, hi in spans:
        assert not any(lo < c <= hi for c in cuts)
        rows = (full.timestamps >= lo) & (full.timestamps <= hi)
        assert np.all(got.timestamps[rows] == hi)  # the group's newest on each of its rows
    decoded = np.ones(full.timestamps.size, dtype=bool)
    for lo, hi in spans:
        decoded &= ~((full.timestamps >= lo) & (full.timestamps <= hi))
    np.testing.assert_array_equal(got.timestamps[decoded], full.timestamps[decoded])
    assert np.any(decoded & (full.timestamps < split))  # the split group, both sides
    assert np.any(decoded & (full.timestamps >= split))


def test_directory_is_recursive_and_skips_hidden_and_underscore(tmp_path: Path) -> None:
    _scores(tmp_path / "a" / "1.parquet", [T0], [1.0])
    _scores(tmp_path / "a" / "b" / "2.parquet", [T0 + HOUR], [2.0])
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "a" / ".1.parquet.crc").write_bytes(b"junk")
    (tmp_path / "_temporary").mkdir()
    (tmp_path / "_temporary" / "part.parquet").write_bytes(b"half-written")
    (tmp_path / ".staging").mkdir()
    (tmp_path / ".staging" / "part.parquet").write_bytes(b"junk")
    got = read_scores(ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY))
    np.testing.assert_array_equal(got.values, [1.0, 2.0])
    assert got.files_read == 2


def test_glob_and_file_uri(tmp_path: Path) -> None:
    _scores(tmp_path / "scores-1.parquet", [T0], [1.0])
    _scores(tmp_path / "scores-2.parquet", [T0 + HOUR], [2.0])
    _scores(tmp_path / "other.parquet", [T0], [9.0])
    w = Window(T0, T0 + DAY)
    got = read_scores(ScoreSpec(str(tmp_path / "scores-*.parquet")), w)
    np.testing.assert_array_equal(got.values, [1.0, 2.0])
    got = read_scores(ScoreSpec(f"file://{tmp_path}/scores-*.parquet"), w)
    np.testing.assert_array_equal(got.values, [1.0, 2.0])
    got = read_scores(ScoreSpec(f"file://{tmp_path}"), w)
    np.testing.assert_array_equal(np.sort(got.values), [1.0, 2.0, 9.0])


def _hive(root: Path, days: int) -> list[Path]:
    files = []
    for d in range(days):
        for h in (0, 12):
            start = T0 + d * DAY + h * HOUR
            f = root / f"date={(T0 + d * DAY):%Y-%m-%d}" / f"hour={h:02d}" / "part-0.parquet"
            _scores(f, [start, start + 30 * timedelta(minutes=1)], [d + h / 100, d + h / 100])
            files.append(f)
    return files


def test_hive_partitions_outside_the_window_are_never_opened(tmp_path: Path) -> None:
    files = _hive(tmp_path, 4)  # 2026-11-30 .. 2026-12-03, hours 00 and 12
    for f in files[:4]:  # the first two days: garbage if anything opened them
        _garble(f)
    w = Window(T0 + 2 * DAY, T0 + 3 * DAY)
    got = read_scores(ScoreSpec(str(tmp_path)), w)
    np.testing.assert_array_equal(got.values, [2.0, 2.0, 2.12, 2.12])
    assert got.files_read == 2
    assert got.newest_timestamp == T0 + 3 * DAY + 12 * HOUR + 30 * timedelta(minutes=1)
    assert latest_timestamp(ScoreSpec(str(tmp_path))) == got.newest_timestamp
    # Only the window's two files and the newest partition's file had their footers read.
    assert footers._FOOTERS.opened == 3
    # The garbage is real: a window over those days names the file.
    with pytest.raises(CorruptFileError, match=r"date=2026-11-30/hour=00/part-0.parquet"):
        read_scores(ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY))


def test_hive_segment_partition_and_year_month_day(tmp_path: Path) -> None:
    for locale, v in (("en", 1.0), ("de", 2.0)):
        f = tmp_path / "year=2026" / "month=11" / "day=30" / f"locale={locale}" / "p.parquet"
        _scores(f, [T0 + HOUR], [v])
    _scores(
        tmp_path / "year=2026" / "month=12" / "day=01" / "locale=en" / "p.parquet",
        [T0 + DAY],
        [3.0],
    )
    spec = ScoreSpec(str(tmp_path), segment_column="locale")
    got = read_scores(spec, Window(T0, T0 + DAY))
    assert got.segment_names == ("de", "en")
    assert {k: v.tolist() for k, v in got.by_segment().items()} == {"de": [2.0], "en": [1.0]}
    assert got.files_read == 2


def test_a_null_segment_partition_is_null_segments_not_a_segment(tmp_path: Path) -> None:
    """Hive and Spark write a null partition key as ``__HIVE_DEFAULT_PARTITION__``: its rows
    are null segments (invalid rows, as nulls in a segment column are), never a segment of
    that name (which once hid them from max_invalid_share)."""
    for locale in ("en", "__HIVE_DEFAULT_PARTITION__"):
        _scores(tmp_path / f"locale={locale}" / "p.parquet", [T0 + HOUR] * 2, [1.0, 2.0])
    w = Window(T0, T0 + DAY)
    # named as what it may be: a null score, or a null segment (the score column had none)
    with pytest.raises(
        BadValuesError,
        match=r"2 of 4 score rows .* are invalid \(null value or null segment \('locale'\): 2",
    ):
        read_scores(ScoreSpec(str(tmp_path), segment_column="locale"), w)
    got = read_scores(ScoreSpec(str(tmp_path), segment_column="locale", max_invalid_share=0.5), w)
    assert got.segment_names == ("en",)


def test_a_sample_of_row_groups_reads_every_kth_group_of_files_with_several(
    tmp_path: Path,
) -> None:
    """``sample_rows`` keeps every k-th row group in plan order; a file with a dropped group
    raised ValueError (the groups' first rows were left whole), so a grid sample of any
    reference of daily files failed at every check."""
    values = np.arange(2000, dtype=np.float64)
    for f in range(2):
        rows = slice(1000 * f, 1000 * (f + 1))
        table = pa.table(
            {
                "timestamp": pa.array(_ts(T0) + np.arange(1000 * f, 1000 * (f + 1))),
                "score": values[rows],
            }
        )
        pq.write_table(table, tmp_path / f"{f}.parquet", row_group_size=100)
    got = read_scores(ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY), sample_rows=500)
    # step ceil(2000 / 500) = 4 over the 20 groups in plan order: groups 0, 4, 8, 12, 16
    kept = np.concatenate([values[100 * g : 100 * g + 100] for g in (0, 4, 8, 12, 16)])
    np.testing.assert_array_equal(np.sort(got.values), kept)


def test_misfiled_partition_is_an_error_unless_pruning_is_off(tmp_path: Path) -> None:
    _scores(tmp_path / "date=2026-11-30" / "p.parquet", [T0 + HOUR, T0 + DAY + HOUR], [1.0, 2.0])
    w = Window(T0, T0 + 2 * DAY)
    with pytest.raises(SchemaError, match=r"outside its partition date=2026-11-30") as info:
        read_scores(ScoreSpec(str(tmp_path)), w)
    assert "prune_partitions" in str(info.value)
    got = read_scores(ScoreSpec(str(tmp_path), prune_partitions=False), w)
    np.testing.assert_array_equal(got.values, [1.0, 2.0])


@pytest.mark.parametrize(
    ("layout", "moment", "outcome"),
    [
        # a level that is no period leaves the coarser one: the row outside it is an error in
        # every window that reads the file, never a row in no window
        ("date=2026-11-30/hour=24", T0 + DAY + HOUR / 2, "error"),
        ("year=2026/month=13", T0 + 40 * DAY, "error"),
        ("date=2026-11-30/hour=7", T0 + 7 * HOUR, "read"),
        # a second date below the first (an ingest date) says nothing of the rows' times
        ("date=2026-11-30/ingest=2026-12-02", T0 + 10 * HOUR, "read"),
        # ... below integer year=/month=/day= too: it moved the files to Dec 2, 10:00, where
        # no window read them (pruned as Dec 2 under Nov 30, and as Nov 30 under Dec 2)
        ("year=2026/month=11/day=30/hour=10/ingest_date=2026-12-02", T0 + 10 * HOUR, "read"),
    ],
)
def test_a_partition_level_that_is_no_period_checks_against_the_coarser_one(
    tmp_path: Path, layout: str, moment: datetime, outcome: str
) -> None:
    _scores(tmp_path / layout / "p.parquet", [moment], [1.0])
    spec = ScoreSpec(str(tmp_path))
    for w in (Window(T0, T0 + DAY), Window(T0 - 300 * DAY, T0 + 300 * DAY)):
        if outcome == "error":
            with pytest.raises(SchemaError, match=r"p.parquet: column 'timestamp': .* outside"):
                read_scores(spec, w)
        else:
            assert read_scores(spec, w).values.tolist() == [1.0]


def test_footer_cache_means_out_of_window_files_are_not_reopened(tmp_path: Path) -> None:
    for d in range(3):
        _scores(tmp_path / f"scores-{d}.parquet", [T0 + d * DAY], [float(d)])
    spec = ScoreSpec(str(tmp_path))
    assert read_scores(spec, Window(T0 + 2 * DAY, T0 + 3 * DAY)).values.tolist() == [2.0]
    assert read_scores(spec, Window(T0 + 2 * DAY, T0 + 3 * DAY)).values.tolist() == [2.0]
    assert footers._FOOTERS.opened == 3  # each footer read once
    # rewritten in place with the same size and its mtime set back: the ctime moved, so the
    # next read sees it (it once kept the old footer until clear_cache or a restart)
    _garble(tmp_path / "scores-0.parquet", keep_stat=True)
    with pytest.raises(CorruptFileError, match=r"scores-0.parquet: cannot be read as parquet"):
        read_scores(spec, Window(T0 + 2 * DAY, T0 + 3 * DAY))


def test_a_single_file_source_sees_a_rewrite_whose_mtime_was_set_back(tmp_path: Path) -> None:
    # a source that names one file keys its caches on the same identity as a walked file
    # (path, size, mtime, ctime): it once left the ctime out, kept the old footer, and
    # counted the new rows in the old rows' window
    path = tmp_path / "scores.parquet"

    def write(day: int) -> None:
        when = np.datetime64(T0.replace(tzinfo=None), "us") + np.arange(50).astype("timedelta64[m]")
        table = pa.table({"timestamp": when + np.timedelta64(day, "D"), "score": np.ones(50)})
        pq.write_table(table, path, compression="none", use_dictionary=False)

    write(0)
    spec, first, second = ScoreSpec(str(path)), Window(T0, T0 + DAY), Window(T0 + DAY, T0 + 2 * DAY)
    assert (read_scores(spec, first).rows, read_scores(spec, second).rows) == (50, 0)
    before = path.stat()
    write(1)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert (read_scores(spec, first).rows, read_scores(spec, second).rows) == (0, 50)


# --- Timestamps and types -------------------------------------------------------------------------


def test_mixed_units_timezones_and_float_widths(tmp_path: Path) -> None:
    moment = T0 + HOUR
    tables = {
        "s.parquet": pa.table(
            {
                "timestamp": pa.array([int(moment.timestamp())], pa.timestamp("s")),
                "score": pa.array([1.0], pa.float32()),
            }
        ),
        "ms_berlin.parquet": pa.table(
            {
                "timestamp": pa.array(
                    [int(moment.timestamp()) * 1000], pa.timestamp("ms", "Europe/Berlin")
                ),
                "score": pa.array([2.0], pa.float64()),
            }
        ),
        "ns_naive.parquet": pa.table(
            {
                "timestamp": pa.array([int(moment.timestamp()) * 10**9], pa.timestamp("ns")),
                "score": pa.array([3.0], pa.float16()),
            }
        ),
        "int96.parquet": pa.table(
            {
                "timestamp": pa.array([int(moment.timestamp()) * 10**6], pa.timestamp("us")),
                "score": pa.array([4], pa.int64()),
            }
        ),
    }
    for name, table in tables.items():
        pq.write_table(
            table, tmp_path / name, use_deprecated_int96_timestamps=name.startswith("int96")
        )
    got = read_scores(ScoreSpec(str(tmp_path)), Window(moment, moment + HOUR), with_timestamps=True)
    assert sorted(got.values.tolist()) == [1.0, 2.0, 3.0, 4.0]
    assert got.timestamps is not None
    assert set(got.timestamps.tolist()) == {to_ns(moment)}
    assert got.newest_timestamp == moment
    empty = read_scores(
        ScoreSpec(str(tmp_path)), Window(moment + timedelta(seconds=1), moment + HOUR)
    )
    assert empty.rows == 0


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_integer_epoch_columns(tmp_path: Path, unit: str) -> None:
    per_s = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    start = int(T0.timestamp()) * per_s
    write_parquet(
        tmp_path / "e.parquet",
        {"ts": np.array([start - 1, start, start + per_s], dtype=np.int64), "score": np.ones(3)},
    )
    spec = ScoreSpec(str(tmp_path), timestamp_column="ts", timestamp_unit=unit)  # type: ignore[arg-type]
    got = read_scores(spec, Window(T0, T0 + timedelta(seconds=1)))
    assert got.rows == 1
    with pytest.raises(SchemaError, match=r"'ts': is an integer column .* no `timestamp_unit`"):
        read_scores(ScoreSpec(str(tmp_path), timestamp_column="ts"), Window(T0, T0 + DAY))


@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize(
    ("dtype", "unit", "sentinel"),
    [
        (pa.uint64(), "ns", 2**64 - 1),  # UINT64_MAX: its raw statistic read signed was -1
        (pa.int64(), "s", 2**63 - 1),  # INT64_MAX seconds: times 1e9 wrapped to 1969
        (pa.int64(), "s", 10**12),  # year 33658: wrapped to 2092
        (pa.int64(), "us", -(2**62)),  # long before 1678
        (pa.int64(), "s", -(2**63)),  # INT64_MIN seconds: its statistic once kept unconverted
        (pa.uint32(), "s", 2**32 - 1),  # after 2038, a uint32 epoch: a real time (2106)
    ],
)
def test_integer_epochs_past_int64_nanoseconds_belong_to_no_window(
    tmp_path: Path, dtype: pa.DataType, unit: str, sentinel: int, statistics: bool
) -> None:
    """A sentinel in an integer epoch column (or a time outside 1678-2262) has no int64
    nanosecond form: its row belongs to no window, as a null timestamp's, and never wraps
    into one; an unsigned column's statistics are its values. A uint32 epoch past 2038 is a
    time like any other."""
    per = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    start = int(T0.timestamp()) * per
    column = pa.array([start + per, start + 2 * per, sentinel], dtype)
    table = pa.table({"ts": column, "score": [0.1, 0.2, 0.3]})
    (tmp_path / "flat").mkdir()
    pq.write_table(table, tmp_path / "flat" / "e.parquet", write_statistics=statistics)
    spec = ScoreSpec(str(tmp_path / "flat"), timestamp_column="ts", timestamp_unit=unit)  # type: ignore[arg-type]
    assert read_scores(spec, Window(T0, T0 + HOUR)).rows == 2
    # the file's span from its statistics stays an int64 of ns (the summaries' file table),
    # and a partitioned copy checks its rows against the partition without overflowing
    (span,) = window_file_stats(spec, Window(T0, T0 + HOUR))
    assert span.oldest_ns is None or -(2**63) < span.oldest_ns <= span.newest_ns < 2**63  # type: ignore[operator]
    hive = tmp_path / "hive" / f"date={T0:%Y-%m-%d}"
    hive.mkdir(parents=True)
    pq.write_table(table, hive / "e.parquet", write_statistics=statistics)
    parted = ScoreSpec(str(tmp_path / "hive"), timestamp_column="ts", timestamp_unit=unit)  # type: ignore[arg-type]
    if dtype == pa.uint32():  # 2106 is a real time, outside the partition
        with pytest.raises(SchemaError, match=r"e.parquet: column 'ts': .* outside its partition"):
            read_scores(parted, Window(T0, T0 + HOUR))
    else:
        assert read_scores(parted, Window(T0, T0 + HOUR)).rows == 2
    everything = Window(datetime(1678, 1, 1, tzinfo=UTC), datetime(2262, 4, 1, tzinfo=UTC))
    real = dtype == pa.uint32()  # 2106-02-07: a time inside the wide window
    assert read_scores(spec, everything).rows == 2 + real
    newest = latest_timestamp(spec)
    assert newest == (datetime(2106, 2, 7, 6, 28, 15, tzinfo=UTC) if real else T0 + 2 * SEC)


def test_file_without_statistics_is_read_correctly(tmp_path: Path) -> None:
    table = pa.table({"timestamp": pa.array(_ts(T0, T0 + DAY)), "score": pa.array([1.0, 2.0])})
    pq.write_table(table, tmp_path / "nostats.parquet", write_statistics=False)
    got = read_scores(ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY))
    assert got.values.tolist() == [1.0]
    assert got.newest_timestamp == T0 + DAY


@settings(max_examples=25)
@given(
    offsets=st.lists(st.integers(-5_000, 5_000), min_size=0, max_size=40),
    lo=st.integers(-6_000, 6_000),
    width=st.integers(1, 6_000),
    rg=st.integers(1, 8),
)
def test_window_selection_matches_numpy(
    tmp_path_factory: pytest.TempPathFactory, offsets: list[int], lo: int, width: int, rg: int
) -> None:
    root = tmp_path_factory.mktemp("prop")
    base = np.datetime64(T0.replace(tzinfo=None), "ms")
    stamps = base + np.array(offsets, dtype="timedelta64[ms]")
    values = np.arange(len(offsets), dtype=np.float64)
    write_parquet(root / "p.parquet", {"timestamp": stamps, "score": values}, row_group_size=rg)
    w = Window(T0 + timedelta(milliseconds=lo), T0 + timedelta(milliseconds=lo + width))
    got = read_scores(ScoreSpec(str(root)), w)
    offs = np.array(offsets, dtype=np.int64)
    np.testing.assert_array_equal(got.values, values[(offs >= lo) & (offs < lo + width)])


# --- Bad input ------------------------------------------------------------------------------------


def test_missing_path_glob_and_empty_directory(tmp_path: Path) -> None:
    w = Window(T0, T0 + DAY)
    with pytest.raises(SourceNotFoundError, match=r"nope: no such file or directory"):
        read_scores(ScoreSpec(str(tmp_path / "nope")), w)
    with pytest.raises(SourceNotFoundError, match=r"the glob matches no file"):
        read_scores(ScoreSpec(str(tmp_path / "*.parquet")), w)
    with pytest.raises(SourceNotFoundError, match=r"the glob's directory"):
        latest_timestamp(ScoreSpec(str(tmp_path / "nope" / "*.parquet")))
    empty = read_scores(ScoreSpec(str(tmp_path)), w)
    assert (empty.rows, empty.values.size, empty.newest_timestamp) == (0, 0, None)


def test_missing_column_names_the_columns_found(tmp_path: Path) -> None:
    _scores(tmp_path / "s.parquet", [T0], [1.0])
    with pytest.raises(SchemaError, match=r"s.parquet: column 'top1'.*found: 'timestamp', 'score'"):
        read_scores(ScoreSpec(str(tmp_path), score_column="top1"), Window(T0, T0 + DAY))
    with pytest.raises(SchemaError, match=r"column 'locale': the segment column is missing"):
        read_scores(ScoreSpec(str(tmp_path), segment_column="locale"), Window(T0, T0 + DAY))
    with pytest.raises(SchemaError, match=r"column 'when': the timestamp column is missing"):
        latest_timestamp(ScoreSpec(str(tmp_path), timestamp_column="when"))


def test_a_duplicated_column_is_named_duplicated_not_missing(tmp_path: Path) -> None:
    table = pa.Table.from_arrays(
        [pa.array(_ts(T0)), pa.array([1.0]), pa.array([2.0])], names=["timestamp", "score", "score"]
    )
    pq.write_table(table, tmp_path / "dup.parquet")
    with pytest.raises(SchemaError, match=r"dup.parquet: column 'score': .* appears 2 times"):
        read_scores(ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY))


def test_wrong_types_are_schema_errors(tmp_path: Path) -> None:
    _scores(tmp_path / "good.parquet", [T0], [1.0])
    write_parquet(tmp_path / "bad.parquet", {"timestamp": _ts(T0), "score": np.array(["0.5"])})
    with pytest.raises(SchemaError, match=r"bad.parquet: column 'score': has type string"):
        read_scores(ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY))
    write_parquet(
        tmp_path / "t" / "x.parquet", {"timestamp": np.array(["2026"]), "score": np.array([1.0])}
    )
    with pytest.raises(SchemaError, match=r"'timestamp': has type string; expected a timestamp"):
        read_scores(ScoreSpec(str(tmp_path / "t")), Window(T0, T0 + DAY))


def test_corrupt_and_truncated_files_are_named(tmp_path: Path) -> None:
    _scores(tmp_path / "a" / "ok.parquet", [T0], [1.0])
    (tmp_path / "a" / "notes.parquet").write_text("this is not parquet")
    with pytest.raises(CorruptFileError, match=r"notes.parquet: cannot be read as parquet"):
        read_scores(ScoreSpec(str(tmp_path / "a")), Window(T0, T0 + DAY))
    full = tmp_path / "full.parquet"
    _scores(full, [T0] * 1000, list(np.linspace(0, 1, 1000)))
    data = full.read_bytes()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match=r"cut.parquet: cannot be read as parquet") as info:
        read_scores(ScoreSpec(str(tmp_path / "b")), Window(T0, T0 + DAY))
    assert "rewrite it" in str(info.value)
    # A footer intact but a data page broken: found when the row group is read.
    broken = bytearray(data)
    broken[4:200] = b"\xff" * 196
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "pages.parquet").write_bytes(bytes(broken))
    with pytest.raises(CorruptFileError, match=r"pages.parquet: cannot be read as parquet while"):
        read_scores(ScoreSpec(str(tmp_path / "c")), Window(T0, T0 + DAY))


_LANDLOCK_READ = """
import ctypes, json, sys
from datetime import UTC, datetime, timedelta
from monitor import sources
from monitor.errors import SourceError
libc = ctypes.CDLL(None, use_errno=True)
# Landlock: from here on this process may not open any file for reading, root included.
attr = (ctypes.c_uint64 * 3)(1 << 2, 0, 0)   # handled_access_fs = READ_FILE
fd = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
if fd < 0 or libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(446, fd, 0) != 0:
    print(json.dumps({"skip": "landlock unavailable"}))
    sys.exit(0)
t0 = datetime(2026, 11, 30, tzinfo=UTC)
try:
    sources.read_scores(sources.ScoreSpec(sys.argv[1]), sources.Window(t0, t0 + timedelta(days=1)))
    print(json.dumps({"error": None}))
except SourceError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def test_permission_denied_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "s.parquet"
    _scores(f, [T0], [1.0])
    if os.geteuid() != 0:
        f.chmod(0)
        with pytest.raises(SourcePermissionError, match=r"s.parquet: permission denied"):
            read_scores(ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY))
        return
    # Root reads any mode-000 file, so deny with a Landlock sandbox in a child process instead.
    out = subprocess.run(
        [sys.executable, "-c", _LANDLOCK_READ, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    result = json.loads(out)
    if "skip" in result:
        pytest.skip("running as root and the kernel has no Landlock to deny a read")
    assert result["error"] == "SourcePermissionError"
    assert "s.parquet: permission denied" in result["message"]
    assert "grant the monitor's user read access" in result["message"]


def test_nan_inf_null_are_counted_and_too_many_is_an_error(tmp_path: Path) -> None:
    n = 1000
    stamps = np.full(n, np.datetime64(T0.replace(tzinfo=None), "us"))
    values = np.linspace(0.0, 1.0, n)
    values[:3] = np.nan
    values[3:5] = np.inf
    values[5] = -np.inf
    score = pa.array(values, mask=np.arange(n) == 10)
    seg = pa.array(["en"] * (n - 1) + [None])
    pq.write_table(
        pa.table({"timestamp": pa.array(stamps), "score": score, "locale": seg}),
        tmp_path / "v.parquet",
    )
    w = Window(T0, T0 + DAY)
    got = read_scores(ScoreSpec(str(tmp_path), segment_column="locale"), w)
    assert (got.rows, got.dropped_nan, got.dropped_inf, got.dropped_null) == (n, 3, 3, 2)
    assert got.values.size == n - 8
    assert np.isfinite(got.values).all()
    assert got.segment_codes is not None
    assert got.segment_names == ("en",)
    with pytest.raises(
        BadValuesError,
        match=r"8 of 1000 score rows .* \(null value or null segment \('locale'\): 2, NaN: 3, "
        r"inf: 3\), 0.80%",
    ) as info:
        read_scores(ScoreSpec(str(tmp_path), segment_column="locale", max_invalid_share=0.005), w)
    assert "v.parquet" in str(info.value)
    assert info.value.column == "score"


def test_empty_window_reports_bounds_and_newest(tmp_path: Path) -> None:
    _scores(tmp_path / "s.parquet", [T0 - DAY], [1.0])
    w = Window(T0, T0 + DAY)
    got = read_scores(ScoreSpec(str(tmp_path), segment_column=None), w, with_timestamps=True)
    assert got.values.shape == (0,)
    assert got.timestamps is not None
    assert got.timestamps.shape == (0,)
    assert (got.rows, got.files_read, got.window) == (0, 0, w)
    assert got.newest_timestamp == T0 - DAY


def test_by_segment_needs_a_segment_column(tmp_path: Path) -> None:
    _scores(tmp_path / "s.parquet", [T0, T0], [1.0, 2.0], locale=np.array(["b", "a"]))
    got = read_scores(ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY))
    with pytest.raises(ValueError, match=r"by_segment\(\) needs a `segment_column`"):
        got.by_segment()
    seg = read_scores(ScoreSpec(str(tmp_path), segment_column="locale"), Window(T0, T0 + DAY))
    assert {k: v.tolist() for k, v in seg.by_segment().items()} == {"a": [2.0], "b": [1.0]}


# --- Outcomes and pairing -------------------------------------------------------------------------


def _outcomes(path: Path, rows: Sequence[tuple[datetime, object, float]], **extra: object) -> None:
    moments, qids, values = zip(*rows, strict=True)
    q = pa.array(list(qids))
    table = pa.table(
        {"timestamp": pa.array(_ts(*moments)), "query_id": q, "outcome": pa.array(values), **extra}
    )
    pq.write_table(table, path)


def test_outcomes_average_repeats_and_pair_by_query(tmp_path: Path) -> None:
    ref_w, cur_w = Window(T0, T0 + DAY), Window(T0 + DAY, T0 + 2 * DAY)
    _outcomes(
        tmp_path / "ref.parquet",
        [(T0, 1, 0.5), (T0 + HOUR, 1, 0.7), (T0, 2, 0.4), (T0, 3, 0.9), (T0, None, 0.1)],
    )
    _outcomes(
        tmp_path / "cur.parquet",
        [(T0 + DAY, 1, 0.2), (T0 + DAY, 2, 0.3), (T0 + DAY, 2, 0.5), (T0 + DAY, 4, 1.0)],
    )
    spec = OutcomeSpec(str(tmp_path), max_invalid_share=0.25)
    ref, cur = read_outcomes(spec, ref_w), read_outcomes(spec, cur_w)
    assert ref.query_ids.tolist() == ["1", "2", "3"]
    np.testing.assert_allclose(ref.outcomes, [0.6, 0.4, 0.9])
    assert ref.counts.tolist() == [2, 1, 1]
    assert (ref.rows, ref.dropped_null_query) == (5, 1)
    assert ref.newest_timestamp == T0 + DAY
    paired = pair_outcomes(ref, cur)
    assert paired.query_ids.tolist() == ["1", "2"]
    np.testing.assert_allclose(paired.reference, [0.6, 0.4])
    np.testing.assert_allclose(paired.current, [0.2, 0.4])
    assert paired.reference_counts.tolist() == [2, 1]
    assert paired.current_counts.tolist() == [1, 2]
    # each pair's runs, key by key in read order: the decay test's run labels
    assert ref.runs is not None
    assert ref.runs.tolist() == [0.5, 0.7, 0.4, 0.9]
    assert paired.reference_runs is not None
    assert paired.current_runs is not None
    assert paired.reference_runs.values.tolist() == [0.5, 0.7, 0.4]
    assert paired.reference_runs.counts.tolist() == [2, 1]
    assert paired.current_runs.values.tolist() == [0.2, 0.3, 0.5]
    assert paired.current_runs.counts.tolist() == [1, 2]
    assert (paired.only_reference, paired.only_current) == (1, 1)
    assert paired.only_reference_ids.tolist() == ["3"]
    assert paired.only_current_ids.tolist() == ["4"]
    assert paired.coverage == pytest.approx(2 / 3)
    with pytest.raises(BadValuesError) as caught:
        read_outcomes(OutcomeSpec(str(tmp_path)), ref_w)
    # the column that holds them is named: it once said the outcome column, which was fine
    assert "1 of 5 outcome rows" in str(caught.value)
    assert "null query id ('query_id'): 1" in str(caught.value)
    assert "column 'query_id'" in str(caught.value)
    assert caught.value.column == "query_id"


def test_outcome_windows_read_each_row_group_once_while_its_file_is_unchanged(
    tmp_path: Path,
) -> None:
    """A check reads its reference outcome window again every hour: each row group comes from
    storage once while its file is unchanged, and every window equals a cold read."""
    g = np.random.default_rng(7)
    for day in range(3):  # an evaluation run a day, 02:00-02:40, with repeats, NaN, null ids
        moments = [T0 + day * DAY + 2 * HOUR + timedelta(minutes=int(m)) for m in range(0, 40, 2)]
        qids: list[object] = [f"q{int(i)}" for i in g.integers(0, 8, len(moments))]
        qids[3] = None
        values = g.random(len(moments))
        values[5] = np.nan
        _outcomes(tmp_path / f"run-{day}.parquet", list(zip(moments, qids, values, strict=True)))
    spec = OutcomeSpec(str(tmp_path), max_invalid_share=0.2)
    # hourly windows, then windows whose ends cut through the runs
    starts = [T0 + h * HOUR for h in range(50)]
    starts += [T0 + 110 * MINUTE + k * 4 * MINUTE for k in range(15)]
    windows = [Window(s, s + DAY) for s in starts]
    sources.clear_cache()
    warm = [(read_outcomes(spec, w), read_run_times(spec, w)) for w in windows]
    assert footers._GROUPS.read == 3 * 2  # each file's one group: outcome columns, timestamps
    kept = read_run_times(spec, windows[0])  # the same rows: the times kept, read-only
    assert kept is warm[0][1]
    assert not kept.flags.writeable
    for w, (got, times) in zip(windows, warm, strict=True):
        sources.clear_cache()
        assert_same_window(got, read_outcomes(spec, w))
        np.testing.assert_array_equal(times, read_run_times(spec, w))
    # a rewritten run is read again: its new values, not the kept ones
    sources.clear_cache()
    w = Window(T0 + DAY, T0 + 2 * DAY)
    before = read_outcomes(spec, w)
    _outcomes(tmp_path / "run-1.parquet", [(T0 + DAY + 3 * HOUR, "q1", 0.25)])
    after = read_outcomes(spec, w)
    assert before.query_ids.size > 1
    assert (after.query_ids.tolist(), after.outcomes.tolist()) == (["q1"], [0.25])
    assert footers._GROUPS.read == 2
    # the same identity (path, size, mtime, ctime) is the same group; a copy garbled in place
    # with its size and mtime kept has a new ctime: it is read (and refused) at once
    assert_same_window(read_outcomes(spec, w), after)
    _garble(tmp_path / "run-1.parquet", keep_stat=True)
    with pytest.raises(CorruptFileError, match=r"run-1.parquet"):
        read_outcomes(spec, w)


def test_a_file_half_written_during_an_outcome_read_neither_fails_it_nor_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer drops a half-written file into the window while it is read: the read stands
    (what was planned), and is not kept (the key made again no longer describes it)."""
    from monitor.sources import outcomes as module

    _outcomes(tmp_path / "a.parquet", [(T0 + HOUR, "q1", 0.5), (T0 + HOUR, "q2", 0.7)])
    spec, w = OutcomeSpec(str(tmp_path)), Window(T0, T0 + DAY)
    read = module._read_outcomes

    def read_then_a_writer_starts(*args: object, **kwargs: object) -> OutcomeWindow:
        out = read(*args, **kwargs)  # type: ignore[arg-type]
        (tmp_path / "b.parquet").write_bytes(b"PAR1 not yet whole")
        return out

    monkeypatch.setattr(module, "_read_outcomes", read_then_a_writer_starts)
    got = read_outcomes(spec, w)
    assert got.query_ids.tolist() == ["q1", "q2"]
    assert not module.KEPT.holds(got)
    monkeypatch.undo()
    with pytest.raises(CorruptFileError, match=r"b.parquet"):  # the next read sees the file
        read_outcomes(spec, w)


def test_null_outcome_segments_are_named_as_such(tmp_path: Path) -> None:
    """Outcome rows dropped for a null segment (the outcome column has no null) are counted
    as a null value or segment, with the segment column named."""
    rows = [(T0, "q1", 0.1), (T0, "q2", 0.3), (T0, "q3", 0.5), (T0, "q4", 0.9)]
    _outcomes(tmp_path / "r.parquet", rows, locale=pa.array(["en", None, "en", "de"]))
    spec = OutcomeSpec(str(tmp_path), segment_column="locale")
    with pytest.raises(BadValuesError, match=r"null value or null segment \('locale'\): 1"):
        read_outcomes(spec, Window(T0, T0 + DAY))


def test_a_segment_with_a_nul_character_is_refused(tmp_path: Path) -> None:
    """ "de" and "de\\0" were one segment of the outcomes (numpy's fixed-width strings drop a
    trailing NUL: pairs misaligned, an IndexError) and two of the scores (a segment's scores
    and outcomes apart): refused, as a query id with a NUL is, naming the file and column."""
    rows = [(T0, "q1", 0.1), (T0, "q2", 0.3)]
    (tmp_path / "o").mkdir()
    _outcomes(tmp_path / "o" / "r.parquet", rows, locale=pa.array(["de", "de\x00"]))
    with pytest.raises(SchemaError, match="NUL") as err:
        read_outcomes(
            OutcomeSpec(str(tmp_path / "o"), segment_column="locale"), Window(T0, T0 + DAY)
        )
    assert err.value.column == "locale"
    assert str(tmp_path / "o" / "r.parquet") in str(err.value)
    path = tmp_path / "s" / "p.parquet"
    _scores(path, [T0 + HOUR] * 2, [1.0, 2.0], locale=pa.array(["de\x00", "en"]))
    with pytest.raises(SchemaError, match="NUL"):
        read_scores(ScoreSpec(str(tmp_path / "s"), segment_column="locale"), Window(T0, T0 + DAY))
    # a hive partition value is URL-decoded: locale=de%00 is "de\0"
    for locale in ("de", "de%00"):
        _scores(tmp_path / "h" / f"locale={locale}" / "p.parquet", [T0 + HOUR], [1.0])
    with pytest.raises(SchemaError, match="NUL") as err:
        read_scores(ScoreSpec(str(tmp_path / "h"), segment_column="locale"), Window(T0, T0 + DAY))
    assert err.value.column == "locale"


def test_outcome_pairing_by_segment_and_string_ids(tmp_path: Path) -> None:
    rows = [(T0, "q1", 0.1), (T0, "q1", 0.3), (T0, "q2", 0.5), (T0, "q1", 0.9)]
    _outcomes(tmp_path / "r.parquet", rows, locale=pa.array(["en", "en", "en", "de"]))
    rows = [(T0 + DAY, "q1", 0.0), (T0 + DAY, "q1", 1.0), (T0 + DAY, "q3", 1.0)]
    _outcomes(tmp_path / "c.parquet", rows, locale=pa.array(["en", "de", "de"]))
    spec = OutcomeSpec(str(tmp_path), segment_column="locale")
    ref = read_outcomes(spec, Window(T0, T0 + DAY))
    cur = read_outcomes(spec, Window(T0 + DAY, T0 + 2 * DAY))
    assert ref.segments is not None
    assert list(zip(ref.segments.tolist(), ref.query_ids.tolist(), strict=True)) == [
        ("de", "q1"),
        ("en", "q1"),
        ("en", "q2"),
    ]
    np.testing.assert_allclose(ref.outcomes, [0.9, 0.2, 0.5])
    paired = pair_outcomes(ref, cur)
    assert paired.segments is not None
    assert paired.segments.tolist() == ["de", "en"]
    np.testing.assert_allclose(paired.current - paired.reference, [0.1, -0.2])
    parts = paired.by_segment()
    assert sorted(parts) == ["de", "en"]
    en_runs = parts["en"].reference_runs
    assert en_runs is not None
    assert en_runs.values.tolist() == [0.1, 0.3]  # en q1's two runs, not de's
    de_runs = parts["de"].current_runs
    assert de_runs is not None
    assert de_runs.values.tolist() == [1.0]
    assert (parts["de"].only_reference, parts["de"].only_current, parts["de"].coverage) == (
        0,
        1,
        1.0,
    )
    assert (parts["en"].only_reference, parts["en"].only_current, parts["en"].coverage) == (
        1,
        0,
        0.5,
    )
    plain = read_outcomes(OutcomeSpec(str(tmp_path)), Window(T0, T0 + DAY))
    with pytest.raises(ValueError, match=r"must both have segments or both have none"):
        pair_outcomes(plain, cur)
    with pytest.raises(ValueError, match=r"by_segment\(\) needs a `segment_column`"):
        pair_outcomes(plain, plain).by_segment()


def test_a_reference_emptied_of_its_runs_pairs_as_empty(tmp_path: Path) -> None:
    """A frozen reference whose every run was looked at is emptied (``_empty_outcomes``): its
    runs go with its means (kept, they no longer matched the empty counts and the pairing
    failed the check)."""
    from monitor.checkdata import _empty_outcomes

    _outcomes(tmp_path / "r.parquet", [(T0, "q1", 0.1), (T0 + HOUR, "q1", 0.3)])
    _outcomes(tmp_path / "c.parquet", [(T0 + DAY, "q1", 0.2)])
    spec = OutcomeSpec(str(tmp_path))
    ref = read_outcomes(spec, Window(T0, T0 + DAY))
    assert ref.runs is not None
    assert ref.runs.size == 2
    emptied = _empty_outcomes(ref, Window(T0, T0 + DAY))
    assert emptied.runs is not None
    assert emptied.runs.size == 0
    paired = pair_outcomes(emptied, read_outcomes(spec, Window(T0 + DAY, T0 + 2 * DAY)))
    assert (paired.pairs, paired.only_current) == (0, 1)
    assert paired.reference_runs is not None
    assert paired.reference_runs.keys == 0


def test_pairing_empty_windows_has_zero_coverage(tmp_path: Path) -> None:
    _outcomes(tmp_path / "r.parquet", [(T0, "q1", 0.1)])
    spec = OutcomeSpec(str(tmp_path))
    empty = read_outcomes(spec, Window(T0 + DAY, T0 + 2 * DAY))
    assert isinstance(empty, OutcomeWindow)
    assert (empty.rows, empty.query_ids.size, empty.outcomes.size) == (0, 0, 0)
    paired = pair_outcomes(empty, read_outcomes(spec, Window(T0, T0 + DAY)))
    assert (paired.pairs, paired.only_reference, paired.only_current, paired.coverage) == (
        0,
        0,
        1,
        0.0,
    )


def test_outcome_columns_are_type_checked(tmp_path: Path) -> None:
    pq.write_table(
        pa.table(
            {
                "timestamp": pa.array(_ts(T0)),
                "query_id": pa.array([1.5]),
                "outcome": pa.array([0.5]),
            }
        ),
        tmp_path / "o.parquet",
    )
    with pytest.raises(SchemaError, match=r"'query_id': has type double; the query id column"):
        read_outcomes(OutcomeSpec(str(tmp_path)), Window(T0, T0 + DAY))


# --- directory listings reused across checks -------------------------------------------------


def test_an_unchanged_directory_is_not_listed_again_and_changes_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon walks the same partitions at every check: a directory whose mtime is unchanged
    (and not recent: see ``paths._RACY_NS``) is not listed again, while a file added to it, a
    file rewritten in place and a new partition all show at the next read."""

    old = to_ns(T0 - DAY)
    hours = [tmp_path / "date=2026-11-30" / f"hour={h:02d}" for h in range(3)]
    for h, d in enumerate(hours):
        _scores(d / "part-0.parquet", [T0 + h * HOUR], [float(h)])
    for d in [tmp_path, tmp_path / "date=2026-11-30", *hours]:
        os.utime(d, ns=(old, old))  # modified long ago: its listing may be reused
    listed: list[str] = []
    scandir = os.scandir

    def counted(path: str) -> object:
        listed.append(str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", counted)
    spec, window = ScoreSpec(str(tmp_path)), Window(T0, T0 + DAY)
    assert sorted(read_scores(spec, window).values) == [0.0, 1.0, 2.0]
    assert len(listed) == 5  # the root, the date and three hours
    listed.clear()
    assert sorted(read_scores(spec, window).values) == [0.0, 1.0, 2.0]
    assert listed == []  # nothing changed: nothing listed

    _scores(hours[1] / "part-1.parquet", [T0 + HOUR], [10.0])  # a late file: hour=01 changes
    rewritten = pa.table({"timestamp": _ts(T0 + 2 * HOUR, T0 + 2 * HOUR), "score": [20.0, 21.0]})
    pq.write_table(rewritten, hours[2] / "part-0.parquet")  # in place: hour=02 looks unchanged
    assert sorted(read_scores(spec, window).values) == [0.0, 1.0, 10.0, 20.0, 21.0]
    assert listed == [str(hours[1])]

    listed.clear()
    late = tmp_path / "date=2026-11-30" / "hour=05"  # a new partition, written just now
    _scores(late / "part-0.parquet", [T0 + 5 * HOUR], [50.0])
    assert 50.0 in read_scores(spec, window).values
    listed.clear()
    _scores(late / "part-1.parquet", [T0 + 5 * HOUR], [51.0])  # within the same clock tick
    assert 51.0 in read_scores(spec, window).values  # a recent directory is always listed
    assert str(late) in listed


def test_footers_are_kept_within_a_memory_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The footer cache was bounded by count alone (65,536): a daemon kept the footer of every
    file it ever walked, about 8 times its thrift size each, long after the files left its
    windows (10 GB at the cap for files of 20 columns). Past a byte bound the footers unused
    for a day go, least recently used first; those in use stay whatever the bound (an
    unpartitioned source plans every file at every check: evicted, each was read again)."""
    from monitor.sources import footers

    sources.clear_cache()
    clock = [0.0]
    monkeypatch.setattr(footers, "_clock", lambda: clock[0])
    columns = {f"c{i}": np.zeros(10) for i in range(20)}
    paths = []
    for hour in range(40):
        path = tmp_path / f"hour={hour:02d}" / "part-0.parquet"
        path.parent.mkdir()
        when = np.datetime64("2026-11-30T00:00", "us") + np.timedelta64(hour, "h")
        table = pa.table({"timestamp": np.full(10, when), "score": np.ones(10), **columns})
        pq.write_table(table, path)
        paths.append(path)
    one = 8 * pq.read_metadata(paths[0]).serialized_size + 4096
    cache = footers._FOOTERS
    monkeypatch.setattr(cache, "max_bytes", 10 * one + one // 2)  # room for ten
    for path in paths[:20]:  # all in use: kept past the bound
        assert sources.latest_timestamp(ScoreSpec(path=str(path))) is not None
    assert len(cache) == 20
    opened = cache.opened
    for path in paths[:20]:
        sources.latest_timestamp(ScoreSpec(path=str(path)))
    assert cache.opened == opened  # none read again
    clock[0] += footers._HOT_SECONDS + 1  # a day on: the first twenty are idle
    for path in paths[20:]:  # one new file an hour, each read once
        clock[0] += 1.0
        sources.latest_timestamp(ScoreSpec(path=str(path)))
    assert len(cache) == 20  # the idle ones went as the new ones came
    assert cache.nbytes <= 20 * one
    clock[0] += footers._HOT_SECONDS + 100
    sources.latest_timestamp(ScoreSpec(path=str(paths[0])))  # a day later: only ten fit
    assert len(cache) == 10
    assert cache.nbytes <= cache.max_bytes
