"""``read_summaries`` (issue 13): a window's scores as mergeable summaries, one row group at a
time, against ``summarize`` of what ``read_scores`` returns for the same files and window."""

from __future__ import annotations

import dataclasses
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from monitor.errors import BadValuesError, SourceError
from monitor.sources import (
    ScoreSpec,
    SummaryPart,
    Window,
    clear_cache,
    read_scores,
    read_summaries,
    read_summary_part,
    write_parquet,
)
from monitor.stats import Grid, build_baseline, summarize, summary_grid

T0 = datetime(2026, 11, 23, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _tree(root: Path, *, hours: int = 30, per_hour: int = 400, seed: int = 5) -> None:
    """Hive partitions by day, a file per 6 hours in 3 row groups, a segment column, and null,
    NaN and infinite scores among the rows."""
    g = np.random.default_rng(seed)
    n = hours * per_hour
    ts = np.datetime64(T0.replace(tzinfo=None), "us") + (
        np.sort(g.integers(0, hours * 3_600_000_000, n)).astype("timedelta64[us]")
    )
    score = g.lognormal(-1, 0.8, n)
    score[g.random(n) < 0.2] = 0.0
    score[g.random(n) < 0.01] = np.nan
    score[g.random(n) < 0.005] = np.inf
    segment = g.choice(np.array(["de", "en", "fr"]), size=n)
    six = (ts - ts[0]).astype("timedelta64[h]").astype(np.int64) // 6
    for k in np.unique(six):
        sel = six == k
        day = str(ts[sel][0].astype("datetime64[D]"))
        write_parquet(
            root / f"date={day}" / f"part-{k:02d}.parquet",
            {"timestamp": ts[sel], "score": score[sel], "segment": segment[sel]},
            row_group_size=max(1, int(sel.sum()) // 3),
        )


def same_parts(a: SummaryPart, b: SummaryPart, *, per_file: bool = True) -> None:
    """Two summary parts are equal: every summary's cells and scalars, the rows and invalid
    counts, and the per-file invalid counts (``per_file``: file by file; else their total, for
    parts whose files are named differently, as a table's and its copies')."""
    assert list(a.summaries) == list(b.summaries)
    for key, x in a.summaries.items():
        y = b.summaries[key]
        assert np.array_equal(x.counts, y.counts), key
        assert (x.rows, x.invalid, x.zeros, x.newest_ns) == (
            y.rows,
            y.invalid,
            y.zeros,
            y.newest_ns,
        )
    assert (a.rows, a.null, a.nan, a.inf, a.unplaced) == (b.rows, b.null, b.nan, b.inf, b.unplaced)
    if per_file:
        assert a.per_file == b.per_file
    else:
        assert sum(a.per_file.values()) == sum(b.per_file.values())


def _grid(spec: ScoreSpec, window: Window) -> Grid:
    ref = read_scores(spec, window).values
    baseline = build_baseline(ref)
    return summary_grid(baseline.sorted_reference, baseline.edges, n_current=ref.size)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    clear_cache()
    _tree(tmp_path / "scores")
    return tmp_path / "scores"


def test_window_summaries_equal_summarize_of_read_scores(tree: Path) -> None:
    spec = ScoreSpec(path=str(tree), segment_column="segment", max_invalid_share=0.1)
    window = Window(start=T0 + 3 * HOUR + timedelta(minutes=17), end=T0 + 27 * HOUR)
    grid = _grid(spec, Window(start=T0, end=T0 + 30 * HOUR))
    got = read_summaries(spec, window, grid)
    scores = read_scores(spec, window, with_timestamps=True)
    names = np.asarray(scores.segment_names)[scores.segment_codes]
    assert {s for s, _ in got} == set(scores.segment_names)
    for (segment, start), summary in got.items():
        assert start == window.start_ns
        expected = summarize(scores.values[names == segment], grid)
        np.testing.assert_array_equal(summary.counts, expected.counts)
        assert summary.zeros == expected.zeros
    total = sum(got.values(), start=summarize(np.zeros(0), grid))
    dropped = scores.dropped_null + scores.dropped_nan + scores.dropped_inf
    assert dropped > 0
    assert (total.rows, total.invalid) == (scores.rows, dropped)
    assert scores.timestamps is not None
    assert total.newest_ns == int(scores.timestamps.max())


def test_hourly_buckets_hold_their_hours_and_sum_to_the_window(tree: Path) -> None:
    spec = ScoreSpec(path=str(tree), max_invalid_share=0.1)
    window = Window(start=T0 + 2 * HOUR, end=T0 + 8 * HOUR)
    grid = _grid(spec, window)
    got = read_summaries(spec, window, grid, bucket=HOUR)
    assert sorted(start for _, start in got) == [
        window.start_ns + k * 3_600_000_000_000 for k in range(6)
    ]
    for (_, start), summary in got.items():
        hour = Window(
            start=datetime.fromtimestamp(start / 1e9, UTC),
            end=datetime.fromtimestamp(start / 1e9, UTC) + HOUR,
        )
        np.testing.assert_array_equal(
            summary.counts, summarize(read_scores(spec, hour).values, grid).counts
        )
    whole = read_summaries(spec, window, grid)[("", window.start_ns)]
    merged = sum(got.values(), start=summarize(np.zeros(0), grid))
    np.testing.assert_array_equal(merged.counts, whole.counts)
    assert (merged.rows, merged.invalid) == (whole.rows, whole.invalid)


@pytest.mark.parametrize("segment_column", [None, "segment"])
def test_each_hours_invalid_scores_count_in_that_hour(
    tree: Path, segment_column: str | None
) -> None:
    """Rows and invalid scores per hourly bucket (its summaries' plus its unplaced rows) are
    the hour's own, as ``read_scores`` of the hour counts them, although each row group spans
    two hours: they once all counted in the row group's first bucket."""
    spec = ScoreSpec(path=str(tree), segment_column=segment_column, max_invalid_share=0.1)
    window = Window(start=T0 + 2 * HOUR, end=T0 + 20 * HOUR)
    part = read_summary_part(spec, window, _grid(spec, window), bucket=HOUR)
    for k in range(18):
        start = window.start_ns + k * 3_600_000_000_000
        hour = Window(start=T0 + (2 + k) * HOUR, end=T0 + (3 + k) * HOUR)
        want = read_scores(spec, hour)
        held = [s for (_, b), s in part.summaries.items() if b == start]
        unplaced = part.unplaced_at.get(start, 0)
        assert sum(s.rows for s in held) + unplaced == want.rows, k
        bad = want.dropped_null + want.dropped_nan + want.dropped_inf
        assert sum(s.invalid for s in held) + unplaced == bad, k
    assert part.unplaced == sum(part.unplaced_at.values())


def test_a_late_file_changes_only_its_bucket(tree: Path) -> None:
    spec = ScoreSpec(path=str(tree), max_invalid_share=0.1)
    window = Window(start=T0, end=T0 + 6 * HOUR)
    grid = _grid(spec, window)
    before = read_summaries(spec, window, grid, bucket=HOUR)
    late = np.datetime64((T0 + 4 * HOUR).replace(tzinfo=None), "us") + np.arange(50).astype(
        "timedelta64[s]"
    )
    write_parquet(
        tree / "date=2026-11-23" / "late.parquet",
        {"timestamp": late, "score": np.full(50, 9.0), "segment": np.full(50, "en")},
    )
    clear_cache()
    after = read_summaries(spec, window, grid, bucket=HOUR)
    changed = [key for key in before if not np.array_equal(before[key].counts, after[key].counts)]
    assert changed == [("", window.start_ns + 4 * 3_600_000_000_000)]


def test_too_many_invalid_scores_raise_as_read_scores_does(tree: Path) -> None:
    spec = ScoreSpec(path=str(tree), max_invalid_share=0.001)
    window = Window(start=T0, end=T0 + 6 * HOUR)
    grid = Grid(np.array([0.0, 1.0]))
    with pytest.raises(BadValuesError) as ours:
        read_summaries(spec, window, grid)
    with pytest.raises(BadValuesError) as theirs:
        read_scores(spec, window)
    assert str(ours.value) == str(theirs.value)


def test_memory_is_a_row_group_not_the_window(tmp_path: Path) -> None:
    """2M scores in 40 row groups: the summaries' peak allocations stay near one row group's,
    far below the window's values (16 MB)."""
    g = np.random.default_rng(1)
    n, groups = 2_000_000, 40
    ts = np.datetime64(T0.replace(tzinfo=None), "us") + np.arange(n).astype("timedelta64[ms]")
    write_parquet(
        tmp_path / "big.parquet",
        {"timestamp": ts, "score": g.random(n)},
        row_group_size=n // groups,
    )
    spec = ScoreSpec(path=str(tmp_path / "big.parquet"))
    window = Window(start=T0, end=T0 + timedelta(hours=1))
    grid = Grid(np.linspace(0, 1, 101))
    read_summaries(spec, window, grid)  # footers cached
    tracemalloc.start()
    got = read_summaries(spec, window, grid)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sum(s.n for s in got.values()) == n
    assert peak < 16_000_000 / 4, peak


def test_many_row_groups_of_one_bucket_hold_one_summary_not_one_each(tmp_path: Path) -> None:
    """400 row groups of one hour on an 18k-point grid: each row group's dense summary was
    kept until the end (110 MiB); they are added as they come, so the read holds about one
    summary and one row group whatever the row group count."""
    g = np.random.default_rng(1)
    n, groups = 200_000, 400
    ts = np.datetime64(T0.replace(tzinfo=None), "us") + np.sort(
        g.integers(0, 3_600_000_000, n)
    ).astype("timedelta64[us]")
    write_parquet(
        tmp_path / "many.parquet",
        {"timestamp": ts, "score": g.normal(0, 1, n)},
        row_group_size=n // groups,
    )
    spec = ScoreSpec(path=str(tmp_path / "many.parquet"))
    window = Window(start=T0, end=T0 + timedelta(hours=1))
    grid = Grid(np.sort(g.normal(0, 1, 18_000)))
    one = grid.n_cells * 8
    read_summaries(spec, window, grid, bucket=HOUR)  # footers cached
    tracemalloc.start()
    got = read_summaries(spec, window, grid, bucket=HOUR)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sum(s.n for s in got.values()) == n
    assert peak < 8 * one, (peak, one)


def test_planned_tasks_read_without_listing_and_add_up_to_the_window(tree: Path) -> None:
    """An engine's tasks (``window_tasks``) read their own file as the caller planned it, hive
    partitions and segments included, without walking the source again: their parts add up to
    the window's, a file added after the planning is not read by them, and a planned file that
    vanished is an error naming it, never a silently smaller window."""
    from monitor.sources import read_summary_part, window_tasks

    spec = ScoreSpec(path=str(tree), segment_column="segment", max_invalid_share=0.1)
    window = Window(start=T0 + 2 * HOUR, end=T0 + 20 * HOUR)
    grid = _grid(spec, window)
    tasks = window_tasks(spec, window)
    assert len(tasks) > 2
    whole = read_summary_part(spec, window, grid, bucket=HOUR)
    write_parquet(  # lands after the planning: not the tasks' business
        tree / "date=2026-11-23" / "zz-late.parquet",
        {
            "timestamp": np.array([np.datetime64((T0 + 5 * HOUR).replace(tzinfo=None), "us")]),
            "score": np.array([1.0]),
            "segment": np.array(["en"]),
        },
    )
    parts = [read_summary_part(spec, window, grid, bucket=HOUR, task=t) for t in tasks]
    total: SummaryPart = parts[0]
    for p in parts[1:]:
        total = total + p
    assert list(total.summaries) == list(whole.summaries)
    for key, s in whole.summaries.items():
        np.testing.assert_array_equal(total.summaries[key].counts, s.counts)
    assert (total.rows, total.null, total.nan, total.inf) == (
        whole.rows,
        whole.null,
        whole.nan,
        whole.inf,
    )
    Path(tasks[0].path).unlink()
    clear_cache()
    with pytest.raises(SourceError) as err:
        read_summary_part(spec, window, grid, bucket=HOUR, task=tasks[0])
    assert tasks[0].path in str(err.value)


def test_a_broken_file_after_the_window_is_not_opened(tree: Path) -> None:
    """The in-process read opens what an engine's planned tasks open: a file still being
    written in a partition after the window (a producer writing in place) fails neither, so
    the local engine and Dask or Spark agree on the same tree."""
    from monitor.sources import window_tasks

    spec = ScoreSpec(path=str(tree), segment_column="segment", max_invalid_share=0.1)
    window = Window(start=T0, end=T0 + 24 * HOUR)
    grid = _grid(spec, window)
    before = read_summary_part(spec, window, grid, bucket=HOUR)
    later = tree / "date=2026-11-25"
    later.mkdir()
    (later / "inprogress.parquet").write_bytes(b"PAR1 partial")
    clear_cache()
    same_parts(read_summary_part(spec, window, grid, bucket=HOUR), before)
    tasks = window_tasks(spec, window)
    parts = [read_summary_part(spec, window, grid, bucket=HOUR, task=t) for t in tasks]
    assert sum(p.rows for p in parts) == before.rows
    with pytest.raises(SourceError, match=r"inprogress\.parquet"):  # a window that covers it
        read_summary_part(spec, Window(start=T0, end=T0 + 72 * HOUR), grid, bucket=HOUR)


def test_a_segment_column_of_many_values_is_refused_as_the_read_meets_them(
    tmp_path: Path,
) -> None:
    """A request id written as the segment: the whole read, the summary read and an engine's
    task each stop at the first file past ``max_segments`` distinct values, naming it and the
    column, where the check once split every row by segment (minutes, or out of memory on
    the summary path) before it counted them."""
    from monitor.sources import window_tasks

    root = tmp_path / "scores"
    for k in range(3):
        n = 500
        ts = np.datetime64((T0 + k * HOUR).replace(tzinfo=None), "us")
        write_parquet(
            root / "date=2026-11-23" / f"part-{k}.parquet",
            {
                "timestamp": ts + np.arange(n).astype("timedelta64[s]"),
                "score": np.linspace(0.0, 1.0, n),
                "segment": np.array([f"req-{k}-{i}" for i in range(n)]),
            },
        )
    window = Window(start=T0, end=T0 + 3 * HOUR)
    few = ScoreSpec(path=str(root), segment_column="segment", max_segments=20)
    first = str(root / "date=2026-11-23" / "part-0.parquet")
    grid = Grid(np.linspace(0.0, 1.0, 11))
    for read in (
        lambda: read_scores(few, window),
        lambda: read_summary_part(few, window, grid, bucket=HOUR),
        lambda: read_summary_part(few, window, grid, task=window_tasks(few, window)[0]),
    ):
        clear_cache()
        with pytest.raises(SourceError) as err:
            read()
        text = str(err.value)
        for part in (first, "'segment'", "500 distinct segments", "max_segments=20"):
            assert part in text, text
    many = ScoreSpec(path=str(root), segment_column="segment", max_segments=1500)
    assert len(read_scores(many, window).segment_names) == 1500  # at the bound: read
    with pytest.raises(ValueError, match="max_segments"):
        ScoreSpec(path=str(root), max_segments=0)


def test_only_segments_with_kept_rows_count_against_max_segments(tmp_path: Path) -> None:
    """A dictionary's unused categories (a shared 30-market enum, 2 in use), the segments of a
    row group's rows outside the window, and those of rows dropped as invalid are no segment
    of the window: counted, they made a correct check an error at the default bound."""
    import pyarrow.parquet as pq

    n = 400
    ts = np.datetime64(T0.replace(tzinfo=None), "us") + (
        np.arange(n) * (2 * 3_600_000_000 // n)
    ).astype("timedelta64[us]")  # one row group over two hours
    markets = [f"market-{i}" for i in range(30)]
    used = pa.DictionaryArray.from_arrays(pa.array(np.arange(n) % 2, pa.int32()), pa.array(markets))
    late = [f"late-{i}" for i in range(n)]  # a distinct segment for each row of the 2nd hour
    straddle = [m if i < n // 2 else late[i] for i, m in enumerate(used.to_pylist())]
    score = np.linspace(0.0, 1.0, n)
    score[n // 2 - 60 : n // 2] = np.nan  # dropped rows, each with a segment of its own
    invalid = [f"bad-{i}" if np.isnan(score[i]) else m for i, m in enumerate(straddle)]
    root = tmp_path / "scores"
    root.mkdir()
    for name, segment in (("dict", used), ("straddle", pa.array(straddle))):
        pq.write_table(
            pa.table({"timestamp": ts, "score": np.linspace(0.0, 1.0, n), "segment": segment}),
            root / f"{name}.parquet",
        )
    pq.write_table(
        pa.table({"timestamp": ts, "score": score, "segment": pa.array(invalid)}),
        tmp_path / "invalid.parquet",
    )
    first_hour = Window(start=T0, end=T0 + HOUR)
    grid = Grid(np.linspace(0.0, 1.0, 11))
    for path, share in ((root, 0.01), (tmp_path / "invalid.parquet", 0.5)):
        spec = ScoreSpec(path=str(path), segment_column="segment", max_segments=3)
        spec = dataclasses.replace(spec, max_invalid_share=share)
        clear_cache()
        got = read_scores(spec, first_hour)
        assert set(got.segment_names) <= {"market-0", "market-1"}, got.segment_names
        part = read_summary_part(spec, first_hour, grid, bucket=HOUR)
        assert {seg for seg, _ in part.summaries} <= {"market-0", "market-1"}
    clear_cache()
    with pytest.raises(SourceError, match="max_segments=3"):  # the window holds them: refused
        read_scores(
            ScoreSpec(path=str(root), segment_column="segment", max_segments=3),
            Window(start=T0, end=T0 + 2 * HOUR),
        )


def test_segments_met_before_the_names_pass_the_bound_count_too(tmp_path: Path) -> None:
    """Files of segments a, b, c then d: the fourth segment passes max_segments = 3 although
    the last file alone holds one (the kept segments of the files read before the names
    passed the bound were not recorded, and four segments were read without an error)."""
    from monitor.sources import window_tasks

    for k, names in enumerate((["a", "b", "c"], ["d"])):
        ts = np.datetime64((T0 + k * HOUR).replace(tzinfo=None), "us")
        write_parquet(
            tmp_path / f"part-{k}.parquet",
            {
                "timestamp": ts + np.arange(30).astype("timedelta64[s]"),
                "score": np.linspace(0.0, 1.0, 30),
                "segment": np.array(names * (30 // len(names))),
            },
        )
    spec = ScoreSpec(path=str(tmp_path), segment_column="segment", max_segments=3)
    window = Window(start=T0, end=T0 + 2 * HOUR)
    grid = Grid(np.linspace(0.0, 1.0, 11))
    for read in (
        lambda: read_scores(spec, window),
        lambda: read_summary_part(spec, window, grid, bucket=HOUR),
    ):
        clear_cache()
        with pytest.raises(SourceError, match=r"4 distinct segments .* max_segments=3"):
            read()
    # an engine's task reads one file: each holds at most 3 (the check counts the union)
    for task in window_tasks(spec, window):
        read_summary_part(spec, window, grid, bucket=HOUR, task=task)


def test_row_groups_within_one_bucket_are_summarised_from_their_statistics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without segments, a row group inside the window whose timestamps' statistics fall in
    one bucket is summarised without decoding its timestamps (its rows are all kept, so the
    statistics' newest is theirs); one with an invalid score, or spanning two buckets, decodes
    them. Either way the buckets equal ``summarize`` of ``read_scores`` hour by hour, the newest
    timestamp being the newest valid row's."""
    from monitor.sources import scores as scores_module
    from monitor.sources.footers import _ts_to_ns as real

    g = np.random.default_rng(2)
    per = 500
    ts = np.datetime64(T0.replace(tzinfo=None), "us") + np.sort(
        g.integers(0, 4 * 3_600_000_000, 8 * per)
    ).astype("timedelta64[us]")
    score = g.lognormal(-1, 0.8, ts.size)
    hour_of = (ts - ts[0]).astype("timedelta64[h]").astype(np.int64)
    newest_in_hour_1 = np.flatnonzero(hour_of == 1)[-1]
    score[newest_in_hour_1] = np.nan  # the newest row of its hour is not valid
    write_parquet(
        tmp_path / "scores.parquet", {"timestamp": ts, "score": score}, row_group_size=per
    )
    decoded: list[int] = []

    def counted(column: pa.ChunkedArray, unit: str) -> np.ndarray:
        decoded.append(1)
        return real(column, unit)

    monkeypatch.setattr(scores_module, "_ts_to_ns", counted)
    spec, window = ScoreSpec(path=str(tmp_path)), Window(start=T0, end=T0 + 4 * HOUR)
    got = read_summaries(spec, window, _GRID, bucket=HOUR)
    groups = 8
    spans_one_hour = sum(
        len(set(hour_of[k * per : (k + 1) * per].tolist())) == 1 for k in range(groups)
    )
    with_nan = {newest_in_hour_1 // per}
    clean_one_hour = spans_one_hour - sum(
        len(set(hour_of[k * per : (k + 1) * per].tolist())) == 1 for k in with_nan
    )
    assert clean_one_hour > 0
    assert len(decoded) == groups - clean_one_hour
    monkeypatch.setattr(scores_module, "_ts_to_ns", real)
    whole = read_scores(spec, window, with_timestamps=True)
    assert whole.timestamps is not None
    for h in range(4):
        start = window.start_ns + h * 3_600_000_000_000
        sel = (whole.timestamps >= start) & (whole.timestamps < start + 3_600_000_000_000)
        s = got[("", start)]
        assert np.array_equal(s.counts, summarize(whole.values[sel], _GRID).counts)
        assert s.newest_ns == int(whole.timestamps[sel].max())
    newest_of_hour_1 = got[("", window.start_ns + 3_600_000_000_000)].newest_ns
    assert newest_of_hour_1 is not None
    assert newest_of_hour_1 < int(
        (ts[newest_in_hour_1] - np.datetime64("1970-01-01", "us")).astype(np.int64) * 1000
    )


_GRID = Grid(np.linspace(0.0, 3.0, 64))


def test_a_spark_task_adds_up_its_files_parts_before_they_leave_the_executor(
    tmp_path: Path,
) -> None:
    """``summary_part_batches`` (Spark's ``mapInArrow`` function): the paths of a task, in
    several batches, come back as one row holding their parts' sum, equal to the local
    engine's; the first bad file is one row holding its error; a task of no path, no row."""
    import pickle

    import pyarrow as pa

    from monitor.sources import summary_part_batches, window_tasks

    clear_cache()
    root = tmp_path / "scores"
    _tree(root)
    spec = ScoreSpec(path=str(root), segment_column="segment", max_invalid_share=0.1)
    window = Window(start=T0 + 2 * HOUR, end=T0 + 29 * HOUR)
    grid = _grid(spec, window)
    tasks = {t.path: t for t in window_tasks(spec, window)}
    paths = sorted(tasks)
    assert len(paths) >= 4
    payload = pickle.dumps((spec, window, grid, HOUR, tasks))

    def batches(names: list[str]) -> list[pa.RecordBatch]:
        return [pa.RecordBatch.from_pylist([{"path": p} for p in names[k::2]]) for k in (0, 1)]

    planned = list(tasks)  # the order a local read takes them in
    got = [b.to_pylist()[0] for b in summary_part_batches(payload, iter(batches(paths[::-1])))]
    assert len(got) == 1
    assert got[0]["index"] == 0  # its first file in planned order, whatever order they came in
    whole = read_summary_part(spec, window, grid, bucket=HOUR)
    total, names = pickle.loads(got[0]["part"])
    same_parts(total, whole)
    assert list(names) == planned  # each file's segments, for the window's max_segments
    assert all(names[p] == ["de", "en", "fr"] for p in planned)
    assert list(summary_part_batches(payload, iter([]))) == []

    for bad in (paths[1], paths[2]):
        Path(bad).write_bytes(b"PAR1 not really")
    clear_cache()  # the tasks as planned before the files went bad
    out = [b.to_pylist()[0] for b in summary_part_batches(payload, iter(batches(paths[::-1])))]
    assert len(out) == 1
    first_bad = min(planned.index(paths[1]), planned.index(paths[2]))
    assert out[0]["index"] == first_bad  # the first bad one in planned order, not as they came
    error, names = pickle.loads(out[0]["part"])
    assert list(names) == planned[:first_bad]  # the files read before it
    assert isinstance(error, SourceError)
    assert planned[first_bad] in str(error)
