"""Reminders and timers: the inner plane owns them, the ledger holds them, JetStream keeps time.

- ``recurrence``: the next occurrence of a one-shot, an RRULE or a cron, in a timezone;
- ``store``: reminders derived from the committed ``reminder.*`` and ``reminder.due`` events;
- ``commands``: the ``inner.cmd.reminders`` server (set, list, change, cancel);
- ``schedules``: one JetStream message schedule per active reminder, republished on start;
- ``fires``: the REMINDERS consumer, which claims each due occurrence in the ledger once.

``Reminders`` is the component the plane runs: ``on_event`` for every committed event in seq
order, a command server, and two workers (the scheduler and the fire consumer).
"""

import asyncio
import contextlib
from collections.abc import Callable

from delegate.contracts import topics
from delegate.contracts.events import Event

from ..context import Context
from .commands import ReminderDesk
from .fires import FireConsumer
from .schedules import Scheduler, Schedules
from .store import apply

__all__ = ["Reminders"]


class Reminders:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.schedules = Schedules(ctx.bus)
        self.scheduler = Scheduler(ctx, self.schedules)
        self.fires = FireConsumer(ctx, self.schedules)
        self.desk = ReminderDesk(ctx)
        self._consumer: asyncio.Task[None] | None = None

    def on_event(self, event: Event) -> None:
        reminders = self.ctx.state.reminders
        changed = apply(reminders, event)
        if changed is not None:
            self.scheduler.changed(reminders[changed])
        self.desk.applied(event)

    async def start(self, worker_ended: Callable[["asyncio.Task[None]"], None]) -> None:
        """Serve the commands and start the workers; ``worker_ended`` hears of one that stops."""
        bus = self.ctx.bus
        await bus.serve(topics.INNER_REMINDERS, self.desk.handle)
        bus.spawn(self.scheduler.run()).add_done_callback(worker_ended)
        self._consumer = bus.spawn(self.fires.run())
        self._consumer.add_done_callback(worker_ended)

    async def stop(self) -> None:
        """Let the fire consumer leave its pull loop by itself (it watches ``stop``)."""
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._consumer), timeout=2.0)
