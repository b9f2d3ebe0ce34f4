"""``monitor backtest``: replay the scheduled checks over historical logs, as the daemon runs them.

A replay is the daemon's own code path: ``Runner.run(name, at)`` for every slot
``schedule.slots(start, end)`` in order, so the windows, the sequential state carried from check to
check, the seeds and the frozen baseline of a fixed reference are those of the daemon. Only two
things are swapped in:

* a :class:`MemoryStore`, so the replay starts from an empty ``MonitorState`` and never writes the
  daemon's ``state_dir``;
* a :class:`CachedReader`, which reads the score log of every window a monitor needs in as few
  half-open spans as possible (one parquet read per span), sorts each span by timestamp once and
  answers each window by two ``searchsorted`` calls. Outcome windows are delegated to
  ``read_outcomes`` and memoised per window.

The runner's clock is the slot being replayed, so ``state_since`` and ``last_run`` are replay
times. Time in a state: the state of the check at ``t_k`` holds until the next check
``t_{k+1}``; the last one until ``end`` (so the hours add up to ``end - first slot``). A *drift
alarm* is a change into ``data_drift``, a *decay alarm* a change into ``model_decay`` (the first
check counts as a change from no state).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import shlex
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from monitor.config import Config, MonitorConfig
from monitor.epoch import from_ns as _from_ns
from monitor.epoch import rfc3339
from monitor.epoch import to_ns as _ns
from monitor.errors import MonitorError, ReplayRangeError, SourceNotFoundError
from monitor.incremental import SummaryChecks
from monitor.jobs import (
    DataReader,
    ParquetReader,
    Runner,
    RunRecord,
    StateStore,
    check_windows,
)
from monitor.report.history import MemoryHistory
from monitor.sources import (
    OutcomeSpec,
    OutcomeWindow,
    ScoreSpec,
    ScoreWindow,
    Window,
    judgments_version,
    latest_timestamp,
    read_scores,
)
from monitor.stats import BaselinePositions, DriftBaseline, baseline_positions
from monitor.verdict import STATES, DecayTrack, MonitorState, Verdict

log = logging.getLogger("monitor.backtest")

# A replay of this many slots or more says so first (a 5-minute schedule's 30 days: 8,640
# slots, minutes of work, which a one-shot ``check --at`` would otherwise spend in silence)
_LONG_REPLAY = 500
# a long replay reads its windows a chunk of this (plus a reference span) of slots at a time
_CHUNK_MIN = timedelta(days=7)

__all__ = [
    "BacktestResult",
    "CachedReader",
    "CheckRow",
    "MemoryStore",
    "StateChange",
    "Summary",
    "backtest",
    "format_csv",
    "format_json",
    "format_text",
    "replay_check",
    "replay_record",
    "run_backtest_cli",
    "summarize",
]

_CSV_FIELDS = (
    "monitor",
    "at",
    "state",
    "psi",
    "ks_statistic",
    "outcome_mean_difference",
    "outcome_pvalue",
    "cusum",
)
# Words of a verdict reason that explain each state (``monitor.verdict._reasons``).
_STATE_WORDS = {"data_drift": "data drift", "model_decay": "model decay"}


def _iso(t: datetime | None) -> str | None:
    return None if t is None else rfc3339(t)


# --------------------------------------------------------------------------------------------
# State that never reaches the disk


class MemoryStore(StateStore):
    """A ``StateStore`` that keeps states in memory: loads start empty, saves never touch disk."""

    durable = False

    def __init__(self) -> None:  # no state_dir on purpose: nothing here may reach the disk
        self.states: dict[str, MonitorState] = {}

    def path(self, name: str) -> Path:
        raise TypeError(f"MemoryStore has no state file (asked for monitor {name!r})")

    def load(self, name: str) -> MonitorState:
        return self.states.get(name, MonitorState())

    def save(self, name: str, state: MonitorState) -> None:
        self.states[name] = state


# --------------------------------------------------------------------------------------------
# The caching reader


@dataclass(slots=True)
class _Span:
    """One cached span of a score source, sorted by timestamp (read lazily on first use).

    ``exact`` is False when the span read failed or dropped rows: per-window drop counts (and the
    ``BadValuesError`` a window may raise) cannot be rebuilt from it, so its windows are read from
    parquet one by one instead.
    """

    window: Window
    loaded: bool = False
    exact: bool = True
    values: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    timestamps: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    codes: npt.NDArray[np.int32] | None = None
    names: tuple[str, ...] = ()
    cuts: npt.NDArray[np.int64] | None = None
    cut_rows: npt.NDArray[np.intp] | None = None
    located: dict[str, _Located] = field(default_factory=dict)
    before: datetime | None = None  # the source's newest row, when it lies before the span
    identity: str = ""  # its files' digest as they were when it was read (taken before)


@dataclass(slots=True)
class _Located:
    """Positions in one frozen baseline of one segment's scores, per piece of a span (lazily).

    Piece j holds the span's rows ``[cut_rows[j], cut_rows[j + 1])``: the scores between two
    consecutive window boundaries, so every covered window is a run of whole pieces.
    """

    baseline: DriftBaseline
    pieces: dict[int, BaselinePositions] = field(default_factory=dict)


def _merge(windows: Iterable[Window]) -> list[Window]:
    """The union of ``windows`` as disjoint half-open spans (overlapping or touching ones join)."""
    spans: list[Window] = []
    for w in sorted(windows, key=lambda w: (w.start, w.end)):
        if spans and w.start <= spans[-1].end:
            if w.end > spans[-1].end:
                spans[-1] = Window(spans[-1].start, w.end)
        else:
            spans.append(w)
    return spans


def _newest_before(spec: ScoreSpec, start: datetime) -> datetime | None:
    """The source's newest timestamp if it lies before ``start`` (a feed that died before a
    replayed span), else None. The lookup reads the newest partition's footers, which the
    daemon at a replayed slot never saw: one that cannot be read (a file still being written
    today) is logged and taken as unknown, not as every replayed check's error;
    ``SourceNotFoundError`` (a glob that matches no file) is raised."""
    try:
        newest = latest_timestamp(spec)
    except SourceNotFoundError:
        raise
    except (MonitorError, OSError) as exc:
        log.warning(
            "the score source's newest row could not be looked up; a feed that stopped "
            "before the replayed span reads as never seen",
            extra={"path": str(spec.path), "error": str(exc)},
        )
        return None
    return newest if newest is not None and newest < start else None


def _readonly(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    arr.flags.writeable = False
    return arr


class CachedReader:
    """A ``DataReader`` that answers score windows from spans read once (see the module docstring).

    ``cover(spec, windows)`` declares the windows a replay will ask for; their union is read lazily,
    one ``read_scores(..., with_timestamps=True)`` per span, with ``max_invalid_share`` lifted so
    the read sees every window. A window is then the slice ``[searchsorted(ts, start, 'left'),
    searchsorted(ts, end, 'left'))`` of the span sorted by timestamp (a stable sort, skipped when
    the log is already in time order). The slice holds the same scores as a parquet read of the
    window, possibly in another order (every statistic of a check is order-free), as read-only
    views. ``rows`` is the slice length and ``files_read`` is 0.

    ``newest_timestamp`` is the newest cached timestamp before the window's end, or when the span
    holds none before it, the source's newest row if that lies before the span (a feed that
    died earlier; else ``None``; a lookup that fails, on a file still being written today, is
    logged and taken as ``None``), i.e. what the daemon would have seen as the freshest score
    had it run at that time, rather than the source's newest row today.

    Exactness fallbacks: a window outside every covered span, and every window of a span whose read
    failed or dropped rows (null, NaN, inf), are read from parquet by ``fallback`` exactly as the
    daemon reads them. Outcome windows are read by ``fallback`` and the last
    ``outcome_cache_size`` results are memoised (a fixed reference is read once).
    """

    def __init__(self, *, fallback: DataReader | None = None, outcome_cache_size: int = 8) -> None:
        if isinstance(outcome_cache_size, bool) or not isinstance(outcome_cache_size, int):
            raise TypeError(
                f"`outcome_cache_size` must be an integer >= 0; got {outcome_cache_size!r}."
            )
        if outcome_cache_size < 0:
            raise ValueError(
                f"`outcome_cache_size` must be an integer >= 0; got {outcome_cache_size!r}."
            )
        self.fallback: DataReader = fallback or ParquetReader()
        self.outcome_cache_size = outcome_cache_size
        self._spans: dict[ScoreSpec, list[_Span]] = {}
        self._outcomes: OrderedDict[tuple[OutcomeSpec, Window, str | None], OutcomeWindow] = (
            OrderedDict()
        )
        self._cuts: dict[ScoreSpec, set[int]] = {}
        self.span_reads = 0
        self.fallback_reads = 0

    def cover(self, spec: ScoreSpec, windows: Iterable[Window]) -> None:
        """Declare the score windows to be served from a cache of ``spec`` (merged into spans)."""
        windows = list(windows)
        known = [s.window for s in self._spans.get(spec, [])]
        merged = _merge([*known, *windows])
        old = {s.window: s for s in self._spans.get(spec, [])}
        self._spans[spec] = [old.get(w, _Span(window=w)) for w in merged]
        cuts = self._cuts.setdefault(spec, set())
        cuts.update(_ns(t) for w in windows for t in (w.start, w.end))
        for span in self._spans[spec]:  # new boundaries: pieces are cut again on next use
            span.cuts, span.cut_rows = None, None
            span.located.clear()

    def clear(self) -> None:
        """Drop every cached span and outcome window (frees the memory)."""
        self._spans.clear()
        self._outcomes.clear()
        self._cuts.clear()

    def _load(self, spec: ScoreSpec, span: _Span) -> None:
        span.loaded = True
        self.span_reads += 1
        try:
            # before the read: a file changed during it changes the next load's identity
            span.identity = self.fallback.identity(spec, span.window)
            # the window's files only: the source's newest row is looked up below
            read = read_scores(
                replace(spec, max_invalid_share=1.0),
                span.window,
                with_timestamps=True,
                newest=False,
            )
        except (MonitorError, OSError, ValueError):
            span.exact = False
            return
        if read.dropped or read.timestamps is None:
            span.exact = False
            return
        ts = read.timestamps
        values, codes = read.values, read.segment_codes
        if ts.size > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
            order = np.argsort(ts, kind="stable")
            ts, values = ts[order], values[order]
            codes = codes[order] if codes is not None else None
        span.timestamps = _readonly(ts)
        span.values = _readonly(values)
        span.codes = _readonly(codes) if codes is not None else None
        span.names = read.segment_names
        try:
            span.before = _newest_before(spec, span.window.start)
        except SourceNotFoundError:  # a glob that matches no file: the daemon's error
            span.exact = False

    def _span(self, spec: ScoreSpec, window: Window) -> _Span | None:
        """The covered span holding ``window`` (loaded on first use), if any."""
        span = next(
            (
                s
                for s in self._spans.get(spec, [])
                if s.window.start <= window.start and window.end <= s.window.end
            ),
            None,
        )
        if span is not None and not span.loaded:
            self._load(spec, span)
        return span

    def scores(
        self,
        spec: ScoreSpec,
        window: Window,
        *,
        with_timestamps: bool,
        cuts: Sequence[int] | None = None,
    ) -> ScoreWindow:
        span = self._span(spec, window)
        if span is None or not span.exact:
            self.fallback_reads += 1
            return self.fallback.scores(spec, window, with_timestamps=with_timestamps, cuts=cuts)
        ts = span.timestamps
        lo = int(np.searchsorted(ts, _ns(window.start), side="left"))
        hi = int(np.searchsorted(ts, _ns(window.end), side="left"))
        codes: npt.NDArray[np.int32] | None = None
        names: tuple[str, ...] = ()
        if span.codes is not None:
            codes, names = _compact(span.codes[lo:hi], span.names)
        # none cached before the window's end: a feed that died before the span still says when
        newest = span.before if hi == 0 else _from_ns(int(ts[hi - 1]))
        return ScoreWindow(
            window=window,
            values=span.values[lo:hi],
            timestamps=ts[lo:hi] if with_timestamps else None,
            segment_codes=codes,
            segment_names=names,
            rows=hi - lo,
            dropped_nan=0,
            dropped_inf=0,
            dropped_null=0,
            newest_timestamp=newest,
            files_read=0,
        )

    def identity(self, spec: ScoreSpec, window: Window) -> str:
        """A window inside a span holds what the span's read held: the span's files' digest as
        it was taken before that read (a span read again after ``clear`` takes it anew); any
        other window is read by ``fallback``, and its identity is the fallback's."""
        span = self._span(spec, window)
        if span is None or not span.exact:
            return self.fallback.identity(spec, window)
        return span.identity

    def positions(
        self, spec: ScoreSpec, window: Window, segment: str, baseline: DriftBaseline
    ) -> BaselinePositions | None:
        """Segment ``segment``'s scores of ``window`` located in ``baseline``, or ``None``.

        The runner asks for them with a frozen baseline (fixed reference). Each piece of the span
        (the rows between two consecutive boundaries of covered windows) is located once per
        baseline and segment (``baseline_positions``: one sort of the piece, one search of the
        reference); a window concatenates its pieces. ``None`` (the runner then uses the normal
        path) when the window is not served from a cached span, its ends are not boundaries of
        covered windows, or the segment is not in the span. Memory: 4 bytes per located score
        (8 when the reference has over 1e9 values).
        """
        span = self._span(spec, window)
        if span is None or not span.exact:
            return None
        code: int | None = None
        if span.codes is not None:
            if segment not in span.names:
                return None
            code = span.names.index(segment)
        elif segment:
            return None
        if span.cuts is None or span.cut_rows is None:
            lo_ns, hi_ns = _ns(span.window.start), _ns(span.window.end)
            inside = sorted(c for c in self._cuts.get(spec, set()) if lo_ns <= c <= hi_ns)
            span.cuts = np.asarray(inside, dtype=np.int64)
            span.cut_rows = np.searchsorted(span.timestamps, span.cuts, side="left")
        cuts, rows = span.cuts, span.cut_rows
        first = int(np.searchsorted(cuts, _ns(window.start)))
        last = int(np.searchsorted(cuts, _ns(window.end)))
        if (
            first >= cuts.size
            or last >= cuts.size
            or cuts[first] != _ns(window.start)
            or cuts[last] != _ns(window.end)
        ):
            return None
        located = span.located.get(segment)
        if located is None or located.baseline is not baseline:
            located = span.located[segment] = _Located(baseline=baseline)
        pieces = []
        for j in range(first, last):
            piece = located.pieces.get(j)
            if piece is None:
                lo, hi = int(rows[j]), int(rows[j + 1])
                values = span.values[lo:hi]
                if code is not None and span.codes is not None:
                    values = values[span.codes[lo:hi] == code]
                piece = located.pieces[j] = baseline_positions(baseline, values)
            pieces.append(piece)
        return BaselinePositions.concatenate(baseline, pieces)

    def outcome_times(self, spec: OutcomeSpec, window: Window) -> np.ndarray:
        """The outcome timestamps, read by ``fallback`` (the timestamp column only)."""
        return self.fallback.outcome_times(spec, window)

    def outcomes(self, spec: OutcomeSpec, window: Window) -> OutcomeWindow:
        """``fallback``'s outcomes of ``window``, memoised. Judged outcomes by the judgments
        version in force too: a version published during a replay otherwise left the old
        one's window in hand, and every later look an error ("the judgments changed while
        this check read them", read again from the memo)."""
        version = judgments_version(spec.judged) if spec.judged is not None else None
        key = (spec, window, version)
        hit = self._outcomes.get(key)
        if hit is not None:
            self._outcomes.move_to_end(key)
            return hit
        read = self.fallback.outcomes(spec, window)
        if self.outcome_cache_size:
            self._outcomes[key] = read
            while len(self._outcomes) > self.outcome_cache_size:
                self._outcomes.popitem(last=False)
        return read


def _compact(
    codes: npt.NDArray[np.int32], names: tuple[str, ...]
) -> tuple[npt.NDArray[np.int32], tuple[str, ...]]:
    """Keep the segment names present in ``codes`` (sorted names stay sorted) and renumber."""
    present = np.bincount(codes, minlength=len(names)) > 0 if codes.size else np.zeros(0, bool)
    if present.size == len(names) and bool(present.all()):
        return codes, names
    lut = np.cumsum(present, dtype=np.int32) - 1
    kept = tuple(n for n, p in zip(names, present.tolist(), strict=False) if p)
    return lut[codes] if codes.size else codes, kept


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True, slots=True)
class CheckRow:
    """One replayed check: its slot, state and headline numbers (``None`` when not computed).

    ``psi``, ``ks_statistic`` and ``cusum`` are those of the segment that sets the drift state
    (``Verdict.input``); ``outcome_mean_difference`` and ``outcome_pvalue`` (Holm-adjusted over
    segments, the one the decision uses) those of ``Verdict.outcome``. ``reason`` is the first
    reason that names the state (else the first reason).
    """

    at: datetime
    state: str
    psi: float | None = None
    ks_statistic: float | None = None
    outcome_mean_difference: float | None = None
    outcome_pvalue: float | None = None
    cusum: float | None = None
    reason: str = ""

    @classmethod
    def from_verdict(cls, verdict: Verdict) -> CheckRow:
        """The row of ``verdict``."""
        inp, out = verdict.input, verdict.outcome
        words = _STATE_WORDS.get(verdict.state)
        reason = next(
            (r for r in verdict.reasons if words is not None and words in r),
            verdict.reasons[0] if verdict.reasons else "",
        )
        return cls(
            at=verdict.at,
            state=verdict.state,
            psi=inp.psi if inp else None,
            ks_statistic=inp.ks_statistic if inp else None,
            outcome_mean_difference=out.mean_difference if out else None,
            outcome_pvalue=out.pvalue_adjusted if out else None,
            cusum=inp.cusum if inp else None,
            reason=reason,
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``checks[]`` object of ``--json`` (non-finite numbers become null)."""
        return {
            "at": _iso(self.at),
            "state": self.state,
            "psi": _finite(self.psi),
            "ks_statistic": _finite(self.ks_statistic),
            "outcome_mean_difference": _finite(self.outcome_mean_difference),
            "outcome_pvalue": _finite(self.outcome_pvalue),
            "cusum": _finite(self.cusum),
        }


def _finite(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


@dataclass(frozen=True, slots=True)
class StateChange:
    """A change of state at check ``at`` (``previous`` is ``None`` at the first check)."""

    at: datetime
    previous: str | None
    state: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"at": _iso(self.at), "from": self.previous, "to": self.state, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Summary:
    """Counts over a replay: alarms by kind, the first alarm, hours in each state.

    ``hours_in_state[s]``: sum over checks in state ``s`` of the time to the next check (the last
    check: to the replay's end); every state of ``monitor.verdict.STATES`` is a key.
    """

    checks: int
    drift_alarms: int
    decay_alarms: int
    first_alarm: datetime | None
    first_alarm_kind: str | None
    hours_in_state: Mapping[str, float]
    final_state: str | None
    segment_alarms: Mapping[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "checks": self.checks,
            "alarms": {"data_drift": self.drift_alarms, "model_decay": self.decay_alarms},
            "segment_alarms": None if self.segment_alarms is None else dict(self.segment_alarms),
            "first_alarm": _iso(self.first_alarm),
            "first_alarm_kind": self.first_alarm_kind,
            "hours_in_state": dict(self.hours_in_state),
            "final_state": self.final_state,
        }


def _changes(rows: Sequence[CheckRow]) -> tuple[StateChange, ...]:
    out: list[StateChange] = []
    previous: str | None = None
    for row in rows:
        if row.state != previous:
            out.append(
                StateChange(at=row.at, previous=previous, state=row.state, reason=row.reason)
            )
            previous = row.state
    return tuple(out)


def _raised(verdict: Verdict) -> tuple[frozenset[str], frozenset[str], bool]:
    """The segments whose input drift and decay gauges are 1 after ``verdict`` (its input and
    outcome reports' raised flags), and whether its score feed is stale."""
    decay = frozenset(s for s, o in verdict.outcomes.items() if o.decay)
    drift = frozenset(s for s, r in verdict.inputs.items() if r.drift)
    return drift, decay, verdict.feed_stale("score")


def segment_alarms(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """Alarms per segment, as the per-segment alerts would raise them: the times a segment's
    drift (``RetrievalDataDrift``) or decay (``RetrievalModelDecay``) condition goes from not
    holding (or no check yet) to holding. The conditions are the alerts' on the exporter's
    gauges: decay where the segment's decay is raised; drift where its drift is, unless the
    same segment has decay or the score feed is stale. An ``error`` check exports the alarms
    the state carries (those of the check before) and no staleness, so a drift that a stale
    feed held back holds again there. The alerts' ``for`` and ``keep_firing_for`` are not
    applied: with checks further apart than both (hourly checks, the mixin's defaults), each
    raise is one firing. Unlike the state's alarms, a segment's drift raised while another
    segment's decay sets the state counts."""
    drift: frozenset[str] = frozenset()  # the gauges
    decay: frozenset[str] = frozenset()
    alert_drift: frozenset[str] = frozenset()  # the alerts' conditions
    alert_decay: frozenset[str] = frozenset()
    counts = {"data_drift": 0, "model_decay": 0}
    for v in verdicts:
        stale = False
        if v.state != "error":
            drift, decay, stale = _raised(v)
        now_drift = frozenset() if stale else drift - decay
        counts["data_drift"] += len(now_drift - alert_drift)
        counts["model_decay"] += len(decay - alert_decay)
        alert_drift, alert_decay = now_drift, decay
    return counts


def summarize(
    rows: Sequence[CheckRow], end: datetime, verdicts: Sequence[Verdict] | None = None
) -> Summary:
    """Summarise replayed checks (in slot order) over ``[rows[0].at, end]``.

    Alarms are changes into ``data_drift`` / ``model_decay``; the state of check k lasts until
    check k+1, the last one until ``end`` (0 hours if ``end`` is not after it). With the
    checks' ``verdicts``, ``segment_alarms`` too (see :func:`segment_alarms`).
    """
    hours = dict.fromkeys(STATES, 0.0)
    for k, row in enumerate(rows):
        until = rows[k + 1].at if k + 1 < len(rows) else max(end, row.at)
        hours[row.state] = hours.get(row.state, 0.0) + (until - row.at) / timedelta(hours=1)
    changes = _changes(rows)
    alarms = [c for c in changes if c.state in _STATE_WORDS]
    return Summary(
        checks=len(rows),
        drift_alarms=sum(c.state == "data_drift" for c in alarms),
        decay_alarms=sum(c.state == "model_decay" for c in alarms),
        first_alarm=alarms[0].at if alarms else None,
        first_alarm_kind=alarms[0].state if alarms else None,
        hours_in_state=hours,
        final_state=rows[-1].state if rows else None,
        segment_alarms=None if verdicts is None else segment_alarms(verdicts),
    )


@dataclass(frozen=True, slots=True)
class BacktestResult:
    """The replay of one monitor over ``[start, end]``: every check, the changes, the summary.

    ``verdicts`` are the full verdicts, in slot order; ``seconds`` the wall time of the replay.
    """

    monitor: str
    start: datetime
    end: datetime
    checks: tuple[CheckRow, ...]
    changes: tuple[StateChange, ...]
    summary: Summary
    verdicts: tuple[Verdict, ...] = field(default=(), repr=False)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document of one monitor."""
        return {
            "monitor": self.monitor,
            "from": _iso(self.start),
            "to": _iso(self.end),
            "checks": [c.to_dict() for c in self.checks],
            "changes": [c.to_dict() for c in self.changes],
            "summary": self.summary.to_dict(),
        }


# --------------------------------------------------------------------------------------------
# The replay


class _ReplayClock:
    """The runner's clock during a replay: the slot being replayed."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _check_range(start: object, end: object) -> list[str]:
    problems = [
        f"`{name}` must be a timezone-aware datetime; got {value!r}."
        for name, value in (("start", start), ("end", end))
        if not isinstance(value, datetime) or value.tzinfo is None
    ]
    if not problems and isinstance(start, datetime) and isinstance(end, datetime) and start >= end:
        problems.append(f"`start` must be before `end`; got start={_iso(start)}, end={_iso(end)}.")
    return problems


def backtest(
    config: Config,
    start: datetime,
    end: datetime,
    *,
    monitors: Sequence[str] | None = None,
    reader: CachedReader | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    pages: Callable[[RunRecord, RunRecord | None, bool], None] | None = None,
) -> list[BacktestResult]:
    """Replay every slot in ``[start, end]`` of each monitor (default: all) as the daemon would.

    Each monitor starts from an empty state; its checks run in slot order through one
    ``Runner`` (a :class:`MemoryStore`, ``reader`` or a fresh :class:`CachedReader`), and its
    cache is dropped before the next monitor. ``progress(monitor, done, total)`` is called after
    every check. ``pages(record, previous, last)``, when given, is called after every check with
    its record (with the page's detail and the replayed history) and the previous one (``last``:
    the final slot of the monitor). Raises ``ValueError`` for a bad range and ``KeyError`` for an
    unknown monitor.
    """
    problems = _check_range(start, end)
    if problems:
        raise ValueError(" ".join(problems))
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    chosen = [config.monitor(n) for n in monitors] if monitors else list(config.monitors)
    reader = reader or CachedReader()
    clock = _ReplayClock(start)
    runner = Runner(
        config,
        clock=clock,
        reader=reader,
        store=MemoryStore(),
        detail=pages is not None,
        history=_memory_history(config) if pages is not None else None,
        summaries=_summaries(config),
    )
    results = []
    for monitor in chosen:
        slots = monitor.schedule.slots(start, end)
        _cover(reader, config, monitor, slots)
        t0 = time.perf_counter()
        verdicts: list[Verdict] = []
        previous: RunRecord | None = None
        for k, at in enumerate(slots, 1):
            clock.now = at
            record = runner.run(monitor.name, at)
            verdicts.append(record.verdict)
            if pages is not None:
                pages(record, previous, k == len(slots))
                previous = record
            if progress is not None:
                progress(monitor.name, k, len(slots))
        reader.clear()
        rows = tuple(CheckRow.from_verdict(v) for v in verdicts)
        results.append(
            BacktestResult(
                monitor=monitor.name,
                start=start,
                end=end,
                checks=rows,
                changes=_changes(rows),
                summary=summarize(rows, end, verdicts),
                verdicts=tuple(verdicts),
                seconds=time.perf_counter() - t0,
            )
        )
    return results


def replay_check(
    config: Config,
    name: str,
    at: datetime,
    start: datetime,
    *,
    progress: Callable[[], None] | None = None,
    skipped: Sequence[tuple[datetime, datetime]] = (),
    origin: DecayTrack | None = None,
) -> Verdict:
    """The verdict of ``name`` at ``at`` with the sequential state rebuilt by replaying every
    slot in ``[start, at)`` first, as the daemon would have run them (``monitor check --at``),
    but those inside a span of ``skipped`` (the daemon's state's: slots it never saw), from the
    decay track ``origin`` when the daemon's state began with one kept (``origin_decay``).

    The replay starts from an empty state at ``start`` (the daemon's first slot reproduces the
    daemon exactly; a later start approximates it once the CUSUMs have renewed). The verdict's
    ``replay_from`` says where the replay began. ``progress`` is called after the span's read
    and after each slot (``check`` abandons a replay that makes none for a run_timeout).
    """
    return replay_record(
        config, name, at, start, progress=progress, skipped=skipped, origin=origin
    ).verdict


def replay_record(
    config: Config,
    name: str,
    at: datetime,
    start: datetime,
    *,
    detail: bool = False,
    progress: Callable[[], None] | None = None,
    skipped: Sequence[tuple[datetime, datetime]] = (),
    origin: DecayTrack | None = None,
) -> RunRecord:
    """``replay_check``'s run record; with ``detail`` it holds the page's arrays and the
    replayed check history (``monitor report --at``)."""
    tick = progress or (lambda: None)
    start, at = start.astimezone(UTC), at.astimezone(UTC)
    if not start <= at:
        raise ReplayRangeError(str(_iso(start)), str(_iso(at)))
    monitor = config.monitor(name)
    # not the slots the daemon's state never saw (it was down, or they ended in error): run,
    # they once moved the replay's blocks, looks and spending away from the daemon's
    slots = [
        t
        for t in monitor.schedule.slots(start, at)
        if t < at and not any(a < t < b for a, b in skipped)
    ]
    if len(slots) >= _LONG_REPLAY:
        log.warning(
            "replaying every slot before the one checked to rebuild the sequential state; "
            "--replay-from shortens it",
            extra={"monitor": name, "slots": len(slots), "from": _iso(start), "at": _iso(at)},
        )
    reader = CachedReader()
    # the span of the slots' windows is read a chunk at a time, each chunk's windows at once: a
    # replay from a daemon's first slot months back once held every score of those months
    chunks = _chunks([*slots, at], _CHUNK_MIN + monitor.windows.reference_span)
    _cover(reader, config, monitor, chunks[0])
    tick()
    clock = _ReplayClock(start)
    store = MemoryStore()
    if origin is not None:  # a raised decay the daemon's state kept through a settings change
        store.states[name] = MonitorState(decay=origin, origin_decay=origin)
    runner = Runner(
        config,
        clock=clock,
        reader=reader,
        store=store,
        detail=detail,
        history=_memory_history(config) if detail else None,
        summaries=_summaries(config),
    )
    for i, chunk in enumerate(chunks):
        if i:
            reader.clear()
            _cover(reader, config, monitor, chunk)
            tick()
        for t in chunk:
            if t == at:
                break
            clock.now = t
            runner.run(name, t)
            tick()
    clock.now = at
    record = runner.run(name, at)
    return replace(record, verdict=replace(record.verdict, replay_from=start))


def _chunks(slots: list[datetime], length: timedelta) -> list[list[datetime]]:
    """``slots`` in runs of at most ``length`` of time each (one run when they span less than
    twice that)."""
    if not slots or slots[-1] - slots[0] < 2 * length:
        return [slots]
    out: list[list[datetime]] = [[]]
    for t in slots:
        if out[-1] and t - out[-1][0] >= length:
            out.append([])
        out[-1].append(t)
    return out


class _PageWriter:
    """``backtest --report DIR``: a page for each slot whose state changed (the first slot's
    too: the timeline counts it as a change from no state) and for the last. A page that cannot
    be written is noted in ``failed`` and the replay goes on."""

    def __init__(self, config: Config, directory: Path, start: datetime) -> None:
        self.config, self.directory, self.start = config, directory, start
        self.written: list[Path] = []
        self.failed: list[str] = []

    def __call__(self, record: RunRecord, previous: RunRecord | None, last: bool) -> None:
        from monitor.report import PageContext, page_file_name, render_monitor_page

        v = record.verdict
        changed = previous is None or previous.verdict.state != v.state
        if not (changed or last):
            return
        # the backtest to this slot; a page at the range's start is that one check (a backtest
        # from a slot to itself is refused, which the first page once said to run)
        config = shlex.quote(str(self.config.path))
        command = (
            f"monitor backtest --config {config} --from {_iso(self.start)} --to {_iso(v.at)} "
            f"--monitor {v.monitor} --report DIR"
            if self.start < v.at
            else f"monitor report --config {config} --monitor {v.monitor} --at {_iso(v.at)} "
            f"--replay-from {_iso(self.start)}"
        )
        page = render_monitor_page(  # generated now: a replayed page is no snapshot of its slot
            self.config.monitor(v.monitor),
            v,
            record.detail,
            record.history,
            PageContext(report=self.config.report, command=command),
        )
        target = self.directory / page_file_name(v.monitor, v.at)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            target.write_text(page, encoding="utf-8")
        except OSError as exc:
            self.failed.append(f"{target}: cannot write the page: {exc.strerror or exc}")
            return
        self.written.append(target)


def _memory_history(config: Config) -> MemoryHistory:
    return MemoryHistory(
        max_entries=config.report.history_max_entries, max_age=config.report.history_max_age
    )


def _cover(
    reader: CachedReader, config: Config, monitor: MonitorConfig, slots: Sequence[datetime]
) -> None:
    if config.engine_for(monitor) is not None:
        return  # checked through cached summaries: the runner reads buckets, not the span
    windows = [w for at in slots for w in check_windows(monitor, at)]
    if windows:
        reader.cover(monitor.scores, windows)


def _summaries(config: Config) -> SummaryChecks:
    """A replay's summary side: bucket summaries cached on disk under the configuration's
    ``state_dir`` (a rerun of the same range reads none again), grids in memory only (a replay
    builds its own as the daemon would have, and never replaces the daemon's)."""
    limit = config.engine.cache_max_bytes if config.engine else 1 << 30
    return SummaryChecks(config.server.state_dir, max_bytes=limit, persist_grids=False)


# --------------------------------------------------------------------------------------------
# Output


def _num(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_text(result: BacktestResult) -> str:
    """The human report: the timeline of state changes, then the summary."""
    s = result.summary
    lines = [
        f"monitor {result.monitor}: {s.checks} checks in [{_iso(result.start)}, "
        f"{_iso(result.end)}]",
        "",
        f"  {'time':<21} {'from':<18}    {'to':<18} reason",
    ]
    for c in result.changes:
        lines.append(f"  {_iso(c.at):<21} {c.previous or '-':<18} -> {c.state:<18} {c.reason}")
    first = "none" if s.first_alarm is None else f"{_iso(s.first_alarm)} ({s.first_alarm_kind})"
    lines += [
        "",
        f"  alarms: {s.drift_alarms} data drift, {s.decay_alarms} model decay; first alarm: "
        f"{first}",
    ]
    if s.segment_alarms is not None:
        lines.append(
            f"  segment alarms (the per-segment alerts' raises): "
            f"{s.segment_alarms['data_drift']} data drift, "
            f"{s.segment_alarms['model_decay']} model decay"
        )
    lines += [
        "  hours in state: " + ", ".join(f"{state} {h:g}" for state, h in s.hours_in_state.items()),
        f"  final state: {s.final_state or '-'}",
    ]
    return "\n".join(lines) + "\n"


def format_json(results: Sequence[BacktestResult]) -> str:
    """``--json``: one document for one monitor, a list of them for several."""
    docs = [r.to_dict() for r in results]
    return json.dumps(docs[0] if len(docs) == 1 else docs, indent=1) + "\n"


def format_csv(results: Sequence[BacktestResult]) -> str:
    """``--csv``: a header, then one row per check (empty cells for missing numbers)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(_CSV_FIELDS)
    for r in results:
        for c in r.checks:
            d = c.to_dict()
            writer.writerow(
                [r.monitor, d["at"], d["state"]]
                + ["" if d[k] is None else repr(d[k]) for k in _CSV_FIELDS[3:]]
            )
    return buf.getvalue()


class _ProgressBar:
    """``[#####.....]  123/720 name`` on one terminal line, redrawn at most every 1/width."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self._shown: tuple[str, int] | None = None

    def __call__(self, name: str, done: int, total: int) -> None:
        filled = self.width * done // max(total, 1)
        if self._shown == (name, filled) and done != total:
            return
        self._shown = (name, filled)
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r[{bar}] {done:>{len(str(total))}}/{total} {name}")
        if done == total:
            self.stream.write("\n")
        self.stream.flush()


def run_backtest_cli(
    config: Config,
    start: datetime,
    end: datetime,
    *,
    monitor: str | None = None,
    as_json: bool = False,
    as_csv: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    report_dir: Path | None = None,
) -> int:
    """``monitor backtest``: replay, print (text, ``--json`` or ``--csv``), return the exit code.

    0 after a replay (3 when a ``--report`` page could not be written: the timeline is still
    printed); 3 for an invalid range (``--from`` not before ``--to``, or no slot of a
    monitor's schedule in it) or an unknown ``--monitor``, with the reason on ``err``. A progress
    bar goes to ``err`` only when it is a terminal.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        problems = _check_range(start, end)
        if problems:
            raise ValueError(
                " ".join(problems).replace("`start`", "--from").replace("`end`", "--to")
            )
        chosen = [config.monitor(monitor)] if monitor is not None else list(config.monitors)
        for m in chosen:
            if not m.schedule.slots(start, end):
                raise ValueError(
                    f"no slot of monitor {m.name!r}'s schedule {m.schedule.text!r} in "
                    f"[{_iso(start)}, {_iso(end)}]"
                )
    except (ValueError, KeyError) as exc:
        print(f"monitor backtest: invalid range or monitor: {exc.args[0]}", file=err)
        return 3
    progress = _ProgressBar(err) if err.isatty() else None
    writer = None if report_dir is None else _PageWriter(config, report_dir, start)
    results = backtest(
        config,
        start,
        end,
        monitors=[m.name for m in chosen],
        progress=progress,
        pages=writer,
    )
    if writer is not None:
        print(f"{len(writer.written)} page(s) written to {report_dir}", file=err)
        for problem in writer.failed:
            print(problem, file=err)
    if as_json:
        out.write(format_json(results))
    elif as_csv:
        out.write(format_csv(results))
    else:
        out.write("\n".join(format_text(r) for r in results))
    return 3 if writer is not None and writer.failed else 0
