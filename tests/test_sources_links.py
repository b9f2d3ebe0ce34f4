"""Symlinks, loops and dangling links under a source path: real links on real parquet files.

Each real file is read once however many names lead to it; a directory loop is skipped and logged;
a name that cannot be followed (a dangling link, a loop of links, a partition that cannot be
listed) is a ``SourceError`` naming it, so the check is ``error``, never ``ok`` on partial data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from monitor import sources
from monitor.errors import SourceError, SourceNotFoundError, SourcePermissionError
from monitor.sources import (
    OutcomeSpec,
    ScoreSpec,
    Window,
    latest_timestamp,
    read_outcomes,
    read_scores,
    write_parquet,
)

T0 = datetime(2026, 11, 30, tzinfo=UTC)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
TODAY = Window(T0, T0 + DAY)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    sources.clear_cache()


def _stamps(start: datetime, n: int) -> np.ndarray:
    base = np.datetime64(start.replace(tzinfo=None), "us")
    return base + np.arange(n) * np.timedelta64(60, "s")


def _day(root: Path, day: datetime, hours: int = 3, rows: int = 10) -> None:
    """``root/date=YYYY-MM-DD/hH.parquet``: ``rows`` scores per hour, values 0..rows-1."""
    for h in range(hours):
        write_parquet(
            root / f"date={day.date().isoformat()}" / f"h{h:02d}.parquet",
            {"timestamp": _stamps(day + h * HOUR, rows), "score": np.arange(rows, dtype=float)},
        )


def _read(root: Path, window: Window = TODAY) -> sources.ScoreWindow:
    return read_scores(ScoreSpec(str(root)), window)


def test_directory_loops_count_each_file_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "scores"
    _day(root, T0)
    before = _read(root)
    assert (before.rows, before.files_read) == (30, 3)
    # The production failure: a link back up the tree made every file count 41 times.
    (root / "date=2026-11-30" / "loop").symlink_to("..")
    (root / "self").symlink_to(".")
    sources.clear_cache()
    with caplog.at_level("WARNING", logger="monitor.sources.paths"):
        after = _read(root)
    assert (after.rows, after.files_read) == (before.rows, before.files_read)
    np.testing.assert_array_equal(np.sort(after.values), np.sort(before.values))
    assert (
        f"{root / 'date=2026-11-30' / 'loop'}: skipped, it is the directory {root}" in caplog.text
    )
    assert "symlink loop" in caplog.text
    assert latest_timestamp(ScoreSpec(str(root))) == T0 + 2 * HOUR + 9 * timedelta(minutes=1)


def test_a_file_reached_by_several_names_is_read_once(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    _day(root, T0)
    extra = tmp_path / "elsewhere"
    _day(extra, T0, hours=1, rows=4)  # 4 more rows, reachable through links only
    (root / "latest").symlink_to(root / "date=2026-11-30", target_is_directory=True)
    (root / "date=2026-11-30" / "copy.parquet").symlink_to("h00.parquet")
    os.link(root / "date=2026-11-30" / "h01.parquet", root / "h01-hardlink.parquet")
    (root / "more").symlink_to(extra / "date=2026-11-30")
    (root / "more-again").symlink_to(extra / "date=2026-11-30" / "h00.parquet")
    got = _read(root)
    assert got.rows == 30 + 4
    assert got.files_read == 4
    assert float(got.values.sum()) == 3 * 45 + 6


def test_outcomes_behind_a_loop_are_counted_once(tmp_path: Path) -> None:
    root = tmp_path / "outcomes"
    write_parquet(
        root / "part.parquet",
        {
            "timestamp": _stamps(T0, 4),
            "query_id": np.array(["a", "a", "b", "c"]),
            "outcome": np.array([1.0, 0.0, 1.0, 0.5]),
        },
    )
    (root / "again").symlink_to(".")
    got = read_outcomes(OutcomeSpec(str(root)), TODAY)
    assert got.rows == 4
    assert got.counts.tolist() == [2, 1, 1]
    assert got.outcomes.tolist() == [0.5, 1.0, 0.5]


def test_partition_linked_to_a_missing_volume_is_an_error_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    _day(root, T0)
    _day(root, T0 - DAY)
    link = root / "date=2026-11-29"
    for f in link.iterdir():
        f.unlink()
    link.rmdir()
    link.symlink_to(tmp_path / "unmounted-volume" / "date=2026-11-29")
    two_days = Window(T0 - DAY, T0 + DAY)
    with pytest.raises(SourceNotFoundError) as caught:
        _read(root, two_days)
    assert caught.value.path == str(link)
    message = str(caught.value)
    assert "dangling symlink" in message
    assert "unmounted-volume" in message
    # A window that hive pruning keeps away from the broken partition still reads (it would not
    # have opened that partition anyway), and freshness does not need it either.
    assert _read(root).rows == 30
    assert latest_timestamp(ScoreSpec(str(root))) is not None
    # Without pruning every partition is listed, so the broken one is an error for every window.
    with pytest.raises(SourceNotFoundError, match="dangling symlink"):
        read_scores(ScoreSpec(str(root), prune_partitions=False), TODAY)


def test_dangling_file_link_and_link_loops_are_errors(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    _day(root, T0, hours=1)
    dangling = root / "date=2026-11-30" / "h01.parquet"
    dangling.symlink_to("h01-rewritten.parquet")
    with pytest.raises(SourceNotFoundError) as caught:
        _read(root)
    assert caught.value.path == str(dangling)
    assert "'h01-rewritten.parquet' does not exist" in str(caught.value)
    dangling.unlink()
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    with pytest.raises(SourceError, match="loop of symlinks") as loop:
        _read(root)
    assert loop.value.path in (str(root / "a"), str(root / "b"))
    # Names starting with '_' or '.' stay skipped, links or not.
    (root / "a").unlink()
    (root / "b").unlink()
    (root / "_tmp").symlink_to("nowhere")
    (root / ".partial.parquet").symlink_to("nowhere")
    assert _read(root).rows == 10


def test_a_fifo_or_a_device_where_data_should_be_is_an_error(tmp_path: Path) -> None:
    """A named pipe among a partition's files, or a partition that is a link to /dev/null, was
    left out of the listing without a word: that data read as absent, and the check said ok on
    part of it (a whole reference day gone). Each is an error naming it; names starting with
    '_' or '.' stay skipped."""
    root = tmp_path / "scores"
    _day(root, T0, hours=1)
    fifo = root / "date=2026-11-30" / "h01.parquet"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match=r"is a named pipe \(FIFO\), not a parquet") as caught:
        _read(root)
    assert caught.value.path == str(fifo)
    fifo.unlink()
    device = root / "date=2026-11-30" / "h02.parquet"
    device.symlink_to("/dev/null")
    with pytest.raises(SourceError, match=r"character device \(through a symlink\)") as caught:
        _read(root)
    assert caught.value.path == str(device)
    device.unlink()
    os.mkfifo(root / "date=2026-11-30" / "_writing.parquet")
    assert _read(root).rows == 10
    # under a glob, judged as a file is: one the pattern never matches fails nothing
    os.mkfifo(root / "date=2026-11-30" / "ingest.pipe")
    pattern = str(root / "*" / "*.parquet")
    assert read_scores(ScoreSpec(pattern), TODAY).rows == 10
    os.mkfifo(root / "date=2026-11-30" / "late.parquet")
    with pytest.raises(SourceError, match="named pipe"):
        read_scores(ScoreSpec(pattern), TODAY)


def test_source_root_that_is_a_dangling_link(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    root.symlink_to(tmp_path / "gone")
    with pytest.raises(SourceNotFoundError, match="dangling symlink") as caught:
        _read(root)
    assert caught.value.path == str(root)
    # A root that is a good link to a directory is read through it.
    root.unlink()
    _day(tmp_path / "real", T0, hours=1)
    root.symlink_to(tmp_path / "real")
    assert _read(root).rows == 10


_LANDLOCK_LIST = """
import ctypes, json, os, sys
from datetime import UTC, datetime, timedelta
from monitor import sources
from monitor.errors import SourceError
root = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
READ_DIR = 1 << 3
class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]
# Landlock: from here on this process may list directories below `root` only, root user included.
attr = (ctypes.c_uint64 * 1)(READ_DIR)
fd = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
rule = PathBeneath(READ_DIR, os.open(root, os.O_PATH | os.O_CLOEXEC)) if fd >= 0 else None
if (
    fd < 0
    or libc.syscall(445, fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0
    or libc.prctl(38, 1, 0, 0, 0) != 0
    or libc.syscall(446, fd, 0) != 0
):
    print(json.dumps({"skip": "landlock unavailable"}))
    sys.exit(0)
t0 = datetime(2026, 11, 30, tzinfo=UTC)
try:
    got = sources.read_scores(sources.ScoreSpec(root), sources.Window(t0, t0 + timedelta(days=1)))
    print(json.dumps({"error": None, "rows": got.rows}))
except SourceError as exc:
    print(json.dumps({"error": type(exc).__name__, "path": exc.path, "message": str(exc)}))
"""


def test_unreadable_partition_is_an_error_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    _day(root, T0 - DAY)
    volume = tmp_path / "volume"
    _day(volume, T0)
    partition = root / "date=2026-11-30"
    partition.symlink_to(volume / "date=2026-11-30")
    assert _read(root).rows == 30
    if os.geteuid() != 0:
        (volume / "date=2026-11-30").chmod(0)
        try:
            with pytest.raises(SourcePermissionError) as caught:
                _read(root)
        finally:
            (volume / "date=2026-11-30").chmod(0o755)
        assert caught.value.path == str(partition)
        return
    # Root lists any mode-000 directory: deny listing outside `root` with Landlock in a child.
    out = subprocess.run(
        [sys.executable, "-c", _LANDLOCK_LIST, str(root)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    result = json.loads(out)
    if "skip" in result:
        pytest.skip("running as root and the kernel has no Landlock to deny a listing")
    assert result["error"] == "SourcePermissionError", result
    assert result["path"] == str(partition)
    assert "permission denied while listing the directory" in result["message"]


@pytest.mark.parametrize("written", ["data/s.parquet", "data", "data/*.parquet"])
def test_a_config_directory_named_like_a_glob_is_read_literally(
    tmp_path: Path, written: str
) -> None:
    """A config in ``br[1]/`` with ``scores.path = "data/s.parquet"`` once read
    ``br1/data/s.parquet``: the directory it was joined to was taken for a glob (``[1]`` a
    character class). Only what the user wrote may be a pattern."""
    from monitor.config import load_config

    t0 = datetime(2026, 3, 2, tzinfo=UTC)
    when = np.array([np.datetime64("2026-03-02T01:00:00", "us")] * 3)
    for directory, value in (("br[1]", 1.0), ("br1", 2.0)):
        sources.write_parquet(
            tmp_path / directory / "data" / "s.parquet",
            {"timestamp": when, "score": np.full(3, value)},
        )
    config = tmp_path / "br[1]" / "monitor.toml"
    config.write_text(f'[[monitors]]\nname = "m"\nscores.path = "{written}"\noutcomes.path = "o"\n')
    spec = load_config(config).monitors[0].scores
    got = sources.read_scores(spec, sources.Window(start=t0, end=t0 + timedelta(days=1)))
    assert got.values.tolist() == [1.0, 1.0, 1.0]
    # messages name the path as it is, not as escaped (br[[]1] is no directory anyone has)
    literal = f"{tmp_path}/br[1]/{written}"
    assert sources.display_path(spec.path) == (literal if "*" not in written else spec.path)
    if "*" not in written:
        (tmp_path / "br[1]" / "data" / "s.parquet").unlink()
        if written == "data":
            (tmp_path / "br[1]" / "data").rmdir()
        with pytest.raises(SourceNotFoundError) as info:
            sources.read_scores(spec, sources.Window(start=t0, end=t0 + timedelta(days=1)))
        assert literal in str(info.value)
        assert "[[]" not in str(info.value)


def test_a_glob_never_enters_what_no_match_can_lie_below(tmp_path: Path) -> None:
    """``scores-*.parquet`` in a directory that also holds a dangling link (a backup volume
    not mounted): the walk entered every subdirectory below the glob's fixed part and raised
    for the link, failing every check over an entry no match can be under. One that may
    hold a match is still raised for."""
    import os

    data = tmp_path / "data"
    data.mkdir()
    os.symlink("/nonexistent/volume", data / "backup")
    sources.write_parquet(
        data / "scores-0.parquet",
        {
            "timestamp": np.array(["2026-03-01T01:00:00"], dtype="datetime64[us]"),
            "score": np.array([0.5]),
        },
    )
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    window = sources.Window(start=t0, end=t0 + timedelta(days=1))
    spec = sources.ScoreSpec(path=f"{data}/scores-*.parquet")
    assert sources.read_scores(spec, window).rows == 1
    below = sources.ScoreSpec(path=f"{data}/b*/scores-*.parquet")  # 'backup' may hold one
    with pytest.raises(SourceNotFoundError, match="dangling"):
        sources.read_scores(below, window)
