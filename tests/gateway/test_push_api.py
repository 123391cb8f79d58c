"""Web Push subscriptions at the gateway (issue #31): the VAPID key, subscribe and revoke, a
subscription dying with its sign-in session, and hostile bodies refused with a clear 4xx and
nothing stored. A real gateway on a real nats-server, logged in as the gateway role."""

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02

from delegate.contracts.push import subscription_id
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from delegate.runtime.webpush import PushStore, load_vapid, public_key
from tests.support.nats import role_url
from tests.support.push_receiver import b64url, unb64url

from .helpers import PATIENT_S, Gateway, auth, cookie_headers, gateway_settings, running_gateway, sign_in

PUSH_SERVICE = "https://fcm.googleapis.com/fcm/send/"  # a public https push service (never contacted)


def browser_json(endpoint: str) -> dict[str, Any]:
    """``PushSubscription.toJSON()`` of a browser with fresh keys."""
    point = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    keys = {"p256dh": b64url(point), "auth": b64url(os.urandom(16))}
    return {"endpoint": endpoint, "expirationTime": None, "keys": keys}


async def stored(bus: Bus) -> list[str]:
    store = PushStore()
    await store.open(bus)
    return sorted(sub.endpoint for sub in await store.all())


@pytest.fixture(name="local_gateway")
async def local_gateway_fixture(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Gateway]:
    """A gateway that lets a local push receiver subscribe (PUSH_ALLOW_PRIVATE_ENDPOINTS)."""
    (tmp_path / "client").mkdir()
    settings = gateway_settings(role_url(nats_server, "gateway"), tmp_path, push_allow_private_endpoints=True)
    async with running_gateway(settings) as gw:
        yield gw


async def test_the_key_is_the_servers_vapid_key_made_once_and_private(gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        assert (await c.get("/api/push/key")).status_code == 401
        first = (await c.get("/api/push/key", headers=auth())).json()["key"]
        again = (await c.get("/api/push/key", headers=auth())).json()["key"]
    assert first == again and len(unb64url(first)) == 65
    runtime = gateway.settings.runtime_data_dir
    assert first == public_key(load_vapid(runtime))
    assert (runtime / "push" / "vapid.pem").stat().st_mode & 0o077 == 0


async def test_subscribe_is_per_browser_and_revocable(gateway: Gateway, bus: Bus) -> None:
    phone = browser_json(PUSH_SERVICE + "phone-abc")
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        made = await c.post("/api/push/subscriptions", json=phone, headers=auth())
        assert made.status_code == 201, made.text
        sub_id = made.json()["id"]
        assert sub_id == subscription_id(phone["endpoint"])
        again = await c.post("/api/push/subscriptions", json=browser_json(phone["endpoint"]), headers=auth())
        assert again.json()["id"] == sub_id  # the same browser, fresh keys: one subscription
        await c.post("/api/push/subscriptions", json=browser_json(PUSH_SERVICE + "laptop-def"), headers=auth())
        assert await stored(bus) == [PUSH_SERVICE + "laptop-def", PUSH_SERVICE + "phone-abc"]

        gone = await c.delete(f"/api/push/subscriptions/{sub_id}", headers=auth())
        assert gone.status_code == 204
        assert (await c.delete(f"/api/push/subscriptions/{sub_id}", headers=auth())).status_code == 204
        assert (await c.delete("/api/push/subscriptions/not-a-subscription", headers=auth())).status_code == 404
    assert await stored(bus) == [PUSH_SERVICE + "laptop-def"]


async def test_a_subscription_dies_with_its_sign_in_session(gateway: Gateway, bus: Bus) -> None:
    mine, other = await sign_in(gateway.http), await sign_in(gateway.http)
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        for cookie, name in ((mine, "mine"), (other, "other")):
            r = await c.post("/api/push/subscriptions", json=browser_json(PUSH_SERVICE + name),
                             headers=cookie_headers(cookie, gateway.http))
            assert r.status_code == 201, r.text
        assert (await c.delete("/api/session", headers=cookie_headers(mine, gateway.http))).status_code == 204
        assert await stored(bus) == [PUSH_SERVICE + "other"]
        await c.post("/api/push/subscriptions", json=browser_json(PUSH_SERVICE + "script"), headers=auth())
        r = await c.delete("/api/sessions", headers=cookie_headers(other, gateway.http))
        assert r.status_code == 204
    assert await stored(bus) == []  # signing out everywhere: no browser is pushed to any more


@pytest.mark.parametrize(("endpoint", "why"), [
    ("http://push.example.com/x", "https"),
    ("https://127.0.0.1/x", "public"),
    ("https://10.1.2.3/x", "public"),
    ("https://[::ffff:192.168.1.1]/x", "public"),
    ("https://169.254.169.254/latest/meta-data", "public"),
    ("https://localhost/x", "public"),
    ("https://user:pw@push.example.com/x", "credentials"),
    ("file:///etc/passwd", "https"),
])
async def test_an_endpoint_that_is_not_a_public_https_push_service_is_refused(
    gateway: Gateway, bus: Bus, endpoint: str, why: str
) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        r = await c.post("/api/push/subscriptions", json=browser_json(endpoint), headers=auth())
    assert r.status_code == 422 and r.json()["error"]["code"] == "endpoint_refused", r.text
    assert why in r.json()["error"]["message"]
    assert await stored(bus) == []


async def test_malformed_and_huge_bodies_get_a_clear_4xx_and_store_nothing(gateway: Gateway, bus: Bus) -> None:
    good = browser_json(PUSH_SERVICE + "x")
    bad_key = {**good, "keys": {"p256dh": b64url(b"\x04" + b"1" * 10), "auth": good["keys"]["auth"]}}
    bad_auth = {**good, "keys": {"p256dh": good["keys"]["p256dh"], "auth": "!!!"}}
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
        cases = [
            (await c.post("/api/push/subscriptions", content=b"{nope",
                          headers={**auth(), "Content-Type": "application/json"}), 400),
            (await c.post("/api/push/subscriptions", json=[good], headers=auth()), 400),
            (await c.post("/api/push/subscriptions", json={"endpoint": good["endpoint"]}, headers=auth()), 422),
            (await c.post("/api/push/subscriptions", json=bad_key, headers=auth()), 422),
            (await c.post("/api/push/subscriptions", json=bad_auth, headers=auth()), 422),
            (await c.post("/api/push/subscriptions", json={**good, "endpoint": PUSH_SERVICE + "y" * 5000},
                          headers=auth()), 413),
            (await c.post("/api/push/subscriptions", content=b"x" * 100_000,
                          headers={**auth(), "Content-Type": "application/json"}), 413),
            (await c.post("/api/push/subscriptions", content=b"endpoint=x",
                          headers={**auth(), "Content-Type": "application/x-www-form-urlencoded"}), 415),
        ]
    for response, expected in cases:
        assert response.status_code == expected, (response.status_code, response.text)
        assert "error" in response.json()
    assert await stored(bus) == []


async def test_a_local_receiver_is_let_in_only_by_the_explicit_setting(local_gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=local_gateway.http) as c:
        r = await c.post("/api/push/subscriptions", json=browser_json("http://127.0.0.1:9/push/a"), headers=auth())
    assert r.status_code == 201, r.text


async def test_a_configured_vapid_key_is_the_one_given_out(nats_server: NatsServer, tmp_path: Path) -> None:
    """PUSH_VAPID_PRIVATE_KEY (services that share no runtime dir): no key file is made."""
    mine = Vapid02()
    mine.generate_keys()
    settings = gateway_settings(role_url(nats_server, "gateway"), tmp_path,
                                push_vapid_private_key=mine.private_pem().decode())
    async with running_gateway(settings) as gw, httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http) as c:
        key = (await c.get("/api/push/key", headers=auth())).json()["key"]
    assert key == public_key(mine)
    assert not (settings.runtime_data_dir / "push").exists()
