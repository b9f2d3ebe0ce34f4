"""``monitor.stats._dist``: the scipy.stats-free tails equal scipy.stats' bit for bit."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from monitor.stats import _dist

X = [-np.inf, -40.0, -8.5, -1.0, -1e-300, -0.0, 0.0, 1e-12, 0.3, 1.0, 2.2, 7.9, 38.0, np.inf]
Q = [0.0, 1e-300, 1e-16, 1e-9, 0.0015, 0.025, 0.3, 0.5, 0.8, 0.975, 1.0 - 1e-12, 1.0]


def _same(a: float, b: float) -> bool:
    """Equal floats, NaN equal NaN, and the sign of zero too."""
    return bool(np.array_equal(np.float64(a), np.float64(b), equal_nan=True)) and (
        np.signbit(a) == np.signbit(b)
    )


def _outcome(f: Any, *args: float) -> float | str:
    """f(*args), or the name of what it raised (Boost's overflow warnings are errors here)."""
    try:
        return float(f(*args))
    except ArithmeticError as exc:
        return type(exc).__name__


@pytest.mark.parametrize("x", X)
def test_normal_tails_against_scipy(x: float) -> None:
    assert _same(_dist.norm_sf(x), stats.norm.sf(x))
    assert _same(_dist.norm_cdf(x), stats.norm.cdf(x))


@pytest.mark.parametrize("q", Q)
def test_normal_quantiles_against_scipy(q: float) -> None:
    assert _same(_dist.norm_isf(q), stats.norm.isf(q))
    assert _same(_dist.norm_ppf(q), stats.norm.ppf(q))


@pytest.mark.parametrize("df", [1, 2, 9, 19, 167])
def test_chi2_and_ncx2_tails_against_scipy(df: int) -> None:
    rng = np.random.default_rng(df)
    xs = [*(x for x in X if x >= -1.0), *rng.uniform(0, 5 * df, 20), 1e4, 1e7]
    for x in xs:
        assert _same(_dist.chi2_sf(x, df), stats.chi2.sf(x, df)), x
        for nc in (0.0, 1e-6, 0.5, 20.0, 2e4, 1e6):
            ours, theirs = _outcome(_dist.ncx2_sf, x, df, nc), _outcome(stats.ncx2.sf, x, df, nc)
            assert ours == theirs or _same(ours, theirs), (x, nc)  # type: ignore[arg-type]


@pytest.mark.parametrize("df", [1, 4, 19, 9999, 1_000_000])
def test_t_tails_against_scipy(df: int) -> None:
    for x in [*X, -300.0, 300.0]:
        assert _same(_dist.t_sf(x, df), stats.t.sf(x, df)), x
        assert _same(_dist.t_cdf(x, df), stats.t.cdf(x, df)), x


@pytest.mark.parametrize("n", [1, 2, 7, 20, 101, 10_000])
@pytest.mark.parametrize("p", [0.5, 0.13])
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_binomtest_against_scipy(n: int, p: float, alternative: str) -> None:
    for k in sorted({0, 1, n // 3, n // 2, (n + 1) // 2, n - 1, n, round(p * n)}):
        if 0 <= k <= n:
            want = stats.binomtest(k, n, p, alternative=alternative).pvalue
            assert _same(_dist.binomtest_pvalue(k, n, p, alternative), want), k


@pytest.mark.parametrize("n", [14, 51, 60, 400, 10_000])
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
@pytest.mark.parametrize("grid", [None, 20])
def test_wilcoxon_against_scipy(n: int, alternative: str, grid: int | None) -> None:
    rng = np.random.default_rng(n)
    d = rng.normal(-0.05, 0.3, n)
    if grid:  # values on a grid: many tied magnitudes
        d = np.round(d * grid) / grid
    d = d[d != 0]
    if d.size <= 50 and np.unique(np.abs(d)).size == d.size:
        pytest.skip("scipy's exact null; _dist delegates it")
    want = stats.wilcoxon(d, alternative=alternative, method="auto", zero_method="wilcox")
    assert _same(_dist.wilcoxon_pvalue(d, alternative), want.pvalue)


def test_wilcoxon_small_exact_is_scipys() -> None:
    d = np.array([0.3, -0.1, 0.25, 0.5, -0.05, 0.7, 0.11, 0.42])
    want = stats.wilcoxon(d, alternative="greater", method="auto").pvalue
    assert _same(_dist.wilcoxon_pvalue(d, "greater"), want)


def test_monitor_stats_does_not_import_scipy_stats() -> None:
    code = "import sys, monitor.stats, monitor.verdict; print('scipy.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("n", [141, 9_999, 100_000, 100_001, 875_000, 5_000_000])
def test_kstwo_sf_against_scipy(n: int) -> None:
    z2 = [1e-3, 0.01, 0.3, 0.7, 1.0, 2.19, 2.2, 3.0, 20.0, 400.0]
    for d in [*(np.sqrt(z / n) for z in z2), 0.5 / n, 1.5 / n, 0.3, 0.6]:
        assert _same(_dist.kstwo_sf(d, float(n)), stats.kstwo.sf(d, float(n))), d


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.sampled_from([141, 2_000, 100_001, 875_000, 5_250_000, 40_000_000]),
    st.floats(1e-4, 2.2, exclude_max=True),
)
def test_kstwo_sf_in_pelz_goods_range_is_scipys_bit_for_bit(n: int, z2: float) -> None:
    """The branch evaluated here in plain floats (n d^2 < 2.2), against scipy's numpy one."""
    d = float(np.sqrt(z2 / n))
    assert _same(_dist.kstwo_sf(d, float(n)), stats.kstwo.sf(d, float(n))), (n, d)


def test_a_large_window_pair_without_drift_needs_no_scipy_stats() -> None:
    code = (
        "import sys, numpy as np\n"
        "from monitor.stats import build_baseline, drift_tests\n"
        "rng = np.random.default_rng(1)\n"
        "r = drift_tests(build_baseline(rng.normal(size=200_000)), rng.normal(size=200_000))\n"
        "print(r.ks.pvalue > 0.05, 'scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]
