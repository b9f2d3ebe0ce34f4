"""The state store: atomic writes, untrusted files set aside with a reason (daemon) or ignored
(check), stale temp files swept; the board's persistence counters and health; failed saves."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.config import Config, load_config
from monitor.epoch import rfc3339
from monitor.jobs import (
    FUTURE_SKEW,
    Board,
    ParquetReader,
    Runner,
    StateStore,
    state_fingerprint,
    state_is_finite,
)
from monitor.simulate import SCENARIOS, write_world
from monitor.verdict import DecayTrack, DriftTrack, MonitorState, OutcomeReport, SegmentDrift
from monitor.verdict.state import CountedBlock

HOUR = timedelta(hours=1)

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


def test_kept_outcome_windows_decide_what_reading_afresh_decides(tmp_path: Path) -> None:
    """Hourly checks through a drift and a decay: a daemon whose outcome windows are kept
    (handed back while they hold the same runs) decides at every slot exactly what one that
    reads every window afresh decides."""
    import dataclasses
    from datetime import timedelta

    from monitor import sources
    from monitor.config import load_config
    from monitor.jobs import Runner
    from monitor.simulate import SCENARIOS, write_world

    start = datetime(2026, 3, 2, tzinfo=UTC)
    scenario = dataclasses.replace(
        SCENARIOS["drift_and_decay"], scores_per_hour=200, evaluations_per_day=3
    )
    world = write_world(
        tmp_path, scenario, start=start, end=start + timedelta(days=17), seed=5, schedule="1h"
    )
    config = load_config(world.config_path)
    slots = config.monitors[0].schedule.slots(
        start + timedelta(days=14), start + timedelta(days=16, hours=12)
    )
    verdicts = []
    for fresh in (False, True):
        sources.clear_cache()
        runner = Runner(config, store=StateStore(tmp_path / f"state-{fresh}"))
        for at in slots:
            if fresh:
                sources.clear_cache()  # nothing kept: every window read afresh
            verdicts.append(runner.run("demo", at).verdict.to_dict())
    kept, afresh = verdicts[: len(slots)], verdicts[len(slots) :]
    assert kept == afresh
    assert {"model_decay"} <= {v["state"] for v in kept}


def test_the_current_windows_timestamps_are_decoded_only_where_a_block_starts(
    tmp_path: Path,
) -> None:
    """A check reads its windows' timestamps only in the row groups an evidence block starts
    inside or (seasonal phases) an hour splits (``read_scores``'s ``cuts``). With and without
    phases, at every slot and in read-only checks of earlier and later slots, its verdicts are
    those of a reader written before ``cuts`` (every timestamp decoded, which the runner still
    accepts), with most groups left undecoded. A reader that hides a block start or the hours
    from the cuts makes the check an error, never a wrong block."""
    import dataclasses

    import pyarrow.parquet as pq

    from monitor.epoch import to_ns
    from monitor.jobs import ParquetReader
    from monitor.sources import ScoreSpec, ScoreWindow, Window

    start = datetime(2026, 3, 2, tzinfo=UTC)
    scenario = dataclasses.replace(
        SCENARIOS["covariate_shift"], scores_per_hour=200, drift_start=timedelta(days=9, hours=6)
    )
    world = write_world(tmp_path, scenario, start=start, end=start + timedelta(days=12), seed=9)
    for f in (tmp_path / "scores").rglob("*.parquet"):  # groups of ~20 min: hours split some
        pq.write_table(pq.read_table(f), f, row_group_size=70)
    flat = tmp_path / "flat.toml"  # no seasonal phases: the block starts are the only cuts
    flat.write_text(world.config_path.read_text() + 'drift.seasonality = "none"\n')
    slots = (
        load_config(flat)
        .monitors[0]
        .schedule.slots(start + timedelta(days=9), start + timedelta(days=10, hours=12))
    )
    coarse: list[int] = []

    class Before(ParquetReader):  # the signature of a reader written before ``cuts``
        def scores(  # type: ignore[override]
            self, spec: ScoreSpec, window: Window, *, with_timestamps: bool
        ) -> ScoreWindow:
            return super().scores(spec, window, with_timestamps=with_timestamps)

    class Cut(ParquetReader):
        def scores(
            self, spec: ScoreSpec, window: Window, *, with_timestamps: bool, cuts: Any = None
        ) -> ScoreWindow:
            got = super().scores(spec, window, with_timestamps=with_timestamps, cuts=cuts)
            if with_timestamps:  # a flat monitor's reference is read without them
                coarse.append(len(got.coarse_spans))
            return got

    for path in (world.config_path, flat):
        config = load_config(path)
        verdicts = []
        for reader in (Before(), Cut()):
            store = StateStore(tmp_path / f"{path.stem}-{type(reader).__name__}")
            runner = Runner(config, reader=reader, store=store)  # type: ignore[arg-type]
            ran = [runner.run("demo", at).verdict.to_dict() for at in slots]
            later = slots[-1] + timedelta(minutes=37)  # past the last slot, and before it
            looked = [runner.check("demo", at).to_dict() for at in [later, *slots[3:30:9]]]
            verdicts.append((ran, looked))
        assert verdicts[0] == verdicts[1]
        assert {"data_drift"} <= {v["state"] for v in verdicts[0][0]}
        assert not any(v["sequential"] for v in verdicts[0][1][1:])
    assert min(coarse) >= 24  # groups left undecoded in every window read (a day: 72)

    class Hiding(ParquetReader):  # gives only the current window's start as a cut
        def scores(
            self, spec: ScoreSpec, window: Window, *, with_timestamps: bool, cuts: Any = None
        ) -> ScoreWindow:
            hidden = None if cuts is None else [to_ns(window.start)]
            return super().scores(spec, window, with_timestamps=with_timestamps, cuts=hidden)

    for path in (world.config_path, flat):
        store = StateStore(tmp_path / f"hiding-{path.stem}")
        runner = Runner(load_config(path), reader=Hiding(), store=store)
        states = [runner.run("demo", at).verdict for at in slots[:8]]
        # hours hidden: wrong at once, with phases or without (a tested block is counted again
        # hour by hour for late scores, ``drift._tested``)
        assert states[0].state == "error"
        failed = [v for v in states if v.state == "error"]
        assert failed
        assert all("runner's cuts were incomplete" in v.reasons[0] for v in failed)


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


# -------------------------------------------------------------------------------- trust


NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


#: the fields a saved outcome report must have
_REPORT = {
    "n_pairs": 40,
    "only_reference": 0,
    "only_current": 0,
    "coverage": 1.0,
    "decidable": True,
}


def _good(**changes: object) -> dict[str, object]:
    doc = STATE.to_dict()
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\xff\xfe{}", "encoding"),
        (b"", "syntax"),
        (b"{", "syntax"),
        (b"[" * 100_000 + b"]" * 100_000, "syntax"),
        (b"1" * 5000, "syntax"),  # int too large to parse
        (b"[]", "shape"),
        (json.dumps(_good(version=None)).encode(), "shape"),
        (json.dumps(_good(drift={"": {"reference": {"cusum": -1.0}}})).encode(), "shape"),
        (json.dumps(_good(drift={"": {"reference": {"cusum": "1"}}})).encode(), "shape"),
        (json.dumps(_good(drift={"": {"anchor": {"cusum": True}}})).encode(), "shape"),
        (json.dumps(_good(drift={"": {"reference": {"quiet": 1.5}}})).encode(), "shape"),
        (json.dumps(_good(drift={"": {"reference": {"clear_cusum": -0.5}}})).encode(), "shape"),
        (json.dumps(_good(drift={"": {"anchor": {"clear_cusum": "2"}}})).encode(), "shape"),
        # an integer past float's range: OverflowError from math.isfinite, not set aside
        (b'{"version": 2, "drift": {"": {"reference": {"cusum": 1' + b"0" * 400 + b"}}}}", "shape"),
        (
            b'{"version": 2, "drift": {"": {"anchor": {"clear_cusum": 1' + b"0" * 400 + b"}}}}",
            "shape",
        ),
        # ... and anywhere else a float is read: an anchor's edges (it once ended the load
        # with the OverflowError, the daemon's start-up with it)
        (
            b'{"version": 2, "drift": {"": {"anchor_ref": {"edges": [0.0, 1'
            + b"0" * 400
            + b'], "counts": [[1]]}}}}',
            "shape",
        ),
        (json.dumps(_good(drift={"": {"extra": 1}})).encode(), "shape"),
        (json.dumps(_good(state="sideways")).encode(), "shape"),
        (json.dumps(_good(last_at="2026-11-30T00:00:00")).encode(), "shape"),  # no offset
        (json.dumps(_good(decay={"reports": {"": {"n_pairs": 1}}})).encode(), "shape"),
        (json.dumps(_good(fingerprint=7)).encode(), "shape"),
        (b'{"version": 2, "drift": {"": {"reference": {"cusum": Infinity}}}}', "non_finite"),
        (b'{"version": 2, "drift": {"": {"anchor": {"cusum": -Infinity}}}}', "non_finite"),
        (b'{"version": 2, "drift": {"": {"reference": {"cusum": 1e400}}}}', "non_finite"),
        (json.dumps(_good(last_at="2026-12-01T12:06:00Z")).encode(), "future"),
        (json.dumps(_good(last_success="2027-01-01T00:00:00Z")).encode(), "future"),
        (
            json.dumps(_good(drift={"": {"evidence_end": "2030-01-01T00:00:00Z"}})).encode(),
            "future",
        ),
        # a decay look waits for runs after runs_end: one ahead of now stopped decay detection
        (json.dumps(_good(decay={"runs_end": "2099-01-01T00:00:00Z"})).encode(), "future"),
        (json.dumps(_good(decay={"looks": ["2099-01-01T00:00:00Z"]})).encode(), "future"),
        (json.dumps(_good(first_at="2099-01-01T00:00:00Z")).encode(), "future"),
        (json.dumps(_good(before_last=_good(last_at="2099-01-01T00:00:00Z"))).encode(), "future"),
        (json.dumps(_good(fingerprint="other")).encode(), "config_changed"),
        # an outcome report's fields by type, span and time: once loaded, each failed every
        # later check (the page's pairs rebuilt from them), never set aside
        *[
            (json.dumps(_good(decay={"reports": {"": {**_REPORT, **fields}}})).encode(), reason)
            for fields, reason in (
                ({"n_pairs": 1.5}, "shape"),
                ({"n_pairs": 10**400}, "shape"),  # it loaded, then failed every scrape
                ({"n_resamples": 2**63}, "shape"),
                ({"wins": -1}, "shape"),
                ({"decidable": "yes"}, "shape"),
                ({"exact": 1}, "shape"),
                ({"alpha": "0.05"}, "shape"),
                ({"metric": 3}, "shape"),
                ({"metrics": [1]}, "shape"),
                (
                    {"runs_start": "2026-11-30T02:00:00Z", "runs_end": "2026-11-29T02:00:00Z"},
                    "shape",
                ),
                ({"reference_start": "yesterday"}, "shape"),
                (
                    {"runs_start": "2099-01-01T00:00:00Z", "runs_end": "2099-01-02T00:00:00Z"},
                    "future",
                ),
                ({"looked_at": "2099-01-01T00:00:00Z"}, "future"),
            )
        ],
        # a time no nanosecond timestamp reaches: every check failed subtracting a run gap
        (json.dumps(_good(decay={"runs_start": "0001-01-01T00:00:00Z"})).encode(), "shape"),
        (json.dumps(_good(last_at="2300-01-01T00:00:00Z")).encode(), "shape"),
    ],
)
def test_untrusted_state_is_set_aside_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, reason: str
) -> None:
    store = StateStore(tmp_path, clock=lambda: NOW)
    store.path("m").write_bytes(content)
    loaded = store.read("m", fingerprint="mine")
    assert loaded.reason == reason, loaded.detail
    fresh = MonitorState(fingerprint="mine")
    if reason == "config_changed":  # written for other settings: when its state began kept
        fresh = replace(fresh, **STATE.times())  # type: ignore[arg-type]
    assert loaded.state == fresh
    assert loaded.aside is not None
    assert loaded.aside.name.startswith("m.json.corrupt-")
    assert loaded.aside.read_bytes() == content
    assert not store.path("m").exists()
    (record,) = [r for r in caplog.records if r.getMessage().startswith("state file")]
    assert record.__dict__["reason"] == reason


def test_an_unknown_top_level_key_is_ignored_as_documented(tmp_path: Path) -> None:
    """operations.md: unknown keys of a drift segment, track or the decay track set a file
    aside (``shape``, above); an unknown top-level key, such as a newer version's beside
    them, is ignored and the state loads as written."""
    store = StateStore(tmp_path, clock=lambda: NOW)
    store.path("m").write_bytes(
        json.dumps(_good(fingerprint="mine", newer_field={"x": 1})).encode()
    )
    loaded = store.read("m", fingerprint="mine")
    assert loaded.reason is None, loaded.detail
    assert loaded.state.to_dict() == _good(fingerprint="mine")


def test_a_complete_outcome_report_is_resumed(tmp_path: Path) -> None:
    """Every field of a saved report, each of its type, loads: the checks above refuse only
    what is wrong."""
    from monitor.verdict.reports import OutcomeReport

    report = {
        **_REPORT,
        "runs_start": "2026-11-29T02:00:00Z",
        "runs_end": "2026-11-29T02:30:00Z",
        "reference_start": "2026-11-22T00:00:00Z",
        "reference_end": "2026-11-29T00:00:00Z",
        "looked_at": "2026-11-29T03:00:00Z",
        "decay_since": None,
        "wins": 3,
        "exact": False,
        "n_resamples": 10_000,
        "alpha": 0.01,
        "mean_difference": -0.01,
        "metric": "ndcg@10",
        "metrics": {"ap": {"mean_difference": None}},
    }
    assert set(report) <= set(OutcomeReport.__dataclass_fields__)
    store = StateStore(tmp_path, clock=lambda: NOW)
    store.path("m").write_text(json.dumps(_good(decay={"reports": {"": report}})))
    loaded = store.read("m", fingerprint=None)
    assert loaded.reason is None, loaded.detail
    assert loaded.state.decay.reports[""].runs_end == "2026-11-29T02:30:00Z"


def test_state_within_the_skew_and_legacy_files_are_resumed(tmp_path: Path) -> None:
    store = StateStore(tmp_path, clock=lambda: NOW)
    soon = NOW + FUTURE_SKEW - timedelta(seconds=1)
    store.path("m").write_text(json.dumps(_good(last_at=soon.isoformat(), fingerprint=None)))
    loaded = store.read("m", fingerprint="mine")
    assert loaded.reason is None
    assert loaded.state.last_at == soon
    assert loaded.state.fingerprint == "mine"  # adopted: written before fingerprints existed
    assert loaded.saved_at is not None


def test_not_a_file_is_set_aside_and_an_unmovable_one_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path)
    store.path("d").mkdir()
    os.mkfifo(store.path("f"))
    assert store.read("d").reason == "not_a_file"
    assert store.read("f").reason == "not_a_file"  # never opened: it would block
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == [
        "d.json.corrupt",
        "f.json.corrupt",
    ]
    blocked = StateStore(tmp_path / "file-not-dir")
    (tmp_path / "file-not-dir").write_text("")
    loaded = blocked.read("m")
    assert loaded.reason == "unreadable"
    assert loaded.aside is None
    assert "could not be set aside" in caplog.text


def test_readonly_store_ignores_untrusted_files_without_moving_them(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_good(last_at="2099-01-01T00:00:00Z")))
    store = StateStore(tmp_path, readonly=True, fingerprints={"m": "mine"})
    loaded = store.read("m")
    assert loaded.reason == "future"
    assert loaded.aside is None
    assert store.load("m") == MonitorState(fingerprint="mine")
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
    assert StateStore(tmp_path, readonly=True).sweep() == 0


def test_a_readonly_store_logs_an_untrusted_file_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`monitor check` reads a state at the runner's start and again at the check: one error
    line for one problem, where the same line came twice."""
    (tmp_path / "m.json").write_text("{garbage")
    store = StateStore(tmp_path, readonly=True)
    with caplog.at_level(logging.ERROR, logger="monitor"):
        for _ in range(3):
            assert store.read("m").reason == "syntax"
    told = [r for r in caplog.records if r.getMessage().startswith("state file unreadable")]
    assert len(told) == 1


def test_sweep_removes_only_stale_temp_files(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save("m", STATE)
    for name in (".m.abc123_x.tmp", ".other.q1w2e3.tmp"):
        (tmp_path / name).write_text("{")
    (tmp_path / ".keep").write_text("")
    (tmp_path / "m.json.corrupt-1").write_text("")
    assert store.sweep() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".keep", "m.json", "m.json.corrupt-1"]


def test_save_refuses_non_finite_numbers_and_leaves_no_temp_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    bad = MonitorState(drift={"": SegmentDrift(reference=DriftTrack(cusum=math.nan))})
    with pytest.raises(ValueError, match="Out of range float"):
        store.save("m", bad)
    assert list(tmp_path.iterdir()) == []


def test_a_clock_stepped_back_past_the_slots_decided_is_an_error(world_config: Config) -> None:
    """NTP stepping a clock back by hours: every run was of a slot before the last decided,
    so none was published and the monitor fell silent (its last success in the future, no
    staleness alert possible). Past FUTURE_SKEW it is an error that says so; the state and
    its alarms stay as the later slot left them."""
    at = datetime(2026, 11, 19, 12, tzinfo=UTC)
    now = [at]
    runner = Runner(world_config, clock=lambda: now[0])
    runner.run("demo", at)
    decided = runner.board.state("demo")
    now[0] = at - 2 * HOUR + timedelta(seconds=30)  # stepped back two hours
    record = runner.run("demo", at - 2 * HOUR)
    assert record.verdict.state == "error"
    assert "the clock is behind" in record.verdict.reasons[0]
    assert "119m before the last slot decided" in record.verdict.reasons[0]
    (snap,) = runner.board.snapshot()
    assert snap.latest is not None
    assert snap.latest.verdict.state == "error"  # published: on-call hears of it
    assert snap.state.last_at == decided.last_at  # the decided state is kept
    assert snap.state.drift == decided.drift


def test_save_refuses_a_state_its_next_start_would_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Configurations validate accepts (1000 segments, 1000 bins, 168 phases, anchors twice)
    make states over the 16 MiB a start reads: saved, the next start set them aside as
    too_large and every alarm was lost. The save fails visibly instead; the last saved
    state stays."""
    from monitor import store as store_module

    store = StateStore(tmp_path)
    state = MonitorState(drift={"": SegmentDrift(reference=DriftTrack(cusum=1.0))})
    store.save("m", state)
    before = (tmp_path / "m.json").read_bytes()
    monkeypatch.setattr(store_module, "MAX_STATE_BYTES", len(before) - 1)
    with pytest.raises(ValueError, match=r"more than the \d+ a start reads"):
        store.save("m", state)
    assert (tmp_path / "m.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_state_text_is_the_plain_json_of_the_state_with_anchors_encoded_once(
    tmp_path: Path,
) -> None:
    """The saved text is ``json.dumps(state.to_dict())`` (compact, sorted) byte for byte, with
    anchors in the state and in the state before the last slot, segment names that look like
    JSON, and an anchor whose counts are not whole; loading it gives the state back."""
    from monitor.store import encode_state
    from monitor.verdict import Anchor

    def anchor(k: float) -> Anchor:
        return Anchor(
            edges=(0.1, 0.5 + k, 2.0),
            counts=((1.0, 2.0, 3.0, 4.0 + k), (5.0, 0.0, 7.25, 8.0)),
            start=NOW - timedelta(days=8),
            end=NOW - timedelta(days=1),
            set_at=NOW - timedelta(hours=3),
        )

    segments = {
        '"a":{"x"': SegmentDrift(reference=DriftTrack(cusum=1.5), anchor_ref=anchor(0.0)),
        "\x00anchor-0": SegmentDrift(anchor_ref=anchor(0.125)),
        "c": SegmentDrift(),
    }
    looked = DecayTrack(
        looks=(NOW - timedelta(days=1), NOW),
        runs_end=NOW - timedelta(hours=2),
        active={"c": NOW - timedelta(days=1)},
        reports={
            '"c"': OutcomeReport(
                n_pairs=300,
                only_reference=2,
                only_current=0,
                coverage=0.99,
                decidable=True,
                mean_difference=-0.03,
                ci_low=-0.05,
                metrics={"ndcg@10": {"reference": 0.5, "current": None}},
            )
        },
    )
    before = MonitorState(drift=segments, last_at=NOW - timedelta(hours=1))
    state = MonitorState(drift=segments, decay=looked, last_at=NOW, before_last=before)
    plain = json.dumps(state.to_dict(), separators=(",", ":"), sort_keys=True, allow_nan=False)
    assert encode_state(state) == plain
    assert encode_state(state) == plain  # the second time from the kept text of each part
    store = StateStore(tmp_path)
    store.save("m", state)
    assert (tmp_path / "m.json").read_text() == plain
    assert store.load("m") == state
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_a_temp_file_left_by_a_kill_is_written_over(tmp_path: Path) -> None:
    """A save names its temp file by process and thread: one a killed save of this thread
    left behind (a name ``sweep`` also removes) is truncated and renamed, not appended to."""
    import threading

    from monitor.files import atomic_write

    left = tmp_path / f".m.{os.getpid()}_{threading.get_ident()}.tmp"
    left.write_text("{" * 10_000)
    atomic_write(tmp_path, tmp_path / "m.json", '{"version":2}', stem="m")
    assert (tmp_path / "m.json").read_text() == '{"version":2}'
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
    left.write_text("{")
    assert StateStore(tmp_path).sweep() == 1


def test_saves_from_two_threads_each_leave_a_whole_file(tmp_path: Path) -> None:
    """Two threads saving the same monitor at once never share a temp file: every read of
    the target is one whole document of one of them."""
    import threading

    store = StateStore(tmp_path)
    states = [
        replace(STATE, last_at=NOW - timedelta(hours=h), fingerprint="x" * 5000 * h) for h in (1, 2)
    ]
    texts = {json.dumps(s.to_dict(), separators=(",", ":"), sort_keys=True) for s in states}
    errors: list[BaseException] = []

    def save(s: MonitorState) -> None:
        try:
            for _ in range(200):
                store.save("m", s)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(s,)) for s in states]
    for t in threads:
        t.start()
    seen = set()
    while any(t.is_alive() for t in threads):
        try:
            seen.add((tmp_path / "m.json").read_text())
        except FileNotFoundError:
            continue
    for t in threads:
        t.join()
    assert not errors
    assert seen
    assert seen <= texts
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_from_dict_iv() -> None:
    def seg(**track: object) -> dict[str, object]:
        return {"version": 2, "drift": {"a": {"reference": track}}}

    def tested(blocks: object) -> dict[str, object]:
        return {"version": 2, "drift": {"a": {"tested": blocks}}}

    T1, T2, H = "2026-11-09T13:00:00Z", "2026-11-09T14:00:00Z", 3_600 * 10**9

    def part(**changes: object) -> dict[str, object]:
        return {"at": T2, "start": T1, "ends": [H], "rows": [5], **changes}

    cases = [
        ([], "`state` must be a JSON object"),
        ({"version": 1}, "unknown state version 1"),
        ({"version": 2, "state": "x"}, "`state` must be null or one of"),
        ({"version": 2, "last_at": 5}, "`last_at` must be null or an RFC 3339 time"),
        ({"version": 2, "last_at": "soon"}, "`last_at` must be an RFC 3339 time"),
        ({"version": 2, "last_run": "2026-01-01T00:00"}, "`last_run` must be a time with"),
        ({"version": 2, "first_at": "soon"}, "`first_at` must be an RFC 3339 time"),
        ({"version": 2, "fingerprint": 1}, "`fingerprint` must be null or a string"),
        ({"version": 2, "before_last": 1}, "`before_last` must be an object"),
        ({"version": 2, "skipped": 1}, "`skipped` must be a list of [after, resumed] times"),
        # the edge of the calendar: no UTC form (an OverflowError once escaped the load)
        ({"version": 2, "last_at": "0001-01-01T00:00:00+14:00"}, "`last_at` is not a time in"),
        (
            {"version": 2, "skipped": [["0001-01-01T00:00:00+14:00", "2026-01-01T00:00:00Z"]]},
            "`skipped` must be a list of",
        ),
        ({"version": 2, "skipped": [["soon", "later"]]}, "`skipped` must be a list of [after"),
        ({"version": 2, "skipped": [["2026-01-01T00:00:00Z"]]}, "`skipped` must be a list of"),
        ({"version": 2, "drift": []}, "`drift` must be an object of segments"),
        ({"version": 2, "drift": {"a": 1}}, "`drift['a']` must be an object"),
        ({"version": 2, "drift": {"a": {"x": 1}}}, "`drift['a']` must be an object with keys"),
        (seg(cusum="1"), "`drift['a'].reference.cusum` must be a finite"),
        (seg(cusum=-1), "`drift['a'].reference.cusum` must be a number >="),
        (seg(quiet=-1), "`drift['a'].reference.quiet` must be an integer"),
        (seg(active=1), "`drift['a'].reference.active` must be true or"),
        (seg(active_since=1), "`drift['a'].reference.active_since` must"),
        (seg(x=1), "`drift['a'].reference` must be an object with keys"),
        (tested(1), "`drift['a'].tested` must be an object"),
        (tested({"at": T2, "start": T1}), "`drift['a'].tested` must be an object with keys"),
        (tested(part(at=None)), "`drift['a'].tested.at` must be an RFC 3339 time"),
        (tested(part(start="soon")), "`drift['a'].tested.start` must be an RFC 3339 time"),
        (tested(part(ends=[])), "`drift['a'].tested.ends` must be a list of at most 48"),
        (tested(part(ends=[H] * 49, rows=[1] * 49)), "`drift['a'].tested.ends` must be a list"),
        (tested(part(ends=[H, H])), "`drift['a'].tested.ends` must be a list of at most 48"),
        (tested(part(ends=[H + 1])), "`drift['a'].tested.ends` must be a list of at most 48"),
        (tested(part(ends=[-H])), "`drift['a'].tested.ends` must be a list of at most 48"),
        (tested(part(rows=[5, 6])), "`drift['a'].tested.rows` must be a count for each"),
        (tested(part(rows=[-1])), "`drift['a'].tested.rows` must be a count for each"),
        (tested(part(rows=[5.0])), "`drift['a'].tested.rows` must be a count for each"),
        (tested(part(seen=[5, 6])), "`drift['a'].tested.seen` must be a count for each"),
        (tested(part(x=1)), "`drift['a'].tested` must be an object with keys"),
        # a valid count whose end is past the data's nanosecond span: every check once failed
        # with OverflowError putting it among the reader's cuts
        (tested(part(ends=[(2**63 // 1000 - 1) * 1000])), "`drift['a'].tested.ends` must be"),
        ({"version": 2, "decay": 1}, "`decay` must be an object"),
        ({"version": 2, "decay": {"x": 1}}, "`decay` must be an object with keys"),
        ({"version": 2, "decay": {"runs_end": 1}}, "`decay.runs_end` must be null"),
        ({"version": 2, "decay": {"looks": 1}}, "`decay.looks` must be a list"),
        ({"version": 2, "decay": {"active": {"": 1}}}, "`decay.active.` must be null"),
        ({"version": 2, "decay": {"reports": 1}}, "`decay.reports` must be an object of"),
        ({"version": 2, "decay": {"reports": {"": 1}}}, "`decay.reports['']` must be an object"),
        ({"version": 2, "decay": {"reports": {"": {}}}}, "must be a complete outcome report"),
        ({"version": 2, "stale": "scores"}, "`stale` must be null or a list of scores and"),
        ({"version": 2, "stale": ["score"]}, "`stale` must be null or a list of scores and"),
    ]
    for doc, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            MonitorState.from_dict(doc)  # type: ignore[arg-type]


def test_round_trip_keeps_the_tested_blocks() -> None:
    """The parts of tested blocks a segment counts again for late scores survive a save (lost,
    the first check after a restart would count nothing late in them), in a compact form:
    their ends as nanoseconds after the first start, one time of counting for all."""
    t = datetime(2026, 11, 9, 13, tzinfo=UTC)
    blocks = tuple(
        CountedBlock(
            t + k * timedelta(hours=1),
            t + (k + 1) * timedelta(hours=1),
            812 + k,
            None if k % 7 else 800,  # a count below the mark, kept
        )
        for k in range(48)
    )
    seg = SegmentDrift(evidence_end=t, tested=blocks, counted_at=t + timedelta(days=2))
    state = replace(STATE, drift={"a": seg})
    back = MonitorState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back == state
    assert back.drift["a"].tested == blocks
    assert back.drift["a"].counted_at == t + timedelta(days=2)
    # two days of hourly parts in about 1 KB as the state file writes them (a thousand
    # segments, twice with before_last: written as [start, end, rows, at], 3.6 KB)
    plain = SegmentDrift(tested=tuple(replace(b, seen=None) for b in blocks), counted_at=t)
    assert len(json.dumps(plain.to_dict()["tested"], separators=(",", ":"))) < 1100
    assert "tested" not in SegmentDrift().to_dict()  # a file without any reads the same


def test_round_trip_keeps_the_fingerprint() -> None:
    state = replace(STATE, fingerprint="abc")
    assert MonitorState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_fingerprint_follows_the_settings_the_state_depends_on(tmp_path: Path) -> None:
    w = write_world(
        tmp_path, SCENARIOS["stationary"], start=NOW - timedelta(days=2), end=NOW, seed=1
    )
    m = load_config(w.config_path).monitors[0]
    fp = state_fingerprint(m)
    assert fp == state_fingerprint(replace(m, run_timeout=timedelta(seconds=9)))
    assert fp == state_fingerprint(replace(m, seed=99))
    assert fp != state_fingerprint(replace(m, drift=replace(m.drift, tolerance=0.5)))
    assert fp != state_fingerprint(replace(m, windows=replace(m.windows, gap=timedelta(hours=1))))
    assert fp != state_fingerprint(replace(m, budget=replace(m.budget, decay=0.01)))
    assert fp != state_fingerprint(replace(m, decay=replace(m.decay, margin=0.1)))


# -------------------------------------------------------------------------------- board


def test_board_health_and_persistence_counters() -> None:
    board = Board([], {})
    assert board.health(False).http_status == 503
    assert not board.health(False)
    ok = board.health(True)
    assert (ok.status, ok.http_status, ok.body, bool(ok)) == ("ok", 200, "ok\n", True)


class FailingStore(StateStore):
    """Saves fail like a full disk until ``full`` is cleared."""

    full = True

    def save(self, name: str, state: MonitorState) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path(name)))
        super().save(name, state)


@pytest.fixture
def world_config(tmp_path: Path) -> Config:
    end = datetime(2026, 11, 20, tzinfo=UTC)
    w = write_world(
        tmp_path, SCENARIOS["stationary"], start=end - timedelta(days=9), end=end, seed=1
    )
    return load_config(w.config_path)


def test_a_replay_in_memory_says_nothing_of_saving(
    world_config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """``monitor check`` and ``backtest`` replay into a ``MemoryStore``: their check lines
    leave ``state_saved`` out (on-call reads it as the daemon's state reaching the disk)."""
    from monitor.backtest import MemoryStore

    caplog.set_level(logging.INFO, logger="monitor")
    at = datetime(2026, 11, 20, tzinfo=UTC)
    Runner(world_config, store=MemoryStore(), clock=lambda: at).run("demo", at)
    Runner(world_config, clock=lambda: at).run("demo", at)
    replay, daemon = (r.__dict__ for r in caplog.records if r.getMessage() == "check")
    assert "state_saved" not in replay
    assert daemon["state_saved"] is True


def test_failed_save_is_a_visible_failure_that_keeps_the_verdict(
    world_config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="monitor")
    at = datetime(2026, 11, 20, tzinfo=UTC)
    store = FailingStore(world_config.server.state_dir)
    runner = Runner(world_config, store=store, clock=lambda: at)
    record = runner.run("demo", at)
    (snap,) = runner.board.snapshot()
    assert record.verdict.state != "error"
    assert record.verdict.reasons[-1].startswith("state not saved: OSError: [Errno 28]")
    assert snap.state.state == record.verdict.state
    assert snap.state.last_success is None  # a run whose state was lost is not a success
    assert (snap.runs_total, snap.failures_total, snap.save_failures_total) == (1, 1, 1)
    assert snap.last_state_save is None
    assert snap.save_error is not None
    health = runner.board.health(True)
    assert (health.status, health.http_status) == ("degraded", 200)
    assert "monitor demo not saved since 2026-11-20T00:00:00Z" in health.body
    assert "No space left on device" in health.body
    check = [r for r in caplog.records if r.getMessage() == "check"]
    assert check[-1].__dict__["state_saved"] is False

    store.full = False
    runner.run("demo", at)
    (snap,) = runner.board.snapshot()
    assert (snap.runs_total, snap.failures_total, snap.save_failures_total) == (2, 1, 1)
    assert snap.last_state_save == at
    assert snap.save_error is None
    assert snap.state.last_success == at
    assert runner.board.health(True).status == "ok"
    assert store.load("demo").fingerprint == state_fingerprint(world_config.monitors[0])


def test_a_state_file_in_the_way_is_named_in_the_save_error(world_config: Config) -> None:
    """A directory where ``NAME.json`` belongs: the save's error named only the temp file the
    rename came from (``Is a directory: .../.demo.<pid>_<thread>.tmp``), a file that no longer
    exists, not the path in the way the runbook tells on-call to move."""
    at = datetime(2026, 11, 20, tzinfo=UTC)
    state_dir = world_config.server.state_dir
    runner = Runner(world_config, clock=lambda: at)
    (state_dir / "demo.json").mkdir(parents=True)  # after the start, which sets one aside
    record = runner.run("demo", at)
    (snap,) = runner.board.snapshot()
    assert snap.save_error is not None
    assert snap.save_error.endswith(f"-> {state_dir / 'demo.json'}"), snap.save_error
    assert str(state_dir / "demo.json") in runner.board.health(True).body
    assert record.verdict.reasons[-1].startswith("state not saved: IsADirectoryError")


def test_a_failed_check_logs_its_error(
    world_config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """The runbook sends on-call to the daemon log for the file, column and hint of a failed
    check: its per-check line carries the error (and is a warning); a good one carries none."""
    caplog.set_level(logging.INFO, logger="monitor")
    at = datetime(2026, 11, 20, tzinfo=UTC)
    runner = Runner(world_config, clock=lambda: at)
    runner.run("demo", at)
    (good,) = [r for r in caplog.records if r.getMessage() == "check"]
    assert good.levelno == logging.INFO
    assert "error" not in good.__dict__
    caplog.clear()
    monitor = world_config.monitor("demo")
    newest = max(Path(monitor.scores.path).rglob("*.parquet"), key=lambda p: p.stat().st_mtime)
    newest.write_bytes(b"not parquet")
    record = runner.run("demo", at + timedelta(hours=1))
    assert record.verdict.state == "error"
    (bad,) = [r for r in caplog.records if r.getMessage() == "check"]
    assert bad.levelno == logging.WARNING
    assert bad.__dict__["error"] == "; ".join(record.verdict.reasons)
    assert str(newest) in bad.__dict__["error"]


def test_an_unexpected_exception_is_the_checks_error_and_counts_as_a_failure(
    world_config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception of no known kind (an engine's own, as Dask's KilledWorker, or a bug) is
    the check's ``error`` verdict, logged with its traceback and counted as a failed run. It
    once escaped the run: the board kept the previous verdict and counted nothing."""
    from monitor.jobs import ParquetReader

    class KilledWorker(Exception):  # as distributed's KilledWorker: a plain Exception
        pass

    class Lost(ParquetReader):
        broken = False

        def outcomes(self, *args: Any, **kwargs: Any) -> Any:
            if self.broken:
                raise KilledWorker("the worker holding the task died")
            return super().outcomes(*args, **kwargs)

    reader = Lost()
    at = datetime(2026, 11, 20, tzinfo=UTC)
    runner = Runner(world_config, reader=reader, clock=lambda: at)
    assert runner.run("demo", at).verdict.state != "error"
    reader.broken = True
    caplog.set_level(logging.ERROR, logger="monitor")
    record = runner.run("demo", at + HOUR)
    assert record.verdict.state == "error"
    assert record.verdict.reasons == ("unexpected KilledWorker: the worker holding the task died",)
    (snap,) = runner.board.snapshot()
    assert (snap.runs_total, snap.failures_total) == (2, 1)
    (logged,) = [r for r in caplog.records if r.getMessage() == "check failed unexpectedly"]
    assert logged.exc_info is not None


def test_a_non_finite_cusum_is_reset_not_an_error_for_good(world_config: Config) -> None:
    at = datetime(2026, 11, 20, tzinfo=UTC)
    runner = Runner(world_config, clock=lambda: at)
    broken = MonitorState(
        drift={"": SegmentDrift(reference=DriftTrack(cusum=math.inf))},
        last_at=at - timedelta(hours=1),
    )
    runner.board.reconfigure(world_config.monitors, {"demo": broken})
    runner.run("demo", at)
    (snap,) = runner.board.snapshot()
    assert snap.resets["non_finite"] == 1
    assert snap.state.state != "error"
    assert state_is_finite(snap.state)
    assert runner.store.read("demo").reason is None


def test_hourly_evaluations_are_looked_at_one_by_one(tmp_path: Path) -> None:
    """Runs closer together than ``decay.run_gap`` merge into one cluster of timestamps; each
    look still pairs only what landed since the previous look, so a decay is named at the
    first check after its first run (not diluted by the days of runs before it)."""
    import dataclasses
    from datetime import timedelta

    from monitor.backtest import backtest
    from monitor.config import load_config
    from monitor.simulate import SCENARIOS, write_world

    start = datetime(2026, 3, 2, tzinfo=UTC)
    scenario = dataclasses.replace(
        SCENARIOS["abrupt_decay"],
        scores_per_hour=200,
        evaluations_per_day=24,
        decay_start=timedelta(days=9),
    )
    world = write_world(
        tmp_path, scenario, start=start, end=start + timedelta(days=10), seed=2, schedule="1h"
    )
    onset = start + timedelta(days=9)
    (result,) = backtest(
        load_config(world.config_path), onset - timedelta(hours=3), onset + 3 * HOUR
    )
    states = {v.at: v.state for v in result.verdicts}
    assert states[onset] != "model_decay"
    assert states[onset + 2 * HOUR] == "model_decay"  # the 00:00 run, looked at by 02:00
    runs = [v.outcome.runs for v in result.verdicts[1:] if v.outcome is not None]
    assert max(runs) == 1  # one run per look after the first


@pytest.mark.parametrize("schedule", ["5 * * * *", "30 * * * *", "1h"])
def test_hourly_evaluation_runs_are_looked_at_whatever_the_minute_of_the_checks(
    tmp_path: Path, schedule: str
) -> None:
    """24 evaluation runs a day (each about 20 minutes of rows) merge into one cluster of runs
    closer than run_gap. A check at :05 or :30 always finds the next run in progress: waiting
    for the whole cluster to go quiet, it never looked at a run (insufficient_data for good).
    The runs before the one in progress are complete (a quiet `settle` followed them): each
    check looks at the run that landed since the last, and the decay is named."""
    start = datetime(2026, 3, 2, tzinfo=UTC)
    scenario = replace(
        SCENARIOS["abrupt_decay"],
        scores_per_hour=200,
        evaluations_per_day=24,
        decay_start=timedelta(days=9),
    )
    world = write_world(
        tmp_path, scenario, start=start, end=start + timedelta(days=10), seed=2, schedule=schedule
    )
    config = load_config(world.config_path)
    runner = Runner(config, clock=lambda: start + timedelta(days=10))
    slots = config.monitors[0].schedule.slots(
        start + timedelta(days=9, hours=4), start + timedelta(days=9, hours=10)
    )
    looks, states = 0, []
    for at in slots:
        verdict = runner.run("demo", at).verdict
        report = verdict.outcomes.get("")
        looks += bool(report is not None and report.new_look)
        states.append(verdict.state)
    assert looks >= len(slots) - 1  # the first may pool what landed before it
    assert states[-1] == "model_decay", states


def test_the_runs_that_landed_during_an_outage_are_pooled_into_the_next_look(
    tmp_path: Path,
) -> None:
    """Checks at day 8 and then, after an outage, at day 12: the runs of days 9 to 12 all
    landed since the last look and are pooled into the next one. The outcome times were read
    only max(windows.current, outcomes.max_lag) back, and the runs before that were dropped."""
    start = datetime(2026, 3, 2, tzinfo=UTC)
    world = write_world(
        tmp_path, SCENARIOS["stationary"], start=start, end=start + timedelta(days=13), seed=4
    )
    config = load_config(world.config_path)
    runner = Runner(config, clock=lambda: start + timedelta(days=13))
    first = runner.run("demo", start + timedelta(days=8, hours=3)).verdict.outcomes[""]
    after = runner.run("demo", start + timedelta(days=12, hours=3)).verdict.outcomes[""]
    assert first.runs_end is not None
    assert after.new_look
    assert after.runs == 4
    assert after.runs_start is not None

    def when(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    assert when(first.runs_end) < when(after.runs_start) < start + timedelta(days=9, hours=3)


def test_the_slot_decided_last_decided_again_says_the_same(tmp_path: Path) -> None:
    """A restart (or a reload) within a slot runs that slot again. It was decided on top of
    itself: its drift block then held no new evidence ("no new evidence block"), and that
    weaker verdict replaced the first in the history. It is decided from the state before the
    slot, as it first was: the same verdict, the same state, ``state_since`` included, at the
    slot where the state changed. A redo that fails (the source unreadable at the restart)
    leaves the state as it was, its raised alarm with it."""
    from monitor.report import HistoryStore

    start = datetime(2026, 3, 2, tzinfo=UTC)
    scenario = replace(
        SCENARIOS["covariate_shift"], scores_per_hour=500, drift_start=timedelta(days=9, hours=6)
    )
    world = write_world(tmp_path, scenario, start=start, end=start + timedelta(days=11), seed=9)
    config = load_config(world.config_path)
    slots = config.monitors[0].schedule.slots(
        start + timedelta(days=9), start + timedelta(days=9, hours=20)
    )
    now = [start]
    first = Runner(config, clock=lambda: now[0], history=HistoryStore(config.server.state_dir))
    states: list[str] = []
    for at in slots:
        now[0] = at
        decided = first.run("demo", at).verdict.to_dict()
        states.append(decided["state"])
        if len(states) > 1 and states[-1] != states[-2]:
            break  # the slot where the state changed
    assert decided["state"] == "data_drift"
    assert decided["input"]["block_pvalue"] is not None  # the slot's own evidence block
    state_file = config.server.state_dir / "demo.json"
    saved = json.loads(state_file.read_text())
    restarted = at + timedelta(minutes=20)
    now[0] = restarted
    history = HistoryStore(config.server.state_dir)
    again = Runner(config, clock=lambda: now[0], history=history).run("demo", at)
    assert again.verdict.to_dict() == decided
    resaved = json.loads(state_file.read_text())
    assert resaved["state_since"] == saved["state_since"] != rfc3339(restarted)
    for doc in (saved, resaved):
        doc.pop("last_run")
        doc.pop("last_success")
    assert resaved == saved
    assert history.entries("demo")[-1]["alarm"] == decided["input"]["alarm"]

    class Unreadable(ParquetReader):
        def scores(self, *args: Any, **kwargs: Any) -> Any:
            raise OSError("the mount went away")

    failed = Runner(config, clock=lambda: now[0], reader=Unreadable()).run("demo", at)
    assert failed.verdict.state == "error"
    kept = json.loads(state_file.read_text())
    assert kept["last_at"] == saved["last_at"]
    assert kept["drift"] == saved["drift"]  # the raised alarm stays raised
    assert kept["decay"] == saved["decay"]


def test_a_slot_before_the_last_decided_one_is_not_published(
    world_config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """A restart with the clock a few minutes behind runs the slot before the one decided
    last: decided without the alarms' history, its verdict was exported, saved and appended,
    so a raised alarm resolved and fired again with a new "since". It is returned, logged,
    and not published."""
    from monitor.report import HistoryStore

    caplog.set_level(logging.INFO, logger="monitor")
    at = datetime(2026, 11, 19, 12, tzinfo=UTC)
    history = HistoryStore(world_config.server.state_dir)
    now = [at]
    runner = Runner(world_config, clock=lambda: now[0], history=history)
    for k in range(3):
        runner.run("demo", at + k * HOUR)
    (before,) = runner.board.snapshot()
    saved = (world_config.server.state_dir / "demo.json").read_bytes()
    entries = len(history.entries("demo"))
    now[0] = at + 2 * HOUR - timedelta(minutes=2)  # a restart, its clock 2 minutes behind
    record = runner.run("demo", at + HOUR)  # its latest slot
    assert record.verdict.sequential is False
    (after,) = runner.board.snapshot()
    assert after.state == before.state
    assert after.runs_total == before.runs_total
    assert (world_config.server.state_dir / "demo.json").read_bytes() == saved
    assert len(history.entries("demo")) == entries
    said = [r for r in caplog.records if "not published" in r.getMessage()]
    assert said[-1].__dict__["last_decided"] == (at + 2 * HOUR).isoformat()


def test_a_fixed_reference_ahead_of_the_window_names_the_first_slot_that_compares() -> None:
    """Refused while the current window begins at or before reference_start, the check said
    "checks compare with it from <reference_start + current>", the very slot refused."""
    from monitor.checkdata import _reference_ahead
    from monitor.config import parse_config

    (monitor,) = parse_config(
        {
            "monitors": [
                {
                    "name": "m",
                    "schedule": "3h",
                    "scores": {"path": "s"},
                    "outcomes": {"path": "o"},
                    "windows": {
                        "current": "1d",
                        "reference_start": "2026-11-05T00:00:00Z",
                        "reference_end": "2026-11-08T00:00:00Z",
                    },
                }
            ]
        },
        base=Path("/tmp"),
    ).monitors
    first = datetime(2026, 11, 6, tzinfo=UTC)  # its current window begins at reference_start
    refused = _reference_ahead(monitor, first)
    assert refused is not None
    assert refused.state == "insufficient_data"
    assert refused.reasons[0].endswith("checks compare with it from 2026-11-06T03:00:00Z on")
    assert _reference_ahead(monitor, first + timedelta(hours=3)) is None


def test_a_lock_file_that_cannot_be_opened_for_writing_still_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's lock file (left by a run as root), or one in a state_dir mounted
    read-only, cannot be opened for writing: no lock was taken and two daemons ran. flock
    works on a descriptor opened for reading, so the second is refused all the same."""
    import os

    from monitor.store import DAEMON_LOCK, StateDirBusy, lock_state_dir

    held = lock_state_dir(tmp_path)
    assert held is not None
    real_open = os.open

    def refuse_writing(path: Any, flags: int, *args: Any) -> int:
        if str(path).endswith(DAEMON_LOCK) and flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse_writing)
    try:
        with pytest.raises(StateDirBusy, match=f"pid {os.getpid()}"):
            lock_state_dir(tmp_path)
    finally:
        os.close(held)
    other = tmp_path / "other"
    other.mkdir()
    (other / DAEMON_LOCK).write_text("")
    taken = lock_state_dir(other)  # read-only, and free: taken
    assert taken is not None
    os.close(taken)
    # a FIFO in the lock file's place (opened for reading only): never waited on
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / DAEMON_LOCK, 0o444)
    assert lock_state_dir(fifo) is None
