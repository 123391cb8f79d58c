"""``python -m delegate.inner_plane``: settings -> bus -> the inner plane until SIGTERM."""

import asyncio

from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service

from .model import Model
from .plane import InnerPlane
from .settings import Settings

SERVICE = "inner-plane"


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{settings.instance_name or SERVICE}")
    model = Model(settings)
    try:
        await bus.ensure_streams()
        plane = InnerPlane(settings, bus, model, stop)
        await plane.start()
        await bus.serve_ping(SERVICE, ready=plane.ready)
        ended = [asyncio.create_task(stop.wait()), asyncio.create_task(plane.failed.wait())]
        await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
        for waiter in ended:
            waiter.cancel()
        if plane.failed.is_set():
            raise SystemExit(1)  # the supervisor (make run, compose) restarts us
        await plane.stop()
    finally:
        await bus.close()
        await model.close()


def run() -> None:
    run_service(SERVICE, Settings(), serve)
