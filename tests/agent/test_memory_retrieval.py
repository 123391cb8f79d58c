"""Retrieval before each turn, with the real ledger, memory and agent processes and the stand-in.

What a model request was given is read from the stand-in's recorded requests (their
instructions: memory is developer context there, never a user message); what memory was
consulted, from the ``memory.retrieved`` events.
"""

from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts.events import Event
from tests.agent.activations import activation, activation_events, reminder
from tests.agent.memory_rig import (
    ON_TIME,
    SERVICES,
    agent_bodies,
    findable,
    memory_of,
    remember,
    section,
)
from tests.agent.rig import Probe, input_texts
from tests.agent.test_channel_replies import sms_input
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]

# No verbatim turns in a fresh working context: what an earlier conversation said reaches the
# model only through memory, so the tests see memory's part alone.
MEMORY_ONLY = {"AGENT_RECENT_TURNS": "0", **ON_TIME}


def retrieved_for(events: list[Event], parent_id: str) -> list[Event]:
    return [e for e in events if e.kind == "memory.retrieved" and e.parent_id == parent_id]


async def test_a_fact_said_by_sms_is_given_to_a_later_chat_turn(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**MEMORY_ONLY).start(*SERVICES)
    probe = await probe_for(system)
    sms = sms_input("My sister Ada moved to Porto last month.", "SM" + "7" * 32)
    await probe.publish_input(sms)
    assert (await probe.answer(sms.id)).kind == "message"
    await findable(probe.bus, "where does my sister live", "Porto")
    await probe.end()  # a new conversation: nothing of the SMS is in the chain any more

    chat = await probe.send("Where does my sister live these days?")
    answer = await probe.answer(chat.id)
    assert answer.kind == "message"
    body = agent_bodies(standin)[-1]
    assert "Porto" in memory_of(body)
    assert not any("Porto" in text for text in input_texts(body))  # context, never a user message

    record = await probe.wait_for(lambda: retrieved_for(probe.of_kind("memory.retrieved"), chat.id), "its record")
    assert len(record) == 1
    given = record[0]
    assert (given.conversation_id, given.span_id, given.channel) == (answer.conversation_id, answer.span_id, "text")
    payload = given.payload
    assert payload["purpose"] == "turn" and payload["query"] == "Where does my sister live these days?"
    assert payload["late"] is False and payload["surfaced"] is True
    assert payload["budget_tokens"] == 1500 and payload["elapsed_ms"] >= 0
    assert any("Porto" in item["text"] for item in payload["items"])
    assert all({"kind", "id", "text", "ts"} <= set(item) for item in payload["items"])


async def test_adaptations_shape_the_instructions(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**ON_TIME).start(*SERVICES)
    probe = await probe_for(system)
    await remember(probe.bus, "Address me as Captain and keep answers to one sentence.", "adaptation")
    await findable(probe.bus, "how do I like answers", "Captain", purpose="turn")

    turn = await probe.send("What should I cook tonight?")
    assert (await probe.answer(turn.id)).kind == "message"
    instructions = agent_bodies(standin)[-1]["instructions"]
    wanted = section(instructions, "## How the owner wants to be answered")
    assert "Address me as Captain and keep answers to one sentence." in wanted
    assert instructions.index("## How the owner wants to be answered") < instructions.index("## Now")
    record = await probe.wait_for(lambda: retrieved_for(probe.of_kind("memory.retrieved"), turn.id), "the record")
    assert any(i.get("type") == "adaptation" and "Captain" in i["text"] for i in record[0].payload["items"])


async def test_nothing_found_is_recorded_too(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**ON_TIME).start(*SERVICES)
    probe = await probe_for(system)
    turn = await probe.send("Zyxwvut qwertz?")
    assert (await probe.answer(turn.id)).kind == "message"
    record = await probe.wait_for(lambda: retrieved_for(probe.of_kind("memory.retrieved"), turn.id), "the record")
    assert record[0].payload["items"] == [] and record[0].payload["surfaced"] is True
    assert "## Memory" not in agent_bodies(standin)[-1]["instructions"]


async def test_late_results_reach_the_next_request_only_when_novel(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    # Every search is late: the request never waits for memory.
    system = make_system(MEMORY_RETRIEVAL_WAIT_MS="0").start(*SERVICES)
    probe = await probe_for(system)
    bike = "The owner's bike is a red Brompton with a basket."
    await remember(probe.bus, bike)
    await findable(probe.bus, "which bike do I have", "Brompton", purpose="turn")

    first = await probe.send("Which bike do I have?")
    assert (await probe.answer(first.id)).kind == "message"
    late = await probe.wait_for(lambda: retrieved_for(probe.of_kind("memory.retrieved"), first.id), "the late record")
    assert (late[0].payload["late"], late[0].payload["surfaced"]) == (True, True)
    assert any(i["text"] == bike for i in late[0].payload["items"])

    second = await probe.send("Is my bike good for hills?")
    assert (await probe.answer(second.id)).kind == "message"
    again = await probe.wait_for(lambda: retrieved_for(probe.of_kind("memory.retrieved"), second.id), "its record")
    # The second search found the bike again, but the model had it by then: not surfaced.
    assert (again[0].payload["late"], again[0].payload["surfaced"], again[0].payload["reason"]) == (
        True,
        False,
        "not_novel",
    )
    assert again[0].payload["items"] == []
    assert any(d["why"] == "same_id" for d in again[0].payload.get("dropped") or [])

    third = await probe.send("Thanks, and what about the weather?")
    assert (await probe.answer(third.id)).kind == "message"
    bodies = agent_bodies(standin)
    assert len(bodies) == 3
    assert "Brompton" not in bodies[0]["instructions"]  # the first request did not wait
    assert bike in memory_of(bodies[1])  # the late novel result, given to the next request
    assert "Brompton" not in bodies[2]["instructions"]  # the not-novel one was added to nothing


async def test_memory_down_the_turn_goes_on_without_it(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**ON_TIME).start(*SERVICES, separate=("agent", "memory"))
    probe = await probe_for(system)
    before = await probe.send("Hello there")
    assert (await probe.answer(before.id)).kind == "message"
    system.procs["memory"].stop()

    turns = [await probe.send("Are you still there?"), await probe.send("And now?")]
    for turn in turns:
        answer = await probe.answer(turn.id)
        assert answer.kind == "message", answer  # not turn.failed: memory is not the answer
    assert not [e for t in turns for e in retrieved_for(probe.of_kind("memory.retrieved"), t.id)]
    assert all("## Memory" not in b["instructions"] for b in agent_bodies(standin)[-2:])
    log = system.procs["agent"].log_text()
    assert log.count("goes on without memory") == 1  # once per outage, not once per turn


async def test_an_activation_is_given_memory_for_its_signals(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**ON_TIME).start(*SERVICES)
    probe = await probe_for(system)
    await remember(probe.bus, "Ada's birthday present should be a book about Porto.")
    await findable(probe.bus, "birthday present for Ada", "book about Porto", purpose="activation")

    batch = activation(reminder("Buy Ada's birthday present"))
    await probe.publish_input(batch)
    events = await activation_events(probe, batch.id)
    record = [e for e in events if e.kind == "memory.retrieved"]
    assert len(record) == 1 and record[0].parent_id == batch.id and record[0].channel == "inner"
    assert record[0].payload["purpose"] == "activation" and "Buy Ada's birthday present" in record[0].payload["query"]
    body = agent_bodies(standin)[-1]
    assert "book about Porto" in memory_of(body)
