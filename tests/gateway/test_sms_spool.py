"""An inbound SMS is never lost: the gateway's spool, with NATS stopped and the gateway killed.

Twilio does not retry a webhook that got an HTTP error, so every signed webhook is answered
200 once its messages are in the gateway's local spool, and a background task delivers them
when NATS is back. The whole system runs as real processes (nats-server, ledger, agent,
pollers, two gateways), with the OpenAI stand-in answering and the Twilio stand-in receiving
the replies; Twilio's side is played by signing requests as it does (tests/support).
"""

import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from delegate.contracts import subjects, topics
from delegate.contracts.messages import QueryRequest
from delegate.contracts.streams import POLLERS_SMS
from delegate.launcher.procs import NatsServer, free_port
from delegate.runtime.bus import Bus, BusUnavailable
from tests.support.nats import role_url
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System, module_system
from tests.support.twilio_sign import twilio_signature
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually

from .helpers import PATIENT_S, gateway_context, gateway_settings, running_gateway, stream_messages
from .test_sms_webhooks import OWNER, PUBLIC, is_twiml_ack, sms_params

pytestmark = pytest.mark.integration

N = 20
AMD_SESSION, AMD_CALL = "0193f0a2-7b1c-7d3e-9f00-5e55c0de5002", "CA" + "d" * 32


def sid(tag: int, n: int) -> str:
    return f"SM{tag:02x}{n:030x}"


@dataclass
class Phone:
    system: System
    twilio: TwilioStandin

    async def post(self, gateway: str, path: str, params: dict[str, str]) -> httpx.Response:
        """POST a form to one gateway instance, signed over the public URL as Twilio does."""
        signature = twilio_signature(self.twilio.auth_token, PUBLIC + path, params)
        headers = {"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature}
        async with httpx.AsyncClient(base_url=self.system.http_of(gateway), timeout=30) as c:
            return await c.post(path, content=urlencode(params), headers=headers)

    async def sms(self, gateway: str, message_sid: str) -> httpx.Response:
        return await self.post(gateway, "/sms", sms_params(message_sid, body=f"note {message_sid[-4:]}"))

    def replies(self, answer_ids: set[str]) -> list[str]:
        """The answers among ``answer_ids`` sent to Twilio, once per message create (by the
        StatusCallback the pollers name each with: ``parent=<answer id>``)."""
        sent = []
        for create in self.twilio.creates():
            query = parse_qs(urlsplit(create.form.get("StatusCallback", [""])[0]).query)
            sent += [p for p in query.get("parent", []) if p in answer_ids]
        return sent


@pytest.fixture(scope="module")
def phone(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
          module_standin: StandinProcess) -> Iterator[Phone]:
    twilio = TwilioStandin().start()
    env = {
        "OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": module_standin.base_url, "OPENAI_MAX_RETRIES": "1",
        **twilio.env(owner_phone=OWNER), "PUBLIC_BASE_URL": PUBLIC,
    }
    try:
        with module_system(tmp_path_factory.mktemp("sms-spool"), request,
                           "ledger", "agent", "pollers", "gateway", env=env, separate=("gateway",)) as system:
            system.start_one("gateway", "gateway-2", env={"DELEGATE_PORT": str(free_port())})
            system.wait_ready(["gateway-2"])
            yield Phone(system, twilio)
    finally:
        twilio.stop()


@pytest.fixture
async def probe(phone: Phone) -> AsyncIterator[Bus]:
    assert phone.system.nats is not None
    bus = await Bus.connect(phone.system.nats.url, "test-probe")
    yield bus
    await bus.close()


async def ledger(bus: Bus, kind: str) -> list[dict[str, Any]]:
    """The ledger's events of ``kind``; none while it is not answering (NATS just restarted)."""
    try:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=[kind], limit=5000), timeout=10)
    except BusUnavailable:
        return []
    return [e.model_dump(mode="json") for e in reply.events]


async def deliveries(bus: Bus, outbox_id: str) -> list[dict[str, Any]]:
    return [e for e in await ledger(bus, "delivery") if e["payload"]["outbox_id"] == outbox_id]


async def stored_and_answered_once(phone: Phone, bus: Bus, sids: list[str]) -> None:
    """Each SMS is one user message in the ledger and has one answer, sent to Twilio once."""
    inputs = {f"sms-{s}" for s in sids}

    async def all_answered() -> bool:
        answers = [e for e in await ledger(bus, "message") if e["role"] == "assistant" and e["parent_id"] in inputs]
        return len(answers) >= len(sids)

    await eventually(all_answered, f"answers to all {len(sids)} SMS", 90)
    messages = await ledger(bus, "message")
    users = [e["id"] for e in messages if e["role"] == "user" and e["id"] in inputs]
    assert sorted(users) == sorted(inputs)  # each stored once
    answers = [e for e in messages if e["role"] == "assistant" and e["parent_id"] in inputs]
    assert sorted(e["parent_id"] for e in answers) == sorted(inputs)  # each answered once
    answer_ids = {e["id"] for e in answers}

    async def outbox_idle() -> bool:
        info = await bus.js.consumer_info("CHANNELS", POLLERS_SMS)
        return len(phone.replies(answer_ids)) >= len(sids) and not info.num_pending and not info.num_ack_pending

    await eventually(outbox_idle, "every answer sent to Twilio", 60)
    assert sorted(phone.replies(answer_ids)) == sorted(answer_ids)  # and sent once


def spool_rows(system: System, instance: str) -> int:
    """Rows left in a gateway's spool file (its default place under the runtime dir)."""
    path = system.runtime / "spool" / f"{instance}.sqlite"
    with sqlite3.connect(path) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM outgoing").fetchone()
    return int(rows)


async def test_sms_and_callbacks_posted_while_nats_is_down_are_all_answered_then_stored_and_answered_once(
    phone: Phone, probe: Bus
) -> None:
    system = phone.system
    assert system.nats is not None
    sids = [sid(1, n) for n in range(N)]
    system.nats.stop()
    try:
        # Half to each gateway, as a load balancer spreads them; each is retried on the other
        # gateway too (Twilio retrying a slow answer): both spools hold it, JetStream keeps one.
        answers = []
        for n, message_sid in enumerate(sids):
            first, second = ("gateway", "gateway-2") if n % 2 else ("gateway-2", "gateway")
            answers.append(await phone.sms(first, message_sid))
            if n < 5:
                answers.append(await phone.sms(second, message_sid))
        status = await phone.post(
            "gateway", "/sms/status?outbox=ob-spool-1&parent=ans-1",
            {"MessageSid": sid(9, 1), "MessageStatus": "delivered", "AccountSid": "AC" + "b" * 32},
        )
        # The answering-machine verdict on a call voice placed: a callback Twilio does not retry.
        amd = await phone.post(
            "gateway-2", f"/call/amd?session={AMD_SESSION}",
            {"AccountSid": "AC" + "b" * 32, "CallSid": AMD_CALL, "AnsweredBy": "machine_end_beep",
             "MachineDetectionDuration": "4200"},
        )
    finally:
        system.nats.start()
    assert all(is_twiml_ack(r) for r in answers), [(r.status_code, r.text) for r in answers if r.status_code != 200]
    assert len(answers) == N + 5
    assert is_twiml_ack(status), status.text
    assert amd.status_code == 204, amd.text

    await stored_and_answered_once(phone, probe, sids)

    async def status_recorded() -> bool:
        return bool(await deliveries(probe, "ob-spool-1"))

    await eventually(status_recorded, "the spooled status callback in the ledger", 20)
    assert [e["payload"]["status"] for e in await deliveries(probe, "ob-spool-1")] == ["delivered"]

    async def verdict_kept() -> bool:
        return any(json.loads(m).get("call_sid") == AMD_CALL for m in await stream_messages(probe, "CHANNELS"))

    await eventually(verdict_kept, "the spooled answering-machine verdict on stream CHANNELS", 20)
    verdicts = [json.loads(m) for m in await stream_messages(probe, "CHANNELS")]
    assert [(v["session_id"], v["answered_by"]) for v in verdicts if v.get("call_sid") == AMD_CALL] == [
        (AMD_SESSION, "machine_end_beep")]
    assert spool_rows(system, "gateway") == spool_rows(system, "gateway-2") == 0


async def test_a_gateway_killed_before_its_spool_drained_delivers_everything_once_on_its_next_start(
    phone: Phone, probe: Bus
) -> None:
    system = phone.system
    assert system.nats is not None
    sids = [sid(2, n) for n in range(N)]
    session = "0193f0a2-7b1c-7d3e-9f00-5e55c0de5001"
    system.nats.stop()
    try:
        answers = [await phone.sms("gateway", s) for s in sids]
        hangup = await phone.post(
            "gateway", f"/call/status?session={session}", {"CallSid": "CA" + "c" * 32, "CallStatus": "completed"}
        )
        assert spool_rows(system, "gateway") == N + 1  # on disk before the answers, not yet on the bus
        system.kill("gateway")  # SIGKILL: no shutdown code runs
    finally:
        system.nats.start()
    assert all(is_twiml_ack(r) for r in answers), [(r.status_code, r.text) for r in answers if r.status_code != 200]
    assert hangup.status_code == 204, hangup.text

    # The voice session's live subject, listened to before the restarted gateway can deliver to it.
    heard: list[dict[str, Any]] = []

    async def on_voice_in(msg: Any) -> None:
        heard.append(json.loads(msg.data))

    await eventually(lambda: probe.nc.is_connected, "the probe to reconnect", 20)
    await probe.nc.subscribe(subjects.voice_in(session), cb=on_voice_in)
    await probe.nc.flush()  # the server has the subscription before the gateway can deliver
    system.procs["gateway"].start()
    system.wait_ready(["gateway"])

    await stored_and_answered_once(phone, probe, sids)
    async def hung_up() -> bool:
        return bool(heard)

    await eventually(hung_up, "the spooled hang-up", 20)
    assert heard == [{"type": "hangup", "reason": "completed"}]
    assert spool_rows(system, "gateway") == 0


# ---- the spool's own limits, on an in-process gateway -------------------------------------------


def spool_settings(nats_server: NatsServer, root: Path, **overrides: Any) -> Any:
    (root / "client").mkdir(exist_ok=True)
    return gateway_settings(
        role_url(nats_server, "gateway"), root, public_base_url=PUBLIC, twilio_auth_token="spool-token",
        owner_phone=OWNER, **overrides,
    )


async def post_sms(http: str, message_sid: str) -> httpx.Response:
    params = sms_params(message_sid)
    headers = {"Content-Type": "application/x-www-form-urlencoded",
               "X-Twilio-Signature": twilio_signature("spool-token", PUBLIC + "/sms", params)}
    async with httpx.AsyncClient(base_url=http, timeout=30) as c:
        return await c.post("/sms", content=urlencode(params), headers=headers)


async def agent_inputs(bus: Bus) -> list[str]:
    info = await bus.js.stream_info("AGENT")
    ids = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1) if info.state.messages else ():
        msg = await bus.js.get_msg("AGENT", seq)
        if msg.subject == topics.AGENT_INPUT.subject and msg.data:
            ids.append(json.loads(msg.data)["id"])
    return ids


async def test_a_full_spool_refuses_with_503_spool_full_and_takes_messages_again_once_drained(
    nats_server: NatsServer, bus: Bus, tmp_path: Path
) -> None:
    async with running_gateway(spool_settings(nats_server, tmp_path, gateway_spool_max_rows=3)) as gw:
        nats_server.stop()
        try:
            kept = [await post_sms(gw.http, sid(3, n)) for n in range(3)]
            full = await post_sms(gw.http, sid(3, 3))
        finally:
            nats_server.start()
        assert all(is_twiml_ack(r) for r in kept)
        # The one case where a non-2xx is right: Twilio then tries the number's fallback URL.
        assert full.status_code == 503 and full.json()["error"]["code"] == "spool_full", full.text
        courier = gateway_context(gw).courier
        await eventually(lambda: courier.backlog == 0, "the spool to drain", 30)
        assert is_twiml_ack(await post_sms(gw.http, sid(3, 4)))
        await eventually(lambda: courier.backlog == 0, "the spool to drain", 30)
    assert await agent_inputs(bus) == [f"sms-{sid(3, n)}" for n in (0, 1, 2, 4)]


async def test_a_spool_that_cannot_be_written_refuses_with_503_and_the_gateway_still_serves(
    nats_server: NatsServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "not-a-dir").write_text("a file where the spool's folder should be")
    settings = spool_settings(nats_server, tmp_path, gateway_spool_path=tmp_path / "not-a-dir" / "spool.sqlite")
    async with running_gateway(settings) as gw:
        r = await post_sms(gw.http, sid(4, 1))
        assert r.status_code == 503 and r.json()["error"]["code"] == "spool_unavailable", r.text
        async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as c:
            assert (await c.get("/healthz")).status_code == 200
    assert await agent_inputs(bus) == []


async def test_without_a_spool_an_sms_is_published_before_the_answer(
    nats_server: NatsServer, bus: Bus, tmp_path: Path
) -> None:
    """GATEWAY_SPOOL=false (a gateway without a writable disk): the answer waits for JetStream's ack."""
    async with running_gateway(spool_settings(nats_server, tmp_path, gateway_spool=False)) as gw:
        assert is_twiml_ack(await post_sms(gw.http, sid(5, 1)))
        assert await agent_inputs(bus) == [f"sms-{sid(5, 1)}"]  # no wait: it was stored before the 200
    assert not (tmp_path / "runtime-data" / "spool").exists()


async def test_spooled_rows_survive_a_restart_of_an_in_process_gateway_and_keep_their_order(
    nats_server: NatsServer, bus: Bus, tmp_path: Path
) -> None:
    settings = spool_settings(nats_server, tmp_path)
    nats_server.stop()
    try:
        async with running_gateway(settings, wait_for_bus=False) as gw:
            answers = [await post_sms(gw.http, sid(6, n)) for n in range(5)]
    finally:
        nats_server.start()
    assert all(is_twiml_ack(r) for r in answers)
    async with running_gateway(settings) as gw:
        courier = gateway_context(gw).courier
        await eventually(lambda: courier.backlog == 0, "the spool to drain", 30)
    assert await agent_inputs(bus) == [f"sms-{sid(6, n)}" for n in range(5)]
