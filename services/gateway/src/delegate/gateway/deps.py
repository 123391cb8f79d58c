"""What a route needs, as ``Annotated`` dependencies; the gateway's runtime context lives here."""

import asyncio
import logging
from typing import Annotated

from fastapi import Depends, Request

from delegate.runtime.bus import Bus

from .auth import OwnerAuth
from .errors import ApiError
from .fanout import Hub
from .settings import Settings

log = logging.getLogger(__name__)


class GatewayContext:
    """Everything a request or a WebSocket needs: settings, auth, the bus (once connected), the hub."""

    def __init__(self, settings: Settings, auth: OwnerAuth, bus: Bus | None = None) -> None:
        self.settings = settings
        self.auth = auth
        self.bus: Bus | None = None
        self.hub = Hub(queue_limit=settings.gateway_ws_queue_limit, tail_check_s=settings.gateway_tail_check_s)
        self._given_bus = bus
        self._owns_bus = bus is None
        self._connector: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect in the background: the gateway serves /healthz (and says what is missing) meanwhile."""
        if self._given_bus is not None:
            await self._attach(self._given_bus)
            return
        self._connector = asyncio.create_task(self._connect_forever())

    async def _connect_forever(self) -> None:
        attempt = 0
        while True:
            attempt += 1
            try:
                bus = await Bus.connect(self.settings.nats_url, self.settings.instance_name or "gateway")
            except Exception as exc:
                if attempt in (1, 10) or attempt % 60 == 0:
                    log.warning("cannot reach NATS at %s yet (attempt %d): %r", self.settings.nats_url, attempt, exc)
                await asyncio.sleep(min(0.25 * attempt, 2.0))
                continue
            try:
                await self._attach(bus)
            except Exception as exc:
                log.warning("NATS connected but setup failed (attempt %d): %r", attempt, exc)
                await bus.close()
                await asyncio.sleep(min(0.25 * attempt, 2.0))
                continue
            log.info("connected to NATS")
            return

    async def _attach(self, bus: Bus) -> None:
        await bus.ensure_streams()
        await self.hub.start(bus)
        self.bus = bus

    async def stop(self) -> None:
        if self._connector is not None:
            self._connector.cancel()
            await asyncio.gather(self._connector, return_exceptions=True)
        self.hub.close_all(1012, "gateway restarting")
        if self.bus is not None and self._owns_bus:
            await self.bus.close()
        self.bus = None

    def require_bus(self) -> Bus:
        # Only "never connected" fails fast: while NATS reconnects, publishes retry until their deadline.
        if self.bus is None:
            raise ApiError(503, "bus_unavailable", "the gateway is not connected to NATS right now")
        return self.bus


def get_context(request: Request) -> GatewayContext:
    ctx: GatewayContext = request.app.state.ctx
    return ctx


ContextDep = Annotated[GatewayContext, Depends(get_context)]


def get_settings(ctx: ContextDep) -> Settings:
    return ctx.settings


def get_bus(ctx: ContextDep) -> Bus:
    return ctx.require_bus()


SettingsDep = Annotated[Settings, Depends(get_settings)]
BusDep = Annotated[Bus, Depends(get_bus)]


def require_owner(request: Request, ctx: ContextDep) -> None:
    """Every /api/* route except sign-in: a Bearer token or the session cookie."""
    if ctx.auth.authenticate(request.headers, request.cookies) is None:
        raise ApiError(401, "unauthorized", "a valid owner token is required (Bearer header or session cookie)")
