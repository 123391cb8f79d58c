"""Redelivery: an input a previous leader took on may already be answered, fully or in part.

A first delivery cannot have been answered (answering needs a delivery, and the durable
consumer counts deliveries across leaders), so only a redelivery looks in the ledger for what
was recorded in answer to it, and adds only what is missing. An input that keeps failing ends
as ``turn.failed`` so the owner is told instead of waiting forever.

The count can be wrong after a nats-server crash: JetStream writes a consumer's delivery state
lazily, so a SIGKILLed server may hand an input out again as a *first* delivery although it was
answered (and its ack lost with the server). This process remembers the inputs it settled
(``SettledInputs``) and treats one coming back as a redelivery; a user turn's answer also takes
an id derived from its input (``answer_id_for``), so even a second answer from another process
is absorbed by the ledger's idempotent append instead of showing twice.
"""

import logging

from delegate.contracts.events import Channel, Event, Message, TurnFailed, make_event
from delegate.contracts.messages import ActivationInput, QueryRequest, UserInput
from delegate.runtime.bus import BusUnavailable

from .ledger import PAGE, Ledger
from .settled import SettledInputs
from .status import Status

log = logging.getLogger(__name__)

# How far back to look for an answer to a redelivered input whose anchor is unknown.
ANSWER_SEARCH_WINDOW = 5000


class Redelivery:
    def __init__(self, ledger: Ledger, status: Status) -> None:
        self.ledger = ledger
        self.status = status
        # The inputs this process finished: one handed out again is looked up, not answered again.
        self.settled = SettledInputs()

    def settle(self, input_id: str) -> None:
        """This input is done with: should the bus hand it out again, it is looked up, not answered."""
        self.settled.add(input_id)

    def seen_before(self, input_id: str, delivery: int) -> bool:
        """Whether this input may have been answered already: a redelivery, or one this process
        settled that the bus handed out again as new (its delivery count lost in a crash)."""
        if delivery == 1 and input_id in self.settled:
            log.warning("input %s came again as a first delivery after this process settled it", input_id)
            return True
        return delivery > 1

    async def recorded_answers(self, turn_id: str, kinds: tuple[str, ...], *, anchored: bool) -> list[Event]:
        """On redelivery: what a previous leader already recorded in answer to this input.

        ``anchored``: the input has its own event (a user message with the input's id); an
        answer can only come after it, and without it there can be no answer at all.
        """
        await self.ledger.wait_caught_up()
        if anchored:
            anchor = await self.ledger.get(turn_id)
            if anchor is None:
                return []
            after = anchor.seq or 0
        else:
            after = max(await self.ledger.last_seq() - ANSWER_SEARCH_WINDOW, 0)
        events = await self.ledger.scan(QueryRequest(after_seq=after, kinds=list(kinds), limit=PAGE))
        found = [e for e in events if e.parent_id == turn_id and (e.role == "assistant" or not e.is_kind(Message))]
        if found:
            log.info("input %s was already answered before a takeover: %s", turn_id, [e.kind for e in found])
        return found

    async def give_up(self, msg: UserInput | ActivationInput) -> Event | None:
        """Record ``turn.failed`` for an input that keeps failing; the event, if it was recorded."""
        s = self.status.state
        channel: Channel = msg.channel if isinstance(msg, UserInput) else "inner"
        failed = make_event(
            TurnFailed(
                code="unavailable",
                message="The assistant could not process this message. Please send it again.",
                retryable=True,
            ),
            conversation_id=s.conversation_id,
            span_id=s.span.id if s.span else None,
            channel=channel,
            parent_id=msg.id,
        )
        try:
            await self.ledger.append(failed)
        except BusUnavailable:
            log.error("could not record the failure of input %s", msg.id)
            return None
        return failed
