"""What can go wrong on the bus, grouped by what the caller does about it.

- ``TRANSIENT``: NATS is not reachable right now; wait and try again.
- ``BusUnavailable``: we tried until our deadline and nobody answered.
- ``RemoteError``: the peer answered, with a domain error (``DomainError`` on its side).
- ``Retryable``: a handler's way to say "not now, deliver this again later".
"""

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

import nats.errors
import nats.js.errors

log = logging.getLogger(__name__)

TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    asyncio.TimeoutError,
    ConnectionError,
    OSError,
)


class Retryable(Exception):
    """A handler failure worth retrying later (a peer is down, a resource is busy)."""

    delay: float = 1.0


class RemoteError(Exception):
    """A request/reply peer answered with a domain error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BusUnavailable(Exception):
    """Nobody answered in time (the peer is down, or NATS is)."""


class DomainError(Exception):
    """Raised by a request handler to answer with ``{"error": {code, message}}``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def quietly(awaitable: Awaitable[Any]) -> None:
    """Await a clean-up whose failure changes nothing (an unsubscribe, a close)."""
    try:
        await awaitable
    except Exception as exc:
        log.debug("ignored: %r", exc)
