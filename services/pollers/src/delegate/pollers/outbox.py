"""The outbox: three durable consumers on stream CHANNELS, one per kind of work.

- ``pollers-sms``: OutboundSms -> Twilio REST (``sms_sender``);
- ``pollers-email``: OutboundEmail -> SMTP (``email_out``);
- ``pollers-media``: MediaFetch -> an MMS media item on disk (``media``).

Each handles one message at a time and returns only after its outcome is in the ledger, so
the ack that follows never loses a result; a message redelivered after a crash finds its
records there (see ``deliveries``). While a send or its retries run longer than the ack wait,
in_progress heartbeats keep JetStream from handing the message out again; what cannot be
decoded is dead-lettered by the consumer helper.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg

from delegate.contracts import streams, topics
from delegate.contracts.topics import Topic
from delegate.runtime.bus import Bus
from delegate.runtime.retry import sleep_unless
from delegate.runtime.webpush import PushStore

from .deliveries import DeliveryLog, heartbeat
from .email_out import EmailSender
from .health import Health
from .media import MediaFetcher
from .push_sender import PushSender
from .settings import Settings
from .sms_sender import SmsSender
from .twilio_rest import twilio_client

log = logging.getLogger(__name__)

M = TypeVar("M")
STREAM = "CHANNELS"
# Deliveries before the consumer helper parks a message; each is slow (attempts with backoff)
# and a ledger outage naks without consuming attempts, so this is a backstop, not a policy.
MAX_DELIVER = 50
PENDING_EVERY_S = 2.0
CONSUMERS = (streams.POLLERS_SMS, streams.POLLERS_EMAIL, streams.POLLERS_MEDIA, streams.POLLERS_PUSH)
# where each consumer reads: the push sender follows the ledger's appends
STREAM_OF = {streams.POLLERS_PUSH: "LEDGER"}


async def run_outbox(bus: Bus, settings: Settings, health: Health, stop: asyncio.Event) -> None:
    """Consume CHANNELS (pollers-sms, pollers-email, pollers-media) until ``stop``; sets
    health.sms / health.smtp sides and health.running=True once the consumers exist."""
    deliveries = DeliveryLog(bus)
    health.sms.enabled = settings.sms_enabled
    health.smtp.enabled = settings.smtp_enabled
    if settings.sms_enabled:
        health.sms.ok("ready", "Twilio REST")
    else:
        log.info("TWILIO_* / OWNER_PHONE unset: SMS out is off (outbox SMS are recorded as failed)")
    if not settings.smtp_enabled:
        log.info("SMTP_HOST unset: email out is off (outbox email is recorded as failed)")
    client = twilio_client(settings) if settings.sms_enabled else None
    sms = SmsSender(settings, deliveries, health, stop, client)
    mail = EmailSender(settings, deliveries, health, stop)
    timeout = httpx.Timeout(settings.outbox_http_timeout_s)
    async with httpx.AsyncClient(timeout=timeout, max_redirects=5) as http:
        media = MediaFetcher(settings, deliveries, stop, http)
        store = PushStore()
        await store.open(bus)
        push = PushSender(settings, deliveries, store)
        beat = max(settings.outbox_ack_wait_s / 3, 0.2)
        work: list[Awaitable[None]] = [
            _consume(bus, topics.SMS_OUT, sms.handle, streams.POLLERS_SMS, settings, stop, beat),
            _consume(bus, topics.EMAIL_OUT, mail.handle, streams.POLLERS_EMAIL, settings, stop, beat),
            _consume(bus, topics.MEDIA_FETCH, media.handle, streams.POLLERS_MEDIA, settings, stop, beat),
            _consume(bus, topics.LEDGER_APPEND_ANY, push.handle, streams.POLLERS_PUSH, settings, stop, beat,
                     stream="LEDGER"),
            _watch(bus, health, stop),
        ]
        tasks = [asyncio.ensure_future(w) for w in work]
        if settings.smtp_enabled:
            health.smtp.state = "connecting"
            tasks.append(asyncio.create_task(mail.probe_forever()))
        try:
            # a consumer ending before ``stop`` is a failure the caller must see
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not stop.is_set():
            raise RuntimeError("an outbox consumer ended by itself")


async def _consume(
    bus: Bus,
    topic: Topic[M],
    handler: Callable[[M, Msg], Awaitable[None]],
    durable: str,
    settings: Settings,
    stop: asyncio.Event,
    beat: float,
    stream: str = STREAM,
) -> None:
    async def with_heartbeat(msg: M, raw: Msg) -> None:
        async with heartbeat(raw, beat):
            await handler(msg, raw)

    await bus.consume(
        topic, with_heartbeat, durable=durable, stream=stream, stop=stop,
        ack_wait=settings.outbox_ack_wait_s, max_deliver=MAX_DELIVER,
    )


async def _watch(bus: Bus, health: Health, stop: asyncio.Event) -> None:
    """``running`` once all three consumers exist; then the outbox's backlog, every few seconds."""
    while not stop.is_set():
        pending = 0
        found = 0
        for durable in CONSUMERS:
            info: Any
            try:
                info = await bus.js.consumer_info(STREAM_OF.get(durable, STREAM), durable)
            except (nats.js.errors.NotFoundError, nats.errors.Error, TimeoutError, OSError):
                continue  # not created yet, or NATS is reconnecting: counted next round
            found += 1
            pending += int(info.num_pending or 0) + int(info.num_ack_pending or 0)
        if found == len(CONSUMERS):
            health.running = True
            health.outbox_pending = pending
        if not await sleep_unless(stop, PENDING_EVERY_S if health.running else 0.1):
            return
