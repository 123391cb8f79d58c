"""Today's calendar as the model reads it in its instructions: the owner's times, bounded."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from delegate.contracts.calendar import CalendarEntry
from delegate.runtime.calendar_now import today_section
from delegate.runtime.working_context import compose_instructions

NOW = datetime(2026, 12, 7, 13, 0, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


def test_the_section_lists_the_rest_of_today_in_the_owners_time() -> None:
    events = [
        CalendarEntry(uid="a", summary="Standup", start=NOW - timedelta(minutes=10), end=NOW + timedelta(minutes=20)),
        CalendarEntry(uid="b", summary="Dentist", start=NOW + timedelta(hours=2), end=NOW + timedelta(hours=3),
                      location="Main St 5", attendees=["dr@example.com"]),
    ]
    text = today_section(events, True, NOW, BERLIN)
    assert text.splitlines() == [
        "Today's calendar (Europe/Berlin; calendar_agenda for more, uids for moves):",
        "- 13:50-14:20 (now) Standup",
        "- 16:00-17:00 Dentist at Main St 5 with dr@example.com",
        "- ... and more later today",
    ]
    assert today_section([], False, NOW, BERLIN) == "Today's calendar (Europe/Berlin): nothing else today."


def test_the_section_goes_into_the_instructions_after_memory() -> None:
    section = today_section([], False, NOW, BERLIN)
    text = compose_instructions("Base.", capsule=None, channel="text", now=NOW, calendar=section)
    assert text.startswith("Base.\n\n" + section)
    assert "calendar" not in compose_instructions("Base.", capsule=None, channel="text", now=NOW).lower()
