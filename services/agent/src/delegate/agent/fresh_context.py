"""The fresh working context a turn or a compaction starts from when there is no chain to continue:
the capsule and the recent verbatim messages after it, without what an edit or a regenerate replaced.
"""

from typing import Any

from delegate.contracts.events import Event, Message
from delegate.contracts.ids import utcnow
from delegate.runtime.working_context import WorkingContext, build_working_context, capsule_through_seq

from .ledger import Ledger
from .prompts import BASE_INSTRUCTIONS
from .settings import Settings
from .turn_types import Turn


async def fresh_context(ledger: Ledger, settings: Settings, capsule: Event | None, turn: Turn | None) -> WorkingContext:
    """Recent verbatim messages not covered by the capsule: the context items, and which messages they are."""
    messages = await ledger.recent_messages(
        after_seq=capsule_through_seq(capsule), want=settings.agent_recent_turns + 1
    )
    messages = without_replaced(messages, turn)
    return build_working_context(
        BASE_INSTRUCTIONS,
        capsule,
        messages,
        channel=turn.channel if turn else "text",
        now=utcnow(),
        max_messages=settings.agent_recent_turns,
        max_chars=settings.agent_recent_chars,
        exclude_ids=[turn.id] if turn else (),
    )


async def fresh_items(ledger: Ledger, settings: Settings, capsule: Event | None) -> list[dict[str, Any]]:
    """The fresh context's items for no turn in particular (a compaction without a chain)."""
    return (await fresh_context(ledger, settings, capsule, None)).items


def without_replaced(messages: list[Event], turn: Turn | None) -> list[Event]:
    """The messages a working context replays: not what an edit or a regenerate replaced.

    Left out: a superseded user message and the answers to it, an answer a later attempt
    regenerated, and every earlier answer to the turn being answered now (a regenerate).
    History itself keeps them all; only the model no longer sees them.
    """
    typed = [(m.role, p) for m in messages if (p := m.payload_as(Message)) is not None]
    superseded = {p.supersedes for role, p in typed if role == "user"}
    regenerated = {p.regenerates for role, p in typed if role == "assistant"}
    if turn is not None:
        superseded.add(turn.supersedes)
    superseded.discard(None)
    regenerated.discard(None)
    current = turn.id if turn is not None else None
    return [
        m
        for m in messages
        if m.id not in superseded
        and m.parent_id not in superseded
        and m.id not in regenerated
        and not (current is not None and m.role == "assistant" and m.parent_id == current)
    ]
