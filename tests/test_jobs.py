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


def test_check_reproduces_the_daemons_latest_slot(tmp_path: Path) -> None:
    """``check`` at the daemon's last slot gives the daemon's verdict (from ``before_last``),
    also while alarms are raised; the state file is left untouched."""
    import dataclasses
    from datetime import timedelta

    from monitor.config import load_config
    from monitor.jobs import Runner
    from monitor.simulate import SCENARIOS, write_world

    start = datetime(2026, 3, 2, tzinfo=UTC)
    scenario = dataclasses.replace(SCENARIOS["drift_and_decay"], scores_per_hour=300)
    world = write_world(
        tmp_path, scenario, start=start, end=start + timedelta(days=17), seed=4, schedule="6h"
    )
    config = load_config(world.config_path)
    daemon = Runner(config, clock=lambda: start + timedelta(days=17))
    slots = config.monitors[0].schedule.slots(
        start + timedelta(days=14), start + timedelta(days=17)
    )
    seen = set()
    for at in slots:
        record = daemon.run("demo", at)
        before = (tmp_path / "state" / "demo.json").read_bytes()
        reader = Runner(config, store=StateStore(tmp_path / "state", readonly=True))
        assert reader.check("demo", at).to_dict() == record.verdict.to_dict()
        assert (tmp_path / "state" / "demo.json").read_bytes() == before
        seen.add(record.verdict.state)
    assert {"data_drift", "model_decay"} & seen


def test_check_at_any_past_slot_replays_what_the_daemon_decided(tmp_path: Path) -> None:
    """``monitor check --at T`` for earlier slots rebuilds the sequential state by replaying
    from the daemon's first slot: same verdict as the daemon for every slot of the history."""
    import dataclasses
    import json
    from datetime import timedelta

    from monitor.cli import main
    from monitor.config import load_config
    from monitor.jobs import Runner
    from monitor.simulate import SCENARIOS, write_world

    start = datetime(2026, 3, 2, tzinfo=UTC)
    scenario = dataclasses.replace(SCENARIOS["drift_and_decay"], scores_per_hour=300)
    world = write_world(
        tmp_path, scenario, start=start, end=start + timedelta(days=17), seed=4, schedule="6h"
    )
    config = load_config(world.config_path)
    daemon = Runner(config, clock=lambda: start + timedelta(days=17))
    slots = config.monitors[0].schedule.slots(
        start + timedelta(days=14), start + timedelta(days=17)
    )
    said = {at: daemon.run("demo", at).verdict for at in slots}
    states = set()
    for at in slots[:-1]:
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["check", "--config", str(world.config_path), "--at", at.isoformat(), "--json"])
        doc = json.loads(out.getvalue())["monitors"][0]
        expected = said[at].to_dict()
        assert doc["replay_from"] == slots[0].isoformat().replace("+00:00", "Z")
        doc["replay_from"] = None
        assert doc == expected, at
        states.add(doc["state"])
    assert {"ok", "model_decay"} <= states
    assert any(v.input is not None and v.input.drift for v in said.values())  # drift raised too
