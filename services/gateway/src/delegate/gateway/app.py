"""``create_app(settings, bus=None)``: the whole gateway as one FastAPI app.

The lifespan owns the bus: it connects (in the background, so /healthz answers
while NATS is still coming up), ensures the streams and starts the fan-out hub.
Pass ``bus`` to reuse a connection someone else owns.
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from delegate.runtime.bus import Bus

from . import (
    browser_call_ws,
    budget_api,
    call_ws,
    chat_ws,
    http,
    import_api,
    memory_api,
    people_api,
    push_api,
    reminders_api,
    runs_api,
    signals_api,
    tasks_api,
    tools_api,
    twilio_amd,
    twilio_voice,
    twilio_webhooks,
    usage_api,
)
from .auth import OwnerAuth, load_or_create_token
from .channels import ChannelsCache
from .deps import GatewayContext
from .errors import install_error_handlers
from .importing.job import Imports
from .logs import install_secret_redaction
from .openapi import install_openapi
from .security import SecurityHeaders
from .settings import Settings


class ClientFiles(StaticFiles):
    """``client/`` as static files; a missing folder is a 404, not a crash (it may not exist yet)."""

    async def check_config(self) -> None:
        if self.directory is not None and not await anyio.to_thread.run_sync(os.path.isdir, self.directory):
            return
        await super().check_config()


def create_app(settings: Settings, bus: Bus | None = None) -> FastAPI:
    token = (
        settings.delegate_token.get_secret_value()
        if settings.delegate_token is not None
        else load_or_create_token(settings.runtime_data_dir, announce=settings.gateway_announce_token)
    )
    install_secret_redaction(token)
    ctx = GatewayContext(settings, OwnerAuth(token, settings), bus)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await ctx.start()
        try:
            yield
        finally:
            await ctx.stop()

    app = FastAPI(title="Delegate gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.ctx = ctx
    app.state.channels = ChannelsCache()
    app.state.imports = Imports()
    install_error_handlers(app)
    app.add_middleware(SecurityHeaders)
    app.include_router(http.public)
    app.include_router(http.api)
    app.include_router(chat_ws.router)
    app.include_router(twilio_webhooks.router)
    app.include_router(twilio_voice.router)
    app.include_router(twilio_amd.router)
    app.include_router(call_ws.router)
    app.include_router(browser_call_ws.router)
    app.include_router(signals_api.router)
    app.include_router(reminders_api.router)
    app.include_router(memory_api.router)
    app.include_router(people_api.router)
    app.include_router(import_api.router)
    app.include_router(runs_api.router)
    app.include_router(tasks_api.router)
    app.include_router(tools_api.router)
    app.include_router(usage_api.router)
    app.include_router(budget_api.router)
    app.include_router(push_api.router)
    install_openapi(app)  # GET /api/openapi.json: every route above, with its bodies and error shapes
    # Later routers (/api/tasks) are included here.
    # Static files last: every route above wins over a file of the same name.
    app.mount("/", ClientFiles(directory=settings.client_dir, html=True, check_dir=False), name="client")
    return app
