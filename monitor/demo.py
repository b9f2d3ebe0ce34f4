"""``monitor demo`` (``make run``): a synthetic world whose states change within a minute.

Writes 16 days of logs (top-1 scores with a point mass at zero; a 300-query golden set evaluated
daily) in which the query mix shifts towards hard queries on day 10 (data drift, outcomes flat) and
the ranker decays by 0.04 nDCG on day 13, plus its ``monitor.toml``; then runs the real daemon on
it with a simulated clock: each ``tick`` real seconds the next 3-hour slot from day 8 is checked,
so the console and ``/metrics`` show ``ok``, then ``data_drift``, then ``model_decay``.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import tomllib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from monitor.board import RunRecord
from monitor.config import MonitorConfig, load_config
from monitor.daemon import Daemon
from monitor.logs import configure_logging
from monitor.simulate import SCENARIOS, write_world
from monitor.store import DAEMON_LOCK, StateDirBusy, lock_state_dir

__all__ = [
    "DEMO_END",
    "DEMO_FIRST_SLOT",
    "DEMO_START",
    "DemoDirError",
    "demo_scenario",
    "run_demo",
]

#: the file that marks a directory as a demo world ``run_demo`` may replace
MARK = ".retrieval-monitor-demo"
#: what a demo world of a version before the mark holds (its state once the daemon ran)
_OLD_WORLD = {"monitor.toml", "scores", "outcomes", "state"}


class DemoDirError(ValueError):
    """``--dir`` names a directory that is not a demo world: it is left as it is."""


DEMO_START = datetime(2026, 11, 1, tzinfo=UTC)
DEMO_FIRST_SLOT = DEMO_START + timedelta(days=8)
DEMO_END = DEMO_START + timedelta(days=16)


def demo_scenario() -> object:
    """Drift on day 10, decay on day 13; modest traffic so a check takes a fraction of a second."""
    return replace(
        SCENARIOS["drift_and_decay"],
        name="demo",
        drift_start=timedelta(days=10),
        decay_start=timedelta(days=13),
        scores_per_hour=800.0,
    )


def run_demo(
    directory: Path,
    *,
    listen: str = "127.0.0.1:9464",
    tick: float = 0.3,
    seed: int = 7,
    log_level: str = "WARNING",
) -> int:
    """Write the world to ``directory`` (replacing an earlier demo world, never anything else:
    ``DemoDirError``) and serve it until Ctrl-C."""
    if not tick > 0 or tick == float("inf"):
        raise ValueError(f"`tick` must be a positive number of seconds; got {tick!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer; got {seed!r}.")
    configure_logging(log_level)
    # ticks that find the previous check still running are skipped on purpose here, and skip
    # no slot (``next_slot`` hands one out only when a run starts): neither the scheduler's
    # nor the daemon's warning that a slot was skipped is true of the demo (the daemon's is
    # dropped while it serves, below)
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    held = hold_demo_dir(directory)
    try:
        clear_demo_dir(directory)
        world = write_world(
            directory,
            demo_scenario(),  # type: ignore[arg-type]
            start=DEMO_START,
            end=DEMO_END,
            seed=seed,
            monitor_name="demo",
            schedule="3h",
            listen=listen,
        )
        (directory / MARK).write_text("a demo world: `monitor demo` replaces this directory\n")
        config = load_config(world.config_path)
        monitor = config.monitors[0]
        slots = monitor.schedule.slots(DEMO_FIRST_SLOT, DEMO_END)
        lock = threading.Lock()
        remaining = list(slots)
        last_state: list[str | None] = [None]

        def next_slot(_: MonitorConfig) -> datetime | None:
            with lock:
                return remaining.pop(0) if remaining else None

        def show(record: RunRecord) -> None:
            v = record.verdict
            i, o = v.input, v.outcome
            psi = f"PSI {i.psi:.3f}" if i and i.psi is not None else "PSI -"
            diff = (
                f"mean outcome diff {o.mean_difference:+.4f}"
                if o and o.mean_difference is not None
                else "mean outcome diff -"
            )
            marker = "  <== state changed" if v.state != last_state[0] else ""
            last_state[0] = v.state
            print(f"{v.at:%Y-%m-%d %H:%M}Z  {v.state:<17} {psi:<10} {diff}{marker}", flush=True)
            if not remaining and v.at == slots[-1]:
                print(
                    f"demo world replayed; still serving http://{listen}/metrics and /status "
                    f"(Ctrl-C to stop)",
                    flush=True,
                )

        print(
            f"demo world in {directory}/ (config {world.config_path}); serving http://{listen}/metrics\n"
            f"simulated clock: one 3-hour slot every {tick:g} s from {DEMO_FIRST_SLOT:%Y-%m-%d}; "
            f"query mix shifts on {DEMO_START + timedelta(days=10):%Y-%m-%d}, "
            f"the ranker decays on {DEMO_START + timedelta(days=13):%Y-%m-%d}",
            flush=True,
        )
        daemon = Daemon(config, slot_source=next_slot, tick=timedelta(seconds=tick), on_run=show)
        quiet, daemon_log = _NoSkippedSlots(), logging.getLogger("monitor.daemon")
        daemon_log.addFilter(quiet)
        try:
            return daemon.serve()
        finally:
            daemon_log.removeFilter(quiet)
    finally:
        if held is not None:
            os.close(held)  # the lock goes with it (a test runs several demos in a process)


class _NoSkippedSlots(logging.Filter):
    """Drops the daemon's warning that a tick found the previous run within its run_timeout
    (``Daemon._skipped``; see ``run_demo``); passes the rest, the error of a slot that a run
    still in flight made an ``error`` included."""

    MESSAGE = "slot skipped: the monitor's previous run is still within its run_timeout"

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING and record.getMessage() == self.MESSAGE)


def hold_demo_dir(directory: Path) -> int | None:
    """One demo a directory: its ``.daemon.lock`` (``store.lock_state_dir``) taken before the
    world is replaced, the descriptor returned (None: no lock could be taken, a warning
    says so). ``DemoDirError`` naming the pid of the demo that holds it (a second ``make
    run`` once replaced the running demo's world under it, then failed on the port they
    share), and for a directory that is not a demo world: nothing is touched then."""
    _check_demo_dir(directory)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        return lock_state_dir(directory)
    except StateDirBusy as exc:
        raise DemoDirError(
            f"{directory}: another demo runs in it (pid {exc.holder}); stop it, or give "
            "--dir another path"
        ) from None


def _check_demo_dir(directory: Path) -> list[Path]:
    """The entries of ``directory`` (none when it does not exist) but its lock, if it is a
    demo world or empty; ``DemoDirError`` otherwise (see ``clear_demo_dir``)."""
    if not directory.exists() and not directory.is_symlink():
        return []
    if directory.is_symlink() or not directory.is_dir():
        raise DemoDirError(f"{directory}: not a directory; give --dir a new or demo directory")
    entries = [p for p in directory.iterdir() if p.name != DAEMON_LOCK]
    names = {p.name for p in entries}
    if names and MARK not in names and not _old_demo_world(directory, names):
        shown = ", ".join(sorted(names)[:3])
        raise DemoDirError(
            f"{directory}: not a demo world (it holds {shown}, and no {MARK}); the demo "
            "replaces only its own directory: give --dir a new path"
        )
    return entries


def clear_demo_dir(directory: Path) -> None:
    """Empty ``directory`` (kept itself: it may be ``.``) when it is a demo world (its mark,
    or what a demo before the mark wrote: only its files, with the demo's own
    ``monitor.toml``); ``DemoDirError`` for anything else, and for a path that is not a
    directory, touching nothing. Its lock (``hold_demo_dir``) stays: the demo holding it
    goes on with it."""
    for entry in _check_demo_dir(directory):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _old_demo_world(directory: Path, names: set[str]) -> bool:
    """Whether ``directory`` holds a world an older demo wrote: nothing but its entries, and a
    ``monitor.toml`` whose only monitor is the demo's, reading ``scores`` and ``outcomes``
    next to it (a project's configuration and state are never taken for one)."""
    if not names <= _OLD_WORLD or not {"monitor.toml", "scores", "outcomes"} <= names:
        return False
    try:
        doc = tomllib.loads((directory / "monitor.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    monitors = doc.get("monitors")
    if not isinstance(monitors, list) or len(monitors) != 1 or not isinstance(monitors[0], dict):
        return False
    (m,) = monitors
    scores, outcomes = m.get("scores"), m.get("outcomes")
    return (
        m.get("name") == "demo"
        and isinstance(scores, dict)
        and isinstance(outcomes, dict)
        and scores.get("path") == "scores"
        and outcomes.get("path") == "outcomes"
    )
