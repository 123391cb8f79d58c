"""Continuity across a full restart and across End conversation: chain, capsule, recent turns."""

from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts.events import ContextCapsule, make_event
from delegate.launcher.procs import NatsServer
from tests.agent.chat import ChatClient, api, timeline
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import Probe, input_texts, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAPSULE = "CAPSULE-7: Ana prefers tea, her dentist is on Tuesday, she asked for short answers."


async def test_restart_reuses_chain_and_capsule_and_end_starts_fresh(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system().start("ledger", "agent", "gateway", separate=True)
    probe: Probe = await probe_for(system)
    chat = await ChatClient.open(system)
    try:
        first = await chat.answer(await chat.send("I prefer tea, by the way."))
        second = await chat.answer(await chat.send("My dentist is on Tuesday."))
        conversation = second["conversation_id"]

        # The inner plane's capsule refresh, as it would publish it.
        await probe.append(
            make_event(
                ContextCapsule(text=CAPSULE, through_seq=second["seq"], through_event_id=second["id"], reason="test"),
                conversation_id=conversation,
                span_id=None,
                channel="inner",
            )
        )
        await chat.wait_for(
            lambda: [s for s in chat.of_type("state") if s["capsule"]["active"]], "the capsule to be active"
        )
        third = await chat.answer(await chat.send("What do I drink?"))
        assert CAPSULE in response_bodies(standin)[-1]["instructions"]
        await chat.close()

        # A full restart of every process, NATS included.
        for name in ("gateway", "agent", "ledger"):
            system.procs[name].stop()
        assert isinstance(system.nats, NatsServer)  # one server: a cluster restarts node by node
        system.nats.restart()
        for name in ("ledger", "agent", "gateway"):
            system.procs[name].start()
        system.wait_ready(["ledger", "agent", "gateway"])

        chat = await ChatClient.open(system)
        assert [e["id"] for e in chat.events("message")][-1] == third["id"]  # the replay has it all
        fourth = await chat.answer(await chat.send("Still there after the restart?"))
        assert fourth["kind"] == "message" and fourth["conversation_id"] == conversation
        body = response_bodies(standin)[-1]
        assert body["previous_response_id"] == third["payload"]["response_id"]
        assert CAPSULE in body["instructions"]
        async with api(system) as http:
            state = (await http.get("/api/state")).json()
        assert state["capsule"]["active"] is True and state["conversation_id"] == conversation
        assert state["span_id"] == fourth["span_id"] == first["span_id"]

        # End conversation: a technical boundary; the history stays.
        async with api(system) as http:
            ended = await http.post("/api/conversation/end")
        assert ended.status_code == 200, ended.text
        await chat.wait_for(lambda: chat.events("conversation.ended"), "the conversation to end")
        closed = chat.events("span.closed")
        assert closed and closed[-1]["payload"]["reason"] == "conversation_ended"

        fifth_id = await chat.send("A new topic: plan my weekend.")
        fifth = await chat.answer(fifth_id)
        assert fifth["kind"] == "message" and fifth["conversation_id"] != conversation
        opened = chat.events("conversation.opened")
        assert opened[-1]["conversation_id"] == fifth["conversation_id"]
        body = response_bodies(standin)[-1]
        assert "previous_response_id" not in body
        assert CAPSULE in body["instructions"]  # the newest capsule, from the ended conversation
        texts = input_texts(body)
        assert texts[-1] == "A new topic: plan my weekend."
        # Recent turns not covered by the capsule come along verbatim, marked; covered ones do not.
        assert any("What do I drink?" in t and t.startswith("[text chat ·") for t in texts[:-1])
        assert any("Still there after the restart?" in t for t in texts[:-1])
        assert not any("My dentist is on Tuesday." in t for t in texts)

        history = await timeline(system)
        said = [e["payload"]["text"] for e in history if e["kind"] == "message" and e["role"] == "user"]
        assert said == [
            "I prefer tea, by the way.",
            "My dentist is on Tuesday.",
            "What do I drink?",
            "Still there after the restart?",
            "A new topic: plan my weekend.",
        ]
        assert {e["conversation_id"] for e in history if e["kind"] == "message"} == {
            conversation,
            fifth["conversation_id"],
        }
        # The capsule is never shown as a message.
        assert not [e for e in history if e["kind"] == "message" and CAPSULE in e["payload"]["text"]]
    finally:
        await chat.close()
