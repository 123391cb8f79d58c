"""When a reminder is due: its first occurrence, and the one after an occurrence that fired.

One-shots are their ``at``. Recurring reminders use maintained libraries rather than our own
calendar arithmetic: python-dateutil's ``rrulestr`` for RFC 5545 RRULEs (the iCalendar grammar
models and calendar apps already speak, BYDAY/BYSETPOS/UNTIL included) and croniter for cron
expressions. Both read the rule in the reminder's IANA timezone, so "every day at 09:00" stays
09:00 local across daylight-saving changes; every time leaving this module is UTC.

Everything here is a pure function of the spec and a point in time: replaying the ledger
computes the very same occurrences, which is what makes a fire's id (reminder, occurrence)
stable across restarts.
"""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from dateutil.rrule import rrule, rrulestr

from delegate.contracts.reminders import ReminderSpec

# A wall-clock rule can give the same UTC instant twice (a fall-back hour): this many tries
# to find an occurrence strictly later than the one that fired.
_MAX_STEPS = 100


class BadSchedule(ValueError):
    """The spec cannot be scheduled; the message says why, in words the owner or a model can act on."""


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise BadSchedule(f"unknown timezone {name!r}: use an IANA name such as Europe/Berlin or UTC") from exc


def resolve(spec: ReminderSpec, *, default_timezone: str, now: datetime) -> ReminderSpec:
    """The spec as it is recorded: timezone filled in, a recurring rule anchored, all checked.

    Filling these in makes the stored ``reminder.set`` mean the same thing forever, whatever
    OWNER_TIMEZONE or the clock say when the ledger is replayed.
    """
    tz_name = spec.timezone or default_timezone
    zone(tz_name)
    update: dict[str, object] = {"timezone": tz_name}
    if spec.rrule is not None:
        text = spec.rrule.strip()
        if text.upper().startswith("RRULE:"):
            text = text[len("RRULE:"):]
        if "\n" in text or "DTSTART" in text.upper():
            raise BadSchedule(
                "give the RRULE alone (e.g. FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0), and its first day as start"
            )
        update["rrule"] = text
        # Unnamed BYSECOND/BYMINUTE come from DTSTART (RFC 5545), and dateutil drops its
        # microseconds anyway: a whole second, which is also what a JetStream @at can express.
        update["start"] = (spec.start or now).replace(microsecond=0)
    if spec.cron is not None:
        fields = spec.cron.split()
        if len(fields) not in (5, 6) or not croniter.is_valid(spec.cron, second_at_beginning=len(fields) == 6):
            raise BadSchedule(
                f"bad cron expression {spec.cron!r}: five fields (minute hour day month weekday), "
                "or six with the seconds first"
            )
    resolved = spec.model_copy(update=update)
    if first_due(resolved, since=now) is None:
        raise BadSchedule("this schedule has no occurrence from now on")
    return resolved


def first_due(spec: ReminderSpec, *, since: datetime) -> datetime | None:
    """The first occurrence after ``since``, the moment the reminder was set or changed; None: none.

    A one-shot is its ``at`` even when that is past: it fires at once, late. An RRULE's start
    is its first occurrence when it lies ahead (RFC 5545); one that starts "now" (no start
    given) first fires at its next occurrence, not the moment it is set. A cron occurrence at
    exactly ``since`` counts.
    """
    if spec.at is not None:
        return spec.at.astimezone(UTC)
    if spec.rrule is not None:
        assert spec.start is not None
        rule, tz = _rule(spec), zone(spec.timezone)
        if spec.start > since:
            return _utc(rule.after(spec.start.astimezone(tz), inc=True))
        return _utc(rule.after(since.astimezone(tz), inc=False))
    if spec.start is not None:
        since = max(since, spec.start)
    return _cron_after(spec, since - timedelta(microseconds=1))


def next_due(spec: ReminderSpec, *, after: datetime) -> datetime | None:
    """The occurrence following ``after`` (one that fired), strictly later in UTC; None: none left."""
    if spec.at is not None:
        return None
    current = after
    for _ in range(_MAX_STEPS):
        if spec.rrule is not None:
            found = _utc(_rule(spec).after(current.astimezone(zone(spec.timezone)), inc=False))
        else:
            found = _cron_after(spec, current)
        if found is None or found > after:
            return found
        current = found + timedelta(seconds=1)
    return None


def _rule(spec: ReminderSpec) -> rrule:
    assert spec.rrule is not None and spec.start is not None
    tz = zone(spec.timezone)
    try:
        rule = rrulestr(spec.rrule, dtstart=spec.start.astimezone(tz))
    except (ValueError, TypeError) as exc:
        raise BadSchedule(f"bad RRULE {spec.rrule!r}: {exc}") from exc
    if not isinstance(rule, rrule):
        raise BadSchedule(f"bad RRULE {spec.rrule!r}: give one rule")
    return rule


def _cron_after(spec: ReminderSpec, moment: datetime) -> datetime | None:
    assert spec.cron is not None
    six = len(spec.cron.split()) == 6
    try:
        found = croniter(spec.cron, moment.astimezone(zone(spec.timezone)), second_at_beginning=six).get_next(datetime)
    except (ValueError, KeyError) as exc:  # croniter's own errors derive from ValueError
        raise BadSchedule(f"bad cron expression {spec.cron!r}: {exc}") from exc
    return _utc(found)


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.astimezone(UTC)
