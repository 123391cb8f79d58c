"""NATS itself enforces the role table: against a real nats-server with authentication on.

Each role logs in as delegate.runtime.credentials would (its user, its password, its inbox
prefix). A denial is proven by the server's own answer (a permissions violation naming the
subject), never by a message that failed to arrive.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext

from delegate.contracts import streams, subjects, topics
from delegate.contracts.roles import ROLES
from delegate.launcher.procs import NatsServer
from delegate.runtime.credentials import NatsCredentials, connect_options
from tests.support.nats import require_nats_binary, start_nats
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


class Identity:
    """One role's connection, recording the errors the server reports to it."""

    def __init__(self, nc: Client, errors: list[str]) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=5.0)
        self.errors = errors

    async def denied(self, verb: str, subject: str) -> None:
        """Wait until the server says ``verb`` (publish/subscription) to ``subject`` is not allowed."""
        wanted = f'permissions violation for {verb} to "{subject}"'

        await eventually(lambda: any(wanted.lower() in e.lower() for e in self.errors),
                         f"the server to refuse: {wanted}", 10, explain=lambda: f"errors: {self.errors}")


async def connect(server: NatsServer, role: str, *, password: str | None = None) -> Identity:
    user = server.user(role)
    assert user is not None
    creds = NatsCredentials(nats_user=role, nats_password=password or user.password)
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await nats.connect(
        server.address, name=role, **connect_options(role, creds), error_cb=on_error,
        allow_reconnect=False, connect_timeout=2,
    )
    return Identity(nc, errors)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    require_nats_binary()
    srv = start_nats(tmp_path / "nats", auth=True)
    # The test identity makes every stream, as their owners would.
    admin = await nats.connect(srv.url)
    js = admin.jetstream()
    for spec in streams.STREAMS:
        await js.add_stream(StreamConfig(name=spec.name, subjects=list(spec.subjects), storage=StorageType.FILE))
    await admin.close()
    yield srv
    srv.stop()


@pytest.fixture
async def admin(server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(server.url)
    yield nc
    await nc.close()


async def test_a_connection_without_credentials_is_refused(server: NatsServer) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(server.address, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)


async def test_a_wrong_password_is_refused(server: NatsServer) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await connect(server, "gateway", password="not-the-password")


async def test_only_the_agent_may_publish_agent_authored_events(server: NatsServer) -> None:
    agent = await connect(server, "agent")
    ack = await agent.js.publish(topics.ledger_append("agent").subject, b"{}")
    assert ack.stream == "LEDGER"
    for role in ROLES.keys() - {"agent"}:
        other = await connect(server, role)
        await other.nc.publish(topics.ledger_append("agent").subject, b"{}")
        await other.denied("publish", topics.ledger_append("agent").subject)
        # ... while its own subject is fine: the pub ack comes back on its own inbox prefix
        ack = await other.js.publish(topics.ledger_append(role).subject, b"{}")
        assert ack.stream == "LEDGER"
        await other.nc.close()
    await agent.nc.close()


async def test_no_role_may_read_another_roles_replies(server: NatsServer) -> None:
    for role in ROLES:
        ident = await connect(server, role)
        other = "_INBOX_agent.>" if role != "agent" else "_INBOX_gateway.>"
        await ident.nc.subscribe(other)
        await ident.denied("subscription", other)
        await ident.nc.close()


@pytest.mark.parametrize(
    ("role", "verb", "subject"),
    [
        ("gateway", "publish", subjects.TOOLS_CALL),  # the MCP file tools, texting the owner
        ("gateway", "publish", f"$JS.API.STREAM.CREATE.{'AGENT'}"),  # a stream it does not own
        ("gateway", "publish", "$JS.API.STREAM.MSG.GET.LEDGER"),  # the whole history, raw
        ("ledger", "publish", subjects.AGENT_INPUT),
        ("ledger", "publish", subjects.TOOLS_CALL),
        ("agent", "publish", "$JS.API.STREAM.DELETE.LEDGER"),
        ("agent", "publish", subjects.AGENT_COMPACT),  # it serves it; only the gateway asks
        ("inner-plane", "publish", subjects.TOOLS_CALL),
        ("inner-plane", "publish", "$JS.API.CONSUMER.MSG.NEXT.LEDGER.ledger-writer"),
        ("voice", "publish", subjects.AGENT_INPUT),
        ("voice", "subscription", subjects.LEDGER_COMMITTED),
        ("pollers", "publish", subjects.LEDGER_PAGE),
        ("pollers", "subscription", subjects.AGENT_DELTA),
    ],
)
async def test_each_role_is_denied_what_is_not_its_own(server: NatsServer, role: str, verb: str, subject: str) -> None:
    ident = await connect(server, role)
    if verb == "publish":
        await ident.nc.publish(subject, b"{}", reply=f"_INBOX_{role.replace('-', '_')}.x")
    else:
        await ident.nc.subscribe(subject)
    await ident.denied(verb, subject)
    await ident.nc.close()


async def _drain_one(js: JetStreamContext, stream: str, durable: str, subject: str) -> bytes:
    """Create the durable, pull one message, ack it: what the service consumers do."""
    psub = await js.pull_subscribe(subject, durable=durable, stream=stream)
    [msg] = await psub.fetch(1, timeout=5)
    await msg.ack_sync()
    return bytes(msg.data)


async def test_the_ledger_owns_its_streams_consumes_appends_and_answers(server: NatsServer, admin: Client) -> None:
    ledger = await connect(server, "ledger")
    info = await ledger.js.update_stream(
        StreamConfig(name="LEDGER", subjects=[subjects.LEDGER_ALL], storage=StorageType.FILE, max_age=3600)
    )
    assert info.config.max_age == 3600
    await admin.jetstream().publish(topics.ledger_append("test").subject, b'{"n": 1}')
    assert await _drain_one(ledger.js, "LEDGER", streams.LEDGER_WRITER, subjects.LEDGER_APPEND_ANY) == b'{"n": 1}'
    ack = await ledger.js.publish(subjects.dead_letter(streams.LEDGER_WRITER), b"{}")
    assert ack.stream == "DEAD"

    async def page(msg: Msg) -> None:
        await msg.respond(b'{"page": []}')

    await ledger.nc.subscribe(subjects.LEDGER_PAGE, cb=page)
    await ledger.nc.flush()
    gateway = await connect(server, "gateway")
    reply = await gateway.nc.request(subjects.LEDGER_PAGE, b"{}", timeout=5)  # allow_responses
    assert json.loads(reply.data) == {"page": []}
    await gateway.nc.close()
    await ledger.nc.close()


async def test_the_agent_consumes_input_holds_its_lease_and_serves_tools(server: NatsServer, admin: Client) -> None:
    agent = await connect(server, "agent")
    gateway = await connect(server, "gateway")
    ack = await gateway.js.publish(subjects.AGENT_INPUT, b'{"text": "hi"}')
    assert ack.stream == "AGENT"
    raw = await gateway.js.get_msg("AGENT", ack.seq)  # the original of a duplicate
    assert raw.data == b'{"text": "hi"}'
    assert await _drain_one(agent.js, "AGENT", streams.AGENT_WORKER, subjects.AGENT_INPUT) == b'{"text": "hi"}'

    kv = await agent.js.create_key_value(bucket=subjects.AGENT_LEASE_BUCKET, ttl=5, history=1)
    revision = await kv.create("leader", b"me")
    assert (await kv.get("leader")).revision == revision
    await agent.js.consumer_info("AGENT", streams.AGENT_WORKER)

    async def tools(msg: Msg) -> None:
        await msg.respond(b'{"tools": []}')

    await agent.nc.subscribe(subjects.TOOLS_LIST, cb=tools)
    await agent.nc.flush()
    voice = await connect(server, "voice")
    assert json.loads((await voice.nc.request(subjects.TOOLS_LIST, b"{}", timeout=5)).data) == {"tools": []}
    for ident in (voice, gateway, agent):
        await ident.nc.close()


async def test_the_gateway_keeps_sign_in_sessions_in_its_bucket(server: NatsServer) -> None:
    gateway = await connect(server, "gateway")
    kv = await gateway.js.create_key_value(bucket=subjects.GATEWAY_SESSIONS_BUCKET, ttl=60)
    await kv.put("s1", b"{}")
    await kv.put("s2", b"{}")
    assert (await kv.get("s1")).value == b"{}"
    assert sorted(await kv.keys()) == ["s1", "s2"]  # a watch: an ordered consumer on the bucket
    await kv.delete("s1")
    await kv.purge("s2")
    with pytest.raises(nats.js.errors.NoKeysError):
        await kv.keys()
    await gateway.nc.close()
    # ... and nobody else may read it
    agent = await connect(server, "agent")
    await agent.nc.publish(f"$JS.API.DIRECT.GET.KV_{subjects.GATEWAY_SESSIONS_BUCKET}", b"{}")
    await agent.denied("publish", f"$JS.API.DIRECT.GET.KV_{subjects.GATEWAY_SESSIONS_BUCKET}")
    await agent.nc.close()


async def test_the_inner_plane_consumes_signals_and_dead_letters(server: NatsServer, admin: Client) -> None:
    inner = await connect(server, "inner-plane")
    await admin.jetstream().publish(subjects.INNER_SIGNAL, b'{"s": 1}')
    assert await _drain_one(inner.js, "INNER", streams.INNER_BROKER, subjects.INNER_SIGNAL) == b'{"s": 1}'
    assert (await inner.js.publish(subjects.dead_letter(streams.INNER_BROKER), b"{}")).stream == "DEAD"
    assert (await inner.js.publish(subjects.AGENT_INPUT, b"{}")).stream == "AGENT"  # activations
    await inner.nc.close()


async def test_voice_and_pollers_do_their_own_work(server: NatsServer) -> None:
    voice = await connect(server, "voice")
    kv = await voice.js.create_key_value(bucket=subjects.VOICE_LEASE_BUCKET, ttl=5, history=1)
    assert await kv.create("leader", b"voice") >= 1
    await voice.nc.close()
    pollers = await connect(server, "pollers")
    done = asyncio.Event()

    async def pong(msg: Msg) -> None:
        await msg.respond(b"{}")
        done.set()

    await pollers.nc.subscribe(subjects.POLLERS_PING, cb=pong)
    await pollers.nc.flush()
    gateway = await connect(server, "gateway")
    await gateway.nc.publish(subjects.POLLERS_PING, b"{}")  # the gateway pings only ledger and agent
    await gateway.denied("publish", subjects.POLLERS_PING)
    await gateway.nc.close()
    admin = await nats.connect(server.url)
    await admin.request(subjects.POLLERS_PING, b"{}", timeout=5)
    await done.wait()
    await admin.close()
    await pollers.nc.close()
