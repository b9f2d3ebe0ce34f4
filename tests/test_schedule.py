"""Durations, interval and cron slots (UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.schedule import format_duration, parse_duration, parse_schedule

T0 = datetime(2026, 11, 30, 10, 17, 42, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("15m", 900), ("1h", 3600), ("1d", 86400), ("1w", 604800), ("1.5h", 5400)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "5", "-5m", "0s", "1y", "h", "1 hour", "1h30m"])
def test_parse_duration_iv(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@given(st.integers(min_value=1, max_value=10**7))
def test_format_duration_round_trips(seconds: int) -> None:
    delta = timedelta(seconds=seconds)
    assert parse_duration(format_duration(delta)) == delta


def test_interval_slots_are_epoch_aligned() -> None:
    s = parse_schedule("1h")
    assert s.latest_slot(T0) == datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert s.next_slot(T0) == datetime(2026, 11, 30, 11, tzinfo=UTC)
    slot = datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert s.latest_slot(slot) == slot
    assert s.next_slot(slot) == slot + timedelta(hours=1)
    assert s.checks_per(timedelta(days=30)) == 720
    assert parse_schedule("1d").checks_per(timedelta(days=30)) == 30


def test_slots_inclusive_range() -> None:
    s = parse_schedule("6h")
    start = datetime(2026, 11, 30, tzinfo=UTC)
    slots = s.slots(start, start + timedelta(days=1))
    assert slots == [start + timedelta(hours=6 * k) for k in range(5)]


def test_cron_every_hour_matches_interval() -> None:
    cron, interval = parse_schedule("0 * * * *"), parse_schedule("1h")
    start = datetime(2026, 11, 1, tzinfo=UTC)
    end = start + timedelta(days=3)
    assert cron.slots(start, end) == interval.slots(start, end)
    assert cron.checks_per(timedelta(days=30)) == 720
    assert cron.nominal_interval() == timedelta(hours=1)


def test_cron_fields() -> None:
    s = parse_schedule("*/15 9-17 * * 1-5")  # every 15 min, 9-17h, Monday to Friday
    saturday = datetime(2026, 11, 28, 12, tzinfo=UTC)
    assert saturday.isoweekday() == 6
    monday_nine = datetime(2026, 11, 30, 9, tzinfo=UTC)
    assert s.next_slot(saturday) == monday_nine
    assert s.next_slot(monday_nine) == monday_nine + timedelta(minutes=15)
    assert s.latest_slot(datetime(2026, 11, 30, 17, 59, tzinfo=UTC)) == datetime(
        2026, 11, 30, 17, 45, tzinfo=UTC
    )


def test_cron_sunday_is_0_and_7() -> None:
    for text in ("0 3 * * 0", "0 3 * * 7"):
        slot = parse_schedule(text).next_slot(T0)
        assert slot == datetime(2026, 12, 6, 3, tzinfo=UTC)
        assert slot.isoweekday() == 7


def test_cron_day_fields_or_semantics() -> None:
    # crontab(5): with both day fields restricted, either may match
    s = parse_schedule("0 0 1 * 1")
    slots = s.slots(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    days = [t.day for t in slots]
    assert days == [1, 2, 9, 16, 23, 30, 1]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "interval"),
        ("* * * *", "5-field"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day-of-month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day-of-week"),
        ("*/0 * * * *", "step"),
        ("a * * * *", "minute"),
        ("0s", "positive"),
    ],
)
def test_parse_schedule_iv(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_schedule(text)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_schedule("1h").latest_slot(datetime(2026, 11, 30))
