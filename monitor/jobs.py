"""The job runner: the one place that composes config -> sources -> stats -> verdict.

``Runner.run(name, at)`` reads the windows for slot ``at``, decides, updates the in-memory
``Board`` that the exporter and ``/status`` read, and (unless read-only) persists the monitor's
sequential state atomically (temp file + fsync + rename) in ``state_dir``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from monitor.config import Config, MonitorConfig
from monitor.errors import MonitorError, SourceError
from monitor.judged import judged_outcomes
from monitor.sources import (
    OutcomeSpec,
    OutcomeWindow,
    PairedOutcomes,
    ScoreSpec,
    ScoreWindow,
    Window,
    pair_outcomes,
    read_outcomes,
    read_run_times,
    read_scores,
)
from monitor.sources.model import _from_ns
from monitor.sources.model import _to_ns as _ns
from monitor.stats import BaselinePositions, DriftBaseline, build_baseline
from monitor.verdict import (
    CheckData,
    CheckDetail,
    JudgedCheck,
    MonitorState,
    Pairs,
    SegmentData,
    Verdict,
    describe,
    error_verdict,
    evaluate,
    phase_counts,
)

if TYPE_CHECKING:
    from monitor.report.history import HistoryStore

__all__ = [
    "FUTURE_SKEW",
    "RESET_REASONS",
    "Board",
    "DataReader",
    "Health",
    "MonitorSnapshot",
    "ParquetReader",
    "RunRecord",
    "Runner",
    "StateLoad",
    "StateStore",
    "check_windows",
    "state_fingerprint",
    "state_is_finite",
    "utc_now",
]

log = logging.getLogger("monitor")


def utc_now() -> datetime:
    """The wall clock, UTC (injected everywhere so tests and the demo can replace it)."""
    return datetime.now(UTC)


def check_windows(monitor: MonitorConfig, at: datetime) -> tuple[Window, Window]:
    """(reference, current) windows for slot ``at``.

    Current ``[at - current, at)``; reference rolling ``[cs - gap - reference, cs - gap)`` (``cs``
    the current start) or the fixed ``[reference_start, reference_end)``.
    """
    w = monitor.windows
    current = Window(start=at - w.current, end=at)
    if w.reference_start is not None and w.reference_end is not None:
        reference = Window(start=w.reference_start, end=w.reference_end)
    else:
        assert w.reference is not None
        end = current.start - w.gap
        reference = Window(start=end - w.reference, end=end)
    return reference, current


class DataReader(Protocol):
    """Where a runner gets its windows (parquet by default; the backtest slices a cache)."""

    def scores(self, spec: ScoreSpec, window: Window, *, with_timestamps: bool) -> ScoreWindow: ...

    def outcomes(self, spec: OutcomeSpec, window: Window) -> OutcomeWindow: ...

    def outcome_times(self, spec: OutcomeSpec, window: Window) -> np.ndarray:
        """Timestamps (int64 ns) of the outcome rows in ``window``, for splitting into runs."""
        ...

    def positions(
        self, spec: ScoreSpec, window: Window, segment: str, baseline: DriftBaseline
    ) -> BaselinePositions | None:
        """The current window's positions in a frozen ``baseline``, when the reader has them
        precomputed (the backtest's cache); None makes the verdict locate the scores itself."""
        ...


class ParquetReader:
    """Reads every window from parquet through ``monitor.sources``."""

    def scores(self, spec: ScoreSpec, window: Window, *, with_timestamps: bool) -> ScoreWindow:
        return read_scores(spec, window, with_timestamps=with_timestamps)

    def outcomes(self, spec: OutcomeSpec, window: Window) -> OutcomeWindow:
        if spec.judged is not None:
            return judged_outcomes(spec, window)
        return read_outcomes(spec, window)

    def outcome_times(self, spec: OutcomeSpec, window: Window) -> np.ndarray:
        return read_run_times(spec, window)

    def positions(
        self, spec: ScoreSpec, window: Window, segment: str, baseline: DriftBaseline
    ) -> BaselinePositions | None:
        return None


RESET_REASONS = (
    "unreadable",
    "not_a_file",
    "too_large",
    "encoding",
    "syntax",
    "shape",
    "non_finite",
    "future",
    "config_changed",
)
"""Why a monitor's sequential state was reset (the ``reason`` label of
``retrieval_monitor_state_resets_total``; a fixed set, so the label stays bounded)."""

FUTURE_SKEW = timedelta(minutes=5)
"""A state time later than the clock by more than this means the file cannot be trusted (a
``last_at`` in the future would switch the sequential alarms off until that date)."""

MAX_STATE_BYTES = 16 * 1024 * 1024
_TMP_NAME = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")


class _NonFinite(ValueError):
    pass


def _no_constant(text: str) -> float:
    raise _NonFinite(f"non-finite number {text} in the state file")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"number {text[:40]} overflows to {value}")
    return value


def state_fingerprint(monitor: MonitorConfig) -> str:
    """A short hash of the settings a monitor's sequential state depends on: schedule, windows,
    drift, decay and budget settings and the segment columns. A state file written under another
    fingerprint is set aside instead of resumed (reason ``config_changed``)."""
    doc = {
        "schedule": monitor.schedule.text,
        "windows": asdict(monitor.windows),
        "drift": asdict(monitor.drift),
        "decay": asdict(monitor.decay),
        "budget": asdict(monitor.budget),
        "segments": [monitor.scores.segment_column, monitor.outcomes.segment_column],
    }
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_is_finite(state: MonitorState) -> bool:
    """False when a sequential statistic is NaN or infinite (it could never recover)."""
    return all(
        math.isfinite(t.cusum) and t.cusum >= 0
        for seg in state.drift.values()
        for t in (seg.reference, seg.anchor)
    )


def _state_times(state: MonitorState) -> Iterator[tuple[str, datetime | None]]:
    yield from (
        ("last_at", state.last_at),
        ("last_run", state.last_run),
        ("last_success", state.last_success),
        ("state_since", state.state_since),
        ("decay.last_look_at", state.decay.last_look_at),
    )
    for segment, seg in state.drift.items():
        yield f"drift[{segment!r}].evidence_end", seg.evidence_end
        yield f"drift[{segment!r}].reference.active_since", seg.reference.active_since
        yield f"drift[{segment!r}].anchor.active_since", seg.anchor.active_since


@dataclass(frozen=True, slots=True)
class StateLoad:
    """What reading one state file gave: the state to start from and, when the file could not be
    used, the reset ``reason`` (one of ``RESET_REASONS``), a ``detail`` message and where the file
    was set aside (None when it was left in place: read-only store, or the rename failed)."""

    state: MonitorState
    reason: str | None = None
    detail: str | None = None
    aside: Path | None = None
    saved_at: datetime | None = None


class StateStore:
    """One JSON file per monitor in ``directory``, written atomically (temp file, fsync, rename,
    fsync of the directory).

    A file that cannot be trusted (see ``RESET_REASONS``) is never resumed and never crashes the
    caller: it is renamed ``<name>.json.corrupt-<UTC time>`` beside itself and logged with its
    reason, and the monitor starts from a fresh state. When even the rename fails (a read-only
    directory, a mount point), that is logged too and the file stays; the monitor runs on fresh
    in-memory state and every later save fails visibly until an operator moves it.

    ``readonly`` (``monitor check``): never writes, renames or creates anything; an unreadable
    file is logged and treated as empty state. ``fingerprints`` (monitor name -> fingerprint)
    and ``clock`` are the defaults ``load`` checks a file against.
    """

    def __init__(
        self,
        directory: Path,
        *,
        readonly: bool = False,
        clock: Callable[[], datetime] = utc_now,
        fingerprints: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.readonly = readonly
        self.clock = clock
        self.fingerprints = dict(fingerprints or {})

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def load(self, name: str) -> MonitorState:
        """The state to start ``name`` from (see ``read``)."""
        return self.read(name).state

    def read(
        self, name: str, *, fingerprint: str | None = None, now: datetime | None = None
    ) -> StateLoad:
        """Read and check ``name``'s file: a regular file of at most ``MAX_STATE_BYTES``, UTF-8,
        JSON without non-finite numbers, the version 1 shape, no time later than ``now`` +
        ``FUTURE_SKEW``, written under ``fingerprint`` (a file without one, from an older
        version, is adopted). Anything else is set aside (see the class docstring)."""
        fingerprint = fingerprint or self.fingerprints.get(name)
        now = now or self.clock()
        path = self.path(name)
        try:
            st = path.stat()
        except FileNotFoundError:
            return StateLoad(MonitorState(fingerprint=fingerprint))
        except OSError as exc:
            return self._reject(name, fingerprint, "unreadable", _os_error(exc))
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            return self._reject(name, fingerprint, "not_a_file", f"{path} is {kind}")
        if st.st_size > MAX_STATE_BYTES:
            detail = f"{st.st_size} bytes, more than {MAX_STATE_BYTES}"
            return self._reject(name, fingerprint, "too_large", detail)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            return self._reject(name, fingerprint, "unreadable", _os_error(exc))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return self._reject(name, fingerprint, "encoding", f"not UTF-8: {exc}")
        try:
            doc = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
        except _NonFinite as exc:
            return self._reject(name, fingerprint, "non_finite", str(exc))
        except (ValueError, RecursionError) as exc:
            detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            return self._reject(name, fingerprint, "syntax", f"not JSON: {detail}")
        try:
            state = MonitorState.from_dict(doc)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            return self._reject(name, fingerprint, "shape", f"{type(exc).__name__}: {exc}")
        if not state_is_finite(state):
            return self._reject(name, fingerprint, "non_finite", "a CUSUM is not finite")
        if fingerprint and state.fingerprint and state.fingerprint != fingerprint:
            detail = (
                f"written for settings {state.fingerprint}, the monitor now has {fingerprint} "
                f"(schedule, windows, drift, decay, budget or segments changed)"
            )
            return self._reject(name, fingerprint, "config_changed", detail)
        limit = now + FUTURE_SKEW
        for key, t in _state_times(state):
            if t is not None and t > limit:
                detail = f"{key} {t.isoformat()} is after now ({now.isoformat()})"
                return self._reject(name, fingerprint, "future", detail)
        saved_at = datetime.fromtimestamp(st.st_mtime, UTC)
        adopted = replace(state, fingerprint=fingerprint or state.fingerprint)
        return StateLoad(adopted, saved_at=saved_at)

    def _reject(self, name: str, fingerprint: str | None, reason: str, detail: str) -> StateLoad:
        path = self.path(name)
        fresh = MonitorState(fingerprint=fingerprint)
        fields = {"monitor": name, "path": str(path), "reason": reason, "error": detail}
        if self.readonly:
            log.error("state file unreadable; checking without sequential state", extra=fields)
            return StateLoad(fresh, reason, detail)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists() or aside.is_symlink():
            n += 1
            aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        try:
            path.rename(aside)
        except OSError as exc:
            log.error(
                "state file unreadable and could not be set aside; starting fresh without it "
                "(saves fail until it is moved)",
                extra={**fields, "rename_error": _os_error(exc)},
            )
            return StateLoad(fresh, reason, detail)
        log.error(
            "state file unreadable, kept aside and starting fresh",
            extra={**fields, "aside": str(aside)},
        )
        return StateLoad(fresh, reason, detail, aside)

    def sweep(self) -> int:
        """Remove temp files (``.<name>.<random>.tmp``) that interrupted saves left behind;
        returns how many. Never in a read-only store."""
        if self.readonly:
            return 0
        removed = 0
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return 0
        for entry in entries:
            if not _TMP_NAME.match(entry.name):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    os.unlink(entry.path)
                    removed += 1
            except OSError as exc:
                log.warning(
                    "stale temporary state file not removed",
                    extra={"path": entry.path, "error": _os_error(exc)},
                )
        if removed:
            log.info(
                "removed stale temporary state files",
                extra={"count": removed, "directory": str(self.directory)},
            )
        return removed

    def save(self, name: str, state: MonitorState) -> None:
        """Write ``state`` atomically; raises ``OSError`` (read-only or full disk, a directory
        in the way) or ``ValueError`` (a non-finite number) and leaves no temp file behind."""
        if self.readonly:
            raise PermissionError(f"state store {self.directory} is read-only (monitor check)")
        # compact: an anchor holds a few thousand counts, and a save needs room for two copies
        data = json.dumps(state.to_dict(), separators=(",", ":"), sort_keys=True, allow_nan=False)
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path(name))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        try:  # make the rename itself durable
            dir_fd = os.open(self.directory, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)


def _os_error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}{where}"
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished run: its verdict, when it ran (wall clock), how long, rows read.

    ``detail`` (a runner made with ``detail=True``): the binned arrays the monitor's page draws;
    ``history``: the monitor's check history after this run (oldest first; see
    ``monitor.report.history``), empty without a history store."""

    verdict: Verdict
    started: datetime
    duration_seconds: float
    rows_read: int = 0
    window_samples: Mapping[tuple[str, str], int] = field(default_factory=dict)
    detail: CheckDetail | None = None
    history: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class MonitorSnapshot:
    """What the exporter and ``/status`` show for one monitor.

    ``failures_total`` counts runs that ended in ``error`` and runs whose state could not be
    saved; ``save_failures_total``, ``last_state_save`` and ``save_error`` (the latest failed
    save's message, None once a save succeeds again) describe persistence; ``resets`` counts
    state resets by reason (every reason of ``RESET_REASONS``, zeros included).
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

    def reset(self, name: str, reason: str) -> None:
        """Count one reset of ``name``'s sequential state (``reason`` in ``RESET_REASONS``)."""
        if reason not in RESET_REASONS:
            raise ValueError(f"`reason` must be one of {RESET_REASONS}; got {reason!r}.")
        with self._lock:
            if name in self._resets:
                self._resets[name][reason] += 1

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
            f"degraded: state of monitor {name} not saved since "
            f"{since.isoformat().replace('+00:00', 'Z')}: {error}"
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
                )
                for name, m in self._monitors.items()
            ]


def _split_scores(window: ScoreWindow) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    ts = window.timestamps
    if window.segment_codes is None:
        return {"": (window.values, ts)}
    out = {}
    for code, name in enumerate(window.segment_names):
        mask = window.segment_codes == code
        if mask.any():
            out[name] = (window.values[mask], ts[mask] if ts is not None else None)
    return out


def _judged_check(
    monitor: MonitorConfig, ref: OutcomeWindow, cur: OutcomeWindow | None
) -> JudgedCheck | None:
    spec = monitor.outcomes.judged
    if spec is None or ref.judged is None:
        return None
    info = ref.judged
    return JudgedCheck(
        metric=info.metric,
        judged_metric=info.judged_metric,
        judged_tolerance=spec.judged_tolerance,
        condensed=info.condensed,
        reference=info,
        current=None if cur is None else cur.judged,
    )


def _pairs(p: PairedOutcomes) -> Pairs:
    return Pairs(
        reference=p.reference,
        current=p.current,
        only_reference=p.only_reference,
        only_current=p.only_current,
        query_ids=p.query_ids,
        extras={k: (v, p.current_extras[k]) for k, v in p.reference_extras.items()},
    )


@dataclass(frozen=True, slots=True)
class _Runs:
    count: int
    new: Window | None
    end: datetime | None
    newest: datetime | None


def _newest(*arrays: np.ndarray | None) -> datetime | None:
    for arr in arrays:
        if arr is not None and arr.size:
            return _from_ns(int(arr.max()))
    return None


def _empty_outcomes(like: OutcomeWindow, window: Window) -> OutcomeWindow:
    return replace(
        like,
        window=window,
        query_ids=like.query_ids[:0],
        segments=None if like.segments is None else like.segments[:0],
        outcomes=like.outcomes[:0],
        counts=like.counts[:0],
        rows=0,
        dropped_nan=0,
        dropped_inf=0,
        dropped_null_query=0,
        dropped_null=0,
        files_read=0,
        extras={},
        judged=None,
    )


_EMPTY = np.empty(0, dtype=np.float64)
_EMPTY_TS = np.empty(0, dtype=np.int64)


class Runner:
    """Runs checks: ``run(name, at)`` (daemon and backtest) and ``check(name, at)`` (read-only)."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], datetime] = utc_now,
        reader: DataReader | None = None,
        store: StateStore | None = None,
        board: Board | None = None,
        detail: bool = False,
        history: HistoryStore | None = None,
    ) -> None:
        self.config = config
        self.detail = detail
        self.history = history
        self.clock = clock
        self.reader: DataReader = reader or ParquetReader()
        self.store = (
            store
            if store is not None
            else StateStore(config.server.state_dir, clock=clock, fingerprints=_prints(config))
        )
        self._fingerprints = _prints(config)
        loads = {m.name: self._load(m) for m in config.monitors}
        if self._file_store:
            self.store.sweep()
        self.board = board or Board(config.monitors, {n: x.state for n, x in loads.items()})
        self._note_loads(loads)
        self._baselines: dict[
            tuple[str, str, datetime, datetime], tuple[DriftBaseline, np.ndarray]
        ] = {}
        self._locks = {m.name: threading.Lock() for m in config.monitors}
        self._abandoned: set[int] = set()
        # monitor -> (its latest look's runs and reference bounds, that look's pairs): the page
        # of a check that made no new look draws them (see _look_pairs)
        self._looks: dict[str, tuple[tuple[str, ...], dict[str, Pairs]]] = {}

    @property
    def _file_store(self) -> bool:
        """True for a ``StateStore`` that reads its own files (the backtest's in-memory store
        overrides ``load`` and has neither files to check nor temp files to sweep)."""
        return type(self.store).load is StateStore.load

    def _load(self, monitor: MonitorConfig) -> StateLoad:
        if not self._file_store:
            return StateLoad(self.store.load(monitor.name))
        fingerprint = self._fingerprints[monitor.name]
        return self.store.read(monitor.name, fingerprint=fingerprint, now=self.clock())

    def _note_loads(self, loads: Mapping[str, StateLoad]) -> None:
        for name, loaded in loads.items():
            if loaded.reason is not None:
                self.board.reset(name, loaded.reason)
            if loaded.saved_at is not None:
                self.board.saved(name, loaded.saved_at)

    def reconfigure(self, config: Config, *, reset: Iterable[str] = ()) -> None:
        """Switch to ``config`` (SIGHUP): monitors that are new are loaded from their state files
        (checked as at start-up), those named in ``reset`` (their state fingerprint changed)
        start fresh (counted as a ``config_changed`` reset; their last run and success times are
        kept), every other monitor keeps its in-memory state; removed ones leave the board."""
        old = {m.name for m in self.config.monitors}
        prints = _prints(config)
        self.config = config
        self._fingerprints = prints
        if self._file_store:
            self.store.fingerprints = dict(prints)
        states: dict[str, MonitorState] = {}
        loads: dict[str, StateLoad] = {}
        reset = set(reset)
        for m in config.monitors:
            self._locks.setdefault(m.name, threading.Lock())
            if m.name not in old:
                loads[m.name] = self._load(m)
                states[m.name] = loads[m.name].state
            elif m.name in reset:
                prior = self.board.state(m.name)
                states[m.name] = MonitorState(
                    fingerprint=prints[m.name],
                    last_run=prior.last_run,
                    last_success=prior.last_success,
                )
        self.board.reconfigure(config.monitors, states)
        self._note_loads(loads)
        for name in reset & old:
            if name in prints:
                self.board.reset(name, "config_changed")
                log.warning(
                    "state settings changed on reload; sequential state starts fresh",
                    extra={"monitor": name, "fingerprint": prints[name]},
                )

    # -- data -------------------------------------------------------------------------------

    def _read(
        self, monitor: MonitorConfig, at: datetime, state: MonitorState, *, detail: bool = False
    ) -> tuple[CheckData, int, dict[tuple[str, str], int]]:
        reference_w, current_w = check_windows(monitor, at)
        seasonal = monitor.seasonal_period is not None
        ref = self.reader.scores(monitor.scores, reference_w, with_timestamps=seasonal)
        cur = self.reader.scores(monitor.scores, current_w, with_timestamps=True)
        runs = self._runs(monitor, at, state)
        out_ref_w = reference_w
        if state.decay.active and state.decay.reference_start and state.decay.reference_end:
            # a raised decay is judged against the reference it was found against
            out_ref_w = Window(start=state.decay.reference_start, end=state.decay.reference_end)
        ref_out = self.reader.outcomes(monitor.outcomes, out_ref_w)
        if runs.new is not None:
            cur_out = self.reader.outcomes(monitor.outcomes, runs.new)
        else:
            cur_out = _empty_outcomes(ref_out, current_w)
        paired = pair_outcomes(ref_out, cur_out)
        ref_split = _split_scores(ref)
        cur_split = _split_scores(cur)
        pair_split = (
            paired.by_segment() if monitor.outcomes.segment_column is not None else {"": paired}
        )
        if runs.new is None:
            pair_split = {}
        names = sorted(set(ref_split) | set(cur_split) | set(pair_split))
        if monitor.scores.segment_column is not None and len(names) > monitor.max_segments:
            raise SourceError(
                f"{len(names)} distinct segments in this check exceed max_segments="
                f"{monitor.max_segments} (metric label cardinality is bounded)",
                path=monitor.scores.path,
                column=monitor.scores.segment_column,
                hint="raise max_segments or map rare segments to 'other' upstream",
            )
        fixed = monitor.windows.fixed_reference
        segments: dict[str, SegmentData] = {}
        if ref.values.size == 0 and cur.values.size == 0 and ref_out.query_ids.size == 0:
            names = []  # no data at all: the verdict reports it, with the window and freshness
        for name in names:
            ref_values, ref_ts = ref_split.get(name, (_EMPTY, None))
            cur_values, cur_ts = cur_split.get(name, (_EMPTY, _EMPTY_TS))
            baseline = None
            phases = None
            if fixed and ref_values.size >= monitor.drift.min_reference_samples:
                key = (monitor.name, name, reference_w.start, reference_w.end)
                cached = self._baselines.get(key)
                if cached is None:
                    baseline = build_baseline(ref_values, bins=monitor.drift.bins)
                    phases = phase_counts(
                        ref_values, ref_ts, baseline.edges, monitor.seasonal_period
                    )
                    self._baselines[key] = (baseline, phases)
                else:
                    baseline, phases = cached
            elif detail and ref_values.size >= monitor.drift.min_reference_samples:
                # the verdict would build this baseline itself; built here, the page's detail
                # reuses its sorted reference instead of sorting the window a second time
                baseline = build_baseline(ref_values, bins=monitor.drift.bins)
            positions = None
            if baseline is not None:
                positions = self.reader.positions(monitor.scores, current_w, name, baseline)
            pairs = pair_split.get(name)
            segments[name] = SegmentData(
                reference=ref_values,
                current=cur_values,
                current_timestamps=cur_ts if cur_ts is not None else _EMPTY_TS,
                pairs=_pairs(pairs)
                if pairs is not None
                else Pairs(reference=_EMPTY, current=_EMPTY),
                baseline=baseline,
                positions=positions,
                reference_timestamps=ref_ts,
                reference_phases=phases,
            )
        if runs.new is None:
            for name in list(segments):
                segments[name] = replace(
                    segments[name], pairs=Pairs(reference=_EMPTY, current=_EMPTY)
                )
        data = CheckData(
            current_start=current_w.start,
            current_end=current_w.end,
            reference_start=reference_w.start,
            reference_end=reference_w.end,
            segments=segments,
            newest_score=_newest(cur.timestamps, ref.timestamps),
            newest_outcome=runs.newest,
            reference_outcome_queries=int(ref_out.query_ids.size),
            current_outcome_queries=int(cur_out.query_ids.size) if runs.new else 0,
            runs=runs.count,
            runs_start=runs.new.start if runs.new else None,
            runs_end=runs.end,
            outcome_reference_start=out_ref_w.start,
            outcome_reference_end=out_ref_w.end,
            judged=_judged_check(monitor, ref_out, cur_out if runs.new else None),
        )
        rows = ref.rows + cur.rows + ref_out.rows + (cur_out.rows if runs.new else 0)
        samples = {
            ("scores", "reference"): int(ref.values.size),
            ("scores", "current"): int(cur.values.size),
            ("outcomes", "reference"): int(ref_out.query_ids.size),
            ("outcomes", "current"): int(cur_out.query_ids.size) if runs.new else 0,
        }
        return data, rows, samples

    def _runs(self, monitor: MonitorConfig, at: datetime, state: MonitorState) -> _Runs:
        """The complete evaluation runs in the lookback (``max(windows.current, outcomes.max_lag)``
        before ``at``) not looked at yet.

        Runs are the outcome timestamps split at gaps longer than ``decay.run_gap``; a run is
        complete once no outcome arrived for ``decay.settle`` before ``at``. Everything that
        landed after the previous look up to the end of the newest complete run is pooled into one
        window (runs closer together than ``run_gap``, e.g. hourly evaluations, merge into one
        cluster; the pooling is the same).
        """
        cfg = monitor.decay
        # far enough back to find the newest outcome for the freshness rule, and every run
        # that could have landed since the previous check
        lookback = max(monitor.windows.current, monitor.outcome_lag_limit)
        window = Window(start=at - lookback, end=at)
        times = self.reader.outcome_times(monitor.outcomes, window)
        if times.size == 0:
            return _Runs(count=0, new=None, end=None, newest=None)
        ts = np.sort(times)
        newest = _from_ns(int(ts[-1]))
        cuts = np.flatnonzero(np.diff(ts) > cfg.run_gap // timedelta(microseconds=1) * 1000)
        ends = np.concatenate((cuts, [ts.size - 1]))
        limit = _ns(at - cfg.settle)
        complete = [int(ts[b]) for b in ends if ts[b] <= limit]
        if not complete:
            return _Runs(count=0, new=None, end=None, newest=newest)
        last = complete[-1]
        seen = state.decay.runs_end
        # everything that landed after the previous look, up to the end of the newest complete
        # run (runs closer together than run_gap merge into one; the pooling is the same)
        floor = _ns(seen) if seen is not None else None
        fresh = ts[(ts <= last) & (ts > floor)] if floor is not None else ts[ts <= last]
        if fresh.size == 0:
            return _Runs(count=0, new=None, end=None, newest=newest)
        first = int(fresh[0])
        chosen = [b for b in ends if first <= ts[b] <= last]
        new = Window(start=_from_ns(first), end=_from_ns(last) + timedelta(microseconds=1))
        return _Runs(count=max(len(chosen), 1), new=new, end=_from_ns(last), newest=newest)

    # -- runs -------------------------------------------------------------------------------

    def decide(
        self, monitor: MonitorConfig, at: datetime, state: MonitorState, *, sequential: bool = True
    ) -> tuple[Verdict, MonitorState, int, dict[tuple[str, str], int]]:
        """Read and decide one slot; source and stats failures become an ``error`` verdict."""
        verdict, new_state, rows, samples, _ = self._decide(
            monitor, at, state, sequential=sequential, detail=False
        )
        return verdict, new_state, rows, samples

    def _decide(
        self,
        monitor: MonitorConfig,
        at: datetime,
        state: MonitorState,
        *,
        sequential: bool,
        detail: bool,
    ) -> tuple[Verdict, MonitorState, int, dict[tuple[str, str], int], CheckDetail | None]:
        """``decide``, and with ``detail`` the page's arrays (``verdict.describe``) too."""
        try:
            data, rows, samples = self._read(
                monitor, at, state if sequential else MonitorState(), detail=detail
            )
            verdict, new_state = evaluate(monitor, at, data, state, sequential=sequential)
            extra = None
            if detail:
                look = self._look_pairs(monitor, data, verdict)
                extra = describe(monitor, data, verdict, look_pairs=look)
        except MonitorError as exc:
            return error_verdict(monitor.name, at, str(exc)), state, 0, {}, None
        except (ValueError, ArithmeticError, MemoryError, OSError) as exc:
            log.exception("check failed", extra={"monitor": monitor.name, "at": at.isoformat()})
            message = f"{type(exc).__name__}: {exc}"
            return error_verdict(monitor.name, at, message), state, 0, {}, None
        return verdict, new_state, rows, samples, extra

    def _look_pairs(
        self, monitor: MonitorConfig, data: CheckData, verdict: Verdict
    ) -> dict[str, Pairs]:
        """The pairs of the look whose numbers the verdict carries, when this check made none.

        The carried report names the look's runs ``[runs_start, runs_end]`` and its reference
        window; reading them again gives the pairs the page draws. A failure to read them is
        logged and leaves the page without the strip (the verdict is unaffected). The pairs of
        a monitor's latest look are kept, so a daemon that checks hourly and looks daily reads
        them again at most once per look (after a restart), not at every check."""
        looks = {
            (r.runs_start, r.runs_end, r.reference_start, r.reference_end)
            for r in verdict.outcomes.values()
            if r.runs_start and r.runs_end and r.reference_start and r.reference_end
        }
        key = looks.pop() if len(looks) == 1 else None
        if any(seg.pairs.n for seg in data.segments.values()):
            if key is not None:
                self._looks[monitor.name] = (key, {n: s.pairs for n, s in data.segments.items()})
            return {}
        if key is None:
            return {}
        cached = self._looks.get(monitor.name)
        if cached is not None and cached[0] == key:
            return dict(cached[1])
        runs_start, runs_end, ref_start, ref_end = (_parse_time(t) for t in key)
        try:
            ref_out = self.reader.outcomes(monitor.outcomes, Window(start=ref_start, end=ref_end))
            cur_out = self.reader.outcomes(
                monitor.outcomes,
                Window(start=runs_start, end=runs_end + timedelta(microseconds=1)),
            )
            paired = pair_outcomes(ref_out, cur_out)
        except MonitorError as exc:
            log.warning(
                "the last look's pairs could not be read again for the page",
                extra={"monitor": monitor.name, "error": str(exc)},
            )
            return {}
        split = paired.by_segment() if monitor.outcomes.segment_column is not None else {"": paired}
        pairs = {name: _pairs(p) for name, p in split.items()}
        self._looks[monitor.name] = (key, pairs)
        return pairs

    def run(self, name: str, at: datetime | None = None, *, token: int | None = None) -> RunRecord:
        """One scheduled run of monitor ``name`` for slot ``at`` (default: the latest slot).

        Updates the board and persists the state, unless ``token`` was abandoned meanwhile (a run
        that exceeded its time limit must not overwrite what later runs decided). A state that
        could not be saved makes the run a failure (see ``_persist``) but keeps its verdict; a
        non-finite CUSUM is reset (reason ``non_finite``) instead of failing every later run.
        """
        monitor = self.config.monitor(name)
        with self._locks[name]:
            started = self.clock()
            at = at or monitor.schedule.latest_slot(started)
            t0 = time.perf_counter()
            prior = self._finite(name, at, self.board.state(name))
            sequential = prior.last_at is None or at >= prior.last_at
            verdict, new_state, rows, samples, detail = self._decide(
                monitor, at, prior, sequential=sequential, detail=self.detail
            )
            duration = time.perf_counter() - t0
            if not sequential:
                new_state = prior
            new_state = self._finite(name, at, new_state)
            new_state = self._stamp(new_state, prior, verdict, started, self._fingerprints[name])
            record = RunRecord(
                verdict=verdict,
                started=started,
                duration_seconds=duration,
                rows_read=rows,
                window_samples=samples,
                detail=detail,
            )
            if token is not None and token in self._abandoned:
                log.warning(
                    "late result of an abandoned run discarded",
                    extra={"monitor": name, "at": at.isoformat()},
                )
                return record
            error = self._persist(name, new_state)
            if error is not None:
                verdict = replace(verdict, reasons=(*verdict.reasons, f"state not saved: {error}"))
                record = replace(record, verdict=verdict)
                new_state = replace(new_state, last_success=prior.last_success)
            if self.history is not None:
                record = replace(record, history=self.history.append(name, verdict))
            self.board.record(record, new_state, failed=error is not None)
        log.info(
            "check",
            extra={
                "monitor": name,
                "at": at.isoformat(),
                "state": verdict.state,
                "duration_seconds": round(duration, 3),
                "rows_read": rows,
                "state_saved": error is None,
            },
        )
        return record

    def _finite(self, name: str, at: datetime, state: MonitorState) -> MonitorState:
        """``state``, or a fresh one (keeping the run and success times, counted as a
        ``non_finite`` reset) when a CUSUM is NaN or infinite: such a value can never recover
        and would fail or silence every later check."""
        if state_is_finite(state):
            return state
        log.error(
            "sequential state not finite; it starts fresh",
            extra={"monitor": name, "at": at.isoformat(), "reason": "non_finite"},
        )
        self.board.reset(name, "non_finite")
        return replace(
            MonitorState(),
            state=state.state,
            state_since=state.state_since,
            last_run=state.last_run,
            last_success=state.last_success,
            fingerprint=state.fingerprint,
        )

    def _persist(self, name: str, state: MonitorState) -> str | None:
        """Save ``state``; on failure log one line, count it on the board and return the
        error message (the caller makes the run a failure and does not advance last success)."""
        try:
            self.store.save(name, state)
        except (OSError, ValueError) as exc:
            error = _os_error(exc)
            log.error(
                "state not saved",
                extra={"monitor": name, "path": _store_path(self.store, name), "error": error},
            )
            self.board.save_failed(name, error, self.clock())
            return error
        self.board.saved(name, self.clock())
        return None

    def abandon(self, token: int, name: str, at: datetime, reason: str) -> RunRecord:
        """Mark a run that exceeded its limit as abandoned and record an ``error`` verdict."""
        self._abandoned.add(token)
        return self.fail(name, at, reason)

    def discard(self, token: int) -> None:
        """Drop the late result of run ``token`` without recording anything (SIGHUP changed
        or removed its monitor while it ran)."""
        self._abandoned.add(token)

    def fail(self, name: str, at: datetime, reason: str) -> RunRecord:
        """Record an ``error`` verdict for slot ``at`` without running (an abandoned run, or a
        slot skipped because the previous run is still in flight); the state is persisted."""
        started = self.clock()
        prior = self.board.state(name)
        verdict = error_verdict(name, at, reason)
        record = RunRecord(verdict=verdict, started=started, duration_seconds=0.0)
        new_state = self._stamp(prior, prior, verdict, started, self._fingerprints.get(name))
        self._persist(name, new_state)
        if self.history is not None:
            record = replace(record, history=self.history.append(name, verdict))
        self.board.record(record, new_state)
        return record

    @staticmethod
    def _stamp(
        state: MonitorState,
        prior: MonitorState,
        verdict: Verdict,
        started: datetime,
        fingerprint: str | None = None,
    ) -> MonitorState:
        since = prior.state_since if prior.state == verdict.state else started
        return replace(
            state,
            state=verdict.state,
            state_since=since,
            last_run=started,
            last_success=started if verdict.state != "error" else prior.last_success,
            fingerprint=fingerprint or state.fingerprint,
        )

    def check(self, name: str, at: datetime | None = None) -> Verdict:
        """One read-only check (``monitor check``); never writes the state.

        For the daemon's latest slot (``at == last_at``) it decides from the state as it was
        before that slot (``before_last``), so it reproduces the daemon's verdict; for a later
        slot it continues from the persisted state, as the daemon's next run will; for an earlier
        slot it decides without the sequential history (``sequential: false``).
        """
        return self._check(name, at, detail=False)[0]

    def check_detail(self, name: str, at: datetime | None = None) -> tuple[Verdict, CheckDetail]:
        """``check``, with the arrays the monitor's page draws (``monitor report``)."""
        verdict, detail = self._check(name, at, detail=True)
        return verdict, detail or CheckDetail(monitor=name, at=verdict.at)

    def _check(
        self, name: str, at: datetime | None, *, detail: bool
    ) -> tuple[Verdict, CheckDetail | None]:
        monitor = self.config.monitor(name)
        at = at or monitor.schedule.latest_slot(self.clock())
        prior = self.store.load(name)
        if prior.last_at is not None and at == prior.last_at and prior.before_last is not None:
            prior = prior.before_last
        sequential = prior.last_at is None or at >= prior.last_at
        verdict, _, _, _, extra = self._decide(
            monitor, at, prior, sequential=sequential, detail=detail
        )
        return verdict, extra


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _prints(config: Config) -> dict[str, str]:
    return {m.name: state_fingerprint(m) for m in config.monitors}


def _store_path(store: StateStore, name: str) -> str | None:
    try:
        return str(store.path(name))
    except TypeError:  # a store without files
        return None
