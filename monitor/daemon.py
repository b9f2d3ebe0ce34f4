"""The daemon (``monitor run``): the only module that imports apscheduler.

One APScheduler 3.x ``BlockingScheduler`` in UTC with one job per monitor: a run at start-up, then
one per schedule slot (a custom trigger asks ``monitor.schedule`` for slots, so the daemon,
``check`` and ``backtest`` agree on every slot), ``max_instances=1``, coalescing, an explicit
misfire grace.
Each run executes in a worker thread with a time limit: a run past ``run_timeout`` is
abandoned
(recorded as ``error``; its late result is discarded), so a hung source cannot block later runs.
SIGTERM/SIGINT stop the scheduler, wait up to ``shutdown_timeout`` for running checks, persist every
monitor's state atomically and return exit code 0.
"""

from __future__ import annotations

import itertools
import logging
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor as ApsThreadPool
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from monitor.config import Config, MonitorConfig
from monitor.jobs import Runner, RunRecord, utc_now
from monitor.schedule import Schedule
from monitor.server import HttpServer

__all__ = ["Daemon", "SlotTrigger"]

log = logging.getLogger("monitor.daemon")


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


class Daemon:
    """Scheduler + HTTP server + time-limited runs around a ``Runner``.

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
        self.runner = runner or Runner(config, clock=clock)
        self.slot_source = slot_source
        self.tick = tick
        self.on_run = on_run
        self.scheduler = BlockingScheduler(
            timezone=UTC,
            executors={"default": ApsThreadPool(max_workers=max(1, len(config.monitors)))},
            job_defaults={"coalesce": True, "max_instances": 1},
        )
        self.scheduler.add_listener(self._on_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        self._pool = ThreadPoolExecutor(
            max_workers=max(2, 2 * len(config.monitors)), thread_name_prefix="check"
        )
        self._running: dict[int, Future[Any]] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.http = HttpServer(config.server, self.runner.board, self.healthy)

    def healthy(self) -> bool:
        """``/healthz``: the scheduler is running and not shutting down."""
        return bool(self.scheduler.running) and not self._stopping.is_set()

    def _on_event(self, event: JobExecutionEvent) -> None:
        if event.code == EVENT_JOB_MISSED:
            log.warning("run missed its misfire grace", extra={"job": event.job_id})
        else:
            log.error("job raised", extra={"job": event.job_id, "error": repr(event.exception)})

    def run_monitor(self, name: str) -> None:
        """One time-limited run (the scheduler's job function)."""
        if self._stopping.is_set():
            return
        monitor = self.config.monitor(name)
        at = self.slot_source(monitor) if self.slot_source else None
        if self.slot_source is not None and at is None:
            return
        at = at or monitor.schedule.latest_slot(self.runner.clock())
        token = next(self._tokens)
        future = self._pool.submit(self.runner.run, name, at, token=token)
        with self._lock:
            self._running[token] = future
        try:
            record = future.result(timeout=monitor.run_timeout.total_seconds())
            if self.on_run is not None:
                self.on_run(record)
        except FutureTimeout:
            reason = (
                f"run exceeded run_timeout={monitor.run_timeout.total_seconds():g}s and was "
                f"abandoned (a source may hang); its late result will be discarded"
            )
            log.error("run abandoned", extra={"monitor": name, "at": at.isoformat()})
            self.runner.abandon(token, name, at, reason)
        finally:
            with self._lock:
                self._running.pop(token, None)

    def _add_jobs(self) -> None:
        now = self.runner.clock()
        for m in self.config.monitors:
            trigger: BaseTrigger
            if self.tick is not None:
                trigger = IntervalTrigger(seconds=self.tick.total_seconds(), timezone=UTC)
            else:
                trigger = SlotTrigger(m.schedule)
            self.scheduler.add_job(
                self.run_monitor,
                trigger=trigger,
                args=[m.name],
                id=m.name,
                name=f"check {m.name}",
                misfire_grace_time=max(1, int(m.misfire_grace.total_seconds())),
                next_run_time=datetime.now(UTC) if self.tick is None else now,
            )

    def _request_stop(self, signum: int, frame: FrameType | None) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        self._stopping.set()
        # shutdown() takes the scheduler's lock: never from inside the signal handler itself
        threading.Thread(target=self._shutdown_scheduler, name="shutdown", daemon=True).start()

    def _shutdown_scheduler(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    def serve(self, *, install_signals: bool = True) -> int:
        """Run until SIGTERM/SIGINT (or ``stop()``); returns the exit code (0)."""
        if install_signals:
            signal.signal(signal.SIGTERM, self._request_stop)
            signal.signal(signal.SIGINT, self._request_stop)
        self.http.start()
        log.info(
            "started",
            extra={
                "listen": f"{self.config.server.host}:{self.http.port}",
                "monitors": [m.name for m in self.config.monitors],
            },
        )
        self._add_jobs()
        try:
            self.scheduler.start()
        finally:
            self._finish()
        return 0

    def stop(self) -> None:
        """Ask a serving daemon to stop (from another thread)."""
        self._stopping.set()
        self._shutdown_scheduler()

    def _finish(self) -> None:
        timeout = self.config.server.shutdown_timeout.total_seconds()
        with self._lock:
            pending = list(self._running.values())
        if pending:
            _, not_done = wait(pending, timeout=timeout)
            if not_done:
                log.error("checks abandoned at shutdown", extra={"count": len(not_done)})
        self._pool.shutdown(wait=False, cancel_futures=True)
        for snap in self.runner.board.snapshot():
            self.runner.store.save(snap.monitor.name, snap.state)
        self.http.stop()
        log.info("stopped")
