"""Browser sessions are server-side and revocable; the cookie cannot be used from a foreign page.

Real gateways (uvicorn, in this process) logged in to a real nats-server as the gateway role;
the sessions live in its JetStream KV bucket, so two gateways see the same sign-ins.
"""

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import websockets
from nats.aio.msg import Msg

from delegate.contracts import subjects, topics
from delegate.contracts.messages import AgentCommand, CommandReply
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from tests.support.nats import role_url
from tests.support.waiting import eventually

from .helpers import (
    PATIENT_S,
    TOKEN,
    Gateway,
    auth,
    cookie_headers,
    gateway_settings,
    owner_inputs,
    recv,
    recv_until,
    running_gateway,
    sign_in,
    stream_messages,
)

FOREIGN = "http://127.0.0.1:1"  # another local port: same site for SameSite, another origin


async def status(gw: Gateway, cookie: str, path: str = "/api/state") -> int:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as c:
        return (await c.get(path, headers=cookie_headers(cookie, None))).status_code


async def ws_close_code(gw: Gateway, cookie: str) -> int | None:
    """The close code /chat answers a cookie with; None when it is let in (answers a ping)."""
    async with websockets.connect(f"{gw.ws}/chat", additional_headers=cookie_headers(cookie, gw.http)) as conn:
        await conn.send(json.dumps({"type": "ping"}))
        try:
            await recv_until(conn, lambda f: f["type"] == "pong")
        except websockets.ConnectionClosed:
            return conn.close_code
        return None


def authorized(code: int) -> bool:
    # No agent runs in these tests: an authorized /api/state is 503 agent_unavailable.
    return code == 503


async def test_sign_out_revokes_that_session_only(gateway: Gateway) -> None:
    mine, other = await sign_in(gateway.http), await sign_in(gateway.http)
    assert mine != other
    assert authorized(await status(gateway, mine)) and authorized(await status(gateway, other))

    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        out = await c.delete("/api/session", headers=cookie_headers(mine, gateway.http))
    assert out.status_code == 204 and 'delegate_session=""' in out.headers["set-cookie"]

    # The browser may have kept the cookie (or someone copied it): it no longer works anywhere.
    assert await status(gateway, mine) == 401
    assert await ws_close_code(gateway, mine) == 4401
    assert authorized(await status(gateway, other))
    assert await ws_close_code(gateway, other) is None


async def test_sign_out_everywhere_revokes_every_session_but_not_the_token(gateway: Gateway) -> None:
    cookies = [await sign_in(gateway.http) for _ in range(3)]
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        r = await c.delete("/api/sessions", headers=cookie_headers(cookies[0], gateway.http))
        assert r.status_code == 204
        for cookie in cookies:
            assert await status(gateway, cookie) == 401
            assert await ws_close_code(gateway, cookie) == 4401
        assert authorized((await c.get("/api/state", headers=auth())).status_code)
    # Signing in again works at once.
    assert authorized(await status(gateway, await sign_in(gateway.http)))


async def test_sessions_are_shared_by_gateways_and_a_changed_token_revokes_them_all(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = role_url(nats_server, "gateway")
    async with running_gateway(gateway_settings(url, tmp_path / "a")) as a:
        cookie = await sign_in(a.http)
        async with running_gateway(gateway_settings(url, tmp_path / "b")) as b:
            assert authorized(await status(b, cookie))  # signed in at a, recognised by b
            async with httpx.AsyncClient(timeout=PATIENT_S, base_url=b.http) as c:
                assert (await c.delete("/api/session", headers=cookie_headers(cookie, b.http))).status_code == 204
            assert await status(a, cookie) == 401  # signed out at b, refused by a
        cookie = await sign_in(a.http)

    # The owner changes DELEGATE_TOKEN and restarts: every existing browser session is refused.
    new_token = "a-completely-different-owner-token"
    async with running_gateway(gateway_settings(url, tmp_path / "a", delegate_token=new_token)) as a2:
        assert await status(a2, cookie) == 401
        assert await ws_close_code(a2, cookie) == 4401
        async with httpx.AsyncClient(timeout=PATIENT_S, base_url=a2.http) as c:
            old = await c.post("/api/session", json={"token": TOKEN}, headers={"Origin": a2.http})
            assert old.status_code == 401
        assert authorized(await status(a2, await sign_in(a2.http, new_token)))


async def test_the_bucket_holds_no_usable_cookie(gateway: Gateway, bus: Bus) -> None:
    cookie = await sign_in(gateway.http)
    kv = await bus.js.key_value(subjects.GATEWAY_SESSIONS_BUCKET)
    keys = await kv.keys()
    assert len(keys) == 1 and cookie not in keys[0]
    entry = await kv.get(keys[0])
    assert entry.value is not None and cookie.encode() not in entry.value and TOKEN.encode() not in entry.value
    record = json.loads(entry.value)
    assert set(record) == {"created_at", "expires_at", "token_fp"}


async def test_the_csrf_attack_from_another_local_port_is_refused_and_writes_nothing(
    gateway: Gateway, bus: Bus
) -> None:
    """The probe: a page on another port posted a message and ended the conversation via the cookie."""
    ends: list[AgentCommand] = []

    async def on_end(cmd: AgentCommand) -> CommandReply:
        ends.append(cmd)
        return CommandReply()

    await bus.serve(topics.AGENT_END, on_end)
    await bus.nc.flush()  # the server knows the responder before the gateway asks
    cookie = await sign_in(gateway.http)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    plain = {"Content-Type": "text/plain"}
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        for origin in (FOREIGN, None, "null"):
            headers = cookie_headers(cookie, origin)
            for extra, body in ((plain, '{"text":"pwned"}'), (form, "text=pwned"), ({}, None)):
                r = await c.post("/api/messages", headers=headers | extra, content=body)
                assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_origin", (origin, extra)
                r = await c.post("/api/conversation/end", headers=headers | extra, content=body)
                assert r.status_code == 403, (origin, extra)
            r = await c.post("/api/messages", headers=headers, json={"text": "pwned"})
            assert r.status_code == 403
            assert (await c.delete("/api/sessions", headers=headers)).status_code == 403
            assert (await c.delete("/api/session", headers=headers)).status_code == 403
        # Our own page, but a body a form could send: 415, nothing written either.
        ours = cookie_headers(cookie, gateway.http)
        for extra, body in ((plain, '{"text":"pwned"}'), (form, "text=pwned")):
            r = await c.post("/api/messages", headers=ours | extra, content=body)
            assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
            assert (await c.post("/api/conversation/end", headers=ours | extra, content=body)).status_code == 415

        # The sentinel: the same requests from our own page go through, and are the only ones seen.
        assert (await c.post("/api/conversation/end", headers=ours)).status_code == 200
        posted = await c.post("/api/messages", headers=ours, json={"text": "from my own page"})
        assert posted.status_code == 202
    assert len(ends) == 1
    stored = await owner_inputs(bus)
    assert [m.text for m in stored] == ["from my own page"]
    assert await status(gateway, cookie) != 401  # and the foreign page did not sign us out


async def test_a_bearer_token_needs_no_origin_and_a_foreign_page_cannot_sign_in(gateway: Gateway, bus: Bus) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        r = await c.post("/api/messages", headers=auth() | {"Origin": FOREIGN}, json={"text": "from a script"})
        assert r.status_code == 202
        r = await c.post("/api/session", headers={"Origin": FOREIGN}, json={"token": TOKEN})
        assert r.status_code == 403 and "set-cookie" not in r.headers
        r = await c.post("/api/session", headers={"Content-Type": "text/plain"}, content=json.dumps({"token": TOKEN}))
        assert r.status_code == 415 and "set-cookie" not in r.headers
    assert len(await stream_messages(bus, "AGENT")) == 1


async def test_security_headers_on_every_answer_and_no_store_on_the_api(gateway: Gateway, bus: Bus) -> None:
    async def garbage(msg: Msg) -> None:  # a 500 gets them too
        await msg.respond(b"<html>not json</html>")

    await bus.nc.subscribe(topics.LEDGER_PAGE.subject, cb=garbage)
    await bus.nc.flush()
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        answers = {
            "static": await c.get("/"),
            "health": await c.get("/healthz"),
            "missing file": await c.get("/nothing.js"),
            "401": await c.get("/api/state"),
            "api": await c.get("/api/state", headers=auth()),
            "api 404": await c.get("/api/nothing", headers=auth()),
            "500": await c.get("/api/timeline", headers=auth()),
            "sign-in": await c.post("/api/session", json={"token": TOKEN}),
        }
    assert answers["500"].status_code == 500 and answers["static"].status_code == 200
    for name, r in answers.items():
        csp = r.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, name
        assert r.headers.get("x-content-type-options") == "nosniff", name
        assert r.headers.get("referrer-policy") == "no-referrer", name
        assert r.headers.get("x-frame-options") == "DENY", name
        if r.request.url.path.startswith("/api/"):
            assert r.headers.get("cache-control") == "no-store", name


async def test_cookie_checks_need_the_bucket_and_say_so_when_nats_is_away(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Without NATS a cookie cannot be checked: "try again" (503 / 1013), never a silent sign-out."""
    settings = gateway_settings(role_url(nats_server, "gateway"), tmp_path)
    async with running_gateway(settings) as gw:
        cookie = await sign_in(gw.http)
        nats_server.stop()
        try:
            async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as c:
                r = await c.get("/api/timeline", headers=cookie_headers(cookie, None), timeout=30)
            assert r.status_code == 503 and r.json()["error"]["code"] == "bus_unavailable"
            async with websockets.connect(f"{gw.ws}/chat", additional_headers=cookie_headers(cookie, gw.http)) as conn:
                frame = await recv(conn, timeout=30)
                assert frame["code"] == "bus_unavailable"
                with pytest.raises(websockets.ConnectionClosed):
                    await asyncio.wait_for(conn.recv(), 30)
                assert conn.close_code == 1013
        finally:
            nats_server.start()


@pytest.mark.parametrize("everywhere", [False, True])
async def test_an_open_socket_ends_when_its_session_is_signed_out(
    nats_server: NatsServer, tmp_path: Path, everywhere: bool
) -> None:
    settings = gateway_settings(role_url(nats_server, "gateway"), tmp_path, gateway_session_recheck_s=0.2)
    async with running_gateway(settings) as gw:
        cookie, other = await sign_in(gw.http), await sign_in(gw.http)
        async with (
            websockets.connect(f"{gw.ws}/chat", additional_headers=cookie_headers(cookie, gw.http)) as conn,
            websockets.connect(f"{gw.ws}/chat", additional_headers=cookie_headers(other, gw.http)) as kept,
            websockets.connect(f"{gw.ws}/chat?token={TOKEN}") as scripted,
        ):
            for c in (conn, kept, scripted):
                await c.send(json.dumps({"type": "ping"}))
                await recv_until(c, lambda f: f["type"] == "pong")
            async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as http:
                path = "/api/sessions" if everywhere else "/api/session"
                assert (await http.delete(path, headers=cookie_headers(cookie, gw.http))).status_code == 204
            frames = []
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    frames.append(await recv(conn, timeout=30))
            assert conn.close_code == 4401 and frames[-1]["code"] == "unauthorized"
            # The token's socket never depended on a session; the other session's only if revoked.
            await scripted.send(json.dumps({"type": "ping"}))
            await recv_until(scripted, lambda f: f["type"] == "pong")
            if everywhere:
                with pytest.raises(websockets.ConnectionClosed):
                    await recv_until(kept, lambda f: False)
                assert kept.close_code == 4401
            else:
                await kept.send(json.dumps({"type": "ping"}))
                await recv_until(kept, lambda f: f["type"] == "pong")


async def test_a_session_expires_and_the_bucket_follows_the_configured_lifetime(
    nats_server: NatsServer, tmp_path: Path, bus: Bus
) -> None:
    url = role_url(nats_server, "gateway")
    async with running_gateway(gateway_settings(url, tmp_path)) as gw:
        await sign_in(gw.http)
    info = await bus.js.stream_info(f"KV_{subjects.GATEWAY_SESSIONS_BUCKET}")
    assert info.config.max_age == pytest.approx(30 * 24 * 3600)

    # Restarted with a two-second lifetime: the bucket follows it, and a new session expires.
    async with running_gateway(gateway_settings(url, tmp_path, gateway_session_days=2 / (24 * 3600))) as gw:
        info = await bus.js.stream_info(f"KV_{subjects.GATEWAY_SESSIONS_BUCKET}")
        assert info.config.max_age == pytest.approx(2.0)
        short = await sign_in(gw.http)

        async def expired() -> bool:
            return await status(gw, short) == 401

        await eventually(expired, "the short session to expire", interval=0.2)


REBOUND = "attacker.example:{port}"  # a foreign name that an attacker's DNS points at this machine


async def test_a_cookie_write_whose_origin_matches_a_forged_host_is_refused_and_writes_nothing(
    gateway: Gateway, bus: Bus
) -> None:
    """The probe: Origin == Host was taken as "our own page", and the Host was the caller's to choose."""
    cookie = await sign_in(gateway.http)
    host = REBOUND.format(port=gateway.settings.delegate_port)
    forged = cookie_headers(cookie, f"http://{host}") | {"Host": host}
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        r = await c.post("/api/messages", headers=forged, json={"text": "pwned"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_host", r.text
        # A rebound name reads nothing with the cookie either, and cannot sign in or out.
        r = await c.get("/api/timeline", headers=cookie_headers(cookie, None) | {"Host": host})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_host"
        r = await c.post("/api/session", headers={"Host": host}, json={"token": TOKEN})
        assert r.status_code == 403 and "set-cookie" not in r.headers
        assert (await c.delete("/api/session", headers=forged)).status_code == 403
        # Our own Host with the forged page's Origin: refused as a foreign page.
        r = await c.post("/api/messages", headers=cookie_headers(cookie, f"http://{host}"), json={"text": "pwned"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_origin"
        # Sentinel: our own page, under any of the names the gateway listens on, goes through.
        port = gateway.settings.delegate_port
        for name in ("127.0.0.1", "localhost"):
            ours = cookie_headers(cookie, f"http://{name}:{port}") | {"Host": f"{name}:{port}"}
            assert (await c.post("/api/messages", headers=ours, json={"text": f"via {name}"})).status_code == 202
    stored = await owner_inputs(bus)
    assert [m.text for m in stored] == ["via 127.0.0.1", "via localhost"]
    # /chat under the rebound name (its page's Origin): connected to us, named as the attacker.
    async with websockets.connect(
        f"ws://{host}/chat", host="127.0.0.1", port=gateway.settings.delegate_port,
        additional_headers=cookie_headers(cookie, f"http://{host}"),
    ) as conn:
        refusal = await recv(conn)
        with pytest.raises(websockets.ConnectionClosed):
            await recv(conn)
    assert refusal["code"] == "forbidden_origin" and conn.close_code == 4403


async def test_the_public_base_url_is_an_origin_of_ours_and_its_host_a_name_of_ours(
    nats_server: NatsServer, tmp_path: Path, bus: Bus
) -> None:
    settings = gateway_settings(role_url(nats_server, "gateway"), tmp_path, public_base_url="https://delegate.example")
    (tmp_path / "client").mkdir()
    async with running_gateway(settings) as gw:
        cookie = await sign_in(gw.http)
        async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as c:
            # Behind a TLS proxy that passes the public name on (no port: https's own).
            public = cookie_headers(cookie, "https://delegate.example") | {"Host": "delegate.example"}
            assert (await c.post("/api/messages", headers=public, json={"text": "via the proxy"})).status_code == 202
            plain = cookie_headers(cookie, "http://delegate.example") | {"Host": "delegate.example"}
            r = await c.post("/api/messages", headers=plain, json={"text": "another scheme"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_origin"
    stored = await owner_inputs(bus)
    assert [m.text for m in stored] == ["via the proxy"]
