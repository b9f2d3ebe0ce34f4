"""The in-memory board of the latest run per monitor, which the exporter, ``/status``, the pages
and ``/healthz`` read."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from monitor.config import MonitorConfig
from monitor.epoch import rfc3339
from monitor.store import RESET_REASONS
from monitor.verdict import CheckDetail, MonitorState, Verdict

log = logging.getLogger("monitor")


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished run: its verdict, when it ran (wall clock), how long, rows read.

    ``detail`` (a runner made with ``detail=True``): the binned arrays the monitor's page draws;
    ``history``: the monitor's check history after this run (oldest first; see
    ``monitor.report.history``), empty without a history store. ``engine``: where the check's
    scores were summarised: ``memory`` (whole windows read into arrays) or the engine kind of a
    check through summaries (``local``, ``dask``, ``spark``; the latest one that ran)."""

    verdict: Verdict
    started: datetime
    duration_seconds: float
    rows_read: int = 0
    window_samples: Mapping[tuple[str, str], int] = field(default_factory=dict)
    detail: CheckDetail | None = None
    history: tuple[Mapping[str, Any], ...] = ()
    engine: str = "memory"


@dataclass(frozen=True, slots=True)
class MonitorSnapshot:
    """What the exporter and ``/status`` show for one monitor.

    ``failures_total`` counts runs that ended in ``error`` and runs whose state could not be
    saved; ``save_failures_total``, ``last_state_save`` and ``save_error`` (the latest failed
    save's message, None once a save succeeds again) describe persistence; ``resets`` counts
    state resets by reason (every reason of ``RESET_REASONS``, zeros included), ``reset_at``
    holds the latest of each reason that happened since start-up.
    """

    monitor: MonitorConfig
    latest: RunRecord | None
    state: MonitorState
    runs_total: int
    failures_total: int
    save_failures_total: int = 0
    last_state_save: datetime | None = None
    save_error: str | None = None
    resets: Mapping[str, int] = field(default_factory=dict)
    reset_at: Mapping[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Health:
    """What ``/healthz`` answers: ``status`` ``ok``, ``degraded`` (serving and checking, but some
    monitor's state could not be saved: HTTP 200, so a liveness probe does not restart a process
    whose disk a restart cannot fix) or ``unavailable`` (scheduler not running or stopping:
    HTTP 503). ``body`` is the plain-text answer, naming every degraded monitor."""

    status: str
    body: str

    @property
    def http_status(self) -> int:
        return 503 if self.status == "unavailable" else 200

    def __bool__(self) -> bool:
        return self.status != "unavailable"


class Board:
    """The latest immutable run records and counters, shared by the scheduler and the HTTP
    server (guarded by a lock; readers get a consistent snapshot)."""

    def __init__(
        self, monitors: Iterable[MonitorConfig], states: Mapping[str, MonitorState]
    ) -> None:
        self._lock = threading.Lock()
        self._monitors: dict[str, MonitorConfig] = {}
        self._latest: dict[str, RunRecord] = {}
        self._states: dict[str, MonitorState] = {}
        self._runs: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        self._save_failures: dict[str, int] = {}
        self._last_save: dict[str, datetime] = {}
        self._save_error: dict[str, tuple[str, datetime]] = {}
        self._resets: dict[str, dict[str, int]] = {}
        self._reset_at: dict[str, dict[str, datetime]] = {}
        self.reconfigure(monitors, states)

    def reconfigure(
        self, monitors: Iterable[MonitorConfig], states: Mapping[str, MonitorState]
    ) -> None:
        """Take a new set of monitors (SIGHUP): removed ones disappear with their counters,
        added ones start from ``states`` (or empty), kept ones keep their record and counters;
        a monitor named in ``states`` gets that state."""
        with self._lock:
            self._monitors = {m.name: m for m in monitors}
            for table in (
                self._latest,
                self._states,
                self._runs,
                self._failures,
                self._save_failures,
                self._last_save,
                self._save_error,
                self._resets,
                self._reset_at,
            ):
                for name in set(table) - set(self._monitors):
                    del table[name]
            for name in self._monitors:
                if name in states or name not in self._states:
                    self._states[name] = states.get(name, MonitorState())
                self._runs.setdefault(name, 0)
                self._failures.setdefault(name, 0)
                self._save_failures.setdefault(name, 0)
                self._resets.setdefault(name, dict.fromkeys(RESET_REASONS, 0))
                self._reset_at.setdefault(name, {})

    def record(self, run: RunRecord, state: MonitorState, *, failed: bool = False) -> None:
        """Publish a finished run (``failed``: counts as a failure whatever its verdict); a run
        of a monitor no longer configured is ignored."""
        name = run.verdict.monitor
        with self._lock:
            if name not in self._monitors:
                return
            self._latest[name] = run
            self._states[name] = state
            self._runs[name] += 1
            if failed or run.verdict.state == "error":
                self._failures[name] += 1

    def reset(self, name: str, reason: str, at: datetime | None = None) -> None:
        """Count one reset of ``name``'s sequential state (``reason`` in ``RESET_REASONS``) at
        ``at`` (default: now)."""
        if reason not in RESET_REASONS:
            raise ValueError(f"`reason` must be one of {RESET_REASONS}; got {reason!r}.")
        when = at if at is not None else datetime.now(UTC)
        with self._lock:
            if name in self._resets:
                self._resets[name][reason] += 1
                self._reset_at[name][reason] = when

    def saved(self, name: str, at: datetime) -> None:
        """A save of ``name``'s state succeeded at ``at`` (clears its save error)."""
        with self._lock:
            if name in self._monitors:
                self._last_save[name] = at
                self._save_error.pop(name, None)

    def save_failed(self, name: str, error: str, at: datetime) -> None:
        """A save of ``name``'s state failed with ``error`` at ``at``."""
        with self._lock:
            if name in self._monitors:
                self._save_failures[name] += 1
                since = self._save_error.get(name, (error, at))[1]
                self._save_error[name] = (error, since)

    def health(self, running: bool) -> Health:
        """``/healthz``: unavailable unless ``running``; degraded while a monitor's latest save
        failed (each named with its error and since when); else ok."""
        if not running:
            return Health("unavailable", "unavailable: scheduler not running\n")
        with self._lock:
            failing = sorted(self._save_error.items())
        if not failing:
            return Health("ok", "ok\n")
        lines = [
            f"degraded: state of monitor {name} not saved since {rfc3339(since)}: {error}"
            for name, (error, since) in failing
        ]
        return Health("degraded", "\n".join(lines) + "\n")

    def state(self, name: str) -> MonitorState:
        with self._lock:
            return self._states[name]

    def snapshot(self) -> list[MonitorSnapshot]:
        with self._lock:
            return [
                MonitorSnapshot(
                    monitor=m,
                    latest=self._latest.get(name),
                    state=self._states[name],
                    runs_total=self._runs[name],
                    failures_total=self._failures[name],
                    save_failures_total=self._save_failures[name],
                    last_state_save=self._last_save.get(name),
                    save_error=self._save_error[name][0] if name in self._save_error else None,
                    resets=dict(self._resets[name]),
                    reset_at=dict(self._reset_at[name]),
                )
                for name, m in self._monitors.items()
            ]


__all__ = ["Board", "Health", "MonitorSnapshot", "RunRecord"]
