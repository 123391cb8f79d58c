"""What a route needs, as ``Annotated`` dependencies; the gateway's runtime context lives here."""

import asyncio
import logging
from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Request

from delegate.runtime.bus import Bus
from delegate.runtime.retry import Backoff
from delegate.runtime.webpush import PushStore

from .auth import SAFE_METHODS, OwnerAuth, Proof
from .courier import Courier
from .errors import ApiError
from .fanout import Hub
from .settings import Settings
from .sign_in import SessionsUnavailable

log = logging.getLogger(__name__)

JSON_TYPE = "application/json"
# NDJSON (POST /api/import) under the names clients use; none is a CORS "simple" type either.
JSON_TYPES = frozenset({JSON_TYPE, "application/x-ndjson", "application/ndjson", "application/jsonl"})


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
        # Twilio's webhooks are stored here first and delivered when the bus is there (``courier``).
        self.courier = Courier(settings, lambda: self.bus)
        self.push = PushStore()  # Web Push subscriptions (push_api)

    async def start(self) -> None:
        """Connect in the background: the gateway serves /healthz (and says what is missing) meanwhile."""
        await self.courier.start()
        if self._given_bus is not None:
            await self._attach(self._given_bus)
            return
        self._connector = asyncio.create_task(self._connect_forever())

    async def _connect_forever(self) -> None:
        # Until stop() cancels it: the gateway is useless without NATS, and says so on /readyz.
        backoff = Backoff(initial=0.25, maximum=2.0)
        while True:
            try:
                bus = await Bus.connect(
                    self.settings.nats_url, self.settings.instance_name or "gateway", settings=self.settings
                )
            except Exception as exc:
                if backoff.failures in (0, 9) or (backoff.failures + 1) % 60 == 0:
                    log.warning(
                        "cannot reach NATS at %s yet (attempt %d): %r",
                        self.settings.nats_url, backoff.failures + 1, exc,
                    )
                await backoff.sleep()
                continue
            try:
                await self._attach(bus)
            except Exception as exc:
                log.warning("NATS connected but setup failed (attempt %d): %r", backoff.failures + 1, exc)
                await bus.close()
                await backoff.sleep()
                continue
            log.info("connected to NATS")
            return

    async def _attach(self, bus: Bus) -> None:
        await bus.ensure_streams()
        await self.auth.sessions.open(bus)
        await self.push.open(bus)
        await self.hub.start(bus)
        self.bus = bus
        self.courier.wake()  # what webhooks spooled before the first connection goes out now

    async def stop(self) -> None:
        if self._connector is not None:
            self._connector.cancel()
            await asyncio.gather(self._connector, return_exceptions=True)
        self.hub.stop()
        self.hub.close_all(1012, "gateway restarting")
        await self.courier.stop()
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


def require_json_body(method: str, headers: Mapping[str, str]) -> None:
    """A write carrying a body must say it is JSON: no ``text/plain`` or form posts (415).

    Those are the bodies a foreign page can send without a CORS preflight; refusing them closes
    the "simple request" road to CSRF, beside the Origin check.
    """
    if method not in ("POST", "PUT", "PATCH", "DELETE"):
        return
    content_type = headers.get("content-type")
    if content_type is None:
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
            raise ApiError(415, "unsupported_media_type", "send the body as application/json")
        return
    if content_type.split(";", 1)[0].strip().lower() not in JSON_TYPES:
        raise ApiError(415, "unsupported_media_type", "send the body as application/json")


def check_cookie_origin(ctx: GatewayContext, request: Request) -> None:
    """A request on the strength of the cookie must be sent to one of our own names (DNS
    rebinding), and a state-changing one must come from our own page (CSRF)."""
    if not ctx.auth.host_allowed(request.headers):
        raise ApiError(403, "forbidden_host", "this Host is not one of this gateway's names (set PUBLIC_BASE_URL)")
    if request.method not in SAFE_METHODS and not ctx.auth.origin_allowed(request.headers, required=True):
        raise ApiError(403, "forbidden_origin", "this page's origin may not use the session")


async def require_owner(request: Request, ctx: ContextDep) -> Proof:
    """Every /api/* route except sign-in: a Bearer token, or the session cookie from our own page."""
    try:
        proof = await ctx.auth.authenticate(request.headers, request.cookies)
    except SessionsUnavailable as exc:
        raise ApiError(503, "bus_unavailable", "sign-in sessions cannot be checked right now") from exc
    if proof is None:
        raise ApiError(401, "unauthorized", "a valid owner token is required (Bearer header or session cookie)")
    if proof == "cookie":
        check_cookie_origin(ctx, request)
    require_json_body(request.method, request.headers)
    return proof

