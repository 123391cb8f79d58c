"""The attention broker (minimal): durable signals become timeline events; urgent ones wake the agent.

Signals arrive on the INNER stream. Each is written to the ledger as an ``inner.signal``
event (channel inner, no span: queued signals sit between spans). Once committed, a
signal with priority > 0 waits for an activation; activations are serialized: one
claimed batch at a time, released by the agent's ``activation.outcome`` (parent_id =
the activation id) or, failing that, after ACTIVATION_TIMEOUT_SECONDS.
"""

import asyncio
import logging
from datetime import timedelta

from nats.aio.msg import Msg

from delegate.contracts import streams, topics
from delegate.contracts.events import Event, InnerSignal, make_event
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.messages import ActivationInput, Signal
from delegate.runtime.bus import BusUnavailable, Retryable
from delegate.runtime.retry import retrying

from .context import Context
from .state import ActivationBatch, PendingSignal

log = logging.getLogger(__name__)


class LedgerAway(Retryable):
    delay = 2.0


class AttentionBroker:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.wake = asyncio.Event()

    # ---- intake: INNER stream -> ledger ------------------------------------------------

    async def consume(self, stop: asyncio.Event) -> None:
        await self.ctx.bus.consume(
            topics.INNER_SIGNAL, self.on_signal, durable=streams.INNER_BROKER, stream="INNER", stop=stop
        )

    async def on_signal(self, signal: Signal, _raw: Msg) -> None:
        event = make_event(
            InnerSignal(source=signal.source, type=signal.type, data=signal.data, priority=signal.priority),
            conversation_id=self.ctx.state.current_conversation_id,
            span_id=None,
            channel="inner",
            id=signal.id,  # the signal id is the event id: a redelivered signal is stored once
            ts=signal.ts,
        )
        try:
            await self.ctx.bus.publish(topics.ledger_append("inner-plane"), event)
        except BusUnavailable as exc:
            raise LedgerAway(str(exc)) from exc

    # ---- selection: committed signals -> activations ------------------------------------

    def on_event(self, event: Event) -> None:
        state = self.ctx.state
        assert event.seq is not None
        if event.kind == "inner.signal":
            signal = event.typed(InnerSignal)
            known = {s.id for s in state.signals} | set(state.batch.signal_ids if state.batch else [])
            if signal.priority > 0 and event.id not in known:
                state.signals.append(
                    PendingSignal(
                        id=event.id, seq=event.seq, source=signal.source, type=signal.type,
                        priority=signal.priority, data=signal.data, ts=event.ts,
                    )
                )
                self.wake.set()
        elif (
            event.kind == "activation.outcome"
            and state.batch is not None
            and event.parent_id in (state.batch.activation_id, *state.batch.signal_ids)
        ):
            log.info("activation %s finished", state.batch.activation_id)
            state.batch = None
            self.wake.set()

    async def run(self) -> None:
        await self.ctx.caught_up.wait()
        state = self.ctx.state
        timeout = timedelta(seconds=self.ctx.settings.activation_timeout_seconds)
        if state.batch is not None and utcnow() < state.batch.sent_at + timeout:
            await self._send(state.batch)  # maybe never sent before a crash; the msg id dedups
        while True:
            self.wake.clear()
            if state.batch is not None:
                left = (state.batch.sent_at + timeout - utcnow()).total_seconds()
                if left <= 0:
                    log.warning("activation %s got no outcome in time; moving on", state.batch.activation_id)
                    state.batch = None
                    await self.ctx.persist()
                    continue
                try:
                    await asyncio.wait_for(self.wake.wait(), left)
                except TimeoutError:
                    pass
                continue
            if not state.signals:
                await self.wake.wait()
                continue
            ranked = sorted(state.signals, key=lambda s: (-s.priority, s.seq))
            claimed = ranked[: self.ctx.settings.activation_batch_max]
            claimed_ids = {s.id for s in claimed}
            state.batch = ActivationBatch(
                activation_id=new_id(),
                signal_ids=[s.id for s in claimed],
                signals=[s.model_dump(mode="json") for s in claimed],
                sent_at=utcnow(),
            )
            state.signals = [s for s in state.signals if s.id not in claimed_ids]
            await self.ctx.persist()  # claimed before sending: a crash re-sends this batch, not a new one
            await self._send(state.batch)

    async def _send(self, batch: ActivationBatch) -> None:
        activation = ActivationInput(
            id=batch.activation_id, ts=batch.sent_at, signal_ids=batch.signal_ids, signals=batch.signals
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
                return  # claimed in the state file: the next start sends it
            raise
        log.info("woke the agent with %d signal(s) (activation %s)", len(batch.signal_ids), batch.activation_id)
