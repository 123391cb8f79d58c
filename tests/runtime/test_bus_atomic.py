"""Atomic batch publish against a real nats-server: a batch is stored whole or not at all, and
a batch sent again (its commit's answer lost) counts as a duplicate, not a second copy."""

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.topics import Topic
from delegate.runtime.bus import MAX_BATCH, BatchRefused, Bus, atomic

from .bus_support import event

SUBJECT = topics.ledger_append("test")


async def stored(bus: Bus) -> int:
    info = await bus.js.stream_info("LEDGER")
    return info.state.messages


async def test_a_batch_is_stored_whole_and_a_resent_batch_is_a_duplicate(bus: Bus) -> None:
    events = [event(f"line {n}") for n in range(50)]
    ack = await bus.publish_batch(SUBJECT, events, msg_ids=[e.id for e in events])
    assert not ack.duplicate and ack.seq == 50
    assert await stored(bus) == 50

    again = await bus.publish_batch(SUBJECT, events, msg_ids=[e.id for e in events])
    assert again.duplicate
    assert await stored(bus) == 50


async def test_a_batch_cut_off_before_its_commit_stores_nothing(bus: Bus) -> None:
    """What a writer that dies halfway leaves: the server abandons the uncommitted batch."""
    events = [event(f"half {n}") for n in range(10)]
    for seq, e in enumerate(events[:6], start=1):
        headers = {atomic.BATCH_ID: "cut-off", atomic.BATCH_SEQUENCE: str(seq), "Nats-Msg-Id": e.id}
        await bus.nc.publish(SUBJECT.subject, SUBJECT.encode(e), headers=headers)
    await bus.nc.flush()
    assert await stored(bus) == 0

    # the whole batch again, as a retry after the crash sends it: stored, all of it, once
    ack = await bus.publish_batch(SUBJECT, events, msg_ids=[e.id for e in events])
    assert not ack.duplicate and await stored(bus) == 10


async def test_a_refused_batch_raises_and_stores_nothing(bus: Bus) -> None:
    """A batch to a subject no stream allows atomic writes on is refused whole."""
    events = [event("x") for _ in range(3)]
    inner: Topic[Event] = Topic(topics.INNER_SIGNAL.subject, Event)
    with pytest.raises(BatchRefused):
        await bus.publish_batch(inner, events, msg_ids=[e.id for e in events], deadline=5.0)
    assert (await bus.js.stream_info("INNER")).state.messages == 0


async def test_a_batch_is_one_to_max_batch_messages(bus: Bus) -> None:
    with pytest.raises(ValueError):
        await bus.publish_batch(SUBJECT, [], msg_ids=[])
    many = [event() for _ in range(MAX_BATCH + 1)]
    with pytest.raises(ValueError):
        await bus.publish_batch(SUBJECT, many, msg_ids=[e.id for e in many])


async def test_a_message_over_the_max_payload_refuses_its_batch(bus: Bus) -> None:
    events = [event("fits"), event("x" * (1024 * 1024))]
    with pytest.raises(BatchRefused):
        await bus.publish_batch(SUBJECT, events, msg_ids=[e.id for e in events], deadline=5.0)
    assert await stored(bus) == 0
