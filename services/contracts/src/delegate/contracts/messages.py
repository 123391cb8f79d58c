"""Bus messages other than ledger events: agent input, live notices, queries and replies."""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .events import MAX_SEQ, RUN_ID_PATTERN, Channel, Event, ThoughtflowArtifact
from .ids import new_id, utcnow


class BusModel(BaseModel):
    # defer_build: built when first used, not at import: a start uses a few of these (see
    # events.Payload).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ErrorInfo(BusModel):
    code: str  # stable, machine-readable: bad_cursor, not_found, busy, ...
    message: str


class Reply(BusModel):
    """Base of every request/reply answer: a domain error travels as data."""

    error: ErrorInfo | None = None


class Ping(BusModel):
    pass


class Pong(Reply):
    service: str
    instance: str = ""
    ready: bool = True
    detail: str = ""
    # Why the service will not start until its operator acts (the NATS server lacks a feature
    # it needs); empty when it is not refusing. Waiting does not make such a service ready.
    refusal: str = ""
    # Counters a service reports since it started (the ledger: events refused by the fence rules).
    counts: dict[str, int] = Field(default_factory=dict)


# ---- agent input (durable, one at a time, stream AGENT) -----------------------------


class UserInput(BusModel):
    """A person said something on some channel. ``id`` becomes the user message's event id."""

    type: Literal["message"] = "message"
    id: str = Field(default_factory=new_id)
    ts: datetime = Field(default_factory=utcnow)
    channel: Channel = "text"
    text: str = Field(min_length=1, max_length=64_000)
    client_msg_id: str | None = Field(default=None, max_length=200)
    meta: dict[str, Any] = Field(default_factory=dict)
    # Edit-and-resend: the id of the (last) user message this one supersedes.
    supersedes: str | None = Field(default=None, max_length=64)


class RegenerateInput(BusModel):
    """Answer the user message ``turn_id`` again: a new attempt on that turn, queued like input."""

    type: Literal["regenerate"] = "regenerate"
    id: str = Field(default_factory=new_id)
    ts: datetime = Field(default_factory=utcnow)
    turn_id: str = Field(min_length=1, max_length=64)


class ActivationInput(BusModel):
    """The attention broker woke the agent with a claimed batch of inner signals."""

    type: Literal["activation"] = "activation"
    id: str = Field(default_factory=new_id)
    ts: datetime = Field(default_factory=utcnow)
    signal_ids: list[str] = Field(default_factory=list)
    # Each claimed signal as raised (a contracts.signals model dumped to JSON), in claim order.
    signals: list[dict[str, Any]] = Field(default_factory=list)
    urgent: bool = False  # some signal in the batch is urgent: a call is allowed (if set up)
    # Where the answer should go when a signal asked (sms, email, call); None: the owner's last channel.
    reply_via: Literal["sms", "email", "call"] | None = None


class IdleCheckInput(BusModel):
    """The inner plane asks for the idle checkpoint; the agent does it only if still idle."""

    type: Literal["idle_check"] = "idle_check"
    id: str = Field(default_factory=new_id)
    ts: datetime = Field(default_factory=utcnow)
    span_id: str
    last_activity_seq: int


AnyAgentInput = UserInput | RegenerateInput | ActivationInput | IdleCheckInput
AgentInput = Annotated[AnyAgentInput, Field(discriminator="type")]
AGENT_INPUT_ADAPTER: TypeAdapter[AnyAgentInput] = TypeAdapter(AgentInput, config=ConfigDict(defer_build=True))


# ---- agent live state and commands ---------------------------------------------------


class Delta(BusModel):
    turn_id: str  # the user input (or activation) id this answer belongs to
    attempt: int = 1
    index: int  # position of this delta within the attempt, from 0
    text: str


class Usage(BusModel):
    input_tokens: int = 0
    compact_threshold: int
    percent: float = 0.0


class CapsuleState(BusModel):
    active: bool = False
    updated_at: datetime | None = None


class AgentState(Reply):
    """The ``/api/state`` body; also pushed on ``agent.live.state`` whenever it changes."""

    conversation_id: str | None = None
    span_id: str | None = None
    busy: bool = False
    compacting: bool = False
    usage: Usage
    capsule: CapsuleState = Field(default_factory=CapsuleState)
    last_compacted_at: datetime | None = None
    offline_model: bool = False  # the offline stand-in answers, not OpenAI


class AgentCommand(BusModel):
    id: str = Field(default_factory=new_id)


class TurnCommand(BusModel):
    """A command about one turn (``agent.cmd.stop``): ``turn_id`` is the user message's event id."""

    id: str = Field(default_factory=new_id)
    turn_id: str = Field(min_length=1, max_length=64)


class CommandReply(Reply):
    ok: bool = True


# ---- ledger queries --------------------------------------------------------------------


class PageRequest(BusModel):
    limit: int | None = Field(default=None, ge=1, le=5000)
    before: str | None = None  # opaque cursor


class PageReply(Reply):
    events: list[Event] = Field(default_factory=list)  # oldest first
    cursor: str | None = None  # cursor of the oldest returned event; None when nothing is older


class QueryRequest(BusModel):
    """Events by commit order, optionally narrowed. Used for live resync and ranges."""

    after_seq: int = Field(default=0, ge=0, le=MAX_SEQ)
    through_seq: int | None = Field(default=None, ge=0, le=MAX_SEQ)
    conversation_id: str | None = None
    span_id: str | None = None
    kinds: list[str] | None = None
    limit: int = Field(default=500, ge=1, le=5000)


class QueryReply(Reply):
    events: list[Event] = Field(default_factory=list)  # by seq ascending
    last_seq: int = 0  # the ledger's newest committed seq when answering
    more: bool = False


class GetRequest(BusModel):
    id: str | None = None
    client_msg_id: str | None = None


class GetReply(Reply):
    event: Event | None = None


class ArtifactRequest(BusModel):
    """The newest thoughtflow picture of a run (a task or an activation), from ``thoughtflow_artifacts``."""

    run_id: str = Field(pattern=RUN_ID_PATTERN)


class ArtifactReply(Reply):
    artifact: ThoughtflowArtifact | None = None  # None: no picture of that run (yet)
    event_id: str | None = None  # the thoughtflow.artifact event that recorded it
    seq: int | None = None
    created_at: datetime | None = None  # that event's ts


class ResumeRequest(BusModel):
    turn_limit: int = Field(default=20, ge=0, le=500)


class TermInfo(BusModel):
    """One row of the ledger's ``terms`` table: a leadership term that started and has not ended."""

    id: str
    type: str
    holder: str | None = None
    started_at: datetime
    started_seq: int
    supersedes: str | None = None


class ResumeState(Reply):
    """What a restarting agent needs: the newest open conversation and its context anchors."""

    conversation_id: str | None = None
    open_span: Event | None = None  # its span.opened event, if the span is still open
    recent_turns: list[Event] = Field(default_factory=list)  # message events, oldest first
    capsule: Event | None = None  # newest completed context.capsule of the conversation
    last_response_id: str | None = None  # newest assistant message's response id (the chain)
    last_checkpoint: Event | None = None
    last_compacted: Event | None = None
    last_usage: Event | None = None
    last_seq: int = 0
    # Newest assistant message event of the conversation, any channel. Its seq orders the chain
    # against a later manual compaction; a voice-channel answer there means voice cleared the chain.
    last_assistant: Event | None = None
    # The newest agent term still open, whatever the conversation: a new lease holder finds
    # here the term of a predecessor that died without ending it (and names it as superseded).
    agent_term: TermInfo | None = None
    # The highest fencing token the ledger has accepted per singleton: a new term's token must
    # exceed it, even when the lease bucket was recreated and its revisions started over.
    fence_marks: dict[str, int] = Field(default_factory=dict)


# ---- inner plane -------------------------------------------------------------------------


class LiveNotice(BusModel):
    """Live-only observability, never stored: e.g. capsule refresh started/failed."""

    id: str = Field(default_factory=new_id)
    ts: datetime = Field(default_factory=utcnow)
    kind: str
    status: str
    conversation_id: str | None = None
    detail: str = ""


# ---- tools -------------------------------------------------------------------------------


class ToolSpec(BusModel):
    name: str
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    parameters: dict[str, Any] = Field(default_factory=dict)  # JSON schema
    timeout_s: float = 30.0


class ToolListRequest(BusModel):
    agent: str = "base"


class RefusedTool(BusModel):
    """A tool a server offers that is not offered on: OpenAI would refuse it (and with it every
    request it is in). ``name`` is the name it would have had, ``tool`` the server's own."""

    name: str
    source: str  # "mcp:<server>"
    tool: str
    reason: str


class ToolListReply(Reply):
    tools: list[ToolSpec] = Field(default_factory=list)
    refused: list[RefusedTool] = Field(default_factory=list)  # every agent's: a server's, not a policy's


class ToolCallRequest(BusModel):
    agent: str = "base"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str = Field(default_factory=new_id)
    conversation_id: str | None = None
    span_id: str | None = None
    channel: Channel = "text"
    parent_id: str | None = None


class ToolCallReply(Reply):
    ok: bool
    output: str
    error_code: str | None = None


# ---- dead letters --------------------------------------------------------------------------


class DeadLetter(BusModel):
    id: str = Field(default_factory=new_id)
    ts: datetime = Field(default_factory=utcnow)
    subject: str
    consumer: str
    reason: str
    data: str  # the original bytes, decoded leniently and cut to a bounded size
    size: int
