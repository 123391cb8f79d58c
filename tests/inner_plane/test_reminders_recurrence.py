"""When reminders are due: one-shots, RRULEs and cron in a timezone, across DST, and bad specs refused.

Pure functions (no processes): the same spec and moment always give the same occurrences,
which is what makes a fire's claim id stable across restarts and replays.
"""

from datetime import UTC, datetime, timedelta

import pytest

from delegate.contracts.reminders import ReminderSpec
from delegate.inner_plane.reminders.recurrence import BadSchedule, first_due, next_due, resolve
from delegate.inner_plane.reminders.schedules import at_header

NOW = datetime(2026, 3, 27, 12, 0, 0, 400_000, tzinfo=UTC)  # a Friday; Berlin moves to summer time on the 29th


def occurrences(spec: ReminderSpec, since: datetime, count: int) -> list[datetime]:
    first = first_due(spec, since=since)
    assert first is not None
    out = [first]
    while len(out) < count:
        following = next_due(spec, after=out[-1])
        assert following is not None
        out.append(following)
    return out


def test_a_one_shot_is_due_at_its_time_once_even_when_past() -> None:
    spec = resolve(ReminderSpec(text="tea", at=NOW + timedelta(minutes=10)), default_timezone="UTC", now=NOW)
    assert first_due(spec, since=NOW) == NOW + timedelta(minutes=10)
    assert next_due(spec, after=NOW + timedelta(minutes=10)) is None
    past = ReminderSpec(text="late", at=NOW - timedelta(seconds=5))
    assert first_due(resolve(past, default_timezone="UTC", now=NOW), since=NOW) == NOW - timedelta(seconds=5)


def test_a_daily_rrule_keeps_local_time_across_the_dst_change() -> None:
    spec = resolve(
        ReminderSpec(text="standup", rrule="FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0", timezone="Europe/Berlin"),
        default_timezone="UTC", now=NOW,
    )
    assert spec.timezone == "Europe/Berlin" and spec.start == NOW.replace(microsecond=0)
    got = occurrences(spec, NOW, 3)
    # 09:00 in Berlin: CET (UTC+1) on Saturday, CEST (UTC+2) from Sunday on.
    assert got == [
        datetime(2026, 3, 28, 8, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 7, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 7, 0, tzinfo=UTC),
    ]
    assert all(moment.tzinfo is UTC for moment in got)


def test_a_secondly_rrule_counts_from_the_whole_second_it_was_set_in() -> None:
    spec = resolve(ReminderSpec(text="tick", rrule="RRULE:FREQ=SECONDLY;INTERVAL=2"), default_timezone="UTC", now=NOW)
    assert spec.rrule == "FREQ=SECONDLY;INTERVAL=2"
    start = NOW.replace(microsecond=0)
    assert occurrences(spec, NOW, 3) == [start + timedelta(seconds=2 * n) for n in (1, 2, 3)]


def test_an_rrule_with_a_count_ends() -> None:
    start = NOW + timedelta(hours=1)
    spec = resolve(ReminderSpec(text="pills", rrule="FREQ=DAILY;COUNT=2", start=start), default_timezone="UTC", now=NOW)
    assert spec.start == start.replace(microsecond=0)  # the start is the first occurrence when ahead
    first, second = occurrences(spec, NOW, 2)
    assert (first, second) == (spec.start, spec.start + timedelta(days=1))
    assert next_due(spec, after=second) is None


def test_the_default_timezone_is_filled_in() -> None:
    spec = resolve(ReminderSpec(text="x", cron="0 9 * * 1-5"), default_timezone="America/New_York", now=NOW)
    assert spec.timezone == "America/New_York"
    # Friday noon UTC is 08:00 in New York (EDT since 8 March, UTC-4): 09:00 is an hour later.
    assert first_due(spec, since=NOW) == datetime(2026, 3, 27, 13, 0, tzinfo=UTC)
    assert next_due(spec, after=datetime(2026, 3, 27, 13, 0, tzinfo=UTC)) == datetime(2026, 3, 30, 13, 0, tzinfo=UTC)


def test_cron_in_a_timezone_across_dst_and_with_seconds() -> None:
    berlin = ReminderSpec(text="x", cron="30 8 * * *", timezone="Europe/Berlin")
    daily = resolve(berlin, default_timezone="UTC", now=NOW)
    assert occurrences(daily, NOW, 3) == [
        datetime(2026, 3, 28, 7, 30, tzinfo=UTC),
        datetime(2026, 3, 29, 6, 30, tzinfo=UTC),
        datetime(2026, 3, 30, 6, 30, tzinfo=UTC),
    ]
    # Six fields: seconds first (as in Quartz and Spring).
    every_two = resolve(ReminderSpec(text="x", cron="*/2 * * * * *"), default_timezone="UTC", now=NOW)
    base = NOW.replace(microsecond=0)
    assert occurrences(every_two, NOW, 3) == [base + timedelta(seconds=2), base + timedelta(seconds=4),
                                              base + timedelta(seconds=6)]


def test_a_cron_occurrence_at_the_very_moment_counts() -> None:
    spec = resolve(ReminderSpec(text="x", cron="0 12 * * *"), default_timezone="UTC", now=NOW)
    on_the_dot = NOW.replace(microsecond=0)
    assert first_due(spec, since=on_the_dot) == on_the_dot
    assert next_due(spec, after=on_the_dot) == on_the_dot + timedelta(days=1)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (ReminderSpec(text="x", rrule="FREQ=SOMETIMES"), "bad RRULE"),
        (ReminderSpec(text="x", rrule="DTSTART:20260101T000000Z\nRRULE:FREQ=DAILY"), "RRULE alone"),
        (ReminderSpec(text="x", rrule="FREQ=DAILY;UNTIL=20200101T000000Z"), "no occurrence"),
        (ReminderSpec(text="x", cron="61 * * * *"), "bad cron"),
        (ReminderSpec(text="x", cron="* * *"), "bad cron"),
        (ReminderSpec(text="x", cron="0 0 30 2 *"), "bad cron"),
        (ReminderSpec(text="x", at=NOW, timezone="Mars/Olympus"), "unknown timezone"),
    ],
)
def test_bad_specs_are_refused_with_a_reason(spec: ReminderSpec, says: str) -> None:
    with pytest.raises(BadSchedule, match=says):
        resolve(spec, default_timezone="UTC", now=NOW)


def test_the_schedule_header_rounds_up_to_the_second() -> None:
    assert at_header(datetime(2026, 12, 2, 5, 0, 0, 1, tzinfo=UTC)) == "@at 2026-12-02T05:00:01Z"
    assert at_header(datetime(2026, 12, 2, 5, 0, 0, tzinfo=UTC)) == "@at 2026-12-02T05:00:00Z"
