"""Mergeable summaries (issue 13's summary layer): exact merges, PSI bit-equal to ``psi``, and a
KS bracket that holds scipy's D and collapses to it on a fine enough grid."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from monitor.errors import InsufficientDataError, StatsInputError
from monitor.stats import (
    Cells,
    Grid,
    ScoreSummary,
    bin_ends,
    build_baseline,
    ks_2samp,
    ks_bracket,
    psi,
    psi_from_summaries,
    summarize,
    summary_grid,
)

# scores with ties and a point mass at 0, as top-1 retrieval scores have
values = st.lists(
    st.one_of(st.just(0.0), st.floats(0, 20, allow_nan=False).map(lambda x: round(x, 1))),
    min_size=5,
    max_size=300,
)


def _grid(ref: np.ndarray, cur_n: int, max_effect: float = 0.1):  # type: ignore[no-untyped-def]
    b = build_baseline(ref)
    return b, summary_grid(b.sorted_reference, b.edges, n_current=cur_n, max_effect=max_effect)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(values, values, values)
def test_merge_is_exact_associative_and_commutative(
    a: list[float], b: list[float], c: list[float]
) -> None:
    grid = Grid(np.unique(np.asarray(a)))
    sa, sb, sc = (summarize(x, grid, newest_ns=i) for i, x in enumerate((a, b, c)))
    whole = summarize(a + b + c, grid)
    for merged in ((sa + sb) + sc, sa + (sb + sc), sc + sb + sa):
        np.testing.assert_array_equal(merged.counts, whole.counts)
        assert merged.rows == whole.rows
        assert merged.zeros == whole.zeros
        assert merged.newest_ns == 2


@settings(max_examples=150, deadline=None, derandomize=True)
@given(values, values)
def test_psi_is_bit_equal_to_psi_on_the_same_edges(ref: list[float], cur: list[float]) -> None:
    r, c = np.asarray(ref), np.asarray(cur)
    baseline, grid = _grid(r, c.size)
    want = psi(baseline, c, tolerance=0.02)
    sr, sc = summarize(r, grid), summarize(c, grid)
    got = psi_from_summaries(sr, sc, baseline.edges, tolerance=0.02)
    # as a check does: the bins summed from its buckets' bin rows (here, three parts a window)
    ends = bin_ends(grid, baseline.edges)
    rows = [
        np.sum([Cells.of(summarize(part, grid)).bins(ends) for part in np.array_split(x, 3)], 0)
        for x in (r, c)
    ]
    given_bins = psi_from_summaries(sr, sc, baseline.edges, tolerance=0.02, bins=(rows[0], rows[1]))
    for result in (got, given_bins):
        for field in (
            "statistic",
            "pvalue",
            "noise_floor",
            "debiased",
            "n_eff",
            "out_of_range_rate",
        ):
            assert getattr(result, field) == getattr(want, field), field
        np.testing.assert_array_equal(result.current_counts, want.current_counts)
        np.testing.assert_array_equal(result.reference_counts, want.reference_counts)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(values, values, values)
def test_out_of_range_is_the_segments_own_reference_range(
    ref: list[float], cur: list[float], other: list[float]
) -> None:
    """A monitor's grid joins every segment's points: its span is the widest segment's, and a
    segment's current scores beyond its own reference's range count as out of range there
    too (once they counted only beyond the joined grid's ends)."""
    r, c = np.asarray(ref), np.asarray(cur)
    baseline, own = _grid(r, c.size)
    wider = np.asarray(other) * 3.0 - 10.0  # another segment's range, around this one's
    grid = Grid(np.unique(np.concatenate([own.points, wider])))
    got = psi_from_summaries(summarize(r, grid), summarize(c, grid), baseline.edges)
    want = psi(baseline, c)
    assert got.out_of_range_rate == want.out_of_range_rate
    assert got.statistic == want.statistic


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values, values, st.sampled_from([0.05, 0.5, 5.0]))
def test_ks_bracket_holds_the_exact_d(ref: list[float], cur: list[float], effect: float) -> None:
    r, c = np.asarray(ref), np.asarray(cur)
    _, grid = _grid(r, c.size, effect)
    br = ks_bracket(summarize(r, grid), summarize(c, grid))
    d = ks_2samp(r, c).statistic
    assert br.statistic_low - 1e-15 <= d <= br.statistic_high + 1e-15
    assert br.width <= br.max_open_mass + 1e-12
    assert br.pvalue_low <= br.pvalue_high


def _widest_gap(x: np.ndarray, y: np.ndarray, n: int, m: int) -> tuple[int, int]:
    """Cell by cell, in plain Python: the largest |i m - j n| at a cell end (D_lo n m) and at
    any placement of the open cells' mass (D_hi n m: one side's cell counted in, the other's
    not, where both hold some)."""
    i = j = 0
    lo = hi = 0
    for k, (a, b) in enumerate(zip(x.tolist(), y.tolist(), strict=True)):
        if k % 2 == 0 and a > 0 and b > 0:
            hi = max(hi, (i + a) * m - j * n, (j + b) * n - i * m)
        i, j = i + a, j + b
        lo = max(lo, abs(i * m - j * n))
    return lo, max(hi, lo)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values, values, st.sampled_from([0.05, 0.5, 5.0]))
def test_ks_bracket_is_the_tightest_the_cells_allow(
    ref: list[float], cur: list[float], effect: float
) -> None:
    """The bracket's ends are exactly the cell-by-cell extremes (not merely around D)."""
    r, c = np.asarray(ref), np.asarray(cur)
    _, grid = _grid(r, c.size, effect)
    x, y = summarize(r, grid), summarize(c, grid)
    br = ks_bracket(x, y)
    lo, hi = _widest_gap(x.counts, y.counts, x.n, y.n)
    assert br.statistic_low == lo / (x.n * y.n)
    assert br.statistic_high == hi / (x.n * y.n)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.data(), st.integers(1, 12))
def test_ks_bracket_is_exact_past_int64_products(data: st.DataObject, points: int) -> None:
    """Windows whose n m passes 2^63 (the design note's 1 B vs 10 B rows): the products
    wrapped in int64 without a warning (a D of 0.25 at 2^33 rows a side came out 0, p = 1)."""
    cells = 2 * points + 1
    counts = st.lists(st.integers(0, 1 << 40), min_size=cells, max_size=cells).filter(any)
    grid = Grid(np.arange(points, dtype=np.float64))
    x, y = (
        ScoreSummary(grid, np.array(c, dtype=np.int64), sum(c), 0, 0)
        for c in (data.draw(counts), data.draw(counts))
    )
    br = ks_bracket(x, y)
    lo, hi = _widest_gap(x.counts, y.counts, x.n, y.n)
    assert br.statistic_low == lo / (x.n * y.n)
    assert br.statistic_high == hi / (x.n * y.n)
    assert br.pvalue_low <= br.pvalue_high


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(st.integers(0, 10**12), min_size=1, max_size=40),
    st.lists(st.integers(0, 45), max_size=8),
    st.integers(1, 3),
)
def test_cells_to_bins_sums_each_bins_cells(counts: list[int], cuts: list[int], rows: int) -> None:
    """Bin b holds the cells from ends[b - 1] (0 first) to ends[b], in one reduceat pass or (ends
    not strictly rising to the last cell) by the cumulative path, for one row or several."""
    from monitor.stats import cells_to_bins

    c = np.asarray(counts, dtype=np.int64)
    ends = np.asarray([*sorted(min(k, c.size) for k in cuts), c.size], dtype=np.intp)
    want = [sum(counts[(ends[b - 1] if b else 0) : e]) for b, e in enumerate(ends)]
    np.testing.assert_array_equal(cells_to_bins(c, ends), want)
    stacked = np.stack([c * (k + 1) for k in range(rows)])
    np.testing.assert_array_equal(
        cells_to_bins(stacked, ends), [[w * (k + 1) for w in want] for k in range(rows)]
    )


@settings(max_examples=150, deadline=None, derandomize=True)
@given(values, values)
def test_a_grid_of_every_reference_value_collapses_to_todays_ks(
    ref: list[float], cur: list[float]
) -> None:
    r, c = np.asarray(ref), np.asarray(cur)
    grid = Grid(np.unique(r))
    br = ks_bracket(summarize(r, grid), summarize(c, grid))
    want = ks_2samp(r, c)
    assert br.exact
    assert br.statistic_low == pytest.approx(want.statistic, abs=1e-15)
    assert br.pvalue_high == pytest.approx(want.pvalue, rel=1e-12, abs=1e-15)
    sp = stats.ks_2samp(r, c, method="asymp")  # D does not depend on the method
    assert br.statistic_low == pytest.approx(sp.statistic, abs=1e-15)


def test_grid_size_follows_the_windows_and_bounds_the_bracket() -> None:
    """sqrt(N_eff) (D_hi - D_lo) <= max_effect when both samples come from one distribution."""
    g = np.random.default_rng(5)
    ref = np.where(g.random(200_000) < 0.2, 0.0, g.lognormal(1.0, 0.6, 200_000))
    cur = np.where(g.random(100_000) < 0.2, 0.0, g.lognormal(1.0, 0.6, 100_000))
    _, grid = _grid(ref, cur.size)
    n_eff = ref.size * cur.size / (ref.size + cur.size)
    q = math.ceil(math.sqrt(n_eff) / 0.1)
    ref_summary = summarize(ref, grid)
    open_cells = ref_summary.counts[0::2]  # the gaps; the zero mass sits on a point cell
    assert open_cells.max() / ref.size <= 1 / q + 1 / ref.size
    br = ks_bracket(ref_summary, summarize(cur, grid))
    d = ks_2samp(ref, cur).statistic
    assert br.statistic_low <= d <= br.statistic_high
    assert math.sqrt(n_eff) * br.width <= 0.1 * 1.5  # the current's cells are near 1/Q too
    assert br.method == "asymp"


def test_summary_iv() -> None:
    grid = Grid(np.array([0.0, 1.0]))
    with pytest.raises(StatsInputError, match="strictly increasing"):
        Grid(np.array([1.0, 0.0]))
    with pytest.raises(StatsInputError, match="finite"):
        Grid(np.array([0.0, np.inf]))
    with pytest.raises(StatsInputError, match="finite numbers"):
        summarize([0.0, np.nan], grid)
    for bad in (np.nan, np.inf, -np.inf):  # found at the sorted chunk's ends, wherever it was
        for ramp, at in itertools.product(
            (np.linspace(-1, 2, 3), np.linspace(-1, 2, 200)), (0, 1, -1)
        ):
            for x in (ramp.copy(), ramp[::-1].copy()):
                x[at] = bad
                with pytest.raises(StatsInputError, match="finite numbers"):
                    summarize(x, grid)
    with pytest.raises(StatsInputError, match="different grids"):
        _ = summarize([0.0], grid) + summarize([0.0], Grid(np.array([0.0])))
    with pytest.raises(StatsInputError, match="every PSI edge must be a grid point"):
        psi_from_summaries(summarize([0.0], grid), summarize([1.0], grid), [0.5])
    one, two = summarize([0.0], grid), summarize([1.0, 1.0], grid)
    with pytest.raises(StatsInputError, match="current must hold 2 counts summing to its 2"):
        psi_from_summaries(one, two, [0.0], bins=([1, 0], [1, 0]))  # a count short
    with pytest.raises(StatsInputError, match="reference must hold 2 counts"):
        psi_from_summaries(one, two, [0.0], bins=([1], [0, 2]))
    with pytest.raises(StatsInputError, match="at least one score"):
        ks_bracket(summarize([], grid), summarize([1.0], grid))
    for ref, cur, name in (
        (one, summarize([], grid), "current"),
        (summarize([], grid), one, "reference"),
    ):
        with pytest.raises(InsufficientDataError, match=f"`{name}` holds no scores"):
            psi_from_summaries(ref, cur, [0.0])  # once a bare ZeroDivisionError
    with pytest.raises(StatsInputError, match="max_effect"):
        summary_grid(np.array([0.0, 1.0]), [0.5], n_current=3, max_effect=0.0)


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(
        st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.0, 7.0, 1e-300, 5.0]) | st.floats(-10, 10),
        min_size=0,
        max_size=400,
    ),
    points=st.lists(st.floats(-8, 8), min_size=1, max_size=12, unique=True),
)
def test_both_counting_ways_agree(values: list[float], points: list[float]) -> None:
    """The sorted-chunk way (chunks of at least 2 grid sizes) and the per-value way (smaller
    ones) give the cells and zeros of an independent per-value count, ties and signed zeros
    included (sizes 0 to 3,600 against grids of 2 to 14 points run both)."""
    from monitor.stats.summary import _cell_counts

    grid = Grid(np.unique(np.asarray([*points, 0.0, 1.0])))
    x = np.asarray(values, dtype=np.float64)
    per_value = np.bincount(grid.cells(x), minlength=grid.n_cells)
    big = np.concatenate([x] * 9) if x.size else x
    small, zeros_small = _cell_counts(x, grid)  # either way, by the chunk's size
    assert small is not None
    np.testing.assert_array_equal(small, per_value)
    assert zeros_small == int(np.count_nonzero(x == 0.0))
    counts, zeros = _cell_counts(big, grid)
    np.testing.assert_array_equal(counts, 9 * per_value)
    assert zeros == 9 * int(np.count_nonzero(x == 0.0))
    presorted, zeros_sorted = _cell_counts(np.sort(big), grid)  # the no-sort shortcut
    np.testing.assert_array_equal(presorted, counts)
    assert zeros_sorted == zeros
    runs, _ = _cell_counts(np.concatenate([np.sort(x)] * 9), grid)  # sorted head, not sorted
    np.testing.assert_array_equal(runs, counts)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(values, values, values)
def test_cells_are_the_summary_compacted(a: list[float], b: list[float], c: list[float]) -> None:
    """Cells (a cache's form) and pickles (an engine's transport) lose nothing: totals, bins on
    any grid edges and the pickled summary equal the dense ones."""
    import pickle

    from monitor.stats import Cells, bin_ends, cells_to_bins

    grid = Grid(np.unique(np.asarray([*a, 0.5])))
    parts = [summarize(x, grid, newest_ns=i) for i, x in enumerate((a, b, c))]
    whole = parts[0] + parts[1] + parts[2]
    total = Cells.total(grid, [Cells.of(p) for p in parts])
    np.testing.assert_array_equal(total.counts, whole.counts)
    assert (total.rows, total.zeros, total.newest_ns) == (whole.rows, whole.zeros, 2)
    pts = grid.points
    edge_sets = [pts[:: max(1, pts.size // 3)], pts, pts[:1], pts[-1:], pts[pts.size // 2 :]]
    for ends in (bin_ends(grid, e) for e in edge_sets):  # empty bins first, last, between
        for p in [*parts, summarize([], grid)]:
            np.testing.assert_array_equal(Cells.of(p).bins(ends), cells_to_bins(p.counts, ends))
    for p in parts:
        back = pickle.loads(pickle.dumps(p))
        np.testing.assert_array_equal(back.counts, p.counts)
        assert (back.rows, back.invalid, back.zeros, back.newest_ns) == (
            p.rows,
            p.invalid,
            p.zeros,
            p.newest_ns,
        )


def test_a_summarys_size_is_kept_only_while_its_counts_cannot_change() -> None:
    from monitor.stats import ScoreSummary

    grid = Grid(np.array([0.0, 1.0]))
    s = summarize([0.0, 0.5, 2.0], grid)
    assert s.n == 3 == s.n  # read-only counts: summed once, kept
    counts = np.array([0, 1, 0, 2, 0], dtype=np.int64)  # a caller's writeable array
    loose = ScoreSummary(grid, counts, 3, 0, 0)
    assert loose.n == 3
    counts[1] = 5
    assert loose.n == 7  # summed again, never a stale size
    view = counts[:]  # a read-only view of a writeable array: its base may change
    view.flags.writeable = False
    viewed = ScoreSummary(grid, view, 7, 0, 0)
    assert viewed.n == 7
    counts[3] = 0
    assert viewed.n == 5
