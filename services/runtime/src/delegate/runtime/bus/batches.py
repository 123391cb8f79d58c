"""``Bus.consume_batches``: an ack-all pull consumer, pipelined, that never acks past a gap.

Why ack-all: one ack per batch instead of one per message (acks cost nats-server about
as much as deliveries). What it costs is care, because an ack of message S settles EVERY
message up to S that the consumer has delivered, and so does a term:

- Batches are handled strictly in delivery order and the ack (of the batch's newest
  stream sequence) goes out only after the handler returned, so everything it covers is
  committed. Dead-lettered messages are termed only then too: while its handler runs, a
  batch holds its messages, and ``Bus.dead_letter`` records them in the batch instead of
  terming them (``dead_letters``).
- That argument needs every delivery to have reached us. The consumer numbers its
  deliveries 1, 2, 3 …; a number out of turn means some delivery went elsewhere (a
  crashed predecessor, a connection lost in a NATS restart, someone reset the consumer).
  Then we stop taking messages after the gap, settle what came before it, and reset the
  consumer to its ack floor, so everything unacked is delivered again, in order.
  Redeliveries are absorbed by the idempotent handler.
- A failed batch is not nak'd (a later ack-all would settle the nak'd messages before
  their redelivery); it is dropped and the consumer reset the same way after a pause.
  Failures are counted here per stream sequence; at ``max_deliver`` the message is
  dead-lettered.
- A consumer found with unacked deliveries (a predecessor's) is reset before use; one
  made with explicit acks (older versions) is recreated with ack-all from its ack floor,
  since JetStream cannot change the ack policy of a consumer.

Reset: ``$JS.API.CONSUMER.RESET`` where the server has it (2.14+), else delete and create
again from the ack floor. A crash between those two leaves no consumer, and the next
start creates one delivering the whole stream again: slower, not wrong.

Pipelining: one pull request for ``batch`` messages is kept outstanding while the handler
commits the previous batch; the messages are decoded as they arrive. ``depth`` > 1 starts
the handler on the next batch(es) before the previous call returned; acks still go out in
delivery order, each after its own call and all earlier ones returned, and nothing after
a failed batch is acked.

One concept at this length: the ack-all consumer's gap rule, which must be read whole to be
trusted (delivery numbering, the pipelined handler, settle-then-reset).
"""

import asyncio
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from pydantic import ValidationError

from delegate.contracts.topics import Topic
from delegate.runtime.validation import describe

from ..retry import Backoff, sleep_unless
from .acks import ack, term
from .dead_letters import DeadLetters
from .errors import TRANSIENT, quietly

log = logging.getLogger(__name__)

M = TypeVar("M")

JS_API = "$JS.API"
RESET_SINCE = (2, 14)  # nats-server with $JS.API.CONSUMER.RESET (ADR-60)
PULL_EXPIRES = 2.0  # seconds one pull request may wait on the server for messages
PULL_GRACE = 1.0  # no answer this long after it expired: the request was lost, rebind
FILL_WAIT = 0.01  # a partial batch waits this long for messages the server says are on their way


@dataclass(slots=True)
class _Delivery:
    msg: Msg
    seq: int  # its stream sequence
    decoded: Any  # what the handler gets, or the ValidationError saying why it would not decode


@dataclass(eq=False)
class _Batch:
    """One handler call: what it was given, what was dead-lettered in it, how it ended."""

    deliveries: list[_Delivery]
    handed: list[_Delivery] = field(default_factory=list)  # given to the handler
    # stream seq -> message dead-lettered while the batch held it: termed once it is settled
    parked: dict[int, Msg] = field(default_factory=dict)
    error: Exception | None = None
    holding: bool = False  # the handler is running: its dead letters' terms are deferred
    call: "asyncio.Future[None] | None" = None

    @property
    def items(self) -> list[tuple[Msg, Any]]:
        return [(d.msg, d.decoded) for d in self.handed]

    def park(self, raw: Msg) -> bool:
        if not self.holding:
            return False
        for d in self.deliveries:
            if d.msg is raw:
                self.parked[d.seq] = raw
                return True
        return False


class BatchConsumer(Generic[M]):
    """The loop behind ``Bus.consume_batches``; the rules it keeps are in the module docstring."""

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        dead_letters: DeadLetters,
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
        self.nc = nc
        self.js = js
        self.dead_letters = dead_letters
        self.depth = max(1, depth)
        self.inflight: deque[_Batch] = deque()  # handler calls started and not yet settled, oldest first
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
        self.dead: set[int] = set()  # stream seqs dead-lettered but not yet covered by an ack
        self.pause = 0.0  # before the next reset, after a failed batch
        # Set while an old consumer is replaced (deleted, then made again): where the new one
        # must start, so a failure in between does not start it from the stream's beginning.
        self.recreating_from: int | None = None
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
        backoff = Backoff(initial=0.1, maximum=1.0)
        try:
            with self.dead_letters.holding(self.stream, self.durable, self):
                while not self.stop.is_set():
                    if self.sub is None or (self.broken and not self.buffer):
                        await self._finish_all()  # before the reset: what they hold is settled first
                        if self.broken:
                            log.info("%s: rebinding: %s", self.durable, self.broken)
                            await self._unbind()  # sub None now says "rebind"; log the reason once
                            self.broken = ""
                        if self.pause and not await sleep_unless(self.stop, self.pause):
                            break
                        self.pause = 0.0
                        try:
                            await self._bind()
                            backoff.reset()
                        except Exception as exc:  # NATS restarting, stream not created yet: try again
                            failures = backoff.failures + 1
                            if failures in (1, 10) or failures % 100 == 0:
                                log.warning("binding %s failed (%d): %s", self.durable, failures, str(exc) or repr(exc))
                            await self._unbind()
                            await backoff.sleep(self.stop)
                        continue
                    taken = await self._next_batch()
                    if taken:
                        self._start(taken)
                    # Settle in delivery order what has finished, and wait for the oldest when
                    # ``depth`` batches are in the handler already.
                    while self.inflight and (self._oldest_done() or len(self.inflight) >= self.depth):
                        await self._finish_oldest()
                await self._finish_all()  # stopping: the batches in hand are settled, not dropped
        finally:
            for batch in self.inflight:
                if batch.call is not None:
                    batch.call.cancel()
            waker.cancel()
            # Also on cancellation: a subscription left behind stalls drain() on close.
            await self._unbind()

    def park(self, raw: Msg) -> bool:
        """``Holder`` for ``dead_letters``: a message dead-lettered by a running handler."""
        return any(batch.park(raw) for batch in self.inflight)

    def _oldest_done(self) -> bool:
        call = self.inflight[0].call
        return call is not None and call.done()

    async def _wake_on_stop(self) -> None:
        await self.stop.wait()
        self.wake.set()

    async def _next_batch(self) -> list[_Delivery]:
        """Up to ``batch`` deliveries, as soon as a full batch (or all there is) has arrived."""
        loop = asyncio.get_running_loop()
        buf = self.buffer
        waited = False
        while not self.stop.is_set():
            if self.nc.stats["reconnects"] != self.reconnects and not self.broken:
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
            if self.broken or (self.inflight and self._oldest_done()):
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
            await self.nc.publish(self._next_subject, self._pull_body, reply=self.inbox)
        except TRANSIENT as exc:
            self.broken = f"pull request failed: {exc!r}"

    async def _on_msg(self, msg: Msg) -> None:
        """Subscription callback: check the delivery number, decode, buffer."""
        if not msg.reply:  # a status about our pull request
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
        try:
            stream_seq, delivery, pending = _delivery_numbers(msg)
        except Exception:  # a reply that is no JetStream ack subject
            log.warning("%s: ignoring a message with reply %r", self.durable, msg.reply)
            return
        if delivery != self.expected:
            self.broken = f"delivery {delivery} arrived where {self.expected} was next"
            self.wake.set()
            return
        self.expected = delivery + 1
        self.remaining -= 1
        self.more = pending
        try:
            decoded: Any = self._decode(msg.data)
        except ValidationError as exc:
            decoded = exc
        self.buffer.append(_Delivery(msg, stream_seq, decoded))
        if len(self.buffer) >= self.batch or not self.more or self.remaining <= 0:
            self.wake.set()

    # ---- one batch --------------------------------------------------------------------

    def _start(self, taken: list[_Delivery]) -> None:
        batch = _Batch(taken)
        self.inflight.append(batch)
        batch.call = asyncio.ensure_future(self._call_handler(batch))
        batch.call.add_done_callback(lambda _: self.wake.set())  # _next_batch returns to settle it

    async def _finish_all(self) -> None:
        while self.inflight:
            await self._finish_oldest()

    async def _call_handler(self, batch: _Batch) -> None:
        """Dead-letter the undecodable, hand the rest over; the outcome is settled later, in order."""
        for d in batch.deliveries:
            if d.seq in self.dead:  # dead-lettered before a reset brought it back
                batch.parked[d.seq] = d.msg
            elif isinstance(d.decoded, ValidationError):
                await self._dead_letter(batch, d, f"undecodable: {describe(d.decoded)}")
            else:
                batch.handed.append(d)
        if not batch.handed:
            return
        batch.holding = True
        try:
            await self.handler(batch.items)
        except Exception as exc:
            batch.error = exc
        finally:
            batch.holding = False

    async def _dead_letter(self, batch: _Batch, d: _Delivery, reason: str) -> None:
        """The letter now; the term when the batch is settled (``_settle`` / ``_finish_oldest``)."""
        await self.dead_letters.write(self.durable, d.msg, reason)
        batch.parked[d.seq] = d.msg

    async def _finish_oldest(self) -> None:
        batch = self.inflight[0]
        assert batch.call is not None
        await batch.call  # still in ``inflight`` meanwhile: it holds its messages (``park``)
        self.inflight.popleft()
        if self.void:
            # An earlier batch failed and the consumer will be reset: nothing after it is acked,
            # and this one's dead letters must not be written again when it comes back.
            self.dead.update(seq for seq in batch.parked if seq > self.acked)
            if not self.inflight:
                self.void = False
            return
        if batch.error is None:
            await self._settle(batch)
            return
        await self._failed(batch, batch.error)
        self.void = bool(self.inflight)
        # Dead-lettered ones at the head of the batch can be termed now: everything delivered
        # before them is settled (earlier batches were acked). The rest wait for the redelivery.
        for d in batch.deliveries:
            if d.seq not in batch.parked:
                break
            await term(d.msg)
            self.acked = max(self.acked, d.seq)
        self.dead.update(seq for seq in batch.parked if seq > self.acked)

    async def _settle(self, batch: _Batch) -> None:
        """After the commit: term the dead-lettered ones, then one ack settles the batch."""
        for raw in batch.parked.values():  # each term also acks what precedes it: all committed by now
            await term(raw)
        newest = max(batch.deliveries, key=lambda d: d.seq)
        if newest.seq not in batch.parked:
            await ack(newest.msg)
        if newest.seq > self.acked:
            self.acked = newest.seq
        if self.failures:
            self.failures = {s: n for s, n in self.failures.items() if s > self.acked}
        if self.dead:
            self.dead = {s for s in self.dead if s > self.acked}

    async def _failed(self, batch: _Batch, exc: Exception) -> None:
        """Drop the batch (and what arrived after it) for a redelivery from the ack floor."""
        log.warning("%s: batch of %d failed: %r", self.durable, len(batch.handed), exc)
        worst = 0
        for d in batch.handed:
            count = self.failures[d.seq] = self.failures.get(d.seq, 0) + 1
            worst = max(worst, count)
            if count >= self.max_deliver:
                await self._dead_letter(batch, d, f"batch failed {count} times: {exc!r}")
        self.buffer.clear()
        self.broken = "a batch failed"
        self.pause = min(0.5 * worst, 5.0)

    # ---- binding and resetting the consumer ----------------------------------------------

    async def _bind(self) -> None:
        await self._unbind()
        info = await self._usable_consumer()
        self.reconnects = self.nc.stats["reconnects"]
        self.inbox = self.nc.new_inbox()
        self.sub = await self.nc.subscribe(self.inbox, cb=self._on_msg)
        self.buffer.clear()
        self.expected = (info.delivered.consumer_seq if info.delivered else 0) + 1
        self.remaining = 0
        self.more = 0
        self.broken = ""

    async def _unbind(self) -> None:
        sub, self.sub = self.sub, None
        if sub is not None:
            await quietly(sub.unsubscribe())

    async def _usable_consumer(self) -> ConsumerInfo:
        """The durable consumer, ack-all, with no delivery outstanding; created if missing."""
        js = self.js
        try:
            info: ConsumerInfo = await js.consumer_info(self.stream, self.durable)
        except nats.js.errors.NotFoundError:
            created: ConsumerInfo = await js.add_consumer(self.stream, self._config(start=self.recreating_from or 0))
            self.recreating_from = None
            return created
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        if info.config.ack_policy != AckPolicy.ALL:
            log.warning("%s: recreating the consumer with ack-all, from stream seq %d", self.durable, floor + 1)
            return await self._recreate(floor)
        if info.config.ack_wait is None or abs(info.config.ack_wait - self.ack_wait) > 0.01:
            # A durable keeps the ack wait it was made with; the in_progress heartbeats of its
            # consumers are timed from today's setting, so the server must use that one too.
            log.info("%s: ack wait %ss -> %ss", self.durable, info.config.ack_wait, self.ack_wait)
            config = info.config
            config.ack_wait = self.ack_wait
            info = await js.add_consumer(self.stream, config)
        if info.num_ack_pending:
            return await self._reset(info)
        return info

    async def _reset(self, info: ConsumerInfo) -> ConsumerInfo:
        """Forget every unacked delivery: all of it is delivered again, from the ack floor."""
        js = self.js
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        if floor < self.acked:
            # Our last acks may still be on their way (or lost with a NATS restart): the server's
            # floor would redeliver a little more than needed, and a late ack could land after
            # the reset. Give them a moment; what we acked is settled either way.
            await quietly(self.nc.flush(timeout=2))
            until = asyncio.get_running_loop().time() + 1.0
            while floor < self.acked and asyncio.get_running_loop().time() < until:
                await asyncio.sleep(0.02)
                info = await js.consumer_info(self.stream, self.durable)
                floor = info.ack_floor.stream_seq if info.ack_floor else 0
        server_floor, floor = floor, max(floor, self.acked)
        log.info("%s: resetting the consumer (%d unacked) to redeliver from stream seq %d",
                 self.durable, info.num_ack_pending or 0, floor + 1)
        version = self.nc.connected_server_version
        if (version.major, version.minor) < RESET_SINCE:
            return await self._recreate(floor)
        body = b"" if floor == server_floor else json.dumps({"seq": floor + 1}).encode()
        reply = await self.nc.request(f"{JS_API}.CONSUMER.RESET.{self.stream}.{self.durable}", body, timeout=5)
        answer = json.loads(reply.data)
        if answer.get("error"):
            nats.js.errors.APIError.from_error(answer["error"])  # raises
        after: ConsumerInfo = await js.consumer_info(self.stream, self.durable)
        return after

    async def _recreate(self, floor: int) -> ConsumerInfo:
        self.recreating_from = floor + 1 if floor else 0
        try:
            await self.js.delete_consumer(self.stream, self.durable)
        except nats.js.errors.NotFoundError:
            pass
        created: ConsumerInfo = await self.js.add_consumer(self.stream, self._config(start=self.recreating_from))
        self.recreating_from = None
        return created

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


_V1_TOKENS = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>


def _delivery_numbers(msg: Msg) -> tuple[int, int, int]:
    """(stream seq, consumer seq, pending) of a JetStream delivery.

    The same numbers as ``msg.metadata`` and read by nats-py's own reply parser and its own
    token positions (``Msg.Ack``, both subject layouts: with and without domain and account
    hash), without building the Metadata object and its timestamp, which cost a third of this
    consumer's time per message at the ledger's rates.
    """
    tokens = Msg.Metadata._get_metadata_fields(msg.reply)
    if len(tokens) == _V1_TOKENS:
        return int(tokens[5]), int(tokens[6]), int(tokens[8])
    return int(tokens[Msg.Ack.StreamSeq]), int(tokens[Msg.Ack.ConsumerSeq]), int(tokens[Msg.Ack.NumPending])
