"""The conversation's working state while this process leads, and how it is re-derived from the ledger.

Nothing here is authoritative: at start and after every takeover the leader rebuilds it from
``ledger.cmd.resume`` (after the ledger has caught up with its stream), so a crash can neither
duplicate a conversation or span nor resurrect a chain that was cleared.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from delegate.contracts.events import (
    Channel,
    ContextCapsule,
    ContextCompacted,
    ContextUsage,
    Event,
    Message,
    SpanOpened,
    SpanType,
)
from delegate.contracts.messages import ResumeState
from delegate.runtime.working_context import RESPONSES_CHANNELS

from .turn_types import ChainPoint


@dataclass(frozen=True)
class SpanRef:
    id: str
    type: SpanType
    channel: Channel
    activation_id: str | None = None  # an activation span's: the input it answers


@dataclass
class ConversationState:
    """Where the conversation stands: its open ids, where the next turn continues, its capsule."""

    conversation_id: str | None = None
    span: SpanRef | None = None
    # Where the next turn continues: a Responses id, or the replacement input of a manual
    # compaction (then no previous_response_id), or neither (a fresh working context).
    chain_id: str | None = None
    replacement: list[dict[str, Any]] | None = None
    capsule: Event | None = None
    input_tokens: int = 0
    # When the conversation's newest context.compacted was committed (None: never compacted).
    last_compacted_at: datetime | None = None
    # The newest turn (its user message id) and the chain point its first request continued
    # from: a regenerate or an edit of that turn starts there again. Memory only: after a
    # restart those start from a fresh working context that leaves the replaced answer out.
    turn_base: tuple[str, ChainPoint] | None = None

    def clear_chain(self) -> None:
        self.chain_id = None
        self.replacement = None


def newest_assistant(resume: ResumeState) -> Event | None:
    if resume.last_assistant is not None:
        return resume.last_assistant
    answers = [e for e in resume.recent_turns if e.role == "assistant" and e.is_kind(Message)]
    return max(answers, key=lambda e: e.seq or 0, default=None)


def state_from_resume(resume: ResumeState) -> ConversationState:
    """The state a new leader continues, as the ledger remembers it."""
    state = ConversationState()
    if resume.capsule is not None and resume.capsule.is_kind(ContextCapsule):
        state.capsule = resume.capsule
    if resume.conversation_id is None:
        return state  # no open conversation: the next input opens one, from a fresh context
    state.conversation_id = resume.conversation_id
    # Only the open conversation's compactions count: End conversation starts uncompacted.
    if resume.last_compacted is not None and resume.last_compacted.conversation_id == resume.conversation_id:
        state.last_compacted_at = resume.last_compacted.ts
    opened = resume.open_span
    span = opened.payload_as(SpanOpened) if opened is not None else None
    # A call's span belongs to the voice service, which closes it (a killed one's successor too).
    if opened is not None and opened.span_id and span is not None and span.type not in ("voice", "phone"):
        state.span = SpanRef(opened.span_id, span.type, opened.channel, span.activation_id)
    usage = resume.last_usage.payload_as(ContextUsage) if resume.last_usage is not None else None
    if usage is not None:
        state.input_tokens = usage.input_tokens

    chain_seq = 0
    answer = newest_assistant(resume)
    if answer is not None:
        chain_seq = answer.seq or 0
        # A voice answer means a Realtime session ran since: it cleared the chain. A stopped
        # answer never became the chain head: the next turn starts fresh, as it would have.
        message = answer.payload_as(Message)
        if message is not None and answer.channel in RESPONSES_CHANNELS and not message.stopped:
            state.chain_id = message.response_id or None
    else:
        state.chain_id = resume.last_response_id

    compacted = resume.last_compacted
    payload = compacted.payload_as(ContextCompacted) if compacted is not None else None
    if compacted is not None and payload is not None and payload.trigger == "manual" \
            and (compacted.seq or 0) > chain_seq:
        # Compact now replaced the chain and no turn has succeeded since.
        state.chain_id = None
        state.replacement = payload.replacement_input or None
        if payload.input_tokens_after is not None:
            state.input_tokens = payload.input_tokens_after
    return state
