"""Detection quality of the default alarm design against naive rules, on simulated months (issue 6).

What runs. Each simulated *month* is a world from ``monitor.simulate`` with origin ``O`` (midnight
UTC, ``BASE + month`` days, so weekdays rotate), a fixed reference ``[O, O + 7d)`` and 30 days of
scheduled checks at ``O + 8d + k * interval`` (720 hourly or 30 daily), each with the current window
``[at - 1d, at)``. Every check calls the daemon's own ``monitor.verdict.evaluate`` with the default
``MonitorConfig`` (fixed reference; defaults otherwise), carrying the returned ``MonitorState``;
only the parquet reads are replaced by slicing in-memory arrays, with the per-query outcome means
and the pairing computed as ``monitor.sources.read_outcomes`` / ``pair_outcomes`` do.

Worlds per month (one seed per month, shared by all worlds: common random numbers):

* ``stationary``: nothing changes. Every alarm is false.
* ``decay_boundary``: outcomes are ``margin`` (0.005 by default) lower from the reference's end
  on, so every look is at the edge of the decay null H0: mean(d) >= -margin (the worst case for
  the budget).
* ``effect_1..3``: an abrupt covariate shift (the hard-query share rises by ``drift_strength``) and
  an abrupt decay (``decay_size``), both from day 15 after the origin (day 7 of the checks).
  Drift and decay are decided by disjoint code paths on disjoint data (scores vs golden-set
  outcomes), so one world measures both; each is reported on its own.

Rules, all on the same data:

* drift ``default``: the alarm ``evaluate`` raises (CUSUM on block z-scores or the immediate
  Holm/Bonferroni threshold; ``InputReport.alarm``); ``psi>=0.1``: PSI of the current window
  against the reference (the verdict's ``psi``) at least 0.1, per check; ``ks<0.05``: the verdict's
  two-sample KS p-value of the current window below 0.05, per check.
* decay ``default``: a new look with ``OutcomeReport.decay`` (one-sided sign-flip test of
  mean(d) < -margin at budget/looks); ``welch<0.05``: one-sided Welch t-test of the current against
  the reference per-query means as two independent samples, p < 0.05, once per new evaluation run;
  ``welch@budget``: the same unpaired test with the default's margin and alpha (what pairing buys
  at equal budget).

Figures per (schedule, world, rule): P(at least one false alarm in the month) with a Wilson 95 %
interval (null worlds; before-onset alarms in effect worlds are reported too), false alarms per
month (mean, standard error over months), detection within the month after onset, detection delay
(median and 90th percentile over months, misses counted as never; a quantile that falls on a miss
prints as ``>Nd``) and single-check power: the share of checks (drift; for ``default`` the evidence
blocks, judged by the immediate threshold alone) or looks (decay) whose current window lies wholly
after onset that fire, averaged over months.

Cost control (exact, not approximate): once the ``default`` drift alarm has fired after onset and
24 wholly-post-onset checks have been seen, an effect world stops calling ``evaluate`` every check;
from then on it calls it only at checks where a decay look can happen (the outcome window changed
since the last call, or changed since the last look and the look spacing has passed), which leaves
the decay path's behaviour unchanged (between looks ``evaluate`` only carries the last look), and
computes the naive drift statistics with the same ``monitor.stats`` calls the verdict makes (KS only
while it is still needed). The ``decay_boundary`` world does the latter from the first check.

Usage: ``python bench/detection.py [--months N | --quick] [--processes P] [--seed S]
[--plot-dir DIR] [--json PATH]``. ``make bench`` runs it with no arguments (40 months; a few
minutes on 2 cores); the published figures in ``docs/detection.md`` come from
``--months 200 --plot-dir docs``. Plots need matplotlib (the ``plots`` extra); without it the
tables are still printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from monitor.config import DecayConfig, MonitorConfig, parse_config
from monitor.simulate import Scenario, generate_outcomes, generate_scores
from monitor.stats import build_baseline, drift_tests, psi
from monitor.verdict import CheckData, MonitorState, Pairs, SegmentData, alarm_plan, evaluate

__all__ = [
    "DECAY_RULES",
    "DRIFT_RULES",
    "SCHEDULES",
    "MonthResult",
    "RuleTrace",
    "World",
    "monitor_config",
    "simulate_month",
    "summarize",
    "wilson_interval",
    "worlds",
]

HERE = Path(__file__).resolve().parent
BASE = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday; month i starts i days later
REFERENCE = timedelta(days=7)
CURRENT = timedelta(days=1)
CHECKS_START = REFERENCE + CURRENT  # first check: its current window is the day after the reference
PERIOD = timedelta(days=30)
ONSET = timedelta(days=15)  # the presets' onset (SCENARIOS["covariate_shift"], ["abrupt_decay"])
SCORES_PER_HOUR = 300.0
POWER_CHECKS = 24  # wholly-post-onset hourly checks seen before an effect world takes the fast path
NAIVE_PSI = 0.1
NAIVE_ALPHA = 0.05
#: (drift_strength, decay_size) of the effect worlds. True PSI of the hard-share shifts against the
#: reference (measured on 10^6 scores): 0.16 -> 0.03, 0.20 -> 0.048, 0.35 -> 0.144 (the
#: ``covariate_shift`` preset); below the 0.02 tolerance (e.g. 0.10 -> 0.012) the design is meant
#: not to alarm. Decay sizes are mean per-query drops before clipping (default margin 0.005).
EFFECTS = ((0.16, 0.015), (0.20, 0.02), (0.35, 0.04))
SCHEDULES = {"hourly": "1h", "daily": "1d"}
DRIFT_RULES = ("default", "psi>=0.1", "ks<0.05")
DECAY_RULES = ("default", "welch<0.05", "welch@budget")
_NS_PER_US = 1000
_H = 3_600_000_000_000  # ns per hour


# --------------------------------------------------------------------------------------------
# worlds and configuration


@dataclass(frozen=True, slots=True)
class World:
    """A simulated world: its scenario and when (after the origin) its drift and decay begin.

    ``None`` onset: that side is null all month (every alarm on it is false).
    """

    name: str
    scenario: Scenario
    drift_onset: timedelta | None
    decay_onset: timedelta | None
    drift_strength: float = 0.0
    decay_size: float = 0.0


def worlds(scores_per_hour: float = SCORES_PER_HOUR) -> tuple[World, ...]:
    """The stationary world, the decay-boundary world and the effect worlds (``EFFECTS``)."""
    base = Scenario("stationary", scores_per_hour=scores_per_hour)
    margin = DecayConfig().margin
    out = [
        World("stationary", base, None, None),
        World(
            "decay_boundary",
            dataclasses.replace(
                base, name="decay_boundary", decay_start=REFERENCE, decay_size=margin
            ),
            None,
            None,
            decay_size=margin,
        ),
    ]
    for i, (strength, size) in enumerate(EFFECTS, start=1):
        scenario = dataclasses.replace(
            base,
            name=f"effect_{i}",
            drift_kind="abrupt",
            drift_start=ONSET,
            drift_strength=strength,
            decay_start=ONSET,
            decay_size=size,
        )
        out.append(World(f"effect_{i}", scenario, ONSET, ONSET, strength, size))
    return tuple(out)


_TOML = """
[[monitors]]
name = "detection"
schedule = "{schedule}"
seed = {seed}
scores.path = "scores"
outcomes.path = "outcomes"
windows.current = "1d"
windows.reference_start = "{ref_start}"
windows.reference_end = "{ref_end}"
"""


def monitor_config(schedule: str, origin: datetime, *, seed: int = 0) -> MonitorConfig:
    """The default monitor for ``schedule`` with the fixed reference ``[origin, origin + 7d)``.

    Parsed from TOML by ``monitor.config.parse_config``, so every other key is the shipped
    default (budget 5 % drift and 5 % decay per 30 days, tolerance 0.02, margin 0.005, ...).
    """
    text = _TOML.format(
        schedule=schedule,
        seed=seed,
        ref_start=origin.isoformat().replace("+00:00", "Z"),
        ref_end=(origin + REFERENCE).isoformat().replace("+00:00", "Z"),
    )
    return parse_config(tomllib.loads(text), base=Path(".")).monitors[0]


def month_seed(seed: int, month: int) -> int:
    """The world seed of ``month``: ``seed * 1_000_000 + month`` (also the monitor's seed)."""
    return seed * 1_000_000 + month


# --------------------------------------------------------------------------------------------
# one month


@dataclass(slots=True)
class RuleTrace:
    """What one rule did in one month.

    ``false_alarms``: alarms in a null world, or before onset in an effect world;
    ``delay_hours``: first alarm at or after onset (``None``: none within the month or null side);
    ``power_checks`` / ``power_fires``: wholly-post-onset checks (or looks) and those that fired.
    """

    false_alarms: int = 0
    delay_hours: float | None = None
    power_checks: int = 0
    power_fires: int = 0

    def record(self, at: datetime, onset: datetime | None, fired: bool, *, post: bool) -> None:
        """Count one decision at ``at``; ``post``: its window lies wholly after onset."""
        if onset is None or at <= onset:
            self.false_alarms += int(fired)
        elif fired and self.delay_hours is None:
            self.delay_hours = (at - onset) / timedelta(hours=1)
        if post:
            self.power_checks += 1
            self.power_fires += int(fired)


@dataclass(slots=True)
class MonthResult:
    """The traces of every rule for one (world, schedule, month)."""

    world: str
    schedule: str
    month: int
    drift: dict[str, RuleTrace] = field(default_factory=dict)
    decay: dict[str, RuleTrace] = field(default_factory=dict)
    evaluate_calls: int = 0
    seconds: float = 0.0


def _ns(t: datetime) -> int:
    return int((t - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) * _NS_PER_US


class _Outcomes:
    """Per-query mean outcomes of a window, as ``read_outcomes`` computes them (mean by id)."""

    def __init__(self, ts_ns: npt.NDArray[np.int64], query: npt.NDArray[np.intp], y: Any) -> None:
        self.ts, self.query, self.y = ts_ns, query, y
        self.n = int(query.max()) + 1 if query.size else 0

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        a, b = np.searchsorted(self.ts, [lo, hi], side="left")
        return int(a), int(b)

    def means(self, a: int, b: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        q = self.query[a:b]
        counts = np.bincount(q, minlength=self.n)
        sums = np.bincount(q, weights=self.y[a:b], minlength=self.n)
        present = counts > 0
        return sums / np.maximum(counts, 1), present


def simulate_month(
    world: World,
    schedule: str,
    month: int,
    *,
    seed: int = 0,
    checks: int | None = None,
    fast_path: bool = True,
    configure: Callable[[MonitorConfig], MonitorConfig] | None = None,
) -> MonthResult:
    """Run the default design and the naive rules over one simulated month of ``world``.

    ``checks`` limits the number of checks (tests); ``fast_path=False`` calls ``evaluate`` at every
    check whatever the world (the reference for the fast path's exactness); ``configure`` changes
    the monitor (tests use it to break the budget on purpose).
    """
    t_start = time.perf_counter()
    origin = BASE + timedelta(days=month)
    wseed = month_seed(seed, month)
    monitor = monitor_config(schedule, origin, seed=wseed)
    if configure is not None:
        monitor = configure(monitor)
    plan = alarm_plan(monitor)
    interval = monitor.schedule.nominal_interval(PERIOD)
    n_checks = plan.checks if checks is None else min(checks, plan.checks)
    end = origin + CHECKS_START + interval * n_checks
    sc = world.scenario
    scores = generate_scores(sc, origin, end, rng=wseed)
    outs = generate_outcomes(sc, origin, end, rng=wseed)
    s_ts = scores.timestamps.astype(np.int64) * _NS_PER_US
    o_ts = outs.timestamps.astype(np.int64) * _NS_PER_US
    # "q0001" ... sorted by id = numeric order: the pairing order of ``pair_outcomes``
    query = np.char.lstrip(outs.query_ids.astype(str), "q").astype(np.intp) - 1
    oc = _Outcomes(o_ts, query, outs.outcomes)

    ref_lo, ref_hi = _ns(origin), _ns(origin + REFERENCE)
    r_a, r_b = np.searchsorted(s_ts, [ref_lo, ref_hi], side="left")
    reference = scores.scores[r_a:r_b]
    baseline = build_baseline(reference, bins=monitor.drift.bins)
    ref_means, ref_present = oc.means(*oc.span(ref_lo, ref_hi))
    ref_values = ref_means[ref_present]
    cfg = monitor.drift

    drift_onset = origin + world.drift_onset if world.drift_onset is not None else None
    decay_onset = origin + world.decay_onset if world.decay_onset is not None else None
    if world.name == "decay_boundary":
        decay_onset = None  # a null world for decay: every decay alarm is false
    result = MonthResult(world.name, schedule, month)
    result.drift = {r: RuleTrace() for r in DRIFT_RULES}
    result.decay = {r: RuleTrace() for r in DECAY_RULES}
    drift_needed = world.name != "decay_boundary"
    state = MonitorState()
    last_call_key: tuple[int, int] | None = None
    last_look_key: tuple[int, int] | None = None
    last_naive_key: tuple[int, int] | None = None
    post_drift_checks = 0
    hourly = interval < CURRENT

    for k in range(n_checks):
        at = origin + CHECKS_START + interval * k
        lo, hi = _ns(at - CURRENT), _ns(at)
        c_a, c_b = np.searchsorted(s_ts, [lo, hi], side="left")
        o_key = oc.span(lo, hi)
        drift_post = drift_onset is not None and at - CURRENT >= drift_onset
        decay_post = decay_onset is not None and at - CURRENT >= decay_onset
        if drift_needed and fast_path and drift_onset is not None and hourly:  # daily: all checks
            done = result.drift["default"].delay_hours is not None
            if done and post_drift_checks >= POWER_CHECKS:
                drift_needed = False
        due = state.decay.last_look_at is None or at - state.decay.last_look_at >= plan.look_spacing
        look_possible = o_key != last_call_key or (o_key != last_look_key and due)
        call = drift_needed or not fast_path or look_possible

        current = scores.scores[c_a:c_b]
        cur_means, cur_present = oc.means(*o_key)
        if call:
            both = ref_present & cur_present
            seg = SegmentData(
                reference=reference,
                current=current,
                current_timestamps=s_ts[c_a:c_b],
                pairs=Pairs(
                    reference=ref_means[both],
                    current=cur_means[both],
                    only_reference=int(np.count_nonzero(ref_present & ~cur_present)),
                    only_current=int(np.count_nonzero(cur_present & ~ref_present)),
                ),
                baseline=baseline,
            )
            data = CheckData(
                current_start=at - CURRENT,
                current_end=at,
                reference_start=origin,
                reference_end=origin + REFERENCE,
                segments={"": seg},
            )
            verdict, state = evaluate(monitor, at, data, state)
            result.evaluate_calls += 1
            last_call_key = o_key
            out = verdict.outcomes[""]
            if out.new_look:
                last_look_key = o_key
                result.decay["default"].record(at, decay_onset, out.decay, post=decay_post)
        # drift rules
        if world.name != "decay_boundary" and current.size >= cfg.min_current_samples:
            ks_trace = result.drift["ks<0.05"]
            if (call and drift_needed) or not fast_path:
                inp = verdict.inputs[""]
                fired_default = inp.alarm is not None
                result.drift["default"].record(at, drift_onset, fired_default, post=False)
                if drift_post and inp.evidence:
                    t = result.drift["default"]
                    t.power_checks += 1
                    adj = inp.block_pvalue_adjusted
                    t.power_fires += int(adj is not None and adj <= plan.drift_alpha)
                psi_value, ks_p = inp.psi, inp.ks_pvalue
            else:
                need_ks = ks_trace.delay_hours is None or ks_trace.power_checks < POWER_CHECKS
                if need_ks:
                    both_tests = drift_tests(
                        baseline, current, tolerance=cfg.tolerance, smoothing=cfg.smoothing
                    )
                    psi_value, ks_p = both_tests.psi.statistic, both_tests.ks.pvalue
                else:
                    res = psi(baseline, current, tolerance=cfg.tolerance, smoothing=cfg.smoothing)
                    psi_value, ks_p = res.statistic, None
            if drift_post:
                post_drift_checks += 1
            if psi_value is not None:
                result.drift["psi>=0.1"].record(
                    at, drift_onset, psi_value >= NAIVE_PSI, post=drift_post
                )
            if ks_p is not None:
                ks_trace.record(at, drift_onset, ks_p < NAIVE_ALPHA, post=drift_post)
        # naive decay rules: one look per new evaluation run in the current window
        if o_key != last_naive_key and np.any(cur_present):
            last_naive_key = o_key
            cur_values = cur_means[cur_present]
            naive = stats.ttest_ind(cur_values, ref_values, equal_var=False, alternative="less")
            budget = stats.ttest_ind(
                cur_values + monitor.decay.margin,
                ref_values,
                equal_var=False,
                alternative="less",
            )
            result.decay["welch<0.05"].record(
                at, decay_onset, float(naive.pvalue) < NAIVE_ALPHA, post=decay_post
            )
            result.decay["welch@budget"].record(
                at, decay_onset, float(budget.pvalue) <= plan.decay_alpha, post=decay_post
            )
    result.seconds = time.perf_counter() - t_start
    return result


# --------------------------------------------------------------------------------------------
# summaries


def wilson_interval(
    successes: int, trials: int, *, z: float = 1.959963984540054
) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95 % by default).

    centre = (x + z²/2) / (n + z²), half-width = z sqrt(x (n - x) / n + z²/4) / (n + z²);
    (0, 1) when ``trials`` is 0.
    """
    if trials <= 0:
        return 0.0, 1.0
    n, x = float(trials), float(successes)
    denom = n + z * z
    centre = (x + z * z / 2.0) / denom
    half = z * math.sqrt(x * (n - x) / n + z * z / 4.0) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _quantile_delay(delays: Sequence[float | None], q: float) -> float:
    """Quantile of delays with misses as +inf (``np.inf`` when it falls on a miss)."""
    arr = np.sort(np.array([math.inf if d is None else d for d in delays], dtype=np.float64))
    if arr.size == 0:
        return math.nan
    idx = math.ceil(q * arr.size) - 1  # the lower empirical quantile: an observed delay or a miss
    return float(arr[max(idx, 0)])


def summarize(results: Iterable[MonthResult]) -> dict[str, Any]:
    """Aggregate month results into ``{schedule: {world: {side: {rule: figures}}}}``.

    figures: ``months``, ``any_false_alarm`` (count), ``p_false_alarm`` and ``wilson`` (95 %),
    ``false_alarms_per_month`` and its ``se``, ``detected`` (count after onset), ``median_delay_h``
    and ``p90_delay_h`` (inf: the quantile is a miss), ``power`` (mean over months of the
    per-month firing share of wholly-post-onset checks) and ``power_se``.
    """
    grouped: dict[tuple[str, str, str, str], list[RuleTrace]] = {}
    for r in results:
        for side, by_rule in (("drift", r.drift), ("decay", r.decay)):
            for rule, trace in by_rule.items():
                grouped.setdefault((r.schedule, r.world, side, rule), []).append(trace)
    out: dict[str, Any] = {}
    for (schedule, world, side, rule), traces in sorted(grouped.items()):
        n = len(traces)
        any_fa = sum(t.false_alarms > 0 for t in traces)
        counts = np.array([t.false_alarms for t in traces], dtype=np.float64)
        delays = [t.delay_hours for t in traces]
        shares = [t.power_fires / t.power_checks for t in traces if t.power_checks > 0]
        lo, hi = wilson_interval(any_fa, n)
        out.setdefault(schedule, {}).setdefault(world, {}).setdefault(side, {})[rule] = {
            "months": n,
            "any_false_alarm": any_fa,
            "p_false_alarm": any_fa / n,
            "wilson": [lo, hi],
            "false_alarms_per_month": float(counts.mean()),
            "se": float(counts.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
            "detected": sum(d is not None for d in delays),
            "median_delay_h": _quantile_delay(delays, 0.5),
            "p90_delay_h": _quantile_delay(delays, 0.9),
            "power": float(np.mean(shares)) if shares else math.nan,
            "power_se": float(np.std(shares, ddof=1) / math.sqrt(len(shares)))
            if len(shares) > 1
            else math.nan,
        }
    return out


def _fmt_delay(hours: float) -> str:
    if math.isnan(hours):
        return "n/a"
    if math.isinf(hours):
        return "miss"
    return f"{hours / 24:.1f}d" if hours >= 48 else f"{hours:.0f}h"


def _fmt_p(fig: Mapping[str, Any]) -> str:
    lo, hi = fig["wilson"]
    return f"{fig['p_false_alarm']:.3f} [{lo:.3f}, {hi:.3f}]"


def tables(summary: Mapping[str, Any], world_list: Sequence[World]) -> str:
    """Markdown tables of the summary (false alarms, then detection per effect size)."""
    lines: list[str] = []
    for schedule in summary:
        s = summary[schedule]
        lines += [
            f"### {schedule} checks: false alarms in 30 days",
            "",
            "| world | side | rule | P(any false alarm) [95 % Wilson] "
            "| false alarms / month (se) |",
            "|---|---|---|---|---|",
        ]
        for world in ("stationary", "decay_boundary"):
            if world not in s:
                continue
            for side, rules in (("drift", DRIFT_RULES), ("decay", DECAY_RULES)):
                if world == "decay_boundary" and side == "drift":
                    continue
                for rule in rules:
                    f = s[world][side][rule]
                    lines.append(
                        f"| {world} | {side} | {rule} | {_fmt_p(f)} | "
                        f"{f['false_alarms_per_month']:.2f} ({f['se']:.2f}) |"
                    )
        lines += [""]
        effects = [w for w in world_list if w.drift_onset is not None and w.name in s]
        for side, rules, size in (
            ("drift", DRIFT_RULES, "drift_strength"),
            ("decay", DECAY_RULES, "decay_size"),
        ):
            lines += [
                f"### {schedule} checks: {side} detection after onset (day 7 of the checks)",
                "",
                f"| {size} | rule | detected | median delay | p90 delay | single-check power (se) "
                "| false alarms before onset (P any) |",
                "|---|---|---|---|---|---|---|",
            ]
            for w in effects:
                value = getattr(w, size)
                for rule in rules:
                    f = s[w.name][side][rule]
                    lines.append(
                        f"| {value:g} | {rule} | {f['detected']}/{f['months']} | "
                        f"{_fmt_delay(f['median_delay_h'])} | {_fmt_delay(f['p90_delay_h'])} | "
                        f"{f['power']:.3f} ({f['power_se']:.3f}) | {f['p_false_alarm']:.3f} |"
                    )
            lines += [""]
    return "\n".join(lines)


def plot(summary: Mapping[str, Any], world_list: Sequence[World], directory: Path) -> list[Path]:
    """PNG plots: false-alarm probabilities, delay and power against effect size (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    schedules = list(summary)
    # 1. false alarms
    fig, axes = plt.subplots(1, len(schedules), figsize=(5.5 * len(schedules), 4), squeeze=False)
    for ax, schedule in zip(axes[0], schedules, strict=True):
        labels, values, errs = [], [], []
        for world, side, rules in (
            ("stationary", "drift", DRIFT_RULES),
            ("stationary", "decay", DECAY_RULES),
            ("decay_boundary", "decay", ("default", "welch@budget")),
        ):
            for rule in rules:
                f = summary[schedule][world][side][rule]
                tag = "boundary " if world == "decay_boundary" else ""
                labels.append(f"{tag}{side}\n{rule}")
                values.append(f["p_false_alarm"])
                lo, hi = f["wilson"]
                # Bars from the interval, clipped at 0: rounding can put a 0/n or n/n value a
                # hair outside its own interval (hi = 0.9999999999999999), and matplotlib
                # rejects negative error bars.
                errs.append((max(f["p_false_alarm"] - lo, 0.0), max(hi - f["p_false_alarm"], 0.0)))
        x = np.arange(len(values))
        colors = ["tab:green" if lab.endswith("default") else "tab:red" for lab in labels]
        ax.bar(x, values, color=colors, yerr=np.array(errs).T, capsize=3)
        ax.axhline(0.05, color="k", ls="--", lw=1, label="budget 5 %")
        ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("P(at least one false alarm in 30 days)")
        ax.set_title(f"{schedule} checks")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = directory / "detection_false_alarms.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    # 2. delay and power against effect size
    effects = [w for w in world_list if w.drift_onset is not None]
    for side, rules, size in (
        ("drift", DRIFT_RULES, "drift_strength"),
        ("decay", DECAY_RULES, "decay_size"),
    ):
        fig, axes = plt.subplots(
            2, len(schedules), figsize=(5.5 * len(schedules), 7), squeeze=False
        )
        for col, schedule in enumerate(schedules):
            xs = [getattr(w, size) for w in effects if w.name in summary[schedule]]
            for rule in rules:
                figs = [summary[schedule][w.name][side][rule] for w in effects]
                med = [min(f["median_delay_h"], PERIOD.days * 24) / 24 for f in figs]
                p90 = [min(f["p90_delay_h"], PERIOD.days * 24) / 24 for f in figs]
                line = axes[0][col].plot(xs, med, marker="o", label=f"{rule} median")[0]
                axes[0][col].plot(xs, p90, marker="x", ls=":", color=line.get_color())
                power = [f["power"] for f in figs]
                axes[1][col].plot(xs, power, marker="o", label=rule, color=line.get_color())
            axes[0][col].set_ylabel("days from onset to alarm (o median, x p90; top = missed)")
            axes[0][col].set_yscale("log")
            axes[0][col].set_title(f"{side}, {schedule} checks")
            axes[0][col].legend(fontsize=7)
            axes[1][col].set_ylabel("single-check power")
            axes[1][col].set_xlabel(size)
            axes[1][col].set_ylim(-0.02, 1.02)
            axes[1][col].legend(fontsize=7)
        fig.tight_layout()
        path = directory / f"detection_{side}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


# --------------------------------------------------------------------------------------------
# driver


def _task(args: tuple[int, int]) -> list[MonthResult]:
    month, seed = args
    out = []
    for world in worlds():
        for schedule in SCHEDULES.values():
            out.append(simulate_month(world, schedule, month, seed=seed))
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    return x


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--months", type=int, default=40, help="simulated months per world")
    parser.add_argument("--quick", action="store_true", help="8 months (a smoke run)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (at most 2)")
    parser.add_argument("--seed", type=int, default=20261130, help="base seed of the months")
    parser.add_argument("--plot-dir", type=Path, default=HERE / "out" / "detection")
    parser.add_argument("--json", type=Path, default=HERE / "out" / "detection" / "results.json")
    args = parser.parse_args(argv)
    months = 8 if args.quick else args.months
    if months < 1:
        parser.error(f"--months must be >= 1; got {months}")
    processes = max(1, min(2, args.processes))
    t0 = time.perf_counter()
    results: list[MonthResult] = []
    tasks = [(m, args.seed) for m in range(months)]
    labels = {v: k for k, v in SCHEDULES.items()}
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        for i, batch in enumerate(pool.imap_unordered(_task, tasks), start=1):
            for r in batch:
                r.schedule = labels[r.schedule]
            results.extend(batch)
            if i % max(1, months // 10) == 0 or i == months:
                print(f"  {i}/{months} months, {time.perf_counter() - t0:.0f} s", flush=True)
    elapsed = time.perf_counter() - t0
    summary = summarize(results)
    world_list = worlds()
    calls = sum(r.evaluate_calls for r in results)
    cpu = sum(r.seconds for r in results)
    print(
        f"\n{months} months x {len(world_list)} worlds x {len(SCHEDULES)} schedules, seed "
        f"{args.seed}, {SCORES_PER_HOUR:g} scores/hour: {elapsed:.0f} s wall on {processes} "
        f"process(es), {cpu:.0f} s in simulate_month, {calls} evaluate() calls "
        f"({1000 * cpu / max(calls, 1):.1f} ms per call incl. simulation)\n"
    )
    print(tables(summary, world_list))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            _jsonable(
                {
                    "months": months,
                    "seed": args.seed,
                    "scores_per_hour": SCORES_PER_HOUR,
                    "effects": [list(e) for e in EFFECTS],
                    "wall_seconds": elapsed,
                    "processes": processes,
                    "summary": summary,
                }
            ),
            indent=1,
        )
    )
    try:
        written = plot(summary, world_list, args.plot_dir)
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[plots]'): no plots", flush=True)
    else:
        print("plots: " + ", ".join(str(p) for p in written))
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
