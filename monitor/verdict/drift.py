"""Input drift: window numbers, phase-matched evidence blocks, the reference and anchor tracks."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from monitor.config import DriftConfig, MonitorConfig
from monitor.epoch import from_ns
from monitor.epoch import to_ns as _ns
from monitor.stats import (
    DriftBaseline,
    PSIResult,
    adjust_pvalues,
    build_baseline,
    cusum_step,
    drift_tests,
    ks_bracket,
    proportion_test_counts,
    psi_from_summaries,
    psi_test_counts,
    z_from_pvalue,
)
from monitor.verdict._common import _HOUR_NS, TRACKS, _iso
from monitor.verdict.data import CheckData, SegmentData, check_coarse
from monitor.verdict.plan import AlarmPlan, _bin_counts, phase_counts, phase_of
from monitor.verdict.reports import InputReport
from monitor.verdict.state import TESTED_KEPT, Anchor, CountedBlock, DriftTrack, SegmentDrift


@dataclass(frozen=True, slots=True)
class _Block:
    psi: float
    debiased: float
    pvalue: float
    n_reference: float


def _block_test(
    counts: np.ndarray,
    block: np.ndarray,
    tolerance: float,
    smoothing: float,
    min_samples: int,
) -> _Block | None:
    """Block counts ``block`` (P x B) against the phase-weighted reference counts ``counts``.

    Expected shares q = sum_p w_p c_p / n_p with w_p the block's share in phase p; the
    reference size for N_eff is 1 / sum_p (w_p^2 / n_p), the size of an equally precise plain
    sample. The block's rows in phases the reference lacks, or holds under a twentieth of its
    median phase's scores in (a feed outage in the reference, or part of one; a monitor or
    segment younger than its reference), are set aside: no same-phase reference, no evidence
    (against the whole reference a night block of a daily cycle is a large PSI).
    None when fewer than ``min_samples`` rows are left, or the reference is empty.
    """
    totals = counts.sum(axis=1)
    if counts.shape[0] > 1:
        # a phase the reference holds a twentieth of its typical phase's scores in is as one
        # it lacks: a fixed reference's hour with 3 of 600 scores (its feed partly out) gave
        # a block a noise floor that swallowed its PSI, a p near 1 that fed the clearing, and
        # three such hours cleared a drift that still held. Relative to the reference's own
        # phases, so growth since the reference (every phase alike) sets nothing aside
        held = (
            totals > max(0.0, float(np.median(totals[totals > 0])) / 20.0)
            if totals.any()
            else totals > 0
        )
        block = block[held]
        counts, totals = counts[held], totals[held]
    m = float(block.sum())
    if m < max(min_samples, 1) or totals.sum() <= 0:
        return None
    cur = block.sum(axis=0).astype(np.float64)
    if counts.shape[0] == 1:
        ref, n_ref = counts[0], float(totals[0])
    else:
        w = block.sum(axis=1).astype(np.float64) / m
        q = (w[:, None] * (counts / totals[:, None])).sum(axis=0)
        n_ref = 1.0 / float(np.sum(w**2 / totals))
        ref = q * n_ref
    if n_ref <= 0 or ref.sum() <= 0:
        return None
    r = psi_test_counts(ref, cur, tolerance=tolerance, smoothing=smoothing, n_reference=n_ref)
    return _Block(psi=r.statistic, debiased=r.debiased, pvalue=r.pvalue, n_reference=n_ref)


def _volume_ratio(
    monitor: MonitorConfig, data: CheckData, inputs: _Inputs, counts: np.ndarray
) -> float | None:
    """Current-window volume over the volume the reference had at the same phases."""
    span = data.reference_end - data.reference_start
    cur_span = data.current_end - data.current_start
    if span <= timedelta(0) or inputs.n_ref == 0:
        return None
    period = monitor.seasonal_period
    if period is None or counts.shape[0] == 1 or not inputs.phased:
        expected = inputs.n_ref * (cur_span / span)
    else:
        cycles = span / period
        start = _ns(data.current_start) // _HOUR_NS
        end = -(-_ns(data.current_end) // _HOUR_NS)
        hours = np.arange(start, end, dtype=np.int64) * _HOUR_NS
        ph = phase_of(hours, period)
        per_phase = counts.sum(axis=1) / cycles
        expected = float(per_phase[ph].sum()) * (cur_span / timedelta(hours=int(end - start)))
    return float(inputs.n_cur / expected) if expected > 0 else None


def _make_anchor(at: datetime, data: CheckData, edges: np.ndarray, counts: np.ndarray) -> Anchor:
    return Anchor(
        edges=tuple(float(x) for x in edges),
        counts=tuple(tuple(float(x) for x in row) for row in counts),
        start=data.reference_start,
        end=data.reference_end,
        set_at=at,
    )


@dataclass(frozen=True, slots=True)
class _Ks:
    statistic: float
    pvalue: float
    location: float | None
    statistic_high: float | None = None  # a bracket's D_hi (None: exact)
    pvalue_low: float | None = None


def _block_start(current_start: datetime, prior: SegmentDrift) -> datetime:
    """The evidence block's start: the window's, or the end of the evidence counted before."""
    if prior.evidence_end is not None and prior.evidence_end > current_start:
        return prior.evidence_end
    return current_start


def _block_end(
    at: datetime, newest: int | None, settle: timedelta, step: int = _HOUR_NS
) -> datetime:
    """The evidence block's end: ``at - settle`` (``drift.settle``), or the UTC hour after the
    current window's newest score when that is sooner. Rows land late: an hourly file written
    once its hour closed is not there at the check on the hour, and a block that ended at
    ``at`` left that hour's rows, landing minutes later, before the next block's start, in no
    block ever (a drift they carried unseen for good); ended at the newest score's hour, the
    next block starts there. A writer later than the others lands behind the newest score:
    ``drift.settle`` (its lateness) keeps the block's end behind it."""
    end = at - settle
    if newest is None:
        return end
    after = (newest // _HOUR_NS + 1) * _HOUR_NS
    # through summaries, on a bucket boundary at or before it: a bucket longer than the hour
    # is in this block whole or in the next one (the check's time and settle are boundaries)
    return min(end, from_ns(after - after % step))


def timestamp_cuts(
    reference: tuple[datetime, datetime],
    current: tuple[datetime, datetime],
    drift: Iterable[SegmentDrift],
    *,
    seasonal: bool,
    settle: timedelta = timedelta(0),
) -> tuple[list[int] | None, list[int]]:
    """Every instant (ns) the verdict compares the windows' timestamps with, for a reader that
    decodes them only where these split a row group (``read_scores``'s ``cuts``): for the
    current window each segment's evidence block start (``_block_start``, from the same prior
    ``drift`` states the verdict gets; a segment without one starts at the window's start),
    and with seasonal phases both windows' whole UTC hours. The reference: None without phases
    (its timestamps are not compared). The spans of the blocks tested before too (``_late``
    counts their scores again)."""

    def hours(window: tuple[datetime, datetime]) -> list[int]:
        first, end = _ns(window[0]) // _HOUR_NS + 1, -(-_ns(window[1]) // _HOUR_NS)
        return [h * _HOUR_NS for h in range(first, end)]

    drift = list(drift)
    starts = {_ns(current[0])} | {_ns(_block_start(current[0], d)) for d in drift}
    # the blocks tested before, counted again for scores that landed in them since (``_late``)
    starts |= {_ns(t) for d in drift for b in d.tested for t in (b.start, b.end)}
    # the current window's hours too, and ``settle`` before its end: a block ends at one
    # (``_block_end``: the hour after the newest score is known only once the window is read)
    ends = {*hours(current), _ns(current[1] - settle)} if settle else set(hours(current))
    return (hours(reference) if seasonal else None), sorted(starts | ends)


class _Inputs:
    """What the drift verdict needs from a segment's two windows, from arrays or summaries:
    sizes, the window tests on the PSI ``edges``, zero counts, the reference's per-(phase, bin)
    counts on any edges and the evidence block's."""

    n_ref: int
    n_cur: int
    phased: bool  # the reference's timestamps (or buckets) give phases

    def window(self, cfg: DriftConfig) -> tuple[np.ndarray, PSIResult, _Ks, int, int]:
        """(edges, PSI, KS, zeros in the reference, zeros in the current window)."""
        raise NotImplementedError

    def reference_counts(self, edges: np.ndarray, period: timedelta | None) -> np.ndarray:
        """The reference's counts per (phase, bin) on ``edges``: P x B (float64)."""
        raise NotImplementedError

    def block(
        self,
        start: datetime,
        end: datetime,
        edges: np.ndarray,
        period: timedelta | None,
        phases: int,
    ) -> np.ndarray:
        """The current window's counts in ``[start, end)``, per (phase, bin): P x B."""
        raise NotImplementedError

    def newest_ns(self) -> int | None:
        """The current window's newest score (ns); None: no score."""
        raise NotImplementedError

    def rows_in(self, spans: Sequence[tuple[int, int]]) -> list[int]:
        """The current window's scores in each span ``[start, end)`` (ns), counted as ``block``
        counts them (valid scores; through summaries, a bucket's in the span holding its
        start)."""
        raise NotImplementedError

    @property
    def step_ns(self) -> int:
        """What a block's end is rounded down to: the hour, or a summary bucket."""
        return _HOUR_NS


class _ArrayInputs(_Inputs):
    def __init__(self, seg: SegmentData, cfg: DriftConfig) -> None:
        self.seg = seg
        self.n_ref, self.n_cur = int(seg.reference.size), int(seg.current.size)
        self.phased = seg.reference_timestamps is not None
        self.baseline: DriftBaseline | None = None

    def newest_ns(self) -> int | None:
        stamps = self.seg.current_timestamps
        return int(stamps.max()) if stamps is not None and stamps.size else None

    def rows_in(self, spans: Sequence[tuple[int, int]]) -> list[int]:
        if not spans:
            return []
        seg = self.seg
        bounds = np.unique(np.asarray(spans, dtype=np.int64).ravel())
        for b in bounds.tolist():
            check_coarse(seg.current_coarse, cut=b)
        # below[k]: the scores before bounds[k] (one search of the timestamps for every span)
        per = np.bincount(
            np.searchsorted(bounds, seg.current_timestamps, side="right"),
            minlength=bounds.size + 1,
        )
        below = np.cumsum(per)[: bounds.size].tolist()
        at = {b: i for i, b in enumerate(bounds.tolist())}
        return [int(below[at[b]] - below[at[a]]) for a, b in spans]

    def window(self, cfg: DriftConfig) -> tuple[np.ndarray, PSIResult, _Ks, int, int]:
        seg = self.seg
        baseline = seg.baseline
        positions = seg.positions
        if baseline is None:
            baseline = build_baseline(seg.reference, bins=cfg.bins)
            positions = None
        self.baseline = baseline
        ordered_cur = seg.current_sorted if positions is None else None
        both = drift_tests(
            baseline,
            seg.current if ordered_cur is None else ordered_cur,
            tolerance=cfg.tolerance,
            smoothing=cfg.smoothing,
            positions=positions,
            assume_sorted=ordered_cur is not None,
        )
        ordered = baseline.sorted_reference
        zero_ref = int(np.searchsorted(ordered, 0.0, side="right")) - int(
            np.searchsorted(ordered, 0.0, side="left")
        )
        zero_cur = int(np.count_nonzero(seg.current == 0.0))
        ks = _Ks(both.ks.statistic, both.ks.pvalue, both.ks.statistic_location)
        return baseline.edges, both.psi, ks, zero_ref, zero_cur

    def reference_counts(self, edges: np.ndarray, period: timedelta | None) -> np.ndarray:
        seg = self.seg
        if (
            seg.reference_phases is not None
            and self.baseline is not None
            and edges is self.baseline.edges
        ):
            return seg.reference_phases  # cached by the runner for a fixed reference
        check_coarse(seg.reference_coarse, hourly=period is not None)
        return phase_counts(seg.reference, seg.reference_timestamps, edges, period)

    def block(
        self,
        start: datetime,
        end: datetime,
        edges: np.ndarray,
        period: timedelta | None,
        phases: int,
    ) -> np.ndarray:
        seg = self.seg
        cut, stop = _ns(start), _ns(end)
        check_coarse(seg.current_coarse, cut=cut, hourly=phases > 1)
        check_coarse(seg.current_coarse, cut=stop)
        stamps = seg.current_timestamps
        inside = (stamps >= cut) & (stamps < stop)
        values = seg.current[inside]
        bins = int(edges.size) + 1
        if phases == 1:  # counted chunk by chunk, not searched value by value (10x faster)
            return _bin_counts(values, edges).astype(np.float64).reshape(1, bins)
        idx = np.searchsorted(edges, values, side="left")
        ph = phase_of(seg.current_timestamps[inside], period)
        flat = np.bincount(ph * bins + idx, minlength=phases * bins)
        return flat.astype(np.float64).reshape(phases, bins)


class _SummaryInputs(_Inputs):
    def __init__(self, seg: SegmentData, cfg: DriftConfig) -> None:
        assert seg.summaries is not None
        self.s = seg.summaries
        self.n_ref, self.n_cur = self.s.reference.n, self.s.current.n
        self.phased = True

    def window(self, cfg: DriftConfig) -> tuple[np.ndarray, PSIResult, _Ks, int, int]:
        s = self.s
        ref_rows, cur_rows = s.bins(s.edges)  # per bucket, kept for the block tests too
        result = psi_from_summaries(
            s.reference,
            s.current,
            s.edges,
            tolerance=cfg.tolerance,
            smoothing=cfg.smoothing,
            bins=(ref_rows.sum(axis=0), cur_rows.sum(axis=0)),
        )
        br = ks_bracket(s.reference, s.current)
        ks = _Ks(
            br.statistic_low,
            br.pvalue_high,
            br.location,
            None if br.exact else br.statistic_high,
            None if br.exact else br.pvalue_low,
        )
        return s.edges, result, ks, s.reference.zeros, s.current.zeros

    def _phased(
        self, starts: np.ndarray, bins: np.ndarray, period: timedelta | None, phases: int
    ) -> np.ndarray:
        out = np.zeros((phases, bins.shape[1]), dtype=np.float64)
        ph = phase_of(starts, period) if phases > 1 else np.zeros(starts.size, np.intp)
        np.add.at(out, ph, bins.astype(np.float64))
        return out

    def reference_counts(self, edges: np.ndarray, period: timedelta | None) -> np.ndarray:
        ref, _ = self.s.bins(edges)
        phases = 1 if period is None else (24 if period == timedelta(days=1) else 168)
        return self._phased(self.s.reference_starts, ref, period, phases)

    def block(
        self,
        start: datetime,
        end: datetime,
        edges: np.ndarray,
        period: timedelta | None,
        phases: int,
    ) -> np.ndarray:
        _, cur = self.s.bins(edges)
        starts = self.s.current_starts
        keep = (starts >= _ns(start)) & (starts < _ns(end))
        return self._phased(starts[keep], cur[keep], period, phases)

    def newest_ns(self) -> int | None:
        return self.s.current.newest_ns if self.s.current.rows else None

    def rows_in(self, spans: Sequence[tuple[int, int]]) -> list[int]:
        if not spans:
            return []
        _, cur = self.s.bins(self.s.edges)
        per = cur.sum(axis=1)
        starts = self.s.current_starts
        return [int(per[(starts >= a) & (starts < b)].sum()) for a, b in spans]

    @property
    def step_ns(self) -> int:
        return max(_HOUR_NS, self.s.bucket_ns)


def _evaluate_input(
    monitor: MonitorConfig,
    at: datetime,
    data: CheckData,
    seg: SegmentData,
    prior: SegmentDrift,
    plan: AlarmPlan,
) -> tuple[InputReport, SegmentDrift, dict[str, float]]:
    """Window numbers and each track's block p-value (``{track: p}``; empty: no evidence)."""
    cfg = monitor.drift
    inputs: _Inputs = _ArrayInputs(seg, cfg) if seg.summaries is None else _SummaryInputs(seg, cfg)
    n_ref, n_cur = inputs.n_ref, inputs.n_cur
    tracks_txt = tuple(t for t in TRACKS if prior.track(t).active)
    if n_ref < cfg.min_reference_samples or n_cur < cfg.min_current_samples:
        return (
            InputReport(
                n_reference=n_ref,
                n_current=n_cur,
                decidable=False,
                undecidable_reason=(
                    f"{n_cur} scores in the current window (need {cfg.min_current_samples}), "
                    f"{n_ref} in the reference (need {cfg.min_reference_samples})"
                ),
                cusum=prior.reference.cusum,
                drift=prior.active,
                drift_since=_iso(_since(prior)),
                drift_tracks=tracks_txt,
            ),
            prior,
            {},
        )
    edges, window_psi, ks, zero_ref, zero_cur = inputs.window(cfg)
    zero = proportion_test_counts(zero_ref, n_ref, zero_cur, n_cur)
    period = plan.seasonal_period
    counts = inputs.reference_counts(edges, period)

    block_start = _block_start(data.current_start, prior)
    block_end = _block_end(at, inputs.newest_ns(), cfg.settle, inputs.step_ns)
    block = inputs.block(block_start, block_end, edges, period, counts.shape[0])
    block_size = int(block.sum())
    # the parts tested before, counted again, and this block's, counted with them (one search
    # of the window's timestamps): kept if the block is tested
    tested, new_parts, counted_at, late, lags = _late(
        prior, inputs, data.current_start, at, max(at, data.read_at or at), block_start, block_end
    )
    report = InputReport(
        n_reference=n_ref,
        n_current=n_cur,
        decidable=True,
        psi=window_psi.statistic,
        psi_pvalue=window_psi.pvalue,
        psi_noise_floor=window_psi.noise_floor,
        psi_debiased=window_psi.debiased,
        psi_tolerance=cfg.tolerance,
        psi_bins=window_psi.n_bins,
        ks_statistic=ks.statistic,
        ks_pvalue=ks.pvalue,
        ks_location=ks.location,
        ks_statistic_high=ks.statistic_high,
        ks_pvalue_low=ks.pvalue_low,
        grid_points=None if seg.summaries is None else int(seg.summaries.grid.points.size),
        zero_rate_reference=zero.rate_reference,
        zero_rate_current=zero.rate_current,
        zero_rate_pvalue=zero.pvalue,
        out_of_range_rate=window_psi.out_of_range_rate,
        volume_ratio=_volume_ratio(monitor, data, inputs, counts),
        block_start=_iso(block_start),
        block_end=_iso(block_end),
        block_samples=block_size,
        cusum=prior.reference.cusum,
        cusum_threshold=plan.drift_h,
        z_threshold=plan.drift_z,
        drift=prior.active,
        drift_since=_iso(_since(prior)),
        drift_tracks=tracks_txt,
        late_scores=late,
        late_scores_lag_min=None if lags is None else lags[0].total_seconds(),
        late_scores_lag_max=None if lags is None else lags[1].total_seconds(),
    )
    more: dict[str, Any] = {}  # the report's later fields, set in one replace at the end
    state = replace(prior, tested=tested, counted_at=counted_at if tested else None)
    use_anchor = plan.tracks == 2
    if use_anchor:
        anchor = state.anchor_ref
        if (
            anchor is None
            or (
                anchor.array.shape[0] != counts.shape[0]  # the seasonality setting changed
            )
            or (
                at - anchor.set_at >= cfg.anchor_refresh
                and not state.active
                and _close_to_anchor(anchor, inputs, period, cfg.tolerance, cfg.smoothing)
            )
        ):
            anchor = _make_anchor(at, data, edges, counts)
        elif not state.active and _fills_anchor(anchor.array, counts):
            # frozen while the log was younger than the reference, or a quiet hour had no
            # rows: its empty phases (whose blocks it cannot judge) are filled from the
            # rolling reference, binned on its own edges; every other phase stays frozen
            anchor = _filled_anchor(anchor, inputs.reference_counts(anchor.edge_array, period))
        state = replace(state, anchor_ref=anchor)
        more.update(
            anchor_start=_iso(anchor.start),
            anchor_end=_iso(anchor.end),
            anchor_cusum=state.anchor.cusum,
        )
    # whether no block has been tested within the current window: <=, the last block tested
    # ended at evidence_end, so at the window's start it lies wholly before the window
    untested = prior.evidence_end is None or prior.evidence_end <= data.current_start
    since = f"no block tested since {_iso(prior.evidence_end) or 'the first check'}"
    if block_size < cfg.min_block_samples:
        if untested:
            # and the window itself too small for a block (drift.min_block_samples above
            # min_current_samples): it once read as ok at every check, a PSI of 3.9 unseen
            more.update(
                decidable=False,
                undecidable_reason=(
                    f"{since}: the {block_size} scores since {_iso(block_start)} are fewer "
                    f"than the {cfg.min_block_samples} a block needs (drift.min_block_samples)"
                ),
            )
        return replace(report, **more), state, {}
    pvalues: dict[str, float] = {}
    references = [("reference", edges, counts, block)]
    if use_anchor and state.anchor_ref is not None:
        anchor = state.anchor_ref
        a_edges = anchor.edge_array
        a_block = (
            block
            if np.array_equal(a_edges, edges) and anchor.array.shape[0] == counts.shape[0]
            else inputs.block(block_start, block_end, a_edges, period, anchor.array.shape[0])
        )
        references.append(("anchor", a_edges, anchor.array, a_block))
    for name, _edges, ref_counts, block_counts in references:
        test = _block_test(
            ref_counts, block_counts, cfg.tolerance, cfg.smoothing, cfg.min_block_samples
        )
        if test is None:
            continue
        z = z_from_pvalue(test.pvalue)
        track = state.track(name)
        # <=: with tolerance 0 a block at or under its noise floor (debiased 0) is in the band
        quiet = track.quiet + 1 if test.debiased <= cfg.clear_share * cfg.tolerance else 0
        # a raised track's clearing CUSUM: the alarm's, run the other way on the same z's
        clear = cusum_step(track.clear_cusum, -z, k=cfg.cusum_k) if track.active else 0.0
        track = replace(
            track, cusum=cusum_step(track.cusum, z, k=cfg.cusum_k), quiet=quiet, clear_cusum=clear
        )
        state = state.with_track(name, track)
        if name == "reference":
            more.update(
                block_psi=test.psi,
                block_pvalue=test.pvalue,
                z=z,
                cusum=track.cusum,
                block_reference_samples=test.n_reference,
            )
        else:
            more.update(
                anchor_psi=test.psi,
                anchor_pvalue=test.pvalue,
                anchor_z=z,
                anchor_cusum=track.cusum,
            )
        more["evidence"] = True
        pvalues[name] = test.pvalue
    if pvalues:
        kept = (*state.tested, *new_parts)
        state = replace(
            state, evidence_end=block_end, tested=kept[-TESTED_KEPT:], counted_at=counted_at
        )
    elif untested:
        # a block large enough, set aside whole (its hours lack from the reference), and no
        # block tested within the current window: the drift side has tested nothing (a log
        # or segment younger than its weekly reference said ok for a week, a change in it
        # unseen; a daily check after a day the reference lacks said ok)
        more.update(
            decidable=False,
            undecidable_reason=(
                f"{since}: the "
                f"reference holds too few scores in the hours of the {block_size} scores since "
                f"{_iso(block_start)} (a log or segment younger than the reference's "
                f"{'phases' if period is not None else 'window'}, or its feed out then)"
            ),
        )
    return replace(report, **more), state, pvalues


def _parts(start: datetime, end: datetime, step: int) -> list[tuple[int, int]]:
    """A block ``[start, end)`` cut at the hours (through summaries with buckets longer than
    the hour, at theirs) inside it, as ns spans, the newest ``TESTED_KEPT``. Cut, a block that
    began before the window slid (a first check's, one after an outage: the whole window)
    keeps its later hours counted while the window holds them."""
    a, b = _ns(start), _ns(end)
    cuts = [a, *range((a // step + 1) * step, b, step), b]
    return list(itertools.pairwise(cuts))[-TESTED_KEPT:]


def _late(
    prior: SegmentDrift,
    inputs: _Inputs,
    current_start: datetime,
    at: datetime,
    read: datetime,
    block_start: datetime,
    block_end: datetime,
) -> tuple[
    tuple[CountedBlock, ...],
    tuple[CountedBlock, ...],
    datetime,
    int,
    tuple[timedelta, timedelta] | None,
]:
    """The parts of blocks tested before (``_parts``) that the current window still holds
    whole, counted again (``read``: when the check had read them, at or after ``at``), and
    the parts of this check's block ``[block_start, block_end)``, counted in the same pass:
    (the old parts with their marks and counts, the new ones, the time before which no score
    beyond a mark was there, the scores beyond the marks, and how late those were: more than
    ``L``, at most ``U``; None when none).

    A score in a part ``[s, e)`` beyond its mark was not there at the count made at
    ``counted_at`` and was at ``read``: it landed more than ``counted_at - e`` and at most
    ``read - s`` behind its time, and no block tests it (the next one starts at
    ``evidence_end``). A part the window has slid past (in part) is let go. The mark is the
    most scores the part has held: a partition deleted and written back (an overwrite, a
    compaction) or a file missing at one check brings back scores that were tested, not late
    ones; two checks in a row below it (a rewrite that dropped rows) lower it to the first of
    the two counts, unless that was a single 0 (files missing a while; empty twice, the hour
    was emptied), and scores beyond that landed late. A check that counted a part
    below its mark may not have seen scores that were there (hidden in the dip):
    ``counted_at`` then stays where it was."""
    kept = [b for b in prior.tested if b.start >= current_start]
    spans = _parts(block_start, block_end, inputs.step_ns)
    counts = inputs.rows_in([(_ns(b.start), _ns(b.end)) for b in kept] + spans)
    new = tuple(
        CountedBlock(from_ns(x), from_ns(y), n)
        for (x, y), n in zip(spans, counts[len(kept) :], strict=True)
    )
    out: list[CountedBlock] = []
    late, dipped = 0, False
    lo: timedelta | None = None
    hi: timedelta | None = None
    counted = prior.counted_at if prior.counted_at is not None else at
    for b, n in zip(kept, counts[: len(kept)], strict=True):
        mark = b.rows
        if n < mark and b.last < mark and (b.last > 0 or n == 0):
            # below it at the check before too: rows were taken out (a rewrite), not missing a
            # while; the count then is the mark, and scores since beyond it landed late. Not
            # after a single 0: the hour's files missing a while (an overwrite deletes, then
            # writes back, perhaps deduplicated) would make every score written back late;
            # empty at two checks in a row, the hour was emptied (a retraction) and what lands
            # in it later is late
            mark = b.last
        if n > mark:
            late += n - mark
            # a part tested at this check while a dip held counted_at back: its count was made
            # after its end, so its late scores are more than 0 late, not more than a negative
            since_end = max(counted - b.end, timedelta(0))
            lo = since_end if lo is None else min(lo, since_end)
            hi = read - b.start if hi is None else max(hi, read - b.start)
            mark = n
        elif n < mark:
            dipped = True
        out.append(replace(b, rows=mark, seen=None if n == mark else n))
    since = counted if dipped else at
    return tuple(out), new, since, late, None if lo is None or hi is None else (lo, hi)


def _fills_anchor(anchor: np.ndarray, counts: np.ndarray) -> bool:
    """Whether the rolling reference's per-phase ``counts`` have rows in a phase the anchor
    has none of (a seasonal anchor frozen from a reference the log did not fill yet)."""
    if anchor.shape[0] == 1:
        return False
    return bool(np.any((anchor.sum(axis=1) <= 0) & (counts.sum(axis=1) > 0)))


def _filled_anchor(anchor: Anchor, rolling: np.ndarray) -> Anchor:
    """``anchor`` with its phases of no rows taken from ``rolling`` (per-phase counts on the
    anchor's edges); its other phases, window and time set unchanged."""
    empty = anchor.array.sum(axis=1) <= 0
    filled = np.where(empty[:, None], rolling, anchor.array)
    return Anchor(
        edges=anchor.edges,
        counts=tuple(tuple(float(x) for x in row) for row in filled),
        start=anchor.start,
        end=anchor.end,
        set_at=anchor.set_at,
    )


def _close_to_anchor(
    anchor: Anchor,
    inputs: _Inputs,
    period: timedelta | None,
    tolerance: float,
    smoothing: float,
) -> bool:
    """Whether the rolling reference is within half the tolerance of the anchor (debiased)."""
    now = inputs.reference_counts(anchor.edge_array, period).sum(axis=0)
    then = anchor.array.sum(axis=0)
    if now.sum() <= 0 or then.sum() <= 0:
        return False
    r = psi_test_counts(then, now, tolerance=tolerance, smoothing=smoothing)
    return r.debiased < tolerance / 2


def _since(d: SegmentDrift) -> datetime | None:
    times = [t.active_since for t in (d.reference, d.anchor) if t.active and t.active_since]
    return min(times) if times else None


def _settle_drift(
    monitor: MonitorConfig,
    at: datetime,
    reports: dict[str, InputReport],
    states: dict[str, SegmentDrift],
    block_p: dict[tuple[str, str], float],
    plan: AlarmPlan,
) -> None:
    """Raise or clear alarms once every segment's evidence is in (Holm over segment-tracks)."""
    keys = sorted(block_p)
    adjusted = (
        dict(zip(keys, adjust_pvalues([block_p[k] for k in keys], method="holm"), strict=True))
        if keys
        else {}
    )
    for name, report in list(reports.items()):
        state = states[name]
        fired: list[tuple[str, str]] = []
        # each track's CUSUM as this check left it, before an alarm resets it: the report
        # quotes the value that crossed h (it showed the reset 0.00 beside "crossed h")
        shown = {t: state.track(t).cusum for t in TRACKS[: plan.tracks]}
        for track_name in TRACKS[: plan.tracks]:
            track = state.track(track_name)
            key = (name, track_name)
            alarm: str | None = None
            if key in adjusted:
                if adjusted[key] <= plan.drift_alpha:
                    alarm = "immediate"
                elif track.cusum > plan.drift_h:
                    alarm = "cusum"
            if alarm is not None:
                track = replace(
                    track,
                    cusum=0.0,
                    active=True,
                    active_since=track.active_since or at,
                    quiet=0,
                    clear_cusum=0.0,
                )
                fired.append((alarm, track_name))
            elif track.active and _cleared(track, monitor, plan):
                track = replace(track, active=False, active_since=None, quiet=0, clear_cusum=0.0)
            elif not track.active:
                track = replace(track, quiet=0, clear_cusum=0.0)
            state = state.with_track(track_name, track)
        states[name] = state
        first = fired[0] if fired else (None, None)
        reports[name] = replace(
            report,
            alarm=first[0],
            alarm_track=first[1],
            block_pvalue_adjusted=_get(adjusted, (name, "reference")),
            anchor_pvalue_adjusted=_get(adjusted, (name, "anchor")),
            drift=state.active,
            anchor_drift=state.anchor.active,
            drift_since=_iso(_since(state)),
            drift_tracks=tuple(t for t in TRACKS if state.track(t).active),
            cusum=shown["reference"],
            anchor_cusum=shown["anchor"] if plan.tracks == 2 else None,
            clear_cusum=state.reference.clear_cusum if state.reference.active else None,
            anchor_clear_cusum=state.anchor.clear_cusum if state.anchor.active else None,
            clear_threshold=(
                plan.clear_h if state.active and monitor.drift.tolerance > 0 else None
            ),
        )


def _cleared(track: DriftTrack, monitor: MonitorConfig, plan: AlarmPlan) -> bool:
    """A raised track clears when its last ``clear_after`` blocks were all in the clearing band
    and its clearing CUSUM has crossed ``plan.clear_h`` (``verdict.plan.clear_threshold``): evidence
    that the drift is back within the tolerance, not a few block estimates that dipped into
    the band by chance. With ``tolerance = 0`` no block can show that (every block without a
    change is at the edge of its null), so the band alone clears: blocks at or under their
    noise floor."""
    cfg = monitor.drift
    if track.quiet < cfg.clear_after:
        return False
    return cfg.tolerance <= 0 or track.clear_cusum > plan.clear_h


def _get(d: Mapping[tuple[str, str], float], key: tuple[str, str]) -> float | None:
    return float(d[key]) if key in d else None


# --------------------------------------------------------------------------- decay
