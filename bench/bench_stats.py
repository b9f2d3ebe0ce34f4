"""Benchmark of ``monitor.stats`` against its floor, measured side by side in one run.

Cases (each in a fresh subprocess, so peak memory is per case):

* ``drift``: ``build_baseline`` + ``drift_tests`` (PSI + KS) on 10M vs 10M float64 scores with 20 %
  exact zeros.
* ``floor``: the least plain numpy can do for the same answers: sort both arrays, KS D by two
  ``searchsorted`` of the current scores into the reference (no pooled array), bin counts by
  ``searchsorted`` of the quantile edges in the sorted arrays.
* ``paired``: ``paired_test`` on 10 000 pairs, 9 999 sign-flip resamples + a 9 999-resample BCa
  interval.
* ``scipy_perm``: ``scipy.stats.permutation_test`` (default batch) on the same pairs, run smaller
  (999 resamples) because at 9 999 it needs ~7 GB.

Memory (MiB) is the peak of numpy allocations traced by ``tracemalloc`` during the call (numpy
reports its buffers to tracemalloc), i.e. the extra memory above the input data; the ru_maxrss
growth over the same call is printed next to it. Time is the best of ``--repeat`` fresh runs.
Usage: ``python bench/bench_stats.py [--n 10000000] [--repeat 2]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _scores(n: int, seed: int, shift: float) -> np.ndarray:
    """n scores, 20 % exact zeros, the rest gamma; built in place (no big temporaries)."""
    rng = np.random.default_rng(seed)
    out = np.empty(n)
    step = 1 << 20
    for start in range(0, n, step):
        part = out[start : start + step]
        rng.standard_gamma(2.0, size=part.size, out=part)
        part += shift
        part[rng.random(part.size) < 0.2] = 0.0
    return out


def _case_drift(n: int) -> Callable[[], object]:
    from monitor.stats import build_baseline, drift_tests

    ref, cur = _scores(n, 1, 0.0), _scores(n, 2, 0.01)

    def run() -> object:
        return drift_tests(build_baseline(ref), cur)

    return run


def _case_floor(n: int) -> Callable[[], object]:
    ref, cur = _scores(n, 1, 0.0), _scores(n, 2, 0.01)

    def run() -> object:
        x, y = np.sort(ref), np.sort(cur)
        # exact D from two searchsorted of y into x (no pooled array), as bench_check's floor:
        # F_x - F_y peaks just below some y_k (first of ties), F_y - F_x at some y_k (last)
        n, m = x.size, y.size
        k = np.arange(m, dtype=np.int64)
        below = np.searchsorted(x, y, side="left").astype(np.int64)
        upto = np.searchsorted(x, y, side="right").astype(np.int64)
        d = max(int((below * m - k * n).max()), int(((k + 1) * n - upto * m).max()), 0) / (n * m)
        edges = np.unique(np.quantile(x, np.arange(1, 10) / 10))
        counts = [
            np.diff(np.r_[0, np.searchsorted(a, edges, side="right"), a.size]) for a in (x, y)
        ]
        return d, counts

    return run


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    ref = rng.random(n)
    return ref, np.clip(ref + rng.normal(-0.003, 0.1, n), 0, 1)


def _case_paired(n: int) -> Callable[[], object]:
    from monitor.stats import paired_test

    ref, cur = _pairs(n)

    def run() -> object:
        return paired_test(ref, cur, alternative="less", margin=0.01, n_resamples=9_999, rng=0)

    return run


def _case_scipy_perm(n: int) -> Callable[[], object]:
    from scipy import stats

    ref, cur = _pairs(n)
    d = cur - ref

    def run() -> object:
        return stats.permutation_test(
            (d,), np.mean, permutation_type="samples", n_resamples=999, rng=0
        )

    return run


CASES: dict[str, Callable[[int], Callable[[], object]]] = {
    "drift": _case_drift,
    "floor": _case_floor,
    "paired": _case_paired,
    "scipy_perm": _case_scipy_perm,
}


def _child(case: str, n: int) -> None:
    run = CASES[case](n)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"seconds": seconds, "peak_mb": peak / 2**20, "rss_growth_mb": (rss1 - rss0) / 1024}
        )
    )


def _measure(case: str, n: int, repeat: int) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--child", case, "--n", str(n)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "seconds": min(r["seconds"] for r in runs),
        "peak_mb": min(r["peak_mb"] for r in runs),
        "rss_growth_mb": min(r["rss_growth_mb"] for r in runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="scores per sample (drift)")
    parser.add_argument("--pairs", type=int, default=10_000, help="pairs (paired test)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.n)
        return 0

    def show(name: str, r: dict[str, Any]) -> None:
        print(
            f"{name:<34} {r['seconds']:8.3f} s  {r['peak_mb']:9.1f} MiB traced  "
            f"{r['rss_growth_mb']:9.1f} MiB rss growth",
            flush=True,
        )

    ours = _measure("drift", args.n, args.repeat)
    floor = _measure("floor", args.n, args.repeat)
    show(f"drift_tests {args.n:,} vs {args.n:,}", ours)
    show("floor (sort + searchsorted KS + counts)", floor)
    t_ratio = ours["seconds"] / floor["seconds"]
    m_ratio = ours["peak_mb"] / floor["peak_mb"]
    print(
        f"ratio ours/floor: time {t_ratio:.2f}x, traced peak memory {m_ratio:.2f}x "
        f"(target <= 1.2x each)"
    )
    paired = _measure("paired", args.pairs, args.repeat)
    show(f"paired_test {args.pairs:,} pairs R=9999 + BCa", paired)
    print(
        f"paired target: < 1.5 s and < 300 MiB -> "
        f"{'ok' if paired['seconds'] < 1.5 and paired['peak_mb'] < 300 else 'MISSED'}"
    )
    scipy_small = _measure("scipy_perm", args.pairs, 1)
    show("scipy permutation_test R=999", scipy_small)
    failed = t_ratio > 1.2 or m_ratio > 1.2 or paired["seconds"] >= 1.5 or paired["peak_mb"] >= 300
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
