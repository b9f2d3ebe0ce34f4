"""Drift of a score distribution: PSI against a frozen baseline, two-sample KS, point-mass rate.

Conventions (see ``docs/statistics.md``):

* Bin edges are the reference quantiles at k/B, k = 1..B-1 (linear interpolation, numpy's default
  ``method='linear'``), with duplicates collapsed (``np.unique``); B_eff = len(edges) + 1.
* Bins are right-closed with open ends: (-inf, e1], (e1, e2], ..., (ek, +inf). A point mass at the
  reference minimum (e.g. exact-zero BM25 scores) gets its own bin, and values outside the reference
  range land in the outer bins instead of being dropped.
* PSI = sum_b (p_b - q_b) ln(p_b / q_b), p = current and q = reference proportions after adding
  ``smoothing`` (default 0.5) to every count of both vectors.
* Under H0 (same distribution) N_eff * PSI ~ chi2(B_eff - 1) with N_eff = n m / (n + m); the
  tolerance null H0: PSI <= tolerance uses a noncentral chi2 with noncentrality tolerance * N_eff.
* KS: D = sup |F_x - F_y| over the pooled sample with right-continuous ECDFs, computed on integers
  (i m - j n) so ties and float round-off cannot move it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from monitor.errors import InsufficientDataError, StatsInputError
from monitor.stats import _dist
from monitor.stats import _validation as v

__all__ = [
    "BaselinePositions",
    "DriftBaseline",
    "DriftResult",
    "KSResult",
    "PSIResult",
    "ProportionResult",
    "baseline_positions",
    "build_baseline",
    "drift_tests",
    "ks_2samp",
    "proportion_test",
    "proportion_test_counts",
    "psi",
    "psi_from_counts",
    "psi_test_counts",
]

# Elements per chunk in the streaming loops: bounds temporary memory to a few tens of MB.
_CHUNK = 1 << 20
# Elements per chunk of the KS rank arithmetic: small enough that its int64 temporaries stay in
# the CPU cache (about 3x faster than 1M-element chunks on 1M keys).
_KS_CHUNK = 1 << 16
# Values per chunk of `_rank_keys` on sorted values: the slice of the reference they are searched
# in stays in the CPU cache.
_SEARCH_CHUNK = 1 << 14
# scipy's `ks_2samp(method='auto')` switches to the asymptotic p-value above this sample size.
_KS_EXACT_MAX_N = 10_000
# Above this effective n, `_ks_asymp_sf` replaces scipy's exact 2 smirnov(n, D) tail (O(n) terms)
# by its expansion; scipy's `kstwo.sf` takes that branch when n D^2 >= 2.2.
_KS_SMIRNOV_MAX_N = 10_000
_KS_SMIRNOV_Z2 = 2.2


# --------------------------------------------------------------------------------------------
# PSI


@dataclass(frozen=True, slots=True)
class DriftBaseline:
    """The frozen reference of a drift check: its sorted sample and its bin edges.

    ``edges`` are the inner edges (unique reference quantiles at k/B, k = 1..B-1, linear
    interpolation); ``reference_counts`` the reference counts in the right-closed bins
    (-inf, e1], (e1, e2], ..., (ek, +inf). Arrays are read-only.
    """

    sorted_reference: NDArray[np.float64]
    edges: NDArray[np.float64]
    reference_counts: NDArray[np.int64]
    bins: int

    @property
    def n_reference(self) -> int:
        """Size of the reference sample."""
        return int(self.sorted_reference.size)

    @property
    def n_bins(self) -> int:
        """B_eff = len(edges) + 1, the number of bins after collapsing duplicate quantiles."""
        return int(self.edges.size) + 1

    @property
    def reference_min(self) -> float:
        """Smallest reference value."""
        return float(self.sorted_reference[0])

    @property
    def reference_max(self) -> float:
        """Largest reference value."""
        return float(self.sorted_reference[-1])


def build_baseline(reference: ArrayLike, *, bins: int = 10) -> DriftBaseline:
    """Freeze a reference sample: sort it once and compute its quantile bin edges.

    Edges are ``np.unique(np.quantile(reference, np.arange(1, B) / B))`` (linear, type 7),
    computed directly on the sorted array (bit-identical to ``np.quantile``, no extra copy).
    """
    bins = v.integer(bins, "bins", minimum=2)
    ref = v.sample(reference, "reference")
    ordered = np.sort(ref)
    probs = np.arange(1, bins) / bins
    edges = np.unique(_sorted_quantiles(ordered, probs))
    upper = np.searchsorted(ordered, edges, side="right")
    counts = np.diff(np.concatenate(([0], upper, [ordered.size]))).astype(np.int64)
    for arr in (ordered, edges, counts):
        arr.flags.writeable = False
    return DriftBaseline(sorted_reference=ordered, edges=edges, reference_counts=counts, bins=bins)


def _sorted_quantiles(
    ordered: NDArray[np.float64], probs: NDArray[np.float64]
) -> NDArray[np.float64]:
    """numpy's ``method='linear'`` quantiles of an already sorted array, with numpy's arithmetic.

    virtual index h = (n - 1) q; value = a + (b - a) g, or b - (b - a)(1 - g) when g >= 0.5, with
    a = x[floor(h)], b = x[floor(h) + 1] and g = h - floor(h) (numpy's ``_lerp``).
    """
    n = ordered.size
    virtual = (n - 1) * probs
    below = np.floor(virtual)
    gamma = virtual - below
    lo = below.astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    a, b = ordered[lo], ordered[hi]
    diff = b - a
    out = a + diff * gamma
    upper = gamma >= 0.5
    out[upper] = (b - diff * (1 - gamma))[upper]
    return out


@dataclass(frozen=True, slots=True)
class PSIResult:
    """PSI of a current sample against a baseline, with its null calibration.

    ``empty_bins`` counts bins empty in the current sample; ``empty_reference_bins`` those empty in
    the reference (possible with few reference values). ``noise_floor`` = (B_eff - 1)(1/n + 1/m),
    the expected PSI under H0; ``debiased`` = max(PSI - noise_floor, 0).
    """

    statistic: float
    pvalue: float
    n_bins: int
    reference_counts: NDArray[np.int64]
    current_counts: NDArray[np.int64]
    n_reference: int
    n_current: int
    n_eff: float
    empty_bins: int
    out_of_range_rate: float
    noise_floor: float
    debiased: float
    tolerance: float
    smoothing: float
    empty_reference_bins: int


def psi_from_counts(
    reference_counts: ArrayLike, current_counts: ArrayLike, *, smoothing: float = 0.5
) -> float:
    """PSI = sum_b (p_b - q_b) ln(p_b / q_b) of two count vectors over the same bins.

    p_b = (c_b + s) / (m + s B), q_b = (r_b + s) / (n + s B), s = ``smoothing`` (additive, on both
    vectors). With ``smoothing=0`` a bin empty on one side only gives +inf; a bin empty on both
    sides contributes 0.
    """
    smoothing = v.real(smoothing, "smoothing", low=0.0)
    ref = _counts(reference_counts, "reference_counts")
    cur = _counts(current_counts, "current_counts")
    if ref.size != cur.size:
        raise StatsInputError(
            f"`reference_counts` and `current_counts` must have the same length; "
            f"got {ref.size} and {cur.size}."
        )
    return _psi_value(ref, cur, smoothing)


def _counts(x: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = v.sample(x, name)
    if arr.size < 2:
        raise StatsInputError(f"`{name}` must have at least 2 bins; got {arr.size}.")
    if (arr < 0).any():
        raise StatsInputError(f"`{name}` must be non-negative counts; got min {arr.min():g}.")
    if arr.sum() <= 0:
        raise InsufficientDataError(f"`{name}` holds no observations (all counts are 0).", got=0)
    return arr


def _psi_value(ref: NDArray[np.float64], cur: NDArray[np.float64], smoothing: float) -> float:
    bins = ref.size
    q = (ref + smoothing) / (ref.sum() + smoothing * bins)
    p = (cur + smoothing) / (cur.sum() + smoothing * bins)
    if smoothing == 0.0:
        both = (p == 0) & (q == 0)
        if ((p == 0) != (q == 0)).any():
            return math.inf
        p, q = p[~both], q[~both]
    return float(max(np.sum((p - q) * np.log(p / q)), 0.0))


def psi(
    baseline: DriftBaseline,
    current: ArrayLike,
    *,
    tolerance: float = 0.0,
    smoothing: float = 0.5,
    assume_sorted: bool = False,
) -> PSIResult:
    """PSI of ``current`` against ``baseline`` with a p-value for H0: PSI <= ``tolerance``.

    p = ncx2.sf(N_eff PSI, B_eff - 1, tolerance N_eff) (``chi2.sf`` when tolerance is 0), with
    N_eff = n m / (n + m) (Yurdakul 2018; see ``docs/statistics.md``). Counts use the right-closed
    bins of the baseline; unsorted input is binned in chunks (memory O(chunk)).
    """
    _check_baseline(baseline)
    tolerance = v.real(tolerance, "tolerance", low=0.0)
    smoothing = v.real(smoothing, "smoothing", low=0.0)
    cur = v.sample(current, "current")
    if assume_sorted:
        _check_sorted(cur, "current")
        counts, outside = _sorted_counts(baseline, cur)
    else:
        counts, outside = _chunked_counts(baseline, cur)
    return _psi_result(baseline, counts, outside, tolerance, smoothing)


def psi_test_counts(
    reference_counts: ArrayLike,
    current_counts: ArrayLike,
    *,
    tolerance: float = 0.0,
    smoothing: float = 0.5,
    n_reference: float | None = None,
) -> PSIResult:
    """PSI of two count vectors over the same bins, with the tolerance-null p-value of ``psi``.

    For a reference summarised as counts (a phase-matched mixture of reference hours, or a stored
    anchor): ``reference_counts`` may be fractional (a weighted mixture); ``n_reference`` is the
    reference's sample size for N_eff = n m / (n + m) (default: the sum of its counts).
    p = ncx2.sf(N_eff PSI, B - 1, tolerance N_eff), as in :func:`psi`; ``out_of_range_rate`` is 0
    (counts carry no range).
    """
    tolerance = v.real(tolerance, "tolerance", low=0.0)
    smoothing = v.real(smoothing, "smoothing", low=0.0)
    ref = _counts(reference_counts, "reference_counts")
    cur = _counts(current_counts, "current_counts")
    if ref.size != cur.size:
        raise StatsInputError(
            f"`reference_counts` and `current_counts` must have the same length; "
            f"got {ref.size} and {cur.size}."
        )
    n = float(ref.sum()) if n_reference is None else v.real(n_reference, "n_reference", low=1.0)
    ref_int = np.rint(ref).astype(np.int64)
    cur_int = np.rint(cur).astype(np.int64)
    ref_int.flags.writeable = False
    return _result(ref, cur, ref_int, cur_int, n, 0, tolerance, smoothing)


def _check_baseline(baseline: object) -> None:
    if not isinstance(baseline, DriftBaseline):
        raise StatsInputError(
            f"`baseline` must be a DriftBaseline from build_baseline(); "
            f"got {type(baseline).__name__}."
        )


def _check_sorted(x: NDArray[np.float64], name: str) -> None:
    if x.size > 1 and not bool(np.all(x[1:] >= x[:-1])):
        raise StatsInputError(f"`{name}` must be sorted ascending when `assume_sorted=True`.")


def _sorted_counts(
    baseline: DriftBaseline, ordered: NDArray[np.float64]
) -> tuple[NDArray[np.int64], int]:
    upper = np.searchsorted(ordered, baseline.edges, side="right")
    counts = np.diff(np.concatenate(([0], upper, [ordered.size]))).astype(np.int64)
    below = int(np.searchsorted(ordered, baseline.reference_min, side="left"))
    above = ordered.size - int(np.searchsorted(ordered, baseline.reference_max, side="right"))
    return counts, below + above


def _chunked_counts(
    baseline: DriftBaseline, x: NDArray[np.float64]
) -> tuple[NDArray[np.int64], int]:
    counts = np.zeros(baseline.n_bins, dtype=np.int64)
    outside = 0
    lo, hi = baseline.reference_min, baseline.reference_max
    for start in range(0, x.size, _CHUNK):
        part = x[start : start + _CHUNK]
        idx = np.searchsorted(baseline.edges, part, side="left")
        counts += np.bincount(idx, minlength=baseline.n_bins)
        outside += int(np.count_nonzero(part < lo)) + int(np.count_nonzero(part > hi))
    return counts, outside


def _psi_result(
    baseline: DriftBaseline,
    counts: NDArray[np.int64],
    outside: int,
    tolerance: float,
    smoothing: float,
) -> PSIResult:
    ref = baseline.reference_counts
    return _result(
        ref.astype(np.float64),
        counts.astype(np.float64),
        ref,
        counts,
        baseline.n_reference,
        outside,
        tolerance,
        smoothing,
    )


def _result(
    ref: NDArray[np.float64],
    cur: NDArray[np.float64],
    ref_counts: NDArray[np.int64],
    cur_counts: NDArray[np.int64],
    n: float,
    outside: int,
    tolerance: float,
    smoothing: float,
) -> PSIResult:
    """The PSI result of ``psi`` and ``psi_test_counts``: PSI, tolerance-null p-value
    ncx2.sf(N_eff PSI, B - 1, tolerance N_eff), noise floor (B - 1)(1/n + 1/m)."""
    m = float(cur.sum())
    value = _psi_value(ref, cur, smoothing)
    n_eff = n * m / (n + m)
    df = ref.size - 1
    floor = df * (1.0 / n + 1.0 / m)
    if math.isinf(value):
        pvalue = 0.0
    elif tolerance > 0:
        pvalue = _dist.ncx2_sf(n_eff * value, df, tolerance * n_eff)
    else:
        pvalue = _dist.chi2_sf(n_eff * value, df)
    cur_counts.flags.writeable = False
    return PSIResult(
        statistic=value,
        pvalue=min(max(pvalue, 0.0), 1.0),
        n_bins=int(ref.size),
        reference_counts=ref_counts,
        current_counts=cur_counts,
        n_reference=round(n),
        n_current=round(m),
        n_eff=n_eff,
        empty_bins=int(np.count_nonzero(cur_counts == 0)),
        out_of_range_rate=outside / m,
        noise_floor=floor,
        debiased=max(value - floor, 0.0),
        tolerance=tolerance,
        smoothing=smoothing,
        empty_reference_bins=int(np.count_nonzero(ref_counts == 0)),
    )


# --------------------------------------------------------------------------------------------
# KS


@dataclass(frozen=True, slots=True)
class KSResult:
    """Two-sample Kolmogorov-Smirnov test (scipy's field names).

    ``statistic_location`` is the pooled value where D is attained (first in x-then-y order, as
    scipy), ``statistic_sign`` +1 when F_x - F_y is largest there, -1 when F_y - F_x is;
    ``method`` is 'exact' or 'asymp'.
    """

    statistic: float
    pvalue: float
    statistic_location: float
    statistic_sign: int
    method: str


def ks_2samp(
    x: ArrayLike,
    y: ArrayLike,
    *,
    alternative: str = "two-sided",
    method: str = "auto",
    assume_sorted: bool = False,
) -> KSResult:
    """Two-sample KS test of x against y; D exact with ties, in O((n+m) log(n+m)) time.

    D = max |i m - j n| / (n m) where i, j count x and y values <= each pooled value (scipy's
    right-continuous ECDFs). 'greater' uses D+ = max(F_x - F_y), 'less' D- = max(F_y - F_x).
    p-values as ``scipy.stats.ks_2samp``: 'exact' counts lattice paths (Hodges 1958) and returns
    1 - P(inside), accurate to about 1e-11 absolute at n = m = 10 000; 'asymp' uses
    kstwo.sf(D, round(N_eff)) two-sided and Hodges' eq. 5.3 one-sided; 'auto' is exact when
    max(n, m) <= 10 000. The p-values assume continuous data and are conservative with ties.
    """
    alternative = v.alternative(alternative)
    method = v.choice(method, "method", ("auto", "exact", "asymp"))
    xs = v.sample(x, "x")
    ys = v.sample(y, "y")
    if assume_sorted:
        _check_sorted(xs, "x")
        _check_sorted(ys, "y")
    else:
        xs, ys = np.sort(xs), np.sort(ys)
    return _ks_sorted(xs, ys, alternative, method)


def _ks_sorted(
    xs: NDArray[np.float64], ys: NDArray[np.float64], alternative: str, method: str
) -> KSResult:
    keys = _rank_keys(xs, ys, ordered=True)
    extremes = _ks_extremes(xs, keys)
    return _ks_result(
        extremes, xs.size, ys.size, alternative, method, lambda k: _first_equal(ys, k)
    )


def _ks_result(
    ext: _Extremes,
    n: int,
    m: int,
    alternative: str,
    method: str,
    y_value: Callable[[int], float],
) -> KSResult:
    """D, its location and sign, and the p-value from the extremes of i m - j n."""
    if alternative == "less" or (alternative == "two-sided" and ext.k_neg > ext.k_pos):
        k, sign = ext.k_neg, -1
        loc = ext.loc_neg if ext.y_index < 0 else y_value(ext.y_index)
    else:
        k, loc, sign = ext.k_pos, ext.loc_pos, 1
    d = k / (n * m)
    if method == "auto":
        method = "exact" if max(n, m) <= _KS_EXACT_MAX_N else "asymp"
    if method == "exact":
        pvalue = _ks_exact_sf(k, n, m, alternative)
    else:
        pvalue = _ks_asymp_sf(d, n, m, alternative)
    return KSResult(
        statistic=d,
        pvalue=min(max(pvalue, 0.0), 1.0),
        statistic_location=loc,
        statistic_sign=sign,
        method=method,
    )


def _first_equal(ordered: NDArray[np.float64], k: int) -> float:
    """The first element of ``ordered`` equal to ``ordered[k]`` (what a left-to-right scan sees)."""
    return float(ordered[int(np.searchsorted(ordered, ordered[k], side="left"))])


def _key_dtype(n_reference: int) -> type[np.signedinteger[Any]]:
    """int32 when every key 0..2n fits, else int64 (halves the memory of cached keys)."""
    return np.int32 if 2 * n_reference + 1 <= np.iinfo(np.int32).max else np.int64


def _rank_keys(
    xs: NDArray[np.float64], values: NDArray[np.float64], *, ordered: bool = False
) -> NDArray[np.signedinteger[Any]]:
    """key(y) = 2 #{x < y} + [y equals some x], for each value (same order as ``values``).

    The key is non-decreasing in y, so sorted values give sorted keys. Computed in chunks
    (temporaries O(chunk)). With ``ordered`` (``values`` sorted ascending) each chunk of 16k
    values is searched only in the slice of ``xs`` between its first and last value,
    #{x < y} = lo + #{x in xs[lo:hi] : x < y} with lo = #{x < first}, hi = #{x <= last}: the
    same counts, the binary searches in cache (about 1.5x faster on 10M vs 10M).
    """
    n = xs.size
    keys = np.empty(values.size, dtype=_key_dtype(n))
    step = _SEARCH_CHUNK if ordered else _CHUNK
    for start in range(0, values.size, step):
        part = values[start : start + step]
        if ordered:
            lo = int(np.searchsorted(xs, part[0], side="left"))
            hi = int(np.searchsorted(xs, part[-1], side="right"))
            left = np.searchsorted(xs[lo:hi], part, side="left")
            left += lo
        else:
            left = np.searchsorted(xs, part, side="left")
        tie = xs[np.minimum(left, n - 1)] == part
        tie &= left < n
        out = keys[start : start + part.size]
        np.multiply(left, 2, out=out, casting="unsafe")
        out += tie
    return keys


@dataclass(frozen=True, slots=True)
class _Extremes:
    """max(i m - j n) (``k_pos``, at x value ``loc_pos``) and max(j n - i m) (``k_neg``).

    The D- location is the x value ``loc_neg`` when an x value attains it (``y_index`` = -1), else
    the y value at index ``y_index`` of the sorted y.
    """

    k_pos: int
    loc_pos: float
    k_neg: int
    loc_neg: float
    y_index: int


def _ks_extremes(xs: NDArray[np.float64], keys: NDArray[np.signedinteger[Any]]) -> _Extremes:
    """The extremes of f = i m - j n over the pooled points, from the sorted keys of y alone.

    i, j count x and y values <= t (right-continuous ECDFs); y_(k) is the k-th smallest y
    (0-based), l_k = #{x < y_(k)} = key // 2 and r_k = #{x <= y_(k)} (l_k plus the run of x equal
    to y_(k) when key is odd). f rises only at x values, so its maximum is at the largest x below
    some y: max over k of l_k m - k n (a term with l_k = 0 has no x there and is skipped), or 0 at
    max(x) when no term is >= 0; it sits at x value x_(l_k - 1). -f rises only at y values:
    max over k of (k + 1) n - r_k m. Locations follow the x-then-y scan order of scipy: the first
    x value attaining the extreme (for D- an x value attains it only when it ties with a y value
    attaining it), else the first y value. O(m log n); temporaries O(chunk).
    """
    n, m = int(xs.size), int(keys.size)
    best_pos, pos_left = -1, 0
    best_neg, neg_y, neg_tie = -1, -1, -1
    for start in range(0, m, _KS_CHUNK):
        part = keys[start : start + _KS_CHUNK]
        left = (part >> 1).astype(np.int64)
        kn = np.arange(start, start + part.size, dtype=np.int64) * n
        above = left * m - kn
        if start == 0 and left[0] == 0:
            above[0] = -1  # no x below the smallest y: not a pooled point
        i = int(np.argmax(above))
        if int(above[i]) > best_pos:
            best_pos, pos_left = int(above[i]), int(left[i])
        tie = (part & 1).astype(bool)
        right = left
        if tie.any():
            at = np.flatnonzero(tie)
            right = left.copy()
            # One search per distinct tied value (keys are sorted, so equal ones are adjacent).
            tied_left = left[at]
            first = np.flatnonzero(np.diff(tied_left, prepend=-1))
            ends = np.searchsorted(xs, xs[tied_left[first]], side="right")
            right[at] = np.repeat(ends, np.diff(first, append=tied_left.size))
        below = kn + n - right * m
        i = int(np.argmax(below))
        top = int(below[i])
        tied = np.flatnonzero(tie & (below == top))
        if top > best_neg:
            best_neg, neg_y = top, start + i
            neg_tie = int(left[tied[0]]) if tied.size else -1
        elif top == best_neg and neg_tie < 0 and tied.size:
            neg_tie = int(left[tied[0]])
    if best_pos >= 0:
        loc_pos = float(xs[int(np.searchsorted(xs, xs[pos_left - 1], side="left"))])
    else:
        best_pos, loc_pos = 0, float(xs[int(np.searchsorted(xs, xs[-1], side="left"))])
    if neg_tie >= 0:
        return _Extremes(best_pos, loc_pos, best_neg, float(xs[neg_tie]), -1)
    return _Extremes(best_pos, loc_pos, best_neg, math.nan, neg_y)


def _ks_exact_sf(k: int, n: int, m: int, alternative: str) -> float:
    """P(D >= k / (n m)) under H0 by counting monotone lattice paths that stay inside the band.

    Row i of the path-count table over j = 0..m is the cumulative sum of row i - 1 over the
    allowed interval of j (|i m - j n| < k two-sided, i m - j n < k 'greater', j n - i m < k
    'less'), and the total is divided by C(n+m, n). Counts are held tilted, c(i, j) rho^j with
    rho = m / (n + m): along the diagonal j = i m / n, where the paths that matter run, the
    tilted counts are level (a negative binomial's mode), while the raw counts grow by about
    (n + m) / m a step in j, so that a band wider than about 1,000 cells spans more than
    float64's range and, rescaled by its largest count, lost the cells that carry the paths
    (n = m = 10,000, D = 0.157 gave p = 1). Each row is then a cumulative sum whose earlier
    terms fade by rho a step (``_Fading``), rescaled when its peak, looked at every fourth
    row, has left [1e-20, 1e20]. Accurate to about 1e-11 absolute at n = m = 10,000
    (1 - P(inside): a p-value below that reads as about 0).
    """
    if k <= 0:
        return 1.0
    if alternative == "two-sided" and n > m:
        n, m = m, n  # the two-sided band is symmetric in (n, m): loop over the shorter side
    rho = m / (n + m)
    fade = _Fading(rho, m + 1)
    # Two rows, swapped. A row is read and written only on its band, and the bands' ends never
    # move down: a cell above the band was never written (zero), one below it is never read.
    row = np.zeros(m + 1)
    new = np.zeros(m + 1)
    log_scale = 0.0
    for i in range(n + 1):
        lo = 0 if alternative == "less" else max((i * m - k) // n + 1, 0)
        hi = m if alternative == "greater" else min((i * m + k - 1) // n, m)
        if lo > hi:
            return 1.0  # no path stays inside
        band = new[lo : hi + 1]
        if i == 0:  # lo == 0: one path to each (0, j), tilted: rho^j
            band[:] = fade.powers(hi + 1)
        else:
            fade.cumsum(row[lo : hi + 1], band)
        row, new = new, row
        if i & 3 and i != n:
            continue  # a row grows the counts by at most (n + m) / n: look every 4th row
        top = float(band.max())
        if top == 0.0:
            return 1.0
        if top > 1e20 or top < 1e-20:
            band /= top
            log_scale += math.log(top)
    if row[m] <= 0.0:
        return 1.0
    log_inside = (
        math.log(row[m])
        + log_scale
        - m * math.log(rho)
        - (special.gammaln(n + m + 1) - special.gammaln(n + 1) - special.gammaln(m + 1))
    )
    return float(-math.expm1(log_inside))


class _Fading:
    """``cumsum`` with earlier terms fading by ``rho`` a step: out[j] = x[j] + rho out[j - 1].

    Blocks of L terms with rho^-L <= 1e269: in each, out[s + t] = rho^t (sum_{u <= t}
    x[s + u] rho^-u + rho out[s - 1]), one ``np.cumsum`` a block (rows are rescaled to hold
    at most about 1e21, so the terms stay below 1e290)."""

    def __init__(self, rho: float, size: int) -> None:
        self.rho = rho
        self.block = max(1, min(size, int(620.0 / -math.log(rho)) if rho < 1.0 else size))
        steps = np.arange(self.block, dtype=np.float64)
        self.grow = rho**-steps  # rho^-u
        self.shrink = rho**steps  # rho^t
        self.scratch = np.empty(self.block)

    def powers(self, count: int) -> NDArray[np.float64]:
        """rho^0 .. rho^(count - 1)."""
        return np.power(self.rho, np.arange(count, dtype=np.float64))

    def cumsum(self, x: NDArray[np.float64], out: NDArray[np.float64]) -> None:
        size, block = x.size, self.block
        for s in range(0, size, block):
            e = min(s + block, size)
            part = self.scratch[: e - s]
            np.multiply(x[s:e], self.grow[: e - s], out=part)
            np.cumsum(part, out=part)
            if s:
                part += float(out[s - 1]) * self.rho
            np.multiply(part, self.shrink[: e - s], out=out[s:e])


@functools.lru_cache(maxsize=256)
def _below_switch(n_eff: float) -> float:
    """``kstwo_sf`` at the largest D with N D^2 below the switch to the large-N expansion."""
    d = math.sqrt(_KS_SMIRNOV_Z2 / n_eff)
    while n_eff * d * d >= _KS_SMIRNOV_Z2:
        d = math.nextafter(d, 0.0)
    return _dist.kstwo_sf(d, n_eff)


def _ks_asymp_sf(d: float, n: int, m: int, alternative: str) -> float:
    """scipy's asymptotic p-values: kstwo.sf(D, round(N_eff)) or Hodges' eq. 5.3 one-sided.

    One exception, for speed: scipy's ``kstwo.sf(D, N)`` is 2 smirnov(N, D) when N D^2 >= 2.2
    (p below about 0.024), an exact sum of O(N) terms (about 1 s at N = 875 000). For
    N > 10 000 that branch is replaced by its large-N expansion
    2 exp(-2 z^2 - 2 z / (3 sqrt(N))), z = sqrt(N) D (Smirnov's one-sided correction; Hodges'
    eq. 5.3 with one sample size -> infinity). It is slightly larger than scipy's (conservative):
    relative difference <= 40 / N for p >= 1e-8 (3.3e-3 at N = 10 001, 4.2e-5 at N = 875 000),
    absolute <= 3e-6 (see ``docs/statistics.md``). Being larger, it is capped at the p-value
    just below the switch, so that p never rises with D across it (a larger D got a larger p
    there, and a KS bracket straddling it an inverted p-value range).
    """
    big, small = float(max(n, m)), float(min(n, m))
    en = big * small / (big + small)
    if alternative == "two-sided":
        n_eff = float(round(en))  # half to even, as np.round: the same integer
        z2 = n_eff * d * d
        if n_eff > _KS_SMIRNOV_MAX_N and z2 >= _KS_SMIRNOV_Z2:
            if z2 >= 370.0:  # scipy's cut-off: sf is 0 to double precision
                return 0.0
            z = math.sqrt(z2)
            value = 2.0 * math.exp(-2.0 * z2 - 2.0 * z / (3.0 * math.sqrt(n_eff)))
            return min(value, _below_switch(n_eff))
        return _dist.kstwo_sf(d, n_eff)
    z = math.sqrt(en) * d
    expt = -2 * z**2 - 2 * z * (big + 2 * small) / math.sqrt(big * small * (big + small)) / 3.0
    return math.exp(expt)


# --------------------------------------------------------------------------------------------
# The fast path: PSI and KS on one sort of the current window


@dataclass(frozen=True, slots=True)
class DriftResult:
    """PSI and KS of one current window against one baseline."""

    psi: PSIResult
    ks: KSResult


@dataclass(frozen=True, slots=True)
class BaselinePositions:
    """Where the values of a sample fall in one baseline: all ``drift_tests`` needs of them.

    ``keys`` (any order): key(y) = 2 #{reference < y} + [y equals a reference value], so
    key // 2 and key // 2 + (run of equal reference values when key is odd) are y's left and right
    ranks in ``baseline.sorted_reference``; int32 when 2 n + 1 fits, else int64. ``counts``: the
    sample's counts in the baseline's right-closed bins. Positions of disjoint parts of a sample
    add up (:meth:`concatenate`), so a replay can compute them once per part and reuse them in
    every window that holds the part.
    """

    baseline: DriftBaseline
    keys: NDArray[np.signedinteger[Any]]
    counts: NDArray[np.int64]

    @property
    def size(self) -> int:
        """Number of values located."""
        return int(self.keys.size)

    @classmethod
    def concatenate(
        cls, baseline: DriftBaseline, parts: Sequence[BaselinePositions]
    ) -> BaselinePositions:
        """The positions of the union of the parts' samples (all against ``baseline``)."""
        _check_baseline(baseline)
        for k, part in enumerate(parts):
            if not isinstance(part, BaselinePositions) or part.baseline is not baseline:
                raise StatsInputError(
                    f"`parts[{k}]` must be BaselinePositions of this `baseline`; got "
                    f"{type(part).__name__}."
                )
        dtype = _key_dtype(baseline.n_reference)
        keys = np.concatenate([p.keys for p in parts]) if parts else np.empty(0, dtype)
        counts = np.zeros(baseline.n_bins, dtype=np.int64)
        for p in parts:
            counts += p.counts
        keys.flags.writeable = False
        counts.flags.writeable = False
        return cls(baseline=baseline, keys=keys, counts=counts)


def baseline_positions(
    baseline: DriftBaseline, values: ArrayLike, *, assume_sorted: bool = False
) -> BaselinePositions:
    """Locate ``values`` in ``baseline``: rank keys and bin counts (see ``BaselinePositions``).

    Sorts ``values`` unless ``assume_sorted`` (searching sorted values is ~10x faster); the keys
    come out sorted. ``values`` may be empty.
    """
    _check_baseline(baseline)
    arr = v.sample(values, "values", min_size=0)
    if assume_sorted:
        _check_sorted(arr, "values")
    else:
        arr = np.sort(arr)
    keys = _rank_keys(baseline.sorted_reference, arr, ordered=True)
    upper = np.searchsorted(arr, baseline.edges, side="right")
    counts = np.diff(np.concatenate(([0], upper, [arr.size]))).astype(np.int64)
    keys.flags.writeable = False
    counts.flags.writeable = False
    return BaselinePositions(baseline=baseline, keys=keys, counts=counts)


def drift_tests(
    baseline: DriftBaseline,
    current: ArrayLike,
    *,
    tolerance: float = 0.0,
    smoothing: float = 0.5,
    positions: BaselinePositions | None = None,
    assume_sorted: bool = False,
) -> DriftResult:
    """PSI and two-sided KS of ``current`` against ``baseline``, sorting ``current`` once
    (not at all with ``assume_sorted``: ``current`` is then checked to be ascending).

    Bin counts come from ``searchsorted`` of the edges in the sorted window, and KS runs against
    ``baseline.sorted_reference`` (x = reference, y = current; method 'auto').

    ``positions``, when given, must be ``baseline_positions(baseline, current)`` (or the
    concatenation of the positions of a partition of ``current``, in any order): then neither
    ``current`` is sorted nor the reference searched; a sort of the integer keys gives D, and the
    result is identical to the one without ``positions`` (``current`` is still read for its size
    and, when D is attained at a current value between two reference values, for that value).
    """
    _check_baseline(baseline)
    tolerance = v.real(tolerance, "tolerance", low=0.0)
    smoothing = v.real(smoothing, "smoothing", low=0.0)
    cur = v.sample(current, "current")
    if positions is None:
        if assume_sorted:
            _check_sorted(cur, "current")
            ordered = cur
        else:
            ordered = np.sort(cur)
        counts, outside = _sorted_counts(baseline, ordered)
        ks = _ks_sorted(baseline.sorted_reference, ordered, "two-sided", "auto")
    else:
        _check_positions(baseline, positions, cur.size)
        keys = np.sort(positions.keys)
        counts = positions.counts.copy()
        n2 = 2 * baseline.n_reference
        outside = (
            int(np.searchsorted(keys, 1, side="left"))
            + keys.size
            - int(np.searchsorted(keys, n2, side="left"))
        )
        xs = baseline.sorted_reference
        ks = _ks_result(
            _ks_extremes(xs, keys),
            xs.size,
            cur.size,
            "two-sided",
            "auto",
            lambda k: _value_with_key(xs, cur, int(keys[k])),
        )
    return DriftResult(psi=_psi_result(baseline, counts, outside, tolerance, smoothing), ks=ks)


def _check_positions(baseline: DriftBaseline, positions: object, size: int) -> None:
    if not isinstance(positions, BaselinePositions) or positions.baseline is not baseline:
        raise StatsInputError(
            "`positions` must be BaselinePositions computed against this `baseline`; got "
            f"{type(positions).__name__}."
        )
    if positions.size != size or int(positions.counts.sum()) != size:
        raise StatsInputError(
            f"`positions` must locate the {size} values of `current`; got {positions.size} keys "
            f"and {int(positions.counts.sum())} counted."
        )
    if size and (
        int(positions.keys.min()) < 0 or int(positions.keys.max()) > 2 * baseline.n_reference
    ):
        raise StatsInputError(
            f"`positions.keys` must lie in [0, {2 * baseline.n_reference}]; got "
            f"[{int(positions.keys.min())}, {int(positions.keys.max())}]."
        )


def _value_with_key(xs: NDArray[np.float64], cur: NDArray[np.float64], key: int) -> float:
    """The largest current value with an even ``key`` = 2 l: the largest value below x_(l).

    A D- attained at a current value that ties with no reference value sits at the largest current
    value in its reference gap (x_(l-1), x_(l)); the keys alone do not hold it.
    """
    left = key >> 1
    if left >= xs.size:
        return float(cur.max())
    inside = cur < xs[left]
    if left > 0:
        inside &= cur > xs[left - 1]  # the gap holds few values: a cheap selection
    return float(cur[inside].max())


# --------------------------------------------------------------------------------------------
# Point-mass rate


@dataclass(frozen=True, slots=True)
class ProportionResult:
    """Pooled two-proportion z-test; ``difference`` = rate_current - rate_reference."""

    rate_reference: float
    rate_current: float
    difference: float
    statistic: float
    pvalue: float
    n_reference: int
    n_current: int


def proportion_test(
    reference: ArrayLike,
    current: ArrayLike,
    *,
    value: float = 0.0,
    alternative: str = "two-sided",
) -> ProportionResult:
    """Test whether the share of values equal to ``value`` (e.g. exact-zero scores) changed.

    Counts exact equality; see :func:`proportion_test_counts` for the statistic.
    """
    value = v.real(value, "value")
    alternative = v.alternative(alternative)
    ref = v.sample(reference, "reference")
    cur = v.sample(current, "current")
    return proportion_test_counts(
        int(np.count_nonzero(ref == value)),
        ref.size,
        int(np.count_nonzero(cur == value)),
        cur.size,
        alternative=alternative,
    )


def proportion_test_counts(
    k_reference: int,
    n_reference: int,
    k_current: int,
    n_current: int,
    *,
    alternative: str = "two-sided",
) -> ProportionResult:
    """Pooled two-proportion z-test from counts.

    z = (k2/n2 - k1/n1) / sqrt(p (1 - p)(1/n1 + 1/n2)), p = (k1 + k2)/(n1 + n2); 'greater' tests
    H1: rate_current > rate_reference. When p is 0 or 1 (no variation) z = 0 and p-value = 1.
    """
    alternative = v.alternative(alternative)
    n1 = v.integer(n_reference, "n_reference", minimum=0)
    n2 = v.integer(n_current, "n_current", minimum=0)
    k1 = v.integer(k_reference, "k_reference", minimum=0)
    k2 = v.integer(k_current, "k_current", minimum=0)
    if k1 > n1:
        raise StatsInputError(f"`k_reference` must be <= `n_reference` ({n1}); got {k1}.")
    if k2 > n2:
        raise StatsInputError(f"`k_current` must be <= `n_current` ({n2}); got {k2}.")
    if n1 == 0 or n2 == 0:
        raise InsufficientDataError(
            f"a proportion test needs observations on both sides; got n_reference={n1}, "
            f"n_current={n2}.",
            needed=1,
            got=min(n1, n2),
        )
    r1, r2 = k1 / n1, k2 / n2
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    z = (r2 - r1) / se if se > 0 else 0.0
    if alternative == "greater":
        p = _dist.norm_sf(z)
    elif alternative == "less":
        p = _dist.norm_cdf(z)
    else:
        p = float(min(2 * _dist.norm_sf(abs(z)), 1.0))
    if se == 0:
        p = 1.0
    return ProportionResult(
        rate_reference=r1,
        rate_current=r2,
        difference=r2 - r1,
        statistic=z,
        pvalue=p,
        n_reference=n1,
        n_current=n2,
    )
