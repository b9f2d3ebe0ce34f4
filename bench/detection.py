"""Detection quality on traffic as it really is (issue 9), through the daemon's own code path.

What runs. Each simulated *month* is a world from ``monitor.simulate`` written to parquet (origin
``O`` = ``BASE + month`` days, so weekdays rotate), replayed by ``monitor.backtest.backtest`` (which
calls ``Runner.run`` for every slot, exactly as the daemon does) over 30 days of hourly checks
``[O + 8d, O + 38d)`` with the shipped defaults (rolling 7-day reference, 1-day current window,
seasonality ``auto`` = hour of week, anchor on, budget 5 % drift + 5 % decay per 30 days).

Worlds (``WORLDS``): null worlds, where every alarm is false: ``stationary``, ``diurnal`` (zero
share 10 %/30 % day/night, weekend mix +0.05), ``strong_seasonality`` (5 %/40 %, weekends +0.05
zeros and +0.10 hard share), ``segments_20`` (20 locales sharing a 300-query golden set); the same
seasonal worlds with ``drift.seasonality = "none"`` (the phase-blind rule the monitor had before);
effect worlds: ``step_drift`` (hard share +0.35 at day 15, true PSI ~0.14, persists),
``step_drift_0.05_300/h`` (true PSI 0.05 = 2.5 x the tolerance on 300 scores an hour),
``creep_to_0.05 (onset: true PSI 0.04)`` and ``creep_to_0.1 (onset: true PSI 0.04)`` (hard
share ramping over 14 days from day 10 to a true PSI of 0.05 and 0.1), ``decay_h<H>`` (an
abrupt -0.04 decay whose onset is at hour H of day 15: the daily golden-set run is at 02:00),
``dead_feed`` (scores stop at day 15 10:00).

Figures per world: P(any false alarm in 30 days) with a Wilson 95 % interval (null worlds), false
alarms per month; for effect worlds the months that detected (k/n) and the delay from onset to
the first check in the expected state (median, p90 and max over the months that detected), the
share of post-onset hours in that state and the number of state changes after onset (goal: one);
for every world the checks that ended in ``error`` (any fails the run: a month of failed checks
read as a perfect null month).

Usage: ``python bench/detection.py [--months N] [--worlds a,b=M|all] [--processes P]
[--json PATH] [--engine local]`` (``b=M``: M months of world b; ``--engine``: through cached
summaries on a frozen grid, docs/engines.md). ``make bench`` runs the quick set (``QUICK``),
one month each. The figures in
``docs/detection.md`` come from the command printed there.
Cost: about 10-15 s per world-month on one core.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scipy import stats

from monitor.backtest import backtest
from monitor.config import DecayConfig, load_config
from monitor.simulate import (
    SCENARIOS,
    Scenario,
    at_edge,
    edge_strength,
    psi_crossing,
    write_world,
)

__all__ = ["WORLDS", "MonthResult", "WorldSpec", "run_month", "summarize", "wilson_interval"]

BASE = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday; month i starts i days later
CHECKS_START = timedelta(days=8)
CHECKS_END = timedelta(days=38)
ONSET = timedelta(days=15)
SCORES_PER_HOUR = 1000.0
HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class WorldSpec:
    """A world: its scenario, the state it should reach (None: null world) and from when.

    ``onset`` is an offset from the origin, or a callable of the origin (a gradual drift's
    onset is when its true PSI crosses a level); ``schedule`` the monitor's schedule;
    ``start_offset`` shifts the first replayed slot (the daemon's start phase).
    """

    name: str
    scenario: Callable[[], Scenario]
    expected: str | None = None
    onset: timedelta | Callable[[Scenario, datetime], datetime | None] | None = None
    extra_toml: str = ""
    schedule: str = "1h"
    start_offset: timedelta = timedelta(0)
    null_until: Callable[[Scenario, datetime], datetime | None] | None = None
    cost: float = 1.0  # relative replay cost, for the order of a parallel run


def _base(name: str, **changes: Any) -> Scenario:
    fields = {"scores_per_hour": SCORES_PER_HOUR, **changes}
    return dataclasses.replace(SCENARIOS[name], name=name, **fields)


_FIXED = 'windows.reference_start = "{start}"\nwindows.reference_end = "{end}"\n'


@functools.lru_cache(maxsize=8)
def _edge(scores_per_hour: float) -> Scenario:
    """An abrupt drift whose true PSI against the reference week is exactly the tolerance, from
    the first check on: every block is at the edge of the null (true PSI = 0.02)."""
    base = dataclasses.replace(
        SCENARIOS["covariate_shift"], drift_start=timedelta(days=7), name="edge"
    )
    return at_edge(base, 0.02, scores_per_hour=scores_per_hour)


@functools.lru_cache(maxsize=8)
def _creep(level: float) -> Scenario:
    """A drift ramping over 14 days from day 10 to a true PSI of ``level``."""
    base = dataclasses.replace(
        SCENARIOS["gradual_drift"],
        drift_start=timedelta(days=10),
        drift_ramp=timedelta(days=14),
        scores_per_hour=SCORES_PER_HOUR,
    )
    strength = edge_strength(base, level)
    return dataclasses.replace(base, name=f"creep_{level:g}", drift_strength=strength)


@functools.lru_cache(maxsize=8)
def _step(level: float, scores_per_hour: float) -> Scenario:
    """An abrupt drift at day 15 whose true PSI against the week before it is ``level``."""
    base = dataclasses.replace(
        SCENARIOS["covariate_shift"], drift_start=ONSET, scores_per_hour=scores_per_hour
    )
    name = f"step_{level:g}_{scores_per_hour:g}/h"
    return dataclasses.replace(base, name=name, drift_strength=edge_strength(base, level))


def _crossing(level: float) -> Callable[[Scenario, datetime], datetime | None]:
    """When the trailing day's true PSI against the first reference week reaches ``level``."""

    def onset(scenario: Scenario, origin: datetime) -> datetime | None:
        return psi_crossing(
            scenario,
            level,
            reference=(origin, origin + timedelta(days=7)),
            between=(origin + timedelta(days=10), origin + CHECKS_END),
            origin=origin,
        )

    return onset


WORLDS: dict[str, WorldSpec] = {
    w.name: w
    for w in (
        WorldSpec("stationary", lambda: _base("stationary")),
        WorldSpec("diurnal", lambda: _base("diurnal")),
        WorldSpec("strong_seasonality", lambda: _base("strong_seasonality")),
        WorldSpec(
            "diurnal/phase-blind",
            lambda: _base("diurnal"),
            extra_toml='drift.seasonality = "none"\n',
        ),
        WorldSpec(
            "strong_seasonality/phase-blind",
            lambda: _base("strong_seasonality"),
            extra_toml='drift.seasonality = "none"\n',
        ),
        WorldSpec("segments_20", lambda: _base("segments_20"), cost=5.0),
        WorldSpec("edge_300/h", lambda: _edge(300.0), extra_toml=_FIXED, cost=0.6),
        WorldSpec("edge_10k/h", lambda: _edge(10_000.0), extra_toml=_FIXED, cost=5.0),
        WorldSpec(
            "edge_1M/day (daily checks)",
            lambda: _edge(1e6 / 24),
            extra_toml=_FIXED,
            schedule="1d",
            cost=8.0,
        ),
        WorldSpec(
            "step_drift",
            lambda: _base("covariate_shift"),
            expected="data_drift",
            onset=ONSET,
        ),
        WorldSpec(  # few scores a block: a point estimate dips below the clearing band
            "step_drift_0.05_300/h",
            lambda: _step(0.05, 300.0),
            expected="data_drift",
            onset=ONSET,
            cost=0.6,
        ),
        *(
            WorldSpec(
                f"creep_to_{level:g} (onset: true PSI 0.04)",
                functools.partial(_creep, level),
                expected="data_drift",
                onset=_crossing(0.04),
                null_until=_crossing(0.02),  # alarms before the tolerance is crossed are false
            )
            for level in (0.05, 0.1)
        ),
        *(
            WorldSpec(
                f"decay_h{h:02d}",
                functools.partial(_base, "abrupt_decay", decay_start=ONSET + timedelta(hours=h)),
                expected="model_decay",
                onset=ONSET + timedelta(hours=h),
            )
            for h in (0, 3, 13)
        ),
        *(
            WorldSpec(
                f"decay_h13/start+{s}h",
                functools.partial(_base, "abrupt_decay", decay_start=ONSET + timedelta(hours=13)),
                expected="model_decay",
                onset=ONSET + timedelta(hours=13),
                start_offset=timedelta(hours=s),
            )
            for s in (5, 17)
        ),
        WorldSpec(
            "decay_4_evaluations/day",
            lambda: _base("evaluations_4"),
            expected="model_decay",
            onset=ONSET,
        ),
        WorldSpec(
            "decay_golden_30",
            lambda: _base("golden_30"),
            expected="model_decay",
            onset=ONSET,
        ),
        WorldSpec(
            "large_decay_0.10",
            functools.partial(_base, "abrupt_decay", decay_size=0.10),
            expected="model_decay",
            onset=ONSET,
        ),
        WorldSpec(
            "decay_24_evaluations/day",
            functools.partial(_base, "abrupt_decay", evaluations_per_day=24),
            expected="model_decay",
            onset=ONSET,
        ),
        WorldSpec(
            "decay_at_margin",  # true drop = margin all month: the decay null's worst case
            lambda: _base(
                "abrupt_decay", decay_start=timedelta(days=7), decay_size=DecayConfig().margin
            ),
            extra_toml=_FIXED,
        ),
        WorldSpec(  # 30 % of the golden set finds its document in a tenth of the runs (RR-like
            # skewed run noise): the decay null where sign flips on 7-run means broke the budget
            "flaky_golden_set",
            functools.partial(_base, "stationary", flaky_share=0.3, flaky_find=0.1),
        ),
        WorldSpec("window_1h", lambda: _base("stationary"), extra_toml='windows.current = "1h"\n'),
        WorldSpec(
            "window_1h/decay",
            lambda: _base("abrupt_decay"),
            expected="model_decay",
            onset=ONSET,
            extra_toml='windows.current = "1h"\n',
        ),
        WorldSpec(
            "small_decay_0.015",
            functools.partial(_base, "abrupt_decay", decay_size=0.015),
            expected="model_decay",
            onset=ONSET,
        ),
        WorldSpec(
            "dead_feed",
            lambda: _base("dead_feed"),
            expected="insufficient_data",
            onset=timedelta(days=15, hours=10),
        ),
    )
}


#: The worlds ``make bench`` replays (one month each, a few minutes on 2 cores): the seasonal null
#: with its phase-blind contrast, a step drift (and one on few scores an hour, which must not
#: flap), a decay at an awkward hour and a dead feed.
QUICK = (
    "strong_seasonality",
    "strong_seasonality/phase-blind",
    "step_drift",
    "step_drift_0.05_300/h",
    "decay_h13",
    "dead_feed",
)


@dataclass(frozen=True, slots=True)
class MonthResult:
    """One replayed month of one world."""

    world: str
    month: int
    drift_alarms: int
    decay_alarms: int
    delay_hours: float | None
    hours_right: float | None
    changes_after_onset: int | None
    seconds: float
    share_insufficient: float = 0.0
    errors: int = 0  # checks that ended in error (no alarm, but no verdict either)


_ENGINE_ENV = "MONITOR_DETECTION_ENGINE"


def false_alarms(checks: Sequence[Any], quiet_end: datetime | None) -> tuple[int, int]:
    """Raises into data_drift and into model_decay (changes of state, not hours) at checks up
    to ``quiet_end`` (None: all): the check at the onset slot decides on the window before
    it, so an alarm there is false too (it was counted as neither false nor late)."""
    drift = decay = 0
    prev = None
    for c in checks:
        if c.state != prev and (quiet_end is None or c.at <= quiet_end):
            drift += c.state == "data_drift"
            decay += c.state == "model_decay"
        prev = c.state
    return drift, decay


def null_failures(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Worlds with no real change whose false-alarm probability is above 5 % beyond doubt
    (the Wilson interval's low end): drift (but for the phase-blind rule's worlds, which
    show what the phases prevent) or decay (once never checked: a decay-only null world could
    not fail)."""
    return [
        n
        for n, e in summary.items()
        if "detected" not in e
        and (
            ("phase-blind" not in n and e["p_false_drift_ci"][0] > 0.05)
            or e["p_false_decay_ci"][0] > 0.05
        )
    ]


def run_month(spec: WorldSpec, month: int, workdir: Path) -> MonthResult:
    """Write the world of ``month`` under ``workdir`` and replay its 30 days of hourly checks."""
    origin = BASE + timedelta(days=month)
    scenario = spec.scenario()
    world = write_world(
        workdir,
        scenario,
        start=origin,
        end=origin + CHECKS_END,
        seed=1000 + month,
        schedule=spec.schedule,
        listen="127.0.0.1:0",
        extra_monitor_toml=spec.extra_toml.format(
            start=_iso(origin), end=_iso(origin + timedelta(days=7))
        ),
    )
    text = world.config_path.read_text()
    extra = spec.extra_toml.format(start=_iso(origin), end=_iso(origin + timedelta(days=7)))
    for line in extra.splitlines():  # an extra key replaces write_world's default
        key = line.split("=", 1)[0].strip()
        text = "\n".join(
            t for t in text.splitlines() if t.split("=", 1)[0].strip() != key or t == line
        )
    if "reference_start" in extra:
        text = "\n".join(t for t in text.splitlines() if not t.startswith("windows.reference ="))
    engine = os.environ.get(_ENGINE_ENV)
    if engine:  # checks through cached summaries on a frozen grid (--engine)
        text += f'\n[engine]\nkind = "{engine}"\n'
    world.config_path.write_text(text + "\n")
    config = load_config(world.config_path)
    t0 = time.perf_counter()
    first = origin + CHECKS_START + spec.start_offset
    (result,) = backtest(config, first, origin + CHECKS_END - HOUR)
    seconds = time.perf_counter() - t0
    checks = result.checks
    if callable(spec.onset):
        onset_at = spec.onset(scenario, origin)
    else:
        onset_at = None if spec.onset is None else origin + spec.onset
    quiet_end = onset_at
    if spec.null_until is not None:
        quiet_end = spec.null_until(scenario, origin)
    drift, decay = false_alarms(checks, quiet_end)
    delay = right = changes = None
    if spec.expected is not None and onset_at is None:
        right, changes = 0.0, 0  # the effect never reached its onset level this month
    if onset_at is not None and spec.expected is not None:
        start = onset_at if quiet_end is None else min(onset_at, quiet_end)
        hit = next((c for c in checks if c.at > start and c.state == spec.expected), None)
        delay = None if hit is None else (hit.at - onset_at) / HOUR
        after = [c for c in checks if c.at > onset_at]
        right = sum(c.state == spec.expected for c in after) / max(len(after), 1)
        # from the last check at or before the onset: a raise at the first check after it is
        # a change too (counted from the second one, a one-hour detection read as no change)
        before = [c for c in checks if c.at <= onset_at][-1:]
        changes = sum(1 for a, b in itertools.pairwise(before + after) if a.state != b.state)
    insufficient = sum(c.state == "insufficient_data" for c in checks) / max(len(checks), 1)
    errors = sum(c.state == "error" for c in checks)
    return MonthResult(
        spec.name, month, drift, decay, delay, right, changes, seconds, insufficient, errors
    )


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _task(item: tuple[str, int]) -> MonthResult:
    name, month = item
    with tempfile.TemporaryDirectory() as tmp:
        return run_month(WORLDS[name], month, Path(tmp))


def wilson_interval(k: int, n: int) -> tuple[float, float]:
    """Wilson score 95 % interval for k successes in n trials (scipy's; (0, 1) when n = 0)."""
    if n == 0:
        return 0.0, 1.0
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def summarize(results: Sequence[MonthResult]) -> dict[str, dict[str, Any]]:
    """Per world: false-alarm probability (Wilson 95 %), delays, hours right, changes."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.world for r in results):
        rows = [r for r in results if r.world == name]
        n = len(rows)
        any_drift = sum(r.drift_alarms > 0 for r in rows)
        any_decay = sum(r.decay_alarms > 0 for r in rows)
        delays = sorted(r.delay_hours for r in rows if r.delay_hours is not None)
        entry: dict[str, Any] = {
            "months": n,
            "p_false_drift": any_drift / n,
            "p_false_drift_ci": wilson_interval(any_drift, n),
            "false_drift_per_month": sum(r.drift_alarms for r in rows) / n,
            "p_false_decay": any_decay / n,
            "p_false_decay_ci": wilson_interval(any_decay, n),
            "seconds_per_month": sum(r.seconds for r in rows) / n,
            "share_insufficient": sum(r.share_insufficient for r in rows) / n,
            "error_checks": sum(r.errors for r in rows),
        }
        if rows[0].hours_right is not None:
            entry |= {
                "detected": len(delays) / n,
                "detected_months": len(delays),
                # over the months that detected (a missed one is counted in ``detected``)
                "delay_median_h": statistics.median(delays) if delays else None,
                "delay_max_h": delays[-1] if delays else None,
                "delay_p90_h": delays[min(len(delays) - 1, math.ceil(0.9 * len(delays)) - 1)]
                if delays
                else None,
                "share_hours_right": sum(r.hours_right or 0.0 for r in rows) / n,
                "changes_after_onset_max": max(r.changes_after_onset or 0 for r in rows),
            }
        out[name] = entry
    return out


def _fmt_ci(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.1%}, {ci[1]:.1%}]"


def format_table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| world | months | P(false drift) [95 % CI] | P(false decay) [95 % CI] | "
        "detected | delay median / p90 / max (h) | post-onset hours right | changes after "
        "onset | hours insufficient | checks in error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in summary.items():
        delay = (
            f"{e['delay_median_h']:.0f} / {e['delay_p90_h']:.0f} / {e['delay_max_h']:.0f}"
            if e.get("delay_median_h") is not None
            else ("never" if "detected" in e else "-")
        )
        right = f"{e['share_hours_right']:.0%}" if "share_hours_right" in e else "-"
        changes = str(e["changes_after_onset_max"]) if "changes_after_onset_max" in e else "-"
        found = f"{e['detected_months']}/{e['months']}" if "detected" in e else "-"
        lines.append(
            f"| {name} | {e['months']} | {e['p_false_drift']:.1%} {_fmt_ci(e['p_false_drift_ci'])}"
            f" | {e['p_false_decay']:.1%} {_fmt_ci(e['p_false_decay_ci'])} | {found} | {delay} "
            f"| {right} | {changes} | {e['share_insufficient']:.1%} | {e['error_checks']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--months", type=int, default=1)
    p.add_argument(
        "--worlds",
        default=",".join(QUICK),
        help="comma-separated worlds, each optionally name=months (default: the quick set; "
        "'all' for every world)",
    )
    p.add_argument("--json", type=Path)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--first-month", type=int, default=0, help="month index to start from")
    p.add_argument(
        "--engine",
        choices=("local", "dask", "spark"),
        help="check through cached summaries on a frozen grid ([engine] kind) instead of "
        "reading whole windows",
    )
    args = p.parse_args(argv)
    if args.engine:
        os.environ[_ENGINE_ENV] = args.engine  # the spawned workers inherit it
    if args.worlds == "all":
        args.worlds = ",".join(WORLDS)
    # "name" or "name=months" (a per-world month count)
    wanted = [w.rsplit("=", 1) if "=" in w else [w, ""] for w in args.worlds.split(",") if w]
    names = [w for w, _ in wanted]
    counts = {w: int(c) for w, c in wanted if c}
    unknown = sorted(set(names) - set(WORLDS))
    if unknown:
        print(f"unknown worlds {unknown}; known: {', '.join(WORLDS)}", file=sys.stderr)
        return 2
    tasks = []
    for name in names:
        spec = WORLDS[name]
        months = counts.get(name) or (
            args.months if spec.expected is None else max(1, args.months // 2)
        )
        first = args.first_month
        tasks += [(spec.cost, name, month) for month in range(first, first + months)]
    tasks.sort(key=lambda t: (-t[0], t[1], t[2]))  # the longest first
    results: list[MonthResult] = []
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        for r in pool.imap_unordered(_task, [(n, m) for _, n, m in tasks]):
            results.append(r)
            print(
                f"{r.world} month {r.month}: drift alarms {r.drift_alarms}, decay alarms "
                f"{r.decay_alarms}, delay {r.delay_hours}, right {r.hours_right}, "
                f"changes {r.changes_after_onset} ({r.seconds:.1f} s)",
                flush=True,
            )
    order = {n: i for i, n in enumerate(names)}
    results.sort(key=lambda r: (order[r.world], r.month))
    summary = summarize(results)
    print(format_table(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    failures = run_failures(summary)
    for line in failures:
        print(f"FAIL: {line}")
    return 1 if failures else 0


def run_failures(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Why the run fails (none: it passes): a null world over its false-alarm budget beyond
    doubt, or any check that ended in error (a month of failed checks raises no alarm, and is
    no evidence of none)."""
    out = []
    null_fail = null_failures(summary)
    if null_fail:
        out.append(f"false-alarm budget exceeded beyond doubt in {null_fail}")
    failed = [n for n, e in summary.items() if e.get("error_checks")]
    if failed:
        out.append(f"checks ended in error in {failed}: their months decide nothing")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
