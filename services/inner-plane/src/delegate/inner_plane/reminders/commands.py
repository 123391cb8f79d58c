"""``inner.cmd.reminders``: set, list, change and cancel, for the agent's tools and the gateway.

Every change is an event the inner plane writes to the ledger (``reminder.set``,
``reminder.changed`` with the next revision, ``reminder.cancelled``); the reminders in the
state are what the committed events say (``store``). A change is answered once its event is
committed and applied, so a ``list`` right after it sees it; a commit slower than the wait is
answered with the reminder as it will be. Changes are serialized: revisions are counted from
committed state, never guessed in parallel.
"""

import asyncio
import logging
from datetime import datetime

from delegate.contracts import topics
from delegate.contracts.events import Event, ReminderCancelled, ReminderChanged, ReminderDefined, make_event
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.reminders import Reminder, ReminderCommand, ReminderReply, ReminderSpec
from delegate.runtime.bus import BusUnavailable, DomainError

from ..context import Context, derived_id
from .recurrence import BadSchedule, resolve
from .store import defined, upcoming

log = logging.getLogger(__name__)

PUBLISH_DEADLINE_S = 2.5  # both waits stay inside the 5 s the asker waits for an answer
COMMIT_WAIT_S = 2.0


class ReminderDesk:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._turn = asyncio.Lock()
        self._waiting: dict[str, asyncio.Future[None]] = {}

    def applied(self, event: Event) -> None:
        """From ``on_event``: a change we are waiting for is now in the state."""
        waiter = self._waiting.pop(event.id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def handle(self, cmd: ReminderCommand) -> ReminderReply:
        if not self.ctx.caught_up.is_set():
            raise DomainError("unavailable", "the inner plane is still reading the ledger; try again in a moment")
        if cmd.op == "list":
            return ReminderReply(reminders=upcoming(self.ctx.state.reminders, include_done=cmd.include_done))
        async with self._turn:
            if cmd.op == "set":
                reminder = await self._set(cmd)
            elif cmd.op == "change":
                reminder = await self._change(cmd)
            else:
                reminder = await self._cancel(cmd)
        return ReminderReply(reminders=[reminder])

    async def _set(self, cmd: ReminderCommand) -> Reminder:
        assert cmd.spec is not None
        reminder_id = derived_id("reminder", cmd.request_id) if cmd.request_id else new_id()
        existing = self.ctx.state.reminders.get(reminder_id)
        if existing is not None:
            return existing  # the same request, asked again
        now = utcnow()
        spec = self._resolve(cmd.spec, now)
        payload = ReminderDefined(reminder_id=reminder_id, revision=1, spec=spec.model_dump(mode="json"))
        event = self._event(payload, derived_id("reminder.set", reminder_id), cmd, now)
        return await self._write(event, reminder_id, defined(reminder_id, 1, spec, now, now))

    async def _change(self, cmd: ReminderCommand) -> Reminder:
        assert cmd.spec is not None and cmd.reminder_id is not None
        old = self._active(cmd.reminder_id)
        now = utcnow()
        spec = self._resolve(cmd.spec, now)
        revision = old.revision + 1
        payload = ReminderChanged(reminder_id=old.id, revision=revision, spec=spec.model_dump(mode="json"))
        event = self._event(payload, derived_id("reminder.changed", f"{old.id}:{revision}"), cmd, now)
        expected = defined(old.id, revision, spec, now, old.created_at).model_copy(
            update={"fired": old.fired, "last_fired_at": old.last_fired_at}
        )
        return await self._write(event, old.id, expected)

    async def _cancel(self, cmd: ReminderCommand) -> Reminder:
        assert cmd.reminder_id is not None
        old = self._active(cmd.reminder_id)
        payload = ReminderCancelled(reminder_id=old.id, reason=cmd.reason)
        event = self._event(payload, derived_id("reminder.cancelled", old.id), cmd, utcnow())
        return await self._write(event, old.id, old.model_copy(update={"status": "cancelled", "next_due": None}))

    def _active(self, reminder_id: str) -> Reminder:
        reminder = self.ctx.state.reminders.get(reminder_id)
        if reminder is None:
            raise DomainError("not_found", f"there is no reminder {reminder_id!r}")
        if reminder.status != "active":
            raise DomainError("conflict", f"reminder {reminder_id!r} is already {reminder.status}")
        return reminder

    def _resolve(self, spec: ReminderSpec, now: datetime) -> ReminderSpec:
        try:
            return resolve(spec, default_timezone=self.ctx.settings.owner_timezone, now=now)
        except BadSchedule as exc:
            raise DomainError("bad_request", str(exc)) from exc

    def _event(
        self, payload: ReminderDefined | ReminderCancelled, event_id: str, cmd: ReminderCommand, now: datetime
    ) -> Event:
        return make_event(
            payload,
            conversation_id=self.ctx.state.current_conversation_id,
            span_id=None,  # like signals: the reminders' own record, between spans
            channel="inner",
            parent_id=cmd.parent_id,
            id=event_id,
            ts=now,  # the moment the first occurrence is counted from, in the reply and on replay
        )

    async def _write(self, event: Event, reminder_id: str, expected: Reminder) -> Reminder:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[event.id] = waiter
        try:
            try:
                await self.ctx.bus.publish(topics.ledger_append("inner-plane"), event, deadline=PUBLISH_DEADLINE_S)
            except BusUnavailable as exc:
                raise DomainError("unavailable", f"the ledger's stream did not take the change: {exc}") from exc
            try:
                await asyncio.wait_for(waiter, COMMIT_WAIT_S)
            except TimeoutError:
                log.info("%s for reminder %s is stored but not committed yet", event.kind, reminder_id)
                return expected
        finally:
            self._waiting.pop(event.id, None)
        return self.ctx.state.reminders.get(reminder_id, expected)
