"""Commitments falling due, and people's key dates, as signals for the broker (issue #30).

The memory service reads promises and people from the turns (``commitment.made``,
``person.added``/``person.updated``); this component follows those committed events and
raises, through the broker (quiet hours, the interruption budget and dedup apply there):
- ``commitment.due`` when an open commitment's due time is reached: the ``commitment.due``
  ledger event and the signal's ``inner.signal`` claim, both with ids derived from the
  commitment, so a crash between the two writes, or a replay after a lost state file,
  writes each once. The owner's promise becomes a nudge; the assistant's own is work for the
  activation (``composer`` tells the agent so).
- ``person.date`` once per (person, key date) learned: the agent offers a yearly reminder and
  sets one only on the owner's yes.

Time is read from ``clock`` (injected: a test moves it to Friday without waiting for Friday);
the worker checks at least every ``CHECK_S`` and at each commitment's due time.
"""

import asyncio
import logging
import time
from datetime import datetime

from delegate.contracts import topics
from delegate.contracts.events import (
    CommitmentDropped,
    CommitmentDue,
    CommitmentKept,
    CommitmentMade,
    Event,
    InnerSignal,
    PersonAdded,
    PersonForgotten,
    PersonUpdated,
    make_event,
)
from delegate.contracts.signals import (
    AnySignal,
    CommitmentDuePayload,
    CommitmentDueSignal,
    PersonDatePayload,
    PersonDateSignal,
)
from delegate.runtime.bus import BusUnavailable

from .clock import Clock, system_clock
from .context import Context, derived_id
from .signal_event import signal_event
from .state import DateOffer, DueCommitment

log = logging.getLogger(__name__)

SOURCE = "commitments"
CHECK_S = 30.0  # the longest the worker sleeps (a clock moved by hand is noticed within it)
RESEND_S = 30.0  # a raised signal not seen committed after this long is published again


def due_event_id(commitment_id: str) -> str:
    return derived_id("commitment-due", commitment_id)


def due_signal_id(commitment_id: str) -> str:
    return derived_id("commitment-due-signal", commitment_id)


def date_signal_id(person_id: str, label: str, date: str) -> str:
    return derived_id("person-date", f"{person_id}:{label}:{date}")


class CommitmentWatch:
    def __init__(self, ctx: Context, clock: Clock = system_clock) -> None:
        self.ctx = ctx
        self.clock = clock
        self.wake = asyncio.Event()
        self._sent: dict[str, float] = {}  # signal id -> monotonic time it was last published

    def on_event(self, event: Event) -> None:
        state = self.ctx.state
        if (made := event.payload_as(CommitmentMade)) is not None:
            if made.due is not None:
                state.commitments[made.commitment_id] = DueCommitment(
                    id=made.commitment_id, by=made.by, what=made.what, to=made.to, due=made.due,
                    due_text=made.due_text, event_ids=made.event_ids,
                )
                self.wake.set()
        elif (closed := event.payload_as(CommitmentKept) or event.payload_as(CommitmentDropped)
                or event.payload_as(CommitmentDue)) is not None:
            state.commitments.pop(closed.commitment_id, None)
        elif (person := event.payload_as(PersonAdded) or event.payload_as(PersonUpdated)) is not None:
            self._dates(person)
        elif (forgotten := event.payload_as(PersonForgotten)) is not None:
            pid = forgotten.person_id
            state.person_names.pop(pid, None)
            for key in [k for k, o in state.date_offers.items() if o.person_id == pid]:
                del state.date_offers[key]
        elif event.is_kind(InnerSignal):
            state.date_offers.pop(event.id, None)  # offered: committed once

    def _dates(self, p: PersonAdded | PersonUpdated) -> None:
        state = self.ctx.state
        if p.name:
            state.person_names[p.person_id] = p.name
        name = state.person_names.get(p.person_id)
        if name is None:
            return
        for d in p.dates:
            label, date = d.get("label", "date"), d.get("date", "")
            sid = date_signal_id(p.person_id, label, date)
            state.date_offers[sid] = DateOffer(signal_id=sid, person_id=p.person_id, name=name, label=label,
                                               date=date)
        if p.dates:
            self.wake.set()

    async def run(self) -> None:
        await self.ctx.caught_up.wait()
        while not self.ctx.stop.is_set():
            self.wake.clear()
            try:
                await self.tick()
            except BusUnavailable as exc:
                log.warning("commitments: the ledger is away (%s); trying again", exc)
            await self._sleep()

    async def tick(self, now: datetime | None = None) -> int:
        """Raise what is due at ``now`` (the clock's time by default); how many were raised."""
        now = now or self.clock()
        raised = 0
        for commitment in sorted(self.ctx.state.commitments.values(), key=lambda c: c.due):
            if commitment.due > now:
                break
            if self._recent(due_signal_id(commitment.id)):
                continue
            await self._raise_due(commitment)
            raised += 1
        for offer in list(self.ctx.state.date_offers.values()):
            if not self._recent(offer.signal_id):
                await self._publish(None, self._offer(offer))
                raised += 1
        return raised

    def _recent(self, signal_id: str) -> bool:
        sent = self._sent.get(signal_id)
        return sent is not None and time.monotonic() - sent < RESEND_S

    async def _raise_due(self, commitment: DueCommitment) -> None:
        state = self.ctx.state
        due = make_event(
            CommitmentDue(commitment_id=commitment.id, due=commitment.due),
            conversation_id=state.current_conversation_id, span_id=None, channel="inner",
            id=due_event_id(commitment.id),
        )
        # Stamped with the wall clock, whatever ``now`` decided: the timeline is ordered by ts.
        signal = CommitmentDueSignal(
            id=due_signal_id(commitment.id), source=SOURCE, dedup_key=f"commitment:{commitment.id}",
            payload=CommitmentDuePayload(
                commitment_id=commitment.id, by=commitment.by,
                what=commitment.what, to=commitment.to, due=commitment.due, due_text=commitment.due_text,
                event_ids=commitment.event_ids[:50],
            ),
        )
        log.info("commitment %s (%s) is due (%s): raising commitment.due", commitment.id, commitment.by,
                 commitment.due.isoformat())
        await self._publish(due, signal)

    def _offer(self, offer: DateOffer) -> PersonDateSignal:
        return PersonDateSignal(
            id=offer.signal_id, source=SOURCE, urgency="low", dedup_key=f"person-date:{offer.signal_id}",
            payload=PersonDatePayload(person_id=offer.person_id, name=offer.name, label=offer.label, date=offer.date),
        )

    async def _publish(self, first: Event | None, signal: AnySignal) -> None:
        append = topics.ledger_append("inner-plane")
        if first is not None:
            await self.ctx.bus.publish(append, first, deadline=10.0)
        await self.ctx.bus.publish(
            append, signal_event(signal, conversation_id=self.ctx.state.current_conversation_id), deadline=10.0
        )
        self._sent[signal.id] = time.monotonic()

    async def _sleep(self) -> None:
        pending = [c.due for c in self.ctx.state.commitments.values() if not self._recent(due_signal_id(c.id))]
        wait = CHECK_S
        if pending:
            wait = min(wait, max((min(pending) - self.clock()).total_seconds(), 0.05))
        if self.ctx.state.date_offers:
            wait = min(wait, RESEND_S)
        waiters = [asyncio.ensure_future(self.wake.wait()), asyncio.ensure_future(self.ctx.stop.wait())]
        await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
