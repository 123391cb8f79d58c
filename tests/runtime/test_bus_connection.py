"""``Bus`` against a real nats-server: dedup, stream ownership, request/reply."""

import asyncio
import json

import pytest

from delegate.contracts import topics
from delegate.contracts.messages import GetReply, GetRequest, UserInput
from delegate.contracts.streams import STREAMS
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus, BusUnavailable, DomainError, RemoteError
from tests.support.waiting import eventually

from .bus_support import event


async def test_a_retried_publish_is_stored_once(bus: Bus) -> None:
    e = event()
    first = await bus.publish(topics.ledger_append("test"), e)
    again = await bus.publish(topics.ledger_append("test"), e)
    assert again.duplicate and again.seq == first.seq
    assert (await bus.js.stream_info("LEDGER")).state.messages == 1


async def test_ensure_streams_is_idempotent(bus: Bus) -> None:
    await bus.ensure_streams(all_owners=True)
    names = {(await bus.js.stream_info(n)).config.name for n in ("LEDGER", "AGENT", "INNER", "DEAD")}
    assert names == {"LEDGER", "AGENT", "INNER", "DEAD"}


async def _stream_names(bus: Bus) -> set[str]:
    return {str(info.config.name) for info in await bus.js.streams_info()}


@pytest.mark.parametrize(
    ("service", "owned"),
    [
        ("ledger", {"LEDGER", "DEAD"}),
        ("agent:host-1:standby", {"AGENT"}),  # the role is the name before the first ':'
        ("inner-plane", {"INNER", "REMINDERS"}),
        ("gateway", set()),  # owns none: uses the others' streams, creates nothing
    ],
)
async def test_ensure_streams_creates_only_the_streams_its_role_owns(
    nats_server: NatsServer, service: str, owned: set[str]
) -> None:
    bus = await Bus.connect(nats_server.url, service)
    try:
        await bus.ensure_streams()
        assert await _stream_names(bus) == owned
        assert owned == {spec.name for spec in STREAMS if spec.owner == service.split(":")[0]}
    finally:
        await bus.close()


async def test_explicit_specs_are_ensured_whoever_owns_them(nats_server: NatsServer) -> None:
    bus = await Bus.connect(nats_server.url, "gateway")
    try:
        await bus.ensure_streams([spec for spec in STREAMS if spec.name == "AGENT"])
        assert await _stream_names(bus) == {"AGENT"}
    finally:
        await bus.close()


async def test_a_publish_before_the_owner_created_the_stream_waits_for_it(nats_server: NatsServer) -> None:
    gateway = await Bus.connect(nats_server.url, "gateway")
    agent = await Bus.connect(nats_server.url, "agent")
    try:
        sent = gateway.nc.stats["out_msgs"]
        command = UserInput(text="hello", client_msg_id="m1")
        publish = asyncio.create_task(gateway.publish(topics.AGENT_INPUT, command))
        # JetStream answered "no stream" at least once: the publish is retrying, not done.
        def retried() -> bool:
            assert not publish.done(), publish
            return bool(gateway.nc.stats["out_msgs"] >= sent + 2)

        await eventually(retried, "the publish to try a second time", interval=0.01)
        await agent.ensure_streams()  # the owner starts
        ack = await asyncio.wait_for(publish, 30)
        assert ack.stream == "AGENT" and ack.seq == 1
    finally:
        await gateway.close()
        await agent.close()


async def test_a_publish_to_a_stream_nobody_creates_gives_up_at_its_deadline(nats_server: NatsServer) -> None:
    gateway = await Bus.connect(nats_server.url, "gateway")
    try:
        with pytest.raises(BusUnavailable, match="NoStreamResponse"):
            await gateway.publish(topics.ledger_append("gateway"), event(), deadline=0.3)
    finally:
        await gateway.close()


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
