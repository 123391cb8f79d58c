"""REST behaviour of the gateway against a real nats-server (no ledger or agent running here)."""

import json
import logging
import stat
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from nats.aio.msg import Msg

from delegate.contracts import topics, ws
from delegate.gateway.app import create_app
from delegate.gateway.auth import SESSION_COOKIE, TOKEN_FILE, load_or_create_token
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from tests.support.nats import role_url

from .helpers import PATIENT_S, TOKEN, Gateway, auth, gateway_settings, owner_inputs, running_gateway, stream_messages


async def test_health_static_files_and_auth_on_every_api_route(gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        index = await c.get("/")
        assert index.status_code == 200 and "<title>Delegate</title>" in index.text  # no auth for the client
        for method, path in [
            ("GET", "/api/timeline"), ("GET", "/api/state"), ("POST", "/api/messages"),
            ("POST", "/api/compact"), ("POST", "/api/conversation/end"),
        ]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                r = await c.request(method, path, headers=headers, json={"text": "hi"})
                assert r.status_code == 401, (method, path, headers)
                assert r.json()["error"]["code"] == "unauthorized"
                assert "Traceback" not in r.text
        missing = await c.get("/api/nothing-here", headers=auth())
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_sign_in_sets_an_httponly_cookie_that_authenticates_and_sign_out_clears_it(gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers={"Origin": gateway.http}) as c:
        wrong = await c.post("/api/session", json={"token": "nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
        assert SESSION_COOKIE not in c.cookies

        ok = await c.post("/api/session", json={"token": TOKEN})
        assert ok.status_code == 204
        cookie = ok.headers["set-cookie"]
        value = ok.cookies[SESSION_COOKIE]
        assert len(value) >= 43 and TOKEN not in cookie  # a random session id, not the token
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert f"Max-Age={30 * 24 * 3600}" in cookie  # GATEWAY_SESSION_DAYS, not the browser's 400-day cap
        assert "Secure" not in cookie  # PUBLIC_BASE_URL is http and the request came over http
        # With the cookie alone, /api/* answers (503 only because no ledger runs in this test).
        assert (await c.get("/api/timeline")).status_code == 503

        out = await c.delete("/api/session")
        assert out.status_code == 204
        assert (await c.get("/api/timeline")).status_code == 401


async def test_secure_cookie_when_public_base_url_is_https(nats_server: NatsServer, tmp_path: Path) -> None:
    settings = gateway_settings(
        role_url(nats_server, "gateway"), tmp_path, public_base_url="https://me.example.org"
    )
    async with running_gateway(settings) as gw, httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as c:
        r = await c.post("/api/session", json={"token": TOKEN})
    assert r.status_code == 204 and "Secure" in r.headers["set-cookie"]


@pytest.mark.parametrize(("trusted", "secure"), [("", False), ("127.0.0.1", True)])
async def test_secure_cookie_behind_a_trusted_https_proxy_only(
    nats_server: NatsServer, tmp_path: Path, trusted: str, secure: bool
) -> None:
    """X-Forwarded-Proto counts only from GATEWAY_TRUSTED_PROXIES: anyone else could claim it."""
    settings = gateway_settings(role_url(nats_server, "gateway"), tmp_path, gateway_trusted_proxies=trusted)
    async with running_gateway(settings) as gw, httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as c:
        r = await c.post("/api/session", json={"token": TOKEN}, headers={"X-Forwarded-Proto": "https"})
    assert r.status_code == 204
    assert ("Secure" in r.headers["set-cookie"]) is secure


def test_a_generated_token_is_printed_once_by_the_start_that_made_it_and_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = gateway_settings("nats://127.0.0.1:1", tmp_path, delegate_token="")
    assert settings.delegate_token is None
    with caplog.at_level(logging.DEBUG):
        create_app(settings)
    path = settings.runtime_data_dir / TOKEN_FILE
    token = path.read_text().strip()
    assert len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    printed = capsys.readouterr().err
    assert printed.count(token) == 1 and "Delegate owner token:" in printed
    assert not [r for r in caplog.records if token in r.getMessage()]  # printed, not logged

    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        app = create_app(settings)  # the second start reuses it, silently
    assert token not in capsys.readouterr().err
    assert not [r for r in caplog.records if "owner token" in r.getMessage()]
    assert app.state.ctx.auth.check_token(token)


def test_the_token_printing_can_be_turned_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = gateway_settings("nats://127.0.0.1:1", tmp_path, delegate_token="", gateway_announce_token=False)
    create_app(settings)
    token = (settings.runtime_data_dir / TOKEN_FILE).read_text().strip()
    assert token not in capsys.readouterr().err


def test_gateways_starting_together_agree_on_one_complete_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    starts = 16
    barrier = threading.Barrier(starts)

    def start() -> str:
        barrier.wait()
        return load_or_create_token(tmp_path)

    with caplog.at_level(logging.WARNING), ThreadPoolExecutor(starts) as pool:
        tokens = list(pool.map(lambda _: start(), range(starts)))
    assert len(set(tokens)) == 1 and len(tokens[0]) >= 32
    assert (tmp_path / TOKEN_FILE).read_text().strip() == tokens[0]
    assert [p.name for p in tmp_path.iterdir()] == [TOKEN_FILE]  # no temporary files left
    assert len([r for r in caplog.records if "generated a new owner token" in r.getMessage()]) == 1


async def test_messages_are_published_once_per_client_msg_id(gateway: Gateway, bus: Bus) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        first = await c.post("/api/messages", json={"text": "hello there", "client_msg_id": "m-1"})
        again = await c.post("/api/messages", json={"text": "hello there", "client_msg_id": "m-1"})
        other = await c.post("/api/messages", json={"text": "no id given"})
    assert first.status_code == again.status_code == other.status_code == 202
    assert first.json() == {"event_id": first.json()["event_id"], "duplicate": False}
    assert again.json() == {"event_id": first.json()["event_id"], "duplicate": True}
    stored = await owner_inputs(bus)
    assert [(m.id, m.text, m.client_msg_id, m.channel) for m in stored] == [
        (first.json()["event_id"], "hello there", "m-1", "text"),
        (other.json()["event_id"], "no id given", None, "text"),
    ]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "bad_json"),
        (b"[1, 2]", 400, "bad_request"),
        (json.dumps({"text": 5}).encode(), 400, "bad_request"),
        (json.dumps({"text": "hi", "client_msg_id": 7}).encode(), 400, "bad_request"),
        (json.dumps({"client_msg_id": "x"}).encode(), 400, "bad_request"),
        (json.dumps({"text": ""}).encode(), 400, "empty_text"),
        (json.dumps({"text": "  \n "}).encode(), 400, "empty_text"),
        (json.dumps({"text": "x" * (ws.MAX_CHAT_TEXT + 1)}).encode(), 413, "text_too_long"),
        (json.dumps({"text": "x" * (1024 * 1024)}).encode(), 413, "too_large"),
        (b"\xff\xfe\x00", 400, "bad_json"),
    ],
)
async def test_bad_message_bodies_get_clear_errors_and_publish_nothing(
    gateway: Gateway, bus: Bus, body: bytes, status: int, code: str
) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        r = await c.post("/api/messages", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert "Traceback" not in r.text
    assert await stream_messages(bus, "AGENT") == []


async def test_a_body_without_content_length_is_still_capped(gateway: Gateway, bus: Bus) -> None:
    async def chunks() -> AsyncIterator[bytes]:  # chunked transfer: no Content-Length
        for _ in range(32):
            yield b"x" * 32768

    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        r = await c.post("/api/messages", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert await stream_messages(bus, "AGENT") == []


async def test_without_ledger_and_agent_the_gateway_says_so(gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        ready = await c.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {"status": "unready", "missing": ["ledger", "agent"]}
        timeline = await c.get("/api/timeline")
        assert timeline.status_code == 503 and timeline.json()["error"]["code"] == "ledger_unavailable"
        state = await c.get("/api/state")
        assert state.status_code == 503 and state.json()["error"]["code"] == "agent_unavailable"
        assert state.json()["state"]["usage"]["compact_threshold"] == gateway.settings.compact_threshold
        # Even while the agent is away, the state says truly which model answers.
        assert state.json()["state"]["offline_model"] is gateway.settings.openai.offline
        for path in ("/api/compact", "/api/conversation/end"):
            r = await c.post(path)
            assert r.status_code == 503 and r.json()["error"]["code"] == "agent_unavailable"


async def test_bad_timeline_parameters_are_400_before_any_query(gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        for params, code in [
            ({"before": "not-a-cursor"}, "bad_cursor"),
            ({"before": "djF8eHx5"}, "bad_cursor"),  # base64 of a damaged v1 cursor
            ({"limit": "ten"}, "bad_limit"),
            ({"limit": "0"}, "bad_limit"),
            ({"limit": "5001"}, "bad_limit"),
        ]:
            r = await c.get("/api/timeline", params=params)
            assert r.status_code == 400, (params, r.text)
            assert r.json()["error"]["code"] == code


async def test_readyz_names_nats_when_the_gateway_cannot_reach_it(tmp_path: Path) -> None:
    settings = gateway_settings("nats://127.0.0.1:1", tmp_path)
    async with (
        running_gateway(settings, wait_for_bus=False) as gw,
        httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http, headers=auth()) as c,
    ):
        assert (await c.get("/healthz")).status_code == 200
        ready = await c.get("/readyz")
        assert ready.status_code == 503 and ready.json()["missing"] == ["nats", "ledger", "agent"]
        posted = await c.post("/api/messages", json={"text": "hi"})
        assert posted.status_code == 503 and posted.json()["error"]["code"] == "bus_unavailable"


async def test_a_peer_answering_garbage_is_a_500_json_error_not_a_trace(gateway: Gateway, bus: Bus) -> None:
    """A broken responder on ledger.cmd.page (not our ledger: any peer can misbehave)."""

    async def garbage(msg: Msg) -> None:
        await msg.respond(b"<html>not json</html>")

    await bus.nc.subscribe(topics.LEDGER_PAGE.subject, cb=garbage)
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        r = await c.get("/api/timeline")
    assert r.status_code == 500
    assert r.json() == {"error": {"code": "internal", "message": "the gateway failed to answer; see its log"}}
