"""Run every benchmark in ``bench/`` one after another (``make bench``).

Each benchmark is a script that measures our code and its floor side by side in one run and prints
the ratios; this runner only sequences them so that they do not compete for the two cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
SCRIPTS = [
    "bench_stats.py",
    "bench_sources.py",
    "bench_backtest.py",
    "bench_outcomes.py",
    "bench_schedule.py",
    "bench_scrape.py",
    "bench_report.py",
    "bench_check.py",
    "bench_summary.py",
    "detection.py",
    "decay_skew.py",
    "clearing.py",
    "realworld.py",
]


def main() -> int:
    from monitor.cpu import VARIABLE, prefer_avx2

    # every benchmark runs on numpy's kernels as the `monitor` command picks them on this
    # processor (monitor.cpu: AVX2 on AMD Zen 4), whose children inherit the environment
    prefer_avx2()
    print(f"numpy kernels: {VARIABLE}={os.environ.get(VARIABLE, '(unset)')!r}", flush=True)
    failures = 0
    for name in SCRIPTS:
        script = HERE / name
        if not script.exists():
            print(f"== {name}: missing, skipped", flush=True)
            continue
        print(f"== {name}", flush=True)
        rc = subprocess.call([sys.executable, str(script), *sys.argv[1:]])
        if rc != 0:
            print(f"== {name} failed with exit code {rc}", flush=True)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
