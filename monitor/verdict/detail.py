"""What a page draws for one check, beside the verdict: binned summaries, never raw points.

Pure code (numpy only; no I/O, no clock). ``describe(monitor, data, verdict)`` turns the data a
check read into small arrays: per segment the reference and current counts on the frozen PSI bins
and each bin's PSI contribution, both ECDFs on a grid of a few hundred points, and the exact ECDF
values where the KS statistic is attained; per segment the paired outcome differences sorted
ascending (ties by query id) with their ids and both values. Its size depends on the number of
bins, grid points and pairs, not on the window's rows, so a 10M-row window describes as small as a
10k one. The verdict stays the numbers' single source: ``describe`` never re-decides, and the
page prints the verdict's PSI, KS and decay numbers (the bin contributions add up to its PSI).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from numpy.typing import NDArray

from monitor.config import MonitorConfig
from monitor.memo import ByIdentity
from monitor.stats import Grid, bin_ends
from monitor.verdict.data import CheckData, Pairs, SegmentData, SegmentSummaries
from monitor.verdict.reports import Verdict

__all__ = ["GRID_QUANTILES", "CheckDetail", "InputDetail", "OutcomeDetail", "describe"]

GRID_QUANTILES = 200
"""ECDF grid: this many quantile levels of each window (so both curves are exact at ~400 points)."""


@dataclass(frozen=True, slots=True, eq=False)
class InputDetail:
    """One segment's score distributions on the frozen PSI bins and on an ECDF grid.

    Bins are right-closed: (-inf, e_1], (e_1, e_2], ..., (e_k, +inf) with ``edges`` e_1..e_k.
    ``contributions[b] = (p_b - q_b) ln(p_b / q_b)`` with the check's additive ``smoothing`` s:
    q_b = (r_b + s) / (n + s B), p_b = (c_b + s) / (m + s B); they sum to the verdict's PSI.
    ``reference_ecdf[i]`` / ``current_ecdf[i]`` are F(grid[i]) = share of values <= grid[i].
    ``ks_reference`` / ``ks_current`` are both ECDFs at ``ks_location`` on the side (F(x) or
    F(x-)) where their gap is largest: the gap the KS statistic measures.
    """

    edges: NDArray[np.float64]
    reference_counts: NDArray[np.int64]
    current_counts: NDArray[np.int64]
    contributions: NDArray[np.float64]
    smoothing: float
    grid: NDArray[np.float64]
    reference_ecdf: NDArray[np.float64]
    current_ecdf: NDArray[np.float64]
    display_range: tuple[float, float]
    ks_location: float | None = None
    ks_reference: float | None = None
    ks_current: float | None = None
    reference_range: tuple[float, float] | None = None
    current_range: tuple[float, float] | None = None

    @property
    def reference_shares(self) -> NDArray[np.float64]:
        """Unsmoothed share of the reference in each bin."""
        total = int(self.reference_counts.sum())
        return self.reference_counts / total if total else np.zeros(self.edges.size + 1)

    @property
    def current_shares(self) -> NDArray[np.float64]:
        """Unsmoothed share of the current window in each bin."""
        total = int(self.current_counts.sum())
        return self.current_counts / total if total else np.zeros(self.edges.size + 1)


@dataclass(frozen=True, slots=True, eq=False)
class OutcomeDetail:
    """One segment's paired outcomes, sorted by ``difference = current - reference`` ascending
    (ties by query id); ``only_*`` count the queries found in one window only."""

    query_ids: NDArray[np.str_]
    reference: NDArray[np.float64]
    current: NDArray[np.float64]
    difference: NDArray[np.float64]
    only_reference: int = 0
    only_current: int = 0

    @property
    def n(self) -> int:
        return int(self.difference.size)


@dataclass(frozen=True, slots=True, eq=False)
class CheckDetail:
    """The arrays one check's page draws (see the module docstring)."""

    monitor: str
    at: datetime
    inputs: Mapping[str, InputDetail] = field(default_factory=dict)
    outcomes: Mapping[str, OutcomeDetail] = field(default_factory=dict)


def _ecdf(ordered: NDArray[np.float64], x: NDArray[np.float64], side: str) -> NDArray[np.float64]:
    n = ordered.size
    idx = np.searchsorted(ordered, x, side=side)  # type: ignore[call-overload]
    out: NDArray[np.float64] = idx / n if n else np.zeros(x.size)
    return out


def _quantiles(ordered: NDArray[np.float64], levels: NDArray[np.float64]) -> NDArray[np.float64]:
    pos = np.rint(levels * (ordered.size - 1)).astype(np.intp)
    out: NDArray[np.float64] = ordered[pos]
    return out


def _contributions(
    r: NDArray[np.int64], c: NDArray[np.int64], smoothing: float
) -> NDArray[np.float64]:
    """Each bin's PSI term (p_b - q_b) ln(p_b / q_b), additive ``smoothing`` on both windows."""
    bins, n, m = r.size, int(r.sum()), int(c.sum())
    q = (r + smoothing) / (n + smoothing * bins)
    p = (c + smoothing) / (m + smoothing * bins)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: NDArray[np.float64] = np.where((p == 0) & (q == 0), 0.0, (p - q) * np.log(p / q))
    return out


def input_detail(
    reference_sorted: NDArray[np.float64],
    current: NDArray[np.float64],
    edges: NDArray[np.float64],
    *,
    smoothing: float,
    ks_location: float | None = None,
    assume_sorted: bool = False,
) -> InputDetail:
    """Bin counts, PSI contributions and ECDFs of ``current`` against a sorted reference (see
    :class:`InputDetail`). Sorts ``current`` once (not with ``assume_sorted``: it is then
    ascending already); the reference must already be sorted."""
    ref = reference_sorted
    cur = current if assume_sorted else np.sort(current)
    n, m = ref.size, cur.size

    def binned(ordered: NDArray[np.float64]) -> NDArray[np.int64]:
        upper = np.searchsorted(ordered, edges, side="right")
        return np.diff(np.concatenate(([0], upper, [ordered.size]))).astype(np.int64)

    r, c = binned(ref), binned(cur)
    contrib = _contributions(r, c, smoothing)
    levels = np.linspace(0.0, 1.0, GRID_QUANTILES + 1)
    parts = [edges]
    if n:
        parts.append(_quantiles(ref, levels))
    if m:
        parts.append(_quantiles(cur, levels))
    grid = np.unique(np.concatenate(parts))
    lows = [float(_quantiles(s, np.array([0.001]))[0]) for s in (ref, cur) if s.size]
    highs = [float(_quantiles(s, np.array([0.999]))[0]) for s in (ref, cur) if s.size]
    lo, hi = (min(lows), max(highs)) if lows else (0.0, 1.0)
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    ks_ref = ks_cur = None
    if ks_location is not None and n and m:
        x = np.array([ks_location])
        at = (float(_ecdf(ref, x, "right")[0]), float(_ecdf(cur, x, "right")[0]))
        below = (float(_ecdf(ref, x, "left")[0]), float(_ecdf(cur, x, "left")[0]))
        ks_ref, ks_cur = max(at, below, key=lambda pair: abs(pair[0] - pair[1]))
    return InputDetail(
        edges=np.asarray(edges, dtype=np.float64),
        reference_counts=r,
        current_counts=c,
        contributions=contrib,
        smoothing=smoothing,
        grid=grid,
        reference_ecdf=_ecdf(ref, grid, "right"),
        current_ecdf=_ecdf(cur, grid, "right"),
        display_range=(lo, hi),
        ks_location=ks_location,
        ks_reference=ks_ref,
        ks_current=ks_cur,
        reference_range=(float(ref[0]), float(ref[-1])) if n else None,
        current_range=(float(cur[0]), float(cur[-1])) if m else None,
    )


def summary_input_detail(
    summaries: SegmentSummaries, *, smoothing: float, ks_location: float | None = None
) -> InputDetail:
    """:func:`input_detail` from a check through summaries: the bins are the frozen edges'
    (exact counts), the ECDFs are exact at up to ``2 * GRID_QUANTILES`` grid points (F at a
    point is the cells up to and including it); a window's range is known exactly only when its
    extreme cell is a point cell (else None)."""
    ref, cur = summaries.reference, summaries.current
    edges = summaries.edges
    ends, take = _layout(summaries.grid, edges)
    # each window's cumulative cell counts, once: its bins, ECDF, KS step and range are read
    # off them (a 1d vs 7d check at 250k rows an hour has ~10^5 cells; each pass over them
    # costs ~40 us)
    cum_ref, cum_cur = np.cumsum(ref.counts), np.cumsum(cur.counts)
    r, c = _bins_from_cumulative(cum_ref, ends), _bins_from_cumulative(cum_cur, ends)
    n, m = ref.n, cur.n
    contrib = _contributions(r, c, smoothing)
    pts = summaries.grid.points
    f_ref = cum_ref[2 * take + 1] / n if n else np.zeros(take.size)
    f_cur = cum_cur[2 * take + 1] / m if m else np.zeros(take.size)
    lo, hi = float(pts[0]), float(pts[-1])
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    ks_ref = ks_cur = None
    if ks_location is not None and n and m:
        i = int(np.searchsorted(pts, ks_location))
        if i < pts.size and pts[i] == ks_location:
            at = (float(cum_ref[2 * i + 1] / n), float(cum_cur[2 * i + 1] / m))
            below = (float(cum_ref[2 * i] / n), float(cum_cur[2 * i] / m))
            ks_ref, ks_cur = max(at, below, key=lambda pair: abs(pair[0] - pair[1]))
    return InputDetail(
        edges=np.asarray(edges, dtype=np.float64),
        reference_counts=r,
        current_counts=c,
        contributions=contrib,
        smoothing=smoothing,
        grid=pts[take],
        reference_ecdf=f_ref,
        current_ecdf=f_cur,
        display_range=(lo, hi),
        ks_location=ks_location,
        ks_reference=ks_ref,
        ks_current=ks_cur,
        reference_range=_summary_range(cum_ref, pts),
        current_range=_summary_range(cum_cur, pts),
    )


_LAYOUTS: ByIdentity[tuple[NDArray[np.intp], NDArray[np.intp]]] = ByIdentity(8)


def _layout(grid: Grid, edges: NDArray[np.float64]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """The bins' ends in cells (``bin_ends``) and the grid points the page's ECDFs are drawn
    at (each edge, and ``2 * GRID_QUANTILES`` points evenly spaced), kept for the last few
    (grid, edges): a daemon's grid and edges stay the same from check to check."""
    e = np.asarray(edges, dtype=np.float64)
    tag = e.tobytes()
    got = _LAYOUTS.get(grid, tag)
    if got is not None:
        return got
    pts = grid.points
    ends = bin_ends(grid, e)
    take = np.unique(
        np.concatenate(
            [
                np.searchsorted(pts, e),
                np.linspace(0, pts.size - 1, min(pts.size, 2 * GRID_QUANTILES)).astype(np.intp),
            ]
        )
    )
    take = take[take < pts.size]
    ends.flags.writeable = take.flags.writeable = False
    _LAYOUTS.put(grid, tag, (ends, take))
    return ends, take


def _bins_from_cumulative(cum: NDArray[np.int64], ends: NDArray[np.intp]) -> NDArray[np.int64]:
    """``cells_to_bins(counts, ends)`` from the cumulative counts ``cum``: the cumulative
    count at each bin's last cell, differenced (exact in int64)."""
    at = cum[ends - 1]
    out: NDArray[np.int64] = np.empty(at.size, dtype=np.int64)
    out[:1] = at[:1]
    np.subtract(at[1:], at[:-1], out=out[1:])
    return out


def _summary_range(cum: NDArray[np.int64], pts: NDArray[np.float64]) -> tuple[float, float] | None:
    """The lowest and highest value a window holds, from its cumulative cell counts ``cum``
    (cells alternate gap, point, gap...: point i is cell 2i + 1); None when the window is
    empty or an extreme value falls inside an open gap."""
    if cum.size == 0 or cum[-1] == 0:
        return None
    first = int(np.searchsorted(cum, 0, side="right"))  # the first cell holding a value
    last = int(np.searchsorted(cum, cum[-1], side="left"))  # the last one
    if first % 2 == 0 or last % 2 == 0:
        return None  # an extreme value inside an open gap
    return float(pts[first // 2]), float(pts[last // 2])


def outcome_detail(pairs: Pairs) -> OutcomeDetail:
    """The pairs sorted by difference ascending, ties broken by query id."""
    diff = pairs.current - pairs.reference
    ids = (
        np.asarray(pairs.query_ids).astype(str)
        if pairs.query_ids is not None
        else np.array([str(i) for i in range(diff.size)])
    )
    order = np.lexsort((ids, diff)) if diff.size else np.empty(0, dtype=np.intp)
    return OutcomeDetail(
        query_ids=ids[order],
        reference=pairs.reference[order],
        current=pairs.current[order],
        difference=diff[order],
        only_reference=pairs.only_reference,
        only_current=pairs.only_current,
    )


def describe(
    monitor: MonitorConfig,
    data: CheckData,
    verdict: Verdict,
    *,
    look_pairs: Mapping[str, Pairs] | None = None,
) -> CheckDetail:
    """The detail of one decided check. ``look_pairs`` (segment -> pairs) stand in for the
    check's own pairs when it made no new look (the verdict then carries the last look's
    numbers, and the runner read that look's pairs again)."""
    inputs: dict[str, InputDetail] = {}
    for name, seg in data.segments.items():
        report = verdict.inputs.get(name)
        if report is None or not report.decidable:
            continue
        inputs[name] = _segment_input(monitor, seg, report.ks_location)
    outcomes: dict[str, OutcomeDetail] = {}
    for name, seg in data.segments.items():
        if seg.pairs.n:
            outcomes[name] = outcome_detail(seg.pairs)
    for name, pairs in (look_pairs or {}).items():
        if name not in outcomes and pairs.n:
            outcomes[name] = outcome_detail(pairs)
    return CheckDetail(monitor=verdict.monitor, at=verdict.at, inputs=inputs, outcomes=outcomes)


def _segment_input(
    monitor: MonitorConfig, seg: SegmentData, ks_location: float | None
) -> InputDetail:
    if seg.summaries is not None:
        return summary_input_detail(
            seg.summaries, smoothing=monitor.drift.smoothing, ks_location=ks_location
        )
    if seg.baseline is not None:
        ordered, edges = seg.baseline.sorted_reference, seg.baseline.edges
    else:  # the runner passes a baseline when it wants detail; this is the slow fallback
        from monitor.stats import build_baseline

        baseline = build_baseline(seg.reference, bins=monitor.drift.bins)
        ordered, edges = baseline.sorted_reference, baseline.edges
    current = seg.current if seg.current_sorted is None else seg.current_sorted
    return input_detail(
        ordered,
        current,
        edges,
        smoothing=monitor.drift.smoothing,
        ks_location=ks_location,
        assume_sorted=seg.current_sorted is not None,
    )
