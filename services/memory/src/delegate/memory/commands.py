"""The owner's (and the assistant's tools') control of facts: list, get, edit, forget, remember.

A change is an event through the ledger (the only writer of record); the reply goes out once
the follower has applied that event to the index, so whoever asked reads their own write. An
event id derived from ``request_id`` makes a retried command write nothing twice.
"""

import asyncio
import re

from delegate.contracts import topics
from delegate.contracts.events import (
    MemoryFactAdded,
    MemoryFactCited,
    MemoryFactEdited,
    MemoryFactForgotten,
    Payload,
    make_event,
)
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.memory import MemoryFact, MemoryFactsCommand, MemoryFactsReply
from delegate.runtime.bus import Bus, BusUnavailable, DomainError

from .follower import LedgerFollower
from .ids import derived_id
from .index import MemoryIndex

# The command's own timeout on the bus is 10 s: answer (even with an error) before it.
APPLY_WAIT_S = 8.0
PUBLISH_DEADLINE_S = 5.0


def _normal(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text.lower()).strip()


class FactCommands:
    def __init__(self, bus: Bus, index: MemoryIndex, follower: LedgerFollower) -> None:
        self.bus = bus
        self.index = index
        self.follower = follower

    async def handle(self, cmd: MemoryFactsCommand) -> MemoryFactsReply:
        if cmd.op == "list":
            return MemoryFactsReply(facts=self.index.list_facts(include_retired=cmd.include_retired, limit=cmd.limit))
        if cmd.op == "remember":
            return await self._remember(cmd)
        fact = self._existing(cmd.fact_id)
        if cmd.op == "get":
            return MemoryFactsReply(fact=fact)
        if cmd.op == "edit":
            if not cmd.text:
                raise DomainError("bad_request", "edit needs the fact's new text")
            if fact.status != "active":
                raise DomainError("conflict", f"fact {fact.id} is {fact.status}; only a current fact can be edited")
            payload: Payload = MemoryFactEdited(fact_id=fact.id, text=cmd.text, type=cmd.type)
            return await self._write(cmd, payload, fact.id)
        # forget: a fact already forgotten stays so, and nothing is written again
        if fact.status == "forgotten":
            return MemoryFactsReply(fact=fact)
        return await self._write(cmd, MemoryFactForgotten(fact_id=fact.id, reason=cmd.reason), fact.id)

    def _existing(self, fact_id: str | None) -> MemoryFact:
        if not fact_id:
            raise DomainError("bad_request", "this command needs fact_id")
        fact = self.index.memory_fact(fact_id)
        if fact is None:
            raise DomainError("not_found", f"no fact {fact_id}")
        return fact

    async def _remember(self, cmd: MemoryFactsCommand) -> MemoryFactsReply:
        if not cmd.text:
            raise DomainError("bad_request", "remember needs the fact's text")
        # Said again word for word: the stored fact gains the new citations, nothing is added.
        for same in self.index.similar_facts(cmd.text, limit=5):
            if _normal(same.text) == _normal(cmd.text):
                new = [e for e in cmd.event_ids if e not in same.event_ids]
                if not new:
                    return MemoryFactsReply(fact=self._existing(same.id))
                return await self._write(cmd, MemoryFactCited(fact_id=same.id, event_ids=new, text=cmd.text), same.id)
        fact_id = derived_id("fact", cmd.request_id) if cmd.request_id else new_id()
        # From inside a conversation it is the assistant's memory tool; otherwise the owner's own.
        origin = "tool" if (cmd.conversation_id or cmd.span_id) else "owner"
        payload = MemoryFactAdded(
            fact_id=fact_id, type=cmd.type or "fact", text=cmd.text, valid_at=utcnow(),
            event_ids=list(dict.fromkeys(cmd.event_ids)), origin=origin,
        )
        return await self._write(cmd, payload, fact_id)

    async def _write(self, cmd: MemoryFactsCommand, payload: Payload, fact_id: str) -> MemoryFactsReply:
        event_id = await self.publish(payload, cmd.request_id, cmd.conversation_id, cmd.span_id)
        if not await self.wait_applied(event_id, APPLY_WAIT_S):
            raise DomainError("timeout", f"change {event_id} was sent but is not in the index yet; try again")
        return MemoryFactsReply(fact=self.index.memory_fact(fact_id), event_id=event_id)

    async def publish(
        self, payload: Payload, request_id: str | None, conversation_id: str | None, span_id: str | None
    ) -> str:
        """Send one change to the ledger; its event id (derived from ``request_id`` when given)."""
        event_id = derived_id(payload.KIND, request_id) if request_id else new_id()
        event = make_event(payload, conversation_id=conversation_id, span_id=span_id, channel="inner", id=event_id)
        try:
            await self.bus.publish(topics.ledger_append("memory"), event, deadline=PUBLISH_DEADLINE_S)
        except BusUnavailable as exc:
            raise DomainError("unavailable", f"the ledger did not take the change: {exc}") from exc
        return event_id

    async def wait_applied(self, event_id: str, timeout: float) -> bool:
        """Wait until the follower has applied the fact change ``event_id``."""
        applied = self.follower.applied
        try:
            async with applied:
                await asyncio.wait_for(applied.wait_for(lambda: self.index.has_change(event_id)), timeout)
        except TimeoutError:
            return False
        return True
