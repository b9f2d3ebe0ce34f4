"""What the job runner reads for one check (pure data, no I/O)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from monitor.errors import MonitorError
from monitor.stats import (
    BaselinePositions,
    DriftBaseline,
    Grid,
    Runs,
    ScoreSummary,
)
from monitor.verdict._common import _HOUR_NS


def check_coarse(spans: np.ndarray | None, *, cut: int | None = None, hourly: bool = False) -> None:
    """Refuse timestamps a reader did not decode where they matter. ``spans`` (k x 2, ns) are
    ``ScoreWindow.coarse_spans``: row groups whose rows carry their newest timestamp, which is
    exact for t >= c only at the instants the runner named as cuts. Raises ``MonitorError``
    when ``cut`` splits one (oldest < cut <= newest) or, with ``hourly`` (seasonal phases are
    UTC hours), one crosses an hour boundary: a runner bug, reported as the check's error
    instead of a block or phase counted wrong."""
    if spans is None or not len(spans):
        return
    lo, hi = spans[:, 0], spans[:, 1]
    bad = np.zeros(lo.size, dtype=bool)
    if cut is not None:
        bad |= (lo < cut) & (cut <= hi)
    if hourly:
        bad |= lo // _HOUR_NS != hi // _HOUR_NS
    if bad.any():
        raise MonitorError(
            f"{int(bad.sum())} row group(s) whose timestamps were not read span an instant the "
            "check compares them with (a block start or an hour): the runner's cuts were incomplete"
        )


@dataclass(frozen=True, slots=True)
class Pairs:
    """Per-query outcomes of one segment, paired by query id (same order).

    ``extras`` (judged runs): each reported metric's (reference, current) per-query values on
    the same pairs. ``reference_runs`` / ``current_runs``: each pair's runs, for the decay
    test's run labels (None: the sign flips decide on the means)."""

    reference: np.ndarray
    current: np.ndarray
    only_reference: int = 0
    only_current: int = 0
    query_ids: np.ndarray | None = None
    extras: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None
    reference_runs: Runs | None = None
    current_runs: Runs | None = None

    @property
    def n(self) -> int:
        return int(self.reference.size)

    @property
    def coverage(self) -> float:
        total = self.n + self.only_reference
        return self.n / total if total else 0.0


@dataclass(frozen=True, slots=True, eq=False)
class SegmentSummaries:
    """One segment's windows as summaries on a frozen grid (a check through summaries).

    ``reference`` / ``current``: each window's total; ``*_starts``: its buckets' starts (int64
    ns, ascending). ``edges``: the segment's frozen PSI edges (grid points). ``binner`` (from
    the runner) gives the buckets' bin counts on any edges, kept across checks so that a check
    bins only its new buckets (on the segment's edges, and on an anchor's that a newer grid no
    longer has).
    """

    grid: Grid
    edges: np.ndarray
    reference: ScoreSummary
    current: ScoreSummary
    reference_starts: np.ndarray
    current_starts: np.ndarray
    binner: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    bucket_ns: int = 3_600 * 10**9  # the buckets' length: a block ends on a bucket boundary

    def bins(self, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-bucket counts on the right-closed bins of ``edges`` (each a grid point), for the
        reference's and the current window's buckets: (n_buckets x B) int64 each."""
        return self.binner(np.asarray(edges, dtype=np.float64))


@dataclass(frozen=True, slots=True)
class SegmentData:
    """One segment's data for a check. Timestamps are int64 ns and align with their values.

    ``positions`` (optional, only with ``baseline``): ``current`` located in ``baseline``,
    precomputed by a reader that serves many windows against one frozen baseline (the backtest);
    ``reference_phases`` (optional): the reference's per-(phase, bin) counts on ``baseline``'s
    edges, cached by the runner for a fixed reference; ``current_sorted`` (optional):
    ``current`` sorted ascending, made once by a runner that also draws the page's detail
    (its KS and the page's ECDFs then share one sort). The numbers are identical without them.
    """

    reference: np.ndarray
    current: np.ndarray
    current_timestamps: np.ndarray
    pairs: Pairs
    baseline: DriftBaseline | None = None
    positions: BaselinePositions | None = None
    reference_timestamps: np.ndarray | None = None
    reference_phases: np.ndarray | None = None
    summaries: SegmentSummaries | None = None
    current_sorted: np.ndarray | None = None
    current_coarse: np.ndarray | None = None  # ``ScoreWindow.coarse_spans`` (check_coarse)
    reference_coarse: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class CheckData:
    """What the job runner read for one check: windows, per-segment data, freshness.

    Outcomes: ``runs`` complete evaluation runs landed in ``[runs_start, runs_end]`` since the
    last look (0: nothing new to look at), paired with the reference period
    ``[outcome_reference_start, outcome_reference_end)``. ``newest_score`` / ``newest_outcome``
    are the newest rows before ``at``: the windows' (the outcome lookback's), else the source's
    newest when it is before ``at`` (a feed dead for longer than the windows); None: none.
    """

    current_start: datetime
    current_end: datetime
    reference_start: datetime
    reference_end: datetime
    segments: Mapping[str, SegmentData]
    newest_score: datetime | None = None
    newest_outcome: datetime | None = None
    reference_outcome_queries: int = 0
    current_outcome_queries: int = 0
    runs: int = 0
    runs_start: datetime | None = None
    runs_end: datetime | None = None
    runs_rows: int = 0  # rows in [runs_start - decay.run_gap, runs_end] (0: not counted)
    late_rows: int = 0  # rows landed since the last look in that look's span: looked at again
    outcome_reference_start: datetime | None = None
    outcome_reference_end: datetime | None = None
    judged: JudgedCheck | None = None
    # where the rolling outcome reference of this look starts (moved back to end where the
    # look's runs begin after an outage); None: ``reference_start``. A cleared decay's frozen
    # reference is kept while this is before the clearing look's runs
    outcome_rolling_start: datetime | None = None
    # when the runner had read the windows (its clock): a slot checked late (a restart catching
    # up) counts what landed until then; None: ``at``
    read_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class JudgedCheck:
    """How a judged-runs monitor scored this check's outcomes (``outcomes.kind =
    "judged_runs"``): the decision metric, judged@k and its tolerance, and each window's
    ``monitor.judged.JudgedInfo`` (``current`` None when no new run was looked at)."""

    metric: str
    judged_metric: str
    judged_tolerance: float
    condensed: bool
    reference: Any
    current: Any = None


# --------------------------------------------------------------------------- reports
