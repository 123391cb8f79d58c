"""Entry point. IMAP/SMTP sources arrive with the email issue; until then the service joins
the bus, says whether email is configured, and answers ping as alive but not ready."""

import asyncio
import logging

from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service

from .settings import Settings

SERVICE = "pollers"
SKELETON = "skeleton: IMAP/SMTP arrive with the email issue"
log = logging.getLogger(__name__)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{settings.instance_name or SERVICE}")
    try:
        await bus.ensure_streams()
        # Alive but not ready: a skeleton must never say it is ready while it does nothing.
        await bus.serve_ping(SERVICE, ready=lambda: False, detail=SKELETON)
        if not settings.email_enabled:
            log.info("IMAP_HOST unset: email channel off")
        await stop.wait()
    finally:
        await bus.close()


def run() -> None:
    run_service(SERVICE, Settings(), serve)
