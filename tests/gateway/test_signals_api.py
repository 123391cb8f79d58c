"""``POST /api/signals`` against the real system: gateway, nats, ledger and inner plane processes.

A good signal is published on the INNER stream and reaches the ledger as an ``inner.signal``
event; every bad one gets its clear 4xx and leaves the stream exactly as it was.
"""

import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from delegate.contracts.ids import format_ts, utcnow
from delegate.contracts.limits import MAX_JSON_DEPTH
from delegate.contracts.signals import OWNER_SIGNAL_KINDS
from delegate.runtime.bus import Bus
from tests.support.system import System, module_system, probe_bus
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[System]:
    """One system for the module: no test here changes anything another one reads."""
    with module_system(
        tmp_path_factory.mktemp("signals-api"), request, "ledger", "inner-plane", "gateway"
    ) as system:
        yield system


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as bus:
        yield bus


async def inner_last_seq(bus: Bus) -> int:
    return int((await bus.js.stream_info("INNER")).state.last_seq)


async def signal_events(http: httpx.AsyncClient, signal_id: str) -> list[dict[str, Any]]:
    reply = await http.get("/api/timeline", params={"limit": 5000})
    reply.raise_for_status()
    return [e for e in reply.json()["events"] if e["kind"] == "inner.signal" and e["id"] == signal_id]


async def test_a_signal_is_published_and_reaches_the_ledger_as_an_inner_signal_event(
    http: httpx.AsyncClient, bus: Bus
) -> None:
    expires = format_ts(utcnow() + timedelta(hours=1))
    body = {
        "kind": "script",
        "urgency": "urgent",
        "dedup_key": "backup-nightly",
        "expires_at": expires,
        "reply_via": "sms",
        "payload": {"text": "The nightly backup failed", "data": {"host": "nas", "code": 3}},
    }
    reply = await http.post("/api/signals", json=body)
    assert reply.status_code == 202, reply.text
    signal_id = reply.json()["id"]
    assert reply.json() == {"id": signal_id, "duplicate": False}

    async def stored() -> list[dict[str, Any]]:
        return await signal_events(http, signal_id)

    [event] = await eventually(stored, "the signal's inner.signal event in the ledger")
    assert event["channel"] == "inner" and event["span_id"] is None
    payload = event["payload"]
    assert (payload["source"], payload["signal_kind"], payload["urgency"], payload["dedup_key"]) == (
        "api", "script", "urgent", "backup-nightly",
    )
    signal = payload["signal"]
    assert (signal["id"], signal["kind"], signal["source"], signal["reply_via"]) == (signal_id, "script", "api", "sms")
    assert signal["payload"] == {"text": "The nightly backup failed", "data": {"host": "nas", "code": 3}}


async def test_a_task_report_from_ci_is_accepted(http: httpx.AsyncClient) -> None:
    reply = await http.post(
        "/api/signals", json={"kind": "task.failed", "payload": {"task_id": "ci-4411", "error": "3 tests failed"}}
    )
    assert reply.status_code == 202, reply.text


async def test_a_retried_post_with_the_same_idempotency_key_is_stored_once(http: httpx.AsyncClient, bus: Bus) -> None:
    body = {"kind": "script", "payload": {"text": "door opened"}}
    headers = {"Idempotency-Key": "ha-automation-7:2026-12-02T06:00"}
    before = await inner_last_seq(bus)
    first = await http.post("/api/signals", json=body, headers=headers)
    again = await http.post("/api/signals", json=body, headers=headers)
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert again.json() == {"id": first.json()["id"], "duplicate": True}
    assert await inner_last_seq(bus) == before + 1

    async def stored() -> list[dict[str, Any]]:
        return await signal_events(http, first.json()["id"])

    assert len(await eventually(stored, "the idempotent signal in the ledger")) == 1


PAST = "2020-01-01T00:00:00Z"


def script(**fields: Any) -> dict[str, Any]:
    """A good script signal, changed by ``fields``."""
    return {"kind": "script", "payload": {"text": "hello"}, **fields}


@pytest.mark.parametrize(
    ("body", "status", "code", "names"),
    [
        pytest.param(b"{not json", 400, "bad_json", "", id="bad-json"),
        pytest.param(b"[1, 2]", 400, "bad_request", "object", id="not-an-object"),
        pytest.param(script(kind="reminder.due"), 422, "unknown_kind", "script", id="service-kind"),
        pytest.param(script(kind="weather"), 422, "unknown_kind", "task.failed", id="unknown-kind"),
        pytest.param({"payload": {"text": "hello"}}, 422, "unknown_kind", "kind", id="no-kind"),
        pytest.param(script(payload={}), 422, "bad_signal", "payload.text", id="payload-missing-text"),
        pytest.param(script(payload={"text": "x" * 5000}), 422, "bad_signal", "payload.text", id="text-too-long"),
        pytest.param(
            {"kind": "task.finished", "payload": {"goal": "g"}}, 422, "bad_signal", "payload.task_id", id="task-no-id"
        ),
        pytest.param(script(urgency="now"), 422, "bad_signal", "urgency", id="urgency"),
        pytest.param(script(reply_via="fax"), 422, "bad_signal", "reply_via", id="reply-via"),
        pytest.param(script(colour="red"), 422, "bad_signal", "colour", id="unknown-field"),
        pytest.param(script(expires_at=PAST), 422, "expired", "expires_at", id="past-expiry"),
        pytest.param(script(expires_at="2099-01-01T00:00:00"), 422, "bad_signal", "timezone", id="naive-expiry"),
        pytest.param(script(id="mine"), 422, "forbidden_field", "id", id="own-id"),
        pytest.param(script(source="me"), 422, "forbidden_field", "source", id="own-source"),
        pytest.param(script(ts=PAST), 422, "forbidden_field", "ts", id="own-ts"),
        pytest.param(
            script(payload={"text": "big", "data": {"blob": "x" * 70_000}}), 413, "too_large", "bytes", id="too-big"
        ),
    ],
)
async def test_bad_signals_get_a_clear_4xx_and_store_nothing(
    http: httpx.AsyncClient, bus: Bus, body: Any, status: int, code: str, names: str
) -> None:
    before = await inner_last_seq(bus)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await http.post("/api/signals", content=content, headers={"Content-Type": "application/json"})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code
    assert names in error["message"]
    assert "Traceback" not in reply.text
    assert await inner_last_seq(bus) == before


async def test_an_unknown_kind_names_the_kinds_allowed(http: httpx.AsyncClient) -> None:
    reply = await http.post("/api/signals", json={"kind": "email.received", "payload": {}})
    assert reply.status_code == 422
    assert reply.json()["allowed"] == list(OWNER_SIGNAL_KINDS)


async def test_without_the_owner_token_nothing_is_taken(running: System, bus: Bus) -> None:
    before = await inner_last_seq(bus)
    body = script()
    async with httpx.AsyncClient(base_url=running.http, timeout=10) as anonymous:
        missing = await anonymous.post("/api/signals", json=body)
        wrong = await anonymous.post("/api/signals", json=body, headers={"Authorization": "Bearer not-the-token"})
    assert missing.status_code == wrong.status_code == 401
    assert missing.json()["error"]["code"] == "unauthorized"
    assert await inner_last_seq(bus) == before


async def test_a_form_post_is_refused_before_it_is_read(http: httpx.AsyncClient, bus: Bus) -> None:
    before = await inner_last_seq(bus)
    reply = await http.post("/api/signals", data={"kind": "script"})
    assert reply.status_code == 415
    assert await inner_last_seq(bus) == before


async def test_a_depth_sweep_from_1_to_1000_is_stored_or_refused_never_accepted_and_lost(
    http: httpx.AsyncClient, bus: Bus
) -> None:
    """The probe: 197-252 deep was 202 then dead-lettered by the inner plane, 253+ a 500.

    Every depth is either stored (its ``inner.signal`` event written by the real inner plane
    and the ledger) or refused with a 4xx naming the limit; never a 5xx, never 202-then-lost.
    """
    accepted: dict[int, str] = {}
    refused: dict[int, int] = {}
    for depth in range(1, 1001):
        data = '{"a":' * depth + "1" + "}" * depth
        body = f'{{"kind": "script", "payload": {{"text": "depth {depth}", "data": {data}}}}}'
        reply = await http.post("/api/signals", content=body.encode(), headers={"Content-Type": "application/json"})
        assert reply.status_code < 500, (depth, reply.text)
        if reply.status_code == 202:
            accepted[depth] = reply.json()["id"]
        else:
            assert f"at most {MAX_JSON_DEPTH} levels" in reply.text, (depth, reply.text)
            refused[depth] = reply.status_code
    # The body is the first level, payload the second: data may nest MAX_JSON_DEPTH - 2 deep.
    assert sorted(accepted) == list(range(1, MAX_JSON_DEPTH - 1)), sorted(accepted)
    assert set(refused.values()) == {400}

    async def stored() -> dict[str, dict[str, Any]] | None:
        reply = await http.get("/api/timeline", params={"limit": 5000})
        reply.raise_for_status()
        found = {e["id"]: e for e in reply.json()["events"] if e["kind"] == "inner.signal"}
        return found if set(accepted.values()) <= set(found) else None

    events = await eventually(stored, "an inner.signal event for every accepted depth", 120)
    deepest = events[accepted[MAX_JSON_DEPTH - 2]]["payload"]["signal"]["payload"]["data"]
    for _ in range(MAX_JSON_DEPTH - 2):
        deepest = deepest["a"]
    assert deepest == 1  # stored whole, not cut or nulled
