"""Benchmark of cron slots: field-by-field search against the minute scan it replaced, and croniter.

Cases, each the best of ``--repeat`` batches of ``--calls`` calls:

* ``ours``: ``Schedule.latest_slot`` / ``next_slot`` of ``monitor.schedule`` (jumps to the next
  allowed month, day, hour, minute).
* ``scan``: the minute-by-minute scan ``monitor.schedule`` used before (copied below, on the same
  parsed fields and the same crontab(5) day rule), the floor we replaced.
* ``croniter``: ``croniter.get_prev`` / ``get_next`` (an independent implementation; a test
  dependency, so the case is skipped when it is not installed).

The yearly schedule asked for its previous slot from late November is the worst case of the scan
(about 480 000 minutes to walk back). Printed: seconds per call and the ratios scan / ours and
croniter / ours. Usage: ``python bench/bench_schedule.py [--calls 200] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from monitor.schedule import Schedule, parse_schedule  # noqa: E402

NOW = datetime(2026, 11, 30, 10, 17, 42, tzinfo=UTC)
CASES = [
    ("@yearly", "prev"),
    ("@yearly", "next"),
    ("0 9 * * MON", "prev"),
    ("*/15 9-17 * * 1-5", "next"),
]


def _scan_matches(s: Schedule, t: datetime) -> bool:
    assert s.cron_fields is not None
    minute, hour, dom, month, dow = s.cron_fields
    if t.minute not in minute or t.hour not in hour or t.month not in month:
        return False
    dom_ok = t.day in dom
    dow_ok = (t.isoweekday() % 7) in dow
    if s.dom_restricted and s.dow_restricted:
        return dom_ok or dow_ok
    return dom_ok and dow_ok


def scan_prev(s: Schedule, now: datetime) -> datetime:
    """The replaced algorithm: walk back one minute at a time (at most a year)."""
    t = now.replace(second=0, microsecond=0)
    for _ in range(366 * 24 * 60):
        if _scan_matches(s, t):
            return t
        t -= timedelta(minutes=1)
    raise ValueError("no slot in the past year")


def scan_next(s: Schedule, after: datetime) -> datetime:
    """The replaced algorithm: walk forward one minute at a time (at most a year)."""
    t = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(366 * 24 * 60):
        if _scan_matches(s, t):
            return t
        t += timedelta(minutes=1)
    raise ValueError("no slot in the next year")


def _best(fn: Callable[[], object], calls: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200, help="calls per timed batch (ours, croniter)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    try:
        import croniter
    except ImportError:  # pragma: no cover - croniter is a test dependency
        croniter = None  # type: ignore[assignment]
    print(
        f"{'schedule':<20} {'slot':<5} {'ours s':>10} {'scan s':>10} {'croniter s':>11} "
        f"{'scan/ours':>10} {'croniter/ours':>14}"
    )
    for text, kind in CASES:
        s = parse_schedule(text)
        expression = "0 0 1 1 *" if text == "@yearly" else text
        prev = kind == "prev"
        start = NOW.replace(second=0, microsecond=0) + timedelta(seconds=1) if prev else NOW

        def ours(s: Schedule = s, prev: bool = prev) -> datetime:
            return s.latest_slot(NOW) if prev else s.next_slot(NOW)

        def scan(s: Schedule = s, prev: bool = prev) -> datetime:
            return scan_prev(s, NOW) if prev else scan_next(s, NOW)

        assert ours() == scan(), (text, kind)
        t_ours = _best(ours, args.calls, args.repeat)
        t_scan = _best(scan, max(1, args.calls // 100), args.repeat)
        t_cron = float("nan")
        if croniter is not None:

            def theirs(e: str = expression, k: str = kind, at: datetime = start) -> datetime:
                it = croniter.croniter(e, at, implement_cron_bug=True)
                got: datetime = it.get_prev(datetime) if k == "prev" else it.get_next(datetime)
                return got

            assert theirs() == ours(), (text, kind)
            t_cron = _best(theirs, args.calls, args.repeat)
        print(
            f"{text:<20} {kind:<5} {t_ours:>10.2e} {t_scan:>10.2e} {t_cron:>11.2e} "
            f"{t_scan / t_ours:>10.0f} {t_cron / t_ours:>14.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
