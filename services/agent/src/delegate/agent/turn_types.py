"""The small shared types of a turn: what is being answered, where its chain continues, how it ended.

They live apart from ``turn`` (the model loop) so the conversation state, the fresh context and
retrieval can name them without importing the loop that imports them: no import cycle.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from delegate.contracts.events import Channel, Event
from delegate.contracts.memory import Purpose

from .silence import Silence


class TurnStopped(Exception):
    """The owner pressed Stop: the partial answer is kept, marked as stopped."""


class TurnResult(NamedTuple):
    """How a turn ended: ``event`` is the recorded assistant message or ``turn.failed``.

    None only for an activation that chose to say nothing (``Silence``): no message is recorded.
    """

    answered: bool
    text: str
    event: Event | None


@dataclass(frozen=True)
class ChainPoint:
    """Where a turn's first request continues: a Responses id, a replacement input, or neither."""

    previous: str | None = None
    replacement: list[dict[str, Any]] | None = None

    @property
    def fresh(self) -> bool:
        return self.previous is None and self.replacement is None


@dataclass(frozen=True)
class Turn:
    """One input being answered: where its events go and what the model is given.

    ``opening`` publishes the events that open the turn (conversation, span, the user message)
    while the model request already runs, from when ``out`` is set (the first delta is out, or
    the first response ended) or a short hold has passed; ``opened()`` is the barrier before
    anything else of the turn is published, so the stream still holds them first, in order.
    """

    id: str
    channel: Channel
    conversation_id: str
    span_id: str
    item: dict[str, Any]
    delivery: int = 1
    opening: "asyncio.Task[None] | None" = None
    # Chat controls. ``attempt``/``regenerates``: a regenerated answer (attempt n of this turn,
    # replacing that answer); ``supersedes``: an edited question replacing that user message;
    # ``answer_id``: the id the answer (or its failure) takes, so a redelivery finds it;
    # ``start``: the chain point to continue from instead of the current head.
    attempt: int = 1
    regenerates: str | None = None
    supersedes: str | None = None
    answer_id: str | None = None
    start: ChainPoint | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event, compare=False)
    # An activation's nothing_to_do: offered to the model, and whether it was chosen.
    silence: "Silence | None" = field(default=None, compare=False)
    # What memory is searched for before the model request: None means the user item's text.
    memory_query: str | None = None
    memory_purpose: Purpose = "turn"
    # The read that shows the lease ours before this input is taken on, when it runs alongside
    # the turn's setup and model request (a user message): nothing of the turn is published,
    # shown or run before it succeeds, and the model request is cut short when it fails.
    lease_read: "asyncio.Task[None] | None" = field(default=None, compare=False)
    # Set once the first delta is out or the first response ended: what was held off the way
    # to the first delta (the opening events, the memory record) goes out then.
    out: asyncio.Event = field(default_factory=asyncio.Event, compare=False)

    async def opened(self) -> None:
        self.out.set()  # whoever needs the opening published now does not wait out its hold
        if self.opening is not None:
            # Shielded: the turn timing out while it waits here must not cancel the opening,
            # which ``turn.failed`` then still waits for.
            await asyncio.shield(self.opening)
