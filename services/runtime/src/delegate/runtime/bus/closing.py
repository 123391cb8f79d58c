"""Closing a NATS connection within a bound, whatever the server does meanwhile.

nats-py's ``drain()`` takes a cancellation as "stop waiting for the subscriptions" and goes on
to flush, waiting up to 10 s for the server's PONG, and only then closes. ``asyncio.wait_for``
cancels it at its timeout and then waits for all of that: with a server that had stopped
answering, a bus's close took 5 s of drain and 10 s of flush, and an in-process gateway's stop
went past 15 s once in a full run of the suite (tests/gateway/test_frame_fuzz.py).
"""

import asyncio
import logging

from nats.aio.client import Client

from .errors import quietly

log = logging.getLogger(__name__)

# Long enough for the subscriptions to hand over what they hold and for what was published to
# go out, on a loaded machine; a server that answers drains in milliseconds.
DRAIN_S = 5.0
# The close after a drain that did not finish: it writes what is still buffered to the socket.
CLOSE_S = 1.0


async def drain_within(nc: Client, seconds: float = DRAIN_S) -> None:
    """Drain ``nc``; if that has not finished in ``seconds`` (or failed), close it instead."""
    draining = asyncio.ensure_future(nc.drain())
    await asyncio.wait({draining}, timeout=seconds)
    if draining.done() and not draining.cancelled() and draining.exception() is None:
        return
    if not draining.done():
        log.warning("the NATS connection did not drain within %.1f s: closing it", seconds)
    await _ended(draining)
    closing = asyncio.ensure_future(quietly(nc.close()))
    await asyncio.wait({closing}, timeout=CLOSE_S)
    await _ended(closing)


async def _ended(task: "asyncio.Future[None]") -> None:
    """Cancel ``task`` until it has ended: nats-py's drain swallows a cancellation and goes on
    to its flush, which the next one ends."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if not task.cancelled():
        task.exception()  # retrieved: a drain that failed (NATS away) is what the close is for
