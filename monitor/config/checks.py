"""Checks across the settings of one monitor: values valid one by one that cannot work together
(a window shorter than the schedule interval, a bucket a cron time falls inside, a false-alarm
budget whose decay test needs more permutation resamples than ``MAX_RESAMPLES``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from monitor.config.fields import _Collector
from monitor.config.model import (
    BudgetConfig,
    DecayConfig,
    DriftConfig,
    EngineConfig,
    WindowConfig,
    _seasonal_mode,
    look_cadence,
)
from monitor.schedule import Schedule, cron_walk, format_duration


def _check_buckets(
    c: _Collector,
    path: str,
    engine: EngineConfig,
    schedule: Schedule,
    windows: WindowConfig,
    drift: DriftConfig,
) -> None:
    """Checks through summaries add whole buckets: the slots and every window bound must fall
    on bucket boundaries (epoch-aligned), and phase-matched blocks need buckets within an hour."""
    b = engine.bucket
    text = format_duration(b)
    if schedule.interval is not None:
        if schedule.interval % b:
            c.add(
                f"{path}.schedule",
                f"the interval {format_duration(schedule.interval)} is not a multiple of "
                f"engine.summary.bucket {text}: checks would end inside a bucket",
            )
    else:
        for slot in _cron_times(schedule, b):
            if (slot - _EPOCH) % b:
                c.add(
                    f"{path}.schedule",
                    f"fires at {slot:%H:%M}, inside a bucket of engine.summary.bucket {text}: "
                    "every cron time must be a bucket boundary",
                )
                break
    for key, value in (
        ("windows.current", windows.current),
        ("windows.reference", windows.reference),
        ("windows.gap", windows.gap),
        ("drift.settle", drift.settle),  # a block's end: a bucket boundary
    ):
        if value is not None and value % b:
            c.add(
                f"{path}.{key}",
                f"{format_duration(value)} is not a multiple of engine.summary.bucket {text}",
            )
    for key, at in (
        ("reference_start", windows.reference_start),
        ("reference_end", windows.reference_end),
    ):
        if at is not None and (at - _EPOCH) % b:
            c.add(
                f"{path}.windows.{key}",
                f"{at.isoformat()} is not on a boundary of engine.summary.bucket {text}",
            )
    if _seasonal_mode(drift.seasonality, windows.reference_span) != "none" and (
        timedelta(hours=1) % b
    ):
        c.add(
            f"{path}.drift.seasonality",
            f"phase-matched blocks (hour of day or week) need engine.summary.bucket to divide "
            f"1h; got {text} (or set drift.seasonality = 'none')",
        )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _check_windows(
    c: _Collector,
    path: str,
    windows: WindowConfig,
    drift: DriftConfig,
    decay: DecayConfig,
    interval: timedelta,
    *,
    schedule_is_cron: bool = False,
) -> None:
    """Settings that cannot work: say why instead of failing (or misleading) at run time.

    (A cron schedule's slots are irregular; a window shorter than its mean gap is a deliberate
    sample, so only interval schedules are held to the rule.)
    """
    if windows.current < interval and not schedule_is_cron:
        c.add(
            f"{path}.windows.current",
            f"{format_duration(windows.current)} is shorter than the schedule interval "
            f"{format_duration(interval)}: scores between two checks would never be seen; use "
            f"at least {format_duration(interval)}",
        )
    if drift.settle >= windows.current:
        c.add(
            f"{path}.drift.settle",
            f"{format_duration(drift.settle)} is not shorter than windows.current "
            f"{format_duration(windows.current)}: no evidence block would ever end inside the "
            "window",
        )
    span = windows.reference_span
    for mode, period in (("daily", timedelta(days=1)), ("weekly", timedelta(days=7))):
        if drift.seasonality == mode and span < period:
            c.add(
                f"{path}.drift.seasonality",
                f"'{mode}' needs a reference of at least {format_duration(period)} (one of each "
                f"phase); the reference spans {format_duration(span)}",
            )
    if decay.run_gap <= decay.settle:
        c.add(
            f"{path}.decay.run_gap",
            f"must be longer than decay.settle ({format_duration(decay.settle)}): a run is "
            f"complete once no outcome arrived for `settle`",
        )


# The most resamples one decay test may draw: about 1.3 s per segment at 2,000 pairs on one core
# with sign flips, about 12x that with run labels (docs/configuration.md). Without it,
# `budget.decay = 1e-6` asks for 6e8 and a check runs for minutes.
MAX_RESAMPLES = 1_000_000
_MAX_BUDGET_DECAY = 0.5  # budget.decay's own upper limit (parse.py)
_MAX_RESAMPLES = MAX_RESAMPLES


def _implied_resamples(schedule: Schedule, decay: DecayConfig, budget: BudgetConfig) -> int:
    """The permutation resample count a monitor's decay test will use.

    ``decay.n_resamples`` or ``max(9999, ceil(20 / alpha))`` with the alpha of a look one cadence
    after the previous, ``alpha = budget.decay * cadence / (period + cadence)`` (``cadence =
    period / decay.looks`` when looks are given): the same numbers as ``verdict.alarm_plan`` (a
    test keeps the two equal), so that ``validate`` can refuse what a check could not finish.
    A look sooner after the previous spends less alpha; its resamples are capped at
    ``MAX_RESAMPLES`` (such a look can then not reject, which only costs power).
    """
    del schedule
    return decay.n_resamples or max(9999, math.ceil(20.0 / _nominal_alpha(decay, budget)))


def _nominal_alpha(decay: DecayConfig, budget: BudgetConfig) -> float:
    cadence = look_cadence(decay, budget)
    return budget.decay * (cadence / (budget.period + cadence))


def _check_resamples(
    c: _Collector, path: str, schedule: Schedule, decay: DecayConfig, budget: BudgetConfig
) -> None:
    n = _implied_resamples(schedule, decay, budget)
    alpha = _nominal_alpha(decay, budget)
    if decay.n_resamples is not None and (decay.n_resamples + 1) * alpha < 1.0:
        c.add(
            f"{path}.decay.n_resamples",
            f"gives a smallest p of 1/(R+1) = {1.0 / (decay.n_resamples + 1):.3g}, above the "
            f"look alpha {alpha:.3g} (a look one decay.cadence after the previous): no decay "
            f"could ever be raised; use at least {math.ceil(20.0 / alpha):,} (20 / alpha) or "
            f"leave it unset; got {decay.n_resamples:,}",
        )
        return
    if n <= _MAX_RESAMPLES:
        return
    if decay.n_resamples is not None:
        c.add(
            f"{path}.decay.n_resamples",
            f"must be at most {_MAX_RESAMPLES:,} (the resample cap); got {n:,}",
        )
        return
    enough = _fitting_decay(schedule, decay, budget)
    fewer = "lower decay.looks" if decay.looks else "lengthen decay.cadence"
    remedy = (
        f"raise budget.decay to at least {enough!r} or {fewer}"
        if enough <= _MAX_BUDGET_DECAY
        else f"{fewer} (no budget.decay up to {_MAX_BUDGET_DECAY} fits)"
    )
    c.add(
        f"{path}.budget.decay",
        f"implies {n:,} permutation resamples per check (ceil(20 / alpha), alpha = "
        f"{alpha:.3g} per look one decay cadence after the previous), above the cap of "
        f"{_MAX_RESAMPLES:,}; {remedy}; got {budget.decay!r}",
    )


def _fitting_decay(schedule: Schedule, decay: DecayConfig, budget: BudgetConfig) -> float:
    """The smallest ``budget.decay`` of two significant digits whose implied resamples are
    within the cap: the bound ``20 / cap * budget.decay / alpha`` rounded up, then checked
    with ``_implied_resamples`` itself (at the bound, ``20 / alpha`` can land a rounding error
    above the cap: 0.00062 over a daily cadence implies 1,000,001)."""
    lowest = 20.0 / _MAX_RESAMPLES * (budget.decay / _nominal_alpha(decay, budget))
    exponent = math.floor(math.log10(lowest)) - 1
    digits = math.ceil(round(lowest / 10.0**exponent, 9))
    while True:
        candidate = float(f"{digits}e{exponent}")
        fits = replace(budget, decay=candidate)
        if _implied_resamples(schedule, decay, fits) <= _MAX_RESAMPLES:
            return candidate
        digits += 1


def _cron_times(schedule: Schedule, bucket: timedelta) -> list[datetime]:
    """Times a cron schedule fires at, enough to tell whether each is on a bucket boundary.
    A bucket that divides a day sees only the time of day: every allowed hour and minute
    (whatever the days: a time that fires only in June once passed a check of 35 days from
    1 January). Otherwise the slots of 400 days (at most 20,000) and the first past them (a
    29 February slot is first met in 2028)."""
    day = datetime(2026, 1, 1, tzinfo=UTC)
    if schedule.cron_fields is not None and timedelta(days=1) % bucket == timedelta(0):
        minutes, hours = schedule.cron_fields[0], schedule.cron_fields[1]
        return [day.replace(hour=h, minute=m) for h in sorted(hours) for m in sorted(minutes)]
    return list(cron_walk(schedule))
