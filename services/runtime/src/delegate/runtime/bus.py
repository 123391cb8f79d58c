"""A thin typed layer over nats-py: durable publish, live emit, request/reply, pull consume.

The consume loop owns the ack policy once, for every service:
success -> ack; undecodable -> dead-letter + term; ``Retryable`` -> nak with delay;
anything else -> nak with delay until ``max_deliver``, then dead-letter + term.
"""

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, PubAck, StorageType, StreamConfig
from pydantic import BaseModel, ValidationError

from delegate.contracts.messages import DeadLetter, ErrorInfo, Ping, Pong
from delegate.contracts.streams import STREAMS, StreamSpec
from delegate.contracts.topics import PINGS, Query, Topic, dead_letters

log = logging.getLogger(__name__)

M = TypeVar("M")
Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)

MSG_ID = "Nats-Msg-Id"
DEAD_LETTER_DATA_LIMIT = 16 * 1024

# Errors that mean "NATS is not reachable right now": wait and try again.
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
    """Nobody answered a request in time (the peer is down or NATS is)."""


class DomainError(Exception):
    """Raised by a request handler to answer with ``{"error": {code, message}}``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Bus:
    def __init__(self, nc: Client, service: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=5.0)
        self.service = service
        self._subs: list[Subscription] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(cls, url: str, service: str) -> "Bus":
        async def on_error(exc: Exception) -> None:
            log.debug("nats: %s", exc)

        async def on_disconnect() -> None:
            log.warning("disconnected from NATS, reconnecting")

        async def on_reconnect() -> None:
            log.info("reconnected to NATS")

        nc = await nats.connect(
            url,
            name=service,
            max_reconnect_attempts=-1,  # a restarted NATS must never end a service
            reconnect_time_wait=0.25,
            connect_timeout=2,
            allow_reconnect=True,
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
        )
        return cls(nc, service)

    # ---- streams ----------------------------------------------------------------------

    async def ensure_streams(self, specs: Sequence[StreamSpec] = STREAMS) -> None:
        for spec in specs:
            config = StreamConfig(
                name=spec.name,
                subjects=list(spec.subjects),
                storage=StorageType.FILE,
                duplicate_window=spec.duplicate_window_s,
                max_age=spec.max_age_s or None,
                max_msg_size=spec.max_msg_size,
            )
            try:
                await self.js.add_stream(config)
            except nats.js.errors.BadRequestError:
                await self.js.update_stream(config)

    # ---- publishing -----------------------------------------------------------------------

    async def publish(
        self,
        topic: Topic[M],
        msg: M,
        *,
        msg_id: str | None = None,
        deadline: float = 30.0,
    ) -> PubAck:
        """Durable publish, retried until ``deadline`` seconds: the message id dedups retries."""
        data = topic.encode(msg)
        ident = msg_id or str(msg.id)
        loop = asyncio.get_running_loop()
        until = loop.time() + deadline
        delay = 0.05
        while True:
            try:
                return await self.js.publish(topic.subject, data, headers={MSG_ID: ident}, timeout=2.0)
            except TRANSIENT as exc:
                if loop.time() + delay > until:
                    raise BusUnavailable(f"publish to {topic.subject} failed: {exc!r}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def emit(self, topic: Topic[M], msg: M) -> None:
        """Live, fire-and-forget (core NATS). Lost if nobody listens; that is the point."""
        try:
            await self.nc.publish(topic.subject, topic.encode(msg))
        except TRANSIENT as exc:
            log.debug("live emit on %s dropped: %r", topic.subject, exc)

    async def emit_raw(self, subject: str, data: bytes) -> None:
        try:
            await self.nc.publish(subject, data)
        except TRANSIENT as exc:
            log.debug("live emit on %s dropped: %r", subject, exc)

    # ---- request/reply ------------------------------------------------------------------

    async def request(self, query: Query[Req, Rep], req: Req, timeout: float | None = None) -> Rep:
        try:
            msg = await self.nc.request(
                query.subject, req.model_dump_json().encode(), timeout=timeout or query.timeout
            )
        except TRANSIENT as exc:
            raise BusUnavailable(f"no answer on {query.subject}: {exc!r}") from exc
        body = json.loads(msg.data)
        error = body.get("error") if isinstance(body, dict) else None
        if error:
            raise RemoteError(str(error.get("code", "error")), str(error.get("message", "")))
        return query.reply.model_validate(body)

    async def serve(
        self,
        query: Query[Req, Rep],
        handler: Callable[[Req], Awaitable[Rep]],
        *,
        queue: str | None = None,
    ) -> Subscription:
        """Answer requests; a bad request or a ``DomainError`` becomes an error reply."""

        async def on_request(msg: Msg) -> None:
            try:
                req = query.request.model_validate_json(msg.data)
                reply: bytes = (await handler(req)).model_dump_json().encode()
            except ValidationError as exc:
                reply = _error_reply("bad_request", _short(exc))
            except DomainError as exc:
                reply = _error_reply(exc.code, exc.message)
            except Exception:
                log.exception("handler for %s failed", query.subject)
                reply = _error_reply("internal", "the service failed to answer; see its log")
            if msg.reply:
                try:
                    await msg.respond(reply)
                except TRANSIENT:
                    log.debug("reply on %s lost", query.subject)

        sub = await self.nc.subscribe(query.subject, queue=queue or "", cb=on_request)
        self._subs.append(sub)
        return sub

    async def serve_ping(self, service: str, ready: Callable[[], bool] | None = None) -> None:
        query = PINGS[service]

        async def pong(_: Ping) -> Pong:
            return Pong(service=service, instance=self.service, ready=ready() if ready else True)

        await self.serve(query, pong)

    async def ping(self, service: str, timeout: float = 1.0) -> Pong:
        return await self.request(PINGS[service], Ping(), timeout=timeout)

    # ---- live subscriptions ---------------------------------------------------------------

    async def subscribe(self, topic: Topic[M], handler: Callable[[M], Awaitable[None]]) -> Subscription:
        async def on_msg(msg: Msg) -> None:
            try:
                decoded = topic.decode(msg.data)
            except ValidationError as exc:
                log.warning("dropping undecodable live message on %s: %s", msg.subject, _short(exc))
                return
            await handler(decoded)

        sub = await self.nc.subscribe(topic.subject, cb=on_msg)
        self._subs.append(sub)
        return sub

    # ---- durable consumers ----------------------------------------------------------------

    async def consume(
        self,
        topic: Topic[M],
        handler: Callable[[M, Msg], Awaitable[None]],
        *,
        durable: str,
        stream: str,
        stop: asyncio.Event,
        ack_wait: float = 30.0,
        max_deliver: int = 10,
    ) -> None:
        """One message at a time, in order. Returns when ``stop`` is set."""

        async def one_batch(items: list[tuple[Msg, M]]) -> None:
            for raw, decoded in items:
                await self._settle(durable, raw, lambda d=decoded, r=raw: handler(d, r), max_deliver)

        await self._pull_loop(topic, one_batch, durable, stream, stop, 1, ack_wait, max_deliver, settle=False)

    async def consume_batches(
        self,
        topic: Topic[M],
        handler: Callable[[list[tuple[Msg, M]]], Awaitable[None]],
        *,
        durable: str,
        stream: str,
        stop: asyncio.Event,
        batch: int = 256,
        ack_wait: float = 30.0,
        max_deliver: int = 20,
    ) -> None:
        """Whole batches: the handler commits them together; all are acked after it returns."""
        await self._pull_loop(topic, handler, durable, stream, stop, batch, ack_wait, max_deliver, settle=True)

    async def _pull_loop(
        self,
        topic: Topic[M],
        handler: Callable[[list[tuple[Msg, M]]], Awaitable[None]],
        durable: str,
        stream: str,
        stop: asyncio.Event,
        batch: int,
        ack_wait: float,
        max_deliver: int,
        *,
        settle: bool,
    ) -> None:
        config = ConsumerConfig(
            durable_name=durable,
            ack_wait=ack_wait,
            max_deliver=max_deliver,
            max_ack_pending=max(batch * 4, 1000),
            deliver_policy=DeliverPolicy.ALL,
            filter_subject=topic.subject,
        )
        psub: Any = None
        failures = 0
        try:
            while not stop.is_set():
                try:
                    if psub is None:
                        psub = await self.js.pull_subscribe(
                            topic.subject, durable=durable, stream=stream, config=config
                        )
                    msgs = await psub.fetch(batch, timeout=0.5)
                    failures = 0
                except nats.errors.TimeoutError:
                    continue
                except Exception as exc:  # NATS restarting, consumer lost: rebuild and go on
                    failures += 1
                    if failures in (1, 10) or failures % 100 == 0:
                        log.warning("pull from %s failed (%d): %r", durable, failures, exc)
                    if psub is not None and failures % 5 == 0:
                        await _quietly(psub.unsubscribe())
                        psub = None
                    await asyncio.sleep(min(0.1 * failures, 1.0))
                    continue
                items: list[tuple[Msg, M]] = []
                for raw in msgs:
                    try:
                        items.append((raw, topic.decode(raw.data)))
                    except ValidationError as exc:
                        await self.dead_letter(durable, raw, f"undecodable: {_short(exc)}")
                if not items:
                    continue
                if not settle:
                    await handler(items)
                    continue
                await self._settle_batch(durable, items, handler, max_deliver)
        finally:
            # Also on cancellation: a pull subscription left behind stalls drain() on close.
            if psub is not None:
                await _quietly(psub.unsubscribe())

    async def _settle(
        self, durable: str, raw: Msg, call: Callable[[], Awaitable[None]], max_deliver: int
    ) -> None:
        try:
            await call()
        except Retryable as exc:
            log.info("%s: retry later: %s", durable, exc)
            await _quietly(raw.nak(delay=exc.delay))
            return
        except Exception as exc:
            delivered = raw.metadata.num_delivered if raw.metadata else 1
            if delivered >= max_deliver:
                log.exception("%s: giving up after %d deliveries", durable, delivered)
                await self.dead_letter(durable, raw, f"handler failed {delivered} times: {exc!r}")
            else:
                log.warning("%s: handler failed (delivery %d): %r", durable, delivered, exc)
                await _quietly(raw.nak(delay=min(0.5 * delivered, 5.0)))
            return
        await _quietly(raw.ack())

    async def _settle_batch(
        self,
        durable: str,
        items: list[tuple[Msg, M]],
        handler: Callable[[list[tuple[Msg, M]]], Awaitable[None]],
        max_deliver: int,
    ) -> None:
        try:
            await handler(items)
        except Exception as exc:
            log.warning("%s: batch of %d failed: %r", durable, len(items), exc)
            for raw, _ in items:
                delivered = raw.metadata.num_delivered if raw.metadata else 1
                if delivered >= max_deliver:
                    await self.dead_letter(durable, raw, f"batch failed {delivered} times: {exc!r}")
                else:
                    await _quietly(raw.nak(delay=min(0.5 * delivered, 5.0)))
            return
        # Acks after the commit: a crash between commit and ack only causes a redelivery,
        # which the idempotent store absorbs.
        await asyncio.gather(*(_quietly(raw.ack()) for raw, _ in items))

    async def dead_letter(self, consumer: str, raw: Msg, reason: str) -> None:
        """Park a message that can never be processed, then stop its redelivery."""
        log.error("%s: dead-lettering message on %s: %s", consumer, raw.subject, reason)
        letter = DeadLetter(
            subject=raw.subject,
            consumer=consumer,
            reason=reason[:2000],
            data=raw.data[:DEAD_LETTER_DATA_LIMIT].decode("utf-8", errors="replace"),
            size=len(raw.data),
        )
        try:
            await self.publish(dead_letters(consumer), letter, deadline=5.0)
        except BusUnavailable:
            log.error("%s: could not store the dead letter; dropping it after logging", consumer)
        await _quietly(raw.term())

    # ---- lifecycle --------------------------------------------------------------------------

    def spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        """Keep a background task referenced until it ends; cancelled by ``close``."""
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await asyncio.wait_for(self.nc.drain(), timeout=5.0)
        except Exception:
            await _quietly(self.nc.close())


def _error_reply(code: str, message: str) -> bytes:
    return json.dumps({"error": ErrorInfo(code=code, message=message).model_dump()}).encode()


def _short(exc: ValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{exc.error_count()} validation error(s); first at {where or 'top'}: {first.get('msg', exc)}"


async def _quietly(awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception as exc:
        log.debug("ignored: %r", exc)
