"""The leading agent: inputs, commands and committed events, wired to the parts that handle them.

One model activity at a time: a turn or a compaction holds ``self.lock``. Inputs arrive one at a
time from the durable consumer; commands arrive as requests. Every step is an event on the
agent's ledger subject, published (and acked by JetStream) in order before the input is acked,
so a crash at any point leaves a ledger the next leader can continue from.

The parts, one concept each: ``spans`` (conversations, spans, idle checkpoints), ``turn`` (the
model loop and its live text), ``redelivery`` (what a previous leader already answered),
``activation`` (an activation's span, answer and outcome; ``composer``, ``activation_reply``
and ``silence`` serve it), ``away`` (email when the owner is away), ``compaction`` (Compact
now); ``core`` holds the state they share.

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
import logging
from datetime import datetime
from typing import Any

from nats.aio.msg import Msg

from delegate.contracts.events import ConversationEnded, Event, Message, SpanType, make_event
from delegate.contracts.messages import (
    ActivationInput,
    AgentCommand,
    AgentState,
    CommandReply,
    IdleCheckInput,
    QueryRequest,
    RegenerateInput,
    ResumeState,
    UserInput,
)
from delegate.runtime.bus import BusUnavailable, DomainError, Retryable, in_progress, nak
from delegate.runtime.working_context import RESPONSES_CHANNELS

from .activation import Activations
from .away import AwayEmail
from .compaction import Compaction
from .conversation_state import ConversationState, SpanRef, state_from_resume
from .core import Deposed
from .ledger import PAGE, LedgerUnavailable
from .outbound import REPLY_CHANNELS, NotLeading, Outbound, reply_to_outcome
from .prompts import user_item
from .settled import answer_id_for
from .turn import failure_id, settle_opening
from .turn_types import ChainPoint, Turn

log = logging.getLogger(__name__)

SPAN_FOR_CHANNEL: dict[str, SpanType] = {"browser_voice": "voice", "phone": "phone", "inner": "activation"}
# The voice service's own spans and channels (it writes their events; see delegate.voice).
VOICE_SPANS = frozenset({"voice", "phone"})
VOICE_CHANNELS = frozenset({"browser_voice", "phone"})
BUSY = "A response or a compaction is running; try again when it is done."


class Agent(Activations, AwayEmail, Compaction):
    # ---- start / takeover -----------------------------------------------------------------

    async def restore(self) -> ResumeState:
        """Re-derive the conversation state from the ledger once it holds everything published so far."""
        await self.ledger.wait_caught_up()
        resume = await self.ledger.resume(turn_limit=self.settings.agent_recent_turns)
        state = state_from_resume(resume)
        if state.capsule is None:
            state.capsule = await self.ledger.newest(["context.capsule"])
        self.state = state
        self.retrieval.carry_events(resume.recent_turns)  # what a resumed chain carries verbatim
        self.ready = True
        log.info(
            "resumed: conversation %s, span %s, chain %s%s, capsule %s",
            state.conversation_id, state.span.id if state.span else None, state.chain_id,
            " (replacement input pending)" if state.replacement is not None else "",
            state.capsule.id if state.capsule else None,
        )
        await self.publish_state(force=True)
        return resume

    async def close(self) -> None:
        command = self._command
        if command is not None and not command.done():
            command.cancel()
            await asyncio.gather(command, return_exceptions=True)
        await self.retrieval.close()

    async def on_state(self, _: AgentCommand) -> AgentState:
        return self.snapshot()

    # ---- input --------------------------------------------------------------------------------

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
                lease_read = asyncio.create_task(self._confirm_lease(msg, "taking it on"))
                reply = await self._user_turn(msg, delivery, lease_read)
                await lease_read  # every path of the turn waited for it; a failure raises here too
            else:
                await self._confirm_lease(msg, "taking it on")
                if isinstance(msg, RegenerateInput):
                    reply = await self._regenerate(msg, delivery)
                elif isinstance(msg, ActivationInput):
                    await self._activation(msg, delivery)
                else:
                    await self._idle_check(msg, delivery)
            await self._confirm_lease(msg, "acknowledging it")
            if reply is not None:
                # After the confirm: every event of the turn was acked before a read showed the
                # lease ours, so the answer is stored; a deposed leader gets here never. The
                # window left (a pause between the read and this publish) is the ack's: the
                # successor republishes the same id, which CHANNELS deduplicates.
                await self.outbox.publish(reply)
            self.settled.add(msg.id)
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
                failed = await self._give_up(msg)
                if failed is not None and isinstance(msg, UserInput):
                    await self._notify_failure(msg, failed)
                elif failed is not None and isinstance(msg, ActivationInput):
                    await self._activation_given_up(msg, failed)
        except asyncio.CancelledError:
            # Stepping down (or stopping) mid-input: hand it back now, not after ack_wait.
            await nak(raw)
            raise
        finally:
            beat.cancel()
            self.retrieval.discard_prefetch()
            if lease_read is not None:
                _settle_lease_read(lease_read)

    async def _confirm_lease(self, msg: Any, doing: str) -> None:
        if self.lease is not None and not await self.lease.confirm():
            log.warning("input %s: the lease is not ours any more; handing it back instead of %s", msg.id, doing)
            self.lost.set()  # step down now: the next fetch would only nak it again
            raise Deposed("the lease is not ours")

    async def _heartbeat(self, raw: Msg) -> None:
        """Keep a live leader's input from being redelivered while its turn runs."""
        every = max(self.settings.agent_ack_wait / 3, 0.2)
        while True:
            await asyncio.sleep(every)
            if self.live():  # a leader in doubt must not hold the input back from its successor
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
        async with self._turn_slot():
            seen_before = self._seen_before(msg.id, delivery)
            if seen_before or msg.channel == "email":
                await lease_read
            # A first delivery cannot have been answered: answering needs a delivery, and the
            # durable consumer counts deliveries across leaders. So only redeliveries look
            # (and what this process settled before: a crashed nats-server can forget the count).
            if seen_before:
                found = await self._recorded_answers(msg.id, ("message", "turn.failed"), anchored=True)
                if found:
                    # Published again: a no-op (the same msg_id) when the previous leader got
                    # to it, the delivery when it died between the answer and the publish.
                    return reply_to_outcome(found[0], msg.meta)
            if await self._defer_email(msg):
                return None  # EMAIL_WHEN_AWAY=signal: the inner plane decides when it is answered
            span_type = SPAN_FOR_CHANNEL.get(msg.channel, "interaction")
            conversation_id, span = self._open_ids(msg.channel, span_type)
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
            opening = asyncio.create_task(
                self._publish_opening_after(lease_read, conversation_id, span, msg.ts, user_message)
            )
            turn = Turn(
                msg.id, msg.channel, conversation_id, span.id, user_item(msg.text), delivery, opening,
                supersedes=msg.supersedes, start=self._start_before(msg.supersedes),
                answer_id=answer_id_for(msg.id), lease_read=lease_read,
            )
            try:
                result = await self._answer(turn)
            except asyncio.CancelledError:
                opening.cancel()  # stepping down: this leader publishes nothing more
                raise
            finally:
                await settle_opening(opening)
            return reply_to_outcome(result.event, msg.meta) if result.event is not None else None

    async def _publish_opening_after(
        self, lease_read: "asyncio.Task[None]", conversation_id: str, span: SpanRef, ts: datetime, user_message: Event
    ) -> None:
        """The opening events, once the read taking the input on showed the lease ours."""
        await asyncio.shield(lease_read)  # the turn's own wait for it may be cancelled, not the read
        await self._publish_opening(conversation_id, span, ts, user_message)

    def _start_before(self, turn_id: str | None) -> ChainPoint | None:
        """Where an edit or a regenerate of ``turn_id`` continues: where that turn started.

        Known while this leader answered that turn last; otherwise a fresh working context,
        which leaves the replaced question or answer out (``without_replaced``).
        """
        if turn_id is None:
            return None
        base = self.state.turn_base
        if base is not None and base[0] == turn_id:
            return base[1]
        return ChainPoint()

    async def _regenerate(self, msg: RegenerateInput, delivery: int) -> Outbound | None:
        """A new attempt at answering the user message ``msg.turn_id``, recorded as such.

        The gateway checked that it is the conversation's last turn; that is checked again here,
        in input order (another message may have been queued in between): if it no longer is,
        nothing is done. The answer takes the input's id, so a redelivery finds it.
        """
        async with self._turn_slot():
            if self._seen_before(msg.id, delivery):
                await self.ledger.wait_caught_up()
                done = await self.ledger.get(msg.id) or await self.ledger.get(failure_id(msg.id))
                if done is not None:
                    return await self._reply_again(done)
            s = self.state
            target = await self.ledger.get(msg.turn_id)
            if target is None or target.kind != "message" or target.role != "user":
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
            conversation_id, span = await self._ensure_open(target.channel, span_type, msg.ts)
            turn = Turn(
                target.id, target.channel, conversation_id, span.id,
                user_item(str(target.payload.get("text") or "")), delivery,
                attempt=len(answers) + 1, regenerates=answers[-1].id if answers else None,
                answer_id=msg.id, start=self._start_before(target.id),
            )
            # The new answer has its own id, so it goes out as a new message in an sms/email turn.
            # A failed attempt sends nothing: it was asked for in the web client, which shows it.
            result = await self._answer(turn)
            return reply_to_outcome(result.event, _meta(target)) if result.answered and result.event else None

    async def _reply_again(self, outcome: Event) -> Outbound | None:
        """A regenerate a previous leader answered: its outbound again, threaded on its question."""
        if outcome.channel not in REPLY_CHANNELS or outcome.kind != "message" or outcome.parent_id is None:
            return None
        question = await self.ledger.get(outcome.parent_id)
        return reply_to_outcome(outcome, _meta(question) if question is not None else None)

    # ---- commands ---------------------------------------------------------------------------------

    def _command_running(self) -> bool:
        return self._command is not None and not self._command.done()

    def _start_command(self, coro: Any) -> "asyncio.Task[Any]":
        task: asyncio.Task[Any] = asyncio.create_task(coro)
        self._command = task
        return task

    async def on_compact(self, _: AgentCommand) -> CommandReply:
        """Start Compact now in the background and answer at once; "busy" while anything runs.

        No await between the checks and the start: nothing else can take the lock or the
        command slot in between, and nothing here can fail while holding either.
        """
        if self._command_running() or self.lock.locked() or self.busy or self.compacting:
            raise DomainError("busy", BUSY)
        if self.state.conversation_id is None:
            return CommandReply(ok=True)  # nothing to compact: the next turn starts fresh anyway
        self.compacting = True  # shown at once; the task clears it whatever happens
        self._start_command(self._compact_now())
        return CommandReply(ok=True)

    async def on_end(self, _: AgentCommand) -> CommandReply:
        """End the technical conversation after any running turn; history stays, the chain goes.

        Runs as the command slot's task, so a second compact or end meanwhile is "busy"; the
        request waits for it (shielded: a cancelled request does not half-end the conversation).
        """
        if self._command_running():
            raise DomainError("busy", BUSY)
        task = self._start_command(self._end_conversation())
        return await asyncio.shield(task)

    async def _end_conversation(self) -> CommandReply:
        async with self.lock:
            s = self.state
            if s.conversation_id is None:
                return CommandReply(ok=True)
            await self._close_span("conversation_ended")
            await self.ledger.append(
                make_event(
                    ConversationEnded(reason="user"), conversation_id=s.conversation_id, span_id=None, channel="text"
                )
            )
            # The next conversation starts uncompacted, as a restart reads it (state_from_resume).
            self.state = ConversationState(capsule=s.capsule)
            await self.publish_state()
        return CommandReply(ok=True)

    # ---- committed events (capsule refreshes, voice activity) --------------------------------------

    async def on_committed(self, event: Event) -> None:
        s = self.state
        if event.kind == "context.capsule":
            if s.capsule is None or (event.seq or 0) >= (s.capsule.seq or 0):
                s.capsule = event
                await self.publish_state()
        elif event.kind == "conversation.opened" and s.conversation_id is None and event.channel in VOICE_CHANNELS:
            # A call opened the conversation (nothing was open): later text turns continue it.
            s.conversation_id = event.conversation_id
            await self.publish_state()
        elif (
            event.kind == "span.opened"
            and event.payload.get("type") in VOICE_SPANS
            and event.conversation_id == s.conversation_id
        ):
            await self._voice_started(event)
        elif (
            event.kind == "message"
            and event.role == "assistant"
            and event.channel not in RESPONSES_CHANNELS
            and event.conversation_id == s.conversation_id
            and (s.chain_id or s.replacement is not None)
        ):
            # A voice conversation answered: a different protocol ran, so the next text turn
            # starts from the capsule and recent cross-channel turns (the same rule as at resume).
            log.info("voice activity: clearing the Responses chain")
            s.clear_chain()

    async def _voice_started(self, opened: Event) -> None:
        """A phone or browser voice session began: the Realtime protocol takes over the talking.

        The Responses chain is cleared (a different protocol, not a restart of the relationship),
        and the open text span is closed so the call is its own span in the timeline. A turn that
        is running keeps its span: it closes idle later, as any span does.
        """
        s = self.state
        if s.chain_id or s.replacement is not None:
            log.info("voice session %s: clearing the Responses chain", opened.span_id)
            s.clear_chain()
        if self.lock.locked() or s.span is None or s.span.type in VOICE_SPANS:
            return
        async with self.lock:
            if s.span is not None and s.span.id != opened.span_id and s.span.type not in VOICE_SPANS:
                await self._close_span("superseded")


def _settle_lease_read(task: "asyncio.Task[None]") -> None:
    """An input is done with: its lease read stops, and its outcome counts as seen (it was raised
    where it mattered, or the turn ended before it: then nothing of the turn was published)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()


def _meta(user_message: Event) -> dict[str, Any]:
    """The channel details (sender, subject, Message-ID ...) stored on a user message."""
    meta = user_message.payload.get("meta")
    return meta if isinstance(meta, dict) else {}
