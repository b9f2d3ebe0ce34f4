"""Benchmark ``monitor report`` against ``monitor check`` on the same slot, side by side in one run.

World (temporary directory): a reference day and a current day of top-1 scores, ``--scores``
each (default 10,000,000: 20% zeros, lognormal otherwise, the current day shifted), hourly
parquet files; a golden set of ``--pairs`` queries (default 10,000) evaluated once on each day.
The monitor: ``windows.current = "1d"``, ``windows.reference = "1d"`` (rolling), hourly schedule;
the slot is the end of the current day, so the check reads 10M + 10M scores, pairs 10k
queries (without daemon state both runs in the lookback are new, pooled, against the reference
day's run) and decides drift and decay.

Measured, interleaved (check, report, check, report, ...) ``--repeats`` times in this process
after one warm-up of each: ``check`` = ``Runner.check`` (what ``monitor check`` runs); ``report``
= ``Runner.check_detail`` + ``render_monitor_page`` + writing the file (what ``monitor report``
runs). Reported: median wall and CPU seconds of each, the page size and the ratio
report / check. Target (issue 11): ratio <= 1.2 and page < 1 MB; the script prints MET or NOT
MET and exits 1 when not met (``bench/run.py`` counts it). Single-threaded BLAS.

    python bench/bench_report.py [--scores 10000000] [--pairs 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from monitor.config import load_config  # noqa: E402
from monitor.jobs import Runner, StateStore  # noqa: E402
from monitor.report import PageContext, render_monitor_page  # noqa: E402
from monitor.sources import write_parquet  # noqa: E402

TARGET_RATIO = 1.2
TARGET_BYTES = 1_000_000
DAY0 = datetime(2026, 11, 1, tzinfo=UTC)
AT = DAY0 + timedelta(days=2)


def build_world(root: Path, *, scores: int, pairs: int, seed: int = 1) -> Path:
    """Write the two days of scores, the two runs of outcomes and the config; its path."""
    rng = np.random.default_rng(seed)
    for day, shift in ((0, 0.0), (1, 0.15)):
        start = np.datetime64(DAY0.replace(tzinfo=None) + timedelta(days=day), "us")
        per_hour = scores // 24
        for hour in range(24):
            n = per_hour if hour < 23 else scores - 23 * per_hour
            offsets = np.sort(rng.integers(0, 3_600_000_000, size=n))
            ts = start + np.timedelta64(hour, "h") + offsets.astype("timedelta64[us]")
            values = rng.lognormal(2.0 + shift, 0.5, size=n)
            values[rng.random(n) < 0.2] = 0.0
            date = str(start.astype("datetime64[D]"))
            write_parquet(
                root / "scores" / f"date={date}" / f"hour={hour:02d}" / "part-0.parquet",
                {"timestamp": ts, "score": values},
            )
    quality = rng.beta(3.0, 2.5, size=pairs)
    ids = np.array([f"q{k:05d}" for k in range(pairs)])
    for day, delta in ((0, 0.0), (1, -0.03)):
        start = np.datetime64(DAY0.replace(tzinfo=None) + timedelta(days=day, hours=2), "us")
        ts = start + np.sort(rng.integers(0, 1_200_000_000, size=pairs)).astype("timedelta64[us]")
        outcome = np.clip(quality + delta + rng.normal(0, 0.02, size=pairs), 0.0, 1.0)
        date = str(start.astype("datetime64[D]"))
        write_parquet(
            root / "outcomes" / f"date={date}" / "part-0.parquet",
            {"timestamp": ts, "query_id": ids, "outcome": outcome},
        )
    config = root / "monitor.toml"
    config.write_text(
        '[server]\nstate_dir = "state"\n\n[[monitors]]\nname = "bench"\nschedule = "1h"\n'
        'scores.path = "scores"\nscores.timestamp_column = "timestamp"\n'
        'scores.score_column = "score"\noutcomes.path = "outcomes"\n'
        'outcomes.timestamp_column = "timestamp"\noutcomes.query_column = "query_id"\n'
        'outcomes.outcome_column = "outcome"\nwindows.current = "1d"\nwindows.reference = "1d"\n'
    )
    return config


def _timed(fn: object) -> tuple[float, float, object]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()  # type: ignore[operator]
    return time.perf_counter() - w0, time.process_time() - c0, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scores", type=int, default=10_000_000, help="scores per window")
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        config_path = build_world(root, scores=args.scores, pairs=args.pairs)
        print(
            f"world: 2 x {args.scores:,} scores, {args.pairs:,} pairs, written in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        config = load_config(config_path)
        store = StateStore(config.server.state_dir, readonly=True)
        runner = Runner(config, store=store)
        out = root / "page.html"
        sizes: list[int] = []

        def check() -> object:
            return runner.check("bench", AT)

        def report() -> object:
            verdict, detail = runner.check_detail("bench", AT)
            page = render_monitor_page(
                config.monitor("bench"), verdict, detail, (), PageContext(report=config.report)
            )
            out.write_text(page, encoding="utf-8")
            sizes.append(len(page.encode()))
            return verdict

        _timed(check)
        _timed(report)
        times: dict[str, list[tuple[float, float]]] = {"check": [], "report": []}
        verdicts = {}
        for _ in range(args.repeats):
            for name, fn in (("check", check), ("report", report)):
                wall, cpu, verdict = _timed(fn)
                times[name].append((wall, cpu))
                verdicts[name] = verdict
    same = verdicts["check"].to_dict() == verdicts["report"].to_dict()  # type: ignore[attr-defined]
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for k, v in times.items()
    }
    ratio = med["report"][0] / med["check"][0]
    cpu_ratio = med["report"][1] / med["check"][1]
    state = verdicts["check"].state  # type: ignore[attr-defined]
    print(f"check : {med['check'][0]:.2f} s wall, {med['check'][1]:.2f} s CPU (state {state})")
    print(
        f"report: {med['report'][0]:.2f} s wall, {med['report'][1]:.2f} s CPU, "
        f"page {sizes[-1] / 1024:.0f} KiB"
    )
    print(f"report / check: {ratio:.2f} wall, {cpu_ratio:.2f} CPU (target <= {TARGET_RATIO})")
    print(f"same verdict from both: {same}")
    met = ratio <= TARGET_RATIO and sizes[-1] < TARGET_BYTES and same
    print(f"target: {'MET' if met else 'NOT MET'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
