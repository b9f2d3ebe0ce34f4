"""The state store: atomic writes, corrupt files kept aside (daemon) or left alone (check)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitor.jobs import StateStore
from monitor.verdict import MonitorState, SegmentDrift

STATE = MonitorState(
    drift={"": SegmentDrift(evidence_end=datetime(2026, 11, 30, tzinfo=UTC))},
    state="data_drift",
    state_since=datetime(2026, 11, 29, 12, tzinfo=UTC),
)


def test_round_trip_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    assert store.load("m") == MonitorState()
    store.save("m", STATE)
    store.save("m", STATE)
    assert store.load("m") == STATE
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["m.json"]


def test_corrupt_file_is_kept_aside_by_the_daemon(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path)
    store.path("m").write_text('{"version": 2, "drift": 7}')
    assert store.load("m") == MonitorState()
    aside = [p.name for p in tmp_path.iterdir()]
    assert len(aside) == 1
    assert aside[0].startswith("m.json.corrupt-")
    assert "kept aside" in caplog.text


def test_readonly_store_never_touches_the_directory(tmp_path: Path) -> None:
    StateStore(tmp_path).save("m", STATE)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    readonly = StateStore(tmp_path, readonly=True)
    assert readonly.load("m") == STATE
    with pytest.raises(PermissionError, match="read-only"):
        readonly.save("m", MonitorState())
    readonly.path("m").write_text("garbage")
    assert readonly.load("m") == MonitorState()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)
