"""The job runner: the one place that composes config -> sources -> stats -> verdict.

``Runner.run(name, at)`` reads the windows for slot ``at``, decides, updates the in-memory
``Board`` (``monitor.board``) that the exporter and ``/status`` read, and (unless read-only)
persists the monitor's sequential state atomically in ``state_dir`` (``monitor.store``). What a
check reads (its windows, the reader protocol and the small shapes of read data) is in
``monitor.checkdata``. The board's, the store's and the reader's names are re-exported here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from monitor.board import Board, Health, MonitorSnapshot, RunRecord
from monitor.checkdata import (
    _EMPTY,
    _EMPTY_TS,
    DataReader,
    ParquetReader,
    _before,
    _empty_outcomes,
    _judged_check,
    _judgment_versions,
    _newest,
    _no_scores,
    _pairs,
    _parse_time,
    _reference_ahead,
    _rows_in,
    _Runs,
    _split_scores,
    _takes_cuts,
    check_windows,
)
from monitor.config import Config, MonitorConfig
from monitor.epoch import from_ns as _from_ns
from monitor.epoch import rfc3339
from monitor.epoch import to_ns as _ns
from monitor.errors import MonitorError, SourceError
from monitor.incremental import SummaryChecks, SummaryRead
from monitor.schedule import format_duration
from monitor.sources import (
    OutcomeWindow,
    PairedOutcomes,
    ScoreWindow,
    Window,
    latest_timestamp,
    pair_outcomes,
)
from monitor.stats import DriftBaseline, build_baseline
from monitor.store import (
    FUTURE_SKEW,
    RESET_REASONS,
    StateLoad,
    StateStore,
    _os_error,
    decay_fingerprint,
    decay_kept,
    state_fingerprint,
    state_is_finite,
    utc_now,
)
from monitor.verdict import (
    CheckData,
    CheckDetail,
    DecayTrack,
    MonitorState,
    Pairs,
    SegmentData,
    Verdict,
    check_coarse,
    describe,
    error_verdict,
    evaluate,
    phase_counts,
    timestamp_cuts,
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


class Publishing:
    """``Runner.abandon``'s answer for a run already publishing its verdict (``PUBLISHING``)."""


PUBLISHING = Publishing()


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
        summaries: SummaryChecks | None = None,
    ) -> None:
        self.config = config
        self.detail = detail
        self.history = history
        self.clock = clock
        self.reader: DataReader = reader or ParquetReader()
        self._reader_cuts = _takes_cuts(self.reader)
        self.store = (
            store
            if store is not None
            else StateStore(config.server.state_dir, clock=clock, fingerprints=_prints(config))
        )
        self._fingerprints = _prints(config)
        self._decay_prints = _decay_prints(config)
        if self._file_store:
            self.store.decay_prints = dict(self._decay_prints)
        loads = {m.name: self._load(m) for m in config.monitors}
        if self._file_store:
            self.store.sweep()
        self.board = board or Board(config.monitors, {n: x.state for n, x in loads.items()})
        self._note_loads(loads)
        # a fixed reference's baseline and phase counts, by the monitor's whole settings (a
        # reload that changes them never meets an old entry), segment and reference bounds
        self._baselines: dict[
            tuple[MonitorConfig, str, datetime, datetime, str], tuple[DriftBaseline, np.ndarray]
        ] = {}
        self._locks = {m.name: threading.Lock() for m in config.monitors}
        self._abandoned: set[int] = set()
        # runs past the abandoned test, publishing their verdict: an abandon that comes after
        # lets it stand (its error, recorded on top, flipped the verdict, and one written
        # under the run's save put the state back a slot). Kept until the daemon settles the
        # run (``settle``: it ended in time, or its abandon was decided), not evicted by the
        # count of later runs (1,024 publishes during one hung save evicted it: abandoned
        # then, its error on the board and its verdict in the file)
        self._published: set[int] = set()
        # monitor -> (the settings object, its state and decay fingerprints): a run stamps
        # its state with the prints of the settings it read (a reload between its discard
        # test and its stamp once stamped the old settings' state with the new print)
        self._printed: dict[str, tuple[MonitorConfig, str, str]] = _printed(
            config, self._fingerprints, self._decay_prints
        )
        # taken to discard a run, and to record its timeout unless it was discarded first (a
        # reload that removed its monitor or reset its state): never both
        self._discarding = threading.Lock()
        # a read-only runner (monitor check) shares the daemon's bucket cache (a cache write is
        # no state) but never replaces its grid
        self.summaries = summaries or SummaryChecks(
            config.server.state_dir if self._file_store else None,
            max_bytes=(config.engine.cache_max_bytes if config.engine else 1 << 30),
            persist_grids=not getattr(self.store, "readonly", False),
        )
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
        before = {m.name: m for m in self.config.monitors}
        after = {m.name: m for m in config.monitors}
        # what was read for a monitor that is gone or changed must not decide its next check
        # (a fixed reference's baseline on the old bins, a grid on the old path)
        stale = {
            n for n, m in before.items() if after.get(n) != m or config.engine != self.config.engine
        }
        for name in stale:
            self._forget(name)
        prints = _prints(config)
        decay_prints = _decay_prints(config)
        # the cache's bound too (it was kept from start-up: lowered to free a disk, no effect)
        self.summaries.cache.max_bytes = config.engine.cache_max_bytes if config.engine else 1 << 30
        self.summaries.keep_engines(
            s for s in (config.engine_for(m) for m in config.monitors) if s is not None
        )
        self.config = config
        self._fingerprints = prints
        self._decay_prints = decay_prints
        self._printed = _printed(config, prints, decay_prints)
        if self._file_store:
            self.store.fingerprints = dict(prints)
            self.store.decay_prints = dict(decay_prints)
        states: dict[str, MonitorState] = {}
        loads: dict[str, StateLoad] = {}
        reset = set(reset)
        for name in old - set(after):  # removed: what the runner held for it goes too
            self._locks.pop(name, None)
            if self.history is not None:
                self.history.forget(name)
        for m in config.monitors:
            self._locks.setdefault(m.name, threading.Lock())
            if m.name not in old:
                loads[m.name] = self._load(m)
                states[m.name] = loads[m.name].state
            elif m.name in reset:
                prior = self.board.state(m.name)
                # the decay track stays when its own settings did not change (a schedule or
                # drift edit once resolved a raised decay and spent its looks again)
                kept = decay_kept(prior, decay_prints[m.name])
                states[m.name] = MonitorState(
                    fingerprint=prints[m.name],
                    decay_fingerprint=decay_prints[m.name] if kept is not None else None,
                    decay=kept if kept is not None else DecayTrack(),
                    origin_decay=kept,  # where a replay from this state's first slot starts
                    # last run and success, and the state and its start: a check that finds
                    # the same state keeps the time it began (a drift edit during a decay
                    # moved it to the reload, and on-call looked for a cause before their edit)
                    **prior.times(),  # type: ignore[arg-type]
                )
        self.board.reconfigure(config.monitors, states)
        self._note_loads(loads)
        for name in reset & old:
            if name in prints:
                self.board.reset(name, "config_changed")
                carried = states[name].decay_fingerprint is not None
                log.warning(
                    "state settings changed on reload; sequential state starts fresh"
                    + ("; the decay track is kept" if carried else ""),
                    extra={"monitor": name, "fingerprint": prints[name]},
                )

    def _forget(self, name: str) -> None:
        """Drop what was read and kept for monitor ``name`` (baselines, the last look's pairs,
        its summaries)."""
        for key in list(self._baselines):  # a snapshot: other monitors' checks may add
            if key[0].name == name:
                self._baselines.pop(key, None)
        self._looks.pop(name, None)
        self.summaries.forget(name)

    # -- data -------------------------------------------------------------------------------

    def _scores(
        self,
        monitor: MonitorConfig,
        window: Window,
        *,
        with_timestamps: bool,
        cuts: list[int] | None,
    ) -> ScoreWindow:
        if not self._reader_cuts:  # a reader written before ``cuts``: every row decoded
            return self.reader.scores(monitor.scores, window, with_timestamps=with_timestamps)
        return self.reader.scores(
            monitor.scores, window, with_timestamps=with_timestamps, cuts=cuts
        )

    def _read(
        self, monitor: MonitorConfig, at: datetime, state: MonitorState, *, detail: bool = False
    ) -> tuple[CheckData, int, dict[tuple[str, str], int]]:
        reference_w, current_w = check_windows(monitor, at)
        settings = self.config.engine_for(monitor)
        summarized: SummaryRead | None = None
        identity = ""  # the fixed reference's files (``DataReader.identity``), before the read
        if settings is not None:
            keep = [
                d.anchor_ref.edge_array for d in state.drift.values() if d.anchor_ref is not None
            ]
            summarized = self.summaries.read(
                monitor, settings, at, reference_w, current_w, keep_edges=keep
            )
            ref = cur = _no_scores(reference_w)
        else:
            # only the row groups the verdict's instants split are decoded (read_scores)
            seasonal = monitor.seasonal_period is not None
            ref_cuts, cur_cuts = timestamp_cuts(
                (reference_w.start, reference_w.end),
                (current_w.start, current_w.end),
                state.drift.values(),
                seasonal=seasonal,
                settle=monitor.drift.settle,
            )
            if monitor.windows.fixed_reference:
                # before the read: a file changed during it changes the next check's identity
                # (taken after, it vouched for files the values read did not hold: the stale
                # baseline kept until a restart)
                ask = getattr(self.reader, "identity", None)  # None: a reader written before
                identity = "" if ask is None else ask(monitor.scores, reference_w)
            ref = self._scores(monitor, reference_w, with_timestamps=seasonal, cuts=ref_cuts)
            cur = self._scores(monitor, current_w, with_timestamps=True, cuts=cur_cuts)
        runs = self._runs(monitor, at, state)
        out_ref_w = reference_w
        decay = state.decay
        ref_s, ref_e = decay.reference_start, decay.reference_end
        # the hold is judged on the rolling reference this look would use: moved back to end
        # where its runs begin (below) after an outage, it can hold the decayed runs again,
        # and a relapse compared with them was missed
        looked_at = runs.new.start if runs.new is not None else None
        rolling_start = reference_w.start
        if looked_at is not None and looked_at < reference_w.end:
            rolling_start = looked_at - (reference_w.end - reference_w.start)
        frozen_held = bool(decay.active) or decay.holds_reference(rolling_start)
        if ref_s is not None and ref_e is not None and frozen_held:
            # a raised decay is judged against the reference it was found against, and so is
            # every look until the rolling reference holds none of the decayed runs (cleared,
            # they would pull it down and mask a relapse)
            out_ref_w = Window(start=ref_s, end=ref_e)
            frozen = True
        else:
            frozen = monitor.windows.fixed_reference
        # the runs looked at are never their own reference: a first look, or one after an
        # outage, pools runs from as far back as the outcome feed's max_lag (or the outage),
        # which can reach into the reference window; a run paired with itself pulls the look
        # towards 0. A rolling reference moves back to end where the pooled runs begin (its
        # length kept: after a long outage it would otherwise be empty, and the runs looked at
        # with nothing to compare); a frozen or fixed one is cut there.
        emptied = False
        if looked_at is not None and looked_at < out_ref_w.end:
            if not frozen:
                length = out_ref_w.end - out_ref_w.start
                out_ref_w = Window(start=looked_at - length, end=looked_at)
            elif looked_at > out_ref_w.start:
                out_ref_w = Window(start=out_ref_w.start, end=looked_at)
            else:
                emptied = True  # every run of the frozen reference is looked at
        ref_out, looked = self._outcome_windows(monitor, out_ref_w, runs.new, emptied=emptied)
        pair_split: Mapping[str, PairedOutcomes] = {}  # no new run: nothing to pair
        if looked is not None:
            cur_out: OutcomeWindow = looked
            paired = pair_outcomes(ref_out, cur_out)
            pair_split = (
                paired.by_segment() if monitor.outcomes.segment_column is not None else {"": paired}
            )
        else:
            cur_out = _empty_outcomes(ref_out, current_w)
        ref_split = _split_scores(ref)
        cur_split = _split_scores(cur)
        if summarized is not None:
            ref_split = dict.fromkeys(summarized.reference, (_EMPTY, None))
            cur_split = dict.fromkeys(summarized.current, (_EMPTY, _EMPTY_TS))
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
        no_scores = (
            ref.values.size == 0 and cur.values.size == 0
            if summarized is None
            else summarized.n_reference == 0 and summarized.n_current == 0
        )
        if no_scores and ref_out.query_ids.size == 0:
            names = []  # no data at all: the verdict reports it, with the window and freshness
        for name in names:
            ref_values, ref_ts = ref_split.get(name, (_EMPTY, None))
            cur_values, cur_ts = cur_split.get(name, (_EMPTY, _EMPTY_TS))
            baseline = None
            phases = None
            if summarized is not None:
                fixed = False  # the frozen grid is the summaries' baseline
                detail = False
            if fixed and ref_values.size >= monitor.drift.min_reference_samples:
                # by what the window holds, not its bounds alone: a late or corrected file in
                # a fixed reference (its last hour landing after reference_end) was read (its
                # rows counted) but never tested, the first baseline kept until a restart. By
                # its files, not its contents: hashing 7M rows at each check cost 150 ms
                key = (monitor, name, reference_w.start, reference_w.end, identity)
                cached = self._baselines.get(key)
                if cached is None:
                    baseline = build_baseline(ref_values, bins=monitor.drift.bins)
                    check_coarse(ref.coarse_spans, hourly=monitor.seasonal_period is not None)
                    phases = phase_counts(
                        ref_values, ref_ts, baseline.edges, monitor.seasonal_period
                    )
                    # one a segment: a reference cut at the current window (a check within
                    # the fixed period) has other bounds at each slot, and kept every one
                    for other in [k for k in self._baselines if k[:2] == key[:2]]:
                        self._baselines.pop(other, None)
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
            # the page's ECDFs and the verdict's KS share one sort of the current window
            current_sorted = np.sort(cur_values) if detail and cur_values.size else None
            pairs = pair_split.get(name)
            segments[name] = SegmentData(
                reference=ref_values,
                current=cur_values,
                current_timestamps=cur_ts if cur_ts is not None else _EMPTY_TS,
                current_coarse=cur.coarse_spans,
                reference_coarse=ref.coarse_spans,
                pairs=_pairs(pairs)
                if pairs is not None
                else Pairs(reference=_EMPTY, current=_EMPTY),
                baseline=baseline,
                positions=positions,
                reference_timestamps=ref_ts,
                reference_phases=phases,
                summaries=None if summarized is None else summarized.segment(name),
                current_sorted=current_sorted,
            )
        data = CheckData(
            current_start=current_w.start,
            current_end=current_w.end,
            reference_start=reference_w.start,
            reference_end=reference_w.end,
            segments=segments,
            newest_score=self._newest_score(monitor, at, cur, ref, summarized),
            # none in the lookback: the source's newest, so a feed dead for longer still says
            # since when (it read "never", and its freshness series vanished)
            newest_outcome=runs.newest or self._newest_outcome(monitor, at, ref_out, out_ref_w),
            reference_outcome_queries=int(ref_out.query_ids.size),
            current_outcome_queries=int(cur_out.query_ids.size) if runs.new else 0,
            runs=runs.count,
            runs_start=runs.new.start if runs.new else None,
            runs_end=runs.end,
            runs_rows=runs.rows,
            late_rows=runs.late,
            outcome_reference_start=out_ref_w.start,
            outcome_rolling_start=rolling_start,
            outcome_reference_end=out_ref_w.end,
            judged=_judged_check(monitor, ref_out, cur_out if runs.new else None),
            read_at=self.clock(),
        )
        score_rows = ref.rows + cur.rows if summarized is None else summarized.rows
        rows = score_rows + ref_out.rows + (cur_out.rows if runs.new else 0)
        samples = {
            ("scores", "reference"): int(ref.values.size)
            if summarized is None
            else summarized.n_reference,
            ("scores", "current"): int(cur.values.size)
            if summarized is None
            else summarized.n_current,
            ("outcomes", "reference"): int(ref_out.query_ids.size),
            ("outcomes", "current"): int(cur_out.query_ids.size) if runs.new else 0,
        }
        return data, rows, samples

    def _outcome_windows(
        self, monitor: MonitorConfig, reference: Window, runs: Window | None, *, emptied: bool
    ) -> tuple[OutcomeWindow, OutcomeWindow | None]:
        """The reference window's outcomes (``emptied``: none of its runs kept) and the runs
        looked at (None: no new run), scored with one judgment set: a new one that lands
        between the two reads once scored the runs with it and their reference with the old
        (a false decay where the judgments, not the model, changed). Read again once when
        they differ; a ``SourceError`` naming both versions when they still do."""
        for _ in range(2):  # once more when the versions differ
            ref_out = self.reader.outcomes(monitor.outcomes, reference)
            if emptied:
                ref_out = _empty_outcomes(ref_out, reference)
            if runs is None:
                return ref_out, None
            cur_out = self.reader.outcomes(monitor.outcomes, runs)
            versions = _judgment_versions(ref_out, cur_out)
            if len(versions) < 2:
                return ref_out, cur_out
        raise SourceError(
            f"the judgments changed while this check read them ({' then '.join(versions)})",
            path=monitor.outcomes.judged.judgments if monitor.outcomes.judged else "",
            hint="the next check reads both windows with one version",
        )

    def _newest_outcome(
        self, monitor: MonitorConfig, at: datetime, ref_out: OutcomeWindow, reference: Window
    ) -> datetime | None:
        """The newest outcome before ``at`` when the lookback holds none: the source's newest
        (a feed dead for longer than the windows still says since when), or, when that is
        after ``at`` (a replay: the source holds rows after its slot), the newest from the
        outcome reference's start to ``at`` (a gap in a replayed feed said "before the windows
        read" where the daemon had said when the feed stopped)."""
        newest = ref_out.newest_timestamp
        if newest is None or newest < at:
            return newest
        times = self.reader.outcome_times(
            monitor.outcomes, Window(start=min(reference.start, at), end=at)
        )
        return _from_ns(int(times.max())) if times.size else None

    def _newest_score(
        self,
        monitor: MonitorConfig,
        at: datetime,
        cur: ScoreWindow,
        ref: ScoreWindow,
        summarized: SummaryRead | None,
    ) -> datetime | None:
        """The newest score row before ``at``: the windows' newest, else (both windows empty:
        a feed dead for longer than them) the source's newest, when it is before ``at``."""
        if summarized is not None:
            if summarized.newest_ns is not None:
                return _from_ns(summarized.newest_ns)
            return _before(at, latest_timestamp(monitor.scores))
        inside = _newest(cur.timestamps, ref.timestamps)
        return inside or _before(at, cur.newest_timestamp)

    def _runs(self, monitor: MonitorConfig, at: datetime, state: MonitorState) -> _Runs:
        """The complete evaluation runs in the lookback (``max(windows.current, outcomes.max_lag)``
        before ``at``, or back to the previous look's runs after an outage) not looked at yet.

        Runs are the outcome timestamps split at gaps longer than ``decay.run_gap``; what landed
        up to a row that was followed by a quiet ``decay.settle`` (or by nothing, ``settle``
        before ``at``) is complete. Everything that landed after the previous look up to the
        newest complete row is pooled into one window (runs closer together than ``run_gap``,
        e.g. hourly evaluations, merge into one cluster; the pooling is the same, and a run in
        progress at the check leaves those before it complete).
        """
        cfg = monitor.decay
        # far enough back to find the newest outcome for the freshness rule, and every run
        # that could have landed since the previous check; after an outage, back to the end of
        # the previous look's runs (within a budget period), so that the runs that landed
        # meanwhile are pooled into the next look, not dropped
        lookback = max(monitor.windows.current, monitor.outcome_lag_limit)
        seen, span_start = state.decay.runs_end, state.decay.runs_start
        # the last look's span whole, for its late rows: cut at seen, or at the usual lookback
        # when a look after an outage pooled days of runs, they were never counted, and
        # entered the rolling reference untested
        counted = span_start is not None and state.decay.runs_rows
        span_from = span_start - cfg.run_gap if span_start is not None else None
        if seen is not None and (
            at - lookback > seen
            or (counted and span_from is not None and at - lookback > span_from)
        ):
            back = seen if span_from is None else min(seen, span_from)
            lookback = max(lookback, min(at - back, monitor.budget.period))
        window = Window(start=at - lookback, end=at)
        times = self.reader.outcome_times(monitor.outcomes, window)
        if times.size == 0:
            return _Runs(count=0, new=None, end=None, newest=None)
        ts = np.sort(times)
        newest = _from_ns(int(ts[-1]))
        gap_ns = cfg.run_gap // timedelta(microseconds=1) * 1000
        # rows that landed after the last look with times in its span (a run written in parts,
        # a segment evaluated by its own job) are older than runs_end: without this count they
        # were never looked at, and entered the rolling reference untested
        late, span = 0, state.decay.runs_start
        if seen is not None and span is not None and state.decay.runs_rows:
            lo = _ns(span) - gap_ns
            if lo >= _ns(window.start):  # the lookback still holds that span whole
                late = max(0, _rows_in(ts, lo, _ns(seen)) - state.decay.runs_rows)
        gaps = np.diff(ts)
        cuts = np.flatnonzero(gaps > gap_ns)
        ends = np.concatenate((cuts, [ts.size - 1]))
        # complete: everything up to the newest row that is older than `settle` and was
        # followed by a quiet `settle` (or by nothing yet). Not only at a run_gap cut: hourly
        # runs merge into one cluster, and a check off the hour (at :05) always finds the next
        # run in progress; waiting for the cluster to go quiet, it never looked at any.
        limit = _ns(at - cfg.settle)
        quiet = np.flatnonzero(gaps > cfg.settle // timedelta(microseconds=1) * 1000)
        done = np.concatenate((quiet, [ts.size - 1]))
        done = done[ts[done] <= limit]
        if done.size == 0:
            return _Runs(count=0, new=None, end=None, newest=newest)
        last = int(ts[done[-1]])
        # everything that landed after the previous look, up to the end of the newest complete
        # run (runs closer together than run_gap merge into one; the pooling is the same); with
        # late rows, the last look's span again, with them
        floor = _ns(seen) if seen is not None else None
        if late and span is not None:
            floor = _ns(span) - gap_ns - 1
            last = max(last, _ns(seen)) if seen is not None else last
        fresh = ts[(ts <= last) & (ts > floor)] if floor is not None else ts[ts <= last]
        if fresh.size == 0:
            return _Runs(count=0, new=None, end=None, newest=newest)
        first = int(fresh[0])
        chosen = [b for b in ends if first <= ts[b] <= last]
        new = Window(start=_from_ns(first), end=_from_ns(last) + timedelta(microseconds=1))
        lo = first - gap_ns
        # counted only when the lookback holds the span whole: the next checks compare with it
        rows = _rows_in(ts, lo, last) if lo >= _ns(window.start) else 0
        return _Runs(
            count=max(len(chosen), 1),
            new=new,
            end=_from_ns(last),
            newest=newest,
            rows=rows,
            late=late,
        )

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
        ahead = _reference_ahead(monitor, at)
        if ahead is not None:
            return ahead, state, 0, {}, None
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
        except Exception as exc:  # an engine's own (Dask's KilledWorker, py4j's)
            # or a bug: still this check's error verdict, with its traceback logged, never a
            # run that leaves the previous verdict showing and counts no failure
            log.exception(
                "check failed unexpectedly", extra={"monitor": monitor.name, "at": at.isoformat()}
            )
            message = f"unexpected {type(exc).__name__}: {exc}"
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
        try:
            runs_start, runs_end, ref_start, ref_end = (_parse_time(t) for t in key)
            ref_out = self.reader.outcomes(monitor.outcomes, Window(start=ref_start, end=ref_end))
            cur_out = self.reader.outcomes(
                monitor.outcomes,
                Window(start=runs_start, end=runs_end + timedelta(microseconds=1)),
            )
            paired = pair_outcomes(ref_out, cur_out)
        # a source's error, or a saved look's span the windows refuse: the page loses its
        # strip, the verdict nothing (it once turned every check into an error)
        except (MonitorError, ValueError, OverflowError) as exc:
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
        that exceeded its time limit must not overwrite what later runs decided) or ``at`` is
        before the slot decided last (its verdict, decided without the alarms' history, is
        returned but not published). A state that
        could not be saved makes the run a failure (see ``_persist``) but keeps its verdict; a
        non-finite CUSUM is reset (reason ``non_finite``) instead of failing every later run.
        """
        monitor = self.config.monitor(name)
        printed = self._printed.get(name)
        if printed is not None and printed[0] is monitor:
            prints = printed[1:]
        else:  # a reload between the two looks: the prints of the settings this run reads
            prints = (state_fingerprint(monitor), decay_fingerprint(monitor))
        with self._locks[name]:
            started = self.clock()
            at = at or monitor.schedule.latest_slot(started)
            t0 = time.perf_counter()
            current = self._finite(name, at, self.board.state(name))
            # the slot decided last, again (a restart or a reload within it): from the state
            # before it, as it was first decided, not on top of itself (its blocks then held
            # "no new evidence", and that verdict replaced the first in the history)
            prior = _deciding_from(current, at)
            sequential = prior.last_at is None or at >= prior.last_at
            # how far the clock is behind the last slot decided (a slot just before it is a
            # restart's within FUTURE_SKEW: its clock a few minutes behind the old process's)
            last = prior.last_at
            behind = timedelta(0) if last is None else last - started
            clock_behind = last is not None and not sequential and behind > FUTURE_SKEW
            samples: dict[tuple[str, str], int]
            if clock_behind and last is not None:
                # the clock stepped back past the slots decided: an error, so that on-call
                # hears of it (unpublished, the monitor fell silent until the clock caught
                # up, its last success in the future, which no staleness alert can see)
                verdict = error_verdict(
                    name,
                    at,
                    f"the clock is behind: it reads {rfc3339(started)}, "
                    f"{format_duration(behind - behind % timedelta(minutes=1))} before the "
                    "last slot decided, "
                    f"{rfc3339(last)}; checks resume when the clock passes it (fix "
                    "the clock: NTP, the RTC)",
                )
                new_state, rows, samples, detail = current, 0, {}, None
            else:
                verdict, new_state, rows, samples, detail = self._decide(
                    monitor, at, prior, sequential=sequential, detail=self.detail
                )
            duration = time.perf_counter() - t0
            if not sequential or verdict.state == "error":
                # nothing decided: the state stays as it is (a redo that failed once rolled it
                # back a slot, its raised alarm with it)
                new_state = current
            record = RunRecord(
                verdict=verdict,
                started=started,
                duration_seconds=duration,
                rows_read=rows,
                window_samples=samples,
                detail=detail,
                engine=self._engine_kind(monitor),
            )
            if token is not None:
                with self._discarding:
                    abandoned = token in self._abandoned
                    if not abandoned:
                        self._published.add(token)
                if abandoned:
                    # before the stamp: a monitor removed by a reload meanwhile has no
                    # fingerprints (its discarded run once ended in "run failed unexpectedly:
                    # KeyError")
                    log.warning(
                        "late result of an abandoned run discarded",
                        extra={"monitor": name, "at": at.isoformat()},
                    )
                    return record
            new_state = self._finite(name, at, new_state)
            new_state = self._stamp(new_state, current, verdict, started, *prints)
            if not sequential and not clock_behind:
                # a slot just before the one decided last (a restart with the clock a few
                # minutes behind, within FUTURE_SKEW): decided without the alarms' history, so
                # not published; the board, the state and the history stay as they were
                assert prior.last_at is not None
                log.warning(
                    "slot before the last decided one: its verdict is not published",
                    extra={
                        "monitor": name,
                        "at": at.isoformat(),
                        "last_decided": prior.last_at.isoformat(),
                        "state": verdict.state,
                    },
                )
                return record
            error = self._persist(name, new_state)
            if error is not None:
                verdict = replace(verdict, reasons=(*verdict.reasons, f"state not saved: {error}"))
                record = replace(record, verdict=verdict)
                new_state = replace(new_state, last_success=current.last_success)
            # a reload may discard this run while it saves (its monitor's state starts fresh,
            # or the monitor is gone): its old-settings state must not land on the board after
            # the reset, nor its verdict in the history. The check and the board's record are
            # one step under the lock ``discard`` takes (the save and the append, which may
            # wait on a disk, are not: a hung disk holds no reload). The file it saved carries
            # the old settings' fingerprint, which a start reads as a state that starts fresh.
            appended = self.history is not None and not self.discarded(token)
            if appended:
                assert self.history is not None
                record = replace(record, history=self.history.append(name, verdict))
            with self._discarding:
                dropped = self.discarded(token)
                if not dropped:
                    self.board.record(record, new_state, failed=error is not None)
            if dropped:
                gone = all(m.name != name for m in self.config.monitors)
                if appended and gone and self.history is not None:
                    self.history.forget(name)  # removed: what the append read back goes
                log.warning(
                    "result of a run discarded by a reload as it was saved; not on the board"
                    + (
                        " (its history entry was written first; the slot's rerun replaces it)"
                        if appended and not gone
                        else ""
                    ),
                    extra={"monitor": name, "at": at.isoformat()},
                )
                return record
        fields = {
            "monitor": name,
            "at": at.isoformat(),
            "state": verdict.state,
            "duration_seconds": round(duration, 3),
            "rows_read": rows,
        }
        if self.store.durable:  # a replay's states stay in memory: it says nothing of saving
            fields["state_saved"] = error is None
        if verdict.state == "error":  # the file, column and hint, as /status has them
            log.warning("check", extra={**fields, "error": "; ".join(verdict.reasons)})
        else:
            log.info("check", extra=fields)
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

    def abandon(
        self, token: int, name: str, at: datetime, reason: str, *, duration_seconds: float = 0.0
    ) -> RunRecord | Publishing | None:
        """Mark a run that exceeded its limit as abandoned and record an ``error`` verdict whose
        duration is how long the run had been going (``last_run_duration_seconds`` shows a
        hang, not 0); None, recording nothing, when the run was discarded already (a reload
        removed its monitor, or its state starts fresh: the old settings' slot is no failure
        of the new ones, and a removed monitor has no board to record on); ``PUBLISHING``,
        recording nothing, when the run is publishing its verdict already (it ended as its
        limit passed: the verdict stands, and the run is not abandoned)."""
        with self._discarding:
            if token in self._abandoned:
                return None
            if token in self._published:
                return PUBLISHING
            self._abandoned.add(token)
            return self._fail(name, at, reason, duration_seconds)

    def settle(self, token: int) -> None:
        """The daemon has decided run ``token``'s fate (it ended in time, or its ``abandon``
        was answered): no abandon of it comes, and what was kept for that answer goes."""
        with self._discarding:
            self._published.discard(token)

    def discarded(self, token: int | None) -> bool:
        """Whether run ``token``'s result is dropped (abandoned, or discarded by a reload);
        False for a run without a token (``monitor check``, the backtest)."""
        return token is not None and token in self._abandoned

    def discard(self, token: int, name: str | None = None) -> None:
        """Drop the late result of run ``token`` without recording anything (SIGHUP changed
        or removed its monitor while it ran). With ``name``, the run is hung and let go: the
        monitor's later runs take a lock of their own, the hung one keeps the old (its late
        result is discarded before it would write anything)."""
        with self._discarding:
            self._abandoned.add(token)
        if name is not None and name in self._locks:
            self._locks[name] = threading.Lock()

    def fail(
        self,
        name: str,
        at: datetime,
        reason: str,
        *,
        duration_seconds: float = 0.0,
        unless: Callable[[], bool] | None = None,
    ) -> RunRecord | None:
        """Record an ``error`` verdict for slot ``at`` without running (an abandoned run, or a
        slot skipped because the previous run is still in flight); the state is persisted.
        ``unless``: asked under the lock ``discard`` takes; true: nothing is recorded (None)."""
        with self._discarding:
            if unless is not None and unless():
                return None
            return self._fail(name, at, reason, duration_seconds)

    def _fail(self, name: str, at: datetime, reason: str, duration_seconds: float) -> RunRecord:
        started = self.clock()
        prior = self.board.state(name)
        verdict = error_verdict(name, at, reason)
        record = RunRecord(verdict=verdict, started=started, duration_seconds=duration_seconds)
        new_state = self._stamp(
            prior,
            prior,
            verdict,
            started,
            self._fingerprints.get(name),
            self._decay_prints.get(name),
        )
        self._persist(name, new_state)
        if self.history is not None:
            record = replace(record, history=self.history.append(name, verdict))
        self.board.record(record, new_state)
        return record

    def _engine_kind(self, monitor: MonitorConfig) -> str:
        """``memory``, or the engine that computed this monitor's latest new buckets (before
        any: the configured kind, ``local`` for ``auto``)."""
        settings = self.config.engine_for(monitor)
        if settings is None:
            return "memory"
        used = self.summaries.last_engine.get(monitor.name)
        return used or ("local" if settings.kind == "auto" else settings.kind)

    @staticmethod
    def _stamp(
        state: MonitorState,
        prior: MonitorState,
        verdict: Verdict,
        started: datetime,
        fingerprint: str | None = None,
        decay_print: str | None = None,
    ) -> MonitorState:
        since = prior.state_since if prior.state == verdict.state else started
        return replace(
            state,
            state=verdict.state,
            state_since=since,
            last_run=started,
            last_success=started if verdict.state != "error" else prior.last_success,
            fingerprint=fingerprint or state.fingerprint,
            decay_fingerprint=decay_print or state.decay_fingerprint,
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
        prior = _deciding_from(self.store.load(name), at)
        sequential = prior.last_at is None or at >= prior.last_at
        verdict, _, _, _, extra = self._decide(
            monitor, at, prior, sequential=sequential, detail=detail
        )
        return verdict, extra


def _deciding_from(state: MonitorState, at: datetime) -> MonitorState:
    """The state slot ``at`` is decided from: the state before it (``before_last``) when it is
    the slot ``state`` decided last, as it was first decided; else ``state``."""
    if state.last_at is not None and at == state.last_at and state.before_last is not None:
        return state.before_last
    return state


def _prints(config: Config) -> dict[str, str]:
    return {m.name: state_fingerprint(m) for m in config.monitors}


def _decay_prints(config: Config) -> dict[str, str]:
    return {m.name: decay_fingerprint(m) for m in config.monitors}


def _printed(
    config: Config,
    prints: Mapping[str, str] | None = None,
    decay_prints: Mapping[str, str] | None = None,
) -> dict[str, tuple[MonitorConfig, str, str]]:
    """Each monitor's settings object with its state and decay fingerprints."""
    prints = _prints(config) if prints is None else prints
    decay_prints = _decay_prints(config) if decay_prints is None else decay_prints
    return {m.name: (m, prints[m.name], decay_prints[m.name]) for m in config.monitors}


def _store_path(store: StateStore, name: str) -> str | None:
    try:
        return str(store.path(name))
    except TypeError:  # a store without files
        return None
