"""``python -m delegate.inner_plane``: settings -> bus -> the inner plane until SIGTERM."""

import asyncio
import logging
import os
import threading

from delegate.runtime.bus import MESSAGE_SCHEDULES, Bus, start_when_server_suits
from delegate.runtime.service import hosted, run_service
from delegate.runtime.settings_check import load_settings

from .model import Model
from .plane import InnerPlane
from .settings import Settings

log = logging.getLogger(__name__)

SERVICE = "inner-plane"
EXIT_DEADLINE_S = 10.0


def _exit_now() -> None:
    log.error("clean-up after a failed worker did not finish in %.0f s; exiting now", EXIT_DEADLINE_S)
    logging.shutdown()
    os._exit(1)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{settings.instance_name or SERVICE}", settings=settings)
    model = Model(settings)
    watchdog: threading.Timer | None = None
    try:
        # Reminders are JetStream message schedules: an older server would take them and never fire.
        if not await start_when_server_suits(bus, SERVICE, [MESSAGE_SCHEDULES], stop):
            return
        await bus.ensure_streams()
        plane = InnerPlane(settings, bus, model, stop)
        await plane.start()
        await bus.serve_ping(SERVICE, ready=plane.ready)
        ended = [asyncio.create_task(stop.wait()), asyncio.create_task(plane.failed.wait())]
        await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
        for waiter in ended:
            waiter.cancel()
        if plane.failed.is_set():
            # The supervisor (make run, compose) restarts us. Leave even if a clean-up below
            # hangs (one CI run saw a failed plane linger after its worker ended): a process
            # that answers nothing must not stay up; the ledger holds everything it knew.
            # A thread, not the loop: it also fires if the hang is in the interpreter's exit.
            # Cancelled once the clean-up is done: a host process (``delegate.host``) running
            # other services restarts this one instead of exiting.
            watchdog = threading.Timer(EXIT_DEADLINE_S, _exit_now)
            watchdog.daemon = True
            watchdog.start()
            raise SystemExit(1)
        await plane.stop()
    finally:
        await bus.close()
        await model.close()
        if watchdog is not None and hosted():
            watchdog.cancel()


def run() -> None:
    run_service(SERVICE, load_settings(SERVICE, Settings), serve)
