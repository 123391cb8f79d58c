"""Who may do what on the bus: the one table NATS permissions are derived from.

Each service connects as its own NATS identity, named after its role. The table says, per
role, what it publishes, emits, consumes, requests and serves; ``permissions`` turns a row
into NATS publish/subscribe allow lists, including the exact ``$JS.API`` subjects JetStream
needs for that. NATS enforces it, so a process that only reaches the bus cannot append any
ledger event, read the history or call tools. ``make run`` and ``nats-config`` render the
server configuration from here (delegate.launcher), and a test checks that every topic and
query in ``topics`` is used by some role, so the table cannot drift from the code.
"""

from dataclasses import dataclass, field
from typing import Any, Protocol

from . import streams, topics
from . import subjects as s
from .topics import Query

JS_API = "$JS.API"



class AnyTopic(Protocol):
    """A topic of any model: the table reads only its subject (each ``Topic`` names its model)."""

    @property
    def subject(self) -> str: ...


AnyQuery = Query[Any, Any]


# A plain frozen record; the stand-in's TurnLine and PlannedCall have its shape, not its meaning.
@dataclass(frozen=True)
class Consumer:
    """A durable pull consumer a role reads: its stream, its name, the topic it filters on."""

    stream: str
    durable: str
    topic: AnyTopic


@dataclass(frozen=True)
class Role:
    name: str
    publishes: tuple[AnyTopic, ...] = ()  # durable topics it publishes into a stream (JetStream)
    emits: tuple[AnyTopic, ...] = ()  # live topics it publishes (core NATS, nobody stores them)
    subscribes: tuple[AnyTopic, ...] = ()  # live topics it listens to
    consumes: tuple[Consumer, ...] = ()  # durable consumers it pulls (and dead-letters from)
    requests: tuple[AnyQuery, ...] = ()
    serves: tuple[AnyQuery, ...] = ()
    buckets: tuple[str, ...] = ()  # JetStream KV buckets it creates and uses
    reads_streams: tuple[str, ...] = ()  # streams it reads single messages from, by sequence
    watches: tuple[tuple[str, str], ...] = ()  # (stream, durable) of others' consumers it inspects
    parks: tuple[str, ...] = ()  # dead-letter sources besides its consumers (live subscribers)
    notes: str = field(default="", compare=False)

    @property
    def owns(self) -> tuple[str, ...]:
        """The streams it creates and configures: ``StreamSpec.owner`` says so, not this table."""
        return tuple(spec.name for spec in streams.STREAMS if spec.owner == self.name)


def _own_append(role: str) -> AnyTopic:
    # Every role may persist events, each only on its own subject: the ledger knows who wrote
    # an event, and only a singleton's own identity can carry its fencing token.
    return topics.ledger_append(role)


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(
            "ledger",
            publishes=(_own_append("ledger"),),
            emits=(topics.LEDGER_COMMITTED,),
            consumes=(Consumer("LEDGER", streams.LEDGER_WRITER, topics.LEDGER_APPEND_ANY),),
            serves=(topics.LEDGER_PAGE, topics.LEDGER_QUERY, topics.LEDGER_GET, topics.LEDGER_RESUME,
                    topics.LEDGER_ARTIFACT, topics.LEDGER_USAGE, topics.PINGS["ledger"]),
        ),
        Role(
            "agent",
            # replies and the send_sms/send_email tools go out through the pollers' outbox
            # email.received signals when EMAIL_WHEN_AWAY=signal
            publishes=(_own_append("agent"), topics.SMS_OUT, topics.EMAIL_OUT, topics.INNER_SIGNAL),
            emits=(topics.AGENT_DELTA, topics.AGENT_STATE, topics.INNER_NOTICE),
            # agent.evt.input live too: an idle leader starts a user message's memory search as
            # it is published, before JetStream has stored it and the durable consumer delivered it
            subscribes=(topics.LEDGER_COMMITTED, topics.AGENT_INPUT),
            consumes=(Consumer("AGENT", streams.AGENT_WORKER, topics.AGENT_INPUT),),
            # the call_owner tool asks the voice service to place the call
            # the reminder tools ask the inner plane, which owns reminders
            # memory: retrieval before each turn, and the remember/forget tools
            requests=(topics.LEDGER_RESUME, topics.LEDGER_GET, topics.LEDGER_QUERY, topics.VOICE_CALL_OWNER,
                      topics.INNER_REMINDERS, topics.MEMORY_SEARCH, topics.MEMORY_FACTS,
                      topics.MEMORY_COMMITMENTS,  # commitment_update: kept or dropped on the owner's word
                      topics.TASKS_CREATE, topics.TASKS_GET, topics.TASKS_LIST,  # the task tools
                      topics.INNER_BUDGET,  # BUDGET_HARD_STOP_OWNER: is an owner turn over the line?
                      topics.POLLERS_CALENDAR),  # the calendar tools, and today's events in the context
            serves=(topics.AGENT_STATE_GET, topics.AGENT_COMPACT, topics.AGENT_END, topics.AGENT_STOP,
                    topics.TOOLS_LIST, topics.TOOLS_CALL, topics.PINGS["agent"]),
            buckets=(s.AGENT_LEASE_BUCKET,),
            watches=(("LEDGER", streams.LEDGER_WRITER),),  # waits until the ledger has caught up
        ),
        Role(
            "gateway",
            # POST /api/signals: the owner's scripts raise signals; /call/amd: the AMD verdict on
            # a call voice placed, kept until voice acted on it
            publishes=(_own_append("gateway"), topics.AGENT_INPUT, topics.MEDIA_FETCH, topics.INNER_SIGNAL,
                       topics.CALL_ANSWERED),
            # caller audio goes to the voice service live, its answers come back the same way
            emits=(topics.VOICE_IN_ANY,),
            subscribes=(topics.LEDGER_COMMITTED, topics.AGENT_DELTA, topics.AGENT_STATE, topics.INNER_NOTICE,
                        topics.VOICE_OUT_ANY, topics.VOICE_STATE),
            requests=(topics.LEDGER_PAGE, topics.LEDGER_QUERY, topics.LEDGER_GET, topics.AGENT_STATE_GET,
                      topics.LEDGER_USAGE,  # GET /api/usage
                      topics.AGENT_COMPACT, topics.AGENT_END, topics.AGENT_STOP, topics.PINGS["ledger"],
                      topics.PINGS["agent"], topics.PINGS["voice"], topics.POLLERS_STATE, topics.VOICE_PREPARE,
                      topics.VOICE_ATTACH_ANY, topics.VOICE_STATE_GET, topics.INNER_REMINDERS,
                      topics.MEMORY_SEARCH, topics.MEMORY_FACTS, topics.MEMORY_IMPORT, topics.PINGS["memory"],
                      topics.MEMORY_PEOPLE, topics.MEMORY_COMMITMENTS,  # /api/people, /api/commitments
                      topics.TASKS_CREATE, topics.TASKS_LIST, topics.TASKS_GET, topics.TASKS_CONTROL,
                      topics.PINGS["tasks"], topics.LEDGER_ARTIFACT,  # the artifact: GET /api/runs/{id}/diagram
                      topics.INNER_BUDGET,  # GET /api/usage/budget
                      topics.PINGS["inner-plane"],  # /readyz: does it refuse the NATS server?
                      topics.TOOLS_LIST),  # GET /api/tools: offered and refused tools
            buckets=(s.GATEWAY_SESSIONS_BUCKET, s.PUSH_SUBSCRIPTIONS_BUCKET),  # sign-ins; Web Push subscriptions
            reads_streams=("AGENT",),  # the original of a duplicate input, by its sequence
        ),
        Role(
            "inner-plane",
            # signals from its own memory, task and timer sources; activations for the agent
            # reminders: their schedules (JetStream publishes each fire back to it when due)
            publishes=(_own_append("inner-plane"), topics.AGENT_INPUT, topics.INNER_SIGNAL,
                       topics.INNER_SCHEDULE_ANY,
                       topics.SMS_OUT, topics.EMAIL_OUT),  # the owner told once a spend line is reached
            emits=(topics.INNER_NOTICE,),
            subscribes=(topics.LEDGER_COMMITTED,),
            consumes=(
                Consumer("INNER", streams.INNER_BROKER, topics.INNER_SIGNAL),
                Consumer("REMINDERS", streams.INNER_REMINDERS, topics.INNER_FIRE),
            ),
            requests=(topics.LEDGER_QUERY, topics.LEDGER_GET),
            serves=(topics.INNER_REMINDERS, topics.INNER_BUDGET, topics.PINGS["inner-plane"]),
            parks=(streams.INNER_FOLLOWER,),
        ),
        Role(
            "voice",
            # one Realtime session at a time: its events fenced by the voice lock's term
            # a voicemail's SMS goes out through the pollers' outbox
            publishes=(_own_append("voice"), topics.SMS_OUT),
            emits=(topics.VOICE_OUT_ANY, topics.VOICE_STATE),
            subscribes=(topics.VOICE_IN_ANY,),
            consumes=(Consumer("CHANNELS", streams.VOICE_ANSWERED_BY, topics.CALL_ANSWERED),),
            requests=(topics.TOOLS_LIST, topics.TOOLS_CALL, topics.LEDGER_RESUME, topics.LEDGER_QUERY,
                      topics.LEDGER_GET, topics.MEMORY_SEARCH,
                      topics.INNER_BUDGET,  # BUDGET_HARD_STOP_OWNER: may the owner's call open?
                      topics.POLLERS_CALENDAR),  # today's events in the session's instructions
            serves=(topics.VOICE_PREPARE, topics.VOICE_ATTACH_ANY, topics.VOICE_STATE_GET,
                    topics.VOICE_CALL_OWNER, topics.PINGS["voice"]),
            buckets=(s.VOICE_LEASE_BUCKET,),
            watches=(("LEDGER", streams.LEDGER_WRITER),),  # its context is read after the ledger caught up
            notes="a singleton fenced like the agent; calls the agent's tool registry",
        ),
        Role(
            "pollers",
            # email in becomes agent input; the outbox and MMS media are delivered from CHANNELS;
            # the calendar raises calendar.* signals
            publishes=(_own_append("pollers"), topics.AGENT_INPUT, topics.INNER_SIGNAL),
            consumes=(
                Consumer("CHANNELS", streams.POLLERS_SMS, topics.SMS_OUT),
                Consumer("CHANNELS", streams.POLLERS_EMAIL, topics.EMAIL_OUT),
                Consumer("CHANNELS", streams.POLLERS_MEDIA, topics.MEDIA_FETCH),
                # Web Push: what the owner is told about (activations, reminders, tasks, failed
                # deliveries), read from the events appended to the ledger
                Consumer("LEDGER", streams.POLLERS_PUSH, topics.LEDGER_APPEND_ANY),
            ),
            # memory: who a refused mail's sender is, to name them on the timeline (never to let them in)
            requests=(topics.LEDGER_GET, topics.LEDGER_QUERY, topics.MEMORY_PEOPLE),
            serves=(topics.POLLERS_STATE, topics.POLLERS_CALENDAR, topics.PINGS["pollers"]),
            buckets=(s.PUSH_SUBSCRIPTIONS_BUCKET,),  # the subscriptions it sends to (and drops when gone)
            watches=(("LEDGER", streams.LEDGER_WRITER),),  # waits until the ledger has caught up
        ),
        Role(
            "memory",
            # facts it reconciles (per turn, at checkpoints, the owner's edits) go to the ledger;
            # its index is a projection of the committed events it follows
            publishes=(_own_append("memory"),),
            subscribes=(topics.LEDGER_COMMITTED,),
            requests=(topics.LEDGER_QUERY, topics.LEDGER_GET),
            serves=(topics.MEMORY_SEARCH, topics.MEMORY_FACTS, topics.MEMORY_IMPORT, topics.PINGS["memory"],
                    topics.MEMORY_PEOPLE, topics.MEMORY_COMMITMENTS),
            parks=(streams.MEMORY_FOLLOWER,),
        ),
        Role(
            "tasks",
            # its task.* events (fenced by its lease) and the signal a finished or failed task raises
            publishes=(_own_append("tasks"), topics.INNER_SIGNAL),
            # activation outcomes: when to draw an activation's run picture
            subscribes=(topics.LEDGER_COMMITTED,),
            # the tool registry under the ``tasks`` policy (side-effecting tools only when the
            # owner enabled them for the task)
            # resume: the fencing marks a new term's token must exceed
            requests=(topics.LEDGER_QUERY, topics.LEDGER_GET, topics.LEDGER_RESUME, topics.TOOLS_LIST,
                      topics.TOOLS_CALL),
            serves=(topics.TASKS_CREATE, topics.TASKS_LIST, topics.TASKS_GET, topics.TASKS_CONTROL,
                    topics.PINGS["tasks"]),
            buckets=(s.TASKS_LEASE_BUCKET,),
            watches=(("LEDGER", streams.LEDGER_WRITER),),  # its projection is read after the ledger caught up
            parks=(streams.TASKS_WATCHER,),
            notes="a singleton fenced like the agent; runs each task's steps with its own model chain",
        ),
    )
}


@dataclass(frozen=True)
class Permissions:
    """One identity's NATS authorization: anything not allowed here is denied."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool  # may answer the requests it receives (their reply inboxes)


def inbox_prefix(role: str) -> str:
    """Each identity's private reply inboxes: nobody else may subscribe to them."""
    return f"_INBOX_{role.replace('-', '_')}"


def _stream_of(subject: str) -> str:
    """The stream capturing a durable subject (the publisher needs its pub ack, nothing more)."""
    for spec in streams.STREAMS:
        for pattern in spec.subjects:
            if pattern.endswith(">") and subject.startswith(pattern[:-1]):
                return spec.name
    raise ValueError(f"no stream captures {subject}")


def _stream_api(stream: str, *, owner: bool) -> list[str]:
    api = [f"{JS_API}.STREAM.INFO.{stream}"]
    if owner:
        api += [f"{JS_API}.STREAM.CREATE.{stream}", f"{JS_API}.STREAM.UPDATE.{stream}"]
    return api


def _consumer_api(consumer: Consumer) -> list[str]:
    stream, durable = consumer.stream, consumer.durable
    return [
        f"{JS_API}.STREAM.INFO.{stream}",
        f"{JS_API}.CONSUMER.INFO.{stream}.{durable}",
        # nats-py appends the filter subject's tokens to CREATE; older servers use DURABLE.CREATE
        f"{JS_API}.CONSUMER.CREATE.{stream}.{durable}",
        f"{JS_API}.CONSUMER.CREATE.{stream}.{durable}.>",
        f"{JS_API}.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
        f"{JS_API}.CONSUMER.DELETE.{stream}.{durable}",
        f"{JS_API}.CONSUMER.RESET.{stream}.{durable}",
        f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
    ]


def _bucket_api(bucket: str) -> list[str]:
    # A KV bucket is a stream KV_<bucket> on subjects $KV.<bucket>.>; its owner creates it,
    # reads keys (direct get or msg get), watches it (an ordered push consumer with flow
    # control) and may purge it.
    stream = f"KV_{bucket}"
    return [
        f"$KV.{bucket}.>",
        f"{JS_API}.STREAM.INFO.{stream}",
        f"{JS_API}.STREAM.CREATE.{stream}",
        f"{JS_API}.STREAM.UPDATE.{stream}",
        f"{JS_API}.STREAM.PURGE.{stream}",
        f"{JS_API}.STREAM.MSG.GET.{stream}",
        f"{JS_API}.STREAM.MSG.DELETE.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}.>",
        f"{JS_API}.CONSUMER.CREATE.{stream}",
        f"{JS_API}.CONSUMER.CREATE.{stream}.>",
        f"{JS_API}.CONSUMER.INFO.{stream}.*",
        f"{JS_API}.CONSUMER.DELETE.{stream}.*",
        f"$JS.FC.{stream}.>",
    ]


def permissions(role: Role) -> Permissions:
    """The NATS permissions of ``role``'s identity, derived from its row of the table."""
    pub: list[str] = [f"{JS_API}.INFO"]  # account info: read-only, used by health checks
    sub: list[str] = [f"{inbox_prefix(role.name)}.>"]
    for stream in role.owns:
        pub += _stream_api(stream, owner=True)
        if streams.spec(stream).schedules:
            pub.append(f"{JS_API}.STREAM.PURGE.{stream}")  # a purge of its subject cancels a schedule
    for topic in role.publishes:
        pub.append(topic.subject)
        pub += _stream_api(_stream_of(topic.subject), owner=False)
    pub += [t.subject for t in role.emits]
    sub += [t.subject for t in role.subscribes]
    for consumer in role.consumes:
        pub += _consumer_api(consumer)
    for source in (*(c.durable for c in role.consumes), *role.parks):
        pub.append(s.dead_letter(source))  # what it can never process is parked
        pub += _stream_api(_stream_of(s.dead_letter(source)), owner=False)
    pub += [q.subject for q in role.requests]
    own_ping = topics.PINGS.get(role.name)
    if own_ping is not None and own_ping in role.serves:
        pub.append(own_ping.subject)  # its container's health check asks it, as this identity
    sub += [q.subject for q in role.serves]
    for bucket in role.buckets:
        pub += _bucket_api(bucket)
    for stream in role.reads_streams:
        pub += [f"{JS_API}.STREAM.MSG.GET.{stream}", f"{JS_API}.DIRECT.GET.{stream}"]
    for stream, durable in role.watches:
        pub.append(f"{JS_API}.CONSUMER.INFO.{stream}.{durable}")
    return Permissions(
        publish=tuple(dict.fromkeys(pub)), subscribe=tuple(dict.fromkeys(sub)), allow_responses=bool(role.serves)
    )
