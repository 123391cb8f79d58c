"""``Bus.consume`` against a real nats-server: the ack policy, dead letters, restarts."""

import asyncio
import json
import logging

import pytest
from nats.aio.msg import Msg

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus, Retryable
from tests.support.waiting import eventually

from .bus_support import event


async def test_undecodable_messages_are_dead_lettered_and_do_not_block(bus: Bus) -> None:
    await bus.js.publish(topics.ledger_append("test").subject, b"{not json")
    await bus.js.publish(topics.ledger_append("test").subject, json.dumps({"kind": "nope"}).encode())
    good = event("after the garbage")
    await bus.publish(topics.ledger_append("test"), good)
    seen: list[str] = []
    stop = asyncio.Event()

    async def handle(e: Event, _raw: object) -> None:
        seen.append(e.id)
        stop.set()

    await asyncio.wait_for(
        bus.consume(topics.LEDGER_APPEND_ANY, handle, durable="t1", stream="LEDGER", stop=stop), 10
    )
    assert seen == [good.id]
    dead = await bus.js.pull_subscribe("dead.evt.t1", durable="reader", stream="DEAD")
    letters = [json.loads(m.data) for m in await dead.fetch(2, timeout=5)]
    assert [x["reason"].split(":")[0] for x in letters] == ["undecodable", "undecodable"]
    assert letters[0]["data"] == "{not json" and "unknown event kind" in letters[1]["reason"]


async def test_failures_are_retried_then_dead_lettered(bus: Bus) -> None:
    await bus.publish(topics.ledger_append("test"), event("flaky"))
    await bus.publish(topics.ledger_append("test"), event("poison"))
    attempts: dict[str, int] = {}
    done = asyncio.Event()

    async def handle(e: Event, _raw: object) -> None:
        text = e.payload["text"]
        attempts[text] = attempts.get(text, 0) + 1
        if attempts.get("flaky") == 3 and attempts.get("poison") == 3:
            done.set()  # the loop stops after settling this message
        if text == "flaky" and attempts[text] < 3:
            raise Retryable("peer busy")
        if text == "poison":
            raise RuntimeError("always fails")

    task = asyncio.create_task(
        bus.consume(topics.LEDGER_APPEND_ANY, handle, durable="t2", stream="LEDGER", stop=done, max_deliver=3)
    )
    await asyncio.wait_for(task, 30)
    assert attempts == {"flaky": 3, "poison": 3}
    info = await bus.js.stream_info("DEAD")
    assert info.state.messages == 1


async def test_a_failed_ack_is_reported_at_warning(
    nats_server: NatsServer, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    await bus.publish(topics.ledger_append("test"), event())
    worker = await Bus.connect(nats_server.url, "test-worker")
    stop = asyncio.Event()

    async def handle(_e: Event, _raw: Msg) -> None:
        await worker.nc.close()  # the connection ends while the message is being handled
        stop.set()

    with caplog.at_level(logging.WARNING, logger="delegate.runtime.bus"):
        await asyncio.wait_for(
            worker.consume(topics.LEDGER_APPEND_ANY, handle, durable="t4", stream="LEDGER", stop=stop), 10
        )
    failed = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "ack of" in r.getMessage()]
    assert failed and failed[0].startswith("ack of ledger.evt.append.test (stream seq 1) failed")
    await worker.close()


async def test_a_consumer_survives_a_nats_restart(nats_server: NatsServer, bus: Bus) -> None:
    seen: set[str] = set()
    stop = asyncio.Event()

    async def handle(e: Event, _raw: object) -> None:
        seen.add(e.id)

    consumer = asyncio.create_task(
        bus.consume(topics.LEDGER_APPEND_ANY, handle, durable="t3", stream="LEDGER", stop=stop)
    )
    before = [event(f"before {i}") for i in range(20)]
    for e in before:
        await bus.publish(topics.ledger_append("test"), e)
    await eventually(lambda: len(seen) == 20, "20 events seen")
    await asyncio.to_thread(nats_server.restart)
    after = [event(f"after {i}") for i in range(20)]
    for e in after:
        await bus.publish(topics.ledger_append("test"), e)  # retries until the server is back
    await eventually(lambda: len(seen) == 40, "40 events seen", 30)
    stop.set()
    await asyncio.wait_for(consumer, 10)
    assert seen == {e.id for e in before + after}
