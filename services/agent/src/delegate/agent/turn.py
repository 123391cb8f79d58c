"""One turn: the model loop that answers an input, and what it records.

``Turns.answer`` runs the turn and records the assistant message or ``turn.failed``;
``_converse`` is its loop (memory first, see ``retrieval``; then stream, record usage, run
tools, continue), retrying a broken stream or a lost chain inside the turn. ``TurnText``
(turn_text.py) streams the deltas; it stops the moment the lease is in doubt, so a leader
resumed after a pause shows nothing more of an answer its successor gives.
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from delegate.contracts.events import (
    ContextCompacted,
    ContextUsage,
    Event,
    Message,
    TurnFailed,
    UsagePurpose,
    make_event,
)
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import CommandReply, TurnCommand
from delegate.runtime.bus import BusUnavailable, DomainError, Retryable
from delegate.runtime.calendar_now import CalendarNow
from delegate.runtime.hard_stop import owner_turn_refusal
from delegate.runtime.metering import Cause
from delegate.runtime.working_context import compose_instructions

from . import model as responses
from .fresh_context import fresh_context
from .guard import LeaseGuard
from .model import ChainLost, ModelError, Rejected, StreamBroken
from .model_work import ModelWork
from .prompts import BASE_INSTRUCTIONS
from .retrieval import Retrieval, TurnMemory, item_text
from .turn_text import TurnText
from .turn_types import ChainPoint, Turn, TurnResult, TurnStopped

log = logging.getLogger(__name__)

# Room for local attempts inside one delivery: attempt numbers never repeat across deliveries.
ATTEMPTS_PER_DELIVERY = 10
# Delta attempts of a regenerated answer (attempt n of its turn) start at (n - 1) * this + 1, so
# a client tells a new attempt from a retried stream of the previous one by the number alone.
DELTA_ATTEMPTS_PER_TURN_ATTEMPT = 1000


@dataclass(eq=False)
class Turns(ModelWork):
    guard: LeaseGuard
    retrieval: Retrieval
    calendar_now: CalendarNow  # today's remaining events, for the instructions
    # The turn whose model loop runs now, if any: what Stop (agent.cmd.stop) can cut short.
    running: Turn | None = field(default=None, init=False)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold the one model activity's lock for a turn, shown as busy while it is held."""
        status = self.status
        try:
            async with status.lock:
                status.busy = True
                try:  # busy is cleared whatever fails, the first state publish included
                    await status.publish()
                    await self.calendar_now.ready(utcnow())  # bounded: a slow calendar is left out
                    yield
                finally:
                    status.busy = False
        finally:
            # Published once the lock is free: whoever reads "not busy" can compact or end now.
            await status.publish()

    async def answer(self, turn: Turn) -> TurnResult:
        """Run the turn; record the assistant message or ``turn.failed``. Infra errors propagate."""
        if turn.silence is None and self.settings.budget_hard_stop_owner:  # an owner turn, never silently
            refusal = await owner_turn_refusal(self.bus)
            if refusal is not None:
                log.warning("turn %s refused: over the spend line (BUDGET_HARD_STOP_OWNER)", turn.id)
                return TurnResult(False, refusal, await self._fail(turn, "budget", refusal, retryable=False))
        text = self._turn_text(turn)
        self.running = turn
        try:
            async with asyncio.timeout(self.settings.agent_turn_timeout):
                response_id = await self._converse(turn, text)
        except TurnStopped:
            return await self._record_stopped(turn, text)
        except ModelError as exc:
            log.warning("turn %s failed: %s", turn.id, exc)
            failed = await self._fail(turn, exc.code, exc.message, retryable=exc.retryable)
            return TurnResult(False, exc.message, failed)
        except TimeoutError:
            message = "The answer took too long and was stopped. Please try again."
            failed = await self._fail(turn, "turn_timeout", message, retryable=True)
            return TurnResult(False, message, failed)
        except (Retryable, BusUnavailable):
            raise
        except Exception:
            log.exception("turn %s crashed", turn.id)
            message = "Something went wrong on our side while answering. Please try again."
            failed = await self._fail(turn, "internal", message, retryable=True)
            return TurnResult(False, message, failed)
        finally:
            self.running = None
        if turn.silence is not None and turn.silence.chosen:
            # Said nothing, on purpose: no message. The chain still moves on (the model saw the
            # signals); after a restart it continues from the last answer that was said.
            self.status.state.chain_id = response_id
            self.status.state.replacement = None
            log.info("turn %s: nothing to say (%s)", turn.id, turn.silence.reason)
            return TurnResult(True, "", None)
        answer = await self._record_answer(turn, Message(text=text.committed, response_id=response_id))
        self.retrieval.carry(answer.id, text.committed)  # the chain carries the answer from now on
        # Only now is this response the chain head: a failed turn leaves the last good one.
        self.status.state.chain_id = response_id
        self.status.state.replacement = None
        log.info("turn %s answered (%s, %d chars)", turn.id, response_id, len(text.committed))
        return TurnResult(True, text.committed, answer)

    def _turn_text(self, turn: Turn) -> TurnText:
        first = (turn.attempt - 1) * DELTA_ATTEMPTS_PER_TURN_ATTEMPT + (turn.delivery - 1) * ATTEMPTS_PER_DELIVERY + 1
        silence = turn.silence
        if silence is None:
            return TurnText(self.bus, turn.id, first, live=self.guard.live, lease_read=turn.lease_read)
        # Once an activation chose to say nothing, whatever text follows is not shown live either.
        return TurnText(self.bus, turn.id, first, live=lambda: self.guard.live() and not silence.chosen)

    async def _record_answer(self, turn: Turn, message: Message) -> Event:
        if turn.attempt > 1:
            message = message.model_copy(update={"attempt": turn.attempt, "regenerates": turn.regenerates})
        await turn.opened()
        await self.retrieval.settle(turn)
        return await self._append(
            make_event(
                message,
                conversation_id=turn.conversation_id,
                span_id=turn.span_id,
                channel=turn.channel,
                role="assistant",
                parent_id=turn.id,
                id=turn.answer_id,
            )
        )

    async def _record_stopped(self, turn: Turn, text: TurnText) -> TurnResult:
        """Stop: the partial answer is the turn's answer, marked as stopped; the input is answered.

        The stopped response never becomes the chain head (the model did not finish it): the
        next turn starts from a fresh working context, which replays the partial answer as the
        ledger has it, the same as after a restart (``state_from_resume``).
        """
        partial = text.so_far()
        stopped = await self._record_answer(turn, Message(text=partial, response_id=text.response_id, stopped=True))
        self.status.state.clear_chain()
        log.info("turn %s stopped by the owner (%d chars kept)", turn.id, len(partial))
        return TurnResult(True, partial, stopped)

    async def on_stop(self, cmd: TurnCommand) -> CommandReply:
        """``agent.cmd.stop``: cancel the running turn's model stream if it is that turn."""
        turn = self.running
        if turn is None or turn.id != cmd.turn_id or turn.stop.is_set():
            raise DomainError("nothing_to_stop", "No answer to that message is being generated.")
        turn.stop.set()
        return CommandReply(ok=True)

    async def _fail(self, turn: Turn, code: str, message: str, *, retryable: bool) -> Event:
        await turn.opened()
        await self.retrieval.settle(turn)
        return await self._append(
            make_event(
                TurnFailed(code=code, message=message, retryable=retryable),
                conversation_id=turn.conversation_id,
                span_id=turn.span_id,
                channel=turn.channel,
                parent_id=turn.id,
                id=failure_id(turn.answer_id) if turn.answer_id else None,
            )
        )

    async def _append(self, event: Event) -> Event:
        await self.ledger.append(event)
        return event

    async def _converse(self, turn: Turn, text: TurnText) -> str:
        """The model loop of one turn: stream, record, run tools, continue; returns the response id.

        The text is in ``text.committed``.
        """
        s = self.status.state
        settings = self.settings
        tools = self.toolbox.definitions()
        own = turn.silence.handlers() if turn.silence is not None else {}
        if turn.silence is not None:
            tools = [t for t in tools if t.get("name") not in own] + turn.silence.definitions()
        start = turn.start if turn.start is not None else ChainPoint(s.chain_id, s.replacement)
        # Where this turn started: a regenerate or an edit of it continues from here too.
        s.turn_base = (turn.id, start)
        fresh = start.fresh
        if start.replacement is not None:
            previous, items = None, [*start.replacement, turn.item]
        elif start.previous:
            previous, items = start.previous, [turn.item]
        else:
            previous, items = None, [*await self._fresh_items(turn), turn.item]
        self.retrieval.carry(turn.id, item_text(turn.item))
        memory = await self.retrieval.before_turn(turn, capsule=s.capsule, purpose=turn.memory_purpose)
        rounds = broken = 0
        # One clock for the whole turn: a tool round past a minute's turn would otherwise say
        # another time than the request before it, and the cached prompt prefix would end there.
        now = utcnow()
        while True:
            if turn.stop.is_set():
                raise TurnStopped()
            request: dict[str, Any] = {
                "model": settings.openai_model,
                "instructions": self._instructions(turn, memory, now),
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
                result = await self._stream(turn, request, text)
            except (ChainLost, Rejected) as exc:
                # A 400 on the compact endpoint's output, replayed as it came, would fail every
                # turn until the next successful one: one that cannot come while it is replayed.
                replacement_refused = isinstance(exc, Rejected) and start.replacement is not None
                if fresh or rounds or not (isinstance(exc, ChainLost) or replacement_refused):
                    raise
                # The server forgot our chain (or refused the replacement): start over from the
                # capsule and recent messages rather than fail the user's message.
                log.warning("turn %s: %s; continuing from a fresh working context", turn.id, exc)
                s.chain_id, s.replacement, fresh = None, None, True
                s.turn_base = (turn.id, ChainPoint())
                previous, items = None, [*await self._fresh_items(turn), turn.item]
                self.retrieval.carry(turn.id, item_text(turn.item))
                await text.restart()
                continue
            except StreamBroken as exc:
                await self.status.auto_compacting(False)
                if exc.final or broken >= settings.agent_stream_retries:
                    raise
                broken += 1
                log.warning("turn %s: %s; sending the request again (attempt %d)", turn.id, exc, text.attempt + 1)
                await text.restart()
                continue
            await self._record_usage(turn, result)
            text.end_response(result.text)
            if not result.calls:
                return result.response_id
            rounds += 1
            if rounds > settings.agent_max_tool_rounds:
                raise ModelError("tool_limit", "The answer needed more tool rounds than allowed, so it was stopped.")
            outputs = [
                await self.toolbox.run(
                    call, conversation_id=turn.conversation_id, span_id=turn.span_id, channel=turn.channel,
                    parent_id=turn.id, own=own,
                )
                for call in result.calls
            ]
            previous, items = result.response_id, outputs

    async def _fresh_items(self, turn: Turn) -> list[dict[str, Any]]:
        """A fresh working context's items; the model carries exactly its messages from now on."""
        context = await fresh_context(self.ledger, self.settings, self.status.state.capsule, turn)
        self.retrieval.carry_fresh(context.messages)
        return context.items

    def _instructions(self, turn: Turn, memory: TurnMemory, now: datetime) -> str:
        """Every request's own instructions (a chain does not carry them): memory given so far included."""
        return compose_instructions(
            BASE_INSTRUCTIONS, capsule=self.status.state.capsule, channel=turn.channel, now=now, with_markers=True,
            memory=memory.context(), calendar=self.calendar_now.section(now),
        )

    async def _stream(self, turn: Turn, request: dict[str, Any], text: TurnText) -> responses.ModelResult:
        """One streamed request, cut short (closing its connection) the moment Stop is pressed."""

        async def on_delta(part: str) -> None:
            await text.delta(part)
            turn.out.set()  # the opening events follow the first delta, not before it
            self.retrieval.release(turn)  # nor the memory record

        stream = asyncio.ensure_future(
            responses.stream_response(
                self.client, request, on_delta=on_delta, on_compacting=self.status.auto_compacting,
                on_created=text.created, meter=self.meter, cause=usage_cause(turn),
            )
        )
        stopper = asyncio.ensure_future(turn.stop.wait())
        lease_read = turn.lease_read
        try:
            while True:
                waiting = [stream, stopper] if lease_read is None else [stream, stopper, lease_read]
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if lease_read is None or not lease_read.done() or stream.done() or stopper.done():
                    break
                lease_read.result()  # Deposed: the request stops (below) and the input goes back
                lease_read = None  # ours: only the stream and Stop are left to wait for
        finally:
            turn.out.set()  # the response ended (or was cut short) without a delta maybe: no more hold
            stopper.cancel()
            if not stream.done():
                stream.cancel()  # closes the HTTP stream: the server sees the client leave
                await asyncio.wait([stream])
        if stream.cancelled():
            await self.status.auto_compacting(False)
            raise TurnStopped()
        return stream.result()

    async def _record_usage(self, turn: Turn, result: responses.ModelResult) -> None:
        await turn.opened()  # the first thing of a turn published after its opening events
        await self.retrieval.settle(turn)  # then its memory record (out since the first delta, or now)
        s = self.status.state
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
            # The same figures as the usage rows: before is what the previous context.usage
            # reported (the meter's last reading), after is this response's context.usage.
            compacted = make_event(
                ContextCompacted(
                    trigger="auto",
                    response_id=result.response_id,
                    input_tokens_before=before or None,
                    input_tokens_after=usage.input_tokens if usage else None,
                ),
                **common,
            )
            await self.ledger.append(compacted)
            s.last_compacted_at = compacted.ts  # the event's own time, as a restart reads it back
        await self.status.auto_compacting(False)
        await self.status.publish()


def usage_cause(turn: Turn) -> Cause:
    """What a turn's model calls are billed to: the owner's turn, or an activation."""
    purpose: UsagePurpose = "activation" if turn.memory_purpose == "activation" else "owner_turn"
    return Cause(purpose, turn.channel, turn.id, conversation_id=turn.conversation_id, span_id=turn.span_id,
                 parent_id=turn.id, after=turn.opened)


def failure_id(answer_id: str) -> str:
    """The id of the ``turn.failed`` a turn with a fixed answer id records instead of its answer."""
    return f"{answer_id}-failed"


async def settle_opening(task: "asyncio.Task[None]") -> None:
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
