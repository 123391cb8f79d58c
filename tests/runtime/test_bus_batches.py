"""``Bus.consume_batches`` against a real nats-server: an ack-all consumer that never acks past
what it has committed, nor past a gap, and parks dead letters until their batch is settled."""

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats.js.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, StreamConsumerLimits

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from delegate.runtime.bus import batches as batches_module
from tests.support.waiting import eventually

from .bus_support import event as _event


@dataclass
class Ledgerish:
    """A batch handler standing in for a committing service: what it committed, in order."""

    committed: list[str] = field(default_factory=list)
    batches: list[list[str]] = field(default_factory=list)
    fail: Callable[[list[str]], bool] = lambda ids: False

    async def __call__(self, items: list[tuple[Msg, Event]]) -> None:
        ids = [e.id for _, e in items]
        self.batches.append(ids)
        if self.fail(ids):
            raise RuntimeError("the database said no")
        self.committed.extend(i for i in ids if i not in self.committed)  # idempotent, like the ledger


async def _publish_all(bus: Bus, events: list[Event]) -> None:
    for e in events:
        await bus.publish(topics.ledger_append("test"), e)


def _batches(bus: Bus, handler: Ledgerish, stop: asyncio.Event, durable: str, **kw: Any) -> "asyncio.Task[None]":
    return asyncio.create_task(
        bus.consume_batches(topics.LEDGER_APPEND_ANY, handler, durable=durable, stream="LEDGER", stop=stop, **kw)
    )


async def _settled(bus: Bus, durable: str) -> ConsumerInfo:
    """The consumer once every message is acked (acks are asynchronous)."""
    async def settled() -> ConsumerInfo | None:
        info = await bus.js.consumer_info("LEDGER", durable)
        return info if info.num_ack_pending == 0 and info.num_pending == 0 else None

    return await eventually(settled, f"{durable} to settle (nothing pending, nothing unacked)", 10)


def _floor(info: ConsumerInfo) -> int:
    return info.ack_floor.stream_seq if info.ack_floor else 0


@pytest.fixture(params=["reset-api", "recreate"])
def reset_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a consumer is reset: the 2.14+ API, and delete + create for older servers."""
    if request.param == "recreate":
        monkeypatch.setattr(batches_module, "RESET_SINCE", (99, 0))
    return str(request.param)


async def test_batches_arrive_in_order_and_one_ack_settles_each(bus: Bus) -> None:
    events = [_event(f"m{i}") for i in range(300)]
    await _publish_all(bus, events)
    handler = Ledgerish()
    stop = asyncio.Event()
    task = _batches(bus, handler, stop, "b1", batch=64)
    await eventually(lambda: len(handler.committed) == len(events), "every event committed")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert handler.committed == [e.id for e in events]
    assert max(len(b) for b in handler.batches) == 64
    info = await _settled(bus, "b1")
    assert info.config.ack_policy == AckPolicy.ALL
    assert _floor(info) == len(events)


async def test_with_depth_two_calls_overlap_but_no_ack_passes_an_unfinished_batch(
    nats_server: NatsServer, bus: Bus
) -> None:
    events = [_event(f"m{i}") for i in range(24)]
    await _publish_all(bus, events)
    # A second connection sees every ack the consumer sends, and a sentinel sent after them.
    spy = await Bus.connect(nats_server.url, "test-spy")
    wire: list[str] = []
    sentinel = asyncio.Event()

    async def on_wire(msg: Msg) -> None:
        wire.append("sentinel" if msg.subject == "test.sentinel" else "ack")
        if msg.subject == "test.sentinel":
            sentinel.set()

    await spy.nc.subscribe("$JS.ACK.LEDGER.bd1.>", cb=on_wire)
    await spy.nc.subscribe("test.sentinel", cb=on_wire)
    await spy.nc.flush()
    release = asyncio.Event()
    running: list[int] = []
    overlapped: list[bool] = []
    finished: list[list[str]] = []

    async def handle(items: list[tuple[Msg, Event]]) -> None:
        number = len(finished) + len(running)
        overlapped.append(bool(running))
        running.append(number)
        if number == 0:
            await release.wait()  # the first batch commits slowly
        running.remove(number)
        finished.append([e.id for _, e in items])

    stop = asyncio.Event()
    task = asyncio.create_task(
        bus.consume_batches(topics.LEDGER_APPEND_ANY, handle, durable="bd1", stream="LEDGER", stop=stop,
                            batch=8, depth=2)
    )
    await eventually(lambda: len(finished) == 1, "one batch finished")  # the second batch finished first
    assert overlapped[:2] == [False, True] and running == [0]
    # A round trip on the consumer's connection: its loop has run since the second batch
    # returned, so an ack it would send then is on the wire before the sentinel.
    await bus.nc.flush()
    await bus.nc.publish("test.sentinel", b"")
    await asyncio.wait_for(sentinel.wait(), 10)
    # Its ack would settle the first batch too: it waits, and the third batch is not started.
    assert wire == ["sentinel"]
    assert len(overlapped) == 2
    release.set()
    await eventually(lambda: sum(len(b) for b in finished) == len(events), "every event through the handler")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert sorted(i for b in finished for i in b) == sorted(e.id for e in events)
    assert _floor(await _settled(bus, "bd1")) == len(events)
    assert "ack" in wire  # the spy does see this consumer's acks
    await spy.close()


async def test_with_depth_two_nothing_after_a_failed_batch_is_acked(bus: Bus, reset_mode: str) -> None:
    events = [_event(f"m{i}") for i in range(16)]
    await _publish_all(bus, events)
    first = events[0].id
    calls: list[list[str]] = []
    second_done = asyncio.Event()

    async def handle(items: list[tuple[Msg, Event]]) -> None:
        ids = [e.id for _, e in items]
        calls.append(ids)
        if first in ids and len(calls) == 1:
            await second_done.wait()  # fail only once the batch after it has returned
            await asyncio.sleep(0.1)
            raise RuntimeError("the database said no")
        if len(calls) == 2:
            second_done.set()

    stop = asyncio.Event()
    task = asyncio.create_task(
        bus.consume_batches(topics.LEDGER_APPEND_ANY, handle, durable="bd2", stream="LEDGER", stop=stop,
                            batch=8, depth=2)
    )
    await eventually(lambda: len(calls) >= 4, "four handler calls")
    stop.set()
    await asyncio.wait_for(task, 10)
    # The second batch had returned, but its ack would have settled the failed first one: it
    # was dropped with it, and both came again, in order.
    ids = [e.id for e in events]
    assert calls[:4] == [ids[:8], ids[8:], ids[:8], ids[8:]]
    assert _floor(await _settled(bus, "bd2")) == len(events)


async def test_a_dead_lettered_message_is_termed_only_after_its_batch_commits(bus: Bus) -> None:
    events = [_event(f"m{i}") for i in range(8)]
    await _publish_all(bus, events)
    floor_during: list[int] = []
    seen: list[str] = []
    stop = asyncio.Event()

    async def handle(items: list[tuple[Msg, Event]]) -> None:
        for raw, event in items:
            if event.payload["text"] == "m2":
                await bus.dead_letter("b2", raw, "not wanted")
                await bus.nc.flush()
                # A term on an ack-all consumer acks everything before it: it must wait.
                info = await bus.js.consumer_info("LEDGER", "b2")
                floor_during.append(_floor(info))
            else:
                seen.append(event.id)
        if len(seen) == 7:
            stop.set()

    await asyncio.wait_for(
        bus.consume_batches(topics.LEDGER_APPEND_ANY, handle, durable="b2", stream="LEDGER", stop=stop, batch=8), 10
    )
    assert floor_during == [0]
    assert seen == [e.id for e in events if e.payload["text"] != "m2"]
    assert _floor(await _settled(bus, "b2")) == 8
    assert (await bus.js.stream_info("DEAD")).state.messages == 1


async def test_a_failed_batch_comes_back_in_order_and_a_poison_one_is_dead_lettered(
    bus: Bus, reset_mode: str
) -> None:
    events = [_event(f"m{i}") for i in range(12)]
    await _publish_all(bus, events)
    flaky, poison = events[2].id, events[9].id
    failures = {flaky: 0}

    def fail(ids: list[str]) -> bool:
        if flaky in ids and failures[flaky] < 2:
            failures[flaky] += 1
            return True
        return poison in ids

    handler = Ledgerish(fail=fail)
    stop = asyncio.Event()
    task = _batches(bus, handler, stop, "b3", batch=4, max_deliver=3)

    async def dead() -> int:
        return (await bus.js.stream_info("DEAD")).state.messages

    async def all_placed() -> set[str] | None:
        parked = await _dead_ids(bus, await dead())
        return parked if poison in parked and set(handler.committed) | parked == {e.id for e in events} else None

    parked = await eventually(all_placed, "the poison parked and every other event committed",
                              explain=lambda: f"batches: {handler.batches}")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert not set(handler.committed) & parked
    assert flaky in handler.committed
    # Committed in stream order: every redelivery restarts from the ack floor.
    order = [e.id for e in events]
    assert handler.committed == sorted(handler.committed, key=order.index)
    await _settled(bus, "b3")


async def _dead_ids(bus: Bus, count: int) -> set[str]:
    if not count:
        return set()
    psub = await bus.js.pull_subscribe("dead.evt.b3", stream="DEAD")
    try:
        letters = [json.loads(m.data) for m in await psub.fetch(count, timeout=2)]
    finally:
        await psub.unsubscribe()
    return {json.loads(letter["data"])["id"] for letter in letters}


async def test_what_a_crashed_predecessor_held_is_delivered_again_at_once(bus: Bus, reset_mode: str) -> None:
    events = [_event(f"m{i}") for i in range(50)]
    await _publish_all(bus, events)
    stuck = asyncio.Event()

    async def hang(items: list[tuple[Msg, Event]]) -> None:
        stuck.set()
        await asyncio.Event().wait()  # never commits: a process that died mid-batch

    predecessor = asyncio.create_task(
        bus.consume_batches(topics.LEDGER_APPEND_ANY, hang, durable="b4", stream="LEDGER", stop=asyncio.Event(),
                            batch=16, ack_wait=60)
    )
    await asyncio.wait_for(stuck.wait(), 10)
    predecessor.cancel()
    with pytest.raises(asyncio.CancelledError):
        await predecessor
    assert (await bus.js.consumer_info("LEDGER", "b4")).num_ack_pending > 0
    # Its deliveries would come back only after ack_wait (60 s); the successor resets the consumer.
    handler = Ledgerish()
    stop = asyncio.Event()
    task = _batches(bus, handler, stop, "b4", batch=16, ack_wait=60)
    await eventually(lambda: len(handler.committed) == len(events), "every event committed")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert handler.committed == [e.id for e in events]
    await _settled(bus, "b4")


async def test_a_delivery_that_went_elsewhere_is_noticed_and_delivered_again(bus: Bus, reset_mode: str) -> None:
    handler = Ledgerish()
    stop = asyncio.Event()
    task = _batches(bus, handler, stop, "b5", batch=8)
    published = [_event(f"m{i}") for i in range(5)]
    await _publish_all(bus, published)
    await eventually(lambda: len(handler.committed) == 5, "five events committed")
    # Someone else pulls from the same durable and never acks (a zombie predecessor): its
    # delivery leaves a gap in the delivery numbers, and acking past it would lose the message.
    thief = await bus.js.pull_subscribe_bind("b5", stream="LEDGER")
    stolen = asyncio.create_task(thief.fetch(1, timeout=20))
    await asyncio.sleep(0)
    i = 5
    while not stolen.done():  # publishing is what lets the thief's fetch return: not a wait alone
        more = _event(f"m{i}")
        published.append(more)
        await bus.publish(topics.ledger_append("test"), more)
        i += 1
        await asyncio.sleep(0.02)
    assert len(await stolen) == 1
    for _ in range(3):  # deliveries after the gap
        more = _event(f"m{i}")
        published.append(more)
        await bus.publish(topics.ledger_append("test"), more)
        i += 1
    await eventually(lambda: set(handler.committed) == {e.id for e in published}, "every published event committed", 20)
    stop.set()
    await asyncio.wait_for(task, 10)
    await thief.unsubscribe()
    await _settled(bus, "b5")


async def test_an_explicit_ack_consumer_is_upgraded_from_its_ack_floor(bus: Bus) -> None:
    events = [_event(f"m{i}") for i in range(10)]
    await _publish_all(bus, events)
    old = ConsumerConfig(
        durable_name="b6", ack_policy=AckPolicy.EXPLICIT, filter_subject=topics.LEDGER_APPEND_ANY.subject
    )
    await bus.js.add_consumer("LEDGER", old)
    psub = await bus.js.pull_subscribe_bind("b6", stream="LEDGER")
    for msg in await psub.fetch(4, timeout=5):
        await msg.ack_sync()
    await psub.unsubscribe()
    handler = Ledgerish()
    stop = asyncio.Event()
    task = _batches(bus, handler, stop, "b6")
    await eventually(lambda: len(handler.committed) == 6, "six events committed")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert handler.committed == [e.id for e in events[4:]]
    info = await _settled(bus, "b6")
    assert info.config.ack_policy == AckPolicy.ALL and _floor(info) == 10


async def test_an_upgrade_that_fails_after_the_delete_still_starts_from_the_ack_floor(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    """The old consumer is deleted, and making the new one fails (here: the stream allows less
    ack pending than it asks for). The next try finds no consumer at all: it must still start
    after what the old one had settled, not at the stream's beginning."""
    events = [_event(f"m{i}") for i in range(10)]
    await _publish_all(bus, events)
    old = ConsumerConfig(
        durable_name="b6f", ack_policy=AckPolicy.EXPLICIT, filter_subject=topics.LEDGER_APPEND_ANY.subject,
        max_ack_pending=10,
    )
    await bus.js.add_consumer("LEDGER", old)
    psub = await bus.js.pull_subscribe_bind("b6f", stream="LEDGER")
    for msg in await psub.fetch(4, timeout=5):
        await msg.ack_sync()
    await psub.unsubscribe()
    config = (await bus.js.stream_info("LEDGER")).config
    config.consumer_limits = StreamConsumerLimits(max_ack_pending=10)
    await bus.js.update_stream(config)
    handler = Ledgerish()
    stop = asyncio.Event()
    task = _batches(bus, handler, stop, "b6f")
    await eventually(lambda: "binding b6f failed" in caplog.text, "the failed binding logged")
    with pytest.raises(nats.js.errors.NotFoundError):  # deleted, not made again
        await bus.js.consumer_info("LEDGER", "b6f")
    config.consumer_limits = StreamConsumerLimits()
    await bus.js.update_stream(config)
    await eventually(lambda: len(handler.committed) >= 6, "six events committed")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert handler.committed == [e.id for e in events[4:]]


async def test_a_batch_consumer_survives_a_nats_restart(nats_server: NatsServer, bus: Bus) -> None:
    handler = Ledgerish()
    stop = asyncio.Event()
    task = _batches(bus, handler, stop, "b7", batch=32)
    events = [_event(f"m{i}") for i in range(200)]
    await _publish_all(bus, events[:100])
    await eventually(lambda: len(handler.committed) == 100, "100 events committed")
    await asyncio.to_thread(nats_server.restart)
    await _publish_all(bus, events[100:])  # retries until the server is back
    await eventually(lambda: len(handler.committed) == 200, "200 events committed", 30)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert handler.committed == [e.id for e in events]


async def test_a_durable_takes_the_ack_wait_of_todays_setting(bus: Bus) -> None:
    """The ledger times its in_progress heartbeats from LEDGER_ACK_WAIT_SECONDS: a durable made
    under another setting must not keep its old ack wait, or it would redeliver too early."""
    first = [_event("before")]
    await _publish_all(bus, first)
    handler, stop = Ledgerish(), asyncio.Event()
    task = _batches(bus, handler, stop, "b-wait", ack_wait=30)
    await eventually(lambda: len(handler.committed) == 1, "the event committed")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert (await bus.js.consumer_info("LEDGER", "b-wait")).config.ack_wait == 30

    await _publish_all(bus, [_event("after")])
    handler, stop = Ledgerish(), asyncio.Event()
    task = _batches(bus, handler, stop, "b-wait", ack_wait=2)
    await eventually(lambda: len(handler.committed) == 1, "the event committed")
    stop.set()
    await asyncio.wait_for(task, 10)
    info = await bus.js.consumer_info("LEDGER", "b-wait")
    assert info.config.ack_wait == 2 and info.config.ack_policy == AckPolicy.ALL
