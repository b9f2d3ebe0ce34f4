"""The 1M/day edge world's alarm rule, simulated directly on its true bin shares (no daemon).

Each month: 7 reference days (one per weekday, multinomial with 1,000,000 scores on the world's
true per-weekday bin probabilities against the reference week's population deciles) and 30
daily blocks of 1,000,000 scores at the edge (true PSI = tolerance); the blocks go through the
monitor's own ``psi_test_counts`` -> z -> CUSUM and immediate thresholds (``alarm_plan``'s
``_cusum_h`` / ``_shewhart_z`` for 30 checks, rho 1/2, 7 phases). It checks that the tolerance
null is calibrated at N_eff = 500,000 (z mean ~0, sd ~1) and what P(any false alarm in 30
days) the design gives, with many more months than the daemon path affords
(``bench/detection.py --worlds "edge_1M/day (daily checks)=200"``).

    .venv/bin/python bench/edge_model.py --months 4000
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import monitor.simulate as sim
from monitor.simulate.generate import _utc_us
from monitor.simulate.truth import _drift_share, _mixture
from monitor.stats import psi_test_counts, z_from_pvalue
from monitor.verdict.plan import _cusum_h, _shewhart_z

DAY_US = 24 * 3600 * 10**6


def weekday_shares() -> list[tuple[np.ndarray, np.ndarray]]:
    """(reference, current) bin probabilities per weekday of the 1M/day edge world."""
    from detection import _edge

    scenario = _edge(1e6 / 24)
    o_us = int(_utc_us(sim.EDGE_ORIGIN, "origin").astype(np.int64))
    share = _drift_share(scenario, None)
    onset = o_us + (scenario.drift_start or timedelta(0)) // timedelta(microseconds=1)
    full = onset + scenario.drift_ramp // timedelta(microseconds=1)
    week = _mixture(scenario, (onset - 7 * DAY_US, onset), o_us, share, "reference")
    edges = np.unique([week.quantile(k / 10) for k in range(1, 10)])
    out = []
    for day in range(7):
        ref = _mixture(
            scenario, (onset - (7 - day) * DAY_US, onset - (6 - day) * DAY_US), o_us, share, "r"
        )
        cur = _mixture(scenario, (full + day * DAY_US, full + (day + 1) * DAY_US), o_us, share, "c")
        p = np.diff(np.concatenate([[0.0], ref.cdf(edges), [1.0]]))
        q = np.diff(np.concatenate([[0.0], cur.cdf(edges), [1.0]]))
        out.append((p, q))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--months", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    shares = weekday_shares()
    checks, budget, share, k, rho, phases, n = 30, 0.05, 0.8, 0.5, 0.5, 7, 1_000_000
    span = math.ceil((_cusum_h(checks, share * budget, k, 0.0, 1) + 1.166) / k)
    h = _cusum_h(checks, share * budget, k, rho, max(1, min(phases, span)))
    zc = _shewhart_z(checks, (1 - share) * budget, rho, phases)
    g = np.random.default_rng(args.seed)
    any_alarm = 0
    zs: list[float] = []
    for month in range(args.months):
        off = month % 7
        refs = [g.multinomial(n, shares[d][0]).astype(float) for d in range(7)]
        cusum, fired = 0.0, False
        for t in range(checks):
            day = (off + t) % 7
            cur = g.multinomial(n, shares[day][1]).astype(float)
            r = psi_test_counts(refs[day], cur, tolerance=0.02, smoothing=0.5)
            z = z_from_pvalue(r.pvalue)
            zs.append(z)
            cusum = max(0.0, cusum + z - k)
            fired |= z > zc or cusum > h
        any_alarm += fired
    p = any_alarm / args.months
    se = math.sqrt(p * (1 - p) / args.months)
    print(f"thresholds: CUSUM h {h:.3f} (k {k}), immediate z {zc:.3f}")
    print(f"block z: mean {np.mean(zs):+.3f}, sd {np.std(zs):.3f} over {len(zs):,} blocks")
    print(f"P(any false drift alarm in 30 days): {p:.2%} +- {1.96 * se:.2%} ({args.months} months)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
