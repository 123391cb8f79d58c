"""Committed events as the ledger would hand them to the memory service, with dense seqs."""

from datetime import datetime, timedelta
from itertools import count
from typing import Any

from delegate.contracts.events import (
    Event,
    Imported,
    MemoryExtracted,
    MemoryFactAdded,
    MemoryFactCited,
    MemoryFactEdited,
    MemoryFactForgotten,
    Message,
    Payload,
    make_event,
)
from delegate.contracts.ids import new_id, utcnow


class History:
    """Builds events in commit order; ``seq=False`` leaves them for the real ledger to number."""

    def __init__(self, *, seq: bool = True, start: int = 1) -> None:
        self._seq = count(start) if seq else None
        self.events: list[Event] = []
        self.conversation_id = new_id()
        self.span_id = new_id()

    def add(self, payload: Payload, *, ts: datetime | None = None, **fields: Any) -> Event:
        fields.setdefault("conversation_id", self.conversation_id)
        fields.setdefault("span_id", self.span_id)
        fields.setdefault("channel", "text")
        event = make_event(payload, ts=ts or utcnow(), **fields)
        if self._seq is not None:
            event = event.with_seq(next(self._seq))
        self.events.append(event)
        return event

    def say(self, text: str, *, role: str = "user", ts: datetime | None = None, **fields: Any) -> Event:
        return self.add(Message(text=text), role=role, ts=ts, **fields)

    def imported(
        self, text: str, *, import_id: str, speaker: str, ref: str, ts: datetime, role: str = "user",
        conversation_id: str | None = None,
    ) -> Event:
        payload = Message(text=text, imported=Imported(import_id=import_id, speaker=speaker, ref=ref))
        return self.add(payload, role=role, ts=ts, conversation_id=conversation_id or self.conversation_id)

    def fact(
        self, text: str, cites: list[Event], *, fact_id: str | None = None, supersedes: tuple[str, ...] = (),
        type: str = "fact", valid_at: datetime | None = None,
    ) -> Event:
        payload = MemoryFactAdded(
            fact_id=fact_id or new_id(), type=type, text=text, valid_at=valid_at or utcnow(),
            event_ids=[e.id for e in cites], supersedes=list(supersedes),
        )
        return self.add(payload, channel="inner")

    def cite(self, fact_id: str, cites: list[Event], text: str = "") -> Event:
        return self.add(MemoryFactCited(fact_id=fact_id, event_ids=[e.id for e in cites], text=text), channel="inner")

    def edit(self, fact_id: str, text: str) -> Event:
        return self.add(MemoryFactEdited(fact_id=fact_id, text=text), channel="inner")

    def forget(self, fact_id: str) -> Event:
        return self.add(MemoryFactForgotten(fact_id=fact_id, reason="owner"), channel="inner")

    def episode(self, summary: str, turns: list[Event], **fields: Any) -> Event:
        payload = MemoryExtracted(
            checkpoint_id=new_id(), summary=summary, decisions=fields.pop("decisions", None),
            open_loops=fields.pop("open_loops", None), after_seq=0, through_seq=turns[-1].seq or 0,
            turn_ids=[t.id for t in turns],
        )
        return self.add(payload, channel="inner", **fields)

    def extracted_turns(self, turns: list[Event]) -> Event:
        return self.add(MemoryExtracted(turn_ids=[t.id for t in turns]), channel="inner")


def days_ago(now: datetime, days: float) -> datetime:
    return now - timedelta(days=days)
