"""The detection benchmark's small CI version: false alarms of the default design stay in budget.

A few dozen simulated months of daily checks through ``monitor.verdict.evaluate`` (the daemon's
alarm logic), with ``bench/detection.py``'s month simulation. Each budget test is paired with a rule
that must be *clearly above* budget on the same data (naive KS per check; Bonferroni removed from
the decay looks), so a broken simulation or counting that can never alarm fails too.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from scipy import stats

REPO = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("detection", REPO / "bench" / "detection.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("detection", module)  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


detection: Any = _load()

BUDGET = 0.05
SEED = 7  # base seed of the CI months (the published run uses 20261130)


def _world(name: str, **changes: Any) -> Any:
    """A bench world with scenario fields changed (smaller golden sets and logs cost less)."""
    w = {w.name: w for w in detection.worlds()}[name]
    return dataclasses.replace(w, scenario=dataclasses.replace(w.scenario, **changes))


def _months(world: Any, months: int, **kwargs: Any) -> list[Any]:
    return [detection.simulate_month(world, "1d", m, seed=SEED, **kwargs) for m in range(months)]


def test_wilson_interval_against_scipy() -> None:
    for x, n in [(0, 10), (1, 30), (7, 30), (30, 30), (12, 200)]:
        ci = stats.binomtest(x, n).proportion_ci(confidence_level=0.95, method="wilson")
        lo, hi = detection.wilson_interval(x, n)
        assert lo == pytest.approx(ci.low, abs=1e-12)
        assert hi == pytest.approx(ci.high, abs=1e-12)
    assert detection.wilson_interval(0, 0) == (0.0, 1.0)


def test_summarize_counts_and_delays() -> None:
    trace = detection.RuleTrace
    results = []
    for i, (fa, delay) in enumerate([(0, 5.0), (2, None), (0, 30.0), (1, 10.0)]):
        r = detection.MonthResult("effect_1", "hourly", i)
        r.drift = {
            "default": trace(false_alarms=fa, delay_hours=delay, power_checks=4, power_fires=i)
        }
        results.append(r)
    f = detection.summarize(results)["hourly"]["effect_1"]["drift"]["default"]
    assert f["months"] == 4
    assert f["any_false_alarm"] == 2
    assert f["false_alarms_per_month"] == pytest.approx(0.75)
    assert f["detected"] == 3
    assert f["median_delay_h"] == 10.0  # lower empirical median of 5, 10, 30, miss
    assert math.isinf(f["p90_delay_h"])  # the 90th percentile falls on the miss
    assert f["power"] == pytest.approx((0 + 1 + 2 + 3) / 16)


@pytest.mark.slow
def test_drift_false_alarms_within_budget_and_naive_ks_above() -> None:
    # A golden set below min_pairs keeps decay undecidable, so these months cost only drift.
    months = _months(_world("stationary", golden_set_size=10), 30)
    n = len(months)
    default = sum(m.drift["default"].false_alarms > 0 for m in months)
    ks = sum(m.drift["ks<0.05"].false_alarms > 0 for m in months)
    checks = sum(m.evaluate_calls for m in months)
    assert checks == 30 * n  # every daily check went through evaluate()
    lo_default, _ = detection.wilson_interval(default, n)
    lo_ks, _ = detection.wilson_interval(ks, n)
    assert lo_default < BUDGET, f"default drift design: {default}/{n} months with a false alarm"
    assert lo_ks > BUDGET, f"naive KS per check: only {ks}/{n} months with a false alarm"


@pytest.mark.slow
def test_decay_false_alarms_at_the_margin_within_budget_and_unbudgeted_above() -> None:
    # Outcomes drop by exactly the margin from the reference's end on: the worst case of H0.
    world = _world("decay_boundary", golden_set_size=40)
    months = _months(world, 16)
    n = len(months)
    default = sum(m.decay["default"].false_alarms > 0 for m in months)
    looks = [m.decay["default"].false_alarms for m in months]
    assert all(isinstance(x, int) for x in looks)
    lo_default, _ = detection.wilson_interval(default, n)
    assert lo_default < BUDGET, f"default decay design: {default}/{n} months with a false alarm"

    def unbudgeted(monitor: Any) -> Any:  # alpha 0.05 at each of the 30 looks: no Bonferroni
        budget = dataclasses.replace(monitor.budget, decay=BUDGET * 30)
        return dataclasses.replace(monitor, budget=budget)

    broken = _months(world, 16, configure=unbudgeted)
    fired = sum(m.decay["default"].false_alarms > 0 for m in broken)
    lo_broken, _ = detection.wilson_interval(fired, n)
    assert lo_broken > BUDGET, f"alpha 0.05 per look: only {fired}/{n} months with a false alarm"


@pytest.mark.slow
def test_fast_path_is_exact_for_delays_and_false_alarms() -> None:
    world = _world("effect_3", golden_set_size=40)
    fast = detection.simulate_month(world, "1h", 0, seed=SEED, checks=240)
    full = detection.simulate_month(world, "1h", 0, seed=SEED, checks=240, fast_path=False)
    assert fast.evaluate_calls < full.evaluate_calls == 240
    for side in ("drift", "decay"):
        for rule, f in getattr(fast, side).items():
            g = getattr(full, side)[rule]
            assert (f.false_alarms, f.delay_hours) == (g.false_alarms, g.delay_hours), rule
    assert fast.drift["default"].delay_hours is not None  # the abrupt 0.35 shift was caught
    assert fast.decay == full.decay
