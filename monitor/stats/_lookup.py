"""Sort-free cell counting: a lookup table from a monotone *slot* of each value to its cell.

``Grid.cells`` binary-searches each value among the G grid points; ``summarize`` used to sort a
chunk first so the searches stay in cache, and the sort bounded it (18-22M rows/s on the Zen 4
VM we measure on, whose AVX-512 sort numpy uses but Zen 4 runs slowly; 119-122M there with
numpy's AVX2 kernels, ``monitor.cpu``; 94-206M on the first machine's AVX-512). This counts
cells in a few passes over the chunk instead:

1. a slot s = f(x) in [0, S) from a function f that is monotone non-decreasing in the float order
   of x (with -0.0 = 0.0), over a span [a, b] of the points (the first or second to the last or
   the one before; values beyond clip to the end slots): either ``linear``,
   f(x) = trunc(clip(x c - a c, 0, S - 1)) with c = S / (b - a), or ``bits``, the top bits of
   the order-preserving integer key of the float (k xor ((k >> 63) & 0x7fff...)) less a's key,
   clipped to b's: logarithmic slots for grids that span orders of magnitude;
2. with lo(s) = #{points p : f(p) < s} and hi(s) = #{p : f(p) <= s}, a value in slot s has
   i = #{p < x} in [lo(s), hi(s)] (monotonicity), so in a slot holding no point the value's cell
   is the gap 2 lo(s) and equals no point; ``table[s]`` holds that cell;
3. a slot holding points is *mixed*: ``table[s]`` holds -1 - m, its index among mixed slots.
   When no slot holds more than 4 points p_1 < ... < p_k, the cell is
   2 lo(s) + sum_j [(x >= p_j) + (x > p_j)] (2 #{p_j < x} + [x equals one]); otherwise a
   binary search of those values among the points, as ``Grid.cells`` does.

The counts equal ``bincount(Grid.cells(x))`` exactly, for every input: the slot only narrows
where the search starts, and every comparison that decides a cell is the float comparison
``Grid.cells`` makes. Which mapping is used, and whether a lookup is worth building at all, is
decided from the grid alone (no clock): the mapping whose mixed slots would hold the least of a
sample that follows the grid's own spacing (a quantile grid's), and none when that is most of it
(then sorting is as fast). The table has 16 slots a point, at most 2^19 (2 MiB): a smaller
table stays in cache between checks, and a second point in a slot costs two comparisons.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

_M = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_MIN_SLOTS_BITS = 12
_MAX_SLOTS_BITS = 19  # a table of at most 2 MiB (int32)
_SLOTS_PER_POINT = 16
_MAX_MIXED = 0.6  # mixed slots settled by comparisons: cheap, but not free
_MAX_SEARCHED = 0.25  # mixed slots settled by binary search
_MAX_COMPARED = 4  # mixed slots of up to this many points: compared with each, else searched
CHUNK = 1 << 15  # values per pass: the scratch and the chunk stay in a core's L2 cache
BLOCK = 1 << 18  # values per bincount: its output is the grid's size, made once a block


def _keys(x: NDArray[np.float64], out: NDArray[np.int64]) -> NDArray[np.int64]:
    """Order-preserving int64 keys into ``out``: key(x) < key(y) iff x < y, for floats other
    than NaN and -0.0 (which keys one below 0.0: callers add 0.0 first)."""
    k = x.view(np.int64)
    np.right_shift(k, 63, out=out)
    out &= _M
    out ^= k
    return out


def search_cells(points: NDArray[np.float64], values: NDArray[np.float64]) -> NDArray[np.intp]:
    """The cell of each value by binary search among ``points`` (sorted, not empty): 2i + 1
    if it equals point i, else 2i for the gap below it (``Grid.cells``)."""
    i = np.searchsorted(points, values, side="left")
    on = points[np.minimum(i, points.size - 1)] == values
    cells: NDArray[np.intp] = 2 * i + on
    return cells


@dataclass(frozen=True, slots=True, eq=False)
class Lookup:
    """A slot function and its table for one grid (see the module docstring)."""

    kind: str  # "linear" | "bits"
    n_slots: int
    scale: float  # linear: c
    offset: float  # linear: a c
    kmin: int  # bits: the first point's key
    kmax: int  # bits: the last point's key
    shift: int  # bits: slot = (key - kmin) >> shift
    table: NDArray[np.int32]  # gap cell 2 lo(s), or -1 - m for the m-th mixed slot
    base: NDArray[np.int32]  # 2 lo(s) of each mixed slot
    columns: tuple[NDArray[np.float64], ...]  # j-th point of each mixed slot (inf: none), or ()
    mixed: float  # estimated share of values in mixed slots

    def slots(self, x: NDArray[np.float64]) -> NDArray[np.intp]:
        """f(x) for finite x (see the module docstring)."""
        return self._slots(x, np.empty(x.size), np.empty(x.size, dtype=np.intp))

    def _slots(
        self, x: NDArray[np.float64], work: NDArray[np.float64], out: NDArray[np.intp]
    ) -> NDArray[np.intp]:
        """f(x) into ``out``, with ``work`` as scratch (both as long as ``x``)."""
        if self.kind == "linear":
            with np.errstate(over="ignore"):  # far outside the grid: +-inf, clipped to an end
                np.multiply(x, self.scale, out=work)
                work -= self.offset
            np.clip(work, 0.0, self.n_slots - 1, out=work)
            np.copyto(out, work, casting="unsafe")  # truncation, as astype
            return out
        np.add(x, 0.0, out=work)  # -0.0 keys as 0.0: a slot boundary must not split them
        s = _keys(work, out.view(np.int64))
        np.clip(s, self.kmin, self.kmax, out=s)
        s -= self.kmin  # wraps past 2**63; exact as unsigned
        u = s.view(np.uint64)
        u >>= np.uint64(self.shift)
        return out

    def cells_into(
        self, x: NDArray[np.float64], points: NDArray[np.float64], out: NDArray[np.int32]
    ) -> None:
        """Write the cell of each finite value of ``x`` into ``out`` (same length)."""
        n = min(CHUNK, x.size)
        work, slots = np.empty(n), np.empty(n, dtype=np.intp)
        for lo in range(0, x.size, CHUNK):
            part = x[lo : lo + CHUNK]
            m = part.size
            self._cells(part, points, work[:m], slots[:m], out[lo : lo + CHUNK])

    def counts(
        self, x: NDArray[np.float64], points: NDArray[np.float64], n_cells: int
    ) -> NDArray[np.int64]:
        """``bincount`` of the cells of finite ``x`` (length ``n_cells``), by blocks of
        ``BLOCK`` values and chunks of ``CHUNK``, through scratch arrays allocated once per
        call: no temporary as long as ``x``. A fresh large array is a new mapping and a page
        fault a page wherever malloc's mmap threshold is pinned, as Dask pins its workers'
        (``MALLOC_TRIM_THRESHOLD_``): there a cells array of the whole chunk doubled the
        cost of a summary."""
        total = np.zeros(n_cells, dtype=np.int64)
        n = min(CHUNK, x.size)
        work, slots, cells = np.empty(n), np.empty(n, dtype=np.intp), np.empty(n, np.int32)
        block = np.empty(min(BLOCK, x.size), dtype=np.intp)  # bincount takes intp, uncast
        for b0 in range(0, x.size, BLOCK):
            xb = x[b0 : b0 + BLOCK]
            for lo in range(0, xb.size, CHUNK):
                part = xb[lo : lo + CHUNK]
                m = part.size
                self._cells(part, points, work[:m], slots[:m], cells[:m])
                block[lo : lo + m] = cells[:m]
            total += np.bincount(block[: xb.size], minlength=n_cells)
        return total

    def _cells(
        self,
        part: NDArray[np.float64],
        points: NDArray[np.float64],
        work: NDArray[np.float64],
        slots: NDArray[np.intp],
        cells: NDArray[np.int32],
    ) -> None:
        np.take(self.table, self._slots(part, work, slots), out=cells)
        mixed = np.flatnonzero(cells < 0)
        if not mixed.size:
            return
        v = part[mixed]
        if self.columns:  # each mixed slot holds at most len(columns) points (inf-padded)
            which = -1 - cells[mixed]
            cell = self.base[which]
            for column in self.columns:
                p = column[which]
                cell += v >= p
                cell += v > p
            cells[mixed] = cell
        else:
            cells[mixed] = search_cells(points, v)


def _table(
    slots_of_points: NDArray[np.intp], n_slots: int, points: NDArray[np.float64]
) -> tuple[NDArray[np.int32], NDArray[np.int32], tuple[NDArray[np.float64], ...]]:
    per = np.bincount(slots_of_points, minlength=n_slots)
    hi = np.cumsum(per)
    lo = hi - per
    table = 2 * lo
    mixed = np.flatnonzero(per)
    table[mixed] = -1 - np.arange(mixed.size)
    columns: tuple[NDArray[np.float64], ...] = ()
    if per.max() <= _MAX_COMPARED:
        ext = np.append(points, np.inf)
        first, count = lo[mixed], per[mixed]
        columns = tuple(
            ext[np.where(j < count, first + j, points.size)] for j in range(int(per.max()))
        )
    return table.astype(np.int32), (2 * lo[mixed]).astype(np.int32), columns


def _share(slots_of_points: NDArray[np.intp]) -> tuple[float, bool]:
    """The share of a quantile-spaced sample in mixed slots (each gap between neighbouring
    points holds 1/(G - 1) of it, spread over the slots it spans, of which its two ends are
    mixed), and whether no slot holds more than ``_MAX_COMPARED`` points."""
    steps = np.diff(slots_of_points)  # f is monotone: the points' slots ascend
    share = float(np.mean(np.minimum(1.0, 2.0 / (steps + 1)))) if steps.size else 1.0
    starts = np.flatnonzero(np.concatenate(([1], steps)))  # the first point of each slot
    per = np.diff(np.append(starts, slots_of_points.size))
    return share, bool(per.max() <= _MAX_COMPARED)


def build_lookup(
    points: NDArray[np.float64],
    *,
    kind: str | None = None,
    bits: int | None = None,
    ends: tuple[int, int] = (0, -1),
) -> Lookup | None:
    """The lookup for sorted unique finite ``points`` whose mixed slots would hold the least of
    a quantile-spaced sample, among those that hold at most ``_MAX_MIXED`` of it (settled by
    comparisons) or ``_MAX_SEARCHED`` (slots of more than ``_MAX_COMPARED`` points: searched);
    None when none does. S = 2^bits slots, bits = ceil(log2(16 G)) within [12, 19]. Each
    mapping spans the points from the first or the second (a point mass at 0 below quantiles
    of a long tail wastes the logarithmic slots between them) to the last or the one before (an
    outlier above): values beyond go to the end slots. ``kind``, ``bits`` and ``ends`` (the
    indices of the points spanned) force a mapping, a table size and its span (tests exercise
    every mapping, and slots holding several points, with them)."""
    g = int(points.size)
    if g < 2 or 2 * g + 1 > np.iinfo(np.int32).max:  # cells as int32
        return None
    if kind is None and 4 * g > 1 << _MAX_SLOTS_BITS:  # a grid of every distinct value: at
        return None  # most 2 slots a point would leave most values in mixed slots
    if bits is None:
        want = max(_MIN_SLOTS_BITS, math.ceil(math.log2(_SLOTS_PER_POINT * g)))
        bits = min(_MAX_SLOTS_BITS, want)
    spans = [ends] if kind or g < 4 else [(0, -1), (1, -1), (0, -2), (1, -2)]
    best: tuple[float, Lookup, NDArray[np.intp]] | None = None
    for k in (kind,) if kind else ("linear", "bits"):
        for first, last in spans:
            probe = _probe(k, points[first], points[last], bits)
            if probe is None:
                continue
            slots = probe.slots(points)
            share, compared = _share(slots)
            if kind is None and share > (_MAX_MIXED if compared else _MAX_SEARCHED):
                continue
            if best is None or share < best[0]:
                best = (share, probe, slots)
    if best is None:
        return None
    share, probe, slots = best
    table, base, columns = _table(slots, probe.n_slots, points)
    return dataclasses.replace(probe, table=table, base=base, columns=columns, mixed=share)


def _probe(kind: str, low: float, high: float, bits: int) -> Lookup | None:
    """The slot function of ``kind`` over [low, high], without its table."""
    if not low <= high:
        return None
    z = np.zeros(0, dtype=np.int32)
    if kind == "linear":
        n = 1 << bits
        width = float(high) - float(low)
        if not math.isfinite(width) or width <= 0:
            return None
        scale = n / width
        offset = float(low) * scale
        if not (math.isfinite(scale) and math.isfinite(offset)) or scale <= 0:
            return None
        return Lookup("linear", n, scale, offset, 0, 0, 0, z, z, (), 1.0)
    keys = _keys(np.array([low, high], dtype=np.float64) + 0.0, np.empty(2, np.int64))
    kmin, kmax = int(keys[0]), int(keys[1])
    span = kmax - kmin
    shift = max(0, span.bit_length() - bits)
    return Lookup("bits", (span >> shift) + 1, 0.0, 0.0, kmin, kmax, shift, z, z, (), 1.0)
