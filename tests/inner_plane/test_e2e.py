"""End to end, all real processes: gateway + ledger + agent + inner plane against the stand-in.

A message comes in over HTTP, the agent answers, its usage crosses the capsule line
(a capsule refresh, announced live on /chat), the span goes idle, the inner plane asks,
the agent checkpoints and closes the span, and the inner plane extracts memories from
exactly that checkpoint's turns.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect

from delegate.contracts.events import Event
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .harness import CAPSULE_MARK, MEMORY_MARK, Harness, model_requests, plane_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def idle_seconds() -> str:
    return "3"


@pytest.fixture
async def harness(system: System, standin: StandinProcess, idle_seconds: str) -> AsyncIterator[Harness]:
    # A capsule line of one input token: the first answer's usage crosses it.
    system.extra_env.update(
        plane_env(standin, IDLE_SPAN_SECONDS=idle_seconds, COMPACT_THRESHOLD="100000", CAPSULE_THRESHOLD="0.00001")
    )
    system.start("ledger", "agent", "inner-plane", "gateway", separate=True)
    h = await Harness.connect(system)
    yield h
    await h.close()


async def test_a_chat_turn_is_capsuled_checkpointed_and_extracted_end_to_end(
    system: System, standin: StandinProcess, harness: Harness
) -> None:
    h = harness
    frames: list[dict[str, Any]] = []

    async def read(ws: Any) -> None:
        async for raw in ws:
            frames.append(json.loads(raw))

    async with ws_connect(f"{system.ws}/chat?token={system.token}") as ws:
        reader = asyncio.create_task(read(ws))
        try:
            async with httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=10) as http:
                text = "Please remember: my sister Ana moved to Porto, and I promised to visit her in May."
                reply = await http.post("/api/messages", json={"text": text, "client_msg_id": "e2e-1"})
                assert reply.status_code == 202, reply.text
                user_id = reply.json()["event_id"]
            user = await h.committed(user_id)
            span_id = user.span_id
            assert span_id is not None

            async def closed() -> list[Event] | None:
                found = await h.events(span_id=span_id, kinds=["span.closed"])
                return found or None

            await eventually(closed, "the agent to close the idle span", timeout=60)

            async def extracted() -> list[Event] | None:
                found = await h.events(kinds=["memory.extracted"])
                return found or None

            memories = await eventually(extracted, "memory.extracted", timeout=60)

            # The refresh runs beside the span, not inside it: on a loaded machine it commits after
            # the span.closed, in no span. So it is awaited in its conversation, not read from the span.
            async def capsuled() -> list[Event] | None:
                found = await h.events(conversation_id=user.conversation_id, kinds=["context.capsule"])
                return found or None

            capsules = await eventually(capsuled, "the capsule to be committed", timeout=60)

            async def live_capsule_notice() -> bool:
                notices = [f["event"] for f in frames if f["type"] == "live"]
                return any(n["kind"] == "context.capsule" and n["status"] == "started" for n in notices)

            await eventually(live_capsule_notice, "the capsule notice on /chat")

            async def capsule_on_chat() -> bool:
                return any(f["type"] == "event" and f["event"]["id"] == capsules[0].id for f in frames)

            # The frame trails the commit: read before it arrives, the last assertion would miss it.
            await eventually(capsule_on_chat, "the committed capsule on /chat")
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    in_span = await h.events(span_id=span_id)
    kinds = [e.kind for e in in_span]
    answer = next(e for e in in_span if e.kind == "message" and e.role == "assistant")
    checkpoints = [e for e in in_span if e.kind == "checkpoint"]
    assert len(checkpoints) == 1 and kinds.count("span.closed") == 1
    capsules = await h.events(conversation_id=user.conversation_id, kinds=["context.capsule"])
    assert [c.payload["reason"] for c in capsules] == ["threshold"]
    assert capsules[0].channel == "inner" and capsules[0].span_id is None

    # The idle check that was accepted names the span's newest activity; none was sent twice.
    checks = await h.idle_checks(span_id)
    seqs = [c.last_activity_seq for c in checks]
    assert len(seqs) == len(set(seqs))
    assert checkpoints[0].payload["through_seq"] == max(seqs)

    # Exactly one extraction, attached to the span's checkpoint, from exactly its turns.
    assert len(memories) == 1
    memory = memories[0]
    assert (memory.span_id, memory.parent_id, memory.payload["checkpoint_id"]) == (
        span_id,
        checkpoints[0].id,
        checkpoints[0].id,
    )
    calls = model_requests(standin, MEMORY_MARK)
    assert len(calls) == 1
    extraction_input = calls[0]["body"]["input"]
    assert text in extraction_input and answer.payload["text"] in extraction_input
    assert capsules[0].payload["text"] not in extraction_input, "capsule text is not a turn"
    assert memory.payload["items"], "the stand-in's plain-text answer is kept as one item"

    # The capsule call was its own request, off the chat chain.
    capsule_calls = model_requests(standin, CAPSULE_MARK)
    assert len(capsule_calls) == 1
    assert "previous_response_id" not in capsule_calls[0]["body"] and capsule_calls[0]["body"]["store"] is False
    assert text in capsule_calls[0]["body"]["input"]

    # /chat carried the committed capsule and memory events, never as messages.
    seen = [f["event"] for f in frames if f["type"] == "event"]
    assert any(e["kind"] == "context.capsule" for e in seen)
    assert all(e["kind"] != "message" or e["role"] in ("user", "assistant") for e in seen)


# The first processes cannot reach the end of the idle window, however slow the machine: the
# kill lands inside it by construction. The restarted inner plane has a short one.
@pytest.mark.parametrize("idle_seconds", ["600"])
async def test_everything_killed_mid_idle_window_still_checkpoints_the_span_once(
    system: System, standin: StandinProcess, harness: Harness
) -> None:
    h = harness
    async with httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=10) as http:
        reply = await http.post("/api/messages", json={"text": "Note: the plumber comes on Tuesday."})
        assert reply.status_code == 202, reply.text
    user = await h.committed(reply.json()["event_id"])
    span_id = user.span_id

    async def answered() -> list[Event] | None:
        found = [e for e in await h.events(span_id=span_id, kinds=["message"]) if e.role == "assistant"]
        return found or None

    await eventually(answered, "the agent's answer")

    # SIGKILL every service and NATS itself, then bring them all back.
    system.extra_env["IDLE_SPAN_SECONDS"] = "3"
    await h.close()
    for name in ("gateway", "inner-plane", "agent", "ledger"):
        system.kill(name)
    assert system.nats is not None
    system.nats.kill()
    system.nats.start()
    for name in ("ledger", "agent", "gateway"):
        system.restart(name)
    system.start("inner-plane")  # a new process: it takes the short window from extra_env
    h = await Harness.connect(system)
    try:

        async def extracted() -> list[Event] | None:
            found = await h.events(kinds=["memory.extracted"])
            return found or None

        memories = await eventually(extracted, "memory.extracted after the restart", timeout=60)

        # The agent's span.closed and the plane's extraction both follow the checkpoint, from two
        # processes: neither is sure to be committed when the other is seen.
        async def closed() -> list[Event] | None:
            found = await h.events(span_id=span_id, kinds=["span.closed"])
            return found or None

        await eventually(closed, "the agent to close the idle span", timeout=60)
        in_span = await h.events(span_id=span_id)
        checkpoints = [e for e in in_span if e.kind == "checkpoint"]
        assert len(checkpoints) == 1
        assert [e.kind for e in in_span].count("span.closed") == 1
        assert [(m.span_id, m.parent_id) for m in memories] == [(span_id, checkpoints[0].id)]
        seqs = [c.last_activity_seq for c in await h.idle_checks(span_id)]
        assert len(seqs) == len(set(seqs)) and checkpoints[0].payload["through_seq"] == max(seqs)
        assert len(model_requests(standin, MEMORY_MARK)) == 1
    finally:
        await h.close()
