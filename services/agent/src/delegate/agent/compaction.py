"""Compact now: replace the Responses chain by the standalone compaction of it.

Started by ``agent.cmd.compact``; it runs in the background (the command is answered at once)
under the agent lock, like a turn. The command slot (commands.py) lets at most one compact or end
command run at a time.
"""

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import ContextCompacted, make_event
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import LiveNotice
from delegate.runtime.metering import Cause
from delegate.runtime.working_context import compose_instructions

from . import model as responses
from .fresh_context import fresh_items
from .model import ModelError
from .model_work import ModelWork
from .prompts import BASE_INSTRUCTIONS

log = logging.getLogger(__name__)

# A replacement input bigger than this stays in memory only: the event would exceed the
# ledger's size limit (MAX_EVENT_BYTES), and a lost replacement only costs a fresh context.
MAX_PERSISTED_REPLACEMENT = 200_000


@dataclass(eq=False)
class Compaction(ModelWork):
    async def compact_now(self) -> None:
        """Compact the chain with the standalone endpoint; its output replaces the chain.

        Everything runs inside ``async with status.lock`` in this one task: whatever fails or is
        cancelled (a state publish while the bus is away, a step-down), the lock is released
        and ``compacting`` cleared, so the agent can never be left locked.
        """
        status = self.status
        try:
            async with status.lock:
                status.compacting = True
                await status.publish()
                await self._compact_locked()
        except asyncio.CancelledError:
            status.compacting = False  # cancelled: no more awaits, the lock is already released
            raise
        except Exception as exc:
            log.warning("Compact now failed: %r", exc)
        status.compacting = False
        with contextlib.suppress(Exception):
            await status.publish()

    def _compaction_cause(self) -> Cause:
        s = self.status.state
        span_id = s.span.id if s.span else None
        return Cause("compaction", "text", span_id or s.conversation_id, conversation_id=s.conversation_id,
                     span_id=span_id)

    async def _compact_locked(self) -> None:
        s = self.status.state
        try:
            instructions = compose_instructions(
                BASE_INSTRUCTIONS, capsule=s.capsule, channel="text", now=utcnow(), with_markers=True
            )
            source = s.chain_id
            if s.chain_id:
                items, usage = await responses.compact(
                    self.client, model=self.settings.openai_model, instructions=instructions,
                    previous_response_id=s.chain_id, meter=self.meter, cause=self._compaction_cause(),
                )
            else:
                window = s.replacement if s.replacement is not None else await fresh_items(
                    self.ledger, self.settings, s.capsule
                )
                if not window:
                    return
                items, usage = await responses.compact(
                    self.client, model=self.settings.openai_model, instructions=instructions, input_items=window,
                    meter=self.meter, cause=self._compaction_cause(),
                )
            # The figures the usage rows use: before is what the newest context.usage reported
            # (the compact endpoint's own usage counts its request, compaction prompt included);
            # after is the replacement counted as a turn's request counts it, tools included.
            before = s.input_tokens if s.input_tokens else (usage.input_tokens if usage else 0)
            after = await self._count_tokens(items, instructions)
            stored = items if len(json.dumps(items)) <= MAX_PERSISTED_REPLACEMENT else None
            if stored is None:
                log.warning("replacement input too big to persist; it is kept in memory only")
            compacted = make_event(
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
            await self.ledger.append(compacted)
            s.chain_id, s.replacement = None, items
            s.turn_base = None  # a regenerate after this starts from the replacement, not before it
            s.input_tokens = after
            s.last_compacted_at = compacted.ts  # the event's own time, as a restart reads it back
            log.info("compacted chain %s: %d -> %d input tokens", source, before, after)
        except Exception as exc:
            log.warning("Compact now failed: %r", exc)
            detail = exc.message if isinstance(exc, ModelError) else "the compaction failed"
            await self.bus.emit(
                topics.INNER_NOTICE,
                LiveNotice(kind="context.compacted", status="failed", conversation_id=s.conversation_id, detail=detail),
            )

    async def _count_tokens(self, items: list[dict[str, Any]], instructions: str) -> int:
        try:
            tools = self.toolbox.definitions()
            extra: dict[str, Any] = {"tools": tools} if tools else {}
            sdk = await responses.sdk_client(self.client)
            counted = await sdk.responses.input_tokens.count(
                model=self.settings.openai_model, input=items, instructions=instructions,  # type: ignore[arg-type]
                **extra,
            )
            return int(counted.input_tokens)
        except Exception as exc:
            log.debug("input token count unavailable (%r): estimating", exc)
            return (len(json.dumps(items)) + len(instructions)) // 4
