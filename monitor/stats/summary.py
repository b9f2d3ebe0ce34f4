"""Mergeable score summaries on a frozen grid: PSI bit-equal to ``psi``, a bracket around KS D.

A :class:`Grid` is a sorted set of finite points g_1 < ... < g_G (the PSI bin edges, the
reference's minimum and maximum, and reference quantiles). It has 2G + 1 *cells*: each point
itself (values equal to it) and each open gap (-inf, g_1), (g_1, g_2), ..., (g_G, +inf). A
:class:`ScoreSummary` holds the cell counts of a set of scores plus their row, invalid and zero
counts and newest timestamp; ``a + b`` merges two summaries of the same grid exactly
(associative and commutative), so a window's summary is the sum of its partitions' (hours,
files, Spark or Dask partitions).

From two summaries:

* :func:`psi_from_summaries`: counts on the PSI bins are sums of whole cells (the edges are grid
  points, bins are right-closed), so PSI, its tolerance-null p-value and noise floor are those
  of :func:`monitor.stats.psi` on the same edges, bit for bit.
* :func:`ks_bracket`: D_lo <= D <= D_hi. The ECDFs are known exactly at every grid point and
  just left of it (F(g-)); inside an open gap (a, b) they can move by at most the gap's mass, so
  D_hi = max(D_lo, max over gaps holding both samples of max(F_x(b-) - F_y(a), F_y(b-) - F_x(a))).
  D_hi - D_lo <= the largest open-cell mass. When no gap holds mass of both samples (a grid of
  every distinct value of one sample), D_lo = D_hi = today's exact D. The p-value range follows
  from the KS distribution (p is decreasing in D). No quantile sketch is used: KLL or t-digest
  ranks fed into the exact-sample formula reject a true null at large n.
* :func:`summary_grid`: how many reference quantiles a grid needs so that the bracket moves the
  test statistic sqrt(N_eff) D by at most ``max_effect`` (0.1): open cells of reference mass
  <= max_effect / sqrt(N_eff).
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.errors import InsufficientDataError, StatsInputError
from monitor.stats import _validation as v
from monitor.stats._lookup import Lookup, build_lookup, search_cells
from monitor.stats.drift import _KS_EXACT_MAX_N, PSIResult, _ks_asymp_sf, _ks_exact_sf, _result

__all__ = [
    "Cells",
    "Grid",
    "KSBracket",
    "ScoreSummary",
    "bin_ends",
    "cells_to_bins",
    "ks_bracket",
    "psi_from_summaries",
    "summarize",
    "summary_grid",
]


@dataclass(frozen=True, slots=True, eq=False)
class Grid:
    """Sorted unique finite grid points; cell 2i + 1 is point i, cell 2i the gap below it."""

    points: NDArray[np.float64]
    _memo: tuple[Lookup | None] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        v.refuse_masked(self.points, "points")
        pts = np.asarray(self.points, dtype=np.float64)
        if pts.ndim != 1 or pts.size == 0 or not np.all(np.isfinite(pts)):
            raise StatsInputError(
                f"`points` must be a non-empty 1-D array of finite numbers; got {pts!r}."
            )
        if pts.size > 1 and not bool(np.all(pts[1:] > pts[:-1])):
            raise StatsInputError("`points` must be strictly increasing.")
        pts = pts.copy()
        pts.flags.writeable = False
        object.__setattr__(self, "points", pts)

    @property
    def n_cells(self) -> int:
        """2G + 1."""
        return 2 * int(self.points.size) + 1

    def cells(self, values: NDArray[np.float64]) -> NDArray[np.intp]:
        """The cell of each value: 2i + 1 if it equals point i, else 2i for the gap below it."""
        return search_cells(self.points, values)

    def holds(self, values: ArrayLike) -> bool:
        """Whether every one of ``values`` is a grid point (a few binary searches)."""
        v.refuse_masked(values, "values")
        return bool(self._points_at(np.asarray(values, dtype=np.float64)) is not None)

    def _points_at(self, values: NDArray[np.float64]) -> NDArray[np.intp] | None:
        """The index of each of ``values`` among the points; None if one is no point."""
        pts = self.points
        at = np.searchsorted(pts, values)
        if values.size and (
            np.any(at >= pts.size) or not np.array_equal(pts[np.minimum(at, pts.size - 1)], values)
        ):
            return None
        return at

    def same(self, other: Grid) -> bool:
        """Whether ``other`` has the same points (summaries merge only on one grid)."""
        return self is other or bool(np.array_equal(self.points, other.points))

    def lookup(self) -> Lookup | None:
        """The sort-free cell lookup of this grid (built on first use, kept), or None when
        sorting counts as fast (see ``monitor.stats._lookup``)."""
        memo = self._memo
        if memo is None:
            memo = (build_lookup(self.points),)
            object.__setattr__(self, "_memo", memo)  # a cache: racing builds agree
        return memo[0]

    def __reduce__(self) -> tuple[object, ...]:
        # the points only: engines ship a grid with every task; a worker unpickles the grid it
        # had before (by content), so its lookup is built once per worker process, not per task
        return (_shipped_grid, (self.points,))


_SHIPPED: dict[bytes, Grid] = {}  # the grids unpickled last in this process, by content
_SHIPPED_MAX = 4
_SHIPPED_LOCK = threading.Lock()


def _shipped_grid(points: NDArray[np.float64]) -> Grid:
    """The grid of ``points``, the same object as the last one unpickled with them."""
    pts = np.ascontiguousarray(points, dtype=np.float64)
    key = hashlib.blake2b(pts.tobytes(), digest_size=16).digest()
    with _SHIPPED_LOCK:  # a worker may unpickle on several threads
        grid = _SHIPPED.get(key)
        if grid is None or not np.array_equal(grid.points, pts):
            grid = Grid(pts)
            while len(_SHIPPED) >= _SHIPPED_MAX:
                _SHIPPED.pop(next(iter(_SHIPPED)))
            _SHIPPED[key] = grid
    return grid


@dataclass(frozen=True, slots=True, eq=False)
class ScoreSummary:
    """Cell counts of finite scores on ``grid``, with ``rows`` seen, ``invalid`` ones dropped
    (null, NaN, inf: not in the cells), ``zeros`` (scores exactly 0) and the newest timestamp
    (int ns, None when unknown). ``a + b`` merges."""

    grid: Grid
    counts: NDArray[np.int64]
    rows: int
    invalid: int
    zeros: int
    newest_ns: int | None = None
    _n: int = field(default=-1, init=False, repr=False)  # ``n``, once summed

    @property
    def n(self) -> int:
        """Finite scores summarised: the counts' sum, kept once summed when the counts are a
        read-only array that owns its data (as every constructor here leaves them; a view's
        base could still change), summed each time otherwise. A check asks for it a dozen
        times, a sum over 2G+1 cells each."""
        if self._n >= 0:
            return self._n
        n = int(self.counts.sum())
        if not self.counts.flags.writeable and self.counts.flags.owndata:
            object.__setattr__(self, "_n", n)
        return n

    def out_of_range(self, reference: ScoreSummary) -> int:
        """Scores in the cells below ``reference``'s first non-empty cell or above its last:
        outside the reference's range, as ``psi`` counts them (``x < min`` or ``x > max`` of
        the reference). Exact when the reference's minimum and maximum are grid points (a full
        grid, or a segment whose extremes ``summary_grid`` took); otherwise the scores in the
        reference's outermost open cells count as in range. Per reference, not per grid: a
        grid joins every segment's points, and its span is the widest segment's (a segment's
        scores beyond its own reference but inside another's once counted as in range)."""
        held = np.flatnonzero(reference.counts)
        if held.size == 0:
            return self.n
        lo, hi = int(held[0]), int(held[-1])
        return int(self.counts[:lo].sum() + self.counts[hi + 1 :].sum())

    def __reduce__(self) -> tuple[object, ...]:
        # pickled by its non-zero cells: an hour's summary on a fine grid is mostly zeros, and
        # engines ship summaries between processes
        c = Cells.of(self)
        return (
            _unpickle,
            (self.grid, c.index, c.count, self.rows, self.invalid, self.zeros, self.newest_ns),
        )

    def __add__(self, other: ScoreSummary) -> ScoreSummary:
        if not isinstance(other, ScoreSummary):
            return NotImplemented
        if not self.grid.same(other.grid):
            raise StatsInputError("summaries on different grids cannot be merged.")
        newest = [t for t in (self.newest_ns, other.newest_ns) if t is not None]
        counts = self.counts + other.counts
        counts.flags.writeable = False
        return ScoreSummary(
            grid=self.grid,
            counts=counts,
            rows=self.rows + other.rows,
            invalid=self.invalid + other.invalid,
            zeros=self.zeros + other.zeros,
            newest_ns=max(newest) if newest else None,
        )


def _unpickle(
    grid: Grid,
    index: NDArray[np.int64],
    count: NDArray[np.int64],
    rows: int,
    invalid: int,
    zeros: int,
    newest_ns: int | None,
) -> ScoreSummary:
    counts = np.zeros(grid.n_cells, dtype=np.int64)
    counts[index] = count
    counts.flags.writeable = False
    return ScoreSummary(grid, counts, rows, invalid, zeros, newest_ns)


@dataclass(frozen=True, slots=True, eq=False)
class Cells:
    """A summary's non-zero cells (``index`` ascending, ``count`` > 0) and its scalars: the
    compact form a cache holds for each bucket (an hour's scores touch few cells of a fine
    grid). ``total`` adds many back into one :class:`ScoreSummary`."""

    index: NDArray[np.int64]
    count: NDArray[np.int64]
    rows: int
    invalid: int
    zeros: int
    newest_ns: int | None = None
    n: int = -1  # the scores (the counts' sum): given or computed once

    def __post_init__(self) -> None:
        if self.n < 0:
            object.__setattr__(self, "n", int(self.count.sum()))

    @staticmethod
    def of(summary: ScoreSummary) -> Cells:
        index = np.flatnonzero(summary.counts).astype(np.int64, copy=False)
        return Cells(
            index,
            summary.counts[index].astype(np.int64, copy=False),
            summary.rows,
            summary.invalid,
            summary.zeros,
            summary.newest_ns,
        )

    @property
    def nbytes(self) -> int:
        return int(self.index.nbytes + self.count.nbytes)

    def bins(self, ends: NDArray[np.intp]) -> NDArray[np.int64]:
        """Counts on the bins ending at ``ends`` (see :func:`bin_ends`): bin b holds the cells
        from ``ends[b - 1]`` (0 for the first) up to ``ends[b]``. The bins' first cells are
        found in ``index`` (B searches, not one per cell) and each non-empty bin's counts summed
        in one ``add.reduceat``: 6 against 127 us for an hour of 250k rows (18k cells)."""
        upto = np.searchsorted(self.index, ends, side="left")  # cells before each bin's end
        first = np.concatenate(([0], upto[:-1]))
        filled = first < upto
        out = np.zeros(ends.size, dtype=np.int64)
        if filled.any():  # a bin's cells run up to the next filled bin's first, the last to the end
            out[filled] = np.add.reduceat(self.count, first[filled], dtype=np.int64)
        return out

    @staticmethod
    def total(grid: Grid, parts: list[Cells]) -> ScoreSummary:
        """The merged summary of ``parts`` on ``grid`` (exact: integer counts)."""
        counts = np.zeros(grid.n_cells, dtype=np.int64)
        for c in parts:
            counts[c.index] += c.count  # indices are unique within one part
        counts.flags.writeable = False
        newest = [c.newest_ns for c in parts if c.newest_ns is not None]
        return ScoreSummary(
            grid,
            counts,
            sum(c.rows for c in parts),
            sum(c.invalid for c in parts),
            sum(c.zeros for c in parts),
            max(newest) if newest else None,
        )


def summarize(
    values: ArrayLike,
    grid: Grid,
    *,
    invalid: int = 0,
    newest_ns: int | None = None,
) -> ScoreSummary:
    """The summary of finite ``values`` on ``grid`` (``invalid`` rows dropped upstream are
    counted in ``rows`` and ``invalid``)."""
    if not isinstance(grid, Grid):
        raise StatsInputError(f"`grid` must be a Grid; got {type(grid).__name__}.")
    v.refuse_masked(values, "values")
    x = np.asarray(values, dtype=np.float64)
    invalid = v.integer(invalid, "invalid", minimum=0)
    counts, zeros = _cell_counts(x, grid) if x.ndim == 1 else (None, 0)
    if counts is None:  # not 1-D, or a value not finite
        raise StatsInputError("`values` must be a 1-D array of finite numbers.")
    counts.flags.writeable = False
    return ScoreSummary(
        grid=grid,
        counts=counts,
        rows=int(x.size) + invalid,
        invalid=invalid,
        zeros=zeros,
        newest_ns=None if newest_ns is None else int(newest_ns),
    )


def _cell_counts(
    x: NDArray[np.float64], grid: Grid
) -> tuple[NDArray[np.int64], int] | tuple[None, int]:
    """Cell counts and the count of zeros of 1-D ``x``; ``(None, 0)`` when a value is not
    finite. All ways count a value equal to a point in the point's cell (so -0.0 counts as 0.0).

    * An unsorted chunk of at least ``_LOOKUP_MIN`` values on a grid with a lookup table: the
      cell of each value from its slot (``monitor.stats._lookup``: a few passes, no sort), then
      ``bincount``. Finite when the sum is (else checked value by value: a finite sum can
      overflow).
    * Otherwise the chunk is sorted first (not when it is sorted already, as a sorted reference
      is): binary searches of ascending keys stay in cache. For a chunk at least twice the
      grid's size, binary-search every grid point into it (the point's own cell is the run equal
      to it: searched a second time only for the points the chunk holds); for a smaller one,
      binary-search each value into the grid (``Grid.cells``) and ``bincount``. A sorted chunk
      is finite when its ends are (NaN sorts last, -inf first), so two values are checked."""
    if x.size == 0:
        return np.zeros(grid.n_cells, dtype=np.int64), 0
    ordered = _sorted(x)
    if x.size >= _LOOKUP_MIN and not ordered:
        lookup = grid.lookup()
        if lookup is not None:
            with np.errstate(over="ignore", invalid="ignore"):  # checked value by value then
                total = float(np.add.reduce(x))
            if not (math.isfinite(total) or bool(np.isfinite(x).all())):
                return None, 0
            lut_counts = lookup.counts(x, grid.points, grid.n_cells)
            z = int(np.searchsorted(grid.points, 0.0))
            if z < grid.points.size and grid.points[z] == 0.0:
                return lut_counts, int(lut_counts[2 * z + 1])
            return lut_counts, int(np.count_nonzero(x == 0.0))
    xs = x if ordered else np.sort(x)  # a sorted reference: no sort
    if not (math.isfinite(xs[0]) and math.isfinite(xs[-1])):
        return None, 0
    if xs.size < 2 * grid.points.size:
        counts = np.bincount(grid.cells(xs), minlength=grid.n_cells).astype(np.int64, copy=False)
        return counts, int(np.count_nonzero(xs == 0.0))
    points = grid.points
    left = np.searchsorted(xs, points, side="left")
    held = np.flatnonzero(xs[np.minimum(left, xs.size - 1)] == points)  # the points present
    right = left.copy()
    right[held] = np.searchsorted(xs, points[held], side="right")
    counts = np.empty(grid.n_cells, dtype=np.int64)
    counts[1::2] = right - left  # on each point
    counts[0] = left[0]  # below the first point
    counts[2:-1:2] = left[1:] - right[:-1]  # the open gaps between points
    counts[-1] = xs.size - right[-1]  # above the last point
    zeros = int(np.searchsorted(xs, 0.0, side="right") - np.searchsorted(xs, 0.0, side="left"))
    return counts, zeros


_LOOKUP_MIN = 4096  # below it a chunk sorts in cache and a cold table costs more than it saves


def _sorted(x: NDArray[np.float64]) -> bool:
    """Whether ``x`` is ascending (NaN breaks it): a short prefix first, so an unsorted chunk
    costs a few comparisons, not a pass."""
    head = x[:64]
    if not bool(np.all(head[1:] >= head[:-1])):
        return False
    return bool(np.all(x[1:] >= x[:-1]))


def summary_grid(
    sorted_reference: ArrayLike,
    edges: ArrayLike,
    *,
    n_current: int,
    max_effect: float = 0.1,
    n_reference: int | None = None,
) -> Grid:
    """A grid for a reference sample (sorted) and its PSI ``edges``.

    Points: the edges, the reference's minimum and maximum, and the reference quantiles at
    k/Q (lower, type 1: actual sample values), Q = ceil(sqrt(N_eff) / max_effect) with
    N_eff = n m / (n + m), so no open cell holds more than 1/Q of the reference (of the
    sample, when ``sorted_reference`` is a sample of a reference of ``n_reference`` rows: n is
    then ``n_reference``, and Q at most the sample's size).
    """
    v.refuse_masked(sorted_reference, "sorted_reference")
    v.refuse_masked(edges, "edges")
    ref = np.asarray(sorted_reference, dtype=np.float64)
    if ref.ndim != 1 or ref.size == 0 or not np.all(np.isfinite(ref)):
        raise StatsInputError("`sorted_reference` must be a non-empty 1-D array of finite numbers.")
    if ref.size > 1 and not bool(np.all(ref[1:] >= ref[:-1])):
        raise StatsInputError("`sorted_reference` must be sorted ascending.")
    n_current = v.integer(n_current, "n_current", minimum=1)
    max_effect = v.real(max_effect, "max_effect", low=0.0)
    if max_effect <= 0:
        raise StatsInputError(f"`max_effect` must be > 0; got {max_effect!r}.")
    n = ref.size if n_reference is None else v.integer(n_reference, "n_reference", minimum=1)
    n_eff = n * n_current / (n + n_current)
    q = min(max(1, math.ceil(math.sqrt(n_eff) / max_effect)), max(ref.size, 1))
    idx = np.unique(np.minimum((np.arange(1, q) * ref.size) // q, ref.size - 1))
    points = np.unique(np.concatenate([np.asarray(edges, np.float64), ref[idx], ref[[0, -1]]]))
    return Grid(points)


def psi_from_summaries(
    reference: ScoreSummary,
    current: ScoreSummary,
    edges: ArrayLike,
    *,
    tolerance: float = 0.0,
    smoothing: float = 0.5,
    bins: tuple[ArrayLike, ArrayLike] | None = None,
) -> PSIResult:
    """PSI of two summaries on right-closed bins with inner ``edges`` (each a grid point): the
    same numbers as ``psi(build_baseline(reference), current)`` with those edges, bit for bit
    (``out_of_range_rate``: see ``ScoreSummary.out_of_range``).

    ``bins``: both summaries' counts on those bins when the caller holds them (a check sums
    its buckets' bin rows: B numbers a bucket, not 2G+1 cells a window, 0.15 ms less at
    G = 18k); ``StatsInputError`` unless each has B entries summing to its summary's ``n``."""
    _same_grid(reference, current)
    for name, s in (("reference", reference), ("current", current)):
        if s.n == 0:  # as psi() says of an empty sample (it once divided by zero)
            raise InsufficientDataError(f"`{name}` holds no scores.", needed=1, got=0)
    ends = bin_ends(reference.grid, edges)
    tolerance = v.real(tolerance, "tolerance", low=0.0)
    smoothing = v.real(smoothing, "smoothing", low=0.0)
    if bins is None:
        ref, cur = cells_to_bins(reference.counts, ends), cells_to_bins(current.counts, ends)
    else:
        ref, cur = (np.array(b, dtype=np.int64) for b in bins)
        for name, got, summary in (("reference", ref, reference), ("current", cur, current)):
            if got.shape != ends.shape or int(got.sum()) != summary.n:
                raise StatsInputError(
                    f"`bins` for the {name} must hold {ends.size} counts summing to its "
                    f"{summary.n} scores; got shape {got.shape} summing to {int(got.sum())}."
                )
    ref.flags.writeable = False
    return _result(
        ref.astype(np.float64),
        cur.astype(np.float64),
        ref,
        cur,
        reference.n,
        current.out_of_range(reference),
        tolerance,
        smoothing,
    )


def bin_ends(grid: Grid, edges: ArrayLike) -> NDArray[np.intp]:
    """For right-closed bins with inner ``edges`` (each a grid point): the cell index one past
    each bin's last cell (bin b ends with edge b's point cell, 2 i_b + 1; the last bin with the
    last cell), for :func:`cells_to_bins`. ``StatsInputError`` if an edge is not a grid point."""
    v.refuse_masked(edges, "edges")
    at = grid._points_at(np.asarray(edges, dtype=np.float64))
    if at is None:
        raise StatsInputError("every PSI edge must be a grid point.")
    ends: NDArray[np.intp] = np.concatenate([2 * at + 2, [grid.n_cells]]).astype(np.intp)
    return ends


def cells_to_bins(counts: NDArray[np.int64], ends: NDArray[np.intp]) -> NDArray[np.int64]:
    """Bin counts from cell counts (the last axis; any leading axes, e.g. one row per bucket):
    bin b sums the cells from ``ends[b - 1]`` (0 for the first) up to ``ends[b]``. One
    ``add.reduceat`` pass when the ends rise strictly to the last cell (as ``bin_ends`` makes
    them); else the cumulative counts at the ends, differenced."""
    c = np.asarray(counts)
    e = np.asarray(ends, dtype=np.intp)
    n = c.shape[-1]
    if e.size and e[-1] == n and e[0] > 0 and (e.size == 1 or bool(np.all(e[1:] > e[:-1]))):
        starts = np.concatenate(([0], e[:-1]))
        summed: NDArray[np.int64] = np.add.reduceat(c, starts, axis=-1, dtype=np.int64)
        return summed
    cum = np.cumsum(c, axis=-1)
    pad = [(0, 0)] * (cum.ndim - 1) + [(1, 0)]
    upto = np.pad(cum, pad)[..., e]
    out: NDArray[np.int64] = np.diff(upto, axis=-1, prepend=0).astype(np.int64)
    return out


@dataclass(frozen=True, slots=True)
class KSBracket:
    """D_lo <= D <= D_hi and the p-values they give (``pvalue_high`` = p(D_lo)); ``exact`` when
    the bracket has collapsed; ``method`` 'exact' or 'asymp' as ``ks_2samp``."""

    statistic_low: float
    statistic_high: float
    pvalue_low: float
    pvalue_high: float
    max_open_mass: float
    method: str
    location: float | None = None

    @property
    def exact(self) -> bool:
        """Whether D_lo == D_hi (the grid resolves D)."""
        return self.statistic_low == self.statistic_high

    @property
    def width(self) -> float:
        """D_hi - D_lo (at most ``max_open_mass``); times sqrt(N_eff) it is how far the bracket
        can move the test statistic."""
        return self.statistic_high - self.statistic_low


def ks_bracket(x: ScoreSummary, y: ScoreSummary, *, method: str = "auto") -> KSBracket:
    """Two-sided KS bracket of summaries ``x`` and ``y`` (see the module docstring)."""
    _same_grid(x, y)
    method = v.choice(method, "method", ("auto", "exact", "asymp"))
    n, m = x.n, y.n
    if n == 0 or m == 0:
        raise StatsInputError("both summaries must hold at least one score.")
    # d = i m - j n at every cell end (i, j: counts up to it; point ends are F(g), gap ends
    # F(g-)), as one cumulative sum of the cells' own differences: |d| <= n m, which fits
    # int64 below 2^63 and past it is summed in Python integers (int64 wrapped silently: at
    # 2^33 rows a side a D of 0.25 came out 0)
    wide = n * m >= 1 << 63
    xm = (x.counts.astype(object) if wide else x.counts) * m
    yn = (y.counts.astype(object) if wide else y.counts) * n
    d = np.cumsum(xm - yn)
    k_all = np.abs(d)
    at = int(np.argmax(k_all))
    k_lo = int(k_all[at])
    pts = x.grid.points
    # a point cell's end is F(g); a gap cell's end is F(g-) of the point above it
    location = float(pts[min(at // 2, pts.size - 1)]) if k_lo > 0 else None
    # Inside open cell i (the even ones) both CDFs rise from their values at the end of point
    # i - 1 (d_before; 0 before the first): the gap is largest with all of one side's mass in
    # and none of the other's, d_before + x_i m or y_i n - d_before, where both hold mass.
    xm_open, yn_open = xm[0::2], yn[0::2]
    both = (xm_open > 0) & (yn_open > 0)
    d_before = np.concatenate(([0], d[1::2]))
    up = np.maximum(d_before + xm_open, yn_open - d_before)
    k_hi = max(k_lo, int(up.max(where=both, initial=k_lo)))
    x_open, y_open = x.counts[0::2], y.counts[0::2]
    open_mass = max(int(x_open.max()) / n, int(y_open.max()) / m)
    if method == "auto":
        method = "exact" if max(n, m) <= _KS_EXACT_MAX_N else "asymp"

    def p(k: int) -> float:
        if method == "exact":
            value = _ks_exact_sf(k, n, m, "two-sided")
        else:
            value = _ks_asymp_sf(k / (n * m), n, m, "two-sided")
        return min(max(value, 0.0), 1.0)

    return KSBracket(
        statistic_low=k_lo / (n * m),
        statistic_high=k_hi / (n * m),
        pvalue_low=p(k_hi),
        pvalue_high=p(k_lo),
        max_open_mass=open_mass,
        method=method,
        location=location,
    )


def _same_grid(a: ScoreSummary, b: ScoreSummary) -> None:
    if not isinstance(a, ScoreSummary) or not isinstance(b, ScoreSummary):
        raise StatsInputError("both arguments must be ScoreSummary objects.")
    if not a.grid.same(b.grid):
        raise StatsInputError("the summaries must share one grid.")
