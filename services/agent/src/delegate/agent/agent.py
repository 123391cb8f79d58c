"""The singleton session while this process leads: turns, Compact now, End conversation, idle checks.

One model activity at a time: a turn or a compaction holds ``self.lock``. Inputs arrive one at a
time from the durable consumer; commands arrive as requests. Every step is an event on
``LEDGER_APPEND``, published (and acked by JetStream) in order before the input is acked, so a
crash at any point leaves a ledger the next leader can continue from.
"""

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nats.aio.msg import Msg
from openai import AsyncOpenAI

from delegate.contracts import topics
from delegate.contracts.events import (
    ActivationOutcome,
    Channel,
    Checkpoint,
    ContextCompacted,
    ContextUsage,
    ConversationEnded,
    ConversationOpened,
    Event,
    Message,
    SpanClosed,
    SpanOpened,
    SpanType,
    TurnFailed,
    make_event,
)
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.messages import (
    ActivationInput,
    AgentCommand,
    AgentState,
    CapsuleState,
    CommandReply,
    Delta,
    IdleCheckInput,
    LiveNotice,
    QueryRequest,
    ResumeState,
    Usage,
    UserInput,
)
from delegate.runtime.bus import Bus, BusUnavailable, DomainError, Retryable
from delegate.runtime.working_context import (
    RESPONSES_CHANNELS,
    build_working_context,
    capsule_through_seq,
    compose_instructions,
)

from . import model as responses
from .ledger import PAGE, Ledger, LedgerUnavailable
from .model import ChainLost, ModelError, StreamBroken
from .prompts import BASE_INSTRUCTIONS, activation_item, user_item
from .session import Session, SpanRef, session_from_resume
from .settings import Settings
from .toolbox import Toolbox

log = logging.getLogger(__name__)

# A replacement input bigger than this stays in memory only: the event would exceed the
# ledger's size limit (MAX_EVENT_BYTES), and a lost replacement only costs a fresh context.
MAX_PERSISTED_REPLACEMENT = 200_000
# Room for local attempts inside one delivery: attempt numbers never repeat across deliveries.
ATTEMPTS_PER_DELIVERY = 10
# How far back to look for an answer to a redelivered input whose anchor is unknown.
ANSWER_SEARCH_WINDOW = 5000
TICK = timedelta(microseconds=1)

SPAN_FOR_CHANNEL: dict[str, SpanType] = {"browser_voice": "voice", "phone": "phone", "inner": "activation"}


@dataclass(frozen=True)
class Turn:
    """One input being answered: where its events go and what the model is given.

    ``opening`` publishes the events that open the turn (conversation, span, the user message)
    while the model request already runs; ``opened()`` is the barrier before anything else of
    the turn is published, so the stream still holds them first, in order.
    """

    id: str
    channel: Channel
    conversation_id: str
    span_id: str
    item: dict[str, Any]
    delivery: int = 1
    opening: "asyncio.Task[None] | None" = None

    async def opened(self) -> None:
        if self.opening is not None:
            # Shielded: the turn timing out while it waits here must not cancel the opening,
            # which ``turn.failed`` then still waits for.
            await asyncio.shield(self.opening)


class TurnText:
    """Streams deltas for one turn and keeps the text of the responses that completed.

    A retried request starts a new ``attempt``: clients drop that attempt's earlier partial
    text; text from responses that already completed in this turn is sent again first.
    """

    def __init__(self, bus: Bus, turn_id: str, attempt: int) -> None:
        self.bus = bus
        self.turn_id = turn_id
        self.attempt = attempt
        self.index = 0
        self.committed = ""
        self._started = False

    def begin_response(self) -> None:
        self._started = False

    async def delta(self, text: str) -> None:
        if not self._started and self.committed:
            text = "\n\n" + text
        self._started = True
        await self._emit(text)

    def end_response(self, text: str) -> None:
        if text:
            self.committed = f"{self.committed}\n\n{text}" if self.committed else text

    async def restart(self) -> None:
        self.attempt += 1
        self.index = 0
        self._started = False
        if self.committed:
            await self._emit(self.committed)

    async def _emit(self, text: str) -> None:
        await self.bus.emit(
            topics.AGENT_DELTA, Delta(turn_id=self.turn_id, attempt=self.attempt, index=self.index, text=text)
        )
        self.index += 1
        if self.index == 1:
            # Let the NATS client's flusher write the first delta now: events that arrived in
            # one read are parsed without yielding, so a fast stream would hold it back until
            # the whole read is through. Later ones may go out together.
            await asyncio.sleep(0)


class Agent:
    def __init__(
        self, settings: Settings, bus: Bus, ledger: Ledger, client: AsyncOpenAI, toolbox: Toolbox
    ) -> None:
        self.settings = settings
        self.bus = bus  # long-lived connection: publishing, requests, live emits
        self.ledger = ledger
        self.client = client
        self.toolbox = toolbox
        self.session = Session()
        self.lock = asyncio.Lock()  # one model activity at a time: a turn or a compaction
        self.busy = False
        self.compacting = False
        self.ready = False
        self._last_state: AgentState | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- start / takeover -----------------------------------------------------------------

    async def restore(self) -> ResumeState:
        """Re-derive the session from the ledger once it holds everything published so far."""
        await self.ledger.wait_caught_up()
        resume = await self.ledger.resume(turn_limit=self.settings.agent_recent_turns)
        session = session_from_resume(resume)
        if session.capsule is None:
            session.capsule = await self.ledger.newest(["context.capsule"])
        self.session = session
        self.ready = True
        log.info(
            "resumed: conversation %s, span %s, chain %s%s, capsule %s",
            session.conversation_id, session.span.id if session.span else None, session.chain_id,
            " (replacement input pending)" if session.replacement is not None else "",
            session.capsule.id if session.capsule else None,
        )
        await self.publish_state(force=True)
        return resume

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- state --------------------------------------------------------------------------------

    def snapshot(self) -> AgentState:
        s = self.session
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

    async def on_state(self, _: AgentCommand) -> AgentState:
        return self.snapshot()

    # ---- input --------------------------------------------------------------------------------

    async def on_input(self, msg: UserInput | ActivationInput | IdleCheckInput, raw: Msg) -> None:
        delivery = raw.metadata.num_delivered if raw.metadata else 1
        beat = asyncio.create_task(self._heartbeat(raw))
        try:
            if isinstance(msg, UserInput):
                await self._user_turn(msg, delivery)
            elif isinstance(msg, ActivationInput):
                await self._activation(msg, delivery)
            else:
                await self._idle_check(msg, delivery)
        except (Retryable, BusUnavailable) as exc:
            if delivery < self.settings.agent_max_deliver:
                log.warning("input %s: retrying later (delivery %d): %s", msg.id, delivery, exc)
                if isinstance(exc, Retryable):
                    raise
                raise LedgerUnavailable(str(exc)) from exc
            log.error("input %s: giving up after %d deliveries: %s", msg.id, delivery, exc)
            if not isinstance(msg, IdleCheckInput):
                await self._give_up(msg)
        except asyncio.CancelledError:
            # Stepping down (or stopping) mid-input: hand it back now, not after ack_wait.
            try:
                await raw.nak()
            except Exception as exc:
                log.debug("nak of the abandoned input failed: %r", exc)
            raise
        finally:
            beat.cancel()

    async def _heartbeat(self, raw: Msg) -> None:
        """Keep a live leader's input from being redelivered while its turn runs."""
        every = max(self.settings.agent_ack_wait / 3, 0.2)
        while True:
            await asyncio.sleep(every)
            try:
                await raw.in_progress()
            except Exception as exc:
                log.debug("in_progress failed: %r", exc)

    @asynccontextmanager
    async def _turn_slot(self) -> AsyncIterator[None]:
        async with self.lock:
            self.busy = True
            await self.publish_state()
            try:
                yield
            finally:
                self.busy = False
                await self.publish_state()

    async def _user_turn(self, msg: UserInput, delivery: int) -> None:
        async with self._turn_slot():
            # A first delivery cannot have been answered: answering needs a delivery, and the
            # durable consumer counts deliveries across leaders. So only redeliveries look.
            if delivery > 1 and await self._recorded_answers(msg.id, ("message", "turn.failed"), anchored=True):
                return
            span_type = SPAN_FOR_CHANNEL.get(msg.channel, "interaction")
            conversation_id, span = self._open_ids(msg.channel, span_type)
            user_message = make_event(
                Message(text=msg.text, client_msg_id=msg.client_msg_id, meta=msg.meta),
                conversation_id=conversation_id,
                span_id=span.id,
                channel=msg.channel,
                role="user",
                id=msg.id,
                ts=msg.ts,
            )
            # The opening events go out while the model request runs: the first delta does not
            # wait for their fsynced PubAcks, everything published after them still does.
            opening = asyncio.create_task(self._publish_opening(conversation_id, span, msg.ts, user_message))
            turn = Turn(msg.id, msg.channel, conversation_id, span.id, user_item(msg.text), delivery, opening)
            try:
                await self._answer(turn)
            except asyncio.CancelledError:
                opening.cancel()  # stepping down: this leader publishes nothing more
                raise
            finally:
                await _settle(opening)

    async def _activation(self, msg: ActivationInput, delivery: int) -> None:
        async with self._turn_slot():
            if delivery > 1:
                found = await self._recorded_answers(
                    msg.id, ("activation.outcome", "message", "turn.failed"), anchored=False
                )
                if found:
                    await self._finish_recorded_activation(msg, found)
                    return
            s = self.session
            if s.span is not None and s.span.type != "activation":
                await self._close_span("superseded")
            conversation_id, span = await self._ensure_open("inner", "activation", msg.ts)
            turn = Turn(msg.id, "inner", conversation_id, span.id, activation_item(msg), delivery)
            answered, summary = await self._answer(turn)
            await self.ledger.append(
                make_event(
                    ActivationOutcome(status="completed" if answered else "failed", summary=summary[:1000]),
                    conversation_id=conversation_id,
                    span_id=span.id,
                    channel="inner",
                    parent_id=msg.id,
                )
            )
            await self._close_span("completed")

    async def _recorded_answers(self, turn_id: str, kinds: tuple[str, ...], *, anchored: bool) -> list[Event]:
        """On redelivery: what a previous leader already recorded in answer to this input.

        ``anchored``: the input has its own event (a user message with the input's id); an
        answer can only come after it, and without it there can be no answer at all.
        """
        await self.ledger.wait_caught_up()
        if anchored:
            anchor = await self.ledger.get(turn_id)
            if anchor is None:
                return []
            after = anchor.seq or 0
        else:
            after = max(await self.ledger.last_seq() - ANSWER_SEARCH_WINDOW, 0)
        events = await self.ledger.scan(QueryRequest(after_seq=after, kinds=list(kinds), limit=PAGE))
        found = [e for e in events if e.parent_id == turn_id and (e.kind != "message" or e.role == "assistant")]
        if found:
            log.info("input %s was already answered before a takeover: %s", turn_id, [e.kind for e in found])
        return found

    async def _finish_recorded_activation(self, msg: ActivationInput, found: list[Event]) -> None:
        """A previous leader answered this activation: add what it did not get to, run nothing again."""
        if not any(e.kind == "activation.outcome" for e in found):
            first = found[0]
            failed = next((e for e in found if e.kind == "turn.failed"), None)
            summary = str((failed or first).payload.get("message" if failed else "text") or "")
            await self.ledger.append(
                make_event(
                    ActivationOutcome(status="failed" if failed else "completed", summary=summary[:1000]),
                    conversation_id=first.conversation_id,
                    span_id=first.span_id,
                    channel="inner",
                    parent_id=msg.id,
                )
            )
        if self.session.span is not None and self.session.span.type == "activation":
            await self._close_span("completed")

    async def _ensure_open(self, channel: Channel, span_type: SpanType, ts: datetime) -> tuple[str, SpanRef]:
        """The open conversation and span, opening them just before ``ts`` when there are none."""
        conversation_id, span = self._open_ids(channel, span_type)
        await self._publish_opening(conversation_id, span, ts)
        return conversation_id, span

    def _open_ids(self, channel: Channel, span_type: SpanType) -> tuple[str, SpanRef]:
        """The open conversation and span, or new ids for them: ``_publish_opening`` opens those."""
        s = self.session
        conversation_id = s.conversation_id or new_id()
        span = s.span or SpanRef(new_id(), span_type, channel)
        return conversation_id, span

    async def _publish_opening(self, conversation_id: str, span: SpanRef, ts: datetime, *then: Event) -> None:
        """Open the conversation and span if they are new, just before ``ts``; then publish ``then``.

        One publish at a time, each acked before the next: a retried publish can never land
        behind a later one. The session takes each id only once its event is acked, as before.
        """
        s = self.session
        if s.conversation_id is None:
            await self.ledger.append(
                make_event(
                    ConversationOpened(), conversation_id=conversation_id, span_id=None, channel=span.channel,
                    ts=ts - 2 * TICK,
                )
            )
            s.conversation_id = conversation_id
        if s.span is None:
            await self.ledger.append(
                make_event(
                    SpanOpened(type=span.type), conversation_id=conversation_id, span_id=span.id,
                    channel=span.channel, ts=ts - TICK,
                )
            )
            s.span = span
        for event in then:
            await self.ledger.append(event)
        await self.publish_state()

    async def _close_span(self, reason: Any) -> None:
        s = self.session
        span = s.span
        if span is None:
            return
        await self.ledger.append(
            make_event(
                SpanClosed(reason=reason), conversation_id=s.conversation_id, span_id=span.id, channel=span.channel
            )
        )
        s.span = None
        await self.publish_state()

    # ---- a turn -------------------------------------------------------------------------------

    async def _answer(self, turn: Turn) -> tuple[bool, str]:
        """Run the turn; record the assistant message or ``turn.failed``. Infra errors propagate."""
        try:
            async with asyncio.timeout(self.settings.agent_turn_timeout):
                text, response_id = await self._converse(turn)
        except ModelError as exc:
            log.warning("turn %s failed: %s", turn.id, exc)
            await self._fail(turn, exc.code, exc.message, retryable=exc.retryable)
            return False, exc.message
        except TimeoutError:
            message = "The answer took too long and was stopped. Please try again."
            await self._fail(turn, "turn_timeout", message, retryable=True)
            return False, message
        except (Retryable, BusUnavailable):
            raise
        except Exception:
            log.exception("turn %s crashed", turn.id)
            message = "Something went wrong on our side while answering. Please try again."
            await self._fail(turn, "internal", message, retryable=True)
            return False, message
        await turn.opened()
        await self.ledger.append(
            make_event(
                Message(text=text, response_id=response_id),
                conversation_id=turn.conversation_id,
                span_id=turn.span_id,
                channel=turn.channel,
                role="assistant",
                parent_id=turn.id,
            )
        )
        # Only now is this response the chain head: a failed turn leaves the last good one.
        self.session.chain_id = response_id
        self.session.replacement = None
        log.info("turn %s answered (%s, %d chars)", turn.id, response_id, len(text))
        return True, text

    async def _fail(self, turn: Turn, code: str, message: str, *, retryable: bool) -> None:
        await turn.opened()
        await self.ledger.append(
            make_event(
                TurnFailed(code=code, message=message, retryable=retryable),
                conversation_id=turn.conversation_id,
                span_id=turn.span_id,
                channel=turn.channel,
                parent_id=turn.id,
            )
        )

    async def _give_up(self, msg: UserInput | ActivationInput) -> None:
        s = self.session
        channel: Channel = msg.channel if isinstance(msg, UserInput) else "inner"
        try:
            await self.ledger.append(
                make_event(
                    TurnFailed(
                        code="unavailable",
                        message="The assistant could not process this message. Please send it again.",
                        retryable=True,
                    ),
                    conversation_id=s.conversation_id,
                    span_id=s.span.id if s.span else None,
                    channel=channel,
                    parent_id=msg.id,
                )
            )
        except BusUnavailable:
            log.error("could not record the failure of input %s", msg.id)

    async def _converse(self, turn: Turn) -> tuple[str, str]:
        """The model loop of one turn: stream, record, run tools, continue; returns text and response id."""
        s = self.session
        settings = self.settings
        tools = self.toolbox.definitions()
        instructions = compose_instructions(
            BASE_INSTRUCTIONS, capsule=s.capsule, channel=turn.channel, now=utcnow(), with_markers=True
        )
        text = TurnText(self.bus, turn.id, (turn.delivery - 1) * ATTEMPTS_PER_DELIVERY + 1)
        fresh = s.chain_id is None and s.replacement is None
        if s.replacement is not None:
            previous, items = None, [*s.replacement, turn.item]
        elif s.chain_id:
            previous, items = s.chain_id, [turn.item]
        else:
            previous, items = None, [*await self._fresh_items(turn), turn.item]
        rounds = broken = 0
        while True:
            request: dict[str, Any] = {
                "model": settings.openai_model,
                "instructions": instructions,
                "input": items,
                "store": True,
                "context_management": [{"type": "compaction", "compact_threshold": settings.compact_threshold}],
            }
            if previous:
                request["previous_response_id"] = previous
            if tools:
                request["tools"] = tools
            text.begin_response()
            try:
                result = await responses.stream_response(
                    self.client, request, on_delta=text.delta, on_compacting=self._auto_compacting
                )
            except ChainLost as exc:
                if fresh or rounds:
                    raise
                # The server forgot our chain (or refused the replacement): start over from the
                # capsule and recent turns rather than fail the user's message.
                log.warning("turn %s: %s; continuing from a fresh working context", turn.id, exc)
                s.chain_id, s.replacement, fresh = None, None, True
                previous, items = None, [*await self._fresh_items(turn), turn.item]
                await text.restart()
                continue
            except StreamBroken as exc:
                await self._auto_compacting(False)
                if exc.final or broken >= settings.agent_stream_retries:
                    raise
                broken += 1
                log.warning("turn %s: %s; sending the request again (attempt %d)", turn.id, exc, text.attempt + 1)
                await text.restart()
                continue
            await self._record_usage(turn, result)
            text.end_response(result.text)
            if not result.calls:
                return text.committed, result.response_id
            rounds += 1
            if rounds > settings.agent_max_tool_rounds:
                raise ModelError("tool_limit", "The answer needed more tool steps than allowed, so it was stopped.")
            outputs = [
                await self.toolbox.run(
                    call, conversation_id=turn.conversation_id, span_id=turn.span_id, channel=turn.channel,
                    parent_id=turn.id,
                )
                for call in result.calls
            ]
            previous, items = result.response_id, outputs

    async def _fresh_items(self, turn: Turn | None) -> list[dict[str, Any]]:
        """Recent verbatim turns not covered by the capsule, for a session without a chain."""
        capsule = self.session.capsule
        messages = await self.ledger.recent_messages(
            after_seq=capsule_through_seq(capsule), want=self.settings.agent_recent_turns + 1
        )
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
        return context.items

    async def _auto_compacting(self, on: bool) -> None:
        if self.compacting != on:
            self.compacting = on
            await self.publish_state()

    async def _record_usage(self, turn: Turn, result: responses.ModelResult) -> None:
        await turn.opened()  # the first thing of a turn published after its opening events
        s = self.session
        before = s.input_tokens
        common: dict[str, Any] = {
            "conversation_id": turn.conversation_id,
            "span_id": turn.span_id,
            "channel": turn.channel,
            "parent_id": turn.id,
        }
        usage = result.usage
        if usage is None:
            log.warning("response %s carried no usage", result.response_id)
        else:
            await self.ledger.append(
                make_event(
                    ContextUsage(
                        response_id=result.response_id,
                        input_tokens=usage.input_tokens,
                        output_tokens=usage.output_tokens,
                        total_tokens=usage.total_tokens,
                        cached_tokens=usage.cached_tokens,
                        compact_threshold=self.settings.compact_threshold,
                    ),
                    **common,
                )
            )
            s.input_tokens = usage.input_tokens
        if result.compactions:
            await self.ledger.append(
                make_event(
                    ContextCompacted(
                        trigger="auto",
                        response_id=result.response_id,
                        input_tokens_before=before or None,
                        input_tokens_after=usage.input_tokens if usage else None,
                    ),
                    **common,
                )
            )
            s.last_compacted_at = utcnow()
        await self._auto_compacting(False)
        await self.publish_state()

    # ---- idle checkpoint ------------------------------------------------------------------------

    async def _idle_check(self, msg: IdleCheckInput, delivery: int) -> None:
        async with self.lock:
            await self.ledger.wait_caught_up()
            s = self.session
            span = s.span
            if span is None or span.id != msg.span_id or s.conversation_id is None:
                log.info("idle check for span %s ignored: it is not the open span", msg.span_id)
                return
            since = await self.ledger.scan(QueryRequest(after_seq=msg.last_activity_seq, span_id=span.id, limit=PAGE))
            through = msg.last_activity_seq
            ours = [e for e in since if e.kind == "checkpoint" and e.payload.get("through_seq") == through]
            if len(since) > len(ours):
                log.info("idle check for span %s ignored: activity after seq %d", span.id, msg.last_activity_seq)
                return
            if not ours:  # a redelivered check may find its checkpoint already written
                previous = await self.ledger.newest(
                    ["checkpoint"], conversation_id=s.conversation_id, below=msg.last_activity_seq
                )
                after = int(previous.payload.get("through_seq") or 0) if previous else 0
                if msg.last_activity_seq > after:
                    await self._checkpoint(s.conversation_id, span, after, msg.last_activity_seq)
            await self._close_span("idle")

    async def _checkpoint(self, conversation_id: str, span: SpanRef, after: int, through: int) -> None:
        events = await self.ledger.scan(
            QueryRequest(after_seq=after, through_seq=through, conversation_id=conversation_id, limit=PAGE)
        )
        turn_ids = [e.id for e in events if e.kind == "message" and e.role == "user"]
        await self.ledger.append(
            make_event(
                Checkpoint(
                    after_seq=after,
                    through_seq=through,
                    first_event_id=events[0].id if events else None,
                    last_event_id=events[-1].id if events else None,
                    turn_count=len(turn_ids),
                    turn_ids=turn_ids,
                ),
                conversation_id=conversation_id,
                span_id=span.id,
                channel=span.channel,
            )
        )

    # ---- commands ---------------------------------------------------------------------------------

    async def on_compact(self, _: AgentCommand) -> CommandReply:
        if self.lock.locked() or self.busy or self.compacting:
            raise DomainError("busy", "A response or a compaction is running; try again when it is done.")
        if self.session.conversation_id is None:
            return CommandReply(ok=True)  # nothing to compact: the next turn starts fresh anyway
        await self.lock.acquire()
        self.compacting = True
        await self.publish_state()
        task = asyncio.create_task(self._compact_now())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return CommandReply(ok=True)

    async def _compact_now(self) -> None:
        """Compact the chain with the standalone endpoint; its output replaces the chain."""
        s = self.session
        try:
            instructions = compose_instructions(
                BASE_INSTRUCTIONS, capsule=s.capsule, channel="text", now=utcnow(), with_markers=True
            )
            source = s.chain_id
            if s.chain_id:
                items, usage = await responses.compact(
                    self.client, model=self.settings.openai_model, instructions=instructions,
                    previous_response_id=s.chain_id,
                )
            else:
                window = s.replacement if s.replacement is not None else await self._fresh_items(None)
                if not window:
                    return
                items, usage = await responses.compact(
                    self.client, model=self.settings.openai_model, instructions=instructions, input_items=window
                )
            before = usage.input_tokens if usage else s.input_tokens
            after = await self._count_tokens(items, instructions)
            stored = items if len(json.dumps(items)) <= MAX_PERSISTED_REPLACEMENT else None
            if stored is None:
                log.warning("replacement input too big to persist; it is kept in memory only")
            await self.ledger.append(
                make_event(
                    ContextCompacted(
                        trigger="manual",
                        response_id=source,
                        input_tokens_before=before,
                        input_tokens_after=after,
                        replacement_input=stored,
                    ),
                    conversation_id=s.conversation_id,
                    span_id=s.span.id if s.span else None,
                    channel="text",
                )
            )
            s.chain_id, s.replacement = None, items
            s.input_tokens = after
            s.last_compacted_at = utcnow()
            log.info("compacted chain %s: %d -> %d input tokens", source, before, after)
        except Exception as exc:
            log.warning("Compact now failed: %r", exc)
            detail = exc.message if isinstance(exc, ModelError) else "the compaction failed"
            await self.bus.emit(
                topics.INNER_NOTICE,
                LiveNotice(kind="context.compacted", status="failed", conversation_id=s.conversation_id, detail=detail),
            )
        finally:
            self.compacting = False
            self.lock.release()
            await self.publish_state()

    async def _count_tokens(self, items: list[dict[str, Any]], instructions: str) -> int:
        try:
            counted = await self.client.responses.input_tokens.count(
                model=self.settings.openai_model, input=items, instructions=instructions  # type: ignore[arg-type]
            )
            return int(counted.input_tokens)
        except Exception as exc:
            log.debug("input token count unavailable (%r): estimating", exc)
            return (len(json.dumps(items)) + len(instructions)) // 4

    async def on_end(self, _: AgentCommand) -> CommandReply:
        """End the technical conversation after any running turn; history stays, the chain goes."""
        async with self.lock:
            s = self.session
            if s.conversation_id is None:
                return CommandReply(ok=True)
            await self._close_span("conversation_ended")
            await self.ledger.append(
                make_event(
                    ConversationEnded(reason="user"), conversation_id=s.conversation_id, span_id=None, channel="text"
                )
            )
            self.session = Session(capsule=s.capsule, last_compacted_at=s.last_compacted_at)
            await self.publish_state()
        return CommandReply(ok=True)

    # ---- committed events (capsule refreshes, voice sessions) --------------------------------------

    async def on_committed(self, event: Event) -> None:
        s = self.session
        if event.kind == "context.capsule":
            if s.capsule is None or (event.seq or 0) >= (s.capsule.seq or 0):
                s.capsule = event
                await self.publish_state()
        elif (
            event.kind == "message"
            and event.role == "assistant"
            and event.channel not in RESPONSES_CHANNELS
            and event.conversation_id == s.conversation_id
            and (s.chain_id or s.replacement is not None)
        ):
            # A voice session answered: a different protocol ran, so the next text turn starts
            # from the capsule and recent cross-channel turns (the same rule as at resume).
            log.info("voice activity: clearing the Responses chain")
            s.clear_chain()


async def _settle(task: "asyncio.Task[None]") -> None:
    """Let a turn's opening publishes finish even when the turn itself failed.

    Left running, they could land after the retried input opened its own conversation. Their
    error, if any, was already raised by ``Turn.opened`` or loses to the turn's own error.
    """
    try:
        await asyncio.wait([task])
    except asyncio.CancelledError:
        task.cancel()  # stepping down while waiting for it: publish nothing more
        raise
    if not task.cancelled() and task.exception() is not None:
        log.debug("opening publishes failed: %r", task.exception())
