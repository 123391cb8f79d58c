"""Entry point. The Realtime bridge arrives with the voice issue; until then the service
joins the bus and reports ready so the system's shape (and /readyz) is complete."""

import asyncio

from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service

from .settings import Settings

SERVICE = "voice"


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    bus = await Bus.connect(settings.nats_url, settings.instance_name or SERVICE)
    try:
        await bus.ensure_streams()
        await bus.serve_ping(SERVICE)
        await stop.wait()
    finally:
        await bus.close()


def run() -> None:
    run_service(SERVICE, Settings(), serve)
