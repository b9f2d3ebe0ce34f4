"""The sort-free cell lookup (``monitor.stats._lookup``) against ``Grid.cells``, value by value."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats import Grid, summarize
from monitor.stats import _lookup as lookup
from monitor.stats._lookup import build_lookup
from monitor.stats.summary import _LOOKUP_MIN, _cell_counts

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
scores = st.floats(-10, 10) | st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1e-300, 1e300])


def _near(points: np.ndarray) -> np.ndarray:
    """Each point, its float neighbours and its negation: the values a slot boundary can split."""
    with np.errstate(over="ignore"):
        return np.concatenate(
            [
                points,
                np.nextafter(points, np.inf),
                np.nextafter(points, -np.inf),
                -points,
                points / 3,
            ]
        )


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    points=st.lists(finite | scores, min_size=2, max_size=40, unique=True),
    values=st.lists(finite | scores, max_size=200),
    kind=st.sampled_from(["linear", "bits"]),
    bits=st.sampled_from([1, 3, 6, 12]),
    ends=st.sampled_from([(0, -1), (1, -1), (0, -2), (1, -2)]),
)
def test_lookup_cells_are_grid_cells(
    points: list[float], values: list[float], kind: str, bits: int, ends: tuple[int, int]
) -> None:
    """Every mapping, table size and span (points outside it in the end slots), slots holding
    one point or many, signed zeros, subnormals and the whole float range: the cell of each
    value is ``Grid.cells``'s."""
    grid = Grid(np.unique(np.asarray(points, dtype=np.float64)))
    if grid.points.size < 3:
        ends = (0, -1)
    lk = build_lookup(grid.points, kind=kind, bits=bits, ends=ends)
    if lk is None:  # linear where width or S / width overflows: not built, sorting counts
        assert kind == "linear"
        return
    x = np.concatenate([np.asarray(values, dtype=np.float64), _near(grid.points)])
    x = x[np.isfinite(x)]
    out = np.empty(x.size, dtype=np.int32)
    lk.cells_into(x, grid.points, out)
    np.testing.assert_array_equal(out, grid.cells(x))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    values=st.lists(scores, min_size=1, max_size=300),
    points=st.lists(st.floats(-8, 8), min_size=2, max_size=30, unique=True),
)
def test_a_large_chunk_counts_through_the_lookup_as_value_by_value(
    values: list[float], points: list[float]
) -> None:
    """``_cell_counts`` of a chunk of at least ``_LOOKUP_MIN`` values, not sorted: the cells and
    zeros of a per-value count, whether or not 0 is a grid point."""
    for pts in (np.unique(np.asarray([*points, 0.0])), np.unique(np.asarray(points) + 0.25)):
        grid = Grid(pts)
        x = np.asarray(values, dtype=np.float64)
        reps = -(-_LOOKUP_MIN // x.size) + 1
        big = np.concatenate([x[::-1], *([x] * reps)])
        counts, zeros = _cell_counts(big, grid)
        assert counts is not None
        np.testing.assert_array_equal(counts, np.bincount(grid.cells(big), minlength=grid.n_cells))
        assert zeros == int(np.count_nonzero(big == 0.0))


def test_the_lookup_path_runs_and_rejects_what_is_not_finite() -> None:
    """A quantile grid gets a table; NaN or inf anywhere in a large chunk is refused as the sorting
    path refuses it, and a chunk whose sum overflows while every value is finite is counted."""
    rng = np.random.default_rng(5)
    ref = np.sort(rng.gamma(2.0, size=100_000))
    grid = Grid(np.unique(ref[::100]))
    lk = grid.lookup()
    assert lk is not None
    assert lk.searched < 0.01  # almost every point alone in its slot: settled by comparisons
    x = rng.gamma(2.0, size=50_000)
    assert summarize(x, grid).n == x.size
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[31_337] = bad
        with pytest.raises(Exception, match="finite"):
            summarize(y, grid)
    huge = np.full(_LOOKUP_MIN * 2, 1e308)
    huge[::3] = 1.0
    counts, _ = _cell_counts(huge, grid)
    assert counts is not None
    assert counts[-1] == np.count_nonzero(huge == 1e308)


def test_counts_across_blocks_and_chunks_are_value_by_value() -> None:
    """Counts of more values than a block (several blocks, a short last block and chunk), on
    both mappings, with slots of one point and of several: ``bincount(Grid.cells)``."""
    rng = np.random.default_rng(11)
    x = rng.gamma(2.0, size=2 * lookup.BLOCK + lookup.CHUNK + 17)
    x[rng.random(x.size) < 0.2] = 0.0
    grid = Grid(np.unique(np.concatenate([np.quantile(x, np.linspace(0, 1, 3_001)), [0.0]])))
    expected = np.bincount(grid.cells(x), minlength=grid.n_cells)
    for kind in ("linear", "bits"):
        for bits in (None, 8):  # 8: most slots hold several points, their values searched
            lk = build_lookup(grid.points, kind=kind, bits=bits)
            assert lk is not None
            assert bits is None or lk.searched > 0.5
            np.testing.assert_array_equal(lk.counts(x, grid.points, grid.n_cells), expected)


def test_no_table_where_sorting_is_as_fast_and_none_is_shipped() -> None:
    """One point has no slots to tell apart. Quantiles over 40 orders of magnitude get the
    logarithmic (``bits``) slots, and with a point mass at 0 below them as well (the range then
    starts at the second point). Three clusters each a millionth of its own width apart defeat
    both mappings: no table, nor for a grid of every distinct value (too many points for the
    table's slots). A pickled grid carries its points, not its table (engines ship
    grids to workers)."""
    assert build_lookup(np.array([1.0])) is None
    assert Grid(np.array([1.0])).lookup() is None
    rng = np.random.default_rng(2)
    skewed = np.unique(np.sort(rng.lognormal(0.0, 12.0, 200_000))[::50])
    for points in (skewed, np.unique(np.concatenate([skewed, [0.0]]))):
        chosen = build_lookup(points)
        assert chosen is not None
        assert chosen.kind == "bits"
    clusters = np.concatenate(
        [
            np.linspace(0, 1e-12, 1000),
            np.linspace(1, 1 + 1e-12, 1000),
            np.linspace(1e6, 1e6 + 1e-6, 1000),
        ]
    )
    assert build_lookup(clusters) is None
    assert Grid(clusters).lookup() is None
    every_value = np.arange(300_000.0)  # a full grid: fewer than 4 slots a point at most
    assert build_lookup(every_value) is None
    assert build_lookup(every_value, kind="linear") is not None  # forced, it is built
    grid = Grid(np.linspace(0.0, 1.0, 5_001))
    assert grid.lookup() is not None
    wire = pickle.dumps(grid)
    assert len(wire) < grid.points.nbytes + 1_000
    shipped = pickle.loads(wire)  # as a worker unpickles it
    np.testing.assert_array_equal(shipped.points, grid.points)
    table = shipped.lookup()
    assert table is not None
    assert pickle.loads(wire).lookup() is table  # the next task's grid: the table is not rebuilt
    other = pickle.loads(pickle.dumps(Grid(np.linspace(0.0, 2.0, 5_001))))
    assert other.lookup() is not table
