"""What the reminder tests share: asking the inner plane, and reading the fires the ledger committed."""

from datetime import datetime, timedelta
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.ids import utcnow
from delegate.contracts.reminders import Reminder, ReminderCommand, ReminderReply, ReminderSpec
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from tests.support.waiting import eventually

from .harness import Harness


async def ask(bus: Bus, **fields: Any) -> ReminderReply:
    return await bus.request(topics.INNER_REMINDERS, ReminderCommand(**fields))


async def ask_when_ready(bus: Bus, timeout: float = 30.0, **fields: Any) -> ReminderReply:
    """Like ``ask``, waiting out an inner plane that is (re)starting or still catching up."""

    async def answered() -> ReminderReply | None:
        try:
            return await ask(bus, **fields)
        except BusUnavailable:
            return None
        except RemoteError as exc:
            if exc.code == "unavailable":
                return None
            raise

    return await eventually(answered, f"an answer to reminders {fields.get('op')}", timeout)


async def set_at(bus: Bus, at: datetime, text: str = "tea", **spec: Any) -> Reminder:
    reply = await ask_when_ready(bus, op="set", spec=ReminderSpec(text=text, at=at, **spec))
    return reply.reminders[0]


async def fires(h: Harness, reminder_id: str) -> list[Event]:
    """The committed ``reminder.due`` signals of one reminder, in commit order."""
    return [
        e for e in await h.events(kinds=["inner.signal"])
        if e.payload.get("signal_kind") == "reminder.due"
        and e.payload["signal"]["payload"]["reminder_id"] == reminder_id
    ]


def due_at(event: Event) -> datetime:
    return datetime.fromisoformat(event.payload["signal"]["payload"]["due_at"])


async def fired(h: Harness, reminder_id: str, count: int = 1, timeout: float = 45.0) -> list[Event]:
    """Wait until at least ``count`` fires of the reminder are committed; returns them all.

    Right after a NATS restart the ledger may not have subscribed again: no responders is "not
    yet" here, as it is for the services' own followers (a ledger that never answers still fails
    the wait, at its deadline)."""

    async def enough() -> list[Event] | None:
        try:
            found = await fires(h, reminder_id)
        except BusUnavailable:
            return None
        return found if len(found) >= count else None

    return await eventually(enough, f"{count} fire(s) of reminder {reminder_id}", timeout)


async def barrier(h: Harness, after: datetime | None = None) -> None:
    """Wait for a marker reminder due at ``after`` (default: now) to fire. Fires are taken one at
    a time in the order JetStream published them, so every schedule due before the marker has
    been judged by then: a duplicate or a stale fire would be committed already."""
    marker = await set_at(h.bus, after or utcnow(), text="barrier")
    await fired(h, marker.id)


def soon(seconds: float) -> datetime:
    return utcnow() + timedelta(seconds=seconds)
