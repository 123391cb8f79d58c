"""memory_remember / memory_recall / memory_forget through a real turn, and a forgotten fact's absence.

Real ledger, memory and agent processes; the stand-in plays the model and calls the tools.
"""

import json
from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts.events import ToolResult
from tests.agent.memory_rig import ON_TIME, SERVICES, agent_bodies, facts, findable, forget, memory_of
from tests.agent.rig import Probe
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]

CODE = "4512"
FACT = f"The owner's locker code is {CODE}."


def tool_result(probe: Probe, name: str) -> ToolResult:
    found = [e.typed(ToolResult) for e in probe.of_kind("tool.result") if e.payload.get("name") == name]
    assert found, f"no {name} result"
    return found[-1]


async def test_a_remembered_then_forgotten_fact_never_reaches_a_later_model_request(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**ON_TIME).start(*SERVICES)
    probe = await probe_for(system)
    standin.script(
        {
            "match": {"input_contains": "blue card", "has_tool": "memory_remember"},
            "action": "tool_call",
            "name": "memory_remember",
            "arguments": {"text": FACT},
            "call_id": "call_remember_1",
        },
        {"match": {"has_tool_output": True, "has_tool": "memory_remember"}, "action": "text", "text": "Noted."},
    )
    said = await probe.send("Please remember my locker code, it is the one on the blue card.")
    assert (await probe.answer(said.id)).kind == "message"
    stored = tool_result(probe, "memory_remember")
    assert stored.ok and FACT in stored.output
    fact = next(f for f in await facts(probe.bus) if f.text == FACT)
    assert said.id in fact.event_ids  # it cites the turn it was said in
    await findable(probe.bus, "what is my locker code", CODE, purpose="turn")

    asked = await probe.send("What is my locker code?")
    assert (await probe.answer(asked.id)).kind == "message"
    assert FACT in memory_of(agent_bodies(standin)[-1])  # retrieved before the forget

    await forget(probe.bus, fact.id)
    after = len(standin.response_requests())
    for text in ("What is my locker code again?", "Which locker code did I give you?"):
        turn = await probe.send(text)
        assert (await probe.answer(turn.id)).kind == "message"
    later = standin.response_requests()[after:]
    assert len([r for r in later if r["body"].get("instructions", "").startswith("You are Delegate")]) >= 2
    for request in later:  # every model request, the agent's or any other service's
        assert CODE not in json.dumps(request["body"]), request["body"].get("instructions", "")[:500]
    for record in probe.of_kind("memory.retrieved")[-2:]:
        assert all(CODE not in item["text"] for item in record.payload["items"])


async def test_recall_and_forget_tools_answer_from_the_memory_service(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**ON_TIME).start(*SERVICES)
    probe = await probe_for(system)
    standin.script(
        {
            "match": {"input_contains": "green tea", "has_tool": "memory_remember"},
            "action": "tool_call",
            "name": "memory_remember",
            "arguments": {"text": "The owner prefers green tea.", "type": "preference"},
            "call_id": "call_tea_1",
        },
        {"match": {"has_tool_output": True}, "action": "text", "text": "Noted."},
    )
    said = await probe.send("I prefer green tea, by the way.")
    assert (await probe.answer(said.id)).kind == "message"
    fact = next(f for f in await facts(probe.bus) if f.text == "The owner prefers green tea.")
    assert fact.type == "preference"
    await findable(probe.bus, "tea preference", "green tea", purpose="turn")

    standin.script(
        {
            "match": {"input_contains": "what tea", "has_tool": "memory_recall"},
            "action": "tool_call",
            "name": "memory_recall",
            "arguments": {"query": "tea preference"},
            "call_id": "call_recall_1",
        },
        {"match": {"has_tool_output": True}, "action": "text", "text": "Green tea."},
    )
    asked = await probe.send("So what tea do I like?")
    assert (await probe.answer(asked.id)).kind == "message"
    recalled = tool_result(probe, "memory_recall")
    assert recalled.ok
    lines = [json.loads(line) for line in recalled.output.splitlines()]
    hit = next(line for line in lines if line["id"] == fact.id)
    assert hit["kind"] == "fact" and hit["type"] == "preference" and hit["date"]

    standin.script(
        {
            "match": {"input_contains": "forget the tea", "has_tool": "memory_forget"},
            "action": "tool_call",
            "name": "memory_forget",
            "arguments": {"id": fact.id},
            "call_id": "call_forget_1",
        },
        {"match": {"has_tool_output": True}, "action": "text", "text": "Forgotten."},
    )
    gone = await probe.send("Please forget the tea thing.")
    assert (await probe.answer(gone.id)).kind == "message"
    forgotten = tool_result(probe, "memory_forget")
    assert forgotten.ok and "green tea" not in forgotten.output  # the text is not said again
    status = next(f for f in await facts(probe.bus) if f.id == fact.id)
    assert status.status == "forgotten"
    assert probe.of_kind("memory.fact.forgotten")

    # An id the memory service does not know is said so, with where to find ids.
    standin.script(
        {
            "match": {"input_contains": "forget fact nothing", "has_tool": "memory_forget"},
            "action": "tool_call",
            "name": "memory_forget",
            "arguments": {"id": "fact_never_made"},
            "call_id": "call_forget_2",
        },
        {"match": {"has_tool_output": True}, "action": "text", "text": "No such fact."},
    )
    unknown = await probe.send("Please forget fact nothing.")
    assert (await probe.answer(unknown.id)).kind == "message"
    refused = tool_result(probe, "memory_forget")
    assert not refused.ok
    assert "no fact with id 'fact_never_made'" in refused.output
