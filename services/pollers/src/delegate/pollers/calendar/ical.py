"""iCalendar in and out: a resource's occurrences in a window, and the events Delegate writes.

Recurrence is expanded by recurring-ical-events, which applies RRULE/RDATE, EXDATE and the
modified instances (RECURRENCE-ID) the way CalDAV servers do. Floating times and all-day dates
are read in the owner's timezone: that is what they mean on the owner's own devices.
"""

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import icalendar
import recurring_ical_events

PRODID = "-//Delegate//calendar//EN"


@dataclass(frozen=True)
class Occurrence:
    uid: str
    start: datetime  # aware, UTC
    end: datetime
    all_day: bool
    summary: str
    location: str
    attendees: tuple[str, ...]
    recurring: bool
    occurrence: datetime | None  # the original start (RECURRENCE-ID) of a series' instance

    @property
    def key(self) -> str:
        """Which occurrence this is, stable across moves: a series instance's original start, or
        the event itself."""
        if self.occurrence is None:
            return self.uid
        return f"{self.uid}|{self.occurrence.astimezone(UTC).isoformat()}"


class BadCalendarData(ValueError):
    """A resource that is not iCalendar we can read."""


def occurrences(ics: str, start: datetime, end: datetime, zone: ZoneInfo) -> list[Occurrence]:
    try:
        cal = icalendar.Calendar.from_ical(ics)
        found = recurring_ical_events.of(cal, components=["VEVENT"]).between(start, end)
    except Exception as exc:  # the parsers raise many kinds of error for malformed data
        raise BadCalendarData(f"unreadable iCalendar: {exc}") from exc
    uids_with_rules = {
        str(c.get("UID")) for c in cal.walk("VEVENT") if c.get("RRULE") or c.get("RDATE") or c.get("RECURRENCE-ID")
    }
    out: list[Occurrence] = []
    for event in found:
        if str(event.get("STATUS", "")).upper() == "CANCELLED":
            continue
        uid = str(event.get("UID", ""))
        if not uid:
            continue
        begin, all_day = _moment(event.start, zone)
        finish, _ = _moment(event.end, zone) if event.get("DTEND") or event.get("DURATION") else (begin, all_day)
        rid = event.get("RECURRENCE-ID")
        recurring = uid in uids_with_rules
        out.append(Occurrence(
            uid=uid,
            start=begin,
            end=max(finish, begin),
            all_day=all_day,
            summary=str(event.get("SUMMARY", ""))[:500],
            location=str(event.get("LOCATION", ""))[:1000],
            attendees=tuple(_attendees(event)),
            recurring=recurring,
            occurrence=_moment(rid.dt, zone)[0] if recurring and rid is not None else None,
        ))
    return out


def _moment(value: date | datetime, zone: ZoneInfo) -> tuple[datetime, bool]:
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=zone)
        return aware.astimezone(UTC), False
    return datetime.combine(value, time(0), zone).astimezone(UTC), True


def _attendees(event: Any) -> list[str]:
    raw = event.get("ATTENDEE")
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    return [re.sub(r"^mailto:", "", str(a), flags=re.IGNORECASE)[:320] for a in items][:50]


def uid_of(ics: str) -> str:
    """The UID of a resource's events ("" when it has none we can read)."""
    try:
        cal = icalendar.Calendar.from_ical(ics)
    except Exception:
        return ""
    return next((str(c.get("UID")) for c in cal.walk("VEVENT") if c.get("UID")), "")


def uid_for_call(call_id: str) -> str:
    """The UID of the event a tool call creates: the same call always makes the same UID (and the
    same resource name), so a retry finds what an interrupted try wrote."""
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:32]
    return f"delegate-{digest}"


def new_event(
    uid: str, *, start: datetime, end: datetime, summary: str, location: str | None, description: str | None,
    attendees: list[str], stamp: datetime,
) -> str:
    cal = icalendar.Calendar()
    cal.add("PRODID", PRODID)
    cal.add("VERSION", "2.0")
    event = icalendar.Event()
    event.add("UID", uid)
    event.add("DTSTAMP", stamp.astimezone(UTC))
    event.add("DTSTART", start.astimezone(UTC))
    event.add("DTEND", end.astimezone(UTC))
    event.add("SUMMARY", summary)
    if location:
        event.add("LOCATION", location)
    if description:
        event.add("DESCRIPTION", description)
    for who in attendees:
        event.add("ATTENDEE", who if ":" in who else f"mailto:{who}")
    cal.add_component(event)
    return str(cal.to_ical().decode())


def moved(ics: str, uid: str, *, occurrence: datetime | None, start: datetime, end: datetime | None) -> str:
    """The resource with the event (or one occurrence of its series) moved to ``start``.

    Moving one occurrence of a series adds (or changes) its RECURRENCE-ID instance, as calendar
    apps do; the series itself keeps its rule."""
    cal = icalendar.Calendar.from_ical(ics)
    events = [c for c in cal.walk("VEVENT") if str(c.get("UID")) == uid]
    if not events:
        raise BadCalendarData(f"no event {uid!r} in the resource")
    master = next((c for c in events if c.get("RECURRENCE-ID") is None), events[0])
    if occurrence is None:
        _shift(master, start, end)
    else:
        target = next((c for c in events if c.get("RECURRENCE-ID") is not None
                       and _same(c.get("RECURRENCE-ID").dt, occurrence)), None)
        if target is None:
            target = icalendar.Event()
            for name in ("UID", "SUMMARY", "LOCATION", "DESCRIPTION"):
                if master.get(name) is not None:
                    target.add(name, master.get(name))
            for who in master.get("ATTENDEE") or []:
                target.add("ATTENDEE", who)
            length = _length(master)
            target.add("RECURRENCE-ID", occurrence.astimezone(UTC))
            target.add("DTSTART", occurrence.astimezone(UTC))
            target.add("DTEND", occurrence.astimezone(UTC) + length)
            cal.add_component(target)
        _shift(target, start, end)
    _bump(events)
    return str(cal.to_ical().decode())


def cancelled_occurrence(ics: str, uid: str, occurrence: datetime) -> str:
    """The resource with one occurrence of the series removed (EXDATE on the series)."""
    cal = icalendar.Calendar.from_ical(ics)
    events = [c for c in cal.walk("VEVENT") if str(c.get("UID")) == uid]
    master = next((c for c in events if c.get("RECURRENCE-ID") is None), None)
    if master is None:
        raise BadCalendarData(f"no series {uid!r} in the resource")
    master.add("EXDATE", occurrence.astimezone(UTC))
    cal.subcomponents = [c for c in cal.subcomponents if not (
        c.name == "VEVENT" and str(c.get("UID")) == uid and c.get("RECURRENCE-ID") is not None
        and _same(c.get("RECURRENCE-ID").dt, occurrence))]
    _bump([master])
    return str(cal.to_ical().decode())


def _shift(event: Any, start: datetime, end: datetime | None) -> None:
    old_start = event.start
    old_end = event.end if event.get("DTEND") or event.get("DURATION") else old_start
    length = (old_end - old_start) if isinstance(old_start, datetime) else timedelta(hours=1)
    for name in ("DTSTART", "DTEND", "DURATION"):
        if name in event:
            del event[name]
    event.add("DTSTART", start.astimezone(UTC))
    event.add("DTEND", (end or start + length).astimezone(UTC))


def _length(event: Any) -> timedelta:
    if event.get("DTEND") is None:
        return timedelta(hours=1)
    length = event["DTEND"].dt - event["DTSTART"].dt
    return length if isinstance(length, timedelta) else timedelta(hours=1)


def _bump(events: list[Any]) -> None:
    for event in events:
        sequence = int(event.get("SEQUENCE", 0)) + 1
        if "SEQUENCE" in event:
            del event["SEQUENCE"]
        event.add("SEQUENCE", sequence)


def _same(value: date | datetime, moment: datetime) -> bool:
    if not isinstance(value, datetime):
        return False
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC) == moment.astimezone(UTC)
