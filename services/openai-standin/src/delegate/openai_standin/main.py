"""Process entry point: settings -> logging -> uvicorn, listening before the app is built
(``deferred``)."""

import asyncio
import contextlib
import logging
from collections.abc import Generator

import uvicorn
from starlette.types import ASGIApp

from delegate.openai_standin.deferred import DeferredApp
from delegate.openai_standin.settings import Settings


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s openai-standin %(name)s: %(message)s",
    )


class _HostedServer(uvicorn.Server):
    """uvicorn on a host's loop (``delegate.host``, offline ``make run``): the host handles signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def build(settings: Settings) -> ASGIApp:
    """The stand-in's app, routes, engine and schemas: imported here, on its first request."""
    from delegate.openai_standin.app import create_app
    from delegate.openai_standin.streaming import install_drop_log_filter

    install_drop_log_filter()
    return create_app(settings)


def deferred(settings: Settings) -> DeferredApp:
    return DeferredApp(lambda: build(settings))


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """The stand-in beside the services in one host process, until ``stop``."""
    server = _HostedServer(uvicorn.Config(
        deferred(settings), host=settings.standin_host, port=settings.standin_port,
        log_level=settings.log_level.lower(), timeout_graceful_shutdown=1, log_config=None,
    ))

    async def exit_on_stop() -> None:
        await stop.wait()
        server.should_exit = True

    stopper = asyncio.create_task(exit_on_stop())
    try:
        await server.serve()
    finally:
        stopper.cancel()
    if not stop.is_set():
        raise RuntimeError("the stand-in's HTTP server ended without being asked to stop")


def run() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    uvicorn.run(
        deferred(settings),
        host=settings.standin_host,
        port=settings.standin_port,
        log_level=settings.log_level.lower(),
        # Stalled requests (scripted) must not hold shutdown hostage.
        timeout_graceful_shutdown=1,
        log_config=None,  # keep our format (service name on every line)
    )
