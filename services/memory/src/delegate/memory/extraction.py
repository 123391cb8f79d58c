"""Per-turn extraction and the reconciliation of every ``memory.extracted``, off the hot path.

Two kinds of work, one at a time, in order (so each decision sees the facts written before):
- a pending user turn (durable in the index) that has its answer, or waited
  MEMORY_EXTRACT_WAIT_S without one, gets ONE model call once the conversation pauses (no
  message committed for MEMORY_EXTRACT_QUIET_S, or the turn is MEMORY_EXTRACT_MAX_DEFER_S
  old): the call and its writes share the machine with the agent, and a turn following
  right behind would meet them on its way to the first delta. The turn and the stored facts it
  might repeat or correct in, nominations out. They are written as a ``memory.extracted``
  (checkpoint_id None; its id derives from the turn, so a redo is deduplicated by the
  ledger), which takes the turn off the pending list once committed;
- each committed ``memory.extracted`` (ours, or the inner plane's at a checkpoint) is
  reconciled (``reconcile.py``): its items become ``memory.fact.cited``/``memory.fact.added``
  events whose ids derive from (that event, item index), so a replay or redo writes nothing
  twice. Reconciliation is driven by the committed event, not by the model call, so a crash
  between the two writes is picked up when the follower replays the event.
The worker waits until the index has applied what it wrote before the next decision.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast
from zoneinfo import ZoneInfo

from delegate.contracts import topics
from delegate.contracts.events import (
    Channel,
    Event,
    FactType,
    MemoryExtracted,
    MemoryFactAdded,
    MemoryFactCited,
    Message,
    Payload,
    make_event,
)
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import GetRequest, QueryRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from delegate.runtime.metering import Cause, Meter
from delegate.runtime.retry import Backoff

from .dedup import similarity
from .ids import derived_id
from .index import MemoryIndex
from .linking import blocked_items, link
from .model import Model, ModelFailed
from .people import Known
from .prompts import TURN_INSTRUCTIONS, turn_input
from .reconcile import Add, Change, Cite, nominations, parse_answer, parse_extras, reconcile
from .records import FactRow, PendingTurn
from .settings import Settings
from .spend_hold import SpendHold

log = logging.getLogger(__name__)

PRODUCER = "memory"
# How long the worker waits for the index to apply what it just wrote (the ledger commits in
# milliseconds; past this something is wrong, and the work is retried with backoff).
APPLIED_TIMEOUT_S = 30.0
# A published memory.extracted not seen committed after this long is published again (the
# same event, so no second model call; the ledger deduplicates it by id).
REPUBLISH_S = 60.0


class NotApplied(Exception):
    """What the worker wrote did not reach the index in time."""


def extracted_id(turn_id: str) -> str:
    return derived_id("memory.extracted", turn_id)


def change_id(source_id: str, index: int) -> str:
    return derived_id("memory.fact.change", f"{source_id}:{index}")


def new_fact_id(source_id: str, index: int) -> str:
    return derived_id("memory.fact", f"{source_id}:{index}")


@dataclass(frozen=True)
class Source:
    """Where one nominated item came from: the events it cites, and since when it holds."""

    event_ids: list[str]
    valid_at: datetime


class Extractor:
    def __init__(self, *, bus: Bus, index: MemoryIndex, settings: Settings, stop: asyncio.Event) -> None:
        self.bus = bus
        self.index = index
        self.settings = settings
        self.stop = stop
        self.model = Model(settings)
        self.meter = Meter.for_settings(settings, lambda event: bus.publish(topics.ledger_append(PRODUCER), event))
        self.wake = asyncio.Event()
        self.applied = asyncio.Event()  # set on every applied event: what a wait for our writes polls
        self.jobs: deque[Event] = deque()  # committed memory.extracted events to reconcile
        # Turns whose memory.extracted we published but the index has not applied yet (they
        # are still on its pending list): never asked again, republished if it got lost.
        self.asked: dict[str, tuple[float, Event]] = {}
        self.calls = 0  # model calls made (the benchmark's "calls per turn")
        self.zone = ZoneInfo(settings.owner_timezone)  # commitments' due dates are read in it
        self.spend = SpendHold(bus, settings.limits)  # BUDGET_*: extraction waits at the line
        # When the newest message was applied: extraction waits for a pause after it. Also set by
        # the catch-up's replay, which only delays the first extraction by one quiet period.
        self.last_message = time.monotonic()

    def on_event(self, event: Event) -> None:
        self.applied.set()
        if (payload := event.payload_as(MemoryExtracted)) is not None:
            for turn_id in payload.turn_ids or []:
                self.asked.pop(turn_id, None)
            if payload.items or payload.people or payload.commitments:
                self.jobs.append(event)
            self.wake.set()
        elif event.is_kind(Message):
            self.last_message = time.monotonic()
            self.wake.set()  # a new turn, or the answer a pending one waits for

    async def run(self) -> None:
        # What the index says is left (extractions applied but not reconciled before a crash, or
        # while extraction was off), in place of whatever the catch-up queued meanwhile.
        self.jobs = deque(self.index.to_reconcile())
        backoff = Backoff(initial=self.settings.memory_retry_seconds, maximum=self.settings.memory_retry_max_seconds)
        try:
            while not self.stop.is_set():
                self.wake.clear()
                try:
                    due = await self.step()
                except (ModelFailed, BusUnavailable, RemoteError, NotApplied) as exc:
                    log.warning("memory extraction failed (%d), retrying: %s", backoff.failures + 1, exc)
                    if not await backoff.sleep(self.stop):
                        return
                    continue
                backoff.reset()
                if due is not None:
                    await self._wait(due)
        finally:
            await self.model.close()

    async def step(self) -> float | None:
        """Do one piece of work; None if there may be more now, else seconds until some is due."""
        if self.jobs:
            await self.reconcile_event(self.jobs[0])
            done = self.jobs.popleft()
            await asyncio.to_thread(self.index.reconciled, done.id)
            return None
        if self.asked:
            # The previous turn's nominations are not reconciled yet: the next turn's model call
            # must see the facts they add (a correction right after the fact it corrects).
            await self._republish_lost()
            return REPUBLISH_S
        # Asked again at every committed message while the conversation goes on: the oldest only.
        turns = self.index.pending_turns(1)
        if not turns:
            return 3600.0
        turn = turns[0]  # oldest first: a later correction must see the earlier fact
        age = (utcnow() - turn.ts).total_seconds()
        if not turn.answered and age < self.settings.memory_extract_wait_s:
            return self.settings.memory_extract_wait_s - age
        if (pause := self._until_pause(age)) > 0:
            return pause
        hold = await self.spend.check()
        if hold is not None:  # the turn stays pending: extracted once the hold ends
            return max((hold.until - utcnow()).total_seconds(), 0.0) + 0.01
        await self.extract(turn)
        return None

    def _until_pause(self, age: float) -> float:
        """Seconds until the oldest pending turn (``age`` old) may be extracted: 0 now."""
        quiet = self.settings.memory_extract_quiet_s - (time.monotonic() - self.last_message)
        return max(min(quiet, self.settings.memory_extract_max_defer_s - age), 0.0)

    async def _wait(self, seconds: float) -> None:
        waiters = [asyncio.create_task(self.wake.wait()), asyncio.create_task(self.stop.wait())]
        await asyncio.wait(waiters, timeout=max(seconds, 0.01), return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()

    # ---- per turn ----------------------------------------------------------------------------

    async def extract(self, turn: PendingTurn) -> None:
        limit = self.settings.memory_candidates
        candidates = self.index.similar_facts(turn.text, limit) if limit else []
        self.calls += 1
        answer = await self.model.complete(
            model=self.settings.memory_model_name,
            instructions=TURN_INSTRUCTIONS,
            text=turn_input(turn, candidates, self.zone),
            meter=self.meter,
            cause=Cause("memory_extraction", cast(Channel, turn.channel), turn.turn_id,
                        conversation_id=turn.conversation_id, span_id=turn.span_id, parent_id=turn.turn_id),
        )
        items = parse_answer(answer)
        people, commitments = parse_extras(answer)
        # The answer's id once the index keeps it (it cites the exchange), else the user message alone.
        answer_id: str | None = getattr(turn, "answer_id", None)
        turn_ids = [turn.turn_id, *([answer_id] if answer_id else [])]
        event = make_event(
            MemoryExtracted(checkpoint_id=None, items=items, turn_ids=turn_ids, people=people or None,
                            commitments=commitments or None),
            conversation_id=turn.conversation_id,
            span_id=turn.span_id,
            channel="inner",
            parent_id=turn.turn_id,
            id=extracted_id(turn.turn_id),
        )
        await self.bus.publish(topics.ledger_append(PRODUCER), event)
        self.asked[turn.turn_id] = (time.monotonic(), event)
        log.info("turn %s: %d memory items, %d people, %d commitments nominated from %d candidates",
                 turn.turn_id, len(items), len(people), len(commitments), len(candidates))

    async def _republish_lost(self) -> None:
        now = time.monotonic()
        for turn_id, (at, event) in list(self.asked.items()):
            if now - at > REPUBLISH_S:
                log.warning("memory.extracted for turn %s was not committed; publishing it again", turn_id)
                await self.bus.publish(topics.ledger_append(PRODUCER), event)
                self.asked[turn_id] = (now, event)

    # ---- reconciliation ----------------------------------------------------------------------

    async def reconcile_event(self, event: Event) -> None:
        payload = event.typed(MemoryExtracted)
        people = self.index.known_people()
        blocked = blocked_items(payload.items, people)  # about a forgotten person: never stored again
        usable = [n for n in nominations(payload.items) if n.index not in blocked]
        noms = [n for n in usable if not self.index.has_change(change_id(event.id, n.index))]
        changes: list[Change] = []
        written: list[str] = []
        if noms:
            facts = self._facts_for([n.text for n in noms], [i for n in noms for i in n.contradicts])
            changes = reconcile(
                noms, facts, threshold=self.settings.memory_dedup_threshold,
                new_fact_id=lambda index: new_fact_id(event.id, index),
            )
            sources = await self._sources(event, payload, {n.index: n.text for n in noms})
            known = {f.id: f for f in facts}
            for change in changes:
                out = self._change_event(event, change, sources[change.index], known)
                if out is None:
                    continue
                await self.bus.publish(topics.ledger_append(PRODUCER), out)
                written.append(out.id)
            await self._until_applied(written)
            log.info("%s %s: %d items -> %d changes written (%s)", event.kind, event.id, len(noms), len(written),
                     ", ".join(_describe(c) for c in changes))
        if payload.people or payload.commitments:
            # the facts each item became (this time, or in a run before a crash)
            item_facts = {c.index: c.fact_id for c in changes}
            for n in usable:
                if n.index not in item_facts and (fact_id := self.index.fact_of_change(change_id(event.id, n.index))):
                    item_facts[n.index] = fact_id
            await self._link(event, payload, item_facts, people)

    async def _link(
        self, event: Event, payload: MemoryExtracted, item_facts: dict[int, str], people: list[Known]
    ) -> None:
        turn_ids = payload.turn_ids or [event.id]
        said = await self._get(turn_ids[0]) if payload.turn_ids else None
        linked = link(
            source_id=event.id, raw_people=payload.people, raw_commitments=payload.commitments,
            items=payload.items, item_facts=item_facts, turn_ids=turn_ids[:1], said_at=said.ts if said else event.ts,
            zone=self.zone, people=people, open_commitments=self.index.commitments(state="open", limit=1000),
            threshold=self.settings.memory_dedup_threshold,
        )
        for event_id, linked_payload in linked.events:
            out = make_event(linked_payload, conversation_id=event.conversation_id, span_id=event.span_id,
                             channel="inner", parent_id=event.id, id=event_id)
            await self.bus.publish(topics.ledger_append(PRODUCER), out)
        await self._until_applied([event_id for event_id, _ in linked.events])
        if linked.events:
            log.info("%s %s: people and commitments -> %s", event.kind, event.id,
                     ", ".join(p.KIND for _, p in linked.events))

    def _facts_for(self, texts: Sequence[str], named: Sequence[str]) -> list[FactRow]:
        """The candidates of every item, and every nominated fact that exists (active or not)."""
        found: dict[str, FactRow] = {}
        for text in texts:
            for fact in self.index.similar_facts(text, max(self.settings.memory_candidates, 5)):
                found.setdefault(fact.id, fact)
        for fact_id in named:
            if fact_id not in found and (named_fact := self.index.fact(fact_id)) is not None:
                found[fact_id] = named_fact
        return list(found.values())

    def _change_event(self, source: Event, change: Change, where: Source, known: dict[str, FactRow]) -> Event | None:
        payload: Payload
        if isinstance(change, Cite):
            fact = known.get(change.fact_id)
            new = [i for i in where.event_ids if fact is None or i not in fact.event_ids]
            if not new:
                return None  # a checkpoint restating what per-turn extraction cited already
            payload = MemoryFactCited(
                fact_id=change.fact_id, event_ids=new, text=change.text, similarity=round(change.similarity, 4)
            )
        else:
            for old_id, why in change.ignored:
                log.info("fact %s: nominated contradiction %s ignored (%s)", change.fact_id, old_id, why)
            payload = MemoryFactAdded(
                fact_id=change.fact_id, type=cast(FactType, change.type), text=change.text,
                valid_at=where.valid_at, event_ids=where.event_ids,
                origin="turn" if source.typed(MemoryExtracted).checkpoint_id is None else "checkpoint",
                supersedes=list(change.supersedes), subject=change.subject,
            )
        return make_event(
            payload, conversation_id=source.conversation_id, span_id=source.span_id, channel="inner",
            parent_id=source.id, id=change_id(source.id, change.index),
        )

    async def _sources(self, event: Event, payload: MemoryExtracted, texts: dict[int, str]) -> dict[int, Source]:
        turn_ids = payload.turn_ids or []
        if payload.checkpoint_id is None:
            # A per-turn extraction: every item comes from this turn, true since it was said.
            said = await self._get(turn_ids[0]) if turn_ids else None
            whole = Source(turn_ids or [event.id], said.ts if said else event.ts)
            return dict.fromkeys(texts, whole)
        # A checkpoint: each item cites the user message of the range that says it best.
        messages = await self._range(event, payload)
        sources: dict[int, Source] = {}
        for index, text in texts.items():
            best = max(messages, key=lambda m: similarity(text, m.typed(Message).text), default=None)
            if best is not None and similarity(text, best.typed(Message).text) > 0:
                sources[index] = Source([best.id], best.ts)
            else:
                sources[index] = Source([event.id], event.ts)
        return sources

    async def _get(self, event_id: str) -> Event | None:
        try:
            reply = await self.bus.request(topics.LEDGER_GET, GetRequest(id=event_id))
        except RemoteError as exc:
            if exc.code == "not_found":
                return None
            raise
        return reply.event

    async def _range(self, event: Event, payload: MemoryExtracted) -> list[Event]:
        if payload.through_seq is None:
            return []
        query = QueryRequest(
            after_seq=payload.after_seq or 0, through_seq=payload.through_seq,
            conversation_id=event.conversation_id, kinds=["message"],
        )
        found: list[Event] = []
        while True:
            reply = await self.bus.request(topics.LEDGER_QUERY, query)
            found.extend(e for e in reply.events if e.role == "user")
            if not reply.more or not reply.events:
                return found
            query = query.model_copy(update={"after_seq": reply.events[-1].seq or query.after_seq})

    async def _until_applied(self, event_ids: list[str]) -> None:
        deadline = time.monotonic() + APPLIED_TIMEOUT_S
        while not all(self.index.has_change(i) for i in event_ids):
            left = deadline - time.monotonic()
            if left <= 0 or self.stop.is_set():
                raise NotApplied(f"{len(event_ids)} fact changes not in the index after {APPLIED_TIMEOUT_S}s")
            self.applied.clear()
            try:
                await asyncio.wait_for(self.applied.wait(), timeout=min(left, 1.0))
            except TimeoutError:
                pass


def _describe(change: Change) -> str:
    if isinstance(change, Cite):
        return f"cite {change.fact_id} ({change.similarity:.2f})"
    assert isinstance(change, Add)
    return f"add {change.fact_id}" + (f" superseding {', '.join(change.supersedes)}" if change.supersedes else "")
