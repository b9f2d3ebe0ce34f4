"""Benchmark ``monitor backtest``: 30 days of hourly checks on a 1,000,000-scores-per-day log.

Builds the world in a temporary directory (``drift_and_decay``, fixed 7-day reference
``[origin, origin + 7d)``, checks hourly from ``origin + 8d``), replays ``--checks`` slots through
:func:`monitor.backtest.backtest` and prints the replay's seconds, seconds per check, the ratio
to the 60 s target (projected to 720 checks when fewer are replayed) and, with ``--profile``, the
functions where the time goes. Single-threaded: pin BLAS threads to 1 before numpy loads.

    python bench/bench_backtest.py [--per-day 1000000] [--checks 720] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import pstats
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from monitor.backtest import backtest  # noqa: E402
from monitor.config import load_config  # noqa: E402
from monitor.simulate import SCENARIOS, write_world  # noqa: E402

TARGET_SECONDS = 60.0
TARGET_CHECKS = 720
ORIGIN = datetime(2026, 3, 1, tzinfo=UTC)
REFERENCE_DAYS = 7


def build_world(directory: Path, *, per_day: float, checks: int) -> Path:
    """Write the world and a fixed-reference config; returns the config path."""
    scenario = dataclasses.replace(SCENARIOS["drift_and_decay"], scores_per_hour=per_day / 24)
    days = REFERENCE_DAYS + 1 + -(-checks // 24)
    world = write_world(
        directory, scenario, start=ORIGIN, end=ORIGIN + timedelta(days=days), seed=1
    )
    ref_end = ORIGIN + timedelta(days=REFERENCE_DAYS)
    text = world.config_path.read_text().replace('windows.reference = "7d"\n', "")
    text += (
        f'windows.reference_start = "{ORIGIN.isoformat()}"\n'
        f'windows.reference_end = "{ref_end.isoformat()}"\n'
    )
    world.config_path.write_text(text)
    return world.config_path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-day", type=float, default=1_000_000.0, help="mean scores per day")
    p.add_argument("--checks", type=int, default=TARGET_CHECKS, help="hourly checks to replay")
    p.add_argument("--profile", action="store_true", help="print the top functions by time")
    args, _ = p.parse_known_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-backtest-") as tmp:
        t0 = time.perf_counter()
        config = load_config(build_world(Path(tmp), per_day=args.per_day, checks=args.checks))
        setup = time.perf_counter() - t0
        start = ORIGIN + timedelta(days=REFERENCE_DAYS + 1)
        end = start + timedelta(hours=args.checks - 1)
        profiler = cProfile.Profile() if args.profile else None
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        (result,) = backtest(config, start, end)
        if profiler is not None:
            profiler.disable()
        seconds = time.perf_counter() - t0

    per_check = seconds / max(result.summary.checks, 1)
    projected = per_check * TARGET_CHECKS
    s = result.summary
    print(
        f"world: {args.per_day:,.0f} scores/day, fixed {REFERENCE_DAYS}-day reference, "
        f"written in {setup:.1f} s"
    )
    print(f"replayed {s.checks} hourly checks in {seconds:.2f} s ({per_check * 1000:.0f} ms/check)")
    print(f"alarms: {s.drift_alarms} drift, {s.decay_alarms} decay; first {s.first_alarm}")
    print(
        f"720-check replay: {projected:.1f} s; ratio to the {TARGET_SECONDS:.0f} s target: "
        f"{projected / TARGET_SECONDS:.2f} ({'meets' if projected < TARGET_SECONDS else 'MISSES'})"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MiB (world generation included)")
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
