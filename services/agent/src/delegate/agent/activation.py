"""An activation: the inner plane woke the agent with a claimed batch of signals.

It runs through the same serialized input path as a user message, in a span of its own:
``span.opened`` (type activation) carries the activation id and the whole batch; inside it the
turn's tool calls and results, the assistant's answer as a message (channel inner) unless it
chose to say nothing, and last the ``activation.outcome`` (completed, failed or nothing_to_do,
its reason, and the channel the answer went out on). Then the span closes.

The order of a first delivery: open the span, run the turn, deliver the answer (``Outbox``,
which confirms the lease first), record the outcome, close the span. A redelivery (the leader
died somewhere in between) finds what was recorded and adds only what is missing: a recorded
answer is delivered again under the same id (deduplicated by the outbox stream, or by the
voice service for a call), so the owner gets it exactly once; a recorded outcome means it
was delivered already.
"""

import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal
from zoneinfo import ZoneInfo

from delegate.contracts.events import (
    ActivationOutcome,
    Channel,
    Event,
    Message,
    SpanOpened,
    ToolCall,
    TurnFailed,
    make_event,
)
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.messages import ActivationInput
from delegate.runtime.bus import BusUnavailable, RemoteError

from .activation_reply import REPLY_CHANNEL, Route, activation_outbound, call_reason, choose_route, email_thread
from .answering import Answering
from .composer import activation_item, batch, batch_title, fallback_text, owner_zone, signals_query
from .conversation_state import SpanRef
from .outbound import FAILURE_PREFIX, NotLeading
from .silence import NOTHING_TO_DO, Silence, reason_of
from .turn_types import Turn

log = logging.getLogger(__name__)

# What a previous leader may have recorded in answer to an activation.
ANSWER_KINDS = ("activation.outcome", "message", "turn.failed", "tool.call")
MAX_SUMMARY = 1000
MAX_REASON = 2000


@dataclass(eq=False)
class Activations(Answering):
    @cached_property
    def _zone(self) -> ZoneInfo:
        return owner_zone(self.settings.owner_timezone)

    async def run(self, msg: ActivationInput, delivery: int) -> None:
        """Answer one activation (or finish what a previous leader recorded of it)."""
        async with self.turns.slot():
            if self.redelivery.seen_before(msg.id, delivery):
                recorded = await self.redelivery.recorded_answers(msg.id, ANSWER_KINDS, anchored=False)
                # Other tool calls alone mean the turn died mid-way: it runs again, as a user turn would.
                found = [e for e in recorded if (call := e.payload_as(ToolCall)) is None or call.name == NOTHING_TO_DO]
                if found:
                    await self._finish_recorded_activation(msg, found)
                    return
            conversation_id, span = await self._open_activation(msg)
            route = await self._route(msg)
            silence = Silence()
            item = activation_item(msg, route=route.via, zone=self._zone)
            turn = Turn(
                msg.id, "inner", conversation_id, span.id, item, delivery, silence=silence,
                memory_query=signals_query(msg, self._zone), memory_purpose="activation",
            )
            result = await self.turns.answer(turn)
            await self._conclude(msg, route, result.event, silence.reason)

    async def _open_activation(self, msg: ActivationInput) -> tuple[str, SpanRef]:
        """This activation's span, with its batch: opened now, or found open after a takeover."""
        s = self.status.state
        if s.span is not None and (s.span.type != "activation" or s.span.activation_id != msg.id):
            await self.spans.close_span("superseded")
        conversation_id = s.conversation_id or new_id()
        span = s.span or SpanRef(new_id(), "activation", "inner", msg.id)
        opened = SpanOpened(type="activation", activation_id=msg.id, signals=batch(msg) or None)
        # Opened when taken on, not when claimed: the batch may have waited for a turn to end.
        await self.spans.publish_opening(conversation_id, span, utcnow(), opened=opened)
        return conversation_id, span

    async def _route(self, msg: ActivationInput) -> Route:
        last = await self.ledger.newest(["message"], where=lambda e: e.role == "user")
        return choose_route(msg, last.channel if last else None, calls_allowed=self.settings.activation_calls)

    async def _finish_recorded_activation(self, msg: ActivationInput, found: list[Event]) -> None:
        """A previous leader took this activation on: add what it did not get to, run nothing again."""
        if not any(e.is_kind(ActivationOutcome) for e in found):
            said_nothing = next(
                (e for e in found if (call := e.payload_as(ToolCall)) is not None and call.name == NOTHING_TO_DO), None
            )
            answer = next((e for e in found if e.is_kind(Message, TurnFailed)), None)
            if said_nothing is not None:
                await self._conclude(msg, Route(None, ""), None, reason_of(said_nothing), said_nothing)
                return
            if answer is not None:
                await self._conclude(msg, await self._route(msg), answer, None)
                return
        await self._close_own_span(msg)

    async def _conclude(
        self, msg: ActivationInput, route: Route, answer: Event | None, silent: str | None, where: Event | None = None
    ) -> None:
        """Deliver the answer (if any), record the outcome, close the span."""
        anchor = answer or where
        conversation_id = anchor.conversation_id if anchor else self.status.state.conversation_id
        span_id = anchor.span_id if anchor else self.status.span_id
        channel: Channel | None = None
        status: Literal["completed", "failed", "nothing_to_do"]
        if silent is not None:
            status, summary, reason = "nothing_to_do", "", silent
        elif answer is not None and (message := answer.payload_as(Message)) is not None:
            summary = message.text
            channel, reason = await self._deliver(msg, route, answer, summary)
            status = "completed"
        elif answer is not None:  # turn.failed: the signals themselves still reach the owner
            failed = answer.payload_as(TurnFailed)
            error = failed.message if failed is not None else ""
            summary = f"{FAILURE_PREFIX} {error}\n\n{fallback_text(msg, self._zone)}".strip()
            channel, delivered = await self._deliver(msg, route, answer, summary)
            status, reason = "failed", f"{error} ({delivered})" if error else delivered
        else:
            status, summary, reason = "failed", "", "the turn ended without an answer"
        await self.ledger.append(
            make_event(
                ActivationOutcome(
                    status=status, summary=summary[:MAX_SUMMARY], reason=reason[:MAX_REASON], reply_channel=channel
                ),
                conversation_id=conversation_id,
                span_id=span_id,
                channel="inner",
                parent_id=msg.id,
            )
        )
        log.info("activation %s: %s (%s)", msg.id, status, reason)
        await self._close_own_span(msg)

    async def _close_own_span(self, msg: ActivationInput) -> None:
        span = self.status.state.span
        if span is not None and span.type == "activation" and span.activation_id in (msg.id, None):
            await self.spans.close_span("completed")

    async def _deliver(
        self, msg: ActivationInput, route: Route, answer: Event, text: str
    ) -> tuple[Channel | None, str]:
        """Send ``text`` the way ``route`` says; the channel it went out on and how, for the outcome."""
        if route.via is None:
            return None, f"{route.why}: shown in the timeline"
        if route.via == "call":
            placed, note = await self._call(answer, text)
            if placed:
                return "phone", f"{route.why}: {note}"
            fallback = route.fallback or Route(None, "no other route")
            channel, how = await self._deliver(msg, fallback, answer, text)
            return channel, f"{route.why}, but {note}; {how}"
        thread = await self._thread(msg) if route.via == "email" else None
        out = activation_outbound(route.via, answer, text, title=batch_title(msg), thread=thread)
        if out is None:
            return None, "the answer was empty: nothing sent"
        try:
            await self.outbox.send(out)
        except NotLeading as exc:
            raise self.guard.step_down(exc) from exc
        return REPLY_CHANNEL[route.via], f"{route.why}: sent by {route.via}"

    async def _call(self, answer: Event, text: str) -> tuple[bool, str]:
        try:
            reply = await self.outbox.call_owner(answer.id, call_reason(text))
        except NotLeading as exc:
            raise self.guard.step_down(exc) from exc
        except (BusUnavailable, RemoteError) as exc:
            return False, f"no call could be placed ({exc})"
        if reply.ok:
            return True, f"called the owner (call {reply.call_sid})"
        return False, f"no call was placed ({reply.reason}: {reply.message})" if reply.message else (
            f"no call was placed ({reply.reason})"
        )

    async def _thread(self, msg: ActivationInput) -> dict[str, Any] | None:
        """The email an email answer replies to: the one the batch is about, if any."""
        event_id = email_thread(msg)
        event = await self.ledger.get(event_id) if event_id else None
        message = event.payload_as(Message) if event is not None else None
        return message.meta if message is not None else None

    async def given_up(self, msg: ActivationInput, failed: Event) -> None:
        """An activation that kept failing: its outcome says so (best effort, as ``turn.failed``)."""
        try:
            await self._conclude(msg, Route(None, "given up"), failed, None)
        except BusUnavailable:
            log.error("could not record the outcome of activation %s", msg.id)
