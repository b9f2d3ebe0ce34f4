"""The daemon as a real subprocess: scraped over HTTP, restarted without losing state, stopped with
SIGTERM; and, in-process, a hung source that must not block later runs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import Config, load_config, with_server_flags
from monitor.daemon import Daemon
from monitor.errors import ConfigError
from monitor.jobs import ParquetReader, Runner, StateStore, _prints
from monitor.simulate import SCENARIOS, write_world
from monitor.sources import ScoreSpec, ScoreWindow, Window
from tests.deploy.stack import Process, free_port, http_get, wait_for

BROKEN = """
[[monitors]]
name = "broken"
schedule = "1h"
scores.path = "no-such-dir"
outcomes.path = "outcomes"
"""


def samples(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = http_get(f"http://{address}/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(
    snap: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float | None:
    return snap.get((name, tuple(sorted(labels.items()))))


def runs(address: str, monitor: str) -> float | None:
    try:
        return value(samples(address), "retrieval_monitor_runs_total", monitor=monitor)
    except OSError:
        return None


def first_run_done(address: str, monitor: str) -> bool:
    return (runs(address, monitor) or 0) >= 1


def status(address: str) -> dict[str, Any]:
    code, body = http_get(f"http://{address}/status")
    assert code == 200
    doc: dict[str, Any] = json.loads(body)
    return doc


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, str]:
    end = datetime.now(UTC).replace(microsecond=0)
    address = f"127.0.0.1:{free_port()}"
    w = write_world(
        tmp_path / "world",
        SCENARIOS["abrupt_decay"],
        start=end - timedelta(days=17),
        end=end,
        seed=3,
        listen=address,
    )
    with w.config_path.open("a") as fh:
        fh.write(BROKEN)
    return w.config_path, address


def start(config: Path, log: Path) -> Process:
    argv = [sys.executable, "-m", "monitor", "run", "--config", str(config)]
    return Process("monitor", argv, log, cwd=config.parent)


@pytest.mark.integration
@pytest.mark.slow
def test_daemon_scrape_restart_and_sigterm(world: tuple[Path, str], tmp_path: Path) -> None:
    config, address = world
    proc = start(config, tmp_path / "first.log")
    try:
        for name in ("demo", "broken"):
            wait_for(
                partial(first_run_done, address, name),
                timeout=60,
                what=f"first run of {name}",
                log=proc.log,
            )
        assert http_get(f"http://{address}/healthz")[0] == 200
        snap = samples(address)
        for name, expected in (("demo", "model_decay"), ("broken", "error")):
            states = {
                s: value(snap, "retrieval_monitor_state", monitor=name, state=s)
                for s in ("ok", "data_drift", "model_decay", "insufficient_data", "error")
            }
            assert states[expected] == 1.0, (name, states)
            assert sum(v or 0.0 for v in states.values()) == 1.0
        assert value(snap, "retrieval_monitor_model_decay", monitor="demo", segment="") == 1.0
        assert value(snap, "retrieval_monitor_run_failures_total", monitor="broken") == 1.0
        assert value(snap, "retrieval_monitor_psi", monitor="broken", segment="") is None
        assert value(snap, "retrieval_monitor_build_info", version="0.1.0") == 1.0
        latest = value(
            snap, "retrieval_monitor_data_latest_timestamp_seconds", monitor="demo", source="scores"
        )
        assert latest is not None
        assert latest > datetime.now(UTC).timestamp() - 3 * 3600
        promtool = shutil.which("promtool")
        assert promtool, "promtool missing: run `make debs`"
        text = http_get(f"http://{address}/metrics")[1]
        lint = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, check=False
        )
        assert lint.returncode == 0, lint.stdout + lint.stderr
        first = status(address)
        looked_at = first["monitors"][0]["verdict"]["outcome"]["looked_at"]
        first_at = first["monitors"][0]["verdict"]["at"]
        assert first["monitors"][0]["verdict"]["outcome"]["new_look"] is True
    finally:
        assert proc.stop() == 0, proc.log()
    state_file = config.parent / "state" / "demo.json"
    saved = json.loads(state_file.read_text())
    assert saved["state"] == "model_decay"
    assert saved["decay"]["looks"][-1] == looked_at

    again = start(config, tmp_path / "second.log")
    try:
        wait_for(
            lambda: (runs(address, "demo") or 0) >= 1,
            timeout=60,
            what="run after restart",
            log=again.log,
        )
        verdict = status(address)["monitors"][0]["verdict"]
        outcome = verdict["outcome"]
        assert outcome["looked_at"] == looked_at
        if verdict["at"] == first_at:
            # restarted within the slot: decided again from the state before it, the same
            # look as the first life's, not a second one
            assert outcome["new_look"] is True
            assert json.loads(state_file.read_text())["decay"]["looks"] == saved["decay"]["looks"]
        else:  # the next slot: the look of the first life is remembered, none within spacing
            assert outcome["new_look"] is False
        snap = samples(address)
        assert value(snap, "retrieval_monitor_state", monitor="demo", state="model_decay") == 1.0
        since = value(snap, "retrieval_monitor_state_since_timestamp_seconds", monitor="demo")
        assert since is not None
        assert since == pytest.approx(
            datetime.fromisoformat(saved["state_since"].replace("Z", "+00:00")).timestamp()
        )
    finally:
        assert again.stop() == 0, again.log()


class HangingReader(ParquetReader):
    """Blocks every score read until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def scores(
        self, spec: ScoreSpec, window: Window, *, with_timestamps: bool, cuts: Any = None
    ) -> ScoreWindow:
        self.entered.set()
        self.release.wait(timeout=30)
        return super().scores(spec, window, with_timestamps=with_timestamps, cuts=cuts)


def test_hung_source_is_abandoned_and_its_late_result_discarded(tmp_path: Path) -> None:
    end = datetime(2026, 11, 20, tzinfo=UTC)
    w = write_world(
        tmp_path,
        SCENARIOS["stationary"],
        start=end - timedelta(days=9),
        end=end,
        seed=1,
        extra_monitor_toml='run_timeout = "1s"\n',
        listen="127.0.0.1:0",  # not the default 9464: a demo or another run may hold it
    )
    config = load_config(w.config_path)
    reader = HangingReader()
    runner = Runner(config, reader=reader)
    daemon = Daemon(config, runner=runner, slot_source=lambda m: end)
    try:
        daemon.run_monitor("demo")  # returns after run_timeout although the read still hangs
        assert reader.entered.is_set()
        (snap,) = runner.board.snapshot()
        assert snap.state.state == "error"
        assert snap.latest is not None
        assert "run_timeout" in snap.latest.verdict.reasons[0]
        # the hang's length, not 0: the duration panel shows a hung source
        assert snap.latest.duration_seconds >= 1.0
        reader.release.set()
        assert daemon.wait_idle(30) == []  # the abandoned run finishes: its result is discarded
        (snap,) = runner.board.snapshot()
        assert snap.state.state == "error"
        assert snap.runs_total == 1
    finally:
        reader.release.set()
        daemon.http.stop()


class HangOne(ParquetReader):
    """Blocks the score reads of one monitor's path until released."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.release = threading.Event()
        self.entered = threading.Event()  # a read of the path has begun (and now waits)

    def scores(
        self, spec: ScoreSpec, window: Window, *, with_timestamps: bool, cuts: Any = None
    ) -> ScoreWindow:
        if spec.path == self.path:
            self.entered.set()
            self.release.wait(timeout=30)
        return super().scores(spec, window, with_timestamps=with_timestamps, cuts=cuts)


def _two_monitor_world(tmp_path: Path) -> tuple[Path, datetime]:
    end = datetime(2026, 11, 20, tzinfo=UTC)
    w = write_world(
        tmp_path,
        SCENARIOS["stationary"],
        start=end - timedelta(days=9),
        end=end,
        seed=1,
        extra_monitor_toml='run_timeout = "1s"\n',
        listen="127.0.0.1:0",  # not the default 9464: a demo or another run may hold it
    )
    text = w.config_path.read_text()
    table = text[text.index("[[monitors]]") :]
    shutil.copytree(w.scores_path, tmp_path / "scores_hung")
    hung = table.replace('name = "demo"', 'name = "hung"').replace(
        'scores.path = "scores"', 'scores.path = "scores_hung"'
    )
    w.config_path.write_text(text + "\n" + hung)
    return w.config_path, end


@contextlib.contextmanager
def _hung_daemon(
    tmp_path: Path, run_timeout: str = "1s"
) -> Iterator[tuple[Path, datetime, Runner, Daemon]]:
    """A daemon (not serving) of the two-monitor world whose ``hung`` monitor's score reads
    block until the end (or ``runner.reader.release``), when they are released and every run
    is awaited."""
    path, end = _two_monitor_world(tmp_path)
    path.write_text(
        path.read_text().replace('run_timeout = "1s"', f'run_timeout = "{run_timeout}"')
    )
    config = load_config(path)
    reader = HangOne(config.monitor("hung").scores.path)
    runner = Runner(config, reader=reader)
    daemon = Daemon(config, runner=runner, slot_source=lambda m: end)
    try:
        yield path, end, runner, daemon
    finally:
        reader.release.set()
        assert daemon.wait_idle(30) == []
        daemon.http.stop()


def test_a_hung_monitor_skips_its_own_slots_and_leaves_the_others_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with _hung_daemon(tmp_path) as (_, end, runner, daemon):
        daemon.run_monitor("hung")  # abandoned after run_timeout; its thread still hangs
        assert daemon.in_flight("hung")
        for _ in range(5):
            daemon.run_monitor("hung")  # returns at once: no second run is started
            daemon.run_monitor("demo")
        snaps = {s.monitor.name: s for s in runner.board.snapshot()}
        assert snaps["demo"].failures_total == 0
        assert snaps["demo"].runs_total == 5
        assert snaps["hung"].failures_total == 6
        assert snaps["hung"].latest is not None
        assert "previous run still in flight since" in snaps["hung"].latest.verdict.reasons[0]
        hung_threads = [t for t in threading.enumerate() if t.name == "check:hung"]
        assert len(hung_threads) == 1
        # a slot the scheduler drops while the job still waits for a run within its
        # run_timeout (a slow check, not known to hang yet) is a warning, not a failure
        from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent

        with caplog.at_level(logging.WARNING, logger="monitor"):
            daemon._on_event(JobSubmissionEvent(EVENT_JOB_MAX_INSTANCES, "hung", "default", [end]))
        snaps = {s.monitor.name: s for s in runner.board.snapshot()}
        assert snaps["hung"].failures_total == 6
        (skipped,) = [r for r in caplog.records if "within its run_timeout" in r.getMessage()]
        assert skipped.__dict__["monitor"] == "hung"
        assert skipped.__dict__["waiting_for"] == end.isoformat().replace("+00:00", "Z")


def test_a_run_that_raises_outside_its_check_is_recorded_as_error(tmp_path: Path) -> None:
    """An exception that escapes ``Runner.run`` (a bug past the check's own error handling)
    is logged and the slot recorded as ``error``, a failed run counted; it once left the last
    verdict showing with nothing counted, so only the staleness alert could notice."""
    path, end = _two_monitor_world(tmp_path)
    config = load_config(path)

    class Broken(Runner):
        def run(self, name: str, at: datetime | None = None, *, token: int | None = None) -> Any:
            raise RuntimeError("a bug")

    runner = Broken(config)
    daemon = Daemon(config, runner=runner, slot_source=lambda m: end)
    try:
        daemon.run_monitor("demo")
        snaps = {s.monitor.name: s for s in runner.board.snapshot()}
        assert snaps["demo"].failures_total == 1
        assert snaps["demo"].latest is not None
        assert snaps["demo"].latest.verdict.state == "error"
        assert "RuntimeError('a bug')" in snaps["demo"].latest.verdict.reasons[0]
    finally:
        daemon.http.stop()


def test_a_hung_run_of_a_monitor_a_reload_removed_ends_quietly(tmp_path: Path) -> None:
    """The job waiting for a hung run whose monitor a reload removed returns at run_timeout
    without recording anything (the monitor is gone from the board); it once raised KeyError
    out of the scheduler's job."""
    with _hung_daemon(tmp_path) as (path, _, runner, daemon):
        text = path.read_text()
        errors: list[BaseException] = []

        def job() -> None:
            try:
                daemon.run_monitor("hung")
            except BaseException as exc:  # the assertion below reports it
                errors.append(exc)

        waiting = threading.Thread(target=job)
        waiting.start()
        wait_for(lambda: daemon.in_flight("hung") or None, timeout=10, what="the hung run")
        path.write_text(_without_hung(text))
        assert daemon.reload() is True
        waiting.join(timeout=30)
        assert not waiting.is_alive()
        assert errors == []
        assert [s.monitor.name for s in runner.board.snapshot()] == ["demo"]


def test_a_reload_that_fixes_a_hung_monitor_runs_it_again_at_once(tmp_path: Path) -> None:
    """A run abandoned as hung held its monitor back after the operator fixed its settings
    and reloaded: every slot "previous run still in flight" until a restart."""
    with _hung_daemon(tmp_path) as (path, _, runner, daemon):
        daemon.run_monitor("hung")  # abandoned after run_timeout; its thread still hangs
        assert daemon.in_flight("hung")
        path.write_text(path.read_text().replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True
        daemon.run_monitor("hung")
        snap = {s.monitor.name: s for s in runner.board.snapshot()}["hung"]
        assert snap.latest is not None
        assert snap.latest.verdict.state != "error", snap.latest.verdict.reasons
        assert snap.latest.verdict.input is not None
        # the run let go still hangs: the exit must not wait for it (cli exits hard on it)
        assert daemon.wait_idle(0) == ["hung"]


def test_reload_applies_a_valid_file_and_keeps_the_old_one_on_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, end = _two_monitor_world(tmp_path)
    config = load_config(path)
    daemon = Daemon(config, slot_source=lambda m: end)
    try:
        daemon._add_jobs()
        daemon.run_monitor("demo")
        good = path.read_text()
        path.write_text("bogus = 1\n" + good.replace('schedule = "1h"', 'schedule = "0s"'))
        assert daemon.reload() is False
        problems = [r.__dict__["problem"] for r in caplog.records if hasattr(r, "problem")]
        assert len(problems) == 3, problems  # the unknown key and both schedules
        assert daemon.config is config
        first = good.index("[[monitors]]")
        table = good[first : good.index("[[monitors]]", first + 1)]  # "demo" alone
        added = table.replace('name = "demo"', 'name = "added"')
        kept = good[: good.index("[[monitors]]")] + table  # "hung" removed
        path.write_text(kept + "\n" + added)
        assert daemon.reload() is True
        assert [m.name for m in daemon.config.monitors] == ["demo", "added"]
        # the added monitor's slots, and its run at once
        assert sorted(j.id for j in daemon.scheduler.get_jobs()) == ["added", "added/rerun", "demo"]
        snaps = {s.monitor.name: s for s in daemon.runner.board.snapshot()}
        assert sorted(snaps) == ["added", "demo"]
        assert snaps["demo"].runs_total == 1  # unchanged: counters and state kept
        assert snaps["demo"].state.last_run is not None
        path.write_text(kept.replace('windows.current = "1d"', 'windows.current = "2d"'))
        assert daemon.reload() is True
        (snap,) = daemon.runner.board.snapshot()
        assert snap.resets["config_changed"] == 1
        assert snap.state.last_at is None  # sequential state starts fresh
        assert snap.state.last_run is not None  # the run times are kept
    finally:
        daemon.http.stop()


def test_reload_keeps_what_the_flags_set_without_calling_it_a_server_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """--web.listen-address wins over [server] listen at start-up and at every reload: a
    reload that changed only a monitor is no '[server] settings changed' warning (it was,
    at every SIGHUP, comparing the file's listen with the flag's), and one that does change
    [server] still is, naming only what changed."""
    path, end = _two_monitor_world(tmp_path)
    port = free_port()
    config = with_server_flags(load_config(path), listen=f"127.0.0.1:{port}")
    daemon = Daemon(config, slot_source=lambda m: end)
    try:
        path.write_text(
            path.read_text().replace('windows.current = "1d"', 'windows.current = "2d"')
        )
        assert daemon.reload() is True
        assert not [
            r for r in caplog.records if r.getMessage().startswith("[server] settings changed")
        ]
        assert (daemon.config.server.host, daemon.config.server.port) == ("127.0.0.1", port)
        text = path.read_text()
        path.write_text(text.replace("[server]", '[server]\nshutdown_timeout = "7s"', 1))
        assert daemon.reload() is True
        (changed,) = [
            r for r in caplog.records if r.getMessage().startswith("[server] settings changed")
        ]
        assert changed.__dict__["settings"] == ["shutdown_timeout"]
    finally:
        daemon.http.stop()


def test_health_is_unavailable_until_the_scheduler_runs_and_degraded_on_save_failures(
    tmp_path: Path,
) -> None:
    path, end = _two_monitor_world(tmp_path)
    daemon = Daemon(load_config(path), slot_source=lambda m: end)
    try:
        assert daemon.health().http_status == 503  # not serving yet
        board = daemon.runner.board
        board.save_failed("demo", "OSError: [Errno 28] No space left on device", end)
        health = board.health(True)
        assert (health.status, health.http_status) == ("degraded", 200)
        assert health.body.startswith("degraded: state of monitor demo not saved since")
        board.saved("demo", end)
        assert board.health(True).status == "ok"
    finally:
        daemon.http.stop()


def test_a_removed_monitor_leaves_nothing_behind(tmp_path: Path) -> None:
    """Each reload that renamed the monitor kept the removed one's history (840 entries,
    1.4 MB), its finished run with the page's detail and its lock: a daemon reconfigured
    hundreds of times grew without bound. After reloads, only the configured monitor is
    held."""
    end = datetime(2026, 11, 20, tzinfo=UTC)
    world = write_world(
        tmp_path / "w",
        SCENARIOS["stationary"],
        start=end - timedelta(days=9),
        end=end,
        seed=1,
        listen="127.0.0.1:0",
    )
    base = world.config_path.read_text()

    def renamed(i: int) -> Any:
        path = tmp_path / f"c{i % 2}.toml"
        path.write_text(base.replace('name = "demo"', f'name = "m{i}"'))
        return load_config(path)

    daemon = Daemon(renamed(0), slot_source=lambda m: end)
    try:
        daemon.run_monitor("m0")
        for i in range(1, 6):
            daemon._apply(renamed(i))
            daemon.run_monitor(f"m{i}")
        runner = daemon.runner
        assert set(runner._locks) == {"m5"}
        assert set(daemon._inflight) == {"m5"}
        assert daemon._inflight["m5"].record is None  # the board holds the record
        assert runner.history is not None
        assert set(runner.history._entries) == {"m5"}
        assert [s.monitor.name for s in runner.board.snapshot()] == ["m5"]
    finally:
        daemon.http.stop()


def test_reloads_while_a_source_still_hangs_let_a_bounded_number_go(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reload lets a hung run go so the monitor runs again with its new settings; each later
    reload, the source still hanging, let one more go: a thread per reload. At most
    ``_MAX_LET_GO`` are let go per monitor (an operator's second and third fix still run at
    once); past that the monitor waits, and the log says why, once a reload."""
    from monitor.daemon import _MAX_LET_GO

    with _hung_daemon(tmp_path) as (path, _, _runner, daemon):
        text = path.read_text()
        for i in range(_MAX_LET_GO + 3):
            daemon.run_monitor("hung")  # abandoned after run_timeout (1s); its thread hangs
            grace = f'name = "hung"\nmisfire_grace = "{i + 2}s"'
            path.write_text(text.replace('name = "hung"', grace))
            assert daemon.reload() is True
        hung_threads = [t for t in threading.enumerate() if t.name == "check:hung"]
        assert len(hung_threads) == _MAX_LET_GO + 1  # the ones let go, and the one in flight
        assert len(daemon._let_go) == _MAX_LET_GO
        kept = [r for r in caplog.records if r.getMessage().startswith("a hung run was not let")]
        assert len(kept) == 3  # the three reloads past the bound


def test_the_signal_handler_only_queues_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python runs a signal handler in the main thread between any two instructions, also
    while that thread holds a lock the handler takes. The handler logged and started a thread
    (which takes threading's own lock): a daemon once hung on a SIGTERM and every signal after
    it, still listening. It now only queues the signal (``SimpleQueue.put`` is safe there),
    and a thread of its own stops the daemon or reloads it."""
    import signal

    import monitor.daemon

    path, end = _two_monitor_world(tmp_path)
    daemon = Daemon(load_config(path), slot_source=lambda m: end)
    calls: list[str] = []
    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: calls.append("thread start"))
    monkeypatch.setattr(monitor.daemon.log, "info", lambda *a, **k: calls.append("log"))
    daemon._on_signal(signal.SIGTERM, None)
    assert calls == []
    monkeypatch.setattr(threading.Thread, "start", real_start)
    loop = threading.Thread(target=daemon._signal_loop)
    loop.start()
    wait_for(lambda: daemon._stopping.is_set() or None, timeout=10, what="the stop acted on")
    daemon._signals.put_nowait(0)
    loop.join(timeout=10)
    assert not loop.is_alive()
    daemon.http.stop()


def test_a_stop_asked_for_while_the_scheduler_starts_is_not_lost(tmp_path: Path) -> None:
    """A SIGTERM right after start-up set the stop flag while the scheduler was not yet
    running, so nothing was shut down; the scheduler then started and the daemon ran with
    no checks (503 on /healthz) until a second signal (a reviewer's repro: 2 of 6 starts).
    Here the stop comes before ``serve`` starts the scheduler: it must still return."""
    path, end = _two_monitor_world(tmp_path)
    daemon = Daemon(load_config(path), slot_source=lambda m: end)
    daemon.stop()  # the signal thread's stop, before the scheduler runs
    done = threading.Event()
    codes: list[int] = []

    def serve() -> None:
        codes.append(daemon.serve(install_signals=False))
        done.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert done.wait(30), "serve() kept running after the stop"
        assert codes == [0]
    finally:
        if not done.is_set():
            daemon.scheduler.shutdown(wait=False)
            daemon.http.stop()


def test_an_edited_web_config_file_is_no_server_change_at_a_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The web config file is read again at every request, so an edit to it is in force at
    once; a SIGHUP after one logged '[server] settings changed; they take effect at the next
    restart' naming 'web', inviting a restart that changes nothing."""
    path, end = _two_monitor_world(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    text = path.read_text()
    path.write_text(text.replace("[server]", f'[server]\nweb_config_file = "{web}"', 1))
    daemon = Daemon(load_config(path), slot_source=lambda m: end)
    try:
        web.write_text("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n")
        path.write_text(
            path.read_text().replace('windows.current = "1d"', 'windows.current = "2d"')
        )
        assert daemon.reload() is True
        assert not [
            r for r in caplog.records if r.getMessage().startswith("[server] settings changed")
        ]
    finally:
        daemon.http.stop()


def test_a_reload_while_a_run_is_in_flight_runs_the_monitor_again_once_it_ends(
    tmp_path: Path,
) -> None:
    """A reload that fixes a slow or hanging source while its run is still in flight (not
    yet abandoned) re-added the job for the next slot only: the run was then abandoned and
    the monitor showed error until that slot, up to an hour or a day. Once the run ends (here:
    is abandoned at run_timeout) the monitor is let go and runs at once with the fix."""
    with _hung_daemon(tmp_path, run_timeout="3s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        path.write_text(path.read_text().replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True
        assert daemon.scheduler.get_job("hung/rerun") is None  # not before the run ends
        first.join(30)  # abandoned at run_timeout
        job = daemon.scheduler.get_job("hung/rerun")
        assert job is not None, "no run after the abandoned one"
        job.func(*job.args)  # what the scheduler runs at once
        _ran_clean(runner, failures=None)


def _without_hung(text: str) -> str:
    """The two-monitor config ``text`` with its second monitor (``hung``) removed."""
    return text[: text.index("[[monitors]]", text.index("[[monitors]]") + 1)]


def _end_quietly(runner: Runner, first: threading.Thread, caplog: pytest.LogCaptureFixture) -> None:
    """Release the hung source: ``first`` ends, and nothing fails unexpectedly."""
    reader = runner.reader
    assert isinstance(reader, HangOne)
    with caplog.at_level(logging.WARNING, logger="monitor"):
        reader.release.set()
        first.join(30)
    assert not first.is_alive()
    assert not [r for r in caplog.records if "unexpectedly" in r.getMessage()]


def _remove_and_add_back(path: Path, daemon: Daemon) -> None:
    """Reload without the ``hung`` monitor, then with it back, fixed (its scores readable)."""
    text = path.read_text()
    path.write_text(_without_hung(text))
    assert daemon.reload() is True
    path.write_text(text.replace('"scores_hung"', '"scores"'))
    assert daemon.reload() is True


def _ran_clean(runner: Runner, *, failures: int | None = 0) -> None:
    """The ``hung`` monitor's latest verdict is no error (and ``failures`` failures counted)."""
    snap = {s.monitor.name: s for s in runner.board.snapshot()}["hung"]
    if failures is not None:
        assert snap.failures_total == failures
    assert snap.latest is not None
    assert snap.latest.verdict.state != "error", snap.latest.verdict.reasons


def _hung_run(daemon: Daemon) -> threading.Thread:
    """A run of the ``hung`` monitor started in a thread of its own, once it is in flight."""
    first = threading.Thread(target=daemon.run_monitor, args=("hung",), daemon=True)
    first.start()
    assert wait_for(lambda: daemon.in_flight("hung") or None, timeout=10, what="the run")
    reader = daemon.runner.reader
    if isinstance(reader, HangOne) and not reader.release.is_set():
        # in its source's read, not only registered: a reload before the check read its
        # settings ends the run at once (a removed monitor has none), which a test forcing
        # an order against a run in flight did not mean (a CI run under load hit it)
        assert reader.entered.wait(10)
    return first


def test_a_run_of_a_monitor_removed_meanwhile_ends_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Changed while its run was in flight (a rerun asked for), then removed, then the run
    ends: it once raised KeyError (the removed monitor's fingerprints, read before the
    discarded token was) into "run failed unexpectedly", and the rerun asked for ran a job
    on the removed monitor's executor (APScheduler's error)."""
    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        text = path.read_text()
        path.write_text(text.replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True
        assert "hung" in daemon._due
        path.write_text(_without_hung(text))
        assert daemon.reload() is True
        assert "hung" not in daemon._due
        _end_quietly(runner, first, caplog)
        assert daemon.scheduler.get_job("hung/rerun") is None


def test_a_monitor_removed_mid_run_and_added_back_runs_once_the_old_run_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Removed by a reload while its run was in flight, then added back (fixed) by another:
    run at once, the added monitor found the old run "still in flight" and recorded an
    error that stayed until its next slot; and the old run, ending, raised KeyError (the
    removed monitor's fingerprints) into "run failed unexpectedly". Now the added monitor
    runs once the old run ends, and the old run's result is discarded quietly."""
    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        _remove_and_add_back(path, daemon)
        assert "hung" in daemon._due
        assert daemon.scheduler.get_job("hung/rerun") is None  # not before the old run ends
        daemon.run_monitor("hung")  # a slot while the old run is still in flight
        snap = {s.monitor.name: s for s in runner.board.snapshot()}["hung"]
        assert snap.failures_total == 0  # the old run's slots are no failure of this one
        _end_quietly(runner, first, caplog)
        job = daemon.scheduler.get_job("hung/rerun")
        assert job is not None, "no run after the old one ended"
        job.func(*job.args)
        _ran_clean(runner)


def test_a_removed_monitors_run_abandoned_while_it_is_added_back_lets_it_run(
    tmp_path: Path,
) -> None:
    """The old run of a monitor removed and added back is abandoned at run_timeout just after
    the reload decided to wait for it, before the rerun was asked for: the run's end found no
    rerun asked for, the reload then saw it still in flight (hung), and the monitor never ran
    (every slot skipped). The rerun is asked for, and the wait decided, under one lock hold."""
    with _hung_daemon(tmp_path, run_timeout="3s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        text = path.read_text()
        path.write_text(_without_hung(text))
        assert daemon.reload() is True
        _abandoned_before_the_jobs_are_added(daemon, first)
        path.write_text(text.replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True
        assert not first.is_alive()
        assert _run_due(daemon) == ["hung/rerun"], dict(daemon._due)
        _ran_clean(runner, failures=None)


def _abandoned_before_the_jobs_are_added(daemon: Daemon, first: threading.Thread) -> None:
    """At the next reload, the run in ``first`` is abandoned at run_timeout after the reload
    saw it in flight and before it adds the monitor's jobs."""
    original = daemon._add_job

    def after_the_abandonment(*args: Any, **kwargs: Any) -> None:
        first.join(30)
        daemon._add_job = original  # type: ignore[method-assign]
        original(*args, **kwargs)

    daemon._add_job = after_the_abandonment  # type: ignore[method-assign]


def _run_due(daemon: Daemon) -> list[str]:
    """Run the jobs due now, as the scheduler would (a one-off job is gone once it ran): their
    ids, each once (a scheduler not started yet keeps two jobs added under one id)."""
    now = datetime.now(UTC)
    due = [j for j in daemon.scheduler.get_jobs() if j.next_run_time and j.next_run_time <= now]
    for job in due:
        if job.id.endswith("/rerun"):
            job.remove()
        job.func(*job.args)
    return sorted({j.id for j in due})


def test_a_removed_monitors_run_abandoned_after_it_was_added_back_is_no_failure(
    tmp_path: Path,
) -> None:
    """The old run of a monitor removed and added back hangs past run_timeout: it was
    recorded against the new monitor ("run exceeded run_timeout ... abandoned"). Now it is
    let go and the new monitor runs."""
    with _hung_daemon(tmp_path, run_timeout="3s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        _remove_and_add_back(path, daemon)
        first.join(30)  # abandoned at run_timeout, still hanging
        assert not first.is_alive()
        snap = {s.monitor.name: s for s in runner.board.snapshot()}["hung"]
        assert snap.failures_total == 0
        job = daemon.scheduler.get_job("hung/rerun")
        assert job is not None, "the added monitor never ran"
        job.func(*job.args)
        _ran_clean(runner, failures=None)


def test_a_run_that_ends_during_the_reload_still_gets_its_rerun(tmp_path: Path) -> None:
    """The run ends while the reload is between seeing it in flight and asking for a rerun
    after it (forced here inside the runner's reconfigure): the rerun was lost, the monitor
    waited for its next slot, and a stale request re-ran it after a later, unrelated run."""
    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        original = runner.reconfigure
        reader = runner.reader
        assert isinstance(reader, HangOne)

        def reconfigure(new: Any, **kw: Any) -> None:  # the run ends inside the reload
            reader.release.set()
            first.join(30)
            original(new, **kw)

        runner.reconfigure = reconfigure  # type: ignore[method-assign,assignment]
        path.write_text(path.read_text().replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True
        assert not first.is_alive()
        assert _run_due(daemon) == ["hung/rerun"]
        assert daemon._due == {}


def test_a_changed_monitors_run_abandoned_during_the_reload_lets_it_run(tmp_path: Path) -> None:
    """The run of a changed monitor reaches run_timeout after the reload saw it in flight (not
    abandoned) and before the reload asked for a run after it: the run's end found no run
    asked for, the reload then waited on the hung run, and every slot was "still in flight"
    until a restart (the fix the operator reloaded never ran)."""
    with _hung_daemon(tmp_path, run_timeout="3s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        original = runner.reconfigure

        def reconfigure(new: Any, **kw: Any) -> None:  # abandoned once the reload saw it
            first.join(30)
            original(new, **kw)

        runner.reconfigure = reconfigure  # type: ignore[method-assign,assignment]
        path.write_text(path.read_text().replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True
        runner.reconfigure = original  # type: ignore[method-assign]
        assert _run_due(daemon) == ["hung/rerun"], dict(daemon._due)
        _ran_clean(runner, failures=None)


def test_a_hung_run_kept_past_the_let_go_bound_runs_the_monitor_once_it_ends(
    tmp_path: Path,
) -> None:
    """Past ``_MAX_LET_GO`` a reload keeps the hung run: the monitor runs with its new settings
    once that run ends (nothing ran then), and an ordinary run since asked for no other (a
    stale request once re-ran the monitor after its next ordinary run)."""
    from monitor.daemon import _MAX_LET_GO

    with _hung_daemon(tmp_path) as (path, _, runner, daemon):
        text = path.read_text()
        daemon.run_monitor("hung")  # abandoned after run_timeout (1s); its thread hangs
        for i in range(_MAX_LET_GO + 1):
            path.write_text(
                text.replace('name = "hung"', f'name = "hung"\nmisfire_grace = "{i + 2}s"')
            )
            assert daemon.reload() is True
            if i < _MAX_LET_GO:  # let go: the monitor runs at once (and hangs again)
                assert _run_due(daemon) == ["hung/rerun"]
        assert _run_due(daemon) == []  # the run past the bound is kept: it still hangs
        reader = runner.reader
        assert isinstance(reader, HangOne)
        reader.release.set()
        assert daemon.wait_idle(30) == []
        assert _run_due(daemon) == ["hung/rerun"]
        runs = {s.monitor.name: s for s in runner.board.snapshot()}["hung"].runs_total
        daemon.run_monitor("hung")  # its next slot
        assert _run_due(daemon) == []
        snap = {s.monitor.name: s for s in runner.board.snapshot()}["hung"]
        assert snap.runs_total == runs + 1


def test_a_run_that_ends_inside_a_second_reload_is_followed_by_one_run(tmp_path: Path) -> None:
    """Reload A changed the monitor while its run was in flight; the run ends while reload B
    (another change) is under way: the run's end ran the monitor for A and B added it due at
    once as well, two runs with B's settings."""
    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        text = path.read_text()
        path.write_text(text.replace('name = "hung"', 'name = "hung"\nmisfire_grace = "7s"'))
        assert daemon.reload() is True  # A
        original = runner.reconfigure
        reader = runner.reader
        assert isinstance(reader, HangOne)

        def reconfigure(new: Any, **kw: Any) -> None:  # the run ends inside reload B
            reader.release.set()
            first.join(30)
            original(new, **kw)

        runner.reconfigure = reconfigure  # type: ignore[method-assign,assignment]
        path.write_text(text.replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True  # B
        runner.reconfigure = original  # type: ignore[method-assign]
        assert _run_due(daemon) == ["hung/rerun"]
        snap = {s.monitor.name: s for s in runner.board.snapshot()}["hung"]
        assert snap.runs_total == 2  # the first run, then one with B's settings
        assert snap.latest is not None
        assert snap.latest.verdict.state != "error", snap.latest.verdict.reasons


def test_a_timeout_recorded_during_a_reload_lands_before_the_new_settings_run(
    tmp_path: Path,
) -> None:
    """The run counted as abandoned before its timeout was recorded: a reload in between let
    it go and ran the monitor with its fix, and the late "run exceeded run_timeout" error then
    landed on top of that run's verdict, showing error until the next slot."""
    with _hung_daemon(tmp_path, run_timeout="3s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        recording, recorded = threading.Event(), threading.Event()
        original = runner.abandon

        def abandon(*args: Any, **kwargs: Any) -> Any:
            recording.set()
            recorded.wait(30)
            return original(*args, **kwargs)

        runner.abandon = abandon  # type: ignore[method-assign]
        assert recording.wait(30)
        path.write_text(path.read_text().replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True
        ran_before = _run_due(daemon)
        recorded.set()
        first.join(30)
        runner.abandon = original  # type: ignore[method-assign]
        assert ran_before == []  # not before the timeout is recorded
        assert _run_due(daemon) == ["hung/rerun"]
        _ran_clean(runner, failures=None)


def test_a_monitor_removed_while_its_timeout_is_recorded_runs_once_added_back(
    tmp_path: Path,
) -> None:
    """A reload removed the monitor after its run's timeout path saw it configured and before
    the timeout was recorded: the record raised KeyError (no board entry), the run was never
    counted as abandoned, and the monitor added back never ran while that run hung. Now the
    removal's discard wins: nothing is recorded, and the monitor added back runs at once."""
    with _hung_daemon(tmp_path, run_timeout="2s") as (path, _, runner, daemon):
        text = path.read_text()
        original = runner.abandon

        def abandon(*args: Any, **kwargs: Any) -> Any:  # the removal lands here
            runner.abandon = original  # type: ignore[method-assign]
            path.write_text(_without_hung(text))
            reload = threading.Thread(target=daemon.reload)
            reload.start()
            reload.join(30)
            return original(*args, **kwargs)

        runner.abandon = abandon  # type: ignore[method-assign]
        daemon.run_monitor("hung")  # times out at 2s: raises nothing
        path.write_text(text.replace('"scores_hung"', '"scores"'))
        assert daemon.reload() is True
        assert _run_due(daemon) == ["hung/rerun"]
        _ran_clean(runner)


def test_a_slot_that_read_the_settings_before_a_reload_is_not_the_run_it_asked_for(
    tmp_path: Path,
) -> None:
    """A slot read the monitor's settings, then a reload replaced them before the slot's run
    started: that run (with the old run_timeout) counted as the run with the new settings, so
    the operator's fix (a longer run_timeout for a slow source) never ran until the next slot
    and the monitor showed the old timeout's error."""
    import time

    path, end = _two_monitor_world(tmp_path)
    config = load_config(path)
    slow = config.monitor("hung").scores.path

    class Slow(ParquetReader):  # over the old run_timeout (1s), under the new one (10s)
        def scores(self, spec: ScoreSpec, window: Window, **kw: Any) -> ScoreWindow:
            if spec.path == slow:
                time.sleep(2.5)
            return super().scores(spec, window, **kw)

    entered, reloaded = threading.Event(), threading.Event()

    def slot_source(m: Any) -> datetime:  # the slot computes its time after reading settings
        if m.name == "hung" and not entered.is_set():
            entered.set()
            reloaded.wait(30)
        return end

    runner = Runner(config, reader=Slow())
    daemon = Daemon(config, runner=runner, slot_source=slot_source)
    try:
        slot = threading.Thread(target=daemon.run_monitor, args=("hung",))
        slot.start()
        assert entered.wait(30)
        path.write_text(path.read_text().replace('run_timeout = "1s"', 'run_timeout = "10s"'))
        assert daemon.reload() is True
        reloaded.set()
        slot.join(30)  # abandoned at the old 1s
        assert "hung/rerun" in _run_due(daemon)
        assert daemon.wait_idle(30) == []
        _ran_clean(runner, failures=None)
    finally:
        daemon.http.stop()


def test_a_run_whose_monitor_is_removed_as_it_starts_is_no_unexpected_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reload removed the monitor between its slot's start and the runner reading its
    settings: the run raised KeyError, logged as the error "run failed unexpectedly" (what
    on-call looks for a bug by). It is a warning naming the removed monitor."""
    with _hung_daemon(tmp_path, run_timeout="20s") as (path, _, runner, daemon):
        reader = runner.reader
        assert isinstance(reader, HangOne)
        reader.release.set()
        text = path.read_text()
        original = runner.run

        def run(*args: Any, **kwargs: Any) -> Any:  # the removal lands as the run starts
            runner.run = original  # type: ignore[method-assign]
            path.write_text(_without_hung(text))
            reload = threading.Thread(target=daemon.reload)
            reload.start()
            reload.join(30)
            return original(*args, **kwargs)

        runner.run = run  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, logger="monitor"):
            daemon.run_monitor("hung")
        messages = [(r.levelname, r.getMessage()) for r in caplog.records]
        assert ("WARNING", "run of a removed monitor failed") in messages
        assert not [m for m in messages if m[0] == "ERROR"], messages


def test_a_timeout_recorded_after_a_reload_removed_a_run_that_just_ended_is_dropped(
    tmp_path: Path,
) -> None:
    """The run ended right at its run_timeout, after the timeout path saw the monitor
    configured; a reload then removed the monitor and added it back (fixed), and the new
    monitor ran. The reload discarded only runs still in flight, so the old timeout was then
    recorded on top of the new monitor's good verdict."""
    with _hung_daemon(tmp_path, run_timeout="2s") as (path, _, runner, daemon):
        text = path.read_text()
        original = runner.abandon
        reader = runner.reader
        assert isinstance(reader, HangOne)

        def abandon(*args: Any, **kwargs: Any) -> Any:
            runner.abandon = original  # type: ignore[method-assign]
            reader.release.set()  # the run ends just as its timeout fired
            assert daemon._inflight["hung"].done.wait(30)
            path.write_text(_without_hung(text))
            assert daemon.reload() is True
            path.write_text(text.replace('"scores_hung"', '"scores"'))
            assert daemon.reload() is True
            assert _run_due(daemon) == ["hung/rerun"]
            return original(*args, **kwargs)

        runner.abandon = abandon  # type: ignore[method-assign]
        daemon.run_monitor("hung")
        _ran_clean(runner)


def test_a_slot_skipped_behind_a_removed_monitors_run_is_no_failure_of_one_added_back(
    tmp_path: Path,
) -> None:
    """A slot found the run in flight and was about to record "previous run still in flight"
    when a reload removed the monitor and added it back (fixed), and the new monitor ran: the
    old slot's error landed on top of its good verdict."""
    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        original = runner.fail

        def fail(*args: Any, **kwargs: Any) -> Any:
            runner.fail = original  # type: ignore[method-assign]
            _remove_and_add_back(path, daemon)
            return original(*args, **kwargs)

        runner.fail = fail  # type: ignore[method-assign]
        daemon.run_monitor("hung")  # the slot behind the run in flight
        reader = runner.reader
        assert isinstance(reader, HangOne)
        reader.release.set()
        first.join(30)
        assert _run_due(daemon) == ["hung/rerun"]
        _ran_clean(runner)


def test_a_rerun_asked_for_while_a_rerun_executes_is_queued_not_dropped(tmp_path: Path) -> None:
    """Reload 1's rerun was executing (its run in flight) when reload 2 changed the monitor
    again; that run's end asked for another rerun under the same job id while the first was
    still an executing instance: APScheduler dropped it (max_instances), and reload 2's
    settings waited for the next slot. Here the first rerun's thread is held until the
    scheduler has taken the second."""
    from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_SUBMITTED, JobEvent

    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        text = path.read_text()
        taken = threading.Event()
        asked = threading.Event()

        def seen(event: JobEvent) -> None:
            if event.job_id == "hung/rerun" and asked.is_set():
                taken.set()

        daemon.scheduler.add_listener(seen, EVENT_JOB_SUBMITTED | EVENT_JOB_MAX_INSTANCES)
        original = daemon._kick

        def kick(name: str) -> None:
            original(name)
            if threading.current_thread().name.startswith("ThreadPoolExecutor"):
                asked.set()  # the first rerun's own end asked again
                taken.wait(10)

        daemon._kick = kick  # type: ignore[method-assign]
        scheduler = threading.Thread(target=daemon.scheduler.start, daemon=True)
        scheduler.start()
        try:
            path.write_text(text.replace('run_timeout = "60s"', 'run_timeout = "61s"'))
            assert daemon.reload() is True
            wait_for(lambda: daemon.in_flight("hung") or None, timeout=20, what="rerun 1")
            path.write_text(text.replace('run_timeout = "60s"', 'run_timeout = "62s"'))
            assert daemon.reload() is True
            reader = runner.reader
            assert isinstance(reader, HangOne)
            reader.release.set()
            wait_for(lambda: "hung" not in daemon._due or None, timeout=30, what="reload 2's run")
        finally:
            daemon.stop()
            scheduler.join(30)


@pytest.mark.parametrize("reset", [False, True])
def test_a_run_started_while_the_reload_reconfigures_leaves_the_rerun_due(
    tmp_path: Path, reset: bool
) -> None:
    """A slot started while the reload was reconfiguring the runner (after the reload drew
    its token, before the new settings were in force): it read the old settings, yet counted
    as the run with the new ones, so they never ran until the next slot; and with a setting
    that starts the state fresh, its old-settings verdict landed on the fresh state. It is
    no such run (the rerun runs), and with a reset its result is discarded."""
    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        reader = runner.reader
        assert isinstance(reader, HangOne)
        reader.release.set()
        daemon.run_monitor("hung")
        original = runner.reconfigure
        used: list[int] = []
        run = runner.run

        def counted(name: str, *args: Any, **kwargs: Any) -> Any:
            used.append(runner.config.monitor(name).drift.min_current_samples)
            return run(name, *args, **kwargs)

        def reconfigure(new: Any, **kw: Any) -> None:
            runner.reconfigure = original  # type: ignore[method-assign]
            daemon.run_monitor("hung")  # the slot, in the monitor's own executor
            original(new, **kw)

        runner.run = counted  # type: ignore[method-assign]
        runner.reconfigure = reconfigure  # type: ignore[method-assign,assignment]
        before = {s.monitor.name: s for s in runner.board.snapshot()}["hung"].runs_total
        edit = "drift.min_current_samples = 100000000" if reset else 'misfire_grace = "7s"'
        path.write_text(path.read_text().replace('name = "hung"', f'name = "hung"\n{edit}'))
        assert daemon.reload() is True
        assert _run_due(daemon) == ["hung/rerun"]
        assert used[-1] == (100000000 if reset else 200)  # the rerun ran the new settings
        snap = {s.monitor.name: s for s in runner.board.snapshot()}["hung"]
        assert snap.latest is not None
        if reset:  # the slot's old-settings verdict was dropped: the rerun's is the one
            assert snap.runs_total == before + 1
            assert snap.latest.verdict.state == "insufficient_data", snap.latest.verdict.reasons
        else:
            assert snap.runs_total == before + 2


def test_a_failed_runs_error_is_no_failure_of_the_monitor_added_back(tmp_path: Path) -> None:
    """A run raised outside the check and ended; before its "run failed unexpectedly" was
    recorded a reload removed the monitor and another added it back (fixed), and the new
    monitor ran: the old error landed on top of its good verdict."""
    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        reader = runner.reader
        assert isinstance(reader, HangOne)
        reader.release.set()
        original = runner.run

        def broken(*args: Any, **kwargs: Any) -> Any:
            runner.run = original  # type: ignore[method-assign]
            raise RuntimeError("a bug outside the check")

        configured = daemon._configured

        def removed_and_added_back(name: str) -> bool:
            daemon._configured = configured  # type: ignore[method-assign]
            _remove_and_add_back(path, daemon)
            assert _run_due(daemon) == ["hung/rerun"]
            return configured(name)

        runner.run = broken  # type: ignore[method-assign]
        daemon._configured = removed_and_added_back  # type: ignore[method-assign]
        daemon.run_monitor("hung")
        _ran_clean(runner)


def test_a_second_reload_that_leaves_a_due_monitor_unchanged_keeps_one_rerun(
    tmp_path: Path,
) -> None:
    """A reload changed the monitor (its state starting fresh) while its run was in flight;
    a second reload (the same file again) read its settings anew, equal but another object:
    the request held the first object, no run could match it, every run of the monitor was
    discarded as one of superseded settings and asked for the next: checks back to back,
    none recorded, until a reload changed the monitor again."""
    with _hung_daemon(tmp_path, run_timeout="60s") as (path, _, runner, daemon):
        first = _hung_run(daemon)
        text = path.read_text()
        edit = 'name = "hung"\ndrift.min_current_samples = 100000000'
        path.write_text(text.replace('name = "hung"', edit))
        assert daemon.reload() is True
        assert daemon.reload() is True  # SIGHUP twice: nothing changed
        reader = runner.reader
        assert isinstance(reader, HangOne)
        reader.release.set()
        first.join(30)
        assert _run_due(daemon) == ["hung/rerun"]
        assert "hung" not in daemon._due
        assert _run_due(daemon) == []  # no other
        snap = {s.monitor.name: s for s in runner.board.snapshot()}["hung"]
        assert snap.latest is not None
        assert snap.latest.verdict.state == "insufficient_data", snap.latest.verdict.reasons


def test_a_config_fifo_is_refused_and_a_later_reload_applies(tmp_path: Path) -> None:
    """A FIFO in place of the configuration (or a mount that hangs): the reload's read
    waited for ever holding the reload lock, so every later SIGHUP and the clock watcher
    (which takes it) hung with it. The file is read without waiting (a FIFO is refused), and
    read before the lock is taken."""
    path, end = _two_monitor_world(tmp_path)
    daemon = Daemon(load_config(path), slot_source=lambda m: end)
    try:
        good = path.read_text()
        path.unlink()
        os.mkfifo(path)
        with pytest.raises(ConfigError, match="not a regular file"):
            load_config(path)  # at once: no writer is waited for
        assert daemon.reload() is False
        path.unlink()
        first = good.index("[[monitors]]")
        path.write_text(good[: good.index("[[monitors]]", first + 1)])  # "demo" alone
        assert daemon.reload() is True
        assert [m.name for m in daemon.config.monitors] == ["demo"]
    finally:
        daemon.http.stop()


def test_a_reload_whose_read_outlasted_a_later_one_is_not_applied_over_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reloads read the file outside the lock: one whose read was slow (the older file) is
    not applied after a later reload applied the newer file."""
    import monitor.daemon as daemon_module

    path, end = _two_monitor_world(tmp_path)
    daemon = Daemon(load_config(path), slot_source=lambda m: end)
    real = load_config
    read, release = threading.Event(), threading.Event()
    old = real(path)

    def slow_once(p: Path) -> Any:
        if not read.is_set():
            read.set()
            release.wait(30)
            return old  # what the file held when this read began
        return real(p)

    monkeypatch.setattr(daemon_module, "load_config", slow_once)
    try:
        results: list[bool] = []
        slow = threading.Thread(target=lambda: results.append(daemon.reload()))
        slow.start()
        assert read.wait(30)
        good = path.read_text()
        first = good.index("[[monitors]]")
        path.write_text(good[: good.index("[[monitors]]", first + 1)])  # "demo" alone
        assert daemon.reload() is True
        release.set()
        slow.join(30)
        assert results == [False]
        assert [m.name for m in daemon.config.monitors] == ["demo"]
    finally:
        release.set()
        daemon.http.stop()


def _slow_store(config: Config, gate: threading.Event, saving: threading.Event) -> StateStore:
    """The daemon's state store whose saves from a check's thread hold until ``gate`` is set
    (a slow fsync), setting ``saving`` when one begins."""
    from monitor.verdict import MonitorState

    class SlowStore(StateStore):
        def save(self, name: str, state: MonitorState) -> None:
            if threading.current_thread().name.startswith("check:"):
                saving.set()
                gate.wait(30)
            super().save(name, state)

    return SlowStore(config.server.state_dir, fingerprints=_prints(config))


def test_a_run_abandoned_while_it_saves_its_verdict_is_published_once(tmp_path: Path) -> None:
    """A run past its abandoned test when run_timeout passed (its save in a slow fsync) was
    abandoned and published both: the abandon's error landed, then the late save's verdict
    on top (the verdict flipped, the slot counted twice); in the other order the error, made
    from the state before the slot, put the state back a slot. A run publishing its verdict
    lets it stand; one abandoned first is discarded (as before)."""

    path, end = _two_monitor_world(tmp_path)
    config = load_config(path)
    gate, saving = threading.Event(), threading.Event()

    runner = Runner(config, store=_slow_store(config, gate, saving))
    daemon = Daemon(config, runner=runner, slot_source=lambda m: end)
    try:
        runner.run("demo", end - timedelta(hours=1))
        daemon.run_monitor("demo")  # returns once run_timeout passed twice: publishing
        assert saving.is_set()
        # not abandoned by the daemon either: a reload letting it go would run the slot again
        # beside its save
        assert not daemon._inflight["demo"].abandoned
        gate.set()
        assert daemon.wait_idle(30) == []
        snap = next(s for s in runner.board.snapshot() if s.monitor.name == "demo")
        assert snap.latest is not None
        assert snap.latest.verdict.state != "error"
        assert (snap.runs_total, snap.failures_total) == (2, 0)
        assert snap.state.last_at == end
        saved = json.loads((config.server.state_dir / "demo.json").read_text())
        assert (saved["state"], saved["last_at"]) == (snap.state.state, "2026-11-20T00:00:00Z")
    finally:
        gate.set()
        daemon.http.stop()


def test_a_reload_while_a_publishing_run_outlasts_its_wait_still_gets_its_rerun(
    tmp_path: Path,
) -> None:
    """A run whose save outlasts run_timeout twice is left in flight (publishing, not
    abandoned). A reload that changed the monitor meanwhile asked for a run with the new
    settings; nothing asked again once the save ended, and the new settings waited for the
    next slot (a day, for a daily monitor). The run's end kicks it."""

    path, end = _two_monitor_world(tmp_path)
    config = load_config(path)
    gate, saving, kicked = threading.Event(), threading.Event(), threading.Event()

    runner = Runner(config, store=_slow_store(config, gate, saving))
    daemon = Daemon(config, runner=runner, slot_source=lambda m: end)
    reruns: list[str] = []

    def rerun(name: str) -> None:
        reruns.append(name)
        kicked.set()

    daemon._schedule_rerun = rerun  # type: ignore[method-assign]
    try:
        runner.run("demo", end - timedelta(hours=1))
        daemon.run_monitor("demo")  # returns after twice run_timeout, the save still hangs
        assert saving.is_set()
        assert not daemon._inflight["demo"].abandoned
        path.write_text(path.read_text().replace('run_timeout = "1s"', 'run_timeout = "2s"', 1))
        assert daemon.reload() is True
        assert reruns == []  # busy: asked for once the run ends
        gate.set()
        assert kicked.wait(30)
        assert reruns == ["demo"]
    finally:
        gate.set()
        daemon.http.stop()


def _reset_reload(daemon: Daemon, path: Path) -> str:
    """Reload ``demo`` with a drift setting changed (its state starts fresh): the new print."""
    from monitor.store import state_fingerprint

    text = path.read_text()
    path.write_text(
        text.replace('run_timeout = "1s"', 'run_timeout = "1s"\ndrift.tolerance = 0.03', 1)
    )
    assert daemon.reload() is True
    return state_fingerprint(daemon.config.monitor("demo"))


def test_a_reload_that_resets_a_state_while_a_run_saves_keeps_the_fresh_state(
    tmp_path: Path,
) -> None:
    """A reload whose settings start the state fresh (drift.tolerance changed), landing while a
    run past run_timeout saves its verdict (publishing: neither abandoned nor let go): the
    run's record then put the old settings' state on the board on top of the fresh one, until
    the next run. A run discarded as it publishes records nothing; the file it saved carries
    the old fingerprint, which a start sets aside (``config_changed``)."""
    from monitor.report import HistoryStore

    path, end = _two_monitor_world(tmp_path)
    config = load_config(path)
    gate, saving = threading.Event(), threading.Event()

    history = HistoryStore(config.server.state_dir)
    runner = Runner(
        config,
        store=_slow_store(config, gate, saving),
        history=history,
    )
    daemon = Daemon(config, runner=runner, slot_source=lambda m: end)
    daemon._schedule_rerun = lambda name: None  # type: ignore[method-assign]
    try:
        runner.run("demo", end - timedelta(hours=1))
        before = len(history.entries("demo"))
        daemon.run_monitor("demo")  # returns after twice run_timeout, the save still hangs
        assert saving.is_set()
        fresh = _reset_reload(daemon, path)
        assert runner.board.state("demo").fingerprint == fresh
        gate.set()
        assert daemon.wait_idle(30) == []
        state = runner.board.state("demo")
        assert (state.fingerprint, state.last_at) == (fresh, None)
        assert len(history.entries("demo")) == before
    finally:
        gate.set()
        daemon.http.stop()
    restarted = Runner(daemon.config)
    assert restarted.board.state("demo").fingerprint == fresh
    assert restarted.board.state("demo").last_at is None


def test_a_reset_between_a_runs_discard_test_and_its_stamp_keeps_the_old_print(
    tmp_path: Path,
) -> None:
    """A reload that starts the state fresh, landing after a run passed its discard test but
    before it stamped its state: the stamp read the new settings' fingerprint, so the old
    settings' state was saved under it and a restart resumed it. A run stamps the prints of
    the settings it read: the file carries the old one, which a start sets aside."""
    from monitor.jobs import StateStore, _prints
    from monitor.verdict import MonitorState

    path, end = _two_monitor_world(tmp_path)
    config = load_config(path)
    gate, stamping = threading.Event(), threading.Event()
    runner = Runner(config, store=StateStore(config.server.state_dir, fingerprints=_prints(config)))
    calls = 0
    finite = runner._finite

    def held(name: str, at: datetime, state: MonitorState) -> MonitorState:
        nonlocal calls
        if threading.current_thread().name.startswith("check:"):
            calls += 1
            if calls == 2:  # the call between the discard test and the stamp
                stamping.set()
                gate.wait(30)
        return finite(name, at, state)

    runner._finite = held  # type: ignore[method-assign]
    daemon = Daemon(config, runner=runner, slot_source=lambda m: end)
    daemon._schedule_rerun = lambda name: None  # type: ignore[method-assign]
    try:
        runner.run("demo", end - timedelta(hours=1))
        daemon.run_monitor("demo")
        assert stamping.is_set()
        fresh = _reset_reload(daemon, path)
        gate.set()
        assert daemon.wait_idle(30) == []
        assert runner._published == set()  # settled: nothing kept for an abandon that never comes
    finally:
        gate.set()
        daemon.http.stop()
    restarted = Runner(daemon.config).board.state("demo")
    assert (restarted.fingerprint, restarted.last_at) == (fresh, None)


def test_runs_the_daemon_settled_leave_nothing_kept_for_an_abandon(tmp_path: Path) -> None:
    """A run's publishing mark was kept for a late abandon and evicted by the count of later
    runs (1,024): a save that hung through that many publishes was abandoned after all, its
    error on the board and its verdict in the file. The mark now lasts until the daemon has
    decided the run (in time, or its abandon answered): none is left once runs end."""
    path, end = _two_monitor_world(tmp_path)
    config = load_config(path)
    runner = Runner(config)
    daemon = Daemon(config, runner=runner, slot_source=lambda m: end)
    try:
        for _ in range(3):
            daemon.run_monitor("demo")
        assert daemon.wait_idle(30) == []
        assert runner.board.state("demo").last_at == end
        assert runner._published == set()
    finally:
        daemon.http.stop()


def test_a_slot_a_forward_step_passed_runs_once_whatever_the_scheduler_reported(
    tmp_path: Path,
) -> None:
    """A forward step past a slot and its misfire grace. The watcher ran a job the scheduler
    reported missed only when the report came before, or within two looks after, the look that
    saw the step: CI lost an hourly slot whose report came 28 ms after that look; a review lost
    slots dropped behind a check still running (reported as a run over its instances, not a
    miss), reports that came later, and a report a step back right after consumed. The step
    now queues a run of the slot on the monitor's worker, whatever the scheduler reported; a
    run of a slot already taken returns (an owed run beside the scheduler's own fire of a
    slot a small step passed ran it twice, and so did a reload changing the schedule while the
    slot was owed, three times); a step back before the slot or a reload drops it."""
    path, _ = _two_monitor_world(tmp_path)
    daemon = Daemon(load_config(path), slot_source=None)
    daemon._add_jobs()
    thread = threading.Thread(
        target=partial(daemon.scheduler.start, paused=True), daemon=True
    )  # no job runs; the jobs can be planned and looked at
    thread.start()
    try:
        wait_for(lambda: daemon.scheduler.running, timeout=30, what="the scheduler")
        schedule = daemon.config.monitor("demo").schedule
        now = datetime.now(UTC)
        before = schedule.latest_slot(now)
        wall = before + timedelta(hours=1, minutes=10)  # the clock after the step
        passed = schedule.latest_slot(wall)

        def owed(name: str) -> list[Any] | None:
            job = daemon.scheduler.get_job(f"{name}/owed")
            return None if job is None else list(job.args)

        daemon._clock_look(-4200.0, wall)  # no report from the scheduler at all
        assert owed("demo") == ["demo", False, passed]
        assert owed("hung") == ["hung", False, passed]
        daemon._clock_look(3.0, wall + timedelta(seconds=1))  # a small step back: still owed
        assert owed("demo") == ["demo", False, passed]
        daemon._clock_look(7200.0, wall - timedelta(minutes=50))  # back before the slot
        assert owed("demo") is None

        daemon._clock_look(-7200.0, wall)
        assert owed("demo") is not None
        assert owed("hung") is not None
        text = path.read_text()
        table = text.index('name = "demo"')
        path.write_text(
            text[:table] + text[table:].replace('schedule = "1h"', 'schedule = "2h"', 1)
        )
        assert daemon.reload() is True  # "demo" changed: its reload run takes the latest slot
        assert owed("demo") is None
        assert owed("hung") is not None

        # a run of a slot already taken returns without a run: an owed one, and the
        # scheduler's own fire of a slot an owed run took first
        daemon._handled["hung"] = passed
        daemon.run_monitor("hung", owed=passed)
        assert "hung" not in daemon._inflight
        current = schedule.latest_slot(datetime.now(UTC))
        daemon._handled["hung"] = current
        daemon.run_monitor("hung")
        assert "hung" not in daemon._inflight
        # after a step back a run takes an earlier slot than the last: the later one is run
        # again as the clock passes it (kept as taken, "the clock is behind" stood a whole
        # interval after the clock caught up)
        daemon._handled["hung"] = current + timedelta(hours=1)
        daemon.run_monitor("hung")
        assert daemon._handled["hung"] == current
        assert "hung" in daemon._inflight
    finally:
        daemon.scheduler.shutdown(wait=False)
        thread.join(30)
        daemon.http.stop()
