"""The pollers' channel state (IMAP, SMTP, SMS) for /api/state and /readyz, briefly cached.

A page polls /api/state; without the cache, pollers that are down would cost every poll the
whole request timeout. A reply (or its absence) is reused for a few seconds, and concurrent
callers share one request in flight.
"""

import asyncio
import logging
import time
from typing import Any

from delegate.contracts import topics
from delegate.contracts.channels import ChannelsStateRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 1.0  # under the agent's 2 s: asked alongside it, it never makes /api/state slower
FRESH_S = 2.0  # how long an answer is reused
MISSING_S = 5.0  # how long "the pollers did not answer" is reused


class ChannelsCache:
    def __init__(self) -> None:
        self._value: dict[str, Any] | None = None
        self._until = 0.0
        self._bus: Bus | None = None
        self._inflight: asyncio.Task[dict[str, Any] | None] | None = None

    async def get(self, bus: Bus) -> dict[str, Any] | None:
        """``ChannelsState`` as JSON, or None when the pollers do not answer."""
        now = time.monotonic()
        if bus is self._bus and now < self._until:
            return self._value
        if self._inflight is None or self._bus is not bus:
            self._bus = bus
            self._inflight = asyncio.ensure_future(self._ask(bus))
        task = self._inflight
        try:
            # shield: one caller going away (a closed page) must not cancel the others' answer
            return await asyncio.shield(task)
        finally:
            if task.done() and self._inflight is task:
                self._inflight = None

    async def _ask(self, bus: Bus) -> dict[str, Any] | None:
        value: dict[str, Any] | None
        try:
            reply = await bus.request(topics.POLLERS_STATE, ChannelsStateRequest(), timeout=REQUEST_TIMEOUT_S)
            value = reply.model_dump(mode="json", exclude={"error"})
            ttl = FRESH_S
        except (BusUnavailable, RemoteError) as exc:
            log.debug("pollers state unavailable: %s", exc)
            value, ttl = None, MISSING_S
        except Exception as exc:  # e.g. a reply from a newer pollers: detail, never a failed /api/state
            log.warning("pollers state unreadable: %r", exc)
            value, ttl = None, MISSING_S
        self._value, self._until = value, time.monotonic() + ttl
        return value
