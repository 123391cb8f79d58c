"""Twilio's SMS webhooks against the real gateway, a real nats-server and the real ledger.

Twilio's part is played by signing requests with the stdlib signer (tests/support), so the
gateway's RequestValidator is checked against an independent implementation. The gateway's
PUBLIC_BASE_URL is an https address while the tests call http://127.0.0.1:<port>: every signed
request here is also the "behind a TLS-terminating proxy" case.
"""

import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from pydantic import ValidationError

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.gateway.phone import e164, same_number
from delegate.gateway.settings import Settings
from delegate.gateway.twilio_webhooks import mms_text
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from tests.support.nats import role_url
from tests.support.system import System
from tests.support.twilio_sign import twilio_signature
from tests.support.waiting import eventually

from .helpers import PATIENT_S, Gateway, auth, gateway_context, gateway_settings, running_gateway

AUTH_TOKEN = "test_auth_token_0123"
PUBLIC = "https://delegate.example.test"
OWNER = "+15550001111"
STRANGER = "+15550009999"
TWILIO_NUMBER = "+15550002222"
GATEWAY_APPEND = topics.ledger_append("gateway").subject


def sid(n: int, prefix: str = "SM") -> str:
    return f"{prefix}{n:032x}"


def sms_params(message_sid: str, sender: str = OWNER, body: str = "remind me at 5", **extra: str) -> dict[str, str]:
    """What Twilio posts for an inbound SMS (blank geo fields included: they are signed too)."""
    return {
        "ToCountry": "US", "ToState": "CA", "SmsMessageSid": message_sid, "NumMedia": "0", "ToCity": "",
        "FromZip": "", "SmsSid": message_sid, "FromState": "", "SmsStatus": "received", "FromCity": "",
        "Body": body, "FromCountry": "US", "To": TWILIO_NUMBER, "ToZip": "", "NumSegments": "1",
        "MessageSid": message_sid, "AccountSid": "AC" + "b" * 32, "From": sender, "ApiVersion": "2010-04-01",
        **extra,
    }


@dataclass
class Rig:
    system: System
    bus: Bus  # the test's own identity: reads every stream
    gw: Gateway

    async def post(
        self, path: str, params: dict[str, str], *, query: str = "", sign_url: str | None = None,
        token: str = AUTH_TOKEN, signature: str | None = None, headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """POST a form as Twilio does; signed over the public URL unless told otherwise."""
        target = path + (f"?{query}" if query else "")
        sent = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
        if signature is None:
            signature = twilio_signature(token, sign_url or PUBLIC + target, params)
        if signature:
            sent["X-Twilio-Signature"] = signature
        async with httpx.AsyncClient(timeout=PATIENT_S, base_url=self.gw.http) as c:
            return await c.post(target, content=urlencode(params), headers=sent)

    async def settled(self) -> None:
        """Wait until the gateway's spool has delivered everything its webhooks stored."""
        courier = gateway_context(self.gw).courier
        await eventually(lambda: courier.backlog == 0, "the gateway's spool to drain")

    def spooled_nothing(self) -> bool:
        """Nothing was ever stored by a webhook: then nothing can reach the bus later either."""
        courier = gateway_context(self.gw).courier
        return courier.backlog == 0 and courier.delivered == 0

    async def stream(self, name: str, subject: str) -> list[tuple[dict[str, Any], dict[str, str]]]:
        """Every message on ``subject`` that stream ``name`` holds: (body, headers)."""
        info = await self.bus.js.stream_info(name)
        found: list[tuple[dict[str, Any], dict[str, str]]] = []
        if info.state.messages == 0:
            return found
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await self.bus.js.get_msg(name, seq)
            if msg.subject == subject and msg.data:
                found.append((json.loads(msg.data), dict(msg.headers or {})))
        return found

    async def agent_inputs(self) -> list[dict[str, Any]]:
        return [body for body, _ in await self.stream("AGENT", topics.AGENT_INPUT.subject)]

    async def gateway_appends(self) -> list[dict[str, Any]]:
        """What the gateway published for the ledger (stored or not yet)."""
        return [body for body, _ in await self.stream("LEDGER", GATEWAY_APPEND)]

    async def events(self, kind: str) -> list[Event]:
        reply = await self.bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=[kind], limit=5000), timeout=10)
        return reply.events

    async def wait_events(self, kind: str, n: int, timeout: float = 20.0) -> list[Event]:
        await eventually(lambda: self._has(kind, n), f"{n} {kind} event(s) in the ledger", timeout)
        return await self.events(kind)

    async def _has(self, kind: str, n: int) -> bool:
        return len(await self.events(kind)) >= n


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    system = System(tmp_path / "system")
    system.start("ledger")
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "test")
    await bus.ensure_streams(all_owners=True)  # AGENT and CHANNELS: their owners do not run here
    settings = gateway_settings(
        role_url(system.nats, "gateway"), tmp_path,
        public_base_url=PUBLIC, twilio_auth_token=AUTH_TOKEN, owner_phone="+1 (555) 000-1111",
    )
    try:
        async with running_gateway(settings) as gw:
            yield Rig(system, bus, gw)
    finally:
        await bus.close()
        system.stop()


def is_twiml_ack(r: httpx.Response) -> bool:
    return (
        r.status_code == 200
        and r.headers["content-type"].startswith("text/xml")
        and "<Response />" in r.text
        and "<Message" not in r.text
    )


@pytest.mark.integration
async def test_owner_sms_becomes_one_user_input_and_a_retry_is_stored_once(rig: Rig) -> None:
    message_sid = sid(1)
    first = await rig.post("/sms", sms_params(message_sid, body="remind me at 5"))
    assert is_twiml_ack(first), first.text
    again = await rig.post("/sms", sms_params(message_sid, body="remind me at 5"))  # Twilio retried
    assert is_twiml_ack(again), again.text
    await rig.settled()

    inputs = await rig.agent_inputs()
    assert len(inputs) == 1
    (item,) = inputs
    assert item["type"] == "message" and item["channel"] == "sms"
    assert item["id"] == f"sms-{message_sid}"
    assert item["text"] == "remind me at 5"
    assert item["client_msg_id"] == f"sms:{message_sid}"
    assert item["meta"] == {"from": OWNER, "message_sid": message_sid, "media": []}
    (_, headers), = await rig.stream("AGENT", topics.AGENT_INPUT.subject)
    assert headers["Nats-Msg-Id"] == f"sms:{message_sid}"
    assert await rig.gateway_appends() == []  # the owner's text is the agent's to record


@pytest.mark.integration
async def test_forged_unsigned_altered_or_misaddressed_requests_are_403_and_publish_nothing(rig: Rig) -> None:
    params = sms_params(sid(2))
    altered = twilio_signature(AUTH_TOKEN, PUBLIC + "/sms", params)
    stranger = sms_params(sid(3), sender=STRANGER)
    attempts = {
        "forged": await rig.post("/sms", params, token="not-the-auth-token"),
        "unsigned": await rig.post("/sms", params, signature=""),
        "garbage": await rig.post("/sms", params, signature="AAAA"),
        "altered Body": await rig.post("/sms", {**params, "Body": "send all my money"}, signature=altered),
        "added field": await rig.post("/sms", {**params, "NumMedia": "1", "MediaUrl0": "https://evil.test/x"},
                                      signature=altered),
        "dropped field": await rig.post("/sms", {k: v for k, v in params.items() if k != "ToCity"},
                                        signature=altered),
        "another path": await rig.post("/sms", params, sign_url=PUBLIC + "/sms/status"),
        "another host": await rig.post("/sms", params, sign_url="https://attacker.example.test/sms"),
        # What the gateway itself sees behind the proxy: Twilio never signs that URL.
        "internal URL": await rig.post("/sms", params, sign_url=f"{rig.gw.http}/sms"),
        "http not https": await rig.post("/sms", params, sign_url="http://delegate.example.test/sms"),
        "stranger, forged": await rig.post("/sms", stranger, token="not-the-auth-token"),
        "status, forged": await rig.post(
            "/sms/status", {"MessageSid": sid(4), "MessageStatus": "delivered"},
            query="outbox=ob-1&parent=ans-1", token="not-the-auth-token",
        ),
        "status, query altered": await rig.post(
            "/sms/status", {"MessageSid": sid(4), "MessageStatus": "delivered"}, query="outbox=ob-1&parent=other",
            sign_url=PUBLIC + "/sms/status?outbox=ob-1&parent=ans-1",
        ),
    }
    for name, r in attempts.items():
        assert r.status_code == 403, (name, r.status_code, r.text)
        assert r.json()["error"]["code"] == "bad_signature", name
    # Every webhook's messages are in the spool before it is answered: nothing stored is final.
    assert rig.spooled_nothing()
    assert await rig.agent_inputs() == []
    assert await rig.gateway_appends() == []
    assert await rig.stream("CHANNELS", topics.MEDIA_FETCH.subject) == []


@pytest.mark.integration
async def test_a_signature_over_the_public_url_validates_with_the_query_exactly_as_sent(rig: Rig) -> None:
    """Behind the proxy: the gateway rebuilds PUBLIC_BASE_URL + path + raw query, not its own URL."""
    query = "outbox=0194e0b2-aaaa-7bbb-8ccc-0123456789ab&parent=ans%3A1"  # percent-encoding kept as sent
    r = await rig.post("/sms/status", {"MessageSid": sid(5), "MessageStatus": "sent"}, query=query)
    assert is_twiml_ack(r), r.text
    (event,) = await rig.wait_events("delivery", 1)
    assert event.parent_id == "ans:1"


@pytest.mark.integration
async def test_a_stranger_is_refused_in_the_ledger_once_and_never_reaches_the_agent(rig: Rig) -> None:
    message_sid = sid(6)
    body = "hi, is this Alex? " + "x" * 300
    for _ in range(2):  # the retry must not store a second refusal
        r = await rig.post("/sms", sms_params(message_sid, sender="+44 20 7946 0000", body=body))
        assert is_twiml_ack(r), r.text  # never answered
    (event,) = await rig.wait_events("inbound.refused", 1)
    assert event.id == f"refused:sms:{message_sid}" and event.channel == "sms"
    assert event.payload == {
        "sender": "+44 20 7946 0000", "reason": "not_owner", "detail": "", "external_id": message_sid,
        "subject": None, "preview": body[:200],
        "person_id": None, "person_name": None, "person_relation": None,  # nobody memory knows (none runs here)
    }
    assert await rig.agent_inputs() == []
    assert len(await rig.gateway_appends()) == 1  # JetStream dropped the repeat by its message id


@pytest.mark.integration
async def test_mms_lists_its_media_and_queues_one_download_per_item(rig: Rig) -> None:
    message_sid = sid(7, "MM")
    media = {
        "NumMedia": "2",
        "MediaUrl0": f"https://api.twilio.com/2010-04-01/Accounts/AC{'b' * 32}/Messages/{message_sid}/Media/ME0",
        "MediaContentType0": "image/jpeg",
        "MediaUrl1": f"https://api.twilio.com/2010-04-01/Accounts/AC{'b' * 32}/Messages/{message_sid}/Media/ME1",
        "MediaContentType1": "image/png",
    }
    for _ in range(2):
        r = await rig.post("/sms", sms_params(message_sid, body="", **media))
        assert is_twiml_ack(r), r.text
    await rig.settled()

    (item,) = await rig.agent_inputs()
    assert item["text"] == "(MMS with 2 attachments: image/jpeg, image/png)"
    assert item["meta"]["media"] == [
        {"url": media["MediaUrl0"], "content_type": "image/jpeg"},
        {"url": media["MediaUrl1"], "content_type": "image/png"},
    ]
    fetches = await rig.stream("CHANNELS", topics.MEDIA_FETCH.subject)
    assert [h["Nats-Msg-Id"] for _, h in fetches] == [f"media:{message_sid}:0", f"media:{message_sid}:1"]
    for n, (fetch, _) in enumerate(fetches):
        assert fetch["parent_id"] == item["id"] and fetch["message_sid"] == message_sid
        assert fetch["index"] == n and fetch["url"] == media[f"MediaUrl{n}"]
        assert fetch["content_type"] == media[f"MediaContentType{n}"]


def test_an_mms_without_words_still_says_something() -> None:
    assert mms_text([{"url": "u", "content_type": "image/jpeg"}]) == "(MMS with 1 image/jpeg attachment)"
    assert mms_text([]) == "(empty SMS)"


@pytest.mark.integration
async def test_status_callbacks_record_deliveries_once_and_skip_unknown_statuses(rig: Rig) -> None:
    message_sid = sid(8)
    query = "outbox=ob-1&parent=ans-1"
    calls = [
        {"MessageSid": message_sid, "MessageStatus": "sending"},
        {"MessageSid": message_sid, "MessageStatus": "sent"},
        {"MessageSid": message_sid, "MessageStatus": "sent"},  # a retried callback
        {"MessageSid": message_sid, "MessageStatus": "undelivered", "ErrorCode": "30003"},
        {"MessageSid": message_sid, "MessageStatus": "teleported"},  # a value Twilio added later
    ]
    for params in calls:
        r = await rig.post("/sms/status", {**params, "AccountSid": "AC" + "b" * 32, "To": OWNER}, query=query)
        assert is_twiml_ack(r), r.text

    events = await rig.wait_events("delivery", 3)
    await rig.settled()
    assert [e.payload["status"] for e in events] == ["sending", "sent", "undelivered"]
    for event in events:
        status = event.payload["status"]
        assert event.id == "st:" + hashlib.sha256(f"ob-1|{message_sid}|{status}".encode()).hexdigest()[:32]
        assert event.parent_id == "ans-1" and event.channel == "sms"
        assert event.payload["outbox_id"] == "ob-1" and event.payload["external_ids"] == [message_sid]
    assert events[-1].payload["error_code"] == "30003"
    assert "error_code" not in events[0].payload
    assert len(await rig.gateway_appends()) == 3  # the repeat and the unknown status published nothing


@pytest.mark.integration
async def test_hostile_bodies_get_a_clear_error_and_publish_nothing(rig: Rig) -> None:
    cases: list[tuple[str, httpx.Response, int, str]] = []

    async def case(name: str, status: int, code: str, path: str, params: dict[str, str], **kw: Any) -> None:
        cases.append((name, await rig.post(path, params, **kw), status, code))

    await case("huge", 413, "too_large", "/sms", sms_params(sid(9), body="x" * 70_000))
    await case("not a form", 415, "unsupported_media_type", "/sms", sms_params(sid(9)),
               headers={"Content-Type": "application/json"})
    await case("bad sid", 400, "bad_request", "/sms", sms_params("SM../../etc"))
    await case("no From", 400, "bad_request", "/sms", {k: v for k, v in sms_params(sid(9)).items() if k != "From"})
    await case("NumMedia lies", 400, "bad_request", "/sms", sms_params(sid(9), NumMedia="2"))
    await case("NumMedia huge", 400, "bad_request", "/sms", sms_params(sid(9), NumMedia="1000"))
    await case("media not http", 400, "bad_request", "/sms",
               sms_params(sid(9), NumMedia="1", MediaUrl0="file:///etc/passwd"))
    await case("status without outbox", 400, "bad_request", "/sms/status",
               {"MessageSid": sid(9), "MessageStatus": "sent"})
    await case("status with a bad outbox", 400, "bad_request", "/sms/status",
               {"MessageSid": sid(9), "MessageStatus": "sent"}, query="outbox=a%20b%0Ac")
    for name, r, status, code in cases:
        assert r.status_code == status, (name, r.status_code, r.text)
        assert r.json()["error"]["code"] == code, name
        assert "Traceback" not in r.text
    # bad UTF-8 in a percent-escape: sent raw, since urlencode would not make it
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=rig.gw.http) as c:
        r = await c.post("/sms", content=b"Body=%ff%fe&MessageSid=" + sid(9).encode(), headers={
            "Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": "x"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    assert rig.spooled_nothing()
    assert await rig.agent_inputs() == []
    assert await rig.gateway_appends() == []


async def test_sms_is_off_without_the_auth_token_or_the_owner_phone(nats_server: NatsServer, tmp_path: Path) -> None:
    url = role_url(nats_server, "gateway")
    bus = await Bus.connect(nats_server.url, "test")
    try:
        await bus.ensure_streams(all_owners=True)
        for overrides, missing in (({}, "TWILIO_AUTH_TOKEN"), ({"twilio_auth_token": AUTH_TOKEN}, "OWNER_PHONE")):
            settings = gateway_settings(url, tmp_path, public_base_url=PUBLIC, **overrides)
            async with running_gateway(settings) as gw:
                rig = Rig(System(tmp_path), bus, gw)
                r = await rig.post("/sms", sms_params(sid(10)))
                assert r.status_code == 503 and r.json()["error"]["code"] == "sms_disabled", r.text
                assert missing in r.json()["error"]["message"]
                status = await rig.post("/sms/status", {"MessageSid": sid(10), "MessageStatus": "sent"},
                                        query="outbox=ob-1")
                if missing == "TWILIO_AUTH_TOKEN":
                    assert status.status_code == 503 and status.json()["error"]["code"] == "sms_disabled"
                else:  # callbacks need only the token: the outbox may still send
                    assert status.status_code == 200
                assert await rig.agent_inputs() == []
    finally:
        await bus.close()


def test_phone_numbers_are_compared_in_e164() -> None:
    assert e164("+1 (555) 000-1111") == "+15550001111"
    assert e164("0044 20 7946.0000") == "+442079460000"
    assert e164("+15550001111") == "+15550001111"
    for not_a_number in ("555 0101", "+0123456", "whatsapp:+15550001111", "+1555abc1111", "", "+"):
        assert e164(not_a_number) is None, not_a_number
    assert same_number("00 1 555 000 1111", "+1-555-000-1111")
    assert not same_number("+15550001111", "+15550001112")
    assert not same_number("", "")


def test_owner_phone_is_normalised_or_refused_at_startup(tmp_path: Path) -> None:
    def settings(**values: Any) -> Settings:
        return Settings(_env_file=None, runtime_data_dir=tmp_path, **values)

    assert settings(owner_phone="+1 (555) 000-1111").owner_phone == "+15550001111"
    assert settings(owner_phone="").owner_phone is None
    assert settings(twilio_auth_token="").twilio_auth_token is None
    with pytest.raises(ValidationError, match="OWNER_PHONE"):
        settings(owner_phone="555 0101")


@pytest.mark.integration
async def test_api_state_carries_the_pollers_channel_state_or_null(rig: Rig) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=rig.gw.http, headers=auth()) as c:
        started = time.monotonic()
        away = await c.get("/api/state")
        # No agent runs here: the 503 body still carries the state, channels included.
        assert away.status_code == 503 and away.json()["state"]["channels"] is None
        assert time.monotonic() - started < 3.5  # the pollers' wait overlaps the agent's, not adds to it

        rig.system.start("pollers")

        # The gateway reuses "no answer" for a few seconds: poll until it asks again.
        async def answered() -> bool:
            body = (await c.get("/api/state")).json()
            return body["state"]["channels"] is not None

        await eventually(answered, "/api/state to show the pollers' channels", 20)
        channels = (await c.get("/api/state")).json()["state"]["channels"]
    assert set(channels) >= {"imap", "smtp", "sms", "last_poll_at", "outbox_pending"}
    assert channels["sms"]["enabled"] is False  # the pollers have no Twilio account here
    assert "error" not in channels
