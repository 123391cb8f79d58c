"""Settling a JetStream delivery: ack, nak, term, in_progress, each reported when it fails.

A lost ack is not harmless: the message comes back after ``ack_wait`` (a duplicate the
handler must absorb), a lost term brings a dead letter back, a lost ``in_progress`` lets
JetStream redeliver a message still being worked on. So a failure is logged at WARNING
with what it was about, and never raised: the caller has nothing better to do, and the
redelivery is the recovery.
"""

import logging

from nats.aio.msg import Msg

log = logging.getLogger(__name__)


def stream_seq(msg: Msg) -> int | None:
    """The message's stream sequence, when it is a JetStream delivery."""
    try:
        return msg.metadata.sequence.stream
    except Exception:  # not a JetStream delivery: no metadata to read
        return None


def _failed(what: str, msg: Msg, exc: Exception) -> None:
    log.warning("%s of %s (stream seq %s) failed: %r", what, msg.subject, stream_seq(msg), exc)


async def ack(msg: Msg) -> None:
    try:
        await msg.ack()
    except Exception as exc:
        _failed("ack", msg, exc)


async def nak(msg: Msg, delay: float | None = None) -> None:
    try:
        await msg.nak(delay=delay)
    except Exception as exc:
        _failed("nak", msg, exc)


async def term(msg: Msg) -> None:
    try:
        await msg.term()
    except Exception as exc:
        _failed("term", msg, exc)


async def in_progress(msg: Msg) -> None:
    """Tell JetStream the message is still being worked on (restarts its ``ack_wait``)."""
    try:
        await msg.in_progress()
    except Exception as exc:
        _failed("in_progress", msg, exc)
