"""The iCalendar half of the calendar, without a server: occurrences in a window (floating and
all-day times read in the owner's zone) and the changes Delegate writes to one occurrence."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from delegate.pollers.calendar.ical import cancelled_occurrence, moved, new_event, occurrences, uid_for_call
from tests.support.radicale import vevent

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
WINDOW = (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 31, tzinfo=UTC))


def _starts(ics: str) -> list[datetime]:
    return [o.start for o in sorted(occurrences(ics, *WINDOW, BERLIN), key=lambda o: o.start)]


def test_one_occurrence_of_a_series_moves_and_another_is_cancelled_the_rest_stay() -> None:
    series = vevent("standup", START, START + timedelta(minutes=30), uid="s1", rrule="FREQ=DAILY;COUNT=4")
    third = START + timedelta(days=2)
    changed = moved(series, "s1", occurrence=third, start=third + timedelta(hours=3), end=None)
    assert _starts(changed) == [START, START + timedelta(days=1), third + timedelta(hours=3), START + timedelta(days=3)]
    [late] = [o for o in occurrences(changed, *WINDOW, BERLIN) if o.occurrence == third]
    assert late.end - late.start == timedelta(minutes=30) and late.recurring and late.summary == "standup"

    fewer = cancelled_occurrence(changed, "s1", START + timedelta(days=1))
    assert _starts(fewer) == [START, third + timedelta(hours=3), START + timedelta(days=3)]
    gone_moved = cancelled_occurrence(fewer, "s1", third)  # cancelling the moved one drops its instance too
    assert _starts(gone_moved) == [START, START + timedelta(days=3)]


def test_floating_and_all_day_times_are_the_owners() -> None:
    ics = "\r\n".join([
        "BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//t//t//EN",
        "BEGIN:VEVENT", "UID:f1", "DTSTAMP:20261201T000000Z", "DTSTART:20261210T090000", "DTEND:20261210T100000",
        "SUMMARY:floating", "ATTENDEE;CN=Ana:mailto:ana@example.com", "END:VEVENT",
        "BEGIN:VEVENT", "UID:d1", "DTSTAMP:20261201T000000Z", "DTSTART;VALUE=DATE:20261224",
        "DTEND;VALUE=DATE:20261225", "SUMMARY:holiday", "END:VEVENT",
        "END:VCALENDAR", "",
    ])
    found = {o.uid: o for o in occurrences(ics, *WINDOW, BERLIN)}
    assert found["f1"].start == datetime(2026, 12, 10, 8, 0, tzinfo=UTC)  # 09:00 in Berlin
    assert found["f1"].attendees == ("ana@example.com",) and not found["f1"].all_day
    assert found["d1"].all_day and found["d1"].start == datetime(2026, 12, 23, 23, 0, tzinfo=UTC)


def test_a_created_event_is_named_by_its_call_and_reads_back() -> None:
    uid = uid_for_call("call_1")
    assert uid == uid_for_call("call_1") != uid_for_call("call_2")
    ics = new_event(uid, start=START, end=START + timedelta(hours=1), summary="Dentist", location="Main St 5",
                    description=None, attendees=["dr@example.com"], stamp=START)
    [o] = occurrences(ics, *WINDOW, BERLIN)
    assert (o.uid, o.start, o.location, o.attendees) == (uid, START, "Main St 5", ("dr@example.com",))
