"""Dead letters: a message that can never be processed is parked on ``dead.evt.<consumer>``.

Parking has two halves: the letter (published to the DEAD stream, with the reason and
the first bytes of the message) and the term that stops its redelivery. The term is
usually immediate. Not while a batch consumer holds the message: on its ack-all consumer
a term also acks every earlier delivery, committed or not, so the batch records the
message as parked and terms it once the batch is settled (see ``batches``). A batch
consumer says which messages it holds by registering as the holder for its
(stream, durable) pair, which the message's own delivery metadata names.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from nats.aio.msg import Msg

from delegate.contracts.messages import DeadLetter
from delegate.contracts.topics import Topic, dead_letters

from .acks import term
from .errors import BusUnavailable

log = logging.getLogger(__name__)

DEAD_LETTER_DATA_LIMIT = 16 * 1024


class Publish(Protocol):
    """``Bus.publish``, as far as a dead letter needs it."""

    async def __call__(self, topic: Topic[DeadLetter], msg: DeadLetter, *, deadline: float) -> object: ...


class Holder(Protocol):
    def park(self, raw: Msg) -> bool:
        """Take over the term of ``raw`` if it is held now; False if it is not."""
        ...


class DeadLetters:
    """One per ``Bus``: writes letters, and defers terms to whoever holds the message."""

    def __init__(self, publish: Publish) -> None:
        self._publish = publish
        self._holders: dict[tuple[str, str], Holder] = {}

    @contextmanager
    def holding(self, stream: str, durable: str, holder: Holder) -> Iterator[None]:
        """While inside, dead letters of (stream, durable) deliveries ask ``holder`` first."""
        key = (stream, durable)
        self._holders[key] = holder
        try:
            yield
        finally:
            if self._holders.get(key) is holder:
                del self._holders[key]

    async def park(self, consumer: str, raw: Msg, reason: str) -> None:
        """Write the letter, then stop the redelivery (now, or when its holder says so)."""
        await self.write(consumer, raw, reason)
        try:
            meta = raw.metadata
            holder = self._holders.get((meta.stream, meta.consumer))
        except Exception:  # not a JetStream delivery: nobody holds it
            holder = None
        if holder is not None and holder.park(raw):
            return
        await term(raw)

    async def write(self, consumer: str, raw: Msg, reason: str) -> None:
        """Only the letter: for a holder that terms the message itself."""
        await self.write_data(consumer, raw.subject, raw.data, reason)

    async def write_data(
        self, consumer: str, subject: str, data: bytes, reason: str, *, letter_id: str | None = None
    ) -> None:
        """A letter for what came to ``consumer`` on ``subject`` (a delivery, or a committed event a
        follower cannot apply); ``letter_id`` keeps one letter per item however often it fails."""
        log.error("%s: dead-lettering message on %s: %s", consumer, subject, reason)
        letter = DeadLetter(
            subject=subject,
            consumer=consumer,
            reason=reason[:2000],
            data=data[:DEAD_LETTER_DATA_LIMIT].decode("utf-8", errors="replace"),
            size=len(data),
        )
        if letter_id is not None:
            letter = letter.model_copy(update={"id": letter_id})
        try:
            await self._publish(dead_letters(consumer), letter, deadline=5.0)
        except BusUnavailable:
            log.error("%s: could not store the dead letter; dropping it after logging", consumer)
