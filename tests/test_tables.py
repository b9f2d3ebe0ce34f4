"""Delta Lake and Iceberg tables as sources (issue 13): real tables written by deltalake and by
pyiceberg through a SqlCatalog on sqlite, read against exactly their live parquet files."""

from __future__ import annotations

import json
import os
import struct
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from monitor.config import load_config
from monitor.engines import LocalEngine, make_engine
from monitor.errors import ConfigError, SchemaError, SourceError, SourceNotFoundError
from monitor.sources import (
    OutcomeSpec,
    ScoreSpec,
    Window,
    clear_cache,
    current_snapshot,
    inspect_source,
    latest_timestamp,
    pin_snapshot,
    read_outcomes,
    read_scores,
    read_summary_part,
    window_file_stats,
    window_files,
)
from monitor.sources.footers import _FOOTERS
from monitor.sources.judged import read_run_times
from monitor.stats import Grid, build_baseline, summary_grid
from tests.test_summaries_reader import HOUR, T0, same_parts

deltalake = pytest.importorskip("deltalake", reason="the optional extra .[tables] is not installed")
pytest.importorskip("pyiceberg", reason="the optional extra .[tables] is not installed")

from deltalake import DeltaTable, write_deltalake  # noqa: E402

ALL = Window(start=T0, end=T0 + 30 * HOUR)


def _batch(hours: range, seed: int, *, bad: bool = False) -> pa.Table:
    """400 scores an hour over ``hours`` (from T0), with segments, and NaN / inf when ``bad``."""
    g = np.random.default_rng(seed)
    n = len(hours) * 400
    offset = np.sort(g.integers(hours.start * 3_600_000_000, hours.stop * 3_600_000_000, n))
    ts = np.datetime64(T0.replace(tzinfo=None), "us") + offset.astype("timedelta64[us]")
    score = g.lognormal(-1, 0.8, n)
    if bad:
        score[g.random(n) < 0.01] = np.nan
        score[g.random(n) < 0.005] = np.inf
    return pa.table(
        {
            "timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "score": pa.array(score),
            "segment": pa.array(g.choice(np.array(["de", "en", "fr"]), size=n)),
            "query_id": pa.array([f"q{i % 50}" for i in range(n)]),
        }
    )


def _same_scores(table: ScoreSpec, files: ScoreSpec, window: Window) -> None:
    """The same rows, counts and segments (rows ordered by time and value: file order differs)."""
    a = read_scores(table, window, with_timestamps=True)
    b = read_scores(files, window, with_timestamps=True)
    assert (a.rows, a.dropped_null, a.dropped_nan, a.dropped_inf) == (
        b.rows,
        b.dropped_null,
        b.dropped_nan,
        b.dropped_inf,
    )
    assert a.files_read == b.files_read
    assert a.newest_timestamp == b.newest_timestamp
    assert a.timestamps is not None
    assert b.timestamps is not None
    oa, ob = np.lexsort((a.values, a.timestamps)), np.lexsort((b.values, b.timestamps))
    assert np.array_equal(a.values[oa], b.values[ob])
    assert np.array_equal(a.timestamps[oa], b.timestamps[ob])
    assert a.segment_names == b.segment_names
    assert a.segment_codes is not None
    assert b.segment_codes is not None
    assert np.array_equal(a.segment_codes[oa], b.segment_codes[ob])


def _grid(spec: ScoreSpec) -> Grid:
    ref = read_scores(spec, ALL).values
    b = build_baseline(ref)
    return summary_grid(b.sorted_reference, b.edges, n_current=ref.size)


def _link_tree(files: list[str], table_root: Path, out: Path) -> Path:
    """The live files, hard-linked under ``out`` at their paths below the table's root."""
    for f in files:
        target = out / Path(f).relative_to(table_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(f, target)
    return out


# -- Delta Lake ------------------------------------------------------------------------------


@pytest.fixture
def delta(tmp_path: Path) -> Path:
    """Four commits: three appends (hours 0-6, 6-12 with NaN / inf, 20-24), partitioned by
    segment, then a delete of hour 8's rows, which rewrites the files holding them."""
    clear_cache()
    root = tmp_path / "scores_delta"
    write_deltalake(root, _batch(range(6), 1), partition_by=["segment"])
    write_deltalake(root, _batch(range(6, 12), 2, bad=True), mode="append")
    write_deltalake(root, _batch(range(20, 24), 3), mode="append")
    t8, t9 = (T0 + 8 * HOUR).isoformat(), (T0 + 9 * HOUR).isoformat()
    DeltaTable(root).delete(f"timestamp >= '{t8}' AND timestamp < '{t9}'")
    return root


def _delta_spec(root: Path, **kw: Any) -> ScoreSpec:
    return ScoreSpec(
        path=str(root), format="delta", segment_column="segment", max_invalid_share=0.1, **kw
    )


def test_delta_reads_exactly_its_live_files(delta: Path, tmp_path: Path) -> None:
    table = DeltaTable(delta)
    assert table.version() == 3
    live = sorted(table.file_uris())
    on_disk = sorted(str(p) for p in delta.rglob("*.parquet"))
    assert len(on_disk) > len(live)  # the delete left removed files behind
    spec = _delta_spec(delta)
    # the same files as a plain hive tree (the segment from the partition directories)
    files = ScoreSpec(
        path=str(_link_tree(live, delta, tmp_path / "live")),
        segment_column="segment",
        max_invalid_share=0.1,
    )
    grid = _grid(spec)
    for window, bucket in (
        (ALL, None),
        (Window(start=T0 + 3 * HOUR + timedelta(minutes=17), end=T0 + 22 * HOUR), HOUR),
        (Window(start=T0 + 7 * HOUR, end=T0 + 10 * HOUR), None),
    ):
        _same_scores(spec, files, window)
        same_parts(
            read_summary_part(spec, window, grid, bucket=bucket),
            read_summary_part(files, window, grid, bucket=bucket),
            per_file=False,
        )
    got = read_scores(spec, ALL, with_timestamps=True)
    assert got.timestamps is not None
    hour8 = (got.timestamps >= Window(T0 + 8 * HOUR, T0 + 9 * HOUR).start_ns) & (
        got.timestamps < Window(T0 + 8 * HOUR, T0 + 9 * HOUR).end_ns
    )
    assert not hour8.any()  # the deleted rows are gone with the files they were in
    assert got.rows == 16 * 400 - (table.history()[0]["operationMetrics"]["num_deleted_rows"])
    assert set(window_files(spec, ALL)) == set(live)
    assert latest_timestamp(spec) == latest_timestamp(files)
    assert current_snapshot(spec) == 3


def test_delta_prunes_files_by_the_logs_statistics(delta: Path) -> None:
    spec = _delta_spec(delta)
    late = Window(start=T0 + 20 * HOUR, end=T0 + 21 * HOUR)
    actions = pa.table(DeltaTable(delta).get_add_actions(flatten=True))
    assert actions.num_rows > 3
    clear_cache()
    planned = window_files(spec, late)
    assert planned
    assert all("segment=" in p for p in planned)
    # only the last append's files (one per segment) may hold hour 20; no other footer opened
    assert len(planned) == 3
    opened = {key[1] for key in _FOOTERS._entries}
    assert opened == set(planned)
    assert (
        read_scores(spec, late).rows
        == len(read_scores(spec, late, with_timestamps=True).values)
        + read_scores(spec, late).dropped
    )
    assert window_files(spec, Window(start=T0 + 13 * HOUR, end=T0 + 19 * HOUR)) == []


def test_a_pinned_snapshot_survives_later_commits(delta: Path) -> None:
    spec = _delta_spec(delta)
    pinned = pin_snapshot(spec)
    assert pinned.snapshot == 3
    assert pin_snapshot(pinned) is pinned
    grid = _grid(spec)
    before = read_summary_part(spec, ALL, grid)
    planned = window_files(pinned, ALL)
    DeltaTable(delta).delete("segment = 'de'")  # version 4 removes the 'de' files
    assert "de" not in read_scores(spec, ALL).segment_names
    same_parts(read_summary_part(pinned, ALL, grid), before, per_file=False)
    # an unpinned task handed files of the old snapshot says so rather than reading less
    with pytest.raises(SourceError, match="another snapshot of the table"):
        read_summary_part(spec, ALL, grid, files=frozenset(planned))


def test_delta_outcomes(tmp_path: Path) -> None:
    root = tmp_path / "outcomes_delta"
    batch = _batch(range(6), 4)
    batch = batch.append_column("outcome", pa.array(np.linspace(0, 1, batch.num_rows)))
    write_deltalake(root, batch)
    write_deltalake(root, batch, mode="overwrite")  # the first file is removed
    spec = OutcomeSpec(path=str(root), format="delta")
    live = DeltaTable(root).file_uris()
    assert len(live) == 1
    got = read_outcomes(spec, ALL)
    want = read_outcomes(OutcomeSpec(path=live[0]), ALL)
    assert got.rows == want.rows == batch.num_rows
    assert np.array_equal(got.query_ids, want.query_ids)
    assert np.array_equal(got.outcomes, want.outcomes)
    # the evaluation runs the runner splits come from the live rows too (they came from every
    # parquet file under the table's directory, the removed one included: twice the rows)
    times = read_run_times(spec, ALL)
    assert np.array_equal(times, read_run_times(OutcomeSpec(path=live[0]), ALL))
    assert times.size == batch.num_rows


def _z85(data: bytes) -> str:
    alphabet = (
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    )
    out: list[str] = []
    for i in range(0, len(data), 4):
        v = int.from_bytes(data[i : i + 4], "big")
        chunk: list[str] = []
        for _ in range(5):
            v, r = divmod(v, 85)
            chunk.append(alphabet[r])
        out.extend(reversed(chunk))
    return "".join(out)


def _add_deletion_vector(root: Path, rows: list[int]) -> str:
    """Commit a deletion vector (inline, as Spark and Databricks write small ones) deleting
    ``rows`` of the table's first file; returns that file's path. delta-rs decodes it."""
    from pyroaring import BitMap

    log = root / "_delta_log"
    version = max(int(p.stem) for p in log.glob("*.json"))
    add = next(
        json.loads(line)["add"]
        for line in (log / f"{0:020d}.json").read_text().splitlines()
        if '"add"' in line
    )
    bitmap = struct.pack("<iqi", 1681511377, 1, 0) + BitMap(rows).serialize()
    dv = {
        "storageType": "i",
        "pathOrInlineDv": _z85(bitmap + b"\0" * (-len(bitmap) % 4)),
        "sizeInBytes": len(bitmap),
        "cardinality": len(rows),
    }
    remove = {"path": add["path"], "dataChange": True, "deletionTimestamp": 1, "size": add["size"]}
    (log / f"{version + 1:020d}.json").write_text(
        json.dumps({"remove": remove}) + "\n" + json.dumps({"add": {**add, "deletionVector": dv}})
    )
    return str(root / add["path"])


def test_delta_deletion_vectors_leave_their_rows_out(tmp_path: Path) -> None:
    from deltalake import QueryBuilder

    root = tmp_path / "dv"
    batch = _batch(range(2), 5)
    write_deltalake(root, batch, configuration={"delta.enableDeletionVectors": "true"})
    n = batch.num_rows
    deleted = [0, 1, 17, 400, n - 1]  # n - 1: the newest row
    path = _add_deletion_vector(root, deleted)
    assert len(pa.table(DeltaTable(root).deletion_vectors())) == 1
    spec = ScoreSpec(path=str(root), format="delta", segment_column="segment")
    got = read_scores(spec, ALL, with_timestamps=True)
    plain = read_scores(ScoreSpec(path=path, segment_column="segment"), ALL, with_timestamps=True)
    keep = np.ones(n, dtype=bool)
    keep[deleted] = False
    assert got.rows == n - len(deleted)
    assert np.array_equal(got.values, plain.values[keep])
    assert got.timestamps is not None
    assert plain.timestamps is not None
    assert np.array_equal(got.timestamps, plain.timestamps[keep])
    # delta-rs's own query engine (DataFusion, which applies deletion vectors) agrees
    theirs = pa.table(QueryBuilder().register("t", DeltaTable(root)).execute("select * from t"))
    assert np.array_equal(np.sort(got.values), np.sort(theirs.column("score").to_numpy()))
    # the newest row is deleted: freshness is the newest row left
    newest = theirs.column("timestamp").to_pylist()
    assert latest_timestamp(spec) == max(newest)
    # the same, as summaries in row groups, and for a window inside the file
    grid = _grid(spec)
    inside = Window(start=T0 + timedelta(minutes=1), end=T0 + HOUR)
    part = read_summary_part(spec, inside, grid)
    assert part.rows == read_scores(spec, inside).rows
    assert sum(s.rows for s in part.summaries.values()) == part.rows


def test_delta_deletion_vectors_through_a_link_or_dot_dot_are_matched(tmp_path: Path) -> None:
    """delta-rs names the deletion vectors' files under its canonical root (links and '..'
    resolved): through a linked path, or a relative scores.path joined as 'conf/../lake',
    they never matched the table's files and the table was refused ('only 0 could be
    matched'), with a hint to purge them."""
    root = tmp_path / "lake"
    batch = _batch(range(2), 5)
    write_deltalake(root, batch, configuration={"delta.enableDeletionVectors": "true"})
    _add_deletion_vector(root, [0, 1, 2])
    (tmp_path / "link").symlink_to(root)
    (tmp_path / "conf").mkdir()
    for path in (root, tmp_path / "link", f"{tmp_path}/conf/../lake"):
        clear_cache()
        got = read_scores(ScoreSpec(path=str(path), format="delta"), ALL)
        assert got.rows == batch.num_rows - 3, path


def test_delta_deletion_vectors_leave_outcome_rows_out(tmp_path: Path) -> None:
    """Outcomes too: rows a deletion vector removes are not averaged into their query's
    outcome, in a window that covers the file and in one that cuts it (only the scores path
    was tested; dropping the outcome reader's mask went unseen)."""
    root = tmp_path / "dv_outcomes"
    batch = _batch(range(2), 5)
    values = np.linspace(0.0, 1.0, batch.num_rows)
    values[[0, 3]] = 100.0  # the deleted rows, far from the rest
    batch = batch.append_column("outcome", pa.array(values))
    write_deltalake(root, batch, configuration={"delta.enableDeletionVectors": "true"})
    path = _add_deletion_vector(root, [0, 3])
    spec = OutcomeSpec(path=str(root), format="delta")
    stamps = pa.table(batch).column("timestamp").to_pylist()
    cut = Window(start=min(stamps), end=sorted(stamps)[batch.num_rows // 2])
    for window in (ALL, cut):
        inside = sum(window.start <= stamps[i] < window.end for i in (0, 3))
        assert inside >= 1  # each window holds a deleted row
        got = read_outcomes(spec, window)
        plain = read_outcomes(OutcomeSpec(path=path), window)
        assert got.rows == plain.rows - inside
        assert got.outcomes.max() < 1.0 + 1e-12  # no deleted 100 averaged in
        assert plain.outcomes.max() > 1.0  # the file alone holds them


def test_deleted_rows_are_no_evaluation_run(tmp_path: Path) -> None:
    """The run times the runner splits into evaluation runs leave a table's deleted rows out,
    as the outcomes do: a bad run written, then DELETEd (a deletion vector after OPTIMIZE),
    hid a stale outcome feed and looked like a golden set with 0 % pairing coverage."""
    root = tmp_path / "dv_runs"
    good, bad = np.datetime64("2026-12-01T03:00", "us"), np.datetime64("2026-12-02T03:00", "us")
    batch = pa.table(
        {
            "timestamp": pa.array([good] * 4 + [bad] * 4, pa.timestamp("us")),
            "query_id": ["a", "b", "c", "d"] * 2,
            "outcome": [0.8] * 4 + [0.0] * 4,
        }
    )
    write_deltalake(root, batch, configuration={"delta.enableDeletionVectors": "true"})
    path = _add_deletion_vector(root, [4, 5, 6, 7])
    spec = OutcomeSpec(path=str(root), format="delta")
    window = Window(start=datetime(2026, 11, 30, tzinfo=UTC), end=datetime(2026, 12, 5, tzinfo=UTC))
    times = read_run_times(spec, window)
    good_ns = int(good.astype("datetime64[ns]").astype(np.int64))
    assert times.tolist() == [good_ns] * 4
    assert read_run_times(OutcomeSpec(path=path), window).size == 8  # the file alone holds both
    assert read_outcomes(spec, window).rows == 4


def test_a_new_deletion_vector_changes_the_files_bucket_fingerprint(tmp_path: Path) -> None:
    """A deletion vector changes a file's live rows but not its path, size or mtime: the
    file's identity for the bucket cache carries its deleted rows, so the buckets it feeds are
    read again (with the rows left out), and only those."""
    from monitor.incremental.windows import _fingerprints

    root = tmp_path / "dv"
    write_deltalake(
        root, _batch(range(2), 5), configuration={"delta.enableDeletionVectors": "true"}
    )
    write_deltalake(root, _batch(range(4, 6), 6), mode="append")
    spec = ScoreSpec(path=str(root), format="delta", segment_column="segment")
    step = HOUR // timedelta(microseconds=1) * 1000
    starts = np.arange(ALL.start_ns, ALL.end_ns, step, dtype=np.int64)
    before = window_file_stats(spec, ALL)
    assert all(f.deletes == "" for f in before)
    prints = _fingerprints(before, starts, step)
    path = _add_deletion_vector(root, [0, 3])
    clear_cache()  # a new snapshot; the files on disk are untouched
    after = window_file_stats(spec, ALL)
    changed = {f.path for f in after if f.deletes}
    assert changed == {path}
    assert sorted((f.path, f.size, f.mtime_ns) for f in after) == sorted(
        (f.path, f.size, f.mtime_ns) for f in before
    )
    now = _fingerprints(after, starts, step)
    moved = [i for i, (a, b) in enumerate(zip(prints, now, strict=True)) if a != b]
    assert moved == [0, 1]  # the first file's hours, not the appended ones
    assert window_file_stats(spec, ALL) == after  # memoised: the same digest again


def test_delta_errors_name_the_table(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="is not a Delta table") as info:
        read_scores(ScoreSpec(path=str(tmp_path / "nowhere"), format="delta"), ALL)
    assert info.value.path == str(tmp_path / "nowhere")
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(SourceNotFoundError, match="is not a Delta table"):
        read_scores(ScoreSpec(path=str(plain), format="delta"), ALL)
    broken = tmp_path / "broken"
    write_deltalake(broken, _batch(range(1), 6))
    (broken / "_delta_log" / f"{1:020d}.json").write_text("{not json\n")
    with pytest.raises(SourceError, match="Delta log cannot be read") as info2:
        read_scores(ScoreSpec(path=str(broken), format="delta"), ALL)
    assert info2.value.path == str(broken)


def test_a_missing_extra_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "deltalake", None)  # what an interpreter without it sees
    monkeypatch.setitem(sys.modules, "pyiceberg.catalog", None)
    for spec in (
        ScoreSpec(path=str(tmp_path / "t"), format="delta"),
        ScoreSpec(path="db.scores", format="iceberg"),
    ):
        with pytest.raises(SourceError, match=r"pip install 'retrieval-monitor\[tables\]'") as info:
            read_scores(spec, ALL)
        assert info.value.path == spec.path


def test_delta_partition_outside_its_date_is_the_hive_error(tmp_path: Path) -> None:
    root = tmp_path / "dated"
    batch = _batch(range(2), 8)
    batch = batch.append_column("date", pa.array(["2026-11-24"] * batch.num_rows))
    write_deltalake(root, batch, partition_by=["date"])
    with pytest.raises(SchemaError, match="outside its partition date=2026-11-24"):
        read_scores(ScoreSpec(path=str(root), format="delta"), ALL)


# -- Iceberg ---------------------------------------------------------------------------------


def _catalog(tmp_path: Path) -> tuple[tuple[str, str], ...]:
    return (
        ("name", "test"),
        ("type", "sql"),
        ("uri", f"sqlite:///{tmp_path / 'catalog.db'}"),
        ("warehouse", (tmp_path / "warehouse").as_uri()),
    )


@pytest.fixture
def iceberg(tmp_path: Path) -> tuple[tuple[str, str], ...]:
    """``db.scores``: two appends (hours 0-6, 6-12 with NaN / inf), then an overwrite of hour
    3's rows by a filter (copy-on-write: the first file is replaced)."""
    from pyiceberg.catalog import load_catalog

    clear_cache()
    props = _catalog(tmp_path)
    catalog = load_catalog("test", **dict(props[1:]))
    catalog.create_namespace("db")
    first = _batch(range(6), 11)
    table = catalog.create_table("db.scores", schema=first.schema)
    table.append(first)
    table.append(_batch(range(6, 12), 12, bad=True))
    table.delete(
        f"timestamp >= '{(T0 + 3 * HOUR).isoformat()}' and "
        f"timestamp < '{(T0 + 4 * HOUR).isoformat()}'"
    )
    return props


def _iceberg_live(props: tuple[tuple[str, str], ...]) -> list[str]:
    from pyiceberg.catalog import load_catalog

    table = load_catalog("test", **dict(props[1:])).load_table("db.scores")
    return [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]


def test_iceberg_reads_exactly_its_live_files(
    iceberg: tuple[tuple[str, str], ...], tmp_path: Path
) -> None:
    spec = ScoreSpec(
        path="db.scores",
        format="iceberg",
        catalog=iceberg,
        segment_column="segment",
        max_invalid_share=0.1,
    )
    live = _iceberg_live(iceberg)
    on_disk = list((tmp_path / "warehouse").rglob("*.parquet"))
    assert len(on_disk) > len(live)
    files = ScoreSpec(
        path=str(_link_tree(live, tmp_path / "warehouse", tmp_path / "live")),
        segment_column="segment",
        max_invalid_share=0.1,
    )
    grid = _grid(spec)
    for window, bucket in (
        (ALL, None),
        (Window(start=T0 + 2 * HOUR + timedelta(minutes=5), end=T0 + 9 * HOUR), HOUR),
    ):
        _same_scores(spec, files, window)
        same_parts(
            read_summary_part(spec, window, grid, bucket=bucket),
            read_summary_part(files, window, grid, bucket=bucket),
            per_file=False,
        )
    got = read_scores(spec, ALL, with_timestamps=True)
    assert got.timestamps is not None
    hour3 = Window(start=T0 + 3 * HOUR, end=T0 + 4 * HOUR)
    assert not ((got.timestamps >= hour3.start_ns) & (got.timestamps < hour3.end_ns)).any()
    assert 0 < got.rows < 12 * 400
    # pruning by the manifests' bounds: hour 10 is in the second append's file only
    clear_cache()
    late = Window(start=T0 + 10 * HOUR, end=T0 + 11 * HOUR)
    planned = window_files(spec, late)
    assert len(planned) == 1
    assert planned[0] in live
    assert {key[1] for key in _FOOTERS._entries} == set(planned)
    assert pin_snapshot(spec).snapshot == current_snapshot(spec) is not None


@pytest.mark.parametrize("warehouse", ["warehouse", "my wh%41"])
def test_iceberg_partition_values_and_paths_that_need_escaping_are_read(
    tmp_path: Path, warehouse: str
) -> None:
    """pyiceberg writes a file's path as it is on disk (a directory ``seg=c%2Fd`` for the
    value 'c/d'): unquoted, the reader looked for ``seg=c/d`` and refused the whole table
    ("disappeared while reading"), for any non-ASCII segment too, and for a warehouse path
    with a space or a '%'."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.transforms import IdentityTransform

    clear_cache()
    props = (
        ("name", "test"),
        ("type", "sql"),
        ("uri", f"sqlite:///{tmp_path / 'catalog.db'}"),
        ("warehouse", (tmp_path / warehouse).as_uri()),
    )
    catalog = load_catalog("test", **dict(props[1:]))
    catalog.create_namespace("db")
    segments = ["a b", "c/d", "e%f", "plain", "\u00fc", "x:y"]
    rows = pa.table(
        {
            "timestamp": pa.array(
                [T0 + timedelta(minutes=i) for i in range(len(segments))],
                type=pa.timestamp("us", tz="UTC"),
            ),
            "score": np.arange(len(segments), dtype=np.float64),
            "seg": segments,
        }
    )
    table = catalog.create_table("db.s", schema=rows.schema)
    with table.update_spec() as update:
        update.add_field("seg", IdentityTransform(), "seg")
    catalog.load_table("db.s").append(rows)
    spec = ScoreSpec("db.s", format="iceberg", catalog=props, segment_column="seg")
    got = read_scores(spec, Window(start=T0, end=T0 + timedelta(days=1)))
    assert got.rows == len(segments)
    assert sorted(got.segment_names) == sorted(segments)


def test_iceberg_outcome_run_times(iceberg: tuple[tuple[str, str], ...], tmp_path: Path) -> None:
    """The runner splits an outcome table's rows into evaluation runs by their timestamps:
    those of the live files, found through the catalog (the table's name is no path)."""
    spec = OutcomeSpec(path="db.scores", format="iceberg", catalog=iceberg)
    live = _iceberg_live(iceberg)
    files = OutcomeSpec(path=str(_link_tree(live, tmp_path / "warehouse", tmp_path / "live")))
    times = read_run_times(spec, ALL)
    assert times.size > 0
    assert np.array_equal(times, read_run_times(files, ALL))


def test_iceberg_prunes_by_hidden_day_partitions_without_statistics(tmp_path: Path) -> None:
    """day(timestamp) partitions and no column bounds (metrics mode none): files committed
    through pyiceberg's snapshot API with their partition values only."""
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.transforms import DayTransform
    from pyiceberg.typedef import Record

    clear_cache()
    props = _catalog(tmp_path)
    catalog = load_catalog("test", **dict(props[1:]))
    catalog.create_namespace("db")
    days = [_batch(range(24), 13), _batch(range(24, 48), 14)]
    table = catalog.create_table(
        "db.daily", schema=days[0].schema, properties={"write.metadata.metrics.default": "none"}
    )
    with table.update_spec() as update:
        update.add_field("timestamp", DayTransform(), "day")
    epoch_day = (T0 - datetime(1970, 1, 1, tzinfo=UTC)).days
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for k, rows in enumerate(days):
            path = tmp_path / f"day-{k}.parquet"
            with_ids = pa.schema(
                [
                    f.with_metadata({"PARQUET:field_id": str(i + 1)})
                    for i, f in enumerate(rows.schema)
                ]
            )
            pq.write_table(rows.cast(with_ids), path)
            data_file = DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=path.as_uri(),
                file_format=FileFormat.PARQUET,
                partition=Record(epoch_day + k),
                record_count=rows.num_rows,
                file_size_in_bytes=path.stat().st_size,
            )
            data_file.spec_id = 1
            append.append_data_file(data_file)
    table = catalog.load_table("db.daily")
    tasks = list(table.scan().plan_files())
    assert len(tasks) == 2
    assert all(not t.file.lower_bounds for t in tasks)
    assert table.scan().to_arrow().num_rows == 48 * 400
    spec = ScoreSpec(path="db.daily", format="iceberg", catalog=props)
    second_day = Window(start=T0 + 30 * HOUR, end=T0 + 31 * HOUR)
    clear_cache()
    planned = window_files(spec, second_day)
    assert planned == [str(tmp_path / "day-1.parquet")]
    assert {key[1] for key in _FOOTERS._entries} == set(planned)  # day one never opened
    assert read_scores(spec, Window(start=T0, end=T0 + 48 * HOUR)).rows == 48 * 400


def test_iceberg_errors_name_the_table(
    iceberg: tuple[tuple[str, str], ...], tmp_path: Path
) -> None:
    with pytest.raises(SourceNotFoundError, match="no such table in the Iceberg catalog 'test'"):
        read_scores(ScoreSpec(path="db.nope", format="iceberg", catalog=iceberg), ALL)
    with pytest.raises(SourceError, match="cannot be loaded") as info:
        read_scores(
            ScoreSpec(path="db.scores", format="iceberg", catalog=(("type", "nonesuch"),)), ALL
        )
    assert info.value.path == "db.scores"
    gone = ScoreSpec(path="db.scores", format="iceberg", catalog=iceberg, snapshot=12345)
    with pytest.raises(SourceError, match="has no snapshot 12345"):
        read_scores(gone, ALL)


def test_iceberg_position_deletes_leave_their_rows_out(
    iceberg: tuple[tuple[str, str], ...], tmp_path: Path
) -> None:
    """A position delete file committed through pyiceberg's snapshot API (pyiceberg's own scan
    applies it); an equality delete file, which neither reader applies, is refused."""
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    def commit(rows: pa.Table, name: str, content: Any, **kw: Any) -> None:
        path = tmp_path / "warehouse" / "db" / "scores" / "data" / name
        pq.write_table(rows, path)
        data_file = DataFile.from_args(
            content=content,
            file_path=path.as_uri(),
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=rows.num_rows,
            file_size_in_bytes=path.stat().st_size,
            **kw,
        )
        data_file.spec_id = 0
        table = load_catalog("test", **dict(iceberg[1:])).load_table("db.scores")
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            append.append_data_file(data_file)

    def scan() -> pa.Table:
        return load_catalog("test", **dict(iceberg[1:])).load_table("db.scores").scan().to_arrow()

    tasks = list(
        load_catalog("test", **dict(iceberg[1:])).load_table("db.scores").scan().plan_files()
    )
    assert len(tasks) >= 2
    first, second = tasks[0].file.file_path, tasks[1].file.file_path
    rows_before = scan().num_rows
    fields = [
        pa.field("file_path", pa.string(), False, {"PARQUET:field_id": "2147483546"}),
        pa.field("pos", pa.int64(), False, {"PARQUET:field_id": "2147483545"}),
    ]
    positions = pa.table(
        {"file_path": [first, first, second], "pos": [0, 5, 3]}, schema=pa.schema(fields)
    )
    commit(positions, "deletes-0.parquet", DataFileContent.POSITION_DELETES)
    theirs = scan()
    assert theirs.num_rows == rows_before - 3
    spec = ScoreSpec(path="db.scores", format="iceberg", catalog=iceberg, max_invalid_share=0.1)
    got = read_scores(spec, ALL)
    assert got.rows == theirs.num_rows
    score = theirs.column("score").to_numpy()
    assert np.array_equal(np.sort(got.values), np.sort(score[np.isfinite(score)]))
    assert not inspect_source(spec).problems
    # an equality delete: pyiceberg does not apply them either; refused, naming the table
    equality = pa.table(
        {"score": pa.array([0.5])},
        schema=pa.schema([pa.field("score", pa.float64(), True, {"PARQUET:field_id": "2"})]),
    )
    commit(equality, "deletes-1.parquet", DataFileContent.EQUALITY_DELETES, equality_ids=[2])
    with pytest.raises(SourceError, match="equality deletes") as info:
        read_scores(spec, ALL)
    assert info.value.path == "db.scores"


# -- configuration ---------------------------------------------------------------------------


def test_config_keys_for_tables(tmp_path: Path) -> None:
    text = f"""
[[monitors]]
name = "delta"
scores.format = "delta"
scores.path = "tables/scores"
outcomes.path = "data/outcomes"

[[monitors]]
name = "iceberg"
scores.format = "iceberg"
scores.table = "db.scores"
scores.catalog.name = "prod"
scores.catalog.type = "sql"
scores.catalog.uri = "sqlite:///{tmp_path}/catalog.db"
outcomes.format = "delta"
outcomes.path = "/data/outcomes"
"""
    path = tmp_path / "monitor.toml"
    path.write_text(text)
    a, b = load_config(path).monitors
    assert (a.scores.format, a.scores.path) == ("delta", str(tmp_path / "tables/scores"))
    assert a.outcomes.format == "parquet"
    assert (b.scores.format, b.scores.path) == ("iceberg", "db.scores")
    assert dict(b.scores.catalog) == {
        "name": "prod",
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
    }
    assert "sqlite" not in repr(b.scores)  # catalog properties may hold credentials
    assert (b.outcomes.format, b.outcomes.path) == ("delta", "/data/outcomes")


def test_config_table_problems_are_reported(tmp_path: Path) -> None:
    text = """
[[monitors]]
name = "bad"
scores.format = "orc"
scores.path = "x"
outcomes.format = "iceberg"
outcomes.path = "y"
outcomes.catalog.uri = 3

[[monitors]]
name = "judged"
scores.path = "x"
outcomes.kind = "judged_runs"
outcomes.format = "delta"
outcomes.runs = "runs"
outcomes.judgments = "qrels"
"""
    path = tmp_path / "monitor.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "monitors[0].scores.format: must be 'parquet', 'delta' or 'iceberg'; got 'orc'" in text
    assert "monitors[0].outcomes.path: unknown key" in text
    assert "monitors[0].outcomes.table: is required" in text
    assert "monitors[0].outcomes.catalog: must be a table of strings" in text
    assert "judged runs are read from parquet or TREC files only" in text


# -- engines ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_engine():  # type: ignore[no-untyped-def]
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    engine = make_engine("dask", dask_address="local")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def spark_engine():  # type: ignore[no-untyped-def]
    pytest.importorskip("pyspark", reason="the optional extra .[spark] is not installed")
    engine = make_engine("spark", spark_master="local[2]")
    yield engine
    engine.close()


@pytest.fixture
def delta_dv(tmp_path: Path) -> Path:
    """Partitioned by segment, deletion vectors on, two appends, then a deletion vector."""
    clear_cache()
    root = tmp_path / "scores_dv"
    options = {"delta.enableDeletionVectors": "true"}
    write_deltalake(root, _batch(range(6), 21), partition_by=["segment"], configuration=options)
    write_deltalake(root, _batch(range(6, 12), 22, bad=True), mode="append")
    _add_deletion_vector(root, [0, 2, 3, 99])
    return root


@pytest.mark.engines
@pytest.mark.integration
@pytest.mark.parametrize("kind", ["dask", "spark"])
def test_engines_summarise_a_delta_table_as_local(
    delta: Path, delta_dv: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    engine = request.getfixturevalue(f"{kind}_engine")
    for root in (delta, delta_dv):
        spec = _delta_spec(root)
        grid = _grid(spec)
        local = LocalEngine()
        for window, bucket in (
            (ALL, HOUR),
            (Window(start=T0 + 7 * HOUR, end=T0 + 21 * HOUR), None),
            (Window(start=T0 + 13 * HOUR, end=T0 + 19 * HOUR), None),  # no file: all pruned
        ):
            ours, theirs = (
                local.summaries(spec, window, grid, bucket=bucket),
                engine.summaries(spec, window, grid, bucket=bucket),
            )
            same_parts(ours, theirs, per_file=False)
            assert ours.per_file == theirs.per_file
    assert read_scores(_delta_spec(delta_dv), ALL).rows == 12 * 400 - 4
