"""Change notification for local partitions (``monitor.sources.watch``, Linux inotify): a
daemon's walk looks nothing up in a watched partition that raised no event, hands whole watched
days out at once, and every change shows at the next read; where a change could go unseen
(another link, a lost event queue, a filesystem inotify cannot vouch for) it looks up as before.
Real files and a real inotify instance; the look-ups are counted, not timed."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor import sources
from monitor.epoch import to_ns
from monitor.sources import ScoreSpec, Window, read_scores, watch, window_file_stats, write_parquet
from monitor.sources import paths as paths_module
from monitor.sources import scores as scores_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")

T0 = datetime(2026, 11, 28, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


@pytest.fixture
def watcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[watch.Watcher]:
    """A watcher of this test's own (the process's one would carry other tests' watches)."""
    sources.clear_cache()
    fresh = watch._start()
    if fresh is None:
        pytest.skip("inotify cannot be started here")
    monkeypatch.setattr(watch, "_WATCHER", fresh)
    monkeypatch.setattr(watch, "_STARTED", True)
    yield fresh
    fresh.close()
    sources.clear_cache()


class _Lookups:
    """``os.stat``, ``os.scandir`` and ``_children`` calls, counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stat = self.scandir = self.children = 0
        stat, scandir, children = os.stat, os.scandir, paths_module._children

        def counted_stat(*a: object, **k: object) -> os.stat_result:
            self.stat += 1
            return stat(*a, **k)  # type: ignore[arg-type]

        def counted_scandir(path: str) -> object:
            self.scandir += 1
            return scandir(path)

        def counted_children(*a: object) -> object:
            self.children += 1
            return children(*a)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "stat", counted_stat)
        monkeypatch.setattr(os, "scandir", counted_scandir)
        monkeypatch.setattr(paths_module, "_children", counted_children)

    def reset(self) -> None:
        self.stat = self.scandir = self.children = 0


def _write(path: Path, when: datetime, value: float, rows: int = 1) -> None:
    moment = np.datetime64(when.replace(tzinfo=None), "us")
    write_parquet(
        path, {"timestamp": np.full(rows, moment), "score": np.full(rows, value, dtype=float)}
    )


def _old(*dirs: Path) -> None:
    past = to_ns(T0 - 10 * DAY)
    for d in dirs:
        os.utime(d, ns=(past, past))  # modified long ago: a listing of it may be kept


def _tree(root: Path, days: int = 3, hours: int = 3) -> list[Path]:
    made = []
    for d in range(days):
        for h in range(hours):
            t = T0 + d * DAY + h * HOUR
            part = root / f"date={t:%Y-%m-%d}" / f"hour={t:%H}"
            _write(part / "part-0.parquet", t, 10 * d + h)
            made.append(part)
    _old(root, *root.glob("date=*"), *made)
    return made


def _values(spec: ScoreSpec, window: Window) -> list[float]:
    return sorted(read_scores(spec, window).values.tolist())


def _truth(root: Path, window: Window) -> list[float]:
    """What a process that never walked the tree reads."""
    sources.clear_cache()
    return _values(ScoreSpec(str(root)), window)


def test_watched_partitions_are_not_looked_up_and_every_change_shows(
    tmp_path: Path, watcher: watch.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "scores"
    parts = _tree(root)
    spec, window = ScoreSpec(str(root)), Window(T0, T0 + 3 * DAY)
    count = _Lookups(monkeypatch)
    for _ in range(3):  # listed; looked up again and watched; each day's subtree gathered
        window_file_stats(spec, window)
    assert watcher.watched == 1 + 3 + 9  # the root, the days, the hours
    count.reset()
    planned: list[object] = []
    file_stat = scores_module._file_stat

    def counted_file_stat(*a: Any) -> Any:
        planned.append(a[2])
        return file_stat(*a)

    monkeypatch.setattr(scores_module, "_file_stat", counted_file_stat)
    stats = window_file_stats(spec, window)
    assert len(stats) == 9
    assert (count.stat, count.scandir) == (1, 0)  # the root's identity, and nothing else
    assert count.children == 1  # the root; each day is handed out whole
    assert planned == []  # and its files' stats with it, as the last walk found them
    assert window_file_stats(spec, window) == stats

    changes: list[Callable[[], object]] = [
        # a late file in an old hour
        lambda: _write(parts[1] / "part-1.parquet", T0 + HOUR, 100.0),
        # a file rewritten in place with more rows
        lambda: _write(parts[4] / "part-0.parquet", T0 + DAY + HOUR, 11.0, rows=3),
        # a file removed
        lambda: (parts[8] / "part-0.parquet").unlink(),
        # a new partition in an old day
        lambda: _write(
            root / "date=2026-11-29" / "hour=07" / "part-0.parquet", T0 + DAY + 7 * HOUR, 7.0
        ),
        # a partition removed whole
        lambda: shutil.rmtree(parts[6]),
        # a partition renamed to a name the walk skips
        lambda: parts[3].rename(parts[3].parent / "_hour=00"),
    ]
    for change in changes:
        before = _values(spec, window)
        change()
        got = _values(spec, window)
        assert got != before
        assert got == _truth(root, window)  # clear_cache: the next walk starts cold again
        for _ in range(3):
            _values(spec, window)  # warm again


def test_a_change_in_one_hour_regathers_only_its_day(
    tmp_path: Path, watcher: watch.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "scores"
    parts = _tree(root, days=4, hours=6)
    spec, window = ScoreSpec(str(root)), Window(T0, T0 + 4 * DAY)
    for _ in range(3):
        window_file_stats(spec, window)
    count = _Lookups(monkeypatch)
    os.utime(parts[7] / "part-0.parquet")  # day 1, hour 1: a new mtime
    stats = window_file_stats(spec, window)
    assert count.children == 1 + 1 + 6  # the root, day 1 and its hours; days 0, 2, 3 whole
    # the root; hour 1's directory and file (its day and the other hours vouched for)
    assert count.stat == 1 + 2
    assert count.scandir == 0
    changed = [f for f in stats if f.path == str(parts[7] / "part-0.parquet")]
    assert changed[0].mtime_ns == os.stat(parts[7] / "part-0.parquet").st_mtime_ns


def test_a_window_cutting_a_day_walks_that_day_by_the_hour(
    tmp_path: Path, watcher: watch.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subtree is handed out whole only inside the window: the day the window cuts is
    walked by the hour and pruned, so the files are the same as a cold walk's."""
    root = tmp_path / "scores"
    _tree(root, days=3, hours=6)
    spec = ScoreSpec(str(root))
    window = Window(T0 + 2 * HOUR, T0 + 2 * DAY + 3 * HOUR)
    for _ in range(3):
        warm = _values(spec, window)
    assert warm == _truth(root, window)
    assert warm == [2.0, 3.0, 4.0, 5.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 20.0, 21.0, 22.0]


def test_a_file_with_another_link_keeps_its_directory_looked_up(
    tmp_path: Path, watcher: watch.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write through a hard link in another directory raises no event here."""
    root = tmp_path / "scores"
    parts = _tree(root, days=1, hours=2)
    elsewhere = tmp_path / "elsewhere.parquet"
    os.link(parts[0] / "part-0.parquet", elsewhere)
    spec, window = ScoreSpec(str(root)), Window(T0, T0 + DAY)
    for _ in range(3):
        window_file_stats(spec, window)
    count = _Lookups(monkeypatch)
    window_file_stats(spec, window)
    assert count.stat == 1 + 1 + 1  # the root; the hour's directory and its linked file
    _write(tmp_path / "new.parquet", T0, 42.0, rows=2)
    os.replace(tmp_path / "new.parquet", elsewhere)  # replaces the other name only
    assert _values(spec, window) == _truth(root, window)


def test_a_lost_event_queue_voids_every_listing(
    tmp_path: Path, watcher: watch.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"the event queue holds {limit} events; too many to overflow in a test")
    root = tmp_path / "scores"
    parts = _tree(root, days=1, hours=2)
    spec, window = ScoreSpec(str(root)), Window(T0, T0 + DAY)
    for _ in range(3):
        window_file_stats(spec, window)
    epoch = watcher.current(str(root))
    noisy = [parts[0] / "part-0.parquet", parts[1] / "part-0.parquet"]
    for i in range(limit + 10):
        os.utime(noisy[i % 2])  # an IN_ATTRIB each (alternating: not coalesced): it overflows
    count = _Lookups(monkeypatch)
    window_file_stats(spec, window)
    assert watcher.current(str(root)) != epoch
    assert count.stat >= 3  # the day and both files looked up again


def test_a_filesystem_inotify_cannot_vouch_for_is_looked_up(
    tmp_path: Path, watcher: watch.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFS, SMB, FUSE: a change made on another machine raises no event here."""
    monkeypatch.setattr(watch, "LOCAL_FILESYSTEMS", frozenset())
    root = tmp_path / "scores"
    _tree(root, days=1, hours=2)
    spec, window = ScoreSpec(str(root)), Window(T0, T0 + DAY)
    for _ in range(3):
        window_file_stats(spec, window)
    assert watcher.watched == 0
    count = _Lookups(monkeypatch)
    window_file_stats(spec, window)
    assert count.stat >= 4  # the directories and files, as without a watcher


@pytest.mark.parametrize("how", ["renamed over", "symlink flipped"])
def test_another_directory_at_a_watched_path_is_listed_and_watched_anew(
    tmp_path: Path, watcher: watch.Watcher, how: str
) -> None:
    """A dataset swapped in under the same path (``mv scores scores.old; mv scores.new
    scores``) or a symlink above it flipped (blue/green) raises no event for the watched
    directories: their listings were once reused until a restart, reading the new files with
    the old files' details (an error) or missing them (a stale feed), while ``monitor check``
    read them right."""
    blue, green = tmp_path / "blue", tmp_path / "green"
    _tree(blue, days=2, hours=2)
    _tree(green, days=2, hours=2)
    for part in green.glob("date=*/hour=*/part-0.parquet"):  # other values, another size
        t = datetime.strptime(
            f"{part.parent.parent.name} {part.parent.name}", "date=%Y-%m-%d hour=%H"
        )
        _write(part, t.replace(tzinfo=UTC), 100.0, rows=3)
    _old(*green.glob("date=*/hour=*"), *green.glob("date=*"), green)
    if how == "renamed over":
        root = tmp_path / "scores"
        blue.rename(root)
    else:
        root = tmp_path / "data"
        root.symlink_to(blue)
    spec, window = ScoreSpec(str(root)), Window(T0, T0 + 2 * DAY)
    for _ in range(3):
        window_file_stats(spec, window)
    assert watcher.watched >= 2 + 4  # the days, the hours (and the root, unless a link)
    before = _values(spec, window)
    if how == "renamed over":
        root.rename(tmp_path / "scores.old")
        green.rename(root)
    else:
        (tmp_path / "next").symlink_to(green)
        os.replace(tmp_path / "next", root)
    got = _values(spec, window)
    assert got != before
    assert got == _truth(root, window)
    for _ in range(2):  # watched anew: a change in the new tree shows as any other does
        window_file_stats(spec, window)
    day = root / f"date={T0:%Y-%m-%d}" / f"hour={T0:%H}"
    _write(day / "part-1.parquet", T0, 7.0)
    assert 7.0 in _values(spec, window)


def test_tokens_change_with_events_and_end_with_the_directory(
    tmp_path: Path, watcher: watch.Watcher
) -> None:
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    dev = os.stat(d).st_dev
    top = watcher.watch(str(d), (dev, os.stat(d).st_ino))
    below = watcher.watch(str(d / "sub"), (dev, os.stat(d / "sub").st_ino))
    assert top is not None
    assert below is not None
    whole = watcher.subtree(str(d))
    (d / "sub" / "f").write_bytes(b"x")
    watcher.drain()
    assert watcher.current(str(d)) == top  # nothing changed in d itself
    assert watcher.subtree(str(d)) != whole  # but below it
    assert watcher.current(str(d / "sub")) != below
    shutil.rmtree(d / "sub")
    watcher.drain()
    assert watcher.current(str(d / "sub")) is None  # gone: nothing vouches for the path
    assert watcher.current(str(d)) != top


def test_no_watcher_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_INOTIFY", "0")
    assert watch._start() is None


def test_watches_no_walk_asks_for_are_released(
    tmp_path: Path, watcher: watch.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch stayed on every partition ever walked until the directory was deleted: kept for
    months, they used up the per-user limit and then no new partition was watched. One unused
    for ``_IDLE_SECONDS`` is released at the next hourly sweep (and its parent's subtree token
    changes: the subtree is no longer wholly watched); at the bound the one unused longest
    gives way to a new one."""
    clock = [1000.0]
    monkeypatch.setattr(watch, "_clock", lambda: clock[0])
    watcher._swept = clock[0]
    parts = [tmp_path / f"hour={h:02d}" for h in range(4)]
    for p in parts:
        p.mkdir()

    def ask(p: Path) -> Any:
        st = os.stat(p)
        return watcher.watch(str(p), (st.st_dev, st.st_ino))

    top = tmp_path
    assert ask(top) is not None
    for p in parts[:3]:
        assert ask(p) is not None
    whole = watcher.subtree(str(top))
    clock[0] += watch._IDLE_SECONDS - 10
    assert ask(top) is not None  # asked for at every walk
    assert ask(parts[2]) is not None  # still in the windows
    clock[0] += watch._SWEEP_SECONDS + 1  # parts 0 and 1 idle past the limit; a sweep is due
    assert ask(parts[3]) is not None
    assert watcher.current(str(parts[0])) is None
    assert watcher.current(str(parts[1])) is None
    assert watcher.current(str(parts[2])) is not None
    assert watcher.subtree(str(top)) != whole
    assert watcher.watched == 3  # top, 2, 3
    monkeypatch.setattr(watch, "_MAX_WATCHES", 3)
    clock[0] += 1
    assert ask(parts[0]) is not None  # at the bound: the one unused longest (top) gives way
    assert watcher.current(str(top)) is None
    assert watcher.current(str(parts[2])) is not None
    assert watcher.watched == 3


def test_a_watch_used_on_a_walks_fast_path_is_not_idle(
    tmp_path: Path, watcher: watch.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk reuses an unchanged listing (``current``) or a whole subtree without calling
    ``watch``: such watches were taken for idle and released every two days, the window's
    partitions listed again. ``touch`` marks them used, a whole subtree's too."""
    clock = [1000.0]
    monkeypatch.setattr(watch, "_clock", lambda: clock[0])
    watcher._swept = clock[0]
    day = tmp_path / "date=2026-11-30"
    hours = [day / f"hour={h:02d}" for h in range(3)]
    for p in hours:
        p.mkdir(parents=True)
    lone = tmp_path / "lone"
    lone.mkdir()
    for p in [day, *hours, lone]:
        st = os.stat(p)
        assert watcher.watch(str(p), (st.st_dev, st.st_ino)) is not None
    for _ in range(3):  # walks a day apart that reuse them
        clock[0] += watch._IDLE_SECONDS / 2
        watcher.touch(str(day), subtree=True)
        watcher.touch(str(lone))
    clock[0] += watch._SWEEP_SECONDS + 1
    other = tmp_path / "new"
    other.mkdir()
    st = os.stat(other)
    assert watcher.watch(str(other), (st.st_dev, st.st_ino)) is not None  # the sweep runs
    for p in [*hours, lone]:
        assert watcher.current(str(p)) is not None, p
    clock[0] += watch._IDLE_SECONDS + watch._SWEEP_SECONDS  # no walk since: all idle now
    watcher.watch(str(other), (st.st_dev, st.st_ino))
    assert watcher.watched == 1


@pytest.mark.parametrize("how", ["a second path through a link", "a day renamed aside"])
def test_one_directory_under_two_paths_keeps_every_change_in_sight(
    tmp_path: Path, watcher: watch.Watcher, how: str
) -> None:
    """inotify gives one descriptor for one directory, whatever the path it was asked under.
    Watched under a second path (a monitor reading the tree through a link; a day moved
    aside, ``date=X`` to ``date=X.old``, then walked), the first path's entry was dropped
    while the descriptor still named it: the next event in it raised a bare KeyError, the
    rest of the event buffer was lost, and listings kept from before read as unchanged (rows
    on disk never read, the check reported)."""
    real = tmp_path / "scores"
    _tree(real, days=2, hours=2)
    window = Window(T0, T0 + 2 * DAY)
    first, second = ScoreSpec(str(real)), ScoreSpec(str(tmp_path / "alias"))
    if how == "a second path through a link":
        (tmp_path / "alias").symlink_to(real)
    for _ in range(3):
        window_file_stats(first, window)
    if how == "a day renamed aside":  # a backfill: the day moved aside, written anew, dropped
        day = real / f"date={T0:%Y-%m-%d}"
        aside = real / f"date={T0:%Y-%m-%d}.old"
        day.rename(aside)
        for _ in range(2):
            window_file_stats(first, window)  # the aside day's hours, under their new paths
        shutil.copytree(aside, day)
        shutil.rmtree(aside)
    else:
        for _ in range(2):
            window_file_stats(second, window)
    for part in real.glob("date=*/hour=*"):  # a late file in each partition of the tree
        if part.parent.suffix != ".old":
            t = datetime.strptime(f"{part.parent.name} {part.name}", "date=%Y-%m-%d hour=%H")
            _write(part / "part-late.parquet", t.replace(tzinfo=UTC) + HOUR / 2, 99.0)
    for _ in range(3):
        assert _values(first, window) == _truth(real, window)
    assert _values(first, window).count(99.0) == 4  # every partition's late file
