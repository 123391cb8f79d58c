"""Retrieval before each turn: memory for the model request, recorded as ``memory.retrieved``.

Before the first model request of a turn (a user message on any Responses channel, or an
activation) the agent asks the memory service (``memory.cmd.search``) with the turn's text,
excluding the verbatim turns the request already carries (the newest, when they are more than a
request may name), and waits at most ``MEMORY_RETRIEVAL_WAIT_MS``: the turn never stalls on
memory, and without an answer (the service is down) it goes on without memory, logged once per
outage.

A user message's search starts the moment the input is published, when the leader hears it
live while idle (``Inputs.on_published``), or else as it arrives (``prefetch``), before the
lease read and the turn's opening work, which it overlaps: the request waits only for what is
left of it. It is used only when the turn asks exactly the same (an exclusion that changed meanwhile, as
a fresh working context changes it, asks again); one nobody used is cancelled.

A search that answers after the wait is kept. What in it the model does not have yet (not
given earlier in this span, not a verbatim turn, not in the capsule: by id and by normalized
text) is given to the next model request of the same span: the turn's next tool round, or the
next turn. If nothing in it is novel it is recorded as not surfaced and given to nobody.

Every search that answered is recorded, also when it found nothing, so the timeline shows what
memory was consulted: ``memory.retrieved`` with the turn as parent, in the turn's span, under
the term's fence like every other event of the agent. A search that answered in time is recorded
once the turn's first delta is out (``release``), or its first response ended without one: its
append, the ledger's commit, the fan-out to every client and its indexing no longer share the
cores with the way to the first delta. It is committed before the turn's answer (``settle``),
under an id fixed by the turn, so a turn answered again after a crash records it once.
"""

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from delegate.contracts.events import Event, MemoryRetrieved, Message, make_event
from delegate.contracts.memory import MemoryResult, MemorySearchRequest, Purpose
from delegate.runtime.bus import Bus
from delegate.runtime.memory_context import (
    MAX_EXCLUDED,
    MemoryContext,
    MemoryLookup,
    Outage,
    Seen,
    given_in_time,
    retrieved,
    search_request,
    split_novel,
)
from delegate.runtime.working_context import VerbatimMessage, capsule_text

from .ledger import Ledger
from .settings import Settings
from .turn_types import Turn

log = logging.getLogger(__name__)

# A turn's record has a name-based id (see ``record_id``).
RECORD_NAMESPACE = uuid.UUID("0c7e2a51-3b8d-4f6e-9a14-d25b8e6f1c70")


@dataclass
class SpanMemory:
    """The memory given in one span, and late results waiting for its next request."""

    span_id: str
    given: Seen = field(default_factory=Seen)
    pending_items: list[MemoryResult] = field(default_factory=list)
    pending_adaptations: list[MemoryResult] = field(default_factory=list)

    def pending(self) -> Seen:
        seen = Seen()
        seen.add_items([*self.pending_items, *self.pending_adaptations])
        return seen

    def take_pending(self) -> tuple[list[MemoryResult], list[MemoryResult]]:
        items, adaptations = self.pending_items, self.pending_adaptations
        self.pending_items, self.pending_adaptations = [], []
        return items, adaptations


class TurnMemory:
    """What the requests of one turn are given: its own search, plus late novel results of the span."""

    def __init__(self, span: SpanMemory) -> None:
        self.span = span
        self.items: list[MemoryResult] = []
        self.adaptations: list[MemoryResult] = []

    def give(self, items: Iterable[MemoryResult], adaptations: Iterable[MemoryResult]) -> None:
        have = {i.id for i in [*self.items, *self.adaptations]}
        for target, new in ((self.items, items), (self.adaptations, adaptations)):
            for item in new:
                if item.id not in have:
                    target.append(item)
                    have.add(item.id)
                    self.span.given.add(item.id, item.text)

    def context(self) -> MemoryContext:
        """The memory for the next request: late results that arrived meanwhile join it now."""
        self.give(*self.span.take_pending())
        return MemoryContext(tuple(self.items), tuple(self.adaptations))


def item_text(item: dict[str, Any]) -> str:
    """The text of an input message item, as the model reads it."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def turn_query(turn: Turn) -> str:
    """What to search memory for: the user's words, or what the turn names (an activation's signals)."""
    if turn.memory_query is not None:
        return turn.memory_query
    return item_text(turn.item) if turn.item.get("role") == "user" else ""


class Retrieval:
    def __init__(
        self, bus: Bus, ledger: Ledger, settings: Settings, open_span: Callable[[], str | None] = lambda: None
    ) -> None:
        self.bus = bus
        self.ledger = ledger
        self.settings = settings
        self.open_span = open_span  # the agent's open span now: late results are only for it
        self.outage = Outage("the agent")
        # The verbatim turns the Responses chain (or the fresh working context) carries, and
        # their ids oldest first: a search excludes the newest when they are too many to name.
        self.carried = Seen()
        self._carried_ids: dict[str, None] = {}
        self._prefetched: MemoryLookup | None = None
        self._prefetched_for: str | None = None  # the input it was started for
        self._span: SpanMemory | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._held: dict[str, MemoryRetrieved] = {}  # turn id -> its on-time record, not yet out
        self._records: dict[str, asyncio.Task[None]] = {}  # turn id -> its on-time record going out

    # ---- what the model carries verbatim ----------------------------------------------------

    def carry_fresh(self, messages: Iterable[VerbatimMessage]) -> None:
        """A fresh working context: the model carries exactly these messages now."""
        self.carried = Seen()
        self._carried_ids = {}
        for m in messages:
            self.carry(m.event_id, m.text)

    def carry_events(self, events: Iterable[Event]) -> None:
        """Messages a resumed chain carries (the resume state's ``recent_turns``)."""
        for event in events:
            if (message := event.payload_as(Message)) is not None:
                self.carry(event.id, message.text)

    def carry(self, event_id: str | None, text: str) -> None:
        self.carried.add(event_id, text)
        if event_id:
            self._carried_ids.pop(event_id, None)  # carried again: it is among the newest now
            self._carried_ids[event_id] = None
            # Only the newest are named in a search: a long chain's older ids would be copied
            # and cut off again before every turn's request.
            if len(self._carried_ids) > MAX_EXCLUDED:
                del self._carried_ids[next(iter(self._carried_ids))]

    # ---- before a turn -------------------------------------------------------------------

    def _span_for(self, span_id: str) -> SpanMemory:
        if self._span is None or self._span.span_id != span_id:
            self._span = SpanMemory(span_id)  # a new span: what was given in the last one is gone
        return self._span

    def request_for(self, turn_id: str, query: str, purpose: Purpose) -> MemorySearchRequest | None:
        """The search a turn asks: its query, excluding what the model carries verbatim, newest kept."""
        excluded = list(self._carried_ids)
        if turn_id not in self._carried_ids:
            excluded.append(turn_id)
        return search_request(
            query, purpose=purpose, budget_tokens=self.settings.memory_context_tokens, exclude_event_ids=excluded,
        )

    def prefetch(self, turn_id: str, query: str, purpose: Purpose = "turn") -> None:
        """Start the search of a turn about to be taken on; ``before_turn`` picks it up. The same
        search started already (as the input was published) is kept, not asked again."""
        request = self.request_for(turn_id, query, purpose)
        if request is not None and self._prefetched is not None and self._prefetched.request == request:
            return
        self.discard_prefetch()
        if request is not None:
            self._prefetched, self._prefetched_for = MemoryLookup(self.bus, request), turn_id

    def prefetching(self) -> bool:
        """A search started ahead of its input is waiting to be taken over."""
        return self._prefetched is not None

    def discard_prefetch(self, turn_id: str | None = None) -> None:
        """A search started for a turn that did not ask it (deposed, answered before, deferred);
        with ``turn_id``, only that input's: the next one's, started as it was published, stays."""
        if turn_id is not None and self._prefetched_for not in (None, turn_id):
            return
        lookup, self._prefetched, self._prefetched_for = self._prefetched, None, None
        if lookup is not None:
            lookup.cancel()

    def _lookup(self, request: MemorySearchRequest) -> MemoryLookup:
        lookup, self._prefetched, self._prefetched_for = self._prefetched, None, None
        if lookup is not None and lookup.request == request:
            return lookup
        if lookup is not None:
            lookup.cancel()
        return MemoryLookup(self.bus, request)

    async def before_turn(self, turn: Turn, *, capsule: Event | None, purpose: Purpose) -> TurnMemory:
        """Search (or take the prefetched search), wait briefly, return what this turn's requests are given."""
        # One turn at a time: a record still held is of a turn that raised out (it is answered
        # again, and recorded then).
        self._held.clear()
        span = self._span_for(turn.span_id)
        memory = TurnMemory(span)
        request = self.request_for(turn.id, turn_query(turn), purpose)
        if request is None:
            self.discard_prefetch()
            return memory
        lookup = self._lookup(request)
        wait = max(self.settings.memory_retrieval_wait_ms, 0) / 1000.0
        try:
            # No wait means none: a prefetched search that happens to be done is late all the same.
            reply = await lookup.within(wait) if wait > 0 else None
        except Exception as exc:  # whatever it is, the turn goes on without memory
            self.outage.failed(exc)
            return memory
        except asyncio.CancelledError:
            lookup.cancel()
            raise
        if reply is None:
            self._spawn(self._late(turn, lookup, span, capsule))
            return memory
        self.outage.answered()
        seen = Seen(self.carried.ids, self.carried.texts)  # not copied: split_novel works on a copy
        seen.add_blob(capsule_text(capsule))
        given, record = given_in_time(lookup, reply, seen)
        memory.give(given.items, given.adaptations)
        self._held[turn.id] = record
        return memory

    def release(self, turn: Turn) -> None:
        """The turn's first delta is out (or its first response ended): its record goes out now."""
        record = self._held.pop(turn.id, None)
        if record is not None:
            self._records[turn.id] = self._spawn(self._append(turn, record))

    async def _late(self, turn: Turn, lookup: MemoryLookup, span: SpanMemory, capsule: Event | None) -> None:
        try:
            reply = await lookup.task
        except Exception as exc:  # whatever it is, the turn goes on without memory
            self.outage.failed(exc)
            return
        self.outage.answered()
        with contextlib.suppress(Exception):
            await turn.opened()  # the turn's span is the agent's open span once its opening is out
        seen = span.given.merged(span.pending(), self.carried)
        seen.add_blob(capsule_text(capsule))
        items, dropped = split_novel(reply.results, seen)
        adaptations, dropped_adaptations = split_novel(reply.adaptations, seen)
        dropped += dropped_adaptations
        request = lookup.request
        if self._span is not span or self.open_span() != span.span_id:
            # The span closed meanwhile: there is no next request of it to give them to.
            record = retrieved(request, reply, given=MemoryContext(), elapsed_ms=lookup.elapsed_ms, late=True,
                               surfaced=False, reason="span_closed", dropped=dropped)
        elif items or adaptations:
            span.pending_items += items
            span.pending_adaptations += adaptations
            record = retrieved(request, reply, given=MemoryContext(tuple(items), tuple(adaptations)),
                               elapsed_ms=lookup.elapsed_ms, late=True, surfaced=True, dropped=dropped)
        else:
            record = retrieved(request, reply, given=MemoryContext(), elapsed_ms=lookup.elapsed_ms, late=True,
                               surfaced=False, reason="not_novel", dropped=dropped)
        log.info("turn %s: late memory (%.0f ms): %s", turn.id, lookup.elapsed_ms,
                 "surfaced" if record.surfaced else record.reason)
        await self._append(turn, record)

    async def _append(self, turn: Turn, record: MemoryRetrieved) -> None:
        """Recorded after the turn's opening events (its user message is the parent)."""
        try:
            await turn.opened()
            await self.ledger.append(
                make_event(record, conversation_id=turn.conversation_id, span_id=turn.span_id,
                           channel=turn.channel, parent_id=turn.id, id=record_id(turn))
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A lost record must not fail the turn: the answer matters more than its footnote.
            log.warning("turn %s: could not record memory.retrieved: %r", turn.id, exc)

    async def settle(self, turn: Turn) -> None:
        """Let the turn's on-time record be published before what follows it in the turn."""
        self.release(turn)
        task = self._records.pop(turn.id, None)
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Stepping down: late searches and their records stop (a successor leads now)."""
        self.discard_prefetch()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._held.clear()
        self._records.clear()


def record_id(turn: Turn) -> str:
    """The id of a turn's ``memory.retrieved`` (on time or late: a turn has one): the same when a
    redelivered input is answered again, so the ledger keeps the one committed before a crash."""
    return str(uuid.uuid5(RECORD_NAMESPACE, turn.answer_id or turn.id))
