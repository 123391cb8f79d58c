"""``python -m tests.pollers.outbox_runner``: only the pollers' outbox, as its own process, so a
test can SIGKILL it mid-send without depending on the whole pollers service."""

import asyncio

from delegate.pollers.health import Health
from delegate.pollers.outbox import run_outbox
from delegate.pollers.settings import Settings
from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    bus = await Bus.connect(settings.nats_url, "pollers:outbox-runner")
    try:
        await bus.ensure_streams()
        await run_outbox(bus, settings, Health(), stop)
    finally:
        await bus.close()


if __name__ == "__main__":
    run_service("pollers", Settings(), serve)
