"""Sort-free cell counting: a lookup table from a monotone *slot* of each value to its cell.

``Grid.cells`` binary-searches each value among the G grid points; ``summarize`` used to sort a
chunk first so the searches stay in cache, and the sort bounded it (18-22M rows/s on the Zen 4
VM we measure on, whose AVX-512 sort numpy uses but Zen 4 runs slowly; 119-122M there with
numpy's AVX2 kernels, ``monitor.cpu``; 94-206M on the first machine's AVX-512). This counts
cells in a few passes over the chunk instead:

1. a slot s = f(x) in [0, S) from a function f that is monotone non-decreasing in the float order
   of x (with -0.0 = 0.0), over a span [a, b] of the points (the first or second to the last or
   the one before; values beyond clip to the end slots): either ``linear``,
   f(x) = trunc(clip(x c, o, o + S - 1) - o) with c = (S - 1) / (b - a) and o = a c - 1 (slot 0
   holds what is below a; each step rounds monotonically; the result is in [0, S], S only where
   o + S - 1 rounds up, |o| far above S), or
   ``bits``, the top bits of the order-preserving integer key of the float
   (k xor ((k >> 63) & 0x7fff...)) less a's key, clipped to b's: logarithmic slots for grids
   that span orders of magnitude;
2. with lo(s) = #{points p : f(p) < s}, the points at or below a value x in slot s are among
   the first lo(s) + #{p : f(p) = s} (monotonicity: p <= x gives f(p) <= s, and f(p) < s gives
   p < x). When s holds at most one point, let p be point lo(s) (+inf past the last point):
   the points before it are below x, the ones after it above (their slots are above s), so
   the cell of x is 2 lo(s) + [x >= p] + [x > p]: the gap below p, p itself, or the gap above.
   ``table[s]`` holds 2 lo(s), and one gather of p and two comparisons settle every value,
   the same passes whatever its slot (no branch on which slots hold a point);
3. a slot holding two points or more is marked (``table[s] = MULTI``) and its values are
   binary-searched among the points, as ``Grid.cells`` does.

The counts equal ``bincount(Grid.cells(x))`` exactly, for every input: the slot only narrows
where the search starts, and every comparison that decides a cell is the float comparison
``Grid.cells`` makes. Which mapping is used, and whether a lookup is worth building at all, is
decided from the grid alone (no clock): the mapping that leaves the fewest points sharing a
slot (the values near them are searched), and none when that is more than ``_MAX_SEARCHED``
of them (then sorting is as fast). The table has 8 slots a point, at most 2^18 (1 MiB): 16 a
point and 2 MiB counted 10M values 3-4 % slower.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

_M = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_MIN_SLOTS_BITS = 12
_MAX_SLOTS_BITS = 18  # a table of at most 1 MiB (int32): a core's L2 cache on Zen 4
_SLOTS_PER_POINT = 8  # few points share a slot (0-0.15 % of quantile grids' points)
_MAX_POINTS = 1 << 17  # more: a grid of every distinct value, most points would share slots
_MAX_SEARCHED = 0.1  # points sharing a slot: the values near them are binary-searched
MULTI = 1 << 30  # the table entry of a slot of several points (cells are below it)
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
    offset: float  # linear: o = a c - 1
    top: float  # linear: o + S - 1
    kmin: int  # bits: the first point's key
    kmax: int  # bits: the last point's key
    shift: int  # bits: slot = (key - kmin) >> shift
    table: NDArray[np.int32]  # 2 lo(s), or MULTI for a slot of several points
    ext: NDArray[np.float64]  # the points, then +inf
    searched: float  # the share of the points that share a slot

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
            np.clip(work, self.offset, self.top, out=work)
            np.subtract(work, self.offset, out=out, casting="unsafe")  # truncated, as astype
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
        scratch = _Scratch(min(CHUNK, x.size))
        for lo in range(0, x.size, CHUNK):
            part = x[lo : lo + CHUNK]
            cells = self._cells(part, scratch)
            _search(part, points, cells)
            out[lo : lo + CHUNK] = cells

    def counts(
        self, x: NDArray[np.float64], points: NDArray[np.float64], n_cells: int
    ) -> NDArray[np.int64]:
        """``bincount`` of the cells of finite ``x`` (length ``n_cells``), by blocks of
        ``BLOCK`` values (cells by chunks of ``CHUNK``, then the block's values in slots of
        several points searched at once), through scratch arrays allocated once per call: no
        temporary as long as ``x``. A fresh large array is a new mapping and a page fault a
        page wherever malloc's mmap threshold is pinned, as Dask pins its workers'
        (``MALLOC_TRIM_THRESHOLD_``): there a cells array of the whole chunk doubled the cost
        of a summary."""
        total = np.zeros(n_cells, dtype=np.int64)
        scratch = _Scratch(min(CHUNK, x.size))
        block = np.empty(min(BLOCK, x.size), dtype=np.intp)  # bincount takes intp, uncast
        for b0 in range(0, x.size, BLOCK):
            xb = x[b0 : b0 + BLOCK]
            for lo in range(0, xb.size, CHUNK):
                part = xb[lo : lo + CHUNK]
                block[lo : lo + part.size] = self._cells(part, scratch)
            cells = block[: xb.size]
            _search(xb, points, cells)
            total += np.bincount(cells, minlength=n_cells)
        return total

    def _cells(self, part: NDArray[np.float64], scratch: _Scratch) -> NDArray[np.int32]:
        """2 lo(s) + [x >= p] + [x > p] for each value of ``part``, in ``scratch`` (MULTI or
        above for a value to search)."""
        m = part.size
        cells, index = scratch.cells[:m], scratch.index[:m]
        p, flags, above = scratch.p[:m], scratch.flags[:m], scratch.above[:m]
        slots = self._slots(part, scratch.work[:m], index)
        # a value's slot can pass the table's end where o + S - 1 rounded up (module docstring);
        # the last entry is then its cell's, as no point lies above it ("raise" would refuse)
        np.take(self.table, slots, out=cells, mode="clip")
        np.right_shift(cells, 1, out=index)  # lo(s); MULTI's is past the end: clipped to inf
        np.take(self.ext, index, out=p, mode="clip")
        ge, gt = np.greater_equal(part, p, out=flags), np.greater(part, p, out=above)
        both = np.add(ge.view(np.uint8), gt.view(np.uint8), out=flags.view(np.uint8))
        cells += both  # one widening add, not two (bools add as bytes: 0, 1 or 2)
        return cells


class _Scratch:
    """The per-chunk arrays of one ``counts`` or ``cells_into`` call, allocated once."""

    __slots__ = ("above", "cells", "flags", "index", "p", "work")

    def __init__(self, n: int) -> None:
        self.work, self.p = np.empty(n), np.empty(n)
        self.index = np.empty(n, dtype=np.intp)
        self.cells = np.empty(n, dtype=np.int32)
        self.flags, self.above = np.empty(n, dtype=np.bool_), np.empty(n, dtype=np.bool_)


def _search(
    part: NDArray[np.float64],
    points: NDArray[np.float64],
    cells: NDArray[np.int32] | NDArray[np.intp],
) -> None:
    """Replace each entry of ``cells`` at or above MULTI by its value's cell, searched."""
    marked = np.flatnonzero(cells >= MULTI)  # few or none: the index fill rarely branches
    if marked.size:
        cells[marked] = search_cells(points, part[marked])


def _table(slots_of_points: NDArray[np.intp], n_slots: int) -> NDArray[np.int32]:
    """2 lo(s) for each slot, MULTI for a slot of several points."""
    per = np.bincount(slots_of_points, minlength=n_slots)
    table = 2 * (np.cumsum(per) - per)
    table[per > 1] = MULTI
    return table.astype(np.int32)


def _searched(slots_of_points: NDArray[np.intp]) -> float:
    """The share of the points that share a slot (f is monotone: the points' slots ascend, so
    a shared slot is a run of equal neighbours)."""
    same = np.diff(slots_of_points) == 0
    shared = np.zeros(slots_of_points.size, dtype=bool)
    shared[1:] |= same
    shared[:-1] |= same
    return float(np.mean(shared))


def build_lookup(
    points: NDArray[np.float64],
    *,
    kind: str | None = None,
    bits: int | None = None,
    ends: tuple[int, int] = (0, -1),
) -> Lookup | None:
    """The lookup for sorted unique finite ``points`` that leaves the fewest of them sharing a
    slot, when that is at most ``_MAX_SEARCHED`` of them; None when none does. S = 2^bits
    slots, bits = ceil(log2(8 G)) within [12, 18]. Each mapping spans the points from the
    first or the second (a point mass at 0 below quantiles of a long tail wastes the
    logarithmic slots between them) to the last or the one before (an outlier above): values
    beyond go to the end slots. ``kind``, ``bits`` and ``ends`` (the indices of the points
    spanned) force a mapping, a table size and its span (tests exercise every mapping, and
    slots holding several points, with them)."""
    g = int(points.size)
    if g < 2 or 2 * g + 1 >= MULTI:
        return None
    if kind is None and g > _MAX_POINTS:
        return None
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
            share = _searched(slots)
            if kind is None and share > _MAX_SEARCHED:
                continue
            if best is None or share < best[0]:
                best = (share, probe, slots)
    if best is None:
        return None
    share, probe, slots = best
    table = _table(slots, probe.n_slots)
    return dataclasses.replace(probe, table=table, ext=np.append(points, np.inf), searched=share)


def _probe(kind: str, low: float, high: float, bits: int) -> Lookup | None:
    """The slot function of ``kind`` over [low, high], without its table."""
    if not low <= high:
        return None
    z, e = np.zeros(0, dtype=np.int32), np.zeros(0)
    if kind == "linear":
        n = 1 << bits
        width = float(high) - float(low)
        if not math.isfinite(width) or width <= 0:
            return None
        scale = (n - 1) / width  # slot 0 is below the span: a point mass at its start (or
        offset = float(low) * scale - 1.0  # at the first point, left out) is alone in a slot
        top = offset + (n - 1)
        if not (math.isfinite(scale) and math.isfinite(top)) or scale <= 0:
            return None
        return Lookup("linear", n, scale, offset, top, 0, 0, 0, z, e, 1.0)
    keys = _keys(np.array([low, high], dtype=np.float64) + 0.0, np.empty(2, np.int64))
    kmin, kmax = int(keys[0]), int(keys[1])
    span = kmax - kmin
    shift = max(0, span.bit_length() - bits)
    return Lookup("bits", (span >> shift) + 1, 0.0, 0.0, 0.0, kmin, kmax, shift, z, e, 1.0)
