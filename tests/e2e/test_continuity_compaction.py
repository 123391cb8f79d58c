"""Compaction changes only the model's working context: the timeline keeps every message."""

from collections.abc import Awaitable, Callable

import pytest

from tests.agent.chat import ChatClient, api, timeline
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import Probe, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_auto_compaction_then_compact_now_replaces_the_chain(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system(COMPACT_THRESHOLD="2500").start("ledger", "agent", "gateway", separate=("agent",))
    probe: Probe = await probe_for(system)
    chat = await ChatClient.open(system)
    try:
        # Long messages until the server-side pass compacts the chain.
        sent: list[str] = []
        for i in range(10):
            text = f"Message {i}: " + "I am telling you a long story about my garden. " * 25
            turn = await chat.send(text)
            sent.append(turn)
            assert (await chat.answer(turn))["kind"] == "message"
            if chat.events("context.compacted"):
                break
        [compacted] = chat.events("context.compacted")
        assert compacted["payload"]["trigger"] == "auto"
        compacting_id = compacted["payload"]["response_id"]
        usage = [e for e in chat.events("context.usage") if e["payload"]["response_id"] == compacting_id]
        assert usage and usage[0]["payload"]["input_tokens"] >= 2500
        assert all(
            b["context_management"] == [{"type": "compaction", "compact_threshold": 2500}]
            for b in response_bodies(standin)
        )
        history = await timeline(system)
        assert [e["id"] for e in history if e["kind"] == "message" and e["role"] == "user"] == sent
        async with api(system) as http:
            state = (await http.get("/api/state")).json()
        assert state["last_compacted_at"] is not None

        # Compact now is refused while a response streams.
        standin.script({"action": "slow", "delay_ms": 100, "text": "A slow answer that takes a while to finish."})
        turn = await chat.send("Say something slowly")
        await chat.wait_for(lambda: chat.deltas(turn), "the answer to start streaming")
        async with api(system) as http:
            refused = await http.post("/api/compact")
        assert refused.status_code == 409, refused.text
        answer = await chat.answer(turn)
        chain = answer["payload"]["response_id"]

        # Compact now: the standalone endpoint on the current chain.
        async with api(system) as http:
            accepted = await http.post("/api/compact")
        assert accepted.status_code == 202, accepted.text
        manual = await chat.wait_for(
            lambda: [e for e in chat.events("context.compacted") if e["payload"]["trigger"] == "manual"],
            "the manual compaction",
        )
        replacement = manual[0]["payload"]["replacement_input"]
        assert replacement and replacement[-1]["type"] == "compaction"
        compact_call = standin.requests("/v1/responses/compact", "POST")[-1]["body"]
        assert compact_call["previous_response_id"] == chain and compact_call["instructions"]
        state = await chat.wait_for(
            lambda: [s for s in chat.of_type("state") if s["last_compacted_at"] and not s["compacting"]],
            "the state after compaction",
        )
        assert state[-1]["usage"]["input_tokens"] < usage[0]["payload"]["input_tokens"]

        # The replacement input survives an agent restart, and is spent by the next good turn.
        system.restart("agent")
        turn = await chat.send("What were we talking about?")
        assert (await chat.answer(turn))["kind"] == "message"
        body = response_bodies(standin)[-1]
        assert "previous_response_id" not in body
        assert body["input"][:-1] == replacement
        assert body["input"][-1]["content"][0]["text"] == "What were we talking about?"
        assert body["context_management"] == [{"type": "compaction", "compact_threshold": 2500}]
        nxt = await chat.send("And after that?")
        answer = await chat.answer(nxt)
        outcome = chat.outcome(turn)
        assert outcome is not None
        assert response_bodies(standin)[-1]["previous_response_id"] == outcome["payload"]["response_id"]
        assert answer["kind"] == "message"

        # Nothing was lost from the timeline, and every message is there once.
        history = await timeline(system)
        users = [e["id"] for e in history if e["kind"] == "message" and e["role"] == "user"]
        assert users == [*sent, *[e["id"] for e in chat.events("message") if e["role"] == "user"][len(sent) :]]
        assert len(users) == len(set(users)) == len(sent) + 3
        ledger = await probe.ledger_events(kinds=["context.compacted"])
        triggers = [e.payload["trigger"] for e in ledger]
        assert triggers.count("manual") == 1 and triggers[0] == "auto"
    finally:
        await chat.close()
