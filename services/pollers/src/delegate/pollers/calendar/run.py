"""The calendar worker: find the calendars, answer ``pollers.cmd.calendar``, sync every
CALENDAR_POLL_S and raise the alerts that fall due in between.

A server that cannot be reached is retried with backoff, never fatal: the projection keeps
answering reads from what it last saw (the reply's ``synced_at`` says how fresh), and writes
answer "unavailable" until the server is back.
"""

import asyncio
import logging

from delegate.contracts import topics
from delegate.contracts.calendar import CalendarCommand, CalendarReply
from delegate.contracts.ids import utcnow
from delegate.runtime.bus import Bus, BusUnavailable, DomainError
from delegate.runtime.ledger_client import LedgerClient, LedgerUnavailable
from delegate.runtime.retry import sleep_unless

from ..health import Health
from ..settings import Settings
from .alerts import raise_due
from .auth import caldav_auth
from .desk import CalendarDesk
from .server import CalDav, CalendarUnavailable
from .store import Projection
from .sync import CalendarSync, Clock

log = logging.getLogger(__name__)
ALERT_EVERY_S = 5.0  # upcoming alerts are checked at least this often, between syncs
BACKOFF_MAX_S = 300.0


async def run_calendar(
    bus: Bus, settings: Settings, health: Health, stop: asyncio.Event, clock: Clock = utcnow
) -> None:
    health.calendar.enabled = True
    health.calendar.state = "connecting"
    projection = Projection(settings.runtime_data_dir / "calendar" / "projection.sqlite")
    dav = CalDav(settings, caldav_auth(settings))
    ledger = LedgerClient(bus, "pollers")
    sync = CalendarSync(bus, settings, dav, projection, ledger, clock)
    desk = CalendarDesk(sync, ledger)

    async def answer(cmd: CalendarCommand) -> CalendarReply:
        if cmd.op not in ("agenda", "free") and dav.write_url is None:
            raise DomainError("unavailable", "the calendar server has not been reached yet; try again shortly")
        return await desk.handle(cmd)

    await bus.serve(topics.POLLERS_CALENDAR, answer)
    try:
        await _connect(dav, health, stop)
        tick = min(ALERT_EVERY_S, settings.calendar_poll_s)
        next_sync = 0.0
        failures = 0
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            if loop.time() >= next_sync:
                try:
                    await sync.pass_once()
                    failures = 0
                    counts = f"{len(dav.calendars)} calendar(s), {projection.count()} occurrence(s)"
                    health.calendar.ok("synced", counts)
                    next_sync = loop.time() + settings.calendar_poll_s
                except (CalendarUnavailable, LedgerUnavailable, BusUnavailable) as exc:
                    # the pass is repeated from the stored token: what it published goes out again under the same ids
                    failures += 1
                    health.calendar.failing(str(exc))
                    log.warning("calendar sync failed (%d in a row): %s", failures, exc)
                    next_sync = loop.time() + min(settings.calendar_poll_s * 2 ** min(failures, 8), BACKOFF_MAX_S)
            try:
                await raise_due(sync)
            except Exception as exc:  # a publish that timed out: the next tick tries the same ids again
                log.warning("calendar alerts: %r", exc)
            wait = max(min(tick, next_sync - loop.time()), 0.05)
            if not await sleep_unless(stop, wait):
                return
    finally:
        await asyncio.to_thread(dav.close)
        projection.close()


async def _connect(dav: CalDav, health: Health, stop: asyncio.Event) -> None:
    delay = 1.0
    while not stop.is_set():
        try:
            await dav.discover()
            log.info("calendar: reading %s; writing to %s", ", ".join(dav.names.values()), dav.names.get(
                dav.write_url or "", dav.write_url))
            return
        except CalendarUnavailable as exc:
            health.calendar.failing(str(exc), state="connecting")
            log.warning("calendar: %s; trying again in %.0f s", exc, delay)
            if not await sleep_unless(stop, delay):
                return
            delay = min(delay * 2, BACKOFF_MAX_S)
