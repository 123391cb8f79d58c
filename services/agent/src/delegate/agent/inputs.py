"""The agent's inputs: a user message, a regenerate, an activation or an idle check, each taken on,
handled by its part, and acknowledged under the fencing rules below.

One model activity at a time: a turn or a compaction holds ``status.lock``. Inputs arrive one at a
time from the durable consumer; commands arrive as requests. Every step is an event on the
agent's ledger subject, published (and acked by JetStream) in order before the input is acked,
so a crash at any point leaves a ledger the next leader can continue from.

Fencing, and the window it leaves: every event carries the term's fencing token and the ledger
refuses a deposed term's, so a leader paused past its lease can write nothing once its
successor's ``term.started`` is committed. What it must not do either is *acknowledge* an input
whose events the ledger refused: then nobody would answer it (the user message itself is one of
those events). So an input is taken on only after a fresh read shows the lease ours, and
acknowledged only after another such read, made after every event of the turn was acked by
JetStream; otherwise it is handed back (nak). Events acked before a read that showed the lease
ours precede the successor's ``term.started`` in the stream, so the ledger stores them. The
window left: a pause between that last read and the ack itself. The successor then gets the
input again (it was not acked yet), finds the answer stored, and adds nothing; the late ack
settles an input that is answered. Deltas stop as soon as the lease is in doubt (no I/O needed),
though a client may see a few from a leader paused in the middle of sending one.

SMS and email turns are answered in their channel too: the reply (``outbound.py``) is published
to the outbox after that last read and before the ack, under the answer's event id, so a
redelivery publishes it again harmlessly (deduplicated) or delivers what a dead leader did not.
A failed sms/email turn sends a short apology with the reason: the owner sees no timeline on
their phone or in their mail client, and silence would read as a lost message.
"""

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nats.aio.msg import Msg

from delegate.contracts.events import Event, Message, SpanType, make_event
from delegate.contracts.messages import ActivationInput, IdleCheckInput, QueryRequest, RegenerateInput, UserInput
from delegate.runtime.bus import BusUnavailable, Retryable, in_progress, nak

from .activation import Activations
from .answering import Answering
from .away import AwayEmail
from .conversation_state import SpanRef
from .guard import Deposed
from .ledger import PAGE, LedgerUnavailable
from .outbound import REPLY_CHANNELS, NotLeading, Outbound, reply_to_outcome
from .prompts import user_item
from .retrieval import Retrieval
from .settled import answer_id_for
from .turn import failure_id, settle_opening
from .turn_types import ChainPoint, Turn

log = logging.getLogger(__name__)

SPAN_FOR_CHANNEL: dict[str, SpanType] = {"browser_voice": "voice", "phone": "phone", "inner": "activation"}


@dataclass(eq=False)
class Inputs(Answering):
    retrieval: Retrieval
    away: AwayEmail
    activations: Activations

    async def on_input(
        self, msg: UserInput | RegenerateInput | ActivationInput | IdleCheckInput, raw: Msg
    ) -> None:
        delivery = raw.metadata.num_delivered if raw.metadata else 1
        beat = asyncio.create_task(self._heartbeat(raw))
        if isinstance(msg, UserInput):
            # Memory is searched while the lease is read and the turn set up: the model request
            # waits only for what is left of the search (a search is read-only, deposed or not).
            self.retrieval.prefetch(msg.id, msg.text)
        lease_read: asyncio.Task[None] | None = None
        try:
            reply: Outbound | None = None
            if isinstance(msg, UserInput):
                # The read that takes it on runs alongside the turn's setup and model request:
                # the turn publishes nothing, shows no delta and runs no tool before it showed
                # the lease ours, and stops at once when it did not (one round trip less
                # before the model request).
                lease_read = asyncio.create_task(self.guard.confirm(msg.id, "taking it on"))
                reply = await self._user_turn(msg, delivery, lease_read)
                await lease_read  # every path of the turn waited for it; a failure raises here too
            else:
                await self.guard.confirm(msg.id, "taking it on")
                if isinstance(msg, RegenerateInput):
                    reply = await self._regenerate(msg, delivery)
                elif isinstance(msg, ActivationInput):
                    await self.activations.run(msg, delivery)
                else:
                    await self.spans.idle_check(msg, delivery)
            await self.guard.confirm(msg.id, "acknowledging it")
            if reply is not None:
                # After the confirm: every event of the turn was acked before a read showed the
                # lease ours, so the answer is stored; a deposed leader gets here never. The
                # window left (a pause between the read and this publish) is the ack's: the
                # successor republishes the same id, which CHANNELS deduplicates.
                await self.outbox.publish(reply)
            self.redelivery.settle(msg.id)
        except Deposed:
            raise
        except (Retryable, BusUnavailable) as exc:
            if delivery < self.settings.agent_max_deliver:
                log.warning("input %s: retrying later (delivery %d): %s", msg.id, delivery, exc)
                if isinstance(exc, Retryable):
                    raise
                raise LedgerUnavailable(str(exc)) from exc
            log.error("input %s: giving up after %d deliveries: %s", msg.id, delivery, exc)
            if lease_read is not None:
                await lease_read  # recording the failure is publishing: only once taken on
            if isinstance(msg, UserInput | ActivationInput):
                failed = await self.redelivery.give_up(msg)
                if failed is not None and isinstance(msg, UserInput):
                    await self._notify_failure(msg, failed)
                elif failed is not None and isinstance(msg, ActivationInput):
                    await self.activations.given_up(msg, failed)
        except asyncio.CancelledError:
            # Stepping down (or stopping) mid-input: hand it back now, not after ack_wait.
            await nak(raw)
            raise
        finally:
            beat.cancel()
            self.retrieval.discard_prefetch(msg.id)
            if lease_read is not None:
                _settle_lease_read(lease_read)

    async def on_published(self, msg: UserInput | RegenerateInput | ActivationInput | IdleCheckInput) -> None:
        """An input as it is published (core NATS), before JetStream stored it (fsynced) and the
        durable consumer delivered it: an idle leader starts a user message's memory search now,
        which ``on_input`` then takes over. Only idle: a running turn changes what the next
        search excludes, and its own requests need the cores. One search ahead at a time: inputs
        are delivered in the order they are published, so the first heard is the next taken on
        (a burst of messages starts one search, not one each). Delivery is not promised here:
        a search for an input that never comes to this leader is replaced at the next input.
        """
        if (
            isinstance(msg, UserInput) and self.status.ready and not self.status.lock.locked()
            and not self.retrieval.prefetching() and self.guard.live()
        ):
            self.retrieval.prefetch(msg.id, msg.text)

    async def _heartbeat(self, raw: Msg) -> None:
        """Keep a live leader's input from being redelivered while its turn runs."""
        every = max(self.settings.agent_ack_wait / 3, 0.2)
        while True:
            await asyncio.sleep(every)
            if self.guard.live():  # a leader in doubt must not hold the input back from its successor
                await in_progress(raw)

    async def _notify_failure(self, msg: UserInput, failed: Event) -> None:
        """Best effort: tell an sms/email owner that their message went unanswered.

        The input is acked anyway (it was given up on), so a failed publish is only logged.
        """
        notice = reply_to_outcome(failed, msg.meta)
        if notice is None:
            return
        try:
            await self.outbox.send(notice)
        except (NotLeading, BusUnavailable) as exc:
            log.error("input %s: could not send the failure notice: %s", msg.id, exc)

    async def _user_turn(self, msg: UserInput, delivery: int, lease_read: "asyncio.Task[None]") -> Outbound | None:
        """Answer a user message; returns what to send in its channel once the lease is confirmed.

        ``lease_read`` is the read taking it on, still running: what publishes before the turn's
        own barriers (a redelivery's answer found again, an email deferred) waits for it here.
        """
        async with self.turns.slot():
            seen_before = self.redelivery.seen_before(msg.id, delivery)
            if seen_before or msg.channel == "email":
                await lease_read
            # A first delivery cannot have been answered: answering needs a delivery, and the
            # durable consumer counts deliveries across leaders. So only redeliveries look
            # (and what this process settled before: a crashed nats-server can forget the count).
            if seen_before:
                found = await self.redelivery.recorded_answers(msg.id, ("message", "turn.failed"), anchored=True)
                if found:
                    # Published again: a no-op (the same msg_id) when the previous leader got
                    # to it, the delivery when it died between the answer and the publish.
                    return reply_to_outcome(found[0], msg.meta)
            if await self.away.defer(msg):
                return None  # EMAIL_WHEN_AWAY=signal: the inner plane decides when it is answered
            span_type = SPAN_FOR_CHANNEL.get(msg.channel, "interaction")
            conversation_id, span = self.spans.open_ids(msg.channel, span_type)
            user_message = make_event(
                Message(text=msg.text, client_msg_id=msg.client_msg_id, meta=msg.meta, supersedes=msg.supersedes),
                conversation_id=conversation_id,
                span_id=span.id,
                channel=msg.channel,
                role="user",
                id=msg.id,
                ts=msg.ts,
            )
            # The opening events go out while the model request runs: the first delta does not
            # wait for their fsynced PubAcks, everything published after them still does.
            out = asyncio.Event()
            opening = asyncio.create_task(
                self._publish_opening_after(lease_read, out, conversation_id, span, msg.ts, user_message)
            )
            turn = Turn(
                msg.id, msg.channel, conversation_id, span.id, user_item(msg.text), delivery, opening,
                supersedes=msg.supersedes, start=self._start_before(msg.supersedes),
                answer_id=answer_id_for(msg.id), lease_read=lease_read, out=out,
            )
            try:
                result = await self.turns.answer(turn)
            except asyncio.CancelledError:
                opening.cancel()  # stepping down: this leader publishes nothing more
                raise
            finally:
                out.set()
                await settle_opening(opening)
            return reply_to_outcome(result.event, msg.meta) if result.event is not None else None

    async def _publish_opening_after(
        self, lease_read: "asyncio.Task[None]", out: asyncio.Event, conversation_id: str, span: SpanRef,
        ts: datetime, user_message: Event,
    ) -> None:
        """The opening events, once the read taking the input on showed the lease ours.

        They also wait for the turn's first delta (``out``), at most ``AGENT_OPENING_HOLD_MS``:
        their commit, fsync and fan-out to every client would otherwise share the cores with a
        model answering on this machine (the offline stand-in) on its way to that delta. A model
        slow to start (a remote one, one reasoning first) gets them after the hold, so the
        owner's other devices show the message at once all the same.
        """
        await asyncio.shield(lease_read)  # the turn's own wait for it may be cancelled, not the read
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.agent_opening_hold_ms / 1000):
                await out.wait()
        await self.spans.publish_opening(conversation_id, span, ts, user_message)

    def _start_before(self, turn_id: str | None) -> ChainPoint | None:
        """Where an edit or a regenerate of ``turn_id`` continues: where that turn started.

        Known while this leader answered that turn last; otherwise a fresh working context,
        which leaves the replaced question or answer out (``without_replaced``).
        """
        if turn_id is None:
            return None
        base = self.status.state.turn_base
        if base is not None and base[0] == turn_id:
            return base[1]
        return ChainPoint()

    async def _regenerate(self, msg: RegenerateInput, delivery: int) -> Outbound | None:
        """A new attempt at answering the user message ``msg.turn_id``, recorded as such.

        The gateway checked that it is the conversation's last turn; that is checked again here,
        in input order (another message may have been queued in between): if it no longer is,
        nothing is done. The answer takes the input's id, so a redelivery finds it.
        """
        async with self.turns.slot():
            if self.redelivery.seen_before(msg.id, delivery):
                await self.ledger.wait_caught_up()
                done = await self.ledger.get(msg.id) or await self.ledger.get(failure_id(msg.id))
                if done is not None:
                    return await self._reply_again(done)
            s = self.status.state
            target = await self.ledger.get(msg.turn_id)
            if target is None or target.role != "user" or (question := target.payload_as(Message)) is None:
                log.warning("regenerate %s: %s is not a user message; nothing to do", msg.id, msg.turn_id)
                return None
            if target.conversation_id != s.conversation_id:
                log.warning("regenerate %s: %s is not in the open conversation; nothing to do", msg.id, target.id)
                return None
            after = await self.ledger.scan(
                QueryRequest(after_seq=target.seq or 0, conversation_id=target.conversation_id, kinds=["message"],
                             limit=PAGE)
            )
            if any(e.role == "user" for e in after):
                log.warning("regenerate %s: %s is not the last turn any more; nothing to do", msg.id, target.id)
                return None
            answers = [e for e in after if e.role == "assistant" and e.parent_id == target.id]
            span_type = SPAN_FOR_CHANNEL.get(target.channel, "interaction")
            conversation_id, span = await self.spans.ensure_open(target.channel, span_type, msg.ts)
            turn = Turn(
                target.id, target.channel, conversation_id, span.id,
                user_item(question.text), delivery,
                attempt=len(answers) + 1, regenerates=answers[-1].id if answers else None,
                answer_id=msg.id, start=self._start_before(target.id),
            )
            # The new answer has its own id, so it goes out as a new message in an sms/email turn.
            # A failed attempt sends nothing: it was asked for in the web client, which shows it.
            result = await self.turns.answer(turn)
            return reply_to_outcome(result.event, _meta(target)) if result.answered and result.event else None

    async def _reply_again(self, outcome: Event) -> Outbound | None:
        """A regenerate a previous leader answered: its outbound again, threaded on its question."""
        if outcome.channel not in REPLY_CHANNELS or not outcome.is_kind(Message) or outcome.parent_id is None:
            return None
        question = await self.ledger.get(outcome.parent_id)
        return reply_to_outcome(outcome, _meta(question) if question is not None else None)


def _settle_lease_read(task: "asyncio.Task[None]") -> None:
    """An input is done with: its lease read stops, and its outcome counts as seen (it was raised
    where it mattered, or the turn ended before it: then nothing of the turn was published)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()


def _meta(user_message: Event) -> dict[str, Any]:
    """The channel details (sender, subject, Message-ID ...) stored on a user message."""
    message = user_message.payload_as(Message)
    return message.meta if message is not None else {}
