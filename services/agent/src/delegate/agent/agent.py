"""The leading agent: its parts, built for one leadership term and wired to each other.

Each part is one concept and is handed what it needs, nothing more:

- ``status`` (status.py): the conversation state, busy/compacting, the one model activity's lock,
  and ``agent.evt.state``;
- ``guard`` (guard.py): the lease as the parts see it (live output, confirm, step down);
- ``spans``: conversations, spans, idle checkpoints;
- ``redelivery``: what a previous leader already answered, and giving up on an input;
- ``turns`` (turn.py): the model loop and its live text, with ``retrieval`` (memory before each
  request) and the calendar's "now";
- ``away``: email when the owner is away;
- ``activations`` (activation.py): an activation's span, answer and outcome;
- ``compaction`` and ``commands``: Compact now and End conversation;
- ``committed``: capsule refreshes and voice activity seen in committed events;
- ``inputs``: the input path, and the fencing rules of taking an input on and acknowledging it.

``main.lead`` serves the handlers this object names (``on_input``, ``on_compact`` ...).
"""

import asyncio
import logging
from typing import TYPE_CHECKING

from delegate.contracts.messages import AgentCommand, AgentState, ResumeState
from delegate.runtime.bus import Bus
from delegate.runtime.calendar_now import CalendarNow
from delegate.runtime.metering import Meter
from delegate.runtime.openai_client import LazyOpenAI

from .activation import Activations
from .away import AwayEmail
from .commands import Commands
from .committed import Committed
from .compaction import Compaction
from .conversation_state import state_from_resume
from .guard import Deposed, LeaseGuard
from .inputs import Inputs
from .ledger import Ledger
from .outbound import Outbox
from .redelivery import Redelivery
from .retrieval import Retrieval
from .settings import Settings
from .spans import Spans
from .status import Status
from .toolbox import Toolbox
from .turn import Turns

if TYPE_CHECKING:
    from delegate.runtime.lease import Lease

__all__ = ["Agent", "Deposed"]

log = logging.getLogger(__name__)


class Agent:
    def __init__(
        self,
        settings: Settings,
        bus: Bus,
        ledger: Ledger,
        client: LazyOpenAI,
        toolbox: Toolbox,
        lease: "Lease | None" = None,
        lost: asyncio.Event | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        meter = Meter.for_settings(settings, ledger.append)  # every model call's usage, under the fence
        # Replies to sms/email turns; the agent confirms the lease itself before publishing.
        outbox = Outbox(bus, ledger, lease.confirm if lease is not None else None)
        self.status = status = Status(settings, bus)
        self.guard = guard = LeaseGuard(lease, lost)
        self.retrieval = Retrieval(bus, ledger, settings, open_span=lambda: status.span_id)
        calendar_now = CalendarNow(bus, settings.owner_timezone, enabled=bool(settings.caldav_url))
        self.spans = spans = Spans(ledger, status)
        self.redelivery = redelivery = Redelivery(ledger, status)
        self.turns = turns = Turns(
            settings, bus, ledger, client, toolbox, meter, status, guard, self.retrieval, calendar_now
        )
        self.away = away = AwayEmail(settings, bus, ledger, status, guard)
        self.activations = activations = Activations(
            settings, ledger, outbox, status, guard, spans, redelivery, turns
        )
        self.compaction = Compaction(settings, bus, ledger, client, toolbox, meter, status)
        self.commands = Commands(ledger, status, spans, self.compaction)
        self.committed = Committed(status, spans)
        self.inputs = Inputs(
            settings, ledger, outbox, status, guard, spans, redelivery, turns, self.retrieval, away, activations
        )
        # What the leader's connection serves (main.lead).
        self.on_input = self.inputs.on_input
        self.on_compact = self.commands.on_compact
        self.on_end = self.commands.on_end
        self.on_stop = turns.on_stop
        self.on_committed = self.committed.on_committed

    async def restore(self) -> ResumeState:
        """Re-derive the conversation state from the ledger once it holds everything published so far."""
        await self.ledger.wait_caught_up()
        resume = await self.ledger.resume(turn_limit=self.settings.agent_recent_turns)
        state = state_from_resume(resume)
        if state.capsule is None:
            state.capsule = await self.ledger.newest(["context.capsule"])
        self.status.state = state
        self.retrieval.carry_events(resume.recent_turns)  # what a resumed chain carries verbatim
        self.status.ready = True
        log.info(
            "resumed: conversation %s, span %s, chain %s%s, capsule %s",
            state.conversation_id, state.span.id if state.span else None, state.chain_id,
            " (replacement input pending)" if state.replacement is not None else "",
            state.capsule.id if state.capsule else None,
        )
        await self.status.publish(force=True)
        return resume

    async def on_state(self, _: AgentCommand) -> AgentState:
        return self.status.snapshot()

    async def close(self) -> None:
        await self.commands.close()
        await self.retrieval.close()
