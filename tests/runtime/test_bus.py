"""The typed bus helper against a real nats-server: dedup, ack policy, dead letters, restarts."""

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event, Message, make_event
from delegate.contracts.messages import GetReply, GetRequest
from delegate.runtime.bus import Bus, BusUnavailable, DomainError, RemoteError, Retryable
from delegate.runtime.procs import NatsServer


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    b = await Bus.connect(nats_server.url, "test")
    await b.ensure_streams()
    yield b
    await b.close()


def _event(text: str = "hi") -> Event:
    return make_event(Message(text=text), conversation_id="c", span_id="s", channel="text", role="user")


async def _until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_retried_publish_is_stored_once(bus: Bus) -> None:
    event = _event()
    first = await bus.publish(topics.LEDGER_APPEND, event)
    again = await bus.publish(topics.LEDGER_APPEND, event)
    assert again.duplicate and again.seq == first.seq
    assert (await bus.js.stream_info("LEDGER")).state.messages == 1


async def test_ensure_streams_is_idempotent(bus: Bus) -> None:
    await bus.ensure_streams()
    names = {(await bus.js.stream_info(n)).config.name for n in ("LEDGER", "AGENT", "INNER", "DEAD")}
    assert names == {"LEDGER", "AGENT", "INNER", "DEAD"}


async def test_undecodable_messages_are_dead_lettered_and_do_not_block(bus: Bus) -> None:
    await bus.js.publish(topics.LEDGER_APPEND.subject, b"{not json")
    await bus.js.publish(topics.LEDGER_APPEND.subject, json.dumps({"kind": "nope"}).encode())
    good = _event("after the garbage")
    await bus.publish(topics.LEDGER_APPEND, good)
    seen: list[str] = []
    stop = asyncio.Event()

    async def handle(event: Event, _raw: object) -> None:
        seen.append(event.id)
        stop.set()

    await asyncio.wait_for(
        bus.consume(topics.LEDGER_APPEND, handle, durable="t1", stream="LEDGER", stop=stop), 10
    )
    assert seen == [good.id]
    dead = await bus.js.pull_subscribe("dead.evt.t1", durable="reader", stream="DEAD")
    letters = [json.loads(m.data) for m in await dead.fetch(2, timeout=5)]
    assert [x["reason"].split(":")[0] for x in letters] == ["undecodable", "undecodable"]
    assert letters[0]["data"] == "{not json" and "unknown event kind" in letters[1]["reason"]


async def test_failures_are_retried_then_dead_lettered(bus: Bus) -> None:
    await bus.publish(topics.LEDGER_APPEND, _event("flaky"))
    await bus.publish(topics.LEDGER_APPEND, _event("poison"))
    attempts: dict[str, int] = {}
    done = asyncio.Event()

    async def handle(event: Event, _raw: object) -> None:
        text = event.payload["text"]
        attempts[text] = attempts.get(text, 0) + 1
        if attempts.get("flaky") == 3 and attempts.get("poison") == 3:
            done.set()  # the loop stops after settling this message
        if text == "flaky" and attempts[text] < 3:
            raise Retryable("peer busy")
        if text == "poison":
            raise RuntimeError("always fails")

    task = asyncio.create_task(
        bus.consume(topics.LEDGER_APPEND, handle, durable="t2", stream="LEDGER", stop=done, max_deliver=3)
    )
    await asyncio.wait_for(task, 30)
    assert attempts == {"flaky": 3, "poison": 3}
    info = await bus.js.stream_info("DEAD")
    assert info.state.messages == 1


async def test_request_reply_carries_domain_errors_and_bad_requests(bus: Bus) -> None:
    async def handler(req: GetRequest) -> GetReply:
        if req.id == "missing":
            raise DomainError("not_found", "no such event")
        return GetReply()

    await bus.serve(topics.LEDGER_GET, handler)
    assert (await bus.request(topics.LEDGER_GET, GetRequest(id="x"))).event is None
    with pytest.raises(RemoteError) as err:
        await bus.request(topics.LEDGER_GET, GetRequest(id="missing"))
    assert err.value.code == "not_found"
    reply = await bus.nc.request(topics.LEDGER_GET.subject, b'{"id": 5, "extra": true}', timeout=2)
    assert json.loads(reply.data)["error"]["code"] == "bad_request"


async def test_a_request_nobody_answers_is_bus_unavailable(bus: Bus) -> None:
    with pytest.raises(BusUnavailable):
        await bus.request(topics.LEDGER_GET, GetRequest(id="x"), timeout=0.3)


async def test_a_consumer_survives_a_nats_restart(nats_server: NatsServer, bus: Bus) -> None:
    seen: set[str] = set()
    stop = asyncio.Event()

    async def handle(event: Event, _raw: object) -> None:
        seen.add(event.id)

    consumer = asyncio.create_task(
        bus.consume(topics.LEDGER_APPEND, handle, durable="t3", stream="LEDGER", stop=stop)
    )
    before = [_event(f"before {i}") for i in range(20)]
    for e in before:
        await bus.publish(topics.LEDGER_APPEND, e)
    await _until(lambda: len(seen) == 20)
    await asyncio.to_thread(nats_server.restart)
    after = [_event(f"after {i}") for i in range(20)]
    for e in after:
        await bus.publish(topics.LEDGER_APPEND, e)  # retries until the server is back
    await _until(lambda: len(seen) == 40, timeout=30)
    stop.set()
    await asyncio.wait_for(consumer, 10)
    assert seen == {e.id for e in before + after}
