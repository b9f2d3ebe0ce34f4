"""The run-label permutation test: brute-force enumeration, its special cases (the sign flips,
every labelling), Monte Carlo against exact, its null in a skewed world, and validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.errors import StatsInputError
from monitor.stats import (
    Runs,
    paired_test,
    round_differences,
    run_label_test,
    sign_flip_test,
)

outcome = st.integers(0, 20).map(lambda i: i / 20)  # nDCG-like values on a grid (ties common)


@st.composite
def two_sides(draw: st.DrawFn, max_keys: int = 4, max_runs: int = 3) -> tuple[Runs, Runs]:
    keys = draw(st.integers(1, max_keys))
    sides = []
    for _ in range(2):
        counts = draw(st.lists(st.integers(1, max_runs), min_size=keys, max_size=keys))
        values = draw(st.lists(outcome, min_size=sum(counts), max_size=sum(counts)))
        sides.append(Runs(np.array(values), np.array(counts, dtype=np.int64)))
    return sides[0], sides[1]


def _per_key(runs: Runs) -> list[np.ndarray]:
    starts = np.cumsum(runs.counts) - runs.counts
    return [runs.values[s : s + c] for s, c in zip(starts, runs.counts, strict=True)]


def _brute(ref: Runs, cur: Runs, shift: float, subsets: str) -> tuple[int, int, int]:
    """(count T* <= T, count T* >= T, labellings) by listing every labelling from scratch:
    'rotations' (n consecutive of the cycle ref + cur) or 'all' (any n of the k runs)."""
    options = []
    observed = 0.0
    for r, c in zip(_per_key(ref), _per_key(cur), strict=True):
        pooled = np.concatenate([r, c + shift])
        k, n = pooled.size, c.size
        if subsets == "rotations":
            chosen = [[(start + j) % k for j in range(n)] for start in range(k)]
        else:
            chosen = [list(s) for s in itertools.combinations(range(k), n)]
        ds = []
        for idx in chosen:
            mask = np.zeros(k, dtype=bool)
            mask[idx] = True
            ds.append(round(float(pooled[mask].mean() - pooled[~mask].mean()), 12))
        options.append(ds)
        observed += round(float((c + shift).mean() - r.mean()), 12)
    less = greater = total = 0
    for combo in itertools.product(*options):
        t = sum(combo)
        less += t <= observed + 1e-9
        greater += t >= observed - 1e-9
        total += 1
    return less, greater, total


@settings(max_examples=60, deadline=None)
@given(two_sides(), st.sampled_from([0.0, 0.05]))
def test_exact_p_counts_every_rotation(sides: tuple[Runs, Runs], margin: float) -> None:
    ref, cur = sides
    less, greater, total = _brute(ref, cur, margin, "rotations")
    res = run_label_test(ref, cur, alternative="less", margin=margin, n_resamples=10**6)
    assert res.exact
    assert res.n_resamples == total
    assert round(res.pvalue * total) == less
    assert res.min_pvalue == 1 / total
    res_g = run_label_test(ref, cur, alternative="greater", margin=margin, n_resamples=10**6)
    assert round(res_g.pvalue * total) == _brute(ref, cur, -margin, "rotations")[1]
    if margin == 0.0:
        two = run_label_test(ref, cur, alternative="two-sided", n_resamples=10**6)
        assert two.pvalue == pytest.approx(min(2 * min(less, greater) / total, 1.0), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(two_sides(max_keys=3, max_runs=4))
def test_one_current_run_a_key_is_every_labelling(sides: tuple[Runs, Runs]) -> None:
    ref, cur = sides
    cur = Runs(cur.means(), np.ones(cur.keys, dtype=np.int64))  # one new run of each key
    less, _, total = _brute(ref, cur, 0.0, "all")
    res = run_label_test(ref, cur, alternative="less", n_resamples=10**6)
    assert res.n_resamples == total
    assert round(res.pvalue * total) == less


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(outcome, outcome), min_size=1, max_size=10))
def test_one_run_a_side_is_the_sign_flips(pairs: list[tuple[float, float]]) -> None:
    ref = np.array([a for a, _ in pairs])
    cur = np.array([b for _, b in pairs])
    ones = np.ones(ref.size, dtype=np.int64)
    got = run_label_test(Runs(ref, ones), Runs(cur, ones), alternative="less", n_resamples=4096)
    want = sign_flip_test(round_differences(cur - ref), alternative="less", n_resamples=4096)
    assert got.exact
    assert want.exact
    assert got.pvalue == pytest.approx(want.pvalue, abs=1e-12)
    assert got.min_pvalue == want.min_pvalue
    assert got.method == "run-label"
    assert want.method == "sign-flip"


def test_monte_carlo_agrees_with_the_enumeration() -> None:
    rng = np.random.default_rng(3)
    keys = 8
    ref = Runs(rng.random(keys * 3), np.full(keys, 3, dtype=np.int64))
    cur = Runs(rng.random(keys) - 0.1, np.ones(keys, dtype=np.int64))
    r = 20_000
    for alternative in ("two-sided", "greater"):
        exact = run_label_test(ref, cur, alternative=alternative, n_resamples=4**keys)
        assert exact.exact
        assert exact.n_resamples == 4**keys
        mc = run_label_test(ref, cur, alternative=alternative, n_resamples=r, rng=1)
        assert not mc.exact
        p = exact.pvalue
        if mc.n_resamples == r:  # two-sided draws all R
            assert alternative == "two-sided"
            assert abs(mc.pvalue - p) <= 4 * np.sqrt(p * (1 - p) / r) + 1 / (r + 1)
        else:  # one-sided: stopped at the 100th as extreme, p = 100 / L, sd ~ p sqrt(1/100)
            assert mc.pvalue == pytest.approx(100 / mc.n_resamples)
            assert abs(mc.pvalue - p) <= 4 * p * np.sqrt((1 - p) / 100)
        again = run_label_test(ref, cur, alternative=alternative, n_resamples=r, rng=1)
        assert again == mc  # a seed gives the same p


def test_a_look_without_evidence_stops_early_and_one_near_alpha_draws_all() -> None:
    """Besag & Clifford: one-sided, the run stops at the resample L that brings the 100th
    null statistic as extreme as T (p = 100 / L); a p near or below alpha draws all R."""
    rng = np.random.default_rng(8)
    keys, r = 300, 300_000
    quality = rng.random(keys)
    ref = Runs(np.repeat(quality, 7) + rng.normal(0, 0.05, keys * 7), np.full(keys, 7))
    ones = np.ones(keys, dtype=np.int64)
    flat = run_label_test(
        ref, Runs(quality + rng.normal(0, 0.05, keys), ones), alternative="less", n_resamples=r
    )
    assert flat.n_resamples < 2_000  # p is large: ~100 / p resamples
    assert flat.pvalue == pytest.approx(100 / flat.n_resamples)
    assert flat.min_pvalue == 1 / (r + 1)  # the design's floor, whatever was drawn
    drop = run_label_test(
        ref,
        Runs(quality - 0.03 + rng.normal(0, 0.05, keys), ones),
        alternative="less",
        n_resamples=r,
    )
    assert drop.n_resamples == r
    assert drop.pvalue < 100 / r


def test_its_null_holds_where_the_sign_flips_do_not() -> None:
    """A golden set of 300 reciprocal ranks, 30 % of the queries finding their document in a
    tenth of the runs; a 7-run reference mean against one new run, nothing changed: d is
    skewed, so the sign flips reject too often (bench/decay_skew.py at the monitor's look
    alpha); the run labels hold the level."""
    rng = np.random.default_rng(5)
    n, looks, alpha = 300, 600, 0.01
    hard = np.arange(n) < 90
    rejected = {"run-label": 0, "sign-flip": 0}
    for look in range(looks):
        rr = 1.0 / rng.geometric(0.5, n)
        rr[rng.random(n) < 0.2] = 0.0
        runs = np.array([np.where(hard & (rng.random(n) >= 0.1), 0.0, rr) for _ in range(8)])
        ref = Runs(runs[:7].T.ravel(), np.full(n, 7, dtype=np.int64))
        cur = Runs(runs[7], np.ones(n, dtype=np.int64))
        labels = run_label_test(ref, cur, alternative="less", n_resamples=999, rng=look)
        flips = sign_flip_test(
            round_differences(runs[7] - ref.means()),
            alternative="less",
            n_resamples=999,
            rng=look,
        )
        rejected["run-label"] += labels.pvalue <= alpha
        rejected["sign-flip"] += flips.pvalue <= alpha
    # 600 looks at 0.01: 6 expected, 15 is 3.7 sd above; the sign flips reject ~23 (3.8 %)
    assert rejected["run-label"] <= 15
    assert rejected["sign-flip"] >= 12


def test_paired_test_decides_with_the_run_labels_when_a_key_has_several_runs() -> None:
    rng = np.random.default_rng(0)
    ref = Runs(rng.random(60), np.full(20, 3, dtype=np.int64))
    cur = Runs(rng.random(20), np.ones(20, dtype=np.int64))
    res = paired_test(
        ref.means(), cur.means(), alternative="less", rng=0, reference_runs=ref, current_runs=cur
    )
    assert res.permutation.method == "run-label"
    want = run_label_test(
        ref, cur, alternative="less", n_resamples=9999, rng=np.random.default_rng(0)
    )
    assert res.permutation.n_resamples == want.n_resamples
    # one run a side everywhere: the sign flips decide, as without runs
    ones = np.ones(20, dtype=np.int64)
    a, b = rng.random(20), rng.random(20)
    with_runs = paired_test(a, b, rng=1, reference_runs=Runs(a, ones), current_runs=Runs(b, ones))
    assert with_runs == paired_test(a, b, rng=1)


def test_runs_take_and_means() -> None:
    runs = Runs(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), np.array([1, 2, 3]))
    np.testing.assert_array_equal(runs.means(), [1.0, 2.5, 5.0])
    taken = runs.take(np.array([2, 0]))
    np.testing.assert_array_equal(taken.values, [4.0, 5.0, 6.0, 1.0])
    np.testing.assert_array_equal(taken.counts, [3, 1])


@pytest.mark.parametrize(
    ("values", "counts", "match"),
    [
        ([1.0, 2.0], [1], "add up"),
        ([1.0], [1, 0], "at least 1"),
        ([1.0, np.nan], [2], "NaN"),
        ([1.0], [1.5], "integers"),
    ],
)
def test_runs_refuse_bad_shapes(values: list[float], counts: list[float], match: str) -> None:
    with pytest.raises(StatsInputError, match=match):
        Runs(np.array(values), np.array(counts))


def test_bad_calls_are_named() -> None:
    one = Runs(np.array([0.5, 0.6]), np.array([1, 1]))
    three = Runs(np.array([0.5, 0.6, 0.7]), np.array([1, 1, 1]))
    with pytest.raises(StatsInputError, match="same keys"):
        run_label_test(one, three)
    with pytest.raises(StatsInputError, match="margin"):
        run_label_test(one, one, margin=0.1)
    with pytest.raises(StatsInputError, match="together"):
        paired_test([0.5, 0.6], [0.5, 0.6], reference_runs=one)
    with pytest.raises(StatsInputError, match="average to the paired outcomes"):
        paired_test([0.5, 0.7], [0.5, 0.6], reference_runs=one, current_runs=one)
    with pytest.raises(StatsInputError, match="one key a pair"):
        paired_test([0.5, 0.6], [0.5, 0.6], reference_runs=three, current_runs=one)
