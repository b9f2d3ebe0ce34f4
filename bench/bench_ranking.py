"""Benchmark of ``monitor.stats.ranking_metrics``: 10 000 queries x 100 results, all metrics.

The run has random scores rounded to 1e-3 (so ties occur), about 5 % duplicate rows, and 30
judgments per query (grades 0-2), a fifth of the run's rows judged. Time is the best of
``--repeat`` calls; memory is the peak of numpy allocations traced by ``tracemalloc`` during one
call (the extra memory above the inputs), printed next to the size of the input arrays.
Usage: ``python bench/bench_ranking.py [--queries 10000] [--depth 100] [--repeat 5] [--rank]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

METRICS = ["ndcg@10", "ap", "rr", "p@10", "r@100", "judged@10", "rprec"]


def main() -> int:
    from monitor.stats import ranking_metrics

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rank", action="store_true", help="also pass a rank column")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    nq, n_docs = args.queries, 200_000
    n = nq * args.depth
    run_query = rng.permutation(np.repeat(np.arange(nq), args.depth))
    run_doc = rng.integers(0, n_docs, n)
    score = np.round(rng.random(n), 3)
    pairs = np.unique(np.repeat(np.arange(nq), 30) * n_docs + rng.integers(0, n_docs, nq * 30))
    judged_query, judged_doc = pairs // n_docs, pairs % n_docs
    grade = rng.integers(0, 3, pairs.size).astype(np.float64)
    rows, picks = rng.integers(0, n, n // 5), rng.integers(0, pairs.size, n // 5)
    run_query[rows], run_doc[rows] = judged_query[picks], judged_doc[picks]
    rank = rng.integers(1, args.depth + 1, n) if args.rank else None
    inputs = [run_query, run_doc, score, judged_query, judged_doc, grade]
    size = sum(a.nbytes for a in inputs) + (0 if rank is None else rank.nbytes)

    def call() -> Any:
        return ranking_metrics(
            run_query, run_doc, judged_query, judged_doc, grade,
            n_queries=nq, metrics=METRICS, score=score, rank=rank,
        )  # fmt: skip

    call()
    best = min(_timed(call) for _ in range(args.repeat))
    tracemalloc.start()
    result = call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{nq} queries x {args.depth} results, rank column: {args.rank}")
    print(f"time: {best * 1e3:.1f} ms (best of {args.repeat})")
    print(f"memory: peak {peak / 1e6:.1f} MB for {size / 1e6:.1f} MB of input ({peak / size:.2f}x)")
    print(f"duplicates dropped: {result.duplicates}")
    return 0


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(main())
