"""A thin typed layer over nats-py: durable publish, live emit, request/reply, pull consume.

The consume loop owns the ack policy once, for every service:
success -> ack; undecodable -> dead-letter + term; ``Retryable`` -> nak with delay;
anything else -> nak with delay until ``max_deliver``, then dead-letter + term.
The batch consumer (``consume_batches``) keeps those outcomes on an ack-all consumer:
see ``_BatchConsumer``.
"""

import asyncio
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy, PubAck, StorageType, StreamConfig
from pydantic import BaseModel, ValidationError

from delegate.contracts.messages import DeadLetter, ErrorInfo, Ping, Pong
from delegate.contracts.streams import STREAMS, StreamSpec
from delegate.contracts.topics import PINGS, Query, Topic, dead_letters

from .credentials import connect_options

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
        # id(msg) -> the dead-lettered list of the batch holding it (see ``dead_letter``)
        self._batch_parked: dict[int, list[Msg]] = {}

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
            # who we are (NATS_CREDS / NATS_USER+NATS_PASSWORD) and our private reply inboxes
            **connect_options(service),
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

        await self._pull_loop(topic, one_batch, durable, stream, stop, 1, ack_wait, max_deliver)

    async def consume_batches(
        self,
        topic: Topic[M],
        handler: Callable[[list[tuple[Msg, Any]]], Awaitable[None]],
        *,
        durable: str,
        stream: str,
        stop: asyncio.Event,
        batch: int = 256,
        ack_wait: float = 30.0,
        max_deliver: int = 20,
        depth: int = 1,
        raw: bool = False,
    ) -> None:
        """Whole batches, in order: the handler commits each; one ack-all after it returns covers it.

        The next batch is fetched and decoded while the handler commits this one. A batch
        whose handler raises is delivered again (after a pause growing with its failures)
        until ``max_deliver`` failures, then dead-lettered. A message the handler passes to
        ``dead_letter`` is parked and never handed over again. Returns when ``stop`` is set,
        after the batches in hand are settled.

        ``depth`` > 1 starts the handler on the next batch(es) before the previous call has
        returned (a handler that hands batches to another process keeps it busy that way);
        acks still go out in delivery order, each after its own call and all earlier ones
        returned, and nothing after a failed batch is acked. The handler must then cope
        with overlapping calls, committing them in the order they were started.

        ``raw`` hands over each message's bytes undecoded, for a handler that validates
        elsewhere (the ledger does, in its writer process); what it cannot decode it
        passes to ``dead_letter``.
        """
        consumer = _BatchConsumer(
            self, topic, handler, durable, stream, stop, batch, ack_wait, max_deliver, decode=not raw, depth=depth
        )
        await consumer.run()

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
                await handler(items)
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
        parked = self._batch_parked.get(id(raw))
        if parked is not None:
            # Held by a batch consumer: on its ack-all consumer a term also acks every earlier
            # message, committed or not, so the consumer terms it once its batch is committed.
            parked.append(raw)
            return
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


def describe(exc: ValidationError) -> str:
    """A validation error in one line: how many, and the first one's place and message."""
    return _short(exc)


def _short(exc: ValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{exc.error_count()} validation error(s); first at {where or 'top'}: {first.get('msg', exc)}"


async def _quietly(awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception as exc:
        log.debug("ignored: %r", exc)


# ---- the batch consumer ---------------------------------------------------------------------

JS_API = "$JS.API"
RESET_SINCE = (2, 14)  # nats-server with $JS.API.CONSUMER.RESET (ADR-60)
PULL_EXPIRES = 2.0  # seconds one pull request may wait on the server for messages
PULL_GRACE = 1.0  # no answer this long after it expired: the request was lost, rebind
FILL_WAIT = 0.01  # a partial batch waits this long for messages the server says are on their way

# A delivered message, its stream sequence, and its decoded form (or why it would not decode).
_Delivery = tuple[Msg, int, Any]
# A finished handler call: the items it was given, the messages it dead-lettered, its error.
_Outcome = tuple[list[tuple[Msg, Any]], list[Msg], Exception | None]


class _BatchConsumer(Generic[M]):
    """``consume_batches``: an ack-all pull consumer, pipelined, that never acks past a gap.

    Why ack-all: one ack per batch instead of one per message (acks cost nats-server
    about as much as deliveries). What it costs is care, because an ack of message S
    settles EVERY message up to S that the consumer has delivered, and so does a term:

    - Batches are handled strictly in delivery order and the ack (of the batch's newest
      stream sequence) goes out only after the handler returned, so everything it covers
      is committed. Dead-lettered messages are termed only then too (``dead_letter``
      defers the term while a batch holds the message).
    - That argument needs every delivery to have reached us. The consumer numbers its
      deliveries 1, 2, 3 …; a number out of turn means some delivery went elsewhere (a
      crashed predecessor, a connection lost in a NATS restart, someone reset the
      consumer). Then we stop taking messages after the gap, settle what came before it,
      and reset the consumer to its ack floor, so everything unacked is delivered again,
      in order. Redeliveries are absorbed by the idempotent handler.
    - A failed batch is not nak'd (a later ack-all would settle the nak'd messages before
      their redelivery); it is dropped and the consumer reset the same way after a pause.
      Failures are counted here per stream sequence; at ``max_deliver`` the message is
      dead-lettered.
    - A consumer found with unacked deliveries (a predecessor's) is reset before use;
      one made with explicit acks (older versions) is recreated with ack-all from its ack
      floor, since JetStream cannot change the ack policy of a consumer.

    Reset: ``$JS.API.CONSUMER.RESET`` where the server has it (2.14+), else delete and
    create again from the ack floor. A crash between those two leaves no consumer, and
    the next start creates one delivering the whole stream again: slower, not wrong.

    Pipelining: one pull request for ``batch`` messages is kept outstanding while the
    handler commits the previous batch; the messages are decoded as they arrive.
    """

    def __init__(
        self,
        bus: "Bus",
        topic: Topic[M],
        handler: Callable[[list[tuple[Msg, M]]], Awaitable[None]],
        durable: str,
        stream: str,
        stop: asyncio.Event,
        batch: int,
        ack_wait: float,
        max_deliver: int,
        *,
        decode: bool = True,
        depth: int = 1,
    ) -> None:
        self.bus = bus
        self.depth = max(1, depth)
        # Handler calls started and not yet settled, oldest first: (its deliveries, the call).
        self.inflight: deque[tuple[list[_Delivery], asyncio.Task[_Outcome]]] = deque()
        self.void = False  # a batch failed: the ones started after it must not be acked
        self.topic = topic
        self.handler = handler
        self.durable = durable
        self.stream = stream
        self.stop = stop
        self.batch = max(1, batch)
        self.ack_wait = ack_wait
        self.max_deliver = max_deliver
        self.acked = 0  # newest stream seq this process acked: everything up to it is settled
        self.failures: dict[int, int] = {}  # stream seq -> batches it failed in
        self.parked: set[int] = set()  # stream seqs dead-lettered but not yet covered by an ack
        self.pause = 0.0  # before the next reset, after a failed batch
        self.wake = asyncio.Event()
        # Topic.decode, minus a call per message; raw mode hands over the bytes as they came.
        self._decode: Callable[[bytes], Any] = topic.adapter.validate_json if decode else bytes
        self._pull_body = json.dumps({"batch": self.batch, "expires": int(PULL_EXPIRES * 1e9)}).encode()
        self._next_subject = f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        # One binding (inbox subscription) at a time; all of this is reset by _bind.
        self.sub: Subscription | None = None
        self.inbox = ""
        self.buffer: deque[_Delivery] = deque()
        self.expected = 0  # the delivery number the next message must carry
        self.remaining = 0  # messages the outstanding pull request may still bring
        self.deadline = 0.0  # when the outstanding pull request counts as lost
        self.reconnects = 0  # the connection's reconnect count when bound
        self.more = 0  # the stream's pending count after the newest delivery
        self.broken = ""  # why this binding must be replaced ("" while it is good)

    # ---- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        waker = asyncio.ensure_future(self._wake_on_stop())
        failures = 0
        try:
            while not self.stop.is_set():
                if self.sub is None or (self.broken and not self.buffer):
                    await self._finish_all()  # before the reset: what they hold is settled first
                    if self.broken:
                        log.info("%s: rebinding: %s", self.durable, self.broken)
                        await self._unbind()  # sub None now says "rebind"; log the reason once
                        self.broken = ""
                    if self.pause and await self._sleep(self.pause):
                        break
                    self.pause = 0.0
                    try:
                        await self._bind()
                        failures = 0
                    except Exception as exc:  # NATS restarting, stream missing: try again
                        failures += 1
                        if failures in (1, 10) or failures % 100 == 0:
                            log.warning("binding %s failed (%d): %r", self.durable, failures, exc)
                        await self._unbind()
                        await self._sleep(min(0.1 * failures, 1.0))
                    continue
                taken = await self._next_batch()
                if taken:
                    self._start(taken)
                # Settle in delivery order what has finished, and wait for the oldest when
                # ``depth`` batches are in the handler already.
                while self.inflight and (self.inflight[0][1].done() or len(self.inflight) >= self.depth):
                    await self._finish_oldest()
            await self._finish_all()  # stopping: the batches in hand are settled, not dropped
        finally:
            for _, call in self.inflight:
                call.cancel()
            waker.cancel()
            # Also on cancellation: a subscription left behind stalls drain() on close.
            await self._unbind()

    async def _wake_on_stop(self) -> None:
        await self.stop.wait()
        self.wake.set()

    async def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` unless stopped first; True when stopped."""
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _next_batch(self) -> list[_Delivery]:
        """Up to ``batch`` deliveries, as soon as a full batch (or all there is) has arrived."""
        loop = asyncio.get_running_loop()
        buf = self.buffer
        waited = False
        while not self.stop.is_set():
            if self.bus.nc.stats["reconnects"] != self.reconnects and not self.broken:
                # Deliveries and our pull request may have died with the connection.
                self.broken = "reconnected to NATS"
            if not self.broken:
                await self._pull()
            # A partial batch is taken when nothing more is on its way (the stream had no
            # more, or the request is used up) or after a short wait: fewer, fuller commits.
            if buf and (len(buf) >= self.batch or waited or self.broken or self.remaining <= 0 or not self.more):
                taken = [buf.popleft() for _ in range(min(self.batch, len(buf)))]
                if not self.broken:
                    await self._pull()  # the next batch arrives while this one is handled
                return taken
            if self.broken or (self.inflight and self.inflight[0][1].done()):
                return []  # the caller settles it; the buffer keeps filling meanwhile
            self.wake.clear()
            timeout = FILL_WAIT if buf else max(0.0, self.deadline - loop.time())
            try:
                async with asyncio.timeout(timeout):
                    await self.wake.wait()
            except TimeoutError:
                if buf:
                    waited = True
                elif self.remaining > 0 and loop.time() >= self.deadline:
                    self.broken = "a pull request went unanswered, not even by its expiry"
        return []

    async def _pull(self) -> None:
        """Keep one pull request outstanding while there is room for its messages."""
        if self.remaining > 0 or len(self.buffer) >= self.batch:
            return
        self.remaining = self.batch
        self.deadline = asyncio.get_running_loop().time() + PULL_EXPIRES + PULL_GRACE
        try:
            await self.bus.nc.publish(self._next_subject, self._pull_body, reply=self.inbox)
        except TRANSIENT as exc:
            self.broken = f"pull request failed: {exc!r}"

    async def _on_msg(self, msg: Msg) -> None:
        """Subscription callback: check the delivery number, decode, buffer."""
        reply = msg.reply
        if not reply:  # a status about our pull request
            status = msg.headers.get("Status") if msg.headers else None
            if status == "100":  # idle heartbeat
                return
            self.remaining = 0  # that request is over
            if status not in ("404", "408"):  # not "expired" / "nothing yet": consumer gone, leader moved…
                description = (msg.headers or {}).get("Description", "")
                self.broken = f"pull request refused: {status} {description}"
                self.pause = max(self.pause, 0.5)  # whatever it is, do not hammer the server with it
            self.wake.set()
            return
        if self.broken:
            return  # after a gap nothing is taken until the reset
        # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<delivery seq>.<ts>.<pending>,
        # or with <domain>.<account hash> after ACK (and a random token at the end).
        tokens = reply.split(".")
        i = 4 if len(tokens) == 9 else 6
        try:
            sseq, dseq, more = int(tokens[i + 1]), int(tokens[i + 2]), int(tokens[i + 4])
        except (IndexError, ValueError):
            log.warning("%s: ignoring a message with reply %r", self.durable, reply)
            return
        if dseq != self.expected:
            self.broken = f"delivery {dseq} arrived where {self.expected} was next"
            self.wake.set()
            return
        self.expected = dseq + 1
        self.remaining -= 1
        self.more = more
        try:
            decoded: Any = self._decode(msg.data)
        except ValidationError as exc:
            decoded = exc
        self.buffer.append((msg, sseq, decoded))
        if len(self.buffer) >= self.batch or not more or self.remaining <= 0:
            self.wake.set()

    # ---- one batch --------------------------------------------------------------------

    def _start(self, taken: list[_Delivery]) -> None:
        call = asyncio.ensure_future(self._call_handler(taken))
        call.add_done_callback(lambda _: self.wake.set())  # _next_batch returns to settle it
        self.inflight.append((taken, call))

    async def _finish_all(self) -> None:
        while self.inflight:
            await self._finish_oldest()

    async def _call_handler(self, taken: list[_Delivery]) -> "_Outcome":
        """Dead-letter the undecodable, hand the rest over; the outcome is settled later, in order."""
        parked: list[Msg] = []
        held = self.bus._batch_parked
        for raw, _, _ in taken:
            held[id(raw)] = parked
        items: list[tuple[Msg, M]] = []
        try:
            for raw, sseq, decoded in taken:
                if sseq in self.parked:  # dead-lettered before a reset brought it back
                    parked.append(raw)
                elif isinstance(decoded, ValidationError):
                    await self.bus.dead_letter(self.durable, raw, f"undecodable: {_short(decoded)}")
                else:
                    items.append((raw, decoded))
            if items:
                try:
                    await self.handler(items)
                except Exception as exc:
                    return items, parked, exc
            return items, parked, None
        finally:
            for raw, _, _ in taken:
                held.pop(id(raw), None)

    async def _finish_oldest(self) -> None:
        taken, call = self.inflight.popleft()
        items, parked, error = await call
        parked_ids = {id(raw) for raw in parked}
        if self.void:
            # An earlier batch failed and the consumer will be reset: nothing after it is acked,
            # and this one's dead letters must not be written again when it comes back.
            self.parked.update(sseq for raw, sseq, _ in taken if id(raw) in parked_ids and sseq > self.acked)
            if not self.inflight:
                self.void = False
            return
        if error is None:
            await self._settle(taken, parked)
            return
        held = self.bus._batch_parked
        for raw, _, _ in taken:  # dead letters for too many failures are parked like the handler's
            held[id(raw)] = parked
        try:
            await self._failed(taken, items, error)
        finally:
            for raw, _, _ in taken:
                held.pop(id(raw), None)
        self.void = bool(self.inflight)
        parked_ids = {id(raw) for raw in parked}
        # Dead-lettered ones at the head of the batch can be termed now: everything delivered
        # before them is settled (earlier batches were acked). The rest wait for the redelivery.
        for raw, sseq, _ in taken:
            if id(raw) not in parked_ids:
                break
            await _quietly(raw.term())
            self.acked = max(self.acked, sseq)
        self.parked.update(sseq for raw, sseq, _ in taken if id(raw) in parked_ids and sseq > self.acked)

    async def _settle(self, taken: list[_Delivery], parked: list[Msg]) -> None:
        """After the commit: term the dead-lettered ones, then one ack settles the batch."""
        for raw in parked:  # each term also acks what precedes it: all committed by now
            await _quietly(raw.term())
        newest, newest_seq, _ = max(taken, key=lambda d: d[1])
        if not any(raw is newest for raw in parked):
            await _quietly(newest.ack())
        if newest_seq > self.acked:
            self.acked = newest_seq
        if self.failures:
            self.failures = {s: n for s, n in self.failures.items() if s > self.acked}
        if self.parked:
            self.parked = {s for s in self.parked if s > self.acked}

    async def _failed(self, taken: list[_Delivery], items: list[tuple[Msg, M]], exc: Exception) -> None:
        """Drop the batch (and what arrived after it) for a redelivery from the ack floor."""
        log.warning("%s: batch of %d failed: %r", self.durable, len(items), exc)
        seq_of = {id(raw): sseq for raw, sseq, _ in taken}
        worst = 0
        for raw, _ in items:
            sseq = seq_of[id(raw)]
            count = self.failures[sseq] = self.failures.get(sseq, 0) + 1
            worst = max(worst, count)
            if count >= self.max_deliver:
                await self.bus.dead_letter(self.durable, raw, f"batch failed {count} times: {exc!r}")
        self.buffer.clear()
        self.broken = "a batch failed"
        self.pause = min(0.5 * worst, 5.0)

    # ---- binding and resetting the consumer ----------------------------------------------

    async def _bind(self) -> None:
        await self._unbind()
        info = await self._usable_consumer()
        self.reconnects = self.bus.nc.stats["reconnects"]
        self.inbox = self.bus.nc.new_inbox()
        self.sub = await self.bus.nc.subscribe(self.inbox, cb=self._on_msg)
        self.buffer.clear()
        self.expected = (info.delivered.consumer_seq if info.delivered else 0) + 1
        self.remaining = 0
        self.more = 0
        self.broken = ""

    async def _unbind(self) -> None:
        sub, self.sub = self.sub, None
        if sub is not None:
            await _quietly(sub.unsubscribe())

    async def _usable_consumer(self) -> ConsumerInfo:
        """The durable consumer, ack-all, with no delivery outstanding; created if missing."""
        js = self.bus.js
        try:
            info = await js.consumer_info(self.stream, self.durable)
        except nats.js.errors.NotFoundError:
            return await js.add_consumer(self.stream, self._config(start=0))
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        if info.config.ack_policy != AckPolicy.ALL:
            log.warning("%s: recreating the consumer with ack-all, from stream seq %d", self.durable, floor + 1)
            return await self._recreate(floor)
        if info.num_ack_pending:
            return await self._reset(info)
        return info

    async def _reset(self, info: ConsumerInfo) -> ConsumerInfo:
        """Forget every unacked delivery: all of it is delivered again, from the ack floor."""
        js = self.bus.js
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        if floor < self.acked:
            # Our last acks may still be on their way (or lost with a NATS restart): the server's
            # floor would redeliver a little more than needed, and a late ack could land after
            # the reset. Give them a moment; what we acked is settled either way.
            await _quietly(self.bus.nc.flush(timeout=2))
            until = asyncio.get_running_loop().time() + 1.0
            while floor < self.acked and asyncio.get_running_loop().time() < until:
                await asyncio.sleep(0.02)
                info = await js.consumer_info(self.stream, self.durable)
                floor = info.ack_floor.stream_seq if info.ack_floor else 0
        server_floor, floor = floor, max(floor, self.acked)
        log.info("%s: resetting the consumer (%d unacked) to redeliver from stream seq %d",
                 self.durable, info.num_ack_pending or 0, floor + 1)
        version = self.bus.nc.connected_server_version
        if (version.major, version.minor) < RESET_SINCE:
            return await self._recreate(floor)
        body = b"" if floor == server_floor else json.dumps({"seq": floor + 1}).encode()
        reply = await self.bus.nc.request(f"{JS_API}.CONSUMER.RESET.{self.stream}.{self.durable}", body, timeout=5)
        answer = json.loads(reply.data)
        if answer.get("error"):
            nats.js.errors.APIError.from_error(answer["error"])  # raises
        return await js.consumer_info(self.stream, self.durable)

    async def _recreate(self, floor: int) -> ConsumerInfo:
        try:
            await self.bus.js.delete_consumer(self.stream, self.durable)
        except nats.js.errors.NotFoundError:
            pass
        return await self.bus.js.add_consumer(self.stream, self._config(start=floor + 1 if floor else 0))

    def _config(self, *, start: int) -> ConsumerConfig:
        return ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            ack_policy=AckPolicy.ALL,
            ack_wait=self.ack_wait,
            # Redelivery after a failure is ours (a reset); the server's own count would stop
            # redelivering a message it expired too often while we still held it.
            max_deliver=-1,
            max_ack_pending=max(self.batch * 4, 1000),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if start else DeliverPolicy.ALL,
            opt_start_seq=start or None,
            filter_subject=self.topic.subject,
        )
