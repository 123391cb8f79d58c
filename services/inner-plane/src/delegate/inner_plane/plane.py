"""The inner plane: one ledger follower feeding four small components, each with its own worker."""

import asyncio
import contextlib
import logging

from delegate.contracts import topics
from delegate.contracts.events import ConversationEnded, Event, InnerDecision, InnerSignal
from delegate.runtime.bus import Bus

from .broker import AttentionBroker
from .budget_watch import BudgetWatch
from .capsule import CapsuleRefresher
from .commitments import CommitmentWatch
from .context import Context
from .follower import LedgerFollower
from .idle import IdleTimer
from .memory import MemoryExtractor
from .model import Model
from .reminders import Reminders
from .settings import Settings
from .state import StateFile

log = logging.getLogger(__name__)


class InnerPlane:
    def __init__(self, settings: Settings, bus: Bus, model: Model, stop: asyncio.Event) -> None:
        state_file = StateFile(settings.runtime_data_dir / "inner-plane" / "state.json")
        self.ctx = Context(
            settings=settings, bus=bus, model=model, state_file=state_file, state=state_file.load(), stop=stop
        )
        self.idle = IdleTimer(self.ctx)
        self.memory = MemoryExtractor(self.ctx)
        self.capsule = CapsuleRefresher(self.ctx)
        self.broker = AttentionBroker(self.ctx)
        self.reminders = Reminders(self.ctx)
        self.commitments = CommitmentWatch(self.ctx)
        self.budget = BudgetWatch(self.ctx, [self.broker.wake, self.memory.wake, self.capsule.wake])
        self.follower = LedgerFollower(self.ctx, self.apply)
        self.failed = asyncio.Event()  # a worker ended by itself: the process must restart

    def apply(self, event: Event) -> None:
        """One committed event, in seq order; components only update state and wake workers."""
        state = self.ctx.state
        state.last_event_id = event.id
        if event.conversation_id is not None:
            if event.is_kind(ConversationEnded):
                if state.current_conversation_id == event.conversation_id:
                    state.current_conversation_id = None
            elif not event.is_kind(InnerSignal, InnerDecision):
                # The broker's own events name the conversation they were written in: never
                # one that ended meanwhile.
                state.current_conversation_id = event.conversation_id
        # The budget first: the others read the spend it folds in.
        for component in (self.budget, self.idle, self.memory, self.capsule, self.reminders, self.commitments,
                          self.broker):
            component.on_event(event)

    def ready(self) -> bool:
        return self.ctx.caught_up.is_set() and not self.failed.is_set()

    async def start(self) -> None:
        log.info("resuming after ledger seq %d", self.ctx.state.last_seq)
        await self.follower.start()
        bus = self.ctx.bus
        for work in (self.follower.run(), self.idle.run(), self.memory.run(), self.capsule.run(), self.broker.run(),
                     self.budget.run(), self.commitments.run()):
            bus.spawn(work).add_done_callback(self._worker_ended)
        self._consumer = bus.spawn(self.broker.consume(self.ctx.stop))
        await bus.serve(topics.INNER_BUDGET, self.budget.answer)
        await self.reminders.start(self._worker_ended)

    def _worker_ended(self, task: "asyncio.Task[None]") -> None:
        # A worker only ends by itself on a bug or a fault it cannot ride out (a state file
        # that cannot be written): never linger unready, half working; fail so we are restarted
        # and rebuild from the ledger, which loses nothing.
        if task.cancelled() or self.ctx.stop.is_set():
            return
        log.error("inner-plane worker %s ended: %r; stopping to be restarted", task.get_name(), task.exception())
        self.failed.set()

    async def stop(self) -> None:
        """Let the signal consumer leave its pull loop by itself (it watches ``stop``): a pull
        subscription cancelled mid-fetch is left behind and stalls the connection's drain."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._consumer), timeout=2.0)
        await self.reminders.stop()
