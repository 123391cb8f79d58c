"""Intake: each typed signal on the INNER stream becomes its ``inner.signal`` ledger event.

The consumer (``Bus.consume``) dead-letters what does not decode (an unknown kind, a bad
payload) with the validation error as the reason; what decodes is published to the
ledger, keyed by the signal id, so a redelivered signal is stored once.
"""

import asyncio

from nats.aio.msg import Msg

from delegate.contracts import streams, topics
from delegate.contracts.signals import AnySignal
from delegate.runtime.bus import BusUnavailable, Retryable

from .context import Context
from .signal_event import signal_event


class LedgerAway(Retryable):
    delay = 2.0


class SignalIntake:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def consume(self, stop: asyncio.Event) -> None:
        await self.ctx.bus.consume(
            topics.INNER_SIGNAL, self.on_signal, durable=streams.INNER_BROKER, stream="INNER", stop=stop
        )

    async def on_signal(self, signal: AnySignal, _raw: Msg) -> None:
        event = signal_event(signal, conversation_id=self.ctx.state.current_conversation_id)
        try:
            await self.ctx.bus.publish(topics.ledger_append("inner-plane"), event)
        except BusUnavailable as exc:
            raise LedgerAway(str(exc)) from exc
