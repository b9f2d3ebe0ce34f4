"""The distribution functions a check needs, on ``scipy.special``'s ufuncs, without ``scipy.stats``.

``import scipy.stats`` costs about 0.4 s more than ``import scipy.special``; a one-shot
``monitor check`` paid it on every call for a handful of tail probabilities. Each function here
evaluates the ufunc that the ``scipy.stats`` method calls, with the same argument handling, so
the results are the same floats, bit for bit (``tests/stats/test_dist.py`` compares them over
grids and edge values):

* normal: ``sf(x) = ndtr(-x)``, ``cdf = ndtr``, ``isf(q) = -ndtri(q) + 0``, ``ppf = ndtri + 0``
  (scipy computes ``ppf * scale + loc``, which turns -0.0 into +0.0);
* chi-squared ``sf(x, df) = chdtrc(df, x)``; noncentral chi-squared ``sf`` is Boost's
  (``scipy.special._ufuncs._ncx2_sf``, what ``scipy.stats.ncx2`` calls since scipy 1.12);
* Student's t ``sf(x, df) = stdtr(df, -x)``, ``cdf = stdtr``;
* binomial ``cdf``, ``sf``, ``pmf`` (Boost's ``_binom_*``) and ``binomtest_pvalue``, scipy's
  ``binomtest`` (two-sided: the pmf-ordering rule with relative tolerance 1e-7);
* ``wilcoxon_pvalue``: ``scipy.stats.wilcoxon(d, zero_method='wilcox', correction=False,
  method='auto')`` on non-zero d, normal approximation with tie correction where scipy uses it;
* ``kstwo_sf``: ``scipy.stats.kstwo.sf(d, n)`` where scipy uses the Pelz-Good expansion
  (n > 140, n d^2 < 2.2, not n <= 100 000 with n d^1.5 <= 1.4: a large window pair without
  drift), scipy's code with scipy's operations.

Where a private ufunc is missing (older scipy) or scipy uses another method (Wilcoxon's exact
null for n <= 50 without ties, the other ``kstwo`` branches), ``scipy.stats`` is imported on
first use.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

try:  # Boost's tails, as scipy.stats calls them (scipy >= 1.12)
    from scipy.special._ufuncs import (
        _binom_cdf,
        _binom_pmf,
        _binom_sf,
        _ncx2_sf,
    )
except ImportError:  # pragma: no cover - older scipy: the scipy.stats methods themselves
    _binom_cdf = _binom_pmf = _binom_sf = _ncx2_sf = None


def scipy_stats() -> Any:
    """``scipy.stats``, imported on first use (about 0.4 s)."""
    import scipy.stats

    return scipy.stats


def norm_sf(x: float) -> float:
    """P(Z > x) = ndtr(-x)."""
    return float(special.ndtr(-x))


def norm_cdf(x: float) -> float:
    """P(Z <= x) = ndtr(x)."""
    return float(special.ndtr(x))


def norm_pdf(x: np.ndarray) -> np.ndarray:
    """phi(x) = exp(-x^2 / 2) / sqrt(2 pi), elementwise."""
    return np.asarray(np.exp(-0.5 * x * x) / _SQRT2PI)


def norm_isf(q: float) -> float:
    """Phi^-1(1 - q) = -ndtri(q) (+ 0.0, so that q = 0.5 gives +0.0 as scipy does)."""
    return float(-special.ndtri(q) * 1.0 + 0.0)


def norm_ppf(q: float) -> float:
    """Phi^-1(q) = ndtri(q) (+ 0.0, as scipy)."""
    return float(special.ndtri(q) * 1.0 + 0.0)


def chi2_sf(x: float, df: float) -> float:
    """P(X > x), X ~ chi2(df): chdtrc(df, x); 1 for x <= 0."""
    if x <= 0.0:
        return 1.0
    return float(special.chdtrc(df, x))


def ncx2_sf(x: float, df: float, nc: float) -> float:
    """P(X > x), X ~ noncentral chi2(df, nc); chi2's tail when nc = 0; 1 for x <= 0, 0 at inf."""
    if nc == 0.0:
        return chi2_sf(x, df)
    if _ncx2_sf is None:  # pragma: no cover
        return float(scipy_stats().ncx2.sf(x, df, nc))
    if x <= 0.0 or x == math.inf:
        return 1.0 if x <= 0.0 else 0.0
    with np.errstate(over="ignore"):
        return float(_ncx2_sf(x, df, nc))


def t_sf(x: float, df: float) -> float:
    """P(T > x), T ~ t(df): stdtr(df, -x)."""
    return float(special.stdtr(df, -x))


def t_cdf(x: float, df: float) -> float:
    """P(T <= x), T ~ t(df): stdtr(df, x)."""
    return float(special.stdtr(df, x))


def _binom(kind: str, k: float, n: int, p: float) -> float:
    """scipy.stats.binom's cdf, sf or pmf at k (support 0..n), clipped to [0, 1] as scipy."""
    if _binom_cdf is None:  # pragma: no cover
        return float(getattr(scipy_stats().binom, kind)(k, n, p))
    if kind == "cdf":
        if k < 0 or k >= n:
            return 0.0 if k < 0 else 1.0
        value = _binom_cdf(math.floor(k), n, p)
    elif kind == "sf":
        if k < 0 or k >= n:
            return 1.0 if k < 0 else 0.0
        value = _binom_sf(math.floor(k), n, p)
    else:
        if k < 0 or k > n or k != math.floor(k):
            return 0.0
        value = _binom_pmf(k, n, p)
    return float(min(max(value, 0.0), 1.0))  # scipy clips the discrete tails to [0, 1]


def binomtest_pvalue(k: int, n: int, p: float, alternative: str) -> float:
    """``scipy.stats.binomtest(k, n, p, alternative).pvalue`` (same arithmetic).

    'less': cdf(k); 'greater': sf(k - 1); two-sided: the probability of every outcome whose pmf
    is at most pmf(k) (1 + 1e-7), found by a binary search on the other side of the mode.
    """
    if alternative == "less":
        return _binom("cdf", k, n, p)
    if alternative == "greater":
        return _binom("sf", k - 1, n, p)
    d = _binom("pmf", k, n, p)
    rerr = 1 + 1e-7
    if k == p * n:
        return 1.0
    if k < p * n:
        ix = _binary_search(lambda x: -_binom("pmf", x, n, p), -d * rerr, math.ceil(p * n), n)
        y = n - ix + int(d * rerr == _binom("pmf", ix, n, p))
        pval = _binom("cdf", k, n, p) + _binom("sf", n - y, n, p)
    else:
        ix = _binary_search(lambda x: _binom("pmf", x, n, p), d * rerr, 0, math.floor(p * n))
        y = ix + 1
        pval = _binom("cdf", y - 1, n, p) + _binom("sf", k - 1, n, p)
    return min(1.0, pval)


def _binary_search(a: Any, d: float, lo: int, hi: int) -> int:
    """scipy's ``_binary_search_for_binom_tst``: the last i in [lo, hi] with a(i) <= d
    (a non-decreasing there)."""
    while lo < hi:
        mid = lo + (hi - lo) // 2
        midval = a(mid)
        if midval < d:
            lo = mid + 1
        elif midval > d:
            hi = mid - 1
        else:
            return mid
    if a(lo) <= d:
        return lo
    return lo - 1


def wilcoxon_pvalue(nonzero: np.ndarray, alternative: str) -> float:
    """``scipy.stats.wilcoxon(nonzero, alternative=..., method='auto', zero_method='wilcox')``.

    scipy's 'auto' is the exact null for n <= 50 without ties (delegated to scipy), else the
    normal approximation: z = (R+ - n(n+1)/4) / sqrt((n(n+1)(2n+1) - sum(t^3 - t)/2) / 24),
    R+ the sum of the average ranks of |d| over d > 0, t the sizes of the tie groups.
    ``nonzero`` must hold no zeros; ties and n <= 13 are the caller's (a permutation null).
    """
    d = np.asarray(nonzero, dtype=np.float64)
    n = d.size
    magnitude = np.abs(d)
    order = np.argsort(magnitude, kind="mergesort")
    ordered = magnitude[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    sizes = np.diff(np.append(starts, n))
    if n <= 50 and sizes.size == n:
        res = scipy_stats().wilcoxon(d, alternative=alternative, method="auto")
        return float(res.pvalue)
    ranks = np.empty(n)
    # average rank of a tie group = start + (size + 1) / 2 (1-based): exact in float64
    ranks[order] = np.repeat(starts + (sizes + 1) / 2.0, sizes)
    r_plus = float(np.sum((d > 0).astype(np.float64) * ranks))
    count = float(n)
    mn = count * (count + 1.0) * 0.25
    se = count * (count + 1.0) * (2.0 * count + 1.0)
    t = sizes.astype(np.float64)
    tie_correct = float(np.sum(t**3 - t))
    se = math.sqrt((se - tie_correct / 2) / 24)
    z = (r_plus - mn) / se
    if alternative == "less":
        return norm_cdf(z)
    if alternative == "greater":
        return norm_sf(z)
    return 2 * norm_sf(abs(z))


# scipy.stats._ksstats' constants, computed as there
_PI_SQUARED = np.pi**2
_PI_FOUR = np.pi**4
_PI_SIX = np.pi**6
_SQRT2PI = np.sqrt(2 * np.pi)
_SQRT3 = np.sqrt(3)
_MIN_LOG = -708


def kstwo_sf(d: float, n: float) -> float:
    """``scipy.stats.kstwo.sf(d, n)``: P(D_n >= d) for the two-sided one-sample statistic.

    In the Pelz-Good branch of scipy's ``_kolmogn`` (see the module docstring) it is
    ``clip(1 - PelzGood(n, d), 0, 1)``, evaluated here as scipy does; elsewhere scipy's own.
    """
    k = int(n)
    inside = k == n and k > 140 and 0.0 < d < 0.5 and 1.0 < k * d < k - 1
    if inside and k * d * d < 2.2 and not (k <= 100_000 and k * d**1.5 <= 1.4):
        return min(max(1.0 - _pelz_good_cdf(k, d), 0.0), 1.0)  # np.clip's value, unwrapped
    return float(scipy_stats().kstwo.sf(d, n))


def _pelz_good_cdf(n: int, x: float) -> float:
    """scipy's ``_kolmogn_PelzGood(n, x, cdf=True)`` (Pelz & Good 1976), for 0 < x < 1.

    P(D_n <= x) ~ K0(z) + K1(z)/sqrt(n) + K2(z)/n + K3(z)/n^1.5, z = sqrt(n) x, each K_i
    through Jacobi theta functions for small z.
    """
    z = np.sqrt(n) * x
    zsquared, zthree, zfour, zsix = z**2, z**3, z**4, z**6
    qlog = -_PI_SQUARED / 8 / zsquared
    if qlog < _MIN_LOG:
        return 0.0
    q = np.exp(qlog)
    k1a = -zsquared
    k1b = _PI_SQUARED / 4
    k2a = 6 * zsix + 2 * zfour
    k2b = (2 * zfour - 5 * zsquared) * _PI_SQUARED / 4
    k2c = _PI_FOUR * (1 - 2 * zsquared) / 16
    k3d = _PI_SIX * (5 - 30 * zsquared) / 64
    k3c = _PI_FOUR * (-60 * zsquared + 212 * zfour) / 16
    k3b = _PI_SQUARED * (135 * zfour - 96 * zsix) / 4
    k3a = -30 * zsix - 90 * z**8
    maxk = int(np.ceil(16 * z / np.pi))
    # Horner over the odd m = 2k - 1 in plain floats: the same IEEE products and sums as
    # scipy's four-element arrays (no fused multiply-add either way), q^(8k) by np.power as
    # there; 8 against 45 us a call
    a1, b1 = float(k1a), float(k1b)
    a2, b2, c2 = float(k2a), float(k2b), float(k2c)
    a3, b3, c3, d3 = float(k3a), float(k3b), float(k3c), float(k3d)
    t0 = t1 = t2 = t3 = 0.0
    for k in range(maxk, 0, -1):
        m = 2 * k - 1
        msquared, mfour, msix = m**2, m**4, m**6
        qpower = float(np.power(q, 8 * k))
        t0 = t0 * qpower + 1.0
        t1 = t1 * qpower + (a1 + b1 * msquared)
        t2 = t2 * qpower + (a2 + b2 * msquared + c2 * mfour)
        t3 = t3 * qpower + (a3 + b3 * msquared + c3 * mfour + d3 * msix)
    terms = np.array([t0, t1, t2, t3])
    terms *= q
    terms *= _SQRT2PI
    terms /= np.array([z, 6 * zfour, 72 * z**7, 6480 * z**10])
    q = np.exp(-_PI_SQUARED / 2 / zsquared)
    ks = np.arange(maxk, 0, -1)
    ksquared = ks**2
    sqrt3z = _SQRT3 * z
    kspi = np.pi * ks
    qpwers = q**ksquared
    k2extra = np.add.reduce(ksquared * qpwers)  # np.sum's own reduction, less its wrapper
    k2extra *= _PI_SQUARED * _SQRT2PI / (-36 * zthree)
    terms[2] += k2extra
    k3extra = np.add.reduce((sqrt3z + kspi) * (sqrt3z - kspi) * ksquared * qpwers)
    k3extra *= _PI_SQUARED * _SQRT2PI / (216 * zsix)
    terms[3] += k3extra
    terms /= np.power(n * 1.0, np.arange(len(terms)) / 2.0)
    return float(sum(terms))
