"""One turn: the model loop that answers an input, its live text, and what it records.

``_answer`` runs the turn and records the assistant message or ``turn.failed``; ``_converse``
is its loop (stream, record usage, run tools, continue), retrying a broken stream or a lost
chain inside the turn. ``TurnText`` streams the deltas; it stops the moment the lease is in
doubt, so a leader resumed after a pause shows nothing more of an answer its successor gives.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import Channel, ContextCompacted, ContextUsage, Message, TurnFailed, make_event
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import Delta
from delegate.runtime.bus import Bus, BusUnavailable, Retryable
from delegate.runtime.working_context import compose_instructions

from . import model as responses
from .model import ChainLost, ModelError, StreamBroken
from .prompts import BASE_INSTRUCTIONS
from .spans import Spans

log = logging.getLogger(__name__)

# Room for local attempts inside one delivery: attempt numbers never repeat across deliveries.
ATTEMPTS_PER_DELIVERY = 10


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

    def __init__(self, bus: Bus, turn_id: str, attempt: int, live: Callable[[], bool] = lambda: True) -> None:
        self.bus = bus
        self.live = live
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
        if not self.live():
            return  # the lease is in doubt: a successor may be streaming this turn already
        await self.bus.emit(
            topics.AGENT_DELTA, Delta(turn_id=self.turn_id, attempt=self.attempt, index=self.index, text=text)
        )
        self.index += 1
        if self.index == 1:
            # Let the NATS client's flusher write the first delta now: events that arrived in
            # one read are parsed without yielding, so a fast stream would hold it back until
            # the whole read is through. Later ones may go out together.
            await asyncio.sleep(0)



class Turns(Spans):
    @asynccontextmanager
    async def _turn_slot(self) -> AsyncIterator[None]:
        async with self.lock:
            self.busy = True
            try:  # busy is cleared whatever fails, the first state publish included
                await self.publish_state()
                yield
            finally:
                self.busy = False
                await self.publish_state()

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
        self.state.chain_id = response_id
        self.state.replacement = None
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

    async def _converse(self, turn: Turn) -> tuple[str, str]:
        """The model loop of one turn: stream, record, run tools, continue; returns text and response id."""
        s = self.state
        settings = self.settings
        tools = self.toolbox.definitions()
        instructions = compose_instructions(
            BASE_INSTRUCTIONS, capsule=s.capsule, channel=turn.channel, now=utcnow(), with_markers=True
        )
        text = TurnText(self.bus, turn.id, (turn.delivery - 1) * ATTEMPTS_PER_DELIVERY + 1, live=self.live)
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

    async def _record_usage(self, turn: Turn, result: responses.ModelResult) -> None:
        await turn.opened()  # the first thing of a turn published after its opening events
        s = self.state
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
