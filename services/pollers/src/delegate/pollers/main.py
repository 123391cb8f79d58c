"""``python -m delegate.pollers``: email in (the inbox), the outbox (SMS, email, MMS media) and
the calendar (CalDAV) until SIGTERM.

Ready only when it does its job: the outbox consumers run (``health.running``, set by the
outbox) and, when IMAP is configured, the inbox is connected. A worker that ends by itself is
a failure: the process exits non-zero and its supervisor restarts it.
"""

import asyncio
import logging
from collections.abc import Awaitable

from delegate.contracts import topics
from delegate.contracts.channels import ChannelsState, ChannelsStateRequest
from delegate.contracts.messages import Ping, Pong
from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service

from . import mail_oauth
from .health import Health
from .imap_session import ImapConfigError, check_settings
from .inbox import run_inbox
from .outbox import run_outbox
from .settings import Settings

SERVICE = "pollers"
log = logging.getLogger(__name__)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    if settings.email_enabled:
        try:
            check_settings(settings)
        except ImapConfigError as exc:
            log.error("%s", exc)  # a setting that can never work stops the start, loudly
            raise SystemExit(2) from None
    if problems := mail_oauth.check_settings(settings):
        log.error("mail OAuth2 settings: %s", "; ".join(problems))
        raise SystemExit(2)
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{settings.instance_name or SERVICE}", settings=settings)
    health = Health()
    try:
        await bus.ensure_streams()

        async def state(_: ChannelsStateRequest) -> ChannelsState:
            return health.state()

        await bus.serve(topics.POLLERS_STATE, state)
        await _serve_ping(bus, health)
        if not settings.email_enabled:
            log.info("IMAP_HOST unset: email in is off")
        workers: dict[str, Awaitable[object]] = {"outbox": run_outbox(bus, settings, health, stop)}
        if settings.email_enabled:
            workers["inbox"] = run_inbox(bus, settings, health, stop)
        if settings.calendar_enabled:
            # imported here, outside __main__'s guard against unused extras: recurring-ical-events
            # needs x-wr-timezone, which imports click for its command line at module level
            from .calendar.run import run_calendar

            workers["calendar"] = run_calendar(bus, settings, health, stop)
            if settings.contacts_enabled:
                from .contacts.run import run_contacts

                workers["contacts"] = run_contacts(bus, settings, stop)
        else:
            log.info("CALDAV_URL unset: the calendar is off")
        tasks: dict[asyncio.Future[object], str] = {asyncio.ensure_future(work): name for name, work in workers.items()}
        stopping: asyncio.Future[object] = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
        # a worker returning or raising while nobody asked it to stop is the failure we exit on
        ended = [] if stop.is_set() else [tasks[t] for t in done if t in tasks]
        for task in done:
            if task in tasks and not task.cancelled() and task.exception() is not None:
                log.error("%s failed", tasks[task], exc_info=task.exception())
        stopping.cancel()
        stop.set()  # the other workers end too before we exit
        await asyncio.wait(list(tasks), timeout=10.0)
        for task in tasks:
            task.cancel()
        if ended:
            log.error("worker ended by itself: %s", ", ".join(ended))
            raise SystemExit(1)  # the supervisor (make run, compose) restarts us
    finally:
        await bus.close()


async def _serve_ping(bus: Bus, health: Health) -> None:
    query = topics.PINGS[SERVICE]

    async def pong(_: Ping) -> Pong:
        # detail is computed per ping (serve_ping takes a fixed string): it says what is not working
        return Pong(service=SERVICE, instance=bus.service, ready=health.ready, detail=health.detail())

    await bus.serve(query, pong)


def run() -> None:
    run_service(SERVICE, Settings(), serve)
