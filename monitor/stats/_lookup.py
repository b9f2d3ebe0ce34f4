"""Sort-free cell counting: a lookup table from a monotone *slot* of each value to its cell.

``Grid.cells`` binary-searches each value among the G grid points; ``summarize`` used to sort a
chunk first so the searches stay in cache, and the sort bounded it (about 13-20M rows/s on the
2-core machines we measure on). This counts cells in a few passes over the chunk instead:

1. a slot s = f(x) in [0, S) from a function f that is monotone non-decreasing in the float order
   of x (with -0.0 = 0.0): either ``linear``, f(x) = trunc(clip(x c - a c, 0, S - 1)) with
   c = S / (g_G - g_1), or ``bits``, the top bits of the order-preserving integer key of the
   float (k xor ((k >> 63) & 0x7fff...)), offset by the first point's key: logarithmic slots for
   grids that span orders of magnitude;
2. with lo(s) = #{points p : f(p) < s} and hi(s) = #{p : f(p) <= s}, a value in slot s has
   i = #{p < x} in [lo(s), hi(s)] (monotonicity), so in a slot holding no point the value's cell
   is the gap 2 lo(s) and equals no point; ``table[s]`` holds that cell;
3. a slot holding points is *mixed*: ``table[s]`` holds -1 - m, its index among mixed slots.
   When every mixed slot holds one point p (as at S >= 64 G on a quantile grid), the cell is
   2 lo(s) + (x >= p) + (x > p); otherwise ``Grid.cells`` of those values.

The counts equal ``bincount(Grid.cells(x))`` exactly, for every input: the slot only narrows
where the search starts, and every comparison that decides a cell is the float comparison
``Grid.cells`` makes. Which mapping is used, and whether a lookup is worth building at all, is
decided from the grid alone (no clock): the mapping whose mixed slots would hold the least of a
sample that follows the grid's own spacing (a quantile grid's), and none when that is over a
quarter (then sorting is as fast).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

_M = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_MIN_SLOTS_BITS = 12
_MAX_SLOTS_BITS = 20
_SLOTS_PER_POINT = 64
_MAX_MIXED = 0.25
CHUNK = 1 << 16  # values per pass: the chunk's temporaries stay in a core's L2 cache


def _keys(x: NDArray[np.float64]) -> NDArray[np.int64]:
    """Order-preserving int64 keys: key(x) < key(y) iff x < y, for floats other than NaN and
    -0.0 (which keys one below 0.0: callers add 0.0 first)."""
    k = x.view(np.int64)
    s = k >> 63
    s &= _M
    s ^= k
    return s


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
    table: NDArray[np.intp]  # gap cell 2 lo(s), or -1 - m for the m-th mixed slot
    base: NDArray[np.intp]  # 2 lo(s) of each mixed slot
    point: NDArray[np.float64]  # the point of each mixed slot when each holds one
    one: bool  # every mixed slot holds exactly one point
    mixed: float  # estimated share of values in mixed slots

    def slots(self, x: NDArray[np.float64]) -> NDArray[np.intp]:
        """f(x) for finite x (see the module docstring)."""
        if self.kind == "linear":
            with np.errstate(over="ignore"):  # far outside the grid: +-inf, clipped to an end
                t = x * self.scale
                t -= self.offset
            np.clip(t, 0.0, self.n_slots - 1, out=t)
            return t.astype(np.intp)
        k = _keys(x + 0.0)  # -0.0 keys as 0.0: a slot boundary must not split equal values
        np.clip(k, self.kmin, self.kmax, out=k)
        k -= self.kmin  # wraps past 2**63; exact as unsigned
        u = k.view(np.uint64)
        u >>= np.uint64(self.shift)
        return u.view(np.intp)

    def cells_into(
        self, x: NDArray[np.float64], points: NDArray[np.float64], out: NDArray[np.intp]
    ) -> None:
        """Write the cell of each finite value of ``x`` into ``out`` (same length)."""
        for lo in range(0, x.size, CHUNK):
            part = x[lo : lo + CHUNK]
            cells = out[lo : lo + CHUNK]
            np.take(self.table, self.slots(part), out=cells)
            mixed = np.flatnonzero(cells < 0)
            if mixed.size:
                v = part[mixed]
                if self.one:
                    m = -1 - cells[mixed]
                    p = self.point[m]
                    cells[mixed] = self.base[m] + (v >= p) + (v > p)
                else:
                    i = np.searchsorted(points, v, side="left")
                    on = points[np.minimum(i, points.size - 1)] == v
                    cells[mixed] = 2 * i + on


def _table(
    slots_of_points: NDArray[np.intp], n_slots: int, points: NDArray[np.float64]
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64], bool, float]:
    per = np.bincount(slots_of_points, minlength=n_slots)
    hi = np.cumsum(per)
    lo = hi - per
    table = 2 * lo
    mixed = np.flatnonzero(per)
    table[mixed] = -1 - np.arange(mixed.size)
    one = bool(per.max() <= 1)
    point = points[lo[mixed]] if one else np.zeros(0)
    # the share of a quantile-spaced sample in mixed slots: each gap between neighbouring points
    # holds 1/(G - 1) of it, spread over the slots it spans, of which its two ends are mixed
    spans = np.diff(slots_of_points) + 1
    share = float(np.mean(np.minimum(1.0, 2.0 / spans))) if spans.size else 1.0
    return table.astype(np.intp), (2 * lo[mixed]).astype(np.intp), point, one, share


def build_lookup(
    points: NDArray[np.float64], *, kind: str | None = None, bits: int | None = None
) -> Lookup | None:
    """The better lookup for sorted unique finite ``points``, or None when neither would put
    most values in point-free slots. ``kind`` and ``bits`` force a mapping and a table size
    (tests exercise both mappings and slots holding several points with them)."""
    g = int(points.size)
    if g < 2:
        return None
    if bits is None:
        want = max(_MIN_SLOTS_BITS, math.ceil(math.log2(_SLOTS_PER_POINT * g)))
        bits = min(_MAX_SLOTS_BITS, want)
    best: Lookup | None = None
    for k in (kind,) if kind else ("linear", "bits"):
        lk = _linear(points, bits) if k == "linear" else _bits(points, bits)
        if lk is not None and (best is None or lk.mixed < best.mixed):
            best = lk
    if best is None or (kind is None and best.mixed > _MAX_MIXED):
        return None
    return best


def _linear(points: NDArray[np.float64], bits: int) -> Lookup | None:
    n = 1 << bits
    width = float(points[-1]) - float(points[0])
    if not math.isfinite(width) or width <= 0:
        return None
    scale = n / width
    offset = float(points[0]) * scale
    if not (math.isfinite(scale) and math.isfinite(offset)) or scale <= 0:
        return None
    probe = Lookup("linear", n, scale, offset, 0, 0, 0, *_empty())
    s = probe.slots(points)
    table, base, point, one, share = _table(s, n, points)
    return Lookup("linear", n, scale, offset, 0, 0, 0, table, base, point, one, share)


def _bits(points: NDArray[np.float64], bits: int) -> Lookup | None:
    keys = _keys(points + 0.0)
    kmin, kmax = int(keys[0]), int(keys[-1])
    span = kmax - kmin
    shift = max(0, span.bit_length() - bits)
    n = (span >> shift) + 1
    probe = Lookup("bits", n, 0.0, 0.0, kmin, kmax, shift, *_empty())
    s = probe.slots(points)
    table, base, point, one, share = _table(s, n, points)
    return Lookup("bits", n, 0.0, 0.0, kmin, kmax, shift, table, base, point, one, share)


def _empty() -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64], bool, float]:
    z = np.zeros(0, dtype=np.intp)
    return z, z, np.zeros(0), False, 1.0
