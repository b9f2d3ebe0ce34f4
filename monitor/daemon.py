"""The daemon (``monitor run``): the only module that imports apscheduler.

One APScheduler 3.x ``BlockingScheduler`` in UTC with one job per monitor: a run at start-up, then
one per schedule slot (a custom trigger asks ``monitor.schedule`` for slots, so the daemon,
``check`` and ``backtest`` agree on every slot), ``max_instances=1``, coalescing, an explicit
misfire grace.

**Isolation.** Each monitor has its own scheduler executor (one worker) and at most one run in
flight, in a thread of its own with a time limit. A run past ``run_timeout`` is abandoned
(recorded as ``error``; its late result is discarded). While it still hangs, that monitor's later
slots are recorded as ``error`` ("previous run still in flight since T") without starting another
run, so a hung source holds one thread of its own monitor and nothing of any other: healthy
monitors keep their cadence, and the thread count stays at most two per monitor plus the HTTP
server's. A reload that changes (or removes) a monitor whose run was abandoned lets it run again
at once with the new settings (the hung thread is left to end on its own: one more thread per
such reload).

**SIGHUP** re-reads and validates the configuration file: an invalid file is rejected with every
problem logged and the running configuration kept; otherwise unchanged monitors keep their state,
jobs and counters, changed ones are rescheduled (their sequential state starts fresh only when a
setting it depends on changed, see ``monitor.store.state_fingerprint``), added ones are loaded
from their state files and removed ones disappear from ``/metrics``. ``[server]`` settings take
effect at the next restart (logged).

**SIGTERM/SIGINT** stop the scheduler, wait up to ``shutdown_timeout`` for running checks and
persist every monitor's state atomically: ``serve`` returns 0 when every state was saved, 1 (with
one log line naming the monitors and errors) when one could not be.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from types import FrameType

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    EVENT_SCHEDULER_STARTED,
    JobExecutionEvent,
    SchedulerEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor as ApsThreadPool
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from monitor.board import Health, RunRecord
from monitor.config import Config, MonitorConfig, ServerConfig, keep_flagged, load_config
from monitor.epoch import rfc3339
from monitor.errors import ConfigError
from monitor.jobs import PUBLISHING, Runner
from monitor.report import HistoryStore
from monitor.schedule import Schedule
from monitor.server import HttpServer
from monitor.store import state_fingerprint, utc_now
from monitor.thresholds import load_thresholds, save_thresholds

__all__ = ["Daemon", "SlotTrigger"]

log = logging.getLogger("monitor.daemon")


def _block_stop_signals() -> None:
    """Block SIGTERM/SIGINT/SIGHUP in a worker thread, so the kernel delivers them to the main
    thread: a signal that lands in a worker is only flagged by Python, and a main thread asleep in
    the scheduler's wait would not run its handler until the next slot."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


class SlotTrigger(BaseTrigger):  # type: ignore[misc]
    """Fires at the slots of a ``monitor.schedule.Schedule``."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        after = previous_fire_time or now
        return self.schedule.next_slot(after)

    def __str__(self) -> str:
        return f"slots[{self.schedule.text}]"


@dataclass(slots=True)
class _Run:
    """One run in flight: its token, slot, start (wall clock) and outcome."""

    token: int
    at: datetime
    since: datetime
    done: threading.Event = field(default_factory=threading.Event)
    abandoned: bool = False
    record: RunRecord | None = None
    error: BaseException | None = None
    # its monitor was removed by a reload (its result discarded): a monitor added back under
    # the name waits for it without recording its slots or its timeout as failures
    orphaned: bool = False
    # still saving its verdict when run_monitor stopped waiting: its thread's end kicks a rerun
    unwatched: bool = False


@dataclass(frozen=True, slots=True)
class _Due:
    """A run a reload asked for: one that starts after ``token`` with ``settings`` (the object
    the reload installed) satisfies it; ``reset``: its state started fresh."""

    token: int
    settings: MonitorConfig
    reset: bool


_MAX_LET_GO = 3  # hung runs of one monitor let go by reloads, still hanging

#: how often the wall clock is compared with the monotonic one, and the backward step (in
#: seconds) that makes the scheduler plan its jobs again from the clock as it reads now
CLOCK_WATCH_SECONDS = 2.0
CLOCK_STEP_SECONDS = 1.0


def _iso(t: datetime) -> str:
    return rfc3339(t)


def _executor(name: str) -> str:
    return f"monitor:{name}"


def _job_id(name: str, kind: str) -> str:
    """A monitor's one-shot job (``rerun``, ``owed``): ``<name>/<kind>`` (names hold no '/')."""
    return f"{name}/{kind}"


def _job_monitor(job_id: str) -> tuple[str, str]:
    """(monitor, kind) of a job id: its schedule's job is the name alone (kind '')."""
    name, _, kind = job_id.partition("/")
    return name, kind


def notify_systemd(message: str) -> None:
    """Send ``message`` (``READY=1``, ``STOPPING=1``) to systemd's ``$NOTIFY_SOCKET`` (a
    ``Type=notify`` unit; unset elsewhere: nothing is sent). A failure is logged, never
    raised: the daemon serves whether or not its supervisor heard."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    target = "\0" + address[1:] if address.startswith("@") else address  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall(message.encode("ascii"))
    except OSError as exc:
        log.warning(
            "systemd not notified", extra={"message": message, "socket": address, "error": str(exc)}
        )


class Daemon:
    """Scheduler + HTTP server + time-limited, per-monitor runs around a ``Runner``.

    ``slot_source`` (the demo's simulated clock) replaces the wall-clock slot of each run (``None``
    from it skips the run); with ``tick`` the jobs fire every ``tick`` real seconds instead of on
    their schedule; ``on_run`` sees every finished run record.
    """

    def __init__(
        self,
        config: Config,
        *,
        runner: Runner | None = None,
        clock: Callable[[], datetime] = utc_now,
        slot_source: Callable[[MonitorConfig], datetime | None] | None = None,
        tick: timedelta | None = None,
        on_run: Callable[[RunRecord], None] | None = None,
    ) -> None:
        self.config = config
        # the alarm thresholds' cache: read before anything computes a plan, written when a run
        # learned a new one, so that one-shot `monitor check` processes need not search them
        self._thresholds_known = load_thresholds(config.server.state_dir)
        self._thresholds_lock = threading.Lock()
        self.runner = runner or Runner(
            config,
            clock=clock,
            detail=True,
            history=HistoryStore(
                config.server.state_dir,
                max_entries=config.report.history_max_entries,
                max_age=config.report.history_max_age,
                clock=clock,
            ),
        )
        self.slot_source = slot_source
        self.tick = tick
        self.on_run = on_run
        self.scheduler = BlockingScheduler(
            timezone=UTC, job_defaults={"coalesce": True, "max_instances": 1}
        )
        self.scheduler.add_listener(
            self._on_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES
        )
        self.scheduler.add_listener(self._on_started, EVENT_SCHEDULER_STARTED)
        self._shutdown_lock = threading.Lock()
        self._executors: dict[str, ApsThreadPool] = {}
        for m in config.monitors:
            self._add_executor(m.name)
        self._inflight: dict[str, _Run] = {}
        # runs a reload let go while they hang (their monitor changed): still waited for at exit
        self._let_go: list[tuple[str, _Run]] = []
        # monitors a reload changed or added, each with a token drawn before its new settings
        # were in force and those settings: one run that starts after it (token above it) with
        # them is due at once, or as soon as the run in flight ends or is abandoned (``_kick``),
        # not at the next slot
        # (and whether its state started fresh: a run of the old settings since is discarded)
        self._due: dict[str, _Due] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        # reloads in the order their reads began: one whose read outlasted a later one's is
        # not applied over it (the later read saw the newer file)
        self._reloads = itertools.count(1)
        self._applied_reload = 0
        self._stopping = threading.Event()
        self._handled: dict[str, datetime] = {}  # monitor -> the slot its last run took
        self._signals: queue.SimpleQueue[int] = queue.SimpleQueue()  # see _on_signal
        self.http = HttpServer(config.server, self.runner.board, self.healthy, report=config.report)

    # -- health -----------------------------------------------------------------------------

    def healthy(self) -> bool:
        """The scheduler is running and not shutting down (``/healthz`` 503 otherwise)."""
        return bool(self.scheduler.running) and not self._stopping.is_set()

    def health(self) -> Health:
        """``/healthz`` in full: ok, degraded (a state save failing; HTTP 200, body naming the
        monitors) or unavailable (HTTP 503); see ``monitor.board.Health``."""
        return self.runner.board.health(self.healthy())

    def _on_event(self, event: JobExecutionEvent) -> None:
        if event.code == EVENT_JOB_MISSED:
            log.warning("run missed its misfire grace", extra={"job": event.job_id})
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            self._skipped(_job_monitor(event.job_id)[0])  # its schedule, rerun or owed run
        else:
            log.error("job raised", extra={"job": event.job_id, "error": repr(event.exception)})

    def _skipped(self, name: str) -> None:
        """A slot the scheduler dropped because the monitor's job still waits for its previous
        run, which is within its ``run_timeout`` (a ``run_timeout`` at or past the interval
        lets a slow check run on): a warning naming the monitor and the run it waits for, not
        an error. That run is not known to hang until ``run_timeout``, when it is abandoned
        and recorded as ``error``, and every later slot finds it in flight (``error``)."""
        with self._lock:
            previous = self._inflight.get(name)
        extra: dict[str, str] = {"monitor": name}
        if previous is not None:
            extra.update(since=_iso(previous.since), waiting_for=_iso(previous.at))
        log.warning(
            "slot skipped: the monitor's previous run is still within its run_timeout",
            extra=extra,
        )

    # -- runs -------------------------------------------------------------------------------

    def in_flight(self, name: str) -> bool:
        """True while a run of monitor ``name`` (possibly abandoned) is still executing."""
        with self._lock:
            run = self._inflight.get(name)
            return run is not None and not run.done.is_set()

    def run_monitor(self, name: str, rerun: bool = False, owed: datetime | None = None) -> None:
        """One time-limited run (the scheduler's job function, in the monitor's own executor).

        Starts the run in a thread of its own unless the monitor's previous run is still in
        flight; then the slot is recorded as ``error`` without starting another. ``rerun``: the
        run a reload asked for (``_kick``); nothing to do when a run has started since.
        ``owed``: a slot a forward clock step passed (``_clock_look``); nothing to do when a run
        has taken it or a later one. A slot already taken is not taken again (an owed run and
        the scheduler's own fire of the same slot: whichever comes second returns).
        """
        if self._stopping.is_set():
            return
        try:
            monitor = self.config.monitor(name)
        except KeyError:  # removed by a reload after this slot fired
            return
        at = self.slot_source(monitor) if self.slot_source else None
        if self.slot_source is not None and at is None:
            return
        at = at or monitor.schedule.latest_slot(self.runner.clock())
        with self._lock:
            if rerun and name not in self._due:
                log.debug("a run with the new settings started already", extra={"monitor": name})
                return
            taken = self._handled.get(name)
            if (
                taken is not None
                and not rerun
                and self.slot_source is None
                and ((owed is not None and taken >= owed) or taken == at)
            ):
                log.info(
                    "slot already taken",
                    extra={"monitor": name, "at": at.isoformat(), "owed": owed is not None},
                )
                return
            # the slot this run takes: run, or recorded as skipped behind a run in flight (an
            # earlier one than the last after a clock step back: its slots are decided again as
            # the clock passes them, the one that says "the clock is behind" cleared)
            self._handled[name] = at
            previous = self._inflight.get(name)
            busy = previous is not None and not previous.done.is_set()
            if not busy:
                run = _Run(token=next(self._tokens), at=at, since=self.runner.clock())
                self._inflight[name] = run
                # a run with the new settings, not one that read the monitor's settings before
                # a reload replaced them (its run_timeout, its slot): the rerun still runs then
                due = self._due.get(name)
                if due is not None and due.token < run.token:
                    if due.settings is monitor:
                        del self._due[name]
                    elif due.reset:  # the old settings' state must not land on the fresh one
                        self.runner.discard(run.token)
        if busy:
            assert previous is not None
            if previous.orphaned:
                # the run of this name's removed predecessor: the monitor runs once it ends
                # (``_kick``); its slots meanwhile are no failure of this one
                log.warning(
                    "slot skipped: the run of a removed monitor of this name is still in flight",
                    extra={"monitor": name, "at": at.isoformat(), "since": _iso(previous.since)},
                )
                return
            reason = (
                f"previous run still in flight since {_iso(previous.since)} (slot "
                f"{_iso(previous.at)}; a source may hang); this slot was not run"
            )
            log.error(
                "slot skipped: previous run still in flight",
                extra={"monitor": name, "at": at.isoformat(), "since": _iso(previous.since)},
            )
            try:
                # nothing once a reload removed the monitor (a monitor added back under the
                # name: that run's slots are no failure of it); decided under the runner's
                # lock that the reload's discard takes, after which the run is orphaned
                self.runner.fail(name, at, reason, unless=lambda: previous.orphaned)
            except KeyError:  # a reload removed the monitor since this slot read it: none
                if self._configured(name):
                    raise
            return
        thread = threading.Thread(
            target=self._execute, args=(name, run), name=f"check:{name}", daemon=True
        )
        thread.start()
        try:
            self._watch(name, monitor, at, run)
        finally:  # decided: no abandon of this run comes
            self.runner.settle(run.token)

    def _watch(self, name: str, monitor: MonitorConfig, at: datetime, run: _Run) -> None:
        """Wait for ``run`` up to ``run_timeout``; abandon it past that (or let it finish when
        it is publishing its verdict), then report how it ended."""
        publishing = False
        if not run.done.wait(timeout=monitor.run_timeout.total_seconds()):
            try:
                if run.orphaned or not self._configured(name):
                    # removed by a reload meanwhile: nothing to record (a monitor added back
                    # under the name runs once this run is let go)
                    log.warning("run of a removed monitor abandoned", extra={"monitor": name})
                else:
                    reason = (
                        f"run exceeded run_timeout={monitor.run_timeout.total_seconds():g}s and "
                        f"was abandoned (a source may hang); its late result will be discarded"
                    )
                    ran = (self.runner.clock() - run.since).total_seconds()
                    # recorded before the run counts as abandoned: a reload lets an abandoned
                    # run go and runs the monitor at once, and this error must not land after
                    # that run (nothing is recorded once a reload discarded the run)
                    got = self.runner.abandon(run.token, name, at, reason, duration_seconds=ran)
                    publishing = got is PUBLISHING
                    if not publishing:
                        log.error("run abandoned", extra={"monitor": name, "at": at.isoformat()})
            finally:  # abandoned whatever the record did: a reload may let it go
                if not publishing:
                    with self._lock:
                        run.abandoned = True
                    self._kick(name)
            if not publishing:
                return
            # it ended as its limit passed and is saving its verdict: not abandoned (a reload
            # letting it go would run the slot again beside its save), it finishes as any run
            log.warning(
                "run past run_timeout while publishing its verdict; it stands",
                extra={"monitor": name, "at": at.isoformat()},
            )
            if not run.done.wait(timeout=monitor.run_timeout.total_seconds()):
                # its save hangs: in flight (the next slot says so); its end kicks a rerun
                with self._lock:
                    run.unwatched = True
                if run.done.is_set():  # it ended as it was marked: kicked by neither side
                    self._kick(name)
                return
        if run.error is not None:
            removed = run.orphaned or not self._configured(name)
            # a reload that removed the monitor as its run started: the run finds no settings
            # (KeyError), which is no failure of anything configured now
            (log.warning if removed else log.error)(
                "run of a removed monitor failed" if removed else "run failed unexpectedly",
                extra={"monitor": name, "at": at.isoformat(), "error": repr(run.error)},
            )
            if run.record is None and not removed:
                # it recorded nothing: show it (not once a reload discarded the run: removed
                # and added back meanwhile, the monitor is another one)
                self.runner.fail(
                    name,
                    at,
                    f"run failed unexpectedly: {run.error!r}",
                    unless=lambda: self.runner.discarded(run.token),
                )
        elif run.record is not None and self.on_run is not None:
            self.on_run(run.record)
        run.record = None  # the board holds it; kept here, each monitor ever run held a page's
        self._kick(name)

    def _kick(self, name: str) -> None:
        """Run ``name`` at once if a reload asked for a run with its new settings (``_due``)
        and no run of it is in flight: an abandoned run still in flight is let go first (at
        most ``_MAX_LET_GO`` hanging a monitor). Called by the reload, at the end of every run
        and when an abandoned run's thread ends, so whichever comes last finds the monitor free;
        the request is decided, and the run let go, under one hold of ``_lock``."""
        with self._lock:
            if name not in self._due or self._stopping.is_set():
                return
            run = self._inflight.get(name)
            busy = run is not None and not run.done.is_set()
            if busy and (not run.abandoned or not self._let_go_of(name)):  # type: ignore[union-attr]
                return  # it runs once that run ends or is abandoned (a later ``_kick``)
            # added under the lock: a reload that removes the monitor (its executor) meanwhile
            # drops the request first, or removes this job after it (APScheduler takes no lock
            # of ours while it holds its own)
            self._schedule_rerun(name)

    def _let_go_of(self, name: str) -> bool:
        """Let the abandoned run of ``name`` still in flight go (with ``_lock`` held): its
        thread is left to end on its own, its late result discarded, and the monitor may run
        again. At most ``_MAX_LET_GO`` such threads a monitor: each reload of a source that
        still hung once left one more behind; past the bound it is kept (the monitor waits
        for one to end; a restart ends them all), and the log says so. Whether it went."""
        hanging = sum(1 for m, r in self._let_go if m == name and not r.done.is_set())
        if hanging >= _MAX_LET_GO:
            log.error(
                "a hung run was not let go: the monitor's earlier hung runs still hang; "
                "it runs again once one ends, or after a restart",
                extra={"monitor": name, "hanging": hanging},
            )
            return False
        run = self._inflight.pop(name)
        self.runner.discard(run.token, name)
        self._let_go.append((name, run))
        return True

    def _schedule_rerun(self, name: str) -> None:
        """One run of ``name`` at once (a job of its own; the same id, so never two pending)."""
        log.info("running a reloaded monitor with its new settings", extra={"monitor": name})
        self._run_once(name, "rerun", [name, True], f"check {name} after a reload")

    def _run_once(self, name: str, kind: str, args: list[object], title: str) -> None:
        """A one-shot job ``<name>/<kind>`` of ``run_monitor(*args)`` at once, on the monitor's
        one worker (``replace_existing``: never two pending of one kind)."""
        self.scheduler.add_job(
            self.run_monitor,
            args=args,
            id=_job_id(name, kind),
            name=title,
            executor=_executor(name),
            next_run_time=datetime.now(UTC),
            replace_existing=True,
            misfire_grace_time=None,
            # one asked for while a run of the same kind still executes (a rerun at the end of
            # a rerun, an owed slot behind a check): queued behind it on the monitor's one
            # worker, never dropped as a second instance, which left the monitor to its next
            # slot
            max_instances=2,
        )

    def _configured(self, name: str) -> bool:
        return any(m.name == name for m in self.config.monitors)

    def _execute(self, name: str, run: _Run) -> None:
        _block_stop_signals()
        try:
            run.record = self.runner.run(name, run.at, token=run.token)
            with self._thresholds_lock:
                self._thresholds_known = save_thresholds(
                    self.config.server.state_dir, known=self._thresholds_known
                )
        except BaseException as exc:  # reported by run_monitor; never kills the thread silently
            run.error = exc
        finally:
            run.done.set()
        if run.abandoned or run.unwatched:
            # a rerun a reload asked for may wait on this run: a hung run kept past the let-go
            # bound, or one still saving its verdict when run_monitor stopped waiting for it
            self._kick(name)

    def wait_idle(self, timeout: float, *, abandoned: bool = True) -> list[str]:
        """Wait up to ``timeout`` s for every run in flight (without ``abandoned``: only for
        those not abandoned yet); the monitors still running."""
        deadline = time.monotonic() + timeout
        with self._lock:
            runs = [(n, r) for n, r in self._inflight.items() if abandoned or not r.abandoned]
            self._let_go = [(n, r) for n, r in self._let_go if not r.done.is_set()]
            if abandoned:  # a run let go still holds its thread (inside a source's call)
                runs += self._let_go
        for _, run in runs:
            run.done.wait(max(0.0, deadline - time.monotonic()))
        return sorted(name for name, run in runs if not run.done.is_set())

    # -- jobs -------------------------------------------------------------------------------

    def _add_executor(self, name: str) -> None:
        executor = ApsThreadPool(max_workers=1, pool_kwargs={"initializer": _block_stop_signals})
        self._executors[name] = executor
        self.scheduler.add_executor(executor, alias=_executor(name))

    def _remove_executor(self, name: str) -> None:
        executor = self._executors.pop(name, None)
        if executor is not None:
            self.scheduler.remove_executor(_executor(name), shutdown=False)
            executor.shutdown(wait=False)

    def _add_job(self, m: MonitorConfig, *, immediate: bool = True) -> None:
        trigger: BaseTrigger
        first: datetime | None
        if self.tick is not None:
            trigger = IntervalTrigger(seconds=self.tick.total_seconds(), timezone=UTC)
            first = self.runner.clock()
        else:
            trigger = SlotTrigger(m.schedule)
            first = datetime.now(UTC)
        if not immediate:
            first = trigger.get_next_fire_time(None, datetime.now(UTC))
        self.scheduler.add_job(
            self.run_monitor,
            trigger=trigger,
            args=[m.name],
            id=m.name,
            name=f"check {m.name}",
            executor=_executor(m.name),
            misfire_grace_time=max(1, int(m.misfire_grace.total_seconds())),
            next_run_time=first,
        )

    def _add_jobs(self) -> None:
        for m in self.config.monitors:
            if self.scheduler.get_job(m.name) is None:  # not added by a start-up reload
                self._add_job(m)

    def _remove_job(self, name: str) -> None:
        with contextlib.suppress(JobLookupError):
            self.scheduler.remove_job(name)

    # -- reload -----------------------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read the configuration file (SIGHUP); True when the new one was applied.

        Invalid: every problem is logged and the running configuration kept (False). Valid:
        see the module docstring. The file is read and checked before the reload lock is
        taken: a read that hangs (a mount gone away) holds no later reload, nor the clock
        watcher, which takes the same lock.
        """
        path = self.config.path
        if path is None:
            log.error("reload requested but the configuration was not read from a file")
            return False
        ticket = next(self._reloads)
        try:
            new = load_config(path)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("configuration problem", extra={"path": str(path), "problem": problem})
            log.error(
                "configuration reload rejected; the running configuration is kept",
                extra={"path": str(path), "problems": len(exc.problems)},
            )
            return False
        with self._reload_lock:
            if ticket < self._applied_reload:
                log.warning(
                    "configuration reload superseded by a later one; not applied",
                    extra={"path": str(path)},
                )
                return False
            self._applied_reload = ticket
            return self._apply(new)

    def _apply(self, new: Config) -> bool:
        new = keep_flagged(new, self.config)
        if new.server.web_config_file == self.config.server.web_config_file:
            # the web config file's content is read again at every request (``_WebState``):
            # an edit to it is in force already, not a setting for the next restart
            new = replace(new, server=replace(new.server, web=self.config.server.web))
        if new.server != self.config.server:
            changed = [
                f.name
                for f in fields(ServerConfig)
                if getattr(new.server, f.name) != getattr(self.config.server, f.name)
            ]
            log.warning(
                "[server] settings changed; they take effect at the next restart",
                extra={"settings": changed},
            )
            new = replace(new, server=self.config.server)
        old = {m.name: m for m in self.config.monitors}
        fresh = {m.name: m for m in new.monitors}
        added = [n for n in fresh if n not in old]
        removed = [n for n in old if n not in fresh]
        changed = [n for n in fresh if n in old and fresh[n] != old[n]]
        reset = [n for n in changed if state_fingerprint(fresh[n]) != state_fingerprint(old[n])]
        for n in added:
            self._add_executor(n)
        with self._lock:
            busy = {n for n in old if n in self._inflight and not self._inflight[n].done.is_set()}
            for n in set(removed) & busy:  # before the discard: see ``run_monitor``'s skip
                self._inflight[n].orphaned = True
            # a run of a removed monitor, or of one whose state starts fresh, must not write
            # its old-settings state afterwards, nor its timeout (one that just ended may still
            # be recording it: not only the runs in flight)
            for n in set(reset + removed) & set(self._inflight):
                self.runner.discard(self._inflight[n].token)
            # a run abandoned as hung no longer holds back a monitor whose settings changed
            # (the operator's fix: it once blocked every slot until a restart): let go (bounded)
            # (a changed monitor's is let go by ``_kick`` below, once its new settings are in)
            for n in set(removed) & busy:
                if self._inflight[n].abandoned and self._let_go_of(n):
                    busy.discard(n)
            # drawn before the new settings are in force, so that no run with them has a
            # smaller token: a changed or added monitor runs once at once, or once its run in
            # flight ends (a run that read the settings before they were replaced is none)
            version = next(self._tokens)
            for n in changed + added:
                self._due[n] = _Due(version, fresh[n], n in reset)
            for n, due in list(self._due.items()):
                if n in fresh and n not in changed and n not in added:
                    # asked for by an earlier reload, still due: its settings are the same but
                    # read again (another object), and a run matches the object it reads
                    self._due[n] = replace(due, settings=fresh[n])
            for n in removed:  # a removed monitor's finished run; a run asked for: none now
                self._due.pop(n, None)
                self._handled.pop(n, None)
                if n not in busy:
                    self._inflight.pop(n, None)
        self.runner.reconfigure(new, reset=reset)
        self.config = new
        with self._lock:  # runs let go that have ended
            self._let_go = [(n, r) for n, r in self._let_go if not r.done.is_set()]
        for n in removed:
            self._remove_job(n)
            self._remove_job(_job_id(n, "rerun"))
            self._remove_executor(n)
        for n in removed + changed + added:  # the reload's own run takes the latest slot
            self._remove_job(_job_id(n, "owed"))
        for n in changed:
            self._remove_job(n)
        for n in changed + added:
            # its slots from the next one; the run at once (or once the run of its name still
            # in flight ends: run at once, it found that run "still in flight" and recorded an
            # error, and the next slot may be a day away) is ``_kick``'s
            self._add_job(fresh[n], immediate=False)
            self._kick(n)
        log.info(
            "configuration reloaded",
            extra={
                "added": added,
                "removed": removed,
                "changed": changed,
                "state_reset": reset,
                "unchanged": [n for n in fresh if n in old and n not in changed],
            },
        )
        return True

    # -- lifecycle --------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The handler of SIGTERM, SIGINT and SIGHUP: it only queues the signal. Python runs a
        handler in the main thread between any two of its instructions, also inside a lock
        the handler would take (a thread's start, an ``Event``, a log stream): the handler
        that logged and started a thread itself once hung a daemon for good, on a SIGTERM
        and every signal after it. ``SimpleQueue.put`` is safe there; ``_signal_loop`` acts."""
        self._signals.put_nowait(signum)

    def _signal_loop(self) -> None:
        """Act on the signals ``_on_signal`` queued, in a thread of its own, until ``_finish``
        queues 0."""
        _block_stop_signals()
        while (signum := self._signals.get()) != 0:
            if signum == signal.SIGHUP:  # in a thread of its own: a stop never waits for it
                log.info("reloading the configuration", extra={"signal": "SIGHUP"})
                threading.Thread(target=self._reload_quietly, name="reload", daemon=True).start()
            else:
                log.info("stopping", extra={"signal": signal.Signals(signum).name})
                self._stopping.set()
                self._shutdown_scheduler()

    def _reload_quietly(self) -> None:
        try:
            self.reload()
        except Exception:  # a reload must never take the daemon down
            log.exception("configuration reload failed; the running configuration is kept")

    def _shutdown_scheduler(self) -> None:
        with self._shutdown_lock:  # the signal thread and the start listener may both ask
            if self.scheduler.running:
                with contextlib.suppress(SchedulerNotRunningError):
                    self.scheduler.shutdown(wait=False)

    def _on_started(self, event: SchedulerEvent) -> None:
        """A stop asked for while the scheduler was starting (a SIGTERM right after start-up:
        ``running`` was still false, so the stop shut nothing down and the daemon then ran
        with no checks, 503 on /healthz, until a second signal). ``_stopping`` is set before
        a stop looks at ``running``, and ``running`` before this is called, so one of the two
        shuts the scheduler down."""
        if self._stopping.is_set():
            self._shutdown_scheduler()

    def serve(
        self, *, install_signals: bool = True, reload_pending: Callable[[], bool] | None = None
    ) -> int:
        """Run until SIGTERM/SIGINT (or ``stop()``); the exit code: 0 when every monitor's state
        was saved at shutdown, 1 when one could not be. ``reload_pending``: whether a SIGHUP
        came during start-up, before this could handle it (then the file is read again before
        the first runs)."""
        if install_signals:
            threading.Thread(target=self._signal_loop, name="signals", daemon=True).start()
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
            signal.signal(signal.SIGHUP, self._on_signal)
        if reload_pending is not None and reload_pending():
            log.info("reloading the configuration", extra={"signal": "SIGHUP during start-up"})
            self._reload_quietly()  # its jobs are the first added (see _add_jobs)
        self.http.start()
        log.info(
            "started",
            extra={
                "listen": f"{self.config.server.host}:{self.http.port}",
                "monitors": [m.name for m in self.config.monitors],
            },
        )
        self._add_jobs()
        threading.Thread(target=self._watch_clock, name="clock", daemon=True).start()
        # systemd (Type=notify) holds a reload until now: a SIGHUP before the handlers above
        # once ended the process, for good (a death by SIGHUP is a clean exit to it)
        notify_systemd("READY=1")
        try:
            self.scheduler.start()
        finally:
            code = self._finish()
        return code

    def _watch_clock(self) -> None:
        """Plan every job again from the clock as it reads now when the wall clock steps (NTP,
        a VM restored or resumed, the RTC). The scheduler waits for each job's next time on
        the monotonic clock, for a wait it worked out on the old wall clock. A step back of two
        hours made the daemon silent for two hours, no run, no error, /healthz ok: planned
        again, the runs come, and a run whose slot is more than FUTURE_SKEW before the last one
        decided says "the clock is behind" (an ``error``). A step forward woke the scheduler
        the step late, past the slot and its misfire grace, and skipped it (a day, for a daily
        monitor): a job whose slot the step passed runs now (its latest slot, as after a
        restart), and the scheduler wakes to wait for the others on the new clock."""
        offset = time.time() - time.monotonic()
        while not self._stopping.wait(CLOCK_WATCH_SECONDS):
            now = time.time() - time.monotonic()
            step, offset = offset - now, now
            if self.scheduler.running:
                try:
                    self._clock_look(step, datetime.now(UTC))
                except Exception:  # the watcher must outlive a look that fails
                    log.exception("the clock watcher's look failed")

    def _clock_look(self, step: float, wall: datetime) -> None:
        """One look of ``_watch_clock``: ``step`` seconds the wall clock moved against the
        monotonic one since the last look (negative: forward), ``wall`` the clock now.

        A forward step makes each monitor whose latest slot it passed owe that slot: a run of
        it queued on the monitor's one worker (``_owe``), which ``run_monitor`` skips once a
        run has taken the slot or a later one. Watching the scheduler's reports instead lost
        slots: a miss reported after the look that saw the step (the scheduler had woken for
        another job first), a slot dropped behind a check still running, or a report consumed
        by a step back right after. A backward step plans every job again and drops owed
        slots the clock has not reached again.
        """
        if step < -CLOCK_STEP_SECONDS:
            log.warning(
                "the wall clock stepped forward; checks whose slot it passed run now",
                extra={"seconds": round(-step, 3), "now": _iso(wall)},
            )
            before = wall + timedelta(seconds=step)
            with self._reload_lock:  # a reload re-adds a changed job under the same id
                for m in self.config.monitors:
                    if self.slot_source is None and self.tick is None:
                        passed = m.schedule.latest_slot(wall)
                        if passed > m.schedule.latest_slot(before):
                            self._owe(m, passed)
                        continue
                    # a demo's own clock: its next slot, if the step passed it, runs now
                    with contextlib.suppress(JobLookupError):
                        job = self.scheduler.get_job(m.name)
                        if job is not None and job.next_run_time and job.next_run_time <= wall:
                            self.scheduler.modify_job(m.name, next_run_time=wall)
            self.scheduler.wakeup()
        elif step > CLOCK_STEP_SECONDS:
            log.warning(
                "the wall clock stepped back; the checks are planned again from it",
                extra={"seconds": round(step, 3), "now": _iso(wall)},
            )
            with self._reload_lock:  # a reload re-adds a changed job under the same id
                schedules = {m.name: m.schedule for m in self.config.monitors}
                for job in self.scheduler.get_jobs():
                    current = self.scheduler.get_job(job.id)  # its trigger now, not the snapshot's
                    if current is None:
                        continue
                    with contextlib.suppress(JobLookupError):  # removed since
                        if _job_monitor(current.id)[1] == "owed":
                            # an owed slot the clock has not reached again: dropped
                            name, slot = current.args[0], current.args[2]
                            schedule = schedules.get(name)
                            if schedule is None or slot > schedule.latest_slot(wall):
                                self.scheduler.remove_job(current.id)
                        else:
                            self.scheduler.reschedule_job(current.id, trigger=current.trigger)
            self.scheduler.wakeup()

    def _owe(self, monitor: MonitorConfig, slot: datetime) -> None:
        """A run of ``monitor``'s ``slot``, which a forward clock step passed (a job of its own
        on the monitor's one worker: behind a check still running, after the scheduler's own
        fire of the slot if it made one; ``run_monitor`` skips it once a run took the slot)."""
        log.warning(
            "a slot the wall clock's forward step passed runs now",
            extra={"monitor": monitor.name, "at": slot.isoformat()},
        )
        self._run_once(
            monitor.name,
            "owed",
            [monitor.name, False, slot],
            f"check {monitor.name}, a slot a clock step passed",
        )

    def stop(self) -> None:
        """Ask a serving daemon to stop (from another thread)."""
        self._stopping.set()
        self._shutdown_scheduler()

    def _finish(self) -> int:
        notify_systemd("STOPPING=1")
        self._signals.put_nowait(0)  # the signal loop ends
        # runs abandoned already stay abandoned; the others get shutdown_timeout to finish
        still = self.wait_idle(self.config.server.shutdown_timeout.total_seconds(), abandoned=False)
        if still:
            log.error(
                "checks abandoned at shutdown", extra={"count": len(still), "monitors": still}
            )
        for executor in list(self._executors.values()):
            executor.shutdown(wait=False)
        failed: dict[str, str] = {}
        for snap in self.runner.board.snapshot():
            name = snap.monitor.name
            try:
                self.runner.store.save(name, snap.state)
            except (OSError, ValueError) as exc:
                failed[name] = f"{type(exc).__name__}: {exc}"
        try:
            self.runner.summaries.close()  # a Dask cluster or Spark session the checks started
        except Exception:  # an engine that fails to stop must not cost the states saved above
            log.exception("an engine did not close cleanly")
        self.http.stop()
        if failed:
            log.error(
                "stopped; state NOT saved for %d monitor(s), the next start resumes from older "
                "state files",
                len(failed),
                extra={"errors": failed},
            )
            return 1
        log.info("stopped")
        return 0
