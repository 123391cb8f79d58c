"""The attention broker: committed signals are weighed one decision at a time; batches wake the agent.

Intake (``intake``) turns each typed signal into its ``inner.signal`` event. The follower
hands every committed event to ``on_event``, which only records what the ledger says: a
signal joins ``pending``, an ``inner.decision`` updates or settles it, an
``activation.outcome`` releases the batch in flight, turns and calls open and close. So a
replay rebuilds exactly the decisions that were made and never makes new ones.

Deciding is the worker's alone (``run``), after the first catch-up: it asks the policy
(``attention``) what to do now, writes each decision as an ``inner.decision`` event (its id
derived from the signal, the decision and how many came before, so deciding again after a
crash writes it once), waits until the follower has applied them, and only then looks again.
An ``act`` that is applied becomes the batch in flight: it is sent to the agent
(ActivationInput, message id = the activation id) and released by the agent's
``activation.outcome`` or, failing that, after ACTIVATION_TIMEOUT_SECONDS. One at a time.
"""

import asyncio
import logging
from datetime import datetime, timedelta

from delegate.contracts import topics
from delegate.contracts.events import ActivationOutcome, Event, InnerDecision, InnerSignal, Message, make_event
from delegate.contracts.messages import ActivationInput
from delegate.runtime.bus import BusUnavailable
from delegate.runtime.retry import retrying

from . import records, turns
from .attention import Attention, AttentionConfig, Decision
from .budget import Budget
from .clock import Clock, system_clock
from .context import Context, derived_id
from .intake import SignalIntake
from .quiet_hours import QuietHours
from .settings import Settings
from .state import ActivationBatch, BrokerState

log = logging.getLogger(__name__)

# How long the worker waits for its own decisions to come back committed before publishing
# them again (the same ids: the ledger stores them once).
RECORD_PATIENCE = 10.0


def attention_config(settings: Settings) -> AttentionConfig:
    zone = settings.zone
    return AttentionConfig(
        quiet=QuietHours.parse(settings.quiet_hours, zone),
        budget=Budget(settings.inner_daily_budget, timedelta(seconds=settings.inner_min_wake_gap_s), zone),
        dedup_window=timedelta(seconds=settings.inner_dedup_window_s),
        coalesce=timedelta(seconds=settings.inner_coalesce_s),
        batch_max=settings.activation_batch_max,
        turn_stale=timedelta(seconds=settings.inner_turn_stale_s),
        limits=settings.limits,
    )


class AttentionBroker:
    def __init__(self, ctx: Context, clock: Clock = system_clock) -> None:
        self.ctx = ctx
        self.clock = clock
        self.wake = asyncio.Event()
        self.intake = SignalIntake(ctx)
        self.config = attention_config(ctx.settings)
        self.attention = Attention(self.config, clock)
        self._awaiting: set[str] = set()  # decision event ids published, not applied yet
        self._recorded = asyncio.Event()
        self._sent: str | None = None  # the activation this process has sent

    @property
    def state(self) -> BrokerState:
        return self.ctx.state.broker

    async def consume(self, stop: asyncio.Event) -> None:
        await self.intake.consume(stop)

    # ---- recording what the ledger says (replay and live alike) ---------------------------

    def on_event(self, event: Event) -> None:
        changed = turns.observe(self.state, event)
        if event.role == "user" and event.is_kind(Message):
            turns.prune(self.state, event.ts, self.config.turn_stale)
        if event.is_kind(InnerSignal):
            changed = records.record_signal(self.state, event, self.config.dedup_window) or changed
        elif event.is_kind(InnerDecision):
            self._awaiting.discard(event.id)
            if not self._awaiting:
                self._recorded.set()
            changed = records.record_decision(self.state, event) or changed
        elif event.is_kind(ActivationOutcome):
            batch = self.state.batch
            if records.record_outcome(self.state, event):
                assert batch is not None
                log.info("activation %s finished", batch.activation_id)
                changed = True
        if changed:
            self.wake.set()

    # ---- deciding (the live worker only) ------------------------------------------------------

    async def run(self) -> None:
        await self.ctx.caught_up.wait()
        timeout = timedelta(seconds=self.ctx.settings.activation_timeout_seconds)
        while not self.ctx.stop.is_set():
            self.wake.clear()
            state = self.state
            batch = state.batch
            if batch is not None:
                if self.clock() >= batch.sent_at + timeout:
                    log.warning("activation %s got no outcome in time; moving on", batch.activation_id)
                    state.batch = None
                    await self.ctx.persist()
                    continue
                if self._sent != batch.activation_id:
                    await self._send(batch)
            plan = self.attention.plan(state)
            if plan.decisions:
                await self._record(plan.decisions)
                continue
            await self._sleep(plan.next_at if batch is None else _min(plan.next_at, batch.sent_at + timeout))

    async def _sleep(self, until: datetime | None) -> None:
        delay = None if until is None else max((until - self.clock()).total_seconds(), 0.0)
        try:
            await asyncio.wait_for(self.wake.wait(), delay)
        except TimeoutError:
            pass

    def _event(self, decision: Decision, now: datetime) -> Event:
        signal = self.state.pending[decision.signal_id]
        n = signal.decisions
        lead = decision.signal_ids[0] if decision.signal_ids else decision.signal_id
        lead_n = self.state.pending[lead].decisions if lead in self.state.pending else n
        return make_event(
            InnerDecision(
                decision=decision.decision,
                reason=decision.reason,
                detail=decision.detail,
                until=decision.until,
                activation_id=derived_id("activation", f"{lead}:{lead_n}") if decision.signal_ids else None,
                signal_ids=list(decision.signal_ids),
            ),
            conversation_id=self.ctx.state.current_conversation_id,
            span_id=None,
            channel="inner",
            parent_id=decision.signal_id,
            id=derived_id("inner-decision", f"{decision.signal_id}:{decision.decision}:{n}"),
            ts=now,
        )

    async def _record(self, decisions: list[Decision]) -> None:
        """Publish the decisions (in order: an act before its coalesces) and wait until applied."""
        now = self.clock()
        events = [self._event(d, now) for d in decisions]
        for decision in decisions:
            log.info(
                "signal %s: %s (%s) %s%s", decision.signal_id, decision.decision, decision.reason, decision.detail,
                f" until {decision.until.isoformat()}" if decision.until else "",
            )
        self._awaiting = {e.id for e in events}
        self._recorded.clear()
        while self._awaiting and not self.ctx.stop.is_set():
            for event in events:
                if event.id in self._awaiting:
                    await self._publish(event)
            try:
                await asyncio.wait_for(self._recorded.wait(), RECORD_PATIENCE)
            except TimeoutError:
                log.warning("%d decision(s) not committed after %.0f s; publishing again",
                            len(self._awaiting), RECORD_PATIENCE)

    async def _publish(self, event: Event) -> None:
        async for attempt in retrying(
            retry_on=BusUnavailable, stop=self.ctx.stop, initial=0.5, maximum=10.0,
            what=f"recording decision {event.id}",
        ):
            with attempt:
                await self.ctx.bus.publish(topics.ledger_append("inner-plane"), event)

    async def _send(self, batch: ActivationBatch) -> None:
        activation = ActivationInput(
            id=batch.activation_id, ts=batch.sent_at, signal_ids=batch.signal_ids, signals=batch.signals,
            urgent=batch.urgent, reply_via=batch.reply_via,
        )
        try:
            # Until it is out (or the service stops): the activation id dedups a resend.
            async for attempt in retrying(
                retry_on=BusUnavailable, stop=self.ctx.stop, initial=0.5, maximum=10.0,
                what=f"sending activation {batch.activation_id}",
            ):
                with attempt:
                    await self.ctx.bus.publish(topics.AGENT_INPUT, activation, msg_id=batch.activation_id)
        except BusUnavailable:
            if self.ctx.stop.is_set():
                return  # the act is in the ledger: the next start sends it
            raise
        self._sent = batch.activation_id
        log.info("woke the agent with %d signal(s) (activation %s)", len(batch.signal_ids), batch.activation_id)


def _min(a: datetime | None, b: datetime) -> datetime:
    return b if a is None else min(a, b)
