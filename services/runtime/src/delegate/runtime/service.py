"""One way to run a bus service: settings -> logging -> loop until SIGTERM/SIGINT -> drain."""

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import uvloop

from .exits import exit_now
from .logs import SERVICE_NAME, configure_logging
from .settings import ServiceSettings

log = logging.getLogger(__name__)

S = TypeVar("S", bound=ServiceSettings)


def hosted() -> bool:
    """Whether this service runs beside others in one host process (``delegate.host``): it must
    then end by returning or raising, never by ending the process."""
    return SERVICE_NAME.get() is not None


def exit_unless_stopped_within(seconds: float) -> None:
    """Arm a watchdog: if the process still runs ``seconds`` from now, it exits at once.

    A stop waits on the bus (the last events, a lease's release) and on threads; with NATS gone
    those waits could outlast whoever asked us to stop. Past the grace the process ends as if
    killed, which every service survives by design (nothing acked is lost, nothing repeats).
    """

    def give_up() -> None:
        log.warning("did not stop within %.1f s of the signal; exiting without finishing", seconds)
        # What still ran, in the log (stderr goes there): the thread a stop waited on.
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        logging.shutdown()
        os._exit(1)

    watchdog = threading.Timer(seconds, give_up)
    watchdog.daemon = True
    watchdog.start()


def run_service(name: str, settings: S, serve: Callable[[S, asyncio.Event], Awaitable[None]]) -> None:
    """Run ``serve(settings, stop)``; ``stop`` is set by SIGTERM or SIGINT, and the process
    ends within ``settings.stop_grace_s`` of it however the stop goes."""
    configure_logging(name, settings.log_level)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if not stop.is_set():
                exit_unless_stopped_within(settings.stop_grace_s)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        log.info("starting")
        await serve(settings, stop)
        log.info("stopped")

    # uvloop: the same asyncio API with a libuv loop; callbacks, socket reads and queue
    # hand-offs are what every message costs here, and it makes them markedly cheaper.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
        exit_now(0)  # before the runner's close, which waits for its executor (see exit_now)
