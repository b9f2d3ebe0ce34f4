"""Benchmark ``monitor report`` against ``monitor check`` on the same slot, side by side in one run.

World (temporary directory): a reference day and a current day of top-1 scores, ``--scores``
each (default 10,000,000: 20% zeros, lognormal otherwise, the current day shifted), hourly
parquet files; a golden set of ``--pairs`` queries (default 10,000) evaluated once on each day.
The monitor: ``windows.current = "1d"``, ``windows.reference = "1d"`` (rolling), hourly schedule;
the slot is the end of the current day, so the check reads 10M + 10M scores, pairs 10k
queries (the daemon's state is from before the current day's run landed: a new look) and
decides drift and decay.

Measured in fresh processes, interleaved (check, report, check, report, ...) ``--repeats``
times after one warm-up of each, with the daemon's state from one run at day 1, 01:00 (so both
decide the slot from it, as on call): ``check`` = ``python -m monitor check --json --at T``,
``report`` = ``python -m monitor report --at T --out page.html``. Reported: median wall and CPU
seconds of each (user + sys of the child), the page size, the ratio report / check of the fastest
runs and of the medians. Target (issue 11): the fastest runs' ratio <= 1.2 and page < 1 MB; the
script prints MET or NOT MET; it exits 1 (``bench/run.py`` counts it) when the page disagrees
with the check or is over 1 MB, not on a timing miss (as ``bench_check.py``). Why fresh
processes and the fastest runs: on this VM a process that touches memory the guest has not used
lately pays for page faults that can double its time (timed in one process, report / check was
0.5 in one run and 2.1 in the next); in fresh processes the check repeats within 5 %. The report
sorted the current window a second time for its ECDFs until 2026-12-05 and was sometimes caught
by them (medians 1.5-1.6x, fastest runs 1.06-1.51x on 2026-12-01); the verdict and the page now
share one sort (1.05x). The fastest run is the cost of the work; the medians are printed beside.
Single-threaded BLAS.

    python bench/bench_report.py [--scores 10000000] [--pairs 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from html import escape as html_escape
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from monitor.cpu import prefer_avx2  # noqa: E402

# numpy's kernels as the `monitor` command picks them on this processor, before numpy loads:
# the threshold cache seeded here is keyed by them, and the timed commands make the same choice
prefer_avx2()

import numpy as np  # noqa: E402

from monitor.config import load_config  # noqa: E402
from monitor.jobs import Runner  # noqa: E402
from monitor.sources import write_parquet  # noqa: E402
from monitor.thresholds import save_thresholds  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    import resource
    import subprocess

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scores", type=int, default=10_000_000, help="scores per window")
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parent.parent
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
        Runner(config).run("bench", DAY0 + timedelta(days=1, hours=1))  # the daemon's state
        save_thresholds(config.server.state_dir, known=0)  # and its threshold cache
        at = AT.isoformat().replace("+00:00", "Z")
        page = root / "page.html"
        base = [sys.executable, "-m", "monitor"]
        commands = {
            "check": [*base, "check", "--config", str(config_path), "--json", "--at", at],
            "report": [
                *base,
                "report",
                "--config",
                str(config_path),
                "--at",
                at,
                "--out",
                str(page),
            ],
        }
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=str(repo), PYTHONPYCACHEPREFIX=str(root / "pycache"))

        def timed(name: str) -> tuple[float, float, str]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            w0 = time.perf_counter()
            done = subprocess.run(commands[name], capture_output=True, text=True, env=env)
            wall = time.perf_counter() - w0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            if done.returncode not in (0, 1, 2):  # 0 ok, 1 warning, 2 critical: a state
                raise SystemExit(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
            return wall, cpu, done.stdout

        timed("check")  # warm-up: bytecode and page cache
        timed("report")
        times: dict[str, list[tuple[float, float]]] = {"check": [], "report": []}
        out = ""
        for _ in range(args.repeats):
            for name in ("check", "report"):
                wall, cpu, stdout = timed(name)
                times[name].append((wall, cpu))
                out = stdout if name == "check" else out
        size = page.stat().st_size
        verdict = json.loads(out)["monitors"][0]
        html = page.read_text(encoding="utf-8")
        # the page's exact values (data-value of each JSON path) are the check's
        same = f'data-value="{html_escape(json.dumps(verdict["state"]))}"' in html and all(
            f'data-key="{side}.{key}" data-value="{html_escape(json.dumps(verdict[side][key]))}"'
            in html
            for side, key in (
                ("input", "psi"),
                ("input", "ks_statistic"),
                ("outcome", "mean_difference"),
            )
        )
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for k, v in times.items()
    }
    ratio = med["report"][0] / med["check"][0]
    cpu_ratio = med["report"][1] / med["check"][1]
    fast = {k: min(w for w, _ in v) for k, v in times.items()}
    fast_ratio = fast["report"] / fast["check"]
    print(
        f"check : {med['check'][0]:.2f} s wall, {med['check'][1]:.2f} s CPU (state "
        f"{verdict['state']})"
    )
    print(
        f"report: {med['report'][0]:.2f} s wall, {med['report'][1]:.2f} s CPU, page "
        f"{size / 1024:.0f} KiB"
    )
    print(
        f"report / check: fastest runs {fast_ratio:.2f} wall (target <= {TARGET_RATIO}); "
        f"medians {ratio:.2f} wall, {cpu_ratio:.2f} CPU"
    )
    print(f"same verdict from both (state, PSI, KS D, mean difference exactly): {same}")
    met = fast_ratio <= TARGET_RATIO and size < TARGET_BYTES
    print(f"target: {'MET' if met else 'NOT MET'}")
    # a timing miss is reported, not failed (timings on this VM are noisy, as bench_check's);
    # a page that disagrees with the check, or one over 1 MB, fails
    return 0 if same and size < TARGET_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
