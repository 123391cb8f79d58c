"""Twilio's voice webhooks (``POST /twiml``, ``POST /call/status``) and the stream handshake.

Twilio is played by signing with the stdlib signer (tests/support), the voice service by the
test over the real bus (``voice_peer``). PUBLIC_BASE_URL is https while the tests call
http://127.0.0.1:<port>: every signed request is also the "behind a TLS proxy" case.
"""

import json
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from delegate.contracts import topics
from delegate.contracts.voice import HangupIn
from delegate.launcher.procs import NatsServer
from tests.support.nats import role_url
from tests.support.twilio_media import incoming_call_params, new_sid, stream_from_twiml
from tests.support.twilio_sign import twilio_signature
from tests.support.waiting import eventually

from .helpers import PATIENT_S, gateway_context, gateway_settings, running_gateway
from .voice_peer import (
    AUTH_TOKEN,
    OWNER,
    PUBLIC,
    SESSION,
    STRANGER,
    STREAM_URL,
    TOKEN,
    TWILIO_NUMBER,
    VoiceRig,
    voice_rig,
)


@pytest.fixture
async def rig(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[VoiceRig]:
    async with voice_rig(nats_server, tmp_path) as r:
        yield r


def call_params(call_sid: str, caller: str = OWNER) -> dict[str, str]:
    return incoming_call_params(call_sid, caller, TWILIO_NUMBER)


async def post(
    rig: VoiceRig, path: str, params: dict[str, str], *, signature: str | None = None, sign_url: str | None = None
) -> httpx.Response:
    """POST a form as Twilio does; signed over the public URL unless told otherwise ("" sends none)."""
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if signature is None:
        signature = twilio_signature(AUTH_TOKEN, sign_url or PUBLIC + path, params)
    if signature:
        headers["X-Twilio-Signature"] = signature
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=rig.gw.http) as c:
        return await c.post(path, content=urlencode(params), headers=headers)


def parse_twiml(r: httpx.Response) -> ET.Element:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/xml")
    root = ET.fromstring(r.text)
    assert root.tag == "Response"
    return root


async def gateway_appends(rig: VoiceRig) -> list[dict[str, Any]]:
    subject = topics.ledger_append("gateway").subject
    info = await rig.bus.js.stream_info("LEDGER")
    found: list[dict[str, Any]] = []
    if info.state.messages == 0:
        return found
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await rig.bus.js.get_msg("LEDGER", seq)
        if msg.subject == subject and msg.data:
            found.append(json.loads(msg.data))
    return found


# ---- refusals: no voice service needed ------------------------------------------------------------


async def test_unsigned_or_forged_twiml_is_403_and_prepares_nothing(rig: VoiceRig) -> None:
    params = call_params(new_sid("CA"))
    unsigned = await post(rig, "/twiml", params, signature="")
    forged = await post(rig, "/twiml", params, signature=twilio_signature("not-the-token", PUBLIC + "/twiml", params))
    wrong_url = await post(rig, "/twiml", params, sign_url="http://127.0.0.1/twiml")
    for r in (unsigned, forged, wrong_url):
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "bad_signature"
    assert rig.voice.prepares == []


@pytest.mark.parametrize("missing", ["twilio_auth_token", "owner_phone"])
async def test_twiml_is_503_voice_disabled_without_token_or_owner(
    nats_server: NatsServer, tmp_path: Path, missing: str
) -> None:
    overrides: dict[str, Any] = {missing: None}
    async with voice_rig(nats_server, tmp_path, **overrides) as rig:
        r = await post(rig, "/twiml", call_params(new_sid("CA")))
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "voice_disabled"
        assert missing.upper() in r.json()["error"]["message"]
        if missing == "twilio_auth_token":
            status = await post(rig, "/call/status?session=" + SESSION, {"CallStatus": "completed"})
            assert status.status_code == 503 and status.json()["error"]["code"] == "voice_disabled"
        assert rig.voice.prepares == []


async def test_a_stranger_is_refused_politely_and_the_refusal_is_recorded(rig: VoiceRig) -> None:
    call_sid = new_sid("CA")
    r = await post(rig, "/twiml", call_params(call_sid, caller=STRANGER))
    root = parse_twiml(r)
    assert [child.tag for child in root] == ["Say", "Hangup"]
    assert "owner" in (root[0].text or "")
    assert rig.voice.prepares == []
    # Twilio retries a webhook it did not get an answer to: the same call is recorded once.
    assert (await post(rig, "/twiml", call_params(call_sid, caller=STRANGER))).status_code == 200
    courier = gateway_context(rig.gw).courier
    await eventually(lambda: courier.backlog == 0 and courier.delivered > 0, "the refusal to leave the spool")
    refused = [e for e in await gateway_appends(rig) if e["kind"] == "inbound.refused"]
    assert len({e["id"] for e in refused}) == 1
    event = refused[0]
    assert event["id"] == f"refused:phone:{call_sid}"
    assert event["channel"] == "phone"
    assert event["payload"]["sender"] == STRANGER
    assert event["payload"]["reason"] == "not_owner"
    assert event["payload"]["external_id"] == call_sid


# ---- the owner calls ------------------------------------------------------------------------------


async def test_the_owner_gets_a_stream_to_the_prepared_session_then_the_apology(rig: VoiceRig) -> None:
    call_sid = new_sid("CA")
    root = parse_twiml(await post(rig, "/twiml", call_params(call_sid, caller="+1 555 000 1111")))
    assert [child.tag for child in root] == ["Connect", "Say"]
    (stream,) = list(root[0])
    assert stream.tag == "Stream"
    assert stream.get("url") == STREAM_URL
    assert urlsplit(stream.get("url") or "").query == ""  # Twilio allows no query on a stream URL
    parameters = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
    assert parameters == {"session": SESSION, "token": TOKEN}
    callback = urlsplit(stream.get("statusCallback") or "")
    assert (callback.scheme, callback.netloc, callback.path) == ("https", "delegate.example.test", "/call/status")
    assert parse_qs(callback.query) == {"session": [SESSION]}
    assert "call again" in (root[1].text or "")
    (prepare,) = rig.voice.prepares
    assert (prepare.kind, prepare.direction, prepare.call_sid, prepare.caller) == ("phone", "inbound", call_sid, OWNER)


async def test_the_stream_the_twiml_names_attaches_to_the_session(rig: VoiceRig) -> None:
    call_sid = new_sid("CA")
    r = await post(rig, "/twiml", call_params(call_sid))
    url, params = stream_from_twiml(r.text)
    assert url == STREAM_URL
    twilio = rig.twilio(call_sid=call_sid)
    async with twilio:
        await twilio.open(params)
        await rig.voice.wait_for(lambda v: bool(v.attaches), what="the stream to attach")
    (attach,) = rig.voice.attaches
    assert (attach.token, attach.call_sid, attach.stream_sid) == (TOKEN, call_sid, twilio.stream_sid)


async def test_busy_voice_rejects_the_call_as_busy(rig: VoiceRig) -> None:
    rig.voice.refuse = "busy"
    root = parse_twiml(await post(rig, "/twiml", call_params(new_sid("CA"))))
    assert [(child.tag, child.get("reason")) for child in root] == [("Reject", "busy")]


async def test_unavailable_voice_says_sorry_and_hangs_up(rig: VoiceRig) -> None:
    rig.voice.refuse = "unavailable"
    root = parse_twiml(await post(rig, "/twiml", call_params(new_sid("CA"))))
    assert [child.tag for child in root] == ["Say", "Hangup"]
    assert "cannot take calls" in (root[0].text or "")


async def test_no_voice_service_says_sorry_and_hangs_up(nats_server: NatsServer, tmp_path: Path) -> None:
    async with voice_rig(nats_server, tmp_path, voice_running=False) as rig:
        root = parse_twiml(await post(rig, "/twiml", call_params(new_sid("CA"))))
        assert [child.tag for child in root] == ["Say", "Hangup"]


# ---- the call's status callback ---------------------------------------------------------------------


async def test_call_status_forged_is_403_and_a_terminal_status_hangs_the_session_up(rig: VoiceRig) -> None:
    path = f"/call/status?session={SESSION}"
    forged = await post(rig, path, {"CallSid": new_sid("CA"), "CallStatus": "completed"}, signature="bm9wZQ==")
    assert forged.status_code == 403
    ringing = await post(rig, path, {"CallSid": new_sid("CA"), "CallStatus": "in-progress"})
    assert ringing.status_code == 204
    done = await post(rig, path, {"CallSid": new_sid("CA"), "CallStatus": "no-answer"})
    assert done.status_code == 204
    await rig.voice.wait_for(lambda v: bool(v.of_type("hangup")), what="the hang-up")
    assert rig.voice.inbox == [HangupIn(reason="no-answer")]  # the forged and the ringing ones said nothing


async def test_call_status_with_a_malformed_session_is_400(rig: VoiceRig) -> None:
    for path in ("/call/status?session=", "/call/status?session=a.b", "/call/status?session=%3E"):
        r = await post(rig, path, {"CallStatus": "completed"})
        assert r.status_code == 400, path
    assert rig.voice.inbox == []


async def test_the_numbers_own_call_status_callback_without_a_session_is_accepted_and_ends_nothing(
    rig: VoiceRig,
) -> None:
    """A number whose "call status changes" URL is /call/status (no ?session=): Twilio's debugger
    shows no error for it, and no session is ended on its word."""
    r = await post(rig, "/call/status", {"CallSid": new_sid("CA"), "CallStatus": "completed"})
    assert r.status_code == 204
    courier = gateway_context(rig.gw).courier
    assert courier.backlog == 0 and courier.delivered == 0
    assert rig.voice.inbox == []


# ---- the stream's handshake -------------------------------------------------------------------------


async def test_unsigned_or_forged_stream_handshake_is_refused_with_403(rig: VoiceRig) -> None:
    for signature in ("", twilio_signature("not-the-token", STREAM_URL, {}),
                      twilio_signature(AUTH_TOKEN, "wss://elsewhere.example.test/call", {})):
        call = rig.twilio()
        with pytest.raises(InvalidStatus) as refused:
            await call.open({"session": SESSION, "token": TOKEN}, signature=signature)
        assert refused.value.response.status_code == 403
    assert rig.voice.attaches == []


async def test_the_https_form_of_the_stream_url_is_accepted_too(rig: VoiceRig) -> None:
    signature = twilio_signature(AUTH_TOKEN, PUBLIC + "/call", {})
    async with websockets.connect(
        f"{rig.gw.ws}/call", additional_headers={"X-Twilio-Signature": signature}
    ) as ws:
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await ws.send(json.dumps({"event": "media", "media": {"payload": ""}}))  # before start: refused
        await ws.wait_closed()
        assert ws.close_code == 1008


# ---- NATS away: words, never a 5xx ---------------------------------------------------------------


async def test_with_nats_down_the_owner_hears_an_apology_and_a_strangers_refusal_is_recorded_later(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with voice_rig(nats_server, tmp_path) as rig:
        nats_server.stop()
        owner = parse_twiml(await post(rig, "/twiml", call_params(new_sid("CA"))))
        assert [child.tag for child in owner] == ["Say", "Hangup"]
        assert "cannot take calls" in (owner[0].text or "")
        stranger_sid = new_sid("CA")
        stranger = parse_twiml(await post(rig, "/twiml", call_params(stranger_sid, caller=STRANGER)))
        assert [child.tag for child in stranger] == ["Say", "Hangup"] and "owner" in (stranger[0].text or "")
        nats_server.start()
        courier = gateway_context(rig.gw).courier
        await eventually(lambda: courier.backlog == 0, "the spooled refusal to be delivered", 30)
        refused = [e for e in await gateway_appends(rig) if e["kind"] == "inbound.refused"]
        assert [e["id"] for e in refused] == [f"refused:phone:{stranger_sid}"]


async def test_a_gateway_that_never_reached_nats_answers_twiml_with_an_apology(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    nats_server.stop()
    (tmp_path / "client").mkdir()
    settings = gateway_settings(
        role_url(nats_server, "gateway"), tmp_path, public_base_url=PUBLIC, twilio_auth_token=AUTH_TOKEN,
        owner_phone=OWNER,
    )
    async with running_gateway(settings, wait_for_bus=False) as gw:
        params = call_params(new_sid("CA"))
        headers = {"Content-Type": "application/x-www-form-urlencoded",
                   "X-Twilio-Signature": twilio_signature(AUTH_TOKEN, PUBLIC + "/twiml", params)}
        async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as c:
            r = await c.post("/twiml", content=urlencode(params), headers=headers)
        root = parse_twiml(r)
        assert [child.tag for child in root] == ["Say", "Hangup"]
    nats_server.start()  # for the fixture's own stop
