"""``python -m delegate.memory``: settings -> bus -> the memory service until SIGTERM.

``python -m delegate.memory rebuild`` removes the index and replays the whole ledger into a
new one, then exits (stop the service first: it keeps writing to the file it opened).
"""

import asyncio
import logging
import sys

from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service

from .index import remove_files
from .service import SERVICE, MemoryService
from .settings import Settings

log = logging.getLogger(__name__)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{settings.instance_name or SERVICE}", settings=settings)
    service: MemoryService | None = None
    try:
        await bus.ensure_streams()
        service = MemoryService(settings, bus, stop)
        await service.start()
        ended = [asyncio.create_task(stop.wait()), asyncio.create_task(service.failed.wait())]
        await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
        for waiter in ended:
            waiter.cancel()
        if service.failed.is_set():
            raise SystemExit(1)  # the supervisor (make run, compose) restarts us
    finally:
        if service is not None:
            await service.close()
        await bus.close()


async def rebuild(settings: Settings, stop: asyncio.Event) -> None:
    remove_files(settings.index_path)
    name = f"{SERVICE}:{settings.instance_name or SERVICE}-rebuild"
    bus = await Bus.connect(settings.nats_url, name, settings=settings)
    try:
        service = MemoryService(settings, bus, stop, extract=False)
        await service.follower.catch_up()
        log.info("index rebuilt through seq %d: %s", service.index.last_seq, service.index.counts())
        service.index.close()
    finally:
        await bus.close()


def run() -> None:
    if sys.argv[1:] == ["rebuild"]:
        run_service(SERVICE, Settings(), rebuild)
        return
    if sys.argv[1:]:
        sys.exit("usage: python -m delegate.memory [rebuild]")
    run_service(SERVICE, Settings(), serve)
