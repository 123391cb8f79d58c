"""The gateway as a real process (``python -m delegate.gateway``) beside the real ledger and agent.

Readiness as services come and go, a whole chat turn through the agent and the OpenAI stand-in,
and a gateway killed with SIGKILL while clients watch: they reconnect and resume by seq.
"""

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.connection import Connection

from delegate.contracts import topics
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .helpers import PATIENT_S, produce, recv_until, seqs, user_event

pytestmark = pytest.mark.integration


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[StandinProcess]:
    proc = StandinProcess(log_dir=tmp_path / "standin").start()
    yield proc
    proc.stop()


def agent_env(standin: StandinProcess) -> dict[str, str]:
    return {"OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": standin.base_url, "OPENAI_MAX_RETRIES": "1"}


async def chat(system: System) -> websockets.ClientConnection:
    return await websockets.connect(f"{system.ws}/chat?token={system.token}", max_size=None)


async def hello(conn: Connection, after_seq: int) -> list[dict[str, Any]]:
    await conn.send(json.dumps({"type": "hello", "after_seq": after_seq}))
    return await recv_until(conn, lambda f: f["type"] == "ready")


async def readyz(system: System) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=PATIENT_S) as c:
        r = await c.get(f"{system.http}/readyz")
    return r.status_code, r.json()


async def test_readyz_is_503_naming_what_is_missing_until_ledger_and_agent_answer(
    tmp_path: Path, standin: StandinProcess
) -> None:
    system = System(tmp_path / "system", env=agent_env(standin), separate=("ledger",))
    try:
        system.start("gateway")
        assert await readyz(system) == (503, {"status": "unready", "missing": ["ledger", "agent"]})
        system.start("ledger")
        assert await readyz(system) == (503, {"status": "unready", "missing": ["agent"]})
        system.start("agent")
        last: tuple[int, dict[str, Any]] = (0, {})

        async def ready() -> bool:
            nonlocal last
            last = await readyz(system)
            return last[0] == 200

        await eventually(ready, "/readyz 200", interval=0.1, explain=lambda: f"last: {last}")
        assert last == (200, {"status": "ready", "channels": None, "voice": None})  # no pollers or voice here
        system.kill("ledger")
        assert await readyz(system) == (503, {"status": "unready", "missing": ["ledger"]})
    finally:
        system.stop()


async def test_a_chat_turn_end_to_end_through_the_agent(tmp_path: Path, standin: StandinProcess) -> None:
    system = System(tmp_path / "system", env=agent_env(standin))
    try:
        system.start("ledger", "agent", "gateway")
        a, b = await chat(system), await chat(system)
        async with a, b:
            for tab in (a, b):
                await hello(tab, 0)
            await a.send(json.dumps({"type": "message", "text": "What is on today?", "client_msg_id": "t-1"}))
            # Frames may reach tab A before the ack (the user's event, a state): they belong to the
            # timeline compared with tab B's below, so they are kept, not consumed by this wait.
            before_ack = await recv_until(a, lambda f: f["type"] == "ack")
            ack = before_ack[-1]

            def answered(f: dict[str, Any]) -> bool:
                event = f.get("event") or {}
                return f["type"] == "event" and event.get("kind") == "message" and event.get("role") == "assistant"

            frames_a = before_ack[:-1] + await recv_until(a, answered, timeout=60)
            frames_b = await recv_until(b, answered, timeout=60)
        user = next(f["event"] for f in frames_a if f["type"] == "event" and f["event"].get("role") == "user")
        assert user["id"] == ack["event_id"] and user["payload"]["text"] == "What is on today?"
        assert frames_a[-1]["event"]["parent_id"] == ack["event_id"]
        deltas = [f for f in frames_a if f["type"] == "delta"]
        assert deltas and all(d["turn_id"] == ack["event_id"] for d in deltas)
        assert "".join(d["text"] for d in deltas) == frames_a[-1]["event"]["payload"]["text"]
        assert seqs(frames_a) == seqs(frames_b)  # every tab, the same timeline
        assert any(f["type"] == "state" for f in frames_a)

        async with httpx.AsyncClient(timeout=PATIENT_S, base_url=system.http, headers=system.auth()) as c:
            state = await c.get("/api/state")
            assert state.status_code == 200
            body = state.json()
            assert body["busy"] is False and body["conversation_id"] == user["conversation_id"]
            assert set(body) >= {"conversation_id", "span_id", "busy", "compacting", "usage", "capsule",
                                 "last_compacted_at"}
            timeline = (await c.get("/api/timeline")).json()
            assert [e["id"] for e in timeline["events"] if e["kind"] == "message"][-2:] == [
                ack["event_id"], frames_a[-1]["event"]["id"],
            ]

            # While an answer is streaming, compaction is refused: 409 over HTTP, "busy" on the socket.
            standin.script({"action": "stall", "after_deltas": 1, "seconds": 3, "text": "a slow answer"})
            async with await chat(system) as conn:
                await hello(conn, seqs(frames_a)[-1])
                await conn.send(json.dumps({"type": "message", "text": "take your time", "client_msg_id": "t-2"}))
                second = (await recv_until(conn, lambda f: f["type"] == "ack"))[-1]["event_id"]
                await recv_until(conn, lambda f: f["type"] == "delta" and f["turn_id"] == second)
                refused = await c.post("/api/compact")
                assert refused.status_code == 409 and refused.json()["error"]["code"] == "busy"
                await conn.send(json.dumps({"type": "compact"}))
                busy = (await recv_until(conn, lambda f: f["type"] == "error"))[-1]
                assert busy["code"] == "busy" and busy["request"] == "compact"
                await recv_until(conn, lambda f: answered(f) and f["event"]["parent_id"] == second, timeout=60)

                # Idle again: compaction runs (202) and the conversation can be ended (200).
                assert (await c.post("/api/compact")).status_code == 202
                # The compaction runs after the reply: ending the conversation is "busy" until the
                # agent's state says it is done.
                await recv_until(
                    conn, lambda f: f["type"] == "event" and f["event"]["kind"] == "context.compacted", timeout=60
                )
                def compacting_over(f: dict[str, Any]) -> bool:
                    return f["type"] == "state" and not f["compacting"]

                for _ in range(20):  # a retry on "busy" that waits for the frame ending it, not a poll
                    await conn.send(json.dumps({"type": "end_conversation"}))
                    replied = await recv_until(conn, lambda f: f["type"] in ("ack", "error"))
                    done = replied[-1]
                    if done.get("code") != "busy":
                        break
                    # The state saying compaction is over may have come before the "busy" reply:
                    # then it was read by that wait, and a second wait for it would never end.
                    if not any(compacting_over(f) for f in replied):
                        await recv_until(conn, compacting_over, timeout=30)
                assert done == {"type": "ack", "request": "end_conversation", "ok": True}
            ended = await c.post("/api/conversation/end")
            assert ended.status_code == 200 and ended.json() == {"ok": True}
    finally:
        system.stop()


async def test_clients_resume_by_seq_after_the_gateway_process_is_killed(tmp_path: Path) -> None:
    system = System(tmp_path / "system", separate=("gateway",))
    try:
        system.start("ledger", "gateway")
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "test-producer")
        await bus.ensure_streams()

        async def ledger_seqs() -> list[int]:
            reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=0, limit=5000))
            return [e.seq for e in reply.events if e.seq is not None]

        async def committed(count: int) -> list[int]:
            found: list[int] = []

            async def enough() -> bool:
                nonlocal found
                found = await ledger_seqs()
                return len(found) >= count

            await eventually(enough, f"the ledger to commit {count} events", explain=lambda: f"{len(found)} committed")
            return found

        tabs = [await chat(system), await chat(system)]
        seen: list[list[int]] = [[], []]
        for tab in tabs:
            await hello(tab, 0)
        await produce(bus, [user_event(f"before {i}") for i in range(15)])
        first = await committed(15)
        for i, tab in enumerate(tabs):
            seen[i] += seqs(await recv_until(tab, lambda f: f.get("event", {}).get("seq") == first[-1]))

        system.kill("gateway")
        for tab in tabs:
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(tab.recv(), 10)
        await produce(bus, [user_event(f"while down {i}") for i in range(25)])  # nobody is watching
        await committed(40)
        system.procs["gateway"].start()
        system.wait_ready(["gateway"])

        tabs = [await chat(system), await chat(system)]
        for i, tab in enumerate(tabs):
            seen[i] += seqs(await hello(tab, seen[i][-1]))
        await produce(bus, [user_event(f"after {i}") for i in range(10)])
        every = await committed(50)
        for i, tab in enumerate(tabs):
            seen[i] += seqs(await recv_until(tab, lambda f: f.get("event", {}).get("seq") == every[-1]))
            await tab.close()
        assert seen[0] == seen[1] == every
        # Scripts authenticate with ?token=; the server logs those URLs, never the token.
        assert "token=***" in system.procs["gateway"].log_text()
        assert system.token not in system.procs["gateway"].log_text()
        await bus.close()
    finally:
        system.stop()


async def test_a_generated_token_is_printed_once_and_never_logged_however_it_is_used(tmp_path: Path) -> None:
    """The real process, its real log file: the token appears once, when it is made, and never again."""
    system = System(tmp_path / "system", env={"DELEGATE_TOKEN": ""}, separate=("gateway",))
    try:
        system.start("gateway")
        token = (system.runtime / "delegate-token").read_text().strip()
        log = system.procs["gateway"]
        assert log.log_text().count(token) == 1  # the announcement

        async def use_it() -> None:
            async with httpx.AsyncClient(timeout=PATIENT_S, base_url=system.http) as c:
                r = await c.post("/api/session", json={"token": token}, headers={"Origin": system.http})
                assert r.status_code == 204
                await c.get("/api/state", headers={"Authorization": f"Bearer {token}"})
                await c.get(f"/api/timeline?token={token}")
                await c.get("/api/state", headers={"Cookie": f"delegate_session={token}"})
                await c.post("/api/messages", content=b"[" * 1000, headers={
                    "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
            async with websockets.connect(f"{system.ws}/chat?token={token}") as conn:
                await conn.send(json.dumps({"type": "ping"}))
                await recv_until(conn, lambda f: f["type"] == "pong")

        await use_it()
        system.restart("gateway")  # the second start finds the file: it says nothing
        await use_it()
        system.procs["gateway"].stop()
        text = log.log_text()
        assert "WebSocket /chat?token=***" in text  # the access lines were written, redacted
        assert text.count(token) == 1, [line for line in text.splitlines() if token in line]
    finally:
        system.stop()
