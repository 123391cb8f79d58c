"""The store interface every backend implements, and the logic they share.

Backends supply a few primitive reads (keyset scans, span starts, newest-of-kind)
and one write (``append``); paging with span expansion and the resume state are
built here once, so SQLite and PostgreSQL cannot drift apart on what they mean.

One concept at this length: the store's contract (its rows, its interface, and the paging
and resume every backend answers through it). What a write decides besides storing rows
(fences, and the conversations, spans, terms and artifacts it touches) is ``commit_rules``.
"""

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any, NamedTuple

from pydantic_core import to_json

from delegate.contracts.cursor import Cursor
from delegate.contracts.events import Event, Fence, Message
from delegate.contracts.ids import format_ts
from delegate.contracts.messages import ResumeState, TermInfo
from delegate.contracts.usage import UsageReply, UsageRequest

log = logging.getLogger(__name__)

Key = tuple[datetime, str]  # the timeline key: (ts, event id)

ANNOUNCED = "announced_seq"  # ledger_state key: newest seq announced on ledger.live.committed


class StoreUnavailable(Exception):
    """The database cannot be reached or is busy right now: retry the same work later."""


class BadValue(ValueError):
    """A read asked with a value the database cannot hold (an integer past 64 bits, a NUL in
    PostgreSQL text): the request is wrong, and asking again will not help."""


_quote = json.encoder.encode_basestring  # the C string encoder json.dumps uses


def _opt(value: str | None) -> str:
    return "null" if value is None else _quote(value)


class StoredEvent(NamedTuple):
    """One row as read back: what paging needs to compare, and the stored JSON to send.

    Building 500 pydantic ``Event`` objects and serializing them again costs several
    times the query; a page is instead spliced together from the stored JSON text.
    A NamedTuple, not a frozen dataclass: just as immutable, and built ~7x faster (the
    writer builds one per committed event, a page one per row).
    """

    seq: int
    id: str
    ts: datetime
    ts_text: str  # format_ts(ts): the wire form
    conversation_id: str | None
    span_id: str | None
    kind: str
    channel: str
    role: str | None
    parent_id: str | None
    payload_json: str

    @property
    def key(self) -> Key:
        return (self.ts, self.id)

    def event(self) -> Event:
        # Rows were validated on the way in: no second validation (and no fence: see ``write``).
        fields: dict[str, Any] = {
            "id": self.id, "ts": self.ts, "seq": self.seq, "conversation_id": self.conversation_id,
            "span_id": self.span_id, "kind": self.kind, "channel": self.channel, "role": self.role,
            "parent_id": self.parent_id, "payload": json.loads(self.payload_json),
        }
        return Event.model_construct(**fields)

    def json(self) -> str:
        """The event's wire JSON, the same document ``Event.model_dump_json`` would give (the
        fence is not stored: the ledger judged it on the way in, readers have no use for it)."""
        return (
            f'{{"id":{_quote(self.id)},"ts":"{self.ts_text}","seq":{self.seq},'
            f'"conversation_id":{_opt(self.conversation_id)},"span_id":{_opt(self.span_id)},'
            f'"kind":{_quote(self.kind)},"channel":{_quote(self.channel)},"role":{_opt(self.role)},'
            f'"parent_id":{_opt(self.parent_id)},"payload":{self.payload_json},"fence":null}}'
        )


@dataclass(frozen=True)
class Page:
    rows: list[StoredEvent]  # oldest first
    cursor: Cursor | None  # of the oldest event, None when nothing is older
    # Growth stopped short, at the expansion cap or the byte budget: a span may be split
    # (the page still joins its neighbours exactly).
    capped: bool = False

    @property
    def events(self) -> list[Event]:
        return [r.event() for r in self.rows]


@dataclass(frozen=True)
class QueryResult:
    rows: list[StoredEvent]  # by seq ascending
    more: bool
    last_seq: int

    @property
    def events(self) -> list[Event]:
        return [r.event() for r in self.rows]


def reply_bytes(row: StoredEvent) -> int:
    """What ``row`` adds to a spliced reply: its wire JSON in UTF-8 and the comma before it."""
    text = row.json()
    return (len(text) if text.isascii() else len(text.encode())) + 1


class Narrowing(NamedTuple):
    """Which events ``LedgerStore.query`` asks for: a seq range, narrowed."""

    after_seq: int
    through_seq: int | None
    conversation_id: str | None
    span_id: str | None
    kinds: Collection[str] | None


class Room:
    """Takes rows, in the order read, while a reply has room for them.

    At most ``limit`` rows, and at most ``max_bytes`` of their wire JSON (None: no bound):
    a NATS message is capped at the server's max_payload, and one event alone may be
    256 KiB. ``take`` refuses the first row that does not fit and says so, so a backend
    reading a cursor lazily stops right there and reads no further. With ``first``, the
    first row is taken however big it is: a reply with room for nothing would never move on.
    """

    __slots__ = ("cut", "first", "left", "limit", "more", "rows", "used")

    def __init__(self, limit: int, max_bytes: int | None = None, *, first: bool = False) -> None:
        self.limit = limit
        self.left = max_bytes  # bytes still free; None: unbounded
        self.used = 0  # bytes taken
        self.first = first
        self.rows: list[StoredEvent] = []
        self.more = False  # a row was offered and refused (by count or by size)
        self.cut = False  # ... and it was refused for its size

    def take(self, row: StoredEvent) -> bool:
        """Keep ``row`` if it fits; False when it does not (and no later row is wanted)."""
        if len(self.rows) >= self.limit:
            self.more = True
            return False
        if self.left is not None:
            size = reply_bytes(row)
            if size > self.left and (self.rows or not self.first):
                self.more = self.cut = True
                return False
            self.left -= size
            self.used += size
        self.rows.append(row)
        return True

    def wanted(self) -> int:
        """About how many more rows to read at once: all it may still take, or, when bytes bound
        it, as many as the room left holds at the average size so far (plus the one to refuse)."""
        count = self.limit + 1 - len(self.rows)
        if self.left is None or not self.rows:
            return count
        return max(1, min(count, self.left * len(self.rows) // max(self.used, 1) + 1))


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations(backend: str) -> list[Migration]:
    """The numbered SQL files of one backend (``NNN_name.sql``), in order."""
    folder = resources.files("delegate.ledger").joinpath("migrations", backend)
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest.removesuffix(".sql"), entry.read_text()))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{backend} migrations are not numbered 1..n: {[m.version for m in found]}")
    return found


def narrowing(
    *, after_seq: int, through_seq: int | None, conversation_id: str | None, span_id: str | None, mark: str
) -> tuple[list[str], list[Any]]:
    """A query's seq range and equality filters as SQL conditions with ``mark`` placeholders.

    Shared by both backends; each adds its own spelling of the ``kinds`` filter.
    """
    where = [f"seq > {mark}"]
    params: list[Any] = [after_seq]
    for condition, value in (
        ("seq <= ", through_seq), ("conversation_id = ", conversation_id), ("span_id = ", span_id),
    ):
        if value is not None:
            where.append(condition + mark)
            params.append(value)
    return where, params


def client_msg_id(event: Event) -> str | None:
    # The stored dict, not a model of it: every insert comes through here (bulk loads too).
    value = event.payload.get("client_msg_id") if event.is_kind(Message) else None
    return value if isinstance(value, str) else None


def payload_json(event: Event) -> str:
    """Compact JSON as ``Event.model_dump_json`` writes the payload (pydantic's serializer: ~5x json.dumps)."""
    text = to_json(event.payload).decode()
    if "NaN" in text or "Infinity" in text:
        # to_json writes NaN/Infinity bare, but what we store is strict JSON, spliced verbatim
        # into replies: json.dumps refuses those (ValueError) and passes a string merely naming them.
        return json.dumps(event.payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text


# An event as the ledger inserts it (``insert_params``): (id, ts text, conversation_id, span_id,
# kind, channel, role, parent_id, client_msg_id, payload json). Plain tuples of str/None: the
# bus process builds them from validated events and hands them to the writer process.
Row = tuple[Any, ...]


def stored(row: Row, seq: int) -> StoredEvent:
    """The StoredEvent of a row just inserted with ``seq``."""
    event_id, ts_text, conv, span, kind, channel, role, parent, _client_msg_id, payload = row
    return StoredEvent(
        seq, event_id, datetime.fromisoformat(ts_text), ts_text, conv, span, kind, channel, role, parent, payload
    )


def insert_params(event: Event) -> Row:
    """The row of a validated event."""
    return (
        event.id, format_ts(event.ts), event.conversation_id, event.span_id, event.kind, event.channel,
        event.role, event.parent_id, client_msg_id(event), payload_json(event),
    )


def unique_by_id(rows: Sequence[Row]) -> list[Row]:
    """First occurrence wins: the same event twice in one batch is stored once."""
    seen: set[str] = set()
    out = []
    for row in rows:
        if row[0] not in seen:
            seen.add(row[0])
            out.append(row)
    return out


@dataclass
class Written:
    """What one ``write`` did: the events it newly stored, and the rows it refused."""

    committed: list[StoredEvent] = field(default_factory=list)  # in seq order
    refused: list[tuple[int, str]] = field(default_factory=list)  # (index in the rows given, why)


class LedgerStore(ABC):
    """What the ledger's consumer and request handlers need from a database.

    ``append`` is the only write. Every read returns ``Event`` objects carrying ``seq``.
    """

    backend: str = "?"

    # ---- lifecycle ------------------------------------------------------------------

    @abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date (numbered migrations, ``schema_version``)."""

    @abstractmethod
    async def close(self) -> None: ...

    # ---- the write ------------------------------------------------------------------

    async def append(
        self, events: Sequence[Event], *, announced_through: int | None = None
    ) -> list[StoredEvent]:
        """``append_rows`` for validated events (their fences are not checked: see ``write``)."""
        return await self.append_rows([insert_params(e) for e in events], announced_through=announced_through)

    async def append_rows(
        self, rows: Sequence[Row], *, announced_through: int | None = None
    ) -> list[StoredEvent]:
        """``write`` without fences: nothing can be refused."""
        return (await self.write(rows, announced_through=announced_through)).committed

    async def write(
        self,
        rows: Sequence[Row],
        *,
        fences: Sequence[Fence | None] | None = None,
        announced_through: int | None = None,
    ) -> Written:
        """Store a batch of rows (``insert_params``) in ONE transaction, idempotently by event id.

        ``committed`` holds only the events this call newly stored, each with its ``seq``, in
        seq order (``.event()`` gives the ``Event``, ``.json()`` its wire form); events
        already stored (redeliveries) are skipped silently. Conversations, spans, terms and
        thoughtflow artifacts are updated in the same transaction. ``announced_through``
        records, in that transaction too, the newest seq already announced live.

        ``fences`` (one per row, or None for none) are judged in that transaction against the
        ``fences`` table (``judge_fences``), which it raises: a row with an older term's token
        is ``refused``, unless it is stored already (a redelivery of what its term wrote while
        it led). The fence itself is not stored: it has done its work once the row is in.
        Raises ``StoreUnavailable`` when the database is unreachable or busy.
        """
        if not rows and announced_through is None:
            return Written()
        return await self._append(list(rows), fences, announced_through)

    @abstractmethod
    async def _append(self, rows: list[Row], fences: Sequence[Fence | None] | None, announced: int | None) -> Written:
        """``write``'s transaction, for a batch that has something to store or record."""

    @abstractmethod
    async def fence_marks(self) -> dict[str, int]:
        """The highest fencing token committed per singleton."""

    # ---- reads ----------------------------------------------------------------------

    async def query(
        self,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        conversation_id: str | None = None,
        span_id: str | None = None,
        kinds: Collection[str] | None = None,
        limit: int = 500,
        max_bytes: int | None = None,
    ) -> QueryResult:
        """Events with ``after_seq < seq <= through_seq``, narrowed, by seq; one snapshot.

        At most ``limit`` events whose wire JSON totals at most ``max_bytes`` (see ``Room``;
        the first event always comes); ``more`` when any matching event was left out.
        """
        if kinds is not None and not kinds:
            return QueryResult([], False, await self.last_seq())
        where = Narrowing(after_seq, through_seq, conversation_id, span_id, kinds)
        return await self._query(where, Room(limit, max_bytes, first=True))

    @abstractmethod
    async def _query(self, where: Narrowing, room: Room) -> QueryResult:
        """``query``'s events offered to ``room`` in seq order, and ``last_seq``, in one snapshot."""

    @abstractmethod
    async def get(self, *, event_id: str | None = None, client_msg_id: str | None = None) -> Event | None:
        """One event by id, or the first stored message carrying ``client_msg_id``."""

    @abstractmethod
    async def artifact(self, run_id: str) -> StoredEvent | None:
        """The thoughtflow.artifact event of the run's newest picture (``thoughtflow_artifacts``)."""

    @abstractmethod
    async def usage(self, req: UsageRequest) -> UsageReply:
        """``model.usage`` totals from the usage projection (``store.usage``)."""

    @abstractmethod
    async def last_seq(self) -> int: ...

    @abstractmethod
    async def announced_seq(self) -> int:
        """The ``announced_through`` recorded by the newest ``append`` (0 if none)."""

    # ---- primitives for paging and resume (backend-specific SQL) ---------------------

    @abstractmethod
    async def _older(self, before: Key | None, room: Room) -> list[StoredEvent]:
        """The events strictly older than ``before`` (all if None), newest first, while ``room`` takes them.

        Returns ``room.rows``. Reads at most ``room.limit + 1`` rows, and none after the first refused.
        """

    @abstractmethod
    async def _between(self, low: Key, high: Key, room: Room) -> list[StoredEvent]:
        """The events with ``low <= key < high``, newest first, while ``room`` takes them (as ``_older``)."""

    @abstractmethod
    async def _span_starts(self, span_ids: Collection[str]) -> dict[str, Key]:
        """The oldest timeline key of each span (its span.opened event, normally)."""

    @abstractmethod
    async def _has_older(self, key: Key) -> bool: ...

    @abstractmethod
    async def _newest_open_conversation(self) -> str | None:
        """The not-ended conversation with the newest committed event."""

    @abstractmethod
    async def _open_span_event(self, conversation_id: str) -> Event | None:
        """The span.opened event of the conversation's newest span that is not closed."""

    @abstractmethod
    async def _newest(
        self, conversation_id: str, kind: str, limit: int, role: str | None = None
    ) -> list[Event]:
        """The newest ``limit`` events of one kind in a conversation, newest first (by seq)."""

    @abstractmethod
    async def _open_term(self, term_type: str) -> TermInfo | None:
        """The newest started term of this type that has not ended (by its start's seq)."""

    # ---- shared logic ---------------------------------------------------------------

    async def page(
        self, *, before: Cursor | None, limit: int, expansion_cap: int, max_bytes: int | None = None
    ) -> Page:
        """The ``limit`` events just older than ``before`` (newest if None), grown to whole spans.

        A page is always one contiguous run of the (ts, id) timeline, so walking the
        cursors back returns every event exactly once. It then grows older until every
        span with an event on the page starts on the page (a span's events all lie
        after its start, so no span is ever split between two pages). The growth stops
        at ``expansion_cap`` extra events, or where the events' wire JSON would pass
        ``max_bytes`` (a reply must fit one NATS message); the page is then still
        contiguous and ``capped``: only that one oversized span is split. The byte budget
        may also end a page before ``limit`` events; it always holds at least one event.
        """
        high_key = (before.ts, before.event_id) if before else None
        room = Room(limit, max_bytes, first=True)
        newest_first = await self._older(high_key, room)
        if not newest_first:
            return Page([], None)
        rows = newest_first[::-1]
        low: Key = rows[0].key
        budget = expansion_cap
        checked: set[str] = set()
        fresh = rows
        # Out of bytes already: the next older event did not fit, so nothing can be grown.
        capped = room.cut
        while not capped:
            spans = {e.span_id for e in fresh if e.span_id} - checked
            if not spans:
                break
            checked |= spans
            starts = await self._span_starts(spans)
            start = min(starts.values(), default=low)
            if start >= low:
                break
            grow = Room(budget, room.left)
            fresh = (await self._between(start, low, grow))[::-1]
            rows = fresh + rows
            budget -= len(fresh)
            room.left = grow.left
            if fresh:
                low = fresh[0].key
            capped = grow.more  # an event between the span's start and the page was left out
        cursor = Cursor(low[0], low[1]) if await self._has_older(low) else None
        return Page(rows, cursor, capped)

    async def resume(self, *, turn_limit: int, max_bytes: int | None = None) -> ResumeState:
        """The restarting agent's state; with ``max_bytes``, the oldest of its recent turns are
        dropped until every event in it totals at most that much wire JSON (one NATS message)."""
        # Read last_seq first: anything committed while we look is then also after it,
        # so a caller catching up from last_seq sees it (perhaps twice, never not at all).
        last_seq = await self.last_seq()
        agent_term = await self._open_term("agent")
        marks = await self.fence_marks()
        conversation_id = await self._newest_open_conversation()
        if conversation_id is None:
            return ResumeState(last_seq=last_seq, agent_term=agent_term, fence_marks=marks)

        async def newest(kind: str, role: str | None = None) -> Event | None:
            found = await self._newest(conversation_id, kind, 1, role)
            return found[0] if found else None

        turns = await self._newest(conversation_id, "message", turn_limit) if turn_limit else []
        assistant = await newest("message", "assistant")
        answer = assistant.payload_as(Message) if assistant else None
        response_id = answer.response_id if answer else None
        open_span = await self._open_span_event(conversation_id)
        capsule = await newest("context.capsule")
        checkpoint = await newest("checkpoint")
        compacted = await newest("context.compacted")
        usage = await newest("context.usage")
        if max_bytes is not None:
            # The single anchors stay (the agent cannot resume without them); the turns are
            # context only, and the oldest of them matter least.
            anchors = (open_span, capsule, checkpoint, compacted, usage, assistant)
            left = max_bytes - sum(_event_bytes(e) for e in anchors if e is not None)
            kept = 0
            for turn in turns:  # newest first
                left -= _event_bytes(turn) + 1  # and its comma
                if left < 0:
                    break
                kept += 1
            if kept < len(turns):
                log.info("resume: left out the %d oldest of %d turns to fit %d bytes",
                         len(turns) - kept, len(turns), max_bytes)
                turns = turns[:kept]
        return ResumeState(
            conversation_id=conversation_id,
            open_span=open_span,
            recent_turns=turns[::-1],
            capsule=capsule,
            last_response_id=response_id if isinstance(response_id, str) else None,
            last_checkpoint=checkpoint,
            last_compacted=compacted,
            last_usage=usage,
            last_assistant=assistant,
            last_seq=last_seq,
            agent_term=agent_term,
            fence_marks=marks,
        )


def _event_bytes(event: Event) -> int:
    return len(event.model_dump_json().encode())
