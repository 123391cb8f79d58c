"""The stand-in listens before its app is built, and builds it when the first request comes.

Its routes, engine and schemas (about a hundred modules and OpenAI's spec) are not what a start
needs: in a host (offline ``make run``) they were a quarter of a second of the one core every
service's start shares, spent before any service could answer. So the server takes connections
at once, and a request that comes before the app is built waits for it, never refused: the
first one starts the build, every one that comes meanwhile waits for the same build.

The build runs in a thread, as the services load the OpenAI SDK after their start (the
runtime's lazily loaded OpenAI client): on the event loop it would hold up every other service
of a host while it imports.
"""

import asyncio
import logging
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)


class DeferredApp:
    """An ASGI app standing for the one ``build`` makes, which it makes on the first request."""

    def __init__(self, build: Callable[[], ASGIApp]) -> None:
        self._build = build
        self._app: ASGIApp | None = None
        self._building: asyncio.Future[ASGIApp] | None = None

    @property
    def built(self) -> bool:
        return self._app is not None

    async def app(self) -> ASGIApp:
        """The built app, building it first if no request has yet."""
        if self._app is not None:
            return self._app
        if self._building is None:
            log.info("building the app for its first request")
            self._building = asyncio.get_running_loop().run_in_executor(None, self._build)
        # Shielded: a client that leaves while it waits must not cancel the others' build.
        app = await asyncio.shield(self._building)
        self._app = app
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        await (await self.app())(scope, receive, send)


async def _lifespan(receive: Receive, send: Send) -> None:
    """The stand-in has nothing to start or stop with the server: it says so at once (its
    FastAPI app, with no lifespan handlers, answered the same)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
