"""set_reminder, list_reminders, change_reminder, cancel_reminder: the owner's reminders and timers.

The inner plane owns reminders (``inner.cmd.reminders``): it records them as ledger events,
schedules each occurrence with JetStream and claims every fire once. These tools only ask it.
A delay ("in 10 minutes") becomes an absolute ``at`` here, when the call runs. The request id
is the tool call's, so a call run again (a retried request of the same response) sets no
second reminder.
"""

from datetime import datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from delegate.contracts import topics
from delegate.contracts.ids import utcnow
from delegate.contracts.reminders import Reminder, ReminderCommand, ReminderReply, ReminderSpec
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from ..base import CURRENT_CALL, FAILED, INVALID_ARGUMENTS, SIDE_EFFECT, UNAVAILABLE, Tool, ToolError, object_schema

TAGS = ("local", "reminders")
WRITES = (*TAGS, SIDE_EFFECT)  # a reminder wakes the agent and reaches the owner later
WHEN = ("at", "in_seconds", "rrule", "cron")
MAX_DELAY_S = 10 * 366 * 24 * 3600


class ReminderDesk(Protocol):
    async def reminders(self, cmd: ReminderCommand) -> ReminderReply: ...


class BusReminderDesk:
    """The inner plane's reminder commands, over the bus."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def reminders(self, cmd: ReminderCommand) -> ReminderReply:
        return await self.bus.request(topics.INNER_REMINDERS, cmd)


_SPEC_PROPERTIES: dict[str, Any] = {
    "text": {"type": "string", "minLength": 1, "maxLength": 4000,
             "description": "What to remind the owner of, as it should be said when it is due."},
    "at": {"type": "string", "maxLength": 64,
           "description": "One-shot: ISO 8601 date-time with an offset (2026-12-24T18:00:00+01:00); "
                          "without one it is read in `timezone`."},
    "in_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DELAY_S,
                   "description": "One-shot after a delay: 'in 10 minutes' is 600."},
    "rrule": {"type": "string", "maxLength": 500,
              "description": "Recurring, an RFC 5545 RRULE without DTSTART, e.g. "
                             "FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=9;BYMINUTE=0;BYSECOND=0 (name minutes and "
                             "seconds, or they are taken from the start)."},
    "cron": {"type": "string", "maxLength": 200,
             "description": "Recurring, a cron expression: 'minute hour day month weekday' (0 9 * * 1-5), "
                            "or six fields with the seconds first."},
    "start": {"type": "string", "maxLength": 64,
              "description": "For rrule: the first occurrence (ISO 8601); default: now."},
    "timezone": {"type": "string", "maxLength": 64,
                 "description": "IANA timezone the times and rules are read in (Europe/Berlin); "
                                "default: the owner's."},
    "late": {"type": "string", "enum": ["fire", "skip"],
             "description": "If it comes due while Delegate was down past the grace: fire late (default) "
                            "or skip it."},
    "grace_seconds": {"type": "number", "minimum": 0, "maximum": 7 * 24 * 3600,
                      "description": "How late still counts as on time (default 60)."},
    "urgency": {"type": "string", "enum": ["low", "normal", "urgent"],
                "description": "urgent: may interrupt quiet hours and the daily budget."},
    "reply_via": {"type": "string", "enum": ["sms", "email", "call"],
                  "description": "How to reach the owner when it is due; default: the channel they used last."},
}


def reminder_tools(desk: ReminderDesk) -> list[Tool]:
    async def set_reminder(args: dict[str, Any]) -> str:
        spec = _spec(args, base=None)
        reminder = _one(await _ask(desk, ReminderCommand(op="set", spec=spec, **_origin())))
        return f"Reminder set. {describe(reminder)}"

    async def list_reminders(args: dict[str, Any]) -> str:
        reply = await _ask(desk, ReminderCommand(op="list", include_done=bool(args.get("include_done"))))
        if not reply.reminders:
            return "No reminders."
        return "\n".join(describe(r) for r in reply.reminders)

    async def change_reminder(args: dict[str, Any]) -> str:
        reminder_id = str(args["reminder_id"])
        upcoming = (await _ask(desk, ReminderCommand(op="list"))).reminders
        current = next((r for r in upcoming if r.id == reminder_id), None)
        if current is None:
            raise ToolError(FAILED, f"there is no upcoming reminder {reminder_id!r}; list_reminders shows them")
        spec = _spec(args, base=current.spec)
        cmd = ReminderCommand(op="change", reminder_id=reminder_id, spec=spec, **_origin())
        return f"Reminder changed. {describe(_one(await _ask(desk, cmd)))}"

    async def cancel_reminder(args: dict[str, Any]) -> str:
        cmd = ReminderCommand(
            op="cancel", reminder_id=str(args["reminder_id"]), reason=str(args.get("reason") or ""), **_origin()
        )
        return f"Reminder cancelled. {describe(_one(await _ask(desk, cmd)))}"

    when_note = " Give exactly one of at, in_seconds, rrule, cron."
    return [
        Tool(
            "set_reminder",
            "Set a reminder or timer for the owner: once (at a time, or after a delay) or recurring (RRULE or "
            "cron). When it is due you are woken with it and decide how to tell the owner." + when_note,
            object_schema(_SPEC_PROPERTIES, ["text"]),
            set_reminder,
            WRITES,
        ),
        Tool(
            "list_reminders",
            "List the owner's upcoming reminders (soonest first), with their ids.",
            object_schema({"include_done": {"type": "boolean", "description": "Also the fired and cancelled ones."}}),
            list_reminders,
            TAGS,
        ),
        Tool(
            "change_reminder",
            "Change an upcoming reminder: its text, its time or rule, or how it is delivered. Give only what "
            "changes; a new at/in_seconds/rrule/cron replaces the old timing.",
            object_schema(
                {"reminder_id": {"type": "string", "minLength": 1, "maxLength": 64},
                 **{k: v for k, v in _SPEC_PROPERTIES.items() if k != "text"},
                 "text": {**_SPEC_PROPERTIES["text"], "description": "The new text, if it changes."}},
                ["reminder_id"],
            ),
            change_reminder,
            WRITES,
        ),
        Tool(
            "cancel_reminder",
            "Cancel an upcoming reminder so it never fires again.",
            object_schema(
                {"reminder_id": {"type": "string", "minLength": 1, "maxLength": 64},
                 "reason": {"type": "string", "maxLength": 500}},
                ["reminder_id"],
            ),
            cancel_reminder,
            WRITES,
        ),
    ]


def describe(reminder: Reminder) -> str:
    spec = reminder.spec
    when = (
        f"once at {_local(spec.at, spec.timezone)}" if spec.at is not None
        else f"rrule {spec.rrule}" if spec.rrule is not None
        else f"cron {spec.cron!r}"
    )
    upcoming: str
    if reminder.status != "active":
        upcoming = reminder.status
    elif reminder.next_due is not None:
        upcoming = f"next: {_local(reminder.next_due, spec.timezone)}"
    else:
        upcoming = "no occurrence left"
    return f"[{reminder.id}] {spec.text!r} - {when} ({spec.timezone}); {upcoming}; fired {reminder.fired} time(s)."


def _local(moment: datetime, timezone: str) -> str:
    try:
        return moment.astimezone(ZoneInfo(timezone)).isoformat(timespec="seconds")
    except (ZoneInfoNotFoundError, ValueError):
        return moment.isoformat(timespec="seconds")


def _spec(args: dict[str, Any], *, base: ReminderSpec | None) -> ReminderSpec:
    fields: dict[str, Any] = {} if base is None else base.model_dump()
    given = [name for name in WHEN if args.get(name) is not None]
    if base is None and len(given) != 1:
        raise ToolError(INVALID_ARGUMENTS, "give exactly one of at, in_seconds, rrule, cron")
    if len(given) > 1:
        raise ToolError(INVALID_ARGUMENTS, "give at most one of at, in_seconds, rrule, cron")
    for name in ("text", "timezone", "late", "urgency", "reply_via"):
        if args.get(name) is not None:
            fields[name] = args[name]
    if args.get("grace_seconds") is not None:
        fields["grace_s"] = float(args["grace_seconds"])
    if given:
        fields.update({"at": None, "rrule": None, "cron": None, "start": None})
        which = given[0]
        if which == "in_seconds":
            fields["at"] = utcnow() + timedelta(seconds=float(args["in_seconds"]))
        elif which == "at":
            fields["at"] = _moment(str(args["at"]), fields.get("timezone") or "", "at")
        else:
            fields[which] = str(args[which])
    if args.get("start") is not None:
        fields["start"] = _moment(str(args["start"]), fields.get("timezone") or "", "start")
    try:
        return ReminderSpec.model_validate(fields)
    except ValueError as exc:
        raise ToolError(INVALID_ARGUMENTS, f"not a reminder the inner plane can take: {exc}") from exc


def _moment(text: str, timezone: str, name: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ToolError(INVALID_ARGUMENTS, f"{name} is not an ISO 8601 date-time: {text!r}") from exc
    if moment.tzinfo is not None:
        return moment
    if not timezone:
        raise ToolError(INVALID_ARGUMENTS, f"{name} needs an offset (e.g. +01:00 or Z), or give timezone")
    try:
        return moment.replace(tzinfo=ZoneInfo(timezone))
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolError(INVALID_ARGUMENTS, f"unknown timezone {timezone!r}") from exc


def _origin() -> dict[str, Any]:
    call = CURRENT_CALL.get()
    return {} if call is None else {"request_id": call.call_id[:200], "parent_id": call.event_id}


async def _ask(desk: ReminderDesk, cmd: ReminderCommand) -> ReminderReply:
    try:
        return await desk.reminders(cmd)
    except BusUnavailable as exc:
        raise ToolError(UNAVAILABLE, "the reminders service (inner plane) is not answering; try again later") from exc
    except RemoteError as exc:
        code = INVALID_ARGUMENTS if exc.code == "bad_request" else UNAVAILABLE if exc.code == "unavailable" else FAILED
        raise ToolError(code, exc.message) from exc


def _one(reply: ReminderReply) -> Reminder:
    if not reply.reminders:
        raise ToolError(FAILED, "the inner plane answered without the reminder")
    return reply.reminders[0]
