"""End to end: ``monitor check`` on generated parquet worlds, its JSON contract and exit codes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from monitor.cli import exit_code, main
from monitor.simulate import SCENARIOS, World, write_world

START = datetime(2026, 10, 1, tzinfo=UTC)
END = START + timedelta(days=18)
AT = START + timedelta(days=17)  # drift and decay start on day 15 in the presets


def _world(root: Path, scenario_name: str, **changes: Any) -> World:
    scenario = replace(SCENARIOS[scenario_name], scores_per_hour=400.0, **changes)
    return write_world(root / scenario_name, scenario, start=START, end=END, seed=11)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, World]:
    root = tmp_path_factory.mktemp("worlds")
    return {
        name: _world(root, name)
        for name in (
            "stationary",
            "covariate_shift",
            "abrupt_decay",
            "subtle_decay",
            "drift_and_decay",
            "small_golden_set",
        )
    }


def check_json(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, Any]:
    code = main(["check", "--config", str(config), "--json", "--at", AT.isoformat(), *extra])
    return code, json.loads(capsys.readouterr().out)


CONTRACT_INPUT = {"n_reference", "n_current", "psi", "psi_pvalue", "ks_statistic", "ks_pvalue"}
CONTRACT_OUTCOME = {
    "n_pairs",
    "mean_difference",
    "pvalue",
    "ci_low",
    "ci_high",
    "effect_size",
    "wins",
    "losses",
    "ties",
    "mde",
    "decay",
}


@pytest.mark.parametrize(
    ("scenario", "state", "code", "drift", "decay"),
    [
        ("stationary", "ok", 0, False, False),
        ("covariate_shift", "data_drift", 1, True, False),
        ("abrupt_decay", "model_decay", 2, False, True),
        ("subtle_decay", "model_decay", 2, False, True),
        ("drift_and_decay", "model_decay", 2, True, True),
        ("small_golden_set", "insufficient_data", 3, False, False),
    ],
)
def test_check_json_on_generated_worlds(
    worlds: dict[str, World],
    capsys: pytest.CaptureFixture[str],
    scenario: str,
    state: str,
    code: int,
    drift: bool,
    decay: bool,
) -> None:
    rc, doc = check_json(worlds[scenario].config_path, capsys)
    assert rc == code
    assert doc["at"] == "2026-10-18T00:00:00Z"
    (m,) = doc["monitors"]
    assert m["name"] == "demo"
    assert m["state"] == state, m["reasons"]
    assert m["reasons"]
    assert CONTRACT_INPUT | {"drift"} <= set(m["input"])
    assert set(m["outcome"]) >= CONTRACT_OUTCOME
    assert m["input"]["drift"] is drift
    assert m["outcome"]["decay"] is decay
    if scenario != "small_golden_set":
        o = m["outcome"]
        assert o["wins"] + o["losses"] + o["ties"] == o["n_pairs"] == 300
        assert o["ci_low"] <= o["mean_difference"] <= o["ci_high"]


def test_check_at_a_time_between_slots_decides_the_slot_before_it(
    worlds: dict[str, World], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--at`` between slots once placed the windows exactly there, where no daemon check ever
    does; it decides the slot before it (what the daemon decided), with a warning."""
    config = worlds["covariate_shift"].config_path
    rc, on_slot = check_json(config, capsys)
    between = (AT + timedelta(minutes=30)).isoformat()
    code = main(["check", "--config", str(config), "--json", "--at", between])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert (code, doc["monitors"]) == (rc, on_slot["monitors"])
    assert doc["at"] == "2026-10-18T00:30:00Z"  # the time asked about; the slot is the monitor's
    (warning,) = [json.loads(x) for x in captured.err.splitlines() if "not a slot" in x]
    assert warning["message"].startswith("--at is not a slot of the monitor's schedule")
    assert warning["slot"] == "2026-10-18T00:00:00Z"


def test_subtle_decay_is_seen_only_through_pairing(
    worlds: dict[str, World], capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, doc = check_json(worlds["subtle_decay"].config_path, capsys)
    assert doc["monitors"][0]["state"] == "model_decay"
    table = pq.read_table(worlds["subtle_decay"].outcomes_path)
    ts = table.column("timestamp").cast(pa.timestamp("us")).to_numpy()
    outcome = table.column("outcome").to_numpy()
    current_start = np.datetime64((AT - timedelta(days=1)).replace(tzinfo=None), "us")
    reference = outcome[(ts >= current_start - np.timedelta64(7, "D")) & (ts < current_start)]
    current = outcome[(ts >= current_start) & (ts < np.datetime64(AT.replace(tzinfo=None), "us"))]
    welch = stats.ttest_ind(current, reference, equal_var=False, alternative="less")
    assert welch.pvalue > 0.05  # two independent samples: no evidence at all


def test_huge_window_trivial_shift_is_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = replace(SCENARIOS["covariate_shift"], scores_per_hour=8000.0, drift_strength=0.01)
    world = write_world(tmp_path, scenario, start=START + timedelta(days=9), end=END, seed=5)
    rc, doc = check_json(world.config_path, capsys)
    m = doc["monitors"][0]
    assert m["input"]["n_current"] > 150_000
    assert m["input"]["ks_pvalue"] < 0.05 or m["input"]["psi"] < 0.005  # tiny, immaterial
    assert m["state"] == "ok", m["reasons"]
    assert rc == 0


def test_broken_source_is_an_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = _world(tmp_path, "stationary")
    victim = world.scores_path / "date=2026-10-17" / "part-0.parquet"
    victim.write_bytes(b"PAR1 this is not parquet")
    rc, doc = check_json(world.config_path, capsys)
    m = doc["monitors"][0]
    assert rc == 3
    assert m["state"] == "error"
    assert "date=2026-10-17" in m["error"]
    assert m["input"] is None


def test_one_monitor_and_table_output(
    worlds: dict[str, World], capsys: pytest.CaptureFixture[str]
) -> None:
    config = worlds["covariate_shift"].config_path
    rc = main(["check", "--config", str(config), "--monitor", "demo", "--at", AT.isoformat()])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.splitlines()[0].split()[:2] == ["monitor", "state"]
    assert "demo" in out
    assert "data_drift" in out
    assert "data drift" in out
    assert main(["check", "--config", str(config), "--monitor", "nope"]) == 3
    # an empty name (``--monitor "$NAME"`` with NAME unset) is no name, not every monitor
    capsys.readouterr()
    assert main(["check", "--config", str(config), "--monitor", "", "--at", AT.isoformat()]) == 3
    assert "no monitor named ''" in capsys.readouterr().err
    span = ["--from", (AT - timedelta(hours=2)).isoformat(), "--to", AT.isoformat()]
    assert main(["backtest", "--config", str(config), "--monitor", "", *span]) == 3
    assert "no monitor named ''" in capsys.readouterr().err


def test_check_never_writes_state_and_replays_what_the_daemon_saw(
    worlds: dict[str, World], capsys: pytest.CaptureFixture[str]
) -> None:
    from monitor.config import load_config
    from monitor.jobs import Runner

    config = load_config(worlds["abrupt_decay"].config_path)
    state_dir = config.server.state_dir
    runner = Runner(config)
    daemon_saw = runner.run("demo", AT).verdict.to_dict()
    before = {p.name: p.read_bytes() for p in state_dir.iterdir()}
    _, doc = check_json(worlds["abrupt_decay"].config_path, capsys)
    after = {p.name: p.read_bytes() for p in state_dir.iterdir()}
    assert before == after
    m = doc["monitors"][0]
    for key in ("mean_difference", "pvalue", "ci_low", "ci_high", "mde", "decay"):
        assert m["outcome"][key] == daemon_saw["outcome"][key]
    for key in ("psi", "ks_statistic", "ks_pvalue"):
        assert m["input"][key] == daemon_saw["input"][key]


def test_exit_code_convention() -> None:
    assert exit_code(["ok", "ok"]) == 0
    assert exit_code(["ok", "data_drift"]) == 1
    assert exit_code(["data_drift", "model_decay", "ok"]) == 2
    assert exit_code(["model_decay", "error"]) == 2
    assert exit_code(["ok", "insufficient_data"]) == 3
    assert exit_code(["error", "data_drift"]) == 1
    assert exit_code([]) == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["check"],  # --config missing
        ["check", "--config", "monitor.toml", "--jsn"],
        ["check", "--config", "monitor.toml", "--at", "yesterday"],
        ["report", "--config", "monitor.toml", "--replay-from", "soon"],
        # a time no window can be placed at (once an OverflowError's traceback)
        ["check", "--config", "monitor.toml", "--at", "0001-01-02T00:00:00Z"],
        ["backtest", "--config", "m.toml", "--from", "0001-01-01T00:00:00Z", "--to", "2026-01-01"],
        ["nosuchcommand"],
        # the demo's flags are checked as run's are (they once raised a traceback)
        ["demo", "--web.listen-address", "bogus"],
        ["demo", "--log-level", "loud"],
        # a negative tick once ran forever, deaf to Ctrl-C; NaN was a traceback
        ["demo", "--tick=-1"],
        ["demo", "--tick", "0"],
        ["demo", "--tick", "nan"],
        ["demo", "--tick", "inf"],
        ["demo", "--seed=-1"],
    ],
)
def test_a_usage_error_exits_3_not_nagios_critical(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse exits 2 on a usage error: to a Nagios caller that is CRITICAL, what check says
    for model decay. A check that could not run is UNKNOWN (3)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 3
    assert "error:" in capsys.readouterr().err


def test_demo_replaces_only_a_demo_world(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``monitor demo --dir`` once removed whatever directory it named (a typo'd seed then
    failed after the removal). It replaces an earlier demo world (its mark, or only what a
    demo before the mark wrote) or an empty directory, and refuses anything else, touching
    nothing."""
    from monitor.demo import MARK, DemoDirError, clear_demo_dir

    precious = tmp_path / "precious"
    (precious / "sub").mkdir(parents=True)
    (precious / "notes.txt").write_text("mine")
    argv = ["demo", "--dir", str(precious), "--listen", "127.0.0.1:0", "--tick", "0.1"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert f"{precious}: not a demo world (it holds notes.txt, sub" in err, err
    assert (precious / "notes.txt").read_text() == "mine"
    with pytest.raises(SystemExit):  # a bad seed is refused before anything is touched
        main(["demo", "--dir", str(precious), "--seed", "-1"])
    assert (precious / "notes.txt").read_text() == "mine"
    mixed = tmp_path / "mixed"  # a demo's files and one of the user's
    for name in ("monitor.toml", "notes.txt"):
        (mixed / name).parent.mkdir(exist_ok=True)
        (mixed / name).write_text("x")
    with pytest.raises(DemoDirError):
        clear_demo_dir(mixed)
    assert (mixed / "notes.txt").exists()
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(DemoDirError, match="not a directory"):
        clear_demo_dir(a_file)
    project = tmp_path / "project"  # a real layout: its config and state_dir = "state"
    (project / "state").mkdir(parents=True)
    (project / "state" / "web.json").write_text("{}")
    (project / "monitor.toml").write_text(
        '[[monitors]]\nname = "web"\nscores.path = "/lake/scores"\noutcomes.path = "/lake/o"\n'
    )
    with pytest.raises(DemoDirError, match="not a demo world"):
        clear_demo_dir(project)
    assert (project / "state" / "web.json").exists()
    marked, old, empty = tmp_path / "marked", tmp_path / "old", tmp_path / "empty"
    for d in (marked, old, empty):
        d.mkdir()
    (marked / MARK).write_text("")
    (marked / "anything").write_text("")
    (marked / "sub").mkdir()
    for name in ("scores", "outcomes", "state"):  # a world of a demo before the mark
        (old / name).mkdir()
    (old / "monitor.toml").write_text(
        '[[monitors]]\nname = "demo"\nscores.path = "scores"\noutcomes.path = "outcomes"\n'
    )
    for d in (marked, old, empty, tmp_path / "new"):
        clear_demo_dir(d)
        assert not d.exists() or list(d.iterdir()) == []
    (marked / MARK).write_text("")  # "--dir .": emptied, the directory itself kept
    monkeypatch.chdir(marked)
    clear_demo_dir(Path("."))
    assert marked.is_dir()
    assert list(marked.iterdir()) == []


def test_an_unexpected_error_exits_3_not_nagios_warning(
    worlds: dict[str, World], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug outside a check's verdict (here: the slot's replay) is UNKNOWN (3) with its
    traceback, never Python's exit 1, which a Nagios caller reads as WARNING (data drift)."""
    import monitor.cli

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(monitor.cli, "_replay_check", broken)
    config = str(worlds["stationary"].config_path)
    assert main(["check", "--config", config, "--at", AT.isoformat()]) == 3
    err = capsys.readouterr().err
    assert "RuntimeError: a bug" in err
    assert "monitor check: unexpected error" in err


@pytest.mark.parametrize("command", ["check", "report"])
def test_replay_from_after_at_is_a_usage_error(
    worlds: dict[str, World], command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    later = (AT + timedelta(hours=1)).isoformat()
    extra = ["--out", str(tmp_path / "page.html")] if command == "report" else []
    config = str(worlds["stationary"].config_path)
    code = main(
        [command, "--config", config, "--at", AT.isoformat(), "--replay-from", later, *extra]
    )
    assert code == 3
    err = capsys.readouterr().err
    assert err.strip() == (
        f"monitor {command}: error: --replay-from 2026-10-18T01:00:00Z must not be after the "
        "slot checked, 2026-10-18T00:00:00Z"
    )
    assert not (tmp_path / "page.html").exists()


def test_without_at_and_without_daemon_state_the_latest_slot_is_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ``--at`` means the latest slot, decided as ``--at <latest slot>`` decides it: without
    the daemon's state, by replaying (it once decided from an empty state, and said ``ok``
    with exit 0 on a decay eight days old that ``--at`` reported as ``model_decay``)."""
    for _ in range(3):  # the hour may turn between the two calls: try again
        now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        start = now - timedelta(days=23)  # its decay began on day 15: eight days ago
        world = write_world(
            tmp_path / f"now{_}",
            replace(SCENARIOS["abrupt_decay"], scores_per_hour=100.0),
            start=start,
            end=now + timedelta(hours=1),
            seed=11,
        )
        config = str(world.config_path)
        out = {}
        for command, extra in (("check", ["--json"]), ("report", [])):
            for at in ([], ["--at", now.isoformat()]):
                page = ["--out", str(tmp_path / "page.html")] if command == "report" else []
                code = main([command, "--config", config, *extra, *at, *page])
                text = capsys.readouterr().out
                doc = json.loads(text)["monitors"][0] if command == "check" else {}
                out[command, bool(at)] = (code, doc.get("state"), doc.get("outcome"))
        if datetime.now(UTC).replace(minute=0, second=0, microsecond=0) == now:
            break
    assert out["check", True][1] == "model_decay"
    assert out["check", False] == out["check", True]
    assert out["report", False][0] == out["report", True][0] == 2


def test_a_check_is_abandoned_only_after_a_run_timeout_without_progress() -> None:
    """``check`` bounds a monitor's work by its run_timeout without progress: a replay that
    beats after each slot may run longer in all, a hung read may not."""
    import threading

    from monitor.cli import _within

    never = threading.Event()
    assert _within(0.2, lambda beat: never.wait()) is None  # a hung source

    def replay(beat: Any) -> str:
        for _ in range(6):  # 6 slots of 0.1 s: 0.6 s in all, against a 0.3 s limit
            never.wait(0.1)
            beat()
        return "done"

    assert _within(0.3, replay) == "done"
    with pytest.raises(ZeroDivisionError):
        _within(5.0, lambda beat: 1 / 0)


def _check_argv(config: Path) -> list[str]:
    """``monitor check --json`` of ``config`` at ``AT``, as a process of its own."""
    return [
        sys.executable,
        "-m",
        "monitor",
        "check",
        "--config",
        str(config),
        "--at",
        AT.isoformat(),
        "--json",
    ]


def test_console_script_runs_as_a_module(worlds: dict[str, World]) -> None:
    proc = subprocess.run(
        _check_argv(worlds["stationary"].config_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["monitors"][0]["state"] == "ok"


def test_check_leaves_even_a_corrupt_state_file_alone(
    worlds: dict[str, World], capsys: pytest.CaptureFixture[str]
) -> None:
    from monitor.config import load_config

    config = load_config(worlds["stationary"].config_path)
    state_dir = config.server.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    corrupt = state_dir / "demo.json"
    corrupt.write_text("{not json")
    try:
        rc, doc = check_json(worlds["stationary"].config_path, capsys)
        assert rc == 0
        assert doc["monitors"][0]["state"] == "ok"
        assert sorted(p.name for p in state_dir.iterdir()) == ["demo.json"]
        assert corrupt.read_text() == "{not json"
    finally:
        corrupt.unlink()


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-30T06:00:00Z",
        "2026-11-30t06:00:00z",
        "2026-11-30T07:00:00+01:00",
        "2026-11-30T06:00",
    ],
)
def test_at_takes_rfc_3339_times_in_either_case(text: str) -> None:
    from monitor.cli import _parse_at

    assert _parse_at(text) == datetime(2026, 11, 30, 6, tzinfo=UTC)


@pytest.mark.parametrize("text", ["soon", "2026-11-30T06:00:00zz", "z"])
def test_at_refuses_what_is_not_a_time(text: str) -> None:
    import argparse

    from monitor.cli import _parse_at

    with pytest.raises(argparse.ArgumentTypeError, match="RFC 3339") as raised:
        _parse_at(text)
    assert str(raised.value).endswith(f"got {text!r}")  # what was typed, not a rewrite


def test_a_second_demo_on_a_running_demos_directory_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second ``make run`` (another terminal) replaced the running demo's world under it,
    then failed on the port both listen on. The running demo holds the directory's lock: the
    second is refused, naming its pid, before anything is touched."""
    import os

    from monitor.demo import MARK
    from monitor.store import lock_state_dir

    running = tmp_path / "demo"
    (running / "scores").mkdir(parents=True)
    (running / MARK).write_text("")
    (running / "scores" / "part.parquet").write_text("the running demo's")
    held = lock_state_dir(running)
    assert held is not None
    try:
        argv = ["demo", "--dir", str(running), "--listen", "127.0.0.1:0", "--tick", "0.1"]
        assert main(argv) == 3
        err = capsys.readouterr().err
        assert f"{running}: another demo runs in it (pid {os.getpid()})" in err, err
        assert (running / "scores" / "part.parquet").read_text() == "the running demo's"
    finally:
        os.close(held)


def test_the_demo_drops_only_the_daemons_slot_skipped_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's simulated clock hands out a slot only when a run starts, so a tick that
    finds the previous run in flight skips none: the daemon's warning that it did printed
    5-6 false lines at every demo's start (its cold first check). Only that warning goes (a
    slot a run in flight made an ``error`` is still logged), and only while a demo serves:
    a filter left on the shared logger hid the warning from every daemon in the process."""
    import inspect

    from monitor.daemon import Daemon
    from monitor.demo import _NoSkippedSlots

    assert f'log.warning(\n            "{_NoSkippedSlots.MESSAGE}"' in inspect.getsource(
        Daemon._skipped
    )
    logger = logging.getLogger("monitor.daemon")
    quiet = _NoSkippedSlots()
    logger.addFilter(quiet)
    try:
        with caplog.at_level(logging.WARNING, logger="monitor"):
            logger.warning(_NoSkippedSlots.MESSAGE)
            logger.warning("run missed its misfire grace")
            logger.error("slot skipped: previous run still in flight")
    finally:
        logger.removeFilter(quiet)
    assert [r.getMessage() for r in caplog.records] == [
        "run missed its misfire grace",
        "slot skipped: previous run still in flight",
    ]
    (tmp_path / "mine.txt").write_text("x")  # a refused demo leaves no filter behind
    assert main(["demo", "--dir", str(tmp_path), "--listen", "127.0.0.1:0"]) == 3
    assert not [f for f in logger.filters if isinstance(f, _NoSkippedSlots)]


@pytest.mark.parametrize("engine", [None, 'kind = "local"'])
def test_check_by_a_user_who_cannot_enter_the_state_dir_decides_without_it(
    tmp_path: Path, engine: str | None
) -> None:
    """The runbook's first command, run by an on-call user who is not the daemon's (the
    shipped unit's state_dir is 0700): the summary cache and grid under it cannot be looked
    at, and ``check`` once died with a traceback and no JSON (PermissionError from
    ``is_dir``). Without an engine it decides on buckets in memory, as without a state file,
    and says so in the log; through summaries the grid it cannot look at is its error (one of
    its own would decide on other edges than the daemon's), said in the JSON. As root the
    child runs without the capabilities that ignore permissions."""
    import os
    import shutil

    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv(1) is missing: root would ignore permissions")
    wrapper = (
        ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]
        if os.geteuid() == 0
        else []
    )
    world = _world(tmp_path, "stationary")
    config = world.config_path
    if engine:
        config.write_text(config.read_text() + f"\n[engine]\n{engine}\n")
    state_dir = config.parent / "state"
    (state_dir / "summaries").mkdir(parents=True)
    state_dir.chmod(0)
    try:
        proc = subprocess.run(
            [*wrapper, *_check_argv(config)],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    finally:
        state_dir.chmod(0o755)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "state file unreadable" in proc.stderr
    assert "cannot open the summary cache" in proc.stderr
    m = json.loads(proc.stdout)["monitors"][0]
    if engine is None:
        assert (proc.returncode, m["state"]) == (0, "ok"), proc.stderr[-3000:]
    else:  # a grid it cannot look at is its error (its own would decide on other edges)
        assert (proc.returncode, m["state"]) == (3, "error"), proc.stderr[-3000:]
        assert "cannot read the summary grid" in m["error"]
        assert "run as the daemon's user, or with read access to its state_dir" in m["error"]


def test_an_outcome_too_large_to_test_is_an_error_naming_source_column_and_query(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finite outcome of 1e308 (a producer's sentinel) passes the reader, and the paired
    test refuses it: the check is an error, which once named only ``current - reference``.
    It names the outcome source, its column and the query that holds the value."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    world = _world(tmp_path, "stationary")
    victims = sorted((world.config_path.parent / "outcomes").glob("date=2026-10-1[78]/*.parquet"))
    assert victims
    for victim in victims:
        table = pq.read_table(victim)
        outcome = table.column("outcome").to_numpy().copy()
        outcome[0] = 1e308
        pq.write_table(table.set_column(2, "outcome", pa.array(outcome)), victim)
    query = pq.read_table(victims[0]).column("query_id")[0].as_py()
    rc, doc = check_json(world.config_path, capsys)
    m = doc["monitors"][0]
    assert (rc, m["state"]) == (3, "error")
    assert "(column 'outcome')" in m["error"]
    assert f"query {query!r}" in m["error"]
    assert "outcomes" in m["error"]
    assert "1e+308 in the current window" in m["error"]


def test_check_json_at_is_the_time_asked_whatever_the_monitors_order(
    worlds: dict[str, World], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The top-level ``at`` of ``check --json`` was the first monitor's slot: an hourly and a
    daily monitor gave 03:00 in one order and 00:00 in the other. It is the time asked about
    (``--at``); each monitor's ``at`` is the slot it decided."""
    text = worlds["stationary"].config_path.read_text()
    table = text[text.index("[[monitors]]") :]
    daily = table.replace('name = "demo"', 'name = "daily"').replace(
        'schedule = "1h"', 'schedule = "1d"'
    )
    docs: list[dict[str, Any]] = []
    for order in ((table, daily), (daily, table)):
        path = worlds["stationary"].config_path.parent / f"at-order-{len(docs)}.toml"
        path.write_text(text[: text.index("[[monitors]]")] + "\n".join(order))
        asked = AT + timedelta(hours=3, minutes=30)
        main(["check", "--config", str(path), "--json", "--at", asked.isoformat()])
        docs.append(json.loads(capsys.readouterr().out))
    assert [d["at"] for d in docs] == ["2026-10-18T03:30:00Z"] * 2
    slots = [{m["name"]: m["at"] for m in d["monitors"]} for d in docs]
    assert slots[0] == slots[1] == {"demo": "2026-10-18T03:00:00Z", "daily": "2026-10-18T00:00:00Z"}


def test_check_reads_the_clock_once_for_every_monitors_latest_slot(
    worlds: dict[str, World], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --at, the top-level ``at`` was one reading of the clock and each monitor's slot
    another: an hour passing between them put a monitor's slot after the time asked about."""
    import monitor.cli as cli

    hour = AT + timedelta(hours=1)
    ticks = iter([hour - timedelta(milliseconds=100)] + [hour + timedelta(milliseconds=100)] * 99)

    class Clock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return next(ticks)

    monkeypatch.setattr(cli, "datetime", Clock)
    config = worlds["stationary"].config_path
    replay = (hour - timedelta(hours=3)).isoformat()
    main(["check", "--config", str(config), "--json", "--replay-from", replay])
    doc = json.loads(capsys.readouterr().out)
    assert doc["at"] == "2026-10-18T00:59:59.900000Z"
    assert [m["at"] for m in doc["monitors"]] == ["2026-10-18T00:00:00Z"]
