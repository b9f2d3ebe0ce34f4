"""Durations and schedules, in UTC: ``"30s" | "15m" | "1h" | "1d" | "1w"`` or a 5-field cron string.

A check's evaluation time ``at`` is always a *slot* of its schedule, never the wall clock: for an
interval the slots are the multiples of the interval since the Unix epoch (``"1h"`` -> every hour on
the hour), for cron the times the expression matches. The daemon, ``monitor check`` and
``monitor backtest`` all ask this module for slots, so a past check can be replayed exactly.

Cron follows crontab(5): fields ``minute hour day-of-month month day-of-week`` with ``*``, ``a``,
``a-b``, ``*/n``, ``a-b/n`` and comma lists; month names ``JAN``-``DEC`` and weekday names
``SUN``-``SAT`` (any case, in ranges and lists too); day-of-week 0 or 7 is Sunday; the macros
``@hourly``, ``@daily`` / ``@midnight``, ``@weekly``, ``@monthly``, ``@yearly`` / ``@annually``.
When both day fields are restricted (neither starts with ``*``), a day matches if either does;
otherwise it must match both. 29 February fires in leap years only; an expression that can never
fire (``0 0 30 2 *``) is refused when parsed. Slots are found field by field (the next allowed
month, then day, hour and minute), never by scanning minutes, so a yearly schedule's previous slot
costs microseconds.
"""

from __future__ import annotations

import bisect
import calendar
import functools
import itertools
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

__all__ = [
    "Schedule",
    "cron_walk",
    "format_duration",
    "parse_duration",
    "parse_rfc3339",
    "parse_schedule",
]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw])\s*$")  # ASCII digits only
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# (low, high) for minute, hour, day of month, month, day of week
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_CRON_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# Field index -> {name: number}: months 1-12, weekdays 0-6 (Sunday is 0; 7 is Sunday too).
_FIELD_NAMES: dict[int, dict[str, int]] = {
    3: {name: i + 1 for i, name in enumerate(_MONTH_NAMES)},
    4: {name: i for i, name in enumerate(_DAY_NAMES)},
}
# crontab(5)'s "@" shorthands, as the 5-field expressions they stand for.
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Longest day of each month in any year (29 February exists in leap years).
_MONTH_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# A valid expression fires at least once in every 400-year Gregorian cycle (the calendar repeats
# with its weekdays after 400 years), so a search that passes this many years has a bug.
_SEARCH_YEARS = 401
_MICROSECOND = timedelta(microseconds=1)
_WALK_START = datetime(2026, 1, 1, tzinfo=UTC)  # where cron_walk (and the slot counts) begin
# The longest duration a setting may have. A check computes ``at - window`` and ``at + interval``
# and its data's timestamps are int64 nanoseconds (1677-2262): every window, period, timeout and
# interval longer than a century is a typo that would once overflow at the first check or
# backtest (``windows.reference = "1000000d"`` passed `validate`, then crashed `check`).
LONGEST = timedelta(days=36525)


def parse_rfc3339(text: str) -> datetime:
    """An RFC 3339 time, ``Z`` or ``z`` for UTC (without an offset: a naive time, which the
    caller refuses or reads as UTC); ``ValueError`` otherwise. Every ``z`` becomes an offset,
    so a second suffix is refused (``fromisoformat`` alone takes ``"00:00z+00:00"``)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))


def parse_duration(text: str, *, zero: bool = False) -> timedelta:
    """Parse ``"<number><unit>"`` with unit s, m, h, d or w into a positive ``timedelta`` of
    at most ``LONGEST`` (100 years); with ``zero``, a zero of any unit is 0."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if zero and match is not None and float(match.group(1)) == 0:
        return timedelta(0)
    if match is None:
        raise ValueError(f"must be a duration like '30s', '15m', '1h', '1d' or '1w'; got {text!r}")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds > LONGEST.total_seconds():
        raise ValueError(f"must be at most 36525d (100 years); got {text!r}")
    delta = timedelta(seconds=seconds)  # rounded to the microsecond
    if delta <= timedelta(0):  # a positive number under half a microsecond rounds to zero
        raise ValueError(f"must be a positive duration (at least 1 microsecond); got {text!r}")
    return delta


def format_duration(delta: timedelta) -> str:
    """The shortest exact ``parse_duration`` spelling of ``delta`` (e.g. ``"1h"``, ``"90m"``)."""
    seconds = delta.total_seconds()
    for unit in ("w", "d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds}s"


def _cron_number(text: str, index: int, whole: str) -> int:
    """One value of a cron field: digits, or (month, day-of-week) a 3-letter English name."""
    if text.isascii() and text.isdigit():  # not '٣' or '³', which str.isdigit accepts
        return int(text)
    names = _FIELD_NAMES.get(index)
    if names is not None and text.upper() in names:
        return names[text.upper()]
    allowed = {3: ", a name JAN-DEC", 4: ", a name SUN-SAT"}.get(index, "")
    raise ValueError(
        f"{_CRON_NAMES[index]} field {whole!r} is not understood "
        f"(expected *, a number{allowed}, a-b, */n, a-b/n or a comma list)"
    )


def _parse_cron_field(text: str, index: int) -> frozenset[int]:
    low, high = _CRON_RANGES[index]
    values: set[int] = set()
    for part in text.split(","):
        step, stepped = 1, "/" in part
        if stepped:
            part, step_text = part.split("/", 1)
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) < 1:
                raise ValueError(f"{_CRON_NAMES[index]} step must be a positive integer")
            step = int(step_text)
        if part == "*":
            start, stop = low, high
        elif "-" in part:
            first, _, last = part.partition("-")
            start, stop = _cron_number(first, index, text), _cron_number(last, index, text)
        else:
            start = stop = _cron_number(part, index, text)
            if stepped:
                # "a/n" means "a-<last>/n" (crontab(5) leaves it undefined; cronie and croniter
                # read it so). In day-of-week 7 is Sunday, 0, and the week ends on Saturday, 6.
                if index == 4:
                    start, stop = (0 if start == 7 else start), 6
                else:
                    stop = high
        if not (low <= start <= high and low <= stop <= high):
            raise ValueError(f"{_CRON_NAMES[index]} must lie in {low}-{high}; got {text!r}")
        if start > stop:
            raise ValueError(
                f"{_CRON_NAMES[index]} range {part!r} runs backwards (write it as a list, "
                f"e.g. 'a-{high},{low}-b'); got {text!r}"
            )
        values.update(range(start, stop + 1, step))
    if index == 4 and 7 in values:  # 7 is Sunday too
        values.discard(7)
        values.add(0)
    return frozenset(values)


def _days_in_month(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a monitor checks: every ``interval`` (epoch-aligned slots) or on a cron expression.

    For cron, ``cron_fields`` holds the allowed minutes, hours, days of month, months and days of
    week (0 = Sunday); ``dom_restricted`` / ``dow_restricted`` say whether a day field is restricted
    in crontab(5)'s sense (its text does not start with ``*``), which decides whether a day must
    match both day fields or either.
    """

    text: str
    interval: timedelta | None = None
    cron_fields: tuple[frozenset[int], ...] | None = None
    dom_restricted: bool = False
    dow_restricted: bool = False
    _sorted: tuple[tuple[int, ...], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.cron_fields is not None:
            object.__setattr__(self, "_sorted", tuple(tuple(sorted(f)) for f in self.cron_fields))

    @property
    def is_cron(self) -> bool:
        """True for a cron schedule."""
        return self.cron_fields is not None

    def _day_matches(self, year: int, month: int, day: int) -> bool:
        assert self.cron_fields is not None
        dom_ok = day in self.cron_fields[2]
        dow_ok = (date(year, month, day).isoweekday() % 7) in self.cron_fields[4]
        if self.dom_restricted and self.dow_restricted:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def _first_at_or_after(self, t: datetime) -> datetime:
        """The first matching minute at or after ``t`` (minute-aligned), field by field.

        Each step jumps to the next allowed month, then day, then hour, then minute; when a field
        has no allowed value left, the next coarser field advances and the finer ones restart.
        """
        minutes, hours, _, months, _ = self._sorted
        year, month, day, hour, minute = t.year, t.month, t.day, t.hour, t.minute
        while year <= t.year + _SEARCH_YEARS:
            i = bisect_left(months, month)
            if i == len(months):
                year, month, day, hour, minute = year + 1, months[0], 1, 0, 0
                continue
            if months[i] != month:
                month, day, hour, minute = months[i], 1, 0, 0
            last = _days_in_month(year, month)
            while day <= last and not self._day_matches(year, month, day):
                day, hour, minute = day + 1, 0, 0
            if day > last:
                month, day, hour, minute = month + 1, 1, 0, 0
                continue
            i = bisect_left(hours, hour)
            if i == len(hours):
                day, hour, minute = day + 1, 0, 0
                continue
            if hours[i] != hour:
                hour, minute = hours[i], 0
            i = bisect_left(minutes, minute)
            if i == len(minutes):
                hour, minute = hour + 1, 0
                continue
            return datetime(year, month, day, hour, minutes[i], tzinfo=UTC)
        raise ValueError(f"cron schedule {self.text!r} matches no time after {t.isoformat()}")

    def _last_at_or_before(self, t: datetime) -> datetime:
        """The last matching minute at or before ``t`` (minute-aligned): the mirror image."""
        minutes, hours, _, months, _ = self._sorted
        year, month, day, hour, minute = t.year, t.month, t.day, t.hour, t.minute
        while year >= t.year - _SEARCH_YEARS:
            i = bisect_right(months, month)
            if i == 0:
                year, month, day, hour, minute = year - 1, months[-1], 31, 23, 59
                continue
            if months[i - 1] != month:
                month, day, hour, minute = months[i - 1], 31, 23, 59
            day = min(day, _days_in_month(year, month))  # 31 stands for "the last day"
            while day >= 1 and not self._day_matches(year, month, day):
                day, hour, minute = day - 1, 23, 59
            if day < 1:
                month, day, hour, minute = month - 1, 31, 23, 59
                continue
            i = bisect_right(hours, hour)
            if i == 0:
                day, hour, minute = day - 1, 23, 59
                continue
            if hours[i - 1] != hour:
                hour, minute = hours[i - 1], 59
            i = bisect_right(minutes, minute)
            if i == 0:
                hour, minute = hour - 1, 59
                continue
            return datetime(year, month, day, hour, minutes[i - 1], tzinfo=UTC)
        raise ValueError(f"cron schedule {self.text!r} matches no time before {t.isoformat()}")

    def latest_slot(self, now: datetime) -> datetime:
        """The latest slot at or before ``now`` (UTC-aware)."""
        now = _utc(now)
        if self.interval is not None:  # in whole microseconds: exact for any interval
            # (in float seconds, 1.1s slots floored to the slot before, and next_slot of a
            # slot returned the slot itself: a replay never ended)
            step = self.interval // _MICROSECOND
            elapsed = (now - _EPOCH) // _MICROSECOND
            return _EPOCH + (elapsed // step) * step * _MICROSECOND
        return self._last_at_or_before(now.replace(second=0, microsecond=0))

    def next_slot(self, after: datetime) -> datetime:
        """The first slot strictly after ``after``."""
        after = _utc(after)
        if self.interval is not None:
            return self.latest_slot(after) + self.interval
        return self._first_at_or_after(
            after.replace(second=0, microsecond=0) + timedelta(minutes=1)
        )

    def slots(self, start: datetime, end: datetime) -> list[datetime]:
        """All slots in ``[start, end]`` in order."""
        out: list[datetime] = []
        t = self.latest_slot(start)
        if t < _utc(start):
            t = self.next_slot(t)
        end = _utc(end)
        while t <= end:
            out.append(t)
            t = self.next_slot(t)
        return out

    def checks_per(self, period: timedelta) -> int:
        """The most slots any half-open ``period`` holds: for an interval, ceil(period /
        interval) (one that starts on a slot holds the slot a whole interval past it too
        when the interval does not divide the period: "1w" checks 5 times in some 30 days,
        and was counted 4, overspending the budget); for cron, the most of a year's."""
        if self.interval is not None:
            step = self.interval // timedelta(microseconds=1)  # exact integers: no float floor
            return max(1, -(-(period // timedelta(microseconds=1)) // step))
        return _cron_checks(self, period)

    def nominal_interval(self, period: timedelta = timedelta(days=30)) -> timedelta:
        """The interval for an interval schedule; for cron, the period divided by its slot count."""
        if self.interval is not None:
            return self.interval
        return period / self.checks_per(period)

    def longest_gap(self) -> timedelta:
        """The longest time between two consecutive slots: the interval, or for cron the
        longest gap from 2026-01-01 over 400 days or 20,000 slots, whichever ends first (a
        weekday schedule's weekend, a daytime one's night; 400 days hold every monthly and
        yearly pattern but 29 February's, whose longest gap is itself past 400 days)."""
        if self.interval is not None:
            return self.interval
        return _cron_longest_gap(self)


@functools.lru_cache(maxsize=1024)
def cron_walk(schedule: Schedule) -> tuple[datetime, ...]:
    """A cron schedule's slots from 2026-01-01 (that instant included): those of the next 400
    days and the first one past them, at most 20,002 (the walk the longest gap and the bucket
    check of ``validate`` share; cached, as a reload asks again)."""
    start = _WALK_START
    end = start + timedelta(days=400)
    slots = [schedule.next_slot(start - _MICROSECOND)]
    for _ in range(20_001):
        slots.append(schedule.next_slot(slots[-1]))
        if slots[-1] > end:
            break
    return tuple(slots)


def _cron_longest_gap(schedule: Schedule) -> timedelta:
    walk = cron_walk(schedule)
    if walk[0] == _WALK_START:  # the gaps from the first slot after the walk's start
        walk = walk[1:]
    return max(b - a for a, b in itertools.pairwise(walk[:20_001]))


_COUNT_WALK = 50_000  # slots walked to find a cron's busiest period (not whole days)
_CALENDAR_DAYS = 28 * 366  # the Gregorian weekdays of every date repeat within 28 years


@functools.lru_cache(maxsize=1024)
def _cron_checks(schedule: Schedule, period: timedelta) -> int:
    """The most slots of a cron schedule in any half-open ``period`` (cached: each check's plan
    asks). A period of whole days (the budget's 30d): every day that fires holds the same
    slots (the minute and hour fields do not depend on the day), and such a period starting
    at any time holds at most as many as the best one starting at a midnight, so the days
    that fire are counted over 28 years (every weekday of every date, leap days included:
    ``0 * 13 * 5``, the 13th or a Friday, has its busiest month in none of 2026's). Else the
    densest window starting at a slot, over the slots of a year and a period from 2026-01-01
    (at most ``_COUNT_WALK``; a denser one is counted from its first slot). A schedule quiet in
    January (``0 * * 3-11 *``) checks hourly from March: its alarm budget is spread over 720
    checks a 30-day period, not 1."""
    whole = period % timedelta(days=1) == timedelta(0)
    span = -(-period // timedelta(days=1)) + 1  # the calendar days a period can touch
    if schedule.cron_fields is not None and (whole or span <= _PATTERN_DAYS):
        days = period // timedelta(days=1) if whole else span
        per_day = len(schedule.cron_fields[0]) * len(schedule.cron_fields[1])
        months = schedule.cron_fields[3]
        day = _WALK_START
        fires = []
        for _ in range(_CALENDAR_DAYS + days):
            fires.append(
                day.month in months and schedule._day_matches(day.year, day.month, day.day)
            )
            day += timedelta(days=1)
        if not whole:
            return max(1, _densest_days(schedule, period, fires, span))
        held = best = sum(fires[:days])
        for k in range(days, len(fires)):  # the window of days [k - days + 1, k]
            held += fires[k] - fires[k - days]
            best = max(best, held)
        return max(1, per_day * best)
    end = _WALK_START + timedelta(days=366) + period
    walk = [schedule.next_slot(_WALK_START - _MICROSECOND)]
    while walk[-1] <= end and len(walk) < _COUNT_WALK:
        walk.append(schedule.next_slot(walk[-1]))
    last = walk[-1]
    best = 0
    for i, t in enumerate(walk):
        if t + period > last:  # windows reaching past the walk are not all counted
            break
        best = max(best, bisect.bisect_left(walk, t + period, lo=i) - i)
    if best == 0:  # dense: the walk held less than a period
        first = walk[0]
        best = len(schedule.slots(first, first + period - _MICROSECOND))
    return max(1, best)


_PATTERN_DAYS = 32  # a period of other than whole days is counted by day patterns up to this


def _densest_days(schedule: Schedule, period: timedelta, fires: list[bool], span: int) -> int:
    """The most slots of a cron schedule in a half-open ``period`` that is not whole days: such
    a period starting in a day touches that day and the next ``span - 1``, and the times of
    day that fire are the same on every day that does, so the densest window is found on
    each distinct run of ``span`` firing flags of the 28-year calendar (the leap years' 29
    February included: walking 2026 alone missed ``0 */12 28,29 2 *``'s three slots in 36
    hours), starting at a slot of its first day."""
    assert schedule.cron_fields is not None
    minute_of_day = sorted(
        h * 60 + m for h in schedule.cron_fields[1] for m in schedule.cron_fields[0]
    )
    window = period // timedelta(minutes=1) + (period % timedelta(minutes=1) > timedelta(0))
    best = 0
    seen: set[tuple[bool, ...]] = set()
    for k in range(len(fires) - span + 1):
        pattern = tuple(fires[k : k + span])
        if not pattern[0] or pattern in seen:
            continue
        seen.add(pattern)
        times = [d * 1440 + m for d in range(span) if pattern[d] for m in minute_of_day]
        for i, t in enumerate(times[: len(minute_of_day)]):  # a start in the first day
            best = max(best, bisect.bisect_left(times, t + window, lo=i) - i)
    return best


def _never_fires(
    fields: tuple[frozenset[int], ...], dom_restricted: bool, dow_restricted: bool
) -> bool:
    """True when no date matches: only a day of month that none of the months has can do that.

    With both day fields restricted a day matches if either does, and every month has each
    weekday. Otherwise a day must be in the day-of-month set (and the weekday set): each date that
    exists falls on every weekday within 28 years (29 February within 28 leap years), so the
    expression fires if and only if some allowed month has one of the allowed days.
    """
    if dom_restricted and dow_restricted:
        return False
    _, _, days, months, _ = fields
    return not any(day <= _MONTH_MAX_DAYS[month - 1] for month in months for day in days)


def parse_schedule(text: str) -> Schedule:
    """Parse an interval (``"1h"``), a 5-field cron expression (``"0 * * * *"``) or a macro.

    Cron follows crontab(5), in UTC: fields ``minute hour day-of-month month day-of-week`` with
    ``*``, ``a``, ``a-b``, ``*/n``, ``a-b/n``, ``a/n`` (``a-<max>/n``) and comma lists; months
    ``JAN``-``DEC`` and weekdays ``SUN``-``SAT`` by name too (any case, also in ranges); 0 and 7
    are Sunday; the macros ``@hourly``, ``@daily`` (``@midnight``), ``@weekly``, ``@monthly`` and
    ``@yearly`` (``@annually``). When both day fields are restricted (neither starts with ``*``) a
    day matches if either does, otherwise it must match both. An expression that can never fire
    (``0 0 30 2 *``) is a ``ValueError``.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"must be an interval like '1h' or a 5-field cron string; got {text!r}")
    fields = text.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        expanded = _MACROS.get(fields[0].lower())
        if expanded is None:
            raise ValueError(
                f"cron macro {fields[0]!r} is not supported; use one of {', '.join(_MACROS)}"
            )
        fields = expanded.split()
    elif len(fields) == 1:
        interval = parse_duration(text)
        if interval < timedelta(seconds=1):
            raise ValueError(f"interval must be at least 1s; got {text!r}")
        return Schedule(text=text, interval=interval)
    if len(fields) != 5:
        raise ValueError(
            f"must be an interval like '1h' or a 5-field cron string "
            f"(minute hour day-of-month month day-of-week); got {text!r}"
        )
    parsed = tuple(_parse_cron_field(f, i) for i, f in enumerate(fields))
    dom_restricted = not fields[2].startswith("*")
    dow_restricted = not fields[4].startswith("*")
    if _never_fires(parsed, dom_restricted, dow_restricted):
        raise ValueError(
            f"cron schedule {text!r} never fires: no month it allows has a day-of-month it allows"
        )
    return Schedule(
        text=text,
        cron_fields=parsed,
        dom_restricted=dom_restricted,
        dow_restricted=dow_restricted,
    )


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError(f"datetime must be timezone-aware; got naive {t.isoformat()}")
    return t.astimezone(UTC)
