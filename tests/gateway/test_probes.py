"""What probing the running gateway found, each pinned down: nesting, seq bounds, input parity.

A real gateway (uvicorn in this process) on a real nats-server; no ledger or agent is needed
for these edges.
"""

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.messages import AgentCommand, CommandReply
from delegate.runtime.bus import Bus
from tests.support.waiting import eventually

from .helpers import PATIENT_S, Gateway, auth, connect, owner_inputs, recv_until, stream_messages

NESTED = b"[" * 1000 + b"]" * 1000  # 2 KB


@pytest.mark.parametrize(("path", "headers"), [("/api/session", {}), ("/api/messages", auth())])
async def test_deeply_nested_json_is_a_400_and_one_log_line_not_a_500_and_a_traceback(
    gateway: Gateway, bus: Bus, caplog: pytest.LogCaptureFixture, path: str, headers: dict[str, str]
) -> None:
    with caplog.at_level(logging.DEBUG):
        async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as c:
            r = await c.post(path, content=NESTED, headers=headers | {"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {"code": "bad_json", "message": "the body is nested too deeply (at most 64 levels)"}
    mine = [rec for rec in caplog.records if rec.name.startswith(("delegate", "uvicorn.error"))]
    assert not [rec for rec in mine if rec.exc_info or "Traceback" in rec.getMessage()]
    assert len([rec for rec in mine if "nested too deeply" in rec.getMessage()]) == 1
    assert await stream_messages(bus, "AGENT") == []


async def test_a_deeply_nested_frame_gets_an_error_frame_and_the_socket_stays_open(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        async with await connect(gateway.ws) as conn:
            await conn.send(NESTED.decode())
            frame = (await recv_until(conn, lambda f: f["type"] == "error"))[-1]
            assert frame["code"] == "bad_json" and "nested" in frame["message"]
            await conn.send(json.dumps({"type": "ping"}))
            await recv_until(conn, lambda f: f["type"] == "pong")
    assert not [rec for rec in caplog.records if rec.exc_info]


async def test_hello_beyond_the_largest_seq_is_the_clients_fault_not_try_again_later(gateway: Gateway) -> None:
    """after_seq >= 2^63 overflowed in the ledger and closed with 1013, so a client retried forever."""
    async with await connect(gateway.ws) as conn:
        for after in (2**63, 2**64 + 5):
            await conn.send(json.dumps({"type": "hello", "after_seq": after}))
            frame = (await recv_until(conn, lambda f: f["type"] == "error"))[-1]
            assert frame["code"] == "bad_frame" and frame["request"] == "hello", frame
            assert "after_seq" in frame["message"]
        # Still open: the client can correct itself on the same connection.
        await conn.send(json.dumps({"type": "ping"}))
        await recv_until(conn, lambda f: f["type"] == "pong")
        assert conn.close_code is None


# (body, REST status, REST code, WebSocket code): REST and /chat validate through one model.
SAME_RULES = [
    ({"text": "hi", "client_msg_id": ""}, 400, "bad_request", "bad_frame"),
    ({"text": "hi", "client_msg_id": "x" * 201}, 400, "bad_request", "bad_frame"),
    ({"text": "\u200b\u200b\u200b"}, 400, "empty_text", "empty_text"),
    ({"text": " \u2060 \ufeff \u200d\t"}, 400, "empty_text", "empty_text"),
    ({"text": "\u3164\u2800\u00a0\u3000"}, 400, "empty_text", "empty_text"),
    ({"text": ""}, 400, "empty_text", "empty_text"),
    ({"text": "x" * 32_001}, 413, "text_too_long", "text_too_long"),
]


@pytest.mark.parametrize(("body", "rest_status", "rest_code", "ws_code"), SAME_RULES)
async def test_rest_and_websocket_refuse_the_same_messages(
    gateway: Gateway, bus: Bus, body: dict[str, str], rest_status: int, rest_code: str, ws_code: str
) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        r = await c.post("/api/messages", json=body)
    assert (r.status_code, r.json()["error"]["code"]) == (rest_status, rest_code), r.text
    async with await connect(gateway.ws) as conn:
        await conn.send(json.dumps({"type": "message", **body}))
        frame = (await recv_until(conn, lambda f: f["type"] in ("error", "ack")))[-1]
    assert frame["type"] == "error" and frame["code"] == ws_code, frame
    assert await stream_messages(bus, "AGENT") == []


async def test_text_with_visible_characters_among_invisible_ones_is_accepted(gateway: Gateway, bus: Bus) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        r = await c.post("/api/messages", json={"text": "\u200bok\u200b"})
    assert r.status_code == 202
    async with await connect(gateway.ws) as conn:
        await conn.send(json.dumps({"type": "message", "text": " \u00e9 ", "client_msg_id": "c-1"}))
        frame = (await recv_until(conn, lambda f: f["type"] in ("error", "ack")))[-1]
    assert frame["type"] == "ack"
    assert [m.text for m in await owner_inputs(bus)] == [
        "\u200bok\u200b", " \u00e9 "
    ]


async def test_repeated_command_frames_wait_on_one_request_not_one_task_each(gateway: Gateway, bus: Bus) -> None:
    """A second compact while one is in flight is answered "busy" at once."""
    release = asyncio.Event()
    seen: list[AgentCommand] = []

    async def slow_compact(cmd: AgentCommand) -> CommandReply:
        seen.append(cmd)
        await release.wait()
        return CommandReply()

    await bus.serve(topics.AGENT_COMPACT, slow_compact)
    await bus.nc.flush()  # the server knows the responder before the gateway asks
    async with await connect(gateway.ws) as conn:
        await conn.send(json.dumps({"type": "compact"}))
        await _until_seen(seen, 1)
        for _ in range(20):
            await conn.send(json.dumps({"type": "compact"}))
        busy = [f for f in await recv_until(conn, _nth_error("busy", 20)) if f.get("code") == "busy"]
        assert len(busy) == 20 and all(f["request"] == "compact" for f in busy)
        release.set()
        await recv_until(conn, lambda f: f == {"type": "ack", "request": "compact", "ok": True})
        # Once it is answered, the next one goes through.
        release.clear()
        await conn.send(json.dumps({"type": "compact"}))
        await _until_seen(seen, 2)
        release.set()
        await recv_until(conn, lambda f: f.get("type") == "ack")
    assert len(seen) == 2


async def _until_seen(seen: list[AgentCommand], n: int) -> None:
    await eventually(lambda: len(seen) >= n, f"{n} compact requests at the agent")


def _nth_error(code: str, n: int) -> Callable[[dict[str, Any]], bool]:
    count = 0

    def matches(frame: dict[str, Any]) -> bool:
        nonlocal count
        if frame.get("type") == "error" and frame.get("code") == code:
            count += 1
        return count >= n

    return matches


def deep(levels: int) -> bytes:
    return b'{"x":' * levels + b"1" + b"}" * levels


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/tasks", b'{"goal": "g", "budget": ' + deep(70) + b"}"),
        ("PATCH", "/api/memories/f-1", b'{"text": "t", "type": ' + deep(70) + b"}"),
        ("POST", "/api/messages", b'{"text": "t", "extra": ' + deep(200) + b"}"),
        ("POST", "/api/signals", b'{"kind": "script", "payload": {"text": "t", "data": ' + deep(197) + b"}}"),
    ],
    ids=["task-body", "memory-patch", "message", "signal"],
)
async def test_every_json_route_refuses_a_body_past_the_depth_limit_naming_it(
    gateway: Gateway, bus: Bus, method: str, path: str, body: bytes
) -> None:
    """One bound for every route (contracts.limits): what the gateway takes, every consumer decodes."""
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        r = await c.request(method, path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "bad_json" and "at most 64 levels" in r.json()["error"]["message"]
    assert await stream_messages(bus, "AGENT") == [] and await stream_messages(bus, "INNER") == []


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_nan_and_infinity_are_refused_not_stored_as_null(gateway: Gateway, bus: Bus, number: str) -> None:
    body = b'{"kind": "script", "payload": {"text": "t", "data": {"reading": ' + number.encode() + b"}}}"
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        r = await c.post("/api/signals", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json", r.text
    assert await stream_messages(bus, "INNER") == []


@pytest.mark.parametrize("goal", ["\u200b\u200b", "\ufeff", "\u3164 \u200d", "   "])
async def test_a_task_goal_of_invisible_characters_is_empty_text_as_on_chat(gateway: Gateway, goal: str) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as c:
        task = await c.post("/api/tasks", json={"goal": goal})
        message = await c.post("/api/messages", json={"text": goal})
    assert (task.status_code, task.json()["error"]["code"]) == (400, "empty_text"), task.text
    assert (message.status_code, message.json()["error"]["code"]) == (400, "empty_text"), message.text
