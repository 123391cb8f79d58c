"""JetStream streams, declared in code; each is created and configured by its owner role at start.

How many copies JetStream keeps is not declared here: NATS_REPLICAS (``Bus.replicas``) sets it
for every stream and KV bucket alike, 1 on a single server, 3 on a three-node cluster.
"""

from dataclasses import dataclass

from . import subjects as s

DAY = 24 * 3600.0


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    # The role that creates and configures the stream; the others may only use it (NATS
    # permissions give only the owner the right to change a stream's limits).
    owner: str
    duplicate_window_s: float = 120.0
    max_age_s: float = 0.0  # 0: keep until the limits policy says otherwise
    max_msg_size: int = 1024 * 1024
    schedules: bool = False  # JetStream message schedules (Nats-Schedule) allowed
    atomic: bool = False  # atomic batch publish (Nats-Batch-Id) allowed: all of a batch or none


STREAMS: tuple[StreamSpec, ...] = (
    # The ledger is the durable copy; the stream only needs to outlive a ledger outage.
    # Atomic batches: an import writes each past conversation whole or not at all.
    StreamSpec("LEDGER", (s.LEDGER_ALL,), "ledger", max_age_s=7 * DAY, atomic=True),
    # A day-long window makes a repeated client_msg_id a no-op even after a long reconnect.
    StreamSpec("AGENT", (s.AGENT_ALL,), "agent", duplicate_window_s=DAY, max_age_s=7 * DAY),
    StreamSpec("INNER", (s.INNER_ALL,), "inner-plane", max_age_s=7 * DAY),
    # No max age: a schedule must outlive any reminder's distance (a yearly birthday).
    StreamSpec("REMINDERS", (s.REMINDERS_ALL,), "inner-plane", schedules=True),
    # The outbox: a day-long window makes a republished reply (an agent redelivery) a no-op.
    StreamSpec("CHANNELS", (s.CHANNELS_ALL,), "pollers", duplicate_window_s=DAY, max_age_s=7 * DAY),
    StreamSpec("DEAD", (s.DEAD_ALL,), "ledger", max_age_s=30 * DAY),
)

def spec(name: str) -> StreamSpec:
    return next(spec for spec in STREAMS if spec.name == name)


# Durable consumer names, one per consuming role.
LEDGER_WRITER = "ledger-writer"
AGENT_WORKER = "agent-worker"
INNER_BROKER = "inner-broker"
INNER_REMINDERS = "inner-reminders"  # takes the reminder fires JetStream publishes when due
POLLERS_SMS = "pollers-sms"
POLLERS_EMAIL = "pollers-email"
POLLERS_MEDIA = "pollers-media"
# the pollers' Web Push sender: reads LEDGER appends for what the owner is told about
POLLERS_PUSH = "pollers-push"
VOICE_ANSWERED_BY = "voice-answered-by"  # the voice service's consumer of AMD verdicts (CHANNELS)
# The inner plane's ledger follower is a live subscriber, not a durable; this names where it
# parks what it can never process (dead.evt.inner-follower).
INNER_FOLLOWER = "inner-follower"
TASKS_WATCHER = "tasks-watcher"  # the tasks service's follower of activation outcomes (thoughtflow)
MEMORY_FOLLOWER = "memory-follower"  # the memory service's ledger follower, likewise
