"""Outcomes from judgments: 10,000 golden queries x 100 results, two windows, read included.

Three contestants, each in a fresh process after a warm-up, side by side in one run:

* ``input``: ``pyarrow.parquet.read_table`` of both windows' run rows and the judgments (the
  input arrays every contestant must hold: the memory yardstick);
* ``ours``: ``monitor.judged.judged_outcomes`` for the reference and the current window (parquet
  read, coding, ndcg@10 + ap + rr + p@10 + r@100 + rprec + judged@10, calibration), with the
  judgments cached as a running daemon has them, each window scored (not handed back as
  kept); ``ours_cold`` reads and codes the judgments too; ``ours_kept`` is a later check
  whose windows hold the same runs (the outcomes kept by ``judged_window_key``);
* ``pytrec_eval``: the same read, then trec_eval's ``ndcg_cut.10, map, recip_rank, P.10,
  recall.100, Rprec`` through pytrec_eval for both windows (building its dicts included).

Targets (issue 12): ours at least 5x faster than pytrec_eval; ours' peak memory within 1.5x of
the input arrays' (``input``'s tables, ``nbytes``). Peak memory is what the step allocates: numpy's
traced peak plus Arrow's pool peak.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

T0 = datetime(2026, 11, 23, 2, tzinfo=UTC)
MEASURES = {"ndcg_cut.10", "map", "recip_rank", "P.10", "recall.100", "Rprec"}


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def generate(root: Path, queries: int, results: int, judged: int) -> None:
    """Runs for two days (one run each) and the judgments, as parquet."""
    from monitor.sources import write_parquet

    g = np.random.default_rng(20261201)
    grades = g.choice(4, size=(queries, judged), p=(0.5, 0.25, 0.15, 0.1)).astype(np.float64)
    qid = np.char.add("q", np.arange(queries).astype(str))
    jdoc = np.char.add(
        np.repeat(qid, judged), np.char.add("-j", np.tile(np.arange(judged), queries).astype(str))
    )
    write_parquet(
        root / "qrels" / "qrels.parquet",
        {"query_id": np.repeat(qid, judged), "doc_id": jdoc, "grade": grades.ravel()},
    )
    for day in range(2):
        score = np.concatenate(
            [
                1.2 * grades + g.standard_normal(grades.shape),
                g.standard_normal((queries, results)) - 0.5,
            ],
            axis=1,
        )
        names = np.array([f"-j{k}" for k in range(judged)] + [f"-u{k}" for k in range(results)])
        order = np.argsort(-score, axis=1)[:, :results]
        top = np.take_along_axis(score, order, axis=1)
        doc = np.char.add(np.repeat(qid, results).reshape(queries, results), names[order])
        t = T0 + timedelta(days=day)
        n = queries * results
        write_parquet(
            root / "runs" / f"date={t.date()}" / "run.parquet",
            {
                "timestamp": np.full(n, np.datetime64(t.replace(tzinfo=None), "us")),
                "query_id": np.repeat(qid, results),
                "doc_id": doc.ravel(),
                "rank": np.tile(np.arange(1, results + 1), queries),
                "score": (1.0 / (1.0 + np.exp(-(top - 2.0)))).ravel(),
            },
        )


def _windows() -> list[tuple[datetime, datetime]]:
    return [(T0 + timedelta(days=d), T0 + timedelta(days=d, hours=1)) for d in range(2)]


def _read_inputs(root: Path) -> list[Any]:
    import pyarrow.parquet as pq

    tables = [
        pq.read_table(
            root / "runs",
            columns=["query_id", "doc_id", "rank", "score"],
            filters=[("timestamp", ">=", a), ("timestamp", "<", b)],
            partitioning=None,
        )
        for a, b in _windows()
    ]
    tables.append(pq.read_table(root / "qrels" / "qrels.parquet"))
    return tables


def _ours(root: Path, *, kept: bool = False) -> dict[str, float]:
    """Both windows' outcomes, scored (``kept``: handed back as kept from the run before, as
    an hourly check between two runs has its reference window's)."""
    from monitor.judged import forget_windows, judged_outcomes
    from monitor.sources import JudgedSpec, OutcomeSpec, Window

    if not kept:
        forget_windows()

    spec = OutcomeSpec(
        path=str(root / "runs"),
        judged=JudgedSpec(
            judgments=str(root / "qrels"),
            report=("ap", "rr", "p@10", "r@100", "rprec", "judged@10"),
        ),
    )
    out = {}
    for i, (a, b) in enumerate(_windows()):
        w = judged_outcomes(spec, Window(start=a, end=b))
        out[f"ndcg@10/{i}"] = float(w.outcomes.mean())
    return out


def _pytrec(root: Path) -> dict[str, float]:
    import pytrec_eval

    *runs, qrels_t = _read_inputs(root)
    qrels: dict[str, dict[str, int]] = {}
    for q, d, g in zip(
        qrels_t["query_id"].to_pylist(),
        qrels_t["doc_id"].to_pylist(),
        qrels_t["grade"].to_pylist(),
        strict=True,
    ):
        qrels.setdefault(q, {})[d] = int(g)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, MEASURES)
    out = {}
    for i, t in enumerate(runs):
        run: dict[str, dict[str, float]] = {}
        for q, d, r in zip(
            t["query_id"].to_pylist(), t["doc_id"].to_pylist(), t["rank"].to_pylist(), strict=True
        ):
            run.setdefault(q, {})[d] = -float(r)  # trec_eval orders by score: keep the ranks
        res = evaluator.evaluate(run)
        out[f"ndcg@10/{i}"] = float(np.mean([v["ndcg_cut_10"] for v in res.values()]))
    return out


def child(mode: str, root: Path) -> dict[str, Any]:
    """One contestant in this (fresh) process: a traced run for memory, then a timed one.

    Memory: numpy's peak (``tracemalloc``, which numpy reports to) plus Arrow's pool peak
    (``max_memory``), the allocations the step itself makes; the timed run comes second, warm
    (shared libraries loaded, footers cached), without tracing."""
    import tracemalloc

    import pyarrow as pa

    def cold() -> dict[str, float]:
        from monitor import judged
        from monitor.sources import judgments as source

        source._JUDGMENTS.clear()  # the first check after a start or a new judgments version
        judged._SUMMARIES.clear()
        return _ours(root)

    steps: dict[str, Callable[[], Any]] = {
        "input": lambda: _read_inputs(root),
        "ours": lambda: _ours(root),
        "ours_cold": cold,
        "ours_kept": lambda: _ours(root, kept=True),
        "pytrec_eval": lambda: _pytrec(root),
    }
    step = steps[mode]
    # import what the step imports before tracing: module objects are not the step's memory
    # (pyarrow imports pandas on its first pa.array() when pandas is installed, as the Spark
    # extra installs it: a one-time import, not the step's memory either)
    __import__(
        {"input": "pyarrow.parquet", "pytrec_eval": "pytrec_eval"}.get(mode, "monitor.judged")
    )
    pa.array([0.0])
    pool = pa.default_memory_pool()
    arrow_before = pool.max_memory()
    tracemalloc.start()
    result = step()
    numpy_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    arrow_peak = max(pool.max_memory() - arrow_before, 0)
    input_bytes = sum(t.nbytes for t in result) if mode == "input" else 0
    del result
    t0 = time.perf_counter()
    result = step()
    seconds = time.perf_counter() - t0
    check = result if isinstance(result, dict) else {}
    return {
        "mode": mode,
        "seconds": seconds,
        "peak_bytes": numpy_peak + arrow_peak,
        "input_bytes": input_bytes,
        "check": check,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--results", type=int, default=100)
    parser.add_argument("--judged", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "ROOT"), help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return 0
    root = Path(tempfile.mkdtemp(prefix="bench_outcomes_"))
    try:
        t0 = time.perf_counter()
        generate(root, args.queries, args.results, args.judged)
        print(
            f"{args.queries:,} queries x {args.results} results x 2 windows, {args.judged} "
            f"judgments per query, written in {time.perf_counter() - t0:.1f} s"
        )
        modes = ["input", "ours", "ours_cold", "ours_kept", "pytrec_eval"]
        results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for _ in range(args.repeats):
            for mode in modes:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", mode, str(root)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                results[mode].append(json.loads(out))
        sec = {m: statistics.median(r["seconds"] for r in results[m]) for m in modes}
        peak = {m: statistics.median(r["peak_bytes"] for r in results[m]) for m in modes}
        print(f"{'mode':12} {'median s':>9} {'peak MiB':>9}")
        for m in modes:
            print(f"{m:12} {sec[m]:9.3f} {peak[m] / 2**20:9.1f}")
        ours, theirs = results["ours"][0]["check"], results["pytrec_eval"][0]["check"]
        for key in ours:
            if abs(ours[key] - theirs[key]) > 1e-9:
                print(f"MISMATCH {key}: ours {ours[key]!r}, trec_eval {theirs[key]!r}")
                return 1
        speedup = sec["pytrec_eval"] / sec["ours"]
        print(
            f"ours with the judgments cached (every check but the first after a start or a new "
            f"judgments version) {sec['ours']:.3f} s; cold (judgments read and coded too) "
            f"{sec['ours_cold']:.3f} s = {sec['pytrec_eval'] / sec['ours_cold']:.2f}x pytrec_eval"
        )
        print(
            f"ours with both windows' outcomes kept (a check whose windows hold the runs the "
            f"check before scored: an hourly check between daily runs) {sec['ours_kept']:.4f} s"
        )
        input_bytes = results["input"][0]["input_bytes"]
        mib = input_bytes / 2**20
        print(f"input arrays (both windows' run columns and the judgments): {mib:.1f} MiB")
        memory = peak["ours"] / max(input_bytes, 1.0)
        ok = speedup >= 5.0 and memory <= 1.5
        print(
            f"mean ndcg@10 equal to trec_eval's; ours {speedup:.2f}x pytrec_eval's speed "
            f"(target >= 5x), peak {memory:.2f}x the input arrays' (target <= 1.5x): "
            f"{'met' if ok else 'NOT MET on this run'}"
        )
        return 0  # a missed target is reported, not a crash: make bench runs every benchmark
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
