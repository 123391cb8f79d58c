"""The REMINDERS consumer: a schedule that came due becomes the reminder's ``reminder.due`` signal.

JetStream publishes a due schedule's ``ReminderFire`` on ``reminders.evt.fire``; this durable
consumer takes them one at a time. A fire that no longer matches the reminder (unknown,
cancelled, done, an older revision, an occurrence already claimed) is acknowledged and
dropped, with a log line saying why. Any other is claimed in the ledger: its ``inner.signal``
event's id is derived from (reminder, occurrence), and the ledger stores an id once, so a
fire delivered twice (a redelivery after a crash before the ack, a schedule republished on
start) is still one committed signal. Only that committed signal moves the reminder on
(``store.apply``), and only then is its next occurrence scheduled.
"""

import asyncio
import logging
import time
from datetime import UTC

from nats.aio.msg import Msg

from delegate.contracts import streams, topics
from delegate.contracts.events import Event
from delegate.contracts.ids import utcnow
from delegate.contracts.reminders import Reminder, ReminderFire
from delegate.contracts.signals import ReminderDue, ReminderDuePayload
from delegate.runtime.bus import BusUnavailable, Retryable, quietly

from ..context import Context, derived_id
from ..signal_event import signal_event
from .schedules import Schedules

log = logging.getLogger(__name__)

SOURCE = "reminders"
FIRE_BATCH = 100


class LedgerAway(Retryable):
    delay = 1.0


def fire_id(reminder_id: str, due_at_iso: str) -> str:
    """The claim: one signal id per (reminder, occurrence), whoever delivers it how often."""
    return derived_id("reminder-fire", f"{reminder_id}:{due_at_iso}")


def stale(reminder: Reminder | None, fire: ReminderFire) -> str | None:
    """Why this fire must not become a signal; None when it is the reminder's pending occurrence."""
    if reminder is None:
        return "unknown reminder"
    if reminder.status != "active":
        return f"the reminder is {reminder.status}"
    if fire.revision != reminder.revision:
        return f"revision {fire.revision} was replaced by revision {reminder.revision}"
    if reminder.next_due != fire.due_at:
        return "not the pending occurrence (claimed already)"
    return None


def due_signal(reminder: Reminder, fire: ReminderFire) -> ReminderDue:
    spec = reminder.spec
    due_at = fire.due_at.astimezone(UTC)
    late = (utcnow() - due_at).total_seconds()
    return ReminderDue(
        id=fire_id(reminder.id, due_at.isoformat()),
        source=SOURCE,
        urgency=spec.urgency,
        reply_via=spec.reply_via,
        dedup_key=f"reminder:{reminder.id}:{due_at.isoformat()}",
        payload=ReminderDuePayload(
            reminder_id=reminder.id,
            text=spec.text,
            due_at=due_at,
            late_by_s=max(late, 0.0),
            grace_s=spec.grace_s,
            late_policy=spec.late,
            recurring=spec.at is None,
        ),
    )


class FireConsumer:
    """Fires a batch at a time: reminders due in the same second (a whole team's 9:00) are
    claimed together, their signals published in flight, and acked with one ack-all."""

    # Delivered fires are purged now and then, not after each one: only the stream's size
    # depends on it, and a purge per fire would halve the rate of a burst.
    CLEAR_EVERY_S = 30.0

    def __init__(self, ctx: Context, schedules: Schedules) -> None:
        self.ctx = ctx
        self.schedules = schedules
        self._cleared_at = 0.0

    async def run(self) -> None:
        """Until ``stop``; only once caught up, so every fire is judged against current knowledge."""
        await self.ctx.caught_up.wait()
        await self.ctx.bus.consume_batches(
            topics.INNER_FIRE, self.on_fires, durable=streams.INNER_REMINDERS, stream="REMINDERS",
            stop=self.ctx.stop, batch=FIRE_BATCH,
        )

    async def on_fires(self, batch: list[tuple[Msg, ReminderFire]]) -> None:
        events = [event for _, fire in batch if (event := self.claim(fire)) is not None]
        try:
            await asyncio.gather(
                *(self.ctx.bus.publish(topics.ledger_append("inner-plane"), e, deadline=10.0) for e in events)
            )
        except BusUnavailable as exc:
            raise LedgerAway(str(exc)) from exc  # the whole batch again: each claim is stored once
        if time.monotonic() - self._cleared_at > self.CLEAR_EVERY_S:
            self._cleared_at = time.monotonic()
            await quietly(self.schedules.clear_fired())

    def claim(self, fire: ReminderFire) -> Event | None:
        """The fire's claim (its reminder.due signal as an event), or None for a stale fire."""
        state = self.ctx.state
        reminder = state.reminders.get(fire.reminder_id)
        why = stale(reminder, fire)
        if why is not None:
            log.info("dropped the fire of reminder %s due %s: %s", fire.reminder_id, fire.due_at.isoformat(), why)
            return None
        assert reminder is not None
        signal = due_signal(reminder, fire)
        log.info(
            "reminder %s fired for %s (late by %.1f s)", reminder.id, fire.due_at.isoformat(), signal.payload.late_by_s
        )
        return signal_event(signal, conversation_id=state.current_conversation_id)
