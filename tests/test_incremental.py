"""Checks through cached summaries (issue 13): the same verdict numbers as whole windows where
the edges agree, one new bucket read per hourly check, a late file re-reads only its buckets,
a corrupt cache entry is recomputed, the cache stays bounded, the grid persists and ages out,
and validate's bucket rules."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import load_config, parse_config
from monitor.epoch import to_ns
from monitor.errors import ConfigError
from monitor.incremental import SummaryChecks
from monitor.incremental.store import Bucket
from monitor.incremental.windows import FileTable, _fingerprints
from monitor.jobs import Runner, check_windows
from monitor.simulate import Scenario, write_world
from monitor.sources import FileStat, Window, read_scores, write_parquet
from monitor.stats import Grid
from monitor.store import StateStore

T0 = datetime(2026, 11, 1, tzinfo=UTC)
DAY, HOUR = timedelta(days=1), timedelta(hours=1)
AT = datetime(2026, 11, 10, tzinfo=UTC)
FIXED = (
    'windows.reference_start = "2026-11-02T00:00:00Z"\n'
    'windows.reference_end = "2026-11-09T00:00:00Z"\n'
)


def _world(root: Path, *, engine: str, fixed: bool = False, days: int = 10) -> Path:
    scenario = Scenario(name="s", segments=("web", "app"), segment_weights=(0.7, 0.3))
    write_world(root, scenario, start=T0, end=T0 + timedelta(days=days), seed=3)
    text = (root / "monitor.toml").read_text()
    if fixed:
        text = text.replace('windows.reference = "7d"\n', FIXED)
    (root / "arrays.toml").write_text(text)
    (root / "summaries.toml").write_text(text + "\n[engine]\n" + engine)
    return root


def _held(path: Path) -> int:
    """The bytes a cache entry takes on disk, as the cache counts them (whole blocks)."""
    st = path.stat()
    return st.st_blocks * 512 if st.st_blocks else st.st_size


def _blocks(directory: Path, size: int) -> int:
    """``size`` bytes written in ``directory``'s volume: whole blocks."""
    import os

    block = os.statvfs(directory).f_bsize
    return -(-size // block) * block


def _inputs(runner: Runner, at: datetime) -> dict[str, dict[str, object]]:
    v = runner.check("demo", at)
    return {name: r.to_dict() for name, r in v.inputs.items()}


@pytest.fixture(scope="module")
def fixed_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _world(
        tmp_path_factory.mktemp("fixed"),
        engine='kind = "local"\nsummary.grid = "full"\n',
        fixed=True,
    )


@pytest.fixture
def rolling_world(tmp_path: Path) -> Path:
    return _world(tmp_path, engine='kind = "local"\n')


def test_a_fixed_reference_on_the_full_grid_gives_the_whole_window_numbers(
    fixed_world: Path,
) -> None:
    arrays = Runner(load_config(fixed_world / "arrays.toml"))
    summaries = Runner(load_config(fixed_world / "summaries.toml"))
    want, got = _inputs(arrays, AT), _inputs(summaries, AT)
    assert set(want) == set(got) == {"web", "app"}
    for name in want:
        a, b = dict(want[name]), dict(got[name])
        assert b["grid_points"] is not None
        assert a["grid_points"] is None
        assert b["ks_statistic_high"] is None  # the full grid resolves D exactly
        # the KS location is a grid point, not necessarily the sample value where D is attained
        for key in ("grid_points", "ks_location"):
            a.pop(key), b.pop(key)
        assert a == b, name


@pytest.mark.parametrize(
    ("windows", "damaged"),
    [
        # a fixed reference days before the current window
        (FIXED.replace("2026-11-09", "2026-11-05"), "2026-11-07"),
        ('windows.reference = "6d"\nwindows.gap = "1d"\n', "2026-11-08"),  # the gap
    ],
)
def test_a_damaged_file_in_neither_window_is_never_read(
    tmp_path: Path, windows: str, damaged: str
) -> None:
    """The summaries' plan walked the span from the reference's start to the current
    window's end: a damaged file between the windows (in windows.gap, or between a fixed
    reference and the current window) made the check an error, where the whole-window
    check, which never opens it, was ok."""
    root = _world(tmp_path / "w", engine='kind = "local"\n')
    for name in ("arrays.toml", "summaries.toml"):
        text = (root / name).read_text().replace('windows.reference = "7d"\n', windows)
        (root / name).write_text(text)
    (root / "scores" / f"date={damaged}" / "part-9.parquet").write_bytes(b"not parquet\n")
    arrays = Runner(load_config(root / "arrays.toml")).check("demo", AT)
    summaries = Runner(load_config(root / "summaries.toml")).check("demo", AT)
    assert arrays.state != "error", arrays.reasons
    assert summaries.state == arrays.state, summaries.reasons


def test_a_damaged_file_in_the_gap_hours_stays_unread_check_after_check(tmp_path: Path) -> None:
    """Hourly partitions under daily ones and a 6-hour gap: a day partition overlapping a
    window and unchanged since the last walk was handed out whole (inotify), its gap hours
    with it, so from the second check on a damaged file in the gap made the check an error
    again (the first check, walking, pruned them)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    root = _world(tmp_path / "w", engine='kind = "local"\n')
    for day in sorted((root / "scores").iterdir()):
        table = pq.read_table(day / "part-0.parquet")
        hours = pc.hour(table.column("timestamp")).to_numpy()
        for h in range(24):
            (day / f"hour={h:02d}").mkdir()
            pq.write_table(table.filter(hours == h), day / f"hour={h:02d}" / "part-0.parquet")
        (day / "part-0.parquet").unlink()
    for name in ("arrays.toml", "summaries.toml"):
        text = (
            (root / name)
            .read_text()
            .replace('windows.reference = "7d"\n', 'windows.reference = "7d"\nwindows.gap = "6h"\n')
        )
        (root / name).write_text(text)
    # the gap is [2026-11-08T18:00, 2026-11-09T00:00)
    (root / "scores" / "date=2026-11-08" / "hour=20" / "part-9.parquet").write_bytes(b"junk\n")
    # as in production, the partitions were last written long before the checks (inotify
    # vouches only for a directory not modified within the last seconds)
    past = datetime.now(UTC).timestamp() - 3600
    for d in [root / "scores", *(root / "scores").rglob("*")]:
        if d.is_dir():
            os.utime(d, (past, past))
    arrays = Runner(load_config(root / "arrays.toml"))
    summaries = Runner(load_config(root / "summaries.toml"))
    for at in (AT - 2 * HOUR, AT - HOUR, AT):
        want, got = arrays.check("demo", at), summaries.check("demo", at)
        assert want.state != "error", want.reasons
        assert got.state == want.state, (at, got.reasons)


def test_a_fixed_reference_that_lands_after_the_first_check_gets_a_grid_of_its_own(
    tmp_path: Path,
) -> None:
    """The first check ran before the fixed reference's days had landed (a one-point grid,
    every check undecidable); once they land the grid is rebuilt and the numbers are the whole
    windows' again (a fixed reference's grid was once rebuilt only when its bounds changed)."""
    root = _world(tmp_path / "w", engine='kind = "local"\nsummary.grid = "full"\n', fixed=True)
    aside = tmp_path / "aside"
    aside.mkdir()
    days = sorted((root / "scores").glob("date=2026-11-0[2-8]"))
    for day in days:
        day.rename(aside / day.name)
    summaries = Runner(load_config(root / "summaries.toml"))
    for k, landed in enumerate((0, 3, 7)):  # none of its days, three, all seven
        for day in days[:landed]:
            if not day.exists():
                (aside / day.name).rename(day)
        at = AT + k * HOUR
        want, got = _inputs(Runner(load_config(root / "arrays.toml")), at), _inputs(summaries, at)
        assert set(want) == set(got) == {"web", "app"}
        for name in want:
            a, b = dict(want[name]), dict(got[name])
            assert a["n_reference"] == b["n_reference"] == (0 if landed == 0 else b["n_reference"])
            if landed:
                assert b["ks_statistic_high"] is None  # the full grid of every reference value
            for key in ("grid_points", "ks_location"):
                a.pop(key), b.pop(key)
            assert a == b, (landed, name)


def test_an_anchor_made_while_reading_whole_windows_gets_a_grid_that_holds_its_edges(
    tmp_path: Path,
) -> None:
    """An engine turned off a while (an anchor made from whole windows) and on again: the grid
    kept on disk does not hold the anchor's edges and is rebuilt (every check was once an
    ``error``, "every PSI edge must be a grid point", until the grid aged out)."""
    root = _world(tmp_path / "w", engine='kind = "local"\n')
    Runner(load_config(root / "summaries.toml")).run("demo", AT)  # the grid, persisted
    # the engine off, and a drift edit that starts the state over: anchors from whole windows
    edit = 'windows.current = "1d"\ndrift.tolerance = 0.03\n'
    for name in ("arrays.toml", "summaries.toml"):
        text = (root / name).read_text()
        (root / name).write_text(text.replace('windows.current = "1d"\n', edit))
    Runner(load_config(root / "arrays.toml")).run("demo", AT + HOUR)
    again = Runner(load_config(root / "summaries.toml"))
    for k in (2, 3):
        record = again.run("demo", AT + k * HOUR)
        assert record.verdict.state != "error", record.verdict.reasons
        assert all(r.psi is not None for r in record.verdict.inputs.values())


@pytest.mark.parametrize("name", ["arrays.toml", "summaries.toml"])
def test_a_fixed_reference_is_never_read_past_the_current_windows_start(
    fixed_world: Path, tmp_path: Path, name: str
) -> None:
    """A fixed reference ending after the check's current window began (a backtest, a daemon
    started within the period) once read the current window's rows and rows after the slot:
    it is cut where the current window begins; one that begins there or later compares with
    nothing yet."""
    text = (fixed_world / name).read_text().replace('state_dir = "state"', 'state_dir = "st"')
    later = text.replace(
        'reference_end = "2026-11-09T00:00:00Z"', 'reference_end = "2026-12-31T00:00:00Z"'
    )
    ahead = text.replace(
        'reference_start = "2026-11-02T00:00:00Z"', 'reference_start = "2026-11-09T00:00:00Z"'
    )
    ahead = ahead.replace(
        'reference_end = "2026-11-09T00:00:00Z"', 'reference_end = "2026-11-20T00:00:00Z"'
    )
    verdicts = {}
    for label, body in (("cut", text), ("later", later), ("ahead", ahead)):
        path = fixed_world / f"{label}-{name}"
        path.write_text(body)
        verdicts[label] = Runner(load_config(path)).check("demo", AT)
    cut, late = verdicts["cut"], verdicts["later"]
    assert late.state == cut.state
    for segment, report in cut.inputs.items():
        a, b = report.to_dict(), late.inputs[segment].to_dict()
        for key in ("cusum_threshold", "z_threshold"):  # the alarm plan's: set by the config
            a.pop(key), b.pop(key)
        assert a == b, segment
    assert verdicts["ahead"].state == "insufficient_data"
    if name == "arrays.toml":  # one baseline a segment, not one a slot of the cut reference
        runner = Runner(load_config(fixed_world / f"later-{name}"))
        for k in range(3):
            runner.check("demo", AT + k * HOUR)
        assert len(runner._baselines) == 2
    assert (
        verdicts["ahead"]
        .reasons[0]
        .startswith(
            "the fixed reference [2026-11-09T00:00:00Z, 2026-11-20T00:00:00Z) begins at or after"
        )
    )
    with pytest.raises(ConfigError, match=r"windows.gap: applies to a rolling reference only"):
        parse_config(
            {
                "monitors": [
                    {
                        "name": "m",
                        "scores": {"path": "s"},
                        "outcomes": {"path": "o"},
                        "windows": {
                            "reference_start": "2026-11-02T00:00:00Z",
                            "reference_end": "2026-11-09T00:00:00Z",
                            "gap": "1d",
                        },
                    }
                ]
            },
            base=Path("."),
        )


def test_the_first_rolling_check_builds_the_grid_from_its_own_reference(
    rolling_world: Path,
) -> None:
    """At the check that builds the grid its edges are the rolling reference's: PSI bit-equal."""
    want = _inputs(Runner(load_config(rolling_world / "arrays.toml")), AT)
    got = _inputs(Runner(load_config(rolling_world / "summaries.toml")), AT)
    for name in want:
        for key in ("psi", "psi_pvalue", "psi_noise_floor", "psi_bins", "n_reference", "n_current"):
            assert got[name][key] == want[name][key], (name, key)
        lo, hi = (
            got[name]["ks_statistic"],
            got[name]["ks_statistic_high"] or got[name]["ks_statistic"],
        )
        assert lo <= want[name]["ks_statistic"] <= hi  # type: ignore[operator]
        for key in ("block_psi", "block_pvalue", "zero_rate_reference", "zero_rate_current"):
            assert got[name][key] == want[name][key], (name, key)


def _read(checks: SummaryChecks, root: Path, at: datetime):  # type: ignore[no-untyped-def]
    config = load_config(root / "summaries.toml")
    monitor = config.monitors[0]
    settings = config.engine_for(monitor)
    assert settings is not None
    ref, cur = check_windows(monitor, at)
    return checks.read(monitor, settings, at, ref, cur)


def _totals(read) -> dict[str, tuple[np.ndarray, np.ndarray]]:  # type: ignore[no-untyped-def]
    out = {}
    for name in sorted(read.reference | read.current):
        s = read.segment(name)
        out[name] = (s.reference.counts, s.current.counts)
    return out


def test_an_hourly_check_reads_only_the_new_hour(rolling_world: Path, tmp_path: Path) -> None:
    checks = SummaryChecks(tmp_path / "state")
    first = _read(checks, rolling_world, AT)
    assert first.buckets_read == 8 * 24
    assert first.buckets_cached == 0
    assert first.engine == "local"
    again = _read(checks, rolling_world, AT)
    assert again.buckets_read == 0
    assert again.engine is None
    nxt_at = AT + timedelta(hours=1)
    nxt = _read(checks, rolling_world, nxt_at)
    # the hour leaving the current window joins the reference from the cache
    assert nxt.buckets_read == 1
    assert nxt.buckets_cached == 8 * 24 - 1
    # the same cells as a cold read of that slot (no cached bucket, the same grid on disk;
    # a new state directory would build a grid of its own, and only totals could compare)
    cold = _read(_grid_only(tmp_path / "state", tmp_path / "other"), rolling_world, nxt_at)
    assert cold.grid.key == nxt.grid.key != ""
    assert cold.buckets_read == 8 * 24
    assert _totals(nxt).keys() == _totals(cold).keys() == {"web", "app"}
    for name, (r, c) in _totals(nxt).items():
        cr, cc = _totals(cold)[name]
        assert np.array_equal(r, cr), name
        assert np.array_equal(c, cc), name


def _grid_only(state: Path, to: Path) -> SummaryChecks:
    """A process that starts with ``state``'s grid on disk and no cached bucket."""
    grid = next((state / "summaries").glob("*/grid.npz"))
    shutil.copytree(grid.parent.parent, to / "summaries")
    shutil.rmtree(next((to / "summaries").glob("*/*/")))
    return SummaryChecks(to)


class _Binned:
    """Counts ``Cells.bins`` calls (one bucket binned on one set of edges) while patched in."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from monitor.stats import Cells

        self.calls = 0
        real = Cells.bins

        def counted(cells: Cells, ends: np.ndarray) -> np.ndarray:
            self.calls += 1
            return real(cells, ends)

        monkeypatch.setattr(Cells, "bins", counted)


def test_totals_and_bin_rows_rolled_across_checks_equal_a_cold_read(
    rolling_world: Path, tmp_path: Path
) -> None:
    """A daemon's checks roll each window's totals and bin rows forward (the buckets that left
    subtracted, the new ones added, a recomputed one swapped): hour after hour, and after a
    late file, they equal what a process reading every bucket afresh gets: a check moved on by
    one hour, the same check again, one two hours on (each a slide of the last check's
    buckets) and one with a bucket recomputed (no slide)."""
    checks = SummaryChecks(tmp_path / "state")
    _read(checks, rolling_world, AT)
    for i, k in enumerate((1, 1, 3, 4, 5)):
        if i == 3:  # a late file in the reference window: its bucket is recomputed
            when = np.datetime64(datetime(2026, 11, 5, 7, 30), "us")
            write_parquet(
                rolling_world / "scores" / "date=2026-11-05" / "late.parquet",
                {
                    "timestamp": np.full(40, when),
                    "score": np.full(40, 0.75),
                    "segment": np.array(["app"] * 40),
                },
            )
        at = AT + k * HOUR
        rolled = _read(checks, rolling_world, at)
        cold = _read(_grid_only(tmp_path / "state", tmp_path / f"cold{i}"), rolling_world, at)
        assert rolled.grid.key == cold.grid.key  # the grid is on disk: the same points
        assert cold.buckets_cached == 0
        for name in sorted(rolled.reference | rolled.current):
            a, b = rolled.segment(name), cold.segment(name)
            assert np.array_equal(a.reference.counts, b.reference.counts), (k, name)
            assert np.array_equal(a.current.counts, b.current.counts), (k, name)
            assert (a.reference.rows, a.reference.invalid) == (
                b.reference.rows,
                b.reference.invalid,
            )
            ref_bins, cur_bins = a.bins(a.edges)
            assert np.array_equal(ref_bins, b.bins(a.edges)[0]), (k, name)
            assert np.array_equal(cur_bins, b.bins(a.edges)[1]), (k, name)
            assert not ref_bins.flags.writeable  # shared with the next check


def test_a_check_that_fails_reading_keeps_nothing(rolling_world: Path, tmp_path: Path) -> None:
    """A check whose new hour cannot be read (a file whose data pages are damaged, its footer
    whole: planned, then read) fails naming the file, after planning; the plan it made is not
    kept, and once the file is rewritten the next checks equal a cold read."""
    from monitor.errors import MonitorError

    checks = SummaryChecks(tmp_path / "state")
    _read(checks, rolling_world, AT)
    path = rolling_world / "scores" / "date=2026-11-10" / "late-hour.parquet"
    when = np.datetime64(datetime(2026, 11, 10, 0, 30), "us") + np.arange(5000).astype(
        "timedelta64[ms]"
    )
    columns = {
        "timestamp": when,
        "score": np.random.default_rng(4).random(5000),
        "segment": np.array(["web", "app"] * 2500),
    }
    write_parquet(path, columns)
    data = bytearray(path.read_bytes())
    data[200:4000] = b"\xff" * 3800  # the first column chunks' pages; the footer stays whole
    path.write_bytes(bytes(data))
    with pytest.raises(MonitorError, match=r"late-hour\.parquet"):
        _read(checks, rolling_world, AT + HOUR)
    write_parquet(path, columns)  # repaired: another size and mtime
    for k in (1, 2):
        at = AT + k * HOUR
        rolled = _read(checks, rolling_world, at)
        cold = _read(_grid_only(tmp_path / "state", tmp_path / f"cold{k}"), rolling_world, at)
        assert rolled.buckets_read >= 1
        for name in sorted(rolled.reference | rolled.current):
            a, b = rolled.segment(name), cold.segment(name)
            assert np.array_equal(a.reference.counts, b.reference.counts), (k, name)
            assert np.array_equal(a.current.counts, b.current.counts), (k, name)
            assert a.current.rows == b.current.rows


def test_windows_apart_roll_and_equal_a_cold_read(rolling_world: Path, tmp_path: Path) -> None:
    """With ``windows.gap`` the two windows are apart (the walk spans both and the gap): a
    daemon's checks hour after hour, and after a late file in the gap and one in the
    reference, read the new buckets only and equal a cold read."""
    for name in ("summaries.toml",):
        text = (rolling_world / name).read_text()
        gapped = text.replace(
            'windows.reference = "7d"\n', 'windows.reference = "5d"\nwindows.gap = "6h"\n'
        )
        assert gapped != text
        (rolling_world / name).write_text(gapped)
    checks = SummaryChecks(tmp_path / "state")
    first = _read(checks, rolling_world, AT)
    assert first.starts[1][0] - first.starts[0][-1] == 7 * 3_600_000_000_000  # 6h apart
    for k in (1, 2, 3):
        if k == 2:  # late files: one in the gap (no bucket), one in the reference
            for day, hour in (("2026-11-08", 20), ("2026-11-05", 7)):
                when = np.datetime64(datetime.fromisoformat(f"{day}T{hour:02d}:30"), "us")
                write_parquet(
                    rolling_world / "scores" / f"date={day}" / f"late-{hour}.parquet",
                    {
                        "timestamp": np.full(30, when),
                        "score": np.full(30, 0.5),
                        "segment": np.array(["web"] * 30),
                    },
                )
        at = AT + k * HOUR
        rolled = _read(checks, rolling_world, at)
        assert rolled.buckets_read == (3 if k == 2 else 2)  # the new hour of each window (+1)
        cold = _read(_grid_only(tmp_path / "state", tmp_path / f"cold{k}"), rolling_world, at)
        for name in sorted(rolled.reference | rolled.current):
            a, b = rolled.segment(name), cold.segment(name)
            assert np.array_equal(a.reference.counts, b.reference.counts), (k, name)
            assert np.array_equal(a.current.counts, b.current.counts), (k, name)


def test_bin_rows_on_other_edges_are_rolled_too(
    rolling_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict also bins on edges other than the segment's (an anchor's, set on an older
    grid): those rows roll forward as well, so an hourly check bins only its new bucket on
    them, with the integers a cold read gets; edges no check asks for any more are dropped."""
    checks = SummaryChecks(tmp_path / "state")
    first = _read(checks, rolling_world, AT)
    points = first.grid.grid.points
    other = points[np.linspace(0, points.size - 1, 7).astype(int)[1:-1]]  # not the edges
    assert not np.array_equal(other, first.segment("web").edges)
    first.segment("web").bins(other)
    binned = _Binned(monkeypatch)
    nxt = _read(checks, rolling_world, AT + HOUR)
    seg = nxt.segment("web")
    ref_rows, cur_rows = seg.bins(other)
    assert binned.calls == 1  # the new hour's bucket on ``other``: the rest rolled forward
    seg.bins(other)
    assert binned.calls == 1  # asked twice in one check: binned once
    cold_checks = _grid_only(tmp_path / "state", tmp_path / "cold")
    cold = _read(cold_checks, rolling_world, AT + HOUR).segment("web")
    assert np.array_equal(ref_rows, cold.bins(other)[0])
    assert np.array_equal(cur_rows, cold.bins(other)[1])
    rolling = checks._rolling[("demo", "current")]
    assert any(key[1] == other.tobytes() for key in rolling.binned)
    _read(checks, rolling_world, AT + 2 * HOUR).segment("web").bins(first.segment("web").edges)
    _read(checks, rolling_world, AT + 3 * HOUR)
    assert not any(key[1] == other.tobytes() for key in rolling.binned)  # unused: dropped


def test_a_check_after_a_grid_rebuild_bins_only_its_new_buckets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon's grid is rebuilt every ``summary.regrid`` while the anchors keep the edges of
    the grid they were set on: the checks after a rebuild still bin only their new buckets
    (they binned every bucket of both windows on the anchor's edges at each check before)."""
    root = _world(tmp_path, engine='kind = "local"\nsummary.regrid = "3h"\n')
    runner = Runner(load_config(root / "summaries.toml"))
    for k in range(4):  # the grid is rebuilt at AT + 3h; the anchors stay on the first one's
        runner.run("demo", AT + k * HOUR)
    state = runner.store.load("demo")
    grid = runner.summaries._grids["demo"][1]
    anchored = [n for n, d in state.drift.items() if d.anchor_ref is not None]
    assert anchored
    assert any(
        not np.array_equal(state.drift[n].anchor_ref.edge_array, grid.edges[n])  # type: ignore[union-attr]
        for n in anchored
    )
    binned = _Binned(monkeypatch)
    record = runner.run("demo", AT + 4 * HOUR)
    assert record.verdict.state != "error"
    # per segment: the new bucket on its edges and on its anchor's (8 * 24 buckets before)
    assert 0 < binned.calls <= 2 * len(state.drift)


def test_a_late_file_rereads_exactly_its_bucket(rolling_world: Path, tmp_path: Path) -> None:
    checks = SummaryChecks(tmp_path / "state")
    before = _read(checks, rolling_world, AT)
    hour = datetime(2026, 11, 9, 13, tzinfo=UTC)
    stamps = np.array(
        [np.datetime64(hour.replace(tzinfo=None), "us") + np.timedelta64(i, "s") for i in range(50)]
    )
    write_parquet(
        rolling_world / "scores" / "date=2026-11-09" / "late.parquet",
        {"timestamp": stamps, "score": np.full(50, 3.25), "segment": np.array(["web"] * 50)},
    )
    after = _read(checks, rolling_world, AT)
    assert after.buckets_read == 1
    assert after.buckets_cached == 8 * 24 - 1
    web_before, web_after = before.segment("web"), after.segment("web")
    assert web_after.current.n == web_before.current.n + 50
    assert web_after.reference.n == web_before.reference.n
    # equal to reading the window whole
    config = load_config(rolling_world / "summaries.toml")
    _, cur = check_windows(config.monitors[0], AT)
    whole = read_scores(config.monitors[0].scores, cur)
    web = whole.segment_names.index("web")
    assert web_after.current.n == int(np.count_nonzero(whole.segment_codes == web))


def test_a_late_file_of_null_timestamps_rereads_no_bucket(
    rolling_world: Path, tmp_path: Path
) -> None:
    """A file whose timestamps are all null holds no row of any window; its unknown span put
    it in every bucket's fingerprint, and both windows were read again (192 buckets)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    checks = SummaryChecks(tmp_path / "state")
    before = _read(checks, rolling_world, AT)
    table = pa.table(
        {
            "timestamp": pa.array([None] * 10, pa.timestamp("us", tz="UTC")),
            "score": np.ones(10),
            "segment": np.array(["web"] * 10),
        }
    )
    pq.write_table(table, rolling_world / "scores" / "date=2026-11-09" / "late-null.parquet")
    after = _read(checks, rolling_world, AT)
    assert after.buckets_read == 0
    assert _totals(after).keys() == _totals(before).keys()
    for name, (ref, cur) in _totals(after).items():
        assert np.array_equal(ref, _totals(before)[name][0])
        assert np.array_equal(cur, _totals(before)[name][1])


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("fixed", [True, False])
def test_an_hour_of_invalid_scores_stays_in_its_hour(
    tmp_path: Path, fixed: bool, mixed: bool
) -> None:
    """Invalid scores (an hour of NaN from a broken feed) count in their own hour's bucket:
    the current window holds them until that hour leaves it, as a whole-window read does, warm
    or cold. A row group without one valid score once counted in the first bucket of the run
    read (the window's oldest hour after a cold start), and left the window an hour later:
    error, then ok, then error again after a rebuild. ``mixed``: the NaN hour inside a day-long
    row group of valid scores (one row group a daily file, pyarrow's default size), whose
    invalid rows once all counted in the row group's first bucket, the same way."""
    root = _world(tmp_path, engine='kind = "local"\n', fixed=fixed)
    n = 1500  # 3 % of the day's 51k scores (the bound: 1 %), within 20:00-20:50
    stamps = np.datetime64("2026-11-09T20:00:00", "us") + 2 * np.arange(n).astype("timedelta64[s]")
    scores = np.full(n, np.nan)
    if mixed:  # and a valid score every minute of the day, in the same row group
        day = np.datetime64("2026-11-09T00:00:00", "us") + np.arange(1440).astype("timedelta64[m]")
        order = np.argsort(np.concatenate((stamps, day)), kind="stable")
        stamps = np.concatenate((stamps, day))[order]
        scores = np.concatenate((scores, np.full(day.size, 2.0)))[order]
    write_parquet(
        root / "scores" / "date=2026-11-09" / "nan.parquet",
        {"timestamp": stamps, "score": scores, "segment": np.array(["web"] * stamps.size)},
    )
    arrays = Runner(load_config(root / "arrays.toml"))
    warm = Runner(load_config(root / "summaries.toml"))
    for at in (AT, AT + HOUR, AT + 2 * HOUR):
        want = arrays.check("demo", at)
        assert want.state == "error"
        assert "NaN" in (want.error or ""), want.error
        assert warm.check("demo", at).state == "error", at
        cold = Runner(load_config(root / "summaries.toml"))  # the disk cache, a new process's
        assert cold.check("demo", at).state == "error", at
    later = AT + 21 * HOUR  # the NaN hour (20:00 on the 9th) has left the 1-day window
    assert arrays.check("demo", later).state != "error"
    assert warm.check("demo", later).state != "error"


def test_check_at_the_daemons_latest_slot_decides_on_the_daemons_grid(
    rolling_world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``monitor check`` at the daemon's latest slot says what the daemon said, through
    summaries too: its read-only runner reads the daemon's persisted grid (it never writes
    one). It once built a grid of its own, on other edges: other PSI, block PSI and z."""
    from monitor.cli import main

    config = rolling_world / "summaries.toml"
    daemon = Runner(load_config(config))
    for k in range(5):
        record = daemon.run("demo", AT + k * HOUR)
    grid = rolling_world / "state" / "summaries" / "demo" / "grid.npz"
    before = grid.read_bytes()
    at = (AT + 4 * HOUR).isoformat()
    code = main(["check", "--config", str(config), "--json", "--at", at])
    (said,) = json.loads(capsys.readouterr().out)["monitors"]
    assert said == json.loads(json.dumps(record.verdict.to_dict()))
    assert code == {"ok": 0, "data_drift": 1, "model_decay": 2}.get(said["state"], 3)
    assert grid.read_bytes() == before  # read, not rewritten


def _rewrite_in_place(path: Path, shift: float | None) -> None:
    """``path`` written again uncompressed, without dictionaries; with ``shift`` its scores
    moved by it, the same bytes' length written over the same inode and the mtime set back
    (what ``cp -p`` or a restore does): only the ctime tells the file changed."""
    import os

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if shift is not None:
        at = table.schema.get_field_index("score")
        table = table.set_column(at, "score", pc.add(table.column("score"), shift))
    tmp = path.with_name(path.name + ".w")
    pq.write_table(table, tmp, compression="NONE", use_dictionary=False)
    if shift is None:
        tmp.replace(path)
        return
    before = os.stat(path)
    data = tmp.read_bytes()
    tmp.unlink()
    assert len(data) == before.st_size
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_rewrite_of_the_same_size_with_its_mtime_set_back_is_read_again(
    fixed_world: Path, tmp_path: Path
) -> None:
    """A bucket's files are known by path, size, mtime and ctime: a file rewritten in place
    with the same size and its mtime restored moves its ctime, so its buckets are read again,
    warm and from the disk cache in a new runner, and agree with whole windows. Without the
    ctime the bucket cached on disk was kept for good (the drift never seen)."""
    root = tmp_path / "w"
    shutil.copytree(fixed_world, root, ignore=shutil.ignore_patterns("state"))
    target = root / "scores" / "date=2026-11-09" / "part-0.parquet"
    _rewrite_in_place(target, None)
    warm = Runner(load_config(root / "summaries.toml"))
    assert warm.check("demo", AT).state == "ok"
    _rewrite_in_place(target, 1.5)
    for runner in (warm, Runner(load_config(root / "summaries.toml"))):
        got = runner.check("demo", AT)
        want = Runner(load_config(root / "arrays.toml")).check("demo", AT)
        assert got.state == want.state == "data_drift"
        for name in want.inputs:
            assert got.inputs[name].psi == want.inputs[name].psi, name


def test_a_corrupt_cache_entry_is_recomputed(rolling_world: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = _read(SummaryChecks(state), rolling_world, AT)
    entries = sorted((state / "summaries" / "demo" / first.grid.key).glob("*.bucket"))
    assert len(entries) == 8 * 24
    entries[5].write_bytes(b"not a bucket")
    entries[6].write_bytes(entries[6].read_bytes()[:100])  # truncated
    # a header nested past the JSON parser's depth (a RecursionError failed every check) and
    # a FIFO in an entry's place (its read hung every check)
    deep = b"[" * 100_000
    entries[7].write_bytes(b"RMBUCKET" + len(deep).to_bytes(4, "little") + deep)
    entries[8].unlink()
    os.mkfifo(entries[8])
    # a flipped bit in an array's dtype in the header: numpy parses ",u4" as a Python literal
    # (SyntaxError), before the checksum is tested
    data = entries[9].read_bytes()
    at = min(i for i in (data.find(b'"<'), data.find(b'"|')) if i >= 0) + 1
    entries[9].write_bytes(data[:at] + b"," + data[at + 1 :])
    # the same in the grid's place: a new grid is built, its buckets summarised again
    grid_file = state / "summaries" / "demo" / "grid.npz"
    fresh = SummaryChecks(state)  # a restarted daemon: memory empty, disk warm
    again = _read(fresh, rolling_world, AT)
    assert again.buckets_read == 5
    assert fresh.cache.corrupt == 5
    assert not entries[8].is_fifo()  # removed, then written again
    grid_file.unlink()
    os.mkfifo(grid_file)
    rebuilt = _read(SummaryChecks(state), rolling_world, AT)
    assert rebuilt.grid.grid.points.size > 0
    assert grid_file.is_file()  # the FIFO removed, the new grid written in its place
    # a flipped bit in a .npy header inside it (numpy tokenizes the header as a Python
    # literal: a TokenError or a SyntaxError was not taken for damage, every check an error)
    import tokenize

    from monitor.incremental.store import FrozenGrid

    # and in the zip's central directory: RuntimeError ('encrypted'), NotImplementedError (a
    # zip version): every check an error, until the file was removed by hand
    data = grid_file.read_bytes()
    at = data.index(b"{'descr'")
    raised: dict[str, bytes] = {}
    for i in [*range(at, at + 120), *range(len(data) - 200, len(data))]:
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            try:
                FrozenGrid.from_bytes(bytes(flipped))
            except (tokenize.TokenError, SyntaxError, RuntimeError) as exc:
                raised.setdefault(type(exc).__name__, bytes(flipped))
            except Exception:
                pass
    assert {"TokenError", "RuntimeError", "NotImplementedError"} <= set(raised), set(raised)
    for damaged in raised.values():
        grid_file.write_bytes(damaged)
        again = _read(SummaryChecks(state), rolling_world, AT)
        assert again.grid.grid.points.size > 0
    assert again.grid.key == first.grid.key  # the grid came back from disk
    for name, (r, c) in _totals(again).items():
        r0, c0 = _totals(first)[name]
        assert np.array_equal(r, r0)
        assert np.array_equal(c, c0)
    from monitor.incremental.store import Bucket

    bucket, _ = Bucket.from_bytes(entries[5].read_bytes(), again.grid.grid, again.grid.key)
    assert bucket.start_ns == int(entries[5].stem)  # rewritten whole


def test_the_cache_leaves_no_litter_and_warns_of_an_unreadable_disk_once(
    rolling_world: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A killed grid write's temp file was never swept (the sweep looked one level deeper);
    a grid folder emptied by eviction stayed (each replay's grids left one); and a cache
    that could not be read warned once per bucket (192 lines a check), where a write warns
    once."""
    state = tmp_path / "state"
    folder = state / "summaries" / "demo"
    stale = folder / "oldgrid" / "0.bucket"  # the oldest entry there is: evicted first
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x" * 100)
    left = folder / ".grid.999999999_1.tmp"  # no such pid
    left.write_bytes(b"half a grid")
    checks = SummaryChecks(state, max_bytes=1 << 20)
    assert not left.exists()
    _read(checks, rolling_world, AT)
    assert not stale.parent.exists()
    # the cache directory made a file: every bucket's read fails
    shutil.rmtree(state / "summaries")
    (state / "summaries").write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="monitor"):
        read = _read(SummaryChecks(state), rolling_world, AT)
    assert read.buckets_read == 8 * 24
    warned = [r for r in caplog.records if "cannot read cached buckets" in r.getMessage()]
    assert len(warned) == 2  # at the first, and when the disk is left alone for a while
    assert "read again in 10 minutes" in warned[1].getMessage()


def test_one_unreadable_cache_entry_costs_its_bucket_only(
    rolling_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry another user wrote (0600) cannot be read: that once paused every disk read
    of the cache, every monitor's, for 10 minutes, and a warm check read its 8 days again."""
    import monitor.incremental.store as store_module
    from monitor.files import read_regular as real

    state = tmp_path / "state"
    first = _read(SummaryChecks(state), rolling_world, AT)
    entries = sorted((state / "summaries" / "demo" / first.grid.key).glob("*.bucket"))

    def refuse_one(path: Path, max_bytes: int) -> bytes:
        if path == entries[3]:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, max_bytes)

    monkeypatch.setattr(store_module, "read_regular", refuse_one)
    assert _read(SummaryChecks(state), rolling_world, AT).buckets_read == 1


def test_a_grid_a_read_only_process_cannot_read_is_its_error(
    rolling_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`monitor check` as a user who cannot read the daemon's grid (written 0600) took it for
    a corrupt one and built its own, deciding on other edges than the daemon did. Now that
    is the check's error; the daemon (which owns the grids) builds a new one."""
    import monitor.incremental.checks as checks_module
    from monitor.incremental.checks import SummaryCheckError

    state = tmp_path / "state"
    _read(SummaryChecks(state), rolling_world, AT)  # the daemon's grid on disk

    def refused(path: Path, max_bytes: int) -> bytes:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(checks_module, "read_regular", refused)
    with pytest.raises(SummaryCheckError, match="cannot read the summary grid"):
        _read(SummaryChecks(state, persist_grids=False), rolling_world, AT)
    assert _read(SummaryChecks(state), rolling_world, AT).grid.grid.points.size > 0


def test_a_grid_read_out_of_memory_is_no_damage(
    rolling_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any exception parsing grid.npz is damage, but not a MemoryError: the process's, not
    the file's; taken for damage, the daemon removed a valid grid (its frozen edges lost,
    every bucket summarised again)."""
    from monitor.incremental.store import FrozenGrid

    state = tmp_path / "state"
    _read(SummaryChecks(state), rolling_world, AT)
    grid_file = state / "summaries" / "demo" / "grid.npz"
    kept = grid_file.read_bytes()

    def out_of_memory(data: bytes) -> FrozenGrid:
        raise MemoryError

    monkeypatch.setattr(FrozenGrid, "from_bytes", staticmethod(out_of_memory))
    with pytest.raises(MemoryError):
        _read(SummaryChecks(state), rolling_world, AT)
    assert grid_file.read_bytes() == kept


def test_the_disk_cache_is_bounded(rolling_world: Path, tmp_path: Path) -> None:
    unbounded = tmp_path / "unbounded"
    full = _read(SummaryChecks(unbounded), rolling_world, AT)
    size = sum(_held(f) for f in (unbounded / "summaries").rglob("*.bucket"))
    state = tmp_path / "state"
    checks = SummaryChecks(state, max_bytes=size // 3)
    read = _read(checks, rolling_world, AT)
    assert read.grid.key == full.grid.key
    files = list((state / "summaries" / "demo" / read.grid.key).glob("*.bucket"))
    assert 0 < len(files) < 8 * 24
    assert sum(_held(f) for f in files) <= size // 3
    # evicted buckets are read again; the numbers do not change
    again = _read(checks, rolling_world, AT)
    for name, (r, c) in _totals(again).items():
        r0, c0 = _totals(read)[name]
        assert np.array_equal(r, r0)
        assert np.array_equal(c, c0)


def test_a_cache_at_its_bound_is_not_listed_again_at_every_write(
    rolling_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An eviction lists and stats every entry (other processes write the cache too); at the
    bound every put evicted one bucket and listed them all again (0.2-0.5 s a put with
    17,000 entries). It lists again only once a tenth of the bound was written since."""
    from monitor.incremental import store

    unbounded = tmp_path / "unbounded"
    _read(SummaryChecks(unbounded), rolling_world, AT)
    size = sum(_held(f) for f in (unbounded / "summaries").rglob("*.bucket"))
    listings = []
    listing = store.BucketCache._listing

    def counted(self: store.BucketCache) -> dict[Path, int]:
        listings.append(1)
        return listing(self)

    monkeypatch.setattr(store.BucketCache, "_listing", counted)
    read = _read(SummaryChecks(tmp_path / "state", max_bytes=size // 3), rolling_world, AT)
    files = list((tmp_path / "state" / "summaries" / "demo" / read.grid.key).glob("*.bucket"))
    assert sum(_held(f) for f in files) <= size // 3
    per_bucket = size / (8 * 24)
    past = 8 * 24 - (size // 3) / per_bucket  # the puts after the bound was first reached
    assert len(listings) <= 2 + past / (0.1 * (size // 3) / per_bucket), (len(listings), past)


def test_a_cache_just_over_the_working_set_keeps_what_the_next_check_needs(
    rolling_world: Path, tmp_path: Path
) -> None:
    """A bound 1 % over the windows' buckets: each new hour evicts the oldest; a fresh process
    (``monitor check``, the daemon after a restart) then reads only the new hour. Evicting
    down to 90 % of the bound (a first fix of the listing cost) removed buckets still in use,
    and fresh processes read 13-19 of them again every few hours."""
    unbounded = tmp_path / "unbounded"
    _read(SummaryChecks(unbounded), rolling_world, AT)
    size = sum(_held(f) for f in (unbounded / "summaries").rglob("*.bucket"))
    state = tmp_path / "state"
    assert _read(SummaryChecks(state, max_bytes=int(size * 1.01)), rolling_world, AT).buckets_read
    for hours in range(1, 13):
        fresh = SummaryChecks(state, max_bytes=int(size * 1.01))
        read = _read(fresh, rolling_world, AT + hours * HOUR)
        assert read.buckets_read == 1, (hours, read.buckets_read)


def test_the_grid_is_kept_then_rebuilt_when_the_reference_has_turned_over(
    tmp_path: Path,
) -> None:
    root = _world(tmp_path / "w", engine='kind = "local"\n', days=18)
    checks = SummaryChecks(tmp_path / "state")
    first = _read(checks, root, AT)
    later = _read(checks, root, AT + timedelta(days=3))
    assert later.grid is first.grid  # frozen
    assert later.buckets_read == 3 * 24
    turned = _read(checks, root, AT + timedelta(days=7))
    assert turned.grid.built_at == AT + timedelta(days=7)
    assert turned.grid.key != first.grid.key
    assert turned.buckets_read == 8 * 24  # a new grid: every bucket again


def test_the_daemon_runner_exports_the_engine_and_the_json_says_how(rolling_world: Path) -> None:
    runner = Runner(load_config(rolling_world / "summaries.toml"))
    record = runner.run("demo", AT)
    assert record.engine == "local"
    assert record.verdict.input is not None
    assert record.verdict.input.grid_points
    doc = json.loads(json.dumps(record.verdict.to_dict()))
    assert doc["input"]["grid_points"] > 1000
    arrays = Runner(load_config(rolling_world / "arrays.toml"))
    assert arrays.run("demo", AT).engine == "memory"


def test_the_page_of_a_summary_check_draws_its_bins(rolling_world: Path) -> None:
    runner = Runner(load_config(rolling_world / "summaries.toml"))
    verdict, detail = runner.check_detail("demo", AT)
    for name, d in detail.inputs.items():
        report = verdict.inputs[name]
        assert int(d.reference_counts.sum()) == report.n_reference
        assert int(d.current_counts.sum()) == report.n_current
        assert float(d.contributions.sum()) == pytest.approx(report.psi, rel=1e-12)
        assert np.all(np.diff(d.reference_ecdf) >= 0)
        assert d.reference_ecdf[-1] <= 1.0
    # D is bracketed through summaries: the page says so, with both bounds and p-values (it
    # once called D_lo "the largest gap" "at its exact location")
    from monitor.config import ReportConfig
    from monitor.report import PageContext, render_monitor_page

    monitor = runner.config.monitor("demo")
    page = render_monitor_page(monitor, verdict, detail, (), PageContext(ReportConfig()))
    bracketed = [r for r in verdict.inputs.values() if r.ks_statistic_high is not None]
    assert bracketed
    assert "KS D between / at grid point / p-value between" in page
    assert 'data-key="input.ks_statistic_high"' in page
    assert "exact location" not in page


def test_a_slot_inside_a_bucket_is_refused(rolling_world: Path) -> None:
    runner = Runner(load_config(rolling_world / "summaries.toml"))
    v = runner.check("demo", AT + timedelta(minutes=30))
    assert v.state == "error"
    assert any("engine.summary.bucket" in r for r in v.reasons)


def _config(monitor: str, engine: str = 'kind = "local"') -> dict[str, object]:
    import tomllib

    text = (
        f"[engine]\n{engine}\n[[monitors]]\nname = 'a'\nscores.path = 's'\n"
        f"outcomes.path = 'o'\n{monitor}\n"
    )
    return tomllib.loads(text)


@pytest.mark.parametrize(
    ("monitor", "engine", "problem"),
    [
        ('schedule = "90m"', 'kind = "local"', "is not a multiple of engine.summary.bucket"),
        ('schedule = "30 * * * *"', 'kind = "local"', "inside a bucket"),
        # a time that fires only from June on (a check of 35 days from 1 January missed it)
        ('schedule = "30 0 1 6 *"', 'kind = "local"', "fires at 00:30, inside a bucket"),
        # a bucket that does not divide a day sees the slots walked; 29 February's first is in
        # 2028, past the 400 days walked, and passed unchecked
        (
            'schedule = "0 0 29 2 *"\nwindows.current = "5d"\nwindows.reference = "10d"\n'
            'drift.seasonality = "none"',
            'kind = "local"\nsummary.bucket = "5h"',
            "fires at 00:00, inside a bucket",
        ),
        ('windows.current = "36h30m"', 'kind = "local"', "windows.current"),
        # a block ends drift.settle before the check: inside a bucket, its late rows lost
        ('drift.settle = "30m"', 'kind = "local"', "drift.settle: 30m is not a multiple"),
        ('drift.settle = "1d"', 'kind = "local"', "is not shorter than windows.current"),
        (
            'drift.seasonality = "daily"',
            'kind = "local"\nsummary.bucket = "2h"',
            "need engine.summary.bucket to divide 1h",
        ),
        ("", 'kind = "auto"', "'auto' needs"),
        ('engine = "auto"', 'kind = "local"', "'auto' needs"),
        ('engine = "ray"', 'kind = "local"', "must be one of"),
        ("", 'kind = "spark"\nspark.remote = "http://x"', "sc://host:port"),
    ],
)
def test_validate_names_the_bucket_rules(monitor: str, engine: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_config(monitor, engine), base=Path("."))
    assert problem in str(err.value)


def test_auto_seasonality_of_a_short_reference_needs_no_hourly_buckets() -> None:
    """seasonality 'auto' is none under a 2-day reference, so a 2 h bucket with a 2 h
    schedule and a 1-day reference has no phase-matched blocks to serve: it was refused as
    if it had ('need engine.summary.bucket to divide 1h')."""
    monitor = 'schedule = "2h"\nwindows.current = "2h"\nwindows.reference = "1d"\n'
    config = parse_config(_config(monitor, 'kind = "local"\nsummary.bucket = "2h"'), base=Path("."))
    assert config.monitors[0].seasonal_period is None
    with pytest.raises(ConfigError, match=r"need engine\.summary\.bucket to divide 1h"):
        parse_config(
            _config(monitor.replace('"1d"', '"2d"'), 'kind = "local"\nsummary.bucket = "2h"'),
            base=Path("."),
        )


def test_a_monitor_override_needs_no_engine_table() -> None:
    import tomllib

    data = tomllib.loads(
        "[[monitors]]\nname = 'a'\nscores.path = 's'\noutcomes.path = 'o'\nengine = 'local'\n"
        "[[monitors]]\nname = 'b'\nscores.path = 's'\noutcomes.path = 'o'\n"
    )
    config = parse_config(data, base=Path("."))
    a, b = config.monitors
    settings = config.engine_for(a)
    assert settings is not None
    assert settings.kind == "local"
    assert config.engine_for(b) is None  # whole windows, as before


def test_a_backtest_reuses_the_bucket_cache_and_leaves_the_daemons_grid(
    rolling_world: Path,
) -> None:
    from monitor.backtest import backtest

    config = load_config(rolling_world / "summaries.toml")
    daemon = Runner(config)
    daemon.run("demo", AT)
    grid_file = config.server.state_dir / "summaries" / "demo" / "grid.npz"
    grid_bytes = grid_file.read_bytes()
    start, end = AT - timedelta(hours=6), AT + timedelta(hours=12)
    first = backtest(config, start, end)
    cache = config.server.state_dir / "summaries" / "demo"
    entries = {p: p.stat().st_mtime_ns for p in cache.glob("*/*.bucket")}
    assert len(entries) >= 8 * 24
    second = backtest(config, start, end)
    assert [v.to_dict() for v in second[0].verdicts] == [v.to_dict() for v in first[0].verdicts]
    assert len(first[0].verdicts) == 19
    # nothing recomputed: every bucket of the second replay came from disk
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*/*.bucket")} == entries
    assert grid_file.read_bytes() == grid_bytes  # a replay never replaces the daemon's grid


def test_an_unwritable_cache_costs_the_cache_not_the_check(
    rolling_world: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    (state / "summaries").mkdir(parents=True)
    (state / "summaries" / "demo").write_text("a file where the cache's directory should be")
    checks = SummaryChecks(state)
    with caplog.at_level("WARNING", logger="monitor.incremental"):
        read = _read(checks, rolling_world, AT)
    assert read.buckets_read == 8 * 24
    assert not checks.cache.writable
    warned = [r for r in caplog.records if "cannot write a cached bucket" in r.getMessage()]
    assert len(warned) == 1  # once, not once a bucket
    again = _read(checks, rolling_world, AT)  # the memory cache still serves
    assert again.buckets_read == 0


def test_a_bucket_file_round_trips_narrow_where_it_fits() -> None:
    """Cells go to disk as index steps and counts, raw, in the narrowest unsigned type that
    holds them, and as int64 when a count does not fit 32 bits; they read back equal. An
    entry that is torn, padded, of another grid or format, or of float cells is refused."""
    import struct

    from monitor.incremental.store import Bucket
    from monitor.stats import Cells, Grid

    grid = Grid(np.linspace(0.0, 1.0, 50))
    small = Cells(np.array([0, 7, 98]), np.array([3, 1, 2**31 - 1]), 2**31 + 3, 0, 0, 5)
    large = Cells(np.array([1, 2]), np.array([2**32, 4]), 2**32 + 4, 0, 0, None)
    bucket = Bucket(3_600_000_000_000, {"a": small, "b": large}, unplaced=2)
    data = bucket.to_bytes("k", "fp")
    (size,) = struct.unpack_from("<I", data, 8)
    meta = json.loads(data[12 : 12 + size])
    # steps 1, 7, 91 in one byte each; counts up to 2^31 - 1 in four; 2^32 in eight
    assert [np.dtype(d) for d, _ in meta["arrays"]] == [np.uint8, np.uint32, np.uint8, np.int64]
    assert len(data) == 12 + size + 3 + 12 + 2 + 16
    back, fingerprint = Bucket.from_bytes(data, grid, "k")
    assert fingerprint == "fp"
    assert (back.unplaced, back.start_ns) == (2, bucket.start_ns)
    for name, cells in bucket.summaries.items():
        got = back.summaries[name]
        assert got.index.dtype == got.count.dtype == np.int64
        assert np.array_equal(got.index, cells.index)
        assert np.array_equal(got.count, cells.count)
        assert (got.rows, got.newest_ns) == (cells.rows, cells.newest_ns)

    def with_meta(**change: object) -> bytes:
        head = json.dumps({**meta, **change}).encode()
        return data[:8] + struct.pack("<I", len(head)) + head + data[12 + size :]

    floats = with_meta(arrays=[["<f8", 3], *meta["arrays"][1:]])
    bad = {
        "dtype": floats,
        "past the end": data[:-1],
        "do not fill": data + b"\0",
        "not an entry of this grid": with_meta(format=1),
        "not a bucket": b"PK\x03\x04" + data[4:],
        "out of range": Bucket(0, {"a": Cells(np.array([101]), np.array([1]), 1, 0, 0)}).to_bytes(
            "k", "fp"
        ),
    }
    for message, entry in bad.items():
        with pytest.raises(ValueError, match=message):
            Bucket.from_bytes(entry, grid, "k")
    with pytest.raises(ValueError, match="not an entry of this grid"):
        Bucket.from_bytes(data, grid, "another")


_GRID = Grid(np.linspace(0.0, 1.0, 50))


@st.composite
def _buckets(draw: st.DrawFn) -> Bucket:
    from monitor.stats import Cells

    names = draw(st.lists(st.text(max_size=6), max_size=3, unique=True))
    summaries = {}
    for name in names:
        index = sorted(draw(st.sets(st.integers(0, _GRID.n_cells - 1), max_size=40)))
        count = draw(st.lists(st.integers(1, 2**40), min_size=len(index), max_size=len(index)))
        newest = draw(st.none() | st.integers(0, 2**62))
        summaries[name] = Cells(
            np.array(index, np.int64), np.array(count, np.int64), sum(count), 3, 1, newest
        )
    return Bucket(draw(st.integers(0, 2**62)), summaries, draw(st.integers(0, 10**9)))


@given(bucket=_buckets(), cut=st.integers(0, 10**6), flip=st.integers(0, 10**6))
@settings(max_examples=150, deadline=None)
def test_bucket_entries_round_trip_and_damage_is_refused(
    bucket: Bucket, cut: int, flip: int
) -> None:
    """Any bucket reads back equal; any truncation of its entry, and any single changed byte,
    raises one of the errors the cache treats as corrupt (and recomputes), never another
    exception: the checksum over the header and the cells refuses a flipped count, which the
    shapes and bounds once let through (a bit flipped on disk changed n_current)."""
    from monitor.incremental.store import _CORRUPT

    data = bucket.to_bytes("k", "fp")
    back, fingerprint = Bucket.from_bytes(data, _GRID, "k")
    assert fingerprint == "fp"
    assert (back.start_ns, back.unplaced) == (bucket.start_ns, bucket.unplaced)
    assert sorted(back.summaries) == sorted(bucket.summaries)
    for name, cells in bucket.summaries.items():
        got = back.summaries[name]
        assert np.array_equal(got.index, cells.index)
        assert np.array_equal(got.count, cells.count)
        assert (got.rows, got.invalid, got.zeros, got.newest_ns) == (
            cells.rows,
            cells.invalid,
            cells.zeros,
            cells.newest_ns,
        )
    torn = data[: cut % len(data)]
    with pytest.raises(_CORRUPT):
        Bucket.from_bytes(torn, _GRID, "k")
    at = flip % len(data)
    changed = data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1 :]
    with pytest.raises(_CORRUPT):
        Bucket.from_bytes(changed, _GRID, "k")


def test_a_cache_removes_entries_of_the_first_format_and_keeps_grids(tmp_path: Path) -> None:
    """``.npz`` bucket entries (the first format, never read again) are removed when a cache
    opens its directory, so the size bound does not leave them on disk; grid files stay."""
    from monitor.incremental.store import BucketCache

    old = tmp_path / "demo" / "k1" / "3600000000000.npz"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"PK")
    grid = tmp_path / "demo" / "grid.npz"
    grid.write_bytes(b"PK")
    kept = tmp_path / "demo" / "k1" / "7200000000000.bucket"
    kept.write_bytes(b"RMBUCKET")
    BucketCache(tmp_path, max_bytes=1 << 20)
    assert not old.exists()
    assert grid.exists()
    assert kept.exists()


def test_a_cache_opening_leaves_a_live_writers_temp_file(tmp_path: Path) -> None:
    """A cache that opens removes the temp files of writes a kill interrupted, never one a
    live process is writing (the daemon's, while monitor check starts): it once removed every
    one, the writer's rename failed, and the daemon wrote no bucket to disk for 10 minutes."""
    import os
    import subprocess
    import sys

    from monitor.incremental.store import BucketCache

    folder = tmp_path / "demo" / "k1"
    folder.mkdir(parents=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        writing = folder / f".bucket.{live.pid}_140001.tmp"
        left = folder / f".bucket.{gone.pid}_140001.tmp"
        mine = folder / f".bucket.{os.getpid()}_140001.tmp"
        for f in (writing, left, mine):
            f.write_bytes(b"RMBUCKET")
        BucketCache(tmp_path, max_bytes=1 << 20)
        assert writing.exists()
        assert mine.exists()
        assert not left.exists()
    finally:
        live.kill()
        live.wait()


def test_the_disk_bound_counts_every_writers_buckets_and_only_buckets(tmp_path: Path) -> None:
    """Two processes' caches on one directory: the bound holds over both writers' files (a
    cache once counted its own writes only, and the directory grew past the bound), and a
    stray file among the entries (a copy) is neither counted nor removed (its name once made
    every eviction raise)."""
    from monitor.incremental.store import BucketCache
    from monitor.stats import Cells

    def bucket(start: int) -> Bucket:
        return Bucket(start, {"a": Cells(np.array([3, 7]), np.array([2, 5]), 7, 0, 0)})

    size = _blocks(tmp_path, len(bucket(0).to_bytes("k", "fp")))
    daemon = BucketCache(tmp_path, max_bytes=4 * size)
    other = BucketCache(tmp_path, max_bytes=4 * size)
    stray = tmp_path / "m" / "k" / "123 (copy).bucket"
    daemon.put("m", "k", "fp", bucket(0))
    stray.write_bytes(b"x" * size)
    for start in range(1, 4):
        other.put("m", "k", "fp", bucket(start))  # the daemon's cache never saw these
    for start in range(4, 8):
        daemon.put("m", "k", "fp", bucket(start))
    entries = sorted(int(p.stem) for p in (tmp_path / "m" / "k").glob("*.bucket") if p != stray)
    assert entries == [4, 5, 6, 7]  # the newest four of both writers'
    assert stray.exists()


def _digests_one_by_one(files: list[FileStat], starts: np.ndarray, step: int) -> list[str]:
    """The bucket digests as plainly as they can be written: each bucket's files in path
    order (a file of unknown span in every bucket)."""
    out = []
    for b in starts.tolist():
        h = hashlib.blake2b(digest_size=16)
        for f in files:
            if (
                f.oldest_ns is None
                or f.newest_ns is None
                or (f.oldest_ns < b + step and f.newest_ns >= b)
            ):
                tail = f"\0{f.deletes}" if f.deletes else ""
                h.update(f"{f.path}\0{f.size}\0{f.mtime_ns}\0{f.ctime_ns}{tail}\n".encode())
        out.append(h.hexdigest())
    return out


def test_bucket_digests_equal_digests_made_one_by_one() -> None:
    """The digests of a table's buckets in one pass are those made bucket by bucket, through
    late, rewritten, removed and straddling files and files of unknown span, and the windows'
    rows are the plain sums."""
    rng = np.random.default_rng(11)
    step = 3_600_000_000_000
    first = to_ns(T0)
    starts = np.arange(first, first + 48 * step, step, dtype=np.int64)

    def made(i: int, mtime: int = 0) -> FileStat:
        if rng.random() < 0.05:
            return FileStat(f"/s/f{i:04d}", 100 + i, mtime, None, None, 10 + i)
        lo = first + int(rng.integers(-3 * step, 50 * step))
        hi = lo + int(rng.integers(0, 3 * step))
        deletes = "2:abcd" if rng.random() < 0.1 else ""
        ctime = int(rng.integers(1, 10**18)) if rng.random() < 0.5 else 0  # local files'
        return FileStat(f"/s/f{i:04d}", 100 + i, mtime, lo, hi, 10 + i, deletes, ctime)

    files = [made(i) for i in range(80)]
    for round_ in range(6):
        table = FileTable.of(sorted(files, key=lambda f: f.path))
        got = _fingerprints(table, starts, step)
        assert got == _digests_one_by_one(table.files, starts, step), round_
        for w in (Window(T0, T0 + DAY), Window(T0 + 5 * HOUR, T0 + 30 * HOUR)):
            plain = sum(
                f.rows
                for f in table.files
                if f.oldest_ns is None
                or f.newest_ns is None
                or (f.oldest_ns < w.end_ns and f.newest_ns >= w.start_ns)
            )
            assert table.rows_in(w) == plain
        # the next check: a late file, a rewritten one, a removed one; the rest the same objects
        files[int(rng.integers(len(files)))] = made(int(rng.integers(len(files))), round_ + 1)
        files.append(made(100 + round_))
        files.pop(int(rng.integers(len(files))))


@given(data=st.data())
@settings(max_examples=80, deadline=None)
def test_a_bucket_plan_digests_what_digesting_afresh_gives(data: st.DataObject) -> None:
    """Whatever a check's files are against the last check's (moved on by an hour, a late,
    rewritten or removed file, a file of unknown span, the list reordered, an equal copy of a
    file, another grid): ``BucketPlan`` gives each bucket the digest that digesting every
    bucket afresh gives, and hands back the last check's bucket only for a bucket whose
    digest and grid are unchanged."""
    from monitor.incremental.windows import BucketPlan

    step = 3_600_000_000_000
    first = to_ns(T0)
    n_files = 0

    def made(mtime: int = 0) -> FileStat:
        nonlocal n_files
        n_files += 1
        path = f"/s/f{data.draw(st.integers(0, 10_000)):05d}-{n_files}"
        if data.draw(st.integers(0, 19)) == 0:
            return FileStat(path, 100, mtime, None, None, 10)
        lo = first + data.draw(st.integers(-3, 40)) * step + data.draw(st.integers(0, step - 1))
        hi = lo + data.draw(st.integers(0, 3 * step))
        return FileStat(path, 100, mtime, lo, hi, 10)

    files = [made() for _ in range(data.draw(st.integers(0, 12)))]
    plan = BucketPlan()
    last: dict[tuple[str, int], tuple[str, Bucket]] = {}
    offset = 0
    moved: FileStat | None = None  # the one file the last move added, when it moved on
    for round_ in range(data.draw(st.integers(1, 6))):
        key = data.draw(st.sampled_from(["k1", "k2"]))
        span = Window(T0 + offset * HOUR, T0 + (offset + 24) * HOUR)
        starts = list(range(span.start_ns, span.end_ns, step))
        step_plan = plan.update(list(files), step, span)
        prints, have = plan.fingerprints(step_plan, key, starts)
        by_path = sorted(files, key=lambda f: f.path)
        assert prints == _digests_one_by_one(by_path, np.array(starts), step), round_
        buckets = []
        for b, fp, h in zip(starts, prints, have, strict=True):
            held = last.get((key, b))
            if h is not None:  # handed back: the same grid and digest as when it was made
                assert held is not None
                assert held == (fp, h)
            elif moved is not None and held is not None and held[0] == fp:
                # the window moved on and one file came: only buckets it touches are redone
                assert moved.oldest_ns is None or (
                    moved.newest_ns is not None
                    and moved.oldest_ns < b + step
                    and moved.newest_ns >= b
                ), (round_, b)
            buckets.append(h if h is not None else Bucket(b, {}))
        last = {(key, b): (fp, bk) for b, fp, bk in zip(starts, prints, buckets, strict=True)}
        plan.commit(step_plan, key, [(starts[0], prints, buckets)])
        # the next check
        move = data.draw(st.sampled_from(["hour", "late", "rewrite", "remove", "shuffle", "copy"]))
        moved = None
        if move == "hour":
            offset += 1
            files.append(made())
            moved = files[-1]
        elif move == "late":
            files.insert(data.draw(st.integers(0, len(files))), made())
        elif files and move == "rewrite":
            i = data.draw(st.integers(0, len(files) - 1))
            old = files[i]
            files[i] = FileStat(
                old.path, old.size + 1, old.mtime_ns + 1, old.oldest_ns, old.newest_ns, old.rows
            )
        elif files and move == "remove":
            files.pop(data.draw(st.integers(0, len(files) - 1)))
        elif move == "shuffle":
            files = data.draw(st.permutations(files))
        elif files and move == "copy":  # an equal object in place of the one held
            i = data.draw(st.integers(0, len(files) - 1))
            f = files[i]
            files[i] = FileStat(f.path, f.size, f.mtime_ns, f.oldest_ns, f.newest_ns, f.rows)


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_a_rolled_window_equals_its_buckets_summed_afresh(data: st.DataObject) -> None:
    """Whatever each check hands a window (moved on by a few buckets, the same list again,
    one bucket recomputed as another object, a longer or shorter window, one restarted): the
    rolled totals and the bin rows on the segment's and other edges equal those summed and
    binned from the buckets afresh, exactly."""
    from monitor.incremental.windows import _bins, _Rolling
    from monitor.stats import Cells, bin_ends

    def hour(b: Bucket, i: int) -> Bucket:  # bucket i; a summary's rows count its invalid ones
        cells = {
            n: Cells(c.index, c.count, c.n + c.invalid, c.invalid, min(c.zeros, c.n), c.newest_ns)
            for n, c in b.summaries.items()
        }
        return Bucket(i, cells, b.unplaced)

    pool = [hour(data.draw(_buckets()), i) for i in range(14)]
    edges = (_GRID.points[[10, 20, 30, 40]], _GRID.points[[5, 25, 45]])
    rolling = _Rolling(_GRID)
    start, length = 0, data.draw(st.integers(1, 6))
    for _ in range(data.draw(st.integers(1, 8))):
        start = min(start + data.draw(st.integers(0, 3)), len(pool) - length)
        length = data.draw(st.sampled_from([length, length, max(1, length - 1), length + 1]))
        length = min(length, len(pool) - start)
        if data.draw(st.booleans()):  # a late file: one bucket recomputed, another object
            i = data.draw(st.integers(start, start + length - 1))
            pool[i] = Bucket(pool[i].start_ns, dict(pool[i].summaries), pool[i].unplaced)
        window = pool[start : start + length]
        totals = rolling.update(window)
        names = {n for b in window for n in b.summaries}
        for name in names:
            parts = [b.summaries[name] for b in window if name in b.summaries]
            fresh = Cells.total(_GRID, parts)
            assert np.array_equal(totals[name].counts, fresh.counts)
            assert (totals[name].rows, totals[name].invalid, totals[name].zeros) == (
                fresh.rows,
                fresh.invalid,
                fresh.zeros,
            )
            for e in edges[: data.draw(st.integers(1, 2))]:
                rows = _bins(_GRID, window, name, e, rolling=rolling)
                ends = bin_ends(_GRID, e)
                want = [
                    b.summaries[name].bins(ends) if name in b.summaries else np.zeros(e.size + 1)
                    for b in window
                ]
                assert np.array_equal(rows, np.array(want, dtype=np.int64).reshape(rows.shape))
        assert set(totals) <= names  # a segment no bucket holds any more is gone
        assert rolling.rows[0] == sum(s.rows for b in window for s in b.summaries.values()) + sum(
            b.unplaced for b in window
        )


@pytest.mark.parametrize("engine", ["whole windows", "summaries"])
def test_a_reload_that_changes_a_monitor_drops_what_was_read_for_it(
    fixed_world: Path, tmp_path: Path, engine: str
) -> None:
    """SIGHUP with a monitor's bins changed, then with it removed: the runner decides from the
    new settings, exactly as a runner started with them (not from the baseline, grid or
    buckets it kept for the old ones), and keeps nothing of a removed monitor."""
    name = "arrays.toml" if engine == "whole windows" else "summaries.toml"
    config = load_config(fixed_world / name)
    runner = Runner(config, store=StateStore(tmp_path / "a"))
    runner.check("demo", AT)
    changed_text = (fixed_world / name).read_text() + "\n"
    changed_text = changed_text.replace("[[monitors]]\n", "[[monitors]]\ndrift.bins = 5\n", 1)
    changed_path = fixed_world / f"changed-{name}"
    changed_path.write_text(changed_text)
    changed = load_config(changed_path)
    assert changed.monitors[0].drift.bins == 5 != config.monitors[0].drift.bins
    runner.reconfigure(changed)
    got = runner.check("demo", AT)
    want = Runner(changed, store=StateStore(tmp_path / "b")).check("demo", AT)
    assert got.to_dict() == want.to_dict()
    for r in got.inputs.values():
        assert r.psi_bins is not None
        assert r.psi_bins <= 5
    removed = replace(changed, monitors=())
    runner.reconfigure(removed)
    assert not any(k[0].name == "demo" for k in runner._baselines)
    assert not runner.summaries.holds("demo")


@pytest.mark.parametrize("version", [2, 3])
def test_an_entry_of_an_earlier_format_is_recomputed_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    """Entries written before the checksum (format 2) or before each invalid score counted in
    its own bucket (format 3) are met once after an upgrade: they are dropped and recomputed
    without a 'corrupt' warning each; a damaged current entry is still warned of."""
    import logging
    import struct

    from monitor.incremental.store import BucketCache
    from monitor.stats import Cells

    bucket = Bucket(0, {"a": Cells(np.array([3, 7]), np.array([2, 5]), 7, 0, 0)})
    data = bucket.to_bytes("k", "fp")
    size = struct.unpack("<I", data[8:12])[0]
    meta = json.loads(data[12 : 12 + size])
    if version == 2:
        meta.pop("sum")
    head = json.dumps({**meta, "format": version}).encode()
    old = data[:8] + struct.pack("<I", len(head)) + head + data[12 + size :]
    cache = BucketCache(tmp_path, 1 << 20)
    path = tmp_path / "m" / "k" / "0.bucket"
    path.parent.mkdir(parents=True)
    caplog.set_level(logging.WARNING, logger="monitor")
    path.write_bytes(old)
    assert cache.get("m", "k", _GRID, 0, "fp") is None
    assert not path.exists()
    assert not caplog.records
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # a flipped bit in the last count
    assert cache.get("m", "k", _GRID, 0, "fp") is None
    assert [r.getMessage() for r in caplog.records] == [
        "corrupt cached bucket removed; recomputing it"
    ]
    path.write_bytes(data)
    got = cache.get("m", "k", _GRID, 0, "fp")
    assert got is not None
    assert np.array_equal(got.summaries["a"].count, [2, 5])


@pytest.mark.parametrize("persist", [True, False])
def test_a_corrupt_grid_is_rebuilt_and_the_log_says_what_became_of_the_file(
    rolling_world: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, persist: bool
) -> None:
    """The daemon (``persist_grids``) removes a corrupt grid file and writes the new grid; a
    read-only process (check, report) builds its own and leaves the file as it found it."""
    state = tmp_path / "state"
    _read(SummaryChecks(state), rolling_world, AT)
    grid = state / "summaries" / "demo" / "grid.npz"
    grid.write_bytes(b"not a grid")
    checks = SummaryChecks(state, persist_grids=persist)
    with caplog.at_level("WARNING", logger="monitor.incremental"):
        read = _read(checks, rolling_world, AT)
    assert read.n_current > 0
    (record,) = [r for r in caplog.records if "corrupt summary grid" in r.getMessage()]
    if persist:
        assert record.getMessage() == "corrupt summary grid removed; building a new one"
        assert grid.read_bytes() != b"not a grid"
    else:
        assert "ignored (left for the daemon)" in record.getMessage()
        assert grid.read_bytes() == b"not a grid"


def _newest_row(root: Path, feed: str) -> datetime:
    """The newest timestamp of a feed's files, from their rows (not the monitor's lookup)."""
    import pyarrow.parquet as pq

    newest = max(
        pq.read_table(f, columns=["timestamp"]).column("timestamp").to_numpy().max()
        for f in (root / feed).rglob("*.parquet")
    )
    return datetime.fromtimestamp(int(newest.astype("datetime64[us]").astype(int)) / 1e6, UTC)


@pytest.mark.parametrize("config", ["arrays.toml", "summaries.toml"])
def test_a_feed_dead_longer_than_the_windows_says_since_when(
    rolling_world: Path, config: str
) -> None:
    """Both feeds stopped 30 days before the check, longer than every window it reads: the
    verdict still names their newest rows, where it read 'newest score never' and the
    freshness series vanished exactly when a feed was most stale."""
    late = T0 + timedelta(days=40)
    v = Runner(load_config(rolling_world / config)).check("demo", late)
    assert v.state == "insufficient_data"
    score, outcome = _newest_row(rolling_world, "scores"), _newest_row(rolling_world, "outcomes")
    assert v.newest_score == score
    assert v.newest_outcome == outcome
    stale = " ".join(v.stale)
    assert f"score feed stale since {score.isoformat().replace('+00:00', 'Z')}" in stale
    assert "never" not in " ".join(v.reasons)
    # a replay before the feed's end: rows after the slot are not its freshness
    mid = Runner(load_config(rolling_world / config)).check("demo", AT)
    assert mid.newest_score is not None
    assert mid.newest_score < AT


def test_a_first_look_never_pairs_a_run_with_itself(rolling_world: Path) -> None:
    """A first look pools the runs of the outcome feed's max_lag (2 days here), which reaches
    into the reference window: the run that lies in both is looked at, and the reference ends
    where the looked-at runs begin. Once it was in both, and the look paired it with itself.
    The mean difference is checked against pairing by hand (per-query means, by query id)."""
    import pyarrow.parquet as pq

    v = Runner(load_config(rolling_world / "arrays.toml")).check("demo", AT)
    rows = [
        pq.read_table(f).to_pydict()
        for f in sorted((rolling_world / "outcomes").rglob("*.parquet"))
    ]

    def when(text: str | None) -> datetime:
        assert text is not None
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    for segment, o in v.outcomes.items():
        assert o.runs == 2
        runs_start, reference_end = when(o.runs_start), when(o.reference_end)
        assert runs_start < AT - DAY  # the pool reaches into the reference window
        assert reference_end <= runs_start

        def means(lo: datetime, hi: datetime, segment: str = segment) -> dict[str, float]:
            acc: dict[str, list[float]] = {}
            for table in rows:
                for t, q, y, s in zip(
                    *(table[c] for c in ("timestamp", "query_id", "outcome", "segment")),
                    strict=True,
                ):
                    if s == segment and lo <= t < hi:
                        acc.setdefault(q, []).append(y)
            return {q: float(np.mean(ys)) for q, ys in acc.items()}

        ref = means(when(o.reference_start), reference_end)
        cur = means(runs_start, AT)
        both = sorted(set(ref) & set(cur))
        assert o.n_pairs == len(both)
        want = float(np.mean([cur[q] - ref[q] for q in both]))
        assert o.mean_difference == pytest.approx(want, abs=1e-12)


def test_a_buckets_bin_rows_keep_the_edge_sets_in_use_only() -> None:
    """A segment new since the grid was built gets other edges as its reference rolls, and each
    set's rows stayed on every bucket for the grid's life (13,393 sets after a week of hourly
    checks, 5.6 MB the cache's bytes did not count). Two sets a segment and two more are kept;
    the rows asked for are the ones computed."""
    from monitor.incremental.windows import _bins
    from monitor.stats.summary import Cells, Grid, bin_ends

    grid = Grid(np.linspace(0.0, 10.0, 101))
    index = np.arange(1, 2 * 101, 2, dtype=np.int64)  # one score at each grid point
    cells = Cells(index, np.ones(index.size, dtype=np.int64), rows=101, invalid=0, zeros=1)
    buckets = [Bucket(start_ns=h * 3_600_000_000_000, summaries={"new": cells}) for h in range(5)]
    for k in range(50):  # the edges of each check: a cut that moves
        edges = grid.points[[10, 20 + k, 70]]
        rows = _bins(grid, buckets, "new", edges)
        fresh = cells.bins(bin_ends(grid, edges))
        assert all(row.tolist() == fresh.tolist() for row in rows)
        assert int(rows[0].sum()) == 101
    assert all(len(b.bins) <= 4 for b in buckets)


def test_a_grid_sample_is_not_held_to_the_windows_invalid_share(tmp_path: Path) -> None:
    """The grid is built from a sample of the reference's row groups: a row group of NaN that
    the whole reference tolerates (0.6 % of it, the bound 1 %) is a far larger share of a
    small sample, and the check was an error quoting the sample's counts as the window's."""
    root = _world(tmp_path, engine='kind = "local"\nsummary.grid_sample_rows = 20000\n')
    from monitor.sources import clear_cache

    n = 2000  # in the reference's first file (the sample's first row group)
    stamps = np.datetime64("2026-11-02T00:00:00", "us") + np.arange(n).astype("timedelta64[s]")
    write_parquet(
        root / "scores" / "date=2026-11-02" / "0-nan.parquet",
        {"timestamp": stamps, "score": np.full(n, np.nan), "segment": np.array(["web"] * n)},
    )
    for toml in ("arrays.toml", "summaries.toml"):
        clear_cache()
        verdict = Runner(load_config(root / toml)).check("demo", AT)
        assert verdict.state != "error", (toml, verdict.error)


def test_an_entry_the_cache_cannot_remove_costs_the_cache_not_the_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry eviction cannot remove (another user's, written by a `monitor check` run as
    root; here a directory in an entry's name) raised out of ``put`` and made every check an
    error; so did a killed writer's temp file the cache could not remove when it opened. It
    is left, warned of and no longer counted, and the live entries are kept."""
    from monitor.incremental.store import BucketCache
    from monitor.stats import Cells

    def bucket(start: int) -> Bucket:
        return Bucket(start, {"a": Cells(np.array([3, 7]), np.array([2, 5]), 7, 0, 0)})

    size = _blocks(tmp_path, len(bucket(0).to_bytes("k", "fp")))
    folder = tmp_path / "m" / "k"
    stuck = folder / "0.bucket"  # the oldest entry by name: the first evicted
    (stuck / "inside").mkdir(parents=True)
    left = folder / ".bucket.999999999_1.tmp"  # a write of a process long gone
    (left / "inside").mkdir(parents=True)
    cache = BucketCache(tmp_path, max_bytes=2 * size)
    assert left.exists()
    for start in range(1, 6):
        cache.put("m", "k", "fp", bucket(start))
    entries = sorted(int(p.stem) for p in folder.glob("*.bucket") if p.is_file())
    assert entries == [4, 5]  # the bound held over the removable entries
    assert stuck.is_dir()
    assert any("cannot evict cached buckets" in r.getMessage() for r in caplog.records)
    fresh = BucketCache(tmp_path, max_bytes=1 << 20)
    assert fresh.get("m", "k", Grid(np.arange(10.0)), 5, "fp") is not None


def test_a_rebuilt_grid_removes_the_old_grids_buckets(tmp_path: Path) -> None:
    """When the daemon rebuilds a grid the old grid's buckets are removed with it: they were
    never read again but outlived the live grid's at the bound, so a fresh process (monitor
    check, a restart) read half its windows again every hour for days after a regrid."""
    root = _world(tmp_path, engine='kind = "local"\n')
    config = load_config(root / "summaries.toml")
    runner = Runner(config)
    runner.check("demo", AT)
    cache = root / "state" / "summaries" / "demo"
    (first,) = (d.name for d in cache.iterdir() if d.is_dir())
    assert any((cache / first).glob("*.bucket"))
    replay = cache / "0123456789abcdef" / "3600000000000.bucket"  # a backtest's own grid
    replay.parent.mkdir()
    replay.write_bytes(b"RMBUCKET")
    # a score setting that keys the grid changes: a new grid, under a new key
    changed = (
        (root / "summaries.toml")
        .read_text()
        .replace('kind = "local"', 'kind = "local"\nsummary.max_effect = 0.05')
    )
    (root / "summaries.toml").write_text(changed)
    Runner(load_config(root / "summaries.toml")).check("demo", AT)
    keys = sorted(d.name for d in cache.iterdir() if d.is_dir())
    assert first not in keys
    assert len(keys) == 2, keys
    assert replay.exists()  # only the replaced grid's buckets go: a replay's are its own


def test_a_reload_applies_a_new_cache_bound(tmp_path: Path) -> None:
    """SIGHUP with a lower ``summary.cache_max_bytes`` (to free a disk) kept the bound the
    daemon started with."""
    root = _world(tmp_path, engine='kind = "local"\n')
    runner = Runner(load_config(root / "summaries.toml"))
    text = (root / "summaries.toml").read_text()
    (root / "summaries.toml").write_text(
        text.replace('kind = "local"', 'kind = "local"\nsummary.cache_max_bytes = 2097152')
    )
    runner.reconfigure(load_config(root / "summaries.toml"))
    assert runner.summaries.cache.max_bytes == 2097152


_RESERVE_SCRIPT = r"""
import json, os, sys
from pathlib import Path
from typing import Any
import numpy as np
from monitor.incremental.store import Bucket, BucketCache
from monitor.stats import Cells

root = Path(sys.argv[1])
cells = Cells(np.arange(0, 120_000, 2), np.full(60_000, 70_000), 0, 0, 0)  # ~300 KB entries
cache = BucketCache(root / "summaries", max_bytes=1 << 30)
free = lambda: os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
for start in range(20):  # 6 MB of entries on a 4 MiB volume, far under the 1 GiB bound
    cache.put("m", "k", "fp", Bucket(start, {"a": cells}))
after_puts = free()
# the volume fills from elsewhere (another monitor's history): the next write makes room
with open(root / "filler", "wb") as f:
    try:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    except OSError:
        pass
cache.put("m", "k", "fp", Bucket(99, {"a": cells}))
(root / "filler").unlink()
entries = sorted(int(p.stem) for p in (root / "summaries" / "m" / "k").glob("*.bucket"))
print(json.dumps({"free": after_puts, "entries": entries, "writable": cache.writable}))
"""


_SHARED_SCRIPT = r"""
import json, os, sys
from pathlib import Path
from typing import Any
import numpy as np
from monitor.incremental.store import Bucket, BucketCache
from monitor.stats import Cells

root = Path(sys.argv[1])
big = Cells(np.arange(0, 40_000, 2), np.full(20_000, 70_000), 0, 0, 0)  # ~100 KB entries
small = Cells(np.array([3]), np.array([1]), 1, 0, 0)
if sys.argv[2] == "shared":  # two writers; the daemon lists again after 10 % of its bound
    daemon = BucketCache(root / "s", max_bytes=8 << 20)
    other = BucketCache(root / "s", max_bytes=8 << 20)
    daemon.put("m", "k", "fp", Bucket(0, {"a": big}))
    for start in range(1000, 1068):
        other.put("m", "k", "fp", Bucket(start, {"a": big}))
    for start in range(1, 10):
        daemon.put("m", "k", "fp", Bucket(start, {"a": big}))
elif sys.argv[2] == "crowded":  # other files hold 91 % of many inodes: thousands stay free
    (root / "other").mkdir()
    for i in range(18_200):
        (root / "other" / str(i)).touch()
    cache = BucketCache(root / "s", max_bytes=1 << 30)
    for start in range(200):
        cache.put("m", "k", "fp", Bucket(start, {"a": small}))
else:  # small entries: the inodes run out before the bytes
    cache = BucketCache(root / "s", max_bytes=1 << 30)
    for start in range(400):
        cache.put("m", "k", "fp", Bucket(start, {"a": small}))
    (root / "state.json").write_text("{}")  # a state save still finds an inode
entries = sorted(int(p.stem) for p in (root / "s" / "m" / "k").glob("*.bucket"))
st = os.statvfs(root)
print(json.dumps({"entries": entries, "inodes": st.f_favail}))
"""


def _on_tmpfs(tmp_path: Path, options: str, script: str, *args: str) -> tuple[dict[str, Any], str]:
    """Run ``script`` (Python, its first argument the volume) on a tmpfs of ``options``
    mounted in a private mount namespace: its last stdout line as JSON, and its stderr."""
    import json
    import subprocess
    import sys

    from tests.ci import missing
    from tests.faults import _unshare, namespace_mounts_work

    if (why := namespace_mounts_work()) is not None:
        missing(why)
    volume = tmp_path / "volume"
    volume.mkdir()
    out = subprocess.run(
        [*_unshare(), "sh", "-c",
         f"mount -t tmpfs -o {options} tmpfs {volume} && exec \"$@\"", "sh",
         sys.executable, "-c", script, str(volume), *args],
        capture_output=True, text=True, check=True, timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@pytest.mark.parametrize(
    ("options", "mode"),
    [
        ("size=8m", "shared"),
        ("size=64m,nr_inodes=200", "inodes"),
        ("size=64m,nr_inodes=20000", "crowded"),
    ],
)
def test_the_volume_reserve_evicts_what_it_needs_and_counts_inodes(
    tmp_path: Path, options: str, mode: str
) -> None:
    """Two writers on a volume the reserve binds: after the daemon listed the cache again, it
    evicted to the limit of its stale view and removed nearly all the other writer had added
    (6 MB to free 23 KB). Small entries ran out of inodes with bytes to spare, and every state
    save failed: a tenth of the inodes (at most 1,024) is kept free too; uncapped, a volume
    whose other files held 91 % of its inodes kept one entry."""
    got, _ = _on_tmpfs(tmp_path, options, _SHARED_SCRIPT, mode)
    if mode == "shared":
        others = [e for e in got["entries"] if e >= 1000]
        assert len(others) >= 55, got  # a few evicted for room, not all 68
        assert got["entries"][-1] == 1067
    elif mode == "crowded":  # the inodes kept free are capped (a tenth of all was 2,000)
        assert len(got["entries"]) == 200, got
    else:
        assert got["inodes"] >= 200 // 10 - 3, got
        assert got["entries"][-1] == 399


def test_the_cache_leaves_its_volume_room_for_the_state(tmp_path: Path) -> None:
    """On a volume smaller than its bound (the shipped 1 GiB volume and 1 GiB bound) the
    cache filled the volume, and every state save failed from then on. It leaves a tenth of
    the volume (at most 64 MiB) free, and a write that finds the volume full evicts the
    oldest entries and is written."""
    got, stderr = _on_tmpfs(tmp_path, "size=4m", _RESERVE_SCRIPT)
    assert got["free"] >= (4 << 20) // 10 - (64 << 10), got  # a tenth left, to a page or so
    assert got["writable"], stderr
    assert got["entries"][-2:] == [19, 99], got  # the newest kept
    assert 0 not in got["entries"], got


def test_the_disk_bound_counts_the_blocks_entries_take(tmp_path: Path) -> None:
    """An entry of a few hundred bytes takes a whole block: counted by length, a cache at its
    bound held 5-14 times its bytes on disk (a daemon's minute buckets, measured with du)."""
    from monitor.incremental.store import BucketCache
    from monitor.stats import Cells

    block = _blocks(tmp_path, 1)
    cache = BucketCache(tmp_path, max_bytes=10 * block)
    for start in range(50):
        cache.put(
            "m", "k", "fp", Bucket(start, {"a": Cells(np.array([3]), np.array([2]), 2, 0, 0)})
        )
    files = list((tmp_path / "m" / "k").glob("*.bucket"))
    assert sum(_held(f) for f in files) <= 10 * block
    assert sorted(int(f.stem) for f in files)[-1] == 49


def test_a_buckets_counted_memory_is_near_what_it_holds() -> None:
    """The memory bound counted only a bucket's cell arrays: a third of what tracemalloc
    measured for minute buckets. The objects around them count too."""
    import tracemalloc

    from monitor.stats import Cells

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = [
            Bucket(
                start,
                {
                    "a": Cells(np.array([3, 7, 9]), np.array([2, 5, 1]), 8, 0, 0),
                    "b": Cells(np.array([1]), np.array([4]), 4, 0, 0),
                },
            )
            for start in range(500)
        ]
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = sum(b.nbytes for b in held)
    assert counted >= 0.8 * traced, (counted, traced)


@pytest.mark.parametrize("config", ["arrays.toml", "summaries.toml"])
def test_scores_landing_in_a_tested_block_are_counted_once_and_said(
    rolling_world: Path, config: str
) -> None:
    """A writer later than ``drift.settle``: its rows land in an hour a block already tested,
    and the next block starts after it, so no block ever tests them (a drift they alone carry
    stays unseen). The next check counts them (read whole or through summaries alike), says so
    among the reasons and exports them (``late_scores``); the check after it counts none."""
    now = [AT]  # each slot checked at its time, as the daemon does
    runner = Runner(load_config(rolling_world / config), clock=lambda: now[0])
    first = runner.run("demo", AT)
    assert first.verdict.inputs["web"].evidence
    assert first.verdict.inputs["web"].late_scores == 0
    hour = datetime(2026, 11, 9, 13, tzinfo=UTC)  # inside the block the first check tested
    stamps = np.datetime64(hour.replace(tzinfo=None), "us") + np.arange(50).astype("timedelta64[s]")
    write_parquet(
        rolling_world / "scores" / "date=2026-11-09" / "late.parquet",
        {"timestamp": stamps, "score": np.full(50, 3.25), "segment": np.array(["web"] * 50)},
    )
    now[0] = AT + HOUR
    second = runner.run("demo", AT + HOUR).verdict
    web = second.inputs["web"]
    assert (web.late_scores, second.inputs["app"].late_scores) == (50, 0)
    # missing at the first check, there at the second: more than the first's time less their
    # hour's end behind their time, at most the second's less their hour's start
    assert web.late_scores_lag_min == (AT - (hour + HOUR)).total_seconds()
    assert web.late_scores_lag_max == (AT + HOUR - hour).total_seconds()
    said = [r for r in second.reasons if "landed after the evidence block" in r]
    assert len(said) == 1
    assert said[0].startswith("segment 'web': 50 scores landed")
    assert "more than 10h and at most 12h late" in said[0]
    assert "drift.settle = 0s" in said[0]
    now[0] = AT + 2 * HOUR
    assert runner.run("demo", AT + 2 * HOUR).verdict.inputs["web"].late_scores == 0


def test_scores_within_drift_settle_are_not_late(rolling_world: Path) -> None:
    """With ``drift.settle`` past the writer's lateness, the hour its rows land in was not yet
    in a block: they are tested with the next one, and nothing is counted late."""
    text = (rolling_world / "summaries.toml").read_text()
    text = text.replace(
        'windows.current = "1d"\n', 'windows.current = "1d"\ndrift.settle = "12h"\n'
    )
    (rolling_world / "settled.toml").write_text(text)
    runner = Runner(load_config(rolling_world / "settled.toml"))
    first = runner.run("demo", AT).verdict.inputs["web"]
    assert first.block_end == "2026-11-09T12:00:00Z"
    stamps = np.datetime64("2026-11-09T13:00:00", "us") + np.arange(50).astype("timedelta64[s]")
    write_parquet(
        rolling_world / "scores" / "date=2026-11-09" / "late.parquet",
        {"timestamp": stamps, "score": np.full(50, 3.25), "segment": np.array(["web"] * 50)},
    )
    second = runner.run("demo", AT + HOUR).verdict.inputs["web"]
    assert second.late_scores == 0
    assert second.block_start == "2026-11-09T12:00:00Z"


@pytest.mark.parametrize("config", ["arrays.toml", "summaries.toml"])
def test_a_partition_overwritten_between_checks_brings_back_no_late_scores(
    rolling_world: Path, config: str
) -> None:
    """A day's partition deleted and written back with the same rows (an overwrite, a
    compaction), a check falling between the two: the scores that come back were tested, not
    late. Counted down to the gap and up again, they once read as 34,314 late scores and the
    advice to raise drift.settle; the count is a high-water mark."""
    runner = Runner(load_config(rolling_world / config))
    assert runner.run("demo", AT).verdict.inputs["web"].evidence
    day = rolling_world / "scores" / "date=2026-11-09" / "part-0.parquet"
    aside = rolling_world / "aside.parquet"
    shutil.move(day, aside)
    between = runner.run("demo", AT + HOUR).verdict
    assert between.inputs["web"].late_scores == 0
    shutil.move(aside, day)
    after = runner.run("demo", AT + 2 * HOUR).verdict
    assert {name: r.late_scores for name, r in after.inputs.items()} == {"web": 0, "app": 0}
    assert not [r for r in after.reasons if "landed after the evidence block" in r]


def test_late_scores_are_counted_through_buckets_that_do_not_divide_the_hour(
    rolling_world: Path,
) -> None:
    """Buckets of 45 minutes (valid: they divide a 3-hour schedule and the windows): the
    tested block's parts are cut at hours, off the buckets' boundaries, and were let go as
    uncountable, so late scores were never counted through summaries. A bucket is counted in
    the part holding its start, as the block counted it: the same 50 as read whole."""
    late = {}
    for config, engine in (("arrays.toml", ""), ("summaries.toml", '\nsummary.bucket = "45m"')):
        text = (rolling_world / config).read_text().replace('schedule = "1h"', 'schedule = "3h"')
        text = (
            text.replace(
                'windows.current = "1d"\n', 'windows.current = "1d"\ndrift.seasonality = "none"\n'
            )
            + engine
        )
        (rolling_world / f"b45-{config}").write_text(text)
    for config in ("arrays.toml", "summaries.toml"):
        runner = Runner(load_config(rolling_world / f"b45-{config}"))
        state = Path(load_config(rolling_world / f"b45-{config}").server.state_dir)
        assert runner.run("demo", AT).verdict.inputs["web"].evidence
        late_file = rolling_world / "scores" / "date=2026-11-09" / "late.parquet"
        stamps = np.datetime64("2026-11-09T13:30:00", "us") + np.arange(50).astype("timedelta64[s]")
        write_parquet(
            late_file,
            {"timestamp": stamps, "score": np.full(50, 3.25), "segment": np.array(["web"] * 50)},
        )
        late[config] = runner.run("demo", AT + 3 * HOUR).verdict.inputs["web"].late_scores
        late_file.unlink()
        shutil.rmtree(state)
    assert late == {"arrays.toml": 50, "summaries.toml": 50}


def _late_rows(root: Path, n: int, at: datetime, name: str = "late.parquet") -> None:
    stamps = np.datetime64(at.replace(tzinfo=None), "us") + np.arange(n).astype("timedelta64[s]")
    write_parquet(
        root / "scores" / "date=2026-11-09" / name,
        {"timestamp": stamps, "score": np.full(n, 3.25), "segment": np.array(["web"] * n)},
    )


@pytest.mark.parametrize("config", ["arrays.toml", "summaries.toml"])
def test_late_scores_after_a_rewrite_that_dropped_rows_are_counted(
    rolling_world: Path, config: str
) -> None:
    """An hour rewritten with 10 of its rows taken out (a dedup), then 5 late rows for it: a
    mark that never came down hid them (5 under it). Below the mark at two checks in a row,
    the first count is the mark, and the 5 are late."""
    import pyarrow.parquet as pq

    runner = Runner(load_config(rolling_world / config))
    assert runner.run("demo", AT).verdict.inputs["web"].evidence
    day = rolling_world / "scores" / "date=2026-11-09" / "part-0.parquet"
    table = pq.read_table(day)
    stamps = table.column("timestamp").to_numpy()
    web = table.column("segment").to_numpy(zero_copy_only=False) == "web"
    hour = np.datetime64("2026-11-09T13:00:00", "us")
    inside = np.flatnonzero(web & (stamps >= hour) & (stamps < hour + np.timedelta64(1, "h")))
    keep = np.ones(table.num_rows, dtype=bool)
    keep[inside[:10]] = False
    pq.write_table(table.filter(keep), day)
    assert runner.run("demo", AT + HOUR).verdict.inputs["web"].late_scores == 0
    _late_rows(rolling_world, 5, datetime(2026, 11, 9, 13, 30, tzinfo=UTC))
    assert runner.run("demo", AT + 2 * HOUR).verdict.inputs["web"].late_scores == 5
    assert runner.run("demo", AT + 3 * HOUR).verdict.inputs["web"].late_scores == 0


@pytest.mark.parametrize("config", ["arrays.toml", "summaries.toml"])
def test_late_scores_bounds_hold_around_a_dip_and_a_slot_checked_late(
    rolling_world: Path, config: str
) -> None:
    """How late is bounded by what the checks saw: (a) rows landed before a check that found
    their partition gone a while (a compaction) were there, hidden: "more than L" may not take
    that check's time (it said 11 h for rows 10 h late); (b) a slot checked late (a restart
    catching up) counts what landed until it read: "at most U" runs to then (it said 35 h for
    rows 54 h late)."""
    now = [AT]
    runner = Runner(load_config(rolling_world / config), clock=lambda: now[0])
    assert runner.run("demo", AT).verdict.inputs["web"].evidence
    stamped = datetime(2026, 11, 9, 13, 59, 59, tzinfo=UTC)
    _late_rows(rolling_world, 1, stamped)  # lands at AT + 10 minutes: 10 h 0 min 1 s late
    day = rolling_world / "scores" / "date=2026-11-09" / "part-0.parquet"
    shutil.move(day, rolling_world / "aside.parquet")
    now[0] = AT + HOUR
    assert runner.run("demo", AT + HOUR).verdict.inputs["web"].late_scores == 0
    shutil.move(rolling_world / "aside.parquet", day)
    now[0] = AT + 2 * HOUR
    web = runner.run("demo", AT + 2 * HOUR).verdict.inputs["web"]
    assert web.late_scores == 1
    assert web.late_scores_lag_min is not None
    assert web.late_scores_lag_min <= (AT + timedelta(minutes=10) - stamped).total_seconds()
    # (b): the slot of AT + 3h read at AT + 20h, rows stamped 13:30 landed at AT + 19h
    _late_rows(rolling_world, 4, datetime(2026, 11, 9, 13, 30, tzinfo=UTC), "later.parquet")
    now[0] = AT + 20 * HOUR
    web = runner.run("demo", AT + 3 * HOUR).verdict.inputs["web"]
    assert web.late_scores == 4
    assert web.late_scores_lag_max is not None
    landed = AT + 19 * HOUR - datetime(2026, 11, 9, 13, 30, tzinfo=UTC)
    assert web.late_scores_lag_max >= landed.total_seconds()


def _hour_alone(root: Path) -> tuple[Any, Path]:
    """Moves 2026-11-09 13:00's rows out of the day's file into a file of their own: (those
    rows as a table, that file)."""
    import pyarrow.parquet as pq

    day = root / "scores" / "date=2026-11-09" / "part-0.parquet"
    table = pq.read_table(day)
    stamps = table.column("timestamp").to_numpy()
    hour = np.datetime64("2026-11-09T13:00:00", "us")
    inside = (stamps >= hour) & (stamps < hour + np.timedelta64(1, "h"))
    pq.write_table(table.filter(~inside), day)
    alone = day.with_name("hour-13.parquet")
    pq.write_table(table.filter(inside), alone)
    return table.filter(inside), alone


@pytest.mark.parametrize("config", ["arrays.toml", "summaries.toml"])
def test_an_hour_deleted_then_written_back_deduplicated_is_not_late(
    rolling_world: Path, config: str
) -> None:
    """An hour in a file of its own, overwritten the non-atomic way (deleted, then written
    back with 10 duplicates dropped), a check in the gap: its count went 0 then 10 short, two
    checks below the mark, and the mark came down to the 0, so all 2,211 scores written back
    read as late (and advice to settle 13 h). A count of 0 (files missing) lowers no mark."""
    import pyarrow.parquet as pq

    hour13, alone = _hour_alone(rolling_world)
    now = [AT]
    runner = Runner(load_config(rolling_world / config), clock=lambda: now[0])
    late = []
    for k in range(4):
        if k == 1:
            alone.unlink()
        if k == 2:
            keep = np.ones(hour13.num_rows, dtype=bool)
            keep[:10] = False
            pq.write_table(hour13.filter(keep), alone)
        now[0] = AT + k * HOUR
        verdict = runner.run("demo", AT + k * HOUR).verdict
        late.append({name: r.late_scores for name, r in verdict.inputs.items()})
    assert late == [{"web": 0, "app": 0}] * 4


@pytest.mark.parametrize("config", ["arrays.toml", "summaries.toml"])
def test_late_scores_of_an_hour_tested_during_a_dip_are_more_than_0_late(
    rolling_world: Path, config: str
) -> None:
    """A check that counted a part below its mark holds ``counted_at`` back; an hour it tested
    then took that older time, and its late scores read "more than -3600s late"."""
    now = [AT]
    runner = Runner(load_config(rolling_world / config), clock=lambda: now[0])
    assert runner.run("demo", AT).verdict.inputs["web"].evidence
    day = rolling_world / "scores" / "date=2026-11-09" / "part-0.parquet"
    shutil.move(day, rolling_world / "aside.parquet")  # a compaction, during the next check
    now[0] = AT + HOUR
    assert runner.run("demo", AT + HOUR).verdict.inputs["web"].evidence
    shutil.move(rolling_world / "aside.parquet", day)
    stamps = np.datetime64("2026-11-10T00:30:00", "us") + np.arange(5).astype("timedelta64[s]")
    write_parquet(
        rolling_world / "scores" / "date=2026-11-10" / "late.parquet",
        {"timestamp": stamps, "score": np.full(5, 3.25), "segment": np.array(["web"] * 5)},
    )
    now[0] = AT + 2 * HOUR
    web = runner.run("demo", AT + 2 * HOUR).verdict.inputs["web"]
    assert web.late_scores == 5
    assert web.late_scores_lag_min is not None
    assert web.late_scores_lag_min >= 0


@pytest.mark.parametrize("config", ["arrays.toml", "summaries.toml"])
def test_late_scores_in_an_hour_emptied_for_good_are_counted(
    rolling_world: Path, config: str
) -> None:
    """An hour in a file of its own, deleted for good (a retraction), then 5 late rows for it:
    a 0 that never lowered the mark hid them (5 under it), and every later lower bound read 0
    while the empty hour dipped. Empty at two checks in a row, the hour was emptied."""
    _, alone = _hour_alone(rolling_world)
    now = [AT]
    runner = Runner(load_config(rolling_world / config), clock=lambda: now[0])
    late = []
    for k in range(5):
        if k == 1:
            alone.unlink()
        if k == 3:
            _late_rows(rolling_world, 5, datetime(2026, 11, 9, 13, 30, tzinfo=UTC))
        now[0] = AT + k * HOUR
        late.append(runner.run("demo", AT + k * HOUR).verdict.inputs["web"].late_scores)
    assert late == [0, 0, 0, 5, 0]


def test_a_fixed_reference_rewritten_after_the_first_check_is_tested_as_it_is_now(
    fixed_world: Path, tmp_path: Path
) -> None:
    """A fixed reference's baseline (arrays) and full grid (summaries) were kept by the
    window's bounds and row count: a day of it re-scored with as many rows (a correction), or
    a late file of it, after a long-lived runner's first check was read (its rows counted)
    but never tested, until a restart (arrays: the first baseline; summaries: the persisted
    grid, for good). Both now follow the files, and agree with a fresh process's numbers."""
    root = tmp_path / "w"
    shutil.copytree(fixed_world, root, ignore=shutil.ignore_patterns("state"))
    arrays = Runner(load_config(root / "arrays.toml"))
    summaries = Runner(load_config(root / "summaries.toml"))
    for runner in (arrays, summaries):
        runner.check("demo", AT)
    target = root / "scores" / "date=2026-11-03" / "part-0.parquet"
    _rewrite_in_place(target, None)
    _rewrite_in_place(target, 0.8)  # as many rows, the scores moved
    at = AT + HOUR
    fresh = _inputs(Runner(load_config(root / "arrays.toml")), at)
    for runner in (arrays, summaries, Runner(load_config(root / "summaries.toml"))):
        got = _inputs(runner, at)
        assert set(got) == set(fresh) == {"web", "app"}
        for name in fresh:
            a, b = dict(fresh[name]), dict(got[name])
            assert b["ks_statistic_high"] is None  # the full grid holds every reference value
            for key in ("grid_points", "ks_location"):
                a.pop(key), b.pop(key)
            assert a == b, name


def test_a_reference_file_corrected_during_the_read_is_tested_at_the_next_check(
    fixed_world: Path, tmp_path: Path
) -> None:
    """The fixed reference's identity was taken after its read: a correction landing while it
    was read was in the identity, not in the values, and the old baseline was kept under the
    new identity for good. Taken before the read, the next check sees the change."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from monitor.checkdata import ParquetReader

    root = tmp_path / "w"
    shutil.copytree(fixed_world, root, ignore=shutil.ignore_patterns("state"))
    target = root / "scores" / "date=2026-11-03" / "part-0.parquet"

    class Writer(ParquetReader):
        fired = False

        def scores(self, spec: Any, window: Window, **kw: Any) -> Any:
            out = super().scores(spec, window, **kw)
            if not Writer.fired and window.start == datetime(2026, 11, 2, tzinfo=UTC):
                Writer.fired = True  # the writer's correction lands as the reference was read
                t = pq.read_table(target)
                i = t.schema.get_field_index("score")
                t = t.set_column(i, "score", pc.add(t.column("score"), 0.3))
                pq.write_table(t, target.with_name("x.tmp"))
                target.with_name("x.tmp").replace(target)
            return out

    long_lived = Runner(load_config(root / "arrays.toml"), reader=Writer())
    long_lived.check("demo", AT)
    assert Writer.fired
    at = AT + HOUR
    assert _inputs(long_lived, at) == _inputs(Runner(load_config(root / "arrays.toml")), at)
