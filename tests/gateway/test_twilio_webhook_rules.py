"""Webhooks a Twilio Webhook Rule signs with a SharedKey (HMAC-SHA256), and the stream handshake's URLs.

Twilio is played by the stdlib signer (tests/support/twilio_sign.py), independent of the
gateway's twilio-python RequestValidator. A Rule-signed request says so in
``X-Twilio-Webhooks-Signature-Settings``; only the hash and the secret change.
"""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from delegate.launcher.procs import NatsServer
from tests.support.twilio_media import new_sid
from tests.support.twilio_sign import twilio_signature

from .helpers import PATIENT_S
from .voice_peer import AUTH_TOKEN, PUBLIC, VoiceRig, voice_rig

SHARED_KEY = "sk_secret_0123456789"
OLD_SHARED_KEY = "sk_secret_previous"
RULE_SETTINGS = "key=webhooks_sharedkey_01j0000000000000000000000,algorithm=HMAC_SHA256"
STATUS = "/call/status"


@pytest.fixture
async def rig(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[VoiceRig]:
    # Two keys, as while one SharedKey replaces another.
    async with voice_rig(nats_server, tmp_path, twilio_webhook_shared_keys=f"{OLD_SHARED_KEY}, {SHARED_KEY}") as r:
        yield r


async def post(rig: VoiceRig, params: dict[str, str], signature: str, settings: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature}
    if settings is not None:
        headers["X-Twilio-Webhooks-Signature-Settings"] = settings
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=rig.gw.http) as c:
        return await c.post(STATUS, content=urlencode(params), headers=headers)


def status_params() -> dict[str, str]:
    return {"CallSid": new_sid("CA"), "CallStatus": "completed", "AccountSid": "AC" + "b" * 32}


def test_the_independent_signer_matches_twilios_hmac_sha256_vector() -> None:
    """The vector of twilio-email-wire.md §3.3 (the §3.1 SMS example, HMAC-SHA256)."""
    params = {"MessageSid": "SMaaaa", "From": "+15550001111", "To": "+15550002222", "Body": "hello world",
              "NumMedia": "0", "AccountSid": "ACbbbb"}
    url = "https://delegate.example.test/twilio/sms"
    assert twilio_signature("test_auth_token_0123", url, params) == "iXkG9S9gSSc/uHw97/jDAusdd6g="
    assert twilio_signature("test_auth_token_0123", url, params, "sha256") == (
        "a7Pt7m/HJ9lxaeMevQBzsh/nSPqZiqdbWN2OECoCb6s="
    )


async def test_a_webhook_a_rule_signed_with_a_shared_key_and_hmac_sha256_is_accepted(rig: VoiceRig) -> None:
    params = status_params()
    for key in (SHARED_KEY, OLD_SHARED_KEY):
        r = await post(rig, params, twilio_signature(key, PUBLIC + STATUS, params, "sha256"), RULE_SETTINGS)
        assert r.status_code == 204, r.text
    # The Auth Token's HMAC-SHA1 signature still works where no Rule applies.
    assert (await post(rig, params, twilio_signature(AUTH_TOKEN, PUBLIC + STATUS, params), None)).status_code == 204


@pytest.mark.parametrize(
    ("secret", "algorithm", "settings"),
    [
        ("another-key", "sha256", RULE_SETTINGS),  # not one of our SharedKeys
        (AUTH_TOKEN, "sha1", RULE_SETTINGS),  # says SharedKey, signed like the Auth Token
        (SHARED_KEY, "sha1", RULE_SETTINGS),  # the key, the wrong hash
        (SHARED_KEY, "sha256", None),  # a SharedKey signature that does not say so
        (AUTH_TOKEN, "sha256", None),
        (SHARED_KEY, "sha256", "key=webhooks_sharedkey_x,algorithm=HMAC_SHA512"),  # no such algorithm
    ],
)
async def test_anything_else_is_refused(rig: VoiceRig, secret: str, algorithm: str, settings: str | None) -> None:
    params = status_params()
    r = await post(rig, params, twilio_signature(secret, PUBLIC + STATUS, params, algorithm), settings)
    assert r.status_code == 403 and r.json()["error"]["code"] == "bad_signature"


async def test_a_shared_key_signature_is_refused_when_no_shared_key_is_set(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    params = status_params()
    async with voice_rig(nats_server, tmp_path) as rig:
        r = await post(rig, params, twilio_signature(SHARED_KEY, PUBLIC + STATUS, params, "sha256"), RULE_SETTINGS)
    assert r.status_code == 403


# ---- the stream handshake's URL variants ------------------------------------------------------------


async def _handshake(rig: VoiceRig, headers: dict[str, str]) -> int | None:
    """Open /call with ``headers``; the close code of a stream the handshake let in (it is then
    closed for a media frame before ``start``), or raises InvalidStatus when it was refused."""
    async with websockets.connect(f"{rig.gw.ws}/call", additional_headers=headers) as ws:
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await ws.send(json.dumps({"event": "media", "media": {"payload": ""}}))
        await ws.wait_closed()
        return ws.close_code


@pytest.mark.parametrize("signed", ["wss://delegate.example.test:443/call", "wss://delegate.example.test/call"])
async def test_the_stream_url_is_accepted_with_and_without_wss_default_port(rig: VoiceRig, signed: str) -> None:
    assert await _handshake(rig, {"X-Twilio-Signature": twilio_signature(AUTH_TOKEN, signed, {})}) == 1008


async def test_a_stream_handshake_a_rule_signed_with_hmac_sha256_is_accepted(rig: VoiceRig) -> None:
    signature = twilio_signature(SHARED_KEY, "wss://delegate.example.test/call", {}, "sha256")
    headers = {"X-Twilio-Signature": signature, "X-Twilio-Webhooks-Signature-Settings": RULE_SETTINGS}
    assert await _handshake(rig, headers) == 1008
    with pytest.raises(InvalidStatus) as refused:  # the same signature without saying it is a Rule's
        await _handshake(rig, {"X-Twilio-Signature": signature})
    assert refused.value.response.status_code == 403
