"""Benchmark ``monitor check`` as a one-shot process against a lean numpy floor, side by side.

World (``bench_report.build_world``, in ``--workdir`` or a temporary directory): a reference day
and a current day of top-1 scores, ``--scores`` each (default 10,000,000; hourly parquet files),
and a golden set of ``--pairs`` queries (default 10,000) evaluated once on each day. The daemon's
state is seeded by one run at day 1, 01:00 (before the current day's evaluation run lands), and
its threshold cache written as the daemon writes it (``monitor.thresholds``), so the timed check
at the end of day 1 is what a cron or Nagios caller gets for the daemon's next slot: it reads
10M + 10M scores, decides drift from the window and the block, pairs the 10k queries and runs
the decay test (sign flips, BCa interval, t, sign and Wilcoxon diagnostics).

Contestants, each a fresh process, interleaved ``--repeats`` times after one warm-up of each:

* ``check``: ``python -m monitor check --config F --json --at T`` (this checkout's code);
* ``floor``: python start, ``import numpy, pyarrow.parquet``, read both windows' score column and
  both days' outcomes, ``np.sort`` both windows, the exact two-sample KS statistic (two
  ``searchsorted`` of the sorted windows, integer arithmetic) with its asymptotic p-value, PSI on
  the reference's 10 quantile bins and the paired mean difference (ids paired by
  ``pyarrow.compute.index_in``). It takes the columns as views of their Arrow buffers
  (``np.frombuffer``): pyarrow's ``to_numpy`` imports pandas when it is installed, which a lean
  script need not pay.

With ``--baseline DIR`` the check of another checkout (say ``git archive`` of an earlier
commit) is timed beside them, and its JSON must be identical to this checkout's.

Both children get the same environment: bytecode cached under the work directory
(``PYTHONPYCACHEPREFIX``; the warm-up writes it), single-threaded BLAS, and numpy's kernels as
the ``monitor`` command picks them (``monitor.cpu``: on AMD Zen 4 the AVX2 ones, whose sort is
about 6x faster there; the floor sorts with the same ``np.sort``). Reported: median wall
and CPU (user + sys of the child) seconds and the ratio check / floor of each, and the ratio of
the fastest runs (which other load on shared cores disturbs least); the floor's KS D, PSI and
mean difference are checked against the check's JSON. Target (issue 13, one-shot check): median
wall ratio <= 1.2. A miss prints ``NOT MET`` and does not fail ``make bench`` (timings on shared
cores are noisy); a wrong answer (check exit code, numbers that disagree) exits 1.

    python bench/bench_check.py [--scores 10000000] [--pairs 10000] [--repeats 5] [--workdir D]
                                [--baseline DIR] [--steps]

``--steps`` times the check's steps in one process instead (min of 5, warm memory), beside the
floor's sorts and searches.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

TARGET_RATIO = 1.2


def floor(root: Path) -> dict[str, float]:
    """The lean floor (runs in its own process; imports only numpy and pyarrow)."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    def floats(chunked: Any) -> np.ndarray:  # the float64 buffers, no copy (and no pandas)
        return np.concatenate(
            [
                np.frombuffer(c.buffers()[1], np.float64, len(c), c.offset * 8)
                for c in chunked.chunks
            ]
        )

    def column(files: list[Path], name: str) -> np.ndarray:
        return np.concatenate([floats(pq.ParquetFile(f).read(columns=[name])[name]) for f in files])

    days = sorted((root / "scores").iterdir())
    ref = np.sort(column(sorted(days[0].rglob("*.parquet")), "score"))
    cur = np.sort(column(sorted(days[1].rglob("*.parquet")), "score"))
    n, m = ref.size, cur.size
    # KS: with y sorted, F_x - F_y peaks just below some y_k, F_y - F_x at some y_k (last of ties)
    k = np.arange(m, dtype=np.int64)
    below = np.searchsorted(ref, cur, side="left").astype(np.int64)
    upto = np.searchsorted(ref, cur, side="right").astype(np.int64)
    top = max(int((below * m - k * n).max()), int(((k + 1) * n - upto * m).max()), 0)
    d = top / (n * m)
    en = n * m / (n + m)
    lam = (np.sqrt(en) + 0.12 + 0.11 / np.sqrt(en)) * d
    j = np.arange(1, 101)
    ks_p = float(np.clip(2 * np.sum((-1.0) ** (j - 1) * np.exp(-2 * j**2 * lam**2)), 0, 1))
    # PSI on the reference deciles (right-closed bins, smoothing 0.5)
    edges = np.unique(np.quantile(ref, np.arange(1, 10) / 10))

    def counts(x: np.ndarray) -> np.ndarray:
        upper = np.searchsorted(x, edges, side="right")
        return np.diff(np.concatenate(([0], upper, [x.size]))).astype(np.float64)

    r, c = counts(ref), counts(cur)
    q = (r + 0.5) / (r.sum() + 0.5 * r.size)
    p = (c + 0.5) / (c.sum() + 0.5 * c.size)
    psi = float(np.sum((p - q) * np.log(p / q)))
    # paired mean difference over the query ids both days share
    runs = sorted((root / "outcomes").rglob("*.parquet"))
    ref_t, cur_t = (pq.ParquetFile(f).read(columns=["query_id", "outcome"]) for f in runs)
    where = pc.index_in(cur_t["query_id"], value_set=ref_t["query_id"])
    paired = pc.is_valid(where)
    before = floats(pc.take(ref_t["outcome"], pc.filter(where, paired)))
    after = floats(pc.filter(cur_t["outcome"], paired))
    mean = float(np.mean(after - before))
    return {"ks_statistic": d, "ks_pvalue": ks_p, "psi": psi, "mean_difference": mean}


def steps(root: Path) -> None:
    """``--steps``: the check's steps in this process on the bench world (min of 5 runs, warm
    memory), beside the floor's sorts and searches; what the ratio above is made of."""
    import time
    from datetime import UTC, datetime, timedelta

    import numpy as np

    from monitor.config import load_config
    from monitor.sources import Window, pair_outcomes, read_outcomes, read_scores
    from monitor.stats import build_baseline, drift_tests, paired_test
    from monitor.stats.paired import _bca, _sign_flip
    from monitor.verdict.plan import _bin_counts, phase_counts

    monitor = load_config(root / "monitor.toml").monitor("bench")
    day0 = datetime(2026, 11, 1, tzinfo=UTC)

    def hours(a: int, b: int) -> Window:
        return Window(day0 + timedelta(hours=a), day0 + timedelta(hours=b))

    def best(label: str, fn: Any, k: int = 5) -> Any:
        fastest, out = float("inf"), None
        for _ in range(k):
            t0 = time.perf_counter()
            out = fn()
            fastest = min(fastest, time.perf_counter() - t0)
        print(f"{fastest:6.3f} s  {label}", flush=True)
        return out

    ref = best("read the reference window", lambda: read_scores(monitor.scores, hours(0, 24)))
    cur = best(
        "read the current window with timestamps",
        lambda: read_scores(monitor.scores, hours(24, 48), with_timestamps=True),
    )
    base = best("build_baseline", lambda: build_baseline(ref.values, bins=10))
    best("drift_tests", lambda: drift_tests(base, cur.values, tolerance=0.02))
    best("phase_counts (no seasonality)", lambda: phase_counts(ref.values, None, base.edges, None))
    since = np.int64((day0 + timedelta(hours=25)).timestamp() * 1e9)
    block = cur.values[cur.timestamps >= since]
    best(
        f"verdict/drift.py's bins of the {block.size:,}-score block, one track",
        lambda: _bin_counts(block, base.edges),  # as the verdict counts a non-seasonal block
    )
    pairs = pair_outcomes(
        read_outcomes(monitor.outcomes, hours(0, 24)),
        read_outcomes(monitor.outcomes, hours(24, 48)),
    )
    d = np.round(pairs.current - pairs.reference, 12)
    best("BCa interval, 9,999 resamples", lambda: _bca(d, 0.95, 9999, np.random.default_rng(1)), 3)
    best(
        "sign flips, 12,940 resamples",
        lambda: _sign_flip(d + 0.005, "less", 12940, np.random.default_rng(1), None),
        3,
    )
    best(
        "paired_test",
        lambda: paired_test(
            pairs.reference,
            pairs.current,
            alternative="less",
            margin=0.005,
            n_resamples=12940,
            rng=1,
        ),
        3,
    )
    xs, ys = np.sort(ref.values), np.sort(cur.values)
    best("floor: two np.sort", lambda: (np.sort(ref.values), np.sort(cur.values)))
    best(
        "floor: KS, two searchsorted",
        lambda: (np.searchsorted(xs, ys, "left"), np.searchsorted(xs, ys, "right")),
    )


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import os
    import resource
    import statistics
    import subprocess
    import tempfile
    import time
    from datetime import timedelta

    here = Path(__file__).resolve().parent
    repo = here.parent
    sys.path[:0] = [str(repo), str(here)]
    # numpy's kernels as the `monitor` command picks them on this processor (monitor.cpu),
    # before numpy loads: for the state seeded here (its threshold cache is keyed by them) and
    # for both contestants, which inherit the environment
    from monitor.cpu import VARIABLE, prefer_avx2

    prefer_avx2()
    print(f"numpy kernels: {VARIABLE}={os.environ.get(VARIABLE, '(unset)')!r}", flush=True)
    from bench_report import AT, DAY0, build_world

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scores", type=int, default=10_000_000, help="scores per window")
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", type=Path, help="build (or reuse) the world here; kept")
    parser.add_argument(
        "--steps", action="store_true", help="time the check's steps in process instead"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also time the check of another checkout (e.g. `git archive` of an earlier commit)",
    )
    args = parser.parse_args(argv)

    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="bench-check-")
    root = args.workdir or Path(tmp.name)  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)
    config = root / "monitor.toml"
    if not config.exists():
        t0 = time.perf_counter()
        build_world(root, scores=args.scores, pairs=args.pairs)
        print(
            f"world: 2 x {args.scores:,} scores, {args.pairs:,} pairs, written in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    from monitor.config import load_config
    from monitor.thresholds import load_thresholds

    state = root / "state" / "bench.json"
    loaded = load_config(config)
    # seeded again when a reused --workdir's threshold cache is of other versions or kernels
    if not state.exists() or load_thresholds(loaded.server.state_dir) == 0:
        from monitor.jobs import Runner
        from monitor.thresholds import save_thresholds

        state.unlink(missing_ok=True)
        Runner(loaded).run("bench", DAY0 + timedelta(days=1, hours=1))
        save_thresholds(loaded.server.state_dir, known=0)  # as the daemon does after a run
    if args.steps:
        steps(root)
        return 0
    at = AT.isoformat().replace("+00:00", "Z")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        PYTHONPATH=str(repo),
        PYTHONPYCACHEPREFIX=str(root / "pycache"),
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    check_cmd = [sys.executable, "-m", "monitor", "check", "--config", str(config), "--json"]
    commands = {
        "check": [*check_cmd, "--at", at],
        "floor": [sys.executable, str(Path(__file__).resolve()), "--floor", str(root)],
    }
    envs = {"check": env, "floor": env}
    if args.baseline:
        commands["baseline"] = commands["check"]
        envs["baseline"] = {**env, "PYTHONPATH": str(args.baseline.resolve())}

    def timed(name: str) -> tuple[float, float, subprocess.CompletedProcess[str]]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(
            commands[name], capture_output=True, text=True, env=envs[name], cwd=root
        )
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return wall, cpu, done

    for name in commands:  # warm-up: page cache, bytecode cache
        timed(name)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    for _ in range(args.repeats):
        for name in commands:
            wall, cpu, done = timed(name)
            times[name].append((wall, cpu))
            outputs[name] = done
    if tmp is not None:
        tmp.cleanup()

    check, base = outputs["check"], outputs["floor"]
    if check.returncode != 2 or base.returncode != 0:  # 2: model_decay, as the world is built
        print(
            f"check exit {check.returncode}, floor exit {base.returncode}\n"
            f"{check.stderr[-2000:]}{base.stderr[-2000:]}"
        )
        return 1
    verdict: dict[str, Any] = json.loads(check.stdout)["monitors"][0]
    lean = json.loads(base.stdout)
    agree = {
        "ks_statistic": verdict["input"]["ks_statistic"] == lean["ks_statistic"],
        "psi": abs(verdict["input"]["psi"] - lean["psi"]) <= 1e-12,
        "mean_difference": abs(verdict["outcome"]["mean_difference"] - lean["mean_difference"])
        <= 1e-9,
    }
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for k, v in times.items()
    }
    print(f"check ({verdict['state']}): {med['check'][0]:.2f} s wall, {med['check'][1]:.2f} s CPU")
    print(f"floor: {med['floor'][0]:.2f} s wall, {med['floor'][1]:.2f} s CPU")
    if "baseline" in med:
        same = outputs["baseline"].stdout == check.stdout
        print(
            f"baseline ({args.baseline}): {med['baseline'][0]:.2f} s wall, "
            f"{med['baseline'][1]:.2f} s CPU ({med['baseline'][0] / med['floor'][0]:.2f}x the "
            f"floor); its JSON is {'identical' if same else 'DIFFERENT'}"
        )
        agree["baseline JSON identical"] = same
    for name, runs in times.items():
        print(f"  {name} runs (wall/CPU s): " + ", ".join(f"{w:.2f}/{c:.2f}" for w, c in runs))
    ratio = med["check"][0] / med["floor"][0]
    cpu_ratio = med["check"][1] / med["floor"][1]
    print(
        f"check / floor: {ratio:.2f} wall, {cpu_ratio:.2f} CPU (target <= {TARGET_RATIO} wall): "
        f"{'met' if ratio <= TARGET_RATIO else 'NOT MET'}"
    )
    best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in times.items()}
    print(
        f"fastest runs (less noise from other load): check {best['check'][0]:.2f} s, floor "
        f"{best['floor'][0]:.2f} s wall: {best['check'][0] / best['floor'][0]:.2f}x; CPU "
        f"{best['check'][1] / best['floor'][1]:.2f}x"
        + (
            f"; baseline {best['baseline'][0] / best['floor'][0]:.2f}x wall"
            if "baseline" in best
            else ""
        )
    )
    print(
        "floor agrees with the check's JSON: "
        + ", ".join(f"{k} {'yes' if ok else 'NO'}" for k, ok in agree.items())
    )
    return 0 if all(agree.values()) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--floor"]:
        import json

        print(json.dumps(floor(Path(sys.argv[2]))))
        sys.exit(0)
    sys.exit(main())
