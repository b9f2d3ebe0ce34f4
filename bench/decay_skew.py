"""The decay test's false alarms when per-query outcomes vary from run to run with a skew
(docs/statistics.md, "When the sign flips are valid, and the run-label test").

A golden set of ``--queries`` queries is evaluated once a day; each look pairs the new run's
per-query outcome with the query's mean over the reference window's 7 runs, as the outcome
reader builds it, and decides with ``paired_test`` at a look's settings under the default
budget (one-sided 'less', margin 0.005, alpha = 0.05 / 31, R = max(9999, ceil(20 / alpha))).
Outcomes are reciprocal ranks (rank ~ Geometric(1/2), a fifth of the queries never answered);
a share ``--hard`` of the queries finds its relevant document only in a share ``--find`` of the
runs (RR 0 otherwise), the rest are the same in every run. Nothing changes (or the new runs
drop by ``--drop``). Per month, a fixed reference of 7 runs and 30 daily looks; the share of
months with a false decay against the 5 % budget (Wilson 95 %) for three designs side by side:
the sign flips on the 7-run means (what the monitor did before 2026-12-08: d is skewed), the
run labels on the same runs (what a look does now), and the sign flips against a one-run
reference (the pair's two sides exchangeable, d symmetric).

Usage: ``python bench/decay_skew.py [--months 60] [--hard 0.3] [--find 0.1] [--drop 0]``;
about 30 s per design per 60 months. In ``make bench``: it fails when the run labels are over
the budget beyond doubt (the Wilson interval's low end above 5 %).
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from monitor.stats import Runs, paired_test

LOOKS = 30  # daily looks in the 30-day budget period
REFERENCE_RUNS = 7  # a 7-day rolling reference of daily runs
BUDGET = 0.05
ALPHA = BUDGET * 1 / 31  # a look one daily cadence after the previous: budget / (30 + 1)
RESAMPLES = max(9999, math.ceil(20 / ALPHA))
MARGIN = 0.005


def _wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def _run(rng: np.random.Generator, rr: np.ndarray, hard: np.ndarray, find: float) -> np.ndarray:
    """One evaluation run: each hard query finds its document (its RR) with chance ``find``."""
    return np.where(hard & (rng.random(rr.size) >= find), 0.0, rr)


def _months(args: argparse.Namespace, reference_runs: int, by_runs: bool) -> tuple[int, int, int]:
    """(months with a false decay, looks that raised one, looks)."""
    rng = np.random.default_rng(args.seed)
    n = args.queries
    hard = np.arange(n) < round(args.hard * n)
    raised = raised_looks = looks = 0
    for _ in range(args.months):
        rr = 1.0 / rng.geometric(0.5, n)
        rr[rng.random(n) < 0.2] = 0.0

        runs = np.array([_run(rng, rr, hard, args.find) for _ in range(reference_runs)]).T
        ref_runs = Runs(runs.ravel(), np.full(n, reference_runs, dtype=np.int64))
        reference = ref_runs.means()
        month = False
        for _ in range(LOOKS):
            new = _run(rng, rr, hard, args.find) - args.drop
            result = paired_test(
                reference,
                new,
                alternative="less",
                margin=MARGIN,
                n_resamples=RESAMPLES,
                alpha=ALPHA,
                rng=np.random.default_rng(0),
                n_bootstrap=200,
                reference_runs=ref_runs if by_runs else None,
                current_runs=Runs(new, np.ones(n, np.int64)) if by_runs else None,
            )
            looks += 1
            if result.pvalue <= ALPHA:
                raised_looks += 1
                month = True
        raised += month
    return raised, raised_looks, looks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--months", type=int, default=60)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--hard", type=float, default=0.3)
    parser.add_argument("--find", type=float, default=0.1)
    parser.add_argument("--drop", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args()
    failed = False
    for runs, by_runs, label in (
        (REFERENCE_RUNS, False, "7-run mean, sign flips"),
        (REFERENCE_RUNS, True, "7-run mean, run labels"),
        (1, False, "one run, sign flips"),
    ):
        months, raised_looks, looks = _months(args, runs, by_runs)
        lo, hi = _wilson(months, args.months)
        verdict = "over budget" if lo > BUDGET else "within" if hi <= BUDGET else "undecided"
        print(
            f"reference {label}: false decay in {months} of {args.months} months "
            f"({months / args.months:.1%}, Wilson 95 % [{lo:.1%}, {hi:.1%}]; budget "
            f"{BUDGET:.0%}: {verdict}); per look {raised_looks / looks:.4f} for an alpha of "
            f"{ALPHA:.4f}",
            flush=True,
        )
        failed |= by_runs and lo > BUDGET and not args.drop
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
