"""The job runner: the one place that composes config -> sources -> stats -> verdict.

``Runner.run(name, at)`` reads the windows for slot ``at``, decides, updates the in-memory
``Board`` that the exporter and ``/status`` read, and (unless read-only) persists the monitor's
sequential state atomically (temp file + fsync + rename) in ``state_dir``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import numpy as np

from monitor.config import Config, MonitorConfig
from monitor.errors import MonitorError, SourceError
from monitor.sources import (
    OutcomeSpec,
    OutcomeWindow,
    PairedOutcomes,
    ScoreSpec,
    ScoreWindow,
    Window,
    pair_outcomes,
    read_outcomes,
    read_scores,
)
from monitor.stats import BaselinePositions, DriftBaseline, build_baseline
from monitor.verdict import (
    CheckData,
    MonitorState,
    Pairs,
    SegmentData,
    Verdict,
    error_verdict,
    evaluate,
    phase_counts,
)

__all__ = [
    "Board",
    "DataReader",
    "MonitorSnapshot",
    "ParquetReader",
    "RunRecord",
    "Runner",
    "StateStore",
    "check_windows",
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
        return read_outcomes(spec, window)

    def positions(
        self, spec: ScoreSpec, window: Window, segment: str, baseline: DriftBaseline
    ) -> BaselinePositions | None:
        return None


class StateStore:
    """One JSON file per monitor in ``directory``, written atomically; unreadable files are kept
    aside (renamed ``*.corrupt-<time>``) and logged, never silently dropped.

    ``readonly`` (``monitor check``): never writes, renames or creates anything; an unreadable
    file is logged and treated as empty state.
    """

    def __init__(self, directory: Path, *, readonly: bool = False) -> None:
        self.directory = directory
        self.readonly = readonly

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def load(self, name: str) -> MonitorState:
        path = self.path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return MonitorState()
        try:
            return MonitorState.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if self.readonly:
                log.error(
                    "state file unreadable; checking without sequential state",
                    extra={"monitor": name, "path": str(path), "error": str(exc)},
                )
                return MonitorState()
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            path.replace(aside)
            log.error(
                "state file unreadable, kept aside and starting fresh",
                extra={"monitor": name, "path": str(path), "aside": str(aside), "error": str(exc)},
            )
            return MonitorState()

    def save(self, name: str, state: MonitorState) -> None:
        if self.readonly:
            raise PermissionError(f"state store {self.directory} is read-only (monitor check)")
        self.directory.mkdir(parents=True, exist_ok=True)
        data = json.dumps(state.to_dict(), indent=1, sort_keys=True)
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


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished run: its verdict, when it ran (wall clock), how long, rows read."""

    verdict: Verdict
    started: datetime
    duration_seconds: float
    rows_read: int = 0
    window_samples: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MonitorSnapshot:
    """What the exporter and ``/status`` show for one monitor."""

    monitor: MonitorConfig
    latest: RunRecord | None
    state: MonitorState
    runs_total: int
    failures_total: int


class Board:
    """The latest immutable run records and counters, shared by the scheduler and the HTTP
    server (guarded by a lock; readers get a consistent snapshot)."""

    def __init__(
        self, monitors: Iterable[MonitorConfig], states: Mapping[str, MonitorState]
    ) -> None:
        self._lock = threading.Lock()
        self._monitors = {m.name: m for m in monitors}
        self._latest: dict[str, RunRecord] = {}
        self._states = {name: states.get(name, MonitorState()) for name in self._monitors}
        self._runs = dict.fromkeys(self._monitors, 0)
        self._failures = dict.fromkeys(self._monitors, 0)

    def record(self, run: RunRecord, state: MonitorState) -> None:
        name = run.verdict.monitor
        with self._lock:
            self._latest[name] = run
            self._states[name] = state
            self._runs[name] += 1
            if run.verdict.state == "error":
                self._failures[name] += 1

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


def _pairs(p: PairedOutcomes) -> Pairs:
    return Pairs(
        reference=p.reference,
        current=p.current,
        only_reference=p.only_reference,
        only_current=p.only_current,
        query_ids=p.query_ids,
    )


@dataclass(frozen=True, slots=True)
class _Runs:
    count: int
    new: Window | None
    end: datetime | None
    newest: datetime | None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(t: datetime) -> int:
    return (t - _EPOCH) // timedelta(microseconds=1) * 1000


def _from_ns(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


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
    ) -> None:
        self.config = config
        self.clock = clock
        self.reader: DataReader = reader or ParquetReader()
        self.store = store if store is not None else StateStore(config.server.state_dir)
        states = {m.name: self.store.load(m.name) for m in config.monitors}
        self.board = board or Board(config.monitors, states)
        self._baselines: dict[
            tuple[str, str, datetime, datetime], tuple[DriftBaseline, np.ndarray]
        ] = {}
        self._locks = {m.name: threading.Lock() for m in config.monitors}
        self._abandoned: set[int] = set()

    # -- data -------------------------------------------------------------------------------

    def _read(
        self, monitor: MonitorConfig, at: datetime, state: MonitorState
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
        """The complete evaluation runs in ``[at - windows.current, at)`` not looked at yet.

        Runs are the outcome timestamps split at gaps longer than ``decay.run_gap``; a run is
        complete once no outcome arrived for ``decay.settle`` before ``at``. The new runs are
        pooled into one window ``[first start, last end]``.
        """
        cfg = monitor.decay
        window = Window(start=at - monitor.windows.current, end=at)
        spec = ScoreSpec(
            path=monitor.outcomes.path,
            timestamp_column=monitor.outcomes.timestamp_column,
            score_column=monitor.outcomes.outcome_column,
            timestamp_unit=monitor.outcomes.timestamp_unit,
            max_invalid_share=1.0,
            prune_partitions=monitor.outcomes.prune_partitions,
        )
        times = self.reader.scores(spec, window, with_timestamps=True).timestamps
        if times is None or times.size == 0:
            return _Runs(count=0, new=None, end=None, newest=None)
        ts = np.sort(times)
        newest = _from_ns(int(ts[-1]))
        cuts = np.flatnonzero(np.diff(ts) > cfg.run_gap // timedelta(microseconds=1) * 1000)
        starts = np.concatenate(([0], cuts + 1))
        ends = np.concatenate((cuts, [ts.size - 1]))
        limit = _ns(at - cfg.settle)
        seen = state.decay.runs_end
        chosen = [
            (int(ts[a]), int(ts[b]))
            for a, b in zip(starts, ends, strict=True)
            if ts[b] <= limit and (seen is None or _from_ns(int(ts[b])) > seen)
        ]
        if not chosen:
            return _Runs(count=0, new=None, end=None, newest=newest)
        first, last = chosen[0][0], chosen[-1][1]
        new = Window(start=_from_ns(first), end=_from_ns(last) + timedelta(microseconds=1))
        return _Runs(count=len(chosen), new=new, end=_from_ns(last), newest=newest)

    # -- runs -------------------------------------------------------------------------------

    def decide(
        self, monitor: MonitorConfig, at: datetime, state: MonitorState, *, sequential: bool = True
    ) -> tuple[Verdict, MonitorState, int, dict[tuple[str, str], int]]:
        """Read and decide one slot; source and stats failures become an ``error`` verdict."""
        try:
            data, rows, samples = self._read(monitor, at, state if sequential else MonitorState())
            verdict, new_state = evaluate(monitor, at, data, state, sequential=sequential)
        except MonitorError as exc:
            return error_verdict(monitor.name, at, str(exc)), state, 0, {}
        except (ValueError, ArithmeticError, MemoryError, OSError) as exc:
            log.exception("check failed", extra={"monitor": monitor.name, "at": at.isoformat()})
            message = f"{type(exc).__name__}: {exc}"
            return error_verdict(monitor.name, at, message), state, 0, {}
        return verdict, new_state, rows, samples

    def run(self, name: str, at: datetime | None = None, *, token: int | None = None) -> RunRecord:
        """One scheduled run of monitor ``name`` for slot ``at`` (default: the latest slot).

        Updates the board and persists the state, unless ``token`` was abandoned meanwhile (a run
        that exceeded its time limit must not overwrite what later runs decided).
        """
        monitor = self.config.monitor(name)
        with self._locks[name]:
            started = self.clock()
            at = at or monitor.schedule.latest_slot(started)
            t0 = time.perf_counter()
            prior = self.board.state(name)
            sequential = prior.last_at is None or at >= prior.last_at
            verdict, new_state, rows, samples = self.decide(
                monitor, at, prior, sequential=sequential
            )
            duration = time.perf_counter() - t0
            if not sequential:
                new_state = prior
            new_state = self._stamp(new_state, prior, verdict, started)
            record = RunRecord(
                verdict=verdict,
                started=started,
                duration_seconds=duration,
                rows_read=rows,
                window_samples=samples,
            )
            if token is not None and token in self._abandoned:
                log.warning(
                    "late result of an abandoned run discarded",
                    extra={"monitor": name, "at": at.isoformat()},
                )
                return record
            self.board.record(record, new_state)
            self.store.save(name, new_state)
        log.info(
            "check",
            extra={
                "monitor": name,
                "at": at.isoformat(),
                "state": verdict.state,
                "duration_seconds": round(duration, 3),
                "rows_read": rows,
            },
        )
        return record

    def abandon(self, token: int, name: str, at: datetime, reason: str) -> RunRecord:
        """Mark a run that exceeded its limit as abandoned and record an ``error`` verdict."""
        self._abandoned.add(token)
        started = self.clock()
        prior = self.board.state(name)
        verdict = error_verdict(name, at, reason)
        record = RunRecord(verdict=verdict, started=started, duration_seconds=0.0)
        new_state = self._stamp(prior, prior, verdict, started)
        self.board.record(record, new_state)
        self.store.save(name, new_state)
        return record

    @staticmethod
    def _stamp(
        state: MonitorState, prior: MonitorState, verdict: Verdict, started: datetime
    ) -> MonitorState:
        since = prior.state_since if prior.state == verdict.state else started
        return replace(
            state,
            state=verdict.state,
            state_since=since,
            last_run=started,
            last_success=started if verdict.state != "error" else prior.last_success,
        )

    def check(self, name: str, at: datetime | None = None) -> Verdict:
        """One read-only check (``monitor check``): uses the persisted sequential state when
        ``at`` is not before the daemon's last slot, never writes it."""
        monitor = self.config.monitor(name)
        at = at or monitor.schedule.latest_slot(self.clock())
        prior = self.store.load(name)
        sequential = prior.last_at is None or at >= prior.last_at
        verdict, _, _, _ = self.decide(monitor, at, prior, sequential=sequential)
        return verdict
