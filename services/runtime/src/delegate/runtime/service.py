"""One way to run a bus service: settings -> logging -> loop until SIGTERM/SIGINT -> drain."""

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import uvloop

from .logs import configure_logging
from .settings import ServiceSettings

log = logging.getLogger(__name__)

S = TypeVar("S", bound=ServiceSettings)


def run_service(name: str, settings: S, serve: Callable[[S, asyncio.Event], Awaitable[None]]) -> None:
    """Run ``serve(settings, stop)``; ``stop`` is set by SIGTERM or SIGINT."""
    configure_logging(name, settings.log_level)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("starting")
        await serve(settings, stop)
        log.info("stopped")

    # uvloop: the same asyncio API with a libuv loop; callbacks, socket reads and queue
    # hand-offs are what every message costs here, and it makes them markedly cheaper.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
