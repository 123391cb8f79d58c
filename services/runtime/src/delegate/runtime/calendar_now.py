""""Now" from the owner's calendar: the rest of today's events, bounded, for a model's
instructions (the agent's text turns and voice's session instructions), like the capsule.

The pollers own the calendar projection (``pollers.cmd.calendar``); this asks them for today's
remaining events and keeps the answer for a short while, so a turn never waits on it: the
section is read from the cache, and a stale cache is refreshed in the background (or awaited
with a short bound where the caller can afford it, such as a session being prepared).
"""

import asyncio
import logging
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from delegate.contracts import topics
from delegate.contracts.calendar import CalendarCommand, CalendarEntry

from .bus import Bus, BusUnavailable, RemoteError

log = logging.getLogger(__name__)
MAX_EVENTS = 8  # bounded like the capsule: the agenda tool has the rest
FRESH_S = 30.0
ASK_TIMEOUT_S = 1.0
# After a failed ask, the next one waits this long: with the pollers away, every turn would
# otherwise wait its bound for them.
RETRY_S = 5.0


class CalendarNow:
    def __init__(self, bus: Bus, timezone: str, enabled: bool) -> None:
        self.bus, self.enabled = bus, enabled
        try:
            self.zone = ZoneInfo(timezone or "UTC")
        except (ZoneInfoNotFoundError, ValueError):
            self.zone = ZoneInfo("UTC")
        self._events: list[CalendarEntry] | None = None
        self._more = False
        self._at = 0.0
        self._refreshing: asyncio.Task[None] | None = None

    def section(self, now: datetime) -> str | None:
        """The cached section (None: no calendar, or nothing known yet); refreshes it when stale."""
        if not self.enabled:
            return None
        if time.monotonic() - self._at > FRESH_S and (self._refreshing is None or self._refreshing.done()):
            self._refreshing = asyncio.ensure_future(self.refresh(now))
        if self._events is None:
            return None
        return today_section(self._events, self._more, now, self.zone)

    async def ready(self, now: datetime, timeout: float = 0.3) -> str | None:
        """The section, refreshed first when stale (waiting at most ``timeout``)."""
        if self.enabled and time.monotonic() - self._at > FRESH_S:
            try:
                await asyncio.wait_for(asyncio.shield(self.refresh(now)), timeout)
            except TimeoutError:
                pass
        return self.section(now)

    async def refresh(self, now: datetime) -> None:
        local = now.astimezone(self.zone)
        end = datetime.combine(local.date() + timedelta(days=1), datetime.min.time(), self.zone)
        try:
            reply = await self.bus.request(
                topics.POLLERS_CALENDAR,
                CalendarCommand(op="agenda", start=now, end=end, limit=MAX_EVENTS),
                timeout=ASK_TIMEOUT_S,
            )
        except (BusUnavailable, RemoteError) as exc:
            log.debug("today's calendar not available: %r", exc)
            self._at = time.monotonic() - FRESH_S + RETRY_S  # what was known stays in use
            return
        self._events, self._more, self._at = list(reply.events), reply.more, time.monotonic()


def today_section(events: list[CalendarEntry], more: bool, now: datetime, zone: ZoneInfo) -> str:
    """The section as the model reads it."""
    if not events:
        return f"Today's calendar ({zone.key}): nothing else today."
    lines = [f"Today's calendar ({zone.key}; calendar_agenda for more, uids for moves):"]
    for entry in events:
        if entry.all_day:
            when = "all day"
        else:
            when = f"{entry.start.astimezone(zone):%H:%M}-{entry.end.astimezone(zone):%H:%M}"
            if entry.start <= now:
                when += " (now)"
        line = f"- {when} {entry.summary or '(no title)'}"
        if entry.location:
            line += f" at {entry.location}"
        if entry.attendees:
            line += " with " + ", ".join(entry.attendees[:5])
        lines.append(line[:300])
    if more:
        lines.append("- ... and more later today")
    return "\n".join(lines)
