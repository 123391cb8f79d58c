"""What every part of the leading agent shares: its connections, its conversation state, the state
it shows (``agent.evt.state``), and the fresh working context a turn or a compaction starts from.

The parts (spans.py, turn.py, redelivery.py, compaction.py) are mixins of this one class so they
share this state without passing it around; ``Agent`` (agent.py) combines them and wires inputs
and commands to them.
"""

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from openai import AsyncOpenAI

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import AgentState, CapsuleState, Usage
from delegate.runtime.bus import Bus, Retryable
from delegate.runtime.metering import Meter
from delegate.runtime.working_context import WorkingContext, build_working_context, capsule_through_seq

from .conversation_state import ConversationState
from .ledger import Ledger
from .outbound import Outbox
from .prompts import BASE_INSTRUCTIONS
from .settings import Settings
from .settled import SettledInputs
from .toolbox import Toolbox
from .turn_types import Turn

if TYPE_CHECKING:
    from delegate.runtime.lease import Lease


log = logging.getLogger(__name__)


class Deposed(Retryable):
    """The lease is not (or no longer provably) ours: hand the input back to the next leader."""

    delay = 0.0


class AgentCore:
    def __init__(
        self,
        settings: Settings,
        bus: Bus,
        ledger: Ledger,
        client: AsyncOpenAI,
        toolbox: Toolbox,
        lease: "Lease | None" = None,
        lost: asyncio.Event | None = None,
    ) -> None:
        self.settings = settings
        self.bus = bus  # long-lived connection: publishing, requests, live emits
        self.ledger = ledger
        self.client = client
        self.meter = Meter.for_settings(settings, ledger.append)  # every model call's usage, under the fence
        self.toolbox = toolbox
        self.lease = lease  # None only in-process, where nothing else could lead
        # Replies to sms/email turns; the agent confirms the lease itself before publishing.
        self.outbox = Outbox(bus, ledger, lease.confirm if lease is not None else None)
        # Set when a fresh read shows the lease is not ours: the term steps down at once, so
        # the consumer cannot spin on naks of the input and use up its deliveries.
        self.lost = lost if lost is not None else asyncio.Event()
        self.state = ConversationState()
        self.lock = asyncio.Lock()  # one model activity at a time: a turn or a compaction
        self.busy = False
        self.compacting = False
        self.ready = False
        self._last_state: AgentState | None = None
        # The one compact or end command running, if any: a second one is answered "busy".
        self._command: asyncio.Task[Any] | None = None
        # The turn whose model loop runs now, if any: what Stop (agent.cmd.stop) can cut short.
        self.running: Turn | None = None
        # The inputs this process finished: one handed out again is looked up, not answered again.
        self.settled = SettledInputs()

    def live(self) -> bool:
        """Whether live output (deltas) may still go out: not once the lease is in doubt.

        A leader resumed after a pause would otherwise stream the rest of an answer that its
        successor is already giving again; the ledger refuses its events, but clients would
        see its deltas.
        """
        return self.lease is None or not self.lease.in_doubt()

    def snapshot(self) -> AgentState:
        s = self.state
        threshold = self.settings.compact_threshold
        return AgentState(
            conversation_id=s.conversation_id,
            span_id=s.span.id if s.span else None,
            busy=self.busy,
            compacting=self.compacting,
            usage=Usage(
                input_tokens=s.input_tokens,
                compact_threshold=threshold,
                percent=round(100.0 * s.input_tokens / threshold, 1) if threshold > 0 else 0.0,
            ),
            capsule=CapsuleState(active=s.capsule is not None, updated_at=s.capsule.ts if s.capsule else None),
            last_compacted_at=s.last_compacted_at,
            offline_model=self.settings.delegate_offline_model,
        )

    async def publish_state(self, *, force: bool = False) -> None:
        state = self.snapshot()
        if force or state != self._last_state:
            self._last_state = state
            await self.bus.emit(topics.AGENT_STATE, state)

    async def _auto_compacting(self, on: bool) -> None:
        if self.compacting != on:
            self.compacting = on
            await self.publish_state()

    async def _fresh_items(self, turn: Turn | None) -> list[dict[str, Any]]:
        """Recent verbatim turns not covered by the capsule, for a conversation without a chain."""
        return (await self._fresh_context(turn)).items

    async def _fresh_context(self, turn: Turn | None) -> WorkingContext:
        """The fresh working context itself: its items, and which turns they are."""
        capsule = self.state.capsule
        messages = await self.ledger.recent_messages(
            after_seq=capsule_through_seq(capsule), want=self.settings.agent_recent_turns + 1
        )
        messages = without_replaced(messages, turn)
        context = build_working_context(
            BASE_INSTRUCTIONS,
            capsule,
            messages,
            channel=turn.channel if turn else "text",
            now=utcnow(),
            max_turns=self.settings.agent_recent_turns,
            max_chars=self.settings.agent_recent_chars,
            exclude_ids=[turn.id] if turn else (),
        )
        return context


def without_replaced(messages: list[Event], turn: Turn | None) -> list[Event]:
    """The messages a working context replays: not what an edit or a regenerate replaced.

    Left out: a superseded user message and the answers to it, an answer a later attempt
    regenerated, and every earlier answer to the turn being answered now (a regenerate).
    History itself keeps them all; only the model no longer sees them.
    """
    superseded = {m.payload.get("supersedes") for m in messages if m.role == "user"}
    regenerated = {m.payload.get("regenerates") for m in messages if m.role == "assistant"}
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
