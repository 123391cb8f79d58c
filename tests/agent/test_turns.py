"""A text turn on the bus: events in order, deltas, the chain, compaction settings, tools."""

from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts.messages import UserInput
from tests.agent.rig import Probe, input_texts, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]


async def test_turns_record_events_in_order_and_continue_the_chain(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(COMPACT_THRESHOLD="50000").start("ledger", "agent")
    probe = await probe_for(system)
    standin.script({"action": "text", "text": "Hello there, nice to meet you."})

    first = await probe.send("Hi, I am Ana.", client_msg_id="c-1")
    answer = await probe.answer(first.id)
    assert answer.kind == "message", answer
    assert answer.payload["text"] == "Hello there, nice to meet you."
    response_id = answer.payload["response_id"]
    assert response_id

    # model.usage is written beside the turn (its place among these is not fixed): one per call.
    ordered = [e for e in probe.events if e.kind != "model.usage"]
    kinds = [e.kind for e in ordered]
    assert kinds[:5] == ["conversation.opened", "span.opened", "message", "context.usage", "message"]
    user = ordered[2]
    assert (user.id, user.role, user.payload["client_msg_id"]) == (first.id, "user", "c-1")
    usage = ordered[3]
    assert usage.payload["response_id"] == response_id and usage.payload["compact_threshold"] == 50000
    assert usage.payload["input_tokens"] > 0
    assert len({e.conversation_id for e in probe.events}) == 1
    assert ordered[1].payload["type"] == "interaction"
    assert probe.text_of_last_attempt(first.id) == "Hello there, nice to meet you."

    second = await probe.send("What did I say my name was?")
    again = await probe.answer(second.id)
    assert again.kind == "message" and again.parent_id == second.id

    bodies = response_bodies(standin)
    assert len(bodies) == 2
    assert "previous_response_id" not in bodies[0]
    assert bodies[1]["previous_response_id"] == response_id
    for body in bodies:
        assert body["stream"] is True
        assert body["context_management"] == [{"type": "compaction", "compact_threshold": 50000}]
        assert "Delegate" in body["instructions"] and "text chat" in body["instructions"]
    assert input_texts(bodies[1]) == ["What did I say my name was?"]
    # one span, still open, in the one conversation
    assert len(probe.of_kind("span.opened")) == 1 and not probe.of_kind("span.closed")
    state = await probe.state()
    assert state.conversation_id == user.conversation_id and state.span_id == user.span_id
    assert not state.busy and state.usage.input_tokens == probe.of_kind("context.usage")[-1].payload["input_tokens"]


async def test_a_repeated_input_is_answered_once(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    msg = UserInput(text="once please")
    await probe.publish_input(msg)
    await probe.publish_input(msg)  # the same Nats-Msg-Id: JetStream keeps one
    await probe.answer(msg.id)
    later = await probe.send("and now?")
    await probe.answer(later.id)
    answers = [e for e in probe.events if e.parent_id == msg.id and e.kind == "message"]
    assert len(answers) == 1
    assert [e.id for e in probe.events if e.id == msg.id] == [msg.id]


async def test_tool_calls_go_back_as_function_call_outputs_with_compaction_on(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(COMPACT_THRESHOLD="80000").start("ledger", "agent")
    probe = await probe_for(system)
    standin.script(
        {
            "action": "tool_call",
            "name": "notes_create",
            "arguments": {"title": "Call Ana", "body": "at five"},
            "call_id": "call_notes_1",
        },
        {"action": "text", "text": "Noted: call Ana at five.", "match": {"has_tool_output": True}},
    )
    msg = await probe.send("Remind me: call Ana at five.")
    answer = await probe.answer(msg.id)
    assert answer.kind == "message" and answer.payload["text"] == "Noted: call Ana at five."

    bodies = response_bodies(standin)
    assert len(bodies) == 2
    first, continuation = bodies
    assert any(t["name"] == "notes_create" for t in first["tools"])
    assert continuation["previous_response_id"] == probe.of_kind("context.usage")[0].payload["response_id"]
    assert continuation["context_management"] == [{"type": "compaction", "compact_threshold": 80000}]
    assert continuation["instructions"] == first["instructions"]
    [output] = continuation["input"]
    assert output["type"] == "function_call_output" and output["call_id"] == "call_notes_1"
    assert "Call Ana" in output["output"]

    call = probe.of_kind("tool.call")[0]
    result = probe.of_kind("tool.result")[0]
    assert call.payload["name"] == "notes_create" and call.parent_id == msg.id
    assert result.payload["ok"] is True
    assert len(probe.of_kind("context.usage")) == 2  # one per call, the continuation included
    kinds = [e.kind for e in probe.events if e.conversation_id == answer.conversation_id]
    assert kinds.index("tool.call") < kinds.index("tool.result") < len(kinds) - 1
    assert kinds[-1] == "message"
