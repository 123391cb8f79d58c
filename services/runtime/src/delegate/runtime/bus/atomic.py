"""Atomic batch publish (JetStream ADR-50): a stream stores all of a batch or none of it.

nats-py 2.16 has no helper for it, so this speaks the headers itself: every message carries
``Nats-Batch-Id`` and its 1-based ``Nats-Batch-Sequence``, the last one ``Nats-Batch-Commit``
too, and only that one is a request (the server answers the commit alone, with one PubAck or
one error for the whole batch). The stream must allow it (``StreamSpec.atomic``).

What a retry meets, measured against nats-server 2.15: ``Nats-Msg-Id`` is allowed inside a
batch, but a batch holding an id the stream already has inside its duplicate window is
refused whole (err_code 10201) instead of being deduplicated. Since a batch is all or nothing,
that refusal means this very batch was stored before (a commit whose answer was lost), so it
counts as a duplicate, not a failure. Past the window the batch is stored again and the
consumer's own idempotency (the ledger's event ids) absorbs it. At most 1000 messages a batch
(the server's limit; more is refused whole).
"""

import json
from collections.abc import Sequence
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import PubAck

from delegate.contracts.ids import new_id
from delegate.contracts.topics import Topic

from ..retry import retrying
from .errors import TRANSIENT, BusUnavailable
from .server import ATOMIC_BATCHES, ServerUnsuitable, check_server

M = TypeVar("M")

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
MAX_BATCH = 1000
DUPLICATE_MSG_ID = 10201  # "atomic publish batch contains duplicate message id"
COMMIT_TIMEOUT_S = 5.0
# A stream not created yet (no responders) is an outage like NATS being away.
RETRY_ON = (*TRANSIENT, nats.js.errors.NoStreamResponseError)


class BatchRefused(Exception):
    """JetStream refused the batch (nothing of it was stored): retrying it unchanged cannot help."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(f"batch refused ({code}): {description}")
        self.code = code
        self.description = description


async def publish_atomic(
    nc: Client, topic: Topic[M], msgs: Sequence[M], *, msg_ids: Sequence[str], deadline: float = 30.0
) -> PubAck:
    """Publish ``msgs`` as one atomic batch; retried (as a new batch) until ``deadline`` seconds.

    Returns the commit's PubAck (``duplicate`` set when the batch had been stored already).
    Raises ``BatchRefused`` when JetStream refuses it, ``BusUnavailable`` at the deadline.
    """
    if not 1 <= len(msgs) <= MAX_BATCH:
        raise ValueError(f"a batch holds 1 to {MAX_BATCH} messages, not {len(msgs)}")
    if len(msg_ids) != len(msgs):
        raise ValueError("one message id per message")
    try:  # an older server would store the batch's messages one by one, never refusing any
        check_server(nc, [ATOMIC_BATCHES])
    except ServerUnsuitable as exc:
        raise BatchRefused(0, str(exc)) from exc
    bodies = [topic.encode(m) for m in msgs]
    try:
        async for attempt in retrying(retry_on=RETRY_ON, deadline=deadline, initial=0.1, maximum=2.0):
            with attempt:
                # A fresh batch id per attempt: a half-sent earlier attempt is abandoned by the
                # server (never committed), and must not be continued by this one.
                return await _send(nc, topic.subject, bodies, msg_ids, new_id())
    except RETRY_ON as exc:
        raise BusUnavailable(f"atomic batch to {topic.subject} failed: {exc!r}") from exc
    raise AssertionError("unreachable: retrying() returns or raises")


async def _send(nc: Client, subject: str, bodies: list[bytes], msg_ids: Sequence[str], batch_id: str) -> PubAck:
    last = len(bodies)
    for seq, (body, msg_id) in enumerate(zip(bodies, msg_ids, strict=True), start=1):
        headers = {BATCH_ID: batch_id, BATCH_SEQUENCE: str(seq), "Nats-Msg-Id": msg_id}
        try:
            if seq < last:
                await nc.publish(subject, body, headers=headers)
                continue
            headers[BATCH_COMMIT] = "1"
            reply = await nc.request(subject, body, headers=headers, timeout=COMMIT_TIMEOUT_S)
        except nats.errors.MaxPayloadError as exc:
            # Never sendable, however often it is tried; the uncommitted part is abandoned.
            raise BatchRefused(0, f"message {seq} of the batch is over the server's max payload") from exc
        if reply.headers and reply.headers.get("Status") == "503":
            raise nats.js.errors.NoStreamResponseError
        answer = json.loads(reply.data)
        error = answer.get("error")
        if error:
            code = int(error.get("err_code") or error.get("code") or 0)
            if code == DUPLICATE_MSG_ID:
                return PubAck(stream=str(answer.get("stream") or ""), seq=0, duplicate=True, batch_size=last)
            raise BatchRefused(code, str(error.get("description") or ""))
        return PubAck.from_response(answer)
    raise AssertionError("unreachable: a batch has a last message")
