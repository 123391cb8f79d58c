"""``pollers.cmd.calendar``: the agent's calendar tools, answered by the service that owns the
projection.

Reads answer from the projection. Writes are keyed by the tool call id:

- the ``calendar.written`` event's id derives from it: a call whose write is recorded answers
  "already done" without asking the server;
- a create's UID and resource name derive from it, and the server is asked first (a GET, then
  a PUT that never replaces): a retry after a crash between the server's write and the answer
  finds the event instead of creating a second one;
- a move or cancel repeated after a crash finds the server already as asked and says so.

With CALENDAR_CONFIRM_WRITES a write is only proposed (a ``calendar.proposed`` event, its id
derived from the call) and ``confirm`` performs it: only from a later turn than the proposal
(the owner answered), never from an activation (no owner spoke), with the proposing call's id
as the key, so the same proposal confirmed twice writes once.
"""

import logging
from datetime import datetime, timedelta
from typing import Any

from delegate.contracts.calendar import CalendarCommand, CalendarEntry, CalendarReply, FreeSlot
from delegate.contracts.events import CalendarProposed, CalendarWritten, make_event
from delegate.runtime.bus import DomainError
from delegate.runtime.ledger_client import LedgerClient, LedgerUnavailable

from .ical import BadCalendarData, moved, new_event, uid_for_call
from .ical import cancelled_occurrence as without_occurrence
from .server import CalendarUnavailable, WriteConflict
from .sync import CalendarSync, derived_id

log = logging.getLogger(__name__)
MAX_SLOTS = 20
VOICE_CHANNELS = ("phone", "browser_voice")


class CalendarDesk:
    def __init__(self, sync: CalendarSync, ledger: LedgerClient) -> None:
        self.sync = sync
        self.ledger = ledger

    @property
    def confirm_writes(self) -> bool:
        return self.sync.settings.calendar_confirm_writes

    async def handle(self, cmd: CalendarCommand) -> CalendarReply:
        try:
            if cmd.op == "agenda":
                return self.agenda(cmd)
            if cmd.op == "free":
                return self.free(cmd)
            return await self.write(cmd)
        except CalendarUnavailable as exc:
            raise DomainError("unavailable", f"the calendar server is not answering: {exc}") from exc
        except LedgerUnavailable as exc:
            raise DomainError("unavailable", f"the ledger is not answering: {exc}") from exc
        except WriteConflict as exc:
            raise DomainError("conflict", f"{exc}; read the agenda again and retry") from exc
        except BadCalendarData as exc:
            raise DomainError("failed", str(exc)) from exc

    # ---- reads ------------------------------------------------------------------------------

    def agenda(self, cmd: CalendarCommand) -> CalendarReply:
        assert cmd.start is not None and cmd.end is not None
        rows = self.sync.projection.between(cmd.start, cmd.end, cmd.limit + 1)
        names = self.sync.dav.names
        entries = [
            CalendarEntry(
                uid=o.uid, summary=o.summary, start=o.start, end=o.end, all_day=o.all_day, location=o.location,
                attendees=list(o.attendees), recurring=o.recurring, occurrence=o.occurrence,
                calendar=names.get(cal, cal),
            )
            for o, cal in rows[: cmd.limit]
        ]
        return CalendarReply(events=entries, more=len(rows) > cmd.limit, synced_at=self.sync.synced_at)

    def free(self, cmd: CalendarCommand) -> CalendarReply:
        assert cmd.start is not None and cmd.end is not None and cmd.duration_s is not None
        need = timedelta(seconds=cmd.duration_s)
        busy = sorted(
            (max(o.start, cmd.start), min(o.end, cmd.end))
            for o, _ in self.sync.projection.between(cmd.start, cmd.end, 5000)
            if not o.all_day  # all-day entries (birthdays, holidays) do not take the hours
        )
        slots: list[FreeSlot] = []
        cursor = cmd.start
        for begin, end in [*busy, (cmd.end, cmd.end)]:
            if begin - cursor >= need:
                slots.append(FreeSlot(start=cursor, end=begin))
                if len(slots) >= MAX_SLOTS:
                    break
            cursor = max(cursor, end)
        return CalendarReply(free=slots, synced_at=self.sync.synced_at)

    # ---- writes -----------------------------------------------------------------------------

    async def write(self, cmd: CalendarCommand) -> CalendarReply:
        assert cmd.request_id is not None
        if cmd.op == "confirm":
            return await self._confirm(cmd)
        args = _write_args(cmd)
        if self.confirm_writes:
            return await self._propose(cmd, args)
        return await self._perform(cmd.op, args, key=cmd.request_id, parent_id=cmd.parent_id, proposal_id=None)

    async def _propose(self, cmd: CalendarCommand, args: dict[str, Any]) -> CalendarReply:
        assert cmd.request_id is not None
        text = self._describe(cmd.op, args)
        proposal_id = derived_id("calprop", cmd.request_id)
        event = make_event(
            CalendarProposed(op=cmd.op, call_id=cmd.request_id, text=text, args=args),
            id=proposal_id, conversation_id=None, span_id=None, channel="inner",
            parent_id=cmd.turn_id or cmd.parent_id,
        )
        await self.ledger.publish(event)
        return CalendarReply(
            status="proposed", proposal_id=proposal_id,
            text=f"Not written yet: {text}. Ask the owner; when they say yes (in any channel), call "
                 f"calendar_confirm with proposal_id {proposal_id}.",
        )

    async def _confirm(self, cmd: CalendarCommand) -> CalendarReply:
        assert cmd.proposal_id is not None
        found = await self.ledger.get(cmd.proposal_id)
        proposal = found.payload_as(CalendarProposed) if found is not None else None
        if found is None or proposal is None:
            raise DomainError("not_found", f"there is no calendar proposal {cmd.proposal_id!r}")
        # a voice session's tool calls answer no message event (the owner's words are its audio):
        # there the model's hearing of the yes is all there is; elsewhere a turn must name its message
        spoken = cmd.channel in VOICE_CHANNELS
        if cmd.channel == "inner" or (not cmd.turn_id and not spoken):
            raise DomainError("denied", "only the owner's own yes confirms a calendar write, not an activation")
        if found.parent_id is not None and cmd.turn_id == found.parent_id:
            raise DomainError("denied", "the owner has not answered the proposal yet: ask them first")
        op = proposal.op
        return await self._perform(op, proposal.args, key=proposal.call_id, parent_id=cmd.parent_id,
                                   proposal_id=found.id)

    async def _perform(
        self, op: str, args: dict[str, Any], *, key: str, parent_id: str | None, proposal_id: str | None
    ) -> CalendarReply:
        written_id = derived_id("calwr", key)
        done = await self.ledger.get(written_id)
        if done is not None:
            return CalendarReply(status="already_done", text=f"Already done: {done.typed(CalendarWritten).text}")
        sync = self.sync
        async with sync.lock:
            if op == "create":
                status, uid, text = await self._create(args, key)
            elif op == "move":
                status, uid, text = await self._move(args)
            else:
                status, uid, text = await self._cancel(args)
        event = make_event(
            CalendarWritten(op=op, call_id=key, uid=uid, text=text, proposal_id=proposal_id),
            id=written_id, conversation_id=None, span_id=None, channel="inner", parent_id=parent_id,
        )
        await self.ledger.publish(event)
        return CalendarReply(status=status, text=text if status == "done" else f"Already done: {text}")

    async def _create(self, args: dict[str, Any], key: str) -> tuple[str, str, str]:
        sync, dav = self.sync, self.sync.dav
        uid = uid_for_call(key)
        href = dav.href_for(uid)
        start, end = _dt(args["start"]), _dt(args["end"])
        text = f"created {args['summary']!r} {self._when(start, end)} (uid {uid})"
        existing = await dav.fetch(href)  # an earlier try of this call may have written it already
        if existing is not None:
            sync.projection.store(href, dav.write_url or "", uid, existing.etag, existing.ics,
                                  sync.expand(existing.ics, sync.clock()))
            return "already_done", uid, text
        ics = new_event(uid, start=start, end=end, summary=args["summary"], location=args.get("location"),
                        description=args.get("description"), attendees=list(args.get("attendees") or []),
                        stamp=sync.clock())
        created = await dav.create(href, ics)
        current = await dav.fetch(href) if not created else None
        stored = current.ics if current is not None else ics
        sync.projection.store(href, dav.write_url or "", uid, None, stored, sync.expand(stored, sync.clock()))
        return ("done" if created else "already_done"), uid, text

    async def _move(self, args: dict[str, Any]) -> tuple[str, str, str]:
        sync, dav = self.sync, self.sync.dav
        uid = args["uid"]
        resource = await self._resource(uid)
        occurrence = _dt(args["occurrence"]) if args.get("occurrence") else None
        start = _dt(args["start"])
        end = _dt(args["end"]) if args.get("end") else None
        ics = moved(resource.ics, uid, occurrence=occurrence, start=start, end=end)
        now = sync.clock()
        before = {(o.key, o.start, o.end) for o in sync.expand(resource.ics, now)}
        after = sync.expand(ics, now)
        text = f"moved {uid}{' (one occurrence)' if occurrence else ''} to {self._when(start, end)}"
        if before == {(o.key, o.start, o.end) for o in after}:
            return "already_done", uid, text
        await dav.replace(resource, ics)
        calendar = sync.projection.resource(resource.href)
        sync.projection.store(resource.href, calendar[0] if calendar else dav.write_url or "", uid, None, ics, after)
        return "done", uid, text

    async def _cancel(self, args: dict[str, Any]) -> tuple[str, str, str]:
        sync, dav = self.sync, self.sync.dav
        uid = args["uid"]
        occurrence = _dt(args["occurrence"]) if args.get("occurrence") else None
        text = f"cancelled {uid}" + (f" on {occurrence.isoformat()}" if occurrence else "")
        href = sync.projection.href_of(uid)
        resource = await dav.fetch(href) if href else None
        if resource is None:
            if href is not None:
                sync.projection.remove(href)
            return "already_done", uid, text
        if occurrence is None:
            deleted = await dav.delete(resource)
            sync.projection.remove(resource.href)
            return ("done" if deleted else "already_done"), uid, text
        ics = without_occurrence(resource.ics, uid, occurrence)
        await dav.replace(resource, ics)
        calendar = sync.projection.resource(resource.href)
        sync.projection.store(resource.href, calendar[0] if calendar else "", uid, None, ics,
                              sync.expand(ics, sync.clock()))
        return "done", uid, text

    async def _resource(self, uid: str) -> Any:
        href = self.sync.projection.href_of(uid)
        resource = await self.sync.dav.fetch(href) if href else None
        if resource is None:
            raise DomainError("not_found", f"there is no event {uid!r} in the calendar (calendar_agenda shows uids)")
        return resource

    def _describe(self, op: str, args: dict[str, Any]) -> str:
        if op == "create":
            where = f" at {args['location']}" if args.get("location") else ""
            return f"create {args['summary']!r} {self._when(_dt(args['start']), _dt(args['end']))}{where}"
        row = self.sync.projection.href_of(args["uid"])
        name = args["uid"]
        if row is not None:
            found = self.sync.projection.occurrences_of(row)
            if found:
                name = f"{found[0].summary!r}"
        which = f" (the occurrence of {args['occurrence']})" if args.get("occurrence") else ""
        if op == "move":
            end = _dt(args["end"]) if args.get("end") else None
            return f"move {name}{which} to {self._when(_dt(args['start']), end)}"
        return f"cancel {name}{which}"

    def _when(self, start: datetime, end: datetime | None) -> str:
        zone = self.sync.zone
        text = start.astimezone(zone).strftime("%a %Y-%m-%d %H:%M")
        if end is not None:
            text += end.astimezone(zone).strftime("-%H:%M")
        return f"{text} ({zone.key})"


def _write_args(cmd: CalendarCommand) -> dict[str, Any]:
    fields = {
        "create": ("start", "end", "summary", "location", "description", "attendees"),
        "move": ("uid", "occurrence", "start", "end"),
        "cancel": ("uid", "occurrence"),
    }[cmd.op]
    dumped = cmd.model_dump(mode="json", include=set(fields))
    return {k: v for k, v in dumped.items() if v not in (None, [])}


def _dt(value: str | datetime) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)
