"""Where the leading agent stands, and what it shows of that (``agent.evt.state``).

One object every part is handed: the conversation state (re-derived from the ledger at every
takeover, reset by End conversation), whether a turn or a compaction runs, and the lock that
lets one model activity (a turn or a compaction) run at a time. A part reads ``status.state``
each time rather than keeping it: the state object is replaced, not only changed.
"""

import asyncio

from delegate.contracts import topics
from delegate.contracts.messages import AgentState, CapsuleState, Usage
from delegate.runtime.bus import Bus

from .conversation_state import ConversationState
from .settings import Settings


class Status:
    def __init__(self, settings: Settings, bus: Bus) -> None:
        self.settings = settings
        self.bus = bus
        self.state = ConversationState()
        self.lock = asyncio.Lock()  # one model activity at a time: a turn or a compaction
        self.busy = False
        self.compacting = False
        self.ready = False
        self._last: AgentState | None = None

    @property
    def span_id(self) -> str | None:
        span = self.state.span
        return span.id if span else None

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

    async def publish(self, *, force: bool = False) -> None:
        """Emit the state when it changed since the last emit (or always, with ``force``)."""
        state = self.snapshot()
        if force or state != self._last:
            self._last = state
            await self.bus.emit(topics.AGENT_STATE, state)

    async def auto_compacting(self, on: bool) -> None:
        """The model's own compaction started or ended inside a turn's request."""
        if self.compacting != on:
            self.compacting = on
            await self.publish()
