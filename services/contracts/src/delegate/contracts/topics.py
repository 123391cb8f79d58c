"""Each subject bound to its model once, so a wrong model on a subject fails type checks."""

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter

from . import subjects as s
from .budget import BudgetReply, BudgetRequest
from .calendar import CalendarCommand, CalendarReply
from .channels import ChannelsState, ChannelsStateRequest, MediaFetch, OutboundEmail, OutboundSms
from .events import Event
from .memory import (
    ImportStatus,
    ImportStatusRequest,
    MemoryFactsCommand,
    MemoryFactsReply,
    MemorySearchReply,
    MemorySearchRequest,
)
from .messages import (
    AgentCommand,
    AgentInput,
    AgentState,
    AnyAgentInput,
    ArtifactReply,
    ArtifactRequest,
    CommandReply,
    DeadLetter,
    Delta,
    GetReply,
    GetRequest,
    LiveNotice,
    PageReply,
    PageRequest,
    Ping,
    Pong,
    QueryReply,
    QueryRequest,
    ResumeRequest,
    ResumeState,
    ToolCallReply,
    ToolCallRequest,
    ToolListReply,
    ToolListRequest,
    TurnCommand,
)
from .people import CommitmentsCommand, CommitmentsReply, PeopleCommand, PeopleReply
from .reminders import ReminderCommand, ReminderFire, ReminderReply
from .signals import AnySignal, SignalIn
from .tasks import TaskControl, TaskCreate, TaskGet, TaskList, TaskListReply, TaskReply
from .usage import UsageReply, UsageRequest
from .voice import (
    AnyVoiceIn,
    AnyVoiceOut,
    AttachReply,
    AttachSession,
    CallAnsweredBy,
    CallOwner,
    CallOwnerReply,
    PrepareReply,
    PrepareSession,
    VoiceIn,
    VoiceOut,
    VoiceState,
    VoiceStateRequest,
)

M = TypeVar("M")
Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)


@dataclass(frozen=True)
class Topic(Generic[M]):
    """A pub/sub or JetStream subject and the one model that travels on it."""

    subject: str
    model: Any  # a model class, or an Annotated discriminated union

    @cached_property
    def adapter(self) -> TypeAdapter[M]:
        return TypeAdapter(self.model)

    def decode(self, data: bytes) -> M:
        return self.adapter.validate_json(data)

    def encode(self, msg: M) -> bytes:
        return self.adapter.dump_json(msg)


@dataclass(frozen=True)
class Query(Generic[Req, Rep]):
    """A request/reply subject with its request and reply models."""

    subject: str
    request: type[Req]
    reply: type[Rep]
    timeout: float = field(default=5.0)


# durable (JetStream)
LEDGER_APPEND_ANY: Topic[Event] = Topic(s.LEDGER_APPEND_ANY, Event)  # the ledger's consumer filter
AGENT_INPUT: Topic[AnyAgentInput] = Topic(s.AGENT_INPUT, AgentInput)
INNER_SIGNAL: Topic[AnySignal] = Topic(s.INNER_SIGNAL, SignalIn)
INNER_FIRE: Topic[ReminderFire] = Topic(s.INNER_FIRE, ReminderFire)
INNER_SCHEDULE_ANY: Topic[ReminderFire] = Topic(s.INNER_SCHEDULE_ANY, ReminderFire)  # what roles grant
SMS_OUT: Topic[OutboundSms] = Topic(s.CHANNELS_SMS_OUT, OutboundSms)
EMAIL_OUT: Topic[OutboundEmail] = Topic(s.CHANNELS_EMAIL_OUT, OutboundEmail)
MEDIA_FETCH: Topic[MediaFetch] = Topic(s.CHANNELS_MEDIA, MediaFetch)
CALL_ANSWERED: Topic[CallAnsweredBy] = Topic(s.CHANNELS_CALL_ANSWERED, CallAnsweredBy)

# live (core NATS)
LEDGER_COMMITTED: Topic[Event] = Topic(s.LEDGER_COMMITTED, Event)
AGENT_DELTA: Topic[Delta] = Topic(s.AGENT_DELTA, Delta)
AGENT_STATE: Topic[AgentState] = Topic(s.AGENT_STATE, AgentState)
INNER_NOTICE: Topic[LiveNotice] = Topic(s.INNER_NOTICE, LiveNotice)
VOICE_STATE: Topic[VoiceState] = Topic(s.VOICE_STATE, VoiceState)
# Per-session audio relays; the ``*`` topics are what the roles table grants.
VOICE_IN_ANY: Topic[AnyVoiceIn] = Topic(s.VOICE_IN_ANY, VoiceIn)
VOICE_OUT_ANY: Topic[AnyVoiceOut] = Topic(s.VOICE_OUT_ANY, VoiceOut)

# One declaration a line below: a table alike by design (subject, request, reply, timeout), not repeated logic.
# request/reply
LEDGER_PAGE = Query(s.LEDGER_PAGE, PageRequest, PageReply)
LEDGER_QUERY = Query(s.LEDGER_QUERY, QueryRequest, QueryReply)
LEDGER_GET = Query(s.LEDGER_GET, GetRequest, GetReply)
LEDGER_RESUME = Query(s.LEDGER_RESUME, ResumeRequest, ResumeState)
LEDGER_ARTIFACT = Query(s.LEDGER_ARTIFACT, ArtifactRequest, ArtifactReply)
LEDGER_USAGE = Query(s.LEDGER_USAGE, UsageRequest, UsageReply)
AGENT_STATE_GET = Query(s.AGENT_STATE_GET, AgentCommand, AgentState)
AGENT_COMPACT = Query(s.AGENT_COMPACT, AgentCommand, CommandReply, timeout=120.0)
AGENT_END = Query(s.AGENT_END, AgentCommand, CommandReply, timeout=120.0)
AGENT_STOP = Query(s.AGENT_STOP, TurnCommand, CommandReply)
POLLERS_STATE = Query(s.POLLERS_STATE, ChannelsStateRequest, ChannelsState, timeout=2.0)
# a write reaches the CalDAV server (and checks it first after a crash): give it time
POLLERS_CALENDAR = Query(s.POLLERS_CALENDAR, CalendarCommand, CalendarReply, timeout=30.0)
VOICE_PREPARE = Query(s.VOICE_PREPARE, PrepareSession, PrepareReply, timeout=5.0)
VOICE_ATTACH_ANY = Query(s.VOICE_ATTACH_ANY, AttachSession, AttachReply, timeout=5.0)
VOICE_STATE_GET = Query(s.VOICE_STATE_GET, VoiceStateRequest, VoiceState, timeout=1.0)
VOICE_CALL_OWNER = Query(s.VOICE_CALL_OWNER, CallOwner, CallOwnerReply, timeout=30.0)
INNER_REMINDERS = Query(s.INNER_REMINDERS, ReminderCommand, ReminderReply, timeout=5.0)
INNER_BUDGET = Query(s.INNER_BUDGET, BudgetRequest, BudgetReply, timeout=5.0)
MEMORY_SEARCH = Query(s.MEMORY_SEARCH, MemorySearchRequest, MemorySearchReply, timeout=5.0)
MEMORY_FACTS = Query(s.MEMORY_FACTS, MemoryFactsCommand, MemoryFactsReply, timeout=10.0)
MEMORY_IMPORT = Query(s.MEMORY_IMPORT, ImportStatusRequest, ImportStatus, timeout=5.0)
MEMORY_PEOPLE = Query(s.MEMORY_PEOPLE, PeopleCommand, PeopleReply, timeout=10.0)
MEMORY_COMMITMENTS = Query(s.MEMORY_COMMITMENTS, CommitmentsCommand, CommitmentsReply, timeout=10.0)
TOOLS_LIST = Query(s.TOOLS_LIST, ToolListRequest, ToolListReply)
TASKS_CREATE = Query(s.TASKS_CREATE, TaskCreate, TaskReply, timeout=10.0)
TASKS_LIST = Query(s.TASKS_LIST, TaskList, TaskListReply, timeout=5.0)
TASKS_GET = Query(s.TASKS_GET, TaskGet, TaskReply, timeout=5.0)
TASKS_CONTROL = Query(s.TASKS_CONTROL, TaskControl, TaskReply, timeout=10.0)
TOOLS_CALL = Query(s.TOOLS_CALL, ToolCallRequest, ToolCallReply, timeout=300.0)

PINGS: dict[str, Query[Ping, Pong]] = {
    name: Query(subject, Ping, Pong, timeout=1.0)
    for name, subject in {
        "ledger": s.LEDGER_PING,
        "agent": s.AGENT_PING,
        "inner-plane": s.INNER_PING,
        "voice": s.VOICE_PING,
        "pollers": s.POLLERS_PING,
        "memory": s.MEMORY_PING,
        "tasks": s.TASKS_PING,
    }.items()
}


def ledger_append(producer: str) -> Topic[Event]:
    """Where ``producer`` (its NATS identity's role, e.g. ``agent``) publishes events to persist."""
    return Topic(s.ledger_append(producer), Event)


def dead_letters(source: str) -> Topic[DeadLetter]:
    return Topic(s.dead_letter(source), DeadLetter)


def inner_schedule(reminder_id: str) -> Topic[ReminderFire]:
    """A reminder's schedule message (its body is what fires; headers say when)."""
    return Topic(s.inner_schedule(reminder_id), ReminderFire)


def voice_attach(session_id: str) -> Query[AttachSession, AttachReply]:
    return Query(s.voice_attach(session_id), AttachSession, AttachReply, timeout=5.0)


def voice_in(session_id: str) -> Topic[AnyVoiceIn]:
    return Topic(s.voice_in(session_id), VoiceIn)


def voice_out(session_id: str) -> Topic[AnyVoiceOut]:
    return Topic(s.voice_out(session_id), VoiceOut)
