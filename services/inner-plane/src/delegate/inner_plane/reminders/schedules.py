"""Each active reminder's next occurrence is ONE JetStream message schedule.

Why native schedules (nats-server 2.12+ ``Nats-Schedule: @at``) instead of a timer loop of
our own: the due time then lives in the file-stored REMINDERS stream, not in a process. A
schedule that comes due while the inner plane is down (killed, restarting, upgraded) is
published into the stream by the server anyway and waits for our durable consumer; one that
comes due while NATS itself is down fires as soon as the server is back (an overdue ``@at``
fires at once). A polling loop would need its own persistence, its own catch-up after a crash
and a poll interval trading latency against load, and would still be a second clock to keep
consistent with the ledger. Here the server's clock does the waiting and the ledger does
the claiming (see ``fires``).

The schedule of reminder R is the message on ``reminders.evt.at.<R>``; its body is the
``ReminderFire`` to deliver and its headers say when and where:
``Nats-Schedule: @at <RFC 3339 UTC, whole seconds>`` and ``Nats-Schedule-Target:
reminders.evt.fire``. A newer message on the same subject replaces the schedule (a change, the
next occurrence), and a purge of the subject cancels it. Republishing is idempotent, so after
every start each active reminder's schedule is simply published again (reconcile).
"""

import asyncio
import logging
import math
from datetime import UTC, datetime

from delegate.contracts import streams, subjects, topics
from delegate.contracts.reminders import Reminder, ReminderFire
from delegate.runtime.bus import MSG_ID, PUBLISH_RETRY, Bus
from delegate.runtime.retry import Backoff, retrying

from ..context import Context

log = logging.getLogger(__name__)

STREAM = "REMINDERS"
SCHEDULE = "Nats-Schedule"
SCHEDULE_TARGET = "Nats-Schedule-Target"


def at_header(due_at: datetime) -> str:
    """``@at`` in RFC 3339 UTC, rounded UP to the whole second: never fire before the due time."""
    epoch = math.ceil(due_at.timestamp())
    return "@at " + datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Schedules:
    """The REMINDERS stream, as the inner plane uses it."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def schedule(self, reminder: Reminder) -> None:
        assert reminder.next_due is not None
        fire = ReminderFire(reminder_id=reminder.id, revision=reminder.revision, due_at=reminder.next_due)
        topic = topics.inner_schedule(reminder.id)
        headers = {
            SCHEDULE: at_header(fire.due_at),
            SCHEDULE_TARGET: subjects.INNER_FIRE,
            # Within the duplicate window a republished schedule (reconcile) is a no-op; after
            # it, it replaces the same schedule: a fire already delivered is then delivered
            # again and dropped by the claim.
            MSG_ID: f"{fire.reminder_id}:{fire.revision}:{fire.due_at.isoformat()}",
        }
        data = topic.encode(fire)
        async for attempt in retrying(retry_on=PUBLISH_RETRY, deadline=10.0, initial=0.05, maximum=1.0):
            with attempt:
                await self.bus.js.publish(topic.subject, data, headers=headers, timeout=2.0)

    async def cancel(self, reminder_id: str) -> None:
        """Remove the reminder's pending schedule, if any (a purge of its subject)."""
        await self.bus.js.purge_stream(STREAM, subject=subjects.inner_schedule(reminder_id))

    async def clear_fired(self) -> None:
        """Drop the fires our consumer has acknowledged: the stream has no max age (a yearly
        schedule must outlive any), so delivered fires would otherwise pile up forever."""
        info = await self.bus.js.consumer_info(STREAM, streams.INNER_REMINDERS)
        floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
        if floor:
            await self.bus.js.purge_stream(STREAM, subject=subjects.INNER_FIRE, seq=floor + 1)


class Scheduler:
    """Keeps JetStream's schedules in line with the reminders in the state, after catch-up.

    ``published`` is this process' memory of what it handed to JetStream; it starts empty, so
    the first pass after every start republishes every active reminder's schedule.
    """

    def __init__(self, ctx: Context, schedules: Schedules) -> None:
        self.ctx = ctx
        self.schedules = schedules
        self.wake = asyncio.Event()
        self.published: dict[str, tuple[int, datetime]] = {}
        self.to_cancel: set[str] = set()

    def changed(self, reminder: Reminder) -> None:
        """From ``on_event``: the reminder's revision, occurrence or status moved."""
        if reminder.status == "cancelled":
            self.to_cancel.add(reminder.id)
        self.wake.set()

    async def run(self) -> None:
        await self.ctx.caught_up.wait()
        backoff = Backoff(initial=0.2, maximum=5.0)
        while True:
            self.wake.clear()
            try:
                await self._pass()
                backoff.reset()
            except Exception as exc:  # NATS away or restarting: JetStream keeps what it has
                log.warning("reminder schedules not up to date yet (%d): %r", backoff.failures + 1, exc)
                await backoff.sleep(self.ctx.stop)
                continue
            await self.wake.wait()

    async def _pass(self) -> None:
        for reminder_id in sorted(self.to_cancel):
            await self.schedules.cancel(reminder_id)
            self.published.pop(reminder_id, None)
            self.to_cancel.discard(reminder_id)
        for reminder in list(self.ctx.state.reminders.values()):
            if reminder.status != "active" or reminder.next_due is None:
                continue
            wanted = (reminder.revision, reminder.next_due)
            if self.published.get(reminder.id) == wanted:
                continue
            await self.schedules.schedule(reminder)
            self.published[reminder.id] = wanted
            log.info("reminder %s (revision %d) scheduled for %s", reminder.id, reminder.revision,
                     reminder.next_due.isoformat())
