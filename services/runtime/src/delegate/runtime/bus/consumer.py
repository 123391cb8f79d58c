"""``Bus.consume``: a durable pull consumer that hands over one message at a time, in order.

The ack policy, once for every service: success -> ack; undecodable -> dead letter
(+ term); ``Retryable`` -> nak with its delay; anything else -> nak with a growing delay
until ``max_deliver`` deliveries, then dead letter (+ term).
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from pydantic import ValidationError

from delegate.contracts.topics import Topic
from delegate.runtime.validation import describe

from ..retry import Backoff
from .acks import ack, nak
from .errors import Retryable, quietly

log = logging.getLogger(__name__)

M = TypeVar("M")

# Parks a message for good: (consumer, message, reason); ``Bus.dead_letter``.
DeadLetter = Callable[[str, Msg, str], Awaitable[None]]

FETCH_TIMEOUT = 0.5  # seconds one fetch waits; also how soon ``stop`` is noticed


async def consume(
    js: JetStreamContext,
    dead_letter: DeadLetter,
    topic: Topic[M],
    handler: Callable[[M, Msg], Awaitable[None]],
    *,
    durable: str,
    stream: str,
    stop: asyncio.Event,
    ack_wait: float,
    max_deliver: int,
) -> None:
    """Fetch, decode and settle one message after the other until ``stop`` is set."""
    config = ConsumerConfig(
        durable_name=durable,
        ack_wait=ack_wait,
        max_deliver=max_deliver,
        max_ack_pending=1000,
        deliver_policy=DeliverPolicy.ALL,
        filter_subject=topic.subject,
    )
    psub: Any = None
    backoff = Backoff(initial=0.1, maximum=1.0)
    try:
        while not stop.is_set():
            try:
                if psub is None:
                    psub = await js.pull_subscribe(topic.subject, durable=durable, stream=stream, config=config)
                msgs = await psub.fetch(1, timeout=FETCH_TIMEOUT)
                backoff.reset()
            except nats.errors.TimeoutError:
                continue
            except Exception as exc:  # NATS restarting, stream not created yet, consumer lost: go on
                failures = backoff.failures + 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("pull from %s failed (%d): %r", durable, failures, exc)
                if psub is not None and failures % 5 == 0:  # rebuild the subscription now and then
                    await quietly(psub.unsubscribe())
                    psub = None
                await backoff.sleep(stop)
                continue
            for raw in msgs:
                try:
                    decoded = topic.decode(raw.data)
                except ValidationError as exc:
                    await dead_letter(durable, raw, f"undecodable: {describe(exc)}")
                    continue
                await _settle(dead_letter, durable, raw, handler(decoded, raw), max_deliver)
    finally:
        # Also on cancellation: a pull subscription left behind stalls drain() on close.
        if psub is not None:
            await quietly(psub.unsubscribe())


async def _settle(dead_letter: DeadLetter, durable: str, raw: Msg, call: Awaitable[None], max_deliver: int) -> None:
    try:
        await call
    except Retryable as exc:
        log.info("%s: retry later: %s", durable, exc)
        await nak(raw, delay=exc.delay)
        return
    except Exception as exc:
        delivered = raw.metadata.num_delivered if raw.metadata else 1
        if delivered >= max_deliver:
            log.exception("%s: giving up after %d deliveries", durable, delivered)
            await dead_letter(durable, raw, f"handler failed {delivered} times: {exc!r}")
        else:
            log.warning("%s: handler failed (delivery %d): %r", durable, delivered, exc)
            await nak(raw, delay=min(0.5 * delivered, 5.0))
        return
    await ack(raw)
