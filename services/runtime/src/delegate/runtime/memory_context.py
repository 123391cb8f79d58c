"""Memory in a working context: what was retrieved, and what of it is new to the model.

Shared by every protocol that puts memory before a model (the agent's turns and activations,
the voice service's Realtime sessions), so each asks for and deduplicates memory the same way:

- ``MemoryContext`` is what one request is given: retrieved items and the owner's
  adaptations ("how to address / answer me"), rendered into the instructions by
  ``working_context.compose_instructions`` (developer context, never a user message);
- ``Seen`` is what the model already has (memory given earlier in the span, the verbatim
  turns, the capsule), by id and by normalized text: a late result is surfaced only when
  something in it is novel against that;
- ``MemoryLookup`` runs one ``memory.cmd.search`` that a request waits for only briefly;
  the answer is kept when it comes later, for the next request;
- ``Outage`` logs a memory service that does not answer once per outage, not once per turn.
"""

import asyncio
import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from delegate.contracts import topics
from delegate.contracts.events import MemoryRetrieved
from delegate.contracts.memory import MemoryResult, MemorySearchReply, MemorySearchRequest, Purpose

from .bus import Bus

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 12  # results asked for; the service cuts them to the token budget
MAX_EXCLUDED = 500  # MemorySearchRequest.exclude_event_ids holds at most this many
MAX_QUERY = 4000
MIN_CONTAINED = 12  # an item shorter than this is not "in the capsule" just because its words are
MARKER = re.compile(r"^\s*\[[^\]]{1,80}\]\s*")
NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


@dataclass(frozen=True)
class MemoryContext:
    """The memory one model request is given."""

    items: Sequence[MemoryResult] = ()
    adaptations: Sequence[MemoryResult] = ()

    def __bool__(self) -> bool:
        return bool(self.items or self.adaptations)


# ---- novelty -----------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """Text as compared for duplicates: no turn marker, case, punctuation or spacing."""
    return NON_WORD.sub(" ", MARKER.sub("", text).casefold()).strip()


@dataclass
class Seen:
    """What a model already has, by event/item id and by normalized text."""

    ids: set[str] = field(default_factory=set)
    texts: set[str] = field(default_factory=set)
    blobs: list[str] = field(default_factory=list)  # longer texts (the capsule) items may be part of

    def add(self, id: str | None = None, text: str | None = None) -> None:
        if id:
            self.ids.add(id)
        if text and (norm := normalize(text)):
            self.texts.add(norm)

    def add_items(self, items: Iterable[MemoryResult]) -> None:
        for item in items:
            self.add(item.id, item.text)

    def add_blob(self, text: str | None) -> None:
        if text and (norm := normalize(text)):
            self.blobs.append(norm)

    def merged(self, *others: "Seen") -> "Seen":
        out = Seen(set(self.ids), set(self.texts), list(self.blobs))
        for other in others:
            out.ids |= other.ids
            out.texts |= other.texts
            out.blobs += other.blobs
        return out

    def covers(self, item: MemoryResult) -> str | None:
        """Why the model already has ``item`` (None: it is novel)."""
        if item.id in self.ids:
            return "same_id"
        if item.kind == "message" and any(e in self.ids for e in item.event_ids):
            return "verbatim"
        norm = normalize(item.text)
        if not norm or norm in self.texts:
            return "same_text"
        if len(norm) >= MIN_CONTAINED and any(norm in blob for blob in self.blobs):
            return "in_capsule"
        return None


def split_novel(items: Iterable[MemoryResult], seen: Seen) -> tuple[list[MemoryResult], list[dict[str, str]]]:
    """The items the model does not have yet, and ``{id, why}`` for each left out.

    Duplicates inside ``items`` count too: the second of two equal texts is left out.
    """
    novel: list[MemoryResult] = []
    dropped: list[dict[str, str]] = []
    local = seen.merged()
    for item in items:
        why = local.covers(item)
        if why is None:
            novel.append(item)
            local.add(item.id, item.text)
        else:
            dropped.append({"id": item.id, "why": why})
    return novel, dropped


# ---- the search ------------------------------------------------------------------------------


class Outage:
    """Logs the memory service being unreachable once per outage, and its return once."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.down = False

    def failed(self, exc: BaseException) -> None:
        if not self.down:
            self.down = True
            log.warning("%s goes on without memory: the memory service did not answer (%s)", self.who, exc)

    def answered(self) -> None:
        if self.down:
            self.down = False
            log.info("%s: the memory service answers again", self.who)


class MemoryLookup:
    """One search, started now; ``within(seconds)`` is the reply if it came in time, else None.

    The request keeps running after a ``within`` gave up: ``task`` finishes with the reply
    (or the error), for whoever wants the late answer.
    """

    def __init__(self, bus: Bus, request: MemorySearchRequest) -> None:
        self.request = request
        self.started = time.monotonic()
        self.finished: float | None = None
        self.task: asyncio.Task[MemorySearchReply] = asyncio.create_task(self._run(bus))

    async def _run(self, bus: Bus) -> MemorySearchReply:
        try:
            return await bus.request(topics.MEMORY_SEARCH, self.request)
        finally:
            self.finished = time.monotonic()

    @property
    def elapsed_ms(self) -> float:
        end = self.finished if self.finished is not None else time.monotonic()
        return round((end - self.started) * 1000.0, 1)

    async def within(self, seconds: float) -> MemorySearchReply | None:
        """The reply if the search answers within ``seconds``; errors propagate (the caller logs)."""
        if not self.task.done() and seconds > 0:
            await asyncio.wait([self.task], timeout=seconds)
        if not self.task.done():
            return None
        return self.task.result()

    def cancel(self) -> None:
        """Nobody wants the reply: stop the request, or drop its outcome (an error included)."""
        if not self.task.done():
            self.task.cancel()
        elif not self.task.cancelled():
            self.task.exception()  # retrieved, so asyncio does not log it as never retrieved


def search_request(
    query: str,
    *,
    purpose: Purpose,
    budget_tokens: int,
    exclude_event_ids: Sequence[str] = (),
    limit: int = DEFAULT_LIMIT,
) -> MemorySearchRequest | None:
    """The search for one request; None when there is nothing to ask (no words, no budget)."""
    query = " ".join(query.split())[:MAX_QUERY]
    if not query or budget_tokens <= 0:
        return None
    # In C, no generator: a turn's request names up to 500 ids, built before its model request.
    excluded = list(dict.fromkeys(exclude_event_ids))
    if "" in excluded:
        excluded.remove("")
    excluded = excluded[-MAX_EXCLUDED:]
    return MemorySearchRequest(
        query=query, limit=limit, purpose=purpose, budget_tokens=budget_tokens, exclude_event_ids=excluded,
    )


def retrieved(
    request: MemorySearchRequest,
    reply: MemorySearchReply,
    *,
    given: MemoryContext,
    elapsed_ms: float,
    late: bool,
    surfaced: bool,
    reason: str | None = None,
    dropped: list[dict[str, str]] | None = None,
) -> MemoryRetrieved:
    """The ``memory.retrieved`` record of one search: what was given (adaptations first), and why."""
    return MemoryRetrieved(
        query=request.query,
        items=[i.model_dump(mode="json") for i in [*given.adaptations, *given.items]],
        purpose=request.purpose if request.purpose != "owner" else None,
        tokens=reply.tokens,
        budget_tokens=request.budget_tokens,
        late=late,
        surfaced=surfaced,
        reason=reason,
        dropped=dropped or None,
        elapsed_ms=elapsed_ms,
    )


def given_in_time(lookup: MemoryLookup, reply: MemorySearchReply, seen: Seen) -> tuple[MemoryContext, MemoryRetrieved]:
    """What a search that answered in time gives, and its record: the results not in ``seen``, every adaptation.

    Adaptations (how the owner wants to be answered) are given whatever the model has read already.
    """
    items, dropped = split_novel(reply.results, seen)
    adaptations, _ = split_novel(reply.adaptations, Seen())
    given = MemoryContext(tuple(items), tuple(adaptations))
    record = retrieved(
        lookup.request, reply, given=given, elapsed_ms=lookup.elapsed_ms, late=False, surfaced=True, dropped=dropped
    )
    return given, record
