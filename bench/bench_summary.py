"""Benchmark of the summary layer (issue 13), side by side in one run, per core (CPU time).

* ``kernel``: ``summarize`` of 10M scores (20 % exact zeros) in 1M-row chunks on the grid
  ``summary_grid`` builds for 10M vs 10M (about 18,000 points; counted through the grid's
  lookup table, no sort), beside ``np.sort`` of the same chunks (the floor of the sorting
  kernel it replaced, which a chunk too small for the table or a grid without one still
  uses). Target >= 50M rows/s/core.
* ``read + summarize``: ``read_scores`` of a 24-hour window of 10M rows in 1M-row files, then
  ``summarize``, against ``read_scores`` alone. Target >= 20M rows/s/core.
* ``10M vs 10M``: the summary path against today's ``build_baseline`` + ``drift_tests``, with
  the PSI checked bit-equal and the exact D inside the bracket: on the check's frozen grid (both
  windows summed by chunk, as a check through summaries does; target >= 3x), and beside it with
  the grid built in the same call from the sorted reference (what the check that builds a grid
  costs).

* ``hourly check, warm cache``: ``Runner.run`` of a 1-day vs 7-day monitor through cached
  summaries (``[engine] kind = "local"``), an hour after the cache was filled, against reading
  that new hour alone, each measured once the process's other threads are idle (``_settle``).
  Target <= 1.5x. Then the rest of the check (all but the read) at 1d vs 7d and at 7d vs 28d
  on the same volume: what a partition of the windows adds; and the walk of the 7d vs 28d span
  with its partitions watched (inotify) against looking each one up.

CPU time (``time.process_time``) over wall-clock: the reads use Arrow's threads, and "per core"
is what the targets name. Usage: ``python bench/bench_summary.py [--big-rows N] [--warm-only]``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

N = 10_000_000
CHUNK = 1 << 20
T0 = datetime(2026, 11, 24, tzinfo=UTC)


def _scores(n: int, seed: int, shift: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = rng.standard_gamma(2.0, size=n)
    out += shift
    out[rng.random(n) < 0.2] = 0.0
    return out


def _table(grid: Any) -> str:
    lookup = grid.lookup()
    if lookup is None:
        return "no lookup table: sorted"
    return f"a {lookup.kind} lookup table of {lookup.n_slots:,} slots"


def _cpu(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.process_time()
        result = fn()
        best = min(best, time.process_time() - t)
    return best, result


def main() -> int:
    if "--warm-only" in sys.argv:  # the warm hourly checks alone (a few minutes)
        _warm_checks()
        return 0
    from monitor.sources import ScoreSpec, Window, read_scores, write_parquet
    from monitor.stats import (
        build_baseline,
        drift_tests,
        ks_bracket,
        psi_from_summaries,
        summarize,
        summary_grid,
    )

    ref, cur = _scores(N, 1, 0.0), _scores(N, 2, 0.01)
    ordered = np.sort(ref)
    baseline = build_baseline(ref)
    grid = summary_grid(ordered, baseline.edges, n_current=N)
    print(f"{N:,} vs {N:,} scores; grid of {grid.points.size:,} points")

    def chunks(fn: Callable[[np.ndarray], Any]) -> Callable[[], list[Any]]:
        return lambda: [fn(cur[i : i + CHUNK]) for i in range(0, N, CHUNK)]

    t_kernel, _ = _cpu(chunks(lambda x: summarize(x, grid)))
    t_sort, _ = _cpu(chunks(np.sort))
    kernel_rate = N / t_kernel / 1e6
    print(
        f"kernel: summarize {kernel_rate:.0f}M rows/s/core ({_table(grid)}), np.sort alone "
        f"{N / t_sort / 1e6:.0f}M rows/s/core (ratio {t_kernel / t_sort:.2f}); "
        f"target >= 50M: {'met' if kernel_rate >= 50 else 'NOT MET'}"
    )

    root = Path(tempfile.mkdtemp(prefix="bench_summary_"))
    try:
        ns = (np.arange(N, dtype=np.int64) * (86_400_000_000 // N)).astype("timedelta64[us]")
        when = np.datetime64(T0.replace(tzinfo=None), "us") + ns
        for k, i in enumerate(range(0, N, CHUNK)):
            write_parquet(
                root / f"part-{k:03d}.parquet",
                {"timestamp": when[i : i + CHUNK], "score": cur[i : i + CHUNK]},
            )
        spec = ScoreSpec(path=str(root))
        window = Window(start=T0, end=T0 + timedelta(days=1))
        read_scores(spec, window)  # footers cached, files in the page cache
        t_read, w = _cpu(lambda: read_scores(spec, window))
        t_both, _ = _cpu(
            lambda: [
                summarize(v[i : i + CHUNK], grid)
                for v in [read_scores(spec, window).values]
                for i in range(0, N, CHUNK)
            ]
        )
        rate = w.values.size / t_both / 1e6
        print(
            f"read + summarize: {rate:.0f}M rows/s/core, read_scores alone "
            f"{w.values.size / t_read / 1e6:.0f}M rows/s/core (ratio {t_both / t_read:.2f}); "
            f"target >= 20M: {'met' if rate >= 20 else 'NOT MET'}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def today() -> Any:
        return drift_tests(build_baseline(ref), cur)

    def summaries() -> Any:
        b = build_baseline(ref)  # sorts the reference once, as today's path does
        srt = b.sorted_reference
        g = summary_grid(srt, b.edges, n_current=N)
        sr = summarize(srt, g)  # sorted: counted without a second sort
        sc = summarize(cur[:CHUNK], g)  # the current window as an engine sums it: by chunk
        for i in range(CHUNK, N, CHUNK):
            sc = sc + summarize(cur[i : i + CHUNK], g)
        return psi_from_summaries(sr, sc, b.edges), ks_bracket(sr, sc)

    frozen = summary_grid(np.sort(ref), baseline.edges, n_current=N)

    def summaries_frozen() -> Any:
        # a check through summaries: the grid is frozen (built once, not per check), and both
        # windows are summed by chunk as an engine does, the reference never sorted
        sr = summarize(ref[:CHUNK], frozen)
        for i in range(CHUNK, N, CHUNK):
            sr = sr + summarize(ref[i : i + CHUNK], frozen)
        sc = summarize(cur[:CHUNK], frozen)
        for i in range(CHUNK, N, CHUNK):
            sc = sc + summarize(cur[i : i + CHUNK], frozen)
        return psi_from_summaries(sr, sc, baseline.edges), ks_bracket(sr, sc)

    t_today, exact = _cpu(today, repeat=2)
    t_summ, (psi, bracket) = _cpu(summaries, repeat=2)
    t_frozen, (psi_f, bracket_f) = _cpu(summaries_frozen, repeat=2)
    equal = psi.statistic == exact.psi.statistic and psi_f.statistic == exact.psi.statistic
    inside = all(
        b.statistic_low <= exact.ks.statistic <= b.statistic_high for b in (bracket, bracket_f)
    )
    speed, speed_f = t_today / t_summ, t_today / t_frozen
    print(
        f"10M vs 10M: drift_tests {t_today:.2f} s CPU; through summaries on the check's frozen "
        f"grid {t_frozen:.2f} s ({speed_f:.2f}x; target >= 3x: "
        f"{'met' if speed_f >= 3 else 'NOT MET'}), and building that grid in the same call from "
        f"the sorted reference {t_summ:.2f} s ({speed:.2f}x); PSI bit-equal {equal}; exact D "
        f"{exact.ks.statistic:.6f} in [{bracket_f.statistic_low:.6f}, "
        f"{bracket_f.statistic_high:.6f}]: {inside}"
    )
    dask_ok = _dask(grid)
    big_ok = _big(args_rows())
    _warm_checks()
    return 0 if equal and inside and dask_ok and big_ok else 1


def _warm_checks() -> None:
    """The warm hourly checks at each volume, then at 50k rows an hour with both window pairs
    (``--warm-only`` runs these alone)."""
    for n in HOURLY_ROWS:
        _warm(n)
    # whatever the window lengths: the same volume, 4.4 times the partitions
    short, long = (_warm(50_000, current, reference) for current, reference in WINDOWS)
    print(
        f"the rest of a warm check, 50,000 rows an hour: {short * 1000:.1f} ms at 1d vs 7d "
        f"(192 partitions), {long * 1000:.1f} ms at 7d vs 28d (840): "
        f"{(long - short) / (840 - 192) * 1e6:.1f} us a partition (the walk's bookkeeping "
        f"of each unchanged day, the rolled bin rows) and a grid of 2.5 times the points"
    )


CHECKS = 12  # warm checks an hour apart, each beside a read of its new hour: medians of both
GOLDEN = 300  # labelled queries evaluated once a day (the simulated worlds' golden set)
HISTORY_HOURS = 35 * 24  # the history a daemon's hourly monitor holds (35 days, hourly)
HOUR = timedelta(hours=1)
HOURLY_ROWS = (250_000, 1_000_000)  # the fixed per-check cost shows at the smaller volume
WINDOWS = (("1d", "7d"), ("7d", "28d"))


def _warm(per_hour: int, current: str = "1d", reference: str = "7d") -> float:
    """An hourly check (1-day window, 7-day rolling reference, weekly phases) through cached
    summaries, warm, against reading the one new hour (``read_summary_part`` of it on the
    check's grid): CPU time per check. Hourly files in a date=/hour= tree, ``per_hour`` rows
    each, and the golden set's daily evaluation runs (``GOLDEN`` queries) as outcomes: the
    check's outcome side reads the reference window's runs. The runner is the daemon's: it
    draws the page's detail and appends each check to a history seeded with 35 days of hourly
    checks. Target: ratio <= 1.5. Two runs of
    ``CHECKS`` checks: on the grid the first check
    built, then after the grid is rebuilt (``summary.regrid``: a daemon's grid is rebuilt
    weekly, and its anchors keep the older grid's edges until they are refreshed). Returns
    the rest of the check (its CPU seconds less the read's), the larger of the two."""
    import dataclasses
    import statistics

    from monitor.config import load_config
    from monitor.jobs import Runner
    from monitor.report import HistoryStore
    from monitor.sources import (
        Window,
        read_outcomes,
        read_run_times,
        read_summary_part,
        write_parquet,
    )

    root = Path(tempfile.mkdtemp(prefix="bench_summary_warm_"))
    try:
        g = np.random.default_rng(5)
        span = _duration(current) + _duration(reference)
        hours = span // timedelta(hours=1) + 2 * CHECKS + 2
        start = T0 - span
        for h in range(hours):
            t = start + timedelta(hours=h)
            ns = np.sort(g.integers(0, 3_600_000_000, per_hour)).astype("timedelta64[us]")
            when = np.datetime64(t.replace(tzinfo=None), "us") + ns
            scores = g.standard_gamma(2.0, per_hour)
            scores[g.random(per_hour) < 0.2] = 0.0
            write_parquet(
                root / "scores" / f"date={t:%Y-%m-%d}" / f"hour={t:%H}" / "part-0.parquet",
                {"timestamp": when, "score": scores},
            )
        # as in production, a partition was last written when its hour closed, not seconds
        # before the check (a directory modified within seconds is listed again every time)
        for d in (root / "scores").glob("date=*/hour=*"):
            hour = datetime.strptime(f"{d.parent.name} {d.name}", "date=%Y-%m-%d hour=%H")
            _set_mtime(d, hour.replace(tzinfo=UTC) + timedelta(minutes=65))
        for d in [*(root / "scores").glob("date=*"), root / "scores"]:
            _set_mtime(d, start)
        # the golden set's evaluation runs, as the simulated worlds log them: 300 labelled
        # queries once a day at 02:00 (the outcome side reads the reference window's runs)
        queries = np.array([f"q{i:04d}" for i in range(GOLDEN)])
        quality = g.beta(5.0, 3.0, GOLDEN)
        for day in range(-((span + timedelta(days=1)) // timedelta(days=1)), CHECKS // 24 + 2):
            t = T0.replace(hour=2) + timedelta(days=day)
            when = np.datetime64(t.replace(tzinfo=None), "us") + np.arange(GOLDEN).astype(
                "timedelta64[s]"
            )
            write_parquet(
                root / "outcomes" / f"date={t:%Y-%m-%d}" / "part-0.parquet",
                {
                    "timestamp": when,
                    "query_id": queries,
                    "outcome": np.clip(quality + g.normal(0.0, 0.02, GOLDEN), 0.0, 1.0),
                },
            )
        (root / "monitor.toml").write_text(
            '[server]\nstate_dir = "state"\n[engine]\nkind = "local"\n'
            f'summary.regrid = "{CHECKS + 1}h"\n'
            '[[monitors]]\nname = "warm"\nschedule = "1h"\nscores.path = "scores"\n'
            f'outcomes.path = "outcomes"\nwindows.current = "{current}"\n'
            f'windows.reference = "{reference}"\n'
        )
        config = load_config(root / "monitor.toml")
        # as the daemon runs it: the page's detail drawn, and the history appended (seeded with
        # the 35 days an hourly monitor has held since its first month)
        history = HistoryStore(config.server.state_dir)
        runner = Runner(config, detail=True, history=history)
        monitor = config.monitors[0]
        c0 = time.process_time()
        first_record = runner.run("warm", T0)
        cold = time.process_time() - c0
        for h in range(HISTORY_HOURS, 0, -1):
            history.append("warm", dataclasses.replace(first_record.verdict, at=T0 - h * HOUR))
        rest = 0.0
        for run, first in (("", 1), (", after a grid rebuild", CHECKS + 2)):
            if first > 1:  # the check at T0 + CHECKS + 1 hours rebuilds the grid
                c0 = time.process_time()
                runner.run("warm", T0 + timedelta(hours=first - 1))
                cold = time.process_time() - c0
            at = T0 + timedelta(hours=first)
            grid = runner.summaries.grid(monitor, config.engine, at, *_windows(monitor, at))  # type: ignore[arg-type]
            checks, reads = [], []
            for k in range(first, first + CHECKS):
                at = T0 + timedelta(hours=k)
                new = Window(start=at - timedelta(hours=1), end=at)
                # warm up (page cache, footer, listing), then measure
                read_summary_part(monitor.scores, new, grid.grid, bucket=timedelta(hours=1))
                _settle()
                c0 = time.process_time()
                read_summary_part(monitor.scores, new, grid.grid, bucket=timedelta(hours=1))
                reads.append(time.process_time() - c0)
                _settle()
                c0 = time.process_time()
                record = runner.run("warm", at)
                checks.append(time.process_time() - c0)
                assert record.verdict.state != "error", record.verdict.reasons
            check, read = statistics.median(checks), statistics.median(reads)
            ratio = check / read
            print(
                f"hourly check, warm cache{run} ({per_hour:,} rows an hour, {current} vs "
                f"{reference}, {grid.grid.points.size:,} grid points): {check * 1000:.0f} ms "
                f"CPU a check, reading the new hour {read * 1000:.0f} ms (ratio {ratio:.2f}; "
                f"target <= 1.5: {'met' if ratio <= 1.5 else 'NOT MET'}); the rest of the "
                f"check (planning {span // timedelta(hours=1)} hourly partitions, the verdict, "
                f"the state save) {(check - read) * 1000:.0f} ms; the cold "
                f"{'first check' if first == 1 else 'check that rebuilt the grid'} {cold:.1f} s"
            )
            rest = max(rest, check - read)
        outcome_side = []
        for _ in range(CHECKS):  # as the check reads it: the reference window's runs, warm
            c0 = time.process_time()
            read_outcomes(monitor.outcomes, Window(start=at - span, end=at - _duration(current)))
            lookback = max(monitor.windows.current, monitor.outcome_lag_limit)
            read_run_times(monitor.outcomes, Window(start=at - lookback, end=at))
            outcome_side.append(time.process_time() - c0)
        appends = []
        for k in range(CHECKS):  # what the check's history append costs on its own
            later = dataclasses.replace(first_record.verdict, at=at + (k + 1) * HOUR)
            c0 = time.process_time()
            history.append("warm", later)
            appends.append(time.process_time() - c0)
        print(
            f"  of the rest, the history append ({len(history.entries('warm')):,} entries): "
            f"{statistics.median(appends) * 1000:.1f} ms"
        )
        print(
            f"  of the rest, the outcome side (the reference window's "
            f"{span // timedelta(days=1) - 1} to {span // timedelta(days=1)} daily runs of "
            f"{GOLDEN} queries, kept by the rows they hold): "
            f"{statistics.median(outcome_side) * 1000:.1f} ms"
        )
        if span >= timedelta(days=28):
            _walks(monitor.scores, Window(start=at - span, end=at))
        return rest
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _walks(spec: Any, span: Any) -> None:
    """``window_file_stats`` of a check's span, hot: the daemon's walk (partitions watched by
    inotify, unchanged days handed out whole) against the same walk looking every partition up
    (``MONITOR_INOTIFY=0``: each directory's and file's ``stat``), side by side."""
    from monitor.sources import clear_cache, watch, window_file_stats

    def best(repeat: int = 30) -> tuple[float, int]:
        out, files = float("inf"), 0
        for _ in range(repeat):
            t = time.process_time()
            files = len(window_file_stats(spec, span))
            out = min(out, time.process_time() - t)
        return out, files

    watched, files = best()
    held = watch._WATCHER, watch._STARTED
    try:
        watch._WATCHER, watch._STARTED = None, True  # as with MONITOR_INOTIFY=0
        clear_cache()
        for _ in range(2):
            window_file_stats(spec, span)  # listings kept, footers read
        looked, _ = best()
    finally:
        watch._WATCHER, watch._STARTED = held
    print(
        f"the walk of a 7d vs 28d check ({files} partitions, hot): {watched * 1000:.2f} ms with "
        f"the partitions watched (inotify), {looked * 1000:.2f} ms looking each up "
        f"({looked / watched:.1f}x)"
    )


def _settle(limit: float = 15.0) -> None:
    """Wait until the process's other threads are idle. After a read, above all the cold
    first check's, jemalloc's background threads hand its memory back for seconds (measured:
    15-20 ms of CPU in each of the next six checks at 7d vs 28d), which process CPU time would
    charge to whatever is measured next; a daemon's hourly checks are an hour apart."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        p0, t0 = time.process_time(), time.thread_time()
        time.sleep(0.2)
        if (time.process_time() - p0) - (time.thread_time() - t0) < 0.001:
            return


def _duration(text: str) -> timedelta:
    from monitor.schedule import parse_duration

    return parse_duration(text)


def _set_mtime(path: Path, when: datetime) -> None:
    ns = int(when.timestamp()) * 1_000_000_000
    os.utime(path, ns=(ns, ns))


def _windows(monitor: Any, at: datetime) -> tuple[Any, Any]:
    from monitor.jobs import check_windows

    return check_windows(monitor, at)


def args_rows() -> int:
    """``--big-rows N`` (default 50M in make bench; the issue's 500M: --big-rows 500000000)."""
    if "--big-rows" in sys.argv:
        return int(sys.argv[sys.argv.index("--big-rows") + 1])
    return 50_000_000


def _dask(grid: Any) -> bool:
    """Read + summarize of 8 files of 1M rows on a 2-process LocalCluster, per worker core."""
    import importlib.util

    from monitor.engines import make_engine
    from monitor.sources import ScoreSpec, Window, write_parquet

    # the extra's absence: make_engine would raise an EngineUnavailableError (no ImportError)
    if importlib.util.find_spec("distributed") is None:
        print("dask: not measured (the optional extra is not installed: pip install '.[dask]')")
        return True

    root = Path(tempfile.mkdtemp(prefix="bench_summary_dask_"))
    engine = None
    try:
        g = np.random.default_rng(3)
        base = np.datetime64(T0.replace(tzinfo=None), "us")
        for k in range(8):
            ts = base + (np.arange(CHUNK, dtype=np.int64) * 80_000 + k * CHUNK * 80_000).astype(
                "timedelta64[us]"
            )
            write_parquet(root / f"part-{k}.parquet", {"timestamp": ts, "score": g.random(CHUNK)})
        spec = ScoreSpec(path=str(root))
        window = Window(start=T0, end=T0 + timedelta(days=30))
        engine = make_engine("dask", dask_address="local")
        local = make_engine("local")
        engine.summaries(spec, window, grid)  # workers warm
        cpu0 = engine.worker_cpu_seconds()  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        remote = engine.summaries(spec, window, grid)
        wall = time.perf_counter() - t0
        cpu = engine.worker_cpu_seconds() - cpu0  # type: ignore[attr-defined]
        t_local, here = _cpu(lambda: local.summaries(spec, window, grid))
        same = all(
            np.array_equal(remote.summaries[k].counts, here.summaries[k].counts)
            for k in here.summaries
        )
        rows = 8 * CHUNK
        per_core = rows / cpu / 1e6
        print(
            f"dask (LocalCluster, 2 worker processes): read + summarize {per_core:.0f}M rows/s "
            f"per worker core (the workers' CPU time; target >= 20M: "
            f"{'met' if per_core >= 20 else 'NOT MET'}), {rows / wall / 1e6:.0f}M rows/s by the "
            f"wall clock over both workers; in process {rows / t_local / 1e6:.0f}M rows/s/core; "
            f"summaries equal: {same}"
        )
        engine.close()
        engine = None
        try:
            spark = make_engine("spark", spark_master="local[2]")
        except Exception as exc:  # reported, not fatal: the extra may be missing
            print(f"spark: not measured ({type(exc).__name__}: {exc})")
            return same
        try:
            spark.summaries(spec, window, grid)  # session and Python workers warm
            t0 = time.perf_counter()
            via_spark = spark.summaries(spec, window, grid)
            wall = time.perf_counter() - t0
        finally:
            spark.close()
        equal = all(
            np.array_equal(via_spark.summaries[k].counts, here.summaries[k].counts)
            for k in here.summaries
        )
        print(
            f"spark (local[2], mapInArrow over the files, for information): read + summarize "
            f"{rows / wall / 1e6:.0f}M rows/s, {rows / wall / 2 / 1e6:.0f}M rows/s per core; "
            f"summaries equal: {equal}"
        )
        return same and equal
    finally:
        if engine is not None:
            engine.close()
        shutil.rmtree(root, ignore_errors=True)


def _big(rows: int) -> bool:
    """A window of ``rows`` scores in 1M-row row groups, summarized by the local engine in a
    fresh process: its peak RSS (target: 500M rows under 2 GB)."""
    import subprocess

    code = f"""
import sys, time
from datetime import timedelta
from pathlib import Path
import numpy as np
sys.path.insert(0, {str(ROOT)!r})
import pyarrow as pa, pyarrow.parquet as pq
from monitor.engines import make_engine
from monitor.sources import ScoreSpec, Window
from monitor.stats import Grid
root = Path(sys.argv[1]); rows = int(sys.argv[2]); chunk = {CHUNK}
from datetime import datetime, UTC
t0 = datetime(2026, 11, 24, tzinfo=UTC)
base = np.datetime64(t0.replace(tzinfo=None), "us")
g = np.random.default_rng(9)
step = 86_400_000_000 // rows or 1
schema = pa.schema([("timestamp", pa.timestamp("us", tz="UTC")), ("score", pa.float64())])
t = time.perf_counter()
with pq.ParquetWriter(root / "big.parquet", schema) as w:
    for i in range(0, rows, chunk):
        n = min(chunk, rows - i)
        ts = base + (np.arange(i, i + n, dtype=np.int64) * step).astype("timedelta64[us]")
        w.write_table(pa.table({{"timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
                                "score": g.random(n)}}, schema=schema), row_group_size=chunk)
write = time.perf_counter() - t
print(f"{{write:.1f}}")
"""
    summarize_code = f"""
import sys, time
from datetime import UTC, datetime, timedelta
from pathlib import Path
import numpy as np
sys.path.insert(0, {str(ROOT)!r})
from monitor.engines import make_engine
from monitor.sources import ScoreSpec, Window
from monitor.stats import Grid
root = Path(sys.argv[1])
t0 = datetime(2026, 11, 24, tzinfo=UTC)
def hwm():  # VmHWM, in KiB: per address space, so exec resets it (ru_maxrss does not)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
before = hwm()
t = time.perf_counter()
window = Window(start=t0, end=t0 + timedelta(days=2))
grid = Grid(np.linspace(0, 1, 20001))
part = make_engine("local").summaries(ScoreSpec(path=str(root)), window, grid)
took = time.perf_counter() - t
peak = hwm()
n = sum(s.n for s in part.summaries.values())
print(f"{{n}} {{took:.1f}} {{before / 1024:.0f}} {{peak / 1024:.0f}}")
"""
    root = Path(tempfile.mkdtemp(prefix="bench_summary_big_"))
    try:
        write = subprocess.run(
            [sys.executable, "-c", code, str(root), str(rows)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        out = subprocess.run(
            [sys.executable, "-c", summarize_code, str(root)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n, took, before, peak = int(out[0]), out[1], float(out[2]), float(out[3])
    ok = n == rows and (rows < 500_000_000 or peak < 2048)
    print(
        f"a window of {rows:,} scores (1M-row row groups, written in {write} s): summarized by "
        f"the local engine in {took} s (a process of its own), peak RSS {peak:.0f} MiB "
        f"(after its imports: {before:.0f} MiB; target for 500M rows: under 2,048 MiB); rows "
        f"summarized: {n:,}"
    )
    return ok


if __name__ == "__main__":
    sys.exit(main())
