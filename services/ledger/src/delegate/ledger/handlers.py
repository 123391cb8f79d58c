"""The ledger's bus handlers: the batch writer and the request/reply queries."""

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

from nats.aio.msg import Msg
from pydantic import PrivateAttr

from delegate.contracts import topics
from delegate.contracts.cursor import Cursor, CursorError
from delegate.contracts.events import MAX_EVENT_BYTES, ThoughtflowArtifact
from delegate.contracts.messages import (
    ArtifactReply,
    ArtifactRequest,
    GetReply,
    GetRequest,
    PageReply,
    PageRequest,
    QueryReply,
    QueryRequest,
    ResumeRequest,
    ResumeState,
)
from delegate.contracts.streams import LEDGER_WRITER
from delegate.contracts.usage import UsageReply, UsageRequest
from delegate.runtime.bus import MSG_ID, TRANSIENT, Bus, DomainError, in_progress
from delegate.runtime.retry import Backoff

from .store import BadValue, LedgerStore, StoreUnavailable
from .store.base import StoredEvent
from .store.commit_rules import FENCED
from .writer import FOREIGN, UNFENCED, Announcement, WriterProcess, announcements

log = logging.getLogger(__name__)

T = TypeVar("T")

# After a restart, re-announce at most this many events the previous process may not have
# announced (normally at most the three batches the writer holds; more means the database came
# from elsewhere).
RECOVER_MAX = 5000

# A reply's events get the connection's max_payload less this: room for the reply's own
# fields (cursor, last_seq, more, the resume state's ids) and the request headers that a
# NATS reply carries back (nats-py's respond echoes them; the server counts them too).
REPLY_MARGIN = 16 * 1024

# The refusals of the fence rules, by how their reason begins: counted (the ledger's Pong
# carries the counts) and logged, besides being dead-lettered like every refusal.
FENCE_REFUSALS = {FENCED: "fence.stale", UNFENCED: "fence.unfenced", FOREIGN: "fence.foreign"}
COUNTED_MEMORY = 10_000


class Ledger:
    """Writes batches and answers queries; the store and the bus are handed in."""

    def __init__(
        self,
        store: LedgerStore,
        bus: Bus,
        writer: WriterProcess,
        *,
        history_limit: int = 500,
        expansion_cap: int = 2000,
        stop: asyncio.Event | None = None,
        retry_max_delay: float = 2.0,
        ack_wait: float = 10.0,
    ) -> None:
        self.store = store  # for reads; every write goes through the writer process
        self.bus = bus
        self.writer = writer
        self._recovered_at = writer.restarts
        self.history_limit = history_limit
        self.expansion_cap = expansion_cap
        self.stop = stop or asyncio.Event()
        self.retry_max_delay = retry_max_delay
        # A batch waits on the writer up to its timeout (120 s), far past the consumer's ack_wait:
        # in_progress this often keeps JetStream from redelivering it meanwhile.
        self.progress_every = ack_wait / 3
        self.counts: dict[str, int] = dict.fromkeys(FENCE_REFUSALS.values(), 0)
        self._counted: OrderedDict[int, None] = OrderedDict()  # stream seqs of counted refusals
        self.announced = 0  # newest seq announced on ledger.live.committed by this process
        self._persisted_announced = 0  # what the database says was announced
        self._announcing: asyncio.Future[None] | None = None  # the newest batch's announcement
        self._turn: asyncio.Future[None] | None = None  # done when the newest batch's is scheduled

    # ---- the writer -------------------------------------------------------------------

    async def recover(self) -> int:
        """Announce what a crashed predecessor committed but may not have announced.

        Subscribers dedupe by seq, so announcing one batch twice is harmless; never
        announcing it would leave a live view stale until its next resync.
        """
        announced = await self.store.announced_seq()
        last = await self.store.last_seq()
        after = max(announced, last - RECOVER_MAX)
        count = 0
        while after < last:
            result = await self.store.query(after_seq=after, through_seq=last, limit=1000)
            if not result.rows:
                break
            await self._announce(announcements(result.rows))
            count += len(result.rows)
            after = result.rows[-1].seq
        self.announced = last
        self._persisted_announced = announced
        if count:
            log.info("re-announced %d committed event(s) after seq %d", count, announced)
        return count

    async def on_batch(self, items: list[tuple[Msg, bytes]]) -> None:
        """Have the writer process validate and commit a batch; the bus acks it after this returns.

        What it cannot decode or the database refuses is dead-lettered with its reason
        (validation happens there, beside this process). The announcement goes out behind
        the previous one's, while the next batch is being committed: the writer does not
        wait for it. The ack may precede it; a crash in between is covered by ``recover``
        (the transactions record what was announced).
        """
        async with _in_progress_while([raw for raw, _ in items], self.progress_every):
            await self._on_batch(items)

    async def _on_batch(self, items: list[tuple[Msg, bytes]]) -> None:
        good: list[Msg] = []
        for raw, data in items:
            if len(data) > MAX_EVENT_BYTES:
                ident = (raw.headers or {}).get(MSG_ID, "?")  # producers use the event id (not parsed here)
                await self.bus.dead_letter(
                    LEDGER_WRITER, raw,
                    f"oversized event {ident}: {len(data)} bytes serialized,"
                    f" more than MAX_EVENT_BYTES ({MAX_EVENT_BYTES})",
                )
                continue
            good.append(raw)
        await self.writer.ensure_running()
        if self.writer.restarts != self._recovered_at:
            # A writer that died may have committed a batch it never reported: announce it now.
            self._recovered_at = self.writer.restarts
            await self.drain()
            await self.recover()
        # Calls overlap (the consumer hands over the next batch while the writer commits this
        # one): announcements follow the order the batches were sent to the writer, which is
        # the order it commits them in.
        previous, mine = self._turn, asyncio.get_running_loop().create_future()
        self._turn = mine
        try:
            committed = await self._store(good, previous)
            if previous is not None:
                await previous
            if self._announcing is not None:
                await self._announcing  # at most one batch's announcements in flight: bounded lag
            self._announce_in_order(committed)
        finally:
            mine.set_result(None)

    async def drain(self) -> None:
        """Wait for the announcements still going out (before the bus closes)."""
        if self._announcing is not None:
            await self._announcing

    async def _store(self, good: list[Msg], previous: "asyncio.Future[None] | None") -> list[Announcement]:
        announced = self.announced if self.announced != self._persisted_announced else None
        if not good and announced is None:
            return []
        backoff = Backoff(initial=0.1, maximum=self.retry_max_delay)
        while True:
            result = await self.writer.append([raw.data for raw in good], [_producer(raw) for raw in good], announced)
            for index, reason in result.refused:
                self._count_refusal(good[index], reason)
                await self.bus.dead_letter(LEDGER_WRITER, good[index], reason)
            if result.announced_saved and announced is not None:
                self._persisted_announced, announced = announced, None
            if result.unavailable is None:
                return result.committed
            # The database is down or busy: what is committed must still be announced (a
            # redelivery would skip it as a duplicate); the rest waits, held on to (in_progress,
            # from on_batch, keeps JetStream from redelivering it meanwhile) and sent again (idempotent).
            if previous is not None:
                await previous
            self._announce_in_order(result.committed)
            attempt = backoff.failures + 1
            if attempt in (1, 10) or attempt % 100 == 0:
                log.warning("store unavailable (attempt %d), retrying: %s", attempt, result.unavailable)
            refused = {index for index, _ in result.refused}
            good = [raw for i, raw in enumerate(good) if i not in refused]
            if not await backoff.sleep(self.stop):
                raise StoreUnavailable(result.unavailable)

    def _count_refusal(self, raw: Msg, reason: str) -> None:
        # A redelivered message (its batch outlived the ack wait under load) is refused again:
        # it is still one refusal, told apart by its stream sequence.
        seq = raw.metadata.sequence.stream if raw.metadata else None
        if seq is not None:
            if seq in self._counted:
                return
            self._counted[seq] = None
            if len(self._counted) > COUNTED_MEMORY:
                self._counted.popitem(last=False)
        for prefix, name in FENCE_REFUSALS.items():
            if reason.startswith(prefix):
                self.counts[name] += 1
                log.warning("refused an event on %s (%d %s so far): %s", raw.subject, self.counts[name], name, reason)
                return

    def _announce_in_order(self, events: Sequence[Announcement]) -> None:
        """Announce after every earlier announcement (seq order across batches), in the background."""
        if not events:
            return
        previous = self._announcing

        async def announce() -> None:
            if previous is not None:
                await previous  # never fails: each one catches its own errors
            try:
                await self._announce(events)
            except Exception:  # live only: subscribers resync by seq; recover() covers a restart
                log.exception("announcing seq %d..%d failed", events[0][0], events[-1][0])

        self._announcing = asyncio.ensure_future(announce())

    async def _announce(self, events: Sequence[Announcement]) -> None:
        if not events:
            return
        # One core publish per event, in seq order: the stored JSON (written by the writer process,
        # see writer.Announcement), not a second pydantic round trip. nc.publish only appends to
        # the client's buffer; the flush below sends them together.
        publish = self.bus.nc.publish
        subject = topics.LEDGER_COMMITTED.subject
        for seq, wire in events:
            try:
                await publish(subject, wire)
            except TRANSIENT as exc:  # live only: a subscriber that missed it resyncs by seq
                log.debug("announcement of seq %d dropped: %r", seq, exc)
        # Out of our buffers before the next transaction records them as announced: a crash
        # after that record must not take unsent announcements with it.
        try:
            await self.bus.nc.flush(timeout=1)
        except Exception as exc:  # NATS is away; live subscribers resync when it is back
            log.debug("flush after announcing failed: %r", exc)
        self.announced = max(self.announced, events[-1][0])

    # ---- queries ----------------------------------------------------------------------

    async def on_page(self, req: PageRequest) -> PageReply:
        try:
            before = Cursor.decode(req.before) if req.before is not None else None
        except CursorError as exc:
            raise DomainError("bad_cursor", str(exc)) from exc
        page = await _answer(
            self.store.page(
                before=before, limit=req.limit or self.history_limit, expansion_cap=self.expansion_cap,
                max_bytes=self.reply_budget(),
            )
        )
        return _spliced(SplicedPageReply, page.rows, cursor=page.cursor.encode() if page.cursor else None)

    async def on_query(self, req: QueryRequest) -> QueryReply:
        result = await _answer(
            self.store.query(
                after_seq=req.after_seq, through_seq=req.through_seq, conversation_id=req.conversation_id,
                span_id=req.span_id, kinds=req.kinds, limit=req.limit, max_bytes=self.reply_budget(),
            )
        )
        return _spliced(SplicedQueryReply, result.rows, last_seq=result.last_seq, more=result.more)

    async def on_get(self, req: GetRequest) -> GetReply:
        if req.id is None and req.client_msg_id is None:
            raise DomainError("bad_request", "give an event id or a client_msg_id")
        return GetReply(event=await _answer(self.store.get(event_id=req.id, client_msg_id=req.client_msg_id)))

    async def on_artifact(self, req: ArtifactRequest) -> ArtifactReply:
        """A run's newest picture: the payload of the event ``thoughtflow_artifacts`` points at."""
        row = await _answer(self.store.artifact(req.run_id))
        if row is None:
            return ArtifactReply()
        return ArtifactReply(
            artifact=ThoughtflowArtifact.model_validate_json(row.payload_json),
            event_id=row.id, seq=row.seq, created_at=row.ts,
        )

    async def on_usage(self, req: UsageRequest) -> UsageReply:
        """``model.usage`` totals from the usage projection (GET /api/usage)."""
        if req.to_ts <= req.from_ts:
            raise DomainError("bad_request", "to must be after from")
        return await _answer(self.store.usage(req))

    async def on_resume(self, req: ResumeRequest) -> ResumeState:
        return await _answer(self.store.resume(turn_limit=req.turn_limit, max_bytes=self.reply_budget()))

    def reply_budget(self) -> int:
        """Bytes of events one reply may carry: it must fit a single NATS message.

        A bigger one is refused by the client (MaxPayloadError), the caller times out and
        sees the ledger as unavailable, and a replay that asks again never gets past it.
        Read per request: a reconnect may land on a server with another max_payload.
        """
        return max(int(self.bus.nc.max_payload) - REPLY_MARGIN, 0)


class SplicedPageReply(PageReply):
    """A PageReply serialized by splicing the stored event JSON (see ``StoredEvent.json``).

    Validating and re-serializing 500 events through pydantic cost ~10 ms a page; the
    splice costs well under one. Its fields hold no events: only its JSON does.
    """

    _json: str = PrivateAttr(default="")

    def model_dump_json(self, **kwargs: Any) -> str:
        return self._json or super().model_dump_json(**kwargs)


class SplicedQueryReply(QueryReply):
    """A QueryReply serialized the same way (the gateway's replay reads up to 5000 events)."""

    _json: str = PrivateAttr(default="")

    def model_dump_json(self, **kwargs: Any) -> str:
        return self._json or super().model_dump_json(**kwargs)


R = TypeVar("R", SplicedPageReply, SplicedQueryReply)


def _spliced(cls: type[R], rows: Sequence[StoredEvent], **fields: Any) -> R:
    reply = cls.model_construct(**fields)
    events = ",".join(r.json() for r in rows)
    rest = "".join(f',"{name}":{json.dumps(value)}' for name, value in fields.items())
    reply._json = f'{{"error":null,"events":[{events}]{rest}}}'
    return reply


async def _answer(work: Awaitable[T]) -> T:
    """A database outage, or a value the database cannot hold, becomes a clear error reply,
    not an "internal" one (which a client may take for "try again later", forever)."""
    try:
        return await work
    except StoreUnavailable as exc:
        raise DomainError("unavailable", f"the ledger database is unavailable: {exc}") from exc
    except BadValue as exc:
        raise DomainError("bad_request", str(exc)) from exc


@contextlib.asynccontextmanager
async def _in_progress_while(msgs: list[Msg], every: float) -> AsyncIterator[None]:
    """Every ``every`` seconds until the block ends, tell JetStream the messages are still being
    worked on (nothing is sent for a block shorter than that)."""

    async def keep() -> None:
        while True:
            await asyncio.sleep(every)
            await asyncio.gather(*(in_progress(m) for m in msgs))  # a failure is logged there

    keeping = asyncio.ensure_future(keep())
    try:
        yield
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)


def _producer(raw: Msg) -> str:
    """Who published it: the last token of ``ledger.evt.append.<producer>`` (NATS permissions
    let each identity publish only its own)."""
    return raw.subject.rpartition(".")[2]
