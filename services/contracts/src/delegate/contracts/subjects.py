"""Every NATS subject, spelled once: ``<owner>.<kind>.<name>``.

Kinds: ``evt`` is a durable JetStream subject (captured by its owner's stream),
``cmd`` is request/reply, ``live`` is core NATS fan-out that nobody stores.
No subject literal may appear anywhere else (a test greps for it).
"""

# ledger
# Events to persist (stream LEDGER), one subject per producer: ``ledger.evt.append.<producer>``.
# NATS lets each identity publish only its own, so the ledger knows who wrote an event, and
# only a singleton's own identity can publish the events fenced with its term (see Fence).
LEDGER_APPEND_ANY = "ledger.evt.append.*"  # what the ledger's writer consumes


def ledger_append(producer: str) -> str:
    return f"ledger.evt.append.{producer}"


LEDGER_COMMITTED = "ledger.live.committed"  # each committed event, in commit order
LEDGER_PAGE = "ledger.cmd.page"  # timeline page by (ts, id) cursor
LEDGER_QUERY = "ledger.cmd.query"  # events by commit seq / conversation / span / kind
LEDGER_GET = "ledger.cmd.get"  # one event by id or client_msg_id
LEDGER_RESUME = "ledger.cmd.resume"  # resume state of the newest open conversation
LEDGER_ARTIFACT = "ledger.cmd.artifact"  # a run's newest thoughtflow picture (thoughtflow_artifacts)
LEDGER_USAGE = "ledger.cmd.usage"  # model.usage totals (usage_hours, usage_spans): GET /api/usage
LEDGER_PING = "ledger.cmd.ping"

# agent
AGENT_INPUT = "agent.evt.input"  # user input and inner activations (stream AGENT)
AGENT_DELTA = "agent.live.delta"  # streamed answer text
AGENT_STATE = "agent.live.state"  # state snapshot whenever it changes
AGENT_STATE_GET = "agent.cmd.state"
AGENT_COMPACT = "agent.cmd.compact"
AGENT_END = "agent.cmd.end"
AGENT_STOP = "agent.cmd.stop"  # stop generating: cancel the running turn's model stream
AGENT_PING = "agent.cmd.ping"
AGENT_LEASE_BUCKET = "agent_lease"  # JetStream KV bucket holding the singleton lease

# gateway
GATEWAY_SESSIONS_BUCKET = "gateway_sessions"  # JetStream KV bucket: browser sign-in sessions
# JetStream KV bucket: Web Push subscriptions, one per browser (the gateway writes, the pollers send)
PUSH_SUBSCRIPTIONS_BUCKET = "push_subscriptions"

# tools (the registry lives in the agent process; voice and tasks call it too)
TOOLS_LIST = "tools.cmd.list"
TOOLS_CALL = "tools.cmd.call"

# inner plane
INNER_SIGNAL = "inner.evt.signal"  # typed signals (stream INNER)
INNER_NOTICE = "inner.live.notice"  # live-only notices: capsule started/failed
INNER_PING = "inner.cmd.ping"
INNER_REMINDERS = "inner.cmd.reminders"  # set, list, change, cancel (the agent's tools, the gateway)
INNER_BUDGET = "inner.cmd.budget"  # the spend lines, spent and left (GET /api/usage/budget)
# Reminder schedules (stream REMINDERS): one JetStream message schedule per reminder on
# reminders.evt.at.<reminder id> (a newer message replaces it, a purge cancels it); when due,
# JetStream publishes its body on INNER_FIRE.
INNER_FIRE = "reminders.evt.fire"
INNER_SCHEDULE_ANY = "reminders.evt.at.*"


def inner_schedule(reminder_id: str) -> str:
    return f"reminders.evt.at.{reminder_id}"


# memory: the index of facts, episodes and messages (a projection of ledger events)
MEMORY_SEARCH = "memory.cmd.search"  # hybrid search; the agent's retrieval before each turn too
MEMORY_FACTS = "memory.cmd.facts"  # list, get, edit, forget, remember
MEMORY_IMPORT = "memory.cmd.import"  # an import's progress (what the index has taken in)
MEMORY_PEOPLE = "memory.cmd.people"  # people: list, get, the owner's edit, forget (issue #30)
MEMORY_COMMITMENTS = "memory.cmd.commitments"  # commitments: list by state, get, kept/dropped
MEMORY_PING = "memory.cmd.ping"

# tasks: durable browser and research jobs (the tasks service; a singleton fenced like the agent)
TASKS_CREATE = "tasks.cmd.create"
TASKS_LIST = "tasks.cmd.list"
TASKS_GET = "tasks.cmd.get"
TASKS_CONTROL = "tasks.cmd.control"  # pause, resume, cancel
TASKS_PING = "tasks.cmd.ping"
TASKS_LEASE_BUCKET = "tasks_lease"

# voice: one Realtime session at a time (the voice lock), its audio relayed live per session
VOICE_LEASE_BUCKET = "voice_lease"  # the voice lock: a singleton fenced like the agent's
VOICE_PREPARE = "voice.cmd.prepare"  # take the lock and pre-warm a session
VOICE_ATTACH_ANY = "voice.cmd.attach.*"
VOICE_IN_ANY = "voice.live.in.*"
VOICE_OUT_ANY = "voice.live.out.*"
VOICE_STATE = "voice.live.state"  # whenever a session starts, goes live or ends
VOICE_STATE_GET = "voice.cmd.state"
VOICE_CALL_OWNER = "voice.cmd.call_owner"  # place an outbound call to the owner


def voice_attach(session_id: str) -> str:
    """A stream claims its pre-warmed session (only the process holding it answers)."""
    return f"voice.cmd.attach.{session_id}"


def voice_in(session_id: str) -> str:
    """Caller audio, mark echoes and hang-up, gateway -> voice."""
    return f"voice.live.in.{session_id}"


def voice_out(session_id: str) -> str:
    """Answer audio, marks, clear, captions and end, voice -> gateway."""
    return f"voice.live.out.{session_id}"


# channels: the outbox (SMS and email to the owner) and late MMS media, stream CHANNELS,
# delivered by the pollers
CHANNELS_SMS_OUT = "channels.evt.out.sms"
CHANNELS_EMAIL_OUT = "channels.evt.out.email"
CHANNELS_MEDIA = "channels.evt.media"
CHANNELS_CALL_ANSWERED = "channels.evt.call.answered"  # Twilio's AMD verdict, gateway -> voice
POLLERS_STATE = "pollers.cmd.state"  # IMAP/SMTP/SMS health for /readyz detail and /api/state
POLLERS_CALENDAR = "pollers.cmd.calendar"  # the CalDAV projection: agenda, free time, writes

# other services' liveness
VOICE_PING = "voice.cmd.ping"
POLLERS_PING = "pollers.cmd.ping"


def dead_letter(source: str) -> str:
    """Where a consumer parks a message it can never process (stream DEAD)."""
    return f"dead.evt.{source}"


DEAD_ALL = "dead.evt.>"

# What each owner's stream captures.
LEDGER_ALL = "ledger.evt.>"
AGENT_ALL = "agent.evt.>"
INNER_ALL = "inner.evt.>"
REMINDERS_ALL = "reminders.evt.>"
CHANNELS_ALL = "channels.evt.>"
