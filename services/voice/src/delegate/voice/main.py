"""Entry point. The Realtime bridge arrives with the voice issue; until then the service joins
the bus and answers ping as alive but not ready, so nothing mistakes it for a working voice."""

import asyncio

from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service

from .settings import Settings

SERVICE = "voice"
SKELETON = "skeleton: the Realtime bridge arrives with the voice issue"


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{settings.instance_name or SERVICE}")
    try:
        await bus.ensure_streams()
        # Alive but not ready: a skeleton must never say it is ready while it does nothing.
        await bus.serve_ping(SERVICE, ready=lambda: False, detail=SKELETON)
        await stop.wait()
    finally:
        await bus.close()


def run() -> None:
    run_service(SERVICE, Settings(), serve)
