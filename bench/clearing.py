"""How long a raised drift alarm takes to clear, and how often it clears falsely (a model).

The clearing rule (README, "How a check decides"): a raised track clears once its last
``clear_after`` blocks had a debiased PSI in the band (``clear_share * tolerance``) and its
clearing CUSUM ``C = max(0, C - z - k)`` is above ``clear_threshold`` (4.77 for hourly checks
over 30 days). This replays that rule on blocks drawn from a model of the shipped defaults,
through the monitor's own ``psi_test_counts``, ``z_from_pvalue`` and alarm plan (``clear_h``): 10
equal-share bins (the PSI edges are reference deciles), a reference of as many scores as the
block (weekly phases of a 7-day reference hold one copy of each hour), and a block whose true
PSI against it is ``psi`` (bin shares ``(1 + a s) / 10``, ``s`` alternating +-1). Blocks are
independent here (a shared reference correlates them a little: the alarm's threshold accounts
for it, see docs/detection.md), so the figures are the rule's, not a world's.

Per block size: the median and 90th percentile of blocks to clear once the change is gone
(true PSI 0), beside the band alone (the rule before 2026-12-05); and false clears per 720
blocks (a month of hourly checks) while a change persists at the tolerance and at 2.5 times
it (target: at most 0.1 false clears per 720 blocks at 2.5 times; the band alone gave 14 at
200 scores a block). Usage: ``python bench/clearing.py [--runs N]``; a few seconds.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from monitor.config import parse_config
from monitor.stats import psi_test_counts, z_from_pvalue
from monitor.verdict import alarm_plan

BINS = 10
POOL = 4000  # distinct simulated blocks per setting, drawn from with replacement
CAP = 20_000  # blocks: a run that has not cleared by then counts as CAP


def _shares(psi: float) -> np.ndarray:
    """Bin shares whose PSI against equal shares is ``psi``: (1 + a s) / B, s = +-1."""
    base = np.full(BINS, 1.0 / BINS)
    if psi == 0:
        return base
    s = np.array([1.0, -1.0] * (BINS // 2))

    def value(a: float) -> float:
        q = base * (1 + a * s)
        return float(np.sum((q - base) * np.log(q / base)))

    low, high = 0.0, 0.999
    for _ in range(80):  # bisection: PSI grows with a
        mid = (low + high) / 2
        low, high = (mid, high) if value(mid) < psi else (low, mid)
    return base * (1 + low * s)


def _blocks(
    rng: np.random.Generator, m: int, psi: float, tolerance: float, band: float
) -> tuple[np.ndarray, np.ndarray]:
    """z and in-band flags of ``POOL`` blocks of ``m`` scores at true PSI ``psi``."""
    q = _shares(psi)
    base = np.full(BINS, 1.0 / BINS)
    z = np.empty(POOL)
    quiet = np.empty(POOL, dtype=bool)
    for i in range(POOL):
        ref = rng.multinomial(m, base).astype(np.float64)
        cur = rng.multinomial(m, q).astype(np.float64)
        r = psi_test_counts(ref, cur, tolerance=tolerance, smoothing=0.5)
        z[i] = z_from_pvalue(r.pvalue)
        quiet[i] = r.debiased <= band
    return z, quiet


def _run(
    rng: np.random.Generator, z: np.ndarray, quiet: np.ndarray, k: float, h: float, after: int
) -> tuple[int, int]:
    """Blocks until the rule clears, and until the band alone clears (capped at ``CAP``)."""
    c, run, band_at = 0.0, 0, 0
    for t in range(1, CAP + 1):
        j = int(rng.integers(POOL))
        c = max(0.0, c - z[j] - k)
        run = run + 1 if quiet[j] else 0
        if not band_at and run >= after:
            band_at = t
        if run >= after and c > h:
            return t, band_at
    return CAP, band_at or CAP


def _false_clears(
    rng: np.random.Generator, z: np.ndarray, quiet: np.ndarray, k: float, h: float, after: int
) -> tuple[float, float]:
    """Clears per 720 blocks of a change that persists (each clear restarts the track)."""
    n = 200 * 720
    j = rng.integers(POOL, size=n)
    c, run, rule, band = 0.0, 0, 0, 0
    band_run = 0
    for i in j:
        c = max(0.0, c - z[i] - k)
        run = run + 1 if quiet[i] else 0
        band_run = band_run + 1 if quiet[i] else 0
        if run >= after and c > h:
            rule += 1
            c, run = 0.0, 0
        if band_run >= after:
            band += 1
            band_run = 0
    return rule / 200, band / 200


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=300, help="runs per block size (default 300)")
    args = p.parse_args(argv)
    monitor = parse_config(
        {"monitors": [{"name": "m", "scores": {"path": "s"}, "outcomes": {"path": "o"}}]},
        base=Path("."),
    ).monitors[0]
    cfg = monitor.drift
    h = alarm_plan(monitor).clear_h
    band = cfg.clear_share * cfg.tolerance
    print(
        f"clearing rule: {cfg.clear_after} blocks with debiased PSI <= {band:g} and the clearing "
        f"CUSUM (k = {cfg.cusum_k:g}) past h = {h:.2f}; tolerance {cfg.tolerance:g}"
    )
    print(
        "| scores a block | blocks to clear once the change is gone: median / p90 (band alone) "
        "| false clears per 720 blocks at the tolerance (band alone) | at 2.5 x it (band alone) |"
    )
    print("|---|---|---|---|")
    rng = np.random.default_rng(20261205)
    worst = 0.0
    for m in (200, 300, 1_000, 5_000):
        z0, q0 = _blocks(rng, m, 0.0, cfg.tolerance, band)
        runs = np.array(
            [_run(rng, z0, q0, cfg.cusum_k, h, cfg.clear_after) for _ in range(args.runs)]
        )
        cells = []
        for level in (1.0, 2.5):
            z, q = _blocks(rng, m, level * cfg.tolerance, cfg.tolerance, band)
            rule, alone = _false_clears(rng, z, q, cfg.cusum_k, h, cfg.clear_after)
            cells.append(f"{rule:.2f} ({alone:.1f})")
            if level > 1:
                worst = max(worst, rule)
        print(
            f"| {m:,} | {np.median(runs[:, 0]):.0f} / {np.percentile(runs[:, 0], 90):.0f} "
            f"({np.median(runs[:, 1]):.0f} / {np.percentile(runs[:, 1], 90):.0f}) "
            f"| {cells[0]} | {cells[1]} |"
        )
    ok = worst <= 0.1
    print(
        f"a change at 2.5 x the tolerance clears falsely at most {worst:.2f} times per 720 blocks "
        f"(target <= 0.1: {'met' if ok else 'NOT MET'})"
    )
    return 0 if ok and math.isfinite(h) else 1


if __name__ == "__main__":
    sys.exit(main())
