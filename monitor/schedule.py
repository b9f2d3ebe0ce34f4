"""Durations and schedules, in UTC: ``"30s" | "15m" | "1h" | "1d" | "1w"`` or a 5-field cron string.

A check's evaluation time ``at`` is always a *slot* of its schedule, never the wall clock: for an
interval the slots are the multiples of the interval since the Unix epoch (``"1h"`` -> every hour on
the hour), for cron the times the expression matches. The daemon, ``monitor check`` and
``monitor backtest`` all ask this module for slots, so a past check can be replayed exactly.

Cron fields are ``minute hour day-of-month month day-of-week`` with ``*``, ``a``, ``a-b``, ``*/n``,
``a-b/n`` and comma lists; day-of-week 0 or 7 is Sunday (as in crontab(5)); when both day fields are
restricted, a day matches if either does (crontab(5) semantics).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["Schedule", "format_duration", "parse_duration", "parse_schedule"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# (low, high) for minute, hour, day of month, month, day of week
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_CRON_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")


def parse_duration(text: str) -> timedelta:
    """Parse ``"<number><unit>"`` with unit s, m, h, d or w into a positive ``timedelta``."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"must be a duration like '30s', '15m', '1h', '1d' or '1w'; got {text!r}")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"must be a positive duration; got {text!r}")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """The shortest exact ``parse_duration`` spelling of ``delta`` (e.g. ``"1h"``, ``"90m"``)."""
    seconds = delta.total_seconds()
    for unit in ("w", "d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds}s"


def _parse_cron_field(text: str, index: int) -> frozenset[int]:
    low, high = _CRON_RANGES[index]
    values: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) < 1:
                raise ValueError(f"{_CRON_NAMES[index]} step must be a positive integer")
            step = int(step_text)
        if part == "*":
            start, stop = low, high
        elif re.fullmatch(r"\d+-\d+", part):
            start, stop = (int(v) for v in part.split("-"))
        elif part.isdigit():
            start = stop = int(part)
            if step != 1:
                stop = high
        else:
            raise ValueError(f"{_CRON_NAMES[index]} field {text!r} is not understood")
        if not (low <= start <= stop <= high):
            raise ValueError(f"{_CRON_NAMES[index]} must lie in {low}-{high}; got {text!r}")
        values.update(range(start, stop + 1, step))
    if index == 4 and 7 in values:  # 7 is Sunday too
        values.discard(7)
        values.add(0)
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a monitor checks: every ``interval`` (epoch-aligned slots) or on a cron expression."""

    text: str
    interval: timedelta | None = None
    cron_fields: tuple[frozenset[int], ...] | None = None
    dom_restricted: bool = False
    dow_restricted: bool = False

    @property
    def is_cron(self) -> bool:
        """True for a cron schedule."""
        return self.cron_fields is not None

    def _matches(self, t: datetime) -> bool:
        assert self.cron_fields is not None
        minute, hour, dom, month, dow = self.cron_fields
        if t.minute not in minute or t.hour not in hour or t.month not in month:
            return False
        dom_ok = t.day in dom
        dow_ok = (t.isoweekday() % 7) in dow
        if self.dom_restricted and self.dow_restricted:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def latest_slot(self, now: datetime) -> datetime:
        """The latest slot at or before ``now`` (UTC-aware)."""
        now = _utc(now)
        if self.interval is not None:
            step = self.interval.total_seconds()
            elapsed = (now - _EPOCH).total_seconds()
            return _EPOCH + timedelta(seconds=(elapsed // step) * step)
        t = now.replace(second=0, microsecond=0)
        for _ in range(366 * 24 * 60):
            if self._matches(t):
                return t
            t -= timedelta(minutes=1)
        raise ValueError(f"cron schedule {self.text!r} matches no time in the past year")

    def next_slot(self, after: datetime) -> datetime:
        """The first slot strictly after ``after``."""
        after = _utc(after)
        if self.interval is not None:
            return self.latest_slot(after) + self.interval
        t = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
        for _ in range(366 * 24 * 60):
            if self._matches(t):
                return t
            t += timedelta(minutes=1)
        raise ValueError(f"cron schedule {self.text!r} matches no time in the next year")

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
        """Number of slots in a period (for cron: counted over the period starting 2026-01-01)."""
        if self.interval is not None:
            return max(1, int(period.total_seconds() // self.interval.total_seconds()))
        start = datetime(2026, 1, 1, tzinfo=UTC)
        return max(1, len(self.slots(start, start + period - timedelta(seconds=1))))

    def nominal_interval(self, period: timedelta = timedelta(days=30)) -> timedelta:
        """The interval for an interval schedule; for cron, the period divided by its slot count."""
        if self.interval is not None:
            return self.interval
        return period / self.checks_per(period)


def parse_schedule(text: str) -> Schedule:
    """Parse an interval (``"1h"``) or a 5-field cron expression (``"0 * * * *"``), both in UTC."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"must be an interval like '1h' or a 5-field cron string; got {text!r}")
    fields = text.split()
    if len(fields) == 1:
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
    return Schedule(
        text=text,
        cron_fields=parsed,
        dom_restricted=fields[2] != "*",
        dow_restricted=fields[4] != "*",
    )


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError(f"datetime must be timezone-aware; got naive {t.isoformat()}")
    return t.astimezone(UTC)
