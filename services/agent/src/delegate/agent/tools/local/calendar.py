"""The calendar tools: agenda, free time, create, move, cancel, and confirm a proposed write.

The pollers own the calendar (a projection of the CalDAV server, ``pollers.cmd.calendar``);
these tools only ask them. Each write carries the tool call's id: the pollers derive the new
event's UID and the write's record from it, so a call run again writes once. With
CALENDAR_CONFIRM_WRITES (the default) a write comes back "proposed": the model asks the owner,
and ``calendar_confirm`` in a later turn (the owner's yes, on any channel) performs it.
"""

from datetime import datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from delegate.contracts import topics
from delegate.contracts.calendar import CalendarCommand, CalendarEntry, CalendarReply
from delegate.contracts.ids import utcnow
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from ..base import CURRENT_CALL, DENIED, FAILED, INVALID_ARGUMENTS, SIDE_EFFECT, UNAVAILABLE, Tool, ToolError
from ..base import object_schema as schema

TAGS = ("local", "calendar")
WRITES = (*TAGS, SIDE_EFFECT)  # they change the owner's calendar, which other people see
MAX_LISTED = 100


class CalendarDesk(Protocol):
    async def calendar(self, cmd: CalendarCommand) -> CalendarReply: ...


class BusCalendarDesk:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def calendar(self, cmd: CalendarCommand) -> CalendarReply:
        return await self.bus.request(topics.POLLERS_CALENDAR, cmd)


_TIME = {"type": "string", "maxLength": 64}
_UID = {"type": "string", "minLength": 1, "maxLength": 500, "description": "The event's uid, from calendar_agenda."}
_OCCURRENCE = {**_TIME, "description": "For one occurrence of a recurring event: its start as calendar_agenda "
                                       "shows it (`occurrence`); without it the whole event is meant."}


def calendar_tools(desk: CalendarDesk, timezone: str) -> list[Tool]:
    zone = _zone(timezone)

    async def agenda(args: dict[str, Any]) -> str:
        start = _moment(args.get("from"), zone, "from") or utcnow()
        end = _moment(args.get("to"), zone, "to") or start + timedelta(days=1)
        reply = await _ask(desk, _command(op="agenda", start=start, end=end, limit=MAX_LISTED))
        if not reply.events:
            return f"Nothing in the calendar between {_local(start, zone)} and {_local(end, zone)}.{_fresh(reply)}"
        lines = [_describe(e, zone) for e in reply.events]
        if reply.more:
            lines.append(f"(more after these {len(lines)}: ask for a shorter range)")
        return "\n".join(lines) + _fresh(reply)

    async def find_free(args: dict[str, Any]) -> str:
        start = _moment(args.get("from"), zone, "from") or utcnow()
        end = _moment(args.get("to"), zone, "to") or start + timedelta(days=7)
        minutes = float(args["duration_minutes"])
        reply = await _ask(desk, _command(op="free", start=start, end=end, duration_s=minutes * 60))
        if not reply.free:
            return f"No free {minutes:.0f} minutes between {_local(start, zone)} and {_local(end, zone)}."
        return "Free: " + "; ".join(f"{_local(s.start, zone)} to {_local(s.end, zone)}" for s in reply.free)

    async def create(args: dict[str, Any]) -> str:
        start = _required(args, "start", zone)
        length = timedelta(minutes=float(args.get("duration_minutes", 60)))
        end = _moment(args.get("end"), zone, "end") or start + length
        cmd = _command(
            op="create", start=start, end=end, summary=args["summary"], location=args.get("location"),
            description=args.get("description"), attendees=list(args.get("attendees") or []), **_origin(),
        )
        return _written(await _ask(desk, cmd))

    async def move(args: dict[str, Any]) -> str:
        cmd = _command(
            op="move", uid=args["uid"], start=_required(args, "start", zone),
            end=_moment(args.get("end"), zone, "end"), occurrence=_moment(args.get("occurrence"), zone, "occurrence"),
            **_origin(),
        )
        return _written(await _ask(desk, cmd))

    async def cancel(args: dict[str, Any]) -> str:
        cmd = _command(op="cancel", uid=args["uid"], occurrence=_moment(args.get("occurrence"), zone, "occurrence"),
                       **_origin())
        return _written(await _ask(desk, cmd))

    async def confirm(args: dict[str, Any]) -> str:
        return _written(await _ask(desk, _command(op="confirm", proposal_id=args["proposal_id"], **_origin())))

    range_props = {
        "from": {**_TIME, "description": "ISO 8601 start (default now); without an offset it is the owner's time."},
        "to": {**_TIME, "description": "ISO 8601 end (default: a day after from)."},
    }
    confirm_note = (" When the owner must confirm writes, this only proposes it: ask them, and call "
                    "calendar_confirm once they say yes.")
    return [
        Tool("calendar_agenda", "The owner's calendar between two times: each event with its time, place, "
             "attendees and uid (recurring events expanded).", schema(range_props), agenda, TAGS),
        Tool("calendar_find_free", "Free slots of at least duration_minutes in the owner's calendar within a range "
             "(default: the next 7 days).",
             schema({"duration_minutes": {"type": "number", "exclusiveMinimum": 0, "maximum": 10080},
                     **range_props, "to": {**_TIME, "description": "ISO 8601 end (default: 7 days after from)."}},
                    ["duration_minutes"]), find_free, TAGS),
        Tool("calendar_create", "Add an event to the owner's calendar." + confirm_note,
             schema({"summary": {"type": "string", "minLength": 1, "maxLength": 500},
                     "start": {**_TIME, "description": "ISO 8601; without an offset it is the owner's time."},
                     "end": {**_TIME, "description": "ISO 8601 (or give duration_minutes; default 60)."},
                     "duration_minutes": {"type": "number", "exclusiveMinimum": 0, "maximum": 10080},
                     "location": {"type": "string", "maxLength": 1000},
                     "description": {"type": "string", "maxLength": 4000},
                     "attendees": {"type": "array", "maxItems": 50,
                                   "items": {"type": "string", "minLength": 3, "maxLength": 320}}},
                    ["summary", "start"]), create, WRITES),
        Tool("calendar_move", "Move an event (or one occurrence of a recurring one) to a new time." + confirm_note,
             schema({"uid": _UID, "start": {**_TIME, "description": "The new start (ISO 8601)."},
                     "end": {**_TIME, "description": "The new end; default: the same length."},
                     "occurrence": _OCCURRENCE}, ["uid", "start"]), move, WRITES),
        Tool("calendar_cancel", "Remove an event (or one occurrence of a recurring one) from the owner's calendar."
             + confirm_note, schema({"uid": _UID, "occurrence": _OCCURRENCE}, ["uid"]), cancel, WRITES),
        Tool("calendar_confirm", "Perform a calendar write you proposed, once the owner said yes to it (in this "
             "or any channel). Never without their yes.",
             schema({"proposal_id": {"type": "string", "minLength": 1, "maxLength": 64}}, ["proposal_id"]),
             confirm, WRITES),
    ]


def _command(**fields: Any) -> CalendarCommand:
    try:
        return CalendarCommand(**{k: v for k, v in fields.items() if v is not None})
    except ValueError as exc:
        raise ToolError(INVALID_ARGUMENTS, f"not a calendar request: {exc}") from exc


def _origin() -> dict[str, Any]:
    call = CURRENT_CALL.get()
    if call is None:  # a call from outside a turn (a benchmark): still one idempotency key per call
        raise ToolError(INVALID_ARGUMENTS, "a calendar write needs a tool call id")
    return {"request_id": call.call_id[:200], "parent_id": call.event_id, "turn_id": call.parent_id,
            "channel": call.channel}


async def _ask(desk: CalendarDesk, cmd: CalendarCommand) -> CalendarReply:
    try:
        return await desk.calendar(cmd)
    except BusUnavailable as exc:
        raise ToolError(UNAVAILABLE, "the calendar (pollers) is not answering; try again later") from exc
    except RemoteError as exc:
        code = {"bad_request": INVALID_ARGUMENTS, "unavailable": UNAVAILABLE, "denied": DENIED}.get(exc.code, FAILED)
        raise ToolError(code, exc.message) from exc


def _written(reply: CalendarReply) -> str:
    if reply.status == "done":
        return f"Done: {reply.text}."
    return reply.text


def _describe(entry: CalendarEntry, zone: ZoneInfo) -> str:
    when = (entry.start.astimezone(zone).strftime("%a %Y-%m-%d") + " (all day)" if entry.all_day
            else f"{_local(entry.start, zone)} to {entry.end.astimezone(zone).strftime('%H:%M')}")
    parts = [f"{when}: {entry.summary or '(no title)'}"]
    if entry.location:
        parts.append(f"at {entry.location}")
    if entry.attendees:
        parts.append("with " + ", ".join(entry.attendees[:10]))
    ident = f"uid {entry.uid}"
    if entry.occurrence is not None:
        ident += f", occurrence {entry.occurrence.isoformat()}"
    return " ".join(parts) + f" [{ident}]"


def _fresh(reply: CalendarReply) -> str:
    if reply.synced_at is None:
        return " (the calendar has not been synced yet)"
    return ""


def _local(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime("%a %Y-%m-%d %H:%M")


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _required(args: dict[str, Any], name: str, zone: ZoneInfo) -> datetime:
    moment = _moment(args.get(name), zone, name)
    if moment is None:
        raise ToolError(INVALID_ARGUMENTS, f"{name} is required")
    return moment


def _moment(value: object, zone: ZoneInfo, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ToolError(INVALID_ARGUMENTS, f"{name} is not an ISO 8601 date-time: {value!r}") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)
