"""The /chat WebSocket edge: auth, frame validation, message acks (real nats-server, no ledger needed)."""

import json

import httpx
import pytest
import websockets

from delegate.contracts import ws
from delegate.runtime.bus import Bus

from .helpers import (
    PATIENT_S,
    TOKEN,
    Gateway,
    connect,
    cookie_headers,
    owner_inputs,
    recv,
    recv_until,
    sign_in,
    stream_messages,
)


@pytest.mark.parametrize(
    "how", ["query", "bearer", "cookie", "cookie-same-origin"]
)
async def test_each_kind_of_proof_opens_the_socket(gateway: Gateway, how: str) -> None:
    url = f"{gateway.ws}/chat"
    headers: dict[str, str] = {}
    if how == "query":
        url += f"?token={TOKEN}"
    elif how == "bearer":
        headers["Authorization"] = f"Bearer {TOKEN}"
    else:
        # the real sign-in, not a made-up cookie
        headers |= cookie_headers(await sign_in(gateway.http), gateway.http if how == "cookie-same-origin" else None)
    async with websockets.connect(url, additional_headers=headers) as conn:
        await conn.send(json.dumps({"type": "ping"}))
        assert (await recv_until(conn, lambda f: f["type"] == "pong"))[-1] == {"type": "pong"}


@pytest.mark.parametrize(
    ("url_suffix", "headers"),
    [
        ("", {}),
        ("?token=wrong", {}),
        ("", {"Authorization": "Bearer wrong"}),
        ("", cookie_headers("made-up-session-id-0123456789abcdefghijklmnop", None)),
    ],
)
async def test_missing_or_wrong_token_gets_an_error_frame_and_4401(
    gateway: Gateway, url_suffix: str, headers: dict[str, str]
) -> None:
    async with websockets.connect(f"{gateway.ws}/chat{url_suffix}", additional_headers=headers) as conn:
        frame = await recv(conn)
        assert frame["type"] == "error" and frame["code"] == "unauthorized"
        with pytest.raises(websockets.ConnectionClosed):
            await recv(conn)
        assert conn.close_code == 4401


async def test_a_session_cookie_from_a_foreign_page_is_refused(gateway: Gateway) -> None:
    headers = cookie_headers(await sign_in(gateway.http), "https://evil.example")
    async with websockets.connect(f"{gateway.ws}/chat", additional_headers=headers) as conn:
        frame = await recv(conn)
        assert frame["code"] == "forbidden_origin"
        with pytest.raises(websockets.ConnectionClosed):
            await recv(conn)
        assert conn.close_code == 4403


BAD_FRAMES = [
    ("{nope", "bad_json"),
    ("[1, 2, 3]", "bad_frame"),
    ('{"text": "no type"}', "bad_frame"),
    ('{"type": 7}', "bad_frame"),
    ('{"type": "launch_missiles"}', "unknown_type"),
    ('{"type": "message", "text": 12}', "bad_frame"),
    ('{"type": "message", "text": "hi", "client_msg_id": 5}', "bad_frame"),
    ('{"type": "message", "text": "hi", "extra": true}', "bad_frame"),
    ('{"type": "message", "text": ""}', "empty_text"),
    ('{"type": "message", "text": "   "}', "empty_text"),
    (json.dumps({"type": "message", "text": "x" * (ws.MAX_CHAT_TEXT + 1)}), "text_too_long"),
    (json.dumps({"type": "message", "text": "y" * (1024 * 1024)}), "too_large"),
    ("z" * (1024 * 1024), "too_large"),
    ("w" * (4 * 1024 * 1024 + 1), "too_large"),  # past uvicorn's old limit: closed 1009, unexplained
    ('{"type": "hello", "after_seq": "5"}', "bad_frame"),
    ('{"type": "hello", "after_seq": -1}', "bad_frame"),
]


async def test_bad_frames_get_stable_codes_the_socket_stays_open_and_nothing_is_published(
    gateway: Gateway, bus: Bus
) -> None:
    async with await connect(gateway.ws) as conn:
        for text, code in BAD_FRAMES:
            await conn.send(text)
            frame = (await recv_until(conn, lambda f: f["type"] == "error"))[-1]
            assert frame["code"] == code, (text[:60], frame)
            assert frame["message"]
        await conn.send(b"\x00\x01binary")
        assert (await recv_until(conn, lambda f: f["type"] == "error"))[-1]["code"] == "bad_frame"
        # Still open and still useful after all of that.
        await conn.send(json.dumps({"type": "ping"}))
        await recv_until(conn, lambda f: f["type"] == "pong")
    assert await stream_messages(bus, "AGENT") == []


async def test_a_message_frame_is_acked_with_its_event_id_once_per_client_msg_id(gateway: Gateway, bus: Bus) -> None:
    async with await connect(gateway.ws) as conn:
        acks = []
        for _ in range(2):
            await conn.send(json.dumps({"type": "message", "text": "remind me at 5", "client_msg_id": "c-42"}))
            acks.append((await recv_until(conn, lambda f: f["type"] == "ack"))[-1])
    assert acks[0]["event_id"] == acks[1]["event_id"]
    assert [a["duplicate"] for a in acks] == [False, True]
    assert all(a["client_msg_id"] == "c-42" and a["request"] == "message" for a in acks)
    stored = await owner_inputs(bus)
    assert len(stored) == 1
    assert stored[0].id == acks[0]["event_id"] and stored[0].text == "remind me at 5"


async def test_the_same_client_msg_id_over_http_and_websocket_is_one_message(gateway: Gateway, bus: Bus) -> None:
    owner = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=owner) as c:
        posted = (await c.post("/api/messages", json={"text": "same", "client_msg_id": "x-1"})).json()
    async with await connect(gateway.ws) as conn:
        await conn.send(json.dumps({"type": "message", "text": "same", "client_msg_id": "x-1"}))
        ack = (await recv_until(conn, lambda f: f["type"] == "ack"))[-1]
    assert ack["event_id"] == posted["event_id"] and ack["duplicate"]
    assert len(await stream_messages(bus, "AGENT")) == 1


async def test_commands_without_an_agent_answer_with_an_error_frame(gateway: Gateway) -> None:
    async with await connect(gateway.ws) as conn:
        for kind in ("compact", "end_conversation"):
            await conn.send(json.dumps({"type": kind}))
            frame = (await recv_until(conn, lambda f: f["type"] == "error"))[-1]
            assert frame == {
                "type": "error", "code": "agent_unavailable", "message": frame["message"], "request": kind
            }
