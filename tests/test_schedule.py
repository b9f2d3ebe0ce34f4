"""Durations, interval and cron slots (UTC); cron checked against croniter."""

from __future__ import annotations

import bisect
import itertools
from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter
from hypothesis import assume, given, settings
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


@given(
    step=st.integers(min_value=1, max_value=7 * 24 * 3600),
    at=st.integers(min_value=0, max_value=10**10 * 10**6),
)
def test_the_latest_interval_slot_is_never_after_the_time(step: int, at: int) -> None:
    """latest_slot(t) <= t < latest_slot(t) + interval, for any interval and any time (in
    microseconds): a rounding to the nearest slot gave 13:00 at 12:40, a check of the future."""
    s = parse_schedule(f"{step}s")
    t = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=at)
    slot = s.latest_slot(t)
    assert slot <= t < slot + timedelta(seconds=step)


def test_checks_per_period_counts_the_busiest_period() -> None:
    """The budget holds over any period, so it is spread over the most checks one holds: a
    day that starts on a slot of a 5 h schedule holds 5 (0, 5, 10, 15, 20 h), as the cron
    ``0 */5 * * *`` does; the floor said 4, and "1w" 4 in 30 days where some hold 5 (a 3.2 %
    false-alarm rate against a 2 % share, simulated)."""
    for text, period in (("5h", timedelta(days=1)), ("7h", timedelta(days=30))):
        schedule = parse_schedule(text)
        start = schedule.latest_slot(datetime(2026, 3, 1, tzinfo=UTC))
        held = [t for t in schedule.slots(start, start + period) if t < start + period]
        assert schedule.checks_per(period) == len(held), text
    assert parse_schedule("5h").checks_per(timedelta(days=1)) == 5
    assert parse_schedule("7h").checks_per(timedelta(days=30)) == 103
    assert parse_schedule("1w").checks_per(timedelta(days=30)) == 5
    assert parse_schedule("1w").checks_per(timedelta(days=30)) == parse_schedule(
        "@weekly"
    ).checks_per(timedelta(days=30))
    assert parse_schedule("1h").checks_per(timedelta(days=30)) == 720  # divides: unchanged


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


def test_a_cron_is_planned_for_its_busiest_period() -> None:
    """The alarm budget is per period: a cron is sized by the most slots any period holds.
    Counting only from 1 January gave 1 check a period for a schedule quiet in January, so
    thresholds meant for one check guarded 720 (the immediate z 2.58 instead of 4.34)."""
    month = timedelta(days=30)
    for text, want in (
        ("0 * * 2-12 *", 720),
        ("0 9 * 3-11 *", 30),
        ("0 * 31 * *", 24),
        ("0 9 * * 1-5", 22),  # 4 weeks and 2 days can hold 22 weekdays
        ("0 0 1 * *", 2),  # 1 February and 1 March are 28 days apart
    ):
        cron = parse_schedule(text)
        slots = cron.slots(datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 3, 1, tzinfo=UTC))
        densest = max(sum(t <= u < t + month for u in slots) for t in slots)
        assert densest == want, text
        assert cron.checks_per(month) == want, text
    assert parse_schedule("0 * * 2-12 *").nominal_interval() == timedelta(hours=1)
    # counted by the days that fire over 28 years, every such day holding the same slots (a
    # walk of 50,000 slots reached only February and missed July and August)
    assert parse_schedule("* * * 2,7,8 *").checks_per(month) == 30 * 1440
    assert parse_schedule("* * * 2 *").checks_per(month) == 29 * 1440  # a leap February
    # the 13th or a Friday: which months hold most depends on the year's weekdays (2026's
    # calendar alone gave 8,640 and 144)
    assert parse_schedule("* * 13 * 5").checks_per(month) == 7 * 1440
    assert parse_schedule("0 * 13 * 5").checks_per(month) == 7 * 24
    assert parse_schedule("* * 1,15 * 3").checks_per(month) == 8 * 1440
    assert parse_schedule("*/2 * 1-10 * *").checks_per(month) == 12 * 720  # 1-10 Feb, 1-2 Mar
    assert parse_schedule("*/5 * * * *").checks_per(month) == 8640
    # a period not of whole days: the densest window over the slots walked
    assert parse_schedule("0 */6 * * *").checks_per(timedelta(hours=36)) == 6


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
        ("0 9 * * MONDAY", "day-of-week field 'MONDAY' is not understood"),
        ("0 9 * JANUARY *", "month field 'JANUARY' is not understood"),
        ("0 9 MON * *", "day-of-month field 'MON' is not understood"),
        ("0 9 * * FRI-MON", "runs backwards"),
        ("0 9 * * 8-9", "day-of-week must lie in 0-7"),
        ("@reboot", "macro '@reboot' is not supported"),
        ("@fortnightly", "macro"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4 *", "never fires"),
        ("0 0 31 2,4,6,9,11 *", "never fires"),
        ("0 0 30,31 FEB *", "never fires"),
    ],
)
def test_parse_schedule_iv(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_schedule(text)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_schedule("1h").latest_slot(datetime(2026, 11, 30))


# ------------------------------------------------------------------------------ cron: crontab(5)


def _cron_slots(text: str, start: datetime, end: datetime) -> list[datetime]:
    return parse_schedule(text).slots(start, end)


@pytest.mark.parametrize(
    ("named", "numeric"),
    [
        ("0 9 * * MON", "0 9 * * 1"),
        ("0 9 * * mon-fri", "0 9 * * 1-5"),
        ("0 9 * * Sun", "0 9 * * 0"),
        ("0 9 * * SAT,sun", "0 9 * * 6,0"),
        ("0 9 * * MON-FRI/2", "0 9 * * 1-5/2"),
        ("0 0 1 JAN-MAR *", "0 0 1 1-3 *"),
        ("0 0 1 jan,Jul,DEC *", "0 0 1 1,7,12 *"),
        ("0 0 1 FEB/3 *", "0 0 1 2-12/3 *"),
    ],
)
def test_cron_names(named: str, numeric: str) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + timedelta(days=400)
    slots = _cron_slots(named, start, end)
    assert slots, named
    assert slots == _cron_slots(numeric, start, end)


def test_cron_monday_is_monday() -> None:
    # APScheduler 3's CronTrigger.from_crontab maps this to Tuesday; crontab(5) says Monday.
    slot = parse_schedule("0 9 * * 1").next_slot(T0)
    assert slot == datetime(2026, 12, 7, 9, tzinfo=UTC)
    assert slot.isoweekday() == 1


@pytest.mark.parametrize(
    ("macro", "expression"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_cron_macros(macro: str, expression: str) -> None:
    schedule = parse_schedule(macro)
    assert schedule.is_cron
    assert schedule.text == macro
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = datetime(2028, 1, 1, tzinfo=UTC)
    slots = schedule.slots(start, end)
    assert slots
    assert slots == _cron_slots(expression, start, end)


def test_cron_29_february_fires_in_leap_years_only() -> None:
    s = parse_schedule("0 0 29 2 *")
    got = s.slots(datetime(2023, 1, 1, tzinfo=UTC), datetime(2036, 12, 31, tzinfo=UTC))
    assert got == [datetime(y, 2, 29, tzinfo=UTC) for y in (2024, 2028, 2032, 2036)]
    assert s.latest_slot(T0) == datetime(2024, 2, 29, tzinfo=UTC)
    assert s.next_slot(T0) == datetime(2028, 2, 29, tzinfo=UTC)
    # 2100 is not a leap year (Gregorian century rule): 2096 is followed by 2104.
    assert s.next_slot(datetime(2096, 3, 1, tzinfo=UTC)) == datetime(2104, 2, 29, tzinfo=UTC)
    assert s.latest_slot(datetime(2104, 2, 28, tzinfo=UTC)) == datetime(2096, 2, 29, tzinfo=UTC)
    # validate used to crash on this schedule: the default run_timeout asks for its interval.
    assert s.nominal_interval(timedelta(days=30)) == timedelta(days=30)


def test_cron_restricted_days_with_impossible_date_still_fire() -> None:
    # Both day fields restricted: either matches, so "30 February or a Monday" is every Monday
    # of February.
    s = parse_schedule("0 0 30 2 MON")
    got = s.slots(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC))
    assert [t.day for t in got] == [2, 9, 16, 23]
    assert all(t.month == 2 and t.isoweekday() == 1 for t in got)


def test_cron_star_step_day_field_is_unrestricted() -> None:
    """A day field starting with ``*`` counts as unrestricted (crontab(5), cronie, Vixie cron).

    So ``0 0 */2 * MON`` fires on odd days that are Mondays, not on odd days or Mondays.
    croniter by default ORs them (it calls crontab(5)'s rule "the cron bug", after crontab.guru);
    with ``implement_cron_bug=True`` it agrees with crontab(5), which this module follows.
    """
    text = "0 0 */2 * MON"
    start = datetime(2026, 11, 1, tzinfo=UTC)
    got = _cron_slots(text, start, datetime(2026, 12, 31, tzinfo=UTC))
    assert [t.date().isoformat() for t in got] == [
        "2026-11-09",
        "2026-11-23",
        "2026-12-07",
        "2026-12-21",
    ]
    assert all(t.isoweekday() == 1 and t.day % 2 == 1 for t in got)
    crontab5 = croniter(text, start, implement_cron_bug=True)
    assert [crontab5.get_next(datetime) for _ in got] == got
    default = croniter(text, start)
    assert default.get_next(datetime) == datetime(2026, 11, 2, tzinfo=UTC)  # a Monday, day 2


def test_cron_prev_slot_of_yearly_schedule_spans_the_year() -> None:
    s = parse_schedule("@yearly")
    assert s.latest_slot(T0) == datetime(2026, 1, 1, tzinfo=UTC)
    assert s.latest_slot(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2026, 1, 1, tzinfo=UTC)
    assert s.next_slot(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)
    # The rarest schedules: 29 February on a Sunday fires every 28 years or more.
    rare = parse_schedule("0 0 29 2 */7")
    assert rare.latest_slot(T0) == datetime(2004, 2, 29, tzinfo=UTC)
    assert rare.next_slot(T0) == datetime(2032, 2, 29, tzinfo=UTC)


def _field(index: int) -> st.SearchStrategy[tuple[str, str]]:
    """A random cron field, as (our text, the same field spelled for croniter)."""
    low, high = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))[index]
    names = {
        3: ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
        4: ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    }.get(index)
    first = 1 if index == 3 else 0  # the number of names[0]

    @st.composite
    def value(draw: st.DrawFn, lo: int = low) -> tuple[int, str]:
        v = draw(st.integers(lo, high))
        text = str(v)
        if names is not None and v - first < len(names) and draw(st.booleans()):
            name = names[v - first]
            text = draw(st.sampled_from([name, name.lower(), name.title()]))
        return v, text

    @st.composite
    def atom(draw: st.DrawFn) -> tuple[str, str]:
        kind = draw(st.sampled_from(["one", "range", "range-step", "one-step"]))
        a, a_text = draw(value())
        if kind == "one":
            return a_text, a_text
        if kind == "one-step":
            step = f"/{draw(st.integers(1, high - low + 1))}"
            return a_text + step, a_text + step
        b, b_text = draw(value(lo=a))
        step = f"/{draw(st.integers(1, 12))}" if kind == "range-step" else ""
        ours = f"{a_text}-{b_text}{step}"
        # croniter deviation: it reads "a-a" (and "a-a/n") as "*" (every value); crontab(5)
        # reads it as "a". Spell the same set for croniter.
        return ours, (a_text if a == b else ours)

    star = st.sampled_from(["*", "*/2", "*/3", "*/5", "*/7", f"*/{high - low + 1}"])
    items = st.lists(atom(), min_size=1, max_size=3).map(
        lambda xs: (",".join(x[0] for x in xs), ",".join(x[1] for x in xs))
    )
    return st.one_of(star.map(lambda t: (t, t)), items)


@st.composite
def _expressions(draw: st.DrawFn) -> tuple[str, str]:
    fields = [draw(_field(i)) for i in range(5)]
    ours, theirs = " ".join(f[0] for f in fields), " ".join(f[1] for f in fields)
    try:
        parse_schedule(ours)
    except ValueError:
        assume(False)
    return ours, theirs


_MOMENTS = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2080, 12, 31), timezones=st.just(UTC)
)


def _croniter(text: str, start: datetime) -> croniter:
    # implement_cron_bug=True: crontab(5)'s rule for day fields starting with '*' (see above).
    return croniter(text, start, implement_cron_bug=True, max_years_between_matches=60)


@given(_expressions(), _MOMENTS)
def test_cron_against_croniter(texts: tuple[str, str], moment: datetime) -> None:
    ours, text = texts
    s = parse_schedule(ours)
    assert s.next_slot(moment) == _croniter(text, moment).get_next(datetime)
    # croniter's get_prev is strictly before its start, ours is at or before: start 1 s past the
    # minute, so both ask for the last slot at or before ``moment``.
    after = moment.replace(second=0, microsecond=0) + timedelta(seconds=1)
    assert s.latest_slot(moment) == _croniter(text, after).get_prev(datetime)


@given(_expressions(), _MOMENTS)
def test_cron_slot_walk_against_croniter(texts: tuple[str, str], moment: datetime) -> None:
    ours, text = texts
    s = parse_schedule(ours)
    it = _croniter(text, moment)
    walk = [s.next_slot(moment)]
    for _ in range(4):
        walk.append(s.next_slot(walk[-1]))
    assert walk == [it.get_next(datetime) for _ in range(5)]
    assert all(s.latest_slot(t) == t for t in walk)
    assert all(s.latest_slot(t - timedelta(seconds=1)) < t for t in walk)


@given(
    st.sampled_from(["30", "31", "30,31", "29-31"]), st.sampled_from(["2", "4", "2,4", "4,6,9,11"])
)
def test_cron_never_fires_agrees_with_croniter(days: str, months: str) -> None:
    text = f"0 0 {days} {months} *"
    try:
        _croniter(text, datetime(2026, 1, 1, tzinfo=UTC)).get_next(datetime)
    except Exception:  # croniter's CroniterBadDateError or CroniterBadCronError
        fires_in_croniter = False
    else:
        fires_in_croniter = True
    if fires_in_croniter:
        assert parse_schedule(text).next_slot(datetime(2026, 1, 1, tzinfo=UTC))
    else:
        with pytest.raises(ValueError, match="never fires"):
            parse_schedule(text)


@pytest.mark.parametrize(
    ("text", "hours"),
    [
        ("1h", 1),
        ("0 9 * * MON-FRI", 72),  # Friday 09:00 to Monday 09:00
        ("0 9-17 * * *", 16),  # 17:00 to 09:00
        ("*/5 9-17 * * MON-FRI", 63 + 5 / 60),  # Friday 17:55 to Monday 09:00
        ("0 0 1 * *", 31 * 24),
        ("@weekly", 7 * 24),
    ],
)
def test_longest_gap_is_what_the_stale_alerts_double(text: str, hours: float) -> None:
    """``schedule_interval_seconds`` (doubled by RetrievalMonitorStale) is the longest gap
    between two slots: a weekday schedule's average (1d 8h 44m) doubled is less than its
    weekend, and every Monday the alert fired before the first check was due."""
    assert parse_schedule(text).longest_gap() == timedelta(hours=hours)


@pytest.mark.parametrize(
    "text", ["0 9 * * MON-FRI", "0 9-17 * * *", "17 3 * * 1,4", "0 6,18 1-7 * *", "30 2 * 2 *"]
)
def test_longest_gap_against_croniter(text: str) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    it = croniter(text, start)
    times = [it.get_next(datetime) for _ in range(3000)]
    times = [t for t in times if t <= start + timedelta(days=400)]
    times.append(croniter(text, times[-1]).get_next(datetime))
    widest = max(b - a for a, b in itertools.pairwise(times))
    assert parse_schedule(text).longest_gap() == widest


@pytest.mark.parametrize("text", ["1.1s", "1.2s", "1.7s", "2.2s", "12.3s", "7.5m"])
def test_fractional_intervals_step_forward_exactly(text: str) -> None:
    """Slots of a fractional interval are multiples of it since the epoch, in whole
    microseconds. In float seconds, 1.1s floored a slot to the one before it, next_slot
    returned its argument, and a backtest over a minute never ended."""
    s = parse_schedule(text)
    step = s.nominal_interval()
    start = T0
    slots = s.slots(start, start + 40 * step)
    assert len(slots) in (40, 41)
    assert all(b - a == step for a, b in itertools.pairwise(slots))
    for t in slots:
        assert s.latest_slot(t) == t
        assert s.next_slot(t) == t + step
        assert (t - datetime(1970, 1, 1, tzinfo=UTC)) % step == timedelta(0)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0.0000001s", "at least 1 microsecond"),  # rounded to zero: once a ZeroDivisionError
        ("0.0000004s", "at least 1 microsecond"),
        ("99999999999d", r"at most 36525d \(100 years\)"),  # once an OverflowError, exit 1
        ("1000000d", r"at most 36525d"),  # passed validate, then overflowed in check
        ("36526d", r"at most 36525d"),
        ("5218w", r"at most 36525d"),
    ],
)
def test_durations_that_timedelta_cannot_hold_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0 0 \u0663 * *", "0 0 */\u0663 * *", "\u00b3 * * * *"])
def test_cron_fields_take_ascii_digits_only(text: str) -> None:
    """str.isdigit accepts Arabic-Indic and superscript digits: '٣' was read as day 3."""
    with pytest.raises(ValueError, match=r"not understood|step"):
        parse_schedule(text)


def test_durations_take_ascii_digits_only() -> None:
    with pytest.raises(ValueError, match="must be a duration"):
        parse_duration("\u0663h")


@settings(max_examples=40, deadline=None)
@given(
    minutes=st.sets(st.sampled_from([0, 15, 30, 45]), min_size=1),
    hours=st.sets(st.integers(0, 23), min_size=1, max_size=4),
    doms=st.sets(st.integers(26, 31), min_size=1, max_size=3),
    months=st.sets(st.integers(1, 12), min_size=1, max_size=2),
    period_h=st.integers(13, 80),
)
def test_a_period_of_other_than_whole_days_is_counted_over_the_calendar(
    minutes: set[int], hours: set[int], doms: set[int], months: set[int], period_h: int
) -> None:
    """A period that is not whole days (``budget.period = "36h"``) was counted over the slots
    of 2026 alone: ``0 */12 28,29 2 *`` holds 3 slots in 36 hours only in a leap year, and
    the budget was spread over 2. Against every slot of the 28-year calendar, walked."""
    text = " ".join(",".join(map(str, sorted(f))) for f in (minutes, hours, doms, months)) + " *"
    try:
        cron = parse_schedule(text)
    except ValueError:  # a day no month holds (31 February)
        return
    period = timedelta(hours=period_h, minutes=30)
    walk = cron.slots(datetime(2026, 1, 1, tzinfo=UTC), datetime(2054, 3, 1, tzinfo=UTC))
    best = max(
        (bisect.bisect_left(walk, t + period, lo=i) - i for i, t in enumerate(walk)), default=0
    )
    assert cron.checks_per(period) == max(1, best), text


def test_a_leap_day_counts_in_a_period_of_hours() -> None:
    assert parse_schedule("0 */12 28,29 2 *").checks_per(timedelta(hours=36)) == 3
