"""A thin typed layer over nats-py: durable publish, live emit, request/reply, pull consume.

One concept per module:

- ``connection``: ``Bus``, the connection and what a service does with it;
- ``consumer``: the one-at-a-time durable consumer and its ack policy;
- ``batches``: the pipelined batch consumer on an ack-all consumer;
- ``dead_letters``: parking what can never be processed;
- ``atomic``: atomic batch publish (all of a batch stored, or none);
- ``acks``: settling a delivery, with failures reported;
- ``errors``: what can go wrong, by what the caller does about it;
- ``server``: what we need of the nats-server, checked at start.
"""

from delegate.runtime import without_unused_extras

with without_unused_extras():  # before any module of nats-py: its WebSocket transport is never used
    import nats  # noqa: F401

from delegate.runtime.validation import describe

from .acks import in_progress, nak
from .atomic import MAX_BATCH, BatchRefused
from .connection import MSG_ID, PUBLISH_RETRY, Bus, update_stream
from .dead_letters import DEAD_LETTER_DATA_LIMIT
from .errors import TRANSIENT, BusUnavailable, DomainError, RemoteError, Retryable, quietly
from .server import ATOMIC_BATCHES, MESSAGE_SCHEDULES, ServerFeature, ServerUnsuitable, start_when_server_suits

__all__ = [
    "ATOMIC_BATCHES",
    "DEAD_LETTER_DATA_LIMIT",
    "MAX_BATCH",
    "MESSAGE_SCHEDULES",
    "MSG_ID",
    "PUBLISH_RETRY",
    "TRANSIENT",
    "BatchRefused",
    "Bus",
    "BusUnavailable",
    "DomainError",
    "RemoteError",
    "Retryable",
    "ServerFeature",
    "ServerUnsuitable",
    "describe",
    "in_progress",
    "nak",
    "quietly",
    "start_when_server_suits",
    "update_stream",
]
