"""A service's side of the ledger: publish events on its own subject, read back what was committed.

No service keeps a store of its own. Events go to ``ledger_append(<producer>)`` (JetStream,
deduplicated by message id), stamped with a singleton's ``fence`` when it has one; reads go
through the ledger's request/reply queries. ``wait_caught_up`` is the barrier a new leader (or
a restarted service) needs before it trusts what it reads: once the ledger's durable consumer
has nothing pending, everything published so far, a dead predecessor's events included, is
committed (or refused) and visible to queries.

The agent, the voice service and the pollers each wrap one of these.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import nats.errors
import nats.js.errors
from pydantic import BaseModel

from delegate.contracts import streams, topics
from delegate.contracts.events import Event, Fence
from delegate.contracts.messages import GetRequest, QueryReply, QueryRequest, ResumeRequest, ResumeState
from delegate.contracts.topics import Query

from .bus import Bus, BusUnavailable, RemoteError, Retryable
from .retry import Backoff, retrying

log = logging.getLogger(__name__)

Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)

PAGE = 1000
QUERY_TIMEOUT_S = 10.0


class LedgerUnavailable(Retryable):
    """The ledger did not answer (or is behind): retry later."""

    delay = 2.0


class _Behind(Exception):
    """The ledger's consumer still has messages pending (or does not exist yet)."""


def fenced_msg_id(event: Event, fence: Fence | None) -> str:
    """The message id carries the term's token: a successor republishing the same event (the
    user message keeps the input's id) must not be swallowed by JetStream's dedup window because
    a deposed holder's copy, which the ledger refuses, got there first."""
    return f"{event.id}:{fence.token}" if fence is not None else event.id


class LedgerClient:
    def __init__(self, bus: Bus, producer: str) -> None:
        self.bus = bus
        self.producer = producer
        self._append_topic = topics.ledger_append(producer)

    async def publish(self, event: Event, fence: Fence | None = None, *, deadline: float | None = None) -> None:
        """Publish ``event`` on this producer's subject, under ``fence`` when given."""
        if fence is not None:
            event = event.model_copy(update={"fence": fence})
        msg_id = fenced_msg_id(event, fence)
        if deadline is None:
            await self.bus.publish(self._append_topic, event, msg_id=msg_id)
        else:
            await self.bus.publish(self._append_topic, event, msg_id=msg_id, deadline=deadline)

    async def resume(self, turn_limit: int) -> ResumeState:
        return await self._ask(topics.LEDGER_RESUME, ResumeRequest(turn_limit=turn_limit), timeout=QUERY_TIMEOUT_S)

    async def get(self, event_id: str) -> Event | None:
        return (await self._ask(topics.LEDGER_GET, GetRequest(id=event_id))).event

    async def get_by_client_msg_id(self, client_msg_id: str) -> Event | None:
        return (await self._ask(topics.LEDGER_GET, GetRequest(client_msg_id=client_msg_id))).event

    async def query(self, req: QueryRequest) -> QueryReply:
        return await self._ask(topics.LEDGER_QUERY, req, timeout=QUERY_TIMEOUT_S)

    async def last_seq(self) -> int:
        return (await self.query(QueryRequest(after_seq=2**62, limit=1))).last_seq

    async def scan(self, req: QueryRequest) -> list[Event]:
        """Every event the query matches, following ``more`` page by page."""
        found: list[Event] = []
        after = req.after_seq
        while True:
            reply = await self.query(req.model_copy(update={"after_seq": after}))
            found.extend(reply.events)
            if not reply.more or not reply.events:
                return found
            after = reply.events[-1].seq or after

    async def newest(
        self,
        kinds: Sequence[str],
        *,
        conversation_id: str | None = None,
        where: Callable[[Event], bool] = lambda e: True,
        below: int | None = None,
        window: int = 2000,
    ) -> Event | None:
        """The newest committed event of these kinds, searching back in growing seq windows."""
        high = below if below is not None else await self.last_seq()
        while high > 0:
            low = max(high - window, 0)
            events = await self.scan(
                QueryRequest(
                    after_seq=low, through_seq=high, kinds=list(kinds), conversation_id=conversation_id, limit=PAGE
                )
            )
            for event in reversed(events):
                if where(event):
                    return event
            high, window = low, window * 4
        return None

    async def recent_messages(
        self, *, after_seq: int, want: int, last_seq: int | None = None, window: int = 1000
    ) -> list[Event]:
        """Up to ``want`` newest message events with seq > ``after_seq``, every conversation and channel."""
        high = last_seq if last_seq is not None else await self.last_seq()
        found: list[Event] = []
        while high > after_seq and len(found) < want:
            low = max(high - window, after_seq)
            page = await self.scan(QueryRequest(after_seq=low, through_seq=high, kinds=["message"], limit=PAGE))
            found = page + found
            high, window = low, window * 4
        return found[-want:] if want else []

    async def wait_caught_up(self, timeout: float = 15.0) -> None:
        """Return once the ledger has committed everything published to its stream so far."""
        try:
            async for attempt in retrying(retry_on=_Behind, deadline=timeout, initial=0.05, maximum=0.2):
                with attempt:
                    await self._caught_up()
        except _Behind as exc:
            raise LedgerUnavailable(f"the ledger has not caught up with its stream: {exc}") from None

    async def _caught_up(self) -> None:
        try:
            info = await self.bus.js.consumer_info("LEDGER", streams.LEDGER_WRITER)
        except nats.js.errors.NotFoundError:
            raise _Behind("its consumer does not exist yet") from None  # not started: wait as for a slow one
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            raise _Behind(f"consumer info failed: {exc!r}") from exc
        if info.num_pending or info.num_ack_pending:
            raise _Behind(f"{info.num_pending} pending, {info.num_ack_pending} unacknowledged")

    async def _ask(self, query: Query[Req, Rep], req: Req, timeout: float | None = None) -> Rep:
        try:
            return await self.bus.request(query, req, timeout=timeout)
        except BusUnavailable as exc:
            raise LedgerUnavailable(str(exc)) from exc
        except RemoteError as exc:
            if exc.code == "not_found":
                return query.reply()
            raise LedgerUnavailable(f"ledger answered {exc.code}: {exc.message}") from exc


async def restore_for_takeover(
    restore: Callable[[], Awaitable[None]], *, lost: asyncio.Event, stop: asyncio.Event
) -> None:
    """Run a new leader's ``restore`` until the ledger and the bus answer it, or the lease is lost or
    the service stops: a singleton takes over only from the state the ledger holds."""
    backoff = Backoff(initial=0.25, maximum=2.0)
    while not (lost.is_set() or stop.is_set()):
        try:
            await restore()
            return
        except (LedgerUnavailable, BusUnavailable) as exc:
            log.warning("waiting for the ledger before taking over: %s", exc)
            await backoff.sleep(stop)
