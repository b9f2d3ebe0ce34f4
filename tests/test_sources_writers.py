"""Files as production writers leave them (Spark's INT96 timestamps and page checksums, flattened
column names, boolean partitions, an epoch unit set wrong), each of which a review found read
as a wrong number or an empty feed without a word: read right, or refused naming the file and
column."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monitor.errors import CorruptFileError, SchemaError
from monitor.sources import (
    OutcomeSpec,
    ScoreSpec,
    Window,
    clear_cache,
    latest_timestamp,
    read_outcomes,
    read_scores,
)
from monitor.sources.probe import inspect_source

DAY = timedelta(days=1)
T0 = datetime(2026, 11, 30, tzinfo=UTC)
WINDOW = Window(start=T0, end=T0 + DAY)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    clear_cache()


def _us(text: str) -> np.datetime64:
    return np.datetime64(text, "us")


def test_int96_far_future_sentinel_belongs_to_no_window(tmp_path: Path) -> None:
    """Spark's legacy INT96 timestamps read in nanoseconds wrapped 9999-12-31 round to 1816
    (a partition's rows then "outside its partition": every check an error) and 1600-01-01 to
    2184. Read in microseconds, a time past 2262 has no nanosecond form and no window."""
    part = tmp_path / "scores" / "date=2026-11-30"
    part.mkdir(parents=True)
    stamps = [_us("2026-11-30T01:00"), _us("2026-11-30T02:00"), _us("9999-12-31T00:00")]
    table = pa.table({"timestamp": pa.array(stamps, pa.timestamp("us")), "score": [0.1, 0.2, 0.3]})
    pq.write_table(table, part / "a.parquet", use_deprecated_int96_timestamps=True)
    assert pq.read_metadata(part / "a.parquet").schema.column(0).physical_type == "INT96"
    spec = ScoreSpec(path=str(tmp_path / "scores"))
    got = read_scores(spec, WINDOW, with_timestamps=True)
    assert got.rows == 2
    assert got.values.tolist() == [0.1, 0.2]
    expected = [int(s.astype("datetime64[ns]").astype(np.int64)) for s in stamps[:2]]
    assert got.timestamps is not None
    assert got.timestamps.astype("datetime64[ns]").astype(np.int64).tolist() == expected
    assert latest_timestamp(spec) == datetime(2026, 11, 30, 2, tzinfo=UTC)
    flat = tmp_path / "flat"
    flat.mkdir()
    old = pa.table({"timestamp": pa.array([_us("1600-01-01")], pa.timestamp("us")), "score": [1.0]})
    pq.write_table(old, flat / "a.parquet", use_deprecated_int96_timestamps=True)
    everything = Window(
        start=datetime(1970, 1, 1, tzinfo=UTC), end=datetime(2262, 1, 1, tzinfo=UTC)
    )
    assert read_scores(ScoreSpec(path=str(flat)), everything).rows == 0  # not 2184


def test_a_page_that_fails_its_checksum_is_a_corrupt_file(tmp_path: Path) -> None:
    """parquet-mr writes a CRC per page; unchecked, one flipped bit was read as a score of
    9e307 and nothing said so."""
    path = tmp_path / "scores" / "a.parquet"
    path.parent.mkdir()
    scores = np.full(1000, 0.5)
    scores[[0, 1, 500]] = 0.0, 1.0, 0.123456789  # not the min or max (page statistics hold them)
    stamps = np.full(1000, _us("2026-11-30T01:00"))
    table = pa.table({"timestamp": pa.array(stamps, pa.timestamp("us")), "score": scores})
    pq.write_table(table, path, write_page_checksum=True, compression="NONE", use_dictionary=False)
    data = bytearray(path.read_bytes())
    at = data.index(np.float64(0.123456789).tobytes())
    data[at + 7] ^= 0x40  # the exponent's top bit: 0.12 becomes about 1e307
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=r"(?i)checksum") as err:
        read_scores(ScoreSpec(path=str(path.parent)), WINDOW)
    assert err.value.path == str(path)


def test_epoch_milliseconds_read_as_seconds_are_refused_not_an_empty_feed(tmp_path: Path) -> None:
    """With ``timestamp_unit = "s"`` on epoch milliseconds every row was past int64
    nanoseconds, dropped uncounted: "no data at all" on a source of 72,000 rows."""
    path = tmp_path / "scores" / "a.parquet"
    path.parent.mkdir()
    ms = np.arange(1000, dtype=np.int64) * 1000 + 1_764_464_400_000  # 2025-11-30, in ms
    pq.write_table(pa.table({"timestamp": ms, "score": np.linspace(0, 1, 1000)}), path)
    wrong = ScoreSpec(path=str(path.parent), timestamp_unit="s")
    with pytest.raises(SchemaError, match="timestamp_unit") as err:
        read_scores(wrong, WINDOW)
    assert (err.value.path, err.value.column) == (str(path), "timestamp")
    assert "1764464400000" in str(err.value)
    (problem,) = inspect_source(wrong).problems  # validate --sources says so too
    assert "timestamp_unit" in problem
    right = ScoreSpec(path=str(path.parent), timestamp_unit="ms")
    assert latest_timestamp(right) == datetime(2025, 11, 30, 1, 16, 39, tzinfo=UTC)


def test_a_flattened_column_name_is_not_a_nested_fields(tmp_path: Path) -> None:
    """A column named ``event.time`` (pandas' json_normalize) beside a struct ``event`` with a
    field ``time``: both have the parquet path "event.time", and the struct's statistics were
    taken for the column's (0 rows read, the newest time 2020)."""
    path = tmp_path / "scores" / "a.parquet"
    path.parent.mkdir()
    n = 100
    old = pa.array([_us("2020-01-01T00:00")] * n, pa.timestamp("us"))
    new = pa.array([_us("2026-11-30T12:00")] * n, pa.timestamp("us"))
    table = pa.table(
        {
            "event": pa.StructArray.from_arrays([old], names=["time"]),
            "event.time": new,
            "score": np.full(n, 0.5),
        }
    )
    pq.write_table(table, path)
    spec = ScoreSpec(path=str(path.parent), timestamp_column="event.time")
    assert read_scores(spec, WINDOW).rows == n
    assert latest_timestamp(spec) == datetime(2026, 11, 30, 12, tzinfo=UTC)


def test_a_boolean_segment_is_spelled_as_its_partitions(tmp_path: Path) -> None:
    """A boolean segment column was "True"/"False" (``str``) while the same segment as a Hive
    partition (Spark's partitionBy) is "true"/"false": four segments, each with one side."""
    stamps = pa.array([datetime(2026, 11, 30, 1)] * 4, pa.timestamp("us"))
    scores = tmp_path / "scores" / "a.parquet"
    scores.parent.mkdir()
    table = pa.table(
        {"timestamp": stamps, "score": [0.1, 0.2, 0.3, 0.4], "mobile": [True, False, True, False]}
    )
    pq.write_table(table, scores)
    for value in ("true", "false"):
        part = tmp_path / "outcomes" / f"mobile={value}"
        part.mkdir(parents=True)
        outcomes = {"timestamp": stamps, "query_id": ["a", "b", "c", "d"], "outcome": [0.5] * 4}
        pq.write_table(pa.table(outcomes), part / "a.parquet")
    s = read_scores(ScoreSpec(path=str(scores.parent), segment_column="mobile"), WINDOW)
    o = read_outcomes(OutcomeSpec(path=str(tmp_path / "outcomes"), segment_column="mobile"), WINDOW)
    assert s.segment_names == ("false", "true")
    assert o.segments is not None
    assert sorted(set(o.segments.tolist())) == ["false", "true"]


def test_query_ids_with_a_nul_are_refused(tmp_path: Path) -> None:
    """numpy's str drops a trailing NUL: "q1" and "q1\\0" were one query, their outcomes
    averaged (0.5 from 0.1 and 0.9)."""
    path = tmp_path / "outcomes" / "a.parquet"
    path.parent.mkdir()
    stamps = pa.array([datetime(2026, 11, 30, 1)] * 2, pa.timestamp("us"))
    table = pa.table({"timestamp": stamps, "query_id": ["q1", "q1\x00"], "outcome": [0.1, 0.9]})
    pq.write_table(table, path)
    with pytest.raises(SchemaError, match="NUL") as err:
        read_outcomes(OutcomeSpec(path=str(path.parent)), WINDOW)
    assert (err.value.path, err.value.column) == (str(path), "query_id")
