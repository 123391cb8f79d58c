"""The ledger event: one envelope, one payload model per kind.

An event is immutable once made; the ledger only adds ``seq`` (its commit
sequence). Timeline order is ``(ts, id)``; live fan-out order is ``seq``.

One concept at this length: the catalogue of payload models, one per kind, in one place so a
kind's wire shape is found by its name; the typed union over them is ``ledger_events``.
"""

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from .ids import format_ts, new_id, utcnow

Channel = Literal["text", "browser_voice", "phone", "sms", "email", "inner"]
Role = Literal["user", "assistant"]
SpanType = Literal["interaction", "voice", "phone", "activation", "task"]
# A leadership term: the time one process holds a singleton (the agent lease now, voice's later).
TermType = Literal["agent", "voice", "phone", "tasks"]
TermEndReason = Literal["shutdown", "superseded", "lost"]
# The singletons whose events are fenced (see ``Fence``).
Singleton = Literal["agent", "voice", "tasks"]
# Commit sequences and fencing tokens are signed 64-bit integers in both ledger backends.
MAX_SEQ = 2**63 - 1

# One serialized event may not exceed this; bigger payloads are dead-lettered.
MAX_EVENT_BYTES = 256 * 1024


class Payload(BaseModel):
    """Base of every kind's payload. ``KIND`` names the event kind it belongs to."""

    # defer_build: a kind's validator is built when an event of it is first checked, not when
    # the contracts are imported: a start checks a few of the ~60 kinds (every process imports
    # them all; building each at import was ~0.08 s of every start's CPU).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    KIND: ClassVar[str]
    # Optional fields left off the wire while None: rare marks that would otherwise add their
    # nulls to every event of the kind (and to every stored row, which keeps what was sent).
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()


class Imported(BaseModel):
    """Where an imported event came from (``POST /api/import``): never produced by a model turn."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    import_id: str = Field(min_length=1, max_length=64)
    line: int | None = Field(default=None, ge=1)  # the line of the NDJSON body (or the item of an export)
    ref: str | None = Field(default=None, max_length=500)  # the source's own id of the line (e.g. a dia_id)
    speaker: str | None = Field(default=None, max_length=200)  # a display name, indexed for search
    conversation: str | None = Field(default=None, max_length=500)  # the source's conversation key


class ConversationOpened(Payload):
    KIND: ClassVar[str] = "conversation.opened"
    reason: str = "first_input"  # "import": a past conversation brought in by an import
    imported: Imported | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"imported"})


class ConversationEnded(Payload):
    KIND: ClassVar[str] = "conversation.ended"
    reason: str = "user"


class SpanOpened(Payload):
    KIND: ClassVar[str] = "span.opened"
    type: SpanType
    # An activation span opens with the whole claimed batch it answers.
    activation_id: str | None = None
    signals: list[dict[str, Any]] | None = None
    imported: Imported | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"activation_id", "signals", "imported"})


class SpanClosed(Payload):
    KIND: ClassVar[str] = "span.closed"
    reason: Literal["idle", "conversation_ended", "completed", "superseded", "imported"] = "idle"
    summary: str | None = None


class Checkpoint(Payload):
    """Names the exact range of events an idle checkpoint covers."""

    KIND: ClassVar[str] = "checkpoint"
    after_seq: int  # exclusive: the previous checkpoint's through_seq (0 if none)
    through_seq: int  # inclusive
    first_event_id: str | None = None
    last_event_id: str | None = None
    turn_count: int = 0
    turn_ids: list[str] = Field(default_factory=list)


class Message(Payload):
    KIND: ClassVar[str] = "message"
    text: str
    client_msg_id: str | None = None
    response_id: str | None = None  # on assistant messages: the Responses id that produced it
    meta: dict[str, Any] = Field(default_factory=dict)  # channel details (sms sid, email headers)
    # Chat controls (all optional, absent on ordinary messages; history is never rewritten):
    # an assistant answer cut short by Stop keeps its partial text and says so;
    stopped: bool | None = None
    # a regenerated answer is attempt n (1-based) of its turn and names the answer it replaces;
    attempt: int | None = Field(default=None, ge=1)
    regenerates: str | None = Field(default=None, max_length=64)
    # an edited user message names the user message it supersedes (answered like any message).
    supersedes: str | None = Field(default=None, max_length=64)
    # Brought in by an import (original ts kept; no model turn ran for it).
    imported: Imported | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {"stopped", "attempt", "regenerates", "supersedes", "imported"}
    )


class TurnFailed(Payload):
    """A turn that could not be answered; shown to the user, never a lost message."""

    KIND: ClassVar[str] = "turn.failed"
    code: str
    message: str
    retryable: bool = False


class ToolCall(Payload):
    KIND: ClassVar[str] = "tool.call"
    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    agent: str = "base"


class ToolResult(Payload):
    KIND: ClassVar[str] = "tool.result"
    call_id: str
    name: str
    ok: bool
    output: str
    error_code: str | None = None  # denied, invalid_arguments, timeout, failed, unknown_tool


class MemoryRetrieved(Payload):
    """What memory was given to one model request, and why (``parent_id``: the turn or activation).

    ``items`` are ``contracts.memory.MemoryResult`` dicts (kind, id, text, score, why, event_ids).
    ``late``: the search finished after the request had started; such results are offered to
    the next request of the same span only when they are novel (``surfaced``), else dropped
    with ``reason`` ``not_novel``.
    """

    KIND: ClassVar[str] = "memory.retrieved"
    query: str = ""
    items: list[dict[str, Any]] = Field(default_factory=list)
    purpose: Literal["turn", "voice", "activation"] | None = None
    tokens: int | None = Field(default=None, ge=0)  # the estimate of what was given
    budget_tokens: int | None = Field(default=None, ge=0)  # MEMORY_CONTEXT_TOKENS
    late: bool | None = None
    surfaced: bool | None = None
    reason: str | None = Field(default=None, max_length=200)
    dropped: list[dict[str, Any]] | None = None  # {id, why}: left out (duplicate of context, budget)
    elapsed_ms: float | None = Field(default=None, ge=0)
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {"purpose", "tokens", "budget_tokens", "late", "surfaced", "reason", "dropped", "elapsed_ms"}
    )


class MemoryExtracted(Payload):
    """One checkpoint's episode (the episodic layer) and the facts the model read in it.

    The episode is the summary of exactly the checkpoint's range (``after_seq`` exclusive,
    ``through_seq`` inclusive, ``turn_ids``), so it can always be opened back into its turns.
    ``items`` are the facts nominated at the checkpoint; the memory service reconciles them
    with what per-turn extraction already stored.
    """

    KIND: ClassVar[str] = "memory.extracted"
    checkpoint_id: str | None = None
    items: list[dict[str, Any]] = Field(default_factory=list)
    summary: str | None = Field(default=None, max_length=8000)
    decisions: list[str] | None = None
    open_loops: list[str] | None = None
    after_seq: int | None = Field(default=None, ge=0)
    through_seq: int | None = Field(default=None, ge=0)
    turn_ids: list[str] | None = None
    # per-turn extraction: the people and commitments the model nominated (the same call)
    people: list[dict[str, Any]] | None = None
    commitments: list[dict[str, Any]] | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {"summary", "decisions", "open_loops", "after_seq", "through_seq", "turn_ids", "people", "commitments"}
    )


# ---- semantic memory: every change is one of these events, the index is their projection ----

# "adaptation": how the owner wants to be addressed or answered; always shapes the instructions.
FactType = Literal["fact", "preference", "commitment", "adaptation"]
FactOrigin = Literal["turn", "checkpoint", "owner", "tool"]


class MemoryFactAdded(Payload):
    """A new semantic fact, citing the ledger events it came from.

    ``supersedes``: the facts it retires (a correction). The model only nominates them; the
    memory service's code decides, and a retired fact's ``invalid_at`` is this one's
    ``valid_at`` (bi-temporal: what was true, and since when it no longer is).
    """

    KIND: ClassVar[str] = "memory.fact.added"
    fact_id: str = Field(min_length=1, max_length=64)
    type: FactType = "fact"
    text: str = Field(min_length=1, max_length=2000)
    valid_at: datetime
    event_ids: list[str] = Field(default_factory=list, max_length=200)
    origin: FactOrigin = "turn"
    supersedes: list[str] = Field(default_factory=list, max_length=20)
    subject: str | None = Field(default=None, max_length=200)  # what it is about, as the model named it
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"subject"})


class MemoryFactCited(Payload):
    """The same fact stated again (an exact or near duplicate): merged, its citations added."""

    KIND: ClassVar[str] = "memory.fact.cited"
    fact_id: str = Field(min_length=1, max_length=64)
    event_ids: list[str] = Field(min_length=1, max_length=200)
    text: str = Field(default="", max_length=2000)  # the duplicate's own wording
    similarity: float = Field(default=1.0, ge=0, le=1)


class MemoryFactEdited(Payload):
    """The owner (or the assistant on their word) rewrote a fact; its citations stay."""

    KIND: ClassVar[str] = "memory.fact.edited"
    fact_id: str = Field(min_length=1, max_length=64)
    text: str = Field(min_length=1, max_length=2000)
    type: FactType | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"type"})


class MemoryFactForgotten(Payload):
    """Forget a fact: it (and the turns it was read from) is never retrieved again."""

    KIND: ClassVar[str] = "memory.fact.forgotten"
    fact_id: str = Field(min_length=1, max_length=64)
    reason: str = Field(default="", max_length=500)


# ---- people and commitments (issue #30): the model nominates, the memory service links ----

PersonDate = dict[str, str]  # {"label": "birthday", "date": "MM-DD" or "YYYY-MM-DD"}


class PersonAdded(Payload):
    """A person the owner's turns mention, first seen (identity resolved by code: name, alias,
    phone or email match an existing person, or this is a new one)."""

    KIND: ClassVar[str] = "person.added"
    person_id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=200)
    aliases: list[str] = Field(default_factory=list, max_length=20)
    relation: str | None = Field(default=None, max_length=200)
    phones: list[str] = Field(default_factory=list, max_length=20)
    emails: list[str] = Field(default_factory=list, max_length=20)
    dates: list[PersonDate] = Field(default_factory=list, max_length=20)
    event_ids: list[str] = Field(default_factory=list, max_length=200)
    origin: FactOrigin = "turn"


class PersonUpdated(Payload):
    """New names, contact points or dates for a known person (merged into what is known), or the
    owner's edit (``replace``: the lists given are the person's whole lists)."""

    KIND: ClassVar[str] = "person.updated"
    person_id: str = Field(min_length=1, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=200)
    aliases: list[str] = Field(default_factory=list, max_length=20)
    relation: str | None = Field(default=None, max_length=200)
    phones: list[str] = Field(default_factory=list, max_length=20)
    emails: list[str] = Field(default_factory=list, max_length=20)
    dates: list[PersonDate] = Field(default_factory=list, max_length=20)
    replace: bool = False
    event_ids: list[str] = Field(default_factory=list, max_length=200)


class PersonImported(Payload):
    """A contact read from the owner's address book (CardDAV): its whole current card. The memory
    service resolves who it is (the same contact again, else a phone or email match, else a new
    person) and replaces what the previous import of this contact said with this one; what turns
    and the owner's edits added stays."""

    KIND: ClassVar[str] = "person.imported"
    source: str = Field(min_length=1, max_length=200)  # the address book's URL
    contact_uid: str = Field(min_length=1, max_length=500)  # the vCard's UID
    name: str = Field(min_length=1, max_length=200)
    aliases: list[str] = Field(default_factory=list, max_length=20)
    phones: list[str] = Field(default_factory=list, max_length=20)
    emails: list[str] = Field(default_factory=list, max_length=20)
    dates: list[PersonDate] = Field(default_factory=list, max_length=20)


class PersonUnlisted(Payload):
    """A contact gone from the owner's address book (its card deleted on the server). Its person
    stays, with what turns and the owner's edits said; what the card said that no other listed
    card says (phones, emails, dates) no longer belongs to them, so it identifies them no more."""

    KIND: ClassVar[str] = "person.unlisted"
    source: str = Field(min_length=1, max_length=200)  # the address book's URL
    contact_uid: str = Field(min_length=1, max_length=500)  # the vCard's UID


class ContactsSynced(Payload):
    """A contacts sync pass that published something, after its ``person.imported`` and
    ``person.unlisted`` events: the end of one import (the memory service offers the birthdays
    it brought, together, at this point)."""

    KIND: ClassVar[str] = "contacts.synced"
    imported: int = Field(default=0, ge=0)
    unlisted: int = Field(default=0, ge=0)
    birthdays: int = Field(default=0, ge=0)  # cards of this pass that carry one


class PersonMentioned(Payload):
    """A turn mentions a person: the facts read from it are linked to them (citations kept)."""

    KIND: ClassVar[str] = "person.mentioned"
    person_id: str = Field(min_length=1, max_length=64)
    fact_ids: list[str] = Field(default_factory=list, max_length=50)
    event_ids: list[str] = Field(default_factory=list, max_length=200)


class PersonForgotten(Payload):
    """Forget a person: their facts are unlinked and forgotten, their turns never retrieved again,
    and the names never make a person again. The ledger keeps the history."""

    KIND: ClassVar[str] = "person.forgotten"
    person_id: str = Field(min_length=1, max_length=64)
    reason: str = Field(default="", max_length=500)


CommitmentBy = Literal["owner", "assistant"]


class CommitmentMade(Payload):
    """A promise made in a turn: by the owner or by the assistant, to someone, maybe by a time."""

    KIND: ClassVar[str] = "commitment.made"
    commitment_id: str = Field(min_length=1, max_length=64)
    by: CommitmentBy
    what: str = Field(min_length=1, max_length=2000)
    to: str | None = Field(default=None, max_length=200)
    person_id: str | None = Field(default=None, max_length=64)
    due: datetime | None = None  # resolved in the owner's timezone, stored in UTC
    due_text: str | None = Field(default=None, max_length=200)  # as said: "on Friday"
    event_ids: list[str] = Field(default_factory=list, max_length=200)


class CommitmentKept(Payload):
    KIND: ClassVar[str] = "commitment.kept"
    commitment_id: str = Field(min_length=1, max_length=64)
    reason: str = Field(default="", max_length=500)
    event_ids: list[str] = Field(default_factory=list, max_length=200)


class CommitmentDropped(CommitmentKept):
    KIND: ClassVar[str] = "commitment.dropped"


class CommitmentDue(Payload):
    """An open commitment reached its due time (the inner plane's timer; its signal follows)."""

    KIND: ClassVar[str] = "commitment.due"
    commitment_id: str = Field(min_length=1, max_length=64)
    due: datetime


# ---- imports -----------------------------------------------------------------------------


class ImportLineError(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    line: int = Field(ge=0)  # 1-based line of the NDJSON body (0: the body as a whole)
    message: str = Field(max_length=500)


class ImportStarted(Payload):
    KIND: ClassVar[str] = "import.started"
    import_id: str = Field(min_length=1, max_length=64)
    format: Literal["ndjson", "chatgpt"]
    lines: int = Field(ge=0)
    conversations: int = Field(ge=0)
    events: int = Field(ge=0)  # how many events the import will write


class ImportFinished(Payload):
    KIND: ClassVar[str] = "import.finished"
    import_id: str = Field(min_length=1, max_length=64)
    status: Literal["done", "failed"]
    events: int = Field(ge=0)  # written
    conversations: int = Field(ge=0)
    errors: list[ImportLineError] = Field(default_factory=list, max_length=100)
    message: str = Field(default="", max_length=2000)


class ContextUsage(Payload):
    KIND: ClassVar[str] = "context.usage"
    response_id: str | None = None
    input_tokens: int
    output_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    compact_threshold: int | None = None


UsagePurpose = Literal[
    "owner_turn", "activation", "memory_extraction", "capsule", "compaction", "web_search", "task_step", "voice"
]


class ModelUsage(Payload):
    """One OpenAI call's billed tokens (one event per call, failed calls that were billed too).

    The event's channel is its cause's. ``cost_usd`` is priced when the event is written (so later
    price changes never rewrite history) and is None for a model the price table lacks ("unpriced").
    """

    KIND: ClassVar[str] = "model.usage"
    model: str = Field(max_length=200)
    purpose: UsagePurpose
    cause_id: str | None = Field(default=None, max_length=200)  # the span, turn, activation, task or call id
    input_tokens: int = Field(default=0, ge=0)  # all input tokens, cached and audio ones included
    cached_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)  # all output tokens, audio ones included
    audio_input_tokens: int = Field(default=0, ge=0)
    audio_output_tokens: int = Field(default=0, ge=0)
    web_search_calls: int = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    response_id: str | None = Field(default=None, max_length=200)
    failed: bool | None = None  # the call failed after tokens were billed
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"response_id", "failed"})


class ContextCompacted(Payload):
    KIND: ClassVar[str] = "context.compacted"
    trigger: Literal["auto", "manual"]
    response_id: str | None = None
    input_tokens_before: int | None = None
    input_tokens_after: int | None = None
    # Manual compaction: the compact endpoint's output, the next turn's input prefix until a
    # turn succeeds (kept here so a restart in between still uses it). None when too big to store.
    replacement_input: list[dict[str, Any]] | None = None


class ContextCapsule(Payload):
    """A completed capsule refresh. Started/failed are live notices only."""

    KIND: ClassVar[str] = "context.capsule"
    text: str
    through_seq: int | None = None  # the newest event the capsule accounts for
    through_event_id: str | None = None
    reason: str = "threshold"


class InnerSignal(Payload):
    """A signal the broker took in (``id`` = the signal's id): queued between spans.

    ``signal`` is the whole typed signal as it was raised (``contracts.signals``). Events
    written before signals were typed carry ``type``/``data``/``priority`` instead.
    """

    KIND: ClassVar[str] = "inner.signal"
    source: str
    signal_kind: str = ""  # the signal's ``kind`` (reminder.due, email.received, script, …)
    urgency: Literal["low", "normal", "urgent"] = "normal"
    dedup_key: str | None = None
    expires_at: datetime | None = None
    signal: dict[str, Any] = Field(default_factory=dict)
    # the untyped shape of the first broker
    type: str | None = None
    data: dict[str, Any] | None = None
    priority: int | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"dedup_key", "expires_at", "type", "data", "priority"})


DecisionKind = Literal["act", "hold", "drop", "coalesce"]


class InnerDecision(Payload):
    """What the attention broker decided about one signal, and why (``parent_id``: the signal).

    ``act``: it leads the batch that wakes the agent (``activation_id``, with ``signal_ids``);
    ``coalesce``: it rides along in that batch; ``hold``: not now (``until``, or None: until
    the owner's turn ends); ``drop``: never (duplicate, expired, stale, skipped late).
    """

    KIND: ClassVar[str] = "inner.decision"
    decision: DecisionKind
    reason: str = Field(max_length=100)  # a stable code: duplicate, expired, quiet_hours, budget, …
    detail: str = Field(default="", max_length=2000)  # the same in words, for the timeline
    until: datetime | None = None
    activation_id: str | None = None
    signal_ids: list[str] = Field(default_factory=list)
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"until", "activation_id"})


class ActivationOutcome(Payload):
    KIND: ClassVar[str] = "activation.outcome"
    # nothing_to_do: the assistant chose to say nothing (not an error); ignored: older events
    status: Literal["completed", "failed", "nothing_to_do", "ignored"]
    summary: str = ""
    reason: str = Field(default="", max_length=2000)
    reply_channel: Channel | None = None  # where the answer went (None: nowhere, or the timeline only)
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"reply_channel"})


class BudgetNotice(Payload):
    """The owner was told a spend line was reached (once per line and period: the id is derived
    from them). ``outbox_id``: the SMS or email that carried it; None: the timeline only."""

    KIND: ClassVar[str] = "budget.notice"
    reason: Literal["budget_usd", "runaway"]
    scope: str = Field(max_length=100)  # day, month, day:<purpose>, runaway
    period: str = Field(max_length=100)
    detail: str = Field(max_length=2000)
    spent_day_usd: float = Field(ge=0)
    spent_month_usd: float = Field(ge=0)
    daily_limit_usd: float | None = None
    monthly_limit_usd: float | None = None
    until: datetime
    channel: Literal["sms", "email", "timeline"] = "timeline"
    outbox_id: str | None = Field(default=None, max_length=48)


class ReminderDefined(Payload):
    """``reminder.set`` (a new reminder) and ``reminder.changed`` (a new revision of one)."""

    KIND: ClassVar[str] = "reminder.set"
    reminder_id: str = Field(min_length=1, max_length=64)
    revision: int = Field(ge=1)
    spec: dict[str, Any]  # a contracts.reminders.ReminderSpec


class ReminderChanged(ReminderDefined):
    KIND: ClassVar[str] = "reminder.changed"


class ReminderCancelled(Payload):
    KIND: ClassVar[str] = "reminder.cancelled"
    reminder_id: str = Field(min_length=1, max_length=64)
    reason: str = Field(default="", max_length=500)


class TermStarted(Payload):
    """A process took a singleton (the agent lease): who holds it from now on.

    ``supersedes`` names the previous holder's term when that one never said it ended
    (killed, partitioned away): the ledger closes it as ``superseded``.
    """

    KIND: ClassVar[str] = "term.started"
    term_id: str = Field(min_length=1, max_length=64)
    type: TermType
    holder: str = Field(max_length=255)  # the process instance name (INSTANCE_NAME, else the host name)
    supersedes: str | None = Field(default=None, max_length=64)


class TermEnded(Payload):
    """A holder gave its term up: ``shutdown`` (it released the lease), ``lost`` (it could no
    longer renew it). ``superseded`` is what the ledger's terms table records when a
    successor's ``term.started`` names the term instead."""

    KIND: ClassVar[str] = "term.ended"
    term_id: str = Field(min_length=1, max_length=64)
    reason: TermEndReason


class InboundRefused(Payload):
    """Someone other than the owner (or mail claiming to be the owner that failed
    authentication) wrote in. Shown to the owner; never answered, never given to the model."""

    KIND: ClassVar[str] = "inbound.refused"
    sender: str = Field(max_length=998)  # the number or address it came from (as claimed)
    reason: Literal["not_owner", "unauthenticated", "unreadable"]
    detail: str = Field(default="", max_length=2000)
    external_id: str | None = Field(default=None, max_length=998)  # MessageSid / Message-ID
    subject: str | None = Field(default=None, max_length=998)
    preview: str = Field(default="", max_length=500)
    # who the sender is, when memory knows the number or address (shown, never obeyed: identity
    # never widens access); absent when nobody matches or memory did not answer in time
    person_id: str | None = Field(default=None, max_length=64)
    person_name: str | None = Field(default=None, max_length=200)
    person_relation: str | None = Field(default=None, max_length=200)


DeliveryStatus = Literal[
    # what the sender records
    "sending", "sent", "failed", "unknown",
    # what Twilio's status callbacks report after "sent" (its own "sending" maps onto ours)
    "queued", "accepted", "scheduled", "delivered", "undelivered", "read",
    "partially_delivered", "canceled", "receiving", "received",
]


class Delivery(Payload):
    """A step in delivering one outbound SMS or email (``parent_id``: the event it delivers).

    ``sending`` is written before each attempt, so a sender restarted in between finds it and
    verifies instead of sending again; ``sent``/``failed``/``unknown`` end the sender's part;
    Twilio's status callbacks add later states. The client shows the latest on the message.
    """

    KIND: ClassVar[str] = "delivery"
    outbox_id: str = Field(max_length=48)
    channel: Literal["sms", "email"]
    status: DeliveryStatus
    attempt: int | None = Field(default=None, ge=1)
    external_ids: list[str] = Field(default_factory=list)  # Twilio SIDs of the parts, or the Message-ID
    parts: int | None = Field(default=None, ge=1)
    error: str | None = Field(default=None, max_length=2000)
    error_code: str | None = Field(default=None, max_length=64)
    final: bool = False  # no further attempt will be made by the sender
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"attempt", "parts", "error", "error_code"})


class MailProgress(Payload):
    """The pollers processed mailbox message ``uid``: their durable IMAP progress."""

    KIND: ClassVar[str] = "mail.progress"
    mailbox: str = Field(max_length=500)
    uidvalidity: int = Field(ge=0)
    uid: int = Field(ge=0)
    message_id: str | None = Field(default=None, max_length=998)
    # "baseline": the first start with IMAP_START=new took the mailbox as it was (uid = its newest)
    outcome: Literal["input", "refused", "duplicate", "unreadable", "baseline"]
    event_id: str | None = None  # the user message or inbound.refused event it became


class AttachmentStored(Payload):
    """An MMS media item or email attachment, downloaded (or not) into the runtime dir."""

    KIND: ClassVar[str] = "attachment.stored"
    name: str = Field(max_length=500)
    content_type: str = Field(max_length=255)
    size: int | None = Field(default=None, ge=0)
    path: str | None = Field(default=None, max_length=1000)  # relative to RUNTIME_DATA_DIR
    url: str | None = Field(default=None, max_length=2048)
    stored: bool
    reason: str | None = Field(default=None, max_length=500)  # why not stored (too big, failed)


VoiceSessionType = Literal["phone", "voice"]


class SessionStarted(Payload):
    """A phone call or browser voice session began (its span's first event after span.opened)."""

    KIND: ClassVar[str] = "session.started"
    type: VoiceSessionType
    session_id: str = Field(max_length=64)
    direction: Literal["inbound", "outbound"] = "inbound"
    caller: str | None = Field(default=None, max_length=64)
    call_sid: str | None = Field(default=None, max_length=64)
    preset: str | None = Field(default=None, max_length=100)
    model: str | None = Field(default=None, max_length=100)


SessionEndReason = Literal[
    "hangup", "caller_hangup", "realtime_lost", "stream_lost", "voice_lost", "unclaimed", "error", "superseded",
]


class SessionEnded(Payload):
    KIND: ClassVar[str] = "session.ended"
    type: VoiceSessionType
    session_id: str = Field(max_length=64)
    reason: SessionEndReason
    duration_s: float | None = Field(default=None, ge=0)
    detail: str = Field(default="", max_length=2000)


class CallPlaced(Payload):
    """We phoned the owner (``call_owner``); the id ``call:<CallSid>`` finds it again, with the
    message to leave should a machine answer."""

    KIND: ClassVar[str] = "call.placed"
    session_id: str = Field(max_length=64)
    call_sid: str = Field(max_length=64)
    to: str = Field(max_length=64)
    reason: str = Field(default="", max_length=500)
    voicemail: str = Field(max_length=1600)
    ring_timeout_s: int = Field(ge=1)
    machine_detection: str | None = Field(default=None, max_length=32)


class CallVoicemail(Payload):
    """A machine answered a call we placed: the message was left (``spoken``) or the call hung
    up (``hung_up``); ``sms_id`` is the outbox message carrying the same words."""

    KIND: ClassVar[str] = "call.voicemail"
    session_id: str = Field(max_length=64)
    call_sid: str = Field(max_length=64)
    answered_by: str = Field(max_length=32)
    action: Literal["spoken", "hung_up"]
    text: str = Field(max_length=1600)
    sms_id: str | None = Field(default=None, max_length=48)


class VoiceTiming(Payload):
    """How long one spoken answer took to start: read a real call's latency from the ledger."""

    KIND: ClassVar[str] = "voice.timing"
    session_id: str = Field(max_length=64)
    response_id: str | None = Field(default=None, max_length=64)
    speech_stopped_to_first_audio_ms: float | None = Field(default=None, ge=0)
    start_to_first_audio_ms: float | None = Field(default=None, ge=0)  # the greeting, from the stream's start
    interrupted: bool = False


PushStatus = Literal["sending", "sent", "failed", "unknown", "gone"]


class PushDelivery(Payload):
    """A step in sending one Web Push (``parent_id``: the event the owner is told about), kept
    like an SMS's ``delivery``: ``sending`` before the request, then ``sent``, ``failed``,
    ``gone`` (the push service dropped the subscription) or ``unknown`` (the sender died
    between the request and its record: not sent again)."""

    KIND: ClassVar[str] = "push.delivery"
    push_id: str = Field(max_length=48)
    subscription_id: str = Field(max_length=32)
    status: PushStatus
    http_status: int | None = None
    error: str | None = Field(default=None, max_length=2000)
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"http_status", "error"})


class TaskEvent(Payload):
    """Every ``task.*`` kind shares this shape; the kind says what happened."""

    KIND: ClassVar[str] = "task.*"
    task_id: str
    data: dict[str, Any] = Field(default_factory=dict)


# ---- thoughtflow: the picture of how a run went ------------------------------------------

# Under RUNTIME_DATA_DIR: thoughtflow/<run id>/flow.d2 and flow.svg. The gateway serves no file
# from outside this folder, whatever an artifact event names.
THOUGHTFLOW_DIR = "thoughtflow"
# Task ids and activation ids (UUIDs): also the run's folder name, so nothing that could climb out.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
RunType = Literal["task", "activation"]


def _thoughtflow_file(path: str) -> str:
    """A relative POSIX path inside THOUGHTFLOW_DIR: no absolute path, no ``..``, no backslash."""
    parts = path.split("/")
    if (
        len(path) > 500 or "\\" in path or "\x00" in path or parts[0] != THOUGHTFLOW_DIR or len(parts) < 3
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ValueError(f"not a file under {THOUGHTFLOW_DIR}/: {path[:100]!r}")
    return path


ThoughtflowFile = Annotated[str, AfterValidator(_thoughtflow_file)]


class ThoughtflowArtifact(Payload):
    """A run's picture was drawn: where its D2 source and its SVG are (relative to RUNTIME_DATA_DIR).

    A run is a task (``run_id`` = the task id) or an inner-plane activation. Drawn again as the
    run goes on, it gets a new event each time; the ledger keeps the newest per run (the one
    covering the most of it) in ``thoughtflow_artifacts``. When rendering failed, the D2 source
    is kept, ``svg_path`` is None and ``error`` says why.
    """

    KIND: ClassVar[str] = "thoughtflow.artifact"
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    run_type: RunType
    span_id: str | None = Field(default=None, max_length=64)  # the run's span (a task's span id is its id)
    d2_path: ThoughtflowFile
    svg_path: ThoughtflowFile | None = None
    bytes: int = Field(default=0, ge=0)  # the SVG's size
    through_seq: int = Field(default=0, ge=0, le=MAX_SEQ)  # the newest ledger seq the picture covers
    steps: int = Field(default=0, ge=0)  # what happened: steps, tool calls, decisions
    nodes: int = Field(default=0, ge=0)  # what was drawn (a long run's middle is folded into one node)
    rendered_ms: float = Field(default=0.0, ge=0)
    error: str | None = Field(default=None, max_length=2000)
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"svg_path", "error"})


# ---- calendar (the pollers' CalDAV projection; event details stay in it, not in every turn) --

CalendarOp = Literal["create", "move", "cancel"]


class CalendarSynced(Payload):
    """One sync pass that found something: what came in, by count (the details are in the projection)."""

    KIND: ClassVar[str] = "calendar.synced"
    calendars: int = Field(ge=0)
    added: int = Field(default=0, ge=0)
    changed: int = Field(default=0, ge=0)
    removed: int = Field(default=0, ge=0)
    occurrences: int = Field(default=0, ge=0)  # in the window (30 days back, 60 ahead) after the pass
    full: bool = False  # a full listing (the first pass, a lost sync token, a server without sync)
    took_ms: float = Field(default=0.0, ge=0)


class CalendarChanged(Payload):
    """Someone else moved or cancelled an event (never one of Delegate's own writes)."""

    KIND: ClassVar[str] = "calendar.changed"
    uid: str = Field(min_length=1, max_length=500)
    change: Literal["moved", "cancelled"]
    summary: str = Field(default="", max_length=500)
    old_start: datetime | None = None
    new_start: datetime | None = None
    new_end: datetime | None = None
    occurrences: int = Field(default=1, ge=0)  # how many of its occurrences in the window changed


class CalendarProposed(Payload):
    """A calendar write the agent proposed (CALENDAR_CONFIRM_WRITES): nothing is written until the
    owner says yes and the agent confirms this event's id."""

    KIND: ClassVar[str] = "calendar.proposed"
    op: CalendarOp
    call_id: str = Field(min_length=1, max_length=200)  # the proposing tool call: the write's idempotency key
    text: str = Field(max_length=2000)  # what would happen, as the owner is asked
    args: dict[str, Any] = Field(default_factory=dict)  # the write's own arguments


class CalendarWritten(Payload):
    """A calendar write done on the server (its event id derives from the call id: one per call)."""

    KIND: ClassVar[str] = "calendar.written"
    op: CalendarOp
    call_id: str = Field(min_length=1, max_length=200)
    uid: str = Field(min_length=1, max_length=500)
    text: str = Field(default="", max_length=2000)
    proposal_id: str | None = Field(default=None, max_length=64)
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"proposal_id"})


PAYLOADS: dict[str, type[Payload]] = {
    p.KIND: p
    for p in (
        ConversationOpened, ConversationEnded, SpanOpened, SpanClosed, Checkpoint, Message,
        TurnFailed, ToolCall, ToolResult, MemoryRetrieved, MemoryExtracted, ContextUsage,
        ModelUsage, ContextCompacted, ContextCapsule, InnerSignal, InnerDecision, ActivationOutcome, BudgetNotice,
        ReminderDefined,
        ReminderChanged, ReminderCancelled, TermStarted, TermEnded,
        InboundRefused, Delivery, MailProgress, AttachmentStored, SessionStarted, SessionEnded, VoiceTiming,
        CallPlaced, CallVoicemail, PushDelivery,
        MemoryFactAdded, MemoryFactCited, MemoryFactEdited, MemoryFactForgotten, ImportStarted, ImportFinished,
        PersonAdded, PersonUpdated, PersonImported, PersonUnlisted, ContactsSynced, PersonMentioned, PersonForgotten,
        CommitmentMade, CommitmentKept, CommitmentDropped, CommitmentDue,
        ThoughtflowArtifact,
        CalendarSynced, CalendarChanged, CalendarProposed, CalendarWritten,
    )
}


def payload_model(kind: str) -> type[Payload]:
    if kind in PAYLOADS:
        return PAYLOADS[kind]
    if kind.startswith("task.") and len(kind) > len("task."):
        return TaskEvent
    raise ValueError(f"unknown event kind {kind!r}")


P = TypeVar("P", bound=Payload)


class Fence(BaseModel):
    """The fencing token of a singleton's leadership term, carried on every event it publishes.

    ``token`` is the lease's KV revision at acquisition: a later term always has a higher one.
    The ledger remembers the highest token per singleton and refuses events with an older one,
    so a deposed leader that wakes up (paused, partitioned) can never write to the timeline.
    Only the singleton's own identity may publish fenced events (``ledger_append(singleton)``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    singleton: Singleton
    token: int = Field(ge=1, le=MAX_SEQ)


class EventFields(BaseModel):
    """The fields every ledger event has besides its payload and fence, in their JSON order: the
    plain ``Event``'s and the typed ones' (``ledger_events``), declared once."""

    # Built on first use, as the payloads are (``Payload``): so are Fence, Imported and ImportLineError.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str = Field(default_factory=new_id, min_length=1, max_length=64)
    ts: datetime = Field(default_factory=utcnow)
    seq: int | None = None
    conversation_id: str | None = None
    span_id: str | None = None
    kind: str
    channel: Channel = "text"
    role: Role | None = None
    parent_id: str | None = None
    # then ``payload`` and ``fence``, in each subclass: the JSON keys come in this order

    @field_validator("ts")
    @classmethod
    def _aware(cls, ts: datetime) -> datetime:
        if ts.tzinfo is None:
            raise ValueError("ts must carry a timezone")
        return ts

    @field_serializer("ts")
    def _ts_text(self, ts: datetime) -> str:
        return format_ts(ts)


class Event(EventFields):
    """The ledger row, as every service and the browser see it."""

    payload: dict[str, Any] = Field(default_factory=dict)
    fence: Fence | None = None  # set by singletons (the agent); checked and stripped by the ledger

    @model_validator(mode="after")
    def _payload_fits_kind(self) -> "Event":
        # The validator itself, not model_validate: the ledger validates every event it stores.
        payload_model(self.kind).__pydantic_validator__.validate_python(self.payload)
        if self.kind == Message.KIND and self.role is None:
            raise ValueError("a message event needs a role")
        return self

    def typed(self, model: type[P]) -> P:
        """The payload as its model (raises if the kind is another one)."""
        if payload_model(self.kind) is not model:
            raise TypeError(f"{self.kind} event has no {model.__name__} payload")
        return model.model_validate(self.payload)

    def is_kind(self, *models: type[Payload]) -> bool:
        """Whether this event is of one of ``models``' kinds (any ``task.*`` kind for ``TaskEvent``).

        The exact model, not a subclass's: ``ReminderChanged`` is no ``ReminderDefined`` here.
        Dispatch on the model rather than on its kind's spelling, so a renamed or mistyped kind
        is a type error, not a branch that silently never runs.
        """
        try:
            return payload_model(self.kind) in models
        except ValueError:  # built without validation (model_construct) from a kind we do not know
            return False

    def payload_as(self, model: type[P]) -> P | None:
        """The payload as ``model`` when this event is of its kind, else None: typed dispatch,
        ``if (m := event.payload_as(Message)) is not None: m.text``, read by field, not by key."""
        return self.typed(model) if self.is_kind(model) else None

    def with_seq(self, seq: int) -> "Event":
        return self.model_copy(update={"seq": seq})


def make_event(
    payload: Payload,
    *,
    kind: str | None = None,
    conversation_id: str | None,
    span_id: str | None,
    channel: Channel,
    role: Role | None = None,
    parent_id: str | None = None,
    id: str | None = None,
    ts: datetime | None = None,
) -> Event:
    """Build an event from a typed payload; ``kind`` only for ``task.*`` events."""
    event_kind = kind or payload.KIND
    if event_kind.endswith("*"):
        raise ValueError("task events need an explicit kind such as 'task.created'")
    fields: dict[str, Any] = {
        "kind": event_kind,
        "conversation_id": conversation_id,
        "span_id": span_id,
        "channel": channel,
        "role": role,
        "parent_id": parent_id,
        "payload": payload.model_dump(
            mode="json", exclude={f for f in payload.OMIT_WHEN_NONE if getattr(payload, f) is None} or None
        ),
    }
    if id is not None:
        fields["id"] = id
    if ts is not None:
        fields["ts"] = ts
    return Event(**fields)
